"""The model zoo (benchmarks/models.py, small configs, random weights) through both entry
points, against eager: f32 at 1e-4 relative to the output's magnitude (bf16 3e-2 on CUDA).

Every model runs in strict mode (fallback="error"): no eager graph, no eager group, and no
group compiled op by op (fusion forms only groups that one kernel can express). Without
transformers the module skips."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

import xfuse  # noqa: E402
from benchmarks.models import (  # noqa: E402
    ZOO,
    assert_matches,
    build,
    tensors_of,
    via_torch_compile,
    via_xfuse_compile,
)
from xfuse.errors import FallbackWarning  # noqa: E402
from xfuse.runtime.cache import KernelCache  # noqa: E402
from xfuse.testing.fuzz.runner import program_structure  # noqa: E402


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
    if fallback == "error":
        assert report.op_by_op == [], report.op_by_op
    assert_matches(got, want, dtype)


@pytest.mark.parametrize("entry", ["xfuse.compile", "torch.compile"])
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_strict_on_cpu(name: str, entry: str) -> None:
    _check(name, entry, "cpu", torch.float32, "error")


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_matches_eager_on_cpu_with_fallbacks(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        _check(name, "xfuse.compile", "cpu", torch.float32, "eager")


@pytest.mark.parametrize("name", list(ZOO))
def test_a_warm_start_makes_the_program_a_cold_one_makes(name: str, tmp_path: Path) -> None:
    """The imported and the fused program taken from the cache (`xfuse.frontend.export.import_for_xfuse`,
    `fuse_and_lower`) are the programs export, fusing and lowering make: the same groups,
    kernels (loop IR) and steps, and the same results bit for bit; and the warm program reads
    the module's state as it is at each call."""
    model, inputs = build(name, "small", "cpu", torch.float32)
    with torch.no_grad():
        cold = xfuse.compile(
            model, inputs, quiet=True, fallback="error", cache=KernelCache(tmp_path)
        )
        cache = KernelCache(tmp_path)
        warm = xfuse.compile(model, inputs, quiet=True, fallback="error", cache=cache)
        assert cache.stats.import_hits == cache.stats.program_hits == 1
        assert cache.stats.compiles == 0
        assert program_structure(warm) == program_structure(cold)
        for a, b in zip(tensors_of(cold(*inputs)), tensors_of(warm(*inputs)), strict=True):
            assert torch.equal(a, b)
        for p in model.parameters():
            p.mul_(1.5)
        assert_matches(warm(*inputs), model(*inputs), torch.float32)


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
    # Each state is fresh memory with eager's layout (transformers' `cat` onto an empty
    # tensor), and the cache's layers look like eager's.
    states = [t for layer in got.past_key_values.layers for t in (layer.keys, layer.values)]
    eager_states = [t for layer in want.past_key_values.layers for t in (layer.keys, layer.values)]
    storages = {t.untyped_storage().data_ptr() for t in states}
    assert len(storages) == len(states)
    assert storages.isdisjoint(p.untyped_storage().data_ptr() for p in model.parameters())
    for t, e in zip(states, eager_states, strict=True):
        assert (t.shape, t.stride()) == (e.shape, e.stride())
    layers = zip(got.past_key_values.layers, want.past_key_values.layers, strict=True)
    for layer, eager_layer in layers:
        assert type(layer) is type(eager_layer)
        assert sorted(vars(layer)) == sorted(vars(eager_layer))
    assert got.past_key_values.get_seq_length() == want.past_key_values.get_seq_length()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("entry", ["xfuse.compile", "torch.compile"])
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_strict_on_cuda(name: str, entry: str, dtype: torch.dtype) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    # TF32 off through the flags context: torch's OpInfo module (imported by the OpInfo
    # sweep's tests) forbids setting cudnn's global flags.
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            _check(name, entry, "cuda", dtype, "error")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
