"""
`torch.compile(model, backend="xfuse")`: the backend, which compiles each graph dynamo hands
over with `xfuse.compile` (its registration under the name is in `xfuse/__init__.py`).
"""

from __future__ import annotations

import operator
import threading
import warnings
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from xfuse.aot import graph_device, is_symbolic, real_input
from xfuse.api import compile
from xfuse.errors import (
    AutogradUnsupportedError,
    EagerArgumentError,
    EagerFallbackError,
    FallbackWarning,
    InvalidArgumentError,
)
from xfuse.runtime.executor import CompiledProgram
from xfuse.runtime.fallback import FallbackMode, fallback_mode, reason_of
from xfuse.training import needs_aot, training_backend

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
    gm: torch.fx.GraphModule, example_inputs: list[Any], options: dict[str, Any] | None = None
) -> Callable[..., Any]:
    """The `torch.compile` backend: the FX graph through `xfuse.compile`, for the device of its
    inputs; on any failure a warning and `gm.forward` (eager), or with
    `options={"fallback": "error"}` (or `XFUSE_STRICT=1`) an `EagerFallbackError`. Calls that
    need autograd run eagerly, with one warning that says so (strict: an `EagerFallbackError`
    at the call). A graph with dynamic shapes
    (SymInt inputs or sizes) is compiled per concrete shape at call time. A graph dynamo hands
    over again (same code, same attribute tensors, same input signature) gets what the first
    time got (`BACKEND_PROGRAMS`)."""
    mode = backend_mode(options)
    key = (graph_key(gm, example_inputs), mode)
    found = BACKEND_PROGRAMS.get(key)
    if found is not None:
        return found
    result = _backend(gm, example_inputs, mode)
    if getattr(result, "compiled", None) is not None or hasattr(result, "programs"):
        BACKEND_PROGRAMS[key] = result
    return result


BACKEND_OPTIONS = ("fallback",)
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
    gm: torch.fx.GraphModule, example_inputs: list[Any], mode: FallbackMode
) -> Callable[..., Any]:
    if needs_aot(example_inputs):
        return training_backend(gm, example_inputs, mode, _graph_runs_eagerly)
    if any(is_symbolic(t) for t in example_inputs):
        return _per_shape(gm, graph_device(gm, example_inputs), mode)
    try:
        compiled = compile(
            gm,
            tuple(real_input(t) for t in example_inputs),
            str(graph_device(gm, example_inputs)),
            fallback=mode,
            static_inputs=static_positions(gm),
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


def _per_shape(
    gm: torch.fx.GraphModule, device: torch.device, mode: FallbackMode
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

        try:
            return compile(
                fixed, tuple(args[i] for i in tensors), str(device), quiet=True, fallback=mode
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


import xfuse as _xfuse  # noqa: E402  (the name registration lives at the package root)

_xfuse.register_backend()
