"""
`torch.compile(model, backend="xfuse")`: the name's registration with dynamo, kept light (no
xfuse compiler import) so that `import xfuse` can make it wherever torch is already loaded.

With the package's `torch_dynamo_backends` entry point installed, dynamo finds the backend on
lookup by itself (registering as well would clash); without it (xfuse on PYTHONPATH, or a copy of
the sources), `register()` adds the name. The backend itself is `xfuse.api.dynamo_backend`.
"""

from __future__ import annotations

from typing import Any

BACKEND_NAME = "xfuse"


def backend(gm: Any, example_inputs: list[Any], **kwargs: Any) -> Any:
    """`xfuse.api.dynamo_backend`, imported on first use."""
    from xfuse.api import dynamo_backend

    return dynamo_backend(gm, example_inputs, **kwargs)


def register() -> None:
    """Make `backend="xfuse"` resolve, once; a no-op where the entry point provides it."""
    from importlib.metadata import entry_points

    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if BACKEND_NAME in entry_points(group="torch_dynamo_backends").names:
        return
    if BACKEND_NAME not in _COMPILER_FNS:
        register_backend(backend, name=BACKEND_NAME)
