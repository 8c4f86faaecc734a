"""rlcore's lines go through the standard library's logging: one line on stderr by default,
levels honoured."""

import logging

import pytest

from rlcore.log import STDERR, logger, say, warn


@pytest.fixture
def level():
    before = logger.level
    yield logger.setLevel
    logger.setLevel(before)


def test_a_line_is_written_as_rlcore_colon_message_on_stderr(capsys):
    say("resumed from iter_000002")
    warn("skipped checkpoint iter_000003: damaged")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "rlcore: resumed from iter_000002\nrlcore: skipped checkpoint iter_000003: damaged\n"
    )


def test_the_logger_level_is_honoured(capsys, level):
    level(logging.WARNING)
    say("an ordinary note")
    warn("a problem")
    assert capsys.readouterr().err == "rlcore: a problem\n"


def test_records_reach_a_users_own_handler_once_rerouted(capsys):
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    own = Collect()
    logging.getLogger().addHandler(own)
    logger.removeHandler(STDERR)
    logger.propagate = True
    try:
        say("through the root logger")
    finally:
        logger.propagate = False
        logger.addHandler(STDERR)
        logging.getLogger().removeHandler(own)
    assert seen == ["through the root logger"]
    assert "rlcore:" not in capsys.readouterr().err
