"""The system calls under dmlbridge's file reads, as a test watches them, on every platform: each positioned read
(``os.pread`` and ``os.preadv`` on POSIX; ``ReadFile`` at an offset, through ``dmlbridge.system.windows``, on
Windows) recorded, with a hook run before it; whether this system can make symbolic links at all (Windows makes
them only with a privilege, and Wine never); whether open plans keep their removed files' names (Windows); and a
file's 8.3 short name (Windows)."""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from dmlbridge.system import windows


class Read(NamedTuple):
    """One positioned read: the descriptor, the offset, the bytes asked for, the bytes read, and the file read (its
    device and inode: a descriptor's number is reused once it is closed, on Windows sooner than on Linux)."""

    fd: int
    offset: int
    asked: int
    got: int
    file: tuple[int, int]


def file_of(fd: int) -> tuple[int, int]:
    """The file a descriptor is, as :class:`Read` names it."""
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def record_positioned_reads(monkeypatch: pytest.MonkeyPatch,
                            before: Callable[[], None] | None = None) -> list[Read]:
    """Every positioned read from now on (until ``monkeypatch`` undoes it), in order; ``before`` runs before each
    one (to shrink the file under the reader, say)."""
    reads: list[Read] = []
    hook = before or (lambda: None)
    if hasattr(os, "pread"):
        pread = os.pread

        def recorded_pread(fd: int, size: int, offset: int) -> bytes:
            hook()
            data = pread(fd, size, offset)
            reads.append(Read(fd, offset, size, len(data), file_of(fd)))
            return data

        monkeypatch.setattr(os, "pread", recorded_pread)
    if hasattr(os, "preadv"):
        preadv = os.preadv

        def recorded_preadv(fd: int, buffers: list[Any], offset: int) -> int:
            hook()
            done = preadv(fd, buffers, offset)
            reads.append(Read(fd, offset, sum(memoryview(b).nbytes for b in buffers), done, file_of(fd)))
            return done

        monkeypatch.setattr(os, "preadv", recorded_preadv)
    read_into_at = windows.read_into_at  # (never called off Windows)

    def recorded_read_into_at(fd: int, view: memoryview, offset: int) -> int:
        hook()
        done = read_into_at(fd, view, offset)
        reads.append(Read(fd, offset, view.nbytes, done, file_of(fd)))
        return done

    monkeypatch.setattr(windows, "read_into_at", recorded_read_into_at)
    return reads


@functools.cache
def symlinks_work() -> bool:
    """Whether this process can make a symbolic link that leads to its target (tried once, in a temporary folder;
    Wine's os.symlink returns as if it had made one, and makes nothing)."""
    with tempfile.TemporaryDirectory() as folder:
        target, link = os.path.join(folder, "target"), os.path.join(folder, "link")
        with open(target, "wb") as file:
            file.write(b"x")
        try:
            os.symlink("target", link)
            with open(link, "rb") as file:
                return os.path.islink(link) and file.read() == b"x"
        except (OSError, NotImplementedError):
            return False


PLANS_KEEP_NAMES = os.name == "nt"
"""Whether an open plan keeps its buffer files' names in their folder after a later conversion replaced them: on
Windows it does (the plan convert_model returns holds its files by the writer's own handles, which mark a live
writer's files, never removed; a loaded plan's shared handles leave a removed file's name until they are closed);
on POSIX the names go when the files are removed, open or not."""


def let_go(*plans: Any) -> None:
    """Close ``plans`` (upload plans, holding their buffer files open) where open plans keep their files' names
    (:data:`PLANS_KEEP_NAMES`), so that a folder lists what the conversions after them leave; elsewhere leave them
    open (a conversion removes their files' names all the same)."""
    if PLANS_KEEP_NAMES:
        for plan in plans:
            plan.close()


def short_name(path: os.PathLike[str] | str) -> str | None:
    """The 8.3 short name of ``path`` (Windows' ``GetShortPathNameW``), or None when it has none but its own name
    (a name that is 8.3 already, a volume that makes no short names) or this is not Windows."""
    if sys.platform != "win32":
        return None
    buffer = ctypes.create_unicode_buffer(32768)
    if not ctypes.windll.kernel32.GetShortPathNameW(os.fspath(path), buffer, len(buffer)):
        return None
    short = buffer.value
    return None if os.path.basename(short) == os.path.basename(os.fspath(path)) else short
