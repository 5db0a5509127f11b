"""Helpers for testing xfuse: random `graph` programs (`random_graph`) for property tests."""

from xfuse.testing.random_graph import RandomProgram, programs, random_program

__all__ = ["RandomProgram", "programs", "random_program"]
