"""Shared pytest set-up: deterministic randomness for every test."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def seeded_torch() -> None:
    """Tests that draw random inputs see the same ones on every run."""
    torch.manual_seed(0)
