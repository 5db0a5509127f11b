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


# `torch.compile(backend="xfuse")` works after `import torch, xfuse` (torch first: importing
# torch here would slow every IR-only use); `import xfuse.api` registers it in any order.
if "torch" in sys.modules:
    from xfuse.dynamo import register as _register_backend

    _register_backend()
