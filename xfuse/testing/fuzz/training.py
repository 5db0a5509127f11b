"""The training mode of the differential runner: a program's forward and backward through
`torch.compile(program, backend="xfuse", options={"fallback": "error"})` (AOTAutograd's
forward and backward parts, each compiled by xfuse; `xfuse.training`) against eager's outputs
and input gradients.

Some floating inputs (drawn from the source's hash, at least one) become leaves that require
grad; the loss is the sum of each output that needs grad times fixed random f64 weights,
computed eagerly outside the compiled program, so the gradient of every input is the
program's backward alone. Two steps run (the second reuses the compiled parts), and each
compares the outputs (`compare_outputs`, as the forward fuzzer does) and then each input's
gradient: against eager's, or where eager's rounding differs, against an f64 run by the RMSE
rule of `compare._rmse_ok` (a broadcast input's gradient is a sum, so every gradient gets the
f64 reference), with the larger of the program's scale and the gradient's own magnitude as
the values its backward computes. A gradient that fails that rule is judged again over
`RESAMPLES` more losses (other weights), its errors pooled (`compare.pooled_rmse_ok`).

    outcome = check_training(source)      # an `Outcome`
    outcome.status                        # pass | fail | skip | gap

A program eager cannot differentiate (no output needs grad, an op without a derivative, a
saved tensor modified in place) is skipped with a reason (`skip_reason`), and so is one whose
gradient is not finite in eager or in f64 (`tame_gradients`). A part xfuse cannot
compile raises `EagerFallbackError` in strict mode: that is a `gap` (a coverage gap, not a
wrong result), its message kept to say which op.

The dynamic-shapes training mode (`xfuse.testing.fuzz.dynamic_training`, `xfuse-fuzz --training
--dynamic`) checks the same steps, by the same rules, through `torch.compile(dynamic=True)`
(`TrainingDifferential.dynamic`) at several sizes (`TrainingDifferential.at_size`).
"""

from __future__ import annotations

import random
import re
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from xfuse.errors import EagerFallbackError
from xfuse.testing.fuzz.compare import compare_outputs, flat_tensors, pooled_rmse_ok
from xfuse.testing.fuzz.dynamic import per_shape_warnings
from xfuse.testing.fuzz.program import RMSE_TOLERANCE, Tensor, load_source
from xfuse.testing.fuzz.runner import (
    Float64Casts,
    Outcome,
    StageFailure,
    _one_line,
    _where,
    full_f32_on,
    magnitude,
    outcomes_on,
    same_layout_on,
)
from xfuse.testing.guarded import GuardedPool, guarded_pools

STRICT: dict[str, str | int | bool | Callable[..., Any]] = {"fallback": "error"}
"""The backend's options: a part that would run eagerly raises `EagerFallbackError`."""

GRAD_RATE = 0.75
"""The chance that a floating input requires grad (one always does)."""

RESAMPLES = 8
"""Losses with other weights over which a gradient that fails the RMSE rule is judged again,
its errors pooled (`compare.pooled_rmse_ok`)."""

STEPS = ("first step", "second step")
"""Each compiles nothing new the second time: dynamo's guards and xfuse's parts are reused."""

SKIP_REASONS: tuple[tuple[str, str], ...] = (
    (r"derivative for (aten::\w+) is not implemented", r"no derivative: \1"),
    (r"modified by an inplace operation", "a tensor the backward saves is modified in place"),
    (r"leaf Variable that requires grad", "an in-place write into an input that requires grad"),
    (r"is not differentiable with respect to argument", "an input is not differentiable"),
)
"""(pattern of eager's error, the skip's reason) in order: the first match names the reason
(its groups substituted); any other error is "eager's <stage> raises <its type>"."""


REFUSED = "eager refuses the program (with or without grad)"
"""The skip of a program whose dtypes eager refuses (the forward fuzzer checks that xfuse
raises as eager does); `xfuse-fuzz --training` then checks the program drawn before them."""

UNTAMED = "a gradient is not finite in eager or in f64 (undefined at these inputs)"
"""The skip of a program whose gradient is NaN or infinite, in eager or in the f64 run (a
hypot of two sums that are 0 in f64 and a rounding error in f32): as the generator keeps
programs whose values are not finite out, so xfuse's rounding is not asked to land where
eager's did."""

AOT_REFUSES = "torch's AOTAutograd cannot trace the program (aot_eager's compile fails too)"
"""The skip of a program that torch.compile refuses with any backend (AOTAutograd's trace
raises for `aot_eager` as for xfuse): nothing of xfuse's to check."""

NO_AOT = "no graph went through AOTAutograd"
"""The skip of a program whose compiled calls trained nothing through xfuse's parts."""


def skip_reason(stage: str, error: Exception) -> str:
    """Why eager cannot run `stage` ("forward", "backward") of a program with grad: a rule of
    `SKIP_REASONS`, else the error's type."""
    text = str(error)
    for pattern, reason in SKIP_REASONS:
        found = re.search(pattern, text)
        if found is not None:
            return found.expand(reason)
    return f"eager's {stage} raises {type(error).__name__}"


def fallback_error(error: BaseException) -> EagerFallbackError | None:
    """The `EagerFallbackError` `error` is, or was raised from (dynamo wraps a backend's
    errors at compile time); None when it is none."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, EagerFallbackError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def gap_ops(message: str) -> list[str]:
    """The aten ops a strict-mode `EagerFallbackError` names (its message), else its reason:
    what a run counts the coverage gap by."""
    ops = sorted(set(re.findall(r"aten[.:]+\w+(?:\.\w+)?", message)))
    if ops:
        return ops
    reason = message.split("(fallback='error'): ", 1)[-1]
    return [reason.splitlines()[0][:120] if reason else "(no message)"]


@dataclass
class Step:
    """One step's outputs and each grad input's gradient (None where the loss does not reach
    it)."""

    outputs: list[Tensor]
    grads: list[Tensor | None]


@dataclass
class TrainingDifferential:
    """One program's forward and backward through xfuse (`torch.compile`) against eager's on
    `device`."""

    source: str
    device: str = "cpu"
    dynamic: bool | None = None
    """torch.compile's `dynamic`: None its default, True every dim symbolic (the
    dynamic-shapes training mode, `xfuse.testing.fuzz.dynamic_training`)."""
    namespace: dict[str, Any] = field(init=False)
    grad_inputs: list[int] = field(init=False)
    needs_grad: list[bool] | None = field(init=False, default=None)
    """Which of eager's outputs need grad (set by eager's step): the loss weighs those."""
    weights: list[Tensor] = field(init=False, default_factory=list[Tensor])
    cotangent: int = field(init=False, default=0)
    """Which draw of the loss's weights: 0 the first, each of `RESAMPLES` another."""
    sized: tuple[Tensor, ...] | None = field(init=False, default=None)
    """The inputs at other sizes (`at_size`), copied for each step; None: `make_inputs()`."""
    per_shape: list[str] = field(init=False, default_factory=list[str])
    """Why the backend compiled a part per shape (`dynamic.per_shape_warnings`)."""

    def __post_init__(self) -> None:
        self.namespace = load_source(self.source)

    @property
    def program(self) -> Callable[..., Any]:
        return self.namespace["program"]

    def at_size(self, inputs: tuple[Tensor, ...]) -> None:
        """Steps from now on start from copies of `inputs` (the program's at other sizes), the
        loss's weights drawn for their outputs and eager's step telling again which need
        grad."""
        self.sized = inputs
        self.weights, self.cotangent, self.needs_grad = [], 0, None

    def fresh_inputs(self) -> list[Tensor]:
        """The step's inputs, fresh and on the CPU: `make_inputs()`, or copies of `sized`."""
        if self.sized is None:
            return list(self.namespace["make_inputs"]())
        return [same_layout_on(t, "cpu", copy=True) for t in self.sized]

    def leaves(self, dtype: torch.dtype | None = None) -> tuple[Tensor, ...]:
        """Fresh inputs on the device (their layouts kept), the grad inputs leaves that
        require grad; with `dtype`, f32 inputs in that dtype (the f64 reference)."""
        inputs = [same_layout_on(t, self.device) for t in self.fresh_inputs()]
        if dtype is not None:
            inputs = [t.to(dtype) if t.dtype == torch.float32 else t for t in inputs]
        for i in self.grad_inputs:
            inputs[i].requires_grad_(True)
        return tuple(inputs)

    def choose_grad_inputs(self) -> list[int]:
        """Each floating input with chance `GRAD_RATE` (by the source's hash), at least one."""
        inputs = self.namespace["make_inputs"]()
        floating = [i for i, t in enumerate(inputs) if t.is_floating_point()]
        rng = random.Random(zlib.crc32(self.source.encode()))
        chosen = [i for i in floating if rng.random() < GRAD_RATE]
        return chosen or floating[:1]

    def loss(self, outputs: Sequence[Tensor]) -> Tensor:
        """The sum of each output that needs grad times its weights, in f64."""
        grads = [o for o in outputs if o.requires_grad]
        if not self.weights:
            seed = zlib.crc32(self.source.encode()) + self.cotangent
            rng = torch.Generator().manual_seed(seed)
            self.weights = [
                torch.randn(o.shape, generator=rng, dtype=torch.float64).to(o.device) for o in grads
            ]
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        for o, w in zip(grads, self.weights, strict=True):
            total = total + (o.double() * w).sum()
        return total

    def step(self, run: Callable[..., Any], inputs: tuple[Tensor, ...]) -> Step:
        """Outputs of `run` on `inputs` and the gradients of the loss by the grad inputs; a
        "forward" `StageFailure` where other outputs than eager's need grad."""
        outputs = flat_tensors(run(*inputs))
        needs = [o.requires_grad for o in outputs]
        if self.needs_grad is None:
            self.needs_grad = needs
        elif needs != self.needs_grad:
            raise StageFailure(
                "forward", f"outputs needing grad: {needs}, eager's: {self.needs_grad}"
            )
        grads = torch.autograd.grad(
            self.loss(outputs), [inputs[i] for i in self.grad_inputs], allow_unused=True
        )
        return Step([o.detach() for o in outputs], list(grads))

    # --- the run -----------------------------------------------------------------------------

    def run(self) -> Outcome:
        self.grad_inputs = self.choose_grad_inputs()
        if not self.grad_inputs:
            return Outcome("skip", "eager", "no floating input")
        with full_f32_on(self.device):
            expected = self.expected()
            if isinstance(expected, Outcome):
                return expected
            return self.run_compiled(
                lambda compiled, passed: self.steps(compiled, passed, *expected)
            )

    def expected(self) -> tuple[Step, Step | None] | Outcome:
        """Eager's step and its f64 reference (None where that does not run); a skip where
        eager cannot differentiate the program or a gradient is not finite."""
        expected = self.run_eager()
        if isinstance(expected, Outcome):
            return expected
        reference = self.run_f64()
        if not tame_gradients(expected, reference):
            return Outcome("skip", "eager", UNTAMED)
        return expected, reference

    def run_eager(self) -> Step | Outcome:
        inputs = self.leaves()
        try:
            outputs = flat_tensors(self.program(*inputs))
        except Exception as e:  # noqa: BLE001 - a program eager cannot run with grad
            return Outcome("skip", "eager", self.refused_reason(e))
        if not any(o.requires_grad for o in outputs):
            return Outcome("skip", "eager", "no output needs grad")
        try:
            return self.step(self.program, self.leaves())
        except Exception as e:  # noqa: BLE001 - a program eager cannot differentiate
            return Outcome("skip", "eager", skip_reason("backward", e))

    def refused_reason(self, error: Exception) -> str:
        """Why eager's forward raises with grad: the program's dtypes, which it refuses
        without grad too (the forward fuzzer checks xfuse raises as eager does), or
        `skip_reason`."""
        try:
            self.program(*self.fresh_inputs())
        except Exception:  # noqa: BLE001 - eager refuses the program itself
            return REFUSED
        return skip_reason("forward", error)

    def run_f64(self) -> Step | None:
        """The step in f64 (f32 inputs, the program's own casts to floating dtypes, and the
        floats it makes of integers and Python numbers), for the RMSE rule; None where it does
        not run."""
        inputs = self.leaves(torch.float64)  # eager's values: drawn as f32, then widened
        try:
            with warnings.catch_warnings(), Float64Casts(), default_dtype(torch.float64):
                warnings.simplefilter("ignore")
                return self.step(self.program, inputs)
        except Exception:  # noqa: BLE001 - the rule then is assert_close alone
            return None

    def run_compiled(self, steps: Callable[[Callable[..., Any], list[str]], None]) -> Outcome:
        """`steps(compiled, passed)` through a fresh `torch.compile` of the program (xfuse, in
        strict mode), `passed` the stages that matched eager's: a pass with those stages, a
        failure or a coverage gap where a step raises its `StageFailure` (`failed`), a skip
        where no graph went through AOTAutograd."""
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        compiled = self.torch_compiled("xfuse")
        traced = counters["aot_autograd"]["total"]
        passed: list[str] = []
        try:
            steps(compiled, passed)
        except StageFailure as failure:
            return self.failed(failure, passed)
        finally:
            torch._dynamo.reset()
        if counters["aot_autograd"]["total"] == traced:
            return Outcome("skip", "dynamo", NO_AOT)
        return Outcome("pass", stages=passed)

    def torch_compiled(self, backend: str) -> Callable[..., Any]:
        """The program through torch.compile with `backend` (xfuse's in strict mode)."""
        options = STRICT if backend == "xfuse" else None
        return torch.compile(self.program, backend=backend, dynamic=self.dynamic, options=options)

    def steps(
        self,
        compiled: Callable[..., Any],
        passed: list[str],
        expected: Step,
        reference: Step | None,
    ) -> None:
        """The training mode's `STEPS` through `compiled`, each checked against eager's."""
        for k, name in enumerate(STEPS):
            self.checked_step(name, compiled, expected, reference, guarded=k == 0)
            passed.append(name)

    def checked_step(
        self,
        name: str,
        compiled: Callable[..., Any],
        expected: Step,
        reference: Step | None,
        guarded: bool,
    ) -> None:
        """A step through `compiled` checked against eager's (`check`); where `guarded`, its
        new buffers between guard bands, a write past them a "<name> (bounds)" failure."""
        with ExitStack() as stack:
            pools = stack.enter_context(guarded_pools()) if guarded else []
            got = self.compiled_step(name, compiled)
        _check_bounds(name, pools)
        self.check(name, got, expected, reference, compiled)

    def failed(self, failure: StageFailure, passed: list[str]) -> Outcome:
        """The outcome of a step's `failure`: a coverage gap ("<name> gap"), a skip where
        torch's own AOTAutograd cannot trace the program, else a failure."""
        status = "gap" if failure.stage.endswith(" gap") else "fail"
        if status == "fail" and self.torch_cannot_trace(failure):
            return Outcome("skip", "aot_autograd", AOT_REFUSES)
        return Outcome(status, failure.stage, failure.message, passed)

    def torch_cannot_trace(self, failure: StageFailure) -> bool:
        """Whether `failure` is the backend's compile failing where torch's own AOTAutograd
        (`aot_eager`, no xfuse) fails on the program too: a program torch.compile refuses
        with any backend (e.g. a bool `index_put` whose functionalized form subtracts
        bools)."""
        if not isinstance(failure.__cause__, torch._dynamo.exc.BackendCompilerFailed):
            return False
        torch._dynamo.reset()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.step(self.torch_compiled("aot_eager"), self.leaves())
        except torch._dynamo.exc.BackendCompilerFailed:
            return True
        except Exception:  # noqa: BLE001 - aot_eager traced it and failed elsewhere
            return False
        finally:
            torch._dynamo.reset()
        return False

    def compiled_step(self, name: str, compiled: Callable[..., Any]) -> Step:
        """The step through the compiled program; a strict-mode `EagerFallbackError` is a
        "<name> gap" stage failure, any other error a failure of the step. Why the backend
        compiled a part per shape goes to `per_shape`."""
        try:
            with per_shape_warnings(self.per_shape):
                return self.step(compiled, self.leaves())
        except StageFailure as failure:
            raise StageFailure(f"{name} {failure.stage}", failure.message) from failure
        except Exception as e:  # noqa: BLE001 - a gap or a crash
            fallback = fallback_error(e)
            if fallback is not None:
                raise StageFailure(f"{name} gap", str(fallback)) from e
            raise StageFailure(name, _one_line(e) + _where(e)) from e

    def check(
        self,
        name: str,
        got: Step,
        want: Step,
        reference: Step | None,
        compiled: Callable[..., Any] | None = None,
    ) -> None:
        """A `StageFailure` where `got` differs from eager's step `want`: its outputs, then its
        gradients; a gradient that fails the RMSE rule is judged again over `RESAMPLES` more
        losses (`resampled_grads_pass`, with the `compiled` program)."""
        scale = float(self.namespace.get("SCALE", 1.0))
        rmse = self.namespace.get("TOLERANCE") == RMSE_TOLERANCE
        forward_reference = reference.outputs if reference is not None and rmse else None
        problem = compare_outputs(got.outputs, want.outputs, forward_reference, scale)
        if problem is not None:
            raise StageFailure(f"{name} forward", problem)
        references = reference.grads if reference is not None else None
        problem = compare_grads(got.grads, want.grads, references, scale, self.grad_inputs)
        if problem is None:
            return
        failing = self.failing_grads(got, want, reference, scale)
        if compiled is None or not failing or reference is None:
            raise StageFailure(f"{name} backward", problem)
        if not self.resampled_grads_pass(compiled, failing, got, want, reference, scale):
            raise StageFailure(f"{name} backward", f"{problem} (and over {RESAMPLES} more losses)")

    def failing_grads(
        self, got: Step, want: Step, reference: Step | None, scale: float
    ) -> list[int] | None:
        """The gradients that alone fail `compare_grads`; None where one fails that has no f64
        reference (a failure the RMSE rule does not judge)."""
        failing = []
        for i, w in enumerate(want.grads):
            if w is None or got.grads[i] is None:
                continue
            ref = reference.grads[i] if reference is not None else None
            if compare_grads([got.grads[i]], [w], None if ref is None else [ref], scale) is None:
                continue
            if ref is None:
                return None
            failing.append(i)
        return failing

    def resampled_grads_pass(
        self,
        compiled: Callable[..., Any],
        failing: Sequence[int],
        got: Step,
        want: Step,
        reference: Step,
        scale: float,
    ) -> bool:
        """Whether each `failing` gradient passes the RMSE rule with its errors pooled over this
        step and `RESAMPLES` more, each a loss with other random weights (eager, f64 and the
        `compiled` program again, which compiles nothing new)."""
        samples = [(got, want, reference)]
        saved = (self.weights, self.cotangent)
        try:
            for k in range(1, RESAMPLES + 1):
                self.weights, self.cotangent = [], k
                eager = self.step(self.program, self.leaves())
                f64 = self.run_f64()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    compiled_step = self.step(compiled, self.leaves())
                if f64 is None:
                    return False
                samples.append((compiled_step, eager, f64))
        finally:
            self.weights, self.cotangent = saved
        for i in failing:
            grads = [[_tensor(step.grads[i]) for step in sample] for sample in samples]
            ours, eagers, refs = (list(column) for column in zip(*grads, strict=True))
            own = max(scale, magnitude(eagers[0]))
            if not pooled_rmse_ok(ours, eagers, refs, own):
                return False
        return True


def _check_bounds(name: str, pools: Sequence[GuardedPool]) -> None:
    """A "<name> (bounds)" failure where a kernel of the step wrote past a buffer of one of
    `pools` (the first step's calls allocate between guard bands: `guarded_pools`)."""
    overwritten = [line for pool in pools for line in pool.overwritten()]
    if overwritten:
        raise StageFailure(
            f"{name} (bounds)", "a kernel wrote past a buffer: " + "; ".join(overwritten)
        )


def tame_gradients(eager: Step, reference: Step | None) -> bool:
    """Whether every gradient is finite, in eager and in the f64 `reference`."""
    steps = [eager] if reference is None else [eager, reference]
    return all(g is None or bool(g.isfinite().all()) for step in steps for g in step.grads)


@contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """torch's default floating dtype `dtype` in the block (`torch.tensor(2.0)`, an integer
    tensor's promotion with a float)."""
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


def compare_grads(
    got: Sequence[Tensor | None],
    want: Sequence[Tensor | None],
    reference: Sequence[Tensor | None] | None,
    scale: float,
    inputs: Sequence[int] | None = None,
) -> str | None:
    """None when each gradient matches eager's (None where eager's is: the loss does not
    reach that input), by `compare_outputs` with the f64 `reference`, each at the larger of
    `scale` and its own magnitude. `inputs` are the program's input indices of the gradients
    (what the message names)."""
    inputs = range(len(want)) if inputs is None else inputs
    if [g is None for g in got] != [w is None for w in want]:
        return f"gradients that are None: {[g is None for g in got]}, eager's: {[w is None for w in want]}"
    present = [i for i, w in enumerate(want) if w is not None]
    refs = None
    if reference is not None and all(reference[i] is not None for i in present):
        refs = [_tensor(reference[i]) for i in present]
    problem = compare_outputs(
        [_tensor(got[i]) for i in present],
        [_tensor(want[i]) for i in present],
        refs,
        [max(scale, magnitude(_tensor(want[i]))) for i in present],
    )
    if problem is None:
        return None
    return re.sub(
        r"^output (\d+)", lambda m: f"gradient of input {inputs[present[int(m[1])]]}", problem
    )


def _tensor(t: Tensor | None) -> Tensor:
    assert t is not None
    return t


def check_training(source: str, devices: Sequence[str] = ("cpu",)) -> Outcome:
    """A program's training step through xfuse against eager's on each device (the first
    outcome that is no pass); never raises for a failure."""
    found = outcomes_on(devices, lambda device: TrainingDifferential(source, device).run())
    if isinstance(found, Outcome):
        return found
    stages = [f"{d} {stage}" for d, o in zip(devices, found, strict=True) for stage in o.stages]
    return Outcome("pass", stages=stages)
