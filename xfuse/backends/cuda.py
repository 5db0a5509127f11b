"""
The CUDA backend: kernels of loop IR to PTX (no GPU or pycuda needed for that), run with pycuda
on torch's tensors.

    backend = CUDABackend()                       # target "cuda-sm_90" (the GPU's, if there is one)
    ptx = backend.compile(module, "kernel_0")     # gpu-map-parallel, lower-to-nvvm, NVPTX
    kernel = backend.load(ptx, "kernel_0")
    kernel([x, w, out])                           # CUDA tensors: inputs, then outputs

The artifact is the PTX text; its first line is a comment holding the launch shape
(`// xfuse-launch {...}`), which ptxas and the driver ignore. A loaded kernel keeps one module
per device, loaded in that device's primary context (the one torch uses, so torch's pointers are
valid in it), and launches in stream order with torch's work on the current stream. Launch
errors become `CUDALaunchError`s naming the kernel; with `XFUSE_CUDA_SYNC=1` every launch is
also waited for, so that faults are reported by the kernel that caused them.
"""

from __future__ import annotations

import json
import math
import os
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from functools import reduce
from operator import or_
from typing import TYPE_CHECKING, Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, ModuleOp, StringAttr
from xdsl.utils.exceptions import ParseError

from xfuse.backends.cuda_driver import DriverFunction
from xfuse.backends.nvptx import compile_to_ptx
from xfuse.dialects.graph import SizeSymbol, size_symbols_from_text
from xfuse.errors import CodegenError, CUDALaunchError, CUDAUnavailable
from xfuse.ir.functions import kernel_functions
from xfuse.ir.names import (
    BLOCK_ATTR,
    ITEMS_ATTR,
    ITEMS_SIZES_ATTR,
    SIZE_ARGS_ATTR,
    STRATEGY_ATTR,
)
from xfuse.passes.llvm.lower_to_nvvm import POINTER_ALIGNMENT, lower_kernels_to_nvvm
from xfuse.passes.lowering.gpu_map_parallel import (
    MAX_GRID_STRIDE_THREADS,
    GPUMapping,
    GPUMappingError,
    map_kernel,
    work_items,
)

if TYPE_CHECKING:
    import torch

LAUNCH_PREFIX = "// xfuse-launch "
DEFAULT_ARCH = "sm_90"
MAX_THREADS_PER_SM = 2048
GRID_WAVES = int(os.environ.get("XFUSE_CUDA_WAVES", "8"))
SYNC_LAUNCHES = os.environ.get("XFUSE_CUDA_SYNC") == "1"
assert POINTER_ALIGNMENT & (POINTER_ALIGNMENT - 1) == 0, "launchers test alignment by an OR"
"""Wait for every launch, so that a fault is reported by the kernel that caused it (read once,
at import)."""
"""Grid-stride kernels get this many waves of fully occupied SMs (or fewer blocks if enough)."""


# ---------------------------------------------------------------------------------------------
# Compilation
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchShape:
    """How to launch a kernel: its strategy (see gpu-map-parallel), threads per block, and
    work items (grid-stride kernels: iterations in all; `rows`: blocks). A kernel with
    symbolic sizes takes `size_args` (their names: `xfuse.size_args`) as i64 arguments after
    its buffers, and its work items are `items_sizes` (`items` being -1): derived size symbols
    of those names, written as a `graph.sizes` table's entries, the last the work items
    (`gpu_map_parallel.LaunchSizes`), which each launch evaluates."""

    kernel: str
    strategy: str
    block: int
    items: int
    size_args: tuple[str, ...] = ()
    items_sizes: str = ""
    work_definitions: tuple[SizeSymbol, ...] = field(init=False, repr=False, compare=False)
    """`items_sizes`, parsed (once, when the shape is made)."""

    def __post_init__(self) -> None:
        parsed = size_symbols_from_text(self.items_sizes) if self.items_sizes else ()
        object.__setattr__(self, "work_definitions", parsed)

    @property
    def sizes(self) -> int:
        """How many size arguments the kernel takes."""
        return len(self.size_args)

    def to_comment(self) -> str:
        launch = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        if not self.size_args:  # a static kernel's line is as it always was
            del launch["size_args"], launch["items_sizes"]
        return LAUNCH_PREFIX + json.dumps(launch, sort_keys=True)

    def work_items(self, sizes: Sequence[int]) -> int:
        """The work items of a launch at size arguments `sizes` (a static kernel's own)."""
        if not self.work_definitions:
            return self.items
        return work_items(self.work_definitions, dict(zip(self.size_args, sizes, strict=True)))

    def grid(self, items: int, sm_count: int, waves: int = GRID_WAVES) -> int:
        """Blocks of a launch of `items` work items on a GPU of `sm_count` SMs (a grid-stride
        kernel: `waves` waves of fully occupied SMs at most, 0 for no limit, and at most
        `MAX_GRID_STRIDE_THREADS` threads, which its index arithmetic assumes)."""
        if self.strategy == "rows" or items <= 1:
            return max(1, items)
        needed = math.ceil(items / self.block)
        resident = sm_count * max(1, MAX_THREADS_PER_SM // self.block)
        blocks = min(needed, resident * waves) if waves > 0 else needed
        return max(1, min(blocks, MAX_GRID_STRIDE_THREADS // self.block))

    @staticmethod
    def from_ptx(ptx: str) -> LaunchShape:
        first = ptx.split("\n", 1)[0]
        if not first.startswith(LAUNCH_PREFIX):
            raise CodegenError("not an xfuse PTX artifact (no launch line)")
        launch = json.loads(first[len(LAUNCH_PREFIX) :])
        launch["size_args"] = tuple(launch.get("size_args", ()))
        try:
            return LaunchShape(**launch)
        except ParseError as e:
            raise CodegenError(f"the launch line's work items do not parse: {e}") from e


def default_arch() -> str:
    """$XFUSE_CUDA_ARCH, else the compute capability of the current GPU, else sm_90."""
    if arch := os.environ.get("XFUSE_CUDA_ARCH"):
        return arch
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except ImportError:
        pass
    return DEFAULT_ARCH


def _single_kernel_module(module: ModuleOp, name: str) -> tuple[ModuleOp, func.FuncOp]:
    kernels = [op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == name]
    if not kernels:
        raise CodegenError(f"no kernel @{name} in the module")
    kernel = kernels[0].clone()
    return ModuleOp([kernel]), kernel


def _int_attr(kernel: func.FuncOp, name: str) -> int:
    attr = kernel.attributes[name]
    assert isinstance(attr, IntegerAttr)
    return attr.value.data


@dataclass(frozen=True)
class Tuning(GPUMapping):
    """Code-generation choices of the CUDA backend: the GPU mapping's (`GPUMapping`, the
    `gpu-map-parallel` pass's options) and ptxas's. `$XFUSE_CUDA_TUNING`, e.g.
    `unroll=4,row_threads=512`, overrides the defaults; non-default choices are part of the
    backend's target string, so cached kernels of other choices are not reused."""

    rows_min_blocks: int = 0
    """Blocks of a `rows` kernel that must fit on an SM at once: ptxas caps registers so
    (0: ptxas chooses). Forcing two blocks of 1024 threads (32 registers) makes layernorm
    spill and run slower; ptxas's own choice was the fastest for softmax, layernorm and RMSNorm
    (`python -m benchmarks.cuda_tune`)."""
    elementwise_min_blocks: int = 0
    """Likewise for grid-stride kernels."""

    @staticmethod
    def from_env() -> Tuning:
        text = os.environ.get("XFUSE_CUDA_TUNING", "").strip()
        if not text:
            return Tuning()
        values: dict[str, int] = {}
        for item in text.split(","):
            key, _, value = item.partition("=")
            if key.strip() not in Tuning.__dataclass_fields__ or not value.strip().isdigit():
                raise ValueError(f"XFUSE_CUDA_TUNING: expected name=int items, found '{item}'")
            values[key.strip()] = int(value)
        return Tuning(**values)

    def suffix(self) -> str:
        default = Tuning()
        changed = [f"{k}{v}" for k, v in self.__dict__.items() if getattr(default, k) != v]
        return "-" + "-".join(changed) if changed else ""

    def min_blocks(self, strategy: str, block: int) -> int:
        blocks = self.rows_min_blocks if strategy == "rows" else self.elementwise_min_blocks
        return min(blocks, MAX_THREADS_PER_SM // block)


def compile_kernel(module: ModuleOp, name: str, arch: str, tuning: Tuning | None = None) -> str:
    """The PTX artifact (launch line + PTX) of kernel `@name` of a module of loop IR."""
    tuning = tuning or Tuning()
    single, kernel = _single_kernel_module(module, name)
    try:
        map_kernel(kernel, single, tuning)
    except GPUMappingError as e:
        raise CodegenError(str(e)) from e
    strategy = kernel.attributes[STRATEGY_ATTR]
    assert isinstance(strategy, StringAttr)
    size_args = kernel.attributes.get(SIZE_ARGS_ATTR)
    items_sizes = kernel.attributes.get(ITEMS_SIZES_ATTR)
    shape = LaunchShape(
        name,
        strategy.data,
        _int_attr(kernel, BLOCK_ATTR),
        _int_attr(kernel, ITEMS_ATTR),
        tuple(a.data for a in size_args.data if isinstance(a, StringAttr))
        if isinstance(size_args, ArrayAttr)
        else (),
        items_sizes.data if isinstance(items_sizes, StringAttr) else "",
    )
    try:
        lower_kernels_to_nvvm(single)
    except Exception as e:  # an op the conversions do not know: the runtime falls back
        raise CodegenError(f"@{name}: lowering to NVVM failed: {e}") from e
    min_blocks = {name: tuning.min_blocks(shape.strategy, shape.block)}
    ptx = compile_to_ptx(single, {name: shape.block}, arch, min_blocks)
    return shape.to_comment() + "\n" + ptx


# ---------------------------------------------------------------------------------------------
# Loading and launching
# ---------------------------------------------------------------------------------------------


def _pycuda() -> Any:
    try:
        import pycuda.driver as driver
    except ImportError as e:
        raise CUDAUnavailable(
            "running CUDA kernels needs pycuda (pip install 'xfuse[cuda]'); "
            "PTX generation works without it"
        ) from e
    driver.init()
    return driver


@dataclass
class _DeviceModule:
    context: Any
    module: Any
    function: Any
    sm_count: int
    grid: tuple[int, int, int] = (1, 1, 1)
    default_stream: int = 0
    pack: struct.Struct | None = None
    """Packs the kernel's arguments (one pointer per buffer, then its i64 size arguments) for
    `_launch_kernel`."""
    on_streams: DriverFunction | None = None
    """The kernel loaded through the driver API, for launches on other streams (loaded on the
    first such launch)."""


class CUDAKernel:
    """A compiled kernel: called with CUDA tensors (inputs, then outputs)."""

    def __init__(self, ptx: str, name: str):
        self.name = name
        self.ptx = ptx
        self.shape = LaunchShape.from_ptx(ptx)
        if self.shape.kernel != name:
            raise CodegenError(f"artifact holds kernel '{self.shape.kernel}', not '{name}'")
        self._driver = _pycuda()
        self._modules: dict[int, _DeviceModule] = {}
        self._lock = threading.Lock()
        self._block = (self.shape.block, 1, 1)

    def _module_for(self, device: int) -> _DeviceModule:
        loaded = self._modules.get(device)
        if loaded is not None:
            return loaded
        with self._lock:
            if device not in self._modules:
                import torch

                driver = self._driver
                dev = driver.Device(device)
                context = dev.retain_primary_context()
                context.push()
                try:
                    module = driver.module_from_buffer(self.ptx.encode())
                    function = module.get_function(self.name)
                except driver.Error as e:
                    raise CUDALaunchError(f"CUDA kernel '{self.name}': loading failed: {e}") from e
                finally:
                    driver.Context.pop()
                sm_count = dev.get_attribute(driver.device_attribute.MULTIPROCESSOR_COUNT)
                loaded = _DeviceModule(context, module, function, sm_count)
                loaded.grid = (self.shape.grid(self.shape.items, sm_count), 1, 1)
                loaded.default_stream = torch.cuda.default_stream(device).cuda_stream
                self._modules[device] = loaded
            return self._modules[device]

    def __call__(self, buffers: Sequence[torch.Tensor]) -> None:
        if self.shape.sizes:
            raise CodegenError(
                f"CUDA kernel '{self.name}' takes {self.shape.sizes} size arguments: "
                "launch it with launch_sized"
            )
        self._run(buffers, ())

    def launch_sized(
        self, buffers: Sequence[torch.Tensor], sizes: Sequence[int], extent: int | None
    ) -> None:
        """Launch a kernel with symbolic sizes (`xfuse.backends.Kernel.launch_sized`) at the
        size arguments `sizes`: its grid is computed from them (`LaunchShape.work_items`),
        which covers its outer loop's `extent` as well."""
        if len(sizes) != self.shape.sizes:
            raise CodegenError(
                f"CUDA kernel '{self.name}' takes {self.shape.sizes} size arguments, "
                f"got {len(sizes)}"
            )
        self._run(buffers, sizes)

    def _run(self, buffers: Sequence[torch.Tensor], sizes: Sequence[int]) -> None:
        import torch

        if not buffers or not all(b.is_cuda for b in buffers):
            raise CUDAUnavailable(f"CUDA kernel '{self.name}' needs CUDA tensors")
        device = buffers[0].get_device()
        loaded = self._modules.get(device) or self._module_for(device)
        pointers = [b.data_ptr() for b in buffers]
        if any(p % POINTER_ALIGNMENT for p in pointers):
            self._call_misaligned(buffers, sizes)
            return
        items = self.shape.work_items(sizes) if sizes else self.shape.items
        if items == 0:
            return
        grid = loaded.grid if not sizes else (self.shape.grid(items, loaded.sm_count), 1, 1)
        # torch's current stream, as a raw handle (cheaper than a `torch.cuda.Stream` object).
        stream = torch._C._cuda_getCurrentRawStream(device)  # pyright: ignore[reportAttributeAccessIssue]
        if stream == loaded.default_stream:
            self._launch(loaded, grid, pointers, sizes)
            return
        # Another stream (a CUDA graph being captured, a user's stream): pycuda launches on the
        # legacy default stream only, so the driver API launches on that stream directly.
        if loaded.on_streams is None:
            loaded.on_streams = DriverFunction.load(self.ptx, self.name, device)
        loaded.on_streams.launch(grid, self._block, stream, [*pointers, *sizes])

    def launcher(self, count: int) -> Callable[..., None] | None:
        """This kernel's launch on `count` buffers (CUDA tensors: inputs, then outputs) for a
        program's runner to call in its own code (`xfuse.runtime.compiler.make_runner`), with
        the fewest Python steps a launch can take: the pointers read, packed and launched on
        torch's default stream. Any other case (a buffer off the GPU, a misaligned one,
        another stream, such as a capture's, a device whose module is not loaded yet) goes
        through `_run`. None for a kernel with size arguments or no work, or while launches
        are synchronised (`XFUSE_CUDA_SYNC=1`)."""
        if self.shape.sizes or not self.shape.items or SYNC_LAUNCHES:
            return None
        import torch

        run, modules, launch_packed = self._run, self._modules, self._launch_packed
        pack = struct.Struct("P" * count).pack
        raw_stream = torch._C._cuda_getCurrentRawStream  # pyright: ignore[reportAttributeAccessIssue]

        def launch(*buffers: torch.Tensor) -> None:
            pointers = [b.data_ptr() for b in buffers if b.is_cuda]
            device = buffers[0].get_device()
            loaded = modules.get(device)
            if (  # (the pointers' OR is aligned where each is: the alignment is a power of 2)
                loaded is None
                or len(pointers) != count
                or reduce(or_, pointers) % POINTER_ALIGNMENT
                or raw_stream(device) != loaded.default_stream
            ):
                run(buffers, ())
                return
            launch_packed(loaded, loaded.grid, pack(*pointers))

        return launch

    def _call_misaligned(self, buffers: Sequence[torch.Tensor], sizes: Sequence[int]) -> None:
        """Kernels assume 16-byte aligned buffers: misaligned ones (views with an offset) go
        through aligned copies, outputs copied back after the launch."""
        copies = [b if b.data_ptr() % POINTER_ALIGNMENT == 0 else b.clone() for b in buffers]
        self._run(copies, sizes)
        for buffer, copy in zip(buffers, copies, strict=True):
            if copy is not buffer:
                buffer.copy_(copy)

    def _launch(
        self,
        loaded: _DeviceModule,
        grid: tuple[int, int, int],
        pointers: list[int],
        sizes: Sequence[int],
    ) -> None:
        layout = "P" * len(pointers) + "q" * len(sizes)
        if loaded.pack is None or loaded.pack.format != layout:
            loaded.pack = struct.Struct(layout)
        self._launch_packed(loaded, grid, loaded.pack.pack(*pointers, *sizes))

    def _launch_packed(
        self, loaded: _DeviceModule, grid: tuple[int, int, int], params: bytes
    ) -> None:
        """The kernel launched on the legacy default stream with its packed parameters:
        `prepared_call`'s own launch, without its per-call block-shape and keyword handling."""
        driver = self._driver
        loaded.context.push()
        try:
            loaded.function._launch_kernel(grid, self._block, params, 0, None)
            if SYNC_LAUNCHES:
                loaded.context.synchronize()
        except driver.Error as e:
            raise CUDALaunchError(f"CUDA kernel '{self.name}' failed: {e}") from e
        finally:
            driver.Context.pop()


class CUDABackend:
    """Loop IR -> PTX for NVIDIA GPUs (LLVM NVPTX + libdevice), launched with pycuda."""

    def __init__(self, arch: str | None = None, tuning: Tuning | None = None):
        self.arch = arch or default_arch()
        self.tuning = tuning or Tuning.from_env()
        self.target = f"cuda-{self.arch}{self.tuning.suffix()}"

    def compile(self, module: ModuleOp, name: str) -> bytes:
        return compile_kernel(module, name, self.arch, self.tuning).encode()

    def load(self, artifact: bytes, name: str) -> CUDAKernel:
        return CUDAKernel(artifact.decode(), name)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m xfuse.backends.cuda [--arch sm_90] FILE`: the PTX artifact of every kernel of a
    file of loop IR, on stdout (what filecheck/backends/cuda checks)."""
    import argparse
    import sys

    from xfuse.ir.context import parse

    parser = argparse.ArgumentParser(prog="python -m xfuse.backends.cuda")
    parser.add_argument("file")
    parser.add_argument("--arch", default=DEFAULT_ARCH)
    args = parser.parse_args(argv)
    with open(args.file) as f:
        module = parse(f.read(), name=args.file)
    backend = CUDABackend(args.arch)
    try:
        for kernel in kernel_functions(module):
            sys.stdout.write(backend.compile(module, kernel.sym_name.data).decode())
    except CodegenError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
