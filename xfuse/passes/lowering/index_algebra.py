"""
Affine index expressions of loop variables, as `lower-to-loops` indexes buffers: `Affine` is
const + sum(coef * atom), its atoms loop variables, floor divisions and moduli by constants,
clamped or reflected indices (windows), gathered ones (`graph.gather`), an index known to lie in
a narrower range where it is read (`Within`: a concatenation's index into one input) and, in
kernels with
symbolic sizes, a symbol's runtime size (`Size`) and products, floor divisions and moduli by
runtime sizes (`SizedMul`, `SizedDiv`, `SizedMod`) and an index clamped to one
(`SizedClamp`). `floordiv`, `mod`
and the recombination of `x mod a + a * (x floordiv a)` into `x` simplify, so that a reshape
chain that ends where it started costs nothing; `bounds` gives an expression's range over its
variables' extents, which decides the tests a window's guards need.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from xdsl.ir import SSAValue

from xfuse.dialects.graph.layout import row_major_strides


@dataclass(frozen=True)
class LoopVar:
    """The induction variable of one loop, over [0, extent); over a symbolic size, `size`
    names its symbol and `extent` is an upper bound of it (what `bounds` reasons with)."""

    ident: int
    extent: int
    size: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class FloorDiv:
    arg: Affine
    divisor: int


@dataclass(frozen=True)
class Mod:
    arg: Affine
    modulus: int


@dataclass(frozen=True)
class Clamp:
    """min(max(arg, low), high): replicate padding, and the in-bounds address of a guarded
    load."""

    arg: Affine
    low: int
    high: int


@dataclass(frozen=True)
class Reflect:
    """`arg` mirrored into [0, size) without repeating the edge, for arg in
    (-size, 2 * size - 1): (size - 1) - |(size - 1) - |arg||."""

    arg: Affine
    size: int


@dataclass(frozen=True)
class Within:
    """`arg`, known to lie in [low, high] where it is read: a concatenation's index into one
    of its inputs, in the branch whose test bounds it (`r - 1` for `r` in [1, 196]), so that
    a floor division or modulo of it by the input's sizes simplifies as of that range."""

    arg: Affine
    low: int
    high: int


@dataclass(frozen=True, repr=False)
class Gathered:
    """A data-dependent index (`graph.gather`): the element of the group's value `indices`
    at `at`, wrapped when negative (`wrap`) and clamped to [0, size), so that a load at it
    never leaves its buffer (an index outside is reported through the kernel's error flag)."""

    indices: SSAValue
    at: Index
    size: int
    """The indexed dim's size; of a symbolic one (`symbol`), an upper bound of it."""
    wrap: bool
    symbol: str | None = None
    """The size symbol of a symbolic indexed dim, whose runtime size the index is checked
    against (docs/dynamic-shapes.md)."""

    def __repr__(self) -> str:  # the sort key of `make_affine`: stable, cheap
        return f"Gathered({id(self.indices)}, {self.at}, {self.size}, {self.wrap}, {self.symbol})"


@dataclass(frozen=True)
class Size:
    """The runtime size of symbol `name` (a kernel's size argument, or a derived symbol's
    polynomial of them), in [low, high]: the offset of a concatenation's input along a
    symbolic dim."""

    name: str
    low: int
    high: int


Dims = tuple[int | str, ...]
"""Static sizes and size symbols, whose product a `Sized*` atom takes at run time."""


@dataclass(frozen=True)
class SizedMul:
    """arg * product(factor), the product in [low, high]: a linear offset's term where the
    strides hold size symbols."""

    arg: Affine
    factor: Dims
    low: int
    high: int


@dataclass(frozen=True)
class SizedDiv:
    """floor(arg / product(divisor)) of a non-negative `arg`, the product taken at run time."""

    arg: Affine
    divisor: Dims


@dataclass(frozen=True)
class SizedMod:
    """arg mod product(modulus) of a non-negative `arg`, the product at most `high`."""

    arg: Affine
    modulus: Dims
    high: int


@dataclass(frozen=True)
class SizedClamp:
    """min(max(arg, 0), size - 1), the size a symbol's at run time: the in-bounds address of
    a guarded load along a padded symbolic dim."""

    arg: Affine
    size: Size


Atom = (
    LoopVar
    | FloorDiv
    | Mod
    | Clamp
    | Reflect
    | Within
    | Gathered
    | Size
    | SizedMul
    | SizedDiv
    | SizedMod
    | SizedClamp
)

UNBOUNDED = 1 << 62
"""The upper bound of a size symbol without a finite one (buffers are smaller than 2^63
bytes)."""


@dataclass(frozen=True)
class Affine:
    """const + sum(coef * atom): atoms are non-negative; a coefficient is negative only where
    an index counts down (a flipped dim's `n - 1 - i`), and the arguments of floor division
    and modulo have positive coefficients (see `floordiv`, `mod`)."""

    terms: tuple[tuple[Atom, int], ...] = ()
    const: int = 0

    def __hash__(self) -> int:
        # Hashed once: expressions nest (an atom holds its argument's `Affine`), and every
        # memoized function of one (`index_cache`) hashes it on each call.
        found: int | None = self.__dict__.get("_hash")
        if found is None:
            found = hash((self.terms, self.const))
            object.__setattr__(self, "_hash", found)
        return found

    def __reduce__(self) -> tuple[type[Affine], tuple[tuple[tuple[Atom, int], ...], int]]:
        return Affine, (self.terms, self.const)  # not the hash: strings hash per process


Index = tuple[Affine, ...]
ZERO = Affine()

index_cache = lru_cache(maxsize=1 << 16)
"""The memo of the functions of `Affine` expressions: bounded, since a `Gathered` atom holds an
SSA value of the group it was made for (an unbounded cache would keep every program alive)."""


def constant_index(c: int) -> Affine:
    return Affine((), c)


def var_index(v: LoopVar) -> Affine:
    return Affine(((v, 1),), 0)


@index_cache
def bounds(e: Affine) -> tuple[int, int]:
    """Smallest and largest value of `e` over its variables' ranges."""
    lo = hi = e.const
    for atom, k in e.terms:
        a_lo, a_hi = _atom_bounds(atom)
        lo, hi = lo + min(k * a_lo, k * a_hi), hi + max(k * a_lo, k * a_hi)
    return lo, hi


def _atom_bounds(a: Atom) -> tuple[int, int]:
    if isinstance(a, LoopVar):
        return 0, max(0, a.extent - 1)
    if isinstance(a, FloorDiv):
        lo, hi = bounds(a.arg)
        return lo // a.divisor, hi // a.divisor
    if isinstance(a, Clamp):
        lo, hi = bounds(a.arg)
        return min(max(lo, a.low), a.high), min(max(hi, a.low), a.high)
    if isinstance(a, Reflect):
        return 0, max(0, a.size - 1)
    if isinstance(a, Within):
        return a.low, a.high
    if isinstance(a, Gathered):
        return 0, max(0, a.size - 1)
    if isinstance(a, Size):
        return a.low, a.high
    if isinstance(a, SizedClamp):
        lo, hi = bounds(a.arg)
        last = max(0, a.size.high - 1)
        return min(max(lo, 0), last), min(max(hi, 0), last)
    if isinstance(a, SizedMul):
        lo, hi = bounds(a.arg)
        ends = (lo * a.low, lo * a.high, hi * a.low, hi * a.high)
        return min(ends), max(ends)
    if isinstance(a, SizedDiv):
        return 0, max(0, bounds(a.arg)[1])
    if isinstance(a, SizedMod):
        return 0, max(0, min(bounds(a.arg)[1], a.high - 1))
    return 0, a.modulus - 1


@index_cache
def loop_vars(e: Affine) -> frozenset[int]:
    out: set[int] = set()
    for atom, _ in e.terms:
        if isinstance(atom, LoopVar):
            out.add(atom.ident)
        elif isinstance(atom, Gathered):
            out |= index_vars(atom.at)
        elif not isinstance(atom, Size):
            out |= loop_vars(atom.arg)
    return frozenset(out)


@index_cache
def is_gathered(e: Affine) -> bool:
    """Whether `e` reads an index tensor (then it is computed only where its loads may run)."""
    return any(
        isinstance(a, Gathered) or (not isinstance(a, LoopVar | Size) and is_gathered(a.arg))
        for a, _ in e.terms
    )


def index_vars(index: Sequence[Affine]) -> frozenset[int]:
    return frozenset().union(*(loop_vars(e) for e in index))


@index_cache
def _order(atom: Atom) -> str:
    """The key that orders an `Affine`'s terms: the atom's repr (made once per atom)."""
    return repr(atom)


def _by_order(term: tuple[Atom, int]) -> str:
    return _order(term[0])


def make_affine(terms: dict[Atom, int], const: int = 0) -> Affine:
    terms, const = _recombine({a: k for a, k in terms.items() if k}, const)
    items = tuple(terms.items())
    return Affine(items if len(items) < 2 else tuple(sorted(items, key=_by_order)), const)


def add(*es: Affine) -> Affine:
    terms: dict[Atom, int] = {}
    const = 0
    for e in es:
        for a, k in e.terms:
            terms[a] = terms.get(a, 0) + k
        const += e.const
    return make_affine(terms, const)


def scale(e: Affine, k: int) -> Affine:
    return make_affine({a: c * k for a, c in e.terms}, e.const * k)


def _common_factor(e: Affine, c: int) -> tuple[int, Affine, Affine] | None:
    """`e` as `g * high + low` with `g` a divisor of `c` (above 1) and `low` in [0, g): the
    terms whose coefficients `g` divides, divided by it, and the rest (a row's offset times
    its width plus a column: `96 * r + c` over a multiple of 96). None where no such split is."""
    candidates = sorted({math.gcd(c, k) for _, k in e.terms if k > 0} - {1}, reverse=True)
    for g in candidates:
        high = make_affine({a: k // g for a, k in e.terms if k % g == 0})
        low = make_affine({a: k for a, k in e.terms if k % g}, e.const)
        low_lo, low_hi = bounds(low)
        if high.terms and 0 <= low_lo and low_hi < g and bounds(high)[0] >= 0:
            return g, high, low
    return None


def floordiv(e: Affine, c: int) -> Affine:
    """floor(e / c), simplified: multiples of c leave the division, a remainder known to lie
    in [0, c) vanishes, and so does a part below a common factor of c and the other terms
    (`floor((g*h + l) / c) = floor(h / (c/g))` for `l` in [0, g))."""
    if c == 1:
        return e
    lo, hi = bounds(e)
    if 0 <= lo and lo // c == hi // c:
        return constant_index(lo // c)
    quotient = {a: k // c for a, k in e.terms}
    whole, rest_const = divmod(e.const, c)
    rest = make_affine({a: k % c for a, k in e.terms}, rest_const)
    if bounds(rest)[1] < c:
        remainder = ZERO
    elif (split := _common_factor(rest, c)) is not None:
        g, high, _ = split
        remainder = floordiv(high, c // g)
    elif (
        rest.const == 0
        and len(rest.terms) == 1
        and rest.terms[0][1] == 1
        and isinstance(rest.terms[0][0], FloorDiv)
    ):
        inner = rest.terms[0][0]
        remainder = floordiv(inner.arg, inner.divisor * c)
    else:
        remainder = Affine(((FloorDiv(rest, c), 1),))
    return add(make_affine(quotient, whole), remainder)


def mod(e: Affine, c: int) -> Affine:
    """e mod c (non-negative), simplified like `floordiv`."""
    if c == 1:
        return ZERO
    lo, hi = bounds(e)
    if 0 <= lo and hi < c:
        return e
    rest = make_affine({a: k % c for a, k in e.terms}, e.const % c)
    if bounds(rest)[1] < c:
        return rest
    if (split := _common_factor(rest, c)) is not None:
        g, high, low = split
        return add(scale(mod(high, c // g), g), low)
    if rest.const == 0 and len(rest.terms) == 1 and rest.terms[0][1] == 1:
        inner = rest.terms[0][0]
        if isinstance(inner, Mod) and inner.modulus % c == 0:
            return mod(inner.arg, c)
    return Affine(((Mod(rest, c), 1),))


def clamp(e: Affine, low: int, high: int) -> Affine:
    """min(max(e, low), high): `e` itself where its bounds lie in [low, high]."""
    lo, hi = bounds(e)
    return e if low <= lo and hi <= high else Affine(((Clamp(e, low, high), 1),))


def within(e: Affine, low: int, high: int) -> Affine:
    """`e` where it is known to lie in [low, high] (`Within`): `e` itself where its bounds
    already do, a constant where the range holds one value."""
    lo, hi = bounds(e)
    narrow_lo, narrow_hi = max(lo, low), min(hi, high)
    if narrow_lo > narrow_hi or (narrow_lo, narrow_hi) == (lo, hi):
        return e
    if narrow_lo == narrow_hi:
        return constant_index(narrow_lo)
    return Affine(((Within(e, narrow_lo, narrow_hi), 1),))


def sized_clamp(e: Affine, size: Size) -> Affine:
    """min(max(e, 0), size - 1) of a runtime `size` (`SizedClamp`): `e` itself where its
    bounds lie in [0, the size's lowest value)."""
    lo, hi = bounds(e)
    return e if 0 <= lo and hi < size.low else Affine(((SizedClamp(e, size), 1),))


def reflect(e: Affine, size: int) -> Affine:
    """`e` mirrored into [0, size) (`Reflect`): `e` itself where its bounds lie in [0, size)."""
    lo, hi = bounds(e)
    return e if 0 <= lo and hi < size else Affine(((Reflect(e, size), 1),))


def _recombine(terms: dict[Atom, int], const: int) -> tuple[dict[Atom, int], int]:
    """Fold `k*(x mod a) + k*a*(x floordiv a)` into `k*x` and `k*(x mod a) + k*a*((x floordiv
    a) mod b)` into `k*(x mod a*b)`: what linearizing a delinearized index leaves."""
    changed = True
    while changed:
        changed = False
        for atom, k in list(terms.items()):
            if not isinstance(atom, Mod):
                continue
            x, a = atom.arg, atom.modulus
            div = FloorDiv(x, a)
            if terms.get(div) == k * a:
                del terms[atom], terms[div]
                merged = scale(x, k)
            else:
                outer = next(
                    (
                        o
                        for o, ko in terms.items()
                        if isinstance(o, Mod) and ko == k * a and o.arg == Affine(((div, 1),))
                    ),
                    None,
                )
                if outer is None:
                    continue
                del terms[atom], terms[outer]
                merged = scale(mod(x, a * outer.modulus), k)
            for t, c in merged.terms:
                terms[t] = terms.get(t, 0) + c
            const += merged.const
            changed = True
            break
    return terms, const


def linearize(index: Sequence[Affine], shape: Sequence[int]) -> Affine:
    return add(*(scale(e, s) for e, s in zip(index, row_major_strides(shape), strict=True)))


def delinearize(e: Affine, shape: Sequence[int]) -> Index:
    """The index of the element at linear offset `e` of `shape`. A dynamic dim (negative) may
    only be the first: its element is `e` divided by its static stride (no modulo, `e` being
    less than the element count)."""
    if 0 in shape:  # no element: the loop never runs (and its dims no strides)
        return (ZERO,) * len(shape)
    assert all(d >= 0 for d in shape[1:]), f"a dynamic dim after the first in {list(shape)}"
    return tuple(
        floordiv(e, s)
        if d < 0
        else ZERO
        if d <= 1
        else mod(floordiv(e, s), d)  # (size 0: never runs)
        for d, s in zip(shape, row_major_strides(shape), strict=True)
    )
