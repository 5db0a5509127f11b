"""
xfuse's public API.

    compiled = xfuse.compile(model, (x,))          # a CompiledProgram; call it like the model
    y = compiled(x)
    print(xfuse.explain(model, (x,)))               # ops -> groups -> kernels, with reasons
    torch.compile(model, backend="xfuse")           # through `xfuse.dynamo.dynamo_backend`

A compiled program is for inference: its results carry no autograd history.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _pytree as pytree
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from xfuse.backends import Backend, get_backend
from xfuse.choices import Choice, choose_passes
from xfuse.collector import collector_paused
from xfuse.errors import (
    CUDAUnavailable,
    ExportError,
    FallbackWarning,
    InvalidArgumentError,
    KernelCacheWarning,
    XfuseError,
)
from xfuse.frontend import pytrees
from xfuse.ir import serialize
from xfuse.ir.fingerprint import fingerprint
from xfuse.passes.fusion.decisions import FusionDecision, format_report
from xfuse.pipeline import PassObserver, verify_module
from xfuse.progress import Progress
from xfuse.report.counts import (
    group_count,
    headline,
    kernel_count,
    op_count,
    plural,
    program_ops,
)
from xfuse.report.dot import program_dot
from xfuse.report.op_index import OpIndex, collect_decisions
from xfuse.report.render import render_dot
from xfuse.report.summary import FusionSummary, format_summary, summarize
from xfuse.runtime.cache import (
    IMPORT,
    KernelCache,
    KernelSource,
    default_cache,
    import_key,
    program_key,
)
from xfuse.runtime.compile_workers import can_compile_ahead, start_workers
from xfuse.runtime.compiler import GroupInfo, KernelInfo, ProgramCompiler
from xfuse.runtime.cuda_graphs import GraphRunner, cuda_graphs_enabled
from xfuse.runtime.executor import (
    CallInputs,
    CompiledProgram,
    Executable,
    normalize_device,
    run_program,
)
from xfuse.runtime.fallback import FallbackMode, fallback_mode, reason_of
from xfuse.runtime.outputs import OutputPlan
from xfuse.runtime.state import ModuleState

if TYPE_CHECKING:
    from xfuse.frontend.export_key import ExportKey
    from xfuse.frontend.importer import ImportedProgram

Tensor = torch.Tensor
ModelOrFn = torch.nn.Module | Callable[..., Any]

DEFAULT_PIPELINE = "decompose,split-reductions,fuse-scored,group-cleanup,fold-linear"

__all__ = [
    "DEFAULT_PIPELINE",
    "CompiledProgram",
    "Explanation",
    "FusionReport",
    "compile",
    "explain",
]


# ---------------------------------------------------------------------------------------------
# Import and fusion
# ---------------------------------------------------------------------------------------------


EXPORT_LOCK = threading.Lock()
"""One torch.export at a time in this process: it patches global state while it traces."""


@contextmanager
def no_stack_traces() -> Iterator[None]:
    """torch.fx records no Python stack trace per traced node (`torch.fx.config`'s
    `do_not_emit_stack_traces`; a torch without it, 2.11 say, by `tracers_record_none`): xfuse
    reads none, and capturing and symbolizing them was 15% of torch.export's time
    (MobileNetV2: 0.47 -> 0.39 s). Restored after, for the caller's own tracing."""
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
    it (there, stack traces were 15-20% of exporting MobileNetV2 and Llama on an H200's host).
    A property on `TracerBase` overrides what a tracer's own `__init__` sets; the class's
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
    nodes, not their code (Llama: 0.21 -> 0.18 s of export, MobileNetV2 0.47 -> 0.41 s)."""
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
    failure is one `ExportError` line. With a `cache`, the imported program is kept there
    under its `export_key` and taken from there when the key is found (no export then)."""
    from xfuse.errors import UnsupportedProgram
    from xfuse.frontend.export_key import export_key
    from xfuse.frontend.importer import import_program, wrap_function
    from xfuse.frontend.pytrees import export_support

    model = model_or_fn if isinstance(model_or_fn, torch.nn.Module) else wrap_function(model_or_fn)
    # torch.export (and decomposing) is not thread-safe
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
        except Exception as e:
            raise ExportError(
                f"xfuse: torch.export could not export the program: {reason_of(e)}"
            ) from short_cause(e)
        try:
            program = import_program(exported, verify)
        except UnsupportedProgram as e:
            raise ExportError(f"xfuse: cannot import the program: {e}") from short_cause(e)
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
    """Flat tensor results -> the model's output structure (with its non-tensor outputs); a
    tensor or a flat tuple of tensors without pytree."""
    spec, program = imported.out_spec, imported.program
    if program.output_constants:
        unflatten = pytrees.unflattener(spec)
        return lambda outs: unflatten(program.outputs(outs))
    if spec.is_leaf():
        return lambda outs: outs[0]
    if spec.type is tuple and all(spec.child(i).is_leaf() for i in range(spec.num_children)):
        return tuple
    return pytrees.unflattener(spec)


def forward_op_names(module: ModuleOp) -> list[str]:
    forward = next(op for op in module.ops if isinstance(op, func.FuncOp))
    return [op.name for op in forward.body.block.ops if not isinstance(op, func.ReturnOp)]


def run_pipeline(
    spec: str,
    module: ModuleOp,
    observer: PassObserver | None = None,
    extra: Sequence[ModulePass] = (),
) -> list[FusionDecision]:
    """Run a pipeline on `module` in place (its result verified: `Pipeline.verify_end`);
    returns the decision records of the fusion passes in it (`decisions` on their pass
    instances). The `extra` passes (`device_passes`) run after `decompose`, or first without
    one."""
    from dataclasses import replace

    from xfuse.pipeline import pipeline

    built = pipeline(spec)
    passes = replace(
        built,
        passes=after_decompose(built.passes, extra),
        observer=observer,
        verify_each=False,
        verify_end=True,
    )
    passes.apply(module)
    return collect_decisions(passes.passes)


# channels-last convolutions (issue 17, layout)
CHANNELS_LAST_ENV = "XFUSE_CHANNELS_LAST"


def layout_pass(asked: bool | None, device: torch.device) -> ModulePass | None:
    """The `channels-last` pass that `xfuse.compile(..., channels_last=asked)` runs, or None.

    True: every program with a 2-D convolution goes channels-last (`force`); False: none does;
    None (the default): `XFUSE_CHANNELS_LAST` (`1`, `0` or `auto`) when set, else auto: on
    CUDA, programs of two or more f16/bf16 convolutions that favour it as Inductor weighs them
    (`layout_verdict`: cuDNN runs f16/bf16 convolutions in NHWC, and converts NCHW tensors
    around each one; its NHWC f32 kernels are slower, and so is one strided patch convolution:
    H100, zoo ResNet f32 0.114 -> 0.157 ms of GPU time, ViT bf16 0.106 -> 0.121); on
    the CPU none: torch converts every weight to channels-last on every call there (ResNet-18,
    batch 4, 64x64, one core: convolutions 17 ms NCHW, 42 ms NHWC)."""
    from xfuse.passes.transforms.channels_last import ChannelsLastPass

    if asked is None:
        setting = os.environ.get(CHANNELS_LAST_ENV, "auto").strip().lower()
        if setting not in ("0", "1", "auto"):
            raise XfuseError(f"{CHANNELS_LAST_ENV} must be 0, 1 or auto, found {setting!r}")
        if setting == "auto":
            return ChannelsLastPass() if device.type == "cuda" else None
        asked = setting == "1"
    return ChannelsLastPass(force=True) if asked else None


def device_passes(channels_last: bool | None, device: torch.device) -> tuple[ModulePass, ...]:
    """What `xfuse.compile` runs after `decompose` for `device`: `depthwise-stencil`
    (depthwise convolutions fuse with their neighbours instead of running as library calls),
    the `channels-last` pass of `layout_pass` (which weighs the convolutions left),
    on the CPU without it `convolution-matmul` (a batch-1 convolution as one matrix product: a
    1x1 one that torch runs as one product, that product; a larger window with few output
    pixels per channel, its patches times the weight), `attention-mask` (attention drops a
    constant mask that hides nothing and runs a causal one as `is_causal`, as eager's call had
    them), and on the CPU `attention-gqa` (attention reads repeated key and value heads
    unrepeated: bit for bit the same there; on CUDA a mask and `enable_gqa` together leave
    torch's fused kernels)."""
    from xfuse.passes.transforms.attention_gqa import AttentionGQAPass
    from xfuse.passes.transforms.attention_mask import AttentionMaskPass
    from xfuse.passes.transforms.convolution_matmul import ConvolutionMatmulPass
    from xfuse.passes.transforms.depthwise_stencil import DepthwiseStencilPass

    layout = layout_pass(channels_last, device)
    cpu = device.type == "cpu"
    gqa = AttentionGQAPass() if cpu else None
    matmul = ConvolutionMatmulPass() if cpu and layout is None else None
    passes = (DepthwiseStencilPass(), layout, matmul, AttentionMaskPass(), gqa)
    return tuple(p for p in passes if p is not None)


def after_decompose(
    passes: tuple[ModulePass, ...], extra: Sequence[ModulePass]
) -> tuple[ModulePass, ...]:
    """`passes` with `extra` after the last `decompose` (first when there is none)."""
    if not extra:
        return passes
    at = max((i + 1 for i, p in enumerate(passes) if p.name == "decompose"), default=0)
    return (*passes[:at], *extra, *passes[at:])


# ---------------------------------------------------------------------------------------------
# The fusion report
# ---------------------------------------------------------------------------------------------


@dataclass
class FusionReport:
    """Why the program looks as it does: every pair the fusion passes examined (fused or kept
    apart, with the named reason), and every unit that runs eagerly because it did not compile."""

    decisions: list[FusionDecision] = field(default_factory=list[FusionDecision])
    fallbacks: list[str] = field(default_factory=list[str])
    op_index: OpIndex | None = field(default=None, compare=False, repr=False)
    """The ops the decisions name (to draw refused pairs, `Explanation.to_dot`)."""
    op_by_op: list[str] = field(default_factory=list[str])
    """Groups compiled op by op because their lowering refused them (the safety net)."""
    choices: list[Choice] = field(default_factory=list[Choice])
    """Library call or xfuse's kernel, as measured at compile time (`xfuse.choices`)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "decisions": [d.to_dict() for d in self.decisions],
            "fallbacks": list(self.fallbacks),
            "op_by_op": list(self.op_by_op),
            "choices": [str(c) for c in self.choices],
        }

    def __str__(self) -> str:
        lines = [format_report(self.decisions)]
        lines += [f"fallback: {f}" for f in self.fallbacks]
        lines += [f"op by op: {f}" for f in self.op_by_op]
        lines += [f"measured: {c}" for c in self.choices]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# compile / explain
# ---------------------------------------------------------------------------------------------


def _builder(
    model_or_fn: ModelOrFn,
    backend: Backend,
    device: torch.device,
    spec: str,
    cache: KernelCache,
    quiet: bool | None = None,
    state: ModuleState | None = None,
    cuda_graphs: bool = True,
    fallback: FallbackMode = "eager",
    extra: Sequence[ModulePass] = (),
) -> Callable[[CallInputs], Executable]:
    def build(call: CallInputs) -> Executable:
        with Progress.create(quiet) as progress, collector_paused():
            return build_with(call, progress)

    def build_with(call: CallInputs, progress: Progress) -> Executable:
        def compile_kernel(source: KernelSource, name: str) -> Any:
            kernel = cache.kernel(backend, source, name)
            progress.count("kernels compiled")
            return kernel

        start_workers(backend)  # their imports overlap exporting and fusing
        progress.stage("exporting the program (torch.export)")
        # unverified: fuse_and_lower verifies it unless the cache holds its fused program
        imported = import_for_xfuse(model_or_fn, call.args, call.kwargs, False, cache)
        progress.lap("export")
        progress.stage(f"imported {len(imported.op_names)} ops; fusing")
        program_ir = imported.program
        program_ir.params = {k: v.to(device) for k, v in program_ir.params.items()}
        compiler = ProgramCompiler(compile_kernel, fallback=fallback, device=device)
        passes, choices = choose_passes(extra, program_ir.module, device, cache, compile)
        decisions, index = fuse_and_lower(program_ir, spec, passes, cache, compiler)
        groups = group_count(program_ir.module)
        progress.lap("fusion")
        progress.stage(f"{plural(groups, 'group')} formed; compiling kernels")
        if can_compile_ahead(backend):
            cache.compile_ahead(backend, compiler.kernel_modules(program_ir.module))
        program = compiler.compile(program_ir.module)
        progress.lap("kernels")
        progress.finish(headline(op_count(program_ir.module), groups, kernel_count(program)))
        return Executable(
            program,
            bind=program_ir.binder(len(call.leaves), live_state(state, program_ir.params, device)),
            unflatten=unflattener(imported),
            report=FusionReport(
                decisions, list(program.fallbacks), index, program.op_by_op, choices
            ),
            op_names=imported.op_names,
            compile_times=dict(progress.phases),
            outputs=OutputPlan(program_ir.output_rules, program, program_ir.hidden_outputs),
            graphs=(
                GraphRunner(program, run_program)
                if device.type == "cuda" and cuda_graphs_enabled(cuda_graphs)
                else None
            ),
        )

    return build


def fuse_and_lower(
    program_ir: ImportedProgram,
    spec: str,
    extra: Sequence[ModulePass],
    cache: KernelCache,
    compiler: ProgramCompiler,
) -> tuple[list[FusionDecision], OpIndex]:
    """Run the passes on the imported module and lower its units for `compiler` (which keeps
    them for `compile`), or take both from the cache's fused program for the same module,
    passes and device (`program_key`): a warm start skips fusing and lowering. The decisions
    and the index of the ops they name, as the passes made them. The imported module is
    verified here, before the passes; a cached program's module verified when it was made, as
    one with the same text."""
    passes = " ".join([spec, *map(repr, extra)])
    key = program_key(fingerprint(program_ir.module), passes, compiler.device.type)
    found = cache.program(key, serialize.loads)
    if found is not None:
        module, lowered, decisions, index = found
        program_ir.module = module
        compiler.adopt(lowered)
        return decisions, index
    verify_module(program_ir.module)
    index = OpIndex()
    decisions = run_pipeline(spec, program_ir.module, index.observe, extra)
    lowered = compiler.lower_ahead(program_ir.module)
    try:
        data = serialize.dumps((program_ir.module, lowered, decisions, index))
    except Exception as e:  # noqa: BLE001 - the compilation goes on, its program uncached
        warnings.warn(
            f"xfuse: the fused program is not cached ({type(e).__name__}: {e}); "
            "a warm start will fuse it again",
            KernelCacheWarning,
            stacklevel=2,
        )
        return decisions, index
    cache.store_program(key, data)
    return decisions, index


def live_state(
    state: ModuleState | None, exported: dict[str, Tensor], device: torch.device
) -> tuple[str, ...]:
    """The state tensors a program binds from the module at each call: those it reads that
    live on its device (others are the exported values, moved there once)."""
    if state is None:
        return ()
    tensors = dict(zip(state.names, state.tensors(), strict=True))
    return tuple(
        name
        for name in state.names
        if name in exported and normalize_device(tensors[name].device) == normalize_device(device)
    )


SUPPORTED_DEVICES = ("cpu", "cuda")
"""The device types xfuse compiles for (`cuda` with an index or not: `cuda:1`)."""


def check_device(device: str | torch.device) -> torch.device:
    """The device asked for, or a one-line error: an `InvalidArgumentError` for one xfuse does
    not compile for, `CUDAUnavailable` for CUDA without a CUDA build of torch and a GPU
    (generating PTX needs neither: see xfuse.backends.cuda)."""
    supported = " or ".join(f"'{d}'" for d in SUPPORTED_DEVICES)
    if not isinstance(device, str | torch.device):
        raise InvalidArgumentError(
            f"device must be a string or torch.device ({supported}), got a {type(device).__name__}"
        )
    try:
        parsed = torch.device(device)
    except RuntimeError:  # torch's own "Invalid device string", several lines long
        parsed = None
    if parsed is None or parsed.type not in SUPPORTED_DEVICES:
        raise InvalidArgumentError(
            f"unknown device '{device}': xfuse compiles for {supported} (or 'cuda:N')"
        )
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise CUDAUnavailable(
            f"device '{device}' was asked for, but torch sees no CUDA device here "
            f"(torch {torch.__version__}, {'a CPU build' if torch.version.cuda is None else 'no GPU'})"
        )
    return parsed


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
) -> CompiledProgram:
    """Compile a model or function for its example inputs' shapes and dtypes (other shapes
    compile on first use). Inputs are as torch.export takes them: tensors, Python scalars
    (specialised: another value compiles another program) and tuples, lists and dicts of
    them, positionally and by keyword (`example_kwargs`). `pipeline` replaces the fusion
    pipeline (xfuse-opt `-p` syntax). Progress shows on a terminal unless `quiet` (or
    `XFUSE_QUIET=1`); see `xfuse.progress`.
    On CUDA, each specialisation runs as a captured CUDA graph from its second call on, unless
    `cuda_graphs` is False or `XFUSE_CUDA_GRAPHS=0` (`xfuse.runtime.cuda_graphs`).
    A group that cannot be compiled runs eagerly with a `FallbackWarning`; with
    `fallback="error"` (the default under `XFUSE_STRICT=1`) it is an `EagerFallbackError`.
    `channels_last` keeps the activations between convolutions in NHWC memory: None (the
    default) where the device profits (CUDA), True always, False never (`layout_pass`).
    `static_inputs` are the positions of inputs that stay where they are between calls (a
    model's parameters and buffers passed as inputs, as `torch.compile` passes them): a CUDA
    graph reads them in place instead of copying them in, and captures anew where one moved.
    `device` is "cpu", "cuda" or "cuda:N" (a string or torch.device); arguments of the wrong
    kind are an `InvalidArgumentError` (a ValueError and TypeError too)."""
    check_arguments(example_inputs, example_kwargs, pipeline, cache)
    target = check_device(device)
    backend = get_backend(str(target))
    state = ModuleState(model_or_fn) if isinstance(model_or_fn, torch.nn.Module) else None
    build = _builder(
        model_or_fn,
        backend,
        target,
        DEFAULT_PIPELINE if pipeline is None else pipeline,
        default_cache() if cache is None else cache,
        quiet,
        state,
        cuda_graphs,
        fallback_mode(fallback),
        device_passes(channels_last, target),
    )
    return CompiledProgram(
        build,
        tuple(example_inputs),
        target,
        state,
        example_kwargs,
        check_static(static_inputs, len(example_inputs)),
    )


@dataclass
class Explanation:
    """What xfuse makes of a program: ops -> groups -> kernels (as `xfuse.report.counts`
    defines them), and why."""

    ops: list[str]
    """The ops the headline counts: the program's graph ops after the fusion pipeline."""
    groups: list[GroupInfo]
    kernels: list[KernelInfo]
    report: FusionReport
    fallbacks: list[str]
    module: ModuleOp | None = field(default=None, compare=False, repr=False)
    """The program after fusion (graph and fusion IR), as the kernels were made from it."""
    cuda_graph: str | None = None
    """On CUDA: whether the program runs as a captured CUDA graph, or why not (None: CPU)."""
    imported_ops: list[str] = field(default_factory=list[str])
    """The ops of the program as imported, before the pipeline decomposed and fused them."""

    def summary(self) -> FusionSummary:
        """Groups, kernels, bytes moved with and without fusion, and why pairs were refused."""
        return summarize(
            self.module if self.module is not None else ModuleOp([]),
            self.report.decisions,
            group_kernels={g.index: list(g.kernels) for g in self.groups},
            kernels=len(self.kernels),
            fallbacks=self.fallbacks,
            group_status={g.index: g.status for g in self.groups},
            op_by_op=self.report.op_by_op,
        )

    def to_dot(self, *, show_params: bool = False) -> str:
        """The fused program as Graphviz DOT (see `xfuse.report.dot.program_dot`)."""
        if self.module is None:
            raise XfuseError("this explanation has no module to draw")
        return program_dot(
            self.module, self.report.decisions, self.report.op_index, show_params=show_params
        )

    def render(self, path: str, *, show_params: bool = False) -> str:
        """Draw the program to `path` (.svg, .png, .pdf through Graphviz, or .dot); without
        Graphviz, writes the .dot text and warns. Returns the path written."""
        return str(render_dot(self.to_dot(show_params=show_params), path))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ops": self.ops,
            "imported_ops": self.imported_ops,
            "groups": [asdict(g) for g in self.groups],
            "kernels": [asdict(k) for k in self.kernels],
            "report": self.report.to_dict(),
            "fallbacks": self.fallbacks,
            "cuda_graph": self.cuda_graph,
            "summary": self.summary().to_dict(),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        first, *table = format_summary(self.summary()).splitlines()
        ops = f"ops: {op_names(self.ops)} (imported: {op_names(self.imported_ops)})"
        graph = [] if self.cuda_graph is None else [f"CUDA graph: {self.cuda_graph}"]
        return "\n".join([first, ops, *graph, *table])


def explain(
    model_or_fn: ModelOrFn,
    example_inputs: Sequence[Tensor],
    device: str | torch.device = "cpu",
    pipeline: str | None = None,
    *,
    quiet: bool | None = None,
    channels_last: bool | None = None,
) -> Explanation:
    """Compile (kernels come from the cache when already built) and describe the result."""
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
    executable = compiled.default
    module = executable.program.module
    return Explanation(
        ops=[op.name for op in program_ops(module)],
        groups=compiled.groups,
        kernels=compiled.kernels,
        report=compiled.report,
        fallbacks=compiled.fallbacks,
        module=module,
        cuda_graph=graph_status(executable.graphs, compiled.device),
        imported_ops=list(executable.op_names),
    )


def op_names(names: Sequence[str]) -> str:
    """`linear x2, gelu`: op names by count, most common first, without `graph.`."""
    counts = Counter(name.removeprefix("graph.") for name in names)
    return ", ".join(f"{n} x{c}" if c > 1 else n for n, c in counts.most_common()) or "none"


def graph_status(graphs: GraphRunner | None, device: torch.device) -> str | None:
    """`Explanation.cuda_graph`: None on the CPU; on CUDA, whether graphs run it, or why not."""
    if device.type != "cuda":
        return None
    if graphs is None:
        return "off (cuda_graphs=False or XFUSE_CUDA_GRAPHS=0): steps run one by one"
    if graphs.reason is not None:
        return f"not used: {graphs.reason}"
    return "captured on the second call, replayed from then on"
