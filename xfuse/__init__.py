"""xfuse: an operator-fusion compiler for PyTorch programs, built on xDSL."""

from typing import Any

from xfuse.interpreter import interpret
from xfuse.ir import make_context, parse
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

_LAZY = {"compile": "xfuse.api", "explain": "xfuse.api"}


def __getattr__(name: str) -> Any:
    # The API pulls in the frontend, the runtime and torch.export: load it on first use.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'xfuse' has no attribute '{name}'")
