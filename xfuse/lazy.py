"""Lazy submodule access, as torch does: after `import xfuse`, `xfuse.frontend.import_module`
and `xfuse.interpreters.graph.bind_arguments` work, each module imported on first access.

A package opts in with

    __getattr__, __dir__ = submodule_access(__name__, __path__)

This module imports nothing of xfuse, so every package may use it.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterable
from types import ModuleType


def submodules(path: Iterable[str]) -> frozenset[str]:
    """The public modules and subpackages in a package's `__path__`."""
    return frozenset(info.name for info in pkgutil.iter_modules(path) if info.name[0] != "_")


def submodule_access(
    package: str, path: Iterable[str]
) -> tuple[Callable[[str], ModuleType], Callable[[], list[str]]]:
    """A package's module `__getattr__` (a submodule's name imports it) and `__dir__`."""
    names = submodules(path)

    def __getattr__(name: str) -> ModuleType:
        if name in names:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module '{package}' has no attribute '{name}'")

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
