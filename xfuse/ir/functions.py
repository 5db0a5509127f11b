"""Walking a module's functions."""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp


def function_bodies(module: ModuleOp) -> list[func.FuncOp]:
    """The functions of `module` that have a body (declarations left out), in order."""
    return [f for f in module.walk() if isinstance(f, func.FuncOp) and f.body.blocks]
