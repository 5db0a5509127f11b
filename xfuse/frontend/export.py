"""
torch.export as `xfuse.compile` runs it: one export at a time in a process (`EXPORT_LOCK`), no
stack traces recorded, graph modules compiled lazily, torch's loggers of the program's own
failures quiet, any failure one `ExportError` line (`short_cause`); then the importer. The
imported program is kept in the kernel cache under its `export_key`, so that a second
compilation of the same computation skips torch.export (`import_for_xfuse`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _pytree as pytree
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from xfuse.errors import ExportError
from xfuse.frontend import pytrees
from xfuse.frontend.attention_masks import without_constant_masks
from xfuse.ir import serialize
from xfuse.runtime.cache import IMPORT, KernelCache, import_key
from xfuse.runtime.fallback import reason_of

if TYPE_CHECKING:
    from xfuse.frontend.export_key import ExportKey

Tensor = torch.Tensor
ModelOrFn = torch.nn.Module | Callable[..., Any]

EXPORT_LOCK = threading.Lock()
"""One torch.export at a time in this process: it patches global state while it traces."""


@contextmanager
def no_stack_traces() -> Iterator[None]:
    """torch.fx records no Python stack trace per traced node (`torch.fx.config`'s
    `do_not_emit_stack_traces`; a torch without it, 2.11 say, by `tracers_record_none`): xfuse
    reads none, and capturing and symbolizing them is a large part of torch.export's time.
    Restored after, for the caller's own tracing."""
    import torch.fx.config as fx_config

    saved = getattr(fx_config, "do_not_emit_stack_traces", None)
    if saved is None:
        with tracers_record_none():
            yield
        return
    fx_config.do_not_emit_stack_traces = True
    try:
        yield
    finally:
        fx_config.do_not_emit_stack_traces = saved


@contextmanager
def tracers_record_none() -> Iterator[None]:
    """Every torch.fx tracer reads `record_stack_traces` as False for the duration, and setting
    it does nothing: torch 2.11's export sets it on its tracer, and has no setting that stops
    it. A property on `TracerBase` overrides what a tracer's own `__init__` sets; the class's
    default is put back after."""
    from torch.fx.proxy import TracerBase

    saved = TracerBase.__dict__.get("record_stack_traces", False)
    setattr(TracerBase, "record_stack_traces", property(lambda _: False, lambda _, __: None))  # noqa: B010
    try:
        yield
    finally:
        setattr(TracerBase, "record_stack_traces", saved)  # noqa: B010


@contextmanager
def lazy_graph_modules() -> Iterator[None]:
    """torch.export's graph modules write and compile their Python code only if called
    (`torch.fx._lazy_graph_module`, on by default under torch.compile; where this torch has
    it): export builds a couple of dozen of them and calls few, and the importer reads their
    nodes, not their code."""
    try:
        from torch.fx._lazy_graph_module import _use_lazy_graph_module
    except ImportError:
        yield
        return
    with _use_lazy_graph_module(True):
        yield


QUIET_LOGGERS = ("torch._subclasses.fake_tensor",)
"""torch loggers that log a failure of the program being exported (a shape error found while
running its meta functions: a 20-line traceback at ERROR) which xfuse raises as one line."""


@contextmanager
def torch_logs_quiet() -> Iterator[None]:
    """The `QUIET_LOGGERS` silenced while torch.export runs; their levels restored after."""
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    saved = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, saved, strict=True):
            logger.setLevel(level)


TRACEBACK_ENV = "XFUSE_TRACEBACK"
"""Set to 1, an xfuse error's cause keeps its whole traceback and chain (`short_cause`)."""


def short_cause(error: BaseException) -> BaseException:
    """`error` as the `__cause__` of a one-line xfuse error: its type and message kept, its
    traceback and its own chain dropped (torch.export's are hundreds of lines of torch's
    internals, printed above the xfuse error). Whole under `XFUSE_TRACEBACK=1`."""
    if os.environ.get(TRACEBACK_ENV) == "1":
        return error
    error.__traceback__ = None
    error.__cause__ = None
    error.__context__ = None
    error.__suppress_context__ = True
    return error


@dataclass
class Imported:
    """An imported program plus what the runtime needs beyond `ImportedProgram`."""

    program: Any  # xfuse.frontend.ImportedProgram
    out_spec: pytree.TreeSpec
    op_names: list[str]


def import_for_xfuse(
    model_or_fn: ModelOrFn,
    example_inputs: tuple[Any, ...],
    example_kwargs: dict[str, Any] | None = None,
    verify: bool = True,
    cache: KernelCache | None = None,
) -> Imported:
    """torch.export, then the importer (its module verified unless `verify` is off); any
    failure is one `ExportError` line, or, where torch.export fails on arguments that eager's
    kernels refuse too (`bmm` of f32 and f64, whose fake-tensor check speaks first), eager's
    own error (the model run once eagerly to learn it, `eager_call_error`). With a `cache`, the imported program is kept there
    under its `export_key` and taken from there when the key is found (no export then)."""
    from xfuse.errors import UnsupportedProgram
    from xfuse.frontend.eager_rules import eager_call_error
    from xfuse.frontend.export_key import export_key
    from xfuse.frontend.importer import import_program, wrap_function
    from xfuse.frontend.pytrees import export_support

    model = model_or_fn if isinstance(model_or_fn, torch.nn.Module) else wrap_function(model_or_fn)
    # torch.export (and decomposing) is not thread-safe
    failed: Exception | None = None
    with EXPORT_LOCK, no_stack_traces(), lazy_graph_modules():
        key = None if cache is None else export_key(model, example_inputs, example_kwargs)
        entry = None if key is None else import_key(key.digest)
        if cache is not None and key is not None and entry is not None:
            found = cache.program(entry, lambda data: _load(data, model, key), IMPORT)
            if found is not None:
                return found
        try:
            with export_support(), torch_logs_quiet():
                exported = torch.export.export(model, example_inputs, example_kwargs, strict=False)
        except Exception as e:  # noqa: BLE001 - asked of eager below, outside the lock
            failed = e
        else:
            try:
                without_constant_masks(exported.graph_module)
                program = import_program(exported, verify)
            except UnsupportedProgram as e:
                raise ExportError(f"xfuse: cannot import the program: {e}") from short_cause(e)
    if failed is not None:
        # The model runs eagerly once, with no other export waiting on the lock meanwhile.
        refused = eager_call_error(model, example_inputs, example_kwargs or {})
        if refused is not None:  # eager refuses these arguments too: its own error
            raise refused from short_cause(failed)
        raise ExportError(
            f"xfuse: torch.export could not export the program: {reason_of(failed)}"
        ) from short_cause(failed)
    imported = Imported(program, exported.call_spec.out_spec, forward_op_names(program.module))
    if cache is not None and key is not None and entry is not None:
        if str(key.out_spec) == str(imported.out_spec):  # else the key's replay is not export's
            _store(cache, entry, imported, model)
    return imported


def _store(cache: KernelCache, key: str, imported: Imported, model: torch.nn.Module) -> None:
    """Keep `imported` under `key` (`import_key`): the module's state tensors by name (bound
    again from the module that loads it), the lifted constants by value, the output structure
    not at all (the key's replay gives it). One that does not pickle is not kept: the next
    compile exports it again."""
    from xfuse.frontend.export_key import state_of

    program = imported.program
    state = {name for name, _ in state_of(model)}
    constants = {k: v.cpu() for k, v in program.params.items() if k not in state}
    stored = replace(program, params=constants)
    try:
        data = serialize.dumps((stored, list(program.params), imported.op_names))
    except Exception:  # noqa: BLE001 - uncached, as the docstring says
        return
    cache.store_program(key, data, IMPORT)


def _load(data: bytes, model: torch.nn.Module, key: ExportKey) -> Imported:
    """What `_store` kept, its state bound to `model`'s tensors of those names."""
    from xfuse.frontend.export_key import state_of

    stored, names, op_names = serialize.loads(data)
    state = dict(state_of(model))
    params = {n: stored.params[n] if n in stored.params else state[n].detach() for n in names}
    return Imported(replace(stored, params=params), key.out_spec, op_names)


def unflattener(imported: Imported) -> Callable[[list[Tensor]], Any]:
    """Flat tensor results -> the model's output structure (with its non-tensor outputs put
    back); one output, or a flat tuple or list of them, without pytree."""
    spec, program = imported.out_spec, imported.program
    build = flat_builder(spec)
    if not program.output_constants:
        return build
    outputs = program.outputs
    return lambda outs: build(outputs(outs))


def flat_builder(spec: pytree.TreeSpec) -> Callable[[list[Any]], Any]:
    """Flat leaves -> the structure `spec` describes: the leaf itself, a flat tuple or list
    made at once, anything else through pytree (`pytrees.unflattener`)."""
    if spec.is_leaf():
        return lambda leaves: leaves[0]
    flat = all(spec.child(i).is_leaf() for i in range(spec.num_children))
    if flat and spec.type is tuple:
        return tuple
    if flat and spec.type is list:
        return list
    return pytrees.unflattener(spec)


def forward_op_names(module: ModuleOp) -> list[str]:
    """The names of `@forward`'s ops, in order (its return left out)."""
    forward = next(op for op in module.ops if isinstance(op, func.FuncOp))
    return [op.name for op in forward.body.block.ops if not isinstance(op, func.ReturnOp)]
