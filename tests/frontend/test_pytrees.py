"""`xfuse.frontend.pytrees`: a compiled causal LM's `DynamicCache` is rebuilt holding the
program's results as they are, with the attributes transformers' own first `update` gives its
layers (they differ between releases)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from xfuse.frontend import pytrees

transformers = pytest.importorskip("transformers")
DynamicLayer = transformers.cache_utils.DynamicLayer


@pytest.fixture
def fresh_fields() -> Iterator[None]:
    pytrees._plain_layer_fields.cache_clear()
    yield
    pytrees._plain_layer_fields.cache_clear()


def _patched_lazy_init(monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any]) -> None:
    original = DynamicLayer.lazy_initialization

    def lazy_initialization(self: Any, key_states: torch.Tensor, value_states: Any) -> None:
        original(self, key_states, value_states)
        for name, value in extra.items():
            setattr(self, name, key_states.dtype if value == "dtype" else value)

    monkeypatch.setattr(DynamicLayer, "lazy_initialization", lazy_initialization)


def test_the_installed_release_layers_are_filled_as_update_fills_them(fresh_fields: None) -> None:
    fields = pytrees._plain_layer_fields()
    assert fields is not None and {"keys", "values"} <= set(fields)
    k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    ours, theirs = DynamicLayer(), DynamicLayer()
    pytrees._fill_layer(ours, fields, k, v)
    theirs.update(k, v)
    assert sorted(vars(ours)) == sorted(vars(theirs))
    assert ours.keys is k and ours.values is v  # the results themselves, no copy


def test_a_release_that_also_records_the_dtype(
    fresh_fields: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers 5.17's first update also sets `dtype`: the fast path sets it too (it fell
    back to transformers' unflatten, a `cat` per state and call, before)."""
    _patched_lazy_init(monkeypatch, {"dtype": "dtype"})
    fields = pytrees._plain_layer_fields()
    assert fields is not None and "dtype" in fields
    layer = DynamicLayer()
    pytrees._fill_layer(layer, fields, torch.zeros(2, dtype=torch.bfloat16), torch.zeros(2))
    assert layer.dtype == torch.bfloat16


def test_a_release_with_an_unknown_field_falls_back(
    fresh_fields: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _patched_lazy_init(monkeypatch, {"max_length": 7})
    assert pytrees._plain_layer_fields() is None


MISSED_OUTPUT_TYPES = """
from unittest import mock
import torch
with mock.patch("torch.compiler.is_compiling", return_value=True):  # imported inside a trace
    from transformers import GPT2Config, GPT2LMHeadModel
from torch.utils import _pytree as pytree
from transformers.modeling_outputs import CausalLMOutputWithCrossAttentions
from xfuse.frontend.pytrees import export_support
assert CausalLMOutputWithCrossAttentions not in pytree.SUPPORTED_NODES
config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, use_cache=False)
model = GPT2LMHeadModel(config).eval()
with export_support():
    torch.export.export(model, (torch.randint(0, 64, (1, 8)),), strict=False)
print("exported")
"""


def test_output_types_transformers_made_inside_a_compile_are_registered() -> None:
    """Transformers skips registering its output types as pytrees while torch compiles: a
    model module first imported inside a `torch.compile` trace (a fresh process here) would
    leave them unknown to torch.export; `export_support` registers them."""
    pytest.importorskip("transformers")
    result = subprocess.run(
        [sys.executable, "-c", MISSED_OUTPUT_TYPES], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 and "exported" in result.stdout, result.stderr[-2000:]
