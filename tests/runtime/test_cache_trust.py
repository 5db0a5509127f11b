"""The kernel cache as a trust boundary (`xfuse.runtime.cache_trust`): entries run code when
loaded, so a directory or entry someone else could write is refused with one warning, the
program compiles in memory and matches eager, and nothing is read from or written there."""

from __future__ import annotations

import os
import pickle
import shutil
import stat
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from runtime_fakes import ReferenceBackend
from test_cache import kernel_module

import xfuse
from xfuse.errors import KernelCacheWarning
from xfuse.runtime import cache_trust
from xfuse.runtime.cache import IMPORT, KernelCache, encode_entry

NOBODY = 65534


def model(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x * 2, -1) + x.sum(0)


def compile_with(cache: KernelCache) -> list[warnings.WarningMessage]:
    """Compile and run `model` through `cache`, checked against eager; the trust warnings."""
    x = torch.randn(4, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = xfuse.compile(model, (x,), quiet=True, fallback="error", cache=cache)
        torch.testing.assert_close(compiled(x), model(x))
    return [w for w in caught if issubclass(w.category, KernelCacheWarning)]


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under `root` with its mode, owner and size: what a write would change."""
    found = {}
    for p in [root, *root.rglob("*")]:
        st = p.lstat()
        found[str(p.relative_to(root))] = (st.st_mode, st.st_uid, st.st_size)
    return found


def filled(root: Path) -> Path:
    """`root` holding the entries of `model` (a private cache, compiled once)."""
    assert compile_with(KernelCache(root)) == []
    assert list(root.rglob("*.import")) and list(root.rglob("*.kernel"))
    return root


def filled_copy(tmp: Path) -> Path:
    """`tmp / "cache"`: a copy of a filled cache that this process has not checked yet (it
    keeps each directory's verdict: only its owner could change it)."""
    return Path(shutil.copytree(filled(tmp / "source"), tmp / "cache"))


def chown_or_skip(path: Path) -> None:
    try:
        os.chown(path, NOBODY, -1, follow_symlinks=False)
    except PermissionError:
        pytest.skip(f"cannot give {path} to uid {NOBODY}: the test needs to run as root")


def writable_by_others(tmp: Path) -> Path:
    root = tmp / "cache"
    root.mkdir()
    root.chmod(0o777)
    return root


def writable_by_its_group(tmp: Path) -> Path:
    root = tmp / "cache"
    root.mkdir()
    root.chmod(0o770)
    return root


def entries_of_another_user(tmp: Path) -> Path:
    root = filled_copy(tmp)
    for entry in root.rglob("*.*"):
        chown_or_skip(entry)
    return root


def folder_of_another_user(tmp: Path) -> Path:
    root = filled_copy(tmp)
    for folder in root.iterdir():
        chown_or_skip(folder)
    return root


def link_to_a_writable_folder(tmp: Path) -> Path:
    """A private folder whose path goes through a link to a folder anyone can write."""
    scratch = tmp / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)
    mine = tmp / "mine"
    mine.mkdir(mode=0o700)
    (mine / "cache").symlink_to(scratch)
    return mine / "cache"


def under_a_writable_parent(tmp: Path) -> Path:
    """A private root whose parent anyone can write (not sticky): it could be replaced."""
    shared = tmp / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "cache").mkdir(mode=0o700)
    return shared / "cache"


def link_inside_the_cache(tmp: Path) -> Path:
    """A private cache whose entry folders are links to a folder anyone can write."""
    root = filled_copy(tmp)
    scratch = tmp / "scratch"
    scratch.mkdir()
    scratch.chmod(0o777)
    for folder in list(root.iterdir()):
        shutil.rmtree(folder)
        folder.symlink_to(scratch)
    return root


UNSAFE: dict[str, Callable[[Path], Path]] = {
    "writable by others": writable_by_others,
    "writable by its group": writable_by_its_group,
    "entries of another user": entries_of_another_user,
    "a folder of another user": folder_of_another_user,
    "a link to a writable folder": link_to_a_writable_folder,
    "under a writable parent": under_a_writable_parent,
    "a link inside the cache": link_inside_the_cache,
}
REASONS = {
    "writable by others": "writable by group and others (mode 0777)",
    "writable by its group": "writable by its group (mode 0770)",
    "entries of another user": f"owned by uid {NOBODY}",
    "a folder of another user": f"owned by uid {NOBODY}",
    "a link to a writable folder": "scratch is writable by group and others",
    "under a writable parent": "shared is writable by group and others",
    "a link inside the cache": "symbolic link",
}


@pytest.mark.parametrize("case", list(UNSAFE))
def test_an_unsafe_cache_is_refused_once_and_the_program_still_runs(
    case: str, tmp_path: Path
) -> None:
    root = UNSAFE[case](tmp_path)
    before = snapshot(tmp_path)
    (warning,) = compile_with(KernelCache(root))
    message = str(warning.message)
    assert "does not use" in message and REASONS[case] in message, message
    assert "XFUSE_CACHE_DIR" in message
    if "writable" in REASONS[case]:
        assert "chmod go-w" in message
    second = KernelCache(root)
    assert compile_with(second) == []  # said once per directory and process
    assert not second.on_disk
    assert snapshot(tmp_path) == before  # nothing written into the unsafe folder


def _forge(root: Path, marker: Path) -> None:
    """Replace every entry's payload by a pickle that creates `marker` when it is loaded, in a
    valid entry (header, length, key and checksum as the cache writes them)."""

    class Creates:
        def __reduce__(self) -> tuple[object, tuple[str, str]]:
            return open, (str(marker), "w")

    payload = pickle.dumps(Creates())
    for entry in root.rglob("*.*"):
        entry.write_bytes(encode_entry(entry.name.split(".")[0], payload))


def test_a_forged_entry_in_an_unsafe_folder_is_never_unpickled(tmp_path: Path) -> None:
    source = filled(tmp_path / "source")
    marker = tmp_path / "pwned"
    # in a private folder, the forged entry is live: loading it runs its code
    live = tmp_path / "live"
    shutil.copytree(source, live)
    _forge(live, marker)
    (entry,) = live.rglob("*.import")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        KernelCache(live).program(entry.stem, pickle.loads, IMPORT)
    assert marker.exists()
    marker.unlink()
    # the same entries where others could have written them are never loaded
    unsafe = tmp_path / "unsafe"
    shutil.copytree(source, unsafe)
    _forge(unsafe, marker)
    unsafe.chmod(0o777)
    (warning,) = compile_with(KernelCache(unsafe))
    assert "writable by group and others" in str(warning.message)
    assert not marker.exists()


def test_a_private_cache_is_made_owner_only_and_loads_as_before(tmp_path: Path) -> None:
    root = tmp_path / "made" / "here"
    filled(root)
    for folder in [root.parent, root, *root.iterdir()]:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for entry in root.rglob("*.*"):
        assert stat.S_IMODE(entry.stat().st_mode) == 0o600, entry
    warm = KernelCache(root)
    assert compile_with(warm) == []
    assert warm.stats.import_hits == 1 and warm.stats.program_hits == 1
    assert warm.stats.compiles == 0


def test_a_cache_below_a_sticky_folder_or_through_a_link_to_a_private_one_is_used(
    tmp_path: Path,
) -> None:
    """A sticky folder (as /tmp) lets no one rename or remove the root; a link is followed
    to a private folder, where the entries go."""
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    private = filled(sticky / "cache")
    (tmp_path / "link").symlink_to(private)
    through_link = KernelCache(tmp_path / "link")
    assert compile_with(through_link) == []
    assert through_link.stats.import_hits == 1 and through_link.on_disk


def test_a_directory_is_checked_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm start checks each entry it opens and no directory again (stat calls only)."""
    backend = ReferenceBackend()
    module, name = kernel_module()
    KernelCache(tmp_path).kernel(backend, module, name)
    checked: list[str] = []
    check = cache_trust.problem_of

    def counted(path: Path, st: os.stat_result, rule: cache_trust._Rule) -> object:
        checked.append(rule.kind)
        return check(path, st, rule)

    monkeypatch.setattr(cache_trust, "problem_of", counted)
    warm = KernelCache(tmp_path)
    warm.kernel(backend, module, name)
    assert warm.stats.disk_hits == 1 and backend.compiles == 1
    assert checked == ["file"]
