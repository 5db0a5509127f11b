"""
Programs with symbolic sizes on the CPU or a CUDA GPU (docs/dynamic-shapes.md, "runtime"):
what `xfuse.compile(..., dynamic_shapes=...)` runs (`xfuse.runtime.dynamic`).
`SymbolicProgram` fuses and lowers a `@forward` with a `graph.sizes` table once, compiles each
distinct kernel once for its device (through the kernel cache: `compile_kernels`), and runs
every call at the call's sizes:

- the sizes of a call are read from its inputs: each input symbol from the argument and dim
  that hold it, equal symbols agreeing, each in its range (which starts at 2: a size of 0 or
  1, or one outside the range, raises `SymbolicSizeError`; `DynamicProgram` specialises
  instead), static dims and dtypes as declared; derived symbols are computed (an argument dim
  that holds one must have its size: `y` of `2 * s0` is refused at any other), and one of 0 or
  1 (a floor division at a small input: `(s0 + 1) floordiv 2` at `s0 = 2`) raises
  `SymbolicSizeError` as well, and so do sizes that break a relation of the table (an equality
  torch's trace checked: `eq(s2 * s3, s0 * s1)`) or a condition (an inequality it assumed:
  `le(s1, s0)`); attention whose mask `attention-mask`
  dropped (a mask computed from sizes alone, causal or all true at the size hints) is checked
  at the call's sizes (the mask computed on the program's device, once per sizes): where it is not of that
  kind the call raises `MaskGuardError` (a `SymbolicSizeError`; `DynamicProgram` runs such a
  call specialised);
- a kernel launch allocates its outputs on the program's device from their symbolic shapes at
  those sizes and passes the kernel's size arguments (`xfuse.size_args`) and the trip count of
  its outer parallel loop (`xfuse.extent`'s symbol; None where it is static: the kernel's
  own) to `launch_sized` (`xfuse.backends.Kernel`'s); a CUDA kernel computes its grid from the
  size arguments, and one that gathers stops at an index out of range (`trap`, as eager's
  device-side assert) rather than reporting it through its flag (reading the flag back would
  synchronise);
- every other op of `@forward` (externs such as `graph.linear`, views) runs eagerly through the
  graph interpreter's prepared ops, with the call's sizes bound, on the program's device (the
  tensors an op makes, an iota's, are made there). A lone layout op that the static runtime
  runs as a torch view (a reshape; a permute or slice read only by externs) and that
  `@forward` does not return is no kernel either (`is_fresh_view`): a torch view at the
  call's sizes (`_View`; the interpreter's op would copy), where a kernel would copy every
  element at every call (an embedding table's `[V, D]` to `[1, V, D]`, an attention's heads
  merged back before its projection).

On the CPU the steps run as one generated Python function (`_CPURunner`, as the static
runtime's `make_runner`): a kernel's output goes to the next kernel as it is (no contiguity
check), a launch whose work at the call's sizes runs on the caller is its one foreign call,
an extern that is one torch call is that call, what the sizes decide is worked out once
per sizes, and an intermediate kernel output's buffer, once nothing reads it, goes to a pool
that the next call at the same sizes allocates from (`recycled_slots`; results stay fresh).

A group that `lower-to-loops` cannot lower on symbolic sizes is refused (the pass's one line):
the static runtime's op-by-op fallback is not wired to symbolic programs yet.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any, NamedTuple, cast

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException

from xfuse.backends import Backend, Kernel, get_backend
from xfuse.dialects import fusion, graph
from xfuse.dialects.torch_args import Operand
from xfuse.errors import (
    IndexOutOfRangeError,
    InputDeviceError,
    SizeCheckError,
    SymbolicSizeError,
)
from xfuse.interpreters.graph import SIZES, DirectCall, direct_call, find_function, prepare_op
from xfuse.ir import dtypes
from xfuse.ir.functions import kernel_functions
from xfuse.ir.names import ERROR_FLAG_ATTR, EXTENT_ATTR, SIZE_ARGS_ATTR, SIZES_ATTR
from xfuse.passes.lowering.lower_to_loops import LowerToLoopsPass, is_lone_kernel_op
from xfuse.passes.transforms.attention_mask import AttentionMaskPass, check_guards
from xfuse.passes.transforms.channels_last import ChannelsLastPass
from xfuse.pipeline import (
    AFTER_DEVICE_PASSES,
    PassFailedError,
    PassObserver,
    Pipeline,
    layout_pass,
    pipeline,
)
from xfuse.runtime.cache import KernelCache, default_cache
from xfuse.runtime.compiler import (
    AliasClasses,
    canonical_source,
    direct_call_text,
    is_fresh_view,
    kernel_name,
    lower_to_loops,
)
from xfuse.runtime.outputs import storage_address
from xfuse.runtime.steps import VIEW_IMPLS, View, fresh_results

FUSION = f"{AFTER_DEVICE_PASSES},fuse-greedy,group-cleanup,fold-linear"


def passes_text(cuda: bool, layout: ModulePass | None) -> str:
    """The fusion passes of a symbolic program (before `lower-to-loops`), on a CUDA GPU where
    `cuda`, with `layout` (the `channels-last` pass that `xfuse.pipeline.layout_pass` gives,
    or None)."""
    before = (
        "decompose",
        "depthwise-stencil",
        "convolution-bias" if cuda else None,
        None if layout is None else str(layout.pipeline_pass_spec()),
        "attention-mask{symbolic=true}",
        "pad-matmul" if cuda else None,
    )
    return ",".join([*(p for p in before if p is not None), FUSION])


DEFAULT_PASSES = passes_text(cuda=False, layout=None)
"""The fusion passes a symbolic program is built with on the CPU (before `lower-to-loops`):
`depthwise-stencil` makes depthwise convolutions stencils, as in the static pipeline, but for
those whose library call was measured faster, summed over the size hints and a few times
them (`measuring_sizes`, `xfuse.runtime.dynamic.chosen_passes`);
`attention-mask` runs attention whose mask is computed from sizes alone as `is_causal` (or
without the mask) where the mask is causal (or hides nothing) at the size hints, guarded at
every call's sizes (`mask_guards`); then, as in the static pipeline, `simplify`
(`xfuse.pipeline.AFTER_DEVICE_PASSES`) drops the sum over the classes of the cross-entropy
backward; `fold-linear` puts a transposed weight's matmul and a bias add that fusion left alone back
into one `graph.linear` (a library GEMM), where the transpose would be a kernel copying the
weight at every call."""

CUDA_PASSES = passes_text(cuda=True, layout=ChannelsLastPass())
"""`DEFAULT_PASSES` on a CUDA GPU, with the static pipeline's CUDA passes
(`xfuse.pipeline.device_passes`): `convolution-bias` (library convolutions leave their bias to
an add that fuses), `channels-last` (the activations between f16/bf16 convolutions live in NHWC
memory, where cuDNN's fast kernels read them, as the layout decision weighs the convolutions at
the size hints), and `pad-matmul` before fusion: a 16-bit product whose rows are not whole
16-byte vectors (a language model's head over 50,257 tokens) runs padded, cuBLAS's fast kernels,
and its result is sliced back along its static last dim, whatever the symbolic ones are."""


def default_passes(device: torch.device, channels_last: bool | None = None) -> str:
    """The fusion passes a symbolic program on `device` is built with, `compile`'s
    `channels_last` (or `XFUSE_CHANNELS_LAST`) honoured as the static pipeline does."""
    return passes_text(device.type == "cuda", layout_pass(channels_last, device))


MEASURE_SCALE = 16
"""Choices for a symbolic program are measured at its size hints and at its input symbols
`MEASURE_SCALE` times their hints (`measuring_sizes`): summed, the larger sizes' times weigh
most, as they do in a sweep of sizes (a depthwise convolution's library call, 3x its stencil's
time at batch 2 on two cores, is faster from a batch of about 16 up)."""


def measuring_sizes(module: ModuleOp) -> list[dict[str, int]]:
    """Where the choices of a symbolic program of `module` are measured (`xfuse.choices`):
    every size symbol of `@forward`'s table at its hint (the example inputs' sizes), then at
    `MEASURE_SCALE` times the input symbols' hints, each bounded by its range, where the
    table holds there (its relations, conditions, derived sizes of 2 or more). A library call's
    fixed costs weigh less at larger sizes, so that the faster side at the hint alone can be
    the slower one at a batch a few times larger."""
    table = find_function(module, "forward").attributes.get(SIZES_ATTR)
    assert isinstance(table, graph.SizesAttr)
    inputs = table.inputs()
    points = [table.evaluate({s.name: s.hint for s in inputs})]
    scaled = {
        s.name: s.hint * MEASURE_SCALE if s.high is None else min(s.high, s.hint * MEASURE_SCALE)
        for s in inputs
    }
    larger = table.evaluate(scaled)
    holds = table.too_small(larger) is None and table.relation_problem(larger) is None
    if holds and table.condition_problem(larger) is None and larger != points[0]:
        points.append(larger)
    return points


@dataclass
class _Launch:
    kernel: Kernel
    inputs: list[int]
    outputs: list[int]
    shapes: list[tuple[graph.Dim, ...]]
    dtypes: list[torch.dtype]
    size_args: list[str]
    extent: str | None
    """The size symbol its outer parallel loop runs over (`xfuse.extent`), None where that
    loop's extent is static (the kernel's own)."""
    device: torch.device
    error_flag: bool = False
    """The kernel takes an error flag after its outputs (it gathers): set, the launch raises
    eager's index error (a CUDA kernel traps instead: its flag is not read)."""
    in_shapes: list[tuple[graph.Dim, ...]] = field(default_factory=list[tuple[graph.Dim, ...]])
    """Its inputs' dims (the elements they hold at a call's sizes: with its outputs', the work
    the CPU runner's launch reports to the kernel, `_CPURunner`)."""
    owns_outputs: bool = field(default=True, init=False)
    """Its outputs are buffers of its own (the memory plan's `SlotStep.owns_outputs`)."""

    _sized: _SizedLaunch | None = field(default=None, repr=False, compare=False)
    """The output shapes, size arguments and extent at the sizes of the last call (`at`)."""

    def at(self, sizes: dict[str, int]) -> _SizedLaunch:
        """The output shapes, size arguments and extent at `sizes`, worked out once per sizes
        dict (a call whose layouts an earlier call had passes that call's: `DynamicProgram`)."""
        sized = self._sized
        if sized is None or sized.sizes is not sizes:
            sized = _SizedLaunch(
                sizes,
                [list(graph.dims_at(shape, sizes)) for shape in self.shapes],
                [sizes[s] for s in self.size_args],
                sizes[self.extent] if self.extent is not None else None,
            )
            self._sized = sized  # one assignment: threads read it whole
        return sized

    def run(self, values: list[torch.Tensor | None], sizes: dict[str, int]) -> None:
        sized = self.at(sizes)
        device = self.device
        buffers = [_tensor(values[i]).contiguous() for i in self.inputs]
        outs = [
            torch.empty(shape, dtype=t, device=device)
            for shape, t in zip(sized.shapes, self.dtypes, strict=True)
        ]
        if self.error_flag:
            flag = torch.zeros(1, dtype=torch.uint8, device=device)
            self.kernel.launch_sized([*buffers, *outs, flag], sized.size_args, sized.extent)
            if device.type == "cpu" and flag.item():
                raise IndexOutOfRangeError.in_kernel(self.kernel.name)
        else:
            self.kernel.launch_sized([*buffers, *outs], sized.size_args, sized.extent)
        for slot, out in zip(self.outputs, outs, strict=True):
            values[slot] = out


class _SizedLaunch(NamedTuple):
    """A launch's arguments at one call's sizes (`_Launch.at`)."""

    sizes: dict[str, int]
    """The sizes they were worked out at (compared by identity: bound sizes never change)."""
    shapes: list[list[int]]
    size_args: list[int]
    extent: int | None


@dataclass
class _Eager:
    run_op: Callable[[list[torch.Tensor]], list[torch.Tensor]]
    inputs: list[int]
    outputs: list[int]
    direct: DirectCall | None = None
    """The op as one torch call of its operands (`direct_call`), which the CPU runner writes
    out itself (None: it calls `run_op`)."""
    owns_outputs: bool = False
    """Its results never alias its operands (`fresh_results`)."""
    device: torch.device | None = None
    """The program's GPU, where the tensors it makes go (an iota's, a constant's): its
    operands' device, or this one where it has none, is the default device around its call
    alone (torch's device mode costs every torch call a Python hop); None on the CPU."""

    def run(self, values: list[torch.Tensor | None], sizes: dict[str, int]) -> None:
        args = [_tensor(values[i]) for i in self.inputs]
        if self.device is None:
            results = self.run_op(args)
        else:
            with args[0].device if args else self.device:
                results = self.run_op(args)
        for slot, out in zip(self.outputs, results, strict=True):
            values[slot] = out


SizedView = Callable[[torch.Tensor, dict[str, int]], torch.Tensor]
"""A layout op as a torch view of its operand at a call's sizes."""


@dataclass
class _View:
    """A lone layout op that runs as a torch view (`is_fresh_view`): no copy; a kernel that
    reads it makes it contiguous, an extern reads its strides."""

    view: View
    """The torch view it is (`VIEW_IMPLS`): its method (`permute`, `__getitem__`, `reshape`)
    and argument (a permutation, an index, or a reshape's dims with symbols' names among
    them, sized per call), which the CPU runner calls itself."""
    input: int
    output: int
    sized: SizedView = field(init=False, repr=False)
    """`view` at a call's sizes (`view_at_sizes`), for the step loop."""
    owns_outputs: bool = field(default=False, init=False)
    """A view's result is its operand's memory (the memory plan's `SlotStep.owns_outputs`)."""

    def __post_init__(self) -> None:
        self.sized = view_at_sizes(self.view)

    @property
    def inputs(self) -> tuple[int]:
        return (self.input,)

    @property
    def outputs(self) -> tuple[int]:
        return (self.output,)

    def run(self, values: list[torch.Tensor | None], sizes: dict[str, int]) -> None:
        values[self.output] = self.sized(_tensor(values[self.input]), sizes)


def view_at_sizes(view: View) -> SizedView:
    """A layout op's torch view (`VIEW_IMPLS`) at a call's sizes: a reshape to its dims at
    those sizes (torch copies only where the strides cannot be kept), a permute or slice as
    it is (a slice keeps a symbolic dim whole)."""
    if view.method == "reshape":
        dims = cast("tuple[graph.Dim, ...]", view.argument)
        return lambda x, sizes: x.reshape(graph.dims_at(dims, sizes))
    method = getattr(torch.Tensor, view.method)
    argument = view.argument
    return lambda x, sizes: method(x, argument)


def eager_call(op: Operation) -> DirectCall | None:
    """An extern of a symbolic program as one torch call of its operands: its `direct_call`,
    or `torch.matmul` for a product that is none (a batch of matrices by one matrix, a
    symbolic batch: what the interpreter's prepared matmul calls); None for any other op."""
    if len(op.results) != 1:
        return None
    found = direct_call(op)
    if found is None and isinstance(op, graph.MatmulOp):
        return torch.matmul, [Operand(0), Operand(1)], {}
    return found


def makes_kernel(op: Operation) -> bool:
    """Whether a lone op of a fused `@forward` is a kernel of its symbolic program: one that
    `lower-to-loops` lowers, other than a layout op that runs as a torch view
    (`is_fresh_view`)."""
    return is_lone_kernel_op(op) and not is_fresh_view(op)


def lower_symbolic(module: ModuleOp, device: torch.device) -> dict[str, list[str]]:
    """`lower-to-loops` of a fused module for `device`, leaving the lone ops that run as torch
    views (`makes_kernel`'s rule); a group it cannot lower is refused as the pass in a pipeline
    refuses it (`PassFailedError`: the pass's name and its one line). The names of the ops
    each kernel computes, by its symbol."""
    try:
        return lower_to_loops(module, device, leave=is_fresh_view)
    except DiagnosticException as e:
        raise PassFailedError(LowerToLoopsPass.name, str(e)) from e


def compile_kernels(
    module: ModuleOp,
    backend: Backend,
    cache: KernelCache,
    unit_ops: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Kernel]:
    """Each kernel of `module` for `backend`, by its symbol, through `cache` under its canonical
    module (`canonical_source`, as the static runtime keys its kernels): a kernel of the
    same loop IR as another (a layer's, the same in each layer) or as one the cache holds is
    compiled once; the others are compiled ahead in worker processes where the backend has
    them (`KernelCache.compile_ahead`: CUDA's PTX), each loaded under the name profilers show
    (`kernel_name` of its ops in `unit_ops`, as the static runtime names its kernels)."""
    sources = {
        kernel.sym_name.data: canonical_source(kernel) for kernel in kernel_functions(module)
    }
    cache.compile_ahead(backend, list(sources.values()))
    ops = unit_ops or {}
    return {
        name: cache.kernel(backend, source, kernel_name(ops.get(name) or [name], name))
        for name, source in sources.items()
    }


def small_size_message(symbol: graph.SizeSymbol, sizes: dict[str, int]) -> str:
    """Why a call whose derived symbol `symbol` is 0 or 1 (or less) is refused."""
    inputs = ", ".join(f"{name} = {sizes[name]}" for name in sorted(symbol_inputs(symbol, sizes)))
    return (
        f"size symbol '{symbol.name}' = {symbol.definition} is {sizes[symbol.name]} at {inputs}: "
        f"a symbol's size is {graph.MIN_SIZE} or more (sizes 0 and 1 are specialised: this "
        "program does not run them)"
    )


def check_sizes(problem: str | None) -> None:
    """Raise `SizeCheckError` with a call's `problem` (`graph.SizesAttr.relation_problem`'s
    or `condition_problem`'s line), where it has one."""
    if problem is not None:
        raise SizeCheckError(problem)


def symbol_inputs(symbol: graph.SizeSymbol, sizes: dict[str, int]) -> set[str]:
    """The symbols `symbol`'s definition names (those a message shows the sizes of)."""
    assert symbol.expr is not None
    return {name for name in symbol.expr.symbols if name in sizes}


ArgumentCheck = tuple[int, torch.dtype, tuple[int, ...] | None, tuple[graph.Dim, ...]]
"""What `SymbolicProgram.bind` checks of an argument: its rank, its dtype, its shape where
every dim is static (one comparison checks them all; None where a symbol is among them), and
its dims (static sizes and symbols' names)."""


def argument_check(dims: Sequence[graph.Dim], dtype: torch.dtype) -> ArgumentCheck:
    static = tuple(d for d in dims if isinstance(d, int))
    return len(dims), dtype, static if len(static) == len(dims) else None, tuple(dims)


def on_device_type(device: torch.device) -> Callable[[torch.Tensor], bool]:
    """Whether a tensor is on a device of `device`'s type (any index): a property read for
    the CPU and CUDA, where `tensor.device` would make a `torch.device` at every call."""
    if device.type == "cpu":
        return attrgetter("is_cpu")
    if device.type == "cuda":
        return attrgetter("is_cuda")
    return lambda t: t.device.type == device.type


def _tensor(value: torch.Tensor | None) -> torch.Tensor:
    assert value is not None, "a value used before the step that computes it"
    return value


class SymbolicProgram:
    """`@forward` of a module with size symbols, fused, lowered and compiled once for `device`
    (the CPU or a CUDA GPU); call it with tensors on that device of any sizes its symbols allow
    (see the module docstring). `passes` are its fusion passes (`default_passes(device)` unless
    given); `observer` is called around each fusion pass (`xfuse.pipeline.PassObserver`); its
    kernels come from `cache` (`default_cache()` unless given: `compile_kernels`)."""

    def __init__(
        self,
        module: ModuleOp,
        *,
        passes: str | Sequence[ModulePass] | None = None,
        backend: Backend | None = None,
        observer: PassObserver | None = None,
        device: torch.device | str = "cpu",
        cache: KernelCache | None = None,
    ) -> None:
        self.device = torch.device(device)
        module = module.clone()
        forward = find_function(module, "forward")
        table = forward.attributes.get(SIZES_ATTR)
        if not isinstance(table, graph.SizesAttr):
            raise SymbolicSizeError(
                "a symbolic program needs a function with size symbols (a graph.sizes table); "
                "@forward has none"
            )
        self.input_symbols = table.inputs()
        """The table's input symbols (those a call's inputs give), in its order."""
        self.arguments = [graph.dims_of(a) for a in forward.body.block.args]
        self.argument_dtypes = [dtypes.to_torch(graph.dtype_of(a)) for a in forward.body.block.args]
        self._checks = [
            argument_check(dims, dtype)
            for dims, dtype in zip(self.arguments, self.argument_dtypes, strict=True)
        ]
        """What `bind` checks of each argument, read once (`argument_check`)."""
        self._ranges = [(s.name, s.low, s.high) for s in self.input_symbols]
        """Each input symbol's name and range, in the table's order."""
        inputs = {s.name for s in self.input_symbols}
        self._held_derived = sorted(
            {d for dims in self.arguments for d in dims if isinstance(d, str) and d not in inputs}
        )
        """The derived symbols that some argument dim holds (`y` of `2 * s0`): a call's
        arguments must have their computed sizes there (`_derive`)."""
        self._on_device = on_device_type(self.device)
        passes = default_passes(self.device) if passes is None else passes
        chain = pipeline(passes) if isinstance(passes, str) else Pipeline(tuple(passes))
        fusion_passes = replace(chain, observer=observer).verified_at_end()
        fusion_passes.apply(module)
        table = forward.attributes[SIZES_ATTR]
        assert isinstance(table, graph.SizesAttr)
        self.table = table
        """The table after fusion: the passes may add derived symbols (a padded dim's)."""
        self.derives = len(self.input_symbols) < len(table.symbols)
        """Whether the table has derived symbols (a call computes and checks them)."""
        self.fusion_passes = fusion_passes.passes
        """The fusion passes as they ran (their `decisions`, for an explanation)."""
        self.mask_guards = [
            g for p in self.fusion_passes if isinstance(p, AttentionMaskPass) for g in p.guards
        ]
        """The masks that attention runs without (`attention-mask`'s guards): `bind` refuses
        a call at sizes where one is not of the kind it had at the size hints."""
        self.fused = module.clone()
        """The module after fusion, before `lower-to-loops`: groups, not kernels."""
        unit_ops = lower_symbolic(module, self.device)
        self.module = module
        self.backend = backend if backend is not None else get_backend(self.device.type)
        self.kernels = compile_kernels(
            module, self.backend, default_cache() if cache is None else cache, unit_ops
        )
        self.steps: list[_Launch | _Eager | _View] = []
        self.results: list[int] = []
        self._plan(forward)

    @property
    def kernel_count(self) -> int:
        """How many kernels were compiled (once, when the program was built)."""
        return len(self.kernels)

    def _plan(self, forward: func.FuncOp) -> None:
        slots: dict[SSAValue, int] = {a: i for i, a in enumerate(forward.body.block.args)}

        def slot_of(v: SSAValue) -> int:
            return slots.setdefault(v, len(slots))

        kernels = {k.sym_name.data: k for k in kernel_functions(self.module)}
        for op in forward.body.block.ops:
            if isinstance(op, func.ReturnOp):
                self.results = [slots[v] for v in op.operands]
                continue
            inputs = [slots[v] for v in op.operands]
            outputs = [slot_of(r) for r in op.results]
            if isinstance(op, fusion.LaunchOp):
                name = op.callee.root_reference.data
                ir = kernels[name]
                size_args = ir.attributes.get(SIZE_ARGS_ATTR)
                extent = ir.attributes.get(EXTENT_ATTR)
                self.steps.append(
                    _Launch(
                        self.kernels[name],
                        inputs,
                        outputs,
                        [graph.dims_of(r) for r in op.results],
                        [dtypes.to_torch(graph.dtype_of(r)) for r in op.results],
                        [s.data for s in size_args] if isinstance(size_args, ArrayAttr) else [],  # pyright: ignore[reportUnknownMemberType]
                        extent.data if isinstance(extent, StringAttr) else None,
                        self.device,
                        ERROR_FLAG_ATTR in ir.attributes,
                        [graph.dims_of(v) for v in op.operands],
                    )
                )
            elif is_fresh_view(op):
                view = VIEW_IMPLS[op.name](op)
                self.steps.append(_View(view, inputs[0], outputs[0]))
            else:
                direct = eager_call(op)
                fresh = fresh_results(op)
                on = None if self.device.type == "cpu" else self.device
                self.steps.append(_Eager(prepare_op(op), inputs, outputs, direct, fresh, on))
        self.slot_count = len(slots)
        arguments = len(forward.body.block.args)
        shared = {
            o
            for st in self.steps
            if isinstance(st, _Eager) and not st.owns_outputs
            for o in st.outputs
        }
        self.passed_through = tuple(k for k, s in enumerate(self.results) if s < arguments)
        """Results that are an argument itself (a `clone` or `contiguous` of an input is the
        input in the graph's value semantics): `fresh` copies them."""
        self.maybe_shared = tuple(k for k, s in enumerate(self.results) if s in shared)
        """Results of eager ops that may return an operand's memory (`fresh_results`):
        `fresh` copies those that share an argument's or another result's memory."""
        torch_made = {o for st in self.steps if isinstance(st, _Eager | _View) for o in st.outputs}
        self.torch_made = tuple(k for k, s in enumerate(self.results) if s in torch_made)
        """Results of torch calls and views, which may come back in their operands' layout
        (`diagonal_scatter` of a gapped input, whose `contiguous()` the graph's value
        semantics drop): `fresh` makes those that are not contiguous so, as the graph's
        results are."""
        self._unset: tuple[None, ...] = (None,) * self.slot_count
        self._cpu_runner = _CPURunner(self) if self.device.type == "cpu" else None

    def bind(self, inputs: Sequence[torch.Tensor]) -> dict[str, int]:
        """Every symbol's size in a call of `inputs`, checked (see the module docstring)."""
        if len(inputs) != len(self.arguments):
            raise SymbolicSizeError(
                f"@forward takes {len(self.arguments)} arguments, got {len(inputs)}"
            )
        found: dict[str, int] = {}
        on_device = self._on_device
        for i, (t, (rank, dtype, static, dims)) in enumerate(
            zip(inputs, self._checks, strict=True)
        ):
            if not on_device(t):
                raise InputDeviceError(
                    f"argument {i} is a tensor on {t.device}, the program was compiled for "
                    f"{self.device}"
                )
            shape = t.shape
            if len(shape) != rank or t.dtype != dtype:
                raise SymbolicSizeError(
                    f"argument {i} expects a {dtype} tensor of shape "
                    f"{graph.fmt_shape(self.arguments[i])}, got {t.dtype} {list(shape)}"
                )
            if static is not None and shape == static:
                continue  # every dim static and as declared
            for k, (d, n) in enumerate(zip(dims, shape, strict=True)):
                if isinstance(d, int):
                    if d != n:
                        raise SymbolicSizeError(
                            f"argument {i} dim {k} is static {d}, got size {n} "
                            f"(shape {list(shape)})"
                        )
                elif found.setdefault(d, n) != n:
                    raise SymbolicSizeError(
                        f"size symbol '{d}' is {found[d]} in one argument and {n} in argument "
                        f"{i} (dim {k})"
                    )
        for name, low, high in self._ranges:
            size = found[name]
            if size < low or (high is not None and size > high):
                raise SymbolicSizeError(
                    f"size symbol '{name}' is {size}, outside its range "
                    f"[{low}, {'inf' if high is None else high}] "
                    "(sizes 0 and 1 are specialised: this program does not run them)"
                )
        sizes = {name: found[name] for name, _, _ in self._ranges}
        if self.table.relations:
            check_sizes(self.table.relation_problem(sizes))
        if self.derives:
            sizes = self._derive(inputs, sizes, found)
        if self.table.conditions:
            check_sizes(self.table.condition_problem(sizes))
        if self.mask_guards:
            check_guards(self.mask_guards, sizes, self.device)  # MaskGuardError if one fails
        return sizes

    def _derive(
        self, inputs: Sequence[torch.Tensor], sizes: dict[str, int], found: dict[str, int]
    ) -> dict[str, int]:
        """Every symbol's size from the input symbols' (`sizes`), checked: none is below
        `graph.MIN_SIZE`, and each argument dim that holds a derived symbol has its size
        (`found`: the sizes the arguments hold)."""
        sizes = self.table.evaluate(sizes)
        small = self.table.too_small(sizes)
        if small is not None:
            raise SymbolicSizeError(small_size_message(small, sizes))
        for name in self._held_derived:
            if sizes[name] != (n := found[name]):
                i, k = next(
                    (i, k)
                    for i, (dims, t) in enumerate(zip(self.arguments, inputs, strict=True))
                    for k, (d, m) in enumerate(zip(dims, t.shape, strict=True))
                    if d == name and m == n
                )
                raise SymbolicSizeError(
                    f"argument {i} dim {k} is size symbol '{name}', which is {sizes[name]} at "
                    f"this call's sizes, got size {n}"
                )
        return sizes

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        return self.run(inputs, self.bind(inputs))

    def fresh(
        self, results: list[torch.Tensor], inputs: Sequence[torch.Tensor]
    ) -> list[torch.Tensor]:
        """`results` of a call of `inputs` as memory of their own, as eager returns its fresh
        outputs: those `passed_through` copied, and those `maybe_shared` that share memory
        with an input or another result copied (contiguous; a dynamic program lays them out
        in eager's order after, `dynamic.in_memory_order`), and those `torch_made` that are not
        contiguous made so."""
        if not self.passed_through and not self.maybe_shared and not self.torch_made:
            return results
        out = list(results)
        for k in self.passed_through:
            out[k] = out[k].clone(memory_format=torch.contiguous_format)
        for k in self.torch_made:
            if not out[k].is_contiguous():
                out[k] = out[k].contiguous()
        if self.maybe_shared:
            others = [t for k, t in enumerate(out) if k not in self.maybe_shared]
            held = {storage_address(t) for t in (*inputs, *others)}
            for k in self.maybe_shared:
                memory = storage_address(out[k])
                if memory > 0 and memory in held:  # an empty storage's 0 shares nothing
                    out[k] = out[k].clone(memory_format=torch.contiguous_format)
                    memory = storage_address(out[k])
                held.add(memory)
        return out

    def run(self, inputs: Sequence[torch.Tensor], sizes: dict[str, int]) -> list[torch.Tensor]:
        """The results of a call of `inputs` whose sizes `bind` read (`sizes`, which no one
        changes after: a launch keeps its arguments at the last call's sizes, `_Launch.at`)."""
        if self._cpu_runner is not None:  # the CPU's: its steps as code (`_CPURunner`)
            return self._cpu_runner.run(inputs, sizes)
        values: list[torch.Tensor | None] = [*inputs, *self._unset[len(inputs) :]]
        token = SIZES.set(sizes)
        try:
            for step in self.steps:
                step.run(values, sizes)
        finally:
            SIZES.reset(token)
        return [_tensor(values[i]) for i in self.results]


def recycled_slots(program: SymbolicProgram) -> dict[int, int]:
    """The kernel outputs of `program` whose buffers a CPU call reuses once nothing reads them,
    each with the step after which that is: the static runtime's memory plan
    (`AliasClasses.recycled`), with the arguments and results pinned (results are fresh
    tensors)."""
    owned = [s for step in program.steps if isinstance(step, _Launch) for s in step.outputs]
    pinned = (*range(len(program.arguments)), *program.results)
    return AliasClasses(program.steps).recycled(owned, pinned)


Frame = tuple[Any, ...]
"""What a CPU runner's code reads at one call's sizes (`_CPURunner.frame`): per launch its
output shapes, its direct entry (or None), extent and size arguments; per symbolic reshape
view its dims."""

FRAMES_KEPT = 256
"""How many sizes' frames a CPU runner keeps (beyond the last call's): a sweep over more
sizes works the others out again."""


class _CPURunner:
    """A CPU symbolic program's steps as the straight-line code of one Python function, made
    once (as the static runtime's `make_runner`): values are local variables; a kernel's inputs
    are made contiguous only where they are not another kernel's output (torch.empty's,
    contiguous); a launch whose work at the call's sizes runs on this thread (the kernel's
    `inline_entry`) is its one foreign call `f(0, extent, *pointers, *sizes)`, any other goes
    through `launch_sized`; an extern that is one torch call (`direct_call`) is that call; a
    view is its torch method; a value is dropped after its last reader, an intermediate
    kernel output's buffer (`recycled_slots`) returns to the call's pool (`take`), which the
    call gives back for the next call at its sizes. What depends on the
    sizes (output shapes, direct entries, extents, size arguments, reshape dims) is worked out
    once per sizes (`frame`).

        def run(args, sizes):
            s0, s1 = args
            o0_0, f0, e0, z0, r2 = frame(sizes)
            b0 = s0 if s0.is_contiguous() else s0.contiguous()
            s2 = empty(o0_0, dtype=d0_0, device=dev)
            if f0 is not None:
                f0(0, e0, b0.data_ptr(), s2.data_ptr(), *z0)
            else:
                launch0([b0, s2], z0, e0)
            b0 = None
            s3 = s2.reshape(r2)
            s2 = None
            s4 = ext3(s3, s1, a3_2)
            return [s4]
    """

    def __init__(self, program: SymbolicProgram) -> None:
        self.steps = program.steps
        self.device = program.device
        self._cached: tuple[dict[str, int], Frame] | None = None
        """The last call's sizes and frame (one assignment: threads read it whole)."""
        self._frames: dict[tuple[tuple[str, int], ...], Frame] = {}
        self._local = threading.local()
        self._pools: list[tuple[Frame | None, dict[Any, list[torch.Tensor]]]] = []
        """Free intermediate buffers of finished calls, each pool tagged with the frame (the
        sizes) its buffers were made at; a running call takes one (`take`)."""
        self.recycled = recycled_slots(program)
        """The kernel outputs whose buffers return to the call's pool once nothing reads them
        (`recycled_slots`), slot -> the step after which they do."""
        self.run = self._generate(program)

    def frame(self, sizes: dict[str, int]) -> Frame:
        """What the code reads at `sizes`: the last call's when `sizes` is its dict, else
        one kept for equal sizes, else worked out."""
        cached = self._cached
        if cached is not None and cached[0] is sizes:
            return cached[1]
        key = tuple(sorted(sizes.items()))
        found = self._frames.get(key)
        if found is None:
            found = self._work_out(sizes)
            if len(self._frames) >= FRAMES_KEPT:
                self._frames.clear()
            self._frames[key] = found
        self._cached = (sizes, found)
        return found

    def _work_out(self, sizes: dict[str, int]) -> Frame:
        items: list[Any] = []

        for step in self.steps:
            if isinstance(step, _Launch):
                shapes = [graph.dims_at(shape, sizes) for shape in step.shapes]
                items += shapes
                items += [
                    (shape, dtype)
                    for shape, dtype, slot in zip(shapes, step.dtypes, step.outputs, strict=True)
                    if slot in self.recycled
                ]
                work = sum(math.prod(graph.dims_at(dims, sizes)) for dims in step.in_shapes)
                work += sum(map(math.prod, shapes)) + (1 if step.error_flag else 0)
                inline = getattr(step.kernel, "inline_entry", None)
                entry = inline(work) if inline is not None else None
                extent = sizes[step.extent] if step.extent is not None else None
                if entry is not None and extent is None:
                    extent = entry[1]  # the kernel's static extent
                items += [
                    entry[0] if entry is not None else None,
                    extent,
                    tuple(sizes[s] for s in step.size_args),
                ]
            elif isinstance(step, _View) and step.view.method == "reshape":
                dims = cast("tuple[graph.Dim, ...]", step.view.argument)
                if not all(isinstance(d, int) for d in dims):
                    items.append(graph.dims_at(dims, sizes))
        return tuple(items)

    def take(self, frame: Frame) -> tuple[Frame | None, dict[Any, list[torch.Tensor]]]:
        """A pool of free buffers for a call at `frame`'s sizes: one a finished call at those
        sizes gave back (`give`), else an empty one (a pool of other sizes is dropped: what
        it holds is freed). With grad enabled, a pool no call gave back: an extern's autograd
        graph may keep a buffer the call releases."""
        if torch.is_grad_enabled():
            return None, {}
        try:
            pool = self._pools.pop()
        except IndexError:
            return frame, {}
        return pool if pool[0] is frame else (frame, {})

    def flag(self) -> tuple[int, Any, torch.Tensor]:
        """This thread's error flag (one byte, made once per thread): its address, a numpy
        view that reads and clears it without a torch op, and the tensor."""
        found: tuple[int, Any, torch.Tensor] | None = getattr(self._local, "flag", None)
        if found is None:
            tensor = torch.zeros(1, dtype=torch.uint8)
            found = self._local.flag = (tensor.data_ptr(), tensor.numpy(), tensor)
        return found

    def _generate(
        self, program: SymbolicProgram
    ) -> Callable[[Sequence[torch.Tensor], dict[str, int]], list[torch.Tensor]]:
        steps = self.steps
        names: dict[str, object] = {
            "frame": self.frame,
            "flag": self.flag,
            "empty": torch.empty,
            "dev": self.device,
            "take": self.take,
            "give": self._pools.append,
        }
        recycled = self.recycled
        results = program.results
        last: dict[int, int] = {}
        for i, step in enumerate(steps):
            for slot in step.inputs:
                last[slot] = i
        body: list[str] = []
        frame_names: list[str] = []
        kernel_outputs: set[int] = set()
        """Slots that hold a kernel's output (torch.empty's: contiguous)."""
        keys: dict[int, str] = {}
        """A recycled slot -> the frame's name of its buffer's (shape, dtype)."""
        prepared = False
        flags = False
        argument_count = len(program.arguments)
        for i, step in enumerate(steps):
            if isinstance(step, _Launch):
                outs = [f"s{s}" for s in step.outputs]
                shapes = [f"o{i}_{j}" for j in range(len(outs))]
                frame_names += shapes
                buffers: list[str] = []
                held: list[str] = []
                for k, s in enumerate(step.inputs):
                    if s in kernel_outputs:
                        buffers.append(f"s{s}")
                    else:
                        b = f"b{k}"
                        body.append(f"b{k} = s{s} if s{s}.is_contiguous() else s{s}.contiguous()")
                        buffers.append(b)
                        held.append(b)
                for j, (out, shape) in enumerate(zip(outs, shapes, strict=True)):
                    names[f"d{i}_{j}"] = step.dtypes[j]
                    fresh = f"empty({shape}, dtype=d{i}_{j}, device=dev)"
                    if step.outputs[j] in recycled:  # a free buffer of its shape, if any
                        frame_names.append(f"k{i}_{j}")
                        keys[step.outputs[j]] = f"k{i}_{j}"
                        body.append(f"fl = free.get(k{i}_{j})")
                        body.append(f"{out} = fl.pop() if fl else {fresh}")
                    else:
                        body.append(f"{out} = {fresh}")
                frame_names += [f"f{i}", f"e{i}", f"z{i}"]
                names[f"launch{i}"] = step.kernel.launch_sized
                pointers = [f"{b}.data_ptr()" for b in (*buffers, *outs)]
                tensors = [*buffers, *outs]
                if step.error_flag:
                    flags = True
                    names[f"oob{i}"] = IndexOutOfRangeError.in_kernel
                    names[f"name{i}"] = step.kernel.name
                    body.append("seen[0] = 0")
                    pointers.append("fp")
                    tensors.append("ft")
                body += [
                    f"if f{i} is not None:",
                    f"    f{i}(0, e{i}, {', '.join(pointers)}, *z{i})",
                    "else:",
                    f"    launch{i}([{', '.join(tensors)}], z{i}, e{i})",
                ]
                if step.error_flag:
                    body += ["if seen[0]:", f"    raise oob{i}(name{i})"]
                if held:
                    body.append(f"{' = '.join(held)} = None")
                kernel_outputs.update(step.outputs)
            elif isinstance(step, _View):
                source = f"s{step.input}"
                if step.view.method == "reshape":
                    dims = cast("tuple[graph.Dim, ...]", step.view.argument)
                    if all(isinstance(d, int) for d in dims):
                        names[f"r{i}"] = dims
                    else:
                        frame_names.append(f"r{i}")
                    body.append(f"s{step.output} = {source}.reshape(r{i})")
                else:
                    names[f"arg{i}"] = step.view.argument
                    body.append(f"s{step.output} = {source}.{step.view.method}(arg{i})")
            elif step.direct is not None:
                operands = [f"s{s}" for s in step.inputs]
                call = direct_call_text(i, step.direct, operands, names)
                body.append(f"s{step.outputs[0]} = {call}")
            else:
                prepared = True
                names[f"step{i}"] = step.run_op
                call = f"step{i}([{', '.join(f's{s}' for s in step.inputs)}])"
                outs = [f"s{s}" for s in step.outputs]
                if outs:
                    body.append(f"{', '.join(outs)}{',' if len(outs) == 1 else ''} = {call}")
                else:
                    body.append(call)
            dead = {
                s
                for s in (*step.inputs, *step.outputs)
                if last.get(s, -1) <= i and s not in results and s not in recycled
            }
            for s in sorted(slot for slot, end in recycled.items() if end == i):
                body += [
                    f"fl = free.get({keys[s]})",
                    "if fl is None:",
                    f"    free[{keys[s]}] = [s{s}]",
                    "else:",
                    f"    fl.append(s{s})",
                ]
                dead.add(s)
            body += [f"s{s} = None" for s in sorted(dead)]
        lines = ["def run(args, sizes):"]
        if argument_count:
            lines.append(
                f"    {', '.join(f's{k}' for k in range(argument_count))}"
                f"{',' if argument_count == 1 else ''} = args"
            )
        if frame_names:
            lines.append("    fr = frame(sizes)")
            lines.append(f"    {', '.join(frame_names)}{',' if len(frame_names) == 1 else ''} = fr")
        if flags:
            lines.append("    fp, seen, ft = flag()")
        if recycled:
            lines.append("    pool = take(fr)")
            lines.append("    free = pool[1]")
            body.append("give(pool)")
        returned = f"return [{', '.join(f's{s}' for s in results)}]"
        if prepared:  # a prepared op reads the call's sizes (`SIZES`): an iota's, a reshape's
            names["SIZES"] = SIZES
            lines.append("    token = SIZES.set(sizes)")
            lines.append("    try:")
            lines += [f"        {line}" for line in [*body, returned]]
            lines += ["    finally:", "        SIZES.reset(token)"]
        else:
            lines += [f"    {line}" for line in [*body, returned]]
        self.code = "\n".join(lines) + "\n"
        """The runner's source (for tests and curious people)."""
        namespace: dict[str, object] = dict(names)
        exec(compile(self.code, "<xfuse symbolic program>", "exec"), namespace)  # noqa: S102 - code made above from slot numbers only
        return cast(
            "Callable[[Sequence[torch.Tensor], dict[str, int]], list[torch.Tensor]]",
            namespace["run"],
        )
