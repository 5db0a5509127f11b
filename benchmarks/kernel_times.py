"""
Each CPU kernel of a zoo model timed alone: its foreign call on the buffers a real forward
gave it, again and again, so that the model's externs and the runner's host path stay out.

    python -m benchmarks.kernel_times [--models resnet,mobilenet_v2] [--rounds 400]
                                      [--llvm-option -enable-masked-interleaved-mem-accesses=false]

Per kernel: its step's label and the median time of a call (us). With `--llvm-option`, the
model is compiled a second time after that LLVM option is set (process wide, into a cache of
its own) and both columns are timed in the same rounds, alternating which goes first: how a
code generation option changes each kernel, which whole-model timings cannot resolve (their
ratios move by some 5% with the order of the programs in the rounds).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import xfuse
from benchmarks.models import ZOO, build
from benchmarks.timing import interleaved, medians
from xfuse.runtime import executor
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.compiler import Program
from xfuse.runtime.steps import BufferPool, KernelStep

Call = Callable[[], Any]


def captured_forward(
    compiled: xfuse.api.CompiledProgram, inputs: tuple[Any, ...]
) -> tuple[Program, list[Any], BufferPool]:
    """One forward of `compiled` on `inputs`, with the program it ran, its `@forward`
    arguments (the inputs bound to the module's state) and its buffer pool (a CUDA program
    must be compiled with `cuda_graphs=False`: a graph replay does not go through
    `executor.run_program`)."""
    seen: dict[str, Any] = {}
    real = executor.run_program

    def spy(program: Any, args: Any, pool: Any) -> Any:
        seen.update(program=program, args=list(args), pool=pool)
        return real(program, args, pool)

    executor.run_program = spy
    try:
        compiled(*inputs)
    finally:
        executor.run_program = real
    if not seen:
        raise RuntimeError("the forward did not run a program (a CUDA graph replayed it?)")
    return seen["program"], seen["args"], seen["pool"]


def kernel_steps(
    program: Program, args: list[Any], pool: BufferPool
) -> tuple[list[tuple[KernelStep, Call]], list[Any]]:
    """The program's steps run one by one on `args`: each kernel step with a call of its
    kernel alone on the buffers this run gave it (inputs made contiguous beforehand), and the
    program's results."""
    env: list[Any] = [None] * program.n_slots
    for slot, value in program.constants.items():
        env[slot] = value
    for slot, value in zip(program.arg_slots, args, strict=True):
        env[slot] = value
    calls: list[tuple[KernelStep, Call]] = []
    for step, (run, ins, outs, *_) in zip(program.steps, program.plan, strict=True):
        xs = [env[s] for s in ins]
        results = run(xs, pool.allocate)
        for slot, value in zip(outs, results, strict=True):
            env[slot] = value
        if isinstance(step, KernelStep):
            calls.append((step, _call(step, _kernel_inputs(step, xs, results))))
    return calls, [env[s] for s in program.output_slots]


def kernel_calls(
    compiled: xfuse.api.CompiledProgram, inputs: tuple[Any, ...]
) -> list[tuple[str, Call]]:
    """Each kernel step of one forward, as (label, a call of its kernel on that forward's
    buffers)."""
    calls, _ = kernel_steps(*captured_forward(compiled, inputs))
    return [(step.label, call) for step, call in calls]


def _kernel_inputs(step: KernelStep, xs: list[Any], results: list[Any]) -> list[Any]:
    """The buffers a kernel step passes its kernel, as `KernelStep.run` makes them: inputs
    contiguous (CPU scalars it copies moved to the outputs' device), then its outputs."""
    buffers = [t.contiguous() for t in xs]
    for k in step.copied:
        buffers[k] = buffers[k].to(results[0].device)
    return buffers + list(results)


def _call(step: KernelStep, buffers: list[Any]) -> Call:
    """The kernel's call as the runner makes it: its one foreign call where it has one
    (`KernelStep.direct_call`, the CPU's), else the kernel's launch (threads, an error flag
    on the buffers' device, a CUDA launch on the current stream)."""
    direct = step.direct_call()
    if direct is not None:
        function, extent = direct
        pointers = [t.data_ptr() for t in buffers]
        return lambda: (function(0, extent, *pointers), buffers)
    if step.error_flag:
        buffers = [*buffers, torch.zeros(1, dtype=torch.uint8, device=buffers[-1].device)]
    return lambda: step.kernel(buffers)


def median_us(columns: list[Call], rounds: int) -> list[float]:
    """The median time of each call, over `rounds` rounds that each call every one of them
    once, alternating which goes first."""
    calls = {str(i): c for i, c in enumerate(columns)}
    times: dict[str, list[float]] = interleaved(calls, rounds, alternate=True)
    return [1000 * ms for ms in medians(times).values()]


def compiled_for(name: str) -> tuple[xfuse.api.CompiledProgram, tuple[Any, ...]]:
    model, inputs = build(name, "small", "cpu", torch.float32)
    cache = KernelCache(Path(tempfile.mkdtemp(prefix="xfuse-kernel-times-")))
    return xfuse.compile(model, inputs, quiet=True, fallback="error", cache=cache), inputs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--models", default="resnet,mobilenet_v2,vit")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--llvm-option", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("XFUSE_COMPILE_WORKERS", "0")  # both programs from this process
    with torch.no_grad():
        for name in args.models.split(","):
            if name not in ZOO:
                raise SystemExit(f"unknown model {name!r}: one of {', '.join(ZOO)}")
            first, inputs = compiled_for(name)
            calls = kernel_calls(first, inputs)
            second: list[tuple[str, Call]] = []
            if args.llvm_option:
                import llvmlite.binding as llvm

                llvm.set_option("xfuse", args.llvm_option)
                other, _ = compiled_for(name)
                second = kernel_calls(other, inputs)
                assert [label for label, _ in second] == [label for label, _ in calls]
            head = "| model | kernel | us |" + (
                f" us with `{args.llvm_option}` |" if second else ""
            )
            print(head)
            print("|---" * (head.count("|") - 1) + "|")
            total = [0.0, 0.0]
            for i, (label, call) in enumerate(calls):
                times = median_us([call] + ([second[i][1]] if second else []), args.rounds)
                total = [a + b for a, b in zip(total, times + [0.0], strict=False)]
                print(f"| {name} | {label} | " + " | ".join(f"{t:.2f}" for t in times) + " |")
            shown = total[: 2 if second else 1]
            print(f"| {name} | all {len(calls)} | " + " | ".join(f"{t:.1f}" for t in shown) + " |")


if __name__ == "__main__":
    main()
