"""Windows' own file calls, for what POSIX gives through ``os`` and ``fcntl``: opening a file that others may still
remove or rename, reading it by position, and locking it.

CPython's ``open`` and ``os.open`` open a file on Windows without ``FILE_SHARE_DELETE``, so while such a handle is
open nobody can remove the file or rename another onto its name (``ERROR_SHARING_VIOLATION``). dmlbridge opens
what it only *reads* (models, manifests, buffer files) through :func:`open_shared` instead, so that a conversion
may remove or replace them under a reader (the removal is then pending until the reader closes, and the reader
keeps reading its own bytes, as on POSIX). What it *writes* it opens with ``os.open``: no one else can remove a
file a live writer holds, which is what the ``flock`` of each written file says on POSIX.

On any other system the functions here raise ``OSError`` (``ENOSYS``); :mod:`dmlbridge.system.files` and
:mod:`dmlbridge.system.locks` call them only when ``sys.platform == "win32"``.

    >>> is_sharing_violation(OSError(2, "No such file"))  # (an error that names no Windows error code)
    False
"""

from __future__ import annotations

import errno
import os
import sys

__all__ = ["is_sharing_violation", "lock_nowait", "on_windows", "open_shared", "read_into_at", "unlock"]

# Windows' error codes (winerror.h): another handle forbids what was asked (a share mode), or holds a byte-range lock.
ERROR_SHARING_VIOLATION = 32
ERROR_LOCK_VIOLATION = 33
ERROR_HANDLE_EOF = 38
# The byte a lock file is locked at: far past its text, so that a holder's name stays readable by others (a range
# lock on Windows forbids reading the bytes it covers).
LOCK_OFFSET = 1 << 62


def on_windows() -> bool:
    """Whether this Python runs on Windows (Wine's included: it is Windows to the program). Asked at each call, so
    that a test may set ``sys.platform``."""
    return sys.platform == "win32"


def is_sharing_violation(exc: OSError) -> bool:
    """Whether ``exc`` says another open handle forbids the call (Windows: a file a live process holds)."""
    return getattr(exc, "winerror", None) in (ERROR_SHARING_VIOLATION, ERROR_LOCK_VIOLATION)


if sys.platform == "win32":
    import _winapi
    import ctypes
    import msvcrt
    from ctypes import wintypes

    _GENERIC_READ = 0x80000000
    _FILE_SHARE_ALL = 0x1 | 0x2 | 0x4  # FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE
    _OPEN_EXISTING = 3
    _FILE_FLAG_BACKUP_SEMANTICS = 0x02000000  # (a folder opens too, and is then refused as not a regular file)
    _FILE_FLAG_OPEN_REPARSE_POINT = 0x00200000  # the link itself, never what it points at
    _FILE_ATTRIBUTE_REPARSE_POINT = 0x400
    _LOCKFILE_FAIL_IMMEDIATELY = 0x1
    _LOCKFILE_EXCLUSIVE_LOCK = 0x2

    class _Overlapped(ctypes.Structure):
        _fields_ = [("Internal", ctypes.c_void_p), ("InternalHigh", ctypes.c_void_p), ("Offset", wintypes.DWORD),
                    ("OffsetHigh", wintypes.DWORD), ("hEvent", wintypes.HANDLE)]

    _kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    _ReadFile = _kernel32.ReadFile
    _ReadFile.argtypes = [wintypes.HANDLE, ctypes.c_void_p, wintypes.DWORD, ctypes.POINTER(wintypes.DWORD),
                          ctypes.POINTER(_Overlapped)]
    _ReadFile.restype = wintypes.BOOL
    _LockFileEx = _kernel32.LockFileEx
    _LockFileEx.argtypes = [wintypes.HANDLE, wintypes.DWORD, wintypes.DWORD, wintypes.DWORD, wintypes.DWORD,
                            ctypes.POINTER(_Overlapped)]
    _LockFileEx.restype = wintypes.BOOL
    _UnlockFileEx = _kernel32.UnlockFileEx
    _UnlockFileEx.argtypes = [wintypes.HANDLE, wintypes.DWORD, wintypes.DWORD, wintypes.DWORD,
                              ctypes.POINTER(_Overlapped)]
    _UnlockFileEx.restype = wintypes.BOOL

    def _at(offset: int) -> _Overlapped:
        return _Overlapped(None, None, offset & 0xFFFFFFFF, offset >> 32, None)

    def _error(call: str) -> OSError:
        code = ctypes.get_last_error()
        exc = ctypes.WinError(code)
        exc.strerror = f"{call}: {exc.strerror}"
        return exc

    def open_shared(path: str, *, nofollow: bool = False) -> int:
        """A read-only descriptor of ``path`` that lets others read, write, remove and rename the file while it is
        open; with ``nofollow``, a symbolic link, junction or other reparse point is refused (``ELOOP``) rather
        than followed. Errors are ``OSError`` as from ``os.open`` (``FileNotFoundError`` and the like)."""
        flags = _FILE_FLAG_BACKUP_SEMANTICS | (_FILE_FLAG_OPEN_REPARSE_POINT if nofollow else 0)
        try:
            handle = _winapi.CreateFile(path, _GENERIC_READ, _FILE_SHARE_ALL, 0, _OPEN_EXISTING, flags, 0)
        except OSError as exc:  # in the C library's words for its errno, as os.open's: the same on every system
            if exc.errno is None:  # (never from _winapi, which maps every Windows error to an errno)
                raise
            raise OSError(exc.errno, os.strerror(exc.errno), path, exc.winerror) from None
        try:
            fd = msvcrt.open_osfhandle(handle, os.O_RDONLY)
        except BaseException:
            _winapi.CloseHandle(handle)
            raise
        if nofollow:
            try:
                attributes = os.fstat(fd).st_file_attributes
            except BaseException:
                os.close(fd)
                raise
            if attributes & _FILE_ATTRIBUTE_REPARSE_POINT:
                os.close(fd)
                raise OSError(errno.ELOOP, "is a symbolic link or another reparse point, which is never followed",
                              path)
        return fd

    def read_into_at(fd: int, view: memoryview, offset: int) -> int:
        """Read into ``view`` (writable bytes, at most 4 GiB - 1) from byte ``offset`` of ``fd``, without moving
        any position other threads rely on (``ReadFile`` with an offset); the count read, 0 past the end."""
        if not len(view):
            return 0
        buffer = (ctypes.c_char * len(view)).from_buffer(view)
        done = wintypes.DWORD(0)
        overlapped = _at(offset)
        if not _ReadFile(msvcrt.get_osfhandle(fd), buffer, len(view), ctypes.byref(done), ctypes.byref(overlapped)):
            if ctypes.get_last_error() == ERROR_HANDLE_EOF:
                return 0
            raise _error("ReadFile")
        return done.value

    def lock_nowait(fd: int) -> bool:
        """Take the exclusive lock of the file ``fd`` (a byte-range lock at :data:`LOCK_OFFSET`) without waiting:
        False when another handle holds it. Released by :func:`unlock` or when ``fd`` is closed."""
        overlapped = _at(LOCK_OFFSET)
        if _LockFileEx(msvcrt.get_osfhandle(fd), _LOCKFILE_EXCLUSIVE_LOCK | _LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0,
                       ctypes.byref(overlapped)):
            return True
        if ctypes.get_last_error() in (ERROR_LOCK_VIOLATION, ERROR_SHARING_VIOLATION):
            return False
        raise _error("LockFileEx")

    def unlock(fd: int) -> None:
        """Release the lock :func:`lock_nowait` took."""
        overlapped = _at(LOCK_OFFSET)
        if not _UnlockFileEx(msvcrt.get_osfhandle(fd), 0, 1, 0, ctypes.byref(overlapped)):
            raise _error("UnlockFileEx")

else:

    def _not_windows(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSYS, "a Windows call, on another system")

    def open_shared(path: str, *, nofollow: bool = False) -> int:
        """See the Windows definition above."""
        _not_windows(path, nofollow)
        return -1

    def read_into_at(fd: int, view: memoryview, offset: int) -> int:
        """See the Windows definition above."""
        _not_windows(fd, view, offset)
        return 0

    def lock_nowait(fd: int) -> bool:
        """See the Windows definition above."""
        _not_windows(fd)
        return False

    def unlock(fd: int) -> None:
        """See the Windows definition above."""
        _not_windows(fd)

