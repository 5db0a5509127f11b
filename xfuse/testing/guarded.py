"""
Buffers with guard bands, to catch a kernel that writes past its outputs: every buffer a
program's call allocates lies between `GUARD_BYTES` of `CANARY` on each side, and after the
call the bands are read back. A write past a buffer is otherwise silent: it lands in memory
the C allocator owns, and the process dies later, elsewhere (`malloc_consolidate(): invalid
chunk size`), if at all.

    with guarded_buffers(compiled.default) as pool:
        compiled(*inputs)
    pool.overwritten()       # ["bool[6, 1, 33]: 3 bytes after it"], or []

The fuzzer's CPU stage calls each program once so (`xfuse.testing.fuzz.runner`). Where the
programs are made out of sight (a training step through `torch.compile`: AOTAutograd's forward
and backward programs), every pool that a call makes inside `guarded_pools` is guarded:

    with guarded_pools() as pools:
        loss = compiled(*inputs).sum(); loss.backward()
    [line for pool in pools for line in pool.overwritten()]
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from xfuse.runtime.executor import Executable
from xfuse.runtime.steps import POOL_FACTORY, BufferPool, BufferSpec

GUARD_BYTES = 64
"""Bytes of `CANARY` on each side of a buffer: a whole AVX-512 vector (a vector store one
vector past the end lands in the band), and a multiple of any element's alignment."""

CANARY = 0xA5
"""The byte a guard band holds (no float's or small integer's byte pattern a kernel writes by
chance: 0xA5A5A5A5 is a float of about -2.9e-16)."""


class GuardedPool(BufferPool):
    """A `BufferPool` whose every new buffer has guard bands (`GUARD_BYTES` of `CANARY`
    before and after it in one allocation); released buffers are reused as the pool's are."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        super().__init__(device)
        self.guarded: list[tuple[BufferSpec, torch.Tensor]] = []
        """Each buffer's spec and its whole memory, bands included."""

    def _new(self, spec: BufferSpec) -> torch.Tensor:
        nbytes = math.prod(spec.shape) * spec.dtype.itemsize
        memory = torch.full(
            (nbytes + 2 * GUARD_BYTES,), CANARY, dtype=torch.uint8, device=self.device
        )
        self.guarded.append((spec, memory))
        self.allocations += 1
        inner = memory[GUARD_BYTES : GUARD_BYTES + nbytes]
        return inner.view(spec.dtype).view(spec.shape)

    def overwritten(self) -> list[str]:
        """One line per buffer whose guard bands changed: its dtype and shape, and how many
        bytes before and after it were written."""
        found = []
        for spec, memory in self.guarded:
            before = int((memory[:GUARD_BYTES] != CANARY).sum())
            after = int((memory[memory.numel() - GUARD_BYTES :] != CANARY).sum())
            if before or after:
                where = [
                    f"{n} bytes {side} it"
                    for n, side in ((before, "before"), (after, "after"))
                    if n
                ]
                name = str(spec.dtype).removeprefix("torch.")
                found.append(f"{name}{list(spec.shape)}: {', '.join(where)}")
        return found


@contextmanager
def guarded_buffers(executable: Executable) -> Iterator[GuardedPool]:
    """The next call of `executable` (one specialisation of a `CompiledProgram`, by the
    calling thread) allocates from a `GuardedPool`, which the block gets."""
    pool = GuardedPool(executable.device)
    executable._pools.append(pool)  # a call takes the last pool  # noqa: SLF001
    try:
        yield pool
    finally:
        if pool in executable._pools:  # noqa: SLF001
            executable._pools.remove(pool)  # noqa: SLF001


@contextmanager
def guarded_pools() -> Iterator[list[GuardedPool]]:
    """Inside, a program's call that finds no free pool (its first, or one beside another)
    makes a `GuardedPool` (`xfuse.runtime.steps.POOL_FACTORY`, in this thread and context);
    the block gets the list of those made. The pools stay the programs' after the block."""
    made: list[GuardedPool] = []

    def make(device: torch.device) -> BufferPool:
        pool = GuardedPool(device)
        made.append(pool)
        return pool

    token = POOL_FACTORY.set(make)
    try:
        yield made
    finally:
        POOL_FACTORY.reset(token)
