"""
The kernel cache: one for every backend, in memory and on disk.

A kernel is keyed by the sha256 of its loop IR text (which holds its shapes and dtypes), the
backend's target string, xfuse's version and the version of the code that turns loop IR into
an artifact (a digest of the backend's sources). `KernelCache.kernel` compiles a kernel at most
once per process, however many threads ask for it at the same time (a future per key), and at
most once per machine: artifacts are stored under `$XFUSE_CACHE_DIR` (default: the user's cache
directory, e.g. `~/.cache/xfuse`) so that a second process skips LLVM.

The same cache holds fused programs (`program`, keyed by `program_key`): a program's module
after the fusion passes with its units lowered to loop IR (`xfuse.ir.serialize`), so that a
second process compiling the same imported program skips the passes and the lowering too;
and imported programs (keyed by `import_key`), so that it skips torch.export as well.

A disk entry is a header (magic, entry format, payload length, key, payload sha256) and the
artifact, written to a temporary file and renamed into place, so a reader sees a whole entry or
none. An entry that is truncated, corrupt, for another key, or that the backend cannot load is
deleted and rebuilt with a `KernelCacheWarning`; the cache never makes a call fail.

Entries run code when they are loaded, so the cache reads and writes only a directory that no
one but the user (or root) can write (`xfuse.runtime.cache_trust`, checked once per directory
and process): it makes its directories owner-only (0700) and its entries 0600, and where a
directory or an entry fails the check it loads nothing from there, writes nothing there, says
so once (`KernelCacheWarning`) and works in memory.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import struct
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TypeVar

from xdsl.dialects.builtin import ModuleOp

from xfuse.backends import Backend, Kernel
from xfuse.errors import KernelCacheWarning, XfuseError
from xfuse.ir.context import parse
from xfuse.ir.functions import kernel_functions
from xfuse.runtime.cache_trust import (
    Untrusted,
    check_folder,
    check_root,
    read_entry,
    real_root,
    warn_untrusted,
)
from xfuse.runtime.compile_workers import MIN_JOBS, backend_spec, compile_in_workers, workers

T = TypeVar("T")

KERNEL, PROGRAM, IMPORT, CHOICE = "kernel", "program", "import", "choice"
"""The four kinds of entry, by file suffix: a kernel's artifact, a fused program (its module
after the passes and its kernels' loop IR, `xfuse.ir.serialize`), an imported program
(`xfuse.frontend.export.import_for_xfuse`), and a choice measured at compile time
(`xfuse.choices`)."""
MAGIC = b"XFUSEKC\x00"
ENTRY_FORMAT = 1
_HEADER = struct.Struct("<8sIQ32s32s")  # magic, entry format, payload length, key, sha256
_XFUSE_ROOT = Path(__file__).resolve().parent.parent


def default_cache_dir() -> Path:
    """`$XFUSE_CACHE_DIR`, else the platform's user cache directory + "xfuse"."""
    override = os.environ.get("XFUSE_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
        return base / "xfuse" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "xfuse"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "xfuse"


@cache
def xfuse_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("xfuse")
    except PackageNotFoundError:
        return "unknown"


@cache
def _sources_digest(files: tuple[Path, ...]) -> str:
    h = hashlib.sha256()
    for path in files:
        h.update(str(path.name).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


CODEGEN_PACKAGES = ("backends", "passes", "dialects", "ir")
"""xfuse's packages whose code turns loop IR into artifacts (the GPU mapping and the LLVM
lowering live in `passes`' subpackages)."""


@cache
def codegen_sources() -> tuple[Path, ...]:
    """The source files `backend_version` digests: every module of `CODEGEN_PACKAGES`, at any
    depth (listed once per process: a warm start keys dozens of kernels)."""
    files = {
        p.resolve() for package in CODEGEN_PACKAGES for p in (_XFUSE_ROOT / package).rglob("*.py")
    }
    return tuple(sorted(files))


@cache
def xfuse_sources() -> tuple[Path, ...]:
    """Every source file of xfuse: what a fused program (`program_key`) may depend on."""
    return tuple(sorted(p.resolve() for p in _XFUSE_ROOT.rglob("*.py")))


def program_key(module_fingerprint: str, passes: str, device: str) -> str:
    """The key of a fused program (`KernelCache.program`): the imported module's text (its
    `xfuse.ir.fingerprint`), the passes run on it (pipeline text and the device's passes with
    their options), the device type it is lowered for, and the code and versions that made it
    (`_made_by`)."""
    return _entry_key("program", module_fingerprint, passes, device)


def import_key(export_key: str) -> str:
    """The key of an imported program (held in the cache as fused programs are): the
    `xfuse.frontend.export_key` of the program torch.export traced, and the code and versions
    that exported and imported it (`_made_by`)."""
    return _entry_key("import", export_key)


def _entry_key(*parts: str) -> str:
    return hashlib.sha256("\x00".join([*parts, *_made_by()]).encode()).hexdigest()


def _made_by() -> tuple[str, ...]:
    """Every source of xfuse; torch, xDSL and Python, whose classes an entry pickles."""
    import torch
    import xdsl

    return (
        _sources_digest(xfuse_sources()),
        torch.__version__,
        str(getattr(xdsl, "__version__", "?")),
        sys.version,
        str(ENTRY_FORMAT),
    )


def backend_version(backend: Backend) -> str:
    """A digest of the code that turns loop IR into artifacts: the backend class's module and
    `codegen_sources()`. Editing them invalidates entries."""
    return _backend_version(type(backend))


@cache
def _backend_version(kind: type) -> str:
    """`backend_version` of a backend class (once per process: every kernel's key has it)."""
    files = set(codegen_sources())
    source = inspect.getsourcefile(kind)
    if source is not None:
        files.add(Path(source).resolve())
    return _sources_digest(tuple(sorted(files)))


@dataclass(frozen=True)
class KernelSource:
    """A module of loop IR with its text, printed once: a kernel's key is made of that text, and
    printing is most of the cost of keying a kernel found in the cache. Pickled (in a fused
    program) as its text and symbol: the module is parsed again only where it is needed, to
    compile a kernel that no cache holds."""

    text: str
    symbol: str | None
    """The symbol of the module's only kernel (None: it holds none or several)."""
    parsed: ModuleOp | None = field(default=None, repr=False, compare=False)

    @staticmethod
    def of(module: ModuleOp | KernelSource) -> KernelSource:
        if isinstance(module, KernelSource):
            return module
        return KernelSource(str(module), _only_kernel(module), module)

    @property
    def module(self) -> ModuleOp:
        if self.parsed is None:
            object.__setattr__(self, "parsed", parse(self.text))
        assert self.parsed is not None
        return self.parsed

    def __reduce__(self) -> tuple[type[KernelSource], tuple[str, str | None]]:
        return KernelSource, (self.text, self.symbol)


def kernel_key(ir_text: str, target: str, backend_code: str) -> str:
    parts = (ir_text, target, xfuse_version(), backend_code, str(ENTRY_FORMAT))
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


@dataclass
class CacheStats:
    memory_hits: int = 0
    disk_hits: int = 0
    compiles: int = 0
    rebuilt: int = 0
    program_hits: int = 0
    """Fused programs found (`KernelCache.program`): compilations that skipped the passes."""
    import_hits: int = 0
    """Imported programs found (`KernelCache.program` of `IMPORT`): compilations that skipped
    torch.export."""
    choice_hits: int = 0
    """Choices measured at compile time, read from the cache (`xfuse.choices`)."""


class CorruptEntry(XfuseError):
    """A disk entry whose header or payload does not check out."""


def encode_entry(key: str, artifact: bytes) -> bytes:
    digest = hashlib.sha256(artifact).digest()
    header = _HEADER.pack(MAGIC, ENTRY_FORMAT, len(artifact), bytes.fromhex(key), digest)
    return header + artifact


def decode_entry(key: str, data: bytes) -> bytes:
    """The artifact of an entry, or `CorruptEntry` saying what is wrong with it."""
    if len(data) < _HEADER.size:
        raise CorruptEntry(f"{len(data)} bytes, shorter than the {_HEADER.size}-byte header")
    magic, fmt, length, stored_key, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptEntry("bad magic")
    if fmt != ENTRY_FORMAT:
        raise CorruptEntry(f"entry format {fmt}, expected {ENTRY_FORMAT}")
    payload = data[_HEADER.size :]
    if len(payload) != length:
        raise CorruptEntry(f"payload of {len(payload)} bytes, header says {length}")
    if stored_key != bytes.fromhex(key):
        raise CorruptEntry("entry is for another key")
    if hashlib.sha256(payload).digest() != digest:
        raise CorruptEntry("checksum mismatch")
    return payload


class KernelCache:
    """Kernels by key, in memory and (unless `directory` is None) on disk. Thread-safe."""

    def __init__(self, directory: Path | None):
        self.directory = directory
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._kernels: dict[tuple[str, str], Kernel] = {}
        """(key, name) -> the kernel loaded under that name."""
        self._artifacts: dict[str, bytes] = {}
        self._programs: dict[str, bytes] = {}
        """Fused programs by `program_key` (see `program`)."""
        self._pending: dict[str, Future[Kernel]] = {}
        self._disk_ok = directory is not None
        self._root: Path | None = None
        """`directory`'s real path once the trust check passed it (`_trusted_root`)."""

    def key(self, backend: Backend, module: ModuleOp | KernelSource) -> str:
        return kernel_key(KernelSource.of(module).text, backend.target, backend_version(backend))

    def kernel(self, backend: Backend, source: ModuleOp | KernelSource, name: str) -> Kernel:
        """The kernel `@name` of `source` (a module of loop IR, or a `KernelSource` that has
        its text already) for `backend`: from memory, from disk, or compiled (once, however
        many threads ask at the same time).

        A module of one kernel may name it otherwise (the runtime's canonical symbol, so that
        the same computation has one key wherever it came from): the kernel is compiled under
        its own symbol and `name` is applied when it is loaded (`named_artifact`), so that
        profilers show it and the key never holds it."""
        known = KernelSource.of(source)
        symbol = known.symbol or name
        key = self.key(backend, known)
        with self._lock:
            found = self._kernels.get((key, name))
            if found is not None:
                self.stats.memory_hits += 1
                return found
            artifact = self._artifacts.get(key)
        if artifact is not None:  # compiled already, under another name
            kernel = _load_named(backend, artifact, symbol, name)
            with self._lock:
                self.stats.memory_hits += 1
                return self._kernels.setdefault((key, name), kernel)
        with self._lock:
            future = self._pending.get(key)
            owner = future is None
            if future is None:
                future = Future()
                self._pending[key] = future
        if not owner:
            future.result()
            return self.kernel(backend, known, name)
        try:
            artifact, kernel = self._build(backend, known, symbol, name, key)
        except BaseException as e:
            with self._lock:
                del self._pending[key]
            future.set_exception(e)
            raise
        with self._lock:
            self._kernels[(key, name)] = kernel
            self._artifacts[key] = artifact
            del self._pending[key]
        future.set_result(kernel)
        return kernel

    def compile_ahead(self, backend: Backend, modules: Sequence[ModuleOp | KernelSource]) -> int:
        """Compile in worker processes (`xfuse.runtime.compile_workers`) the kernels of `modules`
        (one canonical kernel each) that neither memory nor disk holds, and keep them as
        `kernel` would; returns how many. Nothing happens for a backend no worker can rebuild,
        with fewer than two workers, or for fewer than `MIN_JOBS` such kernels."""
        spec, processes = backend_spec(backend), workers()
        if spec is None or processes < 2:
            return 0
        version = backend_version(backend)
        todo: dict[str, tuple[str, str]] = {}
        for source in map(KernelSource.of, modules):
            symbol, text = source.symbol, source.text
            key = kernel_key(text, backend.target, version)
            with self._lock:
                known = key in self._artifacts
            root = self._trusted_root(create=False)
            on_disk = root is not None and _entry_at(root, key, KERNEL).exists()
            if symbol is not None and not known and not on_disk:
                todo.setdefault(key, (text, symbol))
        if len(todo) < MIN_JOBS:
            return 0
        done = 0
        artifacts = compile_in_workers(spec, list(todo.values()), processes)
        for key, artifact in zip(todo, artifacts, strict=True):
            if artifact is None:
                continue  # `kernel` compiles it in this process, and reports its error
            self._write(key, artifact)
            with self._lock:
                self._artifacts.setdefault(key, artifact)
                self.stats.compiles += 1
            done += 1
        return done

    @property
    def on_disk(self) -> bool:
        """Whether entries go to disk: a directory that the trust check passes (or that does
        not exist yet: the cache makes it owner-only), and no error has turned it off."""
        self._trusted_root(create=False)
        return self._disk_ok

    def program(self, key: str, load: Callable[[bytes], T], kind: str = PROGRAM) -> T | None:
        """The fused program (or, with `kind` `IMPORT`, the imported program) stored under
        `key` (`program_key`, `import_key`; `xfuse.runtime.driver` and `xfuse.frontend.export`
        write and read them), from disk (or from memory, where the cache has no usable disk), as
        `load` makes it of the entry's bytes; None where neither holds it. An entry `load`
        fails on is deleted with a `KernelCacheWarning` (as a kernel the backend cannot load),
        and None returned: the caller makes the program again."""
        with self._lock:
            data = self._programs.get(key)
        if data is None:
            data = self._read(key, kind)
        if data is None:
            return None
        try:
            found = load(data)
        except Exception as e:  # noqa: BLE001 - rebuilt by the caller, the entry replaced
            with self._lock:
                self._programs.pop(key, None)
            self._discard(key, f"it does not load: {type(e).__name__}: {e}", kind)
            return None
        with self._lock:
            if kind == IMPORT:
                self.stats.import_hits += 1
            elif kind == CHOICE:
                self.stats.choice_hits += 1
            else:
                self.stats.program_hits += 1
        return found

    def store_program(self, key: str, data: bytes, kind: str = PROGRAM) -> None:
        """Keep a fused (or imported) program: on disk, or in memory where the cache has no
        usable disk (a process that compiles thousands of programs, as the fuzzer does, keeps
        none of them in memory otherwise)."""
        self._write(key, data, kind)
        if not self._disk_ok:
            with self._lock:
                self._programs[key] = data

    def clear_memory(self) -> None:
        with self._lock:
            self._kernels.clear()
            self._artifacts.clear()
            self._programs.clear()

    def entry_path(self, key: str, kind: str = KERNEL) -> Path:
        assert self.directory is not None
        return _entry_at(self.directory, key, kind)

    def _trusted_root(self, create: bool) -> Path | None:
        """The real path of `directory` where the disk is in use and the trust check passes
        it (made owner-only, with its missing parents, where `create`); else None. A root
        that fails turns the disk off with a warning; one that does not exist yet does not."""
        if not self._disk_ok or self.directory is None:
            return None
        if self._root is not None:
            return self._root
        root = real_root(self.directory)

        def checked() -> Path:
            check_root(root, create)
            return root

        self._root = self._on_disk(root, f"cannot use {root}", checked)
        return self._root

    def _on_disk(self, root: Path, failing: str, action: Callable[[], T]) -> T | None:
        """`action()` on the disk under `root`, or None: where what it looks for does not
        exist, and where it fails, which turns the disk off with a warning (the trust one for
        an `Untrusted` path, else `failing`, e.g. "cannot read <path>", and the error)."""
        try:
            return action()
        except FileNotFoundError:
            return None
        except Untrusted as e:
            self._distrust(root, e)
        except OSError as e:
            self._disable_disk(f"{failing}: {e}")
        return None

    def _build(
        self, backend: Backend, source: KernelSource, symbol: str, name: str, key: str
    ) -> tuple[bytes, Kernel]:
        artifact = self._read(key)
        if artifact is not None:
            try:
                kernel = _load_named(backend, artifact, symbol, name)
            except Exception as e:
                self._discard(key, f"the backend could not load it ({type(e).__name__}: {e})")
            else:
                with self._lock:
                    self.stats.disk_hits += 1
                return artifact, kernel
        artifact = backend.compile(source.module, symbol)
        with self._lock:
            self.stats.compiles += 1
        self._write(key, artifact)
        return artifact, _load_named(backend, artifact, symbol, name)

    def _read(self, key: str, kind: str = KERNEL) -> bytes | None:
        root = self._trusted_root(create=False)
        if root is None:
            return None
        path = _entry_at(root, key, kind)

        def entry() -> bytes:
            check_folder(path.parent, create=False)
            return read_entry(path)

        data = self._on_disk(root, f"cannot read {path}", entry)
        if data is None:
            return None
        try:
            return decode_entry(key, data)
        except CorruptEntry as e:
            self._discard(key, str(e), kind)
            return None

    def _discard(self, key: str, reason: str, kind: str = KERNEL) -> None:
        """Warn that the entry for `key` is unusable and delete it (from a trusted disk; one
        kept in memory only is forgotten by the caller)."""
        root = self._root if self._disk_ok else None
        path = _entry_at(root, key, kind) if root is not None else None
        warnings.warn(
            f"xfuse: kernel cache entry {path or key} is unusable ({reason}); rebuilding it",
            KernelCacheWarning,
            stacklevel=4,
        )
        with self._lock:
            self.stats.rebuilt += 1
        if path is not None:
            path.unlink(missing_ok=True)

    def _write(self, key: str, artifact: bytes, kind: str = KERNEL) -> None:
        """Store an entry (0600, in owner-only folders) where the disk is trusted."""
        root = self._trusted_root(create=True)
        if root is None:
            return
        path = _entry_at(root, key, kind)
        try:
            check_folder(path.parent, create=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=f".{kind}")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(encode_entry(key, artifact))
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except Untrusted as e:
            self._distrust(root, e)
        except OSError as e:
            self._disable_disk(f"cannot write {path}: {e}")

    def _disable_disk(self, reason: str) -> None:
        self._disk_ok = False
        warnings.warn(
            f"xfuse: the kernel cache works in memory only from now on ({reason})",
            KernelCacheWarning,
            stacklevel=4,
        )

    def _distrust(self, root: Path, problem: Untrusted) -> None:
        """Turn the disk off: someone else could write `root` (`problem` says where and how)."""
        self._disk_ok = False
        warn_untrusted(root, problem)


def _entry_at(root: Path, key: str, kind: str) -> Path:
    return root / key[:2] / f"{key}.{kind}"


def _only_kernel(module: ModuleOp) -> str | None:
    """The symbol of the module's kernel when it holds exactly one."""
    kernels = kernel_functions(module)
    return kernels[0].sym_name.data if len(kernels) == 1 else None


def named_artifact(artifact: bytes, symbol: str, name: str) -> bytes:
    """A PTX artifact (text: its launch line and PTX) whose kernel `symbol` is called `name`
    (the entry and the launch line; parameter names, which are local, stay)."""
    pattern = re.compile(rb"(?<![\w$.])" + re.escape(symbol.encode()) + rb"(?![\w$])")
    return pattern.sub(name.encode(), artifact)


def _load_named(backend: Backend, artifact: bytes, symbol: str, name: str) -> Kernel:
    """`artifact`'s kernel `symbol`, loaded under `name`: renamed in the code where the code is
    text that profilers show (CUDA's PTX), else named so in Python (a CPU kernel's object file
    keeps its symbol; its name is what errors and the step profile show)."""
    if name == symbol:
        return backend.load(artifact, name)
    if backend.target.startswith("cuda"):
        return backend.load(named_artifact(artifact, symbol, name), name)
    kernel = backend.load(artifact, symbol)
    kernel.name = name
    return kernel


_caches: dict[Path, KernelCache] = {}
_caches_lock = threading.Lock()


def default_cache() -> KernelCache:
    """The process's cache for the current `default_cache_dir()` (one per directory)."""
    directory = default_cache_dir()
    with _caches_lock:
        found = _caches.get(directory)
        if found is None:
            found = _caches[directory] = KernelCache(directory)
        return found
