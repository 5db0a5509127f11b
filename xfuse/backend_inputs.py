"""
What `torch.compile` hands a backend, as xfuse compiles it: dynamo's graphs and the parts
AOTAutograd cuts from them take fake tensors as example inputs, and SymInts where shapes are
dynamic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

Tensor = torch.Tensor


def real_input(t: Any) -> Any:
    """Dynamo and AOTAutograd may hand fake tensors to backends: zeros of the same sizes,
    strides, dtype and device (a program is specialised on its inputs' strides)."""
    from torch._subclasses.fake_tensor import is_fake

    if isinstance(t, Tensor) and is_fake(t):
        shape = tuple(int(d) for d in t.shape)
        strides = tuple(int(s) for s in t.stride())
        return torch.empty_strided(shape, strides, dtype=t.dtype, device=t.device).zero_()
    return t


def graph_device(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> torch.device:
    """The device a dynamo graph runs on: its first tensor input's, else its first parameter's
    or buffer's, else the CPU."""
    for t in example_inputs:
        if isinstance(t, Tensor):
            return t.device
    for t in (*gm.parameters(), *gm.buffers()):
        return t.device
    return torch.device("cpu")


def is_symbolic(value: Any) -> bool:
    """A SymInt (SymFloat, SymBool), or a tensor with a symbolic size or stride."""
    if isinstance(value, Tensor):
        return not all(isinstance(d, int) for d in (*value.shape, *value.stride()))
    return isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool)
