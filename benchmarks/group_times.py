"""
Each fusion group of a model, its xfuse kernel against eager torch running the group's ops:

    python -m benchmarks.group_times [--source zoo|families] [--models resnet,vit]
                                     [--device cpu|cuda] [--dtype f32|bf16] [--size small]
                                     [--rounds 200] [--threads 1]

A model is compiled with `xfuse.compile` (strict: `fallback="error"`) and one forward is run to
get the program and its `@forward` arguments. The program's fused module is then interpreted op
by op with eager torch (`xfuse.interpreters.graph`), which gives every unit -- a fusion group
with a kernel, or an op outside groups that is a kernel of its own -- its operand tensors. Each
unit is compiled alone by the program compiler, taking the program's own kernels (matched by
their loop IR, nothing compiled anew), and both sides run on the same operands:

- xfuse: the unit's kernels alone on buffers of one run (inputs already contiguous, outputs
  already allocated: `benchmarks.kernel_times.kernel_steps`);
- eager: the unit's graph ops, each one torch call as the graph interpreter makes it
  (`prepare_op`), its constants made once, its layout ops (reshape, permute, slice,
  broadcast) torch views as a model's own forward makes them (the interpreter makes every
  result contiguous: copies eager does not make).

Their results are checked to match (`benchmarks.models.assert_matches`: f32 1e-4, bf16 3e-2,
relative to the output's magnitude; other dtypes exactly), then both are timed in interleaved
rounds (medians). On the CPU a sample is one call by the host clock (`--threads 1` keeps
torch's and xfuse's thread teams out: on a loaded machine a team that waits for a core costs
scheduler time slices, milliseconds, to whichever side happens to wake it). On CUDA each side
is captured in a CUDA graph (so neither pays Python's launches) and a sample is the GPU time per
replay of `CUDA_BATCH` replays in a row (CUDA events); a unit with a gather is timed without
graphs on both sides (`SYNCING_OPS`), and its row says so. A row's ratio is xfuse's time over
eager's; rows over `SLOW_RATIO` are marked `SLOW`, and listed with their ops at the end.

Eager's side is the group's ops after xfuse's rewrites: where one aten op became several graph
ops (a batch or layer norm, GELU, a depthwise convolution as a stencil of slices, products
and sums), eager's side makes several torch calls where a model's own forward makes one
library call, so it can be far slower than eager's real kernels for those ops.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from xdsl.ir import Operation, SSAValue

import xfuse
from benchmarks.kernel_times import captured_forward, kernel_steps
from benchmarks.models import ZOO, assert_matches, build
from benchmarks.timing import cuda_ms, device_ms, interleaved, medians
from xfuse.backends import Kernel
from xfuse.dialects import fusion, graph
from xfuse.interpreters.graph import PreparedOp, find_function, prepare_op, run_op
from xfuse.runtime.cache import KernelSource
from xfuse.runtime.compiler import (
    Program,
    ProgramCompiler,
    folds,
    is_lone_kernel_op,
    unit_inputs,
    wrap_unit,
)
from xfuse.runtime.steps import VIEW_IMPLS, BufferPool, KernelStep

Tensor = torch.Tensor
Call = Callable[[], Any]

SLOW_RATIO = 1.10
"""A group whose kernel takes more than this times eager's time is marked slow."""
CUDA_BATCH = 20
"""Graph replays per CUDA sample: the GPU stays busy, so a sample is the kernels' own time."""
WARMUP = 5
SYNCING_OPS = frozenset({"graph.gather"})
"""Ops whose eager form (the graph interpreter's) waits for the GPU, which a CUDA graph
cannot capture: `graph.gather` checks its indices on the host (`check_indices`)."""
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
SIZES = {"zoo": "small", "families": "latency"}


@dataclass
class Row:
    """One unit's times (us per call) and what it holds."""

    model: str
    label: str
    ops: list[str]
    xfuse_us: float
    eager_us: float
    note: str = ""
    """How the row was timed where it differs from the others (CUDA graphs left out)."""

    @property
    def ratio(self) -> float:
        return self.xfuse_us / self.eager_us if self.eager_us else float("inf")

    @property
    def slow(self) -> bool:
        return self.ratio > SLOW_RATIO


# ---------------------------------------------------------------------------------------------
# Models and their programs
# ---------------------------------------------------------------------------------------------


def load(
    source: str, name: str, size: str, device: str, dtype: torch.dtype
) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """A model of the zoo (`benchmarks.models`) or of the third-party families
    (`benchmarks.families`, on `device` in `dtype`, seeded) and its inputs."""
    if source == "zoo":
        if name not in ZOO:
            raise SystemExit(f"unknown zoo model {name!r}: one of {', '.join(ZOO)}")
        return build(name, size, device, dtype)
    from benchmarks.families import IMAGES, TEXTS, inputs_for

    make = IMAGES.get(name) or TEXTS.get(name)
    if make is None:
        raise SystemExit(f"unknown family model {name!r}: one of {', '.join([*IMAGES, *TEXTS])}")
    torch.manual_seed(0)
    model = make().eval().to(device=device, dtype=dtype)
    return model, inputs_for(name, size, device, dtype)


def program_of(
    model: torch.nn.Module, inputs: tuple[Any, ...], device: str
) -> tuple[Program, list[Tensor]]:
    """The program `xfuse.compile` makes of the model (strict, no CUDA graphs: the forward
    goes through the executor's step runner) and the `@forward` arguments of one call."""
    compiled = xfuse.compile(model, inputs, device, quiet=True, fallback="error", cuda_graphs=False)
    program, args, _ = captured_forward(compiled, inputs)
    return program, args


def program_kernels(program: Program) -> dict[str, Kernel]:
    """The program's kernels by their canonical loop IR (`KernelInfo.loop_ir`): kernel steps
    and kernel infos are made in the same order."""
    steps = [s for s in program.steps if isinstance(s, KernelStep)]
    if len(steps) != len(program.kernels):
        raise RuntimeError(f"{len(steps)} kernel steps but {len(program.kernels)} kernels")
    found: dict[str, Kernel] = {}
    for info, step in zip(program.kernels, steps, strict=True):
        if f"@{info.symbol} " not in step.label:
            raise RuntimeError(f"kernel {info.symbol} is not step {step.label!r}")
        found[info.loop_ir] = step.kernel
    return found


# ---------------------------------------------------------------------------------------------
# Units and their operands
# ---------------------------------------------------------------------------------------------


def is_unit(op: Operation) -> bool:
    """Whether the program runs `op` as kernels of its own: a group that is not computed at
    compile time, or an op outside groups that lowers to a kernel."""
    if isinstance(op, fusion.GroupOp):
        return not folds(op)
    return is_lone_kernel_op(op)


def last_uses(ops: Sequence[Operation]) -> dict[SSAValue, int]:
    """Each value read by `ops`, with the index of the last op that reads it."""
    last: dict[SSAValue, int] = {}
    for i, op in enumerate(ops):
        for v in op.operands:
            last[v] = i
    return last


def units(program: Program, args: Sequence[Tensor]) -> Iterator[tuple[Operation, list[Tensor]]]:
    """The fused `@forward` interpreted op by op with eager torch on `args`: each unit with
    its operand tensors, as it is reached (values are dropped after their last reader)."""
    block = find_function(program.module, "forward").body.block
    ops = list(block.ops)
    last = last_uses(ops)
    env: dict[SSAValue, Tensor] = dict(zip(block.args, args, strict=True))
    for i, op in enumerate(ops):
        if op is block.last_op:
            return
        operands = [env[v] for v in op.operands]
        if is_unit(op):
            yield op, operands
        env.update(zip(op.results, run_op(op, operands), strict=True))
        for v in op.operands:
            if last[v] == i:
                env.pop(v, None)


def op_names(op: Operation) -> list[str]:
    """The unit's ops (a group's, constants and its yield left out), short names."""
    inner = list(op.block.ops) if isinstance(op, fusion.GroupOp) else [op]
    skip = (graph.ConstantOp, fusion.YieldOp)
    return [o.name.rpartition(".")[2] for o in inner if not isinstance(o, skip)]


# ---------------------------------------------------------------------------------------------
# The two sides of a unit
# ---------------------------------------------------------------------------------------------


def unit_program(op: Operation, kernels: dict[str, Kernel], device: str) -> tuple[Program, str]:
    """The unit compiled alone as a program whose kernels are the model program's (by loop
    IR), and its label: its kernels' names (`xfuse.runtime.compiler.kernel_name`)."""
    names: list[str] = []

    def compile_kernel(source: KernelSource, name: str) -> Kernel:
        kernel = kernels.get(source.text)
        if kernel is None:
            raise RuntimeError(f"{name}: lowered alone, its loop IR is no kernel of the program")
        names.append(name)
        return kernel

    compiler = ProgramCompiler(compile_kernel, fallback="error", device=device)
    return compiler.compile(wrap_unit(op)), "+".join(names)


def _broadcast_view(op: Operation) -> PreparedOp:
    """`graph.broadcast_in_dim` as eager broadcasts: a view (`expand`), nothing copied."""
    assert isinstance(op, graph.BroadcastInDimOp)
    out_shape = graph.shape_of(op.result)
    view = [1] * len(out_shape)
    for i, d in enumerate(op.dim_map):
        view[d] = graph.shape_of(op.operands[0])[i]
    return lambda xs: [xs[0].reshape(view).expand(out_shape)]


def eager_op(op: Operation) -> PreparedOp:
    """One op as eager torch runs it, operands -> results: a layout op as a torch view
    (`xfuse.runtime.steps.VIEW_IMPLS`, a broadcast as `expand`), as a model's own forward
    makes them, where the graph interpreter makes every result contiguous; any other op as
    the interpreter runs it (`prepare_op`: one torch call, attributes read once)."""
    if op.name == "graph.broadcast_in_dim":
        return _broadcast_view(op)
    make_view = VIEW_IMPLS.get(op.name)
    if make_view is not None:
        view = make_view(op)
        return lambda xs: [view(xs[0])]
    return prepare_op(op)


def eager_call(op: Operation) -> PreparedOp:
    """The unit's ops as eager torch runs them (`eager_op`), operands -> results, a group's
    constants made once, here (call it on the operands' device, `with torch.device(...)`)."""
    if not isinstance(op, fusion.GroupOp):
        return eager_op(op)
    slot: dict[SSAValue, int] = {v: i for i, v in enumerate(op.block.args)}
    constants: dict[int, Tensor] = {}
    plan: list[tuple[PreparedOp, list[int], list[int]]] = []
    returned: list[int] = []
    for inner in op.block.ops:
        ins = [slot[v] for v in inner.operands]
        if isinstance(inner, fusion.YieldOp):
            returned = ins
            break
        outs = [slot.setdefault(r, len(slot)) for r in inner.results]
        if isinstance(inner, graph.ConstantOp):
            constants[outs[0]] = run_op(inner, [])[0]
        else:
            plan.append((eager_op(inner), ins, outs))
    n_slots = len(slot)

    def run(xs: list[Tensor]) -> list[Tensor]:
        env: list[Any] = [*xs, *([None] * (n_slots - len(xs)))]
        for s, t in constants.items():
            env[s] = t
        for call, ins, outs in plan:
            for s, t in zip(outs, call([env[i] for i in ins]), strict=True):
                env[s] = t
        return [env[i] for i in returned]

    return run


def check_results(got: Sequence[Tensor], want: Sequence[Tensor], dtype: torch.dtype) -> None:
    """xfuse's results against eager's: floating ones within the zoo's tolerance for `dtype`
    (`assert_matches`), others exactly."""
    assert len(got) == len(want), f"{len(got)} results, eager has {len(want)}"
    for g, w in zip(got, want, strict=True):
        if w.is_floating_point():
            assert_matches(g, w, dtype)
        else:
            torch.testing.assert_close(g, w, rtol=0, atol=0)


def replayed(fn: Call) -> Call:
    """`fn` captured in a CUDA graph (after warm-up calls on a side stream), as the graph's
    replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    cuda_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cuda_graph):
        fn()
    return cuda_graph.replay


def graphed(op: Operation, sides: dict[str, Call]) -> tuple[dict[str, Call], str]:
    """Both sides as CUDA graph replays, or both as they are where one cannot be captured
    (a unit with an op whose eager form waits for the GPU: `SYNCING_OPS`, or a failed
    capture), with a note that says so."""
    syncing = sorted({o.name for o in op.walk() if o.name in SYNCING_OPS})
    if syncing:
        return sides, f"no CUDA graphs: {', '.join(syncing)} syncs"
    try:
        return {name: replayed(fn) for name, fn in sides.items()}, ""
    except Exception as e:  # noqa: BLE001 - timed without graphs instead, and said so
        torch.cuda.synchronize()
        return sides, f"no CUDA graphs: {type(e).__name__}: {str(e).splitlines()[0][:80]}"


def clock_for(device: str) -> Callable[[Call], float]:
    """The clock of a sample: the host clock on the CPU (`device_ms`), CUDA events around
    `CUDA_BATCH` calls in a row on CUDA (ms per call)."""
    if device.startswith("cuda"):
        return functools.partial(cuda_ms, batch=CUDA_BATCH)
    return device_ms(device)


def time_unit(
    model: str,
    op: Operation,
    operands: list[Tensor],
    kernels: dict[str, Kernel],
    device: str,
    dtype: torch.dtype,
    rounds: int,
) -> Row | None:
    """The unit's kernels and eager's ops for it on `operands`, their results checked to
    match, timed in interleaved rounds (median us per call); None where the unit compiled
    alone has no kernel (a layout op that is then a view of the unit's result)."""
    program, label = unit_program(op, kernels, device)
    by_value = dict(zip(op.operands, operands, strict=True))
    args = [by_value[v] for v in unit_inputs(op)]
    calls, got = kernel_steps(program, args, BufferPool(device))
    if not calls:
        return None
    eager = eager_call(op)
    want = eager(operands)
    check_results(got, want, dtype)

    def xfuse_side() -> None:
        for _, call in calls:
            call()

    def eager_side() -> None:
        eager(operands)

    sides: dict[str, Call] = {"xfuse": xfuse_side, "eager": eager_side}
    note = ""
    if device.startswith("cuda"):
        sides, note = graphed(op, sides)
    times = interleaved(sides, rounds, WARMUP, clock_for(device), alternate=True)
    ms = medians(times)
    return Row(model, label, op_names(op), 1000 * ms["xfuse"], 1000 * ms["eager"], note)


def model_rows(
    source: str, name: str, size: str, device: str, dtype: torch.dtype, rounds: int
) -> Iterator[Row]:
    """Every unit of one model, timed (as they are reached in the forward); a unit that has
    no kernel when compiled alone is named on stderr and left out."""
    model, inputs = load(source, name, size, device, dtype)
    program, args = program_of(model, inputs, device)
    kernels = program_kernels(program)
    with torch.device(device):
        for op, operands in units(program, args):
            row = time_unit(name, op, operands, kernels, device, dtype, rounds)
            if row is None:
                print(f"{name}: {op.name} has no kernel compiled alone; not timed", file=sys.stderr)
            else:
                yield row


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------


def row_text(row: Row) -> str:
    mark = (" SLOW" if row.slow else "") + (f" ({row.note})" if row.note else "")
    return (
        f"| {row.model} | {row.label} | {len(row.ops)} | {row.xfuse_us:.2f} | "
        f"{row.eager_us:.2f} | {row.ratio:.2f}{mark} |"
    )


def summary_text(name: str, rows: Sequence[Row]) -> str:
    xf, eg = sum(r.xfuse_us for r in rows), sum(r.eager_us for r in rows)
    slow = sum(r.slow for r in rows)
    ratio = xf / eg if eg else float("inf")
    return f"| {name} | {len(rows)} | {slow} | {xf:.1f} | {eg:.1f} | {ratio:.2f} |"


def ops_text(ops: Sequence[str]) -> str:
    """Ops with repeats counted, in order of first appearance: `mul x3, add, exp`."""
    counts = Counter(ops)
    return ", ".join(f"{o} x{n}" if n > 1 else o for o, n in counts.items())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--source", choices=sorted(SIZES), default="zoo")
    parser.add_argument("--models", default=None, help="comma-separated; default: all")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    parser.add_argument(
        "--size", default=None, help="zoo: small|base; families: latency|throughput"
    )
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch's and xfuse's CPU threads (default: theirs)",
    )
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
        os.environ["XFUSE_NUM_THREADS"] = str(args.threads)  # read when the first kernel loads
    size = args.size or SIZES[args.source]
    dtype = DTYPES[args.dtype]
    if args.models:
        names = args.models.split(",")
    elif args.source == "zoo":
        names = list(ZOO)
    else:
        from benchmarks.families import IMAGES, TEXTS

        names = [*IMAGES, *TEXTS]
    print(
        f"# {args.source}, {size}, {args.dtype} on {args.device}, {args.rounds} rounds, "
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads"
    )
    print("| model | group | ops | xfuse us | eager us | ratio |")
    print("|---|---|---|---|---|---|")
    done: dict[str, list[Row]] = {}
    with torch.no_grad():
        for name in names:
            rows = done[name] = []
            for row in model_rows(args.source, name, size, args.device, dtype, args.rounds):
                rows.append(row)
                print(row_text(row), flush=True)
    print(f"\n| model | groups | slower by >{SLOW_RATIO - 1:.0%} | xfuse us | eager us | ratio |")
    print("|---|---|---|---|---|---|")
    for name, rows in done.items():
        print(summary_text(name, rows))
    slow = [r for rows in done.values() for r in rows if r.slow]
    if slow:
        print(f"\nGroups slower than eager by more than {SLOW_RATIO - 1:.0%}:")
        for r in slow:
            print(f"- {r.model} {r.label} ({r.ratio:.2f}x): {ops_text(r.ops)}")


if __name__ == "__main__":
    main()
