"""Eager's strides where torch's trace lays a result out otherwise (`xfuse.frontend.meta_strides`):
`copysign`'s meta function takes its second operand's layout, eager's kernel its first's."""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import xfuse
from xfuse.frontend import meta_strides

Tensor = torch.Tensor


def sign_then_angle(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    s = torch.copysign(a, b)
    return s, torch.atan2(s, b)


def sign_of_a_permuted_input(x: Tensor) -> tuple[Tensor, Tensor]:
    s = torch.copysign(x, torch.tensor(3.0))
    return s.to(torch.float64), s.t()


def _operands() -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(8, 8, 1, generator=g)
    b = (torch.rand(1, 8, 8, generator=g) + 0.5).permute(2, 1, 0)
    return a, b


def _traced_strides(fn: object, inputs: tuple[Tensor, ...]) -> list[tuple[int, ...]]:
    program = torch.export.export(_Wrap(fn), inputs)
    (output,) = [n for n in program.graph.nodes if n.op == "output"]
    return [tuple(n.meta["val"].stride()) for n in output.args[0]]


class _Wrap(torch.nn.Module):
    def __init__(self, fn: object) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *inputs: Tensor) -> object:
        return self.fn(*inputs)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("fn", "inputs"),
    [
        (sign_then_angle, _operands()),
        (sign_of_a_permuted_input, (torch.randn(6, 5).t(),)),
    ],
    ids=["copysign_then_atan2", "copysign_of_a_transposed_input"],
)
def test_outputs_after_copysign_have_eagers_strides(fn: object, inputs: tuple[Tensor, ...]) -> None:
    want = fn(*inputs)  # type: ignore[operator]
    # torch's trace differs from eager here; were it fixed, this module could go.
    assert _traced_strides(fn, inputs) != [t.stride() for t in want]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = xfuse.compile(fn, inputs, quiet=True)
        got = compiled(*inputs)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
        assert g.stride() == w.stride()


def test_without_the_correction_the_strides_are_the_traces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(meta_strides, "MISLAID_ELEMENTWISE", frozenset())
    a, b = _operands()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = xfuse.compile(sign_then_angle, (a, b), quiet=True)(a, b)
    assert [t.stride() for t in got] != [t.stride() for t in sign_then_angle(a, b)]


def _operand_pairs() -> list[tuple[Any, ...]]:
    """Operands whose layouts make traces and eager disagree: transposed against contiguous
    (both orders), a permuted 4-d map against a broadcast vector (both orders), integers."""
    g = torch.Generator().manual_seed(1)
    plain = torch.rand(4, 3, generator=g) + 0.5
    transposed = (torch.rand(3, 4, generator=g) + 0.5).t()
    mapped = (torch.rand(8, 17, 6, 4, generator=g) + 0.5).permute(3, 2, 1, 0)
    vector = (torch.rand(1, generator=g) + 0.5).expand(8)
    integers = (transposed * 3).long()
    return [
        (transposed, plain),
        (plain, transposed),
        (mapped, vector),
        (vector, mapped),
        (integers, plain),
        (transposed > 1, plain > 1),
        (transposed, 2.0),
    ]


KEYWORDS: dict[Any, dict[str, Any]] = {torch.ops.aten.div.Tensor_mode: {"rounding_mode": "floor"}}
"""The keywords a listed op is called with."""


def _with_scalars(op: Any, scalars: tuple[Any, ...], *tensors: Tensor) -> Tensor:
    return op(*tensors, *scalars, **KEYWORDS.get(op, {}))


MISLAID = sorted((*meta_strides.MISLAID_ELEMENTWISE, *meta_strides.MISLAID_CONTIGUOUS), key=str)


@pytest.mark.parametrize("op", MISLAID, ids=str)
def test_each_mislaid_op_gets_eagers_strides(op: Any) -> None:
    """For every listed op and every pair of operands eager takes, the strides the output
    rules use (the trace's, corrected) are eager's; the trace is off in at least one."""
    off = 0
    for pair in _operand_pairs():
        arity = len([a for a in op._schema.arguments if not a.kwarg_only])
        operands = pair[:arity]
        try:
            torch.manual_seed(0)
            want = op(*operands, **KEYWORDS.get(op, {}))
        except (RuntimeError, TypeError):
            continue
        tensors = tuple(t for t in operands if isinstance(t, Tensor))
        scalars = operands[len(tensors) :]
        call = functools.partial(_with_scalars, op, scalars)
        program = torch.export.export(_Wrap(call), tensors)
        (node,) = [n for n in program.graph.nodes if n.target == op]
        traced = tuple(node.meta["val"].stride())
        used = meta_strides.eager_strides(program.graph).get(node, traced)
        assert used == want.stride(), (operands, traced)
        off += traced != want.stride()
    assert off, f"torch's trace of {op} has eager's strides now: drop it from the list"


def test_a_graph_without_mislaid_ops_has_nothing_to_correct() -> None:
    def chain(x: Tensor, y: Tensor) -> Tensor:
        return torch.atan2(x.t() * 2, y)

    program = torch.export.export(_Wrap(chain), (torch.randn(4, 6), torch.randn(6, 4)))
    assert meta_strides.eager_strides(program.graph) == {}


def _layouts(shape: tuple[int, ...]) -> list[Tensor]:
    """A tensor of `shape` in every dim order (dense, permuted)."""
    g = torch.Generator().manual_seed(2)
    found = []
    for order in itertools.permutations(range(len(shape))):
        base = torch.rand(*[shape[d] for d in order], generator=g) + 0.5
        found.append(base.permute(*[order.index(d) for d in range(len(shape))]))
    return found


_C = 3
FORMATTED: dict[str, Callable[[Tensor], Tensor]] = {
    "batch_norm_eval": lambda x: F.batch_norm(
        x,
        torch.zeros(_C, device=x.device),
        torch.ones(_C, device=x.device),
        torch.full((_C,), 2.0, device=x.device),
        None,
        training=False,
    ),
    "batch_norm_train": lambda x: F.batch_norm(x, None, None, training=True),
    "roll_one_dim": lambda x: torch.roll(x, 1, 1),
    "upsample_nearest1d": lambda x: F.interpolate(x, scale_factor=2.0) if x.dim() == 3 else x,
    "max_pool1d": lambda x: F.max_pool1d(x, 2) if x.dim() == 3 else x,
}
"""Calls of `MISLAID_FORMATTED`'s ops at 3- and 4-d inputs."""
SHAPES = [(2, 3, 4), (1, 3, 4), (2, 3, 1), (2, 3, 4, 6), (1, 3, 4, 6), (2, 3, 1, 6)]


@pytest.mark.parametrize("name", sorted(FORMATTED))
def test_each_formatted_op_gets_eagers_strides_at_every_layout(name: str) -> None:
    """For every dim order of inputs with and without size-1 dims, the strides the output
    rules use are eager's CPU kernel's; the trace is off in at least one."""
    fn, off = FORMATTED[name], 0
    for x in [x for shape in SHAPES for x in _layouts(shape)]:
        try:
            want = fn(x)
        except RuntimeError:  # a window longer than the input
            continue
        program = torch.export.export(_Wrap(fn), (x,))
        (output,) = [n for n in program.graph.nodes if n.op == "output"]
        node = output.args[0][0]
        traced = tuple(node.meta["val"].stride())
        used = meta_strides.eager_strides(program.graph).get(node, traced)
        assert used == want.stride(), (x.shape, x.stride(), traced)
        off += traced != want.stride()
    assert off, f"torch's trace of {name} has eager's strides now: drop it from the list"


@pytest.mark.parametrize("name", sorted(FORMATTED))
def test_a_formatted_op_of_a_permuted_input_compiles_to_eagers_strides(name: str) -> None:
    fn = FORMATTED[name]
    x = torch.randn(2, 4, 3).permute(0, 2, 1)  # strides (12, 1, 3): eager's results are row-major
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = xfuse.compile(fn, (x,), quiet=True)(x)
    want = fn(x)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()


def _indexed(dim: int) -> Callable[[Tensor], Tensor]:
    index = torch.tensor([2, 0, 1, 1, 0])
    return lambda x: x[(slice(None),) * dim + (index,)]


def test_advanced_indexing_gets_eagers_strides_at_every_layout() -> None:
    """`x[:, :, index]` of every dim order of inputs with size-1 dims, on each dim: the strides
    the output rules use are eager's (the op is probed, `PROBED`); the trace is off in some."""
    off = 0
    for x in [x for shape in [(1, 3, 4, 4), (2, 3, 4, 5), (2, 1, 4, 3)] for x in _layouts(shape)]:
        for dim in (d for d in range(x.dim()) if x.shape[d] >= 3):
            fn = _indexed(dim)
            want = fn(x)
            program = torch.export.export(_Wrap(fn), (x,))
            (output,) = [n for n in program.graph.nodes if n.op == "output"]
            node = output.args[0][0]
            traced = tuple(node.meta["val"].stride())
            used = meta_strides.eager_strides(program.graph).get(node, traced)
            assert used == want.stride(), (x.shape, x.stride(), dim, traced)
            off += traced != want.stride()
    assert off, "torch's trace of advanced indexing has eager's strides now: drop it from PROBED"


def test_an_index_of_a_permuted_input_compiles_to_eagers_strides() -> None:
    """(xfuse-fuzz seed 948, program 258.)"""

    def fn(x: Tensor) -> Tensor:
        return F.silu(x)[:, :, torch.tensor([2, -4, -1, 1, -1])]

    x = torch.rand(4, 4, 3, 1).permute(3, 2, 1, 0)  # (1, 3, 4, 4), strides (1, 1, 3, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = xfuse.compile(fn, (x,), quiet=True)(x)
    torch.testing.assert_close(got, fn(x))
    assert got.stride() == fn(x).stride() == (15, 1, 3, 15)


@pytest.mark.parametrize("name", ["batch_norm_eval", "batch_norm_train"])
def test_probing_a_formatted_op_gives_eagers_strides(name: str) -> None:
    """Off the CPU a formatted op is probed (`_probed`: its kernels pick other layouts, CUDA's
    training batch norm keeps its input's): the probe, here run on the CPU, gives eager's
    strides of its first result at every layout."""
    fn = FORMATTED[name]
    for x in [x for shape in SHAPES for x in _layouts(shape)]:
        program = torch.export.export(_Wrap(fn), (x,))
        (output,) = [n for n in program.graph.nodes if n.op == "output"]
        formatted = meta_strides._formatted(output.args[0][0])
        assert formatted is not None
        assert meta_strides._probed(formatted[0], {}) == fn(x).stride(), (x.shape, x.stride())


GPU_FORMATTED: dict[str, Callable[[Tensor], Tensor]] = {
    **{
        mode: functools.partial(F.interpolate, scale_factor=2.0, mode=mode)
        for mode in ("nearest", "bilinear", "bicubic", "nearest-exact")
    },
    "batch_norm_eval": FORMATTED["batch_norm_eval"],
    "batch_norm_train": FORMATTED["batch_norm_train"],
    "index": lambda x: x[:, :, torch.tensor([2, 0, 1, 1, 0], device=x.device)],
}
"""Ops CUDA's kernels lay out otherwise than torch's meta functions or the CPU's kernels
(`PROBED`, `PROBED_OFF_CPU`, `MISLAID_FORMATTED`)."""


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_FORMATTED))
def test_on_cuda_probed_ops_compile_to_eagers_strides(name: str) -> None:
    """A channels-last map interpolated on CUDA stays channels-last (the meta function makes
    it row-major), a training batch norm keeps its input's layout: a 4-d input in four dim
    orders (row-major, channels-last, two others) compiles to eager's CUDA strides."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    fn = GPU_FORMATTED[name]
    for x in _layouts((2, 3, 4, 6)):
        x = x.cuda()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = xfuse.compile(fn, (x,), device="cuda", quiet=True)(x)
        want = fn(x)
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride(), (x.stride(), got.stride(), want.stride())
