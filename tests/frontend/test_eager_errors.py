"""Errors exactly where eager raises them: arguments eager refuses (mismatched dtypes, dtypes a
kernel lacks, index and condition dtypes) raise eager's error type and first line through
import, `xfuse.compile` (at compile time, and at call time for a call with other dtypes) and
`torch.compile(backend="xfuse")`; arguments eager takes compute eager's result dtype."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xfuse
from xfuse import dynamo
from xfuse.errors import XfuseError
from xfuse.frontend import import_module
from xfuse.frontend.eager_rules import (
    PROBED,
    EagerArgumentError,
    EagerNotImplementedError,
    eager_error,
)

f32, f64, i64, i32 = torch.float32, torch.float64, torch.int64, torch.int32


def eager_failure(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> BaseException:
    with torch.no_grad():
        try:
            fn(*inputs)
        except Exception as e:  # noqa: BLE001 - the error under test
            return e
    raise AssertionError("eager computes this")


def first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0]


def assert_same_error(got: BaseException, want: BaseException) -> None:
    assert isinstance(got, XfuseError), f"{type(got).__name__}: {got}"
    assert isinstance(got, type(want)), f"{type(got).__mro__} is no {type(want).__name__}"
    assert str(got) == first_line(want)


def compile_error(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> BaseException:
    with torch.no_grad(), pytest.raises(Exception) as info:
        xfuse.compile(fn, inputs, quiet=True)(*inputs)
    return info.value


# ---------------------------------------------------------------------------------------------
# A Linear of a wrong input, through every entry point
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [i64, f64])
def test_linear_with_another_input_dtype_raises_eagers_error(dtype: torch.dtype) -> None:
    m = nn.Linear(4, 3).eval()
    x = torch.ones(2, 4, dtype=dtype)
    want = eager_failure(m, (x,))
    assert_same_error(compile_error(m, (x,)), want)
    with pytest.raises(EagerArgumentError) as info:
        import_module(m, (x,))
    assert_same_error(info.value, want)


@pytest.mark.parametrize("dtype", [i64, f64])
def test_linear_through_torch_compile_raises_eagers_error(dtype: torch.dtype) -> None:
    torch._dynamo.reset()
    m = nn.Linear(4, 3).eval()
    x = torch.ones(2, 4, dtype=dtype)
    want = eager_failure(m, (x,))
    compiled = torch.compile(m, backend="xfuse", options={"fallback": "error"})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning: eager would raise as well
        with pytest.raises(type(want)) as info:
            compiled(x)
    assert first_line(info.value) == first_line(want)


def test_a_call_with_another_dtype_raises_where_eager_raises() -> None:
    """Compiled for f32, called with f64: the call raises, it does not compute."""
    m = nn.Linear(4, 3).eval()
    with torch.no_grad():
        compiled = xfuse.compile(m, (torch.ones(2, 4),), quiet=True)
        x = torch.ones(2, 4, dtype=f64)
        with pytest.raises(EagerArgumentError) as info:
            compiled(x)
        assert_same_error(info.value, eager_failure(m, (x,)))
        torch.testing.assert_close(compiled(torch.ones(2, 4)), m(torch.ones(2, 4)))


# ---------------------------------------------------------------------------------------------
# Ops whose eager kernels refuse some dtypes
# ---------------------------------------------------------------------------------------------

REFUSED: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
    "mm f32 @ f64": (torch.mm, (torch.ones(2, 3), torch.ones(3, 4, dtype=f64))),
    "matmul f64 @ f32": (torch.matmul, (torch.ones(2, 3, dtype=f64), torch.ones(3, 4))),
    "mm of bools": (torch.mm, (torch.ones(2, 3, dtype=torch.bool), torch.ones(3, 2).bool())),
    "addmm f16 bias": (
        torch.addmm,
        (torch.ones(2, 4, dtype=torch.half), torch.ones(2, 3), torch.ones(3, 4)),
    ),
    "conv2d f64 input, f32 weight": (
        F.conv2d,
        (torch.ones(1, 2, 5, 5, dtype=f64), torch.ones(3, 2, 3, 3)),
    ),
    "index_select with a float index": (
        lambda x, i: torch.index_select(x, 0, i),
        (torch.ones(3, 2), torch.zeros(2)),
    ),
    "layer_norm f64 input, f32 weight": (
        lambda x, w: F.layer_norm(x, (3,), w),
        (torch.ones(2, 3, dtype=f64), torch.ones(3)),
    ),
    "group_norm f64 input, f32 weight": (
        lambda x, w: F.group_norm(x, 1, w),
        (torch.ones(2, 3, 4, dtype=f64), torch.ones(3)),
    ),
    "batch_norm f64 input, f32 stats": (
        lambda x, m, v: F.batch_norm(x, m, v, training=False),
        (torch.ones(2, 3, 4, dtype=f64), torch.zeros(3), torch.ones(3)),
    ),
    "softmax of int64": (lambda x: torch.softmax(x, -1), (torch.ones(2, 3, dtype=i64),)),
    "bf16 - bool": (lambda x, y: x - y, (torch.ones(2, 3).bfloat16(), torch.ones(2, 3).bool())),
    "bitwise and of floats": (lambda x, y: x & y, (torch.ones(2, 3), torch.ones(2, 3))),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_arguments_raise_eagers_error(case: str) -> None:
    fn, inputs = REFUSED[case]
    assert_same_error(compile_error(fn, inputs), eager_failure(fn, inputs))


def test_not_implemented_keeps_its_type() -> None:
    fn, inputs = REFUSED["softmax of int64"]
    assert isinstance(compile_error(fn, inputs), EagerNotImplementedError)


# ---------------------------------------------------------------------------------------------
# Mixed dtypes eager takes: eager's result dtype and values
# ---------------------------------------------------------------------------------------------

ACCEPTED: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
    "cat f32 and f64": (
        lambda a, b: torch.cat([a, b]),
        (torch.ones(2, 3), torch.ones(1, 3, dtype=f64)),
    ),
    "cat f32 and bool": (
        lambda a, b: torch.cat([a, b]),
        (torch.randn(2, 3), torch.ones(1, 3, dtype=torch.bool)),
    ),
    "cat int32 and int64": (
        lambda a, b: torch.cat([a, b], 1),
        (torch.arange(6, dtype=i32).view(2, 3), torch.arange(2, dtype=i64).view(2, 1)),
    ),
    "stack f32 and int64": (
        lambda a, b: torch.stack([a, b]),
        (torch.randn(2, 3), torch.arange(6).view(2, 3)),
    ),
    "int + float": (lambda a, b: a + b, (torch.arange(6).view(2, 3), torch.randn(2, 3))),
    "int32 + int64": (lambda a, b: a + b, (torch.arange(3, dtype=i32), torch.arange(3))),
    "int / int": (lambda a, b: a / b, (torch.arange(6).view(2, 3), torch.full((2, 3), 4))),
    "int // int": (lambda a, b: a // b, (torch.arange(6).view(2, 3) - 3, torch.full((2, 3), 2))),
    "bool + bool": (
        lambda a, b: a + b,
        (torch.tensor([True, True, False]), torch.tensor([True, False, False])),
    ),
    "bool * float": (lambda a, b: a * b, (torch.tensor([True, False]), torch.randn(2))),
    "f16 + f32": (lambda a, b: a + b, (torch.randn(4).half(), torch.randn(4))),
    "int < float": (lambda a, b: a < b, (torch.arange(4), torch.randn(4))),
    "bool == int": (lambda a, b: a == b, (torch.tensor([True, False]), torch.tensor([1, 1]))),
    "int tensor * float scalar": (lambda a: a * 2.5, (torch.arange(4),)),
    "where with f32 and f64": (
        lambda c, a, b: torch.where(c, a, b),
        (torch.tensor([True, False]), torch.randn(2), torch.randn(2, dtype=f64)),
    ),
    "index_select with an int32 index": (
        lambda x, i: torch.index_select(x, 0, i),
        (torch.randn(3, 2), torch.tensor([2, 0], dtype=i32)),
    ),
    "embedding with int32 indices": (
        lambda i, w: F.embedding(i, w),
        (torch.tensor([1, 0, 2], dtype=i32), torch.randn(3, 4)),
    ),
    "layer_norm bf16 input, f32 weight": (
        lambda x, w: F.layer_norm(x, (3,), w),
        (torch.randn(2, 3).bfloat16(), torch.ones(3)),
    ),
    "conv2d of int64": (
        F.conv2d,
        (torch.ones(1, 2, 5, 5, dtype=i64), torch.ones(3, 2, 3, 3, dtype=i64)),
    ),
    "mm of int64": (torch.mm, (torch.arange(6).view(2, 3), torch.arange(6).view(3, 2))),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_accepted_mixed_dtypes_compute_eagers_result(case: str) -> None:
    fn, inputs = ACCEPTED[case]
    with torch.no_grad():
        want = fn(*inputs)
        got = xfuse.compile(fn, inputs, quiet=True)(*inputs)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)


# ---------------------------------------------------------------------------------------------
# The rules themselves
# ---------------------------------------------------------------------------------------------


def test_probed_ops_are_aten_overloads() -> None:
    from xfuse.frontend.importer import resolve_overload

    for name in PROBED:
        assert str(resolve_overload(name)) == name


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [(RuntimeError, RuntimeError), (IndexError, IndexError), (TypeError, TypeError)],
)
def test_eager_error_is_eagers_type_under_the_root(
    theirs: type[Exception], ours: type[Exception]
) -> None:
    error = eager_error(theirs("first line\nsecond line"))
    assert isinstance(error, ours) and isinstance(error, XfuseError)
    assert str(error) == "first line"


def test_probes_lay_out_their_stand_ins_as_the_program_does() -> None:
    """Eager picks a linear's path by layout: a contiguous int bias goes to `addmm`, which
    refuses it; an expanded one (stride 0) to a matmul and a promoting add. The probe's
    stand-ins have the program's strides, so xfuse raises exactly where eager does."""
    x, w = torch.randn(4, 4, 2, 8), torch.randn(3, 8)
    expanded = torch.tensor([2], dtype=torch.int32).expand(3)
    with torch.no_grad():
        want = F.linear(x, w, expanded)
        got = xfuse.compile(F.linear, (x, w, expanded), quiet=True)(x, w, expanded)
    torch.testing.assert_close(got, want)
    contiguous = torch.tensor([1, 2, 3], dtype=torch.int32)
    assert_same_error(
        compile_error(F.linear, (x, w, contiguous)), eager_failure(F.linear, (x, w, contiguous))
    )


def _dead_scatter(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """A `diagonal_scatter` whose result nothing reads (its source fits the diagonal at some
    sizes only), beside a `triu` that makes the importer decompose the program."""
    torch.diagonal_scatter(x, src, 0, 0, 1)
    return torch.triu(x, 1) * 2


def _scatter_read_by_dead_code(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """The scatter's result read only by an op whose own result nothing reads: dead too."""
    torch.diagonal_scatter(x, src, 0, 0, 1).exp()
    return torch.triu(x, 1) * 2


def _dead_index_put(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """An accumulating `index_put` of `src` at 5 fixed rows, read by dead code: `src` fits at 5
    rows (and would broadcast from 1), not at others."""
    rows = torch.tensor([0, 1, 2, 0, 1])
    torch.index_put(x.t(), (rows,), src, True).sum()
    return torch.triu(x, 1) * 2


Sizes = list[tuple[int, bool]]
DIAGONAL: Sizes = [(5, True), (3, False), (7, True), (4, False)]
"""(rows of `x`, whether a diagonal of 5 fits them)"""

DEAD: dict[str, tuple[Callable[..., torch.Tensor], Callable[[int], torch.Tensor], Sizes, str]] = {
    "diagonal_scatter": (
        _dead_scatter,
        lambda n: torch.randn(5),
        DIAGONAL,
        "expected src to have a size equal",
    ),
    "read_by_dead_code": (
        _scatter_read_by_dead_code,
        lambda n: torch.randn(5),
        DIAGONAL,
        "expected src to have a size equal",
    ),
    "index_put": (
        _dead_index_put,
        lambda n: torch.randn(n, n),
        [(5, True), (3, False), (5, True), (7, False)],
        "shape mismatch",
    ),
}
"""Each dead op: the program, its source at `n` rows, the sizes called, eager's message."""


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("name", list(DEAD))
def test_a_dead_scatter_eager_refuses_raises_eagers_error(name: str, dynamic: bool) -> None:
    """torch's decompositions drop a dead op (no output depends on it), and its meta function
    checks no shapes: the importer probes it before, so a call at a size where the source
    does not fit raises eager's error (through torch.compile, `dynamic=True` included: the
    dead op is torch's call, which checks its shapes at every call), and one where it fits
    computes eager's values."""
    fn, source, sizes, message = DEAD[name]
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="xfuse", dynamic=dynamic)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n, fits in sizes:
            x, src = torch.randn(n, 5), source(n)
            if fits:
                torch.testing.assert_close(compiled(x, src), fn(x, src))
                continue
            want = eager_failure(fn, (x, src))
            with pytest.raises(type(want), match=message):
                compiled(x, src)
    torch._dynamo.reset()


UNREAD_INDEXING: dict[str, Callable[[torch.Tensor, torch.Tensor], object]] = {
    "index": lambda x, i: x[i],
    "gather": lambda x, i: torch.gather(x, 0, i.view(1, 1).expand(1, x.shape[1])),
    "index_select": lambda x, i: torch.index_select(x, 0, i),
    "embedding": lambda x, i: F.embedding(i, x).exp(),
    "index_put": lambda x, i: x.index_put((i,), torch.ones(1, x.shape[1])),
    "scatter_add": lambda x, i: x.scatter_add(0, i.view(1, 1).expand(1, 3), torch.ones(1, 3)),
}
"""Ops that read an index tensor, their results unread (the last read by dead code)."""


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("name", list(UNREAD_INDEXING))
def test_an_unread_index_out_of_range_raises_as_eager(name: str, dynamic: bool) -> None:
    """An indexing op whose result nothing reads, at an index out of range: eager raises.
    xfuse's own ops for it would be removed as dead, so the import keeps it a torch call,
    which runs and raises eager's error (`eager_rules.unread_checks`); in range, eager's
    values. Dynamo drops an unread `x[i]` itself (every backend returns there), so that case
    runs through `xfuse.compile` only."""
    index = UNREAD_INDEXING[name]

    def fn(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        index(x, i)
        return x * 2

    x, good, bad = torch.randn(4, 3), torch.tensor([1]), torch.tensor([57])
    want = eager_failure(fn, (x, bad))
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        programs = [
            xfuse.compile(fn, (x, good), dynamic_shapes=({0: torch.export.Dim.AUTO}, None))
            if dynamic
            else xfuse.compile(fn, (x, good))
        ]
        if name != "index":
            programs.append(torch.compile(fn, backend="xfuse", dynamic=dynamic))
        for program in programs:
            torch.testing.assert_close(program(x, good), fn(x, good))
            with pytest.raises(type(want), match=first_line(want)[:20]):
                program(x, bad)
    torch._dynamo.reset()


def _dead_slice_scatter(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    torch.slice_scatter(x, src, 1, 0, 2)  # src must have x's rows: eager checks, nothing reads it
    return torch.triu(x, 1) * 2


def test_a_dead_scatter_runs_as_torchs_call_in_one_symbolic_program() -> None:
    """A dead `slice_scatter` is torch's call (`eager_rules.unread_checks`), which checks its
    source at every call: `dynamic=True` compiles one symbolic program for the sizes dynamo's
    trace admits (it was refused, and each size compiled per shape). A call whose rows do not
    match (dynamo traces anew: its first trace made both rows one size) raises eager's error,
    and a later call gives eager's values."""
    torch._dynamo.reset()
    start = dict(dynamo.COMPILES)
    compiled = torch.compile(_dead_slice_scatter, backend="xfuse", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (5, 6, 9):
            x, src = torch.randn(n, 4), torch.randn(n, 2)
            torch.testing.assert_close(compiled(x, src), _dead_slice_scatter(x, src))
        compiles = {k: c - start.get(k, 0) for k, c in dynamo.COMPILES.items()}
        assert compiles.get("symbolic") == 1 and compiles.get("per-shape", 0) == 0
        x, src = torch.randn(7, 4), torch.randn(3, 2)
        want = eager_failure(_dead_slice_scatter, (x, src))
        with pytest.raises(type(want), match="expected src to have a size equal"):
            compiled(x, src)
        x, src = torch.randn(8, 4), torch.randn(8, 2)
        torch.testing.assert_close(compiled(x, src), _dead_slice_scatter(x, src))
    torch._dynamo.reset()
