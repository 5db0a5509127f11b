"""Tensors on another device than the program's: where eager refuses the call, the compiled
program raises eager's error (type and first line); where eager accepts it (a CPU scalar or
index it moves), a one-line `InputDeviceError` says so. Never a result computed on the wrong
device, never torch.export's fake-tensor message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import xfuse
from tests.backends.test_cuda import gpu
from xfuse.errors import EagerArgumentError, InputDeviceError
from xfuse.runtime.steps import KernelStep


def eager_error(fn: Callable[..., Any], *args: Any) -> BaseException:
    with pytest.raises(Exception) as info:  # noqa: PT011 - whatever eager raises
        fn(*args)
    return info.value


def assert_raises_as_eager(
    compiled: Callable[..., Any], fn: Callable[..., Any], *args: Any
) -> None:
    expected = eager_error(fn, *args)
    with pytest.raises(type(expected)) as info:
        compiled(*args)
    assert isinstance(info.value, EagerArgumentError)
    assert str(info.value) == str(expected).strip().splitlines()[0]


def test_call_with_a_meta_tensor_raises_eagers_error() -> None:
    a = torch.randn(3)
    add = xfuse.compile(lambda x, y: x + y, (a, a), quiet=True)
    assert_raises_as_eager(add, lambda x, y: x + y, a, torch.empty(3, device="meta"))
    torch.testing.assert_close(add(a, a), a + a)  # and the program still runs


def test_module_whose_parameters_moved_raises_eagers_error() -> None:
    model = torch.nn.Linear(4, 3).eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        compiled = xfuse.compile(model, (x,), quiet=True)
        model.to("meta")
        expected = eager_error(model, x)
        with pytest.raises(type(expected)) as info:
            compiled(x)
    assert isinstance(info.value, EagerArgumentError)
    assert str(info.value) == str(expected).strip().splitlines()[0]


# ---------------------------------------------------------------------------------------------
# On a GPU: CPU and CUDA tensors mixed
# ---------------------------------------------------------------------------------------------

MIXED: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "add": (lambda a, b: a + b, lambda: (torch.randn(4, 4, device="cuda"), torch.randn(4, 4))),
    "mm": (lambda a, b: a @ b, lambda: (torch.randn(4, 4, device="cuda"), torch.randn(4, 4))),
    "linear": (
        lambda a, w: F.linear(a, w),
        lambda: (torch.randn(4, 4, device="cuda"), torch.randn(3, 4)),
    ),
    "cat": (
        lambda a, b: torch.cat([a, b]),
        lambda: (torch.randn(2, 4, device="cuda"), torch.randn(2, 4)),
    ),
    "where": (
        lambda c, a: torch.where(c, a, 0.0),
        lambda: (torch.rand(4) > 0.5, torch.randn(4, device="cuda")),
    ),
}


@gpu
@pytest.mark.parametrize("name", list(MIXED))
def test_gpu_mixed_devices_raise_eagers_error(name: str) -> None:
    fn, make = MIXED[name]
    args = make()
    for device in ("cuda", "cpu"):
        with pytest.raises(RuntimeError) as info:
            xfuse.compile(fn, args, device=device, quiet=True)
        assert isinstance(info.value, EagerArgumentError)
        assert "device" in str(info.value)
    # compiled where every tensor agrees, then called with mixed ones
    same = tuple(a.to("cuda") for a in args)
    compiled = xfuse.compile(fn, same, device="cuda", quiet=True)
    assert_raises_as_eager(compiled, fn, *args)


@gpu
def test_gpu_cpu_scalar_is_taken_as_eager_takes_it() -> None:
    """Kernels read a copy on the GPU; the program runs step by step at every call (a CUDA
    graph replays device work only)."""
    x, s = torch.randn(4, 4, device="cuda"), torch.tensor(2.0)
    compiled = xfuse.compile(lambda a, b: a * b + 1, (x, s), device="cuda", quiet=True)
    for scale in (s, torch.tensor(3.0), torch.tensor(4.0), torch.tensor(5.0, device="cuda")):
        torch.testing.assert_close(compiled(x, scale), x * scale + 1)
    program = compiled.default.program
    kernels = [step for step in program.steps if isinstance(step, KernelStep)]
    # decided when the program was built: the kernel reads a copy of the scalar, `b`
    assert [[step.inputs[k] for k in step.copied] for step in kernels] == [[program.arg_slots[1]]]


@gpu
def test_gpu_cpu_scalar_where_the_example_had_a_gpu_one() -> None:
    """AOTAutograd's example inputs may hold on the GPU a 0-d input that its calls pass on the
    CPU (attention's RNG state): a kernel reads it on the GPU either way."""
    x, s = torch.randn(4, 4, device="cuda"), torch.tensor(2.0)
    compiled = xfuse.compile(lambda a, b: a * b + 1, (x, s.cuda()), device="cuda", quiet=True)
    for scale in (s, s.cuda()):
        torch.testing.assert_close(compiled(x, scale), x * s.cuda() + 1)


@gpu
def test_gpu_cpu_scalar_first_keeps_the_kernels_on_the_gpu() -> None:
    """A CPU scalar as the first input, at the first call or once graphs replay: kernels
    write GPU memory and the results are eager's, on the GPU."""
    x, s = torch.randn(4, 4, device="cuda"), torch.tensor(2.0)

    def fn(b: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return (a * b + 1).exp()

    for example in (s, s.cuda()):
        compiled = xfuse.compile(fn, (example, x), device="cuda", quiet=True)
        for scale in (s.cuda(), s.cuda(), torch.tensor(3.0), torch.tensor(4.0), s):
            got = compiled(scale, x)
            assert got.device == x.device
            torch.testing.assert_close(got, fn(scale, x))


@gpu
def test_gpu_output_of_cpu_scalars_alone_is_on_the_cpu_as_eagers() -> None:
    """Eager returns `b * 2` on the CPU when `b` is a CPU scalar, and so does the GPU program,
    whether its kernel writes `a * b` too or not; `b` on the GPU, on the GPU."""
    x, s = torch.randn(4, device="cuda"), torch.tensor(2.0)

    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (a * b).exp(), b * 2

    for example in (s, s.cuda()):
        compiled = xfuse.compile(fn, (x, example), device="cuda", quiet=True)
        for scale in (s.cuda(), s.cuda(), s, torch.tensor(3.0), s.cuda()):
            got, want = compiled(x, scale), fn(x, scale)
            assert [t.device for t in got] == [t.device for t in want]
            torch.testing.assert_close(got, want)


@gpu
def test_gpu_cpu_scalar_that_export_cannot_trace_is_traced_on_the_gpu() -> None:
    """`select_scatter` decomposes to a `where` of the CPU scalar and GPU tensors, which
    torch.export's fake tensors refuse and eager's kernel computes: the program is exported
    with the scalar on the GPU and takes it from either device."""
    v, s = torch.randn(8, device="cuda"), torch.tensor(3.0)

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.select_scatter(a * 2, b, 0, -2)

    compiled = xfuse.compile(fn, (v, s), device="cuda", quiet=True)
    for scale in (s, s.cuda(), torch.tensor(-1.0)):
        torch.testing.assert_close(compiled(v, scale), fn(v, scale))


@gpu
def test_gpu_cpu_index_eager_moves_is_refused_in_one_line() -> None:
    x, i = torch.randn(5, 4, device="cuda"), torch.tensor([0, 2])
    x[i]  # eager moves the CPU index
    with pytest.raises(InputDeviceError, match="eager accepts this call"):
        xfuse.compile(lambda a, b: a[b], (x, i), device="cuda", quiet=True)


@gpu
def test_gpu_module_on_cpu_input_on_cuda_raises_eagers_error() -> None:
    model = torch.nn.Linear(4, 3).eval()
    x = torch.randn(2, 4, device="cuda")
    with torch.no_grad():
        expected = eager_error(model, x)
        with pytest.raises(type(expected)) as info:
            xfuse.compile(model, (x,), device="cuda", quiet=True)
    assert isinstance(info.value, EagerArgumentError)
    assert str(info.value) == str(expected).strip().splitlines()[0]
