"""Ops Inductor lowers past core aten import with no torch_call, through
`xfuse.frontend.decompositions` (torch's exact decompositions, and a few written there) or the
strided-gather converters (as_strided, unfold), and interpret and compile equal to eager."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from frontend_util import check_against_eager, op_names

import xfuse
from xfuse.frontend import import_module
from xfuse.frontend.decompositions import extra_decompositions, one_group_norm

_gen = torch.Generator().manual_seed(0)
aten = torch.ops.aten


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=_gen).to(dtype)


Case = tuple[str, Callable[..., Any], Callable[[], tuple[Any, ...]]]

CASES: list[Case] = [
    ("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), lambda: (rand(2, 4, 3), rand(4), rand(4))),
    ("native_group_norm", lambda x: aten.native_group_norm(x, None, None, 2, 6, 4, 3, 1e-5), lambda: (rand(2, 6, 2, 2),)),
    ("bilinear", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), lambda: (rand(1, 2, 3, 4),)),
    ("bilinear_aligned", lambda x: F.interpolate(x, size=(5, 3), mode="bilinear", align_corners=True), lambda: (rand(2, 1, 4, 4),)),
    ("addmv", lambda a, m, v: torch.addmv(a, m, v, beta=0.5, alpha=2), lambda: (rand(3), rand(3, 4), rand(4))),
    ("dist", lambda a, b: torch.dist(a, b, 3), lambda: (rand(4, 3), rand(3))),
    ("max_dim", lambda x: torch.max(x, 1), lambda: (torch.tensor([[1.0, 3.0, 3.0], [float("nan"), 2.0, 5.0]]),)),
    ("min_dim_keepdim", lambda x: torch.min(x, 0, keepdim=True), lambda: (rand(4, 3),)),
    ("copy", lambda x, y: aten.copy(x, y), lambda: (rand(2, 3), rand(3).double())),
    ("angle", torch.angle, lambda: (torch.tensor([-1.0, 0.0, -0.0, 2.0, float("nan"), float("-inf")]),)),
    ("ldexp", torch.ldexp, lambda: (rand(4), torch.tensor([0, 1, -2, 3]))),
    ("view_copy", lambda x: aten.view_copy(x, [3, 2]), lambda: (rand(2, 3),)),
    ("permute_copy", lambda x: aten.permute_copy(x, [1, 0, 2]), lambda: (rand(2, 3, 2),)),
    ("narrow_copy", lambda x: aten.narrow_copy(x, 1, 1, 2), lambda: (rand(2, 4),)),
    ("unbind_copy", lambda x: aten.unbind_copy(x, 1), lambda: (rand(2, 3),)),
    ("as_strided", lambda x: torch.as_strided(x, (3, 2), (1, 3), 1), lambda: (rand(3, 4),)),
    ("as_strided_overlap", lambda x: torch.as_strided(x, (4, 3), (2, 1)), lambda: (rand(10),)),
    ("as_strided_copy", lambda x: aten.as_strided_copy(x, (2, 2), (2, 1)), lambda: (rand(5),)),
    ("unfold", lambda x: x.unfold(1, 2, 1), lambda: (rand(2, 5),)),
    ("unfold_step", lambda x: x.unfold(0, 3, 2), lambda: (rand(8, 2),)),
    ("unfold_0d", lambda x: x.unfold(0, 1, 1), lambda: (rand(),)),
    ("grid_sample", lambda x, g: F.grid_sample(x, g, align_corners=False), lambda: (rand(1, 2, 4, 4), rand(1, 3, 3, 2).clamp(-1, 1))),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fn", "make"), CASES, ids=[c[0] for c in CASES])
def test_imports_without_torch_call(
    name: str, fn: Callable[..., Any], make: Callable[[], Any]
) -> None:
    imported = check_against_eager(fn, make())
    assert "graph.torch_call" not in op_names(imported)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.empty(2, 3) + 0 * x.sum(),
        lambda x: torch.empty_like(x),
        lambda x: x.new_empty_strided((2, 2), (1, 2)),
        lambda x: torch.empty_strided((3,), (1,), dtype=torch.float16),
        lambda x: torch.empty_permuted((2, 3), (1, 0)),
    ],
)
def test_empty_is_a_fresh_tensor(fn: Callable[..., Any]) -> None:
    x = rand(2, 3)
    imported = import_module(fn, (x,))
    assert "graph.torch_call" not in op_names(imported)
    got, want = xfuse.compile(fn, (x,), quiet=True)(x), fn(x)
    assert (got.shape, got.dtype) == (want.shape, want.dtype)


def test_as_strided_of_a_view_stays_with_torch() -> None:
    """A non-contiguous input's storage is not its logical order: torch keeps the op."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.as_strided(x.t(), (2, 2), (1, 2))

    x = rand(3, 2)
    assert "graph.torch_call" in op_names(import_module(fn, (x,)))
    torch.testing.assert_close(xfuse.compile(fn, (x,), quiet=True)(x), fn(x))


@pytest.mark.parametrize(
    ("name", "fn", "make"),
    [
        c
        for c in CASES
        if c[0] in {"group_norm", "bilinear", "max_dim", "unfold_step", "as_strided"}
    ],
    ids=lambda c: c if isinstance(c, str) else "",
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiles_like_eager(
    name: str, fn: Callable[..., Any], make: Callable[[], Any], dtype: torch.dtype
) -> None:
    inputs = tuple(t.to(dtype) if t.is_floating_point() else t for t in make())
    compiled = xfuse.compile(fn, inputs, quiet=True)
    got, want = compiled(*inputs), fn(*inputs)
    torch.testing.assert_close(got, want, equal_nan=True)


EDGES = [0.0, -0.0, 1.0, 2.0, -1.0, -2.5, 0.5, 1e-30, 1e-45, -1e-45, 3e38, -3e38, 1.0000001,
         1.9999999, -0.9999, -1e7 - 0.5, 171.0, 1e10, math.inf, -math.inf, math.nan]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_lgamma_over_the_range(dtype: torch.dtype) -> None:
    """Poles, zeros, signed zeros, subnormals, huge and infinite arguments, NaN, and a dense
    sweep of [-20, 20], compiled, against eager's libm `lgamma`."""
    x = torch.cat([torch.tensor(EDGES), torch.linspace(-20, 20, 4001)]).to(dtype)
    assert "graph.torch_call" not in op_names(import_module(torch.lgamma, (x,)))
    got = xfuse.compile(torch.lgamma, (x,), quiet=True)(x)
    torch.testing.assert_close(got, torch.lgamma(x), equal_nan=True)


def test_lgamma_of_integers_is_float() -> None:
    x = torch.arange(-3, 6)
    check_against_eager(torch.lgamma, (x,))


BESSEL = [torch.i0, torch.special.i1, torch.special.modified_bessel_i0, torch.special.modified_bessel_i1]  # fmt: skip


@pytest.mark.parametrize("fn", BESSEL, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_bessel_i_over_the_range(fn: Callable[..., Any], dtype: torch.dtype) -> None:
    """Both Chebyshev series and their seam at 8, overflow near 89 in f32, infinities, NaN."""
    edges = [0.0, -0.0, 1e-45, 8.0, -8.0, 8.000001, 88.0, 89.0, 92.0, -100.0, 1e30, -3e38]
    x = torch.cat(
        [torch.tensor(edges + [math.inf, -math.inf, math.nan]), torch.linspace(-30, 30, 601)]
    )
    x = x.to(dtype)
    try:
        want = fn(x)
    except NotImplementedError:
        pytest.skip("no eager kernel for this dtype")
    assert "graph.torch_call" not in op_names(import_module(fn, (x,)))
    torch.testing.assert_close(xfuse.compile(fn, (x,), quiet=True)(x), want, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_erfinv_over_the_range(dtype: torch.dtype) -> None:
    """Both first guesses and their seam at 0.7, the ill-conditioned ends near +-1, +-1
    itself, beyond it, signed zeros, subnormals, infinities, NaN."""
    edges = [0.0, -0.0, 1e-45, -1e-45, 0.7, -0.7, 0.70000005, 1.0, -1.0, 1.0000001, -2.0,
             0.99999994, -0.99999994, 0.9999999, math.inf, -math.inf, math.nan]  # fmt: skip
    x = torch.cat([torch.tensor(edges), torch.linspace(-1, 1, 4001)]).to(dtype)
    assert "graph.torch_call" not in op_names(import_module(torch.erfinv, (x,)))
    got = xfuse.compile(torch.erfinv, (x,), quiet=True)(x)
    torch.testing.assert_close(got, torch.erfinv(x), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_frexp_is_exact(dtype: torch.dtype) -> None:
    """Zeros, subnormals, the smallest normal, powers of two and their neighbours, the largest
    finite values, infinities and NaN: mantissa and exponent bit for bit."""
    edges = [0.0, -0.0, 1e-45, -1e-45, 1.17549435e-38, 1.1754942e-38, 0.5, 1.0, -1.0, 2.0,
             0.99999994, 1.0000001, 3.4028235e38, -3e38, 8.0, 7.9999995, math.inf, -math.inf,
             math.nan]  # fmt: skip
    x = torch.cat([torch.tensor(edges), rand(2000) * 1e3, rand(200) * 1e-30]).to(dtype)
    assert "graph.torch_call" not in op_names(import_module(torch.frexp, (x,)))
    mantissa, exponent = xfuse.compile(torch.frexp, (x,), quiet=True)(x)
    want = torch.frexp(x)
    torch.testing.assert_close(mantissa, want.mantissa, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(exponent, want.exponent, rtol=0, atol=0)


def test_frexp_of_f64_stays_with_torch() -> None:
    x = torch.tensor([1e-310, 3.0], dtype=torch.float64)
    assert "graph.torch_call" in op_names(import_module(torch.frexp, (x,)))


def test_a_mapped_op_is_never_decomposed() -> None:
    """A converter wins over an added decomposition of the same op."""
    from xfuse.frontend.aten import CONVERTERS
    from xfuse.frontend.importer import decomposition_table

    table = {str(op) for op in decomposition_table()}
    assert not {name for name in CONVERTERS if name in table} - {
        str(op) for op in torch.export.default_decompositions()
    }


@pytest.mark.parametrize(
    "fn", [lambda a, b: (a > 0) & (b > 0), lambda a, b: (a > 0) | (b < 0), lambda a, b: a ^ b]
)
def test_tensor_operators_are_imported_without_decomposing(fn: Callable[..., Any]) -> None:
    """`&`, `|` and `^` of tensors (`aten.__and__.Tensor`, ...) are their bitwise ops as
    torch.export gives them."""
    from xfuse.frontend.importer import needs_decomposition, wrap_function

    a, b = torch.randint(-3, 4, (3, 4)), torch.randint(-3, 4, (4,))
    assert not needs_decomposition(torch.export.export(wrap_function(fn), (a, b)))
    check_against_eager(fn, (a, b))


def _diffs(p: torch.Tensor) -> torch.Tensor:
    first = p[:, :1] - 1
    return torch.diff(p, prepend=first, dim=-1) * p.diff(dim=1, prepend=first)


def test_a_traced_diff_calls_its_symbolic_decomposition() -> None:
    """`decomposed_calls`: a traced graph's `torch.diff` calls (and the tensor method) call
    the symbolic decomposition instead, with the same values; torch.export records its ops,
    which a symbolic import reads as they are, where `aten.diff` would have the program
    decomposed. A graph without such calls is returned as it is."""
    from torch.export import Dim

    from xfuse.frontend.decompositions import decomposed_calls
    from xfuse.frontend.importer import needs_decomposition

    traced = torch.fx.symbolic_trace(_diffs)
    rewritten = decomposed_calls(traced)
    assert rewritten is not traced
    assert not [n for n in rewritten.graph.nodes if n.target in (torch.diff, "diff")]
    for n in (2, 5, 9):
        p = torch.cat([torch.arange(n // 2), torch.arange(n - n // 2)]).expand(2, n)
        torch.testing.assert_close(rewritten(p), _diffs(p))
    p, shapes = torch.arange(7).expand(2, 7), ({1: Dim("seq", min=2)},)
    original = torch.export.export(traced, (p,), dynamic_shapes=shapes)
    assert needs_decomposition(original, symbolic=True)
    exported = torch.export.export(rewritten, (p,), dynamic_shapes=shapes)
    assert not needs_decomposition(exported, symbolic=True)
    plain = torch.fx.symbolic_trace(lambda x: x + 1)
    assert decomposed_calls(plain) is plain


@pytest.mark.parametrize("shape", [(3, 8, 5, 6), (2, 4, 7), (4, 6)])
@pytest.mark.parametrize("affine", [True, False])
def test_one_group_norm_reduces_over_the_inputs_dims(shape: tuple[int, ...], affine: bool) -> None:
    """The one-group decomposition off the CPU (statistics over dims 1 and after, no reshape)
    gives eager's output, mean and rstd, in f64."""
    x = torch.randn(shape, dtype=torch.float64)
    c = shape[1]
    w, b = (torch.randn(c, dtype=torch.float64), torch.randn(c, dtype=torch.float64))
    weight, bias = (w, b) if affine else (None, None)
    inner = math.prod(shape[2:])
    want = aten.native_group_norm(x, weight, bias, shape[0], c, inner, 1, 1e-5)
    got = one_group_norm(x, weight, bias, 1e-5)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e)


def test_group_norm_decomposes_with_one_group_off_the_cpu_only() -> None:
    """On a device other than the CPU (here `meta`) one group reduces over the input's dims;
    two groups, and the CPU, keep torch's decomposition (a reshape to [N, G, C/G, H*W])."""
    decompose = extra_decompositions()[aten.native_group_norm.default]
    for device, groups, reshapes in (("meta", 1, False), ("meta", 2, True), ("cpu", 1, True)):
        x = torch.randn(2, 4, 3, 3, device=device)
        norm = functools.partial(decompose, groups=groups, eps=1e-5)
        graph = torch.fx.experimental.proxy_tensor.make_fx(norm)(x, None, None, 2, 4, 9).graph
        grouped = (2, groups, 4 // groups, 9)
        vals = [n.meta.get("val") for n in graph.nodes]
        shapes = {tuple(v.shape) for v in vals if isinstance(v, torch.Tensor)}
        assert (grouped in shapes) == reshapes, (device, groups, shapes)


def test_each_symbolic_decomposition_names_its_op_and_torch_function() -> None:
    """`SYMBOLIC_DECOMPOSITIONS`: each entry's op exists in this torch and its torch function
    (whose name is also the tensor method `decomposed_calls` retargets) is the op's; the
    importer's table has each decomposition by that op."""
    from xfuse.frontend.decompositions import SYMBOLIC_DECOMPOSITIONS, symbolic_decompositions

    table = symbolic_decompositions()
    for entry in SYMBOLIC_DECOMPOSITIONS:
        _, op, overload = entry.op.split(".")
        assert entry.function.__name__ == op
        assert table[getattr(getattr(torch.ops.aten, op), overload)] is entry.decomposition
