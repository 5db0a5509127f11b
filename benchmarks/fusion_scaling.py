"""
How the fusion passes scale: synthetic `graph` programs of 1k, 10k and 100k ops (chains, wide
diamonds, transformer-like repeated blocks); prints the time of each pass per size, the time
per op, and the groups formed. A benchmark, not a timed test.

    python -m benchmarks.fusion_scaling [--sizes 1000,10000,100000] [--families chain,...]

The targets: 10k ops fused in under 2 s on one core, and the time per op at 100k no
more than 1.5x that at 1k. Both the wall-clock and the CPU time of the pass are printed; the
time per op and its ratio to 1k use CPU time, which a busy shared machine disturbs less
(run under `taskset -c 0` to stay on one core).
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, f32
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from xfuse.dialects import graph
from xfuse.dialects.fusion import GroupOp
from xfuse.ir.context import make_context
from xfuse.passes.fusion.fuse_greedy import FuseGreedyPass
from xfuse.passes.fusion.fuse_scored import FuseScoredPass

N, D = 64, 128


class Builder:
    def __init__(self) -> None:
        self.block = Block(
            arg_types=[TensorType(f32, (N, D)), TensorType(f32, (D,)), TensorType(f32, (D, D))]
        )
        self.x, self.bias, self.w = self.block.args
        self.count = 0

    def add(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        self.count += 1
        return op.results[0]

    def module(self, outs: list[SSAValue]) -> ModuleOp:
        self.block.add_op(func.ReturnOp(*outs))
        types = ([a.type for a in self.block.args], [v.type for v in outs])
        return ModuleOp([func.FuncOp("forward", types, Region(self.block))])

    # pieces --------------------------------------------------------------------------------
    def softmax(self, x: SSAValue) -> SSAValue:
        m = self.add(graph.ReduceMaxOp(x, [1], keepdim=True))
        e = self.add(graph.ExpOp(self.add(graph.SubOp(x, m))))
        s = self.add(graph.ReduceSumOp(e, [1], keepdim=True))
        return self.add(graph.DivOp(e, s))

    def layernorm(self, x: SSAValue) -> SSAValue:
        mu = self.add(graph.ReduceMeanOp(x, [1], keepdim=True))
        xc = self.add(graph.SubOp(x, mu))
        var = self.add(graph.ReduceMeanOp(self.add(graph.MulOp(xc, xc)), [1], keepdim=True))
        eps = self.add(graph.ConstantOp.scalar(1e-5, f32))
        r = self.add(graph.RsqrtOp(self.add(graph.AddOp(var, eps))))
        return self.add(graph.AddOp(self.add(graph.MulOp(xc, r)), self.bias))

    def gelu_tanh(self, x: SSAValue) -> SSAValue:
        c = self.add(graph.ConstantOp.scalar(0.7978845608, f32))
        half = self.add(graph.ConstantOp.scalar(0.5, f32))
        t = self.add(graph.TanhOp(self.add(graph.MulOp(x, c))))
        one = self.add(graph.ConstantOp.scalar(1.0, f32))
        return self.add(graph.MulOp(self.add(graph.MulOp(x, half)), self.add(graph.AddOp(t, one))))


def chain(n: int) -> ModuleOp:
    b = Builder()
    v = b.x
    unary = (graph.ExpOp, graph.TanhOp, graph.NegOp, graph.SigmoidOp)
    i = 0
    while b.count < n:
        v = b.add(unary[i % 4](v)) if i % 3 else b.add(graph.AddOp(v, b.bias))
        i += 1
    return b.module([v])


def diamonds(n: int, width: int = 8) -> ModuleOp:
    b = Builder()
    v = b.x
    unary = (graph.ExpOp, graph.TanhOp, graph.NegOp, graph.SigmoidOp, graph.AbsOp, graph.ReluOp)
    while b.count < n:
        branches = [b.add(unary[k % len(unary)](v)) for k in range(width)]
        while len(branches) > 1:
            branches = [
                b.add(graph.AddOp(a, c)) for a, c in zip(branches[::2], branches[1::2], strict=True)
            ]
        v = branches[0]
    return b.module([v])


def transformer(n: int) -> ModuleOp:
    b = Builder()
    v = b.x
    while b.count < n:
        h = b.layernorm(v)
        q = b.add(graph.MatmulOp(h, b.w))
        k = b.add(graph.MatmulOp(h, b.w))
        scores = b.add(graph.MatmulOp(q, b.add(graph.PermuteOp(k, [1, 0]))))
        p = b.softmax(b.add(graph.MulOp(scores, b.add(graph.ConstantOp.scalar(0.125, f32)))))
        attn = b.add(graph.MatmulOp(p, h))
        v = b.add(graph.AddOp(v, b.add(graph.MatmulOp(attn, b.w))))
        h = b.layernorm(v)
        up = b.gelu_tanh(b.add(graph.AddOp(b.add(graph.MatmulOp(h, b.w)), b.bias)))
        v = b.add(graph.AddOp(v, b.add(graph.MatmulOp(up, b.w))))
    return b.module([v])


FAMILIES: dict[str, Callable[[int], ModuleOp]] = {
    "chain": chain,
    "diamonds": diamonds,
    "transformer": transformer,
}
PASSES: dict[str, Callable[[], ModulePass]] = {
    "fuse-greedy": FuseGreedyPass,
    "fuse-scored": FuseScoredPass,
}


def count_ops(module: ModuleOp) -> tuple[int, int]:
    f = next(op for op in module.ops if isinstance(op, func.FuncOp))
    ops = list(f.body.block.ops)
    return len(ops), sum(1 for op in ops if isinstance(op, GroupOp))


def measure(family: str, size: int, pass_name: str) -> tuple[int, float, float, int, int]:
    module = FAMILIES[family](size)
    n_ops = count_ops(module)[0] - 1
    gc.collect()
    start, start_cpu = time.perf_counter(), time.process_time()
    PASSES[pass_name]().apply(make_context(), module)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    nodes, groups = count_ops(module)
    return n_ops, elapsed, cpu, nodes - 1, groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--passes", default=",".join(PASSES))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    header = (
        f"{'family':<12}{'pass':<13}{'ops':>8}{'wall s':>9}{'cpu s':>9}{'us/op':>8}{'x 1k':>6}"
        f"{'nodes':>8}{'groups':>8}"
    )
    print(header)
    for family in args.families.split(","):
        for pass_name in args.passes.split(","):
            base: float | None = None
            for size in sizes:
                n_ops, t, cpu, nodes, groups = measure(family, size, pass_name)
                per_op = cpu / n_ops * 1e6
                base = per_op if base is None else base
                print(
                    f"{family:<12}{pass_name:<13}{n_ops:>8}{t:>9.3f}{cpu:>9.3f}{per_op:>8.1f}"
                    f"{per_op / base:>6.2f}{nodes:>8}{groups:>8}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
