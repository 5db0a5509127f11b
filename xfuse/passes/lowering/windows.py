"""
Padding, pooling and patches in a kernel: `pad` and `pool` read their input at shifted
positions; a position its bounds cannot place inside the input is loaded at a clamped (or, for
reflect padding, mirrored) address and selected away by an `i1` test, so no load ever leaves
its buffer; tests the bounds decide are not emitted. A pool's window is unrolled up to
`UNROLL_WINDOW` elements (each position its own guard), else an `scf.for` nest carrying the
accumulator whose loops are clipped to the input, as eager's kernels and Inductor's: from
max(start, 0) (the first tap inside, with a dilation) to min(start + kernel, size), so that its
loads need no guard and a window far larger than its input (a global pool written as
`AvgPool2d(1280)`) walks the input only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import count, product
from typing import cast

from xdsl.dialects import arith
from xdsl.dialects.builtin import AnyFloat, IntegerType, i1, i64
from xdsl.ir import Attribute, Operation, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.graph import dims_of, dtype_of, is_float, numel, shape_of
from xfuse.passes.lowering.emitter import LoopBody, LoopEmitter, emit_for
from xfuse.passes.lowering.index_algebra import (
    Affine,
    Clamp,
    Index,
    LoopVar,
    Reflect,
    Size,
    SizedClamp,
    add,
    bounds,
    clamp,
    constant_index,
    floordiv,
    linearize,
    reflect,
    scale,
    sized_clamp,
    var_index,
)
from xfuse.passes.lowering.scalar_ops import compute_type, from_compute, to_compute

UNROLL_WINDOW = 32
"""Windows of up to this many elements are unrolled (each position's guard decided or folded
at compile time, one straight-line expression: Inductor unrolls up to 25); larger ones are an
`scf.for` nest carrying the accumulator."""

_window_idents = count(1 << 20)
"""Identifiers of window loop variables (apart from the domain's, which number dims)."""


def emit_window_index(b: LoopEmitter, a: Clamp | Reflect | SizedClamp) -> SSAValue:
    """A clamped or reflected index, with only the corrections its bounds leave open."""
    v = b.index_value(a.arg)
    lo, hi = bounds(a.arg)
    if isinstance(a, SizedClamp):
        if lo < 0:
            v = b.insert(arith.MaxSIOp(v, b.index_constant(0)))
        if hi >= a.size.low:
            top = b.index_value(add(Affine(((a.size, 1),)), constant_index(-1)))
            v = b.insert(arith.MinSIOp(v, top))
        return v
    if isinstance(a, Clamp):
        if lo < a.low:
            v = b.insert(arith.MaxSIOp(v, b.index_constant(a.low)))
        if hi > a.high:
            v = b.insert(arith.MinSIOp(v, b.index_constant(a.high)))
        return v
    last = a.size - 1
    if lo < 0:  # |arg|
        v = b.insert(arith.MaxSIOp(v, b.insert(arith.SubiOp(b.index_constant(0), v))))
    if max(hi, -lo) > last:  # last - |last - v|
        t = b.insert(arith.SubiOp(b.index_constant(last), v))
        t = b.insert(arith.MaxSIOp(t, b.insert(arith.SubiOp(b.index_constant(0), t))))
        v = b.insert(arith.SubiOp(b.index_constant(last), t))
    return v


def _guarded_index(
    b: LoopEmitter, pos: Affine, size: int | Size
) -> tuple[Affine, SSAValue | None] | None:
    """Where to load for position `pos` of a dim of `size`, and the i1 that says whether it is
    inside (None: always); None when it is never inside. The address is clamped, so that the
    load never leaves the buffer. Along a symbolic dim `size` is its runtime size (a `Size`
    atom): the upper test compares with it at run time, and the address is clamped to it."""
    smallest, largest = (size, size) if isinstance(size, int) else (size.low, size.high)
    lo, hi = bounds(pos)
    if lo >= 0 and hi < smallest:
        return pos, None
    if hi < 0 or lo >= largest or largest == 0:
        return None

    def below_size(v: SSAValue) -> SSAValue:
        if isinstance(size, int):
            return b.insert(arith.CmpiOp(v, b.index_constant(size - 1), "sle"))
        return b.insert(arith.CmpiOp(v, b.index_value(Affine(((size, 1),))), "slt"))

    def inside() -> SSAValue:
        v = b.index_value(pos)
        conds = []
        if lo < 0:
            conds.append(b.insert(arith.CmpiOp(v, b.index_constant(0), "sge")))
        if hi >= smallest:
            conds.append(below_size(v))
        return conds[0] if len(conds) == 1 else b.insert(arith.AndIOp(conds[0], conds[1]))

    cond = b.memoized_at(("inside", pos, size), (pos,), inside)
    return (clamp(pos, 0, size - 1) if isinstance(size, int) else sized_clamp(pos, size)), cond


def _runtime_size(b: LoopEmitter, symbol: str) -> Size:
    """The `Size` atom of a symbolic dim's runtime size."""
    [(atom, _)] = b.dim_size(symbol).terms
    assert isinstance(atom, Size)
    return atom


def _all(b: LoopEmitter, conds: Sequence[SSAValue]) -> SSAValue | None:
    out: SSAValue | None = None
    for c in conds:
        out = c if out is None else b.insert(arith.AndIOp(out, c))
    return out


def _guarded_value(
    b: LoopEmitter, v: SSAValue, index: Sequence[Affine], sizes: Sequence[int]
) -> tuple[SSAValue, SSAValue | None] | None:
    """`v` at `index` (whose last len(sizes) positions may fall outside), with the i1 that
    says whether they are all inside; None when one never is."""
    lead = len(index) - len(sizes)
    src, conds = list(index[:lead]), []
    for pos, size in zip(index[lead:], sizes, strict=True):
        guarded = _guarded_index(b, pos, size)
        if guarded is None:
            return None
        src.append(guarded[0])
        if guarded[1] is not None:
            conds.append(guarded[1])
    return b.value_at(v, tuple(src)), _all(b, conds)


def _fill(b: LoopEmitter, value: float, t: Attribute) -> SSAValue:
    return b.constant(value if is_float(t) else int(bool(value)) if t == i1 else int(value), t)


def _value_or_fill(
    b: LoopEmitter,
    v: SSAValue,
    index: Sequence[Affine],
    sizes: Sequence[int],
    fill: float,
    t: Attribute,
) -> SSAValue:
    """select(inside, v[index clamped], fill) (`_guarded_value`): constant padding's value,
    and a patch's."""
    guarded = _guarded_value(b, v, index, sizes)
    if guarded is None:
        return _fill(b, fill, t)
    x, inside = guarded
    return x if inside is None else b.insert(arith.SelectOp(inside, x, _fill(b, fill, t)))


def pad_value_at(b: LoopEmitter, op: graph.PadOp, index: Index) -> SSAValue:
    """select(inside, x[clamp(i - low)], value), or x[reflect / clamp(i - low)]. A dim padded
    by nothing is read at its own position: no guard; a padded symbolic dim, or one padded up
    to the result's size (constant padding only), is tested against its runtime size."""
    low, _ = op.pads
    shape, t, mode = shape_of(op.input), dtype_of(op.result), op.mode.data
    padded = op.padded_dims()
    src = [add(e, constant_index(-lo)) for e, lo in zip(index, low, strict=True)]
    if mode == "reflect":
        src = [reflect(e, n) if p else e for e, n, p in zip(src, shape, padded, strict=True)]
    elif mode == "replicate":
        src = [clamp(e, 0, n - 1) if p else e for e, n, p in zip(src, shape, padded, strict=True)]
    if mode != "constant":
        return b.value_at(op.input, tuple(src))
    at, conds = [], []
    for pos, d, p in zip(src, dims_of(op.input), padded, strict=True):
        size = d if isinstance(d, int) else _runtime_size(b, d)
        guarded = _guarded_index(b, pos, size) if p else (pos, None)
        if guarded is None:
            return _fill(b, op.fill, t)
        at.append(guarded[0])
        if guarded[1] is not None:
            conds.append(guarded[1])
    x, inside = b.value_at(op.input, tuple(at)), _all(b, conds)
    return x if inside is None else b.insert(arith.SelectOp(inside, x, _fill(b, op.fill, t)))


def patches_value_at(b: LoopEmitter, op: graph.PatchesOp, index: Index) -> SSAValue:
    """select(inside, x[c, clamp(oh * sh + i - ph), clamp(ow * sw + j - pw)], 0) at
    `[oh, ow, c, i, j]`, with only the guards the positions' bounds leave open."""
    oh, ow, c, i, j = index
    _, stride, padding = op.window
    src = [
        c,
        *(
            add(add(scale(o, s), k), constant_index(-p))
            for o, k, s, p in zip((oh, ow), (i, j), stride, padding, strict=True)
        ),
    ]
    return _value_or_fill(b, op.input, src, shape_of(op.input)[1:], 0.0, dtype_of(op.result))


def _pool_combiner(
    op: graph.PoolOp,
) -> tuple[Callable[[SSAValue, SSAValue], Operation], float | int]:
    t = dtype_of(op.input)
    if op.kind.data == "avg":
        return arith.AddfOp, 0.0
    if is_float(t):
        return arith.MaximumfOp, float("-inf")  # NaN propagates, as eager's max_pool
    return arith.MaxSIOp, -(1 << (cast(IntegerType, t).width.data - 1))


@dataclass(frozen=True)
class Window:
    """Where a pool's window for one output element lies, per window dim: its first position
    (`starts`), and for adaptive pools its end (`ends`) and how many offsets always lie
    before it (`always`)."""

    starts: list[Affine]
    ends: list[Affine | None]
    always: list[int]
    sizes: tuple[int, ...]


def pool_window(op: graph.PoolOp, index: Index) -> Window:
    kernel, stride, padding, _ = op.window
    n = len(kernel)
    sizes = shape_of(op.input)[-n:]
    if op.adaptive is None:
        starts = [
            add(scale(e, s), constant_index(-p))
            for e, s, p in zip(index[-n:], stride, padding, strict=True)
        ]
        return Window(starts, [None] * n, list(kernel), sizes)
    outs = shape_of(op.result)[-n:]
    starts = [floordiv(scale(e, i), o) for e, i, o in zip(index[-n:], sizes, outs, strict=True)]
    ends: list[Affine | None] = [
        floordiv(add(scale(e, i), constant_index(i + o - 1)), o)
        for e, i, o in zip(index[-n:], sizes, outs, strict=True)
    ]
    always = [
        min(hi - lo for lo, hi in (graph.adaptive_bounds(k, i, o) for k in range(o)))
        for i, o in zip(sizes, outs, strict=True)
    ]
    return Window(starts, ends, always, sizes)


def _window_element(
    b: LoopEmitter,
    op: graph.PoolOp,
    index: Index,
    w: Window,
    positions: Sequence[Affine],
    offsets: Sequence[Affine] | None = None,
) -> tuple[SSAValue, SSAValue | None] | None:
    """The input element at window `positions` (in the compute type) and the i1 that says
    whether it is inside the input and the window (None: always); None when it never is. An
    adaptive window's end is tested at unrolled `offsets` (a clipped loop stops there)."""
    guarded = _guarded_value(b, op.input, (*index[: -len(w.sizes)], *positions), w.sizes)
    if guarded is None:
        return None
    conds = [guarded[1]] if guarded[1] is not None else []
    for pos, off, end, always in zip(
        positions, offsets or positions, w.ends, w.always, strict=True
    ):
        if offsets is not None and end is not None and bounds(off)[1] >= always:
            conds.append(b.insert(arith.CmpiOp(b.index_value(pos), b.index_value(end), "slt")))
    return to_compute(b, guarded[0], dtype_of(op.input)), _all(b, conds)


@dataclass(frozen=True)
class WindowSpan:
    """The positions one window dim reads inside the input: `first` to `stop` (exclusive) by
    `step` (the dilation), where `var` (a loop variable over the dim's size) walks them."""

    var: LoopVar
    first: SSAValue
    stop: SSAValue
    step: int


def _clipped_index(b: LoopEmitter, e: Affine, low: int | None, high: int | None) -> SSAValue:
    """min(max(e, low), high) (None: no such side), with only the sides `e`'s bounds leave
    open: a side `e` always passes is a constant."""
    lo, hi = bounds(e)
    if low is not None and hi <= low:
        return b.index_constant(low)
    if high is not None and lo >= high:
        return b.index_constant(high)
    v = b.index_value(e)
    if low is not None and lo < low:
        v = b.insert(arith.MaxSIOp(v, b.index_constant(low)))
    if high is not None and hi > high:
        v = b.insert(arith.MinSIOp(v, b.index_constant(high)))
    return v


def _window_span(
    b: LoopEmitter, start: Affine, end: Affine | None, k: int, d: int, size: int
) -> WindowSpan:
    """A window dim clipped to the input, as eager's kernels walk it: its first position
    start + d * ceil(max(0, -start) / d) and its end min(start + (k - 1) * d + 1, size) (an
    adaptive window's own end), each corrected only where the start's bounds leave it open."""
    var = LoopVar(next(_window_idents), size)
    if end is not None:  # adaptive: the window lies inside the input
        return WindowSpan(var, b.index_value(start), b.index_value(end), 1)
    stop = _clipped_index(b, add(start, constant_index((k - 1) * d + 1)), None, size)
    if d == 1 or bounds(start)[0] >= 0:
        return WindowSpan(var, _clipped_index(b, start, 0, None), stop, d)
    # skip the taps before the input: ceil(max(0, -start) / d) of them
    before = _clipped_index(b, scale(start, -1), 0, None)
    skip = b.insert(arith.AddiOp(before, b.index_constant(d - 1)))
    skip = b.insert(arith.DivUIOp(skip, b.index_constant(d)))
    skip = b.insert(arith.MuliOp(skip, b.index_constant(d)))
    return WindowSpan(var, b.insert(arith.AddiOp(b.index_value(start), skip)), stop, d)


def _clipped_nest(
    b: LoopEmitter, spans: Sequence[WindowSpan], carried: list[SSAValue], body: LoopBody
) -> list[SSAValue]:
    """Nested `scf.for` over `spans` (outer first), each from its first position to its stop,
    carrying `carried` as iter_args; an empty span runs no iteration."""
    if not spans:
        return body(carried)
    span = spans[0]
    limits = (span.first, span.stop, b.index_constant(span.step))
    return emit_for(
        b, span.var, limits, carried, lambda inner: _clipped_nest(b, spans[1:], inner, body)
    )


Element = tuple[SSAValue, SSAValue | None, list[Affine]] | None
"""A window element (`_window_element`) with its positions, or None where it never is one."""


def _walk_window(
    b: LoopEmitter,
    op: graph.PoolOp,
    index: Index,
    w: Window,
    init: list[SSAValue],
    step: Callable[[list[SSAValue], Element], list[SSAValue]],
) -> list[SSAValue]:
    """Fold `step` over the window's elements in row-major order: unrolled (each position's
    guard decided or folded at compile time), or, above `UNROLL_WINDOW` elements, an scf.for
    nest over the positions inside the input only (a window much larger than its input, as a
    global pool written with a huge kernel, costs what the input holds)."""
    kernel, dilation = op.window[0], op.window[3]
    if numel(kernel) > UNROLL_WINDOW:
        spans = [
            _window_span(b, start, end, k, d, size)
            for start, end, k, d, size in zip(
                w.starts, w.ends, kernel, dilation, w.sizes, strict=True
            )
        ]
        positions = [var_index(s.var) for s in spans]

        def body(carried: list[SSAValue]) -> list[SSAValue]:
            element = _window_element(b, op, index, w, positions)
            return step(carried, None if element is None else (*element, positions))

        return _clipped_nest(b, spans, init, body)
    carried = init
    for taps in product(*map(range, kernel)):
        offsets = [constant_index(o) for o in taps]
        at = [add(a, scale(o, d)) for a, o, d in zip(w.starts, offsets, dilation, strict=True)]
        element = _window_element(b, op, index, w, at, offsets)
        carried = step(carried, None if element is None else (*element, at))
    return carried


def pool_value_at(b: LoopEmitter, op: graph.PoolOp, index: Index) -> SSAValue:
    """The window's elements combined in torch's order (max from -inf, sum from 0), padding
    skipped; average divided by the divisor."""
    w = pool_window(op, index)
    if op.kind.data == "argmax":
        return _argmax_at(b, op, index, w)
    combine, identity = _pool_combiner(op)
    init = b.constant(identity, compute_type(dtype_of(op.input)))

    def step(carried: list[SSAValue], element: Element) -> list[SSAValue]:
        if element is None:
            return carried
        x, inside, _ = element
        if inside is not None:
            x = b.insert(arith.SelectOp(inside, x, init))
        return [b.insert(combine(carried[0], x))]

    (acc,) = _walk_window(b, op, index, w, [init], step)
    if op.kind.data == "avg":
        acc = b.insert(arith.DivfOp(acc, _pool_divisor(b, op, w, acc.type)))
    return from_compute(b, acc, dtype_of(op.result))


def _argmax_at(b: LoopEmitter, op: graph.PoolOp, index: Index, w: Window) -> SSAValue:
    """max_pool's index: walking the window in order, an element inside the input is taken
    when it is the first, greater than the maximum so far, or NaN (eager's rule); the result
    is its row-major position in the window dims."""
    t = dtype_of(op.input)
    _, identity = _pool_combiner(op)

    def step(carried: list[SSAValue], element: Element) -> list[SSAValue]:
        acc, best = carried
        if element is None:
            return carried
        x, inside, positions = element
        if is_float(t):
            greater = b.insert(arith.CmpfOp(x, acc, "ogt"))
            take = b.insert(arith.OrIOp(greater, b.insert(arith.CmpfOp(x, x, "uno"))))
        else:
            take = b.insert(arith.CmpiOp(x, acc, "sgt"))
        first = b.insert(arith.CmpiOp(best, b.constant(0, i64), "slt"))
        take = b.insert(arith.OrIOp(take, first))
        if inside is not None:
            take = b.insert(arith.AndIOp(take, inside))
        flat = b.insert(arith.IndexCastOp(b.index_value(linearize(positions, w.sizes)), i64))
        return [b.insert(arith.SelectOp(take, x, acc)), b.insert(arith.SelectOp(take, flat, best))]

    init = [b.constant(identity, compute_type(t)), b.constant(-1, i64)]
    return _walk_window(b, op, index, w, init, step)[1]


def _static_clip(e: Affine, low: int | None, high: int | None) -> int | None:
    """min(max(e, low), high) where `e`'s bounds make it one value, else None."""
    lo, hi = bounds(e)
    if low is not None:
        lo, hi = max(lo, low), max(hi, low)
    if high is not None:
        lo, hi = min(lo, high), min(hi, high)
    return lo if lo == hi else None


def _static_span(start: Affine, k: int, low: int | None, high: int) -> int | None:
    """min(start + k, high) - max(start, low) where the bounds of `start` decide it (the same
    for every window of the dim), else None."""
    end = add(start, constant_index(k))
    if bounds(end)[1] <= high and (low is None or bounds(start)[0] >= low):
        return k
    e, s = _static_clip(end, None, high), _static_clip(start, low, None)
    return None if e is None or s is None else e - s


def _pool_divisor(b: LoopEmitter, op: graph.PoolOp, w: Window, t: Attribute) -> SSAValue:
    """`divisor`, else the product over window dims of min(start + kernel, end) - max(start,
    begin): end = size + padding, begin = start itself with count_include_pad, else the
    input's [0, size) (torch's avg_pool); an adaptive window's own size."""
    if op.divisor_value is not None:
        return b.constant(float(op.divisor_value), t)
    kernel, _, padding, _ = op.window
    include = op.count_include_pad is not None
    static, spans = 1, list[SSAValue]()
    dims = zip(w.starts, w.ends, w.always, kernel, padding, w.sizes, strict=True)
    for start, stop, always, k, p, size in dims:
        if stop is not None:  # adaptive: every window of the dim as large, or its own size
            if always == k:
                static *= k
            else:
                spans.append(b.insert(arith.SubiOp(b.index_value(stop), b.index_value(start))))
            continue
        end, end_limit = add(start, constant_index(k)), size + p if include else size
        begin = None if include else 0
        known = _static_span(start, k, begin, end_limit)
        if known is not None:
            static *= known
            continue
        e = _clipped_index(b, end, None, end_limit)
        spans.append(b.insert(arith.SubiOp(e, _clipped_index(b, start, begin, None))))
    if not spans:
        return b.constant(float(static), t)
    total = b.index_constant(static)
    for span in spans:
        total = b.insert(arith.MuliOp(total, span))
    return b.insert(arith.SIToFPOp(b.insert(arith.IndexCastOp(total, i64)), cast(AnyFloat, t)))
