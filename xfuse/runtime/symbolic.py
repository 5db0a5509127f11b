"""
Programs with symbolic sizes on the CPU or a CUDA GPU (docs/dynamic-shapes.md, "runtime"):
what `xfuse.compile(..., dynamic_shapes=...)` runs (`xfuse.runtime.dynamic`).
`SymbolicProgram` fuses and lowers a `@forward` with a `graph.sizes` table once, compiles each
kernel once for its device, and runs every call at the call's sizes:

- the sizes of a call are read from its inputs: each input symbol from the argument and dim
  that hold it, equal symbols agreeing, each in its range (which starts at 2: a size of 0 or
  1, or one outside the range, raises `SymbolicSizeError`; `DynamicProgram` specialises
  instead), static dims and dtypes as declared; derived symbols are computed (an argument dim
  that holds one must have its size: `y` of `2 * s0` is refused at any other), and one of 0 or
  1 (a floor division at a small input: `(s0 + 1) floordiv 2` at `s0 = 2`) raises
  `SymbolicSizeError` as well;
- a kernel launch allocates its outputs on the program's device from their symbolic shapes at
  those sizes and passes the kernel's size arguments (`xfuse.size_args`) and the trip count of
  its outer parallel loop (`xfuse.extent`'s symbol; None where it is static: the kernel's
  own) to `launch_sized` (`xfuse.backends.Kernel`'s); a CUDA kernel computes its grid from the
  size arguments, and one that gathers stops at an index out of range (`trap`, as eager's
  device-side assert) rather than reporting it through its flag (reading the flag back would
  synchronise);
- every other op of `@forward` (externs such as `graph.linear`, views) runs eagerly through the
  graph interpreter's prepared ops, with the call's sizes bound, on the program's device (the
  tensors an op makes, an iota's, are made there).

A group that `lower-to-loops` cannot lower on symbolic sizes is refused (the pass's one line):
the static runtime's op-by-op fallback is not wired to symbolic programs yet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.ir import SSAValue

from xfuse.backends import Backend, Kernel, get_backend
from xfuse.dialects import fusion, graph
from xfuse.errors import IndexOutOfRangeError, InputDeviceError, SymbolicSizeError
from xfuse.interpreters.graph import SIZES, find_function, prepare_op
from xfuse.ir import dtypes
from xfuse.ir.functions import kernel_functions
from xfuse.ir.names import ERROR_FLAG_ATTR, EXTENT_ATTR, SIZE_ARGS_ATTR, SIZES_ATTR
from xfuse.pipeline import PassObserver, pipeline

DEFAULT_PASSES = "decompose,fuse-greedy,group-cleanup,fold-linear"
"""The fusion passes a symbolic program is built with (before `lower-to-loops`): `fold-linear`
puts a transposed weight's matmul and a bias add that fusion left alone back into one
`graph.linear` (a library GEMM), where the transpose would be a kernel copying the weight at
every call."""


@dataclass
class _Launch:
    kernel: Kernel
    inputs: list[int]
    outputs: list[int]
    shapes: list[tuple[graph.Dim, ...]]
    dtypes: list[torch.dtype]
    size_args: list[str]
    extent: str | None
    """The size symbol its outer parallel loop runs over (`xfuse.extent`), None where that
    loop's extent is static (the kernel's own)."""
    device: torch.device
    error_flag: bool = False
    """The kernel takes an error flag after its outputs (it gathers): set, the launch raises
    eager's index error (a CUDA kernel traps instead: its flag is not read)."""

    def run(self, values: list[torch.Tensor | None], sizes: dict[str, int]) -> None:
        buffers = [_tensor(values[i]).contiguous() for i in self.inputs]
        outs = [
            torch.empty(
                [d if isinstance(d, int) else sizes[d] for d in shape], dtype=t, device=self.device
            )
            for shape, t in zip(self.shapes, self.dtypes, strict=True)
        ]
        flag = [torch.zeros(1, dtype=torch.uint8, device=self.device)] if self.error_flag else []
        extent = sizes[self.extent] if self.extent is not None else None
        self.kernel.launch_sized(
            [*buffers, *outs, *flag], [sizes[s] for s in self.size_args], extent
        )
        if flag and self.device.type == "cpu" and flag[0].item():
            raise IndexOutOfRangeError.in_kernel(self.kernel.name)
        for slot, out in zip(self.outputs, outs, strict=True):
            values[slot] = out


@dataclass
class _Eager:
    run_op: Callable[[list[torch.Tensor]], list[torch.Tensor]]
    inputs: list[int]
    outputs: list[int]

    def run(self, values: list[torch.Tensor | None], sizes: dict[str, int]) -> None:
        results = self.run_op([_tensor(values[i]) for i in self.inputs])
        for slot, out in zip(self.outputs, results, strict=True):
            values[slot] = out


def small_size_message(symbol: graph.SizeSymbol, sizes: dict[str, int]) -> str:
    """Why a call whose derived symbol `symbol` is 0 or 1 (or less) is refused."""
    inputs = ", ".join(f"{name} = {sizes[name]}" for name in sorted(symbol_inputs(symbol, sizes)))
    return (
        f"size symbol '{symbol.name}' = {symbol.definition} is {sizes[symbol.name]} at {inputs}: "
        f"a symbol's size is {graph.MIN_SIZE} or more (sizes 0 and 1 are specialised: this "
        "program does not run them)"
    )


def symbol_inputs(symbol: graph.SizeSymbol, sizes: dict[str, int]) -> set[str]:
    """The symbols `symbol`'s definition names (those a message shows the sizes of)."""
    assert symbol.expr is not None
    return {name for name in symbol.expr.symbols if name in sizes}


def _tensor(value: torch.Tensor | None) -> torch.Tensor:
    assert value is not None, "a value used before the step that computes it"
    return value


class SymbolicProgram:
    """`@forward` of a module with size symbols, fused, lowered and compiled once for `device`
    (the CPU or a CUDA GPU); call it with tensors on that device of any sizes its symbols allow
    (see the module docstring). `observer` is called around each fusion pass
    (`xfuse.pipeline.PassObserver`)."""

    def __init__(
        self,
        module: ModuleOp,
        *,
        passes: str = DEFAULT_PASSES,
        backend: Backend | None = None,
        observer: PassObserver | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.device = torch.device(device)
        module = module.clone()
        forward = find_function(module, "forward")
        table = forward.attributes.get(SIZES_ATTR)
        if not isinstance(table, graph.SizesAttr):
            raise SymbolicSizeError(
                "a symbolic program needs a function with size symbols (a graph.sizes table); "
                "@forward has none"
            )
        self.table = table
        self.input_symbols = table.inputs()
        """The table's input symbols (those a call's inputs give), in its order."""
        self.derives = len(self.input_symbols) < len(table.data)
        """Whether the table has derived symbols (a call computes and checks them)."""
        self.arguments = [graph.dims_of(a) for a in forward.body.block.args]
        self.argument_dtypes = [dtypes.to_torch(graph.dtype_of(a)) for a in forward.body.block.args]
        fusion_passes = replace(pipeline(passes), observer=observer)
        fusion_passes.apply(module)
        self.fusion_passes = fusion_passes.passes
        """The fusion passes as they ran (their `decisions`, for an explanation)."""
        self.fused = module.clone()
        """The module after fusion, before `lower-to-loops`: groups, not kernels."""
        pipeline("lower-to-loops")(module)
        self.module = module
        self.backend = backend if backend is not None else get_backend(self.device.type)
        self.kernels: dict[str, Kernel] = {}
        for kernel in kernel_functions(module):
            name = kernel.sym_name.data
            self.kernels[name] = self.backend.load(self.backend.compile(module, name), name)
        self.steps: list[_Launch | _Eager] = []
        self.results: list[int] = []
        self._plan(forward)

    @property
    def kernel_count(self) -> int:
        """How many kernels were compiled (once, when the program was built)."""
        return len(self.kernels)

    def _plan(self, forward: func.FuncOp) -> None:
        slots: dict[SSAValue, int] = {a: i for i, a in enumerate(forward.body.block.args)}

        def slot_of(v: SSAValue) -> int:
            return slots.setdefault(v, len(slots))

        kernels = {k.sym_name.data: k for k in kernel_functions(self.module)}
        for op in forward.body.block.ops:
            if isinstance(op, func.ReturnOp):
                self.results = [slots[v] for v in op.operands]
                continue
            inputs = [slots[v] for v in op.operands]
            outputs = [slot_of(r) for r in op.results]
            if isinstance(op, fusion.LaunchOp):
                name = op.callee.root_reference.data
                ir = kernels[name]
                size_args = ir.attributes.get(SIZE_ARGS_ATTR)
                extent = ir.attributes.get(EXTENT_ATTR)
                self.steps.append(
                    _Launch(
                        self.kernels[name],
                        inputs,
                        outputs,
                        [graph.dims_of(r) for r in op.results],
                        [dtypes.to_torch(graph.dtype_of(r)) for r in op.results],
                        [s.data for s in size_args] if isinstance(size_args, ArrayAttr) else [],  # pyright: ignore[reportUnknownMemberType]
                        extent.data if isinstance(extent, StringAttr) else None,
                        self.device,
                        ERROR_FLAG_ATTR in ir.attributes,
                    )
                )
            else:
                self.steps.append(_Eager(prepare_op(op), inputs, outputs))
        self.slot_count = len(slots)

    def bind(self, inputs: Sequence[torch.Tensor]) -> dict[str, int]:
        """Every symbol's size in a call of `inputs`, checked (see the module docstring)."""
        if len(inputs) != len(self.arguments):
            raise SymbolicSizeError(
                f"@forward takes {len(self.arguments)} arguments, got {len(inputs)}"
            )
        found: dict[str, int] = {}
        for i, (dims, t, dtype) in enumerate(
            zip(self.arguments, inputs, self.argument_dtypes, strict=True)
        ):
            if t.device.type != self.device.type:
                raise InputDeviceError(
                    f"argument {i} is a tensor on {t.device}, the program was compiled for "
                    f"{self.device}"
                )
            if t.dim() != len(dims) or t.dtype != dtype:
                raise SymbolicSizeError(
                    f"argument {i} expects a {dtype} tensor of shape {graph.fmt_shape(dims)}, "
                    f"got {t.dtype} {list(t.shape)}"
                )
            for k, (d, n) in enumerate(zip(dims, t.shape, strict=True)):
                if isinstance(d, int):
                    if d != n:
                        raise SymbolicSizeError(
                            f"argument {i} dim {k} is static {d}, got size {n} "
                            f"(shape {list(t.shape)})"
                        )
                elif found.setdefault(d, n) != n:
                    raise SymbolicSizeError(
                        f"size symbol '{d}' is {found[d]} in one argument and {n} in argument "
                        f"{i} (dim {k})"
                    )
        for s in self.input_symbols:
            size = found[s.name]
            if size < s.low or (s.high is not None and size > s.high):
                high = "inf" if s.high is None else s.high
                raise SymbolicSizeError(
                    f"size symbol '{s.name}' is {size}, outside its range [{s.low}, {high}] "
                    "(sizes 0 and 1 are specialised: this program does not run them)"
                )
        sizes = {s.name: found[s.name] for s in self.input_symbols}
        if not self.derives:
            return sizes
        sizes = self.table.evaluate(sizes)
        small = self.table.too_small(sizes)
        if small is not None:
            raise SymbolicSizeError(small_size_message(small, sizes))
        for name, n in found.items():  # a derived size an argument holds (y of 2 * s0)
            if sizes[name] != n:
                i, k = next(
                    (i, k)
                    for i, (dims, t) in enumerate(zip(self.arguments, inputs, strict=True))
                    for k, (d, m) in enumerate(zip(dims, t.shape, strict=True))
                    if d == name and m == n
                )
                raise SymbolicSizeError(
                    f"argument {i} dim {k} is size symbol '{name}', which is {sizes[name]} at "
                    f"this call's sizes, got size {n}"
                )
        return sizes

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        return self.run(inputs, self.bind(inputs))

    def run(self, inputs: Sequence[torch.Tensor], sizes: dict[str, int]) -> list[torch.Tensor]:
        """The results of a call of `inputs` whose sizes `bind` read (`sizes`)."""
        values: list[torch.Tensor | None] = [*inputs, *[None] * (self.slot_count - len(inputs))]
        token = SIZES.set(sizes)
        try:
            if self.device.type == "cpu":
                for step in self.steps:
                    step.run(values, sizes)
            else:
                with inputs[0].device if inputs else self.device:  # tensors ops make go there
                    for step in self.steps:
                        step.run(values, sizes)
        finally:
            SIZES.reset(token)
        return [_tensor(values[i]) for i in self.results]
