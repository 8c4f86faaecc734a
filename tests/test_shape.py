"""The package's shape stays within issue 49's targets (benchmarks/shape.py measures it): a
class of at most 300 lines, at most 6 functions over 60 lines, no ``# fmt: skip`` in the package
and no import from a higher layer. Session 22's advisor pushed the parser to 61 lines unseen;
this test is why that cannot happen again silently."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from shape import shape


def test_package_shape_within_issue_49_targets():
    figures = shape(listing=True)
    longest, name = figures["largest_classes"][0]
    assert longest <= 300, f"{name} has {longest} lines (at most 300)"
    assert figures["functions_over_60"] <= 6, figures["functions_over_60_list"]
    assert figures["fmt_skip"]["rlcore"] == 0
    assert figures["upward_imports"] == 0, figures["upward_imports_list"]
