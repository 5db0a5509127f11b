"""`expand-math`: f32 math functions as arith, accurate against torch over the whole f32 range."""

from __future__ import annotations

import pytest
import torch
from xdsl.dialects import math

from xfuse.backends.cpu import CPUBackend
from xfuse.backends.threadpool import RangePool
from xfuse.ir.context import parse
from xfuse.passes.llvm.expand_math import EXPANSIONS, expand_math


def unary_f32(op: str, n: int) -> str:
    """A kernel computing out[i] = op(x[i]) over n f32 elements (loop IR, docs/contracts.md)."""
    return f"""builtin.module {{
  func.func @k(%x: memref<{n}xf32>, %out: memref<{n}xf32>) attributes {{xfuse.kernel, xfuse.parallel_dims = 1 : i64}} {{
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cn = arith.constant {n} : index
    "scf.parallel"(%c0, %cn, %c1) <{{operandSegmentSizes = array<i32: 1, 1, 1, 0>}}> ({{
    ^bb0(%i: index):
      %a = memref.load %x[%i] : memref<{n}xf32>
      %e = {op} %a : f32
      memref.store %e, %out[%i] : memref<{n}xf32>
      scf.reduce
    }}) : (index, index, index) -> ()
    func.return
  }}
}}"""


FUNCTIONS = {
    "math.exp": torch.exp,
    "math.exp2": torch.exp2,
    "math.expm1": torch.expm1,
    "math.log": torch.log,
    "math.log2": torch.log2,
    "math.log1p": torch.log1p,
    "math.tanh": torch.tanh,
    "math.erf": torch.erf,
    "math.sin": torch.sin,
    "math.cos": torch.cos,
    "math.erfc": torch.erfc,  # accurate where 1 - erf cancels (up to 10.05)
}

SPECIAL_VALUES = [
    0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-45, -1e-45, 1e-40, -1e-40,
    1.17549435e-38, 3.4028235e38, -3.4028235e38, 88.72, 88.73, -87.3, -103.9, -104.0, 1.0, -1.0,
    0.5, 0.625, -0.625, 0.927734375, 2.4e-4, 1e-7, -1e-7, 1e30, -1e30, 16777216.0, 1e10, 3.14159265,
]  # fmt: skip


def wide_inputs() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    magnitudes = torch.exp2(torch.rand(60000, generator=g) * 276 - 149)  # 2^-149 .. 2^127
    signs = torch.where(torch.rand(60000, generator=g) < 0.5, -1.0, 1.0)
    return torch.cat(
        [
            torch.linspace(-12, 12, 48001),
            torch.randn(20000, generator=g) * 100,
            magnitudes * signs,
            torch.tensor(SPECIAL_VALUES),
        ]
    ).float()


def ulp_error(got: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """|got - exact| in units of the last place of the f32 nearest `exact` (finite ones only)."""
    rounded = exact.float()
    spacing = (torch.nextafter(rounded, torch.full_like(rounded, float("inf"))) - rounded).abs()
    spacing = spacing.clamp_min(torch.finfo(torch.float32).tiny * 2**-23)
    error = (got.double() - exact).abs() / spacing.double()
    both_finite = torch.isfinite(exact) & torch.isfinite(got)
    return torch.where(both_finite & torch.isfinite(rounded), error, torch.zeros_like(error))


@pytest.fixture(scope="module")
def backend() -> CPUBackend:
    return CPUBackend(pool=RangePool(threads=1))


@pytest.mark.parametrize("op", FUNCTIONS)
def test_expansion_matches_torch(backend: CPUBackend, op: str) -> None:
    x = wide_inputs()
    kernel = backend.load(backend.compile(parse(unary_f32(op, x.numel())), "k"), "k")
    out = torch.empty_like(x)
    kernel([x, out])
    reference = FUNCTIONS[op]
    torch.testing.assert_close(out, reference(x), equal_nan=True)
    assert ulp_error(out, reference(x.double())).max() <= 4.0


@pytest.mark.parametrize("op", FUNCTIONS)
def test_expansion_leaves_no_call(op: str) -> None:
    module = parse(unary_f32(op, 16))
    expand_math(module)
    names = {o.name for o in module.walk()}
    assert op not in names
    assert names <= {"builtin.module", "func.func", "func.return", "scf.parallel", "scf.reduce",
                     "memref.load", "memref.store", "math.floor", "math.roundeven", "math.absf",
                     "math.copysign"} | {n for n in names if n.startswith("arith.")}  # fmt: skip


def test_every_expansion_is_tested() -> None:
    tested = {o for o in FUNCTIONS}
    assert {cls.name for cls in EXPANSIONS} == tested


def test_f64_math_is_left_alone() -> None:
    module = parse(unary_f32("math.exp", 4).replace("f32", "f64"))
    expand_math(module)
    assert any(isinstance(o, math.ExpOp) for o in module.walk())


def test_expanded_loop_vectorizes(backend: CPUBackend) -> None:
    ir = str(backend.optimized(parse(unary_f32("math.tanh", 1024)), "k"))
    assert "x float>" in ir  # a vector type: the loop vectorizer took the loop
    assert "@tanhf" not in ir and "@expf" not in ir
