"""xfuse: an operator-fusion compiler for PyTorch programs, built on xDSL."""

import sys
from typing import Any

from xfuse.ir.context import make_context, parse
from xfuse.pipeline import Pipeline, PipelineError, pipeline

__all__ = [
    "Pipeline",
    "PipelineError",
    "compile",
    "explain",
    "interpret",
    "make_context",
    "parse",
    "pipeline",
]

# torch loads on first use of these, so that `xfuse-opt` and IR-only users start fast.
_LAZY = {"compile": "xfuse.api", "explain": "xfuse.api", "interpret": "xfuse.interpreters.graph"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'xfuse' has no attribute '{name}'")


# `torch.compile(backend="xfuse")`. With the package's `torch_dynamo_backends` entry point
# installed, dynamo finds the backend on lookup by itself (registering too would clash); without
# it (xfuse on PYTHONPATH), `import xfuse` registers the name where torch is already imported
# (importing torch here would slow every IR-only use) and `import xfuse.dynamo` in any order.
BACKEND_NAME = "xfuse"


def dynamo_backend(gm: Any, example_inputs: list[Any], **kwargs: Any) -> Any:
    """`xfuse.dynamo.dynamo_backend`, imported on first use (registering stays light)."""
    from xfuse.dynamo import dynamo_backend as backend

    return backend(gm, example_inputs, **kwargs)


def register_backend() -> None:
    """Make `backend="xfuse"` resolve, once; a no-op where the entry point provides it."""
    from importlib.metadata import entry_points

    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if BACKEND_NAME in entry_points(group="torch_dynamo_backends").names:
        return
    if BACKEND_NAME not in _COMPILER_FNS:
        register_backend(dynamo_backend, name=BACKEND_NAME)


if "torch" in sys.modules:
    register_backend()
