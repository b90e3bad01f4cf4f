"""The system calls under dmlbridge's file reads, as a test watches them, on every platform: each positioned read
(``os.pread`` and ``os.preadv`` on POSIX; ``ReadFile`` at an offset, through ``dmlbridge.system.windows``, on
Windows) recorded, with a hook run before it; and whether this system can make symbolic links at all (Windows
makes them only with a privilege, and Wine never)."""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from dmlbridge.system import windows

SYMLINKS_MISSING = "needs symbolic links, which this Windows cannot make"


class Read(NamedTuple):
    """One positioned read: the descriptor, the offset, the bytes asked for and the bytes read."""

    fd: int
    offset: int
    asked: int
    got: int


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
            reads.append(Read(fd, offset, size, len(data)))
            return data

        monkeypatch.setattr(os, "pread", recorded_pread)
    if hasattr(os, "preadv"):
        preadv = os.preadv

        def recorded_preadv(fd: int, buffers: list[Any], offset: int) -> int:
            hook()
            done = preadv(fd, buffers, offset)
            reads.append(Read(fd, offset, sum(memoryview(b).nbytes for b in buffers), done))
            return done

        monkeypatch.setattr(os, "preadv", recorded_preadv)
    read_into_at = windows.read_into_at  # (never called off Windows)

    def recorded_read_into_at(fd: int, view: memoryview, offset: int) -> int:
        hook()
        done = read_into_at(fd, view, offset)
        reads.append(Read(fd, offset, view.nbytes, done))
        return done

    monkeypatch.setattr(windows, "read_into_at", recorded_read_into_at)
    return reads


@functools.cache
def symlinks_work() -> bool:
    """Whether this process can make a symbolic link (tried once, in a temporary folder)."""
    with tempfile.TemporaryDirectory() as folder:
        try:
            os.symlink("target", os.path.join(folder, "link"))
        except (OSError, NotImplementedError):
            return False
    return True


needs_symlinks = pytest.mark.skipif(not symlinks_work(), reason=SYMLINKS_MISSING)
"""Marks a test that makes symbolic links: skipped where the system cannot make them."""


REMOVED_NAMES_LINGER = os.name == "nt"
"""Whether a removed file's name may stay in its folder while the file is still open: on Windows it stays until the
file's last handle is closed (Wine's does so always); on POSIX it goes at once, open or not."""


def let_go(*plans: Any) -> None:
    """Close ``plans`` (upload plans, holding their buffer files open) where a removed file's name lingers while it is
    open (:data:`REMOVED_NAMES_LINGER`), so that a folder lists what the conversions left in it; elsewhere leave
    them open (their files' names went when they were removed)."""
    if REMOVED_NAMES_LINGER:
        for plan in plans:
            plan.close()
