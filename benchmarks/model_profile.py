"""
Where a zoo model's time goes on the GPU: per forward, for eager, Inductor (default and
reduce-overhead) and xfuse side by side (same process, same inputs):

    python -m benchmarks.model_profile [--size small|base] [--models gpt2,...] [--dtype bf16]

- `kernels`: GPU operations per forward (kernels, memcpys and memsets, from torch.profiler;
  kernels replayed from a CUDA graph count too);
- `gpu ms`: the sum of their durations (the GPU's busy time);
- `host ms`: how long the call takes to return, the GPU not waited for (median); with CUDA
  graphs it is the cost of a replay;
- `wall ms`: the time per forward with the GPU waited for (median, CUDA events), so
  `wall - gpu` is the time the GPU waits for the host or sits idle between kernels;
- for xfuse, `own kernels`: its generated kernels' share of the GPU time, their bytes (one read
  of each input buffer and one write of each output buffer per kernel) and the fraction of the
  measured device copy bandwidth they reach, and the time in externs (cuBLAS, cuDNN, attention).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

import xfuse
from benchmarks.gpu_kernels import copy_bandwidth
from benchmarks.models import ZOO, build
from benchmarks.timing import cuda_ms, median_ms, synced_host_ms

Tensor = torch.Tensor
BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i64": 8, "i32": 4, "i8": 1, "i1": 1, "ui8": 1}


@dataclass
class Profile:
    kernels: float
    gpu_ms: float
    host_ms: float
    wall_ms: float
    by_name: dict[str, float]
    """GPU ms per forward of each kernel name."""


def tensor_bytes(type_text: str) -> int:
    """Bytes of a `tensor<4x8xf32>` type."""
    m = re.fullmatch(r"tensor<(?:([0-9x]+)x)?([a-z0-9]+)>", type_text)
    if m is None:
        raise ValueError(f"not a tensor type: {type_text}")
    numel = 1
    for d in (m.group(1) or "").split("x"):
        if d:
            numel *= int(d)
    return numel * BYTES[m.group(2)]


def gpu_operations(prof: Any) -> Iterator[tuple[str, float]]:
    """(name, us) of each GPU operation of a torch.profiler run: kernels, memcpys, memsets. The
    spans that `record_function` ranges leave on the GPU's track (`DistributedDataParallel.
    forward`, `Optimizer.step#AdamW.step`) cover other operations and are left out."""
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and not event.is_user_annotation:
            yield event.name, event.time_range.elapsed_us()


def profile_calls(fn: Callable[[], Any], calls: int) -> Profile:
    host = median_ms(fn, calls, clock=synced_host_ms)
    wall = median_ms(fn, calls, clock=cuda_ms)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    count, busy_us = 0, 0.0
    by_name: dict[str, float] = {}
    for name, us in gpu_operations(prof):
        count += 1
        busy_us += us
        by_name[name] = by_name.get(name, 0.0) + us / 1000 / calls
    return Profile(
        count / calls,
        busy_us / 1000 / calls,
        host,
        wall,
        by_name,
    )


KERNEL_CLASSES: tuple[tuple[str, str], ...] = (
    ("communication", r"nccl"),
    ("attention", r"flash|fmha|sdpa|attention"),
    ("optimizer", r"multi_tensor_apply"),
    ("gemm", r"gemm|nvjet|xmma|cutlass|cublas"),
    ("copy", r"^Memcpy|^Memset"),
)
"""A GPU operation's class, by the first pattern its name matches (the rest are `fused`:
Triton's, xfuse's and eager's elementwise and reduction kernels, the work a fusion compiler
decides). Library classes (`gemm`, `attention`, `communication`, `optimizer`) run the same
calls under every backend."""


def kernel_class(name: str) -> str:
    """The class of a GPU operation named `name` (`KERNEL_CLASSES`)."""
    for label, pattern in KERNEL_CLASSES:
        if re.search(pattern, name, re.IGNORECASE):
            return label
    return "fused"


def by_class(by_name: dict[str, float]) -> dict[str, float]:
    """GPU ms per class from ms per kernel name."""
    out: dict[str, float] = {}
    for name, ms in by_name.items():
        label = kernel_class(name)
        out[label] = out.get(label, 0.0) + ms
    return out


def own_kernel_bytes(compiled: xfuse.api.CompiledProgram) -> int:
    """The bytes xfuse's kernels move per forward (each input read, each output written)."""
    return sum(tensor_bytes(t) for k in compiled.kernels for t in k.inputs + k.outputs)


def is_own(name: str) -> bool:
    """Whether a GPU operation is one of xfuse's kernels: the profiler shows them by
    `xfuse.runtime.compiler.kernel_name` (`xfuse_mul_add_exp`)."""
    return name.startswith("xfuse_")


def run(
    name: str, size: str, dtype: torch.dtype, calls: int, bandwidth: float, names: bool
) -> list[str]:
    model, inputs = build(name, size, "cuda", dtype)
    fns: dict[str, Callable[[], Any]] = {"eager": lambda: model(*inputs)}
    with torch.no_grad():
        compiled = xfuse.compile(model, inputs, "cuda", quiet=True, fallback="error")
        fns["xfuse"] = lambda: compiled(*inputs)
        torch._dynamo.reset()
        inductor = torch.compile(model)
        inductor(*inputs)
        fns["inductor"] = lambda: inductor(*inputs)
        overhead = torch.compile(model, mode="reduce-overhead")
        for _ in range(3):
            overhead(*inputs)
        fns["inductor-ro"] = lambda: overhead(*inputs)
        for fn in fns.values():  # warm-up, capture
            for _ in range(3):
                fn()
        profiles = {k: profile_calls(fn, calls) for k, fn in fns.items()}
    label = f"{name} {'bf16' if dtype == torch.bfloat16 else 'f32'}"
    rows = [
        f"| {label} | {k} | {p.kernels:.0f} | {p.gpu_ms:.3f} | {p.host_ms:.3f} | {p.wall_ms:.3f} |"
        for k, p in profiles.items()
    ]
    own_bytes = own_kernel_bytes(compiled)
    mine = profiles["xfuse"].by_name
    own_ms = sum(ms for k, ms in mine.items() if is_own(k))
    extern_ms = profiles["xfuse"].gpu_ms - own_ms
    fraction = own_bytes / (own_ms * 1e-3) / bandwidth if own_ms else 0.0
    top = sorted(((ms, k) for k, ms in mine.items() if not is_own(k)), reverse=True)[:3]
    rows.append(
        f"| {label} | xfuse own kernels | {len(compiled.kernels)} | {own_ms:.3f} | "
        f"{own_bytes / 1e6:.2f} MB, {fraction:.0%} of copy bandwidth | externs {extern_ms:.3f} ms "
        f"(top: {', '.join(f'{k[:40]} {ms:.3f}' for ms, k in top)}) |"
    )
    if names:
        rows += [
            f"|   | xfuse kernel | {k[:90]} | {ms:.4f} ms | {'own' if is_own(k) else 'extern'} |"
            for k, ms in sorted(mine.items(), key=lambda kv: -kv[1])
        ]
        rows += [
            f"|   | inductor-ro kernel | {k[:90]} | {ms:.4f} ms |"
            for k, ms in sorted(profiles["inductor-ro"].by_name.items(), key=lambda kv: -kv[1])
        ]
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--size", choices=("small", "base"), default="small")
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--dtype", choices=("f32", "bf16", "both"), default="both")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument(
        "--names", action="store_true", help="list the GPU operations of xfuse and reduce-overhead"
    )
    args = parser.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    bandwidth = copy_bandwidth(10)
    print(f"device: {torch.cuda.get_device_name()}; copy bandwidth {bandwidth / 1e12:.2f} TB/s")
    print("| model | system | kernels | gpu ms | host ms | wall ms |")
    print("|---|---|---|---|---|---|")
    dtypes = {"f32": [torch.float32], "bf16": [torch.bfloat16]}.get(
        args.dtype, [torch.float32, torch.bfloat16]
    )
    for name in args.models.split(","):
        for dtype in dtypes:
            try:
                rows = run(name, args.size, dtype, args.calls, bandwidth, args.names)
            except Exception as e:  # a row says what failed; the table goes on
                rows = [f"| {name} | FAILED | {e!s:.200} |"]
            for row in rows:
                print(row, flush=True)


if __name__ == "__main__":
    main()
