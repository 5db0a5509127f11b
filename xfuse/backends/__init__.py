"""
Code generation backends. A backend turns one kernel (a `func.func` of loop IR, see
docs/contracts.md) into an artifact (bytes that the kernel cache may store on disk) and loads an
artifact into something the runtime can call.

    backend = get_backend("cpu")
    artifact = backend.compile(kernel_module, "kernel_0")   # slow: LLVM
    kernel = backend.load(artifact, "kernel_0")             # fast
    kernel([in0, in1, out0])                                # torch tensors: inputs then outputs
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from xdsl.dialects.builtin import ModuleOp

if TYPE_CHECKING:
    import torch


class Kernel(Protocol):
    name: str

    def __call__(self, buffers: Sequence[torch.Tensor]) -> None:
        """Run on contiguous tensors of the kernel's shapes: its inputs, then its outputs."""
        ...


class Backend(Protocol):
    target: str
    """Names the code the backend makes (e.g. "cpu-x86_64-avx2", "cuda-sm_90"): part of cache keys."""

    def compile(self, module: ModuleOp, name: str) -> bytes:
        """Compile the kernel `@name` of a module of loop IR to an artifact."""
        ...

    def load(self, artifact: bytes, name: str) -> Kernel:
        """Load an artifact made by `compile` (perhaps by another process)."""
        ...


def get_backend(device: str) -> Backend:
    """The backend for a device: "cpu" or "cuda" (clear errors where one cannot work)."""
    if device == "cpu":
        from xfuse.backends.cpu import CPUBackend

        return CPUBackend()
    if device.startswith("cuda"):
        from xfuse.backends.cuda import CUDABackend

        return CUDABackend()
    raise ValueError(f"unknown device '{device}' (expected 'cpu' or 'cuda')")
