"""The package's shape in figures (issue #29's targets), one JSON line:

    .venv/bin/python benchmarks/shape.py [--list]

- ``largest_classes``: the longest classes of ``rlcore/`` (lines, name), longest first;
- ``functions_over_60``: functions and methods of ``rlcore/`` longer than 60 lines;
- ``fmt_skip``: ``# fmt: skip`` comments in ``rlcore/``, and in tests, benchmarks and examples;
- ``upward_imports``: imports from a higher layer (the layers of ``tests/test_layers.py``);
- ``package_lines``: lines of ``rlcore/``, and of ``rlcore/config/`` and ``rlcore/workers/``.

Read from the source with ``ast``; nothing is imported from the package.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.test_layers import imports, layer  # noqa: E402

PACKAGE = ROOT / "rlcore"


def spans(path: Path) -> list[tuple[str, str, int]]:
    """``(kind, qualified name, lines)`` of every class and function in ``path``."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                name = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found.append((kind, name, child.end_lineno - first + 1))
                visit(child, f"{name}.")

    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    visit(ast.parse(path.read_text()), f"{module}:")
    return found


FMT_SKIP = re.compile(r"#\s*fmt:\s*skip\s*$", re.MULTILINE)  # the comment ends its line


def fmt_skips(paths: list[Path]) -> int:
    return sum(len(FMT_SKIP.findall(p.read_text())) for p in paths)


def shape(listing: bool) -> dict:
    files = sorted(PACKAGE.rglob("*.py"))
    every = [s for f in files for s in spans(f)]
    classes = sorted(((n, name) for kind, name, n in every if kind == "class"), reverse=True)
    long_functions = sorted(
        ((n, name) for kind, name, n in every if kind == "function" and n > 60), reverse=True
    )
    others = [p for d in ("tests", "benchmarks", "examples") for p in (ROOT / d).rglob("*.py")]
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in imports().items()
        if module != "rlcore"
        for target in targets
        if layer(target) > layer(module)
    )

    def lines(where: Path) -> int:
        return sum(len(p.read_text().splitlines()) for p in where.rglob("*.py"))

    return {
        "largest_classes": [[n, name] for n, name in classes[: 10 if listing else 3]],
        "functions_over_60": len(long_functions),
        **(
            {"functions_over_60_list": [[n, name] for n, name in long_functions]} if listing else {}
        ),
        "fmt_skip": {"rlcore": fmt_skips(files), "tests_benchmarks_examples": fmt_skips(others)},
        "upward_imports": len(upward),
        **({"upward_imports_list": upward} if listing else {}),
        "package_lines": {
            "rlcore": lines(PACKAGE),
            "config": lines(PACKAGE / "config"),
            "workers": lines(PACKAGE / "workers"),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="name every long function")
    print(json.dumps(shape(parser.parse_args().list)))


if __name__ == "__main__":
    main()
