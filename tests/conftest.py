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


@pytest.fixture(autouse=True)
def _own_cache_when_patched(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """A test that patches code (it uses `monkeypatch`) gets a cache directory of its own: the
    cache keys fused programs by xfuse's sources, not by what a test patches at run time, so
    a program fused before the patch must not stand in for what the patched code makes."""
    if "monkeypatch" not in request.fixturenames:
        yield
        return
    patch = pytest.MonkeyPatch()
    patch.setenv("XFUSE_CACHE_DIR", str(tmp_path_factory.mktemp("own-cache")))
    yield
    patch.undo()
