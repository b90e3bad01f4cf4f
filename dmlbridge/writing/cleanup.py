"""Removing what conversions into a prefix left behind (:func:`clean`, ``dmlbridge clean PREFIX``): the buffer files
its manifest does not list, temporary manifests, retired files and a stale lock, never a file the manifest lists,
whatever name it gives it (they are kept by identity), nor another prefix's.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from dmlbridge.errors import ManifestError
from dmlbridge.manifest.format import parse_manifest, read_manifest_file
from dmlbridge.placement.options import DEFAULT_MAX_MANIFEST_BYTES
from dmlbridge.writing.folder import LEFTOVERS, LOCK_GONE, LOCK_HELD, LOCK_SUFFIX, OutputFolder, output_prefix

__all__ = ["CleanReport", "clean"]


class CleanReport(NamedTuple):
    """What :func:`clean` did: the paths of the files it ``removed`` (a stale lock among them) and the bytes they
    held (``freed``); the leftovers it left: those someone ``held`` (on POSIX a live writer, by its ``flock``; on
    Windows another program that has the file open without ``FILE_SHARE_DELETE``, a reader as well as a writer:
    :data:`~dmlbridge.writing.folder.FILE_HELD` says which), and those whose removal ``failed``, each as (path,
    why).

    Example:
        >>> CleanReport(("out/.w.json.0123456789abcdef.dmlbridge-tmp",), 120, (), ()).freed
        120
    """

    removed: tuple[str, ...]
    freed: int
    held: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]


def clean(prefix: str | os.PathLike[str], *, max_manifest_bytes: int = DEFAULT_MAX_MANIFEST_BYTES) -> CleanReport:
    """Remove what conversions into ``prefix`` (the ``out_prefix`` given to ``convert_model``) left behind: buffer
    files that ``PREFIX.json`` does not list (a killed conversion's, or a previous conversion's that could not be
    removed when the next one published), temporary manifests, retired buffer files of earlier versions, and a
    stale ``PREFIX.lock`` (one a killed conversion left, which no process holds).

    Every file of those names that the manifest does not list is removed, whoever made it: there is no model to
    ask, so a model's external data kept as ``PREFIX.<id>.<n>.bin`` is removed too (a conversion refuses such a
    model). Never the current conversion's files (the manifest, the buffer files it lists), never a file of
    another prefix, never a file a live writer holds (its ``flock``; on Windows, its open handle), never a lock a
    live conversion holds nor a file at ``PREFIX.lock`` that is not a lock file of dmlbridge. It takes the prefix's
    lock first, so it fails at once (DestinationError naming the lock) while a conversion into the prefix runs,
    or when ``PREFIX.lock`` is not a lock file; it removes the lock when it is done. A manifest it cannot read is
    a ManifestError, and then nothing is removed. A folder with no buffer, temporary, retired or lock file of the
    prefix is left as it is (no lock is created). Returns a :class:`CleanReport`; ``dmlbridge clean PREFIX`` on
    the command line. On Windows a buffer file that a loaded plan still holds open is removed as far as Windows
    allows: its removal is pending until the plan is closed, and then it is gone.

    Example:
        >>> import dmlbridge, numpy as np, os, shutil, tempfile
        >>> from onnx import helper, numpy_helper
        >>> folder = tempfile.mkdtemp()
        >>> w = numpy_helper.from_array(np.ones(4, np.float32), "w")
        >>> plan = dmlbridge.convert_model(helper.make_model(helper.make_graph([], "g", [], [], [w])),
        ...                                os.path.join(folder, "m"), progress=False)
        >>> killed = os.path.join(folder, "m.0123456789abcdef.00000.bin")  # as a killed conversion leaves it
        >>> open(killed, "wb").write(bytes(256))
        256
        >>> report = dmlbridge.clean(os.path.join(folder, "m"))
        >>> report.removed == (killed,), report.freed, os.path.exists(plan.bin_path)
        (True, 256, True)
        >>> plan.close()  # (its files let go: on Windows an open file may not be removable)
        >>> shutil.rmtree(folder)
    """
    folder = OutputFolder(output_prefix(prefix, "prefix"))
    lock = folder.base + LOCK_SUFFIX
    try:
        kinds = LEFTOVERS
        if not any(folder.kind(name) in kinds for name in folder.names()) and not folder.exists(lock):
            return CleanReport((), 0, (), ())
        folder.take_lock("wait for it to finish, then clean again (a conversion removes what it replaces itself)")
        found = folder.lock_found
        try:
            listed = _listed(folder, max_manifest_bytes)
            removals = folder.remove_leftovers(kinds, listed, folder.identities(listed))
        except BaseException:
            folder.release_lock(remove=found is None)  # (a stale lock stays as it was: nothing was removed)
            raise
        why = folder.release_lock()
    finally:
        folder.close()
    if found is not None:  # a stale lock: no one held it, and this call took it and removed it
        if why is None:
            removals.removed.append((lock, found))
        elif why == LOCK_HELD:
            removals.held.append(lock)
        elif why != LOCK_GONE:
            removals.failed.append((lock, why))
    return CleanReport(
        tuple(folder.where(name) for name, _ in sorted(removals.removed)), sum(size for _, size in removals.removed),
        tuple(folder.where(name) for name in sorted(removals.held)),
        tuple((folder.where(name), why) for name, why in sorted(removals.failed)),
    )


def _listed(folder: OutputFolder, limit: int) -> set[str]:
    """The names of the buffer files the prefix's manifest lists (none without a manifest)."""
    path = folder.where(folder.base + ".json")
    if not os.path.lexists(path):
        return set()
    try:
        manifest = parse_manifest(read_manifest_file(path, limit), path, folder.base + ".bin")
    except ManifestError as exc:
        raise ManifestError(
            f"cannot tell which buffer files of {folder.prefix!r} are in use, so nothing was removed: {exc}; repair "
            f"or remove {path!r} (without a manifest, clean removes every buffer file of the prefix)"
        ) from None
    return {buffer.path for buffer in manifest.buffers}
