"""
The program compiler: a fused module's `@forward` to the ordered steps of a `Program`.

Each `fusion.group`, and each lone non-extern graph op, is lowered on its own: it is wrapped in
a temporary module whose `@forward` takes the unit's inputs and returns its outputs, `lower-to-
loops` turns it into kernel funcs and `fusion.launch`es (docs/contracts.md), and each kernel is
compiled through the kernel cache. A group whose lowering or compilation fails is compiled op by
op (`GroupInfo.status`; fusion's `loop-structure` gate keeps such groups from forming); a unit
that still fails falls back to the interpreter (`xfuse.runtime.fallback`). Extern ops (matmul, linear, torch_call) run eagerly;
layout ops that only feed externs or outputs are torch views; constants are computed once.

The memory plan: a kernel's output buffer goes back to the pool when the last use of every
value that may alias it (eager results may be views of their inputs) has run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache, partial
from typing import Protocol, cast

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, IntegerAttr, ModuleOp, StringAttr, SymbolRefAttr
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.traits import SymbolTable

from xfuse.backends import Kernel
from xfuse.dialects import fusion, graph
from xfuse.dialects.effects import computed_by_xfuse
from xfuse.dialects.torch_args import Operand
from xfuse.errors import XfuseError
from xfuse.interpreters.graph import OP_IMPLS, DirectCall, find_function, interpret, run_op
from xfuse.ir import dtypes, serialize
from xfuse.ir.functions import kernel_functions
from xfuse.ir.names import ERROR_FLAG_ATTR, PARALLEL_DIMS_ATTR
from xfuse.passes.lowering.lower_to_loops import is_lone_kernel_op as lowers_to_kernel
from xfuse.runtime.cache import KernelSource
from xfuse.runtime.compile_workers import MIN_JOBS, lower_in_workers, workers
from xfuse.runtime.fallback import DEFAULT_FALLBACK, FallbackMode, fallback_step, reason_of
from xfuse.runtime.steps import (
    VIEW_IMPLS,
    Allocate,
    BufferSpec,
    EagerStep,
    GemmStep,
    KernelStep,
    Step,
    ViewStep,
    torch_call_view,
)

Tensor = torch.Tensor

KernelCompiler = Callable[[KernelSource, str], Kernel]
"""Compiles the kernel of a module of loop IR (through the kernel cache), loaded as `name`."""

LowerToLoops = Callable[[ModuleOp], object]
"""Lowers a module's `@forward` to kernels + fusion.launch, in place (lower-to-loops; what it
returns is not read)."""


def lower_to_loops(
    module: ModuleOp,
    device: torch.device | str = "cpu",
    leave: Callable[[Operation], bool] | None = None,
) -> dict[str, list[str]]:
    """lower-to-loops as the runtime runs it for `device` (dims merged and short f32 sums in
    f64 except on CUDA, see `LowerToLoopsPass.merge_dims` and `.wide_sums`), the lone ops
    `leave` names left in place; the names of the ops each kernel computes, by its symbol."""
    from xfuse.passes.lowering.lower_to_loops import MERGE_DIMS, WIDE_SUMS, lower_functions

    cpu = torch.device(device).type != "cuda"
    return lower_functions(
        module, merge_dims=MERGE_DIMS and cpu, wide_sums=WIDE_SUMS and cpu, leave=leave
    )


FUSED, OP_BY_OP, EAGER, CONSTANT = "fused", "op by op", "eager", "constant"
"""How a group runs (`GroupInfo.status`)."""


@dataclass
class GroupInfo:
    """A fusion group as compiled: what it holds and what became of it."""

    index: int
    ops: list[str]
    inputs: list[str]
    outputs: list[str]
    kind: str
    rule: str
    attributes: dict[str, str]
    kernels: list[str] = field(default_factory=list)
    fallback: str | None = None
    unfused: str | None = None
    """Why the group's lowering refused it, when it was compiled op by op instead."""
    constant: bool = False
    """Its results were computed once, at compile time (`ProgramCompiler._fold`): no kernel."""

    @property
    def label(self) -> str:
        return f"group {self.index} ({', '.join(self.ops)})"

    @property
    def status(self) -> str:
        """How the group runs: `fused` (its kernel), `op by op` (a kernel, view or extern per
        op: the safety net when its lowering refused it), `eager` (it fell back) or `constant`
        (it reads nothing the call gives, so its results were computed at compile time)."""
        if self.constant:
            return CONSTANT
        if self.fallback is not None:
            return EAGER
        return OP_BY_OP if self.unfused is not None else FUSED


@dataclass
class KernelInfo:
    """A compiled kernel: its name in the program (`kernel_<i>`), its function's name in the
    module it was lowered in, where it came from, and its buffers."""

    name: str
    symbol: str
    source: str
    group: int | None
    inputs: list[str]
    outputs: list[str]
    parallel_dims: int | None
    loop_ir: str


PlannedStep = tuple[
    Callable[[list[Tensor], Allocate], list[Tensor]],
    tuple[int, ...],
    tuple[int, ...],
    tuple[tuple[int, BufferSpec], ...],
    tuple[int, ...],
]


@dataclass
class Program:
    """Ordered steps over numbered slots, with the memory plan (see `xfuse.runtime.executor`)."""

    steps: list[Step]
    n_slots: int
    arg_slots: tuple[int, ...]
    output_slots: tuple[int, ...]
    constants: dict[int, Tensor]
    release_after: list[tuple[tuple[int, BufferSpec], ...]]
    drop_after: list[tuple[int, ...]]
    groups: list[GroupInfo]
    kernels: list[KernelInfo]
    fallbacks: list[str]
    module: ModuleOp
    scalar_args: tuple[int, ...] = ()
    """On a GPU, the positions of its 0-d arguments: a call may pass them as CPU scalars."""
    output_sources: tuple[frozenset[int], ...] = ()
    """Where `scalar_args` are, the positions of the arguments each output is computed from."""

    def outputs_only_from(self, args: frozenset[int]) -> list[int]:
        """The outputs computed from arguments, all of them at the positions `args`."""
        return outputs_only_from(self.output_sources, args)

    @property
    def op_by_op(self) -> list[str]:
        """The groups compiled op by op because their lowering refused them, with why (fusion
        should never form one: `loop-structure`; this is the safety net)."""
        return [f"{g.label}: {g.unfused}" for g in self.groups if g.unfused is not None]

    @cached_property
    def runner(self) -> Runner:
        """The steps as one Python function (`make_runner`): what the executor calls."""
        return make_runner(self)

    @cached_property
    def plan(self) -> list[PlannedStep]:
        """The steps as the executor's loop takes them, every attribute read once: (the step's
        bound `run`, its input slots, its output slots, the buffers released and the slots
        dropped after it)."""
        return [
            (step.run, step.inputs, step.outputs, releases, drops)
            for step, releases, drops in zip(
                self.steps, self.release_after, self.drop_after, strict=True
            )
        ]


Runner = Callable[[Sequence[Tensor], Allocate, Callable[[BufferSpec, Tensor], None]], list[Tensor]]
"""(`@forward`'s arguments, allocate, release) -> its results."""


def _step_label(kind: str, op: Operation) -> str:
    """A step's name in profiles: its kind and op, and for a torch call its operator and result
    shape (`eager graph.torch_call aten.convolution.default -> 1x96x16x16`)."""
    if isinstance(op, graph.TorchCallOp):
        shape = "x".join(map(str, graph.shape_of(op.outputs[0]))) if op.outputs else ""
        return f"{kind} {op.name} {op.target.data} -> {shape}"
    return f"{kind} {op.name}"


def direct_call_text(
    i: int, direct: DirectCall, operands: Sequence[str], names: dict[str, object]
) -> str:
    """Step `i`'s one torch call (`direct_call`) as generated code, `ext7(s5, a7_1, **kw7)`:
    each operand the variable `operands` names (by operand index), the function, constant
    arguments and keywords put into `names` (the generated function's globals)."""
    fn, arguments, keywords = direct
    names[f"ext{i}"] = fn
    parts = []
    for j, a in enumerate(arguments):
        if isinstance(a, Operand):
            parts.append(operands[a.index])
        else:
            names[f"a{i}_{j}"] = a
            parts.append(f"a{i}_{j}")
    if keywords:
        names[f"kw{i}"] = keywords
        parts.append(f"**kw{i}")
    return f"ext{i}({', '.join(parts)})"


def make_runner(program: Program) -> Runner:
    """The program's `plan` as the straight-line code of one Python function, made once: each
    step is one call of its `run` with its input slots (local variables) and its outputs
    unpacked into theirs; buffers are released and slots dropped where the memory plan says.
    A view step is its view's method call (`s4 = s3.reshape(arg2)`), an extern that is one
    torch call of its operands is that call (`s7 = ext7(s5, c3, a7_2)`, `EagerStep.direct`),
    a CPU kernel whose work runs on this thread is its one foreign call
    (`KernelStep.direct_call`), and a GPU kernel its launcher's call (`KernelStep.direct_launch`:
    `kernel4(s3, b0, s5)`). So a call
    costs no per-step loop, indexing or unpacking of a plan (the executor's loop,
    `run_program` with the step profile on, does the same step by step).

        def run(args, allocate, release):
            s0, s1 = args
            s2, = step0([s0, s1], allocate)
            s3, = step1([s2], allocate)
            release(spec0, s2)
            s2 = None
            s4 = s3.reshape(arg2)
            b0 = s1 if s1.is_contiguous() else s1.contiguous()
            s5 = allocate(out4_0)
            kernel4(0, 64, s3.data_ptr(), b0.data_ptr(), s5.data_ptr())
            b0 = None
            return [s4, s5]
    """
    constants = program.constants
    names: dict[str, object] = {}

    def slot(s: int) -> str:
        if s in constants:
            names[f"c{s}"] = constants[s]
            return f"c{s}"
        return f"s{s}"

    def unpack(slots: Sequence[int]) -> str:
        return ", ".join(slot(s) for s in slots) + ("," if len(slots) == 1 else "")

    lines = ["def run(args, allocate, release):"]
    if program.arg_slots:
        lines.append(f"    {unpack(program.arg_slots)} = args")
    contiguous: set[int] = set()
    """Slots that hold a kernel's output (contiguous) at the point the code has reached."""
    for i, (run, in_slots, out_slots, releases, drops) in enumerate(program.plan):
        step = program.steps[i]
        direct = step.direct_call() if isinstance(step, KernelStep) else None
        launch = step.direct_launch() if isinstance(step, KernelStep) and not direct else None
        if isinstance(step, ViewStep) and run == step.run:  # its view's method, called in place
            names[f"arg{i}"] = step.view.argument
            view = f"{slot(in_slots[0])}.{step.view.method}(arg{i})"
            lines.append(f"    {slot(out_slots[0])} = {view}")
        elif (direct is not None or launch is not None) and run == step.run:
            # One call of the kernel (`KernelStep.direct_call`: a foreign call on this thread
            # with every buffer's address; `direct_launch`: a GPU launch with the buffers):
            # inputs that may not be contiguous (not a kernel's output) made so and held in a
            # local until the call returns, outputs allocated, then the kernel called.
            assert isinstance(step, KernelStep)
            buffers = [slot(s) if s in contiguous else f"b{k}" for k, s in enumerate(in_slots)]
            held = [b for b in buffers if b.startswith("b")]
            for b, s in zip(buffers, in_slots, strict=True):
                if b in held:
                    lines.append(
                        f"    {b} = {slot(s)} if {slot(s)}.is_contiguous() else {slot(s)}.contiguous()"
                    )
            for j, (s, spec) in enumerate(zip(out_slots, step.out_specs, strict=True)):
                names[f"out{i}_{j}"] = spec
                lines.append(f"    {slot(s)} = allocate(out{i}_{j})")
            every = (*buffers, *map(slot, out_slots))
            if direct is not None:
                names[f"kernel{i}"] = direct[0]
                pointers = ", ".join(f"{b}.data_ptr()" for b in every)
                lines.append(f"    kernel{i}(0, {direct[1]}, {pointers})")
            else:
                names[f"kernel{i}"] = launch
                lines.append(f"    kernel{i}({', '.join(every)})")
            if held:
                lines.append(f"    {' = '.join(held)} = None")
        elif isinstance(step, EagerStep) and run == step.run and step.direct is not None:
            # One torch call (`EagerStep.direct`): `s7 = ext7(s5, c3, a7_2, ...)`, or for an
            # operator's tuple of results `s7, s8 = ext7(...)`.
            call = direct_call_text(i, step.direct, [slot(s) for s in in_slots], names)
            targets = slot(out_slots[0]) if len(out_slots) == 1 else unpack(out_slots)
            lines.append(f"    {targets} = {call}")
        else:
            names[f"step{i}"] = run
            call = f"step{i}([{', '.join(slot(s) for s in in_slots)}], allocate)"
            lines.append(f"    {unpack(out_slots)} = {call}" if out_slots else f"    {call}")
        for j, (s, spec) in enumerate(releases):
            names[f"spec{i}_{j}"] = spec
            lines.append(f"    release(spec{i}_{j}, {slot(s)})")
        # A constant is never dropped (it is the program's, not the call's).
        lines += [f"    s{s} = None" for s in drops if s not in constants]
        if isinstance(step, KernelStep):
            contiguous.update(s for s in out_slots if s not in constants)
        else:
            contiguous.difference_update(out_slots)
    # A constant is shared by every call: the caller gets its own copy.
    results = [f"{slot(s)}.clone()" if s in constants else slot(s) for s in program.output_slots]
    lines.append(f"    return [{', '.join(results)}]")
    code = compile("\n".join(lines) + "\n", "<xfuse program>", "exec")
    namespace: dict[str, object] = dict(names)
    exec(code, namespace)  # noqa: S102 - code made above from slot numbers only
    return cast(Runner, namespace["run"])


@lru_cache(maxsize=4096)
def type_str(t: Attribute) -> str:
    """A type's text, printed once per distinct type (a warm start shows each kernel's
    operand types, and printing a type is slow)."""
    return str(t)


def spec_of(value: SSAValue) -> BufferSpec:
    return BufferSpec(graph.shape_of(value), dtypes.to_torch(graph.dtype_of(value)))


def unit_inputs(op: Operation) -> list[SSAValue]:
    """The operands a unit's kernels take as buffers: all but those made by graph.constant
    (copied into the unit's module instead, where lower-to-loops folds splats)."""
    return [v for v in op.operands if not isinstance(v.owner, graph.ConstantOp)]


def wrap_unit(op: Operation) -> ModuleOp:
    """A module whose `@forward` takes `unit_inputs(op)` and returns `op`'s results, holding a
    clone of `op` (and of the constants it reads)."""
    inputs = unit_inputs(op)
    out_types = [r.type for r in op.results]
    block = Block(arg_types=[v.type for v in inputs])
    mapping: dict[SSAValue, SSAValue] = dict(zip(inputs, block.args, strict=True))
    for v in op.operands:
        if v not in mapping and isinstance(v.owner, graph.ConstantOp):
            constant = v.owner.clone(clone_name_hints=False)
            block.add_op(constant)
            mapping[v] = constant.result
    clone = op.clone(value_mapper=mapping, clone_name_hints=False)
    block.add_ops([clone, func.ReturnOp(*clone.results)])
    forward = func.FuncOp(
        "forward", FunctionType.from_lists(list(block.arg_types), out_types), Region(block)
    )
    return ModuleOp([forward])


CANONICAL_KERNEL = "xfuse_kernel"
"""The symbol of every kernel as compiled (the kernel cache applies its readable name when it
loads it): the cache key holds no name."""


def canonical_kernel_module(kernel: func.FuncOp, take_body: bool = False) -> ModuleOp:
    """A module of a copy of the kernel, named `CANONICAL_KERNEL`, without SSA name hints, so
    that its text (the cache key) is the same for the same computation wherever it came from.
    With `take_body`, the copy holds the kernel's own blocks (not copies), and the kernel is
    left without any."""
    if take_body:
        clone = kernel.clone_without_regions(clone_name_hints=False)
        kernel.body.move_blocks(clone.body)
    else:
        clone = kernel.clone(clone_name_hints=False)
    clone.sym_name = StringAttr(CANONICAL_KERNEL)
    module = ModuleOp([clone])
    for op in module.walk():
        for value in op.results:
            value.name_hint = None
        for region in op.regions:
            for block in region.blocks:
                for arg in block.args:
                    arg.name_hint = None
    return module


def canonical_source(kernel: func.FuncOp, take_body: bool = False) -> KernelSource:
    """The kernel's `canonical_kernel_module` and its text: what the kernel cache keys and
    compiles it by, for the static runtime (`ProgramCompiler.canonical`) and symbolic programs
    (`xfuse.runtime.symbolic.compile_kernels`) alike."""
    return KernelSource.of(canonical_kernel_module(kernel, take_body))


UnitSources = dict[func.FuncOp, KernelSource]
"""A lowered unit's kernels (its module's kernel funcs) -> their canonical sources."""


def lower_unit(module: ModuleOp, lower: LowerToLoops) -> UnitSources:
    """Lower a unit's module (`wrap_unit`) in place and take its kernels' loops into their
    canonical sources (`canonical_source`), which leaves its kernel funcs without a body
    (`compile` reads only their symbols and attributes)."""
    lower(module)
    return {f: canonical_source(f, take_body=True) for f in kernel_functions(module)}


def lowered_unit(unit: bytes, device: str) -> bytes:
    """A compile worker's job (`xfuse.runtime.compile_workers.lower_in_workers`): a unit's
    module, `xfuse.ir.serialize`d, lowered for `device` (`lower_unit`), and serialized with
    its kernels' canonical sources (their text, which keys them: `KernelSource` pickles as its
    text and symbol)."""
    module = serialize.loads(unit)
    sources = lower_unit(module, partial(lower_to_loops, device=device))
    return serialize.dumps((module, sources))


def kernel_name(ops: Sequence[str], symbol: str) -> str:
    """The name profilers show for a kernel: `xfuse_` and its unit's ops (the first few, in
    order, without repeats or constants), e.g. `xfuse_mul_add_exp`; the second kernel of a unit gets `_k1`
    (its symbol's suffix). A C and PTX identifier."""
    names = list(dict.fromkeys(op.rpartition(".")[2] for op in ops if op != "graph.constant"))
    shown = names[:4] + ([f"{len(names) - 4}more"] if len(names) > 4 else [])
    _, _, index = symbol.rpartition("_k")
    suffix = f"_k{index}" if index.isdigit() and index != "0" else ""
    text = "_".join(["xfuse", *shown]) + suffix
    return "".join(c if c.isalnum() or c == "_" else "_" for c in text)


def _is_view(op: Operation) -> bool:
    """Whether a lone layout op runs as a torch view: a reshape (torch copies where it must),
    a view only externs read (or the return), and the permute that gives a torch call's
    result in memory order its dims back where fusion took no reader of it into a kernel
    (`graph.restores_torch_layout`: torch's own tensor, which the kernels reading it copy, as
    a kernel of the permute would)."""
    if op.name == "graph.reshape" or graph.restores_torch_layout(op):
        return True
    return op.name in VIEW_IMPLS and graph.read_only_by_externs(op, or_return=True)


def is_fresh_view(op: Operation) -> bool:
    """A lone layout op that runs as a torch view (`_is_view`'s rule) and that its function
    does not return: a program whose results must be fresh tensors (a symbolic one) runs it so,
    where a kernel would copy every element."""
    returned = any(u.operation.name == "func.return" for r in op.results for u in r.uses)
    return _is_view(op) and not returned


FOLD_LIMIT_BYTES = 1 << 24
"""The most bytes of results a group folded at compile time may hold (`_fold`)."""


def folds(group: fusion.GroupOp) -> bool:
    """Whether `ProgramCompiler._fold` computes the group at compile time (see there)."""
    ops = group.body_ops
    if group.inputs or not all(computed_by_xfuse(op) for op in ops):
        return False
    size = sum(
        graph.numel(graph.shape_of(r)) * dtypes.byte_width(graph.dtype_of(r)) for r in group.results
    )
    return size <= FOLD_LIMIT_BYTES


def is_lone_kernel_op(op: Operation) -> bool:
    """A graph op outside groups that the program compiler lowers to a kernel of its own:
    one `lower-to-loops` makes a kernel of (`lower_to_loops.is_lone_kernel_op`) that does not
    run as a torch view instead."""
    return lowers_to_kernel(op) and not _is_view(op)


def group_info(op: fusion.GroupOp, index: int) -> GroupInfo:
    """What a fusion group holds, as `GroupInfo` (what became of it is filled in later)."""
    return GroupInfo(
        index=index,
        ops=_unit_ops(op),
        inputs=[type_str(v.type) for v in op.inputs],
        outputs=[type_str(r.type) for r in op.results],
        kind=op.kind.data,
        rule=op.rule.data,
        attributes=_group_attributes(op),
    )


def _unit_ops(op: Operation) -> list[str]:
    if isinstance(op, fusion.GroupOp):
        return [o.name for o in op.body_ops]
    return [op.name]


def _group_attributes(op: fusion.GroupOp) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, attr in op.attributes.items():
        out[name] = attr.data if isinstance(attr, StringAttr) else str(attr)
    return out


class _Emitter:
    """Steps, slots and constants being built; a child emitter commits only on success."""

    def __init__(self, counter: list[int]):
        self.counter = counter
        self.steps: list[Step] = []
        self.constants: dict[int, Tensor] = {}
        self.kernels: list[KernelInfo] = []

    def new_slot(self) -> int:
        self.counter[0] += 1
        return self.counter[0] - 1

    def child(self) -> _Emitter:
        return _Emitter(self.counter)

    def commit(self, child: _Emitter) -> None:
        self.steps += child.steps
        self.constants.update(child.constants)
        self.kernels += child.kernels


class ProgramCompiler:
    """Builds a `Program` from a module after fusion (see the module docstring)."""

    def __init__(
        self,
        compile_kernel: KernelCompiler,
        lower: LowerToLoops | None = None,
        function: str = "forward",
        fallback: FallbackMode = DEFAULT_FALLBACK,
        device: torch.device | str = "cpu",
        lower_in_workers: bool = False,
    ):
        self.compile_kernel = compile_kernel
        self.fallback = fallback
        self.device = torch.device(device)
        """Where the program's constants live (with its inputs and kernels)."""
        self.lower = lower if lower is not None else partial(lower_to_loops, device=self.device)
        self.lower_in_workers = lower_in_workers and lower is None
        """Whether `lower_ahead` hands its units to the compile workers (where their kernels
        compile too: `can_compile_ahead`; never with a `lower` of the caller's)."""
        self.function = function
        self._canonical: dict[func.FuncOp, KernelSource] = {}
        """Each kernel's canonical module and text, made once (`kernel_modules` and `compile`
        both need them)."""
        self._lowered: dict[Operation, ModuleOp] = {}
        """Units lowered ahead by `kernel_modules`, which `compile` takes instead of lowering
        them again."""
        self.gemms: Mapping[Operation, str] = {}
        """The products of the module to compile that run another way than torch's call
        (`GemmStep`), each with its way, as `xfuse.choices.chosen_gemms` chose them."""

    def canonical(self, kernel: func.FuncOp, take_body: bool = False) -> KernelSource:
        """The kernel's `canonical_kernel_module` and its text, made once per kernel (with
        `take_body`, of the kernel's own loops, which leave it empty)."""
        found = self._canonical.get(kernel)
        if found is None:
            if not kernel.body.blocks:  # emptied by `lower_ahead`: its loops are not here
                raise XfuseError(f"kernel @{kernel.sym_name.data} has no body to compile")
            found = self._canonical[kernel] = canonical_source(kernel, take_body)
        return found

    def lower_ahead(self, module: ModuleOp) -> LoweredUnits:
        """Lower each unit that `compile` will lower, with its kernels' canonical modules (kept
        for `compile`): in the compile workers where `lower_in_workers` (`_lowered_elsewhere`),
        else, and where a worker failed, here; a unit whose lowering fails is left to
        `compile`, which reports it."""
        units = [
            op
            for op in find_function(module, self.function).body.block.ops
            if op not in self._lowered and _is_lowered_unit(op)
        ]
        for op, done in zip(units, self._lowered_elsewhere(units), strict=True):
            if done is None:
                lowered = wrap_unit(op)
                try:
                    done = lowered, lower_unit(lowered, self.lower)
                except Exception:  # noqa: BLE001 - `compile` lowers it again and handles the error
                    continue
            self._lowered[op], sources = done
            self._canonical.update(sources)
        return LoweredUnits(dict(self._lowered), dict(self._canonical))

    def _lowered_elsewhere(
        self, units: Sequence[Operation]
    ) -> list[tuple[ModuleOp, UnitSources] | None]:
        """Each unit's lowered module and kernels' sources, as `lower_unit` makes them, from the
        compile workers (`lower_in_workers`); None where a worker did not lower it, and for
        every unit where this compiler does not use the workers or has fewer than `MIN_JOBS`
        units."""
        processes = workers() if self.lower_in_workers and len(units) >= MIN_JOBS else 0
        if processes < 2:
            return [None] * len(units)
        jobs = [serialize.dumps(wrap_unit(op)) for op in units]
        lower = partial(lowered_unit, device=self.device.type)
        results = lower_in_workers(lower, jobs, processes)
        return [None if r is None else serialize.loads(r) for r in results]

    def adopt(self, lowered: LoweredUnits) -> None:
        """Units lowered already (by `lower_ahead`, in this process or in one whose fused
        program the cache holds), which `compile` takes instead of lowering them."""
        self._lowered.update(lowered.units)
        self._canonical.update(lowered.sources)

    def kernel_modules(self, module: ModuleOp) -> list[KernelSource]:
        """The canonical module of each kernel that `compile` will ask `compile_kernel` for
        (`lower_ahead` first). For compiling kernels ahead, in parallel
        (`xfuse.runtime.compile_workers`)."""
        self.lower_ahead(module)
        return [
            self.canonical(f)
            for op in find_function(module, self.function).body.block.ops
            if (lowered := self._lowered.get(op)) is not None
            for f in kernel_functions(lowered)
        ]

    def compile(self, module: ModuleOp) -> Program:
        forward = find_function(module, self.function)
        counter = [0]
        top = _Emitter(counter)
        slot_of: dict[SSAValue, int] = {}
        arg_slots = tuple(self._define(top, slot_of, a) for a in forward.body.block.args)
        groups: list[GroupInfo] = []
        fallbacks: list[str] = []
        output_slots: tuple[int, ...] = ()
        for op in forward.body.block.ops:
            if isinstance(op, func.ReturnOp):
                output_slots = tuple(slot_of[v] for v in op.operands)
            elif isinstance(op, fusion.GroupOp):
                info = group_info(op, len(groups))
                groups.append(info)
                info.constant = self._fold(top, slot_of, op)
                if not info.constant:
                    self._unit(top, slot_of, op, info, fallbacks)
            elif is_lone_kernel_op(op):
                self._unit(top, slot_of, op, None, fallbacks)
            else:
                self._plain(top, slot_of, op, module)
        for i, kernel in enumerate(top.kernels):
            kernel.name = f"kernel_{i}"
        for info in groups:
            info.kernels = [k.name for k in top.kernels if k.group == info.index]
        steps = elide_kernel_reshapes(top.steps, set(output_slots))
        scalar_args: tuple[int, ...] = ()
        if self.device.type != "cpu":
            scalar_args = tuple(
                k for k, a in enumerate(forward.body.block.args) if not graph.shape_of(a)
            )
            copy_scalar_inputs(steps, {arg_slots[k] for k in scalar_args})
        sources = output_sources(forward) if scalar_args else ()
        plan = _MemoryPlan(steps, arg_slots, output_slots, set(top.constants))
        return Program(
            steps=steps,
            n_slots=counter[0],
            arg_slots=arg_slots,
            output_slots=output_slots,
            constants=top.constants,
            release_after=plan.release_after,
            drop_after=plan.drop_after,
            groups=groups,
            kernels=top.kernels,
            fallbacks=fallbacks,
            module=module,
            scalar_args=scalar_args,
            output_sources=sources,
        )

    @staticmethod
    def _define(em: _Emitter, slot_of: dict[SSAValue, int], value: SSAValue) -> int:
        slot_of[value] = em.new_slot()
        return slot_of[value]

    def _fold(self, em: _Emitter, slot_of: dict[SSAValue, int], group: fusion.GroupOp) -> bool:
        """A group that reads no value of the call (an attention mask made of `iota` and
        compares: Inductor folds it too) computed once, here, by the graph interpreter (eager's
        own ops): its results become program constants, and no kernel runs for it. False, with
        nothing done, for a group with inputs, one with an op that is no pure graph op, or
        results over `FOLD_LIMIT_BYTES` (memory held for the program's life)."""
        if not folds(group):
            return False
        try:
            values = interpret(wrap_unit(group), [])
        except Exception:  # noqa: BLE001 - compiled as a kernel instead, errors reported there
            return False
        for r, value in zip(group.results, values, strict=True):
            em.constants[self._define(em, slot_of, r)] = value.to(self.device)
        return True

    def _unit(
        self,
        top: _Emitter,
        slot_of: dict[SSAValue, int],
        op: Operation,
        info: GroupInfo | None,
        fallbacks: list[str],
    ) -> None:
        """A group or lone op as kernels, or as one eager step when that fails."""
        label = info.label if info is not None else f"op {op.name}"
        inputs = tuple(slot_of[v] for v in op.operands)
        child = top.child()
        try:
            kernel_inputs = tuple(slot_of[v] for v in unit_inputs(op))
            results = self._lowered_unit(child, op, kernel_inputs, info)
        except Exception as e:
            reason = reason_of(e)
            if isinstance(op, fusion.GroupOp) and self._op_by_op(top, slot_of, op, info):
                if info is not None:
                    info.unfused = reason
                return
            outputs = tuple(self._define(top, slot_of, r) for r in op.results)
            top.steps.append(fallback_step(op, inputs, outputs, label, reason, self.fallback))
            fallbacks.append(f"{label}: {reason}")
            if info is not None:
                info.fallback = reason
            return
        top.commit(child)
        for r, slot in zip(op.results, results, strict=True):
            slot_of[r] = slot

    def _op_by_op(
        self,
        top: _Emitter,
        slot_of: dict[SSAValue, int],
        group: fusion.GroupOp,
        info: GroupInfo | None,
    ) -> bool:
        """A group that its lowering refuses, compiled op by op (each op a kernel of its own, a
        view or an extern) rather than run eagerly; False, with nothing committed, when one of
        its ops cannot be compiled either (the group then falls back whole)."""
        child = top.child()
        inner: dict[SSAValue, int] = {
            arg: slot_of[v] for arg, v in zip(group.block.args, group.inputs, strict=True)
        }
        module = ModuleOp([])
        try:
            for op in group.block.ops:
                if isinstance(op, fusion.YieldOp):
                    results = [inner[v] for v in op.values]
                    break
                if is_lone_kernel_op(op):
                    kernel_inputs = tuple(inner[v] for v in unit_inputs(op))
                    outs = self._lowered_unit(child, op, kernel_inputs, info)
                    inner.update(zip(op.results, outs, strict=True))
                else:
                    self._plain(child, inner, op, module)
            else:
                return False
        except Exception:  # noqa: BLE001 - the group falls back whole, with the group's reason
            return False
        top.commit(child)
        slot_of.update(zip(group.results, results, strict=True))
        return True

    def _lowered_unit(
        self, em: _Emitter, op: Operation, inputs: tuple[int, ...], info: GroupInfo | None
    ) -> list[int]:
        module = self._lowered.pop(op, None)
        if module is None:
            module = wrap_unit(op)
            self.lower(module)
        forward = find_function(module, "forward")
        slot_of: dict[SSAValue, int] = dict(zip(forward.body.block.args, inputs, strict=True))
        source = f"group {info.index}" if info is not None else op.name
        for inner in forward.body.block.ops:
            if isinstance(inner, func.ReturnOp):
                return [slot_of[v] for v in inner.operands]
            if isinstance(inner, fusion.LaunchOp):
                self._launch(em, slot_of, inner, module, source, info, _unit_ops(op))
            else:
                self._plain(em, slot_of, inner, module)
        raise XfuseError(f"lowering {source} produced an @forward without func.return")

    def _launch(
        self,
        em: _Emitter,
        slot_of: dict[SSAValue, int],
        launch: fusion.LaunchOp,
        module: ModuleOp,
        source: str,
        info: GroupInfo | None,
        ops: Sequence[str] = (),
    ) -> None:
        name = launch.callee.root_reference.data
        kernel_func = SymbolTable.lookup_symbol(module, SymbolRefAttr(name))
        if not isinstance(kernel_func, func.FuncOp):
            raise XfuseError(f"fusion.launch @{name}: no kernel func @{name} in the module")
        canonical = self.canonical(kernel_func)
        kernel = self.compile_kernel(canonical, kernel_name(ops or [name], name))
        inputs = tuple(slot_of[v] for v in launch.inputs)
        outputs = tuple(self._define(em, slot_of, r) for r in launch.outputs)
        specs = tuple(spec_of(r) for r in launch.outputs)
        step = KernelStep(kernel, inputs, outputs, specs, f"kernel @{name} ({source})")
        step.error_flag = ERROR_FLAG_ATTR in kernel_func.attributes  # a gathering kernel
        step.in_elements = sum(graph.numel(graph.shape_of(v)) for v in launch.inputs)
        em.steps.append(step)
        dims = kernel_func.attributes.get(PARALLEL_DIMS_ATTR)
        em.kernels.append(
            KernelInfo(
                name="",  # numbered once the program is complete
                symbol=name,
                source=source,
                group=info.index if info is not None else None,
                inputs=[type_str(v.type) for v in launch.inputs],
                outputs=[type_str(r.type) for r in launch.outputs],
                parallel_dims=dims.value.data if isinstance(dims, IntegerAttr) else None,
                loop_ir=canonical.text,
            )
        )

    def _plain(
        self, em: _Emitter, slot_of: dict[SSAValue, int], op: Operation, module: ModuleOp
    ) -> None:
        """Constants, views, externs, launches already in the module, other eager ops."""
        if isinstance(op, fusion.LaunchOp):
            self._launch(em, slot_of, op, module, op.callee.root_reference.data, None)
            return
        inputs = tuple(slot_of[v] for v in op.operands)
        outputs = tuple(self._define(em, slot_of, r) for r in op.results)
        if op.name == "graph.constant":
            em.constants[outputs[0]] = run_op(op, [])[0].to(self.device)
        elif _is_view(op) or torch_call_view(op) is not None:
            em.steps.append(ViewStep(op, inputs, outputs, _step_label("view", op)))
        elif op in self.gemms:
            way = self.gemms[op]
            em.steps.append(GemmStep(op, inputs, outputs, _step_label(way, op), way))
        elif op.name in OP_IMPLS or isinstance(op, fusion.GroupOp):
            em.steps.append(EagerStep(op, inputs, outputs, _step_label("eager", op)))
        else:
            raise XfuseError(f"xfuse cannot run op '{op.name}' (neither a kernel nor a torch op)")


@dataclass
class LoweredUnits:
    """What `ProgramCompiler.lower_ahead` made: each unit's lowered module, by the unit's op,
    and the canonical module of each of their kernels."""

    units: dict[Operation, ModuleOp]
    sources: dict[func.FuncOp, KernelSource]


def _is_lowered_unit(op: Operation) -> bool:
    """A group (one that is not folded into constants) or a lone op that `compile` lowers."""
    if isinstance(op, fusion.GroupOp):
        return not folds(op)
    return is_lone_kernel_op(op)


def elide_kernel_reshapes(steps: Sequence[Step], keep: set[int]) -> list[Step]:
    """`steps` without the reshape views that only kernels read (not the program's results,
    `keep`): those kernels read the reshape's input instead. A kernel reads a contiguous
    buffer of its input's elements in row-major order (`KernelStep` makes a strided one
    contiguous), and a reshape keeps that order, so the buffer is the same bytes: the view
    was a torch call per step for nothing (batch norm's four `[C] -> [C, 1, 1]` parameter
    reshapes, hoisted out of their groups by `group-cleanup`)."""
    readers: dict[int, list[Step]] = {}
    for step in steps:
        for s in step.inputs:
            readers.setdefault(s, []).append(step)
    alias: dict[int, int] = {}
    kept: list[Step] = []
    for step in steps:
        if alias and isinstance(step, KernelStep):
            step.inputs = tuple(alias.get(s, s) for s in step.inputs)
        if (
            isinstance(step, ViewStep)
            and step.op.name == "graph.reshape"
            and step.outputs[0] not in keep
            and all(isinstance(r, KernelStep) for r in readers.get(step.outputs[0], ()))
        ):
            alias[step.outputs[0]] = step.inputs[0]
            continue
        kept.append(step)
    return kept


def outputs_only_from(sources: Sequence[frozenset[int]], args: frozenset[int]) -> list[int]:
    """The outputs, of the arguments each reads (`output_sources`), computed from arguments,
    all of them at the positions `args`."""
    return [k for k, read in enumerate(sources) if read and read <= args]


def output_sources(forward: func.FuncOp) -> tuple[frozenset[int], ...]:
    """For each result of `forward`, the positions of the arguments it is computed from
    (through a group, from what its own result reads)."""
    sources: dict[SSAValue, frozenset[int]] = {
        a: frozenset([k]) for k, a in enumerate(forward.body.block.args)
    }

    def read(op: Operation) -> frozenset[int]:
        return frozenset().union(*(sources.get(v, frozenset()) for v in op.operands))

    def visit(block: Block) -> None:
        for op in block.ops:
            if isinstance(op, fusion.GroupOp):
                inner = zip(op.block.args, map(sources.__getitem__, op.inputs), strict=True)
                sources.update(inner)
                visit(op.block)
                made = map(sources.__getitem__, op.yield_op.operands)
                sources.update(zip(op.results, made, strict=True))
            else:
                sources.update(dict.fromkeys(op.results, read(op)))

    visit(forward.body.block)
    (ret,) = (op for op in forward.body.block.ops if isinstance(op, func.ReturnOp))
    return tuple(sources[v] for v in ret.operands)


def copy_scalar_inputs(steps: Sequence[Step], scalars: set[int]) -> None:
    """Each kernel step's `copied` inputs on a GPU program: the slots of its 0-d arguments
    (`scalars`) and views of them. A call may pass a CPU scalar there, which eager's kernels
    take as a value and `check_input` accepts: library calls take it where it is (attention
    reads its RNG state on the host), kernels a copy on their device. Which arguments are 0-d
    is fixed by the program's types, so it is decided here, once, not at every launch."""
    for step in steps:
        if isinstance(step, ViewStep) and step.inputs[0] in scalars:
            scalars.update(step.outputs)
        elif isinstance(step, KernelStep):
            step.copied = tuple(k for k, s in enumerate(step.inputs) if s in scalars)


class _MemoryPlan:
    """When each slot is dropped and each kernel buffer returns to the pool: a kernel's buffer
    after the last step of its alias class (`AliasClasses.recycled`), any other slot after its
    own last step; the program's outputs are kept."""

    def __init__(
        self,
        steps: Sequence[Step],
        arg_slots: Sequence[int],
        output_slots: Sequence[int],
        constant_slots: set[int],
    ):
        classes = AliasClasses(steps)
        owned: dict[int, BufferSpec] = {}
        for step in steps:
            if isinstance(step, KernelStep):
                owned.update(zip(step.outputs, step.out_specs, strict=True))
        recycled = classes.recycled(owned, (*arg_slots, *output_slots, *constant_slots))
        releases: list[list[tuple[int, BufferSpec]]] = [[] for _ in steps]
        drops: list[list[int]] = [[] for _ in steps]
        keep = set(output_slots)
        for s, end in classes.end.items():
            if s in keep:
                continue
            if s in recycled:
                releases[recycled[s]].append((s, owned[s]))
                drops[recycled[s]].append(s)
            else:
                drops[end].append(s)
        self.release_after = [tuple(sorted(r)) for r in releases]
        self.drop_after = [tuple(sorted(d)) for d in drops]


class SlotStep(Protocol):
    """A step as the memory plan sees it (the static runtime's `Step`s, a symbolic program's):
    the slots it reads and writes, and whether its results are memory of its own."""

    @property
    def inputs(self) -> Sequence[int]: ...

    @property
    def outputs(self) -> Sequence[int]: ...

    @property
    def owns_outputs(self) -> bool:
        """Its results never share memory with its inputs (a kernel's buffers, a fresh eager
        op's results: `fresh_results`)."""
        ...


def may_alias(step: SlotStep) -> bool:
    """Whether a step's results may share memory with its inputs: a view's and an eager op's
    do, but not those of a step that owns its outputs (`SlotStep.owns_outputs`)."""
    return not step.owns_outputs


class AliasClasses:
    """The slots of a program's steps in classes that may share memory (a step that
    `may_alias` joins its results' class with its inputs'), and the last step that reads or
    writes each slot and each class."""

    def __init__(self, steps: Sequence[SlotStep]):
        self.parent: dict[int, int] = {}
        self.end: dict[int, int] = {}
        """Slot -> the last step that reads or writes it."""
        for i, step in enumerate(steps):
            for s in (*step.inputs, *step.outputs):
                self.end[s] = i
            if may_alias(step):
                for o in step.outputs:
                    for s in step.inputs:
                        self._union(o, s)
        self.class_end: dict[int, int] = {}
        """A class (its `root`) -> the last step that reads or writes one of its slots."""
        for s, i in self.end.items():
            r = self.root(s)
            self.class_end[r] = max(self.class_end.get(r, -1), i)

    def root(self, s: int) -> int:
        """The slot that stands for `s`'s class."""
        while self.parent.get(s, s) != s:
            s = self.parent[s]
        return s

    def recycled(self, owned: Iterable[int], pinned: Iterable[int]) -> dict[int, int]:
        """The buffers among `owned` (slots a step allocates, a kernel's outputs) free for
        reuse once nothing may read them: slot -> the last step of its class; none whose
        class holds a slot of `pinned` (memory that outlives the call: arguments, results,
        constants)."""
        pinned_roots = {self.root(s) for s in pinned}
        return {s: self.class_end[r] for s in owned if (r := self.root(s)) not in pinned_roots}

    def _union(self, a: int, b: int) -> None:
        ra, rb = self.root(a), self.root(b)
        if ra != rb:
            self.parent[ra] = rb
