"""Channels-last programs (`xfuse.compile(..., channels_last=...)`, the `channels-last` pass):
values and output strides as eager's, and between the first and the last convolution no layout
change at all: every convolution reads and writes channels-last tensors, every kernel reads its
inputs as they are (the runtime copies none to make it contiguous), and no step only converts.
On the CPU the option is forced on (torch's CPU convolutions take channels-last too); the GPU
tests check the same on CUDA and count the conversion kernels torch's profiler sees."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from torch import nn

import xfuse
from examples.resnet import make_resnet18
from tests.backends.test_cuda import gpu
from xfuse.dialects import graph
from xfuse.runtime.compiler import Program
from xfuse.runtime.executor import CompiledProgram
from xfuse.runtime.steps import Allocate, EagerStep, KernelStep, ViewStep

Tensor = torch.Tensor


class ResNetBlock(nn.Module):
    """A stem (conv-bn-relu, max-pool) and a basic block (conv-bn-relu-conv-bn, + x, relu)."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(c)
        self.pool = nn.MaxPool2d(2)
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        for bn in (self.bn0, self.bn1, self.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-0.5, 0.5)

    def forward(self, x: Tensor) -> Tensor:
        h = self.pool(torch.relu(self.bn0(self.stem(x))))
        y = torch.relu(self.bn1(self.conv1(h)))
        return torch.relu(h + self.bn2(self.conv2(y)))


def _target(step: Any) -> str | None:
    """The torch operator an eager or view step calls (None for other steps)."""
    if isinstance(step, EagerStep | ViewStep) and isinstance(step.op, graph.TorchCallOp):
        return step.op.target.data
    return None


def _is_conv(step: Any) -> bool:
    return _target(step) == "aten.convolution.default"


@dataclass
class Trace:
    """What each step of one call saw: (step, input tensors, output tensors)."""

    program: Program
    calls: list[tuple[Any, list[Tensor], list[Tensor]]] = field(default_factory=list)

    def between_convolutions(self) -> list[tuple[Any, list[Tensor], list[Tensor]]]:
        convs = [i for i, (step, _, _) in enumerate(self.calls) if _is_conv(step)]
        assert len(convs) >= 2, "expected at least two convolutions"
        return self.calls[convs[0] : convs[-1] + 1]


def traced(compiled: CompiledProgram, inputs: Sequence[Tensor]) -> tuple[Any, Trace]:
    """Call `compiled` once, recording every step's tensors (its plan wrapped, not changed)."""
    program = compiled.default.program
    trace = Trace(program)
    plan = []
    for step, (run, ins, outs, releases, drops) in zip(program.steps, program.plan, strict=True):

        def record(
            args: list[Tensor],
            allocate: Allocate,
            run: Callable[[list[Tensor], Allocate], list[Tensor]] = run,
            step: Any = step,
        ) -> list[Tensor]:
            results = run(args, allocate)
            trace.calls.append((step, list(args), list(results)))
            return results

        plan.append((record, ins, outs, releases, drops))
    program.__dict__["plan"] = plan  # the instance's plan replaces the cached one
    program.__dict__.pop("runner", None)  # and the runner is made from it
    try:
        return compiled(*inputs), trace
    finally:
        del program.__dict__["plan"]
        program.__dict__.pop("runner", None)


def check_no_layout_changes(compiled: CompiledProgram, trace: Trace) -> None:
    """Between the first and the last convolution: convolutions read and write channels-last,
    kernels get every input as it is, and no step is a layout conversion."""
    groups = {g.index: g for g in compiled.groups}
    for step, args, results in trace.between_convolutions():
        if _is_conv(step):
            cl = torch.channels_last
            assert args[0].is_contiguous(memory_format=cl), step.label
            assert results[0].is_contiguous(memory_format=cl), step.label
        elif isinstance(step, KernelStep):
            assert all(a.is_contiguous() for a in args), f"{step.label} would copy an input"
            source = step.label.rpartition("(")[2].rstrip(")")
            if source.startswith("group "):
                ops = set(groups[int(source.split()[1])].ops)
            else:
                ops = {source}
            assert not ops <= {"graph.permute", "graph.reshape"}, f"{step.label} only converts"
        else:
            assert _target(step) != "aten.clone.default", f"{step.label} copies"


def _compile(model: nn.Module, inputs: Sequence[Tensor], device: str, **options: Any) -> Any:
    with torch.no_grad():
        return xfuse.compile(model, tuple(inputs), device, quiet=True, fallback="error", **options)


@pytest.mark.parametrize(
    "make",
    [
        lambda: (ResNetBlock().eval(), (torch.randn(2, 3, 16, 16),)),
        lambda: make_resnet18(width=8, size=32),
    ],
    ids=["block", "resnet18"],
)
def test_cpu_forced_channels_last_matches_eager_with_no_conversions(
    make: Callable[[], tuple[nn.Module, tuple[Tensor]]],
) -> None:
    model, inputs = make()
    compiled = _compile(model, inputs, "cpu", channels_last=True)
    with torch.no_grad():
        got, trace = traced(compiled, inputs)
        want = model(*inputs)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()
    check_no_layout_changes(compiled, trace)
    targets = [_target(step) for step, _, _ in trace.calls]
    assert "aten.permute.default" in targets  # the NHWC views, run as views
    for step, args, results in trace.calls:
        if _target(step) == "aten.permute.default":
            assert isinstance(step, ViewStep), step.label
            assert results[0].untyped_storage().data_ptr() == args[0].untyped_storage().data_ptr()


def test_a_channels_last_input_gets_eager_output_strides() -> None:
    model = ResNetBlock().eval()
    x = torch.randn(2, 3, 16, 16).contiguous(memory_format=torch.channels_last)
    compiled = _compile(model, (x,), "cpu", channels_last=True)
    with torch.no_grad():
        got, want = compiled(x), model(x)
    torch.testing.assert_close(got, want)
    assert want.is_contiguous(memory_format=torch.channels_last)
    assert got.stride() == want.stride()


def _matches_eager(model: nn.Module, x: Tensor) -> tuple[CompiledProgram, Tensor, Trace]:
    """`model` compiled for `x` with the default layout, called once (traced): its result has
    eager's values and strides."""
    compiled = _compile(model, (x,), "cpu")
    with torch.no_grad():
        got, trace = traced(compiled, (x,))
        want = model(x)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()
    return compiled, got, trace


def test_a_model_laid_out_channels_last_runs_channels_last_unmeasured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """`model.to(memory_format=torch.channels_last)` and a channels-last input, compiled with
    the default layout: the importer marks the tensors passed so (`graph.channels_last`), and
    the program goes channels-last without measuring (torch returns a convolution of a
    channels-last weight channels-last in either layout: NCHW would copy every result back).
    The input is read where it lies: no step copies it."""
    import xfuse.choices as choices

    def times(*args: Any) -> Any:
        raise AssertionError("measured")

    monkeypatch.setattr(choices, "measure_layout", times)
    monkeypatch.delenv("XFUSE_CHANNELS_LAST", raising=False)
    monkeypatch.setenv("XFUSE_CACHE_DIR", str(tmp_path))
    model = ResNetBlock().eval().to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 16, 16).contiguous(memory_format=torch.channels_last)
    compiled, _, trace = _matches_eager(model, x)
    check_no_layout_changes(compiled, trace)
    assert "aten.clone.default" not in [_target(step) for step, _, _ in trace.calls]


def test_a_channels_last_input_without_convolutions_is_read_and_returned_where_it_lies() -> None:
    """A batch norm of a channels-last input, which eager returns channels-last: one kernel
    reads the input's NHWC memory as it is and writes the result's, which the caller gets as
    it is (eager's strides, the kernel's memory: no copy before or after)."""
    bn = nn.BatchNorm2d(16).eval()
    bn.running_mean.uniform_(-0.5, 0.5)
    bn.running_var.uniform_(0.5, 1.5)
    x = torch.randn(2, 16, 8, 8).contiguous(memory_format=torch.channels_last)
    _, got, trace = _matches_eager(bn, x)
    kernels = [
        (args, results) for step, args, results in trace.calls if isinstance(step, KernelStep)
    ]
    assert len(kernels) == 1
    args, results = kernels[0]
    assert all(a.is_contiguous() for a in args)
    assert x.data_ptr() in [a.data_ptr() for a in args]
    assert got.data_ptr() == results[0].data_ptr()


def test_a_symbolic_program_reads_and_returns_channels_last_memory_where_it_lies() -> None:
    """The same batch norm compiled for every batch size (`dynamic_shapes`): the input is
    marked channels-last at its symbolic strides, its one kernel reads the NHWC view and writes
    NHWC memory, whose channels-last view is the result (eager's strides) at each size; the
    kernel's row of 16 channels stays a loop for the vectorizer (`widen_short_rows`: the
    symbolic kernel's index adds its zero offsets one by one, `unit_stride` sees through them)."""
    from torch.export import Dim

    from xfuse.backends.cpu import CPUBackend
    from xfuse.backends.loop_hints import UNROLL_DISABLE
    from xfuse.ir.names import KERNEL_ATTR

    bn = nn.BatchNorm2d(16).eval()
    bn.running_var.uniform_(0.5, 1.5)
    cl = torch.channels_last
    x = torch.randn(4, 16, 6, 6).contiguous(memory_format=cl)
    with torch.no_grad():
        compiled = xfuse.compile(
            bn, (x,), dynamic_shapes=({0: Dim("b", min=2, max=64)},), quiet=True, fallback="error"
        )
        for b in (3, 8):
            xb = torch.randn(b, 16, 6, 6).contiguous(memory_format=cl)
            got, want = compiled(xb), bn(xb)
            torch.testing.assert_close(got, want)
            assert got.stride() == want.stride()
    module = compiled.compiled.module
    text = str(module)
    assert "graph.channels_last" in text and "aten.clone" not in text
    (kernel,) = [op for op in module.walk() if KERNEL_ATTR in getattr(op, "attributes", {})]
    assert f'!"{UNROLL_DISABLE}"' in CPUBackend().llvm_ir(module, kernel.sym_name.data)


@pytest.mark.parametrize("nhwc_faster", [True, False])
def test_the_cpu_default_takes_the_layout_its_convolutions_were_measured_faster_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, nhwc_faster: bool
) -> None:
    """Each distinct convolution is timed both ways once (`xfuse.choices.measure_layout`, here
    replaced by fixed times) and kept in the kernel cache; the program goes channels-last where
    the summed NHWC time is clearly under the NCHW one, and `explain()` says which it took."""
    import xfuse.choices as choices

    measured: list[str] = []

    def times(conv: Any, sig: str, device: torch.device, *at: Any) -> Any:
        measured.append(sig)
        return choices.ConvolutionLayout(sig, 1.0, 0.5 if nhwc_faster else 0.95)

    monkeypatch.setattr(choices, "measure_layout", times)
    monkeypatch.setattr(choices, "LAYOUT_WORK", 0)
    monkeypatch.delenv("XFUSE_CHANNELS_LAST", raising=False)
    monkeypatch.setenv("XFUSE_CACHE_DIR", str(tmp_path))
    model, inputs = ResNetBlock().eval(), (torch.randn(1, 3, 8, 8),)
    explanation = xfuse.explain(model, inputs, quiet=True)
    text = str(explanation.module)
    assert ("aten.permute.default" in text) == nhwc_faster
    kept = "channels-last" if nhwc_faster else "nchw"
    assert f"layout of 3 convolutions: {kept}" in str(explanation)
    assert len(measured) == len(set(measured)) == 2  # two of the three are alike
    assert sum(sig.endswith(" converted") for sig in measured) == 1  # the stem's input
    xfuse.explain(model, inputs, quiet=True)
    assert len(measured) == 2  # read back from the cache
    nchw = xfuse.explain(model, inputs, quiet=True, channels_last=False)
    assert "aten.permute.default" not in str(nchw.module)


def test_a_cpu_program_with_little_convolution_work_stays_nchw_unmeasured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Under `LAYOUT_WORK` multiply-adds (this block's three convolutions at 8x8 have 32K)."""
    import xfuse.choices as choices

    def times(*args: Any) -> Any:
        raise AssertionError("measured")

    monkeypatch.setattr(choices, "measure_layout", times)
    monkeypatch.delenv("XFUSE_CHANNELS_LAST", raising=False)
    monkeypatch.setenv("XFUSE_CACHE_DIR", str(tmp_path))
    explanation = xfuse.explain(ResNetBlock().eval(), (torch.randn(1, 3, 8, 8),), quiet=True)
    assert "aten.permute.default" not in str(explanation.module)
    assert "layout of" not in str(explanation)


@pytest.mark.parametrize("nhwc_faster", [True, False])
def test_a_symbolic_cpu_program_takes_the_layout_measured_at_its_size_hints(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, nhwc_faster: bool
) -> None:
    import xfuse.choices as choices

    points: list[Any] = []

    def times(conv: Any, sig: str, device: torch.device, point: Any, sides: Any) -> Any:
        points.append(dict(point))
        return choices.ConvolutionLayout(sig, 1.0, 0.5 if nhwc_faster else 0.95)

    monkeypatch.setattr(choices, "measure_layout", times)
    monkeypatch.setattr(choices, "LAYOUT_WORK", 0)
    monkeypatch.delenv("XFUSE_CHANNELS_LAST", raising=False)
    monkeypatch.setenv("XFUSE_CACHE_DIR", str(tmp_path))
    model = ResNetBlock().eval()
    shapes = {"x": {0: torch.export.Dim("batch", min=2, max=16)}}
    with torch.no_grad():
        program = xfuse.compile(model, (torch.randn(3, 3, 8, 8),), dynamic_shapes=shapes)
        for batch in (2, 5):
            x = torch.randn(batch, 3, 8, 8)
            torch.testing.assert_close(program(x), model(x))
    assert points and all(list(p.values()) == [3] for p in points)  # the hint: the example's
    kept = "channels-last" if nhwc_faster else "nchw"
    assert [str(c).split(" (")[0] for c in program.choices if "layout" in str(c)] == [
        f"layout of 3 convolutions: {kept}"
    ]


# ---------------------------------------------------------------------------------------------
# CUDA (the lead's GPU run): `pytest -m gpu tests/runtime/test_channels_last_runtime.py`
# ---------------------------------------------------------------------------------------------


CONVOLUTION_NAMES = ("fprop", "xmma", "implicit_gemm", "winograd", "conv2d", "convolve")
"""Words in the names of cuDNN's convolution kernels (which name their layouts too:
`sm90_xmma_fprop_implicit_gemm_..._nhwckrsc_nhwc_...`)."""
CONVERSION_NAMES = ("nchw", "nhwc", "convert")
"""Words in the names of layout conversion kernels (cuDNN's `nchwToNhwcKernel`, ...)."""


def _is_conv_kernel(name: str) -> bool:
    return any(k in name.lower() for k in CONVOLUTION_NAMES)


def conversion_kernels_between_convolutions(fn: Callable[[], Any]) -> list[str]:
    """The GPU kernels torch's profiler sees in one call of `fn`, between the first and the
    last convolution kernel, whose names say they change layout."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = sorted(
        (e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
        key=lambda e: e.time_range.start,
    )
    names = [e.name for e in kernels]
    convs = [i for i, n in enumerate(names) if _is_conv_kernel(n)]
    assert len(convs) >= 2, f"expected convolution kernels among {names}"
    between = names[convs[0] : convs[-1] + 1]
    return [
        n
        for n in between
        if not _is_conv_kernel(n) and any(c in n.lower() for c in CONVERSION_NAMES)
    ]


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_cuda_channels_last_matches_eager_with_no_conversions(dtype: torch.dtype) -> None:
    model, (x,) = make_resnet18(batch=4, width=16, size=64)
    model = model.to("cuda", dtype)
    x = x.to("cuda", dtype)
    # The CUDA default: on for bf16; f32 (slower in NHWC) is forced.
    forced = {"channels_last": True} if dtype == torch.float32 else {}
    compiled = _compile(model, (x,), "cuda", cuda_graphs=False, **forced)
    # TF32 off (f32 convolutions of another layout round differently under TF32); through the
    # flags context: torch's OpInfo module forbids setting cudnn's global flags.
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        got, trace = traced(compiled, (x,))
        want = model(x)
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(got, want, **tolerance)
    assert got.stride() == want.stride()
    check_no_layout_changes(compiled, trace)
    with torch.no_grad():
        assert conversion_kernels_between_convolutions(lambda: compiled(x)) == []


@gpu
def test_cuda_graph_replays_of_a_channels_last_program_match_eager() -> None:
    model, (x,) = make_resnet18(batch=2, width=16, size=32)
    model = model.to("cuda", torch.bfloat16)
    inputs = [torch.randn_like(x).to("cuda", torch.bfloat16) for _ in range(4)]
    compiled = _compile(model, (inputs[0],), "cuda")
    with torch.no_grad():
        kept = [compiled(t) for t in inputs]  # warm-up, capture, replays
        want = [model(t) for t in inputs]
    graphs = compiled.default.graphs
    assert graphs is not None and graphs.reason is None and graphs.replays >= 2
    for got, expected in zip(kept, want, strict=True):
        torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
        assert got.stride() == expected.stride()


def test_channels_last_kernels_compile_to_ptx(tmp_path: Any) -> None:
    """The NHWC kernels of a ResNet block (batch norm, ReLU, residual add, pooling) lower to
    PTX for sm_90 (assembled with ptxas where it is on the PATH), as on the GPU."""
    import shutil
    import subprocess

    from xdsl.dialects import func

    from xfuse.backends.cuda import CUDABackend
    from xfuse.frontend.export import import_for_xfuse
    from xfuse.ir.names import KERNEL_ATTR
    from xfuse.passes.transforms.channels_last import ChannelsLastPass
    from xfuse.pipeline import DEFAULT_PIPELINE
    from xfuse.runtime.compiler import lower_to_loops
    from xfuse.runtime.driver import run_pipeline

    model, inputs = make_resnet18(width=8, size=32)
    module = import_for_xfuse(model, inputs).program.module
    run_pipeline(DEFAULT_PIPELINE, module, extra=[ChannelsLastPass(force=True)])
    assert "aten.permute.default" in str(module)
    lower_to_loops(module)
    names = [
        op.sym_name.data
        for op in module.ops
        if isinstance(op, func.FuncOp) and KERNEL_ATTR in op.attributes
    ]
    assert names
    backend = CUDABackend("sm_90")
    ptxas = shutil.which("ptxas")
    for name in names:
        ptx = backend.compile(module, name).decode()
        assert f".entry {name}(" in ptx
        if ptxas is not None:
            source = tmp_path / f"{name}.ptx"
            source.write_text(ptx)
            done = subprocess.run(
                [ptxas, "-arch=sm_90", str(source), "-o", str(tmp_path / f"{name}.cubin")],
                capture_output=True,
                text=True,
            )
            assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "conv, shape",
    [
        (lambda: nn.Conv2d(1, 8, 3, padding="same"), (2, 1, 9, 9)),  # one input channel
        (lambda: nn.Conv2d(4, 8, 2, dilation=2, padding="same"), (1, 4, 7, 7)),
        (lambda: nn.Conv2d(6, 6, 3, stride=2, groups=3), (2, 6, 9, 9)),  # grouped
        (lambda: nn.Conv2d(8, 8, 3, groups=8, padding=1), (1, 8, 5, 5)),  # depthwise
        (lambda: nn.Conv2d(8, 4, 1), (3, 8, 1, 1)),  # one pixel
        (lambda: nn.Conv2d(3, 5, (3, 1), padding=(1, 0)), (1, 3, 4, 6)),
    ],
    ids=["c1", "dilated", "grouped", "depthwise", "pixel", "rect"],
)
def test_cpu_forced_convolutions_of_every_shape_match_eager(
    conv: Callable[[], nn.Module], shape: tuple[int, ...]
) -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = conv()
            self.b = nn.Conv2d(self.a.out_channels, 4, 1)  # pyright: ignore[reportArgumentType]

        def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
            y = torch.sigmoid(self.a(x)) * 2 + 1
            return self.b(y).sum(dim=1), y

    model, x = Net().eval(), torch.randn(shape)
    compiled = _compile(model, (x,), "cpu", channels_last=True)
    with torch.no_grad():
        got, want = compiled(x), model(x)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
        assert g.stride() == w.stride()
