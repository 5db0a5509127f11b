"""The dynamic-shapes mode of the differential runner: a program through
`torch.compile(program, backend="xfuse", dynamic=True)`, called at its own inputs' sizes and then
at other sizes of one of their dims, against eager at every size.

One size of the inputs' dims (drawn from the source's hash among those of at least 2) is the
swept size: at each call every input dim of that size takes the call's size, the inputs drawn
anew with their kind of values (normal, positive, integer, boolean) and their layout (the order
of their strides, expanded dims, a gap in the innermost dim: `resized`). Dynamo makes every dim
symbolic; the backend compiles one symbolic program where it can (`xfuse.dynamo.COMPILES`
counts "symbolic" and "per-shape" compiles), and a size its guards do not admit compiles again.
At each size the compiled call must compute eager's values (`compare_outputs`, with the f64
reference of the RMSE rule for programs that reorder arithmetic) and strides (of every dim
longer than 1, of outputs with elements), or raise eager's error type where eager raises (or
dynamo's `TorchRuntimeError`, raised by its trace before any backend runs); the last size is
called twice (the second call reuses the first's buffers).

    outcome = check_dynamic(source)       # an `Outcome`
    outcome.stages                        # e.g. ["eager", "cpu dynamic (symbolic)"]
    outcome.message                       # a pass: why the backend compiled per shape, if it did

A size where eager's outputs are not finite or exceed `MAX_MAGNITUDE` (new values the program's
ops were not drawn for) is left out of the comparison; a program eager refuses at its own sizes
is skipped (the forward mode checks that xfuse refuses it).

The sizes a run calls at are `sized_calls`'s; the dynamic-shapes training mode
(`xfuse.testing.fuzz.dynamic_training`) trains the program at the same sizes.
"""

from __future__ import annotations

import re
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from xfuse.errors import DynamicShapesWarning
from xfuse.frontend.builder import inverse_permutation
from xfuse.testing.fuzz.compare import compare_outputs, flat_tensors
from xfuse.testing.fuzz.program import MAX_MAGNITUDE, RMSE_TOLERANCE, Tensor, load_source
from xfuse.testing.fuzz.runner import (
    Differential,
    Outcome,
    StageFailure,
    _one_line,
    _where,
    f64_outputs,
    full_f32_on,
    same_layout_on,
)

GROWTH: tuple[Callable[[int], int], ...] = (lambda n: n + 1, lambda n: 2 * n + 3)
"""The sizes called after the inputs' own `n`: one more, and about twice."""

NO_SWEPT_SIZE = "no dim of size 2 or more"
"""The skip of a program none of whose inputs' sizes can be swept (`swept_size`)."""

Call = tuple[int, tuple[Tensor, ...]]
"""One call of a run: the swept dim's size, and the inputs at that size."""


def sized_calls(inputs: Sequence[Tensor], source: str) -> list[Call] | None:
    """A run's calls: `inputs` at their own sizes, then at each size of `GROWTH` of the swept
    one (`swept_size`; the inputs `resized`, drawn from the source's hash), the last size twice
    (the same tensors: the second call reuses the first's buffers); None where no dim can be
    swept."""
    old = swept_size(inputs, source)
    if old is None:
        return None
    generator = torch.Generator().manual_seed(zlib.crc32(source.encode()))
    calls: list[Call] = [(old, tuple(inputs))]
    for grow in GROWTH:
        new = grow(old)
        calls.append((new, tuple(resized(t, old, new, generator) for t in inputs)))
    calls.append(calls[-1])
    return calls


def swept_size(inputs: Sequence[Tensor], source: str) -> int | None:
    """The dim size the run sweeps: one of the inputs' sizes of at least 2, drawn from the
    source's hash; None where every dim is 0 or 1."""
    sizes = sorted({d for t in inputs for d in t.shape if d >= 2})
    if not sizes:
        return None
    return sizes[zlib.crc32(source.encode()) % len(sizes)]


def resized(t: Tensor, old: int, new: int, generator: torch.Generator) -> Tensor:
    """A new input like `t` with each dim of size `old` of size `new`: values of `t`'s kind
    (`_values`), and `t`'s layout: its dims in the order of its strides, its expanded (stride
    0) dims expanded, and every second element of a doubled innermost dim where `t` reads every
    second one."""
    if t.dim() == 0:
        return _values(t, (), generator)
    shape = tuple(new if d == old else d for d in t.shape)
    strides = t.stride()
    expanded = {i for i in range(t.dim()) if strides[i] == 0 and t.shape[i] > 1}
    base = [1 if i in expanded else d for i, d in enumerate(shape)]
    order = sorted(range(t.dim()), key=lambda d: -strides[d])
    inner = order[-1]
    gap = strides[inner] == 2 and inner not in expanded
    stored = [base[d] * (2 if gap and d == inner else 1) for d in order]
    view = _values(t, tuple(stored), generator).permute(inverse_permutation(order))
    if gap:
        view = view[(slice(None),) * inner + (slice(None, None, 2),)]
    return view.expand(shape) if expanded else view


def _values(t: Tensor, shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    """Contiguous values of `shape` of `t`'s dtype and kind: booleans, integers in [-4, 4] (as
    the generator draws them), floats in [0.5, 2) where `t`'s are all positive, else normal."""
    if t.dtype == torch.bool:
        return torch.randn(shape, generator=generator) > 0
    if not t.is_floating_point():
        return torch.randint(-4, 5, shape, generator=generator, dtype=t.dtype)
    if t.numel() and bool((t > 0).all()):
        return (torch.rand(shape, generator=generator) * 1.5 + 0.5).to(t.dtype)
    return torch.randn(shape, generator=generator).to(t.dtype)


@dataclass
class DynamicDifferential:
    """Runs one program (from source) through torch.compile with dynamic shapes at several
    sizes, against eager at each."""

    source: str
    devices: Sequence[str] = ("cpu",)
    namespace: dict[str, Any] = field(init=False)
    per_shape: list[str] = field(default_factory=list[str])
    """Why the backend compiled a graph per shape (its `DynamicShapesWarning`s' reasons)."""

    def __post_init__(self) -> None:
        self.namespace = load_source(self.source)

    @property
    def program(self) -> Callable[..., Any]:
        return self.namespace["program"]

    def run(self) -> Outcome:
        inputs = tuple(self.namespace["make_inputs"]())
        try:
            self.program(*inputs)
        except Exception:  # noqa: BLE001 - the forward mode checks what xfuse raises then
            return Outcome("skip", "eager", "eager refuses the program")
        calls = sized_calls(inputs, self.source)
        if calls is None:
            return Outcome("skip", "sizes", NO_SWEPT_SIZE)
        passed = ["eager"]
        try:
            for device in self.devices:
                passed.append(self.run_on(device, calls))
        except StageFailure as failure:
            return Outcome("fail", failure.stage, failure.message, passed)
        return Outcome("pass", message="; ".join(dict.fromkeys(self.per_shape)), stages=passed)

    def run_on(self, device: str, calls: Sequence[Call]) -> str:
        """Every call through one compiled function on `device`; the stage's name says how the
        backend compiled it (symbolic, per-shape, or static where dynamo specialised)."""
        from xfuse.dynamo import COMPILES

        torch._dynamo.reset()
        before = COMPILES.copy()
        compiled = torch.compile(self.program, backend="xfuse", dynamic=True)
        for size, inputs in calls:
            self.check_call(f"{device} dynamic, size {size}", compiled, inputs, device)
        torch._dynamo.reset()
        kinds = sorted(k for k in COMPILES if COMPILES[k] > before[k])
        return f"{device} dynamic ({', '.join(kinds) or 'static'})"

    def check_call(
        self, stage: str, compiled: Callable[..., Any], inputs: tuple[Tensor, ...], device: str
    ) -> None:
        on_device = tuple(same_layout_on(t, device) for t in inputs)
        with full_f32_on(device):
            try:
                expected = [t.cpu() for t in flat_tensors(self.program(*on_device))]
            except Exception as e:  # noqa: BLE001 - xfuse must raise it too
                self.same_error(stage, compiled, on_device, e)
                return
            if not all(tame(t) for t in expected):
                return
            try:
                with per_shape_warnings(self.per_shape):
                    got = flat_tensors(compiled(*on_device))
            except Exception as e:
                raise StageFailure(stage, _one_line(e) + _where(e)) from e
        reference = None
        if self.namespace.get("TOLERANCE") == RMSE_TOLERANCE:
            reference = f64_outputs(self.program, inputs, len(expected))
        scale = float(self.namespace.get("SCALE", 1.0))
        problem = compare_outputs(got, expected, reference, scale)
        if problem is None:
            problem = _strides_differ(got, expected)
        if problem is not None:
            raise StageFailure(stage, problem)

    @staticmethod
    def same_error(
        stage: str, compiled: Callable[..., Any], inputs: tuple[Tensor, ...], want: Exception
    ) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compiled(*inputs)
        except torch._dynamo.exc.TorchRuntimeError:
            return  # dynamo's trace of the call raised, before any backend saw it
        except Exception as e:  # noqa: BLE001 - compared with eager's
            Differential.same_error(stage, e, want)
            return
        raise StageFailure(stage, f"computes what eager refuses: {_one_line(want)}")


@contextmanager
def per_shape_warnings(reasons: list[str]) -> Iterator[None]:
    """In the block, warnings are not shown, and the reason of each `DynamicShapesWarning`
    (`per_shape_reason`) is appended to `reasons`."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("ignore")
        warnings.simplefilter("always", DynamicShapesWarning)
        try:
            yield
        finally:
            reasons += [
                per_shape_reason(str(w.message))
                for w in said
                if issubclass(w.category, DynamicShapesWarning)
            ]


PER_SHAPE_REFUSAL = re.compile(
    r"(?:refused (?:it|the (?P<part>\w+) part)"
    r"|(?P<call>a call) (?:of the (?P<called>\w+) part )?the symbolic program refuses)"
    r": (?:xfuse: )?"
)
"""What a `DynamicShapesWarning` says before its reason: the symbolic compile refused the
graph (or a training part), or the symbolic program refused a call (a size out of its range)."""


def per_shape_reason(message: str) -> str:
    """A `DynamicShapesWarning`'s reason (after `PER_SHAPE_REFUSAL`), after the part it names
    ("backward: ") and "a call: " where the symbolic program refused a call, its numbers and
    size symbols elided, cut short: what the fuzzer counts."""
    found = PER_SHAPE_REFUSAL.search(message)
    if found is None:
        reason = message.removeprefix("xfuse: ")
    else:
        part = found["part"] or found["called"]
        named = (f"{part}: " if part else "") + ("a call: " if found["call"] else "")
        reason = named + message[found.end() :]
    return re.sub(r"\b(s\d+|\d+)\b", "N", reason)[:90]


def tame(t: Tensor) -> bool:
    """Whether eager's output `t` is finite and within `MAX_MAGNITUDE` (or not floating): a
    size where one is not is left out of the comparison."""
    if not t.is_floating_point() or t.numel() == 0:
        return True
    return bool(t.isfinite().all()) and float(t.abs().max()) <= MAX_MAGNITUDE


def _strides_differ(got: Sequence[Tensor], expected: Sequence[Tensor]) -> str | None:
    """Where an output's strides differ from eager's in a dim longer than 1 (of an output
    with elements), one line."""
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if e.numel() == 0:
            continue
        mine = [s for s, d in zip(g.stride(), g.shape, strict=True) if d > 1]
        eagers = [s for s, d in zip(e.stride(), e.shape, strict=True) if d > 1]
        if mine != eagers:
            return f"output {i} has strides {g.stride()}, eager's {e.stride()}"
    return None


def check_dynamic(source: str, devices: Sequence[str] = ("cpu",)) -> Outcome:
    """A program's calls at several sizes through torch.compile with dynamic shapes against
    eager's; never raises for a failure."""
    try:
        return DynamicDifferential(source, devices).run()
    except Exception as e:  # the harness itself: report it, do not stop the fuzzer
        return Outcome("fail", "harness", _one_line(e) + _where(e))
