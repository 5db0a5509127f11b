"""Stand-ins for AOTAutograd's part compiler (`xfuse.training.PartCompiler`) that the training
tests share."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from xfuse.errors import XfuseError
from xfuse.runtime.executor import CompiledProgram
from xfuse.training import PartCompiler


def refuse_the_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backward part fails to compile as a part with an op xfuse cannot lower does
    (`aten.planted_backward.default`); the forward compiles as ever."""
    real = PartCompiler.compile

    def refuse(self: PartCompiler, gm: torch.fx.GraphModule, inputs: Any) -> CompiledProgram:
        if self.part == "backward":
            raise XfuseError("no lowering for aten.planted_backward.default")
        return real(self, gm, inputs)

    monkeypatch.setattr(PartCompiler, "compile", refuse)
