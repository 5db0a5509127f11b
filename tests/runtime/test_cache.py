"""The kernel cache: once per key under threads, once per machine across processes, and
corrupt entries rebuilt, never a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import pytest
from runtime_fakes import ReferenceBackend, fake_lower_to_loops
from xdsl.dialects.builtin import ModuleOp

from xfuse.errors import CodegenError, KernelCacheWarning
from xfuse.interpreters.graph import find_function
from xfuse.ir.context import parse
from xfuse.runtime.cache import (
    CorruptEntry,
    KernelCache,
    KernelSource,
    codegen_sources,
    decode_entry,
    default_cache,
    default_cache_dir,
    encode_entry,
)

GROUP = """
func.func @forward(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = fusion.group (%x, %y) kind = "elementwise" rule = "test" : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>):
    %m = graph.mul %a, %b : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    %e = graph.exp %m : tensor<4x8xf32>
    fusion.yield %e : tensor<4x8xf32>
  }
  func.return %r : tensor<4x8xf32>
}
"""


def kernel_module(text: str = GROUP) -> tuple[ModuleOp, str]:
    """A module holding one kernel func (as the runtime gives backends), and its name."""
    module = parse(text)
    fake_lower_to_loops(module)
    forward = find_function(module, "forward")
    forward.detach()
    kernel = find_function(module)
    return module, kernel.sym_name.data


def test_entry_round_trip_and_every_corruption() -> None:
    key = "ab" * 32
    data = encode_entry(key, b"artifact bytes")
    assert decode_entry(key, data) == b"artifact bytes"
    corruptions = {
        "truncated": data[:-3],
        "header only in part": data[:10],
        "bad magic": b"Y" + data[1:],
        "flipped payload byte": data[:-1] + bytes([data[-1] ^ 1]),
    }
    for bad in corruptions.values():
        with pytest.raises(CorruptEntry):
            decode_entry(key, bad)
    with pytest.raises(CorruptEntry, match="another key"):
        decode_entry("cd" * 32, data)


def test_eight_threads_compile_the_same_kernel_once(tmp_path: Path) -> None:
    backend = ReferenceBackend(delay=0.2)
    cache = KernelCache(tmp_path)
    module, name = kernel_module()
    barrier = threading.Barrier(8)
    kernels: list[object] = []

    def worker() -> None:
        barrier.wait()
        kernels.append(cache.kernel(backend, module, name))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert backend.compiles == 1
    assert len(kernels) == 8 and all(k is kernels[0] for k in kernels)
    assert cache.stats.compiles == 1
    assert list(tmp_path.rglob("*.kernel"))


def test_a_failed_compile_reaches_every_waiter_and_is_retried(tmp_path: Path) -> None:
    backend = ReferenceBackend(delay=0.1, fail_if=lambda source: True)
    cache = KernelCache(tmp_path)
    module, name = kernel_module()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            cache.kernel(backend, module, name)
        except CodegenError as e:
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 4
    backend.fail_if = None
    cache.kernel(backend, module, name)
    assert backend.compiles >= 2


def test_memory_hit_and_disk_hit_in_a_fresh_cache(tmp_path: Path) -> None:
    backend = ReferenceBackend()
    module, name = kernel_module()
    first = KernelCache(tmp_path)
    k1 = first.kernel(backend, module, name)
    assert first.kernel(backend, module, name) is k1
    assert first.stats.memory_hits == 1
    second = KernelCache(tmp_path)
    second.kernel(backend, module, name)
    assert backend.compiles == 1
    assert second.stats.disk_hits == 1 and second.stats.compiles == 0


def test_another_target_is_another_entry(tmp_path: Path) -> None:
    module, name = kernel_module()
    cache = KernelCache(tmp_path)
    a, b = ReferenceBackend(target="t1"), ReferenceBackend(target="t2")
    cache.kernel(a, module, name)
    cache.kernel(b, module, name)
    assert a.compiles == 1 and b.compiles == 1
    assert len(list(tmp_path.rglob("*.kernel"))) == 2


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_a_damaged_entry_is_rebuilt_with_a_warning(tmp_path: Path, damage: str) -> None:
    backend = ReferenceBackend()
    module, name = kernel_module()
    KernelCache(tmp_path).kernel(backend, module, name)
    (entry,) = tmp_path.rglob("*.kernel")
    data = entry.read_bytes()
    damaged = {
        "truncate": data[: len(data) // 2],
        "flip": data[:-1] + bytes([data[-1] ^ 0xFF]),
        "empty": b"",
        "garbage": os.urandom(len(data)),
    }[damage]
    entry.write_bytes(damaged)
    cache = KernelCache(tmp_path)
    with pytest.warns(KernelCacheWarning, match="unusable"):
        kernel = cache.kernel(backend, module, name)
    assert kernel is not None
    assert backend.compiles == 2 and cache.stats.rebuilt == 1
    key = cache.key(backend, module)
    assert decode_entry(key, entry.read_bytes()) == decode_entry(key, data)


def test_an_entry_the_backend_cannot_load_is_rebuilt(tmp_path: Path) -> None:
    backend = ReferenceBackend()
    module, name = kernel_module()
    cache = KernelCache(tmp_path)
    key = cache.key(backend, module)
    path = cache.entry_path(key)
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_entry(key, b"not IR at all {"))  # a valid entry, a stale artifact
    with pytest.warns(KernelCacheWarning, match="could not load"):
        cache.kernel(backend, module, name)
    assert backend.compiles == 1
    assert decode_entry(key, path.read_bytes()) != b"not IR at all {"


def test_an_unusable_directory_degrades_to_memory_only(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory should be")
    backend = ReferenceBackend()
    module, name = kernel_module()
    cache = KernelCache(blocker / "cache")
    with pytest.warns(KernelCacheWarning, match="memory only"):
        k = cache.kernel(backend, module, name)
    assert cache.kernel(backend, module, name) is k
    assert backend.compiles == 1


def test_cache_dir_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XFUSE_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    assert default_cache().directory == tmp_path / "c"
    monkeypatch.delenv("XFUSE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert default_cache_dir() == tmp_path / "xdg" / "xfuse"


_SECOND_PROCESS = """
import json, sys, warnings
sys.path.insert(0, {tests!r})
from pathlib import Path
from runtime_fakes import ReferenceBackend
from test_cache import kernel_module
from xfuse.runtime.cache import default_cache
backend = ReferenceBackend()
module, name = kernel_module()
cache = default_cache()
kernel = cache.kernel(backend, module, name)
print(json.dumps({{"compiles": backend.compiles, "disk_hits": cache.stats.disk_hits,
                  "dir": str(cache.directory)}}))
"""


def _in_a_new_process(script: str, cache_dir: Path) -> dict[str, object]:
    """What `script` prints last (a JSON object), run by a new Python over `cache_dir`."""
    env = {**os.environ, "XFUSE_CACHE_DIR": str(cache_dir), "XFUSE_COMPILE_WORKERS": "0"}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_hits_the_disk_cache(tmp_path: Path) -> None:
    script = _SECOND_PROCESS.format(tests=str(Path(__file__).parent))
    first, second = _in_a_new_process(script, tmp_path), _in_a_new_process(script, tmp_path)
    assert first == {"compiles": 1, "disk_hits": 0, "dir": str(tmp_path)}
    assert second == {"compiles": 0, "disk_hits": 1, "dir": str(tmp_path)}


_FUSED_IN_A_NEW_PROCESS = """
import json
import torch, xfuse
from xfuse.runtime.cache import default_cache
def f(x):
    return torch.softmax(x * 2, -1) + x.sum(0)
x = torch.randn(4, 8)
compiled = xfuse.compile(f, (x,), quiet=True, fallback="error")
torch.testing.assert_close(compiled(x), f(x))
stats = default_cache().stats
print(json.dumps({"program_hits": stats.program_hits, "import_hits": stats.import_hits,
                  "compiles": stats.compiles}))
"""


def test_a_second_process_takes_the_fused_program_from_the_disk(tmp_path: Path) -> None:
    """(`xfuse.runtime.driver.fuse_and_lower`, `xfuse.frontend.export.import_for_xfuse`) The second process neither exports,
    fuses nor compiles a kernel."""
    first = _in_a_new_process(_FUSED_IN_A_NEW_PROCESS, tmp_path)
    second = _in_a_new_process(_FUSED_IN_A_NEW_PROCESS, tmp_path)
    assert first["program_hits"] == first["import_hits"] == 0 and first["compiles"] != 0
    assert second == {"program_hits": 1, "import_hits": 1, "compiles": 0}


def test_no_warning_on_a_clean_hit(tmp_path: Path) -> None:
    backend = ReferenceBackend()
    module, name = kernel_module()
    KernelCache(tmp_path).kernel(backend, module, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        KernelCache(tmp_path).kernel(backend, module, name)


def test_a_kernel_is_named_at_load_time_and_the_key_holds_no_name(tmp_path: Path) -> None:
    """(host path) One compile serves every name of the same kernel; each load has its name."""
    backend = ReferenceBackend()
    cache = KernelCache(tmp_path)
    module, _ = kernel_module()
    first = cache.kernel(backend, module, "xfuse_mul_exp")
    second = cache.kernel(backend, module, "xfuse_other")
    assert backend.compiles == 1 and cache.stats.memory_hits == 1
    assert (first.name, second.name) == ("xfuse_mul_exp", "xfuse_other")
    assert cache.kernel(backend, module, "xfuse_mul_exp") is first
    fresh = KernelCache(tmp_path)
    assert fresh.kernel(backend, module, "xfuse_third").name == "xfuse_third"
    assert backend.compiles == 1 and fresh.stats.disk_hits == 1


def test_ptx_renamed_at_load_time_assembles(tmp_path: Path) -> None:
    """(host path) A CUDA kernel compiled under the canonical symbol, renamed for profilers:
    its entry and launch line carry the name, and ptxas takes it."""
    import shutil

    import torch

    from xfuse.backends.cuda import LAUNCH_PREFIX, CUDABackend
    from xfuse.frontend.export import import_for_xfuse
    from xfuse.pipeline import DEFAULT_PIPELINE
    from xfuse.runtime.cache import named_artifact
    from xfuse.runtime.compiler import CANONICAL_KERNEL, ProgramCompiler
    from xfuse.runtime.driver import run_pipeline

    backend = CUDABackend("sm_90")
    artifacts: list[bytes] = []

    def compile_kernel(source: KernelSource, name: str) -> object:
        artifact = backend.compile(source.module, CANONICAL_KERNEL)
        artifacts.append(named_artifact(artifact, CANONICAL_KERNEL, name))
        raise CodegenError("not loaded here")  # the program falls back; the PTX is kept

    imported = import_for_xfuse(lambda x: torch.softmax(x * 2, -1), (torch.randn(4, 8),), {})
    run_pipeline(DEFAULT_PIPELINE, imported.program.module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ProgramCompiler(compile_kernel, device="meta").compile(imported.program.module)
    assert artifacts
    ptx = artifacts[0].decode()
    launch = json.loads(ptx.splitlines()[0].removeprefix(LAUNCH_PREFIX))
    assert launch["kernel"].startswith("xfuse_mul_reduce_max")
    assert f".entry {launch['kernel']}(" in ptx and CANONICAL_KERNEL not in ptx.split("(")[0]
    ptxas = shutil.which("ptxas")
    if ptxas is not None:
        source = tmp_path / "k.ptx"
        source.write_text(ptx)
        done = subprocess.run(
            [ptxas, "-arch=sm_90", str(source), "-o", str(tmp_path / "k.cubin")],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr


def test_cpu_kernels_are_named_for_their_ops() -> None:
    """(host path) Kernels carry their unit's ops, not `forward_k0`."""
    import torch

    import xfuse

    compiled = xfuse.compile(lambda x: torch.softmax(x * 2, -1), (torch.randn(4, 8),), quiet=True)
    names = [step.kernel.name for step in compiled.default.program.steps if hasattr(step, "kernel")]
    assert names and all(n.startswith("xfuse_mul_reduce_max") for n in names), names


def test_code_that_maps_and_lowers_kernels_keys_the_cache() -> None:
    # the GPU mapping and the LLVM lowering live in subpackages of xfuse.passes: editing them
    # must invalidate cached kernels as editing the backends does
    names = {(p.parent.name, p.name) for p in codegen_sources()}
    for module in [
        ("lowering", "gpu_map_parallel.py"),
        ("lowering", "lower_to_loops.py"),
        ("llvm", "lower_to_nvvm.py"),
        ("backends", "cuda.py"),
        ("passes", "options.py"),
    ]:
        assert module in names
