"""Publishing a conversion: its buffer files and its manifest, made visible by one atomic rename.

The protocol (``PREFIX`` is the output prefix, ``ID`` a random conversion id, ``N`` a buffer index):

1. ``PREFIX.lock`` is created if missing and locked (``flock``, exclusive, not waiting): a second conversion into
   the same prefix fails at once with ``DestinationError`` naming the lock and the process that holds it. The
   lock file stays in place (it is empty but for the holder's name) and is harmless. It is opened like every
   other output, and only when it is a regular file of one name that holds nothing but a holder's name: anything
   else at that name (a symlink, a FIFO, a device, a folder, a hard link to another file, a file of other
   content) is refused with ``DestinationError`` (remove it), never followed, opened or written into. ``flock``
   is unreliable on network filesystems (NFS, SMB): there, do not run two conversions into one prefix at once.
2. Temporary manifests (``.PREFIX.json.ID.dmlbridge-tmp``) that no live writer holds are removed. A writer holds
   a ``flock`` on each file it is writing, so a file is known to be abandoned whatever process namespace its
   writer ran in. From here until step 4, a thread removes the retired buffer files
   (``.PREFIX.ID.N.bin.dmlbridge-old``, see step 6) and gives back the page cache of the other buffer files (the
   previous conversion's), without changing a byte of them. When the filesystem has no room for another copy of
   the previous conversion, the retired files are removed first instead.
3. Each buffer file is created under its final, unique name (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600),
   written, and flushed (unless ``fsync=False``). Nothing reads a buffer file that no manifest lists.
4. The manifest is written to a temporary file created the same way, every byte checked as written, and
   flushed; every new file then gets the ordinary mode (0666 less the umask) through its open descriptor.
5. **The commit point:** the temporary manifest is renamed onto ``PREFIX.json`` (Ctrl-C is held back for that
   one call). A rename replaces whatever name was there, a symlink included, and never follows it. The directory
   is flushed after it.
6. Buffer files that the new manifest does not list and no live writer holds (the previous conversion's, and any
   a failed one left) are retired: renamed to ``.PREFIX.ID.N.bin.dmlbridge-old``, which nothing reads and anyone
   may delete. The next conversion removes them (step 2): freeing a large file's blocks waits for the disk on a
   filesystem mounted with ``discard``, so it is done while that conversion writes. Then the lock is released.

Every file is created once, relative to the output directory opened at the start, and everything after
(writing, hashing, the mode, fsync) goes through its descriptor, never its name. A process killed at any moment
leaves ``PREFIX.json`` either the previous manifest, with the previous buffer files still in place, or the new
one with the new buffer files: a manifest is never read with another conversion's buffers. On an error or Ctrl-C
the files this conversion created are removed (with Ctrl-C held back while they are).

    >>> import tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> with Publication(os.path.join(folder, "w"), fsync=False) as publication:
    ...     with publication.new_buffer(0) as buffer:
    ...         _ = buffer.write(b"1234")
    ...     publication.publish(b"{}")
    >>> sorted(name for name in os.listdir(folder) if not name.endswith(".bin"))
    ['w.json', 'w.lock']
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import secrets
import socket
import stat
import sys
import threading
from types import TracebackType
from typing import Any, BinaryIO

try:
    import fcntl
except ImportError:  # Windows: no flock; see the README for what that means
    fcntl = None  # type: ignore[assignment]

from dmlbridge.errors import DestinationError
from dmlbridge.workers import sigint_deferred

__all__ = ["LOCK_SUFFIX", "RETIRED_SUFFIX", "TEMP_SUFFIX", "Publication", "buffer_name", "write_all"]

TEMP_SUFFIX = ".dmlbridge-tmp"
RETIRED_SUFFIX = ".dmlbridge-old"
LOCK_SUFFIX = ".lock"
_ID_DIGITS = 16  # hex digits of a conversion id: 64 random bits
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CREATE = os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC | _O_BINARY
_DIR_FD = os.open in os.supports_dir_fd and os.rename in os.supports_dir_fd  # (os.replace takes the same)
_BUFFER_TAIL = re.compile(rf"([0-9a-f]{{{_ID_DIGITS}}})\.[0-9]{{5}}\.bin")  # after "PREFIX."


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


def _umask_mode() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


_LOCK_TEXT_MAX = 512  # bytes: the most a lock file of dmlbridge holds ("pid N on HOST\n", or nothing)
_LOCK_TEXT = re.compile(rb"(?:pid [0-9]+ on [^\n]*\n)?")


def _refuse_as_lock(info: os.stat_result, where: str) -> None:
    """DestinationError unless ``info`` is a regular file of one name (what a lock file of dmlbridge is)."""
    kind = stat.S_IFMT(info.st_mode)
    what = {stat.S_IFLNK: "a symbolic link", stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO (named pipe)",
            stat.S_IFREG: None}.get(kind, "a device or a socket")
    if what is None and info.st_nlink > 1:
        what = f"a file with {info.st_nlink} names (a hard link: writing the lock would change the file of the others)"
    if what is None and info.st_size > _LOCK_TEXT_MAX:
        what = f"a file of {info.st_size} bytes (a lock file of dmlbridge holds at most {_LOCK_TEXT_MAX})"
    if what is not None:
        raise DestinationError(
            f"the lock {where!r} is {what}, not a lock file: dmlbridge locks only a regular file of its own (it "
            "never opens one through a link nor writes into another file); remove it (the next conversion creates "
            "a new lock), or choose another output prefix"
        )


class Publication:
    """One conversion's outputs, from taking the prefix's lock to publishing its manifest (see the module
    docstring). Use it as a context manager: leaving it by an exception removes what it created."""

    def __init__(self, prefix: str, *, fsync: bool) -> None:
        self.prefix = prefix
        self.directory = os.path.dirname(os.path.abspath(prefix))
        self.base = os.path.basename(prefix)
        self.fsync = fsync
        self.conversion_id = secrets.token_hex(_ID_DIGITS // 2)
        self.manifest_name = self.base + ".json"
        self._created: list[str] = []  # names this conversion made, to remove if it fails
        self._open: list[int] = []  # descriptors of files being written (each holds its flock)
        self._published = False
        try:
            flags = os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC
            self._dir_fd: int | None = os.open(self.directory, flags) if _DIR_FD else None
        except OSError as exc:
            raise DestinationError(f"cannot open the output directory {self.directory!r}: {exc.strerror}") from None
        self._lock_fd: int | None = None
        previous: list[int] = []
        try:
            self._lock_fd = self._take_lock()
            self._remove_abandoned(temporary_only=True)
            retired, previous = self._retired_files(), self._previous_buffers()
            if not self._room_for_another(previous):  # (the new files may need the retired ones' blocks)
                for name in retired:
                    self._unlink(name)
                retired = []
            self._tidy = _BackgroundTidy(self, retired, previous)
        except BaseException:  # (nothing stays open: the lock, the previous buffers, the directory)
            for fd in previous:
                os.close(fd)
            self._release_lock()
            self._close_dir()
            raise

    # --- names relative to the pinned directory -------------------------------------------------------------

    def _path(self, name: str) -> str:
        return name if self._dir_fd is not None else os.path.join(self.directory, name)

    def _open_name(self, name: str, flags: int, mode: int = 0o600) -> int:
        return os.open(self._path(name), flags, mode, dir_fd=self._dir_fd)

    def _unlink(self, name: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self._path(name), dir_fd=self._dir_fd)

    # --- the lock ------------------------------------------------------------------------------------------------

    def _take_lock(self) -> int | None:
        """Open and lock PREFIX.lock (see the module docstring, step 1); DestinationError names it when it cannot
        be, with what to do. No descriptor is left open on any error."""
        name = self.base + LOCK_SUFFIX
        where = os.path.join(self.directory, name)
        fd = self._open_lock(name, where)
        if fcntl is None:
            return fd
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise DestinationError(f"cannot lock {where!r}: {exc.strerror or exc}") from None
                text = os.pread(fd, _LOCK_TEXT_MAX + 1, 0)
                holder = text.decode("utf-8", "replace").strip() if _LOCK_TEXT.fullmatch(text) else ""
                raise DestinationError(
                    f"another conversion into {self.prefix!r} is running: it holds the lock {where!r} "
                    f"({holder or 'holder unknown'}); wait for it to finish, or choose another output prefix"
                ) from None
            if not _LOCK_TEXT.fullmatch(os.pread(fd, _LOCK_TEXT_MAX + 1, 0)):
                raise DestinationError(
                    f"the lock {where!r} is not a lock file: it holds something else, which the lock's text would "
                    "overwrite; move it away (the next conversion creates a new lock), or choose another output "
                    "prefix"
                )
            with contextlib.suppress(OSError):  # who holds it, for the message above (the file stays in place)
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_lock(self, name: str, where: str) -> int:
        """A read-write descriptor of the lock file: created (``O_EXCL``) when there is none, else the regular
        file of one name that is there, never followed through a symlink nor opened when it is anything else (a
        FIFO, a device, a folder) or a file with other names (a hard link: the lock's text would change it)."""
        for _ in range(3):  # (a lock removed between two steps is created again)
            try:
                seen = os.lstat(self._path(name), dir_fd=self._dir_fd)
            except FileNotFoundError:
                try:
                    return self._open_name(name, _CREATE, _umask_mode())
                except FileExistsError:
                    continue
                except OSError as exc:
                    raise DestinationError(f"cannot create the lock {where!r}: {exc.strerror or exc}") from None
            except OSError as exc:
                raise DestinationError(f"cannot open the lock {where!r}: {exc.strerror or exc}") from None
            _refuse_as_lock(seen, where)
            try:
                fd = self._open_name(name, os.O_RDWR | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC | _O_BINARY)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise DestinationError(f"cannot open the lock {where!r}: {exc.strerror or exc}") from None
            try:
                info = os.fstat(fd)
                if (info.st_dev, info.st_ino) != (seen.st_dev, seen.st_ino):
                    raise DestinationError(f"the lock {where!r} was replaced while it was opened; convert again")
                _refuse_as_lock(info, where)
            except BaseException:
                os.close(fd)
                raise
            return fd
        raise DestinationError(f"the lock {where!r} was removed three times while it was opened; convert again")

    # --- writing ---------------------------------------------------------------------------------------------

    def _create(self, name: str) -> int:
        try:
            fd = self._open_name(name, _CREATE, 0o600)
        except FileExistsError:
            raise DestinationError(f"{os.path.join(self.directory, name)!r} exists already; convert again") from None
        self._created.append(name)
        self._open.append(fd)
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held while written: the next conversion leaves a live file alone
        return fd

    def new_buffer(self, index: int) -> BinaryIO:
        """A new, empty buffer file (read-write, unbuffered), under its final name; closed by the caller."""
        fd = self._create(buffer_name(self.base, self.conversion_id, index))
        return open(fd, "r+b", buffering=0, closefd=False)

    @property
    def buffer_names(self) -> list[str]:
        """The names of the buffer files this conversion made, in order."""
        return [name for name in self._created if name.endswith(".bin")]

    def publish(self, manifest: bytes) -> None:
        """Write ``manifest`` and rename it onto PREFIX.json: the one step that makes this conversion visible.
        Then the previous conversion's buffer files are retired (the next conversion removes them)."""
        self._tidy.stop(finish_removals=True)
        temp = f".{self.manifest_name}.{self.conversion_id}{TEMP_SUFFIX}"
        fd = self._create(temp)
        write_all(fd, manifest)
        mode = _umask_mode()
        for each in self._open:
            if self.fsync:
                os.fsync(each)
            if hasattr(os, "fchmod"):
                os.fchmod(each, mode)  # the ordinary mode, never one copied from what a name pointed at
            if fcntl is not None:
                fcntl.flock(each, fcntl.LOCK_UN)  # published files are no one's temporaries (a plan may keep a dup)
        with sigint_deferred():
            os.replace(self._path(temp), self._path(self.manifest_name), src_dir_fd=self._dir_fd,
                       dst_dir_fd=self._dir_fd)
            self._created.remove(temp)
            self._published = True
        if self.fsync and self._dir_fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._dir_fd)
        self._remove_abandoned(temporary_only=False)  # (the previous conversion's buffer files are retired)

    # --- cleaning up -----------------------------------------------------------------------------------------

    def _retired_name(self, name: str) -> str:
        return f".{name}{RETIRED_SUFFIX}"

    def _retired_files(self) -> list[str]:
        """The retired buffer files of this prefix (see :meth:`_remove_abandoned`), for :class:`_BackgroundTidy`."""
        try:
            names = os.listdir(self._dir_fd if self._dir_fd is not None else self.directory)
        except OSError:
            return []
        head = f".{self.base}."
        return [name for name in names if name.startswith(head) and name.endswith(".bin" + RETIRED_SUFFIX)
                and _BUFFER_TAIL.fullmatch(name[len(head) : -len(RETIRED_SUFFIX)]) is not None]

    def _room_for_another(self, previous: list[int]) -> bool:
        """Whether the filesystem has room for another conversion the size of the previous one without the blocks
        of the retired files (else they are removed before anything is written)."""
        try:
            stats = os.statvfs(self._dir_fd if self._dir_fd is not None else self.directory)
            needed = sum(os.fstat(fd).st_size for fd in previous)
        except (OSError, AttributeError):
            return False
        return stats.f_bavail * stats.f_frsize >= needed + (64 << 20)

    def _previous_buffers(self) -> list[int]:
        """Read-only descriptors of the buffer files of other conversions in this prefix (the previous one's, which
        are retired once this one is published, and any a failed one left), for :class:`_BackgroundTidy`."""
        if not hasattr(os, "posix_fadvise"):
            return []
        try:
            names = os.listdir(self._dir_fd if self._dir_fd is not None else self.directory)
        except OSError:
            return []
        fds = []
        for name in names:
            if self._abandoned(name, temporary_only=False) and name.endswith(".bin"):
                with contextlib.suppress(OSError):
                    fds.append(self._open_name(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC))
        return fds

    def _abandoned(self, name: str, temporary_only: bool) -> bool:
        """Whether ``name`` is a file of this prefix that no live writer holds and no manifest needs: a temporary
        manifest, or (after publishing) a buffer file of another conversion."""
        if name.startswith(f".{self.base}.") and name.endswith(TEMP_SUFFIX):
            return True
        if temporary_only or not name.startswith(self.base + ".") or not name.endswith(".bin"):
            return False
        match = _BUFFER_TAIL.fullmatch(name[len(self.base) + 1 :])
        return match is not None and match.group(1) != self.conversion_id

    def _remove_abandoned(self, temporary_only: bool) -> None:
        """Remove the files of this prefix left by writers that are gone (a file whose flock can be taken has no
        writer, whatever its process namespace): temporary manifests are removed; buffer files of other
        conversions are retired (renamed ``.NAME.dmlbridge-old``), for the next conversion to remove while it
        writes. Never fails: leftovers are harmless. Not on Windows (no flock)."""
        if fcntl is None:
            return
        try:
            names = os.listdir(self._dir_fd if self._dir_fd is not None else self.directory)
        except OSError:
            return
        for name in names:
            if name in self._created or not self._abandoned(name, temporary_only):
                continue
            try:
                fd = self._open_name(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC)
            except OSError:
                continue
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live writer holds it
            finally:
                os.close(fd)
            if name.endswith(TEMP_SUFFIX):
                self._unlink(name)
            else:
                self._retire(name)

    def _retire(self, name: str) -> None:
        """Rename a buffer file no manifest lists to its retired name (removed if that fails). Removing a large file
        waits for its blocks to be freed, and on a filesystem mounted with ``discard`` for the disk to discard them
        (0.15 s per GiB measured): the next conversion does it in the background."""
        try:
            os.replace(self._path(name), self._path(self._retired_name(name)), src_dir_fd=self._dir_fd,
                       dst_dir_fd=self._dir_fd)
        except OSError:
            self._unlink(name)

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock; the lock file stays
            self._lock_fd = None

    def _close_dir(self) -> None:
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

    def close(self) -> None:
        """Remove what an unpublished conversion created, and release the lock."""
        with sigint_deferred():  # a second Ctrl-C must not leave a file behind
            self._tidy.stop(finish_removals=False)
            for fd in self._open:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._open.clear()
            if not self._published:
                for name in self._created:
                    self._unlink(name)
            self._created.clear()
            self._release_lock()
            self._close_dir()

    def __enter__(self) -> Publication:
        return self

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


class _BackgroundTidy:
    """While the new files are written, a thread removes the retired buffer files (those of the conversion before
    the previous one: freeing their blocks waits for the disk on a filesystem mounted with ``discard``), then
    gives back the page cache of the previous conversion's buffer files: they are retired once the new
    conversion is published, and on a machine whose free memory goes cold (a virtual machine whose host takes
    back the memory its guest freed) the new files' pages come much faster from the ones these free than from
    fresh memory. A page can only be given back once it is on the disk: a chunk the previous conversion left
    unwritten (it ran without fsync) is written first (``sync_file_range``, Linux; the disk is otherwise idle
    while a conversion without fsync runs), then dropped (``POSIX_FADV_DONTNEED``). Neither call changes a byte
    of a file, and pages another process maps stay; the previous files stay whole until the commit point, so a
    failed conversion still leaves them readable. Stopped (and joined) before the new files are flushed and
    published: the removals are finished first (after a conversion, no retired file older than the previous
    conversion's is left), the page release is left where it is. A failed conversion stops after the file being
    removed (Ctrl-C is not kept waiting): the next one removes the rest."""

    _CHUNK = 32 << 20  # bytes per step: stop() waits for at most one (or for one file's removal)

    def __init__(self, publication: Publication, retired: list[str], fds: list[int]) -> None:
        self._unlink = publication._unlink  # (names relative to the directory it holds open until stop())
        self._retired = retired
        self._fds = fds
        self._stopping = threading.Event()
        self._removing = True  # (False: stop the removals too)
        self._thread = None
        if retired or fds:
            self._thread = threading.Thread(target=self._run, name="dmlbridge-tidy", daemon=True)
            with sigint_deferred():  # (start waits on a Condition)
                self._thread.start()

    def _run(self) -> None:
        for name in self._retired:
            if self._stopping.is_set() and not self._removing:
                return
            self._unlink(name)
        for fd in self._fds:
            with contextlib.suppress(OSError):
                size = os.fstat(fd).st_size
                for offset in range(0, size, self._CHUNK):
                    if self._stopping.is_set():
                        return
                    if _SYNC_FILE_RANGE is not None:
                        _SYNC_FILE_RANGE(fd, offset, self._CHUNK, _SYNC_FILE_RANGE_WRITE_AND_WAIT)
                    os.posix_fadvise(fd, offset, self._CHUNK, os.POSIX_FADV_DONTNEED)

    def stop(self, *, finish_removals: bool) -> None:
        with sigint_deferred():  # (Event.set and join go through Conditions)
            self._removing = finish_removals
            self._stopping.set()
            if self._thread is not None:
                self._thread.join()
                self._thread = None
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []
