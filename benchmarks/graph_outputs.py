"""
CUDA-graph outputs handed over against copied out: the zoo models compiled twice with xfuse, one
program handing a replay's outputs to the caller when it has dropped the last call's (the
default), one copying every output out of the graph's memory (a ring of one capture, as before
the hand-over), beside eager and Inductor's reduce-overhead, interleaved in one process.

    python -m benchmarks.graph_outputs [--models gpt2,llama,...] [--runs 30]

Per model and dtype: the median ms per forward (CUDA events around one call and a
synchronisation), and the median host ms of a call (the host clock around the call alone, no
synchronisation: what the caller waits for before it can issue more work), with each
program's captures and handed-over replays. Each call's result is dropped before the next, as a
serving loop does.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any
from unittest import mock

import torch

import xfuse
from benchmarks.models import ZOO, assert_matches, build
from benchmarks.timing import events_and_host_ms, interleaved, median_columns, warm_up
from xfuse.runtime import cuda_graphs

Fn = Callable[[], Any]


def compare(name: str, dtype: torch.dtype, runs: int) -> str:
    model, inputs = build(name, "small", "cuda", dtype)
    with torch.no_grad():
        want = model(*inputs)
        handed = xfuse.compile(model, inputs, "cuda", quiet=True, fallback="error")
        with mock.patch.object(cuda_graphs, "RING_SIZE", 1):
            copied = xfuse.compile(model, inputs, "cuda", quiet=True, fallback="error")
        overhead = torch.compile(model, mode="reduce-overhead")
        fns: dict[str, Fn] = {
            "eager": lambda: model(*inputs),
            "inductor-ro": lambda: overhead(*inputs),
            "xfuse copy-out": lambda: copied(*inputs),
            "xfuse hand-over": lambda: handed(*inputs),
        }
        warm_up(fns.values(), 3)
        assert_matches(handed(*inputs), want, dtype)
        assert_matches(copied(*inputs), want, dtype)
        samples = interleaved(fns, runs, clock=events_and_host_ms)
    timed = median_columns(samples)
    ms = {k: t[0] for k, t in timed.items()}
    host = {k: t[1] for k, t in timed.items()}
    runners = {k: p.default.graphs for k, p in (("copy", copied), ("hand", handed))}
    counts = ", ".join(
        f"{k}: {r.captures} captures, {r.handed}/{r.replays} handed over"
        for k, r in runners.items()
        if r is not None
    )
    dt = "f32" if dtype == torch.float32 else "bf16"
    cells = " | ".join(f"{ms[k]:.3f} / {host[k]:.3f}" for k in fns)
    ratio = ms["xfuse hand-over"] / ms["inductor-ro"]
    return f"| {name} | {dt} | {cells} | {ratio:.2f} | {counts} |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--dtypes", default="f32,bf16")
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16}
    print(
        "| model | dtype | eager ms / host ms | Inductor r-o | xfuse copy-out | xfuse hand-over "
        "| hand-over / r-o | graphs |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for dt in args.dtypes.split(","):
            print(compare(name, dtypes[dt], args.runs), flush=True)


if __name__ == "__main__":
    main()
