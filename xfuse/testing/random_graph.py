"""
Random valid `graph` programs, for property tests (interpret(P(G)) == interpret(G)) and fuzzing.

A program is one `func.func @forward` over a base shape (rank 2 or 3, small dims) whose ops are
drawn from every kind fusion cares about: elementwise unary and binary ops with broadcast
operands (bias, per-row values, scalar constants), explicit broadcasts, reductions with and
without `keepdim`, layout ops (reshape, permute, slice), externs (matmul, `torch_call`, and
optionally an in-place `torch_call`), with values read by several consumers; with `rows`, also
whole row computations (a softmax, a layer norm) whose result is often permuted, reshaped or
sliced next; with `onehot`, also sums over a dim of one-hots (`where(iota == i, a, 0) * b`, the
cross-entropy backward's), their indices inside and outside the dim. Every choice comes from one `random.Random`, so a seed names a program;
`programs()` is the hypothesis strategy.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from hypothesis import strategies as st
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, ModuleOp, StringAttr, TensorType, f32, i64
from xdsl.ir import Block, Operation, Region, SSAValue

from xfuse.dialects import graph
from xfuse.testing.fuzz.draw_order import draw_rank

_Op = TypeVar("_Op", bound=Operation)


@dataclass(repr=False)
class RandomProgram:
    """A module and a way to make fresh inputs for it (fresh, since an in-place op may write
    its inputs). Its repr is the call that makes it again."""

    module: ModuleOp
    arg_shapes: list[tuple[int, ...]]
    seed: int
    call: str

    def __repr__(self) -> str:
        return self.call

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """Hypothesis prints a failing example with this, not field by field (which walks the
        whole xDSL module and takes minutes)."""
        printer.text(self.call)

    def inputs(self) -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed)
        return [torch.randn(s, generator=gen) for s in self.arg_shapes]


def _drawn(family: type[_Op]) -> tuple[type[_Op], ...]:
    """The ops of a family whose `fuzz` fact puts them in random programs, in their pools'
    draw order (`xfuse.testing.fuzz.draw_order`)."""
    drawn = [
        (draw_rank(f.pool, op.name), op)
        for op in graph.Graph.operations
        if issubclass(op, family)
        and not issubclass(op, graph.ComparisonOp)
        and (f := graph.op_facts(op).fuzz) is not None
        and f.random_graph
        and f.pool is not None
    ]
    return tuple(op for _, op in sorted(drawn, key=lambda entry: entry[0]))


UNARY = _drawn(graph.UnaryOp)
BINARY = _drawn(graph.BinaryOp)
REDUCE = _drawn(graph.ReduceOp)


class _Builder:
    def __init__(
        self,
        rng: random.Random,
        rank: int,
        *,
        externs: bool,
        mutation: bool,
        rows: bool = False,
        onehot: bool = False,
    ):
        self.rng = rng
        self.base = tuple(rng.choice((2, 3, 4)) for _ in range(rank))
        self.arg_shapes = [self.base, self.base, self.base[-1:], (self.base[-1], self.base[-1])]
        self.block = Block(arg_types=[TensorType(f32, s) for s in self.arg_shapes])
        self.values: list[SSAValue] = list(self.block.args[:2])
        self.externs, self.mutation, self.rows = externs, mutation, rows
        self.onehot = onehot

    # A recent value most of the time, an older one sometimes: several consumers per value.
    def pick(self, pred: Callable[[SSAValue], bool] = lambda v: True) -> SSAValue | None:
        pool = [v for v in self.values if pred(v)]
        if not pool:
            return None
        if self.rng.random() < 0.6:
            return pool[-1 - self.rng.randrange(min(3, len(pool)))]
        return self.rng.choice(pool)

    def add(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        self.values.extend(op.results)
        return op.results[0]

    def step(self) -> None:
        makers = [self.unary, self.binary, self.binary, self.reduce, self.broadcast, self.layout]
        makers += [self.index]
        if self.externs:
            makers += [self.extern]
        if self.mutation:
            makers += [self.in_place]
        if self.rows:
            makers += [self.row, self.row]
        if self.onehot:
            makers += [self.onehot_sum, self.onehot_sum]
        self.rng.choice(makers)()

    def unary(self) -> None:
        v = self.pick()
        assert v is not None
        self.add(self.rng.choice(UNARY)(v))

    def binary(self) -> None:
        a = self.pick()
        assert a is not None
        sa = graph.shape_of(a)
        choice = self.rng.random()
        b: SSAValue | None
        if choice < 0.2:
            const = graph.ConstantOp.scalar(round(self.rng.uniform(-2, 2), 2), f32)
            b = self.add(const)
        elif choice < 0.35 and sa and sa[-1] == self.base[-1]:
            b = self.block.args[2]  # a bias over the last dim
        else:
            b = self.pick(lambda v: graph.broadcast_shapes(sa, graph.shape_of(v)) is not None)
            assert b is not None
        if self.rng.random() < 0.5:
            a, b = b, a
        self.add(self.rng.choice(BINARY)(a, b))

    def reduce(self) -> None:
        v = self.pick(lambda v: len(graph.shape_of(v)) >= 1)
        if v is None:
            return self.unary()
        rank = len(graph.shape_of(v))
        dims = [rank - 1] if self.rng.random() < 0.7 else [0]
        self.add(self.rng.choice(REDUCE)(v, dims, keepdim=self.rng.random() < 0.5))

    def broadcast(self) -> None:
        """A reduced value back to the base shape: keepdim shapes broadcast implicitly, the
        others through `broadcast_in_dim`."""
        base = self.base

        def fits(v: SSAValue) -> bool:
            s = graph.shape_of(v)
            return len(s) < len(base) and s == base[: len(s)]

        v = self.pick(fits)
        if v is None:
            return self.unary()
        dims = list(range(len(graph.shape_of(v))))
        self.add(graph.BroadcastInDimOp(v, base, dims))

    def layout(self, v: SSAValue | None = None) -> None:
        if v is None or len(graph.shape_of(v)) < 2:
            v = self.pick(lambda v: len(graph.shape_of(v)) >= 2)
        if v is None:
            return self.unary()
        s = graph.shape_of(v)
        kind = self.rng.randrange(3)
        if kind == 0:
            self.add(graph.ReshapeOp(v, (*s[:-2], s[-2] * s[-1])))
        elif kind == 1:
            self.add(graph.PermuteOp(v, list(reversed(range(len(s))))))
        else:
            limit = [*s[:-1], max(1, s[-1] // 2)]
            self.add(graph.SliceOp(v, [0] * len(s), limit, [1] * len(s)))

    def row(self) -> None:
        """A softmax or a layer norm over one dim (keepdim reductions broadcast back), then
        often a layout op on its result: the patterns of attention and normalization layers."""
        v = self.pick(lambda v: len(graph.shape_of(v)) >= 1)
        if v is None:
            return self.unary()
        rank = len(graph.shape_of(v))
        dims = [rank - 1] if self.rng.random() < 0.7 else [self.rng.randrange(rank)]
        if self.rng.random() < 0.5:
            top = self.add(graph.ReduceMaxOp(v, dims, keepdim=True))
            e = self.add(graph.ExpOp(self.add(graph.SubOp(v, top))))
            out = self.add(graph.DivOp(e, self.add(graph.ReduceSumOp(e, dims, keepdim=True))))
        else:
            mean = self.add(graph.ReduceMeanOp(v, dims, keepdim=True))
            c = self.add(graph.SubOp(v, mean))
            var = self.add(graph.ReduceMeanOp(self.add(graph.MulOp(c, c)), dims, keepdim=True))
            eps = self.add(graph.ConstantOp.scalar(1e-5, f32))
            out = self.add(graph.MulOp(c, self.add(graph.RsqrtOp(self.add(graph.AddOp(var, eps))))))
        choice = self.rng.random()
        if choice < 0.5:
            self.layout(out)
        elif choice < 0.7:
            self.heads(out)

    def heads(self, v: SSAValue) -> None:
        """Split the last dim in two (attention heads), an elementwise op, and merge it back."""
        s = graph.shape_of(v)
        if s[-1] % 2:
            return self.unary()
        split = self.add(graph.ReshapeOp(v, (*s[:-1], 2, s[-1] // 2)))
        self.add(graph.ReshapeOp(self.add(self.rng.choice(UNARY)(split)), s))

    def index(self) -> None:
        """Index arithmetic: a flip, a roll, or an iota (cast) added."""
        v = self.pick(lambda v: len(graph.shape_of(v)) >= 1)
        if v is None:
            return self.unary()
        s = graph.shape_of(v)
        dims = sorted(self.rng.sample(range(len(s)), self.rng.randint(1, len(s))))
        kind = self.rng.randrange(3)
        if kind == 0:
            self.add(graph.FlipOp(v, dims))
        elif kind == 1:
            shifts = [self.rng.randint(1, 5) % max(1, s[d]) for d in dims]
            self.add(graph.RollOp(v, shifts, dims))
        else:
            start, step = self.rng.randint(-3, 3), self.rng.choice((1, 2, -1))
            iota = graph.IotaOp(TensorType(i64, s), dims[0], start, step)
            cast = graph.CastOp(iota, f32)
            self.block.add_ops([iota, cast])  # (not values: the other makers draw f32 ones)
            self.add(graph.AddOp(v, cast))

    def onehot_sum(self) -> None:
        """A sum over dim d of `where(iota == i, a, 0)`, often times `b`: `i` (a row value
        scaled and truncated to an integer, often outside the dim), `a` and `b` row values
        (keepdim sums over d) the same along d."""
        v = self.pick(lambda v: len(graph.shape_of(v)) >= 1)
        if v is None:
            return self.unary()
        s = graph.shape_of(v)
        d = self.rng.randrange(len(s))

        def row_value() -> SSAValue:
            w = self.pick(lambda w: graph.shape_of(w) == s)
            assert w is not None
            return self.add(graph.ReduceSumOp(w, [d], keepdim=True))

        scale = self.add(graph.ConstantOp.scalar(self.rng.choice((1.0, 2.0, 3.0)), f32))
        index = graph.CastOp(self.add(graph.MulOp(row_value(), scale)), i64)
        iota = graph.IotaOp(TensorType(i64, s), d, self.rng.randint(-1, 1), 1)
        zero = graph.ConstantOp.scalar(self.rng.choice((0.0, -0.0)), f32)
        hot = graph.EqOp(index, iota)
        # (not values: the other makers draw f32 ones)
        self.block.add_ops([index, iota, zero, hot])
        out = self.add(graph.WhereOp(hot, row_value(), zero))
        if self.rng.random() < 0.7:
            out = self.add(graph.MulOp(out, row_value()))
        self.add(graph.ReduceSumOp(out, [d], keepdim=self.rng.random() < 0.5))

    def extern(self) -> None:
        d = self.base[-1]
        if self.rng.random() < 0.5:
            v = self.pick(lambda v: len(graph.shape_of(v)) >= 2 and graph.shape_of(v)[-1] == d)
            if v is not None:
                self.add(graph.MatmulOp(v, self.block.args[3]))
                return
        v = self.pick(lambda v: len(graph.shape_of(v)) >= 1)
        assert v is not None
        args = ArrayAttr([StringAttr("%t0"), IntegerAttr(0, i64)])
        self.add(graph.TorchCallOp("aten.cumsum.default", [v], [v.type], args))

    def in_place(self) -> None:
        """`relu_` writes its operand: ops reading that storage must not move across it."""
        v = self.pick(lambda v: not isinstance(v.owner, graph.ConstantOp))
        assert v is not None
        args = ArrayAttr([StringAttr("%t0")])
        self.add(graph.TorchCallOp("aten.relu_.default", [v], [v.type], args))

    def finish(self) -> ModuleOp:
        produced = [v for v in self.values if not isinstance(v.owner, Block)]
        outs = [produced[-1], *self.rng.sample(produced, min(2, len(produced)))]
        outs = list(dict.fromkeys(outs))
        self.block.add_op(func.ReturnOp(*outs))
        f = func.FuncOp(
            "forward",
            ([TensorType(f32, s) for s in self.arg_shapes], [v.type for v in outs]),
            Region(self.block),
        )
        return ModuleOp([f])


def random_program(
    seed: int,
    n_ops: int = 12,
    *,
    externs: bool = True,
    mutation: bool = False,
    rows: bool = False,
    onehot: bool = False,
) -> RandomProgram:
    """A valid program of about `n_ops` ops (scalar constants come on top; a row computation
    or a one-hot sum counts as one)."""
    rng = random.Random(seed)
    b = _Builder(
        rng, rng.choice((2, 3)), externs=externs, mutation=mutation, rows=rows, onehot=onehot
    )
    for _ in range(n_ops):
        b.step()
    call = f"random_program({seed}, {n_ops}, externs={externs}, mutation={mutation}"
    call += ", rows=True" if rows else ""
    call += ", onehot=True)" if onehot else ")"
    return RandomProgram(b.finish(), b.arg_shapes, seed, call)


def programs(
    max_ops: int = 16,
    *,
    externs: bool = True,
    mutation: bool = False,
    rows: bool = False,
    onehot: bool = False,
) -> st.SearchStrategy[RandomProgram]:
    """Hypothesis strategy of random programs (shrinks towards few ops, small seeds)."""
    return st.builds(
        lambda seed, n: random_program(
            seed, n, externs=externs, mutation=mutation, rows=rows, onehot=onehot
        ),
        st.integers(0, 2**31 - 1),
        st.integers(1, max_ops),
    )
