"""
`torch.compile(model, backend="xfuse")`: the backend, which compiles each graph dynamo hands
over with `xfuse.compile` (its registration under the name is in `xfuse/__init__.py`).
"""

from __future__ import annotations

import copy
import functools
import inspect
import operator
import threading
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from xfuse.aot import (
    explicit_devices,
    graph_device,
    is_symbolic,
    real_input,
    size_hint,
    views_as_reshapes,
)
from xfuse.api import compile
from xfuse.errors import (
    AutogradUnsupportedError,
    DynamicShapesWarning,
    EagerArgumentError,
    EagerFallbackError,
    FallbackWarning,
    InvalidArgumentError,
    SymbolicSizeError,
    UnsupportedInputError,
    UnsupportedProgram,
)
from xfuse.frontend.attention_masks import without_constant_masks
from xfuse.frontend.builder import finite_bound, fixed_remainder, guarded_range, rounded_division
from xfuse.frontend.decompositions import decomposed_calls
from xfuse.frontend.pytrees import picker
from xfuse.runtime.executor import CompiledProgram
from xfuse.runtime.fallback import FallbackMode, fallback_mode, reason_of
from xfuse.training import needs_aot, training_backend

if TYPE_CHECKING:
    from xfuse.aot import PartCompiler
    from xfuse.runtime.dynamic import DynamicProgram

Tensor = torch.Tensor

# ---------------------------------------------------------------------------------------------
# torch.compile(backend="xfuse")
# ---------------------------------------------------------------------------------------------


BACKEND_PROGRAMS: weakref.WeakValueDictionary[Hashable, Callable[..., Any]] = (
    weakref.WeakValueDictionary()
)
"""What `dynamo_backend` returned, by graph, signature and mode (`graph_key`), while dynamo keeps
it: dynamo compiles a graph again per grad mode (`no_grad`, `inference_mode`), xfuse once."""


def dynamo_backend(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    options: dict[str, Any] | None = None,
    mode: str | None = None,
) -> Callable[..., Any]:
    """The `torch.compile` backend: the FX graph through `xfuse.compile`, for the device of its
    inputs; on any failure a warning and `gm.forward` (eager), or with
    `options={"fallback": "error"}` (or `XFUSE_STRICT=1`) an `EagerFallbackError`. Calls that
    need autograd run eagerly, with one warning that says so (strict: an `EagerFallbackError`
    at the call). A graph with dynamic shapes (SymInt inputs or sizes) on the CPU or a CUDA GPU
    is compiled once for its size symbols (`_dynamic`); where that path refuses it, per
    concrete shape at call time (`_per_shape`), with a `DynamicShapesWarning` that says why. A graph dynamo hands
    over again (same code, same attribute tensors, same input signature) gets what the first
    time got (`BACKEND_PROGRAMS`). torch.compile's `mode` is one of `BACKEND_MODES`; the
    option `cuda_graphs` (a bool) says the same as `mode` of CUDA graphs, beside `fallback`."""
    fallback = backend_mode(options)
    graphs = cuda_graphs_of(mode) and backend_graphs(options)
    key = (graph_key(gm, example_inputs), fallback, graphs)
    found = BACKEND_PROGRAMS.get(key)
    if found is not None:
        return found
    result = _backend(gm, example_inputs, fallback, graphs)
    if getattr(result, "compiled", None) is not None or hasattr(result, "programs"):
        BACKEND_PROGRAMS[key] = result
    return result


BACKEND_MODES: dict[str, bool] = {
    "default": True,
    "reduce-overhead": True,
    "max-autotune": True,
    "max-autotune-no-cudagraphs": False,
}
"""torch.compile's modes, and whether CUDA graphs are on under each. xfuse's runtime captures a
program in CUDA graphs where a replay pays (`xfuse.runtime.cuda_graphs`) and measures a
library call against its own kernel where both can run a group (`xfuse.choices`) in every
mode; `max-autotune-no-cudagraphs` turns the graphs off, as `XFUSE_CUDA_GRAPHS=0` does."""


def cuda_graphs_of(mode: str | None) -> bool:
    """Whether torch.compile's `mode` lets xfuse capture CUDA graphs; a one-line
    `InvalidArgumentError` for a mode torch.compile does not have."""
    if mode is None:
        return True
    if mode not in BACKEND_MODES:
        raise InvalidArgumentError(
            f"unknown torch.compile mode for xfuse: {mode!r} (it takes: {', '.join(BACKEND_MODES)})"
        )
    return BACKEND_MODES[mode]


BACKEND_OPTIONS = ("fallback", "cuda_graphs")
"""The `torch.compile(..., options=...)` keys the backend takes."""


def backend_mode(options: Any) -> FallbackMode:
    """The fallback mode `torch.compile`'s `options` ask for; a one-line `InvalidArgumentError`
    for options that are no dict or name keys the backend does not take."""
    if options is None:
        return fallback_mode()
    if not isinstance(options, dict):
        raise InvalidArgumentError(
            f"torch.compile options for xfuse must be a dict, got a {type(options).__name__}"
        )
    unknown = sorted(str(k) for k in options if k not in BACKEND_OPTIONS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown torch.compile options for xfuse: {', '.join(unknown)} "
            f"(it takes: {', '.join(BACKEND_OPTIONS)})"
        )
    return fallback_mode(options.get("fallback"))


def backend_graphs(options: Any) -> bool:
    """Whether `torch.compile`'s `options` (checked by `backend_mode`) leave CUDA graphs on:
    `cuda_graphs` is True (the default) or False; another value is one line."""
    graphs = True if options is None else options.get("cuda_graphs", True)
    if not isinstance(graphs, bool):
        raise InvalidArgumentError(
            f"the torch.compile option cuda_graphs for xfuse is True or False, got {graphs!r}"
        )
    return graphs


def graph_key(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Hashable:
    """A graph's identity for `BACKEND_PROGRAMS`: its code, the tensors (and submodules) its
    `get_attr` nodes read, by identity (a cached program holds its graph, so they stay alive
    and their ids stay theirs), and each input's signature (SymInts and dynamic sizes as
    such)."""
    attrs: list[tuple[str, int]] = []
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            attrs.append((str(node.target), id(_attribute(gm, str(node.target)))))
    return gm.code, tuple(attrs), tuple(_input_key(t) for t in example_inputs)


def _attribute(gm: torch.nn.Module, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _input_key(value: Any) -> Hashable:
    if isinstance(value, Tensor):
        if is_symbolic(value):
            return ("dynamic", value.dim(), value.dtype, value.device)
        return (tuple(value.shape), value.stride(), value.dtype, value.device)
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return ("symbolic", type(value))
    return (type(value), repr(value))


def _backend(
    gm: torch.fx.GraphModule, example_inputs: list[Any], mode: FallbackMode, cuda_graphs: bool
) -> Callable[..., Any]:
    gm = without_constant_masks(explicit_devices(gm))
    if needs_aot(example_inputs):
        return training_backend(
            gm, example_inputs, mode, _graph_runs_eagerly, training_part, cuda_graphs
        )
    if any(is_symbolic(t) for t in example_inputs):
        return _dynamic(gm, example_inputs, mode, cuda_graphs)
    try:
        compiled = compile(
            gm,
            tuple(real_input(t) for t in example_inputs),
            str(graph_device(gm, example_inputs)),
            fallback=mode,
            static_inputs=static_positions(gm),
            cuda_graphs=cuda_graphs,
        )
    except Exception as e:
        if not _eager_refuses(e):
            _graph_runs_eagerly(e, mode)
        return gm.forward

    warned: set[str] = set()
    fast = FastPath(compiled, example_inputs)

    def run(*args: Any) -> Any:
        if fast.takes(args):
            return fast.executable.run(args, (), compiled.static_inputs)
        try:
            return compiled(*args)
        except AutogradUnsupportedError as e:  # raised before anything ran
            _call_runs_eagerly(e, mode, warned)
            return gm.forward(*args)

    run.compiled = compiled  # type: ignore[attr-defined]
    return run


def static_positions(gm: torch.fx.GraphModule) -> tuple[int, ...]:
    """The inputs dynamo marks static (`_dynamo_static_input_type` in a placeholder's
    `tensor_dict`, as AOTAutograd's `static_input_indices` reads it): the parameters and
    buffers it lifts into graph inputs, which stay where they are between calls."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return tuple(
        i
        for i, node in enumerate(placeholders)
        if node.meta.get("tensor_dict", {}).get("_dynamo_static_input_type")
    )


class FastPath:
    """The call of a compiled graph with no per-tensor checks of its static inputs: dynamo's
    guards hold every input to the sizes, strides, dtypes, devices and `requires_grad` it
    traced, and grad mode to the traced one, so a call of the first specialisation needs only
    its other inputs' layouts checked and its static inputs found to be the same tensors as
    at the last call (a parameter replaced by another tensor takes the checked path, which
    compiles anew where its layout changed). Per call, the host then spends a few
    microseconds where it checked every parameter's layout."""

    def __init__(self, compiled: CompiledProgram, example_inputs: Sequence[Any]) -> None:
        self.executable = compiled.default
        static = set(compiled.static_inputs)
        self.count = len(example_inputs)
        self.grad = compiled.default_grad
        self.dynamic = [i for i in range(self.count) if i not in static]
        self.layouts = [_layout(example_inputs[i]) for i in self.dynamic]
        self.static = sorted(static)
        self.seen: list[Any] | None = None
        """The static inputs of the last call that took the checked path."""

    def takes(self, args: tuple[Any, ...]) -> bool:
        if len(args) != self.count or torch.is_grad_enabled() != self.grad:
            return False
        for i, layout in zip(self.dynamic, self.layouts, strict=True):
            if _layout(args[i]) != layout:
                return False
        statics = [args[i] for i in self.static]
        if self.seen is not None and all(map(operator.is_, statics, self.seen)):
            return True
        self.seen = statics  # the checked path runs this call; the next may take this one
        return False


def _layout(value: Any) -> Hashable:
    """A tensor's sizes, strides, dtype, device and `requires_grad`; None for anything else
    (never equal to a tensor's: the checked path decides)."""
    if not isinstance(value, Tensor) or value.layout != torch.strided:
        return None
    return (tuple(value.shape), value.stride(), value.dtype, value.device, value.requires_grad)


def _eager_refuses(error: Exception) -> bool:
    """Arguments eager refuses (`EagerArgumentError`): the graph is handed back to run as
    eager does, which raises eager's own error at the call (dynamo would wrap an error raised
    here in its own); no warning, and no strict-mode error, since nothing would compute."""
    return isinstance(error, EagerArgumentError)


def _graph_runs_eagerly(error: Exception, mode: FallbackMode) -> None:
    """A graph xfuse could not compile: raise in strict mode, else warn (it runs eagerly)."""
    if isinstance(error, EagerFallbackError):
        raise error
    if mode == "error":
        raise EagerFallbackError(
            f"xfuse: torch.compile backend would run this graph eagerly "
            f"(fallback='error'): {reason_of(error)}"
        ) from error
    _eager_warning(reason_of(error))


def _call_runs_eagerly(
    error: AutogradUnsupportedError, mode: FallbackMode, warned: set[str]
) -> None:
    """A call the compiled graph refuses (it needs autograd): in strict mode an
    `EagerFallbackError`, else one warning per graph (the call runs eagerly)."""
    if mode == "error":
        raise EagerFallbackError(
            f"xfuse: torch.compile backend would run this call eagerly (fallback='error'): {error}"
        ) from error
    if "grad" not in warned:
        warned.add("grad")
        _eager_warning(str(error), stacklevel=4)


def _eager_warning(reason: str, stacklevel: int = 3) -> None:
    warnings.warn(
        f"xfuse: torch.compile backend runs this graph eagerly: {reason}",
        FallbackWarning,
        stacklevel=stacklevel,
    )


# ---------------------------------------------------------------------------------------------
# Dynamic shapes: one symbolic program, or one program per shape
# ---------------------------------------------------------------------------------------------

COMPILES: Counter[str] = Counter()
"""How many programs the backend compiled for graphs with dynamic shapes: "symbolic" (one per
graph, serving every size in range) and "per-shape" (one per concrete call signature)."""

CALL_REFUSALS = (SymbolicSizeError, UnsupportedInputError, AutogradUnsupportedError)
"""What a symbolic program raises, before anything ran, for a call it does not take (a size
out of range, a tensor off the program's device, a call that needs autograd): the per-shape
path runs it."""


Held = dict[Any, tuple[int, int | None]]
"""Each size symbol -> where a call holds it: (input position, dim) of a tensor's dim that is
that symbol, or (position, None) of a SymInt input that is it."""


def held_symbols(values: Sequence[Any]) -> Held:
    """Where the size symbols of a graph's example inputs (fake tensors, SymInts) are held:
    the first tensor dim that is each symbol, else the first SymInt input that is it."""
    held: Held = {}
    for i, value in enumerate(values):
        for d, size in enumerate(value.shape if isinstance(value, Tensor) else ()):
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                held.setdefault(size.node.expr, (i, d))
    for i, value in enumerate(values):
        if isinstance(value, torch.SymInt) and value.node.expr.is_Symbol:
            held.setdefault(value.node.expr, (i, None))
    return held


def symbol_values(held: Held, args: Sequence[Any]) -> dict[Any, Any]:
    """Each symbol of `held` -> its value in a call of `args`."""
    return {s: args[i] if d is None else args[i].shape[d] for s, (i, d) in held.items()}


@dataclass(frozen=True)
class SymbolicInputs:
    """How a graph's inputs map to a program with size symbols: its tensor inputs (positions
    and placeholder names), where each SymInt input is read from (a tensor input's dim: dynamo
    lifts the sizes it made symbolic into inputs of their own, equal to those dims at every
    call) and torch.export's `dynamic_shapes` for the tensors (one `Dim` per symbol, with the
    range dynamo's ShapeEnv gives it)."""

    tensors: tuple[int, ...]
    names: tuple[str, ...]
    sizes: dict[int, tuple[int, int]]
    """SymInt input position -> (index into `tensors`, dim)."""
    dynamic_shapes: dict[str, dict[int, Any] | None]
    derived: dict[int, Any] = field(default_factory=dict)
    """SymInt input position -> its sympy expression, of symbols `holders` finds (an
    AOTAutograd backward takes sizes such as `s0*s1` the forward saved), or a number where
    dynamo specialised it."""
    holders: dict[Any, tuple[int, int]] = field(default_factory=dict)
    """Each size symbol -> (index into `tensors`, dim) of a program input's dim that is that
    symbol."""
    plans: dict[int, tuple[tuple[Any, ...] | None, ...]] = field(default_factory=dict)
    """Index into `tensors` -> for each of the input's dims, None, or the factors (size
    symbols, an integer) of a size that is their product (an AOTAutograd backward takes
    `[s0*s1, 64]` views the forward saved): the program takes the input with such a dim split
    into one dim per factor (`arguments`), and reshapes it back."""
    held: Held = field(default_factory=dict)
    """Each size symbol -> where a call of the graph holds it (`held_symbols`)."""
    pinned: dict[int, int] = field(default_factory=dict)
    """SymInt input position -> the value the program is specialised on: a dynamic Python
    int that no tensor dim holds (a model's `logits_to_keep`), which every call must pass."""
    relations: tuple[tuple[Any, Any], ...] = ()
    """The equalities of sizes (sympy sides, of symbols `holders` finds) that dynamo's trace
    guarded on (`size_relations`): `function` checks each with `torch._check`, so that
    torch.export's trace records it and the importer makes it a relation of the program's
    size table, which the program checks at each call."""
    shared: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = ()
    """Each program input's dim that is a size symbol some other dim holds first (`holders`),
    with that dim: (index into `tensors`, dim) pairs. `function` checks them equal, so that
    torch.export's trace makes them one symbol with `Dim.AUTO` too, which gives each dim a
    symbol of its own (`automatic_dims`)."""
    computed: dict[Any, Any] = field(default_factory=dict)
    """Each size symbol that stands for an expression of held ones (`computed_factors`) -> that
    expression: a factor of a dim that `plans` splits, computed at each call."""
    carried: tuple[int, ...] = ()
    """Indices into `tensors` of SymInt inputs that no tensor dim holds (a length the backward
    takes as an int: `unheld_ints`), each taken by the program as an empty tensor whose first
    dim is the int (`size_carrier`), so that its symbol is a size of the program's inputs."""
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    """The device of the graph's tensor inputs, where size carriers are made."""

    @functools.cached_property
    def _pick_tensors(self) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
        """A call's tensor inputs, as a tuple (one C call)."""
        return picker(self.tensors)

    @functools.cached_property
    def _planned(self) -> tuple[tuple[Any, Any], ...]:
        """The computed symbols (and their expressions) that some dim of `plans` splits off:
        the only ones a call must evaluate."""
        named = {f for plan in self.plans.values() for entry in plan if entry for f in entry}
        return tuple((s, e) for s, e in self.computed.items() if s in named)

    def arguments(self, args: Sequence[Any]) -> list[Any]:
        """The program's inputs for a call of the graph's `args`: its tensors, each dim that
        `plans` splits viewed as its factors' sizes; an `UnsupportedInputError` (before anything
        ran) where a pinned int has another value or a tensor's strides do not allow that
        view."""
        for i, value in self.pinned.items():
            if args[i] != value:
                raise UnsupportedInputError(
                    f"input {i} is the Python int {args[i]}, where the program was compiled "
                    f"for {value}"
                )
        found = list(self._pick_tensors(args))
        for k in self.carried:
            found[k] = size_carrier(found[k], self.device)
        if not self.plans:
            return found
        values = symbol_values(self.held, args)
        for symbol, expr in self._planned:
            values[symbol] = size_value(expr, values)
        for k, plan in self.plans.items():
            t = found[k]
            shape: list[int] = []
            for d, entry in enumerate(plan):
                if entry is None:
                    shape.append(t.shape[d])
                else:
                    shape += [f if isinstance(f, int) else values[f] for f in entry]
            try:
                found[k] = t.view(shape)
            except RuntimeError as e:
                raise UnsupportedInputError(
                    f"input {self.names[k]} of shape {tuple(t.shape)} and strides {t.stride()} "
                    f"cannot be viewed as {tuple(shape)}, the sizes the program takes"
                ) from e
        return found

    def function(self, gm: torch.fx.GraphModule, count: int) -> Callable[..., Any]:
        """`gm` as a function of the tensor inputs alone (named as its placeholders), which
        computes each SymInt input from the dims that hold its symbols."""
        tensors, sizes, derived, holders = self.tensors, self.sizes, self.derived, self.holders
        plans, relations, shared = self.plans, self.relations, self.shared

        def fn(*ts: Tensor) -> Any:
            full: list[Any] = [None] * count
            for i, t in zip(tensors, ts, strict=True):
                full[i] = t
            for k, plan in plans.items():
                full[tensors[k]] = joined(ts[k], plan)
            for i, (j, d) in sizes.items():
                full[i] = ts[j].size(d)
            for (k, a), (j, b) in shared:
                torch._check(ts[k].size(a) == ts[j].size(b))
            if derived or relations:
                values = {s: ts[j].size(d) for s, (j, d) in holders.items()}
                for i, expr in derived.items():
                    full[i] = size_value(expr, values)
                for lhs, rhs in relations:
                    left, right = size_value(lhs, values), size_value(rhs, values)
                    torch._check(left == right, functools.partial(_unequal, lhs, rhs))
            return gm(*full)

        positional = inspect.Parameter.POSITIONAL_ONLY
        fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # pyright: ignore[reportFunctionMemberAccess]
            [inspect.Parameter(name, positional) for name in self.names]
        )
        return fn


def symbolic_inputs(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> SymbolicInputs:
    """The inputs of a graph dynamo traced with symbolic sizes, as `SymbolicInputs`; an
    `UnsupportedProgram` (one line) where a symbolic program cannot take them: a SymFloat or
    SymBool input, a SymInt that is an expression of symbols no input holds, or a tensor's
    size that is an expression of symbols no input holds or that `size_value` does not
    compute. A size that is a product of held symbols is split into them, `a*s + c` of one is
    torch.export's derived `Dim` (`_linear`), and any other expression of them (or factor of
    a product) a symbol of its own, checked against it (`computed_factors`). A SymInt input
    that is a symbol no tensor dim holds (a dynamic Python int) is solved from a dim that
    sums it with held symbols (that dim's size becomes a symbol of its own), carried by an
    empty tensor input where it is a length, or pinned to its example value
    (`unheld_ints`)."""
    import sympy

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise UnsupportedProgram(
            f"the graph has {len(placeholders)} placeholders for {len(example_inputs)} inputs"
        )
    fakes = [_symbolic_value(n, x) for n, x in zip(placeholders, example_inputs, strict=True)]
    pinned, values, sums, carried = unheld_ints(fakes)
    tensors = tuple(i for i, v in enumerate(fakes) if isinstance(v, Tensor) or i in carried)
    names = tuple(f"in{k}_{placeholders[i].name}" for k, i in enumerate(tensors))
    held = {s: h for s, h in held_symbols(fakes).items() if s not in values}
    dims = {s: _dim_of(fakes[i] if d is None else fakes[i].shape[d]) for s, (i, d) in held.items()}
    for symbol, (i, d) in sums.items():
        held[symbol] = (i, d)
        dims[symbol] = _dim_of(fakes[i].shape[d], str(symbol))
    computed = computed_factors(fakes, held.keys(), values)
    env = _shape_env(fakes)
    for expr, symbol in list(computed.items()):
        low, high = _size_range(expr, env)
        if high is not None and low >= high:  # one size wherever the guards hold: static
            computed[expr] = sympy.Integer(high)
        else:
            dims[symbol] = _dim_of_expr(expr, env, str(symbol))
    known = held.keys() | set(computed.values())
    shapes: dict[str, dict[int, Any] | None] = dict.fromkeys(names)
    plans: dict[int, tuple[tuple[Any, ...] | None, ...]] = {}
    holders: dict[Any, tuple[int, int]] = {}
    shared: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for k, i in enumerate(tensors):
        entries: list[tuple[Any, ...] | None] = []
        shape = (fakes[i], 0) if i in carried else fakes[i].shape
        sizes_of = [_pinned_size(size, values) for size in shape]
        sizes_of = [e.xreplace(computed) for e in sizes_of]
        linear: dict[int, tuple[int, Any, int]] = {}
        for d, expr in enumerate(sizes_of):
            if expr.is_number or expr.is_Symbol:  # a number: dynamo specialised
                entries.append(None)
            elif (line := _linear(expr, known)) is not None:  # `s0 + 1`: a derived Dim
                linear[d] = line
                entries.append(None)
            else:
                entries.append(_factors(expr, known, placeholders[i].name, d))
        if any(e is not None for e in entries):
            plans[k] = tuple(entries)
        spec: dict[int, Any] = {}
        new = 0
        for d, expr in enumerate(sizes_of):
            entry = entries[d]
            if d in linear:
                scale, symbol, offset = linear[d]
                spec[new] = dims[symbol] * scale + offset if scale != 1 else dims[symbol] + offset
                new += 1
                continue
            parts = (expr,)
            for part in parts if entry is None else entry:
                if not isinstance(part, int) and part.is_Symbol:
                    spec[new] = dims[part]
                    first = holders.setdefault(part, (k, new))
                    if first != (k, new):
                        shared.append(((k, new), first))
                new += 1
        shapes[names[k]] = spec or None
    sizes: dict[int, tuple[int, int]] = {}
    derived: dict[int, Any] = {}
    for i, value in enumerate(fakes):
        if isinstance(value, Tensor):
            continue
        if isinstance(value, torch.SymFloat | torch.SymBool):
            raise UnsupportedProgram(
                f"input {placeholders[i].name} is a {type(value).__name__}, which a symbolic "
                "program does not take"
            )
        if i in pinned:
            derived[i] = values[value.node.expr]
            continue
        if isinstance(value, torch.SymInt):
            expr = value.node.expr.xreplace(values)
            found = holders.get(expr)
            if found is not None:
                sizes[i] = found
                continue
            if not expr.free_symbols <= holders.keys():
                raise UnsupportedProgram(
                    f"input {placeholders[i].name} is the size {expr}, which no tensor "
                    "input's dims hold (a dynamic Python int)"
                )
            check_computable(expr)
            derived[i] = expr
        else:
            raise UnsupportedProgram(
                f"input {placeholders[i].name} is a {type(value).__name__}, not a tensor or size"
            )
    relations = size_relations(fakes, holders.keys(), values)
    relations += tuple((symbol, expr) for expr, symbol in computed.items())
    return SymbolicInputs(
        tensors,
        names,
        sizes,
        shapes,
        derived,
        holders,
        plans,
        held,
        pinned,
        relations,
        tuple(shared),
        {symbol: expr for expr, symbol in computed.items() if symbol.is_Symbol},
        tuple(k for k, i in enumerate(tensors) if i in carried),
        next((v.device for v in fakes if isinstance(v, Tensor)), torch.device("cpu")),
    )


def size_relations(
    fakes: Sequence[Any], symbols: Iterable[Any], values: dict[Any, Any] | None = None
) -> tuple[tuple[Any, Any], ...]:
    """The equalities of sizes of `symbols` among the guards and runtime asserts of the shape
    environment of a graph's fake inputs `fakes`, as (lhs, rhs) sympy pairs: of polynomials
    (`Eq(s3*s88, s38*s97)`: cross-entropy's check that its input has as many rows as its
    target), and remainders (`residue_of`: transformers' TF-style padding branches on
    `h // 16 % 2 == 0`). Dynamo checks its guards before each call of the graph's code (and
    traces anew where one fails), so these hold at every call the program gets."""
    import sympy

    env = _shape_env(fakes)
    if env is None:
        return ()
    known = set(symbols)
    asserts = [r.expr for rs in env.deferred_runtime_asserts.values() for r in rs]
    found: list[tuple[Any, Any]] = []
    for expr in [g.expr for g in env.guards] + asserts:
        expr = expr.xreplace(values or {})
        if not expr.free_symbols or not expr.free_symbols <= known:
            continue
        pair: tuple[Any, Any] | None = None
        if isinstance(expr, sympy.Eq) and _is_polynomial(expr.lhs) and _is_polynomial(expr.rhs):
            pair = (expr.lhs, expr.rhs)
        else:
            pair = residue_of(expr)
        if pair is not None and pair not in found:
            found.append(pair)
    return tuple(found)


def residue_of(expr: Any) -> tuple[Any, Any] | None:
    """A guard that fixes a remainder of a size by a number (`fixed_remainder`) as (the
    remainder, its value), its dividend sums, products and floor divisions of symbols and
    integers (`size_value` computes it); None for another guard."""
    import sympy

    fixed = fixed_remainder(expr)
    if fixed is None or not _is_polynomial(fixed[0].args[0], floor_divisions=True):
        return None
    mod, _, r = fixed
    return mod, sympy.Integer(r)


def _unequal(lhs: Any, rhs: Any) -> str:
    """The message of a relation of `size_relations` that a call breaks."""
    return f"expected the sizes {lhs} and {rhs} to be equal (a guard of dynamo's trace)"


def _shape_env(values: Sequence[Any]) -> Any:
    """The shape environment of the first symbolic size among `values` (tensors, SymInts), or
    None."""
    for value in values:
        if isinstance(value, torch.SymInt):
            return value.node.shape_env
        for size in value.shape if isinstance(value, Tensor) else ():
            if isinstance(size, torch.SymInt):
                return size.node.shape_env
    return None


def _is_polynomial(expr: Any, floor_divisions: bool = False) -> bool:
    """Whether a sympy size expression is sums, products and powers of symbols and integers
    (with `floor_divisions`, floor divisions of such too)."""
    from torch.utils._sympy.functions import FloorDiv

    if expr.is_Integer or expr.is_Symbol:
        return True
    parts: tuple[Any, ...] = ()
    if isinstance(expr, FloorDiv):
        if not floor_divisions:
            return False
        parts = expr.args
    elif expr.is_Pow:
        if not (expr.exp.is_Integer and int(expr.exp) >= 0):
            return False
        parts = (expr.base,)
    elif expr.is_Add or expr.is_Mul:
        parts = expr.args
    else:
        return False
    return all(_is_polynomial(a, floor_divisions) for a in parts)


Solved = dict[Any, tuple[int, int]]
"""Each size symbol `unheld_ints` made for a tensor input's dim whose size sums an unheld
symbol with held ones -> (input position, dim)."""


def unheld_ints(
    fakes: Sequence[Any],
) -> tuple[dict[int, int], dict[Any, Any], Solved, dict[int, Any]]:
    """The SymInt inputs that are a symbol no tensor dim holds, alone or as a factor of a
    product of symbols (`SymbolicInputs.plans`), and how a symbolic program does without them.
    Where a tensor dim's size is such a symbol (a length: `_is_length`) plus symbols tensor
    dims hold (an AOTAutograd backward of a concatenation takes the parts' lengths `s1` and
    `s2` as ints and the gradient's `s1 + s2`), the symbol is solved from that dim: a new
    symbol `sum_s2` stands for the dim's size, and `s2` becomes `sum_s2 - s1`. Any other
    length (a strided layer's input width, which the backward takes where only its output
    lengths are saved) is carried: the program takes it as a tensor input's dim
    (`size_carrier`). Any other int (a model's `logits_to_keep`, whose range starts below 2)
    is pinned to its example value. Returns the pinned inputs' positions -> their values,
    each unheld symbol -> what it becomes (a sympy integer, or an expression of the new
    symbols), each new symbol -> the (position, dim) that holds it, and the carried inputs'
    positions -> their symbols."""
    import sympy

    dims = {s for s, (_, d) in held_symbols(fakes).items() if d is not None}
    dims |= _product_factors(fakes)
    pinned: dict[int, int] = {}
    values: dict[Any, Any] = {}
    solved: Solved = {}
    carried: dict[int, Any] = {}
    for i, value in enumerate(fakes):
        if not isinstance(value, torch.SymInt):
            continue
        expr = value.node.expr
        if not expr.is_Symbol or expr in dims or expr in carried.values():
            continue
        if expr in values and not values[expr].is_Integer:
            continue  # solved from a dim already
        found = None if expr in values or not _is_length(value) else _summed_dim(expr, fakes, dims)
        if found is not None:
            symbol = sympy.Symbol(f"sum_{expr}", integer=True, positive=True)
            rest, solved[symbol] = found
            values[expr] = symbol - rest
            continue
        if expr not in values and _is_length(value):
            carried[i] = expr
            continue
        pinned[i] = size_hint(value)
        values[expr] = sympy.Integer(pinned[i])
    return pinned, values, solved, carried


@functools.lru_cache(maxsize=256)
def size_carrier(size: int, device: torch.device) -> Tensor:
    """An empty tensor on `device` whose first dim is `size` (`[size, 0]`, no memory): a
    symbolic program's input that carries an int no other input's dim holds."""
    return torch.empty((size, 0), dtype=torch.bool, device=device)


def computed_factors(
    fakes: Sequence[Any], held: Collection[Any], values: dict[Any, Any]
) -> dict[Any, Any]:
    """The factors of tensor input dims' sizes that are expressions of `held` symbols other
    than a symbol: a convolution's or pooling's output length `(s0 - 3)//2 + 1`, which an
    AOTAutograd backward takes as a saved activation's dim, or as a factor of a flattened
    one's (`4*((s0 - 3)//4 + 1)**2`). Each distinct expression -> a size symbol of its own,
    where every factor of the dim is held or such an expression (else the dim is left to
    `_factors`' refusal): the program takes the dim split into its factors (`plans`) and
    checks each such symbol equal to its expression at each call (a relation), so the
    symbol is the expression wherever the program runs (`symbolic_inputs` makes one that the
    trace's guards leave one size that size). Dims that are one symbol, `a*s + c`
    (`_linear`) or a product of held symbols need none."""
    import sympy

    found: dict[Any, Any] = {}
    for value in fakes:
        for size in value.shape if isinstance(value, Tensor) else ():
            expr = _pinned_size(size, values)
            if expr.is_number or expr.is_Symbol or _linear(expr, held) is not None:
                continue
            coefficient, factors = expr.as_coeff_mul()
            bases = [f.base if f.is_Pow and f.exp.is_Integer and f.exp >= 1 else f for f in factors]
            if not (coefficient.is_Integer and int(coefficient) >= 1):
                bases = [expr]
            new = [b for b in bases if not (b.is_Symbol and b in held)]
            if all(not b.is_Symbol and b.free_symbols <= set(held) and computable(b) for b in new):
                for b in new:
                    found.setdefault(
                        b, sympy.Symbol(f"size{len(found)}", integer=True, positive=True)
                    )
    return found


def check_computable(expr: Any) -> None:
    """An `UnsupportedProgram` (one line) where `size_value` does not compute a size
    expression (an operation it does not know), read from its operations alone (no value:
    a division by `(s - 2)//4` divides by 0 at sizes the program never runs)."""
    if expr.is_Integer or expr.is_Symbol:
        return
    rounded = rounded_division(expr)
    if rounded is not None:
        check_computable(rounded)
        return
    if _size_operation(expr) is None:
        raise _not_computed(expr)
    for a in expr.args:
        check_computable(a)


def computable(expr: Any) -> bool:
    """Whether `size_value` computes a size expression (`check_computable`)."""
    try:
        check_computable(expr)
    except UnsupportedProgram:
        return False
    return True


def _is_length(size: torch.SymInt) -> bool:
    """Whether a SymInt's symbol is a tensor's length of 2 or more wherever dynamo's trace
    holds (its range starts at 2, as a dim's does: sizes 0 and 1 specialise), not an int
    that may be 0 or negative (a model's `logits_to_keep`)."""
    found = size.node.shape_env.var_to_range.get(size.node.expr)
    return found is not None and finite_bound(found.lower) and int(found.lower) >= 2


def _summed_dim(
    symbol: Any, fakes: Sequence[Any], held: set[Any]
) -> tuple[Any, tuple[int, int]] | None:
    """The first tensor dim among `fakes` whose size is `symbol` plus a non-zero sum of
    symbols of `held` and integers, as (that sum, (position, dim)); None where there is none."""
    for i, value in enumerate(fakes):
        for d, size in enumerate(value.shape if isinstance(value, Tensor) else ()):
            if not isinstance(size, torch.SymInt):
                continue
            expr = size.node.expr
            if not expr.is_Add or expr.coeff(symbol) != 1:
                continue
            rest = expr - symbol
            if rest != 0 and rest.free_symbols and rest.free_symbols <= held:
                return rest, (i, d)
    return None


def _product_factors(fakes: Sequence[Any]) -> set[Any]:
    """The symbols that are factors of a tensor dim's size that is a product of symbols and
    of an integer (`8*s0*s1`)."""
    found: set[Any] = set()
    for value in fakes:
        for size in value.shape if isinstance(value, Tensor) else ():
            if not isinstance(size, torch.SymInt):
                continue
            split = _symbol_factors(size.node.expr)
            if split is not None:
                found.update(split[1])
    return found


def _symbol_factors(expr: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """A size that is an integer times a product of symbols as (the integer, the symbols, a
    power's base as often as its exponent: `8*s0**2` is (8, (s0, s0))); None for any other."""
    coefficient, factors = expr.as_coeff_mul()
    symbols: list[Any] = []
    for f in factors:
        if f.is_Pow and f.base.is_Symbol and f.exp.is_Integer and int(f.exp) >= 1:
            symbols += [f.base] * int(f.exp)
        elif f.is_Symbol:
            symbols.append(f)
        else:
            return None
    return coefficient, tuple(symbols)


def _pinned_size(size: int | torch.SymInt, values: dict[Any, Any]) -> Any:
    """A tensor dim's size as a sympy expression, with the pinned ints' values put in."""
    import sympy

    if isinstance(size, torch.SymInt):
        return _exact_quotients(size.node.expr.xreplace(values))
    return sympy.Integer(size)


def _exact_quotients(expr: Any) -> Any:
    """`expr` with each floor division of a polynomial by one that divides it exactly, with
    integer coefficients, written as the quotient (`(s0**2)//s0` is `s0`: a view that splits a
    product's rows back)."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv

    def quotient(e: Any) -> Any:
        a, b = e.args
        if not (a.is_polynomial() and b.is_polynomial()) or not a.free_symbols:
            return e
        q, r = sympy.div(a, b)
        if r != 0 or not all(c.is_Integer for c in sympy.Poly(q, *a.free_symbols).coeffs()):
            return e
        return q

    return expr.replace(lambda e: isinstance(e, FloorDiv), quotient)


def _linear(expr: Any, held: Collection[Any]) -> tuple[int, Any, int] | None:
    """(a, s, c) where a dim's size is `a*s + c` of one size symbol `s` that an input holds
    (dynamo relates a tail's input to another's length, `s0 + 1`), `a` a positive integer and
    `c` a non-zero integer: torch.export's derived `Dim`; None for any other expression."""
    offset, terms = expr.as_coeff_add()
    if len(terms) != 1 or not offset.is_Integer or offset == 0:
        return None
    scale, symbol = terms[0].as_coeff_Mul()
    if not (scale.is_Integer and int(scale) >= 1 and symbol.is_Symbol and symbol in held):
        return None
    return int(scale), symbol, int(offset)


def _factors(expr: Any, held: Collection[Any], name: str, dim: int) -> tuple[Any, ...]:
    """The factors of a dim whose size is a product of size symbols that inputs hold (a tensor
    dim, a SymInt input), and of an integer (`8*s0*s1`: (8, s0, s1), the integer first where it
    is not 1; `s0**2`: (s0, s0)); an `UnsupportedProgram` (one line) for any other
    expression."""
    coefficient, factors = _symbol_factors(expr) or (expr, ())
    if not (coefficient.is_Integer and int(coefficient) >= 1 and all(f in held for f in factors)):
        raise UnsupportedProgram(
            f"input {name} has size {expr} at dim {dim}, an expression of size symbols other "
            "than a product of symbols that inputs hold"
        )
    return (*([int(coefficient)] if coefficient != 1 else []), *factors)


def joined(t: Tensor, plan: tuple[tuple[Any, ...] | None, ...]) -> Tensor:
    """A program input whose dims `plan` split (`SymbolicInputs.plans`) reshaped back to the
    graph input's sizes: each split dim the product of its factors' dims."""
    shape: list[Any] = []
    new = 0
    for entry in plan:
        count = 1 if entry is None else len(entry)
        shape.append(functools.reduce(operator.mul, [t.size(new + j) for j in range(count)], 1))
        new += count
    return t.reshape(shape)


def size_value(expr: Any, values: dict[Any, Any]) -> Any:
    """A sympy expression of size symbols (sums, products, non-negative integer powers, floor
    divisions, remainders, minima and maxima of them and of integers: `_size_operation`)
    computed from each symbol's value in `values` (ints, or SymInts while torch.export
    traces); an `UnsupportedProgram` for any other operation."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return values[expr]
    rounded = rounded_division(expr)  # `ceil(p / k)` of a float step's arange, as a FloorDiv
    if rounded is not None:
        return size_value(rounded, values)
    operation = _size_operation(expr)
    if operation is None:
        raise _not_computed(expr)
    return operation(expr, [size_value(a, values) for a in expr.args])


def _size_operation(expr: Any) -> Callable[[Any, list[Any]], Any] | None:
    """How `size_value` combines the values of `expr`'s arguments (`_SIZE_OPERATIONS`, by
    the operation's name); None for an operation it does not compute."""
    operation = _SIZE_OPERATIONS.get(type(expr).__name__)
    if operation is _power and not (expr.exp.is_Integer and int(expr.exp) >= 0):
        return None
    return operation


def _power(expr: Any, args: list[Any]) -> Any:
    return functools.reduce(operator.mul, [args[0]] * int(expr.exp), 1)


def _floor_division(expr: Any, args: list[Any]) -> Any:
    return args[0] // args[1]


def _remainder(expr: Any, args: list[Any]) -> Any:
    return args[0] % args[1]


def _folded(combine: Callable[[Any, Any], Any]) -> Callable[[Any, list[Any]], Any]:
    return lambda expr, args: functools.reduce(combine, args)


_SIZE_OPERATIONS: dict[str, Callable[[Any, list[Any]], Any]] = {
    "Add": _folded(operator.add),
    "Mul": _folded(operator.mul),
    "Pow": _power,
    "FloorDiv": _floor_division,
    "Min": _folded(torch.sym_min),
    "Max": _folded(torch.sym_max),
    "Mod": _remainder,
    "PythonMod": _remainder,
}
"""Each size operation `size_value` computes, by its sympy or torch class name (sympy's and
torch's `Min` and `Max` alike), as a function of the expression and its arguments' values."""


def _not_computed(expr: Any) -> UnsupportedProgram:
    return UnsupportedProgram(f"the size {expr} has an operation no symbolic program computes")


def _symbolic_value(node: torch.fx.Node, example: Any) -> Any:
    """What dynamo traced a placeholder with: its fake value (symbolic sizes), else the
    example."""
    value = node.meta.get("example_value")
    return value if value is not None else example


def _dim_of(size: torch.SymInt, name: str | None = None) -> Any:
    """torch.export's `Dim` for one of dynamo's size symbols, over the range its ShapeEnv
    knows (from 2: sizes 0 and 1 are specialised), or named `name` for a size that is an
    expression of them, over the range their ranges give it; an `UnsupportedProgram` where the
    guards leave it one size."""
    return _dim_of_expr(size.node.expr, size.node.shape_env, name)


def _dim_of_expr(expr: Any, env: Any, name: str | None = None) -> Any:
    """`_dim_of` for a sympy size expression `expr` of the symbols of shape environment `env`."""
    low, high = _size_range(expr, env)
    if high is not None and low >= high:
        raise UnsupportedProgram(
            f"size {expr} is {high} wherever the trace's guards on it hold: a size, not a symbol"
        )
    name = str(expr) if name is None else name
    if high is not None:
        return torch.export.Dim(name, min=low, max=high)
    return torch.export.Dim(name, min=low)


def _size_range(expr: Any, env: Any) -> tuple[int, int | None]:
    """The range of a size expression over its symbols' ranges in shape environment `env`
    and the guards on it, from 2 (sizes 0 and 1 specialise): (low, high), high None where
    unbounded; low >= high where the guards leave it one size (`high`)."""
    from torch.utils._sympy.numbers import int_oo
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

    ranges = {}
    for symbol in expr.free_symbols:
        known = env.var_to_range.get(symbol)
        low = max(2, int(known.lower)) if known is not None and finite_bound(known.lower) else 2
        high = int(known.upper) if known is not None and finite_bound(known.upper) else None
        if symbol in env.backed_var_to_val:
            low, high = guarded_range(env, symbol, low, high)
        ranges[symbol] = ValueRanges(low, int_oo if high is None else high)
    found = bound_sympy(expr, ranges)
    low = max(2, int(found.lower)) if finite_bound(found.lower) else 2
    high = int(found.upper) if finite_bound(found.upper) else None
    return low, high


def symbolic_program(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], cuda_graphs: bool = True
) -> tuple[DynamicProgram, SymbolicInputs]:
    """A graph with symbolic sizes compiled once (`xfuse.compile` with `dynamic_shapes`, for
    the graph's device: the CPU or a CUDA GPU) for every size in its symbols' ranges, the
    parameters dynamo lifts into inputs static (a CUDA graph reads them in place); its
    refusals raise (one line)."""
    from xfuse.runtime.dynamic import compile_dynamic  # its imports only when asked for

    device = graph_device(gm, example_inputs)
    if device.type not in ("cpu", "cuda"):
        raise UnsupportedProgram(
            f"symbolic programs compile for the CPU and CUDA only, not {device}"
        )
    inputs = symbolic_inputs(gm, example_inputs)
    examples = tuple(inputs.arguments([example_value(x) for x in example_inputs]))
    fn = inputs.function(decomposed_calls(gm), len(example_inputs))
    lifted = set(static_positions(gm))
    static = tuple(k for k, i in enumerate(inputs.tensors) if i in lifted)
    with torch._guards.tracing(None):  # export's guards are its own, not dynamo's frame's
        program = compile_dynamic(
            fn,
            examples,
            device,
            automatic_dims(inputs.dynamic_shapes),
            static_inputs=static,
            cuda_graphs=cuda_graphs,
        )
    program.guards += dynamo_guards(gm, example_inputs)
    program.statics_guarded = True  # dynamo guards the layouts of the parameters it lifts
    COMPILES["symbolic"] += 1
    return program, inputs


def automatic_dims(shapes: dict[str, dict[int, Any] | None]) -> dict[str, dict[int, Any] | None]:
    """dynamo's dims as `Dim.AUTO` over the same ranges, for torch.export: where a guard of
    export's trace holds on part of a range only (a stride-4 pooling's output `(s - 1) // 4 + 1
    != 1` below 5, which dynamo's trace did not guard), export keeps the guard where named
    `Dim`s would fail the whole export after tracing it, and the importer starts each symbol's
    range where the guards on it hold (`guarded_range`); dynamo's graph is served per shape
    outside it. Dims that hold one symbol are made one by `SymbolicInputs.shared`'s checks."""
    auto: dict[str, dict[int, Any] | None] = {}
    for name, dims in shapes.items():
        auto[name] = (
            None
            if dims is None
            else {k: torch.export.Dim.AUTO(min=d.min, max=_dim_max(d)) for k, d in dims.items()}
        )
    return auto


def _dim_max(dim: Any) -> int | None:
    """A `Dim`'s range end, None for none."""
    high = getattr(dim, "max", None)
    return high if isinstance(high, int) and high < 1 << 62 else None


def example_value(value: Any) -> Any:
    """A real tensor of a fake one's example sizes (`real_input`), a SymInt's example value
    (`size_hint`), anything else as it is."""
    if isinstance(value, torch.SymInt):
        return size_hint(value)
    return real_input(value)


def dynamo_guards(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> list[str]:
    """The guards on size symbols that dynamo's trace of a graph recorded (its `ShapeEnv`'s,
    as sympy prints them, over the symbols of its placeholders' dims, which name the `Dim`s),
    one line each after `dynamo: `: a size-dependent choice in the traced code (a
    convolution's backend picked by the batch size) bounds the sizes this graph serves, and
    dynamo traces another graph past them."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    fakes = [_symbolic_value(n, x) for n, x in zip(placeholders, example_inputs, strict=False)]
    symbols: set[Any] = set()
    env = None
    for value in fakes:
        for size in value.shape if isinstance(value, Tensor) else ():
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                symbols.add(size.node.expr)
                env = size.node.shape_env
    if env is None:
        return []
    return [
        f"dynamo: {g.expr}"
        for g in env.guards
        if g.expr.free_symbols and g.expr.free_symbols <= symbols
    ]


def specialised_scalars(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> tuple[torch.fx.GraphModule, dict[int, float | int | bool]]:
    """`gm` with the Python scalars dynamo passes as 0-d tensors (with `dynamic=True` it does
    not specialise floats: a layer norm's `eps` arrives as an input whose `.item()` the graph
    reads) replaced by their example values, which torch.export then specialises on as it
    does on scalars, and their placeholders removed (a program takes no input it never reads:
    on CUDA each would be copied to the device at every call); and those values by input
    position, which a call must match and which `without_scalars` drops from its arguments.
    `gm` itself where there are none."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    found: dict[int, float | int | bool] = {}
    for i, (node, example) in enumerate(zip(placeholders, example_inputs, strict=False)):
        arg = node.meta.get("grapharg")
        if not getattr(arg, "pass_arg_as_tensor", False) or not _is_real_scalar(example):
            continue
        if node.users and all(_is_item(u) for u in node.users):
            found[i] = example.item()
    if not found:
        return gm, found
    graph = copy.deepcopy(gm.graph)
    nodes = [n for n in graph.nodes if n.op == "placeholder"]
    for i, value in found.items():
        for item in list(nodes[i].users):
            _replace_uses(item, value)
            graph.erase_node(item)
        graph.erase_node(nodes[i])
    return torch.fx.GraphModule(gm, graph), found


def without_scalars(args: Sequence[Any], scalars: Collection[int]) -> list[Any]:
    """A call's arguments without those at the positions `scalars` (`specialised_scalars`)."""
    return [a for i, a in enumerate(args) if i not in scalars]


def _replace_uses(node: torch.fx.Node, value: Any) -> None:
    """Every use of `node` as an argument replaced by the constant `value`."""

    def swap(n: torch.fx.Node) -> Any:
        return value if n is node else n

    for user in list(node.users):
        user.args = torch.fx.node.map_arg(user.args, swap)
        user.kwargs = torch.fx.node.map_arg(user.kwargs, swap)


def _is_real_scalar(value: Any) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    return isinstance(value, Tensor) and value.dim() == 0 and not is_fake(value)


def _is_item(node: torch.fx.Node) -> bool:
    """A node that reads a 0-d tensor's Python value (`t.item()`)."""
    if node.op == "call_method":
        return node.target == "item"
    return node.op == "call_function" and node.target in (
        Tensor.item,
        torch.ops.aten.item.default,
    )


def _dynamic(
    gm: torch.fx.GraphModule, example_inputs: list[Any], mode: FallbackMode, cuda_graphs: bool
) -> Callable[..., Any]:
    """A graph with dynamic shapes: its Python scalars specialised (`specialised_scalars`; a
    call with other values runs eagerly, with one `FallbackWarning`), then one symbolic
    program for every size in range, whose calls out of range (or that it otherwise refuses)
    run per shape; where the symbolic path refuses the graph, per shape only. Each refusal
    warns once (`DynamicShapesWarning`)."""
    specialised, scalars = specialised_scalars(gm, example_inputs)
    compiled = _symbolic_or_per_shape(
        specialised, without_scalars(example_inputs, scalars), mode, cuda_graphs
    )
    if not scalars:
        return compiled
    warned: set[str] = set()
    others = picker(without_scalars(range(len(example_inputs)), scalars))

    def run(*args: Any) -> Any:
        # One `.item()` per scalar is the cheapest check measured for 15 0-d CPU tensors (about
        # 0.7 us each); stacking them for one `tolist()` or `torch.equal` costs twice as much.
        for i, value in scalars.items():
            if args[i].item() != value:
                if "scalar" not in warned:
                    warned.add("scalar")
                    _eager_warning(
                        f"a call whose Python scalar input {i} is {args[i].item()!r}, where the "
                        f"graph was compiled for {value!r}",
                        stacklevel=3,
                    )
                return gm.forward(*args)
        return compiled(*others(args))  # `without_scalars`, in one C call

    for name in ("dynamic", "programs", "symbolic_reason"):
        setattr(run, name, getattr(compiled, name))
    return run


def _symbolic_or_per_shape(
    gm: torch.fx.GraphModule, example_inputs: list[Any], mode: FallbackMode, cuda_graphs: bool
) -> Callable[..., Any]:
    """One symbolic program for every size in range, whose calls out of range (or that it
    otherwise refuses) run per shape; per shape only where the symbolic path refuses `gm`."""
    per_shape = _per_shape(gm, graph_device(gm, example_inputs), mode, cuda_graphs)
    try:
        program, inputs = symbolic_program(gm, example_inputs, cuda_graphs)
    except Exception as e:  # noqa: BLE001 - any refusal: the per-shape path compiles it
        reason = reason_of(e)
        if not _eager_refuses(e):  # else eager raises at the call, as per shape it does
            _per_shape_warning(f"the symbolic compile refused it: {reason}")
        per_shape.symbolic_reason = reason  # type: ignore[attr-defined]
        per_shape.dynamic = None  # type: ignore[attr-defined]
        return per_shape
    warned: set[str] = set()

    def run(*args: Any) -> Any:
        try:
            return program(*inputs.arguments(args))
        except CALL_REFUSALS as e:  # raised before anything ran
            if type(e).__name__ not in warned:
                warned.add(type(e).__name__)
                _per_shape_warning(f"a call the symbolic program refuses: {e}", stacklevel=3)
            return per_shape(*args)

    run.dynamic = program  # type: ignore[attr-defined]
    run.programs = per_shape.programs  # type: ignore[attr-defined]
    run.symbolic_reason = None  # type: ignore[attr-defined]
    return run


def _per_shape_warning(reason: str, stacklevel: int = 4) -> None:
    warnings.warn(
        f"xfuse: torch.compile backend compiles this dynamic-shape graph per shape: {reason}",
        DynamicShapesWarning,
        stacklevel=stacklevel,
    )


def _per_shape(
    gm: torch.fx.GraphModule, device: torch.device, mode: FallbackMode, cuda_graphs: bool
) -> Callable[..., Any]:
    """A dynamic-shape graph run by one compiled program per concrete call signature: tensor
    shapes, strides and dtypes, and the values of the non-tensor (SymInt) arguments, which
    the program is specialised on."""
    programs: dict[tuple[Any, ...], CompiledProgram | None] = {}
    lock = threading.Lock()
    warned: set[str] = set()

    def program_for(args: tuple[Any, ...]) -> CompiledProgram | None:
        key = tuple(
            (a.shape, a.stride(), a.dtype) if isinstance(a, Tensor) else (type(a), a) for a in args
        )
        with lock:
            if key not in programs:
                programs[key] = _specialised(gm, args)
            return programs[key]

    def _specialised(gm: torch.fx.GraphModule, args: tuple[Any, ...]) -> CompiledProgram | None:
        tensors = [i for i, a in enumerate(args) if isinstance(a, Tensor)]

        def fixed(*ts: Tensor) -> Any:
            full = list(args)
            for i, t in zip(tensors, ts, strict=True):
                full[i] = t
            return gm(*full)

        COMPILES["per-shape"] += 1
        try:
            return compile(
                fixed,
                tuple(args[i] for i in tensors),
                str(device),
                quiet=True,
                fallback=mode,
                cuda_graphs=cuda_graphs,
            )
        except Exception as e:
            if not _eager_refuses(e):
                _graph_runs_eagerly(e, mode)
            return None

    def run(*args: Any) -> Any:
        program = program_for(args)
        if program is None:
            return gm.forward(*args)
        try:
            return program(*(a for a in args if isinstance(a, Tensor)))
        except AutogradUnsupportedError as e:
            _call_runs_eagerly(e, mode, warned)
            return gm.forward(*args)

    run.programs = programs  # type: ignore[attr-defined]
    return run


# ---------------------------------------------------------------------------------------------
# Dynamic shapes in training: the parts AOTAutograd cuts from a graph with symbolic sizes
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartOutputs:
    """Where each output of an AOTAutograd part with symbolic sizes comes from: ("program", k)
    the k-th tensor the compiled program returns, ("input", i) the part's input i returned as
    it is (a parameter or a SymInt the forward saves for the backward), ("size", expr) a size
    the forward saves, computed from the call's sizes, ("constant", value) a value the graph
    returns as it is (None for a gradient that is none)."""

    sources: tuple[tuple[str, Any], ...]
    symbols: Held
    """Each size symbol -> where a call holds it (`held_symbols`)."""

    def assemble(self, args: Sequence[Any], results: Sequence[Any]) -> list[Any]:
        """The part's outputs for a call of `args` whose program returned `results`."""
        values: dict[Any, Any] = {}
        out: list[Any] = []
        for kind, where in self.sources:
            if kind == "program":
                out.append(results[where])
            elif kind == "input":
                out.append(args[where])
            elif kind == "size":
                if not values:
                    values = symbol_values(self.symbols, args)
                out.append(int(size_value(where, values)))
            else:
                out.append(where)
        return out


def part_outputs(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], internal: int | None = None
) -> tuple[torch.fx.GraphModule, PartOutputs]:
    """An AOTAutograd part split into what a program computes and what its calls assemble:
    a copy of `gm` that returns only the tensors it computes (not its inputs, sizes or
    Nones), and `PartOutputs` for the rest; its outputs from position `internal` on (what the
    forward saves for the backward, every gradient of the backward), where one is a view of
    an input or of an earlier output or is not surely contiguous, are cloned contiguous
    (`_fresh_outputs`). An
    `UnsupportedProgram` (one line) where a size it returns is of a symbol no input holds (a
    data-dependent size)."""
    symbols = held_symbols(example_inputs)
    graph = copy.deepcopy(gm.graph)
    placeholders = {n: i for i, n in enumerate(graph.find_nodes(op="placeholder"))}
    output = graph.output_node()
    returned = output.args[0]
    values = list(returned) if isinstance(returned, tuple | list) else [returned]
    sources: list[tuple[str, Any]] = []
    computed: list[torch.fx.Node] = []
    first_internal = len(values) if internal is None else internal
    cloned = 0  # the computed outputs before position `internal`, never cloned
    for position, value in enumerate(values):
        if position == first_internal:
            cloned = len(computed)
        if not isinstance(value, torch.fx.Node):
            sources.append(("constant", value))
        elif value in placeholders:
            sources.append(("input", placeholders[value]))
        elif isinstance(value.meta.get("val"), Tensor):
            sources.append(("program", len(computed)))
            computed.append(value)
        else:
            sources.append(("size", _size_of(value, symbols)))
    if first_internal >= len(values):  # no output is internal
        cloned = len(computed)
    fresh = _fresh_outputs(graph, computed, list(placeholders), cloned)
    output.args = (tuple(fresh),)
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(gm, graph), PartOutputs(tuple(sources), symbols)


def _fresh_outputs(
    graph: torch.fx.Graph, outputs: list[torch.fx.Node], inputs: list[torch.fx.Node], start: int
) -> list[torch.fx.Node]:
    """A part's computed outputs, each from position `start` on that is a view of an input or
    of an earlier output (a saved activation viewed two ways), or that is not surely
    contiguous (attention's transposed activation), cloned contiguous before the output node:
    a symbolic program returns fresh contiguous tensors only. Neither the backward's saved
    tensors nor its gradients need alias or keep eager's strides (the rule for saved tensors'
    strides, on both paths: `xfuse.aot.PartCompiler.saved_tensors`). AOTAutograd regenerates
    the views it returns to the user from the outputs before `start`, which stay as they
    are."""
    from torch.multiprocessing.reductions import StorageWeakRef

    seen = {_storage(n, StorageWeakRef) for n in inputs} - {None}
    fresh: list[torch.fx.Node] = []
    for k, node in enumerate(outputs):
        storage = _storage(node, StorageWeakRef)
        aliased = storage is not None and storage in seen
        if k >= start and (aliased or not _surely_contiguous(node.meta.get("val"))):
            with graph.inserting_before(graph.output_node()):
                node = graph.call_function(
                    torch.ops.aten.clone.default,
                    (node,),
                    {"memory_format": torch.contiguous_format},
                )
        else:
            seen.add(storage)
        fresh.append(node)
    return fresh


def _surely_contiguous(value: Any) -> bool:
    """Whether a node's fake tensor is row-major contiguous at every size its symbols take
    (each stride, past dims of size 1, the product of the sizes after it), read without
    guards; False for anything else."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    if not isinstance(value, Tensor):
        return False
    expected: int | torch.SymInt = 1
    for size, stride in reversed(list(zip(value.shape, value.stride(), strict=True))):
        if not statically_known_true(size == 1) and not statically_known_true(stride == expected):
            return False
        expected = expected * size
    return True


def _storage(node: torch.fx.Node, weak: Callable[[Any], Any]) -> Any:
    """A weak reference to the storage of a node's fake tensor, None where it has none."""
    value = node.meta.get("val")
    return weak(value.untyped_storage()) if isinstance(value, Tensor) else None


def _size_of(node: torch.fx.Node, symbols: Held) -> Any:
    """The sympy expression of a size a part returns, over symbols in `symbols`."""
    import sympy

    value = node.meta.get("val")
    if isinstance(value, int):
        return sympy.Integer(value)
    if not isinstance(value, torch.SymInt):
        raise UnsupportedProgram(
            f"the part returns {node.name}, a {type(value).__name__}, not a tensor or a size"
        )
    expr = value.node.expr
    unknown = sorted(str(s) for s in expr.free_symbols if s not in symbols)
    if unknown:
        raise UnsupportedProgram(
            f"the part returns the size {expr}, whose symbols {', '.join(unknown)} no input "
            "holds (a data-dependent size)"
        )
    check_computable(expr)
    return expr


def training_part(
    compiler: PartCompiler, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> Callable[..., Any]:
    """A part AOTAutograd cut from a graph with symbolic sizes (`PartCompiler.symbolic`): one
    symbolic program for every size in range, as for inference graphs (`symbolic_program`),
    whose calls it refuses run per shape; per shape only where the symbolic path refuses the
    part, with a `DynamicShapesWarning` that says why. Per shape, each call signature compiles
    with the part's settings (`PartCompiler.compile_shape`); where that fails, the part runs
    eagerly for that signature (`PartCompiler.on_eager`: a `FallbackWarning`, or in strict
    mode an `EagerFallbackError`)."""
    program_graph, outputs = part_outputs(gm, example_inputs, compiler.internal_outputs())
    program_graph = views_as_reshapes(program_graph)  # as `PartCompiler.compile` says why
    static = compiler.static_inputs(len(example_inputs))
    per_shape = _PartPerShape(compiler, program_graph, static)
    try:
        if compiler.part == "backward":
            check_reads_by_value(program_graph)
        program, inputs = symbolic_program(
            program_graph, example_inputs, compiler.settings.cuda_graphs
        )
    except Exception as e:  # noqa: BLE001 - any refusal: the per-shape path compiles it
        _per_shape_warning(
            f"the symbolic compile refused the {compiler.part} part: {reason_of(e)}", stacklevel=2
        )

        def shaped(*args: Any) -> list[Any]:
            return outputs.assemble(args, per_shape(args))

        shaped.dynamic = None  # type: ignore[attr-defined]
        shaped.programs = per_shape.programs  # type: ignore[attr-defined]
        shaped.symbolic_reason = reason_of(e)  # type: ignore[attr-defined]
        return shaped
    warned: set[str] = set()

    def run(*args: Any) -> list[Any]:
        try:
            results = program(*inputs.arguments(args))
        except CALL_REFUSALS as e:  # raised before anything ran
            if type(e).__name__ not in warned:
                warned.add(type(e).__name__)
                _per_shape_warning(
                    f"a call of the {compiler.part} part the symbolic program refuses: {e}",
                    stacklevel=2,
                )
            results = per_shape(args)
        return outputs.assemble(args, results)

    run.dynamic = program  # type: ignore[attr-defined]
    run.programs = per_shape.programs  # type: ignore[attr-defined]
    run.symbolic_reason = None  # type: ignore[attr-defined]
    return run


STRIDE_READERS = (
    torch.ops.aten.as_strided.default,
    torch.ops.aten.as_strided_.default,
    torch.ops.aten.as_strided_scatter.default,
    torch.ops.aten.as_strided_copy.default,
)
"""Aten ops whose result depends on their input's strides, not only on its values."""


def check_reads_by_value(gm: torch.fx.GraphModule) -> None:
    """Refuse, in one line, a backward graph with an op that reads a tensor's strides
    (`STRIDE_READERS`): its saved inputs come from the forward's program, which returns them
    contiguous where eager (and the backward's trace) had other strides, and a symbolic
    program binds its inputs by sizes alone (`SymbolicProgram.bind`)."""
    for target in STRIDE_READERS:
        found = gm.graph.find_nodes(op="call_function", target=target)
        if found:
            raise UnsupportedProgram(
                f"the backward reads a tensor's strides ({target}, node '{found[0].name}'), "
                "which its saved inputs need not have"
            )


class _PartPerShape:
    """A part's program graph (`part_outputs`) run by one program per concrete call
    signature: tensor shapes, strides and dtypes, and the values of its SymInt inputs, which
    each program is specialised on. A signature whose compile fails runs the graph eagerly."""

    def __init__(
        self, compiler: PartCompiler, gm: torch.fx.GraphModule, static: tuple[int, ...]
    ) -> None:
        self.compiler = compiler
        self.gm = gm
        self.static = static
        self.programs: dict[tuple[Any, ...], CompiledProgram | None] = {}
        self.lock = threading.Lock()

    def __call__(self, args: Sequence[Any]) -> Any:
        key = tuple(
            (a.shape, a.stride(), a.dtype) if isinstance(a, Tensor) else (type(a), a) for a in args
        )
        with self.lock:
            if key not in self.programs:
                self.programs[key] = self.specialised(tuple(args))
            program = self.programs[key]
        if program is None:
            return self.gm(*args)
        return program(*(a for a in args if isinstance(a, Tensor)))

    def specialised(self, args: tuple[Any, ...]) -> CompiledProgram | None:
        tensors = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        gm = self.gm

        def fixed(*ts: Tensor) -> Any:
            full = list(args)
            for i, t in zip(tensors, ts, strict=True):
                full[i] = t
            return gm(*full)

        static = tuple(k for k, i in enumerate(tensors) if i in self.static)
        COMPILES["per-shape"] += 1
        try:
            return on_own_thread(
                lambda: self.compiler.compile_shape(fixed, [args[i] for i in tensors], static)
            )
        except Exception as e:  # noqa: BLE001 - any failure: this signature runs eagerly
            self.compiler.on_eager(e, self.compiler.mode)
            return None


def on_own_thread(function: Callable[[], CompiledProgram]) -> CompiledProgram:
    """`function()` run on a thread of its own, which this one waits for: a part's compile at
    call time runs inside AOTAutograd's `autograd.Function`, whose dispatcher state (thread
    local) torch.export's functionalization cannot trace under; a new thread starts from
    torch's defaults (grad on, no modes). Its exception is raised here."""
    result: list[CompiledProgram] = []
    failed: list[BaseException] = []

    def target() -> None:
        try:
            with torch.no_grad():
                result.append(function())
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            failed.append(e)

    worker = threading.Thread(target=target, name="xfuse-part-compile")
    worker.start()
    worker.join()
    if failed:
        raise failed[0]
    return result[0]


import xfuse as _xfuse  # noqa: E402  (the name registration lives at the package root)

_xfuse.register_backend()
