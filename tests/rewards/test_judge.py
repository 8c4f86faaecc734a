"""``reward.kind: judge``: the verdict parser on fixed answers, templates refused before the
start, and the reward component grading with a causal LM (the tiny policy as judge)."""

import os
import re
import shutil
import threading
from pathlib import Path

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from rlcore.config import ConfigError, load_config, replace_keys
from rlcore.models.lm import load_tokenizer
from rlcore.placement import plan_for_config
from rlcore.rewards.judge import compile_parser, parse_score, read_template
from rlcore.runners.preflight import preflight

DEFAULT = load_config("reasoning/tiny_arith_ppo", []).reward.judge.parser


@pytest.mark.parametrize(
    ("parser", "output", "score"),
    [
        (DEFAULT, "I would give it 7 out of 10.", 7.0),  # the first number
        (DEFAULT, "-2.5", -2.5),
        (DEFAULT, "no number here", None),
        (r"Score:\s*(\d+)", "Reasoning 3 steps. Score: 9", 9.0),  # the group, not the first digit
        (r"Score:\s*(\d+)", "Score: none", None),
        (r"(CORRECT|WRONG)", "CORRECT", None),  # a group that is no number gives no score
        (r"\[\[(\d+(?:\.\d+)?)\]\]", "Rating: [[8.5]] and [[2]]", 8.5),  # the first match
    ],
)
def test_the_parser_reads_the_first_matchs_first_group_as_the_score(parser, output, score):
    assert parse_score(compile_parser(parser), output) == score


def test_parsers_and_templates_that_cannot_work_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="has no group"):
        compile_parser(r"Score: \d+")
    with pytest.raises(ConfigError, match="is no regular expression"):
        compile_parser(r"Score: (\d+")
    cases = {
        "no_response.txt": ("Grade {prompt}", r"has no \{response\}"),
        "unknown.txt": ("Grade {response} against {reference}", "fills in reference"),
        "brace.txt": ("Grade {response} in JSON {", "write a literal brace twice"),
    }
    for name, (text, says) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ConfigError, match=says):
            read_template(str(tmp_path / name))
    (tmp_path / "ok.txt").write_text('Q: {prompt}\nA: {response}\nKey: {answer}\n{{"score": N}}')
    assert "{response}" in read_template(str(tmp_path / "ok.txt"))
    with pytest.raises(ConfigError, match=r"reward\.judge\.template: null"):
        load_config("reasoning/tiny_arith_ppo", ["reward.kind=judge", "reward.model.path=x"])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("Grade {response:>100000000}", "formats {response:>100000000}; rlcore fills each"),
        ("Grade {response:{prompt}}", "formats {response:{prompt}}"),
        ("Grade {response!r}", "formats {response!r}; "),
        ("Grade {response!s:^9}", "formats {response!s:^9}; "),
        ("Grade {response.upper}", "fills in response.upper, which rlcore does not give"),
        ("Grade {response[0]}", "fills in response[0], "),
        ("Grade {prompt.__class__} {response}", "fills in prompt.__class__, "),
        ("Grade {} {response}", "fills in {}, "),
        ("Grade {0} {response}", "fills in 0, "),
    ],
)
def test_a_template_that_formats_or_reaches_into_a_placeholder_is_refused(tmp_path, text, says):
    """A format spec would pad each judge prompt to any size (a memory bomb); an attribute or
    an item reaches into the objects filled in: only the bare names are filled in."""
    (tmp_path / "judge.txt").write_text(text)
    with pytest.raises(ConfigError) as refused:
        read_template(str(tmp_path / "judge.txt"))
    message = str(refused.value)
    assert message.startswith(f"reward.judge.template: {tmp_path / 'judge.txt'} ")
    assert says in message and "\n" not in message


def test_a_template_that_is_no_small_regular_file_is_refused_without_reading_it(tmp_path):
    fifo = tmp_path / "judge.fifo"
    os.mkfifo(fifo)  # opened for reading, it would block until a writer comes: forever
    big = tmp_path / "big.txt"
    big.write_text("{response}" + "x" * (64 * 1024))
    latin = tmp_path / "latin.txt"
    latin.write_bytes("{response} \xe9t\xe9".encode("latin-1"))
    cases = [
        (fifo, "is a FIFO, not a regular file; give a text file"),
        (tmp_path, "is a directory, not a regular file"),
        (Path("/dev/zero"), "is a character device, not a regular file"),
        (big, "is larger than 64 KiB, which no judge prompt needs"),
        (latin, "is not UTF-8 text"),
        (tmp_path / "none.txt", "cannot be read ([Errno 2]"),
    ]
    for path, says in cases:
        done = {}
        reading = threading.Thread(target=_refusal, args=(path, done), daemon=True)
        reading.start()
        reading.join(timeout=20)
        assert not reading.is_alive(), f"reading {path} blocked"
        assert done["message"].startswith(f"reward.judge.template: {path} ")
        assert says in done["message"] and "\n" not in done["message"]
    (tmp_path / "exactly.txt").write_text("{response}" + "x" * (64 * 1024 - 10))
    assert read_template(str(tmp_path / "exactly.txt")).startswith("{response}")
    config = load_config(
        "reasoning/tiny_arith_ppo",
        [
            f"runner.output_dir={tmp_path / 'out'}",
            "reward.kind=judge",
            f"reward.model.path={tmp_path}",
            f"reward.judge.template={fifo}",
        ],
    )
    with pytest.raises(ConfigError, match="is a FIFO, not a regular file"):
        preflight(config, plan_for_config(config))  # the dry run's checks


def _refusal(path, done):
    try:
        read_template(str(path))
    except ConfigError as error:
        done["message"] = str(error)


def judge_setup(tiny_lm, tmp_path):
    """The tiny policy as a judge (read as plain text: its tokenizer without a chat template, as
    it was warmed up on plain prompts), the config that asks for it, and two rows to grade."""
    config, dirs = tiny_lm
    judge = tmp_path / "judge"
    shutil.copytree(dirs.actor, judge)
    plain = load_tokenizer(judge)
    plain.chat_template = None
    plain.save_pretrained(judge)
    (judge / "chat_template.jinja").unlink(missing_ok=True)
    template = tmp_path / "judge.txt"
    template.write_text("What is 1 + {answer}? Answer after ####. {response}")
    keys = {
        "reward.kind": "judge",
        "reward.model.path": str(judge),
        "reward.judge.template": str(template),
        "reward.judge.max_new_tokens": 6,
        # the tiny policy as a judge writes any number (222222): within range, not refused
        "reward.score_range": [-1e9, 1e9],
    }
    tok = load_tokenizer(dirs.actor)
    prompt = tok("What is 40 + 2?", add_special_tokens=False)["input_ids"]
    responses = [" #### 42", " #### 7"]
    ids = [tok(r, add_special_tokens=False)["input_ids"] for r in responses]
    width = max(map(len, ids))
    pad = tok.pad_token_id
    response_ids = torch.tensor([x + [pad] * (width - len(x)) for x in ids])
    mask = (response_ids != pad).long()
    input_ids = torch.cat([torch.tensor([prompt] * 2), response_ids], dim=1)
    batch = TensorDict(
        {
            "input_ids": input_ids,
            "attention_mask": torch.cat([torch.ones(2, len(prompt), dtype=torch.long), mask], 1),
            "responses": response_ids,
            "response_mask": mask,
        },
        batch_size=[2],
    )
    batch["answers"] = NonTensorStack("42", "42")
    return config, keys, batch


def graded(config, model_dir, batch):
    from rlcore.rewards.worker import RewardWorker

    worker = RewardWorker(None, config, model_dir)
    try:
        return worker.score(batch)
    finally:
        worker.close()


def test_the_judge_grades_each_row_and_its_answers_are_kept(tiny_lm, tmp_path):
    """The tiny policy as a judge: its greedy answers are whatever it writes; the scores are
    what the parser reads from them (0 where it reads nothing, counted)."""
    config, keys, batch = judge_setup(tiny_lm, tmp_path)
    rows = graded(replace_keys(config, keys), tiny_lm[1].actor, batch)
    outputs = rows["judge_outputs"]
    assert len(outputs) == 2 and all(isinstance(o, str) and o for o in outputs)
    number = re.compile(DEFAULT)
    expected = [float(m.group(1)) if (m := number.search(o)) else 0.0 for o in outputs]
    assert rows["model_scores"].tolist() == pytest.approx(expected)
    assert rows["judge_unparsed"].sum().item() == sum(number.search(o) is None for o in outputs)
    assert rows["judge_unparsed"].sum().item() < 2, outputs  # (the tiny policy: numbers)
    assert rows["correct"].tolist() == [True, False]  # the rule's verdicts


def test_a_judge_on_an_sglang_engine_answers_as_the_hf_judge(tiny_lm, tmp_path, monkeypatch):
    """reward.judge.backend=sglang against the fake SGLang engine (the real 0.5.21 Engine's
    signatures, greedy answers computed with transformers): the same answers and scores as the
    hf judge; the engine got the judge's folder and ids, not text."""
    from rlcore.workers.reasoning import sglang_engine
    from tests.lm_fixtures import unchecked
    from tests.workers import fake_sglang

    started = []

    def start(**server_args):
        started.append(fake_sglang.Engine(**server_args))
        return started[-1]

    monkeypatch.setattr(sglang_engine, "start_engine", start)
    config, keys, batch = judge_setup(tiny_lm, tmp_path)
    hf = graded(replace_keys(config, keys), tiny_lm[1].actor, batch)
    on_sglang = unchecked(config, {**keys, "reward.judge.backend": "sglang"})
    rows = graded(on_sglang, tiny_lm[1].actor, batch)
    assert len(started) == 1 and started[0].server_args["model_path"] == keys["reward.model.path"]
    assert started[0].server_args["skip_tokenizer_init"] is True
    assert list(rows["judge_outputs"]) == list(hf["judge_outputs"])
    assert rows["model_scores"].tolist() == hf["model_scores"].tolist()


def test_an_sglang_judge_is_refused_on_cpus_and_without_the_judge_kind(tmp_path):
    from rlcore.placement import plan_for_config
    from rlcore.placement.checks import check_plan

    with pytest.raises(ConfigError, match=r"reward\.judge\.backend: set, but"):
        load_config("reasoning/tiny_arith_ppo", ["reward.judge.backend=sglang"])
    config = load_config("reasoning/tiny_arith_ppo", [])
    from tests.lm_fixtures import unchecked

    asked = unchecked(config, {"reward.judge.backend": "sglang"})
    with pytest.raises(ConfigError, match=r"reward\.judge\.backend: sglang runs on GPUs only"):
        check_plan(asked, plan_for_config(asked))
