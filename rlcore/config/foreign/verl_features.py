"""verl's spellings of three features, read section by section (a key's meaning depends on its
neighbours, so they are no plain aliases): the reward model (``reward_model.*``, verl 0.9's
``reward.reward_model.*``), multi-turn tool rollouts (``actor_rollout_ref.rollout.multi_turn.*``)
and the fully asynchronous trainer (``async_training.*``, verl 0.9's fully_async_policy). Each
pass moves what has an rlcore counterpart to rlcore's keys with a line, refuses in one line what
would change the run's meaning, and leaves the rest to the validator ("verl's key has no rlcore
counterpart"). Written from verl's own config files (verl/trainer/config/reward_model/,
rollout/rollout.yaml, experimental/fully_async_policy/config/ and docs/advance/fully_async.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlcore.config.errors import ConfigError, Problems
from rlcore.config.foreign.translate import ABSENT, pop_key

# verl's two spellings of the reward model's section, and where each names the model's folder
RM_SECTIONS = {"reward_model": "model.path", "reward.reward_model": "model_path"}

# How verl serves its reward model (an inference engine in its reward loop, its workers and
# memory): here the reward ranks score with the model's own forward pass (reward.model.backend),
# so none of these changes a score
RM_SERVING = (
    "use_reward_loop",
    "num_workers",
    "rollout.name",
    "rollout.gpu_memory_utilization",
    "rollout.tensor_model_parallel_size",
    "rollout.free_cache_engine",
    "rollout.enforce_eager",
    "rollout.load_format",
    "rollout.max_num_seqs",
    "rollout.max_num_batched_tokens",
    "rollout.enable_chunked_prefill",
    "rollout.enable_prefix_caching",
    "rollout.disable_log_stats",
)
# verl's reward model reads at most these lengths (its engine's): scored whole here
RM_LENGTHS = {
    "rollout.prompt_length": "data.max_prompt_length",
    "rollout.response_length": "data.max_response_length",
}
RM_STRATEGIES = {"fsdp": "fsdp2", "fsdp2": "fsdp2"}

MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"
ASYNC = "async_training"

# every verl key these passes read (the rest of their sections is the validator's)
HANDLED_KEYS = frozenset(
    {
        f"{section}.{leaf}"
        for section, path in RM_SECTIONS.items()
        for leaf in (
            "enable",
            path,
            "strategy",
            "micro_batch_size",
            "micro_batch_size_per_gpu",
            *RM_SERVING,
            *RM_LENGTHS,
        )
    }
    | {f"{MULTI_TURN}.{leaf}" for leaf in ("enable", "max_assistant_turns", "format")}
    | {"actor_rollout_ref.rollout.mode"}
    | {
        f"{ASYNC}.{leaf}"
        for leaf in (
            "staleness_threshold",
            "partial_rollout",
            "use_rollout_log_probs",
            "trigger_parameter_sync_step",
            "require_batches",
        )
    }
)


def _set(cfg: DictConfig, target: str, value: Any, source: str, user: frozenset[str]) -> None:
    """``target`` set to ``value`` for verl's ``source``; refused where the user gives
    ``target`` another value in rlcore's spelling (``user``: those keys), replacing a value of a
    config below (a shipped config's ``runner.max_staleness: 1``)."""
    given = OmegaConf.select(cfg, target, default=None)
    if target in user and given is not None and given != value:
        raise ConfigError(
            f"{source}: is {target}={value} here, but the config sets {target}={given}; "
            "keep one of the two"
        )
    OmegaConf.update(cfg, target, value, merge=False, force_add=True)


def verl_reward_model(cfg: DictConfig, user: frozenset[str] = frozenset()) -> list[str]:
    """verl's reward model: ``enable: true`` is ``reward.kind=model`` (the model's score is the
    reward, the rule gives the verdicts: ``reward.model.combine`` rule_only_for_accuracy, as
    verl's rm_scores replace the rule's), its folder ``reward.model.path``, its micro-batch
    ``reward.model.micro_batch_size``, its FSDP strategy ``reward.model.backend=fsdp2``; the
    settings of verl's serving engine are not read (said). Its keys without ``enable: true`` are
    refused: verl would score by rule."""
    said: list[str] = []
    problems = Problems()
    for section, path_leaf in RM_SECTIONS.items():
        with problems.gathered():
            said += _reward_model(cfg, section, path_leaf, user)
    problems.raise_any()
    return said


def _reward_model(cfg: DictConfig, section: str, path_leaf: str, user: frozenset[str]) -> list[str]:
    enable = pop_key(cfg, f"{section}.enable")
    given = {
        leaf: value
        for leaf in (
            path_leaf,
            "strategy",
            "micro_batch_size_per_gpu",
            "micro_batch_size",
            *RM_SERVING,
            *RM_LENGTHS,
        )
        if (value := pop_key(cfg, f"{section}.{leaf}")) is not ABSENT
    }
    if enable is ABSENT and not given:
        return []
    if enable is not True:
        if given:
            named = ", ".join(f"{section}.{leaf}" for leaf in given)
            raise ConfigError(
                f"{named}: set, but {section}.enable is {_shown(enable)}, so verl would score by "
                f"rule and never read them; add {section}.enable=true (reward.kind=model here) "
                "or leave them out"
            )
        return [f"{section}.enable=false (verl) is its default here: the rules score"]
    kind = OmegaConf.select(cfg, "reward.kind", default=None)
    rule = kind if kind in ("gsm8k", "math", "custom") else "auto"
    if kind not in (None, "auto", "model"):
        if "reward.kind" in user or kind == rule == "auto":
            raise ConfigError(
                f"{section}.enable=true is reward.kind=model here, but reward.kind is {kind}; for "
                "the model's score as the reward and that rule's verdicts, set reward.kind=model "
                f"reward.model.rule={rule}"
            )
        # (a config below the user's names the rule: it gives the verdicts beside the model)
        _set(cfg, "reward.model.rule", rule, f"{section}.enable", user)
        OmegaConf.update(cfg, "reward.kind", "model", merge=False)
    _set(cfg, "reward.kind", "model", f"{section}.enable", user)
    said = [
        f"{section}.enable (verl) is reward.kind=model here: the model's score is the reward, "
        "the rule gives the verdicts (reward.model.combine rule_only_for_accuracy), as verl's "
        "reward-model scores replace the rule's"
        + (
            f"; the config's reward.kind {kind} is reward.model.rule, for them"
            if rule != "auto" and kind != "model"
            else ""
        )
    ]
    for leaf, value in given.items():
        said += _reward_model_key(cfg, section, leaf, value, path_leaf, user)
    serving = [f"{section}.{leaf}" for leaf in given if leaf in RM_SERVING]
    if serving:
        said.append(
            f"{', '.join(serving)} (verl): how verl serves its reward model (an inference engine "
            "in its reward loop); the reward ranks score with the model's forward pass here "
            "(reward.model.backend), the same scores: not read"
        )
    return said


def _reward_model_key(
    cfg: DictConfig, section: str, leaf: str, value: Any, path_leaf: str, user: frozenset[str]
) -> list[str]:
    """One of the reward model's keys (its section enabled) on ``cfg``; the line to say."""
    source = f"{section}.{leaf}"
    if leaf == path_leaf:
        _set(cfg, "reward.model.path", value, source, user)
        return [f"{source} (verl) is reward.model.path here"]
    if leaf in ("micro_batch_size_per_gpu", "micro_batch_size"):
        _set(cfg, "reward.model.micro_batch_size", value, source, user)
        per = "" if leaf.endswith("per_gpu") else " (counted per rank here)"
        return [f"{source} (verl) is reward.model.micro_batch_size here{per}"]
    if leaf == "strategy":
        if value not in RM_STRATEGIES:
            raise ConfigError(
                f"{source}: {value!r}; a reward model here runs whole on each reward rank "
                "(reward.model.backend=torch) or sharded by FSDP2 (fsdp2), so give fsdp or fsdp2"
            )
        _set(cfg, "reward.model.backend", RM_STRATEGIES[value], source, user)
        return [f"{source} (verl) is reward.model.backend={RM_STRATEGIES[value]} here"]
    if leaf in RM_LENGTHS:
        length_key = RM_LENGTHS[leaf]
        length = OmegaConf.select(cfg, length_key, default=None)
        if length is not None and value < length:
            raise ConfigError(
                f"{source}: {value}, shorter than {length_key}={length}: verl's reward model "
                f"would read a cut input, which rlcore scores whole; give at least {length}"
            )
        return [f"{source} (verl): the reward model reads whole inputs here: not read"]
    return []  # (a serving key: said together)


def verl_multi_turn(cfg: DictConfig, user: frozenset[str] = frozenset()) -> list[str]:
    """verl's multi-turn rollouts: on here exactly when ``rollout.tools`` (or
    ``rollout.interaction``) is set, so ``multi_turn.enable`` must agree with them; its
    ``max_assistant_turns`` is ``rollout.max_turns``, its ``format: hermes`` the tool-call
    format read when ``rollout.tool_call_regex`` is null. verl's ``tool_config_path`` and
    ``interaction_config_path`` name verl's classes in YAML: refused by the validator, with
    ``rollout.tools`` the way on (docs/agents.md). ``rollout.mode`` (sync or async: how verl
    drives its engine) samples the same here, so is not read."""
    said: list[str] = []
    problems = Problems()
    with problems.gathered():
        said += _rollout_mode(cfg)
    enable = pop_key(cfg, f"{MULTI_TURN}.enable")
    turns = pop_key(cfg, f"{MULTI_TURN}.max_assistant_turns")
    form = pop_key(cfg, f"{MULTI_TURN}.format")
    on = bool(OmegaConf.select(cfg, "rollout.tools", default=None)) or (
        OmegaConf.select(cfg, "rollout.interaction", default=None) is not None
    )
    with problems.gathered():
        said += _multi_turn_switch(enable, on)
    if enable is not True:
        off = [f"{MULTI_TURN}.{k}" for k, v in (("max_assistant_turns", turns), ("format", form))]
        named = [name for name, v in zip(off, (turns, form), strict=True) if v is not ABSENT]
        if named:
            said.append(
                f"{', '.join(named)} (verl): no effect without {MULTI_TURN}.enable=true, as in "
                "verl: not read"
            )
        problems.raise_any()
        return said
    with problems.gathered():
        if turns is not ABSENT:
            if not isinstance(turns, int) or turns < 1:
                raise ConfigError(
                    f"{MULTI_TURN}.max_assistant_turns: {turns!r}; rollout.max_turns here is a "
                    "number of model turns (>= 1), so give one"
                )
            _set(cfg, "rollout.max_turns", turns, f"{MULTI_TURN}.max_assistant_turns", user)
            said.append(f"{MULTI_TURN}.max_assistant_turns (verl) is rollout.max_turns here")
    with problems.gathered():
        if form is not ABSENT:
            regex = OmegaConf.select(cfg, "rollout.tool_call_regex", default=None)
            if form != "hermes" or regex is not None:
                raise ConfigError(
                    f"{MULTI_TURN}.format: {form}; tool calls are read in the Hermes format "
                    "here (rollout.tool_call_regex null) or by a regex of yours, so give hermes, "
                    "or rollout.tool_call_regex with named groups name and arguments"
                )
            said.append(f"{MULTI_TURN}.format=hermes (verl) is rollout.tool_call_regex=null here")
    problems.raise_any()
    return said


def _rollout_mode(cfg: DictConfig) -> list[str]:
    """verl's ``rollout.mode``: sync or async, how verl drives its engine; not read (said)."""
    mode = pop_key(cfg, "actor_rollout_ref.rollout.mode")
    if mode is ABSENT:
        return []
    if mode not in ("sync", "async"):
        raise ConfigError(
            f"actor_rollout_ref.rollout.mode: {mode!r} is not one of verl's sync, async"
        )
    return [
        f"actor_rollout_ref.rollout.mode={mode} (verl): how verl drives its inference engine; "
        "the rollout samples the same either way here: not read"
    ]


def _multi_turn_switch(enable: Any, on: bool) -> list[str]:
    key = f"{MULTI_TURN}.enable"
    if enable is ABSENT:
        return []
    if enable is True and not on:
        raise ConfigError(
            f"{key}: true, but no tools: a multi-turn rollout here calls the tools of "
            "rollout.tools (verl's tool_config_path YAML names verl's classes); give "
            "rollout.tools=[module:Class,...] or a built-in (calculator, python), docs/agents.md"
        )
    if enable is not True and on:
        raise ConfigError(
            f"{key}: {_shown(enable)}, but rollout.tools (or rollout.interaction) is set, which "
            "makes the rollout multi-turn here; keep one of the two"
        )
    state = "on" if on else "off"
    return [f"{key} (verl) is {state} here, as rollout.tools and rollout.interaction say"]


def verl_async_training(
    cfg: DictConfig, user: frozenset[str] = frozenset(), defaults: Mapping[str, Any] | None = None
) -> list[str]:
    """verl's fully asynchronous trainer (``async_training``): a whole ``staleness_threshold``
    k is ``runner.max_staleness`` k (verl's 1 is one-step off-policy, as here), when its weight
    syncs come once a batch as here (``trigger_parameter_sync_step`` x ``require_batches`` x
    ``actor.ppo_mini_batch_size`` = ``data.train_batch_size``); ``partial_rollout`` is
    ``rollout.partial_rollout``; ``use_rollout_log_probs`` is
    ``algorithm.rollout_correction.bypass_mode`` (PPO's ratio against the rollout's log-probs).
    ``defaults``: the schema's values by key (the validator's, which this package cannot
    import), for the batch sizes a config leaves out."""
    said: list[str] = []
    problems = Problems()
    values = {
        leaf.rpartition(".")[2]: pop_key(cfg, leaf)
        for leaf in HANDLED_KEYS
        if leaf.startswith(f"{ASYNC}.")
    }
    staleness = values["staleness_threshold"]
    with problems.gathered():
        if staleness is not ABSENT:
            if not isinstance(staleness, int | float) or staleness < 0 or staleness % 1:
                raise ConfigError(
                    f"{ASYNC}.staleness_threshold: {staleness!r}; runner.max_staleness here bounds "
                    "staleness in whole weight updates (a batch trains while its weights are at "
                    "most k updates old; verl's 1 is one-step off-policy), so give 0 or a whole "
                    "number"
                )
            _set(cfg, "runner.max_staleness", int(staleness), f"{ASYNC}.staleness_threshold", user)
            said.append(f"{ASYNC}.staleness_threshold (verl) is runner.max_staleness here")
    with problems.gathered():
        said += _sync_once_a_batch(
            cfg, values["trigger_parameter_sync_step"], values["require_batches"], defaults or {}
        )
    for leaf, target in (
        ("partial_rollout", "rollout.partial_rollout"),
        ("use_rollout_log_probs", "algorithm.rollout_correction.bypass_mode"),
    ):
        value = values[leaf]
        if value is ABSENT:
            continue
        with problems.gathered():
            bound = OmegaConf.select(cfg, "runner.max_staleness", default=0)
            if leaf == "partial_rollout" and value and not bound:
                said.append(
                    f"{ASYNC}.partial_rollout (verl): no effect at staleness 0, as in verl: "
                    "not read"
                )
                continue
            _set(cfg, target, value, f"{ASYNC}.{leaf}", user)
            said.append(f"{ASYNC}.{leaf} (verl) is {target} here")
    problems.raise_any()
    return said


def _sync_once_a_batch(
    cfg: DictConfig, trigger: Any, require: Any, defaults: Mapping[str, Any]
) -> list[str]:
    """verl's weight-sync cadence, which must be rlcore's: once per ``data.train_batch_size``
    (``defaults``: the schema's, for the sizes the config leaves out)."""
    if trigger is ABSENT and require is ABSENT:
        return []

    def value(key: str) -> Any:
        return OmegaConf.select(cfg, key, default=None) or defaults.get(key)

    trigger = 4 if trigger is ABSENT else trigger  # (verl's defaults)
    require = 1 if require is ABSENT else require
    mini, batch = value("actor.ppo_mini_batch_size"), value("data.train_batch_size")
    if trigger * require * mini != batch:
        raise ConfigError(
            f"{ASYNC}.trigger_parameter_sync_step={trigger} x require_batches={require} x "
            f"actor.ppo_mini_batch_size={mini} = {trigger * require * mini} prompts between "
            f"weight syncs, but here the weights go to the rollout once a batch "
            f"(data.train_batch_size={batch}); set data.train_batch_size="
            f"{trigger * require * mini}, or leave the two out"
        )
    return [
        f"{ASYNC}.trigger_parameter_sync_step and require_batches (verl): one weight sync per "
        f"batch of data.train_batch_size={batch} prompts, as here"
    ]


def _shown(value: Any) -> str:
    if value is ABSENT:
        return "not set (verl's default: false)"
    return str(value).lower() if isinstance(value, bool) else repr(value)
