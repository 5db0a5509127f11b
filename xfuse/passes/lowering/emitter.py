"""
What the parts of a kernel's lowering ask of the kernel builder (`LoopEmitter`, which
`kernel_builder.KernelBuilder` implements): the scopes values are emitted in, indices and
values at an index, loop nests and stores. Windows and scans are written against it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from xdsl.dialects import scf
from xdsl.dialects.builtin import IndexType, MemRefType, i8
from xdsl.ir import Block, Operation, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from xfuse.dialects import graph
from xfuse.dialects.facts import ScalarBuilder
from xfuse.errors import CodegenError
from xfuse.passes.lowering.domains import Domain
from xfuse.passes.lowering.index_algebra import Affine, Index, LoopVar

ERROR_FLAG_TYPE = MemRefType(i8, [1])
"""The error flag of a kernel with `ERROR_FLAG_ATTR`: its last argument, zeroed by the caller,
set to 1 by an iteration that met an index outside its dim (every writer stores the same
byte, and nothing reads it before the kernel has finished)."""


LoopBody = Callable[[list[SSAValue]], list[SSAValue]]
"""The body of a loop nest: the values carried into its innermost iteration to those carried
on to the next one."""


class LoopLoweringError(CodegenError, DiagnosticException):
    """A group that one kernel cannot express: a CodegenError for the runtime (which falls
    back), a diagnostic for xfuse-opt (one line, no traceback)."""


@dataclass(eq=False)
class Scope:
    """A block being filled: the loop variables it defines, what was emitted in it (valid in
    it and in nested scopes), and the open nested op (new ops go before it)."""

    block: Block
    parent: Scope | None
    var_values: dict[int, SSAValue] = field(default_factory=dict[int, SSAValue])
    memo: dict[object, SSAValue] = field(default_factory=dict[object, SSAValue])
    barrier: bool = False
    """Values may not move out of it (an scf.if branch)."""
    root: bool = False
    """The parallel loop's body: nothing but constants goes further out."""
    anchor: Operation | None = None

    def insert(self, op: Operation) -> None:
        if self.anchor is not None:
            self.block.insert_op_before(op, self.anchor)
        else:
            self.block.add_op(op)


class LoopEmitter(ScalarBuilder, Protocol):
    """The kernel builder as windows and scans use it."""

    scope: Scope
    domain: Domain
    outputs: list[SSAValue]
    reductions: list[graph.ReduceOp]
    scans: list[graph.ScanOp]

    def error(self, reason: str) -> LoopLoweringError:
        """The error that names the kernel and `reason`."""
        ...

    def index_constant(self, value: int) -> SSAValue: ...

    def index_value(self, e: Affine) -> SSAValue:
        """The index `e`, computed in the outermost scope where its variables are known."""
        ...

    def dim_size(self, d: graph.Dim) -> Affine:
        """A dim's size as an index: a constant, or a symbol's runtime size."""
        ...

    def value_at(self, v: SSAValue, index: Index) -> SSAValue:
        """The scalar value of `v`'s element at `index`."""
        ...

    def memoized(
        self, key: object, needed: frozenset[int], pure: bool, compute: Callable[[], SSAValue]
    ) -> SSAValue:
        """`compute()` once per `key`, in the outermost scope where the loop variables
        `needed` are known (not out of an `scf.if` branch unless `pure`)."""
        ...

    def memoized_at(
        self, key: object, index: Sequence[Affine], compute: Callable[[], SSAValue]
    ) -> SSAValue:
        """`memoized` for a value computed from the positions `index` (kept in its `scf.if`
        branch where one reads an index tensor)."""
        ...

    def child_scope(
        self, block: Block, op: Operation, var_values: dict[int, SSAValue], barrier: bool = False
    ) -> AbstractContextManager[Scope]:
        """Fill `block` of `op` (already inserted in the current scope)."""
        ...

    def for_nest(
        self, loop_vars: Sequence[LoopVar], carried: list[SSAValue], body: LoopBody
    ) -> list[SSAValue]:
        """Nested `scf.for` over `loop_vars` (outer first) carrying `carried` as iter_args."""
        ...

    def store(self, v: SSAValue, output: int, index: Index) -> None:
        """Store `v`'s element at `index` into output buffer `output`."""
        ...


def emit_for(
    b: LoopEmitter,
    var: LoopVar,
    limits: tuple[SSAValue, SSAValue, SSAValue],
    carried: list[SSAValue],
    body: LoopBody,
) -> list[SSAValue]:
    """One `scf.for` of `var` over `limits` (lower, upper, step), in the current scope,
    carrying `carried` as iter_args; `body` fills it (in its own scope). Its results."""
    block = Block(arg_types=[IndexType(), *(c.type for c in carried)])
    loop = scf.ForOp(*limits, carried, block)
    b.scope.insert(loop)
    with b.child_scope(block, loop, {var.ident: block.args[0]}):
        results = body(list(block.args[1:]))
        b.scope.insert(scf.YieldOp(*results))
    return list(loop.results)
