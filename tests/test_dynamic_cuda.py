"""Programs with symbolic sizes on a CUDA GPU (docs/dynamic-shapes.md, "GPU"): one symbolic
compile whose kernels take their sizes as arguments, compiled once and matching eager at
every size, through `xfuse.compile(..., device="cuda", dynamic_shapes=...)` and
`torch.compile(dynamic=True)`. On the CPU: every kernel of those programs compiles to PTX that
ptxas accepts (what the GPU would load)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.export import Dim
from xdsl.dialects.builtin import ModuleOp

import xfuse
from tests.backends.test_cuda import ARCH, assemble, gpu
from tests.runtime.test_symbolic_program import Block
from tests.test_conv_net_strided_dynamic import IMAGES, resnet_like, strided_net
from xfuse import dynamo
from xfuse.backends.cuda import CUDABackend, LaunchShape
from xfuse.errors import DynamicShapesWarning, FallbackWarning
from xfuse.frontend import import_module
from xfuse.runtime.dynamic import DynamicProgram
from xfuse.runtime.symbolic import SymbolicProgram

BATCH = {"x": {0: Dim("batch", min=2, max=64)}}
IMAGE = ({0: Dim("b", min=2, max=64), 2: Dim("h", min=8, max=512), 3: Dim("w", min=8, max=512)},)
RESNET_IMAGE = (
    {0: Dim("b", min=2, max=64), 2: Dim("h", min=64, max=512), 3: Dim("w", min=64, max=512)},
)


POOL_PARITY_GUARD = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 13),
    reason="torch.export before 2.13 guards on the parity of a max pooling's input size, "
    "which no Dim range satisfies",
)


def strided_convs() -> torch.nn.Module:
    """Two stride-2 convolutions (batch norm, ReLU) and a global pooling, no max pooling."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 4),
    ).eval()


class PTXOnly(CUDABackend):
    """The CUDA backend without a GPU: each kernel compiled to PTX and assembled by ptxas; a
    'loaded' kernel is its launch shape (nothing launches)."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(ARCH)
        self.tmp_path = tmp_path
        self.shapes: list[LaunchShape] = []

    def compile(self, module: ModuleOp, name: str) -> bytes:
        ptx = super().compile(module, name)
        assemble(ptx.decode(), self.tmp_path)
        self.shapes.append(LaunchShape.from_ptx(ptx.decode()))
        return ptx

    def load(self, artifact: bytes, name: str) -> Any:
        return LaunchShape.from_ptx(artifact.decode())


@pytest.mark.parametrize(
    ("model", "example", "shapes"),
    [
        (Block, (5, 16), BATCH),
        (strided_convs, (2, 3, 32, 32), IMAGE),
        pytest.param(strided_net, (2, 3, 32, 32), IMAGE, marks=POOL_PARITY_GUARD),
        pytest.param(resnet_like, (2, 3, 64, 64), RESNET_IMAGE, marks=POOL_PARITY_GUARD),
    ],
    ids=["mlp", "strided_convs", "strided_net", "resnet_like"],
)
def test_every_kernel_of_a_symbolic_program_compiles_for_the_gpu(
    model: Any, example: tuple[int, ...], shapes: Any, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    program = import_module(model().eval(), (torch.randn(*example),), dynamic_shapes=shapes)
    backend = PTXOnly(tmp_path)
    compiled = SymbolicProgram(program.module, backend=backend, device="cuda")
    assert compiled.kernel_count == len(backend.shapes) >= 2
    symbolic = [shape for shape in backend.shapes if shape.sizes]
    assert symbolic and all(shape.items == -1 for shape in symbolic)


# ---------------------------------------------------------------------------------------------
# On the GPU
# ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@gpu
def test_an_mlp_compiles_once_for_every_batch_size_on_the_gpu(
    compiled_cuda_kernels: list[str],
) -> None:
    torch.manual_seed(0)
    model = Block().eval().cuda()
    program = xfuse.compile(
        model, (torch.randn(5, 16, device="cuda"),), device="cuda", dynamic_shapes=BATCH
    )
    assert isinstance(program, DynamicProgram)
    compiled = len(compiled_cuda_kernels)
    assert compiled == program.kernel_count >= 2
    with torch.no_grad():
        for batch in range(2, 65):
            x = torch.randn(batch, 16, device="cuda")
            out = program(x)
            assert out.device == x.device
            torch.testing.assert_close(out, model(x))
    assert len(compiled_cuda_kernels) == compiled  # no size compiled anything again


RESNET_IMAGES = [(64, 64), (65, 97), (80, 127), (128, 70)]


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize(
    ("model", "example", "shapes", "images", "batches", "least"),
    [
        pytest.param(strided_convs, (2, 3, 32, 32), IMAGE, IMAGES, (2, 3, 5, 64), 2),
        pytest.param(
            strided_net, (2, 3, 32, 32), IMAGE, IMAGES, (2, 3, 5, 64), 2, marks=POOL_PARITY_GUARD
        ),
        pytest.param(
            resnet_like,
            (2, 3, 64, 64),
            RESNET_IMAGE,
            RESNET_IMAGES,
            (2, 7),
            3,
            marks=POOL_PARITY_GUARD,
        ),
    ],
    ids=["strided_convs", "strided_net", "resnet_like"],
)
def test_a_conv_net_compiles_once_for_every_size_on_the_gpu(
    model: Any,
    example: tuple[int, ...],
    shapes: Any,
    images: list[tuple[int, int]],
    batches: tuple[int, ...],
    least: int,
    compiled_cuda_kernels: list[str],
) -> None:
    net = model().cuda()
    example_input = torch.randn(*example, device="cuda")
    program = xfuse.compile(net, (example_input,), device="cuda", dynamic_shapes=shapes)
    assert isinstance(program, DynamicProgram)
    compiled = len(compiled_cuda_kernels)
    assert compiled == program.kernel_count >= least
    with torch.no_grad():
        for height, width in images:
            for batch in batches:
                x = torch.randn(batch, 3, height, width, device="cuda")
                torch.testing.assert_close(program(x), net(x))
    assert len(compiled_cuda_kernels) == compiled  # no size compiled anything again
    assert program.specialised is None


@pytest.mark.gpu
@gpu
def test_a_cpu_tensor_is_refused_by_a_gpu_program() -> None:
    from xfuse.errors import InputDeviceError

    model = Block().eval().cuda()
    program = xfuse.compile(
        model, (torch.randn(5, 16, device="cuda"),), device="cuda", dynamic_shapes=BATCH
    )
    with pytest.raises(InputDeviceError, match="compiled for cuda") as e, torch.no_grad():
        program(torch.randn(5, 16))
    assert "\n" not in str(e.value)


@pytest.mark.gpu
@gpu
def test_a_gpu_program_takes_a_cpu_scalar_as_eager_does() -> None:
    """A 0-d CPU tensor among GPU tensors is a value to eager's GPU kernels; what eager
    computes from it alone, it returns on the CPU."""

    def fn(x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tanh(x * s), s * 2

    x, s = torch.randn(5, 16, device="cuda"), torch.tensor(0.5)
    program = xfuse.compile(fn, (x, s), device="cuda", dynamic_shapes=({0: BATCH["x"][0]}, None))
    assert isinstance(program, DynamicProgram)
    for batch in (2, 9, 33):
        x, s = torch.randn(batch, 16, device="cuda"), torch.tensor(float(batch))
        got, want = program(x, s), fn(x, s)
        for g, w in zip(got, want, strict=True):
            assert g.device == w.device
            torch.testing.assert_close(g, w)


@pytest.mark.gpu
@gpu
def test_torch_compile_dynamic_true_compiles_once_on_the_gpu(
    compiled_cuda_kernels: list[str],
) -> None:
    torch.manual_seed(0)
    model = Block().eval().cuda()
    torch._dynamo.reset()
    start = dict(dynamo.COMPILES)
    compiled = torch.compile(model, backend="xfuse", dynamic=True)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("error", DynamicShapesWarning)
            warnings.simplefilter("error", FallbackWarning)
            x = torch.randn(2, 16, device="cuda")
            torch.testing.assert_close(compiled(x), model(x))
            kernels = len(compiled_cuda_kernels)
            assert kernels >= 1
            for batch in range(3, 10):
                x = torch.randn(batch, 16, device="cuda")
                torch.testing.assert_close(compiled(x), model(x))
        assert len(compiled_cuda_kernels) == kernels  # every later size ran the same kernels
        symbolic = dynamo.COMPILES["symbolic"] - start.get("symbolic", 0)
        per_shape = dynamo.COMPILES["per-shape"] - start.get("per-shape", 0)
        assert symbolic == 1 and per_shape == 0
    finally:
        torch._dynamo.reset()
