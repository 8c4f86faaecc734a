"""The loader's passes over a composed config (an OmegaConf ``DictConfig``, rewritten in place)
that turn verl's and RLinf's spellings and rlcore's earlier keys into rlcore's keys. Each pass
returns the lines to say, one per spelling it read (``actor_rollout_ref.rollout.n (verl) is
algorithm.group_size here``), and raises ``ConfigError`` where two spellings of one key
disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hydra.core.override_parser.types import Override, OverrideType
from omegaconf import DictConfig, ListConfig, OmegaConf

from rlcore.config.errors import ConfigError, Problems
from rlcore.config.foreign import ALIASES, DERIVED_KEYS, TOKEN_BUDGETS
from rlcore.config.foreign.alias import Alias
from rlcore.config.foreign.verl import FIXED_CHOICES, ROW_MICRO_SIZES

ABSENT = object()


def rename_aliases(cfg: DictConfig, own: DictConfig) -> list[str]:
    """Move every alias the composed YAML sets to the rlcore key(s) it means (in ``ALIASES``'
    order); a line for each.

    Composition has merged the file with the configs its defaults list names, so precedence is
    decided against the file itself (``own``): a key the file sets beats the configs below it in
    either spelling, and the file setting one key in both spellings to different values is a
    contradiction, as are two aliases of one key (verl's actor and critic spellings of
    ``use_remove_padding``) set to different values."""
    said: list[str] = []
    problems = Problems()
    by_alias: dict[str, tuple[str, Any]] = {}  # target -> (the alias that set it, its value)
    may_hold = keys_at_hand(cfg)
    for path, alias in ALIASES.items():
        if not may_hold(path):  # (most: read from the paths at hand, not looked up)
            continue
        value = pop_key(cfg, path)
        if value is ABSENT:
            continue
        with problems.gathered():
            said.append(_rename(cfg, own, path, alias, value, by_alias))
        may_hold = keys_at_hand(cfg)  # (a rename writes keys, which an alias may name)
    problems.raise_any()
    return said


def _rename(
    cfg: DictConfig,
    own: DictConfig,
    path: str,
    alias: Alias,
    value: Any,
    by_alias: dict[str, tuple[str, Any]],
) -> str:
    """``rename_aliases`` for one alias found at ``path`` (removed already); its line."""
    alias_is_own = _own_value(own, path) is not ABSENT
    plain = OmegaConf.to_container(value) if isinstance(value, DictConfig | ListConfig) else value
    for target, converted in alias.values(plain):
        already = _own_value(own, target)
        if already is not ABSENT and not alias_is_own:
            continue  # the file's own rlcore key beats an alias from a config below it
        if already is not ABSENT and already != converted:
            raise ConfigError(
                f"{path}: set to {plain!r}, which is {target} here, but the config also sets "
                f"{target} to {already!r}; keep one of the two"
            )
        # (a shorthand of several keys, verl's clip_ratio, gives way to the specific alias)
        other, earlier = (
            by_alias.setdefault(target, (path, converted))
            if len(alias.targets) == 1
            else (path, converted)
        )
        if earlier != converted:
            if alias.yields:
                return alias.gives_way(path, plain, other, earlier)
            if not ALIASES[other].yields:
                raise ConfigError(
                    f"{path}: set to {plain!r}, but {other} sets {earlier!r}; both are {target} "
                    "here, so keep one value"
                )
            by_alias[target] = (path, converted)
        OmegaConf.update(cfg, target, converted, merge=False, force_add=True)
    return alias.describe(path)


def verl_token_budgets(cfg: DictConfig, user_keys: frozenset[str] = frozenset()) -> list[str]:
    """verl's ``use_dynamic_bsz`` with its ``*_max_token_len_per_gpu`` (``TOKEN_BUDGETS``),
    from the YAML or the command line, as the token budget they mean: the budget where the
    switch is on (verl's default length when none is given), nothing where it is off (verl
    ignores the length then, as said). The critic's switch follows the actor's, as in verl.
    Every pair of one target must give one budget, which the rlcore key, if set, must equal.

    With a budget, the model's micro-batch sizes in rows are dropped, as verl ignores them under
    dynamic batching (said), unless the user set them in rlcore's spelling (``user_keys``: the
    command line's and the user's own file's rlcore keys), which the checks refuse beside a
    budget."""
    said: list[str] = []
    problems = Problems()
    switches: dict[str, Any] = {}
    for target, pairs in TOKEN_BUDGETS.items():
        with problems.gathered():
            budget, lines = _token_budget(cfg, target, pairs, switches)
            said += lines
            if budget is not None:
                said += _rows_give_way(cfg, target, budget, user_keys)
    problems.raise_any()
    return said


def _token_budget(
    cfg: DictConfig, target: str, pairs: tuple[tuple[str, str, int], ...], switches: dict
) -> tuple[int | None, list[str]]:
    """``target``'s budget from its verl pairs (set on ``cfg``; ``None`` when no switch is on)
    and the lines to say; ``switches`` keeps each switch read, for the critic's to follow."""
    said: list[str] = []
    budgets: dict[int, str] = {}
    for switch_path, length_key, default in pairs:
        section = switch_path.rpartition(".")[0]
        length_path = f"{section}.{length_key}"
        if switch_path not in switches:
            switches[switch_path] = pop_key(cfg, switch_path)
        switch, follows = switches[switch_path], ""
        if switch is ABSENT and switch_path == "critic.use_dynamic_bsz":
            switch = switches.get("actor_rollout_ref.actor.use_dynamic_bsz", ABSENT)
            follows = " (its switch follows the actor's, as in verl)"
        length = pop_key(cfg, length_path)
        if switch is ABSENT and length is ABSENT:
            continue
        if switch is True:
            budget = default if length is ABSENT else length
            if length is ABSENT and budgets:
                continue  # (the target's budget is said already)
            budgets.setdefault(budget, length_path)
            said.append(
                f"{switch_path} and {length_path} (verl) are {target}={budget} here: "
                f"micro-batches of at most that many tokens{follows}"
            )
        elif length is not ABSENT:
            said.append(
                f"{length_path} (verl) has no effect without {switch_path}=true, as in verl: "
                "ignored"
            )
    if len(budgets) > 1:
        named = ", ".join(f"{path}={value}" for value, path in budgets.items())
        raise ConfigError(
            f"{named}: one token budget here ({target}: the update and the forward passes "
            "of that model), so give one length"
        )
    if not budgets:
        return None, said
    ((budget, where),) = budgets.items()
    given = OmegaConf.select(cfg, target, default=None)
    if given is not None and given != budget:
        raise ConfigError(
            f"{where}={budget}, but {target} is {given}; they are one key here, so keep one value"
        )
    OmegaConf.update(cfg, target, budget, merge=False, force_add=True)
    return budget, said


def _rows_give_way(
    cfg: DictConfig, target: str, budget: int, user_keys: frozenset[str]
) -> list[str]:
    """The micro-batch sizes in rows of ``target``'s model set to null beside verl's budget,
    a line each, but those the user set in rlcore's spelling (the checks name the clash)."""
    said: list[str] = []
    model = target.split(".")[0]
    for key in ROW_MICRO_SIZES[model]:
        path = f"{model}.{key}"
        value = OmegaConf.select(cfg, path, default=None)
        if value is None or path in user_keys:
            continue
        OmegaConf.update(cfg, path, None, merge=False, force_add=True)
        said.append(
            f"{path}: {value} ignored (null), as verl ignores the micro-batch size under dynamic "
            f"batching: micro-batches of at most {target}={budget} tokens instead"
        )
    return said


CUSTOM_REWARD = (
    "{prefix}.path and .name (verl) are reward.kind=custom, reward.rules.custom_fn={fn} here "
    "(a function written as verl's compute_score(data_source, solution_str, ground_truth, "
    "extra_info) is called so)"
)


def verl_custom_reward(cfg: DictConfig) -> list[str]:
    """verl's ``custom_reward_function.path`` and ``.name`` (``compute_score`` when not given;
    verl 0.9 also spells them under ``reward.``) as ``reward.kind=custom`` with
    ``reward.rules.custom_fn=PATH:NAME``: the function replaces the built-in rules, as in verl,
    and is called as verl calls it when written so (``judge.verl_signature``)."""
    said: list[str] = []
    for prefix in ("custom_reward_function", "reward.custom_reward_function"):
        path = pop_key(cfg, f"{prefix}.path")
        name = pop_key(cfg, f"{prefix}.name")  # (the emptied section goes with them)
        if path is ABSENT or path is None:
            continue
        fn = f"{path}:{'compute_score' if name in (ABSENT, None) else name}"
        given = OmegaConf.select(cfg, "reward.rules.custom_fn", default=None)
        if given is not None and given != fn:
            raise ConfigError(
                f"{prefix}.path: names {fn}, but reward.rules.custom_fn is {given}; they are one "
                "key here, so keep one"
            )
        OmegaConf.update(cfg, "reward.rules.custom_fn", fn, merge=False, force_add=True)
        OmegaConf.update(cfg, "reward.kind", "custom", merge=False, force_add=True)
        said.append(CUSTOM_REWARD.format(prefix=prefix, fn=fn))
    return said


def verl_fixed_choices(cfg: DictConfig) -> list[str]:
    """verl's switches for what rlcore always does one way (``FIXED_CHOICES``): taken with a
    line at a value that says what rlcore does, refused naming why at another."""
    said: list[str] = []
    problems = Problems()
    for path, (accepted, line, refusal) in FIXED_CHOICES.items():
        value = pop_key(cfg, path)
        if value is ABSENT:
            continue
        with problems.gathered():
            if accepted is not None and (
                value not in accepted or type(value) is not type(accepted[0])
            ):
                raise ConfigError(f"{path}: {value!r}; {refusal}")
            said.append(f"{path}={value} (verl): {line}")
    problems.raise_any()
    return said


def verl_epochs(cfg: DictConfig, steps_given: bool) -> list[str]:
    """verl's ``trainer.total_epochs`` beside ``trainer.total_training_steps`` (or
    ``runner.total_iterations``): the steps decide, as in verl, said; alone it stays for the
    validator to refuse (a run here is counted in iterations, ``WAYS_ON``)."""
    if not steps_given:
        return []
    epochs = pop_key(cfg, "trainer.total_epochs")
    if epochs is ABSENT:
        return []
    return [
        f"trainer.total_epochs={epochs} (verl): the run's length is its total_training_steps "
        "(runner.total_iterations), which decide in verl too: not read"
    ]


def drop_derived_keys(cfg: DictConfig) -> list[str]:
    """rlcore's earlier keys for values that now follow from the mode (``DERIVED_KEYS``), from
    the YAML or the command line: checked against the mode and removed (the validator would
    call them unknown)."""
    mode = cfg.get("mode")
    said: list[str] = []
    problems = Problems()
    for path, derived in DERIVED_KEYS.items():
        value = pop_key(cfg, path)
        if value is ABSENT:
            continue
        with problems.gathered():
            said.append(derived.check(path, value, mode))
    problems.raise_any()
    return said


def set_alias(
    cfg: DictConfig, override: Override, alias: Alias, by_alias: dict[str, tuple[str, Any]]
) -> str:
    """Set the rlcore key(s) that ``override`` (``key=value`` on the command line, ``key`` an
    alias) means; the line to say. ``by_alias`` holds, per target, the alias that set it on this
    command line and its value: two aliases of one key must agree (the same key given again
    wins, as in Hydra). Deleting an alias is refused: it names the rlcore key to delete."""
    key = override.key_or_group
    if override.type is OverrideType.DEL:
        raise ConfigError(
            f"{override.input_line}: {key} is {' and '.join(alias.targets)} here; delete that"
        )
    for target, value in alias.values(override.value()):
        other, earlier = by_alias.setdefault(target, (key, value))
        if other != key and earlier != value:
            # (a shorthand of several keys, verl's clip_ratio, gives way to the specific alias
            # in either order, as verl reads clip_ratio_low before clip_ratio)
            if len(alias.targets) > 1 and len(ALIASES[other].targets) == 1:
                continue
            if alias.yields:
                return alias.gives_way(key, override.value(), other, earlier)
            if not ALIASES[other].yields and len(ALIASES[other].targets) == 1:
                raise ConfigError(
                    f"{override.input_line}: {other} sets {earlier!r}; both are {target} here, "
                    "so keep one value"
                )
        by_alias[target] = (key, value)  # (the same key again: the later value, as Hydra)
        OmegaConf.update(cfg, target, value, merge=False, force_add=True)
    return alias.describe(key)


def leaf_items(tree: dict, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted path, value)`` of every leaf of a plain nested dict (an empty dict is a leaf)."""
    items: list[tuple[str, Any]] = []
    for name, value in tree.items():
        path = f"{prefix}{name}"
        nested = isinstance(value, dict) and value
        items += leaf_items(value, f"{path}.") if nested else [(path, value)]
    return items


def keys_at_hand(cfg: DictConfig) -> Callable[[str], bool]:
    """A test of whether ``cfg`` may hold a dotted path, read from its paths as they stand
    (``leaf_items`` of the unresolved tree, each leaf's sections too): for the hundreds of
    foreign keys looked for in every load, where an ``OmegaConf.select`` of each was a third of
    the load. False only where the path surely is not there: under a list or an interpolation
    (which ``select`` goes through) it says True and ``select`` decides."""
    present: set[str] = set()
    opaque: set[str] = set()
    for path, value in leaf_items(OmegaConf.to_container(cfg, resolve=False)):
        parts = path.split(".")
        present.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        if isinstance(value, list) or (isinstance(value, str) and "${" in value):
            opaque.add(path)

    def may_hold(path: str) -> bool:
        parts = path.split(".")
        return path in present or any(".".join(parts[:i]) in opaque for i in range(1, len(parts)))

    return may_hold


def pop_key(cfg: DictConfig, path: str) -> Any:
    """The value at ``path`` (``ABSENT`` when none), removed with its emptied parents."""
    value = OmegaConf.select(cfg, path, default=ABSENT)
    if value is not ABSENT:
        parent_key, _, leaf = path.rpartition(".")
        OmegaConf.select(cfg, parent_key).pop(leaf)
        _drop_empty_parents(cfg, parent_key)
    return value


def _own_value(own: DictConfig, path: str) -> Any:
    """What the file itself writes at ``path`` (``ABSENT`` if nothing); an interpolation that
    points outside the file is not resolved here."""
    return OmegaConf.select(own, path, default=ABSENT, throw_on_resolution_failure=False)


def _drop_empty_parents(cfg: DictConfig, path: str) -> None:
    while path:
        parent_key, _, leaf = path.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        node = parent.get(leaf)
        if not isinstance(node, DictConfig) or len(node):
            return
        parent.pop(leaf)
        path = parent_key
