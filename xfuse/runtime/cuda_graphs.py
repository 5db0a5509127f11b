"""
A program on CUDA runs as a captured CUDA graph: one replay issues every step (kernels and
externs) with no per-step host work.

The first call of a specialisation runs step by step (a warm-up: modules load, cuBLAS makes its
handles); the second captures the steps into a `torch.cuda.CUDAGraph` on torch's capture stream
and replays it; later calls replay it. Eager semantics are kept exactly:

- module parameters and buffers are read where they are, and so is every other device input
  found at the same address at the capture as at the call before it (the same tensor passed
  at every call); a replay first checks each such input's address (cudagraph trees' check of
  static inputs), and a call where one has moved (a reassigned `nn.Parameter`, a user input
  the allocator put elsewhere) captures anew, reading in place only what stayed; inputs that
  moved at two calls in a row (FSDP gathers its weights anew at each call) are copied from
  then on. Other inputs are copied into the graph's own input buffers before each replay (the
  caller's tensors may live anywhere; an expanded one as the memory it spans), where that
  copy costs less GPU time than the host time a replay saves (else the program runs step by
  step);
- a replay overwrites the graph's memory, so it runs only on a graph whose memory nobody but
  the runner holds (`GraphMemory.free`: the use counts of its output and input storages, as
  Inductor's CUDA-graph trees read them). The outputs of such a replay are handed to the
  caller as they are, with no copy: they are fresh memory for the caller until it drops them
  (views, `untyped_storage()` objects and DLPack capsules all count as holding them). A
  caller that still holds the last call's outputs (`y = f(x)` in a loop holds the old `y`
  while the next call runs) gets a second capture of its own memory; one that keeps every
  output (a list of results) a third, whose outputs are always copied out, once, with eager's
  strides (`xfuse.runtime.outputs`), so that it is never held. An output the caller gets as
  memory of its own that is the memory of an input read in place (an identity `clone`) is
  copied by the graph into its own memory, at one address for every replay. A program whose
  capture holds `RING_MEMORY_SHARE` of the GPU's memory or more captures once and always
  copies, as before;
- a program whose caller releases its outputs before it calls again (`released`: the forward
  of a training step, whose saved tensors the backward frees) always hands its outputs over,
  whatever their size: with no capture free (the caller held them after all) the call runs
  step by step, and no more than `RELEASED_RING_SIZE` captures are made;
- a program whose inputs are so large that copying them into the graph costs more GPU time
  than the host time its launches take (`graph_pays`) runs step by step: a replay saves a few
  microseconds per step, a copy of 1 GiB takes a millisecond. The price is taken at the
  capture, from what it would read in place; a call it sends step by step notes where its
  inputs are, and the next call prices again (a backward's saved tensors move once, when its
  forward's graph is captured, and stay put from then on), up to `PRICE_WAITS` such calls
  before the program runs step by step for good. Outputs count where a replay
  would copy them out (the caller holds every other capture's): such a call runs step by
  step instead where copying its inputs and outputs costs more than its launches, and a
  caller that drops its outputs (handed over, never copied) replays whatever their size;
- random numbers (dropout) are eager's: a replay draws from the generator's state at the
  call (torch's graph-safe RNG: `manual_seed` before a call gives eager's mask), and the run
  that precedes a capture leaves the generator as it found it;
- a program that reads or returns a CPU tensor (a 0-d scalar input, or the RNG state that
  attention with dropout hands its backward, which the backward reads on the host) runs step
  by step: a graph replays device work only;
- a program that may write memory it does not own (an in-place torch op on an input) is never
  captured: its writes would land in the graph's copies. Neither is a program whose capture
  fails (a step that synchronises with the host). `reason` says why, and the program runs step
  by step as before.

`XFUSE_CUDA_GRAPHS=0` or `xfuse.compile(..., cuda_graphs=False)` turns graphs off.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, cast

import torch
from xdsl.dialects.builtin import ModuleOp

from xfuse.dialects.effects import may_mutate
from xfuse.frontend.outputs import overlaps
from xfuse.ir.functions import function_bodies
from xfuse.ir.names import KERNEL_ATTR
from xfuse.runtime.fallback import reason_of
from xfuse.runtime.outputs import fresh_copy
from xfuse.runtime.steps import BufferPool

Tensor = torch.Tensor


class Steps(Protocol):
    """What a `GraphRunner` runs: a program's module after fusion (what `why_not_capturable`
    reads) and its steps (one launch or torch call each: what a replay saves host time on). A
    static program (`xfuse.runtime.compiler.Program`) and a symbolic one
    (`xfuse.runtime.symbolic.SymbolicProgram`) are both."""

    @property
    def module(self) -> ModuleOp: ...

    @property
    def steps(self) -> Sequence[object]: ...


P = TypeVar("P", bound=Steps)
RunSteps = Callable[[P, Sequence[Tensor], BufferPool], list[Tensor]]
"""(program, `@forward`'s arguments, a buffer pool) -> the program's results, step by step."""
Finish = Callable[[list[Tensor], bool], list[Tensor]]
"""(results, whether they are graph memory to copy out) -> the caller's outputs."""


def cuda_graphs_enabled(asked: bool = True) -> bool:
    """Graphs are on unless turned off by the caller or `XFUSE_CUDA_GRAPHS=0`."""
    return asked and os.environ.get("XFUSE_CUDA_GRAPHS", "1") != "0"


STEP_HOST_SECONDS = 4e-6
"""Host time a replay saves per step: the runtime's launch of a kernel, or its call of a torch
op, a few microseconds on a GPU machine's host."""

COPY_BYTES_PER_SECOND = 2e12
"""What a device-to-device copy moves per second, counting each byte once (read and written:
the H100's measured copy bandwidth is 2.6-3 TB/s; below it, to favour graphs)."""


def graph_pays(copied_bytes: int, steps: int) -> bool:
    """Whether a replay's copies (the user's inputs in, the outputs out: `copied_bytes`)
    take less GPU time than the host time that replaying `steps` steps saves."""
    return copied_bytes / COPY_BYTES_PER_SECOND < steps * STEP_HOST_SECONDS


def _off_device(args: Sequence[Tensor], outputs: Sequence[Tensor], device: torch.device) -> str:
    """Which of a call's tensors are off the program's `device` (the CPU, or another GPU;
    `cuda` with no index is the current one, which the tensors name): "input 3 (cpu, [],
    int64)"."""
    named = [
        *(("input", i, t) for i, t in enumerate(args)),
        *(("output", i, t) for i, t in enumerate(outputs)),
    ]
    off = [
        f"{kind} {i} ({t.device}, {list(t.shape)}, {str(t.dtype).removeprefix('torch.')})"
        for kind, i, t in named
        if t.device.type != device.type or device.index not in (None, t.device.index)
    ]
    return ", ".join(off[:3]) + (f" and {len(off) - 3} more" if len(off) > 3 else "")


def _nbytes(tensors: Sequence[Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def why_not_capturable(module: ModuleOp) -> str | None:
    """Why the program of `module` (after fusion) must not run as a graph, or None when it may.
    (torch.export refuses programs that write their inputs, so this guards IR from elsewhere.)"""
    for f in function_bodies(module):
        if KERNEL_ATTR in f.attributes:
            continue  # a kernel writes only the buffers it is given
        for op in f.body.block.ops:
            # Launches and groups write only their own outputs; graph ops are pure, but for
            # torch calls, whose targets may write their arguments.
            if op.dialect_name() in ("fusion", "func"):
                continue
            if may_mutate(op):
                return f"the program writes memory it does not own ({op.name})"
    return None


def _span(t: Tensor) -> int:
    """How many elements of memory `t` reaches, from its first (its storage offset) on."""
    if t.numel() == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))


def _static_copy(t: Tensor) -> Tensor:
    """The graph's own buffer for user input `t`: `t`'s sizes, strides, dtype and device, its
    values copied in. An input that overlaps itself (an expand: stride 0) gets memory of the
    same layout, its span copied element for element (`copy_` refuses to write it). Never an
    inference tensor, which a call outside inference mode could not copy into."""
    with torch.inference_mode(False), torch.no_grad():
        return _static_buffer(t)


def _static_buffer(t: Tensor) -> Tensor:
    if not overlaps(tuple(t.shape), tuple(t.stride())):
        return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(t)
    memory = torch.empty(_span(t), dtype=t.dtype, device=t.device)
    static = memory.as_strided(t.size(), t.stride(), 0)
    _refresh(static, t)
    return static


def _refresh(static: Tensor, t: Tensor) -> None:
    """`t`'s values into the graph's buffer `static` (same sizes and strides: the signature)."""
    if overlaps(tuple(t.shape), tuple(t.stride())):
        span = _span(t)
        static.as_strided((span,), (1,)).copy_(t.as_strided((span,), (1,)))
    else:
        static.copy_(t)


PRICE_WAITS = 16
"""Calls that run step by step where a capture would copy in too much, before graphs give up
on a program for good. A training step's programs feed each other: a backward reads the
tensors its forward saved, which move once, when the forward's graph is first captured; a
program of a chain of pieces reads its input where the piece before it last captured. Such an
input stays where it is from the call after its producer's capture on, and producers settle
one after another: on GPT-2 12x768 under DDP on one GPU, the 28 programs of 30 that read no
logits captured by their fourth call; the loss's backward, which reads a fresh 786 MiB copy
of the logits, ran 7 calls step by step and captured 4 times before its input stayed put.
The count is not reset by a capture, so a program whose inputs keep moving stops
recapturing."""


RING_MEMORY_SHARE = 64
"""A program whose capture holds this share of its GPU's memory or more (its buffers, inputs
and outputs: 256 MiB of a 16 GiB GPU, 2.2 GB of an H200's 141) is captured once, and its
outputs are always copied out: a second and third capture, which let replays hand their
outputs over with no copy, would hold as much again each. Below it, two more captures hold at
most 1/32 of the memory: a language model's logits at 8x512 tokens (262-411 MB) are handed
over, where a copy out would take 0.1-0.2 ms of a 2 ms forward."""


def ring_max_bytes(device: torch.device) -> int:
    """The capture size from which a program on `device` is captured once (`RING_MEMORY_SHARE`)."""
    return torch.cuda.get_device_properties(device).total_memory // RING_MEMORY_SHARE


RING_SIZE = 3
"""Captures of one program at most: two that hand their outputs over (a caller that holds the
last call's outputs while it makes the next call), and a third that always copies them out."""

RELEASED_RING_SIZE = 2
"""Captures of a `released` program at most, whatever their size: both hand their outputs over
(a training loop that holds the last step's outputs while it runs the next forward)."""


class GraphMemory:
    """The storages a replay writes that a result may be (the graph's outputs and its copies of
    user inputs), and how often each is referred to while only the runner holds it: the memory
    is free when every count is back there. A caller's tensor or view of it raises the
    storage's use count; its `untyped_storage()` object is the one Python object torch keeps
    per storage, whose reference count rises instead (the runner holds that object too)."""

    def __init__(self, tensors: Sequence[Tensor]) -> None:
        unique = {id(s): s for s in (t.untyped_storage() for t in tensors)}
        self.storages = tuple(unique.values())
        del unique  # counted with no reference but the runner's
        self.counts = tuple(self._counts())

    def _counts(self) -> Iterator[tuple[int, int]]:
        for s in self.storages:
            yield torch._C._storage_Use_Count(s._cdata), sys.getrefcount(s)

    def free(self) -> bool:
        return all(now == then for now, then in zip(self._counts(), self.counts, strict=True))


def _written_memory(captured: _Captured) -> GraphMemory:
    """The memory of `captured` that a replay writes and a result may be: its outputs (but for
    those that are the memory of an argument read in place) and its input copies."""
    outputs = [
        t
        for t in captured.outputs
        if t is not None and t.untyped_storage().data_ptr() not in captured.kept
    ]
    return GraphMemory(outputs + [cast(Tensor, captured.inputs[i]) for i in captured.copied])


@dataclass(frozen=True)
class _InputView:
    """An output that is a view of an argument read in place (a forward that returns its
    input among the tensors it saves): rebuilt from the call's argument at each replay."""

    arg: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    """Elements from the argument's first element to the view's."""

    def of(self, args: Sequence[Tensor]) -> Tensor:
        a = args[self.arg]
        return a.as_strided(self.size, self.stride, a.storage_offset() + self.offset)


def _input_view(t: Tensor, args: Sequence[Tensor], in_place: Sequence[bool]) -> _InputView | None:
    """How output `t` views an argument read in place (the one its first element lies in,
    nearest that element's start, where several share its memory), or None where it is the
    graph's own memory."""
    memory, start, size = t.untyped_storage().data_ptr(), t.data_ptr(), t.element_size()
    views = [
        _InputView(i, tuple(t.shape), tuple(t.stride()), (start - a.data_ptr()) // size)
        for i, (a, keep) in enumerate(zip(args, in_place, strict=True))
        if keep
        and a.dtype == t.dtype
        and a.untyped_storage().data_ptr() == memory
        and a.data_ptr() <= start
    ]
    return min(views, key=lambda v: v.offset, default=None)


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: list[Tensor | None]
    """The graph's own copies of the user inputs it copies in; None where it reads the
    argument in place. The capture keeps no reference to a tensor it reads in place, nor to
    an output that views one: the caller's memory stays the caller's to free (a training
    forward's outputs, which the backward's graph reads in place, are free for the forward's
    next replay once the step is done), and a replay reads the tensor that its address check
    finds there."""
    copied: tuple[int, ...]
    in_place: list[int]
    """The positions of the arguments read in place (parameters and buffers, and inputs found
    at the same address as at the call before)."""
    addresses: list[int | None]
    """Each argument's data pointer at capture where it is read in place (None elsewhere)."""
    outputs: list[Tensor | None]
    """The graph's outputs, None where one views an argument read in place (`views`)."""
    views: dict[int, _InputView]
    kept: frozenset[int]
    """The data pointers of the storages of the arguments read in place, at capture (an
    output in one that `views` does not rebuild, of another dtype, is the caller's memory)."""
    pool: BufferPool
    """The graph's intermediate buffers (kept alive with it)."""
    inference: bool
    """Whether it was captured in inference mode (its outputs are inference tensors)."""
    memory: GraphMemory | None = None

    def results(self, args: Sequence[Tensor]) -> list[Tensor]:
        """A replay's outputs for the call's `args`."""
        return [self.views[j].of(args) if t is None else t for j, t in enumerate(self.outputs)]

    def moved(self, args: Sequence[Tensor]) -> bool:
        """Whether an input the graph reads in place is elsewhere in `args`."""
        if _pointers_equal is not None:
            return not _pointers_equal(args, self.addresses, self.in_place)
        return bool(self.moving(args))

    def moving(self, args: Sequence[Tensor]) -> frozenset[int]:
        """The positions of the inputs read in place that `args` has elsewhere."""
        return frozenset(i for i in self.in_place if args[i].data_ptr() != self.addresses[i])


def _addresses(args: Sequence[Tensor]) -> list[int]:
    return [a.data_ptr() for a in args]


_pointers_equal = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)
"""CUDA builds' C++ check that `tensors[i].data_ptr() == pointers[i]` for each `i` of `indices`
(cudagraph trees' check of static inputs): a model's hundreds of parameters in microseconds."""


class GraphRunner(Generic[P]):
    """Runs one specialisation's program through CUDA graphs (see the module docstring); one
    shape of a symbolic program's (`xfuse.runtime.shape_graphs`)."""

    def __init__(
        self,
        program: P,
        run_steps: RunSteps[P],
        device: torch.device,
        released: bool = False,
        fresh: Sequence[tuple[int, ...] | None] = (),
    ) -> None:
        self.program = program
        self.run_steps = run_steps
        self.device = device
        self.released = released
        """The caller releases the outputs before it calls again: they are always handed
        over, never copied out."""
        self.fresh = tuple(fresh)
        """Each result's strides in eager where the caller gets it as memory of its own
        (output rule `fresh`), None where it gets a view (`_owned`)."""
        self.reason = why_not_capturable(program.module)
        """Why the program runs step by step, or None while graphs serve it."""
        self.calls = 0
        self.captures = 0
        self.replays = 0
        self.handed = 0
        """Replays whose outputs went to the caller with no copy."""
        self.stepped = 0
        """Calls that ran step by step where a replay would have copied its outputs out at
        more GPU time than the host time of its steps."""
        self._warm = False
        self._moved_last = False
        """Whether the last replayed call found an input read in place moved."""
        self._copied_always: frozenset[int] = frozenset()
        """Inputs (by argument position) that moved at two calls in a row: copied into the
        graph's buffers at each replay."""
        self._seen: list[int] = []
        """Each argument's data pointer at the warm-up or the last capture: an input at the
        same address at the next capture is read in place."""
        self._price = False
        """Whether the next capture is priced first (`_why_steps`): set where the warm-up
        found that copying every input but the parameters and buffers would not pay, and where
        an input read in place moved; the capture decides again, from what it would read in
        place."""
        self._priced_out = 0
        """Calls that the price sent step by step: up to `PRICE_WAITS`, each notes where the
        inputs were, so that the next call reads in place what stayed."""
        self._ring: list[_Captured] = []
        self._size = RELEASED_RING_SIZE if released else RING_SIZE
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        """Counts `calls`, which step-by-step runners' calls (outside `_lock`) add to too."""

    def run(
        self, args: Sequence[Tensor], state: Sequence[Tensor], pool: BufferPool, finish: Finish
    ) -> list[Tensor]:
        """The program's results for `args`, bound from the user's inputs and the module's
        `state` (state is read where it is; inputs are copied into the graph's buffers), made
        the caller's by `finish(results, copy_out)`: `copy_out` says they are graph memory the
        runner keeps (which a later replay overwrites), to be copied out. Results handed over
        are the caller's: the graph is not replayed again while anything of them is held. One
        call at a time chooses, replays and finishes (threads may share a program)."""
        with self._count_lock:
            self.calls += 1
        if self.reason is not None:
            return finish(self.run_steps(self.program, args, pool), False)
        with self._lock:
            if not self._warm:
                return finish(self._warm_up(args, state, pool), False)
            if self.reason is not None:  # decided by a call this one waited for
                return finish(self.run_steps(self.program, args, pool), False)
            return self._replay(args, state, pool, finish)

    def status(self) -> str:
        """How the program's calls run (`Explanation.cuda_graph`)."""
        captures = f"{self.captures} capture" + ("" if self.captures == 1 else "s")
        used = f"{self.replays} of {self.calls} calls replayed a graph ({captures})"
        if self.reason is not None:
            return f"not used: {self.reason}" + (f"; before that, {used}" if self.replays else "")
        text = "captured at the second call (later while a large input moves), replayed after"
        return f"{text}; {used}" if self.calls > 1 else text

    def _replay(
        self, args: Sequence[Tensor], state: Sequence[Tensor], pool: BufferPool, finish: Finish
    ) -> list[Tensor]:
        ring = self._ring
        moved = cleared = bool(ring) and ring[0].moved(args)
        grew = False
        if moved:
            moving = ring[0].moving(args)
            ring.clear()  # an input read in place moved: drop the old graphs' memory
            if self._moved_last:  # twice in a row: copy those in from now on
                self._copied_always |= moving
                moved, grew = False, True
        self._moved_last = moved
        # A capture anew copies in what moved: priced again, as the first one is where the
        # warm-up found copying every user input too dear.
        self._price = self._price or cleared
        if self._price:
            why = self._why_steps(args, state, grew)
            if why is not None:
                return finish(self._priced_steps(args, pool, why, final=grew), False)
            self._price = False
        free = [c for c in ring if c.memory is None or c.memory.free()]
        if not free and len(ring) < self._size:
            try:
                captured = self._capture(args, state)
            except Exception as e:  # noqa: BLE001 - any failure: run step by step, say why
                ring.clear()
                self.reason = f"CUDA graph capture failed: {reason_of(e)}"
                torch.cuda.synchronize()
                return finish(self.run_steps(self.program, args, pool), False)
            ring.append(captured)
            free = [captured]
        if not free:  # every capture's memory is held (by tensors of the caller's)
            return finish(self.run_steps(self.program, args, pool), False)
        captured = free[0]
        last = len(free) == 1 and len(ring) >= self._size and not self.released
        copy_out = last or captured.inference != torch.is_inference_mode_enabled()
        if copy_out and not graph_pays(
            _nbytes([args[i] for i in captured.copied]) + _nbytes(captured.results(args)),
            self._steps(),
        ):
            self.stepped += 1  # copying the outputs out would cost more than the launches
            return finish(self.run_steps(self.program, args, pool), False)
        for i in captured.copied:
            _refresh(cast(Tensor, captured.inputs[i]), args[i])
        self._launch(captured, args)
        self.replays += 1
        if captured.memory is None:  # counted once the capture's own temporaries are gone
            captured.memory = _written_memory(captured)
        if copy_out:
            return finish(captured.results(args), True)  # copied out: this capture stays free
        self.handed += 1
        return finish([t.detach() for t in captured.results(args)], False)

    def _launch(self, captured: _Captured, args: Sequence[Tensor]) -> None:
        """Replays `captured` (its inputs refreshed, those read in place checked at `args`)."""
        captured.graph.replay()

    def _warm_up(
        self, args: Sequence[Tensor], state: Sequence[Tensor], pool: BufferPool
    ) -> list[Tensor]:
        self._warm = True
        self._seen = _addresses(args)
        outputs = self.run_steps(self.program, args, pool)
        devices = {t.device for t in (*args, *outputs)}
        if len(devices) > 1:
            self.reason = (
                f"it reads or returns tensors on {len(devices)} devices ({_off_device(args, outputs, self.device)}"
                "; a CPU scalar, or the RNG state a library kernel keeps on the host), which a "
                "CUDA graph cannot replay"
            )
            return outputs
        state_ids = {id(t) for t in state}
        user = _nbytes([a for a in args if id(a) not in state_ids])
        self._price = not graph_pays(user, self._steps())
        return outputs

    def _priced_steps(
        self, args: Sequence[Tensor], pool: BufferPool, why: str, final: bool
    ) -> list[Tensor]:
        """A call whose capture would not pay, run step by step. Its inputs' addresses are
        noted: an input that a producer wrote elsewhere this time (the graph of the program
        before it, captured at this call) is likely where it is now at the next call, which
        then reads it in place. After `PRICE_WAITS` such calls, or where what moved are
        weights copied in at every call from now on (`final`), graphs give up: `why`."""
        self._priced_out += 1
        if final or self._priced_out > PRICE_WAITS:
            self.reason = why
        self._seen = _addresses(args)
        return self.run_steps(self.program, args, pool)

    def _why_steps(self, args: Sequence[Tensor], state: Sequence[Tensor], grew: bool) -> str | None:
        """Why a capture for `args` would not pay (`graph_pays`: the bytes it copies in at each
        replay against the host time of its steps), or None where it would."""
        copied = self._input_bytes(args, self._in_place(args, state))
        steps = self._steps()
        if copied == 0 or graph_pays(copied, steps):
            return None
        if grew:
            return (
                "its parameters move at every call (weights gathered anew at each call, as "
                "FSDP's are), and copying them into the graph at every replay would cost more "
                "GPU time than the host time of its steps"
            )
        return (
            f"copying its inputs ({copied / 2**20:.1f} MiB) at every replay would cost more GPU "
            f"time than the host time of its {steps} steps"
        )

    def _steps(self) -> int:
        return len(self.program.steps)

    def _in_place(self, args: Sequence[Tensor], state: Sequence[Tensor]) -> list[bool]:
        """Whether a capture reads each of `args` where it is rather than copying it into
        the graph's buffers: what the ring's first capture reads in place (every capture of
        the ring reads the same, so that its check of their addresses serves them all); in a
        first capture, the parameters and buffers (`state`) and the device inputs at the
        address they had at the warm-up or the last capture, but for those that moved at two
        calls in a row."""
        if self._ring:
            kept = frozenset(self._ring[0].in_place)
            return [i in kept for i in range(len(args))]
        state_ids = {id(t) for t in state}
        seen, copied_always, kind = self._seen, self._copied_always, self.device.type
        return [
            i not in copied_always
            and (id(a) in state_ids or (a.device.type == kind and a.data_ptr() == seen[i]))
            for i, a in enumerate(args)
        ]

    @staticmethod
    def _input_bytes(args: Sequence[Tensor], in_place: Sequence[bool]) -> int:
        """The bytes a replay copies in: the arguments not read in place."""
        return _nbytes([a for a, keep in zip(args, in_place, strict=True) if not keep])

    def _capture(self, args: Sequence[Tensor], state: Sequence[Tensor]) -> _Captured:
        device = self.device
        before = torch.cuda.memory_allocated(device)
        in_place = self._in_place(args, state)
        # A CPU scalar (a value to the kernels) gets its graph buffer on the device.
        inputs = [
            a if keep else _static_copy(a.to(device) if a.is_cpu else a)
            for a, keep in zip(args, in_place, strict=True)
        ]
        # Once on a side stream first: kernels load for launches off the default stream, and
        # libraries make the handles they need there, before anything is captured.
        # The run draws from the RNG (dropout) as a call would: the generator is put back,
        # so that the replay below draws what an eager call from this state draws.
        rng = torch.cuda.get_rng_state(device)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            self.run_steps(self.program, inputs, BufferPool(device))
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.set_rng_state(rng, device)
        pool = BufferPool(device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = self._owned(self.run_steps(self.program, inputs, pool), inputs, in_place)
        self.captures += 1
        held = torch.cuda.memory_allocated(device) - before
        if held >= ring_max_bytes(device) and not self.released:
            self._size = 1
        return self._captured(graph, args, inputs, in_place, outputs, pool)

    def _owned(
        self, outputs: list[Tensor], inputs: Sequence[Tensor], in_place: Sequence[bool]
    ) -> list[Tensor]:
        """`outputs`, each that the caller gets as memory of its own (`fresh`) but that is the
        memory of an input read in place (an identity `clone`: a training forward's copy of
        a tensor it returns and saves) copied, in the capture, into the graph's memory with
        eager's strides. A replay then writes that copy at one address, where the output
        rules would copy it at each call into memory the allocator places anywhere: the next
        program that reads it (the backward) would find it moved, and capture anew."""
        if not self.fresh:
            return outputs
        pairs = zip(inputs, in_place, strict=True)
        kept = {a.untyped_storage().data_ptr() for a, keep in pairs if keep}
        owned = list(outputs)
        for j, (t, stride) in enumerate(zip(outputs, self.fresh, strict=True)):
            if stride is not None and t.numel() and t.untyped_storage().data_ptr() in kept:
                owned[j] = fresh_copy(t, stride)
        return owned

    def _captured(
        self,
        graph: torch.cuda.CUDAGraph,
        args: Sequence[Tensor],
        inputs: list[Tensor],
        in_place: Sequence[bool],
        outputs: list[Tensor],
        pool: BufferPool,
    ) -> _Captured:
        """A capture's record: what it reads in place of `args` and at which addresses."""
        self._seen = _addresses(args)
        views = {j: v for j, t in enumerate(outputs) if (v := _input_view(t, args, in_place))}
        pairs = list(zip(args, in_place, strict=True))
        return _Captured(
            graph,
            [None if keep else t for t, keep in zip(inputs, in_place, strict=True)],
            tuple(i for i, keep in enumerate(in_place) if not keep),
            [i for i, keep in enumerate(in_place) if keep],
            [a.data_ptr() if keep else None for a, keep in pairs],
            [None if j in views else t for j, t in enumerate(outputs)],
            views,
            frozenset(a.untyped_storage().data_ptr() for a, keep in pairs if keep),
            pool,
            torch.is_inference_mode_enabled(),
        )
