"""Programs with symbolic sizes on a CUDA GPU (docs/dynamic-shapes.md, "GPU"): one symbolic
compile whose kernels take their sizes as arguments, compiled once and matching eager at
every size, through `xfuse.compile(..., device="cuda", dynamic_shapes=...)` and
`torch.compile(dynamic=True)`; each shape captured as a CUDA graph once and replayed after, a
bounded number of shapes (`xfuse.runtime.shape_graphs`). On the CPU: every kernel of those
programs compiles to PTX that ptxas accepts (what the GPU would load)."""

from __future__ import annotations

import copy
import re
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
from xfuse.dialects import graph
from xfuse.errors import DynamicShapesWarning, FallbackWarning
from xfuse.frontend import import_module
from xfuse.pipeline import pipeline
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.cuda_graphs import GraphRunner
from xfuse.runtime.dynamic import DynamicProgram
from xfuse.runtime.shape_graphs import GRAPH_SHAPES_ENV, MAX_GRAPH_SHAPES
from xfuse.runtime.symbolic import SymbolicProgram, default_passes
from xfuse.testing.fuzz.compare import compare_outputs

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
    compiled = SymbolicProgram(
        program.module, backend=backend, device="cuda", cache=KernelCache(None)
    )
    assert compiled.kernel_count == len(backend.shapes) >= 2
    symbolic = [shape for shape in backend.shapes if shape.sizes]
    assert symbolic and all(shape.items == -1 for shape in symbolic)


def test_a_gpu_program_knows_its_scalar_arguments(tmp_path: Path) -> None:
    """The arguments where a call may pass a CPU scalar (0-d ones) are found once, when the
    program is built."""

    def fn(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * s)

    x, s = torch.randn(5, 16), torch.tensor(0.5)
    dynamic = ({0: BATCH["x"][0]}, None)
    program = DynamicProgram(fn, (x, s), dynamic, backend=PTXOnly(tmp_path), device="cuda:0")
    assert program.scalar_args == [1]
    assert DynamicProgram(fn, (x, s), dynamic).scalar_args == []  # on the CPU: none


class LMHead(torch.nn.Module):
    """A language model's norm and head over a vocabulary of 1003 tokens: in bf16 its rows are
    no whole number of 16-byte vectors (GPT-2's 50,257 at a test's size)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(64)
        self.head = torch.nn.Linear(64, 1003, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(x))


SEQUENCE = {"x": {1: Dim("length", min=2, max=512)}}


def lm_head() -> LMHead:
    torch.manual_seed(0)
    return LMHead().to(torch.bfloat16).eval()


def test_a_bf16_head_of_symbolic_length_runs_padded_on_the_gpu() -> None:
    """On CUDA a symbolic program pads a 16-bit product's unaligned rows (`pad-matmul`, as the
    static pipeline does) and slices them back along the static vocabulary, at every length:
    the GPU pipeline's program, run on the CPU, gives eager's logits."""
    model = lm_head()
    example = (torch.randn(2, 7, 64, dtype=torch.bfloat16),)
    program = import_module(model, example, dynamic_shapes=SEQUENCE)
    module = program.module.clone()
    passes = default_passes(torch.device("cuda"))
    pipeline(passes).apply(module)
    pads = [op for op in module.walk() if isinstance(op, graph.PadOp)]
    assert [graph.shape_of(p.result) for p in pads] == [(1008, 64)]
    assert default_passes(torch.device("cpu")) != passes  # the CPU's GEMMs take any row
    compiled = SymbolicProgram(program.module, passes=passes)
    state = dict(model.named_parameters())
    names = program.param_names
    with torch.no_grad():
        for length in (2, 7, 33, 100):
            x = torch.randn(2, length, 64, dtype=torch.bfloat16)
            arguments = [
                state[names[i]] if i in names else x for i in range(len(compiled.arguments))
            ]
            (logits,) = compiled(*arguments)
            assert logits.shape == (2, length, 1003) and logits.is_contiguous()
            torch.testing.assert_close(logits, model(x))


# ---------------------------------------------------------------------------------------------
# On the GPU
# ---------------------------------------------------------------------------------------------


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


def _slice_scale(x: torch.Tensor) -> torch.Tensor:
    return x[..., :7] * 2 + 1  # rows of 7: flat lanes


def _rows_scale(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x) * 3  # rows of a runtime length: flat lanes


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize(
    ("f", "example", "shapes", "sizes"),
    [
        (
            _slice_scale,
            (2, 3, 8),
            ({0: Dim("b", min=2, max=64), 1: Dim("s", min=2, max=512)},),
            [(2, 2), (2, 3), (3, 5), (7, 9), (9, 511)],
        ),
        (
            _rows_scale,
            (2, 3),
            ({0: Dim("r", min=2, max=4096), 1: Dim("c", min=2, max=4096)},),
            [(2, 2), (3, 3), (5, 7), (33, 65), (1001, 999)],
        ),
    ],
    ids=["slice", "rows"],
)
def test_flat_lanes_of_symbolic_kernels_cover_every_element_at_every_size(
    f: Any,
    example: tuple[int, ...],
    shapes: Any,
    sizes: list[tuple[int, ...]],
    dtype: torch.dtype,
    compiled_cuda_kernels: list[str],
) -> None:
    """Kernels whose rows take no vector run chunks of the flattened space and the part chunk
    after them: every element right at sizes whose element count is below a chunk, a
    multiple of one, and neither."""
    program = xfuse.compile(
        f,
        (torch.randn(*example, device="cuda", dtype=dtype),),
        device="cuda",
        dynamic_shapes=shapes,
    )
    assert isinstance(program, DynamicProgram)
    compiled = len(compiled_cuda_kernels)
    for size in sizes:
        x = torch.randn(*size, *example[len(size) :], device="cuda", dtype=dtype)
        torch.testing.assert_close(program(x), f(x))
    assert len(compiled_cuda_kernels) == compiled


@gpu
@pytest.mark.parametrize("columns", [1024, 7], ids=["vectors", "flat-lanes"])
def test_a_symbolic_kernel_beyond_2_31_elements_runs_its_64_bit_loop(
    columns: int, compiled_cuda_kernels: list[str]
) -> None:
    """One kernel for every size: 32-bit index arithmetic at a small size, 64-bit past 2^31
    elements, both right at the first and last elements (rows of 1024 take vectors; rows of 7,
    flat lanes and a part chunk)."""
    program = xfuse.compile(
        lambda a: a * 2 + 1,
        (torch.randn(4, columns, device="cuda", dtype=torch.float16),),
        device="cuda",
        dynamic_shapes=({0: Dim("r", min=2, max=2**30)},),
    )
    assert isinstance(program, DynamicProgram)
    compiled = len(compiled_cuda_kernels)
    small = torch.randn(33, columns, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(program(small), small * 2 + 1)
    rows = 2**31 // columns + 3
    x = torch.empty(rows, columns, device="cuda", dtype=torch.float16)
    x[:64].normal_()
    x[-64:].normal_()
    y = program(x)
    torch.cuda.synchronize()
    torch.testing.assert_close(y[:64], x[:64] * 2 + 1)
    torch.testing.assert_close(y[-64:], x[-64:] * 2 + 1)
    assert len(compiled_cuda_kernels) == compiled
    del x, y
    torch.cuda.empty_cache()


@gpu
def test_a_gpu_programs_launches_run_outside_torchs_device_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch's device mode (`with device:`) sends every torch call through a Python hop: the
    step loop sets it around the torch calls that make tensors alone, not around launches."""
    from xfuse.runtime import symbolic

    modes: list[int] = []
    launch = symbolic._Launch.run  # pyright: ignore[reportPrivateUsage]

    def recording(self: Any, values: Any, sizes: Any) -> None:
        modes.append(torch._C._len_torch_function_stack())  # pyright: ignore[reportPrivateUsage]
        launch(self, values, sizes)

    monkeypatch.setattr(symbolic._Launch, "run", recording)  # pyright: ignore[reportPrivateUsage]
    monkeypatch.setenv("XFUSE_CUDA_GRAPHS", "0")
    model = Block().eval().cuda()
    program = xfuse.compile(
        model, (torch.randn(5, 16, device="cuda"),), device="cuda", dynamic_shapes=BATCH
    )
    x = torch.randn(9, 16, device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(program(x), model(x))
    assert modes and set(modes) == {0}


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


@gpu
def test_a_kept_plan_serves_no_call_of_another_device_or_strides() -> None:
    """After calls whose plan is kept (`DynamicProgram.plans`), a CPU tensor of their shape is
    refused as without one, and an input of their shape but other strides runs with a graph
    of its own; every call matches eager."""
    from xfuse.errors import InputDeviceError

    torch.manual_seed(0)
    model = Block().eval().cuda()
    program = xfuse.compile(
        model, (torch.randn(5, 16, device="cuda"),), device="cuda", dynamic_shapes=BATCH
    )
    assert program.graphs is not None
    with torch.no_grad():
        x = torch.randn(5, 16, device="cuda")
        for _ in range(3):  # warmed up, captured, replayed
            torch.testing.assert_close(program(x), model(x))
        assert len(program.plans) == 1
        with pytest.raises(InputDeviceError, match="compiled for cuda") as e:
            program(x.cpu())
        assert "\n" not in str(e.value)
        strided = torch.randn(16, 5, device="cuda").t()
        for _ in range(3):
            torch.testing.assert_close(program(strided), model(strided))
    assert len(program.plans) == 2 and len(program.graphs.runners) == 2


@gpu
def test_a_cpu_scalar_and_a_gpu_scalar_of_one_shape_each_run_as_eager_does() -> None:
    """A 0-d tensor on the CPU, then on the GPU, at the same sizes: each call's plan says
    which arguments are CPU scalars (what eager computes from one alone, it returns on the
    CPU), none is taken for the other's."""

    def fn(x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tanh(x * s), s * 2

    x = torch.randn(5, 16, device="cuda")
    program = xfuse.compile(
        fn, (x, torch.tensor(0.5)), device="cuda", dynamic_shapes=({0: BATCH["x"][0]}, None)
    )
    assert isinstance(program, DynamicProgram)
    for value in (0.5, 1.5, -2.0):
        for device in ("cpu", "cuda", "cpu"):
            s = torch.tensor(value, device=device)
            got, want = program(x, s), fn(x, s)
            for g, w in zip(got, want, strict=True):
                assert g.device == w.device
                torch.testing.assert_close(g, w)
    assert len(program.plans) == 2


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


# ---------------------------------------------------------------------------------------------
# CUDA graphs per shape (xfuse/runtime/shape_graphs.py)
# ---------------------------------------------------------------------------------------------


def runner_at(program: DynamicProgram, *sizes: int) -> GraphRunner[Any]:
    """The CUDA-graph runner of the shape whose first size symbols are `sizes`."""
    assert program.graphs is not None
    runners = program.graphs.runners
    (runner,) = [r for key, r in runners.items() if key[0][: len(sizes)] == sizes]  # type: ignore[index]
    return runner


@gpu
def test_an_mlp_captures_each_batch_size_once_and_replays_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each batch size warms up at its first call, captures at its second and replays from
    then on; past the bound (3 shapes here) a batch size runs with plain launches, and every
    call matches eager."""
    monkeypatch.setenv(GRAPH_SHAPES_ENV, "3")
    torch.manual_seed(0)
    model = Block().eval().cuda()
    program = xfuse.compile(
        model, (torch.randn(5, 16, device="cuda"),), device="cuda", dynamic_shapes=BATCH
    )
    graphs = program.graphs
    assert graphs is not None and graphs.limit == 3 and graphs.reason is None
    with torch.no_grad():
        for batch in (2, 7, 33):
            for call in range(1, 4):
                x = torch.randn(batch, 16, device="cuda")
                torch.testing.assert_close(program(x), model(x))
                runner = runner_at(program, batch)
                assert runner.reason is None
                assert (runner.captures, runner.replays) == (min(call - 1, 1), call - 1)
            assert runner.handed == runner.replays  # outputs dropped at once: no copy
        assert graphs.captures == 3 and graphs.passed == 0
        for batch in (4, 64, 4, 7):  # past the bound but for 7, which replays its graph
            x = torch.randn(batch, 16, device="cuda")
            torch.testing.assert_close(program(x), model(x))
    assert graphs.passed == 3 and len(graphs.runners) == 3 and graphs.captures == 3
    assert runner_at(program, 7).replays == 3


@gpu
def test_a_conv_net_captures_each_image_shape_once_and_replays_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two stride-2 convolutions with batch, height and width symbolic: each (batch, height,
    width) captures once and replays; past the bound (2 shapes) calls run with plain launches;
    every call matches eager."""
    monkeypatch.setenv(GRAPH_SHAPES_ENV, "2")
    net = strided_convs().cuda()
    program = xfuse.compile(
        net, (torch.randn(2, 3, 32, 32, device="cuda"),), device="cuda", dynamic_shapes=IMAGE
    )
    assert program.graphs is not None
    shapes = [(2, 32, 32), (3, 40, 47), (2, 32, 32), (3, 40, 47), (5, 32, 32), (2, 32, 32)]
    held = []  # a new address at every call: each input is copied into its shape's graph
    with torch.no_grad():
        for batch, height, width in [*shapes, (5, 32, 32), (3, 40, 47)]:
            x = torch.randn(batch, 3, height, width, device="cuda")
            held.append(x)
            torch.testing.assert_close(program(x), net(x))
    graphs = program.graphs
    assert len(graphs.runners) == 2 and graphs.passed == 2  # (5, 32, 32) twice
    first, second = runner_at(program, 2, 32, 32), runner_at(program, 3, 40, 47)
    assert first.reason is None and second.reason is None
    assert (first.captures, first.replays) == (1, 2)
    assert (second.captures, second.replays) == (1, 2)


@gpu
def test_outputs_kept_across_shapes_keep_their_values() -> None:
    """Every output kept while two batch sizes alternate: each shape's ring captures again
    rather than overwrite memory the caller holds (its third capture copies out), and every
    kept output is still its call's value at the end."""
    torch.manual_seed(0)
    model = Block().eval().cuda()
    program = xfuse.compile(
        model, (torch.randn(5, 16, device="cuda"),), device="cuda", dynamic_shapes=BATCH
    )
    inputs = [torch.randn(batch, 16, device="cuda") for batch in (2, 3) * 5]
    with torch.no_grad():
        kept = [program(x) for x in inputs]
        for got, x in zip(kept, inputs, strict=True):
            torch.testing.assert_close(got, model(x))
    for batch in (2, 3):
        runner = runner_at(program, batch)
        assert runner.captures == 3 and runner.replays == 4 and runner.handed == 2


def _views_and_slices(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = torch.tanh(x) * 2  # returned only through its views: a hidden output
    return y.view(-1), y[0], (x + 1)[:, -1], x.sum(1, keepdim=True).expand(-1, 3)


@gpu
def test_views_of_a_hidden_output_and_gapped_outputs_at_every_shape_and_replay() -> None:
    """Views of an intermediate eager does not return share its memory, and slices and
    expands of intermediates keep eager's strides, at each batch size, captured and replayed:
    every kept output still its call's value at the end."""
    x = torch.randn(5, 16, device="cuda")
    program = xfuse.compile(_views_and_slices, (x,), device="cuda", dynamic_shapes=BATCH)
    assert isinstance(program, DynamicProgram) and sorted(program.strided) == [2, 3]
    inputs = [torch.randn(batch, 16, device="cuda") for batch in (2, 7) * 3]
    kept = [program(x) for x in inputs]
    for got, x in zip(kept, inputs, strict=True):
        want = _views_and_slices(x)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)
            assert g.stride() == w.stride()
        assert [g.storage_offset() for g in got[:2]] == [w.storage_offset() for w in want[:2]]
        assert got[0].untyped_storage().data_ptr() == got[1].untyped_storage().data_ptr()
    assert runner_at(program, 7).replays >= 1


@gpu
def test_a_replay_reads_the_calls_cpu_scalar() -> None:
    """A CPU scalar is moved to the device and copied into the graph like any input: a
    replay at the same batch size with another value computes with that value."""

    def fn(x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tanh(x * s), s * 2

    x, s = torch.randn(5, 16, device="cuda"), torch.tensor(0.5)
    program = xfuse.compile(fn, (x, s), device="cuda", dynamic_shapes=({0: BATCH["x"][0]}, None))
    assert isinstance(program, DynamicProgram)
    for batch in (3, 9):
        for value in (0.25, 1.5, -2.0, 3.0):
            x, s = torch.randn(batch, 16, device="cuda"), torch.tensor(value)
            got, want = program(x, s), fn(x, s)
            for g, w in zip(got, want, strict=True):
                assert g.device == w.device
                torch.testing.assert_close(g, w)
            del got, want  # released before the next call: one capture serves every replay
        runner = runner_at(program, batch)
        assert runner.reason is None and (runner.captures, runner.replays) == (1, 3)


@gpu
def test_torch_compile_dynamic_captures_per_shape_and_reads_parameters_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`torch.compile(dynamic=True)` lifts the parameters into graph inputs: the symbolic
    program's graphs read them where they are (an in-place update is what the next replay
    reads, with no capture), and copy the input alone."""
    made: list[DynamicProgram] = []
    real = dynamo.symbolic_program

    def recording(gm: torch.fx.GraphModule, example_inputs: Any, *rest: Any) -> Any:
        program, inputs = real(gm, example_inputs, *rest)
        made.append(program)
        return program, inputs

    monkeypatch.setattr(dynamo, "symbolic_program", recording)
    torch.manual_seed(0)
    model = Block().eval().cuda()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="xfuse", dynamic=True)
    try:
        with torch.no_grad():
            for batch in (3, 3, 3, 6, 6):
                x = torch.randn(batch, 16, device="cuda")
                torch.testing.assert_close(compiled(x), model(x))
            (program,) = made
            runner = runner_at(program, 3)
            assert runner.reason is None and (runner.captures, runner.replays) == (1, 2)
            (captured,) = runner._ring
            assert sorted(captured.in_place) == program.in_place
            assert len(program.in_place) == len(list(model.parameters()))
            model.l2.bias.add_(1.0)
            x = torch.randn(3, 16, device="cuda")
            torch.testing.assert_close(compiled(x), model(x))
            assert runner.captures == 1 and runner.replays == 3
    finally:
        torch._dynamo.reset()


@gpu
def test_graphs_of_a_symbolic_program_can_be_turned_off_and_explain_names_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(GRAPH_SHAPES_ENV, raising=False)
    torch.manual_seed(0)
    model = Block().eval().cuda()
    x = torch.randn(5, 16, device="cuda")
    off = xfuse.compile(model, (x,), device="cuda", dynamic_shapes=BATCH, cuda_graphs=False)
    assert off.graphs is None
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(off(x), model(x))
    monkeypatch.setenv("XFUSE_CUDA_GRAPHS", "0")
    assert xfuse.compile(model, (x,), device="cuda", dynamic_shapes=BATCH).graphs is None
    monkeypatch.delenv("XFUSE_CUDA_GRAPHS")
    status = xfuse.explain(model, (x,), device="cuda", dynamic_shapes=BATCH, quiet=True).cuda_graph
    assert status is not None and "captured per shape" in status
    assert f"at most {MAX_GRAPH_SHAPES} shapes" in status


@gpu
def test_a_bf16_head_of_symbolic_length_matches_eager_on_the_gpu(
    compiled_cuda_kernels: list[str],
) -> None:
    model = lm_head().cuda()
    example = (torch.randn(2, 7, 64, dtype=torch.bfloat16, device="cuda"),)
    program = xfuse.compile(model, example, device="cuda", dynamic_shapes=SEQUENCE)
    assert isinstance(program, DynamicProgram)
    explanation = str(xfuse.explain(model, example, device="cuda", dynamic_shapes=SEQUENCE))
    ops = next(line for line in explanation.splitlines() if line.startswith("ops: "))
    assert re.search(r"\bpad\b", ops) and re.search(r"\bslice\b", ops), ops
    compiled = len(compiled_cuda_kernels)
    wide = copy.deepcopy(model).double()
    with torch.no_grad():
        for length in (2, 7, 33, 100, 512):
            x = torch.randn(2, length, 64, dtype=torch.bfloat16, device="cuda")
            logits = program(x)
            assert logits.shape == (2, length, 1003) and logits.is_contiguous()
            # cuBLAS sums a padded product's dot products in another order than the unpadded
            # one's: the rule for reordered sums, against the head in f64
            reference = wide(x.double())
            assert compare_outputs([logits], [model(x)], [reference]) is None
    assert len(compiled_cuda_kernels) == compiled


def _nhwc_net() -> torch.nn.Module:
    """A stem convolution, two ConvNeXt blocks (7x7 depthwise convolutions: library calls or
    stencils, as measured) and a widening convolution (no strides: torch.export before 2.13
    guards on the parity of strided windows' sizes)."""
    from tests.passes.transforms.test_channels_last import ConvNeXtBlock

    torch.manual_seed(0)
    stem = torch.nn.Conv2d(3, 16, 3, padding=1)
    down = torch.nn.Conv2d(16, 32, 3, padding=1)
    return torch.nn.Sequential(stem, ConvNeXtBlock(16), ConvNeXtBlock(16), down).eval()


def _convolution_sources(program: DynamicProgram) -> list[str]:
    """What each convolution of the program's fused `@forward` reads: the torch op that made
    its input, or `graph` for a kernel's result or an argument."""
    from xfuse.interpreters.graph import find_function
    from xfuse.passes.transforms.channels_last import convolutions

    block = find_function(program.compiled.fused, "forward").body.block
    sources = [c.op.operands[c.input_index].owner for c in convolutions(block)]
    return [s.target.data if isinstance(s, graph.TorchCallOp) else "graph" for s in sources]


@gpu
def test_a_bf16_conv_net_keeps_its_activations_channels_last_at_every_size() -> None:
    """On CUDA a symbolic program of bf16 convolutions goes channels-last as a static one does
    (the layout decided at the size hints): every convolution reads a channels-last view or
    copy, cuDNN's NHWC kernels; the one compile matches eager at every size (no further from
    the net in f64 than eager is).
    `channels_last=False` leaves the layout alone."""
    net = _nhwc_net().cuda().to(torch.bfloat16)
    example = torch.randn(2, 3, 32, 40, device="cuda", dtype=torch.bfloat16)
    program = xfuse.compile(net, (example,), device="cuda", dynamic_shapes=IMAGE)
    assert isinstance(program, DynamicProgram)
    sources = _convolution_sources(program)
    assert sources[0] == "aten.clone.default"  # the input, once
    assert set(sources[1:]) <= {"aten.permute.default", "aten.convolution.default"}
    wide = copy.deepcopy(net).double()
    with torch.no_grad():
        for batch, height, width in [(2, 32, 40), (5, 48, 24), (9, 64, 64)]:
            x = torch.randn(batch, 3, height, width, device="cuda", dtype=torch.bfloat16)
            # cuDNN's NHWC kernels and the fused norms round bf16 sums in another order than
            # eager's: the rule for reordered sums, against the net in f64
            reference = wide(x.double())
            assert compare_outputs([program(x)], [net(x)], [reference]) is None
    plain = xfuse.compile(net, (example,), device="cuda", dynamic_shapes=IMAGE, channels_last=False)
    assert isinstance(plain, DynamicProgram)
    assert set(_convolution_sources(plain)) == {"graph"}


def _sized_views_tails_and_transposed(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    b = x.shape[0]
    t = x.t() * 2  # returned only through its views, in eager's transposed order
    tail = y[y.shape[0] - b :] + x  # a slice from a size of the call to the end
    return x.view(b, 4, 4), t[0], t[:, 1], tail.exp()


@gpu
def test_sized_views_transposed_intermediates_and_tails_at_every_shape_and_replay() -> None:
    """Views to sizes of the call, views of a transposed intermediate and a tail sliced at a
    difference of sizes: one symbolic program at each size, captured and replayed, with
    eager's values, strides and offsets, views sharing memory as in eager."""
    shapes = {"x": {0: Dim("a", min=2, max=64)}, "y": {0: Dim("b", min=2, max=128)}}
    x, y = torch.randn(3, 16, device="cuda"), torch.randn(7, 16, device="cuda")
    program = xfuse.compile(
        _sized_views_tails_and_transposed, (x, y), device="cuda", dynamic_shapes=shapes
    )
    assert isinstance(program, DynamicProgram)
    for a, b in [(3, 7), (5, 9), (3, 7), (5, 9), (3, 7)]:
        x, y = torch.randn(a, 16, device="cuda"), torch.randn(b, 16, device="cuda")
        got, want = program(x, y), _sized_views_tails_and_transposed(x, y)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)
            assert g.stride() == w.stride() and g.storage_offset() == w.storage_offset()
        assert got[0].data_ptr() == x.data_ptr()
        assert got[1].untyped_storage().data_ptr() == got[2].untyped_storage().data_ptr()


@gpu
def test_a_gpt2_trains_at_every_sequence_length_on_the_gpu() -> None:
    """A GPT-2 trained with `dynamic=True` on the GPU in strict mode: its masked attention is
    torch's memory-efficient kernel, whose bias the program makes contiguous at lengths of
    unaligned rows (9, 17), where the kernel reads whole vectors (`aligned_bias`): eager's
    losses and gradients at every (batch, sequence) size, one program per part."""
    from tests.test_training_dynamic import Logits

    torch.manual_seed(1)
    model = Logits().cuda()
    reference, exact = copy.deepcopy(model), copy.deepcopy(model).double()
    net = torch.compile(model, backend="xfuse", dynamic=True, options={"fallback": "error"})
    start = dict(dynamo.COMPILES)
    for b, t in ((2, 3), (3, 9), (2, 17)):
        ids = torch.randint(0, 128, (b, t), device="cuda")
        grads = []
        for m in (net, reference, exact):
            loss = m(ids).pow(2).mean()
            grads.append(torch.autograd.grad(loss, list(m.parameters())))
        assert compare_outputs(*grads) is None, (b, t)
    compiled = {k: v - start.get(k, 0) for k, v in dynamo.COMPILES.items()}
    assert compiled.get("per-shape", 0) == 0 and compiled.get("symbolic") == 2, compiled
