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

AOTAutograd calls a part's compiled function with the boxed calling convention (one list of
arguments, which the callee may clear so that saved tensors die early); it compiles the
backward at the first backward. A part xfuse cannot compile runs as the FX graph AOTAutograd
made (eagerly) with a `FallbackWarning`, or, in strict mode, raises `EagerFallbackError`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from xfuse.backends import Backend
from xfuse.errors import XfuseError
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
    """Its `CompiledProgram` (what `PartCompiler.compile` returned)."""


Record = Callable[[str, CompiledPart], None]
"""Told each part (`PARTS`) xfuse compiled."""


def decompositions() -> dict[Any, Callable[..., Any]]:
    """The aten ops AOTAutograd decomposes while it traces (torch's own decompositions, and
    `dtype_conversion` for `_to_copy`): the
    normalizations whose statistics the backward reads, and the backward ops, into the
    elementwise ops and reductions xfuse fuses. `_log_softmax` too, so that the partitioner
    may save a loss's inputs and its row statistics instead of the f32 log-probabilities (the
    backward computes them again where it reads them). Dropout is kept whole: its mask is drawn
    by torch's own kernel, so the same seed gives eager's numbers."""
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
            aten.embedding_dense_backward,
            aten.native_dropout_backward,
            aten.detach,
        ]
    )
    table[aten._to_copy.default] = dtype_conversion
    table[aten.zeros_like.default] = functools.partial(filled_like, fill_value=0)
    table[aten.full_like.default] = filled_like
    return table


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
    strides, dtype and device (a program is specialised on its inputs' strides)."""
    from torch._subclasses.fake_tensor import is_fake

    if isinstance(t, Tensor) and is_fake(t):
        shape = tuple(int(d) for d in t.shape)
        strides = tuple(int(s) for s in t.stride())
        return torch.empty_strided(shape, strides, dtype=t.dtype, device=t.device).zero_()
    return t


def graph_device(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> torch.device:
    """The device a graph runs on: its first tensor input's, else its first parameter's or
    buffer's, else the CPU."""
    for t in example_inputs:
        if isinstance(t, Tensor):
            return t.device
    for t in (*gm.parameters(), *gm.buffers()):
        return t.device
    return torch.device("cpu")


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

    def __call__(
        self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
    ) -> Callable[[list[Any]], Any]:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily(), torch.no_grad():
            try:
                program = self.compile(gm, example_inputs)
            except Exception as e:  # noqa: BLE001 - any failure: this part runs eagerly
                self.on_eager(e, self.mode)
                return boxed(gm)
        if self.record is not None:
            self.record(self.part, CompiledPart(gm, program))
        return boxed_program(program)

    def compile(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> CompiledProgram:
        if any(is_symbolic(t) for t in example_inputs):
            raise XfuseError(
                f"the {self.part} graph has dynamic shapes, which training programs do not "
                "compile yet"
            )
        inputs = tuple(real_input(t) for t in example_inputs)
        settings = self.settings
        return compile_program(
            gm,
            inputs,
            settings.device or graph_device(gm, inputs),
            settings.options,
            cache=settings.cache,
            quiet=settings.quiet,
            backend=settings.backend,
            cuda_graphs=settings.cuda_graphs,
            fallback=self.mode,
            static_inputs=self.static_inputs(len(inputs)),
        )

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
) -> dict[str, Any]:
    """AOTAutograd's arguments: a `PartCompiler` per part, the min-cut partitioner and
    `decompositions`."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    made = PartSettings() if settings is None else settings
    return {
        "fw_compiler": PartCompiler("forward", mode, on_eager, made, record),
        "bw_compiler": PartCompiler("backward", mode, on_eager, made, record),
        "inference_compiler": PartCompiler("inference", mode, on_eager, made, record),
        "partition_fn": min_cut_rematerialization_partition,
        "decompositions": decompositions(),
    }


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
