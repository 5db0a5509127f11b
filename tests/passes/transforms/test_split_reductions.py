"""`split-reductions`: long reductions become two stages that interpret like the original, and
compile to kernels that agree with eager (and are as accurate as eager on 3e7 elements)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decompose import single_op_module, ttype
from xdsl.dialects.builtin import ModuleOp

import xfuse
from tests.backends.test_cuda import gpu
from xfuse import interpret
from xfuse.api import DEFAULT_PIPELINE
from xfuse.dialects import graph
from xfuse.ir.context import make_context
from xfuse.passes.fusion.fuse_scored import FuseScoredPass
from xfuse.passes.fusion.group_cleanup import GroupCleanupPass
from xfuse.passes.llvm.lower_to_llvm import LowerToLLVMPass
from xfuse.passes.transforms.decompose import DecomposePass
from xfuse.passes.transforms.split_reductions import (
    SplitReductionsPass,
    choose_column_split,
    choose_split,
    is_normalization,
)
from xfuse.pipeline import PipelineOptions, compile_pipeline
from xfuse.runtime.executor import CompiledProgram
from xfuse.testing import RandomProgram, programs

REDUCTIONS: dict[str, type[graph.ReduceOp]] = {
    "sum": graph.ReduceSumOp,
    "mean": graph.ReduceMeanOp,
    "max": graph.ReduceMaxOp,
    "min": graph.ReduceMinOp,
    "prod": graph.ReduceProdOp,
}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def split(module: ModuleOp, min_length: int = 4, min_column_length: int = 4096) -> ModuleOp:
    out = module.clone()
    SplitReductionsPass(
        min_length=min_length, normalization_rows=0, min_column_length=min_column_length
    ).apply(make_context(), out)
    out.verify()
    return out


def reductions(module: ModuleOp) -> list[graph.ReduceOp]:
    return [op for op in module.walk() if isinstance(op, graph.ReduceOp)]


def reduction_module(
    kind: str, shape: Sequence[int], dims: Sequence[int], keepdim: bool, dtype: torch.dtype
) -> ModuleOp:
    return single_op_module(
        lambda args: REDUCTIONS[kind](args[0], dims, keepdim=keepdim), [ttype(shape, dtype)]
    )


def sample(kind: str, shape: Sequence[int], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Inputs whose product stays finite: values near 1 for prod, else normal."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    if kind == "prod":
        x = 1 + x / (4 * max(1, math.prod(shape)))
    return x.to(dtype)


def assert_reductions_close(got: torch.Tensor, want: torch.Tensor, length: int) -> None:
    """Equal dtypes and shapes; values within the rounding of two orders of summation."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if not want.dtype.is_floating_point:
        assert torch.equal(got, want)
        return
    eps = torch.finfo(want.dtype).eps
    scale = float(want.double().abs().max()) if want.numel() else 0.0
    tol = 4 * eps * math.sqrt(max(length, 1)) * max(scale, 1.0)
    torch.testing.assert_close(got, want, rtol=4 * eps, atol=tol, equal_nan=True)


# ---------------------------------------------------------------------------------------------
# Choosing B and C
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [4, 17, 1000, 65536, 65537, 99991, 3 * 10**7, 2**31 - 1])
def test_split_covers_the_length_with_chunks_near_its_root(length: int) -> None:
    s = choose_split(length)
    assert s.rows * s.chunk + s.remainder == length
    assert s.rows >= 2 and 0 <= s.remainder < s.chunk
    root = math.sqrt(length)
    assert root / 4 <= s.chunk <= 4 * root + 1


def test_lengths_with_a_divisor_near_the_root_have_no_remainder() -> None:
    assert choose_split(3 * 10**7).remainder == 0
    assert choose_split(2**20) == choose_split(2**20).__class__(1024, 1024, 0)
    assert choose_split(99991).remainder > 0  # a prime


@pytest.mark.parametrize(
    ("length", "kept"),
    [(4, 1), (4096, 4), (16384, 16384), (8191, 15), (65536, 200000), (10**6, 3), (99991, 7)],
)
def test_column_split_covers_the_rows_with_chunks_of_at_least_half_the_root(
    length: int, kept: int
) -> None:
    s = choose_column_split(length, kept, 1 << 19)
    assert s.rows * s.chunk + s.remainder == length
    assert 2 <= s.rows <= max(2, math.isqrt(length)) and 0 <= s.remainder < s.rows
    assert s.chunk >= math.isqrt(length) // 2
    assert s.rows <= max(2, (1 << 19) // kept)


def test_column_split_of_a_square_sum_has_about_the_parallelism_asked_for() -> None:
    assert choose_column_split(16384, 16384, 1 << 19) == choose_split(4).__class__(32, 512, 0)


# ---------------------------------------------------------------------------------------------
# What is rewritten, and what is left alone
# ---------------------------------------------------------------------------------------------


def test_below_the_threshold_is_left_alone() -> None:
    module = reduction_module("sum", (3, 100), [1], False, torch.float32)
    assert str(split(module, min_length=101)) == str(module)
    assert len(reductions(split(module, min_length=100))) == 2


@pytest.mark.parametrize(
    ("shape", "dims", "dtype"),
    [
        ((64, 3), [0], torch.float32),
        ((4, 8, 16), [0, 2], torch.float32),
        ((99,), [0], torch.bool),
        ((8192, 2), [0], torch.bool),
    ],
    ids=["short-leading-dim", "non-trailing-dims", "bool", "bool-columns"],
)
def test_unsupported_reductions_are_left_alone(
    shape: tuple[int, ...], dims: list[int], dtype: torch.dtype
) -> None:
    module = reduction_module("sum", shape, dims, False, dtype)
    assert str(split(module)) == str(module)


def test_inner_dims_split_into_stages_beside_the_kept_dims() -> None:
    """A channels-last image's spatial mean (`[N, H, W, C]` over H and W) with few results:
    stage 1 reduces C of `[N, B, C, K]` (many results, neighbouring threads read neighbouring
    channels), stage 2 B."""
    module = reduction_module("mean", (2, 112, 112, 32), [1, 2], True, torch.float32)
    first, second = reductions(split(module))
    assert graph.shape_of(first.input) == (2, 112, 112, 32) and first.reduce_dims == (2,)
    assert graph.shape_of(second.input) == (2, 112, 32) and second.reduce_dims == (1,)


def test_stages_reduce_rows_then_their_partial_results() -> None:
    module = reduction_module("mean", (1 << 16,), [0], False, torch.float32)
    first, second = reductions(split(module, min_length=1 << 16))
    assert graph.shape_of(first.input) == (256, 256) and first.reduce_dims == (1,)
    assert graph.shape_of(second.input) == (256,) and second.reduce_dims == (0,)
    assert isinstance(first, graph.ReduceSumOp) and isinstance(second, graph.ReduceSumOp)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_sums_accumulate_in_f32_and_round_once(dtype: torch.dtype) -> None:
    module = split(reduction_module("sum", (70000,), [0], False, dtype), min_length=1024)
    f32 = graph.dtype_of(ttype((), torch.float32))
    assert all(graph.dtype_of(r.input) == f32 for r in reductions(module))
    x = sample("sum", (70000,), dtype).abs()
    (got,) = interpret(module, [x])
    reference = x.double().sum()
    nearest = reference.to(dtype)
    ulp = float(torch.nextafter(nearest, torch.tensor(math.inf, dtype=dtype)) - nearest)
    assert got.dtype == dtype and abs(float(got) - float(reference)) <= ulp


def test_elementwise_prologue_is_rebuilt_on_the_viewed_input() -> None:
    """`sum(abs(x)^2)` reads `x` through the split's reshape (at run time a view, not a copy);
    the original prologue is erased."""
    text = """
    func.func @forward(%x: tensor<4x1000xf32>) -> tensor<4xf32> {
      %a = graph.abs %x : tensor<4x1000xf32>
      %b = graph.mul %a, %a : tensor<4x1000xf32>, tensor<4x1000xf32> -> tensor<4x1000xf32>
      %s = graph.reduce_sum %b dims = [1] : tensor<4x1000xf32> -> tensor<4xf32>
      func.return %s : tensor<4xf32>
    }"""
    module = split(xfuse.ir.context.parse(text), min_length=100)
    names = [op.name for op in module.walk() if op.name.startswith("graph.")]
    assert names[:3] == ["graph.reshape", "graph.abs", "graph.mul"]
    assert names.count("graph.abs") == 1
    x = torch.randn(4, 1000)
    assert_reductions_close(interpret(module, [x])[0], (x.abs() ** 2).sum(1), 1000)


def decomposed(text: str) -> ModuleOp:
    module = xfuse.ir.context.parse(text)
    DecomposePass().apply(make_context(), module)
    return module


SOFTMAX = """
func.func @forward(%x: tensor<ROWSx131072xf32>) -> tensor<ROWSx131072xf32> {
  %y = graph.softmax %x dim = 1 : tensor<ROWSx131072xf32>
  func.return %y : tensor<ROWSx131072xf32>
}"""


def test_normalizations_are_recognized() -> None:
    softmax = reductions(decomposed(SOFTMAX.replace("ROWS", "8")))
    assert [is_normalization(r) for r in softmax] == [True, True]
    module = reduction_module("sum", (8, 70000), [1], True, torch.float32)
    assert not is_normalization(reductions(module)[0])


@pytest.mark.parametrize(("rows", "option", "split_count"), [(8, 8, 2), (7, 8, 4), (8, 0, 4)])
def test_normalizations_with_many_rows_are_left_alone(
    rows: int, option: int, split_count: int
) -> None:
    module = decomposed(SOFTMAX.replace("ROWS", str(rows)))
    SplitReductionsPass(normalization_rows=option).apply(make_context(), module)
    module.verify()
    assert len(reductions(module)) == split_count


@pytest.mark.parametrize(("target", "rows", "split_count"), [("cpu", 32, 2), ("cuda", 32, 4)])
def test_the_rows_a_normalization_needs_are_the_targets(
    target: str, rows: int, split_count: int
) -> None:
    """32 rows are parallel on the CPU's threads; on a GPU, whose row kernel gives each row one
    block, they are not (a row per SM): there the normalization is split."""
    module = decomposed(SOFTMAX.replace("ROWS", str(rows)))
    SplitReductionsPass(target=target).apply(make_context(), module)
    module.verify()
    assert len(reductions(module)) == split_count


@pytest.mark.parametrize(
    ("target", "rows", "length", "option", "split_count"),
    [
        ("cpu", 1, 25088, -1, 1),  # the CPU splits from min-length whatever the rows
        ("cuda", 1, 25088, -1, 2),  # one block would reduce the whole row
        ("cuda", 131, 8192, -1, 2),
        ("cuda", 1, 8191, -1, 1),
        ("cuda", 132, 25088, -1, 1),  # a row per SM: parallel already
        ("cuda", 1, 25088, 30000, 1),
        ("cpu", 1, 25088, 20000, 2),
    ],
)
def test_few_rows_split_from_the_targets_shorter_length(
    target: str, rows: int, length: int, option: int, split_count: int
) -> None:
    module = reduction_module("sum", (rows, length), [1], False, torch.float32)
    SplitReductionsPass(target=target, few_rows_min_length=option).apply(make_context(), module)
    module.verify()
    assert len(reductions(module)) == split_count


@pytest.mark.parametrize(("target", "split_count"), [("cpu", 2), ("cuda", 4)])
def test_a_one_row_normalization_below_min_length_splits_on_cuda(
    target: str, split_count: int
) -> None:
    """GroupNorm(1, C) of one image: one row of C x H x W (PoolFormer's last stage: 25,088)."""
    module = decomposed(SOFTMAX.replace("131072", "25088").replace("ROWS", "1"))
    SplitReductionsPass(target=target).apply(make_context(), module)
    module.verify()
    assert len(reductions(module)) == split_count


def test_compile_sets_the_target_of_split_reductions() -> None:
    for device, target in (("cpu", "cpu"), ("cuda:1", "cuda")):
        passes = compile_pipeline(device).passes
        [split] = [p for p in passes if isinstance(p, SplitReductionsPass)]
        assert split.target == target


def test_compile_leaves_other_passes_target_options_alone() -> None:
    """`lower-to-llvm`'s target names the kernels' calling convention, not the device."""
    options = PipelineOptions(spec="decompose,fuse-scored,lower-to-llvm")
    [lower] = [p for p in compile_pipeline("cuda", options).passes if p.name == "lower-to-llvm"]
    assert isinstance(lower, LowerToLLVMPass) and lower.target == "cpu"


# ---------------------------------------------------------------------------------------------
# Properties: interpret(split(G)) ~ interpret(G)
# ---------------------------------------------------------------------------------------------


@st.composite
def reduction_cases(draw: st.DrawFn) -> tuple[str, tuple[int, ...], list[int], bool, torch.dtype]:
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 24), min_size=rank, max_size=rank)))
    reduced = draw(st.integers(1, rank))
    kind = draw(st.sampled_from(sorted(REDUCTIONS)))
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
    if kind != "mean":
        dtypes.append(torch.int64)
    dtype = draw(st.sampled_from(dtypes))
    return kind, shape, list(range(rank - reduced, rank)), draw(st.booleans()), dtype


@st.composite
def column_cases(draw: st.DrawFn) -> tuple[str, tuple[int, ...], list[int], bool, torch.dtype]:
    """Reductions over the leading dims (not all of them) or over consecutive inner dims (a
    channels-last image's H and W), with the column split forced."""
    rank = draw(st.integers(2, 4))
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=rank, max_size=rank)))
    first = draw(st.integers(0, rank - 2))
    last = draw(st.integers(first, rank - 2))
    kind = draw(st.sampled_from(sorted(REDUCTIONS)))
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
    if kind != "mean":
        dtypes.append(torch.int64)
    dims = list(range(first, last + 1))
    return kind, shape, dims, draw(st.booleans()), draw(st.sampled_from(dtypes))


def assert_split_keeps_meaning(
    case: tuple[str, tuple[int, ...], list[int], bool, torch.dtype],
    seed: int,
    split_module: Callable[[ModuleOp], ModuleOp],
) -> None:
    kind, shape, dims, keepdim, dtype = case
    module = reduction_module(kind, shape, dims, keepdim, dtype)
    x = sample(kind, shape, dtype, seed)
    if not dtype.is_floating_point:
        x = (
            torch.randint(-3, 4, shape, dtype=dtype)
            if kind != "prod"
            else x.round().clamp(-1, 1).to(dtype)
        )
    (want,) = interpret(module, [x])
    (got,) = interpret(split_module(module), [x])
    assert_reductions_close(got, want, math.prod(shape[d] for d in dims))


@SETTINGS
@given(column_cases(), st.integers(0, 2**16))
def test_column_split_keeps_meaning(
    case: tuple[str, tuple[int, ...], list[int], bool, torch.dtype], seed: int
) -> None:
    assert_split_keeps_meaning(case, seed, lambda m: split(m, min_column_length=4))


@SETTINGS
@given(reduction_cases(), st.integers(0, 2**16))
def test_split_reduction_keeps_meaning(
    case: tuple[str, tuple[int, ...], list[int], bool, torch.dtype], seed: int
) -> None:
    assert_split_keeps_meaning(case, seed, split)


def assert_programs_close(program: RandomProgram, module: ModuleOp) -> None:
    want = interpret(program.module, program.inputs())
    got = interpret(module, program.inputs())
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, equal_nan=True)


@SETTINGS
@given(programs())
def test_split_then_fuse_keeps_meaning_of_random_programs(program: RandomProgram) -> None:
    module = split(program.module)
    assert_programs_close(program, module)
    for p in (FuseScoredPass(), GroupCleanupPass()):
        p.apply(make_context(), module)
    module.verify()
    assert_programs_close(program, module)


@SETTINGS
@given(programs(mutation=True))
def test_split_keeps_meaning_around_in_place_ops(program: RandomProgram) -> None:
    assert_programs_close(program, split(program.module))


# ---------------------------------------------------------------------------------------------
# End to end on the CPU
# ---------------------------------------------------------------------------------------------


def test_default_pipeline_splits_reductions() -> None:
    # (after `simplify`, which drops the sums it proves are one element: none is split first)
    assert "decompose,simplify,split-reductions," in DEFAULT_PIPELINE


def compiled(fn: Callable[..., object], *inputs: torch.Tensor) -> CompiledProgram:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xfuse.compile(fn, inputs)


def test_a_long_softmax_of_many_rows_stays_one_kernel() -> None:
    x = torch.randn(8, 131072)
    program = compiled(lambda x: torch.softmax(x, dim=-1), x)
    assert len(program.kernels) == 1 and not program.fallbacks
    torch.testing.assert_close(program(x), torch.softmax(x, dim=-1))


Case = tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[], torch.Tensor]]
CASES: dict[str, Case] = {
    "sum": (lambda x: x.sum(), lambda: torch.rand(1 << 20)),
    "mean-keepdim": (
        lambda x: x.mean(dim=(1, 2), keepdim=True),
        lambda: torch.randn(3, 300, 331),
    ),
    "amax-remainder": (lambda x: x.amax(dim=-1), lambda: torch.randn(5, 99991)),
    "min-prologue": (lambda x: (x * x - 1).min(), lambda: torch.randn(400, 400)),
    "sum-prologue": (lambda x: (x * x - 1).sum(), lambda: torch.randn(400, 400)),
    "prod": (lambda x: x.prod(dim=-1), lambda: 1 + torch.randn(2, 70000) / 1e5),
    "sum-f16": (lambda x: x.sum(), lambda: torch.rand(200003).half()),
    "sum-i64": (lambda x: x.sum(), lambda: torch.randint(-9, 9, (131072,))),
    "softmax-long-rows": (lambda x: torch.softmax(x, dim=-1), lambda: torch.randn(2, 70000)),
    "column-sum": (lambda x: x.sum(0), lambda: torch.randn(16384, 300)),
    "column-mean-prologue": (
        lambda x: (x * x).mean(dim=(0, 1), keepdim=True),
        lambda: torch.randn(97, 83, 5),
    ),
    "column-amax-remainder": (lambda x: x.amax(0), lambda: torch.randn(8191, 7)),
    "column-sum-f16": (lambda x: x.sum(0), lambda: torch.randn(5000, 64).half()),
    "column-sum-bf16": (lambda x: x.sum(0), lambda: torch.randn(5000, 64).bfloat16()),
}
"""Reductions the pass splits, by name (CPU and GPU tests pick theirs)."""
CPU_CASES = [name for name in CASES if name != "sum-prologue"]
GPU_CASES = [
    "amax-remainder",
    "sum-prologue",
    "sum-f16",
    "softmax-long-rows",
    "column-sum",
    "column-mean-prologue",
    "column-amax-remainder",
    "column-sum-f16",
]


@pytest.mark.parametrize("name", CPU_CASES)
def test_split_reductions_compile_like_eager(name: str) -> None:
    fn, make = CASES[name]
    x = make()
    program = compiled(fn, x)
    got = program(x)
    want = fn(x)
    assert isinstance(got, torch.Tensor)
    assert_reductions_close(got, want, x.numel())
    assert not program.fallbacks and len(program.kernels) >= 2


# ---------------------------------------------------------------------------------------------
# End to end on the GPU (skipped without one)
# ---------------------------------------------------------------------------------------------


def rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a.double() - b.double()) ** 2).mean().sqrt())


@gpu
def test_split_reductions_on_the_gpu_are_as_accurate_as_eager() -> None:
    """3e7 elements: within 2x eager's RMSE against f64 plus 4 ulps (what the CPU test asks)."""
    x = (torch.rand(3 * 10**7) + 0.5).cuda()

    def whole(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return x.sum(), x.mean(), (x * x).amax()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = xfuse.compile(whole, (x,), device="cuda")
    got = program(x)
    assert not program.fallbacks
    for g, e, r in zip(got, whole(x), whole(x.double()), strict=True):
        eps = 4 * float(torch.finfo(torch.float32).eps) * float(r.abs())
        assert rmse(g, r) <= 2 * rmse(e, r) + eps, (rmse(g, r), rmse(e, r), eps)


@gpu
@pytest.mark.parametrize("name", GPU_CASES)
def test_split_reductions_on_the_gpu_agree_with_eager(name: str) -> None:
    fn, make = CASES[name]
    x = make().cuda()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = xfuse.compile(fn, (x,), device="cuda")
    got = program(x)
    assert not program.fallbacks
    assert isinstance(got, torch.Tensor)
    assert_reductions_close(got, fn(x), x.numel())
