"""The per-call path of programs with symbolic sizes (xfuse/runtime/dynamic.py): a plain call
(the example's positional tensors) whose layouts an earlier call had runs with that call's plan
(`DynamicProgram.plans`), with no pytree walk and no `bind`; every refusal of a call is the
same after such a call as without one, and a call of other layouts (sizes, strides, dtype,
device, module state) never runs with an earlier call's plan."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.export import Dim

import xfuse
from tests.runtime.test_symbolic_program import Block, doubled_length_program
from xfuse.errors import (
    AutogradUnsupportedError,
    InputDeviceError,
    SymbolicSizeError,
    UnsupportedInputError,
)
from xfuse.runtime import dynamic
from xfuse.runtime.dynamic import DynamicProgram

BATCH = {"x": {0: Dim("batch", min=2, max=64)}}


@pytest.fixture(scope="module")
def block() -> tuple[torch.nn.Module, DynamicProgram]:
    torch.manual_seed(0)
    model = Block().eval()
    return model, xfuse.compile(model, (torch.randn(5, 16),), dynamic_shapes=BATCH)


@pytest.fixture
def fresh_block() -> tuple[torch.nn.Module, DynamicProgram]:
    """A program of its own, for tests that change the module."""
    torch.manual_seed(0)
    model = Block().eval()
    return model, xfuse.compile(model, (torch.randn(5, 16),), dynamic_shapes=BATCH)


def refusal(program: DynamicProgram, *args: Any) -> tuple[type[BaseException], str]:
    """The error a call raises (its type and one-line message)."""
    with pytest.raises(Exception) as caught:  # noqa: PT011 - any refusal, compared whole
        program(*args)
    message = str(caught.value)
    assert "\n" not in message
    return type(caught.value), message


def planned(program: DynamicProgram, x: torch.Tensor) -> torch.Tensor:
    """`x`, after a call of it (under `torch.no_grad`) whose plan `program` keeps."""
    with torch.no_grad():
        program(x)
    assert program.plans
    return x


def refusal_after_a_plan(
    program: DynamicProgram, good: torch.Tensor, *args: Any
) -> tuple[type[BaseException], str]:
    """The error a call of `args` raises right after a call of `good` (whose plan is kept),
    checked to be the error it raises with no plan kept."""
    planned(program, good)
    after = refusal(program, *args)
    program.plans.clear()
    assert refusal(program, *args) == after
    return after


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (lambda x: x.double(), SymbolicSizeError, "expects a torch.float32 tensor"),
        (lambda x: x.to("meta"), InputDeviceError, "a tensor on meta in a call"),
        (lambda x: x[None], SymbolicSizeError, "expects a torch.float32 tensor of shape"),
        (lambda x: torch.randn(5, 17), SymbolicSizeError, "dim 1 is static 16, got size 17"),
        (lambda x: torch.randn(65, 16), SymbolicSizeError, r"outside its range [2, 64]"),
        (lambda x: torch.randn(1, 16), SymbolicSizeError, r"outside its range [2, 64]"),
        (lambda x: [x], UnsupportedInputError, "another structure than the example inputs'"),
        (lambda x: 3.0, UnsupportedInputError, "an input is a float, not a tensor"),
    ],
    ids=["dtype", "device", "rank", "static-dim", "above-range", "size-1", "list", "float"],
)
def test_a_call_is_refused_alike_after_a_plan_was_kept(
    block: tuple[torch.nn.Module, DynamicProgram],
    bad: Callable[[torch.Tensor], Any],
    error: type[BaseException],
    message: str,
) -> None:
    _, program = block
    x = torch.randn(5, 16)
    with torch.no_grad():
        found, text = refusal_after_a_plan(program, x, bad(x))
    assert found is error and message in text


def test_a_call_that_needs_autograd_or_autocast_is_refused_after_a_plan_was_kept(
    block: tuple[torch.nn.Module, DynamicProgram],
) -> None:
    _, program = block
    x = planned(program, torch.randn(5, 16))
    assert refusal(program, x)[0] is AutogradUnsupportedError  # its parameters require grad
    with torch.no_grad(), torch.autocast("cpu"):
        found, text = refusal(program, x)
    assert found is AutogradUnsupportedError and "torch.autocast" in text
    with torch.no_grad():
        torch.testing.assert_close(program(x), block[0](x))  # and the plan still serves


def test_a_call_of_other_layouts_never_runs_with_a_kept_plan(
    block: tuple[torch.nn.Module, DynamicProgram],
) -> None:
    model, program = block
    program.plans.clear()
    calls = [
        torch.randn(5, 16),
        torch.randn(9, 16),
        torch.randn(16, 5).t(),  # the first call's sizes, not contiguous
        torch.randn(5, 32)[:, ::2],
        torch.randn(5, 16),
        torch.randn(9, 16),
    ]
    with torch.no_grad():
        for x in calls:
            torch.testing.assert_close(program(x), model(x))
    assert len(program.plans) == 4  # (5, 16) and (9, 16) found again


def test_a_kept_plan_skips_the_pytree_walk_and_bind(
    block: tuple[torch.nn.Module, DynamicProgram], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, program = block
    planned(program, torch.randn(7, 16))

    def refused(*args: Any) -> Any:
        raise AssertionError("a call of known layouts walked its inputs again")

    with torch.no_grad():
        monkeypatch.setattr(program, "_tensors", refused)
        monkeypatch.setattr(program.compiled, "bind", refused)
        y = torch.randn(7, 16)
        torch.testing.assert_close(program(y), model(y))
        with pytest.raises(AssertionError, match="walked its inputs again"):
            program(torch.randn(8, 16))  # other sizes: the checked path


def test_module_state_is_read_and_checked_at_every_call(
    fresh_block: tuple[torch.nn.Module, DynamicProgram],
) -> None:
    model, program = fresh_block
    x = planned(program, torch.randn(5, 16))
    with torch.no_grad():
        model.l1.weight = torch.nn.Parameter(torch.randn(32, 16))  # the same layout
        torch.testing.assert_close(program(x), model(x))
        model.l1.weight = torch.nn.Parameter(torch.randn(32, 12))
        found, text = refusal(program, x)
        assert found is SymbolicSizeError and "dim 1 is static 16, got size 12" in text
        model.l1.weight = torch.nn.Parameter(torch.randn(32, 16))
        model.train()
        found, text = refusal(program, x)
        assert found is UnsupportedInputError and "in training mode now" in text
        model.eval()
        torch.testing.assert_close(program(x), model(x))


def test_a_derived_size_an_argument_holds_is_checked_after_a_plan_was_kept() -> None:
    program = doubled_length_program()
    x = torch.randn(4)
    torch.testing.assert_close(program(x, torch.ones(8)), torch.cat([x, x]) + 1)
    found, text = refusal(program, x, torch.randn(7))
    assert found is SymbolicSizeError and "which is 8 at this call's sizes, got size 7" in text


def test_a_size_that_specialises_runs_its_static_program_after_a_plan_was_kept() -> None:
    torch.manual_seed(0)
    model = Block().eval()
    batch = Dim("batch", min=1, max=64)
    program = xfuse.compile(model, (torch.randn(5, 16),), dynamic_shapes={"x": {0: batch}})
    with torch.no_grad():
        for n in (4, 4, 1, 4):
            x = torch.randn(n, 16)
            torch.testing.assert_close(program(x), model(x))
    assert program.specialised is not None and len(program.plans) == 1


def test_plans_are_dropped_past_the_bound(
    block: tuple[torch.nn.Module, DynamicProgram], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, program = block
    monkeypatch.setattr(dynamic, "MAX_PLANS", 3)
    program.plans.clear()
    with torch.no_grad():
        for n in range(2, 9):
            x = torch.randn(n, 16)
            torch.testing.assert_close(program(x), model(x))
            assert 1 <= len(program.plans) <= 3
