"""rlcore's own earlier spellings: keys renamed when one optimiser section came to serve every
component and when the flat reward section split into subsections by kind
(``EARLIER_ALIASES``), and keys whose value now follows from the mode
(``DERIVED_KEYS``, checked against it); ``current_keys`` reads a config a run folder kept, written
by this version or an earlier one, in this version's keys.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from rlcore.config.errors import ConfigError
from rlcore.config.foreign.alias import Alias, minus_one_is
from rlcore.did_you_mean import closest

EARLIER = "rlcore's earlier key"
EARLIER_ALIASES: dict[str, Alias] = {
    "actor.optim.lr_schedule": Alias(EARLIER, ("actor.optim.decay",)),
    "actor.optim.adam_eps": Alias(EARLIER, ("actor.optim.eps",)),
    "actor.optim.lr_warmup_steps": Alias(EARLIER, ("actor.optim.warmup_steps",)),
    # (verl's spelling too, where -1 is no fixed warm-up)
    "critic.optim.lr_warmup_steps": Alias(
        EARLIER, ("critic.optim.warmup_steps",), minus_one_is(0), "also verl's: -1 is 0"
    ),
}

# rlcore's earlier flat reward section, now in subsections by kind (reward.rules, .model,
# .judge, .remote): each flat key -> the key it is now
REWARD_KEYS = {
    "gsm8k_mode": "rules.gsm8k_mode",
    "correct_score": "rules.correct_score",
    "format_score": "rules.format_score",
    "custom_fn": "rules.custom_fn",
    "timeout_s": "rules.timeout_s",
    "num_processes": "rules.num_processes",
    "max_timeout_share": "rules.max_timeout_share",
    "batch_timeout_s": "rules.batch_timeout_s",
    "model_path": "model.path",
    "model_micro_batch_size": "model.micro_batch_size",
    "model_backend": "model.backend",
    "score_normalize": "model.score_normalize",
    "score_clip": "model.score_clip",
    "rule": "model.rule",
    "combine": "model.combine",
    "model_weight": "model.model_weight",
    "rule_weight": "model.rule_weight",
    "judge_template": "judge.template",
    "judge_parser": "judge.parser",
    "judge_max_new_tokens": "judge.max_new_tokens",
    "judge_backend": "judge.backend",
    "url": "remote.url",
    "remote_batch_size": "remote.batch_size",
    "remote_concurrency": "remote.concurrency",
    "remote_timeout_s": "remote.timeout_s",
    "remote_retries": "remote.retries",
    "on_error": "remote.on_error",
}
EARLIER_ALIASES |= {
    f"reward.{flat}": Alias(EARLIER, (f"reward.{now}",)) for flat, now in REWARD_KEYS.items()
}


@dataclass(frozen=True)
class DerivedKey:
    """rlcore's earlier key for a value that now follows from the mode (``config.derived``):
    accepted when it says what the mode does (with one line on stderr), else refused with
    ``refusal``. ``legal``: the one value each mode accepts (a mode left out has no such key)."""

    derived: str
    legal: dict[str, Any]
    refusal: dict[str, str]

    def check(self, path: str, value: Any, mode: Any) -> str:
        """The line to say for ``value`` in ``mode``; ``ConfigError`` if it contradicts it."""
        shown = str(value).lower() if isinstance(value, bool) else value
        known = sorted({str(v).lower() if isinstance(v, bool) else v for v in self.legal.values()})
        if isinstance(value, str) and value not in known:
            near = closest(value, known)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise ConfigError(
                f"{path}: {value!r} is not one of {', '.join(known)}{hint}; it follows from the "
                "mode: leave it out"
            )
        if mode in self.legal and value == self.legal[mode]:
            return (
                f"{path} ({EARLIER}) is {self.derived} here, which follows from the mode "
                f"({mode}: {shown}); leave it out"
            )
        raise ConfigError(f"{path}: {shown}; {self.refusal.get(mode, self.refusal['other'])}")


DERIVED_KEYS: dict[str, DerivedKey] = {
    "algorithm.loss_type": DerivedKey(
        "derived.loss_type",
        {"embodied": "actor_critic", "reasoning": "actor"},
        {
            "embodied": "embodied mode trains the policy and its value head together "
            "(actor_critic); a policy without a value head is not built: leave loss_type out",
            "reasoning": "reasoning mode trains a separate critic model, so the actor and "
            "critic cannot share one backward pass (loss_type actor): leave loss_type out",
            "other": "follows from the mode (embodied: actor_critic, reasoning: actor); leave "
            "it out",
        },
    ),
    "actor.model.add_value_head": DerivedKey(
        "derived.value_head",
        {"embodied": True},
        {
            "embodied": "embodied mode trains the policy and its value head together "
            "(actor_critic); leave add_value_head out: the policy always has one",
            "other": "the reasoning policy has no value head (its critic is a separate model, "
            "critic.*); leave add_value_head out",
        },
    ),
}


def current_keys(saved: dict[str, Any]) -> dict[str, Any]:
    """A config as a run folder keeps it (``dataclasses.asdict`` of a validated config, written
    by this version or an earlier one) in this version's keys, to validate again: its
    ``derived`` section left out (computed anew), rlcore's earlier keys renamed
    (``actor.optim.lr_schedule`` ...) or, for values that now follow from the mode
    (``DERIVED_KEYS``), dropped. ``saved`` itself is not changed."""
    out = copy.deepcopy(saved)
    out.pop("derived", None)
    for path, alias in EARLIER_ALIASES.items():
        if _pop(out, path) is not _MISSING:
            value = _get(saved, path)
            for target, converted in alias.values(value):
                _put(out, target, converted)
    for path in DERIVED_KEYS:
        _pop(out, path)
    return out


_MISSING = object()


def _get(tree: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return _MISSING
        tree = tree[part]
    return tree


def _pop(tree: dict[str, Any], path: str) -> Any:
    *parents, leaf = path.split(".")
    for part in parents:
        tree = tree.get(part) if isinstance(tree, dict) else None
        if not isinstance(tree, dict):
            return _MISSING
    return tree.pop(leaf, _MISSING)


def _put(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value
