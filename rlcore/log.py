"""rlcore's lines for the user, through the standard library's ``logging``.

Everything rlcore tells the user while it works (a key read under another name, a checkpoint
skipped, a restart, a run resumed) goes to the logger named ``rlcore``; stdout keeps the plan and
the summary. By default the logger writes each record as one line on stderr,
``rlcore: <message>``, at level INFO and up, and does not pass records on to the root logger (an
application's own ``logging.basicConfig`` would print them twice). Levels are honoured:

    logging.getLogger("rlcore").setLevel(logging.WARNING)   # restarts and problems only

To route rlcore's records through your own handlers instead, remove its handler and let them
propagate: ``logger.removeHandler(rlcore.log.STDERR)``, ``logger.propagate = True``.
"""

from __future__ import annotations

import logging
import sys

__all__ = ["STDERR", "logger", "say", "warn"]


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (a test's captured stream,
    a stream replaced after import), never to a stream kept from import time."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("rlcore: %(message)s"))

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass  # StreamHandler.__init__ sets it; the property reads sys.stderr instead


logger = logging.getLogger("rlcore")
STDERR = _StderrHandler()
if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
    logger.addHandler(STDERR)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    logger.propagate = False


def say(message: str) -> None:
    """One line for the user (level INFO)."""
    logger.info(message)


def warn(message: str) -> None:
    """One line about something that went wrong and was handled (level WARNING)."""
    logger.warning(message)
