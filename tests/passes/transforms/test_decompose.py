"""`decompose`: every composite op becomes primitives that interpret like the composite."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Attribute, Block, Region, SSAValue

from xfuse import interpret
from xfuse.dialects import graph
from xfuse.ir import dtypes
from xfuse.ir.context import make_context, parse
from xfuse.passes import get_all_passes
from xfuse.passes.transforms.decompose import DecomposePass

pytestmark = pytest.mark.filterwarnings("ignore:var\\(\\).*degrees of freedom:UserWarning")

Build = Callable[[Sequence[SSAValue]], graph.IRDLOperation]


def single_op_module(build: Build, arg_types: Sequence[Attribute]) -> ModuleOp:
    """@forward(args) { return build(args) }."""
    block = Block(arg_types=arg_types)
    op = build(block.args)
    block.add_ops([op, func.ReturnOp(op.results[0])])
    f = func.FuncOp("forward", (list(arg_types), [op.results[0].type]), Region(block))
    module = ModuleOp([f])
    module.verify()
    return module


def decompose(module: ModuleOp, **options: bool) -> ModuleOp:
    out = module.clone()
    DecomposePass(**options).apply(make_context(), out)
    out.verify()
    return out


def composite_ops(module: ModuleOp) -> list[str]:
    return [op.name for op in module.walk() if graph.op_kind(op) == "composite"]


def ttype(shape: Sequence[int], dtype: torch.dtype) -> TensorType[Attribute]:
    return TensorType(dtypes.from_torch(dtype), list(shape))


def check_decomposition(
    build: Build, shapes: Sequence[Sequence[int]], dtype: torch.dtype
) -> ModuleOp:
    """Decompose a one-op module; no composite may remain and results must match."""
    module = single_op_module(build, [ttype(s, dtype) for s in shapes])
    decomposed = decompose(module)
    assert composite_ops(decomposed) == []
    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(*s, generator=gen).to(dtype) for s in shapes]
    (want,) = interpret(module, inputs)
    (got,) = interpret(decomposed, inputs)
    tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2}.get(dtype, 1e-5)
    torch.testing.assert_close(got, want, atol=tol, rtol=tol, equal_nan=True)
    return decomposed


X = (3, 8)
CASES: list[tuple[str, Build, list[tuple[int, ...]]]] = [
    ("softmax", lambda a: graph.SoftmaxOp(a[0], 1), [X]),
    ("softmax_dim0", lambda a: graph.SoftmaxOp(a[0], 0), [(4, 3, 5)]),
    ("log_softmax", lambda a: graph.LogSoftmaxOp(a[0], 1), [X]),
    ("layer_norm", lambda a: graph.LayerNormOp(a[0], 1, 1e-5, a[1], a[2]), [X, (8,), (8,)]),
    ("layer_norm_rank2", lambda a: graph.LayerNormOp(a[0], 2, 1e-3), [(2, 3, 8)]),
    ("layer_norm_weight_only", lambda a: graph.LayerNormOp(a[0], 1, 1e-5, a[1]), [X, (8,)]),
    ("rms_norm", lambda a: graph.RMSNormOp(a[0], 1, 1e-6, a[1]), [X, (8,)]),
    ("rms_norm_no_weight", lambda a: graph.RMSNormOp(a[0], 2, 1e-6), [(2, 3, 8)]),
    ("gelu", lambda a: graph.GeluOp(a[0]), [X]),
    ("gelu_tanh", lambda a: graph.GeluOp(a[0], "tanh"), [X]),
    ("silu", lambda a: graph.SiluOp(a[0]), [X]),
    ("var", lambda a: graph.VarOp(a[0], [1]), [X]),
    ("var_keepdim_correction0", lambda a: graph.VarOp(a[0], [0, 2], 0, True), [(3, 4, 5)]),
    ("var_single_element", lambda a: graph.VarOp(a[0], [1]), [(3, 1)]),
    ("linear", lambda a: graph.LinearOp(a[0], a[1], a[2]), [(2, 3, 8), (5, 8), (5,)]),
    ("linear_no_bias", lambda a: graph.LinearOp(a[0], a[1]), [X, (5, 8)]),
    ("linear_vector", lambda a: graph.LinearOp(a[0], a[1], a[2]), [(8,), (5, 8), (5,)]),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
@pytest.mark.parametrize(("build", "shapes"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decomposition_matches_composite(
    build: Build, shapes: list[tuple[int, ...]], dtype: torch.dtype
) -> None:
    check_decomposition(build, shapes, dtype)


HALF_REDUCTIONS: list[tuple[str, Build]] = [
    ("softmax", lambda a: graph.SoftmaxOp(a[0], 1)),
    ("log_softmax", lambda a: graph.LogSoftmaxOp(a[0], 1)),
    ("layer_norm", lambda a: graph.LayerNormOp(a[0], 1, 1e-5, a[1], a[2])),
    ("rms_norm", lambda a: graph.RMSNormOp(a[0], 1, 1e-6, a[1])),
    ("var", lambda a: graph.VarOp(a[0], [1])),
]


@pytest.mark.parametrize(
    "build", [c[1] for c in HALF_REDUCTIONS], ids=[c[0] for c in HALF_REDUCTIONS]
)
def test_half_precision_reductions_compute_in_f32(build: Build) -> None:
    half = [ttype(X, torch.float16), ttype((8,), torch.float16), ttype((8,), torch.float16)]
    decomposed = decompose(single_op_module(build, half))
    f32 = dtypes.from_torch(torch.float32)
    reductions = [op for op in decomposed.walk() if graph.op_kind(op) == "reduction"]
    assert reductions
    assert all(graph.dtype_of(op.operands[0]) == f32 for op in reductions)
    ret = next(op for op in decomposed.walk() if isinstance(op, func.ReturnOp))
    assert graph.dtype_of(ret.operands[0]) == dtypes.from_torch(torch.float16)


def test_bf16_layer_norm_matches() -> None:
    check_decomposition(
        lambda a: graph.LayerNormOp(a[0], 1, 1e-5, a[1], a[2]), [X, (8,), (8,)], torch.bfloat16
    )


def test_keep_linear_leaves_linear_only() -> None:
    module = single_op_module(
        lambda a: graph.LinearOp(a[0], a[1]),
        [ttype(X, torch.float32), ttype((5, 8), torch.float32)],
    )
    kept = decompose(module, keep_linear=True)
    assert [op.name for op in kept.walk() if isinstance(op, graph.LinearOp)] == ["graph.linear"]
    assert "graph.matmul" in [op.name for op in decompose(module).walk()]


def test_pass_is_registered() -> None:
    assert get_all_passes()["decompose"]() is DecomposePass


def test_primitives_are_left_alone() -> None:
    module = single_op_module(
        lambda a: graph.AddOp(a[0], a[1]), [ttype(X, torch.float32), ttype(X, torch.float32)]
    )
    assert str(decompose(module)) == str(module)


SHAPES = st.lists(st.integers(1, 5), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None)
@given(shape=SHAPES, data=st.data(), half=st.booleans())
def test_decompose_property_random_shapes(
    shape: list[int], data: st.DataObject, half: bool
) -> None:
    """interpret(decompose(G)) == interpret(G) for random shapes, dims and composite ops."""
    rank = len(shape)
    dim = data.draw(st.integers(0, rank - 1), label="dim")
    norm_rank = data.draw(st.integers(1, rank), label="norm_rank")
    dims = data.draw(st.sets(st.integers(0, rank - 1), min_size=1), label="dims")
    keepdim = data.draw(st.booleans(), label="keepdim")
    correction = data.draw(st.integers(0, 1), label="correction")
    trailing = tuple(shape[rank - norm_rank :])
    choices: list[tuple[Build, list[tuple[int, ...]]]] = [
        (lambda a: graph.SoftmaxOp(a[0], dim), [tuple(shape)]),
        (lambda a: graph.LogSoftmaxOp(a[0], dim), [tuple(shape)]),
        (
            lambda a: graph.LayerNormOp(a[0], norm_rank, 1e-5, a[1], a[2]),
            [tuple(shape), trailing, trailing],
        ),
        (lambda a: graph.RMSNormOp(a[0], norm_rank, 1e-6, a[1]), [tuple(shape), trailing]),
        (lambda a: graph.VarOp(a[0], sorted(dims), correction, keepdim), [tuple(shape)]),
        (
            lambda a: graph.GeluOp(a[0], data.draw(st.sampled_from(["none", "tanh"]))),
            [tuple(shape)],
        ),
        (lambda a: graph.SiluOp(a[0]), [tuple(shape)]),
        (lambda a: graph.LinearOp(a[0], a[1], a[2]), [tuple(shape), (3, shape[-1]), (3,)]),
    ]
    build, shapes = data.draw(st.sampled_from(choices), label="op")
    check_decomposition(build, shapes, torch.float16 if half else torch.float32)


def test_a_cast_of_a_reshape_becomes_a_reshape_of_the_cast() -> None:
    text = """func.func @forward(%x: tensor<32x100xf32>) -> (tensor<2x16x100xbf16>, tensor<4x800xf32>) {
      %r = graph.reshape %x : tensor<32x100xf32> -> tensor<2x16x100xf32>
      %c = graph.cast %r : tensor<2x16x100xf32> to tensor<2x16x100xbf16>
      %s = graph.reshape %x : tensor<32x100xf32> -> tensor<4x800xf32>
      func.return %c, %s : tensor<2x16x100xbf16>, tensor<4x800xf32>
    }"""
    module = parse(text)
    out = decompose(module)
    ops = [op.name for op in out.walk() if op.name.startswith("graph.")]
    assert ops == ["graph.cast", "graph.reshape", "graph.reshape"], ops
    x = torch.randn(32, 100)
    for got, want in zip(interpret(out, [x]), interpret(module, [x]), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


GATHER_OF_ELEMENTWISE = """func.func @forward(%x: tensor<8x50xbf16>, %i: tensor<8x1xi64>) -> (tensor<8x1xf32>, tensor<8x1xf32>) {
  %c = graph.cast %x : tensor<8x50xbf16> to tensor<8x50xf32>
  %m = graph.reduce_max %c dims = [1] keepdim : tensor<8x50xf32> -> tensor<8x1xf32>
  %s = graph.sub %c, %m : tensor<8x50xf32>, tensor<8x1xf32> -> tensor<8x50xf32>
  %e = graph.exp %s : tensor<8x50xf32>
  %z = graph.reduce_sum %e dims = [1] keepdim : tensor<8x50xf32> -> tensor<8x1xf32>
  %l = graph.log %z : tensor<8x1xf32>
  %p = graph.sub %s, %l : tensor<8x50xf32>, tensor<8x1xf32> -> tensor<8x50xf32>
  %g = graph.gather %p[%i] dim = 1 : tensor<8x50xf32>, tensor<8x1xi64> -> tensor<8x1xf32>
  func.return %g, %l : tensor<8x1xf32>, tensor<8x1xf32>
}"""


def test_a_gather_of_log_probabilities_reads_the_logits_at_the_labels() -> None:
    """The loss's pick of log-probabilities is computed at the picked positions: the gather
    reads the logits, and the [8 x 50] log-probabilities are read by nothing."""
    module = parse(GATHER_OF_ELEMENTWISE)
    out = decompose(module)
    gathers = [op for op in out.walk() if isinstance(op, graph.GatherOp)]
    assert [str(g.table.type) for g in gathers] == ["tensor<8x50xbf16>"]
    p = next(op for op in out.walk() if op.results and op.results[0].name_hint == "p")
    assert not list(p.results[0].uses)
    x, i = torch.randn(8, 50).to(torch.bfloat16), torch.randint(0, 50, (8, 1))
    for got, want in zip(interpret(out, [x, i]), interpret(module, [x, i]), strict=True):
        torch.testing.assert_close(got, want)


def test_a_gather_of_two_gathered_operands_and_out_of_range_indices() -> None:
    """Both operands of the product vary along the gathered dim: each is gathered, and an
    index out of range still raises as eager's gather does."""
    text = """func.func @forward(%a: tensor<4x6xf32>, %b: tensor<4x6xf32>, %i: tensor<4x3xi64>) -> tensor<4x3xf32> {
      %p = graph.mul %a, %b : tensor<4x6xf32>, tensor<4x6xf32> -> tensor<4x6xf32>
      %g = graph.gather %p[%i] dim = 1 : tensor<4x6xf32>, tensor<4x3xi64> -> tensor<4x3xf32>
      func.return %g : tensor<4x3xf32>
    }"""
    module = parse(text)
    out = decompose(module)
    assert sum(isinstance(op, graph.GatherOp) for op in out.walk()) == 2
    a, b, i = torch.randn(4, 6), torch.randn(4, 6), torch.randint(0, 6, (4, 3))
    torch.testing.assert_close(interpret(out, [a, b, i])[0], torch.gather(a * b, 1, i))
    with pytest.raises(Exception, match="index"):
        interpret(out, [a, b, i + 6])


def test_a_gather_whose_index_is_smaller_than_the_table_stays() -> None:
    """torch.gather's index may be smaller than the table in the other dims: left alone."""
    text = """func.func @forward(%a: tensor<4x6xf32>, %i: tensor<2x1xi64>) -> tensor<2x1xf32> {
      %p = graph.exp %a : tensor<4x6xf32>
      %g = graph.gather %p[%i] dim = 1 : tensor<4x6xf32>, tensor<2x1xi64> -> tensor<2x1xf32>
      func.return %g : tensor<2x1xf32>
    }"""
    out = decompose(parse(text))
    gather = next(op for op in out.walk() if isinstance(op, graph.GatherOp))
    assert str(gather.table.type) == "tensor<4x6xf32>"


def test_a_gather_of_an_iota_stays() -> None:
    """An iota's value is its position, not a function of operands there: `iota[labels]` is
    the labels (the one-hot gradient of a loss compares them with the columns)."""
    text = """func.func @forward(%i: tensor<6xi64>) -> tensor<6xi64> {
      %r = graph.iota dim = 0 start = 0 step = 1 : tensor<10xi64>
      %g = graph.gather %r[%i] dim = 0 : tensor<10xi64>, tensor<6xi64> -> tensor<6xi64>
      func.return %g : tensor<6xi64>
    }"""
    module = parse(text)
    out = decompose(module)
    i = torch.randint(0, 10, (6,))
    assert torch.equal(interpret(out, [i])[0], i)


def test_a_gather_through_a_reshape_broadcast_along_the_rows() -> None:
    """The backward of `scatter_add` along dim 1: a [1, 8] comparison of the columns with 3,
    broadcast to the [3, 8] table of a `where`, gathered at [3, 1] indices. The reshape under
    the comparison ([8] -> [1, 8]) is broadcast along the rows, so the gather does not go
    through it (the indices' 3 rows are not the reshape's 1): it reads the [1, 8] comparison
    at each row's index."""
    text = """func.func @forward(%i: tensor<3x1xi64>, %t: tensor<3xf32>) -> tensor<3x1xf32> {
      %r = graph.iota dim = 0 start = 0 step = 1 : tensor<8xi64>
      %c = graph.reshape %r : tensor<8xi64> -> tensor<1x8xi64>
      %k = graph.constant dense<3> : tensor<i64>
      %m = graph.eq %c, %k : tensor<1x8xi64>, tensor<i64> -> tensor<1x8xi1>
      %u = graph.reshape %t : tensor<3xf32> -> tensor<3x1xf32>
      %b = graph.broadcast_in_dim %u dims = [0, 1] : tensor<3x1xf32> -> tensor<3x8xf32>
      %z = graph.constant dense<0.0> : tensor<3x8xf32>
      %w = graph.where %m, %b, %z : tensor<1x8xi1>, tensor<3x8xf32>, tensor<3x8xf32> -> tensor<3x8xf32>
      %g = graph.gather %w[%i] dim = 1 : tensor<3x8xf32>, tensor<3x1xi64> -> tensor<3x1xf32>
      func.return %g : tensor<3x1xf32>
    }"""
    module = parse(text)
    out = decompose(module)
    out.verify()
    i, t = torch.tensor([[3], [5], [3]]), torch.randn(3)
    want = torch.where(torch.arange(8)[None] == 3, t[:, None].expand(3, 8), 0.0).gather(1, i)
    torch.testing.assert_close(interpret(out, [i, t])[0], want)
    torch.testing.assert_close(interpret(module, [i, t])[0], want)


def test_a_gather_through_a_reshape_of_symbolic_sizes_keeps_the_symbols() -> None:
    """A causal LM's loss with symbolic sizes: the [s0, s1, 8] logits viewed as [e0, 8] rows,
    the [s2, s3] labels as [e0, 1] indices (one symbol by the table's relation `s2 * s3 = s0 *
    s1`). The gather of the log-probabilities goes through the logits' reshape, with the
    indices reshaped to [s0, s1, 1]: every type it builds names its symbols, and the result
    is the composite's at sizes that satisfy the relation."""
    sizes = (
        "s0 = input(0, 0) hint 2, s1 = input(0, 1) hint 4, s2 = input(1, 0) hint 2, "
        "s3 = input(1, 1) hint 4, e0 = s0 * s1, eq(s2 * s3, s0 * s1)"
    )
    text = f"""func.func @forward(%x: tensor<?x?x8xf32, #graph.syms<s0, s1>>, %y: tensor<?x?xi64, #graph.syms<s2, s3>>) -> tensor<?x1xf32, #graph.syms<e0>> attributes {{graph.sizes = #graph.sizes<{sizes}>}} {{
      %r = graph.reshape %x : tensor<?x?x8xf32, #graph.syms<s0, s1>> -> tensor<?x8xf32, #graph.syms<e0>>
      %e = graph.exp %r : tensor<?x8xf32, #graph.syms<e0>>
      %i = graph.reshape %y : tensor<?x?xi64, #graph.syms<s2, s3>> -> tensor<?x1xi64, #graph.syms<e0>>
      %g = graph.gather %e[%i] dim = 1 : tensor<?x8xf32, #graph.syms<e0>>, tensor<?x1xi64, #graph.syms<e0>> -> tensor<?x1xf32, #graph.syms<e0>>
      func.return %g : tensor<?x1xf32, #graph.syms<e0>>
    }}"""
    module = parse(text)
    out = decompose(module)
    out.verify()
    (gather,) = [op for op in out.walk() if isinstance(op, graph.GatherOp)]
    assert graph.dims_of(gather.table) == ("s0", "s1", 8)
    assert graph.dims_of(gather.results[0]) == ("s0", "s1", 1)
    for (b, t), (b2, t2) in (((2, 4), (2, 4)), ((3, 4), (2, 6))):
        x, y = torch.randn(b, t, 8), torch.randint(0, 8, (b2, t2))
        want = x.reshape(-1, 8).exp().gather(1, y.reshape(-1, 1))
        torch.testing.assert_close(interpret(out, [x, y])[0], want)
