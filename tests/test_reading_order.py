"""docs/architecture.md's reading order names files and functions that exist: each list item
``path``: ``Name`` or ``Class.method`` (several, comma-separated, or one in parentheses) is
looked up in that file's syntax tree, so a rename or a move fails here until the doc follows."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ITEM = re.compile(r"^\d+\. `(rlcore/[\w/]+\.py)`: (.+)$")


def reading_order() -> list[tuple[str, list[str]]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Reading order", 1)[1].split("\n## ", 1)[0]
    items = []
    for line in section.splitlines():
        match = ITEM.match(line.strip())
        if match:
            names = re.findall(r"`([A-Za-z_][\w.]*)`", match[2])
            items.append((match[1], names))
    return items


def defined(path: Path) -> set[str]:
    """``name`` and ``Class.method`` for what ``path`` defines at its top level."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for inner in node.body:
                if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}.{inner.name}")
    return names


def test_every_file_and_function_of_the_reading_order_exists():
    items = reading_order()
    assert len(items) >= 15  # both modes' lists are there
    missing = []
    for file, names in items:
        path = ROOT / file
        if not path.is_file():
            missing.append(file)
            continue
        have = defined(path)
        missing += [f"{file}: {name}" for name in names if name not in have]
    assert not missing, missing
