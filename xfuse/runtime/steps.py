"""
The steps a compiled program runs, and the pool its intermediate buffers come from.

Values live in numbered slots. A step reads the tensors of its input slots and returns the
tensors of its output slots: a kernel launch (outputs freshly allocated, contiguous), an eager
op through the reference interpreter (externs, fallbacks), or a torch view (layout ops that feed
externs, so that no copy is made).
"""

from __future__ import annotations

import contextvars
import math
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple, cast

import numpy as np
import torch
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr
from xdsl.ir import Operation

from xfuse.backends import Kernel
from xfuse.dialects import graph
from xfuse.dialects.torch_args import Operand, decode_arg, resolve_torch_op, tensor_ref
from xfuse.errors import IndexOutOfRangeError, XfuseError
from xfuse.interpreters.graph import DirectCall, PreparedOp, direct_call, prepare_op
from xfuse.runtime import gemm_ways
from xfuse.runtime.memory import cpu_buffer_maker, empty_cpu

Tensor = torch.Tensor


class BufferSpec(NamedTuple):
    """The shape and dtype of a buffer a kernel writes (a named tuple: the pool hashes it on
    every allocation, in C)."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        """The buffer's size in bytes."""
        return math.prod(self.shape) * self.dtype.itemsize


Allocate = Callable[[BufferSpec], Tensor]


REUSE_OUTPUTS_DEFAULT = True
"""Output recycling's shipped default (exact: see `BufferPool`); `XFUSE_REUSE_OUTPUTS=0` or
`=1` overrides it."""


def reuse_outputs_enabled() -> bool:
    """Whether output recycling (see `BufferPool`) is on: `XFUSE_REUSE_OUTPUTS`, else the
    shipped default."""
    setting = os.environ.get("XFUSE_REUSE_OUTPUTS")
    return REUSE_OUTPUTS_DEFAULT if setting is None else setting != "0"


RECYCLE_MIN_BYTES = 128 << 10
"""Outputs smaller than this are plain `torch.empty` memory, as eager's: malloc serves them from
memory it keeps (glibc's mmap threshold starts at 128 KiB), so they cost no page faults, and
lending pool memory would cost more than it saves."""

KEPT_MAX_BYTES = 1 << 20
"""On a GPU, free intermediate buffers this large or larger are not kept between calls
(`BufferPool.trim`); smaller ones are, for the next call's allocations."""

_NUMPY_DTYPES: dict[torch.dtype, np.dtype] = {
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.float16: np.dtype(np.float16),
    torch.int64: np.dtype(np.int64),
    torch.int32: np.dtype(np.int32),
    torch.int16: np.dtype(np.int16),
    torch.int8: np.dtype(np.int8),
    torch.uint8: np.dtype(np.uint8),
    torch.bool: np.dtype(np.bool_),
}
"""torch dtypes numpy has, so that a lent array has the tensor's dtype (others, bf16, are
lent as bytes and viewed by torch)."""


def new_pool(device: torch.device) -> BufferPool:
    """A pool for a program's call on `device`: `POOL_FACTORY`'s (a `BufferPool`, or a test's
    pool with guard bands, `xfuse.testing.guarded.guarded_pools`)."""
    return POOL_FACTORY.get()(device)


class BufferPool:
    """Free intermediate buffers by (shape, dtype), reused by later kernel outputs; and, on the
    CPU, the memory of returned outputs of `min_bytes` or more once their storage is freed.

    A fresh large buffer costs a page fault per 4 KiB page on first write, which costs more
    than the kernels that fill it; torch's CPU allocator does not cache. So a large CPU buffer
    is a block of pool memory seen through a numpy array that only the tensor's storage holds
    (`torch.from_numpy`): the storage's deleter drops the array, and a weak reference's
    callback hands the block back. Memory returns exactly when the storage is freed, whoever
    held it (views, numpy arrays, DLPack capsules, weak references change nothing; after
    `share_memory_` the storage is another memory and the block returns at once), never by
    judging from reference counts. Smaller outputs are fresh `torch.empty` memory (see
    `RECYCLE_MIN_BYTES`).
    """

    def __init__(self, device: torch.device | str = "cpu", min_bytes: int | None = None) -> None:
        self._free: dict[BufferSpec, list[Tensor]] = {}
        self.allocations = 0
        self.device = torch.device(device)
        self.recycle = self.device.type == "cpu" and reuse_outputs_enabled()
        self.min_bytes = RECYCLE_MIN_BYTES if min_bytes is None else min_bytes
        self._fresh: dict[BufferSpec, Callable[[], Tensor]] = {}
        """spec -> a fresh buffer of it, for specs that are not recycled (made once per spec:
        one call per allocation, no decisions)."""
        self._lanes: dict[BufferSpec, deque[np.ndarray]] = {}
        """spec -> the blocks of its size whose tensors' storage was freed (appended by weak
        reference callbacks, from any thread: deque's append and pop are atomic), for specs
        that are recycled. A spec is in `_fresh` or here from its first allocation on."""
        self._trims = not self.recycle and self.device.type != "cpu"
        """Whether `trim` drops large free buffers (on a GPU)."""
        self._large: set[BufferSpec] = set()
        """Specs of free buffers `trim` drops (on a GPU)."""
        self._returned: dict[int, deque[np.ndarray]] = {}
        self._lent: dict[int, tuple[weakref.ref[np.ndarray], np.ndarray, deque[np.ndarray]]] = {}
        """id(weak reference) -> the reference (kept alive so that its callback runs), the
        block, and where it returns."""

    def allocate(self, spec: BufferSpec) -> Tensor:
        """A buffer of `spec`: a freed intermediate one of it, else `_new`'s."""
        free = self._free.get(spec)
        if free:
            return free.pop()
        return self._new(spec)

    def _new(self, spec: BufferSpec) -> Tensor:
        """A buffer of `spec` that no intermediate freed: fresh, or a returned output's block."""
        fresh = self._fresh.get(spec)
        if fresh is not None:
            self.allocations += 1
            return fresh()
        lane = self._lanes.get(spec)
        if lane is None:  # the spec's first allocation
            self._classify(spec)
            return self._new(spec)
        try:
            block = lane.pop()
        except IndexError:
            self.allocations += 1
            nbytes = spec.nbytes
            # The array holds the tensor: torch's (aligned) memory, large ones in huge pages.
            block = empty_cpu((nbytes,), torch.uint8).numpy()
        return self._lend(block, spec, lane)

    def _classify(self, spec: BufferSpec) -> None:
        """Recycled (a lane of returned blocks of its size) or made fresh on each allocation."""
        nbytes = spec.nbytes
        if self.recycle and nbytes and nbytes >= self.min_bytes:
            self._lanes[spec] = self._returned.setdefault(nbytes, deque())
        elif self.device.type == "cpu":  # in huge pages where large
            self._fresh[spec] = cpu_buffer_maker(spec.shape, spec.dtype)
        else:
            self._fresh[spec] = partial(
                torch.empty, spec.shape, dtype=spec.dtype, device=self.device
            )

    def _lend(self, block: np.ndarray, spec: BufferSpec, lane: deque[np.ndarray]) -> Tensor:
        """A tensor of `spec` over `block`'s memory whose storage alone holds the numpy array
        it was made from; when that storage is freed, the array dies and `block` goes back to
        `lane`."""
        np_dtype = _NUMPY_DTYPES.get(spec.dtype)
        if np_dtype is not None:
            array = np.ndarray(spec.shape, np_dtype, block)
            tensor = torch.from_numpy(array)
        else:
            array = block[:]
            tensor = torch.from_numpy(array).view(spec.dtype).view(spec.shape)
        ref = weakref.ref(array, self._returns)
        self._lent[id(ref)] = (ref, block, lane)
        return tensor

    def _returns(self, ref: weakref.ref[np.ndarray]) -> None:
        _, block, lane = self._lent.pop(id(ref))
        lane.append(block)

    def release(self, spec: BufferSpec, buffer: Tensor) -> None:
        self._free.setdefault(spec, []).append(buffer)
        if self._trims and spec not in self._large:
            if spec.nbytes >= KEPT_MAX_BYTES:
                self._large.add(spec)

    def trim(self) -> None:
        """After a call on a GPU: the free buffers of `KEPT_MAX_BYTES` or more go back to
        torch's caching allocator, which serves the next call's as fast, so that they are
        not held between calls (a training step's forward and backward each kept their
        largest intermediates, the logits' among them, through the other's call)."""
        free = self._free
        for spec in self._large:
            free.pop(spec, None)


@dataclass
class KernelStep:
    """Launch a compiled kernel: inputs (made contiguous), then freshly allocated outputs."""

    kernel: Kernel
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    out_specs: tuple[BufferSpec, ...]
    label: str
    owns_outputs: bool = field(default=True, init=False)
    """Its outputs are buffers of its own (the memory plan's `SlotStep.owns_outputs`)."""
    writes: bool = field(init=False, repr=False)
    """Whether some output has elements: a kernel over empty outputs has nothing to write (and
    may index nothing safely), so it is not launched."""

    def __post_init__(self) -> None:
        self.writes = any(math.prod(spec.shape) for spec in self.out_specs)
        self._launch = getattr(self.kernel, "launch", self.kernel)

    error_flag: bool = False
    """The kernel takes an error flag after its outputs (it gathers, docs/contracts.md)."""
    in_elements: int = 0
    """The elements of its inputs (fixed by the program's shapes): with its outputs', the work
    a launch reports to the kernel (`direct_call`)."""
    copied: tuple[int, ...] = ()
    """The inputs a call may pass as CPU scalars (a GPU program's 0-d arguments,
    `xfuse.runtime.compiler.copy_scalar_inputs`): the kernel reads them on its device (a
    copy, where one is on the CPU)."""
    _device_flag: Tensor | None = field(default=None, init=False, repr=False)
    _cpu_flags: threading.local = field(default_factory=threading.local, init=False, repr=False)
    """This thread's CPU error flag (`_cpu_flag`)."""
    _launch: Callable[[list[Tensor]], None] = field(init=False, repr=False)
    """The kernel's `launch` where it has one (the CPU's: no checks of what `run` ensures),
    else the kernel."""

    def run(self, args: list[Tensor], allocate: Allocate) -> list[Tensor]:
        outs = list(map(allocate, self.out_specs))
        if self.writes:
            buffers = [a if a.is_contiguous() else a.contiguous() for a in args]
            for k in self.copied:
                buffers[k] = buffers[k].to(outs[0].device)
            buffers += outs
            if self.error_flag:
                self._run_checked(buffers, outs[0].device)
            else:
                self._launch(buffers)
        return outs

    def direct_call(self) -> tuple[Callable[..., object], int] | None:
        """(function, extent) when every run is one foreign call `function(0, extent, *pointers)`
        on the caller, with nothing decided per call: a kernel whose fixed work runs inline
        (`inline_entry`, the CPU's), no error flag, no input `copied`, outputs with elements.
        The program's runner then makes that call itself (`xfuse.runtime.compiler.make_runner`)."""
        entry = getattr(self.kernel, "inline_entry", None)
        if entry is None or self.error_flag or not self.writes or self.copied:
            return None
        out_elements = sum(math.prod(spec.shape) for spec in self.out_specs)
        return cast(
            "tuple[Callable[..., object], int] | None", entry(self.in_elements + out_elements)
        )

    def direct_launch(self) -> Callable[..., None] | None:
        """A GPU kernel's launch on its buffers, inputs then outputs, as one call with nothing
        decided per call by the step (no error flag, no input `copied`, outputs with
        elements): the kernel's `launcher`, which the program's runner calls itself
        (`xfuse.runtime.compiler.make_runner`). None for a kernel without one (the CPU's)."""
        make = getattr(self.kernel, "launcher", None)
        if make is None or self.error_flag or not self.writes or self.copied:
            return None
        return cast("Callable[..., None] | None", make(len(self.inputs) + len(self.out_specs)))

    def _run_checked(self, buffers: list[Tensor], device: torch.device) -> None:
        """Run a kernel that flags an index out of range (a gather's). On the CPU such an index
        raises like eager once the kernel is done; on CUDA the flag is not read (that would
        synchronise every call): the kernel traps where it sets it, as eager's device-side
        assert (docs/gpu.md)."""
        if device.type != "cpu":
            if self._device_flag is None or self._device_flag.device != device:
                self._device_flag = torch.zeros(1, dtype=torch.uint8, device=device)
            self.kernel([*buffers, self._device_flag])  # written, never read
            return
        flag, seen = self._cpu_flag()
        seen[0] = 0
        self._launch([*buffers, flag])
        if seen[0]:
            raise IndexOutOfRangeError.in_kernel(self.label)

    def _cpu_flag(self) -> tuple[Tensor, np.ndarray]:
        """This thread's error flag for the CPU kernel (one byte, made once per thread: calls
        on other threads never share it) and a numpy view that reads and clears it without a
        torch op."""
        found: tuple[Tensor, np.ndarray] | None = getattr(self._cpu_flags, "flag", None)
        if found is None:
            flag = torch.zeros(1, dtype=torch.uint8)
            found = self._cpu_flags.flag = (flag, flag.numpy())
        return found


FRESH_EXTERNS = frozenset({"graph.matmul", "graph.linear"})
"""Eager ops whose results never alias their inputs (besides the torch calls `fresh_results`
finds so)."""


def fresh_results(op: Operation) -> bool:
    """Whether an eager op's results are memory of their own, never an operand's: a product
    of matrices, or a torch call of an operator whose schema gives its results no alias
    annotation and writes nothing, and that is no composite (torch's contract for an
    operator's kernels: such a result is new memory; a composite, `type_as`, may return its
    input as it is). Other eager results may be views of their operands."""
    if op.name in FRESH_EXTERNS:
        return True
    if not isinstance(op, graph.TorchCallOp):
        return False
    try:
        operator = resolve_torch_op(op.target.data)
    except XfuseError:
        return False
    schema = getattr(operator, "_schema", None)
    if not isinstance(operator, torch._ops.OpOverload) or schema is None or schema.is_mutable:
        return False
    if any(r.alias_info is not None for r in schema.returns):
        return False
    composite = torch._C._dispatch_has_kernel_for_dispatch_key(
        operator.name(), "CompositeImplicitAutograd"
    )
    return not composite


@dataclass
class EagerStep:
    """Run one op (an extern, or a fusion.group that fell back) with eager torch."""

    op: Operation
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    label: str
    owns_outputs: bool = field(init=False, repr=False)
    """Its results never alias its operands (`fresh_results`)."""
    call: PreparedOp = field(init=False, repr=False)
    """The op prepared once (arguments decoded, operator resolved): operands -> results."""
    direct: DirectCall | None = field(init=False, repr=False)
    """The op as one torch call of its operands, which the program's runner writes out
    itself (`direct_call`; None: the runner calls `run`)."""

    def __post_init__(self) -> None:
        self.call = prepare_op(self.op)
        self.direct = direct_call(self.op)
        self.owns_outputs = fresh_results(self.op)

    def run(self, args: list[Tensor], allocate: Allocate) -> list[Tensor]:
        if args and not args[0].is_cpu:
            with args[0].device:  # constants made inside (a group's) on the inputs' device
                return self.call(args)
        return self.call(args)


@dataclass
class GemmStep(EagerStep):
    """A product of a weight run another way than torch's call (`xfuse.runtime.gemm_ways`),
    where `xfuse.choices` chose it: torch's call (`direct_call`) with that way's function in
    its place, the same operands."""

    way: str = gemm_ways.BLOCKED

    def __post_init__(self) -> None:
        fn = gemm_ways.ChosenGemm(self.way, transposed=isinstance(self.op, graph.MatmulOp))
        bias = [Operand(2)] if len(self.op.operands) > 2 else [None]
        self.direct = (fn, [Operand(0), Operand(1), *bias], {})
        self.call = lambda xs: [fn(*xs)]
        self.owns_outputs = True


class View(NamedTuple):
    """A torch view as a method call: `getattr(x, method)(argument)` (a reshape, permute or
    indexing), so that the program's runner can call the method itself
    (`xfuse.runtime.compiler.make_runner`)."""

    method: str
    argument: object

    def __call__(self, x: Tensor) -> Tensor:
        return cast(Tensor, getattr(x, self.method)(self.argument))


def _reshape_view(op: Operation) -> View:
    return View("reshape", graph.dims_of(op.results[0]))


def _permute_view(op: Operation) -> View:
    assert isinstance(op, graph.PermuteOp)
    return View("permute", op.permutation)


def _slice_view(op: Operation) -> View:
    assert isinstance(op, graph.SliceOp)
    return View("__getitem__", op.index)


VIEW_IMPLS: dict[str, Callable[[Operation], View]] = {
    "graph.reshape": _reshape_view,
    "graph.permute": _permute_view,
    "graph.slice": _slice_view,
}
"""Layout op name -> the torch view it is, made once from the op's attributes: a reshape to
its result's dims, a permute by its permutation, a slice by its index (`SliceOp.index`). On
symbolic sizes a reshape's dims name their symbols, which a symbolic program sizes per call
(`xfuse.runtime.symbolic.view_at_sizes`), and a slice keeps a symbolic dim whole."""
assert set(VIEW_IMPLS) == {op.name for op in graph.STRIDED_VIEWS}


def _torch_permute_view(op: graph.TorchCallOp) -> View | None:
    """`aten.permute.default` of its one operand by constant dims (channels-last's twins)."""
    args = op.args.data
    if len(op.operands) != 1 or op.kwargs.data or len(args) != 2 or tensor_ref(args[0]) != 0:
        return None
    if not isinstance(args[1], ArrayAttr) or not all(
        isinstance(a, IntegerAttr) for a in args[1].data
    ):
        return None
    dims = tuple(decode_arg(args[1], ()))
    if not all(type(d) is int for d in dims):  # a bool among them: no permute
        return None
    return View("permute", dims)


TORCH_CALL_VIEWS: dict[str, Callable[[graph.TorchCallOp], View | None]] = {
    "aten.permute.default": _torch_permute_view,
}
"""Torch call target -> the view the call is, where its arguments make it one (None: not)."""


def torch_call_view(op: Operation) -> View | None:
    """The view a torch call makes, as a `ViewStep` runs it (a direct method call instead of
    the prepared call's argument filling: about a microsecond less a step on the CPU)."""
    if not isinstance(op, graph.TorchCallOp):
        return None
    make = TORCH_CALL_VIEWS.get(op.target.data)
    return make(op) if make is not None else None


@dataclass
class ViewStep:
    """A layout op, or a torch call that is a view (`torch_call_view`), as a torch view of its
    input (no copy); kernels make it contiguous. The program's runner calls the view's method
    in its own code (no step call)."""

    op: Operation
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    label: str
    owns_outputs: bool = field(default=False, init=False)
    view: View = field(init=False, repr=False)

    def __post_init__(self) -> None:
        view = torch_call_view(self.op)
        self.view = view if view is not None else VIEW_IMPLS[self.op.name](self.op)

    def run(self, args: list[Tensor], allocate: Allocate) -> list[Tensor]:
        return [self.view(args[0])]


Step = KernelStep | EagerStep | ViewStep


POOL_FACTORY: contextvars.ContextVar[Callable[[torch.device], BufferPool]] = contextvars.ContextVar(
    "xfuse_pool_factory", default=BufferPool
)
"""What makes the pool of a program's call that finds none free (`new_pool`): `BufferPool`,
or, inside `xfuse.testing.guarded.guarded_pools`, pools whose buffers lie between guard
bands."""
