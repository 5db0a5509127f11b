"""The random torch program generator: statements drawn from the ops' `fuzz` facts."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from xdsl.ir import Operation

from xfuse.dialects import graph
from xfuse.dialects.facts import Fuzz, FuzzDraw, FuzzPool
from xfuse.errors import XfuseError
from xfuse.testing.fuzz.draw_order import draw_rank
from xfuse.testing.fuzz.program import (
    DIMS,
    MAX_MAGNITUDE,
    MAX_NUMEL,
    RMSE_TOLERANCE,
    STRICT_TOLERANCE,
    FuzzProgram,
    InputSpec,
    Tensor,
    load_source,
    program_source,
)

# ---------------------------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------------------------


@dataclass
class Value:
    """What the generator knows of a variable: its name and whether it is exact (computed
    without rounding, so comparisons and casts to integers of it are stable across backends)."""

    name: str
    exact: bool


class Rejected(XfuseError):
    """A candidate statement that is not valid here (shapes, dtypes or domain)."""


class Generator:
    """Builds one program statement by statement; every candidate is run on the real inputs
    (the whole program so far, from fresh inputs) and kept only if it is valid and tame."""

    def __init__(self, seed: int, allow_unsupported: bool = True, mismatches: bool = True):
        self.rng = random.Random(seed)
        self.seed = seed
        self.allow_unsupported = allow_unsupported
        self.mismatches = mismatches
        """Whether a program may end with an op on mismatched dtypes (`try_mismatch`)."""
        self.inputs: list[InputSpec] = []
        self.body: list[str] = []
        self.ops: list[str] = []
        self.values: list[Value] = []
        self.tolerance = STRICT_TOLERANCE
        self.scales: list[float] = [1.0]
        self.env: dict[str, Tensor] = {}
        self.counter = 0

    # --- driving ---------------------------------------------------------------------------

    def generate(self, n_ops: int | None = None) -> FuzzProgram:
        n = n_ops if n_ops is not None else self.rng.randint(2, 12)
        first = self.random_shape()
        self.new_input(first)
        if self.rng.random() < 0.5:
            self.new_input(self.broadcastable(first))
        self.replay()
        attempts = 0
        while len(self.body) < n and attempts < 40 * n:
            attempts += 1
            self.try_one()
        if self.mismatches and self.rng.random() < MISMATCH_RATE:
            self.try_mismatch()
        return FuzzProgram(
            self.seed,
            self.inputs,
            self.body,
            self.pick_outputs(),
            self.tolerance,
            max(self.scales, default=1.0),
            self.ops,
        )

    def try_one(self) -> None:
        saved = (list(self.inputs), list(self.body), list(self.ops), list(self.values))
        saved_tolerance = self.tolerance
        try:
            kind, statement, produced = self.candidate()
            self.body.append(statement)
            self.ops.append(kind)
            self.replay()
            self.check_tame(produced)
            self.values += produced
            self.scales += [
                float(self.env[v.name].abs().max())
                for v in produced
                if self.env[v.name].is_floating_point() and self.env[v.name].numel()
            ]
        except Exception:  # a rejected candidate: restore and try another
            self.inputs, self.body, self.ops, self.values = saved
            self.tolerance = saved_tolerance
            self.replay()

    def try_mismatch(self) -> None:
        """End the program with an op on new inputs cast to random dtypes (`MISMATCHES`):
        kept as the program's last statement when eager refuses the dtypes (the program
        raises: xfuse must raise the same), as any statement when eager computes tamely."""
        saved = (list(self.inputs), list(self.body), list(self.ops), list(self.values))
        saved_tolerance = self.tolerance
        kind, statement, produced = self.mismatch()
        self.body.append(statement)
        self.ops.append(kind)
        try:
            self.replay()
        except Exception:  # eager refuses these dtypes: the program ends raising
            self.values += produced
            return
        try:
            self.check_tame(produced)
        except Rejected:
            self.inputs, self.body, self.ops, self.values = saved
            self.tolerance = saved_tolerance
            self.replay()
            return
        self.values += produced
        self.tolerance = RMSE_TOLERANCE

    def replay(self) -> None:
        """Run the program so far on fresh inputs; `env` holds every variable afterwards."""
        source = program_source(self.seed, self.inputs, self.body, [], self.tolerance)
        namespace = load_source(source)
        env: dict[str, Any] = dict(
            zip((i.name for i in self.inputs), namespace["make_inputs"](), strict=True)
        )
        exec_namespace: dict[str, Any] = {"torch": torch, "F": torch.nn.functional, **env}
        exec("\n".join(self.body), exec_namespace)  # noqa: S102
        self.env = {k: v for k, v in exec_namespace.items() if isinstance(v, Tensor)}

    def check_tame(self, produced: list[Value]) -> None:
        for name, t in self.env.items():
            if t.numel() > MAX_NUMEL:
                raise Rejected(f"{name} is too large")
            if (
                t.is_floating_point()
                and t.numel()
                and not bool(torch.isfinite(t).all() and t.abs().max() <= MAX_MAGNITUDE)
            ):
                raise Rejected(f"{name} is not tame")
        for v in produced:
            if v.name not in self.env:
                raise Rejected(f"{v.name} is not a tensor")

    def pick_outputs(self) -> list[str]:
        used = {v.name for v in self.values if any(_mentions(s, v.name) for s in self._readers(v))}
        leaves = [v.name for v in self.values if v.name not in used and v.name.startswith("v")]
        computed = [v.name for v in self.values if v.name.startswith("v")]
        if not computed:
            return [self.values[0].name]
        outputs = leaves[-4:] or [computed[-1]]
        for statement in self.body:
            target = statement.split(".", 1)[0]
            mutated_last = "=" not in statement.split("(", 1)[0] and not any(
                _mentions(s, target) for s in self.body[self.body.index(statement) + 1 :]
            )
            if mutated_last and target not in outputs:
                outputs.append(target)  # the mutation is seen only through an output
        if self.rng.random() < 0.3:
            extra = self.rng.choice(computed)
            if extra not in outputs:
                outputs.append(extra)
        return outputs

    def _readers(self, v: Value) -> list[str]:
        defining = next((i for i, s in enumerate(self.body) if s.startswith(f"{v.name} =")), -1)
        return self.body[defining + 1 :]

    # --- helpers ---------------------------------------------------------------------------

    def fresh(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.env[name].shape)

    def dtype(self, name: str) -> torch.dtype:
        return self.env[name].dtype

    def random_shape(self) -> tuple[int, ...]:
        rank = self.rng.choice((0, 1, 2, 2, 3, 3, 3, 4))
        return tuple(self.rng.choice(DIMS) for _ in range(rank))

    def broadcastable(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A shape that broadcasts against `shape`: trailing dims, some of them 1."""
        keep = self.rng.randint(0, len(shape)) if shape else 0
        tail = shape[len(shape) - keep :]
        return tuple(1 if self.rng.random() < 0.3 else d for d in tail)

    def new_input(self, shape: tuple[int, ...], kind: str | None = None) -> Value:
        kind = kind or self.rng.choice(
            ("normal", "normal", "normal", "normal", "positive", "positive", "int", "bool")
        )
        layout = "contiguous"
        if len(shape) >= 2 and self.rng.random() < 0.15:
            layout = "transposed"
        elif shape and max(shape) > 1 and self.rng.random() < 0.1:
            layout = "expanded"
        elif shape and self.rng.random() < 0.1:
            layout = "strided"
        spec = InputSpec(f"x{len(self.inputs)}", shape, kind, layout)
        self.inputs.append(spec)
        value = Value(spec.name, exact=True)
        self.values.append(value)
        return value

    def pick(self, where: Callable[[Value], bool] = lambda v: True) -> Value:
        options = [v for v in self.values if v.name in self.env and where(v)]
        if not options:
            raise Rejected("no operand")
        # Recent values are likelier, so programs are chains more than bags.
        weights = [1.0 + i for i in range(len(options))]
        return self.rng.choices(options, weights)[0]

    def pick_float(self) -> Value:
        return self.pick(lambda v: self.dtype(v.name).is_floating_point)

    def operand_for(self, a: Value) -> tuple[str, bool]:
        """A second operand that broadcasts with `a`: a value, a new input or a scalar."""
        roll = self.rng.random()
        if roll < 0.2:
            return repr(self.rng.choice((0.5, 2.0, -1.5, 3.0, 0.25))), True
        if roll < 0.55:
            return self.new_input(self.broadcastable(self.shape(a.name))).name, True
        b = self.pick(lambda v: _broadcasts(self.shape(v.name), self.shape(a.name)))
        return b.name, b.exact

    def positive(self, name: str) -> str:
        t = self.env.get(name)
        if t is not None and t.is_floating_point() and t.numel() and bool((t > 0.1).all()):
            return name
        return f"({name}.abs() + 0.5)"

    @staticmethod
    def tensor(literal: object, like: str, dtype: str | None = None) -> str:
        """A tensor the program builds from `literal`, on the device of its value `like` (as
        real code does: an index of another device is an error in eager on CUDA)."""
        typed = f", dtype={dtype}" if dtype else ""
        return f"torch.tensor({literal}{typed}, device={like}.device)"

    def result(self, expr: str, exact: bool) -> tuple[str, list[Value]]:
        name = self.fresh()
        return f"{name} = {expr}", [Value(name, exact)]

    # --- candidates ------------------------------------------------------------------------

    def candidate(self) -> tuple[str, str, list[Value]]:
        makers: list[tuple[float, Callable[[], tuple[str, str, list[Value]]]]] = [
            (4, self.unary),
            (5, self.binary),
            (1.5, self.compare_where),
            (1, self.cast),
            (2.5, self.reduction),
            (1.5, self.normalization),
            (3, self.layout_op),
            (1, self.concat),
            (1.2, self.matmul),
            (1.5, self.inplace),
            (1, self.integer_or_logical),
            (0.8, self.pad),
            (0.8, self.pool),
            (0.6, self.depthwise),
            (0.6, self.convolution),
            (1, self.gather),
        ]
        makers.append((1.5, self.index_op))
        makers.append((1, self.scan))
        makers.append((1, self.scatter))
        if self.allow_unsupported:
            makers.append((0.8, self.unsupported))
        weights = [w for w, _ in makers]
        return self.rng.choices([m for _, m in makers], weights)[0]()

    def unary(self) -> tuple[str, str, list[Value]]:
        a = self.pick_float()
        fn = self.rng.choice(UNARY)
        if fn in SIGN_TESTS and not a.exact:
            # the sign of a value whose exact result is 0 is its rounding's: a layer norm's row
            # sum (fuzz seed 173 program 95), eager's rounding against xfuse's
            raise Rejected(f"{fn} of an inexact operand")
        if fn in EXACT_UNARY:
            expr, exact = f"{fn}({a.name})", a.exact
        elif fn in POSITIVE_DOMAIN:
            expr, exact = f"{fn}({self.positive(a.name)})", False
        elif fn == "torch.exp":
            expr, exact = f"torch.exp({a.name}.clamp(-6, 6))", False
        elif fn == "torch.tan":  # off its poles, where it multiplies an operand's rounding
            expr, exact = f"torch.tan({a.name}.clamp(-1.4, 1.4))", False
        elif fn in ILL_CONDITIONED_AT_ONE and not a.exact:
            # acos(1 - d) ~ sqrt(2 d): one ulp of an inexact operand near +-1 (sin's, eager's
            # against xfuse's) moves the result by 3e-4 (fuzz seed 112 program 114)
            expr, exact = f"{fn}({a.name}.clamp(-0.95, 0.95))", False
        elif fn == "torch.clamp":
            expr, exact = f"torch.clamp({a.name}, -0.5, 0.75)", a.exact
        elif fn == "F.gelu":
            approx = self.rng.choice(("none", "tanh"))
            expr, exact = f"F.gelu({a.name}, approximate='{approx}')", False
        else:
            expr, exact = f"{fn}({a.name})", False
        return (f"unary:{fn}", *self.result(expr, exact))

    def binary(self) -> tuple[str, str, list[Value]]:
        a = self.pick(lambda v: self.dtype(v.name) != torch.bool)
        b, b_exact = self.operand_for(a)
        op = self.rng.choice(BINARY)
        if op in EXACT_OPERANDS and not (a.exact and b_exact):
            raise Rejected(f"{op} of an inexact operand")
        exact = a.exact and b_exact and op in EXACT_BINARY
        if op == "/":
            expr = f"{a.name} / {self.positive(b)}"
        elif op == "torch.pow":
            exponent = self.rng.choice(("2", "0.5", "3", "-1", f"{b}.clamp(-2, 2)"))
            expr = f"torch.pow({self.positive(a.name)}, {exponent})"
        elif op.startswith("torch."):
            if b.replace(".", "").replace("-", "").isdigit():
                b = f"torch.tensor({b})"
            expr = f"{op}({a.name}, {b})"
        else:
            expr = f"{a.name} {op} {b}" if self.rng.random() < 0.8 else f"{b} {op} {a.name}"
        return (f"binary:{op}", *self.result(expr, exact))

    def compare_where(self) -> tuple[str, str, list[Value]]:
        a = self.pick(lambda v: v.exact and self.dtype(v.name) != torch.bool)
        b = self.pick(
            lambda v: (
                v.exact
                and self.dtype(v.name) != torch.bool
                and _broadcasts(self.shape(v.name), self.shape(a.name))
            )
        )
        cmp = self.rng.choice(COMPARISONS)
        if self.rng.random() < 0.4:
            return ("compare", *self.result(f"{a.name} {cmp} {b.name}", True))
        other = self.pick_float()
        expr = f"torch.where({a.name} {cmp} {b.name}, {other.name}, {self.rng.choice((0.0, -1.0, 2.5))})"
        return ("where", *self.result(expr, other.exact))

    def cast(self) -> tuple[str, str, list[Value]]:
        a = self.pick()
        source = self.dtype(a.name)
        if source == torch.float32:
            choices = ["torch.float64", "torch.float16", "torch.bfloat16"]
            if a.exact:
                choices += ["torch.int32", "torch.int64", "torch.bool"]
        else:
            choices = ["torch.float32"]
        target = self.rng.choice(choices)
        if target in ("torch.float16", "torch.bfloat16", "torch.float64"):
            # Low precision, or f32 rounding judged by f64's tolerance: compare by RMSE.
            self.tolerance = RMSE_TOLERANCE
        exact = a.exact and target != "torch.bool"
        return (f"cast:{target}", *self.result(f"{a.name}.to({target})", exact))

    def integer_or_logical(self) -> tuple[str, str, list[Value]]:
        """Ops on integers and booleans: floor division, remainder, logical ops,
        masked_fill, argmax (of exact values: ties break the same everywhere)."""
        kind = self.rng.choice(
            ("floordiv", "remainder", "logical", "masked_fill", "argmax", *ELEM_KINDS)
        )
        if kind in ELEM_KINDS:
            return self.bitwise_division_any(kind)
        if kind in ("floordiv", "remainder"):
            a = self.pick(lambda v: self.dtype(v.name) in (torch.int32, torch.int64))
            b = self.pick(
                lambda v: (
                    self.dtype(v.name) in (torch.int32, torch.int64)
                    and _broadcasts(self.shape(v.name), self.shape(a.name))
                )
            )
            op = "//" if kind == "floordiv" else "%"
            return (f"int:{kind}", *self.result(f"{a.name} {op} ({b.name}.abs() + 1)", True))
        if kind == "logical":
            a = self.pick(lambda v: self.dtype(v.name) == torch.bool)
            b = self.pick(
                lambda v: (
                    self.dtype(v.name) == torch.bool
                    and _broadcasts(self.shape(v.name), self.shape(a.name))
                )
            )
            expr = self.rng.choice((f"{a.name} & {b.name}", f"{a.name} | {b.name}", f"~{a.name}"))
            return ("int:logical", *self.result(expr, True))
        if kind == "masked_fill":
            a = self.pick_float()
            mask = self.pick(
                lambda v: (
                    self.dtype(v.name) == torch.bool
                    and _broadcasts_into(self.shape(v.name), self.shape(a.name))
                )
            )
            expr = f"{a.name}.masked_fill({mask.name}, -0.5)"
            return ("int:masked_fill", *self.result(expr, a.exact))
        a = self.pick(lambda v: v.exact and self.dtype(v.name) != torch.bool)
        rank = len(self.shape(a.name))
        if rank == 0 or 0 in self.shape(a.name):
            raise Rejected("argmax of a scalar or an empty tensor")
        expr = f"{a.name}.argmax(dim={self.rng.randrange(rank)})"
        return ("int:argmax", *self.result(expr, True))

    # Bitwise ops on integers, logical ops of any dtype, any/all, integer
    # division and remainder by a number (by a tensor it stays in torch: it may divide by 0)
    def bitwise_division_any(self, kind: str) -> tuple[str, str, list[Value]]:
        if kind == "bitwise":
            a = self.pick(lambda v: self.dtype(v.name) in (torch.int32, torch.int64))
            b = self.pick(
                lambda v: (
                    self.dtype(v.name) in (torch.int32, torch.int64, torch.bool)
                    and _broadcasts(self.shape(v.name), self.shape(a.name))
                )
            )
            op = self.rng.choice(("&", "|", "^"))
            expr = self.rng.choice((f"{a.name} {op} {b.name}", f"~{a.name}", f"{a.name} {op} 6"))
            return ("int:bitwise", *self.result(expr, True))
        if kind == "logical_any":
            a = self.pick()
            b = self.pick(lambda v: _broadcasts(self.shape(v.name), self.shape(a.name)))
            fn = self.rng.choice(("logical_and", "logical_or", "logical_xor"))
            rank = len(self.shape(a.name))
            dim = self.rng.randrange(rank) if rank else None
            expr = self.rng.choice(
                (
                    f"torch.{fn}({a.name}, {b.name})",
                    f"torch.logical_not({a.name})",
                    f"{a.name}.any()" if dim is None else f"{a.name}.any(dim={dim})",
                    f"{a.name}.all()" if dim is None else f"{a.name}.all(dim={dim}, keepdim=True)",
                )
            )
            return ("logical_any", *self.result(expr, True))
        a = self.pick(lambda v: self.dtype(v.name) in (torch.int32, torch.int64))
        divisor = self.rng.choice((2, 3, -3, 7, -8))
        fn = self.rng.choice(("torch.remainder", "torch.fmod", "torch.floor_divide"))
        expr = self.rng.choice(
            (f"{fn}({a.name}, {divisor})", f"torch.div({a.name}, {divisor}, rounding_mode='floor')")
        )
        return ("int:by_number", *self.result(expr, True))

    def reduction(self) -> tuple[str, str, list[Value]]:
        a = self.pick(lambda v: self.dtype(v.name) != torch.bool)
        rank = len(self.shape(a.name))
        fn = self.rng.choice(REDUCTIONS)
        keep = self.rng.random() < 0.5
        if rank == 0 or self.rng.random() < 0.15:
            expr = f"{a.name}.{fn}()" if fn != "var" else f"{a.name}.var(correction=0)"
        else:
            dims = tuple(sorted(self.rng.sample(range(rank), self.rng.randint(1, rank))))
            extra = ", correction=0" if fn == "var" else ""
            if fn in ("sum", "mean", "amax", "amin", "var"):
                expr = f"{a.name}.{fn}(dim={dims}, keepdim={keep}{extra})"
            else:  # prod takes one dim
                expr = f"{a.name}.prod(dim={dims[0]}, keepdim={keep})"
        if fn in ("mean", "var") and not self.dtype(a.name).is_floating_point:
            raise Rejected("mean of integers")
        if fn in EXACT_OPERAND_REDUCTIONS and not a.exact:
            raise Rejected(f"{fn} of an inexact operand")
        self.tolerance = RMSE_TOLERANCE
        exact = a.exact and fn in EXACT_REDUCTIONS
        return (f"reduce:{fn}", *self.result(expr, exact))

    def normalization(self) -> tuple[str, str, list[Value]]:
        a = self.pick_float()
        shape = self.shape(a.name)
        if not shape:
            raise Rejected("normalising a scalar")
        dim = self.rng.randrange(len(shape)) - (len(shape) if self.rng.random() < 0.5 else 0)
        kind = self.rng.choice(("softmax", "log_softmax", "layer_norm", "rms_norm"))
        self.tolerance = RMSE_TOLERANCE
        if kind in ("softmax", "log_softmax"):
            expr = f"torch.{kind}({a.name}, dim={dim})"
        else:
            k = self.rng.randint(1, min(2, len(shape)))
            normalized = shape[len(shape) - k :]
            weight = (
                self.new_input(normalized, "positive").name if self.rng.random() < 0.5 else "None"
            )
            if kind == "layer_norm":
                bias = self.new_input(normalized).name if self.rng.random() < 0.5 else "None"
                expr = f"F.layer_norm({a.name}, {normalized}, {weight}, {bias})"
            else:
                expr = f"F.rms_norm({a.name}, {normalized}, {weight}, eps=1e-5)"
            self.check_spread(a.name, k)
        return (f"norm:{kind}", *self.result(expr, False))

    def check_spread(self, name: str, k: int) -> None:
        """Normalising (nearly) constant rows divides rounding noise by ~sqrt(eps): a program
        whose result is noise compares nothing."""
        t = self.env[name].double()
        rows = t.reshape(-1, math.prod(t.shape[t.dim() - k :]))
        if rows.numel() and float(rows.var(dim=1, correction=0).min()) < 1e-3:
            raise Rejected("normalising near-constant rows")

    def layout_op(self) -> tuple[str, str, list[Value]]:
        a = self.pick()
        shape = self.shape(a.name)
        rank = len(shape)
        kind = self.rng.choice(
            (
                "reshape",
                "permute",
                "transpose",
                "slice",
                "expand",
                "unsqueeze",
                "select",
                "flatten",
                "contiguous",
            )
        )
        if kind == "reshape":
            expr = f"{a.name}.reshape{_refactor(self.rng, math.prod(shape))}"
        elif kind == "permute" and rank >= 2:
            order = list(range(rank))
            self.rng.shuffle(order)
            expr = f"{a.name}.permute{tuple(order)}"
        elif kind == "transpose" and rank >= 2:
            i, j = self.rng.sample(range(rank), 2)
            expr = f"{a.name}.transpose({i}, {j})"
        elif kind == "slice" and rank >= 1:
            expr = f"{a.name}[{_random_slice(self.rng, shape)}]"
        elif kind == "expand" and rank >= 1 and 1 in shape:
            target = tuple(self.rng.choice((2, 3, 4)) if d == 1 else d for d in shape)
            lead = (self.rng.choice((2, 3)),) if self.rng.random() < 0.3 else ()
            expr = f"{a.name}.expand{(*lead, *target)}"
        elif kind == "unsqueeze":
            expr = f"{a.name}.unsqueeze({self.rng.randint(0, rank)})"
        elif kind == "select" and rank >= 1 and all(shape):
            d = self.rng.randrange(rank)
            expr = f"{a.name}.select({d}, {self.rng.randrange(shape[d])})"
        elif kind == "flatten" and rank >= 2:
            expr = f"{a.name}.flatten({self.rng.randrange(rank - 1)})"
        elif kind == "contiguous":
            expr = f"{a.name}.contiguous()"
        else:
            raise Rejected(f"{kind} on rank {rank}")
        return (f"layout:{kind}", *self.result(expr, a.exact))

    def concat(self) -> tuple[str, str, list[Value]]:
        a = self.pick()
        shape = self.shape(a.name)
        if not shape:
            raise Rejected("cat of scalars")
        dim = self.rng.randrange(len(shape))

        def fits(v: Value) -> bool:
            other = self.shape(v.name)
            return (
                len(other) == len(shape)
                and all(
                    x == y for i, (x, y) in enumerate(zip(other, shape, strict=True)) if i != dim
                )
                and self.dtype(v.name) == self.dtype(a.name)
            )

        parts = [a.name, self.pick(fits).name]
        if self.rng.random() < 0.3:
            parts.append(self.pick(fits).name)
        exact = all(v.exact for v in self.values if v.name in parts)
        return ("cat", *self.result(f"torch.cat([{', '.join(parts)}], dim={dim})", exact))

    # --- gather: indexing with computed indices -----------------------------------------

    def gather(self) -> tuple[str, str, list[Value]]:
        """embedding, index_select, gather or advanced indexing of a value, with constant
        index tensors (repeated and, where torch allows, negative indices)."""
        a = self.pick(lambda v: len(self.shape(v.name)) >= 1 and min(self.shape(v.name)) > 0)
        shape = self.shape(a.name)
        dim = self.rng.randrange(len(shape))
        n, rng = shape[dim], self.rng
        count = rng.choice((1, 2, 3, 5))

        def ints(k: int, wrap: bool = False) -> list[int]:
            return [rng.randrange(-n if wrap else 0, n) for _ in range(k)]

        kind = rng.choice(("index_select", "gather", "embedding", "index"))
        if kind == "embedding" and len(shape) == 2 and self.dtype(a.name).is_floating_point:
            rows = rng.choice((1, 2))
            index = [[rng.randrange(shape[0]) for _ in range(count)] for _ in range(rows)]
            expr = f"F.embedding({self.tensor(index, a.name)}, {a.name})"
        elif kind == "gather":
            sizes = [count if k == dim else rng.randint(1, d) for k, d in enumerate(shape)]
            flat = ints(math.prod(sizes))
            index = torch.tensor(flat, dtype=torch.int64).reshape(sizes).tolist()
            expr = f"torch.gather({a.name}, {dim}, {self.tensor(index, a.name)})"
        elif kind == "index":
            lead = ", ".join([":"] * dim + [self.tensor(ints(count, wrap=True), a.name)])
            expr = f"{a.name}[{lead}]"
        else:
            dtype = rng.choice(("torch.int64", "torch.int32"))
            expr = f"torch.index_select({a.name}, {dim}, {self.tensor(ints(count), a.name, dtype)})"
        return ("gather", *self.result(expr, a.exact))

    def matmul(self) -> tuple[str, str, list[Value]]:
        a = self.pick(
            lambda v: self.dtype(v.name) == torch.float32 and len(self.shape(v.name)) >= 1
        )
        k = self.shape(a.name)[-1]
        n = self.rng.choice((1, 3, 4, 8))
        self.tolerance = RMSE_TOLERANCE
        if self.rng.random() < 0.5:
            w = self.new_input((n, k))
            bias = self.new_input((n,)).name if self.rng.random() < 0.6 else "None"
            return ("linear", *self.result(f"F.linear({a.name}, {w.name}, {bias})", False))
        other = (
            self.pick(
                lambda v: (
                    self.dtype(v.name) == torch.float32
                    and len(self.shape(v.name)) == 2
                    and self.shape(v.name)[0] == k
                    and v.name != a.name
                )
            )
            if self.rng.random() < 0.4
            else self.new_input((k, n))
        )
        return ("matmul", *self.result(f"{a.name} @ {other.name}", False))

    def inplace(self) -> tuple[str, str, list[Value]]:
        target = self.pick(lambda v: v.name.startswith("v") and self.writable(v.name))
        op = self.rng.choice(INPLACE)
        if op in ("relu_", "neg_", "abs_"):
            statement = f"{target.name}.{op}()"
            exact = target.exact
        elif op == "clamp_":
            statement = f"{target.name}.clamp_(-1.0, 1.0)"
            exact = target.exact
        else:
            shape = self.shape(target.name)
            if self.rng.random() < 0.3 and shape:
                operand = f"{target.name}.flip(0)"  # reads the storage it writes
            else:
                # Not another view of the target's memory: eager reads such an operand while
                # writing it (the result depends on its loop order), torch.export reads it
                # whole first.
                b = self.pick(
                    lambda v: (
                        _broadcasts_into(self.shape(v.name), shape)
                        and (v.name == target.name or not self.aliases(v.name, target.name))
                    )
                )
                operand = b.name
            statement = f"{target.name}.{op}({operand})"
            exact = False
        produced = [
            Value(v.name, v.exact and exact)
            for v in self.values
            if self.aliases(v.name, target.name)
        ]
        # Every alias of the target changed: it (and they) may now be inexact.
        self.values = [v for v in self.values if not self.aliases(v.name, target.name)]
        return (f"inplace:{op}", statement, produced)

    def unsupported(self) -> tuple[str, str, list[Value]]:
        a = self.pick_float()
        shape = self.shape(a.name)
        if not shape or 0 in shape:
            raise Rejected("unsupported op on a scalar")
        dim = self.rng.randrange(len(shape))
        kind = self.rng.choice(("flip", "sort", "roll", "conv1d", "tril"))
        if kind == "flip":
            expr = f"torch.flip({a.name}, dims=({dim},))"
        elif kind == "sort":
            expr = f"torch.sort({a.name}, dim={dim}).values"
        elif kind == "roll":
            expr = f"torch.roll({a.name}, shifts=1, dims={dim})"
        elif kind == "tril" and len(shape) >= 2:
            expr = f"torch.tril({a.name})"
        elif kind == "conv1d" and len(shape) == 3:
            self.tolerance = RMSE_TOLERANCE
            w = self.new_input((self.rng.choice((1, 2, 4)), shape[1], 1))
            expr = f"F.conv1d({a.name}, {w.name})"
        else:
            raise Rejected(f"{kind} on rank {len(shape)}")
        exact = a.exact and kind in ("flip", "sort", "roll", "tril")
        return (f"unsupported:{kind}", *self.result(expr, exact))

    # --- index arithmetic ------------------------------------------------------------

    def index_op(self) -> tuple[str, str, list[Value]]:
        """arange (added to a value), flip, roll, rot90, tril/triu, repeat/tile, diagonal."""
        a = self.pick()
        shape = self.shape(a.name)
        rank, rng = len(shape), self.rng
        drawn = FACT_KINDS.get("index_op", {})
        kind = rng.choice(kinds_of(INDEX_KINDS, drawn))
        if kind in drawn:
            expr = drawn[kind](rng, a.name, shape)
            if expr is None:
                raise Rejected(f"{kind} on rank {rank}")
        elif kind == "arange" and rank >= 1 and self.dtype(a.name) != torch.bool:
            n = shape[-1]
            start: float = rng.choice((0, 3, -2))
            step: float = rng.choice((1, 2, -1, -3))
            dtype = rng.choice(("", ", dtype=torch.float32", ", dtype=torch.int32"))
            if rng.random() < 0.3:
                start, step, dtype = start / 2, step / 2, ""  # exact float steps
            expr = (
                f"{a.name} + torch.arange({start}, {start + n * step}, {step}{dtype}, "
                f"device={a.name}.device)"
            )
        elif kind == "flip" and rank >= 1:
            dims = rng.sample(range(rank), rng.randint(1, rank))
            expr = f"torch.flip({a.name}, dims={tuple(dims)})"
        elif kind == "rot90" and rank >= 2:
            d0, d1 = rng.sample(range(rank), 2)
            expr = f"torch.rot90({a.name}, {rng.randint(-2, 3)}, ({d0}, {d1}))"
        elif kind in ("tril", "triu") and rank >= 2:
            expr = f"torch.{kind}({a.name}, {rng.randint(-3, 3)})"
        elif kind in ("repeat", "tile"):
            reps = tuple(rng.choice((1, 1, 2, 3)) for _ in range(rank + rng.randint(0, 1)))
            if kind == "repeat" and not reps:
                raise Rejected("repeat with no repeats")
            expr = f"{a.name}.{kind}({reps})"
        elif kind == "diagonal" and rank >= 2:
            d0, d1 = rng.sample(range(rank), 2)
            expr = f"torch.diagonal({a.name}, {rng.randint(-3, 3)}, {d0}, {d1})"
        else:
            raise Rejected(f"{kind} on rank {rank}")
        return (f"index:{kind}", *self.result(expr, a.exact))

    # --- scans: cumsum, cumprod, logcumsumexp, cummax, cummin ---------------------------

    def scan(self) -> tuple[str, str, list[Value]]:
        """A scan along a dim (negative half of the time; a scalar's is 0 or -1): cumsum (of
        integers and bool: int64), cumprod (floats kept near 1 so that products stay tame),
        logcumsumexp (floats), cummax / cummin's values, or their indices where the operand is
        exact (ties of rounded values could fall apart)."""
        a = self.pick()
        rank, rng = len(self.shape(a.name)), self.rng
        dim = rng.randrange(max(rank, 1)) - (max(rank, 1) if rng.random() < 0.5 else 0)
        is_float = self.dtype(a.name).is_floating_point
        kind = rng.choice(("cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"))
        operand, exact = a.name, a.exact and not is_float
        if kind in ("cumsum", "cumprod", "logcumsumexp") and is_float:
            self.tolerance = RMSE_TOLERANCE
        if kind == "cumprod" and is_float:
            operand = f"({a.name}.clamp(-2, 2) * 0.25 + 1)"
        if kind == "logcumsumexp" and not is_float:
            raise Rejected("logcumsumexp of integers")
        expr = f"torch.{kind}({operand}, dim={dim})"
        if kind in ("cummax", "cummin"):
            indices = a.exact and rng.random() < 0.4
            expr += ".indices" if indices else ".values"
            exact = a.exact
        return (f"scan:{kind}", *self.result(expr, exact))

    # --- padding and pooling ---------------------------------------------------------------

    def pad(self) -> tuple[str, str, list[Value]]:
        """F.pad: constant (any rank, negative pads crop), reflect or replicate (floats, the
        trailing 1 to 3 dims of a tensor with one or two more)."""
        a = self.pick()
        shape = self.shape(a.name)
        if not shape or 0 in shape:
            raise Rejected("pad of a scalar or an empty tensor")
        mode = self.rng.choice(("constant", "constant", "reflect", "replicate"))
        if mode == "constant":
            dims = self.rng.randint(1, len(shape))
        else:
            if not self.dtype(a.name).is_floating_point or len(shape) < 2:
                raise Rejected(f"{mode} pad of {self.dtype(a.name)} rank {len(shape)}")
            dims = self.rng.randint(max(1, len(shape) - 2), min(3, len(shape) - 1))
        pads: list[int] = []
        for d in range(dims):
            size = shape[len(shape) - 1 - d]
            limit = size - 1 if mode == "reflect" else 3
            low = -self.rng.randint(0, (size - 1) // 2)
            pads += [self.rng.randint(low, limit), self.rng.randint(low, limit)]
        value = ""
        if mode == "constant" and self.rng.random() < 0.5:
            value = f", value={self.rng.choice((-1, 2, 0.5))}"
            if not self.dtype(a.name).is_floating_point and "0.5" in value:
                value = ", value=2"
        expr = f"F.pad({a.name}, {tuple(pads)}, mode={mode!r}{value})"
        return (f"pad:{mode}", *self.result(expr, a.exact))

    def pool(self) -> tuple[str, str, list[Value]]:
        """max_pool / avg_pool (kernel, stride, padding, dilation, ceil_mode,
        count_include_pad, divisor_override drawn) or an adaptive pool of an even split."""
        a = self.pick_float()
        shape = self.shape(a.name)
        if len(shape) < 2 or 0 in shape:
            raise Rejected("pool of rank < 2")
        n = self.rng.randint(1, min(3, len(shape) - 1))
        spatial = shape[len(shape) - n :]
        kind = self.rng.choice(("max", "avg", "adaptive_max", "adaptive_avg"))
        if kind.startswith("adaptive"):
            sizes = tuple(
                self.rng.choice([o for o in range(1, s + 1) if s % o == 0]) for s in spatial
            )
            expr = f"F.{kind}_pool{n}d({a.name}, {sizes})"
            return (f"pool:{kind}", *self.result(expr, a.exact and kind == "adaptive_max"))
        kernel = tuple(self.rng.randint(1, min(4, s)) for s in spatial)
        stride = tuple(self.rng.randint(1, 3) for _ in spatial)
        padding = tuple(self.rng.randint(0, k // 2) for k in kernel)
        args = f"{kernel}, {stride}, {padding}"
        if kind == "max":
            args += f", dilation={tuple(self.rng.randint(1, 2) for _ in spatial)}"
        args += f", ceil_mode={self.rng.random() < 0.3}"
        if kind == "avg":
            args += f", count_include_pad={self.rng.random() < 0.5}"
            if n > 1 and self.rng.random() < 0.2:
                args += f", divisor_override={self.rng.randint(1, 9)}"
        expr = f"F.{kind}_pool{n}d({a.name}, {args})"
        if kind == "max" and self.rng.random() < 0.25:
            expr = f"F.max_pool{n}d({a.name}, {args}, return_indices=True)[1]"
            return ("pool:argmax", *self.result(expr, True))
        return (f"pool:{kind}", *self.result(expr, a.exact and kind == "max"))

    def depthwise(self) -> tuple[str, str, list[Value]]:
        """A depthwise convolution (`groups` = channels; kernel, stride, padding, dilation and
        the bias drawn) of a value of rank 3 to 5, which `depthwise-stencil` rewrites."""
        a = self.pick_float()
        shape = self.shape(a.name)
        if not 3 <= len(shape) <= 5 or 0 in shape:
            raise Rejected("depthwise convolution of rank < 3 or > 5")
        n, channels, rng = len(shape) - 2, shape[1], self.rng
        dilation = tuple(rng.randint(1, 2) for _ in range(n))
        kernel = tuple(
            rng.randint(1, max(1, min(3, (s + d - 1) // d)))
            for s, d in zip(shape[2:], dilation, strict=True)
        )
        padding = tuple(rng.randint(0, k // 2 + 1) for k in kernel)
        stride = tuple(rng.randint(1, 2) for _ in range(n))
        if any(
            s + 2 * p < d * (k - 1) + 1
            for s, p, d, k in zip(shape[2:], padding, dilation, kernel, strict=True)
        ):
            raise Rejected("depthwise window larger than the padded input")
        self.tolerance = RMSE_TOLERANCE
        w = f"{self.new_input((channels, 1, *kernel), 'normal').name}.to({a.name}.dtype)"
        bias = "None"
        if rng.random() < 0.5:
            bias = f"{self.new_input((channels,), 'normal').name}.to({a.name}.dtype)"
        expr = (
            f"F.conv{n}d({a.name}, {w}, {bias}, stride={stride}, padding={padding}, "
            f"dilation={dilation}, groups={channels})"
        )
        return ("depthwise", *self.result(expr, False))

    def convolution(self) -> tuple[str, str, list[Value]]:
        """A batch-1, ungrouped 2-D convolution (window, stride, padding, output channels and
        the bias drawn) of the ReLU of a value of rank 3 (unsqueezed) or 4 (batch 1), which
        `convolution-matmul` rewrites on the CPU where torch runs it on its slow path: a 1x1
        window into one product, a larger one of stride 2 into patches times the weight."""
        a = self.pick_float()
        shape, rng = self.shape(a.name), self.rng
        if len(shape) == 4 and shape[0] == 1:
            x = f"F.relu({a.name})"
        elif len(shape) == 3:
            x, shape = f"F.relu({a.name}).unsqueeze(0)", (1, *shape)
        else:
            raise Rejected("convolution of a value neither [C, H, W] nor [1, C, H, W]")
        if 0 in shape:
            raise Rejected("convolution of an empty value")
        kernel = tuple(rng.choice((1, 1, 2, 3)) for _ in range(2))
        square = rng.random() < 0.5  # ResNet's stride 2 along both dims, more often
        stride = (2, 2) if square else tuple(rng.randint(1, 2) for _ in range(2))
        padding = tuple(rng.randint(0, k // 2) for k in kernel)
        if any(s + 2 * p < k for s, p, k in zip(shape[2:], padding, kernel, strict=True)):
            raise Rejected("convolution window larger than the padded input")
        self.tolerance = RMSE_TOLERANCE
        outs = rng.randint(1, 4)
        w = f"{self.new_input((outs, shape[1], *kernel), 'normal').name}.to({a.name}.dtype)"
        bias = "None"
        if rng.random() < 0.5:
            bias = f"{self.new_input((outs,), 'normal').name}.to({a.name}.dtype)"
        expr = f"F.conv2d({x}, {w}, {bias}, stride={stride}, padding={padding})"
        return ("convolution", *self.result(expr, False))

    # --- scatters with affine indices ------------------------------------------------------

    def scatter(self) -> tuple[str, str, list[Value]]:
        """slice_scatter (start, end and step drawn, negative ones too), select_scatter or
        diagonal_scatter of a value, the source a new input cast to its dtype."""
        a = self.pick(lambda v: len(self.shape(v.name)) >= 1 and 0 not in self.shape(v.name))
        shape, rng = self.shape(a.name), self.rng
        rank = len(shape)
        dim = rng.randrange(rank)
        n = shape[dim]
        kind = rng.choice(("slice", "slice", "select", "diagonal", "computed", "computed"))
        if kind == "computed":
            return self.computed_scatter(a, dim)
        if kind == "slice":
            start, end = rng.randint(-n, n - 1), rng.choice((None, rng.randint(-n, n + 2)))
            step = rng.choice((1, 1, 2, 3))
            size = len(range(*slice(start, end, step).indices(n)))
            src_shape = tuple(size if k == dim else d for k, d in enumerate(shape))
            args = f"{dim}, {start}, {end}, {step}"
        elif kind == "select":
            src_shape = tuple(d for k, d in enumerate(shape) if k != dim)
            args = f"{dim}, {rng.randrange(-n, n)}"
        elif rank >= 2:
            d1, d2 = rng.sample(range(rank), 2)
            offset = rng.randint(-3, 3)
            length = torch.diagonal(self.env[a.name], offset, d1, d2).shape[-1]
            src_shape = (*(d for k, d in enumerate(shape) if k not in (d1, d2)), length)
            args = f"{offset}, {d1}, {d2}"
        else:
            raise Rejected(f"{kind}_scatter on rank {rank}")
        src = self.new_input(src_shape)
        expr = f"torch.{kind}_scatter({a.name}, {src.name}.to({a.name}.dtype), {args})"
        return (f"scatter:{kind}", *self.result(expr, a.exact))

    def computed_scatter(self, a: Value, dim: int) -> tuple[str, str, list[Value]]:
        """scatter (src or value), scatter_add, scatter_reduce, index_put (int indices with
        negative and repeated ones, accumulate or not, or a boolean mask), index_add,
        index_copy or index_fill along `dim`, with constant index tensors."""
        shape, rng, name = self.shape(a.name), self.rng, a.name
        n, dtype = shape[dim], self.dtype(a.name)
        k = rng.choice((1, 2, 3, 5))

        def ints(count: int, wrap: bool = False) -> list[int]:
            return [rng.randrange(-n if wrap else 0, n) for _ in range(count)]

        def source(src_shape: tuple[int, ...]) -> str:
            return f"{self.new_input(src_shape).name}.to({name}.dtype)"

        kind = rng.choice(
            ("scatter", "scatter_add", "scatter_reduce", "index_put", "index_add", "index_copy")
            + ("index_fill", "mask")
        )
        if kind in ("scatter_add", "index_add", "scatter_reduce") and dtype == torch.bool:
            raise Rejected(f"{kind} of bools")
        exact = a.exact
        if kind in ("scatter", "scatter_add", "scatter_reduce"):
            sizes = [k if d == dim else rng.randint(1, s) for d, s in enumerate(shape)]
            index = torch.tensor(ints(math.prod(sizes))).reshape(sizes).tolist()
            if kind == "scatter":  # distinct along dim: CUDA eager's winner is unspecified
                if k > n:
                    raise Rejected("scatter of more distinct indices than the dim has")
                columns = math.prod(sizes) // k
                distinct = torch.tensor([rng.sample(range(n), k) for _ in range(columns)])
                others = [s for d, s in enumerate(sizes) if d != dim]
                index = distinct.reshape(*others, k).movedim(-1, dim).tolist()
            idx = self.tensor(index, name)
            if kind == "scatter" and rng.random() < 0.3:
                expr = f"torch.scatter({name}, {dim}, {idx}, {rng.choice((2, -1))})"
            elif kind == "scatter":
                expr = f"torch.scatter({name}, {dim}, {idx}, {source(tuple(sizes))})"
            elif kind == "scatter_add":
                expr = f"torch.scatter_add({name}, {dim}, {idx}, {source(tuple(sizes))})"
            else:
                how = rng.choice(("sum", "prod", "mean", "amax", "amin"))
                if how == "mean" and not dtype.is_floating_point:
                    raise Rejected("scatter mean of integers")
                include = rng.random() < 0.5
                expr = (
                    f"torch.scatter_reduce({name}, {dim}, {idx}, {source(tuple(sizes))}, "
                    f"{how!r}, include_self={include})"
                )
                exact = exact and how in ("amax", "amin")
            exact = exact and kind == "scatter"
        elif kind in ("index_add", "index_copy", "index_fill"):
            picked = ints(k, wrap=kind == "index_fill")
            if kind == "index_copy":  # distinct: CUDA eager's winner is unspecified
                picked = rng.sample(range(n), min(k, n))
                k = len(picked)
            idx = self.tensor(picked, name)
            sized = tuple(k if d == dim else s for d, s in enumerate(shape))
            if kind == "index_fill":
                expr = f"torch.index_fill({name}, {dim}, {idx}, {rng.choice((0, 3))})"
            else:
                expr = f"torch.{kind}({name}, {dim}, {idx}, {source(sized)})"
                exact = exact and kind == "index_copy"
        elif kind == "index_put":  # along dim 0: x[idx] = values (broadcast) or +=
            accumulate = dtype != torch.bool and rng.random() < 0.5
            if dim != 0:
                raise Rejected("index_put along another dim than 0")
            picked = ints(k, wrap=True)
            if not accumulate:  # distinct rows (-1 and n - 1 are one row)
                picked = [r - n * rng.randint(0, 1) for r in rng.sample(range(n), min(k, n))]
                k = len(picked)
            idx = self.tensor(picked, name)
            rows = (k, *shape[1:]) if rng.random() < 0.7 else shape[1:]
            expr = f"torch.index_put({name}, ({idx},), {source(rows)}, {accumulate})"
            exact = exact and not accumulate
        else:  # x[mask] = value: a boolean mask of the value's own signs
            value, accumulate = rng.choice((0, 2)), rng.random() < 0.3 and dtype != torch.bool
            expr = (
                f"torch.index_put({name}, ({name} > 0,), torch.tensor({value}, "
                f"dtype={name}.dtype), {accumulate})"
            )
            exact = exact and not accumulate
        if not exact:
            self.tolerance = RMSE_TOLERANCE
        return (f"scatter:{kind}", *self.result(expr, exact))

    # --- aliasing --------------------------------------------------------------------------

    def mismatch(self) -> tuple[str, str, list[Value]]:
        """A `MISMATCHES` op on new positive inputs of its shapes, each cast to a dtype drawn
        from `MISMATCH_DTYPES` (an index operand to 0s and 1s first)."""
        name = self.rng.choice(list(MISMATCHES))
        shapes, template = MISMATCHES[name]
        m, k, n, b = (self.rng.choice((2, 3, 4)) for _ in range(4))
        dims = {"m": m, "k": k, "n": n, "b": b}
        operands: list[str] = []
        for i, shape in enumerate(shapes):
            sizes = tuple(dims[d] if isinstance(d, str) else d for d in shape)
            x = self.new_input(sizes, "positive").name
            index = f"{{i{i}}}" in template
            dtype = self.rng.choice(MASKLESS_DTYPES if index and name in MASKS else MISMATCH_DTYPES)
            value = f"({x} > 1)" if index else f"({x} * 3)"
            operands.append(f"{value}.to({dtype})")
        expr = template.format(
            **dims, **{f"{c}{i}": o for i, o in enumerate(operands) for c in "xi"}
        )
        return (f"mismatch:{name}", *self.result(expr, False))

    def writable(self, name: str) -> bool:
        t = self.env[name]
        if any(s == 0 and d > 1 for s, d in zip(t.stride(), t.shape, strict=True)):
            return False  # expanded: several elements share one memory location
        inputs = {i.name for i in self.inputs}
        return not any(self.aliases(name, i) for i in inputs if i in self.env)

    def aliases(self, a: str, b: str) -> bool:
        ta, tb = self.env.get(a), self.env.get(b)
        if ta is None or tb is None:
            return False
        return ta.untyped_storage().data_ptr() == tb.untyped_storage().data_ptr()


def pool(name: FuzzPool, ops: Iterable[type[Operation]] | None = None) -> list[Fuzz]:
    """The `fuzz` facts of `ops` (by default the graph dialect's) drawn from one pool, in the
    pool's draw order (`draw_order.DRAW_ORDER`), whatever the order of `ops`."""
    ops = graph.Graph.operations if ops is None else ops
    drawn = [
        (op.name, f) for op in ops if (f := graph.op_facts(op).fuzz) is not None and f.pool == name
    ]
    return [f for _, f in sorted(drawn, key=lambda entry: draw_rank(name, entry[0]))]


def fact_kinds(ops: Iterable[type[Operation]] | None = None) -> dict[str, dict[str, FuzzDraw]]:
    """Generator method -> the kinds it draws through the `fuzz` facts of `ops` (by default
    the graph dialect's; `Fuzz.drawn_in`) -> the function that writes each kind's torch
    code."""
    ops = graph.Graph.operations if ops is None else ops
    table: dict[str, dict[str, FuzzDraw]] = {}
    for op in ops:
        f = graph.op_facts(op).fuzz
        if f is not None and f.by is not None and f.draw is not None:
            table.setdefault(f.by, {})[f.kind] = f.draw
    return table


FACT_KINDS = fact_kinds()


def kinds_of(listed: tuple[str, ...], drawn: Iterable[str]) -> tuple[str, ...]:
    """A generator method's kinds: those its table lists, in that order, then the kinds the
    ops' facts add (by name), so that a new kind changes no draw of the others."""
    return listed + tuple(sorted(k for k in drawn if k not in listed))


INDEX_KINDS = ("arange", "flip", "roll", "rot90", "tril", "triu", "repeat", "tile", "diagonal")
"""The kinds `index_op` draws, in its draw order; roll's torch code is its op's fuzz fact."""


def _spellings(name: FuzzPool, where: Callable[[Fuzz], bool] = lambda f: True) -> tuple[str, ...]:
    return tuple(f.spelling for f in pool(name) for _ in range(f.weight) if where(f))


# The pools, from the ops' `fuzz` facts (`xfuse.dialects.facts`); clamp and leaky_relu are
# importer formulas (no op of their own).
UNARY = (*_spellings("unary"), "torch.clamp", "F.leaky_relu")
ELEM_KINDS = ("bitwise", "logical_any", "int_by_number")
"""The kinds of `Generator.bitwise_division_any` among `integer_or_logical`'s."""
EXACT_UNARY = _spellings("unary", lambda f: f.exact)
POSITIVE_DOMAIN = _spellings("unary", lambda f: f.positive)
BINARY = _spellings("binary")
EXACT_BINARY = _spellings("binary", lambda f: f.exact)
EXACT_OPERANDS = _spellings("binary", lambda f: f.exact_operands)
EXACT_OPERAND_REDUCTIONS = _spellings("reduction", lambda f: f.exact_operands)
ILL_CONDITIONED_AT_ONE = ("torch.acos", "torch.asin", "torch.atanh")
SIGN_TESTS = ("torch.signbit",)
"""Unary ops that compare with 0: drawn on exact operands only, as comparisons are."""
COMPARISONS = _spellings("compare")
REDUCTIONS = _spellings("reduction")
EXACT_REDUCTIONS = _spellings("reduction", lambda f: f.exact)
INPLACE = ("add_", "mul_", "sub_", "relu_", "neg_", "clamp_", "abs_")


MISMATCH_RATE = 0.3
"""The share of programs that end with a `MISMATCHES` op on inputs of random dtypes."""
MISMATCH_DTYPES = (
    *("torch.float32",) * 3,
    *("torch.float64",) * 2,
    *("torch.int64",) * 2,
    "torch.float16",
    "torch.bfloat16",
    "torch.int32",
    "torch.bool",
)
MASKS = ("index",)
"""Ops whose bool index is a mask, of a data-dependent shape (which xfuse does not import)."""
MASKLESS_DTYPES = tuple(d for d in MISMATCH_DTYPES if d != "torch.bool")
MISMATCHES: dict[str, tuple[tuple[tuple[int | str, ...], ...], str]] = {
    "mm": ((("m", "k"), ("k", "n")), "torch.mm({x0}, {x1})"),
    "matmul": ((("b", "m", "k"), ("k", "n")), "torch.matmul({x0}, {x1})"),
    "bmm": ((("b", "m", "k"), ("b", "k", "n")), "torch.bmm({x0}, {x1})"),
    "addmm": ((("m", "n"), ("m", "k"), ("k", "n")), "torch.addmm({x0}, {x1}, {x2})"),
    "baddbmm": (
        (("b", "m", "n"), ("b", "m", "k"), ("b", "k", "n")),
        "torch.baddbmm({x0}, {x1}, {x2})",
    ),
    "linear": ((("m", "k"), ("n", "k"), ("n",)), "F.linear({x0}, {x1}, {x2})"),
    "conv2d": (((1, "k", 4, 4), ("n", "k", 2, 2)), "F.conv2d({x0}, {x1})"),
    "cat": ((("m", "k"), ("n", "k")), "torch.cat([{x0}, {x1}])"),
    "stack": ((("m", "k"), ("m", "k")), "torch.stack([{x0}, {x1}], 1)"),
    "where": ((("m", "k"), ("m", "k"), ("m", "k")), "torch.where({x0}, {x1}, {x2})"),
    "index_select": ((("m", "k"), ("n",)), "torch.index_select({x0}, 0, {i1})"),
    "gather": ((("m", "k"), ("m", "k")), "torch.gather({x0}, 1, {i1})"),
    "index": ((("m", "k"), ("n",)), "{x0}[{i1}]"),
    "embedding": ((("n",), ("m", "k")), "F.embedding({i0}, {x1})"),
    "layer_norm": ((("m", "k"), ("k",), ("k",)), "F.layer_norm({x0}, ({k},), {x1}, {x2})"),
    "group_norm": (((2, "k", 4), ("k",), ("k",)), "F.group_norm({x0}, 1, {x1}, {x2})"),
    "batch_norm": (
        ((2, "k", 4), ("k",), ("k",)),
        "F.batch_norm({x0}, {x1}, {x2}, training=False)",
    ),
    "attention": (
        ((1, "m", "k"), (1, "n", "k"), (1, "n", "k")),
        "F.scaled_dot_product_attention({x0}, {x1}, {x2})",
    ),
    "softmax": ((("m", "k"),), "torch.softmax({x0}, -1)"),
    "add": ((("m", "k"), ("m", "k")), "{x0} + {x1}"),
    "sub": ((("m", "k"), ("m", "k")), "{x0} - {x1}"),
    "div": ((("m", "k"), ("m", "k")), "{x0} / {x1}"),
    "floor_divide": ((("m", "k"), ("m", "k")), "{x0} // {x1}"),
    "less": ((("m", "k"), ("m", "k")), "{x0} < {x1}"),
    "bitwise_and": ((("m", "k"), ("m", "k")), "{x0} & {x1}"),
}
"""Ops whose eager kernels refuse some mixes of dtypes (or promote them): each operand's shape
(letters are dims drawn per statement) and the expression, `{xI}` operand I as a value and
`{iI}` as an index (0s and 1s; every indexed dim is at least 2)."""


def _mentions(statement: str, name: str) -> bool:
    import re

    return re.search(rf"\b{re.escape(name)}\b", statement) is not None


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(a), reversed(b), strict=False))


def _broadcasts_into(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    return len(src) <= len(dst) and all(
        x == y or x == 1 for x, y in zip(reversed(src), reversed(dst), strict=False)
    )


def _refactor(rng: random.Random, numel: int) -> tuple[int, ...]:
    """A random shape with `numel` elements."""
    dims: list[int] = []
    rest = numel
    for _ in range(rng.randint(0, 3)):
        divisors = [d for d in range(2, rest + 1) if rest % d == 0]
        if not divisors:
            break
        d = rng.choice(divisors)
        dims.append(d)
        rest //= d
    dims.append(rest)
    rng.shuffle(dims)
    if rng.random() < 0.2:
        dims[rng.randrange(len(dims))] = -1
    return tuple(dims)


def _random_slice(rng: random.Random, shape: tuple[int, ...]) -> str:
    d = rng.randrange(len(shape))
    n = shape[d]
    start = rng.randint(0, max(0, n - 1))
    stop = rng.randint(start + 1, n) if n > start else n
    step = rng.choice((1, 1, 2))
    parts = [":"] * d + [f"{start}:{stop}:{step}"]
    return ", ".join(parts)


def generate(
    seed: int, n_ops: int | None = None, allow_unsupported: bool = True, mismatches: bool = True
) -> FuzzProgram:
    """The program a seed names (the same on every machine with the same torch). Without
    `mismatches`, the program drawn before mismatched dtypes were drawn (no dtype-mismatch
    tail, the same body and outputs as then)."""
    return Generator(seed, allow_unsupported, mismatches).generate(n_ops)
