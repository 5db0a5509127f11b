"""Decompositions the importer adds to torch.export's core-aten table, so that what Inductor
lowers is imported as graph ops too.

torch.export's default table stops at core aten, so ops such as `native_group_norm`,
`upsample_bilinear2d` or `empty` reach the importer whole and would run eagerly. Inductor
decomposes them (or lowers them directly); xfuse does the same here, into aten ops the importer
maps:

- `TORCH_DECOMPOSED`: ops whose decomposition in torch's own tables (`torch._decomp`, the one
  Inductor uses) is exact and built of mapped ops;
- `OWN_DECOMPOSITIONS`: the few with no such entry, written here (each as Inductor lowers it).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

aten = torch.ops.aten

TORCH_DECOMPOSED: tuple[str, ...] = (
    "aten.upsample_bilinear2d.vec",
    "aten.upsample_bilinear2d.default",
    "aten.addmv.default",
    "aten.dist.default",
    "aten.view_copy.default",
    "aten.permute_copy.default",
    "aten.narrow_copy.default",
    "aten.unbind_copy.int",
    "aten.as_strided_copy.default",
    "aten.ldexp.Tensor",
    "aten.max_pool2d_with_indices_backward.default",
    "aten.grid_sampler_2d.default",
)


def _empty(*args: Any, **kwargs: Any) -> torch.Tensor:
    """empty/empty_permuted: a fresh tensor whose values are undefined; zeros are such values
    (no memory is read that the program did not write)."""
    size = args[0]
    return torch.zeros(
        size, dtype=kwargs.get("dtype"), device=kwargs.get("device"), layout=kwargs.get("layout")
    )


def _new_empty(x: torch.Tensor, size: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
    """new_empty_strided: `_empty` in `x`'s dtype unless one is given."""
    return torch.zeros(size, dtype=kwargs.get("dtype") or x.dtype, device=x.device)


def _reduce_with_index(values: Any, index: Any) -> Callable[..., Any]:
    """max.dim / min.dim: the extreme value and the index of its first occurrence (NaN counts
    as the extreme, as eager's kernel has it), as amax/argmax do."""

    def decompose(x: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[Any, Any]:
        keys = x.to(torch.int32) if x.dtype == torch.bool else x  # argmax takes no bool
        return values(x, [dim], keepdim), index(keys, dim, keepdim)

    return decompose


def _copy(x: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """Functional copy: `src` broadcast to `x`'s shape in `x`'s dtype."""
    return aten.expand.default(aten._to_copy.default(src, dtype=x.dtype), list(x.shape)).clone()


def _angle(x: torch.Tensor) -> Any:
    """The argument of a real number: pi below 0, NaN for NaN, else 0 (Inductor's)."""
    if x.is_complex():
        return NotImplemented
    dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    pi = torch.scalar_tensor(math.pi, dtype=dtype, device=x.device)
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=x.device)
    return torch.where(torch.isnan(x), x.to(dtype), torch.where(x < 0, pi, zero))


LANCZOS_G = 7.0
LANCZOS = (
    0.99999999999980993,
    676.5203681218851,
    -1259.1392167224028,
    771.32342877765313,
    -176.61502916214059,
    12.507343278686905,
    -0.13857109526572012,
    9.9843695780195716e-6,
    1.5056327351493116e-7,
)
"""Lanczos's coefficients for g = 7, n = 9: Gamma to about 1e-15 relative error."""


def _lgamma(x: torch.Tensor) -> torch.Tensor:
    """log|Gamma(x)| (Inductor lowers it to libm's `lgamma`): Lanczos's series in f64 for
    x >= 1/2, the reflection `log(pi / |sin(pi x)|) - lgamma(1 - x)` below (sin of the exact
    distance to the nearest integer, so poles give +inf), rounded to the result's dtype; +inf
    at +-inf, NaN at NaN."""
    dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    y = x.to(torch.float64)
    small = y < 0.5
    z = torch.where(small, 1.0 - y, y) - 1.0
    series = torch.full_like(z, LANCZOS[0])
    for k, c in enumerate(LANCZOS[1:], start=1):
        series = series + c / (z + k)
    t = z + (LANCZOS_G + 0.5)
    large = 0.5 * math.log(2 * math.pi) + (z + 0.5) * torch.log(t) - t + torch.log(series)
    sine = torch.abs(torch.sin(math.pi * (y - torch.round(y))))
    reflected = torch.log(math.pi / sine) - large
    value = torch.where(small, reflected, large)
    return torch.where(torch.isinf(y), math.inf, value).to(dtype)


# Cephes's Chebyshev coefficients (ATen's Math.h, `modified_bessel_i0/i1_forward`; see its
# note on Cephes's 3-clause BSD licence): exp(-x) I(x) on [0, 8], exp(-x) sqrt(x) I(x) on
# the inverted interval [8, inf).
I0_A = (
    -4.4153416464793395e-18,
    3.3307945188222384e-17,
    -2.431279846547955e-16,
    1.715391285555133e-15,
    -1.1685332877993451e-14,
    7.676185498604936e-14,
    -4.856446783111929e-13,
    2.95505266312964e-12,
    -1.726826291441556e-11,
    9.675809035373237e-11,
    -5.189795601635263e-10,
    2.6598237246823866e-09,
    -1.300025009986248e-08,
    6.046995022541919e-08,
    -2.670793853940612e-07,
    1.1173875391201037e-06,
    -4.4167383584587505e-06,
    1.6448448070728896e-05,
    -5.754195010082104e-05,
    0.00018850288509584165,
    -0.0005763755745385824,
    0.0016394756169413357,
    -0.004324309995050576,
    0.010546460394594998,
    -0.02373741480589947,
    0.04930528423967071,
    -0.09490109704804764,
    0.17162090152220877,
    -0.3046826723431984,
    0.6767952744094761,
)
"""exp(-x) I0(x) on [0, 8], in (x / 2 - 2)."""

I0_B = (
    -7.233180487874754e-18,
    -4.830504485944182e-18,
    4.46562142029676e-17,
    3.461222867697461e-17,
    -2.8276239805165836e-16,
    -3.425485619677219e-16,
    1.7725601330565263e-15,
    3.8116806693526224e-15,
    -9.554846698828307e-15,
    -4.150569347287222e-14,
    1.54008621752141e-14,
    3.8527783827421426e-13,
    7.180124451383666e-13,
    -1.7941785315068062e-12,
    -1.3215811840447713e-11,
    -3.1499165279632416e-11,
    1.1889147107846439e-11,
    4.94060238822497e-10,
    3.3962320257083865e-09,
    2.266668990498178e-08,
    2.0489185894690638e-07,
    2.8913705208347567e-06,
    6.889758346916825e-05,
    0.0033691164782556943,
    0.8044904110141088,
)
"""exp(-x) sqrt(x) I0(x) on [8, inf), in (32 / x - 2)."""

I1_A = (
    2.7779141127610464e-18,
    -2.111421214358166e-17,
    1.5536319577362005e-16,
    -1.1055969477353862e-15,
    7.600684294735408e-15,
    -5.042185504727912e-14,
    3.223793365945575e-13,
    -1.9839743977649436e-12,
    1.1736186298890901e-11,
    -6.663489723502027e-11,
    3.625590281552117e-10,
    -1.8872497517228294e-09,
    9.381537386495773e-09,
    -4.445059128796328e-08,
    2.0032947535521353e-07,
    -8.568720264695455e-07,
    3.4702513081376785e-06,
    -1.3273163656039436e-05,
    4.781565107550054e-05,
    -0.00016176081582589674,
    0.0005122859561685758,
    -0.0015135724506312532,
    0.004156422944312888,
    -0.010564084894626197,
    0.024726449030626516,
    -0.05294598120809499,
    0.1026436586898471,
    -0.17641651835783406,
    0.25258718644363365,
)
"""exp(-x) I1(x) / x on [0, 8]."""

I1_B = (
    7.517296310842105e-18,
    4.414348323071708e-18,
    -4.6503053684893586e-17,
    -3.209525921993424e-17,
    2.96262899764595e-16,
    3.3082023109209285e-16,
    -1.8803547755107825e-15,
    -3.8144030724370075e-15,
    1.0420276984128802e-14,
    4.272440016711951e-14,
    -2.1015418427726643e-14,
    -4.0835511110921974e-13,
    -7.198551776245908e-13,
    2.0356285441470896e-12,
    1.4125807436613782e-11,
    3.2526035830154884e-11,
    -1.8974958123505413e-11,
    -5.589743462196584e-10,
    -3.835380385964237e-09,
    -2.6314688468895196e-08,
    -2.512236237870209e-07,
    -3.882564808877691e-06,
    -0.00011058893876262371,
    -0.009761097491361469,
    0.7785762350182801,
)
"""exp(-x) sqrt(x) I1(x) on [8, inf)."""


def _chbevl(y: torch.Tensor, coefficients: tuple[float, ...]) -> torch.Tensor:
    """Cephes's Chebyshev series sum (Clenshaw's recurrence), as ATen's `chbevl`."""
    b0, b1, b2 = torch.full_like(y, coefficients[0]), torch.zeros_like(y), torch.zeros_like(y)
    for c in coefficients[1:]:
        b2, b1 = b1, b0
        b0 = y * b1 - b2 + c
    return 0.5 * (b0 - b2)


def _bessel_i(order: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """I0 / I1, the modified Bessel functions of the first kind (i0, special.i1,
    special.modified_bessel_i0/i1), as ATen computes them: Cephes's two Chebyshev series, in
    f32 for f32 and narrower inputs (eager upcasts f16/bf16 to f32) and f64 for f64."""
    a_table, b_table = (I0_A, I0_B) if order == 0 else (I1_A, I1_B)

    def decompose(x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        compute = torch.float64 if dtype == torch.float64 else torch.float32
        ax = torch.abs(x.to(compute))
        near = _chbevl(ax / 2.0 - 2.0, a_table)
        far = _chbevl(32.0 / ax - 2.0, b_table) / torch.sqrt(ax)
        if order == 1:
            near = near * ax
        value = torch.exp(ax) * torch.where(ax <= 8.0, near, far)
        if order == 1:
            value = torch.where(x < 0, -value, value)
        return value.to(dtype)

    return decompose


def _poly(z: torch.Tensor, coefficients: tuple[float, ...]) -> torch.Tensor:
    """Horner's rule, highest coefficient first."""
    value = torch.full_like(z, coefficients[0])
    for c in coefficients[1:]:
        value = value * z + c
    return value


def _erfinv(y: torch.Tensor) -> torch.Tensor:
    """The inverse error function as ATen's `calc_erfinv` (and Inductor's lowering of it):
    a rational first guess (central for |y| <= 0.7, a tail one in sqrt(-log((1 - |y|) / 2))
    otherwise), two Newton steps on erf, +-inf at +-1 and NaN beyond. Always in f64: near +-1
    f32 Newton steps stall on erf's rounding (eager's f32 kernel is correctly rounded there)."""
    dtype = y.dtype if y.is_floating_point() else torch.get_default_dtype()
    y = y.to(torch.float64)
    a = torch.abs(y)
    z = y * y
    central = y * _poly(z, (-0.140543331, 0.914624893, -1.645349621, 0.886226899))
    central = central / _poly(z, (0.012229801, -0.329097515, 1.442710462, -2.118377725, 1.0))
    t = torch.sqrt(-torch.log((1.0 - a) / 2.0))
    tail = torch.copysign(_poly(t, (1.641345311, 3.429567803, -1.624906493, -1.970840454)), y)
    tail = tail / _poly(t, (1.637067800, 3.543889200, 1.0))
    x = torch.where(a <= 0.7, central, tail)
    for _ in range(2):
        x = x - (torch.erf(x) - y) / ((2.0 / math.sqrt(math.pi)) * torch.exp(-x * x))
    x = torch.where(a == 1.0, torch.copysign(torch.full_like(y, math.inf), y), x)
    return torch.where(a > 1.0, math.nan, x).to(dtype)


def _frexp(x: torch.Tensor) -> Any:
    """(mantissa, exponent) with x = m * 2**e and 1/2 <= |m| < 1 (m = x, e = 0 for zeros,
    infinities and NaN), for f32 and narrower inputs: the exponent from log2 in f64, then moved
    by one where log2 rounded across a power of two; the scaling by 2**-e is exact in f64."""
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return NotImplemented  # an f64 subnormal's 2**-e overflows f64: torch keeps it
    y = x.to(torch.float64)
    a = torch.abs(y)
    regular = (a > 0) & torch.isfinite(y)
    e = torch.where(regular, torch.floor(torch.log2(torch.where(regular, a, 1.0))) + 1, 0.0)
    m = torch.abs(y * torch.exp2(-e))
    e = torch.where(regular & (m >= 1.0), e + 1, torch.where(regular & (m < 0.5), e - 1, e))
    m = torch.where(regular, y * torch.exp2(-e), y)
    return m.to(x.dtype), e.to(torch.int32)


def _group_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    batch: int,
    channels: int,
    inner: int,
    groups: int,
    eps: float,
) -> Any:
    """native_group_norm as torch's decomposition computes it off the CPU, except that with one
    group the statistics reduce over the input's own dims instead of over its `[N, 1, C, H*W]`
    reshape: `channels-last` moves a reduction's dims onto NHWC memory, not a reshape's, so a
    GroupNorm(1, C) of an NHWC activation (PoolFormer's, MetaFormer's) reads it in memory order.
    Other group counts, and the CPU (whose decomposition folds the statistics into one scale and
    shift per channel), decompose as torch's."""
    from torch._decomp import decomposition_table

    if groups != 1 or x.device.type == "cpu":
        torch_decomposition = decomposition_table[aten.native_group_norm.default]
        return torch_decomposition(x, weight, bias, batch, channels, inner, groups, eps)
    return one_group_norm(x, weight, bias, eps)


def one_group_norm(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """native_group_norm with one group, its statistics reduced over `x`'s dims 1 and after."""
    from torch._prims_common import get_computation_dtype

    acc = x.to(get_computation_dtype(x.dtype))
    var, mean = torch.var_mean(acc, dim=list(range(1, x.ndim)), unbiased=False, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    out = (acc - mean) * rstd
    per_channel = [1, x.shape[1]] + [1] * (x.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    stats = [x.shape[0], 1]
    return out.to(x.dtype), mean.to(x.dtype).reshape(stats), rstd.to(x.dtype).reshape(stats)


OWN_DECOMPOSITIONS: dict[str, Callable[..., Any]] = {
    "aten.native_group_norm.default": _group_norm,
    "aten.empty.memory_format": _empty,
    "aten.empty_permuted.default": _empty,
    "aten.empty_strided.default": _empty,
    "aten.new_empty_strided.default": _new_empty,
    "aten.max.dim": _reduce_with_index(aten.amax.default, aten.argmax.default),
    "aten.min.dim": _reduce_with_index(aten.amin.default, aten.argmin.default),
    "aten.copy.default": _copy,
    "aten.angle.default": _angle,
    "aten.lgamma.default": _lgamma,
    "aten.erfinv.default": _erfinv,
    "aten.frexp.Tensor": _frexp,
    "aten.i0.default": _bessel_i(0),
    "aten.special_i1.default": _bessel_i(1),
    "aten.special_modified_bessel_i0.default": _bessel_i(0),
    "aten.special_modified_bessel_i1.default": _bessel_i(1),
}


def _diff_keeping_size(
    x: torch.Tensor,
    n: int = 1,
    dim: int = -1,
    prepend: torch.Tensor | None = None,
    append: torch.Tensor | None = None,
) -> Any:
    """`torch.diff(x, dim=dim, prepend=p)` with one element prepended, as an op of `x`'s own
    shape: element i is `x[i] - x[i - 1]`, and `x[0] - p` at 0, where the previous elements are
    `x` gathered at `max(i - 1, 0)` (torch's decomposition concatenates `p` and slices the
    result by the symbolic size, which a symbolic import cannot hold). Other forms decompose
    as torch's."""
    one = prepend is not None and append is None and n == 1 and prepend.shape[dim] == 1
    if not one:
        return aten.diff.default.decompose(x, n, dim, prepend, append)
    assert prepend is not None
    dim = dim % x.dim()
    count = x.shape[dim]
    positions = torch.arange(count, device=x.device)
    earlier = torch.clamp(positions - 1, min=0)
    previous = aten.index.Tensor(x, [None] * dim + [earlier])
    first = (positions == 0).reshape([count] + [1] * (x.dim() - dim - 1))
    previous = torch.where(first, prepend.to(x.dtype), previous)
    return x - previous if x.dtype != torch.bool else torch.logical_xor(x, previous)


@dataclass(frozen=True)
class SymbolicDecomposition:
    """A decomposition a symbolic import uses in place of torch's, for the aten op `op`
    (`aten.op.overload`) and for the calls of its torch function `function` (and of the tensor
    method of its name) in a graph dynamo traced."""

    op: str
    function: Callable[..., Any]
    decomposition: Callable[..., Any]


SYMBOLIC_DECOMPOSITIONS: tuple[SymbolicDecomposition, ...] = (
    SymbolicDecomposition("aten.diff.default", torch.diff, _diff_keeping_size),
)
"""Decompositions a symbolic import uses in place of torch's, whose results keep their sizes
(no slice by a symbolic size): transformers' packed-sequence ids take a `diff` of the
positions with one element prepended. The importer's table has them by op
(`symbolic_decompositions`); `decomposed_calls` has a traced graph call them where it calls
their torch functions."""


def decomposed_calls(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` (a graph dynamo traced) calling the decompositions of `SYMBOLIC_DECOMPOSITIONS`
    where it calls their torch functions (or the tensor methods of their names): torch.export
    then records the decompositions' ops, which the importer reads as they are, where the op
    itself would have the whole program decomposed (a second trace of it,
    `run_decompositions`); a form of the op that its decomposition leaves to torch reaches
    the export whole, and is decomposed there. `gm` itself where it calls none, else a copy
    whose graph has those calls retargeted."""
    if not any(_decomposition_called(n) for n in gm.graph.nodes):
        return gm
    graph = copy.deepcopy(gm.graph)
    for node in graph.nodes:
        decomposition = _decomposition_called(node)
        if decomposition is not None:
            args, kwargs = node.args, dict(node.kwargs)
            if "input" in kwargs:  # torch.diff(input=x): the decomposition's first argument
                args = (kwargs.pop("input"), *args)
            node.op, node.target = "call_function", decomposition
            node.args, node.kwargs = args, kwargs
    return torch.fx.GraphModule(gm, graph)


def _decomposition_called(node: torch.fx.Node) -> Callable[..., Any] | None:
    """The decomposition of `SYMBOLIC_DECOMPOSITIONS` that a node calling one of its torch
    functions (or the tensor method of that name) calls instead, else None."""
    for entry in SYMBOLIC_DECOMPOSITIONS:
        if node.op == "call_function" and node.target is entry.function:
            return entry.decomposition
        if node.op == "call_method" and node.target == entry.function.__name__:
            return entry.decomposition
    return None


def _overload(name: str) -> torch._ops.OpOverload | None:
    """`aten.op.overload`'s OpOverload, None where this torch has no such op."""
    _, op, overload = name.split(".")
    return getattr(getattr(aten, op, None), overload, None)


def symbolic_decompositions() -> dict[torch._ops.OpOverload, Callable[..., Any]]:
    """`SYMBOLIC_DECOMPOSITIONS` by overload."""
    table: dict[torch._ops.OpOverload, Callable[..., Any]] = {}
    for entry in SYMBOLIC_DECOMPOSITIONS:
        op = _overload(entry.op)
        if op is not None:
            table[op] = entry.decomposition
    return table


def extra_decompositions() -> dict[torch._ops.OpOverload, Callable[..., Any]]:
    """The decompositions added to torch.export's table, by overload."""
    from torch._decomp import decomposition_table

    # torch's table differs between releases (2.11 has no decomposition of
    # max_pool2d_with_indices_backward): an op this torch lacks, or has no decomposition of,
    # stays as it is (a torch_call).
    table: dict[torch._ops.OpOverload, Callable[..., Any]] = {}
    for name in TORCH_DECOMPOSED:
        op = _overload(name)
        if op is not None and op in decomposition_table:
            table[op] = decomposition_table[op]
    for name, fn in OWN_DECOMPOSITIONS.items():
        op = _overload(name)
        if op is not None:
            table[op] = fn
    return table
