"""`simplify`: a sum over a dim of a one-hot becomes the element it selects, bit for bit (NaN,
infinities and the sign of zero included), and the cross-entropy backward loses its pass over
the classes while its gradients stay eager's."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from xdsl.dialects.builtin import ModuleOp

import xfuse
from tests.test_training_dynamic import recorded_parts
from xfuse import interpret
from xfuse.dialects import graph
from xfuse.frontend.export import import_for_xfuse
from xfuse.ir.context import make_context
from xfuse.passes.transforms.simplify import SimplifyPass
from xfuse.pipeline import DEFAULT_PIPELINE

V = 37
"""Classes: not a power of two."""

LABELS = (0, V - 1, 5, -1, V, -100)
VALUES = (1.5, -2.0, 0.0, -0.0, math.inf, -math.inf, math.nan)
ROWS = list(itertools.product(LABELS, VALUES, VALUES))
"""Every (label, selected value, factor): labels inside and outside the classes."""

N = len(ROWS)


def onehot_module(body: str, result: str) -> ModuleOp:
    """A function of the labels `%label` [N, 1], the selected values `%a` [N, 1] and the
    factors `%w` [N, 1] whose body ends in a sum over the V classes."""
    return xfuse.parse(
        f"func.func @f(%label: tensor<{N}x1xi64>, %a: tensor<{N}x1xf32>, "
        f"%w: tensor<{N}x1xf32>) -> {result} {{\n"
        f"  %zeros = graph.constant dense<0.0> : tensor<{N}x{V}xf32>\n"
        f"  %nzero = graph.constant dense<-0.0> : tensor<f32>\n"
        f"{body}"
        "}\n"
    )


def cross_entropy_like() -> ModuleOp:
    """nll_loss's gradient times the row weight, summed over the classes (keepdim)."""
    t = f"tensor<{N}x{V}"
    return onehot_module(
        f"  %i = graph.broadcast_in_dim %label dims = [0, 1] : tensor<{N}x1xi64> -> {t}xi64>\n"
        f"  %iota = graph.iota dim = 1 start = 0 step = 1 : {t}xi64>\n"
        f"  %eq = graph.eq %i, %iota : {t}xi64>, {t}xi64> -> {t}xi1>\n"
        f"  %ab = graph.broadcast_in_dim %a dims = [0, 1] : tensor<{N}x1xf32> -> {t}xf32>\n"
        f"  %h = graph.where %eq, %ab, %zeros : {t}xi1>, {t}xf32>, {t}xf32> -> {t}xf32>\n"
        f"  %m = graph.mul %h, %w : {t}xf32>, tensor<{N}x1xf32> -> {t}xf32>\n"
        f"  %s = graph.reduce_sum %m dims = [1] keepdim : {t}xf32> -> tensor<{N}x1xf32>\n"
        f"  func.return %s : tensor<{N}x1xf32>\n",
        f"tensor<{N}x1xf32>",
    )


def bare_onehot() -> ModuleOp:
    """A one-hot of -0.0 elsewhere, its iota [V] counting from 3 on the left of the eq, summed
    without keepdim."""
    t = f"tensor<{N}x{V}"
    return onehot_module(
        f"  %iota = graph.iota dim = 0 start = 3 step = 1 : tensor<{V}xi64>\n"
        f"  %eq = graph.eq %iota, %label : tensor<{V}xi64>, tensor<{N}x1xi64> -> {t}xi1>\n"
        f"  %h = graph.where %eq, %a, %nzero : {t}xi1>, tensor<{N}x1xf32>, tensor<f32> -> {t}xf32>\n"
        f"  %s = graph.reduce_sum %h dims = [1] : {t}xf32> -> tensor<{N}xf32>\n"
        f"  func.return %s : tensor<{N}xf32>\n",
        f"tensor<{N}xf32>",
    )


def twice_scaled() -> ModuleOp:
    """The factor first, then a second factor of another rank."""
    t = f"tensor<{N}x{V}"
    return onehot_module(
        f"  %iota = graph.iota dim = 1 start = 0 step = 1 : {t}xi64>\n"
        f"  %eq = graph.eq %label, %iota : tensor<{N}x1xi64>, {t}xi64> -> {t}xi1>\n"
        f"  %h = graph.where %eq, %a, %zeros : {t}xi1>, tensor<{N}x1xf32>, {t}xf32> -> {t}xf32>\n"
        f"  %m = graph.mul %w, %h : tensor<{N}x1xf32>, {t}xf32> -> {t}xf32>\n"
        f"  %c = graph.constant dense<-3.0> : tensor<1xf32>\n"
        f"  %m2 = graph.mul %m, %c : {t}xf32>, tensor<1xf32> -> {t}xf32>\n"
        f"  %s = graph.reduce_sum %m2 dims = [1] keepdim : {t}xf32> -> tensor<{N}x1xf32>\n"
        f"  func.return %s : tensor<{N}x1xf32>\n",
        f"tensor<{N}x1xf32>",
    )


def scattered() -> ModuleOp:
    """The importer's one-hot where it keeps torch's scatter: -1 at each label, times the
    row weight (labels outside the classes are the scatter's error: `IN_RANGE` rows only)."""
    t = f"tensor<{N}x{V}"
    return onehot_module(
        f"  %z = graph.constant dense<0.0> : tensor<f32>\n"
        f"  %zb = graph.broadcast_in_dim %z dims = [] : tensor<f32> -> {t}xf32>\n"
        f'  %h = graph.torch_call "aten.scatter.value"(%zb, %label) args = ["%t0", -1 : i64, '
        f'"%t1", -1.0 : f64] kwargs = {{}} : ({t}xf32>, tensor<{N}x1xi64>) -> {t}xf32>\n'
        f"  %m = graph.mul %h, %w : {t}xf32>, tensor<{N}x1xf32> -> {t}xf32>\n"
        f"  %s = graph.reduce_sum %m dims = [1] keepdim : {t}xf32> -> tensor<{N}x1xf32>\n"
        f"  func.return %s : tensor<{N}x1xf32>\n",
        f"tensor<{N}x1xf32>",
    )


def simplified(module: ModuleOp) -> ModuleOp:
    out = module.clone()
    SimplifyPass().apply(make_context(), out)
    out.verify()
    return out


def reduce_sums(module: ModuleOp) -> int:
    return sum(isinstance(op, graph.ReduceSumOp) for op in module.walk())


def inputs(in_range: bool = False) -> list[torch.Tensor]:
    labels, values, factors = zip(*ROWS, strict=True)
    if in_range:
        labels = tuple(label % V for label in labels)
    return [
        torch.tensor(labels).view(N, 1),
        torch.tensor(values, dtype=torch.float32).view(N, 1),
        torch.tensor(factors, dtype=torch.float32).view(N, 1),
    ]


def assert_bitwise_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal values, NaN where NaN, and zeros of the same sign."""
    assert got.shape == want.shape
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan], want[~nan])
    assert torch.equal(got[~nan].signbit(), want[~nan].signbit())


def assert_same_bits(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> None:
    """The same f32 bits in each output: NaN payloads and zero signs too."""
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g.view(torch.int32), w.view(torch.int32))


@pytest.mark.parametrize("make", [cross_entropy_like, bare_onehot, twice_scaled, scattered])
def test_a_sum_of_a_one_hot_is_the_element_it_selects_bit_for_bit(
    make: Callable[[], ModuleOp],
) -> None:
    module = make()
    out = simplified(module)
    assert reduce_sums(module) == 1 and reduce_sums(out) == 0
    args = inputs(in_range=make is scattered)
    (want,) = interpret(module, args)
    (got,) = interpret(out, args)
    assert want.isnan().any() and (want == 0).any()
    assert want.isinf().any() or make is scattered  # (-1 times an infinity plus 0 * inf: NaN)
    assert_bitwise_equal(got, want)


def kept_module(body: str) -> ModuleOp:
    t = f"tensor<4x{V}"
    return xfuse.parse(
        f"func.func @f(%label: tensor<4x1xi64>, %a: tensor<4x1xf32>, %x: {t}xf32>) -> "
        f"tensor<4x1xf32> {{\n"
        f"  %zeros = graph.constant dense<0.0> : {t}xf32>\n"
        f"  %one = graph.constant dense<1.0> : {t}xf32>\n"
        f"  %iota = graph.iota dim = 1 start = 0 step = 1 : {t}xi64>\n"
        f"  %iota2 = graph.iota dim = 1 start = 0 step = 2 : {t}xi64>\n"
        f"{body}"
        f"  %s = graph.reduce_sum %h dims = [1] keepdim : {t}xf32> -> tensor<4x1xf32>\n"
        "  func.return %s : tensor<4x1xf32>\n"
        "}\n"
    )


KEPT = {
    "selected value varies": "%eq = graph.eq %label, %iota : tensor<4x1xi64>, tensor<4x37xi64> -> tensor<4x37xi1>\n"
    "%h = graph.where %eq, %x, %zeros : tensor<4x37xi1>, tensor<4x37xf32>, tensor<4x37xf32> -> tensor<4x37xf32>\n",
    "factor varies": "%eq = graph.eq %label, %iota : tensor<4x1xi64>, tensor<4x37xi64> -> tensor<4x37xi1>\n"
    "%w = graph.where %eq, %a, %zeros : tensor<4x37xi1>, tensor<4x1xf32>, tensor<4x37xf32> -> tensor<4x37xf32>\n"
    "%h = graph.mul %w, %x : tensor<4x37xf32>, tensor<4x37xf32> -> tensor<4x37xf32>\n",
    "iota counts by 2": "%eq = graph.eq %label, %iota2 : tensor<4x1xi64>, tensor<4x37xi64> -> tensor<4x37xi1>\n"
    "%h = graph.where %eq, %a, %zeros : tensor<4x37xi1>, tensor<4x1xf32>, tensor<4x37xf32> -> tensor<4x37xf32>\n",
    "not zero elsewhere": "%eq = graph.eq %label, %iota : tensor<4x1xi64>, tensor<4x37xi64> -> tensor<4x37xi1>\n"
    "%h = graph.where %eq, %a, %one : tensor<4x37xi1>, tensor<4x1xf32>, tensor<4x37xf32> -> tensor<4x37xf32>\n",
    "not an eq": "%eq = graph.le %label, %iota : tensor<4x1xi64>, tensor<4x37xi64> -> tensor<4x37xi1>\n"
    "%h = graph.where %eq, %a, %zeros : tensor<4x37xi1>, tensor<4x1xf32>, tensor<4x37xf32> -> tensor<4x37xf32>\n",
}


@pytest.mark.parametrize("body", KEPT.values(), ids=KEPT.keys())
def test_sums_that_are_no_one_hot_sums_are_left_alone(body: str) -> None:
    module = kept_module("".join(f"  {line}\n" for line in body.splitlines()))
    assert reduce_sums(simplified(module)) == 1


# ---------------------------------------------------------------------------------------------
# The cross-entropy backward
# ---------------------------------------------------------------------------------------------

WITHOUT_SIMPLIFY = DEFAULT_PIPELINE.replace("simplify,", "")


def labels_with_ignored(rows: int, classes: int) -> torch.Tensor:
    target = torch.randint(0, classes, (rows,))
    target[::3] = -100
    return target


CASES: dict[str, dict[str, Any]] = {
    "mean": {"reduction": "mean"},
    "sum": {"reduction": "sum"},
    "mean-ignored": {"reduction": "mean", "ignore_index": -100},
    "sum-ignored": {"reduction": "sum", "ignore_index": -100},
}


def class_sums(module: ModuleOp, classes: int) -> int:
    """Sums over a dim of `classes` elements."""
    return sum(
        isinstance(op, graph.ReduceSumOp)
        and any(graph.dims_of(op.input)[d] == classes for d in op.reduce_dims)
        for op in module.walk()
    )


@pytest.mark.parametrize("options", CASES.values(), ids=CASES.keys())
def test_the_cross_entropy_backward_has_no_sum_over_the_classes(options: dict[str, Any]) -> None:
    classes = 1001
    torch.manual_seed(0)
    logits = torch.randn(24, classes, requires_grad=True)
    target = labels_with_ignored(24, classes) if "ignore_index" in options else None
    target = torch.randint(0, classes, (24,)) if target is None else target

    def loss(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x, t, **options)

    backward = xfuse.explain(loss, (logits, target), training=True).parts["backward"]
    assert class_sums(backward.module, classes) == 0
    kept = xfuse.explain(loss, (logits, target), training=True, pipeline=WITHOUT_SIMPLIFY)
    assert class_sums(kept.parts["backward"].module, classes) == 1

    compiled = torch.compile(loss, backend="xfuse", options={"fallback": "error"})
    torch._dynamo.reset()
    got = compiled(logits, target)
    (got_grad,) = torch.autograd.grad(got, logits)
    want = loss(logits, target)
    (want_grad,) = torch.autograd.grad(want, logits)
    torch._dynamo.reset()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)


def test_the_symbolic_cross_entropy_backward_has_no_sum_over_the_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With `dynamic=True` the importer keeps nll_loss's one-hot as torch's scatter (its count
    of indices is symbolic): the backward, compiled once symbolically, sums nothing over the
    classes and gives eager's gradients at every size."""
    from xfuse.explanation import dynamic_explanation

    made = recorded_parts(monkeypatch)

    def loss(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x, t, ignore_index=-100)

    torch._dynamo.reset()
    compiled = torch.compile(loss, backend="xfuse", dynamic=True, options={"fallback": "error"})
    torch.manual_seed(0)
    for rows in (8, 11, 5):
        logits = torch.randn(rows, V, requires_grad=True)
        target = labels_with_ignored(rows, V)
        got = compiled(logits, target)
        want = loss(logits, target)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(
            torch.autograd.grad(got, logits)[0], torch.autograd.grad(want, logits)[0]
        )
    torch._dynamo.reset()
    backward = made["backward"]
    assert backward.dynamic is not None and not backward.programs
    assert reduce_sums(dynamic_explanation(backward.dynamic).module) == 0


# ---------------------------------------------------------------------------------------------
# Products by one
# ---------------------------------------------------------------------------------------------

MUL_BY_ONE: dict[str, tuple[str, int]] = {
    "f32 by a scalar one": ("%x, %one : tensor<4x3xf32>, tensor<f32> -> tensor<4x3xf32>", 0),
    "one on the left": ("%one, %x : tensor<f32>, tensor<4x3xf32> -> tensor<4x3xf32>", 0),
    "a broadcast one": ("%x, %ones : tensor<4x3xf32>, tensor<4x3xf32> -> tensor<4x3xf32>", 0),
    "by two": ("%x, %two : tensor<4x3xf32>, tensor<f32> -> tensor<4x3xf32>", 1),
    "x broadcast": ("%row, %ones : tensor<1x3xf32>, tensor<4x3xf32> -> tensor<4x3xf32>", 1),
}


@pytest.mark.parametrize("product,left", MUL_BY_ONE.values(), ids=MUL_BY_ONE.keys())
def test_a_product_by_one_of_the_other_factors_type_is_that_factor(product: str, left: int) -> None:
    module = xfuse.parse(
        "func.func @f(%x: tensor<4x3xf32>, %row: tensor<1x3xf32>, %i: tensor<4x3xi64>) "
        "-> tensor<4x3xf32> {\n"
        "  %one = graph.constant dense<1.0> : tensor<f32>\n"
        "  %two = graph.constant dense<2.0> : tensor<f32>\n"
        "  %ones = graph.constant dense<1.0> : tensor<4x3xf32>\n"
        f"  %y = graph.mul {product}\n"
        "  func.return %y : tensor<4x3xf32>\n"
        "}\n"
    )
    x = torch.tensor([[1.5, -0.0, math.inf], [-math.inf, math.nan, 3.0]] * 2)
    args = [x, x[:1], torch.arange(12).reshape(4, 3)]
    expected = interpret(module, args)
    after = simplified(module)
    assert sum(isinstance(op, graph.MulOp) for op in after.walk()) == left
    assert_same_bits(interpret(after, args), expected)


def test_an_output_that_was_a_product_by_one_of_an_input_is_fresh() -> None:
    """`x * 1.0` returns new memory in eager; with the product gone, the runtime copies."""

    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 1.0

    x = torch.randn(4, 3)
    compiled = xfuse.compile(Scale(), (x,))
    got = compiled(x)
    assert torch.equal(got, x) and got.data_ptr() != x.data_ptr()


GATHERS = {
    "arange": ("%i = graph.iota dim = 0 start = 0 step = 1 : tensor<8xi64>", "%i", 0),
    "arange reshaped": (
        "%j = graph.iota dim = 1 start = 0 step = 1 : tensor<1x8xi64>\n"
        "  %i = graph.reshape %j : tensor<1x8xi64> -> tensor<8xi64>",
        "%i",
        0,
    ),
    "from minus 8": ("%i = graph.iota dim = 0 start = -8 step = 1 : tensor<8xi64>", "%i", 1),
    "by two": ("%i = graph.iota dim = 0 start = -8 step = 2 : tensor<8xi64>", "%i", 1),
    "reversed": ("%i = graph.iota dim = 0 start = 7 step = -1 : tensor<8xi64>", "%i", 1),
    "an index tensor": ("%i = graph.reshape %idx : tensor<8xi64> -> tensor<8xi64>", "%i", 1),
}
"""Index tensors for a gather from an [8] table along dim 0, and how many gathers `simplify`
leaves: an iota from 0 by 1 over the whole dim reads each element at its own index."""


@pytest.mark.parametrize("index,name,left", GATHERS.values(), ids=GATHERS.keys())
def test_a_gather_at_each_elements_own_index_is_its_table(index: str, name: str, left: int) -> None:
    module = xfuse.parse(
        "func.func @f(%t: tensor<8xf32>, %idx: tensor<8xi64>) -> tensor<8xf32> {\n"
        f"  {index}\n"
        f"  %g = graph.gather %t[{name}] dim = 0 wrap : tensor<8xf32>, tensor<8xi64> -> tensor<8xf32>\n"
        "  func.return %g : tensor<8xf32>\n"
        "}\n"
    )
    args = [
        torch.tensor([1.5, -0.0, math.inf, -math.inf, math.nan, 3.0, 0.0, -2.0]),
        torch.tensor([3, 1, 4, 1, 5, -1, 2, 6]),
    ]
    expected = interpret(module, args)
    after = simplified(module)
    assert sum(isinstance(op, graph.GatherOp) for op in after.walk()) == left
    assert_same_bits(interpret(after, args), expected)


def test_a_group_norms_per_channel_scale_is_read_without_a_gather() -> None:
    """torch's group norm indexes its scale and shift by an arange over the channels."""
    norm = torch.nn.GroupNorm(2, 8)
    torch.nn.init.normal_(norm.weight)
    torch.nn.init.normal_(norm.bias)
    x = torch.randn(2, 8, 4, 4)
    imported = import_for_xfuse(norm, (x,)).program.module
    assert any(isinstance(op, graph.GatherOp) for op in imported.walk())
    assert not any(isinstance(op, graph.GatherOp) for op in simplified(imported).walk())
    torch.testing.assert_close(xfuse.compile(norm, (x,))(x), norm(x))
