"""
Matrix products of a weight run another way than torch's call, where `xfuse.choices`
measured that way faster at the program's shapes (`ChosenGemm`).

On the CPU, f32 products (torch's call is MKL's GEMM):

- `onednn`: oneDNN's `mkldnn._linear_pointwise`, for an `[N, K]` contiguous weight of at most
  `ONEDNN_MAX_K` columns, used as it is;
- `blocked`: MKL's GEMM in blocks of `ROW_BLOCK` rows of the weight (views: no copy), each
  block's columns of the result written in place (eager's layout). An LM head's
  128x768x50257 on two AVX2 cores takes 73-83 ms so, against 100-130 as `linear(x, w)`.

On CUDA, products with a bias (torch's call is cuBLASLt's GEMM with the bias in its
epilogue):

- `bias-apart`: the product without its bias, then the bias added in place. In f32 the
  epilogue can steer cuBLASLt to slower kernels (split K and extra reduction kernels): on an
  H200, TF32 off, 128x3072x768 takes 54 us with the bias and 26 us apart, 4096x3072x768 507
  against 424; in bf16 the epilogue is nearly free and apart is slower (1.3-1.9x).

A candidate (`gemm_of`) is a `graph.linear` by an `[N, K]` weight (on CUDA: with a bias), or
on the CPU a `graph.matmul` of a 2-D operand by a `[K, N]` weight, every operand of one dtype
(on the CPU f32) and of static shape, the weight a parameter or a static input of the program
(`held_args`): one choice per product of a model's weights, measured once.

No way keeps anything made from the weight between calls: each call reads the weight as
it is then, as eager does, so every change to it is seen, in place or not, a write through
`.data` too (which no version counter records). Every way is as accurate as torch's call: on
the CPU each output is the same dot product, summed by MKL (`blocked`) or by oneDNN over at
most `ONEDNN_MAX_K` terms (over longer rows oneDNN's f32 sum has about twice MKL's RMSE
against an f64 reference, which breaks xfuse's rule: no worse than twice eager's); `bias-apart`
rounds the product before adding the bias, as eager's `x @ w.t() + b` does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import NamedTuple

import torch
from xdsl.ir import BlockArgument, Operation

from xfuse.dialects import graph
from xfuse.ir.dtypes import to_torch

Tensor = torch.Tensor

ONEDNN, BLOCKED, BIAS_APART = "onednn", "blocked", "bias-apart"
"""The ways (`ways`, `ChosenGemm`), as verdicts and step labels name them."""

DTYPES = {"cpu": (torch.float32,), "cuda": (torch.float32, torch.float16, torch.bfloat16)}
"""The dtypes of a candidate's operands, by device type."""

ONEDNN_MAX_K = 256
"""The longest K that oneDNN sums for xfuse: the RMSE against an f64 reference over MKL's
(`torch.nn.functional.linear`), random normal data, M=128, K and N of GPT-2, BERT and Llama
(768..3072): oneDNN over the whole K 1.95-2.32x; over 256 1.13-1.17x; 384 1.35-1.40x; 512
1.47-1.64x (tests/runtime/test_gemm_ways.py checks the 2x rule)."""

ROW_BLOCK = 1024
"""Rows of the weight (columns of the result) per MKL call of the `blocked` way. An LM head,
M=128, K=768, N=50257, two AVX2 cores, medians of 7 interleaved calls: blocks of 256 rows 77
ms, 512 74, 1024 73, 2048 80, one call 128; K=1024, N=32000: 73 / 80 / 82 / 88 / 98."""


class Gemm(NamedTuple):
    """A candidate product: `x` [M, K] (leading dims flattened) by a weight stored [N, K]
    (`linear`) or [K, N] (`matmul`, `transposed`), on a device of type `device`, its operands
    of `dtype`, with a bias or not."""

    m: int
    k: int
    n: int
    transposed: bool
    device: str = "cpu"
    dtype: torch.dtype = torch.float32
    bias: bool = False

    @property
    def work(self) -> int:
        return self.m * self.k * self.n

    @property
    def signature(self) -> str:
        """`MxKxN nk` (or `kn`), on CUDA with the dtype and the bias: `128x768x768 nk
        float32 bias`."""
        layout = "kn" if self.transposed else "nk"
        if self.device == "cpu":
            return f"{self.m}x{self.k}x{self.n} {layout}"
        bias = " bias" if self.bias else ""
        return f"{self.m}x{self.k}x{self.n} {layout} {str(self.dtype).removeprefix('torch.')}{bias}"


def onednn_available() -> bool:
    """Whether this torch has oneDNN's linear (`mkldnn._linear_pointwise`) on this CPU."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def gemm_of(op: Operation, held: Collection[int], device: str = "cpu") -> Gemm | None:
    """`op` as a candidate product on a device of type `device` (see the module docstring),
    or None: its weight the argument of `@forward` at one of the positions `held`, every
    operand of one dtype of `DTYPES[device]` and of static shape."""
    bias = len(op.operands) > 2
    if isinstance(op, graph.LinearOp) and (bias or device == "cpu"):
        weight, transposed = op.operands[1], False
    elif isinstance(op, graph.MatmulOp) and len(graph.shape_of(op.lhs)) == 2 and device == "cpu":
        weight, transposed = op.rhs, True
    else:
        return None
    if not isinstance(weight, BlockArgument) or weight.index not in held:
        return None
    if weight.owner is not op.parent_block() or len(graph.shape_of(weight)) != 2:
        return None
    dtypes = {to_torch(graph.dtype_of(v)) for v in (*op.operands, *op.results)}
    if len(dtypes) != 1 or not dtypes <= set(DTYPES.get(device, ())):
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
    if device == "cpu":
        return Gemm(m, k, n, transposed)
    return Gemm(m, k, n, transposed, device, dtypes.pop(), bias)


def ways(gemm: Gemm) -> tuple[str, ...]:
    """The ways `gemm` may run other than torch's call: on CUDA `bias-apart`; on the CPU
    `onednn` only for an [N, K] weight of at most `ONEDNN_MAX_K` columns (read as it is)
    where this torch has oneDNN's linear, `blocked` always."""
    if gemm.device != "cpu":
        return (BIAS_APART,)
    if not gemm.transposed and gemm.k <= ONEDNN_MAX_K and onednn_available():
        return (ONEDNN, BLOCKED)
    return (BLOCKED,)


def onednn_gemm(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """`linear(x, weight, bias)` by oneDNN, its [N, K] weight as it is; x copied contiguous
    where it is not (oneDNN is many times slower on strided views)."""
    k = x.size(-1)
    rows = x.reshape(-1, k).contiguous()
    out = torch.ops.mkldnn._linear_pointwise(rows, weight.contiguous(), bias, "none", [], "")
    return out.reshape(*x.shape[:-1], out.size(-1))


def blocked_gemm(x: Tensor, weight: Tensor, bias: Tensor | None, transposed: bool) -> Tensor:
    """`linear(x, weight, bias)` (`transposed`: `x @ weight`) as MKL's GEMMs of blocks of
    `ROW_BLOCK` rows of the [N, K] weight, each writing its columns of the result in place."""
    k = x.size(-1)
    rows = x.reshape(-1, k)
    kn = weight if transposed else weight.t()
    n = kn.size(1)
    out = torch.empty((rows.size(0), n), dtype=x.dtype, device=x.device)
    for start in range(0, n, ROW_BLOCK):
        block = slice(start, start + ROW_BLOCK)
        if bias is None:
            torch.mm(rows, kn[:, block], out=out[:, block])
        else:
            torch.addmm(bias[block], rows, kn[:, block], out=out[:, block])
    return out.reshape(*x.shape[:-1], n)


def bias_apart(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """`linear(x, weight)`, then `bias` added to it in place."""
    out = torch.nn.functional.linear(x, weight)
    return out if bias is None else out.add_(bias)


class ChosenGemm:
    """One chosen product's call, its way and layout fixed: the runner calls it as it calls
    torch's (`linear(x, w, b)`, `mm(x, w)`)."""

    def __init__(self, way: str, transposed: bool) -> None:
        if way not in (ONEDNN, BLOCKED, BIAS_APART) or (way != BLOCKED and transposed):
            raise ValueError(f"no {way} way for a {'[K, N]' if transposed else '[N, K]'} weight")
        self.way = way
        self.transposed = transposed
        self._gemm: Callable[[Tensor, Tensor, Tensor | None], Tensor]
        if way == BLOCKED:
            self._gemm = functools.partial(blocked_gemm, transposed=transposed)
        else:
            self._gemm = onednn_gemm if way == ONEDNN else bias_apart

    def __call__(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        return self._gemm(x, weight, bias)

    def __repr__(self) -> str:
        return f"ChosenGemm({self.way!r}, transposed={self.transposed})"
