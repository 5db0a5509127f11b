"""Products of a weight run another way than torch's call (`xfuse.runtime.gemm_ways`: on the
CPU oneDNN's GEMM or MKL's in blocks of the weight's rows, on CUDA the bias added apart):
eager's values and strides, as accurate as eager's against f64, the weight read at every call
(so every change to it is seen, a write through `.data` too); never for other dtypes or
training parts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import xfuse
from tests.backends.test_cuda import gpu
from xfuse.runtime import driver, gemm_ways
from xfuse.runtime.gemm_ways import ChosenGemm
from xfuse.runtime.steps import EagerStep, GemmStep


@pytest.fixture(autouse=True)
def _forced(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XFUSE_GEMM_WAYS", "1")
    yield


@pytest.fixture
def ways(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The way of every chosen product's call, in the order of the calls."""
    called: list[str] = []
    call = ChosenGemm.__call__

    def counted(self: ChosenGemm, *args: Any) -> torch.Tensor:
        called.append(self.way)
        return call(self, *args)

    monkeypatch.setattr(ChosenGemm, "__call__", counted)
    return called


def _rmse(y: torch.Tensor, reference: torch.Tensor) -> float:
    return (y.double() - reference).pow(2).mean().sqrt().item()


WAYS = [
    ("blocked", 1024, False),
    ("blocked", 768, True),
    ("blocked", 200, False),
    ("onednn", 256, False),
    ("onednn", 96, False),
    ("bias-apart", 512, False),
]


@pytest.mark.parametrize(("way", "k", "transposed"), WAYS)
def test_values_match_eager_and_are_as_accurate(way: str, k: int, transposed: bool) -> None:
    if way == "onednn" and not gemm_ways.onednn_available():
        pytest.skip("torch without oneDNN")
    torch.manual_seed(0)
    n = gemm_ways.ROW_BLOCK + 100  # more than one block of the blocked way
    x, bias = torch.randn(1, 64, k), torch.randn(n)
    # scaled as nn.Linear initialises them: results of about unit size
    weight = (torch.randn(k, n) if transposed else torch.randn(n, k)) / k**0.5
    nk = weight.t() if transposed else weight
    for b in (None, None if transposed else bias):
        y = ChosenGemm(way, transposed)(x, weight, b)
        eager = x @ weight if transposed else torch.nn.functional.linear(x, weight, b)
        torch.testing.assert_close(y, eager)
        assert y.shape == eager.shape and y.stride() == eager.stride()
        reference = x.double() @ nk.double().t() + (0 if b is None else b.double())
        assert _rmse(y, reference) <= 2 * _rmse(eager, reference)


@pytest.mark.parametrize("way", ["onednn", "bias-apart"])
def test_only_the_blocked_way_takes_a_transposed_weight(way: str) -> None:
    with pytest.raises(ValueError, match=f"no {way} way for a \\[K, N\\] weight"):
        ChosenGemm(way, transposed=True)


def test_the_ways_of_a_product() -> None:
    long, short = gemm_ways.Gemm(8, 768, 64, False), gemm_ways.Gemm(8, 96, 64, False)
    assert gemm_ways.ways(long) == ("blocked",)
    assert gemm_ways.ways(gemm_ways.Gemm(8, 96, 64, True)) == ("blocked",)
    onednn = ("onednn",) if gemm_ways.onednn_available() else ()
    assert gemm_ways.ways(short) == (*onednn, "blocked")
    biased = gemm_ways.Gemm(8, 768, 64, False, "cuda", torch.bfloat16, True)
    assert gemm_ways.ways(biased) == ("bias-apart",)


class _Model(torch.nn.Module):
    """Three products: `up` of K=512 and `down` ([K, N]) run the blocked way, `out` of
    K=256 oneDNN's (where this torch has it)."""

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.up = torch.nn.Linear(512, 768, dtype=dtype)
        self.down = torch.nn.Parameter(torch.randn(768, 256, dtype=dtype) / 30)
        self.out = torch.nn.Linear(256, 64, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.up(x)).reshape(-1, 768) @ self.down)


def _step_kinds(program: xfuse.CompiledProgram) -> list[type]:
    return [type(s) for s in program.default.program.steps]


def _change_every_weight(model: _Model, through_data: bool) -> None:
    """In place: with torch's version counters bumped, or through `.data` (none bumped)."""
    with torch.no_grad():
        up, down, out = (
            (model.up.weight.data, model.down.data, model.out.weight.data)
            if through_data
            else (model.up.weight, model.down, model.out.weight)
        )
        versions = [p._version for p in (model.up.weight, model.down, model.out.weight)]
        up.mul_(-1)  # exact scalings: eager's rounding differences scale with the values
        down.mul_(2)
        out.mul_(-0.5)
    bumped = [p._version for p in (model.up.weight, model.down, model.out.weight)] != versions
    assert bumped != through_data


@pytest.mark.parametrize("through_data", [False, True])
def test_a_compiled_program_reacts_to_a_weight_changed_in_place_as_eager(
    through_data: bool,
) -> None:
    model, x = _Model().eval(), torch.randn(1, 64, 512)
    with torch.no_grad():
        program = xfuse.compile(model, (x,), quiet=True)
        steps = [s for s in program.default.program.steps if isinstance(s, GemmStep)]
        onednn = ["onednn"] if gemm_ways.onednn_available() else ["blocked"]
        assert [s.way for s in steps] == ["blocked", "blocked", *onednn]
        torch.testing.assert_close(program(x), model(x))
        _change_every_weight(model, through_data)
        torch.testing.assert_close(program(x), model(x))


@pytest.mark.parametrize("through_data", [False, True])
def test_torch_compile_reacts_to_a_weight_changed_in_place_as_eager(
    through_data: bool, ways: list[str]
) -> None:
    torch._dynamo.reset()
    model, x = _Model().eval(), torch.randn(1, 64, 512)
    compiled = torch.compile(model, backend="xfuse", options={"fallback": "error"})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        assert len(ways) == 3  # every product of a weight (static inputs) ran its chosen way
        _change_every_weight(model, through_data)
        torch.testing.assert_close(compiled(x), model(x))
    torch._dynamo.reset()


def test_other_dtypes_stay_torch_calls() -> None:
    model, x = _Model(torch.float64).eval(), torch.randn(1, 64, 512, dtype=torch.float64)
    with torch.no_grad():
        program = xfuse.compile(model, (x,), quiet=True)
        torch.testing.assert_close(program(x), model(x))
    kinds = _step_kinds(program)
    assert GemmStep not in kinds and kinds.count(EagerStep) == 3


def test_only_products_of_held_weights_run_another_way() -> None:
    """A product by an input of each call stays torch's call (the choice is measured for
    products of a weight), unless the input is static (a weight `torch.compile` passes in)."""
    a, b = torch.randn(128, 512), torch.randn(512, 256) / 512**0.5
    program = xfuse.compile(lambda a, b: torch.relu(a) @ b, (a, b), quiet=True)
    assert GemmStep not in _step_kinds(program)
    held = xfuse.compile(lambda a, b: torch.relu(a) @ b, (a, b), quiet=True, static_inputs=[1])
    assert GemmStep in _step_kinds(held)
    torch.testing.assert_close(held(a, b), torch.relu(a) @ b)


def test_training_parts_stay_torch_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[GemmStep] = []
    asked: list[bool | None] = []
    post_init, choose = GemmStep.__post_init__, driver.chosen_gemms

    def counted(self: GemmStep) -> None:
        made.append(self)
        post_init(self)

    def recorded(module: Any, held: Any, device: Any, cache: Any, setting: bool | None) -> Any:
        asked.append(setting)
        return choose(module, held, device, cache, setting)

    monkeypatch.setattr(GemmStep, "__post_init__", counted)
    monkeypatch.setattr(driver, "chosen_gemms", recorded)
    model, x = _Model().train(), torch.randn(1, 64, 512)
    program = xfuse.compile(model, (x,), quiet=True)  # the inference program, built now
    assert asked == [True] and len(made) == 3
    program(x).sum().backward()
    assert model.up.weight.grad is not None
    assert asked[1:] == [False, False]  # the forward and backward parts
    assert len(made) == 3


class _TwoHeads(torch.nn.Module):
    """Two products whose bias adds fusion leaves alone (each an output of its own), folded
    back into `linear` with their bias: on CUDA, candidates for `bias-apart`."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(512, 768)
        self.b = torch.nn.Linear(512, 256)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.a(x), self.b(x)


@gpu
def test_cuda_products_add_their_bias_apart_as_eager_and_read_every_change(
    ways: list[str],
) -> None:
    torch._dynamo.reset()
    model, x = _TwoHeads().cuda().eval(), torch.randn(2, 64, 512, device="cuda")
    compiled = torch.compile(model, backend="xfuse", options={"fallback": "error"})
    with torch.no_grad():
        for _ in range(3):  # the last calls replay the CUDA graph
            torch.testing.assert_close(compiled(x), model(x))
        assert ways and set(ways) == {"bias-apart"}
        model.a.weight.data.mul_(-1)
        model.b.bias.data.add_(1)
        torch.testing.assert_close(compiled(x), model(x))
    torch._dynamo.reset()
