"""The buffer files of a written plan, held open: a plan reads the very files it validated, never a name again.

``load_plan`` opens each buffer file once (beside the manifest, without following a symlink, without blocking
on a FIFO), checks that it is a regular file of the listed size and fingerprint, and keeps the descriptor. Every
later read goes through it by position (``pread``), so a conversion that replaces the files afterwards, or a
file swapped in under the same name, changes nothing a plan returns: it keeps reading the bytes it checked (on
POSIX, a removed file stays readable while it is open; on Windows the files are opened with ``FILE_SHARE_DELETE``,
so a conversion may remove them all the same: the removal is pending until the plan closes them, and the plan
keeps reading its own bytes meanwhile).

Across ``fork`` the descriptors are shared, and positioned reads make that safe. A pickled plan carries its paths
and each file's identity (device, inode, size, modification time), not the descriptors: it opens the files again
on its first read and refuses them with ``ManifestError`` if they are no longer the same files. ``close()`` (or
leaving a ``with`` block) closes them; a closed plan refuses to read.

    >>> import tempfile, os, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "w.0123456789abcdef.00000.bin")
    >>> open(path, "wb").write(bytes(range(8)))
    8
    >>> files = OpenBuffers.beside(os.path.dirname(path), [os.path.basename(path)])
    >>> out = np.empty(4, np.uint8); files.read_into(0, 2, out); out.tolist()
    [2, 3, 4, 5]
    >>> files.close()
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from typing import Any

import numpy as np

from dmlbridge.errors import InvalidArgumentError, ManifestError
from dmlbridge.system.files import NotRegularFileError, open_regular, read_at, read_into

__all__ = ["BufferFileMissingError", "OpenBuffers"]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_DIR_FD = os.open in os.supports_dir_fd
_CHUNK = 4 << 20
Identity = tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns


def _identity(result: os.stat_result) -> Identity:
    return result.st_dev, result.st_ino, result.st_size, result.st_mtime_ns


class BufferFileMissingError(ManifestError):
    """A buffer file the manifest lists does not exist: removed since, perhaps by a conversion that published a
    new manifest in the meantime (``read_plan`` then reads the manifest again)."""


class OpenBuffers:
    """Open descriptors of a plan's buffer files, by index (see the module docstring)."""

    def __init__(self, paths: list[str], fds: list[int]) -> None:
        self.paths = paths
        self._fds: list[int] | None = fds
        self._identities = [_identity(os.fstat(fd)) for fd in fds]
        self._closed = False

    @classmethod
    def beside(cls, directory: str, names: list[str]) -> OpenBuffers:
        """Open the files ``names`` in ``directory``, relative to the folder opened once, without following a
        symlink; each must be a regular file. ManifestError names the one that is not."""
        paths = [os.path.join(directory, name) for name in names]
        dir_fd = None
        fds: list[int] = []
        try:
            if _DIR_FD:
                dir_fd = os.open(directory, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
            for name, path in zip(names, paths, strict=True):
                fds.append(_open_regular(name if dir_fd is not None else path, path, dir_fd, nofollow=True))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        finally:
            if dir_fd is not None:
                os.close(dir_fd)
        return cls(paths, fds)

    @classmethod
    def at_paths(cls, paths: list[str]) -> OpenBuffers:
        """Open the files ``paths`` (a format-1 manifest's .bin, which may be a symlink); each must be a regular
        file."""
        fds: list[int] = []
        try:
            for path in paths:
                fds.append(_open_regular(path, path, None))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return cls(paths, fds)

    def fd(self, index: int) -> int:
        """The descriptor of buffer ``index``; after unpickling, the file opened again and checked to be the same."""
        if self._closed:
            raise InvalidArgumentError("this plan was closed; load it again to read its buffer files")
        if self._fds is None:
            fds = []
            try:
                for path, identity in zip(self.paths, self._identities, strict=True):
                    fd = _open_regular(path, path, None)
                    fds.append(fd)
                    if _identity(os.fstat(fd)) != identity:
                        raise ManifestError(
                            f"the buffer file {path!r} is no longer the file this plan was loaded with (it was "
                            "replaced or changed since); load the plan again"
                        )
            except BaseException:
                for fd in fds:
                    os.close(fd)
                raise
            self._fds = fds
        return self._fds[index]

    def size(self, index: int) -> int:
        return os.fstat(self.fd(index)).st_size

    def read_into(self, index: int, offset: int, out: np.ndarray) -> None:
        """Fill ``out`` (a contiguous uint8 array) with the bytes of buffer ``index`` from ``offset``."""
        view = out.data.cast("B")
        try:
            done = read_into(self.fd(index), view, offset)
        except OSError as exc:
            raise ManifestError(f"cannot read {self.paths[index]!r}: {exc.strerror or exc}") from None
        if done < len(view):
            raise ManifestError(
                f"the buffer file {self.paths[index]!r} ended at byte {offset + done}, before byte "
                f"{offset + len(view)}; it was cut short after the plan was loaded"
            )

    def read_checked(self, index: Any, offset: Any, out: Any) -> None:
        """:meth:`read_into` for a caller's arguments: InvalidArgumentError unless ``out`` is a writable, contiguous
        uint8 array that fits inside buffer ``index`` from ``offset``."""
        if not (isinstance(out, np.ndarray) and out.dtype == np.uint8 and out.flags.c_contiguous
                and out.flags.writeable):
            raise InvalidArgumentError("out must be a writable, contiguous numpy uint8 array")
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (index, offset)) \
                or not 0 <= index < len(self.paths) or not 0 <= offset <= self.size(index) - out.size:
            raise InvalidArgumentError(f"buffer file {index!r} has no {out.size} bytes at offset {offset!r} (the "
                                       f"plan has {len(self.paths)} buffer files)")
        self.read_into(index, offset, out)

    def sha256(self, index: int) -> str:
        sha, fd, offset = hashlib.sha256(), self.fd(index), 0
        try:
            while chunk := read_at(fd, offset, _CHUNK):
                sha.update(chunk)
                offset += len(chunk)
        except OSError as exc:
            raise ManifestError(f"cannot read {self.paths[index]!r}: {exc.strerror or exc}") from None
        return sha.hexdigest()

    def close(self) -> None:
        if self._fds is not None:
            for fd in self._fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fds = None
        self._closed = True

    def __getstate__(self) -> dict[str, Any]:
        return {"paths": self.paths, "identities": self._identities, "closed": self._closed}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.paths, self._identities, self._closed = state["paths"], state["identities"], state["closed"]
        self._fds = None  # opened again, and checked, on the first read

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _open_regular(name: str, path: str, dir_fd: int | None, *, nofollow: bool = False) -> int:
    try:
        return open_regular(name, dir_fd=dir_fd, nofollow=nofollow)[0]
    except NotRegularFileError:
        raise ManifestError(f"the buffer file {path!r} is not a regular file") from None
    except FileNotFoundError as exc:
        raise BufferFileMissingError(
            f"cannot open the buffer file {path!r}: {exc.strerror or exc} (the manifest lists it, but it was removed "
            "or moved since; convert the model again)"
        ) from None
    except PermissionError as exc:
        if sys.platform == "win32":  # a file whose removal is pending (another plan still holds it) opens so
            raise BufferFileMissingError(
                f"cannot open the buffer file {path!r}: {exc.strerror or exc} (the manifest lists it, but it is being "
                "removed: a newer conversion replaced it while another plan still holds it; load the plan again)"
            ) from None
        raise ManifestError(f"cannot open the buffer file {path!r}: {exc.strerror or exc}") from None
    except OSError as exc:
        raise ManifestError(f"cannot open the buffer file {path!r}: {exc.strerror or exc}") from None
