"""
Fallback: a unit (fusion group or lone op) that cannot be lowered or compiled runs eagerly
through the reference interpreter, with a warning naming the unit and the reason. Results stay
right; only speed is lost.
"""

from __future__ import annotations

import warnings

from xdsl.ir import Operation

from xfuse.errors import FallbackWarning
from xfuse.runtime.steps import EagerStep


def reason_of(error: BaseException) -> str:
    """The first line of an error, with its type: what the warning and the report show."""
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def fallback_step(
    op: Operation, inputs: tuple[int, ...], outputs: tuple[int, ...], label: str, reason: str
) -> EagerStep:
    """An eager step for `op`, warning once (at compile time) that `label` falls back."""
    warnings.warn(
        f"xfuse: {label} runs eagerly (not compiled): {reason}", FallbackWarning, stacklevel=2
    )
    return EagerStep(op, inputs, outputs, f"{label} (fallback)")
