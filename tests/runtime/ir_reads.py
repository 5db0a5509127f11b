"""Which of the IR's code a call runs: a prepared program's calls run none of it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

IR_CODE = "/xdsl/"
"""Where the code of the IR's objects (ops, attributes, types) lives: xDSL's package. (Pure
helpers on shapes, such as `graph.dims_at`, are no read of IR.)"""


def ir_functions_run(call: Callable[[], Any]) -> list[str]:
    """The functions of the IR's code (`IR_CODE`) that `call()` runs, in order."""
    seen: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if event == "call" and IR_CODE in path:
            seen.append(f"{path.rsplit('/', 1)[-1]}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen
