"""
The executor: runs a `Program`'s steps, and `CompiledProgram`, the callable `xfuse.compile`
returns.

Kernels are specialised to the shapes and dtypes they were compiled for. `CompiledProgram`
checks every call's inputs (count, type, layout, dtype, device) and keys specialisations by the
inputs' signature (shapes, strides and dtypes) and grad mode: a call with a new signature builds a
new specialisation, never runs a kernel on shapes it was not made for. Non-contiguous inputs are made contiguous by
the kernels that read them (views and externs take them as they are).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

import torch
from torch.utils import _pytree as pytree

from xfuse.errors import (
    AutogradUnsupportedError,
    ExportError,
    InputDeviceError,
    InputMismatchError,
    UnsupportedInputError,
    XfuseError,
)
from xfuse.frontend.eager_rules import eager_call_error
from xfuse.ir import dtypes
from xfuse.ir.dtypes import tensor_input_problem
from xfuse.runtime.compiler import GroupInfo, KernelInfo, Program
from xfuse.runtime.cuda_graphs import GraphRunner
from xfuse.runtime.fallback import reason_of
from xfuse.runtime.outputs import OutputPlan
from xfuse.runtime.state import FunctionValues, ModuleState, layout_guard
from xfuse.runtime.steps import BufferPool, new_pool

Tensor = torch.Tensor

Signature = tuple[tuple[tuple[int, ...], tuple[int, ...], torch.dtype], ...]


class StepProfile:
    """With `XFUSE_PROFILE=1`: the time of every step of every program run, printed to stderr
    at exit (total per step, slowest first)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.times: dict[tuple[int, str], list[float]] = {}

    def add(self, program: Program, label: str, seconds: float) -> None:
        with self._lock:
            self.times.setdefault((id(program), label), []).append(seconds)

    def report(self) -> str:
        rows = sorted(self.times.items(), key=lambda kv: -sum(kv[1]))
        total = sum(sum(ts) for _, ts in rows) or 1.0
        lines = ["xfuse step profile: total ms, calls, mean ms, share, step"]
        for (_, label), ts in rows:
            lines.append(
                f"{1000 * sum(ts):10.2f} {len(ts):6d} {1000 * sum(ts) / len(ts):9.3f} "
                f"{100 * sum(ts) / total:5.1f}%  {label}"
            )
        return "\n".join(lines)


def _start_profile() -> StepProfile | None:
    if os.environ.get("XFUSE_PROFILE", "0") in ("", "0"):
        return None
    profile = StepProfile()
    atexit.register(lambda: print(profile.report(), file=sys.stderr))
    return profile


PROFILE = _start_profile()


def run_program(program: Program, args: Sequence[Tensor], pool: BufferPool) -> list[Tensor]:
    """Run the steps on `@forward`'s arguments; returns its results (kernel buffers, no copies).
    One call of the program's straight-line runner (`Program.runner`); with the step profile
    on, the steps one by one, each timed."""
    if PROFILE is None:
        return program.runner(args, pool.allocate, pool.release)
    return run_steps(program, args, pool, PROFILE)


def run_steps(
    program: Program, args: Sequence[Tensor], pool: BufferPool, profile: StepProfile | None
) -> list[Tensor]:
    """The steps one by one, over a list of slots (what `Program.runner` does in straight-line
    code), each timed into `profile` if given."""
    env: list[Tensor | None] = [None] * program.n_slots
    for slot, value in program.constants.items():
        env[slot] = value
    for slot, value in zip(program.arg_slots, args, strict=True):
        env[slot] = value
    allocate, release = pool.allocate, pool.release
    for i, (run, in_slots, out_slots, releases, drops) in enumerate(program.plan):
        # A step's inputs are set (by the arguments, constants or earlier steps) before it runs.
        ins = cast("list[Tensor]", [env[s] for s in in_slots])
        if profile is None:
            outs = run(ins, allocate)
        else:
            start = time.perf_counter()
            outs = run(ins, allocate)
            profile.add(program, program.steps[i].label, time.perf_counter() - start)
        for slot, value in zip(out_slots, outs, strict=True):
            env[slot] = value
        for slot, spec in releases:
            release(spec, cast(Tensor, env[slot]))  # a released slot holds its buffer
        for slot in drops:
            env[slot] = None
    results: list[Tensor] = []
    for slot in program.output_slots:
        result = env[slot]
        assert result is not None
        # A constant is shared by every call: the caller gets its own copy.
        results.append(result.clone() if slot in program.constants else result)
    return results


@dataclass
class Executable:
    """One specialisation: a program, how to bind user inputs to its arguments, and how to
    shape its flat results like the model's output."""

    program: Program
    bind: Callable[[Sequence[Tensor], Sequence[Tensor]], list[Tensor]]
    """(user inputs, module state tensors) -> `@forward`'s arguments."""
    unflatten: Callable[[list[Tensor]], Any]
    report: Any = None
    """The fusion report of this specialisation (`xfuse.api.FusionReport`), if one was made."""
    op_names: list[str] = field(default_factory=list[str])
    """The ops of the imported program, before fusion (for explanations)."""
    compile_times: dict[str, float] = field(default_factory=dict[str, float])
    """Seconds its build spent in each phase: `export` (torch.export and the import),
    `fusion` (the pass pipeline), `kernels` (lowering, compiling or loading kernels)."""
    outputs: OutputPlan | None = None
    """Makes the results alias what eager's would (`xfuse.runtime.outputs`)."""
    fresh_strides: tuple[tuple[int, ...] | None, ...] = ()
    """Each flat output's strides where it is memory of its own, None where it is a constant
    or a view (what AOTAutograd compiles the backward for: `xfuse.aot`)."""
    graphs: GraphRunner | None = None
    """Runs the program as a CUDA graph (`xfuse.runtime.cuda_graphs`); None: step by step."""
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    """Where its kernels run and its buffers live."""
    _pools: list[BufferPool] = field(default_factory=list[BufferPool])

    def run(
        self, inputs: Sequence[Tensor], state: Sequence[Tensor] = (), static: Sequence[int] = ()
    ) -> Any:
        """The program's outputs for the user's `inputs` and the module's `state`. Inputs at
        the positions `static` stay where they are between calls (parameters and buffers
        passed as inputs): a CUDA graph reads them in place, like `state`, and captures anew
        where one has moved."""
        args = self.bind(inputs, state)
        to_cpu = cpu_outputs(self.program, args) if self.program.scalar_args else []

        def finish(results: list[Tensor], copy_out: bool) -> list[Tensor]:
            for k in to_cpu:
                results[k] = results[k].cpu()
            return self._finish(args, results, copy_out)

        # Each running call takes a pool of its own, so concurrent calls never share a buffer
        # (a list's pop and append are atomic).
        pools = self._pools
        try:
            pool = pools.pop()
        except IndexError:
            pool = new_pool(self.device)
        try:
            if self.graphs is not None:
                in_place = [*state, *[inputs[i] for i in static]] if static else state
                outputs = self.graphs.run(args, in_place, pool, finish)
            else:
                outputs = finish(run_program(self.program, args, pool), False)
        finally:
            pool.trim()
            pools.append(pool)
        return self.unflatten(outputs)

    def _finish(
        self, args: Sequence[Tensor], results: list[Tensor], copy_out: bool
    ) -> list[Tensor]:
        """The caller's outputs: the output rules applied, graph memory (`copy_out`) copied."""
        if self.outputs is not None:
            return self.outputs.apply(args, results, copy_out)
        return [out.clone() for out in results] if copy_out else results


def cpu_outputs(program: Program, args: Sequence[Tensor]) -> list[int]:
    """The outputs that eager computes on the CPU for this call: those computed from CPU
    scalars alone (combined with a tensor on the device, a CPU scalar is a value to eager's
    kernels and the program's)."""
    on_cpu = frozenset(k for k in program.scalar_args if args[k].is_cpu)
    return program.outputs_only_from(on_cpu) if on_cpu else []


def is_cpu_scalar(t: Any) -> bool:
    """A 0-d CPU tensor, which eager's kernels on another device take as a value."""
    return isinstance(t, Tensor) and t.dim() == 0 and t.is_cpu


def describe(t: Tensor) -> str:
    return f"{t.dtype} {list(t.shape)} on {t.device}"


def inputs_text(tensors: Sequence[Tensor]) -> str:
    """Tensors' dtypes and shapes, as one-line errors name them: `float32[8, 32], int64[8]`."""
    return ", ".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in tensors)


def normalize_device(device: str | torch.device) -> torch.device:
    """`cuda` names the current CUDA device, as torch's tensors do (`cuda:0`): compare those."""
    d = torch.device(device)
    if d.type == "cuda" and d.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return d


def check_input(name: str, value: Tensor, device: torch.device) -> Tensor:
    """One tensor input (`name`: "input 0", "keyword input 'x'"...) as a tensor a compiled
    program can take, or a one-line `UnsupportedInputError`."""
    problem = tensor_input_problem(name, value)
    if problem is not None:
        raise UnsupportedInputError(problem)
    try:
        dtypes.from_torch(value.dtype)
    except dtypes.UnsupportedDtype as e:
        raise UnsupportedInputError(f"{name}: {e}") from None
    if value.device != device:
        if is_cpu_scalar(value):
            # A CPU scalar, which eager's kernels on `device` take as a value: library calls
            # get it as it is (attention reads its RNG state on the host), kernels a copy on
            # their device (`KernelStep.copied`).
            return value
        raise InputDeviceError(
            f"{name} is on {value.device}, but the program was compiled for {device}"
        )
    return value


def signature_of(inputs: Sequence[Tensor]) -> Signature:
    """Shapes, strides (eager's output strides follow its inputs') and dtypes."""
    # torch.Size is a tuple: it hashes and compares like one.
    return tuple([(t.shape, t.stride(), t.dtype) for t in inputs])


def _supported_dtypes() -> frozenset[torch.dtype]:
    found: set[torch.dtype] = set()
    for d in vars(torch).values():
        if isinstance(d, torch.dtype) and not d.is_complex:
            try:
                dtypes.from_torch(d)
            except dtypes.UnsupportedDtype:
                continue
            found.add(d)
    return frozenset(found)


SUPPORTED_DTYPES = _supported_dtypes()
"""The dtypes `check_input` accepts (what `dtypes.from_torch` knows), for its fast path."""


def is_plain_input(value: Any, device: torch.device) -> bool:
    """The common cases of `check_input`, in a few attribute reads: a dense tensor of a
    supported dtype on the program's device, or a CPU scalar (`is_cpu_scalar`, which
    `check_input` passes as it is: attention's RNG state that a training step's backward is
    given)."""
    return (
        isinstance(value, Tensor)
        and value.dtype in SUPPORTED_DTYPES
        and value.layout == torch.strided
        and (value.device == device or is_cpu_scalar(value))
    )


def requires_grad(tensors: Sequence[Tensor]) -> bool:
    return any(t.requires_grad for t in tensors)


def check_no_autograd(inputs: Sequence[Tensor], state: Sequence[Tensor]) -> None:
    """With grad enabled, no input or parameter may require grad: the results would carry no
    history and backward would silently miss them."""
    for what, tensors in (("an input", inputs), ("a parameter", state)):
        if requires_grad(tensors):
            raise AutogradUnsupportedError(
                f"{what} requires grad, but compiled programs are for inference (their results "
                "carry no autograd history): call it under torch.no_grad() or "
                "torch.inference_mode()"
            )


class CallInputs(NamedTuple):
    """One call's inputs as torch.export sees them: the positional and keyword arguments, their
    pytree leaves (tensors and Python constants, in export's order), the tensor leaves, and
    the structure a program is specialised on (None for distinct tensors passed positionally:
    the tree, the constants' values, and which leaves are one tensor)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    leaves: Sequence[Any]
    tensors: Sequence[Tensor]
    structure: Hashable


CONSTANT_TYPES = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format)
"""The Python values a call may pass where torch.export specialises on the value."""


def _distinct(tensors: Sequence[Tensor]) -> bool:
    """Whether no tensor is passed twice (export reads one tensor passed twice as one input)."""
    return len(tensors) < 2 or len({id(t) for t in tensors}) == len(tensors)


def _constant_key(value: Any) -> Hashable:
    # float.hex: NaN equals itself and 0.0 differs from -0.0, as the specialised program does.
    return (type(value), value.hex() if isinstance(value, float) else value)


def _leaf_name(path: tuple[Any, ...]) -> str:
    position, *rest = path
    assert isinstance(position, pytree.SequenceKey | pytree.MappingKey)
    head = (
        f"input {position.idx}"
        if isinstance(position, pytree.SequenceKey)
        else (f"keyword input '{position.key}'")
    )
    return head + pytree.keystr(tuple(rest))


def structured_call(
    args: tuple[Any, ...], kwargs: dict[str, Any], device: torch.device
) -> CallInputs:
    """A call with keyword arguments, constants, containers or one tensor passed twice: its
    leaves checked (tensors by `check_input`, the rest one of `CONSTANT_TYPES`)."""
    kwargs = dict(sorted(kwargs.items()))  # one program whatever the keywords' order
    paths, spec = pytree.tree_flatten_with_path((args, kwargs))
    leaves = [leaf for _, leaf in paths]
    tensors: list[Tensor] = []
    first: dict[int, int] = {}
    pattern: list[Hashable] = []
    for i, (path, leaf) in enumerate(paths):
        name = _leaf_name(path[1:])
        if isinstance(leaf, Tensor):
            leaves[i] = check_input(name, leaf, device)
            tensors.append(leaves[i])
            pattern.append(first.setdefault(id(leaf), i))
        elif isinstance(leaf, CONSTANT_TYPES):
            pattern.append(_constant_key(leaf))
        else:
            raise UnsupportedInputError(
                f"{name} is a {type(leaf).__name__}; compiled programs take tensors, Python "
                "scalars (int, float, bool, str, None) and tuples, lists and dicts of them"
            )
    return CallInputs(args, kwargs, leaves, tensors, (spec, tuple(pattern)))


RECENT_CALLS = 4
"""Guards of recent plain calls a `CompiledProgram` keeps (`CompiledProgram._guarded`)."""


class CompiledProgram:
    """A compiled model or function: call it like the model, as torch.export takes it
    (tensors, Python scalars, and tuples, lists and dicts of them, positionally or by keyword).

    `build(call)` makes the `Executable` for a call's signature; the example inputs' one is
    built here, upfront. `.groups`, `.kernels` and `.report` describe that first
    specialisation. Python scalars are specialised on: a new value builds a new program.
    """

    def __init__(
        self,
        build: Callable[[CallInputs], Executable],
        example_inputs: Sequence[Any],
        device: str | torch.device = "cpu",
        state: ModuleState | None = None,
        example_kwargs: dict[str, Any] | None = None,
        static_inputs: Sequence[int] = (),
        eager: Callable[..., Any] | None = None,
    ):
        self._build = build
        self.eager = eager
        """The model or function compiled: run to learn eager's error for a call whose tensors
        lie on another device than the program's (`_device_error`)."""
        self.state = state
        """The module's parameters and buffers, bound at every call (None for a function)."""
        self.values = (
            FunctionValues(eager)
            if eager is not None and not isinstance(eager, torch.nn.Module)
            else None
        )
        """A function's constants from its globals and closure (None for a module)."""
        self.static_inputs = tuple(static_inputs)
        """Positions of the inputs whose memory stays put between calls (`Executable.run`)."""
        self.device = normalize_device(device)
        self.arity = len(example_inputs)
        self._lock = threading.Lock()
        self._building: dict[Any, threading.Lock] = {}
        self.specialisations: dict[Any, Executable] = {}
        self._recent: tuple[tuple[Any, Hashable, Executable], ...] = ()
        """(guard, `_context`, specialisation) of recent plain calls, newest first: a call
        that passes a guard in that context runs that specialisation (`_guarded`)."""
        call = self._inputs(tuple(example_inputs), example_kwargs or {})
        self.example_inputs = inputs_text(call.tensors)
        """The example inputs' dtypes and shapes, as errors name them."""
        tensors = self.state.tensors() if self.state is not None else []
        self._check_state_devices(call, tensors)
        # Built for the grad mode its calls will have: off where an input or parameter
        # requires grad, since calls with grad on are refused then (`check_no_autograd`).
        grad = torch.is_grad_enabled() and not requires_grad([*call.tensors, *tensors])
        self.default_grad = grad
        """The grad mode `default` was built for."""
        self.default = self._specialise(
            self._signature(call.tensors, call.structure, tensors, grad), call, grad
        )

    @property
    def groups(self) -> list[GroupInfo]:
        return self.default.program.groups

    @property
    def kernels(self) -> list[KernelInfo]:
        return self.default.program.kernels

    @property
    def report(self) -> Any:
        return self.default.report

    @property
    def fallbacks(self) -> list[str]:
        return self.default.program.fallbacks

    @property
    def compile_times(self) -> dict[str, float]:
        """Seconds the first specialisation's build spent in each phase (`export`, `fusion`,
        `kernels`): where a compile's time went."""
        return self.default.compile_times

    @property
    def op_by_op(self) -> list[str]:
        """Groups compiled op by op (their lowering refused them), with why."""
        return self.default.program.op_by_op

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        state = self.state.tensors() if self.state is not None else ()
        if not kwargs and self._recent:
            found = self._guarded(args, state)
            if found is not None:
                return found.run(args, state, self.static_inputs)
        if self._plain(args, kwargs):
            # The fast path (`_inputs`' first case), with no `CallInputs` made.
            tensors: Sequence[Any] = args
            call = None
        else:
            call = self._inputs(args, kwargs)
            tensors = call.tensors
        grad = torch.is_grad_enabled()
        # The signature first: it refuses module state that is no tensor any more.
        sig = self._signature(tensors, None if call is None else call.structure, state, grad)
        if grad:
            check_no_autograd(tensors, state)
        executable = self.specialisations.get(sig)
        if executable is None:
            executable = self._new_specialisation(
                sig, call or CallInputs(args, {}, args, args, None), grad
            )
        if call is None:
            outputs = executable.run(args, state, self.static_inputs)
            self._remember(args, state, grad, executable)
            return outputs
        return executable.run(call.leaves, state)

    def _guarded(self, args: tuple[Any, ...], state: Sequence[Tensor]) -> Executable | None:
        """The specialisation of a recent plain call whose guard `args` pass (in C++: the
        sizes, strides, dtypes, devices, Python types, dispatch keys and requires_grad that
        `_plain`, `_signature` and `check_no_autograd` read) in that call's grad mode and
        module state (`_context`), where `args` are distinct tensors; else None."""
        if len(args) != self.arity:
            return None
        passed = [(key, found) for guard, key, found in self._recent if guard.check(*args)]
        if not passed or not _distinct(args):
            return None
        context = self._context(state, torch.is_grad_enabled())
        return next((found for key, found in passed if key == context), None)

    def _remember(
        self, args: tuple[Any, ...], state: Sequence[Tensor], grad: bool, executable: Executable
    ) -> None:
        """Keep a guard of a plain call that ran (`_guarded`), unless one it passes is kept."""
        context = self._context(state, grad)
        if any(key == context and guard.check(*args) for guard, key, _ in self._recent):
            return
        guard = layout_guard(args)
        if guard is not None:
            # One assignment (threads read the tuple whole); the newest first, a few kept.
            self._recent = ((guard, context, executable), *self._recent[: RECENT_CALLS - 1])

    def _context(self, state: Sequence[Tensor], grad: bool) -> Hashable:
        """What a signature holds besides the inputs' layouts: grad mode, the default dtype,
        and the module state's key or the function's constants (`_signature`)."""
        mode = (grad, torch.get_default_dtype())
        if self.values is not None:
            return (mode, self.values.token())
        return mode if self.state is None else (mode, self.state.key(state))

    def _new_specialisation(self, sig: Any, call: CallInputs, grad: bool) -> Executable:
        """`_specialise` for a call's new signature. Where torch.export fails on it (its
        example inputs' exported), the model refuses these inputs, as eager would: an
        `InputMismatchError` naming the inputs given and those compiled for."""
        if self.state is not None:
            self._check_state_devices(call, self.state.tensors())
        try:
            return self._specialise(sig, call, grad)
        except ExportError as e:
            cause = e.__cause__
            if cause is None or isinstance(cause, XfuseError):  # xfuse's limit, not the inputs'
                raise
            raise InputMismatchError(
                f"xfuse: the program refuses inputs {inputs_text(call.tensors)} (compiled for "
                f"{self.example_inputs}): {reason_of(cause)}"
            ) from cause

    def _signature(
        self, tensors: Sequence[Tensor], structure: Hashable, state: Sequence[Tensor], grad: bool
    ) -> Any:
        """What a program is specialised on: the inputs' and the module state's layouts (a
        function's constants instead: `FunctionValues`), the inputs' structure, grad mode (a
        forward may branch on it, and export traces the branch of the mode it runs in) and
        the default dtype (of the forward's factories)."""
        sig = (signature_of(tensors), self._context(state, grad))
        return sig if structure is None else (structure, sig)

    def _inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CallInputs:
        if len(args) != self.arity:
            raise UnsupportedInputError(
                f"the compiled program takes {self.arity} positional input(s), got {len(args)}"
            )
        if self._plain(args, kwargs):
            return CallInputs(args, {}, args, args, None)
        try:
            return structured_call(args, kwargs, self.device)
        except InputDeviceError as e:
            raise self._device_error(args, kwargs, e) from None

    def _check_state_devices(self, call: CallInputs, state: Sequence[Tensor]) -> None:
        """The module's parameters and buffers on the program's device, or `_device_error`."""
        for name, t in zip(self.state.names if self.state else (), state, strict=False):
            if isinstance(t, Tensor) and t.device != self.device:
                problem = InputDeviceError(
                    f"'{name}' is on {t.device}, but the program was compiled for {self.device}"
                )
                raise self._device_error(call.args, call.kwargs, problem) from None

    def _device_error(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], problem: InputDeviceError
    ) -> Exception:
        """A call with a tensor on another device than the program's: eager's own error where
        eager refuses the call (its kernels check that their tensors share a device), else
        `problem`, saying that eager would have moved it."""
        if self.eager is None:
            return problem
        found = eager_call_error(self.eager, args, kwargs)
        if found is not None:
            return found
        return InputDeviceError(
            f"{problem}; eager accepts this call (it moves a CPU index to the other tensors' "
            f"device), a compiled program does not: pass it on {self.device}"
        )

    def _plain(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether a call is distinct plain tensors passed positionally (the fast path)."""
        device = self.device
        return (
            not kwargs
            and len(args) == self.arity
            and all(is_plain_input(v, device) for v in args)
            and _distinct(args)
        )

    def _specialise(self, sig: Any, call: CallInputs, grad: bool) -> Executable:
        """The program for `sig`, built (and exported) in grad mode `grad`."""
        # One build per signature even when several threads call with it at once.
        with self._lock:
            lock = self._building.setdefault(sig, threading.Lock())
        with lock:
            found = self.specialisations.get(sig)
            if found is None:
                with torch.set_grad_enabled(grad):
                    found = self._build(call)
                self.specialisations[sig] = found
            return found
