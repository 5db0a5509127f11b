"""
The few CUDA driver calls xfuse makes itself, through ctypes: load a PTX module into a device's
primary context (torch's), and launch a kernel on a given stream.

pycuda launches on the legacy default stream only; a launch that must go into another stream
(torch's current stream while a CUDA graph is being captured, or a user's stream) comes here,
with the raw stream handle torch gives (`torch.cuda.current_stream().cuda_stream`).

    function = DriverFunction.load(ptx, "forward_k0", device=0)
    function.launch(grid=(g, 1, 1), block=(256, 1, 1), stream=handle, pointers=[p0, p1])
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from xfuse.errors import CUDALaunchError, CUDAUnavailable


@cache
def _libcuda() -> ctypes.CDLL:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise CUDAUnavailable(f"the CUDA driver library cannot be loaded: {e}") from e


def _check(result: int, what: str) -> None:
    if result == 0:
        return
    text = ctypes.c_char_p()
    _libcuda().cuGetErrorString(result, ctypes.byref(text))
    message = text.value.decode() if text.value else f"error {result}"
    raise CUDALaunchError(f"{what} failed: {message}")


@cache
def primary_context(device: int) -> int:
    """The primary context of `device` (the one torch uses), retained for the process."""
    lib = _libcuda()
    _check(lib.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    _check(lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
    context = ctypes.c_void_p()
    _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), dev), "cuDevicePrimaryCtxRetain")
    assert context.value is not None
    return context.value


class _Current:
    """`with _Current(ctx):` makes `ctx` the thread's current context for the block."""

    def __init__(self, context: int) -> None:
        self.context = context

    def __enter__(self) -> None:
        _check(_libcuda().cuCtxPushCurrent_v2(ctypes.c_void_p(self.context)), "cuCtxPushCurrent")

    def __exit__(self, *exc: object) -> None:
        popped = ctypes.c_void_p()
        _check(_libcuda().cuCtxPopCurrent_v2(ctypes.byref(popped)), "cuCtxPopCurrent")


@dataclass(frozen=True)
class DriverFunction:
    """A kernel loaded with the driver API, launched on any stream."""

    name: str
    context: int
    module: int
    function: int

    @staticmethod
    def load(ptx: str, name: str, device: int) -> DriverFunction:
        lib = _libcuda()
        context = primary_context(device)
        module, function = ctypes.c_void_p(), ctypes.c_void_p()
        image = ctypes.c_char_p(ptx.encode() + b"\0")
        with _Current(context):
            _check(lib.cuModuleLoadData(ctypes.byref(module), image), f"loading kernel '{name}'")
            _check(
                lib.cuModuleGetFunction(ctypes.byref(function), module, name.encode()),
                f"finding kernel '{name}'",
            )
        assert module.value is not None and function.value is not None
        return DriverFunction(name, context, module.value, function.value)

    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        stream: int,
        pointers: Sequence[int],
    ) -> None:
        """Launch with one pointer argument per buffer, on the stream with raw handle `stream`."""
        values = (ctypes.c_void_p * len(pointers))(*pointers)
        base = ctypes.addressof(values)
        size = ctypes.sizeof(ctypes.c_void_p)
        params = (ctypes.c_void_p * len(pointers))(*(base + i * size for i in range(len(pointers))))
        with _Current(self.context):
            _check(
                _libcuda().cuLaunchKernel(
                    ctypes.c_void_p(self.function),
                    *(ctypes.c_uint(g) for g in grid),
                    *(ctypes.c_uint(b) for b in block),
                    ctypes.c_uint(0),
                    ctypes.c_void_p(stream),
                    params,
                    None,
                ),
                f"CUDA kernel '{self.name}'",
            )
