"""Fresh CPU outputs (`xfuse.runtime.memory`): large ones in huge pages, exact either way, with
recycling on and off."""

from __future__ import annotations

import pytest
import torch

import xfuse
import xfuse.runtime.memory as memory
from xfuse.runtime.memory import empty_cpu, huge_pages_available

needs_huge_pages = pytest.mark.skipif(
    not huge_pages_available(), reason="no transparent huge pages here"
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_a_large_buffer_is_a_writable_contiguous_tensor(dtype: torch.dtype) -> None:
    shape = (3, (memory.HUGE_PAGE_MIN_BYTES // dtype.itemsize) // 3 + 5)
    out = empty_cpu(shape, dtype)
    assert out.shape == shape and out.dtype == dtype and out.is_contiguous()
    source = torch.arange(out.numel()).reshape(shape).to(dtype)
    out.copy_(source)
    assert torch.equal(out, source)


@needs_huge_pages
def test_large_buffers_are_mapped_small_ones_come_from_torch() -> None:
    large = empty_cpu((memory.HUGE_PAGE_MIN_BYTES // 4,), torch.float32)
    small = empty_cpu((memory.HUGE_PAGE_MIN_BYTES // 4 - 1,), torch.float32)
    assert not large.untyped_storage().resizable()  # the mapping owns it
    assert small.untyped_storage().resizable()  # torch's allocator


def test_huge_pages_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XFUSE_HUGE_PAGES", "0")
    huge_pages_available.cache_clear()
    try:
        assert not huge_pages_available()
        assert empty_cpu((memory.HUGE_PAGE_MIN_BYTES,), torch.uint8).untyped_storage().resizable()
    finally:
        monkeypatch.delenv("XFUSE_HUGE_PAGES")
        huge_pages_available.cache_clear()


def gelu_affine(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x * 2 + 1)


@pytest.mark.parametrize("recycle", ["0", "1"])
def test_programs_with_huge_page_outputs_match_eager(
    monkeypatch: pytest.MonkeyPatch, recycle: str
) -> None:
    monkeypatch.setenv("XFUSE_REUSE_OUTPUTS", recycle)
    monkeypatch.setattr(memory, "HUGE_PAGE_MIN_BYTES", 1 << 16)  # every output here
    x = torch.randn(129, 257)
    program = xfuse.compile(gelu_affine, (x,), quiet=True)
    kept = []
    for _ in range(3):
        x = torch.randn(129, 257)
        out = program(x)
        torch.testing.assert_close(out, gelu_affine(x))
        kept.append((out, gelu_affine(x)))
    for out, expected in kept:  # outputs the caller keeps are never overwritten
        torch.testing.assert_close(out, expected)
