"""
CUDA benchmark: torch eager, torch.compile (Inductor/Triton) and xfuse side by side on one GPU,
in one process, timed with CUDA events.

    python -m benchmarks.gpu_kernels [--runs 20] [--size 16384] [--skip-inductor]
        [--cases softmax,mlp] [--batch 1] [--dtypes f32,bf16]

Cases: the pointwise chain gelu(x*w+b)*sigmoid(x), softmax, layernorm and RMSNorm (x of
size x size, in each of `--dtypes`, w and b per column), a column sum and a full sum of x, the bundled MLP and
transformer block (`--cases` picks some by name). For each: the
median of `--runs` timed calls after warm-up (in rounds that call eager, xfuse and Inductor
once each in turn), the ratios xfuse/eager and xfuse/Inductor (below 1:
xfuse is faster), and the fraction of the measured device copy bandwidth (bytes = one read of
every input and parameter + one write of every output, against `torch.empty_like(x).copy_(x)`).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

import xfuse.api
from benchmarks.timing import cuda_ms, interleaved, median_ms, medians
from examples.mlp import make_mlp
from examples.transformer import make_transformer_block

Fn = Callable[..., Any]


@dataclass
class Case:
    name: str
    fn: Fn
    inputs: tuple[torch.Tensor, ...]
    traffic_bytes: int
    dtype: str = "f32"


def copy_bandwidth(runs: int) -> float:
    """Bytes per second of a device-to-device copy of 1 GiB (read + write)."""
    x = torch.empty(2**28, device="cuda:0")
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x), runs, warmup=3, clock=cuda_ms)
    return 2 * x.numel() * 4 / (ms * 1e-3)


def _nbytes(ts: Any) -> int:
    if isinstance(ts, torch.Tensor):
        return ts.numel() * ts.element_size()
    if isinstance(ts, list | tuple):
        return sum(_nbytes(t) for t in ts)
    return 0


DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def kernel_cases(size: int, dtype: str = "f32") -> list[Case]:
    t = DTYPES[dtype]
    x = torch.randn(size, size, device="cuda:0", dtype=t)
    w = torch.randn(size, device="cuda:0", dtype=t)
    b = torch.randn(size, device="cuda:0", dtype=t)
    xb = x.numel() * x.element_size()
    wb = size * x.element_size()
    cases = [
        Case(
            "pointwise",
            lambda x, w, b: F.gelu(x * w + b) * torch.sigmoid(x),
            (x, w, b),
            2 * xb + 2 * wb,
        ),
        Case("softmax", lambda x: torch.softmax(x, -1), (x,), 2 * xb),
        Case(
            "layernorm", lambda x, w, b: F.layer_norm(x, (size,), w, b), (x, w, b), 2 * xb + 2 * wb
        ),
        Case(
            "rmsnorm",
            lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
            (x, w),
            2 * xb + wb,
        ),
        Case("column sum", lambda x: x.sum(0), (x,), xb + wb),
        Case("full sum", lambda x: x.sum(), (x,), xb + x.element_size()),
    ]
    for case in cases:
        case.dtype = dtype
    return cases


def model_cases() -> list[Case]:
    cases = []
    for name, (model, inputs) in (("mlp", make_mlp()), ("transformer", make_transformer_block())):
        model = model.cuda()
        inputs = tuple(t.cuda() for t in inputs)
        with torch.no_grad():
            out = model(*inputs)
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        cases.append(Case(name, model, inputs, _nbytes(inputs) + params + _nbytes(out)))
    return cases


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    bandwidth = copy_bandwidth(args.runs)
    print(f"device: {torch.cuda.get_device_name()}; copy bandwidth {bandwidth / 1e12:.2f} TB/s")
    rows = []
    cases = [c for d in args.dtypes for c in kernel_cases(args.size, d)]
    for case in cases + model_cases():
        if args.cases and case.name not in args.cases:
            continue
        with torch.no_grad():
            expected = case.fn(*case.inputs)
            compiled = xfuse.api.compile(case.fn, case.inputs, device="cuda:0")
            got = compiled(*case.inputs)
            error = (got.float() - expected.float()).abs().max().item()
            fns = {
                "eager": lambda c=case: c.fn(*c.inputs),
                "xfuse": lambda c=case, f=compiled: f(*c.inputs),
            }
            if not args.skip_inductor:
                fast = torch.compile(case.fn)
                fns["inductor"] = lambda c=case, f=fast: f(*c.inputs)
            clock = functools.partial(cuda_ms, batch=args.batch)
            ms = medians(interleaved(fns, args.runs, warmup=3, clock=clock))
            eager, ours = ms["eager"], ms["xfuse"]
            inductor = ms.get("inductor", float("nan"))
        row = {
            "case": case.name,
            "dtype": case.dtype,
            "eager_ms": eager,
            "inductor_ms": inductor,
            "xfuse_ms": ours,
            "xfuse/eager": ours / eager,
            "xfuse/inductor": ours / inductor,
            "eager_bw": case.traffic_bytes / (eager * 1e-3) / bandwidth,
            "inductor_bw": case.traffic_bytes / (inductor * 1e-3) / bandwidth,
            "xfuse_bw": case.traffic_bytes / (ours * 1e-3) / bandwidth,
            "max_err": error,
        }
        rows.append(row)
        print(format_row(row), flush=True)
        del compiled
        torch.cuda.empty_cache()
    return rows


HEADER = (
    "| case | dtype | eager ms | Inductor ms | xfuse ms | xfuse/eager | xfuse/Inductor "
    "| eager %BW | Inductor %BW | xfuse %BW | max err |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def format_row(r: dict[str, Any]) -> str:
    return (
        f"| {r['case']} | {r['dtype']} | {r['eager_ms']:.3f} | {r['inductor_ms']:.3f} | {r['xfuse_ms']:.3f} "
        f"| {r['xfuse/eager']:.2f} | {r['xfuse/inductor']:.2f} | {100 * r['eager_bw']:.0f}% "
        f"| {100 * r['inductor_bw']:.0f}% | {100 * r['xfuse_bw']:.0f}% | {r['max_err']:.1e} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--skip-inductor", action="store_true")
    parser.add_argument(
        "--batch",
        type=int,
        default=1,
        help="calls per timing: 1 measures latency (host time counts), more the kernels alone",
    )
    parser.add_argument(
        "--cases", type=lambda s: s.split(","), default=[], help="comma-separated case names"
    )
    parser.add_argument(
        "--dtypes",
        type=lambda s: s.split(","),
        default=["f32"],
        help=f"comma-separated dtypes of the kernel cases ({', '.join(DTYPES)})",
    )
    args = parser.parse_args()
    print(HEADER)
    rows = run(args)
    print("\n" + HEADER)
    for row in rows:
        print(format_row(row))


if __name__ == "__main__":
    main()
