"""Reading prompt files: formats, and errors that name the file and the key."""

import json
import re

import pytest

from rlcore.data import DataError, PromptSet, load_prompt_rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def load(path, **options):
    args = {"prompt_key": "question", "answer_key": "answer", "answer_format": "gsm8k"} | options
    return load_prompt_rows([path], "data.train_files", **args)


def test_gsm8k_jsonl_and_parquet_give_the_same_rows(tmp_path):
    import datasets

    rows = [
        {"question": "2+2?", "answer": "2 + 2 = 4\n#### 4"},
        {"question": "Big?", "answer": "#### 1,000"},
    ]
    jsonl = write_jsonl(tmp_path / "a.jsonl", rows)
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "a.parquet"))
    expected = [{"prompt": "2+2?", "answer": "4"}, {"prompt": "Big?", "answer": "1,000"}]
    assert load(jsonl) == expected
    assert load(str(tmp_path / "a.parquet")) == expected


def test_a_missing_field_names_the_file_the_key_and_the_fields_there(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [{"problem": "x", "answer": "#### 1"}])
    fields = r"\(data.prompt_key\); its fields: answer, problem"
    with pytest.raises(DataError, match=r"q.jsonl: row 0 has no field 'question' " + fields):
        load(path)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": None, "answer": "#### 2"}, "row 0: the 'question' field is null"),
        ({"question": "  ", "answer": "#### 2"}, "row 0: the 'question' field is empty"),
        ({"question": "1+1?", "answer": None}, "row 0: the 'answer' field is null"),
        (
            {"question": [{"role": "user", "content": "1+1?"}], "answer": "#### 2"},
            "the 'question' field is a list, not text (chat messages, as in verl's files?",
        ),
        # JSON true/false: Python's str() would make the reference answer "True"
        ({"question": "Is 2 even?", "answer": True}, "the 'answer' field is the boolean true"),
        ({"question": False, "answer": "no"}, "the 'question' field is the boolean false"),
    ],
)
def test_a_null_empty_or_non_text_field_is_refused_not_trained_on(tmp_path, row, message):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=re.escape(message)):
        load_prompt_rows([str(path)], "data.train_files", "question", "answer", "plain")


def test_an_empty_file_and_a_missing_file_are_named(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataError, match=r"empty.jsonl is empty"):
        load(str(tmp_path / "empty.jsonl"))
    with pytest.raises(DataError, match=r"nope.jsonl does not exist"):
        load(str(tmp_path / "nope.jsonl"))
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(DataError, match=r"neither .parquet nor .jsonl"):
        load(str(tmp_path / "x.csv"))


def test_a_non_numeric_gsm8k_answer_names_the_row(tmp_path):
    rows = [{"question": "a", "answer": "#### 3"}, {"question": "b", "answer": "#### three"}]
    path = write_jsonl(tmp_path / "g.jsonl", rows)
    with pytest.raises(DataError, match=r"g.jsonl: row 1: the answer field has no number"):
        load(path)
    assert load(path, answer_format="plain")[1]["answer"] == "#### three"


class CharTokenizer:
    """One token per character: lengths are known by hand."""

    chat_template = None

    def __call__(self, texts, add_special_tokens=True):
        return {"input_ids": [[ord(c) for c in t] for t in texts]}


def test_over_long_prompts_are_dropped_and_counted_not_truncated():
    rows = [
        {"prompt": "abc", "answer": "1"},
        {"prompt": "abcdefgh", "answer": "2"},
        {"prompt": "ab", "answer": "3"},
    ]
    built = PromptSet.build(
        rows,
        CharTokenizer(),
        suffix="!",
        chat_template=False,
        max_length=4,
        what="data.train_files",
    )
    assert built.dropped == 1
    assert built.answers == ["1", "3"]
    assert built.prompts == [[ord(c) for c in "abc!"], [ord(c) for c in "ab!"]]
    with pytest.raises(DataError, match=r"every prompt is longer than data.max_prompt_length=1"):
        PromptSet.build(
            rows,
            CharTokenizer(),
            suffix="",
            chat_template=False,
            max_length=1,
            what="data.train_files",
        )
    with pytest.raises(DataError, match=r"no chat template"):
        PromptSet.build(
            rows,
            CharTokenizer(),
            suffix="",
            chat_template=True,
            max_length=9,
            what="data.train_files",
        )


def test_synthetic_prompts_that_do_not_fit_name_the_synthetic_task():
    from rlcore.config import load_config
    from rlcore.data.sampler import load_prompt_set

    config = load_config("reasoning/tiny_arith_ppo", ["data.max_prompt_length=3"])
    with pytest.raises(DataError, match=r"^data.synthetic \(validation problems\): every prompt"):
        load_prompt_set(config, CharTokenizer(), train=False, log=lambda message: None)


def test_math_reference_answers_math_verify_cannot_read_are_dropped_named_and_counted(
    tmp_path, monkeypatch
):
    """With reward.kind=math every response to such a row would score 0: an empty box, and an
    answer whose parsing outlasts reward.timeout_s (1 s: math-verify's own alarm ends it; here
    its extraction is made to take 30 s for that answer, as a parse bomb would)."""
    import time

    import math_verify.parser

    from rlcore.config import load_config
    from rlcore.data.sampler import load_prompt_set

    extract = math_verify.parser.extract_target_from_pred

    def slow_for_the_bomb(pred, *args, **kwargs):
        if "BOMB" in pred:
            time.sleep(30)
        return extract(pred, *args, **kwargs)

    monkeypatch.setattr(math_verify.parser, "extract_target_from_pred", slow_for_the_bomb)
    rows = [
        {"question": "Half?", "answer": "\\frac{1}{2}"},
        {"question": "Empty?", "answer": "\\boxed{}"},
        {"question": "Deep?", "answer": "x_{BOMB}"},
        {"question": "Day?", "answer": "\\text{Monday}"},
    ]
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    config = load_config(
        "reasoning/tiny_arith_ppo",
        [
            f"data.train_files=[{path}]",
            "data.answer_format=plain",
            "data.train_batch_size=2",
            "actor.ppo_mini_batch_size=2",
            "reward.kind=math",
            "reward.timeout_s=1",
        ],
    )
    said = []
    start = time.monotonic()
    prompts = load_prompt_set(config, CharTokenizer(), train=True, log=said.append)
    assert time.monotonic() - start < 15  # the alarm ended the 30 s parse
    assert prompts.answers == ["\\frac{1}{2}", "\\text{Monday}"]
    assert said == [
        "data.train_files: dropped 2 of 4 prompts whose reference answer math-verify cannot "
        "read within reward.timeout_s=1 (reward.kind=math would score every response to them "
        "0): '\\\\boxed{}', 'x_{BOMB}'"
    ]
