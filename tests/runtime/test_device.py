"""Constants made inside a program live on the program's device: the ones the compiler folds,
and those a group that falls back to the interpreter makes as it runs (meta tensors stand in
for a GPU here; tests/models/test_zoo.py runs real models on CUDA)."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from runtime_fakes import ReferenceBackend, fake_lower_to_loops
from xdsl.dialects.builtin import ModuleOp

from xfuse.ir.context import parse
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.compiler import ProgramCompiler
from xfuse.runtime.executor import run_program
from xfuse.runtime.steps import BufferPool, EagerStep

PROGRAM = """
func.func @forward(%x: tensor<4x8xf32> {graph.input = "x"}) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %c = graph.constant dense<2.000000e+00> : tensor<4x8xf32>
  %g = fusion.group (%x) kind = "elementwise" rule = "test:chain" : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %k = graph.constant dense<3.000000e+00> : tensor<4x8xf32>
    %m = graph.mul %a, %k : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    fusion.yield %m : tensor<4x8xf32>
  }
  func.return %g, %c : tensor<4x8xf32>, tensor<4x8xf32>
}
"""


def _no_lowering(module: ModuleOp) -> None:
    raise NotImplementedError("interpreted on purpose")


def test_constants_and_fallen_back_groups_live_on_the_programs_device(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    backend = ReferenceBackend()
    compiler = ProgramCompiler(
        lambda m, n: cache.kernel(backend, m, n), lower=_no_lowering, device="meta"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = compiler.compile(parse(PROGRAM))
    assert [c.device.type for c in program.constants.values()] == ["meta"]
    assert any(isinstance(s, EagerStep) for s in program.steps)
    x = torch.empty(4, 8, device="meta")
    outs = run_program(program, [x], BufferPool("meta"))
    assert [o.device.type for o in outs] == ["meta", "meta"]


def test_constants_stay_on_the_cpu_by_default(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    compiler = ProgramCompiler(
        lambda m, n: cache.kernel(ReferenceBackend(), m, n), lower=fake_lower_to_loops
    )
    program = compiler.compile(parse(PROGRAM))
    x = torch.randn(4, 8)
    got, c = run_program(program, [x], BufferPool("cpu"))
    torch.testing.assert_close(got, 3 * x)
    torch.testing.assert_close(c, torch.full((4, 8), 2.0))
