"""The program compiler and executor on hand-written fused IR, with the reference lowering and
backend of runtime_fakes (so that they are tested apart from the code generator)."""

from __future__ import annotations

import warnings
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
from runtime_fakes import ReferenceBackend, fake_lower_to_loops
from xdsl.dialects.builtin import ModuleOp

from xfuse.dialects import graph
from xfuse.errors import FallbackWarning
from xfuse.interpreters.graph import interpret
from xfuse.ir.context import parse
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.compiler import Program, ProgramCompiler
from xfuse.runtime.executor import run_program
from xfuse.runtime.steps import BufferPool, EagerStep, KernelStep, ViewStep, torch_call_view

MIXED = """
func.func @forward(%w: tensor<8x16xf32> {graph.param = "w"}, %x: tensor<4x8xf32> {graph.input = "x"}) -> (tensor<64xf32>, tensor<16x4xf32>, tensor<16x4xf32>) {
  %c = graph.constant dense<2.000000e+00> : tensor<f32>
  %g = fusion.group (%x, %c) kind = "elementwise" rule = "test:chain" : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<f32>):
    %m = graph.mul %a, %b : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
    %r = graph.relu %m : tensor<4x8xf32>
    fusion.yield %r : tensor<4x8xf32>
  }
  %z = graph.matmul %g, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %v = graph.reshape %z : tensor<4x16xf32> -> tensor<64xf32>
  %e = graph.exp %v : tensor<64xf32>
  %t = graph.permute %z perm = [1, 0] : tensor<4x16xf32> -> tensor<16x4xf32>
  %s = graph.sin %t : tensor<16x4xf32>
  %t2 = graph.permute %z perm = [1, 0] : tensor<4x16xf32> -> tensor<16x4xf32>
  func.return %e, %t2, %s : tensor<64xf32>, tensor<16x4xf32>, tensor<16x4xf32>
}
"""

CHAIN = """
func.func @forward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = graph.exp %x : tensor<4x8xf32>
  %b = graph.sin %a : tensor<4x8xf32>
  %c = graph.cos %b : tensor<4x8xf32>
  %d = graph.neg %c : tensor<4x8xf32>
  func.return %d : tensor<4x8xf32>
}
"""

ALIASED = """
func.func @forward(%x: tensor<4x8xf32>) -> tensor<32xf32> {
  %a = graph.exp %x : tensor<4x8xf32>
  %v = graph.reshape %a : tensor<4x8xf32> -> tensor<32xf32>
  %s = graph.sin %x : tensor<4x8xf32>
  %s2 = graph.reshape %s : tensor<4x8xf32> -> tensor<32xf32>
  %r = graph.add %v, %s2 : tensor<32xf32>, tensor<32xf32> -> tensor<32xf32>
  func.return %r : tensor<32xf32>
}
"""


def build(
    text: str, tmp_path: Path, backend: ReferenceBackend | None = None
) -> tuple[Program, ModuleOp, ReferenceBackend]:
    backend = backend or ReferenceBackend()
    cache = KernelCache(tmp_path)
    module = parse(text)
    reference = parse(text)
    compiler = ProgramCompiler(
        lambda m, name: cache.kernel(backend, m, name), lower=fake_lower_to_loops
    )
    return compiler.compile(module), reference, backend


def run(program: Program, args: list[torch.Tensor]) -> list[torch.Tensor]:
    return run_program(program, args, BufferPool())


def test_steps_of_a_mixed_program(tmp_path: Path) -> None:
    program, _, backend = build(MIXED, tmp_path)
    kinds = [type(s).__name__ for s in program.steps]
    assert kinds == [
        "KernelStep",  # the group
        "EagerStep",  # matmul
        "KernelStep",  # exp, reading the matmul's result (its reshape is no step)
        "KernelStep",  # permute feeding sin: a kernel
        "KernelStep",  # sin
        "ViewStep",  # permute feeding only the return: a view
    ]
    assert backend.compiles == 4
    assert [g.ops for g in program.groups] == [["graph.mul", "graph.relu"]]
    assert program.groups[0].kernels == [program.kernels[0].name]
    assert program.groups[0].rule == "test:chain"
    # The constant the group reads is folded into its kernel: x is its only buffer input.
    assert program.steps[0].inputs == (program.arg_slots[1],)


def test_mixed_program_equals_the_interpreter(tmp_path: Path) -> None:
    program, reference, _ = build(MIXED, tmp_path)
    args = [torch.randn(8, 16), torch.randn(4, 8)]
    for got, want in zip(run(program, args), interpret(reference, args), strict=True):
        torch.testing.assert_close(got, want)


def test_the_runner_launches_gpu_kernels_through_their_launchers(tmp_path: Path) -> None:
    """A kernel with a launcher (the GPU's) is called by the program's runner with its buffers
    (inputs made contiguous, then outputs allocated), not through its step's `run`: every
    kernel of the mixed program, and the same values as the interpreter's, with a transposed
    (non-contiguous) input."""
    backend = ReferenceBackend(launchers=True)
    program, reference, _ = build(MIXED, tmp_path, backend)
    args = [torch.randn(16, 8).t(), torch.randn(8, 4).t()]
    got = program.runner(args, BufferPool().allocate, BufferPool().release)
    for out, want in zip(got, interpret(reference, args), strict=True):
        torch.testing.assert_close(out, want)
    launched = [k.launches for k in backend.kernels]  # type: ignore[attr-defined]
    steps = [s for s in program.steps if isinstance(s, KernelStep)]
    assert launched == [[len(s.inputs) + len(s.out_specs)] for s in steps]


def test_outputs_are_the_kernel_buffers(tmp_path: Path) -> None:
    program, _, backend = build(CHAIN, tmp_path)
    (out,) = run(program, [torch.randn(4, 8)])
    (neg,) = [k for k in backend.kernels if "graph.neg" in str(k.source)]
    assert out.data_ptr() == neg.calls[-1][-1].data_ptr()


def test_intermediate_buffers_are_reused(tmp_path: Path) -> None:
    program, reference, _ = build(CHAIN, tmp_path)
    pool = BufferPool()
    x = torch.randn(4, 8)
    (first,) = run_program(program, [x], pool)
    kept = first.clone()
    assert pool.allocations == 2  # four kernel outputs in two buffers
    (second,) = run_program(program, [x + 1], pool)
    torch.testing.assert_close(first, kept)  # an earlier call's output is never reused
    assert second.data_ptr() != first.data_ptr()
    torch.testing.assert_close(second, interpret(reference, [x + 1])[0])


def test_a_gpus_pool_keeps_only_small_free_buffers_between_calls() -> None:
    """On a GPU (meta stands in), `trim` drops free buffers of `KEPT_MAX_BYTES` or more, which
    torch's caching allocator serves the next call; smaller ones stay for reuse. The CPU's
    pool keeps all (a fresh large CPU buffer costs page faults)."""
    from xfuse.runtime.steps import KEPT_MAX_BYTES, BufferSpec

    small = BufferSpec((16,), torch.float32)
    large = BufferSpec((KEPT_MAX_BYTES // 4,), torch.float32)
    for device, kept in (("meta", {small}), ("cpu", {small, large})):
        pool = BufferPool(device, min_bytes=1 << 40)
        for spec in (small, large):
            pool.release(spec, pool.allocate(spec))
        pool.trim()
        for spec in (small, large):
            pool.allocate(spec)  # a kept buffer, or a new allocation
        assert pool.allocations == 2 + len({small, large} - kept)


def test_a_buffer_seen_through_a_view_is_not_reused_early(tmp_path: Path) -> None:
    program, reference, _ = build(ALIASED, tmp_path)
    x = torch.randn(4, 8)
    torch.testing.assert_close(run(program, [x])[0], interpret(reference, [x])[0])


def test_reshapes_that_only_kernels_read_are_no_steps(tmp_path: Path) -> None:
    """A kernel reads the reshape's input buffer (the same elements in the same order), so the
    program runs no view for it; the buffer lives until that kernel has read it."""
    program, reference, _ = build(ALIASED, tmp_path)
    assert not any(isinstance(s, ViewStep) for s in program.steps)
    exp, sin, add = program.steps
    assert add.inputs == (exp.outputs[0], sin.outputs[0])
    assert not program.release_after[1]  # exp's buffer is not released before add runs
    x = torch.randn(4, 8)
    torch.testing.assert_close(run(program, [x])[0], interpret(reference, [x])[0])


PARAM_RESHAPE = """
func.func @forward(%w: tensor<8xf32> {graph.param = "w"}, %x: tensor<2x8x3xf32> {graph.input = "x"}) -> (tensor<2x8x3xf32>, tensor<8x1xf32>) {
  %r = graph.reshape %w : tensor<8xf32> -> tensor<8x1xf32>
  %m = graph.mul %x, %r : tensor<2x8x3xf32>, tensor<8x1xf32> -> tensor<2x8x3xf32>
  %k = graph.reshape %w : tensor<8xf32> -> tensor<8x1xf32>
  func.return %m, %k : tensor<2x8x3xf32>, tensor<8x1xf32>
}
"""


def test_reshaped_strided_input_read_by_a_kernel(tmp_path: Path) -> None:
    """A strided parameter whose reshape only a kernel reads: the kernel gets it contiguous,
    in the reshape's element order. A reshape the program returns stays a view step."""
    program, reference, _ = build(PARAM_RESHAPE, tmp_path)
    assert [type(s).__name__ for s in program.steps] == ["KernelStep", "ViewStep"]
    w = torch.randn(16)[::2]
    assert not w.is_contiguous()
    args = [w, torch.randn(2, 8, 3)]
    for got, want in zip(run(program, args), interpret(reference, args), strict=True):
        torch.testing.assert_close(got, want)


def test_non_contiguous_inputs_reach_kernels_contiguous(tmp_path: Path) -> None:
    program, reference, _ = build(CHAIN, tmp_path)
    x = torch.randn(8, 4).t()
    assert not x.is_contiguous()
    torch.testing.assert_close(run(program, [x])[0], interpret(reference, [x.contiguous()])[0])


def test_a_kernel_that_fails_to_compile_falls_back(tmp_path: Path) -> None:
    backend = ReferenceBackend(fail_if=lambda source: "graph.relu" in source)
    with pytest.warns(FallbackWarning, match=r"group 0 \(graph.mul, graph.relu\).*injected"):
        program, reference, _ = build(MIXED, tmp_path, backend)
    assert isinstance(program.steps[0], EagerStep)
    assert program.groups[0].fallback is not None and "CodegenError" in program.groups[0].fallback
    assert len(program.fallbacks) == 1
    args = [torch.randn(8, 16), torch.randn(4, 8)]
    for got, want in zip(run(program, args), interpret(reference, args), strict=True):
        torch.testing.assert_close(got, want)


def test_a_unit_that_fails_to_lower_falls_back(tmp_path: Path) -> None:
    def broken_lowering(module: ModuleOp) -> None:
        if "graph.sin" in str(module):
            raise NotImplementedError("no loops for sin today")
        fake_lower_to_loops(module)

    cache = KernelCache(tmp_path)
    backend = ReferenceBackend()
    compiler = ProgramCompiler(lambda m, n: cache.kernel(backend, m, n), lower=broken_lowering)
    with pytest.warns(FallbackWarning, match="op graph.sin runs eagerly.*no loops for sin"):
        program = compiler.compile(parse(CHAIN))
    assert sum(isinstance(s, EagerStep) for s in program.steps) == 1
    assert sum(isinstance(s, KernelStep) for s in program.steps) == 3
    x = torch.randn(4, 8)
    torch.testing.assert_close(run(program, [x])[0], interpret(parse(CHAIN), [x])[0])


def test_identical_units_share_one_compiled_kernel(tmp_path: Path) -> None:
    text = """
func.func @forward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = graph.exp %x : tensor<4x8xf32>
  %b = graph.exp %a : tensor<4x8xf32>
  func.return %b : tensor<4x8xf32>
}
"""
    program, _, backend = build(text, tmp_path)
    assert len(program.kernels) == 2 and backend.compiles == 1


def test_no_warnings_when_everything_compiles(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        program, _, _ = build(MIXED, tmp_path)
    assert program.fallbacks == []


def forget_calls(backend: ReferenceBackend) -> None:
    """The fake kernels keep their buffers (for inspection): drop them."""
    for kernel in backend.kernels:
        kernel.calls.clear()


def test_a_dropped_output_is_recycled_by_the_next_call(tmp_path: Path) -> None:
    program, reference, backend = build(CHAIN, tmp_path)
    pool = BufferPool(min_bytes=0)  # recycle every size (4x8 here)
    x = torch.randn(4, 8)
    (first,) = run_program(program, [x], pool)
    address = first.data_ptr()
    del first
    forget_calls(backend)
    (second,) = run_program(program, [x + 1], pool)
    assert second.data_ptr() == address  # the caller dropped it: no fresh allocation
    assert pool.allocations == 2
    torch.testing.assert_close(second, interpret(reference, [x + 1])[0])


@pytest.mark.parametrize(
    "keep",
    [
        lambda t: t,
        lambda t: t.view(-1),
        lambda t: t[1:],
        lambda t: t.numpy(),
        lambda t: t.untyped_storage(),
        lambda t: torch.empty(0).set_(t.untyped_storage()),
    ],
    ids=["tensor", "view", "slice", "numpy", "storage", "set_"],
)
def test_an_output_still_referenced_is_not_recycled(tmp_path: Path, keep) -> None:
    program, reference, backend = build(CHAIN, tmp_path)
    pool = BufferPool(min_bytes=0)  # recycle every size (4x8 here)
    x = torch.randn(4, 8)
    (first,) = run_program(program, [x], pool)
    address, expected = first.data_ptr(), first.clone()
    kept = keep(first)  # held while the next call runs
    del first
    forget_calls(backend)
    (second,) = run_program(program, [x + 1], pool)
    assert second.data_ptr() != address
    if isinstance(kept, torch.UntypedStorage):
        got = torch.empty(0).set_(kept)
    else:
        got = torch.as_tensor(kept)
    torch.testing.assert_close(got.reshape(-1), expected.reshape(-1)[-got.numel() :])
    torch.testing.assert_close(second, interpret(reference, [x + 1])[0])


def test_a_weak_reference_does_not_hold_an_output(tmp_path: Path) -> None:
    """Only the storage's life counts: a weakly referenced output that died is reused, and its
    weak reference is dead (nothing can read the memory through it)."""
    program, _, backend = build(CHAIN, tmp_path)
    pool = BufferPool(min_bytes=0)  # recycle every size (4x8 here)
    (first,) = run_program(program, [torch.randn(4, 8)], pool)
    address, ref = first.data_ptr(), weakref.ref(first)
    del first
    forget_calls(backend)
    (second,) = run_program(program, [torch.randn(4, 8)], pool)
    assert ref() is None and second.data_ptr() == address


def test_output_recycling_is_on_unless_turned_off(tmp_path: Path, monkeypatch) -> None:
    program, _, backend = build(CHAIN, tmp_path)
    monkeypatch.delenv("XFUSE_REUSE_OUTPUTS", raising=False)
    for setting, allocations in ((None, 2), ("1", 2), ("0", 3)):
        if setting is not None:
            monkeypatch.setenv("XFUSE_REUSE_OUTPUTS", setting)
        pool = BufferPool(min_bytes=0)  # recycle every size (4x8 here)
        (first,) = run_program(program, [torch.randn(4, 8)], pool)
        del first
        forget_calls(backend)
        run_program(program, [torch.randn(4, 8)], pool)
        assert pool.allocations == allocations


def test_step_profile_reports_each_step(tmp_path: Path) -> None:
    from xfuse.runtime import executor

    program, _, _ = build(CHAIN, tmp_path)
    profile = executor.StepProfile()
    saved, executor.PROFILE = executor.PROFILE, profile
    try:
        run_program(program, [torch.randn(4, 8)], BufferPool())
    finally:
        executor.PROFILE = saved
    report = profile.report()
    assert report.startswith("xfuse step profile")
    assert all(step.label in report for step in program.steps)


@pytest.mark.parametrize(
    "value",
    [
        torch.ones(2),
        torch.ones(2, dtype=torch.bfloat16),
        torch.ones(2, dtype=torch.int64),
        torch.ones(2, dtype=torch.bool),
        torch.ones(2, dtype=torch.uint8),
        torch.ones(2, dtype=torch.complex64),
        torch.ones(2).to_sparse(),
        torch.ones(4, 4).t(),
        torch.nn.Parameter(torch.ones(2)),
        1.0,
    ],
    ids=lambda v: (
        type(v).__name__ + (f"-{v.dtype}-{v.layout}" if isinstance(v, torch.Tensor) else "")
    ),
)
def test_fast_input_check_agrees_with_the_full_check(value: object) -> None:
    """`is_plain_input` (the call path's check) accepts only the tensors that the full check
    (`structured_call`) takes as tensor inputs."""
    from xfuse.runtime.executor import UnsupportedInputError, is_plain_input, structured_call

    device = torch.device("cpu")
    try:
        accepted = bool(structured_call((value,), {}, device).tensors)
    except UnsupportedInputError:
        accepted = False
    assert is_plain_input(value, device) == accepted
    assert not is_plain_input(value, torch.device("meta"))


# (host path) ---------------------------------------------------------------------------------


def test_small_outputs_are_plain_torch_memory_large_ones_pool_memory() -> None:
    from xfuse.runtime.steps import RECYCLE_MIN_BYTES, BufferSpec

    pool = BufferPool()
    small = pool.allocate(BufferSpec((4, 8), torch.float32))
    side = int((RECYCLE_MIN_BYTES // 4) ** 0.5) + 1
    large = pool.allocate(BufferSpec((side, side), torch.float32))
    address = large.data_ptr()
    assert large.is_contiguous() and large.shape == (side, side)
    del small, large
    again = pool.allocate(BufferSpec((side, side), torch.float32))
    assert again.data_ptr() == address  # its storage was freed: the block came back
    bf16 = pool.allocate(BufferSpec((side, side), torch.bfloat16))  # no numpy dtype: bytes
    assert bf16.dtype == torch.bfloat16 and bf16.shape == (side, side) and bf16.is_contiguous()


def test_the_runner_is_the_plan_in_straight_line_code(tmp_path: Path) -> None:
    from xfuse.runtime import executor

    program, reference, _ = build(MIXED, tmp_path)
    args = [torch.randn(8, 16), torch.randn(4, 8)]
    fast = program.runner(args, BufferPool().allocate, BufferPool().release)
    slow = executor.run_steps(program, args, BufferPool(), None)
    for a, b, want in zip(fast, slow, interpret(reference, args), strict=True):
        torch.testing.assert_close(a, want)
        torch.testing.assert_close(b, want)


def test_the_runner_calls_a_views_method_itself() -> None:
    """A view step is its view's method call in the runner's code (no step call, no lists),
    with the same results as the step-by-step loop; a wrapped plan entry is called instead."""
    import xfuse
    from xfuse.runtime import executor
    from xfuse.runtime.steps import ViewStep

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x.reshape(4, 6) @ w.permute(1, 0)).relu()

    x, w = torch.randn(2, 12), torch.randn(5, 6)
    compiled = xfuse.compile(f, (x, w), quiet=True, fallback="error")
    program = compiled.default.program
    views = [i for i, step in enumerate(program.steps) if isinstance(step, ViewStep)]
    assert views
    names = program.runner.__code__.co_names + tuple(program.runner.__globals__)
    for i in views:
        assert f"arg{i}" in names and f"step{i}" not in names
    fast = program.runner([x, w], BufferPool().allocate, BufferPool().release)
    slow = executor.run_steps(program, [x, w], BufferPool(), None)
    torch.testing.assert_close(fast[0], slow[0])
    torch.testing.assert_close(compiled(x, w), f(x, w))


def test_the_runner_calls_a_small_kernel_itself() -> None:
    """A CPU kernel whose fixed work runs on the caller is one foreign call in the runner's code
    (`KernelStep.direct_call`); an input that may not be contiguous (an argument) is made so
    and held until the call returns; results as the step-by-step loop's, with a transposed
    argument too."""
    import xfuse
    from xfuse.runtime import executor

    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((x * 2).relu() @ y).sigmoid() + 1

    x, y = torch.randn(6, 5), torch.randn(5, 4)
    compiled = xfuse.compile(f, (x, y), quiet=True, fallback="error")
    program = compiled.default.program
    kernels = [i for i, s in enumerate(program.steps) if isinstance(s, KernelStep)]
    assert len(kernels) == 2
    runner = program.runner
    assert all(f"kernel{i}" in runner.__globals__ for i in kernels)
    assert not any(f"step{i}" in runner.__globals__ for i in kernels)
    fast = runner([x, y], BufferPool().allocate, BufferPool().release)
    slow = executor.run_steps(program, [x, y], BufferPool(), None)
    torch.testing.assert_close(fast[0], slow[0], rtol=0, atol=0)
    xt = torch.randn(5, 6).t()  # not contiguous: a specialisation of its own
    for _ in range(2):
        torch.testing.assert_close(compiled(xt, y), f(xt, y))
    torch.testing.assert_close(compiled(x, y), f(x, y))


def test_the_runner_calls_an_extern_itself() -> None:
    """An extern that is one torch call of its operands is that call in the runner's code
    (`EagerStep.direct`: a convolution, a product of matrices, a linear layer, an operator's
    tuple of results); one whose operands go inside a list, or that returns fewer results than
    its operator, runs its step. Results bit for bit the step-by-step loop's and eager's."""
    import xfuse
    from xfuse.runtime import executor

    def f(x: torch.Tensor, w: torch.Tensor, m: torch.Tensor, lw: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.conv2d(x, w, padding=1).relu()
        z = y.reshape(8, 16) @ m
        return torch.nn.functional.linear(z, lw).sigmoid()

    # a batch of 2: the CPU keeps the convolution a library call (convolution-matmul takes batch 1)
    args = (torch.randn(2, 3, 4, 4), torch.randn(4, 3, 3, 3), torch.randn(16, 5), torch.randn(2, 5))
    compiled = xfuse.compile(f, args, quiet=True, fallback="error")
    program = compiled.default.program
    externs = {
        s.op.target.data if isinstance(s.op, graph.TorchCallOp) else s.op.name: i
        for i, s in enumerate(program.steps)
        if isinstance(s, EagerStep)
    }
    runner = program.runner
    for name in ("aten.convolution.default", "graph.matmul", "graph.linear"):
        i = externs[name]
        assert f"ext{i}" in runner.__globals__ and f"step{i}" not in runner.__globals__, name
    others = parse("""func.func @f(%a: tensor<2xf32>, %b: tensor<2xf32>) -> (tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<i64>) {
  %c = graph.torch_call "aten.cat.default"(%a, %b) args = [["%t0", "%t1"], 0] kwargs = {} : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
  %p = graph.torch_call "aten.max.dim"(%a) args = ["%t0", 0] kwargs = {} picks = [0 : i64] : (tensor<2xf32>) -> tensor<f32>
  %m, %i = graph.torch_call "aten.max.dim"(%a) args = ["%t0", 0] kwargs = {} : (tensor<2xf32>) -> (tensor<f32>, tensor<i64>)
  func.return %c, %p, %m, %i : tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<i64>
}""")
    cat, picked, both = [op for op in others.walk() if isinstance(op, graph.TorchCallOp)]
    assert EagerStep(cat, (), (), "").direct is None
    assert EagerStep(picked, (), (), "").direct is None
    assert EagerStep(both, (), (), "").direct is not None
    fast = runner(list(args), BufferPool().allocate, BufferPool().release)
    slow = executor.run_steps(program, list(args), BufferPool(), None)
    torch.testing.assert_close(fast[0], slow[0], rtol=0, atol=0)
    torch.testing.assert_close(compiled(*args), f(*args))


def test_the_runner_unpacks_an_externs_tuple_of_results() -> None:
    """An extern whose operator returns a tuple of its results (`native_dropout`: the output
    and the mask) is one call in the runner's code, its results unpacked into their slots:
    bit for bit the step-by-step loop's and eager's, under one seed."""
    import xfuse
    from xfuse.runtime import executor

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, mask = torch.native_dropout(x * 2, 0.5, True)
        return y + 1, mask

    x = torch.randn(4, 8)
    compiled = xfuse.compile(f, (x,), quiet=True, fallback="error")
    program = compiled.default.program
    (i,) = [i for i, s in enumerate(program.steps) if isinstance(s, EagerStep)]
    assert len(program.steps[i].outputs) == 2
    runner = program.runner
    assert f"ext{i}" in runner.__globals__ and f"step{i}" not in runner.__globals__
    torch.manual_seed(0)
    fast = runner([x], BufferPool().allocate, BufferPool().release)
    torch.manual_seed(0)
    slow = executor.run_steps(program, [x], BufferPool(), None)
    torch.manual_seed(0)
    want = f(x)
    torch.manual_seed(0)
    got = compiled(x)
    for a, b, c, d in zip(fast, slow, want, got, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.testing.assert_close(a, c, rtol=0, atol=0)
        torch.testing.assert_close(d, c, rtol=0, atol=0)


def test_graph_memory_is_copied_once_with_eager_strides() -> None:
    """`copy_out` (a CUDA graph's results): every fresh output is new memory with eager's
    strides, views are rebuilt on them."""
    import xfuse

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2) * 2  # channels-last result
        return h, h[0]

    x = torch.randn(2, 3, 4, 5)
    compiled = xfuse.compile(f, (x,), quiet=True)
    plan = compiled.default.outputs
    assert plan is not None
    args = compiled.default.bind((x,), ())
    results = run_program(compiled.default.program, args, BufferPool())
    h, h0 = plan.apply(args, results, copy_out=True)
    want_h, _ = f(x)
    assert h.stride() == want_h.stride()
    assert all(h.data_ptr() != r.data_ptr() for r in results)
    assert h0.data_ptr() == h.data_ptr()  # a view of the copy, as eager's
    torch.testing.assert_close(h, want_h)


def test_extern_torch_calls_use_torchs_own_bindings() -> None:
    from xfuse.dialects.torch_args import direct_torch_op

    assert direct_torch_op("aten.convolution.default") is torch.convolution
    # Several non-out overloads: the binding might pick another; the overload itself runs.
    assert direct_torch_op("aten.add.Tensor") is torch.ops.aten.add.Tensor


def _torch_call(target: str, args: str) -> Any:
    module = parse(
        "func.func @forward(%y: tensor<2x4x8x8xf32>) -> tensor<2x8x8x4xf32> {\n"
        f'  %v = graph.torch_call "{target}"(%y) args = {args} kwargs = {{}} '
        ": (tensor<2x4x8x8xf32>) -> tensor<2x8x8x4xf32>\n"
        "  func.return %v : tensor<2x8x8x4xf32>\n}"
    )
    return next(op for op in module.walk() if isinstance(op, graph.TorchCallOp))


def test_a_torch_call_permute_by_constant_dims_runs_as_a_view() -> None:
    op = _torch_call("aten.permute.default", '["%t0", [0 : i64, 2 : i64, 3 : i64, 1 : i64]]')
    view = torch_call_view(op)
    assert view is not None
    x = torch.randn(2, 4, 8, 8)
    y = view(x)
    assert y.data_ptr() == x.data_ptr() and torch.equal(y, x.permute(0, 2, 3, 1))


def test_other_torch_calls_are_no_views() -> None:
    assert torch_call_view(_torch_call("aten.clone.default", '["%t0"]')) is None


def test_a_product_of_batches_of_matrices_is_a_direct_bmm() -> None:
    """A batched product of as many matrices on each side is `torch.bmm` in the runner's code,
    bit for bit eager's `matmul` (a transposed operand too); a broadcast batch stays
    `torch.matmul`."""
    import xfuse
    from xfuse.interpreters.graph import direct_call

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a * 2) @ b.transpose(1, 2) + 1

    args = (torch.randn(4, 8, 16), torch.randn(4, 8, 16))
    compiled = xfuse.compile(f, args, quiet=True, fallback="error")
    matmuls = [s for s in compiled.default.program.steps if isinstance(s, EagerStep)]
    assert [s.op.name for s in matmuls] == ["graph.matmul"]
    assert matmuls[0].direct is not None and matmuls[0].direct[0] is torch.bmm
    torch.testing.assert_close(compiled(*args), f(*args), rtol=0, atol=0)
    broadcast = parse("""func.func @f(%a: tensor<1x2x3xf32>, %b: tensor<4x3x2xf32>) -> tensor<4x2x2xf32> {
  %c = graph.matmul %a, %b : tensor<1x2x3xf32>, tensor<4x3x2xf32> -> tensor<4x2x2xf32>
  func.return %c : tensor<4x2x2xf32>
}""")
    (op,) = (op for op in broadcast.walk() if isinstance(op, graph.MatmulOp))
    assert direct_call(op) is None


def test_eager_results_are_fresh_where_torchs_schema_says_so() -> None:
    """An eager torch call's results are memory of their own (`EagerStep.owns_outputs`) where its
    operator's schema gives them no alias annotation and it is no composite (`type_as` may
    return its input)."""
    ops = parse("""func.func @f(%a: tensor<2x3xf32>, %i: tensor<2xi64>) -> (tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %d, %m = graph.torch_call "aten.native_dropout.default"(%a) args = ["%t0", 0.5, true] kwargs = {} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
  %t = graph.torch_call "aten.type_as.default"(%a, %a) args = ["%t0", "%t1"] kwargs = {} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %x = graph.torch_call "aten.alias.default"(%a) args = ["%t0"] kwargs = {} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %c = graph.torch_call "aten.clone.default"(%a) args = ["%t0"] kwargs = {} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %d, %m, %t, %x, %c : tensor<2x3xf32>, tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}""")
    calls = [op for op in ops.walk() if isinstance(op, graph.TorchCallOp)]
    fresh = {op.target.data: EagerStep(op, (), (), "").owns_outputs for op in calls}
    assert fresh == {
        "aten.native_dropout.default": True,
        "aten.type_as.default": False,
        "aten.alias.default": False,
        "aten.clone.default": True,
    }


def test_outputs_of_kernel_memory_alone_are_not_checked_for_sharing() -> None:
    """Outputs whose memory can only be the program's own (views of one kernel buffer that
    no other output shares) need no storage check (`OutputPlan.unchecked`); an output that
    is an input's memory is, and gets a copy."""
    import xfuse

    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = (x * 2).exp()
        return h.t(), y.clone(), y + 1

    args = (torch.randn(4, 3), torch.randn(4, 3))
    compiled = xfuse.compile(f, args, quiet=True, fallback="error")
    plan = compiled.default.outputs
    assert plan is not None and 0 in plan.unchecked
    for _ in range(2):
        got, want = compiled(*args), f(*args)
        torch.testing.assert_close(got, want)
        assert [t.stride() for t in got] == [t.stride() for t in want]
        assert got[1].untyped_storage().data_ptr() != args[1].untyped_storage().data_ptr()
