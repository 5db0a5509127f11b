"""`xfuse.compile(..., dynamic_shapes=...)` on the CPU (xfuse/runtime/dynamic.py): one export
and one compile serve every size in the ranges and match eager; what the symbolic path cannot
honour is refused in one line at compile time, sizes outside the ranges at call time; a compile
without `dynamic_shapes` is the static one."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import xfuse
from tests.conftest import CountCalls
from tests.runtime.test_symbolic_program import Block
from xfuse.differentiable import DifferentiableProgram
from xfuse.errors import (
    AutogradUnsupportedError,
    InvalidArgumentError,
    SizeCheckError,
    SymbolicSizeError,
    UnsupportedInputError,
    UnsupportedProgram,
)
from xfuse.runtime import dynamic
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.dynamic import DynamicProgram

BATCH = {"x": {0: Dim("batch", min=2, max=64)}}


def one_line(error: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.fixture(scope="module")
def block() -> tuple[torch.nn.Module, DynamicProgram]:
    torch.manual_seed(0)
    model = Block().eval()
    return model, xfuse.compile(model, (torch.randn(5, 16),), dynamic_shapes=BATCH)


def test_one_compile_matches_eager_at_every_batch_size(
    count_calls: CountCalls, compiled_kernels: list[str]
) -> None:
    compiled = compiled_kernels
    builds = count_calls(dynamic, "SymbolicProgram")
    torch.manual_seed(0)
    model = Block().eval()
    program = xfuse.compile(model, (torch.randn(5, 16),), dynamic_shapes=BATCH)
    assert isinstance(program, DynamicProgram)
    assert len(builds) == 1 and program.kernel_count >= 2
    assert len(compiled) == program.kernel_count
    assert "range [2, 64]" in program.symbols
    with torch.no_grad():
        for batch in (2, 3, 7, 16, 33, 64):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(program(x), model(x))
    assert len(builds) == 1 and len(compiled) == program.kernel_count  # nothing compiled again


def test_a_tuple_of_dims_and_two_inputs_sharing_a_symbol() -> None:
    batch = Dim("batch", min=2, max=128)

    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.relu(x * y + 1.0)
        return z, z.sum(-1)

    program = xfuse.compile(
        fn, (torch.randn(4, 8), torch.randn(4, 8)), dynamic_shapes=({0: batch}, {0: batch})
    )
    for n in (2, 9, 128):
        x, y = torch.randn(n, 8), torch.randn(n, 8)
        got = program(x, y)
        assert isinstance(got, tuple)
        torch.testing.assert_close(got, fn(x, y))
    with pytest.raises(SymbolicSizeError, match="is 3 in one argument and 4") as e:
        program(torch.randn(3, 8), torch.randn(4, 8))
    one_line(e)


def test_a_returned_size_of_the_call_is_its_value_at_each_call() -> None:
    """An int output computed from the sizes (torch.export's `SymIntArgument`) is evaluated at
    each call's sizes, beside a slice of a static table to the call's length."""
    table = torch.randn(32, 8)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, int]:
        return x * table[: x.shape[0]], 3 * x.shape[0] + 1

    program = xfuse.compile(fn, (torch.randn(4, 8),), dynamic_shapes=({0: Dim("n", max=32)},))
    for n in (2, 9, 32):
        x = torch.randn(n, 8)
        got, want = program(x), fn(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] and type(got[1]) is int
    assert isinstance(program, DynamicProgram) and program.specialised is None


@pytest.mark.parametrize("batch", [0, 1, 65])
def test_a_size_outside_the_range_is_refused_at_the_call(
    block: tuple[torch.nn.Module, DynamicProgram], batch: int
) -> None:
    _, program = block
    with (
        torch.no_grad(),
        pytest.raises(SymbolicSizeError, match=r"outside its range \[2, 64\]") as e,
    ):
        program(torch.randn(batch, 16))
    one_line(e)


def test_a_call_that_needs_autograd_is_refused(
    block: tuple[torch.nn.Module, DynamicProgram],
) -> None:
    _, program = block
    with pytest.raises(AutogradUnsupportedError, match="inference only") as e:
        program(torch.randn(4, 16))
    one_line(e)


def test_a_call_under_another_default_dtype_is_refused() -> None:
    """A symbolic program's factories were traced under one default dtype: a call under
    another, whose factories would make other dtypes in eager, is refused in one line."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * torch.ones(x.shape[1])

    x = torch.randn(5, 16)
    program = xfuse.compile(fn, (x,), dynamic_shapes=BATCH, quiet=True)
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with pytest.raises(UnsupportedInputError, match="default dtype is torch.float64") as e:
            program(torch.randn(4, 16))
    finally:
        torch.set_default_dtype(saved)
    one_line(e)
    torch.testing.assert_close(program(x), fn(x))


def test_a_call_after_a_python_value_changed_is_refused() -> None:
    """A symbolic program traced one value of a layer norm's `eps`: a call after it changed
    is refused in one line naming it."""
    model = Block().eval()
    program = xfuse.compile(model, (torch.randn(5, 16),), dynamic_shapes=BATCH, quiet=True)
    model.norm.eps = 0.5
    with pytest.raises(UnsupportedInputError, match="'norm.eps' is 0.5, was 1e-05") as e:
        program(torch.randn(4, 16))
    one_line(e)


def test_a_call_after_a_functions_closure_value_changed_is_refused() -> None:
    scale = 2.0

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * scale

    program = xfuse.compile(fn, (torch.randn(5, 16),), dynamic_shapes=BATCH, quiet=True)
    scale = 3.0
    with pytest.raises(UnsupportedInputError, match="'closure 0' is 3.0, was 2.0") as e:
        program(torch.randn(4, 16))
    one_line(e)


def test_a_scalar_other_than_the_example_is_refused() -> None:
    program = xfuse.compile(
        lambda x, k: (x * k).exp(), (torch.randn(4, 8), 2.0), dynamic_shapes=(BATCH["x"], None)
    )
    x = torch.randn(6, 8)
    torch.testing.assert_close(program(x, 2.0), (x * 2.0).exp())
    with pytest.raises(UnsupportedInputError, match="compiled for 2.0") as e:
        program(x, 3.0)
    one_line(e)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"device": "meta"}, "for the CPU and CUDA only, device 'meta'"),
        ({"pipeline": "decompose,fuse-greedy"}, "does not take a pipeline"),
        ({"dynamic_shapes": "batch"}, "dynamic_shapes must be torch.export's"),
    ],
)
def test_options_it_cannot_honour_are_refused_at_compile_time(
    options: dict[str, Any], message: str
) -> None:
    kwargs: dict[str, Any] = {"dynamic_shapes": BATCH, **options}
    with pytest.raises(InvalidArgumentError, match=message) as e:
        xfuse.compile(Block().eval(), (torch.randn(5, 16),), **kwargs)
    one_line(e)


def test_a_given_kernel_cache_keeps_the_kernels_for_the_next_program() -> None:
    cache = KernelCache(None)
    x = torch.randn(5, 16)
    model = Block().eval()
    first = xfuse.compile(model, (x,), dynamic_shapes=BATCH, cache=cache)
    compiled = cache.stats.compiles
    assert first.kernel_count >= 2 and compiled >= 2
    second = xfuse.compile(model, (x,), dynamic_shapes=BATCH, cache=cache)
    assert cache.stats.compiles == compiled and cache.stats.memory_hits >= second.kernel_count
    y = torch.randn(9, 16)
    with torch.no_grad():
        torch.testing.assert_close(second(y), model(y))


def _and_flattened(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x.exp()
    return y, y.reshape(-1).exp()


def test_a_group_with_a_flattened_output_serves_every_batch_size() -> None:
    """A group with outputs of two shapes of as many elements (one flattened): its one kernel
    writes both at every size, with eager's values."""
    program = xfuse.compile(_and_flattened, (torch.randn(5, 16),), dynamic_shapes=BATCH)
    for batch in (2, 7, 33):
        x = torch.rand(batch, 16)
        for got, want in zip(program(x), _and_flattened(x), strict=True):
            torch.testing.assert_close(got, want)


def _and_its_sized_view(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x.exp()
    return y, y.view(x.shape[0], 4, 4)


def _views_of_a_gapped_intermediate(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.empty_strided(x.shape, (2 * x.shape[1], 1))  # rows with gaps: dense in no order
    y.copy_(x * 2)  # (decomposed to a dense clone: the trace's layout is not eager's)
    return y[0], y[:, 1]


def test_outputs_eager_returns_otherwise_are_refused_at_compile_time() -> None:
    """Views of an intermediate eager does not return whose layout is dense in no one order at
    every size: refused (never a silent difference in aliasing); compiling (which runs the
    program eagerly once to see its outputs) leaves the caller's RNG as it was."""
    x = torch.randn(5, 16)
    state = torch.random.get_rng_state()
    message = r"output 0 is a view of an intermediate that eager does not return, whose layout"
    with pytest.raises(UnsupportedProgram, match=message) as e:
        xfuse.compile(_views_of_a_gapped_intermediate, (x,), dynamic_shapes=BATCH)
    one_line(e)
    assert torch.equal(torch.random.get_rng_state(), state)


def _views_to_its_sizes(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.exp()
    b = x.shape[0]
    return x.view(b, 4, 4), y, y.view(b, 2, -1), x.view(2 * b, 8)[1:], y.flatten()


def test_views_through_sizes_of_the_call_share_memory_at_every_size() -> None:
    """Views whose arguments are sizes of the call (`x.view(x.shape[0], 4, 4)`, a view to
    `2 * b` rows), of an input or of another output: each call replays them at its own sizes, so
    they have eager's sizes, strides and offsets and share memory as in eager."""
    program = xfuse.compile(_views_to_its_sizes, (torch.randn(5, 16),), dynamic_shapes=BATCH)
    assert isinstance(program, DynamicProgram)
    assert any(view.sized for rule in program.views.values() for view in rule.chain)
    for batch in (5, 2, 23):
        x = torch.randn(batch, 16)
        got, want = program(x), _views_to_its_sizes(x)
        assert_like_eager(got, want, offsets=True)
        for k, base in ((0, x), (2, got[1]), (3, x), (4, got[1])):
            assert got[k].untyped_storage().data_ptr() == base.untyped_storage().data_ptr()


def assert_like_eager(got: Any, want: Any, offsets: bool = False) -> None:
    """Each output has eager's values and strides (and storage offsets, with `offsets`)."""
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
        assert g.stride() == w.stride()
        assert not offsets or g.storage_offset() == w.storage_offset()


def _and_its_views(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x * 2
    z = x.t() * 3  # eager returns it transposed (its input's order): its views follow that
    return y, y.view(-1), y[:, 1:5:2], z, z[0], y.unsqueeze(0).expand(3, -1, -1)


def test_outputs_that_eager_returns_as_views_of_other_outputs_share_their_memory() -> None:
    """Each call replays the view chain on the other output's result (after that output took
    eager's memory order), so at every size the views have eager's sizes, strides and
    offsets, and writing into one writes the other, as in eager."""
    program = xfuse.compile(_and_its_views, (torch.randn(5, 16),), dynamic_shapes=BATCH)
    for batch in (2, 7, 33):
        x = torch.randn(batch, 16)
        got, want = program(x), _and_its_views(x)
        assert_like_eager(got, want, offsets=True)
        for view, base in ((1, 0), (2, 0), (4, 3), (5, 0)):
            assert got[view].untyped_storage().data_ptr() == got[base].untyped_storage().data_ptr()
        got[1].zero_()
        assert not got[0].any()


class _Scaled(torch.nn.Module):
    """Returns a view of its input and one of its parameter, beside a computed output."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x[:, 0], x * self.w, x.transpose(0, 1), x.view(-1), self.w[1:]


def test_outputs_that_eager_returns_as_views_of_inputs_share_the_callers_memory() -> None:
    """Views of an input (a select, a transpose, a flattening view) or of a parameter, through
    views whose arguments are constants: each call replays them on its own tensors, so at
    every size they have eager's sizes, strides and offsets, and writing into one writes the
    input, as in eager."""
    model = _Scaled().requires_grad_(False)
    program = xfuse.compile(model, (torch.randn(5, 16),), dynamic_shapes=BATCH)
    assert isinstance(program, DynamicProgram)
    for batch in (5, 2, 9):
        x = torch.randn(batch, 16)
        got, want = program(x), model(x)
        assert_like_eager(got, want)
        for k, base in [(0, x), (2, x), (3, x), (4, model.w)]:
            assert got[k].untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
            assert got[k].storage_offset() == want[k].storage_offset()
        got[0].fill_(7.0)
        assert torch.all(x[:, 0] == 7.0)


def _channels_last_map(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = F.layer_norm((x * 2).permute(0, 2, 3, 1), (x.shape[1],))  # channels last, as ConvNeXt's
    return y.permute(0, 3, 1, 2), (x.flatten(2) @ x.flatten(2).transpose(1, 2)).mT


def test_outputs_dense_in_another_order_keep_eagers_strides_at_every_size() -> None:
    """Outputs that eager returns dense but not contiguous (a channels-last map, a transposed
    product) come back with eager's strides at every size, not contiguous."""
    from torch.export import Dim

    shapes = {"x": {0: Dim("b", min=2, max=16), 2: Dim("h", min=2, max=16), 3: Dim("w", max=16)}}
    program = xfuse.compile(_channels_last_map, (torch.randn(3, 4, 5, 6),), dynamic_shapes=shapes)
    assert isinstance(program, DynamicProgram)
    assert program.orders == {0: (0, 2, 3, 1), 1: (0, 2, 1)}
    for b, h, w in [(3, 5, 6), (2, 7, 4), (9, 3, 11)]:
        x = torch.randn(b, 4, h, w)
        got, want = program(x), _channels_last_map(x)
        for g, e in zip(got, want, strict=True):
            torch.testing.assert_close(g, e)
            assert g.stride() == e.stride() and not g.is_contiguous()


def _slices_of_intermediates(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h = x * 2
    return h[:, -1], (x + 1)[:, 1:3], x.sum(1, keepdim=True).expand(-1, 4), h + 1


def test_outputs_of_no_dense_order_keep_eagers_strides_at_every_size() -> None:
    """Slices and expands of intermediates that eager returns (a last token's row, `h[:, -1]`,
    whose stride is `h`'s row length): the importer reads their strides as polynomials of the
    sizes, and each call returns memory of those strides at its sizes."""
    shapes = {"x": {0: Dim("b", min=2, max=64), 1: Dim("s", min=4, max=64)}}
    program = xfuse.compile(_slices_of_intermediates, (torch.randn(4, 6),), dynamic_shapes=shapes)
    assert isinstance(program, DynamicProgram)
    assert sorted(program.strided) == [0, 1, 2]  # not the row-major `h + 1`: no copy of it
    for b, n in [(4, 6), (7, 10), (2, 33)]:
        x = torch.randn(b, n)
        got, want = program(x), _slices_of_intermediates(x)
        assert_like_eager(got, want)
        assert got[0].stride() == (n,) and got[2].stride() == (1, 0)


def _views_of_one_intermediate(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = torch.tanh(x) * 2  # returned only through its views: a hidden output they share
    return y.view(-1), y[0], y.t()


def _views_of_a_transposed_intermediate(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.t() * 2  # eager keeps its input's (transposed) order: dense, not row-major
    return y[0], y[:, 1], y.t()


def test_views_of_a_transposed_intermediate_have_eagers_strides_at_every_size() -> None:
    """An intermediate eager lays out in its input's transposed order, returned only through
    its views: each call lays the program's result for it out in that order (one copy), so
    the views have eager's strides and offsets at every size and share its memory."""
    program = xfuse.compile(
        _views_of_a_transposed_intermediate, (torch.randn(5, 16),), dynamic_shapes=BATCH
    )
    assert isinstance(program, DynamicProgram)
    assert list(program.program.hidden_orders.values()) == [(1, 0)]
    for batch in (5, 2, 17):
        x = torch.randn(batch, 16)
        got, want = program(x), _views_of_a_transposed_intermediate(x)
        assert_like_eager(got, want, offsets=True)
        assert len({g.untyped_storage().data_ptr() for g in got}) == 1


def test_views_of_an_intermediate_eager_does_not_return_share_its_memory() -> None:
    """Two or more outputs view an intermediate that is row-major at every size: each call
    replays their views on the program's result for it, so they have eager's strides and
    offsets at every size and share memory as in eager."""
    program = xfuse.compile(_views_of_one_intermediate, (torch.randn(5, 16),), dynamic_shapes=BATCH)
    assert isinstance(program, DynamicProgram)
    for batch in (5, 2, 17):
        x = torch.randn(batch, 16)
        got, want = program(x), _views_of_one_intermediate(x)
        assert_like_eager(got, want, offsets=True)
        storages = {g.untyped_storage().data_ptr() for g in got}
        assert len(storages) == 1
        got[0].zero_()
        assert not got[1].any() and not got[2].any()


def _copies_of_an_input(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.contiguous(), x.clone(), x * 2


@pytest.mark.parametrize("broken", [False, True], ids=["fresh", "planted_fault"])
def test_copies_of_an_input_are_fresh_memory_at_every_size(
    broken: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`contiguous` and `clone` of an input are the input itself in the graph's value
    semantics: a dynamic program returns them as new memory, as eager does (a write into one
    leaves the input alone)."""
    from xfuse.runtime.symbolic import SymbolicProgram

    if broken:
        monkeypatch.setattr(SymbolicProgram, "fresh", lambda self, results, inputs: results)
    x = torch.randn(6, 5).t()
    program = xfuse.compile(_copies_of_an_input, (x,), dynamic_shapes={"x": {1: Dim("n")}})
    assert isinstance(program, DynamicProgram)
    aliased = []
    for n in (6, 9, 13):
        x = torch.randn(n, 5).t()
        before = x.clone()
        got, want = program(x), _copies_of_an_input(x)
        torch.testing.assert_close(got, want)
        assert [g.stride() for g in got] == [e.stride() for e in want] or broken
        for g in got:
            g.add_(1.0)
        aliased.append(not torch.equal(x, before))
    assert any(aliased) == broken


VARIANCES = {
    "over_the_symbol_keepdim": lambda x: x.var(dim=1, keepdim=True, correction=0),
    "over_two_symbols": lambda x: x.var(dim=(0, 1), correction=0) * 2,
    "var_mean": lambda x: torch.var_mean(x, dim=(0, 2), correction=0)[0] + 1,
    "unbiased_over_the_symbol": lambda x: x.var(dim=0),
    "unbiased_over_two_symbols_keepdim": lambda x: x.var(dim=(0, 1), keepdim=True),
    "std_with_correction_2": lambda x: x.std(dim=(1, 2), correction=2),
    "unbiased_var_mean_over_static_and_symbol": lambda x: torch.var_mean(x, dim=(0, 2))[0],
    "correction_reaching_the_count": lambda x: x.var(dim=0, correction=2),
}


@pytest.mark.parametrize("name", list(VARIANCES))
def test_a_variance_over_symbolic_dims_runs_in_one_program(name: str) -> None:
    """var over dims of runtime sizes (correction 0: a batch norm's batch statistics; 1: its
    running variance; 2) divides by the call's count, less the correction: one program,
    eager's values at each size (within the RMSE rule against f64; at batch 2, a correction
    of 2 divides by 0: infinities, as in eager)."""
    from xfuse.testing.fuzz.compare import compare_outputs

    fn = VARIANCES[name]
    shapes = {"x": {0: Dim("b"), 1: Dim("n")}}
    program = xfuse.compile(fn, (torch.randn(5, 7, 3),), dynamic_shapes=shapes)
    assert isinstance(program, DynamicProgram)
    for b, n in [(5, 7), (2, 9), (13, 33), (3, 2)]:
        x = torch.randn(b, n, 3) * 3 + 1
        got, want, wide = program(x), fn(x), fn(x.double())
        assert compare_outputs([got], [want], [wide]) is None


def test_memory_order_is_none_for_strides_of_no_dense_order() -> None:
    from xfuse.runtime.dynamic import memory_order

    x = torch.randn(4, 6, 8)
    assert memory_order(x.permute(2, 0, 1)) == (1, 2, 0)
    assert memory_order(x[:, ::2]) is None  # gaps
    assert memory_order(torch.randn(4, 1).expand(4, 3)) is None  # overlaps


def test_without_dynamic_shapes_compile_is_the_static_one() -> None:
    torch.manual_seed(0)
    model = Block().eval()
    program = xfuse.compile(model, (torch.randn(5, 16),), quiet=True)
    assert isinstance(program, DifferentiableProgram)
    with torch.no_grad():
        for batch in (5, 0, 1):  # other sizes, 0 and 1 among them, compile another program
            x = torch.randn(batch, 16)
            torch.testing.assert_close(program(x), model(x))


def test_explain_names_the_symbols_and_what_a_call_is_guarded_on() -> None:
    torch.manual_seed(0)
    explanation = xfuse.explain(Block().eval(), (torch.randn(5, 16),), dynamic_shapes=BATCH)
    [symbol] = explanation.symbols
    assert (symbol.source, symbol.dim, symbol.low, symbol.high, symbol.hint) == (
        "x dim 0",
        "batch",
        2,
        64,
        5,
    )
    assert explanation.guards[:2] == [
        f"{symbol.name} >= 2 and <= 64 (x dim 0)",
        f"{symbol.name} (x dim 0) is not 0 or 1: sizes 0 and 1 specialise, as Inductor's do "
        "(a call with one is refused; under torch.compile, dynamo traces another graph for it)",
    ]
    assert "x dim 1 == 16 (static)" in explanation.guards
    text = str(explanation)
    assert f"symbolic sizes (1; bytes below at the hints):\n  {symbol}" in text
    assert "guards (" in text and "x dim 1 == 16 (static)" in text
    assert explanation.kernels and explanation.fallbacks == []
    assert all(k.group is None or explanation.groups[k.group].kernels for k in explanation.kernels)
    assert explanation.summary().bytes_fused > 0  # symbols counted at their hints
    data = explanation.to_dict()
    assert data["symbols"][0]["dim"] == "batch" and data["guards"] == explanation.guards


def test_explain_names_dims_that_share_a_symbol_and_a_size_asked_from_1() -> None:
    batch = Dim("batch", min=1, max=128)

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * y + 1.0)

    explanation = xfuse.explain(
        fn, (torch.randn(4, 8), torch.randn(4, 8)), dynamic_shapes=({0: batch}, {0: batch})
    )
    [symbol] = explanation.symbols
    assert symbol.low == 2 and symbol.dim == "batch"
    asked = "'batch' was asked from 1: a call with one runs a static program compiled for its"
    assert any(asked in g for g in explanation.guards)
    shared = [g for g in explanation.guards if g.endswith(f"(both {symbol.name})")]
    assert shared == [f"y dim 0 == x dim 0 (both {symbol.name})"]


def test_a_static_explanation_has_no_symbols() -> None:
    explanation = xfuse.explain(Block().eval(), (torch.randn(5, 16),), quiet=True)
    assert explanation.symbols == [] and explanation.guards == []
    assert "symbolic sizes" not in str(explanation) and "symbols" not in explanation.to_dict()


def test_explain_refuses_training_with_dynamic_shapes() -> None:
    with pytest.raises(InvalidArgumentError, match="inference only") as e:
        xfuse.explain(Block().eval(), (torch.randn(5, 16),), training=True, dynamic_shapes=BATCH)
    one_line(e)


def test_a_size_of_1_its_dim_allows_runs_a_static_program_for_its_shape() -> None:
    """Sizes 0 and 1 specialise: where the `Dim` allows them, such a call runs a static
    program compiled for its shape (once per shape), the others the symbolic program."""
    batch = Dim("batch", min=0, max=64)
    torch.manual_seed(0)
    model = Block().eval()
    program = xfuse.compile(
        model, (torch.randn(5, 16),), dynamic_shapes={"x": {0: batch}}, fallback="error"
    )
    assert program.specialised is None
    with torch.no_grad():
        for n in (1, 4, 1, 0):
            x = torch.randn(n, 16)
            torch.testing.assert_close(program(x), model(x))
    assert program.specialised is not None
    assert len(program.specialised.specialisations) == 2  # batch 1 and batch 0, once each


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """transformers' `ForCausalLMLoss`: labels shifted by one (padded with -100, ignored), the
    logits' and labels' rows flattened, cross-entropy; only cross-entropy's check that they
    have as many rows ties the logits' sizes to the labels'."""
    shifted = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
    flat = logits.float().view(-1, logits.shape[-1])
    return F.cross_entropy(flat, shifted.view(-1), ignore_index=-100)


def test_a_loss_whose_sizes_only_cross_entropys_check_relates_compiles_once() -> None:
    """The logits' `b * t` rows and the labels' `b2 * t2`: cross-entropy's check that they are
    equal makes torch.export's trace guard on it, and the program holds it as a relation of
    its size table. One compile serves every (batch, sequence) size with eager's loss; a call
    whose sizes break the relation is refused in one line, before anything runs."""
    dims = {
        "logits": {0: Dim("b"), 1: Dim("t")},
        "labels": {0: Dim("b2"), 1: Dim("t2")},
    }
    program = xfuse.compile(
        causal_lm_loss,
        (torch.randn(2, 8, 16), torch.randint(0, 16, (2, 8))),
        dynamic_shapes=dims,
    )
    assert "eq(" in program.symbols
    for b, t, b2, t2 in ((2, 8, 2, 8), (3, 5, 3, 5), (4, 6, 3, 8), (7, 2, 2, 7)):
        logits, labels = torch.randn(b, t, 16), torch.randint(0, 16, (b2, t2))
        torch.testing.assert_close(program(logits, labels), causal_lm_loss(logits, labels))
    with pytest.raises(ValueError, match=r"differ at .*the program was compiled") as e:
        program(torch.randn(2, 8, 16), torch.randint(0, 16, (3, 5)))
    one_line(e)
    assert isinstance(e.value, SizeCheckError)
    with pytest.raises(ValueError, match="to match target batch_size"):  # eager's refusal
        causal_lm_loss(torch.randn(2, 8, 16), torch.randint(0, 16, (3, 5)))


def narrow_to(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x[:, : y.shape[1]] * 2.0


def bounded_prefix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    torch._check(a.shape[0] <= b.shape[0])
    return a.sum(0) + b[: a.shape[0]].sum(0)


def test_a_call_that_breaks_an_inequality_the_trace_assumed_is_refused() -> None:
    """Slicing `x` to `y`'s width makes torch.export's trace assume `y`'s width is at most
    `x`'s (and not equal: a slice of all of `x` would be `x` itself); the program holds both as
    conditions of its size table and refuses, in one line and before anything runs, a call
    that breaks one (it would read past `x`)."""
    dims = ({0: Dim("b"), 1: Dim("n")}, {0: Dim("b"), 1: Dim("m")})
    program = xfuse.compile(narrow_to, (torch.randn(3, 8), torch.randn(3, 5)), dynamic_shapes=dims)
    assert "le(s94, s27)" in program.symbols
    for n, m in ((8, 5), (9, 2), (40, 39)):
        x, y = torch.randn(3, n), torch.randn(3, m)
        torch.testing.assert_close(program(x, y), narrow_to(x, y))
    for n, m in ((4, 6), (5, 5)):
        with pytest.raises(SymbolicSizeError, match=r"torch's trace assumed") as e:
            program(torch.randn(3, n), torch.randn(3, m))
        one_line(e)


def test_a_torch_check_of_an_inequality_is_checked_at_each_new_size() -> None:
    program = xfuse.compile(
        bounded_prefix,
        (torch.randn(3, 4), torch.randn(5, 4)),
        dynamic_shapes=({0: Dim("a")}, {0: Dim("c")}),
    )
    for n, m in ((3, 5), (4, 4), (2, 9)):
        a, b = torch.randn(n, 4), torch.randn(m, 4)
        torch.testing.assert_close(program(a, b), bounded_prefix(a, b))
    for _ in range(2):  # a refused call leaves no plan behind; eager's error type too
        with pytest.raises(
            RuntimeError, match=r"s\d+ <= s\d+ does not hold at s\d+ = 4, s\d+ = 6"
        ) as e:
            program(torch.randn(6, 4), torch.randn(4, 4))
        one_line(e)
        assert isinstance(e.value, SizeCheckError)
    with pytest.raises(RuntimeError, match="Expected cond to be True"):  # eager's refusal
        bounded_prefix(torch.randn(6, 4), torch.randn(4, 4))


def capped_double(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    torch._check(x.shape[0] <= 512)
    torch._check(2 * x.shape[0] <= y.shape[0])
    return x * 2, y + 1


def test_a_guard_that_repeats_a_range_is_no_condition_and_is_listed_once() -> None:
    """`torch._check(n <= 512)` on an automatic dim bounds its symbol's range to [2, 512], and
    torch keeps it as a guard too, which says no more than the range: the size table holds no
    condition of it, and the explanation lists the range alone. The check that relates two
    sizes stays a condition, checked at each new size."""
    from xfuse.explanation import dynamic_explanation

    inputs = (torch.randn(8, 4), torch.randn(20, 4))
    program = xfuse.compile(capped_double, inputs, dynamic_shapes=({0: Dim.AUTO}, {0: Dim.AUTO}))
    x0, y0 = (s.name for s in program.compiled.table.inputs())
    conditions = program.compiled.table.conditions
    assert [c.comparison for c in conditions] == [f"2 * {x0} <= {y0}"]
    guards = dynamic_explanation(program).guards
    assert f"{x0} >= 2 and <= 512 (x dim 0)" in guards
    assert [g for g in guards if g.startswith("torch.export")] == [f"torch.export: 2*{x0} <= {y0}"]
    for n, m in ((9, 18), (512, 1024)):
        x, y = torch.randn(n, 4), torch.randn(m, 4)
        for got, want in zip(program(x, y), capped_double(x, y), strict=True):
            torch.testing.assert_close(got, want)
    with pytest.raises(SymbolicSizeError, match=rf"2 \* {x0} <= {y0} does not hold") as e:
        program(torch.randn(10, 4), torch.randn(18, 4))
    one_line(e)
    with pytest.raises(SymbolicSizeError, match=r"is 513, outside its range \[2, 512\]"):
        program(torch.randn(513, 4), torch.randn(1100, 4))


def column_sums(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.sum(0) + b.sum(0)


def test_a_dims_bounds_are_checked_at_every_call() -> None:
    """A `Dim`'s min and max (torch.export's `range_constraints`) bound its symbol's range."""
    program = xfuse.compile(
        column_sums,
        (torch.randn(3, 4), torch.randn(5, 4)),
        dynamic_shapes=({0: Dim("a", min=3, max=6)}, {0: Dim("c", max=8)}),
    )
    for n, m in ((3, 2), (6, 8)):
        a, b = torch.randn(n, 4), torch.randn(m, 4)
        torch.testing.assert_close(program(a, b), column_sums(a, b))
    for n, m, message in (
        (2, 5, r"is 2, outside its range \[3, 6\]"),
        (7, 8, r"is 7, outside its range \[3, 6\]"),
        (3, 9, r"is 9, outside its range \[2, 8\]"),
    ):
        with pytest.raises(SymbolicSizeError, match=message) as e:
            program(torch.randn(n, 4), torch.randn(m, 4))
        one_line(e)


FROM_THE_END = {
    "last_token": lambda x: (x[:, -1] * 2).softmax(-1),
    "second_to_last": lambda x: x.select(1, -2) + 1,
    "last_as_a_slice": lambda x: x[:, -1:] * 3,
    "one_before_the_end": lambda x: x[:, -2:-1] * x[:, :1],
    "last_of_two_symbols": lambda x: x[-1, -1] - x[0].mean(0),
}


@pytest.mark.parametrize("name", list(FROM_THE_END))
def test_elements_from_a_symbolic_dims_end_run_in_one_program(name: str) -> None:
    """A select or slice counted from the end of a dim of runtime size (a language model's
    last token), within its last `MIN_SIZE` elements: one program, eager's values at each
    size, the smallest in range included."""
    fn = FROM_THE_END[name]
    shapes = {"x": {0: Dim("b"), 1: Dim("n", min=2)}}
    program = xfuse.compile(fn, (torch.randn(3, 7, 5),), dynamic_shapes=shapes)
    assert isinstance(program, DynamicProgram)
    for b, n in [(3, 7), (2, 2), (4, 13), (9, 3)]:
        x = torch.randn(b, n, 5)
        torch.testing.assert_close(program(x), fn(x))


WITHIN_THE_LOWEST_SIZE = {
    "third_from_the_end": lambda x: x[:, -3] * 2,
    "fourth_element": lambda x: x[:, 3] + x[:, -4:-2].sum(1),
    "strided_head": lambda x: x[:, 1:4:2] - 1,
}


@pytest.mark.parametrize("name", list(WITHIN_THE_LOWEST_SIZE))
def test_elements_within_a_symbols_lowest_size_run_in_one_program(name: str) -> None:
    """A select or slice beyond `MIN_SIZE` (2) elements from either end of a symbolic dim
    whose range starts at 4: every size in range has them (`SizesAttr.lowest`), so one
    program serves every size, the smallest included."""
    fn = WITHIN_THE_LOWEST_SIZE[name]
    program = xfuse.compile(
        fn, (torch.randn(3, 7),), dynamic_shapes={"x": {1: Dim("n", min=4, max=64)}}
    )
    assert isinstance(program, DynamicProgram)
    for n in (4, 5, 9, 64):
        x = torch.randn(3, n)
        torch.testing.assert_close(program(x), fn(x))


REPEATS = {
    "along_the_symbol": lambda x: x.repeat(2, 1) + 1,
    "beside_the_symbol": lambda x: x.repeat(1, 3) * 2,
    "new_leading_dims": lambda x: x.repeat(3, 2, 1) - 1,
    "tile": lambda x: torch.tile(x, (2,)) * x.repeat(1, 2),
}


@pytest.mark.parametrize("name", list(REPEATS))
@pytest.mark.parametrize("symbols", [1, 2], ids=["batch", "batch-and-width"])
def test_a_repeat_of_symbolic_dims_runs_in_one_program(name: str, symbols: int) -> None:
    """`repeat` (and `tile`) of a tensor with symbolic dims, repeated along them or beside
    them: a broadcast that keeps their symbols, then a reshape; one program, eager's values
    at each size."""
    fn = REPEATS[name]
    dims = {0: Dim("b"), 1: Dim("n")}
    shapes = {"x": {k: dims[k] for k in range(symbols)}}
    program = xfuse.compile(fn, (torch.randn(5, 16),), dynamic_shapes=shapes)
    assert isinstance(program, DynamicProgram)
    for b, n in [(5, 16), (2, 16), (9, 16)] if symbols == 1 else [(5, 16), (2, 3), (9, 7)]:
        x = torch.randn(b, n)
        torch.testing.assert_close(program(x), fn(x))


def _scatter_into_a_contiguous_copy(x: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    return torch.diagonal_scatter(x.contiguous(), d, 0, 0, 1)


def test_a_torch_call_on_a_gapped_input_returns_eagers_contiguous_result() -> None:
    """`x.contiguous()` of a gapped input is the input in the graph's value semantics, and
    torch's `diagonal_scatter` keeps its operand's layout: the result comes back contiguous,
    as eager's (found by `xfuse-fuzz --dynamic --seed 921`, program 1120)."""
    shapes = {"x": {0: Dim("a", min=2, max=9)}, "d": None}
    gapped = torch.randn(3, 2)[:, ::2]
    program = xfuse.compile(
        _scatter_into_a_contiguous_copy, (gapped, torch.randn(1)), dynamic_shapes=shapes
    )
    for rows in (3, 2, 7):
        x, d = torch.randn(rows, 2)[:, ::2], torch.randn(1)
        assert_like_eager([program(x, d)], [_scatter_into_a_contiguous_copy(x, d)])


def _longer_first(y: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (y[1:] + x).exp(), y.sum(0)


def test_a_derived_dim_before_its_root_is_read_from_the_later_input() -> None:
    """`dynamic_shapes={"y": {0: a + 1}, "x": {0: a}}`: the first input's dim is a size of the
    second's; the program reads `a` from `x`, checks `y` against `a + 1` at each call and
    refuses a call that breaks it, in one line."""
    a = Dim("a", min=2, max=64)
    program = xfuse.compile(
        _longer_first,
        (torch.randn(4, 8), torch.randn(3, 8)),
        dynamic_shapes={"y": {0: a + 1}, "x": {0: a}},
    )
    assert isinstance(program, DynamicProgram)
    for n in (3, 6, 21):
        y, x = torch.randn(n + 1, 8), torch.randn(n, 8)
        assert_like_eager(program(y, x), _longer_first(y, x))
    with pytest.raises(SymbolicSizeError, match="argument 0 dim 0 is size symbol") as e:
        program(torch.randn(6, 8), torch.randn(3, 8))
    one_line(e)


def _vector_product(v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.sin(F.linear(v, w))


def test_a_linear_of_a_vector_of_symbolic_length() -> None:
    """`linear` of a 1-D input whose length is a size symbol (the weight's columns too): its
    decomposition keeps the symbol in the row it makes of the vector (found by
    `xfuse-fuzz --dynamic --seed 921`, programs 26 and 41: 'operand shapes do not match')."""
    s = Dim("s", min=2, max=64)
    program = xfuse.compile(
        _vector_product,
        (torch.randn(3), torch.randn(4, 3)),
        dynamic_shapes={"v": {0: s}, "w": {1: s}},
    )
    assert isinstance(program, DynamicProgram)
    for n in (3, 8, 40):
        v, w = torch.randn(n), torch.randn(4, n)
        assert_like_eager([program(v, w)], [_vector_product(v, w)])


def _mask_of_a_permuted_map(x: torch.Tensor) -> torch.Tensor:
    return (x == x).to(torch.float32)


def test_an_output_in_its_inputs_order_with_a_size_one_dim() -> None:
    """Eager lays `x == x` of a permuted `[n, 1, 3]` map out in its input's order, the size-1
    dim sharing the stride of the dim inside it (`(1, n, n)`): returned in that order at every
    size (found by `xfuse-fuzz --dynamic --seed 921`, program 105: refused as "not dense in
    any order")."""
    shapes = {"x": {0: Dim("n", min=2, max=128)}}
    example = torch.randn(3, 1, 64).permute(2, 1, 0)
    program = xfuse.compile(_mask_of_a_permuted_map, (example,), dynamic_shapes=shapes)
    assert isinstance(program, DynamicProgram)
    for n in (64, 5, 100):
        x = torch.randn(3, 1, n).permute(2, 1, 0)
        assert_like_eager([program(x)], [_mask_of_a_permuted_map(x)])


def _and_a_fixed_expand(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x * 2, (w * w).unsqueeze(0).expand(4, 6, 3)


def test_an_expand_to_fixed_sizes_keeps_eagers_strides() -> None:
    """An expand of an intermediate to sizes that do not change with the call's (strides
    `(0, 3, 1)`, overlapping): its strides are constants of the program, copied into at each
    call (found by `xfuse-fuzz --dynamic --seed 921`, program 208: refused as "not dense in
    any order")."""
    program = xfuse.compile(
        _and_a_fixed_expand, (torch.randn(5, 8), torch.randn(6, 3)), dynamic_shapes=BATCH_AND_W
    )
    assert isinstance(program, DynamicProgram)
    for n in (5, 2, 40):
        x, w = torch.randn(n, 8), torch.randn(6, 3)
        assert_like_eager(program(x, w), _and_a_fixed_expand(x, w))


BATCH_AND_W = {"x": {0: Dim("batch", min=2, max=64)}, "w": None}


def test_sizes_read_as_numbers_are_the_calls_sizes() -> None:
    """`x * (2 * n - 1)` and `x >= n - 2` read a size of the call as a number: one program,
    the call's sizes at every call (a `graph.size_value` of the table's symbols)."""

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, m = x.shape
        return x * (2 * n - 1), x.long() >= m - n - 2

    dims = {"x": {0: Dim("n", min=2, max=64), 1: Dim("m", min=2, max=64)}}
    program = xfuse.compile(fn, (torch.randn(5, 7),), dynamic_shapes=dims, fallback="error")
    assert "graph.size_value" in str(program.program.module)
    for shape in [(5, 7), (9, 3), (2, 12), (64, 2)]:
        x = torch.randn(shape) * 10
        for got, want in zip(program(x), fn(x), strict=True):
            torch.testing.assert_close(got, want)


def test_a_size_times_a_bf16_tensor_rounds_once_like_eager() -> None:
    """Eager's bf16 mul keeps a number unrounded (computed in f32, rounded once); a size of
    the call is such a number, 257 not one bf16 holds: the same at every size."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * x.shape[0]

    dims = {"x": {0: Dim("n", min=2, max=1024)}}
    example = torch.randn(8, 3).bfloat16()
    program = xfuse.compile(fn, (example,), dynamic_shapes=dims, fallback="error")
    for n in (257, 300, 5):
        x = (torch.rand(n, 3) * 4 + 1).bfloat16()
        assert torch.equal(program(x), fn(x))


_NORM_WEIGHT = torch.randn(16, generator=torch.Generator().manual_seed(1))


def _pooled_block(x: torch.Tensor) -> torch.Tensor:
    """PoolFormer's token mixer: a group norm of one group, its pooling less itself, added."""
    y = F.group_norm(x, 1, _NORM_WEIGHT, -_NORM_WEIGHT)
    return x + (F.avg_pool2d(y, 3, 1, 1, count_include_pad=False) - y)


def test_a_group_norm_over_a_symbolic_map_of_a_static_batch_is_one_program() -> None:
    """A group norm of one group reduces the map flattened into one dim (`h * w`), and its
    kernel writes the map unflattened: split into `h` and `w` by their runtime sizes
    (`operand_index.factored_index`), the write reads the mean at its own row. `lower-to-loops`
    refused it where the batch was static (PoolFormer at new image sizes)."""
    dims = {"x": {2: Dim("h", min=2, max=256), 3: Dim("w", min=2, max=256)}}
    program = xfuse.compile(_pooled_block, (torch.randn(2, 16, 12, 10),), dynamic_shapes=dims)
    assert isinstance(program, DynamicProgram)
    for h, w in [(12, 10), (7, 9), (33, 2)]:
        x = torch.randn(2, 16, h, w)
        torch.testing.assert_close(program(x), _pooled_block(x), rtol=1e-5, atol=1e-5)
