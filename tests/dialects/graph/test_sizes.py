"""Symbolic sizes in the graph dialect (xfuse/dialects/graph/sizes.py and the symbolic checks
of xfuse/dialects/graph/base.py): polynomials, the table, types, and ops built in Python."""

from __future__ import annotations

import pytest
import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp, TensorType, f32
from xdsl.ir import Block, Region
from xdsl.utils.exceptions import ParseError, VerifyException

from xfuse.dialects import graph
from xfuse.dialects.graph import SizeExpr, SizesAttr, SizeSymbol, SymsAttr
from xfuse.ir.context import parse
from xfuse.ir.names import SIZES_ATTR

s0, s1 = SizeExpr.symbol("s0"), SizeExpr.symbol("s1")


def test_polynomials_are_canonical() -> None:
    assert s0 + s1 == s1 + s0
    assert (s0 + s1) * (s0 - s1) == s0 * s0 - s1 * s1
    assert (s0 * SizeExpr.constant(8)).scale(1) == s0.scale(8)
    assert (s0 - s0).as_constant == 0
    assert str(s0 * s1.scale(2) + SizeExpr.constant(3) - s0) == "2 * s0 * s1 - s0 + 3"
    assert str(SizeExpr.constant(-4) - s0) == "-s0 - 4"
    assert (s0 * s1 + s0).evaluate({"s0": 3, "s1": 5}) == 18


def test_table_expands_derived_symbols() -> None:
    table = SizesAttr(
        (
            SizeSymbol.input("s0", 0, 0, hint=4),
            SizeSymbol.input("s1", 1, 0, hint=3, high=64),
            SizeSymbol.derived("s2", s0.scale(8)),
            SizeSymbol.derived("s3", SizeExpr.symbol("s2") + s1),
        )
    )
    assert table.problem is None
    assert table.expand(SizeExpr.symbol("s3")) == s0.scale(8) + s1
    assert table.hints == {"s0": 4, "s1": 3, "s2": 32, "s3": 35}
    assert table.symbol_for(s1 + s0.scale(8)) == "s3"
    assert table.symbol_for(s0 * s1) is None
    assert table.evaluate({"s0": 2, "s1": 5})["s3"] == 21
    assert [s.name for s in table.inputs()] == ["s0", "s1"]


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ((SizeSymbol.input("s0", 0, 0, hint=1),), "hint 1 outside its range [2, inf]"),
        ((SizeSymbol.input("s0", 0, 0, hint=4, low=1),), "a symbol's range starts at 2"),
        (
            (SizeSymbol.input("s0", 0, 0, hint=4), SizeSymbol.derived("s1", s0 + s0 - s0)),
            "'s0' and 's1' are the same size (s0)",
        ),
        ((SizeSymbol.derived("s1", s0),), "uses 's0', which is not defined before it"),
    ],
)
def test_table_problems(entries: tuple[SizeSymbol, ...], message: str) -> None:
    problem = SizesAttr(entries).problem
    assert problem is not None and message in str(problem)


def test_types_name_their_symbols() -> None:
    t = graph.tensor_of(f32, ["s0", 8, "s1"])
    assert t == TensorType(f32, [DYNAMIC_INDEX, 8, DYNAMIC_INDEX], SymsAttr(("s0", "s1")))
    assert graph.dims_of(t) == ("s0", 8, "s1")
    assert graph.is_symbolic(t)
    # A static shape is the plain type, as before.
    assert graph.tensor_of(f32, [4, 8]) == TensorType(f32, [4, 8])
    assert not graph.is_symbolic(TensorType(f32, [4, 8]))


def test_types_of_one_shape_are_one_instance() -> None:
    # Attributes are immutable values: one is built (and verified) per dtype and dims.
    assert graph.tensor_of(f32, [4, 8]) is graph.tensor_of(f32, (4, 8))
    assert graph.tensor_of(f32, ["s0", 8]) is graph.tensor_of(f32, ["s0", 8])
    assert graph.tensor_of(f32, ["s0", 8]) != graph.tensor_of(f32, ["s1", 8])
    assert graph.tensor_of(f32, [-1, 8]) == TensorType(f32, [DYNAMIC_INDEX, 8])


def test_broadcasting_of_symbols() -> None:
    assert graph.broadcast_shapes(("s0", 8), (8,)) == ("s0", 8)
    assert graph.broadcast_shapes(("s0", 1), (1, "s1")) == ("s0", "s1")
    assert graph.broadcast_shapes(("s0", 8), ("s0", 8)) == ("s0", 8)
    assert graph.broadcast_shapes(("s0",), ("s1",)) is None
    assert graph.broadcast_shapes(("s0",), (4,)) is None


def function_of(types: list[TensorType], table: SizesAttr) -> tuple[func.FuncOp, Block]:
    block = Block(arg_types=types)
    function = func.FuncOp("f", (types, []), Region(block))
    function.attributes[SIZES_ATTR] = table
    return function, block


def test_ops_built_in_python_carry_symbols() -> None:
    table = SizesAttr(
        (
            SizeSymbol.input("s0", 0, 0, hint=4),
            SizeSymbol.input("s1", 1, 0, hint=2),
            SizeSymbol.derived("s2", s0 + s1),
        )
    )
    x, y = graph.tensor_of(f32, ["s0", 8]), graph.tensor_of(f32, ["s1", 8])
    function, block = function_of([x, y], table)
    b = block.args[0]
    ops = [
        add := graph.AddOp(b, b),
        red := graph.ReduceSumOp(add, [1]),
        graph.CastOp(red, graph.dtype_of(b)),
        graph.PermuteOp(add, [1, 0]),
        graph.ConcatOp([add, block.args[1]], 0, "s2"),
        graph.IsNanOp(add),
    ]
    for op in ops:
        block.add_op(op)
    block.add_op(func.ReturnOp())
    ModuleOp([function]).verify()
    assert graph.dims_of(red.results[0]) == ("s0",)
    assert graph.dims_of(ops[3].results[0]) == (8, "s0")
    assert graph.dims_of(ops[4].results[0]) == ("s2", 8)
    # Without the result's symbol, the dim is `?` unnamed: the verifier refuses it.
    unnamed = graph.ConcatOp([add, block.args[1]], 0)
    block.insert_op_before(unnamed, block.last_op)  # pyright: ignore[reportArgumentType]
    with pytest.raises(VerifyException, match="expected result to have a static shape"):
        unnamed.verify()


def test_ops_without_symbolic_rules_refuse() -> None:
    text = """
    func.func @f(%x: tensor<?x4x9x9xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
      %0 = graph.pool %x kind = "max" kernel = [3, 3] stride = [2, 2] padding = [1, 1] dilation = [1, 1] : tensor<?x4x9x9xf32, #graph.syms<s0>> -> tensor<?x4x5x5xf32, #graph.syms<s0>>
      func.return
    }"""
    with pytest.raises(Exception, match="graph.pool does not take symbolic sizes yet"):
        parse(text)


PAD = """
    func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
      %0 = graph.pad %x low = [LOW, 1] high = [0, 1] mode = "constant" value = 0.0 : f64 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x10xf32, #graph.syms<s0>>
      func.return
    }"""


def test_a_pad_leaves_a_symbolic_dim_unpadded() -> None:
    module = parse(PAD.replace("LOW", "0"))
    pad = next(op for op in module.walk() if isinstance(op, graph.PadOp))
    assert graph.dims_of(pad.result) == ("s0", 10)
    assert graph.dims_of(graph.PadOp(pad.input, [0, 2], [0, 3]).result) == ("s0", 13)


def test_a_pad_of_a_symbolic_dim_needs_the_symbol_of_its_size() -> None:
    with pytest.raises(Exception, match="expected result dim 0 of size s0 \\+ 1, found s0"):
        parse(PAD.replace("LOW", "1"))


PADDED = """
    func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range [2, 64], e0 = s0 + 6>} {
      %0 = graph.pad %x low = [3, 0] high = [3, 0] mode = "constant" value = 0.0 : f64 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x8xf32, #graph.syms<e0>>
      %1 = graph.slice %0 START limit = [LIMIT, 8] stride = [STRIDE, 1] : tensor<?x8xf32, #graph.syms<e0>> -> tensor<?x8xf32, #graph.syms<RESULT>>
      func.return
    }"""


@pytest.mark.parametrize(
    ("start", "limit", "stride", "result"),
    [
        (0, -1, 1, "e0"),  # the whole padded dim
        (3, -4, 1, "s0"),  # the middle tap of a 7-wide window: the input's size again
        (0, -7, 1, "s0"),  # the first tap
        (6, -1, 1, "s0"),  # the last tap
    ],
)
def test_a_slice_from_a_symbolic_dims_end_has_the_symbol_of_its_length(
    start: int, limit: int, stride: int, result: str
) -> None:
    text = (
        PADDED.replace("START", f"start = [{start}, 0]")
        .replace("LIMIT", str(limit))
        .replace("STRIDE", str(stride))
        .replace("RESULT", result)
    )
    module = parse(text)
    sliced = next(op for op in module.walk() if isinstance(op, graph.SliceOp))
    assert graph.dims_of(sliced.result) == (result, 8)
    x = torch.arange(10 * 8).reshape(10, 8)  # s0 = 4: e0 = 10
    assert x[sliced.index].shape[0] == (4 if result == "s0" else 10)


def test_a_slice_of_the_wrong_length_is_refused() -> None:
    text = (
        PADDED.replace("START", "start = [3, 0]")
        .replace("LIMIT", "-3")
        .replace("STRIDE", "1")
        .replace("RESULT", "s0")
    )
    with pytest.raises(
        Exception, match="expected result dim 0 of size \\(e0 - 5\\) / 1 rounded up"
    ):
        parse(text)


def test_a_new_size_joins_the_table_once() -> None:
    table = parse(PAD.replace("LOW", "0")).body.block.first_op.attributes["graph.sizes"]
    assert isinstance(table, graph.SizesAttr)
    padded = graph.SizeExpr.symbol("s0") + graph.SizeExpr.constant(6)
    extended, name = table.with_size(padded)
    assert name == "e0" and str(extended.by_name["e0"]) == "e0 = s0 + 6"
    assert extended.with_size(padded) == (extended, "e0")  # known: the same symbol
    assert table.with_size(graph.SizeExpr.symbol("s0")) == (table, "s0")
    assert table.with_size(graph.SizeExpr.constant(3)) == (table, 3)


def test_static_messages_are_unchanged() -> None:
    text = """
    func.func @f(%x: tensor<?xf32>) {
      %0 = graph.neg %x : tensor<?xf32>
      func.return
    }"""
    with pytest.raises(Exception, match="expected operand to have a static shape"):
        parse(text)


def test_reshape_proves_element_counts() -> None:
    text = """
    func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = 4 * s0>} {
      %0 = graph.reshape %x : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x2xf32, #graph.syms<s1>>
      func.return
    }"""
    parse(text)
    with pytest.raises(Exception, match="not equal for every size of their symbols"):
        parse(text.replace("tensor<?x2xf32", "tensor<?x4xf32"))


def test_verify_exception_is_raised_for_a_bad_symbol_source() -> None:
    table = SizesAttr((SizeSymbol.input("s0", 0, 1, hint=4),))
    function, block = function_of([graph.tensor_of(f32, ["s0", 8])], table)
    block.add_op(graph.NegOp(block.args[0]))
    block.add_op(func.ReturnOp())
    with pytest.raises(VerifyException, match=r"read from input\(0, 1\)"):
        ModuleOp([function]).verify()


def test_ops_built_from_shape_of_keep_the_symbols() -> None:
    table = SizesAttr((SizeSymbol.input("s0", 0, 0, hint=4), SizeSymbol.derived("s1", s0.scale(8))))
    x, flat = graph.tensor_of(f32, ["s0", 8]), graph.tensor_of(f32, ["s1"])
    function, block = function_of([x, flat], table)
    shape = graph.shape_of(block.args[1])
    assert isinstance(shape, graph.SymbolicShape) and shape.dims == ("s1",)
    assert shape == graph.shape_of(block.args[1]) != graph.shape_of(block.args[0])
    reshaped = graph.ReshapeOp(block.args[0], shape)
    block.add_op(reshaped)
    block.add_op(func.ReturnOp())
    ModuleOp([function]).verify()
    assert reshaped.result.type == flat
    # Static shapes are plain tuples, as before.
    assert type(graph.shape_of(TensorType(f32, [4, 8]))) is tuple


# ---------------------------------------------------------------------------------------------
# Floor divisions
# ---------------------------------------------------------------------------------------------

ONE = SizeExpr.constant(1)


def floordiv_table() -> SizesAttr:
    return SizesAttr(
        (
            SizeSymbol.input("s0", 0, 2, hint=32, high=512),
            SizeSymbol.floordiv("s1", s0 + ONE, 2),
            SizeSymbol.floordiv("s2", s0 + SizeExpr.constant(3), 4),
            SizeSymbol.derived("s3", SizeExpr.symbol("s1") * SizeExpr.symbol("s1")),
        )
    )


def test_floordiv_symbols_print_and_parse_back() -> None:
    table = floordiv_table()
    text = str(table)
    assert "s1 = (s0 + 1) floordiv 2, s2 = (s0 + 3) floordiv 4, s3 = s1 * s1" in text
    module = parse(
        "func.func @f(%x: tensor<?xf32, #graph.syms<s0>>) attributes "
        f"{{graph.sizes = {text}}} {{\n  func.return\n}}"
    )
    function = next(iter(module.ops))
    assert isinstance(function, func.FuncOp)
    assert function.attributes[SIZES_ATTR] == table
    assert table.problem is None


def test_floordiv_symbols_evaluate_as_floor_divisions_and_are_atoms() -> None:
    table = floordiv_table()
    assert table.evaluate({"s0": 9}) == {"s0": 9, "s1": 5, "s2": 3, "s3": 25}
    assert table.hints == {"s0": 32, "s1": 16, "s2": 8, "s3": 256}
    # An atom: later polynomials use it as a variable, it expands to itself.
    assert table.expansions["s1"] == SizeExpr.symbol("s1")
    assert table.expansions["s3"] == SizeExpr.symbol("s1") * SizeExpr.symbol("s1")
    assert table.input_dependencies["s3"] == frozenset({"s0"})
    assert table.too_small(table.evaluate({"s0": 2})) == table.by_name["s1"]  # 3 // 2
    assert table.too_small(table.evaluate({"s0": 4})) == table.by_name["s2"]  # 7 // 4
    assert table.too_small(table.evaluate({"s0": 5})) is None


def test_size_symbols_outside_ir_parse_and_evaluate_over_given_sizes() -> None:
    """Entries of a table written outside IR (a CUDA launch line's work items): derived
    symbols of sizes given by name."""
    text = "q0 = (s0 + 1) floordiv 2, items = 2 * q0 * s1 - 1"
    symbols = graph.size_symbols_from_text(text)
    assert ", ".join(map(str, symbols)) == text
    assert graph.evaluate_sizes(symbols, {"s0": 9, "s1": 3}) == {"q0": 5, "items": 29}
    assert graph.size_symbols_from_text(str(floordiv_table())[len("#graph.sizes<") : -1]) == (
        floordiv_table().data
    )
    with pytest.raises(ParseError, match="end of the size symbols"):
        graph.size_symbols_from_text("items = s0 s1")


def test_floordiv_canonical_forms() -> None:
    table = floordiv_table()
    s1 = SizeExpr.symbol("s1")
    # (s0 - 1) // 2 + 1 is (s0 + 1) // 2: s1
    assert table.floordiv(s0 - ONE, 2) == s1 - ONE
    assert table.floordiv(s0.scale(2) + SizeExpr.constant(2), 4) == s1
    # nested: ((s0 + 1) // 2 + 1) // 2 == (s0 + 3) // 4
    assert table.floordiv(s1 + ONE, 2) == SizeExpr.symbol("s2")
    assert table.floordiv(s0.scale(4) + SizeExpr.constant(7), 2) == s0.scale(2) + SizeExpr.constant(
        3
    )
    assert table.floordiv(s0, 3) is None  # no symbol of the table
    assert graph.split_floordiv(s0 - SizeExpr.constant(5), 2, {}) == (
        SizeExpr.constant(-3),
        s0 + ONE,
        2,
    )


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            (SizeSymbol.input("s0", 0, 0, hint=4), SizeSymbol.floordiv("s1", s0 - ONE, 2)),
            "'s1' = (s0 - 1) floordiv 2 is not in canonical form: it is -1 + (s0 + 1) floordiv 2",
        ),
        (
            (SizeSymbol.input("s0", 0, 0, hint=4), SizeSymbol.floordiv("s1", s0.scale(2), 4)),
            "it is 0 + (s0) floordiv 2",
        ),
        (
            (SizeSymbol.input("s0", 0, 0, hint=4), SizeSymbol.floordiv("s1", s0, 1)),
            "a floor division's divisor is 2 or more",
        ),
        (
            (
                SizeSymbol.input("s0", 0, 0, hint=4),
                SizeSymbol.floordiv("s1", s0 + ONE, 2),
                SizeSymbol.derived("s2", s0 + ONE),
                SizeSymbol.floordiv("s3", SizeExpr.symbol("s2"), 2),
            ),
            "size symbols 's1' and 's3' are the same size",
        ),
    ],
)
def test_floordiv_table_problems(entries: tuple[SizeSymbol, ...], message: str) -> None:
    problem = SizesAttr(entries).problem
    assert problem is not None and message in str(problem)


# ---------------------------------------------------------------------------------------------
# Relations
# ---------------------------------------------------------------------------------------------

s2, s3 = SizeExpr.symbol("s2"), SizeExpr.symbol("s3")


def related_table() -> SizesAttr:
    """Logits' rows `s0 * s1` and targets' `s2 * s3`, equal by a relation."""
    return SizesAttr(
        (
            SizeSymbol.input("s0", 0, 0, hint=2),
            SizeSymbol.input("s1", 0, 1, hint=8),
            SizeSymbol.input("s2", 1, 0, hint=2),
            SizeSymbol.input("s3", 1, 1, hint=8),
            SizeSymbol.derived("e0", s0 * s1),
            graph.SizeRelation(("s2", "s3"), s0 * s1),
        )
    )


def test_relations_make_related_sizes_one_symbol() -> None:
    table = related_table()
    assert table.problem is None
    assert [s.name for s in table.symbols] == ["s0", "s1", "s2", "s3", "e0"]
    assert table.expand(s3 * s2) == s0 * s1
    assert table.symbol_for(s2 * s3) == "e0"
    assert table.expand((s2 * s3 + s2).scale(2)) == (s0 * s1 + s2).scale(2)
    assert table.symbol_for(s2 * s2) is None
    assert graph.reduce_by(s2 * s3 * s3, table.relations) == s0 * s1 * s3
    assert table.broken_relation({"s0": 2, "s1": 6, "s2": 3, "s3": 4}) is None
    assert table.broken_relation({"s0": 2, "s1": 6, "s2": 3, "s3": 5}) == (
        table.relations[0],
        15,
        12,
    )


def test_relations_print_and_parse_back() -> None:
    table = related_table()
    text = str(table)
    assert text.endswith("e0 = s0 * s1, eq(s2 * s3, s0 * s1)>")
    module = parse(
        "func.func @f(%x: tensor<?x?xf32, #graph.syms<s0, s1>>, "
        "%y: tensor<?x?xf32, #graph.syms<s2, s3>>) attributes "
        f"{{graph.sizes = {text}}} {{\n"
        "  %0 = graph.reshape %x : tensor<?x?xf32, #graph.syms<s0, s1>> -> "
        "tensor<?xf32, #graph.syms<e0>>\n"
        "  %1 = graph.reshape %y : tensor<?x?xf32, #graph.syms<s2, s3>> -> "
        "tensor<?xf32, #graph.syms<e0>>\n"
        "  %2 = graph.add %0, %1 : tensor<?xf32, #graph.syms<e0>>, "
        "tensor<?xf32, #graph.syms<e0>> -> tensor<?xf32, #graph.syms<e0>>\n"
        "  func.return\n}"
    )
    function = next(iter(module.ops))
    assert isinstance(function, func.FuncOp)
    assert function.attributes[SIZES_ATTR] == table
    # Without the relation, the targets' reshape to the logits' rows does not verify.
    with pytest.raises(Exception, match="not equal for every size of their symbols"):
        parse(str(module).replace(", eq(s2 * s3, s0 * s1)", ""))


def test_a_relation_is_oriented_by_its_largest_monomial() -> None:
    rank = {"s0": 0, "s1": 1, "s2": 2, "s3": 3}
    relation = graph.SizeRelation.oriented(s0 * s1 - s2 * s3, rank)
    assert relation == graph.SizeRelation(("s2", "s3"), s0 * s1)
    # degree first: s2 * s3 is rewritten, not s0 * s1 * ... of lower rank symbols
    assert graph.SizeRelation.oriented(s0 * s0 * s1 - s2 * s3, rank) == graph.SizeRelation(
        ("s0", "s0", "s1"), s2 * s3
    )
    assert graph.SizeRelation.oriented(s0 - s2, rank) is None  # linear: one symbol in torch
    assert graph.SizeRelation.oriented((s2 * s3).scale(2) - s0 * s1, rank) is None  # 2 divides
    assert graph.SizeRelation.oriented(SizeExpr(), rank) is None


@pytest.mark.parametrize(
    ("relation", "message"),
    [
        (graph.SizeRelation(("s0", "s1"), s2 * s3), "is not oriented"),
        (graph.SizeRelation(("s3",), s0), "rewrites a monomial of degree 1"),
        (graph.SizeRelation(("s2", "s9"), s0 * s1), "uses 's9', which is no input symbol"),
    ],
)
def test_relation_problems(relation: graph.SizeRelation, message: str) -> None:
    entries = (*related_table().symbols, relation)
    problem = SizesAttr(entries).problem
    assert problem is not None and message in str(problem)


def conditioned_table() -> SizesAttr:
    """Two widths, the second at most the first and not equal, and a floor division of the
    first at least 3."""
    return SizesAttr(
        (
            SizeSymbol.input("s0", 0, 0, hint=8),
            SizeSymbol.input("s1", 1, 0, hint=5),
            SizeSymbol.floordiv("e0", s0, 2),
            graph.SizeCondition("le", s1, s0),
            graph.SizeCondition("ne", s0, s1),
            graph.SizeCondition("lt", SizeExpr.constant(2), SizeExpr.symbol("e0")),
        )
    )


def test_conditions_hold_or_name_the_sizes_that_break_them() -> None:
    table = conditioned_table()
    assert table.problem is None
    assert [str(c) for c in table.conditions] == ["le(s1, s0)", "ne(s0, s1)", "lt(2, e0)"]
    assert table.condition_problem(table.evaluate({"s0": 8, "s1": 5})) is None
    assert table.condition_problem(table.evaluate({"s0": 6, "s1": 2})) is None
    assert table.condition_problem(table.evaluate({"s0": 4, "s1": 6})) == (
        "s1 <= s0 does not hold at s0 = 4, s1 = 6: the program was compiled for calls where "
        "torch's trace assumed it"
    )
    problem = table.condition_problem(table.evaluate({"s0": 5, "s1": 5}))
    assert problem is not None and problem.startswith("s0 != s1 does not hold at s0 = 5, s1 = 5")
    problem = table.condition_problem(table.evaluate({"s0": 5, "s1": 3}))
    assert problem is not None and problem.startswith("2 < e0 does not hold at e0 = 2:")


def test_a_condition_of_polynomials_shows_their_values() -> None:
    table = SizesAttr(
        (
            SizeSymbol.input("s0", 0, 0, hint=3),
            SizeSymbol.input("s1", 0, 1, hint=4),
            SizeSymbol.input("s2", 1, 0, hint=20),
            graph.SizeCondition("le", s0 * s1, s2 - SizeExpr.constant(1)),
        )
    )
    assert table.condition_problem({"s0": 3, "s1": 4, "s2": 13}) is None
    assert table.condition_problem({"s0": 3, "s1": 4, "s2": 12}) == (
        "s0 * s1 <= s2 - 1 does not hold at s0 = 3, s1 = 4, s2 = 12 (s0 * s1 = 12) "
        "(s2 - 1 = 11): the program was compiled for calls where torch's trace assumed it"
    )


def test_conditions_print_and_parse_back() -> None:
    table = conditioned_table()
    text = str(table)
    assert text.endswith("e0 = (s0) floordiv 2, le(s1, s0), ne(s0, s1), lt(2, e0)>")
    module = parse(
        "func.func @f(%x: tensor<?xf32, #graph.syms<s0>>, %y: tensor<?xf32, #graph.syms<s1>>) "
        f"attributes {{graph.sizes = {text}}} {{\n"
        "  %0 = graph.neg %x : tensor<?xf32, #graph.syms<s0>>\n"
        "  func.return\n}"
    )
    function = next(iter(module.ops))
    assert isinstance(function, func.FuncOp)
    assert function.attributes[SIZES_ATTR] == table
    # A symbol may still be named as a condition's keyword.
    named = parse(
        "func.func @f(%x: tensor<?xf32, #graph.syms<le>>) attributes {graph.sizes = "
        "#graph.sizes<le = input(0, 0) hint 4, lt(3, le)>} {\n  func.return\n}"
    )
    named_function = next(iter(named.ops))
    assert isinstance(named_function, func.FuncOp)
    assert str(named_function.attributes[SIZES_ATTR]).endswith("lt(3, le)>")


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        (
            graph.SizeCondition("le", s1, SizeExpr.symbol("s9")),
            "condition le(s1, s9) uses 's9', which is no size",
        ),
        (
            graph.SizeCondition("ne", SizeExpr.constant(2), SizeExpr.constant(3)),
            "condition ne(2, 3) has no size symbol",
        ),
    ],
)
def test_condition_problems(condition: graph.SizeCondition, message: str) -> None:
    entries = (*conditioned_table().symbols, condition)
    problem = SizesAttr(entries).problem
    assert problem is not None and message in str(problem)


def test_a_condition_that_sizes_of_2_or_more_make_true_always_holds() -> None:
    one = SizeExpr.constant(1)
    assert graph.provably_nonnegative(s0 * s1 - s0)  # s0 * (s1 - 1), s1 >= 2
    assert graph.provably_nonnegative(s0 * s1 - s0 - s1)  # (s0 - 1) * (s1 - 1) - 1 >= 0
    assert not graph.provably_nonnegative(s0 - s1)
    assert not graph.provably_nonnegative(s0 - SizeExpr.constant(3))  # s0 = 2
    assert graph.SizeCondition("le", s0, s0 * s1).always_holds
    assert graph.SizeCondition("lt", s0, s0 * s1).always_holds
    assert graph.SizeCondition("ne", s0 * s1, s0).always_holds
    assert graph.SizeCondition("ne", SizeExpr(), s0).always_holds
    assert not graph.SizeCondition("lt", s0, s0).always_holds
    assert not graph.SizeCondition("le", s1, s0).always_holds
    assert not graph.SizeCondition("ne", s0 - one, one).always_holds  # s0 = 2


def test_nonnegative_at_given_lows() -> None:
    """Each symbol is shifted by its own low (`MIN_SIZE` where none is given)."""
    three = SizeExpr.constant(3)
    assert not graph.provably_nonnegative(s0 - three)
    assert graph.provably_nonnegative(s0 - three, {"s0": 3})
    assert not graph.provably_nonnegative(s0 * s1 - s0 - s1, {"s1": 0})  # -s0 at s1 = 0
    assert graph.provably_nonnegative(s0 * s1 - s0, {"s0": 0})  # s0 * (s1 - 1), s1 >= 2
    assert graph.provably_nonnegative(s0 * s0 - s0.scale(3) + SizeExpr.constant(2))  # s0 >= 2
    assert not graph.provably_nonnegative(s0 * s0 - s0.scale(3) + SizeExpr.constant(2), {"s0": 1})


def _parity_table(conditions: tuple[graph.SizeCondition, ...]) -> SizesAttr:
    return SizesAttr(
        (
            SizeSymbol.input("s0", 0, 0, hint=8),
            SizeSymbol.floordiv("h", s0, 2),
            *conditions,
        )
    )


def test_a_remainder_the_conditions_fix_simplifies_floor_divisions() -> None:
    """`s0 - 2 * (s0 floordiv 2)` equal to 0 both ways (torch's guard that `s0` is even): `(s0
    + 1) floordiv 2` is `s0 floordiv 2`, `(s0 + 3) floordiv 2` one more; unknown without it."""
    even = s0 - SizeExpr.symbol("h").scale(2)
    zero = SizeExpr()
    table = _parity_table(
        (graph.SizeCondition("le", even, zero), graph.SizeCondition("le", zero, even))
    )
    assert table.problem is None
    assert table.remainders == {(s0, 2): frozenset((0,))}
    assert table.remainder_values(s0.scale(3), 2) == frozenset((0,))
    assert table.floordiv(s0 + ONE, 2) == SizeExpr.symbol("h")
    assert table.floordiv(s0 + SizeExpr.constant(3), 2) == SizeExpr.symbol("h") + ONE
    assert table.condition_problem(table.evaluate({"s0": 9})) is not None  # an odd size: refused
    one_way = _parity_table((graph.SizeCondition("le", even, zero),))
    assert one_way.remainders == {} and one_way.floordiv(s0 + ONE, 2) is None


def test_a_reshapes_element_count_guard_fixes_the_remainder_of_its_floor_division() -> None:
    """torch's guard of a reshape of `s0` rows into `s0 floordiv 2` rows of 2, `s1 * s0 ==
    2 * s1 * (s0 floordiv 2)`, has the factor `s1` (a size: at least 1) in every term: divided
    out, it says `s0` is even, so the element counts are `equal` and `(s0 + 1) floordiv 2` is
    `s0 floordiv 2`. Without the guard they are not; nor is a factor that may be 0 (a floor
    division) divided out."""
    half, s1_ = SizeExpr.symbol("h"), SizeExpr.symbol("s1")
    rows, pairs = s1_ * s0, (s1_ * half).scale(2)

    def table(*conditions: graph.SizeCondition) -> SizesAttr:
        return SizesAttr(
            (
                SizeSymbol.input("s0", 0, 0, hint=8),
                SizeSymbol.input("s1", 0, 1, hint=3),
                SizeSymbol.floordiv("h", s0, 2),
                SizeSymbol.floordiv("q", s0, 100),
                *conditions,
            )
        )

    guarded = table(graph.SizeCondition("le", rows, pairs), graph.SizeCondition("le", pairs, rows))
    assert guarded.problem is None
    assert guarded.remainders == {(s0, 2): frozenset((0,))}
    assert guarded.equal(rows, pairs) and guarded.equal(s0, half.scale(2))
    assert guarded.floordiv(s0 + ONE, 2) == half
    assert not table().equal(rows, pairs) and not guarded.equal(s0, half.scale(2) + ONE)
    by_floor = SizeExpr.symbol("q")
    zero_factor = table(
        graph.SizeCondition("le", by_floor * s0, (by_floor * half).scale(2)),
        graph.SizeCondition("le", (by_floor * half).scale(2), by_floor * s0),
    )
    assert zero_factor.remainders == {}  # q is 0 below 100: s0 may be odd


def test_a_remainder_in_canonical_form_is_a_function_of_the_canonical_ones() -> None:
    """`canonical_modulus`: `2 * s0 + 3 mod 4` is a function of `s0 mod 2`, `(a + 1) mod 4` of
    `a = s0 floordiv 2` one of `s0 mod 8`, `6 * s0 mod 4` one of `s0 mod 2`, and a constant's
    the number; each equal to the remainder itself at every size."""
    atoms = {"a": (s0, 2)}
    cases = [
        (s0.scale(2) + SizeExpr.constant(3), 4, s0, 2),
        (SizeExpr.symbol("a") + ONE, 4, s0, 8),
        (s0.scale(6), 4, s0, 2),
        (SizeExpr.constant(9), 4, SizeExpr(), 1),
    ]
    for n, k, canonical, modulus in cases:
        m, d, value = graph.canonical_modulus(n, k, atoms)
        assert (m, d) == (canonical, modulus)
        for size in range(2, 40):
            values = {"s0": size, "a": size // 2}
            assert n.evaluate(values) % k == value(m.evaluate(values) % d)


def test_a_fixed_remainder_of_a_multiple_narrows_its_factor() -> None:
    """Conditions that fix `2 * s0 mod 4` at 2 (`s0` odd) key it as `s0 mod 2` in {1}, so a
    floor division of `s0 + 1` by 2 is `s0 floordiv 2` plus one."""
    half = SizeExpr.symbol("h")
    fixed = s0.scale(2) - half.scale(4) - SizeExpr.constant(2)  # 2 * s0 - 4 * (s0 floordiv 2) - 2
    table = SizesAttr(
        (
            SizeSymbol.input("s0", 0, 0, hint=9),
            SizeSymbol.floordiv("h", s0, 2),
            graph.SizeCondition("le", fixed, SizeExpr()),
            graph.SizeCondition("le", SizeExpr(), fixed),
        )
    )
    assert table.problem is None
    assert table.remainders == {(s0, 2): frozenset((1,))}
    assert table.remainder_values(s0.scale(2), 4) == frozenset((2,))
    assert table.floordiv(s0 + ONE, 2) == half + ONE
    for size in (3, 9, 17):
        assert (size + 1) // 2 == size // 2 + 1


def test_floor_divisions_equal_by_the_remainders_the_conditions_leave() -> None:
    """`s0 floordiv 8` equal to `(s0 + 4) floordiv 8` both ways leaves `s0 mod 8` below 4, so
    `s0 mod 16` in {0..3, 8..11}: `s0 floordiv 16`, `(s0 + 2) floordiv 16` and `a floordiv
    2` are `(s0 + 4) floordiv 16`; `(s0 + 8) floordiv 16` is one more at some remainders
    only (no symbol); without the conditions none is known."""
    a, b = SizeExpr.symbol("a"), SizeExpr.symbol("b")
    symbols = (
        SizeSymbol.input("s0", 0, 0, hint=32),
        SizeSymbol.floordiv("a", s0, 8),
        SizeSymbol.floordiv("b", s0 + SizeExpr.constant(4), 8),
        SizeSymbol.floordiv("c", s0 + SizeExpr.constant(4), 16),
    )
    table = SizesAttr((*symbols, graph.SizeCondition("le", a, b), graph.SizeCondition("le", b, a)))
    assert table.problem is None
    assert table.remainders == {(s0, 8): frozenset(range(4))}
    c = SizeExpr.symbol("c")
    assert table.floordiv(s0, 16) == c and table.floordiv(a, 2) == c
    assert table.floordiv(s0 + SizeExpr.constant(2), 16) == c
    assert table.floordiv(s0 + SizeExpr.constant(20), 16) == c + ONE
    assert table.floordiv(s0 + SizeExpr.constant(8), 16) is None
    for n in (32, 33, 35, 40, 43, 48, 200):  # every size the conditions admit
        sizes = table.evaluate({"s0": n})
        assert table.condition_problem(sizes) is None
        assert n // 16 == (n + 2) // 16 == sizes["a"] // 2 == sizes["c"]
    assert table.condition_problem(table.evaluate({"s0": 36})) is not None
    unconditioned = SizesAttr(symbols)
    assert unconditioned.remainders == {} and unconditioned.floordiv(s0, 16) is None


def test_floor_divisions_the_conditions_say_are_equal_are_one_size() -> None:
    """`s0 floordiv 8` and `(s0 + 4) floordiv 8` equal both ways (`s0 floordiv 4` even): the
    later expands to the first, and polynomials of the two are equal."""
    low, high = SizeExpr.symbol("a"), SizeExpr.symbol("b")
    table = SizesAttr(
        (
            SizeSymbol.input("s0", 0, 0, hint=32),
            SizeSymbol.floordiv("a", s0, 8),
            SizeSymbol.floordiv("b", s0 + SizeExpr.constant(4), 8),
            SizeSymbol.derived("c", high * high),
            graph.SizeCondition("le", low, high),
            graph.SizeCondition("le", high, low),
        )
    )
    assert table.problem is None
    assert table.aliases == {"b": "a"}
    assert table.expansions["b"] == low and table.expansions["c"] == low * low
    assert table.symbol_for(high * high) == "c" and table.expand(high - low) == SizeExpr()
    assert table.condition_problem(table.evaluate({"s0": 36})) is not None  # 36 // 4 is odd
