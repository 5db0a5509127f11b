"""
xfuse's public API.

    compiled = xfuse.compile(model, (x,))          # a CompiledProgram; call it like the model
    y = compiled(x)
    print(xfuse.explain(model, (x,)))               # ops -> groups -> kernels, with reasons
    torch.compile(model, backend="xfuse")           # through `dynamo_backend`

A compiled program is for inference: its results carry no autograd history.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from xfuse.backends import Backend, get_backend
from xfuse.passes.fusion_report import FusionDecision, format_report
from xfuse.runtime.cache import KernelCache, default_cache
from xfuse.runtime.compiler import GroupInfo, KernelInfo, ProgramCompiler
from xfuse.runtime.errors import ExportError, FallbackWarning, XfuseError
from xfuse.runtime.executor import CompiledProgram, Executable
from xfuse.runtime.fallback import reason_of

Tensor = torch.Tensor
ModelOrFn = torch.nn.Module | Callable[..., Any]

DEFAULT_PIPELINE = "decompose,fuse-scored,group-cleanup"

__all__ = [
    "DEFAULT_PIPELINE",
    "CompiledProgram",
    "Explanation",
    "FusionReport",
    "compile",
    "dynamo_backend",
    "explain",
]


# ---------------------------------------------------------------------------------------------
# Import and fusion
# ---------------------------------------------------------------------------------------------


@dataclass
class Imported:
    """An imported program plus what the runtime needs beyond `ImportedProgram`."""

    program: Any  # xfuse.frontend.ImportedProgram
    out_spec: pytree.TreeSpec
    op_names: list[str]


def import_for_xfuse(model_or_fn: ModelOrFn, example_inputs: tuple[Tensor, ...]) -> Imported:
    """torch.export, then the importer; any failure is one `ExportError` line."""
    from xfuse.frontend import UnsupportedProgram
    from xfuse.frontend.importer import FunctionModule, import_program

    model = model_or_fn if isinstance(model_or_fn, torch.nn.Module) else FunctionModule(model_or_fn)
    try:
        exported = torch.export.export(model, example_inputs, strict=False)
    except Exception as e:
        raise ExportError(
            f"xfuse: torch.export could not export the program: {reason_of(e)}"
        ) from e
    try:
        program = import_program(exported)
    except UnsupportedProgram as e:
        raise ExportError(f"xfuse: cannot import the program: {e}") from e
    return Imported(program, exported.call_spec.out_spec, forward_op_names(program.module))


def forward_op_names(module: ModuleOp) -> list[str]:
    forward = next(op for op in module.ops if isinstance(op, func.FuncOp))
    return [op.name for op in forward.body.block.ops if not isinstance(op, func.ReturnOp)]


def run_pipeline(spec: str, module: ModuleOp) -> list[FusionDecision]:
    """Run a pipeline on `module` in place (verifying after every pass); returns the decision
    records of the fusion passes in it (`decisions` on their pass instances)."""
    from xfuse.pipeline import pipeline

    passes = pipeline(spec)
    passes.apply(module)
    records: list[FusionDecision] = []
    for module_pass in passes.passes:
        found = getattr(module_pass, "decisions", None)
        if isinstance(found, list):
            records += [d for d in found if isinstance(d, FusionDecision)]  # pyright: ignore
    return records


# ---------------------------------------------------------------------------------------------
# The fusion report
# ---------------------------------------------------------------------------------------------


@dataclass
class FusionReport:
    """Why the program looks as it does: every pair the fusion passes examined (fused or kept
    apart, with the named reason), and every unit that runs eagerly because it did not compile."""

    decisions: list[FusionDecision] = field(default_factory=list[FusionDecision])
    fallbacks: list[str] = field(default_factory=list[str])

    def to_dict(self) -> dict[str, Any]:
        return {
            "decisions": [d.to_dict() for d in self.decisions],
            "fallbacks": list(self.fallbacks),
        }

    def __str__(self) -> str:
        lines = [format_report(self.decisions)]
        lines += [f"fallback: {f}" for f in self.fallbacks]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# compile / explain
# ---------------------------------------------------------------------------------------------


def _builder(
    model_or_fn: ModelOrFn, backend: Backend, device: torch.device, spec: str, cache: KernelCache
) -> Callable[[tuple[Tensor, ...]], Executable]:
    def compile_kernel(module: ModuleOp, name: str) -> Any:
        return cache.kernel(backend, module, name)

    def build(inputs: tuple[Tensor, ...]) -> Executable:
        imported = import_for_xfuse(model_or_fn, inputs)
        program_ir = imported.program
        program_ir.params = {k: v.to(device) for k, v in program_ir.params.items()}
        decisions = run_pipeline(spec, program_ir.module)
        program = ProgramCompiler(compile_kernel).compile(program_ir.module)
        return Executable(
            program,
            bind=lambda xs: program_ir.arguments(*xs),
            unflatten=lambda outs: pytree.tree_unflatten(outs, imported.out_spec),
            report=FusionReport(decisions, list(program.fallbacks)),
            op_names=imported.op_names,
        )

    return build


def compile(  # noqa: A001 - the public name, as in torch.compile
    model_or_fn: ModelOrFn,
    example_inputs: Sequence[Tensor],
    device: str = "cpu",
    pipeline: str | None = None,
    *,
    cache: KernelCache | None = None,
) -> CompiledProgram:
    """Compile a model or function for its example inputs' shapes and dtypes (other shapes
    compile on first use). `pipeline` replaces the fusion pipeline (xfuse-opt `-p` syntax)."""
    if not isinstance(example_inputs, list | tuple):
        raise XfuseError(
            f"example_inputs must be a tuple of tensors, got a {type(example_inputs).__name__}"
        )
    backend = get_backend(device)
    build = _builder(
        model_or_fn,
        backend,
        torch.device(device),
        DEFAULT_PIPELINE if pipeline is None else pipeline,
        default_cache() if cache is None else cache,
    )
    return CompiledProgram(build, tuple(example_inputs), device)


@dataclass
class Explanation:
    """What xfuse makes of a program: ops -> groups -> kernels, and why."""

    ops: list[str]
    groups: list[GroupInfo]
    kernels: list[KernelInfo]
    report: FusionReport
    fallbacks: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ops": self.ops,
            "groups": [asdict(g) for g in self.groups],
            "kernels": [asdict(k) for k in self.kernels],
            "report": self.report.to_dict(),
            "fallbacks": self.fallbacks,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        counts = Counter(self.ops)
        lines = [
            f"{len(self.ops)} ops -> {len(self.groups)} groups -> {len(self.kernels)} kernels"
            + (f" ({len(self.fallbacks)} fallbacks)" if self.fallbacks else ""),
            "ops: " + ", ".join(f"{n} x{c}" for n, c in counts.most_common()),
        ]
        for g in self.groups:
            target = ", ".join(f"@{k}" for k in g.kernels) or f"eager ({g.fallback})"
            lines.append(
                f"group {g.index} [{g.kind}, {g.rule}] {' '.join(g.ops)}\n"
                f"    ({', '.join(g.inputs)}) -> ({', '.join(g.outputs)}) => {target}"
            )
        lone = [k for k in self.kernels if k.group is None]
        for k in lone:
            lines.append(f"op {k.source} alone => @{k.name}")
        return "\n".join(lines)


def explain(
    model_or_fn: ModelOrFn,
    example_inputs: Sequence[Tensor],
    device: str = "cpu",
    pipeline: str | None = None,
) -> Explanation:
    """Compile (kernels come from the cache when already built) and describe the result."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)  # the explanation lists fallbacks
        compiled = compile(model_or_fn, example_inputs, device, pipeline)
    executable = compiled.default
    return Explanation(
        ops=list(executable.op_names),
        groups=compiled.groups,
        kernels=compiled.kernels,
        report=compiled.report,
        fallbacks=compiled.fallbacks,
    )


# ---------------------------------------------------------------------------------------------
# torch.compile(backend="xfuse")
# ---------------------------------------------------------------------------------------------


def _real(t: Any) -> Any:
    """Dynamo may hand fake tensors to backends: a real tensor of the same shape and dtype."""
    from torch._subclasses.fake_tensor import is_fake

    if isinstance(t, Tensor) and is_fake(t):
        return torch.zeros(tuple(int(d) for d in t.shape), dtype=t.dtype, device=t.device)
    return t


def dynamo_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """The `torch.compile` backend: the FX graph through `xfuse.compile`; on any failure a
    warning and `gm.forward` (eager). Calls that need autograd run eagerly too."""
    try:
        compiled = compile(gm, tuple(_real(t) for t in example_inputs))
    except Exception as e:
        warnings.warn(
            f"xfuse: torch.compile backend runs this graph eagerly: {reason_of(e)}",
            FallbackWarning,
            stacklevel=2,
        )
        return gm.forward

    def run(*args: Any) -> Any:
        if torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in args):
            return gm.forward(*args)
        return compiled(*args)

    run.compiled = compiled  # type: ignore[attr-defined]
    return run


def _register_dynamo_backend() -> None:
    """Make `backend="xfuse"` work without the package's entry point (not installed). With the
    entry point, dynamo registers it itself on lookup, and registering here would clash."""
    from importlib.metadata import entry_points

    from torch._dynamo.backends.registry import register_backend

    if "xfuse" in entry_points(group="torch_dynamo_backends").names:
        return
    try:
        register_backend(dynamo_backend, name="xfuse")
    except AssertionError:  # registered already, by an earlier import
        return


_register_dynamo_backend()
