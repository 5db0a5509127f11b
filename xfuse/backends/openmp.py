"""
CPU kernels on torch's OpenMP threads. A CPU kernel `void k(i64 lo, i64 hi, ptr...)` gets a
second entry that runs `[0, extent)` as `chunks` near-equal chunks on `threads` threads of the
process's OpenMP runtime (libgomp's `GOMP_parallel`, what torch's own operators and Inductor's
kernels run on), the caller being one of them:

    void k.parallel(i64 threads, i64 chunks, ptr...)

    define void @k.parallel(i64 %threads, i64 %chunks, ptr %0, ptr %1) {
      ; [next chunk, chunks, the 2 buffers' addresses] (i64s) on the stack
      call void @GOMP_parallel(ptr @k.chunks, ptr %task, i32 %threads, i32 0)
    }
    define internal void @k.chunks(ptr %task)   ; until none is left: take the next chunk
                                                ; (atomicrmw add), call @k(lo, hi, ptrs...)

A kernel with symbolic sizes (`void k(i64 lo, i64 hi, ptr..., i64 sizes...)`, its range's
extent known per call) gets `void k.parallel(i64 threads, i64 chunks, i64 extent, ptr...,
i64 sizes...)`.

Sharing torch's threads matters on a small machine: after each torch operator its OpenMP
threads spin for a while waiting for the next parallel region, so a pool of other threads
competes with them for the cores, and waking a sleeping pool thread costs tens of
microseconds where a spinning OpenMP thread starts at once. One foreign call per launch, no
Python per chunk. Chunks are taken dynamically, so a thread that the machine's other work slows
down holds up the others less.

Where the process has no libgomp (a torch built without OpenMP), `openmp_parallel_address` is
None and kernels keep to the Python pool (`xfuse.backends.threadpool.RangePool`).
"""

from __future__ import annotations

import ctypes
from functools import cache

import llvmlite.binding as llvm
import llvmlite.ir as ir

GOMP_PARALLEL = "GOMP_parallel"
"""`void GOMP_parallel(void (*fn)(void *), void *data, unsigned threads, unsigned flags)`:
libgomp's `#pragma omp parallel` (GCC 4.9+), the caller is thread 0, returns when all are done."""


def parallel_symbol(kernel_name: str) -> str:
    """The entry that runs the kernel's whole range on OpenMP threads."""
    return f"{kernel_name}.parallel"


def chunks_symbol(kernel_name: str) -> str:
    """The function each OpenMP thread runs: takes chunks until none is left."""
    return f"{kernel_name}.chunks"


@cache
def openmp_parallel_address() -> int | None:
    """The address of `GOMP_parallel` in this process (torch's libgomp), or None."""
    import torch  # noqa: F401  # loads torch's OpenMP runtime, if it has one

    try:
        function = ctypes.CDLL(None)[GOMP_PARALLEL]
    except (AttributeError, OSError):
        return None
    address = ctypes.cast(function, ctypes.c_void_p).value
    if address is None:
        return None
    llvm.add_symbol(GOMP_PARALLEL, address)  # what the JIT links kernels' calls to
    return address


I64 = ir.IntType(64)
I32 = ir.IntType(32)
PTR = ir.PointerType()


def add_parallel_entry(
    module: ir.Module, name: str, arity: int, extent: int | None, sizes: int = 0
) -> None:
    """Add `@<name>.parallel` and `@<name>.chunks` (see the module docstring) for the kernel
    `@name(i64 lo, i64 hi, ptr x arity, i64 x sizes)` of `module`, whose range is `[0,
    extent)`; `extent` None for a kernel with symbolic sizes, whose entry takes it."""
    kernel = module.get_global(name)
    chunks = _chunks_function(module, name, kernel, arity, sizes)
    gomp = module.globals.get(GOMP_PARALLEL) or ir.Function(
        module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I32, I32]), GOMP_PARALLEL
    )
    leading = [I64, I64] if extent is not None else [I64, I64, I64]
    signature = ir.FunctionType(ir.VoidType(), leading + [PTR] * arity + [I64] * sizes)
    entry = ir.Function(module, signature, parallel_symbol(name))
    threads, count = entry.args[:2]
    total = ir.Constant(I64, extent) if extent is not None else entry.args[2]
    values = entry.args[len(leading) :]
    b = ir.IRBuilder(entry.append_basic_block("entry"))
    task = b.alloca(I64, size=TASK_VALUES + arity + sizes)
    b.store(ir.Constant(I64, 0), _slot(b, task, TASK_NEXT))
    b.store(count, _slot(b, task, TASK_CHUNKS))
    b.store(total, _slot(b, task, TASK_EXTENT))
    for i, value in enumerate(values):
        stored = b.ptrtoint(value, I64) if i < arity else value
        b.store(stored, _slot(b, task, TASK_VALUES + i))
    b.call(gomp, [chunks, task, b.trunc(threads, I32), ir.Constant(I32, 0)])
    b.ret_void()


TASK_NEXT, TASK_CHUNKS, TASK_EXTENT, TASK_VALUES = 0, 1, 2, 3
"""The task the threads share, `[3 + arity + sizes x i64]` on the caller's stack: the next
chunk to take (atomically), the number of chunks, the range's extent, then the buffers'
addresses and the size arguments."""


def _slot(b: ir.IRBuilder, task: ir.Value, index: int) -> ir.Value:
    return b.gep(task, [ir.Constant(I64, index)], inbounds=True, source_etype=I64)


def _chunks_function(
    module: ir.Module, name: str, kernel: ir.Function, arity: int, sizes: int
) -> ir.Function:
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), chunks_symbol(name))
    function.linkage = "internal"
    (task,) = function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    count = b.load(_slot(b, task, TASK_CHUNKS), typ=I64)
    total = b.load(_slot(b, task, TASK_EXTENT), typ=I64)
    values = [b.load(_slot(b, task, TASK_VALUES + i), typ=I64) for i in range(arity + sizes)]
    arguments = [b.inttoptr(v, PTR) for v in values[:arity]] + values[arity:]
    take, run, done = (function.append_basic_block(n) for n in ("take", "run", "done"))
    b.branch(take)
    b.position_at_end(take)
    chunk = b.atomic_rmw("add", _slot(b, task, TASK_NEXT), ir.Constant(I64, 1), "monotonic")
    b.cbranch(b.icmp_signed(">=", chunk, count), done, run)
    b.position_at_end(run)
    # Chunk c is [extent * c / chunks, extent * (c + 1) / chunks): near-equal, in order.
    lo = b.sdiv(b.mul(total, chunk), count)
    hi = b.sdiv(b.mul(total, b.add(chunk, ir.Constant(I64, 1))), count)
    b.call(kernel, [lo, hi, *arguments], attrs=("noinline",))  # one copy of the kernel
    b.branch(take)
    b.position_at_end(done)
    b.ret_void()
    return function
