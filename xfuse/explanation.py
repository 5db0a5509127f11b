"""
What `xfuse.explain` returns: a compiled program's ops -> groups -> kernels (as
`xfuse.report.counts` defines them), and why; for a training call, the same of its forward and
its backward program, with what AOTAutograd's partitioner saved for the backward and what the
backward computes again.
"""

from __future__ import annotations

import json
import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from xdsl.dialects.builtin import ModuleOp

from xfuse.differentiable import TracedCall
from xfuse.errors import XfuseError
from xfuse.report.counts import program_ops
from xfuse.report.dot import program_dot
from xfuse.report.render import render_dot
from xfuse.report.summary import FusionSummary, format_summary, summarize
from xfuse.runtime.compiler import GroupInfo, KernelInfo
from xfuse.runtime.cuda_graphs import GraphRunner
from xfuse.runtime.driver import FusionReport
from xfuse.runtime.executor import CompiledProgram


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
            **self.partition_dict(),
        }

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
        """The fusion report of this one program: headline, ops, the table."""
        first, *table = format_summary(self.summary()).splitlines()
        ops = f"ops: {op_names(self.ops)} (imported: {op_names(self.imported_ops)})"
        graph = [] if self.cuda_graph is None else [f"CUDA graph: {self.cuda_graph}"]
        return "\n".join([first, ops, *graph, *table])


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


def graph_status(graphs: GraphRunner | None, device: torch.device) -> str | None:
    """`Explanation.cuda_graph`: None on the CPU; on CUDA, whether graphs run it, or why not."""
    if device.type != "cuda":
        return None
    if graphs is None:
        return "off (cuda_graphs=False or XFUSE_CUDA_GRAPHS=0): steps run one by one"
    if graphs.reason is not None:
        return f"not used: {graphs.reason}"
    return "captured on the second call, replayed from then on"


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
