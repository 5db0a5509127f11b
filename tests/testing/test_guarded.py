"""Buffers between guard bands (`xfuse.testing.guarded`): a write past a kernel's output is
seen, named, and failed by the fuzzer's CPU stage."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest
import torch

import xfuse
from xfuse.runtime.steps import BufferSpec, KernelStep
from xfuse.testing.fuzz.runner import check_source
from xfuse.testing.fuzz.training import check_training
from xfuse.testing.guarded import CANARY, GUARD_BYTES, GuardedPool, guarded_buffers, guarded_pools


def _write_after(t: torch.Tensor, nbytes: int) -> None:
    """Write `nbytes` zero bytes just past the end of `t`'s memory, as a faulty kernel would."""
    ctypes.memset(t.data_ptr() + t.numel() * t.element_size(), 0, nbytes)


def test_a_write_past_a_buffer_is_named() -> None:
    pool = GuardedPool()
    flags = pool.allocate(BufferSpec((6, 1, 33), torch.bool))
    values = pool.allocate(BufferSpec((4, 8), torch.float32))
    flags.fill_(True)
    values.fill_(1.0)
    assert pool.overwritten() == []
    _write_after(flags, 3)
    assert pool.overwritten() == ["bool[6, 1, 33]: 3 bytes after it"]


def test_buffers_are_aligned_and_banded() -> None:
    pool = GuardedPool()
    t = pool.allocate(BufferSpec((5,), torch.float64))
    assert t.data_ptr() % 64 == 0 and t.is_contiguous()
    ((_, memory),) = pool.guarded
    assert memory.numel() == 5 * 8 + 2 * GUARD_BYTES
    assert bool((memory[:GUARD_BYTES] == CANARY).all())


def test_a_compiled_program_allocates_from_the_guarded_pool() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.signbit(torch.where(x > 0.5, x, -2.5)), x.exp() + 1

    x = torch.randn(6, 33)
    program = xfuse.compile(f, (x,), quiet=True)
    with guarded_buffers(program.default) as pool:
        got = program(x)
    assert pool.allocations >= 2 and pool.overwritten() == []
    torch.testing.assert_close(got, f(x))
    assert pool not in program.default._pools  # noqa: SLF001 - the next calls take their own


SOURCE = """
import torch

TOLERANCE = "strict"
SCALE = 1.0


def program(x0):
    return (torch.exp(x0) + 1, )


def make_inputs():
    g = torch.Generator().manual_seed(5)
    return (torch.randn((4, 8), generator=g), )
"""


def _overrun_every_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kernel step writes 4 bytes past its first output after it runs."""
    real = KernelStep.run

    def overrunning(self: KernelStep, args: list[torch.Tensor], allocate: Any) -> Any:
        outs = real(self, args, allocate)
        _write_after(outs[0], 4)
        return outs

    monkeypatch.setattr(KernelStep, "direct_call", lambda self: None)
    monkeypatch.setattr(KernelStep, "run", overrunning)


def test_the_fuzzer_fails_a_kernel_that_writes_past_its_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert check_source(SOURCE).status == "pass"
    _overrun_every_kernel(monkeypatch)
    outcome = check_source(SOURCE)
    assert (outcome.status, outcome.stage) == ("fail", "cpu (bounds)"), str(outcome)
    assert outcome.message == "a kernel wrote past a buffer: float32[4, 8]: 4 bytes after it"


TRAINING_SOURCE = SOURCE.replace("torch.exp(x0) + 1", "torch.exp(x0 * 0.5) + x0")


def test_a_training_steps_programs_allocate_between_guard_bands() -> None:
    """Inside `guarded_pools`, the programs AOTAutograd's forward and backward run through
    (made inside `torch.compile`, out of the caller's sight) take guarded pools."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x * 0.5) + x

    compiled = torch.compile(f, backend="xfuse")
    x = torch.randn(4, 8, requires_grad=True)
    with guarded_pools() as pools:
        compiled(x).sum().backward()
    torch._dynamo.reset()
    assert pools and sum(p.allocations for p in pools) >= 2
    assert all(p.overwritten() == [] for p in pools)
    expected = torch.exp(x.detach() * 0.5) * 0.5 + 1
    torch.testing.assert_close(x.grad, expected)


def test_the_training_fuzzer_fails_a_kernel_that_writes_past_its_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert check_training(TRAINING_SOURCE).status == "pass"
    _overrun_every_kernel(monkeypatch)
    outcome = check_training(TRAINING_SOURCE)
    assert (outcome.status, outcome.stage) == ("fail", "first step (bounds)"), str(outcome)
    assert outcome.message.startswith("a kernel wrote past a buffer: float32[4, 8]: 4 bytes")
