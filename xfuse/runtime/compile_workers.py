"""
Kernels lowered and compiled ahead in worker processes, as Inductor compiles its kernels in
parallel.

Lowering a kernel to LLVM is mostly xDSL pattern walks in Python: a bf16 channels-last kernel
takes about a second, and a program of fifty such kernels a minute, one after another. Before
the runtime's `ProgramCompiler` walks the program, the work goes to `workers()` Python
processes (`python -m xfuse.runtime.compile_workers`, jobs and results pickled over their
stdin and stdout) in two batches of jobs, each dealt out longest first:

- `lower_in_workers`: each unit of the fused program (a group, or a lone op, in its own module,
  `xfuse.ir.serialize`d) lowered to loops, with its kernels' canonical modules printed
  (`xfuse.runtime.compiler.lower_unit`): the runtime's `ProgramCompiler.lower_ahead` takes the
  lowered units back instead of lowering them one after another;
- `compile_in_workers`: the kernels that no cache holds compiled (`KernelCache.compile_ahead`,
  which puts what they return in the kernel cache); the walk then only loads them.

- The workers are a pool (`POOL`) that `xfuse.compile` starts before it exports a program
  (`start_workers`), so that their start, a few seconds of imports, overlaps exporting and
  fusing instead of following them. They stay for the process's later programs (the graphs
  of one `torch.compile`d model), and each exits once idle for `IDLE_EXIT_S`, or with the
  process.

- Only backends that a process can rebuild exactly from a picklable spec take part
  (`backend_spec`: CUDA's PTX, a function of the architecture and the tuning). A CPU kernel's
  code depends on the compiling process (OpenMP when torch's runtime is loaded), so the CPU
  backend compiles in-process, and lowers its units there too (a kernel it compiles is the
  module the lowering made: one from a worker would be parsed again from its text).
- A worker runs no code from the caller's `__main__` (it is no `multiprocessing` child).
- A job a worker fails on, or a worker that fails, changes nothing: its units lower, and its
  kernels compile, in the caller as before, where their errors are reported as usual.
- `XFUSE_COMPILE_WORKERS=N` sets the number of processes (0 or 1: none); by default one per
  CPU core but one, at most 8, and only for at least `MIN_JOBS` (2) units or kernels.

    python -m xfuse.runtime.compile_workers   # a worker: messages (8-byte length, pickle) on
                                              # stdin: (task, jobs); on stdout: results
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

WORKERS_ENV = "XFUSE_COMPILE_WORKERS"
MAX_WORKERS = 8
MIN_JOBS = 2
"""Fewer units or kernels than this lower or compile in-process. The pool's workers start with
the compilation, so two kernels already gain (a cold `xfuse.compile` of programs of 2 and 3
kernels on CUDA is faster with the pool than in-process)."""

Job = tuple[str, str]
"""A kernel to compile: (the module's text, the kernel's symbol)."""

Task = tuple[str, Any]
"""What a batch of jobs asks of a worker: `("compile", backend_spec)` (jobs: `Job`s, results:
artifacts) or `("call", function)` (the job function itself, pickled by reference, which the
worker imports: jobs and results as it takes and makes them; `lower_in_workers`)."""


def workers() -> int:
    """How many worker processes compile ahead (`XFUSE_COMPILE_WORKERS`; 0 or 1: none)."""
    text = os.environ.get(WORKERS_ENV, "").strip()
    if text:
        try:
            return max(int(text), 0)
        except ValueError:
            from xfuse.errors import XfuseError

            raise XfuseError(f"{WORKERS_ENV} must be a whole number, found {text!r}") from None
    return min(MAX_WORKERS, (os.cpu_count() or 1) - 1)


def backend_spec(backend: object) -> tuple[str, Any] | None:
    """What a worker rebuilds `backend` from, or None when it cannot compile for it."""
    from xfuse.backends.cuda import CUDABackend

    if type(backend) is CUDABackend:
        return ("cuda", (backend.arch, backend.tuning))
    return None


def can_compile_ahead(backend: object) -> bool:
    """Whether workers compile ahead for `backend` (`KernelCache.compile_ahead`)."""
    return backend_spec(backend) is not None and workers() >= 2


def _rebuild(spec: tuple[str, Any]) -> Any:
    kind, args = spec
    if kind == "cuda":
        from xfuse.backends.cuda import CUDABackend

        return CUDABackend(*args)
    raise ValueError(f"unknown backend spec {kind!r}")


def compile_in_workers(
    spec: tuple[str, Any], jobs: Sequence[Job], processes: int
) -> list[bytes | None]:
    """Each job's artifact (None where it failed), compiled by up to `processes` workers of the
    pool (`POOL`), their text's length for cost (`in_workers`)."""
    return in_workers(("compile", spec), jobs, [len(text) for text, _ in jobs], processes)


def lower_in_workers(
    lower: Callable[[bytes], bytes], units: Sequence[bytes], processes: int
) -> list[bytes | None]:
    """Each unit (`xfuse.ir.serialize`d, in its own module) lowered by `lower` (a module-level
    function, or a partial of one, that pickles by reference: the caller's
    `xfuse.runtime.compiler.lowered_unit`; None where it failed), by up to `processes` workers
    of the pool, their size for cost."""
    return in_workers(("call", lower), units, [len(unit) for unit in units], processes)


def in_workers(
    task: Task, jobs: Sequence[Any], costs: Sequence[int], processes: int
) -> list[bytes | None]:
    """Each job's result (None where it failed) of `task`, by up to `processes` workers of the
    pool (`POOL`); the jobs are dealt most costly first to the least loaded worker."""
    if not jobs or processes < 1:
        return [None] * len(jobs)
    shares: list[list[int]] = [[] for _ in range(min(processes, len(jobs)))]
    loads = [0] * len(shares)
    for i in sorted(range(len(jobs)), key=lambda i: -costs[i]):
        k = loads.index(min(loads))
        shares[k].append(i)
        loads[k] += costs[i]
    results: list[bytes | None] = [None] * len(jobs)
    with POOL.lease(len(shares)) as pool:

        def run(k: int) -> None:
            if k >= len(pool):  # a worker that could not start: the caller does its share
                return
            share = shares[k]
            outputs = pool[k].run(task, [jobs[i] for i in share])
            for i, result in zip(share, outputs, strict=True):
                results[i] = result

        with ThreadPoolExecutor(len(shares)) as threads:
            list(threads.map(run, range(len(shares))))
    return results


# ---------------------------------------------------------------------------------------------
# The pool: workers started ahead, kept between programs
# ---------------------------------------------------------------------------------------------

IDLE_EXIT_S = 300.0
"""A worker that gets no work for this long exits; the pool starts another when it is needed."""

_LENGTH = struct.Struct("<Q")


class Worker:
    """One worker process: started at once, it imports what lowering and compiling need while
    the caller exports and fuses, then does batches of jobs sent over its stdin (length-prefixed
    pickles, answered on its stdout) until its stdin closes or it idles `IDLE_EXIT_S`."""

    def __init__(self) -> None:
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "xfuse.runtime.compile_workers", "--idle", str(IDLE_EXIT_S)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def run(self, task: Task, jobs: list[Any]) -> list[bytes | None]:
        """The results of `task` for `jobs` (all None, and the worker stopped, if it fails)."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        try:
            _write_message(stdin, (task, jobs))
            outputs = _read_message(stdout)
        except (OSError, EOFError, ValueError, pickle.UnpicklingError):
            self.stop()
            return [None] * len(jobs)
        if not isinstance(outputs, list) or len(outputs) != len(jobs):
            self.stop()
            return [None] * len(jobs)
        return outputs

    def stop(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


class WorkerPool:
    """Worker processes kept for the process's compilations: `start` them ahead (before
    exporting a program, so that their imports overlap it), `lease` them for one batch. A
    second batch at the same time waits for the first."""

    def __init__(self) -> None:
        self._workers: list[Worker] = []
        self._lock = threading.Lock()
        self._busy = threading.Lock()
        self._pid = os.getpid()

    def _own(self) -> None:
        """In a forked child, forget the parent's workers: they are the parent's to talk to."""
        if self._pid != os.getpid():
            self._workers = []
            self._pid = os.getpid()

    def start(self, count: int) -> None:
        """Have `count` live workers (starting the missing ones, which returns at once)."""
        with self._lock:
            self._ensure(count)

    def _ensure(self, count: int) -> list[Worker]:
        """Up to `count` live workers: fewer where a process cannot be started (no usable
        `sys.executable`, no process slots), which leaves their work to the caller."""
        self._own()
        for worker in [w for w in self._workers if not w.alive()]:
            worker.stop()
            self._workers.remove(worker)
        try:
            while len(self._workers) < count:
                self._workers.append(Worker())
        except OSError:
            pass
        return self._workers[:count]

    @contextmanager
    def lease(self, count: int) -> Iterator[list[Worker]]:
        with self._busy:
            with self._lock:
                leased = self._ensure(count)
            yield leased

    def stop(self) -> None:
        with self._lock:
            self._own()
            for worker in self._workers:
                worker.stop()
            self._workers.clear()


POOL = WorkerPool()
atexit.register(POOL.stop)


def start_workers(backend: object) -> None:
    """Start the workers that `ProgramCompiler.lower_ahead` and `KernelCache.compile_ahead`
    will use for `backend`, if any, so that their start (a few seconds of imports) overlaps
    exporting and fusing the program."""
    if can_compile_ahead(backend):
        POOL.start(workers())


def _write_message(stream: IO[bytes], value: object) -> None:
    data = pickle.dumps(value)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _read_message(stream: IO[bytes]) -> Any:
    header = _read_exactly(stream, _LENGTH.size)
    (length,) = _LENGTH.unpack(header)
    return pickle.loads(_read_exactly(stream, length))


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError(f"stream ended {size - len(data)} bytes short")
        data += chunk
    return bytes(data)


# ---------------------------------------------------------------------------------------------
# The worker's side
# ---------------------------------------------------------------------------------------------


def _serve(task: Task, jobs: list[Any]) -> list[bytes | None]:
    """A worker's work: each job done (`TASKS`), None where it raised."""
    kind, argument = task
    try:
        do = TASKS[kind](argument)
    except Exception:  # noqa: BLE001 - the caller does the jobs itself
        return [None] * len(jobs)
    outputs: list[bytes | None] = []
    for job in jobs:
        try:
            outputs.append(do(job))
        except Exception:  # noqa: BLE001 - the caller does it again and reports the error
            outputs.append(None)
    return outputs


def _compiling(spec: tuple[str, Any]) -> Callable[[Job], bytes]:
    """A kernel's artifact, of its module's text and its symbol, for the backend of `spec`."""
    from xfuse.ir.context import parse

    backend = _rebuild(spec)

    def compile_job(job: Job) -> bytes:
        text, symbol = job
        return backend.compile(parse(text), symbol)

    return compile_job


def _calling(function: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """The task's own job function (unpickled: its module imported in the worker)."""
    return function


TASKS: dict[str, Callable[[Any], Callable[[Any], bytes]]] = {
    "compile": _compiling,
    "call": _calling,
}
"""A task's kind -> what makes its job function of the task's argument."""


def _idle(stream: IO[bytes], seconds: float) -> bool:
    """Whether no job came within `seconds` (never on systems without `select` on pipes)."""
    if os.name != "posix":
        return False
    ready, _, _ = select.select([stream], [], [], seconds)
    return not ready


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    import xfuse.backends.cuda  # noqa: F401 - what every job needs, imported before the first
    import xfuse.ir.context  # noqa: F401
    import xfuse.passes.lowering.lower_to_loops  # noqa: F401

    parser = argparse.ArgumentParser(prog="python -m xfuse.runtime.compile_workers")
    parser.add_argument("--idle", type=float, default=IDLE_EXIT_S, help="seconds, then exit")
    idle = parser.parse_args(argv).idle
    stdin = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # no read-ahead: select
    stdout = sys.stdout.buffer
    while not _idle(stdin, idle):
        try:
            task, jobs = _read_message(stdin)
        except EOFError:
            return 0
        _write_message(stdout, _serve(task, jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
