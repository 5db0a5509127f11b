"""AOTAutograd's decompositions for xfuse (`xfuse.aot.decompositions`): what the partitioner
saves for a language model's loss, and the two decompositions of xfuse's own."""

from __future__ import annotations

import torch

import xfuse
from xfuse.aot import dtype_conversion, filled_like

Tensor = torch.Tensor


class LossHead(torch.nn.Module):
    """A language model's head and loss as transformers computes it under autocast: bf16
    logits cast to f32, log-softmax over the vocabulary, the mean over tokens not ignored."""

    def __init__(self, width: int = 16, vocab: int = 200) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, h: Tensor, labels: Tensor) -> Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = self.head(h)
        logits = logits.float().view(-1, logits.shape[-1])
        return torch.nn.functional.cross_entropy(logits, labels.view(-1), ignore_index=-100)


def _inputs() -> tuple[Tensor, Tensor]:
    labels = torch.randint(0, 200, (2, 8))
    labels[0, :3] = -100
    return torch.randn(2, 8, 16, requires_grad=True), labels


def test_a_loss_saves_its_bf16_logits_and_row_statistics_not_f32_log_probabilities() -> None:
    """As Inductor's partitioner does: the backward computes the log-probabilities again from
    the logits (half the bytes) and two numbers a row; it is one kernel."""
    explanation = xfuse.explain(LossHead(), _inputs(), quiet=True, training=True)
    float_tables = [s for s in explanation.saved if "float32[16, 200]" in s]
    assert not float_tables, explanation.saved
    assert any("bfloat16[2, 8, 200]" in s for s in explanation.saved), explanation.saved
    assert any("aten.amax" in s for s in explanation.saved), explanation.saved
    backward = explanation.parts["backward"]
    rows = [g for g in backward.groups if any("reduce_sum" in op for op in g.ops)]
    assert len(rows) == 1 and any("exp" in op for op in rows[0].ops), backward.groups


def test_a_loss_trains_as_eager() -> None:
    model, reference = LossHead(), LossHead()
    h, labels = _inputs()
    program = xfuse.compile(model, (h, labels), quiet=True, fallback="error")
    g = h.detach().clone().requires_grad_(True)
    loss, expected = program(h, labels), reference(g, labels)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    expected.backward()
    torch.testing.assert_close(h.grad, g.grad)
    torch.testing.assert_close(model.head.weight.grad, reference.head.weight.grad)


def test_only_a_change_of_element_type_is_a_cast() -> None:
    x = torch.randn(4, 3)
    cast = dtype_conversion(x, dtype=torch.bfloat16)
    assert cast.dtype == torch.bfloat16 and torch.equal(cast, x.to(torch.bfloat16))
    assert dtype_conversion(x, dtype=torch.float64, device="meta") is NotImplemented
    assert dtype_conversion(x) is NotImplemented  # no dtype: a plain copy
    assert (
        dtype_conversion(x, dtype=torch.half, memory_format=torch.channels_last) is NotImplemented
    )


def test_zeros_like_of_a_contiguous_tensor_is_a_full() -> None:
    x = torch.randn(4, 3)
    filled = filled_like(x, 2.0)
    assert torch.equal(filled, torch.full_like(x, 2.0)) and filled.dtype == x.dtype
    assert filled_like(x.t(), 0) is NotImplemented  # its strides would differ from full's
    assert filled_like(x, 0, dtype=torch.int32).dtype == torch.int32
