"""Program text: the statements of a random torch program, and its source."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

Tensor = torch.Tensor

MAX_MAGNITUDE = 1e3
"""Values a program computes stay within this (keeps f32 comparisons meaningful)."""
MAX_NUMEL = 32768
"""Elements of any one value (keeps compilation and the loop interpreter quick)."""
DIMS = (1, 1, 2, 3, 4, 5, 6, 8, 8, 16, 1, 2, 3, 4, 8, 17, 33, 64)
RMSE_TOLERANCE = "rmse"
STRICT_TOLERANCE = "strict"

# ---------------------------------------------------------------------------------------------
# Program text
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputSpec:
    """One input of a program: how `make_inputs` builds it."""

    name: str
    shape: tuple[int, ...]
    kind: str = "normal"
    """normal | positive | int | bool"""
    layout: str = "contiguous"
    """contiguous | transposed | expanded | strided"""

    def expression(self) -> str:
        base = self._base_shape()
        make = _make_expression(self.kind, base)
        if self.layout == "transposed":
            order = tuple(range(len(self.shape) - 1, -1, -1))
            return f"{make}.permute{order}"
        if self.layout == "expanded":
            return f"{make}.expand{self.shape}"
        if self.layout == "strided":
            return f"{make}[..., ::2]"
        return make

    def _base_shape(self) -> tuple[int, ...]:
        if self.layout == "transposed":
            return tuple(reversed(self.shape))
        if self.layout == "expanded":
            return tuple(1 if i == self._expanded_dim() else d for i, d in enumerate(self.shape))
        if self.layout == "strided":
            return (*self.shape[:-1], 2 * self.shape[-1])
        return self.shape

    def _expanded_dim(self) -> int:
        return max(range(len(self.shape)), key=lambda i: self.shape[i])


def _make_expression(kind: str, shape: tuple[int, ...]) -> str:
    dims = repr(shape)
    if kind == "positive":
        return f"(torch.rand({dims}, generator=g) * 1.5 + 0.5)"
    if kind == "int":
        return f"torch.randint(-4, 5, {dims}, generator=g, dtype=torch.int32)"
    if kind == "bool":
        return f"(torch.randn({dims}, generator=g) > 0)"
    return f"torch.randn({dims}, generator=g)"


@dataclass
class FuzzProgram:
    """A generated program: its inputs, body statements and outputs; `source` is the text."""

    seed: int
    inputs: list[InputSpec]
    body: list[str]
    outputs: list[str]
    tolerance: str = STRICT_TOLERANCE
    scale: float = 1.0
    """The largest magnitude of any value the program computes (sizes the RMSE epsilon)."""
    ops: list[str] = field(default_factory=list[str])
    """The kind of each statement (e.g. "unary:exp", "inplace:add_"), for statistics."""

    @property
    def source(self) -> str:
        return program_source(
            self.seed, self.inputs, self.body, self.outputs, self.tolerance, self.scale
        )


def program_source(
    seed: int,
    inputs: Sequence[InputSpec],
    body: Sequence[str],
    outputs: Sequence[str],
    tolerance: str,
    scale: float = 1.0,
) -> str:
    params = ", ".join(i.name for i in inputs)
    lines = [
        "import torch",
        "import torch.nn.functional as F",
        "",
        f'TOLERANCE = "{tolerance}"',
        f"SCALE = {scale:.4g}",
        "",
        "",
        f"def program({params}):",
        *(f"    {s}" for s in body),
        f"    return ({''.join(o + ', ' for o in outputs)})",
        "",
        "",
        "def make_inputs():",
        f"    g = torch.Generator().manual_seed({seed})",
        *(f"    {i.name} = {i.expression()}" for i in inputs),
        f"    return ({''.join(i.name + ', ' for i in inputs)})",
        "",
    ]
    return "\n".join(lines)


def load_source(source: str, name: str = "<fuzz program>") -> dict[str, Any]:
    """Execute program source; its namespace (`program`, `make_inputs`, `TOLERANCE`)."""
    namespace: dict[str, Any] = {"__name__": "xfuse_fuzz_program"}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102 - running generated programs is the point
    return namespace
