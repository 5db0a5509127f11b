"""Units lowered and kernels compiled ahead in worker processes (xfuse.runtime.compile_workers):
the same lowered units, kernel texts and PTX as in-process, put in the kernel cache, nothing
changed where a worker fails, and a pool of workers started ahead and kept between programs.
PTX needs no GPU, so this runs everywhere."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from xdsl.dialects.builtin import ModuleOp

from xfuse.backends.cpu import CPUBackend
from xfuse.backends.cuda import CUDABackend
from xfuse.errors import XfuseError
from xfuse.frontend.export import import_for_xfuse
from xfuse.ir import serialize
from xfuse.passes.fusion import legality
from xfuse.pipeline import DEFAULT_PIPELINE
from xfuse.runtime import compile_workers
from xfuse.runtime.cache import KernelCache, KernelSource, _only_kernel
from xfuse.runtime.compile_workers import (
    POOL,
    WORKERS_ENV,
    backend_spec,
    can_compile_ahead,
    compile_in_workers,
    lower_in_workers,
    start_workers,
    workers,
)
from xfuse.runtime.compiler import (
    CANONICAL_KERNEL,
    LoweredUnits,
    Program,
    ProgramCompiler,
    lower_to_loops,
    lowered_unit,
)
from xfuse.runtime.driver import run_pipeline


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


def test_no_jobs_or_no_workers_compile_nothing() -> None:
    spec = backend_spec(CUDABackend("sm_90"))
    assert spec is not None
    assert compile_in_workers(spec, [], 2) == []
    assert compile_in_workers(spec, [("x", "k")], 0) == [None]


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


def _pids() -> list[int]:
    return [w.process.pid for w in POOL._workers if w.alive()]


def test_the_pool_keeps_its_workers_between_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKERS_ENV, "2")
    modules = _kernel_modules()
    spec = backend_spec(CUDABackend("sm_90"))
    assert spec is not None
    jobs = [(m.text, CANONICAL_KERNEL) for m in modules]
    first = compile_in_workers(spec, jobs, 2)
    assert all(a is not None for a in first)
    started = _pids()
    assert len(started) >= 2
    assert compile_in_workers(spec, jobs, 2) == first
    assert _pids() == started  # the same processes served the second program
    # one that died meanwhile is replaced, and its share still compiles
    POOL._workers[0].process.kill()
    POOL._workers[0].process.wait()
    assert compile_in_workers(spec, jobs, 2) == first
    assert started[0] not in _pids()


def test_start_workers_starts_them_for_backends_that_compile_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    POOL.stop()
    monkeypatch.setenv(WORKERS_ENV, "2")
    start_workers(CPUBackend())
    assert _pids() == []
    start_workers(CUDABackend("sm_90"))
    assert len(_pids()) == 2
    monkeypatch.setenv(WORKERS_ENV, "0")
    POOL.stop()
    start_workers(CUDABackend("sm_90"))
    assert _pids() == []


def test_an_idle_worker_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    POOL.stop()
    monkeypatch.setattr(compile_workers, "IDLE_EXIT_S", 0.2)
    POOL.start(1)
    worker = POOL._workers[0]
    assert worker.process.wait(timeout=30) == 0
    # the pool starts another for the next batch
    spec = backend_spec(CUDABackend("sm_90"))
    assert spec is not None
    assert compile_in_workers(spec, [("not IR", "k")], 1) == [None]
    POOL.stop()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_a_forked_child_leaves_the_parents_workers_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKERS_ENV, "2")
    POOL.start(1)
    parent = _pids()
    pid = os.fork()
    if pid == 0:  # the child: stopping its pool must not stop the parent's workers
        POOL.stop()
        os._exit(0 if POOL._workers == [] else 1)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    assert _pids() == parent
    POOL.stop()


def test_workers_that_cannot_start_leave_the_work_to_the_caller(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    POOL.stop()
    monkeypatch.setattr(compile_workers.sys, "executable", str(tmp_path / "no-such-python"))
    spec = backend_spec(CUDABackend("sm_90"))
    assert spec is not None
    monkeypatch.setenv(WORKERS_ENV, "2")
    start_workers(CUDABackend("sm_90"))  # no error: compiling goes on without them
    assert compile_in_workers(spec, [("x", "k"), ("y", "k")], 2) == [None, None]
    assert POOL._workers == []


def _fused(program: Any, *args: torch.Tensor) -> ModuleOp:
    module = import_for_xfuse(program, args, {}).program.module
    run_pipeline(DEFAULT_PIPELINE, module)
    return module


def _compiled(module: ModuleOp, in_workers: bool) -> tuple[LoweredUnits, Program]:
    """`module` (a copy) lowered ahead for CUDA, in the workers or here, and compiled (no
    kernel built)."""
    copy = serialize.loads(serialize.dumps(module))
    compiler = ProgramCompiler(lambda m, n: None, device="cuda", lower_in_workers=in_workers)
    lowered = compiler.lower_ahead(copy)
    return lowered, compiler.compile(copy)


def test_workers_lower_the_units_as_the_process_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKERS_ENV, "2")
    module = _fused(_program, torch.randn(8, 16), torch.randn(16, 16))
    here, program = _compiled(module, False)
    there, from_workers = _compiled(module, True)
    assert len(there.units) == len(here.units) >= 4
    for a, b in zip(here.units.values(), there.units.values(), strict=True):
        assert str(a) == str(b)  # the units' launches and kernel funcs (their loops taken)
    sources = list(there.sources.values())
    assert [s.text for s in sources] == [s.text for s in here.sources.values()]
    assert all(s.parsed is None for s in sources)  # lowered and printed in a worker
    assert [k.loop_ir for k in from_workers.kernels] == [k.loop_ir for k in program.kernels]
    assert [(k.symbol, k.parallel_dims) for k in from_workers.kernels] == [
        (k.symbol, k.parallel_dims) for k in program.kernels
    ]


def test_without_workers_or_with_a_lowering_of_its_own_the_process_lowers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = _fused(_program, torch.randn(8, 16), torch.randn(16, 16))
    monkeypatch.setenv(WORKERS_ENV, "1")
    lowered, _ = _compiled(module, True)
    assert lowered.sources and all(s.parsed is not None for s in lowered.sources.values())
    monkeypatch.setenv(WORKERS_ENV, "2")
    own = ProgramCompiler(lambda m, n: None, lower=lower_to_loops, lower_in_workers=True)
    assert not own.lower_in_workers


def test_a_unit_a_worker_cannot_lower_is_left_to_the_caller() -> None:
    lower = partial(lowered_unit, device="cuda")
    assert lower_in_workers(lower, [b"not a unit", b"nor this"], 2) == [None, None]


def _softmax_then_transpose(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, -1).transpose(0, 1).reshape(8, 6)


def test_a_group_whose_lowering_fails_in_a_worker_runs_op_by_op_as_without_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's lowering fails; the caller lowers the group again, and `compile` reports
    the same reason as without workers (fusion's gate taken away to form such a group)."""
    monkeypatch.setattr(legality, "loop_structure", lambda *args: None)
    monkeypatch.setenv(WORKERS_ENV, "2")
    module = _fused(_softmax_then_transpose, torch.randn(6, 8))
    _, here = _compiled(module, False)
    _, there = _compiled(module, True)
    assert here.op_by_op and "another row" in here.op_by_op[0]
    assert there.op_by_op == here.op_by_op
    assert [k.loop_ir for k in there.kernels] == [k.loop_ir for k in here.kernels]
