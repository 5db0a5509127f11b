"""Output recycling is exact: a returned buffer's memory goes back to the pool only
when its storage is freed, whoever held it: another process, DLPack, numpy, views, weak
references, threads."""

from __future__ import annotations

import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import xfuse

Tensor = torch.Tensor


SHAPE = (256, 256)
"""256 KiB of f32: outputs this large are pool memory (`RECYCLE_MIN_BYTES`; smaller ones are
plain torch memory)."""


def affine(x: Tensor) -> Tensor:
    return x * 2 + 1


@pytest.fixture(scope="module")
def program() -> Any:
    return xfuse.compile(affine, (torch.randn(*SHAPE),), quiet=True)


def test_a_dropped_output_is_reused(program: Any) -> None:
    x = torch.randn(*SHAPE)
    address = program(x).data_ptr()  # dropped at once
    assert program(x).data_ptr() == address


@pytest.mark.parametrize(
    "hold",
    [
        lambda y: y[1:],
        lambda y: y.t(),
        lambda y: y.numpy(),
        lambda y: np.asarray(y)[3:],
        lambda y: torch.utils.dlpack.to_dlpack(y),
        lambda y: torch.from_dlpack(y),
        lambda y: y.untyped_storage(),
    ],
    ids=["slice", "transpose", "numpy", "numpy-view", "dlpack-capsule", "from-dlpack", "storage"],
)
def test_memory_held_any_way_is_not_reused(program: Any, hold: Callable[[Tensor], Any]) -> None:
    x = torch.randn(*SHAPE)
    y = program(x)
    expected = read_back(hold(affine(x))).clone()
    held, address = hold(y), y.data_ptr()
    del y
    for _ in range(3):
        assert program(torch.randn(*SHAPE)).data_ptr() != address
    assert torch.equal(read_back(held), expected)


def read_back(held: Any) -> Tensor:
    if isinstance(held, torch.UntypedStorage):
        return torch.empty(0).set_(held).reshape(-1)
    if type(held).__name__ == "PyCapsule":
        return torch.from_dlpack(held).reshape(-1)
    return torch.as_tensor(held).reshape(-1)


def test_a_weak_reference_holds_nothing(program: Any) -> None:
    x = torch.randn(*SHAPE)
    y = program(x)
    ref, address = weakref.ref(y), y.data_ptr()
    assert program(x).data_ptr() != address  # y is alive
    del y
    assert ref() is None
    assert program(x).data_ptr() == address


def test_threads_never_see_each_others_results(program: Any) -> None:
    failures: list[str] = []

    def work(seed: int) -> None:
        kept = []
        for i in range(40):
            x = torch.full(SHAPE, float(seed * 100 + i))
            kept.append((x, program(x)))
            if i % 3:
                kept.pop(0)  # dropped: recycled while the other threads run
        for x, y in kept:
            if not torch.equal(y, affine(x)):
                failures.append(f"thread {seed}")

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


CONSUMER = """
import sys
import torch
import torch.multiprocessing as mp

import xfuse


def consume(queue, got, go, results):
    y = queue.get()
    got.set()
    go.wait()
    results.put(y.tolist())


def affine(x):
    return x * 2 + 1


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    queue, results, got, go = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Event()
    consumer = ctx.Process(target=consume, args=(queue, got, go, results))
    consumer.start()
    program = xfuse.compile(affine, (torch.randn(256, 256),), quiet=True)
    x = torch.randn(256, 256)
    y = program(x)
    if sys.argv[1] == "share":
        y.share_memory_()
    queue.put(y)
    got.wait()
    del y
    for i in range(5):
        program(torch.full((256, 256), float(i)))  # dropped: recycled
    go.set()
    seen = results.get()
    consumer.join()
    print("same" if seen == affine(x).tolist() else "overwritten")
"""


@pytest.mark.parametrize("how", ["share", "queue"])
def test_another_process_reading_an_output_sees_its_values(tmp_path: Path, how: str) -> None:
    script = tmp_path / "consumer.py"
    script.write_text(CONSUMER)
    run = subprocess.run(
        [sys.executable, str(script), how], capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "same"
