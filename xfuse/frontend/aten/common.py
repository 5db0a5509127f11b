"""What every converter module shares: the converter signature and small argument helpers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch.fx
from xdsl.ir import SSAValue

from xfuse.dialects import graph
from xfuse.frontend.builder import ImportBuilder, Value

Args = dict[str, Any]


Converter = Callable[[ImportBuilder, torch.fx.Node, Args], Value]


def _rank(value: SSAValue) -> int:
    return len(graph.shape_of(value))


def _norm_dims(dim: Any, rank: int) -> list[int]:
    """A torch `dim` argument (None, int or list; [] or None = all) as sorted dims >= 0."""
    if rank == 0:
        return []
    if dim is None or (isinstance(dim, list | tuple) and not dim):
        return list(range(rank))
    dims = [dim] if isinstance(dim, int) else list(dim)  # pyright: ignore[reportUnknownArgumentType]
    return sorted({d % rank for d in dims})


def _is_number(x: Any) -> bool:
    return isinstance(x, bool | int | float)


def _each(names: Sequence[str], converter: Converter) -> dict[str, Converter]:
    return dict.fromkeys(names, converter)
