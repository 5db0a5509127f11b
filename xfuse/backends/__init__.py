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
from typing import Protocol

import torch
from xdsl.dialects.builtin import ModuleOp

from xfuse.errors import CUDAUnavailable, InvalidArgumentError


class Kernel(Protocol):
    name: str

    def __call__(self, buffers: Sequence[torch.Tensor]) -> None:
        """Run on contiguous tensors of the kernel's shapes: its inputs, then its outputs."""
        ...

    def launch_sized(
        self, buffers: Sequence[torch.Tensor], sizes: Sequence[int], extent: int | None
    ) -> None:
        """Run a kernel with symbolic sizes (docs/dynamic-shapes.md) on its buffers, as
        `__call__` does, at `sizes`, the values of its size arguments (`xfuse.size_args`).
        `extent` is the trip count of its outer parallel loop where that is a size symbol
        (`xfuse.extent`'s, at these sizes), None where the loop's extent is static: the CPU
        splits that loop over threads; a CUDA launch computes its grid from `sizes` alone."""
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


SUPPORTED_DEVICES = ("cpu", "cuda")
"""The device types xfuse compiles for (`cuda` with an index or not: `cuda:1`)."""


def check_device(device: str | torch.device) -> torch.device:
    """The device asked for, or a one-line error: an `InvalidArgumentError` for one xfuse does
    not compile for, `CUDAUnavailable` for CUDA without a CUDA build of torch and a GPU
    (generating PTX needs neither: see xfuse.backends.cuda)."""
    supported = " or ".join(f"'{d}'" for d in SUPPORTED_DEVICES)
    if not isinstance(device, str | torch.device):
        raise InvalidArgumentError(
            f"device must be a string or torch.device ({supported}), got a {type(device).__name__}"
        )
    try:
        parsed = torch.device(device)
    except RuntimeError:  # torch's own "Invalid device string", several lines long
        parsed = None
    if parsed is None or parsed.type not in SUPPORTED_DEVICES:
        raise InvalidArgumentError(
            f"unknown device '{device}': xfuse compiles for {supported} (or 'cuda:N')"
        )
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise CUDAUnavailable(
            f"device '{device}' was asked for, but torch sees no CUDA device here "
            f"(torch {torch.__version__}, {'a CPU build' if torch.version.cuda is None else 'no GPU'})"
        )
    return parsed
