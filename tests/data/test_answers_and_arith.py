"""GSM8K answer extraction and the synthetic arithmetic task."""

import re
from decimal import Decimal

import pytest

from rlcore.config.errors import ConfigError
from rlcore.data import arithmetic_problems, extract_gsm8k_answer, parse_number


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("72", 72),
        ("72.", 72),
        ("$72", 72),
        ("1,000", 1000),
        ("-3", -3),
        ("0.50", Decimal("0.5")),
        ("$ 1,234.5", Decimal("1234.5")),
        ("abc", None),
        ("", None),
        ("-", None),
    ],
)
def test_parse_number_reads_numbers_as_people_write_them(text, value):
    assert parse_number(text) == (None if value is None else Decimal(value))


def test_extract_gsm8k_answer_takes_the_number_after_the_last_marker():
    solution = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"
    assert extract_gsm8k_answer(solution) == "72"
    assert extract_gsm8k_answer("#### 5 then #### 1,000") == "1,000"
    assert extract_gsm8k_answer("no marker 72") is None
    assert extract_gsm8k_answer("#### seventy") is None


def test_arithmetic_problems_are_right_deterministic_and_distinct():
    rows = arithmetic_problems(300, digits=2, operations=["+", "-", "*"], seed=3)
    assert rows == arithmetic_problems(300, digits=2, operations=["+", "-", "*"], seed=3)
    assert rows != arithmetic_problems(300, digits=2, operations=["+", "-", "*"], seed=4)
    assert len({r["question"] for r in rows}) == 300
    for row in rows:  # recomputed from the question text, independently of the generator
        a, op, b = re.fullmatch(r"What is (\d+) ([-+*]) (\d+)\?", row["question"]).groups()
        expected = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        assert row["answer"] == f"#### {expected}"
        assert int(a) < 100 and int(b) < 100


def test_validation_problems_can_exclude_the_training_set():
    train = arithmetic_problems(90, digits=1, operations=["+"], seed=0)
    val = arithmetic_problems(
        10, digits=1, operations=["+"], seed=1, exclude={r["question"] for r in train}
    )
    assert not {r["question"] for r in val} & {r["question"] for r in train}


def test_asking_for_more_problems_than_exist_is_a_config_error():
    with pytest.raises(ConfigError, match=r"data.synthetic: 101 distinct problems"):
        arithmetic_problems(101, digits=1, operations=["+"], seed=0)
    with pytest.raises(ConfigError, match=r"operations"):
        arithmetic_problems(1, digits=1, operations=["/"], seed=0)


def test_math_verify_says_nothing_of_its_disabled_timeout_and_its_other_warnings_pass(
    caplog, monkeypatch
):
    import logging

    import math_verify.grader
    import math_verify.parser

    from rlcore.data.answers import math_reference
    from rlcore.rewards.rules import math_correct

    # math-verify says it once per process: as if this were the process's first call
    monkeypatch.setattr(math_verify.parser, "TIMEOUT_WARNING_SHOWN", False)
    monkeypatch.setattr(math_verify.grader, "TIMEOUT_WARNING_SHOWN", False)
    with caplog.at_level(logging.WARNING):
        assert math_reference("\\frac{1}{2}", None)  # parse without a limit of its own
        assert math_correct("\\boxed{0.5}", "1/2", timeout_s=None)  # verify without one
        logging.getLogger("math_verify.parser").warning("another warning")
    said = [record.getMessage() for record in caplog.records]
    assert not [m for m in said if m.startswith("Timeout is disabled")]
    assert "another warning" in said
    assert math_verify.parser.TIMEOUT_WARNING_SHOWN  # (it did try to say it)
