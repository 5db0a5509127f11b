"""xfuse: an operator-fusion compiler for PyTorch programs, built on xDSL."""

import importlib
import sys
from typing import Any

from xfuse.ir.context import make_context, parse
from xfuse.lazy import submodule_access
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

# Every submodule and subpackage (`xfuse.frontend`, `xfuse.api`, ...) is an attribute after
# `import xfuse`, imported on first access: the docs' dotted names work while `import xfuse`
# itself stays light.
_submodule, _dir = submodule_access(__name__, __path__)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    return _submodule(name)


def __dir__() -> list[str]:
    return sorted({*_dir(), *_LAZY})


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
