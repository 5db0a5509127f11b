"""
`pad-matmul`: a 16-bit matrix product whose result rows are not a whole number of 16-byte
vectors long (a language model's head over a 50,257-token vocabulary) runs on a right-hand
side padded with zero columns, and the result is sliced back, as Inductor's `pad_mm` does.

cuBLAS has no tensor-core kernel for such a row length and falls back to a slow generic one;
the padded product takes the fast kernels, and its extra columns are zeros that the slice
drops. The values are the same: each kept column is the same dot product. The pad of the
weight (a parameter: padded at every call) and the slice are kernels of their own, or fuse
with their neighbours (the slice with what reads the product).

    %y = graph.matmul %x, %w : tensor<8x16xbf16>, tensor<16x13xbf16> -> tensor<8x13xbf16>
      ->
    %wp = graph.pad %w low = [0, 0] high = [0, 3] mode = "constant" value = 0.0 : f64 : tensor<16x13xbf16> -> tensor<16x16xbf16>
    %yp = graph.matmul %x, %wp : tensor<8x16xbf16>, tensor<16x16xbf16> -> tensor<8x16xbf16>
    %y = graph.slice %yp start = [0, 0] limit = [8, 13] stride = [1, 1] : tensor<8x16xbf16> -> tensor<8x13xbf16>

Run on CUDA only (`xfuse.pipeline.compile_pipeline`): the CPU's GEMMs take any row length.
Padding is not free: the weight is padded at every call (a copy of it) and a returned result
is copied out of the padded one, so a product of few rows (a batch-1 decode step's head: one
row) runs faster unpadded. `xfuse.compile` times each product both ways at the program's
shapes (`xfuse.choices`) and leaves those unpadded (`unpadded`, by `PaddedProduct.signature`)
whose unpadded call was not clearly slower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, cast

from xdsl.context import Context
from xdsl.dialects.builtin import BFloat16Type, Float16Type, ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from xfuse.dialects import fusion, graph
from xfuse.dialects.op_kinds import Kind
from xfuse.passes.options import POSITIVE, option
from xfuse.passes.transforms.fold_linear import transposed_weight

SIXTEEN_BIT = (BFloat16Type, Float16Type)
"""The element types whose GEMMs need rows of whole 16-byte vectors (8 elements)."""


def padding(columns: int, alignment: int, minimum: int) -> int:
    """How many zero columns make a row of `columns` a multiple of `alignment` long; 0 for a
    row already aligned, or one shorter than `minimum` (too little work to gain from it)."""
    if columns < minimum or columns % alignment == 0:
        return 0
    return alignment - columns % alignment


def sliced_back(padded: Operation, columns: int, returned: bool) -> Operation:
    """`padded`'s result with its last dim cut back to `columns`. Where the program returns
    it (a language model's logits), the slice is a one-op group: a kernel writes the rows
    row-major, as eager's product has them. As a torch view its rows would lie a padded row
    apart, and the runtime would copy them into eager's strides with torch's strided copy."""
    shape = graph.shape_of(padded.results[0])
    limit = (*shape[:-1], columns)
    if not returned:
        return graph.SliceOp(padded.results[0], [0] * len(shape), limit, [1] * len(shape))
    block = Block(arg_types=[padded.results[0].type])
    cut = graph.SliceOp(block.args[0], [0] * len(shape), limit, [1] * len(shape))
    block.add_ops([cut, fusion.YieldOp(cut.result)])
    return fusion.GroupOp(
        [padded.results[0]], [cut.result.type], Region(block), Kind.INJECTIVE, "pad-matmul:returned"
    )


def _returned(op: Operation) -> bool:
    return any(use.operation.name == "func.return" for r in op.results for use in r.uses)


class PaddedProduct(NamedTuple):
    """A product `pad-matmul` pads: `x` [M, K] (leading dims flattened) by a weight of N
    unaligned columns stored [N, K] (`linear`, with a bias or not) or [K, N] (`matmul`), of a
    16-bit `dtype` (`bf16`, `f16`), its result returned by the program or read by other ops."""

    m: int
    k: int
    n: int
    linear: bool
    dtype: str
    bias: bool
    returned: bool

    @property
    def signature(self) -> str:
        """`MxKxN linear|matmul dtype[ bias][ returned]`: `4096x768x50257 linear bf16
        returned`. `unpadded` names products by it."""
        kind = "linear" if self.linear else "matmul"
        extra = (" bias" if self.bias else "") + (" returned" if self.returned else "")
        return f"{self.m}x{self.k}x{self.n} {kind} {self.dtype}{extra}"


def padded_product(op: Operation, alignment: int, minimum: int) -> PaddedProduct | None:
    """`op` as a product of a 2-D weight that `pad-matmul` pads (`PadMatmulColumns`,
    `PadLinearRows`), or None (also for a batch of right-hand sides, which it pads always)."""
    if isinstance(op, graph.MatmulOp):
        weight, lhs, linear, bias = op.rhs, op.lhs, False, False
        w = transposed_weight(op.rhs)
        if w is not None:  # x @ w^T: padded as linear(x, pad(w))
            weight, linear = w, True
        if len(graph.shape_of(op.rhs)) != 2 or len(graph.shape_of(lhs)) < 2:
            return None  # a batch of right-hand sides (attention's): padded unmeasured
        k, columns = graph.shape_of(op.rhs)
    elif isinstance(op, graph.LinearOp):
        weight, lhs, linear = op.weight, op.input, True
        columns, k = graph.shape_of(op.weight)[0], graph.shape_of(op.weight)[-1]
        bias = op.bias is not None
        if bias and graph.shape_of(cast(SSAValue, op.bias)) != (columns,):
            return None  # a broadcast scalar bias: left as it is
    else:
        return None
    dtype = graph.dtype_of(weight)
    if not isinstance(dtype, SIXTEEN_BIT) or padding(columns, alignment, minimum) == 0:
        return None
    if any(d < 0 for d in graph.shape_of(lhs)):
        return None
    m = math.prod(graph.shape_of(lhs)[:-1])
    name = "bf16" if isinstance(dtype, BFloat16Type) else "f16"
    return PaddedProduct(m, k, columns, linear, name, bias, _returned(op))


def candidates(module: ModuleOp, alignment: int = 8, minimum: int = 256) -> list[PaddedProduct]:
    """The products of `module` that `pad-matmul` would pad (with the pass's defaults)."""
    found = (padded_product(op, alignment, minimum) for op in module.walk())
    return [p for p in found if p is not None]


def pad_dim(value: SSAValue, dim: int, extra: int) -> graph.PadOp:
    """`value` with `extra` zeros after the end of dim `dim`."""
    rank = len(graph.shape_of(value))
    high = [extra if d == dim else 0 for d in range(rank)]
    return graph.PadOp(value, [0] * rank, high)


def _left_unpadded(op: Operation, alignment: int, minimum: int, unpadded: frozenset[str]) -> bool:
    if not unpadded:
        return False
    product = padded_product(op, alignment, minimum)
    return product is not None and product.signature in unpadded


@dataclass(frozen=True)
class PadMatmulColumns(RewritePattern):
    """`matmul(x, w)` with a 16-bit `w` of `N` columns, N not a multiple of `alignment` ->
    `slice(matmul(x, pad(w)))`; `matmul(x, permute(w, [1, 0]))` -> `slice(linear(x, pad(w)))`
    (the pad copies `w` as it lies, where padding its transpose would copy it transposed)."""

    alignment: int
    minimum: int
    unpadded: frozenset[str] = frozenset()

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.MatmulOp, rewriter: PatternRewriter) -> None:
        if not isinstance(graph.dtype_of(op.rhs), SIXTEEN_BIT):
            return
        if _left_unpadded(op, self.alignment, self.minimum, self.unpadded):
            return
        columns = graph.shape_of(op.rhs)[-1]
        extra = padding(columns, self.alignment, self.minimum)
        if extra == 0 or len(graph.shape_of(op.lhs)) < 2:
            return
        w = transposed_weight(op.rhs)
        if w is not None:  # x @ w^T: w padded as it lies, and one `linear` reads it
            pad = pad_dim(w, 0, extra)
            product: Operation = graph.LinearOp(op.lhs, pad)
        else:
            pad = pad_dim(op.rhs, len(graph.shape_of(op.rhs)) - 1, extra)
            product = graph.MatmulOp(op.lhs, pad)
        transpose = op.rhs.owner
        rewriter.replace(op, [pad, product, sliced_back(product, columns, _returned(op))])
        if isinstance(transpose, graph.PermuteOp) and not transpose.result.uses:
            rewriter.erase(transpose)


@dataclass(frozen=True)
class PadLinearRows(RewritePattern):
    """`linear(x, w[, b])` with a 16-bit weight of `N` rows, N not a multiple of `alignment`
    -> `slice(linear(x, pad(w)[, pad(b)]))`."""

    alignment: int
    minimum: int
    unpadded: frozenset[str] = frozenset()

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.LinearOp, rewriter: PatternRewriter) -> None:
        if not isinstance(graph.dtype_of(op.weight), SIXTEEN_BIT):
            return
        if _left_unpadded(op, self.alignment, self.minimum, self.unpadded):
            return
        rows = graph.shape_of(op.weight)[0]
        extra = padding(rows, self.alignment, self.minimum)
        if extra == 0:
            return
        new: list[Operation] = [pad_dim(op.weight, 0, extra)]
        bias = None
        if op.bias is not None and graph.shape_of(op.bias) == (rows,):
            new.append(pad_dim(op.bias, 0, extra))
            bias = new[-1].results[0]
        elif op.bias is not None:
            return  # a broadcast scalar bias: left as it is
        product = graph.LinearOp(op.input, new[0].results[0], bias)
        rewriter.replace(op, [*new, product, sliced_back(product, rows, _returned(op))])


@dataclass(frozen=True)
class PadMatmulPass(ModulePass):
    """Pad the columns of 16-bit matrix products to whole 16-byte vectors, slicing back."""

    name = "pad-matmul"

    alignment: int = option(8, POSITIVE)
    """Row lengths are padded to a multiple of this many elements (16 bytes of bf16/f16)."""

    min_columns: int = option(256, POSITIVE)
    """Rows shorter than this are left alone: a small product gains less than the pad costs."""

    unpadded: tuple[str, ...] = ()
    """The products (by `PaddedProduct.signature`) left unpadded: those measured no slower so
    (`xfuse.choices`)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        unpadded = frozenset(self.unpadded)
        patterns = [
            PadMatmulColumns(self.alignment, self.min_columns, unpadded),
            PadLinearRows(self.alignment, self.min_columns, unpadded),
        ]
        PatternRewriteWalker(
            GreedyRewritePatternApplier(list(patterns)), apply_recursively=False
        ).rewrite_module(op)
