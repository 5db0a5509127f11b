"""
Training through `torch.compile(model, backend="xfuse")`: a graph that dynamo hands over while
grad is enabled and an input (a parameter dynamo lifted, say) requires grad, or while autocast
is on, goes through AOTAutograd with xfuse compiling each part (`xfuse.aot`): the forward and
the backward where an output needs grad, the forward alone (`inference`) where none does.

    compiled = torch.compile(model, backend="xfuse")
    loss = compiled(x).sum()
    loss.backward()            # the backward program runs here

A part xfuse cannot compile runs as the FX graph AOTAutograd made (eagerly) with a
`FallbackWarning`, or, in strict mode, raises `EagerFallbackError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from xfuse.aot import (
    PARTS,
    EagerSaved,
    ForwardReturns,
    PartCompiler,
    PartSettings,
    SymbolicCompile,
    aot_options,
    decompositions,
    is_symbolic,
    saved_for_training,
    size_hint,
    storage_key,
    watch_versions,
)
from xfuse.differentiable import autocast_key
from xfuse.errors import UnsupportedProgram
from xfuse.frontend.outputs import overlaps
from xfuse.runtime.fallback import FallbackMode

__all__ = ["PARTS", "PartCompiler", "decompositions", "needs_aot", "training_backend"]

Tensor = torch.Tensor


def needs_aot(example_inputs: Sequence[Any]) -> bool:
    """Whether dynamo's graph is traced by AOTAutograd: grad is on and an input requires it,
    or autocast is on (AOTAutograd makes its casts; torch.export would drop them)."""
    if autocast_key():
        return True
    return torch.is_grad_enabled() and any(
        isinstance(t, Tensor) and t.requires_grad for t in example_inputs
    )


def training_backend(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    mode: FallbackMode,
    on_eager: Callable[[Exception, FallbackMode], None],
    symbolic: SymbolicCompile | None = None,
    cuda_graphs: bool = True,
) -> Callable[..., Any]:
    """The forward and backward of dynamo's graph `gm`, each compiled by xfuse (`PartCompiler`),
    through AOTAutograd. `on_eager(error, mode)` warns or raises (strict mode) for a part that
    runs eagerly; `symbolic` compiles the parts of a graph with symbolic sizes (None: they run
    eagerly); with `cuda_graphs` off no part is captured in CUDA graphs. Where eager's autograd
    saves inputs or outputs for the backward, the function checks their versions before its backward (`watching`; not for a graph with symbolic
    sizes, whose saved tensors keep autograd's own checks: `saved_for_training`)."""
    from torch._dynamo.backends.common import aot_autograd

    overlapped = overlapping_input_view(gm, example_inputs)
    if overlapped is not None:
        on_eager(UnsupportedProgram(overlapped), mode)
        return gm.forward
    saved = saved_for_training(gm, example_inputs)
    watched = saved is not None and bool(saved.inputs or saved.outputs)
    returns = ForwardReturns() if watched else None
    options = aot_options(
        mode,
        on_eager,
        settings=PartSettings(cuda_graphs=cuda_graphs),
        saved=saved,
        user_inputs=len(example_inputs),
        returns=returns,
        symbolic=symbolic,
    )
    function = aot_autograd(**options)(gm, list(example_inputs))
    if saved is None or returns is None:
        return function
    return watching(function, saved, returns)


def overlapping_input_view(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> str | None:
    """Why the graph's gradients would not be eager's through AOTAutograd, in one line, or
    None: with symbolic sizes, AOTAutograd makes an output that views an input requiring grad
    again from the input with `as_strided`, and where the input lays elements over each other
    (a stride of 0 over a dim of 2 or more: an expanded leaf) that view's backward sums the
    gradient over the shared memory where eager's gives each element its own (torch.compile's
    own backends compute the same other gradient)."""
    if not any(is_symbolic(t) for t in example_inputs):
        return None
    outputs = _output_values(gm)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for k, (x, node) in enumerate(zip(example_inputs, placeholders, strict=False)):
        if not (isinstance(x, torch.Tensor) and x.requires_grad and _overlaps(x)):
            continue
        traced = node.meta.get("example_value")  # the fake tensor the outputs' values alias
        if not isinstance(traced, torch.Tensor):
            continue
        if any(_aliases(o, traced) for o in outputs):
            return (
                f"an output views input {k}, which requires grad and repeats its elements "
                f"(strides {tuple(x.stride())}): AOTAutograd's backward of such a view with "
                "dynamic shapes is not eager's"
            )
    return None


def _output_values(gm: torch.fx.GraphModule) -> list[Any]:
    """The traced values (dynamo's fake tensors) of the graph's outputs."""
    found: list[Any] = []

    def read(node: torch.fx.Node) -> torch.fx.Node:
        found.append(node.meta.get("example_value"))
        return node

    torch.fx.node.map_arg(gm.graph.output_node().args, read)
    return found


def _aliases(value: Any, t: torch.Tensor) -> bool:
    """Whether `value` is a tensor that shares `t`'s memory."""
    return isinstance(value, torch.Tensor) and storage_key(value) == storage_key(t)


def _overlaps(t: torch.Tensor) -> bool:
    """Whether `t` reads one element at two indices (`overlaps`, at the sizes' hints: a
    symbolic dim is 2 or more)."""
    return overlaps([size_hint(d) for d in t.shape], [size_hint(s) for s in t.stride()])


def watching(
    function: Callable[..., Any], saved: EagerSaved, returns: ForwardReturns
) -> Callable[..., Any]:
    """`function` (AOTAutograd's, dynamo's calling convention), each call's inputs and
    outputs that eager saves watched for writes before the backward (`watch_versions`; its
    forward part tells `returns` what it returned)."""

    def run(*args: Any) -> Any:
        with returns.calling() as returned:
            results = function(*args)
        watch_versions(saved, args, results, returned)
        return results

    return torch._dynamo.disable(run, reason="do not trace AOT-compiled graph")
