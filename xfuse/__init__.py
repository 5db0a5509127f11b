"""xfuse: an operator-fusion compiler for PyTorch programs, built on xDSL."""

from xfuse.interpreter import interpret
from xfuse.ir import make_context, parse

__all__ = ["interpret", "make_context", "parse"]
