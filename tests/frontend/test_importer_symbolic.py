"""Importing torch.export's symbolic sizes (`import_module(..., dynamic_shapes=...)`,
docs/dynamic-shapes.md): dynamic dims naming their size symbols, the `graph.sizes` table with
torch's hints and ranges, and one-line refusals naming the aten op."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

from xfuse.dialects import graph
from xfuse.errors import InterpretError, SymbolicSizeError
from xfuse.frontend.eager_rules import check_eager_rules
from xfuse.frontend.importer import decomposition_table, import_module
from xfuse.frontend.pytrees import export_support
from xfuse.interpreters.graph import interpret
from xfuse.ir.context import parse
from xfuse.ir.names import SIZES_ATTR


class Block(torch.nn.Module):
    def forward(self, x: torch.Tensor, b: torch.Tensor) -> Any:
        y = torch.relu(x + b)
        return y.reshape(-1).sum(), y.view(x.shape[0] * 2, 4), torch.cat([x, x], 0), y.softmax(-1)


def test_dims_become_size_symbols_with_torch_hints_and_ranges() -> None:
    batch = Dim("batch", min=2, max=4096)
    program = import_module(
        Block(), (torch.randn(4, 8), torch.randn(8)), dynamic_shapes={"x": {0: batch}, "b": None}
    )
    function = program.function
    table = function.attributes[SIZES_ATTR]
    assert isinstance(table, graph.SizesAttr)
    (symbol,) = table.inputs()
    assert (symbol.source, symbol.hint, symbol.low, symbol.high) == ((0, 0), 4, 2, 4096)
    s = symbol.name
    x = function.body.block.args[0]
    assert graph.dims_of(x) == (s, 8)
    results = [graph.dims_of(t) for t in function.function_type.outputs.data]
    flat, doubled = (
        table.symbol_for(graph.SizeExpr.symbol(s).scale(8)),
        table.symbol_for(graph.SizeExpr.symbol(s).scale(2)),
    )
    assert flat is not None and doubled is not None
    assert results == [(), (doubled, 4), (doubled, 8), (s, 8)]
    assert any(
        isinstance(op, graph.ReshapeOp) and graph.dims_of(op.results[0]) == (flat,)
        for op in function.body.block.ops
    )
    # The text reads back as the same program.
    assert str(parse(str(program.module))) == str(program.module)


def test_two_inputs_sharing_a_dim_share_its_symbol() -> None:
    seq = Dim("seq", min=2, max=512)

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b + 1

    program = import_module(
        f, (torch.randn(6, 4), torch.randn(6, 4)), dynamic_shapes={"a": {0: seq}, "b": {0: seq}}
    )
    a, b = program.function.body.block.args
    assert graph.dims_of(a) == graph.dims_of(b)
    assert isinstance(graph.dims_of(a)[0], str)


def test_a_size_below_two_is_raised_to_two() -> None:
    program = import_module(
        lambda x: x.exp(), (torch.randn(5, 3),), dynamic_shapes={"x": {0: Dim("n", max=64)}}
    )
    (symbol,) = program.function.attributes[SIZES_ATTR].inputs()  # pyright: ignore[reportAttributeAccessIssue]
    assert (symbol.low, symbol.high, symbol.hint) == (2, 64, 5)


@pytest.mark.parametrize("fn", [lambda x: x[1:-2:2], lambda x: x[::2][3:]])
def test_ops_without_symbolic_rules_refuse_in_one_line(fn: Any) -> None:
    with pytest.raises(
        SymbolicSizeError, match=r"^aten\.slice\.Tensor cannot import symbolic sizes yet"
    ) as e:
        import_module(fn, (torch.randn(6, 4),), dynamic_shapes={"x": {0: Dim.AUTO}})
    assert "\n" not in str(e.value)


def test_a_torch_call_takes_symbolic_tensors() -> None:
    program = import_module(
        lambda x: torch.det(x.reshape(-1, 2, 2)),
        (torch.randn(6, 4),),
        dynamic_shapes={"x": {0: Dim.AUTO}},
    )
    [call] = [op for op in program.function.body.block.ops if isinstance(op, graph.TorchCallOp)]
    (symbol,) = program.function.attributes[SIZES_ATTR].inputs()  # pyright: ignore[reportAttributeAccessIssue]
    assert symbol.high is None  # Dim.AUTO: no upper bound
    assert graph.dims_of(call.operands[0]) == (symbol.name, 2, 2)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_a_padding_of_symbolic_dims_by_numbers_is_a_graph_pad(mode: str) -> None:
    """A constant padding by numbers of symbolic dims is a `graph.pad` (no torch call), its
    result dims the table's symbols of each dim plus its padding; a reflected or replicated
    one is torch's call; eager's values at every size."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.pad(torch.tanh(x), (1, 2, 2, 1), mode=mode)

    dims = {"x": {1: Dim("h", min=3, max=64), 2: Dim("w", min=3, max=64)}}
    program = import_module(fn, (torch.randn(2, 6, 5),), dynamic_shapes=dims)
    ops = program.function.body.block.ops
    [padded] = [op for op in ops if isinstance(op, graph.PadOp | graph.TorchCallOp)]
    assert isinstance(padded, graph.PadOp) == (mode == "constant")
    assert all(isinstance(d, str) for d in graph.dims_of(padded.results[0])[1:])
    for h, w in [(6, 5), (3, 9), (17, 4)]:
        x = torch.randn(2, h, w)
        [got] = interpret(program.module, program.arguments(x))
        torch.testing.assert_close(got, fn(x))


def _heads_attention(x: torch.Tensor) -> torch.Tensor:
    """Attention over heads split from [2, T, 4, 8] memory, as a transformer splits them."""
    q = x.transpose(1, 2)
    return F.scaled_dot_product_attention(q, q, q, is_causal=True)


def test_attention_output_keeps_its_memory_order_at_symbolic_sizes() -> None:
    """Attention's [B, H, T, D] output lies in [B, T, H, D] memory at every T (its traced
    strides are polynomials of T): the call records that order (`orders`), as a static import
    does, its result keeps T's symbol, and a permute reads it back in its logical dims."""
    program = import_module(
        _heads_attention, (torch.randn(2, 6, 4, 8),), dynamic_shapes={"x": {1: Dim("T", min=2)}}
    )
    (call,) = [op for op in program.function.body.block.ops if isinstance(op, graph.TorchCallOp)]
    (symbol,) = program.function.attributes[SIZES_ATTR].inputs()  # pyright: ignore[reportAttributeAccessIssue]
    assert call.memory_orders == ((0, 2, 1, 3),)
    assert graph.dims_of(call.results[0]) == (2, symbol.name, 4, 8)
    (back,) = [u.operation for u in call.results[0].uses]
    assert isinstance(back, graph.PermuteOp)
    assert graph.dims_of(back.result) == (2, 4, symbol.name, 8)


def test_a_symbolic_layout_has_a_memory_order_only_where_every_size_has_it() -> None:
    """`SizeSymbols.memory_order`: the order of the trace's sizes, where each stride is the
    row-major stride of the dims after it as a polynomial: strides (1, 8) of an [s, 4] tensor
    traced at s = 8 are dense there, not at other sizes (no order); a row-major layout has
    none either."""
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from xfuse.frontend.builder import SizeSymbols

    env = ShapeEnv()
    symbol = env.create_symbol(8, ConstantSource("s"))
    s = env.create_symintnode(symbol, hint=8)
    symbols = SizeSymbols()
    symbols.inputs.append(graph.SizeSymbol.input(str(symbol), 0, 0, 8))
    assert symbols.memory_order((s, 4), (1, s)) == (1, 0)
    assert symbols.memory_order((2, s, 3, 4), (12 * s, 4, 4 * s, 1)) == (0, 2, 1, 3)
    assert symbols.memory_order((s, 4), (1, 8)) is None
    assert symbols.memory_order((s, 4), (4, 1)) is None
    assert not env.guards  # read at the hints, without guarding on the sizes


def test_static_imports_have_no_table() -> None:
    program = import_module(Block(), (torch.randn(4, 8), torch.randn(8)))
    assert SIZES_ATTR not in program.function.attributes
    assert not any(graph.is_symbolic(a) for a in program.function.body.block.args)


@pytest.mark.parametrize("n", [2, 3, 9])
def test_an_imported_symbolic_program_matches_eager_at_every_size(n: int) -> None:
    batch = Dim("batch", min=2, max=4096)
    program = import_module(
        Block(), (torch.randn(4, 8), torch.randn(8)), dynamic_shapes={"x": {0: batch}, "b": None}
    )
    x, b = torch.randn(n, 8), torch.randn(8)
    got = interpret(program.module, program.arguments(x, b))
    for g, w in zip(got, Block()(x, b), strict=True):
        torch.testing.assert_close(g, w)


def test_two_symbols_through_a_transpose_and_a_product() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x.t().exp() @ x).reshape(-1)

    program = import_module(
        f, (torch.randn(3, 5),), dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}}
    )
    table = program.function.attributes[SIZES_ATTR]
    assert isinstance(table, graph.SizesAttr)
    rows, cols = (s.name for s in table.inputs())
    (out,) = program.function.function_type.outputs.data
    square = graph.SizeExpr.symbol(cols) * graph.SizeExpr.symbol(cols)
    assert graph.dims_of(out) == (table.symbol_for(square),)
    for n, m in ((2, 2), (4, 7)):
        x = torch.randn(n, m)
        torch.testing.assert_close(interpret(program.module, [x])[0], f(x))


def test_an_arange_and_a_slice_of_a_static_dim_keep_the_symbol() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.arange(x.shape[0]) * x[:, 1] + x[:, 2:].sum(1)

    program = import_module(f, (torch.randn(6, 4),), dynamic_shapes={"x": {0: Dim.AUTO}})
    table = program.function.attributes[SIZES_ATTR]
    assert isinstance(table, graph.SizesAttr)
    (symbol,) = table.inputs()
    (out,) = program.function.function_type.outputs.data
    assert graph.dims_of(out) == (symbol.name,)
    for n in (2, 5, 11):
        x = torch.randn(n, 4)
        torch.testing.assert_close(interpret(program.module, [x])[0], f(x))


class Logits(torch.nn.Module):
    """A language model's logits, from token ids (a tensor out, not the library's output
    type: this file is about sizes)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids).logits


def gpt2() -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64, use_cache=False
    )
    torch.manual_seed(0)
    return Logits(transformers.GPT2LMHeadModel(config).eval())


def test_gpt2_keeps_its_sequence_symbol() -> None:
    """torch.export keeps GPT-2's sequence length symbolic, and so do the import's checks of
    eager's argument rules (their probe of the attention runs at the example's size without
    guarding on it) and its decompositions: the import has one input symbol, read from the
    token ids' dim 1, the logits are `[2, seq, vocab]` of it, and the imported program
    matches eager at other lengths."""
    model = gpt2()
    ids = torch.randint(0, 128, (2, 8))
    dynamic = {"input_ids": {1: Dim("seq", min=2, max=64)}}
    with export_support():
        exported = torch.export.export(model, (ids,), strict=False, dynamic_shapes=dynamic)
        check_eager_rules(exported)
        decomposed = exported.run_decompositions(decomposition_table(symbolic=True))
    for program in (exported, decomposed):
        (tokens,) = [n for n in program.graph.nodes if n.name == "input_ids"]
        assert isinstance(tokens.meta["val"].shape[1], torch.SymInt)
    imported = import_module(model, (ids,), dynamic_shapes=dynamic)
    table = imported.function.attributes[SIZES_ATTR]
    assert isinstance(table, graph.SizesAttr)
    (symbol,) = table.inputs()
    assert (symbol.source[1] if symbol.source else None, symbol.hint) == (1, 8)
    logits = imported.function.function_type.outputs.data[0]
    assert graph.dims_of(logits) == (2, symbol.name, 128)
    with torch.no_grad():
        for n in (3, 13):
            x = torch.randint(0, 128, (2, n))
            got = interpret(imported.module, imported.arguments(x))[0]
            torch.testing.assert_close(got, model(x))


def test_eager_rule_probes_do_not_specialise_sizes() -> None:
    """An attention with a boolean mask is probed against eager's argument rules at import;
    the probe runs at the example's sizes without guarding on them, so the sizes stay
    symbolic."""

    def f(q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)

    seq = Dim("seq", min=2, max=64)
    program = import_module(
        f,
        (torch.randn(1, 2, 8, 4), torch.ones(8, 8, dtype=torch.bool).tril()),
        dynamic_shapes={"q": {2: seq}, "mask": {0: seq, 1: seq}},
    )
    assert SIZES_ATTR in program.function.attributes
    for n in (3, 11):
        q, mask = torch.randn(1, 2, n, 4), torch.ones(n, n, dtype=torch.bool).tril()
        torch.testing.assert_close(interpret(program.module, [q, mask])[0], f(q, mask))


def test_packed_sequence_ids_keep_their_symbol() -> None:
    """transformers' packed-sequence ids: a `diff` of the positions with one element prepended
    (decomposed without slicing by the symbol), a `cumsum` along the sequence, and a mask of
    them gathered by two broadcast index tensors."""

    def f(positions: torch.Tensor) -> torch.Tensor:
        first = positions[:, :1] - 1
        ids = (torch.diff(positions, prepend=first, dim=-1) != 1).cumsum(-1)
        seq = torch.arange(positions.shape[1])
        rows = torch.arange(2)[:, None, None]
        return ids[rows, seq[None, :, None]] == ids[rows, seq[None, None, :]]

    program = import_module(
        f, (torch.arange(7).expand(2, 7),), dynamic_shapes={"positions": {1: Dim("seq", min=2)}}
    )
    table = program.function.attributes[SIZES_ATTR]
    assert isinstance(table, graph.SizesAttr)
    (symbol,) = table.inputs()
    (out,) = program.function.function_type.outputs.data
    assert graph.dims_of(out) == (2, symbol.name, symbol.name)
    for n in (2, 5, 9):
        positions = torch.cat([torch.arange(n // 2), torch.arange(n - n // 2)]).expand(2, n)
        torch.testing.assert_close(interpret(program.module, [positions])[0], f(positions))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x[:, 1:] * 2,
        lambda x: x[:, :-1].exp(),
        lambda x: F.pad(x, (0, 1), value=-1.0)[:, 1:],
        lambda x: torch.cat([x[:, :1], x], 1)[:, 2 : x.shape[1] + 1],
    ],
)
def test_a_slice_of_a_symbolic_dim_from_an_offset_is_a_gather(fn: Any) -> None:
    """A slice of a symbolic dim from a start within `MIN_SIZE`, whose result is another size
    symbol (`s - 1`, or `s` of a padded `s + 1`; its end `-1`, the end, or a size), imports as
    a gather of `start + i` and matches eager at every size."""
    program = import_module(fn, (torch.randn(3, 6),), dynamic_shapes={"x": {1: Dim.AUTO}})
    [gather] = [op for op in program.function.body.block.ops if isinstance(op, graph.GatherOp)]
    assert graph.is_symbolic(gather.result)
    for n in (3, 5, 9):  # from 3: a result of size 1 would be specialised
        x = torch.randn(3, n)
        [got] = interpret(program.module, program.arguments(x))
        torch.testing.assert_close(got, fn(x))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x[:, ::2] * 2,
        lambda x: (x[:, 1::2].sum(1), x[:, 0::3].exp()),
        lambda x: x[:, 3:] * 2,  # (the trace's guards raise the dim's lowest size past 3)
    ],
)
def test_a_strided_slice_of_a_symbolic_dim_to_its_end_names_its_length(fn: Any) -> None:
    """`x[:, k::m]` of a symbolic dim `s` (a patch merging's `x[:, 0::2]`) is a `graph.slice`
    to the dim's end whose result dim is the symbol of `(s - k + m - 1) // m`, and matches
    eager at odd and even sizes."""
    program = import_module(fn, (torch.randn(3, 8),), dynamic_shapes={"x": {1: Dim.AUTO}})
    slices = [op for op in program.function.body.block.ops if isinstance(op, graph.SliceOp)]
    assert slices and all(graph.is_symbolic(op.result) for op in slices)
    for n in (7, 8, 11):
        x = torch.randn(3, n)
        got = interpret(program.module, program.arguments(x))
        want = fn(x)
        for g, w in zip(got, want if isinstance(want, tuple) else (want,), strict=True):
            torch.testing.assert_close(g, w)


def _window_pad(x: torch.Tensor) -> torch.Tensor:
    """Swin's window padding: the last two dims padded at their ends up to multiples of 7."""
    h, w = x.shape[-2:]
    return F.pad(torch.tanh(x), (0, (7 - w % 7) % 7, 0, (7 - h % 7) % 7), value=0.5)


def test_a_padding_by_a_size_of_the_call_pads_up_to_the_result_dim() -> None:
    """A constant padding by `(7 - w % 7) % 7`, a size of the call, is a `graph.pad` whose
    padded dims are `open_high`: the result dims are the symbols of `w + (7 - w % 7) % 7`
    (7 times w's windows), and the values match eager wherever the amount is 0 or not."""
    dims = {"x": {1: Dim("h", min=2, max=64), 2: Dim("w", min=2, max=64)}}
    program = import_module(_window_pad, (torch.randn(2, 15, 16),), dynamic_shapes=dims)
    [pad] = [op for op in program.function.body.block.ops if isinstance(op, graph.PadOp)]
    assert pad.open_dims == (1, 2) and pad.pads == ((0, 0, 0), (0, 0, 0))
    assert all(isinstance(d, str) for d in graph.dims_of(pad.result)[1:])
    assert str(parse(str(program.module))) == str(program.module)
    for h, w in [(15, 16), (14, 21), (20, 17), (30, 14)]:
        x = torch.randn(2, h, w)
        [got] = interpret(program.module, program.arguments(x))
        torch.testing.assert_close(got, _window_pad(x))
    # `w % 7` is `w - 7 * (w // 7)`, and a floor division of the table is 2 or more at a
    # call: below 14 the program refuses (the per-shape path runs such sizes).
    with pytest.raises(InterpretError, match=r"floordiv 7 is 1: a symbol's size is 2 or more"):
        interpret(program.module, program.arguments(torch.randn(2, 15, 9)))


@pytest.mark.parametrize(
    ("shapes", "dims"),
    [
        (((10, 4), (3, 5)), {"w": {0: Dim.AUTO}, "ids": {0: Dim.AUTO}}),
        (((10, 4), (3, 5)), {"w": {0: Dim.AUTO, 1: Dim.AUTO}, "ids": None}),
        (((10, 4), (3,)), {"w": {1: Dim.AUTO}, "ids": None}),
    ],
)
def test_an_embedding_of_a_symbolic_table_is_a_gather(
    shapes: tuple[tuple[int, ...], tuple[int, ...]], dims: dict[str, Any]
) -> None:
    """An embedding whose table (and indices) have symbolic sizes imports as one gather of the
    table broadcast to the indices' rank, the result `[*ids, width]` with their symbols, and
    matches eager at every size."""

    def fn(w: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, w) * 2

    (vocab, width), ids_shape = shapes
    example = (torch.randn(vocab, width), torch.randint(0, vocab, ids_shape))
    program = import_module(fn, example, dynamic_shapes=dims)
    [gather] = [op for op in program.function.body.block.ops if isinstance(op, graph.GatherOp)]
    assert graph.is_symbolic(gather.result)
    for grow in (0, 3, 7):
        v = vocab + grow if 0 in dims["w"] else vocab
        d = width + grow if 1 in dims["w"] else width
        n = ids_shape[0] + grow if dims["ids"] else ids_shape[0]
        w, ids = torch.randn(v, d), torch.randint(0, v, (n, *ids_shape[1:]))
        [got] = interpret(program.module, program.arguments(w, ids))
        torch.testing.assert_close(got, fn(w, ids))


@pytest.mark.parametrize(
    ("dim", "dims"),
    [
        (1, {"x": None, "i": {0: Dim.AUTO}}),
        (1, {"x": {0: Dim.AUTO, 1: Dim.AUTO}, "i": {0: Dim.AUTO}}),
    ],
)
def test_an_index_select_of_symbolic_sizes_is_a_gather(dim: int, dims: dict[str, Any]) -> None:
    """`index_select` whose indices (and input) have symbolic sizes imports as one gather of
    the indices laid out along `dim`, and matches eager at every size."""

    def fn(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return torch.index_select(x, dim, i) * 2

    program = import_module(fn, (torch.randn(6, 4), torch.randint(0, 4, (3,))), dynamic_shapes=dims)
    [gather] = [op for op in program.function.body.block.ops if isinstance(op, graph.GatherOp)]
    assert graph.is_symbolic(gather.result)
    for shape, n in [((6, 4), 5), ((6, 4), 2)] + ([((7, 9), 5), ((3, 2), 8)] if dims["x"] else []):
        x, i = torch.randn(shape), torch.randint(0, shape[dim], (n,))
        [got] = interpret(program.module, program.arguments(x, i))
        torch.testing.assert_close(got, fn(x, i))


def test_a_gather_of_fewer_rows_than_its_table_holds_by_torchs_check() -> None:
    """`torch.gather` with indices of their own size symbols: torch checks the indices are no
    larger than the input outside the gathered dim, which the table keeps as a condition
    (`le(s58, s77)`); the gather verifies by it and matches eager at every size."""

    def fn(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return torch.gather(x, 1, i) * 2

    dims = {"x": {0: Dim.AUTO, 1: Dim.AUTO}, "i": {0: Dim.AUTO, 1: Dim.AUTO}}
    program = import_module(
        fn, (torch.randn(6, 4), torch.randint(0, 4, (5, 3))), dynamic_shapes=dims
    )
    table = program.function.attributes[SIZES_ATTR]
    assert [c.kind for c in table.conditions] == ["le"]
    for rows, width, n, k in [(6, 4, 5, 3), (9, 3, 2, 7), (4, 4, 4, 2)]:
        x, i = torch.randn(rows, width), torch.randint(0, width, (n, k))
        [got] = interpret(program.module, program.arguments(x, i))
        torch.testing.assert_close(got, fn(x, i))


@pytest.mark.parametrize("n", [2, 5])
def test_a_concatenation_along_an_inner_symbolic_dim_names_the_sum(n: int) -> None:
    """A concatenation along a symbolic dim of a tensor with other symbolic dims: the result
    names the table's symbol of the sum there, and each other dim's own symbol."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x.exp()], 2) * 2

    shapes = {"x": {0: Dim("b", min=2, max=64), 2: Dim("h", min=2, max=64), 3: Dim("w", max=64)}}
    program = import_module(f, (torch.randn(3, 4, 6, 5),), dynamic_shapes=shapes)
    table = program.function.attributes[SIZES_ATTR]
    assert isinstance(table, graph.SizesAttr)
    b, h, w = (s.name for s in table.inputs())
    doubled = table.symbol_for(graph.SizeExpr.symbol(h).scale(2))
    [concat] = [op for op in program.function.body.block.ops if isinstance(op, graph.ConcatOp)]
    assert graph.dims_of(concat.result) == (b, 4, doubled, w)
    x = torch.randn(n, 4, n + 1, 7)
    [got] = interpret(program.module, program.arguments(x))
    torch.testing.assert_close(got, f(x))


@pytest.mark.parametrize("dims", [(0,), (0, 1), ()])
def test_a_roll_of_a_symbolic_dim_keeps_its_shift(dims: tuple[int, ...]) -> None:
    """`graph.roll` has no rule for symbolic sizes: a roll along a symbolic dim (or of the
    flattened tensor) is torch's own call, not dropped as a roll of a size-1 dim would be."""

    def f(x: torch.Tensor) -> torch.Tensor:
        shifts = [1 + d for d in dims] if dims else 3
        return torch.roll(x.exp(), shifts, dims) * 2

    shapes = {"x": {0: Dim("b", min=2, max=64)}}
    program = import_module(f, (torch.randn(5, 6),), dynamic_shapes=shapes)
    for n in (2, 7):
        x = torch.randn(n, 6)
        [got] = interpret(program.module, program.arguments(x))
        torch.testing.assert_close(got, f(x))


@pytest.mark.parametrize(
    ("offset", "dim1", "dim2", "symbolic"),
    [(0, -2, -1, 1), (1, 1, 2, 3), (-2, 2, 1, 3), (0, 1, 3, 2)],
)
def test_a_diagonal_of_static_dims_keeps_the_symbolic_batch(
    offset: int, dim1: int, dim2: int, symbolic: int
) -> None:
    """A diagonal whose two dims are static and whose other dims are symbolic (the batch,
    and one more): the symbolic dims are sliced whole, the result names their symbols, and
    the program matches eager's diagonal at every size, interpreted and compiled."""
    import xfuse

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.diagonal(x * 2, offset, dim1, dim2) + 1

    shapes = {"x": {0: Dim("b", min=2, max=64), symbolic: Dim("s", min=2, max=64)}}
    example = torch.randn(3, 5, 4, 6)
    program = import_module(f, (example,), dynamic_shapes=shapes)
    compiled = xfuse.compile(f, (example,), dynamic_shapes=shapes)
    for b, n in [(2, 7), (9, 3)]:
        shape = list(example.shape)
        shape[0], shape[symbolic] = b, n
        x = torch.randn(shape)
        [got] = interpret(program.module, program.arguments(x))
        torch.testing.assert_close(got, f(x))
        torch.testing.assert_close(compiled(x), f(x))


def position_gradient(grad: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """An embedding table's gradient as its backward computes it: `grad` rows added into
    zeros at `ids` (`index_put` with `accumulate=True`)."""
    table = torch.zeros(16, grad.shape[-1])
    return torch.ops.aten.index_put(table, [ids], grad, True) * 2


def row_scatter(x: torch.Tensor, ids: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    return torch.scatter_add(x, 1, ids, src) * 2


@pytest.mark.parametrize(
    ("fn", "example", "shapes", "at"),
    [
        (
            position_gradient,
            lambda b, t: (torch.randn(b, t, 4), torch.randint(0, 16, (b, t))),
            {"grad": {0: Dim.AUTO, 1: Dim.AUTO}, "ids": {0: Dim.AUTO, 1: Dim.AUTO}},
            [(2, 3), (4, 7), (3, 12)],
        ),
        (
            position_gradient,
            lambda b, t: (torch.randn(1, t, 4), torch.arange(t).unsqueeze(0)),
            {"grad": {1: Dim.AUTO}, "ids": {1: Dim.AUTO}},
            [(1, 2), (1, 9), (1, 16)],
        ),
        (
            row_scatter,
            lambda b, t: (torch.randn(b, 8), torch.randint(0, 8, (b, t)), torch.randn(b, t)),
            {
                "x": {0: Dim.AUTO},
                "ids": {0: Dim.AUTO, 1: Dim.AUTO},
                "src": {0: Dim.AUTO, 1: Dim.AUTO},
            },
            [(2, 3), (4, 7), (3, 20)],
        ),
    ],
)
def test_a_scatter_over_a_symbolic_count_of_indices_is_torchs_call(
    fn: Any, example: Any, shapes: dict[str, Any], at: list[tuple[int, int]]
) -> None:
    """An `index_put` or `scatter_add` whose indices have symbolic sizes (an embedding's
    gradient over every token) is torch's call, which runs at each call's sizes: the search
    the importer makes of a scatter unrolls over a static count of indices. It matches eager
    at every size, duplicates accumulated."""
    program = import_module(fn, example(3, 5), dynamic_shapes=shapes)
    [call] = [op for op in program.function.body.block.ops if isinstance(op, graph.TorchCallOp)]
    assert any(graph.is_symbolic(v) for v in call.operands)
    for b, t in at:
        inputs = example(b, t)
        [got] = interpret(program.module, program.arguments(*inputs))
        torch.testing.assert_close(got, fn(*inputs))


def fills(x: torch.Tensor) -> torch.Tensor:
    return torch.full(x.shape, 3.0) + x.new_zeros(x.shape) - x


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x[:, :0] * 2, x + 1),
        lambda x: (x.new_zeros(x.shape[0], 0).exp() + 1, x.sum(1)),
    ],
)
def test_an_empty_result_of_symbolic_sizes_is_a_broadcast_scalar(fn: Any) -> None:
    """An op whose result has a static dim of 0 beside size symbols folds to a 0-d constant
    broadcast to its dims (`fold_empty_results`: `graph.constant` takes static sizes only),
    and the program matches eager at every size."""
    program = import_module(fn, (torch.randn(4, 5),), dynamic_shapes={"x": {0: Dim.AUTO}})
    assert any(
        isinstance(op, graph.BroadcastInDimOp) and graph.is_symbolic(op.result)
        for op in program.function.body.block.ops
    )
    for n in (3, 7):
        x = torch.randn(n, 5)
        got = interpret(program.module, program.arguments(x))
        for g, w in zip(got, fn(x), strict=True):
            torch.testing.assert_close(g, w)


def test_a_fill_of_symbolic_sizes_is_a_broadcast_scalar() -> None:
    """`full` and `new_zeros` of a symbolic shape import as a 0-d constant broadcast to it
    (`graph.constant` takes static sizes only), and match eager at every size."""
    program = import_module(
        fills, (torch.randn(3, 5, 4),), dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}}
    )
    ops = program.function.body.block.ops
    assert (
        sum(isinstance(op, graph.BroadcastInDimOp) and graph.is_symbolic(op.result) for op in ops)
        == 2
    )
    for b, t in ((2, 3), (4, 7)):
        x = torch.randn(b, t, 4)
        [got] = interpret(program.module, program.arguments(x))
        torch.testing.assert_close(got, fills(x))


def test_an_equality_the_trace_checked_is_a_relation_of_the_table() -> None:
    """`torch._check(a0 * a1 == b0 * b1)` guards torch.export's trace on an equality of four
    input symbols: the table holds it as a relation, so that the two flattenings name one
    symbol and their sum verifies; the interpreter refuses sizes that break it."""

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        torch._check(a.shape[0] * a.shape[1] == b.shape[0] * b.shape[1])
        return a.reshape(-1) + b.reshape(-1)

    dims = {"a": {0: Dim("a0"), 1: Dim("a1")}, "b": {0: Dim("b0"), 1: Dim("b1")}}
    program = import_module(f, (torch.randn(2, 6), torch.randn(3, 4)), dynamic_shapes=dims)
    function = program.function
    table = function.attributes[SIZES_ATTR]
    assert isinstance(table, graph.SizesAttr)
    (relation,) = table.relations
    a0, a1, b0, b1 = (s.name for s in table.inputs())
    assert relation == graph.SizeRelation(
        tuple(sorted((b0, b1))), graph.SizeExpr.of([((a0, a1), 1)])
    )
    (result,) = function.function_type.outputs.data
    assert graph.dims_of(result) == (table.symbol_for(graph.SizeExpr.of([((b0, b1), 1)])),)
    assert str(parse(str(program.module))) == str(program.module)
    a, b = torch.randn(4, 3), torch.randn(2, 6)
    torch.testing.assert_close(interpret(program.module, [a, b])[0], f(a, b))
    with pytest.raises(Exception, match="differ"):
        interpret(program.module, [torch.randn(4, 3), torch.randn(2, 5)])


def test_an_equality_over_symbols_the_trace_replaced_relates_the_inputs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sum of two flattenings guards torch.export's trace on `Eq(a0*a1, b0*b1)` over the
    symbols `a`'s dims had then; the sum with `c` then equates `a`'s dims with `c`'s, and
    the trace replaces `a`'s symbols by `c`'s, in the fake values but not in the guard. Read
    through the replacements, the guard relates the input symbols: the program imports as
    exported (no `run_decompositions`), the flattenings name one symbol, and the interpreter
    refuses sizes that break the relation."""
    from xfuse.frontend.importer import import_program, needs_decomposition, wrap_function

    def f(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> list[torch.Tensor]:
        return [a.reshape(-1) + b.reshape(-1), a + c]

    auto = {0: Dim.AUTO, 1: Dim.AUTO}
    examples = (torch.randn(2, 6), torch.randn(3, 4), torch.randn(2, 6))
    exported = torch.export.export(
        wrap_function(f), examples, dynamic_shapes={"a": auto, "b": auto, "c": auto}
    )
    placeholders = [n for n in exported.graph.nodes if n.op == "placeholder"]
    env = placeholders[0].meta["val"].shape[0].node.shape_env
    held = {
        x for n in placeholders for size in n.meta["val"].shape for x in size.node.expr.free_symbols
    }
    stale = [
        g.expr for g in env.guards if g.expr.free_symbols - held and len(g.expr.free_symbols) == 4
    ]
    assert stale, "the premise: a guard over symbols the trace replaced"
    assert not needs_decomposition(exported, symbolic=True)
    decomposed: list[object] = []
    monkeypatch.setattr(
        torch.export.ExportedProgram, "run_decompositions", lambda *a, **k: decomposed.append(a)
    )
    program = import_program(exported, symbolic=True)
    assert not decomposed
    table = program.function.attributes[SIZES_ATTR]
    assert isinstance(table, graph.SizesAttr)
    a0, a1, b0, b1 = (s.name for s in table.inputs())
    (relation,) = table.relations
    products = {graph.SizeExpr.of([(tuple(sorted(pair)), 1)]) for pair in ((a0, a1), (b0, b1))}
    assert {relation.lhs_expr, relation.rhs} == products
    (result, _) = program.function.function_type.outputs.data
    assert graph.dims_of(result) == (table.symbol_for(relation.rhs),)
    a, b, c = torch.randn(4, 3), torch.randn(2, 6), torch.randn(4, 3)
    for got, expected in zip(interpret(program.module, [a, b, c]), f(a, b, c), strict=True):
        torch.testing.assert_close(got, expected)
    with pytest.raises(Exception, match="differ"):
        interpret(program.module, [a, torch.randn(2, 5), c])


def test_inequalities_the_trace_assumed_are_conditions_of_the_table() -> None:
    """`torch._check(b0 <= 2 * a1 - 1)` guards torch.export's trace on an inequality of two
    input symbols: the table holds it as a condition, which the interpreter checks."""

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        torch._check(b.shape[0] <= 2 * a.shape[1] - 1)
        return a.sum(1) + b.sum()

    dims = {"a": {1: Dim("a1")}, "b": {0: Dim("b0")}}
    program = import_module(f, (torch.randn(2, 8), torch.randn(5)), dynamic_shapes=dims)
    table = program.function.attributes[SIZES_ATTR]
    assert isinstance(table, graph.SizesAttr)
    a1, b0 = (s.name for s in table.inputs())
    two_a1 = graph.SizeExpr.symbol(a1).scale(2)
    assert (
        graph.SizeCondition("le", graph.SizeExpr.symbol(b0), two_a1 - graph.SizeExpr.constant(1))
        in table.conditions
    )
    assert str(parse(str(program.module))) == str(program.module)
    a, b = torch.randn(2, 5), torch.randn(9)
    torch.testing.assert_close(interpret(program.module, [a, b])[0], f(a, b))
    with pytest.raises(Exception, match=rf"{b0} <= 2 \* {a1} - 1 does not hold at"):
        interpret(program.module, [torch.randn(2, 5), torch.randn(10)])


def test_a_guard_the_table_cannot_hold_is_refused_at_import() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        torch._check(a.shape[0] % b.shape[0] == 0)
        return a.sum(0) + b.sum(0)

    dims = {"a": {0: Dim("a0")}, "b": {0: Dim("b0")}}
    with pytest.raises(SymbolicSizeError, match=r"assumed Eq\(Mod\(s\d+, s\d+\), 0\), which is no"):
        import_module(f, (torch.randn(6, 4), torch.randn(3, 4)), dynamic_shapes=dims)


class GuardsOnly:
    """A shape environment with the guards `exprs` and nothing to replace."""

    def __init__(self, *exprs: Any) -> None:
        self.guards = [type("Guard", (), {"expr": e})() for e in exprs]

    def simplify(self, expr: Any) -> Any:
        return expr


def test_a_guard_on_a_floor_division_the_program_holds_is_a_condition_of_it() -> None:
    import sympy
    from torch.utils._sympy.functions import FloorDiv

    from xfuse.frontend.builder import SizeSymbols

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    symbols = SizeSymbols()
    symbols.inputs += [graph.SizeSymbol.input("s0", 0, 0, 9), graph.SizeSymbol.input("s1", 1, 0, 4)]
    e0 = graph.SizeSymbol.floordiv(
        "e0", graph.SizeExpr.symbol("s0") + graph.SizeExpr.constant(1), 2
    )
    symbols.derived.append(e0)
    guards = (sympy.Le(FloorDiv(s0 + 1, 2), s1), sympy.Ge(s0, s1 + 2))
    # e0 != 1 holds wherever e0 is a size (2 or more): no condition.
    symbols.add_conditions(GuardsOnly(*guards, sympy.Ne(FloorDiv(s0 + 1, 2), 1)))
    e, a, b = (graph.SizeExpr.symbol(name) for name in ("e0", "s0", "s1"))
    assert symbols.conditions == [
        graph.SizeCondition("le", e, b),
        graph.SizeCondition("le", b + graph.SizeExpr.constant(2), a),
    ]
    assert symbols.table().problem is None
    with pytest.raises(SymbolicSizeError, match=r"assumed .*s0 \+ 3.*//4.* >= 2, which is no"):
        symbols.add_conditions(GuardsOnly(sympy.Ge(FloorDiv(s0 + 3, 4), 2)))


def test_a_guard_its_symbols_range_implies_is_no_condition() -> None:
    """A guard on one symbol that holds over the symbol's range repeats the range (checked at
    every call): no condition. One the range does not imply, and one on two symbols, are."""
    import sympy

    from xfuse.frontend.builder import SizeSymbols

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    symbols = SizeSymbols()
    symbols.inputs += [
        graph.SizeSymbol.input("s0", 0, 0, 9, 2, 512),
        graph.SizeSymbol.input("s1", 1, 0, 4, 3),
    ]
    repeated = (sympy.Le(s0, 512), sympy.Gt(s0, 1), sympy.Ne(s0, 600), sympy.Ge(s1, 3))
    kept = (sympy.Le(s0, 511), sympy.Ne(s0, 7), sympy.Ne(s0, s1), sympy.Le(2 * s0, s1))
    symbols.add_conditions(GuardsOnly(*repeated, *kept))
    a, b = graph.SizeExpr.symbol("s0"), graph.SizeExpr.symbol("s1")
    assert symbols.conditions == [
        graph.SizeCondition("le", a, graph.SizeExpr.constant(511)),
        graph.SizeCondition("ne", a, graph.SizeExpr.constant(7)),
        graph.SizeCondition("ne", a, b),
        graph.SizeCondition("le", a.scale(2), b),
    ]


def test_a_minimum_or_remainder_that_sizes_decide_is_its_polynomial() -> None:
    """Guards AOTAutograd's traces hold (`Min(s0, s1 * s0) == s0`, `Mod(s0, s1 * s0) != 0`)
    hold at every size of 2 or more: they are no condition; one sizes do not decide is
    refused."""
    import sympy
    from torch.utils._sympy.functions import Max, Min, Mod

    from xfuse.frontend.builder import SizeSymbols

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    symbols = SizeSymbols()
    symbols.inputs += [graph.SizeSymbol.input("s0", 0, 0, 9), graph.SizeSymbol.input("s1", 1, 0, 4)]
    symbols.add_conditions(
        GuardsOnly(sympy.Eq(Min(s0, s1 * s0), s0), sympy.Ne(Mod(s0, s1 * s0), 0))
    )
    assert symbols.conditions == []
    symbols.add_conditions(GuardsOnly(sympy.Le(Max(s0, s0 * s1), s1 * s1)))
    expected = graph.SizeExpr.symbol("s0") * graph.SizeExpr.symbol("s1")
    square = graph.SizeExpr.symbol("s1") * graph.SizeExpr.symbol("s1")
    assert symbols.conditions == [graph.SizeCondition("le", expected, square)]
    with pytest.raises(SymbolicSizeError, match=r"assumed Eq\(Min\(s0, s1\), s0\), which is no"):
        symbols.add_conditions(GuardsOnly(sympy.Eq(Min(s0, s1), s0)))


def test_a_guard_that_holds_with_its_remainders_bounded_is_no_condition() -> None:
    """`s0**2 - s0*Mod(s0, 8) + 8*s0 > 1` (the elements of an attention mask padded to a
    multiple of 8, as CUDA's efficient attention pads it) holds at every size: no condition,
    no refusal. One that fails at the range's low end, or whose remainder's term may shrink
    it, is still refused."""
    import sympy
    from torch.utils._sympy.functions import Mod

    from xfuse.frontend.builder import SizeSymbols

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    symbols = SizeSymbols()
    symbols.inputs += [graph.SizeSymbol.input("s0", 0, 0, 9), graph.SizeSymbol.input("s1", 1, 0, 4)]
    padded = s0**2 - s0 * Mod(s0, 8) + 8 * s0
    holding = (sympy.Gt(padded, 1), sympy.Ge(s1 * padded, 16), sympy.Lt(Mod(s0, 8), s0 + 8))
    assert all(symbols.holds_at_every_size(g) for g in holding)
    symbols.add_conditions(GuardsOnly(*holding))
    assert symbols.conditions == []
    failing = (
        sympy.Gt(padded, 16),  # 16 at s0 = 2
        sympy.Gt(s0 - Mod(s0, 8), 0),  # 0 at s0 = 2..7
    )
    assert not any(symbols.holds_at_every_size(g) for g in failing)
    for guard in failing:
        with pytest.raises(SymbolicSizeError, match="which is no comparison"):
            symbols.add_conditions(GuardsOnly(guard))
    # 1 at s1 = 7: not at every size, but where s1 < 8 (the trace's s1 = 4), `Mod(s1, 8)`
    # is s1: the guard holds under two conditions of the table.
    picked = sympy.Gt(8 - Mod(s1, 8), 1)
    assert not symbols.holds_at_every_size(picked)
    symbols.add_conditions(GuardsOnly(picked))
    b, eight = graph.SizeExpr.symbol("s1"), graph.SizeExpr.constant(8)
    assert symbols.conditions == [
        graph.SizeCondition("lt", b, eight),
        graph.SizeCondition("lt", graph.SizeExpr.constant(1), eight - b),
    ]


def test_a_guard_that_holds_from_its_symbols_lows_is_no_condition() -> None:
    """A guard whose terms of negative coefficient the symbols' lows outgrow holds: with each
    symbol written its range's start plus a size of 0 or more, `s0**2 + 2 >= 3*s0` is
    `t**2 + t >= 0` (s0 = 2 + t) and `s0*s1 >= s0 + s1 + Mod(s0, 8)` with s1 from 4 is
    `t*u + u + 2*t + 8*q >= 0` (s0 = 2 + t, s1 = 4 + u, Mod(s0, 8) = s0 - 8*q).
    Sizes below a range's start do not count: the same guard with s1 from 2 is still a
    condition."""
    import sympy
    from torch.utils._sympy.functions import Mod

    from xfuse.frontend.builder import SizeSymbols

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    symbols = SizeSymbols()
    symbols.inputs += [
        graph.SizeSymbol.input("s0", 0, 0, 9),
        graph.SizeSymbol.input("s1", 1, 0, 9, low=4),
    ]
    square = sympy.Ge(s0**2 + 2, 3 * s0)
    product = sympy.Ge(s0 * s1, s0 + s1 + Mod(s0, 8))
    assert symbols.holds_at_every_size(square)
    assert symbols.holds_at_every_size(product)
    symbols.add_conditions(GuardsOnly(square, product))
    assert symbols.conditions == []
    from_two = SizeSymbols()
    from_two.inputs += [
        graph.SizeSymbol.input("s0", 0, 0, 9),
        graph.SizeSymbol.input("s1", 1, 0, 4),
    ]
    assert not from_two.holds_at_every_size(product)  # -2 at s0 = s1 = 2
    assert not from_two.holds_at_every_size(sympy.Ge(s0**2 + 1, 3 * s0))  # -1 at s0 = 2


def test_size_computations_are_imported_without_decomposing() -> None:
    """A symbolic export's size computations (`sym_size`, arithmetic of sizes) have no graph
    value: a program of them and of mapped ops is imported as torch.export gives it."""
    from xfuse.frontend.importer import needs_decomposition, wrap_function

    def f(x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0] * x.shape[1]) * 2

    exported = torch.export.export(
        wrap_function(f), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("n", min=2)}}
    )
    targets = [str(n.target) for n in exported.graph.nodes if n.op == "call_function"]
    assert "aten.sym_size.int" in targets
    assert needs_decomposition(exported)  # a static import does not read sizes
    assert not needs_decomposition(exported, symbolic=True)
    program = import_module(f, (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("n", min=2)}})
    x = torch.randn(7, 3)
    torch.testing.assert_close(interpret(program.module, [x])[0], f(x))


def test_a_remainder_is_the_size_less_a_multiple_of_its_floor_division() -> None:
    """`Mod(s0, 8)` in a size is `s0 - 8 * (s0 floordiv 8)`, its floor division a symbol of the
    table; a guard on a remainder whose floor division the table holds is a condition on it;
    a floor division by a size that divides it exactly is their quotient; `Max(0, 1 - s0)` is 0,
    as every size of 2 or more decides it."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv

    from xfuse.frontend.builder import SizeSymbols

    s0 = sympy.symbols("s0", integer=True, positive=True)
    symbols = SizeSymbols()
    symbols.inputs.append(graph.SizeSymbol.input("s0", 0, 0, 37))
    node = torch.fx.Graph().placeholder("x")
    a = graph.SizeExpr.symbol("s0")
    cut = symbols.polynomial(s0 - sympy.Mod(s0, 8), node)
    (e0,) = symbols.derived
    assert (e0.expr, e0.divisor) == (a, 8)
    assert cut == graph.SizeExpr.symbol(e0.name).scale(8)
    assert symbols.polynomial(FloorDiv(s0 - sympy.Mod(s0, 8), FloorDiv(s0, 8)), node) == (
        graph.SizeExpr.constant(8)
    )
    assert symbols.polynomial(FloorDiv(3 * s0**2 + s0, s0), node) == a.scale(3) + (
        graph.SizeExpr.constant(1)
    )
    assert symbols.polynomial(sympy.Max(0, 1 - s0), node) == graph.SizeExpr()
    symbols.add_conditions(GuardsOnly(sympy.Ne(sympy.Mod(s0, 8), 0)))
    assert symbols.conditions == [
        graph.SizeCondition("ne", a - graph.SizeExpr.symbol(e0.name).scale(8), graph.SizeExpr())
    ]
    with pytest.raises(SymbolicSizeError, match="no comparison of polynomials"):
        symbols.add_conditions(GuardsOnly(sympy.Ne(sympy.Mod(s0, 5), 0)))


def test_a_maximum_sizes_do_not_decide_is_the_traced_pick_under_a_condition() -> None:
    """`Max(0, 48 - s0)` at a trace where s0 is 37 is `48 - s0`, with the condition
    `0 <= 48 - s0` of the table (checked at each call); a guard on the same maximum then
    reads it so; `Min(s0, 2 * s1)` of another symbol, at sizes that pick `s0`, likewise."""
    import sympy

    from xfuse.frontend.builder import SizeSymbols

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    symbols = SizeSymbols()
    symbols.inputs += [
        graph.SizeSymbol.input("s0", 0, 0, 37),
        graph.SizeSymbol.input("s1", 1, 0, 30),
    ]
    node = torch.fx.Graph().placeholder("x")
    a, b = graph.SizeExpr.symbol("s0"), graph.SizeExpr.symbol("s1")
    rest = graph.SizeExpr.constant(48) - a
    assert symbols.polynomial(sympy.Max(0, 48 - s0), node) == rest
    assert symbols.polynomial(sympy.Min(s0, 2 * s1), node) == a
    assert symbols.conditions == [
        graph.SizeCondition("le", graph.SizeExpr(), rest),
        graph.SizeCondition("le", a, b.scale(2)),
    ]
    symbols.add_conditions(GuardsOnly(sympy.Ne(48 - sympy.Max(0, 48 - s0), 48)))
    assert symbols.conditions[2:] == [graph.SizeCondition("ne", a, graph.SizeExpr.constant(48))]


def _two_inputs(hint0: int, hint1: int) -> Any:
    from xfuse.frontend.builder import SizeSymbols

    symbols = SizeSymbols()
    symbols.inputs += [
        graph.SizeSymbol.input("s0", 0, 0, hint0),
        graph.SizeSymbol.input("s1", 1, 0, hint1),
    ]
    return symbols


def test_a_disjunction_holds_by_the_part_the_trace_took() -> None:
    """A guard that is a disjunction (a layout check `Eq(numel, 0) | (...)`) holds by the
    conditions of its first part that holds at the trace's sizes and that the table can hold;
    a conjunction by all of its parts'; one whose parts all fail at the trace's sizes is
    refused."""
    import sympy

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    symbols = _two_inputs(3, 5)
    guard = sympy.Or(
        sympy.Eq(s0 - s1, 4),
        sympy.And(sympy.Or(sympy.Eq(s1, 1), sympy.Le(s0, s1)), sympy.Ne(s0, 7)),
    )
    symbols.add_conditions(GuardsOnly(guard))
    a, b = graph.SizeExpr.symbol("s0"), graph.SizeExpr.symbol("s1")
    assert len(symbols.conditions) == 2 and set(symbols.conditions) == {
        graph.SizeCondition("le", a, b),
        graph.SizeCondition("ne", a, graph.SizeExpr.constant(7)),
    }
    with pytest.raises(SymbolicSizeError, match="a disjunction none of whose parts"):
        symbols.add_conditions(GuardsOnly(sympy.Or(sympy.Eq(s0, 4), sympy.Eq(s1, 4))))


def test_extremes_and_remainders_in_guards_are_the_traced_picks_under_conditions() -> None:
    """In a guard, a minimum of three sides is taken pairwise, each pair sizes do not decide
    as the trace's sizes pick it (`Min(s0, s1)` is `s0` where `s0 <= s1`), and a remainder
    `Mod(p, q)` with `0 <= p < q` at the trace's sizes is `p` (a batch's remainder by a
    batch times a window count), each with the conditions that keep the pick; a guard that
    does not hold at the trace's sizes is refused, picks or not."""
    import sympy
    from torch.utils._sympy.functions import Min, Mod

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    symbols = _two_inputs(3, 5)
    symbols.add_conditions(
        GuardsOnly(sympy.Eq(Min(s0, s1, s0 * s1), s0), sympy.Ne(Mod(s0, s0 * s1 - s1), 0))
    )
    a, b = graph.SizeExpr.symbol("s0"), graph.SizeExpr.symbol("s1")
    assert symbols.conditions == [
        graph.SizeCondition("le", a, b),
        graph.SizeCondition("lt", a, a * b - b),
    ]
    with pytest.raises(SymbolicSizeError, match="which is no comparison"):
        _two_inputs(3, 5).add_conditions(GuardsOnly(sympy.Eq(Min(s0, s1), s1)))


def test_sizes_divided_by_polynomials_and_by_sizes_that_are_numbers() -> None:
    """`Mod(s0*s1 - s1, s0 - 1)` is 0 (`s0 - 1` divides it: the quotient `s1`), and
    `4 * s0 // (2 * s1 // s1)` is `2 * s0` (a divisor that is a number at every size): guards
    on them hold at every size, no condition and no refusal."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv, Mod

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    symbols = _two_inputs(3, 5)
    symbols.add_conditions(
        GuardsOnly(
            sympy.Eq(Mod(s0 * s1 - s1, s0 - 1), 0),
            sympy.Le(FloorDiv(4 * s0, FloorDiv(2 * s1, s1)), s0 * s1),
        )
    )
    assert symbols.conditions == []


def test_a_rounded_up_half_is_the_size_less_its_known_half() -> None:
    """`(s0 + 1) // 2` where the table knows `s0 // 2` (e0) is `s0 - e0`
    (`graph.complement_floordiv`: floor(n / k) = -floor((k - 1 - n) / k)): one symbol for
    both halves of a patch merging, no new floor division."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    symbols = _two_inputs(9, 5)
    a, b = graph.SizeExpr.symbol("s0"), graph.SizeExpr.symbol("s1")
    symbols.derived.append(graph.SizeSymbol.floordiv("e0", a, 2))
    symbols.add_conditions(GuardsOnly(sympy.Le(FloorDiv(s0 + 1, 2), s1)))
    assert symbols.conditions == [graph.SizeCondition("le", a - graph.SizeExpr.symbol("e0"), b)]
    whole, other, d = graph.complement_floordiv(a + graph.SizeExpr.constant(1), 2, {})
    assert (whole, other, d) == (a.scale(-1), a, 2)


def test_a_length_the_guards_hold_at_one_value_is_that_value_within_a_narrowed_range() -> None:
    """A pooling whose window is wider than its map (`avg_pool2d(x, 1280, ceil_mode=True)`)
    gives lengths of 1 that the trace's guards hold (`Eq(((s - 1)//1280) + 1, 1)`, which no
    input range implies): each image symbol's range ends at the last size where its guard holds,
    so that the flatten after it is a static view, and a call past the range is refused."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, 1280, ceil_mode=True).flatten(1) * 2

    auto = {0: Dim.AUTO, 2: Dim.AUTO, 3: Dim.AUTO}
    program = import_module(f, (torch.randn(2, 3, 64, 80),), dynamic_shapes={"x": auto})
    table = program.function.attributes[SIZES_ATTR]
    assert isinstance(table, graph.SizesAttr)
    images = [s for s in table.inputs() if s.source[1] in (2, 3)]
    assert len(images) == 2 and all(s.high is not None for s in images)
    for s in images:  # the last size of one pooled length, eager's own edge
        shape = [1, 1, 4, 4]
        shape[s.source[1]] = s.high
        assert F.avg_pool2d(torch.zeros(shape), 1280, ceil_mode=True).shape[s.source[1]] == 1
        shape[s.source[1]] = s.high + 1
        assert F.avg_pool2d(torch.zeros(shape), 1280, ceil_mode=True).shape[s.source[1]] == 2
    (result,) = program.function.function_type.outputs.data
    assert graph.dims_of(result)[1] == 3
    for shape in ((3, 3, 40, 1000), (2, 3, 1280, 7)):
        x = torch.randn(shape)
        (got,) = interpret(program.module, program.arguments(x))
        torch.testing.assert_close(got, f(x))
