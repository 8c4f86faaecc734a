"""The schema documents itself, and the docs and hints built from it stay true."""

import dataclasses
import re
from pathlib import Path

import pytest

from rlcore.config.foreign import DERIVED_KEYS
from rlcore.config.foreign.near_misses import FOREIGN_KEYS
from rlcore.config.reference import BEGIN, END, key_reference
from rlcore.config.schema import SCHEMAS
from rlcore.config.validate import schema_paths

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"
ALL_PATHS = {path for schema in SCHEMAS.values() for path, _, _ in schema_paths(schema)}


@pytest.mark.parametrize("mode", SCHEMAS)
def test_every_key_has_a_one_line_doc(mode):
    for path, field, _ in schema_paths(SCHEMAS[mode]):
        doc = field.metadata.get("doc", "")
        assert doc.strip(), f"{path} has no doc"
        assert "\n" not in doc, f"{path}: the doc must be one line"


def test_the_required_rlinf_and_verl_names_exist():
    names = {
        "adv_type",
        "loss_type",
        "loss_agg_func",
        "clip_ratio_low",
        "clip_ratio_high",
        "clip_ratio_c",
        "value_clip",
        "huber_delta",
        "entropy_bonus",
        "normalize_advantages",
        "group_size",
        "gamma",
        "gae_lambda",
        "kl_penalty",
        "use_kl_in_reward",
        "kl_ctrl.type",
        "kl_ctrl.kl_coef",
        "kl_ctrl.horizon",
        "kl_ctrl.target_kl",
        "use_kl_loss",
        "kl_loss_coef",
        "kl_loss_type",
    }
    # algorithm.loss_type follows from the mode: RLinf's spelling is accepted when it says so
    assert {f"algorithm.{n}" for n in names} <= ALL_PATHS | set(DERIVED_KEYS)


@pytest.mark.parametrize(
    ("config", "loss_type"),
    [("embodied/cartpole_ppo", "actor_critic"), ("reasoning/tiny_arith_ppo", "actor")],
)
def test_rlinfs_loss_type_is_accepted_when_it_says_what_the_mode_does(config, loss_type, capsys):
    from rlcore.config import load_config

    loaded = load_config(config, [f"algorithm.loss_type={loss_type}"])
    assert loaded.derived.loss_type == loss_type
    assert (
        f"rlcore: algorithm.loss_type (rlcore's earlier key) is derived.loss_type here, which "
        f"follows from the mode ({loaded.mode}: {loss_type}); leave it out"
    ) in capsys.readouterr().err


def test_docs_embed_the_current_key_reference():
    text = DOC.read_text()
    generated = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert generated == key_reference().strip(), (
        "docs/config.md is stale: run `rlcore keys --write docs/config.md`"
    )


def test_foreign_names_point_at_real_keys_and_shadow_none():
    for foreign, ours in FOREIGN_KEYS.items():
        assert ours in ALL_PATHS, f"{foreign} -> {ours}, which is not a key"
        assert foreign not in ALL_PATHS, f"{foreign} is an rlcore key; the hint would never show"


def test_every_foreign_name_has_a_row_in_the_mapping_doc():
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| `")]
    for foreign, ours in FOREIGN_KEYS.items():
        leaf = foreign.split(".")[-1]
        assert any(
            re.search(rf"`[\w.()/ ]*\b{leaf}\b[\w.()/ ]*`", row) and f"`{ours}`" in row
            for row in rows
        ), f"docs/config.md has no row mapping {foreign} to {ours}"


def test_schema_dataclasses_are_keyword_only():
    for schema in SCHEMAS.values():
        for _, _, tp in schema_paths(schema):
            if dataclasses.is_dataclass(tp):
                assert all(f.kw_only for f in dataclasses.fields(tp)), tp


def test_every_numeric_key_declares_its_range():
    import typing

    from rlcore.config.schema import SCHEMAS
    from rlcore.config.validate import schema_paths

    def numeric(tp):
        if tp in (int, float):
            return True
        if typing.get_origin(tp) is dict:
            return False
        return any(numeric(arg) for arg in typing.get_args(tp))

    missing = [
        path
        for schema in SCHEMAS.values()
        for path, field, tp in schema_paths(schema)
        if numeric(tp) and "range" not in field.metadata
    ]
    assert not missing, f"numeric keys without a range: {missing}"
