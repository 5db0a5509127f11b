"""Kernels compiled ahead in worker processes (xfuse.runtime.compile_workers): the same PTX as
in-process, put in the kernel cache, and nothing changed where a worker fails. PTX needs no
GPU, so this runs everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from xfuse.api import DEFAULT_PIPELINE, import_for_xfuse, run_pipeline
from xfuse.backends.cpu import CPUBackend
from xfuse.backends.cuda import CUDABackend
from xfuse.errors import XfuseError
from xfuse.runtime.cache import KernelCache, KernelSource, _only_kernel
from xfuse.runtime.compile_workers import (
    WORKERS_ENV,
    backend_spec,
    can_compile_ahead,
    compile_in_workers,
    workers,
)
from xfuse.runtime.compiler import ProgramCompiler


def _program(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.softmax(x @ w, dim=-1)
    h = F.layer_norm(torch.relu(h @ w) * 2, (16,))
    h = torch.sigmoid(h @ w) + 1
    return torch.tanh(h @ w).sum(dim=0)


def _kernel_modules() -> list[KernelSource]:
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    module = import_for_xfuse(_program, (x, w), {}).program.module
    run_pipeline(DEFAULT_PIPELINE, module)
    compiler = ProgramCompiler(lambda m, n: None)
    return compiler.kernel_modules(module)


def test_workers_compile_what_the_process_would(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(WORKERS_ENV, "2")
    modules = _kernel_modules()
    assert len(modules) >= 4
    backend = CUDABackend("sm_90")
    cache = KernelCache(tmp_path)
    assert cache.compile_ahead(backend, modules) == len({m.text for m in modules})
    for source in modules:
        assert source.text == str(source.module)  # what the key is made of
        key = cache.key(backend, source)
        assert key == cache.key(backend, source.module)
        symbol = _only_kernel(source.module)
        assert symbol is not None
        assert cache._artifacts[key] == backend.compile(source.module, symbol)
        assert cache.entry_path(key).exists()
    # a second time, everything is cached: no work
    assert cache.compile_ahead(backend, modules) == 0
    assert KernelCache(tmp_path).compile_ahead(backend, modules) == 0  # on disk


def test_a_job_that_fails_is_left_to_the_caller() -> None:
    spec = backend_spec(CUDABackend("sm_90"))
    assert spec is not None
    assert compile_in_workers(spec, [("not IR", "k"), ("nor this", "k")], 2) == [None, None]


def test_a_worker_that_fails_changes_nothing() -> None:
    assert compile_in_workers(("no such backend", None), [("x", "k")], 2) == [None]


def test_only_backends_a_worker_rebuilds_take_part(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKERS_ENV, "4")
    assert can_compile_ahead(CUDABackend("sm_90"))
    assert not can_compile_ahead(CPUBackend())  # its code depends on the compiling process
    monkeypatch.setenv(WORKERS_ENV, "1")
    assert not can_compile_ahead(CUDABackend("sm_90"))


def test_the_worker_count_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKERS_ENV, "3")
    assert workers() == 3
    monkeypatch.setenv(WORKERS_ENV, "many")
    with pytest.raises(XfuseError, match=WORKERS_ENV):
        workers()
    monkeypatch.delenv(WORKERS_ENV)
    assert 0 <= workers() <= 8
