"""
CPU benchmark: torch eager, torch.compile (Inductor) and xfuse side by side, in one process.

    python -m benchmarks.cpu [--runs 10] [--size 4096] [--write benchmarks/RESULTS.md]

Cases: the pointwise chain gelu(x*w+b)*sigmoid(x), softmax, layernorm and RMSNorm (x of
size x size f32, w and b per column), the bundled MLP and transformer block. For each: the
median of `--runs` timed runs after warm-up (in rounds that run each of the three once), the
time ratios xfuse/eager and xfuse/Inductor (below 1: xfuse is faster), the fraction of the machine's copy bandwidth xfuse reaches (bytes
= one read of every input and parameter + one write of every output, against `y.copy_(x)`
into an existing buffer), the cold compile time of each compiler (xfuse with an empty kernel
cache, Inductor with a fresh cache directory; compile + first call), and the max error of
xfuse against eager.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Inductor reads its cache directory from the environment: a fresh one makes its compile cold.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-bench-"))

import torch
import torch.nn.functional as F

import xfuse
from benchmarks import timing
from benchmarks.timing import interleaved_ms, median_ms
from examples.mlp import make_mlp
from examples.transformer import make_transformer_block
from xfuse.backends.threadpool import shared_pool
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.steps import REUSE_OUTPUTS_DEFAULT, reuse_outputs_enabled

Fn = Callable[..., Any]


@dataclass
class Case:
    name: str
    fn: Fn
    inputs: tuple[torch.Tensor, ...]
    params: tuple[torch.Tensor, ...] = ()


def pointwise(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(x * w + b) * torch.sigmoid(x)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b)


def rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, eps=1e-6)


def cases(size: int) -> list[Case]:
    torch.manual_seed(0)
    x = torch.randn(size, size)
    w, b = torch.randn(size), torch.randn(size)
    mlp, mlp_in = make_mlp()
    block, block_in = make_transformer_block()
    return [
        Case("pointwise gelu(x*w+b)*sigmoid(x)", pointwise, (x, w, b)),
        Case("softmax", softmax, (x,)),
        Case("layernorm", layernorm, (x, w, b)),
        Case("rmsnorm", rmsnorm, (x, w)),
        Case("mlp", mlp, mlp_in, tuple(mlp.parameters())),
        Case("transformer block", block, block_in, tuple(block.parameters())),
    ]


def copy_bandwidth(size: int, runs: int) -> tuple[float, float]:
    """Bytes per second (one read + one write) of a copy into an existing buffer
    (`y.copy_(x)`) and into a fresh one (`torch.empty_like(x).copy_(x)`, which also pays the
    page faults of new memory)."""
    x = torch.randn(size, size)
    y = torch.empty_like(x)
    existing = median_ms(lambda: y.copy_(x), runs, warmup=2)
    fresh = median_ms(lambda: torch.empty_like(x).copy_(x), runs, warmup=2)
    return 2 * x.nbytes / (existing / 1000), 2 * x.nbytes / (fresh / 1000)


def tensors_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.nbytes
    if isinstance(value, list | tuple):
        return sum(tensors_bytes(v) for v in value)
    return 0


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


@dataclass
class Row:
    name: str
    eager_ms: float
    inductor_ms: float | None
    xfuse_ms: float
    bandwidth_fraction: float
    xfuse_cold_s: float
    inductor_cold_s: float | None
    max_error: float
    groups: int
    kernels: int
    fallbacks: int
    xfuse_fresh_ms: float
    """xfuse with output recycling off (every output fresh memory, as eager's)."""
    xfuse_pool_ms: float | None = None
    """The same on xfuse's Python thread pool instead of torch's OpenMP threads (None: this
    torch has no OpenMP)."""


def bench(case: Case, runs: int, bandwidth: float) -> Row:
    expected = case.fn(*case.inputs)
    with tempfile.TemporaryDirectory(prefix="xfuse-bench-") as cache_dir:
        cache = KernelCache(Path(cache_dir))

        def cold_xfuse() -> Any:
            program = xfuse.compile(case.fn, case.inputs, cache=cache)
            program(*case.inputs)
            return program

        compiled, xfuse_cold = timed(cold_xfuse)
    error = float((compiled(*case.inputs) - expected).abs().max())
    fns: dict[str, Fn] = {
        "eager": case.fn,
        "xfuse": compiled,
        "xfuse fresh": (fresh := without_recycling(case.fn, case.inputs)),
    }
    if shared_pool().openmp:
        fns["xfuse pool"] = on_python_pool(fresh)
    inductor_cold: float | None = None
    try:
        torch._dynamo.reset()
        inductor = torch.compile(case.fn)
        _, inductor_cold = timed(lambda: inductor(*case.inputs))
        fns["inductor"] = inductor
    except Exception as e:  # Inductor needs a C++ compiler; report, do not stop
        print(f"  inductor failed on {case.name}: {type(e).__name__}: {e}", file=sys.stderr)
    medians = timing.medians(interleaved_ms(fns, case.inputs, runs))
    eager_ms, xfuse_ms, inductor_ms = medians["eager"], medians["xfuse"], medians.get("inductor")
    moved = tensors_bytes(case.inputs) + tensors_bytes(case.params) + tensors_bytes(expected)
    return Row(
        case.name,
        eager_ms,
        inductor_ms,
        xfuse_ms,
        moved / (xfuse_ms / 1000) / bandwidth,
        xfuse_cold,
        inductor_cold,
        error,
        len(compiled.groups),
        len(compiled.kernels),
        len(compiled.fallbacks),
        medians["xfuse fresh"],
        medians.get("xfuse pool"),
    )


def without_recycling(fn: Fn, inputs: tuple[torch.Tensor, ...]) -> Fn:
    """`fn` compiled by xfuse (kernels from the cache) with output recycling off: a pool reads
    `XFUSE_REUSE_OUTPUTS` when made, at the first call."""
    saved = os.environ.get("XFUSE_REUSE_OUTPUTS")
    os.environ["XFUSE_REUSE_OUTPUTS"] = "0"
    try:
        program = xfuse.compile(fn, inputs, quiet=True)
        program(*inputs)
    finally:
        if saved is None:
            del os.environ["XFUSE_REUSE_OUTPUTS"]
        else:
            os.environ["XFUSE_REUSE_OUTPUTS"] = saved
    return program


def on_python_pool(program: Fn) -> Fn:
    """`program` with its kernels' chunks on xfuse's Python thread pool instead of torch's
    OpenMP threads (`xfuse.backends.openmp`), for comparison in the same rounds."""
    pool = shared_pool()

    def run(*inputs: torch.Tensor) -> Any:
        pool.openmp, saved = False, pool.openmp
        try:
            return program(*inputs)
        finally:
            pool.openmp = saved

    return run


def fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def table(rows: list[Row]) -> str:
    header = (
        "| case | eager ms | Inductor ms | xfuse ms | xfuse/eager | xfuse/Inductor "
        "| xfuse % copy BW | cold compile xfuse s | cold compile Inductor s "
        "| groups/kernels/fallbacks | max err | xfuse ms, recycling off | recycling saves "
        "| recycling off / Inductor | recycling off, Python pool ms |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.eager_ms:.1f} | {fmt(r.inductor_ms, '.1f')} | {r.xfuse_ms:.1f} "
            f"| {r.xfuse_ms / r.eager_ms:.2f} "
            f"| {fmt(r.xfuse_ms / r.inductor_ms if r.inductor_ms else None, '.2f')} "
            f"| {100 * r.bandwidth_fraction:.0f}% | {r.xfuse_cold_s:.2f} "
            f"| {fmt(r.inductor_cold_s, '.2f')} | {r.groups}/{r.kernels}/{r.fallbacks} "
            f"| {r.max_error:.1e} | {r.xfuse_fresh_ms:.1f} "
            f"| {100 * (1 - r.xfuse_ms / r.xfuse_fresh_ms):.0f}% "
            f"| {fmt(r.xfuse_fresh_ms / r.inductor_ms if r.inductor_ms else None, '.2f')} "
            f"| {fmt(r.xfuse_pool_ms, '.1f')} |"
        )
    return "\n".join(lines)


def threading_note() -> str:
    pool = shared_pool()
    openmp = pool.on_openmp()
    where = "torch's OpenMP threads" if openmp else "xfuse's Python pool"
    if pool.openmp and not openmp:
        where += " (the machine is oversubscribed: `XFUSE_OPENMP=1` forces OpenMP threads)"
    return (
        f"At the end xfuse kernels ran on {where}, {pool.threads} threads, from "
        f"{pool.min_work_for(openmp)} elements of work; "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}."
    )


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{model}, {os.cpu_count()} logical cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), Python {platform.python_version()}; "
        f"load average at the end {load} (other work on the machine distorts every column)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--only", help="run the cases whose name contains this")
    parser.add_argument("--write", type=Path, help="write the table into this markdown file")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    bandwidth, fresh_bandwidth = copy_bandwidth(args.size, args.runs)
    rows: list[Row] = []
    with torch.no_grad():
        for case in cases(args.size):
            if args.only and args.only not in case.name:
                continue
            print(f"benchmarking {case.name} ...", file=sys.stderr, flush=True)
            rows.append(bench(case, args.runs, bandwidth))
    text = (
        f"Machine: {machine()}\n\n"
        f"Copy bandwidth ({args.size}x{args.size} f32, one read + one write): "
        f"{bandwidth / 1e9:.1f} GB/s into an existing buffer (`y.copy_(x)`, the reference of "
        f"the % column), {fresh_bandwidth / 1e9:.1f} GB/s into a fresh one "
        "(`torch.empty_like(x).copy_(x)`: first writes to new memory page-fault). "
        f"Median of {args.runs} runs after 2 warm-up runs, in rounds that run eager, xfuse and "
        "Inductor once each in turn; "
        "xfuse/eager and xfuse/Inductor are time ratios (below 1: xfuse is faster). "
        f"xfuse output recycling: {'on' if reuse_outputs_enabled() else 'off'} in this run "
        f"(shipped default: {'on' if REUSE_OUTPUTS_DEFAULT else 'off'}; `XFUSE_REUSE_OUTPUTS=0` turns "
        "it off); the last four columns time xfuse with recycling off (every output fresh "
        "memory, as eager's) in the same rounds, the share of that time recycling saves, its "
        "ratio to Inductor's time, and the same with the kernels' chunks on xfuse's Python "
        "thread pool instead of torch's OpenMP threads (`XFUSE_OPENMP=0`). "
        f"{threading_note()}"
        "\n\n" + table(rows)
    )
    print(text)
    if args.write is not None:
        write_section(args.write, text)
    return 0


SECTION = "## CPU: eager vs Inductor vs xfuse"


def write_section(path: Path, text: str) -> None:
    """Replace (or add) this benchmark's section of the results file; other sections stay."""
    old = path.read_text() if path.exists() else "# Benchmark results\n"
    body = f"{SECTION}\n\n`python -m benchmarks.cpu --write {path}`\n\n{text}\n"
    if SECTION in old:
        before, rest = old.split(SECTION, 1)
        after = rest[rest.find("\n## ") :] if "\n## " in rest else ""
        new = before + body + after.lstrip("\n")
    else:
        new = old.rstrip("\n") + "\n\n" + body
    path.write_text(new)


if __name__ == "__main__":
    raise SystemExit(main())
