"""oneDNN's GEMM for f32 products of a weight on the CPU (`xfuse.runtime.onednn_gemm`): eager's
values, as accurate as eager's against f64, its weight chunks made again when the weight
changes; never for other dtypes, other devices or training parts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import xfuse
from xfuse.runtime import driver, onednn_gemm
from xfuse.runtime.onednn_gemm import CHUNK, weight_chunks
from xfuse.runtime.onednn_gemm import onednn_gemm as gemm
from xfuse.runtime.steps import EagerStep, OnednnStep

pytestmark = pytest.mark.skipif(not onednn_gemm.available(), reason="torch without oneDNN")


@pytest.fixture(autouse=True)
def _forced(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XFUSE_ONEDNN_GEMM", "1")
    yield


def _rmse(y: torch.Tensor, reference: torch.Tensor) -> float:
    return (y.double() - reference).pow(2).mean().sqrt().item()


@pytest.mark.parametrize(("k", "transposed"), [(1024, False), (768, True), (200, False)])
def test_values_match_eager_and_are_as_accurate(k: int, transposed: bool) -> None:
    torch.manual_seed(0)
    x, bias = torch.randn(1, 128, k), torch.randn(1024)
    # scaled as nn.Linear initialises them: results of about unit size
    weight = (torch.randn(k, 1024) if transposed else torch.randn(1024, k)) / k**0.5
    nk = weight.t() if transposed else weight
    y = gemm(x, weight, None if transposed else bias, transposed)
    eager = x @ weight if transposed else torch.nn.functional.linear(x, weight, bias)
    torch.testing.assert_close(y, eager)
    assert y.shape == eager.shape and y.stride() == eager.stride()
    reference = x.double() @ nk.double().t() + (0 if transposed else bias.double())
    assert _rmse(y, reference) <= 2 * _rmse(eager, reference)


def test_chunks_are_made_once_and_again_when_the_weight_changes() -> None:
    weight = torch.randn(64, 3 * CHUNK)
    chunks = weight_chunks(weight, False)
    assert len(chunks) == 3 and all(c.is_contiguous() for c in chunks)
    assert weight_chunks(weight, False) is chunks
    with torch.no_grad():
        weight.mul_(2)  # in place: a new version
    again = weight_chunks(weight, False)
    assert again is not chunks
    torch.testing.assert_close(again[1], weight[:, CHUNK : 2 * CHUNK])
    other = weight.clone()  # a new tensor: chunks of its own
    assert weight_chunks(other, False) is not again


def test_a_contiguous_weight_of_one_chunk_is_not_copied() -> None:
    weight = torch.randn(64, CHUNK)
    (chunk,) = weight_chunks(weight, False)
    assert chunk is weight
    (copied,) = weight_chunks(weight.t().contiguous(), True)  # [K, N]: made [N, K]
    assert copied.is_contiguous() and copied.data_ptr() != weight.data_ptr()


def test_chunks_go_with_their_weight() -> None:
    weight = torch.randn(64, 2 * CHUNK)
    weight_chunks(weight, False)
    key = (id(weight), False)
    assert key in onednn_gemm._made
    del weight
    assert key not in onednn_gemm._made


class _Model(torch.nn.Module):
    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.up = torch.nn.Linear(512, 768, dtype=dtype)
        self.down = torch.nn.Parameter(torch.randn(768, 256, dtype=dtype) / 30)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.up(x)).reshape(-1, 768) @ self.down


def _step_kinds(program: xfuse.CompiledProgram) -> list[type]:
    return [type(s) for s in program.default.program.steps]


def test_a_compiled_program_reacts_to_a_weight_changed_in_place_as_eager() -> None:
    model, x = _Model().eval(), torch.randn(1, 64, 512)
    with torch.no_grad():
        program = xfuse.compile(model, (x,), quiet=True)
        assert _step_kinds(program).count(OnednnStep) == 2
        torch.testing.assert_close(program(x), model(x))
        chunks = onednn_gemm._made[(id(model.down), True)].chunks  # the module's own weight
        torch.testing.assert_close(program(x), model(x))
        assert onednn_gemm._made[(id(model.down), True)].chunks is chunks  # not made again
        model.up.weight.mul_(-1)
        model.down.add_(1)
        torch.testing.assert_close(program(x), model(x))


def test_torch_compile_reacts_to_a_weight_changed_in_place_as_eager() -> None:
    torch._dynamo.reset()
    model, x = _Model().eval(), torch.randn(1, 64, 512)
    compiled = torch.compile(model, backend="xfuse", options={"fallback": "error"})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        assert (id(model.down), True) in onednn_gemm._made  # a static input's product
        model.up.weight.mul_(-1)
        torch.testing.assert_close(compiled(x), model(x))
    torch._dynamo.reset()


def test_other_dtypes_stay_torch_calls() -> None:
    model, x = _Model(torch.float64).eval(), torch.randn(1, 64, 512, dtype=torch.float64)
    with torch.no_grad():
        program = xfuse.compile(model, (x,), quiet=True)
        torch.testing.assert_close(program(x), model(x))
    kinds = _step_kinds(program)
    assert OnednnStep not in kinds and kinds.count(EagerStep) == 2


def test_only_products_of_held_weights_run_onednn() -> None:
    """A product by an input of each call stays torch's call (its chunks would be made at
    every call, and kept while the caller holds it), unless the input is static (a weight
    `torch.compile` passes in)."""
    a, b = torch.randn(128, 512), torch.randn(512, 256) / 512**0.5
    program = xfuse.compile(lambda a, b: torch.relu(a) @ b, (a, b), quiet=True)
    assert OnednnStep not in _step_kinds(program)
    held = xfuse.compile(lambda a, b: torch.relu(a) @ b, (a, b), quiet=True, static_inputs=[1])
    assert OnednnStep in _step_kinds(held)
    torch.testing.assert_close(held(a, b), torch.relu(a) @ b)


def test_training_parts_stay_torch_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[OnednnStep] = []
    asked: list[bool | None] = []
    post_init, choose = OnednnStep.__post_init__, driver.onednn_gemms

    def counted(self: OnednnStep) -> None:
        made.append(self)
        post_init(self)

    def recorded(module: Any, held: Any, device: Any, cache: Any, setting: bool | None) -> Any:
        asked.append(setting)
        return choose(module, held, device, cache, setting)

    monkeypatch.setattr(OnednnStep, "__post_init__", counted)
    monkeypatch.setattr(driver, "onednn_gemms", recorded)
    model, x = _Model().train(), torch.randn(1, 64, 512)
    program = xfuse.compile(model, (x,), quiet=True)  # the inference program, built now
    assert asked == [True] and len(made) == 2
    program(x).sum().backward()
    assert model.up.weight.grad is not None
    assert asked[1:] == [False, False]  # the forward and backward parts
    assert len(made) == 2
