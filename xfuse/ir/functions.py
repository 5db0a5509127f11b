"""Walking a module's functions."""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from xfuse.ir.names import KERNEL_ATTR


def function_bodies(module: ModuleOp) -> list[func.FuncOp]:
    """The functions of `module` that have a body (declarations left out), in order."""
    return [f for f in module.walk() if isinstance(f, func.FuncOp) and f.body.blocks]


def kernel_functions(module: ModuleOp) -> list[func.FuncOp]:
    """The module's top-level `xfuse.kernel` functions, in order."""
    return [op for op in module.ops if isinstance(op, func.FuncOp) and KERNEL_ATTR in op.attributes]
