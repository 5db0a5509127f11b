"""
What runs outside xfuse's own kernels in each zoo model, and the time it takes: per forward of
the program `xfuse.compile` makes, one row per extern op (convolution, linear, matmul,
attention; and any `graph.torch_call` left):

    python -m benchmarks.extern_times [--size small|base] [--device cpu|cuda] [--models gpt2,...]
                                      [--dtype f32|bf16] [--calls 20]

The program runs without CUDA graphs under torch.profiler; each extern is a top-level aten
event (xfuse's runtime calls the op itself), so its host time is the event's CPU time and its
GPU time the durations of the kernels it launched. `forward ms` is the median time per forward
measured apart from the profiler (CUDA events on the GPU), and `share` each extern's time
(GPU time on CUDA, host time on the CPU) as a fraction of it. The runtime's own allocations
(`aten::empty*`) are left out; its views and bookkeeping calls form one `runtime` row.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

import xfuse
from benchmarks.models import ZOO, build
from benchmarks.timing import device_ms, median_ms

ALLOCATIONS = ("aten::empty", "aten::empty_strided", "aten::empty_like", "aten::zeros")
RUNTIME = frozenset(
    "view reshape _unsafe_view as_strided expand permute t transpose slice select unsqueeze "
    "squeeze alias detach lift_fresh to resolve_conj resolve_neg item _local_scalar_dense".split()
)
"""Top-level aten calls that launch no computation: the runtime's views and bookkeeping, one
row together."""


@dataclass
class ExternTime:
    name: str
    calls: float
    """Calls per forward."""
    host_ms: float
    gpu_ms: float


def extern_times(fn: Callable[[], Any], device: str, calls: int) -> list[ExternTime]:
    """The top-level aten events of `calls` runs of `fn`, per op name and per call: each
    (op, input shapes) costs the median of its events (robust to a preempted event on a busy
    machine) times its events per call."""
    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(calls):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
    events: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for event in prof.events():
        if event.cpu_parent is not None or not event.name.startswith("aten::"):
            continue
        if event.name in ALLOCATIONS or event.device_type != torch.autograd.DeviceType.CPU:
            continue
        name = event.name.removeprefix("aten::")
        name = "runtime (views, detach, item, ...)" if name in RUNTIME else name
        key = (name, str(event.input_shapes))
        events.setdefault(key, []).append((event.cpu_time_total, event.device_time_total))
    totals: dict[str, ExternTime] = {}
    for (name, _), times in events.items():
        per_call = len(times) / calls
        host = statistics.median(t[0] for t in times) * per_call / 1000
        gpu = statistics.median(t[1] for t in times) * per_call / 1000
        e = totals.setdefault(name, ExternTime(name, 0.0, 0.0, 0.0))
        e.calls, e.host_ms, e.gpu_ms = e.calls + per_call, e.host_ms + host, e.gpu_ms + gpu
    return sorted(totals.values(), key=lambda e: -(e.gpu_ms if device == "cuda" else e.host_ms))


def run(name: str, size: str, device: str, dtype: torch.dtype, calls: int) -> list[str]:
    model, inputs = build(name, size, device, dtype)
    with torch.no_grad():
        compiled = xfuse.compile(
            model, inputs, device, quiet=True, fallback="error", cuda_graphs=False
        )

        def forward() -> Any:
            return compiled(*inputs)

        for _ in range(3):
            forward()
        total = median_ms(forward, calls, clock=device_ms(device))
        externs = extern_times(forward, device, calls)
    label = f"{name} {'bf16' if dtype == torch.bfloat16 else 'f32'}"
    runtime = [e for e in externs if e.name.startswith("runtime")]
    externs = [e for e in externs if not e.name.startswith("runtime")]
    rows = []
    for e in externs + runtime:
        spent = e.gpu_ms if device == "cuda" else e.host_ms
        rows.append(
            f"| {label} | {e.name} | {e.calls:g} | {e.host_ms:.3f} | "
            + (f"{e.gpu_ms:.3f} | " if device == "cuda" else "")
            + f"{total:.3f} | {spent / total:.0%} |"
        )
    spent_all = sum(e.gpu_ms if device == "cuda" else e.host_ms for e in externs)
    rows.append(
        f"| {label} | **all externs** | {sum(e.calls for e in externs):g} | "
        f"{sum(e.host_ms for e in externs):.3f} | "
        + (f"{sum(e.gpu_ms for e in externs):.3f} | " if device == "cuda" else "")
        + f"{total:.3f} | {spent_all / total:.0%} |"
    )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--size", choices=("small", "base"), default="small")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    gpu = "GPU ms | " if args.device == "cuda" else ""
    print(f"| model | extern op | calls | host ms | {gpu}forward ms | share |")
    print("|---|---|---|---|" + ("---|" if gpu else "") + "---|---|")
    for name in args.models.split(","):
        for row in run(name, args.size, args.device, dtype, args.calls):
            print(row, flush=True)


if __name__ == "__main__":
    main()
