"""
Differential fuzzing of the whole compiler, in the style of NNSmith: random torch programs,
each run in torch eager and through xfuse, compared.

    program = generate(seed=7)               # a `FuzzProgram`: source text + its parts
    outcome = check_source(program.source)   # eager vs every stage of xfuse
    outcome.status                           # "pass" | "fail" | "skip"

A program is Python source: `def program(x0, x1, ...)` whose body is one statement per op, and
`def make_inputs()` that builds seeded inputs (some transposed, expanded (stride 0) or strided
slices). The generator picks ops from what xfuse supports (elementwise with broadcasting,
comparisons and `where`, casts, reductions, normalisations, layout ops, matmul/linear) and some
it does not (cumsum, flip, sort, conv1d, ...), in-place ops and views of mutated tensors. Each
candidate statement is run on the real inputs before it is kept, so a program never computes
NaN/Inf or huge values (the op's domain is respected by construction).

The differential runner (`check_source`) compares eager with: the interpreter after import and
after each pass of the pipeline, the CPU backend through `xfuse.compile` (called twice: the
second call reuses buffers), and CUDA when there is one. Tolerance: `torch.testing.assert_close`
defaults; for programs with reductions, matmuls or low precision, an output that fails those
passes when its RMSE against an f64 run is at most 2x eager's (+ a tiny epsilon).
"""

from __future__ import annotations

import math
import random
import traceback
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from xdsl.ir import Operation

from xfuse.dialects import graph
from xfuse.dialects.facts import Fuzz, FuzzPool
from xfuse.errors import XfuseError

Tensor = torch.Tensor

MAX_MAGNITUDE = 1e3
"""Values a program computes stay within this (keeps f32 comparisons meaningful)."""
MAX_NUMEL = 32768
"""Elements of any one value (keeps compilation and the loop interpreter quick)."""
DIMS = (1, 1, 2, 3, 4, 5, 6, 8, 8, 16, 1, 2, 3, 4, 8, 17, 33, 64)
RMSE_TOLERANCE = "rmse"
STRICT_TOLERANCE = "strict"

# ---------------------------------------------------------------------------------------------
# Program text
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputSpec:
    """One input of a program: how `make_inputs` builds it."""

    name: str
    shape: tuple[int, ...]
    kind: str = "normal"
    """normal | positive | int | bool"""
    layout: str = "contiguous"
    """contiguous | transposed | expanded | strided"""

    def expression(self) -> str:
        base = self._base_shape()
        make = _make_expression(self.kind, base)
        if self.layout == "transposed":
            order = tuple(range(len(self.shape) - 1, -1, -1))
            return f"{make}.permute{order}"
        if self.layout == "expanded":
            return f"{make}.expand{self.shape}"
        if self.layout == "strided":
            return f"{make}[..., ::2]"
        return make

    def _base_shape(self) -> tuple[int, ...]:
        if self.layout == "transposed":
            return tuple(reversed(self.shape))
        if self.layout == "expanded":
            return tuple(1 if i == self._expanded_dim() else d for i, d in enumerate(self.shape))
        if self.layout == "strided":
            return (*self.shape[:-1], 2 * self.shape[-1])
        return self.shape

    def _expanded_dim(self) -> int:
        return max(range(len(self.shape)), key=lambda i: self.shape[i])


def _make_expression(kind: str, shape: tuple[int, ...]) -> str:
    dims = repr(shape)
    if kind == "positive":
        return f"(torch.rand({dims}, generator=g) * 1.5 + 0.5)"
    if kind == "int":
        return f"torch.randint(-4, 5, {dims}, generator=g, dtype=torch.int32)"
    if kind == "bool":
        return f"(torch.randn({dims}, generator=g) > 0)"
    return f"torch.randn({dims}, generator=g)"


@dataclass
class FuzzProgram:
    """A generated program: its inputs, body statements and outputs; `source` is the text."""

    seed: int
    inputs: list[InputSpec]
    body: list[str]
    outputs: list[str]
    tolerance: str = STRICT_TOLERANCE
    scale: float = 1.0
    """The largest magnitude of any value the program computes (sizes the RMSE epsilon)."""
    ops: list[str] = field(default_factory=list[str])
    """The kind of each statement (e.g. "unary:exp", "inplace:add_"), for statistics."""

    @property
    def source(self) -> str:
        return program_source(
            self.seed, self.inputs, self.body, self.outputs, self.tolerance, self.scale
        )


def program_source(
    seed: int,
    inputs: Sequence[InputSpec],
    body: Sequence[str],
    outputs: Sequence[str],
    tolerance: str,
    scale: float = 1.0,
) -> str:
    params = ", ".join(i.name for i in inputs)
    lines = [
        "import torch",
        "import torch.nn.functional as F",
        "",
        f'TOLERANCE = "{tolerance}"',
        f"SCALE = {scale:.4g}",
        "",
        "",
        f"def program({params}):",
        *(f"    {s}" for s in body),
        f"    return ({''.join(o + ', ' for o in outputs)})",
        "",
        "",
        "def make_inputs():",
        f"    g = torch.Generator().manual_seed({seed})",
        *(f"    {i.name} = {i.expression()}" for i in inputs),
        f"    return ({''.join(i.name + ', ' for i in inputs)})",
        "",
    ]
    return "\n".join(lines)


def load_source(source: str, name: str = "<fuzz program>") -> dict[str, Any]:
    """Execute program source; its namespace (`program`, `make_inputs`, `TOLERANCE`)."""
    namespace: dict[str, Any] = {"__name__": "xfuse_fuzz_program"}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102 - running generated programs is the point
    return namespace


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

    def __init__(self, seed: int, allow_unsupported: bool = True):
        self.rng = random.Random(seed)
        self.seed = seed
        self.allow_unsupported = allow_unsupported
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
        ]
        if self.allow_unsupported:
            makers.append((0.8, self.unsupported))
        weights = [w for w, _ in makers]
        return self.rng.choices([m for _, m in makers], weights)[0]()

    def unary(self) -> tuple[str, str, list[Value]]:
        a = self.pick_float()
        fn = self.rng.choice(UNARY)
        if fn in EXACT_UNARY:
            expr, exact = f"{fn}({a.name})", a.exact
        elif fn in POSITIVE_DOMAIN:
            expr, exact = f"{fn}({self.positive(a.name)})", False
        elif fn == "torch.exp":
            expr, exact = f"torch.exp({a.name}.clamp(-6, 6))", False
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
        kind = self.rng.choice(("floordiv", "remainder", "logical", "masked_fill", "argmax"))
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
                b = self.pick(lambda v: _broadcasts_into(self.shape(v.name), shape))
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
        kind = self.rng.choice(("cumsum", "flip", "sort", "roll", "conv1d", "tril"))
        if kind == "cumsum":
            self.tolerance = RMSE_TOLERANCE
            expr = f"torch.cumsum({a.name}, dim={dim})"
        elif kind == "flip":
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

    # --- aliasing --------------------------------------------------------------------------

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
    """The `fuzz` facts of `ops` (by default the graph dialect's) drawn from one pool, in
    their order."""
    ops = graph.Graph.operations if ops is None else ops
    facts = (graph.op_facts(op).fuzz for op in ops)
    return [f for f in facts if f is not None and f.pool == name]


def _spellings(name: FuzzPool, where: Callable[[Fuzz], bool] = lambda f: True) -> tuple[str, ...]:
    return tuple(f.spelling for f in pool(name) for _ in range(f.weight) if where(f))


# The pools, from the ops' `fuzz` facts (`xfuse.dialects.facts`); clamp and leaky_relu are
# importer formulas (no op of their own).
UNARY = (*_spellings("unary"), "torch.clamp", "F.leaky_relu")
EXACT_UNARY = _spellings("unary", lambda f: f.exact)
POSITIVE_DOMAIN = _spellings("unary", lambda f: f.positive)
BINARY = _spellings("binary")
EXACT_BINARY = _spellings("binary", lambda f: f.exact)
COMPARISONS = _spellings("compare")
REDUCTIONS = _spellings("reduction")
EXACT_REDUCTIONS = _spellings("reduction", lambda f: f.exact)
INPLACE = ("add_", "mul_", "sub_", "relu_", "neg_", "clamp_", "abs_")


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


def generate(seed: int, n_ops: int | None = None, allow_unsupported: bool = True) -> FuzzProgram:
    """The program a seed names (the same on every machine with the same torch)."""
    return Generator(seed, allow_unsupported).generate(n_ops)


# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------


def flat_tensors(value: Any) -> list[Tensor]:
    from torch.utils import _pytree as pytree

    return [t for t in pytree.tree_leaves(value) if isinstance(t, Tensor)]


def rmse(a: Tensor, b: Tensor) -> float:
    if a.numel() == 0:
        return 0.0
    return float(((a.double() - b.double()) ** 2).mean().sqrt())


def compare_outputs(
    got: Sequence[Tensor],
    expected: Sequence[Tensor],
    reference: Sequence[Tensor] | None = None,
    scale: float | Sequence[float] = 1.0,
) -> str | None:
    """None when `got` matches `expected`, else one line saying where and how it differs.
    With an f64 `reference`, an output outside assert_close's tolerance still passes when its
    RMSE against the reference is at most 2x eager's plus a tiny epsilon: a few f32 ulps of
    `scale`, the largest magnitude the program computes (rounding of an intermediate value), or
    with one scale per output, that output's own."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, eager has {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if tuple(g.shape) != tuple(e.shape) or g.dtype != e.dtype:
            return f"output {i} is {g.dtype} {list(g.shape)}, eager gives {e.dtype} {list(e.shape)}"
        try:
            torch.testing.assert_close(g.cpu(), e.cpu(), equal_nan=True)
            continue
        except AssertionError as error:
            detail = " ".join(str(error).split())
        own = scale if isinstance(scale, float | int) else scale[i]
        if reference is not None and e.is_floating_point() and _rmse_ok(g, e, reference[i], own):
            continue
        return f"output {i}: {detail}"
    return None


def _rmse_ok(got: Tensor, eager: Tensor, reference: Tensor, scale: float) -> bool:
    ref = reference.detach().cpu().double()
    if tuple(ref.shape) != tuple(eager.shape):
        return False
    # Values are computed in f32 at least, whatever the output's dtype: f32's epsilon at least.
    unit = max(float(torch.finfo(eager.dtype).eps), float(torch.finfo(torch.float32).eps))
    eps = 4 * unit * (max(float(ref.abs().mean()), scale) + 1.0) if ref.numel() else 0.0
    return rmse(got.cpu(), ref) <= 2 * rmse(eager.cpu(), ref) + eps


# ---------------------------------------------------------------------------------------------
# The differential runner
# ---------------------------------------------------------------------------------------------

from xfuse.api import DEFAULT_PIPELINE  # noqa: E402  (the pipeline xfuse.compile runs)


@dataclass
class Outcome:
    """The result of one differential run."""

    status: str
    """pass | fail | skip (torch.export rejects the program)"""
    stage: str = ""
    """Where it failed: "eager", "import", "after <pass>", "loops", "cpu", "cuda"."""
    message: str = ""
    stages: list[str] = field(default_factory=list[str])
    """Stages that ran and matched eager."""

    def __str__(self) -> str:
        if self.status == "pass":
            return f"pass ({', '.join(self.stages)})"
        return f"{self.status} at {self.stage}: {self.message}"


class StageFailure(XfuseError):
    def __init__(self, stage: str, message: str):
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.message = message


def _one_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:400]


def _where(e: BaseException) -> str:
    """The innermost xfuse frame of a crash, so that a report says where to look."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/xfuse/" in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f" [{f.filename.rsplit('/xfuse/', 1)[-1]}:{f.lineno}]"


@dataclass
class Differential:
    """Runs one program (from source) through eager and every xfuse stage."""

    source: str
    devices: Sequence[str] = ("cpu",)
    pipeline: str = DEFAULT_PIPELINE
    loop_interpreter: bool = True
    semantics: bool = False
    """Also check what the compiled program's outputs alias (`check_aliasing`), with results
    dropped between calls (recycling), each output at a tolerance of its own magnitude."""
    namespace: dict[str, Any] = field(init=False)
    expected: list[Tensor] = field(init=False)
    reference: list[Tensor] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.namespace = load_source(self.source)

    @property
    def program(self) -> Callable[..., Any]:
        return self.namespace["program"]

    def fresh_inputs(self) -> tuple[Tensor, ...]:
        return tuple(self.namespace["make_inputs"]())

    def run(self) -> Outcome:
        passed: list[str] = []
        try:
            self.run_eager()
            passed.append("eager")
            imported = self.run_import()
            if imported is None:
                return Outcome("skip", "export", "torch.export rejects the program")
            passed.append("import")
            passed += self.run_passes(imported)
            for device in self.devices:
                self.run_compiled(device)
                passed.append(device)
        except StageFailure as failure:
            return Outcome("fail", failure.stage, failure.message, passed)
        return Outcome("pass", stages=passed)

    def check(self, stage: str, got: Sequence[Tensor]) -> None:
        scale: float | list[float] = float(self.namespace.get("SCALE", 1.0))
        if self.semantics:
            scale = [magnitude(e) for e in self.expected]
        problem = compare_outputs(got, self.expected, self.reference, scale)
        if problem is not None:
            raise StageFailure(stage, problem)

    def run_eager(self) -> None:
        try:
            self.expected = flat_tensors(self.program(*self.fresh_inputs()))
        except Exception as e:
            raise StageFailure("eager", _one_line(e)) from e
        if self.namespace.get("TOLERANCE") == RMSE_TOLERANCE:
            self.reference = self.run_f64()

    def run_f64(self) -> list[Tensor] | None:
        inputs = [t.double() if t.dtype == torch.float32 else t for t in self.fresh_inputs()]
        try:
            with warnings.catch_warnings(), Float64Casts():
                warnings.simplefilter("ignore")  # f64 data with f32 weights: said once, here
                out = flat_tensors(self.program(*inputs))
        except Exception:
            return None
        return out if len(out) == len(self.expected) else None

    def run_import(self) -> Any:
        from xfuse.frontend import UnsupportedProgram, import_module

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                imported = import_module(self.program, self.fresh_inputs())
        except UnsupportedProgram as e:
            if str(e).startswith("torch.export failed"):
                return None
            raise StageFailure("import", _one_line(e)) from e
        except Exception as e:
            raise StageFailure("import", _one_line(e) + _where(e)) from e
        self.interpret("import", imported.module, imported)
        return imported

    def interpret(self, stage: str, module: Any, imported: Any) -> None:
        from xfuse.interpreters.graph import interpret

        try:
            got = interpret(module, imported.arguments(*self.fresh_inputs()))
        except Exception as e:
            raise StageFailure(stage, _one_line(e) + _where(e)) from e
        self.check(stage, got)

    def run_passes(self, imported: Any) -> list[str]:
        from xfuse.pipeline import Pipeline, parse_passes

        stages: list[str] = []
        for module_pass in parse_passes(self.pipeline):
            stage = f"after {module_pass.name}"
            try:
                Pipeline((module_pass,)).apply(imported.module)
            except Exception as e:
                raise StageFailure(stage, _one_line(e) + _where(e)) from e
            self.interpret(stage, imported.module, imported)
            stages.append(module_pass.name)
        if self.loop_interpreter and self.small() and self.run_loops(imported):
            stages.append("loops")
        return stages

    def small(self) -> bool:
        return sum(t.numel() for t in self.expected) <= 512 and all(
            t.numel() <= 512 for t in self.fresh_inputs()
        )

    def run_loops(self, imported: Any) -> bool:
        """Lowered loops through the loop interpreter; False when some group cannot be
        lowered (the runtime then runs it eagerly, which the CPU stage checks)."""
        from xfuse.errors import CodegenError
        from xfuse.interpreters.loops import run_lowered
        from xfuse.runtime.compiler import lower_to_loops

        module = imported.module.clone()
        try:
            lower_to_loops(module)
        except CodegenError:
            return False  # a group one kernel cannot express: the runtime runs it eagerly
        except Exception as e:
            raise StageFailure("loops", _one_line(e) + _where(e)) from e
        try:
            got = run_lowered(module, imported.arguments(*self.fresh_inputs()))
        except Exception as e:
            raise StageFailure("loops", _one_line(e) + _where(e)) from e
        self.check("loops", got)
        return True

    def run_compiled(self, device: str) -> None:
        import xfuse

        def on_device() -> tuple[Tensor, ...]:
            return tuple(t.to(device) for t in self.fresh_inputs())

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compiled = xfuse.compile(
                    self.program, on_device(), device=device, pipeline=self.pipeline
                )
                first = flat_tensors(compiled(*on_device()))
                self.check(device, first)
                second = flat_tensors(compiled(*on_device()))
        except StageFailure:
            raise
        except Exception as e:
            raise StageFailure(device, _one_line(e) + _where(e)) from e
        self.check(f"{device} (second call)", second)
        if self.semantics:
            del first, second  # dropped: the next calls recycle their memory
            self.check_aliasing(device, compiled, on_device)

    def check_aliasing(
        self, device: str, compiled: Any, on_device: Callable[[], tuple[Tensor, ...]]
    ) -> None:
        """Write into each output in turn (a fresh call each time, results dropped after): the
        inputs and the other outputs must change where eager's do; then a call after all the
        writes still matches eager (no constant or recycled buffer was changed by them)."""
        stage = f"{device} (aliasing)"
        n_inputs = len(self.fresh_inputs())
        for i in range(len(self.expected)):
            want = write_effects(self.program, self.fresh_inputs, i)
            try:
                got = write_effects(compiled, on_device, i)
            except Exception as e:
                raise StageFailure(stage, _one_line(e) + _where(e)) from e
            problem = compare_effects(i, want, got, n_inputs)
            if problem is not None:
                raise StageFailure(stage, problem)
        self.check(f"{device} (after writes)", flat_tensors(compiled(*on_device())))


def magnitude(t: Tensor) -> float:
    """The largest magnitude of a floating-point output (its own tolerance scale), else 0."""
    if not t.is_floating_point() or t.numel() == 0:
        return 0.0
    finite = t.detach().cpu().double()
    finite = finite[finite.isfinite()]
    return float(finite.abs().max()) if finite.numel() else 0.0


Effects = list[Tensor] | str
"""Where writing into an output changed the call's inputs and outputs (a bool mask each), or
the error the write raised (e.g. into an expanded view)."""


def write_effects(run: Callable[..., Any], make_inputs: Callable[[], Any], i: int) -> Effects:
    """Call `run` on fresh inputs, write into output `i` (every element gets a new value), and
    say which elements of the inputs and outputs changed."""
    inputs = tuple(make_inputs())
    outputs = flat_tensors(run(*inputs))
    watched = [*inputs, *outputs]
    before = [t.detach().clone() for t in watched]
    target = outputs[i]
    try:
        target.copy_(_every_element_changed(target))
    except RuntimeError as e:
        return f"the write raises {type(e).__name__}"
    return [_changed(t, b) for t, b in zip(watched, before, strict=True)]


def _every_element_changed(t: Tensor) -> Tensor:
    if t.dtype == torch.bool:
        return t.logical_not()
    return torch.where(t == 7, torch.full_like(t, 9), torch.full_like(t, 7))


def _changed(now: Tensor, before: Tensor) -> Tensor:
    same = now.cpu() == before.cpu()
    if now.is_floating_point():
        same |= now.cpu().isnan() & before.cpu().isnan()
    return ~same


def compare_effects(i: int, want: Effects, got: Effects, n_inputs: int) -> str | None:
    """None when writing into output `i` did to xfuse's tensors what it did to eager's (the
    first `n_inputs` masks are the inputs', the rest the outputs')."""
    if isinstance(want, str) or isinstance(got, str):
        if isinstance(want, str) and isinstance(got, str):
            return None
        return f"writing into output {i}: eager {_effect(want)}, xfuse {_effect(got)}"
    for j, (w, g) in enumerate(zip(want, got, strict=True)):
        if not torch.equal(w, g):
            what = f"input {j}" if j < n_inputs else f"output {j - n_inputs}"
            return (
                f"writing into output {i} changes {what} at {int(g.sum())} elements, "
                f"eager at {int(w.sum())}"
            )
    return None


def _effect(effects: Effects) -> str:
    return effects if isinstance(effects, str) else "allows it"


class Float64Casts(torch.overrides.TorchFunctionMode):
    """For the f64 reference run: `.to(<floating dtype>)` casts to f64 instead, so that a
    program's own casts to f16/bf16/f32 do not make the reference as coarse as eager."""

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.to:
            args = tuple(_f64_if_float(a) for a in args)
            if "dtype" in kwargs:
                kwargs["dtype"] = _f64_if_float(kwargs["dtype"])
        return func(*args, **kwargs)


def _f64_if_float(x: Any) -> Any:
    return torch.float64 if isinstance(x, torch.dtype) and x.is_floating_point else x


def available_devices(requested: str | None = None) -> list[str]:
    """cpu, plus cuda where torch sees a GPU and pycuda imports (or just `requested`)."""
    if requested is not None:
        return [requested]
    devices = ["cpu"]
    if torch.cuda.is_available():
        try:
            import pycuda  # noqa: F401  # pyright: ignore[reportMissingImports]

            devices.append("cuda")
        except ImportError:
            pass
    return devices


def check_source(
    source: str,
    devices: Sequence[str] | None = None,
    pipeline: str = DEFAULT_PIPELINE,
    loop_interpreter: bool = True,
    semantics: bool = False,
) -> Outcome:
    """Run a program's source through eager and xfuse; never raises for a failure. With
    `semantics`, also what outputs alias (`Differential.check_aliasing`)."""
    devices = available_devices() if devices is None else devices
    try:
        return Differential(source, devices, pipeline, loop_interpreter, semantics).run()
    except Exception as e:  # the harness itself: report it, do not stop the fuzzer
        return Outcome("fail", "harness", _one_line(e) + _where(e))


# ---------------------------------------------------------------------------------------------
# Reproducers
# ---------------------------------------------------------------------------------------------


def reproducer(source: str, outcome: Outcome, seed: int, index: int) -> str:
    """A standalone script: the program, then a main that runs it eagerly and through xfuse
    and exits non-zero while they differ."""
    header = (
        f'"""xfuse-fuzz reproducer: seed {seed}, program {index}.\n\n'
        f"Failed at: {outcome.stage}\n{_wrap(outcome.message)}\n\n"
        f"Run `python {reproducer_name(seed, index)}` (exits non-zero while it fails);\n"
        f"`xfuse-fuzz --bisect {reproducer_name(seed, index)}` finds the pass and shrinks it.\n"
        '"""\n'
    )
    main = (
        "\n\n"
        'if __name__ == "__main__":\n'
        "    import sys\n\n"
        "    from xfuse.testing.fuzz import check_file\n\n"
        "    sys.exit(check_file(__file__))\n"
    )
    return header + source + main


def reproducer_name(seed: int, index: int) -> str:
    return f"fail_{seed}_{index}.py"


def _wrap(text: str, width: int = 96) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text.replace('"""', "'''"), width)) or "(no message)"


def program_part(text: str) -> str:
    """The program of a reproducer (or of a plain program file): the text before its main."""
    marker = '\n\nif __name__ == "__main__":'
    body = text.split(marker, 1)[0]
    if body.startswith('"""'):
        end = body.find('"""', 3)
        body = body[end + 3 :].lstrip("\n")
    return body.rstrip("\n") + "\n"


def check_file(path: str, devices: Sequence[str] | None = None) -> int:
    """Run a reproducer's program through xfuse; print the outcome; 0 when it passes."""
    with open(path) as f:
        source = program_part(f.read())
    outcome = check_source(source, devices)
    print(outcome)
    return 0 if outcome.status != "fail" else 1
