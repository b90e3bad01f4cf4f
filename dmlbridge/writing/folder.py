"""The folder of an output prefix: the names of the prefix's files, its lock, and removing what no conversion needs.

A prefix ``PREFIX`` (the last component ``NAME``) in its folder has these files (``ID`` a conversion id of 16 hex
digits, ``N`` a buffer index of 5 digits), and no other name is ever taken for one of them:

- ``NAME.json``, the manifest, and ``NAME.lock``, the lock, there while a conversion (or ``clean``) holds it
  and after a killed one (see :meth:`OutputFolder.take_lock` and :meth:`OutputFolder.release_lock`);
- ``NAME.ID.N.bin``, buffer files: the ones the manifest lists are the current conversion's; any other is a
  previous conversion's, or one a failed or killed conversion left;
- ``.NAME.json.ID.dmlbridge-tmp``, a temporary manifest (a conversion's, until its commit point);
- ``.NAME.ID.N.bin.dmlbridge-old``, a retired buffer file (earlier versions renamed the previous conversion's
  buffer files so and removed them one conversion later).

Every name is used relative to the folder, opened once (on POSIX; Windows has no ``dir_fd``, so names are joined
to the folder's path). A file is removed only when no live writer holds it: on POSIX a writer holds a ``flock``
on each file it writes, so a file whose ``flock`` can be taken has none, whatever process namespace it ran in; on
Windows a writer's open handle forbids the removal itself (a sharing violation), so a file that can be removed has
none. :func:`dmlbridge.writing.cleanup.clean` removes what conversions leave behind (see its docstring), a stale
lock among them. Names in other letter case are the prefix's only where the folder takes them so (:meth:`kind`).

    >>> import os, tempfile
    >>> folder = OutputFolder(os.path.join(tempfile.mkdtemp(), "w"))
    >>> [folder.kind(name) for name in ("w.0123456789abcdef.00000.bin", ".w.json.0123456789abcdef.dmlbridge-tmp",
    ...                                 "w.json", "w.x.0123456789abcdef.00000.bin")]
    ['buffer', 'temporary', None, None]
    >>> folder.close()
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import stat
import sys
import time
from typing import NamedTuple

from dmlbridge.errors import DestinationError, InvalidArgumentError
from dmlbridge.system.files import read_at, write_at
from dmlbridge.system.identity import FileId, file_id, spelled_alike
from dmlbridge.system.locks import try_lock
from dmlbridge.system.names import MAX_NAME_BYTES, name_problem
from dmlbridge.system.windows import is_sharing_violation
from dmlbridge.system.workers import sigint_deferred

__all__ = ["FILE_HELD", "LEFTOVERS", "LOCK_GONE", "LOCK_HELD", "LOCK_SUFFIX", "RETIRED_SUFFIX", "TEMP_SUFFIX",
           "OutputFolder", "Removals", "output_prefix", "prefix_folder"]

TEMP_SUFFIX = ".dmlbridge-tmp"
RETIRED_SUFFIX = ".dmlbridge-old"
LOCK_SUFFIX = ".lock"
LEFTOVERS = ("buffer", "temporary", "retired")
"""The kinds of file (:meth:`OutputFolder.kind`) a conversion removes once it is published, but for its own, and
:func:`~dmlbridge.writing.cleanup.clean` removes, but for those the manifest lists."""
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CREATE = os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC | _O_BINARY
_DIR_FD = os.open in os.supports_dir_fd and os.rename in os.supports_dir_fd  # (os.replace takes the same)
_WINDOWS = sys.platform == "win32"
_FILE_ATTRIBUTE_REPARSE_POINT = 0x400  # (Windows: a symbolic link or a junction)
_BUFFER_TAIL = re.compile(r"[0-9a-f]{16}\.[0-9]{5}\.bin")  # after "NAME."
_TEMP_TAIL = re.compile(r"json\.[0-9a-f]{16}" + re.escape(TEMP_SUFFIX))  # after ".NAME."
_LOCK_TEXT_MAX = 512  # bytes: the most a lock file of dmlbridge holds ("pid N on HOST\n", or nothing)
_LOCK_TEXT = re.compile(rb"(?:pid [0-9]+ on [^\n]*\n)?")
_WAIT = "wait for it to finish, or choose another output prefix"
# How often a lock is looked at again when it was removed or replaced while it was taken (each time, another
# process took it and let it go meanwhile), and how often of those a Windows refusal of access is taken for a removal
# under way (it lasts while the remover's handle is open: microseconds), with a pause each time.
_LOCK_TRIES, _WINDOWS_TRIES, _WINDOWS_PAUSE = 100, 20, 0.01
_ERROR_ACCESS_DENIED = 5
LOCK_HELD = "another process has it open"
FILE_HELD = "another program has the file open" if _WINDOWS else "a live writer holds it"
"""Why a leftover that someone holds stays: on Windows its removal met a handle opened without
``FILE_SHARE_DELETE`` (a sharing violation: a reader's, such as Python's ``open()``, as well as a writer's); on
POSIX a live writer's ``flock`` (a reader cannot keep a file from being removed there)."""
LOCK_GONE = "it is no longer the lock that was held"


def umask_mode() -> int:
    """The ordinary mode of a new file: 0666 less the umask."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def output_prefix(prefix: object, what: str = "out_prefix") -> str:
    """``prefix`` as a string, checked: a path naming a file (no extension) in a folder that exists."""
    if not isinstance(prefix, (str, os.PathLike)):
        raise InvalidArgumentError(f"{what} must be a path, not {type(prefix).__name__}")
    text = os.fspath(prefix)
    text = text if isinstance(text, str) else os.fsdecode(text)
    if not text or text.endswith(("/", os.sep)) or "\x00" in text:
        raise InvalidArgumentError(f"{what} {text!r} must name a file (without extension), e.g. 'out/model'")
    prefix_folder(text, what)
    return text


def prefix_folder(prefix: str, what: str = "out_prefix") -> str:
    """The real path of the folder of ``prefix``, resolved once and as the system resolves it when it opens the
    files (a symbolic link first, then ``..``: ``link/../w`` is beside the link's target, and ``missing/../w`` is
    refused on POSIX, where a missing folder cannot be passed through). Refused: a last component ``.`` or ``..``
    (it names a folder, not the outputs), a name that is not UTF-8 (the manifest and the binding list name the
    files in UTF-8), a folder that does not exist or is a file. Writing and reading go through this one path."""
    name = os.path.basename(prefix)
    if name in (os.curdir, os.pardir):
        raise InvalidArgumentError(
            f"{what} {prefix!r} ends in {name!r}, which names a folder, not the outputs' names: give a prefix in it, "
            f"e.g. {os.path.join(prefix, 'model')!r}"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"{what} {prefix!r} is a file name that is not UTF-8 (bytes the system's encoding cannot decode): the "
            "manifest and the binding list name the buffer files in UTF-8, so no reader could find them; choose "
            "a name in UTF-8"
        ) from None
    # The manifest's reader (and dmlupload) takes only plain names, on every system: a conversion it could not
    # read, or one made on Linux that Windows could not (a ':' or a device name there), is refused before it is made.
    problem = name_problem(f"{name}.{'0' * 16}.00000.bin")
    if problem is not None:
        raise InvalidArgumentError(
            f"{what} {prefix!r} would name its buffer files {name + '.<id>.00000.bin'!r}, which {problem}: "
            "load_plan reads only buffer files of plain names, which every system takes as files beside the "
            "manifest (no ':' or '\\', no leading dot, no Windows device name such as CON or LPT1, at most "
            f"{MAX_NAME_BYTES} bytes); choose another name, e.g. {os.path.join(os.path.dirname(prefix), 'model')!r}"
        )
    given = os.path.dirname(prefix) or os.curdir
    try:
        directory = os.path.realpath(given, strict=True)
    except (OSError, ValueError):
        raise DestinationError(
            f"the output directory {given!r} of {what} {prefix!r} does not exist: create it first (mkdir), or "
            "choose a prefix in a folder that exists"
        ) from None
    if not os.path.isdir(directory):
        raise DestinationError(f"{given!r} is a file, not a folder: the prefix {prefix!r} cannot be under it")
    return directory


class Removals(NamedTuple):
    """What :meth:`OutputFolder.remove_leftovers` did: the names it ``removed`` with the bytes each held, the
    names a live writer ``held`` (left alone) and the names it ``failed`` to remove, each with the reason."""

    removed: list[tuple[str, int]]
    held: list[str]
    failed: list[tuple[str, str]]


class OutputFolder:
    """The folder of ``prefix``, opened once (see the module docstring); :meth:`close` it."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.directory = os.path.realpath(os.path.dirname(prefix) or os.curdir)  # (as prefix_folder resolved it)
        self.base = os.path.basename(prefix)
        self.lock_fd: int | None = None
        self.lock_found: int | None = None
        try:
            flags = os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC
            self.dir_fd: int | None = os.open(self.directory, flags) if _DIR_FD else None
        except OSError as exc:
            raise DestinationError(f"cannot open the output directory {self.directory!r}: {exc.strerror}") from None

    # --- names relative to the pinned directory -------------------------------------------------------------

    def path(self, name: str) -> str:
        """What to give a system call (with ``dir_fd=self.dir_fd``) for ``name``."""
        return name if self.dir_fd is not None else os.path.join(self.directory, name)

    def where(self, name: str) -> str:
        """``name``'s full path, for messages."""
        return os.path.join(self.directory, name)

    def open_name(self, name: str, flags: int, mode: int = 0o600) -> int:
        return os.open(self.path(name), flags, mode, dir_fd=self.dir_fd)

    def unlink(self, name: str) -> None:
        """Remove ``name`` if it can be (a file that cannot be removed is harmless where this is used)."""
        with contextlib.suppress(OSError):
            os.unlink(self.path(name), dir_fd=self.dir_fd)

    def exists(self, name: str) -> bool:
        """Whether the folder holds ``name`` (of any kind, a symlink not followed)."""
        try:
            os.lstat(self.path(name), dir_fd=self.dir_fd)
        except FileNotFoundError:
            return False
        except OSError:
            return True  # (something is there that cannot be looked at: taking the lock says what)
        return True

    def names(self) -> list[str]:
        """The names in the folder (none when it cannot be listed)."""
        try:
            return os.listdir(self.dir_fd if self.dir_fd is not None else self.directory)
        except OSError:
            return []

    def kind(self, name: str) -> str | None:
        """``"buffer"``, ``"temporary"`` or ``"retired"`` for a file name of this prefix that a conversion makes
        besides its manifest and lock (see the module docstring), else None (another prefix's, or no one's). A
        name that differs from the prefix's only in letter case (``Model.<id>.00000.bin`` for ``model``) is the
        prefix's only when the folder takes it for that name: when both spellings look up the one file
        (:func:`~dmlbridge.system.identity.spelled_alike`), as in most Windows folders and Linux's vfat, exFAT or
        casefold ones; where the folder keeps the two apart it is another prefix's."""
        found = _kind(self.base, name)
        if found is not None:
            return found[0]
        folded = _kind(self.base.lower(), name.lower())  # (the tail's own letters are lower case: hex, "bin")
        if folded is None:
            return None
        kind, tail = folded
        spelling = f".{self.base}.{tail}" if kind != "buffer" else f"{self.base}.{tail}"
        return kind if spelled_alike(self.directory, self.dir_fd, name, spelling) else None

    def files_of(self, kinds: tuple[str, ...]) -> dict[FileId, str]:
        """The regular files of this prefix of the given kinds, by their identity: the files
        :meth:`remove_leftovers` would remove (but for those it is told to keep, and those a live writer holds)."""
        found = {}
        for name in self.names():
            if self.kind(name) not in kinds:
                continue
            try:
                info = os.lstat(self.path(name), dir_fd=self.dir_fd)
            except OSError:
                continue  # (gone meanwhile: nothing to remove)
            identity = file_id(info)
            if stat.S_ISREG(info.st_mode) and identity is not None:
                found[identity] = name
        return found

    # --- the lock ------------------------------------------------------------------------------------------------

    def take_lock(self, wait: str = _WAIT) -> None:
        """Open and lock PREFIX.lock (:mod:`dmlbridge.writing.publish`, step 1): created when missing, used only when it
        is a regular file of one name that holds nothing but a holder's name. DestinationError names it when it
        cannot be, with what to do (``wait``: what to say when another process holds it). No descriptor is left
        open on any error. Ctrl-C is held back while it is taken: one that comes meanwhile is raised once
        :attr:`lock_fd` is set, so the caller's clean-up (:meth:`close`) releases and removes the lock.

        A lock is only taken when, once locked, the name is still the file that was locked: its holder removes it
        when it is done (:meth:`release_lock`), so a file opened just before that is locked after it, and is no
        one's lock any more; then the lock is taken again, on the file now at the name. So two processes never both
        hold the lock of one prefix. :attr:`lock_found` is the size of the lock file when it was there already (a
        stale lock a killed process left), None when this call created it."""
        name = self.base + LOCK_SUFFIX
        where = self.where(name)
        with sigint_deferred():
            for attempt in range(_LOCK_TRIES):
                opened = self._open_lock(name, where, transient_allowed=attempt < _WINDOWS_TRIES)
                if opened is None:
                    _pause()
                    continue  # removed or replaced between two steps: look again
                fd, found = opened
                try:
                    taken = _try_lock(fd, where)
                    if not self._names(fd, name, where):
                        os.close(fd)  # its holder removed it meanwhile (or it was replaced): the file at the name now
                        _pause()
                        continue
                    if not taken:
                        _refuse_held(fd, self.prefix, where, wait)
                    _write_holder(fd, where)
                except BaseException:
                    os.close(fd)
                    raise
                self.lock_fd, self.lock_found = fd, found
                return
        raise DestinationError(
            f"the lock {where!r} was removed or replaced {_LOCK_TRIES} times while it was taken (other conversions "
            "into the prefix keep starting and ending); try again"
        )

    def _open_lock(self, name: str, where: str, *, transient_allowed: bool) -> tuple[int, int | None] | None:
        """A read-write descriptor of the lock file and its size when it was there (None: created here, with
        ``O_EXCL``), or None when it was removed or replaced between two steps (look again). It is never followed
        through a symlink nor opened when it is anything else (a FIFO, a device, a folder) or a file with other
        names (a hard link: the lock's text would change it). On Windows a file whose removal is under way cannot
        be opened for a moment (access denied): that is tried again while ``transient_allowed``."""
        try:
            seen = os.lstat(self.path(name), dir_fd=self.dir_fd)
        except FileNotFoundError:
            try:
                return self.open_name(name, _CREATE, umask_mode()), None
            except FileExistsError:
                return None
            except OSError as exc:
                if transient_allowed and _transient(exc):
                    return None
                self._refuse_unwritable(exc)
                raise DestinationError(f"cannot create the lock {where!r}: {exc.strerror or exc}") from None
        except OSError as exc:
            if transient_allowed and _transient(exc):
                return None
            raise DestinationError(f"cannot open the lock {where!r}: {exc.strerror or exc}") from None
        _refuse_as_lock(seen, where)
        try:
            fd = self.open_name(name, os.O_RDWR | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC | _O_BINARY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if transient_allowed and _transient(exc):
                return None
            self._refuse_unwritable(exc)
            raise DestinationError(f"cannot open the lock {where!r}: {exc.strerror or exc}") from None
        try:
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) != (seen.st_dev, seen.st_ino):
                os.close(fd)
                return None
            _refuse_as_lock(info, where)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        return fd, info.st_size

    def _names(self, fd: int, name: str, where: str) -> bool:
        """Whether ``name`` is still the file ``fd`` is open on (False: removed or replaced since it was opened)."""
        try:
            seen = os.lstat(self.path(name), dir_fd=self.dir_fd)
        except FileNotFoundError:
            return False
        except OSError as exc:
            if _transient(exc):
                return False  # (Windows: its removal is under way)
            raise DestinationError(f"cannot open the lock {where!r}: {exc.strerror or exc}") from None
        info = os.fstat(fd)
        return (seen.st_dev, seen.st_ino) == (info.st_dev, info.st_ino)

    def _refuse_unwritable(self, exc: OSError) -> None:
        """DestinationError naming the folder, when ``exc`` says it cannot be written (a read-only filesystem, a
        folder of another user): the first file a conversion writes is its lock, but the lock is not the matter."""
        if isinstance(exc, PermissionError) or exc.errno == errno.EROFS:
            raise DestinationError(
                f"cannot write into the folder {self.directory!r} ({exc.strerror or exc}): the outputs of out_prefix "
                f"{self.prefix!r} need a folder you can write; give another out_prefix, or make the folder writable"
            ) from None

    def release_lock(self, *, remove: bool = True) -> str | None:
        """Release the lock and remove PREFIX.lock (unless not ``remove``); None when it was removed, else why
        it stays: :data:`LOCK_HELD` (Windows: another process has it open, to take it; it removes it in turn),
        :data:`LOCK_GONE` (not the file that was locked any more) or the error. On POSIX the file is removed while
        it is locked, so no one takes it meanwhile (one who opened it before finds, once it has the lock, that the
        name is no longer that file: :meth:`take_lock`). On Windows it is closed first, since a file open through
        ``os.open`` cannot be removed, not even through that handle; the removal then succeeds only while no other
        process has the file open, and every process that takes the lock holds it open from before it locks until
        after it lets go, so what is removed is no one's lock."""
        fd = self.lock_fd
        if fd is None:
            return LOCK_GONE
        self.lock_fd = None
        name = self.base + LOCK_SUFFIX
        with sigint_deferred():
            if _WINDOWS:
                os.close(fd)
                return self._remove_lock(name) if remove else LOCK_GONE
            try:
                if not remove:
                    return LOCK_GONE
                return self._remove_lock(name) if self._names(fd, name, self.where(name)) else LOCK_GONE
            except DestinationError as exc:
                return str(exc)
            finally:
                os.close(fd)  # (releases the flock)

    def _remove_lock(self, name: str) -> str | None:
        try:
            os.unlink(self.path(name), dir_fd=self.dir_fd)
        except FileNotFoundError:
            return LOCK_GONE
        except OSError as exc:
            if _WINDOWS and (is_sharing_violation(exc) or getattr(exc, "winerror", None) == _ERROR_ACCESS_DENIED):
                return LOCK_HELD  # another process has it open (or is removing it)
            return exc.strerror or str(exc)
        return None

    # --- removing what no conversion needs ---------------------------------------------------------------------

    def remove_leftovers(self, kinds: tuple[str, ...], keep: set[str],
                         keep_files: frozenset[FileId] = frozenset()) -> Removals:
        """Remove the files of this prefix of the given kinds (:meth:`kind`) but those named in ``keep``, those
        that are one of ``keep_files`` (by identity: the file a manifest lists, whatever name it gives it) and
        those a live writer holds (see the module docstring); Ctrl-C is held back until they are removed."""
        removals = Removals([], [], [])
        with sigint_deferred():
            for name in sorted(self.names()):
                if name not in keep and self.kind(name) in kinds:
                    self._remove_unheld(name, removals, keep_files)
        return removals

    def identities(self, names: set[str]) -> frozenset[FileId]:
        """The identities of the files of the folder ``names`` name (the folder looks each up as it does: in any
        letter case where it ignores case), not following a symbolic link; a name of nothing is none."""
        found = set()
        for name in names:
            try:
                identity = file_id(os.lstat(self.path(name), dir_fd=self.dir_fd))
            except (OSError, ValueError):
                continue
            if identity is not None:
                found.add(identity)
        return frozenset(found)

    def _remove_unheld(self, name: str, removals: Removals, keep_files: frozenset[FileId]) -> None:
        try:
            size = self._unheld_size(name, keep_files)
        except FileNotFoundError:
            return  # (gone already)
        except OSError as exc:
            removals.failed.append((name, exc.strerror or str(exc)))
            return
        if size is None:
            return  # not a regular file of its own: no conversion made it
        if size < 0:
            removals.held.append(name)  # a live writer holds it
            return
        try:
            os.unlink(self.path(name), dir_fd=self.dir_fd)
        except FileNotFoundError:
            return
        except OSError as exc:
            if _WINDOWS and is_sharing_violation(exc):
                removals.held.append(name)  # (Windows: another's handle without FILE_SHARE_DELETE forbids it)
            else:
                removals.failed.append((name, exc.strerror or str(exc)))
            return
        removals.removed.append((name, size))

    def _unheld_size(self, name: str, keep_files: frozenset[FileId]) -> int | None:
        """The size of ``name`` when it is a regular file no live writer holds, -1 when one holds it, None when
        it is one of ``keep_files`` or anything else (a symlink, a folder, a FIFO: no conversion made it)."""
        if _WINDOWS:  # (whether a writer holds it shows when it is removed)
            info = os.lstat(self.path(name))
            reparse = getattr(info, "st_file_attributes", 0) & _FILE_ATTRIBUTE_REPARSE_POINT
            kept = file_id(info) in keep_files
            return info.st_size if stat.S_ISREG(info.st_mode) and not reparse and not kept else None
        try:
            fd = self.open_name(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None
            raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or file_id(info) in keep_files:
                return None
            return info.st_size if try_lock(fd) else -1
        finally:
            os.close(fd)

    def close(self) -> None:
        """Release the lock and close the folder."""
        self.release_lock()
        if self.dir_fd is not None:
            os.close(self.dir_fd)
            self.dir_fd = None


def _kind(base: str, name: str) -> tuple[str, str] | None:
    """The kind of ``name`` among the files of the prefix ``base`` (:meth:`OutputFolder.kind`), spelled as given,
    and the tail after ``NAME.``; None for another prefix's or no one's."""
    if name.startswith(f".{base}."):
        tail = name[len(base) + 2 :]
        if _TEMP_TAIL.fullmatch(tail):
            return "temporary", tail
        if tail.endswith(RETIRED_SUFFIX) and _BUFFER_TAIL.fullmatch(tail[: -len(RETIRED_SUFFIX)]):
            return "retired", tail
    elif name.startswith(f"{base}.") and _BUFFER_TAIL.fullmatch(name[len(base) + 1 :]):
        return "buffer", name[len(base) + 1 :]
    return None


def _try_lock(fd: int, where: str) -> bool:
    """Take the lock of the lock file ``fd`` without waiting (:func:`dmlbridge.system.locks.try_lock`)."""
    try:
        return try_lock(fd)
    except OSError as exc:
        raise DestinationError(f"cannot lock {where!r}: {exc.strerror or exc}") from None


def _refuse_held(fd: int, prefix: str, where: str, wait: str) -> None:
    """The DestinationError of a lock another process holds, naming the holder its text gives."""
    text = read_at(fd, 0, _LOCK_TEXT_MAX + 1)
    holder = text.decode("utf-8", "replace").strip() if _LOCK_TEXT.fullmatch(text) else ""
    raise DestinationError(
        f"another conversion into {prefix!r} is running: it holds the lock {where!r} "
        f"({holder or 'holder unknown'}); {wait}"
    ) from None


def _write_holder(fd: int, where: str) -> None:
    """Check that the locked file is a lock file of dmlbridge and write the holder's name into it."""
    if not _LOCK_TEXT.fullmatch(read_at(fd, 0, _LOCK_TEXT_MAX + 1)):
        raise DestinationError(
            f"the lock {where!r} is not a lock file: it holds something else, which the lock's text would "
            "overwrite; move it away (the next conversion creates a new lock), or choose another output prefix"
        )
    with contextlib.suppress(OSError):  # who holds it, for the message above
        os.ftruncate(fd, 0)
        write_at(fd, 0, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())


def _pause() -> None:
    """Before a lock is looked at again: on Windows a moment, for a removal under way to end."""
    if _WINDOWS:
        time.sleep(_WINDOWS_PAUSE)


def _transient(exc: OSError) -> bool:
    """Whether ``exc``, from opening or looking at a lock file, may say only that its removal is under way:
    Windows refuses access to a file being removed (and ``os.open`` reports a sharing violation so too)."""
    return _WINDOWS and isinstance(exc, PermissionError)


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
