"""
`xfuse.compile(..., dynamic_shapes=...)` on the CPU or a CUDA GPU (docs/dynamic-shapes.md,
"runtime"): the
program is exported once with torch.export's `dynamic_shapes` (`Dim`s), imported with size
symbols, fused, lowered and compiled once (`SymbolicProgram`), and every call runs those kernels
at the call's sizes. `DynamicProgram` is what `compile` returns then. On CUDA each shape of its
calls is captured as a CUDA graph on its second call and replayed after, for a bounded number
of shapes; calls of other shapes run with plain launches (`xfuse.runtime.shape_graphs`).

Refused at compile time, in one line (`InvalidArgumentError`), rather than compiled statically
where the result would differ: a device other than the CPU or CUDA, or a `pipeline` (an
option the symbolic path does not honour yet); `channels_last` picks the layout pass as it does
for a static program. The kernels are kept in
the kernel cache (`cache`, else `default_cache()`), under the same keys as the static
runtime's (`xfuse.runtime.symbolic.compile_kernels`). A group that the symbolic
lowering cannot lower refuses the program (`lower-to-loops`' line), and so does one whose
eager outputs a dynamic program would not return alike (`output_orders`: a view of an input or
of another output through sizes that are not polynomials of the input sizes, or strides of no dense order that are not
polynomials of the sizes; an output dense in another order than contiguous, a channels-last
map, is returned in that order, `in_memory_order`; one of no dense order with the strides its
polynomials give at the call's sizes, `strided_outputs`). At call time: a size of 0 or 1 that
the input's `Dim` allows specialises, as Inductor's does (`DynamicProgram.specialises`: a
static program compiled for the call's shape runs it); a size outside a symbol's range (0 and
1 where the `Dim` does not allow them) raises `SymbolicSizeError`; a call at sizes where an
attention mask that the program dropped, computed from sizes alone, is not the causal (or
all-true) mask it was at the example's sizes (`MaskGuardError`) runs specialised too; a call that needs autograd or
runs under `torch.autocast`, a tensor off the program's device, inputs of another structure, or a Python
scalar other than the example's (torch.export specialised it) raise their own one-line errors.

A plain call (the example's number of positional tensors, where the example is such a call)
whose layouts an earlier call had (each input's type, sizes, strides, dtype and device, and the
module state's: `DynamicProgram.plans`) runs with that call's plan: its sizes, checked then, its
CPU scalars and its CUDA graph's shape; it skips the pytree walk and `SymbolicProgram.bind`.
What layouts do not settle (the module's mode, grad and autocast) is checked at every call.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple, NoReturn

import torch
from torch.utils import _pytree as pytree
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from xfuse.backends import Backend, check_device, get_backend
from xfuse.choices import Compile, CompileAhead, Verdict, choose_passes
from xfuse.dialects import graph
from xfuse.errors import (
    AutogradUnsupportedError,
    ExportError,
    InputDeviceError,
    InvalidArgumentError,
    SymbolicSizeError,
    UnsupportedInputError,
    UnsupportedProgram,
    XfuseError,
)
from xfuse.frontend.builder import inverse_permutation, repeats_range
from xfuse.frontend.export import (
    EXPORT_LOCK,
    ModelOrFn,
    flat_builder,
    no_stack_traces,
    short_cause,
    torch_logs_quiet,
)
from xfuse.frontend.importer import ImportedProgram
from xfuse.frontend.outputs import OutputRule, ViewReplay, chain_at_sizes, replay
from xfuse.frontend.pytrees import picker
from xfuse.ir.names import SIZES_ATTR
from xfuse.passes.transforms.attention_mask import MaskGuardError
from xfuse.pipeline import DEFAULT_PIPELINE, PipelineOptions, parse_passes
from xfuse.report.op_index import OpIndex
from xfuse.runtime.cache import KernelCache, default_cache
from xfuse.runtime.compile_workers import start_workers
from xfuse.runtime.compiler import output_sources, outputs_only_from
from xfuse.runtime.cuda_graphs import cuda_graphs_enabled
from xfuse.runtime.executor import CompiledProgram, is_cpu_scalar
from xfuse.runtime.fallback import FallbackMode, reason_of
from xfuse.runtime.outputs import fresh_copy
from xfuse.runtime.shape_graphs import ShapeGraphs, ShapeKey, shape_key
from xfuse.runtime.state import FunctionValues, ModuleState
from xfuse.runtime.steps import BufferPool
from xfuse.runtime.symbolic import SymbolicProgram, default_passes, measuring_sizes

Tensor = torch.Tensor

NO_ARGUMENTS: frozenset[int] = frozenset()


class CallPlan(NamedTuple):
    """How a call runs, worked out from its `@forward` arguments' layouts alone (sizes,
    dtypes, devices, strides), so that a later call of the same layouts runs with it."""

    sizes: dict[str, int]
    """Every size symbol's size (`SymbolicProgram.bind`)."""
    scalars: frozenset[int]
    """The arguments that are CPU scalars (`DynamicProgram._cpu_scalars`)."""
    cpu_results: frozenset[int]
    """The results computed from those CPU scalars alone, which eager returns on the CPU."""
    key: ShapeKey | None
    """The shape of its CUDA graph (`shape_key`); None without graphs."""
    strides: dict[int, tuple[int, ...]]
    """The strides of each output eager returns dense in no order (`DynamicProgram.strided`)
    at these sizes."""
    chains: dict[int, tuple[ViewReplay, ...]]
    """Each view output's chain (`DynamicProgram.views`, `output_views`) at these sizes
    (`chain_at_sizes`)."""


MAX_PLANS = 256
"""Plain calls' plans a program keeps (`DynamicProgram.plans`)."""

TENSORS = repeat(Tensor)
"""`Tensor` without end: `all(map(isinstance, args, TENSORS))` checks that every argument is a
tensor in one C loop."""


def _layout(t: Tensor) -> Hashable:
    """What a plan depends on of one input: its Python type, sizes, strides, dtype, device."""
    return type(t), t.shape, t.stride(), t.dtype, t.device


def check_dynamic_options(
    device: Any,
    dynamic_shapes: Any,
    *,
    pipeline: str | None = None,
) -> torch.device:
    """`compile`'s options that a program with symbolic sizes cannot honour yet, refused in one
    `InvalidArgumentError` line each; returns the device (CUDA's with its index: the current
    device where none was given)."""
    if not isinstance(dynamic_shapes, dict | tuple | list):
        raise InvalidArgumentError(
            "dynamic_shapes must be torch.export's: a dict or tuple of {dim: torch.export.Dim} "
            f"per input, got a {type(dynamic_shapes).__name__}"
        )
    try:
        parsed = torch.device(device) if isinstance(device, str | torch.device) else None
    except RuntimeError:  # torch's own "Invalid device string"
        parsed = None
    if parsed is None or parsed.type not in ("cpu", "cuda"):
        raise InvalidArgumentError(
            f"dynamic_shapes compiles for the CPU and CUDA only, device '{device}' was asked "
            "for (compile without dynamic_shapes for a program per shape there)"
        )
    if pipeline is not None:
        raise InvalidArgumentError(
            "dynamic_shapes does not take a pipeline (symbolic programs are fused with the "
            "default one)"
        )
    if parsed.type == "cuda":
        parsed = check_device(parsed)  # CUDAUnavailable without a GPU
        if parsed.index is None:
            parsed = torch.device("cuda", torch.cuda.current_device())
    return parsed


@dataclass(frozen=True)
class AskedDim:
    """A dim that `dynamic_shapes` made dynamic: the `Dim`'s name and the range it asked for
    (None: no bound given)."""

    name: str
    low: int | None
    high: int | None


def asked_dims(dynamic_shapes: Any, input_names: Sequence[str]) -> dict[tuple[str, int], AskedDim]:
    """The `Dim`s of `dynamic_shapes` by (input name, dim), for the inputs named as `@forward`'s
    arguments: a dict's entries by name, a tuple's by position (where it has one per input);
    entries of nested inputs, or that are no `Dim`, are left out."""
    if isinstance(dynamic_shapes, dict):
        entries = [(name, dynamic_shapes.get(name)) for name in input_names]
    elif len(dynamic_shapes) == len(input_names):
        entries = list(zip(input_names, dynamic_shapes, strict=True))
    else:
        entries = []
    found: dict[tuple[str, int], AskedDim] = {}
    for name, spec in entries:
        if not isinstance(spec, dict):
            continue
        for dim, value in spec.items():
            label = getattr(value, "__name__", None)
            if isinstance(dim, int) and isinstance(label, str):
                low, high = getattr(value, "min", None), getattr(value, "max", None)
                found[(name, dim)] = AskedDim(label, _bound(low), _bound(high))
    return found


def _bound(value: Any) -> int | None:
    """A `Dim`'s bound as an int; None for none or an unbounded one (torch's int64 max)."""
    if isinstance(value, int) and 0 <= value < 2**62:
        return value
    return None


def export_guards(
    exported: torch.export.ExportedProgram, inputs: Sequence[graph.SizeSymbol]
) -> list[str]:
    """The guards on size symbols that torch.export's trace recorded (its `ShapeEnv`'s, as
    sympy prints them, after `torch.export: `): the relations between sizes the program was
    traced under, but for those that only repeat the range of one of the input symbols
    `inputs` (`repeats_range`), which the range's own guard says."""
    for node in exported.graph.nodes:
        value = node.meta.get("val")
        if not isinstance(value, Tensor):
            continue
        for size in value.shape:
            if isinstance(size, torch.SymInt):
                env = size.node.shape_env
                return [
                    f"torch.export: {g.expr}"
                    for g in env.guards
                    if g.expr.free_symbols and not repeats_range(g.expr, inputs)
                ]
    return []


def chosen_passes(
    module: ModuleOp,
    device: torch.device,
    cache: KernelCache,
    compile_fn: Compile,
    ahead: CompileAhead | None = None,
    channels_last: bool | None = None,
) -> tuple[tuple[ModulePass, ...], list[Verdict]]:
    """The passes a symbolic program of `module` is built with on `device`
    (`default_passes`, with `channels_last`), its depthwise convolutions whose library call is
    faster kept as library calls (`xfuse.choices`: each timed at the sizes `measuring_sizes` gives, the times summed,
    or read from `cache`), and every verdict."""
    passes = parse_passes(default_passes(device, channels_last))
    sizes = measuring_sizes(module)
    return choose_passes(passes, module, device, cache, compile_fn, ahead, sizes)


class DynamicProgram:
    """A model or function compiled once for every size its `dynamic_shapes` allow, on the CPU
    or a CUDA GPU (`device`); call it like the model (see the module docstring). `kernel_count` kernels were compiled,
    once, when it was built; `symbols` are the program's size symbols (`graph.sizes`). On CUDA
    each shape of its calls runs as a CUDA graph, a few shapes at most (`graphs`), unless
    `cuda_graphs` is False or `XFUSE_CUDA_GRAPHS=0`; the example inputs at the positions
    `static_inputs` stay where they are between calls (parameters passed as inputs): a graph
    reads them in place, as it reads the module's parameters and buffers. Its kernels come
    from `cache` (`default_cache()` unless given); the compile workers of its backend start
    before the export (`start_workers`), so that their imports overlap it."""

    def __init__(
        self,
        model_or_fn: ModelOrFn,
        example_inputs: tuple[Any, ...],
        dynamic_shapes: Any,
        example_kwargs: dict[str, Any] | None = None,
        backend: Backend | None = None,
        fallback: FallbackMode = "eager",
        device: torch.device | str = "cpu",
        cuda_graphs: bool = True,
        static_inputs: tuple[int, ...] = (),
        cache: KernelCache | None = None,
        channels_last: bool | None = None,
    ) -> None:
        from xfuse.frontend.importer import import_program, wrap_function
        from xfuse.frontend.pytrees import export_support

        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        backend = get_backend(self.device.type) if backend is None else backend
        start_workers(backend)  # their imports overlap exporting and fusing
        model = (
            model_or_fn if isinstance(model_or_fn, torch.nn.Module) else wrap_function(model_or_fn)
        )
        kwargs = example_kwargs or {}
        with EXPORT_LOCK, no_stack_traces(), torch.no_grad():
            try:
                with export_support(), torch_logs_quiet():
                    exported = torch.export.export(
                        model, example_inputs, kwargs, strict=False, dynamic_shapes=dynamic_shapes
                    )
            except Exception as e:  # noqa: BLE001 - torch.export's errors are long: one line
                raise ExportError(
                    f"xfuse: torch.export could not export the program with dynamic_shapes: "
                    f"{reason_of(e)}"
                ) from short_cause(e)
            program = import_program(exported, symbolic=True)  # its refusals are one line
            check_symbolic(program.module)
            eager = eager_layouts(model, example_inputs, kwargs)
            strided = strided_outputs(program, eager)
            orders = output_orders(program.output_rules, eager, strided, program.hidden_orders)
            program.return_view_bases()
        self.program = program
        self.orders = orders
        """The tensor outputs eager returns dense but not contiguous, and their memory orders
        (`output_orders`)."""
        self.strided = strided
        """The tensor outputs eager returns dense in no order, and their strides as polynomials
        of the size symbols (`strided_outputs`)."""
        self.views = input_views(program.output_rules)
        """The outputs eager returns as views of an input or parameter (`input_views`)."""
        self.output_views = output_views(program.output_rules)
        """The outputs eager returns as views of another output (`output_views`)."""
        hidden_viewed = {r.index for r in self.output_views.values()} - set(
            range(len(program.output_rules) - program.hidden_outputs)
        )
        self.hidden_orders = {
            k: order
            for k in sorted(hidden_viewed)
            if (order := program.hidden_orders[k]) != tuple(range(len(order)))
        }
        """The hidden outputs that views replay on and eager lays out in another order than
        row-major, and that order (`ImportedProgram.hidden_orders`): one copy each a call."""
        self.op_index = OpIndex()
        """The ops the fusion decisions name (for `xfuse.explain`)."""
        self.cache = default_cache() if cache is None else cache
        """Where the program's kernels (and its `specialised` program's) are kept."""
        from xfuse.runtime.driver import compile_choices_ahead, measuring_compile

        passes, self.choices = chosen_passes(
            program.module,
            self.device,
            self.cache,
            measuring_compile,
            compile_choices_ahead,
            channels_last,
        )
        """The depthwise convolutions' verdicts (`xfuse.choices`, `measuring_sizes`)."""
        self.compiled = SymbolicProgram(
            program.module,
            passes=passes,
            backend=backend,
            observer=self.op_index.observe,
            device=self.device,
            cache=self.cache,
        )
        self.scalar_args = (
            [k for k, dims in enumerate(self.compiled.arguments) if not dims] if self.on_gpu else []
        )
        """`@forward`'s 0-d arguments in a program on a GPU: where a call may pass a CPU scalar
        (a 0-d CPU tensor, which eager's GPU kernels take as a value); none on the CPU."""
        arguments = range(len(program.function.body.block.args))
        users = [i for i in arguments if i not in program.param_names]
        self.input_args = dict(zip(users, program.input_names, strict=False))
        """`@forward`'s argument -> the name of the user input bound there."""
        self.asked = asked_dims(dynamic_shapes, program.input_names)
        """The `Dim`s asked for, by (input name, dim)."""
        self.model = model_or_fn
        self.fallback: FallbackMode = fallback
        self.channels_last = channels_last
        """`compile`'s `channels_last` (`xfuse.runtime.symbolic.default_passes`), which the
        `specialised` program takes too."""
        self.specialised: CompiledProgram | None = None
        """The static program of calls with a size of 0 or 1 (`specialises`), or where an
        attention mask guard fails (`MaskGuardError`), built at the
        first such call; it compiles each of their shapes once."""
        self.guards = export_guards(exported, self.compiled.table.inputs())
        self.guards += [g.describe() for g in self.compiled.mask_guards]
        """The guards on size symbols, one line each: those the trace recorded, torch.export's
        (`export_guards`), and dynamo's where torch.compile made the program; and those of
        the attention masks the program runs without (`MaskGuard.describe`)."""
        self.in_spec = pytree.tree_flatten((example_inputs, kwargs))[1]
        leaves = pytree.tree_leaves((example_inputs, kwargs))
        self.constants = {i: leaves[i] for i in sorted(program.constant_inputs)}
        self.state = ModuleState(model_or_fn) if isinstance(model_or_fn, torch.nn.Module) else None
        self.training = model_or_fn.training if isinstance(model_or_fn, torch.nn.Module) else None
        self.default_dtype = torch.get_default_dtype()
        """The default dtype the forward's factories were traced with."""
        self.attributes = self.state.attributes.token() if self.state is not None else None
        """The module's Python values the program was traced with (`ModuleAttributes`)."""
        self.values = FunctionValues(model_or_fn) if self.state is None else None
        """A function's constants from its globals and closure."""
        self.bind = program.binder(len(leaves), self.state.names if self.state else ())
        self.unflatten = flat_builder(exported.call_spec.out_spec)
        """The model's output structure from flat outputs (`ImportedProgram.outputs`)."""
        self.sources = output_sources(program.function)
        """The `@forward` arguments each result is computed from."""
        self.cuda_graphs = cuda_graphs
        self.static_inputs = static_inputs
        self.in_place = sorted(
            {*program.param_names, *self._static_args(example_inputs, leaves, static_inputs)}
        )
        """The `@forward` arguments a CUDA graph reads where they are: parameters, buffers
        and lifted constants, and the `static_inputs`; it copies the others in."""
        self.copied = [i for i in arguments if i not in self.in_place]
        """The other `@forward` arguments (the user's inputs): a graph copies them into buffers
        of its own, so their strides are part of a call's shape (`shape_key`)."""
        self.graphs = (
            ShapeGraphs(self.compiled, run_symbolic, self.device)
            if self.on_gpu and cuda_graphs_enabled(cuda_graphs)
            else None
        )
        """The CUDA graphs of the program's shapes (`xfuse.runtime.shape_graphs`); None on the
        CPU or with graphs off."""
        self._pool = BufferPool(self.device)
        """What `GraphRunner.run` passes the steps (a symbolic program's launches allocate
        their outputs: it stays empty)."""
        self._read_in_place = picker(self.in_place)
        plain = not kwargs and not self.constants and len(users) == len(leaves)
        self.plain_arity = len(example_inputs) if plain else -1
        """The number of positional tensors of a plain call, -1 where the example inputs are
        no such call: a call of that many tensors and no keywords has the example inputs'
        structure, and binds each of them to a `@forward` argument (`plans` sees them all)."""
        self.plans: dict[Hashable, CallPlan] = {}
        """The plans of plain calls by their layouts (`_layouts`), `MAX_PLANS` at most: a
        call of the same layouts as an earlier one skips the pytree walk and the checks of
        `SymbolicProgram.bind`, which that call passed."""
        self.statics_guarded = False
        """Whether the caller's guards hold the `static_inputs`' sizes, strides, dtypes and
        devices (dynamo's, for the parameters it lifts: `xfuse.dynamo.symbolic_program`): a
        plain call whose static inputs are the last call's tensors then keys its plan on the
        other inputs' layouts alone."""
        self._statics = picker(static_inputs)
        """A call's static inputs, as a tuple (one C call)."""
        self._unguarded = picker([i for i in range(len(example_inputs)) if i not in static_inputs])
        """A call's other inputs, as a tuple (one C call)."""
        self._seen_statics: tuple[Any, ...] | None = None
        """The static inputs of the last plain call keyed on every layout."""

    @property
    def kernel_count(self) -> int:
        """How many kernels were compiled (once, when the program was built)."""
        return self.compiled.kernel_count

    @property
    def symbols(self) -> str:
        """The size symbols, as the `graph.sizes` table prints them."""
        return ", ".join(str(s) for s in self.compiled.table.data)

    def _tensors(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Tensor]:
        """The call's tensor leaves and state, checked, as `@forward`'s arguments."""
        leaves, spec = pytree.tree_flatten((args, kwargs))
        if spec != self.in_spec:
            raise UnsupportedInputError(
                f"a call with {len(leaves)} inputs of another structure than the example "
                f"inputs' ({self.in_spec.num_leaves}): dynamic_shapes compiles one structure"
            )
        for i, value in self.constants.items():
            if type(leaves[i]) is not type(value) or leaves[i] != value:
                raise UnsupportedInputError(
                    f"input {i} is {leaves[i]!r}, the program was compiled for {value!r} "
                    "(torch.export specialises Python scalars)"
                )
        state = self.state.tensors() if self.state is not None else []
        self._check_compiled_settings()
        tensors = [x for i, x in enumerate(leaves) if i not in self.constants]
        for x in [*tensors, *state]:
            if not isinstance(x, Tensor):
                raise UnsupportedInputError(f"an input is a {type(x).__name__}, not a tensor")
            if x.device != self.device and not (self.on_gpu and is_cpu_scalar(x)):
                raise InputDeviceError(
                    f"a tensor on {x.device} in a call of a program compiled for "
                    f"{'the CPU' if self.device.type == 'cpu' else self.device}"
                )
        self._check_modes(tensors, state)
        return self.bind(leaves, state)

    def _check_compiled_settings(self) -> None:
        """The module in the mode it was compiled in (training or eval), with the Python
        values it was compiled with, under the default dtype it was compiled under."""
        if self.state is not None and self.state.attributes.token() != self.attributes:
            assert self.attributes is not None
            self._changed(
                f"of the module changed ({self.state.attributes.change(self.attributes)})"
            )
        if self.values is not None and self.values.token() != 0:
            self._changed(f"the function reads changed ({self.values.change(0)})")
        if torch.get_default_dtype() != self.default_dtype:
            raise UnsupportedInputError(
                f"the default dtype is {torch.get_default_dtype()} now; dynamic_shapes compiled "
                f"the program under {self.default_dtype} (compile it again under this one)"
            )
        if self.state is not None and self.state.module.training != self.training:
            raise UnsupportedInputError(
                f"the module is in {'training' if self.state.module.training else 'eval'} mode "
                "now; dynamic_shapes compiled it in the other"
            )

    @staticmethod
    def _changed(what: str) -> NoReturn:
        raise UnsupportedInputError(
            f"a Python value {what}; dynamic_shapes compiled the program with the other "
            "(compile it again)"
        )

    def _check_modes(self, tensors: Sequence[Tensor], state: Sequence[Tensor]) -> None:
        """No autograd (grad enabled with a tensor that requires grad) and no autocast."""
        if torch.is_grad_enabled() and any(t.requires_grad for t in [*tensors, *state]):
            raise AutogradUnsupportedError(
                "a call with grad enabled and an input or parameter that requires grad: "
                "dynamic_shapes compiles inference only yet (call under torch.no_grad())"
            )
        if torch.is_autocast_enabled(self.device.type):
            raise AutogradUnsupportedError(
                "a call under torch.autocast: dynamic_shapes compiles no autocast yet"
            )

    def _static_args(
        self, example_inputs: tuple[Any, ...], leaves: list[Any], positions: tuple[int, ...]
    ) -> list[int]:
        """The `@forward` arguments that the tensor example inputs at `positions` bind to (the
        binder picks the leaves themselves, so they are found by identity, once)."""
        found = {id(example_inputs[p]) for p in positions if isinstance(example_inputs[p], Tensor)}
        if not found:
            return []
        state = self.state.tensors() if self.state is not None else []
        return [i for i, t in enumerate(self.bind(leaves, state)) if id(t) in found]

    @property
    def on_gpu(self) -> bool:
        return self.device.type != "cpu"

    def specialises(self, tensors: Sequence[Tensor]) -> bool:
        """Whether a call of `@forward`'s arguments `tensors` has a size of 0 or 1 where a
        symbol is read, and its `Dim` was asked from that size or lower: the program runs such
        sizes specialised, as Inductor does (a static program compiled for the call's shape),
        where its symbols start at 2. A size its `Dim` does not allow is refused at the call."""
        for symbol in self.compiled.input_symbols:
            assert symbol.source is not None
            arg, dim = symbol.source
            if arg >= len(tensors) or dim >= tensors[arg].dim():
                continue
            size = tensors[arg].shape[dim]
            name = self.input_args.get(arg)
            asked = self.asked.get((name, dim)) if name is not None else None
            if size < 2 and asked is not None and asked.low is not None and asked.low <= size:
                return True
        return False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        plan = layouts = None
        if not kwargs and len(args) == self.plain_arity and all(map(isinstance, args, TENSORS)):
            state = self.state.tensors() if self.state is not None else []
            layouts = self._layouts(args, state)
            plan = self.plans.get(layouts) if layouts is not None else None
            if plan is not None:  # the layouts of a call that passed every check
                self._check_compiled_settings()
                self._check_modes(args, state)
                bound = self.bind(args, state)
                tensors = self._on_device(bound, plan.scalars)
        if plan is None:
            bound = self._tensors(args, kwargs)
            if self.specialises(bound):
                return self._specialised(args, kwargs)(*args, **kwargs)
            scalars = self._cpu_scalars(bound)
            tensors = self._on_device(bound, scalars)
            try:
                plan = self._plan(tensors, scalars)
            except MaskGuardError:  # a dropped mask is not causal (or all true) at these sizes
                return self._specialised(args, kwargs)(*args, **kwargs)
            if layouts is not None:
                self._keep(layouts, plan)
        results = self.compiled.fresh(self._run(tensors, plan), tensors)
        if plan.cpu_results:  # what eager computes from CPU scalars alone, it returns on the CPU
            results = [r.cpu() if k in plan.cpu_results else r for k, r in enumerate(results)]
        visible = self.program.visible(results)
        for k, order in self.orders.items():
            visible[k] = in_memory_order(visible[k], order)
        for k, strides in plan.strides.items():
            visible[k] = fresh_copy(visible[k], strides)
        for k, rule in self.views.items():  # of the caller's tensors (a CPU scalar's too)
            visible[k] = replay(plan.chains[k], bound[rule.index])
        hidden = {k: in_memory_order(results[k], o) for k, o in self.hidden_orders.items()}
        for k, rule in self.output_views.items():  # of a visible result, or a hidden one
            i = rule.index
            base = visible[i] if i < len(visible) else hidden[i] if i in hidden else results[i]
            visible[k] = replay(plan.chains[k], base)
        return self.unflatten(self.program.outputs(visible, plan.sizes))

    def _layouts(self, args: tuple[Any, ...], state: Sequence[Tensor]) -> Hashable | None:
        """What the plan of a plain call (tensors `args`) depends on: each input's Python
        type, sizes, strides, dtype and device, and the module state's layouts and mode
        (`ModuleState.key`); None where some state is no tensor (`_tensors` says which)."""
        if self.statics_guarded and self.state is None:
            statics = self._statics(args)
            if self._seen_statics is not None and all(
                map(operator.is_, statics, self._seen_statics)
            ):
                return "guarded", tuple([_layout(t) for t in self._unguarded(args)])
            self._seen_statics = statics  # the next call with these takes the key above
        inputs = tuple([_layout(t) for t in args])
        if self.state is None:
            return inputs
        try:
            return inputs, self.state.key(state)
        except XfuseError:  # state that is no tensor
            return None

    def _keep(self, layouts: Hashable, plan: CallPlan) -> None:
        """Keep a plain call's plan for its layouts; all are dropped past `MAX_PLANS` (a
        caller of ever new shapes holds no more than that)."""
        if len(self.plans) >= MAX_PLANS:
            self.plans.clear()
        self.plans[layouts] = plan

    def _plan(self, tensors: list[Tensor], scalars: frozenset[int]) -> CallPlan:
        """How a call of `@forward`'s arguments `tensors` (checked, not specialised; its CPU
        scalars `scalars` moved to the device, as it runs them) runs: its sizes, checked
        (`SymbolicProgram.bind`), its CPU scalars and the results computed from them alone,
        and its CUDA graph's shape."""
        sizes = self.compiled.bind(tensors)
        key = None
        if self.graphs is not None:
            key = shape_key(sizes, [tensors[i] for i in self.copied])
        cpu_results = frozenset(outputs_only_from(self.sources, scalars))
        strides = {k: tuple(e.evaluate(sizes) for e in exprs) for k, exprs in self.strided.items()}
        rules = self.views | self.output_views
        chains = {k: chain_at_sizes(rule.chain, sizes) for k, rule in rules.items()}
        return CallPlan(sizes, scalars, cpu_results, key, strides, chains)

    def _on_device(self, tensors: list[Tensor], scalars: frozenset[int]) -> list[Tensor]:
        """`tensors` with the CPU scalars at the positions `scalars` moved to the device
        (0-d CPU tensors, which eager's GPU kernels take as values)."""
        if not scalars:
            return tensors
        return [x.to(self.device) if k in scalars else x for k, x in enumerate(tensors)]

    def _run(self, tensors: list[Tensor], plan: CallPlan) -> list[Tensor]:
        """The symbolic program's results for `@forward`'s arguments `tensors`: replayed from
        the CUDA graph of their shape where it has one (`graphs`), else with plain launches."""
        runner = None
        if self.graphs is not None and plan.key is not None:
            runner = self.graphs.runner_for(plan.key)
        if runner is None:
            return self.compiled.run(tensors, plan.sizes)
        return runner.run(tensors, self._read_in_place(tensors), self._pool, owned)

    def _cpu_scalars(self, tensors: Sequence[Tensor]) -> frozenset[int]:
        """The `@forward` arguments of a call that are CPU scalars: those of `scalar_args`
        whose tensor is on the CPU (`_tensors` refused any other tensor off the device)."""
        if not self.scalar_args:
            return NO_ARGUMENTS
        return frozenset(k for k in self.scalar_args if tensors[k].is_cpu)

    def _specialised(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CompiledProgram:
        """The static program of the calls `specialises` picks, compiled at the first of them
        (from its inputs) with the default pipeline and this program's fallback mode."""
        if self.specialised is None:
            from xfuse.runtime.driver import compile_program

            self.specialised = compile_program(
                self.model,
                args,
                self.device,
                PipelineOptions(DEFAULT_PIPELINE, self.channels_last),
                example_kwargs=kwargs,
                quiet=True,
                cuda_graphs=self.cuda_graphs,
                fallback=self.fallback,
                static_inputs=self.static_inputs,
                cache=self.cache,
            )
        return self.specialised


def run_symbolic(
    program: SymbolicProgram, args: Sequence[Tensor], pool: BufferPool
) -> list[Tensor]:
    """A symbolic program's steps as a `GraphRunner` runs them (its `RunSteps`): a call, at
    the sizes of `args` (each launch allocates its outputs: `pool` is not used)."""
    return program(*args)


def owned(results: list[Tensor], copy_out: bool) -> list[Tensor]:
    """A symbolic program's results as the caller's (a `GraphRunner`'s `Finish`): graph memory
    the runner keeps (`copy_out`) copied, as fresh contiguous tensors (those eager returns in
    another memory order are laid out so after, `in_memory_order`)."""
    return [r.clone() for r in results] if copy_out else results


def check_symbolic(module: ModuleOp) -> None:
    """Refuse, in one line, an imported program without size symbols: torch.export or the
    decompositions after it specialised every dynamic dim to the example's size (the program
    would serve that size alone)."""
    forward = next(
        (op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == "forward"),
        None,
    )
    if forward is None or SIZES_ATTR not in forward.attributes:
        raise SymbolicSizeError(
            "the imported program has no size symbols: torch.export or its decompositions "
            "specialised every dynamic dim to the example's size"
        )


def eager_layouts(model: torch.nn.Module, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What eager returns for `inputs` (sizes, strides, dtypes), read from a run on fake tensors
    of the inputs' and the module's tensors' layouts: no input's values can fail it (dynamo's
    example inputs are zeros, and an integer division by one raises in eager), and the module's
    buffers and the caller's RNG are left as they were. Where fake tensors cannot run the model
    (a size read from data, an op without a fake kernel) it runs on the inputs themselves and
    copies of the module's buffers, the RNG restored."""
    from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily

    try:
        with unset_fake_temporarily(), FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fakes = pytree.tree_map_only(Tensor, mode.from_tensor, (inputs, kwargs))
            return _call_on(model, mode.from_tensor, *fakes)
    except Exception:  # noqa: BLE001 - what fake tensors cannot run, eager runs on the inputs
        with torch.random.fork_rng(devices=[]):
            return _call_on(model, _buffer_copy, inputs, kwargs)


def _buffer_copy(t: Tensor) -> Tensor:
    """A copy of a buffer (which a forward may update in place); a parameter as it is."""
    return t if isinstance(t, torch.nn.Parameter) else t.clone()


def _call_on(
    model: torch.nn.Module, stand_in: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """`model` called with each of its parameters and buffers replaced by `stand_in` of it."""
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    stand_ins = {name: stand_in(t) for name, t in state.items()}
    return torch.func.functional_call(model, stand_ins, inputs, kwargs)


def strided_outputs(program: ImportedProgram, eager: Any) -> dict[int, tuple[graph.SizeExpr, ...]]:
    """The outputs that eager returns with strides dense in no order (a slice or expand of an
    intermediate: `h[:, -1]` has `h`'s row stride), whose strides the importer read as
    polynomials of the size symbols (`ImportedProgram.output_strides`) and that give eager's
    strides at the example's sizes, by their index among the tensor outputs: each call copies
    the program's contiguous result into memory of those strides at its sizes
    (`fresh_copy`; the storage offset is 0, as a static program's)."""
    found = program.output_strides
    table = program.function.attributes.get(SIZES_ATTR)
    if not found or not isinstance(table, graph.SizesAttr):
        return {}
    hints = table.hints
    outputs = [x for x in pytree.tree_leaves(eager) if isinstance(x, Tensor)]
    return {
        i: strides
        for i, strides in found.items()
        if i < len(outputs)
        and not outputs[i].is_contiguous()
        and tuple(e.evaluate(hints) for e in strides) == outputs[i].stride()
    }


def output_orders(
    rules: Sequence[OutputRule],
    eager: Any,
    strided: Collection[int] = (),
    hidden_orders: Collection[int] = (),
) -> dict[int, tuple[int, ...]]:
    """The memory order of each output that eager returns dense but not contiguous (a permute
    of a contiguous tensor, as a channels-last map or a transposed product is), by its index
    among the tensor outputs (`memory_order`): the program returns such an output with eager's
    strides (`in_memory_order`). A view of an input is replayed on the call's input
    (`input_views`), a view of another output on that output's result (`output_views`), or of
    an intermediate that two or more outputs view and none is (a hidden output) on its result
    where the intermediate is dense in one order at every size (`hidden_orders`), an output of no
    dense order with the strides it has at the call's sizes (`strided`, `strided_outputs`).
    Refused, in one line: outputs that eager returns as memory a dynamic program would not
    return alike: a view through sizes that are not polynomials of the input sizes (views
    through sizes of the call that are, `SizeArg`s, replay at each call's sizes), a view of
    an intermediate that eager does
    not return whose layout is dense in no one order at every size, or strides of no dense order
    (overlapping or with gaps) that are not polynomials of the sizes."""
    outputs = [x for x in pytree.tree_leaves(eager) if isinstance(x, Tensor)]
    for i, rule in enumerate(rules[: len(outputs)]):
        of = "an input" if rule.base == "arg" else "another output"
        sized = next((v for v in rule.chain if not _constant_args(v)), None)
        if sized is not None:
            raise UnsupportedProgram(
                f"output {i} is a view of {of} in eager through sizes of the call that are "
                f"not polynomials of the input sizes ({sized.op}), which dynamic_shapes does "
                "not return as a view yet"
            )
        if rule.base == "output" and rule.index >= len(outputs):
            if rule.index not in hidden_orders:
                raise UnsupportedProgram(
                    f"output {i} is a view of an intermediate that eager does not return, "
                    "whose layout dynamic_shapes does not reproduce at every size (dense in no "
                    "one order, or laid out otherwise by torch's decompositions)"
                )
    views = {*input_views(rules), *output_views(rules)}
    orders: dict[int, tuple[int, ...]] = {}
    for i, t in enumerate(outputs):
        if i in views or i in strided or t.is_contiguous():
            continue
        order = memory_order(t)
        if order is None:
            raise UnsupportedProgram(
                f"eager returns output {i} with strides {tuple(t.stride())} (not dense in any "
                "order), which dynamic_shapes does not reproduce yet"
            )
        orders[i] = order
    return orders


def input_views(rules: Sequence[OutputRule]) -> dict[int, OutputRule]:
    """The outputs that eager returns as views of a `@forward` argument (an input, a
    parameter), by their index among the outputs: each call replays the view's chain on its
    own argument (a chain of views whose arguments are constants, as `view_chain` takes
    them, serves every size), so the output shares the caller's memory as in eager."""
    return {i: rule for i, rule in enumerate(rules) if rule.base == "arg"}


def output_views(rules: Sequence[OutputRule]) -> dict[int, OutputRule]:
    """The outputs that eager returns as views of another output or of a hidden one (an
    intermediate that two or more outputs view), by their index among the outputs: each call
    replays the view's chain on that output's result (after its memory order,
    `output_orders`), so they share memory as in eager."""
    return {i: rule for i, rule in enumerate(rules) if rule.base == "output"}


def _constant_args(view: ViewReplay) -> bool:
    """Whether a view's arguments are constants or sizes of the call (`SizeArg`s), which
    `replay` evaluates at each call's sizes; not a size of the trace, an FX node, that the
    importer found no polynomial of the input sizes for."""
    leaves = pytree.tree_leaves((view.args, view.kwargs))
    return not any(isinstance(a, torch.fx.Node | torch.SymInt) for a in leaves)


def memory_order(t: Tensor) -> tuple[int, ...] | None:
    """The dims of `t` from outermost to innermost in memory where `t` is a permute of a
    contiguous tensor with exactly `t`'s strides (size-1 dims included), else None. A size-1
    dim shares its stride with the dim just inside it (eager's `(1, 64, 64)` of a `[64, 1, 3]`
    map): among dims of one stride, size-1 dims go outside the others, or inside them."""
    strides = t.stride()
    for inside in (False, True):
        order = tuple(
            sorted(range(t.dim()), key=lambda d: (-strides[d], (t.shape[d] == 1) == inside))
        )
        dense = torch.empty([t.shape[d] for d in order], device="meta").permute(
            inverse_permutation(order)
        )
        if dense.stride() == t.stride():
            return order
    return None


def in_memory_order(result: Tensor, order: tuple[int, ...]) -> Tensor:
    """`result` (contiguous) as a tensor of the same values laid out in `order`
    (`memory_order`): one copy, its strides eager's at the call's sizes."""
    return result.permute(order).contiguous().permute(inverse_permutation(order))


def compile_dynamic(
    model_or_fn: ModelOrFn,
    example_inputs: Sequence[Any],
    device: Any,
    dynamic_shapes: Any,
    *,
    pipeline: str | None = None,
    cache: KernelCache | None = None,
    channels_last: bool | None = None,
    example_kwargs: dict[str, Any] | None = None,
    fallback: FallbackMode = "eager",
    cuda_graphs: bool = True,
    static_inputs: tuple[int, ...] = (),
) -> DynamicProgram:
    """`xfuse.compile` with `dynamic_shapes`: its options checked, the program built."""
    target = check_dynamic_options(device, dynamic_shapes, pipeline=pipeline)
    return DynamicProgram(
        model_or_fn,
        tuple(example_inputs),
        dynamic_shapes,
        example_kwargs,
        fallback=fallback,
        device=target,
        cuda_graphs=cuda_graphs,
        static_inputs=static_inputs,
        cache=cache,
        channels_last=channels_last,
    )
