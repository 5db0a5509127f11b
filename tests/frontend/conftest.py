"""Shared fixtures of the frontend tests."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _quiet_export() -> Iterator[None]:
    # torch.export warns about pytree internals on every export; the tests do not care.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
