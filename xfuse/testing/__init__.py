"""Helpers for testing xfuse: random `graph` programs (`random_graph`) for property tests."""

from xfuse.lazy import submodule_access
from xfuse.testing.random_graph import RandomProgram, programs, random_program

__all__ = ["RandomProgram", "programs", "random_program"]

__getattr__, __dir__ = submodule_access(__name__, __path__)
