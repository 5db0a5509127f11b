"""Pads and tap slices of symbolic dims (docs/dynamic-shapes.md), differentially: random
programs of a pad of symbolic dims by constants, a slice from a padded dim's end, and
elementwise work, built as a symbolic program (fused, lowered, the CPU's loops to runtime sizes
cut into border and interior pieces) and run at random sizes, small ones included, against the
graph interpreter on the same program: interpret(pass(G)) == interpret(G)."""

from __future__ import annotations

import random

import pytest
import torch

from xfuse import interpret
from xfuse.ir.context import parse
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.symbolic import SymbolicProgram

PROGRAMS = 24


def _program(seed: int) -> tuple[str, list[int]]:
    """A random program's text and which of its input's dims are symbolic: `x` of rank 2 or
    3, each symbolic dim padded by 0-3 on each side (at least one padded), the padded value
    scaled, then sliced back from both ends of each padded symbolic dim by a random tap."""
    rng = random.Random(seed)
    rank = rng.choice((2, 3))
    static = [rng.choice((3, 4)) for _ in range(rank)]
    symbolic = sorted(rng.sample(range(rank), rng.choice((1, min(2, rank)))))
    names = {d: f"s{i}" for i, d in enumerate(symbolic)}
    low = [rng.randint(0, 3) if d in names else rng.randint(0, 1) for d in range(rank)]
    high = [rng.randint(0, 3) if d in names else rng.randint(0, 1) for d in range(rank)]
    first = symbolic[0]
    if low[first] + high[first] == 0:
        low[first] = 1
    table = [f"{n} = input(0, {d}) hint 6 range [2, 64]" for d, n in names.items()]
    padded, sliced, starts, limits = [], [], [], []
    derived = 0
    for d in range(rank):
        if d not in names:
            padded.append(str(static[d] + low[d] + high[d]))
            sliced.append(str(static[d] + low[d] + high[d]))
            starts.append(0)
            limits.append(static[d] + low[d] + high[d])
            continue
        extra = low[d] + high[d]
        if extra:
            table.append(f"e{derived} = {names[d]} + {extra}")
            padded.append(f"e{derived}")
            derived += 1
        else:
            padded.append(names[d])
        start = rng.randint(0, extra)
        back = extra - start  # the slice has the input's size again
        starts.append(start)
        limits.append(-1 - back)
        sliced.append(names[d])

    def ttype(dims: list[str]) -> str:
        shape = "x".join("?" if not d.isdigit() else d for d in dims)
        syms = [d for d in dims if not d.isdigit()]
        return f"tensor<{shape}xf32, #graph.syms<{', '.join(syms)}>>"

    xdims = [names[d] if d in names else str(static[d]) for d in range(rank)]
    text = f"""
func.func @forward(%x: {ttype(xdims)}) -> {ttype(sliced)} attributes {{graph.sizes = #graph.sizes<{", ".join(table)}>}} {{
  %p = graph.pad %x low = {low} high = {high} mode = "constant" value = {rng.choice((0.0, -1.5))} : f64 : {ttype(xdims)} -> {ttype(padded)}
  %two = graph.constant dense<2.0> : tensor<f32>
  %m = graph.mul %p, %two : {ttype(padded)}, tensor<f32> -> {ttype(padded)}
  %s = graph.slice %m start = {starts} limit = {limits} stride = {[1] * rank} : {ttype(padded)} -> {ttype(sliced)}
  %e = graph.exp %s : {ttype(sliced)}
  func.return %e : {ttype(sliced)}
}}"""
    return text, [static[d] if d not in names else -1 for d in range(rank)]


@pytest.mark.parametrize("seed", range(PROGRAMS))
def test_symbolic_pads_and_tap_slices_match_the_interpreter(seed: int) -> None:
    text, dims = _program(seed)
    module = parse(text)
    compiled = SymbolicProgram(module, cache=KernelCache(None))
    rng = random.Random(1000 + seed)
    for _ in range(4):
        shape = [d if d >= 0 else rng.choice((2, 3, 5, 17, 33)) for d in dims]
        x = torch.randn(shape)
        (got,) = compiled(x)
        (want,) = interpret(parse(text), [x])
        torch.testing.assert_close(got, want)
