"""Symbolic sizes (docs/dynamic-shapes.md): the polynomials sizes are, the tensor encoding that
names the size symbol of each dynamic dim (`tensor<?x8xf32, #graph.syms<s0>>`), and the
function's table of size symbols (`graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range
[2, 4096], s1 = 8 * s0>`).

An input symbol is read from a dim of an argument of `@forward`; a derived one is a
polynomial with integer coefficients of earlier symbols. No two symbols of a table have the
same polynomial once derived symbols are expanded into input ones, so two dynamic dims are
equal exactly when they name the same symbol."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

from xdsl.ir import Data
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

MIN_SIZE = 2
"""The smallest size a symbol takes: sizes 0 and 1 specialise, as in Inductor and
torch.export (a symbol is never 1, so it broadcasts only against 1 or itself)."""

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


# ---------------------------------------------------------------------------------------------
# The function's table of size symbols
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SizeSymbol:
    """One entry of a `graph.sizes` table: an input symbol (`source`, `hint`, range `[low,
    high]`, `high` None for no bound) or a derived one (`expr` of earlier symbols)."""

    name: str
    source: tuple[int, int] | None = None
    """(argument, dim) of `@forward` the size is read from."""
    hint: int = 0
    low: int = MIN_SIZE
    high: int | None = None
    expr: SizeExpr | None = None

    @staticmethod
    def input(
        name: str, arg: int, dim: int, hint: int, low: int = MIN_SIZE, high: int | None = None
    ) -> SizeSymbol:
        return SizeSymbol(name, (arg, dim), hint, low, high)

    @staticmethod
    def derived(name: str, expr: SizeExpr) -> SizeSymbol:
        return SizeSymbol(name, expr=expr)

    def __str__(self) -> str:
        if self.expr is not None:
            return f"{self.name} = {self.expr}"
        assert self.source is not None
        high = "inf" if self.high is None else str(self.high)
        arg, dim = self.source
        return f"{self.name} = input({arg}, {dim}) hint {self.hint} range [{self.low}, {high}]"


@irdl_attr_definition
class SizesAttr(Data[tuple[SizeSymbol, ...]]):
    """The size symbols of a function, in definition order (the `graph.sizes` attribute of
    `func.func`). `#graph.sizes<s0 = input(0, 0) hint 4 range [2, inf], s1 = 8 * s0>`"""

    name = "graph.sizes"

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> tuple[SizeSymbol, ...]:
        def entry() -> SizeSymbol:
            name = parser.parse_identifier(" (a size symbol)")
            parser.parse_punctuation("=")
            if parser.parse_optional_keyword("input") is None:
                return SizeSymbol.derived(name, parse_size_expr(parser))
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

        with parser.in_angle_brackets():
            entries = parser.parse_comma_separated_list(parser.Delimiter.NONE, entry)
        return tuple(entries)

    def print_parameter(self, printer: Printer) -> None:
        printer.print_string("<" + ", ".join(str(s) for s in self.data) + ">")

    # -- reading the table ----------------------------------------------------------------------

    @cached_property
    def by_name(self) -> dict[str, SizeSymbol]:
        return {s.name: s for s in self.data}

    @cached_property
    def expansions(self) -> dict[str, SizeExpr]:
        """Each symbol as a polynomial of input symbols."""
        out: dict[str, SizeExpr] = {}
        for s in self.data:
            out[s.name] = SizeExpr.symbol(s.name) if s.expr is None else s.expr.substitute(out)
        return out

    @cached_property
    def hints(self) -> dict[str, int]:
        """Each symbol's size at the hints of the input symbols (the example's sizes)."""
        inputs = {s.name: s.hint for s in self.data if s.expr is None}
        return {name: e.evaluate(inputs) for name, e in self.expansions.items()}

    def expand(self, expr: SizeExpr) -> SizeExpr:
        """`expr` with every symbol of the table expanded into input symbols."""
        return expr.substitute(self.expansions)

    def symbol_for(self, expr: SizeExpr) -> str | None:
        """The symbol whose polynomial is `expr` (of any symbols of the table), if any."""
        target = self.expand(expr)
        for name, e in self.expansions.items():
            if e == target:
                return name
        return None

    def evaluate(self, inputs: Mapping[str, int]) -> dict[str, int]:
        """Every symbol's size, given the input symbols' sizes."""
        return {name: e.evaluate(inputs) for name, e in self.expansions.items()}

    def inputs(self) -> list[SizeSymbol]:
        return [s for s in self.data if s.expr is None]

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
        expanded: dict[str, SizeExpr] = {}
        sources: dict[tuple[int, int], str] = {}
        names_of: dict[SizeExpr, str] = {}
        for s in self.data:
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
                expansion = s.expr.substitute(expanded)
                if expansion.as_constant is not None:
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
