"""
The runtime's host cost on the CPU: what a compiled program's call costs beyond its kernels.

    python -m benchmarks.host [--runs 200] [--model gpt2] [--no-model] [--profile] [--threads 1]
                              [--only chains|externs|dynamic|compiled|model]

Six measurements, each the median of interleaved rounds in one process (every function once
per round, so that load that comes and goes on a shared machine affects every column alike):

- **chains of N tiny kernels** (N = 1, 10, 50; 8-element f32 tensors, `pipeline="decompose"` so
  that no op fuses: one kernel per op): xfuse's µs per call against eager's, and the cost per
  step (the slope between N = 1 and N = 50) and per call (the N = 1 call less one step);
- **extern calls** (`F.linear`, `F.conv2d`, a matmul, small shapes): xfuse's µs per call against
  the same op run eagerly; the difference is what the runtime adds around one extern step;
- **a zoo model** (`benchmarks/models.py`, small config, f32): ms per forward of eager and
  xfuse, and where xfuse's host time goes: the steps by kind (kernel launch, extern call,
  view) timed one by one, the rest of the call (input checks, signature, binding, output
  rules) by difference;
- **symbolic sizes** (`dynamic_shapes=`, batch 2, 8 and 16): an elementwise function (one
  kernel) and an MLP 256-1024-256 (two extern GEMMs around one kernel), f32: µs per call of
  the dynamic program against the static program compiled for the call's shape; their
  difference is what a dynamic call adds: its host path (all of it at batch 2), and at larger
  batches its memory (its intermediate buffers are fresh at every call, a static call's are
  reused and stay in cache);
- **torch.compile, static and `dynamic=True`** (a tiny GPT-2, 2 layers 64 wide, 2x16 tokens):
  µs per call of the whole call; with the program's steps stubbed (they hand back their first
  results), which leaves the host path, dynamo's and xfuse's; of dynamo alone (a backend that
  does no work); and of xfuse's entry alone (the backend's function called on dynamo's last
  arguments, steps stubbed); with cProfile's count of function calls per call;
- with `--profile`, the functions of the zoo model's call by own time (cProfile), and of the
  dynamic MLP's at batch 8.

One thread by default (torch's and xfuse's): the host path does not depend on it, and on a
shared machine threads waiting for each other blur every figure.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import statistics
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import xfuse
import xfuse.runtime.executor as executor
from benchmarks.timing import interleaved, medians

Tensor = torch.Tensor
Fn = Callable[[], Any]
CHAIN_LENGTHS = (1, 10, 50)


def interleaved_us(fns: dict[str, Fn], runs: int, warmup: int = 20) -> dict[str, float]:
    """Median µs per call of each function, every function once per round."""
    return {name: 1000 * ms for name, ms in medians(interleaved(fns, runs, warmup)).items()}


def compile_quietly(fn: Any, inputs: tuple[Any, ...], **options: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xfuse.compile(fn, inputs, quiet=True, fallback="error", **options)


# ---------------------------------------------------------------------------------------------
# Chains of tiny kernels
# ---------------------------------------------------------------------------------------------


def chain(n: int) -> Callable[[Tensor], Tensor]:
    """n elementwise ops in a row (each its own kernel without fusion)."""

    def f(x: Tensor) -> Tensor:
        for i in range(n):
            x = x * 1.5 if i % 2 else x + 0.5
        return x

    return f


def bench_chains(runs: int) -> list[str]:
    x = torch.randn(8)
    fns: dict[str, Fn] = {}
    for n in CHAIN_LENGTHS:
        f = chain(n)
        compiled = compile_quietly(f, (x,), pipeline="decompose")
        assert len(compiled.kernels) == n, (n, len(compiled.kernels))
        torch.testing.assert_close(compiled(x), f(x))
        fns[f"eager {n}"] = lambda f=f: f(x)
        fns[f"xfuse {n}"] = lambda c=compiled: c(x)
    us = interleaved_us(fns, runs)
    lo, hi = CHAIN_LENGTHS[0], CHAIN_LENGTHS[-1]
    step = (us[f"xfuse {hi}"] - us[f"xfuse {lo}"]) / (hi - lo)
    eager_op = (us[f"eager {hi}"] - us[f"eager {lo}"]) / (hi - lo)
    lines = [
        "| kernels | eager µs | xfuse µs | xfuse / eager |",
        "|---|---|---|---|",
    ]
    for n in CHAIN_LENGTHS:
        e, c = us[f"eager {n}"], us[f"xfuse {n}"]
        lines.append(f"| {n} | {e:.1f} | {c:.1f} | {c / e:.2f} |")
    lines.append("")
    lines.append(
        f"Per kernel step (slope {lo}->{hi}): xfuse {step:.2f} µs, eager {eager_op:.2f} µs per "
        f"op; per call (the {lo}-kernel call less one step): {us[f'xfuse {lo}'] - step:.2f} µs."
    )
    return lines


# ---------------------------------------------------------------------------------------------
# Extern calls
# ---------------------------------------------------------------------------------------------


def extern_cases() -> dict[str, tuple[Callable[..., Tensor], tuple[Tensor, ...]]]:
    torch.manual_seed(0)
    return {
        "linear 1x64 @ 64x64 + b": (
            F.linear,
            (torch.randn(1, 64), torch.randn(64, 64), torch.randn(64)),
        ),
        "matmul 16x32 @ 32x16": (torch.matmul, (torch.randn(16, 32), torch.randn(32, 16))),
        "conv2d 1x8x8x8, 8x8x3x3": (
            lambda x, w: F.conv2d(x, w, padding=1),
            (torch.randn(1, 8, 8, 8), torch.randn(8, 8, 3, 3)),
        ),
    }


def bench_externs(runs: int) -> list[str]:
    fns: dict[str, Fn] = {}
    cases = extern_cases()
    for name, (f, inputs) in cases.items():
        compiled = compile_quietly(f, inputs)
        torch.testing.assert_close(compiled(*inputs), f(*inputs))
        fns[f"eager {name}"] = lambda f=f, a=inputs: f(*a)
        fns[f"xfuse {name}"] = lambda c=compiled, a=inputs: c(*a)
    us = interleaved_us(fns, runs)
    lines = ["| extern | eager µs | xfuse µs | runtime adds µs |", "|---|---|---|---|"]
    for name in cases:
        e, c = us[f"eager {name}"], us[f"xfuse {name}"]
        lines.append(f"| {name} | {e:.1f} | {c:.1f} | {c - e:.1f} |")
    return lines


# ---------------------------------------------------------------------------------------------
# Symbolic sizes
# ---------------------------------------------------------------------------------------------

DYNAMIC_BATCHES = (2, 8, 16)


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(256, 1024)
        self.down = torch.nn.Linear(1024, 256)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(torch.relu(self.up(x)))


def elementwise(x: Tensor) -> Tensor:
    return (x * 2 + 1).relu()


def dynamic_cases() -> dict[str, tuple[Callable[[Tensor], Tensor], int]]:
    """Name -> (model or function, features of its input: batch x features)."""
    torch.manual_seed(0)
    return {"elementwise x64": (elementwise, 64), "MLP 256-1024-256": (MLP().eval(), 256)}


def compile_dynamic(fn: Callable[[Tensor], Tensor], features: int) -> Any:
    from torch.export import Dim

    batch = Dim("batch", min=2, max=4096)
    return compile_quietly(fn, (torch.randn(4, features),), dynamic_shapes=({0: batch},))


def bench_dynamic(runs: int, profile: bool) -> list[str]:
    fns: dict[str, Fn] = {}
    cases = dynamic_cases()
    with torch.no_grad():
        for name, (fn, features) in cases.items():
            dynamic = compile_dynamic(fn, features)
            for batch in DYNAMIC_BATCHES:
                x = torch.randn(batch, features)
                static = compile_quietly(fn, (x,))
                torch.testing.assert_close(dynamic(x), fn(x))
                torch.testing.assert_close(static(x), fn(x))
                fns[f"static {name} {batch}"] = lambda c=static, x=x: c(x)
                fns[f"dynamic {name} {batch}"] = lambda c=dynamic, x=x: c(x)
        us = interleaved_us(fns, runs)
        lines = [
            "| program | batch | static µs | dynamic µs | dynamic adds µs |",
            "|---|---|---|---|---|",
        ]
        for name in cases:
            for batch in DYNAMIC_BATCHES:
                st, dy = us[f"static {name} {batch}"], us[f"dynamic {name} {batch}"]
                lines.append(f"| {name} | {batch} | {st:.1f} | {dy:.1f} | {dy - st:.1f} |")
        if profile:
            mlp = fns[f"dynamic MLP 256-1024-256 {DYNAMIC_BATCHES[1]}"]
            lines += ["", "```", cprofile_top(mlp, 2000), "```"]
    return lines


# ---------------------------------------------------------------------------------------------
# torch.compile, static and dynamic=True
# ---------------------------------------------------------------------------------------------

COMPILED_TOKENS = (2, 16)
"""A tiny GPT-2's call (`benchmarks.dynamic.LM`, 2 layers 64 wide, a vocabulary of 1000):
2 sequences of 16 tokens, where its kernels cost little beside the host path."""


class Switch:
    """A `torch.compile` backend behind one dynamo frame that calls one of three functions of
    the graph, picked per call: xfuse's (`xfuse`, the backend `torch.compile(backend="xfuse")`
    names), or dynamo's part alone (`dynamo`: the first output xfuse gave, handed back with no
    work). It keeps the last call's arguments (`args`), to call xfuse's function without
    dynamo."""

    def __init__(self) -> None:
        self.fns: dict[str, Callable[..., Any]] = {}
        self.pick = "xfuse"
        self.args: tuple[Any, ...] = ()

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        from xfuse.dynamo import dynamo_backend

        xfuse_fn = dynamo_backend(gm, example_inputs)
        kept: list[Any] = []

        def dynamo_alone(*args: Any) -> Any:
            if not kept:
                kept.append(xfuse_fn(*args))
            return kept[0]

        self.fns = {"xfuse": xfuse_fn, "dynamo": dynamo_alone}

        def run(*args: Any) -> Any:
            self.args = args
            return self.fns[self.pick](*args)

        return run

    def program(self) -> Any:
        """The xfuse program behind the graph: a `DynamicProgram`, else a `CompiledProgram`."""
        fn = self.fns["xfuse"]
        return getattr(fn, "dynamic", None) or fn.compiled  # type: ignore[attr-defined]


def stub_steps(program: Any) -> Callable[[], None]:
    """Make `program`'s steps hand back their first results with no work (the symbolic CPU
    runner's, or the static program's runner's); returns what undoes it."""
    if hasattr(program, "compiled"):  # a DynamicProgram
        owner, name = program.compiled._cpu_runner, "run"
    else:
        owner, name = program.default.program, "runner"
    real = getattr(owner, name)
    kept: list[Any] = []

    def stub(*args: Any) -> Any:
        if not kept:
            kept.append(real(*args))
        return list(kept[0])

    setattr(owner, name, stub)
    return lambda: setattr(owner, name, real)


def python_calls(fn: Fn, calls: int = 50) -> float:
    """Function calls (Python's and builtins') per call of `fn`, as cProfile counts them."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    return pstats.Stats(profiler).total_calls / calls  # type: ignore[attr-defined]


def bench_compiled(runs: int) -> list[str]:
    from benchmarks.dynamic import LM

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = LM(layers=2, width=64, heads=2, vocab=1000).eval()
    ids = torch.randint(0, 1000, COMPILED_TOKENS)
    switches: dict[str, Switch] = {}
    with torch.no_grad():
        want = model(ids)
        for mode in ("static", "dynamic"):
            switch = switches[mode] = Switch()
            compiled = torch.compile(model, backend=switch, dynamic=mode == "dynamic")
            if mode == "dynamic":  # another length first: the symbolic program serves both
                compiled(torch.randint(0, 1000, (2, 9)))
            for _ in range(3):
                torch.testing.assert_close(compiled(ids), want)

            def call(pick: str, c: Any = compiled, s: Switch = switch) -> Any:
                s.pick = pick
                return c(ids)

            switch.fns["call"] = call
        # The first call after the other mode's pays for cold caches (tens of µs): a call of
        # dynamo alone, not counted, comes first in each mode's turn.
        fns: dict[str, Fn] = {}
        for mode, s in switches.items():
            fns[f"{mode} warm"] = lambda s=s: s.fns["call"]("dynamo")
            fns[f"{mode} whole"] = lambda s=s: s.fns["call"]("xfuse")
        us = interleaved_us(fns, runs)
        undo = [stub_steps(s.program()) for s in switches.values()]
        stubbed: dict[str, Fn] = {}
        for mode, s in switches.items():
            stubbed[f"{mode} warm"] = lambda s=s: s.fns["call"]("dynamo")
            stubbed[f"{mode} stubbed"] = lambda s=s: s.fns["call"]("xfuse")
            stubbed[f"{mode} dynamo"] = lambda s=s: s.fns["call"]("dynamo")
            stubbed[f"{mode} entry"] = lambda s=s, a=s.args: s.fns["xfuse"](*a)
        us.update(interleaved_us(stubbed, 4 * runs))
        calls = {name: python_calls(stubbed[name]) for name in stubbed if "warm" not in name}
        for u in undo:
            u()
    lines = [
        f"Tiny GPT-2 (2 layers, 64 wide), {COMPILED_TOKENS[0]}x{COMPILED_TOKENS[1]} tokens: "
        "µs per call, and function calls per call (cProfile's count); `steps stubbed` hands "
        "back the first results with no steps run, `dynamo alone` a backend that does no work.",
        "",
        "| torch.compile | whole call | steps stubbed (calls) | dynamo alone | "
        "xfuse's entry, steps stubbed (calls) |",
        "|---|---|---|---|---|",
    ]
    for mode in switches:
        lines.append(
            f"| {mode} | {us[f'{mode} whole']:.1f} | {us[f'{mode} stubbed']:.1f} "
            f"({calls[f'{mode} stubbed']:.0f}) | {us[f'{mode} dynamo']:.1f} | "
            f"{us[f'{mode} entry']:.1f} ({calls[f'{mode} entry']:.0f}) |"
        )
    return lines


# ---------------------------------------------------------------------------------------------
# A zoo model
# ---------------------------------------------------------------------------------------------


def _kind(label: str) -> str:
    if label.startswith("kernel"):
        return "kernel launch"
    if label.startswith("view"):
        return "view"
    if "(fallback)" in label:
        return "fallback"
    return "extern call"


def step_breakdown(compiled: Any, inputs: tuple[Tensor, ...], calls: int) -> dict[str, float]:
    """Median µs per call by step kind, each step timed on its own (`XFUSE_PROFILE`'s hook),
    and the rest of the same call (everything but the steps) by difference."""
    per_call: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, int] = {}
    saved = executor.PROFILE
    try:
        for _ in range(calls):
            profile = executor.PROFILE = executor.StepProfile()
            start = time.perf_counter()
            compiled(*inputs)
            total = 1e6 * (time.perf_counter() - start)
            by_kind: dict[str, float] = defaultdict(float)
            n: dict[str, int] = defaultdict(int)
            for (_, label), ts in profile.times.items():
                by_kind[_kind(label)] += 1e6 * sum(ts)
                n[_kind(label)] += len(ts)
            for kind, us in by_kind.items():
                per_call[kind].append(us)
            per_call["rest"].append(total - sum(by_kind.values()))
            counts = dict(n)
    finally:
        executor.PROFILE = saved
    return {
        (f"{kind} x{counts[kind]}" if kind in counts else kind): statistics.median(us)
        for kind, us in per_call.items()
    }


def bench_model(name: str, runs: int, profile: bool) -> list[str]:
    from benchmarks.models import build

    model, inputs = build(name, "small", "cpu", torch.float32)
    with torch.no_grad():
        compiled = compile_quietly(model, inputs)
        want = model(*inputs)
        got = compiled(*inputs)
        torch.testing.assert_close(
            got.logits if hasattr(got, "logits") else got[0],
            want.logits if hasattr(want, "logits") else want[0],
        )
        fns: dict[str, Fn] = {"eager": lambda: model(*inputs), "xfuse": lambda: compiled(*inputs)}
        us = interleaved_us(fns, runs, warmup=5)
        steps = step_breakdown(compiled, inputs, runs)
        executable = next(iter(compiled.specialisations.values()))
        program = executable.program
        kinds = ", ".join(k for k in steps if k != "rest")
        lines = [
            f"{name} (small config, f32): {len(program.steps)} steps ({kinds}), "
            f"{len(program.kernels)} kernels.",
            "",
            "| | µs per forward |",
            "|---|---|",
            f"| eager | {us['eager']:.0f} |",
            f"| xfuse | {us['xfuse']:.0f} |",
        ]
        for kind, t in steps.items():
            what = (
                "rest of the call: checks, signature, binding, output rules"
                if kind == "rest"
                else f"{kind}, timed one by one"
            )
            lines.append(f"| xfuse with the step profile on: {what} | {t:.0f} |")
        if profile:
            lines += ["", "```", cprofile_top(lambda: compiled(*inputs), 200), "```"]
    return lines


def cprofile_top(fn: Fn, calls: int, top: int = 25) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue().strip()


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical cores, torch "
        f"{torch.__version__} ({torch.get_num_threads()} threads), Python "
        f"{platform.python_version()}; load average {load}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.host", description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--no-model", action="store_true")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the model's and the dynamic MLP's call"
    )
    parser.add_argument("--only", choices=("chains", "externs", "dynamic", "compiled", "model"))
    parser.add_argument(
        "--threads", type=int, default=1, help="torch's and xfuse's CPU threads (default 1)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ["XFUSE_NUM_THREADS"] = str(args.threads)  # read when the first kernel loads
    sections: list[tuple[str, Callable[[], list[str]]]] = [
        ("chains", lambda: bench_chains(args.runs)),
        ("externs", lambda: bench_externs(args.runs)),
        ("dynamic", lambda: bench_dynamic(args.runs, args.profile)),
        ("compiled", lambda: bench_compiled(args.runs)),
        ("model", lambda: bench_model(args.model, max(20, args.runs // 4), args.profile)),
    ]
    for name, run in sections:
        if args.only not in (None, name) or (name == "model" and args.no_model):
            continue
        print("\n".join(run()) + "\n", flush=True)
    print(machine())


if __name__ == "__main__":
    sys.exit(main())
