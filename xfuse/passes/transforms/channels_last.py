"""
`channels-last`: the 4-D activations of a convolutional program live in NHWC memory from one
convolution to the next, as Inductor's layout optimisation keeps them (`decide_layout_opt`,
`find_nodes_prefer_channels_last` in torch/_inductor/graph.py).

cuDNN (f16/bf16) and oneDNN run convolutions on NHWC data natively. Given the NCHW tensors a
program is written with, they convert every input, weight and output around every
convolution. Here each value that lives in NHWC memory is written as a contiguous `[N,H,W,C]`
tensor, and its logical NCHW value as `graph.permute %v_nhwc perm = [0, 3, 1, 2]` (its *twin*):

- a convolution's input is its input's twin seen by torch as a channels-last strided NCHW
  tensor (`graph.torch_call "aten.permute.default"`, a view at run time); torch then gives
  cuDNN a channels-last input, weight and output. An input that a chain of permutes and
  reshapes makes from tokens `[N, H*W, C]` is a view of them too (`nhwc_source`: PVT's
  `x.transpose(1, 2).reshape(N, C, H, W)`). An argument passed in channels-last memory
  (`graph.channels_last`, which the importer marks) is read as it lies; any other input
  without a twin (a program input) is converted once, by `aten.clone` to channels-last;
- a convolution's output (and that of pooling or upsampling, which keep channels-last, when
  their input had it) is read as NHWC through a view, `aten.permute(y, [0, 2, 3, 1])`, which
  is contiguous at run time;
- an elementwise op with an operand in NHWC (or that feeds a convolution) is rebuilt on the
  NHWC values, with its smaller operands (batch-norm's `[C, 1, 1]` vectors) reshaped to
  broadcast along the last dim; a reduction reads the NHWC value with its dims moved; a
  permute of a twin composes with it (ConvNeXt's own `permute(0, 2, 3, 1)` disappears);
- every other reader (other ops, `func.return`) reads the twin: the permute is fused into its
  kernel, so that a program output that eager returns contiguous is written NCHW by the last
  kernel (the runtime gives outputs eager's strides: docs/contracts.md); one that eager
  returns channels-last (`graph.channels_last` on the result) is the channels-last view of its
  NHWC value, written NHWC by the last kernel.

So the only layout changes left are the program's inputs (once, at the start) and its outputs
(in the last kernel); kernels between convolutions read and write NHWC buffers. Weights stay
as they are: torch converts them (it would convert a channels-last copy made every call just
the same, and oneDNN reorders weights on every call anyway).

    %y = graph.torch_call "aten.convolution.default"(%x, %w) args = [...] : ... -> tensor<2x8x4x4xf32>
    %r = graph.relu %y : tensor<2x8x4x4xf32>
      ->
    %y = graph.torch_call "aten.convolution.default"(%x_cl, %w) args = [...] : ... -> tensor<2x8x4x4xf32>
    %v = graph.torch_call "aten.permute.default"(%y) args = ["%t0", [0, 2, 3, 1]] ... -> tensor<2x4x4x8xf32>
    %r = graph.relu %v : tensor<2x4x4x8xf32>
    %r_nchw = graph.permute %r perm = [0, 3, 1, 2] : tensor<2x4x4x8xf32> -> tensor<2x8x4x4xf32>

Whether a program gains is decided as Inductor decides for inference (`layout_verdict`): on
CUDA it has 2-D convolutions, enough of them among its ops, and their FLOPs weighted by
channels-last's measured speed-up per kind of convolution (grouped ones are slower) favour it;
on the CPU (`target`) any 2-D convolution will do, and `xfuse.compile` drops the pass where the
program's convolutions were measured no faster NHWC (`xfuse.choices.chosen_layout`). `force`
skips the weighing; so does an argument passed channels-last (the user laid the data or the
weights out so, and torch returns a convolution of a channels-last weight channels-last in
either layout), with or without a convolution. A program with an op that may write memory is
left alone.

A program with size symbols (docs/dynamic-shapes.md) is rewritten alike, its values keeping
their symbols; its convolutions are weighed at the size hints (`hinted_shape`), and a chain of
views is taken for NHWC memory (`nhwc_source`) at static sizes only (else the input is copied
channels-last once).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, TypeGuard

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DenseArrayBase,
    DictionaryAttr,
    Float16Type,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xfuse.dialects import graph
from xfuse.dialects.effects import may_mutate
from xfuse.dialects.graph.base import Dim, DimT
from xfuse.dialects.op_kinds import Kind, kind_of
from xfuse.ir.names import CHANNELS_LAST_ATTR

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
"""`permute(x_nchw, TO_NHWC)` is the NHWC value of `x_nchw`; `TO_NCHW` is its inverse."""

CONVOLUTIONS = frozenset({"aten.convolution.default", "aten.conv2d.default"})

KEEPS_CHANNELS_LAST = frozenset(
    {
        "aten.max_pool2d_with_indices.default",
        "aten.max_pool2d.default",
        "aten.avg_pool2d.default",
        "aten._adaptive_avg_pool2d.default",
        "aten.adaptive_avg_pool2d.default",
        "aten.constant_pad_nd.default",
        "aten.upsample_nearest2d.default",
        "aten.upsample_nearest2d.vec",
        "aten.upsample_bilinear2d.default",
        "aten.upsample_bilinear2d.vec",
    }
)
"""Torch ops whose 4-D results are channels-last when their input is (on the CPU and CUDA):
they read the NHWC value's view, and their results are read as NHWC views in turn."""

STRIDE_AGNOSTIC = CONVOLUTIONS | KEEPS_CHANNELS_LAST
"""Extern torch ops given a channels-last strided view; any other torch op reading an NHWC
value gets a contiguous NCHW copy (some, like `aten.view`, need one)."""

# ---------------------------------------------------------------------------------------------
# The decision (Inductor's `decide_layout_opt`, inference branch)
# ---------------------------------------------------------------------------------------------

SPEEDUP = {"grouped": 1.358, "small": 0.783, "in_out": 0.725, "default": 0.823}
"""Channels-last time / NCHW time of convolutions by kind, measured by Inductor's authors on
torchbench's convolutions (`decide_layout_opt`): below 1 is faster."""

OPS_PER_CONVOLUTION = 300
"""A program with this many ops per convolution or more is left alone (Inductor's rule: the
layout changes around a few convolutions cost more than they save)."""


def _tensor_ref(attr: Attribute) -> int | None:
    if isinstance(attr, StringAttr) and attr.data.startswith("%t") and attr.data[2:].isdigit():
        return int(attr.data[2:])
    return None


def _int_arg(args: Sequence[Attribute], index: int, default: int) -> int:
    attr = args[index] if index < len(args) else None
    if isinstance(attr, IntegerAttr):
        return int(attr.value.data)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    return default


@dataclass(frozen=True)
class Convolution:
    """A 2-D convolution (`aten.convolution` or `aten.conv2d`) of the program."""

    op: graph.TorchCallOp
    input_index: int
    """Which operand of the torch call is the convolution's input."""
    weight: tuple[int, ...]
    output: tuple[int, ...]
    groups: int

    @staticmethod
    def of(op: Operation) -> Convolution | None:
        """The convolution `op` is, when it is a non-transposed 2-D one on 4-D tensors."""
        if not isinstance(op, graph.TorchCallOp) or op.target.data not in CONVOLUTIONS:
            return None
        args = op.args.data
        refs = [r for a in args[:2] if (r := _tensor_ref(a)) is not None]
        if len(refs) < 2 or len(op.outputs) != 1:
            return None
        transposed = op.target.data == "aten.convolution.default" and _int_arg(args, 6, 0)
        shapes = [hinted_shape(op.inputs[r], op) for r in refs]
        output = hinted_shape(op.outputs[0], op)
        if transposed or any(s is None or len(s) != 4 for s in (*shapes, output)):
            return None
        weight = shapes[1]
        assert weight is not None and output is not None
        groups = _int_arg(args, 8 if op.target.data == "aten.convolution.default" else 6, 1)
        return Convolution(op, refs[0], weight, output, groups)

    def flops(self) -> int:
        n, c_out, h, w = self.output
        return 2 * n * c_out * h * w * self.weight[1] * self.weight[2] * self.weight[3]

    def kind(self) -> str:
        """Inductor's classes: grouped (more than one input channel per group), small (at
        most 64 channels in and out), in_out (twice as many inputs as outputs), default."""
        c_out, c_in, kh, _ = self.weight
        if self.groups > 1 and c_in > 1:
            return "grouped"
        if c_out <= 64 and c_in <= 64:
            return "small"
        if c_out * 2 <= c_in and kh > 1:
            return "in_out"
        return "default"


def hinted_shape(value: SSAValue, op: Operation) -> tuple[int, ...] | None:
    """The shape of `value`, an operand or result of `op`, each size symbol at its hint (the
    example inputs' sizes, from the `graph.sizes` table of `op`'s function): what the decision
    weighs a symbolic program's convolutions at. None where a symbolic value has no table."""
    dims = graph.dims_of(value)
    if all(isinstance(d, int) for d in dims):
        return tuple(int(d) for d in dims)
    table = graph.size_table(op)
    if table is None:
        return None
    return graph.dims_at(dims, table.hints)


def convolutions(block: Block) -> list[Convolution]:
    return [c for op in block.ops if (c := Convolution.of(op)) is not None]


def _marked(attrs: ArrayAttr[DictionaryAttr] | None) -> list[int]:
    """The positions whose dictionary in `attrs` holds `CHANNELS_LAST_ATTR`."""
    return [k for k, a in enumerate(attrs.data if attrs else ()) if CHANNELS_LAST_ATTR in a.data]


def channels_last_args(block: Block) -> list[BlockArgument]:
    """The arguments of the function of `block` that a call passes in channels-last memory
    (`CHANNELS_LAST_ATTR`, which the importer sets)."""
    f = block.parent_op()
    if not isinstance(f, func.FuncOp):
        return []
    return [block.args[k] for k in _marked(f.arg_attrs) if k < len(block.args)]


def channels_last_results(block: Block) -> list[int]:
    """The positions of the results of the function of `block` that eager returns in
    channels-last memory (`CHANNELS_LAST_ATTR`)."""
    f = block.parent_op()
    return _marked(f.res_attrs) if isinstance(f, func.FuncOp) else []


TARGETS = ("cpu", "cuda")


def layout_verdict(block: Block, force: bool = False, target: str = "cuda") -> str | None:
    """Why the function of `block` stays NCHW, or None when it goes channels-last. On the CPU
    every program with a 2-D convolution goes, as Inductor's does where oneDNN is built in:
    oneDNN's NCHW convolutions reorder their input and output on every call (a batch-1 1x1
    convolution over 112x112 pixels takes 15x longer NCHW) and its NHWC ones read NCHW weights
    as fast. On CUDA Inductor's weighing of the convolutions decides. A program that is passed
    a tensor in channels-last memory (`channels_last_args`: the user laid its data or weights
    out so) goes too: it reads that tensor where it lies."""
    convs = convolutions(block)
    laid_out = bool(channels_last_args(block))
    if not convs and not laid_out:
        return "no 2-D convolution"
    mutator = next((op for op in block.ops if may_mutate(op)), None)
    if mutator is not None:
        return f"{mutator.name} may write memory"
    if force or target == "cpu" or laid_out:
        return None
    if len(convs) < 2:
        return "one convolution (an NHWC one is slower, and nothing is saved between two)"
    dtypes = {graph.dtype_of(c.op.outputs[0]) for c in convs}
    if not all(isinstance(t, Float16Type | BFloat16Type) for t in dtypes):
        return "f32 convolutions (cuDNN's NHWC f32 kernels are slower: ResNet f32 on an H100)"
    n_ops = len(block.ops)
    if n_ops >= OPS_PER_CONVOLUTION * len(convs):
        return f"{len(convs)} convolutions among {n_ops} ops"
    total = sum(c.flops() for c in convs)
    weighted = sum(c.flops() * SPEEDUP[c.kind()] for c in convs)
    if weighted > total:
        return "grouped convolutions dominate (slower channels-last)"
    return None


# ---------------------------------------------------------------------------------------------
# The rewrite
# ---------------------------------------------------------------------------------------------


def permuted(shape: Sequence[DimT], perm: Sequence[int]) -> tuple[DimT, ...]:
    """`shape` permuted; a `graph.SymbolicShape` stays one, its size symbols kept."""
    if isinstance(shape, graph.SymbolicShape):
        return graph.SymbolicShape([shape.dims[p] for p in perm])
    return tuple(shape[p] for p in perm)


def compose(first: Sequence[int], then: Sequence[int]) -> tuple[int, ...]:
    """The permutation of `permute(permute(x, first), then)`."""
    return tuple(first[p] for p in then)


def is_identity(perm: Sequence[int]) -> bool:
    return tuple(perm) == tuple(range(len(perm)))


def moves_only_unit_dims(shape: Sequence[Dim], perm: Sequence[int]) -> bool:
    """`permute(x, perm)` keeps the order of x's dims of size > 1: it is a reshape."""
    kept = [p for p in perm if shape[p] != 1]
    return kept == sorted(kept)


def twin_of(value: SSAValue) -> SSAValue | None:
    """The NHWC value whose twin `value` is: `v` when `value` is `permute(v, TO_NCHW)`."""
    op = value.owner
    if isinstance(op, graph.PermuteOp) and op.permutation == TO_NCHW:
        return op.input
    return None


def has_channels_last_strides(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether an `[N, C, H, W]` tensor of `shape` and `strides` is channels-last (a dim of
    size 1 may have any stride)."""
    n_s, h_s, w_s, c_s = graph.row_major_strides(permuted(shape, TO_NHWC))
    want = (n_s, c_s, h_s, w_s)
    return all(n == 1 or s == w for n, s, w in zip(shape, strides, want, strict=True))


LAYOUT_OPS = (graph.PermuteOp, graph.ReshapeOp)
"""The views `nhwc_source` follows: they keep every element (a slice does not), so a chain of
them with channels-last strides is the source's elements as `[N, H, W, C]`."""


def nhwc_source(value: SSAValue) -> SSAValue | None:
    """The value `x` that a chain of permutes and reshapes makes `value` (rank 4, NCHW) from,
    where `value` is `permute(reshape(x, [N, H, W, C]), TO_NCHW)`: its memory is NHWC when x's
    is contiguous (PVT's and SegFormer's `x.transpose(1, 2).reshape(B, C, H, W)` of tokens)."""
    if graph.is_symbolic(value):
        return None  # the stride test below holds at static sizes only
    chain: list[Operation] = []
    op = value.owner
    while isinstance(op, LAYOUT_OPS):
        chain.append(op)
        op = op.operands[0].owner
    shape = graph.shape_of(value)
    for i in range(len(chain)):  # the farthest source first: the longest chain of views
        source = chain[~i].operands[0]
        if graph.is_symbolic(source):
            continue
        strides: tuple[int, ...] | None = graph.row_major_strides(graph.shape_of(source))
        for link in reversed(chain[: len(chain) - i]):
            if strides is None:
                break
            strides = graph.view_strides(link, strides)
        if strides is not None and has_channels_last_strides(shape, strides):
            return source
    return None


def read_as_nhwc(value: SSAValue) -> bool:
    """Whether a chain of permutes and reshapes reads `value` (rank 4, NCHW) into a contiguous
    result where `value`'s memory is NHWC: ConvNeXt's `y.permute(0, 2, 3, 1)` and SegFormer's
    `y.flatten(2).transpose(1, 2)` of a convolution's result, views of an NHWC result and
    copies of an NCHW one."""
    if graph.is_symbolic(value):
        return False
    n, c, h, w = graph.shape_of(value)
    nhwc = graph.row_major_strides((n, h, w, c))
    found: list[tuple[SSAValue, tuple[int, ...]]] = [(value, tuple(nhwc[p] for p in TO_NCHW))]
    while found:
        source, strides = found.pop()
        for use in source.uses:
            op = use.operation
            if not isinstance(op, LAYOUT_OPS) or graph.is_symbolic(op.results[0]):
                continue
            seen = graph.view_strides(op, strides)
            if seen is None:
                continue
            if seen == graph.row_major_strides(graph.shape_of(op.results[0])):
                return True
            found.append((op.results[0], seen))
    return False


def _int_list(values: Sequence[int]) -> ArrayAttr[Attribute]:
    return ArrayAttr([IntegerAttr(v, i64) for v in values])


def torch_permute(value: SSAValue, perm: Sequence[int]) -> graph.TorchCallOp:
    """`value.permute(perm)` run by torch: a view, whatever the strides (unlike a lone
    `graph.permute`, which a kernel makes when one of its readers is a kernel)."""
    result = graph.tensor_of(graph.dtype_of(value), permuted(graph.dims_of(value), perm))
    args = ArrayAttr([StringAttr("%t0"), _int_list(perm)])
    return graph.TorchCallOp("aten.permute.default", [value], [result], args)


def torch_clone(value: SSAValue, memory_format: str) -> graph.TorchCallOp:
    """`value.clone(memory_format=...)` run by torch (`channels_last`, `contiguous_format`)."""
    kwargs = DictionaryAttr({"memory_format": StringAttr(f"memory_format:{memory_format}")})
    args = ArrayAttr([StringAttr("%t0")])
    return graph.TorchCallOp("aten.clone.default", [value], [value.type], args, kwargs)


def _is_rank4(value: SSAValue) -> bool:
    return isinstance(value.type, TensorType) and len(graph.shape_of(value)) == 4


def layouts_differ(dims: Sequence[Dim]) -> bool:
    """NCHW and NHWC memory differ for a 4-D tensor of `dims` (they do not with one channel or
    one pixel; a size symbol is never 1: sizes 0 and 1 specialise)."""
    return dims[1] != 1 and not (dims[2] == 1 and dims[3] == 1)


def _is_elementwise(op: Operation) -> bool:
    return (
        kind_of(op) == Kind.ELEMENTWISE
        and not isinstance(op, graph.ConstantOp)
        and len(op.results) == 1
        and _is_rank4(op.results[0])
        and all(isinstance(v.type, TensorType) for v in op.operands)
    )


def _is_concat(op: Operation) -> TypeGuard[graph.ConcatOp]:
    """A `graph.concat` of rank-4 tensors."""
    return isinstance(op, graph.ConcatOp) and _is_rank4(op.result)


def _is_window(op: Operation) -> bool:
    """A rank-4 `graph.pool` or `graph.pad`: windows over NCHW's H and W."""
    return (
        isinstance(op, graph.PoolOp | graph.PadOp)
        and len(op.results) == 1
        and _is_rank4(op.results[0])
    )


@dataclass
class _Layout:
    """The rewrite of one function body, op by op in block order."""

    block: Block
    channels_last: set[SSAValue] = field(default_factory=set[SSAValue])
    """Values that are channels-last at run time: results of torch ops (convolutions,
    pooling) and the arguments a call passes so (`channels_last_args`)."""
    wanted: set[SSAValue] = field(default_factory=set[SSAValue])
    """Results of elementwise ops that a convolution reads: made NHWC whatever their operands."""
    created: list[Operation] = field(default_factory=list[Operation])
    _cache: dict[tuple[str, SSAValue], SSAValue] = field(default_factory=dict)

    # -- values ------------------------------------------------------------------------------

    def _insert(self, op: Operation, where: InsertPoint) -> SSAValue:
        Rewriter.insert_op(op, where)
        self.created.append(op)
        return op.results[0]

    def _cached(self, key: str, value: SSAValue, make: Callable[[], SSAValue]) -> SSAValue:
        found = self._cache.get((key, value))
        if found is None:
            found = self._cache[(key, value)] = make()
        return found

    def _after_definition(self, value: SSAValue) -> InsertPoint:
        owner = value.owner
        if isinstance(owner, Operation):
            return InsertPoint.after(owner)
        assert isinstance(owner, Block)
        return InsertPoint.at_start(owner)

    def is_nhwc(self, value: SSAValue) -> bool:
        """`value` (logically NCHW) lives in NHWC memory, in a way that matters."""
        if not _is_rank4(value) or not layouts_differ(graph.dims_of(value)):
            return False
        return value in self.channels_last or twin_of(value) is not None

    def nhwc(self, value: SSAValue, before: Operation) -> SSAValue:
        """`value` as an NHWC tensor (rank <= 4 operands of an elementwise op: smaller ones are
        aligned to rank 4 first, as broadcasting would)."""
        twin = twin_of(value) if _is_rank4(value) else None
        if twin is not None:
            return twin
        if value in self.channels_last:
            return self.nhwc_view(value)
        shape = graph.shape_of(value)
        if not shape:
            return value
        return self._cached("convert", value, lambda: self._convert(value, before))

    def _convert(self, value: SSAValue, before: Operation) -> SSAValue:
        dims = graph.dims_of(value)
        aligned = (1,) * (4 - len(dims)) + dims
        where = InsertPoint.before(before)
        if moves_only_unit_dims(aligned, TO_NHWC):
            return self._insert(graph.ReshapeOp(value, permuted(aligned, TO_NHWC)), where)
        if aligned != dims:
            value = self._insert(graph.ReshapeOp(value, aligned), where)
        return self._insert(graph.PermuteOp(value, TO_NHWC), where)

    def nhwc_view(self, value: SSAValue) -> SSAValue:
        """A value that is channels-last at run time (`channels_last`) as the NHWC tensor its
        memory is: torch's permute of it, a view."""
        return self._cached(
            "view",
            value,
            lambda: self._insert(torch_permute(value, TO_NHWC), self._after_definition(value)),
        )

    def nchw_read(self, value: SSAValue) -> SSAValue:
        """A value that is channels-last at run time read by a kernel: the permute of its NHWC
        view, which the kernel's loops fold (no copy by the runtime)."""

        def make() -> SSAValue:
            view = self.nhwc_view(value)
            return self._insert(graph.PermuteOp(view, TO_NCHW), self._after_definition(view))

        return self._cached("read", value, make)

    def strided(self, value: SSAValue, before: Operation, clone: bool) -> SSAValue:
        """`value` as a channels-last strided NCHW tensor for a torch op: a view of its NHWC
        value when it has one; else a channels-last copy when `clone`, else itself."""
        if value in self.channels_last:
            return value
        twin = twin_of(value) if _is_rank4(value) else None
        where = InsertPoint.before(before)
        if twin is not None:
            return self._cached(
                "strided", twin, lambda: self._insert(torch_permute(twin, TO_NCHW), where)
            )
        source = nhwc_source(value) if clone and _is_rank4(value) else None
        if source is not None:
            return self._cached("strided", value, lambda: self._view_of(source, value, where))
        if clone and _is_rank4(value):
            return self._cached(
                "clone", value, lambda: self._insert(torch_clone(value, "channels_last"), where)
            )
        return value

    def _view_of(self, source: SSAValue, value: SSAValue, where: InsertPoint) -> SSAValue:
        """`value`, which a chain of views makes from `source` with NHWC memory order, as
        `permute(reshape(source, [N, H, W, C]), TO_NCHW)` run by torch: a view, no copy."""
        shape = permuted(graph.shape_of(value), TO_NHWC)
        nhwc = self._insert(graph.ReshapeOp(source, shape), where)
        return self._insert(torch_permute(nhwc, TO_NCHW), where)

    def contiguous(self, value: SSAValue, before: Operation) -> SSAValue:
        """`value` as a contiguous NCHW tensor for a torch op that may need one (`aten.view`
        does): a copy where it lives in NHWC memory."""
        if not self.is_nhwc(value):
            return value
        where = InsertPoint.before(before)
        return self._cached(
            "contiguous",
            value,
            lambda: self._insert(torch_clone(value, "contiguous_format"), where),
        )

    # -- ops ---------------------------------------------------------------------------------

    def run(self) -> None:
        dead = {op for op in self.block.ops if _is_removable(op)}
        self.channels_last.update(channels_last_args(self.block))
        for conv in convolutions(self.block):
            source = conv.op.inputs[conv.input_index]
            owner = source.owner
            if isinstance(owner, Operation) and (
                _is_elementwise(owner) or _is_window(owner) or _is_concat(owner)
            ):
                self.wanted.add(source)
        for op in list(self.block.ops):
            if isinstance(op, func.ReturnOp):
                continue
            if kind_of(op) == Kind.EXTERN:
                self.extern(op)
            elif _is_elementwise(op):
                self.elementwise(op)
            elif isinstance(op, graph.ReduceOp) and self.is_nhwc(op.input):
                self.reduction(op)
            elif isinstance(op, graph.PermuteOp) and self.is_nhwc(op.input):
                self.permute(op)
            elif _is_concat(op) and (
                op.result in self.wanted or any(self.is_nhwc(v) for v in op.operands)
            ):
                self.concat(op)
            elif _is_window(op) and (
                op.results[0] in self.wanted or any(self.is_nhwc(v) for v in op.operands)
            ):
                self.windowed(op)
            else:
                self.other(op)
        self.return_channels_last()
        self.cleanup(dead)

    def return_channels_last(self) -> None:
        """Each result that eager returns in channels-last memory (`channels_last_results`)
        and that lives in NHWC memory here, returned as its NHWC value's channels-last view
        (`torch_permute`), which has eager's strides: the last kernel writes it NHWC and the
        runtime copies nothing."""
        ret = self.block.last_op
        if not isinstance(ret, func.ReturnOp):
            return
        operands = list(ret.operands)
        where = InsertPoint.before(ret)
        for k in channels_last_results(self.block):
            twin = twin_of(operands[k]) if k < len(operands) else None
            if twin is not None:
                operands[k] = self._cached("returned", twin, self._returned(twin, where))
        ret.operands = operands

    def _returned(self, twin: SSAValue, where: InsertPoint) -> Callable[[], SSAValue]:
        return lambda: self._insert(torch_permute(twin, TO_NCHW), where)

    def extern(self, op: Operation) -> None:
        target = op.target.data if isinstance(op, graph.TorchCallOp) else op.name
        conv = Convolution.of(op)
        operands = list(op.operands)
        had_nhwc = False
        for i, v in enumerate(operands):
            if not _is_rank4(v):
                continue
            had_nhwc |= self.is_nhwc(v)
            if conv is not None and i == conv.input_index:
                operands[i] = self.strided(v, op, clone=True)
            elif target in STRIDE_AGNOSTIC or not isinstance(op, graph.TorchCallOp):
                operands[i] = self.strided(v, op, clone=False)
            else:
                operands[i] = self.contiguous(v, op)
        op.operands = operands
        # A pool's or upsample's result that the importer typed in torch's memory order
        # (`orders`, where eager's input was channels-last) is typed [N, H, W, C] already,
        # contiguous, and read back through the importer's permute: no NCHW-typed result.
        in_place = isinstance(op, graph.TorchCallOp) and op.orders is not None
        if conv is not None or (target in KEEPS_CHANNELS_LAST and had_nhwc and not in_place):
            self.channels_last.update(r for r in op.results if _is_rank4(r))

    def elementwise(self, op: Operation) -> None:
        shape = graph.shape_of(op.results[0])
        full = [v for v in op.operands if graph.shape_of(v) == shape]
        if not (op.results[0] in self.wanted or any(self.is_nhwc(v) for v in full)):
            self.other(op)
            return
        operands = [self.nhwc(v, op) for v in op.operands]
        dims = permuted(graph.dims_of(op.results[0]), TO_NHWC)
        result = graph.tensor_of(graph.dtype_of(op.results[0]), dims)
        new = type(op).create(
            operands=operands,
            result_types=[result],
            properties=dict(op.properties),
            attributes=dict(op.attributes),
        )
        self._replace(op, new, TO_NCHW)

    def reduction(self, op: graph.ReduceOp) -> None:
        dims = sorted(TO_NCHW[d] for d in op.reduce_dims)
        source = self.nhwc(op.input, op)
        kept = [d for d in TO_NHWC if d not in op.reduce_dims]
        shape = graph.reduced_shape(graph.dims_of(source), dims, op.keeps_dims)
        new = type(op).create(
            operands=[source],
            result_types=[graph.tensor_of(graph.dtype_of(op.result), shape)],
            properties={**op.properties, "dims": DenseArrayBase.from_list(i64, dims)},
            attributes=dict(op.attributes),
        )
        if op.keeps_dims:
            self._replace(op, new, TO_NCHW)
        else:  # the dims it keeps are in NHWC order: put them back in NCHW order
            self._replace(op, new, tuple(kept.index(d) for d in sorted(kept)))

    def permute(self, op: graph.PermuteOp) -> None:
        source = self.nhwc(op.input, op)
        perm = compose(TO_NCHW, op.permutation)
        if is_identity(perm):
            op.result.replace_all_uses_with(source)
            Rewriter.erase_op(op)
            return
        self._replace(op, graph.PermuteOp(source, perm), None)

    def concat(self, op: graph.ConcatOp) -> None:
        """A concatenation of NCHW values, one of them in NHWC memory (DenseNet's features)
        or read by a convolution: it concatenates their NHWC values along the NHWC position of
        its dim, so that its kernel reads and writes NHWC memory."""
        operands = [self.nhwc(v, op) for v in op.operands]
        size = graph.dims_of(op.result)[op.axis]
        self._replace(op, graph.ConcatOp(operands, TO_NHWC.index(op.axis), size), TO_NCHW)

    def windowed(self, op: Operation) -> None:
        """A pool or pad (over NCHW's trailing dims) of NHWC memory, or one a convolution
        reads: it reads its NCHW operand as it is (the kernel's loops fold the permute) and its
        result is written in NHWC memory."""
        self.other(op)
        result = self._insert(op.clone(), InsertPoint.before(op))
        self._replace(op, graph.PermuteOp(result, TO_NHWC), TO_NCHW)

    def other(self, op: Operation) -> None:
        """An op that reads NCHW: a channels-last torch result is read through its view."""
        if op.name.startswith("graph."):
            op.operands = [self.nchw_read(v) if v in self.channels_last else v for v in op.operands]

    def _replace(self, op: Operation, new: Operation, back: Sequence[int] | None) -> None:
        """`new` in place of `op`, read through `permute(new, back)` where `op` was."""
        result = self._insert(new, InsertPoint.before(op))
        if back is not None and not is_identity(back):
            result = self._insert(graph.PermuteOp(result, back), InsertPoint.before(op))
        op.results[0].replace_all_uses_with(result)
        Rewriter.erase_op(op)

    # -- cleanup -----------------------------------------------------------------------------

    def cleanup(self, dead: set[Operation]) -> None:
        """Permutes of permutes composed, permutes of unit dims as reshapes, reshapes of
        reshapes folded (a parameter's `[C] -> [C, 1, 1] -> [1, 1, 1, C]` is one view), and the
        ops this rewrite left unused erased (not those `dead` before it)."""
        for op in list(self.created):
            if op.parent is None or not isinstance(op, graph.PermuteOp):
                continue
            inner = op.input.owner
            if isinstance(inner, graph.PermuteOp):
                perm = compose(inner.permutation, op.permutation)
                if is_identity(perm):
                    op.result.replace_all_uses_with(inner.input)
                    continue
            if moves_only_unit_dims(graph.shape_of(op.input), op.permutation):
                reshape = graph.ReshapeOp(op.input, graph.shape_of(op.result))
                Rewriter.replace_op(op, reshape)
                self.created.append(reshape)
        ours = {id(op) for op in self.created}
        for op in list(self.block.ops):
            if not isinstance(op, graph.ReshapeOp):
                continue
            inner = op.input.owner
            if isinstance(inner, graph.ReshapeOp) and (id(op) in ours or id(inner) in ours):
                op.operands = [inner.input]
                if not inner.result.uses:
                    Rewriter.erase_op(inner)
        changed = True
        while changed:
            changed = False
            for op in reversed(list(self.block.ops)):
                if _is_removable(op) and op not in dead:
                    Rewriter.erase_op(op)
                    changed = True


def _is_removable(op: Operation) -> bool:
    """A pure graph op (not a torch call) whose results nobody reads."""
    return (
        op.name.startswith("graph.")
        and not isinstance(op, graph.TorchCallOp)
        and not any(r.uses for r in op.results)
    ) or (
        isinstance(op, graph.TorchCallOp)
        and op.target.data in ("aten.permute.default", "aten.clone.default")
        and not op.outputs[0].uses
    )


@dataclass(frozen=True)
class ChannelsLastPass(ModulePass):
    """Keep the 4-D activations between 2-D convolutions in NHWC memory.

    Options: `force` (rewrite every function with a 2-D convolution, without weighing the
    convolutions' speed-up as Inductor's `decide_layout_opt` does) and `target` (`cpu` or
    `cuda`, whose verdict `layout_verdict` gives). `xfuse.compile` runs this pass after
    `decompose` where its `channels_last` option says so, its target the compile's device."""

    name = "channels-last"

    force: bool = False
    target: str = "cuda"
    """What the program runs on, "cpu" or "cuda" (`xfuse.compile` sets its device's)."""

    TARGET_FROM_DEVICE: ClassVar[bool] = True
    """`xfuse.pipeline.for_target` sets `target` to the compile's device."""

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(
                f"option 'target' must be one of {', '.join(TARGETS)}, found '{self.target}'"
            )

    def verdict(self, block: Block) -> str | None:
        """Why this pass leaves the function of `block` NCHW, or None when it rewrites it."""
        return layout_verdict(block, self.force, self.target)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in op.walk():
            if isinstance(f, func.FuncOp) and f.body.blocks:
                block = f.body.block
                if self.verdict(block) is None:
                    _Layout(block).run()
