"""The model zoo (benchmarks/models.py, small configs, random weights) through both entry
points, against eager: f32 at 1e-4 relative to the output's magnitude (bf16 3e-2 on CUDA).

Strict mode (fallback="error") is the goal for every model; the models that still have a
group that falls back are marked xfail(strict=True) there, so the mark must go when they are
fixed. Without transformers the module skips."""

from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("transformers")

from benchmarks.models import (  # noqa: E402
    ZOO,
    assert_matches,
    build,
    via_torch_compile,
    via_xfuse_compile,
)
from xfuse.errors import EagerFallbackError, FallbackWarning  # noqa: E402

STRICT_CLEAN = {"bert", "resnet", "vit", "mobilenet_v2"}
"""Models with no eager graph and no eager group today (CPU)."""


def _strict(name: str) -> object:
    if name in STRICT_CLEAN:
        return name
    reason = "groups fall back to eager (LoopLoweringError), issue 16"
    return pytest.param(
        name, marks=pytest.mark.xfail(raises=EagerFallbackError, strict=True, reason=reason)
    )


def _check(name: str, entry: str, device: str, dtype: torch.dtype, fallback: str | None) -> None:
    model, inputs = build(name, "small", device, dtype)
    with torch.no_grad():
        want = model(*inputs)
        if entry == "xfuse.compile":
            fn, report = via_xfuse_compile(model, inputs, device, fallback)
        else:
            try:
                fn, report = via_torch_compile(model, inputs, fallback)
            except torch._dynamo.exc.BackendCompilerFailed as e:
                raise e.inner_exception from e  # xfuse's own error, not dynamo's wrapper
        got = fn(*inputs)
    assert report.graphs >= 1 and not report.graph_fallbacks
    assert_matches(got, want, dtype)


@pytest.mark.parametrize("entry", ["xfuse.compile", "torch.compile"])
@pytest.mark.parametrize("name", [_strict(n) for n in ZOO])
def test_zoo_strict_on_cpu(name: str, entry: str) -> None:
    _check(name, entry, "cpu", torch.float32, "error")


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_matches_eager_on_cpu_with_fallbacks(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        _check(name, "xfuse.compile", "cpu", torch.float32, "eager")


def test_a_causal_lm_with_its_default_cache_returns_the_cache() -> None:
    """use_cache=True (the default): the DynamicCache comes back, its tensors right."""
    from transformers import DynamicCache

    model, inputs = build("gpt2", "small", "cpu", torch.float32)
    assert model.config.use_cache
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        fn, _ = via_xfuse_compile(model, inputs, "cpu", "eager")
    with torch.no_grad():
        got, want = fn(*inputs), model(*inputs)
    assert isinstance(got.past_key_values, DynamicCache)
    assert_matches(got, want, torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("entry", ["xfuse.compile", "torch.compile"])
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_strict_on_cuda(name: str, entry: str, dtype: torch.dtype) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    _check(name, entry, "cuda", dtype, "error")
