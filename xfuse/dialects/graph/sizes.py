"""Symbolic sizes (docs/dynamic-shapes.md): the polynomials sizes are, the tensor encoding that
names the size symbol of each dynamic dim (`tensor<?x8xf32, #graph.syms<s0>>`), and the
function's table of size symbols (`graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range
[2, 4096], s1 = 8 * s0>`).

An input symbol is read from a dim of an argument of `@forward`; a derived one is a
polynomial with integer coefficients of earlier symbols, or the floor division of such a
polynomial by an integer of 2 or more (`s1 = (s0 + 1) floordiv 2`: the output size of a
stride-2 convolution or pooling). A floor division is an *atom* as an input symbol is: the
polynomials of later symbols use it as a variable, and a table expands every derived polynomial
into atoms. A floor division is written in its canonical form (`split_floordiv`): its
polynomial's coefficients in [0, divisor) with no common factor with the divisor, and no
floor division nested in it with coefficient 1 (`((s0 + 1) floordiv 2 + 1) floordiv 2` is
`(s0 + 3) floordiv 4`), so that equal canonical (polynomial, divisor) pairs are one symbol.
No two symbols of a table have the same expansion (and no two floor divisions the same
canonical pair), so two dynamic dims are equal exactly when they name the same symbol (or
provably so: a floor division only equals what its canonical form shows).

A symbol's size at a call is at least 2 (`MIN_SIZE`): input symbols by their range, derived
ones checked when a call computes them (`SizesAttr.too_small`); a floor division or a
difference can be 0 or 1 at small inputs, and such a call is refused or specialised.

A table may also hold *relations* between input symbols that torch's trace established (a
check such as cross-entropy's that the logits' rows `s0 * s1` are as many as the targets' `s2
* s3`): `eq(s2 * s3, s0 * s1)`, each a rewrite of one monomial of degree 2 or more into a
polynomial of smaller monomials (`monomial_key`). Every polynomial of the table is reduced by
them (`reduce_by`), so that sizes a relation makes equal have one expansion and name one
symbol; a call binds only sizes that satisfy every relation (`SizesAttr.broken_relation`).

Last, a table may hold *conditions*: inequalities of its symbols that torch's trace assumed (a
slice `x[:, :n]` that `n` is at most `x`'s width, a `torch._check(a <= b)`): `le(lhs, rhs)`
(lhs <= rhs), `lt(lhs, rhs)` (lhs < rhs) or `ne(lhs, rhs)` (lhs != rhs), each side a
polynomial of the table's symbols (`SizeCondition`). A call binds only sizes at which every
condition holds (`SizesAttr.condition_problem`)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property, partial
from itertools import count
from math import gcd

from xdsl.context import Context
from xdsl.ir import Data
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.mlir_lexer import MLIRTokenKind

MIN_SIZE = 2
"""The smallest size a symbol takes: sizes 0 and 1 specialise, as in Inductor and
torch.export (a symbol is never 1, so it broadcasts only against 1 or itself)."""


def lowest_of(symbol: SizeSymbol | None) -> int:
    """`SizesAttr.lowest` of a table's `symbol` (None: a name the table lacks)."""
    return symbol.low if symbol is not None and symbol.expr is None else MIN_SIZE


SYMBOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Monomial = tuple[str, ...]
"""Sorted symbol names, with repeats for powers; () is the constant term."""


@dataclass(frozen=True)
class SizeExpr:
    """A polynomial with integer coefficients of size symbols, kept canonical (terms sorted,
    no zero coefficient), so that equal polynomials are equal values."""

    terms: tuple[tuple[Monomial, int], ...] = ()

    @staticmethod
    def of(terms: Iterable[tuple[Monomial, int]]) -> SizeExpr:
        merged: dict[Monomial, int] = {}
        for mono, coeff in terms:
            key = tuple(sorted(mono))
            merged[key] = merged.get(key, 0) + coeff
        return SizeExpr(tuple(sorted((m, c) for m, c in merged.items() if c != 0)))

    @staticmethod
    def constant(value: int) -> SizeExpr:
        return SizeExpr.of([((), value)])

    @staticmethod
    def symbol(name: str) -> SizeExpr:
        return SizeExpr((((name,), 1),))

    @staticmethod
    def dim(size: int | str) -> SizeExpr:
        """A dim of a shape (`graph.dims_of`) as a polynomial."""
        return SizeExpr.symbol(size) if isinstance(size, str) else SizeExpr.constant(size)

    def __add__(self, other: SizeExpr) -> SizeExpr:
        return SizeExpr.of([*self.terms, *other.terms])

    def __sub__(self, other: SizeExpr) -> SizeExpr:
        return self + other.scale(-1)

    def __mul__(self, other: SizeExpr) -> SizeExpr:
        return SizeExpr.of((m1 + m2, c1 * c2) for m1, c1 in self.terms for m2, c2 in other.terms)

    def scale(self, factor: int) -> SizeExpr:
        return SizeExpr.of((m, c * factor) for m, c in self.terms)

    def divide_exact(self, divisor: int) -> SizeExpr:
        """The polynomial divided by `divisor`, which divides every coefficient."""
        assert all(c % divisor == 0 for _, c in self.terms)
        return SizeExpr.of((m, c // divisor) for m, c in self.terms)

    @property
    def content(self) -> int:
        """The greatest common divisor of the coefficients (0 for the zero polynomial)."""
        return gcd(*(c for _, c in self.terms))

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(s for m, _ in self.terms for s in m)

    @property
    def as_constant(self) -> int | None:
        """The value of a polynomial without symbols, else None."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and self.terms[0][0] == ():
            return self.terms[0][1]
        return None

    def substitute(self, values: Mapping[str, SizeExpr]) -> SizeExpr:
        """The polynomial with each symbol in `values` replaced by its polynomial."""
        total = SizeExpr()
        for mono, coeff in self.terms:
            term = SizeExpr.constant(coeff)
            for s in mono:
                term = term * values.get(s, SizeExpr.symbol(s))
            total = total + term
        return total

    def evaluate(self, values: Mapping[str, int]) -> int:
        total = 0
        for mono, coeff in self.terms:
            term = coeff
            for s in mono:
                term *= values[s]
            total += term
        return total

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        text = ""
        # Highest degree first, the constant last: `8 * s0 + 2`.
        for i, (mono, coeff) in enumerate(sorted(self.terms, key=lambda t: (-len(t[0]), t[0]))):
            magnitude = abs(coeff)
            factors = ([str(magnitude)] if magnitude != 1 or not mono else []) + list(mono)
            body = " * ".join(factors)
            if i == 0:
                text = body if coeff > 0 else "-" + body
            else:
                text += (" + " if coeff > 0 else " - ") + body
        return text


def provably_nonnegative(expr: SizeExpr, lows: Mapping[str, int] | None = None) -> bool:
    """Whether `expr` is 0 or more wherever each of its symbols `s` is `lows[s]` or more
    (`MIN_SIZE` for a symbol `lows` does not name: a size), by a sufficient test: `expr` with
    every symbol `s` written `low + s` has no negative coefficient. `s**2 - 3*s + 2` is
    `s**2 + s` so written: it holds."""
    given = lows or {}
    shifted = expr.substitute(
        {s: SizeExpr.symbol(s) + SizeExpr.constant(given.get(s, MIN_SIZE)) for s in expr.symbols}
    )
    return all(c >= 0 for _, c in shifted.terms)


def parse_size_expr(parser: AttrParser) -> SizeExpr:
    """`term (('+' | '-') term)*`, a term `['-'] factor ('*' factor)*`, a factor an integer,
    a symbol name or a parenthesised expression."""

    def factor() -> SizeExpr:
        if parser.parse_optional_punctuation("(") is not None:
            inner = expression()
            parser.parse_punctuation(")")
            return inner
        value = parser.parse_optional_integer(allow_negative=False, allow_boolean=False)
        if value is not None:
            return SizeExpr.constant(value)
        return SizeExpr.symbol(parser.parse_identifier(" (a size symbol or an integer)"))

    def term() -> SizeExpr:
        sign = -1 if parser.parse_optional_punctuation("-") is not None else 1
        value = factor()
        while parser.parse_optional_punctuation("*") is not None:
            value = value * factor()
        return value.scale(sign)

    def expression() -> SizeExpr:
        value = term()
        while True:
            if parser.parse_optional_punctuation("+") is not None:
                value = value + term()
            elif parser.parse_optional_punctuation("-") is not None:
                value = value - term()
            else:
                return value

    return expression()


Atoms = Mapping[str, tuple[SizeExpr, int]]
"""The floor divisions of a table by name: (polynomial of atoms, divisor)."""


def split_floordiv(
    expr: SizeExpr, divisor: int, atoms: Atoms
) -> tuple[SizeExpr, SizeExpr | None, int]:
    """floor(expr / divisor) as `quotient + floor(residue / d)`: (quotient, residue, d), with
    `residue` None where the division leaves no floor (floor(r / d) is 0 for a constant r in
    [0, d)). `expr` is a polynomial of atoms (input symbols and `atoms`' floor divisions);
    `residue / d` is canonical: every coefficient in [0, d), no factor common to all of them
    and `d`, and no floor division of `atoms` in it alone with coefficient 1, which nests:
    floor((floor(p / a) + q) / k) = floor((p + a * q) / (a * k)) for integer-valued q."""
    if divisor <= 0:
        raise ValueError(f"a floor division of sizes by {divisor}: the divisor must be positive")
    quotient = SizeExpr()
    while True:
        whole = SizeExpr.of((m, c // divisor) for m, c in expr.terms)
        residue = _reduced(expr, divisor)
        quotient = quotient + whole
        if residue.as_constant is not None:
            return quotient, None, 1
        unnested = _unnested(residue, divisor, atoms)
        if unnested is None:
            break
        expr, divisor, _ = unnested
    common = gcd(residue.content, divisor)
    return quotient, residue.divide_exact(common), divisor // common


def _shifted_remainder(x: int, shift: int, modulus: int) -> int:
    return (x + shift) % modulus


def _floor_by(x: int, divisor: int) -> int:
    return x // divisor


def _times(x: int, factor: int) -> int:
    return x * factor


def canonical_modulus(
    n: SizeExpr, k: int, atoms: Atoms
) -> tuple[SizeExpr, int, Callable[[int], int]]:
    """`n mod k` (`n` of atoms, `k` positive) as a function of `m mod d`, `m` in
    `split_floordiv`'s canonical form without a constant term (coefficients in [0, d), none
    common to all of them and `d`, no floor division of `atoms` nested with coefficient 1):
    (m, d, f) with `n mod k == f(m mod d)` at every size; (0, 1, f) where `n mod k` is the
    number `f(0)`. `2 * h mod 4` is `2 * (h mod 2)`; `(h floordiv 2 + 1) mod 4` is
    `((h + 2) mod 8) floordiv 2`."""
    steps: list[Callable[[int], int]] = []
    while True:
        n, c = split_constant(_reduced(n, k))
        if c:
            steps.append(partial(_shifted_remainder, shift=c, modulus=k))
        unnested = _unnested(n, k, atoms) if n.terms else None
        if unnested is None:
            break
        # floor(p / a) + rest is floor((p + a * rest) / a), whose remainder by k is read
        # from that of p + a * rest by a * k
        n, k, a = unnested
        steps.append(partial(_floor_by, divisor=a))
    if not n.terms:
        n, k = SizeExpr(), 1
    common = gcd(n.content, k) if n.terms else 1
    if common > 1:
        steps.append(partial(_times, factor=common))
        n, k = n.divide_exact(common), k // common

    def value(x: int) -> int:
        for step in reversed(steps):
            x = step(x)
        return x

    return n, k, value


def single_symbol(p: SizeExpr) -> str | None:
    """The symbol a polynomial is (one term, coefficient 1), if any."""
    if len(p.terms) == 1 and len(p.terms[0][0]) == 1 and p.terms[0][1] == 1:
        return p.terms[0][0][0]
    return None


def split_constant(p: SizeExpr) -> tuple[SizeExpr, int]:
    """`p` without its constant term, and that term."""
    constant = SizeExpr.of((m, c) for m, c in p.terms if m == ())
    return p - constant, constant.as_constant or 0


def complement_floordiv(
    residue: SizeExpr, divisor: int, atoms: Atoms
) -> tuple[SizeExpr, SizeExpr | None, int]:
    """floor(residue / divisor) as `-(whole + floor(other / d))`: (whole, other, d) in
    `split_floordiv`'s form, by floor(n / k) = -floor((k - 1 - n) / k) for every integer n.
    The two canonical forms name one size: `(s + 1) floordiv 2` is `s - s floordiv 2`."""
    return split_floordiv(SizeExpr.constant(divisor - 1) - residue, divisor, atoms)


def _reduced(expr: SizeExpr, k: int) -> SizeExpr:
    """`expr` with each coefficient taken modulo `k`."""
    return SizeExpr.of((m, c % k) for m, c in expr.terms)


def _unnested(residue: SizeExpr, k: int, atoms: Atoms) -> tuple[SizeExpr, int, int] | None:
    """`residue / k` with a floor division `floor(p / a)` of `atoms` that it holds alone with
    coefficient 1 (`_nested_atom`) taken into the numerator: (p + a * rest, a * k, a), since
    floor((floor(p / a) + rest) / k) = floor((p + a * rest) / (a * k)) for an integer-valued
    rest; None where it holds none."""
    nested = _nested_atom(residue, atoms)
    if nested is None:
        return None
    inner, a = atoms[nested]
    return inner + (residue - SizeExpr.symbol(nested)).scale(a), a * k, a


def _nested_atom(residue: SizeExpr, atoms: Atoms) -> str | None:
    """A floor division of `atoms` that `residue` holds as a term of its own with coefficient
    1 and in no other term, if any."""
    for mono, coeff in residue.terms:
        if len(mono) != 1 or coeff != 1 or mono[0] not in atoms:
            continue
        if all(mono[0] not in other for other, _ in residue.terms if other != mono):
            return mono[0]
    return None


def monomial_key(mono: Monomial, rank: Mapping[str, int]) -> tuple[int, tuple[int, ...]]:
    """A monomial's place in the order relations rewrite by: degree first, then its symbols'
    ranks (`rank`: each input symbol's position in the table), largest first, compared
    lexicographically. The order is a well-order that multiplication keeps (`m1 < m2` gives
    `m1 * m < m2 * m`), so rewriting a monomial into smaller ones ends."""
    return len(mono), tuple(sorted((rank[s] for s in mono), reverse=True))


@dataclass(frozen=True)
class SizeRelation:
    """An equality of input sizes that holds at every call (`eq(lhs, rhs)`): the monomial `lhs`
    (input symbols, degree 2 or more, coefficient 1) is the polynomial `rhs`, whose monomials
    are smaller (`monomial_key`)."""

    lhs: Monomial
    rhs: SizeExpr

    @property
    def lhs_expr(self) -> SizeExpr:
        return SizeExpr.of([(self.lhs, 1)])

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(self.lhs) | self.rhs.symbols

    @staticmethod
    def oriented(difference: SizeExpr, rank: Mapping[str, int]) -> SizeRelation | None:
        """`difference == 0` (a polynomial of the symbols of `rank`) as a relation: its largest
        monomial rewritten into the rest. None where that monomial's coefficient is not 1 or
        -1 (the rest would divide by it) or its degree is below 2 (torch makes a linear
        equality one symbol of its own)."""
        if not difference.terms:
            return None
        lead, coeff = max(difference.terms, key=lambda t: monomial_key(t[0], rank))
        if abs(coeff) != 1 or len(lead) < 2:
            return None
        rest = difference - SizeExpr.of([(lead, coeff)])
        return SizeRelation(lead, rest.scale(-coeff))

    def __str__(self) -> str:
        return f"eq({self.lhs_expr}, {self.rhs})"


def reduce_by(expr: SizeExpr, relations: Iterable[SizeRelation]) -> SizeExpr:
    """`expr` with every monomial that a relation's `lhs` divides rewritten (`lhs * q` into
    `rhs * q`) until none is: each rewrite makes the polynomial smaller in a well-order
    (`monomial_key`), so this ends."""
    rules = tuple(relations)
    if not rules:
        return expr
    while True:
        out: list[tuple[Monomial, int]] = []
        changed = False
        for mono, coeff in expr.terms:
            for rule in rules:
                rest = _divided(mono, rule.lhs)
                if rest is not None:
                    out.extend((m + rest, c * coeff) for m, c in rule.rhs.terms)
                    changed = True
                    break
            else:
                out.append((mono, coeff))
        expr = SizeExpr.of(out)
        if not changed:
            return expr


def _divided(mono: Monomial, factor: Monomial) -> Monomial | None:
    """`mono / factor` where `factor` divides `mono` (each symbol as often or more), else
    None."""
    rest = list(mono)
    for s in factor:
        if s not in rest:
            return None
        rest.remove(s)
    return tuple(rest)


def parse_size_relation(parser: AttrParser) -> SizeRelation:
    """`eq(lhs, rhs)` after its keyword: `lhs` a product of symbols (`parse_size_expr`)."""
    parser.parse_punctuation("(")
    pos = parser.pos
    lhs = parse_size_expr(parser)
    parser.parse_punctuation(",")
    rhs = parse_size_expr(parser)
    parser.parse_punctuation(")")
    if len(lhs.terms) != 1 or lhs.terms[0][1] != 1:
        parser.raise_error(f"expected a product of size symbols, found {lhs}", pos, pos)
    return SizeRelation(lhs.terms[0][0], rhs)


CONDITION_OPERATORS: dict[str, str] = {"le": "<=", "lt": "<", "ne": "!="}
"""The kinds of `SizeCondition`, each with the comparison it is."""


@dataclass(frozen=True)
class SizeCondition:
    """An inequality of sizes that holds at every call (`le(lhs, rhs)`, `lt(lhs, rhs)` or
    `ne(lhs, rhs)`: `lhs <= rhs`, `lhs < rhs` or `lhs != rhs`), `lhs` and `rhs` polynomials of
    the table's symbols."""

    kind: str
    """A key of `CONDITION_OPERATORS`."""
    lhs: SizeExpr
    rhs: SizeExpr

    @property
    def symbols(self) -> frozenset[str]:
        return self.lhs.symbols | self.rhs.symbols

    @property
    def comparison(self) -> str:
        """The condition as the comparison it is: `s1 <= s0`."""
        return f"{self.lhs} {CONDITION_OPERATORS[self.kind]} {self.rhs}"

    @property
    def always_holds(self) -> bool:
        """Whether the condition holds wherever every symbol is `MIN_SIZE` or more
        (`provably_nonnegative`'s sufficient test)."""
        one = SizeExpr.constant(1)
        if self.kind == "le":
            return provably_nonnegative(self.rhs - self.lhs)
        if self.kind == "lt":
            return provably_nonnegative(self.rhs - self.lhs - one)
        return provably_nonnegative(self.rhs - self.lhs - one) or provably_nonnegative(
            self.lhs - self.rhs - one
        )

    def holds(self, lhs: int, rhs: int) -> bool:
        """Whether the condition holds where its sides are `lhs` and `rhs`."""
        if self.kind == "le":
            return lhs <= rhs
        if self.kind == "lt":
            return lhs < rhs
        return lhs != rhs

    def __str__(self) -> str:
        return f"{self.kind}({self.lhs}, {self.rhs})"


def parse_size_condition(kind: str, parser: AttrParser) -> SizeCondition:
    """`kind(lhs, rhs)` after its keyword (`CONDITION_OPERATORS`' `kind`)."""
    parser.parse_punctuation("(")
    lhs = parse_size_expr(parser)
    parser.parse_punctuation(",")
    rhs = parse_size_expr(parser)
    parser.parse_punctuation(")")
    return SizeCondition(kind, lhs, rhs)


# ---------------------------------------------------------------------------------------------
# The encoding of a tensor type with dynamic dims
# ---------------------------------------------------------------------------------------------


@irdl_attr_definition
class SymsAttr(Data[tuple[str, ...]]):
    """The size symbol of each dynamic dim of a tensor type, in order.
    `tensor<?x8x?xf32, #graph.syms<s0, s1>>`"""

    name = "graph.syms"

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> tuple[str, ...]:
        with parser.in_angle_brackets():
            names = parser.parse_comma_separated_list(
                parser.Delimiter.NONE, lambda: parser.parse_identifier(" (a size symbol)")
            )
        return tuple(names)

    def print_parameter(self, printer: Printer) -> None:
        printer.print_string("<" + ", ".join(self.data) + ">")


@irdl_attr_definition
class SizeExprAttr(Data[SizeExpr]):
    """A polynomial of the size symbols of the function's table (an op's value that is a
    size of the call). `#graph.size_expr<e1 - 7>`"""

    name = "graph.size_expr"

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> SizeExpr:
        with parser.in_angle_brackets():
            return parse_size_expr(parser)

    def print_parameter(self, printer: Printer) -> None:
        printer.print_string(f"<{self.data}>")


# ---------------------------------------------------------------------------------------------
# The function's table of size symbols
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SizeSymbol:
    """One entry of a `graph.sizes` table: an input symbol (`source`, `hint`, range `[low,
    high]`, `high` None for no bound) or a derived one (`expr` of earlier symbols, floor
    divided by `divisor` where it is one)."""

    name: str
    source: tuple[int, int] | None = None
    """(argument, dim) of `@forward` the size is read from."""
    hint: int = 0
    low: int = MIN_SIZE
    high: int | None = None
    expr: SizeExpr | None = None
    divisor: int | None = None
    """The floor division's divisor (a derived symbol `(expr) floordiv divisor`), else None."""

    @staticmethod
    def input(
        name: str, arg: int, dim: int, hint: int, low: int = MIN_SIZE, high: int | None = None
    ) -> SizeSymbol:
        return SizeSymbol(name, (arg, dim), hint, low, high)

    @staticmethod
    def derived(name: str, expr: SizeExpr) -> SizeSymbol:
        return SizeSymbol(name, expr=expr)

    @staticmethod
    def floordiv(name: str, expr: SizeExpr, divisor: int) -> SizeSymbol:
        return SizeSymbol(name, expr=expr, divisor=divisor)

    @property
    def is_atom(self) -> bool:
        """An input symbol or a floor division: a variable of the table's polynomials."""
        return self.expr is None or self.divisor is not None

    @property
    def definition(self) -> str:
        """A derived symbol's right-hand side: `8 * s0`, `(s0 + 1) floordiv 2`."""
        assert self.expr is not None
        if self.divisor is None:
            return str(self.expr)
        return f"({self.expr}) floordiv {self.divisor}"

    def __str__(self) -> str:
        if self.expr is not None:
            return f"{self.name} = {self.definition}"
        assert self.source is not None
        high = "inf" if self.high is None else str(self.high)
        arg, dim = self.source
        return f"{self.name} = input({arg}, {dim}) hint {self.hint} range [{self.low}, {high}]"


def parse_size_symbol(parser: AttrParser) -> SizeSymbol:
    """One entry of a `graph.sizes` table: `name = input(arg, dim) hint h [range [low, high]]`
    (`high` an integer or `inf`), `name = expr` or `name = (expr) floordiv divisor`."""
    name = parser.parse_identifier(" (a size symbol)")
    parser.parse_punctuation("=")
    return _symbol_after_name(name, parser)


def _symbol_after_name(name: str, parser: AttrParser) -> SizeSymbol:
    """A `graph.sizes` symbol's definition, after its `name =`."""
    if parser.parse_optional_keyword("input") is None:
        expr = parse_size_expr(parser)
        if parser.parse_optional_keyword("floordiv") is None:
            return SizeSymbol.derived(name, expr)
        divisor = parser.parse_integer(allow_negative=False, allow_boolean=False)
        return SizeSymbol.floordiv(name, expr, divisor)
    parser.parse_punctuation("(")
    arg = parser.parse_integer(allow_negative=False, allow_boolean=False)
    parser.parse_punctuation(",")
    dim = parser.parse_integer(allow_negative=False, allow_boolean=False)
    parser.parse_punctuation(")")
    parser.parse_keyword("hint")
    hint = parser.parse_integer(allow_negative=False, allow_boolean=False)
    low, high = MIN_SIZE, None
    if parser.parse_optional_keyword("range") is not None:
        parser.parse_punctuation("[")
        low = parser.parse_integer(allow_negative=False, allow_boolean=False)
        parser.parse_punctuation(",")
        if parser.parse_optional_keyword("inf") is None:
            high = parser.parse_integer(allow_negative=False, allow_boolean=False)
        parser.parse_punctuation("]")
    return SizeSymbol.input(name, arg, dim, hint, low, high)


def parse_size_symbols(parser: AttrParser) -> tuple[SizeSymbol, ...]:
    """Entries of a `graph.sizes` table (`parse_size_symbol`), separated by commas."""
    entries = parser.parse_comma_separated_list(
        parser.Delimiter.NONE, lambda: parse_size_symbol(parser)
    )
    return tuple(entries)


SizeEntry = SizeSymbol | SizeRelation | SizeCondition
"""An entry of a `graph.sizes` table: a symbol, a relation or a condition."""


def parse_size_entries(parser: AttrParser) -> tuple[SizeEntry, ...]:
    """The entries of a `graph.sizes` table, separated by commas: symbols
    (`parse_size_symbol`), relations (`eq(lhs, rhs)`) and conditions (`le(lhs, rhs)`, ...);
    a symbol may be named as a keyword of those (`eq = input(0, 0) hint 2`)."""

    def entry() -> SizeEntry:
        for keyword in ("eq", *CONDITION_OPERATORS):
            if parser.parse_optional_keyword(keyword) is None:
                continue
            if parser.parse_optional_punctuation("=") is not None:
                return _symbol_after_name(keyword, parser)
            if keyword == "eq":
                return parse_size_relation(parser)
            return parse_size_condition(keyword, parser)
        return parse_size_symbol(parser)

    return tuple(parser.parse_comma_separated_list(parser.Delimiter.NONE, entry))


def size_symbols_from_text(text: str) -> tuple[SizeSymbol, ...]:
    """The entries of a `graph.sizes` table written outside IR (`", ".join` of the symbols'
    `str`), e.g. the work items of a CUDA launch line: derived symbols of a kernel's size
    arguments. Raises xdsl's `ParseError` for text that is not all such entries."""
    parser = Parser(Context(), text, "size symbols")
    entries = parse_size_symbols(parser)
    if parser._current_token.kind != MLIRTokenKind.EOF:  # pyright: ignore[reportPrivateUsage]
        parser.raise_error("expected ',' or the end of the size symbols")
    return entries


def evaluate_sizes(symbols: Iterable[SizeSymbol], inputs: Mapping[str, int]) -> dict[str, int]:
    """The size of each of `symbols`, in order: an input symbol's from `inputs`, a derived
    one's computed from the sizes before it and `inputs` (which may hold sizes of symbols
    defined elsewhere: a kernel's size arguments). Floor divisions round toward minus
    infinity, as Python's `//` and torch's `FloorDiv`."""
    known = dict(inputs)
    out: dict[str, int] = {}
    for s in symbols:
        if s.expr is None:
            size = inputs[s.name]
        elif s.divisor is None:
            size = s.expr.evaluate(known)
        else:
            size = s.expr.evaluate(known) // s.divisor
        out[s.name] = known[s.name] = size
    return out


@irdl_attr_definition
class SizesAttr(Data[tuple[SizeEntry, ...]]):
    """The size symbols of a function, in definition order (the `graph.sizes` attribute of
    `func.func`), then the relations of its input symbols and the conditions of its symbols,
    if any.
    `#graph.sizes<s0 = input(0, 0) hint 4 range [2, inf], s1 = 8 * s0>`"""

    name = "graph.sizes"

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> tuple[SizeEntry, ...]:
        with parser.in_angle_brackets():
            return parse_size_entries(parser)

    def print_parameter(self, printer: Printer) -> None:
        printer.print_string("<" + ", ".join(str(s) for s in self.data) + ">")

    # -- reading the table ----------------------------------------------------------------------

    @cached_property
    def symbols(self) -> tuple[SizeSymbol, ...]:
        """The size symbols, in definition order."""
        return tuple(s for s in self.data if isinstance(s, SizeSymbol))

    @cached_property
    def relations(self) -> tuple[SizeRelation, ...]:
        """The relations of the input symbols (`SizeRelation`)."""
        return tuple(s for s in self.data if isinstance(s, SizeRelation))

    @cached_property
    def conditions(self) -> tuple[SizeCondition, ...]:
        """The conditions of the symbols (`SizeCondition`)."""
        return tuple(s for s in self.data if isinstance(s, SizeCondition))

    @cached_property
    def by_name(self) -> dict[str, SizeSymbol]:
        return {s.name: s for s in self.symbols}

    @cached_property
    def expansions(self) -> dict[str, SizeExpr]:
        """Each symbol as a polynomial of atoms (input symbols and floor divisions, each
        itself), reduced by the relations."""
        out: dict[str, SizeExpr] = {}
        for s in self.symbols:
            out[s.name] = (
                SizeExpr.symbol(self.aliases.get(s.name, s.name))
                if s.expr is None or s.is_atom
                else reduce_by(s.expr.substitute(out), self.relations)
            )
        return out

    @cached_property
    def aliases(self) -> dict[str, str]:
        """Floor divisions the conditions say are equal (`le` both ways: torch's guard
        `Eq(h floordiv 8, (h + 4) floordiv 8)`, that `h floordiv 4` is even), each later one
        by the first defined: the same size wherever it appears (`expansions`)."""
        sides = {(c.lhs, c.rhs) for c in self.conditions if c.kind == "le"}
        order = {s.name: i for i, s in enumerate(self.symbols) if s.divisor is not None}
        found: dict[str, str] = {}
        for lhs, rhs in sorted(sides, key=str):
            names = [single_symbol(lhs), single_symbol(rhs)]
            if (rhs, lhs) not in sides or not all(n in order for n in names):
                continue
            first, later = sorted(names, key=lambda n: order[n])  # type: ignore[index]
            assert first is not None and later is not None
            while first in found:
                first = found[first]
            if first != later:
                found[later] = first
        for name in found:  # (chains end at a first atom)
            while found[name] in found:
                found[name] = found[found[name]]
        return found

    @cached_property
    def atoms(self) -> dict[str, tuple[SizeExpr, int]]:
        """Each floor division: (its polynomial expanded into atoms, its divisor)."""
        return {
            s.name: (self.expand(s.expr), s.divisor)
            for s in self.symbols
            if s.expr is not None and s.divisor is not None
        }

    @cached_property
    def input_dependencies(self) -> dict[str, frozenset[str]]:
        """Each symbol's input symbols (those its size is computed from)."""
        out: dict[str, frozenset[str]] = {}
        for s in self.symbols:
            if s.expr is None:
                out[s.name] = frozenset((s.name,))
            else:
                out[s.name] = frozenset().union(*(out[u] for u in s.expr.symbols))
        return out

    @cached_property
    def hints(self) -> dict[str, int]:
        """Each symbol's size at the hints of the input symbols (the example's sizes)."""
        return self.evaluate({s.name: s.hint for s in self.symbols if s.expr is None})

    def expand(self, expr: SizeExpr) -> SizeExpr:
        """`expr` with every symbol of the table expanded into atoms (input symbols and
        floor divisions), reduced by the relations."""
        return reduce_by(expr.substitute(self.expansions), self.relations)

    @cached_property
    def _fixed_remainders(self) -> list[tuple[SizeExpr, int, int]]:
        """The remainders the conditions fix, `(n, k, r)`: `n mod k` is `r` (`n` of atoms,
        without a constant term; `k` at least 2) where two conditions (`le` both ways) say a
        polynomial `n - k * q + c` is 0, `q` the floor division `(n + c') floordiv k` of a
        constant `c'` in [0, k): torch's guard that a size is even (`Eq(h floordiv 2, (h + 1)
        floordiv 2)`), say."""
        sides = {
            (self.expand(c.lhs), self.expand(c.rhs)) for c in self.conditions if c.kind == "le"
        }
        found: list[tuple[SizeExpr, int, int]] = []
        for lhs, rhs in sides:
            if (rhs, lhs) not in sides:
                continue
            difference = self._without_size_factors(lhs - rhs)
            for mono, coeff in difference.terms:
                k = abs(coeff)
                if len(mono) != 1 or mono[0] not in self.atoms or k < 2:
                    continue
                zero = difference.scale(-1) if coeff > 0 else difference  # n - k*q + c
                n, c = split_constant(zero + SizeExpr.symbol(mono[0]).scale(k))
                if n.terms and any(
                    self._floordiv_by_atoms(n + SizeExpr.constant(shift), k)
                    == SizeExpr.symbol(mono[0])
                    for shift in range(k)
                ):
                    found.append((n, k, -c % k))
        return found

    def equal(self, a: SizeExpr, b: SizeExpr) -> bool:
        """Whether sizes `a` and `b` (of any symbols of the table) are equal at every call the
        table describes: as polynomials of its input symbols and floor divisions, once the
        sizes every term has are divided out and each `k * q`, `q` a floor division of `n` by
        `k` whose remainder the conditions fix at `r`, is `n - r` (`s1 * n` and
        `s1 * 2 * (n floordiv 2)` where `n` is even)."""
        difference = self._without_size_factors(self.expand(a) - self.expand(b))
        for mono, coeff in difference.terms:
            atom = self.atoms.get(mono[0]) if len(mono) == 1 else None
            if atom is None or coeff % atom[1]:
                continue
            n, k = atom
            values = self.remainder_values(n, k)
            if values is None or len(values) != 1:
                continue
            exact = self.expand(n) - SizeExpr.constant(next(iter(values)))
            difference = (
                difference - SizeExpr.symbol(mono[0]).scale(coeff) + exact.scale(coeff // k)
            )
        return not difference.terms

    def _without_size_factors(self, p: SizeExpr) -> SizeExpr:
        """`p` divided by the input symbols every term of it has (sizes, 1 or more at every
        call): where `p` is 0, so is the quotient (a reshape's guard that `s1 * n` elements
        are `s1 * 2 * (n floordiv 2)` says `n` is even)."""
        positive = {s.name for s in self.symbols if s.source is not None and s.low >= 1}
        common: Counter[str] | None = None
        for mono, _ in p.terms:
            here = Counter(x for x in mono if x in positive)
            common = here if common is None else common & here
        if not common:
            return p
        return SizeExpr.of([(tuple((Counter(mono) - common).elements()), c) for mono, c in p.terms])

    @cached_property
    def remainders(self) -> dict[tuple[SizeExpr, int], frozenset[int]]:
        """The values `n mod k` takes at every call the table describes, where conditions
        narrow them (`n` and `k` in `canonical_modulus`'s form): remainders they fix
        (`_fixed_remainders`), and floor divisions they say are equal (`aliases`), `(n + c1)
        floordiv k` and `(n + c2) floordiv k` over the same `n`: equal where `n mod k` is
        below `k - c2` or from `k - c1` on (torch's `Eq(h floordiv 8, (h + 4) floordiv 8)`:
        `h mod 8` below 4)."""
        facts = [(n, k, frozenset((r,))) for n, k, r in self._fixed_remainders]
        for later, first in self.aliases.items():
            (q1, n1, c1), (q2, n2, c2) = self._split_atoms[first], self._split_atoms[later]
            if n1 is not None and n1 == n2 and q1 == q2:
                k = n1[1]
                allowed = frozenset(r for r in range(k) if (r + c1) // k == (r + c2) // k)
                facts.append((n1[0], k, allowed))
        found: dict[tuple[SizeExpr, int], frozenset[int]] = {}
        for n, k, allowed in facts:
            m, d, value = canonical_modulus(n, k, self._atoms_unaliased)
            if m.terms:
                left = frozenset(x for x in range(d) if value(x) in allowed)
                found[m, d] = found.get((m, d), left) & left
        return found

    def remainder_values(self, n: SizeExpr, k: int) -> frozenset[int] | None:
        """The values `n mod k` (`n` of any symbols of the table) takes at every call the
        table describes, where its conditions narrow them (`remainders`), else None."""
        m, d, value = canonical_modulus(self.expand(n), k, self._atoms_unaliased)
        if not m.terms:
            return frozenset((value(0),))
        left = self._remainders_of(m, d)
        return None if left is None else frozenset(value(x) for x in left)

    @cached_property
    def _split_atoms(self) -> dict[str, tuple[SizeExpr, tuple[SizeExpr, int] | None, int]]:
        """Each floor division of the table as `quotient + floor((n + c) / k)` in
        `split_floordiv`'s canonical form: (quotient, (n, k), c), (n, k) None where there is
        no floor left."""
        out: dict[str, tuple[SizeExpr, tuple[SizeExpr, int] | None, int]] = {}
        for name, (p, divisor) in self.atoms.items():
            quotient, residue, k = split_floordiv(p, divisor, self._atoms_unaliased)
            terms, c = split_constant(residue) if residue is not None else (SizeExpr(), 0)
            out[name] = quotient, None if residue is None else (terms, k), c
        return out

    @cached_property
    def _atoms_unaliased(self) -> dict[str, tuple[SizeExpr, int]]:
        """`atoms` without the floor divisions an alias replaces (each its first's size)."""
        return {n: a for n, a in self.atoms.items() if n not in self.aliases}

    def floordiv(self, expr: SizeExpr, divisor: int) -> SizeExpr | None:
        """floor(expr / divisor) (`expr` of any symbols of the table) as a polynomial of the
        table's symbols, or None where its floor division is no symbol of the table. Where the
        conditions narrow the remainder of `expr`'s terms other than its constant
        (`remainders`), a floor division of the same terms and another constant may be the
        same plus a number at every remainder left: `(h + 1) floordiv 2` is `h floordiv 2`
        for an even `h`, `h floordiv 16` is `(h + 4) floordiv 16` where `h mod 8` is below 4."""
        expanded = self.expand(expr)
        found = self._floordiv_by_atoms(expanded, divisor)
        return found if found is not None else self._floordiv_by_remainders(expanded, divisor)

    def _floordiv_by_remainders(self, expanded: SizeExpr, divisor: int) -> SizeExpr | None:
        """floor(expanded / divisor) as a floor division of the table over the same terms
        with another constant, plus the number by which they differ at every remainder the
        conditions leave (`remainders`), or None."""
        quotient, residue, k = split_floordiv(expanded, divisor, self._atoms_unaliased)
        if residue is None or not self.remainders:
            return None
        terms, c = split_constant(residue)
        left = self.remainder_values(terms, k)
        if left is None:
            return None
        for name in self._atoms_unaliased:
            q, n, c_atom = self._split_atoms[name]
            if n != (terms, k):
                continue
            differences = {(r + c) // k - (r + c_atom) // k for r in left}
            if len(differences) == 1:
                return quotient - q + SizeExpr.symbol(name) + SizeExpr.constant(differences.pop())
        return None

    def _remainders_of(self, terms: SizeExpr, k: int) -> frozenset[int] | None:
        """The values `terms mod k` takes, from each known remainder of `terms` by a divisor
        of `k` (`remainders`: `n mod k'` in R gives `n mod k` in {r + j * k'}), or None where
        none is known."""
        left: frozenset[int] | None = None
        for (n, k_known), allowed in self.remainders.items():
            if k % k_known or SizeExpr.of((m, c % k_known) for m, c in terms.terms) != n:
                continue
            lifted = frozenset(r + j * k_known for r in allowed for j in range(k // k_known))
            left = lifted if left is None else left & lifted
        return left

    def _floordiv_by_atoms(self, expanded: SizeExpr, divisor: int) -> SizeExpr | None:
        """floor(expanded / divisor) (`expanded` of atoms) as a polynomial of the table's
        symbols by its atoms alone (`split_floordiv`), or None."""
        quotient, residue, d = split_floordiv(expanded, divisor, self.atoms)
        if residue is None:
            return quotient
        for name, atom in self.atoms.items():
            if atom == (residue, d):
                return quotient + SizeExpr.symbol(name)
        return None

    def at_most(self, lhs: int | str, rhs: int | str) -> bool:
        """Whether size `lhs` is at most `rhs` at every call: their difference is nonnegative
        from the symbols' lowest sizes on (`provably_nonnegative`), or a condition of the
        table says so (`s58 <= s77`, which torch's checks of a gather's sizes add). A dim of
        unknown size (-1) is at most nothing."""
        if any(isinstance(d, int) and d < 0 for d in (lhs, rhs)):
            return False
        small, large = self.expand(SizeExpr.dim(lhs)), self.expand(SizeExpr.dim(rhs))
        lows = {name: self.lowest(name) for name in (small - large).symbols}
        if provably_nonnegative(large - small, lows):
            return True
        return any(
            c.kind in ("le", "lt") and (self.expand(c.lhs), self.expand(c.rhs)) == (small, large)
            for c in self.conditions
        )

    def symbol_for(self, expr: SizeExpr) -> str | None:
        """The symbol whose polynomial is `expr` (of any symbols of the table), if any."""
        target = self.expand(expr)
        for name, e in self.expansions.items():
            if e == target:
                return name
        return None

    def with_size(self, expr: SizeExpr) -> tuple[SizesAttr, int | str]:
        """`expr` (of any symbols of the table) as a dim, and the table that names it: its
        constant, or the symbol whose polynomial it is, or a new derived symbol (`e0`,
        `e1`, ... the first name free) in a copy of the table with it appended."""
        constant = self.expand(expr).as_constant
        if constant is not None:
            return self, constant
        name = self.symbol_for(expr)
        if name is not None:
            return self, name
        name = next(f"e{i}" for i in count() if f"e{i}" not in self.by_name)
        symbol = SizeSymbol.derived(name, expr)
        entries: tuple[SizeEntry, ...] = (
            *self.symbols,
            symbol,
            *self.relations,
            *self.conditions,
        )
        return SizesAttr(entries), name

    def evaluate(self, inputs: Mapping[str, int]) -> dict[str, int]:
        """Every symbol's size, given the input symbols' sizes (`evaluate_sizes`)."""
        return evaluate_sizes(self.symbols, inputs)

    def too_small(self, sizes: Mapping[str, int]) -> SizeSymbol | None:
        """The first derived symbol whose size in `sizes` (`evaluate`'s) is below `MIN_SIZE`,
        if any: a call at such sizes is not one the table describes (a symbol is never 0 or 1,
        so broadcasting it is unambiguous)."""
        for s in self.symbols:
            if s.expr is not None and sizes[s.name] < MIN_SIZE:
                return s
        return None

    def broken_relation(self, sizes: Mapping[str, int]) -> tuple[SizeRelation, int, int] | None:
        """The first relation that the input symbols' sizes in `sizes` do not satisfy, with
        its two sides' values, if any: a call at such sizes is not one the table describes."""
        for r in self.relations:
            lhs, rhs = r.lhs_expr.evaluate(sizes), r.rhs.evaluate(sizes)
            if lhs != rhs:
                return r, lhs, rhs
        return None

    def relation_problem(self, sizes: Mapping[str, int]) -> str | None:
        """Why a call at `sizes` (of the input symbols, at least) is not one the table
        describes, in one line, where it breaks a relation (`broken_relation`); else None."""
        broken = self.broken_relation(sizes)
        if broken is None:
            return None
        relation, lhs, rhs = broken
        return (
            f"sizes {relation.lhs_expr} = {lhs} and {relation.rhs} = {rhs} differ at "
            f"{_sizes_text(relation.symbols, sizes)}: the program was compiled for calls where "
            "torch's trace checked them equal"
        )

    def condition_problem(self, sizes: Mapping[str, int]) -> str | None:
        """Why a call at `sizes` (of every symbol, `evaluate`'s) is not one the table
        describes, in one line, where a condition does not hold at them; else None."""
        for c in self.conditions:
            lhs, rhs = c.lhs.evaluate(sizes), c.rhs.evaluate(sizes)
            if not c.holds(lhs, rhs):
                sides = "".join(
                    f" ({side} = {value})"
                    for side, value in ((c.lhs, lhs), (c.rhs, rhs))
                    if str(side) not in c.symbols and side.as_constant is None
                )
                return (
                    f"{c.comparison} does not hold at {_sizes_text(c.symbols, sizes)}{sides}: "
                    "the program was compiled for calls where torch's trace assumed it"
                )
        return None

    def inputs(self) -> list[SizeSymbol]:
        return [s for s in self.symbols if s.expr is None]

    def lowest(self, name: str) -> int:
        """The smallest size symbol `name` takes at a call: an input symbol's range's low end
        (torch's guards raise it: `x[:, 3]` holds from 4), a derived one's `MIN_SIZE`."""
        return lowest_of(self.by_name.get(name))

    # -- verification ---------------------------------------------------------------------------

    @cached_property
    def problem(self) -> VerifyException | None:
        """Why the table is not well formed, or None; the graph ops that read the table raise
        it (`OpKind.verify`), so that the error points at an op of the function."""
        try:
            self.check()
        except VerifyException as e:
            return e
        return None

    def check(self) -> None:
        _verify_relations(self.symbols, self.relations)
        _verify_conditions(self.symbols, self.conditions)
        expanded: dict[str, SizeExpr] = {}
        sources: dict[tuple[int, int], str] = {}
        names_of: dict[SizeExpr, str] = {}
        atoms: dict[str, tuple[SizeExpr, int]] = {}
        for s in self.symbols:
            if not SYMBOL_NAME.fullmatch(s.name):
                raise VerifyException(f"expected a size symbol name, found '{s.name}'")
            if s.name in expanded:
                raise VerifyException(f"size symbol '{s.name}' is defined twice")
            if s.expr is None:
                _verify_input_symbol(s, sources)
                expansion = SizeExpr.symbol(s.name)
            else:
                unknown = sorted(s.expr.symbols - set(expanded))
                if unknown:
                    raise VerifyException(
                        f"size symbol '{s.name}' = {s.expr} uses '{unknown[0]}', which is not "
                        "defined before it"
                    )
                expansion = reduce_by(s.expr.substitute(expanded), self.relations)
                if s.divisor is not None:
                    _verify_floordiv(s, expansion, atoms)
                    atoms[s.name] = (expansion, s.divisor)
                    expansion = SizeExpr.symbol(s.name)
                elif expansion.as_constant is not None:
                    raise VerifyException(
                        f"size symbol '{s.name}' = {s.expr} is the constant "
                        f"{expansion.as_constant}: write it as a static size"
                    )
            if expansion in names_of:
                raise VerifyException(
                    f"size symbols '{names_of[expansion]}' and '{s.name}' are the same size "
                    f"({expansion}): use one symbol"
                )
            names_of[expansion] = s.name
            expanded[s.name] = expansion


def _verify_relations(symbols: tuple[SizeSymbol, ...], relations: tuple[SizeRelation, ...]) -> None:
    """Each relation is of input symbols, rewrites a monomial of degree 2 or more into smaller
    ones (`monomial_key`, so that `reduce_by` ends), and no two rewrite the same monomial."""
    rank = {s.name: i for i, s in enumerate(symbols) if s.expr is None}
    seen: set[Monomial] = set()
    for r in relations:
        unknown = sorted(r.symbols - rank.keys())
        if unknown:
            raise VerifyException(f"relation {r} uses '{unknown[0]}', which is no input symbol")
        if len(r.lhs) < 2:
            raise VerifyException(
                f"relation {r} rewrites a monomial of degree {len(r.lhs)}: an equal input size "
                "is the same symbol"
            )
        key = monomial_key(r.lhs, rank)
        if any(monomial_key(m, rank) >= key for m, _ in r.rhs.terms):
            raise VerifyException(
                f"relation {r} is not oriented: its right-hand side has a monomial not smaller "
                "than its left-hand side (degree first, then the later input symbols)"
            )
        if r.lhs in seen:
            raise VerifyException(f"relation {r} rewrites a monomial an earlier one rewrites")
        seen.add(r.lhs)


def _verify_conditions(
    symbols: tuple[SizeSymbol, ...], conditions: tuple[SizeCondition, ...]
) -> None:
    """Each condition is of the table's symbols, and has one: a condition of constants holds
    at every call or at none."""
    names = {s.name for s in symbols}
    for c in conditions:
        unknown = sorted(c.symbols - names)
        if unknown:
            raise VerifyException(f"condition {c} uses '{unknown[0]}', which is no size symbol")
        if not c.symbols:
            raise VerifyException(
                f"condition {c} has no size symbol: it holds at every call or at none"
            )


def _sizes_text(names: Iterable[str], sizes: Mapping[str, int]) -> str:
    """`s0 = 2, s1 = 3`: the sizes of the symbols `names`, sorted by name."""
    return ", ".join(f"{name} = {sizes[name]}" for name in sorted(names))


def _verify_floordiv(s: SizeSymbol, expansion: SizeExpr, atoms: Atoms) -> None:
    """A floor division is canonical (`split_floordiv`) and no other one's pair."""
    assert s.divisor is not None
    if s.divisor < MIN_SIZE:
        raise VerifyException(
            f"size symbol '{s.name}' = {s.definition} divides by {s.divisor}: a floor "
            f"division's divisor is {MIN_SIZE} or more"
        )
    quotient, residue, divisor = split_floordiv(expansion, s.divisor, atoms)
    if quotient != SizeExpr() or (residue, divisor) != (expansion, s.divisor):
        canonical = "0" if residue is None else f"({residue}) floordiv {divisor}"
        raise VerifyException(
            f"size symbol '{s.name}' = {s.definition} is not in canonical form: it is "
            f"{quotient} + {canonical} (in input symbols and floor divisions)"
        )
    for name, atom in atoms.items():
        if atom == (expansion, s.divisor):
            raise VerifyException(
                f"size symbols '{name}' and '{s.name}' are the same size ({s.definition}): "
                "use one symbol"
            )


def _verify_input_symbol(s: SizeSymbol, sources: dict[tuple[int, int], str]) -> None:
    assert s.source is not None
    if s.low < MIN_SIZE:
        raise VerifyException(
            f"size symbol '{s.name}' has range [{s.low}, ...]: a symbol's range starts at "
            f"{MIN_SIZE} or more (sizes 0 and 1 are specialised)"
        )
    if s.high is not None and s.high < s.low:
        raise VerifyException(f"size symbol '{s.name}' has an empty range [{s.low}, {s.high}]")
    if s.hint < s.low or (s.high is not None and s.hint > s.high):
        high = "inf" if s.high is None else s.high
        raise VerifyException(
            f"size symbol '{s.name}' has hint {s.hint} outside its range [{s.low}, {high}]"
        )
    if s.source in sources:
        arg, dim = s.source
        raise VerifyException(
            f"size symbols '{sources[s.source]}' and '{s.name}' both read input({arg}, {dim})"
        )
    sources[s.source] = s.name
