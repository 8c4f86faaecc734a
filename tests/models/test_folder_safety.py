"""Nothing in a model folder runs, and no head starts at random: a folder naming custom code
(``auto_map``), one holding its weights as pickle only, and a reward model without its score
head are refused in one line by the folder check the dry run makes (``preflight``), and the
loads behind it pass ``trust_remote_code=False`` and ``use_safetensors=True`` (so even unchecked
they import and unpickle nothing)."""

import json
import os
import re
import shutil
import threading

import pytest
import torch
from safetensors.torch import load_file, save_file

from rlcore.config import ConfigError, load_config
from rlcore.models import lm
from rlcore.models.lm import check_model_dir, load_causal_lm, load_tokenizer
from rlcore.placement import plan_for_config
from rlcore.rewards import model as rm
from rlcore.rewards.model import check_reward_model
from rlcore.runners.preflight import preflight
from tests.rewards.test_model import reward_model  # noqa: F401 (the fixture)
from tests.workers.test_shard_reader import planted


def copied(folder, where):
    shutil.copytree(folder, where)
    return where


def edit_json(file, **changes):
    described = json.loads(file.read_text())
    described.update(changes)
    file.write_text(json.dumps(described))


def dry_run_refusal(tmp_path, *overrides):
    """The line the dry run's checks (``preflight``) refuse the tiny task with ``overrides``."""
    config = load_config(
        "reasoning/tiny_arith_ppo",
        [f"runner.output_dir={tmp_path / 'out'}", "warmup.steps=0", *overrides],
    )
    with pytest.raises(ConfigError) as refused:
        preflight(config, plan_for_config(config))
    return str(refused.value)


def with_custom_code(folder, marker):
    """``folder`` made into a model whose config maps its classes to the folder's own module,
    which writes ``marker`` when imported: proof that it ran."""
    (folder / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    edit_json(
        folder / "config.json",
        model_type="evil",
        auto_map={"AutoConfig": "modeling_evil.EvilConfig"},
    )
    return folder


def test_a_folder_naming_custom_code_is_refused_and_its_code_never_imported(tiny_lm, tmp_path):
    _, dirs = tiny_lm
    marker = tmp_path / "ran"
    evil = with_custom_code(copied(dirs.actor, tmp_path / "evil"), marker)
    said = f"actor.model.path: {evil / 'config.json'} names custom code (auto_map: AutoConfig)"
    with pytest.raises(
        ConfigError, match="^" + re.escape(f"{said}, which rlcore never runs; ")
    ) as refused:
        check_model_dir(str(evil), "actor.model.path", tokenizer=True)
    assert "\n" not in str(refused.value)
    line = dry_run_refusal(tmp_path, f"actor.model.path={evil}")
    assert line.startswith(said) and "\n" not in line
    # a loader given the folder directly (an exported policy) refuses it the same way...
    with pytest.raises(ConfigError, match="names custom code"):
        load_causal_lm(evil, "float32")
    # ...and, unchecked, transformers refuses instead of asking on stdin (no trust_remote_code
    # given: pytest's captured stdin would raise OSError) or importing it
    lm.check_no_custom_code, saved = (lambda *args: None), lm.check_no_custom_code
    try:
        with pytest.raises(ValueError, match="custom code"):
            load_causal_lm(evil, "float32")
    finally:
        lm.check_no_custom_code = saved
    assert not marker.exists()


def test_a_tokenizer_naming_custom_code_is_refused(tiny_lm, tmp_path):
    _, dirs = tiny_lm
    folder = copied(dirs.actor, tmp_path / "model")
    edit_json(
        folder / "tokenizer_config.json",
        auto_map={"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]},
    )
    with pytest.raises(ConfigError, match=r"tokenizer_config.json names custom code \(auto_map"):
        load_tokenizer(folder)
    line = dry_run_refusal(tmp_path, f"actor.model.path={folder}")
    assert "tokenizer_config.json names custom code" in line and "\n" not in line
    # a FIFO in its place would block every reader of the folder: refused unread
    (folder / "tokenizer_config.json").unlink()
    os.mkfifo(folder / "tokenizer_config.json")
    done = []
    checking = threading.Thread(target=_refused, args=(folder, done), daemon=True)
    checking.start()
    checking.join(timeout=20)
    assert done == [
        f"actor.model.path: {folder / 'tokenizer_config.json'} is not a regular file; the "
        "model folder is damaged"
    ]


def _refused(folder, done):
    try:
        check_model_dir(str(folder), "actor.model.path", tokenizer=True)
    except ConfigError as error:
        done.append(str(error))


def pickled_only(folder, marker):
    """``folder`` with its weights as ``pytorch_model.bin`` only, whose pickle would write
    ``marker`` if it were ever unpickled."""
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(
        planted("posix", "system", f"touch {marker}", 2, False)
    )
    return folder


def test_pickle_only_weights_are_refused_and_never_unpickled(tiny_lm, reward_model, tmp_path):  # noqa: F811
    _, dirs = tiny_lm
    marker = tmp_path / "ran"
    actor = pickled_only(copied(dirs.actor, tmp_path / "actor"), marker)
    said = "holds its weights as pickle only (pytorch_model.bin), which rlcore does not load"
    for setting, folder in (("actor.model.path", actor), ("critic.model_path", actor)):
        line = dry_run_refusal(tmp_path, f"{setting}={folder}")
        assert line.startswith(f"{setting}: {folder} {said}") and "\n" not in line
        assert "save_pretrained(folder) writes model.safetensors" in line
    scorer = pickled_only(copied(reward_model, tmp_path / "rm"), marker)
    with pytest.raises(ConfigError, match="^" + re.escape(f"reward.model.path: {scorer} {said}")):
        check_reward_model(str(scorer))
    line = dry_run_refusal(tmp_path, "reward.kind=model", f"reward.model.path={scorer}")
    assert line.startswith(f"reward.model.path: {scorer} {said}")
    # unchecked, the load asks for safetensors and reads no pickle
    with pytest.raises(OSError, match=r"model\.safetensors"):
        load_causal_lm(actor, "float32")
    assert not marker.exists()


def headless(reward_folder, where):
    """A copy of the reward model ``reward_folder`` whose safetensors lack the score head."""
    folder = copied(reward_folder, where)
    weights = load_file(folder / "model.safetensors")
    save_file(
        {k: v for k, v in weights.items() if not k.startswith("score.")},
        folder / "model.safetensors",
        metadata={"format": "pt"},
    )
    return folder


NO_HEAD = "has no score head (score.weight not in its weights"


def test_a_reward_model_without_its_score_head_is_refused(tiny_lm, reward_model, tmp_path):  # noqa: F811
    _, dirs = tiny_lm
    assert check_reward_model(str(reward_model)) == reward_model  # the trained one passes
    # a causal LM's folder whose config claims the classifier (saved by AutoModelForCausalLM)
    causal = copied(dirs.actor, tmp_path / "causal")
    edit_json(
        causal / "config.json", architectures=["Qwen2ForSequenceClassification"], num_labels=1
    )
    # Qwen2ForSequenceClassification's head is one matrix, score.weight (no bias), outside the
    # base model "model."
    assert "score.weight" not in load_file(causal / "model.safetensors")
    cut = headless(reward_model, tmp_path / "cut")
    for folder in (causal, cut):
        with pytest.raises(
            ConfigError, match="^" + re.escape(f"reward.model.path: {folder} {NO_HEAD}")
        ):
            check_reward_model(str(folder))
        line = dry_run_refusal(tmp_path, "reward.kind=model", f"reward.model.path={folder}")
        assert line.startswith(f"reward.model.path: {folder} {NO_HEAD}") and "\n" not in line
        assert "train_reward_model.py" in line


def test_a_sharded_reward_model_is_checked_through_its_index(reward_model, tmp_path):  # noqa: F811
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(reward_model))
    folder = tmp_path / "sharded"
    model.save_pretrained(folder, max_shard_size="20KB")
    load_tokenizer(reward_model).save_pretrained(folder)
    index = folder / "model.safetensors.index.json"
    assert index.is_file() and not (folder / "model.safetensors").exists()
    check_reward_model(str(folder))
    described = json.loads(index.read_text())
    del described["weight_map"]["score.weight"]
    index.write_text(json.dumps(described))
    with pytest.raises(ConfigError, match=re.escape(NO_HEAD)):
        check_reward_model(str(folder))


def test_the_scorer_refuses_missing_weights_as_transformers_reports_them(
    tiny_lm,
    reward_model,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """The load itself asks transformers what it had to start at random: the same verdict as
    the folder check, by another reading of the same weights."""
    from rlcore.config import replace_keys

    config, _ = tiny_lm
    cut = headless(reward_model, tmp_path / "cut")
    monkeypatch.setattr(rm, "check_score_head", lambda *args: None)
    config = replace_keys(config, {"reward.kind": "model", "reward.model.path": str(cut)})
    with pytest.raises(ConfigError, match=r"lacks weights the model needs \(score.weight\)"):
        rm.ModelScorer(config, torch.device("cpu"))
