"""`torch.compile(backend="xfuse")` with dynamic shapes on the CPU (xfuse/dynamo.py): a graph
dynamo hands over with symbolic sizes compiles once for its size symbols, and every later size
runs the same kernels; where the symbolic path refuses a graph or a call, the per-shape path
runs it, with one `DynamicShapesWarning` naming the reason; values match eager at every size."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from xfuse import dynamo
from xfuse.errors import DynamicShapesWarning, FallbackWarning
from xfuse.runtime.dynamic import DynamicProgram

transformers = pytest.importorskip("transformers")


class MLP(torch.nn.Module):
    """Two linear layers around a layer norm and a GELU, then a softmax: kernels and library
    calls, and a Python float (the norm's `eps`) that `dynamic=True` does not specialise."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.down = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.norm(self.up(x)))
        return torch.softmax(self.down(h), dim=-1)


class Counts:
    """What the backend compiled: kernels (`CPUBackend.compile`), and the programs for
    dynamic-shape graphs (`dynamo.COMPILES`), from when the fixture started."""

    def __init__(self, kernels: list[str]) -> None:
        self.compiled = kernels
        self.start = dict(dynamo.COMPILES)

    @property
    def kernels(self) -> int:
        return len(self.compiled)

    def programs(self, kind: str) -> int:
        return dynamo.COMPILES[kind] - self.start.get(kind, 0)


@pytest.fixture
def counts(compiled_kernels: list[str]) -> Iterator[Counts]:
    torch._dynamo.reset()
    yield Counts(compiled_kernels)
    torch._dynamo.reset()


@pytest.mark.parametrize("options", [None, {"fallback": "error"}])
def test_dynamic_true_compiles_once_for_every_batch_size(
    counts: Counts, options: dict[str, Any] | None
) -> None:
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="xfuse", dynamic=True, options=options)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        x = torch.randn(2, 16)
        torch.testing.assert_close(compiled(x), model(x))
        kernels = counts.kernels
        assert counts.programs("symbolic") == 1 and kernels >= 1
        for batch in range(3, 10):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(compiled(x), model(x))
    assert counts.kernels == kernels  # every later size ran the same kernels
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


def strict_dynamic_calls(
    model: torch.nn.Module, shapes: list[tuple[int, ...]]
) -> Iterator[tuple[torch.Tensor, tuple[torch.Tensor, ...]]]:
    """Call `torch.compile(model, dynamic=True)` on a random input of each shape, with every
    `DynamicShapesWarning` and `FallbackWarning` an error; check each output's values and
    strides against eager's, and yield the input and the compiled outputs."""
    compiled = torch.compile(model, backend="xfuse", dynamic=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        for shape in shapes:
            x = torch.randn(*shape)
            got, want = compiled(x), model(x)
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w)
                assert g.stride() == w.stride()
            yield x, got


class Pooled(torch.nn.Module):
    """The last token of each sequence and its unbiased variance over the sequence, a repeat
    of the first token, and a view of the input: ops the symbolic importer once refused."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.proj(x)
        return h[:, -1] * h.var(dim=1), h[:, :1].repeat(1, 2, 1), x[:, 0]


def test_last_tokens_variances_repeats_and_input_views_run_one_symbolic_program(
    counts: Counts,
) -> None:
    """Through `torch.compile(dynamic=True)` over batch and sequence: one symbolic program,
    no warning, eager's values at every size, and the input's view shares its memory."""
    torch.manual_seed(0)
    for x, got in strict_dynamic_calls(
        Pooled().eval(), [(2, 5, 16), (3, 9, 16), (4, 2, 16), (2, 17, 16)]
    ):
        assert got[2].data_ptr() == x.data_ptr()
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


class Heads(torch.nn.Module):
    """The fourth token, the third from the end and a strided run of the first five, views of
    another output beside them: selects and slices beyond `MIN_SIZE` elements, which dynamo's
    guards (`s > 3`) let every size of the trace's range have."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x * 2
        return x[:, 3] + x[:, -3], x[:, 0:5:2].sum(1), y, y.view(-1), y[0]


class Split(torch.nn.Module):
    """Heads split off the input and its exponential by views to sizes of the call (the batch
    and sequence lengths dynamo passes as size inputs)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, n, _ = x.shape
        y = x.exp()
        return x.view(b, n, 4, 4), y, y.view(b * n, 2, 8).transpose(0, 1)


def _head_and_tail(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = y.shape[0] - x.shape[0]  # a size of the call: the tail of y as long as x
    return (y[:n] * 2).sum(0), (y[n:] + x).exp()


def _head_and_tail_to_its_length(
    x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    n = y.shape[0] - x.shape[0]  # the tail's end written as the dim's length
    return (y[:n] * 2).sum(0), (y[n : y.shape[0]] + x).exp()


@pytest.mark.parametrize("fn", [_head_and_tail, _head_and_tail_to_its_length])
def test_a_tail_sliced_at_a_size_of_the_call_runs_one_symbolic_program(
    counts: Counts, fn: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]]
) -> None:
    """`y[y.shape[0] - x.shape[0]:]`: a slice whose start is a difference of two sizes, to the
    dim's end (unbounded, or the dim's length as a size of the call), imported as the last
    elements of the dim (its length the result's symbol); the difference is a size symbol the
    fusion's proxies must keep positive."""
    compiled = torch.compile(fn, backend="xfuse", dynamic=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        for a, b in [(3, 7), (4, 9), (2, 11), (6, 9)]:
            x, y = torch.randn(a, 8), torch.randn(b, 8)
            for got, want in zip(compiled(x, y), fn(x, y), strict=True):
                torch.testing.assert_close(got, want)
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


def _one_longer(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    torch._check(y.shape[0] == x.shape[0] + 1)  # dynamo sizes y's dim `s0 + 1`
    return (y[1:] + x).exp(), y.sum(0)


def test_an_input_sized_by_another_inputs_length_runs_one_symbolic_program(
    counts: Counts,
) -> None:
    """An input whose dim dynamo sizes as another input's plus one (a checked relation) is
    exported with torch.export's derived `Dim`, its size a derived symbol checked at each
    call, where it compiled per shape."""
    compiled = torch.compile(_one_longer, backend="xfuse", dynamic=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        for n in (3, 5, 9, 17):
            x, y = torch.randn(n, 8), torch.randn(n + 1, 8)
            for got, want in zip(compiled(x, y), _one_longer(x, y), strict=True):
                torch.testing.assert_close(got, want)
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


class TransposedViews(torch.nn.Module):
    """Views of an intermediate eager lays out in its input's transposed order."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.tanh(x.transpose(1, 2)) * 2
        return y.transpose(1, 2), y[:, 1:]


def test_views_of_a_transposed_intermediate_run_one_symbolic_program(counts: Counts) -> None:
    """An intermediate that is dense in its input's transposed order at every size, returned
    only through its views: one symbolic program lays it out so at each call."""
    for _, got in strict_dynamic_calls(TransposedViews(), [(2, 5, 8), (3, 9, 8), (4, 2, 8)]):
        assert got[0].untyped_storage().data_ptr() == got[1].untyped_storage().data_ptr()
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


def test_views_through_sizes_of_the_call_run_one_symbolic_program(counts: Counts) -> None:
    """Views of an input and of another output to the call's batch and sequence lengths: one
    symbolic program replays them at each call's sizes, sharing memory as in eager."""
    for x, got in strict_dynamic_calls(Split(), [(2, 5, 16), (3, 9, 16), (4, 2, 16), (2, 17, 16)]):
        assert got[0].data_ptr() == x.data_ptr()
        assert got[2].untyped_storage().data_ptr() == got[1].untyped_storage().data_ptr()
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


def test_elements_within_the_guarded_lowest_size_run_one_symbolic_program(
    counts: Counts,
) -> None:
    """Through `torch.compile(dynamic=True)`: one symbolic program, no warning, eager's values
    at every size, the views sharing their output's memory."""
    for _, got in strict_dynamic_calls(Heads(), [(2, 6, 3), (3, 9, 3), (4, 5, 3), (2, 17, 3)]):
        assert got[3].data_ptr() == got[2].data_ptr() == got[4].data_ptr()
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


class Positions(torch.nn.Module):
    """A table of positions cut to the call's length (`table[:, :n]`: a static dim sliced at a
    size of the call, as BERT's position ids are), a bias repeated by the batch size (BLOOM's
    `alibi.repeat(batch, 1, 1)`), and a size of the call returned beside the tensors (dynamo
    returns one that code after its graph reads, as in Mistral's)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.register_buffer("table", torch.linspace(-1.0, 1.0, 64 * 8).view(1, 64, 8))

    def forward(self, x: torch.Tensor) -> tuple[Any, ...]:
        b, n, _ = x.shape
        h = self.proj(x) + self.table[:, :n]
        bias = self.proj.bias.view(1, 1, 8).repeat(b, 1, 2)
        return h, bias, b * n + 1


def test_a_sliced_table_a_repeat_and_a_returned_size_run_one_symbolic_program(
    counts: Counts,
) -> None:
    """What four of transformers' language models (BERT, DistilBERT, BLOOM, Mistral) compiled
    per shape for: one symbolic program serves every batch and length, with eager's values."""
    torch.manual_seed(0)
    model = Positions().eval()
    compiled = torch.compile(model, backend="xfuse", dynamic=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        for b, n in [(2, 5), (3, 9), (4, 2), (2, 17), (5, 64)]:
            x = torch.randn(b, n, 8)
            got, want = compiled(x), model(x)
            torch.testing.assert_close(got[:2], want[:2])
            assert got[2] == want[2] and type(got[2]) is int
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


class Pooler(torch.nn.Module):
    """The mean over a sequence by an adaptive pooling of its transpose (Swin's pooler), which
    torch decomposes into a mean seen through `as_strided` to sizes of the call."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = torch.nn.AdaptiveAvgPool1d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.pool(torch.tanh(x).transpose(1, 2)), 1)


def test_an_adaptive_pooling_over_a_sequence_runs_one_symbolic_program(counts: Counts) -> None:
    model = Pooler().eval()
    compiled = torch.compile(model, backend="xfuse", dynamic=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        for b, n in [(2, 5), (3, 9), (4, 2)]:
            x = torch.randn(b, n, 8)
            torch.testing.assert_close(compiled(x), model(x))
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


def _whole_groups(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    b, n = x.shape
    m = n - n % 8  # the length cut to a multiple of 8: a remainder among the sizes
    h = torch.tanh(x[:, :m])
    return h.view(b, -1, 8).sum(-1), h.view(b, m // 8, 8).amax(-1)


def test_a_length_cut_to_a_multiple_runs_one_symbolic_program(counts: Counts) -> None:
    """`x[:, :n - n % 8]` viewed in groups of 8: the remainder is `n - 8 * (n // 8)` (a floor
    division of the table), the view's `-1` the ratio 8, and the guards on them (`Mod(...) ==
    0`, the ratio's equality) conditions the table holds: one symbolic program. (At a length
    that is a multiple of 8 dynamo traces another graph: the cut is then no slice.)"""
    compiled = torch.compile(_whole_groups, backend="xfuse", dynamic=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        for b, n in [(2, 37), (3, 26), (2, 70), (4, 23), (2, 17)]:
            x = torch.randn(b, n)
            for got, want in zip(compiled(x), _whole_groups(x), strict=True):
                torch.testing.assert_close(got, want)
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


def _windows(x: torch.Tensor) -> torch.Tensor:
    """Swin's window partition: a [b, h, w, c] map padded at its ends up to multiples of 7
    (`(7 - w % 7) % 7`, a size of the call), cut into 7x7 windows, each averaged."""
    b, h, w, c = x.shape
    y = torch.nn.functional.pad(torch.tanh(x), (0, 0, 0, (7 - w % 7) % 7, 0, (7 - h % 7) % 7))
    rows, cols = y.shape[1] // 7, y.shape[2] // 7
    windows = y.view(b, rows, 7, cols, 7, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 49, c)
    return windows.mean(1)


def test_a_window_padding_to_multiples_runs_one_symbolic_program(counts: Counts) -> None:
    """The padding is a `graph.pad` up to the result's dims (`open_high`), the windows' count a
    ratio of the padded size, the trace's guards on them (remainders, ratios, a batch's
    remainder by the windows' count) conditions of the table: one symbolic program for maps
    whose padding is 0 or not."""
    shapes = [(2, 15, 16, 4), (3, 20, 17, 4), (2, 16, 30, 4), (2, 28, 14, 4)]
    _matches_with_one_symbolic_program(_windows, shapes, counts)


def _shifted_window_mask(x: torch.Tensor) -> torch.Tensor:
    """Swin's shifted-window mask as transformers computes it: each row and column counted by
    the shifted regions it is in (`arange(h) >= h - 7`, a size of the call read as a number),
    added to a map scaled by a size."""
    h, w = x.shape[1], x.shape[2]
    rows = (torch.arange(h) >= h - 7).long() + (torch.arange(h) >= h - 3).long()
    cols = (torch.arange(w) >= w - 7).long() + (torch.arange(w) >= w - 3).long()
    regions = (rows[:, None] * 3 + cols[None, :]).float()
    return x * regions[None, :, :, None] + (x.shape[0] * h - 1)


def test_sizes_read_as_numbers_run_one_symbolic_program(counts: Counts) -> None:
    """A size of the call in an elementwise op (compared with an iota, added to a value) is a
    `graph.size_value`: one symbolic program for every map size."""
    shapes = [(2, 14, 21, 3), (3, 9, 16, 3), (2, 30, 12, 3), (4, 8, 8, 3)]
    _matches_with_one_symbolic_program(_shifted_window_mask, shapes, counts)


def _scaled_by_floats_of_sizes(x: torch.Tensor) -> torch.Tensor:
    """Python floats of the call's sizes (SymFloats: a mean by hand, a ratio, a negation) as
    operands of tensor ops."""
    n, m = x.shape[0], x.shape[1]
    return (x * 2).sum(0) / (n * 1.0) - m / 3 + x[0] * -(n * 0.5)


def test_floats_of_sizes_run_one_symbolic_program(counts: Counts) -> None:
    """Floats computed from sizes of the call (`sym_float(s0) * 1.0`, `s1 / 3`, a negation)
    are computed by the program in double, as Python computes them, then cast: one symbolic
    program for every size."""
    shapes = [(5, 3), (7, 6), (9, 2), (4, 11)]
    _matches_with_one_symbolic_program(_scaled_by_floats_of_sizes, shapes, counts)


def _merged(x: torch.Tensor) -> torch.Tensor:
    """Swin's patch merging of a [b, h, w, c] map: padded to even sizes where odd, its four
    strided quarters side by side."""
    h, w = x.shape[1], x.shape[2]
    if h % 2 == 1 or w % 2 == 1:
        x = torch.nn.functional.pad(x, (0, 0, 0, w % 2, 0, h % 2))
    quarters = [x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]]
    return torch.cat(quarters, -1)


def _patched_then_merged_twice(x: torch.Tensor) -> torch.Tensor:
    """Swin's stages: 4x4 patches, then two patch mergings."""
    patches = torch.nn.functional.avg_pool2d(x, 4).permute(0, 2, 3, 1)
    return _merged(torch.tanh(_merged(patches))).sum(-1)


def test_a_second_patch_merging_runs_one_symbolic_program(counts: Counts) -> None:
    """The second merging slices a map the guards made equal to torch's `(h + 4) floordiv 8`
    (the table's `h floordiv 8`): its halves are `h floordiv 16` in the table and torch's
    `(h + 4) floordiv 16`, one length wherever the guards hold (`h mod 8` below 4:
    `SizesAttr.remainders`)."""
    shapes = [(2, 3, 32, 48), (3, 3, 64, 32), (2, 3, 80, 96), (2, 3, 48, 112)]
    _matches_with_one_symbolic_program(_patched_then_merged_twice, shapes, counts)


_TF_WEIGHT = torch.randn(4, 3, 3, 3, generator=torch.Generator().manual_seed(0))


def _tf_padded(x: torch.Tensor) -> torch.Tensor:
    """transformers' TF-style padding before a stride-2 3x3 convolution (MobileNetV2's
    `apply_tf_padding`) of a 4x4-pooled map: at an odd map `max(3 - h % 2, 0)` in all, half
    before."""
    x = torch.nn.functional.avg_pool2d(x, 4)
    h, w = x.shape[-2:]
    ph = max(3 - 2, 0) if h % 2 == 0 else max(3 - h % 2, 0)
    pw = max(3 - 2, 0) if w % 2 == 0 else max(3 - w % 2, 0)
    x = torch.nn.functional.pad(x, (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2))
    return torch.nn.functional.conv2d(x, _TF_WEIGHT, stride=2)


def test_tf_style_padding_of_odd_maps_runs_one_symbolic_program(counts: Counts) -> None:
    """Dynamo's guard that the pooled map is odd (`Ne(Mod(h // 4, 2), 0)`) reaches the size
    table (`SymbolicInputs.relations`), which fixes `h // 4 % 2` to 1: the padding before each
    dim is 1 at every odd size, not a size of the call."""
    shapes = [(2, 3, 36, 44), (2, 3, 52, 60), (3, 3, 68, 36), (2, 3, 84, 100)]
    _matches_with_one_symbolic_program(_tf_padded, shapes, counts)


def _matches_with_one_symbolic_program(
    fn: Any, shapes: list[tuple[int, ...]], counts: Counts
) -> None:
    """`fn` through torch.compile with `dynamic=True` at a random input of each of `shapes`:
    eager's values every time, no warning, one symbolic program and none per shape."""
    compiled = torch.compile(fn, backend="xfuse", dynamic=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        for shape in shapes:
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x), fn(x))
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


def _strided(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tanh(x[:, 0::2]).sum(1), x[:, 1::3] * 2


def test_strided_slices_to_a_dims_end_run_one_symbolic_program(counts: Counts) -> None:
    """`x[:, 0::2]` and `x[:, 1::3]` of a symbolic dim: slices to its end whose lengths are
    floor divisions of the table, at odd and even lengths alike."""
    _matches_with_one_symbolic_program(_strided, [(2, 9), (3, 14), (2, 23), (4, 12)], counts)


def _recent(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x)[:, -64:] * 2  # (a sliding window's last 64 positions: Mistral's mask)


def test_a_slice_as_long_as_its_dim_is_the_dim(counts: Counts) -> None:
    """`x[:, -64:]` where the trace's guards keep the length at most 64: its result has the
    dim's own symbol, so the unit-step slice is all of it (no slice), one symbolic program."""
    _matches_with_one_symbolic_program(_recent, [(2, 9), (3, 14), (2, 23), (4, 12)], counts)


class LastRows(torch.nn.Module):
    """A table's last rows, as many as the input has (MPT's ALiBi slice)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.linspace(-1.0, 1.0, 16 * 4).view(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) + self.table[max(0, 16 - x.shape[0]) :]


def test_a_maximum_of_sizes_the_trace_picked_is_guarded_by_a_condition(counts: Counts) -> None:
    """`table[max(0, 16 - n):]`: the slice's start `Max(0, 16 - n)`, which sizes do not
    decide, is the branch the trace's sizes took (`16 - n`) with a condition `n <= 16` of
    the program's table, and the slice of the static dim its last `n` rows: one symbolic
    program for every length up to 16."""
    model = LastRows()
    compiled = torch.compile(model, backend="xfuse", dynamic=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        for n in (3, 7, 12, 15):
            x = torch.randn(n, 4)
            torch.testing.assert_close(compiled(x), model(x))
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


def test_transformers_language_models_over_lengths_run_one_symbolic_program(
    counts: Counts,
) -> None:
    """BERT (its position ids a slice of a buffer) and BLOOM (its ALiBi bias repeated by the
    batch) over batch sizes and sequence lengths: one symbolic program each."""
    configs = [
        transformers.BertModel(
            transformers.BertConfig(
                num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2
            )
        ),
        transformers.BloomModel(transformers.BloomConfig(n_layer=1, hidden_size=32, n_head=4)),
    ]
    for model in configs:
        torch.manual_seed(0)
        model = model.eval()
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="xfuse", dynamic=True)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("error", DynamicShapesWarning)
            warnings.simplefilter("error", FallbackWarning)
            for b, n in [(2, 7), (3, 12), (2, 21)]:
                ids = torch.randint(0, 100, (b, n))
                got = compiled(ids).last_hidden_state
                torch.testing.assert_close(got, model(ids).last_hidden_state)
    assert counts.programs("symbolic") == 2 and counts.programs("per-shape") == 0


def test_automatic_dynamic_compiles_once_after_the_first_recompile(counts: Counts) -> None:
    """dynamo's default (`dynamic=None`): the first size compiles static; the second marks the
    batch dynamic, and that graph's symbolic program serves every later size."""
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="xfuse")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        for batch in (2, 3):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(compiled(x), model(x))
        kernels = counts.kernels
        assert counts.programs("symbolic") == 1
        for batch in range(4, 10):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(compiled(x), model(x))
    assert counts.kernels == kernels
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


def test_a_size_out_of_the_symbolic_range_runs_per_shape(
    counts: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call the symbolic program refuses (here a size past its range, which dynamo's own
    guards would not catch) compiles that shape alone, with one warning saying why."""
    make_dim = dynamo._dim_of

    def bounded(size: torch.SymInt) -> Any:
        return torch.export.Dim(make_dim(size).__name__, min=2, max=5)

    monkeypatch.setattr(dynamo, "_dim_of", bounded)
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="xfuse", dynamic=True)
    with torch.no_grad():
        for batch in (2, 5):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(compiled(x), model(x))
        assert counts.programs("per-shape") == 0
        with pytest.warns(DynamicShapesWarning, match="outside its range") as record:
            for batch in (6, 7, 7):
                x = torch.randn(batch, 16)
                torch.testing.assert_close(compiled(x), model(x))
    assert len([w for w in record if w.category is DynamicShapesWarning]) == 1
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 2


def test_a_graph_the_symbolic_path_refuses_runs_per_shape(counts: Counts) -> None:
    """Outputs that eager returns as views of an intermediate it does not return, laid out
    with gaps (a buffer of padded rows that `copy_` fills), are refused by the symbolic path:
    one warning names the reason, and each shape compiles alone with eager's values and
    strides."""

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.empty_strided(x.shape, (2 * x.shape[1], 1))
        y.copy_(torch.tanh(x) * 2)
        return y.t(), y[1:]

    compiled = torch.compile(fn, backend="xfuse", dynamic=True)
    with pytest.warns(DynamicShapesWarning, match="symbolic compile refused it") as record:
        for batch in (2, 3, 4):
            x = torch.randn(batch, 8)
            for got, want in zip(compiled(x), fn(x), strict=True):
                torch.testing.assert_close(got, want)
                assert got.stride() == want.stride()
    assert len([w for w in record if w.category is DynamicShapesWarning]) == 1
    assert counts.programs("symbolic") == 0 and counts.programs("per-shape") == 3


def test_a_dynamic_python_int_is_pinned_to_its_first_value(counts: Counts) -> None:
    """`dynamic=True` passes a Python int as a SymInt that no tensor dim holds: the symbolic
    program is specialised on its first value and serves every batch size; a call with
    another value is refused at the call (one warning) and runs per shape."""

    def fn(x: torch.Tensor, k: int) -> torch.Tensor:
        return torch.tanh(x) * k

    compiled = torch.compile(fn, backend="xfuse", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapesWarning)
        for batch in (2, 3, 5):
            x = torch.randn(batch, 8)
            torch.testing.assert_close(compiled(x, 3), fn(x, 3))
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0
    x = torch.randn(4, 8)
    with pytest.warns(DynamicShapesWarning, match="Python int 5, where the program was"):
        torch.testing.assert_close(compiled(x, 5), fn(x, 5))
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 1


def _the_new_dynamic_program(earlier: list[Any]) -> Any:
    """The one symbolic program the backend compiled since `earlier` (the backend's programs
    then: other tests' may not be collected yet)."""
    new = [p for p in dynamo.BACKEND_PROGRAMS.values() if all(p is not q for q in earlier)]
    (program,) = [p for p in map(dynamic_program, new) if p]
    return program


def test_a_changed_python_float_runs_eagerly() -> None:
    """`dynamic=True` passes Python floats as tensors without guarding their values; the
    program is specialised on the first value, takes no input for it (on CUDA each would be
    copied to the device at every call), and a call with another value runs eagerly."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="xfuse", dynamic=True)
    earlier = list(dynamo.BACKEND_PROGRAMS.values())
    with torch.no_grad():
        x = torch.randn(3, 16)
        torch.testing.assert_close(compiled(x), model(x))
        program = _the_new_dynamic_program(earlier)
        assert all(program.compiled.arguments)  # no 0-d input: the norm's `eps` is none
        model.norm.eps = 0.5
        with pytest.warns(FallbackWarning, match="Python scalar"):
            torch.testing.assert_close(compiled(x), model(x))
    torch._dynamo.reset()


def test_specialised_floats_are_guarded_by_dynamo(counts: Counts) -> None:
    """With `specialize_float`, dynamo guards the Python floats instead of passing them as
    tensors (which a call would check): another value traces anew, with no warning."""
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="xfuse", dynamic=True)
    with (
        torch._dynamo.config.patch(specialize_float=True),
        warnings.catch_warnings(),
        torch.no_grad(),
    ):
        warnings.simplefilter("error", FallbackWarning)
        x = torch.randn(3, 16)
        torch.testing.assert_close(compiled(x), model(x))
        model.norm.eps = 0.5  # a guard fails: traced and compiled anew, not run eagerly
        torch.testing.assert_close(compiled(x), model(x))
    assert counts.programs("symbolic") == 2


def test_lifted_parameters_are_not_checked_at_every_call(counts: Counts) -> None:
    """Dynamo guards the layouts of the parameters it lifts: a call whose parameters are the
    last call's tensors keys its plan on its own inputs' layouts alone, and a parameter
    replaced by another tensor takes the checked path, with the new parameter's values."""
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="xfuse", dynamic=True)
    earlier = list(dynamo.BACKEND_PROGRAMS.values())
    with torch.no_grad():
        for batch in (3, 4, 5, 4):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(compiled(x), model(x))
        program = _the_new_dynamic_program(earlier)
        assert program.statics_guarded and program.static_inputs
        guarded = [k for k in program.plans if isinstance(k, tuple) and k[0] == "guarded"]
        assert len(guarded) == 2  # batches 4 and 5 from the second call on (4 again found it)
        assert all(len(k[1]) == 1 for k in guarded)  # the input alone, no parameter
        model.down.weight = torch.nn.Parameter(torch.randn(8, 32))
        for batch in (4, 4):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(compiled(x), model(x))
    assert counts.programs("symbolic") == 1


class Stack(torch.nn.Module):
    """`depth` linear layers, each followed by a layer norm: the parameters dynamo lifts and the
    Python floats it passes as tensors (the norms' `eps`) grow with the depth."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16))
            for _ in range(depth)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


HOST_PATH = ("/xfuse/dynamo.py", "/xfuse/runtime/dynamic.py", "/xfuse/frontend/")
"""Where the per-call host path of a dynamic program under dynamo lives (its steps aside)."""


def host_frames(call: Any) -> int:
    """The Python frames of the host path (`HOST_PATH`) that `call()` runs."""
    frames = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal frames
        path = frame.f_code.co_filename.replace("\\", "/")
        if event == "call" and any(part in path for part in HOST_PATH):
            frames += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return frames


def test_a_call_runs_no_python_per_parameter_or_float(counts: Counts) -> None:
    """A call whose plan is kept checks the Python floats dynamo passes, picks the program's
    tensors, keys its plan on the inputs dynamo does not guard and binds the arguments with
    no Python per parameter or float: its host path runs as many Python frames at any
    depth."""
    frames: list[int] = []
    for depth in (2, 6):
        torch.manual_seed(0)
        model = Stack(depth).eval()
        compiled = torch.compile(model, backend="xfuse", dynamic=True)
        with torch.no_grad():
            for batch in (3, 4, 4):  # the third call runs with the plan the second kept
                x = torch.randn(batch, 16)
                torch.testing.assert_close(compiled(x), model(x))
            frames.append(host_frames(lambda: compiled(x)))  # noqa: B023 - called at once
        torch._dynamo.reset()
    assert counts.programs("symbolic") == 2 and counts.programs("per-shape") == 0
    assert frames[0] == frames[1] > 0


def dynamic_program(backend_program: Any) -> DynamicProgram | None:
    """The symbolic program behind a callable the backend returned, if it has one."""
    found = getattr(backend_program, "dynamic", None)
    return found if isinstance(found, DynamicProgram) else None


def gpt2() -> torch.nn.Module:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64, use_cache=False
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.mark.parametrize("dynamic", [True, None])
def test_gpt2_over_sequence_lengths(counts: Counts, dynamic: bool | None) -> None:
    """A 2-layer GPT-2 over sequence lengths 3..20 compiles one symbolic program for its
    sequence length (with `dynamic=None`, after the first length's static compile), whose
    kernels serve every later length with eager's values: no warning, nothing compiled per
    shape, no kernel compiled after it."""
    model = gpt2()
    compiled = torch.compile(model, backend="xfuse", dynamic=dynamic)
    first = 1 if dynamic else 2  # the calls up to the symbolic compile
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        for length in range(3, 21):
            ids = torch.randint(0, 128, (2, length))
            torch.testing.assert_close(compiled(ids).logits, model(ids).logits)
            if length == 2 + first:
                kernels = counts.kernels
                assert counts.programs("symbolic") == 1
    assert counts.kernels == kernels  # every later length ran the same kernels
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0


def test_gpt2_symbolic_program_is_imported_without_decomposing(
    counts: Counts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPT-2's graph of symbolic sequence length (its sizes computed in the graph, a `diff` of
    the positions and `&` of masks in transformers' mask code) is exported in ops the
    importer reads as they are: the symbolic compile runs no second trace of the program
    (`run_decompositions`)."""
    decomposed: list[object] = []
    run = torch.export.ExportedProgram.run_decompositions

    def recorded(self: torch.export.ExportedProgram, *args: Any, **kwargs: Any) -> Any:
        decomposed.append(self)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", recorded)
    model = gpt2()
    compiled = torch.compile(model, backend="xfuse", dynamic=True)
    with torch.no_grad():
        for length in (3, 7):
            ids = torch.randint(0, 128, (2, length))
            torch.testing.assert_close(compiled(ids).logits, model(ids).logits)
    assert counts.programs("symbolic") == 1 and counts.programs("per-shape") == 0
    assert decomposed == []


LENGTHS = [*range(1, 21), *range(21, 250, 9), *range(250, 257)]
"""Sequence lengths from 1 to 256: all of 1..20 and 250..256, every 9th between (all 256 take
twice as long, the compiles aside)."""


def test_a_language_model_over_sequence_lengths_1_to_256_compiles_its_kernels_once(
    counts: Counts,
) -> None:
    """A 1-layer GPT-2 of 256 positions called with `dynamic=True` at sequence lengths from 1
    to 256 (`LENGTHS`), with eager's logits at every one. Length 1 specialises, as in Inductor:
    dynamo traces the sequence dim as the constant 1 (the batch stays symbolic), and xfuse
    compiles that graph's program; length 2 fails that graph's guard, and dynamo hands over a
    graph of symbolic sequence length, whose program is compiled once: its kernels serve every
    later length, and length 1 again, the first program. No warning, nothing per shape."""
    config = transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=128, n_positions=256, use_cache=False
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    compiled = torch.compile(model, backend="xfuse", dynamic=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        warnings.simplefilter("error", FallbackWarning)
        first = kernels = 0
        for call, length in enumerate([*LENGTHS, 1]):
            ids = torch.randint(0, 128, (2, length))
            torch.testing.assert_close(compiled(ids).logits, model(ids).logits)
            if call == 0:  # length 1: the program of that length, symbolic in the batch
                assert counts.programs("symbolic") == 1
                first = counts.kernels
                assert first > 0
            elif call == 1:  # length 2: the program of symbolic sequence length
                assert counts.programs("symbolic") == 2
                kernels = counts.kernels
                assert kernels > first
    assert counts.kernels == kernels  # lengths 3..256 and 1 again ran compiled kernels
    assert counts.programs("symbolic") == 2 and counts.programs("per-shape") == 0


def _merged_patches(x: torch.Tensor) -> torch.Tensor:
    """Swin's patch merging of a [b, h, w, c] map: its even and odd rows and columns side by
    side, the map padded by a row or column where `h` or `w` is odd."""
    b, h, w, c = x.shape
    if h % 2 == 1 or w % 2 == 1:
        x = torch.nn.functional.pad(x, (0, 0, 0, w % 2, 0, h % 2))
    quarters = [x[:, i::2, j::2, :] for j in (0, 1) for i in (0, 1)]
    return torch.tanh(torch.cat(quarters, -1)).view(b, -1, 4 * c)


def test_even_and_odd_rows_of_an_even_length_are_one_length(counts: Counts) -> None:
    """`x[:, 0::2]` is `(h + 1) // 2` long and `x[:, 1::2]` `h // 2`: the trace's guard that
    they are equal (`h` even) is a remainder the table's conditions fix (`SizesAttr.remainders`),
    by which both are `h // 2` and the concatenation's operands match: one symbolic program
    for even maps (dynamo traces the odd maps' padding as another graph, one more)."""
    even = [(2, 8, 6, 4), (2, 12, 10, 4), (3, 16, 14, 4)]
    _matches_with_one_symbolic_program(_merged_patches, even, counts)


def _pooled_then_merged(x: torch.Tensor) -> torch.Tensor:
    """A [b, c, h, w] map pooled by 4 (`h // 4` rows) and its patches merged: the rows'
    halves are floor divisions of floor divisions, `h // 8` and `(h + 4) // 8`."""
    pooled = torch.nn.functional.avg_pool2d(x, 4).permute(0, 2, 3, 1)
    return _merged_patches(pooled)


def test_equal_floor_divisions_of_a_pooled_length_are_one_size(counts: Counts) -> None:
    """`(h // 4) // 2` and `(h // 4 + 1) // 2` are `h // 8` and `(h + 4) // 8`, two floor
    divisions the trace's guard says are equal (`h // 4` even, no single remainder of `h`):
    the table names them one size (`SizesAttr.aliases`), and the program serves every map
    whose pooled size is even."""
    shapes = [(2, 3, 64, 48), (2, 3, 96, 80), (3, 3, 80, 112), (2, 3, 72, 64)]
    _matches_with_one_symbolic_program(_pooled_then_merged, shapes, counts)


_ALONG_SYMBOLIC_DIMS: dict[str, Any] = {
    "index_add": lambda x: x.index_add(0, torch.tensor([0, 4]), torch.ones(2, *x.shape[1:])),
    "index_copy": lambda x: x.index_copy(1, torch.tensor([4, 0]), torch.ones(x.shape[0], 2, 4)),
    "index_fill": lambda x: x.index_fill(1, torch.tensor([0, -2]), 3.0),
    "index_put": lambda x: x.index_put((torch.tensor([0, -1]),), torch.ones(2, *x.shape[1:])),
    "index_put_accumulate": lambda x: x.index_put(
        (torch.tensor([0, 4]), torch.tensor([1, 1])), torch.ones(2, 4), True
    ),
}
"""Scatters of a few fixed positions along a dim of symbolic size (index 4 is in range from
5 on)."""


@pytest.mark.parametrize("name", list(_ALONG_SYMBOLIC_DIMS))
def test_scatters_along_a_symbolic_dim_run_one_symbolic_program(name: str, counts: Counts) -> None:
    """index_add, index_copy, index_fill and index_put at positions along a dim whose size is
    a symbol: the positions' check against the dim reads its runtime size, so one symbolic
    program serves every size with eager's values, and an index out of range at a small size
    raises eager's error."""
    scatter = _ALONG_SYMBOLIC_DIMS[name]

    def fn(x: torch.Tensor) -> torch.Tensor:
        return scatter(x) * 2

    _matches_with_one_symbolic_program(fn, [(5, 6, 4), (7, 8, 4), (9, 10, 4)], counts)
    compiled = torch.compile(fn, backend="xfuse", dynamic=True)
    small = torch.randn(3, 4, 4)  # index 4 out of range of dim 0 (and of dim 1)
    if name in ("index_fill", "index_put"):
        torch.testing.assert_close(compiled(small), fn(small))
        return
    with pytest.raises((IndexError, RuntimeError)) as eager:
        fn(small)
    with pytest.raises(eager.type):
        compiled(small)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(_ALONG_SYMBOLIC_DIMS))
def test_scatters_under_a_default_cuda_device_make_their_indices_there(
    name: str, counts: Counts
) -> None:
    """Under `torch.set_default_device("cuda")` the scatters' index and source tensors are
    made on the GPU, in eager and in the program (torch 2.11's dynamo leaves their device out
    of its graph and traces them on the CPU, where `index_fill` refuses the index)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    scatter = _ALONG_SYMBOLIC_DIMS[name]

    def fn(x: torch.Tensor) -> torch.Tensor:
        return scatter(x) * 2

    torch.set_default_device("cuda")
    try:
        _matches_with_one_symbolic_program(fn, [(5, 6, 4), (7, 8, 4), (9, 10, 4)], counts)
    finally:
        torch.set_default_device(None)


def _paired_rows(x: torch.Tensor) -> torch.Tensor:
    return (x.reshape(x.shape[0] // 2, 2, x.shape[1]) * 2).sum(1)


def test_a_reshape_into_half_as_many_rows_runs_one_symbolic_program(counts: Counts) -> None:
    """`x.reshape(n // 2, 2, c)` of a symbolic `n`: its size `n // (n // 2)` is 2, as the
    trace's guard that the element counts match (`c * n == 2 * c * (n // 2)`) makes `n` even;
    one symbolic program serves every even `n`."""
    _matches_with_one_symbolic_program(_paired_rows, [(4, 3), (6, 5), (10, 3)], counts)


def _five_only(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    if n <= 5 and n != 2 and n != 3 and n != 4:  # guards that leave the batch one size
        return x * 2
    return x + 1


def test_a_symbol_the_guards_leave_one_size_runs_per_shape_in_one_line() -> None:
    """dynamo's guards `s <= 5`, `s != 2`, `s != 3`, `s != 4` leave the symbol only 5: no
    range torch.export takes (a `Dim` from 5 to 5 raised an AssertionError inside the
    backend), so the graph compiles per shape with one line that says why, and eager's
    values."""
    torch._dynamo.reset()
    compiled = torch.compile(_five_only, backend="xfuse", dynamic=True)
    x = torch.randn(5, 3)
    with pytest.warns(DynamicShapesWarning, match="is 5 wherever the trace's guards on it hold"):
        torch.testing.assert_close(compiled(x), _five_only(x))
    torch._dynamo.reset()
