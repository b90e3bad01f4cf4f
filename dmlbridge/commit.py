"""Publishing two output files together: temporary files beside the targets, renamed into place as a pair.

The protocol: both outputs are written to temporary files beside their targets
(``.NAME.pPID-hHOST.XXXXXXXX.dmlbridge-tmp``: NAME is the target's name, PID the writing process, HOST a hash of
its host name), fsync'd when asked, and renamed into place (.bin, then .json) only when both are complete; the
directory is fsync'd after the renames. Ctrl-C during the two renames is deferred until they are done, and a
failed .json rename puts the previous .bin back (through a hard link made just before). A process killed outright
cannot clean up: its temporary files stay behind, and the next conversion into the same prefix removes those
whose writer, on this host, is no longer running (POSIX; elsewhere they are left for the user to delete).

    >>> import tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> bin_path, json_path = os.path.join(folder, "w.bin"), os.path.join(folder, "w.json")
    >>> temps: list[str] = []
    >>> a, b = temp_file(folder, bin_path, temps), temp_file(folder, json_path, temps)
    >>> commit_pair(a, bin_path, b, json_path, temps)
    >>> sorted(os.listdir(folder)), temps
    (['w.bin', 'w.json'], [])
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import secrets
import signal
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from typing import Any, BinaryIO

from dmlbridge.errors import DestinationError

__all__ = [
    "TEMP_SUFFIX",
    "commit_pair",
    "copy_mode",
    "fsync_directory",
    "open_temp",
    "owner_tag",
    "remove_stale_temps",
    "sigint_deferred",
    "temp_file",
]

TEMP_SUFFIX = ".dmlbridge-tmp"


def commit_pair(tmp_bin: str, bin_path: str, tmp_json: str, json_path: str, temps: list[str]) -> None:
    """Rename both temporary files into place, .bin first; if the .json rename fails, put the old .bin back.
    ``temps`` lists the temporary files still to remove on failure; each leaves it as it is renamed."""
    # A second name for the previous .bin (a hard link: no copy) lets a failed .json rename be undone.
    backup = _link_backup(bin_path, temps)
    had_bin = backup is not None or os.path.lexists(bin_path)
    with sigint_deferred():
        os.replace(tmp_bin, bin_path)
        temps.remove(tmp_bin)
        try:
            os.replace(tmp_json, json_path)
            temps.remove(tmp_json)
        except BaseException:
            with contextlib.suppress(OSError):
                if backup is not None:
                    os.replace(backup, bin_path)
                    temps.remove(backup)
                elif not had_bin:
                    os.unlink(bin_path)
            raise
    if backup is not None:
        with contextlib.suppress(OSError):
            os.unlink(backup)
            temps.remove(backup)


def _link_backup(path: str, temps: list[str]) -> str | None:
    if not os.path.isfile(path) or os.path.islink(path):
        return None
    directory, base = os.path.split(os.path.abspath(path))
    for _ in range(8):
        candidate = os.path.join(directory, f".{base}.{owner_tag()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
        try:
            os.link(path, candidate)
        except FileExistsError:
            continue
        except (OSError, NotImplementedError):
            return None  # no hard links here (FAT, some network shares): no undo, the window stays tiny
        temps.append(candidate)
        return candidate
    return None


@functools.lru_cache(maxsize=1)
def _host_tag() -> str:
    try:
        host = socket.gethostname()
    except OSError:  # pragma: no cover - gethostname does not fail in practice
        host = ""
    return hashlib.sha256(host.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def owner_tag() -> str:
    """``pPID-hHOST``: who writes a temporary file, so that a later run can tell a dead writer's leftovers."""
    return f"p{os.getpid()}-h{_host_tag()}"


def _temp_pattern(target: str) -> re.Pattern[str]:
    base = re.escape(os.path.basename(target))
    return re.compile(rf"^\.{base}\.p([0-9]{{1,10}})-h([0-9a-f]{{8}})\.[A-Za-z0-9_]+{re.escape(TEMP_SUFFIX)}$")


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not a process id we wrote: leave the file alone
    try:
        os.kill(pid, 0)  # signal 0: an existence check, nothing is sent (POSIX only: see _remove_stale_temps)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):
        return True  # EPERM: alive, owned by someone else; anything else: do not guess
    return True


def remove_stale_temps(directory: str, targets: tuple[str, ...]) -> None:
    """Remove the temporary files a killed convert_model left for these targets: only names this module makes,
    written on this host by a process that no longer exists. Never fails (leftovers are harmless)."""
    if os.name != "posix":
        return  # os.kill(pid, 0) is not an existence check on Windows (it terminates the process)
    patterns = [_temp_pattern(t) for t in targets]
    try:
        with os.scandir(directory) as listing:
            names = [entry.name for entry in listing if entry.name.endswith(TEMP_SUFFIX)]
    except OSError:
        return
    own = os.getpid()
    for name in names:
        for pattern in patterns:
            match = pattern.match(name)
            if match is None:
                continue
            pid = int(match.group(1))
            if match.group(2) != _host_tag() or pid == own or _pid_alive(pid):
                break
            path = os.path.join(directory, name)
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(path).st_mode):
                    os.unlink(path)
            break


def temp_file(directory: str, target: str, temps: list[str]) -> str:
    """A new, empty temporary file for ``target`` in ``directory`` (0600), named for its writer; added to
    ``temps``."""
    try:
        fd, path = tempfile.mkstemp(
            prefix=f".{os.path.basename(target)}.{owner_tag()}.", suffix=TEMP_SUFFIX, dir=directory
        )
    except OSError as exc:
        raise DestinationError(f"cannot create a file in {directory!r}: {exc.strerror or exc}") from None
    temps.append(path)
    os.close(fd)
    return path


def open_temp(path: str) -> BinaryIO:
    """The (empty) temporary file _temp_file made, opened for writing, unbuffered. Not with O_TRUNC: on ext4,
    truncating a file and writing it again makes close() start writing it all back to the disk at once (the
    "auto_da_alloc" safeguard for programs that do not fsync), which costs a third of the time of copying 1 GiB."""
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    return open(fd, "wb", buffering=0)


def copy_mode(temp: str, final: str) -> None:
    """mkstemp makes 0600 files; give the output the existing file's mode, or what a plain open() would."""
    try:
        mode = stat.S_IMODE(os.stat(final).st_mode)
    except OSError:
        mask = os.umask(0o022)
        os.umask(mask)
        mode = 0o666 & ~mask
    with contextlib.suppress(OSError):
        os.chmod(temp, mode)


def fsync_directory(directory: str) -> None:
    # Makes the renames durable on POSIX; Windows cannot open directories this way.
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold back Ctrl-C while the outputs are renamed, so the .bin and .json are replaced together."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        yield  # the caller handles SIGINT its own way: leave that alone
        return
    received: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        received.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


