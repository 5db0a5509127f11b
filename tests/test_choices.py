"""Choices measured at compile time (`xfuse.choices`): a depthwise convolution stays the library's
call where that was measured faster than its stencil, an f32 product of a weight on the CPU runs
oneDNN's GEMM where that was measured faster than torch's; each verdict is cached and explained."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import xfuse
import xfuse.choices as choices
from tests.backends.test_cuda import gpu
from tests.conftest import counted_calls
from xfuse.choices import Choice, GemmChoice
from xfuse.dialects import graph
from xfuse.errors import XfuseError
from xfuse.frontend import import_module
from xfuse.frontend.convolution import ConvolutionCall
from xfuse.frontend.export import import_for_xfuse
from xfuse.interpreters.graph import find_function
from xfuse.ir.functions import function_bodies
from xfuse.passes.transforms.channels_last import convolutions
from xfuse.passes.transforms.depthwise_stencil import DepthwiseStencilPass, candidates, signature
from xfuse.pipeline import PipelineOptions
from xfuse.runtime import gemm_ways
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.driver import compile_program, measuring_compile
from xfuse.runtime.steps import GemmStep


class DepthwiseBlock(torch.nn.Module):
    def __init__(self, channels: int = 8, kernel: int = 3) -> None:
        super().__init__()
        self.dw = torch.nn.Conv2d(channels, channels, kernel, padding=kernel // 2, groups=channels)
        self.pw = torch.nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pw(torch.relu(self.dw(x)))


def _convolution_calls(module: Any) -> int:
    return sum(
        1
        for op in module.walk()
        if isinstance(op, graph.TorchCallOp) and "convolution" in op.target.data
    )


def test_signature_names_what_speed_depends_on() -> None:
    imported = import_module(DepthwiseBlock(8, 3).eval(), (torch.randn(1, 8, 6, 6),))
    (conv,) = candidates(imported.module)
    assert signature(conv) == "f32 1x8x6x6 k3x3 s1x1 p1x1 d1x1 bias"


def test_library_convolutions_stay_library_calls() -> None:
    model, x = DepthwiseBlock(8, 3).eval(), torch.randn(1, 8, 6, 6)
    module = import_module(model, (x,)).module
    (conv,) = candidates(module)
    kept = module.clone()
    DepthwiseStencilPass(library=(signature(conv),)).apply(xfuse.make_context(), kept)
    DepthwiseStencilPass().apply(xfuse.make_context(), module)
    assert _convolution_calls(kept) == 2  # the depthwise one and the 1x1 one
    assert _convolution_calls(module) == 1  # the depthwise one became a stencil


@pytest.mark.parametrize("library_faster", [True, False])
def test_the_faster_side_is_kept_and_explained(
    library_faster: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    measured: list[str] = []

    def fake_measure(
        conv: Any, device: Any, channels_last: bool, compile_fn: Any, cache: Any, sizes: Any
    ) -> Choice:
        measured.append(signature(conv))
        fast, slow = 0.01, 0.02
        return Choice(signature(conv), *((fast, slow) if library_faster else (slow, fast)))

    monkeypatch.setattr(choices, "measure", fake_measure)
    model, x = DepthwiseBlock(8, 3).eval(), torch.randn(1, 8, 6, 6)
    with torch.no_grad():
        program = xfuse.compile(model, (x,), quiet=True, cache=KernelCache(tmp_path))
        torch.testing.assert_close(program(x), model(x))
    depthwise_calls = len(candidates(program.default.program.module))
    assert depthwise_calls == (1 if library_faster else 0)
    assert measured == ["f32 1x8x6x6 k3x3 s1x1 p1x1 d1x1 bias"]
    (choice,) = program.report.choices
    assert choice.kept == ("library" if library_faster else "stencil")
    assert f"measured: depthwise convolution {measured[0]}: {choice.kept}" in str(program.report)
    # A second compile (a new process's cache object, same folder) reads the verdict.
    second = KernelCache(tmp_path)
    with torch.no_grad():
        again = xfuse.compile(model, (x,), quiet=True, cache=second)
    assert len(measured) == 1
    # A verdict read is no fused program read: a warm start reads one of each.
    assert second.stats.choice_hits == 1 and second.stats.program_hits == 1
    assert again.report.choices == program.report.choices


@pytest.mark.parametrize("library_faster", [True, False])
def test_a_symbolic_batch_is_timed_at_two_sizes_and_the_verdict_serves_every_size(
    library_faster: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from torch.export import Dim

    from xfuse.explanation import dynamic_explanation
    from xfuse.runtime.dynamic import DynamicProgram

    measured: list[tuple[str, Any]] = []

    def fake_measure(
        conv: Any, device: Any, channels_last: bool, compile_fn: Any, cache: Any, sizes: Any
    ) -> Choice:
        measured.append((signature(conv, sizes), dict(sizes)))
        fast, slow = 0.01, 0.02
        sig = signature(conv, sizes)
        return Choice(sig, *((fast, slow) if library_faster else (slow, fast)))

    monkeypatch.setattr(choices, "measure", fake_measure)
    torch.manual_seed(0)
    model, x = DepthwiseBlock(8, 3).eval(), torch.randn(3, 8, 6, 6)
    shapes = {"x": {0: Dim("batch", min=2, max=64)}}
    with torch.no_grad():
        program = xfuse.compile(model, (x,), dynamic_shapes=shapes, cache=KernelCache(tmp_path))
        assert isinstance(program, DynamicProgram)
        for batch in (2, 5, 17):
            y = torch.randn(batch, 8, 6, 6)
            torch.testing.assert_close(program(y), model(y))
    # Timed at the hint and at sixteen times it, the times summed.
    assert [sig for sig, _ in measured] == [
        "f32 3x8x6x6 k3x3 s1x1 p1x1 d1x1 bias",
        "f32 48x8x6x6 k3x3 s1x1 p1x1 d1x1 bias",
    ]
    assert [list(sizes.values()) for _, sizes in measured] == [[3], [48]]
    assert _convolution_calls(program.compiled.fused) == (2 if library_faster else 1)
    (choice,) = program.choices
    symbol = next(iter(measured[0][1]))
    assert choice.signature == f"f32 {symbol}x8x6x6 k3x3 s1x1 p1x1 d1x1 bias"
    kept = "library" if library_faster else "stencil"
    assert f"{choice.signature}: {kept} (library 0.0" in str(dynamic_explanation(program))
    assert "summed at 3x8x6x6; 48x8x6x6)" in str(choice)
    assert (choice.library_ms, choice.stencil_ms) == (
        (0.02, 0.04) if library_faster else (0.04, 0.02)
    )


@pytest.mark.parametrize("padded_faster", [True, False])
def test_a_product_is_padded_only_where_measured_clearly_faster(
    padded_faster: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`pad-matmul`'s verdicts (CUDA's; timed here by a stand-in): the product left unpadded
    where padding it was not clearly faster, each distinct product measured once, the
    verdict cached and explained."""
    from xfuse.runtime.driver import measured_options

    measured: list[str] = []

    def fake_measure(product: Any, alignment: int, device: Any) -> choices.PadChoice:
        measured.append(product.signature)
        padded_ms = 0.05 if padded_faster else 0.095
        return choices.PadChoice(product.signature, 0.1, padded_ms)

    monkeypatch.setattr(choices, "measure_padding", fake_measure)
    monkeypatch.setattr(choices, "_pad_key", lambda sig, device: choices._verdict_key(sig))
    head = torch.nn.Linear(64, 301, bias=False).to(torch.bfloat16).eval()
    module = import_module(head, (torch.randn(2, 64, dtype=torch.bfloat16),)).module
    cuda = torch.device("cuda")
    for _ in range(2):  # the second compile reads the verdict
        options, verdicts = measured_options(
            PipelineOptions(), module, cuda, KernelCache(tmp_path), measuring_compile
        )
        (verdict,) = verdicts
        assert isinstance(verdict, choices.PadChoice)
        assert options.unpadded == (() if padded_faster else ("2x64x301 linear bf16 returned",))
    assert measured == ["2x64x301 linear bf16 returned"]
    kept = "padded" if padded_faster else "unpadded"
    assert str(verdict) == (
        f"matrix product 2x64x301 linear bf16 returned: {kept} "
        f"(unpadded 0.1000 ms, padded {0.05 if padded_faster else 0.095:.4f} ms)"
    )
    # The CPU has no `pad-matmul`: nothing measured there.
    _, on_cpu = measured_options(
        PipelineOptions(), module, torch.device("cpu"), KernelCache(tmp_path), measuring_compile
    )
    assert on_cpu == [] and len(measured) == 1


def test_a_verdict_is_measured_again_at_other_thread_counts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The library call runs on torch's threads and the stencil on xfuse's: a verdict measured
    at some counts is not read at others."""
    measured: list[int] = []

    def fake_measure(
        conv: Any, device: Any, channels_last: bool, compile_fn: Any, cache: Any, sizes: Any
    ) -> Choice:
        measured.append(torch.get_num_threads())
        return Choice(signature(conv), 0.01, 0.02)

    monkeypatch.setattr(choices, "measure", fake_measure)
    model, x = DepthwiseBlock(8, 3).eval(), torch.randn(1, 8, 6, 6)
    threads = torch.get_num_threads()
    other = 1 if threads > 1 else 2
    try:
        for count in (threads, other, threads):
            torch.set_num_threads(count)
            with torch.no_grad():
                xfuse.compile(model, (x,), quiet=True, cache=KernelCache(tmp_path))
    finally:
        torch.set_num_threads(threads)
    assert measured == [threads, other]  # the third compile read the first verdict
    cpu = torch.device("cpu")
    key = choices._key("s", cpu, False)
    monkeypatch.setattr(choices.shared_pool(), "fixed_threads", choices.shared_pool().threads + 1)
    assert choices._key("s", cpu, False) != key


def test_measure_times_both_sides_on_the_cpu(tmp_path: Path) -> None:
    model, x = DepthwiseBlock(4, 3).eval(), torch.randn(1, 4, 5, 5)
    (conv,) = candidates(import_module(model, (x,)).module)
    cache = KernelCache(tmp_path)
    choice = choices.measure(conv, torch.device("cpu"), False, measuring_compile, cache)
    assert choice.library_ms > 0 and choice.stencil_ms > 0
    assert choice.signature == signature(conv)
    assert cache.stats.compiles > 0  # the stencil's kernels went to the cache given


def test_the_sides_are_called_in_turn_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Load that comes and goes falls on both sides: the machine is ten times slower for the
    first half of all calls, which, timed one side after the other, would be all of the first
    side's samples; called in turn, each side's fastest call is its own time."""
    clock = [0.0]
    calls: list[str] = []
    total = 2 * (2 + choices.RUNS)  # two warm-up calls and RUNS rounds of each side

    def side(name: str, ms: float) -> Any:
        def call(x: torch.Tensor) -> None:
            slow = len(calls) < total // 2
            calls.append(name)
            clock[0] += (10.0 if slow else 1.0) * ms / 1000

        return call

    monkeypatch.setattr(choices.time, "perf_counter", lambda: clock[0])
    times = choices._time_sides(
        [side("a", 2.0), side("b", 1.0)], torch.zeros(1), torch.device("cpu")
    )
    assert times == [pytest.approx(2.0), pytest.approx(1.0)]
    assert len(calls) == total
    assert calls[:4] == ["a", "a", "b", "b"]  # each side's warm-up calls
    assert calls[4:] == ["a", "b"] * choices.RUNS


def test_a_cpu_verdict_measured_otherwise_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    key = choices._key("s", cpu, False)
    monkeypatch.setattr(choices, "CPU_MEASUREMENT", choices.CPU_MEASUREMENT - 1)
    assert choices._key("s", cpu, False) != key


@pytest.mark.parametrize(
    ("conv", "shape", "channels_last"),
    [
        (torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), (1, 8, 6, 6), False),
        (torch.nn.Conv2d(8, 8, 5, 2, 2, groups=8, bias=False), (2, 8, 9, 9), True),
        (torch.nn.Conv1d(4, 4, 3, groups=4), (1, 4, 10), False),
    ],
)
def test_the_measured_program_is_what_export_and_the_importer_make(
    conv: torch.nn.Module, shape: tuple[int, ...], channels_last: bool
) -> None:
    """The stencil measured is compiled from a program built directly, as torch.export and the
    importer would make it from the library's call."""
    x = torch.randn(shape)
    (call,) = candidates(import_module(conv.eval(), (x,)).module)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    library = choices._Convolution(call, torch.float32, torch.device("cpu"))  # pyright: ignore[reportPrivateUsage]
    exported, built = import_for_xfuse(library, (x,)), library.imported(x)
    assert str(built.program.module) == str(exported.program.module)
    for field in ("param_names", "input_names", "output_names", "constant_inputs"):
        assert getattr(built.program, field) == getattr(exported.program, field)
    assert built.program.output_rules == exported.program.output_rules
    assert built.program.output_constants == exported.program.output_constants == {}
    assert built.program.hidden_outputs == exported.program.hidden_outputs == 0
    assert built.program.params.keys() == exported.program.params.keys()
    for name, tensor in built.program.params.items():
        assert torch.equal(tensor, exported.program.params[name])
    assert str(built.out_spec) == str(exported.out_spec)
    assert built.op_names == exported.op_names


class TwoDepthwiseShapes(torch.nn.Module):
    """Three depthwise convolutions of two signatures."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.b = torch.nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.c = torch.nn.Conv2d(4, 4, 5, padding=2, groups=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


def test_a_cold_compile_measures_each_signature_once_and_exports_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The program is exported once: each candidate stencil is compiled from a program built
    directly, and a signature met twice is measured once."""
    exports = counted_calls(monkeypatch, torch.export, "export")
    measures = counted_calls(monkeypatch, choices, "measure")
    model, x = TwoDepthwiseShapes().eval(), torch.randn(1, 4, 6, 6)
    cache = KernelCache(tmp_path)
    with torch.no_grad():
        program = xfuse.compile(model, (x,), quiet=True, cache=cache)
        torch.testing.assert_close(program(x), model(x))
    assert [args[0] for args in exports] == [model]
    measured = [signature(args[0]) for args in measures]
    assert sorted(measured) == sorted({signature(c) for c in candidates(_imported(model, x))})
    assert len(measured) == 2
    assert len(program.report.choices) == 2


def _imported(model: torch.nn.Module, x: torch.Tensor) -> Any:
    return import_module(model, (x,)).module


def test_a_near_tie_goes_to_the_library() -> None:
    assert Choice("s", library_ms=1.0, stencil_ms=0.95).kept == "library"
    assert Choice("s", library_ms=1.0, stencil_ms=1.05).kept == "library"
    assert Choice("s", library_ms=1.0, stencil_ms=0.5).kept == "stencil"


def test_a_depthwise_convolution_through_torch_compile_is_measured_on_a_cold_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The measurement compiles the library's call while dynamo's trace of the caller is in
    progress: its weights must be a module's, which torch.export lifts, not tensors a function
    closes over (those met the trace's fake tensors: export failed, strict mode raised)."""
    monkeypatch.setenv("XFUSE_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    model, x = DepthwiseBlock(4, 3).eval(), torch.randn(1, 4, 5, 5)
    compiled = torch.compile(model, backend="xfuse", options={"fallback": "error"})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    torch._dynamo.reset()


def test_the_stencils_to_measure_are_compiled_ahead_all_at_once(tmp_path: Path) -> None:
    """Each distinct signature not in the cache is handed to `ahead` in one batch, before any
    is timed; cached verdicts are not."""
    model, x = TwoDepthwiseShapes().eval(), torch.randn(1, 4, 6, 6)
    module, cache = _imported(model, x), KernelCache(tmp_path)
    batches: list[list[str]] = []

    def ahead(programs: Any, device: torch.device, given: KernelCache) -> None:
        assert given is cache and device == torch.device("cpu")
        batches.append([p.program.module.body.block.first_op.sym_name.data for p in programs])

    cpu = torch.device("cpu")
    first = choices.library_convolutions(module, cpu, cache, measuring_compile, ahead=ahead)
    assert batches == [["forward", "forward"]] and len(first) == 2
    again = choices.library_convolutions(module, cpu, cache, measuring_compile, ahead=ahead)
    assert len(batches) == 1 and [c.signature for c in again] == [c.signature for c in first]


def test_compiling_ahead_leaves_the_measured_builds_nothing_to_compile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """For CUDA (whose kernels worker processes compile; PTX, no GPU needed): after
    `compile_choices_ahead`, a measuring build of the same programs finds its fused program
    and every kernel in the cache."""
    from xfuse.backends.cuda import CUDABackend
    from xfuse.pipeline import compile_pipeline
    from xfuse.runtime import driver
    from xfuse.runtime.compile_workers import WORKERS_ENV
    from xfuse.runtime.compiler import ProgramCompiler

    monkeypatch.setenv(WORKERS_ENV, "2")
    backend = CUDABackend("sm_90")
    monkeypatch.setattr(driver, "get_backend", lambda device: backend)
    model, x = TwoDepthwiseShapes().eval(), torch.randn(1, 4, 6, 6)
    convs = {signature(c): c for c in candidates(_imported(model, x))}
    cuda, cache = torch.device("cuda"), KernelCache(tmp_path)

    def programs() -> list[Any]:
        return [choices._Timed(c, torch.device("cpu"), False).imported() for c in convs.values()]

    with choices.measuring():
        driver.compile_choices_ahead(programs(), cuda, cache)
        compiled = cache.stats.compiles
        sources = []
        for imported in programs():
            compiler = ProgramCompiler(driver._no_kernel, device=cuda)
            passes = compile_pipeline(cuda, driver.measuring_options())
            hits = cache.stats.program_hits
            driver.fuse_and_lower(imported.program, passes, cache, compiler)
            assert cache.stats.program_hits == hits + 1
            sources += compiler.kernel_modules(imported.program.module)
    assert compiled == len({s.text for s in sources}) >= 2
    assert all(cache.key(backend, s) in cache._artifacts for s in sources)


@gpu
def test_a_cold_cuda_compile_builds_no_measured_stencil_in_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The stencils of two signatures are compiled ahead in worker processes, together; the
    measuring builds that follow compile nothing themselves."""
    from xfuse.runtime.compile_workers import WORKERS_ENV

    monkeypatch.setenv(WORKERS_ENV, "2")
    built: list[object] = []
    build, measure = KernelCache._build, choices.measure

    def counted_build(self: KernelCache, *args: Any) -> Any:
        built.append(args)
        return build(self, *args)

    in_measuring: list[int] = []

    def counted_measure(*args: Any) -> Choice:
        before = len(built)
        choice = measure(*args)
        in_measuring.append(len(built) - before)
        return choice

    monkeypatch.setattr(KernelCache, "_build", counted_build)
    monkeypatch.setattr(choices, "measure", counted_measure)
    model, x = TwoDepthwiseShapes().eval().cuda(), torch.randn(1, 4, 6, 6, device="cuda")
    with torch.no_grad():
        program = xfuse.compile(model, (x,), device="cuda", quiet=True, cache=KernelCache(tmp_path))
        torch.testing.assert_close(program(x), model(x))
    assert in_measuring == [0, 0]


# ---------------------------------------------------------------------------------------------
# Matrix products of a weight on the CPU: torch's call or oneDNN's
# ---------------------------------------------------------------------------------------------


def _linear(features: int) -> tuple[torch.nn.Module, torch.Tensor]:
    return torch.nn.Linear(features, features).eval(), torch.randn(1, 128, features)


def _kinds(program: Any) -> list[type]:
    return [type(s) for s in program.default.program.steps]


@pytest.mark.parametrize("kept", ["blocked", "torch"])
def test_the_faster_product_is_kept_cached_and_explained(
    kept: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XFUSE_GEMM_WAYS", "auto")
    measured: list[str] = []
    other_faster = kept != "torch"

    def fake_measure(gemm: gemm_ways.Gemm, device: torch.device) -> GemmChoice:
        measured.append(gemm.signature)
        fast, slow = 1.0, 2.0
        torch_ms, other_ms = (slow, fast) if other_faster else (fast, slow)
        return GemmChoice(gemm.signature, torch_ms, (("blocked", other_ms),))

    monkeypatch.setattr(choices, "measure_gemm", fake_measure)
    model, x = _linear(1024)
    with torch.no_grad():
        program = xfuse.compile(model, (x,), quiet=True, cache=KernelCache(tmp_path))
        torch.testing.assert_close(program(x), model(x))
    assert measured == ["128x1024x1024 nk"]
    assert (GemmStep in _kinds(program)) == other_faster
    (choice,) = program.report.choices
    assert isinstance(choice, GemmChoice)
    assert f"measured: matrix product 128x1024x1024 nk: {kept}" in str(program.report)
    # A second compile (a new process's cache object, same folder) reads the verdict.
    second = KernelCache(tmp_path)
    with torch.no_grad():
        again = xfuse.compile(model, (x,), quiet=True, cache=second)
    assert len(measured) == 1 and second.stats.choice_hits == 1
    assert again.report.choices == program.report.choices
    assert (GemmStep in _kinds(again)) == other_faster
    monkeypatch.setenv("XFUSE_CACHE_DIR", str(tmp_path))
    assert f"matrix product 128x1024x1024 nk: {kept}" in str(xfuse.explain(model, (x,)))
    assert len(measured) == 1


def test_small_products_are_never_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XFUSE_GEMM_WAYS", "auto")
    monkeypatch.setattr(choices, "measure_gemm", lambda gemm, device: pytest.fail("measured"))
    model, x = _linear(64)
    assert 128 * 64 * 64 < choices.GEMM_WORK
    with torch.no_grad():
        program = xfuse.compile(model, (x,), quiet=True)
    assert program.report.choices == [] and GemmStep not in _kinds(program)


@pytest.mark.parametrize(("env", "option"), [("0", None), ("1", False), ("auto", False)])
def test_switched_off_no_product_is_measured_or_runs_another_way(
    env: str, option: bool | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XFUSE_GEMM_WAYS", env)
    monkeypatch.setattr(choices, "measure_gemm", lambda gemm, device: pytest.fail("measured"))
    model, x = _linear(1024)
    with torch.no_grad():
        options = PipelineOptions(gemm_ways=option)
        program = compile_program(model, (x,), torch.device("cpu"), options, quiet=True)
    assert program.report.choices == [] and GemmStep not in _kinds(program)


@pytest.mark.parametrize(("env", "option"), [("1", None), ("0", True)])
def test_forced_every_product_runs_another_way_unmeasured(
    env: str, option: bool | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XFUSE_GEMM_WAYS", env)
    monkeypatch.setattr(choices, "measure_gemm", lambda gemm, device: pytest.fail("measured"))
    model, x = _linear(64)  # small: forced all the same
    with torch.no_grad():
        options = PipelineOptions(gemm_ways=option)
        program = compile_program(model, (x,), torch.device("cpu"), options, quiet=True)
        torch.testing.assert_close(program(x), model(x))
    assert program.report.choices == [] and GemmStep in _kinds(program)


def test_a_bad_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XFUSE_GEMM_WAYS", "yes")
    with pytest.raises(XfuseError, match="XFUSE_GEMM_WAYS must be 0, 1 or auto"):
        model, x = _linear(8)
        xfuse.compile(model, (x,), quiet=True)


def test_on_cuda_products_with_a_bias_are_the_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA (the IR alone: nothing is run) a `linear` with its bias is a candidate, its
    way `bias-apart`; one without a bias, or a matmul, is not."""
    monkeypatch.setenv("XFUSE_GEMM_WAYS", "1")
    model, x = _linear(1024)
    with torch.no_grad():
        module = xfuse.compile(model, (x,), quiet=True).default.program.module
    held = range(len(find_function(module, "forward").body.block.args))
    cache, cuda = KernelCache(Path("unused")), torch.device("cuda")
    (way,) = choices.chosen_gemms(module, held, cuda, cache, True)[0].values()
    assert way == "bias-apart"
    (op,) = [
        op for op in find_function(module, "forward").body.block.ops if op.name == "graph.linear"
    ]
    gemm = gemm_ways.gemm_of(op, held, "cuda")
    assert gemm == gemm_ways.Gemm(128, 1024, 1024, False, "cuda", torch.float32, True)
    assert gemm.signature == "128x1024x1024 nk float32 bias"
    assert gemm_ways.gemm_of(op, held, "cpu") == gemm_ways.Gemm(128, 1024, 1024, False)
    unbiased = torch.nn.Linear(1024, 1024, bias=False).eval()
    with torch.no_grad():
        module = xfuse.compile(unbiased, (x,), quiet=True).default.program.module
    held = range(len(find_function(module, "forward").body.block.args))
    assert choices.chosen_gemms(module, held, cuda, cache, True) == ({}, [])
    assert len(choices.chosen_gemms(module, held, torch.device("cpu"), cache, True)[0]) == 1


def test_a_former_name_of_the_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = _linear(8)
    for old in ("XFUSE_CPU_GEMM", "XFUSE_ONEDNN_GEMM"):
        with monkeypatch.context() as env:
            env.setenv(old, "0")
            with pytest.raises(XfuseError, match=f"{old} is now called XFUSE_GEMM_WAYS"):
                xfuse.compile(model, (x,), quiet=True)


@pytest.mark.parametrize(
    ("gemm", "ways"),
    [
        (gemm_ways.Gemm(64, 512, 128, transposed=True), ["blocked"]),
        (gemm_ways.Gemm(64, 512, 128, transposed=False), ["blocked"]),
        (gemm_ways.Gemm(64, 256, 128, transposed=False), ["onednn", "blocked"]),
    ],
)
def test_measure_gemm_times_every_way(gemm: gemm_ways.Gemm, ways: list[str]) -> None:
    if "onednn" in ways and not gemm_ways.onednn_available():
        ways.remove("onednn")
    choice = choices.measure_gemm(gemm, torch.device("cpu"))
    assert choice.signature == gemm.signature and choice.torch_ms > 0
    assert [w for w, _ in choice.ways_ms] == ways and all(ms > 0 for _, ms in choice.ways_ms)
    assert GemmChoice.load(choice.dump()) == choice


def test_a_near_tie_goes_to_torch_and_the_fastest_way_is_kept() -> None:
    assert GemmChoice("s", 1.0, (("blocked", 0.95),)).kept == "torch"
    assert GemmChoice("s", 1.0, (("onednn", 0.5), ("blocked", 0.6))).kept == "onednn"
    assert GemmChoice("s", 1.0, (("onednn", 0.7), ("blocked", 0.6))).kept == "blocked"
    assert "torch 1.0000 ms, onednn 0.7000 ms" in str(GemmChoice("s", 1.0, (("onednn", 0.7),)))


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_measure_gemm_times_a_biased_cuda_product_with_its_bias_apart(dtype: torch.dtype) -> None:
    gemm = gemm_ways.Gemm(128, 3072, 768, False, "cuda", dtype, True)
    choice = choices.measure_gemm(gemm, torch.device("cuda"))
    assert choice.signature == f"128x3072x768 nk {str(dtype)[6:]} bias" and choice.torch_ms > 0
    assert [w for w, _ in choice.ways_ms] == ["bias-apart"] and choice.ways_ms[0][1] > 0


# ---------------------------------------------------------------------------------------------
# The layout of a CPU program's convolutions
# ---------------------------------------------------------------------------------------------


class _Tokens(torch.nn.Module):
    """SegFormer's mix: tokens seen as an image, a depthwise convolution, tokens again."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        image = x.transpose(1, 2).reshape(1, 8, 6, 6)
        return self.conv(image).flatten(2).transpose(1, 2)


def test_each_convolution_is_timed_both_ways_with_the_copies_each_layout_adds(
    tmp_path: Path,
) -> None:
    """`chosen_layout` times each distinct convolution once (with `LayoutSides`: the copies
    an NCHW call needs between tokens and the image), sums the times and keeps the cache's
    entries for the next compile."""
    module = import_module(_Tokens().eval(), (torch.randn(1, 36, 8),)).module
    cache = KernelCache(tmp_path)
    found = [c for f in function_bodies(module) for c in convolutions(f.body.block)]
    choice = choices.chosen_layout(found, torch.device("cpu"), cache, {})
    assert choice.convolutions == 1 and choice.nchw_ms > 0 and choice.nhwc_ms > 0
    assert choice.kept in ("channels-last", "nchw")
    assert str(choice).startswith(f"layout of 1 convolutions: {choice.kept} (NCHW ")
    (conv,) = [c for c in module.walk() if isinstance(c, graph.TorchCallOp)]
    sides = choices.LayoutSides(tokens_in=True, tokens_out=True)
    call = ConvolutionCall.of(conv)
    assert call is not None
    sig = choices.layout_signature(call, {}, sides)
    assert sig == "f32 1x8x6x6 k3x3 s1x1 p1x1 d1x1 bias w8x1x3x3 g8 tokens_in tokens_out"
    again = choices.chosen_layout(found, torch.device("cpu"), KernelCache(tmp_path), {})
    assert again == choice  # read back, not measured again


@pytest.mark.parametrize(
    ("verdict", "kept", "text"),
    [
        (Choice("s", 1.0, 0.5, at="2x8x6x6"), "stencil", "library 1.0000 ms, stencil 0.5000 ms"),
        (choices.PadChoice("p", 1.0, 0.95), "unpadded", "unpadded 1.0000 ms, padded 0.9500 ms"),
        (choices.ConvolutionLayout("c", 2.0, 1.0), "channels-last", None),
        (choices.LayoutChoice(3, 1.0, 0.95), "nchw", "NCHW 1.0000 ms, NHWC 0.9500 ms"),
    ],
)
def test_two_way_verdicts_keep_the_other_way_under_its_margin_and_round_trip(
    verdict: choices.TwoWays, kept: str, text: str | None
) -> None:
    """Each verdict between two ways keeps the second under its margin of the first's time
    (a near tie goes to eager's way), names both times, and reads back from its cache entry."""
    assert verdict.kept == kept
    if text is not None:
        assert f"{kept} ({text}" in str(verdict)
    assert type(verdict).load(verdict.dump()) == verdict
