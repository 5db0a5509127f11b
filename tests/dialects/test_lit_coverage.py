"""Every op of the graph and fusion dialects has its lit round-trip test, and every verifier
message of theirs that text can reach has its lit invalid test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from xdsl.ir import Dialect

from xfuse.dialects import fusion, graph
from xfuse.dialects.fusion import Fusion
from xfuse.dialects.graph import Graph

ROOT = Path(__file__).resolve().parents[2]
LIT = ROOT / "filecheck" / "dialects"

# Messages that only IR built in Python can trigger: IRDL's `TensorType` constraints reject a
# non-ranked tensor while parsing, and the SingleBlockImplicitTerminator trait reports a missing
# fusion.yield before GroupOp.verify_ does.
UNREACHABLE_FROM_TEXT = {
    "expected {what} to be a ranked tensor, found {t}",
    "expected the body to end with fusion.yield",
}


def op_names(dialect: Dialect) -> list[str]:
    return [op.name for op in dialect.operations]


@pytest.mark.parametrize(("dialect", "name"), [(Graph, "graph"), (Fusion, "fusion")])
def test_every_op_round_trips_in_lit(dialect: Dialect, name: str) -> None:
    text = (LIT / name / "ops.mlir").read_text()
    missing = [op for op in op_names(dialect) if not re.search(rf"\b{re.escape(op)}\b", text)]
    assert not missing, f"ops without a round-trip test in {name}/ops.mlir: {missing}"


def module_sources(module_path: Path) -> list[Path]:
    """A module's source file, or every source file of a package (its `__init__.py`)."""
    if module_path.name == "__init__.py":
        return sorted(module_path.parent.glob("*.py"))
    return [module_path]


def verifier_messages(module_path: Path) -> list[str]:
    """The message templates of every `raise VerifyException(...)` in a module (a package:
    in each of its modules)."""
    messages: list[str] = []
    nodes = (
        n for path in module_sources(module_path) for n in ast.walk(ast.parse(path.read_text()))
    )
    for node in nodes:
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            func = node.exc.func
            if isinstance(func, ast.Name) and func.id == "VerifyException" and node.exc.args:
                messages.append(template(node.exc.args[0]))
    return messages


def template(node: ast.expr) -> str:
    """A message expression as text, with `{...}` where a value is formatted in."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(v.value) if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"  # pyright: ignore[reportAttributeAccessIssue]
            for v in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return template(node.left) + template(node.right)
    return "{" + ast.unparse(node) + "}"


def message_pattern(message: str) -> re.Pattern[str]:
    """Literal text of the template, anything where a value goes."""
    parts = re.split(r"\{[^{}]*\}", message)
    return re.compile(".*".join(re.escape(p) for p in parts))


@pytest.mark.parametrize(("module", "name"), [(graph, "graph"), (fusion, "fusion")])
def test_every_verifier_message_has_an_invalid_test(module: object, name: str) -> None:
    checks = [
        line
        for line in (LIT / name / "invalid.mlir").read_text().splitlines()
        if line.startswith("// CHECK:")
    ]
    messages = verifier_messages(Path(module.__file__))  # pyright: ignore[reportAttributeAccessIssue]
    assert messages, "no verifier messages found: has the module moved?"
    missing = [
        m
        for m in messages
        if m not in UNREACHABLE_FROM_TEXT and not any(message_pattern(m).search(c) for c in checks)
    ]
    assert not missing, f"verifier messages without a case in {name}/invalid.mlir: {missing}"
