"""
The state of one import: the block of `@forward` being built, the SSA value of each FX node,
and the small helpers every aten conversion uses (casts, scalar constants, reshapes).
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Block, Operation, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.effects import computed_by_xfuse, erase_dead
from xfuse.dialects.torch_args import encode_args
from xfuse.errors import SymbolicSizeError, UnsupportedArgument, UnsupportedProgram
from xfuse.frontend.eager_rules import CONVOLUTIONS, is_size_node, size_hint
from xfuse.ir import dtypes

Value = SSAValue | list[SSAValue | None] | None


def node_error(node: torch.fx.Node, reason: str) -> UnsupportedProgram:
    target = getattr(node, "target", "?")
    return UnsupportedProgram(f"cannot import node '{node.name}' ({target}): {reason}")


# ---------------------------------------------------------------------------------------------
# Symbolic sizes (docs/dynamic-shapes.md)
# ---------------------------------------------------------------------------------------------


class SizeSymbols:
    """The size symbols of one import: each free symbol of torch's shape environment that an
    input's dim holds is an input symbol (named as torch names it, `s77`), each other size
    expression a derived symbol (`e0`, `e1`, ...), a polynomial of atoms: input symbols and
    the floor divisions (`FloorDiv(p, k)`, `k` a positive integer) the expressions hold, each a
    derived symbol of its own in canonical form (`graph.split_floordiv`), one per canonical
    (polynomial, divisor). Every size expression is reduced by the relations of input sizes
    the trace's guards hold (`add_relations`), so that sizes torch checked equal name one
    symbol; the trace's other guards are conditions of the table (`add_conditions`)."""

    def __init__(self) -> None:
        self.inputs: list[graph.SizeSymbol] = []
        self.derived: list[graph.SizeSymbol] = []
        self.relations: list[graph.SizeRelation] = []
        """The equalities of input sizes torch's trace checked (`add_relations`), by which
        every size expression is reduced."""
        self.conditions: list[graph.SizeCondition] = []
        """The inequalities of sizes torch's trace assumed (`add_conditions`)."""
        self.defined: dict[str, Any] = {}
        """Input symbols the trace's guards equate to an expression of other input symbols
        with a floor division (`add_definitions`) -> that sympy expression, which every size
        that names the symbol is written with (no longer input symbols)."""
        self._definitions: dict[Any, Any] = {}
        """The same, by sympy symbol."""
        self._table: graph.SizesAttr | None = None
        self._table_at: tuple[int, int, int] = (-1, -1, -1)
        """The table as it stood with as many derived symbols, relations and conditions (each
        list only grows): what `_residue` and `aliases` read."""
        self.layout_symbols: set[str] = set()
        """Symbols of torch's shape environment that only inputs' strides or storage offsets
        hold (an input of no dense order, such as a transposed slice of a fused projection,
        gets stride symbols of its own): the program reads its inputs whatever their strides
        (kernels read them contiguous, torch's calls and views take them as they are), so a
        guard on those alone (a contiguity check's `Ne(s40, 32)`) is no condition of it."""
        self._aliases: dict[str, graph.SizeExpr] = {}
        self.by_expr: dict[graph.SizeExpr, str] = {}
        self.origins: dict[Operation, str] = {}
        """The op of each graph op a symbolic node became (`convert_symbolic_node`), for
        the one line that refuses it."""

    def add_inputs(self, arg: int, val: Any) -> None:
        """Record the input symbols that argument `arg`'s fake value holds (first come)."""
        if not isinstance(val, torch.Tensor):
            return
        for layout in (*val.stride(), val.storage_offset()):
            if isinstance(layout, torch.SymInt):
                self.layout_symbols |= {str(x) for x in layout.node.expr.free_symbols}
        for dim, size in enumerate(val.shape):
            if not isinstance(size, torch.SymInt):
                continue
            expr = size.node.expr
            if not getattr(expr, "is_Symbol", False) or str(expr) in self.names:
                continue
            env = size.node.shape_env
            hint = int(env.backed_var_to_val[expr])
            bounds = env.var_to_range.get(expr)
            low = max(graph.MIN_SIZE, int(bounds.lower)) if bounds is not None else graph.MIN_SIZE
            upper = bounds.upper if bounds is not None else None
            finite = isinstance(upper, int) or bool(getattr(upper, "is_Integer", False))
            high = int(upper) if finite else None  # torch's int_oo: no bound
            low, high = guarded_range(env, expr, low, high)
            symbol = graph.SizeSymbol.input(str(expr), arg, dim, hint, low, high)
            self.inputs.append(symbol)
            self.by_expr[graph.SizeExpr.symbol(symbol.name)] = symbol.name

    @property
    def names(self) -> set[str]:
        return {s.name for s in self.inputs}

    def lowest(self, name: str) -> int:
        """The smallest size of symbol `name` at a call (`SizesAttr.lowest`)."""
        return graph.lowest_of(next((s for s in self.inputs if s.name == name), None))

    def add_relations(self, env: Any) -> None:
        """Record the equalities of input sizes among the guards of torch's shape environment
        `env` (`Eq(s0*s1, s2*s3)`: a check of the traced code, such as cross-entropy's that
        its input has as many rows as its target, which torch guards the trace on) as
        relations of the table (`graph.SizeRelation`): polynomials of this import's input
        symbols, each oriented as a rewrite of its largest monomial; one without a monomial
        of degree 2 or more with coefficient 1 or -1 to rewrite, or that earlier relations
        already give, is left out. A guard is read through the environment's replacements
        (`ShapeEnv.replace`), as the fake values' sizes are: a guard written over a symbol
        the trace later equated to another (`Eq(s20*s40, s31*s66)`, with `s40 -> s0` and
        `s66 -> s15`) relates the input symbols (`s0*s20 = s15*s31`). A program checks its
        relations at each call (`SymbolicProgram.bind`), so that it never runs sizes the
        trace did not allow."""
        import sympy

        rank = {s.name: i for i, s in enumerate(self.inputs)}
        for guard in getattr(env, "guards", ()):
            expr = self.defined_in(env.replace(guard.expr))
            if not isinstance(expr, sympy.Eq):
                continue
            lhs, rhs = self._plain(expr.lhs), self._plain(expr.rhs)
            if lhs is None or rhs is None:
                continue
            difference = graph.reduce_by(lhs - rhs, self.relations)
            if any(s not in rank for mono, _ in difference.terms for s in mono):
                continue  # of a definition's floor divisions: a condition (`add_conditions`)
            relation = graph.SizeRelation.oriented(difference, rank)
            if relation is not None:
                self.relations.append(relation)

    def add_definitions(self, env: Any, node: torch.fx.Node) -> None:
        """Record the guards of torch's shape environment `env` that equate an input symbol
        to an expression of other input symbols with a floor division (`Eq(s45, (s36 - 3)//2
        + 1)`: a backward's saved activation whose length a convolution of another input's
        computes, checked by `dynamo.computed_factors`' relation) as its definition. Every
        size that names the symbol is then written with its expression, so that the
        program's sizes are one family (`s45**2 // ((s36 - 3)//2 + 1)` is exact). torch makes
        no replacement of such a guard (it replaces by linear expressions only). `node` names
        the program in a refusal."""
        import sympy

        for guard in getattr(env, "guards", ()):
            expr = env.replace(guard.expr)
            if not isinstance(expr, sympy.Eq):
                continue
            for symbol, definition in ((expr.lhs, expr.rhs), (expr.rhs, expr.lhs)):
                name = str(symbol)
                if not (symbol.is_Symbol and name in self.names) or name in self.defined:
                    continue
                used = {str(x) for x in definition.free_symbols}
                if not (used and used <= self.names - self.defined.keys() - {name}):
                    continue
                if not any(_is_floordiv(a) for a in sympy.preorder_traversal(definition)):
                    continue
                try:  # its floor divisions become atoms of the table
                    self.polynomial(definition, node)
                except SymbolicSizeError:
                    continue
                self.defined[name] = definition
                self._definitions[symbol] = definition
                self.inputs = [s for s in self.inputs if s.name != name]
                self.by_expr.pop(graph.SizeExpr.symbol(name), None)
                break

    def defined_in(self, expr: Any) -> Any:
        """A sympy expression with each defined symbol (`add_definitions`) written as its
        definition."""
        if not self.defined:
            return expr
        return expr.xreplace(self._definitions)

    def add_residues(self, env: Any, node: torch.fx.Node) -> None:
        """Record, before the graph's sizes are read, the guards of torch's shape environment
        `env` that fix a remainder, as conditions of the table that `SizesAttr.remainders`
        reads (`p - k * (p floordiv k)` equals `r`, `le` both ways): `Eq(Mod(p, k), r)`,
        `Ne(Mod(p, 2), r)` (a parity: `h % 2 == 1` tested false), and equalities of floor
        divisions (`Eq(h // 2, (h + 1) // 2)`: `h` is even). By them a floor division of `p`
        plus a constant is `p`'s own plus a number (`_by_residue`): a patch merging's
        `x[:, 0::2]` and `x[:, 1::2]` are equally long. The conditions are checked at each
        call. `node` names the program in a refusal."""
        import sympy

        for guard in getattr(env, "guards", ()):
            expr = self.defined_in(env.replace(guard.expr))
            if not isinstance(expr, (sympy.Eq, sympy.Ne)):
                continue
            try:
                sides = self._residue_sides(expr, node)
            except SymbolicSizeError:
                continue
            if sides is None:
                continue
            lhs, rhs = (graph.reduce_by(side, self.relations) for side in sides)
            if lhs == rhs:
                continue
            self._add_equal(lhs, rhs)

    def _add_equal(self, lhs: graph.SizeExpr, rhs: graph.SizeExpr) -> None:
        """`lhs == rhs` as two conditions of the table (`le` both ways, checked at each call);
        where both are floor divisions, the later one is the first from then on
        (`SizesAttr.aliases`)."""
        for condition in (
            graph.SizeCondition("le", lhs, rhs),
            graph.SizeCondition("le", rhs, lhs),
        ):
            if condition not in self.conditions:
                self.conditions.append(condition)

    def _current_table(self) -> graph.SizesAttr:
        """`table()`, built again only where a symbol, relation or condition was added."""
        key = (len(self.derived), len(self.relations), len(self.conditions))
        if self._table is None or self._table_at != key:
            self._table, self._table_at = self.table(), key
            self._aliases = {
                later: graph.SizeExpr.symbol(first) for later, first in self._table.aliases.items()
            }
        return self._table

    @property
    def aliases(self) -> dict[str, graph.SizeExpr]:
        """Floor divisions the table's conditions make equal, each later one by the first
        (`SizesAttr.aliases`): every size is written with the first."""
        self._current_table()
        return self._aliases

    def _residue_sides(
        self, expr: Any, node: torch.fx.Node
    ) -> tuple[graph.SizeExpr, graph.SizeExpr] | None:
        """The two sides of the equality a guard `expr` that fixes a remainder is, as
        polynomials of atoms (floor divisions added to the table), or None for another
        guard."""
        import sympy

        fixed = fixed_remainder(expr)
        if fixed is not None:
            mod, k, r = fixed
            p = graph.reduce_by(self.polynomial(mod.args[0], node), self.relations)
            return p - self._floordiv_of(p, k).scale(k), graph.SizeExpr.constant(r % k)
        if isinstance(expr, sympy.Eq) and any(
            _is_floordiv(a) for a in sympy.preorder_traversal(expr)
        ):
            return self.polynomial(expr.lhs, node), self.polynomial(expr.rhs, node)
        return None

    def _residue(self, p: graph.SizeExpr, k: int) -> int | None:
        """`p mod k` where the table's conditions fix it (`SizesAttr.remainder_values`), else
        None."""
        if not self.conditions:
            return None
        values = self._current_table().remainder_values(p, k)
        return next(iter(values)) if values is not None and len(values) == 1 else None

    def _by_residue(
        self, polynomial: graph.SizeExpr, divisor: int, new: bool
    ) -> graph.SizeExpr | None:
        """floor(polynomial / divisor) where the table's conditions fix the remainder of its
        terms other than the constant (`_residue`): `q + floor(n / divisor) + (r + c) // divisor`
        for `polynomial = divisor * q + n + c`, `n mod divisor == r`, `0 <= c < divisor`;
        `floor(n / divisor)` an existing atom, or with `new` a new one where none is. None
        where no condition fixes it or `c` is 0."""
        reduced = _modulo(polynomial, divisor)
        quotient = (polynomial - reduced).divide_exact(divisor)
        n, c = _split_constant(reduced)
        if c == 0 or not n.terms:
            return None
        r = self._residue(n, divisor)
        if r is None:
            return None
        atom = self._floordiv_of(n, divisor) if new else self._known_floordiv_of(n, divisor)
        if atom is None:
            return None
        return quotient + atom + graph.SizeExpr.constant((r + c) // divisor)

    def add_conditions(self, env: Any) -> None:
        """Record the guards of torch's shape environment `env` that no relation gives (an
        inequality the trace assumed: `s1 <= s0` for a slice `x[:, :n]` of `x` `s0` wide, a
        `torch._check(a <= b)`), and its runtime asserts over input symbols, as conditions of
        the table (`graph.SizeCondition`): comparisons of polynomials of its symbols (a floor
        division one of the import's symbols, `_plain`); an equality no relation gives is two.
        A guard that torch's replacements make true, that holds at every size of 2 or more
        (`SizeCondition.always_holds`), or that its one symbol's range implies (`s0 <= 512`
        where s0's range is [2, 512]: `repeats_range`) or that holds over the symbols' ranges
        with its remainders bounded (`holds_at_every_size`), or that is on inputs' strides
        alone (`layout_symbols`), is left out; one the table can hold no
        condition of raises `SymbolicSizeError`: a call could break it unseen. Call it after
        the graph's sizes are read (`dim`), whose floor divisions a guard may name."""
        import sympy

        names = self.names
        asserts = getattr(env, "deferred_runtime_asserts", {}).values()
        exprs = [g.expr for g in getattr(env, "guards", ())]
        exprs += [
            a.expr
            for group in asserts
            for a in group
            if {str(x) for x in env.replace(a.expr).free_symbols} <= names | self.defined.keys()
        ]
        layout_only = self.layout_symbols - names - self.defined.keys()
        for raw in exprs:
            expr = self.defined_in(env.simplify(raw))
            if (
                expr == sympy.true
                or not raw.free_symbols
                or {str(x) for x in expr.free_symbols} <= layout_only
                or repeats_range(expr, self.inputs)
                or self.holds_at_every_size(expr)
            ):
                continue
            for condition in self._conditions_of(expr):
                if condition not in self.conditions and not condition.always_holds:
                    self.conditions.append(condition)

    def _conditions_of(self, expr: Any) -> list[graph.SizeCondition]:
        """The conditions that a guard `expr` (a sympy comparison) is: none where it is an
        equality the relations give, or SymbolicSizeError where the table holds none."""
        import sympy

        if isinstance(expr, sympy.And):
            return [c for part in expr.args for c in self._conditions_of(part)]
        if isinstance(expr, sympy.Or):
            return self._disjunct_conditions(expr)
        picks: list[graph.SizeCondition] = []
        lhs = self._plain(expr.lhs, picks=picks) if isinstance(expr, sympy.Rel) else None
        rhs = self._plain(expr.rhs, picks=picks) if isinstance(expr, sympy.Rel) else None
        if lhs is None or rhs is None or (picks and not self._holds_at_hints(expr)):
            raise SymbolicSizeError(
                f"torch.export's trace assumed {expr}, which is no comparison of polynomials of "
                "the program's sizes: a call could break it unchecked"
            )
        if isinstance(expr, sympy.Eq):
            if graph.reduce_by(lhs - rhs, self.relations) == graph.SizeExpr():
                return picks
            return [
                *picks,
                graph.SizeCondition("le", lhs, rhs),
                graph.SizeCondition("le", rhs, lhs),
            ]
        kinds = {sympy.Le: "le", sympy.Lt: "lt", sympy.Ne: "ne"}
        flipped = {sympy.Ge: "le", sympy.Gt: "lt"}
        for kind, name in kinds.items():
            if isinstance(expr, kind):
                return [*picks, graph.SizeCondition(name, lhs, rhs)]
        for kind, name in flipped.items():
            if isinstance(expr, kind):
                return [*picks, graph.SizeCondition(name, rhs, lhs)]
        raise SymbolicSizeError(f"torch.export's trace assumed {expr}, an unknown comparison")

    def _disjunct_conditions(self, expr: Any) -> list[graph.SizeCondition]:
        """The conditions of a guard that is a disjunction (a layout check `Eq(numel, 0) |
        (...)`): those of its first part that holds at the trace's sizes and that the table
        can hold, which imply the whole; SymbolicSizeError where none can."""
        for part in expr.args:
            if not self._holds_at_hints(part):
                continue
            try:
                return self._conditions_of(part)
            except SymbolicSizeError:
                continue
        raise SymbolicSizeError(
            f"torch.export's trace assumed {expr}, a disjunction none of whose parts is a "
            "comparison of polynomials of the program's sizes: a call could break it unchecked"
        )

    def _holds_at_hints(self, expr: Any) -> bool:
        """Whether a sympy condition of the input symbols holds at the trace's sizes."""
        hints = {s.name: s.hint for s in self.inputs}
        values = {x: hints[str(x)] for x in expr.free_symbols if str(x) in hints}
        if len(values) != len(expr.free_symbols):
            return False
        try:
            return bool(expr.xreplace(values))
        except TypeError:  # (not decided by numbers)
            return False

    def holds_at_every_size(self, expr: Any) -> bool:
        """Whether a guard `expr` (a sympy inequality) holds at every size of the input
        symbols' ranges, by `graph.provably_nonnegative` with each input symbol shifted by its
        range's start, where each remainder `Mod(p, k)` that sizes do not decide is `p - k*q`
        (`Remainders`). `s0**2 - s0*Mod(s0, 8) + 8*s0 > 1` (the elements of a mask padded to a
        multiple of 8) is `8*s0*q + 8*s0 - 2 >= 0`: it holds; value ranges alone
        (`repeats_range`) cannot tell, as `s0**2` and `s0*Mod(s0, 8)` grow together."""
        import sympy

        differences = {sympy.Gt: (1, -1), sympy.Ge: (1, 0), sympy.Lt: (-1, -1), sympy.Le: (-1, 0)}
        kind = next((k for k in differences if isinstance(expr, k)), None)
        if kind is None:
            return False
        remainders = Remainders({s.name: s.low for s in self.inputs})
        lhs, rhs = self._plain(expr.lhs, remainders), self._plain(expr.rhs, remainders)
        if lhs is None or rhs is None:
            return False
        sign, shift = differences[kind]
        difference = (lhs - rhs).scale(sign) + graph.SizeExpr.constant(shift)
        return graph.provably_nonnegative(difference, remainders.lows)

    def _plain(
        self,
        expr: Any,
        remainders: Remainders | None = None,
        picks: list[graph.SizeCondition] | None = None,
    ) -> graph.SizeExpr | None:
        """A sympy expression of this import's input symbols that is a polynomial (sums,
        products, powers, integers, floor divisions by an integer that are exact or one of the
        import's symbols, and a minimum, maximum or remainder that sizes decide: `_ordered`)
        as one, else None; with `remainders`, a remainder sizes do not decide is written as
        `remainders` writes it; with `picks`, a minimum, maximum or remainder sizes do not
        decide is what the trace's sizes pick (`_pick`, `_pick_remainder`), the conditions that
        keep it so added to `picks`."""
        if _is_floordiv(expr):
            return self._known_floordiv(expr)
        rounded = rounded_division(expr)
        if rounded is not None:
            return self._plain(rounded, remainders, picks)
        if type(expr).__name__ in ("Min", "Max", "Mod", "PythonMod"):
            return self._ordered(expr, remainders, picks)
        if expr.is_Integer:
            return graph.SizeExpr.constant(int(expr))
        if expr.is_Symbol and str(expr) in self.defined:
            return self._plain(self.defined[str(expr)], remainders, picks)
        if expr.is_Symbol:
            return graph.SizeExpr.symbol(str(expr)) if str(expr) in self.names else None
        if expr.is_Pow:
            if not (expr.exp.is_Integer and int(expr.exp) >= 0):
                return None
            base, out = self._plain(expr.base, remainders, picks), graph.SizeExpr.constant(1)
            if base is None:
                return None
            for _ in range(int(expr.exp)):
                out = out * base
            return out
        if not (expr.is_Add or expr.is_Mul):
            return None
        parts = [self._plain(a, remainders, picks) for a in expr.args]
        if any(p is None for p in parts):
            return None
        total = parts[0]
        assert total is not None
        for p in parts[1:]:
            assert p is not None
            total = total + p if expr.is_Add else total * p
        return total

    def _ordered(
        self,
        expr: Any,
        remainders: Remainders | None = None,
        picks: list[graph.SizeCondition] | None = None,
    ) -> graph.SizeExpr | None:
        """`Min(p, q)`, `Max(p, q)` or `Mod(p, q)` of polynomials where every size of 2 or more
        (of its symbols' lows, with `remainders`) decides it (`graph.provably_nonnegative`), a
        minimum or maximum also where a condition of the table does (`extremum`'s):
        `Min(s0, s0 * s1)` is `s0`, and so is `Mod(s0, s0 * s1)`, as `s0 * s1 > s0`, and
        `Mod(2 * s0 - 1, s0)` is `s0 - 1` (`MOD_QUOTIENTS`); with
        `remainders`, another `Mod(p, k)` as `remainders` writes it; with `picks`, another
        minimum or maximum as the trace's sizes pick it (`_pick`); else None. A minimum or
        maximum of more than two is taken pairwise."""
        kind = type(expr).__name__
        sides = [self._plain(a, remainders, picks) for a in expr.args]
        if len(sides) < 2 or any(side is None for side in sides):
            return None
        lows = None if remainders is None else remainders.lows
        if kind in ("Min", "Max"):
            out: graph.SizeExpr | None = sides[0]
            for side in sides[1:]:
                assert side is not None
                out = None if out is None else self._extreme(kind, out, side, lows, picks)
            return out
        if len(sides) != 2:
            return None
        p, q = sides
        assert p is not None and q is not None
        one = graph.SizeExpr.constant(1)
        if kind in ("Mod", "PythonMod"):
            fits = graph.provably_nonnegative(p, lows) and graph.provably_nonnegative(
                q - p - one, lows
            )
            if fits:
                return p
            for m in range(1, MOD_QUOTIENTS):  # `Mod(2 * s - 1, s)` is `s - 1`
                below = p - q.scale(m)
                if graph.provably_nonnegative(below, lows) and graph.provably_nonnegative(
                    q - below - one, lows
                ):
                    return below
            if self._ratio(p, q) is not None:  # q divides p
                return graph.SizeExpr()
            if remainders is not None:
                return remainders.written(p, q)
            known = self._known_remainder(p, q)
            if known is None and picks is not None:
                return self._pick_remainder(p, q, picks)
            return known
        return None

    def _extreme(
        self,
        kind: str,
        p: graph.SizeExpr,
        q: graph.SizeExpr,
        lows: Mapping[str, int] | None,
        picks: list[graph.SizeCondition] | None,
    ) -> graph.SizeExpr | None:
        """`Min(p, q)` or `Max(p, q)` (`kind`) where sizes or a condition decide it (`_ordered`),
        else, with `picks`, as the trace's sizes pick it; else None."""
        if graph.provably_nonnegative(q - p, lows) or graph.SizeCondition("le", p, q) in (
            self.conditions
        ):
            return p if kind == "Min" else q
        if graph.provably_nonnegative(p - q, lows) or graph.SizeCondition("le", q, p) in (
            self.conditions
        ):
            return q if kind == "Min" else p
        return None if picks is None else self._pick(kind, p, q, picks)

    def _pick_remainder(
        self, p: graph.SizeExpr, q: graph.SizeExpr, picks: list[graph.SizeCondition]
    ) -> graph.SizeExpr | None:
        """`Mod(p, q)` as `p` where the trace's sizes have `0 <= p < q` (a batch's remainder
        by a batch times a window count: `Mod(b, b * n)` is `b` where `n >= 2`), the
        conditions that keep it so added to `picks`; else None."""
        hints = self.hints()
        if not (p.symbols | q.symbols) <= hints.keys():
            return None
        if not 0 <= p.evaluate(hints) < q.evaluate(hints):
            return None
        for condition in (
            graph.SizeCondition("le", graph.SizeExpr(), p),
            graph.SizeCondition("lt", p, q),
        ):
            if not condition.always_holds:
                picks.append(condition)
        return p

    def hints(self) -> dict[str, int]:
        """Every symbol's size at the trace's sizes (the input symbols' hints)."""
        return self.table().evaluate({s.name: s.hint for s in self.inputs})

    def _pick(
        self, kind: str, p: graph.SizeExpr, q: graph.SizeExpr, picks: list[graph.SizeCondition]
    ) -> graph.SizeExpr | None:
        """`Min(p, q)` or `Max(p, q)` (`kind`) as the side the trace's sizes (the hints, atoms
        computed from them) pick, the condition that it stays the pick added to `picks`; None
        where the hints do not give both sides."""
        hints = self.hints()
        if not (p.symbols | q.symbols) <= hints.keys():
            return None
        low, high = (p, q) if p.evaluate(hints) <= q.evaluate(hints) else (q, p)
        condition = graph.SizeCondition("le", low, high)
        if not condition.always_holds:
            picks.append(condition)
        return low if kind == "Min" else high

    def _known_remainder(self, p: graph.SizeExpr, k: graph.SizeExpr) -> graph.SizeExpr | None:
        """`Mod(p, k)` as `p - k * floor(p / k)` where `k` is a positive integer and that floor
        division is exact or one of the import's symbols (a size's remainder read before:
        `remainder`); as a number where the table's conditions fix the remainder of `p`'s
        terms (`_residue`: dynamo's guard that `h // 16` is odd, where transformers' TF-style
        padding is `max(3 - h // 16 % 2, 0)`); else None."""
        divisor = k.as_constant
        if divisor is None or divisor <= 0:
            return None
        reduced = graph.reduce_by(p, self.relations)
        terms, c = _split_constant(_modulo(reduced, divisor))
        fixed = self._residue(terms, divisor) if terms.terms else None
        if fixed is not None:
            return graph.SizeExpr.constant((fixed + c) % divisor)
        quotient = self._known_floordiv_of(reduced, divisor)
        return None if quotient is None else reduced - quotient.scale(divisor)

    def fixed(self, expr: Any) -> int | None:
        """The one value a sympy size expression takes over its input symbols' ranges (a
        pooling's output length `(s - 1)//2560 + 1` where `s <= 2560` is 1), else None: a
        call outside the ranges is refused, so the value holds wherever the program runs."""
        from torch.utils._sympy.numbers import int_oo
        from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

        expr = self.defined_in(expr)
        by_name = {s.name: s for s in self.inputs}
        ranges = {}
        for free in expr.free_symbols:
            symbol = by_name.get(str(free))
            if symbol is None:
                return None
            ranges[free] = ValueRanges(
                graph.lowest_of(symbol), int_oo if symbol.high is None else symbol.high
            )
        bounds = bound_sympy(expr, ranges)
        return int(bounds.lower) if bounds.is_singleton() and finite_bound(bounds.lower) else None

    def _known_floordiv(self, expr: Any) -> graph.SizeExpr | None:
        """`FloorDiv(p, k)` as a polynomial of atoms where it is exact, one value at every
        size (`fixed`) or its canonical floor division is one of the import's symbols, else
        None."""
        constant = self.fixed(expr)
        if constant is not None:
            return graph.SizeExpr.constant(constant)
        base, divisor = expr.args
        polynomial, size = self._plain(base), self._plain(divisor)
        if polynomial is None or size is None:
            return None
        constant = graph.reduce_by(size, self.relations).as_constant
        if constant is None:
            return self._ratio(polynomial, size)
        if constant <= 0:
            return None
        return self._known_floordiv_of(graph.reduce_by(polynomial, self.relations), constant)

    def _known_floordiv_of(self, polynomial: graph.SizeExpr, divisor: int) -> graph.SizeExpr | None:
        found = self._known_floordiv_by_atoms(polynomial, divisor)
        return None if found is None else found.substitute(self.aliases)

    def _known_floordiv_by_atoms(
        self, polynomial: graph.SizeExpr, divisor: int
    ) -> graph.SizeExpr | None:
        """floor(polynomial / divisor) as a polynomial of atoms where it is exact or its
        canonical floor division, or that division's complement (`graph.complement_floordiv`:
        `(s + 1) floordiv 2` is `s - s floordiv 2`), is one of the import's symbols, else
        None."""
        by_residue = self._by_residue(polynomial, divisor, new=False)
        if by_residue is not None:
            return by_residue
        atoms = self.atoms
        quotient, residue, d = graph.split_floordiv(polynomial, divisor, atoms)
        if residue is None:
            return quotient
        names = {atom: n for n, atom in atoms.items()}
        if (residue, d) in names:
            return quotient + graph.SizeExpr.symbol(names[residue, d])
        whole, other, k = graph.complement_floordiv(residue, d, atoms)
        if other is None or (other, k) not in names:
            return None
        return quotient - whole - graph.SizeExpr.symbol(names[other, k])

    def memory_order(
        self, shape: Sequence[int | torch.SymInt], strides: Sequence[int | torch.SymInt]
    ) -> tuple[int, ...] | None:
        """`graph.memory_order` of a symbolic layout: the order of the trace's sizes (the
        shape environment's hints), where it holds at every size (each stride of a dim other
        than 1 is, as a polynomial, the row-major stride of the dims after it in that order:
        attention's [B, H, s, D] output in [B, s, H, D] memory); else None."""
        hinted = [size_hint(x) for x in (*shape, *strides)]
        if any(h is None for h in hinted):
            return None
        rank = len(shape)
        order = graph.memory_order(hinted[:rank], hinted[rank:])  # type: ignore[arg-type]
        if order is None or not self.dense_in(order, shape, strides):
            return None
        return order

    def dense_in(
        self,
        order: Sequence[int],
        shape: Sequence[int | torch.SymInt],
        strides: Sequence[int | torch.SymInt],
    ) -> bool:
        """Whether a traced layout is dense in `order` (outermost dim first) at every size:
        each stride of a dim other than 1 is, as a polynomial, the product of the sizes of the
        dims after it in that order (`range(rank)`: row-major at every size)."""
        dense = graph.SizeExpr.constant(1)
        for d in reversed(order):
            if isinstance(shape[d], int) and shape[d] == 1:
                continue
            size, stride = self.size_polynomial(shape[d]), self.size_polynomial(strides[d])
            if size is None or stride is None:
                return False
            if graph.reduce_by(stride - dense, self.relations) != graph.SizeExpr():
                return False
            dense = dense * size
        return True

    def size_polynomial(self, size: int | torch.SymInt) -> graph.SizeExpr | None:
        """A traced size or stride as a polynomial of the import's atoms (no new symbol), or
        None where it is none."""
        if isinstance(size, int):
            return graph.SizeExpr.constant(size)
        return self._plain(size.node.expr)

    def dim(self, size: int | torch.SymInt, node: torch.fx.Node) -> graph.Dim:
        """A dim of a fake value: an int, or the symbol of its expression."""
        if isinstance(size, int):
            return size
        expr = graph.reduce_by(self.polynomial(size.node.expr, node), self.relations)
        constant = expr.as_constant
        if constant is not None:
            return constant
        name = self.by_expr.get(expr)
        if name is None:
            name = self._add(graph.SizeSymbol.derived(f"e{len(self.derived)}", expr))
            self.by_expr[expr] = name
        return name

    def _add(self, symbol: graph.SizeSymbol) -> str:
        self.derived.append(symbol)
        return symbol.name

    @property
    def atoms(self) -> dict[str, tuple[graph.SizeExpr, int]]:
        """The floor divisions so far: (polynomial of atoms, divisor) by name."""
        return {
            s.name: (s.expr, s.divisor)
            for s in self.derived
            if s.expr is not None and s.divisor is not None
        }

    def floordiv(self, expr: Any, node: torch.fx.Node) -> graph.SizeExpr:
        """`FloorDiv(p, k)` as a polynomial of atoms: its quotient plus the symbol of its
        canonical floor division (an existing one where the pair is known); a constant where
        the sizes leave it one value (`fixed`)."""
        fixed = self.fixed(expr)
        if fixed is not None:
            return graph.SizeExpr.constant(fixed)
        base, divisor = expr.args
        size = graph.reduce_by(self.polynomial(divisor, node), self.relations)
        constant = size.as_constant
        ratio = self._ratio(self.polynomial(base, node), size) if constant is None else None
        if ratio is not None:
            return ratio
        if constant is None or constant <= 0:
            raise SymbolicSizeError(
                f"cannot import node '{node.name}' ({node.target}): its size {expr} divides "
                "by a divisor other than a positive integer"
            )
        polynomial = graph.reduce_by(self.polynomial(base, node), self.relations)
        return self._floordiv_of(polynomial, constant)

    def _ratio(self, base: graph.SizeExpr, divisor: graph.SizeExpr) -> graph.SizeExpr | None:
        """`base / divisor` where `divisor` divides `base` exactly as polynomials (after the
        relations), `_exact_quotient`: a constant multiple of it (the `-1` of
        `x.view(b, m // 8, 8)` is `m // (m // 8)`, 8 where `m` is a multiple of 8 at every
        size), `s0*s1 // s1` (`s0`), a product with it (a window count `n` times `b`
        divided by `n`, `n` a polynomial of floor divisions), or a number dividing each
        coefficient; else None."""
        p = graph.reduce_by(base, self.relations)
        q = graph.reduce_by(divisor, self.relations)
        exact = _exact_quotient(p, q)
        return exact if exact is not None else self._ratio_by_exact_floordiv(p, q)

    def _ratio_by_exact_floordiv(
        self, p: graph.SizeExpr, q: graph.SizeExpr
    ) -> graph.SizeExpr | None:
        """`p / q` where `q` is `c * e`, `e` the floor division of `p_e` by `k` that the
        table's conditions make exact (`p_e mod k` is 0 at every size: a guard of the trace,
        such as a reshape of `n` rows into `n // 2` rows of 2): `c * e` is `c * p_e / k`, so
        `p / q` is `k * (p / p_e) / c` where those divide exactly (`n // (n // 2)` is 2);
        else None."""
        if len(q.terms) != 1:
            return None
        ((monomial, c),) = q.terms
        atom = self.atoms.get(monomial[0]) if len(monomial) == 1 else None
        if atom is None or self._residue(atom[0], atom[1]) != 0:
            return None
        multiple = _exact_quotient(p, atom[0])
        if multiple is None:
            return None
        return _exact_quotient(multiple.scale(atom[1]), graph.SizeExpr.constant(c))

    def _floordiv_of(self, polynomial: graph.SizeExpr, divisor: int) -> graph.SizeExpr:
        """floor(polynomial / divisor) as its quotient plus the symbol of its canonical floor
        division (an existing one where the pair is known, else a new derived symbol)."""
        known = self._known_floordiv_of(polynomial, divisor)
        if known is None:
            known = self._by_residue(polynomial, divisor, new=True)
        if known is not None:
            return known
        quotient, residue, d = graph.split_floordiv(polynomial, divisor, self.atoms)
        assert residue is not None  # (no residue: an exact division, which is known)
        for name, atom in self.atoms.items():
            if atom == (residue, d):  # (an alias's own: `_known_floordiv_of` gave its first)
                return quotient + graph.SizeExpr.symbol(name).substitute(self.aliases)
        name = self._add(graph.SizeSymbol.floordiv(f"e{len(self.derived)}", residue, d))
        self.by_expr[graph.SizeExpr.symbol(name)] = name
        return quotient + graph.SizeExpr.symbol(name)

    def remainder(self, expr: Any, node: torch.fx.Node) -> graph.SizeExpr:
        """`Mod(p, k)` (`k` a positive integer) as `p - k * floor(p / k)`, its floor division
        an atom as `floordiv` makes one (a window's padding `(7 - w % 7) % 7`); one that sizes
        decide (`_ordered`) as it is."""
        decided = self._ordered(expr)
        if decided is not None:
            return decided
        base, divisor = expr.args
        if not (divisor.is_Integer and int(divisor) > 0):
            raise SymbolicSizeError(
                f"cannot import node '{node.name}' ({node.target}): its size {expr} is a "
                "remainder by a divisor other than a positive integer"
            )
        polynomial = graph.reduce_by(self.polynomial(base, node), self.relations)
        return polynomial - self._floordiv_of(polynomial, int(divisor)).scale(int(divisor))

    def polynomial(self, expr: Any, node: torch.fx.Node) -> graph.SizeExpr:
        """A sympy size expression of input symbols as a polynomial, or SymbolicSizeError."""
        if expr.is_Integer:
            return graph.SizeExpr.constant(int(expr))
        if expr.is_Symbol and str(expr) in self.defined:
            return self.polynomial(self.defined[str(expr)], node)
        if expr.is_Symbol and str(expr) in self.names:
            return graph.SizeExpr.symbol(str(expr))
        if expr.is_Add or expr.is_Mul:
            parts = [self.polynomial(a, node) for a in expr.args]
            total = parts[0]
            for p in parts[1:]:
                total = total + p if expr.is_Add else total * p
            return total
        if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) >= 0:
            base, out = self.polynomial(expr.base, node), graph.SizeExpr.constant(1)
            for _ in range(int(expr.exp)):
                out = out * base
            return out
        if _is_floordiv(expr):
            return self.floordiv(expr, node)
        rounded = rounded_division(expr)
        if rounded is not None:
            return self.polynomial(rounded, node)
        if type(expr).__name__ in ("Mod", "PythonMod"):
            return self.remainder(expr, node)
        if type(expr).__name__ in ("Min", "Max"):
            return self.extremum(expr, node)
        raise SymbolicSizeError(
            f"cannot import node '{node.name}' ({node.target}): its size {expr} is no "
            "polynomial of the input sizes"
        )

    def extremum(self, expr: Any, node: torch.fx.Node) -> graph.SizeExpr:
        """`Min(p, q)` or `Max(p, q)`: the polynomial every size of 2 or more decides it to be
        (`Max(0, 1 - s0)` is 0), else the one the trace's sizes (the hints) pick, with a
        condition of the table that it stays the pick (`Max(0, 2048 - s0)` is `2048 - s0`
        where `s0 <= 2048`): a call past it is refused and runs per shape."""
        decided = self._ordered(expr)
        if decided is not None:
            return decided
        kind = type(expr).__name__
        refused = SymbolicSizeError(
            f"cannot import node '{node.name}' ({node.target}): its size {expr} is no "
            "polynomial of the input sizes"
        )
        sides = [graph.reduce_by(self.polynomial(a, node), self.relations) for a in expr.args]
        picks: list[graph.SizeCondition] = []
        picked: graph.SizeExpr | None = sides[0]
        for side in sides[1:]:
            picked = None if picked is None else self._extreme(kind, picked, side, None, picks)
        if picked is None:
            raise refused
        self.conditions.extend(c for c in picks if c not in self.conditions)
        return picked

    def table(self) -> graph.SizesAttr:
        return graph.SizesAttr((*self.inputs, *self.derived, *self.relations, *self.conditions))


@dataclass
class Remainders:
    """How a guard's test (`SizeSymbols.holds_at_every_size`) writes a remainder `Mod(p, k)`
    that sizes do not decide (`k` a positive integer, `p` provably 0 or more): `p - k*q`,
    `q = p // k` a new quotient symbol of 0 or more."""

    lows: dict[str, int]
    """Each symbol's smallest value: the input symbols' ranges' starts, and 0 for each
    quotient symbol written so far."""
    quotients: int = 0

    def written(self, p: graph.SizeExpr, k: graph.SizeExpr) -> graph.SizeExpr | None:
        """`Mod(p, k)` as `p - k*q`, or None where `k` is no positive integer or `p` is not
        provably 0 or more."""
        divisor = k.as_constant
        if divisor is None or divisor <= 0 or not graph.provably_nonnegative(p, self.lows):
            return None
        name = f"_quotient{self.quotients}"
        self.quotients += 1
        self.lows[name] = 0
        return p - graph.SizeExpr.symbol(name).scale(divisor)


GUARDED_LOW_STEPS = 64
"""How far `guarded_low` raises a range's start at most."""


def guarded_range(env: Any, symbol: Any, low: int, high: int | None) -> tuple[int, int | None]:
    """The range `[low, high]` (high None: unbounded) of input symbol `symbol` of torch's shape
    environment `env` narrowed to where the guards on it alone hold: each equality of an
    expression that grows with the symbol (`Eq((s//32 - 1)//1280 + 1, 1)`: a pooling whose
    window covers the map) holds on an interval around the trace's size, and the start is
    raised past sizes the other guards exclude (`guarded_low`)."""
    import sympy

    guards = _guards_on(env, symbol)
    hint = int(env.backed_var_to_val[symbol])
    for guard in guards:
        if isinstance(guard, sympy.Eq):
            found = _equality_interval(guard.lhs - guard.rhs, symbol, hint, low, high)
            if found is None:
                continue
            low = max(low, found[0])
            if found[1] is not None:
                high = found[1] if high is None else min(high, found[1])
    return guarded_low(env, symbol, low, high), high


def _guards_on(env: Any, symbol: Any) -> list[Any]:
    """The guards of `env` on `symbol` alone, read through the environment's replacements, as
    `SizeSymbols.add_relations` reads them."""
    return [e for g in env.guards if (e := env.replace(g.expr)).free_symbols == {symbol}]


def _equality_interval(
    difference: Any, symbol: Any, hint: int, low: int, high: int | None
) -> tuple[int, int | None] | None:
    """The sizes of `symbol` in `[low, high]` around `hint` at which `difference` (a sympy
    expression that is 0 at `hint`) is 0, as an interval (high None: unbounded), where the
    difference is monotone in the symbol (`_grows_with`, or its negation); else None."""
    if not _grows_with(difference, symbol):
        difference = -difference
        if not _grows_with(difference, symbol):
            return None

    def at(size: int) -> int:
        return int(difference.subs(symbol, size))

    if at(hint) != 0:
        return None
    first, last = low, hint  # the smallest size from which the difference is 0
    while first < last:
        middle = (first + last) // 2
        first, last = (middle + 1, last) if at(middle) < 0 else (first, middle)
    start = first
    top = high
    if top is None:
        step = 1
        while at(hint + step) <= 0:
            if step > 2**40:
                return start, None
            step *= 2
        top = hint + step
    first, last = hint, top  # the largest size up to which it stays 0
    while first < last:
        middle = (first + last + 1) // 2
        first, last = (middle, last) if at(middle) <= 0 else (first, middle - 1)
    return start, first


def _grows_with(expr: Any, symbol: Any) -> bool:
    """Whether sympy expression `expr` of `symbol` never falls as the symbol grows: sums,
    positive multiples and floor divisions by positive integers of the symbol and integers."""
    if expr.is_Integer or expr == symbol:
        return True
    if expr.is_Add:
        return all(_grows_with(a, symbol) for a in expr.args)
    if expr.is_Mul:
        coefficient, rest = expr.as_coeff_Mul()
        return bool(coefficient > 0) and not rest.is_Mul and _grows_with(rest, symbol)
    if _is_floordiv(expr):
        base, divisor = expr.args
        return bool(divisor.is_Integer and divisor > 0) and _grows_with(base, symbol)
    return False


def guarded_low(env: Any, expr: Any, low: int, high: int | None) -> int:
    """The smallest size from `low` at which every guard of torch's shape environment `env` on
    symbol `expr` alone holds (a stride-2 convolution's `(s - 1) // 2 + 1 != 1`: its output is
    never 1), or `low` where none holds within `GUARDED_LOW_STEPS` sizes: a range over which
    the traced program's guards hold."""
    guards = _guards_on(env, expr)
    if not guards:
        return low
    end = low + GUARDED_LOW_STEPS if high is None else min(high, low + GUARDED_LOW_STEPS)
    for size in range(low, end + 1):
        if all(bool(g.subs(expr, size)) for g in guards):
            return size
    return low


def repeats_range(expr: Any, inputs: Sequence[graph.SizeSymbol]) -> bool:
    """Whether a guard `expr` (a sympy expression) is on one of the input symbols `inputs`
    alone and holds at every size of that symbol's range (torch's value-range analysis):
    `s0 <= 512`, `s0 > 1` or `Ne(s0, 600)` where s0's range is [2, 512]. Such a guard says
    nothing a call's range check does not; a guard on two symbols or more is no repetition."""
    from torch.utils._sympy.numbers import int_oo
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

    if len(expr.free_symbols) != 1:
        return False
    (free,) = expr.free_symbols
    symbol = next((s for s in inputs if s.name == str(free)), None)
    if symbol is None:
        return False
    high = int_oo if symbol.high is None else symbol.high
    bounds = bound_sympy(expr, {free: ValueRanges(symbol.low, high)})
    return bounds.is_singleton() and bool(bounds.lower)


def finite_bound(bound: Any) -> bool:
    """A value-range bound that is an integer (not torch's infinity)."""
    return bool(getattr(bound, "is_Integer", False))


def _modulo(p: graph.SizeExpr, k: int) -> graph.SizeExpr:
    """`p` with each coefficient taken modulo `k` (into [0, k))."""
    return graph.SizeExpr.of((m, c % k) for m, c in p.terms)


def _split_constant(p: graph.SizeExpr) -> tuple[graph.SizeExpr, int]:
    """`p` without its constant term, and that term."""
    constant = graph.SizeExpr.of((m, c) for m, c in p.terms if m == ())
    return p - constant, constant.as_constant or 0


def _exact_quotient(p: graph.SizeExpr, q: graph.SizeExpr) -> graph.SizeExpr | None:
    """`p / q` where the polynomial `q` divides `p` exactly, with integer coefficients (`8 * s1`
    divides `8 * s0 * s1`, giving `s0`; `a - b` divides `a * c - b * c`, giving `c`), else None:
    division by the leading term in a graded order, which leaves no remainder exactly where
    `q` divides `p`."""
    if not q.terms or q.as_constant == 0:
        return None
    lead, coeff = max(q.terms, key=lambda t: (len(t[0]), t[0]))
    rest, quotient = p, graph.SizeExpr()
    while rest.terms:
        mono, c = max(rest.terms, key=lambda t: (len(t[0]), t[0]))
        left = list(mono)
        for symbol in lead:
            if symbol not in left:
                return None
            left.remove(symbol)
        if c % coeff:
            return None
        term = graph.SizeExpr.of([(tuple(left), c // coeff)])
        quotient = quotient + term
        rest = rest - q * term
    return quotient


def _is_floordiv(expr: Any) -> bool:
    """Whether a sympy size expression is torch's `FloorDiv` (or its exact `CleanDiv`)."""
    from torch.utils._sympy.functions import FloorDiv

    return isinstance(expr, FloorDiv)


MOD_QUOTIENTS = 4
"""`Mod(p, q)` is `p - m * q` where sizes decide that `m * q <= p < (m + 1) * q` for an `m`
below this (`SizeSymbols._ordered`)."""


def rounded_division(expr: Any) -> Any:
    """`CeilToInt` or `FloorToInt` of `FloatTrueDiv(ToFloat(p), k)` (an arange's length for a
    float step: `arange(s, -s, -1.0)` is `ceil(-2 * s / -1.0)` long), `k` a whole number, as
    torch's `FloorDiv` of `p` (`ceil(p / k)` is `(p + k - 1) floordiv k` for `k > 0`, and
    dividing by `-k` is dividing `-p` by `k`); None for any other expression."""
    from torch.utils._sympy.functions import FloorDiv

    kind = type(expr).__name__
    if kind not in ("CeilToInt", "FloorToInt") or len(expr.args) != 1:
        return None
    (quotient,) = expr.args
    if type(quotient).__name__ != "FloatTrueDiv":
        return None
    numerator, divisor = quotient.args
    if type(numerator).__name__ != "ToFloat" or not divisor.is_Number:
        return None
    if float(divisor) != int(divisor) or int(divisor) == 0:
        return None
    k = int(divisor)
    p = numerator.args[0] if k > 0 else -numerator.args[0]
    k = abs(k)
    return FloorDiv(p + k - 1, k) if kind == "CeilToInt" else FloorDiv(p, k)


SIZE_SYMBOLS: contextvars.ContextVar[SizeSymbols | None] = contextvars.ContextVar(
    "xfuse_size_symbols", default=None
)
"""The size symbols of the import in progress, where it imports symbolic sizes."""


@contextlib.contextmanager
def importing_sizes(symbols: SizeSymbols) -> Iterator[SizeSymbols]:
    token = SIZE_SYMBOLS.set(symbols)
    try:
        yield symbols
    finally:
        SIZE_SYMBOLS.reset(token)


def lowest_size(dim: graph.Dim) -> int:
    """The smallest size a dim of unknown size takes at a call: its symbol's lowest size
    (`SizeSymbols.lowest`), `MIN_SIZE` outside a symbolic import."""
    symbols = SIZE_SYMBOLS.get()
    if symbols is None or not isinstance(dim, str):
        return graph.MIN_SIZE
    return symbols.lowest(dim)


def size_dim(size: Any, node: torch.fx.Node) -> graph.Dim | None:
    """An op's size argument as a dim: an int, or the symbol of a size of the call (an FX
    node of a SymInt, where the import reads symbolic sizes); None for anything else."""
    if isinstance(size, int):
        return size
    value = size.meta.get("val") if isinstance(size, torch.fx.Node) else None
    symbols = SIZE_SYMBOLS.get()
    if symbols is None or not isinstance(value, torch.SymInt):
        return None
    return symbols.dim(value, node)


def decided_size(size: Any) -> Any:
    """A size argument that is the same number at every size (an FX node of a SymInt whose
    polynomial is a constant: `max(0, 1 - n)` of a length `n` of 2 or more) as that int;
    any other argument as it is."""
    value = size.meta.get("val") if isinstance(size, torch.fx.Node) else None
    symbols = SIZE_SYMBOLS.get()
    if symbols is not None and type(value) is int:  # size arithmetic torch decided
        return value
    if symbols is None or not isinstance(value, torch.SymInt):
        return size
    polynomial = symbols.size_polynomial(value)
    constant = None if polynomial is None else polynomial.as_constant
    return size if constant is None else constant


def row_major_at_every_size(val: torch.Tensor) -> bool:
    """Whether a traced tensor's strides are row-major at every size its symbols take
    (`SizeSymbols.dense_in`), read without guards; outside a symbolic import, whether it is
    contiguous."""
    symbols = SIZE_SYMBOLS.get()
    if symbols is None:
        return val.is_contiguous()
    return symbols.dense_in(range(val.dim()), val.shape, val.stride())


def fixed_remainder(expr: Any) -> tuple[Any, int, int] | None:
    """A guard that fixes a remainder of a size by a number, `Eq(Mod(p, k), r)` or a parity
    `Ne(Mod(p, 2), r)` (the other one), as (`Mod(p, k)`, k, r): `p mod k` is `r` at every
    call the guard admits; None for another guard."""
    import sympy

    if not isinstance(expr, sympy.Eq | sympy.Ne):
        return None
    mod, value = (expr.lhs, expr.rhs) if expr.rhs.is_Integer else (expr.rhs, expr.lhs)
    if type(mod).__name__ not in ("Mod", "PythonMod") or not value.is_Integer:
        return None
    divisor = mod.args[1]
    if not divisor.is_Integer or int(divisor) < 2:
        return None
    k, r = int(divisor), int(value)
    if isinstance(expr, sympy.Ne):
        if k != 2 or r not in (0, 1):
            return None
        r = 1 - r
    return mod, k, r


def has_symbolic_size(value: Any) -> bool:
    """Whether a node's fake value is (or holds) a SymInt or a tensor of symbolic shape."""
    if isinstance(value, torch.SymInt):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(d, torch.SymInt) for d in value.shape)
    if isinstance(value, list | tuple):
        return any(has_symbolic_size(v) for v in value)
    return False


def tensor_type_of_val(val: Any, node: torch.fx.Node) -> TensorType[Attribute]:
    """The graph tensor type of a node's fake value (`node.meta["val"]`); a symbolic size is
    a dynamic dim naming its size symbol where the import reads symbolic sizes."""
    if not isinstance(val, torch.Tensor):
        raise node_error(node, f"produces a {type(val).__name__}, not a tensor")
    if val.layout != torch.strided:
        raise node_error(node, f"produces a {val.layout} tensor; only dense tensors are supported")
    if val.is_complex():
        raise node_error(node, f"produces a tensor of complex dtype {val.dtype}")
    symbols = SIZE_SYMBOLS.get()
    if symbols is None and not all(isinstance(d, int) for d in val.shape):
        raise node_error(node, f"has a symbolic shape {list(val.shape)}; shapes must be static")
    try:
        element_type = dtypes.from_torch(val.dtype)
    except dtypes.UnsupportedDtype as e:
        raise node_error(node, str(e)) from None
    if symbols is None:
        return TensorType(element_type, list(val.shape))
    return graph.tensor_of(element_type, [symbols.dim(d, node) for d in val.shape])


def traced_memory_order(val: Any) -> tuple[int, ...] | None:
    """`graph.memory_order` of a traced tensor's shape and strides (symbolic ones where the
    import reads symbolic sizes: `SizeSymbols.memory_order`); None for anything else (no
    strided tensor)."""
    if not isinstance(val, torch.Tensor) or val.layout != torch.strided:
        return None
    shape, strides = tuple(val.shape), tuple(val.stride())
    if all(type(d) is int for d in (*shape, *strides)):
        return graph.memory_order(shape, strides)
    symbols = SIZE_SYMBOLS.get()
    return None if symbols is None else symbols.memory_order(shape, strides)


def in_order(t: TensorType[Attribute], order: tuple[int, ...] | None) -> TensorType[Attribute]:
    """`t` with its dims in `order` (`graph.memory_order`; None: `t`), size symbols kept."""
    if order is None:
        return t
    dims = graph.dims_of(t)
    return graph.tensor_of(t.element_type, [dims[d] for d in order])


def inverse_permutation(perm: Sequence[int]) -> list[int]:
    """The permutation that undoes `perm`: `x.permute(perm).permute(inverse)` is `x`."""
    inverse = [0] * len(perm)
    for k, d in enumerate(perm):
        inverse[d] = k
    return inverse


def returns_alias(node: torch.fx.Node) -> bool:
    """Whether the node's operator may return a view of (or write) an input: its results'
    layouts are its inputs', which xfuse lays out its own way."""
    schema = getattr(node.target, "_schema", None)
    returns = [] if schema is None else schema.returns
    return any(r.alias_info is not None for r in returns)


def result_types(node: torch.fx.Node) -> list[TensorType[Attribute]]:
    """The tensor types of all outputs of a node (one for a tensor, several for a tuple)."""
    val = node.meta.get("val")
    if isinstance(val, list | tuple):
        return [tensor_type_of_val(v, node) for v in val]
    return [tensor_type_of_val(val, node)]


def out_type(node: torch.fx.Node) -> TensorType[Attribute]:
    """The tensor type of a single-output node."""
    return tensor_type_of_val(node.meta.get("val"), node)


def used_outputs(node: torch.fx.Node) -> set[int]:
    """Indices of a multi-output node's results that some node reads (through getitem)."""
    return {
        # getitem's index is an int; torch.fx types node arguments as any Argument.
        int(user.args[1])  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
        for user in node.users
        if user.target is operator.getitem and user.users
    }


def bind(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    # The target is an aten OpOverload; torch.fx types it as a callable or a string.
    schema = node.target._schema  # type: ignore[union-attr]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    bound: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        if i < len(node.args) and not arg.kwarg_only:
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
        else:
            bound[arg.name] = None
    return bound


def meta_tensor(x: Any) -> Any:
    """A meta tensor with a node's dtype and rank (for torch's promotion rules), a size node's
    example value (a Python int promotes as a number), or x itself."""
    if isinstance(x, torch.fx.Node):
        val = x.meta["val"]
        if isinstance(val, torch.SymInt):
            return val.node.hint
        return torch.empty(tuple(val.shape), dtype=val.dtype, device="meta")
    return x


def promoted_dtype(*args: Any) -> Attribute:
    """The element type torch computes `args` (nodes and Python scalars) in."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    _, dtype = elementwise_dtypes(
        *(meta_tensor(a) for a in args if a is not None),
        type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
    )
    return dtypes.from_torch(dtype)


@dataclass
class ImportBuilder:
    """The block being built and the values of the FX nodes converted so far."""

    block: Block
    values: dict[torch.fx.Node, Value] = field(default_factory=dict[torch.fx.Node, Value])
    symbolic_result: TensorType[Attribute] | None = None
    """The symbolic type of the node being converted, where the import reads symbolic sizes:
    a converter that builds an op from `out_type(node).get_shape()` gives it `?` dims without
    their symbols, which `emit` takes from here (the verifiers check the result)."""
    checked_unread: frozenset[torch.fx.Node] = frozenset()
    """Nodes no output depends on that eager refuses at some calls, by their index tensors'
    values or their operands' shapes (`eager_rules.unread_checks`): imported as torch calls,
    which stay and raise as eager's, where xfuse's own ops would be removed as dead."""

    def emit(self, op: Operation) -> SSAValue:
        op = self.with_symbols(op)
        self.block.add_op(op)
        return op.results[0]

    def with_symbols(self, op: Operation) -> Operation:
        """`op`, or a copy whose one result names the symbols of `symbolic_result` where it
        has that shape with its dynamic dims unnamed."""
        want = self.symbolic_result
        if want is None or len(op.results) != 1:
            return op
        t = op.results[0].type
        # Only a result none of whose dynamic dims is named: one the op named itself (from
        # its operands' symbols) may order them otherwise than the node's result.
        if not (isinstance(t, TensorType) and graph.is_symbolic(t)) or isinstance(
            t.encoding, graph.SymsAttr
        ):
            return op
        if tuple(t.get_shape()) != tuple(want.get_shape()):
            return op
        return type(op).create(
            operands=list(op.operands),
            result_types=[TensorType(t.element_type, want.get_shape(), want.encoding)],
            properties=dict(op.properties),
            attributes=dict(op.attributes),
        )

    def tensor(self, node: Any) -> SSAValue:
        """The SSA value of a tensor-producing FX node."""
        if not isinstance(node, torch.fx.Node):
            raise UnsupportedProgram(f"expected a tensor, found {node!r}")
        value = self.values.get(node)
        if not isinstance(value, SSAValue):
            raise node_error(node, "its value is not a single tensor")
        return value

    def cast(self, value: SSAValue, dtype: Attribute) -> SSAValue:
        if graph.dtype_of(value) == dtype:
            return value
        return self.emit(graph.CastOp(value, dtype))

    def constant(
        self, value: float | int | bool, dtype: Attribute, shape: Sequence[int] = ()
    ) -> SSAValue:
        return self.emit(graph.ConstantOp.scalar(value, dtype, shape))

    def operand(self, x: Any, dtype: Attribute) -> SSAValue:
        """A tensor node cast to `dtype`, a size of the call (a SymInt node: `h - 7`) as its
        `graph.size_value` cast to `dtype`, a float of the call (a SymFloat node) as its
        `float_value` cast to `dtype`, or a Python scalar as a 0-d constant of `dtype`."""
        if is_size_node(x):
            return self.cast(self.size_value(x), dtype)
        if isinstance(x, torch.fx.Node) and isinstance(x.meta.get("val"), torch.SymFloat):
            return self.cast(self.float_value(x), dtype)
        if isinstance(x, torch.fx.Node):
            return self.cast(self.tensor(x), dtype)
        if isinstance(x, bool | int | float):
            return self.constant(x, dtype)
        raise UnsupportedProgram(f"expected a tensor or a number, found {x!r}")

    def float_value(self, x: Any) -> SSAValue:
        """A Python float the call computes from its sizes (a SymFloat node: `sym_float(s0) *
        1.0`, a mean's count) as a 0-d f64 value, computed in double as Python does; a
        number as an f64 constant; `SymbolicSizeError` for another float."""
        f64 = dtypes.from_torch(torch.float64)
        if is_size_node(x):
            return self.cast(self.size_value(x), f64)
        if isinstance(x, int | float) and not isinstance(x, bool):
            return self.constant(float(x), f64)
        if isinstance(x, torch.fx.Node) and x.target is torch.sym_float:
            return self.float_value(x.args[0])
        if isinstance(x, torch.fx.Node) and x.target is operator.neg:
            return self.emit(graph.NegOp(self.float_value(x.args[0])))
        op = FLOAT_ARITHMETIC.get(x.target) if isinstance(x, torch.fx.Node) else None
        if op is not None and len(x.args) == 2 and not x.kwargs:
            return self.emit(op(self.float_value(x.args[0]), self.float_value(x.args[1])))
        name = x.name if isinstance(x, torch.fx.Node) else repr(x)
        raise SymbolicSizeError(
            f"cannot import the float {name} of the call: it is no arithmetic of its sizes"
        )

    def size_value(self, node: torch.fx.Node) -> SSAValue:
        """A size node of a symbolic import as a 0-d i64 `graph.size_value` of the table's
        symbols."""
        symbols = SIZE_SYMBOLS.get()
        if symbols is None:
            raise node_error(node, "a size of the call outside a symbolic import")
        expr = graph.reduce_by(
            symbols.polynomial(node.meta["val"].node.expr, node), symbols.relations
        )
        return self.emit(graph.SizeValueOp(expr))

    def torch_call(
        self,
        target: str,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        vals: Sequence[Any],
        node: torch.fx.Node,
        picks: Sequence[int] | None = None,
    ) -> list[SSAValue]:
        """A `graph.torch_call` of `target` on FX-level arguments (nodes are its operands),
        whose results torch traced as `vals` (fake tensors); `picks`: the positions of the
        operator's tuple result that are its results. The values returned are the results in
        their logical shapes.

        A result that torch lays out as a dense permutation of a row-major tensor
        (`graph.memory_order`: attention's output and gradients, [B, H, T, D] in [B, T, H, D]
        memory) is the op's in that memory order (its `orders`), read back to its logical
        shape by a `graph.permute`. The layout is one fact on the call; what it means for the
        program is an ordinary permute, which fusion takes into the reading kernel's index
        arithmetic (the kernel reads torch's memory in place, where a contiguous copy of the
        strided result was made before), which `ComposePermutes` folds with the program's own
        permute back, and which runs as a torch view where only externs read it (the same
        strided tensor eager has). No pass, lowering or runtime step needs strides.
        Convolutions keep their logical result: the convolution passes and the library-vs-
        kernel choice match and rebuild them as torch lays them out (channels-last outputs
        included)."""
        tensors: list[torch.fx.Node] = []

        def tensor_index(value: Any) -> int | None:
            if not isinstance(value, torch.fx.Node):
                return None
            if value not in tensors:
                tensors.append(value)
            return tensors.index(value)

        try:
            encoded_args, encoded_kwargs = encode_args(args, kwargs, tensor_index)
        except UnsupportedArgument as e:
            raise node_error(node, str(e)) from None
        in_place = not returns_alias(node) and target not in CONVOLUTIONS
        orders = [traced_memory_order(v) if in_place else None for v in vals]
        types = [
            in_order(tensor_type_of_val(v, node), order)
            for v, order in zip(vals, orders, strict=True)
        ]
        op = graph.TorchCallOp(
            target,
            [self.tensor(t) for t in tensors],
            types,
            encoded_args,
            encoded_kwargs,
            picks,
            orders,
        )
        self.block.add_op(op)
        return [
            r if order is None else self.emit(graph.PermuteOp(r, inverse_permutation(order)))
            for r, order in zip(op.results, orders, strict=True)
        ]

    def reshape(self, value: SSAValue, shape: Sequence[graph.Dim]) -> SSAValue:
        """`value` reshaped to `shape` (ints, or the symbols of dynamic dims)."""
        if graph.shape_of(value) == tuple(shape) or graph.dims_of(value) == tuple(shape):
            return value
        return self.emit(graph.ReshapeOp(value, shape))


FLOAT_ARITHMETIC: dict[Any, type[graph.BinaryOp]] = {
    operator.add: graph.AddOp,
    operator.sub: graph.SubOp,
    operator.mul: graph.MulOp,
    operator.truediv: graph.DivOp,
}
"""The Python operators on floats of the call (SymFloats) that `ImportBuilder.float_value`
computes, by the graph op that computes each."""


def fold_empty_results(block: Block) -> None:
    """Every pure graph op whose results hold no element becomes a constant of its type, and
    the ops only it read go: such an op's loop nest has no iteration, but a value lowering
    hoists out of the empty loops (the row of a broadcast of an empty tensor) would still read
    an empty buffer (a null pointer on the CPU). Views the caller sees are replayed on the real
    base by the runtime, so an empty view stays a view. Externs stay, even dead: torch's code
    may raise on its inputs whatever the result's size (a singular matrix solved for no
    right-hand side), and eager's errors are kept."""
    dead: list[Operation] = []
    for op in list(block.ops):
        if computed_by_xfuse(op) and not isinstance(op, graph.ConstantOp) and op.results:
            if all(_is_empty(r) for r in op.results):
                for r in op.results:
                    r.replace_all_uses_with(_empty_constant(block, op, r))
                dead.append(op)
    erase_dead(block, dead)


def _empty_constant(block: Block, op: Operation, r: SSAValue) -> SSAValue:
    """A constant of `r`'s type, inserted before `op`: a 0-d one broadcast to `r`'s dims
    where some are size symbols (`graph.constant` takes static sizes only)."""
    dtype = graph.dtype_of(r)
    symbolic = graph.is_symbolic(r)
    const = graph.ConstantOp.scalar(0, dtype, () if symbolic else graph.shape_of(r))
    block.insert_op_before(const, op)
    if not symbolic:
        return const.results[0]
    wide = graph.BroadcastInDimOp(const.results[0], graph.dims_of(r), [])
    block.insert_op_before(wide, op)
    return wide.results[0]


def _is_empty(value: SSAValue) -> bool:
    """Whether `value` is a tensor of no element: a static dim of 0 (with size symbols or
    not)."""
    return isinstance(value.type, TensorType) and 0 in graph.shape_of(value)
