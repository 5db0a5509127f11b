"""Every SDPA form torch may hand the importer becomes the one extern
`aten.scaled_dot_product_attention` call (its extra results dropped), and computes attention."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import xfuse
from xfuse.dialects import graph
from xfuse.frontend.attention import SDPA
from xfuse.frontend.importer import import_module

A = torch.ops.aten
Fn = Callable[..., torch.Tensor]

KERNELS: dict[str, Fn] = {
    "flash": lambda q, k, v: A._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0],
    "efficient": lambda q, k, v: A._scaled_dot_product_efficient_attention(
        q, k, v, None, False, 0.0, True
    )[0],
    "cudnn": lambda q, k, v: A._scaled_dot_product_cudnn_attention(q, k, v, None, False, 0.0, True)[
        0
    ],
    "cpu-flash": lambda q, k, v: A._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)[
        0
    ],
    "math": lambda q, k, v: A._scaled_dot_product_attention_math(q, k, v, None, 0.0, True)[0],
    "composite": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
}


def _qkv() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(1, 4, 16, 8), torch.randn(1, 4, 16, 8), torch.randn(1, 4, 16, 8)


@pytest.mark.parametrize("name", list(KERNELS))
def test_every_sdpa_kernel_imports_as_one_extern_call(name: str) -> None:
    program = import_module(KERNELS[name], _qkv())
    ops = [op for op in program.function.body.block.ops if op.name != "func.return"]
    # Where torch lays the kernel's output out [B, T, H, D] (the efficient kernel's), the
    # call's result is in that memory order, permuted back to [B, H, T, D].
    assert ops[0].name == "graph.torch_call" and len(ops) <= 2
    assert all(graph.restores_torch_layout(op) for op in ops[1:])
    assert ops[0].properties["target"].data == SDPA  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["cpu-flash", "math", "composite"])
def test_sdpa_kernels_compile_and_match_eager(name: str) -> None:
    q, k, v = _qkv()
    got = xfuse.compile(KERNELS[name], (q, k, v), quiet=True, fallback="error")(q, k, v)
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_a_mask_and_a_scale_are_passed_on() -> None:
    q, k, v = _qkv()
    bias = torch.randn(1, 1, 16, 16)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return A._scaled_dot_product_efficient_attention(q, k, v, b, False, 0.0, False, scale=0.5)[
            0
        ]

    program = import_module(fn, (q, k, v, bias))
    assert sum(op.name == "graph.torch_call" for op in program.function.body.block.ops) == 1

    def cpu_fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return A._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, False, attn_mask=b, scale=0.5
        )[0]

    got = xfuse.compile(cpu_fn, (q, k, v, bias), quiet=True, fallback="error")(q, k, v, bias)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.5)
    torch.testing.assert_close(got, want)


def test_a_kernel_whose_extra_result_is_read_stays_itself() -> None:
    def with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out, lse = A._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False)
        return out.sum() + lse.sum()

    q, k, v = _qkv()
    program = import_module(with_lse, (q, k, v))
    targets = [
        op.properties["target"].data  # type: ignore[union-attr]
        for op in program.function.body.block.ops
        if op.name == "graph.torch_call"
    ]
    assert targets == ["aten._scaled_dot_product_flash_attention_for_cpu.default"]
    got = xfuse.compile(with_lse, (q, k, v), quiet=True)(q, k, v)
    torch.testing.assert_close(got, with_lse(q, k, v))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_on_cuda_compiles_strict(dtype: torch.dtype) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    q, k, v = (t.to("cuda", dtype) for t in _qkv())
    fn = KERNELS["composite"]
    got = xfuse.compile(fn, (q, k, v), "cuda", quiet=True, fallback="error")(q, k, v)
    torch.testing.assert_close(got, fn(q, k, v))


def test_a_program_of_mapped_ops_and_attention_is_not_decomposed() -> None:
    """Decomposing is the slow part of an import; attention is an
    extern either way, so a program of mapped ops and attention is imported as exported, to
    the same attention call."""
    from xfuse.frontend.importer import needs_decomposition
    from xfuse.frontend.pytrees import export_support

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q * 2, k, v, is_causal=True).relu()

    q, k, v = _qkv()
    with export_support():
        exported = torch.export.export(xfuse.frontend.importer.wrap_function(f), (q, k, v))
    assert not needs_decomposition(exported)
    imported = import_module(f, (q, k, v))
    calls = [op for op in imported.module.walk() if op.name == "graph.torch_call"]
    assert [op.target.data for op in calls] == [SDPA]  # type: ignore[attr-defined]
    torch.testing.assert_close(xfuse.compile(f, (q, k, v), quiet=True)(q, k, v), f(q, k, v))
