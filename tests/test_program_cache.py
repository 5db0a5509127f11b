"""Fused programs in the kernel cache (`xfuse.runtime.driver.fuse_and_lower`): a second compilation of the
same program, in this process or another, skips the passes and the lowering and makes the
same program; other passes or devices never share an entry; an unusable entry is rebuilt.
Imported programs too (`xfuse.frontend.export.import_for_xfuse`, under their `export_key`): a second
compilation skips torch.export, binds the state of the module it is given, and exports
again where the computation changed. (A second process: tests/runtime/test_cache.py.)"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import xfuse
import xfuse.api
import xfuse.runtime.driver as driver
from tests.backends.test_cuda import gpu
from xfuse.errors import KernelCacheWarning
from xfuse.frontend.export import import_for_xfuse
from xfuse.pipeline import DEFAULT_PIPELINE
from xfuse.runtime.cache import IMPORT, PROGRAM, KernelCache, decode_entry


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.up = torch.nn.Linear(16, 32)
        self.requires_grad_(False)  # compiled programs are for inference

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.gelu(self.up(self.norm(x)))
        return torch.softmax(h, -1), h.view(2, 4, 32)


def _inputs() -> tuple[torch.Tensor]:
    return (torch.randn(8, 16),)


def _compile(cache: KernelCache, **options: Any) -> xfuse.api.CompiledProgram:
    torch.manual_seed(0)
    model = Block().eval()
    return xfuse.compile(model, _inputs(), quiet=True, fallback="error", cache=cache, **options)


def _explained(compiled: xfuse.api.CompiledProgram) -> tuple[Any, ...]:
    """What `xfuse.explain` shows of a compiled program."""
    return (
        compiled.default.op_names,
        [(g.ops, g.inputs, g.outputs, g.kind, g.rule, g.kernels) for g in compiled.groups],
        [(k.name, k.inputs, k.outputs, k.loop_ir) for k in compiled.kernels],
        compiled.report.to_dict(),
        compiled.fallbacks,
        str(compiled.default.program.module),
    )


def test_a_second_compilation_skips_the_passes_and_makes_the_same_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cold = _compile(KernelCache(tmp_path))
    assert list(tmp_path.glob(f"*/*.{PROGRAM}"))

    def no_passes(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the passes ran: the fused program was not taken from the cache")

    monkeypatch.setattr(driver, "run_pipeline", no_passes)
    fresh = KernelCache(tmp_path)  # as a second process would: nothing in memory
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warm = _compile(fresh)
    assert fresh.stats.program_hits == 1 and fresh.stats.compiles == 0
    assert _explained(warm) == _explained(cold)
    x = _inputs()[0]
    torch.manual_seed(0)
    want = Block().eval()(x)
    for got in (cold(x), warm(x)):
        torch.testing.assert_close(got, want)


def test_other_passes_or_devices_do_not_share_a_fused_program(tmp_path: Path) -> None:
    _compile(KernelCache(tmp_path))
    other_pipeline = KernelCache(tmp_path)
    _compile(other_pipeline, pipeline="fuse-greedy,group-cleanup")
    assert other_pipeline.stats.program_hits == 0
    other_layout = KernelCache(tmp_path)
    _compile(other_layout, channels_last=True)
    assert other_layout.stats.program_hits == 0
    same = KernelCache(tmp_path)
    _compile(same)
    assert same.stats.program_hits == 1


@pytest.mark.parametrize(
    ("payload", "reason"),
    [(None, "checksum mismatch"), (b"not a pickle", "does not load")],
)
def test_an_unusable_entry_is_rebuilt(tmp_path: Path, payload: bytes | None, reason: str) -> None:
    _compile(KernelCache(tmp_path))
    (path,) = tmp_path.glob(f"*/*.{PROGRAM}")
    good = path.read_bytes()
    if payload is None:
        path.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # a flipped bit
    else:
        cache = KernelCache(tmp_path)
        cache.store_program(path.stem, payload)
    cache = KernelCache(tmp_path)
    with pytest.warns(KernelCacheWarning, match=reason):
        compiled = _compile(cache)
    assert cache.stats.program_hits == 0  # an entry that does not load is no hit
    x = _inputs()[0]
    torch.manual_seed(0)
    torch.testing.assert_close(compiled(x), Block().eval()(x))
    assert decode_entry(path.stem, path.read_bytes()) != payload  # written again, whole
    again = KernelCache(tmp_path)
    _compile(again)
    assert again.stats.program_hits == 1


def test_a_cache_without_a_disk_keeps_fused_programs_in_memory() -> None:
    cache = KernelCache(None)
    _compile(cache)
    assert cache.stats.program_hits == 0
    warm = _compile(cache)
    assert cache.stats.program_hits == 1
    x = _inputs()[0]
    torch.manual_seed(0)
    torch.testing.assert_close(warm(x), Block().eval()(x))


def test_a_kernel_emptied_ahead_is_never_compiled_from_its_empty_body() -> None:
    """`lower_ahead` empties each kernel once its canonical module is made; a compiler without
    that module (a cached program without its sources) refuses the emptied kernel and
    compiles the group op by op, never an empty kernel."""
    from xfuse.runtime.compiler import LoweredUnits, ProgramCompiler

    x = torch.randn(4, 8)
    imported = import_for_xfuse(lambda a: torch.exp(a) * 2, (x,))
    module = imported.program.module
    driver.run_pipeline(DEFAULT_PIPELINE, module)
    units = ProgramCompiler(lambda source, name: None).lower_ahead(module)
    fresh = ProgramCompiler(lambda source, name: None, fallback="error")
    fresh.adopt(LoweredUnits(units.units, {}))
    (refused,) = fresh.compile(module).op_by_op
    assert "has no body to compile" in refused


def test_the_imported_module_is_verified_before_the_passes_unless_its_program_is_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`xfuse.compile` imports without verifying; `fuse_and_lower` verifies the module before
    the passes, and not on a warm start (the cached program's module verified when made)."""
    verified: list[str] = []
    real = driver.verify_module

    def recording(module: Any, *args: Any) -> None:
        verified.append(str(module))
        real(module, *args)

    monkeypatch.setattr(driver, "verify_module", recording)
    cold = _compile(KernelCache(tmp_path))
    assert len(verified) == 1 and "fusion.group" not in verified[0]  # before the passes
    assert "fusion.group" in str(cold.default.program.module)
    warm = KernelCache(tmp_path)
    _compile(warm)
    assert warm.stats.program_hits == 1 and len(verified) == 1


def _no_export(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("torch.export ran: the imported program was not in the cache")

    monkeypatch.setattr(torch.export, "export", refuse)


def test_a_second_compilation_skips_the_export_and_binds_its_own_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cold = _compile(KernelCache(tmp_path))
    assert list(tmp_path.glob(f"*/*.{IMPORT}"))
    _no_export(monkeypatch)
    fresh = KernelCache(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warm = _compile(fresh)
    assert fresh.stats.import_hits == 1 and fresh.stats.program_hits == 1
    assert _explained(warm) == _explained(cold)
    other = Block().eval()  # other weights: the program reads this module's
    again = xfuse.compile(
        other, _inputs(), quiet=True, fallback="error", cache=KernelCache(tmp_path)
    )
    x = _inputs()[0]
    for got, want in zip(again(x), other(x), strict=True):
        torch.testing.assert_close(got, want)
    with torch.no_grad():
        other.up.bias.add_(1.0)  # and its state as it is at each call
    for got, want in zip(again(x), other(x), strict=True):
        torch.testing.assert_close(got, want)


def test_a_changed_computation_is_exported_again(tmp_path: Path) -> None:
    held = torch.arange(8.0)

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * held

    x = torch.randn(4, 8)
    xfuse.compile(f, (x,), quiet=True, fallback="error", cache=KernelCache(tmp_path))
    held.mul_(-1)  # the lifted constant's value is the program's: another key
    cache = KernelCache(tmp_path)
    compiled = xfuse.compile(f, (x,), quiet=True, fallback="error", cache=cache)
    assert cache.stats.import_hits == 0
    torch.testing.assert_close(compiled(x), f(x))
    same = KernelCache(tmp_path)
    compiled = xfuse.compile(f, (x,), quiet=True, fallback="error", cache=same)
    assert same.stats.import_hits == 1
    torch.testing.assert_close(compiled(x), f(x))
    other_shape = KernelCache(tmp_path)
    xfuse.compile(f, (torch.randn(2, 8),), quiet=True, fallback="error", cache=other_shape)
    assert other_shape.stats.import_hits == 0


def test_a_program_without_a_key_is_exported_each_time(tmp_path: Path) -> None:
    class Counting(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1  # the replay cannot vouch for it
            return x * 2

    model, x = Counting(), torch.randn(3)
    for _ in range(2):
        cache = KernelCache(tmp_path)
        compiled = xfuse.compile(model, (x,), quiet=True, fallback="error", cache=cache)
        assert cache.stats.import_hits == 0
        torch.testing.assert_close(compiled(x), x * 2)
    assert not list(tmp_path.glob(f"*/*.{IMPORT}"))


@gpu
def test_a_cuda_program_is_taken_from_the_cache_with_its_state_bound(tmp_path: Path) -> None:
    """On CUDA the replay's shadows show the inputs' device, and the second compilation binds
    the CUDA module it is given."""
    torch.manual_seed(0)
    cold, warm = Block().eval().cuda(), Block().eval().cuda()
    x = _inputs()[0].cuda()
    xfuse.compile(cold, (x,), "cuda", quiet=True, fallback="error", cache=KernelCache(tmp_path))
    cache = KernelCache(tmp_path)
    compiled = xfuse.compile(warm, (x,), "cuda", quiet=True, fallback="error", cache=cache)
    assert cache.stats.import_hits == 1 and cache.stats.program_hits == 1
    for _ in range(3):  # CUDA graphs from the second call on
        for got, want in zip(compiled(x), warm(x), strict=True):
            torch.testing.assert_close(got, want)
