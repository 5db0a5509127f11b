"""Eager's layout of each output, read from the FX graph (xfuse.frontend.outputs)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import xfuse
from xfuse.dialects.graph import row_major_strides
from xfuse.frontend.outputs import output_rules, overlaps


@pytest.mark.parametrize(
    ("shape", "stride", "expected"),
    [
        ((4, 8), (8, 1), False),
        ((4, 8), (1, 4), False),
        ((4, 8), (1, 0), True),
        ((4, 1, 5), (1, 1, 0), True),
        ((2, 2), (1, 1), True),
        ((2, 2), (3, 2), False),
        ((0, 8), (0, 0), False),
        ((1, 8), (0, 1), False),
        ((), (), False),
    ],
)
def test_overlaps(shape: tuple[int, ...], stride: tuple[int, ...], expected: bool) -> None:
    assert overlaps(shape, stride) is expected


def test_an_overlapping_traced_stride_of_a_fresh_output_is_not_eagers() -> None:
    """torch 2.11's meta `slice_scatter` keeps an expanded input's stride of 0; eager returns
    contiguous memory, and so must the output's rule."""

    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.slice_scatter(x, y, 0, 1, 2, 1)

    x, y = torch.randn(4, 1).expand(4, 8), torch.rand(1, 8)
    gm = torch.fx.experimental.proxy_tensor.make_fx(f, tracing_mode="fake")(x, y)
    (node,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    node.meta["val"] = torch.empty(4, 1).expand(4, 8)  # as torch 2.11's meta gives it
    (rule,) = output_rules([node], {}).rules
    assert rule.base == "fresh"
    assert rule.stride == row_major_strides((4, 8)) == (8, 1)


def test_an_expand_keeps_its_stride_of_zero() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).expand(4, 8)

    gm = torch.fx.experimental.proxy_tensor.make_fx(f, tracing_mode="fake")(torch.randn(4, 1))
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    out = output.args[0]
    (rule,) = output_rules([out], {}).rules
    assert rule.base == "fresh" and rule.stride == (1, 0)


SCATTERS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "slice": lambda x, y: torch.slice_scatter(x, y, 0, 1, 2, 1),
    "select": lambda x, y: torch.select_scatter(x, y[0], 0, 2),
    "diagonal": lambda x, y: torch.diagonal_scatter(x, y[0, :4], 0, 0, 1),
}


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(SCATTERS))
def test_a_scatter_into_an_expanded_input_matches_eager(name: str, device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    fn = SCATTERS[name]
    x = torch.randn(4, 1, device=device).expand(4, 8)
    y = torch.rand(1, 8, device=device)
    compiled = xfuse.compile(fn, (x, y), device, quiet=True, fallback="error")
    module = compiled.default.program.module
    assert not [op for op in module.walk() if op.name == "graph.torch_call"]
    for _ in range(3):  # on CUDA, the second call on runs as a CUDA graph
        got, want = compiled(x, y), fn(x, y)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert got.stride() == want.stride() == (8, 1)


def _scatter_then_add_(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A `slice_scatter` into a gapped view (eager clones it with its strides), then written in
    place: the result keeps the gaps, where the decomposed trace has a dense `add` (`triu`
    is an op that the importer decomposes)."""
    view = x.select(2, 3)
    out = torch.slice_scatter(view, y, 0, 1, None, 2)
    upper = torch.triu(out, 1)
    out.add_(view)
    return out, upper


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dynamic", [False, True])
def test_an_in_place_write_into_a_scatter_keeps_eagers_gapped_strides(
    device: str, dynamic: bool
) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    torch._dynamo.reset()
    compiled = torch.compile(_scatter_then_add_, backend="xfuse", dynamic=dynamic)
    for n in (8, 11):
        x = torch.randn(4, 5, n, device=device)
        y = torch.randn(2, 5, device=device)
        got, want = compiled(x, y), _scatter_then_add_(x, y)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert got[0].stride() == want[0].stride() == (5 * n, n)
    torch._dynamo.reset()


VIEW_CASES: list[tuple[object, tuple[object, ...]]] = [
    (torch.ops.aten.view.default, ([6, 4],)),
    (torch.ops.aten.permute.default, ([2, 0, 1],)),
    (torch.ops.aten.expand.default, ([5, 2, 3, 4],)),
    (torch.ops.aten.t.default, ()),
    (torch.ops.aten.transpose.int, (0, 2)),
    (torch.ops.aten.unsqueeze.default, (1,)),
    (torch.ops.aten.squeeze.dim, (0,)),
    (torch.ops.aten.select.int, (1, 2)),
    (torch.ops.aten.alias.default, ()),
]


@pytest.mark.parametrize(("op", "args"), VIEW_CASES, ids=str)
def test_a_view_replay_is_its_tensor_methods_call(
    op: object, args: tuple[object, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replayed view of `VIEW_METHODS` calls the `Tensor` method, with the overload's
    sizes, strides, storage offset and memory."""
    from xfuse.frontend.outputs import ViewReplay

    shapes = {torch.ops.aten.t.default: (3, 4), torch.ops.aten.squeeze.dim: (1, 3, 4)}
    base = torch.randn(*shapes.get(op, (2, 3, 4)))  # type: ignore[call-overload]
    replay = ViewReplay(op, args, ())
    assert replay.method is not None
    method = getattr(torch.Tensor, replay.method)
    called: list[str] = []

    def spy(self: torch.Tensor, *a: object) -> torch.Tensor:
        called.append(replay.method or "")
        return method(self, *a)

    monkeypatch.setattr(torch.Tensor, replay.method, spy)
    got = replay(base)
    monkeypatch.undo()
    want = op(base, *args)  # type: ignore[operator]
    assert called == [replay.method]
    assert (got.shape, got.stride(), got.storage_offset()) == (
        want.shape,
        want.stride(),
        want.storage_offset(),
    )
    assert got.data_ptr() == want.data_ptr() and got._base is base


def test_a_view_replay_with_keywords_calls_the_overload() -> None:
    from xfuse.frontend.outputs import ViewReplay

    replay = ViewReplay(torch.ops.aten.expand.default, ([3, 4],), (("implicit", True),))
    assert replay.method is None
    assert replay(torch.randn(1, 4)).stride() == (0, 1)
    assert ViewReplay(torch.ops.aten.diagonal.default, (), ()).method is None


def test_a_chain_of_aliases_replays_one() -> None:
    """`aten.alias` steps change nothing but the tensor: a chain keeps one where it is aliases
    alone, none where another view makes the tensor anew."""

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = x * 2
        a = torch.ops.aten.alias.default(torch.ops.aten.alias.default(h))
        t = torch.ops.aten.alias.default(h.t())
        return h, a, t

    gm = torch.fx.experimental.proxy_tensor.make_fx(f, tracing_mode="fake")(torch.randn(3, 4))
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    rules = output_rules(list(output.args[0]), {}).rules
    alias, t = torch.ops.aten.alias.default, torch.ops.aten.t.default
    assert [v.op for v in rules[1].chain] == [alias] and rules[1].index == 0
    assert [v.op for v in rules[2].chain] == [t] and rules[2].index == 0
    x = torch.randn(3, 4)
    h, a, tt = xfuse.compile(f, (x,), "cpu", quiet=True, fallback="error")(x)
    assert a is not h and a._base is h and a.data_ptr() == h.data_ptr()
    assert tt._base is h and tt.stride() == (1, 4)
    torch.testing.assert_close(a, x * 2)


def _reshape_of_a_transposed_result(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    rows = torch.tensor([0, 1, 0])
    y = torch.index_put(x, (rows,), torch.ones(3, x.shape[1]), True)  # keeps x's layout
    z = torch.floor_divide(y, torch.tensor(0.25))
    return z.reshape(4, 2, 2), z


def test_a_reshape_that_eager_copies_is_fresh_not_a_view() -> None:
    """An output reshaped from another whose eager layout the trace lost (an `index_put` of a
    transposed input keeps the input's strides in eager; its decomposition's trace is
    row-major): the trace records the reshape as a view, but eager's reshape of the
    transposed tensor copies. The output is fresh memory, not a view replayed on the other
    output (which would raise: no view of those strides has that shape)."""
    x = torch.randn(8, 2).t()
    program = xfuse.compile(_reshape_of_a_transposed_result, (x,), quiet=True)
    for got, want in zip(program(x), _reshape_of_a_transposed_result(x), strict=True):
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()
