"""
Fresh CPU memory for kernel outputs. A large buffer is memory the C allocator maps from the
system on every call (glibc maps blocks of 32 MiB and more afresh, and unmaps them when they are
freed), and its first writes page-fault once per 4 KiB page: for a 64 MiB output, 16384 faults,
which cost several times the kernel that fills it. Such buffers are mapped here with transparent
huge pages asked for (`madvise(MADV_HUGEPAGE)`, as torch's `THP_MEM_ALLOC_ENABLE=1` does for its
own allocations): one fault per 2 MiB. The memory is still fresh on every call, and returns to
the system when the tensor's storage is freed (the storage holds the mapping).

    out = empty_cpu((4096, 4096), torch.float32)

Smaller buffers of a shape a program allocates at every call come from `cpu_buffer_maker`:
torch's CPU allocation without the dispatcher, as Inductor's generated code calls it.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Callable
from functools import cache, partial

import torch

from xfuse.dialects.graph import row_major_strides

HUGE_PAGE_MIN_BYTES = 32 << 20
"""Buffers from this size on are mapped with huge pages; smaller ones come from torch (glibc
keeps and reuses freed blocks below its mapping threshold, 32 MiB at most, so they fault only
the first time)."""


@cache
def huge_pages_available() -> bool:
    """Whether transparent huge pages can be asked for (Linux, not turned off), unless
    `XFUSE_HUGE_PAGES=0`."""
    if os.environ.get("XFUSE_HUGE_PAGES") == "0" or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


def empty_cpu(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised contiguous CPU tensor, in huge pages when it is large."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < HUGE_PAGE_MIN_BYTES or not huge_pages_available():
        return torch.empty(shape, dtype=dtype)
    try:
        mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        mapping.madvise(mmap.MADV_HUGEPAGE)
    except OSError:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(mapping, dtype=torch.uint8).view(dtype).view(shape)


def cpu_buffer_maker(shape: tuple[int, ...], dtype: torch.dtype) -> Callable[[], torch.Tensor]:
    """A function of no arguments that makes an uninitialised contiguous CPU tensor of `shape`
    and `dtype`, made once per shape: `empty_cpu`'s huge pages where it is large, else torch's
    `empty_strided_cpu` called directly (no argument parsing or dispatch: about a third of
    `torch.empty`'s cost; the memory and the tensor are the same), or `torch.empty` where this
    torch has no such function."""
    if math.prod(shape) * dtype.itemsize >= HUGE_PAGE_MIN_BYTES:
        return partial(empty_cpu, shape, dtype)
    direct = getattr(torch._C._dynamo.guards, "_empty_strided_cpu", None)
    if direct is None:
        return partial(torch.empty, shape, dtype=dtype)
    return partial(direct, shape, row_major_strides(shape), dtype)
