"""Reading files by position, and opening a file that must be a regular one: the few system calls every reader
of models, manifests and buffer files shares.

Positioned reads (``pread``; on Windows ``ReadFile`` at an offset) leave a descriptor's own position alone, so
threads and forked processes may share it. :func:`open_regular` opens without blocking (a FIFO named as a model or
a manifest must not hang the open) and refuses anything but a regular file (a device would read forever). On
Windows it opens with ``FILE_SHARE_DELETE`` (:mod:`dmlbridge.system.windows`), so that what dmlbridge reads can
still be removed or replaced by a conversion, as on POSIX.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "f")
    >>> open(path, "wb").write(b"0123456789")
    10
    >>> fd, size = open_regular(path)
    >>> size, read_at(fd, 2, 4), read_at(fd, 8, 100)
    (10, b'2345', b'89')
    >>> os.close(fd)
"""

from __future__ import annotations

import errno
import os
import stat
import sys

from dmlbridge.system import windows

__all__ = ["NotRegularFileError", "keep_open", "open_regular", "read_at", "read_into", "write_at"]

_WINDOWS = sys.platform == "win32"
_PREAD = hasattr(os, "pread")
_PREADV = hasattr(os, "preadv")
_CHUNK = 4 << 20  # the most one call reads (a few MiB: no single huge allocation per call)
_READ_ONLY = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
              | getattr(os, "O_BINARY", 0))


class NotRegularFileError(OSError):
    """The path names a directory, a FIFO, a device or a socket, not a regular file."""


def open_regular(path: str, *, dir_fd: int | None = None, nofollow: bool = False) -> tuple[int, int]:
    """Open ``path`` (relative to ``dir_fd`` when given) for reading without blocking, and return its descriptor
    and size. A file that is not regular raises NotRegularFileError (closed first); a path the system cannot
    take (a NUL in it) raises OSError like any other failed open."""
    flags = _READ_ONLY | (getattr(os, "O_NOFOLLOW", 0) if nofollow else 0)
    try:
        if _WINDOWS:  # (no dir_fd there: os.supports_dir_fd is empty, so callers pass none)
            fd = windows.open_shared(path, nofollow=nofollow)
        else:
            fd = os.open(path, flags, dir_fd=dir_fd) if dir_fd is not None else os.open(path, flags)
    except ValueError as exc:  # "embedded null byte"
        raise OSError(errno.EINVAL, str(exc)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(errno.EINVAL, "not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def _pread(fd: int, size: int, offset: int) -> bytes:
    if _PREAD:
        return os.pread(fd, size, offset)
    if _WINDOWS:
        buffer = bytearray(size)
        return bytes(memoryview(buffer)[: windows.read_into_at(fd, memoryview(buffer), offset)])
    raise OSError(errno.ENOSYS, "this system has no positioned read")


def read_at(fd: int, offset: int, size: int) -> bytes:
    """Up to ``size`` bytes of the file ``fd`` from ``offset`` (fewer only where the file ends)."""
    parts = []
    while size > 0:
        chunk = _pread(fd, min(size, _CHUNK), offset)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_into(fd: int, view: memoryview, offset: int) -> int:
    """Fill ``view`` (writable, bytes) with the file's bytes from ``offset``, straight into it where the system
    allows (``preadv``); returns how many were read: fewer than ``len(view)`` only where the file ends."""
    done = 0
    while done < len(view):
        piece = view[done : done + _CHUNK]
        if _PREADV:
            n = os.preadv(fd, [piece], offset + done)
        elif _WINDOWS:
            n = windows.read_into_at(fd, piece, offset + done)
        else:
            data = _pread(fd, len(piece), offset + done)
            n = len(data)
            piece[:n] = data
        if n <= 0:
            break
        done += n
    return done


def write_at(fd: int, offset: int, data: bytes) -> None:
    """Write ``data`` at ``offset`` of ``fd`` (``pwrite``; where there is none, a seek and a write: for a
    descriptor no other thread uses)."""
    if hasattr(os, "pwrite"):
        os.pwrite(fd, data, offset)
        return
    os.lseek(fd, offset, os.SEEK_SET)
    os.write(fd, data)


def keep_open(fd: int, path: str) -> int:
    """A descriptor of the file this process is writing through ``fd`` (at ``path``), for a plan to keep reading
    it: a ``dup`` on POSIX; on Windows the file opened again for reading and shared (a duplicate would keep the
    writer's sharing, under which no later conversion could remove the file). While ``fd`` is open, nobody can
    remove or rename the file on Windows, so the second open finds the same file."""
    if _WINDOWS:
        return open_regular(path)[0]
    return os.dup(fd)
