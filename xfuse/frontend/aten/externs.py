"""Converters of extern ops: matrix products (mm, bmm, matmul, addmm, linear), convolution as
the extern `aten.convolution` call, and scaled dot-product attention (`xfuse.frontend.attention`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch.fx
from xdsl.ir import Attribute, Operation, SSAValue

from xfuse.dialects import graph
from xfuse.frontend.aten.common import Args, Converter, _rank
from xfuse.frontend.aten.windows import _window_arg
from xfuse.frontend.attention import ATTENTION_CONVERTERS
from xfuse.frontend.builder import ImportBuilder, Value, out_type
from xfuse.frontend.convolution import CONVOLUTION


def _matmul_values(
    lw: ImportBuilder, lhs: SSAValue, rhs: SSAValue, shape: Sequence[int]
) -> SSAValue:
    """torch.matmul: 1-D operands become a row / a column, then the result is reshaped."""
    if _rank(lhs) == 1:
        lhs = lw.reshape(lhs, (1, graph.shape_of(lhs)[0]))
    if _rank(rhs) == 1:
        rhs = lw.reshape(rhs, (graph.shape_of(rhs)[0], 1))
    return lw.reshape(lw.emit(graph.MatmulOp(lhs, rhs)), shape)


def _matmul(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    t = out_type(node)
    lhs, rhs = lw.operand(a["self"], t.element_type), lw.operand(a[_second(a)], t.element_type)
    return _matmul_values(lw, lhs, rhs, t.get_shape())


def _second(a: Args) -> str:
    return "mat2" if "mat2" in a else "other"


def _unmerged(x: SSAValue) -> SSAValue | None:
    """The input of the reshape that made `x` (`[e, C]`) by merging leading dims with a size
    symbol (`[2, s, C]`, `e = 2 * s`), else None. A symbolic import multiplies that input
    instead: the merged dim would be a reshape whose index divides by the symbol, which the
    loops of the layer norms and bias adds fused with it cannot compute."""
    owner = x.owner
    if not (isinstance(owner, graph.ReshapeOp) and graph.is_symbolic(x) and _rank(x) == 2):
        return None
    source = graph.dims_of(owner.input)
    if len(source) < 3 or source[-1] != graph.dims_of(x)[-1]:
        return None
    return owner.input


def _addmm(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """beta * input + alpha * (mat1 @ mat2); where mat1 merged leading dims with a size symbol,
    the product of the unmerged input, reshaped to the merged result at the end (a reshape
    back, transformers' `Conv1D`, then gives the unmerged result: `layout._reshape`)."""
    t = out_type(node)
    dtype = t.element_type
    mat1, mat2 = lw.operand(a["mat1"], dtype), lw.operand(a["mat2"], dtype)
    bias = a["self"].meta.get("val") if isinstance(a["self"], torch.fx.Node) else None
    by_row = isinstance(bias, torch.Tensor) and bias.dim() == 2 and bias.shape[0] != 1
    unmerged = _unmerged(mat1) if _rank(mat2) == 2 and not by_row else None
    if unmerged is not None:
        y = lw.emit(graph.MatmulOp(unmerged, mat2))
        return lw.reshape(_scaled_sum(lw, a, y, dtype), t.get_shape())
    y = _matmul_values(lw, mat1, mat2, t.get_shape())
    return _scaled_sum(lw, a, y, dtype)


def _scaled_sum(lw: ImportBuilder, a: Args, y: SSAValue, dtype: Attribute) -> SSAValue:
    """addmm's `beta * input + alpha * y`."""
    if a["alpha"] != 1:
        y = lw.emit(graph.MulOp(y, lw.constant(a["alpha"], dtype)))
    if a["beta"] == 0:
        return y
    bias = lw.operand(a["self"], dtype)
    if a["beta"] != 1:
        bias = lw.emit(graph.MulOp(bias, lw.constant(a["beta"], dtype)))
    return lw.emit(graph.AddOp(y, bias))


def _linear(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    dtype = out_type(node).element_type
    x, w = lw.operand(a["input"], dtype), lw.operand(a["weight"], dtype)
    if _rank(x) == 0 or _rank(w) != 2:
        return None
    b = lw.operand(a["bias"], dtype) if a["bias"] is not None else None
    return lw.emit(graph.LinearOp(x, w, b))


def _conv2d(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """`conv2d` of a batch as the extern `aten.convolution` call that torch's decomposition
    makes of it (so that a program needs no decomposition for it); an unbatched one stays a
    torch call of itself."""
    sizes = [_window_arg(a[name], 2) for name in ("stride", "padding", "dilation")]
    if len(out_type(node).get_shape()) != 4 or None in sizes:
        return None
    return _convolution(lw, node, a, [*cast(list[list[int]], sizes), [0, 0]])


def _convolution(lw: ImportBuilder, node: torch.fx.Node, a: Args, sizes: list[list[int]]) -> Value:
    """The extern `aten.convolution` call, not transposed, of `a`'s input, weight, bias and
    groups with `sizes`: stride, padding, dilation and output padding."""
    stride, padding, dilation, output_padding = sizes
    args = [a["input"], a["weight"], a["bias"], stride, padding, dilation, False]
    args += [output_padding, a["groups"]]
    (out,) = lw.torch_call(CONVOLUTION, args, {}, [node.meta["val"]], node)
    return out


def string_padding(a: Args) -> list[int] | None:
    """The padding that torch's decomposition of a batched `conv2d.padding` ("valid" or
    "same", `at::_convolution_mode`) passes to `aten.convolution`, as it spells it: `[0]` for
    "valid"; for "same" (stride 1 only), half of each dim's dilated kernel extent less one.
    None for any other call (unbatched, another padding string, sizes that are no ints, or
    "same" padding one side more than the other, for which torch pads the input first): the
    program is decomposed then (`CONVERTED_WHEN`)."""
    x, w = (
        v.meta.get("val") if isinstance(v, torch.fx.Node) else None
        for v in (a["input"], a["weight"])
    )
    if not (
        isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor) and x.dim() == w.dim() == 4
    ):
        return None
    stride, dilation = _window_arg(a["stride"], 2), _window_arg(a["dilation"], 2)
    if stride is None or dilation is None:
        return None
    if a["padding"] == "valid":
        return [0]
    if a["padding"] != "same" or stride != [1, 1]:
        return None
    totals = [d * (int(k) - 1) for d, k in zip(dilation, w.shape[2:], strict=True)]
    return None if any(t % 2 for t in totals) else [t // 2 for t in totals]


def _conv2d_padding(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """A batched `conv2d` with string padding as the `aten.convolution` call that torch's
    decomposition makes of it: stride and dilation as given (`_ints`), the padding of
    `string_padding`, an output padding of as many zeros as that has entries."""
    padding = string_padding(a)
    if padding is None:
        return None  # (decomposed: CONVERTED_WHEN)
    zeros = [0] * len(padding)
    return _convolution(lw, node, a, [_ints(a["stride"]), padding, _ints(a["dilation"]), zeros])


def _ints(value: int | Sequence[int]) -> list[int]:
    """An `int[2]` argument as ATen receives it: an int stands for both dims."""
    return [value, value] if isinstance(value, int) else list(value)


# ---------------------------------------------------------------------------------------------
# The family's rows of the table
# ---------------------------------------------------------------------------------------------

OWN_CONVERTERS: dict[type[Operation], Converter] = {
    graph.MatmulOp: _matmul,
    graph.LinearOp: _linear,
}

FORMULAS: dict[str, Converter] = {
    "aten.conv2d.default": _conv2d,
    "aten.conv2d.padding": _conv2d_padding,
    "aten.addmm.default": _addmm,
    **ATTENTION_CONVERTERS,
}
"""Aten ops that are extern calls or formulas of them."""
