"""The dynamic-shapes training mode of the differential runner (`xfuse-fuzz --training
--dynamic`): a program's forward and backward through `torch.compile(program, backend="xfuse",
dynamic=True)` in strict mode, trained at its inputs' own sizes and then at other sizes of one
of their dims, against eager's outputs and input gradients at every size.

The sizes are the dynamic mode's (`dynamic.sized_calls`: the swept size, `GROWTH`, the inputs
`resized` with their kind of values and layout; the last size called twice, the second call
reusing the first's buffers), and each call is the training mode's step (`training`: the same
grad inputs, a loss of the outputs that need grad with weights drawn for each size, outputs
then gradients compared by `compare_outputs` and the RMSE rule, a failing gradient judged again
over more losses; a new size's first call with its buffers between guard bands). What skips a
program at its own sizes skips it here (`TrainingDifferential.expected`); at another size,
where eager's forward raises the compiled call must raise too (`DynamicDifferential.same_error`)
unless torch's own training (`aot_eager`) computes there too (AOTAutograd dropped the op that
raises), and a size eager cannot differentiate, or whose outputs or gradients are not tame
(`dynamic.tame`, `training.tame_gradients`), is left out of the comparison.

    outcome = check_dynamic_training(source)   # an `Outcome`
    outcome.stages      # ["eager", "cpu dynamic forward (symbolic)",
                        #  "cpu dynamic backward (per-shape x3)"]
    outcome.message     # a pass: why the backend compiled per shape ("backward: ..."), if it did

The stages say how xfuse compiled each part AOTAutograd cut (`PARTS`), and "graph" for a graph
compiled without AOTAutograd (one dynamo cut off where no input needs grad): "symbolic" once
for every size (" xN" where dynamo traced it again), "per-shape" where the symbolic path
refused the part or a call of it (`xfuse.dynamo.COMPILES`, counted per part: `part_compiles`),
"static" where dynamo specialised every size. A part xfuse cannot compile raises
`EagerFallbackError`: a `gap`, as in the training mode.
"""

from __future__ import annotations

import functools
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from xfuse.aot import PartCompiler
from xfuse.runtime.executor import CompiledProgram
from xfuse.testing.fuzz.dynamic import NO_SWEPT_SIZE, Call, DynamicDifferential, sized_calls, tame
from xfuse.testing.fuzz.program import load_source
from xfuse.testing.fuzz.runner import Outcome, StageFailure, full_f32_on, outcomes_on
from xfuse.testing.fuzz.training import Step, TrainingDifferential

KINDS = ("symbolic", "per-shape", "static")
"""How xfuse compiled a part, in the order a stage names them."""

Expected = tuple[Step, Step | None]
"""Eager's step at a size and its f64 reference (`TrainingDifferential.expected`)."""


@contextmanager
def part_compiles() -> Iterator[dict[str, Counter[str]]]:
    """In the block, how xfuse compiled each part (`PARTS`) that AOTAutograd handed it, by
    `KINDS`: the growth of `xfuse.dynamo.COMPILES` while `PartCompiler.build` made the part
    (its symbolic program) and while the part ran (its per-shape programs), or "static"
    where `build` compiled a `CompiledProgram` for fixed sizes; and under "graph", what else
    grew `COMPILES` (a graph compiled without AOTAutograd). `PartCompiler.build` is wrapped
    in the block, and the parts' functions it returns for good (their attributes kept)."""
    from xfuse.dynamo import COMPILES

    parts: dict[str, Counter[str]] = {}
    real = PartCompiler.build
    before = COMPILES.copy()

    def build(self: PartCompiler, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        counts = parts.setdefault(self.part, Counter[str]())
        with _counting(counts):
            program = real(self, gm, example_inputs)
        if isinstance(program, CompiledProgram):  # for fixed sizes: its calls compile nothing
            counts["static"] += 1
            return program
        return _counted(program, counts)

    PartCompiler.build = build  # type: ignore[method-assign]
    try:
        yield parts
    finally:
        PartCompiler.build = real  # type: ignore[method-assign]
        graph = COMPILES - before - sum(parts.values(), Counter[str]())
        if graph:
            parts["graph"] = graph


@contextmanager
def _counting(counts: Counter[str]) -> Iterator[None]:
    """The growth of `xfuse.dynamo.COMPILES` in the block added to `counts`."""
    from xfuse.dynamo import COMPILES

    before = COMPILES.copy()
    try:
        yield
    finally:
        counts.update(COMPILES - before)


def _counted(program: Callable[..., Any], counts: Counter[str]) -> Callable[..., Any]:
    """`program` (its attributes kept), what its calls compile added to `counts`."""

    @functools.wraps(program)
    def run(*args: Any) -> Any:
        with _counting(counts):
            return program(*args)

    return run


def compiled_stages(device: str, parts: dict[str, Counter[str]]) -> list[str]:
    """One stage per part: "<device> dynamic <part> (<kinds>)", each of `KINDS` it compiled
    by, with its count where it is more than one."""
    return [
        f"{device} dynamic {part} ({', '.join(_kind(k, counts[k]) for k in KINDS if counts[k])})"
        for part, counts in parts.items()
    ]


def _kind(kind: str, count: int) -> str:
    return kind if count == 1 else f"{kind} x{count}"


@dataclass
class DynamicTrainingDifferential:
    """One program trained through torch.compile with dynamic shapes at several sizes on
    `device`, against eager's step at each (a `TrainingDifferential` with `dynamic=True`,
    moved from size to size)."""

    source: str
    device: str = "cpu"
    training: TrainingDifferential = field(init=False)

    def __post_init__(self) -> None:
        self.training = TrainingDifferential(self.source, self.device, dynamic=True)

    def run(self) -> Outcome:
        training = self.training
        training.grad_inputs = training.choose_grad_inputs()
        if not training.grad_inputs:
            return Outcome("skip", "eager", "no floating input")
        calls = sized_calls(training.fresh_inputs(), self.source)
        if calls is None:
            return Outcome("skip", "sizes", NO_SWEPT_SIZE)
        with full_f32_on(self.device):
            own = training.expected()
            if isinstance(own, Outcome):
                return own
            with part_compiles() as parts:
                outcome = training.run_compiled(
                    lambda compiled, passed: self.steps(compiled, passed, calls, own)
                )
        if outcome.status != "pass":
            return outcome
        reasons = "; ".join(dict.fromkeys(training.per_shape))
        return Outcome("pass", message=reasons, stages=compiled_stages(self.device, parts))

    def steps(
        self, compiled: Callable[..., Any], passed: list[str], calls: list[Call], own: Expected
    ) -> None:
        """A training step through `compiled` at each call's size against eager's there (the
        program's `own` at the first), each that matched named in `passed`."""
        expected: Expected | None = own
        for k, (size, inputs) in enumerate(calls):
            again = k > 0 and inputs is calls[k - 1][1]
            name = f"{self.device} dynamic, size {size}" + (", again" if again else "")
            if k > 0 and not again:
                self.training.at_size(inputs)
                expected = self.expected_at(name, compiled)
            if expected is None:
                continue
            self.training.checked_step(name, compiled, *expected, guarded=not again)
            passed.append(name)

    def expected_at(self, name: str, compiled: Callable[..., Any]) -> Expected | None:
        """Eager's step at the size the training differential is at; None where the size is
        left out: eager cannot differentiate there, or its values are not tame, or its forward
        raises, where `compiled` must raise too (else a `StageFailure`) unless torch's own
        training computes there (`torch_computes`)."""
        training = self.training
        try:
            training.program(*training.fresh_inputs())
        except Exception as e:  # noqa: BLE001 - the compiled call must raise it too
            try:
                DynamicDifferential.same_error(name, compiled, training.leaves(), e)
            except StageFailure:
                if not self.torch_computes():
                    raise
            return None
        expected = training.expected()
        if isinstance(expected, Outcome) or not all(tame(t) for t in expected[0].outputs):
            return None
        return expected

    def torch_computes(self) -> bool:
        """Whether torch.compile's own training (`aot_eager`, no xfuse) computes the forward
        at this size, where eager raises: AOTAutograd dropped the op that raises (its result
        unused: a shape check of `index_add`, an integer division by a zero drawn for this
        size), so nothing of xfuse's must raise. The program is a copy (its own code, so that
        dynamo's cache of the compiled program stays as it is)."""
        program = load_source(self.source)["program"]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.compile(program, backend="aot_eager", dynamic=True)(*self.training.leaves())
        except Exception:  # noqa: BLE001 - torch raises as eager does
            return False
        return True


def check_dynamic_training(source: str, devices: Sequence[str] = ("cpu",)) -> Outcome:
    """A program trained at several sizes through torch.compile with dynamic shapes against
    eager on each device (the first outcome that is no pass); never raises for a failure."""
    found = outcomes_on(devices, lambda d: DynamicTrainingDifferential(source, d).run())
    if isinstance(found, Outcome):
        return found
    stages = ["eager", *(stage for o in found for stage in o.stages)]
    return Outcome("pass", message="; ".join(o.message for o in found if o.message), stages=stages)
