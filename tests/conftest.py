"""Shared pytest set-up: deterministic randomness for every test, and a kernel cache directory
of the test session's own (compiled kernels never land in the user's cache)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def seeded_torch() -> None:
    """Tests that draw random inputs see the same ones on every run."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def _session_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("xfuse-cache")
    before = os.environ.get("XFUSE_CACHE_DIR")
    os.environ["XFUSE_CACHE_DIR"] = str(path)
    yield path
    if before is None:
        del os.environ["XFUSE_CACHE_DIR"]
    else:
        os.environ["XFUSE_CACHE_DIR"] = before
