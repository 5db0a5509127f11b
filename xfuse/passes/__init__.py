"""
xfuse's passes, one module each. Every `ModulePass` subclass defined in a module of this
package is registered under its `name`; `available_passes()` is what `xfuse-opt` and
`xfuse.pipeline` use.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from functools import cache
from typing import Any

from xdsl.passes import ModulePass


@cache
def _discover() -> dict[str, type[ModulePass]]:
    found: dict[str, type[ModulePass]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(cls, ModulePass)
                and cls.__module__ == module.__name__
                and not inspect.isabstract(cls)
                and isinstance(getattr(cls, "name", None), str)
            ):
                found[cls.name] = cls
    return found


def _factory(cls: type[ModulePass]) -> Callable[[], type[ModulePass]]:
    return lambda: cls


def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Pass name -> factory of the pass class (the form xDSL's tools expect)."""
    return {name: _factory(cls) for name, cls in _discover().items()}


def __getattr__(attr: str) -> Any:
    # `from xfuse.passes import FuseGreedyPass` works for every registered pass class.
    # A submodule asked for by name (`from xfuse.passes import scalar_ops`, perhaps while
    # another pass module is still importing) is imported directly: running discovery then
    # would cache a registry without the half-imported module's passes.
    if any(info.name == attr for info in pkgutil.iter_modules(__path__)):
        return importlib.import_module(f"{__name__}.{attr}")
    for cls in _discover().values():
        if cls.__name__ == attr:
            return cls
    raise AttributeError(f"module 'xfuse.passes' has no attribute '{attr}'")
