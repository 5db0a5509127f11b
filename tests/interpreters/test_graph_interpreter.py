"""The reference interpreter: every graph op against torch eager, its errors, argument binding."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from xdsl.dialects import func

import xfuse
from xfuse.interpreters.graph import (
    OP_IMPLS,
    InterpretError,
    bind_arguments,
    find_function,
    interpret,
)
from xfuse.ir import dtypes

F = torch.nn.functional
Tensor = torch.Tensor


@dataclass(frozen=True)
class Case:
    """One op applied to arguments `%a, %b, ...` of the given types, and what torch computes."""

    op: str
    arg_types: tuple[str, ...]
    body: str
    result_type: str
    expected: Callable[..., Tensor]
    sizes: str = ""
    """The function's `graph.sizes` table, where an argument's type names size symbols (a
    random input gives each dynamic dim the size 5)."""


def unary(name: str, fn: Callable[[Tensor], Tensor], t: str = "tensor<3x4xf32>") -> Case:
    return Case(f"graph.{name}", (t,), f"graph.{name} %a : {t}", t, fn)


def binary(name: str, fn: Callable[[Tensor, Tensor], Tensor], result: str = "f32") -> Case:
    return Case(
        f"graph.{name}",
        ("tensor<3x1xf32>", "tensor<4xf32>"),
        f"graph.{name} %a, %b : tensor<3x1xf32>, tensor<4xf32> -> tensor<3x4x{result}>",
        f"tensor<3x4x{result}>",
        fn,
    )


X = "tensor<3x4xf32>"
CASES = [
    unary("neg", torch.neg),
    unary("abs", torch.abs),
    unary("relu", torch.relu),
    unary("exp", torch.exp),
    unary("log", torch.log),
    unary("sqrt", torch.sqrt),
    unary("rsqrt", torch.rsqrt),
    unary("tanh", torch.tanh),
    unary("sigmoid", torch.sigmoid),
    unary("erf", torch.erf),
    unary("sin", torch.sin),
    unary("cos", torch.cos),
    unary("reciprocal", torch.reciprocal),
    unary("silu", F.silu),
    unary("floor", torch.floor),
    unary("ceil", torch.ceil),
    unary("round", torch.round),
    unary("trunc", torch.trunc),
    unary("log1p", torch.log1p),
    unary("expm1", torch.expm1),
    unary("log2", torch.log2),
    unary("log10", torch.log10),
    unary("exp2", torch.exp2),
    unary("asin", torch.asin),
    unary("acos", torch.acos),
    unary("atan", torch.atan),
    unary("tan", torch.tan),
    unary("sinh", torch.sinh),
    unary("cosh", torch.cosh),
    unary("asinh", torch.asinh),
    unary("acosh", torch.acosh),
    unary("atanh", torch.atanh),
    unary("sign", torch.sign),
    Case(
        "graph.isnan",
        (X,),
        f"graph.isnan %a : {X} -> tensor<3x4xi1>",
        "tensor<3x4xi1>",
        torch.isnan,
    ),
    Case(
        "graph.isinf",
        (X,),
        f"graph.isinf %a : {X} -> tensor<3x4xi1>",
        "tensor<3x4xi1>",
        torch.isinf,
    ),
    Case(
        "graph.signbit",
        (X,),
        f"graph.signbit %a : {X} -> tensor<3x4xi1>",
        "tensor<3x4xi1>",
        torch.signbit,
    ),
    binary("atan2", torch.atan2),
    binary("copysign", torch.copysign),
    binary("fmax", torch.fmax),
    binary("fmin", torch.fmin),
    binary("hypot", torch.hypot),
    Case(
        "graph.cast",
        (X,),
        f"graph.cast %a : {X} to tensor<3x4xf16>",
        "tensor<3x4xf16>",
        lambda a: a.half(),
    ),
    binary("add", torch.add),
    binary("sub", torch.sub),
    binary("mul", torch.mul),
    binary("div", torch.div),
    binary("pow", torch.pow),
    binary("maximum", torch.maximum),
    binary("minimum", torch.minimum),
    binary("eq", torch.eq, "i1"),
    binary("ne", torch.ne, "i1"),
    binary("lt", torch.lt, "i1"),
    binary("le", torch.le, "i1"),
    binary("gt", torch.gt, "i1"),
    binary("ge", torch.ge, "i1"),
    Case(
        "graph.where",
        ("tensor<3x4xi1>", X, "tensor<f32>"),
        f"graph.where %a, %b, %c : tensor<3x4xi1>, {X}, tensor<f32> -> {X}",
        X,
        torch.where,
    ),
    Case(
        "graph.broadcast_in_dim",
        ("tensor<4xf32>",),
        "graph.broadcast_in_dim %a dims = [1] : tensor<4xf32> -> tensor<3x4xf32>",
        X,
        lambda a: a.expand(3, 4),
    ),
    Case(
        "graph.reduce_sum",
        (X,),
        f"graph.reduce_sum %a dims = [1] keepdim : {X} -> tensor<3x1xf32>",
        "tensor<3x1xf32>",
        lambda a: a.sum(1, keepdim=True),
    ),
    Case(
        "graph.reduce_mean",
        (X,),
        f"graph.reduce_mean %a dims = [0] : {X} -> tensor<4xf32>",
        "tensor<4xf32>",
        lambda a: a.mean(0),
    ),
    Case(
        "graph.reduce_max",
        (X,),
        f"graph.reduce_max %a dims = [1] : {X} -> tensor<3xf32>",
        "tensor<3xf32>",
        lambda a: a.amax(1),
    ),
    Case(
        "graph.reduce_min",
        (X,),
        f"graph.reduce_min %a dims = [0, 1] : {X} -> tensor<f32>",
        "tensor<f32>",
        lambda a: a.amin((0, 1)),
    ),
    Case(
        "graph.reduce_prod",
        (X,),
        f"graph.reduce_prod %a dims = [0, 1] : {X} -> tensor<f32>",
        "tensor<f32>",
        lambda a: a.prod(),
    ),
    Case(
        "graph.reshape",
        (X,),
        f"graph.reshape %a : {X} -> tensor<2x6xf32>",
        "tensor<2x6xf32>",
        lambda a: a.reshape(2, 6),
    ),
    Case(
        "graph.permute",
        (X,),
        f"graph.permute %a perm = [1, 0] : {X} -> tensor<4x3xf32>",
        "tensor<4x3xf32>",
        lambda a: a.t(),
    ),
    Case(
        "graph.slice",
        (X,),
        f"graph.slice %a start = [1, 0] limit = [3, 4] stride = [1, 2] : {X} -> tensor<2x2xf32>",
        "tensor<2x2xf32>",
        lambda a: a[1:3, 0:4:2],
    ),
    Case(
        "graph.concat",
        (X, "tensor<3x2xf32>"),
        f"graph.concat %a, %b dim = 1 : {X}, tensor<3x2xf32> -> tensor<3x6xf32>",
        "tensor<3x6xf32>",
        lambda a, b: torch.cat([a, b], 1),
    ),
    Case(
        "graph.matmul",
        ("tensor<2x3x4xf32>", "tensor<4x5xf32>"),
        "graph.matmul %a, %b : tensor<2x3x4xf32>, tensor<4x5xf32> -> tensor<2x3x5xf32>",
        "tensor<2x3x5xf32>",
        torch.matmul,
    ),
    Case(
        "graph.linear",
        (X, "tensor<5x4xf32>", "tensor<5xf32>"),
        f"graph.linear %a, %b bias(%c : tensor<5xf32>) : {X}, tensor<5x4xf32> -> tensor<3x5xf32>",
        "tensor<3x5xf32>",
        F.linear,
    ),
    Case(
        "graph.torch_call",
        (X,),
        f'graph.torch_call "aten.cumsum.default"(%a) args = ["%t0", 1] kwargs = {{}} : ({X}) -> {X}',
        X,
        lambda a: torch.cumsum(a, 1),
    ),
    Case(
        "graph.constant",
        (),
        "graph.constant dense<[1.5, 2.5]> : tensor<2xf32>",
        "tensor<2xf32>",
        lambda: torch.tensor([1.5, 2.5]),
    ),
    Case(
        "graph.softmax", (X,), f"graph.softmax %a dim = 1 : {X}", X, lambda a: torch.softmax(a, 1)
    ),
    Case(
        "graph.log_softmax",
        (X,),
        f"graph.log_softmax %a dim = 0 : {X}",
        X,
        lambda a: torch.log_softmax(a, 0),
    ),
    Case(
        "graph.layer_norm",
        (X, "tensor<4xf32>", "tensor<4xf32>"),
        f"graph.layer_norm %a weight(%b : tensor<4xf32>) bias(%c : tensor<4xf32>) rank = 1 eps = 1.0e-05 : {X}",
        X,
        lambda a, w, b: F.layer_norm(a, (4,), w, b, 1e-5),
    ),
    Case(
        "graph.rms_norm",
        (X, "tensor<4xf32>"),
        f"graph.rms_norm %a weight(%b : tensor<4xf32>) rank = 1 eps = 1.0e-06 : {X}",
        X,
        lambda a, w: F.rms_norm(a, (4,), w, 1e-6),
    ),
    Case(
        "graph.gelu",
        (X,),
        f'graph.gelu %a approximate = "tanh" : {X}',
        X,
        lambda a: F.gelu(a, approximate="tanh"),
    ),
    Case(
        "graph.var",
        (X,),
        f"graph.var %a dims = [1] correction = 1 : {X} -> tensor<3xf32>",
        "tensor<3xf32>",
        lambda a: torch.var(a, 1, correction=1),
    ),
    # padding and pooling
    Case(
        "graph.pad",
        (X,),
        f'graph.pad %a low = [1, -1] high = [0, 2] mode = "constant" value = 2.5 : f64 : {X} '
        "-> tensor<4x5xf32>",
        "tensor<4x5xf32>",
        lambda a: F.pad(a, (-1, 2, 1, 0), value=2.5),
    ),
    Case(
        "graph.pool",
        (X,),
        f'graph.pool %a kind = "max" kernel = [3] stride = [2] padding = [1] dilation = [1] : {X} '
        "-> tensor<3x2xf32>",
        "tensor<3x2xf32>",
        lambda a: F.max_pool1d(a, 3, 2, 1),
    ),
    Case(
        "graph.patches",
        ("tensor<2x3x4xf32>",),
        "graph.patches %a kernel = [2, 3] stride = [2, 1] padding = [1, 1] : tensor<2x3x4xf32> "
        "-> tensor<2x4x2x2x3xf32>",
        "tensor<2x4x2x2x3xf32>",
        lambda a: (
            F.unfold(a[None], (2, 3), padding=(1, 1), stride=(2, 1))
            .reshape(2, 2, 3, 2, 4)
            .permute(3, 4, 0, 1, 2)
        ),
    ),
    # (gather) random i64 inputs are 0 or 1: valid rows of X.
    Case(
        "graph.gather",
        (X, "tensor<5x1xi64>"),
        f"graph.gather %a[%b] dim = 0 : {X}, tensor<5x1xi64> -> tensor<5x4xf32>",
        "tensor<5x4xf32>",
        lambda a, i: a[i[:, 0]],
    ),
    # bitwise and logical ops, division with rounding, erfc, argmax/argmin, index arithmetic
    unary("bitwise_not", torch.bitwise_not, "tensor<3x4xi1>"),
    *[
        Case(
            f"graph.{name}",
            ("tensor<3x4xi64>", "tensor<4xi64>"),
            f"graph.{name} %a, %b : tensor<3x4xi64>, tensor<4xi64> -> tensor<3x4xi64>",
            "tensor<3x4xi64>",
            fn,
        )
        for name, fn in (
            ("bitwise_and", torch.bitwise_and),
            ("bitwise_or", torch.bitwise_or),
            ("bitwise_xor", torch.bitwise_xor),
        )
    ],
    binary("fmod", torch.fmod),
    binary("remainder", torch.remainder),
    binary("floor_divide", torch.floor_divide),
    unary("erfc", torch.erfc),
    Case(
        "graph.argmax",
        (X,),
        f"graph.argmax %a dims = [1] : {X} -> tensor<3xi64>",
        "tensor<3xi64>",
        lambda a: torch.argmax(a, 1),
    ),
    Case(
        "graph.argmin",
        (X,),
        f"graph.argmin %a dims = [0] keepdim : {X} -> tensor<1x4xi64>",
        "tensor<1x4xi64>",
        lambda a: torch.argmin(a, 0, keepdim=True),
    ),
    Case(
        "graph.iota",
        (),
        "graph.iota dim = 1 start = 2 step = -3 : tensor<3x4xi64>",
        "tensor<3x4xi64>",
        lambda: (2 - 3 * torch.arange(4)).expand(3, 4),
    ),
    Case(
        "graph.size_value",
        ("tensor<?x4xf32, #graph.syms<s0>>",),
        "graph.size_value <2 * s0 - 1> : tensor<i64>",
        "tensor<i64>",
        lambda a: torch.tensor(2 * a.shape[0] - 1),
        sizes="s0 = input(0, 0) hint 3",
    ),
    Case("graph.flip", (X,), f"graph.flip %a dims = [0, 1] : {X}", X, lambda a: a.flip(0, 1)),
    Case(
        "graph.roll",
        (X,),
        f"graph.roll %a shifts = [3, 1] dims = [1, 0] : {X}",
        X,
        lambda a: torch.roll(a, (3, 1), (1, 0)),
    ),
    # scans
    Case(
        "graph.scan",
        (X,),
        f'graph.scan %a dim = 1 kind = "argmin" : {X} -> tensor<3x4xi64>',
        "tensor<3x4xi64>",
        lambda a: torch.cummin(a, 1).indices,
    ),
]


def program(case: Case) -> str:
    args = ", ".join(f"%{chr(ord('a') + i)}: {t}" for i, t in enumerate(case.arg_types))
    table = f" attributes {{graph.sizes = #graph.sizes<{case.sizes}>}}" if case.sizes else ""
    return (
        f"func.func @f({args}) -> {case.result_type}{table} {{\n"
        f"  %r = {case.body}\n"
        f"  func.return %r : {case.result_type}\n}}\n"
    )


def random_input(type_text: str, gen: torch.Generator) -> Tensor:
    t = xfuse.parse(f"func.func private @g() -> {type_text}").body.block.first_op
    assert isinstance(t, func.FuncOp)
    tensor_type = t.function_type.outputs.data[0]
    shape = tuple(
        5 if d < 0 else d
        for d in tensor_type.get_shape()  # pyright: ignore[reportAttributeAccessIssue]
    )
    dtype = dtypes.to_torch(tensor_type.element_type)  # pyright: ignore[reportAttributeAccessIssue]
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    # Positive values keep log, sqrt, rsqrt and pow real.
    return (torch.rand(shape, generator=gen) + 0.5).to(dtype)


@pytest.mark.parametrize("case", CASES, ids=[c.op for c in CASES])
def test_op_matches_torch(case: Case) -> None:
    gen = torch.Generator().manual_seed(0)
    inputs = [random_input(t, gen) for t in case.arg_types]
    (result,) = interpret(xfuse.parse(program(case)), inputs)
    # (inputs in [0.5, 1.5) leave the domain of asin, acos, atanh and acosh in part: NaN there)
    torch.testing.assert_close(result, case.expected(*inputs), equal_nan=True)


def test_every_interpreted_op_has_a_case() -> None:
    assert {c.op for c in CASES} == set(OP_IMPLS)


def test_integer_division_truncates() -> None:
    text = program(
        Case(
            "graph.div",
            ("tensor<3xi32>", "tensor<3xi32>"),
            "graph.div %a, %b : tensor<3xi32>, tensor<3xi32> -> tensor<3xi32>",
            "tensor<3xi32>",
            torch.div,
        )
    )
    (result,) = interpret(
        xfuse.parse(text),
        [torch.tensor([7, -7, 5], dtype=torch.int32), torch.tensor([2, 2, -3], dtype=torch.int32)],
    )
    assert result.tolist() == [3, -3, -1]


GROUP = """\
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0:2 = fusion.group (%x, %y) kind = "elementwise" rule = "test" : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):
    %s = graph.add %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    %r = graph.relu %s : tensor<4xf32>
    fusion.yield %s, %r : tensor<4xf32>, tensor<4xf32>
  }
  func.return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
}
"""


def test_fusion_group() -> None:
    x, y = torch.randn(4), torch.randn(4)
    s, r = interpret(xfuse.parse(GROUP), [x, y])
    torch.testing.assert_close(s, x + y)
    torch.testing.assert_close(r, torch.relu(x + y))


UNARY = program(unary("neg", torch.neg))


def test_wrong_number_of_arguments() -> None:
    with pytest.raises(InterpretError, match="@f takes 1 arguments, got 2"):
        interpret(xfuse.parse(UNARY), [torch.zeros(3, 4), torch.zeros(3, 4)])


def test_wrong_shape() -> None:
    with pytest.raises(
        InterpretError,
        match=r"argument 0 of @f expects tensor<3x4xf32>, got a tensor of shape \[4, 3\]",
    ):
        interpret(xfuse.parse(UNARY), [torch.zeros(4, 3)])


def test_wrong_dtype() -> None:
    with pytest.raises(InterpretError, match="dtype torch.float64"):
        interpret(xfuse.parse(UNARY), [torch.zeros(3, 4, dtype=torch.float64)])


def test_unknown_op() -> None:
    text = UNARY.replace("graph.neg %a : tensor<3x4xf32>", "arith.negf %a : tensor<3x4xf32>")
    with pytest.raises(InterpretError, match="does not know op 'arith.negf'"):
        interpret(xfuse.parse(text), [torch.zeros(3, 4)])


def test_unknown_torch_operator() -> None:
    text = program(
        Case(
            "graph.torch_call",
            (X,),
            f'graph.torch_call "aten.no_such_op.default"(%a) args = ["%t0"] kwargs = {{}} : ({X}) -> {X}',
            X,
            torch.neg,
        )
    )
    with pytest.raises(InterpretError, match="unknown torch operator 'aten.no_such_op.default'"):
        interpret(xfuse.parse(text), [torch.zeros(3, 4)])


def test_named_function_and_missing_function() -> None:
    module = xfuse.parse(UNARY + UNARY.replace("@f", "@g").replace("graph.neg", "graph.abs"))
    x = -torch.ones(3, 4)
    torch.testing.assert_close(interpret(module, [x], function="g")[0], torch.ones(3, 4))
    with pytest.raises(InterpretError, match="no function @h"):
        find_function(module, "h")


PARAMS = """\
func.func @forward(%w: tensor<4xf32> {graph.param = "fc.weight"}, %x: tensor<4xf32> {graph.input = "x"}, %b: tensor<4xf32> {graph.param = "fc.bias"}) -> tensor<4xf32> {
  %0 = graph.mul %x, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %1 = graph.add %0, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return %1 : tensor<4xf32>
}
"""


def forward() -> func.FuncOp:
    return find_function(xfuse.parse(PARAMS), "forward")


def test_bind_arguments_orders_params_and_inputs() -> None:
    w, x, b = torch.randn(4), torch.randn(4), torch.randn(4)
    args = bind_arguments(forward(), [x], {"fc.bias": b, "fc.weight": w})
    assert [a is t for a, t in zip(args, [w, x, b], strict=True)] == [True, True, True]
    torch.testing.assert_close(interpret(forward(), args)[0], x * w + b)


def test_bind_arguments_missing_parameter() -> None:
    with pytest.raises(InterpretError, match="no value for parameter 'fc.bias' \\(argument 2\\)"):
        bind_arguments(forward(), [torch.zeros(4)], {"fc.weight": torch.zeros(4)})


def test_bind_arguments_input_count() -> None:
    params = {"fc.weight": torch.zeros(4), "fc.bias": torch.zeros(4)}
    with pytest.raises(InterpretError, match="too few inputs"):
        bind_arguments(forward(), [], params)
    with pytest.raises(InterpretError, match="too many inputs"):
        bind_arguments(forward(), [torch.zeros(4), torch.zeros(4)], params)
