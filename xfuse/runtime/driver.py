"""
The build driver: what `xfuse.compile` does for each specialisation of a program. Export and
import it (`xfuse.frontend.export`), choose what to measure (`xfuse.choices`), run the pipeline
of `compile_pipeline` and lower its groups (`fuse_and_lower`, or the fused program from the
kernel cache), compile the kernels, and put together the `Executable` with its `FusionReport`.

`compile_program` is `xfuse.compile` once its arguments are checked and its options gathered.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch.utils import _pytree as pytree
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from xfuse.backends import Backend, Kernel, get_backend
from xfuse.choices import Compile, CompileAhead, Verdict, choose_passes, chosen_gemms
from xfuse.collector import collector_paused
from xfuse.errors import ExportError, KernelCacheWarning
from xfuse.frontend.export import Imported, ModelOrFn, import_for_xfuse, unflattener
from xfuse.frontend.outputs import OutputRule
from xfuse.ir import serialize
from xfuse.ir.fingerprint import fingerprint
from xfuse.passes.fusion.decisions import FusionDecision, format_report
from xfuse.pipeline import (
    PassObserver,
    Pipeline,
    PipelineOptions,
    after_decompose,
    channels_last_setting,
    compile_device_passes,
    compile_pipeline,
    gemm_ways_setting,
    pipeline,
    verify_module,
)
from xfuse.progress import Progress
from xfuse.report.counts import group_count, headline, kernel_count, op_count, plural
from xfuse.report.op_index import OpIndex, collect_decisions
from xfuse.runtime.cache import KernelCache, KernelSource, default_cache, program_key
from xfuse.runtime.compile_workers import can_compile_ahead, start_workers
from xfuse.runtime.compiler import ProgramCompiler
from xfuse.runtime.cuda_graphs import GraphRunner, cuda_graphs_enabled
from xfuse.runtime.executor import (
    CallInputs,
    CompiledProgram,
    Executable,
    is_cpu_scalar,
    normalize_device,
    run_program,
)
from xfuse.runtime.fallback import FallbackMode
from xfuse.runtime.outputs import OutputPlan, with_kernel_strides
from xfuse.runtime.state import ModuleState

if TYPE_CHECKING:
    from xfuse.frontend.importer import ImportedProgram

Tensor = torch.Tensor


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
    choices: list[Verdict] = field(default_factory=list[Verdict])
    """Library call or xfuse's kernel, torch's product or oneDNN's, a product padded or not,
    as measured at compile time (`xfuse.choices`)."""
    options: PipelineOptions | None = field(default=None, compare=False, repr=False)
    """What the pipeline was made of (`compile_pipeline(device, options)` makes it again:
    the bisector replays it so), its measured choices included."""
    pipeline: str = field(default="", compare=False, repr=False)
    """The passes that made the program, every option spelled (`Pipeline.description`)."""

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
# Running the pipeline
# ---------------------------------------------------------------------------------------------


def run_pipeline(
    spec: str | Pipeline,
    module: ModuleOp,
    observer: PassObserver | None = None,
    extra: Sequence[ModulePass] = (),
) -> list[FusionDecision]:
    """Run a pipeline (text, or as `compile_pipeline` made it) on `module` in place, its
    result verified once (`Pipeline.verified_at_end`); returns the decision records of the
    fusion passes in it (`decisions` on their pass instances). The `extra` passes run after
    `decompose`, or first without one."""
    built = pipeline(spec) if isinstance(spec, str) else spec
    passes = replace(
        built, passes=after_decompose(built.passes, extra), observer=observer
    ).verified_at_end()
    passes.apply(module)
    return collect_decisions(passes.passes)


def measured_options(
    options: PipelineOptions,
    module: ModuleOp,
    device: torch.device,
    cache: KernelCache,
    measure_with: Compile,
    ahead: CompileAhead | None = None,
) -> tuple[PipelineOptions, list[Verdict]]:
    """`options` NCHW (`channels_last=False`) where the CPU was measured to run the
    convolutions of `module` faster so, with the depthwise convolutions of `module` whose
    library call is faster on `device` kept as library calls and its products not clearly
    faster padded left unpadded (`xfuse.choices`: measured now, or from the cache), and every
    verdict."""
    from xfuse.passes.transforms.channels_last import ChannelsLastPass
    from xfuse.passes.transforms.depthwise_stencil import DepthwiseStencilPass
    from xfuse.passes.transforms.pad_matmul import PadMatmulPass

    passes = compile_device_passes(device, options)
    chosen, choices = choose_passes(passes, module, device, cache, measure_with, ahead)
    stencil = next((p for p in chosen if isinstance(p, DepthwiseStencilPass)), None)
    library = options.library if stencil is None else stencil.library
    pad = next((p for p in chosen if isinstance(p, PadMatmulPass)), None)
    unpadded = options.unpadded if pad is None else pad.unpadded
    layouts = [any(isinstance(p, ChannelsLastPass) for p in ps) for ps in (passes, chosen)]
    channels_last = False if layouts == [True, False] else options.channels_last
    chosen_options = replace(
        options, channels_last=channels_last, library=library, unpadded=unpadded
    )
    return chosen_options, list(choices)


def measured_pipeline(
    options: PipelineOptions,
    module: ModuleOp,
    device: torch.device,
    cache: KernelCache,
    ahead: CompileAhead | None = None,
) -> tuple[Pipeline, PipelineOptions, list[Verdict]]:
    """The pipeline that fuses `module` for `device`: `options` with its measured choices
    (`measured_options`, measuring with `measuring_compile`), those options and every verdict."""
    options, choices = measured_options(options, module, device, cache, measuring_compile, ahead)
    return compile_pipeline(device, options), options, choices


def fuse_and_lower(
    program_ir: ImportedProgram,
    passes: Pipeline,
    cache: KernelCache,
    compiler: ProgramCompiler,
) -> tuple[list[FusionDecision], OpIndex]:
    """Run the passes on the imported module and lower its units for `compiler` (which keeps
    them for `compile`), or take both from the cache's fused program for the same module,
    passes (`Pipeline.description`) and device (`program_key`): a warm start skips fusing
    and lowering. The decisions and the index of the ops they name, as the passes made them.
    The imported module is verified here, before the passes; a cached program's module
    verified when it was made, as one with the same text."""
    key = program_key(fingerprint(program_ir.module), passes.description(), compiler.device.type)
    found = cache.program(key, serialize.loads)
    if found is not None:
        module, lowered, decisions, index = found
        program_ir.module = module
        compiler.adopt(lowered)
        return decisions, index
    verify_module(program_ir.module)
    index = OpIndex()
    decisions = run_pipeline(passes, program_ir.module, index.observe)
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


# ---------------------------------------------------------------------------------------------
# Building a specialisation
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildSettings:
    """What every specialisation of one compiled program is built with."""

    backend: Backend
    device: torch.device
    options: PipelineOptions
    cache: KernelCache
    quiet: bool | None = None
    state: ModuleState | None = None
    cuda_graphs: bool = True
    fallback: FallbackMode = "eager"
    outputs_released: bool = False
    """The caller releases a call's outputs before its next call (a training step's forward:
    the backward frees what it saved), so CUDA graphs hand them over whatever their size."""
    saved_outputs: frozenset[int] = frozenset()
    """Positions of the flat outputs that only the program's own backward reads (a training
    forward's saved tensors): a kernel's buffer among them keeps its row-major strides
    (`with_kernel_strides`) rather than being copied into eager's."""
    static_inputs: tuple[int, ...] = ()
    """Positions of the inputs whose memory stays put between calls (`CompiledProgram`'s):
    with the parameters, the weights whose products may run oneDNN's (`xfuse.choices`)."""


def builder(
    model_or_fn: ModelOrFn, settings: BuildSettings, imported: Imported | None = None
) -> Callable[[CallInputs], Executable]:
    """The `build` of a `CompiledProgram`: the `Executable` for one call's signature. The
    first build (the example inputs', which `CompiledProgram` builds upfront) takes its
    program from `imported` where given; every other exports."""
    given = [] if imported is None else [imported]

    def build(call: CallInputs) -> Executable:
        first = given.pop() if given else None
        with Progress.create(settings.quiet) as progress, collector_paused():
            return build_executable(model_or_fn, settings, call, progress, first)

    return build


def build_executable(
    model_or_fn: ModelOrFn,
    settings: BuildSettings,
    call: CallInputs,
    progress: Progress,
    given: Imported | None = None,
) -> Executable:
    """Export, fuse, lower and compile the program for `call`'s signature (`given`: its
    imported program, not exported again)."""
    backend, device, cache = settings.backend, settings.device, settings.cache

    def compile_kernel(source: KernelSource, name: str) -> Any:
        kernel = cache.kernel(backend, source, name)
        progress.count("kernels compiled")
        return kernel

    start_workers(backend)  # their imports overlap exporting and fusing
    progress.stage("exporting the program (torch.export)")
    # unverified: fuse_and_lower verifies it unless the cache holds its fused program; inline,
    # not a function of its own, so that a refused program's traceback has one frame less
    if given is not None:
        imported = given
    else:
        try:
            imported = import_for_xfuse(model_or_fn, call.args, call.kwargs, False, cache)
        except ExportError:
            moved = scalars_on(call, device)
            if moved is None:
                raise
            imported = import_for_xfuse(model_or_fn, *moved, False, cache)
    progress.lap("export")
    progress.stage(f"imported {len(imported.op_names)} ops; fusing")
    program_ir = imported.program
    program_ir.params = {k: v.to(device) for k, v in program_ir.params.items()}
    program_ir.return_view_bases()
    compiler = ProgramCompiler(
        compile_kernel,
        fallback=settings.fallback,
        device=device,
        lower_in_workers=can_compile_ahead(backend),
    )
    passes, options, choices = measured_pipeline(
        settings.options, program_ir.module, device, cache, compile_choices_ahead
    )
    decisions, index = fuse_and_lower(program_ir, passes, cache, compiler)
    held = program_ir.held_args(len(call.leaves), settings.static_inputs)
    compiler.gemms, gemms = chosen_gemms(program_ir.module, held, device, cache, options.gemm_ways)
    groups = group_count(program_ir.module)
    progress.lap("fusion")
    progress.stage(f"{plural(groups, 'group')} formed; compiling kernels")
    if can_compile_ahead(backend):
        cache.compile_ahead(backend, compiler.kernel_modules(program_ir.module))
    program = compiler.compile(program_ir.module)
    progress.lap("kernels")
    progress.finish(headline(op_count(program_ir.module), groups, kernel_count(program)))
    report = FusionReport(
        decisions,
        list(program.fallbacks),
        index,
        program.op_by_op,
        [*choices, *gemms],
        options=options,
        pipeline=passes.description(),
    )
    state = live_state(settings.state, program_ir.params, device)
    saved = rule_positions(program_ir, settings.saved_outputs)
    rules = with_kernel_strides(program_ir.output_rules, program, saved)
    return Executable(
        program,
        bind=program_ir.binder(len(call.leaves), state),
        unflatten=unflattener(imported),
        report=report,
        op_names=imported.op_names,
        compile_times=dict(progress.phases),
        outputs=OutputPlan(rules, program, program_ir.hidden_outputs),
        fresh_strides=flat_strides(program_ir, rules),
        graphs=(
            GraphRunner(
                program,
                run_program,
                device,
                released=settings.outputs_released,
                fresh=[rule.stride if rule.base == "fresh" else None for rule in rules],
            )
            if device.type == "cuda" and cuda_graphs_enabled(settings.cuda_graphs)
            else None
        ),
        device=device,
    )


def rule_positions(program: ImportedProgram, flat: Collection[int]) -> list[int]:
    """The output rules' positions of the flat outputs at `flat` (`rule_position`: the
    outputs that are constants have none)."""
    positions = (program.rule_position(i) for i in flat)
    return [p for p in positions if p is not None]


def flat_strides(
    program: ImportedProgram, rules: Sequence[OutputRule]
) -> tuple[tuple[int, ...] | None, ...]:
    """Each flat output's strides where it is fresh memory (`rules`), None where it is a
    constant or a view."""
    strides: list[tuple[int, ...] | None] = []
    for i in range(program.flat_count()):
        position = program.rule_position(i)
        rule = None if position is None else rules[position]
        strides.append(rule.stride if rule is not None and rule.base == "fresh" else None)
    return tuple(strides)


def scalars_on(
    call: CallInputs, device: torch.device
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """`call`'s arguments with its CPU scalars on `device`, for a GPU program that torch.export
    cannot trace with them on the CPU (a decomposition that puts one in a `where` with GPU
    tensors, where eager's kernel takes it as a value); the kernels read them on the device
    either way (`KernelStep.copied`). None where there is none to move."""
    if device.type == "cpu" or not any(is_cpu_scalar(t) for t in call.tensors):
        return None

    def on_device(t: Any) -> Any:
        return t.to(device) if is_cpu_scalar(t) else t

    args, kwargs = pytree.tree_map(on_device, (call.args, call.kwargs))
    return args, kwargs


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


# ---------------------------------------------------------------------------------------------
# A compiled program
# ---------------------------------------------------------------------------------------------


class ProgramMaker(Protocol):
    """What makes the program `compile_program` returns from its `BuildSettings`: the class,
    and how it builds each specialisation."""

    def __call__(
        self,
        model_or_fn: ModelOrFn,
        settings: BuildSettings,
        example_inputs: tuple[Any, ...],
        example_kwargs: dict[str, Any] | None,
        static_inputs: tuple[int, ...],
    ) -> CompiledProgram: ...


def inference_program(
    model_or_fn: ModelOrFn,
    settings: BuildSettings,
    example_inputs: tuple[Any, ...],
    example_kwargs: dict[str, Any] | None,
    static_inputs: tuple[int, ...],
    imported: Imported | None = None,
) -> CompiledProgram:
    """A `CompiledProgram` whose specialisations `builder` builds (the first from `imported`
    where given)."""
    return CompiledProgram(
        builder(model_or_fn, settings, imported),
        example_inputs,
        settings.device,
        settings.state,
        example_kwargs,
        static_inputs,
        eager=model_or_fn,
    )


def compile_program(
    model_or_fn: ModelOrFn,
    example_inputs: tuple[Any, ...],
    device: torch.device,
    options: PipelineOptions = PipelineOptions(),  # noqa: B008 - frozen, never mutated
    *,
    backend: Backend | None = None,
    example_kwargs: dict[str, Any] | None = None,
    cache: KernelCache | None = None,
    quiet: bool | None = None,
    cuda_graphs: bool = True,
    fallback: FallbackMode = "eager",
    static_inputs: tuple[int, ...] = (),
    program: ProgramMaker = inference_program,
    outputs_released: bool = False,
    saved_outputs: frozenset[int] = frozenset(),
) -> CompiledProgram:
    """`xfuse.compile` for arguments already checked: `model_or_fn` compiled for `device`
    with the pipeline of `compile_pipeline(device, options)` (its `XFUSE_CHANNELS_LAST`
    setting read once, here), as the program `program` makes (`xfuse.differentiable`'s for
    `xfuse.compile`), the example inputs' specialisation built now."""
    options = settled(options)
    state = ModuleState(model_or_fn) if isinstance(model_or_fn, torch.nn.Module) else None
    settings = BuildSettings(
        get_backend(str(device)) if backend is None else backend,
        device,
        options,
        default_cache() if cache is None else cache,
        quiet,
        state,
        cuda_graphs,
        fallback,
        outputs_released,
        saved_outputs,
        static_inputs,
    )
    return program(model_or_fn, settings, example_inputs, example_kwargs, static_inputs)


def settled(options: PipelineOptions) -> PipelineOptions:
    """`options` with the environment's `XFUSE_CHANNELS_LAST` and `XFUSE_GEMM_WAYS` settings
    read (once per compile)."""
    return replace(
        options,
        channels_last=channels_last_setting(options.channels_last),
        gemm_ways=gemm_ways_setting(options.gemm_ways),
    )


def compile_choices_ahead(
    programs: Sequence[Imported], device: torch.device, cache: KernelCache
) -> None:
    """`xfuse.choices`' `CompileAhead`: the programs that `measuring_compile` will build next,
    fused and lowered now as it will (their fused programs kept in `cache`, where its builds
    find them), and all their kernels compiled at once in worker processes. Nothing where the
    device's backend has no workers (the CPU's): its kernels compile in-process one by one
    either way. The programs' units lower in the workers too (`ProgramCompiler.lower_ahead`)."""
    backend = get_backend(str(device))
    if not can_compile_ahead(backend):
        return
    sources: list[KernelSource] = []
    for imported in programs:
        program_ir = imported.program
        passes, _, _ = measured_pipeline(measuring_options(), program_ir.module, device, cache)
        compiler = ProgramCompiler(_no_kernel, device=device, lower_in_workers=True)
        fuse_and_lower(program_ir, passes, cache, compiler)
        sources += compiler.kernel_modules(program_ir.module)
    cache.compile_ahead(backend, sources)


def _no_kernel(source: KernelSource, name: str) -> Kernel:
    raise AssertionError(
        "compile_choices_ahead lowers its programs; it compiles no kernel one by one"
    )


def measuring_options() -> PipelineOptions:
    """The options of the programs `measuring_compile` builds: the default pipeline's, with
    the environment's settings read."""
    return settled(PipelineOptions())


def measuring_compile(
    model_or_fn: ModelOrFn,
    example_inputs: Sequence[Any],
    device: str,
    imported: Imported,
    **kwargs: Any,
) -> CompiledProgram:
    """`xfuse.compile(model_or_fn, example_inputs, device, **kwargs)` with `measuring_options`,
    its program for `example_inputs` the `imported` one (no torch.export), as `xfuse.choices`
    compiles the stencil it times."""
    program = functools.partial(inference_program, imported=imported)
    return compile_program(
        model_or_fn,
        tuple(example_inputs),
        torch.device(device),
        measuring_options(),
        program=program,
        **kwargs,
    )
