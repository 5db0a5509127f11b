"""Programs with symbolic sizes on the CPU (xfuse/runtime/symbolic.py): kernels compiled once
serve every size of a symbolic batch, outputs match eager, and sizes outside the symbols'
ranges (0 and 1 among them) are refused in one line."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim
from xdsl.dialects.builtin import ModuleOp

from xfuse.backends.cpu import CPUBackend
from xfuse.errors import SymbolicSizeError, XfuseError
from xfuse.frontend import import_module
from xfuse.frontend.importer import ImportedProgram
from xfuse.interpreters.graph import bind_arguments
from xfuse.runtime.symbolic import SymbolicProgram


class CountingBackend(CPUBackend):
    """The CPU backend, counting the kernels it compiles."""

    def __init__(self) -> None:
        super().__init__()
        self.compiled: list[str] = []

    def compile(self, module: ModuleOp, name: str) -> bytes:
        self.compiled.append(name)
        return super().compile(module, name)


class Block(torch.nn.Module):
    """An MLP with a layer norm and a softmax: externs (linear) between fused groups with
    elementwise ops and row reductions."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.l2 = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(torch.nn.functional.gelu(self.l1(x)))
        return torch.softmax(self.l2(h) * 0.5, dim=-1)


def imported(model: torch.nn.Module) -> ImportedProgram:
    return import_module(
        model, (torch.randn(5, 16),), dynamic_shapes={"x": {0: Dim("batch", min=2, max=64)}}
    )


def test_kernels_compile_once_and_match_eager_at_every_batch_size() -> None:
    torch.manual_seed(0)
    model = Block().eval()
    program = imported(model)
    backend = CountingBackend()
    compiled = SymbolicProgram(program.module, backend=backend)
    kernels = sorted(compiled.kernels)
    assert compiled.kernel_count >= 2 and sorted(backend.compiled) == kernels
    for batch in range(2, 65):
        x = torch.randn(batch, 16)
        (out,) = compiled(*bind_arguments(program.function, [x], program.params))
        with torch.no_grad():
            torch.testing.assert_close(out, model(x))
    assert sorted(backend.compiled) == kernels  # no size compiled anything again


@pytest.mark.parametrize("batch", [0, 1, 65])
def test_a_size_outside_the_range_is_refused_in_one_line(batch: int) -> None:
    program = imported(Block().eval())
    compiled = SymbolicProgram(program.module)
    x = torch.randn(batch, 16)
    with pytest.raises(SymbolicSizeError, match=r"outside its range \[2, 64\]") as e:
        compiled(*bind_arguments(program.function, [x], program.params))
    assert "\n" not in str(e.value)


def test_a_static_dim_of_another_size_is_refused() -> None:
    program = imported(Block().eval())
    compiled = SymbolicProgram(program.module)
    with pytest.raises(SymbolicSizeError, match="dim 1 is static 16, got size 12"):
        compiled(*bind_arguments(program.function, [torch.randn(4, 12)], program.params))


def test_a_static_program_is_refused() -> None:
    program = import_module(Block().eval(), (torch.randn(5, 16),))
    with pytest.raises(SymbolicSizeError, match="has none"):
        SymbolicProgram(program.module)


def test_a_group_without_a_symbolic_lowering_is_refused_in_one_line() -> None:
    program = import_module(
        lambda x: torch.cumsum(x.exp(), 1),
        (torch.randn(5, 16),),
        dynamic_shapes={"x": {0: Dim("batch", min=2, max=64)}},
    )
    with pytest.raises(
        XfuseError, match=r"cannot lower @forward_k\d+ to loops: 'graph\.\w+' on symbolic sizes"
    ) as e:
        SymbolicProgram(program.module)
    assert "\n" not in str(e.value)
