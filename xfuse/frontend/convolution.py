"""
Convolutions as the importer hands them to the passes: one extern `graph.torch_call` of
`aten.convolution` (what torch's decomposition makes of `conv1d`/`conv2d`/`conv3d`), with its
nine arguments in aten's order; `ConvolutionCall.of` reads them back for the passes that
rewrite convolutions (`depthwise-stencil`, `convolution-matmul`).

    %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1, 1], [0, 0], [1, 1], false, [0, 0], 1] ... -> tensor<1x8x4x4xf32>
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.ir import SSAValue

from xfuse.dialects import graph
from xfuse.dialects.torch_args import decode_arg
from xfuse.errors import UnsupportedArgument

CONVOLUTION = "aten.convolution.default"


def _window(value: object, dims: int) -> tuple[int, ...] | None:
    """A stride, padding or dilation argument (an int, or a list of one per window dim) as a
    tuple of `dims` ints; None for anything else."""
    values: list[object] = list(value) if isinstance(value, list) else [value] * dims  # pyright: ignore[reportUnknownArgumentType]
    ints = [v for v in values if type(v) is int]
    return tuple(ints) if len(ints) == len(values) == dims else None


@dataclass(frozen=True)
class ConvolutionCall:
    """The arguments of a `graph.torch_call` of `aten.convolution` that is not transposed, with
    tensor input and weight of as many window dims as the stride, padding and dilation."""

    input: SSAValue
    weight: SSAValue
    bias: SSAValue | None
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int

    @property
    def kernel(self) -> tuple[int, ...]:
        """The window's extent per dim (the weight's trailing dims)."""
        return graph.shape_of(self.weight)[2:]

    @staticmethod
    def of(op: graph.TorchCallOp) -> ConvolutionCall | None:
        """`op`'s arguments, when it is such a call with one result (an argument this does not
        read, or a transposed convolution, gives None)."""
        if op.target.data != CONVOLUTION or len(op.outputs) != 1 or len(op.args.data) != 9:
            return None
        try:
            x, w, b, stride, padding, dilation, transposed, _, groups = (
                decode_arg(a, op.inputs) for a in op.args.data
            )
        except UnsupportedArgument:
            return None
        if not isinstance(x, SSAValue) or not isinstance(w, SSAValue) or transposed:
            return None
        if (b is not None and not isinstance(b, SSAValue)) or type(groups) is not int:
            return None
        dims = len(graph.shape_of(w)) - 2
        s, p, d = (_window(v, dims) for v in (stride, padding, dilation))
        if dims < 1 or s is None or p is None or d is None:
            return None
        return ConvolutionCall(x, w, b, s, p, d, groups)
