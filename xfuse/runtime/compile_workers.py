"""
Kernels compiled ahead in worker processes, as Inductor compiles its kernels in parallel.

Lowering a kernel to LLVM is mostly xDSL pattern walks in Python: a bf16 channels-last kernel
takes about a second, and a program of fifty such kernels a minute, one after another. Before
the runtime's `ProgramCompiler` walks the program, `compile_ahead` hands the kernels that no
cache holds to `workers()` fresh Python processes (`python -m xfuse.runtime.compile_workers`,
jobs and artifacts pickled over their stdin and stdout) and puts what they return in the kernel
cache; the walk then only loads them.

- Only backends that a process can rebuild exactly from a picklable spec take part
  (`backend_spec`: CUDA's PTX, a function of the architecture and the tuning). A CPU kernel's
  code depends on the compiling process (OpenMP when torch's runtime is loaded), so the CPU
  backend compiles in-process.
- A worker runs no code from the caller's `__main__` (it is no `multiprocessing` child), and
  imports xDSL and llvmlite only, not torch.
- A job a worker fails on, or a worker that fails, changes nothing: its kernels compile in the
  caller as before, where their errors are reported as usual.
- `XFUSE_COMPILE_WORKERS=N` sets the number of processes (0 or 1: none); by default one per
  CPU core but one, at most 8, and only for programs of at least `MIN_JOBS` kernels to compile.

    python -m xfuse.runtime.compile_workers < jobs.pickle > artifacts.pickle
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

WORKERS_ENV = "XFUSE_COMPILE_WORKERS"
MAX_WORKERS = 8
MIN_JOBS = 4
"""Fewer kernels than this compile in-process: a worker's start (about half a second) would
cost more than it saves."""

Job = tuple[str, str]
"""(the module's text, the kernel's symbol)."""


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
    """Each job's artifact (None where it failed), compiled by up to `processes` workers; the
    jobs are dealt longest first to the least loaded worker (their text's length for cost)."""
    shares: list[list[int]] = [[] for _ in range(min(processes, len(jobs)))]
    loads = [0] * len(shares)
    for i in sorted(range(len(jobs)), key=lambda i: -len(jobs[i][0])):
        k = loads.index(min(loads))
        shares[k].append(i)
        loads[k] += len(jobs[i][0])
    results: list[bytes | None] = [None] * len(jobs)

    def run(share: list[int]) -> None:
        outputs = _run_worker(spec, [jobs[i] for i in share])
        for i, artifact in zip(share, outputs, strict=True):
            results[i] = artifact

    with ThreadPoolExecutor(len(shares)) as pool:
        list(pool.map(run, shares))
    return results


def _run_worker(spec: tuple[str, Any], jobs: list[Job]) -> list[bytes | None]:
    """One worker process's artifacts for `jobs` (all None if the process fails)."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "xfuse.runtime.compile_workers"],
            input=pickle.dumps((spec, jobs)),
            capture_output=True,
            env=env,
            check=True,
        )
        outputs: list[bytes | None] = pickle.loads(done.stdout)
    except (OSError, subprocess.CalledProcessError, pickle.UnpicklingError, EOFError):
        return [None] * len(jobs)
    if len(outputs) != len(jobs):
        return [None] * len(jobs)
    return outputs


def _serve(spec: tuple[str, Any], jobs: list[Job]) -> list[bytes | None]:
    """A worker's work: each job compiled, None where compiling it raised."""
    from xfuse.ir.context import parse

    backend = _rebuild(spec)
    outputs: list[bytes | None] = []
    for text, symbol in jobs:
        try:
            outputs.append(backend.compile(parse(text), symbol))
        except Exception:  # noqa: BLE001 - the caller compiles it again and reports the error
            outputs.append(None)
    return outputs


def main() -> int:
    spec, jobs = pickle.loads(sys.stdin.buffer.read())
    sys.stdout.buffer.write(pickle.dumps(_serve(spec, jobs)))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
