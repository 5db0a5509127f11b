"""
The torch importer: a `torch.export.ExportedProgram` becomes one `func.func @forward` of graph
ops (docs/contracts.md). Mapped aten ops become graph ops (xfuse/frontend/aten/); any other
tensor op becomes `graph.torch_call`; what even that cannot hold raises `UnsupportedProgram`.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import operator
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import (
    ConstantArgument,
    InputKind,
    OutputKind,
    SymIntArgument,
    TensorArgument,
)
from torch.utils import _pytree as pytree
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    ModuleOp,
    StringAttr,
    TensorType,
    UnitAttr,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.effects import erase_dead
from xfuse.errors import SymbolicSizeError, XfuseError
from xfuse.frontend.aten import (
    CONVERTED_WHEN,
    CONVERTERS,
    KEPT_COMPOSITES,
    MAY_RETURN_INPUT,
    SKIPPED,
)
from xfuse.frontend.builder import (
    SIZE_SYMBOLS,
    ImportBuilder,
    SizeSymbols,
    UnsupportedProgram,
    Value,
    bind,
    decided_size,
    fold_empty_results,
    has_symbolic_size,
    importing_sizes,
    node_error,
    tensor_type_of_val,
    traced_memory_order,
    used_outputs,
)
from xfuse.frontend.decompositions import extra_decompositions, symbolic_decompositions
from xfuse.frontend.eager_rules import check_eager_rules, is_scalar_node, size_hint, unread_checks
from xfuse.frontend.outputs import (
    BaseLayout,
    OutputRule,
    OutputRules,
    SizeArg,
    base_strides,
    output_rules,
    returned_strides,
    traced_base_strides,
    with_size_args,
)
from xfuse.frontend.pytrees import export_support, picker
from xfuse.interpreters.graph import bind_arguments
from xfuse.ir.dtypes import tensor_input_problem
from xfuse.ir.names import CHANNELS_LAST_ATTR, SIZES_ATTR

PARAM_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


@dataclass
class ImportedProgram:
    """An imported program: the graph module and what is needed to call it."""

    module: ModuleOp
    param_names: dict[int, str]
    """Argument index of `@forward` -> fqn of the parameter, buffer or constant bound there."""
    params: dict[str, torch.Tensor]
    input_names: list[str]
    output_names: list[str]
    constant_inputs: set[int] = field(default_factory=set[int])
    """Positions of flattened user inputs that torch.export specialised to constants."""
    output_rules: list[OutputRule] = field(default_factory=list[OutputRule])
    """What each tensor output aliases in eager (`xfuse.frontend.outputs`), then the rules of
    the hidden outputs."""
    output_constants: dict[int, Any] = field(default_factory=dict[int, Any])
    """Flat output position -> the value of a non-tensor output (None, int, float, bool...),
    which torch.export specialised, or, in a symbolic program, a size of the call (a
    `SizeArg`, evaluated at each call's sizes); `@forward` returns the tensor outputs only
    (then the hidden ones)."""
    hidden_outputs: int = 0
    """How many of `@forward`'s results, after the returned tensors, are hidden: intermediates
    that returned views share (`xfuse.frontend.outputs`), never handed to the caller."""
    output_strides: dict[int, tuple[graph.SizeExpr, ...]] = field(
        default_factory=dict[int, tuple[graph.SizeExpr, ...]]
    )
    """Of a symbolic program: each fresh tensor output whose traced strides are dense in no
    order (a slice or expand of an intermediate, `h[:, -1]`), by its position among the
    outputs: its strides as polynomials of the input size symbols (`symbolic_strides`), which a
    call evaluates at its sizes."""
    hidden_orders: dict[int, tuple[int, ...]] = field(default_factory=dict[int, tuple[int, ...]])
    """Of a symbolic program: the hidden outputs (by their position among `output_rules`) whose
    traced layout is dense in one memory order at every size (`dense_order_at_every_size`:
    row-major, or transposed as `x.t() * 2` is), and that order, which a call lays its
    contiguous result out in (`dynamic.in_memory_order`), so that the views of them replay
    eager's strides."""

    def visible(self, results: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """`@forward`'s results without the hidden ones (what the graph and loop interpreters
        give, compared with eager's outputs)."""
        return list(results[: len(results) - self.hidden_outputs])

    def outputs(
        self, tensors: Sequence[torch.Tensor], sizes: dict[str, int] | None = None
    ) -> list[Any]:
        """The flat outputs of a call: `@forward`'s (visible) tensor results, with the constant
        outputs put back (a size of the call at `sizes`, the call's)."""
        if not self.output_constants:
            return list(tensors)
        flat: list[Any] = []
        results = iter(tensors)
        for i in range(len(self.output_constants) + len(tensors)):
            value = self.output_constants[i] if i in self.output_constants else next(results)
            if isinstance(value, SizeArg):
                if sizes is None:
                    raise XfuseError(f"output {i} is a size of the call, and no sizes were given")
                value = value.expr.evaluate(sizes)
            flat.append(value)
        return flat

    def rule_position(self, flat: int) -> int | None:
        """The position among `output_rules` (and `@forward`'s results) of the flat output at
        `flat`; None for a constant output (`output_constants`), which has no rule."""
        if flat in self.output_constants:
            return None
        return flat - sum(1 for i in self.output_constants if i < flat)

    def flat_count(self) -> int:
        """How many flat outputs a call returns: the visible tensor results' and the
        constants'."""
        return len(self.output_rules) - self.hidden_outputs + len(self.output_constants)

    @property
    def function(self) -> func.FuncOp:
        return next(op for op in self.module.ops if isinstance(op, func.FuncOp))

    def return_view_bases(self) -> None:
        """Make `@forward` return, in place of each output that eager returns as a view (of an
        argument or of another result: `output_rules`), the view's base, and erase what only
        those views read. The runtime replays each view on its base at every call, so the
        program's own copy of it would be work thrown away; after this, `@forward`'s results
        at those positions are no longer eager's outputs (interpret the module before)."""
        block = self.function.body.block
        ret = block.last_op
        assert isinstance(ret, func.ReturnOp)
        results = list(ret.operands)
        viewed = [i for i, rule in enumerate(self.output_rules) if rule.base != "fresh"]
        if not viewed:
            return
        replaced: list[Operation] = []
        for i in viewed:
            rule = self.output_rules[i]
            base = block.args[rule.index] if rule.base == "arg" else results[rule.index]
            owner = results[i].owner
            if isinstance(owner, Operation):
                replaced.append(owner)
            results[i] = base
        block.insert_op_before(func.ReturnOp(*results), ret)
        block.erase_op(ret)
        f = self.function
        f.function_type = FunctionType.from_lists(
            f.function_type.inputs.data, [v.type for v in results]
        )
        erase_dead(block, replaced)

    def arguments(self, *user_inputs: Any, **user_kwargs: Any) -> list[torch.Tensor]:
        """The full argument list of `@forward`: parameters by name, then the user inputs."""
        leaves = pytree.tree_leaves((user_inputs, user_kwargs))
        tensors = [x for i, x in enumerate(leaves) if i not in self.constant_inputs]
        return bind_arguments(self.function, tensors, self.params)

    def held_args(self, arity: int, static: Collection[int]) -> frozenset[int]:
        """The positions of `@forward`'s arguments that a call of `arity` positional tensors
        binds to memory that outlives the call (a module's weights): its parameters and
        buffers, and the inputs at the positions `static` (`torch.compile` passes a model's
        weights so), matched as `binder` matches them."""
        positions = iter([i for i in range(arity) if i not in self.constant_inputs])
        held = set()
        for i in range(len(self.function.body.block.args)):
            if i in self.param_names or next(positions) in static:
                held.add(i)
        return frozenset(held)

    def binder(
        self, arity: int, state_names: Sequence[str] = ()
    ) -> Callable[[Sequence[torch.Tensor], Sequence[torch.Tensor]], list[torch.Tensor]]:
        """`arguments` for calls with `arity` positional tensors, planned once (no pytree, no
        attribute lookups per call): the call path of a compiled program. A parameter or buffer
        named in `state_names` is taken from the call's state list (read from the module at
        each call); the others (lifted constants) are the exported values."""
        # One C call picks every argument from inputs + state + the lifted constants.
        positions = iter([i for i in range(arity) if i not in self.constant_inputs])
        index = {name: arity + i for i, name in enumerate(state_names)}
        constants: list[torch.Tensor] = []
        picks: list[int] = []
        for i in range(len(self.function.body.block.args)):
            name = self.param_names.get(i)
            if name is None:
                picks.append(next(positions))
            elif name in index:
                picks.append(index[name])
            else:
                picks.append(arity + len(state_names) + len(constants))
                constants.append(self.params[name])
        pick = picker(picks)

        def bind(
            inputs: Sequence[torch.Tensor], state: Sequence[torch.Tensor] = ()
        ) -> list[torch.Tensor]:
            assert len(inputs) == arity and len(state) == len(state_names)
            return list(pick([*inputs, *state, *constants]))

        return bind


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


def import_module(
    model_or_fn: torch.nn.Module | Callable[..., Any],
    example_inputs: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    dynamic_shapes: Any = None,
) -> ImportedProgram:
    """Export a module (or a plain function) and import it: with static example shapes, or
    with the symbolic sizes `dynamic_shapes` asks for (torch.export's argument, `Dim`s; an
    internal option for now, docs/dynamic-shapes.md): `@forward` then has dynamic dims and a
    `graph.sizes` table."""
    check_inputs(pytree.tree_leaves((example_inputs, kwargs or {})))
    model = model_or_fn if isinstance(model_or_fn, torch.nn.Module) else wrap_function(model_or_fn)
    try:
        with _quiet("torch._subclasses.fake_tensor"), export_support():
            program = torch.export.export(
                model, example_inputs, kwargs, strict=False, dynamic_shapes=dynamic_shapes
            )
    except Exception as e:  # export's own errors are long; keep the first line
        raise UnsupportedProgram(f"torch.export failed: {_first_line(e)}") from e
    return import_program(program, symbolic=dynamic_shapes is not None)


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """Silence a logger below CRITICAL for the duration (torch logs errors it also raises)."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def import_program(
    program: ExportedProgram, verify: bool = True, symbolic: bool = False
) -> ImportedProgram:
    """Import an exported program (decomposed here to the aten ops the importer maps where
    some op is not `read_as_exported`; in a symbolic program size computations need none);
    its module verified unless `verify` is off (`xfuse.runtime.driver.fuse_and_lower` verifies it only when
    no cached program has the same text, since that one verified). Arguments that eager
    refuses raise eager's error (`xfuse.frontend.eager_rules`)."""
    check_no_write_through_returned_input(program)
    check_eager_rules(program, symbolic)
    strides: list[tuple[int, ...] | None] | None = None
    bases: list[BaseLayout | None] | None = None
    if needs_decomposition(program, symbolic):
        strides = returned_strides(_returned(program))
        bases = base_strides(_returned(program))
        program = _decomposed(program, symbolic)
    if not symbolic:
        return Importer(program, strides, bases).run(verify)
    with importing_sizes(SizeSymbols()):
        return Importer(program, strides, bases).run(verify)


def _returned(program: ExportedProgram) -> list[torch.fx.Node]:
    """The nodes `program`'s graph returns, flat, in order."""
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    return pytree.tree_leaves(output_node.args[0])


def _decomposed(program: ExportedProgram, symbolic: bool) -> ExportedProgram:
    """`program` decomposed to the aten ops the importer maps (`decomposition_table`), its
    unread results kept (`_kept_unread`)."""
    try:
        # export_support: decomposing retraces, rebuilding library outputs (a DynamicCache).
        with _quiet("torch._subclasses.fake_tensor"), export_support(), _kept_unread(program):
            return _without_guards(program).run_decompositions(decomposition_table(symbolic))
    except Exception as e:  # torch's own limits (e.g. in-place ops on expanded bool views)
        raise UnsupportedProgram(f"torch.export failed while decomposing: {_first_line(e)}") from e


@contextlib.contextmanager
def _kept_unread(program: ExportedProgram) -> Iterator[None]:
    """While decomposing, each op whose tensor result nothing reads read by an
    `aten._assert_tensor_metadata` (which the import skips): decomposing drops unread pure
    ops, and eager runs them, raising where their values are out of range (an integer
    remainder by a zero tensor). Kept, such an op is imported as any other: a kernel's op
    that is dead is removed, a torch call runs (and raises as eager's). The program's graph is
    as it was afterwards."""
    graph = program.graph
    anchors = []
    for node in list(graph.nodes):
        if (
            node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload)
            and not node.users
            and isinstance(node.meta.get("val"), torch.Tensor)
        ):
            with graph.inserting_after(node):
                anchors.append(
                    graph.call_function(torch.ops.aten._assert_tensor_metadata.default, (node,))
                )
    try:
        yield
    finally:
        for anchor in anchors:
            graph.erase_node(anchor)


def _without_guards(program: ExportedProgram) -> ExportedProgram:
    """`program` with no guard code: decomposing retraces its module, and torch 2.11 runs the
    guards as code there, which fails (`name 'L' is not defined`) where a guard names an input
    by a path its placeholders do not have (`L['args'][1].stride()[0] == 256`, for a
    GraphModule's stride guards). The guards check the example inputs the program was just
    exported with, and xfuse never calls the exported module: its runtime checks each call's
    inputs itself."""
    if getattr(program, "_guards_code", None):
        program._guards_code = []
    return program


def _may_be_its_input(value: torch.fx.Node, source: torch.fx.Node) -> bool:
    """Whether `value`, a call with `source` as its first argument, may be `source` itself in
    eager: a `MAY_RETURN_INPUT` op that is dropout out of training (or of p = 0), or another
    whose result has its input's layout (so it changed nothing); unknown layouts: yes."""
    name = str(value.target) if value.op == "call_function" else ""
    if name not in MAY_RETURN_INPUT:
        return False
    if "dropout" in name:
        p, train = (list(value.args[1:3]) + [None, None])[:2]
        return not (isinstance(train, bool) and train and isinstance(p, int | float) and p > 0)
    a, b = source.meta.get("val"), value.meta.get("val")
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return True
    return (a.shape, a.stride(), a.dtype, a.device) == (b.shape, b.stride(), b.dtype, b.device)


def check_no_write_through_returned_input(program: ExportedProgram) -> None:
    """Refuse an in-place op on the result of a `MAY_RETURN_INPUT` op whose input is read
    after the write (or is a program input or output). In eager the write may change that
    input too (`d = F.dropout(t, training=False); d.add_(1)` changes `t`); torch.export's
    functionalisation, not knowing that the result is the input, would leave it unchanged."""
    nodes = list(program.graph.nodes)
    order = {node: i for i, node in enumerate(nodes)}
    for node in nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        arguments = node.target._schema.arguments
        for argument, value in zip(arguments, node.args, strict=False):
            written = argument.alias_info is not None and argument.alias_info.is_write
            if not written or not isinstance(value, torch.fx.Node):
                continue
            source = value.args[0] if value.args else None
            if not isinstance(source, torch.fx.Node) or not _may_be_its_input(value, source):
                continue
            later = [u for u in source.users if u is not value and order[u] > order[node]]
            if source.op == "placeholder" or later:
                raise UnsupportedProgram(
                    f"{node.target} writes into the result of {value.target}, which eager may "
                    f"return as its input '{source.name}' itself (read again after the write); "
                    "xfuse cannot keep that aliasing: write the update out of place"
                )


LIBRARY_KERNELS = (
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten.embedding_dense_backward.default",
    "aten.convolution.default",
    "aten.convolution_backward.default",
)
"""Ops that are one library kernel, kept whole (a `graph.torch_call`) where they arrive
lowered already. AOTAutograd's graphs hold the CPU's flash attention and its logsumexp, which
the backward reads: their decompositions give other output strides than their kernels do, so
that the views after them would not hold. They hold an embedding's gradient: eager's kernel
fills a fresh table with zeros and adds each index's row in index order, scaled by
`1 / count` where `scale_grad_by_freq` asks (the decomposition divides by the count, a
rounding apart), one call where the decomposition is zeros, a masked copy of the gradient and
an `index_put`. They hold convolutions and their gradients as AOTAutograd leaves them
(`aten.convolution`, `aten.convolution_backward`: core ATen, which decomposing keeps as they
are), so that a conv net's forward and backward import without retracing them."""

IMPORTED_AS_IS = (
    frozenset(CONVERTERS) | SKIPPED | frozenset(KEPT_COMPOSITES) | frozenset(LIBRARY_KERNELS)
)
"""The ops the importer reads as export gives them: mapped, skipped, or kept whole by the
decomposition (attention: a `graph.torch_call` of itself either way)."""


def needs_decomposition(program: ExportedProgram, symbolic: bool = False) -> bool:
    """Whether some node is not `read_as_exported` (decomposing is the slow part of an import;
    a program of such ops only is already in the form the importer reads, its attention calls
    included). In a symbolic import a size computation (`sym_size`, `operator.mul` of sizes:
    a SymInt value, a SymFloat of sizes) is read as it is: it has no graph value
    (`convert_symbolic_node`), and decomposing leaves it as it was."""
    return any(
        node.op == "call_function"
        and node.target is not operator.getitem
        and not (symbolic and is_scalar_node(node))
        and not read_as_exported(node)
        for node in program.graph.nodes
    )


def read_as_exported(node: torch.fx.Node) -> bool:
    """Whether the node's op is one of `IMPORTED_AS_IS` and passes its `CONVERTED_WHEN` check,
    if it has one (a training batch norm, a circular pad, an in-place add on memory others
    see do not)."""
    name = str(node.target)
    check = CONVERTED_WHEN.get(name)
    return name in IMPORTED_AS_IS and (check is None or check(node))


class FunctionModule(torch.nn.Module):
    """A plain function as an nn.Module, so that torch.export can take it."""

    def __init__(self, fn: Callable[..., Any]):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def wrap_function(fn: Callable[..., Any]) -> torch.nn.Module:
    """`fn` as a module whose `forward` shows fn's signature, so that the exported inputs keep
    fn's parameter names (a function without one gets args_0, args_1, ...)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return FunctionModule(fn)

    def forward(self: FunctionModule, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    # inspect.signature honours a function's __signature__, which typeshed does not declare.
    forward.__signature__ = signature.replace(  # type: ignore[attr-defined]  # pyright: ignore[reportFunctionMemberAccess]
        parameters=[this, *signature.parameters.values()]
    )
    named = type(FunctionModule.__name__, (FunctionModule,), {"forward": forward})
    return named(fn)


def decomposition_table(symbolic: bool = False) -> dict[Any, Callable[..., Any]]:
    """torch.export's core-aten table without the composite ops graph keeps whole and the
    library kernels (`LIBRARY_KERNELS`); for a symbolic import, with the decompositions that
    keep sizes (`SYMBOLIC_DECOMPOSITIONS`)."""
    table = torch.export.default_decompositions()
    for name in (*KEPT_COMPOSITES, *LIBRARY_KERNELS):
        table.pop(resolve_overload(name), None)
    # What Inductor decomposes past core aten (an op the importer maps stays whole).
    table.update({op: f for op, f in extra_decompositions().items() if str(op) not in CONVERTERS})
    if symbolic:
        table.update(symbolic_decompositions())
    return table  # pyright: ignore[reportReturnType]


def resolve_overload(name: str) -> torch._ops.OpOverload:
    _, op, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, op), overload)


def check_inputs(values: Sequence[Any]) -> None:
    """Reject inputs no graph tensor can hold before export turns them into long errors."""
    for i, v in enumerate(values):
        if not isinstance(v, torch.Tensor):
            continue
        problem = tensor_input_problem(f"input {i}", v)
        if problem is not None:
            raise UnsupportedProgram(problem)


# ---------------------------------------------------------------------------------------------
# The FX walk
# ---------------------------------------------------------------------------------------------


NHWC_ORDER = (0, 2, 3, 1)
"""A channels-last `[N, C, H, W]` tensor's dims in memory order."""


def symbolic_strides(
    symbols: SizeSymbols, returned: Sequence[Any], rules: Sequence[OutputRule]
) -> dict[int, tuple[graph.SizeExpr, ...]]:
    """The strides of each fresh output whose traced layout is dense in no order (neither
    row-major nor another order `SizeSymbols.memory_order` finds), as polynomials of the input
    size symbols (constants where the trace's are: an expand of an intermediate to sizes the
    trace specialised), by its position among `returned`; an output whose strides are not such
    polynomials is left out (the dynamic runtime refuses it, in one line)."""
    names = symbols.names
    found: dict[int, tuple[graph.SizeExpr, ...]] = {}
    for i, (node, rule) in enumerate(zip(returned, rules, strict=False)):
        value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if rule.base != "fresh" or not isinstance(value, torch.Tensor):
            continue
        shape, stride = tuple(value.shape), tuple(value.stride())
        if symbols.memory_order(shape, stride) is not None or symbols.dense_in(
            range(len(shape)), shape, stride
        ):
            continue  # dense in an order, or row-major, at every size
        polynomials = [symbols.size_polynomial(d) for d in stride]
        if all(p is not None and p.symbols <= names for p in polynomials):
            found[i] = tuple(cast(graph.SizeExpr, p) for p in polynomials)
    return found


def size_output(node: Any) -> SizeArg | None:
    """A returned size of the call (dynamo returns one that code after its graph reads) as a
    polynomial of the input size symbols, where the import reads symbolic sizes and it is
    one; else None."""
    symbols = SIZE_SYMBOLS.get()
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if symbols is None or not isinstance(value, torch.SymInt):
        return None
    expr = input_polynomial(symbols)(value)
    return None if expr is None else SizeArg(expr)


def input_polynomial(symbols: SizeSymbols) -> Callable[[Any], graph.SizeExpr | None]:
    """A traced size as a polynomial of the input size symbols alone (what a call's sizes
    evaluate), or None where it is none."""

    def of(size: Any) -> graph.SizeExpr | None:
        found = symbols.size_polynomial(size)
        return found if found is not None and found.symbols <= symbols.names else None

    return of


def hidden_as_traced(rules: OutputRules, bases: Sequence[BaseLayout | None] | None) -> list[bool]:
    """For each hidden output of `rules`, whether its traced strides (at the trace's sizes) are
    those its views' base of its shape had before the program was decomposed (`bases`, one per
    returned output: `base_strides`; True where they are not known): a decomposition that laid
    it out otherwise would have its views replay other strides than eager's."""
    found = [True] * len(rules.hidden)
    returned = len(rules.rules) - len(rules.hidden)
    for rule, layout in zip(rules.rules, bases or (), strict=False):
        j = rule.index - returned
        value = rules.hidden[j].meta.get("val") if rule.base == "output" and j >= 0 else None
        if not isinstance(value, torch.Tensor):
            continue
        shape = tuple(size_hint(s) for s in value.shape)
        traced = traced_base_strides(shape, rule.chain, layout)
        if traced is not None:
            found[j] = found[j] and tuple(size_hint(s) for s in value.stride()) == traced
    return found


def dense_order_at_every_size(symbols: SizeSymbols, node: torch.fx.Node) -> tuple[int, ...] | None:
    """The memory order (outermost dim first) in which `node`'s traced value is dense at every
    size its symbols take: row-major (`range(rank)`) or another (`SizeSymbols.memory_order`);
    None where there is none."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return None
    shape, stride = tuple(value.shape), tuple(value.stride())
    if symbols.dense_in(range(value.dim()), shape, stride):
        return tuple(range(value.dim()))
    return symbols.memory_order(shape, stride)


def is_channels_last(val: Any) -> bool:
    """Whether `val` is a rank-4 tensor in channels-last memory and not also contiguous
    (`CHANNELS_LAST_ATTR`): `traced_memory_order`, symbolic strides where the import reads
    symbolic sizes."""
    return (
        isinstance(val, torch.Tensor) and val.dim() == 4 and traced_memory_order(val) == NHWC_ORDER
    )


def result_attrs(
    rules: Sequence[OutputRule], results: Sequence[SSAValue], hints: Mapping[str, int]
) -> ArrayAttr[DictionaryAttr] | None:
    """`@forward`'s result attributes: `CHANNELS_LAST_ATTR` on each result whose rule (hidden
    results have none) is fresh in channels-last memory (its eager strides, traced at the size
    `hints`); None where no result has one."""
    attrs = [
        DictionaryAttr(
            {CHANNELS_LAST_ATTR: UnitAttr()} if _fresh_channels_last(r, v, hints) else {}
        )
        for r, v in zip(rules, results, strict=False)
    ]
    if not any(a.data for a in attrs):
        return None
    return ArrayAttr(attrs + [DictionaryAttr({})] * (len(results) - len(attrs)))


def _fresh_channels_last(rule: OutputRule, value: SSAValue, hints: Mapping[str, int]) -> bool:
    dims = graph.dims_of(value) if isinstance(value.type, TensorType) else ()
    if rule.base != "fresh" or len(dims) != 4 or len(rule.stride) != 4:
        return False
    strides = [size_hint(s) for s in rule.stride]  # a traced stride may be a SymInt
    if any(isinstance(d, str) and d not in hints for d in dims) or None in strides:
        return False
    hinted = cast(list[int], strides)
    return graph.memory_order(graph.dims_at(dims, hints), hinted) == NHWC_ORDER


class Importer:
    """Walks the FX graph of one exported program and builds `@forward`."""

    def __init__(
        self,
        program: ExportedProgram,
        strides: list[tuple[int, ...] | None] | None = None,
        bases: list[BaseLayout | None] | None = None,
    ):
        self.program = program
        self.signature = program.graph_signature
        self.strides = strides  # eager's strides of each returned node, traced before decomposing
        self.bases = bases  # those of each returned view's base (`base_strides`), likewise

    def run(self, verify: bool = True) -> ImportedProgram:
        placeholders = [n for n in self.program.graph.nodes if n.op == "placeholder"]
        specs = self.signature.input_specs
        if len(specs) != len(placeholders):
            raise UnsupportedProgram("the program's signature does not match its graph inputs")
        arg_types: list[Attribute] = []
        arg_attrs: list[DictionaryAttr] = []
        param_names: dict[int, str] = {}
        params: dict[str, torch.Tensor] = {}
        input_names: list[str] = []
        constant_inputs: set[int] = set()
        typed: list[torch.fx.Node] = []
        user_index = 0
        for node, spec in zip(placeholders, specs, strict=True):
            if spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, ConstantArgument):
                constant_inputs.add(user_index)
                user_index += 1
                continue
            if spec.kind == InputKind.USER_INPUT:
                user_index += 1
                input_names.append(node.name)
                attr: dict[str, Attribute] = {"graph.input": StringAttr(node.name)}
            elif spec.kind in PARAM_KINDS and spec.target is not None:
                param_names[len(typed)] = spec.target
                params[spec.target] = self.state_tensor(spec.target, node)
                attr = {"graph.param": StringAttr(spec.target)}
            else:
                raise node_error(node, f"inputs of kind {spec.kind.name} are not supported")
            symbols = SIZE_SYMBOLS.get()
            if symbols is not None:
                symbols.add_inputs(len(typed), node.meta.get("val"))
            value = params[spec.target] if spec.target in params else node.meta.get("val")
            if is_channels_last(value):
                attr[CHANNELS_LAST_ATTR] = UnitAttr()
            typed.append(node)
            arg_attrs.append(DictionaryAttr(attr))
        # Typed once every input's symbols and their definitions are known: an input's dim
        # may be a size of another input after it (`s0 + 1`, where a later input's dim is `s0`).
        symbols = SIZE_SYMBOLS.get()
        if symbols is not None and placeholders:
            symbols.add_definitions(shape_env_of(placeholders), placeholders[0])
        arg_types += [tensor_type_of_val(node.meta.get("val"), node) for node in typed]

        symbols = SIZE_SYMBOLS.get()
        if symbols is not None:
            symbols.add_relations(shape_env_of(placeholders))
            symbols.add_residues(shape_env_of(placeholders), placeholders[0])
        block = Block(arg_types=arg_types)
        lowering = ImportBuilder(block, checked_unread=unread_checks(self.program.graph))
        arg_of: dict[torch.fx.Node, int] = {}
        for node, spec in zip(placeholders, specs, strict=True):
            if not isinstance(spec.arg, ConstantArgument):
                arg_of[node] = len(arg_of)
                lowering.values[node] = block.args[arg_of[node]]
        for node in self.program.graph.nodes:
            if node.op == "call_function":
                lowering.values[node] = convert_node(lowering, node)
        outputs, output_names, constants = self.outputs(lowering)
        returned = _returned(self.program)
        kept = [i for i in range(len(returned)) if i not in constants]
        traced = self.strides if self.strides and len(self.strides) == len(returned) else None
        bases = self.bases if self.bases and len(self.bases) == len(returned) else None
        rules = output_rules(
            [returned[i] for i in kept],
            arg_of,
            None if traced is None else [traced[i] for i in kept],
            None if bases is None else [bases[i] for i in kept],
        )
        outputs += [lowering.tensor(node) for node in rules.hidden]
        block.add_op(func.ReturnOp(*outputs))
        fold_empty_results(block)
        symbols = SIZE_SYMBOLS.get()
        hints = {s.name: s.hint for s in symbols.inputs} if symbols is not None else {}
        function = func.FuncOp(
            "forward",
            (arg_types, [v.type for v in outputs]),
            Region(block),
            arg_attrs=ArrayAttr(arg_attrs),
            res_attrs=result_attrs(rules.rules, outputs, hints),
        )
        symbols = SIZE_SYMBOLS.get()
        strides: dict[int, tuple[graph.SizeExpr, ...]] = {}
        hidden_orders: dict[int, tuple[int, ...]] = {}
        returned_rules = rules.rules
        if symbols is not None and symbols.inputs:
            symbols.add_conditions(shape_env_of(placeholders))
            function.attributes[SIZES_ATTR] = symbols.table()
            strides = symbolic_strides(symbols, [returned[i] for i in kept], rules.rules)
            returned_rules = [with_size_args(r, input_polynomial(symbols)) for r in rules.rules]
            laid_out = hidden_as_traced(rules, None if bases is None else [bases[i] for i in kept])
            for j, node in enumerate(rules.hidden):
                order = dense_order_at_every_size(symbols, node)
                if order is not None and laid_out[j]:
                    hidden_orders[len(kept) + j] = order
        module = ModuleOp([function])
        if symbols is not None and verify:
            verify_symbolic(function, symbols)
        if verify:
            module.verify()
        return ImportedProgram(
            module,
            param_names,
            params,
            input_names,
            output_names,
            constant_inputs,
            returned_rules,
            constants,
            len(rules.hidden),
            strides,
            hidden_orders,
        )

    def state_tensor(self, target: str, node: torch.fx.Node) -> torch.Tensor:
        for source in (self.program.state_dict, self.program.constants):
            if target in source:
                value = source[target]
                if not isinstance(value, torch.Tensor):
                    raise node_error(node, f"constant '{target}' is not a tensor")
                return value.detach()
        raise node_error(node, f"no value for '{target}' in the program's state")

    def outputs(self, lowering: ImportBuilder) -> tuple[list[SSAValue], list[str], dict[int, Any]]:
        """The tensor outputs (values and names), and the constant ones by flat position."""
        output_node = next(n for n in self.program.graph.nodes if n.op == "output")
        returned = pytree.tree_leaves(output_node.args[0])
        values: list[SSAValue] = []
        names: list[str] = []
        constants: dict[int, Any] = {}
        for i, (spec, node) in enumerate(zip(self.signature.output_specs, returned, strict=True)):
            if spec.kind == OutputKind.USER_OUTPUT and isinstance(spec.arg, ConstantArgument):
                constants[i] = spec.arg.value
                continue
            if spec.kind != OutputKind.USER_OUTPUT:
                what = spec.target or getattr(spec.arg, "name", "?")
                raise UnsupportedProgram(
                    f"the program mutates '{what}' ({spec.kind.name}); only functional programs "
                    "are supported (call model.eval() for normalisation layers)"
                )
            size = size_output(node) if isinstance(spec.arg, SymIntArgument) else None
            if size is not None:
                constants[i] = size
                continue
            if not isinstance(spec.arg, TensorArgument) or not isinstance(node, torch.fx.Node):
                raise UnsupportedProgram(f"output {len(values)} is not a tensor ({spec.arg})")
            values.append(lowering.tensor(node))
            names.append(node.name)
        return values, names, constants


def shape_env_of(nodes: Sequence[torch.fx.Node]) -> Any:
    """The shape environment of the first symbolic size of the nodes' fake values, or None
    where they have none."""
    for node in nodes:
        val = node.meta.get("val")
        for size in val.shape if isinstance(val, torch.Tensor) else ():
            if isinstance(size, torch.SymInt):
                return size.node.shape_env
    return None


def convert_node(lowering: ImportBuilder, node: torch.fx.Node) -> Value:
    """The value of one call_function node: a mapped graph op, getitem, or a torch_call."""
    if node.target is operator.getitem:
        return select_output(lowering, node)
    if SIZE_SYMBOLS.get() is not None:
        return convert_symbolic_node(lowering, node)
    return convert_aten_node(lowering, node)


def convert_symbolic_node(lowering: ImportBuilder, node: torch.fx.Node) -> Value:
    """`convert_aten_node` where the import reads symbolic sizes: a size computation
    (`sym_size`, `operator.mul` of sizes, a comparison of sizes for a check, a float of sizes)
    has no graph value (the types of the tensors carry their sizes; an op that takes one as
    a number computes it: `ImportBuilder.operand`); an op that involves a symbolic size and
    whose converter fails, produces other types than torch's or ops that do not verify, or
    that would be a `torch_call` with a size or float argument (its arguments are
    constants), refuses in one line."""
    val = node.meta.get("val")
    if isinstance(val, torch.SymInt | torch.SymBool | torch.SymFloat):
        return None  # a size, a float of sizes or a check: operands read them (`operand`)
    if isinstance(val, int) and not isinstance(node.target, torch._ops.OpOverload):
        return None  # size arithmetic torch decided (`max(0, 3 - h % 2) // 2`): its users read it
    involved = has_symbolic_size(node.meta.get("val")) or any(
        has_symbolic_size(a.meta.get("val")) for a in node.all_input_nodes
    )
    if not involved:
        return convert_aten_node(lowering, node)
    name = str(node.target)

    def refuse(why: str) -> SymbolicSizeError:
        return SymbolicSizeError(
            f"{name} cannot import symbolic sizes yet (node '{node.name}'): {why}"
        )

    sizes = [a for a in node.all_input_nodes if is_scalar_node(a)]
    if sizes and CONVERTERS.get(name) is None:
        raise refuse(f"a size argument ('{sizes[0].name}') of a call torch runs")
    first = len(lowering.block.ops)
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        lowering.symbolic_result = tensor_type_of_val(val, node)
    try:
        value = convert_aten_node(lowering, node)
    except XfuseError:
        raise
    except AssertionError as e:  # check_types: the converter computed a size itself
        raise refuse(_first_line(e)) from e
    except Exception as e:  # a converter that does arithmetic on a SymInt
        raise refuse(f"{type(e).__name__}: {_first_line(e)}") from e
    finally:
        lowering.symbolic_result = None
    symbols = SIZE_SYMBOLS.get()
    assert symbols is not None
    for op in list(lowering.block.ops)[first:]:
        symbols.origins[op] = f"{name} cannot import symbolic sizes yet (node '{node.name}')"
    return value


def verify_symbolic(function: func.FuncOp, symbols: SizeSymbols) -> None:
    """Verify each op of a symbolic `@forward` (its table in place); an op that does not
    refuses the aten op it came from in one line."""
    for op in function.body.block.ops:
        try:
            op.verify()
        except Exception as e:
            why = _first_line(e).removeprefix("Operation does not verify: ")
            origin = symbols.origins.get(op, f"{op.name} does not verify")
            raise SymbolicSizeError(f"{origin}: {why}") from e


def convert_aten_node(lowering: ImportBuilder, node: torch.fx.Node) -> Value:
    """The value of one call_function node that is no getitem."""
    if not isinstance(node.target, torch._ops.OpOverload):
        raise node_error(node, "only aten operators can be imported")
    name = str(node.target)
    if name in SKIPPED:
        return None
    if node in lowering.checked_unread:
        return torch_call(lowering, node)
    converter = CONVERTERS.get(name)
    if converter is not None:
        value = converter(lowering, node, bind(node))
        if value is not None:
            check_types(node, value)
            return value
    return torch_call(lowering, node)


def select_output(lowering: ImportBuilder, node: torch.fx.Node) -> Value:
    source, index = node.args
    # torch.fx types getitem's source as any Argument; a non-Node source finds None.
    values = lowering.values.get(source)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    if not isinstance(values, list) or not isinstance(index, int):
        raise node_error(node, "getitem of a value that is not a list of tensors")
    return values[index]


def check_types(node: torch.fx.Node, value: Value) -> None:
    """A converter must produce exactly torch's result types; a mismatch is an importer bug.
    (A result it leaves None, e.g. an unused non-tensor one, is not checked.)"""
    produced = value if isinstance(value, list) else [value]
    val = node.meta.get("val")
    vals = list(val) if isinstance(val, list | tuple) else [val]
    for got, v in zip(produced, vals, strict=True):
        if got is None:
            continue
        want = tensor_type_of_val(v, node)
        if got.type != want:
            raise AssertionError(
                f"importer produced {got.type} for node '{node.name}', torch says {want}"
            )


def torch_call(lowering: ImportBuilder, node: torch.fx.Node) -> Value:
    """The node as an opaque `graph.torch_call`, its tensor arguments as operands. A tuple
    result that is no tensor in torch's trace (None where the operator's mask asks for no
    output, an int such as the longest sequence a CUDA attention kernel reports) has no SSA
    value, and nothing may read it: the call's results are its tensors alone, picked by
    position (the kernel itself may return tensors where its trace says None)."""
    val = node.meta.get("val")
    picks: list[int] | None = None
    if not isinstance(val, list | tuple):
        vals = [val]
    else:
        check_unread_non_tensors(node, val)
        picks = [i for i, v in enumerate(val) if isinstance(v, torch.Tensor)]
        vals = [val[i] for i in picks]
        if len(picks) == len(val):
            picks = None  # every item is a result
    target = str(node.target)
    args, kwargs = torch.fx.node.map_arg((node.args, dict(node.kwargs)), decided_size)
    results = iter(lowering.torch_call(target, args, kwargs, vals, node, picks))
    if isinstance(val, list | tuple):
        return [next(results) if isinstance(v, torch.Tensor) else None for v in val]
    return next(results)


def check_unread_non_tensors(node: torch.fx.Node, val: Sequence[Any]) -> None:
    """A tuple result that is no tensor must be None or unread: graph values are tensors."""
    read = used_outputs(node)
    for i, v in enumerate(val):
        if v is not None and not isinstance(v, torch.Tensor) and i in read:
            raise node_error(node, f"produces a {type(v).__name__} at result {i}, not a tensor")
