"""The package's layers (docs/architecture.md): a module imports only from its own layer or the
ones below it, and no modules import each other in a cycle. Read from the source with ``ast``,
lazy imports inside functions included."""

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rlcore"
LAYERS = [  # lowest first
    {"columns", "compile_marks", "did_you_mean", "lazy", "log", "procpool"},
    {"algorithms"},
    {"config"},
    {"placement"},
    {"scheduler"},
    {"envs"},
    {"data"},
    {"tools"},
    {"models"},
    {"workers", "rewards", "prepare"},
    {"runners", "export", "export_target"},
    {"cli", "__main__"},
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    return next(i for i, names in enumerate(LAYERS) if top in names)


@functools.cache  # (parsing the package is 1.3 CPU-s; four tests read it: not to be changed)
def imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    for path in PACKAGE.rglob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            # the most specific rlcore module each import names
            found |= {
                n
                for n in names
                if n in modules and not any(m.startswith(n + ".") and m in names for m in modules)
            }
        graph[module_name(path)] = found - {module_name(path)}
    return graph


def test_no_module_imports_from_a_higher_layer():
    upward = sorted(
        f"{module} (layer {layer(module)}) imports {target} (layer {layer(target)})"
        for module, targets in imports().items()
        if module != "rlcore"
        for target in targets
        if layer(target) > layer(module)
    )
    assert not upward, "\n".join(upward)


def test_there_are_no_import_cycles():
    graph, cycles = imports(), []

    def visit(module: str, path: list[str]) -> None:
        for target in sorted(graph.get(module, ())):
            if target in path:
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in done:
                visit(target, [*path, target])
        done.add(module)

    done: set[str] = set()
    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    assert not cycles, "\n".join(sorted(set(cycles)))


# Inside rlcore.config: the foreign vocabularies (verl's, RLinf's and rlcore's earlier keys, and
# their translation) sit below the schema, the validator and the loader; Hydra's composition
# knows none of them. Each module named imports from rlcore only these.
CONFIG_FOUNDATIONS = {
    "rlcore.config.foreign": (
        "rlcore.config.foreign",
        "rlcore.config.errors",
        "rlcore.did_you_mean",
    ),
    "rlcore.config.composition": ("rlcore.config.errors", "rlcore.did_you_mean"),
}


def test_the_foreign_vocabularies_and_the_composition_stand_on_errors_alone():
    graph = imports()
    assert any(module.startswith("rlcore.config.foreign.") for module in graph)
    reaching = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        for prefix, allowed in CONFIG_FOUNDATIONS.items()
        if module == prefix or module.startswith(prefix + ".")
        for target in targets
        if not any(target == a or target.startswith(a + ".") for a in allowed)
    )
    assert not reaching, "\n".join(reaching)
