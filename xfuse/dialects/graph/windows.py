"""Window ops: padding (constant, reflect, replicate), pooling (windowed reductions) and the
patches of a convolution's windows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, opt_prop_def, prop_def, traits_def
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from xfuse.dialects.facts import Fuzz, OpFacts
from xfuse.dialects.graph.base import (
    Dim,
    Injective,
    OneTensorOp,
    _check_counts,
    _check_float,
    _check_numeric,
    _check_result_shape,
    _i64_array,
    _ints,
    dims_of,
    dtype_of,
    fmt_shape,
    is_float,
    shape_of,
    size_table,
)
from xfuse.dialects.graph.sizes import SizeExpr

# ---------------------------------------------------------------------------------------------
# Padding
# ---------------------------------------------------------------------------------------------


PAD_MODES = ("constant", "reflect", "replicate")


@irdl_op_definition
class PadOp(OneTensorOp):
    """Padding by `low` / `high` elements per dim (negative: cropping): with the element
    `value` (`mode = "constant"`), the input mirrored without repeating the edge (`"reflect"`)
    or its edge repeated (`"replicate"`). Never reads outside the input. A symbolic dim padded
    (with a constant only) has a size symbol of the function's table as its result dim, whose
    polynomial is the input's symbol plus `low + high` (`graph.size_dim` makes it); one not
    padded keeps its symbol. A dim of `open_high` (constant padding only, its `high` 0) is
    padded at the end by a size of the call: up to its result dim, whatever that is at the
    call (a window's padding to a multiple of 7, `(7 - w % 7) % 7`, makes `7 * ceil(w / 7)`).
    `%y = graph.pad %x low = [0, 1] high = [0, -1] mode = "constant" value = 0.0 : f64 : tensor<4x8xf32> -> tensor<4x8xf32>`"""

    name = "graph.pad"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=(
            "aten.constant_pad_nd.default",
            "aten.reflection_pad1d.default",
            "aten.reflection_pad2d.default",
            "aten.reflection_pad3d.default",
            "aten.replication_pad1d.default",
            "aten.replication_pad2d.default",
            "aten.replication_pad3d.default",
        ),
        fuzz=Fuzz.drawn_by("pad"),
        without={"scalar": "lower-to-loops emits it: a clamped or reflected index, a select"},
    )
    low = prop_def(DenseArrayBase[I64])
    high = prop_def(DenseArrayBase[I64])
    mode = prop_def(StringAttr)
    value = prop_def(FloatAttr)
    open_high = opt_prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Injective())
    assembly_format = (
        "$input `low` `=` $low `high` `=` $high (`open_high` `=` $open_high^)? `mode` `=` $mode "
        "`value` `=` $value attr-dict `:` type($input) `->` type($result)"
    )
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(
        self,
        input: SSAValue | Operation,
        low: Sequence[int],
        high: Sequence[int],
        mode: str = "constant",
        value: float = 0.0,
        dims: Sequence[Dim] | None = None,
        open_high: Sequence[int] = (),
    ):
        """`dims`, the result's dims, where a symbolic dim is padded (its symbol there) or a
        dim is padded by a size of the call (`open_high`)."""
        input = SSAValue.get(input)
        super().__init__(
            input,
            pad_shape(dims_of(input), low, high) if dims is None else dims,
            low=_i64_array(low),
            high=_i64_array(high),
            mode=StringAttr(mode),
            value=FloatAttr(float(value), Float64Type()),
            open_high=_i64_array(sorted(set(open_high))) if open_high else None,
        )

    @property
    def pads(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return _ints(self.low), _ints(self.high)

    @property
    def open_dims(self) -> tuple[int, ...]:
        """The dims padded at the end up to the result's size (`open_high`)."""
        return () if self.open_high is None else _ints(self.open_high)

    def padded_dims(self) -> tuple[bool, ...]:
        """Per dim, whether it is padded or cropped at all."""
        (low, high), opened = self.pads, self.open_dims
        return tuple(
            lo != 0 or hi != 0 or i in opened
            for i, (lo, hi) in enumerate(zip(low, high, strict=True))
        )

    @property
    def fill(self) -> float:
        return self.value.value.data

    def verify_(self) -> None:
        t = self._check_tensors()
        dims, (low, high) = dims_of(self.input), self.pads
        _check_counts(len(dims), "the operand's rank", low=low, high=high)
        mode = self.mode.data
        if mode not in PAD_MODES:
            raise VerifyException(f'expected mode in {list(PAD_MODES)}, found "{mode}"')
        expected = list(pad_shape(dims, low, high))
        found, opened = dims_of(self.result), self.open_dims
        for i in opened:
            if not 0 <= i < len(dims) or high[i] != 0 or mode != "constant":
                raise VerifyException(
                    f"expected open_high dims of constant padding, with high 0, found dim {i}"
                )
            expected[i] = found[i] if len(found) > i else -1  # the call's size decides it
        for i, (n, lo, hi) in enumerate(zip(dims, low, high, strict=True)):
            if i in opened:
                continue
            if isinstance(n, str):
                if lo != 0 or hi != 0:
                    expected[i] = self._padded_symbol(i, n, lo + hi)
                continue
            if n + lo + hi < 0:
                raise VerifyException(f"expected a size >= 0 in dim {i}, found {n + lo + hi}")
            if mode == "reflect" and (lo >= n or hi >= n) and (lo > 0 or hi > 0):
                raise VerifyException(
                    f"expected reflect padding below the size {n} of dim {i}, found {lo}, {hi}"
                )
            if mode == "replicate" and n == 0 and (lo > 0 or hi > 0):
                raise VerifyException(f"expected a non-empty dim {i} to replicate")
        if not isinstance(self.value.type, Float64Type):
            raise VerifyException(f"expected an f64 value, found {self.value.type}")
        fill = self.fill
        if not is_float(t.element_type) and fill == fill and fill != int(fill):
            raise VerifyException(f"expected an integral value for {t.element_type}, found {fill}")
        _check_result_shape(self, tuple(expected))

    def _padded_symbol(self, i: int, symbol: str, extra: int) -> Dim:
        """The result dim `i` of symbolic input dim `symbol` padded by `extra` elements in
        all: a symbol whose polynomial is `symbol + extra` for every size."""
        if self.mode.data != "constant":
            raise VerifyException(
                f"expected constant padding of dim {i}, size symbol '{symbol}', found mode "
                f'"{self.mode.data}"'
            )
        found = dims_of(self.result)
        total = SizeExpr.symbol(symbol) + SizeExpr.constant(extra)
        table = size_table(self)
        if (
            len(found) <= i
            or table is None
            or table.expand(total) != table.expand(SizeExpr.dim(found[i]))
        ):
            at = found[i] if len(found) > i else "none"
            raise VerifyException(
                f"expected result dim {i} of size {total}, found {at} (not equal for every "
                "size of its symbol)"
            )
        return found[i]


def pad_shape(dims: Sequence[Dim], low: Sequence[int], high: Sequence[int]) -> tuple[Dim, ...]:
    """A pad's result dims: a size symbol not padded stays itself; one padded is a dynamic
    dim without its symbol (-1), which `PadOp` takes from its `dims`."""
    return tuple(
        (n if lo == hi == 0 else -1) if isinstance(n, str) else n + lo + hi
        for n, lo, hi in zip(dims, low, high, strict=True)
    )


# ---------------------------------------------------------------------------------------------
# Pooling and patches
# ---------------------------------------------------------------------------------------------


POOL_KINDS = ("max", "avg", "argmax")


@irdl_op_definition
class PoolOp(OneTensorOp):
    """Max, average or argmax over windows of the trailing `len(kernel)` dims (1 to 3), torch's
    max_pool / avg_pool: window `o` of a dim starts at `o * stride - padding` and takes `kernel`
    elements `dilation` apart; elements outside the input are skipped (max propagates NaN). An
    output one longer than the floor formula is torch's ceil_mode. Average divides by
    `divisor`, else by the window's size clipped to the padded input (`count_include_pad`) or
    to the input. Argmax is max_pool's indices (i64): the row-major position in the window
    dims of the first maximum, or of the last NaN. With `adaptive` (torch's adaptive pools),
    window `o` of a dim of size `n` pooled to `m` is [floor(o * n / m), ceil((o + 1) * n / m)),
    `kernel` is the largest of them, the stride 1 and the padding 0.
    `%y = graph.pool %x kind = "max" kernel = [3, 3] stride = [2, 2] padding = [1, 1] dilation = [1, 1] : tensor<1x4x9x9xf32> -> tensor<1x4x5x5xf32>`"""

    name = "graph.pool"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=(
            "aten.max_pool2d_with_indices.default",
            "aten.max_pool3d_with_indices.default",
            "aten.avg_pool2d.default",
            "aten.avg_pool3d.default",
            "aten._adaptive_avg_pool2d.default",
            "aten._adaptive_avg_pool3d.default",
            "aten.adaptive_max_pool2d.default",
            "aten.adaptive_max_pool3d.default",
        ),
        fuzz=Fuzz.drawn_by("pool"),
        without={"scalar": "lower-to-loops emits it: the window unrolled or an scf.for nest"},
    )
    kind = prop_def(StringAttr)
    kernel = prop_def(DenseArrayBase[I64])
    stride = prop_def(DenseArrayBase[I64])
    padding = prop_def(DenseArrayBase[I64])
    dilation = prop_def(DenseArrayBase[I64])
    count_include_pad = opt_prop_def(UnitAttr)
    divisor = opt_prop_def(IntegerAttr[I64])
    adaptive = opt_prop_def(UnitAttr)
    traits = traits_def(Pure(), Injective())
    assembly_format = (
        "$input `kind` `=` $kind `kernel` `=` $kernel `stride` `=` $stride `padding` `=` "
        "$padding `dilation` `=` $dilation (`adaptive` $adaptive^)? "
        "(`count_include_pad` $count_include_pad^)? "
        "(`divisor` `=` $divisor^)? attr-dict `:` type($input) `->` type($result)"
    )

    def __init__(
        self,
        input: SSAValue | Operation,
        kind: str,
        kernel: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor: int | None = None,
        adaptive: Sequence[int] | None = None,
    ):
        """`adaptive`: the output sizes of an adaptive pool (kernel and the rest follow)."""
        input = SSAValue.get(input)
        shape = shape_of(input)
        n = len(kernel) if adaptive is None else len(adaptive)
        if adaptive is None:
            spatial = pool_shape(shape[-n:], kernel, stride, padding, dilation, ceil_mode)
        else:
            spatial = tuple(adaptive)
            kernel = [adaptive_window(i, o) for i, o in zip(shape[-n:], adaptive, strict=True)]
            stride, padding, dilation = [1] * n, [0] * n, [1] * n
        super().__init__(
            input,
            (*shape[: len(shape) - n], *spatial),
            i64 if kind == "argmax" else None,
            kind=StringAttr(kind),
            kernel=_i64_array(kernel),
            stride=_i64_array(stride),
            padding=_i64_array(padding),
            dilation=_i64_array(dilation),
            count_include_pad=(
                UnitAttr() if count_include_pad and kind == "avg" and adaptive is None else None
            ),
            divisor=IntegerAttr(divisor, i64) if divisor is not None else None,
            adaptive=UnitAttr() if adaptive is not None else None,
        )

    @property
    def window(self) -> tuple[tuple[int, ...], ...]:
        """kernel, stride, padding, dilation."""
        return (_ints(self.kernel), _ints(self.stride), _ints(self.padding), _ints(self.dilation))

    @property
    def divisor_value(self) -> int | None:
        return self.divisor.value.data if self.divisor is not None else None

    def verify_(self) -> None:
        kind = self.kind.data
        t = self._check_tensors(same_dtype=kind != "argmax")
        if kind == "argmax" and dtype_of(self.result) != i64:
            raise VerifyException(
                f"expected an i64 result for argmax, found {dtype_of(self.result)}"
            )
        if kind not in POOL_KINDS:
            raise VerifyException(f'expected kind in {list(POOL_KINDS)}, found "{kind}"')
        kernel, stride, padding, dilation = self.window
        n, shape = len(kernel), t.get_shape()
        if not 1 <= n <= min(3, len(shape)):
            raise VerifyException(
                f"expected 1 to {min(3, len(shape))} window dims (the operand's rank), found {n}"
            )
        _check_counts(n, "the kernel's", stride=stride, padding=padding, dilation=dilation)
        for i, (k, s, p, d) in enumerate(zip(kernel, stride, padding, dilation, strict=True)):
            if min(k, s, d) <= 0 or not 0 <= p <= k // 2:
                raise VerifyException(
                    f"expected kernel, stride, dilation > 0 and 0 <= padding <= kernel / 2 in "
                    f"window dim {i}, found {k}, {s}, {d}, {p}"
                )
        if kind == "avg":
            if any(d != 1 for d in dilation):
                raise VerifyException(f"expected no dilation for avg, found {list(dilation)}")
            _check_float(t)
            if self.divisor_value == 0:
                raise VerifyException("expected a non-zero divisor")
        elif self.divisor is not None or self.count_include_pad is not None:  # max, argmax
            raise VerifyException(f"expected no divisor or count_include_pad for {kind}")
        _check_numeric(t)
        lead, out = shape[: len(shape) - n], shape_of(self.result)
        spatial = shape[len(shape) - n :]
        if self.adaptive is not None:
            self._verify_adaptive(spatial, out[len(out) - n :])
            _check_result_shape(self, (*lead, *out[len(out) - n :]))
            return
        allowed = {
            (*lead, *pool_shape(spatial, kernel, stride, padding, dilation, ceil))
            for ceil in (False, True)
        }
        if out not in allowed:
            raise VerifyException(
                f"expected result shape {' or '.join(fmt_shape(s) for s in sorted(allowed))}, "
                f"found {fmt_shape(out)}"
            )

    def _verify_adaptive(self, spatial: Sequence[int], out: Sequence[int]) -> None:
        kernel, stride, padding, dilation = self.window
        if any(s != 1 for s in stride) or any(padding) or any(d != 1 for d in dilation):
            raise VerifyException("expected stride 1, padding 0, dilation 1 for an adaptive pool")
        if self.divisor is not None or self.count_include_pad is not None:
            raise VerifyException("expected no divisor or count_include_pad for an adaptive pool")
        if 0 in spatial or 0 in out:
            raise VerifyException("expected non-empty window dims for an adaptive pool")
        want = [adaptive_window(i, o) for i, o in zip(spatial, out, strict=True)]
        if list(kernel) != want:
            raise VerifyException(
                f"expected kernel {want} (the largest adaptive window), found {list(kernel)}"
            )


@irdl_op_definition
class PatchesOp(OneTensorOp):
    """The windows a 2-D convolution multiplies (im2col), one per output position, of a
    `[C, H, W]` input: element `[oh, ow, c, i, j]` is `x[c, oh * sh + i - ph, ow * sw + j - pw]`,
    0 outside the input. Seen as `[OH * OW, C * KH * KW]` (a reshape, no copy), it is the
    matrix that the convolution's weight, seen as `[O, C * KH * KW]`, multiplies.
    `%p = graph.patches %x kernel = [3, 3] stride = [2, 2] padding = [1, 1] : tensor<8x4x4xf32> -> tensor<2x2x8x3x3xf32>`"""

    name = "graph.patches"
    FACTS: ClassVar[OpFacts] = OpFacts(
        fuzz=Fuzz.drawn_by("convolution"),
        without={
            "aten": "made by convolution-matmul from a batch-1 convolution with small patches",
            "scalar": "lower-to-loops emits it: the input read at the window position, guarded",
        },
    )
    kernel = prop_def(DenseArrayBase[I64])
    stride = prop_def(DenseArrayBase[I64])
    padding = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Injective())
    assembly_format = (
        "$input `kernel` `=` $kernel `stride` `=` $stride `padding` `=` $padding attr-dict "
        "`:` type($input) `->` type($result)"
    )

    def __init__(
        self,
        input: SSAValue | Operation,
        kernel: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
    ):
        input = SSAValue.get(input)
        channels, *spatial = shape_of(input)
        out = pool_shape(spatial, kernel, stride, padding, (1, 1), False)
        super().__init__(
            input,
            (*out, channels, *kernel),
            kernel=_i64_array(kernel),
            stride=_i64_array(stride),
            padding=_i64_array(padding),
        )

    @property
    def window(self) -> tuple[tuple[int, ...], ...]:
        """kernel, stride, padding."""
        return (_ints(self.kernel), _ints(self.stride), _ints(self.padding))

    def verify_(self) -> None:
        t = self._check_tensors()
        kernel, stride, padding = self.window
        shape = t.get_shape()
        if len(shape) != 3 or not len(kernel) == len(stride) == len(padding) == 2:
            raise VerifyException(
                f"expected a [C, H, W] operand and 2 kernel, stride and padding values, found "
                f"{fmt_shape(shape)}, {list(kernel)}, {list(stride)}, {list(padding)}"
            )
        for i, (k, st, pd) in enumerate(zip(kernel, stride, padding, strict=True)):
            if min(k, st) <= 0 or not 0 <= pd <= k // 2:
                raise VerifyException(
                    f"expected kernel, stride > 0 and 0 <= padding <= kernel / 2 in window dim "
                    f"{i}, found {k}, {st}, {pd}"
                )
        out = pool_shape(shape[1:], kernel, stride, padding, (1, 1), False)
        _check_result_shape(self, (*out, shape[0], *kernel))


def adaptive_window(size: int, out: int) -> int:
    """The largest window of an adaptive pool of `size` elements into `out`."""
    return max(-(-(o + 1) * size // out) - o * size // out for o in range(out)) if out else 0


def adaptive_bounds(o: int, size: int, out: int) -> tuple[int, int]:
    """Window `o`'s [start, end) in an adaptive pool (torch's start_index / end_index)."""
    return o * size // out, -(-(o + 1) * size // out)


def pool_shape(
    shape: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool,
) -> tuple[int, ...]:
    """torch's pooling output size per window dim (at least 0): a last window that would
    start in the right padding is dropped in ceil mode."""
    out: list[int] = []
    for n, k, s, p, d in zip(shape, kernel, stride, padding, dilation, strict=True):
        span = n + 2 * p - d * (k - 1) - 1
        size = (span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (size - 1) * s >= n + p:
            size -= 1
        out.append(max(0, size))
    return tuple(out)


WINDOW_OPS: tuple[type[IRDLOperation], ...] = (
    PadOp,
    PoolOp,
    PatchesOp,
)
"""The window ops, in the `Graph` dialect's op list."""
