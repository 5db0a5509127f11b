"""
Where the host time of a replayed xfuse call goes, for zoo models on CUDA: the median host time
of the whole call, of the CUDA graph's `replay()` alone, of each part of the call timed alone
(reading the module state, its key, binding the arguments, checking the state's addresses,
copying the inputs in, replaying, the output rules, the output structure), and a cProfile of
many calls (functions by their own time), each call's result dropped before the next.

    python -m benchmarks.replay_profile [--models mobilenet_v2,gpt2] [--dtype f32] [--calls 300]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
from collections.abc import Callable
from typing import Any

import torch

import xfuse
from benchmarks.models import build
from benchmarks.timing import median_ms, synced_host_ms


def host_us(fn: Callable[[], Any], calls: int) -> float:
    """Median host microseconds of `fn`, the GPU waited for between calls (not timed)."""
    return 1000 * median_ms(fn, calls, clock=synced_host_ms)


def profile_model(name: str, dtype: torch.dtype, calls: int) -> str:
    model, inputs = build(name, "small", "cuda", dtype)
    with torch.no_grad():
        compiled = xfuse.compile(model, inputs, "cuda", quiet=True, fallback="error")
        overhead = torch.compile(model, mode="reduce-overhead")
        for _ in range(5):
            compiled(*inputs)
            overhead(*inputs)
        runner = compiled.default.graphs
        assert runner is not None and runner._ring, "the program runs as no CUDA graph"
        graph = runner._ring[0].graph
        lines = [
            f"## {name} {dtype}: {len(compiled.default.program.steps)} steps, "
            f"{len(compiled.state.names) if compiled.state else 0} state tensors",
            f"call {host_us(lambda: compiled(*inputs), calls):.1f} us, "
            f"replay() alone {host_us(graph.replay, calls):.1f} us, "
            f"Inductor reduce-overhead call {host_us(lambda: overhead(*inputs), calls):.1f} us",
        ]
        lines.append(host_parts(compiled, inputs, calls))
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            compiled(*inputs)
        profiler.disable()
        torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
    return "\n".join(lines) + "\n" + out.getvalue()


def host_parts(compiled: Any, inputs: tuple[Any, ...], calls: int) -> str:
    """The median host microseconds of each part of a replayed call, each timed alone."""
    executable, state = compiled.default, compiled.state
    captured = executable.graphs._ring[0]
    tensors = state.tensors() if state is not None else []
    args = executable.bind(inputs, tensors)
    outputs = list(captured.outputs)
    parts: dict[str, Callable[[], Any]] = {
        "state read": state.tensors if state is not None else lambda: None,
        "state key": (lambda: state.key(tensors)) if state is not None else lambda: None,
        "bind": lambda: executable.bind(inputs, tensors),
        "addresses": lambda: captured.moved(args),
        "memory free": captured.memory.free,
        "inputs in": lambda: [captured.inputs[i].copy_(args[i]) for i in captured.copied],
        "replay": captured.graph.replay,
        "output rules": lambda: executable._finish(args, [o.detach() for o in outputs], False),
        "output structure": lambda: executable.unflatten(list(outputs)),
    }
    return "parts (us): " + ", ".join(f"{k} {host_us(f, calls):.1f}" for k, f in parts.items())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--models", default="mobilenet_v2,gpt2")
    parser.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args(argv)
    dtype = torch.float32 if args.dtype == "f32" else torch.bfloat16
    for name in args.models.split(","):
        print(profile_model(name, dtype, args.calls), flush=True)


if __name__ == "__main__":
    main()
