"""
Help torch.export with library types it cannot trace as they are.

Hugging Face transformers' `DynamicCache` (a causal LM's `past_key_values` under its default
`use_cache=True`) holds tensors but is a pytree only on request: transformers' own
`register_dynamic_cache_export_support` registers it. And its layers start empty with
`torch.tensor([])`, which export lifts to constants that `run_decompositions` then loses
("Constant tensor lifted_tensor_0 is not in the constants dictionary"): while xfuse exports,
a layer's first update takes the states as they are (what `cat` with the empty ones gives).

Only libraries already imported are touched (xfuse never imports one for a program that does
not use it).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Iterator
from typing import Any

_PATCH_LOCK = threading.Lock()


@contextlib.contextmanager
def export_support() -> Iterator[None]:
    """Around `torch.export.export`: the libraries' output types registered, their tracing
    quirks worked around."""
    if "transformers" not in sys.modules:
        yield
        return
    _register_transformers()
    with _PATCH_LOCK, _traceable_cache_layers():
        yield


@functools.cache
def _register_transformers() -> None:
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    register_dynamic_cache_export_support()


@contextlib.contextmanager
def _traceable_cache_layers() -> Iterator[None]:
    from transformers.cache_utils import DynamicLayer

    original = DynamicLayer.update

    def update(self: Any, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
        if self.is_initialized:
            return original(self, key_states, value_states, *args, **kwargs)
        self.device = key_states.device
        self.keys, self.values = key_states, value_states  # what cat with empty ones gives
        self.is_initialized = True
        return self.keys, self.values

    DynamicLayer.update = update  # type: ignore[method-assign]
    try:
        yield
    finally:
        DynamicLayer.update = original  # type: ignore[method-assign]
