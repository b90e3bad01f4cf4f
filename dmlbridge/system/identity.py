"""Which file a name is: a file's identity (its device and file number, one through every name, link and spelling
of it).

Two paths are compared by the files they name, never by their spelling: a hard link, a symbolic link, ``a/../b``,
and on Windows another letter case or an 8.3 short name all name one file.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> open(os.path.join(folder, "w.json"), "w").close()
    >>> os.link(os.path.join(folder, "w.json"), os.path.join(folder, "hard.json"))
    >>> ids(os.path.join(folder, "hard.json")) == ids(os.path.join(folder, ".", "w.json"))
    True
"""

from __future__ import annotations

import os

__all__ = ["FileId", "file_id", "ids"]

FileId = tuple[int, int]
"""A file's identity: its device (on Windows, its volume's serial number) and its file number there."""


def file_id(info: os.stat_result) -> FileId | None:
    """The identity of the file ``info`` (from ``os.stat``, ``os.lstat`` or ``os.fstat``) describes, or None when the
    system gives it no file number (some file systems report 0: no two files could be told apart by it).

    Example:
        >>> file_id(os.stat(os.curdir)) == file_id(os.stat(os.path.abspath(os.curdir)))
        True
    """
    return (info.st_dev, info.st_ino) if info.st_ino else None


def ids(path: str | os.PathLike[str]) -> set[FileId]:
    """The identities ``path`` names: the file itself and, when it is a symbolic link, the file it leads to; empty
    when nothing is there (or it cannot be looked at).

    Example:
        >>> ids(os.path.join(os.curdir, "no such file"))
        set()
    """
    found = set()
    for look in (os.lstat, os.stat):
        try:
            identity = file_id(look(path))
        except (OSError, ValueError):
            continue
        if identity is not None:
            found.add(identity)
    return found

