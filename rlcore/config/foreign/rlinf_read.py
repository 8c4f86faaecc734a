"""The loader's passes for RLinf's YAML (its embodied PPO examples with their defaults folder),
around the renaming of its aliases (``rlinf.py``):

1. ``rlinf_command_line``: the command line's RLinf keys are set in the composed YAML first, at
   their own paths, as Hydra would before resolving (an interpolation sees them, and a value for
   one of RLinf's two env sections is the other's too: one env section here);
2. ``rlinf_interpolations``: interpolations at or to RLinf's keys resolved against RLinf's own
   key names (``${runner.logger.log_path}``, ``${..max_episode_steps}``), before any is
   renamed; ``rlinf_in_context``: the keys read in context: the env's id from its type and
   task, the training backend from RLinf's FSDP settings, the MLP policy's shape, and the
   switches for what rlcore always does one way (``RLINF_FIXED``: accepted with a line at
   such a value, refused naming why at another);
3. ``rlinf_run_length``, after the command line's overrides: ``runner.max_epochs`` (and
   ``max_steps``) as ``runner.total_env_steps``, the iterations times each one's transitions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from hydra.core.override_parser.types import Override, OverrideType
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlcore.config.errors import ConfigError, Problems
from rlcore.config.foreign.key_lists import RLINF_KEYS
from rlcore.config.foreign.rlinf import RLINF_ALIASES, RLINF_FIXED, SPLITS
from rlcore.config.foreign.translate import ABSENT, keys_at_hand, leaf_items, pop_key

# RLinf's keys read here rather than renamed one to one
IN_CONTEXT = frozenset(
    {
        *(f"env.{s}.{k}" for s in SPLITS for k in ("env_type", "init_params.id", "reward_mode")),
        *(f"env.{s}.{k}" for s in SPLITS for k in ("group_size", "init_params.control_mode")),
        "actor.training_backend",
        "actor.fsdp_config.strategy",
        "actor.fsdp_config.sharding_strategy",
        "actor.model.model_type",
        "actor.model.hidden_dim",
        "actor.optim.value_lr",
        "critic.use_critic_model",
        "runner.max_epochs",
        "runner.max_steps",
    }
)
SPELLED = RLINF_KEYS | set(RLINF_ALIASES) | IN_CONTEXT | set(RLINF_FIXED)
# ManiSkill's tasks are rlcore's env ids in this namespace (rlcore/envs/maniskill.py)
MANISKILL = "maniskill"
MLP_POLICY = {"hidden_sizes": [256, 256, 256], "shared_backbone": False, "log_std_init": -0.5}


def _is_rlinf(path: str) -> bool:
    return path in SPELLED or any(path.startswith(f"{p}.") for p in ("weight_syncer",))


def rlinf_command_line(cfg: DictConfig, overrides: Sequence[Override]) -> list[Override]:
    """Set the command line's RLinf keys in ``cfg`` at their own paths (``~key`` removes one);
    the overrides left for the loader: all but those read in context here (the aliases stay,
    to set their rlcore keys over any value below them). A key of one of RLinf's env sections
    (``env.train.X``) sets the other's too where the YAML has it: one env here."""
    left: list[Override] = []
    for override in overrides:
        key = override.key_or_group
        if not _is_rlinf(key) or (override.type is OverrideType.DEL and not read_here(key)):
            left.append(override)  # (a removal the loader makes, of a key it reads)
            continue
        for path in _both_splits(cfg, key):
            if override.type is OverrideType.DEL:
                pop_key(cfg, path)
            else:
                OmegaConf.update(cfg, path, override.value(), merge=False, force_add=True)
        if not read_here(key):
            left.append(override)  # (an alias, or a key rlcore spells the same: set again)
    return left


def read_here(key: str) -> bool:
    """Whether RLinf's ``key`` is read by these passes (not renamed one to one)."""
    return key in IN_CONTEXT or key in RLINF_FIXED or key.startswith("weight_syncer.")


def _both_splits(cfg: DictConfig, key: str) -> list[str]:
    match = re.fullmatch(r"env\.(train|eval)\.(.+)", key)
    if match is None or key == "env.train.max_steps_per_rollout_epoch":
        return [key]
    other = f"env.{'eval' if match[1] == 'train' else 'train'}.{match[2]}"
    both = key in IN_CONTEXT or (key in RLINF_ALIASES and other in RLINF_ALIASES)
    has_other = OmegaConf.select(cfg, other, default=ABSENT, throw_on_resolution_failure=False)
    return [key, other] if both and has_other is not ABSENT else [key]


def rlinf_in_context(cfg: DictConfig, own: DictConfig) -> list[str]:
    """``cfg``'s RLinf keys read in context (see the module's docstring); the lines to say.
    ``ConfigError`` names each key that cannot be read."""
    problems = Problems()
    said: list[str] = []
    mode = cfg.get("mode") or OmegaConf.select(cfg, "runner.task_type", default=None)
    for read in (_env_id, _reward_mode, _env_group, _backend, _policy, _value_lr):
        with problems.gathered():
            said += read(cfg, own)
    with problems.gathered():
        said += _critic_switch(cfg, mode)
    may_hold = keys_at_hand(cfg)  # (the loop only removes keys)
    for path, (accepted, line, refusal) in RLINF_FIXED.items():
        # (rollout.backend in reasoning mode: the reasoning rollout's engine, rlcore's key)
        if not may_hold(path) or (path == "rollout.backend" and mode != "embodied"):
            continue
        value = pop_key(cfg, path)
        if value is ABSENT:
            continue
        with problems.gathered():
            if accepted is not None and value not in accepted:
                raise ConfigError(f"{path}: {value!r} (RLinf); {refusal}")
            said.append(line)
    problems.raise_any()
    return said


def rlinf_interpolations(cfg: DictConfig) -> None:
    """Every interpolation at an RLinf key or to one resolved in place, against RLinf's names
    (the renaming moves them after); rlcore's own are left for the loader."""
    plain = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(plain, dict)
    found: dict[str, Any] = {}
    problems = Problems()
    for path, value in leaf_items(plain):
        if not isinstance(value, str) or "${" not in value:
            continue
        refers = re.findall(r"\$\{([\w.]+)\}", value)
        if not (_is_rlinf(path) or any(_is_rlinf(r) for r in refers)):
            continue
        with problems.gathered():
            try:
                found[path] = OmegaConf.select(cfg, path)
            except OmegaConfBaseException as exc:
                first = str(exc).splitlines()[0]
                raise ConfigError(f"{path}: {value} (RLinf) cannot be resolved: {first}") from None
    problems.raise_any()
    for path, value in found.items():
        if isinstance(value, DictConfig | ListConfig):
            value = OmegaConf.to_container(value, resolve=True)
        OmegaConf.update(cfg, path, value, merge=False, force_add=True)


def _one_env_value(cfg: DictConfig, key: str) -> tuple[str, Any]:
    """RLinf's ``env.train.KEY`` and ``env.eval.KEY``, removed: ``(the path read, the value)``,
    ``ABSENT`` where neither is set; ``ConfigError`` where the two differ (one env here)."""
    values = {f"env.{s}.{key}": pop_key(cfg, f"env.{s}.{key}") for s in SPLITS}
    given = {path: value for path, value in values.items() if value is not ABSENT}
    if len({repr(v) for v in given.values()}) > 1:
        named = ", ".join(f"{path}={value!r}" for path, value in given.items())
        raise ConfigError(f"{named}: one env section here, so give the two one value")
    return next(iter(given.items()), ("", ABSENT))


def _env_id(cfg: DictConfig, own: DictConfig) -> list[str]:
    """RLinf's ``env_type`` and ``init_params.id`` as ``env.id``: a ManiSkill task is
    ``maniskill/TASK`` here; ``control_mode: None`` (RLinf's way to keep ManiSkill's default)
    leaves rlcore's, the task's default too."""
    said: list[str] = []
    path, control = _one_env_value(cfg, "init_params.control_mode")
    if control in (None, "None"):
        said.append(f"{path}: None (RLinf) is ManiSkill's default control mode, as here")
    elif control is not ABSENT:
        for split in SPLITS:  # (for the alias to rename)
            if OmegaConf.select(cfg, f"env.{split}", default=None) is not None:
                OmegaConf.update(cfg, f"env.{split}.init_params.control_mode", control)
    problems = Problems()  # (both read, so neither is left for the validator to call unknown)
    with problems.gathered():
        type_path, env_type = _one_env_value(cfg, "env_type")
    with problems.gathered():
        id_path, task = _one_env_value(cfg, "init_params.id")
    problems.raise_any()
    if env_type is ABSENT and task is ABSENT:
        return said
    if env_type != MANISKILL:
        raise ConfigError(
            f"{type_path or 'env.train.env_type'}: {env_type!r} (RLinf); rlcore's envs are "
            "gymnasium ids and ManiSkill's tasks (maniskill), so set env.id instead"
        )
    if task is ABSENT:
        raise ConfigError(f"{type_path}: maniskill names no task; give env.train.init_params.id")
    env_id = f"{MANISKILL}/{task}"
    given = OmegaConf.select(own, "env.id", default=None)
    if given is not None and given != env_id:
        raise ConfigError(f"{id_path}: {task!r} is env.id={env_id} here, but env.id is {given}")
    OmegaConf.update(cfg, "env.id", env_id, merge=False, force_add=True)
    return [*said, f"{type_path} and {id_path} (RLinf) are env.id={env_id} here"]


def _reward_mode(cfg: DictConfig, own: DictConfig) -> list[str]:
    """RLinf's own reward wrapper (``env.*.reward_mode``, not ManiSkill's): ``raw`` is the
    task's reward, ``only_success`` ManiSkill's sparse one; its grasp-bonus default is
    refused."""
    path, mode = _one_env_value(cfg, "reward_mode")
    if mode is ABSENT or mode == "raw":
        return [] if mode is ABSENT else [f"{path}: raw (RLinf) is the task's own reward, as here"]
    if mode == "only_success":
        OmegaConf.update(cfg, "env.kwargs.reward_mode", "sparse", merge=False, force_add=True)
        return [f"{path}: only_success (RLinf) is env.kwargs.reward_mode=sparse here"]
    raise ConfigError(
        f"{path}: {mode!r} (RLinf); RLinf's grasp-bonus reward is not built here: give raw "
        "(the task's reward) or only_success"
    )


def _env_group(cfg: DictConfig, own: DictConfig) -> list[str]:
    """RLinf's envs reset from one seed (``env.*.group_size``) are ``algorithm.group_size``."""
    path, size = _one_env_value(cfg, "group_size")
    if size is ABSENT:
        return []
    group = OmegaConf.select(cfg, "algorithm.group_size", default=1)
    if size != group:
        raise ConfigError(
            f"{path}: {size} (RLinf), but algorithm.group_size is {group}; the envs reset from "
            "one seed are algorithm.group_size here, so give the two one value"
        )
    return [f"{path} (RLinf) is algorithm.group_size here"]


def _backend(cfg: DictConfig, own: DictConfig) -> list[str]:
    """RLinf's ``training_backend: fsdp`` with its ``fsdp_config.sharding_strategy``: no_shard
    is DistributedDataParallel (``torch`` here), a sharding one ``fsdp2``."""
    strategy = pop_key(cfg, "actor.fsdp_config.strategy")
    sharding = pop_key(cfg, "actor.fsdp_config.sharding_strategy")
    if OmegaConf.select(cfg, "actor.training_backend", default=None) != "fsdp":
        return []
    if strategy not in (ABSENT, "fsdp", "fsdp2"):
        raise ConfigError(f"actor.fsdp_config.strategy: {strategy!r} (RLinf); give fsdp or fsdp2")
    backend = "torch" if sharding == "no_shard" else "fsdp2"
    cfg.actor.training_backend = backend
    how = "unsharded: DistributedDataParallel" if backend == "torch" else "sharded"
    return [
        f"actor.training_backend: fsdp with sharding_strategy {sharding} (RLinf) is "
        f"training_backend={backend} here ({how})"
    ]


def _policy(cfg: DictConfig, own: DictConfig) -> list[str]:
    """RLinf's ``mlp_policy``: a policy and a value network of three 256-wide layers each, its
    log-std starting at -0.5 (RLinf's MLPPolicy, whose widths ignore ``hidden_dim``)."""
    model_type = pop_key(cfg, "actor.model.model_type")
    hidden = pop_key(cfg, "actor.model.hidden_dim")
    if model_type is ABSENT:
        return []
    if model_type != "mlp_policy":
        raise ConfigError(
            f"actor.model.model_type: {model_type!r} (RLinf); rlcore's embodied policies are the "
            "MLP (mlp_policy), its CNN and an LM policy (actor.model.type), not RLinf's VLAs"
        )
    for key, value in MLP_POLICY.items():
        if OmegaConf.select(own, f"actor.model.{key}", default=None) is None:
            OmegaConf.update(cfg, f"actor.model.{key}", value, merge=False, force_add=True)
    width = "" if hidden is ABSENT else f" (hidden_dim {hidden} is not read, as in RLinf)"
    return [
        "actor.model.model_type: mlp_policy (RLinf) is actor.model.hidden_sizes=[256,256,256], "
        f"shared_backbone=false, log_std_init=-0.5 here{width}"
    ]


def _value_lr(cfg: DictConfig, own: DictConfig) -> list[str]:
    """RLinf's value head's own learning rate: one optimiser with one rate here. RLinf's is
    AdamW, so an RLinf optimiser section is ``actor.optim.name: adamw``."""
    value_lr = pop_key(cfg, "actor.optim.value_lr")
    if value_lr is ABSENT:
        return []
    lr = OmegaConf.select(cfg, "actor.optim.lr", default=None)
    if value_lr != lr:
        raise ConfigError(
            f"actor.optim.value_lr: {value_lr} (RLinf), but actor.optim.lr is {lr}; one "
            "learning rate here for the policy and its value head, so give the two one value"
        )
    said = ["actor.optim.value_lr (RLinf) is actor.optim.lr here"]
    if OmegaConf.select(own, "actor.optim.name", default=None) is None:
        OmegaConf.update(cfg, "actor.optim.name", "adamw", merge=False, force_add=True)
        said.append("actor.optim (RLinf) is actor.optim.name=adamw here, RLinf's optimiser")
    return said


def _critic_switch(cfg: DictConfig, mode: Any) -> list[str]:
    """``critic.use_critic_model`` in embodied mode: false is the value head on the policy,
    as here; a separate critic model is the reasoning mode's (there rlcore's own key)."""
    if mode != "embodied":
        return []
    value = pop_key(cfg, "critic.use_critic_model")
    if value is ABSENT:
        return []
    if value is not False:
        raise ConfigError(
            f"critic.use_critic_model: {value!r}; embodied mode trains a value head on the "
            "policy, not a separate critic model (reasoning mode's): give false"
        )
    return ["critic.use_critic_model: false (RLinf) is the policy's value head, as here"]


def rlinf_run_length(cfg: DictConfig, user_keys: frozenset[str]) -> list[str]:
    """RLinf's ``runner.max_epochs`` (capped by ``max_steps`` when that is not -1) iterations
    as ``runner.total_env_steps``: iterations x ``runner.rollout_steps`` x ``env.num_envs``,
    read after the command line's overrides; ``runner.total_env_steps`` given in rlcore's
    spelling decides instead, said."""
    epochs = pop_key(cfg, "runner.max_epochs")
    steps = pop_key(cfg, "runner.max_steps")
    if epochs is ABSENT and steps is ABSENT:
        return []
    given = [v for v in (epochs, steps) if isinstance(v, int) and v >= 0]
    if not given or any(v is not ABSENT and not isinstance(v, int) for v in (epochs, steps)):
        raise ConfigError(
            f"runner.max_epochs: {None if epochs is ABSENT else epochs}, runner.max_steps: "
            f"{None if steps is ABSENT else steps} (RLinf); give the iterations as a whole "
            "number in either"
        )
    iterations = min(given)
    if "runner.total_env_steps" in user_keys:
        return [
            "runner.max_epochs/max_steps (RLinf): runner.total_env_steps, given, decides the "
            "run's length: not read"
        ]
    per = OmegaConf.select(cfg, "runner.rollout_steps") * OmegaConf.select(cfg, "env.num_envs")
    OmegaConf.update(cfg, "runner.total_env_steps", iterations * per, merge=False, force_add=True)
    return [
        f"runner.max_epochs/max_steps (RLinf): {iterations} iterations are "
        f"runner.total_env_steps={iterations * per} here (x runner.rollout_steps x env.num_envs)"
    ]
