"""
Help torch.export with library types it cannot trace as they are.

Hugging Face transformers' `DynamicCache` (a causal LM's `past_key_values` under its default
`use_cache=True`) holds tensors but is a pytree only on request: transformers' own
`register_dynamic_cache_export_support` registers it. And its layers start empty with
`torch.tensor([])`, which export lifts to constants that `run_decompositions` then loses
("Constant tensor lifted_tensor_0 is not in the constants dictionary"): while xfuse exports,
a layer's first update is `cat` of the states alone (what `cat` with the empty ones gives: fresh
memory, `cat`'s layout), so the kernel that computes the states writes the cache's memory.

When a compiled program returns, `unflattener` rebuilds the cache from its results with each
layer holding them as they are: transformers' own unflatten `cat`s every state onto an empty
tensor again, a copy (a kernel on CUDA) per state and call.

Transformers registers each `ModelOutput` subclass as a pytree when the class is made, but not
while torch is compiling (`torch.compiler.is_compiling()`): a model module first imported
inside a `torch.compile` trace leaves its output types unknown to torch.export ("not a known
type"). `export_support` registers those that were missed.

Only libraries already imported are touched (xfuse never imports one for a program that does
not use it).
"""

from __future__ import annotations

import contextlib
import functools
import operator
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch.utils import _pytree as pytree

_PATCH_LOCK = threading.Lock()


@contextlib.contextmanager
def export_support() -> Iterator[None]:
    """Around `torch.export.export`: the libraries' output types registered, their tracing
    quirks worked around."""
    if "transformers" not in sys.modules:
        yield
        return
    _register_transformers()
    _register_model_outputs()
    with _PATCH_LOCK, _traceable_cache_layers():
        yield


@functools.cache
def _register_transformers() -> None:
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    register_dynamic_cache_export_support()


def _register_model_outputs() -> None:
    """Every `ModelOutput` subclass made so far a pytree node, as transformers makes it one
    when the class is created outside a compile (those created inside one it skips)."""
    from transformers.utils import generic

    register = getattr(generic, "_register_model_output_pytree_node", None)
    if register is None:
        return
    stack = list(generic.ModelOutput.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls not in pytree.SUPPORTED_NODES:
            register(cls)


@contextlib.contextmanager
def _traceable_cache_layers() -> Iterator[None]:
    import torch
    from transformers.cache_utils import DynamicLayer

    original = DynamicLayer.update

    def update(self: Any, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
        if self.is_initialized:
            return original(self, key_states, value_states, *args, **kwargs)
        self.device = key_states.device
        self.keys = torch.cat([key_states], dim=-2)  # what cat with the empty ones gives
        self.values = torch.cat([value_states], dim=-2)
        self.is_initialized = True
        return self.keys, self.values

    DynamicLayer.update = update  # type: ignore[method-assign]
    try:
        yield
    finally:
        DynamicLayer.update = original  # type: ignore[method-assign]


# ---------------------------------------------------------------------------------------------
# Results -> the program's output structure
# ---------------------------------------------------------------------------------------------


def unflattener(spec: pytree.TreeSpec) -> Callable[[list[Any]], Any]:
    """Flat results -> the output structure `spec` describes: torch's `tree_unflatten`, but a
    `DynamicCache` made of plain layers is rebuilt holding the results as they are (see the
    module docstring)."""
    cache_type = _dynamic_cache_type()
    if cache_type is None or not _holds(spec, cache_type):
        return lambda leaves: pytree.tree_unflatten(leaves, spec)
    return lambda leaves: _build(spec, iter(leaves), cache_type)


def _dynamic_cache_type() -> type | None:
    module = sys.modules.get("transformers.cache_utils")
    return getattr(module, "DynamicCache", None)


def _holds(spec: pytree.TreeSpec, cls: type) -> bool:
    return spec.type is cls or any(_holds(spec.child(i), cls) for i in range(spec.num_children))


def _build(spec: pytree.TreeSpec, leaves: Iterator[Any], cache_type: type) -> Any:
    if spec.is_leaf():
        return next(leaves)
    children = [_build(spec.child(i), leaves, cache_type) for i in range(spec.num_children)]
    if spec.type is cache_type:
        cache = _dynamic_cache(cache_type, children, spec.context)
        if cache is not None:
            return cache
    return pytree.SUPPORTED_NODES[spec.type].unflatten_fn(children, spec.context)


def _dynamic_cache(cache_type: type, children: list[Any], context: Any) -> Any:
    """The cache with plain `DynamicLayer`s holding the key and value states, or None where
    the layout has other layers (sliding windows), which transformers' unflatten builds."""
    keys, layout = context
    if any(window is not None for window in layout) or list(keys) != ["key_cache", "value_cache"]:
        return None
    key_states, value_states = children
    fields = _plain_layer_fields()
    if len(key_states) != len(layout) or fields is None:
        return None
    cache = cache_type([(None, None)] * len(layout))
    for layer, k, v in zip(cache.layers, key_states, value_states, strict=True):
        _fill_layer(layer, fields, k, v)
    return cache


LAYER_FIELDS = ("keys", "values", "device", "dtype", "is_initialized")
"""What a `DynamicLayer`'s first `update` may set (transformers 5.17 sets `dtype`, 5.24 not)."""


def _fill_layer(layer: Any, fields: tuple[str, ...], keys: Any, values: Any) -> None:
    known = {
        "keys": keys,
        "values": values,
        "device": keys.device,
        "dtype": keys.dtype,
        "is_initialized": True,
    }
    for name in fields:
        setattr(layer, name, known[name])


@functools.cache
def _plain_layer_fields() -> tuple[str, ...] | None:
    """The attributes that transformers' first `update` of a `DynamicLayer` sets, which
    `_dynamic_cache` sets the same way (checked once: they differ between releases); None
    where that update sets one it does not know, or leaves the layer otherwise unlike ours."""
    import torch
    from transformers.cache_utils import DynamicLayer

    k = torch.zeros(1, 1, 2, 2)
    fresh, theirs = vars(DynamicLayer()), DynamicLayer()
    theirs.update(k, k)
    fields = tuple(n for n, v in vars(theirs).items() if n not in fresh or fresh[n] is not v)
    if not set(fields) <= set(LAYER_FIELDS):
        return None
    ours = DynamicLayer()
    _fill_layer(ours, fields, k, k)
    same = all(
        type(getattr(ours, n)) is type(getattr(theirs, n))
        and (isinstance(getattr(ours, n), torch.Tensor) or getattr(ours, n) == getattr(theirs, n))
        for n in vars(theirs)
    )
    return fields if same and sorted(vars(ours)) == sorted(vars(theirs)) else None


def picker(keys: Sequence[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """The items at `keys` of a sequence or mapping, as a tuple, in one C call where there are
    two keys or more (`operator.itemgetter`, which gives a bare value for one key and refuses
    none)."""
    if len(keys) >= 2:
        return operator.itemgetter(*keys)
    if len(keys) == 1:
        key = keys[0]
        return lambda items: (items[key],)
    return lambda items: ()
