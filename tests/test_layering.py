"""The import graph of xfuse: a lower level never imports a higher one, and no cycle exists.

Levels, lowest first (a module belongs to the longest prefix listed); a module may import its
own level and any lower one. Imports inside functions count too: a lazy import is still a
dependency."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "xfuse"

LEVELS = [
    [
        "xfuse.errors",
        "xfuse.collector",
        "xfuse.lazy",
        "xfuse.ir.dtypes",
        "xfuse.ir.dense",
        "xfuse.ir.names",
        "xfuse.ir.functions",
        "xfuse.progress",
    ],
    ["xfuse.dialects"],
    ["xfuse.ir.context", "xfuse.ir", "xfuse.interpreters"],
    ["xfuse.frontend"],
    ["xfuse.passes.options", "xfuse.passes.transforms"],
    ["xfuse.passes.fusion"],
    ["xfuse.passes.lowering"],
    ["xfuse.passes.llvm"],
    ["xfuse.passes", "xfuse.pipeline"],
    ["xfuse.backends"],
    ["xfuse.runtime"],
    ["xfuse.report"],
    ["xfuse.frontend.export", "xfuse.choices"],
    ["xfuse.runtime.driver", "xfuse.runtime.dynamic"],
    ["xfuse.api", "xfuse"],
    ["xfuse.backend_inputs", "xfuse.training", "xfuse.dynamo"],
    ["xfuse.testing"],
    ["xfuse.cli"],
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def level(module: str) -> int:
    best, found = -1, -1
    for rank, prefixes in enumerate(LEVELS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), rank
    assert found >= 0, f"{module} is in no level of LEVELS"
    return found


def imports(path: Path, modules: set[str]) -> set[str]:
    """The xfuse modules `path` imports (`from a import b` counts `a.b` when that is a module)."""
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("xfuse")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.startswith("xfuse"):
                found |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules}
                found.add(base)
    return found - {this}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports(p, modules) & modules for p in paths}


def test_no_lower_level_imports_a_higher_one() -> None:
    graph = import_graph()
    wrong = [
        f"{m} (level {level(m)}) imports {d} (level {level(d)})"
        for m, deps in sorted(graph.items())
        for d in sorted(deps)
        if level(d) > level(m) and not (m == "xfuse" or m.startswith(d + "."))
    ]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle() -> None:
    graph = import_graph()
    # A package's __init__ may import its own submodules (lazily, as xfuse.backends does).
    edges = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path, m, d]))
            if d not in state:
                visit(d, [*path, m])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [])
