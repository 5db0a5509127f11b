"""Helpers of the frontend tests: import, interpret, compare with eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from xfuse import interpret
from xfuse.frontend import ImportedProgram, import_module


def op_names(imported: ImportedProgram) -> list[str]:
    return [op.name for op in imported.module.walk()]


def check_against_eager(
    fn: Callable[..., Any] | torch.nn.Module, inputs: tuple[Any, ...], **tolerance: float
) -> ImportedProgram:
    """Import `fn`, interpret it on `inputs` and compare every output with eager torch."""
    imported = import_module(fn, inputs)
    got = interpret(imported.module, imported.arguments(*inputs))
    want = fn(*inputs)
    want = list(want) if isinstance(want, tuple | list) else [want]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, equal_nan=True, **tolerance)  # pyright: ignore[reportArgumentType]
    return imported
