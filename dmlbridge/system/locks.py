"""Locking a file without waiting: ``flock`` on POSIX, a byte-range lock (``LockFileEx``) on Windows.

A lock is held by the open file it was taken through and released when that is closed, on both systems. The
Windows lock covers one byte far past the file's text (:data:`dmlbridge.system.windows.LOCK_OFFSET`), so the
holder's name written in a lock file stays readable by the process that is refused.

:func:`mark_busy` marks a file a writer is still writing, so that another process leaves it alone: a ``flock``
on POSIX; on Windows nothing is needed, since a file held open by ``os.open`` (no ``FILE_SHARE_DELETE``) cannot be
removed by anyone else (:func:`dmlbridge.system.windows.is_sharing_violation` says so when it is tried).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "w.lock")
    >>> first, second = os.open(path, os.O_RDWR | os.O_CREAT), os.open(path, os.O_RDWR)
    >>> try_lock(first), try_lock(second)
    (True, False)
    >>> os.close(first); try_lock(second)
    True
    >>> os.close(second)
"""

from __future__ import annotations

import errno
import sys

from dmlbridge.system import windows

__all__ = ["mark_busy", "try_lock", "unlock", "unmark_busy"]

_WINDOWS = sys.platform == "win32"
if not _WINDOWS:
    import fcntl


def try_lock(fd: int) -> bool:
    """Take the exclusive lock of the file ``fd`` without waiting: False when another open file holds it."""
    if _WINDOWS:
        return windows.lock_nowait(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise
    return True


def unlock(fd: int) -> None:
    """Release the lock :func:`try_lock` took (closing ``fd`` releases it too)."""
    if _WINDOWS:
        windows.unlock(fd)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)


def mark_busy(fd: int) -> None:
    """Mark a file this process is writing as live (see the module docstring): no other process removes it."""
    if not _WINDOWS:
        fcntl.flock(fd, fcntl.LOCK_EX)


def unmark_busy(fd: int) -> None:
    """The file is written: another process may remove it once it is no one's (a plan may keep it open)."""
    if not _WINDOWS:
        fcntl.flock(fd, fcntl.LOCK_UN)
