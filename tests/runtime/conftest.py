"""Runtime tests use a kernel cache directory of their own (one per session)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest


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


@pytest.fixture(autouse=True)
def _quiet_export() -> Iterator[None]:
    # torch.export warns about pytree internals on every export; these tests do not care.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*pytree.*")
        yield
