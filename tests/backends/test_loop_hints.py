"""Loop metadata for the CPU's LLVM pipeline (`xfuse.backends.loop_hints`): which short row
loops are vectorized at full width with a masked tail, and that their kernels compute eager's
values."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import xfuse
from xfuse.backends.cpu import CPUBackend
from xfuse.backends.loop_hints import PREDICATE, UNROLL_DISABLE, WIDTH
from xfuse.ir.context import parse


def _llvm_ir(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> str:
    program = xfuse.compile(fn, (x,), quiet=True)
    torch.testing.assert_close(program(x), fn(x))
    (kernel,) = program.default.program.kernels
    return CPUBackend().llvm_ir(parse(kernel.loop_ir), "xfuse_kernel")


def _padded_silu(x: torch.Tensor) -> torch.Tensor:
    return F.pad(F.silu(x), (0, 1, 0, 1))


@pytest.mark.parametrize("width", [28, 14, 9])
def test_a_padded_row_no_multiple_of_a_vector_is_vectorized_at_full_width(width: int) -> None:
    """A padded output's row of 28 (EfficientNet's SiLU before a stride-2 depthwise
    convolution): LLVM alone picks the widest vector dividing the trip (4 lanes)."""
    ir = _llvm_ir(_padded_silu, torch.randn(1, 8, width, width))
    assert f'!"{WIDTH}", i32 16' in ir and f'!"{PREDICATE}", i1 1' in ir


_SHIFT, _SCALE = torch.randn(32, 1, 1), torch.rand(32, 1, 1) + 0.5


@pytest.mark.parametrize("channels", [8, 12, 16, 17])
def test_a_row_of_one_vector_stays_a_loop_for_the_vectorizer(channels: int) -> None:
    """A batch norm of a channels-last input: a row of `channels` a pixel, each element with
    its channel's shift and scale. A row of one vector (or one and an element) is kept a loop
    (`llvm.loop.unroll.disable`), where LLVM unrolled it and vectorized across pixels."""
    shift, scale = _SHIFT[:channels], _SCALE[:channels]
    x = torch.randn(1, channels, 6, 6).contiguous(memory_format=torch.channels_last)
    ir = _llvm_ir(lambda t: (t - shift) * scale, x)
    assert f'!"{WIDTH}", i32 16' in ir and f'!"{UNROLL_DISABLE}"' in ir


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        pytest.param(_padded_silu, (1, 8, 32, 32), id="whole-vectors"),
        pytest.param(_padded_silu, (1, 2, 4, 300), id="long-row"),
        pytest.param(lambda x: x.sum(-1), (64, 28), id="a-sum"),
    ],
)
def test_other_loops_keep_llvms_choice(
    fn: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, ...]
) -> None:
    """Rows of whole vectors, rows past `SHORT_ROW` and sums (whose lanes LLVM chooses, as
    eager's are summed) get no width."""
    assert WIDTH not in _llvm_ir(fn, torch.randn(shape))


def _row_kernel(constants: str, row: str) -> str:
    """A kernel over the 4 rows of 28 of `%a` (one `scf.parallel` trip a row, `%r`), each
    row's loop `row` writing `%out`."""
    return f"""
func.func @k(%a: memref<4x28xf32>, %out: memref<4xf32>)
    attributes {{xfuse.kernel, xfuse.parallel_dims = 1 : i64}} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c28 = arith.constant 28 : index
{constants}
  "scf.parallel"(%c0, %c4, %c1) <{{operandSegmentSizes = array<i32: 1, 1, 1, 0>}}> ({{
  ^bb0(%r: index):
{row}
    scf.reduce
  }}) : (index, index, index) -> ()
  func.return
}}
"""


CARRIED = _row_kernel(
    """
  %half = arith.constant 0.5 : f32
  %zero = arith.constant 0.0 : f32""",
    """
    %last = scf.for %i = %c0 to %c28 step %c1 iter_args(%acc = %zero) -> (f32) {
      %x = memref.load %a[%r, %i] : memref<4x28xf32>
      %h = arith.mulf %acc, %half : f32
      %y = arith.addf %h, %x : f32
      scf.yield %y : f32
    }
    memref.store %last, %out[%r] : memref<4xf32>""",
)

ONE_ADDRESS = _row_kernel(
    "",
    """
    scf.for %i = %c0 to %c28 step %c1 {
      %x = memref.load %a[%r, %i] : memref<4x28xf32>
      memref.store %x, %out[%r] : memref<4xf32>
    }""",
)


@pytest.mark.parametrize("source", [CARRIED, ONE_ADDRESS], ids=["carried", "one-address"])
def test_a_loop_llvm_cannot_vectorize_is_not_marked(
    source: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A row loop of 28 that carries a value out (not a sum) or stores every trip at one
    address: marked, LLVM would fail to vectorize it and print a remark on stderr."""
    backend = CPUBackend()
    assert WIDTH not in backend.llvm_ir(parse(source), "k")
    a = torch.randn(4, 28)
    out = torch.zeros(4)
    backend.load(backend.compile(parse(source), "k"), "k")([a, out])
    assert "remark" not in capfd.readouterr().err


def _mapped_rows(op: str, n: int = 100) -> str:
    """A kernel writing `op` of each element of `%a`'s 4 rows of `n` into `%out`'s."""
    return f"""
func.func @k(%a: memref<4x{n}xf32>, %out: memref<4x{n}xf32>)
    attributes {{xfuse.kernel, xfuse.parallel_dims = 1 : i64}} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %cn = arith.constant {n} : index
  "scf.parallel"(%c0, %c4, %c1) <{{operandSegmentSizes = array<i32: 1, 1, 1, 0>}}> ({{
  ^bb0(%r: index):
    scf.for %i = %c0 to %cn step %c1 {{
      %x = memref.load %a[%r, %i] : memref<4x{n}xf32>
      %y = {op} %x : f32
      memref.store %y, %out[%r, %i] : memref<4x{n}xf32>
    }}
    scf.reduce
  }}) : (index, index, index) -> ()
  func.return
}}
"""


@pytest.mark.parametrize(
    ("op", "marked"),
    [("math.cbrt", False), ("math.asinh", False), ("math.sinh", True), ("math.tan", True)],
)
def test_a_row_that_calls_a_c_math_function_is_not_marked(
    op: str, marked: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    """A row loop of 100 that calls `cbrtf` or `asinhf` (C functions with no vector form):
    marked, LLVM could not vectorize it and would print a remark. LLVM's intrinsics (`sinh`,
    `tan`) it vectorizes, one lane at a time where no vector form exists: still marked. Every
    form computes torch's values."""
    backend = CPUBackend()
    source = parse(_mapped_rows(op))
    assert (WIDTH in backend.llvm_ir(source, "k")) == marked
    a, out = torch.randn(4, 100), torch.zeros(4, 100)
    backend.load(backend.compile(source, "k"), "k")([a, out])
    name = op.removeprefix("math.")
    want = a.sign() * a.abs().pow(1 / 3) if name == "cbrt" else getattr(torch, name)(a)
    torch.testing.assert_close(out, want)
    assert "remark" not in capfd.readouterr().err


def _narrowed_rows(n: int) -> str:
    """A kernel storing `where(a > 0.5, a, -2.5)` of each element of `%a`'s 4 rows of `n` into
    `%kept`'s, and its sign bit (an i32 shift, narrowed to i8: `torch.signbit`'s bool) into
    `%out`'s. (With the value kept as well, LLVM keeps the last trip's masked store of bytes.)"""
    return f"""
func.func @k(%a: memref<4x{n}xf32>, %out: memref<4x{n}xi8>, %kept: memref<4x{n}xf32>)
    attributes {{xfuse.kernel, xfuse.parallel_dims = 1 : i64}} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %cn = arith.constant {n} : index
  %c31 = arith.constant 31 : i32
  %half = arith.constant 0.5 : f32
  %neg = arith.constant -2.5 : f32
  "scf.parallel"(%c0, %c4, %c1) <{{operandSegmentSizes = array<i32: 1, 1, 1, 0>}}> ({{
  ^bb0(%r: index):
    scf.for %i = %c0 to %cn step %c1 {{
      %x = memref.load %a[%r, %i] : memref<4x{n}xf32>
      %big = arith.cmpf ogt, %x, %half : f32
      %y = arith.select %big, %x, %neg : f32
      %bits = arith.bitcast %y : f32 to i32
      %sign = arith.shrui %bits, %c31 : i32
      %byte = arith.trunci %sign : i32 to i8
      memref.store %byte, %out[%r, %i] : memref<4x{n}xi8>
      memref.store %y, %kept[%r, %i] : memref<4x{n}xf32>
    }}
    scf.reduce
  }}) : (index, index, index) -> ()
  func.return
}}
"""


@pytest.mark.parametrize(("n", "masked"), [(17, False), (33, False), (34, True), (28, True)])
def test_a_narrowing_store_writes_nothing_past_its_row(n: int, masked: bool) -> None:
    """fuzz seed 93 program 2609: rows of 33 bools, the last trip a masked vector of one lane,
    which LLVM 22's X86 backend stored as 4 bytes (the unnarrowed i32) at the output's last
    byte, 3 bytes past the end of the buffer: a heap corruption found later, elsewhere. A trip
    one past whole vectors is vectorized at full width with a scalar last trip instead; the
    bytes after the output stay as they were."""
    backend = CPUBackend()
    source = parse(_narrowed_rows(n))
    ir = backend.llvm_ir(source, "k")
    assert f'!"{WIDTH}", i32 16' in ir
    assert (PREDICATE in ir) == masked
    a = torch.randn(4, n)
    memory = torch.full((4 * n + 64,), 0xAB, dtype=torch.uint8)
    out = memory[: 4 * n].view(4, n)
    kept = torch.empty(4, n)
    backend.load(backend.compile(source, "k"), "k")([a, out, kept])
    torch.testing.assert_close(kept, torch.where(a > 0.5, a, -2.5))
    assert torch.equal(out, torch.signbit(kept).to(torch.uint8))
    assert bool((memory[4 * n :] == 0xAB).all()), "the kernel wrote past its output"


def _rms_norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), eps=1e-6)


def _vector_loads(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> int:
    """How many f32 vector loads the optimized kernel of `fn` has (its one kernel), of the
    host's width (16 lanes with AVX-512, 8 with AVX2)."""
    program = xfuse.compile(fn, (x,), quiet=True)
    torch.testing.assert_close(program(x), fn(x))
    (kernel,) = program.default.program.kernels
    optimized = str(CPUBackend().optimized(parse(kernel.loop_ir), "xfuse_kernel"))
    return len(re.findall(r"= load <(?:8|16) x float>", optimized))


def test_a_long_row_keeps_its_vector_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """RMSNorm's rows of 1024: the sum of squares and the scaling loop each stay a vector
    loop of a few interleaved loads (`keep_long_rows`; 24 loads of 16 lanes in the module
    with AVX-512, its entries for a range and for threads together, 8 of 8 lanes with AVX2);
    unmarked, LLVM unrolls them further after vectorizing (with AVX-512 fully: 64 loads a
    row loop, 128 in the module; with AVX2 to 32 loads)."""
    x = torch.randn(8, 1024)
    kept = _vector_loads(_rms_norm, x)
    assert 0 < kept <= 32
    monkeypatch.setattr("xfuse.backends.cpu.keep_long_rows", lambda module: 0)
    assert _vector_loads(_rms_norm, x) >= 4 * kept
