"""rlcore: one RL framework for embodied agents and LLM reasoning (README.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcore import compile_marks

compile_marks.install()


def load_policy(path: str | Path) -> Any:
    """The embodied policy ``rlcore export`` wrote to ``path``: ``policy(obs)`` -> actions
    (``rlcore.export.Policy``)."""
    from rlcore.export import load_policy as load

    return load(path)
