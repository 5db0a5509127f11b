"""
What accumulating short f32 sums in f64 costs on the CPU (`lower-to-loops{wide_sums}`):
each reduction compiled by xfuse with f32 accumulators and with the runtime's default (f64 for
a sum of at most `SHORT_SUM` terms over several loops), beside eager, one thread, interleaved:

    python -m benchmarks.wide_sums [--runs 50]

Prints a markdown table of median ms (eager, xfuse f32, xfuse default) and the ratio of the
two xfuse columns, and whether each default kernel accumulates in f64. Compiles in this process
(`XFUSE_COMPILE_WORKERS=0`), each program with a kernel cache of its own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], tuple[int, ...]]] = {
    "softmax(-1) 16384x64": (lambda t: torch.softmax(t, -1), (16384, 64)),
    "layer_norm 16384x64": (lambda t: torch.nn.functional.layer_norm(t, (64,)), (16384, 64)),
    "sum(-1) 65536x32": (lambda t: t.sum(-1), (65536, 32)),
    "mean(2, 3) 64x256x7x7": (lambda t: t.mean((2, 3)), (64, 256, 7, 7)),
    "sum(0, 2) 8x16384x8": (lambda t: t.sum((0, 2)), (8, 16384, 8)),
    "sum(1, 3) 64x8x128x8": (lambda t: t.sum((1, 3)), (64, 8, 128, 8)),
}


def compiled(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, wide: bool) -> Any:
    """`fn` compiled by xfuse with `wide_sums` on or off (a fresh kernel cache)."""
    import xfuse
    import xfuse.passes.lowering.lower_to_loops as lowering
    from xfuse.runtime.cache import KernelCache

    saved = lowering.WIDE_SUMS
    lowering.WIDE_SUMS = wide
    try:
        cache = KernelCache(Path(tempfile.mkdtemp(prefix="xfuse-wide-sums-")))
        return xfuse.compile(fn, (x,), quiet=True, cache=cache)
    finally:
        lowering.WIDE_SUMS = saved


def main(argv: list[str] | None = None) -> None:
    from benchmarks.timing import bound, interleaved

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args(argv)
    os.environ["XFUSE_COMPILE_WORKERS"] = "0"  # the switch is this process's
    torch.set_num_threads(1)
    print("| reduction | eager ms | xfuse f32 ms | xfuse default ms | default / f32 | f64 |")
    print("|---|---|---|---|---|---|")
    for name, (fn, shape) in CASES.items():
        x = torch.randn(shape)
        narrow, default = compiled(fn, x, False), compiled(fn, x, True)
        kernels = default.default.program.kernels
        wide = any("f64" in k.loop_ir for k in kernels)
        times: dict[str, list[float]] = interleaved(
            bound({"eager": fn, "f32": narrow, "default": default}, (x,)), args.runs, 3
        )
        ms = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"| {name} | {ms['eager']:.3f} | {ms['f32']:.3f} | {ms['default']:.3f} | "
            f"{ms['default'] / ms['f32']:.2f} | {'yes' if wide else 'no'} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
