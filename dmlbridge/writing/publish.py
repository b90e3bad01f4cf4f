"""Publishing a conversion: its buffer files and its manifest, made visible by one atomic rename.

The protocol (``PREFIX`` is the output prefix, ``ID`` a random conversion id, ``N`` a buffer index; the names are
:mod:`dmlbridge.writing.folder`'s):

1. ``PREFIX.lock`` is created if missing and locked (``flock``, exclusive, not waiting): a second conversion into
   the same prefix fails at once with ``DestinationError`` naming the lock and the process that holds it. The
   lock file holds nothing but the holder's name, and the conversion removes it when it ends, published or not
   (:meth:`dmlbridge.writing.folder.OutputFolder.release_lock`); a killed one leaves it, held by no one, and the
   next conversion or :func:`dmlbridge.writing.cleanup.clean` takes it and removes it. A lock is taken only when,
   once locked, its name is still the file locked (the holder may have removed it meanwhile), so two conversions
   never both hold it. It is opened like every other output, and only when it is a regular file of one name that
   holds nothing but a holder's name: anything else at that name (a symlink, a FIFO, a device, a folder, a hard
   link to another file, a file of other content) is refused with ``DestinationError`` (remove it), never
   followed, opened, written into or removed. ``flock`` is unreliable on network filesystems (NFS, SMB): there,
   do not run two conversions into one prefix at once.
2. Temporary manifests (``.PREFIX.json.ID.dmlbridge-tmp``) that no live writer holds are removed. A writer holds
   a ``flock`` on each file it is writing, so a file is known to be abandoned whatever process namespace its
   writer ran in. Retired buffer files that earlier versions left (``.PREFIX.ID.N.bin.dmlbridge-old``) are
   removed here too when the filesystem has no room for another copy of the previous conversion. From here
   until step 4, a thread gives back the page cache of the other buffer files (the previous conversion's),
   without changing a byte of them.
3. Each buffer file is created under its final, unique name (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600),
   written, and flushed (unless ``fsync=False``). Nothing reads a buffer file that no manifest lists.
4. The manifest is written to a temporary file created the same way, every byte checked as written, and
   flushed; every new file then gets the ordinary mode (0666 less the umask) through its open descriptor.
5. **The commit point:** the temporary manifest is renamed onto ``PREFIX.json`` (Ctrl-C is held back for that
   one call). A rename replaces whatever name was there, a symlink included, and never follows it. The directory
   is flushed after it.
6. Buffer files that the new manifest does not list and no live writer holds (the previous conversion's, and any
   a failed or killed one left), temporary manifests and retired files are removed, before :meth:`publish`
   returns (Ctrl-C is held back until they are). Freeing a large file waits for the disk on a filesystem mounted
   with ``discard``; the call pays it, not the disk space between conversions. A file that cannot be removed is
   not a failure of the conversion, which is published: :meth:`publish` returns it, ``convert_model`` warns
   (``CleanupWarning``) and :func:`dmlbridge.writing.cleanup.clean` removes it later. Then the lock is released
   and removed.

Every file is created once, relative to the output directory opened at the start, and everything after
(writing, hashing, the mode, fsync) goes through its descriptor, never its name. A process killed at any moment
leaves ``PREFIX.json`` either the previous manifest, with the previous buffer files still in place, or the new
one with the new buffer files (and, killed during step 6, some of the previous ones beside them, which nothing
reads): a manifest is never read with another conversion's buffers. On an error or Ctrl-C before the commit
point the files this conversion created are removed (with Ctrl-C held back while they are).

    >>> import tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> with Publication(os.path.join(folder, "w"), fsync=False) as publication:
    ...     with publication.new_buffer(0) as buffer:
    ...         _ = buffer.write(b"1234")
    ...     publication.publish(b"{}").failed
    []
    >>> sorted(name for name in os.listdir(folder) if not name.endswith(".bin"))  # (the lock is removed)
    ['w.json']
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import shutil
import sys
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any, BinaryIO

from dmlbridge.errors import DestinationError
from dmlbridge.system.locks import mark_busy, unmark_busy
from dmlbridge.system.windows import is_sharing_violation
from dmlbridge.system.workers import sigint_deferred
from dmlbridge.writing.folder import LEFTOVERS, TEMP_SUFFIX, OutputFolder, Removals, umask_mode

__all__ = ["Publication", "buffer_name", "write_all"]

_ID_DIGITS = 16  # hex digits of a conversion id: 64 random bits
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CREATE = os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC | _O_BINARY
_WINDOWS = sys.platform == "win32"
# Windows: how long the commit rename is tried again while another process has PREFIX.json open without
# FILE_SHARE_DELETE (a reader of dmlbridge never does; another program may, for a moment)
_RENAME_TRIES, _RENAME_PAUSE = 50, 0.1


def buffer_name(base: str, conversion_id: str, index: int) -> str:
    """The file name of buffer ``index`` of a conversion into the prefix whose last component is ``base``."""
    return f"{base}.{conversion_id}.{index:05d}.bin"


def write_all(fd: int, data: Any) -> None:
    """Write every byte of ``data`` to ``fd``: one ``write`` may write fewer (Linux caps it at 0x7ffff000 bytes; a
    full disk may take part), so the count is checked and the rest written; a write of nothing is ENOSPC."""
    view = memoryview(data).cast("B")
    while len(view):
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, "no byte could be written")
        view = view[written:]


class Publication:
    """One conversion's outputs, from taking the prefix's lock to publishing its manifest (see the module
    docstring). Use it as a context manager, which takes the lock as it is entered: leaving it by an exception
    removes what it created, and leaving it at all releases and removes the lock."""

    def __init__(self, prefix: str, *, fsync: bool) -> None:
        self.prefix = prefix
        self.fsync = fsync
        self.conversion_id = secrets.token_hex(_ID_DIGITS // 2)
        self._created: list[str] = []  # names this conversion made, to remove if it fails
        self._open: list[int] = []  # descriptors of files being written (each holds its flock)
        self._published = False
        self._folder = OutputFolder(prefix)
        self.directory, self.base = self._folder.directory, self._folder.base
        self.manifest_name = self.base + ".json"
        self._tidy = _PageRelease([])

    def __enter__(self) -> Publication:
        """Take the prefix's lock and tidy what it may (steps 1 and 2). Taken here, not when the object is made,
        with Ctrl-C held back meanwhile: whatever stops it, the lock is given back and removed, and once this
        returns the ``with`` block owns it."""
        previous: list[int] = []
        try:
            with sigint_deferred():
                self._folder.take_lock()
                self._folder.remove_leftovers(("temporary",), set())
                previous = self._previous_buffers()
                if not self._room_for_another(previous):  # (the new files may need the retired ones' blocks)
                    self._folder.remove_leftovers(("retired",), set())
                self._tidy = _PageRelease(previous)
                previous = []  # (the release closes them)
        except BaseException:  # (nothing stays: the previous buffers, the lock, the directory)
            for fd in previous:
                os.close(fd)
            self.close()
            raise
        return self

    # --- writing ---------------------------------------------------------------------------------------------

    def _create(self, name: str) -> int:
        try:
            fd = self._folder.open_name(name, _CREATE, 0o600)
        except FileExistsError:
            raise DestinationError(f"{self._folder.where(name)!r} exists already; convert again") from None
        self._created.append(name)
        self._open.append(fd)
        mark_busy(fd)  # held while written: the next conversion leaves a live file alone
        return fd

    def new_buffer(self, index: int) -> BinaryIO:
        """A new, empty buffer file (read-write, unbuffered), under its final name; closed by the caller."""
        fd = self._create(buffer_name(self.base, self.conversion_id, index))
        return open(fd, "r+b", buffering=0, closefd=False)

    @property
    def buffer_names(self) -> list[str]:
        """The names of the buffer files this conversion made, in order."""
        return [name for name in self._created if name.endswith(".bin")]

    def publish(self, manifest: bytes | Iterable[bytes]) -> Removals:
        """Write ``manifest`` (its bytes, or its pieces in order) and rename it onto PREFIX.json: the one step that
        makes this conversion visible. Then the previous conversion's buffer files (and what failed conversions
        left) are removed; returns what was removed and what could not be (step 6 of the module docstring)."""
        self._tidy.stop()
        folder = self._folder
        temp = f".{self.manifest_name}.{self.conversion_id}{TEMP_SUFFIX}"
        fd = self._create(temp)
        for piece in (manifest,) if isinstance(manifest, bytes) else manifest:
            write_all(fd, piece)
        mode = umask_mode()
        for each in self._open:
            if self.fsync:
                os.fsync(each)
            if hasattr(os, "fchmod"):
                os.fchmod(each, mode)  # the ordinary mode, never one copied from what a name pointed at
            unmark_busy(each)  # published files are no one's temporaries (a plan may keep a dup)
        # Closed before it is renamed: Windows refuses to rename a file this process holds open (the lock of the
        # prefix keeps every other conversion, and clean, away from it meanwhile).
        self._open.remove(fd)
        os.close(fd)
        with sigint_deferred():
            self._commit(temp)
            self._created.remove(temp)
            self._published = True
        if self.fsync and folder.dir_fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(folder.dir_fd)
        return folder.remove_leftovers(LEFTOVERS, set(self._created))

    def _commit(self, temp: str) -> None:
        """Rename the temporary manifest onto PREFIX.json (step 5). On Windows a rename onto a file another program
        holds open without FILE_SHARE_DELETE fails with a sharing violation: it is tried again for a few seconds,
        then DestinationError says what holds it."""
        folder = self._folder
        for attempt in range(_RENAME_TRIES if _WINDOWS else 1):
            try:
                os.replace(folder.path(temp), folder.path(self.manifest_name), src_dir_fd=folder.dir_fd,
                           dst_dir_fd=folder.dir_fd)
                return
            except PermissionError as exc:
                if not _WINDOWS or attempt == _RENAME_TRIES - 1 or not (
                        is_sharing_violation(exc) or getattr(exc, "winerror", None) == 5):
                    raise DestinationError(
                        f"cannot replace {folder.where(self.manifest_name)!r}: {exc.strerror or exc} (another "
                        "program holds it open); close it and convert again"
                    ) from None
                time.sleep(_RENAME_PAUSE)

    # --- the previous conversion ---------------------------------------------------------------------------

    def _room_for_another(self, previous: list[int]) -> bool:
        """Whether the filesystem has room for another conversion the size of the previous one without the blocks
        of the retired files (else they are removed before anything is written)."""
        try:
            if hasattr(os, "statvfs"):
                stats = os.statvfs(self._folder.dir_fd if self._folder.dir_fd is not None else self.directory)
                free = stats.f_bavail * stats.f_frsize
            else:  # Windows
                free = shutil.disk_usage(self.directory).free
            needed = sum(os.fstat(fd).st_size for fd in previous)
        except OSError:
            return False
        return free >= needed + (64 << 20)

    def _previous_buffers(self) -> list[int]:
        """Read-only descriptors of the buffer files of other conversions in this prefix (the previous one's, which
        are removed once this one is published, and any a failed one left), for :class:`_PageRelease`."""
        if not hasattr(os, "posix_fadvise"):
            return []
        fds = []
        for name in self._folder.names():
            if self._folder.kind(name) == "buffer":
                with contextlib.suppress(OSError):
                    fds.append(self._folder.open_name(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC))
        return fds

    def close(self) -> None:
        """Remove what an unpublished conversion created, and release and remove the lock."""
        with sigint_deferred():  # a second Ctrl-C must not leave a file behind
            self._tidy.stop()
            for fd in self._open:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._open.clear()
            if not self._published:
                for name in self._created:
                    self._folder.unlink(name)
            self._created.clear()
            self._folder.close()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _load_sync_file_range() -> Any:
    """libc's sync_file_range (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_SYNC_FILE_RANGE = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE_AND_WAIT = 7  # SYNC_FILE_RANGE_WAIT_BEFORE | _WRITE | _WAIT_AFTER: the range is on disk


class _PageRelease:
    """While the new files are written, a thread gives back the page cache of the previous conversion's buffer
    files: they are removed once the new conversion is published, and on a machine whose free memory goes cold (a
    virtual machine whose host takes back the memory its guest freed) the new files' pages come much faster from
    the ones these free than from fresh memory. A page can only be given back once it is on the disk: a chunk the
    previous conversion left unwritten (it ran without fsync) is written first (``sync_file_range``, Linux; the
    disk is otherwise idle while a conversion without fsync runs), then dropped (``POSIX_FADV_DONTNEED``).
    Neither call changes a byte of a file, and pages another process maps stay; the previous files stay whole
    until the commit point, so a failed conversion still leaves them readable. Stopped (and joined) before the
    new files are flushed and published, or when the conversion fails: the release is left where it is."""

    _CHUNK = 32 << 20  # bytes per step: stop() waits for at most one

    def __init__(self, fds: list[int]) -> None:
        self._fds = fds
        self._stopping = threading.Event()
        self._thread = None
        if fds:
            self._thread = threading.Thread(target=self._run, name="dmlbridge-page-release", daemon=True)
            with sigint_deferred():  # (start waits on a Condition)
                self._thread.start()

    def _run(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                size = os.fstat(fd).st_size
                for offset in range(0, size, self._CHUNK):
                    if self._stopping.is_set():
                        return
                    if _SYNC_FILE_RANGE is not None:
                        _SYNC_FILE_RANGE(fd, offset, self._CHUNK, _SYNC_FILE_RANGE_WRITE_AND_WAIT)
                    os.posix_fadvise(fd, offset, self._CHUNK, os.POSIX_FADV_DONTNEED)

    def stop(self) -> None:
        with sigint_deferred():  # (Event.set and join go through Conditions)
            self._stopping.set()
            if self._thread is not None:
                self._thread.join()
                self._thread = None
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []
