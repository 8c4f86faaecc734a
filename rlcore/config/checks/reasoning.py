"""Checks of the reasoning features: the reward and its shaping, DAPO's dynamic sampling,
micro-batches by rows or by tokens, prompt sharing, LoRA, the tiny model and its warm-up, and
the update sizes of the actor and critic."""

from __future__ import annotations

import dataclasses
from typing import Any

from rlcore.config.checks.algorithm import check_gdpo
from rlcore.config.checks.moe import check_moe, check_sequence_parallel
from rlcore.config.checks.run import check_update_sizes
from rlcore.config.schema import ReasoningConfig
from rlcore.config.schema_reasoning import ENTROPY_CHUNK_SIZE
from rlcore.config.service_url import url_problem


def check_reasoning(config: ReasoningConfig) -> list[str]:
    return [
        *_reward(config),
        *_reward_limits(config),
        *check_gdpo(config),
        *_micro_batches(config),
        *_share_group_prompts(config),
        *_model(config),
        *_update_sizes(config),
        *_rollout_correction(config),
        *_asynchronous(config),
        *_partial_rollout(config),
        *_entropy_chunks(config),
        *_fused_kernels(config),
        *_tools(config),
        *_static_decode(config),
        *check_moe(config),
        *check_sequence_parallel(config),
        *_visual_task(config),
    ]


def _visual_task(config: ReasoningConfig) -> list[str]:
    """``data.synthetic.images``: the synthetic task (no prompt files) drawn as images, read by
    the tiny vision-language model; one-digit numbers, a dense model, no tools."""
    data = config.data
    if not data.synthetic.images:
        return []
    problems = []
    if data.train_files or data.val_files:
        problems.append(
            "data.synthetic.images: the synthetic task is not read (data.train_files / "
            "val_files are set); leave it out, or the files"
        )
    if data.synthetic.digits != 1:
        problems.append(
            f"data.synthetic.digits: {data.synthetic.digits}; the visual task draws one-digit "
            "numbers (data.synthetic.images): set it to 1"
        )
    if config.actor.model.path is not None:
        problems.append(
            "data.synthetic.images: the visual task's images are read by the tiny "
            "vision-language model built here (actor.model.path null); with a model folder, "
            "give prompt files with images (docs/reasoning.md)"
        )
    if config.actor.model.tiny.num_experts:
        problems.append(
            "actor.model.tiny.num_experts: the tiny vision-language model is dense; set it to 0 "
            "with data.synthetic.images"
        )
    if config.rollout.tools:
        problems.append("rollout.tools: the visual task has no tool trajectories to warm up on")
    return problems


def _static_decode(config: ReasoningConfig) -> list[str]:
    """The hf engine's static-cache loop (rollout.hf.*): single-turn batches of the hf engine,
    each row prefilled; its other keys read only with it."""
    rollout = config.rollout
    hf = rollout.hf
    if not hf.static_cache:
        keys = ("cuda_graph", "compile", "batch_bucket", "length_bucket", "max_buckets")
        return [
            f"rollout.hf.{name}: set, but rollout.hf.static_cache is false, so nothing reads "
            "it; set rollout.hf.static_cache=true, or leave it out"
            for name in _changed(hf, keys)
        ]
    fix = "; set rollout.hf.static_cache=false, or"
    problems = []
    if rollout.backend != "hf":
        problems.append(
            f"rollout.hf.static_cache: the hf engine's loop, but rollout.backend is "
            f"{rollout.backend}{fix} rollout.backend=hf"
        )
    if rollout.multi_turn:
        problems.append(
            "rollout.hf.static_cache: multi-turn rollouts (rollout.tools, rollout.interaction) "
            f"decode with transformers' generate{fix} drop the tools"
        )
    if rollout.partial_rollout:
        problems.append(
            "rollout.hf.static_cache: partial rollouts decode their segments with transformers' "
            f"generate{fix} rollout.partial_rollout=false"
        )
    if config.actor.model.share_group_prompts and config.algorithm.group_size > 1:
        problems.append(
            "rollout.hf.static_cache: the static loop prefills every row, not each group's "
            f"prompt once (actor.model.share_group_prompts){fix} "
            "actor.model.share_group_prompts=false"
        )
    return problems


def _tools(config: ReasoningConfig) -> list[str]:
    """The multi-turn keys: read only with tools or an interaction; the hf engine's loop."""
    import re

    rollout, problems = config.rollout, []
    if not rollout.tools and rollout.interaction is None:
        keys = ("max_turns", "tool_call_regex", "tool_timeout_s", "tool_processes")
        return [
            f"rollout.{name}: set, but no rollout.tools and no rollout.interaction; add tools "
            "(e.g. rollout.tools=[calculator]) or leave it out"
            for name in _changed(rollout, keys)
        ]
    if rollout.tool_call_regex is not None:
        try:
            groups = re.compile(rollout.tool_call_regex).groupindex
        except re.error as error:
            problems.append(f"rollout.tool_call_regex: not a regex: {error}")
        else:
            missing = [g for g in ("name", "arguments") if g not in groups]
            if missing:
                problems.append(
                    f"rollout.tool_call_regex: no named group {' or '.join(missing)}; write "
                    "(?P<name>...) and (?P<arguments>...) (a JSON object)"
                )
    return problems


def _entropy_chunks(config: ReasoningConfig) -> list[str]:
    """A chunk size that nothing reads (other than the default, which verl's configs carry)."""
    actor = config.actor
    size = actor.entropy_from_logits_chunk_size
    read = actor.entropy_from_logits_with_chunking or actor.model.use_fused_kernels
    if not read and size != ENTROPY_CHUNK_SIZE:
        return [
            f"actor.entropy_from_logits_chunk_size: {size}, but "
            "actor.entropy_from_logits_with_chunking and actor.model.use_fused_kernels are "
            "false, so nothing reads it; set actor.entropy_from_logits_with_chunking=true, or "
            "leave the size out"
        ]
    return []


def _fused_kernels(config: ReasoningConfig) -> list[str]:
    """The fused log-probs read the LM head's weight alone: no adapters on it."""
    model = config.actor.model
    if model.use_fused_kernels and model.lora.rank > 0 and "lm_head" in model.lora.target_modules:
        return [
            "actor.model.use_fused_kernels: set together with lm_head in "
            "actor.model.lora.target_modules; the fused log-probs read the LM head's weight "
            "alone, not its adapters: remove lm_head from the targets, or set it false"
        ]
    return []


def _partial_rollout(config: ReasoningConfig) -> list[str]:
    """Partial rollouts take weight updates mid-generation: only an asynchronous run has any."""
    rollout = config.rollout
    if not rollout.partial_rollout:
        if rollout.partial_rollout_tokens is not None:
            return [
                "rollout.partial_rollout_tokens: set, but rollout.partial_rollout is false, so "
                "nothing reads it; set rollout.partial_rollout=true, or leave it out"
            ]
        return []
    problems = []
    if not config.runner.max_staleness:
        problems.append(
            "rollout.partial_rollout: true with runner.max_staleness 0: a synchronous run "
            "updates no weights during a generation; set runner.max_staleness=1 (or more), or "
            "rollout.partial_rollout=false"
        )
    if rollout.backend != "hf":
        problems.append(
            f"rollout.partial_rollout: not built for rollout.backend {rollout.backend} (it "
            "would abort and resume SGLang's requests); use rollout.backend=hf, or "
            "rollout.partial_rollout=false"
        )
    if rollout.multi_turn:
        problems.append(
            "rollout.partial_rollout: multi-turn rollouts (rollout.tools, rollout.interaction) "
            "are not cut into segments; set rollout.partial_rollout=false"
        )
    return problems


def _asynchronous(config: ReasoningConfig) -> list[str]:
    """What an asynchronous run (``runner.max_staleness`` > 0) refuses: DAPO's dynamic sampling,
    whose batch size in prompts is known only once the batch is scored (docs/async.md)."""
    stale = config.runner.max_staleness
    if not stale or not config.algorithm.filter_groups.enable:
        return []
    return [
        f"runner.max_staleness: {stale} with algorithm.filter_groups.enable: DAPO's resampling "
        "learns how many more prompts a batch needs only from its scores, when the trainer "
        "takes it, so they could not be generated ahead; the groups it adds would wait behind "
        "the rollout's batches in flight and sample with newer weights than the rest; set "
        "runner.max_staleness=0, or algorithm.filter_groups.enable=false"
    ]


def _rollout_correction(config: ReasoningConfig) -> list[str]:
    """The thresholds parse (verl's spellings); bypass mode's combinations that are not built."""
    from rlcore.algorithms.rollout_correction import parse_is_threshold, parse_rs

    corr, problems = config.algorithm.rollout_correction, []
    where = "algorithm.rollout_correction"
    try:
        parse_is_threshold(corr.rollout_is_threshold)
    except ValueError as bad:
        problems.append(f"{where}.{bad}; write a number such as 2.0, or '0.5_2.0'")
    if corr.rollout_rs is not None:
        try:
            parse_rs(corr.rollout_rs, corr.rollout_rs_threshold)
        except ValueError as bad:
            problems.append(f"{where}.{bad}")
    elif corr.rollout_rs_threshold is not None:
        problems.append(
            f"{where}.rollout_rs_threshold: set, but rollout_rs is null, so nothing reads it; "
            "name the rejection options (rollout_rs=token_k1), or leave it out"
        )
    if corr.bypass_mode and corr.corrects:
        problems.append(
            f"{where}.bypass_mode: true with rollout_is or rollout_rs set: in bypass mode verl "
            "computes them per micro-batch against the policy being updated, which rlcore does "
            "not build; use bypass_mode=false (decoupled: the same weights and rejection, "
            "against the actor's recomputed log-probs), or unset rollout_is / rollout_rs"
        )
    if corr.loss_type != "ppo_clip":
        problems.append(
            f"{where}.loss_type: {corr.loss_type} (verl's REINFORCE with explicit weights in "
            "bypass mode) is not built; use ppo_clip, or bypass_mode=false with rollout_is"
        )
    if corr.bypass_mode and "sum_pi_squared" in _estimator_inputs(config):
        problems.append(
            f"{where}.bypass_mode: the estimator {config.algorithm.adv_type} reads the actor's "
            "sum of squared token probabilities, from the very pass bypass mode skips; use "
            "bypass_mode=false"
        )
    return problems


def _changed(section: Any, names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` whose value in ``section`` is not the key's declared default."""
    defaults = type(section)()
    return [name for name in names if getattr(section, name) != getattr(defaults, name)]


def _estimator_inputs(config: ReasoningConfig) -> tuple[str, ...]:
    from rlcore.algorithms import ADVANTAGES

    adv = config.algorithm.adv_type
    return ADVANTAGES.entry(adv).traits["inputs"] if adv in ADVANTAGES else ()


def _reward_limits(config: ReasoningConfig) -> list[str]:
    """``reward.score_range`` (a finite [low, high] holding the rule scores) and
    ``reward.rules.batch_timeout_s`` (no shorter than one response's deadline)."""
    reward, problems = config.reward, []
    bounds = reward.score_range
    if len(bounds) != 2 or not bounds[0] < bounds[1]:
        problems.append(
            f"reward.score_range: {list(bounds)}; give [low, high] with low < high, e.g. "
            "[-10000, 10000]"
        )
    else:
        problems += [
            f"reward.rules.{name}: {value:g} is outside reward.score_range [{bounds[0]:g}, "
            f"{bounds[1]:g}], so every response it scores would end the run; widen the range "
            "or change the score"
            for name, value in (
                ("correct_score", reward.rules.correct_score),
                ("format_score", reward.rules.format_score),
            )
            if not bounds[0] <= value <= bounds[1]
        ]
    budget = reward.rules.batch_timeout_s
    if budget is not None and budget < reward.rules.timeout_s:
        problems.append(
            f"reward.rules.batch_timeout_s: {budget:g}, shorter than one response's "
            f"reward.rules.timeout_s={reward.rules.timeout_s:g}; give at least that, or null for "
            "no batch limit"
        )
    return problems


def _reward(config: ReasoningConfig) -> list[str]:
    reward = config.reward
    used = {reward.kind, *reward.sources.values()}  # every kind that scores some row
    by = (
        f"reward.kind is {reward.kind}"
        if not reward.sources
        else f"reward.kind is {reward.kind} and reward.sources names {', '.join(sorted(set(reward.sources.values())))}"  # noqa: E501
    )
    problems = _custom_and_remote(reward, used, by) + _model_and_judge(reward, used, by)
    if used & {"remote", "model", "judge"} and config.algorithm.gdpo_reward_keys:
        problems.append(
            f"algorithm.gdpo_reward_keys: {by}, and kinds remote, model and judge give one "
            "score per response, no components; use another estimator, or another reward kind"
        )
    if config.algorithm.filter_groups.enable and config.algorithm.group_size < 2:
        problems.append(
            "algorithm.filter_groups.enable: dynamic sampling keeps groups whose responses "
            "differ, and a group of algorithm.group_size 1 never does; set group_size >= 2"
        )
    buffer, longest = reward.overlong_buffer, config.data.max_response_length
    if buffer.enable and not 0 < buffer.len <= longest:
        problems.append(
            f"reward.overlong_buffer.len: {buffer.len}, but the buffer must hold 1 to "
            f"data.max_response_length ({longest}) tokens when overlong shaping is enabled; "
            "DAPO's recipe holds 4096 of 20480"
        )
    if not buffer.enable and (buffer.len, buffer.penalty_factor) != (0, 1.0):
        problems.append(
            "reward.overlong_buffer: len or penalty_factor set, but enable is false, so nothing "
            "would use them; set reward.overlong_buffer.enable=true, or leave them out"
        )
    return problems


def _custom_and_remote(reward: Any, used: set[str], by: str) -> list[str]:
    """The keys of a custom rule and of a reward service, each needed where its kind scores
    some row (``used``) and refused set where none does."""
    problems: list[str] = []
    custom = "custom" in used or (bool(used & {"model", "judge"}) and reward.model.rule == "custom")
    if custom and reward.rules.custom_fn is None:
        problems.append(
            "reward.rules.custom_fn: a custom rule scores some rows, so name the function: "
            "reward.rules.custom_fn=path/to/file.py:function"
        )
    if not custom and reward.rules.custom_fn is not None:
        problems.append(f"reward.rules.custom_fn: set, but {by}; set reward.kind=custom")
    if "remote" in used and reward.remote.url is None:
        problems.append(
            f"reward.remote.url: None, but {by}: give the remote service's address, "
            "e.g. reward.remote.url=http://127.0.0.1:8000/score"
        )
    elif "remote" in used and url_problem(reward.remote.url):  # (said without its credentials)
        problems.append(f"reward.remote.url: {url_problem(reward.remote.url)}")
    if "remote" not in used:
        problems += [
            f"reward.remote.{name}: set, but {by}; set reward.kind=remote, or leave it out"
            for name in _changed(reward.remote, _keys(reward.remote))
        ]
    return problems


def _model_and_judge(reward: Any, used: set[str], by: str) -> list[str]:
    """The keys of a reward model and of a judge (``reward.model``, ``reward.judge``), each
    needed where its kind scores some row (``used``) and refused set where none does."""
    problems: list[str] = []
    if "model" in used and reward.model.path is None:
        problems.append(
            f"reward.model.path: null, but {by}: give the reward model's folder (a "
            "sequence-classification model with one label)"
        )
    if "judge" in used and reward.model.path is None:
        problems.append(f"reward.model.path: null, but {by}: give the judge's folder (a causal LM)")
    if {"model", "judge"} <= used:
        problems.append(
            f"reward.sources: {by}, but reward.model.path holds one model; score with a reward "
            "model or with a judge"
        )
    if "judge" in used and reward.judge.template is None:
        problems.append(
            f"reward.judge.template: null, but {by}: give the judge's prompt, a text file "
            "with {response} (and optionally {prompt}, {answer}) where they go"
        )
    if "judge" not in used:
        problems += [
            f"reward.judge.{name}: set, but {by}, and only kind judge reads it; set "
            "reward.kind=judge, or leave it out"
            for name in _changed(reward.judge, _keys(reward.judge))
        ]
    if "model" not in used and reward.model.backend != "torch":
        problems.append(
            f"reward.model.backend: {reward.model.backend}, but {by}, and only kind model "
            "(a reward model) is sharded by it; set reward.kind=model, or leave it out"
        )
    model_keys = ("path", "score_clip", "score_normalize", "rule", "combine")
    weights = ("model_weight", "rule_weight")
    if not used & {"model", "judge"}:
        problems += [
            f"reward.model.{name}: set, but {by}, and only the kinds model and judge read it; "
            "set reward.kind=model, or leave it out"
            for name in _changed(reward.model, model_keys + weights)
        ]
    elif reward.model.combine != "weighted" and _changed(reward.model, weights):
        problems.append(
            f"reward.model.combine: {reward.model.combine}, so reward.model.model_weight and "
            "rule_weight are not "
            "read; set reward.model.combine=weighted, or leave the weights out"
        )
    return problems


def _keys(section: Any) -> tuple[str, ...]:
    """The names of a section's keys, in their declared order."""
    return tuple(f.name for f in dataclasses.fields(section))


def _micro_batches(config: ReasoningConfig) -> list[str]:
    """Micro-batches are formed by rows or by a token budget, not both."""
    problems = []
    for name, sect, counts in (
        ("actor", config.actor, ("ppo_micro_batch_size", "log_prob_micro_batch_size")),
        ("critic", config.critic, ("ppo_micro_batch_size",)),
    ):
        given = [c for c in counts if getattr(sect, c) is not None]
        if sect.max_tokens_per_micro_batch is not None and given:
            problems.append(
                f"{name}.max_tokens_per_micro_batch: set together with {name}.{given[0]}; "
                f"micro-batches are formed by tokens or by rows, not both: set {name}.{given[0]}"
                "=null, or remove the budget"
            )
    return problems


def _share_group_prompts(config: ReasoningConfig) -> list[str]:
    """``actor.model.share_group_prompts`` needs groups, keys and values kept across two passes
    (transformers keeps none under gradient checkpointing) and unpacked rows."""
    model, group = config.actor.model, config.algorithm.group_size
    if not model.share_group_prompts:
        return []
    key = "actor.model.share_group_prompts"
    problems = []
    if group == 1:
        problems.append(
            f"{key}: set, but algorithm.group_size is 1: each prompt has one "
            "response, so there is nothing to share; turn it off, or sample "
            "groups"
        )
    if model.use_remove_padding:
        problems.append(
            f"{key}: set together with actor.model.use_remove_padding; packing lays "
            "whole sequences end to end, sharing passes responses on top of their "
            "prompt: pick one"
        )
    if model.gradient_checkpointing:
        problems.append(
            f"{key}: set together with actor.model.gradient_checkpointing, under "
            "which transformers keeps no keys and values to pass the responses on "
            "top of; turn one off"
        )
    return problems


# rollout.tools' built-in entries (rlcore/tools/protocol.py's BUILT_INS: the config package
# does not import the tools package)
BUILT_IN_TOOLS = ("calculator", "python")


def calculator_missing(named: Any) -> str:
    """The refusal of tools that ``named`` (their declared names) lacks the calculator in."""
    return (
        f"rollout.tools: the tiny model's warm-up teaches the call of a tool named calculator "
        f"on the synthetic task, and the tools are named {', '.join(named)}; add calculator "
        "(or a tool of yours whose name is 'calculator'), or set warmup.steps=0"
    )


def _model(config: ReasoningConfig) -> list[str]:
    """LoRA's adapters, the tiny model's shape, and its warm-up."""
    model, problems = config.actor.model, []
    if model.lora.rank and not model.lora.target_modules:
        problems.append(
            "actor.model.lora.target_modules: empty, so LoRA would train nothing; name the "
            "linear layers, e.g. [q_proj, v_proj], or set actor.model.lora.rank=0"
        )
    tiny = model.tiny
    if model.path is None and tiny.hidden_size % tiny.num_heads:
        problems.append(
            f"actor.model.tiny.num_heads: {tiny.num_heads} does not divide hidden_size "
            f"{tiny.hidden_size}; pick a divisor of {tiny.hidden_size}"
        )
    if config.warmup.steps and model.path is not None:  # (load.py sets it to 0 and says so)
        problems.append(
            "warmup.steps: the supervised warm-up trains the tiny model only; set it to 0 when "
            "actor.model.path is set"
        )
    warm = config.warmup
    if warm.examples is not None and (model.path is not None or not warm.steps):
        problems.append(
            "warmup.examples: set, but no warm-up runs (it trains the tiny model only, for "
            "warmup.steps > 0); leave it out"
        )
    if model.path is None and warm.steps and config.rollout.tools:
        # (a class of the user's may be named calculator: the tools' declared names are read
        # where the classes are loaded, runners/preflight.py; built-ins are known by entry)
        if set(config.rollout.tools) <= set(BUILT_IN_TOOLS) - {"calculator"}:
            problems.append(calculator_missing(config.rollout.tools))
        if config.data.train_files:
            problems.append(
                "warmup.steps: with rollout.tools the warm-up writes calculator trajectories "
                "for the synthetic task; data.train_files are not; set warmup.steps=0"
            )
        if warm.stop_at_accuracy is not None:
            problems.append(
                "warmup.stop_at_accuracy: its check decodes one turn, not the tool loop; with "
                "rollout.tools set a number of warmup.steps and leave it null"
            )
        if config.data.chat_template is not True:
            problems.append(
                "data.chat_template: with rollout.tools the tiny model's prompts and tool "
                "messages are chat turns; set data.chat_template=true"
            )
    return problems


def _update_sizes(config: ReasoningConfig) -> list[str]:
    batch, desc = config.data.train_batch_size, "data.train_batch_size prompts"
    problems = check_update_sizes("actor", config.actor, batch, desc)
    if config.derived.critic_model:
        critic = check_update_sizes("critic", config.derived.critic_update, batch, desc)
        # A size the critic inherits from the actor was already reported under actor.
        problems += [p for p in critic if p.replace("critic.", "actor.", 1) not in problems]
    return problems
