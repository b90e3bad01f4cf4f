"""Which file a name is: a file's identity (its device and file number, one through every name, link and spelling
of it), and whether a folder takes two spellings of a name for one file (letter case).

Two paths are compared by the files they name, never by their spelling: a hard link, a symbolic link, ``a/../b``,
and on Windows another letter case or an 8.3 short name all name one file. Whether a folder ignores letter case is
asked of the folder itself (:func:`spelled_alike`), since it differs from folder to folder on every system.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> open(os.path.join(folder, "w.json"), "w").close()
    >>> os.link(os.path.join(folder, "w.json"), os.path.join(folder, "hard.json"))
    >>> ids(os.path.join(folder, "hard.json")) == ids(os.path.join(folder, ".", "w.json"))
    True
"""

from __future__ import annotations

import os

__all__ = ["FileId", "file_id", "ids", "spelled_alike"]

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


def spelled_alike(directory: str, dir_fd: int | None, name: str, spelling: str) -> bool:
    """Whether the folder ``directory`` (open as ``dir_fd``, or None to join names to its path) takes ``spelling``
    for ``name``, a file of one name in it: both look up that one file. It is how the folder compares names that
    differ only in letter case, asked of the folder itself: a flag of the volume does not say it (NTFS reports
    ``FILE_CASE_SENSITIVE_SEARCH`` from ``GetVolumeInformationW``, and Windows looks names up in any case there all
    the same; a folder of it may be made case-sensitive, and a Linux folder may ignore case: vfat, exFAT, ext4's
    casefold folders), and a rule by platform would take another prefix's ``Model.json`` for ``model.json``'s where
    the folder keeps them apart. Two names of one file (a hard link) are not one name spelled two ways: a file of
    more than one name is never taken for one.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> open(os.path.join(folder, "Model.json"), "w").close()
        >>> alike = spelled_alike(folder, None, "Model.json", "model.json")
        >>> alike == os.path.exists(os.path.join(folder, "model.json"))  # (True on Windows, False on Linux's ext4)
        True
    """
    if name == spelling:
        return True
    try:
        if dir_fd is not None:
            seen, other = os.lstat(name, dir_fd=dir_fd), os.lstat(spelling, dir_fd=dir_fd)
        else:
            seen, other = os.lstat(os.path.join(directory, name)), os.lstat(os.path.join(directory, spelling))
    except (OSError, ValueError):
        return False  # (no file of that spelling: the folder keeps the two apart)
    identity = file_id(seen)
    return identity is not None and identity == file_id(other) and seen.st_nlink == 1
