"""Load a config: a short sequence of named passes from a config name and a command line to the
validated, frozen config.

1. ``read_request``: find the config, parse the overrides, sort them into Hydra's group choices
   and plain keys (``composition.py``);
2. ``compose_with_hydra``: Hydra composes the YAML; the config file itself is kept beside it;
3. ``settle_placement``: one component placement, and a ``--cluster-file`` section;
4. ``rlinf_command_line``, ``rlinf_interpolations``, ``rlinf_in_context``: RLinf's YAML read
   in its own names (the command line's RLinf keys first, its interpolations resolved, the keys
   read in context: ``foreign/rlinf_read.py``); ``rename_aliases``: verl's, RLinf's and
   rlcore's earlier spellings in the YAML become rlcore's keys (``foreign/translate.py``);
5. ``apply_overrides``: the command line's ``key=value`` overrides, aliases translated (then
   RLinf's run length, ``rlinf_run_length``);
6. ``verl_token_budgets``, 7. ``verl_custom_reward``: verl's keys read in pairs; then verl's
   reward model, multi-turn and asynchronous sections (``foreign/verl_features.py``);
8. ``drop_derived_keys``: rlcore's earlier keys for values that follow from the mode;
9. ``no_warmup_for_a_given_model``, 10. ``fit_mini_batch`` (an embodied mini-batch the user
   did not write follows their batch: ``batch_sizes.py``), 11. ``env_file_made_absolute``:
   rlcore's own adjustments;
12. ``resolved``: a plain dict, interpolations resolved;
13. ``validate_config``: per-key validation, the derived values, the cross-field checks.

Passes 3 to 11 rewrite the composed config in place; each one that reads a foreign spelling
returns its lines, said once each after every pass has run. Each pass runs whatever the others
met, and their problems are raised with the per-key ones (13) in one ``ConfigError``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.types import Override, OverrideType
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlcore.config.batch_sizes import MINI_BATCH, ConfiguredBatch, fit_mini_batch, given_by_user
from rlcore.config.checks import check_config
from rlcore.config.composition import (
    CONFIG_DIR,
    Request,
    compose_with_hydra,
    read_request,
    settle_placement,
)
from rlcore.config.errors import ConfigError, Problems
from rlcore.config.foreign import ALIASES, current_keys
from rlcore.config.foreign.rlinf_read import (
    rlinf_command_line,
    rlinf_in_context,
    rlinf_interpolations,
    rlinf_run_length,
)
from rlcore.config.foreign.translate import (
    drop_derived_keys,
    leaf_items,
    rename_aliases,
    set_alias,
    verl_custom_reward,
    verl_epochs,
    verl_fixed_choices,
    verl_token_budgets,
)
from rlcore.config.foreign.verl_features import (
    verl_async_training,
    verl_multi_turn,
    verl_reward_model,
)
from rlcore.config.schema import SCHEMAS, RLCoreConfig
from rlcore.config.validate import build_config, schema_defaults
from rlcore.log import say


def compose_raw(
    config: str,
    overrides: Sequence[str] = (),
    config_dir: Path = CONFIG_DIR,
    cluster_file: Path | None = None,
) -> dict:
    """The composed config as a plain dict, interpolations resolved, not yet validated.

    ``cluster_file`` replaces the whole ``cluster`` section; overrides apply after it. verl's and
    RLinf's spellings (``rlcore.config.foreign``) become rlcore's keys, each said once
    (``rlcore.log``) once every pass has run (a refused config says none). ``ConfigError``
    lists every problem the passes met.
    """
    problems = Problems()
    raw = _composed(config, overrides, config_dir, cluster_file, problems)
    problems.raise_any()
    assert raw is not None
    return raw


def _composed(
    config: str,
    overrides: Sequence[str],
    config_dir: Path,
    cluster_file: Path | None,
    problems: Problems,
) -> dict | None:
    """``compose_raw``'s dict, each translation pass run whatever the others met (their
    problems added to ``problems``); ``None`` when the config cannot be composed or resolved."""
    request = read_request(config, overrides, config_dir)
    cfg, own = compose_with_hydra(request)
    settle_placement(cfg, own, request, cluster_file)
    user_keys = _rlcore_keys_of_the_user(request, own)
    steps = "trainer.total_training_steps"  # (read before the aliases move it)
    steps_given = "runner.total_iterations" in user_keys or (
        OmegaConf.select(cfg, steps, default=None) is not None
        or any(o.key_or_group == steps for o in request.plain)
    )
    said = list(request.repeated)
    plain = rlinf_command_line(cfg, request.plain)
    with problems.gathered():
        rlinf_interpolations(cfg)
    if problems.lines:
        return None  # (every pass below reads the keys they point from)
    with problems.gathered():
        said += rlinf_in_context(cfg, own)
    with problems.gathered():
        said += rename_aliases(cfg, own)
    configured = ConfiguredBatch.read(cfg)  # (the files' sizes, before the command line)
    for translate in (
        lambda: apply_overrides(cfg, plain),
        lambda: rlinf_run_length(cfg, user_keys),
        lambda: verl_token_budgets(cfg, user_keys),
        lambda: verl_custom_reward(cfg),
        lambda: verl_fixed_choices(cfg),
        lambda: verl_epochs(cfg, steps_given),
        lambda: verl_reward_model(cfg, user_keys),
        lambda: verl_multi_turn(cfg, user_keys),
        lambda: verl_async_training(cfg, user_keys, _defaults_of(cfg)),
        lambda: drop_derived_keys(cfg),
        lambda: no_warmup_for_a_given_model(cfg),
        lambda: fit_mini_batch(cfg, configured, mini_batch_given(request, own)),
    ):
        with problems.gathered():
            said += translate()
    env_file_made_absolute(cfg)
    if not problems.lines:
        for line in dict.fromkeys(said):
            say(line)
    with problems.gathered():
        return resolved(cfg, config)
    return None


def _defaults_of(cfg: DictConfig) -> dict[str, Any]:
    """The schema's default of every key of ``cfg``'s mode, by dotted path."""
    schema = SCHEMAS.get(cfg.get("mode"))
    return schema_defaults(schema) if schema is not None else {}


def _rlcore_keys_of_the_user(request: Request, own: DictConfig) -> frozenset[str]:
    """The keys the user set in rlcore's spelling: on the command line, and in the config file
    when it is the user's own (not one under the package's configs/)."""
    keys = {o.key_or_group for o in request.plain if o.key_or_group not in ALIASES}
    if request.users_own_file:
        plain = OmegaConf.to_container(own, resolve=False)
        keys |= {path for path, _ in leaf_items(plain)} if isinstance(plain, dict) else set()
    return frozenset(keys)


def resolved(cfg: DictConfig, config: str) -> dict:
    """``cfg`` as a plain dict, interpolations resolved; ``ConfigError`` names one that cannot
    be."""
    try:
        raw = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        first = str(exc).splitlines()[0]
        if "Interpolation key" in first:
            first += " (an interpolation sees the keys set in the YAML and overrides, not defaults)"
        raise ConfigError(f"{config}: {first}") from None
    assert isinstance(raw, dict)
    return raw


def apply_overrides(cfg: DictConfig, overrides: Sequence[Override]) -> list[str]:
    """The command line's ``key=value`` and ``~key`` overrides, in order, on ``cfg``; an alias sets
    the rlcore key(s) it means (``set_alias``), with a line each. ``ConfigError`` names an override
    that cannot apply (deleting a key that is not set, a value under a key that holds one)."""
    said: list[str] = []
    problems = Problems()
    by_alias: dict[str, tuple[str, Any]] = {}  # target -> (the alias that set it, its value)
    last = {o.key_or_group: o for o in overrides}  # (Hydra's rule: the last value wins)
    for override in overrides:
        if last[override.key_or_group] is not override:
            continue  # (never read: a value the later one replaces is not checked either)
        given = sum(o.key_or_group == override.key_or_group for o in overrides)
        again = override.type is OverrideType.DEL and given > 1
        with problems.gathered():
            said += _apply_override(cfg, override, by_alias, deleting_a_given_key=again)
    problems.raise_any()
    return said


def _apply_override(
    cfg: DictConfig,
    override: Override,
    by_alias: dict[str, tuple[str, Any]],
    deleting_a_given_key: bool = False,
) -> list[str]:
    """One override of ``apply_overrides`` on ``cfg``; the lines it says.
    ``deleting_a_given_key``: a ``~key`` after the same command line gave the key, which may
    then be set nowhere else (nothing to delete is then no mistake)."""
    key = override.key_or_group
    alias = ALIASES.get(key)
    if alias is not None and override.type is OverrideType.DEL and deleting_a_given_key:
        return []  # (the alias given, then deleted: never set)
    if alias is not None:
        return [set_alias(cfg, override, alias, by_alias)]
    try:
        if override.type is OverrideType.DEL:
            parent_key, _, leaf = key.rpartition(".")
            parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
            if not isinstance(parent, DictConfig) or leaf not in parent:
                if deleting_a_given_key:
                    return []
                raise ConfigError(f"{override.input_line}: '{key}' is not set, nothing to delete")
            parent.pop(leaf)
            return []
        OmegaConf.update(cfg, key, override.value(), merge=False, force_add=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{override.input_line}: {str(exc).splitlines()[0]}") from None
    return []


def no_warmup_for_a_given_model(cfg: DictConfig) -> list[str]:
    """The supervised warm-up trains the tiny model only: a reasoning config that names a model
    (``actor.model.path``, as the seeds' commands do on the default job) runs without it, said in
    one line, where it was refused."""
    path = OmegaConf.select(cfg, "actor.model.path", default=None)
    steps = OmegaConf.select(cfg, "warmup.steps", default=0)
    if cfg.get("mode") != "reasoning" or path is None or not isinstance(steps, int) or steps <= 0:
        return []
    cfg.warmup.steps = 0
    examples = OmegaConf.select(cfg, "warmup.examples", default=None)
    if examples is not None:  # (the warm-up's problems: none either)
        cfg.warmup.examples = None
    return [
        f"warmup.steps: {steps} set to 0{' (and warmup.examples to null)' if examples else ''}: "
        "the supervised warm-up trains the tiny model only, and actor.model.path names a model "
        f"({path})"
    ]


def mini_batch_given(request: Request, own: DictConfig) -> bool:
    """Whether the user wrote the mini-batch (``batch_sizes.given_by_user``)."""
    return given_by_user(MINI_BATCH, request.plain, own, request.users_own_file)


def env_file_made_absolute(cfg: DictConfig) -> None:
    """``env.id=path/to/file.py:Class`` names the file from where the run starts; every process of
    the run (a Ray worker starts elsewhere) reads it by its absolute path."""
    env_id = OmegaConf.select(cfg, "env.id", default=None)
    if not isinstance(env_id, str) or ":" not in env_id:
        return
    file, _, attr = env_id.rpartition(":")
    if file.endswith(".py") and attr.isidentifier():
        cfg.env.id = f"{Path(file).expanduser().absolute()}:{attr}"


def validate_config(raw: dict[str, Any]) -> RLCoreConfig:
    """Per-key validation, the derived values, then the cross-field checks: the frozen config;
    ``ConfigError`` on any problem."""
    return check_config(build_config(raw))


def load_config(
    config: str,
    overrides: Sequence[str] = (),
    config_dir: Path = CONFIG_DIR,
    cluster_file: Path | None = None,
) -> RLCoreConfig:
    """Compose ``config`` (a name under configs/ or a YAML path) with ``overrides``, validated.

    >>> cfg = load_config("embodied/cartpole_ppo", ["algorithm.gamma=0.98"])
    >>> cfg.algorithm.gamma
    0.98
    """
    problems = Problems()
    raw = _composed(config, overrides, config_dir, cluster_file, problems)
    if raw is not None:  # (each key validated too: every problem of the config in one pass)
        with problems.gathered():
            built = build_config(raw)
    problems.raise_any()
    return check_config(built)


def replace_keys(config: RLCoreConfig, changes: dict[str, Any]) -> RLCoreConfig:
    """``config`` (validated, so frozen) with the keys of ``changes`` (dotted paths) set to
    their values, validated again: the derived values follow, and a combination the checks
    refuse raises ``ConfigError`` as loading it would.

    >>> cfg = load_config("embodied/cartpole_ppo")
    >>> replace_keys(cfg, {"runner.seed": 2, "actor.optim.lr": 0.001}).runner.seed
    2
    """
    raw = current_keys(dataclasses.asdict(config))
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        section = raw
        for part in parents:
            section = section.setdefault(part, {})
        section[leaf] = value
    return validate_config(raw)
