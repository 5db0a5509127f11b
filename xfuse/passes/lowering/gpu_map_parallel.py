"""
`gpu-map-parallel`: the outer `scf.parallel` of every kernel onto the CUDA grid.

A kernel of loop IR (docs/contracts.md) is mapped with one of three strategies, recorded on
the function as `xfuse.gpu.strategy` together with its launch shape (`xfuse.gpu.block`, threads
per block, and `xfuse.gpu.items`, see below):

- `elementwise` (no loop inside the parallel body): a grid-stride loop over the flattened
  index space, `width` consecutive elements per thread and step, so that loads and stores of
  the innermost dimension become 128-bit vector accesses (the first lane's access carries
  `xfuse.gpu.align`, the byte alignment it may assume). `items` = elements / width; any grid
  and block size are valid, so the runtime picks them. Where the innermost dimension takes no
  vector (rows of 50,257 logits) but the loop's element count does, the lanes of a chunk are
  consecutive elements of the flattened loop, each with its own indices, and the accesses at
  the iteration's own element are the vectors (`flat` lanes).
- `rows` (row reductions: the body is `scf.for` loops with `iter_args` over the innermost
  dimension, as lower-to-loops emits for softmax, layernorm, RMSNorm): `threads` threads per
  row (a warp for short rows, up to a block of 1024), each striding over the row; partial
  results are combined with warp shuffles (`llvm.nvvm.shfl.sync.bfly`) and, across warps,
  shared memory (address space 3). When a row fits (`elements per thread <= max-cached`) the
  loops are unrolled and loads of the same element are shared between them, so the row stays
  in registers and the input is read once. `items` = blocks (one per `rows per block` rows).
  A perfect nest of such loops (a reduction over several dims: a mean over an NCHW image's H
  and W) is first made one loop over the row. Rows that walk a column of memory take this
  mapping where there are few of them (fewer than `min-threads`), or where they write a row
  and fit in registers (a layer norm over NCHW channels written channels-last).
- `serial` (anything else, e.g. column reductions, and scans, whose loop stores its running
  value at every step): one thread per parallel iteration in a grid-stride loop, the body
  unchanged.

Index arithmetic the mapping creates (ids, flattening, delinearization) is 32-bit unless the
kernel touches more than 2^31-1 elements, then 64-bit. A grid-stride kernel with symbolic sizes
loops in 64-bit, and divides only in 32-bit: a thread's first position and the grid's stride
(the runtime launches at most `MAX_GRID_STRIDE_THREADS` threads a grid-stride kernel).

    scf.parallel (%i, %j) = (%c0, %c0) to (%c64, %c128) step (%c1, %c1) { ... }
      ->
    %tid = llvm.call_intrinsic "llvm.nvvm.read.ptx.sreg.tid.x"() : () -> i32
    ... scf.for %w = %gtid to %c2048_i32 step %nthreads : i32 { 4 clones of the body }
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields

from xdsl.builder import Builder
from xdsl.context import Context
from xdsl.dialects import arith, func, llvm, memref, scf
from xdsl.dialects.builtin import (
    AnyFloat,
    ArrayAttr,
    FloatAttr,
    IndexType,
    IntAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    NoneAttr,
    StringAttr,
    f32,
    f64,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import DiagnosticException

from xfuse.dialects.graph import SizeExpr, SizeSymbol, evaluate_sizes, numel
from xfuse.errors import XfuseError
from xfuse.ir.constants import int_constant
from xfuse.ir.dtypes import byte_width
from xfuse.ir.functions import kernel_functions
from xfuse.ir.names import (
    ALIGN_ATTR,
    BLOCK_ATTR,
    ITEMS_ATTR,
    ITEMS_SIZES_ATTR,
    LANE_ATTR,
    SIZE_ARGS_ATTR,
    SIZE_HINTS_ATTR,
    STRATEGY_ATTR,
)
from xfuse.passes.lowering.divisions import divide_by_reciprocal, kept_divisors
from xfuse.passes.lowering.scalar_ops import REDUCTION_IDENTITIES, reduction_identity
from xfuse.passes.options import (
    BLOCK_THREADS,
    NON_NEGATIVE,
    POSITIVE,
    ROW_THREADS,
    option,
)

WARP = 32
MAX_BLOCK = 1024
SHUFFLED_TYPES = (f32, i32, f64, i64)
"""Accumulator types whose partial results the row's threads exchange (64-bit in two halves)."""
INT32_LIMIT = 2**31 - 1
UINT32_LIMIT = 2**32 - 1
VECTOR_BYTES = 16
MAX_GRID_STRIDE_THREADS = (INT32_LIMIT + 1) // VECTOR_BYTES
"""The most threads a launch of a grid-stride kernel has (the runtime caps its grid): a
thread's first position and the grid's stride, in chunks of at most `VECTOR_BYTES` elements,
are below 2^32, so that a symbolic kernel divides them in 32-bit arithmetic."""


class GPUMappingError(XfuseError, DiagnosticException):
    """A kernel whose loops cannot be mapped onto the grid (the runtime falls back)."""


# ---------------------------------------------------------------------------------------------
# Small IR helpers
# ---------------------------------------------------------------------------------------------


@dataclass
class _Emit:
    """Inserts ops at a point; typed helpers for the index and id arithmetic of the mapping."""

    builder: Builder
    int_type: IntegerType

    def op(self, op: Operation) -> SSAValue:
        return self.builder.insert(op).results[0]

    def const(self, value: int, t: Attribute | None = None) -> SSAValue:
        t = self.int_type if t is None else t
        # xDSL types the attribute by its element type, which t (an int or index type) is.
        return self.op(arith.ConstantOp(IntegerAttr(value, t)))  # type: ignore[call-overload]

    def float_const(self, value: float, t: Attribute) -> SSAValue:
        # Likewise for t, a float type.
        return self.op(arith.ConstantOp(FloatAttr(value, t)))  # type: ignore[call-overload]

    def sreg32(self, name: str) -> SSAValue:
        return self.op(llvm.CallIntrinsicOp(f"llvm.nvvm.read.ptx.sreg.{name}", [], [i32]))

    def sreg(self, name: str) -> SSAValue:
        return self.widen(self.sreg32(name))

    def widen(self, value: SSAValue) -> SSAValue:
        if self.int_type == i32:
            return value
        return self.op(arith.ExtUIOp(value, self.int_type))

    def to_index(self, value: SSAValue) -> SSAValue:
        return self.op(arith.IndexCastOp(value, IndexType()))

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.AddiOp(a, b))

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.MuliOp(a, b))

    def div(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.DivUIOp(a, b))

    def rem(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.RemUIOp(a, b))

    def min(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.MinUIOp(a, b))

    def lt(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.CmpiOp(a, b, "ult"))

    def eq(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.CmpiOp(a, b, "eq"))

    def and_(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.op(arith.AndIOp(a, b))


def _accesses(ops: Sequence[Operation]) -> list[memref.LoadOp | memref.StoreOp]:
    return [
        nested
        for op in ops
        for nested in op.walk()
        if isinstance(nested, memref.LoadOp | memref.StoreOp)
    ]


def _is_flag_report(op: Operation) -> bool:
    """`scf.if %bad { memref.store %c1, %flag[%c0] }`: a kernel's error report
    (lower-to-loops, `ERROR_FLAG_ATTR`). Every thread that meets a bad index stores the same
    byte, so any strategy may clone it into its lanes and rows as it is."""
    if not isinstance(op, scf.IfOp) or op.results or op.false_region.blocks:
        return False
    return all(isinstance(o, memref.StoreOp | scf.YieldOp) for o in op.true_region.block.ops)


def _has_control_flow(op: Operation) -> bool:
    """An op with regions other than an error report."""
    return bool(op.regions) and not _is_flag_report(op)


def _is_select(op: Operation) -> bool:
    """`scf.if %c -> (f32) { %a = memref.load ... } else { %b = memref.load ... }`: a value
    read from one of two places (a concat's element), straight-line loads and arithmetic in
    both branches, or selects again (a concat of more than two: EdgeNeXt's four channel
    chunks). A row loop may hold it: each thread takes its branch per element."""
    if not isinstance(op, scf.IfOp) or not op.results or not op.false_region.blocks:
        return False
    return all(
        isinstance(o, memref.LoadOp | scf.YieldOp)
        or o.dialect_name() in ("arith", "math")
        or _is_select(o)
        for region in op.regions
        for o in region.block.ops
    )


def _memref_type(access: memref.LoadOp | memref.StoreOp) -> MemRefType[Attribute]:
    t = access.memref.type
    assert isinstance(t, MemRefType)
    return t


def _index_type_for(kernel: func.FuncOp, extra: int = 0) -> IntegerType:
    """i32 where every buffer and the mapped index space (with headroom `extra`) fit, else i64
    (a buffer of a dynamic size: i64)."""
    largest = extra
    for t in kernel.function_type.inputs:
        if isinstance(t, MemRefType):
            if any(d < 0 for d in t.get_shape()):
                return i64
            largest = max(largest, numel(t.get_shape()))
    return i32 if largest <= INT32_LIMIT else i64


Extent = int | SSAValue
"""A parallel or row loop's trip count: a constant, or (a kernel with symbolic sizes) an
`index` value the kernel computes from its size arguments before its loop."""


def _extent(e: _Emit, extent: Extent) -> SSAValue:
    """`extent` in the mapping's integer type."""
    if isinstance(extent, int):
        return e.const(extent)
    return e.op(arith.IndexCastOp(extent, e.int_type))


def _delinearize(e: _Emit, flat: SSAValue, shape: Sequence[Extent]) -> list[SSAValue]:
    """Row-major indices (as `index`) of a flat position in `shape` (runtime extents are
    divided by at run time)."""
    ivs: list[SSAValue] = []
    rest = flat
    for axis in reversed(range(len(shape))):
        extent = shape[axis]
        if extent == 1:
            ivs.append(e.to_index(e.const(0)))
            continue
        if axis == 0:
            ivs.append(e.to_index(rest))
            break
        if isinstance(extent, int):
            ivs.append(e.to_index(e.rem(rest, e.const(extent))))
            rest = e.div(rest, e.const(extent))
        else:
            size = _extent(e, extent)
            ivs.append(e.to_index(e.rem(rest, size)))
            rest = e.div(rest, size)
    return ivs[::-1]


# ---------------------------------------------------------------------------------------------
# Reductions: the combiner of an `iter_args` accumulator and the cross-thread combination
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Reduction:
    """An accumulator of a loop: `acc' = combiner(acc, x)`."""

    combiner: type[Operation]
    type: Attribute

    def combine(self, e: _Emit, a: SSAValue, b: SSAValue) -> SSAValue:
        # combiner is a binary arith op class, built from (lhs, rhs) unlike Operation itself.
        return e.op(self.combiner(a, b))  # type: ignore[call-arg, arg-type]

    def identity(self, e: _Emit) -> SSAValue:
        value = reduction_identity(self.combiner, self.type)
        if isinstance(self.type, AnyFloat):
            return e.float_const(float(value), self.type)
        return e.const(int(value), self.type)


def _loop_reductions(loop: scf.ForOp) -> list[_Reduction] | None:
    """The combiner of each accumulator, or None when one is not `combiner(acc, x)` read by
    nothing else (a scan's running value, stored at every step, is no reduction)."""
    body = loop.body.block
    yielded = body.last_op
    assert isinstance(yielded, scf.YieldOp)
    reductions: list[_Reduction] = []
    for acc, value in zip(body.args[1:], yielded.operands, strict=True):
        producer = value.owner
        if (
            not isinstance(producer, Operation)
            or type(producer) not in REDUCTION_IDENTITIES
            or acc not in producer.operands
            or len(list(acc.uses)) != 1
            or len(list(value.uses)) != 1  # a scan also stores each partial
            or acc.type not in SHUFFLED_TYPES
        ):
            return None
        reductions.append(_Reduction(type(producer), acc.type))
    return reductions


def _shuffle_xor(e: _Emit, value: SSAValue, offset: int) -> SSAValue:
    """`value` of the lane whose id differs from this one's in bit `offset`; 64-bit values
    travel as two 32-bit halves (the shuffle moves 32 bits)."""
    if value.type in (f32, i32):
        return _shuffle_xor_32(e, value, offset)
    bits = value if value.type == i64 else e.op(arith.BitcastOp(value, i64))
    low = e.op(arith.TruncIOp(bits, i32))
    high = e.op(arith.TruncIOp(e.op(arith.ShRUIOp(bits, e.const(32, i64))), i32))
    low, high = _shuffle_xor_32(e, low, offset), _shuffle_xor_32(e, high, offset)
    high_bits = e.op(arith.ShLIOp(e.op(arith.ExtUIOp(high, i64)), e.const(32, i64)))
    joined = e.op(arith.OrIOp(high_bits, e.op(arith.ExtUIOp(low, i64))))
    return joined if value.type == i64 else e.op(arith.BitcastOp(joined, value.type))


def _shuffle_xor_32(e: _Emit, value: SSAValue, offset: int) -> SSAValue:
    kind = "f32" if value.type == f32 else "i32"
    args = [e.const(-1, i32), value, e.const(offset, i32), e.const(WARP - 1, i32)]
    return e.op(llvm.CallIntrinsicOp(f"llvm.nvvm.shfl.sync.bfly.{kind}", args, [value.type]))


@dataclass
class _SharedScratch:
    """Per-warp partial results in shared memory, one `[32 x T]` array per reduction."""

    module: ModuleOp
    kernel: str
    count: int = 0

    def new_array(self, element: Attribute) -> str:
        name = f"__xfuse_smem_{self.kernel}_{self.count}"
        self.count += 1
        array = llvm.LLVMArrayType(IntAttr(WARP), element)
        self.module.body.block.add_op(
            llvm.GlobalOp(array, name, "internal", addr_space=3, alignment=4)
        )
        return name


def _barrier(e: _Emit) -> None:
    e.builder.insert(llvm.CallIntrinsicOp("llvm.nvvm.barrier0", [], []))


def _shared_slot(e: _Emit, name: str, element: Attribute, slot: SSAValue) -> SSAValue:
    """`&name[slot]` in shared memory. Integer arithmetic, not a GEP: xDSL's translation of
    GEPs casts through the generic address space, which shared pointers cannot take."""
    shared = llvm.LLVMPointerType(IntAttr(3))
    base = e.op(llvm.PtrToIntOp(e.op(llvm.AddressOfOp(name, shared)), i64))
    offset = e.op(arith.MuliOp(e.op(arith.ExtUIOp(slot, i64)), e.const(byte_width(element), i64)))
    address = e.op(arith.AddiOp(base, offset))
    return e.op(llvm.IntToPtrOp.create(operands=[address], result_types=[shared]))


@dataclass
class _RowThreads:
    """Where a thread sits in the `rows` mapping (i32 values)."""

    threads: int
    lane: SSAValue
    warp: SSAValue
    warp_lane: SSAValue


def _reduce_across_threads(
    e: _Emit, value: SSAValue, reduction: _Reduction, row: _RowThreads, scratch: _SharedScratch
) -> SSAValue:
    """Combine `value` over the row's threads; every thread of the row gets the result."""
    offset = min(row.threads, WARP) // 2
    while offset >= 1:
        value = reduction.combine(e, value, _shuffle_xor(e, value, offset))
        offset //= 2
    if row.threads <= WARP:
        return value
    name = scratch.new_array(reduction.type)
    is_first = e.eq(row.warp_lane, e.const(0, i32))
    then = Block()
    in_then = _Emit(Builder(InsertPoint.at_end(then)), e.int_type)
    in_then.builder.insert(
        llvm.StoreOp(value, _shared_slot(in_then, name, reduction.type, row.warp))
    )
    then.add_op(scf.YieldOp())
    e.builder.insert(scf.IfOp(is_first, [], [then]))
    _barrier(e)
    partials = [
        e.op(llvm.LoadOp(_shared_slot(e, name, reduction.type, e.const(w, i32)), reduction.type))
        for w in range(row.threads // WARP)
    ]
    return _tree_combine(e, reduction, partials)


# ---------------------------------------------------------------------------------------------
# Cloning a body with guards and shared loads
# ---------------------------------------------------------------------------------------------


@dataclass
class _Cloner:
    """Clones ops of the parallel body; stores run under `store_guard`, loads of read-only
    buffers with the same (mapped) indices are shared (the row stays in registers)."""

    e: _Emit
    mapper: dict[SSAValue, SSAValue]
    read_only: set[SSAValue]
    loads: dict[tuple[SSAValue, ...], SSAValue] = field(default_factory=dict)
    marks: dict[Operation, dict[str, Attribute]] = field(default_factory=dict)
    """Attributes for the clones of some ops (vector lanes)."""
    indices: dict[Operation, list[SSAValue]] = field(default_factory=dict)
    """The indices of the clones of some accesses, in place of their mapped ones (a flat lane's
    access at the iteration's own element: `_flat_lane_indices`)."""
    row_positions: dict[int, tuple[list[SSAValue], SSAValue | None]] = field(default_factory=dict)
    """k -> (columns of this thread's k-th chunk, whether it is inside the row): shared by
    all loops of a row so that their loads of one element are one load."""

    def clone(self, op: Operation, store_guard: SSAValue | None) -> None:
        if isinstance(op, memref.LoadOp) and op.memref in self.read_only:
            indices = self.indices_of(op)
            key = (op.memref, *indices)
            if key in self.loads:
                self.mapper[op.res] = self.loads[key]
                return
            load = self.e.builder.insert(self._clone(op))
            self.loads[key] = load.results[0]
            return
        if isinstance(op, memref.StoreOp) and store_guard is not None:
            then = Block()
            then.add_ops([self._clone(op), scf.YieldOp()])
            self.e.builder.insert(scf.IfOp(store_guard, [], [then]))
            return
        self.e.builder.insert(self._clone(op))

    def indices_of(self, op: memref.LoadOp | memref.StoreOp) -> list[SSAValue]:
        """The indices of `op`'s clone: its overriding ones, else its own mapped."""
        return self.indices.get(op) or [self.mapper.get(i, i) for i in op.indices]

    def _clone(self, op: Operation) -> Operation:
        """`op` cloned through the mapper, with its marks and its overriding indices."""
        new = op.clone(self.mapper)
        new.attributes.update(self.marks.get(op, {}))
        if op in self.indices:
            assert isinstance(new, memref.LoadOp | memref.StoreOp)
            kept = len(new.operands) - len(new.indices)
            new.operands = [*new.operands[:kept], *self.indices[op]]
        return new


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------


def _body_ops(block: Block) -> list[Operation]:
    return [op for op in block.ops if not isinstance(op, scf.ReduceOp | scf.YieldOp)]


def _vector_lanes(accesses: Sequence[memref.LoadOp | memref.StoreOp]) -> int:
    """Elements of 128 bits of the widest element `accesses` touch."""
    return max(1, VECTOR_BYTES // max(byte_width(_memref_type(a).element_type) for a in accesses))


def _reads_what_it_writes(accesses: Sequence[memref.LoadOp | memref.StoreOp]) -> bool:
    """Whether `accesses` load from a buffer they store to (lanes could then depend on each
    other through memory)."""
    loaded = {a.memref for a in accesses if isinstance(a, memref.LoadOp)}
    return bool(loaded & _stored_memrefs(accesses))


def _depends_on(value: SSAValue, iv: SSAValue) -> bool:
    """Whether `value` is computed from `iv` (through ops of the body that define it)."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if v is iv:
            return True
        owner = v.owner
        if id(v) in seen or not isinstance(owner, Operation):
            continue
        seen.add(id(v))
        stack.extend(owner.operands)
    return False


def _varying_accesses(
    accesses: Sequence[memref.LoadOp | memref.StoreOp], innermost: SSAValue
) -> list[memref.LoadOp | memref.StoreOp]:
    """The accesses whose element changes from lane to lane: those indexed by `innermost`.
    One the lanes share (a row's target id or statistic next to the row's bf16 elements) is
    read once for all lanes and takes no part in the vector width."""
    varying = [a for a in accesses if any(_depends_on(i, innermost) for i in a.indices)]
    return varying or list(accesses)


def _vector_width(body: list[Operation], shape: Sequence[int], innermost: SSAValue) -> int:
    """Elements per thread and step: 128 bits of the widest element the lanes' own accesses
    touch (`_varying_accesses`)."""
    accesses = _accesses(body)
    if not accesses or not shape:
        return 1
    if _reads_what_it_writes(accesses):
        return 1  # lanes could depend on each other through memory
    width = _vector_lanes(_varying_accesses(accesses, innermost))
    while width > 1 and shape[-1] % width:
        width //= 2
    return width


def _own_element_accesses(
    body: list[Operation], ivs: Sequence[SSAValue], shape: Sequence[int]
) -> list[memref.LoadOp | memref.StoreOp]:
    """Accesses of a row-major buffer of the loop's shape at the iteration's own element."""
    return [
        a
        for a in _accesses(body)
        if list(a.indices) == list(ivs)
        and tuple(_memref_type(a).get_shape()) == tuple(shape)
        and isinstance(_memref_type(a).layout, NoneAttr)
    ]


def _flat_width(body: list[Operation], ivs: Sequence[SSAValue], shape: Sequence[int]) -> int:
    """Elements per thread and step for `flat` lanes, where the innermost dim takes no vector
    (`_vector_width` is 1: logits of 50,257 bf16 a row): 128 bits of the widest element of
    the accesses at the iteration's own element (the vectors; the others are a lane's own
    scalar reads) where the loop's element count is a multiple of them, the body has no loop and stores
    only at the iteration's own element (the lanes of a chunk are consecutive elements of
    the flattened loop, so those stores are one vector access), else 1."""
    accesses = _accesses(body)
    own = _own_element_accesses(body, ivs, shape)
    stores = [a for a in accesses if isinstance(a, memref.StoreOp)]
    if not stores or any(s not in own for s in stores) or len(shape) < 2 or min(shape) < 1:
        return 1
    if any(isinstance(op, scf.ForOp) for op in body):
        return 1
    if _reads_what_it_writes(accesses):
        return 1
    width = _vector_lanes(own)
    return width if numel(shape) % width == 0 else 1


def _flat_lane_indices(base: list[SSAValue], e: _Emit, lane: int) -> list[SSAValue]:
    """Lane `lane`'s indices into a row-major buffer of the loop's shape, as `&m[..., j +
    lane]` of the chunk's first element: the same address as its own element's (which may
    lie in the next row), and one LLVM sees is adjacent to the first lane's."""
    if lane == 0:
        return base
    return [*base[:-1], e.op(arith.AddiOp(base[-1], e.const(lane, IndexType())))]


def _aligned_accesses(
    body: list[Operation], innermost: SSAValue, width: int
) -> dict[Operation, int]:
    """Accesses whose first lane may assume `width` elements of alignment."""
    aligned: dict[Operation, int] = {}
    for access in _accesses(body):
        t = _memref_type(access)
        indices = list(access.indices)
        if indices and indices[-1] == innermost and t.get_shape()[-1] % width == 0:
            aligned[access] = width * byte_width(t.element_type)
    return aligned


def _stored_memrefs(ops: Sequence[Operation]) -> set[SSAValue]:
    return {a.memref for a in _accesses(ops) if isinstance(a, memref.StoreOp)}


def _map_grid_stride(
    kernel: func.FuncOp,
    par: scf.ParallelOp,
    shape: list[int],
    width: int,
    block: int,
    unroll: int = 1,
    flat: bool = False,
) -> None:
    """`elementwise` (width > 1 when vectorizable) and `serial` (width 1).

    With `flat`, a chunk's `width` lanes are consecutive elements of the flattened loop (each
    lane's indices its own), and the accesses at the iteration's own element take the first
    lane's indices plus the lane (`_flat_lane_indices`), so that they are vector accesses
    whatever the innermost dim's length.

    With `unroll` > 1 a thread handles `unroll` chunks of `width` elements per step, `nthreads`
    chunks apart (coalesced), all chunks' loads first so that more bytes are in flight; chunks
    past the end load the last chunk again (clamped) and skip their stores."""
    body = _body_ops(par.body.block)
    ivs = list(par.body.block.args)
    elements = numel(shape)
    items = elements // width
    int_type = _index_type_for(kernel, 2 * items + unroll * MAX_BLOCK)
    e = _Emit(Builder(InsertPoint.before(par)), int_type)
    gtid = e.add(e.mul(e.sreg("ctaid.x"), e.sreg("ntid.x")), e.sreg("tid.x"))
    nthreads = e.mul(e.sreg("nctaid.x"), e.sreg("ntid.x"))
    step = nthreads if unroll == 1 else e.mul(nthreads, e.const(unroll))
    loop_body = Block(arg_types=[int_type])
    e.builder.insert(scf.ForOp(gtid, e.const(items), step, [], loop_body))
    inner = _Emit(Builder(InsertPoint.at_end(loop_body)), int_type)
    own = _own_element_accesses(body, ivs, shape) if flat else []
    aligned: dict[Operation, int] = (
        {a: width * byte_width(_memref_type(a).element_type) for a in own}  # chunks start at
        if flat  # a multiple of `width` elements of a row-major buffer of the loop's shape
        else _aligned_accesses(body, ivs[-1], width)
        if width > 1
        else {}
    )
    read_only = {a.memref for a in _accesses(body)} - _stored_memrefs(body)
    # Lanes are cloned op by op (all lanes' loads first, their stores last) so that a lane's
    # accesses share a basic block with the others' even where math adds branches.
    chunks: list[tuple[list[_Cloner], SSAValue | None]] = []
    position: SSAValue = loop_body.args[0]
    for chunk in range(unroll):
        guard: SSAValue | None = None
        if chunk > 0:
            position = inner.add(position, nthreads)
            guard = inner.lt(position, inner.const(items))
            clamped = inner.min(position, inner.const(items - 1))
        else:
            clamped = position
        first = inner.mul(clamped, inner.const(width)) if width > 1 else clamped
        base = _delinearize(inner, first, shape)
        cloners: list[_Cloner] = []
        for lane in range(width):
            naive = _flat_lane_indices(base, inner, lane)
            lane_ivs = (
                _delinearize(inner, inner.add(first, inner.const(lane)), shape)
                if flat and lane > 0
                else naive
            )
            cloner = _Cloner(inner, dict(zip(ivs, lane_ivs, strict=True)), read_only)
            cloner.indices = {a: naive for a in own}
            cloner.marks = {
                op: {ALIGN_ATTR: IntegerAttr(align, i64)}
                if lane == 0
                else {LANE_ATTR: IntegerAttr(lane, i64)}
                for op, align in aligned.items()
            }
            cloners.append(cloner)
        chunks.append((cloners, guard))
    stores = [op for op in body if isinstance(op, memref.StoreOp)]
    for op in body:
        if op in stores and unroll > 1:
            continue
        for cloners, _ in chunks:
            for cloner in cloners:
                cloner.clone(op, None)
    if unroll > 1:
        # One guard per chunk around all its lanes' stores: they stay in one basic block, so
        # the load/store vectorizer still merges them.
        for cloners, guard in chunks:
            if guard is None:
                for op in stores:
                    for cloner in cloners:
                        cloner.clone(op, None)
                continue
            then = Block()
            in_then = _Emit(Builder(InsertPoint.at_end(then)), int_type)
            for op in stores:
                for cloner in cloners:
                    cloner.e = in_then
                    cloner.clone(op, None)
            then.add_op(scf.YieldOp())
            inner.builder.insert(scf.IfOp(guard, [], [then]))
    loop_body.add_op(scf.YieldOp())
    par.detach()
    par.erase()
    strategy = (
        "elementwise" if width > 1 or not any(isinstance(o, scf.ForOp) for o in body) else "serial"
    )
    # `items` for the launch: thread-steps, so that the grid is not larger than the work.
    _set_launch(kernel, strategy, block, math.ceil(items / unroll))


RUNTIME_ITEMS = -1
"""`xfuse.gpu.items` of a kernel whose work depends on its size arguments: the launch computes
it per call (`xfuse.gpu.items_sizes`)."""


def _product(e: _Emit, shape: Sequence[Extent]) -> SSAValue:
    """The product of `shape`'s extents (runtime ones multiplied at run time)."""
    static = math.prod(d for d in shape if isinstance(d, int))
    total = e.const(static)
    for d in shape:
        if isinstance(d, SSAValue):
            total = e.mul(total, _extent(e, d))
    return total


def _set_launch(kernel: func.FuncOp, strategy: str, block: int, items: int) -> None:
    kernel.attributes[STRATEGY_ATTR] = StringAttr(strategy)
    kernel.attributes[BLOCK_ATTR] = IntegerAttr(block, i64)
    kernel.attributes[ITEMS_ATTR] = IntegerAttr(items, i64)


@dataclass(frozen=True)
class _RowPlan:
    """A row-reduction body: its loops, their common trip count (a runtime size's value in a
    kernel with symbolic sizes), their reductions."""

    length: Extent
    loops: dict[scf.ForOp, list[_Reduction]]


_ROW_LOOP_OPS = (arith.ConstantOp, memref.LoadOp, memref.StoreOp, scf.YieldOp)


def _loop_length(loop: scf.ForOp, symbolic: bool) -> Extent | None:
    """The trip count of a loop from 0: a constant, or with `symbolic` a value defined
    outside the parallel body (a runtime size)."""
    length = int_constant(loop.ub)
    if length is not None:
        return length
    return loop.ub if symbolic else None


def _row_plan(
    body: list[Operation], columns: bool = False, symbolic: bool = False
) -> _RowPlan | None:
    """How the row loops of a parallel body map to threads, or None where they are no row
    loops (`_is_row_loop_body`; with `columns`, loops that walk a column are taken too; with
    `symbolic`, loops may run to a runtime size)."""
    loops = [op for op in body if isinstance(op, scf.ForOp)]
    if not loops:
        return None
    lengths = {_loop_length(loop, symbolic) for loop in loops}
    if len(lengths) != 1 or None in lengths:
        return None
    length = lengths.pop()
    assert length is not None
    plan: dict[scf.ForOp, list[_Reduction]] = {}
    for loop in loops:
        if int_constant(loop.lb) != 0 or int_constant(loop.step) != 1:
            return None
        if not _is_row_loop_body(loop, columns):
            return None
        reductions = _loop_reductions(loop)
        if reductions is None:
            return None
        plan[loop] = reductions
    for op in body:
        if not isinstance(op, scf.ForOp) and _has_control_flow(op):
            return None
    accessed = {a.memref for a in _accesses(body) if isinstance(a, memref.LoadOp)}
    if accessed & _stored_memrefs(body):
        return None
    return _RowPlan(length, plan)


# A reduction over several dims (an NCHW image's spatial mean: `mean(x, (2, 3))`) is a nest of
# `scf.for` loops; the `rows` mapping needs one loop per pass over the row, so a perfect nest
# becomes one loop over the product of its lengths (MLIR's loop coalescing).


def _nest_inner(loop: scf.ForOp) -> scf.ForOp | None:
    """The loop directly inside `loop` when the two coalesce: both from 0 by 1 to a constant;
    the outer's body is loads and arithmetic of the outer index, then the inner loop, whose
    accumulators either start from the outer's (which yields the inner's results) or start
    from the combiner's identity (the outer combines each inner result into its own, with the
    inner's combiner: the reassociation of a sum that lower-to-loops marks `reassoc`)."""
    ops = _body_ops(loop.body.block)
    loops = [i for i, op in enumerate(ops) if isinstance(op, scf.ForOp)]
    if len(loops) != 1:
        return None
    inner = ops[loops[0]]
    assert isinstance(inner, scf.ForOp)
    starts_steps = [int_constant(v) for v in (loop.lb, loop.step, inner.lb, inner.step)]
    if starts_steps != [0, 1, 0, 1] or None in (int_constant(loop.ub), int_constant(inner.ub)):
        return None
    for op in ops[: loops[0]]:
        if op.regions or not (
            isinstance(op, memref.LoadOp) or op.dialect_name() in ("arith", "math")
        ):
            return None
    combines = ops[loops[0] + 1 :]
    accs = list(loop.body.block.args[1:])
    yielded = loop.body.block.last_op
    assert isinstance(yielded, scf.YieldOp)
    if len(inner.iter_args) != len(accs) or any(len(list(a.uses)) != 1 for a in accs):
        return None
    inner_yield = inner.body.block.last_op
    assert isinstance(inner_yield, scf.YieldOp)
    used = 0
    for acc, init, result, value, step in zip(
        accs, inner.iter_args, inner.res, yielded.operands, inner_yield.operands, strict=True
    ):
        if init is acc and value is result:
            continue
        combine = value.owner
        if (
            combine not in combines
            or not isinstance(combine, Operation)
            or set(combine.operands) != {acc, result}
            or type(step.owner) is not type(combine)
            or not _is_identity(init, type(combine))
        ):
            return None
        used += 1
    return inner if used == len(combines) else None


def _is_identity(value: SSAValue, combiner: type[Operation]) -> bool:
    op = value.owner
    if combiner not in REDUCTION_IDENTITIES or not isinstance(op, arith.ConstantOp):
        return False
    attr = op.value
    if not isinstance(attr, IntegerAttr | FloatAttr):
        return False
    return attr.value.data == reduction_identity(combiner, value.type)


def _coalesce_nest(loop: scf.ForOp) -> scf.ForOp | None:
    """One loop for the perfect nest `loop` (None where it is no nest): `k` from 0 to A * B,
    the outer index `k / B` and the inner `k % B`, the outer's leading ops computed at each
    step (they are loads and index arithmetic)."""
    inner = _nest_inner(loop)
    if inner is None:
        return None
    if (flat_inner := _coalesce_nest(inner)) is not None:
        inner = flat_inner
    outer_len, inner_len = int_constant(loop.ub), int_constant(inner.ub)
    assert outer_len is not None and inner_len is not None
    body = Block(arg_types=[IndexType(), *(a.type for a in loop.iter_args)])
    e = _Emit(Builder(InsertPoint.at_end(body)), i32)
    k = body.args[0]
    b = e.const(inner_len, IndexType())
    mapper: dict[SSAValue, SSAValue] = {
        loop.body.block.args[0]: e.op(arith.DivUIOp(k, b)),
        inner.body.block.args[0]: e.op(arith.RemUIOp(k, b)),
    }
    mapper.update(zip(inner.body.block.args[1:], body.args[1:], strict=True))
    ops = _body_ops(loop.body.block)
    leading = ops[: next(i for i, op in enumerate(ops) if isinstance(op, scf.ForOp))]
    for op in [*leading, *_body_ops(inner.body.block)]:
        body.add_op(op.clone(mapper))
    yielded = inner.body.block.last_op
    assert isinstance(yielded, scf.YieldOp)
    body.add_op(scf.YieldOp(*(mapper.get(v, v) for v in yielded.operands)))
    length = arith.ConstantOp(IntegerAttr(outer_len * inner_len, IndexType()))
    flat = scf.ForOp(loop.lb, length.result, loop.step, list(loop.iter_args), body)
    if flat_inner is not None:  # a copy made for this one, now cloned into it
        flat_inner.erase(safe_erase=False)
    return flat


def _coalesced(par: scf.ParallelOp) -> scf.ParallelOp | None:
    """A copy of `par` whose loop nests are single loops, or None where it has none."""
    if not any(
        isinstance(op, scf.ForOp) and _nest_inner(op) is not None
        for op in _body_ops(par.body.block)
    ):
        return None
    copy = par.clone()
    for op in _body_ops(copy.body.block):
        if isinstance(op, scf.ForOp) and (flat := _coalesce_nest(op)) is not None:
            length = flat.ub.owner
            assert isinstance(length, Operation)
            copy.body.block.insert_ops_before([length, flat], op)
            for old, new in zip(op.results, flat.results, strict=True):
                old.replace_all_uses_with(new)
            op.detach()
            op.erase()
    return copy


def _transposes_cached_rows(body: list[Operation], mapping: GPUMapping) -> bool:
    """Whether the body's row loops read a column of memory but write a row (a layer norm
    over an NCHW image's channels written channels-last: Swin's and ConvNeXt's patch
    embeddings), on rows of at least a warp's elements (Swin-T's 96 channels measured; a
    shorter row keeps a thread) that a warp keeps in registers. A thread per row would read
    coalesced, once per loop, and write each row's elements a row apart; the row's threads
    (`_row_threads`: a warp, or part of one, each thread at most `max-cached` elements) read
    it once and write it along the row."""
    loops = [op for op in body if isinstance(op, scf.ForOp)]
    lengths = {int_constant(loop.ub) for loop in loops}
    if len(lengths) != 1 or None in lengths:
        return False
    length = lengths.pop()
    assert length is not None
    if not WARP <= length <= WARP * mapping.max_cached:
        return False
    return any(
        isinstance(access, memref.StoreOp) and list(access.indices)[-1] == loop.body.block.args[0]
        for loop in loops
        for access in _accesses([loop])
    )


def _walks_rows(par: scf.ParallelOp) -> bool:
    """Whether each loop of `par`'s body, or the innermost loop of each nest, walks a row of
    memory (`_is_row_loop_body` without columns)."""
    for op in _body_ops(par.body.block):
        if isinstance(op, scf.ForOp):
            while (inner := _nest_inner(op)) is not None:
                op = inner
            if not _is_row_loop_body(op):
                return False
    return True


def _replace(par: scf.ParallelOp, new: scf.ParallelOp) -> scf.ParallelOp:
    block = par.parent_block()
    assert block is not None
    block.insert_op_before(new, par)
    par.detach()
    par.erase()
    return new


def _is_row_loop_body(loop: scf.ForOp, columns: bool = False) -> bool:
    """Straight-line arith/math/memref code (and `_is_select`'s reads) that walks a row: the loop index is the innermost
    index of some load or store, and no outer index of one (a column walk, which one thread
    per column reads coalesced) unless `columns`; it may also reach other indices through
    index arithmetic (a reshape or a permute inside the row: `_indexes_directly` tells whether
    it does)."""
    for op in loop.body.block.ops:
        if (_has_control_flow(op) and not _is_select(op)) or not (
            isinstance(op, (*_ROW_LOOP_OPS, scf.IfOp)) or op.dialect_name() in ("arith", "math")
        ):
            return False
    iv = loop.body.block.args[0]
    innermost = columns
    for use in iv.uses:
        user = use.operation
        if isinstance(user, memref.LoadOp | memref.StoreOp):
            if iv in list(user.indices)[:-1] and not columns:
                return False
            innermost = True
        elif user.dialect_name() != "arith":
            return False
    return innermost


def _indexes_directly(loop: scf.ForOp) -> bool:
    """Whether the loop index is used only as the innermost index of loads and stores, so
    that a chunk of consecutive indices is a vector access of consecutive elements."""
    iv = loop.body.block.args[0]
    for use in iv.uses:
        user = use.operation
        if not isinstance(user, memref.LoadOp | memref.StoreOp):
            return False
        if iv in list(user.indices)[:-1]:
            return False
    return True


def _row_threads(length: int, width: int, mapping: GPUMapping, rows: int | None = None) -> int:
    """Threads per row. A short row (one a warp holds in registers) takes the power of two of
    threads, up to a warp, that gives each about `mapping.short_row_chunks` chunks of `width`
    elements, and no more than `mapping.max_cached` elements: rows of 96 bf16 (ConvNeXt's
    channels) then leave few lanes idle, each thread has several loads in flight, and the row
    stays in registers. Where that leaves the kernel fewer than `mapping.min_threads` threads
    (few `rows`, a runtime count at its size hints, or an unknown count: `rows` None),
    threads are added, up to one per chunk: a small kernel is bound by latency. A long row
    takes enough threads that each holds about `mapping.row_elements` elements
    (`mapping.row_threads`, a power of two of at least 64, overrides that)."""
    if length <= WARP * mapping.max_cached and length <= MAX_BLOCK * width:
        chunks = math.ceil(length / width)
        covering = min(WARP, _power_of_two_above(chunks))
        each = max(1, min(mapping.short_row_chunks, mapping.max_cached // width))
        threads = min(covering, _power_of_two_above(math.ceil(chunks / each)))
        while threads < covering and (rows is None or rows * threads < mapping.min_threads):
            threads *= 2
        return threads
    if mapping.row_threads:
        return mapping.row_threads
    threads = _power_of_two_above(math.ceil(length / mapping.row_elements))
    return max(2 * WARP, min(MAX_BLOCK, threads))


def _power_of_two_above(n: int) -> int:
    """The least power of two of at least `n` (1 for n <= 1)."""
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def _indexes_linearly(loop: scf.ForOp) -> bool:
    """Whether the loop index reaches nothing but the indices of the loads and stores of the
    loop's own body, through index additions, subtractions, products and casts (a buffer of
    runtime sizes read at a linear offset, `row * n + j`)."""
    top = set(loop.body.block.ops)
    stack: list[SSAValue] = [loop.body.block.args[0]]
    while stack:
        for use in stack.pop().uses:
            user = use.operation
            if user not in top:
                return False
            if isinstance(user, memref.LoadOp | memref.StoreOp):
                if isinstance(user, memref.StoreOp) and use.index == 0:
                    return False  # a stored value of the index
                continue
            if not isinstance(user, _OFFSET_OPS):
                return False
            stack.extend(user.results)
    return True


def _aligned_lanes(loop: scf.ForOp, width: int) -> bool:
    """Whether every access of `loop` whose indices move with its index has `width` adjacent
    lanes whose first is `width`-element aligned (`_lane_accesses`)."""
    iv = loop.body.block.args[0]
    ops = _body_ops(loop.body.block)
    lanes = _lane_accesses(ops, iv, width)
    return all(
        lanes.get(access, False)
        for access in _accesses(ops)
        if any(_depends_on(i, iv) for i in access.indices)
    )


def _row_width(loops: Sequence[scf.ForOp], length: int, linear: bool = False) -> int:
    """Elements per vector access of the row loops: 128 bits of the widest element they touch,
    where every access indexed by the loop index has a multiple of that many columns. With
    `linear` (a kernel of runtime sizes, whose buffers are read at linear offsets), a loop
    whose index reaches its accesses through offset arithmetic (`_indexes_linearly`) takes
    them where each such access is at an aligned offset plus the index (`_aligned_lanes`)."""
    accesses = _accesses(loops)
    direct = [_indexes_directly(loop) for loop in loops]
    if not accesses or not all(
        d or (linear and _indexes_linearly(loop)) for d, loop in zip(direct, loops, strict=True)
    ):
        return 1
    width = _vector_lanes(accesses)
    while width > 1:
        ok = length % width == 0
        for loop, indexed_directly in zip(loops, direct, strict=True):
            if not indexed_directly:
                ok = ok and _aligned_lanes(loop, width)
                continue
            iv = loop.body.block.args[0]
            for access in _accesses([loop]):
                if list(access.indices)[-1] == iv and _memref_type(access).get_shape()[-1] % width:
                    ok = False
        if ok:
            return width
        width //= 2
    return 1


def _map_rows(
    kernel: func.FuncOp,
    scratch: _SharedScratch,
    par: scf.ParallelOp,
    shape: Sequence[Extent],
    plan: _RowPlan,
    mapping: GPUMapping,
    length_hint: int = 0,
    rows_hint: int | None = None,
) -> int:
    """Map the rows (runtime extents and row lengths too: `length_hint` and `rows_hint`, the
    row length and count the threads per row are chosen for, are then their sizes at the
    hints); returns rows per block."""
    max_cached = mapping.max_cached
    loops = [op for op in _body_ops(par.body.block) if isinstance(op, scf.ForOp)]
    kept = kept_divisors(kernel)
    for loop in loops:  # one division per row (an IEEE division is a dozen instructions)
        divide_by_reciprocal(loop, kept)
    body = _body_ops(par.body.block)
    ivs = list(par.body.block.args)
    static = [d for d in shape if isinstance(d, int)]
    rows = numel(static) if len(static) == len(shape) else None
    if isinstance(plan.length, int):
        width = _row_width(loops, plan.length, linear=SIZE_ARGS_ATTR in kernel.attributes)
        counted = rows if rows is not None else rows_hint
        threads = _row_threads(plan.length, width, mapping, counted)
        if math.ceil(plan.length / (threads * width)) * width > max_cached:
            width = 1  # re-read: the strided loop takes one element at a time
            threads = _row_threads(plan.length, 1, mapping, counted)
        per_thread = math.ceil(plan.length / (threads * width)) * width
    else:  # a runtime length: one element at a time, strided, for any length
        width = 1
        threads = _row_threads(max(1, length_hint), 1, mapping)
        per_thread = max_cached + 1
    rows_per_block = max(1, mapping.rows_block // threads) if threads <= WARP else 1
    int_type = _index_type_for(kernel, rows + MAX_BLOCK) if rows is not None else i64
    e = _Emit(Builder(InsertPoint.before(par)), int_type)
    runtime_rows = None if rows is not None else _product(e, shape)
    tid32 = e.sreg32("tid.x")
    tid = e.widen(tid32)
    row = e.add(e.mul(e.sreg("ctaid.x"), e.const(rows_per_block)), e.div(tid, e.const(threads)))
    if runtime_rows is None:
        assert rows is not None
        row_ok = e.lt(row, e.const(rows))
        row_ivs = _delinearize(e, e.min(row, e.const(rows - 1)), shape)
    else:
        row_ok = e.lt(row, runtime_rows)
        last = e.op(arith.SubiOp(runtime_rows, e.const(1)))
        row_ivs = _delinearize(e, e.min(row, last), shape)
    lane = e.op(arith.RemUIOp(tid32, e.const(threads, i32)))
    place = _RowThreads(
        threads,
        lane,
        e.op(arith.DivUIOp(tid32, e.const(WARP, i32))),
        e.op(arith.RemUIOp(tid32, e.const(WARP, i32))),
    )
    read_only = {a.memref for a in _accesses(body)} - _stored_memrefs(body)
    cloner = _Cloner(e, dict(zip(ivs, row_ivs, strict=True)), read_only)
    lane_index = e.to_index(lane)
    first_lane = e.and_(row_ok, e.eq(lane, e.const(0, i32)))
    for op in body:
        if isinstance(op, scf.ForOp):
            _map_row_loop(
                e,
                cloner,
                op,
                plan,
                place,
                scratch,
                lane_index,
                row_ok,
                per_thread,
                max_cached,
                width,
            )
        else:
            cloner.clone(op, first_lane)
    par.detach()
    par.erase()
    blocks = math.ceil(rows / rows_per_block) if rows is not None else RUNTIME_ITEMS
    _set_launch(kernel, "rows", rows_per_block * threads, blocks)
    return rows_per_block


def _map_row_loop(
    e: _Emit,
    cloner: _Cloner,
    loop: scf.ForOp,
    plan: _RowPlan,
    place: _RowThreads,
    scratch: _SharedScratch,
    lane_index: SSAValue,
    row_ok: SSAValue,
    per_thread: int,
    max_cached: int,
    width: int = 1,
) -> None:
    reductions = plan.loops[loop]
    if per_thread <= max_cached:
        assert isinstance(plan.length, int)
        partials = _unrolled_row_loop(
            e, cloner, loop, reductions, place, lane_index, row_ok, per_thread, plan.length, width
        )
    else:
        partials = [r.identity(e) for r in reductions]
        partials = _strided_row_loop(
            e, cloner, loop, place, lane_index, row_ok, partials, plan.length
        )
    for result, init, partial, reduction in zip(
        loop.res, loop.iter_args, partials, reductions, strict=True
    ):
        total = _reduce_across_threads(e, partial, reduction, place, scratch)
        cloner.mapper[result] = reduction.combine(e, cloner.mapper.get(init, init), total)


def _row_position(
    e: _Emit,
    cloner: _Cloner,
    lane_index: SSAValue,
    k: int,
    threads: int,
    length: int,
    width: int = 1,
) -> tuple[list[SSAValue], SSAValue | None]:
    """The columns of the thread's k-th chunk of `width` elements (clamped into the row) and,
    past the row's end, whether the unclamped chunk is inside it. The first column is
    `width`-aligned and the others are `first + lane`, as the vector lane lowering expects."""
    if k not in cloner.row_positions:
        chunks = length // width
        c = e.op(arith.AddiOp(lane_index, e.const(k * threads, IndexType())))
        in_row: SSAValue | None = None
        if (k + 1) * threads > chunks:
            in_row = e.op(arith.CmpiOp(c, e.const(chunks, IndexType()), "ult"))
            c = e.op(arith.MinUIOp(c, e.const(chunks - 1, IndexType())))
        first = c if width == 1 else e.op(arith.MuliOp(c, e.const(width, IndexType())))
        columns = [first] + [
            e.op(arith.AddiOp(first, e.const(lane, IndexType()))) for lane in range(1, width)
        ]
        cloner.row_positions[k] = (columns, in_row)
    return cloner.row_positions[k]


def _tree_combine(e: _Emit, reduction: _Reduction, values: list[SSAValue]) -> SSAValue:
    """Combine values pairwise (a tree: log2(n) dependent steps, not n)."""
    while len(values) > 1:
        paired = [
            reduction.combine(e, values[i], values[i + 1]) for i in range(0, len(values) - 1, 2)
        ]
        values = paired + ([values[-1]] if len(values) % 2 else [])
    return values[0]


def _unrolled_row_loop(
    e: _Emit,
    cloner: _Cloner,
    loop: scf.ForOp,
    reductions: list[_Reduction],
    place: _RowThreads,
    lane_index: SSAValue,
    row_ok: SSAValue,
    per_thread: int,
    length: int,
    width: int = 1,
) -> list[SSAValue]:
    """The row loop unrolled over the thread's chunks; within a chunk its `width` lanes are
    cloned op by op (one vector access per chunk) with their own partial results, combined
    at the end; the chunk's stores share one guard so that they stay vectorizable."""
    body = loop.body.block
    iv = body.args[0]
    ops = _body_ops(body)
    stores = [op for op in ops if isinstance(op, memref.StoreOp)]
    # lanes at adjacent elements: a last index of `iv` plus terms without it; one read from a
    # buffer at `iv` (a gather's index) moves as that buffer's values do, so each lane reads
    # the element at its own index
    vector_accesses = [
        a for a in _accesses(ops) if list(a.indices) and _coefficient(list(a.indices)[-1], iv) == 1
    ]
    # at an offset of the loop index (`_indexes_linearly`): each lane at the first lane's plus it
    offset = {a for a in vector_accesses if list(a.indices)[-1] != iv}
    lane_partials = [[r.identity(e) for r in reductions] for _ in range(width)]
    for k in range(per_thread // width):
        columns, in_row = _row_position(e, cloner, lane_index, k, place.threads, length, width)
        guard = row_ok if in_row is None else e.and_(row_ok, in_row)
        lanes: list[_Cloner] = []
        for lane in range(width):
            mapper = dict(cloner.mapper)
            mapper[iv] = columns[lane]
            mapper.update(zip(body.args[1:], lane_partials[lane], strict=True))
            lane_cloner = _Cloner(e, mapper, cloner.read_only, cloner.loads)
            if width > 1:
                lane_cloner.marks = {
                    a: {
                        ALIGN_ATTR: IntegerAttr(
                            width * byte_width(_memref_type(a).element_type), i64
                        )
                    }
                    if lane == 0
                    else {LANE_ATTR: IntegerAttr(lane, i64)}
                    for a in vector_accesses
                }
            lanes.append(lane_cloner)
        for op in ops:
            if op in stores:
                continue
            for lane, lane_cloner in enumerate(lanes):
                _offset_lane(lanes, lane, op, offset)
                lane_cloner.clone(op, None)
        if stores:
            then = Block()
            in_then = _Emit(Builder(InsertPoint.at_end(then)), e.int_type)
            for op in stores:
                for lane, lane_cloner in enumerate(lanes):
                    lane_cloner.e = in_then
                    _offset_lane(lanes, lane, op, offset)
                    lane_cloner.clone(op, None)
                    lane_cloner.e = e
            then.add_op(scf.YieldOp())
            e.builder.insert(scf.IfOp(guard, [], [then]))
        for lane, lane_cloner in enumerate(lanes):
            yielded = [lane_cloner.mapper.get(v, v) for v in body.last_op.operands]  # type: ignore[union-attr]
            if in_row is not None:
                yielded = [
                    e.op(arith.SelectOp(in_row, new, old))
                    for new, old in zip(yielded, lane_partials[lane], strict=True)
                ]
            lane_partials[lane] = yielded
    return [
        _tree_combine(e, reduction, [partials[i] for partials in lane_partials])
        for i, reduction in enumerate(reductions)
    ]


def _offset_lane(
    lanes: list[_Cloner], lane: int, op: Operation, offset: set[memref.LoadOp | memref.StoreOp]
) -> None:
    """Lane `lane` > 0 of an `offset` access is at the first lane's last index plus the lane
    (`&m[j] + lane`, which the NVVM lowering keeps adjacent to the first lane's access)."""
    if lane and op in offset:
        assert isinstance(op, memref.LoadOp | memref.StoreOp)
        *outer, last = lanes[0].indices_of(op)
        e = lanes[lane].e
        lanes[lane].indices[op] = [*outer, e.add(last, e.const(lane, IndexType()))]


def _strided_row_loop(
    e: _Emit,
    cloner: _Cloner,
    loop: scf.ForOp,
    place: _RowThreads,
    lane_index: SSAValue,
    row_ok: SSAValue,
    partials: list[SSAValue],
    length: Extent,
) -> list[SSAValue]:
    body = loop.body.block
    new_body = Block(arg_types=[IndexType(), *(p.type for p in partials)])
    step = e.const(place.threads, IndexType())
    end = length if isinstance(length, SSAValue) else e.const(length, IndexType())
    new_loop = e.builder.insert(scf.ForOp(lane_index, end, step, partials, new_body))
    inner = _Emit(Builder(InsertPoint.at_end(new_body)), e.int_type)
    mapper = dict(cloner.mapper)
    mapper.update(zip(body.args, new_body.args, strict=True))
    inner_cloner = _Cloner(inner, mapper, set())
    for op in _body_ops(body):
        inner_cloner.clone(op, row_ok)
    new_body.add_op(scf.YieldOp(*(mapper.get(v, v) for v in body.last_op.operands)))  # type: ignore[union-attr]
    return list(new_loop.results)


def _map_single_thread(kernel: func.FuncOp) -> None:
    """A kernel without parallel loops runs on one thread."""
    block = kernel.body.block
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    ops = [op for op in block.ops if op is not ret]
    e = _Emit(Builder(InsertPoint.before(ret)), i32)
    first = e.eq(e.sreg("tid.x"), e.const(0))
    first = e.and_(first, e.eq(e.sreg("ctaid.x"), e.const(0)))
    then = Block()
    for op in ops:
        op.detach()
        then.add_op(op)
    then.add_op(scf.YieldOp())
    e.builder.insert(scf.IfOp(first, [], [then]))
    _set_launch(kernel, "serial", 1, 1)


# ---------------------------------------------------------------------------------------------
# Kernels with symbolic sizes: runtime extents, work items computed per launch
# ---------------------------------------------------------------------------------------------

DEFAULT_SIZE_HINT = 1024
"""The size a runtime size is taken at where its kernel names no hints (hand-written IR)."""

WORK_ITEMS = "items"
"""The symbol of a launch's work items, the last of its definitions (`xfuse.gpu.items_sizes`)."""


class LaunchSizes:
    """Sizes a kernel with size arguments computes before its loops, in graph's size language
    (`xfuse.dialects.graph.sizes`): polynomials of its size arguments, by their names
    (`xfuse.size_args`), and of floor divisions, each floor division a derived symbol of
    `divisions` (`q0 = (s0 + 1) floordiv 2`)."""

    def __init__(self, kernel: func.FuncOp) -> None:
        names = kernel.attributes[SIZE_ARGS_ATTR]
        assert isinstance(names, ArrayAttr)
        self.kernel = kernel
        self.names: list[str] = [n.data for n in names.data if isinstance(n, StringAttr)]
        args = kernel.body.block.args
        self.args: dict[SSAValue, str] = dict(
            zip(args[len(args) - len(self.names) :], self.names, strict=True)
        )
        self.divisions: list[SizeSymbol] = []
        self.known: dict[SSAValue, SizeExpr] = {}

    def of(self, value: SSAValue) -> SizeExpr:
        """`value` (a size the kernel computes before its loop) as a polynomial of its size
        arguments and `divisions`; a value computed otherwise is refused."""
        if value not in self.known:
            self.known[value] = self._compute(value)
        return self.known[value]

    def _compute(self, value: SSAValue) -> SizeExpr:
        if (constant := int_constant(value)) is not None:
            return SizeExpr.constant(constant)
        if value in self.args:
            return SizeExpr.symbol(self.args[value])
        op = value.owner
        if isinstance(op, arith.AddiOp):
            return self.of(op.lhs) + self.of(op.rhs)
        if isinstance(op, arith.SubiOp):
            return self.of(op.lhs) - self.of(op.rhs)
        if isinstance(op, arith.MuliOp):
            return self.of(op.lhs) * self.of(op.rhs)
        if isinstance(op, arith.DivUIOp) and (divisor := int_constant(op.rhs)) is not None:
            return self.floordiv(self.of(op.lhs), divisor)
        raise GPUMappingError(
            f"@{self.kernel.sym_name.data}: a loop bound the launch cannot compute from the size "
            "arguments"
        )

    def floordiv(self, expr: SizeExpr, divisor: int) -> SizeExpr:
        """floor(expr / divisor), a new symbol of `divisions` (`expr` itself for 1)."""
        if divisor < 1:
            raise GPUMappingError(
                f"@{self.kernel.sym_name.data}: a loop bound divided by {divisor}"
            )
        if divisor == 1:
            return expr
        taken = {*self.names, *(d.name for d in self.divisions), WORK_ITEMS}
        name = next(f"q{i}" for i in range(len(taken) + 1) if f"q{i}" not in taken)
        self.divisions.append(SizeSymbol.floordiv(name, expr, divisor))
        return SizeExpr.symbol(name)

    def definitions(self, items: SizeExpr) -> tuple[SizeSymbol, ...]:
        """`divisions`, then `items` as the symbol `WORK_ITEMS` (the last division itself
        where `items` is it: `items = (s0 + 7) floordiv 8`)."""
        if self.divisions and items == SizeExpr.symbol(self.divisions[-1].name):
            last = self.divisions[-1]
            assert last.expr is not None and last.divisor is not None
            items_symbol = SizeSymbol.floordiv(WORK_ITEMS, last.expr, last.divisor)
            return (*self.divisions[:-1], items_symbol)
        return (*self.divisions, SizeSymbol.derived(WORK_ITEMS, items))

    def at(self, items: SizeExpr, sizes: Sequence[int]) -> int:
        """`items` at the size arguments `sizes`."""
        return work_items(self.definitions(items), dict(zip(self.names, sizes, strict=True)))


def work_items(definitions: Sequence[SizeSymbol], sizes: Mapping[str, int]) -> int:
    """A launch's work items (`WORK_ITEMS` of its `definitions`) at its size arguments, by
    name."""
    return evaluate_sizes(definitions, sizes)[WORK_ITEMS]


def _hint(sizes: LaunchSizes, value: SSAValue) -> int:
    """A runtime size at the kernel's size hints (`xfuse.size_hints`)."""
    hints = sizes.kernel.attributes.get(SIZE_HINTS_ATTR)
    values = (
        [h.value.data for h in hints.data if isinstance(h, IntegerAttr)]
        if isinstance(hints, ArrayAttr)
        else []
    )
    count = len(sizes.names)
    return sizes.at(
        sizes.of(value), values if len(values) == count else [DEFAULT_SIZE_HINT] * count
    )


def _symbolic_shape(kernel: func.FuncOp, par: scf.ParallelOp) -> list[Extent]:
    shape: list[Extent] = []
    for lb, ub, step in zip(par.lowerBound, par.upperBound, par.step, strict=True):
        if int_constant(lb) != 0 or int_constant(step) != 1:
            raise GPUMappingError(
                f"@{kernel.sym_name.data}: expected scf.parallel bounds from 0 step 1"
            )
        extent = int_constant(ub)
        shape.append(ub if extent is None else extent)
    if par.initVals:
        raise GPUMappingError(
            f"@{kernel.sym_name.data}: scf.parallel with reductions is not supported"
        )
    return shape


def _element_count(sizes: LaunchSizes, shape: Sequence[Extent]) -> SizeExpr:
    """The element count of `shape` as a polynomial of the kernel's sizes."""
    count = SizeExpr.constant(math.prod(d for d in shape if isinstance(d, int)))
    for d in shape:
        if isinstance(d, SSAValue):
            count = count * sizes.of(d)
    return count


def _digits(e: _Emit, flat: SSAValue, extents: Sequence[SSAValue]) -> list[SSAValue]:
    """Row-major indices of a flat position in a shape of `extents` (in the mapping's
    integer type; the first index unbounded)."""
    digits: list[SSAValue] = []
    rest = flat
    for extent in reversed(extents[1:]):
        digits.append(e.rem(rest, extent))
        rest = e.div(rest, extent)
    return [rest, *reversed(digits)]


def _thread_digits(e: _Emit, position: SSAValue, extents: Sequence[SSAValue]) -> list[SSAValue]:
    """`_digits` of an i32 `position` below 2^32 (a thread's first position or the grid's
    stride: `MAX_GRID_STRIDE_THREADS`), divided in 32-bit arithmetic, as i64 (`e`'s): an
    extent past 2^32 - 1 is divided as 2^32 - 1 (the same digits of such a position)."""
    narrow = _Emit(e.builder, i32)
    divisors = [_narrow_extent(narrow, e, x) for x in extents]
    return [e.widen(d) for d in _digits(narrow, position, divisors)]


def _narrow_extent(narrow: _Emit, e: _Emit, extent: SSAValue) -> SSAValue:
    """`extent` (i64, `e`'s) at most 2^32 - 1, as i32."""
    if (constant := int_constant(extent)) is not None and constant <= INT32_LIMIT:
        return narrow.const(constant)
    return narrow.op(arith.TruncIOp(e.min(extent, e.const(UINT32_LIMIT)), i32))


def _stride_digits(
    e: _Emit, again: SSAValue, stride: SSAValue, extents: Sequence[SSAValue]
) -> list[SSAValue]:
    """`_thread_digits` of the grid's `stride` (i32) where the thread takes a second step
    (`again`), else zeros (never read), as i64 (`e`'s): a thread of one step divides nothing
    for its stride. Unconditional where every extent divided by is a constant (a multiply, no
    division)."""
    if all(int_constant(x) is not None for x in extents[1:]):
        return _thread_digits(e, stride, extents)
    then, other = Block(), Block()
    then.add_op(
        scf.YieldOp(*_thread_digits(_Emit(Builder(InsertPoint.at_end(then)), i64), stride, extents))
    )
    zero = _Emit(Builder(InsertPoint.at_end(other)), i64).const(0)
    other.add_op(scf.YieldOp(*[zero] * len(extents)))
    step = scf.IfOp(again, [i64] * len(extents), [then], [other])
    return list(e.builder.insert(step).results)


def _add_digits(
    e: _Emit, digits: Sequence[SSAValue], step: Sequence[SSAValue], extents: Sequence[SSAValue]
) -> list[SSAValue]:
    """The indices of `digits`' position plus `step`'s (both `_digits` of `extents`), carried
    from the innermost index outwards: each sum is below twice its extent, so one compare
    and subtract per index, and no division."""
    out: list[SSAValue] = []
    carry: SSAValue | None = None
    for axis in reversed(range(1, len(extents))):
        total = e.add(digits[axis], step[axis])
        total = total if carry is None else e.add(total, carry)
        over = e.op(arith.CmpiOp(total, extents[axis], "uge"))
        out.append(e.op(arith.SelectOp(over, e.op(arith.SubiOp(total, extents[axis])), total)))
        carry = e.op(arith.ExtUIOp(over, e.int_type))
    first = e.add(digits[0], step[0])
    return [first if carry is None else e.add(first, carry), *reversed(out)]


def _symbolic_width(body: list[Operation], shape: Sequence[Extent], innermost: SSAValue) -> int:
    """Elements per thread and step of a symbolic grid-stride kernel: 128 bits of the widest
    element the lanes' own accesses touch (`_varying_accesses`) where its innermost extent is
    static and a multiple of them (halved until it is), the body has no loop or region and
    reads no buffer it writes; else 1."""
    accesses = _accesses(body)
    inner = shape[-1] if shape else None
    if not accesses or not isinstance(inner, int) or any(op.regions for op in body):
        return 1
    if _reads_what_it_writes(accesses):
        return 1
    width = _vector_lanes(_varying_accesses(accesses, innermost))
    while width > 1 and inner % width:
        width //= 2
    return width


_INDEX_CASTS = (arith.IndexCastOp, arith.ExtUIOp, arith.ExtSIOp)
_OFFSET_OPS = (arith.AddiOp, arith.SubiOp, arith.MuliOp, *_INDEX_CASTS)
"""Ops of a linear offset's arithmetic (`_indexes_linearly`)."""


def _coefficient(value: SSAValue, iv: SSAValue) -> int | None:
    """The coefficient of the loop index `iv` in the index `value` (0 where it does not depend
    on it); None where `value` is no constant multiple of it plus terms without it (a product
    with a runtime size, a division)."""
    poly = _poly(value, {id(iv)})
    if poly is None:
        return None
    coefficient = 0
    for monomial, n in poly.items():
        if id(iv) in monomial:
            if monomial != (id(iv),):
                return None
            coefficient = n
    return coefficient


def _multiple_of(value: SSAValue, width: int, iv: SSAValue) -> bool:
    """Whether the index `value` is a multiple of `width` wherever the loop index `iv` is (a
    vector's first lane): each of its terms holds `iv` or a multiple of `width`."""
    poly = _poly(value, {id(iv)})
    return poly is not None and all(id(iv) in m or n % width == 0 for m, n in poly.items())


def _lane_accesses(
    body: list[Operation], iv: SSAValue, width: int
) -> dict[memref.LoadOp | memref.StoreOp, bool]:
    """The accesses whose lanes are adjacent elements (the last index moves with the innermost
    loop index `iv` by 1, the others not at all), each with whether its first lane is
    `width` elements aligned (a row-major buffer whose last dim, where static, is a multiple
    of `width`, at a last index that is a multiple of it)."""
    lanes: dict[memref.LoadOp | memref.StoreOp, bool] = {}
    for access in _accesses(body):
        t = _memref_type(access)
        if not access.indices:
            continue  # a 0-d buffer: every lane's one element
        *outer, last = access.indices
        if not isinstance(t.layout, NoneAttr) or _coefficient(last, iv) != 1:
            continue
        if any(_coefficient(i, iv) != 0 for i in outer):
            continue
        rows = t.get_shape()[-1]
        lanes[access] = (len(t.get_shape()) == 1 or rows % width == 0) and _multiple_of(
            last, width, iv
        )
    return lanes


def _map_symbolic_grid_stride(
    kernel: func.FuncOp, par: scf.ParallelOp, shape: list[Extent], block: int
) -> tuple[str, int, bool]:
    """A grid-stride loop over the flattened runtime index space, `width` consecutive elements
    of the innermost dim per thread and step (`_symbolic_width`: a static innermost extent
    that is a multiple of them; else one), in 64-bit arithmetic (positions past 2^31 at
    runtime sizes index right). A thread divides its first position and the grid's stride
    into indices once, in 32-bit arithmetic (`_thread_digits`; the stride only where it takes
    a second step: `_stride_digits`); each step adds the stride's indices to the carried ones
    (`_add_digits`), so that no element pays
    for a division. An access at the iteration's own element of a
    1-D buffer (`_own_flat_accesses`) is at the loop's position times `width`, so that it
    needs none of the indices (LLVM drops the ones nothing else reads, and their divisions).
    A lane's access of the element after the first lane's is that access's index plus the
    lane (`_lane_accesses`), and the first lane's carries its alignment where it is known, so
    that LLVM's load/store vectorizer makes one 128-bit access of them. Where the innermost
    extent takes no vector, chunks of the flattened space do (`_symbolic_flat_loop`). Returns
    the strategy, the width and whether the last chunk may be part of one (flat lanes)."""
    body = _body_ops(par.body.block)
    ivs = list(par.body.block.args)
    width = _symbolic_width(body, shape, ivs[-1])
    # 64-bit positions: past 2^31 at runtime sizes they index right.
    e = _Emit(Builder(InsertPoint.before(par)), i64)
    if width == 1 and (flat := _symbolic_flat_width(body, ivs, shape)) > 1:
        _symbolic_flat_loop(e, par, shape, flat)
        strategy, width, partial = "elementwise", flat, True
    else:
        _symbolic_loop(e, par, shape, width)
        serial = any(isinstance(o, scf.ForOp) for o in body)
        strategy, partial = "serial" if serial else "elementwise", False
    par.detach()
    par.erase()
    _set_launch(kernel, strategy, block, RUNTIME_ITEMS)
    return strategy, width, partial


def _thread_ids(e: _Emit) -> tuple[SSAValue, SSAValue]:
    """The thread's position in the grid and the grid's threads, i32 (a grid-stride launch
    has at most `MAX_GRID_STRIDE_THREADS`)."""
    narrow = _Emit(e.builder, i32)
    gtid = narrow.add(
        narrow.mul(narrow.sreg("ctaid.x"), narrow.sreg("ntid.x")), narrow.sreg("tid.x")
    )
    return gtid, narrow.mul(narrow.sreg("nctaid.x"), narrow.sreg("ntid.x"))


def _symbolic_loop(e: _Emit, par: scf.ParallelOp, shape: list[Extent], width: int) -> None:
    """`_map_symbolic_grid_stride`'s loop over `width`-element chunks before `par`, in `e`'s
    64-bit arithmetic (the body reads its indices as `index` values)."""
    body = _body_ops(par.body.block)
    ivs = list(par.body.block.args)
    inner_extent = shape[-1]
    chunks = (
        [*shape[:-1], inner_extent // width]
        if isinstance(inner_extent, int) and width > 1
        else shape
    )
    items = _product(e, chunks)
    extents = [_extent(e, d) for d in chunks]
    gtid32, nthreads32 = _thread_ids(e)
    gtid, nthreads = e.widen(gtid32), e.widen(nthreads32)
    step = _stride_digits(e, e.lt(e.add(gtid, nthreads), items), nthreads32, extents)
    loop_body = Block(arg_types=[i64] * (1 + len(shape)))
    first = _thread_digits(e, gtid32, extents)
    e.builder.insert(scf.ForOp(gtid, items, nthreads, first, loop_body))
    inner = _Emit(Builder(InsertPoint.at_end(loop_body)), i64)
    read_only = {a.memref for a in _accesses(body)} - _stored_memrefs(body)
    digits = list(loop_body.args[1:])
    outer = [inner.to_index(d) for d in digits[:-1]]
    start = inner.mul(digits[-1], inner.const(width)) if width > 1 else digits[-1]
    lanes = _lane_accesses(body, ivs[-1], width) if width > 1 else {}
    chunk = loop_body.args[0]
    at_chunk = [inner.to_index(inner.mul(chunk, inner.const(width)) if width > 1 else chunk)]
    own = _own_flat_accesses(body, ivs, shape)
    cloners: list[_Cloner] = []
    for lane in range(width):
        column = inner.to_index(inner.add(start, inner.const(lane)) if lane else start)
        cloner = _Cloner(inner, dict(zip(ivs, [*outer, column], strict=True)), read_only)
        cloner.marks = _lane_marks([a for a, aligned in lanes.items() if aligned], lane, width)
        if lane == 0:
            cloner.indices = {a: at_chunk for a in own}
        cloners.append(cloner)
    _clone_lanes(inner, body, cloners, set(lanes))
    loop_body.add_op(scf.YieldOp(*_add_digits(inner, digits, step, extents)))


def _lane_marks(
    vectors: Iterable[memref.LoadOp | memref.StoreOp], lane: int, width: int
) -> dict[Operation, dict[str, Attribute]]:
    """What lane `lane` of a chunk marks on its clones of the accesses `vectors` (each one
    aligned vector access of `width` elements): the first lane its alignment, the others
    their lane (`ConvertVectorLaneAccess`)."""
    return {
        access: {LANE_ATTR: IntegerAttr(lane, i64)}
        if lane
        else {ALIGN_ATTR: IntegerAttr(width * byte_width(_memref_type(access).element_type), i64)}
        for access in vectors
    }


def _clone_lanes(
    e: _Emit, body: list[Operation], cloners: list[_Cloner], adjacent: set[Operation]
) -> None:
    """`body` cloned once per lane (`cloners[lane]`), op by op across the lanes so that their
    accesses share a basic block; an `adjacent` access of lane k > 0 is at the first lane's
    last index plus k (`&m[..., j] + k`, which the NVVM lowering keeps adjacent)."""
    index = IndexType()
    for op in body:
        for lane, cloner in enumerate(cloners):
            if lane and op in adjacent:
                assert isinstance(op, memref.LoadOp | memref.StoreOp)
                *indices, last = cloners[0].indices_of(op)
                cloner.indices[op] = [*indices, e.add(last, e.const(lane, index))]
            cloner.clone(op, None)


Poly = dict[tuple[int, ...], int]
"""A polynomial of index values: monomial (the `id`s of its factors, sorted) -> coefficient."""


def _poly(value: SSAValue, ivs: set[int], opaque: bool = True) -> Poly | None:
    """`value`, an index, as a polynomial of block arguments (loop indices, size arguments),
    constants and, with `opaque`, the values of other ops that depend on none of the loop
    indices `ivs` (by `id`), where it is computed from them by additions, subtractions,
    products and index casts; else None."""
    op = value.owner
    if not isinstance(op, Operation):
        return {(id(value),): 1}
    if isinstance(op, arith.ConstantOp):
        c = int_constant(value)
        return None if c is None else ({(): c} if c else {})
    if isinstance(op, _INDEX_CASTS):
        return _poly(op.operands[0], ivs, opaque)
    if not isinstance(op, arith.AddiOp | arith.SubiOp | arith.MuliOp):
        if not opaque:
            return None
        operands = [_poly(v, ivs) for v in op.operands]
        free = all(p is not None and not any(ivs & set(m) for m in p) for p in operands)
        return {(id(value),): 1} if free else None
    a, b = (_poly(v, ivs, opaque) for v in op.operands)
    if a is None or b is None:
        return None
    if isinstance(op, arith.MuliOp):
        return _poly_mul(a, b)
    return _poly_add(a, b, 1 if isinstance(op, arith.AddiOp) else -1)


def _poly_add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for m, n in b.items():
        out[m] = out.get(m, 0) + sign * n
    return {m: n for m, n in out.items() if n}


def _poly_mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for (ma, na), (mb, nb) in ((x, y) for x in a.items() for y in b.items()):
        out = _poly_add(out, {tuple(sorted(ma + mb)): na * nb})
    return out


def _flat_position(ivs: Sequence[SSAValue], shape: Sequence[Extent]) -> Poly | None:
    """The row-major offset of the iteration `ivs` in `shape`, as a polynomial."""
    position: Poly = {}
    stride: Poly | None = {(): 1}
    for iv, extent in zip(reversed(ivs), reversed(shape), strict=True):
        if stride is None:
            return None
        position = _poly_add(position, _poly_mul({(id(iv),): 1}, stride))
        size: Poly | None = (
            {(): extent} if isinstance(extent, int) else _poly(extent, set(), opaque=False)
        )
        stride = None if size is None else _poly_mul(stride, size)
    return position


def _symbolic_flat_width(
    body: list[Operation], ivs: Sequence[SSAValue], shape: Sequence[Extent]
) -> int:
    """Elements per thread and step for flat lanes of a symbolic grid-stride kernel whose
    innermost extent takes no vector (rows of 50,257 logits, or of a runtime length): 128
    bits of the widest element where the body has no loop or region, reads no buffer it
    writes, and stores only at its iteration's own element of a 1-D buffer (its index the
    flattened position: `_own_flat_accesses`); else 1."""
    accesses = _accesses(body)
    if len(shape) < 2 or not accesses or any(op.regions for op in body):
        return 1
    if _reads_what_it_writes(accesses):
        return 1
    own = _own_flat_accesses(body, ivs, shape)
    if any(isinstance(a, memref.StoreOp) and a not in own for a in accesses):
        return 1
    return _vector_lanes(accesses)


def _own_flat_accesses(
    body: list[Operation], ivs: Sequence[SSAValue], shape: Sequence[Extent]
) -> set[memref.LoadOp | memref.StoreOp]:
    """Accesses of a 1-D buffer at the flattened position of the iteration (its row-major
    offset in `shape`)."""
    flat = _flat_position(ivs, shape)
    loops = {id(iv) for iv in ivs}
    own: set[memref.LoadOp | memref.StoreOp] = set()
    if flat is None:
        return own
    for access in _accesses(body):
        t = _memref_type(access)
        if len(access.indices) != 1 or not isinstance(t.layout, NoneAttr):
            continue
        if _poly(access.indices[0], loops, opaque=False) == flat:
            own.add(access)
    return own


def _symbolic_flat_loop(e: _Emit, par: scf.ParallelOp, shape: list[Extent], width: int) -> None:
    """`elementwise` with flat lanes at runtime sizes before `par`, in `e`'s 64-bit arithmetic
    (the body reads its indices as `index` values): chunks of `width`
    consecutive elements of the flattened index space in a grid-stride loop, each lane's
    indices the first lane's plus its lane (the last index alone where the chunk lies within
    a row, else carried: no division), the accesses at the iteration's own element one
    aligned vector access at the chunk's position (`_own_flat_accesses`); the elements past
    the last whole chunk (fewer than `width`) go one each to the first threads after the
    loop."""
    body = _body_ops(par.body.block)
    ivs = list(par.body.block.args)
    extents = [_extent(e, d) for d in shape]
    total = _product(e, shape)
    wide = e.const(width)
    chunks = e.div(total, wide)
    gtid32, nthreads32 = _thread_ids(e)
    gtid, nthreads = e.widen(gtid32), e.widen(nthreads32)
    again = e.lt(e.add(gtid, nthreads), chunks)
    narrow = _Emit(e.builder, i32)
    step = _stride_digits(e, again, narrow.mul(nthreads32, narrow.const(width)), extents)
    loop_body = Block(arg_types=[i64] * (1 + len(shape)))
    first = _thread_digits(e, narrow.mul(gtid32, narrow.const(width)), extents)
    e.builder.insert(scf.ForOp(gtid, chunks, nthreads, first, loop_body))
    inner = _Emit(Builder(InsertPoint.at_end(loop_body)), i64)
    read_only = {a.memref for a in _accesses(body)} - _stored_memrefs(body)
    own = _own_flat_accesses(body, ivs, shape)
    digits: list[SSAValue] = list(loop_body.args[1:])
    at_chunk = inner.to_index(inner.mul(loop_body.args[0], wide))
    # A chunk within one row (nearly all of them where rows are long): each lane's indices
    # are the first lane's with the last plus the lane. Else each lane's are the last lane's
    # plus one, carried.
    fits = inner.lt(inner.add(digits[-1], inner.const(width - 1)), extents[-1])
    within, across = Block(), Block()
    w = _Emit(Builder(InsertPoint.at_end(within)), i64)
    rows = [w.to_index(d) for d in digits[:-1]]
    lanes = [[*rows, w.to_index(w.add(digits[-1], w.const(lane)))] for lane in range(width)]
    _clone_flat_chunk(w, body, ivs, lanes, (own, at_chunk), read_only)
    a = _Emit(Builder(InsertPoint.at_end(across)), i64)
    one = [a.const(0) for _ in shape[:-1]] + [a.const(1)]
    carried = [digits]
    for _ in range(1, width):
        carried.append(_add_digits(a, carried[-1], one, extents))
    lanes = [[a.to_index(d) for d in lane] for lane in carried]
    _clone_flat_chunk(a, body, ivs, lanes, (own, at_chunk), read_only)
    for branch in (within, across):
        branch.add_op(scf.YieldOp())
    inner.builder.insert(scf.IfOp(fits, [], [within], [across]))
    loop_body.add_op(scf.YieldOp(*_add_digits(inner, digits, step, extents)))
    # The tail: elements chunks * width + t for t < total - chunks * width, one a thread.
    done = e.mul(chunks, wide)
    tail = Block()
    then = _Emit(Builder(InsertPoint.at_end(tail)), i64)
    at = then.add(done, gtid)
    position = [then.to_index(d) for d in _digits(then, at, extents)]
    last = _Cloner(then, dict(zip(ivs, position, strict=True)), read_only)
    last.indices = {access: [then.to_index(at)] for access in own}
    for op in body:
        last.clone(op, None)
    tail.add_op(scf.YieldOp())
    e.builder.insert(scf.IfOp(e.lt(gtid, e.op(arith.SubiOp(total, done))), [], [tail]))


def _clone_flat_chunk(
    e: _Emit,
    body: list[Operation],
    ivs: Sequence[SSAValue],
    lanes: list[list[SSAValue]],
    at_chunk: tuple[set[memref.LoadOp | memref.StoreOp], SSAValue],
    read_only: set[SSAValue],
) -> None:
    """`body` cloned once per lane of a flat chunk (`lanes`: each lane's indices), the
    accesses at the iteration's own element (`at_chunk`: they and the chunk's flat position)
    one aligned vector access at that position."""
    width = len(lanes)
    own, position = at_chunk
    cloners: list[_Cloner] = []
    for lane, lane_ivs in enumerate(lanes):
        cloner = _Cloner(e, dict(zip(ivs, lane_ivs, strict=True)), read_only)
        cloner.marks = _lane_marks(own, lane, width)
        if lane == 0:
            cloner.indices = {access: [position] for access in own}
        cloners.append(cloner)
    _clone_lanes(e, body, cloners, set[Operation](own))


def _map_symbolic(
    kernel: func.FuncOp, module: ModuleOp, par: scf.ParallelOp, mapping: GPUMapping
) -> str:
    """Map a kernel with size arguments: its block shape is chosen at the size hints and is
    valid for every size (grid-stride loops over the runtime index space, rows of any length
    strided over the row's threads); its work items, from which the launch computes the
    grid, are a size of its size arguments (`xfuse.gpu.items_sizes`: `LaunchSizes`'
    definitions, as a `graph.sizes` table writes its entries)."""
    shape = _symbolic_shape(kernel, par)
    body = _body_ops(par.body.block)
    plan = None
    if any(_has_control_flow(op) for op in body):
        # Buffers of runtime sizes are 1-D, read at linear offsets: which loops walk rows
        # is not visible in their indices, so every loop of the row's kind is taken.
        plan = _row_plan(body, columns=True, symbolic=True)
    sizes = LaunchSizes(kernel)
    items = _element_count(sizes, shape)
    if plan is None:
        strategy, width, rounded = _map_symbolic_grid_stride(kernel, par, shape, mapping.block_size)
        # A thread a chunk of `width`; flat lanes' last chunk may be part of one.
        partial = SizeExpr.constant(width - 1) if rounded else SizeExpr.constant(0)
        items = sizes.floordiv(items + partial, width)
    else:
        hint = plan.length if isinstance(plan.length, int) else _hint(sizes, plan.length)
        rows = math.prod(d if isinstance(d, int) else _hint(sizes, d) for d in shape)
        scratch = _SharedScratch(module, kernel.sym_name.data)
        per_block = _map_rows(kernel, scratch, par, shape, plan, mapping, hint, rows)
        strategy = "rows"
        items = sizes.floordiv(items + SizeExpr.constant(per_block - 1), per_block)
    kernel.attributes[ITEMS_ATTR] = IntegerAttr(RUNTIME_ITEMS, i64)
    definitions = sizes.definitions(items)
    kernel.attributes[ITEMS_SIZES_ATTR] = StringAttr(", ".join(map(str, definitions)))
    return strategy


# ---------------------------------------------------------------------------------------------
# The pass
# ---------------------------------------------------------------------------------------------


def _outer_parallel(kernel: func.FuncOp) -> scf.ParallelOp | None:
    found = [op for op in kernel.body.block.ops if isinstance(op, scf.ParallelOp)]
    if len(found) > 1:
        raise GPUMappingError(
            f"@{kernel.sym_name.data}: expected one outer scf.parallel, found {len(found)}"
        )
    return found[0] if found else None


def _parallel_shape(kernel: func.FuncOp, par: scf.ParallelOp) -> list[int]:
    shape: list[int] = []
    for lb, ub, step in zip(par.lowerBound, par.upperBound, par.step, strict=True):
        extent = int_constant(ub)
        if int_constant(lb) != 0 or int_constant(step) != 1 or extent is None:
            raise GPUMappingError(
                f"@{kernel.sym_name.data}: expected scf.parallel bounds 0 to a constant step 1"
            )
        shape.append(extent)
    if par.initVals:
        raise GPUMappingError(
            f"@{kernel.sym_name.data}: scf.parallel with reductions is not supported"
        )
    return shape


@dataclass(frozen=True)
class GPUMapping:
    """The choices of the GPU mapping, each declared once with its one default: the fields of
    the `gpu-map-parallel` pass and of the CUDA backend's `Tuning` (which adds ptxas choices),
    so that `xfuse-opt -p gpu-map-parallel` maps a kernel as the runtime does."""

    block_size: int = option(256, BLOCK_THREADS)
    """Threads per block of grid-stride kernels."""

    rows_block: int = option(256, BLOCK_THREADS)
    """Threads per block when a warp or part of one handles each row."""

    short_row_chunks: int = option(4, POSITIVE)
    """Vector chunks each thread of a short row (one a warp holds in registers) takes: the row
    gets the power of two of threads, up to a warp, that gives each about this many (more
    where the kernel would have fewer than `min_threads` threads). An H200 sweep of 1, 2, 3,
    4 and 12 over layer norms, RMS norms and softmaxes of bf16 rows of 8 to 768 elements: 4 fastest
    (rows of 96: 31 us with a warp a row, 17 with one chunk a thread, 10 with 4)."""

    max_cached: int = option(64, POSITIVE)
    """Most row elements one thread keeps in registers; longer rows are re-read. With
    `row_elements` it was chosen by an H200 sweep of softmax, layernorm and RMSNorm over rows of
    2048 to 32768 elements in f32 and bf16 (`benchmarks/cuda_tune.py`): near copy bandwidth
    up to 16384, where smaller settings fell well short on bf16 rows."""

    unroll: int = option(1, POSITIVE)
    """Vector chunks an elementwise thread loads per grid-stride step (bytes in flight; an
    H100 sweep found one chunk per thread with as many blocks as the work needs fastest)."""

    row_threads: int = option(0, ROW_THREADS)
    """Threads per long row (0: about `row_elements` elements each, from 64 to 1024)."""

    row_elements: int = option(64, POSITIVE)
    """Elements each thread of a long row handles when `row_threads` is 0."""

    min_threads: int = option(32768, NON_NEGATIVE)
    """Fewest threads an elementwise kernel is spread over where it can be: its vector width
    is halved (down to one element a thread) until it has this many, about a block of 256 on
    each SM of an H100 or H200 (132). A small kernel is bound by latency, not by the width of
    its accesses (MobileNetV2's, a few thousand elements each, run faster spread thin than at
    8 elements a thread). A kernel of
    fewer rows than this maps a warp to each row even where its rows walk columns of memory
    (`_row_plan`'s `columns`)."""


def map_kernel(kernel: func.FuncOp, module: ModuleOp, mapping: GPUMapping = GPUMapping()) -> str:
    """Map one kernel; returns the strategy chosen."""
    block_size, unroll = mapping.block_size, mapping.unroll
    par = _outer_parallel(kernel)
    if par is None:
        _map_single_thread(kernel)
        return "serial"
    if SIZE_ARGS_ATTR in kernel.attributes:
        return _map_symbolic(kernel, module, par, mapping)
    shape = _parallel_shape(kernel, par)
    body = _body_ops(par.body.block)
    if numel(shape) == 0:
        par.detach()
        par.erase()
        _set_launch(kernel, "elementwise", block_size, 0)
        return "elementwise"
    if not any(_has_control_flow(op) for op in body):
        ivs = list(par.body.block.args)
        width = _vector_width(body, shape, ivs[-1])
        flat_lanes = width == 1 and (width := _flat_width(body, ivs, shape)) > 1
        while width > 1 and numel(shape) // width < mapping.min_threads:
            width //= 2
        loaded = {a.memref for a in _accesses(body) if isinstance(a, memref.LoadOp)}
        independent = not (loaded & _stored_memrefs(body))
        chunks = numel(shape) // width
        steps = max(1, unroll) if independent and chunks >= 2 * block_size else 1
        _map_grid_stride(
            kernel, par, shape, width, block_size, steps, flat=flat_lanes and width > 1
        )
        return "elementwise"
    # A thread per row walks a column coalesced with its neighbours, but where there are
    # fewer rows than `min-threads` (a layer norm over a 56x56 image's channels, read from
    # NCHW memory: 3136 threads of 96 x 49 loads each), a warp per row runs 32 times as many.
    few = numel(shape) < mapping.min_threads
    plan = _row_plan(body, columns=few or _transposes_cached_rows(body, mapping))
    if plan is None and (flat := _coalesced(par)) is not None:
        # where the nests' single loops map to rows, the kernel takes them
        flat_plan = _row_plan(_body_ops(flat.body.block), columns=True)
        if flat_plan is not None and (few or _walks_rows(par)):
            par = _replace(par, flat)
            plan = flat_plan
        else:
            flat.erase(safe_erase=False)  # the trial copy: its uses of outer values go too
    if plan is not None:
        scratch = _SharedScratch(module, kernel.sym_name.data)
        _map_rows(kernel, scratch, par, shape, plan, mapping)
        return "rows"
    _map_grid_stride(kernel, par, shape, 1, block_size)
    return "serial"


@dataclass(frozen=True)
class GPUMapParallelPass(GPUMapping, ModulePass):
    """Map the outer `scf.parallel` of every `xfuse.kernel` function onto the CUDA grid (options:
    the fields of `GPUMapping`)."""

    name = "gpu-map-parallel"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in kernel_functions(op):
            map_kernel(kernel, op, self.mapping())

    def mapping(self) -> GPUMapping:
        """The pass's options as a `GPUMapping`."""
        return GPUMapping(**{f.name: getattr(self, f.name) for f in fields(GPUMapping)})
