"""Runtime tests: torch.export's pytree warnings silenced."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _quiet_export() -> Iterator[None]:
    # torch.export warns about pytree internals on every export; these tests do not care.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*pytree.*")
        yield
