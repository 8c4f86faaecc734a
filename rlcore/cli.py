"""The rlcore command (also python -m rlcore), and the example entry points' start-up.

    rlcore embodied [--config NAME|PATH] [key=value ...]   train: examples/embodied/main.py
    rlcore reasoning [--config NAME|PATH] [key=value ...]  train: examples/reasoning/main.py
    rlcore config CONFIG [key=value ...] [--json] [--cluster FILE]   the validated config
    rlcore placement CONFIG [key=value ...] [--json] [--cluster FILE]  the placement plan
    rlcore placement CONFIG [key=value ...] --advise [--profile]   candidate layouts, ranked
    rlcore keys [--write DOC]                                     the key reference
    rlcore export RUN [--step N] OUT         a run's policy as a Hugging Face folder (reasoning)
                                             or for rlcore.load_policy (embodied)

CONFIG is a config name under configs/ (``embodied/cartpole_ppo``) or a YAML path; ``--cluster``
replaces the config's cluster section with a file's (docs/placement.md). A bad config or
placement prints one line per problem and exits with status 2, before anything starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from rlcore.config import ConfigError, RLCoreConfig, load_config
from rlcore.config.fields import as_plain
from rlcore.config.load import replace_keys
from rlcore.config.reference import key_reference, write_reference
from rlcore.placement import PlacementPlan, plan_for_config

EXIT_BAD_CONFIG = 2
# ``rlcore MODE ...`` trains as ``examples/MODE/main.py ...`` does, from the mode's default config
RUN_COMMANDS = {"embodied": "embodied/cartpole_ppo", "reasoning": "reasoning/tiny_arith_ppo"}


def _exit_with(error: ConfigError) -> SystemExit:
    for line in str(error).splitlines():
        print(f"rlcore: config error: {line}", file=sys.stderr)
    return SystemExit(EXIT_BAD_CONFIG)


def load_and_plan(
    config: str, overrides: Sequence[str], cluster_file: Path | None = None
) -> tuple[RLCoreConfig, PlacementPlan]:
    """The validated config and its placement plan, its inputs checked (``preflight``); on any
    problem, stderr and exit status 2, before anything starts."""
    from rlcore.runners.preflight import preflight

    try:
        loaded = load_config(config, overrides, cluster_file=cluster_file)
        predicted = None
        if loaded.cluster.component_placement == "auto":  # profiled and chosen (profiling.py)
            from rlcore.runners.profiling import choose_placement

            one = replace_keys(  # the inputs checked before anything is measured
                loaded, {"cluster.component_placement": None, "runner.max_staleness": 0}
            )
            preflight(one, plan_for_config(one))
            loaded, best = choose_placement(loaded)
            predicted = best.prediction.iteration_s
        plan = plan_for_config(loaded)
        preflight(loaded, plan)  # model folders, prompt files, reward, env, checkpoint
        return loaded, dataclasses.replace(plan, predicted_iteration_s=predicted)
    except ConfigError as error:
        raise _exit_with(error) from None


def config_as_yaml(config: RLCoreConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(as_plain(config)))


def _entry_help(default_config: str) -> str:
    """The shipped configs of the entry point's mode and the commands around a run."""
    from rlcore.config.composition import shipped_configs

    mode = default_config.split("/")[0]
    lines = []
    if mode in ("embodied", "reasoning"):  # (a program may start from a YAML of its own)
        other = "reasoning" if mode == "embodied" else "embodied"
        shipped = shipped_configs(mode)
        width = max(len(name) for name, _ in shipped)
        lines += [f"shipped {mode} configs (--config NAME; {default_config} by default):"]
        lines += [f"  {name:<{width}}  {what}" for name, what in shipped]
        lines += [f"  ({other} configs: examples/{other}/main.py --help)", ""]
    lines += [
        "check a config and its placement without starting anything:",
        "  ... runner.dry_run=true",
        "every key with its default, range and doc:   rlcore keys",
        "where each component would run:              rlcore placement NAME [key=value ...]",
        "a config with every default filled in:       rlcore config NAME [key=value ...]",
    ]
    return "\n".join(lines)


def _config_arguments(parser: argparse.ArgumentParser, config_default: str | None) -> None:
    if config_default is None:
        parser.add_argument("config", help="config name under configs/ or a YAML path")
    else:
        parser.add_argument(
            "--config", default=config_default, help=f"config name or YAML path ({config_default})"
        )
    parser.add_argument("overrides", nargs="*", help="Hydra-style key=value overrides")
    parser.add_argument(
        "--cluster", type=Path, metavar="FILE", help="a cluster file replacing the cluster section"
    )


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, letting ``key=value`` overrides stand before or after the options."""
    args, extra = parser.parse_known_args(argv)
    stray = [a for a in extra if a.startswith("-") or "=" not in a]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if hasattr(args, "overrides"):
        args.overrides = [*args.overrides, *extra]
    return args


def run_entry_point(
    default_config: str, argv: Sequence[str] | None = None, prog: str | None = None
) -> int:
    """``[--config NAME|PATH] [--cluster FILE] [key=value ...]``: validate, plan, run."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Compose, validate and run an rlcore config.",
        epilog=_entry_help(default_config),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _config_arguments(parser, default_config)
    args = _parse(parser, argv)
    config, plan = load_and_plan(args.config, args.overrides, args.cluster)
    print(plan.table())
    if config.runner.dry_run:
        print("rlcore: dry run: the config and placement are valid; nothing was started.")
        return 0
    return _run(config, plan)


def _run(config: RLCoreConfig, plan: PlacementPlan) -> int:
    """Prepare the models, then train under the supervisor (restarts after a lost worker). Bad
    data, model paths, envs and rewards are reported like bad configs, wherever they are met: one
    line, status 2."""
    from rlcore.data import DataError
    from rlcore.prepare import prepare
    from rlcore.runners.supervisor import RunLost, run
    from rlcore.scheduler.errors import WorkerError

    try:
        # the models (the tiny one built and warmed up, if so configured) before any driver:
        # every attempt of the supervisor reuses them
        summary = run(config, plan, prepare(config))
    except (ConfigError, DataError) as error:
        raise _exit_with(ConfigError(str(error))) from None
    except WorkerError as error:  # a bad input met in a worker process: one line, as above
        if error.user_error is None:
            raise
        where = f"{error.group or error.component} rank {error.rank} on node {error.node}"
        raise _exit_with(ConfigError(f"{error.user_error} ({where})")) from None
    except RunLost as error:  # the story of the losses (the run folder keeps its checkpoints)
        for line in str(error).splitlines():
            print(f"rlcore: error: {line}", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0


def _advise(config: RLCoreConfig, remeasure: bool, ranked: bool, iterations: int) -> int:
    """``rlcore placement --profile`` / ``--advise`` (docs/placement.md, "Choosing a
    placement")."""
    from rlcore.placement.advise import json_line, table
    from rlcore.runners.profiling import advise, profile

    if not ranked:
        _, path = profile(config, iterations)
        print(f"placement: profile kept in {path}")
        return 0
    candidates = advise(config, remeasure, iterations)
    print(table(candidates))
    print(json_line(candidates))
    return 0


def _check_placement_options(args: argparse.Namespace) -> None:
    """``rlcore placement``'s options that only mean something beside another: refused alone
    in one line each (status 2); their defaults filled in."""
    problems = []
    if args.throughput is not None and args.profile_file is None:
        problems.append("--throughput: goes with --profile-file (a profile on paper, scaled)")
    if args.profile_file is not None and not args.advise:
        problems.append("--profile-file: goes with --advise (a profile is read, not made)")
    if args.iterations is not None and not (args.profile or args.advise):
        problems.append("--iterations: goes with --profile or --advise (what is measured)")
    if args.iterations is not None and args.iterations < 1:
        problems.append(f"--iterations: {args.iterations}; give at least 1")
    if args.throughput is not None and not args.throughput > 0:
        problems.append(f"--throughput: {args.throughput}; give a number above 0")
    if problems:
        raise _exit_with(ConfigError("\n".join(problems)))
    args.iterations = 3 if args.iterations is None else args.iterations
    args.throughput = 1.0 if args.throughput is None else args.throughput


def _advise_on_paper(args: argparse.Namespace) -> int:
    """``rlcore placement CONFIG --advise --profile-file FILE [--throughput X]``: the advisor
    for a cluster from a profile measured elsewhere (docs/placement.md, "On paper")."""
    from rlcore.placement.advise import json_line, rank, table, valid_candidates
    from rlcore.placement.cost import scaled
    from rlcore.runners.profiling import read_profile_file

    try:
        config = load_config(args.config, args.overrides, cluster_file=args.cluster)
        profiles = read_profile_file(args.profile_file, config)
    except ConfigError as error:
        raise _exit_with(error) from None
    profiles = {t: scaled(p, args.throughput) for t, p in profiles.items()}
    ranked = rank(valid_candidates(config, tuple(profiles)), profiles)
    print(table(ranked))
    print(json_line(ranked))
    return 0


def _placement_arguments(place: argparse.ArgumentParser) -> None:
    """``rlcore placement``'s flags beside the config's: print, profile, advise, on paper."""
    place.add_argument("--json", action="store_true", help="print one JSON object")
    place.add_argument(
        "--profile",
        action="store_true",
        help="measure the config's iteration in one process, each component apart, and keep "
        "it (runner.output_dir/placement/) for --advise",
    )
    place.add_argument(
        "--advise",
        action="store_true",
        help="rank every candidate layout for the cluster by its predicted seconds per "
        "iteration (profiling first where no profile is kept); the last line is JSON",
    )
    place.add_argument(
        "--iterations", type=int, help="with --profile or --advise: measured iterations (3)"
    )
    place.add_argument(
        "--profile-file",
        type=Path,
        metavar="FILE",
        help="--advise from this profile (JSON, the kept profiles' format) instead of measuring "
        "here: a cluster this machine cannot see, on paper; the config's inputs are not checked",
    )
    place.add_argument(
        "--throughput",
        type=float,
        help="with --profile-file: the cluster's devices this many times as fast as the "
        "profile's (its computed seconds divided by it; 1)",
    )


def _command_parser() -> argparse.ArgumentParser:
    """The ``rlcore`` command's parser; its run commands are listed, parsed by their own."""
    parser = argparse.ArgumentParser(prog="rlcore", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for mode, default in RUN_COMMANDS.items():
        commands.add_parser(
            mode,
            help=f"train: [--config NAME|PATH] [key=value ...], {default} by default "
            f"(as examples/{mode}/main.py; rlcore {mode} --help lists the configs)",
        )
    show = commands.add_parser("config", help="print a validated config with its defaults")
    _config_arguments(show, None)
    show.add_argument("--json", action="store_true", help="print one JSON object")
    place = commands.add_parser("placement", help="print the placement plan of a config")
    _config_arguments(place, None)
    _placement_arguments(place)
    keys = commands.add_parser("keys", help="print the reference of every config key")
    keys.add_argument("--write", type=Path, metavar="DOC", help="rewrite DOC's generated block")
    export = commands.add_parser(
        "export", help="write a run's policy as a Hugging Face folder or an rlcore policy"
    )
    export.add_argument("run", type=Path, help="the run folder (or one of its checkpoints)")
    export.add_argument("out", type=Path, help="the folder to write")
    export.add_argument("--step", type=int, help="the iteration of the checkpoint (newest)")
    export.add_argument(
        "--env",
        metavar="MODULE:CLASS",
        help="allow importing the run's env module (an env.id naming one): its code runs",
    )
    export.add_argument(
        "--force", action="store_true", help="replace an earlier export in OUT (nothing else)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given and given[0] in RUN_COMMANDS:  # (its own options and overrides: run_entry_point's)
        return run_entry_point(RUN_COMMANDS[given[0]], given[1:], prog=f"rlcore {given[0]}")
    args = _parse(_command_parser(), given)

    if args.command == "export":
        from rlcore.export import export as export_run

        try:
            export_run(args.run, args.out, args.step, env=args.env, force=args.force)
        except ConfigError as error:
            raise _exit_with(error) from None
        return 0
    if args.command == "keys":
        if args.write:
            write_reference(args.write)
        else:
            print(key_reference(), end="")
        return 0
    if args.command == "placement":
        _check_placement_options(args)
        if args.profile_file is not None:
            return _advise_on_paper(args)
    config, plan = load_and_plan(args.config, args.overrides, args.cluster)
    if args.command == "config":
        print(json.dumps(as_plain(config)) if args.json else config_as_yaml(config), end="")
        if args.json:
            print()
    elif args.profile or args.advise:
        return _advise(config, args.profile, args.advise, args.iterations)
    else:
        print(json.dumps(plan.to_json()) if args.json else plan.table())
        for name, why in plan.skipped.items():
            if args.json:
                print(f"rlcore: not started: {name} ({why})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
