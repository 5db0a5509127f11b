"""`xfuse.frontend.pytrees`: a compiled causal LM's `DynamicCache` is rebuilt holding the
program's results as they are, with the attributes transformers' own first `update` gives its
layers (they differ between releases)."""

from __future__ import annotations

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
