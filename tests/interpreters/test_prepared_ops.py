"""`prepare_op` / `prepare_args`: the interpreter's ops with their attributes read once give
what `run_op` gives, and fail as it fails."""

from __future__ import annotations

import pytest
import torch
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute, Operation

import xfuse
from tests.runtime.ir_reads import ir_functions_run
from xfuse.dialects import fusion, graph
from xfuse.dialects.torch_args import decode_args, encode_args, prepare_args
from xfuse.errors import InterpretError
from xfuse.interpreters.graph import SIZES, find_function, prepare_op, run_op

X = "tensor<3x4xf32>"


def _ops(text: str) -> list[Operation]:
    return list(find_function(xfuse.parse(text)).body.block.ops)


def _tensor_index(tensors: list[torch.Tensor]) -> object:
    return lambda v: next((i for i, t in enumerate(tensors) if v is t), None)


@pytest.mark.parametrize(
    "args,kwargs",
    [
        (lambda a, b: ([a, 1], {}), None),
        (lambda a, b: ([[a, b], 0], {}), None),
        (lambda a, b: ([a], {"dim": 1, "dtype": torch.float64}), None),
        (lambda a, b: ([a, [2, 6]], {"out_dtype": None, "mode": "str:x"}), None),
        (lambda a, b: ([], {"input": a, "other": [b, 3.5], "flag": True}), None),
    ],
)
def test_prepare_args_matches_decode_args(args: object, kwargs: object) -> None:
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    plain_args, plain_kwargs = args(a, b)  # type: ignore[operator]
    encoded = encode_args(plain_args, plain_kwargs, _tensor_index([a, b]))  # type: ignore[arg-type]
    fill = prepare_args(*encoded)
    for tensors in ([a, b], [b, a]):  # the same prepared call, other operands
        got = fill(tensors)
        want = decode_args(*encoded, tensors)
        assert _same(got, want)


def _same(x: object, y: object) -> bool:
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return x is y
    if isinstance(x, list | tuple) and isinstance(y, list | tuple):
        return len(x) == len(y) and all(_same(u, v) for u, v in zip(x, y, strict=True))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    return type(x) is type(y) and x == y


def test_prepared_torch_call_runs_like_run_op() -> None:
    (op, _) = _ops(
        f"func.func @f(%a: {X}) -> {X} {{\n"
        f'  %y = graph.torch_call "aten.cumsum.default"(%a) args = ["%t0", 1] kwargs = {{}} '
        f": ({X}) -> {X}\n  func.return %y : {X}\n}}"
    )
    call = prepare_op(op)
    for _ in range(2):
        x = torch.randn(3, 4)
        torch.testing.assert_close(call([x])[0], run_op(op, [x])[0], rtol=0, atol=0)


def test_prepared_multi_result_torch_call() -> None:
    x = torch.randn(3, 4)
    args: ArrayAttr[Attribute] = ArrayAttr([StringAttr("%t0"), IntegerAttr(1, i64)])
    block_text = (
        f"func.func @f(%a: {X}) -> ({X}, tensor<3x4xi64>) {{\n"
        f'  %v, %i = graph.torch_call "aten.sort.default"(%a) args = ["%t0", 1] kwargs = {{}} '
        f": ({X}) -> ({X}, tensor<3x4xi64>)\n"
        f"  func.return %v, %i : {X}, tensor<3x4xi64>\n}}"
    )
    (op, _) = _ops(block_text)
    assert isinstance(op, graph.TorchCallOp) and op.args == args
    got, want = prepare_op(op)([x]), run_op(op, [x])
    assert len(got) == len(want) == 2
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    assert op.kwargs == DictionaryAttr({})


A = "tensor<1x2x4x8xf32>"
ATTENTION_ARGS = 'args = ["%t0", "%t1", "%t2"] kwargs = {}'
ATTENTION_TYPES = f"({A}, {A}, {A})"
IN_MEMORY_ORDER = "orders = [array<i64: 0, 2, 1, 3>]"  # [B, H, T, D] seen as [B, T, H, D]


@pytest.mark.parametrize(
    "line",
    [
        f'%y = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v) '
        f"{ATTENTION_ARGS} {IN_MEMORY_ORDER} : {ATTENTION_TYPES} -> tensor<1x4x2x8xf32>",
        f'%y = graph.torch_call "aten._scaled_dot_product_flash_attention_for_cpu.default"'
        f"(%q, %k, %v) {ATTENTION_ARGS} picks = [0] {IN_MEMORY_ORDER} : {ATTENTION_TYPES} "
        "-> tensor<1x4x2x8xf32>",
        f'%i, %s = graph.torch_call "aten.sort.default"(%q) args = ["%t0", 1] kwargs = {{}} '
        f"picks = [1, 0] : ({A}) -> (tensor<1x2x4x8xi64>, {A})",
    ],
)
def test_a_prepared_torch_call_reads_no_ir_when_called(line: str) -> None:
    """A prepared torch call's picks, orders and result count are read when it is prepared:
    a call runs no function of xDSL, and gives `run_op`'s results."""
    (op, _) = _ops(f"func.func @f(%q: {A}, %k: {A}, %v: {A}) {{\n  {line}\n  func.return\n}}")
    torch.manual_seed(0)
    xs = [torch.randn(1, 2, 4, 8) for _ in op.operands]
    call = prepare_op(op)
    got: list[torch.Tensor] = []
    assert ir_functions_run(lambda: got.extend(call(xs))) == []
    want = run_op(op, xs)
    assert (
        [t.shape for t in got]
        == [t.shape for t in want]
        == [r.type.get_shape() for r in op.results]
    )
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_unknown_operator_fails_when_called_as_before() -> None:
    (op, _) = _ops(
        f"func.func @f(%a: {X}) -> {X} {{\n"
        f'  %y = graph.torch_call "aten.no_such_op.default"(%a) args = ["%t0"] kwargs = {{}} '
        f": ({X}) -> {X}\n  func.return %y : {X}\n}}"
    )
    call = prepare_op(op)  # preparing does not raise: the eager run does, as run_op does
    with pytest.raises(InterpretError, match="unknown torch operator 'aten.no_such_op.default'"):
        call([torch.zeros(3, 4)])


def test_prepared_group_runs_like_run_op() -> None:
    t = "tensor<4xf32>"
    text = (
        f"func.func @f(%x: {t}, %y: {t}) -> ({t}, {t}) {{\n"
        f'  %0:2 = fusion.group (%x, %y) kind = "elementwise" rule = "test" '
        f": ({t}, {t}) -> ({t}, {t}) {{\n"
        f"  ^bb0(%a: {t}, %b: {t}):\n"
        f"    %c = graph.constant dense<2.0> : {t}\n"
        f"    %m = graph.mul %a, %c : {t}, {t} -> {t}\n"
        f"    %s = graph.add %m, %b : {t}, {t} -> {t}\n"
        f"    fusion.yield %s, %c : {t}, {t}\n"
        f"  }}\n"
        f"  func.return %0#0, %0#1 : {t}, {t}\n}}"
    )
    (group, _) = _ops(text)
    assert isinstance(group, fusion.GroupOp)
    call = prepare_op(group)
    a, b = torch.randn(4), torch.randn(4)
    first = call([a, b])
    for got, want in zip(first, run_op(group, [a, b]), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    first[1].add_(1.0)  # a caller writing a yielded constant changes no later run
    torch.testing.assert_close(call([a, b])[1], torch.full((4,), 2.0))


@pytest.mark.parametrize(
    "line,fn",
    [
        (f"%y = graph.neg %a : {X}", torch.neg),
        (f"%y = graph.softmax %a dim = 1 : {X}", lambda a: torch.softmax(a, 1)),
    ],
)
def test_prepared_graph_op_runs_like_run_op(line: str, fn: object) -> None:
    (op, _) = _ops(f"func.func @f(%a: {X}) -> {X} {{\n  {line}\n  func.return %y : {X}\n}}")
    x = torch.randn(3, 4)
    (got,) = prepare_op(op)([x])
    torch.testing.assert_close(got, run_op(op, [x])[0], rtol=0, atol=0)
    torch.testing.assert_close(got, fn(x), rtol=0, atol=0)  # type: ignore[operator]


@pytest.mark.parametrize(
    "line",
    [
        f"%y = graph.reduce_sum %a dims = [1] keepdim : {X} -> tensor<3x1xf32>",
        f"%y = graph.reduce_max %a dims = [] : {X} -> {X}",
        f"%y = graph.cast %a : {X} to tensor<3x4xf16>",
        f"%y = graph.reshape %a : {X} -> tensor<12xf32>",
    ],
)
def test_prepared_attribute_ops_run_like_run_op(line: str) -> None:
    ops = _ops(f"func.func @f(%a: {X}) {{\n  {line}\n  func.return\n}}")
    op = ops[0]
    x = torch.randn(3, 4)
    (got,) = prepare_op(op)([x])
    want = run_op(op, [x])[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize(
    "line",
    [
        f"%y = graph.permute %a perm = [1, 0] : {X} -> tensor<4x3xf32>",
        f"%y = graph.slice %a start = [0, 1] limit = [3, 4] stride = [1, 2] : {X} -> tensor<3x2xf32>",
        f"%y = graph.concat %a, %b dim = 1 : {X}, {X} -> tensor<3x8xf32>",
        f"%y = graph.softmax %a dim = 1 : {X}",
        f"%y = graph.log_softmax %a dim = 0 : {X}",
        f"%y = graph.layer_norm %a rank = 1 eps = 1.0e-05 : {X}",
        f"%y = graph.rms_norm %a weight(%w : tensor<4xf32>) rank = 1 eps = 1.0e-06 : {X}",
        f'%y = graph.gelu %a approximate = "tanh" : {X}',
        f"%y = graph.var %a dims = [1] correction = 1 : {X} -> tensor<3xf32>",
        f"%y = graph.flip %a dims = [1] : {X}",
        f"%y = graph.argmax %a dims = [1] : {X} -> tensor<3xi64>",
        f"%y = graph.argmin %a dims = [0] : {X} -> tensor<4xi64>",
        f'%y = graph.scan %a dim = 1 kind = "sum" : {X} -> {X}',
        f"%y = graph.roll %a shifts = [1] dims = [1] : {X}",
        f"%y = graph.reduce_sum %a dims = [1] keepdim : {X} -> tensor<3x1xf32>",
        f'%y = graph.pad %a low = [1, 0] high = [0, 2] mode = "constant" value = 1.5 : f64 : '
        f"{X} -> tensor<4x6xf32>",
        f'%y = graph.pad %a low = [1, 1] high = [1, 2] mode = "reflect" value = 0.0 : f64 : '
        f"{X} -> tensor<5x7xf32>",
        "%y = graph.patches %c kernel = [3, 3] stride = [1, 1] padding = [1, 1] : "
        "tensor<2x4x4xf32> -> tensor<4x4x2x3x3xf32>",
    ],
)
def test_a_prepared_op_reads_no_ir_when_called(line: str) -> None:
    """An op with attributes, prepared, reads them when it is prepared: a call runs no
    function of xDSL, and gives `run_op`'s result."""
    (op, _) = _ops(
        f"func.func @f(%a: {X}, %b: {X}, %w: tensor<4xf32>, %c: tensor<2x4x4xf32>) {{\n"
        f"  {line}\n  func.return\n}}"
    )
    xs = [torch.randn(graph.shape_of(v)) for v in op.operands]
    call = prepare_op(op)
    got: list[torch.Tensor] = []
    assert ir_functions_run(lambda: got.extend(call(xs))) == []
    (want,) = run_op(op, xs)
    assert got[0].dtype == want.dtype and got[0].shape == want.shape
    torch.testing.assert_close(got[0], want, rtol=0, atol=0)


SYMBOLIC = "tensor<?x8xf32, #graph.syms<s0>>"


@pytest.mark.parametrize(
    "line",
    [
        f"%y = graph.reshape %x : {SYMBOLIC} -> tensor<?xf32, #graph.syms<s1>>",
        f"%y = graph.broadcast_in_dim %v dims = [1] : tensor<8xf32> -> {SYMBOLIC}",
        "%y = graph.broadcast_in_dim %v dims = [1] : tensor<8xf32> -> tensor<3x8xf32>",
    ],
)
def test_a_prepared_op_of_symbolic_shape_reads_no_ir_when_called(line: str) -> None:
    """An op whose result has size symbols reads its dims when it is prepared and their sizes
    (`SIZES`) when called, as `run_op` does, with no function of xDSL run."""
    (op, _) = _ops(
        f"func.func @f(%x: {SYMBOLIC}, %v: tensor<8xf32>) attributes {{graph.sizes = "
        "#graph.sizes<s0 = input(0, 0) hint 4 range [2, 64], s1 = 8 * s0>} {\n"
        f"  {line}\n  func.return\n}}"
    )
    xs = [torch.randn(3, 8) if graph.is_symbolic(v) else torch.randn(8) for v in op.operands]
    call = prepare_op(op)
    token = SIZES.set({"s0": 3, "s1": 24})
    try:
        got: list[torch.Tensor] = []
        assert ir_functions_run(lambda: got.extend(call(xs))) == []
        (want,) = run_op(op, xs)
    finally:
        SIZES.reset(token)
    assert got[0].shape == want.shape
    torch.testing.assert_close(got[0], want, rtol=0, atol=0)


def test_prepared_constant_is_fresh_per_run() -> None:
    (op, _) = _ops(
        "func.func @f() -> tensor<2xf32> {\n"
        "  %c = graph.constant dense<[1.5, 2.5]> : tensor<2xf32>\n"
        "  func.return %c : tensor<2xf32>\n}"
    )
    call = prepare_op(op)
    (first,) = call([])
    first.add_(1.0)
    torch.testing.assert_close(call([])[0], torch.tensor([1.5, 2.5]))


def _unread(op: graph.TorchCallOp) -> None:
    raise AssertionError("a prepared call read the op's attributes")


def test_prepared_permuted_torch_call_reads_its_orders_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (op, _) = _ops(
        "func.func @f(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {\n"
        '  %y = graph.torch_call "aten.t.default"(%a) args = ["%t0"] kwargs = {} '
        "orders = [array<i64: 1, 0>] : (tensor<4x8xf32>) -> tensor<4x8xf32>\n"
        "  func.return %y : tensor<4x8xf32>\n}"
    )
    assert isinstance(op, graph.TorchCallOp)
    x = torch.randn(4, 8)
    want = run_op(op, [x])[0]
    call = prepare_op(op)
    monkeypatch.setattr(graph.TorchCallOp, "memory_orders", property(_unread))
    monkeypatch.setattr(graph.TorchCallOp, "picked", property(_unread))
    for _ in range(2):
        (got,) = call([x])
        assert got.stride() == want.stride() == (8, 1)
        torch.testing.assert_close(got, x, rtol=0, atol=0)


def _index_put_on(fill: str) -> Operation:
    """`index_put(constant, (i,), v, accumulate=True)` of a [10, 4] constant of `fill`, 24
    indices (more than the fused scatter searches: it stays torch's call)."""
    t, i, v = "tensor<10x4xf32>", "tensor<24xi64>", "tensor<24x4xf32>"
    (_, op, _) = _ops(
        f"func.func @f(%i: {i}, %v: {v}) -> {t} {{\n"
        f"  %z = graph.constant dense<{fill}> : {t}\n"
        f'  %y = graph.torch_call "aten.index_put.default"(%z, %i, %v) '
        f'args = ["%t0", ["%t1"], "%t2", true] kwargs = {{}} : ({t}, {i}, {v}) -> {t}\n'
        f"  func.return %y : {t}\n}}"
    )
    return op


@pytest.mark.parametrize("fill", ["0.0", "-0.0", "1.5"])
def test_an_index_put_into_a_constant_of_zeros_accumulates_into_fresh_zeros(fill: str) -> None:
    """On a constant of zeros (+0.0), the prepared `index_put` is `index_put_` on fresh zeros
    (as eager's embedding backward): `run_op`'s values, duplicates summed, the constant never
    written, a new result at each call; another constant is copied as before."""
    from xfuse.interpreters.graph import zeros_base

    op = _index_put_on(fill)
    assert isinstance(op, graph.TorchCallOp)
    assert zeros_base(op) is (fill == "0.0")
    constant = run_op(op.operands[0].owner, [])[0]  # type: ignore[arg-type]
    kept = constant.clone()
    i = torch.tensor([3, 1, 3, 9, 0, 3] * 4)
    call = prepare_op(op)
    results = []
    for _ in range(2):
        v = torch.randn(24, 4)
        (got,) = call([constant, i, v])
        (want,) = run_op(op, [constant, i, v])
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert torch.equal(got.signbit(), want.signbit())
        assert got.data_ptr() != constant.data_ptr() and got.is_contiguous()
        results.append(got)
    assert results[0].data_ptr() != results[1].data_ptr()
    assert torch.equal(constant, kept) and torch.equal(constant.signbit(), kept.signbit())


def test_an_attention_bias_of_unaligned_rows_is_padded_as_eager_pads_it() -> None:
    """Memory-efficient attention reads its bias at strides of whole 16-byte vectors: a
    contiguous mask of 9 columns (a program's, where eager's trace kept a padded view) becomes
    the same values in rows padded to 16 elements; an aligned one is passed as it is."""
    from xfuse.interpreters.graph import BIAS_ALIGNMENT, aligned_bias

    mask = torch.randn(2, 1, 9, 9)
    padded = aligned_bias(mask)
    torch.testing.assert_close(padded, mask, rtol=0, atol=0)
    assert padded.stride()[-1] == 1
    assert all(s % BIAS_ALIGNMENT == 0 for s in padded.stride()[:-1])
    aligned = torch.randn(2, 1, 9, 16)[..., :9]
    assert aligned_bias(aligned) is aligned
    assert aligned_bias(None) is None
