"""IR through `xfuse.ir.serialize`: the same text, ops linked in order, every use rebuilt, and
no recursion along a block's ops or a chain of uses."""

from __future__ import annotations

import pickle
import sys

import pytest
import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation

from xfuse.frontend.export import import_for_xfuse
from xfuse.ir.context import parse
from xfuse.ir.serialize import dumps, loads
from xfuse.pipeline import DEFAULT_PIPELINE
from xfuse.runtime.compiler import ProgramCompiler
from xfuse.runtime.driver import run_pipeline


def uses_of(module: ModuleOp) -> list[list[tuple[int, int]]]:
    """Each value's uses as (position of the using op in the walk, operand index), sorted."""
    ops = list(module.walk())
    position = {id(op): i for i, op in enumerate(ops)}
    values = [v for op in ops for v in op.results] + [
        a for op in ops for r in op.regions for b in r.blocks for a in b.args
    ]
    return [sorted((position[id(u.operation)], u.index) for u in v.uses) for v in values]


def assert_same(got: ModuleOp, want: ModuleOp) -> None:
    assert str(got) == str(want)
    got.verify()
    assert uses_of(got) == uses_of(want)
    for op in got.walk():  # linked both ways, in order
        if op.parent is not None:
            ops = list(op.parent.ops)
            i = ops.index(op)
            assert op.prev_op is (ops[i - 1] if i else None)
            assert op.next_op is (ops[i + 1] if i + 1 < len(ops) else None)


def test_a_fused_program_and_its_lowered_units_round_trip() -> None:
    x = torch.randn(4, 8)
    imported = import_for_xfuse(lambda a: torch.softmax(a * 2, -1) + a.sum(0), (x,))
    module = imported.program.module
    run_pipeline(DEFAULT_PIPELINE, module)
    units = ProgramCompiler(lambda source, name: None).lower_ahead(module)
    assert units.units and units.sources
    got_module, got_units = loads(dumps((module, units)))
    assert_same(got_module, module)
    got_ops = list(got_module.walk())
    for (op, lowered), (got_op, got_lowered) in zip(
        units.units.items(), got_units.units.items(), strict=True
    ):
        assert got_op in got_ops  # the keys are the loaded module's own ops
        assert list(module.walk()).index(op) == got_ops.index(got_op)
        assert_same(got_lowered, lowered)
    texts = [s.text for s in units.sources.values()]
    assert [s.text for s in got_units.sources.values()] == texts


def test_a_long_block_and_a_long_chain_of_uses_do_not_recurse() -> None:
    """3000 ops in one block, each reading the one before: plain pickle passes Python's
    recursion limit on it; `dumps` does not."""
    n = 3000
    body = "\n".join(f"    %v{i + 1} = arith.addf %v{i}, %v{i} : f32" for i in range(n))
    text = f"""builtin.module {{
  func.func @f(%v0: f32) -> f32 {{
{body}
    func.return %v{n} : f32
  }}
}}"""
    module = parse(text)
    assert sys.getrecursionlimit() < 3 * n
    with pytest.raises(RecursionError):
        pickle.dumps(module)  # what `dumps` avoids
    assert_same(loads(dumps(module)), module)


def test_blocks_with_successors_round_trip() -> None:
    module = parse(
        """builtin.module {
  func.func @f(%c: i1, %a: f32, %b: f32) -> f32 {
    cf.cond_br %c, ^bb1(%a : f32), ^bb2
  ^bb1(%x: f32):
    %y = arith.addf %x, %b : f32
    cf.br ^bb2
  ^bb2:
    func.return %a : f32
  }
}"""
    )
    got = loads(dumps(module))
    assert_same(got, module)
    (f,) = [op for op in got.ops if isinstance(op, func.FuncOp)]
    blocks = list(f.body.blocks)
    assert [b.prev_block for b in blocks] == [None, blocks[0], blocks[1]]
    assert [len(list(b.uses)) for b in blocks] == [0, 1, 2]  # successor uses rebuilt


def test_loaded_ir_can_be_rewritten() -> None:
    """Uses are real links: replacing and erasing ops of loaded IR keeps it consistent."""
    module = parse(
        """builtin.module {
  func.func @f(%a: f32) -> f32 {
    %b = arith.addf %a, %a : f32
    %c = arith.mulf %b, %b : f32
    %d = arith.subf %c, %b : f32
    func.return %d : f32
  }
}"""
    )
    got = loads(dumps(module))
    (f,) = [op for op in got.ops if isinstance(op, func.FuncOp)]
    block: Block = f.body.block
    add, mul, sub, _ = list(block.ops)
    assert len(list(add.results[0].uses)) == 3
    sub.operands[0].replace_all_uses_with(add.results[0])  # %d = subf %b, %b
    mul.detach()
    mul.erase()
    got.verify()
    assert len(list(add.results[0].uses)) == 2
    assert [op.name for op in block.ops] == ["arith.addf", "arith.subf", "func.return"]
    new: Operation = add.clone()
    block.insert_op_before(new, sub)
    got.verify()


def test_an_op_dropped_without_erasing_adds_no_use() -> None:
    """A pass may drop an op without erasing it: it keeps its operands, but their use lists no
    longer hold it. Pickled along (an index of ops still names it), it must not come back as
    a use: a value read only by externs would look read by something else (BERT's permutes
    became kernels that way)."""
    module = parse(
        """builtin.module {
  func.func @f(%a: f32) -> f32 {
    %b = arith.addf %a, %a : f32
    %c = arith.mulf %b, %b : f32
    func.return %b : f32
  }
}"""
    )
    (f,) = [op for op in module.ops if isinstance(op, func.FuncOp)]
    add, mul, _ = list(f.body.block.ops)
    for value, use in zip(mul.operands, mul._operand_uses, strict=True):  # noqa: SLF001
        value.remove_use(use)  # dropped from the lists, its operands kept
    mul.detach()
    assert len(list(add.results[0].uses)) == 1
    got_module, got_mul = loads(dumps((module, mul)))
    assert_same(got_module, module)
    (got_f,) = [op for op in got_module.ops if isinstance(op, func.FuncOp)]
    got_add = next(iter(got_f.body.block.ops))
    assert [u.operation.name for u in got_add.results[0].uses] == ["func.return"]
    assert got_mul.operands[0] is got_add.results[0] and got_mul.parent is None
