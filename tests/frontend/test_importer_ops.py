"""Every mapped aten op: imported without torch_call, interpreted equal to eager torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from frontend_util import check_against_eager, op_names

Case = tuple[str, Callable[..., Any], Callable[[], tuple[Any, ...]], str]

_gen = torch.Generator().manual_seed(0)


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen).to(dtype)


def pos(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=_gen) + 0.5


def ints(*shape: int, low: int = -5, high: int = 6) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=_gen)


# (id, function, inputs, a graph op the import must contain)
CASES: list[Case] = [
    ("add", lambda a, b: a + b, lambda: (rand(3, 4), rand(4)), "graph.add"),
    (
        "add_alpha",
        lambda a, b: torch.add(a, b, alpha=2.5),
        lambda: (rand(3, 4), rand(3, 4)),
        "graph.add",
    ),
    ("add_scalar", lambda a: a + 2.0, lambda: (rand(3, 4),), "graph.add"),
    (
        "sub_alpha",
        lambda a, b: torch.sub(a, b, alpha=3),
        lambda: (rand(2, 3), rand(2, 3)),
        "graph.sub",
    ),
    ("rsub", lambda a: 1 - a, lambda: (rand(5),), "graph.sub"),
    ("mul", lambda a, b: a * b, lambda: (rand(2, 1, 4), rand(3, 1)), "graph.mul"),
    ("mul_scalar", lambda a: a * 3, lambda: (ints(4),), "graph.mul"),
    ("div", lambda a, b: a / b, lambda: (rand(3, 4), pos(3, 4)), "graph.div"),
    ("div_scalar", lambda a: a / 4, lambda: (rand(3, 4),), "graph.div"),
    (
        "div_trunc_int",
        lambda a: torch.div(a, 3, rounding_mode="trunc"),
        lambda: (ints(8),),
        "graph.div",
    ),
    ("neg", torch.neg, lambda: (rand(6),), "graph.neg"),
    ("abs", torch.abs, lambda: (rand(6),), "graph.abs"),
    ("exp", torch.exp, lambda: (rand(6),), "graph.exp"),
    ("log", torch.log, lambda: (pos(6),), "graph.log"),
    ("sqrt", torch.sqrt, lambda: (pos(6),), "graph.sqrt"),
    ("rsqrt", torch.rsqrt, lambda: (pos(6),), "graph.rsqrt"),
    ("tanh", torch.tanh, lambda: (rand(6),), "graph.tanh"),
    ("sigmoid", torch.sigmoid, lambda: (rand(6),), "graph.sigmoid"),
    ("relu", torch.relu, lambda: (rand(6),), "graph.relu"),
    ("relu_int", torch.relu, lambda: (ints(6),), "graph.relu"),
    ("erf", torch.erf, lambda: (rand(6),), "graph.erf"),
    ("sin", torch.sin, lambda: (rand(6),), "graph.sin"),
    ("cos", torch.cos, lambda: (rand(6),), "graph.cos"),
    ("reciprocal", torch.reciprocal, lambda: (pos(6),), "graph.reciprocal"),
    ("exp_of_int", torch.exp, lambda: (ints(6),), "graph.exp"),
    ("pow_scalar", lambda a: a**3, lambda: (rand(6),), "graph.pow"),
    ("pow_tensor", torch.pow, lambda: (pos(6), rand(6)), "graph.pow"),
    ("pow_scalar_base", lambda a: 2**a, lambda: (rand(6),), "graph.pow"),
    ("maximum", torch.maximum, lambda: (rand(3, 4), rand(4)), "graph.maximum"),
    ("minimum", torch.minimum, lambda: (rand(3, 4), rand(3, 1)), "graph.minimum"),
    ("clamp", lambda a: a.clamp(-0.5, 0.5), lambda: (rand(10),), "graph.minimum"),
    ("clamp_min", lambda a: a.clamp(min=0.1), lambda: (rand(10),), "graph.maximum"),
    ("clamp_max", lambda a: a.clamp(max=0.1), lambda: (rand(10),), "graph.minimum"),
    (
        "clamp_tensor",
        lambda a, lo, hi: a.clamp(lo, hi),
        lambda: (rand(3, 4), rand(4) - 1, rand(4) + 1),
        "graph.minimum",
    ),
    ("hardtanh", F.hardtanh, lambda: (rand(10) * 2,), "graph.maximum"),
    ("leaky_relu", lambda a: F.leaky_relu(a, 0.2), lambda: (rand(10),), "graph.where"),
    ("eq", torch.eq, lambda: (ints(8), ints(8)), "graph.eq"),
    ("ne_scalar", lambda a: a != 1, lambda: (ints(8),), "graph.ne"),
    ("lt", torch.lt, lambda: (rand(3, 4), rand(4)), "graph.lt"),
    ("le_scalar", lambda a: a <= 0.0, lambda: (rand(8),), "graph.le"),
    ("gt", torch.gt, lambda: (rand(8), rand(8)), "graph.gt"),
    ("ge_scalar", lambda a: a >= 0.5, lambda: (rand(8),), "graph.ge"),
    (
        "where",
        lambda c, a, b: torch.where(c > 0, a, b),
        lambda: (rand(3, 4), rand(3, 4), rand(4)),
        "graph.where",
    ),
    ("where_scalar", lambda a: torch.where(a > 0, a, 0.0), lambda: (rand(8),), "graph.where"),
    ("masked_fill", lambda a: a.masked_fill(a > 0, -1.0), lambda: (rand(8),), "graph.where"),
    ("to_f16", lambda a: a.to(torch.float16), lambda: (rand(8),), "graph.cast"),
    ("to_i32", lambda a: a.to(torch.int32), lambda: (rand(8) * 4,), "graph.cast"),
    (
        "to_device_f16",  # aten.to.device onto the device it is on: a cast
        lambda a: a.to(a.device, torch.float16) * 2,
        lambda: (rand(8),),
        "graph.cast",
    ),
    ("to_same_device", lambda a: a.to(a.device) * 2, lambda: (rand(8),), "graph.mul"),
    ("float_of_bool", lambda a: (a > 0).float(), lambda: (rand(8),), "graph.cast"),
    ("expand", lambda a: a.expand(3, 4, 5), lambda: (rand(4, 1),), "graph.broadcast_in_dim"),
    (
        "expand_new_dims",
        lambda a: a.unsqueeze(0).expand(2, 3, 4) * 1.0,
        lambda: (rand(3, 4),),
        "graph.broadcast_in_dim",
    ),
    ("view", lambda a: a.view(4, 6), lambda: (rand(2, 3, 4),), "graph.reshape"),
    ("reshape", lambda a: a.reshape(-1), lambda: (rand(2, 3, 4).transpose(0, 1),), "graph.reshape"),
    ("unsqueeze", lambda a: a.unsqueeze(1), lambda: (rand(3, 4),), "graph.reshape"),
    ("squeeze", lambda a: a.squeeze(), lambda: (rand(3, 1, 4, 1),), "graph.reshape"),
    ("squeeze_dim", lambda a: a.squeeze(1), lambda: (rand(3, 1, 4),), "graph.reshape"),
    ("flatten", lambda a: a.flatten(1), lambda: (rand(2, 3, 4),), "graph.reshape"),
    ("permute", lambda a: a.permute(2, 0, 1), lambda: (rand(2, 3, 4),), "graph.permute"),
    ("transpose", lambda a: a.transpose(-1, 0), lambda: (rand(2, 3, 4),), "graph.permute"),
    ("t", lambda a: a.t(), lambda: (rand(3, 4),), "graph.permute"),
    ("slice", lambda a: a[1:3, ::2], lambda: (rand(4, 7),), "graph.slice"),
    ("slice_negative", lambda a: a[:, -3:-1], lambda: (rand(4, 7),), "graph.slice"),
    ("select", lambda a: a[:, 2], lambda: (rand(4, 7),), "graph.slice"),
    ("select_negative", lambda a: a[-1], lambda: (rand(4, 7),), "graph.slice"),
    ("narrow", lambda a: a.narrow(1, 2, 3), lambda: (rand(4, 7),), "graph.slice"),
    ("split", lambda a: a.split(2, dim=1), lambda: (rand(3, 5),), "graph.slice"),
    ("chunk", lambda a: a.chunk(3, dim=0), lambda: (rand(6, 2),), "graph.slice"),
    ("unbind", lambda a: a.unbind(1), lambda: (rand(2, 3),), "graph.slice"),
    (
        "cat",
        lambda a, b: torch.cat([a, b], dim=-1),
        lambda: (rand(2, 3), rand(2, 5)),
        "graph.concat",
    ),
    (
        "cat_promotes",
        lambda a, b: torch.cat([a, b]),
        lambda: (rand(2, 3), ints(1, 3)),
        "graph.concat",
    ),
    (
        "stack",
        lambda a, b: torch.stack([a, b], dim=1),
        lambda: (rand(2, 3), rand(2, 3)),
        "graph.concat",
    ),
    ("sum", lambda a: a.sum(1), lambda: (rand(3, 4),), "graph.reduce_sum"),
    ("sum_all", lambda a: a.sum(), lambda: (rand(3, 4),), "graph.reduce_sum"),
    (
        "sum_keepdim",
        lambda a: a.sum((0, 2), keepdim=True),
        lambda: (rand(2, 3, 4),),
        "graph.reduce_sum",
    ),
    ("sum_int", lambda a: a.sum(0), lambda: (ints(3, 4).to(torch.int32),), "graph.reduce_sum"),
    ("sum_bool", lambda a: (a > 0).sum(), lambda: (rand(3, 4),), "graph.reduce_sum"),
    (
        "sum_dtype",
        lambda a: a.sum(1, dtype=torch.float64),
        lambda: (rand(3, 4),),
        "graph.reduce_sum",
    ),
    ("mean", lambda a: a.mean(-1), lambda: (rand(3, 4),), "graph.reduce_mean"),
    ("mean_all", lambda a: a.mean(), lambda: (rand(3, 4),), "graph.reduce_mean"),
    ("amax", lambda a: a.amax(1, keepdim=True), lambda: (rand(3, 4),), "graph.reduce_max"),
    ("amin", lambda a: a.amin((0, 1)), lambda: (rand(3, 4),), "graph.reduce_min"),
    ("max_all", lambda a: a.max(), lambda: (rand(3, 4),), "graph.reduce_max"),
    ("min_all", lambda a: a.min(), lambda: (ints(3, 4),), "graph.reduce_min"),
    ("prod", lambda a: a.prod(1), lambda: (pos(3, 4),), "graph.reduce_prod"),
    ("prod_all", lambda a: a.prod(), lambda: (pos(3, 4),), "graph.reduce_prod"),
    ("softmax", lambda a: torch.softmax(a, -1), lambda: (rand(3, 5),), "graph.softmax"),
    ("softmax_dim0", lambda a: F.softmax(a, dim=0), lambda: (rand(3, 5),), "graph.softmax"),
    (
        "softmax_dtype",
        lambda a: torch.softmax(a, 1, dtype=torch.float32),
        lambda: (rand(3, 5, dtype=torch.float16),),
        "graph.softmax",
    ),
    ("log_softmax", lambda a: F.log_softmax(a, dim=1), lambda: (rand(3, 5),), "graph.log_softmax"),
    (
        "layer_norm",
        lambda a, w, b: F.layer_norm(a, (5,), w, b),
        lambda: (rand(3, 5), rand(5), rand(5)),
        "graph.layer_norm",
    ),
    (
        "layer_norm_2d_no_affine",
        lambda a: F.layer_norm(a, (4, 5), eps=1e-3),
        lambda: (rand(3, 4, 5),),
        "graph.layer_norm",
    ),
    (
        "rms_norm",
        lambda a, w: F.rms_norm(a, (5,), w, eps=1e-6),
        lambda: (rand(3, 5), rand(5)),
        "graph.rms_norm",
    ),
    (
        "rms_norm_default_eps",
        lambda a: F.rms_norm(a, (5,)),
        lambda: (rand(3, 5),),
        "graph.rms_norm",
    ),
    ("gelu", F.gelu, lambda: (rand(3, 5),), "graph.gelu"),
    ("gelu_tanh", lambda a: F.gelu(a, approximate="tanh"), lambda: (rand(3, 5),), "graph.gelu"),
    ("silu", F.silu, lambda: (rand(3, 5),), "graph.silu"),
    ("var", lambda a: a.var(1), lambda: (rand(3, 5),), "graph.var"),
    (
        "var_correction",
        lambda a: torch.var(a, (0, 1), correction=0, keepdim=True),
        lambda: (rand(3, 5),),
        "graph.var",
    ),
    ("var_all", lambda a: a.var(), lambda: (rand(3, 5),), "graph.var"),
    ("std", lambda a: a.std(1), lambda: (rand(3, 5),), "graph.var"),
    ("mm", torch.mm, lambda: (rand(3, 4), rand(4, 5)), "graph.matmul"),
    ("bmm", torch.bmm, lambda: (rand(2, 3, 4), rand(2, 4, 5)), "graph.matmul"),
    ("matmul_batched", torch.matmul, lambda: (rand(2, 2, 3, 4), rand(4, 5)), "graph.matmul"),
    ("matmul_vec_mat", torch.matmul, lambda: (rand(4), rand(4, 5)), "graph.matmul"),
    ("matmul_mat_vec", torch.matmul, lambda: (rand(3, 4), rand(4)), "graph.matmul"),
    ("matmul_dot", torch.matmul, lambda: (rand(4), rand(4)), "graph"),
    ("linear", F.linear, lambda: (rand(2, 3, 4), rand(5, 4), rand(5)), "graph.linear"),
    ("linear_no_bias", F.linear, lambda: (rand(3, 4), rand(5, 4)), "graph.linear"),
    (
        "addmm",
        lambda b, x, w: torch.addmm(b, x, w, beta=0.5, alpha=2.0),
        lambda: (rand(5), rand(3, 4), rand(4, 5)),
        "graph.matmul",
    ),
    (
        "dropout_eval",
        lambda a: F.dropout(a, 0.5, training=False) + 1,
        lambda: (rand(8),),
        "graph.add",
    ),
    (
        "clone_contiguous_detach",
        lambda a: a.t().contiguous().clone().detach(),
        lambda: (rand(3, 4),),
        "graph.permute",
    ),
    (
        "zeros_ones",
        lambda a: a + torch.zeros(3, 4) + torch.ones(4),
        lambda: (rand(3, 4),),
        "graph.constant",
    ),
    ("full", lambda a: a * torch.full((4,), 2.5), lambda: (rand(3, 4),), "graph.constant"),
    ("full_like", lambda a: torch.full_like(a, 7.0), lambda: (rand(3, 4),), "graph.constant"),
    ("zeros_like_int", lambda a: torch.zeros_like(a) + a, lambda: (ints(3, 4),), "graph.constant"),
    (
        "lifted_tensor_constant",
        lambda a: a * torch.tensor([1.0, 2.0, 3.0]),
        lambda: (rand(2, 3),),
        "graph.mul",
    ),
    (
        "neg_inf_fill",
        lambda a: a.masked_fill(a < 0, float("-inf")).softmax(-1),
        lambda: (rand(3, 4).abs() - 0.1,),
        "graph.softmax",
    ),
    *[  # bitwise and logical ops, any/all, fmod, remainder, floor division, erfc
        ("logical_not", torch.logical_not, lambda: (rand(3, 4),), "graph.bitwise_not"),
        ("logical_and", torch.logical_and, lambda: (rand(3, 4), ints(4)), "graph.bitwise_and"),
        ("logical_or", torch.logical_or, lambda: (ints(3, 4), ints(4)), "graph.bitwise_or"),
        ("logical_xor", torch.logical_xor, lambda: (rand(3, 4), rand(3, 4)), "graph.bitwise_xor"),
        ("bitwise_not", lambda a: ~a, lambda: (ints(5),), "graph.bitwise_not"),
        (
            "bool_and",
            lambda a, b: (a > 0) & (b > 0),
            lambda: (rand(5), rand(5)),
            "graph.bitwise_and",
        ),
        ("int_or_scalar", lambda a: a | 6, lambda: (ints(5),), "graph.bitwise_or"),
        ("int_xor", lambda a, b: a ^ b, lambda: (ints(5), ints(5)), "graph.bitwise_xor"),
        ("any", lambda a: a.any(), lambda: (rand(3, 4),), "graph.reduce_max"),
        (
            "any_dim",
            lambda a: (a > 0).any(dim=1, keepdim=True),
            lambda: (rand(3, 4),),
            "graph.reduce_max",
        ),
        ("all_dims", lambda a: a.all(dim=(0, 1)), lambda: (ints(3, 4),), "graph.reduce_"),
        ("fmod", torch.fmod, lambda: (rand(3, 4), pos(4)), "graph.fmod"),
        ("fmod_int_scalar", lambda a: torch.fmod(a, -3), lambda: (ints(6),), "graph.fmod"),
        ("remainder", torch.remainder, lambda: (rand(3, 4), rand(4)), "graph.remainder"),
        ("remainder_scalar", lambda a: a % 2.5, lambda: (rand(6),), "graph.remainder"),
        ("remainder_int", lambda a: a % 4, lambda: (ints(6),), "graph.remainder"),
        ("floor_divide", lambda a, b: a // b, lambda: (rand(6), rand(6)), "graph.floor_divide"),
        ("floor_divide_int", lambda a: a // 3, lambda: (ints(6),), "graph.floor_divide"),
        (
            "div_floor",
            lambda a, b: torch.div(a, b, rounding_mode="floor"),
            lambda: (rand(6), rand(6)),
            "graph.floor_divide",
        ),
        (
            "div_trunc_float",
            lambda a, b: torch.div(a, b, rounding_mode="trunc"),
            lambda: (rand(6, dtype=torch.float16), rand(6, dtype=torch.float16)),
            "graph.trunc",
        ),
        ("erfc", torch.erfc, lambda: (rand(6),), "graph.erfc"),
        ("var_mean", lambda a: torch.var_mean(a, dim=1), lambda: (rand(3, 5),), "graph.var"),
        ("std_mean", lambda a: torch.std_mean(a, correction=0), lambda: (rand(3, 5),), "graph.var"),
        ("norm", lambda a: torch.linalg.vector_norm(a), lambda: (rand(3, 5),), "graph.sqrt"),
        (
            "norm_p",
            lambda a: torch.linalg.vector_norm(a, 3.5, dim=0, keepdim=True),
            lambda: (rand(3, 5),),
            "graph.pow",
        ),
        (
            "norm_inf_f16_dtype",
            lambda a: torch.linalg.vector_norm(a, float("inf"), dim=1, dtype=torch.float32),
            lambda: (rand(3, 5, dtype=torch.float16),),
            "graph.reduce_max",
        ),
        (
            "norm_0",
            lambda a: torch.linalg.vector_norm(a, 0, dim=1),
            lambda: (rand(3, 5),),
            "graph.ne",
        ),
        ("nanmean", lambda a: a.nanmean(dim=1), lambda: (rand(3, 5),), "graph.bitwise_not"),
        ("isnan_bool", lambda a: torch.isnan(a > 0), lambda: (rand(5),), "graph.isnan"),
        ("argmax_dim", lambda a: a.argmax(dim=1), lambda: (rand(3, 5),), "graph.argmax"),
        ("argmax_all", lambda a: a.argmax(), lambda: (ints(3, 5),), "graph.argmax"),
        (
            "argmin_keepdim",
            lambda a: a.argmin(0, keepdim=True),
            lambda: (rand(3, 5),),
            "graph.argmin",
        ),
        ("heaviside_bool", torch.heaviside, lambda: (rand(5) > 0, rand(5) > 0), "graph.where"),
    ],
]


@pytest.mark.parametrize(
    ("fn", "make_inputs", "expected_op"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_mapped_op_matches_eager(
    fn: Callable[..., Any], make_inputs: Callable[[], tuple[Any, ...]], expected_op: str
) -> None:
    imported = check_against_eager(fn, make_inputs())
    names = op_names(imported)
    assert "graph.torch_call" not in names
    assert any(n.startswith(expected_op) for n in names), names


PROMOTION_CASES: list[Case] = [
    ("int_plus_float", lambda a, b: a + b, lambda: (ints(3, 4), rand(4)), "graph.cast"),
    (
        "f16_times_f32_scalar_tensor",
        lambda a, b: a * b,
        lambda: (rand(4, dtype=torch.float16), rand(())),
        "graph.cast",
    ),
    (
        "f16_times_python_float",
        lambda a: a * 1.5,
        lambda: (rand(4, dtype=torch.float16),),
        "graph.mul",
    ),
    (
        "f16_plus_f32_tensor",
        lambda a, b: a + b,
        lambda: (rand(4, dtype=torch.float16), rand(4)),
        "graph.cast",
    ),
    (
        "bf16_minus_f64",
        lambda a, b: a - b,
        lambda: (rand(4, dtype=torch.bfloat16), rand(4, dtype=torch.float64)),
        "graph.cast",
    ),
    ("int_true_div", lambda a, b: a / b, lambda: (ints(6), ints(6, low=1)), "graph.div"),
    ("int_div_float_scalar", lambda a: a / 2, lambda: (ints(6),), "graph.div"),
    ("int_times_float_scalar", lambda a: a * 0.5, lambda: (ints(6),), "graph.mul"),
    ("i32_plus_i64", lambda a, b: a + b, lambda: (ints(6).to(torch.int32), ints(6)), "graph.cast"),
    ("int_lt_float", lambda a, b: a < b, lambda: (ints(6), rand(6)), "graph.lt"),
    ("int_eq_float_scalar", lambda a: a == 2.5, lambda: (ints(6),), "graph.eq"),
    ("f16_gt_f32", lambda a, b: a > b, lambda: (rand(6, dtype=torch.float16), rand(6)), "graph.gt"),
    (
        "bool_and_int_where",
        lambda a, b: torch.where(a > 0, b, 1.5),
        lambda: (rand(6), ints(6)),
        "graph.where",
    ),
    ("int_maximum_float", torch.maximum, lambda: (ints(6), rand(6)), "graph.maximum"),
    ("int_mean_via_float", lambda a: a.float().mean(), lambda: (ints(6),), "graph.reduce_mean"),
    (
        "f16_matmul_f16",
        torch.matmul,
        lambda: (rand(3, 4, dtype=torch.float16), rand(4, 2, dtype=torch.float16)),
        "graph.matmul",
    ),
    ("int_clamp_float", lambda a: a.clamp(min=0.5), lambda: (ints(6),), "graph.maximum"),
]


@pytest.mark.parametrize(
    ("fn", "make_inputs", "expected_op"),
    [c[1:] for c in PROMOTION_CASES],
    ids=[c[0] for c in PROMOTION_CASES],
)
def test_dtype_promotion_matches_eager(
    fn: Callable[..., Any], make_inputs: Callable[[], tuple[Any, ...]], expected_op: str
) -> None:
    inputs = make_inputs()
    imported = check_against_eager(fn, inputs)
    want = fn(*inputs)
    got = imported.function.function_type.outputs.data[0]
    from xfuse.ir.dtypes import from_torch

    assert got.element_type == from_torch(want.dtype)  # pyright: ignore[reportAttributeAccessIssue]
    names = op_names(imported)
    assert "graph.torch_call" not in names
    assert expected_op in names, names


@pytest.mark.parametrize(
    "fn",
    [lambda a: a > 1, lambda a: a == 0.5, lambda a, b=2: torch.lt(a, b)],
    ids=["gt", "eq", "lt"],
)
def test_comparison_with_scalar_compares_in_the_tensor_dtype(fn: Callable[..., Any]) -> None:
    """torch compares f16 with a Python number in f16 (no cast to f32, its compute type)."""
    imported = check_against_eager(fn, (rand(6, dtype=torch.float16),))
    assert "graph.cast" not in op_names(imported)
