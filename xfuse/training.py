"""
Training through `torch.compile(model, backend="xfuse")`: a graph that dynamo hands over while
grad is enabled and an input (a parameter dynamo lifted, say) requires grad goes through
AOTAutograd, which traces its forward and backward together, functionalises them (batch norm's
running statistics become outputs that its runtime copies back into the buffers) and cuts
them apart with the min-cut partitioner (what the backward reads is saved or recomputed,
as for Inductor). Each part is an aten-level FX graph, compiled by `xfuse.compile` like any
program: imported into `graph` IR, fused and lowered by the same passes; the backward's ops
the importer knows fuse into kernels, the rest run as library calls inside the program.

    compiled = torch.compile(model, backend="xfuse")
    loss = compiled(x).sum()
    loss.backward()            # the backward program runs here

AOTAutograd calls a part's compiled function with the boxed calling convention (one list of
arguments, which the callee may clear so that saved tensors die early). A part xfuse cannot
compile runs as the FX graph AOTAutograd made (eagerly) with a `FallbackWarning`, or, in strict
mode, raises `EagerFallbackError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from xfuse.api import compile
from xfuse.backend_inputs import graph_device, is_symbolic, real_input
from xfuse.errors import XfuseError
from xfuse.runtime.executor import CompiledProgram
from xfuse.runtime.fallback import FallbackMode

Tensor = torch.Tensor


def decompositions() -> dict[Any, Callable[..., Any]]:
    """The aten ops AOTAutograd decomposes while it traces (torch's own decompositions): the
    normalizations whose statistics the backward reads, and the backward ops, into the
    elementwise ops and reductions xfuse fuses. Dropout is kept whole: its mask is drawn by
    torch's own kernel, so the same seed gives eager's numbers."""
    from torch._decomp import get_decompositions

    aten = torch.ops.aten
    return get_decompositions(
        [
            aten.native_layer_norm,
            aten.native_layer_norm_backward,
            aten.native_group_norm,
            aten.native_group_norm_backward,
            aten.native_batch_norm_backward,
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
        ]
    )


PARTS = ("forward", "backward", "inference")
"""The graphs AOTAutograd hands a backend: a training forward and its backward, or a forward
alone where no output needs grad."""


def needs_autograd(example_inputs: Sequence[Any]) -> bool:
    """Whether dynamo's graph is traced for training: grad is on and an input requires it."""
    return torch.is_grad_enabled() and any(
        isinstance(t, Tensor) and t.requires_grad for t in example_inputs
    )


def training_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    mode: FallbackMode,
    on_eager: Callable[[Exception, FallbackMode], None],
) -> Callable[..., Any]:
    """The forward and backward of dynamo's graph `gm`, each compiled by `xfuse.compile`
    (`PartCompiler`), through AOTAutograd. `on_eager(error, mode)` warns or raises (strict
    mode) for a part that runs eagerly."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    backend = aot_autograd(
        fw_compiler=PartCompiler("forward", mode, on_eager),
        bw_compiler=PartCompiler("backward", mode, on_eager),
        inference_compiler=PartCompiler("inference", mode, on_eager),
        partition_fn=min_cut_rematerialization_partition,
        decompositions=decompositions(),
    )
    return backend(gm, list(example_inputs))


@dataclass
class PartCompiler:
    """AOTAutograd's compiler of one part (`PARTS`): the part's FX graph through
    `xfuse.compile` on zero tensors of its example inputs' layouts, outside AOTAutograd's fake
    tensor mode, for the device of its inputs."""

    part: str
    mode: FallbackMode
    on_eager: Callable[[Exception, FallbackMode], None]

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
        return boxed_program(program)

    def compile(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> CompiledProgram:
        if any(is_symbolic(t) for t in example_inputs):
            raise XfuseError(
                f"the {self.part} graph has dynamic shapes, which training programs do not "
                "compile yet"
            )
        inputs = tuple(real_input(t) for t in example_inputs)
        return compile(
            gm,
            inputs,
            str(graph_device(gm, inputs)),
            quiet=True,
            fallback=self.mode,
            static_inputs=self.static_inputs(len(inputs)),
        )

    def static_inputs(self, count: int) -> tuple[int, ...]:
        """The forward's parameters and buffers (AOTAutograd's `static_input_indices`): they
        stay where they are between steps, so a CUDA graph reads them in place."""
        if self.part == "backward":
            return ()
        from torch._guards import TracingContext

        context = TracingContext.try_get()
        metadata = getattr(context, "fw_metadata", None)
        found = getattr(metadata, "static_input_indices", None) or ()
        return tuple(i for i in found if i < count)


def boxed_program(program: CompiledProgram) -> Callable[[list[Any]], Any]:
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
