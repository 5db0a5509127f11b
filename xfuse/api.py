"""
xfuse's public API.

    compiled = xfuse.compile(model, (x,))          # a CompiledProgram; call it like the model
    y = compiled(x)
    print(xfuse.explain(model, (x,)))               # ops -> groups -> kernels, with reasons
    torch.compile(model, backend="xfuse")           # through `xfuse.dynamo.dynamo_backend`

A call that needs autograd (grad enabled, and an input or parameter that requires grad) runs
xfuse's forward and backward programs, as AOTAutograd cuts them (`xfuse.differentiable`): its
results carry a `grad_fn`, and `backward()` gives eager's gradients. What compiling does is
elsewhere: the pipeline in `xfuse.pipeline` (`compile_pipeline`), torch.export in
`xfuse.frontend.export`, the build of each specialisation in `xfuse.runtime.driver`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

import torch

from xfuse.backends import check_device, get_backend
from xfuse.differentiable import DifferentiableProgram, differentiable_program
from xfuse.errors import FallbackWarning, InvalidArgumentError
from xfuse.explanation import (
    Explanation,
    dynamic_explanation,
    explanation_of,
    training_explanation,
)
from xfuse.frontend.export import ModelOrFn
from xfuse.pipeline import DEFAULT_PIPELINE, PipelineOptions
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.driver import FusionReport, compile_program
from xfuse.runtime.executor import CompiledProgram
from xfuse.runtime.fallback import fallback_mode

if TYPE_CHECKING:
    from xfuse.runtime.dynamic import DynamicProgram

Tensor = torch.Tensor

__all__ = [
    "DEFAULT_PIPELINE",
    "CompiledProgram",
    "Explanation",
    "FusionReport",
    "compile",
    "explain",
]


def check_arguments(example_inputs: Any, example_kwargs: Any, pipeline: Any, cache: Any) -> None:
    """`compile`'s arguments of the wrong type, as one-line `InvalidArgumentError`s (not an
    AttributeError from deep inside)."""
    if not isinstance(example_inputs, list | tuple):
        raise InvalidArgumentError(
            f"example_inputs must be a tuple of inputs, got a {type(example_inputs).__name__}"
        )
    if example_kwargs is not None and not isinstance(example_kwargs, dict):
        raise InvalidArgumentError(
            f"example_kwargs must be a dict, got a {type(example_kwargs).__name__}"
        )
    if pipeline is not None and not isinstance(pipeline, str):
        raise InvalidArgumentError(
            f"pipeline must be a string of passes (xfuse-opt -p syntax), got a "
            f"{type(pipeline).__name__}"
        )
    if cache is not None and not isinstance(cache, KernelCache):
        raise InvalidArgumentError(
            f"cache must be an xfuse.runtime.cache.KernelCache, got a {type(cache).__name__}"
        )


def check_static(positions: Sequence[int], count: int) -> tuple[int, ...]:
    """`compile`'s `static_inputs`, each the position of an example input."""
    if any(type(p) is not int or not 0 <= p < count for p in positions):
        raise InvalidArgumentError(
            f"static_inputs must be positions of the {count} example inputs, got {list(positions)}"
        )
    return tuple(positions)


@overload
def compile(  # noqa: A001
    model_or_fn: ModelOrFn,
    example_inputs: Sequence[Any],
    device: str | torch.device = "cpu",
    pipeline: str | None = None,
    *,
    example_kwargs: dict[str, Any] | None = None,
    cache: KernelCache | None = None,
    quiet: bool | None = None,
    cuda_graphs: bool = True,
    fallback: str | None = None,
    channels_last: bool | None = None,
    static_inputs: Sequence[int] = (),
    dynamic_shapes: None = None,
) -> DifferentiableProgram: ...


@overload
def compile(  # noqa: A001
    model_or_fn: ModelOrFn,
    example_inputs: Sequence[Any],
    device: str | torch.device = "cpu",
    pipeline: str | None = None,
    *,
    example_kwargs: dict[str, Any] | None = None,
    cache: KernelCache | None = None,
    quiet: bool | None = None,
    cuda_graphs: bool = True,
    fallback: str | None = None,
    channels_last: bool | None = None,
    static_inputs: Sequence[int] = (),
    dynamic_shapes: dict[str, Any] | Sequence[Any],
) -> DynamicProgram: ...


def compile(  # noqa: A001 - the public name, as in torch.compile
    model_or_fn: ModelOrFn,
    example_inputs: Sequence[Any],
    device: str | torch.device = "cpu",
    pipeline: str | None = None,
    *,
    example_kwargs: dict[str, Any] | None = None,
    cache: KernelCache | None = None,
    quiet: bool | None = None,
    cuda_graphs: bool = True,
    fallback: str | None = None,
    channels_last: bool | None = None,
    static_inputs: Sequence[int] = (),
    dynamic_shapes: dict[str, Any] | Sequence[Any] | None = None,
) -> DifferentiableProgram | DynamicProgram:
    """Compile a model or function for its example inputs' shapes and dtypes (other shapes
    compile on first use). Inputs are as torch.export takes them: tensors, Python scalars
    (specialised: another value compiles another program) and tuples, lists and dicts of
    them, positionally and by keyword (`example_kwargs`). `pipeline` replaces the fusion
    pipeline, `DEFAULT_PIPELINE` (xfuse-opt `-p` syntax); the passes that run are those of
    `xfuse.pipeline.compile_pipeline` (the device's own after `decompose`). Progress shows on
    a terminal unless `quiet` (or `XFUSE_QUIET=1`); see `xfuse.progress`.
    On CUDA, each specialisation runs as a captured CUDA graph from its second call on, unless
    `cuda_graphs` is False or `XFUSE_CUDA_GRAPHS=0` (`xfuse.runtime.cuda_graphs`).
    A group that cannot be compiled runs eagerly with a `FallbackWarning`; with
    `fallback="error"` (the default under `XFUSE_STRICT=1`) it is an `EagerFallbackError`.
    `channels_last` keeps the activations between convolutions in NHWC memory: None (the
    default) where the device profits (CUDA: as Inductor weighs the convolutions; the CPU:
    as its convolutions were measured, `xfuse.choices.chosen_layout`), True always, False
    never (`xfuse.pipeline.layout_pass`).
    `static_inputs` are the positions of inputs that stay where they are between calls (a
    model's parameters and buffers passed as inputs, as `torch.compile` passes them): a CUDA
    graph reads them in place instead of copying them in, and captures anew where one moved.
    A call with grad enabled and an input, parameter or buffer that requires grad, or under
    `torch.autocast`, runs through AOTAutograd (`xfuse.differentiable`): outputs carry a
    `grad_fn`, `backward()` runs xfuse's backward program and gives eager's gradients, and
    autocast casts as in eager; under `torch.no_grad()` the inference program alone runs.
    `device` is "cpu", "cuda" or "cuda:N" (a string or torch.device); arguments of the wrong
    kind are an `InvalidArgumentError` (a ValueError and TypeError too).
    `dynamic_shapes` (torch.export's: `{"x": {0: Dim("batch", min=2, max=1024)}}`) compiles
    once for every size in the ranges, on the CPU or CUDA, for inference: a `DynamicProgram`
    (`xfuse.runtime.dynamic`, which lists what it refuses); on CUDA each shape of its calls is
    captured as a CUDA graph, a few shapes at most (`xfuse.runtime.shape_graphs`)."""
    check_arguments(example_inputs, example_kwargs, pipeline, cache)
    mode, static = fallback_mode(fallback), check_static(static_inputs, len(example_inputs))
    if dynamic_shapes is not None:
        from xfuse.runtime.dynamic import compile_dynamic  # its imports only when asked for

        return compile_dynamic(
            model_or_fn,
            example_inputs,
            device,
            dynamic_shapes,
            pipeline=pipeline,
            cache=cache,
            channels_last=channels_last,
            example_kwargs=example_kwargs,
            fallback=mode,
            cuda_graphs=cuda_graphs,
            static_inputs=static,
        )
    target = check_device(device)
    program = compile_program(
        model_or_fn,
        tuple(example_inputs),
        target,
        PipelineOptions(DEFAULT_PIPELINE if pipeline is None else pipeline, channels_last),
        backend=get_backend(str(target)),
        example_kwargs=example_kwargs,
        cache=cache,
        quiet=quiet,
        cuda_graphs=cuda_graphs,
        fallback=mode,
        static_inputs=static,
        program=differentiable_program,
    )
    assert isinstance(program, DifferentiableProgram)
    return program


def explain(
    model_or_fn: ModelOrFn,
    example_inputs: Sequence[Tensor],
    device: str | torch.device = "cpu",
    pipeline: str | None = None,
    *,
    quiet: bool | None = None,
    channels_last: bool | None = None,
    training: bool = False,
    dynamic_shapes: dict[str, Any] | Sequence[Any] | None = None,
) -> Explanation:
    """Compile (kernels come from the cache when already built) and describe the result. With
    `training`, describe what a call with grad enabled runs: AOTAutograd's forward and backward
    programs (`Explanation.parts`), and what its partitioner saved for the backward and what
    the backward recomputes; nothing runs. With `dynamic_shapes` (as `compile` takes them),
    describe the program compiled once for every size in their ranges, with its size symbols
    (`Explanation.symbols`) and what a call is guarded on (`Explanation.guards`)."""
    if dynamic_shapes is not None:
        if training:
            raise InvalidArgumentError(
                "explain(training=True) does not take dynamic_shapes: dynamic_shapes compiles "
                "inference only yet"
            )
        dynamic = compile(
            model_or_fn,
            example_inputs,
            device,
            pipeline,
            quiet=quiet,
            channels_last=channels_last,
            dynamic_shapes=dynamic_shapes,
        )
        return dynamic_explanation(dynamic)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)  # the explanation lists fallbacks
        compiled = compile(
            model_or_fn,
            example_inputs,
            device,
            pipeline,
            quiet=quiet,
            channels_last=channels_last,
        )
        if training:
            with torch.enable_grad():
                return training_explanation(compiled.trace(*example_inputs))
    return explanation_of(compiled)
