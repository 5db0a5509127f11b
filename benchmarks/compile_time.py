"""
Cold compile time by stage: where the host time of a first `xfuse.compile` goes.

    python -m benchmarks.compile_time [--models efficientnet_hf,mobilenetv2_hf] [--runs 3]
                                      [--paths cpu,cuda] [--dump DIR]

Models: `benchmarks.families`' image models at batch 1, 3x224x224, and its text models at one
sequence of 128 tokens (its `latency` sizes), f32, `.eval()` under `torch.no_grad()` (Hugging
Face ones are built from configs, random weights). Each run is one
cold compile in a fresh process with an empty kernel cache (`XFUSE_CACHE_DIR`, a new temporary
directory), so that nothing one run made (the kernel cache in memory, lazily imported modules)
speeds up the next; the figures are the medians of `--runs` runs, in seconds.

- `cpu`: `xfuse.compile(model, (x,))` on the CPU and its first call, timed by stage;
- `cuda`: the CUDA path's host part, on any machine (no GPU needed), with the cycle collector
  paused as `xfuse.compile` pauses it while it builds a program: export and import, the
  passes of `compile_pipeline("cuda")`, `lower-to-loops` of each unit as the runtime lowers it
  for CUDA, and each distinct kernel's PTX (`CUDABackend("sm_90")`, as the kernel cache compiles
  each kernel text once). Kernels are not loaded. Where the compile workers are on
  (`xfuse.runtime.compile_workers`: a machine of three cores or more, or
  `XFUSE_COMPILE_WORKERS=N` of 2 or more), they are started before the export, the units lower
  and the kernels compile in them, as in `xfuse.compile`, and `loops`, `llvm dialect` and `llvm`
  count only what the process does itself: the wait for the workers is in `other`.

Stages (each function's time less that of the stages it calls):

- `export`: torch.export and the importer (`import_for_xfuse`);
- `choices`: what `xfuse.choices` measures (CPU: library or stencil depthwise convolutions, each
  stencil compiled and timed), everything it does included;
- `fusion`: the pipeline's passes and the imported module's verification;
- `loops`: `lower-to-loops` of the units;
- `llvm dialect`: the kernels' xDSL lowering to the llvm dialect (`lower_kernels`);
- `llvm`: the rest of each kernel's code generation (LLVM IR text, LLVM's passes, the object
  code or PTX);
- `load`: loading the compiled kernels (CPU);
- `other`: the rest (the program's steps, cache keys, the first call on the CPU).

`--dump DIR` writes every kernel's loop IR and code (`cpu`: LLVM IR before LLVM's passes;
`cuda`: PTX) of the last run, one file per model and path, to compare two versions' output.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import torch

STAGES = ("export", "choices", "fusion", "loops", "llvm dialect", "llvm", "load", "other")
ABSORBING = "choices"
"""A stage whose nested work is its own (the stencils `xfuse.choices` compiles)."""


class StageClock:
    """Seconds per stage, each function's time less that of the stages it calls."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(STAGES, 0.0)
        self._stack: list[str] = []

    def wrap(self, fn: Callable[..., Any], stage: str) -> Callable[..., Any]:
        @wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if ABSORBING in self._stack:
                return fn(*args, **kwargs)
            outer = self._stack[-1] if self._stack else None
            self._stack.append(stage)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                self._stack.pop()
                self.seconds[stage] += elapsed
                if outer is not None:
                    self.seconds[outer] -= elapsed

        return timed

    def patch(self, owner: Any, attribute: str, stage: str) -> None:
        setattr(owner, attribute, self.wrap(getattr(owner, attribute), stage))


def build_model(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    from benchmarks.families import IMAGES, TEXTS, inputs_for

    torch.manual_seed(0)
    model = (IMAGES.get(name) or TEXTS[name])().eval()
    return model, inputs_for(name, "latency", "cpu", torch.float32)[0]


def patch_common(clock: StageClock) -> None:
    import xfuse.passes.llvm.lower_to_llvm as lower_to_llvm
    import xfuse.passes.llvm.lower_to_nvvm as lower_to_nvvm
    import xfuse.runtime.compiler as compiler
    import xfuse.runtime.driver as driver

    clock.patch(driver, "import_for_xfuse", "export")
    clock.patch(driver, "measured_options", "choices")
    clock.patch(driver, "run_pipeline", "fusion")
    clock.patch(driver, "verify_module", "fusion")
    clock.patch(compiler, "lower_to_loops", "loops")
    clock.patch(lower_to_llvm, "lower_kernels", "llvm dialect")
    clock.patch(lower_to_nvvm, "lower_kernels", "llvm dialect")


def cpu_run(name: str, dump: Path | None) -> dict[str, float]:
    """One cold `xfuse.compile` on the CPU and its first call, by stage."""
    import xfuse
    from xfuse.backends.cpu import CPUBackend

    clock = StageClock()
    patch_common(clock)
    clock.patch(CPUBackend, "compile", "llvm")
    clock.patch(CPUBackend, "load", "load")
    model, x = build_model(name)
    start = time.perf_counter()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = xfuse.compile(model, (x,), quiet=True)
        compiled(x)
    seconds = finish(clock, time.perf_counter() - start)
    if dump is not None:
        from xfuse.ir.context import parse
        from xfuse.runtime.compiler import CANONICAL_KERNEL

        backend = CPUBackend()
        loops = [k.loop_ir for k in compiled.kernels]
        code = {t: backend.llvm_ir(parse(t), CANONICAL_KERNEL) for t in loops}
        write_dump(dump / f"{name}.cpu.txt", loops, code)
    return seconds


def cuda_run(name: str, dump: Path | None) -> dict[str, float]:
    """The CUDA path's host part (see the module docstring), by stage."""
    import xfuse.runtime.driver as driver
    from xfuse.backends.cuda import CUDABackend
    from xfuse.collector import collector_paused
    from xfuse.pipeline import compile_pipeline
    from xfuse.runtime.compile_workers import can_compile_ahead, start_workers
    from xfuse.runtime.compiler import ProgramCompiler

    clock = StageClock()
    patch_common(clock)
    clock.patch(CUDABackend, "compile", "llvm")
    model, x = build_model(name)
    backend = CUDABackend("sm_90")
    start = time.perf_counter()
    start_workers(backend)  # (as `xfuse.compile`: their imports overlap the export)
    # (as `xfuse.compile` builds a program: the cycle collector paused throughout)
    with torch.no_grad(), collector_paused():
        imported = driver.import_for_xfuse(model, (x,), None, False)
        module = imported.program.module
        driver.verify_module(module)
        driver.run_pipeline(compile_pipeline("cuda"), module)
        compiler = ProgramCompiler(
            lambda source, name: None,  # type: ignore[arg-type,return-value]
            device="cuda",
            lower_in_workers=can_compile_ahead(backend),
        )
        kernels = compiler.kernel_modules(module)
        sources = {s.text: s for s in kernels}
        ptx = dict(zip(sources, ptx_of(backend, list(sources.values())), strict=True))
    total = time.perf_counter() - start
    if dump is not None:
        code = {t: p.decode() for t, p in ptx.items()}
        write_dump(dump / f"{name}.cuda.txt", [s.text for s in kernels], code)
    return finish(clock, total)


def ptx_of(backend: Any, sources: list[Any]) -> list[bytes]:
    """Each kernel's PTX: from the compile workers where they are on (`can_compile_ahead`),
    else, and where a worker failed, compiled here."""
    from xfuse.runtime.compile_workers import (
        backend_spec,
        can_compile_ahead,
        compile_in_workers,
        workers,
    )

    done: list[bytes | None] = [None] * len(sources)
    spec = backend_spec(backend)
    if spec is not None and can_compile_ahead(backend):
        jobs = [(s.text, s.symbol) for s in sources]
        done = compile_in_workers(spec, jobs, workers())
    return [
        ptx if ptx is not None else backend.compile(s.module, s.symbol)
        for s, ptx in zip(sources, done, strict=True)
    ]


def write_dump(path: Path, loops: list[str], code: dict[str, str]) -> None:
    """The program's kernels in order (their loop IR), then each distinct kernel's code."""
    parts = [f"{text}\n====\n" for text in loops]
    parts += [f"{text}\n----\n{code[text]}\n====\n" for text in sorted(code)]
    path.write_text("".join(parts))


def finish(clock: StageClock, total: float) -> dict[str, float]:
    seconds = dict(clock.seconds)
    seconds["other"] = total - sum(v for k, v in seconds.items() if k != "other")
    seconds["total"] = total
    return seconds


def run_in_fresh_process(model: str, path: str, dump: str | None) -> dict[str, float]:
    """One cold run in a new Python process with a new, empty kernel cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, XFUSE_CACHE_DIR=cache)
        command = [sys.executable, "-m", "benchmarks.compile_time", "--one", model, path]
        if dump is not None:
            command += ["--dump", dump]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{model} ({path}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: dict[tuple[str, str], list[dict[str, float]]]) -> str:
    columns = (*STAGES, "total")
    lines = [
        "| model | path | " + " | ".join(columns) + " |",
        "|---|---|" + "---:|" * len(columns),
    ]
    for (model, path), runs in results.items():
        cells = [f"{statistics.median(r[c] for r in runs):.2f}" for c in columns]
        lines.append(f"| {model} | {path} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="efficientnet_hf,mobilenetv2_hf")
    parser.add_argument("--paths", default="cpu,cuda")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dump", help="a folder for every kernel's code (last run)")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    dump = Path(args.dump) if args.dump else None
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
    if args.one:
        model, path = args.one
        seconds = (cpu_run if path == "cpu" else cuda_run)(model, dump)
        print(json.dumps(seconds))
        return
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for k in range(args.runs):
        for model in args.models.split(","):
            for path in args.paths.split(","):
                last = k == args.runs - 1
                seconds = run_in_fresh_process(model, path, args.dump if last else None)
                results.setdefault((model, path), []).append(seconds)
                print(f"run {k + 1}: {model} {path}: {seconds['total']:.1f} s", file=sys.stderr)
    print(f"median of {args.runs} cold runs (s), torch {torch.__version__}")
    print(table(results))


if __name__ == "__main__":
    main()
