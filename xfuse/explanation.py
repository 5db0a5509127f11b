"""
What `xfuse.explain` returns: a compiled program's ops -> groups -> kernels (as
`xfuse.report.counts` defines them), and why; for a training call, the same of its forward and
its backward program, with what AOTAutograd's partitioner saved for the backward and what the
backward computes again; for a program with symbolic sizes (`dynamic_shapes`), its size symbols
and what it is guarded on.
"""

from __future__ import annotations

import contextlib
import json
import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from xfuse.dialects import fusion, graph
from xfuse.dialects.graph.sizes import MIN_SIZE
from xfuse.differentiable import TracedCall
from xfuse.errors import XfuseError
from xfuse.ir.functions import kernel_functions
from xfuse.ir.names import PARALLEL_DIMS_ATTR, SIZES_ATTR
from xfuse.passes.fusion.symbolic import static_proxies
from xfuse.report.counts import program_ops
from xfuse.report.dot import arg_name, program_dot
from xfuse.report.op_index import collect_decisions
from xfuse.report.render import render_dot
from xfuse.report.summary import FusionSummary, format_summary, summarize
from xfuse.runtime.compiler import GroupInfo, KernelInfo, group_info, type_str
from xfuse.runtime.cuda_graphs import GraphRunner
from xfuse.runtime.driver import FusionReport
from xfuse.runtime.executor import CompiledProgram
from xfuse.runtime.shape_graphs import ShapeGraphs
from xfuse.runtime.symbolic import makes_kernel

if TYPE_CHECKING:
    from xfuse.runtime.dynamic import DynamicProgram


@dataclass(frozen=True)
class SymbolInfo:
    """A size symbol of a program compiled with `dynamic_shapes`: an input symbol (read from
    `source`, an input's dim, with its range and the example's size, `hint`) or a derived one
    (`source` its polynomial of other symbols; no range of its own)."""

    name: str
    source: str
    """`x dim 0` for an input symbol, `8 * s0` for a derived one."""
    hint: int
    low: int | None = None
    high: int | None = None
    """The range's end; None for none (or for a derived symbol)."""
    dim: str | None = None
    """The name of the `torch.export.Dim` asked for this dim (None where none was named)."""
    derived: bool = False

    def __str__(self) -> str:
        if self.derived:
            return f"{self.name} = {self.source} (hint {self.hint})"
        named = f" ('{self.dim}')" if self.dim is not None else ""
        high = "inf" if self.high is None else str(self.high)
        return f"{self.name} = {self.source}{named}, range [{self.low}, {high}], hint {self.hint}"


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
    parts: dict[str, Explanation] = field(default_factory=dict[str, "Explanation"])
    """A training call's programs (`explain(..., training=True)`), as AOTAutograd's partitioner
    cut them: `forward` and `backward` (or `inference` where no output needs grad); the fields
    above are the forward's."""
    saved: list[str] = field(default_factory=list[str])
    """What the forward saves for the backward: `name: origin dtype[shape]`."""
    recomputed: list[str] = field(default_factory=list[str])
    """The forward's ops that the backward computes again instead of saving their results."""
    symbols: list[SymbolInfo] = field(default_factory=list[SymbolInfo])
    """A program with symbolic sizes: its size symbols (empty for a static program)."""
    guards: list[str] = field(default_factory=list[str])
    """A program with symbolic sizes: what a call must satisfy for it to run, one line each
    (each symbol's range, sizes 0 and 1 specialised, dims that share a symbol, static dims of
    the inputs, torch.export's guards on sizes)."""

    def summary(self) -> FusionSummary:
        """Groups, kernels, bytes moved with and without fusion, and why pairs were refused;
        a program with symbolic sizes counts its bytes with each symbol at its hint."""
        module = self.module if self.module is not None else ModuleOp([])
        with contextlib.ExitStack() as proxies:
            for op in module.ops:
                if isinstance(op, func.FuncOp) and SIZES_ATTR in op.attributes:
                    proxies.enter_context(static_proxies(op))
            return summarize(
                module,
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
            **self.partition_dict(),
            **self.symbols_dict(),
        }

    def symbols_dict(self) -> dict[str, Any]:
        """A symbolic program's symbols and guards (nothing for a static one)."""
        if not self.symbols:
            return {}
        return {"symbols": [asdict(s) for s in self.symbols], "guards": self.guards}

    def partition_dict(self) -> dict[str, Any]:
        """A training explanation's parts and partition (nothing for one program)."""
        if not self.parts:
            return {}
        parts = {name: part.to_dict() for name, part in self.parts.items()}
        return {"parts": parts, "saved": self.saved, "recomputed": self.recomputed}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        if not self.parts:
            return self.table()
        sections = [f"{name}: {part.table()}" for name, part in self.parts.items()]
        saved = f"saved for the backward ({len(self.saved)}): {', '.join(self.saved) or 'none'}"
        again = ", ".join(self.recomputed) or "none"
        recomputed = f"recomputed in the backward ({len(self.recomputed)}): {again}"
        return "\n\n".join([*sections, f"{saved}\n{recomputed}"])

    def table(self) -> str:
        """The fusion report of this one program: headline, ops, the table, then the choices
        measured at compile time (`xfuse.choices`), one line each."""
        first, *table = format_summary(self.summary()).splitlines()
        ops = f"ops: {op_names(self.ops)} (imported: {op_names(self.imported_ops)})"
        graph = [] if self.cuda_graph is None else [f"CUDA graph: {self.cuda_graph}"]
        measured = [f"measured: {c}" for c in self.report.choices]
        return "\n".join([first, ops, *graph, *self.symbol_lines(), *table, *measured])

    def symbol_lines(self) -> list[str]:
        """The symbolic sizes section: each symbol, then each guard (none for static ones)."""
        if not self.symbols:
            return []
        symbols = [f"  {s}" for s in self.symbols]
        guards = [f"  {g}" for g in self.guards]
        return [
            f"symbolic sizes ({len(self.symbols)}; bytes below at the hints):",
            *symbols,
            f"guards ({len(self.guards)}):",
            *guards,
        ]


def explanation_of(compiled: CompiledProgram) -> Explanation:
    """The explanation of a compiled program's first specialisation."""
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


def dynamic_explanation(program: DynamicProgram) -> Explanation:
    """The explanation of a program compiled with `dynamic_shapes` (`xfuse.compile` with them,
    or the symbolic program `torch.compile(..., dynamic=True)` made, `.dynamic` on the callable
    the backend returns): its fused program, groups and kernels, its size symbols and its
    guards. It has no fallbacks: a group the symbolic lowering refuses refuses the program."""
    compiled = program.compiled
    fused = compiled.fused
    forward = _forward(fused)
    groups: list[GroupInfo] = []
    kernels: list[KernelInfo] = []
    lowered = {k.sym_name.data: k for k in kernel_functions(compiled.module)}
    names = iter(sorted(lowered, key=_kernel_number))
    for op in forward.body.block.ops:
        if not isinstance(op, fusion.GroupOp) and not makes_kernel(op):
            continue
        symbol = next(names, None)  # lower-to-loops made a kernel of each, in this order
        assert symbol is not None, f"no kernel for {op.name} in the lowered program"
        index = len(kernels)
        info = group_info(op, len(groups)) if isinstance(op, fusion.GroupOp) else None
        if info is not None:
            info.kernels.append(f"kernel_{index}")
            groups.append(info)
        dims = lowered[symbol].attributes.get(PARALLEL_DIMS_ATTR)
        kernels.append(
            KernelInfo(
                name=f"kernel_{index}",
                symbol=symbol,
                source=info.label if info is not None else op.name,
                group=info.index if info is not None else None,
                inputs=[type_str(v.type) for v in op.operands],
                outputs=[type_str(r.type) for r in op.results],
                parallel_dims=getattr(getattr(dims, "value", None), "data", None),
                loop_ir=str(lowered[symbol]),
            )
        )
    report = FusionReport(
        decisions=collect_decisions(compiled.fusion_passes),
        op_index=program.op_index,
        choices=list(program.choices),
    )
    imported = _forward(program.program.module)
    return Explanation(
        ops=[op.name for op in program_ops(fused)],
        groups=groups,
        kernels=kernels,
        report=report,
        fallbacks=[],
        module=fused,
        imported_ops=[
            op.name for op in imported.body.block.ops if not isinstance(op, func.ReturnOp)
        ],
        symbols=symbol_infos(imported, program),
        guards=dynamic_guards(imported, program),
        cuda_graph=shape_graph_status(program.graphs, program.device),
    )


def _forward(module: ModuleOp) -> func.FuncOp:
    return next(
        op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == "forward"
    )


def _kernel_number(name: str) -> int:
    """`forward_k12` -> 12: kernels in the order `lower-to-loops` made them."""
    return int(name.rsplit("_k", 1)[1])


def _table(forward: func.FuncOp) -> graph.SizesAttr:
    table = forward.attributes.get(SIZES_ATTR)
    assert isinstance(table, graph.SizesAttr), "a symbolic program has a graph.sizes table"
    return table


def _dim_text(forward: func.FuncOp, arg: int, dim: int) -> str:
    """`x dim 0`: an argument's dim, by the argument's name."""
    name = arg_name(forward, forward.body.block.args[arg]) or f"argument {arg}"
    return f"{name} dim {dim}"


def symbol_infos(forward: func.FuncOp, program: DynamicProgram) -> list[SymbolInfo]:
    """The size symbols of an imported `@forward`, with the `Dim` names asked for them."""
    table = _table(forward)
    found: list[SymbolInfo] = []
    for s in table.symbols:
        hint = table.hints[s.name]
        if s.expr is not None:
            found.append(SymbolInfo(s.name, s.definition, hint, derived=True))
            continue
        assert s.source is not None
        arg, dim = s.source
        name = arg_name(forward, forward.body.block.args[arg])
        asked = program.asked.get((name, dim)) if name is not None else None
        found.append(
            SymbolInfo(
                s.name,
                _dim_text(forward, arg, dim),
                hint,
                s.low,
                s.high,
                asked.name if asked is not None else None,
            )
        )
    return found


def dynamic_guards(forward: func.FuncOp, program: DynamicProgram) -> list[str]:
    """What a call of a symbolic program is guarded on, one line each: each input symbol's
    range, where sizes 0 and 1 specialise (as Inductor's do), the dims that share a symbol,
    the static dims of the inputs that have symbolic ones, and the guards on sizes of the traces (torch.export's,
    and dynamo's where torch.compile made the program)."""
    table = _table(forward)
    lines: list[str] = []
    for s in table.inputs():
        assert s.source is not None
        where = _dim_text(forward, *s.source)
        high = "" if s.high is None else f" and <= {s.high}"
        lines.append(f"{s.name} >= {s.low}{high} ({where})")
        name = arg_name(forward, forward.body.block.args[s.source[0]])
        asked = program.asked.get((name, s.source[1])) if name is not None else None
        if s.low == MIN_SIZE:
            below = asked is not None and asked.low is not None and asked.low < MIN_SIZE
            what = (
                f"'{asked.name}' was asked from {asked.low}: a call with one runs a static "
                "program compiled for its shape"
                if below and asked is not None
                else "a call with one is refused; under torch.compile, dynamo traces another "
                "graph for it"
            )
            lines.append(
                f"{s.name} ({where}) is not 0 or 1: sizes 0 and 1 specialise, as Inductor's "
                f"do ({what})"
            )
    for i, arg in enumerate(forward.body.block.args):
        attrs = arg_attrs_of(forward, i)
        if "graph.input" not in attrs:
            continue
        dims = graph.dims_of(arg)
        if all(isinstance(size, int) for size in dims):
            continue  # a static input: checked whole, as a static program's are
        for d, size in enumerate(dims):
            symbol = table.by_name.get(size) if isinstance(size, str) else None
            if isinstance(size, int):
                lines.append(f"{_dim_text(forward, i, d)} == {size} (static)")
            elif symbol is not None and symbol.source != (i, d):
                if symbol.source is not None:
                    first = _dim_text(forward, *symbol.source)
                    lines.append(f"{_dim_text(forward, i, d)} == {first} (both {size})")
    lines += program.guards
    return lines


def arg_attrs_of(forward: func.FuncOp, index: int) -> dict[str, Any]:
    """The attributes of `@forward`'s argument `index` (`graph.input`, `graph.param`)."""
    if forward.arg_attrs is None:
        return {}
    return dict(forward.arg_attrs.data[index].data)


def training_explanation(traced: TracedCall) -> Explanation:
    """The forward's explanation, with every part's (`Explanation.parts`) and the partition."""
    parts = {
        name: explanation_of(part.program)
        for name, part in traced.parts.items()
        if isinstance(part.program, CompiledProgram)
    }
    first = parts.get("forward", parts.get("inference"))
    if first is None:
        raise XfuseError("xfuse: no part of the training call was compiled by xfuse")
    saved, recomputed = partition(traced)
    return replace(first, parts=parts, saved=saved, recomputed=recomputed)


def op_names(names: Sequence[str]) -> str:
    """`linear x2, gelu`: op names by count, most common first, without `graph.`."""
    counts = Counter(name.removeprefix("graph.") for name in names)
    return ", ".join(f"{n} x{c}" if c > 1 else n for n, c in counts.most_common()) or "none"


GRAPHS_OFF = "off (cuda_graphs=False or XFUSE_CUDA_GRAPHS=0): steps run one by one"


def graph_status(graphs: GraphRunner | None, device: torch.device) -> str | None:
    """`Explanation.cuda_graph`: None on the CPU; on CUDA, whether graphs run it, or why not."""
    if device.type != "cuda":
        return None
    if graphs is None:
        return GRAPHS_OFF
    return graphs.status()


def shape_graph_status(graphs: ShapeGraphs[Any] | None, device: torch.device) -> str | None:
    """`Explanation.cuda_graph` of a symbolic program: None on the CPU; on CUDA, how its
    shapes are captured (`ShapeGraphs.status`), or that graphs are off."""
    if device.type != "cuda":
        return None
    return GRAPHS_OFF if graphs is None else graphs.status()


def partition(traced: TracedCall) -> tuple[list[str], list[str]]:
    """What AOTAutograd's partitioner made of a traced call: the tensors its forward saves for
    its backward (`name: what dtype[shape]`), and the forward's ops its backward computes again
    from them (`name (op)`); empty where a part was not compiled. The parts' nodes keep the
    joint graph's names: a backward input is the forward node of its name (`primals_N`: the
    Nth input), a backward node of a forward node's name is that node again."""
    forward, backward = traced.parts.get("forward"), traced.parts.get("backward")
    if forward is None or backward is None:
        return [], []
    made = {n.name: n for n in forward.graph.graph.nodes if n.op != "output"}
    saved, recomputed = [], []
    for node in backward.graph.graph.nodes:
        source = made.get(node.name)
        if node.op == "placeholder" and source is not None:
            saved.append(f"{node.name}: {saved_what(source, traced)} {tensor_text(node)}")
        elif node.op == "call_function" and source is not None:
            recomputed.append(f"{node.name} ({node.target})")
    return saved, recomputed


def saved_what(node: torch.fx.Node, traced: TracedCall) -> str:
    """A saved tensor's origin: the input it is, or the op that made it."""
    if node.op == "placeholder":
        return traced.input_name(list(node.graph.nodes).index(node))
    if node.target is operator.getitem:  # one result of an op of several
        source, which = node.args
        return f"{getattr(source, 'target', source)}[{which}]"
    return str(node.target)


def tensor_text(node: torch.fx.Node) -> str:
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return ""
    return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
