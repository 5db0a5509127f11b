"""
Choices measured at compile time: where xfuse's kernel competes with the library call it would
replace, both run once at the program's shapes and the faster is kept.

A depthwise convolution either becomes a stencil that fuses with its neighbours
(`depthwise-stencil`) or stays the library's call (cuDNN, oneDNN, or torch's own depthwise
kernel). Which is faster depends on the device, the shapes and the layout: a 3x3 window over a
few thousand elements at batch 1 is far too little work for a library call's fixed costs, while
ConvNeXt's 7x7 window over a batch of 32 images runs in cuDNN at a fraction of the stencil's
time. `library_convolutions` times each distinct convolution of a program (`signature`) both
ways, alone, on random data of its shapes, dtype and the layout the program will give it, and
returns those whose library call was faster; `depthwise-stencil` leaves those alone. The
stencil timed is compiled from the convolution's program built as torch.export and the importer
would make it (`_Convolution.imported`), so that the program is exported once, not once per
convolution measured. The stencils of all the convolutions a compile measures are compiled
first, together (`CompileAhead`: in worker processes on CUDA), then timed one by one. Each
verdict is kept in the kernel cache beside the kernels (`CHOICE` entries, keyed by the
signature, the device's name and torch's version), so it is measured once per machine, and
`Executable.choices` (shown by `explain()`) lists every verdict with its two times. A
symbolic program's convolutions (a batch of any size) are timed at its size hints and at a
few times them, and the verdict, by the summed times, serves every size
(`xfuse.runtime.dynamic.chosen_passes`, `xfuse.runtime.symbolic.measuring_sizes`).

Timing the stencil alone leaves out what fusing it with its neighbours saves, and what it
costs where a normalization computes it again at each pass: a near tie goes to the library
call (`STENCIL_MARGIN`).

A CPU program's convolutions run NHWC (`channels-last`) or NCHW, whichever they were measured
faster in (`chosen_layout`): each distinct convolution timed alone both ways, as torch's call
(with a channels-last input, oneDNN needs no reorder of the activations but converts the weight
on every call), the times summed over the program; a near tie stays NCHW (`LAYOUT_MARGIN`).
This is decided first: the depthwise verdicts are measured in the layout chosen.

A matrix product of a weight (`xfuse.runtime.gemm_ways.gemm_of`: on the CPU in f32, on
CUDA with a bias) runs torch's call or another way as accurate (`gemm_ways.ways`: on the CPU
oneDNN's GEMM, or MKL's in blocks of the weight's rows; on CUDA the product without its bias,
then the bias added): `chosen_gemms` times each distinct product of the fused program
(`Gemm.signature`) every way, alone, on random data, once per machine (the CPU's thread
count, CUDA's device and TF32 setting) and torch version (its `GemmChoice` a `CHOICE` entry
too, listed in `Executable.choices` with the depthwise ones); the fastest other way is kept
where clearly faster than torch's call (`GEMM_MARGIN`). Products of under `GEMM_WORK`
multiply-adds are never measured: they stay torch's call.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import json
import math
import statistics
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Self, cast

import torch
from torch.utils import _pytree as pytree
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    UnitAttr,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region
from xdsl.passes import ModulePass

from xfuse.backends.threadpool import shared_pool
from xfuse.dialects import graph
from xfuse.dialects.torch_args import encode_args
from xfuse.frontend.convolution import CONVOLUTION, ConvolutionCall
from xfuse.frontend.export import Imported, forward_op_names
from xfuse.frontend.importer import ImportedProgram, is_channels_last, result_attrs
from xfuse.frontend.outputs import OutputRule
from xfuse.interpreters.graph import find_function
from xfuse.ir.context import make_context
from xfuse.ir.dtypes import from_torch, to_torch
from xfuse.ir.functions import function_bodies
from xfuse.ir.names import CHANNELS_LAST_ATTR
from xfuse.passes.transforms.channels_last import (
    ChannelsLastPass,
    Convolution,
    channels_last_args,
    convolutions,
    nhwc_source,
    read_as_nhwc,
)
from xfuse.passes.transforms.decompose import DecomposePass
from xfuse.passes.transforms.depthwise_stencil import DepthwiseStencilPass, candidates, signature
from xfuse.passes.transforms.pad_matmul import PaddedProduct, PadMatmulPass
from xfuse.passes.transforms.pad_matmul import candidates as padded_candidates
from xfuse.runtime import gemm_ways
from xfuse.runtime.cache import CHOICE, KernelCache

Tensor = torch.Tensor
RUNS = 15
"""Timed samples of each side (after two warm-up calls): on CUDA their median decides, on the
CPU the fastest (`_time_sides`)."""

STENCIL_MARGIN = 0.9
"""The stencil is kept where it took under this fraction of the library call's time alone. A
stencil fused into a normalization after it is computed again at each of its passes (mean,
variance, output), so it can take several times its time alone there (benchmarks/RESULTS.md
has ConvNeXt's): a near tie goes to the library."""

CPU_BUDGET_MS = 300.0
"""About the longest a side is timed on the CPU (`_time_sides`): long calls are timed fewer
times."""

MIN_RUNS = 3
"""Timed samples of a side on the CPU however long its call (besides the second warm-up's)."""

CUDA_MEASUREMENT = 2
CPU_MEASUREMENT = 3
"""How choices are measured on each device (`measure`, `_time_sides`); a verdict measured
otherwise is not reused. On the CPU from 3 on, the two sides' calls in turn."""

REPLAYS = 10
"""Graph replays per sample on CUDA."""

_measuring: contextvars.ContextVar[bool] = contextvars.ContextVar("measuring", default=False)
"""True while a choice is being measured: the stencil compiled for it is not measured again."""


class TwoWays:
    """A verdict between two ways of running one thing, each timed in ms per call: the first
    as eager runs it, the second kept where it took under `MARGIN` of the first's time (a
    near tie goes to eager's way). A subclass is a frozen dataclass whose fields are what was
    measured, then the two times, named in `WAYS` (field, label in `describe`, name kept)."""

    WAYS: ClassVar[tuple[tuple[str, str, str], tuple[str, str, str]]]
    MARGIN: ClassVar[float]

    def times(self) -> tuple[float, float]:
        """The first way's and the second's ms."""
        return getattr(self, self.WAYS[0][0]), getattr(self, self.WAYS[1][0])

    @property
    def kept(self) -> str:
        first, second = self.times()
        return self.WAYS[1][2] if second < self.MARGIN * first else self.WAYS[0][2]

    def describe(self, subject: str, suffix: str = "") -> str:
        """`subject: kept (first 1.0000 ms, second 0.5000 ms)`, as `explain()` lists it."""
        (_, first_label, _), (_, second_label, _) = self.WAYS
        first, second = self.times()
        return (
            f"{subject}: {self.kept} "
            f"({first_label} {first:.4f} ms, {second_label} {second:.4f} ms{suffix})"
        )

    def dump(self) -> bytes:
        """The verdict's fields, for the kernel cache (`load` reads them back)."""
        return json.dumps(dataclasses.astuple(cast(Any, self))).encode()

    @classmethod
    def load(cls, data: bytes) -> Self:
        return cast(Callable[..., Self], cls)(*json.loads(data))


@dataclass(frozen=True)
class Choice(TwoWays):
    """One measured verdict: `signature`'s library call and stencil, in ms per call."""

    WAYS = (("library_ms", "library", "library"), ("stencil_ms", "stencil", "stencil"))
    MARGIN = STENCIL_MARGIN

    signature: str
    library_ms: float
    stencil_ms: float
    at: str = ""
    """Where the convolution is symbolic, the input shapes it was timed at (`2x8x6x6;
    32x8x6x6`): its times are their sums."""

    def __str__(self) -> str:
        at = f", summed at {self.at}" if self.at else ""
        return self.describe(f"depthwise convolution {self.signature}", at)


Compile = Callable[..., Callable[..., Any]]
"""`compile_fn(model, example_inputs, device, imported=..., **options)`: `xfuse.compile` of
`model` with its program for `example_inputs` given as imported (no torch.export), passed in
(`xfuse.runtime.driver`, which imports this module, passes it)."""

CompileAhead = Callable[[Sequence[Imported], torch.device, KernelCache], None]
"""`ahead(programs, device, cache)`: fuse and lower the imported `programs` as `compile_fn`
will, and compile all their kernels at once into `cache` (in worker processes where the
backend has them), so that each `compile_fn` then finds its program and kernels made. Passed
in by `xfuse.runtime.driver`, as `compile_fn` is."""


@contextmanager
def measuring() -> Iterator[None]:
    token = _measuring.set(True)
    try:
        yield
    finally:
        _measuring.reset(token)


def choose_passes(
    passes: Sequence[ModulePass],
    module: ModuleOp,
    device: torch.device,
    cache: KernelCache,
    compile_fn: Compile,
    ahead: CompileAhead | None = None,
    sizes: Sequence[Mapping[str, int]] | None = None,
) -> tuple[tuple[ModulePass, ...], list[Verdict]]:
    """`passes` without `channels-last` where the CPU runs the convolutions of `module` faster
    NCHW (`chosen_layout`), `depthwise-stencil`'s `library` set to the convolutions of `module` whose
    library call is faster on `device`, `pad-matmul`'s `unpadded` to the products of `module`
    not clearly faster padded (`chosen_padding`; static programs only), and every verdict.
    Unchanged while measuring (the stencil being timed is compiled with these passes). A
    symbolic module's convolutions are timed at each of `sizes` (`library_convolutions`)."""
    if _measuring.get():
        return tuple(passes), []
    passes, layout = _choose_layout(passes, module, device, cache, sizes)
    chosen, stencils = _choose_stencils(passes, module, device, cache, compile_fn, ahead, sizes)
    verdicts: list[Verdict] = [*layout, *stencils]
    if sizes is not None:
        return chosen, verdicts
    chosen, padded = chosen_padding(chosen, module, device, cache)
    return chosen, [*verdicts, *padded]


def _choose_stencils(
    passes: Sequence[ModulePass],
    module: ModuleOp,
    device: torch.device,
    cache: KernelCache,
    compile_fn: Compile,
    ahead: CompileAhead | None,
    sizes: Sequence[Mapping[str, int]] | None,
) -> tuple[tuple[ModulePass, ...], list[Choice]]:
    stencil = next((p for p in passes if isinstance(p, DepthwiseStencilPass)), None)
    if stencil is None:
        return tuple(passes), []
    channels_last = _channels_last(module, passes)
    choices = library_convolutions(
        module,
        device,
        cache,
        compile_fn,
        stencil.max_taps,
        channels_last,
        ahead,
        sizes,
        stencil.symbolic_windows,
    )
    library = tuple(sorted({c.signature for c in choices if c.kept == "library"}))
    if not library:
        return tuple(passes), choices
    chosen = dataclasses.replace(stencil, library=library)
    return tuple(chosen if p is stencil else p for p in passes), choices


def library_convolutions(
    module: ModuleOp,
    device: torch.device,
    cache: KernelCache,
    compile_fn: Compile,
    max_taps: int = 49,
    channels_last: bool = False,
    ahead: CompileAhead | None = None,
    sizes: Sequence[Mapping[str, int]] | None = None,
    symbolic_windows: bool = False,
) -> list[Choice]:
    """The verdict for each distinct depthwise convolution of `module` that the stencil pass
    would rewrite, with its input `channels_last` or not: from the cache, or measured now and
    stored. The stencils of those to measure are compiled first, all at once (`ahead`), then
    each is timed. Where the module is symbolic, each is timed at each of `sizes` (as a
    static convolution of those sizes is, sharing its cached verdict) and its verdict is the
    sum of those times (`combined`), named by its symbolic signature as `depthwise-stencil`
    names it."""
    points: Sequence[Mapping[str, int]] = [{}] if sizes is None else sizes
    convolutions: dict[str, tuple[ConvolutionCall, list[str]]] = {}
    measured: dict[str, Choice | None] = {}
    unmeasured: dict[str, tuple[ConvolutionCall, Mapping[str, int]]] = {}
    for conv in candidates(module, max_taps, symbolic_windows):
        sig = signature(conv)
        if sig in convolutions:
            continue
        kept = [p for i, p in enumerate(points) if i == 0 or _elements(conv, p) <= MAX_ELEMENTS]
        convolutions[sig] = (conv, [signature(conv, p) for p in kept])
        for at, point in zip(convolutions[sig][1], kept, strict=True):
            if at not in measured:
                measured[at] = cache.program(_key(at, device, channels_last), Choice.load, CHOICE)
                if measured[at] is None:
                    unmeasured[at] = (conv, point)
    if ahead is not None and len(unmeasured) > 1:
        with measuring(), torch.no_grad():
            timed = [_Timed(c, device, channels_last, p) for c, p in unmeasured.values()]
            ahead([t.imported() for t in timed], device, cache)
    for at, (conv, point) in unmeasured.items():
        choice = measure(conv, device, channels_last, compile_fn, cache, point)
        cache.store_program(_key(at, device, channels_last), choice.dump(), CHOICE)
        measured[at] = choice
    found = (combined(sig, [measured[at] for at in ats]) for sig, (_, ats) in convolutions.items())
    return [c for c in found if c is not None]


MAX_ELEMENTS = 1 << 25
"""A symbolic convolution is timed at sizes past its first (`library_convolutions`) only where
its input has at most this many elements there (128 MiB of f32)."""


def _elements(conv: ConvolutionCall, sizes: Mapping[str, int]) -> int:
    return math.prod(graph.dims_at(graph.dims_of(conv.input), sizes))


def combined(sig: str, verdicts: Sequence[Choice | None]) -> Choice | None:
    """One verdict for the convolution `sig` from its `verdicts` (one per size it was timed
    at): a static convolution's own; a symbolic one's the sum of the times, `at` naming the
    input shape at each (`2x8x6x6; 32x8x6x6`)."""
    if any(v is None for v in verdicts):
        return None
    found = cast("list[Choice]", list(verdicts))
    if len(found) == 1 and found[0].signature == sig:
        return found[0]
    at = "; ".join(v.signature.split()[1] for v in found)
    library_ms = sum(v.library_ms for v in found)
    return Choice(sig, library_ms, sum(v.stencil_ms for v in found), at)


def _channels_last(module: ModuleOp, passes: Sequence[ModulePass]) -> bool:
    """Whether the program's convolutions will be NHWC: the verdict of its `channels-last`
    pass, if it runs one (`ChannelsLastPass.verdict`, on the program as imported: every depthwise
    convolution still a convolution, as those the library keeps will be)."""
    layout = next((p for p in passes if isinstance(p, ChannelsLastPass)), None)
    if layout is None:
        return False
    return any(layout.verdict(f.body.block) is None for f in function_bodies(module))


def _key(sig: str, device: torch.device, channels_last: bool) -> str:
    """The cache key of a verdict: what was measured, where, and how. On the CPU that includes
    the thread counts of both sides, torch's (the library call) and xfuse's (the stencil's
    kernels): a verdict measured at other counts is measured again (`_gemm_key` does the same)."""
    if device.type == "cuda":
        name, measurement = torch.cuda.get_device_name(device), CUDA_MEASUREMENT
    else:
        name = f"cpu threads={torch.get_num_threads()}/{shared_pool().threads}"
        measurement = CPU_MEASUREMENT
    return _verdict_key(
        f"depthwise {sig} on {name} nhwc={channels_last} torch {torch.__version__} "
        f"measured by {measurement}"
    )


# ---------------------------------------------------------------------------------------------
# Verdicts in the kernel cache: a signature and its times, under a key of what was measured
# ---------------------------------------------------------------------------------------------


def _verdict_key(facts: str) -> str:
    """The cache key of a verdict: a hash of everything its times depend on."""
    return hashlib.sha256(facts.encode()).hexdigest()


def measure(
    conv: ConvolutionCall,
    device: torch.device,
    channels_last: bool,
    compile_fn: Compile,
    cache: KernelCache | None = None,
    sizes: Mapping[str, int] | None = None,
) -> Choice:
    """Time `conv` as the library's call and as xfuse's stencil, on random data (of its
    symbolic dims at `sizes`); the stencil's kernels compiled into `cache` (the default cache
    without one)."""
    timed = _Timed(conv, device, channels_last, sizes)
    library, x = timed.library, timed.x
    with measuring(), torch.no_grad():
        stencil = compile_fn(
            library,
            (x,),
            str(device),
            imported=timed.imported(),
            cache=cache,
            quiet=True,
            cuda_graphs=False,
        )
        library_ms, stencil_ms = _time_sides([library, stencil], x, device)
        return Choice(signature(conv, sizes), library_ms, stencil_ms)


class _Timed:
    """What a choice times: `conv` as the library's call on random weights, and a random input
    of its shapes (its symbolic dims at `sizes`) and dtype (NHWC where the program's
    convolutions will be)."""

    def __init__(
        self,
        conv: ConvolutionCall,
        device: torch.device,
        channels_last: bool,
        sizes: Mapping[str, int] | None = None,
    ) -> None:
        dtype = to_torch(graph.dtype_of(conv.input))
        shape = graph.dims_at(graph.dims_of(conv.input), sizes or {})
        self.x = torch.randn(shape, dtype=dtype, device=device)
        if channels_last and self.x.dim() == 4:
            self.x = self.x.contiguous(memory_format=torch.channels_last)
        self.library = _Convolution(conv, dtype, device)

    def imported(self) -> Imported:
        """The library module's program for `x` (a new one each time: fusing changes it)."""
        with torch.no_grad():
            return self.library.imported(self.x)


class _Convolution(torch.nn.Module):
    """`conv` as the library's call, on random weights held as buffers (as a model holds
    them: torch.export lifts them, where a tensor a function closes over would meet the fake
    tensors of a `torch.compile` trace in progress)."""

    weight: Tensor
    bias: Tensor | None

    def __init__(self, conv: ConvolutionCall, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        weight = torch.randn(graph.shape_of(conv.weight), dtype=dtype, device=device)
        channels = graph.shape_of(conv.weight)[0]
        bias = torch.randn(channels, dtype=dtype, device=device) if conv.bias is not None else None
        self.register_buffer("weight", weight)
        self.register_buffer("bias", bias)
        self.stride, self.padding = list(conv.stride), list(conv.padding)
        self.dilation, self.groups = list(conv.dilation), conv.groups

    def arguments(self, x: Any) -> list[Any]:
        """aten.convolution's nine arguments, with `x` as the input."""
        zeros = [0] * len(self.stride)
        return [
            x,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self.dilation,
            False,
            zeros,
            self.groups,
        ]

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.aten.convolution(*self.arguments(x))

    def imported(self, x: Tensor) -> Imported:
        """This module's program for `x` as torch.export and the importer make it (`@forward`
        of the weight, the bias if any, then `x`; one `aten.convolution`; its output fresh,
        with eager's strides), built directly: no export."""
        states = [("weight", self.weight)]
        if self.bias is not None:
            states.append(("bias", self.bias))
        types = [_tensor_type(t) for _, t in states] + [_tensor_type(x)]
        attrs = [DictionaryAttr({"graph.param": StringAttr(n)}) for n, _ in states]
        laid_out = {CHANNELS_LAST_ATTR: UnitAttr()} if is_channels_last(x) else {}
        attrs.append(DictionaryAttr({"graph.input": StringAttr("x"), **laid_out}))
        block = Block(arg_types=types)
        *params, data = block.args
        operands = [data, *params]
        index = {id(t): i for i, t in enumerate([x, *(t for _, t in states)])}
        args, kwargs = encode_args(self.arguments(x), {}, lambda v: index.get(id(v)))
        out = self(x)
        call = graph.TorchCallOp(CONVOLUTION, operands, [_tensor_type(out)], args, kwargs)
        block.add_ops([call, func.ReturnOp(call.outputs[0])])
        rule = OutputRule("fresh", 0, stride=tuple(out.stride()))
        function = func.FuncOp(
            "forward",
            (types, [call.outputs[0].type]),
            Region(block),
            arg_attrs=ArrayAttr(attrs),
            res_attrs=result_attrs([rule], call.outputs, {}),
        )
        module = ModuleOp([function])
        program = ImportedProgram(
            module,
            {i: n for i, (n, _) in enumerate(states)},
            {n: t.detach() for n, t in states},
            ["x"],
            ["convolution"],
            output_rules=[rule],
        )
        return Imported(program, pytree.tree_structure(out), forward_op_names(module))


def _tensor_type(t: Tensor) -> TensorType[Attribute]:
    return TensorType(from_torch(t.dtype), t.shape)


def _time_sides(
    fns: Sequence[Callable[[Tensor], Any]], x: Tensor, device: torch.device
) -> list[float]:
    """The ms of one call of each of `fns` on `x`: on CUDA the median time of its kernels,
    replayed from a captured CUDA graph (programs replay theirs: the host's launches are not
    what is chosen between); elsewhere the fastest call's, since on a loaded machine a call's
    time is its own plus whatever else ran, and a median can be many times the call's own time
    on a machine shared with other work (benchmarks/RESULTS.md has a case). On the CPU the sides
    are called in turn, one call of each per round, so that load that comes and goes falls on
    every side alike (timed one after the other, a burst of load can land on one side's samples
    only and decide the verdict, which the cache then keeps). Calls long enough that `RUNS`
    rounds would take a side over `CPU_BUDGET_MS` are timed fewer times (at least `MIN_RUNS`):
    an LM head's product takes 100 ms a call."""
    warm: list[float] = []
    for fn in fns:
        fn(x)
        t0 = time.perf_counter()
        fn(x)
        warm.append(1000 * (time.perf_counter() - t0))
    if device.type == "cuda":
        return [_graph_ms(fn, x, device) for fn in fns]
    samples = [[ms] for ms in warm]
    rounds = max(MIN_RUNS, min(RUNS, int(CPU_BUDGET_MS / max(*warm, 1e-3))))
    for _ in range(rounds):
        for fn, times in zip(fns, samples, strict=True):
            t0 = time.perf_counter()
            fn(x)
            times.append(1000 * (time.perf_counter() - t0))
    return [min(times) for times in samples]


def _graph_ms(fn: Callable[[Tensor], Any], x: Tensor, device: torch.device) -> float:
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        fn(x)  # kernels load and libraries make their handles off the capture
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(x)
    samples = []
    for _ in range(RUNS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPLAYS):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / REPLAYS)
    return statistics.median(samples)


# ---------------------------------------------------------------------------------------------
# The layout of a CPU program's convolutions: NHWC (`channels-last`) or NCHW
# ---------------------------------------------------------------------------------------------

LAYOUT_MARGIN = 0.9
"""A CPU program goes channels-last where its convolutions took under this fraction of their
NCHW time so: a near tie stays NCHW, as eager runs it (and its kernels need no permuted
views)."""

LAYOUT_MEASUREMENT = 3
"""How convolutions' layouts are measured (`measure_layout`); a verdict measured otherwise is
not reused."""

LAYOUT_WORK = 1 << 24
"""Multiply-adds of a CPU program's convolutions (all of them, at the size hints) under which
its layout is not measured and stays NCHW: too little work for the layout to matter against
the permuted views and the input's conversion that NHWC adds, and too short to time apart
reliably on a shared machine (MobileNetV2 at batch 1 has 300M)."""


LAYOUT_WAYS = (("nchw_ms", "NCHW", "nchw"), ("nhwc_ms", "NHWC", "channels-last"))
"""The two layouts of a CPU program's convolutions (`TwoWays.WAYS`)."""


@dataclass(frozen=True)
class ConvolutionLayout(TwoWays):
    """One convolution's measured times: torch's call on an NCHW input and on a channels-last
    one (the weight NCHW in both, as the model holds it: torch converts it for oneDNN on
    every NHWC call), in ms per call."""

    WAYS = LAYOUT_WAYS
    MARGIN = LAYOUT_MARGIN

    signature: str
    nchw_ms: float
    nhwc_ms: float


@dataclass(frozen=True)
class LayoutChoice(TwoWays):
    """The verdict on a CPU program's layout: its `convolutions` (2-D ones, each timed alone
    as `ConvolutionLayout`), their times summed."""

    WAYS = LAYOUT_WAYS
    MARGIN = LAYOUT_MARGIN

    convolutions: int
    nchw_ms: float
    nhwc_ms: float

    def __str__(self) -> str:
        return self.describe(f"layout of {self.convolutions} convolutions")


def _choose_layout(
    passes: Sequence[ModulePass],
    module: ModuleOp,
    device: torch.device,
    cache: KernelCache,
    sizes: Sequence[Mapping[str, int]] | None,
) -> tuple[tuple[ModulePass, ...], list[LayoutChoice]]:
    """`passes` without their `channels-last` pass where it would rewrite a CPU program
    unforced, it is passed no tensor in channels-last memory (`channels_last_args`: torch's
    convolutions of a weight passed so return channels-last results in either layout), and
    its convolutions have under `LAYOUT_WORK` multiply-adds or were measured faster NCHW (at
    the first of `sizes`, a symbolic program's size hints), and the verdict measured."""
    layout = next((p for p in passes if isinstance(p, ChannelsLastPass)), None)
    if layout is None or layout.force or device.type != "cpu":
        return tuple(passes), []
    if not _channels_last(module, passes):
        return tuple(passes), []
    if any(channels_last_args(f.body.block) for f in function_bodies(module)):
        return tuple(passes), []  # NCHW would copy what is passed so, and torch's results
    nchw = tuple(p for p in passes if p is not layout)
    found = [c for f in function_bodies(module) for c in convolutions(f.body.block)]
    if sum(c.flops() // 2 for c in found) < LAYOUT_WORK:
        return nchw, []
    choice = chosen_layout(found, device, cache, {} if sizes is None else sizes[0])
    return (tuple(passes) if choice.kept == "channels-last" else nchw), [choice]


def chosen_layout(
    convs: Sequence[Convolution],
    device: torch.device,
    cache: KernelCache,
    point: Mapping[str, int],
) -> LayoutChoice:
    """The layout verdict on a program's 2-D convolutions `convs` (as imported: depthwise ones
    still convolutions), each distinct one timed both ways at `point` (from the cache, or
    measured now and stored). Every convolution counts, whatever `depthwise-stencil` makes of
    it later: which depthwise ones stay library calls is measured in the layout chosen."""
    calls = [
        (call, c.op.outputs[0]) for c in convs if (call := ConvolutionCall.of(c.op)) is not None
    ]
    times: dict[str, ConvolutionLayout] = {}
    nchw_ms = nhwc_ms = 0.0
    for call, result in calls:
        sides = LayoutSides(
            converted=isinstance(call.input, BlockArgument),
            tokens_in=nhwc_source(call.input) is not None,
            tokens_out=read_as_nhwc(result),
        )
        sig = layout_signature(call, point, sides)
        if sig not in times:
            key = _layout_key(sig)
            found = cache.program(key, ConvolutionLayout.load, CHOICE)
            if found is None:
                found = measure_layout(call, sig, device, point, sides)
                cache.store_program(key, found.dump(), CHOICE)
            times[sig] = found
        nchw_ms += times[sig].nchw_ms
        nhwc_ms += times[sig].nhwc_ms
    return LayoutChoice(len(calls), nchw_ms, nhwc_ms)


@dataclass(frozen=True)
class LayoutSides:
    """What comes with a convolution's layout besides torch's call: whether its NHWC input is
    `converted` from a program argument (a copy NHWC adds), made from tokens `[N, H*W, C]`
    by views (`tokens_in`: `nhwc_source`, a copy NCHW adds) or its result read back as tokens
    (`tokens_out`: `read_as_nhwc`, a copy NCHW adds)."""

    converted: bool = False
    tokens_in: bool = False
    tokens_out: bool = False

    def __str__(self) -> str:
        return "".join(f" {f.name}" for f in dataclasses.fields(self) if getattr(self, f.name))


def layout_signature(conv: ConvolutionCall, point: Mapping[str, int], sides: LayoutSides) -> str:
    """What a convolution's time in either layout depends on: `signature`'s facts (at `point`)
    with the weight's shape, the group count and its `sides` (`f32 1x16x8x8 k3x3 s1x1 p1x1
    d1x1 w32x16x3x3 g1 converted`)."""
    weight = "x".join(map(str, graph.shape_of(conv.weight)))
    return f"{signature(conv, point)} w{weight} g{conv.groups}{sides}"


def measure_layout(
    conv: ConvolutionCall,
    sig: str,
    device: torch.device,
    point: Mapping[str, int],
    sides: LayoutSides,
) -> ConvolutionLayout:
    """Time `conv` on `device` with an NCHW input and a channels-last one, on random data of
    its shapes at `point` (`_real_tensors`), each side with the copies its `sides` add: the
    NHWC side converts a program argument; the NCHW side copies tokens into NCHW before the
    call and its result back into tokens after."""
    with _real_tensors():
        dtype = to_torch(graph.dtype_of(conv.input))
        shape = graph.dims_at(graph.dims_of(conv.input), point)
        nchw = torch.randn(shape, dtype=dtype, device=device)
        nhwc = nchw.contiguous(memory_format=torch.channels_last)
        call = _Convolution(conv, dtype, device)

        def nchw_side(x: Tensor) -> Tensor:
            y = call(nhwc.contiguous() if sides.tokens_in else x)
            return y.permute(0, 2, 3, 1).contiguous() if sides.tokens_out else y

        def nhwc_side(x: Tensor) -> Tensor:
            return call(
                x.contiguous(memory_format=torch.channels_last) if sides.converted else nhwc
            )

        nchw_ms, nhwc_ms = _time_sides([nchw_side, nhwc_side], nchw, device)
    return ConvolutionLayout(sig, nchw_ms, nhwc_ms)


def _layout_key(sig: str) -> str:
    """The cache key of a convolution's layout times: the CPU's thread count and torch's
    version."""
    return _verdict_key(
        f"layout {sig} on cpu threads={torch.get_num_threads()} torch {torch.__version__} "
        f"measured by {LAYOUT_MEASUREMENT}"
    )


# ---------------------------------------------------------------------------------------------
# Matrix products of a weight: torch's call or another way (`gemm_ways.ways`)
# ---------------------------------------------------------------------------------------------

GEMM_WORK = 1 << 25
"""Multiply-adds (M*K*N) under which a product is not measured and stays torch's call: too
little work for either way's choice to matter (a 128x1024x256 product takes about a
millisecond on the CPU, a few microseconds on CUDA), and too short to time apart reliably on a
shared machine."""

GEMM_MARGIN = 0.9
"""Another way is kept where it took under this fraction of torch's time: a near tie goes
to torch's call, as eager makes it."""

GEMM_MEASUREMENT = 3
"""How products are measured (`measure_gemm`); a verdict measured otherwise is not reused."""


@dataclass(frozen=True)
class GemmChoice:
    """One measured verdict: the product `signature` (`Gemm.signature`) by torch's call and
    by each other way (`gemm_ways.ways`), in ms per call."""

    signature: str
    torch_ms: float
    ways_ms: tuple[tuple[str, float], ...]

    @property
    def kept(self) -> str:
        """The fastest other way where it took under `GEMM_MARGIN` of torch's time, else
        "torch"."""
        way, ms = min(self.ways_ms, key=lambda w: w[1], default=("torch", self.torch_ms))
        return way if ms < GEMM_MARGIN * self.torch_ms else "torch"

    def __str__(self) -> str:
        times = ", ".join(f"{w} {ms:.4f} ms" for w, ms in (("torch", self.torch_ms), *self.ways_ms))
        return f"matrix product {self.signature}: {self.kept} ({times})"

    def dump(self) -> bytes:
        return json.dumps([self.signature, self.torch_ms, [list(w) for w in self.ways_ms]]).encode()

    @staticmethod
    def load(data: bytes) -> GemmChoice:
        sig, torch_ms, ways = json.loads(data)
        return GemmChoice(str(sig), float(torch_ms), tuple((str(w), float(ms)) for w, ms in ways))


def chosen_gemms(
    module: ModuleOp,
    held: Collection[int],
    device: torch.device,
    cache: KernelCache,
    asked: bool | None,
) -> tuple[dict[Operation, str], list[GemmChoice]]:
    """The products of `module` (after fusion: the ops the program runs; weights among the
    arguments `held`, `gemm_of`) that run another way than torch's call on `device`, each
    with its way (`xfuse.runtime.gemm_ways`), and every verdict measured for them. With
    `asked` (`PipelineOptions.gemm_ways`, settled) True every candidate its first way
    unmeasured, False none, None those of `GEMM_WORK` or more where another way was measured
    faster (from the cache, or measured now and stored)."""
    if asked is False:
        return {}, []
    ops = find_function(module, "forward").body.block.ops
    found = {op: g for op in ops if (g := gemm_ways.gemm_of(op, held, device.type)) is not None}
    if asked:
        return {op: gemm_ways.ways(g)[0] for op, g in found.items()}, []
    verdicts: dict[str, GemmChoice] = {}
    for gemm in found.values():
        if gemm.work < GEMM_WORK or gemm.signature in verdicts:
            continue
        key = _gemm_key(gemm, device)
        choice = cache.program(key, GemmChoice.load, CHOICE)
        if choice is None:
            choice = measure_gemm(gemm, device)
            cache.store_program(key, choice.dump(), CHOICE)
        verdicts[gemm.signature] = choice
    chosen = {op: verdicts[g.signature].kept for op, g in found.items() if g.signature in verdicts}
    return {op: way for op, way in chosen.items() if way != "torch"}, list(verdicts.values())


def measure_gemm(gemm: gemm_ways.Gemm, device: torch.device) -> GemmChoice:
    """Time `gemm` on `device` as torch's call and every other way, on random data of its
    shapes (`_real_tensors`)."""
    with _real_tensors():
        return _measure_gemm(gemm, device)


@contextlib.contextmanager
def _real_tensors() -> Iterator[None]:
    """Real tensors without autograd while timing: outside the fake tensor mode of a
    `torch.compile` trace in progress, under `no_grad`."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily(), torch.no_grad():
        yield


def _measure_gemm(gemm: gemm_ways.Gemm, device: torch.device) -> GemmChoice:
    def random(*shape: int) -> Tensor:
        return torch.randn(shape, device=device, dtype=gemm.dtype)

    x = random(gemm.m, gemm.k)
    weight = random(gemm.k, gemm.n) if gemm.transposed else random(gemm.n, gemm.k)
    bias = random(gemm.n) if gemm.bias else None
    theirs: Callable[[Tensor], Tensor]
    if gemm.transposed:
        theirs = lambda v: torch.mm(v, weight)  # noqa: E731
    else:
        theirs = lambda v: torch.nn.functional.linear(v, weight, bias)  # noqa: E731
    ways = gemm_ways.ways(gemm)
    calls = [gemm_ways.ChosenGemm(w, gemm.transposed) for w in ways]
    sides: list[Callable[[Tensor], Tensor]] = [theirs]
    sides += [functools.partial(_call_with, c, weight, bias) for c in calls]
    torch_ms, *ways_ms = _time_sides(sides, x, device)
    return GemmChoice(gemm.signature, torch_ms, tuple(zip(ways, ways_ms, strict=True)))


def _call_with(
    call: gemm_ways.ChosenGemm, weight: Tensor, bias: Tensor | None, x: Tensor
) -> Tensor:
    return call(x, weight, bias)


def _gemm_key(gemm: gemm_ways.Gemm, device: torch.device) -> str:
    """The cache key of a product's verdict: on the CPU with torch's thread count and the
    ways' constants, on CUDA with the device's name and whether f32 products may use TF32."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        where = f"{name} tf32={torch.backends.cuda.matmul.allow_tf32}"
    else:
        where = (
            f"cpu threads={torch.get_num_threads()} onednn-max-k={gemm_ways.ONEDNN_MAX_K} "
            f"row-block={gemm_ways.ROW_BLOCK}"
        )
    return _verdict_key(
        f"gemm {gemm.signature} on {where} torch {torch.__version__} measured by {GEMM_MEASUREMENT}"
    )


# ---------------------------------------------------------------------------------------------
# Padded products (`pad-matmul`): padded, or as eager calls them
# ---------------------------------------------------------------------------------------------

PAD_MARGIN = 0.9
"""A product is padded where that took under this fraction of its unpadded call's time: a near
tie goes to the unpadded call, as eager makes it."""

PAD_MEASUREMENT = 1
"""How padded products are measured (`measure_padding`); a verdict measured otherwise is not
reused."""


@dataclass(frozen=True)
class PadChoice(TwoWays):
    """One measured verdict: the product `signature` (`PaddedProduct.signature`) unpadded (as
    eager calls it) and padded (the weight padded, the product, its result cut back: a copy
    where the program returns it), in ms per call."""

    WAYS = (("unpadded_ms", "unpadded", "unpadded"), ("padded_ms", "padded", "padded"))
    MARGIN = PAD_MARGIN

    signature: str
    unpadded_ms: float
    padded_ms: float

    def __str__(self) -> str:
        return self.describe(f"matrix product {self.signature}")


Verdict = Choice | GemmChoice | PadChoice | LayoutChoice
"""Any verdict a compile measured (`FusionReport.choices`, `explain()`)."""


def chosen_padding(
    passes: Sequence[ModulePass], module: ModuleOp, device: torch.device, cache: KernelCache
) -> tuple[tuple[ModulePass, ...], list[PadChoice]]:
    """`passes` with `pad-matmul`'s `unpadded` set to the products of `module` it would pad
    that were not clearly faster padded on `device` (each distinct product measured once per
    machine and torch version, or read from `cache`), and every verdict. Unchanged where the
    passes hold no `pad-matmul` (the CPU's)."""
    pad = next((p for p in passes if isinstance(p, PadMatmulPass)), None)
    if pad is None or device.type != "cuda":
        return tuple(passes), []
    if not padded_candidates(module, pad.alignment, pad.min_columns):
        return tuple(passes), []  # (a product only `decompose` makes is padded unmeasured)
    verdicts: dict[str, PadChoice] = {}
    for product in padded_candidates(_decomposed(module), pad.alignment, pad.min_columns):
        sig = product.signature
        if sig in verdicts:
            continue
        key = _pad_key(sig, device)
        choice = cache.program(key, PadChoice.load, CHOICE)
        if choice is None:
            choice = measure_padding(product, pad.alignment, device)
            cache.store_program(key, choice.dump(), CHOICE)
        verdicts[sig] = choice
    unpadded = tuple(sorted(s for s, c in verdicts.items() if c.kept == "unpadded"))
    if not unpadded:
        return tuple(passes), list(verdicts.values())
    chosen = dataclasses.replace(pad, unpadded=unpadded)
    return tuple(chosen if p is pad else p for p in passes), list(verdicts.values())


def _decomposed(module: ModuleOp) -> ModuleOp:
    """A copy of `module` after `decompose`, as `pad-matmul` sees it (a linear's bias is an
    add of its own there, so that the product it pads is returned no more)."""
    copy = module.clone()
    DecomposePass().apply(make_context(), copy)
    return copy


def measure_padding(product: PaddedProduct, alignment: int, device: torch.device) -> PadChoice:
    """Time `product` on `device` unpadded and padded, on random data of its shapes
    (`_real_tensors`), each side replayed from a CUDA graph (`_graph_ms`)."""
    with _real_tensors():
        return _measure_padding(product, alignment, device)


def _measure_padding(product: PaddedProduct, alignment: int, device: torch.device) -> PadChoice:
    dtype = torch.bfloat16 if product.dtype == "bf16" else torch.float16
    m, k, n = product.m, product.k, product.n
    extra = -n % alignment
    x = torch.randn(m, k, device=device, dtype=dtype)
    weight = torch.randn((n, k) if product.linear else (k, n), device=device, dtype=dtype)
    bias = torch.randn(n, device=device, dtype=dtype) if product.bias else None
    functional = torch.nn.functional

    def unpadded(v: Tensor) -> Tensor:
        if product.linear:
            return functional.linear(v, weight, bias)
        return torch.mm(v, weight)

    def padded(v: Tensor) -> Tensor:
        if product.linear:
            padded_bias = None if bias is None else functional.pad(bias, (0, extra))
            wide = functional.linear(v, functional.pad(weight, (0, 0, 0, extra)), padded_bias)
        else:
            wide = torch.mm(v, functional.pad(weight, (0, extra)))
        cut = wide[:, :n]
        return cut.contiguous() if product.returned else cut

    unpadded_ms, padded_ms = (_graph_ms(f, x, device) for f in (unpadded, padded))
    return PadChoice(product.signature, unpadded_ms, padded_ms)


def _pad_key(sig: str, device: torch.device) -> str:
    """The cache key of a padded product's verdict: the device's name and torch's version."""
    name = torch.cuda.get_device_name(device)
    return _verdict_key(
        f"pad-matmul {sig} on {name} torch {torch.__version__} measured by {PAD_MEASUREMENT}"
    )
