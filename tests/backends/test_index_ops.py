"""The index-arithmetic ops (arange, flip, roll, rot90, tril/triu, repeat/tile, diagonal)
through the whole pipeline: kernels with no eager part that equal eager on the CPU, PTX that
ptxas accepts for CUDA, and (with a GPU) equal eager on CUDA."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import xfuse
from tests.backends.test_cuda import gpu, ptx_of
from xfuse.errors import FallbackWarning

Fn = Callable[..., Any]
_gen = torch.Generator().manual_seed(0)


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(*shape, generator=_gen) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-50, 50, shape, generator=_gen).to(dtype)
    return torch.randn(*shape, generator=_gen).to(dtype)


# name -> (function, input shape, exact: no rounding anywhere, so bit-for-bit); aranges on the
# input's device, as model code makes them (eager cannot add a CPU arange to a CUDA tensor)
CASES: dict[str, tuple[Fn, tuple[int, ...], bool]] = {
    "arange_add": (lambda x: x + torch.arange(x.shape[-1], device=x.device), (37, 53), True),
    "arange_negative_step": (
        lambda x: x * torch.arange(10, 10 - 2 * 53, -2, device=x.device),
        (37, 53),
        True,
    ),
    "arange_float_step": (
        lambda x: x + torch.arange(-1.5, 25, 0.5, device=x.device),
        (37, 53),
        False,
    ),
    "arange_float_arg_int_dtype": (
        lambda x: (
            torch.arange(0.5, 53.5, 1.0, dtype=torch.int32, device=x.device) + x.to(torch.int32)
        ),
        (4, 53),
        True,
    ),
    "arange_alone": (lambda x: torch.arange(3, 3 + 7 * 40, 7, device=x.device), (1,), True),
    "arange_empty": (lambda x: torch.arange(4, 4, device=x.device) + x, (0,), True),
    "position_ids": (
        lambda x: torch.arange(x.shape[1], device=x.device).unsqueeze(0).expand(x.shape[0], -1) * 2,
        (3, 17),
        True,
    ),
    "causal_mask": (
        lambda x: x.masked_fill(
            torch.arange(x.shape[-1], device=x.device)[None, :]
            > torch.arange(x.shape[-2], device=x.device)[:, None],
            -1e9,
        ).softmax(-1),
        (2, 9, 9),
        False,
    ),
    "flip": (lambda x: torch.flip(x, (0, 1)) + 1, (37, 53), False),
    "flip_one_dim": (lambda x: torch.flip(x, (1,)), (5, 6, 7), True),
    "fliplr": (torch.fliplr, (5, 6), True),
    "rot90": (lambda x: torch.rot90(x, 1, (0, 1)), (37, 53), True),
    "rot90_3": (lambda x: torch.rot90(x, 3, (1, 2)).sin(), (3, 4, 5), False),
    "roll": (lambda x: torch.roll(x, 5, 1), (37, 53), True),
    "roll_two_dims": (lambda x: torch.roll(x, (-3, 60), (0, 1)) * 2, (37, 53), True),
    "roll_flat": (lambda x: torch.roll(x, 11), (7, 9), True),
    "tril": (torch.tril, (37, 53), True),
    "triu_offset": (lambda x: torch.triu(x, -2), (4, 9, 9), True),
    "tril_then_sum": (lambda x: torch.tril(x, 1).sum(-1), (37, 53), False),
    "repeat": (lambda x: x.repeat(2, 3), (37, 53), True),
    "repeat_new_dims": (lambda x: x.repeat(2, 1, 1, 3) + 1, (5, 6, 7), False),
    "tile": (lambda x: x.tile(3), (4, 5), True),
    "diagonal": (lambda x: torch.diagonal(x) * 2, (37, 53), True),
    "diagonal_offset_dims": (lambda x: torch.diagonal(x, -2, 2, 0) + 1, (6, 3, 8), False),
    "trace": (torch.trace, (37, 53), False),
    "diag_embed": (torch.diag_embed, (3, 7), True),
    "diag": (lambda x: torch.diag(x, -1), (6,), True),
}

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.bool]


def compile_checked(fn: Fn, inputs: tuple[torch.Tensor, ...], device: str = "cpu") -> Any:
    """xfuse.compile in strict mode: no eager group, and no op left to torch."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        compiled = xfuse.compile(fn, inputs, device)
    eager_ops = [op for op in compiled.default.op_names if "torch_call" in op]
    assert not eager_ops, eager_ops
    assert not compiled.fallbacks
    return compiled


def applies(name: str, dtype: torch.dtype) -> bool:
    """Float math (softmax, sin, a float arange added) needs a float input; bool masks."""
    floats_only = ("causal_mask", "rot90_3", "arange_float_step", "trace", "tril_then_sum")
    # bool tril/triu/diag masks decompose to aten.logical_and: left to test_cpu_math_ops.py
    not_bool = ("tril", "triu", "diag")
    if dtype == torch.bool and name.startswith(not_bool):
        return False
    return dtype.is_floating_point or not name.startswith(floats_only)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_index_op_on_cpu_equals_eager(name: str, dtype: torch.dtype) -> None:
    fn, shape, exact = CASES[name]
    if not applies(name, dtype):
        pytest.skip("not for this dtype")
    x = rand(*shape, dtype=dtype)
    try:
        want = fn(x)
    except RuntimeError as e:  # eager refuses the dtype (bool arithmetic): nothing to compare
        pytest.skip(f"eager: {e}")
    compiled = compile_checked(fn, (x,))
    got = compiled(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    if exact:
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(got, want, equal_nan=True)


def test_returned_diagonal_is_a_view_of_its_input() -> None:
    x = rand(5, 7)
    compiled = compile_checked(lambda x: torch.diagonal(x, 1), (x,))
    got = compiled(x)
    want = torch.diagonal(x, 1)
    assert got.data_ptr() == want.data_ptr() and got.stride() == want.stride()
    x.add_(1)
    torch.testing.assert_close(got, torch.diagonal(x, 1), rtol=0, atol=0)


def test_softmax_of_an_empty_diagonal() -> None:
    """(fuzz seed 11, program 249) An empty diagonal's log_softmax: nothing to compute."""

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = torch.diagonal(x, -1, 0, 1)
        return torch.log_softmax(d, dim=-1), x.sum()

    x = rand(1, 16, 16)
    got, want = compile_checked(fn, (x,))(x), fn(x)
    assert got[0].shape == want[0].shape == (16, 0)
    torch.testing.assert_close(got[1], want[1])


def test_arange_fuses_into_its_reader() -> None:
    """Position ids and a causal mask: the aranges are computed inside the kernels."""
    fn, shape, _ = CASES["causal_mask"]
    x = rand(*shape)
    compiled = compile_checked(fn, (x,))
    assert len(compiled.kernels) == 1
    (group,) = compiled.groups
    assert "graph.iota" in group.ops  # (CSE merges the two equal aranges)


@pytest.mark.parametrize("name", sorted(CASES))
def test_index_op_compiles_to_ptx(name: str, tmp_path: Path) -> None:
    fn, shape, _ = CASES[name]
    if 0 in shape:
        pytest.skip("no kernel for an empty tensor")
    ptx_of(fn, (rand(*shape),), tmp_path)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_index_op(name: str, dtype: torch.dtype) -> None:
    fn, shape, exact = CASES[name]
    if not applies(name, dtype):
        pytest.skip("not for this dtype")
    x = rand(*shape, dtype=dtype).cuda()
    want = fn(x)
    got = compile_checked(fn, (x,), "cuda:0")(x)
    torch.cuda.synchronize()
    tolerance: dict[str, float] = {"rtol": 0, "atol": 0} if exact else {}
    torch.testing.assert_close(got, want, equal_nan=True, **tolerance)  # pyright: ignore[reportArgumentType]
