"""
The CPU backend: a kernel of loop IR -> `lower-to-llvm{target=cpu}` -> LLVM IR for the host CPU
(plus, where the process has torch's OpenMP runtime, the entry `k.parallel` that runs the
kernel's range on its threads: `xfuse.backends.openmp`) -> O3 with vectorization -> an object
file (the artifact). Loading adds the object to an MCJIT engine and wraps the function
`void k(i64 lo, i64 hi, ptr...)` (and `k.parallel`) for the thread pool.

    python -m xfuse.backends.cpu kernel.mlir --emit=llvm|opt-llvm|asm [--kernel NAME]

prints what the backend makes of each kernel of a file (for lit tests and curious people).
"""

from __future__ import annotations

import argparse
import ctypes
import operator
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import llvmlite.binding as llvm
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from xfuse.backends.llvm import (
    emit_assembly,
    emit_object,
    host_target_machine,
    host_target_name,
    new_host_target_machine,
    optimize,
    to_llvm_module,
)
from xfuse.backends.loop_hints import (
    keep_long_rows,
    keep_sum_loops,
    widen_bounded_rows,
    widen_short_rows,
)
from xfuse.backends.openmp import add_parallel_entry, openmp_parallel_address, parallel_symbol
from xfuse.backends.threadpool import RangePool, shared_pool
from xfuse.errors import CodegenError
from xfuse.ir.functions import kernel_functions
from xfuse.ir.names import KERNEL_ATTR
from xfuse.passes.llvm.lower_to_llvm import (
    SYMBOLIC_EXTENT,
    arity_symbol,
    extent_symbol,
    lower_kernels_to_llvm,
    sizes_symbol,
)

if TYPE_CHECKING:
    import torch


def kernel_module(module: ModuleOp, name: str) -> ModuleOp:
    """A module holding a copy of the kernel `@name` of `module` only."""
    for op in module.ops:
        if isinstance(op, func.FuncOp) and op.sym_name.data == name:
            if KERNEL_ATTR not in op.attributes:
                raise CodegenError(f"@{name} is not a kernel (no {KERNEL_ATTR} attribute)")
            return ModuleOp([op.clone()])
    raise CodegenError(f"no function @{name} in the module")


_DATA_PTR = operator.methodcaller("data_ptr")
_NUMEL = operator.methodcaller("numel")


@dataclass
class CPUKernel:
    """A loaded kernel: call it with its buffers (inputs, then outputs), contiguous tensors."""

    name: str
    extent: int
    arity: int
    function: ctypes._CFuncPtr  # type: ignore[name-defined]  # typeshed keeps ctypes's name private
    engine: llvm.ExecutionEngine
    pool: RangePool
    parallel: ctypes._CFuncPtr | None = None  # type: ignore[name-defined]
    """`k.parallel(threads, chunks, ptrs...)`, or `k.parallel(threads, chunks, extent, ptrs...,
    sizes...)` for a kernel with sizes: the range on OpenMP threads (None: the artifact has no
    such entry)."""
    sizes: int | None = None
    """How many size arguments (i64s after the pointers) the kernel takes; None where it was
    not compiled with a sizes table (`xfuse.size_args`, which may name none: 0). A kernel with
    one is launched by `launch_sized`, its `extent` may be `SYMBOLIC_EXTENT`
    (docs/dynamic-shapes.md), and its OpenMP entry takes the range's extent. A symbolic
    program launches its static kernels (None) with `launch_sized` too; their entry's extent
    is the compiled one."""
    inline_below: int | float = field(init=False)
    """`pool.inline_below`, read once: less work runs on the caller with no decision made."""

    def __post_init__(self) -> None:
        self.inline_below = self.pool.inline_below

    def __call__(self, buffers: Sequence[torch.Tensor]) -> None:
        if self.sizes is not None:
            raise ValueError(f"kernel {self.name} takes {self.sizes} sizes: use launch_sized")
        if len(buffers) != self.arity:
            raise ValueError(f"kernel {self.name} takes {self.arity} buffers, got {len(buffers)}")
        # `is_cpu`, not `device.type`: the cheaper check, per buffer on every launch.
        if not all([b.is_cpu and b.is_contiguous() for b in buffers]):
            i = next(i for i, b in enumerate(buffers) if not (b.is_cpu and b.is_contiguous()))
            raise ValueError(f"kernel {self.name}: buffer {i} is not a contiguous CPU tensor")
        self.launch(buffers)

    def inline_entry(self, work: int) -> tuple[ctypes._CFuncPtr, int] | None:  # type: ignore[name-defined]
        """`(function, extent)` when a launch over `work` elements (its buffers' elements) is the
        one call `function(0, extent, *pointers)` on the caller (`launch`'s first branch)."""
        return (self.function, self.extent) if 0 < work < self.inline_below else None

    def launch(self, buffers: Sequence[torch.Tensor]) -> None:
        """`self(buffers)` for a caller that has made them the kernel's: its arity, contiguous
        CPU tensors (`KernelStep`, whose program runs on the CPU)."""
        pointers = list(map(_DATA_PTR, buffers))
        work = sum(map(_NUMEL, buffers))
        if 0 < work < self.inline_below:
            self.function(0, self.extent, *pointers)
            return
        function, pool = self.function, self.pool
        openmp = self.parallel is not None and pool.on_openmp()
        plan = pool.plan(self.extent, work, openmp)
        if plan is None:
            # Small work: one foreign call on this thread, no range function, no hand-off.
            function(0, self.extent, *pointers)
            return
        if openmp:
            assert self.parallel is not None
            self.parallel(*plan, *pointers)
            return

        def run_range(lo: int, hi: int) -> None:
            function(lo, hi, *pointers)

        self.pool.run(run_range, self.extent, work)

    def launch_sized(
        self, buffers: Sequence[torch.Tensor], sizes: Sequence[int], extent: int | None
    ) -> None:
        """Launch a kernel with symbolic sizes (`xfuse.backends.Kernel.launch_sized`): its
        buffers (contiguous CPU tensors, as for `launch`), the values of its size arguments,
        and the trip count of its split loop at those sizes (None: its static `extent`). The
        range runs on the caller, on OpenMP threads or on the Python pool, as `launch`'s."""
        if len(buffers) != self.arity or len(sizes) != (self.sizes or 0):
            raise ValueError(
                f"kernel {self.name} takes {self.arity} buffers and {self.sizes or 0} sizes, got "
                f"{len(buffers)} and {len(sizes)}"
            )
        if extent is None:
            if self.extent == SYMBOLIC_EXTENT:
                raise ValueError(
                    f"kernel {self.name} splits a loop of symbolic size: pass its extent"
                )
            extent = self.extent
        arguments = [*map(_DATA_PTR, buffers), *sizes]
        work = sum(map(_NUMEL, buffers))
        function, pool = self.function, self.pool
        openmp = self.parallel is not None and pool.on_openmp()
        plan = None if work < self.inline_below else pool.plan(extent, work, openmp)
        if plan is None:
            function(0, extent, *arguments)
            return
        if openmp:
            assert self.parallel is not None
            if self.sizes is not None:
                self.parallel(*plan, extent, *arguments)
            else:
                self.parallel(*plan, *arguments)
            return

        def run_range(lo: int, hi: int) -> None:
            function(lo, hi, *arguments)

        self.pool.run(run_range, extent, work)


class CPUBackend:
    """Kernels for the CPU this process runs on (see `xfuse.backends.Backend`)."""

    def __init__(self, pool: RangePool | None = None) -> None:
        self.target_machine = host_target_machine()
        self.openmp = openmp_parallel_address() is not None
        """Whether kernels get an OpenMP entry (the process has torch's OpenMP runtime)."""
        self.target = host_target_name() + ("+openmp" if self.openmp else "")
        self.pool = pool if pool is not None else shared_pool()
        self._engine_lock = threading.Lock()

    def lower(self, module: ModuleOp, name: str) -> ModuleOp:
        """The kernel `@name` in the llvm dialect."""
        lowered = kernel_module(module, name)
        try:
            lower_kernels_to_llvm(lowered, "cpu")
        except Exception as error:
            raise CodegenError(f"@{name}: {error}") from error
        return lowered

    def llvm_ir(self, module: ModuleOp, name: str) -> str:
        converted = to_llvm_module(self.lower(module, name), self.target_machine)
        keep_sum_loops(converted)
        widen_short_rows(converted)
        widen_bounded_rows(converted)
        keep_long_rows(converted)
        if self.openmp:
            arity = converted.get_global(arity_symbol(name)).initializer.constant
            sized = converted.globals.get(sizes_symbol(name))
            if sized is None:
                extent = converted.get_global(extent_symbol(name)).initializer.constant
                add_parallel_entry(converted, name, arity, extent)
            else:
                add_parallel_entry(converted, name, arity, None, sized.initializer.constant)
        return str(converted)

    def optimized(self, module: ModuleOp, name: str) -> llvm.ModuleRef:
        ir = self.llvm_ir(module, name)
        try:
            return optimize(ir, self.target_machine)
        except RuntimeError as error:
            raise CodegenError(f"@{name}: LLVM: {error}") from error

    def assembly(self, module: ModuleOp, name: str) -> str:
        return emit_assembly(self.optimized(module, name), self.target_machine)

    def compile(self, module: ModuleOp, name: str) -> bytes:
        return emit_object(self.optimized(module, name), self.target_machine)

    def load(self, artifact: bytes, name: str) -> CPUKernel:
        with self._engine_lock:
            engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_host_target_machine())
            engine.add_object_file(llvm.ObjectFileRef.from_data(artifact))
            engine.finalize_object()
        address = engine.get_function_address(name)
        extent_address = engine.get_global_value_address(extent_symbol(name))
        arity_address = engine.get_global_value_address(arity_symbol(name))
        if not (address and extent_address and arity_address):
            raise CodegenError(f"the artifact has no CPU kernel @{name}")
        extent = ctypes.c_int64.from_address(extent_address).value
        arity = ctypes.c_int64.from_address(arity_address).value
        sizes_address = engine.get_global_value_address(sizes_symbol(name))
        sizes = ctypes.c_int64.from_address(sizes_address).value if sizes_address else None
        size_arguments = [ctypes.c_int64] * (sizes or 0)
        signature = ctypes.CFUNCTYPE(
            None, ctypes.c_int64, ctypes.c_int64, *([ctypes.c_void_p] * arity), *size_arguments
        )
        parallel_signature = ctypes.CFUNCTYPE(
            None,
            *([ctypes.c_int64] * (2 if sizes is None else 3)),
            *([ctypes.c_void_p] * arity),
            *size_arguments,
        )
        parallel_address = engine.get_function_address(parallel_symbol(name))
        parallel = parallel_signature(parallel_address) if parallel_address else None
        return CPUKernel(
            name,
            extent,
            arity,
            signature(address),
            engine,
            self.pool,
            parallel,
            sizes,
        )


EMITTERS = {
    "llvm": CPUBackend.llvm_ir,
    "opt-llvm": lambda backend, module, name: str(backend.optimized(module, name)),
    "asm": CPUBackend.assembly,
}


def main(argv: Sequence[str] | None = None) -> int:
    from xfuse.errors import IRParseError
    from xfuse.ir.context import parse

    parser = argparse.ArgumentParser(prog="python -m xfuse.backends.cpu", description=__doc__)
    parser.add_argument("file", help="loop IR ('-' for stdin)")
    parser.add_argument("--emit", choices=sorted(EMITTERS), default="llvm")
    parser.add_argument("--kernel", help="only this kernel (default: every kernel)")
    args = parser.parse_args(argv)
    text = sys.stdin.read() if args.file == "-" else open(args.file).read()
    try:
        module = parse(text, name=args.file)
    except IRParseError as error:  # one line, `file:line:col: error: ...`
        print(error, file=sys.stderr)
        return 1
    names = [f.sym_name.data for f in kernel_functions(module)]
    backend = CPUBackend()
    for name in [args.kernel] if args.kernel else names:
        try:
            print(EMITTERS[args.emit](backend, module, name))
        except CodegenError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
