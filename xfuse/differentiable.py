"""
`xfuse.compile`'s programs under autograd and autocast. A call that needs autograd (grad
enabled, and an input, parameter or buffer that requires grad) or runs under autocast is run
by AOTAutograd (`xfuse.aot`): its outputs carry a `grad_fn`, `backward()` runs xfuse's
backward program, and the casts are those autocast makes in eager. Other calls run the
inference programs, as ever.

    compiled = xfuse.compile(model, (x,))
    loss = compiled(x).sum()    # the forward program (grad on, the weights require grad)
    loss.backward()             # the backward program: the weights' .grad as eager's

The model is exported for the call as for inference (torch.export), and AOTAutograd traces the
exported graph with the module's parameters and buffers as inputs (`TracedCall`), once per
signature: the inputs' and the module state's layouts, the inputs' structure, `training`,
grad mode, which tensors require grad, and autocast's settings. The forward is compiled then,
the backward at the first backward. What eager's autograd would do that the programs cannot
is refused in one line (`GradientUnsupportedError`), never run otherwise. A write between
the forward and the backward raises eager's version-counter error where eager's would, whatever
the partitioner saved (`xfuse.aot.eager_saved`, `VersionCheck`).

An inference program that updates its module's buffers (batch norm's running statistics in
training mode), which the importer refuses, is AOTAutograd's functional program too: its
runtime copies the new values into the buffers (`TracedExecutable`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from itertools import chain
from typing import Any

import torch
from torch.utils import _pytree as pytree

from xfuse.aot import (
    CompiledPart,
    EagerSaved,
    ForwardReturns,
    PartSettings,
    aot_options,
    saved_for_training,
    watch_versions,
)
from xfuse.errors import EagerFallbackError, ExportError, GradientUnsupportedError, XfuseError
from xfuse.frontend.attention_masks import without_constant_masks
from xfuse.frontend.export import ModelOrFn
from xfuse.runtime.driver import BuildSettings, builder
from xfuse.runtime.executor import CallInputs, CompiledProgram, Executable
from xfuse.runtime.fallback import FallbackMode, eager_or_error, reason_of
from xfuse.runtime.state import ModuleState

Tensor = torch.Tensor

AUTOCAST_DEVICES = ("cpu", "cuda")

TENSOR = object()
"""Where a traced program's output is a tensor (`TracedCall.outputs`)."""


def autocast_key() -> tuple[tuple[str, torch.dtype], ...]:
    """The devices autocast is on for, with its dtype there; empty where it is off."""
    return tuple(
        (d, torch.get_autocast_dtype(d)) for d in AUTOCAST_DEVICES if torch.is_autocast_enabled(d)
    )


# ---------------------------------------------------------------------------------------------
# The program
# ---------------------------------------------------------------------------------------------


class DifferentiableProgram(CompiledProgram):
    """A `CompiledProgram` whose calls that need autograd or run under autocast go through
    AOTAutograd (a `TracedCall` per signature); its other calls run its inference programs."""

    def __init__(
        self,
        build: Callable[[CallInputs], Executable],
        example_inputs: Sequence[Any],
        device: torch.device,
        state: ModuleState | None,
        example_kwargs: dict[str, Any] | None,
        static_inputs: Sequence[int],
        eager: ModelOrFn,
        parts: PartSettings,
        mode: FallbackMode,
    ):
        self.parts = parts
        """What the AOTAutograd parts compile with: the program's own options."""
        self.mode = mode
        self.traced: dict[Hashable, TracedCall] = {}
        self.tracing = threading.Lock()
        """Held while a `TracedCall` is made."""
        super().__init__(build, example_inputs, device, state, example_kwargs, static_inputs, eager)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # One C call for autocast (a private one: `autocast_key` takes a microsecond).
        autocast = torch._C._is_any_autocast_enabled()
        if autocast or (torch.is_grad_enabled() and self._needs_grad(args, kwargs)):
            return self._traced_call(args, kwargs)
        return super().__call__(*args, **kwargs)

    def _needs_grad(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        plain = not kwargs and all(isinstance(a, Tensor) for a in args)
        leaves = args if plain else pytree.tree_leaves((args, kwargs))
        state = self.state.tensors() if self.state is not None else ()
        return any(isinstance(t, Tensor) and t.requires_grad for t in chain(leaves, state))

    def _traced_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = self._inputs(args, kwargs)
        if torch.is_grad_enabled() and isinstance(self.eager, torch.nn.Module):
            check_hooks(self.eager)  # each call: a hook may be registered at any time
        state = self.state.tensors() if self.state is not None else []
        sig = self._signature(call.tensors, call.structure, state, torch.is_grad_enabled())
        grads = tuple(t.requires_grad for t in (*call.tensors, *state))
        return self._trace((sig, grads, autocast_key()), call, state)(state, call.leaves)

    def _trace(self, key: Hashable, call: CallInputs, state: Sequence[Tensor]) -> TracedCall:
        """The `TracedCall` for `key`, made on its first call (one per key, whatever the
        threads)."""
        found = self.traced.get(key)
        if found is not None:
            return found
        with self.tracing:
            found = self.traced.get(key)
            if found is None:
                self._check_state_devices(call, state)
                found = self._traced_for(call, state)
                self.traced[key] = found
            return found

    def trace(self, *args: Any, **kwargs: Any) -> TracedCall:
        """A new `TracedCall` for a call, in the grad mode it is made in, its backward
        compiled now too: what `xfuse.explain(..., training=True)` describes. Nothing runs."""
        from torch._functorch import config

        call = self._inputs(args, kwargs)
        state = self.state.tensors() if self.state is not None else []
        with config.patch(force_non_lazy_backward_lowering=True):
            return self._traced_for(call, state)

    def _traced_for(self, call: CallInputs, state: Sequence[Tensor]) -> TracedCall:
        assert self.eager is not None
        model = as_module(self.eager)
        names = self.state.names if self.state is not None else ()
        exported = export_graph(model, call)
        if torch.is_grad_enabled():
            check_differentiable(model, exported)
        return TracedCall(exported, names, call.leaves, state, self.parts, self.mode)


def differentiable_program(
    model_or_fn: ModelOrFn,
    settings: BuildSettings,
    example_inputs: tuple[Any, ...],
    example_kwargs: dict[str, Any] | None,
    static_inputs: tuple[int, ...],
) -> DifferentiableProgram:
    """The program of `xfuse.compile` (`xfuse.runtime.driver.compile_program`'s `program`): a
    `DifferentiableProgram` whose AOTAutograd parts compile with its own settings, and whose
    inference programs that update their module's buffers are AOTAutograd's
    (`build_or_trace`)."""
    device, state, fallback = settings.device, settings.state, settings.fallback
    parts = PartSettings(
        device,
        settings.options,
        settings.cache,
        settings.quiet,
        settings.cuda_graphs,
        settings.backend,
    )
    return DifferentiableProgram(
        build_or_trace(builder(model_or_fn, settings), model_or_fn, state, parts, fallback),
        example_inputs,
        device,
        state,
        example_kwargs,
        static_inputs,
        model_or_fn,
        parts,
        fallback,
    )


def build_or_trace(
    build: Callable[[CallInputs], Executable],
    model_or_fn: ModelOrFn,
    state: ModuleState | None,
    parts: PartSettings,
    mode: FallbackMode,
) -> Callable[[CallInputs], Executable]:
    """`build`; where the importer refuses a program that updates its module's buffers, the
    program as AOTAutograd traces it (`TracedExecutable`)."""

    def made(call: CallInputs) -> Executable:
        try:
            return build(call)
        except ExportError as e:
            refused = e
        model = as_module(model_or_fn)
        exported = export_graph(model, call)
        if state is None or not updates_buffers(exported):
            raise refused
        traced = TracedCall(exported, state.names, call.leaves, state.tensors(), parts, mode)
        found = traced.parts.get("inference")
        if found is None:  # it runs eagerly (with a warning)
            raise refused
        return TracedExecutable.of(found.program, traced)

    return made


def updates_buffers(exported: torch.export.ExportedProgram) -> bool:
    """Whether an op of the exported graph writes into a buffer of the module (its schema
    marks the argument written)."""
    buffers = set(exported.graph_signature.inputs_to_buffers)
    for node in exported.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None:
            continue
        for argument, value in zip(schema.arguments, node.args, strict=False):
            written = argument.alias_info is not None and argument.alias_info.is_write
            if written and isinstance(value, torch.fx.Node) and value.name in buffers:
                return True
    return False


@dataclass
class TracedExecutable(Executable):
    """A specialisation that AOTAutograd runs: `program` (what describes it: groups, kernels,
    report) is its compiled part, `traced` runs it."""

    traced: TracedCall | None = None

    @staticmethod
    def of(part: CompiledProgram, traced: TracedCall) -> TracedExecutable:
        default = part.default
        return TracedExecutable(
            default.program,
            default.bind,
            default.unflatten,
            report=default.report,
            op_names=default.op_names,
            compile_times=default.compile_times,
            device=default.device,
            traced=traced,
        )

    def run(
        self, inputs: Sequence[Tensor], state: Sequence[Tensor] = (), static: Sequence[int] = ()
    ) -> Any:
        assert self.traced is not None
        return self.traced(state, inputs)


def as_module(model_or_fn: ModelOrFn) -> torch.nn.Module:
    from xfuse.frontend.importer import wrap_function

    if isinstance(model_or_fn, torch.nn.Module):
        return model_or_fn
    return wrap_function(model_or_fn)


# ---------------------------------------------------------------------------------------------
# One signature through AOTAutograd
# ---------------------------------------------------------------------------------------------


class TracedCall:
    """One signature's program as AOTAutograd runs it: the exported graph traced with the
    module's state tensors and the call's distinct tensors as inputs (one tensor passed twice
    is one input, as torch.export reads it), its forward (or inference) part compiled now, its
    backward at the first backward. `parts` holds each part xfuse compiled."""

    def __init__(
        self,
        exported: torch.export.ExportedProgram,
        names: Sequence[str],
        leaves: Sequence[Any],
        state: Sequence[Tensor],
        settings: PartSettings,
        mode: FallbackMode,
    ):
        from xfuse.frontend.pytrees import unflattener

        self.graph = FlatGraph(exported.module())
        self.state_names = tuple(names)
        self.names = tuple(f"program.{n}" for n in names)
        self.leaves = list(leaves)
        """The call's leaves: its constants, and its tensors' places (`slots`)."""
        self.slots = tensor_slots(leaves)
        self.unflatten = unflattener(exported.call_spec.out_spec)
        self.outputs: list[Any] = []
        """The graph's flat outputs as traced: `TENSOR` where a tensor is, the other values."""
        self.parts: dict[str, CompiledPart] = {}
        inputs = [*state, *distinct_tensors(leaves)]
        self.saved: EagerSaved | None = saved_for_training(self.flat, inputs)
        """The inputs and outputs eager's autograd saves (`xfuse.aot.eager_saved`)."""
        self.returns = ForwardReturns()
        """What the forward part returns at each call (`xfuse.aot.compiled_node`)."""
        self.function = self._compile(inputs, replace(settings, state_inputs=len(names)), mode)

    def _compile(
        self, inputs: list[Tensor], settings: PartSettings, mode: FallbackMode
    ) -> Callable[..., Any]:
        """AOTAutograd's function of `flat`, traced on `inputs` (fake copies: nothing runs);
        an error of its tracing is one line."""
        from torch._functorch.aot_autograd import aot_module_simplified

        options = aot_options(
            mode,
            part_runs_eagerly,
            settings,
            self.parts.__setitem__,
            self.saved,
            len(inputs),
            self.returns,
        )
        try:
            # Typed for a GraphModule; any module is called the same way.
            module: Any = FlatInputs(self.flat)
            return aot_module_simplified(module, inputs, **options)
        except XfuseError:
            raise
        except Exception as e:
            from xfuse.frontend.export import short_cause

            raise trace_error(e) from short_cause(e)

    def flat(self, *inputs: Tensor) -> list[Tensor]:
        """The exported graph on AOTAutograd's flat inputs (the state tensors, then the call's
        distinct tensors): its tensor outputs (the others are kept in `outputs`)."""
        count = len(self.names)
        leaves = [
            inputs[count + self.slots[i]] if i in self.slots else leaf
            for i, leaf in enumerate(self.leaves)
        ]
        state = dict(zip(self.names, inputs[:count], strict=True))
        results = torch.func.functional_call(self.graph, state, tuple(leaves))
        self.outputs = [TENSOR if isinstance(r, Tensor) else r for r in results]
        return [r for r in results if isinstance(r, Tensor)]

    def __call__(self, state: Sequence[Tensor], leaves: Sequence[Any]) -> Any:
        inputs = [*state, *distinct_tensors(leaves)]
        if self.saved is None:
            results = self.function(*inputs)
        else:
            with self.returns.calling() as returned:
                results = self.function(*inputs)
            watch_versions(self.saved, inputs, results, returned)
        found = iter(results)
        return self.unflatten([next(found) if o is TENSOR else o for o in self.outputs])

    def input_name(self, index: int) -> str:
        """AOTAutograd's flat input `index`: a state tensor's name, or the call's distinct
        tensor's place."""
        count = len(self.state_names)
        if index < count:
            return f"'{self.state_names[index]}'"
        return f"input {index - count}"


def trace_error(error: Exception) -> XfuseError:
    """What AOTAutograd's failure to trace a call is: `GradientUnsupportedError` where the
    call needs autograd, else `ExportError`."""
    if torch.is_grad_enabled():
        return GradientUnsupportedError(
            f"xfuse: AOTAutograd cannot differentiate the program: {reason_of(error)}"
        )
    return ExportError(f"xfuse: AOTAutograd cannot trace the program: {reason_of(error)}")


class FlatGraph(torch.nn.Module):
    """An exported program's graph run on its flat inputs, to its flat outputs: no pytree on
    either side (`TracedCall.unflatten` rebuilds the output's structure)."""

    def __init__(self, program: torch.fx.GraphModule):
        super().__init__()
        self.program = program

    def forward(self, *leaves: Any) -> Any:
        return torch.fx.Interpreter(self.program).run(*leaves, enable_io_processing=False)


class FlatInputs(torch.nn.Module):
    """A function as the module AOTAutograd traces: no parameters of its own (the state
    tensors are inputs, read from the module at every call)."""

    def __init__(self, function: Callable[..., list[Tensor]]):
        super().__init__()
        self.function = function

    def forward(self, *inputs: Tensor) -> list[Tensor]:
        return self.function(*inputs)


def tensor_slots(leaves: Sequence[Any]) -> dict[int, int]:
    """Each tensor leaf's place among the distinct tensors (`distinct_tensors`), by position."""
    first: dict[int, int] = {}
    return {
        i: first.setdefault(id(leaf), len(first))
        for i, leaf in enumerate(leaves)
        if isinstance(leaf, Tensor)
    }


def distinct_tensors(leaves: Sequence[Any]) -> list[Tensor]:
    """The tensor leaves, each tensor once, in the order of their first place."""
    return list({id(leaf): leaf for leaf in leaves if isinstance(leaf, Tensor)}.values())


def part_runs_eagerly(error: Exception, mode: FallbackMode) -> None:
    """A part xfuse could not compile: raise in strict mode, else warn (it runs eagerly)."""
    if isinstance(error, EagerFallbackError):
        raise error
    eager_or_error("a part of the AOTAutograd program", reason_of(error), mode)


# ---------------------------------------------------------------------------------------------
# Exporting, and what the traced programs cannot do
# ---------------------------------------------------------------------------------------------


def export_graph(model: torch.nn.Module, call: CallInputs) -> torch.export.ExportedProgram:
    """torch.export of the model for `call`, as `xfuse.compile` exports for inference
    (`xfuse.frontend.export`): one export at a time, library types registered; a failure is
    eager's own error where eager refuses the call, else one `ExportError` line."""
    from xfuse.frontend.eager_rules import eager_call_error
    from xfuse.frontend.export import EXPORT_LOCK, no_stack_traces, short_cause, torch_logs_quiet
    from xfuse.frontend.pytrees import export_support

    failed: Exception | None = None
    with EXPORT_LOCK, no_stack_traces(), export_support(), torch_logs_quiet():
        try:
            exported = torch.export.export(model, call.args, call.kwargs, strict=False)
        except Exception as e:  # noqa: BLE001 - asked of eager below, outside the lock
            failed = e
        else:
            without_constant_masks(exported.graph_module)
            return exported
    refused = eager_call_error(model, call.args, call.kwargs)
    if refused is not None:
        raise refused from short_cause(failed)
    raise ExportError(
        f"xfuse: torch.export could not export the program: {reason_of(failed)}"
    ) from short_cause(failed)


def check_differentiable(model: torch.nn.Module, exported: torch.export.ExportedProgram) -> None:
    """A `GradientUnsupportedError` where eager's autograd would give a gradient to a tensor
    the traced program takes as a constant: one that requires grad but is no input, parameter
    or buffer (a tensor attribute, a captured tensor)."""
    for name, value in exported.constants.items():
        if isinstance(value, Tensor) and value.requires_grad:
            raise GradientUnsupportedError(
                f"xfuse: '{name}' requires grad but is no input, parameter or buffer of the "
                "model, so the compiled backward would give it no gradient"
            )
    signature = exported.graph_signature
    known = set(state_names(model))
    for name in (*signature.parameters, *signature.buffers):
        if name not in known:
            raise GradientUnsupportedError(f"xfuse: the program reads '{name}', no module state")


def state_names(model: torch.nn.Module) -> list[str]:
    """Every name of the module's parameters and buffers, tied ones' each."""
    return [
        *(n for n, _ in model.named_parameters(remove_duplicate=False)),
        *(n for n, _ in model.named_buffers(remove_duplicate=False)),
    ]


def check_hooks(model: torch.nn.Module) -> None:
    """A `GradientUnsupportedError` where a module has a backward hook (or every module, a
    global one), which the compiled backward would not call."""
    from torch.nn.modules import module as modules

    hooked = next(
        (
            f"module '{name}'" if name else "the model"
            for name, sub in model.named_modules()
            if sub._backward_hooks or sub._backward_pre_hooks
        ),
        None,
    )
    if modules._global_backward_hooks or modules._global_backward_pre_hooks:
        hooked = "every module"
    if hooked is not None:
        raise GradientUnsupportedError(
            f"xfuse: {hooked} has a backward hook, which the compiled backward would not call"
        )
