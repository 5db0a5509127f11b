"""
f32 matrix products of a weight on the CPU run by oneDNN instead of torch's call (MKL), where
`xfuse.choices` measured oneDNN faster at the program's shapes (`OnednnGemm`).

A candidate (`gemm_of`) is a `graph.linear` by an `[N, K]` weight, or a `graph.matmul` of a
2-D operand by a `[K, N]` weight, in f32, the weight an argument of the program that a call
binds to memory that outlives it (a parameter, or a static input: `held_args`): torch runs
both as one MKL GEMM on the CPU. oneDNN's `mkldnn._linear_pointwise` runs them much faster on
some shapes (an LM head's 128x768x50257: about 70 ms against MKL's 120-140 on two AVX2 cores),
but its f32 sum over K is less accurate: about twice the RMSE of MKL's against an f64
reference at K of 768 to 3072, which breaks xfuse's rule (no worse than twice eager's). So K
is cut into contiguous chunks of `CHUNK` columns, each chunk's product added into the running
result by oneDNN itself (`_linear_pointwise.binary`'s `add`).

Memory: each chosen weight is held once more, as its chunks (`weight_chunks`: GPT-2's tied
LM head, 50257x768 f32, 154 MB), except an [N, K] contiguous weight of one chunk, used as
it is; made again where the weight changed (in place, or another tensor), as eager reads the
weight at each call.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Collection
from dataclasses import dataclass
from typing import NamedTuple

import torch
from xdsl.ir import BlockArgument, Operation

from xfuse.dialects import graph
from xfuse.ir.dtypes import to_torch

Tensor = torch.Tensor

CHUNK = 256
"""Columns of K summed by one oneDNN call. The RMSE against an f64 reference over MKL's
(`torch.nn.functional.linear`), random normal data, M=128, K and N of GPT-2, BERT and Llama
(768..3072): oneDNN unchunked 1.95-2.32x; chunks of 256 1.13-1.17x (either layout); 384
1.35-1.40x; 512 1.47-1.64x (tests/runtime/test_onednn_gemm.py checks the 2x rule). Each
chunk is one more oneDNN call (about 10% of an LM head's gain at K=768), which the measured
choice weighs."""


class Gemm(NamedTuple):
    """A candidate product: `x` [M, K] (leading dims flattened) by a weight stored [N, K]
    (`linear`) or [K, N] (`matmul`, `transposed`)."""

    m: int
    k: int
    n: int
    transposed: bool

    @property
    def work(self) -> int:
        return self.m * self.k * self.n

    @property
    def signature(self) -> str:
        layout = "kn" if self.transposed else "nk"
        return f"{self.m}x{self.k}x{self.n} {layout}"


def available() -> bool:
    """Whether this torch has oneDNN's linear (`mkldnn._linear_pointwise`) on this CPU."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def gemm_of(op: Operation, held: Collection[int]) -> Gemm | None:
    """`op` as a candidate product (see the module docstring), or None: its weight the
    argument of `@forward` at one of the positions `held` (its chunks made once per weight,
    `weight_chunks`), every operand f32 and of static shape."""
    if isinstance(op, graph.LinearOp):
        weight, transposed = op.operands[1], False
    elif isinstance(op, graph.MatmulOp) and len(graph.shape_of(op.lhs)) == 2:
        weight, transposed = op.rhs, True
    else:
        return None
    if not isinstance(weight, BlockArgument) or weight.index not in held:
        return None
    if weight.owner is not op.parent_block() or len(graph.shape_of(weight)) != 2:
        return None
    if any(to_torch(graph.dtype_of(v)) != torch.float32 for v in (*op.operands, *op.results)):
        return None
    shapes = [graph.shape_of(v) for v in (*op.operands, *op.results)]
    if any(d < 0 for s in shapes for d in s):
        return None
    x = graph.shape_of(op.operands[0])
    rows, cols = graph.shape_of(weight)
    m = 1
    for d in x[:-1]:
        m *= d
    n, k = (cols, rows) if transposed else (rows, cols)
    return Gemm(m, k, n, transposed)


@dataclass
class _Chunks:
    """A weight's chunks as oneDNN reads them: each [N, CHUNK] contiguous, for the weight
    object `of` at `version` and `address` (any change, in place or a new tensor, remakes
    them)."""

    of: weakref.ReferenceType[Tensor]
    version: int
    address: int
    chunks: list[Tensor]


_made: dict[tuple[int, bool], _Chunks] = {}
"""Each weight's chunks, by the weight's id and layout; dropped with the weight."""
_lock = threading.Lock()


def weight_chunks(weight: Tensor, transposed: bool) -> list[Tensor]:
    """`weight` as [N, K] cut into contiguous [N, CHUNK] chunks: made once per weight and kept
    while the weight lives and is unchanged (`Tensor._version`, which in-place writes bump,
    and its address), one copy of it. A contiguous [N, K] weight of one chunk is used as it
    is: no copy."""
    if not transposed and weight.size(1) <= CHUNK and weight.is_contiguous():
        return [weight]
    key = (id(weight), transposed)
    found = _made.get(key)
    if (
        found is not None
        and found.of() is weight
        and found.version == weight._version
        and found.address == weight.data_ptr()
    ):
        return found.chunks
    with torch.no_grad():
        nk = weight.detach().t() if transposed else weight.detach()
        chunks = [nk[:, s : s + CHUNK].contiguous() for s in range(0, nk.size(1), CHUNK)]
    with _lock:
        _made.pop(key, None)  # the old chunks go before the callback of a new weight can
        _made[key] = _Chunks(
            weakref.ref(weight, lambda _: _made.pop(key, None)),
            weight._version,
            weight.data_ptr(),
            chunks,
        )
    return chunks


def onednn_gemm(x: Tensor, weight: Tensor, bias: Tensor | None, transposed: bool) -> Tensor:
    """`linear(x, weight, bias)` (`transposed`: `x @ weight`) by oneDNN, K in `CHUNK`s, each
    of x's chunks copied contiguous per call (oneDNN is many times slower on strided views)."""
    chunks = weight_chunks(weight, transposed)
    k = x.size(-1)
    rows = x.reshape(-1, k)
    linear = torch.ops.mkldnn._linear_pointwise
    first = rows[:, :CHUNK] if len(chunks) > 1 else rows
    out = linear(first.contiguous(), chunks[0], bias, "none", [], "")
    for i, w in enumerate(chunks[1:], 1):
        part = rows[:, i * CHUNK : (i + 1) * CHUNK].contiguous()
        out = linear.binary(part, out, w, None, "add")
    return out.reshape(*x.shape[:-1], out.size(-1))


class OnednnGemm:
    """One chosen product's call, `onednn_gemm` with its layout fixed: the runner calls it as
    it calls torch's (`linear(x, w, b)`, `mm(x, w)`)."""

    def __init__(self, transposed: bool) -> None:
        self.transposed = transposed

    def __call__(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        return onednn_gemm(x, weight, bias, self.transposed)

    def __repr__(self) -> str:
        return f"OnednnGemm(transposed={self.transposed})"
