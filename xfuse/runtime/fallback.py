"""
Fallback: a unit (fusion group or lone op) that cannot be lowered or compiled runs eagerly
through the reference interpreter, with a warning naming the unit and the reason. Results stay
right; only speed is lost. In strict mode (`fallback="error"`, or `XFUSE_STRICT=1`) it is an
`EagerFallbackError` instead.
"""

from __future__ import annotations

import os
import warnings
from typing import Literal, cast, get_args

from xdsl.ir import Operation

from xfuse.errors import EagerFallbackError, FallbackWarning, InvalidArgumentError
from xfuse.runtime.steps import EagerStep

FallbackMode = Literal["eager", "error"]
"""What happens to a graph or group that cannot be compiled: it runs eagerly with a warning, or
it is an error."""
DEFAULT_FALLBACK: FallbackMode = "eager"
STRICT_ENV = "XFUSE_STRICT"
"""Set to anything but 0 (or empty), it makes the default `"error"`."""


def fallback_mode(requested: str | None = None) -> FallbackMode:
    """The mode asked for, or (None) the default: `"error"` under `XFUSE_STRICT=1`."""
    if requested is None:
        strict = os.environ.get(STRICT_ENV, "0") not in ("", "0")
        return "error" if strict else DEFAULT_FALLBACK
    if requested not in get_args(FallbackMode):
        raise InvalidArgumentError(
            f"fallback must be one of {get_args(FallbackMode)}, got {requested!r}"
        )
    return cast(FallbackMode, requested)


def eager_or_error(what: str, reason: str, mode: FallbackMode) -> None:
    """Warn that `what` runs eagerly, or (strict mode) raise `EagerFallbackError`."""
    if mode == "error":
        raise EagerFallbackError(f"xfuse: {what} would run eagerly (fallback='error'): {reason}")
    warnings.warn(
        f"xfuse: {what} runs eagerly (not compiled): {reason}", FallbackWarning, stacklevel=3
    )


def reason_of(error: BaseException) -> str:
    """The first line of an error, with its type: what the warning and the report show."""
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def fallback_step(
    op: Operation,
    inputs: tuple[int, ...],
    outputs: tuple[int, ...],
    label: str,
    reason: str,
    mode: FallbackMode = DEFAULT_FALLBACK,
) -> EagerStep:
    """An eager step for `op`, warning once (at compile time) that `label` falls back; in
    strict mode, an `EagerFallbackError`."""
    eager_or_error(label, reason, mode)
    return EagerStep(op, inputs, outputs, f"{label} (fallback)")
