"""`make demo`: compile the bundled MLP and transformer block with xfuse and run them.

    python -m examples.demo          # ops -> groups -> kernels, max error vs eager, timings
    python -m examples.demo --ir     # only print the imported graph IR of the MLP

For each model: the fusion summary (ops -> groups -> kernels, one line per group), the max
error of xfuse against eager PyTorch, and the median time of eager, xfuse and (where it works
on this machine) torch.compile's Inductor.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

import xfuse
from examples.mlp import make_mlp
from examples.transformer import make_transformer_block
from xfuse.frontend import import_module

MODELS: dict[str, Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]] = {
    "MLP": make_mlp,
    "transformer block": make_transformer_block,
}


def median_ms(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], runs: int = 10) -> float:
    for _ in range(2):
        fn(*inputs)
    times: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(*inputs)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def inductor_ms(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> str:
    try:
        torch._dynamo.reset()
        return f"{median_ms(torch.compile(model), inputs):.2f} ms"
    except Exception as e:  # no C++ compiler, or an Inductor limitation: say so, go on
        return f"n/a ({type(e).__name__})"


def run_model(
    name: str, make: Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]
) -> None:
    model, inputs = make()
    print(f"== {name}: inputs {[list(t.shape) for t in inputs]}")
    start = time.perf_counter()
    compiled = xfuse.compile(model, inputs)
    print(f"compiled in {time.perf_counter() - start:.2f} s")
    print(xfuse.explain(model, inputs))
    with torch.no_grad():
        error = (compiled(*inputs) - model(*inputs)).abs().max().item()
        print(f"max |xfuse - eager| = {error:.2e}")
        print(
            f"eager {median_ms(model, inputs):.2f} ms, xfuse {median_ms(compiled, inputs):.2f} ms, "
            f"Inductor {inductor_ms(model, inputs)}"
        )
    print()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="compile and run the bundled models")
    parser.add_argument("--ir", action="store_true", help="print the MLP's graph IR and stop")
    args = parser.parse_args(argv)
    if args.ir:
        model, inputs = make_mlp(batch=8, d_in=16, d_hidden=32, d_out=16)
        print(import_module(model, inputs).module)
        return
    warnings.filterwarnings("ignore", category=FutureWarning)
    for name, make in MODELS.items():
        run_model(name, make)


if __name__ == "__main__":
    main()
