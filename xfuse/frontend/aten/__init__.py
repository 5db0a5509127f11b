"""
The aten → graph conversions, as a table from `str(OpOverload)` to a converter.

A converter gets the lowering state, the FX node and its arguments bound by schema name; it
emits graph ops and returns the node's value(s), or None to leave the node to `graph.torch_call`.
Each converter produces exactly the type in `node.meta["val"]`: torch's dtype promotion is read
from there and operands are cast to it.

The converters live in one module per family of ops (`elementwise`, `tensors`, `layout`,
`indexing`, `reductions`, `windows`, `externs`, `composites`; shared helpers in `common`); each
gives its `OWN_CONVERTERS` (op class -> converter, for the ops outside the unary, binary,
comparison and reduce families) and its `FORMULAS` (aten ops that are formulas of graph ops).
This package builds the table from them and the ops' `aten` facts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch.fx
from xdsl.ir import Operation

from xfuse.dialects import graph
from xfuse.dialects.graph import PAD_MODES
from xfuse.frontend.aten import (
    composites,
    elementwise,
    externs,
    indexing,
    layout,
    reductions,
    tensors,
    windows,
)
from xfuse.frontend.aten.common import Args, Converter
from xfuse.frontend.aten.elementwise import _binary, _comparison, _unary
from xfuse.frontend.aten.externs import string_padding
from xfuse.frontend.aten.indexing import (
    SCATTER_CONVERTERS,
    SCATTER_KEPT_COMPOSITES,
    SCATTER_REDUCTIONS,
    SEARCH_LIMIT,
)
from xfuse.frontend.aten.reductions import SCAN_CONVERTERS, _reduce
from xfuse.frontend.aten.tensors import (
    MAY_RETURN_INPUT,
    NEW_TENSOR_COMPOSITES,
    _adds_to_unseen_tensor,
)
from xfuse.frontend.aten.windows import POOL_CONVERTERS, POOL_KEPT_COMPOSITES
from xfuse.frontend.attention import SDPA
from xfuse.frontend.builder import bind


def _family_converter(op: type[Operation]) -> Converter | None:
    """The converter of an op's family: its aten overloads map one to one to it."""
    if issubclass(op, graph.UnaryOp):
        return _unary(op)
    if issubclass(op, graph.ComparisonOp):
        return _comparison(op)
    if issubclass(op, graph.BinaryOp):
        return _binary(op)
    if issubclass(op, graph.ReduceOp):
        return _reduce(op)
    return None


OWN_CONVERTERS: dict[type[Operation], Converter] = {
    **elementwise.OWN_CONVERTERS,
    **layout.OWN_CONVERTERS,
    **indexing.OWN_CONVERTERS,
    **reductions.OWN_CONVERTERS,
    **windows.OWN_CONVERTERS,
    **externs.OWN_CONVERTERS,
    **composites.OWN_CONVERTERS,
}
"""The converters of ops outside the unary, binary, comparison and reduce families, for the
overloads in their `aten` facts."""


def _fact_converter(op: type[Operation]) -> Converter | None:
    """The converter a structural op declares in its `convert` fact, given the node's
    arguments."""
    convert = graph.op_facts(op).convert
    if convert is None:
        return None
    return lambda lw, node, a: convert(lw, a)


def op_converters(ops: Iterable[type[Operation]]) -> dict[str, Converter]:
    """`str(OpOverload)` -> converter for every overload one of `ops` declares in its `aten`
    fact (`xfuse.dialects.facts`)."""
    table: dict[str, Converter] = {}
    for op in ops:
        overloads = graph.op_facts(op).aten
        if not overloads:
            continue
        convert = OWN_CONVERTERS.get(op) or _fact_converter(op) or _family_converter(op)
        if convert is None:
            raise ValueError(f"'{op.name}' declares aten overloads but has no converter")
        table.update(dict.fromkeys(overloads, convert))
    return table


# The ops' own overloads, then the aten ops that are formulas of graph ops.
CONVERTERS: dict[str, Converter] = {
    **op_converters(graph.Graph.operations),
    **elementwise.FORMULAS,
    **tensors.FORMULAS,
    **layout.FORMULAS,
    **indexing.FORMULAS,
    **reductions.FORMULAS,
    **windows.FORMULAS,
    **externs.FORMULAS,
    **composites.FORMULAS,
}

# Nodes without a value that check what the import already holds: tensor metadata export
# guarantees, and asserts of input sizes, which a symbolic import reads from the shape env as
# conditions of its size table (`SizeSymbols.add_conditions`).
SKIPPED: frozenset[str] = frozenset(
    {
        "aten._assert_tensor_metadata.default",
        "aten._assert_scalar.default",
        "aten.sym_constrain_range_for_size.default",
    }
)

# Composite ops whose decompositions the importer keeps out of `run_decompositions`: they
# arrive whole and become the graph composite ops above.
KEPT_COMPOSITES: tuple[str, ...] = (
    "aten.linear.default",
    "aten.softmax.int",
    "aten.log_softmax.int",
    "aten.layer_norm.default",
    "aten.rms_norm.default",
    "aten.silu.default",
    "aten.gelu.default",
    "aten.var.dim",
    "aten.var.correction",
    "aten.var.default",
    "aten.hardtanh.default",
    SDPA,  # an extern: torch picks the fused kernel for the device (xfuse/frontend/attention.py)
    "aten.roll.default",  # a graph.roll, not index_select
    *POOL_KEPT_COMPOSITES,
    *SCATTER_KEPT_COMPOSITES,  # their own index checks
)

# Ops of the table that a program is imported with, as torch.export gives them, only where the
# check holds of their node; a program with a node that fails it is decomposed first, as one
# with an unmapped op is (`importer.needs_decomposition`).
CONVERTED_WHEN: dict[str, Callable[[torch.fx.Node], bool]] = {
    "aten.batch_norm.default": lambda node: not bind(node)["training"],
    "aten.pad.default": lambda node: bind(node)["mode"] in PAD_MODES,
    "aten.add_.Tensor": _adds_to_unseen_tensor,
    "aten.conv2d.padding": lambda node: string_padding(bind(node)) is not None,
}

__all__ = [
    "CONVERTED_WHEN",
    "CONVERTERS",
    "KEPT_COMPOSITES",
    "MAY_RETURN_INPUT",
    "NEW_TENSOR_COMPOSITES",
    "OWN_CONVERTERS",
    "PAD_MODES",
    "POOL_CONVERTERS",
    "POOL_KEPT_COMPOSITES",
    "SCAN_CONVERTERS",
    "SCATTER_CONVERTERS",
    "SCATTER_KEPT_COMPOSITES",
    "SCATTER_REDUCTIONS",
    "SEARCH_LIMIT",
    "SKIPPED",
    "Args",
    "Converter",
    "op_converters",
]
