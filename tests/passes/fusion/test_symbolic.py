"""Fusion on symbolic sizes (xfuse/passes/fusion/symbolic.py): proxies that compare as the
symbols do, hints in the scores, and interpret(fuse(G)) == interpret(G) on random symbolic
programs at two sizes of their symbol."""

from __future__ import annotations

from typing import cast

import pytest
import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Attribute, SSAValue

import xfuse
from xfuse.dialects import graph
from xfuse.errors import SymbolicSizeError, XfuseError
from xfuse.interpreters.graph import interpret
from xfuse.ir.context import parse
from xfuse.ir.names import SIZES_ATTR
from xfuse.passes.fusion import symbolic
from xfuse.passes.fusion.symbolic import proxy_sizes, static_proxies
from xfuse.testing.random_graph import random_program

s0 = graph.SizeExpr.symbol("s0")


def test_proxies_are_distinct_primes_above_every_static_size() -> None:
    table = graph.SizesAttr(
        (
            graph.SizeSymbol.input("s0", 0, 0, hint=4),
            graph.SizeSymbol.input("s1", 1, 0, hint=4),
            graph.SizeSymbol.derived("s2", s0.scale(8)),
        )
    )
    sizes = proxy_sizes(table, {8, 1000})
    assert sizes["s0"] > 1000 and sizes["s1"] > 1000 and sizes["s0"] != sizes["s1"]
    assert sizes["s2"] == 8 * sizes["s0"]


def test_a_derived_symbol_that_meets_a_static_size_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # s1 = s0 - 15 is 2 for the first prime above 16 (17), a static size of the function.
    table = graph.SizesAttr(
        (
            graph.SizeSymbol.input("s0", 0, 0, hint=20),
            graph.SizeSymbol.derived("s1", s0 - graph.SizeExpr.constant(15)),
        )
    )
    monkeypatch.setattr(symbolic, "PROXY_STEPS", ((1, 1),))
    with pytest.raises(SymbolicSizeError, match="'s1' cannot be told apart from a static size"):
        proxy_sizes(table, {2, 8})


def test_primes_farther_apart_tell_a_padded_size_from_the_next_symbol() -> None:
    # e0 = s0 + 2 is s1 for consecutive primes (17, 19): the next gap tells them apart.
    table = graph.SizesAttr(
        (
            graph.SizeSymbol.input("s0", 0, 0, hint=20),
            graph.SizeSymbol.input("s1", 0, 1, hint=20),
            graph.SizeSymbol.derived("e0", s0 + graph.SizeExpr.constant(2)),
        )
    )
    sizes = proxy_sizes(table, {2, 8})
    assert sizes["e0"] == sizes["s0"] + 2 and len(set(sizes.values())) == 3
    assert sizes["s1"] - sizes["s0"] >= symbolic.PROXY_STEPS[1][1]


def test_a_difference_of_sizes_takes_the_atoms_in_the_other_order() -> None:
    # e0 = s1 - s0 (a tail of s1 as long as s0 is shorter) is negative for rising primes.
    table = graph.SizesAttr(
        (
            graph.SizeSymbol.input("s0", 0, 0, hint=7),
            graph.SizeSymbol.input("s1", 1, 0, hint=3),
            graph.SizeSymbol.derived("e0", s0 - graph.SizeExpr.symbol("s1")),
        )
    )
    sizes = proxy_sizes(table, {2, 8})
    assert sizes["e0"] == sizes["s0"] - sizes["s1"] >= graph.MIN_SIZE
    assert len(set(sizes.values())) == 3


def test_an_atom_less_a_multiple_of_another_takes_primes_many_times_apart() -> None:
    # e0 = s1 - 2 * s0 (a concatenation's length less two of its parts) is negative for
    # primes a gap apart in either order.
    table = graph.SizesAttr(
        (
            graph.SizeSymbol.input("s0", 0, 0, hint=3),
            graph.SizeSymbol.input("s1", 1, 0, hint=10),
            graph.SizeSymbol.derived("e0", graph.SizeExpr.symbol("s1") - s0.scale(2)),
        )
    )
    sizes = proxy_sizes(table, {2, 8})
    assert sizes["e0"] == sizes["s1"] - 2 * sizes["s0"] >= graph.MIN_SIZE
    assert len(set(sizes.values())) == 3


def test_a_symbol_under_the_least_size_in_both_orders_is_refused() -> None:
    table = graph.SizesAttr(
        (
            graph.SizeSymbol.input("s0", 0, 0, hint=7),
            graph.SizeSymbol.derived("e0", graph.SizeExpr.constant(1) - s0),
        )
    )
    with pytest.raises(SymbolicSizeError, match="'e0' is -"):
        proxy_sizes(table, {2, 8})


def test_types_go_back_to_their_symbols() -> None:
    text = open_program()
    module = parse(text)
    f = next(op for op in module.ops if isinstance(op, func.FuncOp))
    with static_proxies(f):
        assert not any(graph.is_symbolic(a) for a in f.body.block.args)
    assert str(module) == str(parse(text))


def open_program() -> str:
    return """
    func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>) -> tensor<?xf32, #graph.syms<s1>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = 8 * s0>} {
      %0 = graph.exp %x : tensor<?x8xf32, #graph.syms<s0>>
      %1 = graph.reshape %0 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s1>>
      func.return %1 : tensor<?xf32, #graph.syms<s1>>
    }"""


def test_scores_count_bytes_at_the_hints() -> None:
    text = """
    func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>, %b: tensor<8xf32>) -> tensor<?xf32, #graph.syms<s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 6>} {
      %0 = graph.add %x, %b : tensor<?x8xf32, #graph.syms<s0>>, tensor<8xf32> -> tensor<?x8xf32, #graph.syms<s0>>
      %1 = graph.exp %0 : tensor<?x8xf32, #graph.syms<s0>>
      %2 = graph.reduce_sum %1 dims = [1] : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s0>>
      func.return %2 : tensor<?xf32, #graph.syms<s0>>
    }"""
    static = text.replace(" attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 6>}", "")
    static = static.replace("?x8xf32, #graph.syms<s0>", "6x8xf32").replace(
        "?xf32, #graph.syms<s0>", "6xf32"
    )
    for spec in ("fuse-greedy", "fuse-scored,group-cleanup"):
        symbolic = xfuse.pipeline(spec)(parse(text))
        at_hint = xfuse.pipeline(spec)(parse(static))
        assert scores(symbolic) == scores(at_hint) != []


def scores(module: ModuleOp) -> list[Attribute]:
    return [
        op.attributes["fusion.score"] for op in module.walk() if "fusion.score" in op.attributes
    ]


# ---------------------------------------------------------------------------------------------
# Random symbolic programs: a random static program (base dims drawn from 2, 3 and 4) with a
# dim of size 3 becomes symbolic: every 3 is the symbol s0, and a dim 3^a * m (3 not dividing
# m: a flattening) the derived symbol m * s0^a. Programs that do not verify so (a slice, an
# iota or a roll of the dim) are left out.
# ---------------------------------------------------------------------------------------------

SIZE = 3


def symbolic_dim(d: int, derived: dict[str, graph.SizeExpr]) -> graph.Dim:
    power, rest = 0, d
    while rest % SIZE == 0:
        power, rest = power + 1, rest // SIZE
    if power == 0:
        return d
    if (power, rest) == (1, 1):
        return "s0"
    expr = graph.SizeExpr.constant(rest)
    for _ in range(power):
        expr = expr * s0
    name = f"e{power}_{rest}"
    derived[name] = expr
    return name


def symbolic_version(module: ModuleOp) -> ModuleOp | None:
    f = next(op for op in module.ops if isinstance(op, func.FuncOp))
    first = graph.shape_of(f.body.block.args[0])
    if SIZE not in first:
        return None
    text = str(module)
    derived: dict[str, graph.SizeExpr] = {}
    for t in {str(v.type) for v in all_values(module) if isinstance(v.type, TensorType)}:
        typ = parse_type(t)
        dims = [symbolic_dim(d, derived) for d in graph.shape_of(typ)]
        text = text.replace(t, str(graph.tensor_of(graph.dtype_of(typ), dims)))
    entries = [f"s0 = input(0, {first.index(SIZE)}) hint {SIZE}"]
    entries += [f"{name} = {expr}" for name, expr in sorted(derived.items())]
    table = f"attributes {{{SIZES_ATTR} = #graph.sizes<{', '.join(entries)}>}} {{"
    head, sep, rest = text.partition(") {\n")
    if not sep:
        return None
    try:
        return parse(head + ") " + table + "\n" + rest)
    except XfuseError:
        return None


def all_values(module: ModuleOp) -> list[object]:
    out: list[object] = []
    for op in module.walk():
        out += list(op.results)
        for region in op.regions:
            for block in region.blocks:
                out += list(block.args)
    return out


def parse_type(text: str) -> TensorType[Attribute]:
    f = parse(f"func.func @t(%a: {text}) {{\n  func.return\n}}")
    (fn,) = f.ops
    assert isinstance(fn, func.FuncOp)
    t = fn.body.block.args[0].type
    assert isinstance(t, TensorType)
    return t  # pyright: ignore[reportUnknownVariableType]


def inputs_at(module: ModuleOp, sizes: dict[str, int], seed: int) -> list[torch.Tensor]:
    f = next(op for op in module.ops if isinstance(op, func.FuncOp))
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(
            [d if isinstance(d, int) else sizes[d] for d in graph.dims_of(a)], generator=gen
        )
        for a in f.body.block.args
    ]


@pytest.mark.parametrize("spec", ["decompose,fuse-greedy", "decompose,fuse-scored,group-cleanup"])
def test_fusion_keeps_the_meaning_of_random_symbolic_programs(spec: str) -> None:
    checked = 0
    for seed in range(200):
        program = symbolic_version(random_program(seed, 10, rows=seed % 2 == 0).module)
        if program is None:
            continue
        fused = xfuse.pipeline(spec)(parse(str(program)))
        # (dead code may go: a symbolic input whose readers all reduce it is a group's)
        assert any(graph.is_symbolic(cast(SSAValue, v)) for v in all_values(fused))
        for n in (SIZE, 5):
            want = interpret(program, inputs_at(program, {"s0": n}, seed))
            got = interpret(fused, inputs_at(program, {"s0": n}, seed))
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                assert g.shape == w.shape
                torch.testing.assert_close(g, w, equal_nan=True, msg=f"seed {seed}, size {n}")
        checked += 1
    assert checked >= 20, f"only {checked} of 200 random programs had a symbolic version"
