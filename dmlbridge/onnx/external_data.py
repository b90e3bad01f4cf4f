"""Reading ONNX external tensor data safely.

A model's ``external_data`` entries come from whoever wrote the model, so every ``location`` is treated as
hostile. The rules (each refusal is an :class:`~dmlbridge.errors.ExternalDataError` naming the tensor):

- ``location`` must be a non-empty relative path of at most 4096 bytes, components of at most 255 bytes, with
  no NUL byte, no ``..`` component (``/`` and ``\\`` both separate components), no leading ``/`` or ``\\``
  (POSIX absolute, UNC ``\\\\server\\share``, ``//server``) and no colon at all (Windows drives ``C:\\``,
  ``C:x``, URLs ``file://``, NTFS streams ``name:stream``). Backslashes are read as separators, so models
  written on Windows with ``sub\\w.bin`` work everywhere.
- The path is resolved against the model directory (``base_dir``, or the directory ``base_fd`` is: the caller
  opens the model's directory when it opens the model, so that a path swapped for a symlink afterwards changes
  nothing) with every symlink followed; the real path must lie inside the allowed root: ``base_dir``, or
  ``external_data_root`` when the caller widens it (for caches such as Hugging Face's, whose files are symlinks
  into a blobs folder), opened once, when the reader is made. Resolution uses ``lstat``/``readlink`` only, so
  nothing outside the root is ever opened.
- The target must be a regular file (checked with ``stat`` before opening) with exactly one hard link: a file with
  ``st_nlink > 1`` may be a hard link to a file outside the root and nothing on the file says where its other
  names are, so it is refused, as onnx's own loader does (copy the file to give it a single link). It is opened
  walking down from the root one component at a time with ``O_NOFOLLOW`` (and ``O_NONBLOCK``, so a FIFO swapped
  in can never block), and ``fstat`` must then show the same regular file.
- ``offset`` and ``length`` are decimal digit strings; offset defaults to 0; the range must lie inside the file;
  ``length`` must equal the tensor's byte size; without ``length`` the data runs to the end of the file and that
  remainder must be exactly the tensor's byte size.
- ``checksum`` (SHA-1 of the whole file, per the ONNX spec) is verified, streaming, once per file per reader.
- Data is read with a read-only ``mmap`` of just the needed range (a numpy view that keeps the mapping alive), or
  with positioned reads into a fresh array; never the whole file. A file that shrinks under the reader is an
  error. (As with every mmap-based loader, truncating a file *while* its mapped array is in use is outside this
  guarantee: the kernel answers with SIGBUS. Pass ``use_mmap=False`` to copy instead.)
  :meth:`ExternalDataReader.copy_to` instead has the kernel copy the range into another file
  (``copy_file_range``, else ``sendfile``), after the same checks; a file that shrinks is an error there too.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import os
import re
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from dmlbridge.errors import ExternalDataError, InvalidArgumentError, counted
from dmlbridge.system.aligned import empty_aligned
from dmlbridge.system.files import open_regular, read_at, read_into

__all__ = ["ExternalDataInfo", "ExternalDataReader", "OpenedData", "check_location", "parse_external_data",
           "tensor_label"]

_MAX_LOCATION_BYTES = 4096
_MAX_COMPONENT_BYTES = 255
_MAX_DIGITS = 20  # 2**64 has 20 digits: longer offset/length strings are hostile, not large files
_CHUNK = 4 << 20  # checksum and copy chunk: bounded memory for any file size
_KNOWN_KEYS = frozenset({"location", "offset", "length", "checksum", "basepath"})
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_DRIVE = re.compile(r"^[A-Za-z]:")
_SHA1 = re.compile(r"^[0-9A-Fa-f]{40}$")
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
# Python >= 3.13 can map without keeping a duplicate descriptor per mapping (older versions hold one per live
# array, which matters only to callers keeping thousands of external tensors alive at once).
_MMAP_KW: dict[str, Any] = {"trackfd": False} if sys.version_info >= (3, 13) else {}
# openat() with O_NOFOLLOW per component (POSIX); elsewhere a plain open followed by the fstat identity check.
_WALK_OPEN = os.open in os.supports_dir_fd and hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY")
# Linux: a descriptor's directory has a current path there (decided by the platform: Wine shows Linux's /proc too)
_PROC_FD = sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")


def tensor_label(tensor: Any) -> str:
    """``tensor 'name'`` for error messages (the name shortened, undecodable bytes escaped)."""
    try:
        name = tensor.name
    except Exception:  # noqa: BLE001 - a hostile message must not break error reporting
        name = ""
    if isinstance(name, bytes):  # proto2 hands back bytes for a name that is not valid UTF-8
        name = name.decode("utf-8", "backslashreplace")
    if not name:
        return "unnamed tensor"
    if len(name) > 120:
        name = name[:120] + "..."
    return f"tensor {name!r}"


def _short(text: str) -> str:
    return repr(text if len(text) <= 120 else text[:120] + "...")


@dataclass(frozen=True)
class ExternalDataInfo:
    """The parsed ``external_data`` entries of one tensor (syntax checked; nothing opened)."""

    location: str
    parts: tuple[str, ...]
    offset: int
    length: int | None
    checksum: str | None


def check_location(location: object, label: str = "tensor") -> tuple[str, ...]:
    """Check an external data ``location`` string and return its path components (``.`` dropped).

    Raises ExternalDataError for every unsafe form listed in the module docstring. No file system access.
    """
    if isinstance(location, bytes):
        raise ExternalDataError(f"{label}: external data location {location!r} is not valid UTF-8")
    if not isinstance(location, str) or not location:
        raise ExternalDataError(f"{label}: external data location is empty; it must name a file beside the model")
    where = f"{label}: external data location {_short(location)}"
    if "\x00" in location:
        raise ExternalDataError(f"{where} contains a NUL byte")
    if len(location.encode("utf-8", "surrogatepass")) > _MAX_LOCATION_BYTES:
        raise ExternalDataError(f"{where} is longer than {_MAX_LOCATION_BYTES} bytes")
    if _URL.match(location):
        raise ExternalDataError(f"{where} is a URL; only file names relative to the model's directory are allowed")
    if _DRIVE.match(location):
        raise ExternalDataError(f"{where} is a Windows drive path; it must be relative to the model's directory")
    if ":" in location:
        raise ExternalDataError(f"{where} contains a colon (URL, drive or NTFS stream syntax); rename the file")
    if location.startswith(("/", "\\")):
        kind = "a UNC/network path" if location[1:2] in ("/", "\\") else "absolute"
        raise ExternalDataError(f"{where} is {kind}; it must be relative to the model's directory")
    parts = re.split(r"[\\/]", location)
    if ".." in parts:
        raise ExternalDataError(f"{where} contains a '..' component; it must stay inside the model's directory")
    if "" in parts:
        raise ExternalDataError(f"{where} has an empty path component; it must name a file")
    if any(len(p.encode("utf-8", "surrogatepass")) > _MAX_COMPONENT_BYTES for p in parts):
        raise ExternalDataError(f"{where} has a component longer than {_MAX_COMPONENT_BYTES} bytes")
    kept = tuple(p for p in parts if p != ".")
    if not kept:
        raise ExternalDataError(f"{where} names a directory, not a file")
    return kept


def _parse_count(value: str, key: str, label: str) -> int:
    # Only plain decimal digits: int() would also take "+5", " 5", "1_000" and 4000-digit numbers.
    if not isinstance(value, str) or not value.isascii() or not value.isdigit() or len(value) > _MAX_DIGITS:
        raise ExternalDataError(
            f"{label}: external data {key} {_short(str(value))} is not a non-negative decimal integer"
        )
    return int(value)


def parse_external_data(tensor: Any, nbytes: int) -> ExternalDataInfo:
    """Parse and check a tensor's ``external_data`` entries against its byte size ``nbytes``.

    Checks everything that needs no file: the keys, the location's form, the offset and length syntax, the
    length against ``nbytes``, and the checksum's form. Unknown keys are ignored (as onnx does); a key given
    twice is refused.
    """
    label = tensor_label(tensor)
    values: dict[str, str] = {}
    for entry in tensor.external_data:
        key = entry.key
        if key in _KNOWN_KEYS:
            if key in values:
                raise ExternalDataError(f"{label}: external data key {key!r} is given twice")
            values[key] = entry.value
    if "location" not in values:
        raise ExternalDataError(f"{label}: external data has no 'location' entry")
    parts = check_location(values["location"], label)
    offset = _parse_count(values["offset"], "offset", label) if "offset" in values else 0
    length = _parse_count(values["length"], "length", label) if "length" in values else None
    if length is not None and length != nbytes:
        raise ExternalDataError(
            f"{label}: external data length is {counted(length, 'byte')} but its type and dims need exactly {nbytes}"
        )
    checksum = values.get("checksum")
    if checksum is not None and (not isinstance(checksum, str) or not _SHA1.match(checksum)):
        raise ExternalDataError(f"{label}: external data checksum {_short(str(checksum))} is not a SHA-1 hex digest")
    return ExternalDataInfo(values["location"], parts, offset, length, checksum.lower() if checksum else None)


def _within(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives on Windows
        return False


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symlink"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


class ExternalDataReader:
    """Reads external tensor data for one model: the model directory, the allowed root, a checksum cache.

    Share one reader across the tensors of a model so each file's checksum is computed only once.
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        external_data_root: str | os.PathLike[str] | None = None,
        *,
        use_mmap: bool = True,
        base_fd: int | None = None,
    ) -> None:
        self._base_dir = self._directory(base_dir, "base_dir")
        root = external_data_root if external_data_root is not None else base_dir
        self._root = self._directory(root, "external_data_root")
        self._use_mmap = use_mmap
        self._checksums: dict[tuple[int, int, int, int], str] = {}
        self.files: dict[str, int] = {}
        """Every external data file this reader opened: location -> size (for the manifest)."""
        # The directories, pinned by descriptor where the system allows (``base_fd``: the model's directory,
        # opened by the caller when it opened the model): locations are resolved in the directories these are,
        # wherever their paths lead later.
        self._base_fd = base_fd
        self._root_fd: int | None = None
        self._own_root = False
        if _WALK_OPEN:
            if external_data_root is None and base_fd is not None:
                self._root_fd = base_fd
            else:
                try:
                    self._root_fd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
                    self._own_root = True
                except OSError as exc:
                    raise InvalidArgumentError(f"external_data_root {root!r} cannot be opened: {exc}") from None

    def close(self) -> None:
        """Close the root directory this reader opened (the model's directory is its caller's)."""
        if self._own_root and self._root_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._root_fd)
        self._root_fd = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    @staticmethod
    def _pinned(fd: int | None, fallback: str) -> str:
        """The current real path of the directory ``fd`` is (Linux: /proc/self/fd), else ``fallback``."""
        if fd is not None and _PROC_FD:
            with contextlib.suppress(OSError):
                return os.path.realpath(f"/proc/self/fd/{fd}", strict=True)
        return fallback

    @staticmethod
    def _directory(path: object, what: str) -> str:
        try:
            text = os.fspath(path)  # type: ignore[call-overload]
            if isinstance(text, bytes):
                text = os.fsdecode(text)
            real = os.path.realpath(text, strict=True)
        except (TypeError, ValueError, OSError) as exc:
            raise InvalidArgumentError(f"{what} {path!r} is not an existing directory: {exc}") from None
        if not os.path.isdir(real):
            raise InvalidArgumentError(f"{what} {path!r} is not a directory; pass the directory the model file is in")
        return real

    @property
    def base_dir(self) -> str:
        """The model directory (real path) that locations are resolved against."""
        return self._base_dir

    @property
    def root(self) -> str:
        """The real path of the directory every external data file must lie in."""
        return self._root

    def read(self, tensor: Any, nbytes: int) -> np.ndarray:
        """The ``nbytes`` bytes of a tensor's external data as a read-only 1-D uint8 array."""
        fd, offset, where = self._open_checked(tensor, nbytes)
        try:
            if nbytes == 0:
                return _readonly(np.empty(0, np.uint8))
            if self._use_mmap:
                mapped = self._map(fd, offset, nbytes)
                if mapped is not None:
                    return mapped
            return self._copy(fd, offset, nbytes, where)
        finally:
            os.close(fd)

    def read_range(self, tensor: Any, nbytes: int, start: int, count: int,
                   out: np.ndarray | None = None) -> np.ndarray:
        """Bytes ``[start, start + count)`` of a tensor's ``nbytes`` bytes of external data, as :meth:`read` gives
        the whole (the file opened and checked the same way): one range of a large tensor, read alone; into the
        first ``count`` bytes of ``out`` (a uint8 array, reused: its pages warm) when given."""
        if not (0 <= start and 0 <= count and start + count <= nbytes):
            raise InvalidArgumentError(f"bytes {start}..{start + count} are not within the tensor's {nbytes}")
        fd, offset, where = self._open_checked(tensor, nbytes)
        try:
            if count == 0:
                return _readonly(np.empty(0, np.uint8))
            if out is not None and out.shape[0] >= count:
                return self._copy(fd, offset + start, count, where, out[:count])
            if self._use_mmap:
                mapped = self._map(fd, offset + start, count)
                if mapped is not None:
                    return mapped
            return self._copy(fd, offset + start, count, where)
        finally:
            os.close(fd)

    def open_data(self, tensor: Any, nbytes: int) -> OpenedData:
        """A tensor's ``nbytes`` bytes of external data, its file opened and checked once, as :meth:`read_range`
        does for each range it reads: then read by range any number of times (:class:`OpenedData`), until closed.

            >>> import os, tempfile, numpy as np
            >>> from onnx import TensorProto
            >>> folder = tempfile.mkdtemp()
            >>> with open(os.path.join(folder, "w.data"), "wb") as f:
            ...     _ = f.write(bytes(range(10)))
            >>> tensor = TensorProto(name="w", data_type=TensorProto.UINT8, dims=[10], data_location=1)  # EXTERNAL
            >>> _ = tensor.external_data.add(key="location", value="w.data")
            >>> with ExternalDataReader(folder).open_data(tensor, 10) as data:
            ...     [block.tolist() for block in data.read_blocks(1, 7, np.empty(3, np.uint8))]
            [[1, 2, 3], [4, 5, 6], [7]]
        """
        fd, offset, where = self._open_checked(tensor, nbytes)
        return OpenedData(fd, offset, nbytes, where)

    def copy_to(self, tensor: Any, nbytes: int, out_fd: int, count: int | None = None) -> int:
        """Copy the first ``count`` (default: all ``nbytes``) bytes of a tensor's external data to ``out_fd``, at
        its current position, inside the kernel (``os.copy_file_range``, else ``os.sendfile``): no mapping and
        no copy through user space. The file is opened and checked exactly as :meth:`read` does.

        Returns how many bytes were copied: fewer than ``count`` (often 0) when the kernel cannot copy between
        these two files, and the caller writes the rest itself. A file that shrinks is an ExternalDataError; an
        error writing ``out_fd`` is raised as the OSError it is.
        """
        want = nbytes if count is None else count
        if not 0 <= want <= nbytes:
            raise InvalidArgumentError(f"count must be between 0 and {nbytes}, got {count!r}")
        fd, offset, where = self._open_checked(tensor, nbytes)
        try:
            return _kernel_copy(fd, offset, want, out_fd, nbytes, where)
        finally:
            os.close(fd)

    def examine(self, tensor: Any, nbytes: int) -> None:
        """Open a tensor's external data file and check it as :meth:`read` does (where it is, what it is, that it
        holds the tensor's ``nbytes``), reading none of its bytes: a stored checksum, which needs them all, is
        left to the reading.

        Example:
            >>> import tempfile
            >>> from onnx import TensorProto
            >>> tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4],
            ...                      data_location=TensorProto.EXTERNAL)
            >>> _ = tensor.external_data.add(key="location", value="w.bin")
            >>> ExternalDataReader(tempfile.mkdtemp()).examine(tensor, 16)
            Traceback (most recent call last):
            dmlbridge.ExternalDataError: tensor 'w': external data file 'w.bin' cannot be resolved ...
        """
        fd, _, _ = self._open_checked(tensor, nbytes, checksum=False)
        os.close(fd)

    def locate(self, tensor: Any, nbytes: int) -> tuple[tuple[int, int] | str, int, int]:
        """Which file a tensor's external data is in, found as :meth:`read` finds it but opening nothing: the
        file's identity (device and inode; its real path where the system gives no inode), the tensor's offset in
        it and the file's size. ExternalDataError when it is not found or not allowed."""
        info = parse_external_data(tensor, nbytes)
        real, st, _ = self._resolve(info, f"{tensor_label(tensor)}: external data file {_short(info.location)}")
        return ((st.st_dev, st.st_ino) if st.st_ino else real), info.offset, st.st_size

    def _open_checked(self, tensor: Any, nbytes: int, checksum: bool = True) -> tuple[int, int, str]:
        """Open a tensor's external data file with every check of the module docstring (the checksum only with
        ``checksum``): (fd, offset, where).

        The caller closes the descriptor; it is closed here when a check fails.
        """
        label = tensor_label(tensor)
        if tensor.data_location != _EXTERNAL:
            raise ExternalDataError(f"{label} does not use external data (data_location is not EXTERNAL)")
        info = parse_external_data(tensor, nbytes)
        where = f"{label}: external data file {_short(info.location)}"
        real, before, root = self._resolve(info, where)
        fd = self._open(real, root, where)
        try:
            after = os.fstat(fd)
            self.files[info.location] = after.st_size
            if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
                raise ExternalDataError(f"{where} was replaced while it was being opened; try again")
            self._check_links(after, where)
            size = after.st_size
            if info.offset > size:
                raise ExternalDataError(
                    f"{where}: offset {info.offset} is past the end of the file ({counted(size, 'byte')})")
            if info.length is None and size - info.offset != nbytes:
                raise ExternalDataError(
                    f"{where}: no length is given, so the data runs from offset {info.offset} to the end of the "
                    f"file ({counted(size - info.offset, 'byte')}), but the tensor needs exactly {nbytes}"
                )
            if info.offset + nbytes > size:
                raise ExternalDataError(
                    f"{where}: bytes {info.offset}..{info.offset + nbytes} are past the end of the file "
                    f"({counted(size, 'byte')})"
                )
            if checksum and info.checksum is not None:
                self._verify_checksum(fd, after, info.checksum, where)
        except BaseException:
            os.close(fd)
            raise
        return fd, info.offset, where

    def _resolve(self, info: ExternalDataInfo, where: str) -> tuple[str, os.stat_result, str]:
        base = self._pinned(self._base_fd, self._base_dir)
        root = self._pinned(self._root_fd, self._root)
        candidate = os.path.join(base, *info.parts)
        try:
            # lstat/readlink only: resolving never opens the target, so nothing outside the root is touched.
            real = os.path.realpath(candidate, strict=True)
        except OSError as exc:
            # (the C library's words for the errno: the same on every system, where Windows' own would differ)
            words = os.strerror(exc.errno) if exc.errno else exc.strerror
            reason = "is a symlink loop" if exc.errno == errno.ELOOP else f"cannot be resolved ({words})"
            raise ExternalDataError(f"{where} {reason}: looked for {_short(candidate)} (a location is relative to "
                                    "the model's folder)") from None
        if not _within(real, root):
            raise ExternalDataError(
                f"{where} resolves to {_short(real)}, outside the allowed directory {_short(root)}; "
                "pass external_data_root= to allow a wider directory"
            )
        try:
            st = os.stat(real, follow_symlinks=False)
        except OSError as exc:
            raise ExternalDataError(f"{where} cannot be examined ({exc.strerror})") from None
        if not stat.S_ISREG(st.st_mode):
            kind = _file_kind(st.st_mode)
            raise ExternalDataError(f"{where} is {kind}; external data must be a regular file")
        self._check_links(st, where)
        return real, st, root

    @staticmethod
    def _check_links(st: os.stat_result, where: str) -> None:
        if st.st_nlink > 1:
            raise ExternalDataError(
                f"{where} has {st.st_nlink} hard links; a hard-linked file may be a file from outside the model's "
                "directory, so it is refused (copy it to give it a single link)"
            )

    def _open(self, real: str, root: str, where: str) -> int:
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOCTTY", 0)
        nofollow = getattr(os, "O_NOFOLLOW", 0)
        try:
            if _WALK_OPEN:
                # Walk down from the pinned root with O_NOFOLLOW: a symlink swapped in after the checks cannot
                # lead out, nor can the root's path, resolved again.
                parts = os.path.relpath(real, root).split(os.sep)
                dir_fd = os.dup(self._root_fd) if self._root_fd is not None else os.open(root, flags | os.O_DIRECTORY)
                try:
                    for part in parts[:-1]:
                        next_fd = os.open(part, flags | os.O_DIRECTORY | nofollow, dir_fd=dir_fd)
                        os.close(dir_fd)
                        dir_fd = next_fd
                    return os.open(parts[-1], flags | nofollow | getattr(os, "O_NONBLOCK", 0), dir_fd=dir_fd)
                finally:
                    os.close(dir_fd)
            if sys.platform == "win32":  # shared for removal, and never through a symbolic link or junction
                return open_regular(real, nofollow=True)[0]
            return os.open(real, flags | nofollow | getattr(os, "O_NONBLOCK", 0))
        except OSError as exc:
            raise ExternalDataError(f"{where} cannot be opened ({exc.strerror}); it may have changed") from None

    def _verify_checksum(self, fd: int, st: os.stat_result, expected: str, where: str) -> None:
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        digest = self._checksums.get(key)
        if digest is None:
            sha1 = hashlib.sha1(usedforsecurity=False)
            done = 0
            while done < st.st_size:
                chunk = read_at(fd, done, min(_CHUNK, st.st_size - done))
                if not chunk:
                    raise ExternalDataError(f"{where} shrank while its checksum was being computed")
                sha1.update(chunk)
                done += len(chunk)
            digest = sha1.hexdigest()
            self._checksums[key] = digest
        if digest != expected:
            raise ExternalDataError(
                f"{where}: SHA-1 checksum mismatch (file {digest}, model says {expected}); the file is corrupt or "
                "does not belong to this model"
            )

    @staticmethod
    def _map(fd: int, offset: int, nbytes: int) -> np.ndarray | None:
        start = offset - offset % mmap.ALLOCATIONGRANULARITY  # mmap offsets must be granularity-aligned
        try:
            mapped = mmap.mmap(fd, offset + nbytes - start, access=mmap.ACCESS_READ, offset=start, **_MMAP_KW)
        except (OSError, ValueError, OverflowError):
            return None  # unmappable or shrunk: the positioned read decides which
        if os.fstat(fd).st_size < offset + nbytes:
            mapped.close()
            return None
        # The array keeps the mapping alive; ACCESS_READ makes it read-only.
        return np.frombuffer(mapped, dtype=np.uint8, count=nbytes, offset=offset - start)

    @staticmethod
    def _copy(fd: int, offset: int, nbytes: int, where: str, out: np.ndarray | None = None) -> np.ndarray:
        out = empty_aligned(nbytes) if out is None else out
        view = out.data  # a writable memoryview of the fresh array
        done = read_into(fd, view, offset)
        if done < nbytes:
            raise ExternalDataError(
                f"{where}: short read, {done} of {nbytes} bytes at offset {offset}; the file shrank"
            )
        return _readonly(out)


class OpenedData:
    """One tensor's external data, its file opened and checked once (:meth:`ExternalDataReader.open_data`): read
    by range any number of times, from any thread (positioned reads), until :meth:`close` (or the end of a
    ``with`` block). A file that shrinks is an ExternalDataError, as for every read."""

    def __init__(self, fd: int, offset: int, nbytes: int, where: str) -> None:
        self._fd: int | None = fd
        self._offset, self._nbytes, self._where = offset, nbytes, where

    def read_blocks(self, start: int, count: int, out: np.ndarray) -> Iterator[np.ndarray]:
        """Bytes ``[start, start + count)`` of the tensor's, a block at a time: each read into ``out`` (a uint8
        array, reused, so that the block stays in the processor's cache) and handed out as a read-only view of
        it, ``len(out)`` bytes but the last."""
        if not (0 <= start and 0 <= count and start + count <= self._nbytes) or not len(out):
            raise InvalidArgumentError(f"bytes {start}..{start + count} are not within the tensor's {self._nbytes}")
        for low in range(start, start + count, len(out)):
            if self._fd is None:
                raise InvalidArgumentError(f"{self._where} was closed")
            part = min(len(out), start + count - low)
            yield ExternalDataReader._copy(self._fd, self._offset + low, part, self._where, out[:part])

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> OpenedData:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# errno values meaning "the kernel will not copy between these two files" (old kernels, other file systems,
# special files): the caller falls back to reading and writing.
_NO_KERNEL_COPY = frozenset(
    getattr(errno, name) for name in ("EXDEV", "ENOSYS", "EOPNOTSUPP", "ENOTSUP", "EINVAL", "EBADF", "ETXTBSY")
    if hasattr(errno, name)
)


def _kernel_copy(fd: int, offset: int, count: int, out_fd: int, nbytes: int, where: str) -> int:
    """Copy ``count`` bytes from ``fd`` at ``offset`` to ``out_fd`` at its position; returns the bytes copied."""
    done = 0
    calls = [name for name in ("copy_file_range", "sendfile") if hasattr(os, name)]
    while done < count and calls:
        try:
            if calls[0] == "copy_file_range":
                n = os.copy_file_range(fd, out_fd, count - done, offset + done)
            else:
                n = os.sendfile(out_fd, fd, offset + done, count - done)
        except OSError as exc:
            if exc.errno in _NO_KERNEL_COPY:
                calls.pop(0)  # try the next way, from where this one stopped
                continue
            raise
        if n <= 0:
            raise ExternalDataError(
                f"{where}: short read, {done} of {nbytes} bytes at offset {offset}; the file shrank"
            )
        done += n
    return done
