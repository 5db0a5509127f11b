"""Shared pytest set-up: deterministic randomness for every test, a kernel cache directory
of the test session's own (compiled kernels never land in the user's cache), and
`no_fallback`, the strict mode a module asks for with
`pytestmark = pytest.mark.usefixtures("no_fallback")`."""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from xfuse.errors import FallbackWarning


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


@pytest.fixture
def no_fallback() -> Iterator[None]:
    """No part, no group runs eagerly unnoticed: a `FallbackWarning` fails the test (dynamo's
    caches are reset around it, so no earlier test's graphs serve it)."""
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        yield
    torch._dynamo.reset()


Calls = list[tuple[Any, ...]]
"""The positional arguments of each call of a function, in order (a method's first is its
object)."""
CountCalls = Callable[[Any, str], Calls]


def counted_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> Calls:
    """The calls of `owner.name` (a module's function, a class's method or the class held
    there) from now on, each run as before."""
    calls: Calls = []
    real = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


@pytest.fixture
def count_calls(monkeypatch: pytest.MonkeyPatch) -> CountCalls:
    """`count_calls(owner, name)`: the calls of `owner.name` during the test
    (`counted_calls`)."""
    return functools.partial(counted_calls, monkeypatch)


def counted_compiles(monkeypatch: pytest.MonkeyPatch, backend: type[Any]) -> list[str]:
    """The names of the kernels `backend` compiles from now on, in order (a counter of
    compiles: a kernel served by the cache is not compiled again)."""
    names: list[str] = []
    compile_kernel = backend.compile

    def counting(self: Any, module: Any, name: str) -> bytes:
        names.append(name)
        return compile_kernel(self, module, name)

    monkeypatch.setattr(backend, "compile", counting)
    return names


@pytest.fixture
def compiled_kernels(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the kernels the CPU backend compiles during the test, in order."""
    from xfuse.backends.cpu import CPUBackend

    return counted_compiles(monkeypatch, CPUBackend)


@pytest.fixture
def compiled_cuda_kernels(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the kernels the CUDA backend compiles during the test, in order: in this
    process (no compile workers), where the counter sees each."""
    from xfuse.backends.cuda import CUDABackend
    from xfuse.runtime.compile_workers import WORKERS_ENV

    monkeypatch.setenv(WORKERS_ENV, "0")
    return counted_compiles(monkeypatch, CUDABackend)
