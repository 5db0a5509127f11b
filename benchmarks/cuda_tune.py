"""
CUDA code-generation sweep: the four kernels of benchmarks/gpu_kernels.py (16384x16384 f32) compiled
with several `Tuning`s of the CUDA backend, checked against torch (output poisoned first) and
timed with CUDA events; prints a table, the best elementwise and rows choices as an
`XFUSE_CUDA_TUNING` string (`--best FILE` writes it), and the per-launch host overhead.

    python -m benchmarks.cuda_tune [--size 16384] [--runs 30] [--dtype bf16] [--rows SPECS]
        [--best best.txt]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from xdsl.dialects import func

import xfuse.backends.cuda as cuda
from benchmarks.timing import cuda_ms, median_ms
from xfuse.frontend.export import import_for_xfuse
from xfuse.pipeline import DEFAULT_PIPELINE
from xfuse.runtime.compiler import lower_to_loops
from xfuse.runtime.driver import run_pipeline

ELEMENTWISE = [
    ("unroll=1", 4),
    ("unroll=2", 4),
    ("unroll=4", 4),
    ("unroll=2,block_size=512", 4),
    ("unroll=2", 2),
    ("unroll=2", 8),
    ("unroll=4", 8),
    ("unroll=2,elementwise_min_blocks=8", 4),
]
ROWS = [
    "rows_min_blocks=2",
    "rows_min_blocks=0",
    "row_threads=512,rows_min_blocks=2",
    "row_threads=256,max_cached=64,rows_min_blocks=2",
    "max_cached=8,rows_min_blocks=2",
    "row_threads=512,max_cached=8,rows_min_blocks=0",
    "row_threads=512",
    "row_threads=256",
    "row_threads=256,max_cached=64",
    "row_threads=128,max_cached=128",
]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
TOLERANCE = {"f32": 1e-3, "bf16": 6e-2, "f16": 1e-2}
"""Largest error against torch a variant may have (one 16-bit ulp at layernorm's magnitude)."""


def loop_ir(fn, inputs):  # type: ignore[no-untyped-def]
    imported = import_for_xfuse(fn, tuple(t.cpu() for t in inputs))
    module = imported.program.module
    run_pipeline(DEFAULT_PIPELINE, module)
    lower_to_loops(module)
    names = [
        op.sym_name.data
        for op in module.ops
        if isinstance(op, func.FuncOp) and "xfuse.kernel" in op.attributes
    ]
    assert len(names) == 1, names
    return module, names[0]


def tuning(spec: str) -> cuda.Tuning:
    return cuda.Tuning(**{k: int(v) for k, v in (kv.split("=") for kv in spec.split(",") if kv)})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--best")
    parser.add_argument(
        "--elementwise",
        help="elementwise variants to try instead of the built-in list, as "
        "'spec:waves;spec:waves' (e.g. 'unroll=2:8;unroll=1,block_size=1024:1000')",
    )
    parser.add_argument("--cases", help="comma-separated subset of the four cases")
    parser.add_argument(
        "--cols", type=int, help="row length (default --size): x is size*size/cols x cols"
    )
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    parser.add_argument(
        "--rows", help="rows variants to try instead of the built-in list, as 'spec;spec'"
    )
    args = parser.parse_args()
    elementwise = ELEMENTWISE
    if args.elementwise:
        elementwise = [
            (spec, int(waves))
            for spec, _, waves in (v.rpartition(":") for v in args.elementwise.split(";"))
        ]
    rows = args.rows.split(";") if args.rows else ROWS
    n = args.cols or args.size
    dtype = DTYPES[args.dtype]
    x = torch.randn(args.size * args.size // n, n, device="cuda:0", dtype=dtype)
    w = torch.randn(n, device="cuda:0", dtype=dtype)
    b = torch.randn(n, device="cuda:0", dtype=dtype)
    src = torch.empty_like(x)
    copy_ms = median_ms(lambda: src.copy_(x), args.runs, warmup=5, clock=cuda_ms)
    bandwidth = 2 * x.numel() * x.element_size() / (copy_ms * 1e-3)
    print(
        f"device: {torch.cuda.get_device_name()}; copy {bandwidth / 1e12:.2f} TB/s; "
        f"x {tuple(x.shape)} {args.dtype}"
    )
    cases = {
        "pointwise": (lambda x, w, b: F.gelu(x * w + b) * torch.sigmoid(x), (x, w, b)),
        "softmax": (lambda x: torch.softmax(x, -1), (x,)),
        "layernorm": (lambda x, w, b: F.layer_norm(x, (n,), w, b), (x, w, b)),
        "rmsnorm": (
            lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
            (x, w),
        ),
    }
    results: dict[str, dict[str, float]] = {}
    best_total = {"elementwise": {}, "rows": {}}  # type: ignore[var-annotated]
    for name, (fn, inputs) in cases.items():
        if args.cases and name not in args.cases.split(","):
            continue
        module, kernel_name = loop_ir(fn, inputs)
        expected = fn(*inputs)
        out = torch.empty_like(x)
        variants = list(elementwise) if name == "pointwise" else [(s, 4) for s in rows]
        for spec, waves in variants:
            label = spec + (f",waves={waves}" if name == "pointwise" else "")
            try:
                cuda.GRID_WAVES = waves
                ptx = cuda.compile_kernel(module, kernel_name, "sm_90", tuning(spec))
                kernel = cuda.CUDAKernel(ptx, kernel_name)
                params = [t for t in inputs]
                # loop IR's argument order: the kernel's own (weights first for some groups)
                ordered = _ordered(module, kernel_name, params)
                out.fill_(float("nan"))
                kernel([*ordered, out])
                torch.cuda.synchronize()
                error = (out - expected).abs().max().item()
                ms = median_ms(
                    lambda k=kernel, a=[*ordered, out]: k(a), args.runs, warmup=5, clock=cuda_ms
                )
            except Exception as e:  # report and go on: one variant must not stop the sweep
                print(f"| {name} | {label} | failed: {type(e).__name__}: {str(e)[:200]} |")
                continue
            traffic = (2 * x.numel() + sum(t.numel() for t in inputs[1:]) * 2) * x.element_size()
            bw = traffic / (ms * 1e-3) / bandwidth
            print(f"| {name} | {label} | {ms:.3f} ms | {100 * bw:.1f}% | err {error:.1e} |")
            ok = error < TOLERANCE[args.dtype]
            results.setdefault(label, {})[name] = ms if ok else float("inf")
            kind = "elementwise" if name == "pointwise" else "rows"
            best_total[kind].setdefault(label, 0.0)
            best_total[kind][label] += results[label][name]
            del kernel
    chosen = []
    for kind, totals in best_total.items():
        if totals:
            label = min(totals, key=totals.get)
            print(f"best {kind}: {label} ({totals[label]:.3f} ms)")
            chosen.append(label)
    best = ",".join(chosen)
    waves = [kv for kv in best.split(",") if kv.startswith("waves=")]
    tuning_text = ",".join(kv for kv in best.split(",") if not kv.startswith("waves="))
    print(f"XFUSE_CUDA_TUNING={tuning_text} XFUSE_CUDA_WAVES={waves[0][6:] if waves else 4}")
    if args.best:
        Path(args.best).write_text(
            f"export XFUSE_CUDA_TUNING={tuning_text} "
            f"XFUSE_CUDA_WAVES={waves[0][6:] if waves else 4}\n"
        )
    launch_overhead()


def _ordered(module, name, inputs):  # type: ignore[no-untyped-def]
    """The inputs in the kernel's argument order (matched by shape; x is the 2-D one)."""
    kernel = next(
        op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == name
    )
    launch = [op for op in module.walk() if op.name == "fusion.launch"][0]
    forward_args = list(launch.parent_op().args) if launch.parent_op() else []  # type: ignore[union-attr]
    ordered = []
    for operand in launch.operands:
        ordered.append(inputs[forward_args.index(operand)])
    assert len(ordered) == len(kernel.function_type.inputs) - 1
    return ordered


def launch_overhead() -> None:
    """Host time per launch of a tiny kernel: pycuda's generic call vs xfuse's launch path."""
    import numpy as np

    x = torch.randn(64, 1024, device="cuda:0")
    module, name = loop_ir(lambda a: a + 1, (x,))
    kernel = cuda.CUDAKernel(cuda.compile_kernel(module, name, "sm_90"), name)
    out = torch.empty_like(x)
    kernel([x, out])
    loaded = kernel._module_for(0)
    torch.cuda.synchronize()
    calls = 3000

    def generic() -> None:
        loaded.context.push()
        loaded.function(
            np.uintp(x.data_ptr()), np.uintp(out.data_ptr()), block=(256, 1, 1), grid=loaded.grid
        )
        cuda._pycuda().Context.pop()

    for label, fn in (
        ("pycuda generic call", generic),
        ("xfuse CUDAKernel call", lambda: kernel([x, out])),
        ("torch x + 1", lambda: torch.add(x, 1, out=out)),
    ):
        fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        print(f"launch overhead, {label}: {(time.perf_counter() - start) / calls * 1e6:.1f} us")


if __name__ == "__main__":
    main()
