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
from xfuse.runtime.executor import (
    Executable,
    check_input,
    cpu_outputs,
    is_plain_input,
    run_program,
)
from xfuse.runtime.steps import BufferPool, EagerStep, KernelStep

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


SCALED = """
func.func @forward(%x: tensor<4xf32> {graph.input = "x"}, %s: tensor<f32> {graph.input = "s"}) -> tensor<4xf32> {
  %g = fusion.group (%x, %s) kind = "elementwise" rule = "test:chain" : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>, %b: tensor<f32>):
    %m = graph.mul %a, %b : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
    fusion.yield %m : tensor<4xf32>
  }
  func.return %g : tensor<4xf32>
}
"""


def test_a_gpu_programs_kernels_read_its_0d_inputs_on_its_device(tmp_path: Path) -> None:
    """A call may pass a GPU program's 0-d input as a CPU scalar (as eager takes one): which
    kernel inputs those are is decided when the program is built (`KernelStep.copied`), and
    the kernel reads a copy on the program's device."""
    cache = KernelCache(tmp_path)
    backend = ReferenceBackend()
    programs, copied = {}, {}
    for device in ("meta", "cpu"):
        compiler = ProgramCompiler(
            lambda m, n: cache.kernel(backend, m, n), lower=fake_lower_to_loops, device=device
        )
        programs[device] = compiler.compile(parse(SCALED))
        kernels = [step for step in programs[device].steps if isinstance(step, KernelStep)]
        copied[device] = [step.copied for step in kernels]
    assert copied == {"meta": [(1,)], "cpu": [()]}
    x, s = torch.empty(4, device="meta"), torch.tensor(2.0)
    (out,) = run_program(programs["meta"], [x, s], BufferPool("meta"))
    assert out.device.type == "meta"
    (kernel,) = (step.kernel for step in programs["meta"].steps if isinstance(step, KernelStep))
    assert [b.device.type for b in kernel.calls[-1]] == ["meta", "meta", "meta"]


SCALE = """
  %g = fusion.group (%x, %s) kind = "elementwise" rule = "test:chain" : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>, %b: tensor<f32>):
    %m = graph.mul %a, %b : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
    fusion.yield %m : tensor<4xf32>
  }"""
SCALAR_FIRST_ARGS = '%s: tensor<f32> {graph.input = "s"}, %x: tensor<4xf32> {graph.input = "x"}'
SCALED_BY_SCALAR_FIRST = f"""
func.func @forward({SCALAR_FIRST_ARGS}) -> tensor<4xf32> {{{SCALE}
  func.return %g : tensor<4xf32>
}}
"""
SCALAR_FIRST = f"""
func.func @forward({SCALAR_FIRST_ARGS}) -> (tensor<4xf32>, tensor<f32>) {{{SCALE}
  %h = fusion.group (%s) kind = "elementwise" rule = "test:chain" : (tensor<f32>) -> tensor<f32> {{
  ^bb0(%b: tensor<f32>):
    %n = graph.mul %b, %b : tensor<f32>, tensor<f32> -> tensor<f32>
    fusion.yield %n : tensor<f32>
  }}
  func.return %g, %h : tensor<4xf32>, tensor<f32>
}}
"""


def _executable(tmp_path: Path, source: str, device: str) -> Executable:
    cache = KernelCache(tmp_path)
    backend = ReferenceBackend()
    compiler = ProgramCompiler(
        lambda m, n: cache.kernel(backend, m, n), lower=fake_lower_to_loops, device=device
    )
    return Executable(
        compiler.compile(parse(source)),
        bind=lambda inputs, state: list(inputs),
        unflatten=lambda outs: outs,
        device=torch.device(device),
    )


def test_a_gpu_programs_buffers_live_on_its_device_whatever_its_first_input(
    tmp_path: Path,
) -> None:
    """A CPU scalar passed first makes no kernel's buffers CPU memory: outputs computed with
    a tensor on the program's device are there, as eager's."""
    executable = _executable(tmp_path, SCALED_BY_SCALAR_FIRST, "meta")
    assert executable.program.scalar_args == (0,)
    (out,) = executable.run([torch.tensor(2.0), torch.empty(4, device="meta")])
    assert out.device.type == "meta"


def test_outputs_of_cpu_scalars_alone_are_the_ones_eager_computes_on_the_cpu(
    tmp_path: Path,
) -> None:
    """Eager computes an op of CPU scalars alone on the CPU: which outputs a call makes of its
    CPU scalars alone is read from the program's results one by one (a group's results
    apart). The CPU's programs take no notice."""
    executable = _executable(tmp_path, SCALAR_FIRST, "meta")
    program = executable.program
    assert program.scalar_args == (0,)
    assert program.output_sources == (frozenset({0, 1}), frozenset({0}))
    x = torch.empty(4, device="meta")
    assert cpu_outputs(program, [torch.tensor(2.0), x]) == [1]
    assert cpu_outputs(program, [torch.tensor(2.0, device="meta"), x]) == []
    on_cpu = _executable(tmp_path, SCALAR_FIRST, "cpu")
    assert on_cpu.program.scalar_args == ()
    _, square = on_cpu.run([torch.tensor(3.0), torch.ones(4)])
    assert square.item() == 9.0


def test_a_cpu_scalar_is_a_plain_input_of_a_gpu_program() -> None:
    """A program's fast path (`is_plain_input`) takes what `check_input` takes as it is: a
    tensor on the program's device, and a CPU scalar on another device's program (the RNG
    state a training step's backward is given at every call); not a CPU tensor of more
    dimensions, nor another device's scalar on a CPU program."""
    meta, cpu = torch.device("meta"), torch.device("cpu")
    scalar, row = torch.tensor(2, dtype=torch.int64), torch.zeros(3)
    for value, device in [(scalar, meta), (torch.empty(3, device="meta"), meta), (row, cpu)]:
        assert is_plain_input(value, device)
        assert check_input("input 0", value, device) is value
    assert not is_plain_input(row, meta)
    assert not is_plain_input(torch.empty((), device="meta"), cpu)
