"""
The `fusion` dialect: groups of `graph` ops that become one kernel.

A `fusion.group` is isolated from above: its operands are the group's inputs (the entry block's
arguments), its results are the values its `fusion.yield` returns. `kind` says what the group
computes (the strongest op kind inside: "elementwise", "injective", "reduction", ...), `rule`
says which pass and rule formed it; passes may add more provenance as discardable attributes
(`fusion.score`, `fusion.decisions`).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import StringAttr, SymbolRefAttr
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    lazy_traits_def,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator, SingleBlockImplicitTerminator
from xdsl.utils.exceptions import VerifyException


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Returns a group's outputs. `fusion.yield %a, %b : tensor<4xf32>, tensor<4xf32>`"""

    name = "fusion.yield"
    values = var_operand_def()
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(GroupOp)))
    assembly_format = "($values^ `:` type($values))? attr-dict"

    def __init__(self, *values: SSAValue | Operation):
        super().__init__(operands=[[SSAValue.get(v) for v in values]])


def _expect_types(what: str, expected: list[Attribute], found: list[Attribute]) -> None:
    if expected != found:
        raise VerifyException(
            f"expected {what} ({', '.join(map(str, expected))}), "
            f"found ({', '.join(map(str, found))})"
        )


@irdl_op_definition
class GroupOp(IRDLOperation):
    """A fused group of ops, run as one kernel.
    `%r = fusion.group (%x) kind = "elementwise" rule = "fuse-greedy" : (tensor<4xf32>) -> tensor<4xf32> { ^bb0(%a: tensor<4xf32>): ... fusion.yield %b : tensor<4xf32> }`"""

    name = "fusion.group"
    inputs = var_operand_def()
    outputs = var_result_def()
    kind = prop_def(StringAttr)
    rule = prop_def(StringAttr)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), SingleBlockImplicitTerminator(YieldOp))
    assembly_format = (
        "`(` $inputs `)` `kind` `=` $kind `rule` `=` $rule attr-dict `:` "
        "functional-type($inputs, $outputs) $body"
    )

    def __init__(
        self,
        inputs: Sequence[SSAValue | Operation],
        output_types: Sequence[Attribute],
        body: Region,
        kind: str,
        rule: str,
    ):
        super().__init__(
            operands=[[SSAValue.get(v) for v in inputs]],
            result_types=[list(output_types)],
            regions=[body],
            properties={"kind": StringAttr(kind), "rule": StringAttr(rule)},
        )

    @property
    def block(self) -> Block:
        return self.body.block

    @property
    def yield_op(self) -> YieldOp:
        last = self.block.last_op
        assert isinstance(last, YieldOp)
        return last

    @property
    def body_ops(self) -> list[Operation]:
        """The ops the group computes: its block's, without the `fusion.yield`."""
        return [op for op in self.block.ops if not isinstance(op, YieldOp)]

    def verify_(self) -> None:
        block = self.body.block
        arg_types = [a.type for a in block.args]
        in_types = [v.type for v in self.inputs]
        _expect_types("the block arguments to have the input types", in_types, arg_types)
        last = block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException("expected the body to end with fusion.yield")
        yield_types = [v.type for v in last.values]
        out_types = [r.type for r in self.results]
        _expect_types("fusion.yield to return the output types", out_types, yield_types)
        if not self.results:
            raise VerifyException("expected at least one output")


@irdl_op_definition
class LaunchOp(IRDLOperation):
    """Runs the kernel function `callee` (made by `lower-to-loops`) on tensors: the runtime
    allocates the outputs and passes inputs then outputs as buffers.
    `%y = fusion.launch @kernel_0(%x, %w) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>`"""

    name = "fusion.launch"
    callee = prop_def(SymbolRefAttr)
    inputs = var_operand_def()
    outputs = var_result_def()
    assembly_format = "$callee `(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs)"

    def __init__(
        self,
        callee: str,
        inputs: Sequence[SSAValue | Operation],
        output_types: Sequence[Attribute],
    ):
        super().__init__(
            operands=[[SSAValue.get(v) for v in inputs]],
            result_types=[list(output_types)],
            properties={"callee": SymbolRefAttr(callee)},
        )


Fusion = Dialect("fusion", [GroupOp, YieldOp, LaunchOp], [])
