"""The ``rlcore`` command, and the config handling shared by the example entry points.

    rlcore config CONFIG [key=value ...] [--json]   print the validated config, defaults filled in
    rlcore keys [--write DOC]                        print (or write into DOC) the key reference

CONFIG is a config name under configs/ (``embodied/cartpole_ppo``) or a YAML path. A bad config
prints one line per problem and exits with status 2.
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
from rlcore.config.reference import key_reference, write_reference

EXIT_BAD_CONFIG = 2


def load_or_exit(config: str, overrides: Sequence[str]) -> RLCoreConfig:
    """The validated config; on a bad one, its problems on stderr and exit status 2."""
    try:
        return load_config(config, overrides)
    except ConfigError as exc:
        for line in str(exc).splitlines():
            print(f"rlcore: config error: {line}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_CONFIG) from None


def config_as_yaml(config: RLCoreConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(dataclasses.asdict(config)))


# The issue that builds each mode's runner; the entry points stop after validation until then.
PENDING_RUNNERS = {"embodied": "issue #4, embodied PPO", "reasoning": "issue #5, reasoning PPO"}


def run_entry_point(default_config: str, argv: Sequence[str] | None = None) -> int:
    """``[--config NAME|PATH] [key=value ...]``: validate the config, then run its mode's runner."""
    parser = argparse.ArgumentParser(description="Compose, validate and run an rlcore config.")
    parser.add_argument(
        "--config", default=default_config, help=f"config name or YAML path ({default_config})"
    )
    parser.add_argument("overrides", nargs="*", help="Hydra-style key=value overrides")
    args = parser.parse_args(argv)
    config = load_or_exit(args.config, args.overrides)
    print(config_as_yaml(config), end="")
    print(
        f"rlcore: config '{args.config}' is valid. No default job yet: the {config.mode} runner "
        f"is not built ({PENDING_RUNNERS[config.mode]}), so nothing is trained."
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlcore", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("config", help="print a validated config with its defaults")
    show.add_argument("config", help="config name under configs/ or a YAML path")
    show.add_argument("overrides", nargs="*", help="Hydra-style key=value overrides")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    keys = commands.add_parser("keys", help="print the reference of every config key")
    keys.add_argument("--write", type=Path, metavar="DOC", help="rewrite DOC's generated block")
    args = parser.parse_args(argv)

    if args.command == "config":
        config = load_or_exit(args.config, args.overrides)
        if args.json:
            print(json.dumps(dataclasses.asdict(config)))
        else:
            print(config_as_yaml(config), end="")
    elif args.write:
        write_reference(args.write)
    else:
        print(key_reference(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
