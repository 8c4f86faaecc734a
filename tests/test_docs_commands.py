"""Every command printed in README.md, docs/*.md and the examples' docstrings runs as printed.

Each command is found in the text (a fenced block's line, a backslash continuing it, or an inline
code span that starts a command: ``python examples/...``, ``python -m rlcore``, ``rlcore ...``)
and run in this process from a folder like a fresh clone's (``examples/`` and ``benchmarks/``
beside it, the files a command names as the reader's own supplied: ``SUPPLIED``): the entry
points as a dry run (``runner.dry_run=true`` appended: the config, placement and input checks
of a start), the cheap CartPole runs for real (``RUN_FOR_REAL``), ``rlcore`` as typed. A
command whose inputs are not on this machine runs its dry run without the input checks
(``WITHOUT_INPUTS``, each with the reason); one that cannot run here at all is listed in
``NOT_RUN`` with the reason. Every entry of those tables must still be printed somewhere, so
they cannot outlive the docs."""

from __future__ import annotations

import ast
import json
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

from rlcore.cli import main as rlcore_main
from rlcore.config.composition import parse_overrides

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLES = sorted((ROOT / "examples").rglob("*.py"))
COMMAND = re.compile(
    r"(?:\.venv/bin/)?(?:python (?:-m rlcore\b|examples/\S+\.py)|rlcore )"
    r"|examples/\S+\.py \S"  # (a script named with its arguments: `examples/x/main.py --help`)
)
# the prose's names of a subcommand (its commands are printed in full elsewhere)
NAMES = {
    "rlcore config",
    "rlcore placement",
    "rlcore export",
    "rlcore config | placement | keys | export",
}

RUN_FOR_REAL = {  # (one CartPole run: docs/embodied.md's with 32 envs takes as long, dry here)
    ".venv/bin/python examples/embodied/main.py runner.seed=2 env.num_envs=16": "CartPole, ~3 s",
    "python examples/reasoning/prepare_gsm8k.py --local_dataset_path ~/gsm8k --local_save_dir "
    "~/data/gsm8k": "from a 4-row GSM8K copy the test writes at ~/gsm8k",
    "python examples/reasoning/prepare_geo3k.py --local_dataset_path ~/geometry3k "
    "--local_save_dir ~/data/geo3k": "from a 4-row Geometry3K copy the test writes",
}
NO_QWEN = "Qwen2.5-0.5B-Instruct is not on this machine (nor the hub: tests run offline)"
NO_SMOLLM2 = "SmolLM2-135M-Instruct is downloaded by prepare_smollm2.py (not run here)"
NO_RM = "the reward model is train_reward_model.py's (not run here: minutes)"
WITHOUT_INPUTS = {
    "python examples/reasoning/main.py --config reasoning/qwen2.5-0.5b_gsm8k_ppo "
    "data.train_files=~/data/gsm8k/train.parquet data.val_files=~/data/gsm8k/test.parquet": NO_QWEN,
    ".venv/bin/python examples/reasoning/main.py --config reasoning/smollm2_arith_ppo": NO_SMOLLM2,
    "python examples/reasoning/main.py --config reasoning/tiny_arith_rm_ppo": NO_RM,
    "examples/reasoning/main.py --config reasoning/tiny_arith_rm_ppo reward.model.path=...": NO_RM,
    "python examples/reasoning/main.py reward.kind=remote "
    "reward.remote.url=http://127.0.0.1:8000/score": "the reward service is the docs' script, "
    "started by the reader on port 8000 (the remote contract: tests/rewards/test_remote.py)",
}
NOT_RUN = {
    "rlcore placement embodied/cartpole_ppo cluster.devices_per_node=2 --advise": "profiles "
    "first, starting Ray (the advisor end to end: tests/runners/test_auto_placement.py)",
    "rlcore placement reasoning/tiny_arith_ppo --profile": "measures for half a minute "
    "(tests/runners/test_profiling.py)",
    ".venv/bin/rlcore export outputs/RUN OUT": "RUN and OUT stand for the reader's run and "
    "folder (exports of real runs: tests/test_export.py)",
    "rlcore export RUN OUT": "a synopsis (tests/test_export.py)",
    "rlcore export RUN [--step N] [--env ID] [--force] OUT": "a synopsis (tests/test_export.py)",
    "rlcore export RUN [--step N] OUT": "a synopsis (tests/test_export.py)",
    ".venv/bin/rlcore ...": "how to run the commands before it, which run here",
    "python -m rlcore ...": "how to run the commands before it, which run here",
    "python -m rlcore": "names the module (its subcommands run here: tests/test_cli.py)",
    "rlcore embodied --config maniskill_ppo_mlp.yaml key=value ...": "a synopsis (RLinf's file "
    "as written: tests/config/foreign/test_rlinf_examples.py)",
    "rlcore embodied [key=value ...]": "a synopsis (rlcore embodied: tests/test_cli.py)",
    "rlcore reasoning [key=value ...]": "a synopsis (rlcore reasoning: tests/test_cli.py)",
    "rlcore embodied | reasoning | config | placement | keys | export": "a synopsis of the "
    "subcommands, each printed in full elsewhere",
    ".venv/bin/python examples/embodied/main.py runner.resume_dir=outputs/CartPole-v1-s1-...": (
        "'...' stands for the run folder's time stamp (resume: tests/runners/test_resume.py)"
    ),
    ".venv/bin/python examples/reasoning/prepare_smollm2.py": "downloads SmolLM2-135M-Instruct",
    "python examples/reasoning/train_reward_model.py": "trains a reward model for minutes "
    "(its recipe: tests/rewards/test_reward_model_recipe.py)",
    "python examples/reasoning/train_reward_model.py [--out .cache/rlcore/tiny-rm] [k=v ...]": (
        "a synopsis, of the command above"
    ),
    "python examples/embodied/main.py [--config NAME|PATH] [key=value ...]": "a synopsis",
    "python examples/reasoning/main.py [--config NAME|PATH] [key=value ...]": "a synopsis",
    "python examples/reasoning/prepare_smollm2.py [--out .cache/rlcore/SmolLM2-135M-Instruct]": (
        "a synopsis; downloads SmolLM2-135M-Instruct"
    ),
    "examples/reasoning/prepare_gsm8k.py --local_dataset_path DIR --local_save_dir OUT": (
        "a synopsis, of prepare_gsm8k.py's own command (run here)"
    ),
    "rlcore reasoning --config reasoning/tiny_arith_ppo actor.model.path=A_VLM_FOLDER "
    "data.train_files=~/data/geo3k/train.parquet data.val_files=~/data/geo3k/test.parquet "
    "reward.kind=math algorithm.adv_type=grpo algorithm.group_size=5": "A_VLM_FOLDER stands "
    "for the reader's vision-language model (runs of such folders on verl-layout image files: "
    "tests/models/test_vision_prompts.py, test_qwen2_vl.py)",
}
SUPPLIED = {  # the reader's own files that commands name: copies of shipped ones
    "path/to/mine.yaml": "configs/reasoning/tiny_arith_ppo.yaml",
    "my_cluster.yaml": "configs/cluster/gpu_1x8.yaml",
}
DRY_RUN = "runner.dry_run=true"


def _command_lines(lines: list[str]) -> list[str]:
    """Lines of a shell block or docstring that start a command, continuations joined and
    trailing comments cut."""
    found, pending = [], ""
    for raw in lines:
        line = (pending + " " + raw.strip()).strip()
        pending = ""
        if line.endswith("\\"):
            pending = line.rstrip("\\")
            continue
        line = line.split(" # ")[0].strip()
        if COMMAND.match(line):
            found.append(" ".join(line.split()))
    return found


def _in_markdown(path: Path) -> list[str]:
    text = path.read_text()
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.M | re.S)
    found = [c for block in blocks for c in _command_lines(block.splitlines())]
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    spans = (" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose))
    return found + [span for span in spans if COMMAND.match(span) and span not in NAMES]


def _in_docstrings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef | ast.FunctionDef))]
    docs = [ast.get_docstring(node) or "" for node in nodes]
    return [c for doc in docs for c in _command_lines(doc.splitlines())]


def printed_commands() -> dict[str, list[str]]:
    """Each printed command, with the files that print it."""
    found: dict[str, list[str]] = {}
    for path in DOCS:
        for command in _in_markdown(path):
            found.setdefault(command, []).append(str(path.relative_to(ROOT)))
    for path in EXAMPLES:
        for command in _in_docstrings(path):
            found.setdefault(command, []).append(str(path.relative_to(ROOT)))
    return found


PRINTED = printed_commands()


@pytest.fixture
def fresh_clone(tmp_path, monkeypatch):
    """A folder to run commands from as from a clone's root: ``examples/`` and ``benchmarks/``
    in it, the supplied files, ``~`` a home folder of its own holding a small GSM8K copy."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")  # (a profile on paper there)
    for name, source in SUPPLIED.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / source).read_text())
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _small_gsm8k(folder: Path) -> None:
    import datasets

    def rows(first: int) -> list[dict]:
        return [
            {"question": f"What is {a} + {a}?", "answer": f"{a} + {a} = {2 * a}\n#### {2 * a}"}
            for a in range(first, first + 2)
        ]

    splits = {
        "train": datasets.Dataset.from_list(rows(1)),
        "test": datasets.Dataset.from_list(rows(7)),
    }
    datasets.DatasetDict(splits).save_to_disk(str(folder))


def _small_geo3k(folder: Path) -> None:
    import datasets
    import numpy as np
    from PIL import Image

    def rows(first: int) -> list[dict]:
        image = Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8))
        return [
            {"images": [image], "problem": f"<image>Find x{a}.", "answer": str(a)}
            for a in range(first, first + 2)
        ]

    features = datasets.Features(
        {
            "images": datasets.Sequence(datasets.Image()),
            "problem": datasets.Value("string"),
            "answer": datasets.Value("string"),
        }
    )
    splits = {
        split: datasets.Dataset.from_list(rows(first), features=features)
        for split, first in (("train", 1), ("test", 7))
    }
    datasets.DatasetDict(splits).save_to_disk(str(folder))


def run_printed(command: str, monkeypatch, extra: tuple[str, ...] = ()) -> int:
    """``command`` as a shell would start it, in this process: its exit status."""
    argv = shlex.split(command)
    if argv[0].startswith("examples/"):
        argv = ["python", *argv]
    program, args = argv[0], [*argv[1:], *extra]
    try:
        if program.endswith("rlcore"):
            return rlcore_main(args)
        if args[0] == "-m":
            monkeypatch.setattr(sys, "argv", [args[1], *args[2:]])
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:  # a script: Python puts its folder first on the path
            monkeypatch.setattr(sys, "argv", args)
            monkeypatch.syspath_prepend(str(Path(args[0]).resolve().parent))
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exit:
        return 0 if exit.code is None else exit.code
    return 0


def _is_entry_point(command: str) -> bool:
    return re.search(r"examples/\w+/main\.py", command) is not None


@pytest.mark.parametrize("command", sorted(PRINTED), ids=lambda c: c[:90])
def test_a_printed_command_runs_as_printed(command, fresh_clone, monkeypatch, capsys):
    where = ", ".join(PRINTED[command])
    if command in NOT_RUN:
        pytest.skip(f"{NOT_RUN[command]} ({where})")
    if command in WITHOUT_INPUTS:  # the checks of a start, less the look for the absent inputs
        monkeypatch.setattr("rlcore.runners.preflight.preflight", lambda *args: None)
    if "~/gsm8k" in command:
        _small_gsm8k(fresh_clone / "home" / "gsm8k")
    if "~/geometry3k" in command:
        _small_geo3k(fresh_clone / "home" / "geometry3k")
    starts = _is_entry_point(command) and "--help" not in command.split()
    real = command in RUN_FOR_REAL or not starts
    dry = () if real or DRY_RUN in command.split() else (DRY_RUN,)
    code = run_printed(command, monkeypatch, dry)
    out, err = capsys.readouterr()
    assert code == 0, f"{command} ({where}) exited {code}: {err[-2000:]}"
    assert "Traceback" not in err
    if starts and real:  # a CartPole run that stops at 475 (README)
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["steps_to_threshold"] is not None, summary
    elif starts:
        assert "dry run: the config and placement are valid" in out
    if "prepare_gsm8k" in command or "prepare_geo3k" in command:
        assert err.count(" 2 rows") == 2, err  # train.parquet and test.parquet


def test_every_listed_command_is_still_printed():
    listed = [*RUN_FOR_REAL, *WITHOUT_INPUTS, *NOT_RUN]
    assert [c for c in listed if c not in PRINTED] == []
    assert len(PRINTED) >= 25  # (the extraction finds the docs' commands)


def test_the_overrides_printed_inline_parse_as_printed():
    """``key=value`` spans in the prose (fragments of a command line, such as docs/rewards.md's
    judge pattern) parse as the reader types them, shell quoting included."""
    spans = []
    for path in DOCS:
        prose = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
        for span in re.findall(r"`([^`]+)`", prose):
            try:
                tokens = shlex.split(" ".join(span.split()))
            except ValueError:  # (prose between two code spans, such as "key's")
                continue
            if tokens and all(re.match(r"[+~]?[a-z_]+\.[\w.]+=", t) for t in tokens):
                spans.append(tokens)
    assert any("reward.judge.parser=Score:\\s*(\\d+)" in tokens for tokens in spans)
    for tokens in spans:
        parsed = parse_overrides(tokens)
        assert [o.key_or_group for o in parsed] == [t.split("=")[0].lstrip("+~") for t in tokens]
    judge = parse_overrides(["reward.judge.parser=Score:\\s*(\\d+)"])[0].value()
    assert re.search(judge, "Reasoning... Score: 7").group(1) == "7"
