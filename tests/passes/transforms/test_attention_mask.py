"""`attention-mask`: attention with a constant boolean mask that hides nothing runs without it,
with a constant causal one as `is_causal=True`; the program computes what it did, bit for bit
(the graph interpreter, and `xfuse.compile` against eager); other masks are left alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import xfuse
from tests.backends.test_cuda import gpu
from xfuse import interpret
from xfuse.dialects import graph
from xfuse.frontend import import_module
from xfuse.passes.transforms.attention_mask import mask_kind
from xfuse.runtime.driver import run_pipeline

Mask = Callable[[int, int], torch.Tensor]


def causal(length: int, source: int) -> torch.Tensor:
    """transformers' traced causal mask: query i sees keys j <= i (iotas and a compare)."""
    return torch.arange(source)[None, :] <= torch.arange(length)[:, None]


def visible(length: int, source: int) -> torch.Tensor:
    return torch.arange(source)[None, :] >= 0  # [1, S]: every key, every query


def below(length: int, source: int) -> torch.Tensor:
    return torch.arange(source)[None, :] < torch.arange(length)[:, None]  # hides the diagonal


def attention(mask: Mask) -> Callable[..., torch.Tensor]:
    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        m = mask(q.shape[-2], k.shape[-2])[None, None].to(q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    return f


def _sdpa_calls(module: object) -> list[graph.TorchCallOp]:
    return [
        op
        for op in module.walk()  # type: ignore[attr-defined]
        if isinstance(op, graph.TorchCallOp) and "scaled_dot_product" in op.target.data
    ]


@pytest.mark.parametrize(
    ("mask", "kind", "length", "source"),
    [(causal, "causal", 8, 8), (causal, "causal", 5, 8), (visible, "none", 8, 8)],
    ids=["causal", "causal-5x8", "visible"],
)
def test_the_mask_goes_and_the_values_stay_bit_for_bit(
    mask: Mask, kind: str, length: int, source: int
) -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, length, 16, generator=g)
    k, v = (torch.randn(2, 4, source, 16, generator=g) for _ in range(2))
    fn = attention(mask)
    imported = import_module(fn, (q, k, v))
    args = imported.arguments(q, k, v)
    run_pipeline("decompose", imported.module)
    before = interpret(imported.module, args)
    run_pipeline("attention-mask", imported.module)
    imported.module.verify()
    (call,) = _sdpa_calls(imported.module)
    assert len(call.inputs) == 3  # q, k, v: no mask operand
    assert ("is_causal" in call.kwargs.data) == (kind == "causal")
    after = interpret(imported.module, args)
    assert torch.equal(after[0], before[0])
    compiled = xfuse.compile(fn, (q, k, v), fallback="error")
    assert torch.equal(compiled(q, k, v), fn(q, k, v))


@pytest.mark.parametrize("mask", [below], ids=["strictly-below"])
def test_other_constant_masks_stay(mask: Mask) -> None:
    q = torch.randn(1, 2, 8, 16)
    imported = import_module(attention(mask), (q, q.clone(), q.clone()))
    run_pipeline("decompose,attention-mask", imported.module)
    (call,) = _sdpa_calls(imported.module)
    assert len(call.inputs) == 4 and "is_causal" not in call.kwargs.data


def test_a_mask_the_call_computes_stays() -> None:
    def f(q: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        m = torch.arange(q.shape[-2])[None, :] < lengths[:, None]  # padding from an input
        return F.scaled_dot_product_attention(q, q, q, attn_mask=m[:, None, None, :])

    q, lengths = torch.randn(2, 2, 8, 16), torch.tensor([8, 5])
    imported = import_module(f, (q, lengths))
    run_pipeline("decompose,attention-mask", imported.module)
    (call,) = _sdpa_calls(imported.module)
    assert len(call.inputs) == 2  # q (read three times) and the mask
    compiled = xfuse.compile(f, (q, lengths), fallback="error")
    assert torch.equal(compiled(q, lengths), f(q, lengths))


def test_mask_kinds() -> None:
    assert mask_kind(causal(4, 4)[None, None].expand(2, 3, 4, 4), (2, 3, 4, 4)) == "causal"
    assert mask_kind(causal(4, 6), (1, 2, 4, 6)) == "causal"
    assert mask_kind(causal(4, 4), (1, 2, 4, 6)) is None  # not the shape is_causal applies
    assert mask_kind(torch.ones(1, 4, dtype=torch.bool), (1, 2, 4, 4)) == "none"
    assert mask_kind(below(4, 4), (1, 2, 4, 4)) is None
    assert mask_kind(torch.zeros(4, 4), (1, 2, 4, 4)) is None  # an additive float mask
    # a mask with more batches than the query would shape the result: it stays
    assert mask_kind(torch.ones(3, 2, 4, 4, dtype=torch.bool), (1, 2, 4, 4)) is None


def test_mask_kinds_of_a_mask_held_compact() -> None:
    """A mask held at size 1 where it is the same all along a dim (`evaluate_compact`), of the
    shape its third argument gives: judged as the whole mask."""
    held = causal(4, 4)[None, None]
    assert mask_kind(held, (2, 3, 4, 4), (2, 1, 4, 4)) == "causal"
    assert mask_kind(held, (1, 3, 4, 4), (2, 1, 4, 4)) is None  # more batches than the query
    assert mask_kind(causal(4, 4)[:1], (2, 3, 4, 4), (2, 1, 4, 4)) is None  # each row the same
    assert mask_kind(torch.ones(1, 1, 4, 1, dtype=torch.bool), (2, 3, 4, 4), (2, 3, 4, 4)) == "none"
    assert mask_kind(torch.zeros(1, 1, 1, 1, dtype=torch.bool), (2, 3, 4, 4), (2, 3, 4, 4)) is None


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_causal_mask_runs_eagers_causal_kernel(dtype: torch.dtype) -> None:
    """On CUDA the traced causal mask runs as `is_causal=True`: the kernel eager's call (no
    mask) runs, bit for bit, not the memory-efficient one a mask selects."""
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 64, generator=g, device="cuda", dtype=dtype) for _ in range(3))
    compiled = xfuse.compile(attention(causal), (q, k, v), device="cuda", fallback="error")
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.equal(compiled(q, k, v), want)
