"""
Small stand-ins for the lowering and a backend, faithful to docs/contracts.md, so that the
runtime is tested on its own: `fake_lower_to_loops` turns each unit of `@forward` into a kernel
func + `fusion.launch` (the func carries the unit's graph IR as `fake.source`), and
`ReferenceBackend` "compiles" a kernel to that source and runs it with the interpreter, writing
into the output buffers it is given. `CPUGraphRunner` is a `GraphRunner` whose "CUDA graphs" run
the steps again on the CPU. Counters and hooks let tests see and inject behaviour.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    FunctionType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region

from xfuse.dialects import fusion, graph
from xfuse.errors import CodegenError
from xfuse.interpreters.graph import find_function, interpret
from xfuse.ir.context import parse
from xfuse.ir.names import KERNEL_ATTR, PARALLEL_DIMS_ATTR
from xfuse.runtime.compiler import unit_inputs, wrap_unit
from xfuse.runtime.cuda_graphs import GraphRunner
from xfuse.runtime.steps import BufferPool


def _memref(t: Attribute) -> MemRefType[Attribute]:
    tt = graph.tensor_type(t)
    return MemRefType(tt.element_type, tt.get_shape())


def _is_unit(op: Operation) -> bool:
    if isinstance(op, fusion.GroupOp):
        return True
    return (
        op.name.startswith("graph.")
        and graph.op_kind(op) != "extern"
        and op.name != "graph.constant"
    )


def _kernel_func(op: Operation, name: str) -> func.FuncOp:
    types = [_memref(v.type) for v in unit_inputs(op)] + [_memref(r.type) for r in op.results]
    block = Block(arg_types=types)
    block.add_op(func.ReturnOp())
    kernel = func.FuncOp(name, FunctionType.from_lists(types, []), Region(block))
    kernel.attributes[KERNEL_ATTR] = UnitAttr()
    kernel.attributes[PARALLEL_DIMS_ATTR] = IntegerAttr(0, i64)
    kernel.attributes["fake.source"] = StringAttr(str(wrap_unit(op)))
    return kernel


def fake_lower_to_loops(module: ModuleOp) -> None:
    """Every group / lone non-extern graph op of @forward -> a kernel func + fusion.launch
    (constants it reads are folded into the kernel, as lower-to-loops does with splats)."""
    forward = find_function(module, "forward")
    for i, op in enumerate(list(forward.body.block.ops)):
        if not _is_unit(op):
            continue
        name = f"fake_kernel_{i}"
        module.body.block.add_op(_kernel_func(op, name))
        launch = fusion.LaunchOp(name, unit_inputs(op), [r.type for r in op.results])
        forward.body.block.insert_op_before(launch, op)
        for old, new in zip(op.results, launch.results, strict=True):
            old.replace_all_uses_with(new)
        op.detach()
        op.erase()


@dataclass
class ReferenceKernel:
    """Runs the unit's graph IR with the interpreter; checks the contract on its buffers."""

    name: str
    source: ModuleOp
    calls: list[list[torch.Tensor]] = field(default_factory=list[list[torch.Tensor]])

    def __call__(self, buffers: Sequence[torch.Tensor]) -> None:
        args = find_function(self.source, "forward").body.block.args
        for b in buffers:
            if not b.is_contiguous():
                raise AssertionError(f"kernel {self.name} got a non-contiguous buffer")
        self.calls.append(list(buffers))
        # A kernel sees memory only: an input is its elements in row-major order, whatever
        # shape the tensor holding them has (the runtime passes a reshape's input as is).
        inputs = [b.view(graph.shape_of(a)) for b, a in zip(buffers, args, strict=False)]
        outs = interpret(self.source, inputs)
        for out, buf in zip(outs, buffers[len(args) :], strict=True):
            buf.copy_(out)


@dataclass
class LaunchedKernel(ReferenceKernel):
    """A `ReferenceKernel` with a GPU kernel's `launcher` (`CUDAKernel.launcher`): each
    launch through it is counted in `launches` with its buffers' count."""

    launches: list[int] = field(default_factory=list[int])

    def launcher(self, count: int) -> Callable[..., None]:
        def launch(*buffers: torch.Tensor) -> None:
            assert len(buffers) == count
            self.launches.append(count)
            self(list(buffers))

        return launch


@dataclass
class ReferenceBackend:
    """A backend whose artifacts are graph IR text. `fail_if(source)` injects a CodegenError;
    `delay` makes compiles slow enough for threads to overlap."""

    target: str = "reference-test"
    delay: float = 0.0
    launchers: bool = False
    """Load kernels with a launcher (`LaunchedKernel`), as the GPU's have."""
    fail_if: Callable[[str], bool] | None = None
    compiles: int = 0
    loads: int = 0
    kernels: list[ReferenceKernel] = field(default_factory=list[ReferenceKernel])
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def compile(self, module: ModuleOp, name: str) -> bytes:
        with self._lock:
            self.compiles += 1
        time.sleep(self.delay)
        kernel = find_function(module, name)
        source = kernel.attributes["fake.source"]
        assert isinstance(source, StringAttr)
        if self.fail_if is not None and self.fail_if(source.data):
            raise CodegenError(f"injected failure compiling @{name}")
        return source.data.encode()

    def load(self, artifact: bytes, name: str) -> ReferenceKernel:
        with self._lock:
            self.loads += 1
        kind = LaunchedKernel if self.launchers else ReferenceKernel
        kernel = kind(name, parse(artifact.decode()))
        self.kernels.append(kernel)
        return kernel


class ReplayedSteps:
    """A stand-in for a captured CUDA graph on the CPU: a replay runs the steps again on the
    capture's inputs (the call's own tensors where it reads them in place, which a real
    graph finds at the address it checked) and writes their results into the memory of the
    captured outputs, as a real replay does (not into an output that views an input read in
    place: the steps wrote that input's memory)."""

    def __init__(
        self,
        rerun: Callable[[list[torch.Tensor]], list[torch.Tensor]],
        inputs: list[torch.Tensor | None],
    ):
        self.rerun, self.inputs = rerun, inputs

    def replay(self, args: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor | None]) -> None:
        bound = [a if own is None else own for a, own in zip(args, self.inputs, strict=True)]
        for out, new in zip(outputs, self.rerun(bound), strict=True):
            if out is not None:
                out.copy_(new)


class CPUGraphRunner(GraphRunner[Any]):
    """`GraphRunner` with captures made of `ReplayedSteps`: its choice of capture, its
    hand-over, its copies and its reads in place, tested with no GPU. As in a real capture, the
    user's inputs get buffers of their own (refreshed before each replay) and `state` is read
    where it is, its addresses recorded (a moved one captures anew)."""

    def _capture(self, args: Sequence[torch.Tensor], state: Sequence[torch.Tensor]) -> Any:
        in_place = self._in_place(args, state)
        inputs = [a if keep else a.clone() for a, keep in zip(args, in_place, strict=True)]
        pool = BufferPool("cpu")
        outputs = self._owned(self.run_steps(self.program, inputs, pool), inputs, in_place)
        own: list[torch.Tensor | None] = [
            None if keep else t for t, keep in zip(inputs, in_place, strict=True)
        ]
        graph = ReplayedSteps(lambda bound: self.run_steps(self.program, bound, pool), own)
        self.captures += 1
        return self._captured(graph, args, inputs, in_place, outputs, pool)  # type: ignore[arg-type]

    def _launch(self, captured: Any, args: Sequence[torch.Tensor]) -> None:
        captured.graph.replay(args, captured.outputs)
