"""
A module's parameters and buffers, read from the module at every call (docs/contracts.md,
"Module state"): a reassigned parameter (`m.weight = nn.Parameter(...)`,
`load_state_dict(..., assign=True)`, `m.weight.data = ...`) is what the next call computes with.
Where each tensor lives is resolved once; a call reads one attribute per tensor. What a program
was compiled for (their shapes, strides, dtypes, devices, and `training`) is part of its
signature, so a change there compiles a new program.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from xfuse.errors import XfuseError

Tensor = torch.Tensor


class ModuleState:
    """The parameters and buffers of one module, by fully qualified name."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        names = [n for n, _ in module.named_parameters()] + [n for n, _ in module.named_buffers()]
        self.names = tuple(dict.fromkeys(names))
        self._slots = tuple(_owner(module, name) for name in self.names)

    def tensors(self) -> list[Tensor]:
        values = [getattr(owner, attr) for owner, attr in self._slots]
        for i, value in enumerate(values):
            if not isinstance(value, Tensor):
                name = self.names[i]
                raise XfuseError(
                    f"module state '{name}' is now a {type(value).__name__}, not a tensor"
                )
        return values

    def key(self, tensors: Sequence[Tensor]) -> tuple[object, ...]:
        """What a program depends on: `training`, and each tensor's layout, dtype and device."""
        layouts = tuple([(t.shape, t.stride(), t.dtype, t.device) for t in tensors])
        return (self.module.training, layouts)


def _owner(module: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    path, _, attr = name.rpartition(".")
    return (module.get_submodule(path) if path else module), attr
