"""Loops cut where a comparison of their index changes (`xfuse.passes.llvm.range_pieces`, cpu):
which loops are cut and where, that no branch on the index is left in a piece, and that cut
kernels compute what eager does (and what the uncut loop computes, predicate by predicate)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import ModuleOp

import xfuse
from xfuse.backends import Kernel
from xfuse.backends.cpu import CPUBackend
from xfuse.ir.constants import int_constant
from xfuse.ir.context import parse
from xfuse.passes.llvm import range_pieces
from xfuse.passes.llvm.lower_to_llvm import prepare_cpu_kernels
from xfuse.passes.llvm.range_pieces import split_loop_ranges

Program = Callable[..., torch.Tensor]


def _silu_pad(x: torch.Tensor) -> torch.Tensor:
    """EfficientNet's activation before a stride-2 depthwise convolution: SiLU, padded."""
    return F.pad(F.silu(x), (1, 2, 1, 2))


def _concat(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cat([x * 2.0, y + 1.0], -1)


def _loop_irs(program: xfuse.CompiledProgram) -> list[str]:
    return [k.loop_ir for k in program.default.program.kernels]


def _prepared_loops(module: ModuleOp) -> list[scf.ForOp]:
    """The loops of a kernel after the CPU's preparation (which cuts them)."""
    prepare_cpu_kernels(module)
    return [o for o in module.walk() if isinstance(o, scf.ForOp)]


def _prepared(loop_ir: str) -> list[scf.ForOp]:
    return _prepared_loops(parse(loop_ir))


def _load(source: str) -> Kernel:
    backend = CPUBackend()
    return backend.load(backend.compile(parse(source), "k"), "k")


def _bounds(loops: list[scf.ForOp]) -> list[tuple[int | None, int | None]]:
    return [(int_constant(loop.lb), int_constant(loop.ub)) for loop in loops]


CENTERED_CONCAT = """
func.func @k(%a: memref<6x5xf32>, %b: memref<6x7xf32>, %out: memref<6x12xf32>)
    attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c5 = arith.constant 5 : index
  %c6 = arith.constant 6 : index
  %c12 = arith.constant 12 : index
  %m5 = arith.constant -5 : index
  %zero = arith.constant 0.0 : f32
  %n = arith.constant 12.0 : f32
  "scf.parallel"(%c0, %c6, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%r: index):
    %sum = scf.for %i = %c0 to %c12 step %c1 iter_args(%acc = %zero) -> (f32) {
      %in_a = arith.cmpi ult, %i, %c5 : index
      %j = arith.addi %i, %m5 : index
      %x = scf.if %in_a -> (f32) {
        %v = memref.load %a[%r, %i] : memref<6x5xf32>
        scf.yield %v : f32
      } else {
        %v = memref.load %b[%r, %j] : memref<6x7xf32>
        scf.yield %v : f32
      }
      %next = arith.addf %acc, %x fastmath<reassoc> : f32
      scf.yield %next : f32
    }
    %mean = arith.divf %sum, %n : f32
    scf.for %i = %c0 to %c12 step %c1 {
      %in_a = arith.cmpi ult, %i, %c5 : index
      %j = arith.addi %i, %m5 : index
      %x = scf.if %in_a -> (f32) {
        %v = memref.load %a[%r, %i] : memref<6x5xf32>
        scf.yield %v : f32
      } else {
        %v = memref.load %b[%r, %j] : memref<6x7xf32>
        scf.yield %v : f32
      }
      %y = arith.subf %x, %mean : f32
      memref.store %y, %out[%r, %i] : memref<6x12xf32>
    }
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}
"""
"""A row centred over a concat (a layer norm's first steps, lower-to-loops's form of a concat:
`scf.if` on the index): a sum loop and a write loop."""


def test_a_reduction_over_a_concat_runs_one_loop_per_operand() -> None:
    """The sum and the write loop are each cut at the concat's parts, no branch is left, the
    sum is carried from one piece to the next, and the kernel computes eager's values."""
    loops = _prepared_loops(parse(CENTERED_CONCAT))
    assert _bounds(loops) == [(None, None), (0, 5), (5, 12), (0, 5), (5, 12)]
    assert not [o for loop in loops for o in loop.walk() if isinstance(o, scf.IfOp)]
    assert loops[2].iter_args[0] == loops[1].results[0]
    a, b = torch.randn(6, 5), torch.randn(6, 7)
    out = torch.empty(6, 12)
    _load(CENTERED_CONCAT)([a, b, out])
    x = torch.cat([a, b], -1)
    torch.testing.assert_close(out, x - x.mean(-1, keepdim=True))


@pytest.mark.parametrize(
    ("fn", "shapes", "pieces"),
    [
        (_silu_pad, ((1, 16, 12, 12),), [(0, 1), (1, 13), (13, 15)]),
        (_concat, ((3, 5, 24), (3, 5, 40)), [(0, 24), (24, 64)]),
    ],
)
def test_pads_and_concats_are_cut_at_their_borders(
    fn: Program, shapes: tuple[tuple[int, ...], ...], pieces: list[tuple[int, int]]
) -> None:
    """The innermost loop runs once per part, and the
    values are eager's, bit for bit (every element is computed by the same ops)."""
    args = [torch.randn(s) for s in shapes]
    program = xfuse.compile(fn, tuple(args), quiet=True)
    (loop_ir,) = _loop_irs(program)
    cut = [b for b in _bounds(_prepared(loop_ir)) if b in pieces]
    assert set(cut) == set(pieces)
    torch.testing.assert_close(program(*args), fn(*args))


def _loop_kernel(element: str, constants: str, body: str) -> str:
    """A format template: a kernel whose one loop `%i` over 12 runs `body`, storing into
    `%out` of `element`s; `{predicate}`, `{clamp}`, `{lhs}` and `{rhs}` are left to fill."""
    return f"""
func.func @k(%out: memref<12x{element}>) attributes {{{{xfuse.kernel, xfuse.parallel_dims = 1 : i64}}}} {{{{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c12 = arith.constant 12 : index
  %c5 = arith.constant 5 : index
{constants}
  "scf.parallel"(%c0, %c1, %c1) <{{{{operandSegmentSizes = array<i32: 1, 1, 1, 0>}}}}> ({{{{
  ^bb0(%p: index):
    scf.for %i = %c0 to %c12 step %c1 {{{{
{body}
    }}}}
    scf.reduce
  }}}}) : (index, index, index) -> ()
  func.return
}}}}
"""


KERNEL = _loop_kernel(
    "f32",
    """  %one = arith.constant 1.0 : f32
  %two = arith.constant 2.0 : f32""",
    """      %c = arith.cmpi {predicate}, {lhs}, {rhs} : index
      %v = arith.select %c, %one, %two : f32
      memref.store %v, %out[%i] : memref<12xf32>""",
)

PREDICATES = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]


def _run(source: str) -> torch.Tensor:
    out = torch.zeros(12)
    _load(source)([out])
    return out


@pytest.mark.parametrize("predicate", PREDICATES)
@pytest.mark.parametrize("mirrored", [False, True])
def test_every_predicate_decides_its_pieces_as_the_loop_does(
    predicate: str, mirrored: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`i pred 5` and `5 pred i`: the cut loop stores what the uncut one does at every index."""
    lhs, rhs = ("%c5", "%i") if mirrored else ("%i", "%c5")
    source = KERNEL.format(predicate=predicate, lhs=lhs, rhs=rhs)
    module = parse(source)
    (loop,) = [o for o in module.walk() if isinstance(o, scf.ForOp)]
    assert split_loop_ranges(loop)
    (kernel,) = [o for o in module.walk() if isinstance(o, func.FuncOp)]
    assert not [o for o in kernel.walk() if isinstance(o, arith.CmpiOp | arith.SelectOp)]
    cut = _run(source)
    monkeypatch.setattr(range_pieces, "MAX_PIECES", 1)
    uncut = _run(source)
    assert torch.equal(cut, uncut)
    assert sorted(set(cut.tolist())) == [1.0, 2.0]


CLAMP_KERNEL = _loop_kernel(
    "i64",
    "  %c2 = arith.constant 2 : index",
    """      %j = arith.addi %i, %c2 : index
      %m = arith.{clamp} {lhs}, {rhs} : index
      %v = arith.index_cast %m : index to i64
      memref.store %v, %out[%i] : memref<12xi64>""",
)


@pytest.mark.parametrize("clamp", ["minsi", "maxsi", "minui", "maxui"])
@pytest.mark.parametrize("mirrored", [False, True])
def test_an_index_clamp_is_decided_in_each_piece(
    clamp: str, mirrored: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`min(i + 2, 5)` and `max(i + 2, 5)` (a pad's read of its border's nearest element): the
    loop is cut where the clamp starts to hold, each piece reads `i + 2` or 5 with no clamp
    left, and stores what the uncut loop stores at every index."""
    lhs, rhs = ("%c5", "%j") if mirrored else ("%j", "%c5")
    source = CLAMP_KERNEL.format(clamp=clamp, lhs=lhs, rhs=rhs)
    module = parse(source)
    (loop,) = [o for o in module.walk() if isinstance(o, scf.ForOp)]
    assert split_loop_ranges(loop)
    low = clamp.startswith("min")  # min(i + 2, 5) is i + 2 up to i = 3; max from i = 3 on
    cut_at = 4 if low else 3
    assert _bounds([o for o in module.walk() if isinstance(o, scf.ForOp)]) == [
        (0, cut_at),
        (cut_at, 12),
    ]
    clamps = (arith.MinSIOp, arith.MaxSIOp, arith.MinUIOp, arith.MaxUIOp)
    assert not [o for o in module.walk() if isinstance(o, clamps)]

    def run(text: str) -> torch.Tensor:
        out = torch.zeros(12, dtype=torch.int64)
        _load(text)([out])
        return out

    cut = run(source)
    monkeypatch.setattr(range_pieces, "MAX_PIECES", 1)
    uncut = run(source)
    assert torch.equal(cut, uncut)
    assert cut.tolist() == [min(i + 2, 5) if low else max(i + 2, 5) for i in range(12)]


def test_a_clamp_of_a_clamp_is_kept_where_its_pieces_do_not_decide_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A replicate pad's read `min(max(i - 2, 0), 5)`: the cuts see the inner max only, so
    the outer min, an index clamp once the max is decided, changes inside a piece and stays;
    the values are the uncut loop's."""
    source = (
        CLAMP_KERNEL.format(clamp="maxsi", lhs="%j", rhs="%c0")
        .replace("%j = arith.addi %i, %c2", "%j = arith.subi %i, %c2")
        .replace(
            "%v = arith.index_cast %m",
            "%n = arith.minsi %m, %c5 : index\n      %v = arith.index_cast %n",
        )
    )

    def run(text: str) -> list[int]:
        out = torch.zeros(12, dtype=torch.int64)
        _load(text)([out])
        return out.tolist()

    cut = run(source)
    monkeypatch.setattr(range_pieces, "MAX_PIECES", 1)
    assert cut == run(source) == [min(max(i - 2, 0), 5) for i in range(12)]


def test_loops_of_too_many_pieces_are_left_alone() -> None:
    """A concat of more parts than `MAX_PIECES` keeps its one loop (each piece copies the
    body), and still computes eager's values."""
    parts = [torch.randn(2, 3) for _ in range(range_pieces.MAX_PIECES + 1)]

    def fn(*xs: torch.Tensor) -> torch.Tensor:
        return torch.cat([x + 1.0 for x in xs], -1)

    program = xfuse.compile(fn, tuple(parts), quiet=True)
    (loop_ir,) = _loop_irs(program)
    (inner,) = [b for b in _bounds(_prepared(loop_ir)) if b[0] is not None]
    assert inner == (0, 3 * len(parts))
    assert torch.equal(program(*parts), fn(*parts))


SIZED_KERNEL = """
func.func @k(%out: memref<40xf32>, %n: index) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64, xfuse.size_args = ["s0"]} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %one = arith.constant 1.0 : f32
  %two = arith.constant 2.0 : f32
  %ub = arith.addi %n, %c4 : index
  "scf.parallel"(%c0, %c1, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%p: index):
    scf.for %i = %c0 to %ub step %c1 {
      %a = arith.cmpi sge, %i, %c3 : index
      %j = arith.addi %i, %c1 : index
      %b = arith.cmpi slt, %j, %n : index
      %both = arith.andi %a, %b : i1
      %v = arith.select %both, %one, %two : f32
      memref.store %v, %out[%i] : memref<40xf32>
    }
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}
"""


def test_a_loop_to_a_runtime_size_is_cut_behind_a_test_of_the_size() -> None:
    """`for i < n + 4` testing `i >= 3` and `i + 1 < n`: pieces [0, 3), [3, n - 1), [n - 1,
    n + 4), in that order only where n >= 4; below, the loop as it was. Every n stores what
    the tests say."""
    module = parse(SIZED_KERNEL)
    (loop,) = [o for o in module.walk() if isinstance(o, scf.ForOp)]
    assert range_pieces.split_loop_ranges(loop)
    (branch,) = [o for o in module.walk() if isinstance(o, scf.IfOp)]
    test = branch.cond.owner
    assert isinstance(test, arith.CmpiOp) and int_constant(test.rhs) == 4
    fast = [o for o in branch.true_region.walk() if isinstance(o, scf.ForOp)]
    assert len(fast) == 3
    assert not [o for o in branch.true_region.walk() if isinstance(o, arith.CmpiOp)]
    kernel = _load(SIZED_KERNEL)
    for n in range(9):
        out = torch.zeros(40)
        kernel.launch_sized([out], [n], None)
        want = torch.zeros(40)
        for i in range(n + 4):
            want[i] = 1.0 if i >= 3 and i + 1 < n else 2.0
        assert torch.equal(out, want), n
