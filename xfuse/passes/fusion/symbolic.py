"""Fusion on symbolic sizes (docs/dynamic-shapes.md): the fusers and group-cleanup decide on
a function whose size symbols stand as *proxies*, static sizes that compare as the symbols do.

Each atom of the function's `graph.sizes` table (an input symbol or a floor division) becomes a
distinct prime larger than every static size of the function, and each other derived symbol
its polynomial of those primes (a floor division is a variable of its own here: two are one
size exactly when they are one symbol).
A prime larger than every static size divides no product of static sizes, so a dim, a shape
or an element count with a symbol never equals one without, and two of them are equal exactly
when their polynomials are (checked for the table's symbols: their proxies are distinct and
none is a static size). Legality, which compares shapes, element counts and iteration spaces,
then reasons about the symbols themselves; the bytes that scores count (`tensor_bytes`) take
each symbol at its hint. The types go back to their symbols when the pass is done: a size
the pass made that is no symbol of the table is refused in one line."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping

from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, TensorType
from xdsl.ir import Attribute, Block, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from xfuse.dialects import graph
from xfuse.errors import SymbolicSizeError
from xfuse.ir.names import SIZES_ATTR


class SymbolicPassError(SymbolicSizeError, DiagnosticException):
    """A pass that cannot handle a program's symbolic sizes (yet): one line, which the
    pipeline reports as the pass's failure."""


PROXY_HINTS: contextvars.ContextVar[Mapping[int, int] | None] = contextvars.ContextVar(
    "xfuse_proxy_hints", default=None
)
"""Proxy size -> the hint of its symbol, while a pass decides on proxies (`tensor_bytes`)."""


def hinted_numel(shape: tuple[int, ...]) -> int:
    """The element count of a shape with every proxy size at its symbol's hint."""
    hints = PROXY_HINTS.get() or {}
    n = 1
    for d in shape:
        n *= hints.get(d, d)
    return n


def _values(function: func.FuncOp) -> Iterator[SSAValue]:
    blocks: list[Block] = list(function.body.blocks)
    while blocks:
        block = blocks.pop()
        yield from block.args
        for op in block.ops:
            yield from op.results
            for region in op.regions:
                blocks.extend(region.blocks)


def _primes_above(bound: int) -> Iterator[int]:
    n = bound + 1
    while True:
        if n > 1 and all(n % k for k in range(2, int(n**0.5) + 1)):
            yield n
        n += 1


PROXY_STEPS = ((1, 1), (1, 64), (1, 4096), (16, 1))
"""How far apart the primes of two atoms lie, tried in turn until no two proxies collide, as
(factor, gap): the next atom's prime is the first at least `factor` times the last one's plus
`gap`. Consecutive primes first; farther apart where a derived symbol is an atom plus a
constant that reaches the next prime (a padded dim `s0 + 2` against `s1`); each many times the
last where a derived symbol is an atom less a multiple of another (`s1 - 2 * s0`: a
concatenation's length less two of its parts)."""


def proxy_sizes(table: graph.SizesAttr, static: set[int]) -> dict[str, int]:
    """Each symbol's proxy: atoms (input symbols, floor divisions; an alias, `SizesAttr.aliases`,
    that of the floor division it equals) distinct primes above every static size, as far
    apart as a step of `PROXY_STEPS` puts them, rising in the table's order of atoms or, where
    no step serves, in the reverse (a difference of two sizes, `s1 - s0`, is a size only where
    the first is the larger), other derived symbols their polynomials of those. Refuses a table
    whose proxies collide (two symbols, or a symbol and a static size, of one value, or a
    symbol under `MIN_SIZE`) at every step and in both orders."""
    problem = ""
    for rising in (True, False):
        for step in PROXY_STEPS:
            sizes, found = _proxies(table, static, step, rising)
            if not found:
                return sizes
            problem = problem or found
    raise SymbolicPassError(problem)


def _proxies(
    table: graph.SizesAttr, static: set[int], step: tuple[int, int], rising: bool = True
) -> tuple[dict[str, int], str]:
    """The proxies with atoms' primes a `step` (factor, gap) apart, rising in the table's
    order of atoms (`rising`) or its reverse, and why two collide ("" if none)."""
    inputs: dict[str, int] = {}
    factor, gap = step
    last = max(static | {16})
    aliases = table.aliases
    atoms = [s for s in table.symbols if s.is_atom and s.name not in aliases]
    for s in atoms if rising else reversed(atoms):
        last = inputs[s.name] = next(_primes_above(last * factor + gap - 1))
    sizes = {name: e.evaluate(inputs) for name, e in table.expansions.items()}
    seen: dict[int, str] = {}
    for name, value in sizes.items():
        if name in aliases:  # (the size of the floor division it equals)
            continue
        if value < graph.MIN_SIZE:
            return sizes, f"size symbol '{name}' is {value}, under any size, at sizes {inputs}"
        if value in static or value in seen:
            other = seen.get(value, "a static size")
            return sizes, (
                f"size symbol '{name}' cannot be told apart from {other} for fusion "
                f"(both {value} at sizes {inputs})"
            )
        seen[value] = name
    return sizes, ""


def _static_sizes(function: func.FuncOp) -> set[int]:
    return {
        d
        for v in _values(function)
        if isinstance(v.type, TensorType)
        for d in v.type.get_shape()
        if d >= 0
    }


def _retype(function: func.FuncOp, convert: dict[Attribute, Attribute]) -> None:
    """Give every value of `function` the type `convert` maps its type to (others keep
    theirs), and the function the type of its arguments and returns."""
    for value in _values(function):
        new = convert.get(value.type)
        if new is not None:
            # xDSL has no in-place retyping: the values stay, their uses with them.
            value._type = new  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue]
    block = function.body.blocks[0]
    returned = block.last_op
    outputs = (
        [v.type for v in returned.operands]
        if isinstance(returned, func.ReturnOp)
        else list(function.function_type.outputs.data)
    )
    function.function_type = FunctionType.from_lists([a.type for a in block.args], outputs)


@contextlib.contextmanager
def static_proxies(function: func.FuncOp) -> Iterator[None]:
    """Inside, `function`'s symbolic types are their proxies (static); after, the symbols
    again. A function without a `graph.sizes` table is left as it is."""
    table = function.attributes.get(SIZES_ATTR)
    if not isinstance(table, graph.SizesAttr) or not function.body.blocks:
        yield
        return
    static = _static_sizes(function)
    sizes = proxy_sizes(table, static)
    names = {value: name for name, value in sizes.items()}
    to_proxy: dict[Attribute, Attribute] = {}
    for value in _values(function):
        t = value.type
        if isinstance(t, TensorType) and graph.is_symbolic(t) and t not in to_proxy:
            shape = [d if isinstance(d, int) else sizes[d] for d in graph.dims_of(t)]
            to_proxy[t] = TensorType(t.element_type, shape)
    _retype(function, to_proxy)
    token = PROXY_HINTS.set({sizes[n]: h for n, h in table.hints.items()})
    try:
        yield
    finally:
        PROXY_HINTS.reset(token)
        bound = max(static | {16})
        back: dict[Attribute, Attribute] = {}
        for value in _values(function):
            t = value.type
            if isinstance(t, TensorType) and t not in back:
                if any(d in names or d > bound for d in t.get_shape()):
                    back[t] = _symbolic_type(t, names, bound)
        _retype(function, back)


def _symbolic_type(
    t: TensorType[Attribute], names: Mapping[int, str], bound: int
) -> TensorType[Attribute]:
    """`t` with each proxy size its symbol again; a size above every static size that is no
    proxy (a product of symbols the pass made) is refused."""
    dims: list[graph.Dim] = []
    for d in t.get_shape():
        if d in names:
            dims.append(names[d])
        elif d > bound:
            raise SymbolicPassError(
                f"fusion made a dim of a size no symbol of the function's {SIZES_ATTR} table "
                f"names ({t})"
            )
        else:
            dims.append(d)
    return graph.tensor_of(t.element_type, dims)
