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
    expected = [
        {"prompt": "2+2?", "answer": "4", "source": None, "extra": None},
        {"prompt": "Big?", "answer": "1,000", "source": None, "extra": None},
    ]
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
            {"question": [{"role": "user"}], "answer": "#### 2"},
            "the 'question' field is neither text nor a list of chat messages",
        ),
        (
            {"question": [{"role": "system", "content": "Be brief."}], "answer": "#### 2"},
            "with a user turn",
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
    with pytest.raises(DataError, match=r"the tokenizer has no chat template"):
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
        load_prompt_set(config, CharTokenizer(), train=False)


def test_math_reference_answers_math_verify_cannot_read_are_dropped_named_and_counted(
    tmp_path, monkeypatch, capsys
):
    """With reward.kind=math every response to such a row would score 0: an empty box, and an
    answer whose parsing outlasts reward.rules.timeout_s (1 s: math-verify's own alarm ends it; here
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
            "reward.rules.timeout_s=1",
        ],
    )
    capsys.readouterr()
    start = time.monotonic()
    prompts = load_prompt_set(config, CharTokenizer(), train=True)
    assert time.monotonic() - start < 15  # the alarm ended the 30 s parse
    assert prompts.answers == ["\\frac{1}{2}", "\\text{Monday}"]
    assert capsys.readouterr().err.splitlines() == [
        "rlcore: data.train_files: dropped 2 of 4 prompts whose reference answer math-verify "
        "cannot read within reward.rules.timeout_s=1 (reward.kind=math would score every "
        "response to them 0): '\\\\boxed{}', 'x_{BOMB}'"
    ]


# as verl's examples/data_preprocess/gsm8k.py writes a row
VERL_ROW = {
    "data_source": "openai/gsm8k",
    "prompt": [
        {"role": "system", "content": "You are a careful solver."},
        {"role": "user", "content": "2+2? Let's think step by step."},
    ],
    "ability": "math",
    "reward_model": {"style": "rule", "ground_truth": "4"},
    "extra_info": {"split": "train", "index": 0, "answer": "2 + 2 = 4\n#### 4"},
}


def test_verl_layout_is_read_as_verl_reads_it(tmp_path, capsys):
    import datasets

    path = str(tmp_path / "train.parquet")
    datasets.Dataset.from_list([VERL_ROW]).to_parquet(path)
    capsys.readouterr()
    rows = load_prompt_rows([path], "data.train_files", "question", "answer", "gsm8k")
    said = capsys.readouterr().err.splitlines()
    assert rows == [
        {
            "prompt": VERL_ROW["prompt"],
            "answer": "4",  # the ground truth as it is: no '####' to find
            "source": "openai/gsm8k",
            "extra": VERL_ROW["extra_info"],
        }
    ]
    assert said == [
        f"rlcore: data.train_files: {path} is in verl's layout: prompts from its 'prompt' "
        "chat messages, answers from reward_model.ground_truth, the scorer from data_source "
        "(reward.kind auto)"
    ]
    bad = dict(VERL_ROW, reward_model={"style": "rule", "ground_truth": ""})
    datasets.Dataset.from_list([bad]).to_parquet(path)
    with pytest.raises(DataError, match=r"row 0: reward_model.ground_truth is missing or empty"):
        load(path)


class TemplateTokenizer(CharTokenizer):
    """Characters as ids; a chat template that writes '<role>content' per turn."""

    chat_template = "(a template)"

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        assert add_generation_prompt and not tokenize
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


@pytest.mark.parametrize(
    ("chat_template", "chat", "text"),
    [
        # null: chat prompts through the template, whole (the system turn too), no suffix;
        # text prompts as written, with it
        (None, "<system>S<user>Q<assistant>", "T!"),
        (True, "<system>S<user>Q<assistant>", "<user>T!<assistant>"),
        (False, "Q", "T!"),  # the user turn's content
    ],
)
def test_chat_prompts_go_through_the_template_unless_it_is_off(chat_template, chat, text):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    rows = [
        {"prompt": messages, "answer": "1", "source": "openai/gsm8k"},
        {"prompt": "T", "answer": "2", "source": None},
    ]
    built = PromptSet.build(
        rows,
        TemplateTokenizer(),
        suffix="!",
        chat_template=chat_template,
        max_length=99,
        what="data.train_files",
    )
    assert built.prompts == [[ord(c) for c in chat], [ord(c) for c in text]]
    assert built.sources == ["openai/gsm8k", None]


def test_without_the_tokenizer_the_dry_run_refuses_files_with_fewer_rows_than_a_batch(tmp_path):
    # (a model the run downloads: its tokenizer is not here, so the rows are counted, an upper
    # bound of the usable prompts)
    from rlcore.config import load_config
    from rlcore.data.sampler import check_prompt_files

    path = write_jsonl(
        tmp_path / "a.jsonl", [{"question": f"{a}+1?", "answer": "#### 1"} for a in range(5)]
    )
    config = load_config(
        "reasoning/tiny_arith_ppo",
        ["data.train_batch_size=8", "actor.ppo_mini_batch_size=8", "actor.ppo_micro_batch_size=8"],
    )
    with pytest.raises(
        DataError,
        match=r"^data.train_files: 5 prompts in the files, so fewer usable prompts than "
        r"data.train_batch_size=8;",
    ):
        check_prompt_files(config, [path], "data.train_files")
    check_prompt_files(config, [path], "data.val_files")  # (no batch drawn from validation)


def test_the_set_a_start_checked_is_the_set_its_run_takes_unless_its_input_changed(tmp_path):
    """A start's preflight builds each prompt set as the run would (``keep``): the run's own
    call takes that very set instead of reading, scoring and tokenising again; a data file
    changed in between, or another split, is built anew."""
    from rlcore.config import load_config
    from rlcore.data.sampler import load_prompt_set

    rows = [{"question": f"{i} + 1?", "answer": f"#### {i + 1}"} for i in range(6)]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    config = load_config(
        "reasoning/tiny_arith_ppo",
        [f"data.train_files=[{path}]", "data.train_batch_size=2", "actor.ppo_mini_batch_size=2"],
    )
    checked = load_prompt_set(config, CharTokenizer(), train=True, keep=True)
    assert load_prompt_set(config, CharTokenizer(), train=True) is checked
    again = load_prompt_set(config, CharTokenizer(), train=True)  # (taken once)
    assert again is not checked and again.answers == checked.answers
    load_prompt_set(config, CharTokenizer(), train=True, keep=True)
    write_jsonl(tmp_path / "t.jsonl", rows[:4])
    changed = load_prompt_set(config, CharTokenizer(), train=True)
    assert changed.answers == ["1", "2", "3", "4"]
    load_prompt_set(config, CharTokenizer(), train=True, keep=True)
    other = load_prompt_set(config, CharTokenizer(), train=False)  # the synthetic validation
    assert len(other) == config.data.synthetic.num_val
