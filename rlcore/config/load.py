"""Compose a config with Hydra, apply ``key=value`` overrides, validate it.

Hydra composes the YAML (defaults lists, config groups such as ``cluster=NAME``) and parses the
override grammar; plain ``key=value`` overrides are then applied here, so a key the YAML leaves at
its schema default can be overridden without ``+``, and an unknown key gets the same
"did you mean" error whether it came from a file or from the command line.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlcore.config.aliases import ALIASES, DERIVED_KEYS, TOKEN_BUDGETS, current_keys
from rlcore.config.checks import check_config
from rlcore.config.errors import ConfigError
from rlcore.config.schema import RLCoreConfig
from rlcore.config.validate import build_config
from rlcore.did_you_mean import did_you_mean
from rlcore.log import say

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


# Folders of configs/ that hold alternatives for one section (picked by `cluster=NAME`), not runs.
GROUP_FOLDERS = ("cluster",)


def config_names(config_dir: Path = CONFIG_DIR) -> list[str]:
    """Names of the runnable configs under ``config_dir`` (``embodied/cartpole_ppo``, ...)."""
    names = (str(p.relative_to(config_dir).with_suffix("")) for p in config_dir.rglob("*.yaml"))
    return sorted(n for n in names if n.split("/")[0] not in GROUP_FOLDERS)


def shipped_configs(mode: str, config_dir: Path = CONFIG_DIR) -> list[tuple[str, str]]:
    """``(name, what it runs)`` of each config shipped for ``mode``: its ``# description:``
    line."""
    found = []
    for path in sorted((config_dir / mode).glob("*.yaml")):
        lines = [
            line for line in path.read_text().splitlines() if line.startswith("# description:")
        ]
        what = lines[0].removeprefix("# description:").strip() if lines else "(no description)"
        found.append((f"{mode}/{path.stem}", what))
    return found


def locate_config(config: str, config_dir: Path = CONFIG_DIR) -> tuple[Path, str]:
    """``(config dir, config name)`` for a config name under ``config_dir`` or a YAML path."""
    as_path = Path(config)
    if as_path.suffix in (".yaml", ".yml"):
        if not as_path.is_file():
            raise ConfigError(f"{config}: no such config file")
        return as_path.resolve().parent, as_path.stem
    name = config.removesuffix("/")
    if not (config_dir / f"{name}.yaml").is_file():
        names = config_names(config_dir)
        raise ConfigError(
            f"{config}: no config of that name under {config_dir}{did_you_mean(name, names)}; "
            f"known: {', '.join(names)}"
        )
    return config_dir, name


# Hydra's compositions and the YAML files read, kept per process: composing reads and merges
# every file of a defaults list (60-80 ms a config on these cores), and one process composes the
# same configs again and again (the dry run and the run, a sweep, the test suite's ~700 loads).
# Keyed by every YAML file of the config folder (path, size, modification time): an edited
# file is read again. Each caller gets its own copy.
_COMPOSED: dict[tuple, DictConfig] = {}
_CACHE_SIZE = 64


def _yaml_files(folder: Path) -> tuple:
    return tuple(
        sorted(
            (str(path), stat.st_size, stat.st_mtime_ns)
            for path in folder.rglob("*.y*ml")
            for stat in (path.stat(),)
        )
    )


def _remember(key: tuple, make: Callable[[], DictConfig]) -> DictConfig:
    if key not in _COMPOSED:
        if len(_COMPOSED) >= _CACHE_SIZE:
            _COMPOSED.pop(next(iter(_COMPOSED)))
        _COMPOSED[key] = make()
    return copy.deepcopy(_COMPOSED[key])


def _compose(directory: Path, name: str, group_overrides: list[str], cache: bool) -> DictConfig:
    """Hydra's composition of config ``name`` in ``directory`` with ``group_overrides`` (kept
    when ``cache``: a config name under the config folder, whose files are all signed)."""

    def make() -> DictConfig:
        with initialize_config_dir(version_base=None, config_dir=str(directory)):
            return compose(config_name=name, overrides=group_overrides)

    if not cache:
        return make()
    return _remember(("compose", name, tuple(group_overrides), _yaml_files(directory)), make)


def _load_yaml(path: Path) -> DictConfig:
    stat = path.stat()
    key = ("file", str(path), stat.st_size, stat.st_mtime_ns)
    return _remember(key, lambda: OmegaConf.load(path))


def parse_overrides(overrides: Sequence[str]) -> list[Override]:
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        first = str(exc).splitlines()[0]
        fused = any("component_placement={" in o and ("'" in o or '"' in o) for o in overrides)
        hint = (
            "; a key naming several components is written actor+ref on the command line "
            "(e.g. cluster.component_placement={actor+ref:0,rollout:1})"
            if fused
            else ""
        )
        raise ConfigError(
            f"cannot parse override: {first} (write key=value, e.g. algorithm.gamma=0.99){hint}"
        ) from None
    for override in parsed:
        if override.is_sweep_override():
            raise ConfigError(
                f"{override.input_line}: sweeps are not supported; run one value at a time"
            )
    return parsed


def refuse_repeated(overrides: Sequence[str]) -> None:
    """``ConfigError`` naming a key given twice on a command line (Hydra would take the last
    without a word, and a typed-again key is more often a mistake than a wish)."""
    seen: dict[str, str] = {}
    for override in parse_overrides(overrides):
        key = override.key_or_group
        if key in seen:
            raise ConfigError(
                f"{key} is given twice ({seen[key]} and {override.input_line}); give it once"
            )
        seen[key] = override.input_line


def load_cluster_file(path: Path) -> DictConfig:
    """A cluster file: the cluster keys at the top level, or wrapped in ``cluster:``."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such cluster file")
    try:
        loaded = OmegaConf.load(path)
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_problem(path, exc)) from None
    except (OmegaConfBaseException, OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{path}: a cluster file holds the cluster keys (num_nodes, ...)")
    if list(loaded.keys()) == ["cluster"]:
        loaded = loaded.cluster
    return loaded


def yaml_problem(path: Path, error: yaml.YAMLError) -> str:
    """One line: the file, what the YAML parser found wrong, and where."""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    mark = getattr(error, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{path}: not valid YAML: {problem}{where}; fix the file's syntax"


def _check_yaml_files(first: Path, directory: Path) -> None:
    """``first``, then every YAML file a composition may read in ``directory`` (its files and
    its groups'), parses; Hydra would print the parser's traceback instead."""
    for path in [first, *sorted([*directory.glob("*.yaml"), *directory.glob("*/*.yaml")])]:
        try:
            yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(yaml_problem(path, exc)) from None


def compose_raw(
    config: str,
    overrides: Sequence[str] = (),
    config_dir: Path = CONFIG_DIR,
    cluster_file: Path | None = None,
) -> dict:
    """The composed config as a plain dict, interpolations resolved, not yet validated.

    ``cluster_file`` replaces the whole ``cluster`` section; overrides apply after it. verl's and
    RLinf's spellings (``aliases.py``) become rlcore's keys, each said once (``rlcore.log``).
    """
    directory, name = locate_config(config, config_dir)
    parsed = parse_overrides(overrides)
    # A config file elsewhere composes with the package's groups (`/cluster: local`,
    # `cluster=gpu_2x8`) as a config name does; groups next to the file come first.
    searched = [directory] + ([config_dir] if directory != config_dir else [])

    def is_group(override: Override) -> bool:
        return any((d / override.key_or_group).is_dir() for d in searched)

    group_overrides = [o.input_line for o in parsed if is_group(o)]
    for override in parsed:
        if is_group(override) and override.type is not OverrideType.DEL:
            _check_group_choice(searched, override)
    if directory != config_dir:
        group_overrides.append(f"hydra.searchpath=[file://{config_dir}]")
    try:
        cfg = _compose(directory, name, group_overrides, cache=directory == config_dir)
    except yaml.YAMLError:
        for folder in searched:
            _check_yaml_files(directory / f"{name}.yaml", folder)  # names the broken file
        raise
    except (HydraException, OmegaConfBaseException) as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(f"{config}: Hydra could not compose it: {first}") from None
    _reject_nested_package(cfg, name, directory)
    OmegaConf.set_struct(cfg, False)
    own = _load_yaml(directory / f"{name}.yaml")  # the file itself, before composition
    _own_placement_wins(cfg, own)
    _placement_from_cluster_choice(cfg, searched, parsed)
    if cluster_file is not None:
        cfg.cluster = load_cluster_file(cluster_file)
    said: list[str] = []
    _rename_aliases(cfg, own, said)
    by_alias: dict[str, tuple[str, Any]] = {}  # target -> (the alias that set it, its value)
    for override in parsed:
        if not is_group(override):
            _apply(cfg, override, said, by_alias)
    _verl_token_budgets(cfg, said)
    _verl_custom_reward(cfg, said)
    _drop_derived_keys(cfg, said)
    _no_warmup_for_a_given_model(cfg, said)
    _env_file_made_absolute(cfg)
    for line in dict.fromkeys(said):
        say(line)
    try:
        raw = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        first = str(exc).splitlines()[0]
        if "Interpolation key" in first:
            first += " (an interpolation sees the keys set in the YAML and overrides, not defaults)"
        raise ConfigError(f"{config}: {first}") from None
    assert isinstance(raw, dict)
    return raw


def _group_file(searched: list[Path], group: str, choice: Any) -> Path | None:
    """The file of ``group=choice`` in the first searched folder that has it."""
    return next(
        (
            d / group / f"{choice}.yaml"
            for d in searched
            if (d / group / f"{choice}.yaml").is_file()
        ),
        None,
    )


def _own_placement_wins(cfg: DictConfig, own: DictConfig) -> None:
    """A config that places the components itself (``own``: the file) replaces the placement of
    the configs its defaults list pulls in: Hydra would merge the two mappings, placing
    components twice."""
    placement = OmegaConf.select(own, "cluster.component_placement", default=None)
    if isinstance(placement, DictConfig):
        cfg.cluster.component_placement = placement


def _placement_from_cluster_choice(
    cfg: DictConfig, searched: list[Path], parsed: list[Override]
) -> None:
    """``cluster=NAME`` whose file places the components replaces the config's placement.

    Hydra merges dicts, so a mode config's own placement (``actor,critic,...: 0`` for one CPU
    process) would otherwise be mixed with the cluster file's, placing components twice.
    """
    for override in parsed:
        if override.key_or_group == "cluster" and override.type is not OverrideType.DEL:
            chosen = load_cluster_file(_group_file(searched, "cluster", override.value()))
            if "component_placement" in chosen:
                cfg.cluster.component_placement = chosen.component_placement


def _check_group_choice(searched: list[Path], override: Override) -> None:
    group, choice = override.key_or_group, override.value()
    if _group_file(searched, group, choice) is None:
        names = sorted({p.stem for d in searched for p in (d / group).glob("*.yaml")})
        where = " or ".join(str(d / group) for d in searched if (d / group).is_dir())
        raise ConfigError(
            f"{override.input_line}: no '{choice}' in {where}"
            f"{did_you_mean(str(choice), names)}; known: {', '.join(names)}"
        )


def _reject_nested_package(cfg: DictConfig, name: str, directory: Path) -> None:
    folder = name.split("/")[0]
    if "/" in name and list(cfg.keys()) == [folder]:
        raise ConfigError(
            f"{directory / name}.yaml: start the file with the line '# @package _global_' "
            f"(Hydra otherwise nests a config in a sub-folder under the key '{folder}')"
        )


_ABSENT = object()


def _rename_aliases(cfg: DictConfig, own: DictConfig, said: list[str]) -> None:
    """Move every alias the composed YAML sets to the rlcore key(s) it means.

    Composition has merged the file with the configs its defaults list names, so precedence is
    decided against the file itself (``own``): a key the file sets beats the configs below it in
    either spelling, and the file setting one key in both spellings to different values is a
    contradiction, as are two aliases of one key (verl's actor and critic spellings of
    ``use_remove_padding``) set to different values."""
    by_alias: dict[str, tuple[str, Any]] = {}  # target -> (the alias that set it, its value)
    for path, alias in ALIASES.items():
        value = _pop_select(cfg, path)
        if value is _ABSENT:
            continue
        alias_is_own = _own_value(own, path) is not _ABSENT
        plain = (
            OmegaConf.to_container(value) if isinstance(value, DictConfig | ListConfig) else value
        )
        for target, converted in alias.values(plain):
            already = _own_value(own, target)
            if already is not _ABSENT and not alias_is_own:
                continue  # the file's own rlcore key beats an alias from a config below it
            if already is not _ABSENT and already != converted:
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
                raise ConfigError(
                    f"{path}: set to {plain!r}, but {other} sets {earlier!r}; both are {target} "
                    "here, so keep one value"
                )
            OmegaConf.update(cfg, target, converted, merge=False, force_add=True)
        said.append(alias.describe(path))


def _verl_token_budgets(cfg: DictConfig, said: list[str]) -> None:
    """verl's ``use_dynamic_bsz`` with its ``*_max_token_len_per_gpu`` (``TOKEN_BUDGETS``),
    from the YAML or the command line, as the token budget they mean: the budget where the
    switch is on (verl's default length when none is given), nothing where it is off (verl
    ignores the length then, as said). The critic's switch follows the actor's, as in verl.
    Every pair of one target must give one budget, which the rlcore key, if set, must equal."""
    switches: dict[str, Any] = {}
    for target, pairs in TOKEN_BUDGETS.items():
        budgets: dict[int, str] = {}
        for switch_path, length_key, default in pairs:
            section = switch_path.rpartition(".")[0]
            length_path = f"{section}.{length_key}"
            if switch_path not in switches:
                switches[switch_path] = _pop_select(cfg, switch_path)
            switch, follows = switches[switch_path], ""
            if switch is _ABSENT and switch_path == "critic.use_dynamic_bsz":
                switch = switches.get("actor_rollout_ref.actor.use_dynamic_bsz", _ABSENT)
                follows = " (its switch follows the actor's, as in verl)"
            length = _pop_select(cfg, length_path)
            if switch is _ABSENT and length is _ABSENT:
                continue
            if switch is True:
                budget = default if length is _ABSENT else length
                if length is _ABSENT and budgets:
                    continue  # (the target's budget is said already)
                budgets.setdefault(budget, length_path)
                said.append(
                    f"{switch_path} and {length_path} (verl) are {target}={budget} here: "
                    f"micro-batches of at most that many tokens{follows}"
                )
            elif length is not _ABSENT:
                said.append(
                    f"{length_path} (verl) has no effect without {switch_path}=true, as in "
                    "verl: ignored"
                )
        if len(budgets) > 1:
            named = ", ".join(f"{path}={value}" for value, path in budgets.items())
            raise ConfigError(
                f"{named}: one token budget here ({target}: the update and the forward passes "
                "of that model), so give one length"
            )
        if budgets:
            (budget,) = budgets
            given = OmegaConf.select(cfg, target, default=None)
            if given is not None and given != budget:
                raise ConfigError(
                    f"{budgets[budget]}={budget}, but {target} is {given}; they are one key "
                    "here, so keep one value"
                )
            OmegaConf.update(cfg, target, budget, merge=False, force_add=True)


def _verl_custom_reward(cfg: DictConfig, said: list[str]) -> None:
    """verl's ``custom_reward_function.path`` and ``.name`` (``compute_score`` when not given;
    verl 0.9 also spells them under ``reward.``) as ``reward.kind=custom`` with
    ``reward.custom_fn=PATH:NAME``: the function replaces the built-in rules, as in verl, and
    is called as verl calls it when written so (``judge.verl_signature``)."""
    for prefix in ("custom_reward_function", "reward.custom_reward_function"):
        path = _pop_select(cfg, f"{prefix}.path")
        name = _pop_select(cfg, f"{prefix}.name")  # (the emptied section goes with them)
        if path is _ABSENT or path is None:
            continue
        fn = f"{path}:{'compute_score' if name in (_ABSENT, None) else name}"
        given = OmegaConf.select(cfg, "reward.custom_fn", default=None)
        if given is not None and given != fn:
            raise ConfigError(
                f"{prefix}.path: names {fn}, but reward.custom_fn is {given}; they are one key "
                "here, so keep one"
            )
        OmegaConf.update(cfg, "reward.custom_fn", fn, merge=False, force_add=True)
        OmegaConf.update(cfg, "reward.kind", "custom", merge=False, force_add=True)
        said.append(
            f"{prefix}.path and .name (verl) are reward.kind=custom, reward.custom_fn={fn} here "
            "(a function written as verl's compute_score(data_source, solution_str, "
            "ground_truth, extra_info) is called so)"
        )


def _pop_select(cfg: DictConfig, path: str) -> Any:
    """The value at ``path`` (``_ABSENT`` when none), removed with its emptied parents."""
    value = OmegaConf.select(cfg, path, default=_ABSENT)
    if value is not _ABSENT:
        parent_key, _, leaf = path.rpartition(".")
        OmegaConf.select(cfg, parent_key).pop(leaf)
        _drop_empty_parents(cfg, parent_key)
    return value


def _drop_derived_keys(cfg: DictConfig, said: list[str]) -> None:
    """rlcore's earlier keys for values that now follow from the mode (``DERIVED_KEYS``), from
    the YAML or the command line: checked against the mode and removed (the validator would
    call them unknown)."""
    mode = cfg.get("mode")
    for path, derived in DERIVED_KEYS.items():
        value = _pop_select(cfg, path)
        if value is _ABSENT:
            continue
        said.append(derived.check(path, value, mode))


def _no_warmup_for_a_given_model(cfg: DictConfig, said: list[str]) -> None:
    """The supervised warm-up trains the tiny model only: a reasoning config that names a model
    (``actor.model.path``, as the seeds' commands do on the default job) runs without it, said in
    one line, where it was refused."""
    path = OmegaConf.select(cfg, "actor.model.path", default=None)
    steps = OmegaConf.select(cfg, "warmup.steps", default=0)
    if cfg.get("mode") != "reasoning" or path is None or not isinstance(steps, int) or steps <= 0:
        return
    cfg.warmup.steps = 0
    examples = OmegaConf.select(cfg, "warmup.examples", default=None)
    if examples is not None:  # (the warm-up's problems: none either)
        cfg.warmup.examples = None
    said.append(
        f"warmup.steps: {steps} set to 0{' (and warmup.examples to null)' if examples else ''}: "
        "the supervised warm-up trains the tiny model only, and actor.model.path names a model "
        f"({path})"
    )


def _env_file_made_absolute(cfg: DictConfig) -> None:
    """``env.id=path/to/file.py:Class`` names the file from where the run starts; every process
    of the run (a Ray worker starts elsewhere) reads it by its absolute path."""
    env_id = OmegaConf.select(cfg, "env.id", default=None)
    if not isinstance(env_id, str) or ":" not in env_id:
        return
    file, _, attr = env_id.rpartition(":")
    if file.endswith(".py") and attr.isidentifier():
        cfg.env.id = f"{Path(file).expanduser().absolute()}:{attr}"


def _own_value(own: DictConfig, path: str) -> Any:
    """What the file itself writes at ``path`` (``_ABSENT`` if nothing); an interpolation that
    points outside the file is not resolved here."""
    return OmegaConf.select(own, path, default=_ABSENT, throw_on_resolution_failure=False)


def _drop_empty_parents(cfg: DictConfig, path: str) -> None:
    while path:
        parent_key, _, leaf = path.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        node = parent.get(leaf)
        if not isinstance(node, DictConfig) or len(node):
            return
        parent.pop(leaf)
        path = parent_key


def _apply(
    cfg: DictConfig, override: Override, said: list[str], by_alias: dict[str, tuple[str, Any]]
) -> None:
    key = override.key_or_group
    alias = ALIASES.get(key)
    if alias is not None:
        if override.type is OverrideType.DEL:
            raise ConfigError(
                f"{override.input_line}: {key} is {' and '.join(alias.targets)} here; delete that"
            )
        for target, value in alias.values(override.value()):
            other, earlier = by_alias.setdefault(target, (key, value))
            if other != key and earlier != value and len(alias.targets) == 1:
                raise ConfigError(
                    f"{override.input_line}: {other} sets {earlier!r}; both are {target} here, "
                    "so keep one value"
                )
            by_alias[target] = (key, value)  # (the same key again: the later value, as Hydra)
            OmegaConf.update(cfg, target, value, merge=False, force_add=True)
        said.append(alias.describe(key))
        return
    try:
        if override.type is OverrideType.DEL:
            parent_key, _, leaf = key.rpartition(".")
            parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
            if not isinstance(parent, DictConfig) or leaf not in parent:
                raise ConfigError(f"{override.input_line}: '{key}' is not set, nothing to delete")
            parent.pop(leaf)
            return
        OmegaConf.update(cfg, key, override.value(), merge=False, force_add=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{override.input_line}: {str(exc).splitlines()[0]}") from None


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
    return validate_config(compose_raw(config, overrides, config_dir, cluster_file))


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
