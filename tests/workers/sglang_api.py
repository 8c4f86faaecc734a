"""The API of the pinned sglang release that rlcore's SGLang adapter calls, read from the real
package's source (sglang cannot be installed on these CPU machines, so the tests check the fake
engine against this snapshot, not against memory).

    python tests/workers/sglang_api.py sglang-0.5.21-py3-none-any.whl \
        > tests/workers/sglang_api.json

It reads ``sglang/srt/entrypoints/engine.py`` (class ``Engine``: each method's parameters, kind
and default as written) and ``sglang/srt/arg_groups/fields/*.py`` (the ``ServerArgs`` fields that
``Engine(**kwargs)`` accepts) from the wheel, with the sha256 of each file read.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

SNAPSHOT = Path(__file__).with_name("sglang_api.json")
ENGINE = "sglang/srt/entrypoints/engine.py"
FIELDS = re.compile(r"sglang/srt/arg_groups/fields/[a-z_]+\.py$")


def load() -> dict:
    return json.loads(SNAPSHOT.read_text())


def _parameters(fn: ast.FunctionDef) -> list[list]:
    a = fn.args
    out: list[list] = []
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for arg, default in zip(positional, defaults, strict=True):
        out.append([arg.arg, "positional", None if default is None else ast.unparse(default)])
    if a.vararg:
        out.append([a.vararg.arg, "var_positional", None])
    for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        out.append([arg.arg, "keyword_only", None if default is None else ast.unparse(default)])
    if a.kwarg:
        out.append([a.kwarg.arg, "var_keyword", None])
    return out


def extract(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        version = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = z.read(version).decode()
        sources = {ENGINE: z.read(ENGINE).decode()}
        sources.update({n: z.read(n).decode() for n in names if FIELDS.search(n)})
    engine = next(
        node
        for node in ast.parse(sources[ENGINE]).body
        if isinstance(node, ast.ClassDef) and node.name == "Engine"
    )
    methods = {
        fn.name: _parameters(fn)
        for fn in engine.body
        if isinstance(fn, ast.FunctionDef)
        and (not fn.name.startswith("_") or fn.name == "__init__")
    }
    fields = sorted(
        node.target.id
        for name, text in sources.items()
        if name != ENGINE
        for cls in ast.parse(text).body
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    )
    return {
        "version": re.search(r"^Version: (\S+)", meta, re.M).group(1),
        "sha256": {n: hashlib.sha256(t.encode()).hexdigest() for n, t in sorted(sources.items())},
        "engine_methods": methods,
        "server_args": fields,
    }


if __name__ == "__main__":
    print(json.dumps(extract(Path(sys.argv[1])), indent=1))
