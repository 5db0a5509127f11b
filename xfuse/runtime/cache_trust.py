"""
Whether the kernel cache may use a directory: its entries run code when they are loaded
(programs are pickles, CPU kernels native object code, CUDA kernels PTX), and an entry's
sha256 catches corruption, not forgery. So, as ssh does for its keys, the cache reads and
writes only where no one but the current user (or root) can write:

- the cache root, its symbolic links resolved, is *private*: a directory owned by the user or
  root that neither group nor others may write;
- each of its ancestors, up to `/`, is *guarded*: owned by the user or root, and either
  writable by no one else or sticky (as `/tmp`: others may add names there, but not rename or
  remove the user's), so that no one else can put another directory in the root's place;
- each folder inside the root that holds entries is private, and no symbolic link (the cache
  makes none: one could lead anywhere);
- an entry is opened without following a symbolic link and checked on the open file (what is
  checked is what is read): a regular file owned by the user or root that neither group nor
  others may write.

A directory's verdict is kept for the process (`lstat` calls only, once per directory), so a
warm start pays a few dozen system calls for it. The owner of the directories and root are
trusted: they could change the rules for themselves anyway. On a system without POSIX owners
(Windows) nothing is checked.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

from xfuse.errors import KernelCacheWarning, XfuseError

CHECKED = hasattr(os, "geteuid")
"""Whether the platform has POSIX owners to check (not Windows)."""
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class Untrusted(XfuseError):
    """A path of the kernel cache that someone other than the user or root could write."""

    def __init__(self, path: Path, problem: str, fix: str):
        super().__init__(f"{path} {problem}")
        self.path = path
        self.problem = problem
        self.fix = fix


@dataclass(frozen=True)
class _Rule:
    """What one kind of path must be; `others_may_write_if_sticky` for a root's ancestors."""

    kind: str
    is_kind: str
    others_may_write_if_sticky: bool = False


DIRECTORY = _Rule("directory", "a directory")
ANCESTOR = _Rule("directory", "a directory", others_may_write_if_sticky=True)
ENTRY = _Rule("file", "a regular file")

_verdicts: dict[tuple[Path, _Rule], Untrusted | None] = {}
"""Every directory checked in this process, by path and rule: None where it passed."""
_warned: set[Path] = set()
_lock = threading.Lock()


def trusted_owners() -> frozenset[int]:
    return frozenset({0, os.geteuid()})


def problem_of(path: Path, st: os.stat_result, rule: _Rule) -> Untrusted | None:
    """Why `path` (of status `st`, not followed) breaks `rule`, or None."""
    if stat.S_ISLNK(st.st_mode):
        return Untrusted(path, "is a symbolic link, which the cache does not follow", "remove it")
    kind_ok = stat.S_ISREG(st.st_mode) if rule is ENTRY else stat.S_ISDIR(st.st_mode)
    if not kind_ok:
        return Untrusted(path, f"is not {rule.is_kind}", f"`rm {path}`")
    if st.st_uid not in trusted_owners():
        return Untrusted(
            path,
            f"is owned by uid {st.st_uid}, neither you (uid {os.geteuid()}) nor root",
            f"`chown {os.geteuid()} {path}` (as root)",
        )
    writable = st.st_mode & OTHERS_WRITE
    if writable and not (rule.others_may_write_if_sticky and st.st_mode & stat.S_ISVTX):
        mode = stat.S_IMODE(st.st_mode)
        who = "group and others" if writable == OTHERS_WRITE else _who(writable)
        return Untrusted(path, f"is writable by {who} (mode {mode:04o})", f"`chmod go-w {path}`")
    return None


def _who(bits: int) -> str:
    return "its group" if bits & stat.S_IWGRP else "others"


def real_root(directory: Path) -> Path:
    """`directory` with its symbolic links resolved: the path the cache checks and uses (so
    that a link changed after the check leads nowhere new)."""
    return Path(os.path.realpath(directory))


def check_root(root: Path, create: bool) -> None:
    """Raise `Untrusted` unless `root` (a `real_root`) is private and its ancestors guarded;
    `FileNotFoundError` where it does not exist, unless `create`: then the missing directories
    are made, owner-only (0700), once the existing ones passed. `NotADirectoryError` where a
    file stands in the path."""
    for ancestor in reversed(root.parents):
        _check_directory(ancestor, ANCESTOR, create)
    _check_directory(root, DIRECTORY, create)


def check_folder(folder: Path, create: bool) -> None:
    """Raise `Untrusted` unless `folder`, a directory right inside a checked root, is private
    (made owner-only where missing, with `create`; else `FileNotFoundError`)."""
    _check_directory(folder, DIRECTORY, create)


def _check_directory(path: Path, rule: _Rule, create: bool) -> None:
    if not CHECKED:
        if create:
            path.mkdir(mode=0o700, exist_ok=True)
        return
    key = (path, rule)
    with _lock:
        known = key in _verdicts
        verdict = _verdicts.get(key)
    if not known:
        verdict = problem_of(path, _lstat(path, create), rule)
        with _lock:
            _verdicts[key] = verdict
    if verdict is not None:
        raise verdict


def _lstat(path: Path, create: bool) -> os.stat_result:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            raise
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # made at the same time by another thread or process: checked as any
        st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
    return st


def read_entry(path: Path) -> bytes:
    """The bytes of the entry at `path` (in a checked folder), checked on the open file:
    `Untrusted` where it is a symbolic link or someone else could have written it;
    `FileNotFoundError` where there is none."""
    # no link followed; a FIFO or device never blocks the open (fstat refuses it)
    flags = os.O_RDONLY | os.O_NONBLOCK if CHECKED else os.O_RDONLY
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and CHECKED:
            raise problem_of(path, os.lstat(path), ENTRY) or e from None
        raise
    with os.fdopen(fd, "rb") as f:
        if CHECKED:
            problem = problem_of(path, os.fstat(f.fileno()), ENTRY)
            if problem is not None:
                raise problem
        return f.read()


def warn_untrusted(root: Path, problem: Untrusted) -> None:
    """Say once per cache root and process why the cache does not use it."""
    with _lock:
        if root in _warned:
            return
        _warned.add(root)
    warnings.warn(
        f"xfuse: the kernel cache does not use {root}: {problem} (anyone who can write there "
        "could run code in this process through the cache's entries); it works in memory only "
        f"from now on. Fix: {problem.fix}, or set XFUSE_CACHE_DIR to a directory of your own",
        KernelCacheWarning,
        stacklevel=5,
    )
