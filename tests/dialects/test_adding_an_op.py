"""docs/adding-an-op.md's claims: an elementwise op declared only in its dialect class (with
its facts) imports, interprets, lowers to loops and compiles for the CPU, and is fuzzed; a
structural op declared only in its class imports, interprets and is fuzzed (its lowering is
the one other file it needs), and `graph.roll` is such an op; the files the page names exist,
and its model ops live in the modules it names.

The toy ops live in this file alone; the tables every level reads are rebuilt from their facts
with the same functions that build them from the graph dialect."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import I64, IntegerAttr
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import irdl_op_definition, prop_def, traits_def
from xdsl.traits import Pure

from xfuse.dialects import graph
from xfuse.dialects.facts import Fuzz, OpBuilder, OpFacts, ScalarBuilder, ScalarRule
from xfuse.dialects.graph.base import Injective, SameTypeOp
from xfuse.frontend import aten
from xfuse.frontend.aten import layout as aten_layout
from xfuse.frontend.importer import import_module
from xfuse.interpreters import graph as graph_interpreter
from xfuse.passes.lowering import scalar_ops
from xfuse.testing.fuzz import generator, runner


def _log1p(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    return b.insert(math.LogOp(b.insert(arith.AddfOp(b.constant(1.0, t), xs[0]))))


@irdl_op_definition
class ToyLog1pOp(graph.FloatUnaryOp):
    """log(1 + x). `%y = graph.toy_log1p %x : tensor<4xf32>`"""

    name = "graph.toy_log1p"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.log1p",
        aten=("aten.log1p.default",),
        scalar=ScalarRule(_log1p),
        fuzz=Fuzz.unary("torch.log1p", positive=True),
    )


def add_rows(monkeypatch: pytest.MonkeyPatch, op: type[Operation]) -> None:
    """A toy op's rows, made by the generators of the real tables, added to them."""
    for name, impl in graph_interpreter.op_impls([op]).items():
        monkeypatch.setitem(graph_interpreter.OP_IMPLS, name, impl)
    for name, convert in aten.op_converters([op]).items():
        monkeypatch.setitem(aten.CONVERTERS, name, convert)
    for name, rule in scalar_ops.scalar_rules([op]).items():
        monkeypatch.setitem(scalar_ops.SCALAR_RULES, name, rule)


@pytest.fixture
def toy_op(monkeypatch: pytest.MonkeyPatch) -> None:
    add_rows(monkeypatch, ToyLog1pOp)


SOURCE = """
import torch

def program(x0):
    return torch.log1p(x0.abs() + 0.5) * 2.0

def make_inputs():
    return (torch.randn(4, 8, generator=torch.Generator().manual_seed(0)),)
"""


def test_a_toy_op_declared_in_its_class_imports_interprets_and_lowers(toy_op: None) -> None:
    x = torch.rand(4, 8) + 0.1
    imported = import_module(lambda x: torch.log1p(x) * 2.0, (x,))
    names = [op.name for op in imported.module.walk()]
    assert "graph.toy_log1p" in names and "graph.torch_call" not in names
    outcome = runner.check_source(SOURCE, ["cpu"])
    assert outcome.status == "pass", str(outcome)
    assert {"import", "loops", "cpu"} <= set(outcome.stages), outcome.stages


def test_a_toy_op_declared_in_its_class_is_fuzzed() -> None:
    drawn = generator.pool("unary", [*graph.Graph.operations, ToyLog1pOp])
    assert drawn[-1].spelling == "torch.log1p" and drawn[-1].positive


PAGE = Path(__file__).resolve().parents[2] / "docs" / "adding-an-op.md"


def test_the_files_the_page_names_exist() -> None:
    root = PAGE.parent.parent
    named = set(re.findall(r"`((?:xfuse|tests|filecheck)/[\w/.-]+)`", PAGE.read_text()))
    assert named, "the page names no files"
    assert sorted(p for p in named if not (root / p).exists()) == []


def test_the_model_op_lives_in_the_module_the_page_names() -> None:
    module = graph.SinOp.__module__.replace(".", "/") + ".py"
    assert module == "xfuse/dialects/graph/elementwise.py"
    assert f"`{module}`" in PAGE.read_text()
    assert graph.SinOp in graph.ELEMENTWISE_OPS


# ---------------------------------------------------------------------------------------------
# A structural op: its class, with its converter, torch arguments and fuzz drawing
# ---------------------------------------------------------------------------------------------


def _toy_roll_from_aten(b: OpBuilder, a: Mapping[str, Any]) -> SSAValue | None:
    shifts, dims = list(a["shifts"]), list(a.get("dims") or [])
    if len(shifts) != 1 or dims != [0]:
        return None  # left to graph.torch_call
    return b.emit(ToyRollOp(b.tensor(a["self"]), shifts[0]))


def _draw_toy_roll(rng: random.Random, x: str, shape: tuple[int, ...]) -> str | None:
    return f"torch.roll({x}, {rng.randint(1, 3)}, 0)" if shape else None


@irdl_op_definition
class ToyRollOp(SameTypeOp):
    """Rotates dim 0 by `shift`. `%y = graph.toy_roll %x shift = 1 : tensor<4xf32>`"""

    name = "graph.toy_roll"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.roll",
        torch_args=lambda op: (op.shift.value.data, 0),
        aten=("aten.roll.default",),
        convert=_toy_roll_from_aten,
        fuzz=Fuzz.drawn_in("index_op", "toy_roll", _draw_toy_roll),
    )
    shift = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure(), Injective())
    assembly_format = "$input `shift` `=` $shift attr-dict `:` type($input)"

    def __init__(self, input: SSAValue, shift: int):
        super().__init__(input, shift=IntegerAttr(shift, 64))


@pytest.fixture
def toy_structural_op(monkeypatch: pytest.MonkeyPatch) -> None:
    add_rows(monkeypatch, ToyRollOp)


def test_a_toy_structural_op_declared_in_its_class_imports_and_interprets(
    toy_structural_op: None,
) -> None:
    x = torch.randn(5, 3)
    imported = import_module(lambda x: torch.roll(x, 2, 0) * 2.0, (x,))
    names = [op.name for op in imported.module.walk()]
    assert "graph.toy_roll" in names and "graph.torch_call" not in names
    (got,) = graph_interpreter.interpret(imported.module, [x])
    torch.testing.assert_close(got, torch.roll(x, 2, 0) * 2.0)


def test_a_toy_structural_op_declared_in_its_class_is_fuzzed() -> None:
    drawn = generator.fact_kinds([*graph.Graph.operations, ToyRollOp])["index_op"]
    kinds = generator.kinds_of(generator.INDEX_KINDS, drawn)
    assert kinds[: len(generator.INDEX_KINDS)] == generator.INDEX_KINDS  # no draw moves
    assert kinds[-1] == "toy_roll"
    assert drawn["toy_roll"](random.Random(0), "v1", (4, 2)).startswith("torch.roll(v1, ")


def test_roll_is_declared_in_its_class_alone() -> None:
    """Its converter, interpreter entry and fuzz entry are its facts; only its lowering (an
    index map in `xfuse/passes/lowering/operand_index.py`) is elsewhere."""
    facts = graph.op_facts(graph.RollOp)
    assert graph.RollOp not in aten_layout.OWN_CONVERTERS
    assert graph.RollOp.name not in graph_interpreter.OWN_IMPLS
    assert facts.convert is not None and facts.torch_args is not None
    assert facts.fuzz is not None and generator.FACT_KINDS["index_op"]["roll"] is facts.fuzz.draw
    assert graph.RollOp.__module__ == "xfuse.dialects.graph.layout"
    assert "`xfuse/dialects/graph/layout.py`" in PAGE.read_text()
