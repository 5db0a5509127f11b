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
    saved_for_training,
    watch_versions,
)
from xfuse.differentiable import autocast_key
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
