"""
AOTAutograd for xfuse: a program's forward and backward, each compiled by xfuse.

AOTAutograd traces a program's forward and backward together, functionalises them (batch
norm's running statistics become outputs that its runtime copies back into the buffers) and
cuts them apart with the min-cut partitioner (what the backward reads is saved or recomputed,
as for Inductor). Each part is an aten-level FX graph that a `PartCompiler` compiles like any
program: imported into `graph` IR, fused and lowered by the same passes; the backward's ops
the importer knows fuse into kernels, the rest run as library calls inside the program.

Two front ends hand it programs: the torch.compile backend, a graph dynamo captured for
training (`xfuse.training`), and `xfuse.compile`, a call that needs autograd or runs under
autocast (`xfuse.differentiable`).

The min-cut partitioner saves other tensors for the backward than eager's autograd (relu's
mask, not its output; tanh's input, to compute tanh again). What eager saves of a program's
inputs, parameters and outputs is found once, on fake tensors (`eager_saved`); their versions
after each forward are checked before its backward (`VersionCheck`, eager's error), and an
input or output only the partitioner saves is saved as a copy (`partition_as_eager`).

AOTAutograd calls a part's compiled function with the boxed calling convention (one list of
arguments, which the callee may clear so that saved tensors die early); it compiles the
backward at the first backward. A part xfuse cannot compile runs as the FX graph AOTAutograd
made (eagerly) with a `FallbackWarning`, or, in strict mode, raises `EagerFallbackError`.

A graph dynamo traced with symbolic sizes (`dynamic=True`, or its automatic dynamic shapes)
gives parts whose example inputs are SymInts and fake tensors with symbolic sizes: the torch.compile
backend's part compilers hand them to `PartCompiler.symbolic` (`xfuse.dynamo.training_part`),
which compiles each part once for every size, or per shape where the symbolic path refuses it.
Their example values are read without guards (`size_hint`), so dynamo keeps one graph for every
size. The version checks are not made for such graphs (`saved_for_training`): their saved
tensors keep autograd's own.
"""

from __future__ import annotations

import copy
import functools
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import torch

from xfuse.backends import Backend
from xfuse.errors import XfuseError
from xfuse.frontend.eager_rules import size_hint as eager_size_hint
from xfuse.pipeline import PipelineOptions
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.driver import compile_program
from xfuse.runtime.executor import CompiledProgram
from xfuse.runtime.fallback import FallbackMode

Tensor = torch.Tensor

OnEager = Callable[[Exception, FallbackMode], None]
"""Warns, or raises in strict mode, for a part that runs eagerly (the error, the mode)."""


class CompiledPart(NamedTuple):
    """A part as AOTAutograd cut it and as xfuse compiled it."""

    graph: torch.fx.GraphModule
    program: Any
    """Its `CompiledProgram` (what `PartCompiler.compile` returned), or for a part with
    symbolic sizes the function `PartCompiler.symbolic` made."""


Record = Callable[[str, CompiledPart], None]
"""Told each part (`PARTS`) xfuse compiled."""

SymbolicCompile = Callable[
    ["PartCompiler", torch.fx.GraphModule, Sequence[Any]], Callable[..., Any]
]
"""Compiles a part whose example inputs have symbolic sizes (SymInt inputs, tensors with
symbolic sizes): the part compiler, its FX graph and example inputs, to a function of the
part's inputs (positional, as AOTAutograd passes them) that returns all its outputs."""


def decompositions() -> dict[Any, Callable[..., Any]]:
    """The aten ops AOTAutograd decomposes while it traces (torch's own decompositions, and
    `dtype_conversion` for `_to_copy`): the
    normalizations whose statistics the backward reads, and the backward ops, into the
    elementwise ops and reductions xfuse fuses. `_log_softmax` too, so that the partitioner
    may save a loss's inputs and its row statistics instead of the f32 log-probabilities (the
    backward computes them again where it reads them). Dropout is kept whole: its mask is drawn
    by torch's own kernel, so the same seed gives eager's numbers. So is an embedding's
    gradient (`embedding_dense_backward`, one of the importer's `LIBRARY_KERNELS`): eager's
    kernel, its sums and scaling eager's."""
    from torch._decomp import get_decompositions

    aten = torch.ops.aten
    table = get_decompositions(
        [
            aten.native_layer_norm,
            aten.native_layer_norm_backward,
            aten.native_group_norm,
            aten.native_group_norm_backward,
            aten.native_batch_norm_backward,
            aten._log_softmax,
            aten._softmax_backward_data,
            aten._log_softmax_backward_data,
            aten.gelu_backward,
            aten.silu_backward,
            aten.sigmoid_backward,
            aten.tanh_backward,
            aten.threshold_backward,
            aten.hardtanh_backward,
            aten.leaky_relu_backward,
            aten.mse_loss_backward,
            aten.nll_loss_forward,
            aten.nll_loss_backward,
            aten.native_dropout_backward,
            aten.detach,
        ]
    )
    for norm, params in ((aten.native_layer_norm.default, 2), (aten.native_group_norm.default, 1)):
        table[norm] = statistics_as_eager(table[norm], params)
    table[aten._to_copy.default] = dtype_conversion
    table[aten.zeros_like.default] = functools.partial(filled_like, fill_value=0)
    table[aten.full_like.default] = filled_like
    return table


def statistics_as_eager(decomposition: Callable[..., Any], params: int) -> Callable[..., Any]:
    """torch's decomposition of a normalization (`native_layer_norm`, `native_group_norm`),
    whose mean and rstd keep eager's dtype: on the CPU eager keeps them in f32 where an f16 or
    bf16 input meets f32 weights ("mixed types"), where the decomposition rounds them to the
    input's dtype, and the backward that reads them loses the low bits of a gradient that
    cancels (a norm over 2 elements). The decomposition computes in f32 either way, so it
    runs on the input widened to f32 then, its output narrowed back. `params` is the position
    of the weight (the bias follows it)."""

    def decomposed(x: Tensor, *args: Any) -> Any:
        given = [a for a in (x, *args)[params : params + 2] if isinstance(a, Tensor)]
        mixed = (
            x.device.type == "cpu"
            and x.dtype in (torch.float16, torch.bfloat16)
            and bool(given)
            and all(p.dtype == torch.float32 for p in given)
        )
        if not mixed:
            return decomposition(x, *args)
        out, mean, rstd = decomposition(x.float(), *args)
        return out.to(x.dtype), mean, rstd

    return decomposed


def filled_like(
    x: Tensor,
    fill_value: float | bool = 0,
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | str | None = None,
    pin_memory: bool | None = False,
    memory_format: torch.memory_format | None = None,
) -> Any:
    """`zeros_like` and `full_like` of a contiguous tensor as `aten.full` of its shape: the
    partitioner then sees that the tensor's values are not read (the backward of a loss fills a
    tensor like the log-probabilities, which it would otherwise keep alive). Any other stays as
    it is (NotImplemented)."""
    if layout not in (None, torch.strided) or pin_memory:
        return NotImplemented
    if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
        return NotImplemented
    if memory_format is not torch.contiguous_format and not x.is_contiguous():
        return NotImplemented
    return torch.ops.aten.full.default(
        x.shape,
        fill_value,
        dtype=x.dtype if dtype is None else dtype,
        layout=torch.strided,
        device=x.device if device is None else device,
        pin_memory=False,
    )


def dtype_conversion(
    x: Tensor,
    *,
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | str | None = None,
    pin_memory: bool | None = False,
    non_blocking: bool = False,
    memory_format: torch.memory_format | None = None,
) -> Any:
    """`aten._to_copy` that only changes the element type, as `prims.convert_element_type`
    (the same cast, strides kept): the partitioner takes that for pointwise and recomputes it
    in the backward, where it would save the converted copy (autocast's f32 logits of a loss,
    twice the bytes of the bf16 ones). Any other copy stays `_to_copy` (NotImplemented)."""
    same_device = device is None or torch.device(device) == x.device
    if dtype is None or not same_device or pin_memory or layout not in (None, x.layout):
        return NotImplemented
    if memory_format not in (None, torch.preserve_format):
        return NotImplemented
    return torch.ops.prims.convert_element_type.default(x, dtype)


PARTS = ("forward", "backward", "inference")
"""The graphs AOTAutograd hands a backend: a training forward and its backward, or a forward
alone where no output needs grad."""


# ---------------------------------------------------------------------------------------------
# The example inputs AOTAutograd hands a part
# ---------------------------------------------------------------------------------------------


def real_input(t: Any) -> Any:
    """Dynamo and AOTAutograd may hand fake tensors to backends: zeros of the same sizes,
    strides, dtype and device (a program is specialised on its inputs' strides). A symbolic
    size or stride is its example value (`size_hint`: no guard on it)."""
    from torch._subclasses.fake_tensor import is_fake

    if isinstance(t, Tensor) and is_fake(t):
        shape = tuple(size_hint(d) for d in t.shape)
        strides = tuple(size_hint(s) for s in t.stride())
        return torch.empty_strided(shape, strides, dtype=t.dtype, device=t.device).zero_()
    return t


def size_hint(size: int | torch.SymInt) -> int:
    """A size's example value, read with no guard (`eager_rules.size_hint`: `int()` of a
    SymInt would guard that it equals that value, and dynamo would compile again at the next
    size); an `XfuseError` for a symbol without one (a data-dependent size)."""
    hint = eager_size_hint(size)
    if hint is None:
        raise XfuseError(f"the size {size} has no example value (a data-dependent size)")
    return hint


def graph_device(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> torch.device:
    """The device a graph runs on: its first tensor input's, else its first parameter's or
    buffer's, else that of the first tensor its outputs or other nodes hold as traced values
    (a graph of factories, `torch.arange(16, device="cuda")`), else the CPU."""
    for t in example_inputs:
        if isinstance(t, Tensor):
            return t.device
    for t in (*gm.parameters(), *gm.buffers()):
        return t.device
    nodes = list(gm.graph.nodes)
    outputs = [n for n in nodes if n.op == "output"]
    returned = [a for n in outputs for a in n.all_input_nodes]
    for node in (*returned, *nodes):
        value = node.meta.get("val", node.meta.get("example_value"))
        if isinstance(value, Tensor):
            return value.device
    return torch.device("cpu")


def explicit_devices(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` (changed in place) with each factory call that names no device
    (`torch.tensor([0, 4])`, `torch.ones(n)`) given the default device it was traced under
    (`torch.set_default_device`, `with torch.device(...)`): dynamo leaves the device out of
    the graph and relies on the mode at each call (guarding that the default device stays
    the same), which no retrace of the graph (torch.export, AOTAutograd) sees. The traced
    values do not say it: dynamo makes them outside the mode, on the CPU."""
    from torch.utils import _device

    device = _device.CURRENT_DEVICE
    if device is None:
        return gm
    factories = _device._device_constructors()
    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in factories:
            continue
        if node.kwargs.get("device") is not None:
            continue
        node.kwargs = {**node.kwargs, "device": device}
        changed = True
    if changed:
        gm.recompile()
    return gm


def graph_device_of(function: Callable[..., Any], inputs: Sequence[Any]) -> torch.device:
    """`graph_device` of a graph, or for any other function its first tensor input's device
    (else the CPU)."""
    if isinstance(function, torch.fx.GraphModule):
        return graph_device(function, inputs)
    return next((t.device for t in inputs if isinstance(t, Tensor)), torch.device("cpu"))


LIFTED_CONSTANT = re.compile(r"_tensor_constant\d+")
"""The name AOTAutograd gives a tensor literal of the user's code it lifts out of the graph."""


def constants_to(gm: torch.fx.GraphModule, device: torch.device) -> None:
    """The part's lifted tensor literals (`LIFTED_CONSTANT`) on `device`, where the user's code
    made them on the CPU (`torch.tensor([...])` in a forward, as T5's does): tracing passed, so
    each is a 0-d value or an index that eager reads on the CPU beside the device's tensors,
    and reads the same on the device; a program takes its graph's tensors on its device."""
    if device.type == "cpu":
        return
    for node in gm.graph.nodes:
        target = str(node.target)
        if node.op != "get_attr" or not LIFTED_CONSTANT.fullmatch(target):
            continue
        value = getattr(gm, target, None)
        if isinstance(value, Tensor) and value.device.type == "cpu":
            setattr(gm, target, value.to(device))


def is_symbolic(value: Any) -> bool:
    """A SymInt (SymFloat, SymBool), or a tensor with a symbolic size or stride."""
    if isinstance(value, Tensor):
        return not all(isinstance(d, int) for d in (*value.shape, *value.stride()))
    return isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool)


# ---------------------------------------------------------------------------------------------
# Compiling the parts
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartSettings:
    """What the parts of one program are compiled with: `xfuse.compile`'s options for its
    calls, the defaults for the torch.compile backend's graphs."""

    device: torch.device | None = None
    """None: the device of the part's inputs (`graph_device`)."""
    options: PipelineOptions = PipelineOptions()
    cache: KernelCache | None = None
    quiet: bool | None = True
    cuda_graphs: bool = True
    backend: Backend | None = None
    """None: the device's (`xfuse.backends.get_backend`)."""
    state_inputs: int = 0
    """How many of the forward's first inputs are a module's parameters and buffers, where no
    tracing context names them (dynamo's `static_input_indices` do)."""


@dataclass
class PartCompiler:
    """AOTAutograd's compiler of one part (`PARTS`): the part's FX graph through `xfuse.compile`
    on zero tensors of its example inputs' layouts, outside AOTAutograd's fake tensor mode."""

    part: str
    mode: FallbackMode
    on_eager: OnEager
    settings: PartSettings = field(default_factory=PartSettings)
    record: Record | None = None
    """Told each part compiled (`xfuse.differentiable` keeps them)."""
    returns: ForwardReturns | None = None
    """Told what the forward part returns at each run (`ForwardReturns`)."""
    symbolic: SymbolicCompile | None = None
    """Compiles a part with symbolic sizes (the torch.compile backend's, `xfuse.dynamo`); None:
    such a part is refused (it runs eagerly)."""

    def __call__(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
    ) -> Callable[[list[Any]], Any]:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily(), torch.no_grad():
            try:
                program = self.build(gm, example_inputs)
            except Exception as e:  # noqa: BLE001 - any failure: this part runs eagerly
                self.on_eager(e, self.mode)
                return self.told(boxed(gm))
        if self.record is not None:
            self.record(self.part, CompiledPart(gm, program))
        report_output_strides(program)
        return self.told(boxed_program(program))

    def told(self, function: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
        """The forward part's `function`, telling `returns` what each run returns; any other
        part's as it is."""
        if self.part != "forward" or self.returns is None:
            return function
        return self.returns.telling(function)

    def build(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        """The part's program: where its example inputs have symbolic sizes and this compiler
        has a `symbolic` one, what that makes of it; else `compile`'s."""
        if self.symbolic is not None and any(is_symbolic(t) for t in example_inputs):
            return self.symbolic(self, gm, example_inputs)
        return self.compile(gm, example_inputs)

    def compile(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> CompiledProgram:
        """The part's program for its example inputs' shapes (refused for symbolic sizes)."""
        if any(is_symbolic(t) for t in example_inputs):
            raise XfuseError(
                f"the {self.part} graph has dynamic shapes, which this part compiler does not "
                "compile (xfuse.compile's training programs are compiled per shape)"
            )
        inputs = tuple(real_input(t) for t in example_inputs)
        # Its views are reshapes: the graph's strides are AOTAutograd's trace's, and neither
        # the inputs (a backward's saved tensors as the forward returned them) nor
        # torch.export's retrace need keep them (under torch 2.11 export lays a depthwise
        # convolution of channels-last input out channels-first, where AOTAutograd and eager
        # keep it channels-last, and ConvNeXt's `view` of it fails).
        gm = views_as_reshapes(gm)
        constants_to(gm, self.settings.device or graph_device_of(gm, inputs))
        return self.compile_shape(gm, inputs, self.static_inputs(len(inputs)))

    def compile_shape(
        self, function: Callable[..., Any], inputs: Sequence[Tensor], static: tuple[int, ...]
    ) -> CompiledProgram:
        """`function` compiled for the shapes of `inputs` (real tensors) with this part's
        settings and fallback mode, the inputs at positions `static` kept in place. A training
        part's products stay torch's calls (`PipelineOptions.gemm_ways`): the other ways are
        measured for inference products only."""
        settings = self.settings
        options = settings.options
        if self.part != "inference":
            options = replace(options, gemm_ways=False)
        return compile_program(
            function,
            tuple(inputs),
            settings.device or graph_device_of(function, inputs),
            options,
            cache=settings.cache,
            quiet=settings.quiet,
            backend=settings.backend,
            cuda_graphs=settings.cuda_graphs,
            fallback=self.mode,
            static_inputs=static,
            outputs_released=self.part == "forward",
            saved_outputs=self.saved_outputs(function),
        )

    def saved_tensors(self) -> slice | None:
        """Where the tensors this part saves for the backward lie among its flat outputs, as
        AOTAutograd's metadata of the graph says (dynamo's `TracingContext.fw_metadata`).

        The forward's outputs are the mutated inputs, the user's outputs and the intermediate
        bases that views among them share (and an RNG offset where AOTAutograd functionalises
        RNG ops): the metadata's `num_forward` of them; then the tensors it saves; then the
        SymInts and opaque objects it saves, which are not tensors. The metadata's
        `tensors_saved_for_backwards_slice` is that middle run: it starts at `num_forward`
        (its version-checked and unchecked tensors both count from there) and stops before
        the SymInts. An inference part saves nothing: the empty slice at its `num_forward`.
        None for the backward, outside dynamo (no metadata), and where the metadata has
        tensor subclasses (it then counts their inner tensors, not the graph's outputs).

        The saved tensors' strides follow one rule, since no user sees them (only the
        backward reads them):

        - Static shapes: the forward's program returns a kernel buffer among them as the
          kernel wrote it, in row-major strides (`saved_outputs`, then
          `xfuse.runtime.outputs.with_kernel_strides`), rather than copying it into eager's,
          and tells AOTAutograd each output's strides (`report_output_strides`), which
          compiles the backward for them (its `view`s as reshapes: `views_as_reshapes`).
        - Symbolic sizes: AOTAutograd restrides the backward's inputs to static strides
          only, so a symbolic program's cannot be told; the forward returns each saved tensor
          that is not surely contiguous, or that is a view of an input or of another output,
          as a contiguous clone (`xfuse.dynamo.part_outputs`, from `internal_outputs` on),
          and the backward's symbolic program reads its inputs by value, whatever their
          strides (`SymbolicProgram.bind`)."""
        if self.part == "backward":
            return None
        from torch._guards import TracingContext

        metadata = getattr(TracingContext.try_get(), "fw_metadata", None)
        if metadata is None or has_subclasses(metadata):
            return None
        if self.part == "inference":
            end = getattr(metadata, "num_forward", None)
            return slice(end, end) if isinstance(end, int) else None
        try:
            saved = metadata.tensors_saved_for_backwards_slice
        except (AttributeError, AssertionError):
            return None
        return saved if isinstance(saved, slice) else None

    def saved_outputs(self, function: Callable[..., Any]) -> frozenset[int]:
        """The positions of the forward's saved tensors (`saved_tensors`) among the outputs
        of `function`, where dynamo asks for the strides the compiled forward returns them in
        (`TracingContext.report_output_strides`): the program may return them as its kernels
        wrote them. Empty for any other part, outside dynamo, and for a function that is not
        an FX graph."""
        from torch._guards import TracingContext

        if self.part != "forward" or not isinstance(function, torch.fx.GraphModule):
            return frozenset()
        if getattr(TracingContext.try_get(), "output_strides", None) is None:
            return frozenset()
        saved = self.saved_tensors()
        if saved is None:
            return frozenset()
        returned = function.graph.output_node().args[0]
        count = len(returned) if isinstance(returned, (tuple, list)) else 1
        return frozenset(range(count)[saved])

    def internal_outputs(self) -> int | None:
        """Where this part's outputs that AOTAutograd keeps to itself begin: 0 for the
        backward (gradients), for the forward the first tensor it saves for the backward
        (`saved_tensors`' start), for an inference part, which saves nothing, its metadata's
        `num_forward`; None where no metadata says."""
        if self.part == "backward":
            return 0
        saved = self.saved_tensors()
        return None if saved is None else saved.start

    def static_inputs(self, count: int) -> tuple[int, ...]:
        """The forward's parameters and buffers (AOTAutograd's `static_input_indices` under
        dynamo, else `PartSettings.state_inputs`): they stay where they are between steps, so
        a CUDA graph reads them in place."""
        if self.part == "backward":
            return ()
        from torch._guards import TracingContext

        context = TracingContext.try_get()
        metadata = getattr(context, "fw_metadata", None)
        found = getattr(metadata, "static_input_indices", None)
        if found is None:
            found = range(self.settings.state_inputs)
        return tuple(i for i in found if i < count)


def aot_options(
    mode: FallbackMode,
    on_eager: OnEager,
    settings: PartSettings | None = None,
    record: Record | None = None,
    saved: EagerSaved | None = None,
    user_inputs: int = 0,
    returns: ForwardReturns | None = None,
    symbolic: SymbolicCompile | None = None,
) -> dict[str, Any]:
    """AOTAutograd's arguments: a `PartCompiler` per part (the forward's telling `returns`
    what it returns; parts with symbolic sizes compiled by `symbolic`), the min-cut
    partitioner (its saved inputs as eager's where `saved` says what eager saves of the
    `user_inputs` flat inputs: `partition_as_eager`) and `decompositions`."""
    made = PartSettings() if settings is None else settings

    def compiler(part: str, told: ForwardReturns | None = None) -> PartCompiler:
        return PartCompiler(part, mode, on_eager, made, record, told, symbolic)

    return {
        "fw_compiler": compiler("forward", returns),
        "bw_compiler": compiler("backward"),
        "inference_compiler": compiler("inference"),
        "partition_fn": partition_as_eager(saved, user_inputs),
        "decompositions": decompositions(),
    }


def views_as_reshapes(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of `gm` whose `aten.view`s are `aten.reshape`s: the same values, copied where
    the input's strides allow no view. AOTAutograd's backward views its saved tensors as
    eager's strides allow; the forward's program may return them in others."""
    graph = copy.deepcopy(gm.graph)
    for node in graph.find_nodes(op="call_function", target=torch.ops.aten.view.default):
        node.target = torch.ops.aten.reshape.default
    return torch.fx.GraphModule(gm, graph)


def has_subclasses(metadata: Any) -> bool:
    """Whether AOTAutograd's metadata of a graph has tensor subclasses among its inputs or
    forward outputs (its saved tensors are then counted on the subclasses' inner tensors)."""
    from torch._functorch._aot_autograd.schemas import SubclassCreationMeta

    metas = [
        *(getattr(metadata, "subclass_inp_meta", None) or ()),
        *(getattr(metadata, "subclass_fw_graph_out_meta", None) or ()),
    ]
    return any(isinstance(m, SubclassCreationMeta) for m in metas)


def report_output_strides(program: Any) -> None:
    """Tell AOTAutograd the strides of each output of a part compiled for static shapes where
    it asks for them (`TracingContext.report_output_strides`, around the forward's compile):
    it compiles the backward for the strides the saved tensors really have (the rule:
    `PartCompiler.saved_tensors`)."""
    from torch._guards import TracingContext

    strides = getattr(TracingContext.try_get(), "output_strides", None)
    if strides is not None and isinstance(program, CompiledProgram):
        strides.extend(program.default.fresh_strides)


def boxed_program(program: Callable[..., Any]) -> Callable[[list[Any]], Any]:
    """`program` in AOTAutograd's boxed calling convention: its arguments as one list, cleared
    once read so that the tensors AOTAutograd saved for the backward are freed early. AOTAutograd
    runs a part with grad off; so does the call."""

    def run(args: list[Any]) -> Any:
        inputs = tuple(args)
        args.clear()
        with torch.no_grad():
            return program(*inputs)

    run._boxed_call = True  # type: ignore[attr-defined]
    run.program = program  # type: ignore[attr-defined]
    return run


def boxed(gm: torch.fx.GraphModule) -> Callable[[list[Any]], Any]:
    """The FX graph itself (eager), in the boxed calling convention."""
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(gm)


# ---------------------------------------------------------------------------------------------
# In-place writes between the forward and the backward
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EagerSaved:
    """The tensors a caller holds that eager's autograd saves for the backward (a tensor that
    shares memory, so the version counter, with one it saves): AOTAutograd's flat inputs and
    outputs by index, each with what eager's version-counter error calls the saved tensor
    (None: the input itself, described at the call)."""

    inputs: dict[int, str | None] = field(default_factory=dict)
    outputs: dict[int, str | None] = field(default_factory=dict)


def eager_saved(function: Callable[..., Sequence[Any]], inputs: Sequence[Any]) -> EagerSaved:
    """Which of `inputs` and of `function`'s flat outputs eager's autograd saves: `function`
    run once, eagerly, on fake tensors of the inputs' layouts (those that require grad do), its
    saved tensors caught by `saved_tensors_hooks` and matched by storage."""
    from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily

    saved: list[Tensor] = []

    def pack(t: Tensor) -> int:
        saved.append(t)
        return len(saved) - 1

    with unset_fake_temporarily(), FakeTensorMode(allow_non_fake_inputs=True):
        fakes = [fake_like(t) for t in inputs]
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, saved.__getitem__):
            results = function(*fakes)
        if not isinstance(results, list | tuple):
            results = [results]
        by_storage: dict[int, Tensor] = {}
        for t in reversed(saved):
            by_storage[storage_key(t)] = t
        found_inputs = matched(fakes, saved, by_storage, describe_inputs=False)
        found_outputs = matched(list(results), saved, by_storage, describe_inputs=True)
    return EagerSaved(found_inputs, found_outputs)


def fake_like(t: Any) -> Any:
    """A tensor of `t`'s sizes, strides, dtype and device (made in the fake mode in force),
    that requires grad where `t` does; anything else as it is."""
    if not isinstance(t, Tensor):
        return t
    shape = tuple(int(d) for d in t.shape)
    strides = tuple(int(s) for s in t.stride())
    made = torch.empty_strided(shape, strides, dtype=t.dtype, device=t.device)
    return made.requires_grad_(t.requires_grad)


def storage_key(t: Tensor) -> int:
    """The identity of a tensor's storage (views share it, and their version counter)."""
    return int(t.untyped_storage()._cdata)


def matched(
    tensors: Sequence[Any],
    saved: Sequence[Tensor],
    by_storage: dict[int, Tensor],
    describe_inputs: bool,
) -> dict[int, str | None]:
    """Each of `tensors` that shares memory with a saved tensor, with eager's description of
    that saved tensor: None where it is the input itself (`describe_inputs` False), whose
    autograd history is known only at the call."""
    found: dict[int, str | None] = {}
    for index, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            continue
        if not describe_inputs and any(s is t for s in saved):
            found[index] = None
            continue
        other = by_storage.get(storage_key(t))
        if other is not None:
            found[index] = saved_description(other)
    return found


def saved_description(t: Tensor) -> str:
    """What eager's version-counter error calls a saved tensor once written: its type and
    sizes, and the node and output that made it where it has a history (a view's, rebuilt
    after the write, is `AsStrided`)."""
    sizes = ", ".join(str(int(d)) for d in t.shape)
    text = f"[{t.type()} [{sizes}]]"
    if t.grad_fn is not None:
        name = "AsStrided" if t._base is not None else node_name(t.grad_fn)
        text += f", which is output {t.output_nr} of {name},"
    return text


def node_name(node: Any) -> str:
    """An autograd node as eager's version-counter error names it (`TanhBackward0`: `Tanh`)."""
    return re.sub(r"Backward\d*$", "", node.name())


def version_error(description: str, version: int, expected: int) -> RuntimeError:
    """Eager's error for a saved tensor written after the forward
    (torch/csrc/autograd/saved_variable.cpp)."""
    if torch.is_anomaly_enabled():
        hint = (
            "Hint: the backtrace further above shows the operation that failed to compute its "
            "gradient. The variable in question was changed in there or anywhere later. Good luck!"
        )
    else:
        hint = (
            "Hint: enable anomaly detection to find the operation that failed to compute its "
            "gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False)."
        )
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: {description} is at version {version}; expected version {expected} "
        f"instead. {hint}"
    )


class VersionCheck:
    """The versions, at the end of one call's forward, of the caller's tensors that eager
    saves; called before the backward (a pre-hook of AOTAutograd's node, before autograd's own
    checks of what the partitioner saved), it raises eager's error where one was written
    since. It holds a tensor with a history as a detached alias (the same version counter,
    no autograd history: no reference cycle through the node), a tensor without one (a
    parameter) as it is, and an input eager saves itself, described at the error (its own
    history)."""

    def __init__(self, watched: Sequence[tuple[Tensor, str | None]]):
        self.watched = [
            (t if t.grad_fn is None else t.detach(), t._version, text, t if text is None else None)
            for t, text in watched
        ]

    def __call__(self, grad_outputs: Any) -> None:
        for alias, expected, text, tensor in self.watched:
            if alias._version != expected:
                described = text if tensor is None else saved_description(tensor)
                raise version_error(described or "", alias._version, expected)


class Returned(Iterable[Tensor]):
    """The tensors a forward part returned during one call, other than its own inputs, in
    order (`ForwardReturns`): each run's inputs and results are kept as they are, and the
    tensors are picked out only when iterated (`compiled_node` stops at the first of its
    node)."""

    def __init__(self) -> None:
        self.runs: list[tuple[tuple[Any, ...], Any]] = []
        """(the run's inputs, its results) per run of the forward."""

    def __iter__(self) -> Iterator[Tensor]:
        for inputs, results in self.runs:
            own: set[int] | None = None
            for t in results:
                if not isinstance(t, Tensor):
                    continue
                if own is None:
                    own = {id(a) for a in inputs if isinstance(a, Tensor)}
                if id(t) not in own:
                    yield t


class ForwardReturns:
    """The tensors a program's forward part returned, other than its own inputs, while a call
    of AOTAutograd's function runs (`calling`; on this thread, nothing kept otherwise).
    AOTAutograd runs the forward inside an `autograd.Function`, which makes each such tensor
    that is differentiable an output of the call's backward node: its `grad_fn` is that node
    (`compiled_node`)."""

    def __init__(self) -> None:
        self.local = threading.local()

    @contextmanager
    def calling(self) -> Iterator[Returned]:
        """While in force, the forward's runs add what they return to the `Returned` it
        gives."""
        returned = Returned()
        before = getattr(self.local, "returned", None)
        self.local.returned = returned
        try:
            yield returned
        finally:
            self.local.returned = before

    def telling(self, function: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
        """The forward part's `function` (boxed), adding each run's inputs and results to the
        `Returned` of the `calling` in force (the inputs as a tuple: `function` may clear
        its list)."""

        def run(args: list[Any]) -> Any:
            returned: Returned | None = getattr(self.local, "returned", None)
            if returned is None:
                return function(args)
            inputs = tuple(args)
            results = function(args)
            returned.runs.append((inputs, results))
            return results

        run._boxed_call = True  # type: ignore[attr-defined]
        if hasattr(function, "program"):
            run.program = function.program  # type: ignore[attr-defined]
        return run


def watch_versions(
    saved: EagerSaved, inputs: Sequence[Any], outputs: Sequence[Any], returned: Iterable[Tensor]
) -> None:
    """After a call of AOTAutograd's function (its forward returned `returned`): a
    `VersionCheck` of the inputs and outputs eager saves, run before the call's backward node
    (none where no output has a backward, or eager saves none of them, or saved tensors hooks
    are in force)."""
    if not (saved.inputs or saved.outputs) or saved_tensor_hooks_on():
        return
    node = compiled_node(inputs, outputs, returned)
    if node is None:
        return
    watched = [(inputs[i], text) for i, text in saved.inputs.items()]
    watched += [(outputs[i], text) for i, text in saved.outputs.items()]
    node.register_prehook(VersionCheck(watched))


def saved_tensor_hooks_on() -> bool:
    """Whether `saved_tensors_hooks` are in force: eager's autograd then checks no saved
    tensor's version (the hooks keep what they will)."""
    return torch._C._autograd._top_saved_tensors_default_hooks(True) is not None


def compiled_node(inputs: Sequence[Any], outputs: Sequence[Any], returned: Iterable[Tensor]) -> Any:
    """The backward node of this call's AOTAutograd function: the `grad_fn` of a tensor its
    forward `returned` (`ForwardReturns`), else of an output that is no view and shares
    memory with one (AOTAutograd returns a view of an intermediate as a new tensor,
    `_unsafe_view`), never an input's own node (an input returned, from another compiled
    program); None where none has one."""
    theirs = [t.grad_fn for t in inputs if isinstance(t, Tensor) and t.grad_fn is not None]

    def ours(node: Any) -> bool:
        return node is not None and not any(node is other for other in theirs)

    found = next((t.grad_fn for t in returned if ours(t.grad_fn)), None)
    if found is not None:
        return found
    memory = {storage_key(t) for t in returned if has_storage(t)}
    for o in outputs:
        if isinstance(o, Tensor) and o._base is None and ours(o.grad_fn) and has_storage(o):
            if storage_key(o) in memory:
                return o.grad_fn
    return None


def has_storage(t: Tensor) -> bool:
    """Whether a tensor has memory of its own to compare (a dense tensor, not a ZeroTensor)."""
    return t.layout == torch.strided and not t._is_zerotensor() and not t.is_meta


Partition = Callable[..., tuple[torch.fx.GraphModule, torch.fx.GraphModule]]


def partition_as_eager(saved: EagerSaved | None, user_inputs: int) -> Partition:
    """The min-cut partitioner, where `saved` says what eager saves of AOTAutograd's flat
    inputs (the last `user_inputs` primals) and outputs: a tensor the caller holds that it saves
    for the backward (or a view of one) and eager does not (tanh's input, where eager saves
    tanh's output) is saved as a copy, so that a write after the forward neither changes a
    gradient nor meets autograd's version check where eager's backward would not. With `saved`
    None, as the partitioner makes them."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    def partition(
        joint: torch.fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any
    ) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
        forward, backward = min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
        primals = [n for n in joint.graph.find_nodes(op="placeholder") if "primals" in n.name]
        offset = len(primals) - user_inputs
        if saved is not None and joint_inputs and offset >= 0:
            inputs = {n.name: i - offset for i, n in enumerate(primals) if i >= offset}
            copy_saved(forward, kwargs["num_fwd_outputs"], inputs, saved)
        return forward, backward

    return partition


Held = tuple[str, int]
"""A tensor the caller holds: ("input", its flat input index) or ("output", its flat output
index)."""


def held_tensors(
    forward: torch.fx.GraphModule, returns: int, inputs: dict[str, int]
) -> dict[torch.fx.Node, Held]:
    """The forward graph's nodes that are tensors the caller holds: the primals at `inputs`
    (by name), and the user outputs among its first `returns` outputs (by their descriptors,
    where AOTAutograd gives them)."""
    from torch._functorch._aot_autograd.descriptors import PlainAOTOutput

    output = forward.graph.output_node()
    held: dict[torch.fx.Node, Held] = {}
    descriptors = output.meta.get("desc") or []
    returned: list[Any] = list(output.args[0])[:returns]  # type: ignore[arg-type]
    for value, descriptor in zip(returned, descriptors, strict=False):
        if isinstance(value, torch.fx.Node) and isinstance(descriptor, PlainAOTOutput):
            held.setdefault(value, ("output", descriptor.idx))
    for node in forward.graph.find_nodes(op="placeholder"):
        if node.name in inputs:
            held[node] = ("input", inputs[node.name])
    return held


def holder(node: torch.fx.Node, held: dict[torch.fx.Node, Held]) -> Held | None:
    """The tensor the caller holds that `node` is, or is a chain of views of; else None."""
    while node not in held:
        target = node.target
        if node.op != "call_function" or not node.args:
            return None
        if not (isinstance(target, torch._ops.OpOverload) and target.is_view):
            return None
        first = node.args[0]
        if not isinstance(first, torch.fx.Node):
            return None
        node = first
    return held[node]


def copy_saved(
    forward: torch.fx.GraphModule, returns: int, inputs: dict[str, int], saved: EagerSaved
) -> None:
    """In the forward graph (its first `returns` outputs returned, the rest saved), each saved
    tensor that is (a view of) an input or output the caller holds and eager does not save
    replaced by a clone of it."""
    held = held_tensors(forward, returns, inputs)
    output = forward.graph.output_node()
    values = list(output.args[0])  # type: ignore[arg-type]
    for index in range(returns, len(values)):
        value = values[index]
        if not isinstance(value, torch.fx.Node) or not isinstance(value.meta.get("val"), Tensor):
            continue
        found = holder(value, held)
        if found is None:
            continue
        kind, place = found
        if place in (saved.inputs if kind == "input" else saved.outputs):
            continue
        with forward.graph.inserting_before(output):
            copy = forward.graph.call_function(torch.ops.aten.clone.default, (value,))
        copy.meta = {**value.meta, "val": cloned_meta(value.meta.get("val"))}
        values[index] = copy
    output.args = (tuple(values), *output.args[1:])
    forward.recompile()


def cloned_meta(value: Any) -> Any:
    """A node's fake value as `aten.clone` makes it (its strides where dense, else
    contiguous)."""
    from torch._guards import detect_fake_mode

    mode = detect_fake_mode([value]) if isinstance(value, Tensor) else None
    if mode is None:
        return value
    with mode:
        return torch.ops.aten.clone.default(value)


def saved_for_training(function: Callable[..., Any], inputs: Sequence[Any]) -> EagerSaved | None:
    """`eager_saved` for a program traced for training (grad on, an input requires grad, every
    size static); None otherwise, or where running it on fake tensors fails: then the
    partitioner's saved tensors keep autograd's own version check."""
    tensors = [t for t in inputs if isinstance(t, Tensor)]
    if not torch.is_grad_enabled() or not any(t.requires_grad for t in tensors):
        return None
    if any(is_symbolic(t) for t in inputs) or len(tensors) != len(inputs):
        return None
    try:
        return eager_saved(function, inputs)
    except Exception:  # noqa: BLE001 - no probe: autograd's own checks, as before
        return None
