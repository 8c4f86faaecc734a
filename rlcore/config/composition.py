"""Compose a config with Hydra: find it, parse the command line's overrides, compose the YAML
(defaults lists, config groups such as ``cluster=NAME``) and settle the component placement.

Hydra composes the YAML and parses the override grammar; the plain ``key=value`` overrides are
applied afterwards by the loader (``load.py``), so a key the YAML leaves at its schema default
can be overridden without ``+``, and an unknown key gets the same "did you mean" error whether it
came from a file or from the command line.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlcore.config.errors import ConfigError
from rlcore.did_you_mean import did_you_mean

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


def _as_literal(parser: OverridesParser, override: str) -> str:
    """``override``, or where Hydra's grammar refuses it but it can only mean ``key`` = one
    string, that string quoted for Hydra: a path from the home folder (``data.train_files=
    ~/d/x``: the shell leaves a ``~`` after a dotted key as it is; rlcore expands it in a path
    key) or a regular expression (``reward.judge.parser=Score:\\s*(\\d+)``). A value with quotes,
    brackets, braces, commas or an interpolation is left to Hydra (and its error)."""
    try:
        parser.parse_overrides([override])
        return override
    except HydraException:
        pass
    match = re.fullmatch(r"(?P<key>[+]{0,2}[\w.\-/@]+)=(?P<value>[^'\"\[\]{},]*)", override)
    if match is None or "${" in match["value"]:
        return override
    value = match["value"]
    body = value.rstrip("\\")
    # (in a quoted string, the backslashes before the closing quote are escaped in pairs)
    tail = "\\" * 2 * (len(value) - len(body))
    return f"{match['key']}='{body}{tail}'"


def parse_overrides(overrides: Sequence[str]) -> list[Override]:
    parser = OverridesParser.create()
    try:
        parsed: list[Override] | None = parser.parse_overrides(list(overrides))
    except HydraException:
        parsed, overrides = None, [_as_literal(parser, o) for o in overrides]
    try:
        if parsed is None:
            parsed = parser.parse_overrides(list(overrides))
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


def repeated_keys(parsed: Sequence[Override]) -> list[str]:
    """Hydra's rule for a key given more than once on a command line is that the last value wins
    (verl's scripts end in ``$@``, so ``bash run_x.sh key=value`` overrides the script's own
    value): one line per key given again, naming the value that wins."""
    given: dict[str, list[str]] = {}
    for override in parsed:
        given.setdefault(override.key_or_group, []).append(override.input_line)
    return [
        f"{key} is given {len(each)} times ({', then '.join(each)}): the last, {each[-1]}, "
        "wins (Hydra's rule)"
        for key, each in given.items()
        if len(each) > 1
    ]


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


@dataclasses.dataclass(frozen=True)
class Request:
    """A config to compose and its command line, sorted: ``config`` as the user named it, the
    package's ``config_dir``, the config's file ``directory/name.yaml``; ``searched``, the
    folders whose config groups it may pick (the file's, then the package's);
    ``hydra_overrides``, what Hydra composes with (group choices such as ``cluster=NAME``, and
    the package's folder on the search path); ``parsed``, every override; ``plain``, the
    ``key=value`` ones, applied after composition, in order (a key given again: its last value
    wins); ``repeated``, a line for each key given more than once."""

    config: str
    config_dir: Path
    directory: Path
    name: str
    searched: tuple[Path, ...]
    hydra_overrides: tuple[str, ...]
    parsed: tuple[Override, ...]
    plain: tuple[Override, ...]
    repeated: tuple[str, ...] = ()

    @property
    def users_own_file(self) -> bool:
        """Whether the config file is the user's own, not one of the package's configs/ (named,
        or given by its path): what a user's file sets, the user set."""
        file = (self.directory / f"{self.name}.yaml").resolve()
        return not file.is_relative_to(self.config_dir.resolve())


def read_request(config: str, overrides: Sequence[str], config_dir: Path = CONFIG_DIR) -> Request:
    """Find ``config`` (a name under ``config_dir`` or a YAML path), parse ``overrides`` and sort
    them into Hydra's group choices, each checked to name a file, and plain keys. ``ConfigError``
    names a missing config, an unparsable override or an unknown choice."""
    directory, name = locate_config(config, config_dir)
    parsed = parse_overrides(overrides)
    # A config file elsewhere composes with the package's groups (`/cluster: local`,
    # `cluster=gpu_2x8`) as a config name does; groups next to the file come first.
    searched = (directory,) + ((config_dir,) if directory != config_dir else ())
    is_group = [any((d / o.key_or_group).is_dir() for d in searched) for o in parsed]
    last = {o.key_or_group: o for o in parsed}  # (a group chosen twice: its last choice)
    groups = [
        o for o, group in zip(parsed, is_group, strict=True) if group and last[o.key_or_group] is o
    ]
    hydra_overrides = [o.input_line for o in groups]
    for override in groups:
        if override.type is not OverrideType.DEL:
            _check_group_choice(list(searched), override)
    if directory != config_dir:
        hydra_overrides.append(f"hydra.searchpath=[file://{config_dir}]")
    plain = tuple(o for o, group in zip(parsed, is_group, strict=True) if not group)
    return Request(
        config,
        config_dir,
        directory,
        name,
        searched,
        tuple(hydra_overrides),
        tuple(parsed),
        plain,
        tuple(repeated_keys(parsed)),
    )


def compose_with_hydra(request: Request) -> tuple[DictConfig, DictConfig]:
    """Hydra's composition of the request (defaults lists, group choices), open to new keys, and the
    config file itself as written (``own``: what decides precedence between spellings).
    ``ConfigError`` names a broken YAML file or what Hydra could not compose."""
    directory, name = request.directory, request.name
    cache = directory == request.config_dir  # (a file elsewhere is read afresh)
    try:
        cfg = _compose(directory, name, list(request.hydra_overrides), cache=cache)
    except yaml.YAMLError:
        for folder in request.searched:
            _check_yaml_files(directory / f"{name}.yaml", folder)  # names the broken file
        raise
    except (HydraException, OmegaConfBaseException) as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(f"{request.config}: Hydra could not compose it: {first}") from None
    _reject_nested_package(cfg, name, directory)
    OmegaConf.set_struct(cfg, False)
    return cfg, _load_yaml(directory / f"{name}.yaml")


def settle_placement(
    cfg: DictConfig, own: DictConfig, request: Request, cluster_file: Path | None
) -> None:
    """One component placement where Hydra would merge several: the config file's own beats its
    defaults list's, a ``cluster=NAME`` file's beats both, and ``cluster_file`` replaces the whole
    ``cluster`` section."""
    _own_placement_wins(cfg, own)
    _placement_from_cluster_choice(cfg, list(request.searched), list(request.parsed))
    if cluster_file is not None:
        cfg.cluster = load_cluster_file(cluster_file)


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
