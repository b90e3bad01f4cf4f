"""The .bin fingerprint: a SHA-256 over a buffer image's size and sampled bytes, cheap at any file size.

Every manifest records the fingerprint of each buffer file it was written with, and every load checks it: a few reads,
whatever the file's size, enough to refuse a .bin that belongs to another manifest. The full SHA-256
(``checksum=True``) is opt-in because it reads everything.

What is sampled: the first and last 64 KiB, the first 64 bytes of every converted entry, and 1024 evenly spaced
64-byte samples. The hashed stream: a tag and the size (8-byte little-endian), then for each merged range
(overlapping or touching sampled ranges merged, in file order) its start and stop (8-byte little-endian each) and
its bytes. Changing any constant below changes every fingerprint.

    >>> import tempfile
    >>> with tempfile.TemporaryFile() as file:
    ...     _ = file.write(bytes(16))
    ...     file.flush()
    ...     len(bin_fingerprint(file.fileno(), 16, [0], [16]))
    64
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from dmlbridge.errors import DmlBridgeError, ManifestError
from dmlbridge.system.files import read_at

__all__ = ["FingerprintStream", "bin_fingerprint", "fingerprint_problem"]

_FINGERPRINT_TAG = b"dmlbridge-bin-fingerprint-1\x00"
_FINGERPRINT_EDGE = 64 << 10
_FINGERPRINT_ENTRY = 64
_FINGERPRINT_SPREAD = 1024
_FINGERPRINT_WINDOW = 64 << 10  # sampled ranges closer than this are read with one read
_CHUNK = 4 << 20


def _groups(size: int, offsets: Sequence[int] | np.ndarray, totals: Sequence[int] | np.ndarray,
            ) -> tuple[np.ndarray, np.ndarray, bytes]:
    """The sampled ranges merged, in file order: their starts, their stops and their 16-byte headers (a model can
    have a million entries: a few arrays of them at a time)."""
    spread = np.array([i * size // _FINGERPRINT_SPREAD for i in range(_FINGERPRINT_SPREAD)], dtype=np.int64)
    entries = np.asarray(offsets, dtype=np.int64)
    starts = np.concatenate([np.array([0, max(0, size - _FINGERPRINT_EDGE)], dtype=np.int64), entries, spread])
    stops = np.concatenate([
        np.array([min(_FINGERPRINT_EDGE, size), size], dtype=np.int64),
        entries + np.minimum(np.asarray(totals, dtype=np.int64), _FINGERPRINT_ENTRY),
        np.minimum(spread + _FINGERPRINT_ENTRY, size),
    ])
    del entries
    # Merge (vectorised). Sorted by start, a range joins the current group when it starts at or before the
    # furthest stop so far; each group runs to that furthest stop.
    keep = starts < stops
    if not keep.all():
        starts, stops = starts[keep], stops[keep]
    del keep
    order = np.argsort(starts, kind="stable")
    first = starts[order]
    del starts
    reach = stops[order]
    del stops, order
    np.maximum.accumulate(reach, out=reach)
    opens = np.flatnonzero(np.r_[True, first[1:] > reach[:-1]]) if len(first) else np.zeros(0, np.intp)
    group_start = first[opens]
    del first
    group_stop = reach[np.r_[opens[1:] - 1, len(reach) - 1]] if len(reach) else reach
    headers = np.stack([group_start, group_stop], axis=1).astype("<u8").tobytes()
    return group_start, group_stop, headers


def bin_fingerprint(
    fd: int, size: int, offsets: Sequence[int] | np.ndarray, totals: Sequence[int] | np.ndarray,
    name: str = "the buffer",
) -> str:
    """SHA-256 over a buffer file's size and sampled ranges (see the module docstring), read through its open
    descriptor ``fd``: cheap at any file size, and different for a file that is not the one the manifest was
    written with (raises OSError, naming the file as ``name``, when the file is shorter than ``size``).

    ``offsets`` and ``totals``: the converted entries' offsets and TotalTensorSizeInBytes. The hashed stream: the
    tag and the size, then for each merged range (overlapping or touching sampled ranges
    merged, in file order) its start and stop (8-byte little-endian each) and its bytes.
    """
    group_start, group_stop, headers = _groups(size, offsets, totals)
    header_rows = np.frombuffer(headers, dtype=np.uint8).reshape(-1, 16)

    # Ranges closer than _FINGERPRINT_WINDOW are read together and their bytes hashed in batches (the digest of
    # a stream does not depend on how it is cut), so 100,000 small entries cost a few large reads.
    sha = hashlib.sha256(_FINGERPRINT_TAG + size.to_bytes(8, "little"))
    # Runs of ranges with gaps of at most _FINGERPRINT_WINDOW, spanning at most _CHUNK bytes, are read at once.
    gaps = np.flatnonzero(group_start[1:] - group_stop[:-1] > _FINGERPRINT_WINDOW) + 1
    bounds = [0, *gaps.tolist(), len(group_start)]
    for low, high in itertools.pairwise(bounds):
        begin = low
        while begin < high:
            base = int(group_start[begin])  # (an item at a time: a list of a million would take 40 MB)
            end = begin + int(np.searchsorted(group_stop[begin:high], base + _CHUNK, side="right"))
            if end > begin:
                last = int(group_stop[end - 1])
                window = memoryview(read_at(fd, base, last - base))
                available = base + len(window)  # less than asked only where the file ends
                if last > available:
                    short = next(k for k in range(begin, end) if group_stop[k] > available)
                    start, stop = int(group_start[short]), int(group_stop[short])
                    raise OSError(f"{name} ended at byte {max(start, available)}, before byte {stop}")
                _hash_ranges(sha, window, group_start[begin:end] - base, group_stop[begin:end] - base,
                             header_rows[begin:end])
            else:  # one range longer than _CHUNK (many small entries packed together): in _CHUNK pieces
                start, stop = int(group_start[begin]), int(group_stop[begin])
                sha.update(headers[16 * begin : 16 * begin + 16])
                position = start
                while position < stop:
                    chunk = read_at(fd, position, min(stop - position, _CHUNK))
                    if not chunk:
                        raise OSError(f"{name} ended at byte {position}, before byte {stop}")
                    sha.update(chunk)
                    position += len(chunk)
                end = begin + 1
            begin = end
    return sha.hexdigest()


def _hash_ranges(sha: Any, window: memoryview, starts: np.ndarray, stops: np.ndarray, headers: np.ndarray) -> None:
    """Feed ``sha`` each range's 16-byte header and its bytes ``window[start:stop]``, in order. Runs of ranges of
    one length (the first bytes of many small entries) are gathered as the rows of one array."""
    lengths = stops - starts
    data = np.frombuffer(window, dtype=np.uint8)
    bounds = [0, *(np.flatnonzero(lengths[1:] != lengths[:-1]) + 1).tolist(), len(lengths)]
    views: dict[int, np.ndarray] = {}  # length -> every run of that many bytes of the window, as rows (no copy)
    for low, high in itertools.pairwise(bounds):
        length = int(lengths[low])
        if high - low >= 8:
            view = views.get(length)
            if view is None:
                view = views[length] = np.lib.stride_tricks.sliding_window_view(data, length)
            rows = np.empty((high - low, 16 + length), dtype=np.uint8)
            rows[:, :16] = headers[low:high]
            rows[:, 16:] = view[starts[low:high]]
            sha.update(rows)
        else:
            for k in range(low, high):
                sha.update(headers[k])
                sha.update(window[int(starts[k]) : int(stops[k])])


class FingerprintStream:
    """:func:`bin_fingerprint` computed from bytes read elsewhere: :meth:`feed` takes the file's bytes in file
    order, in pieces of any size (those outside the sampled ranges are passed over), and :meth:`hexdigest` gives
    the same digest. :meth:`needed` says which bytes of a stretch the digest still wants, so that a reader that
    skips a stretch reads just those.

        >>> import tempfile
        >>> with tempfile.TemporaryFile() as file:
        ...     _ = file.write(bytes(range(200)) * 1000)
        ...     file.flush()
        ...     whole = bin_fingerprint(file.fileno(), 200000, [0, 5000], [5000, 195000])
        >>> stream = FingerprintStream(200000, [0, 5000], [5000, 195000])
        >>> data = memoryview(bytes(range(200)) * 1000)
        >>> stream.feed(0, data[:70001]); stream.feed(70001, data[70001:])
        >>> stream.hexdigest() == whole
        True
    """

    def __init__(self, size: int, offsets: list[int], totals: list[int]) -> None:
        self._starts, self._stops, self._headers = _groups(size, offsets, totals)
        self._rows = np.frombuffer(self._headers, dtype=np.uint8).reshape(-1, 16)
        self._sha = hashlib.sha256(_FINGERPRINT_TAG + size.to_bytes(8, "little"))
        self._next = 0  # the first group not yet wholly hashed
        self._within = -1  # where hashing stopped inside group ``_next`` (-1: not started)

    def needed(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The stretches of ``[start, stop)`` the digest still wants (sampled, not yet fed)."""
        first = self._next
        last = int(np.searchsorted(self._starts, stop, side="left"))
        wanted = []
        for group in range(first, last):
            low = max(int(self._starts[group]), start, self._within if group == first else 0)
            high = min(int(self._stops[group]), stop)
            if low < high:
                wanted.append((low, high))
        return wanted

    def sampled(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The stretches of ``[start, stop)`` the digest samples, fed or not (any thread may ask)."""
        first = int(np.searchsorted(self._stops, start, side="right"))
        last = int(np.searchsorted(self._starts, stop, side="left"))
        return [(max(int(low), start), min(int(high), stop))
                for low, high in zip(self._starts[first:last], self._stops[first:last], strict=True)]

    def feed(self, position: int, data: Any) -> None:
        """Bytes ``data`` of the file from ``position`` (after every sampled byte before ``position``)."""
        view = memoryview(data).cast("B")
        end = position + len(view)
        group, starts, stops, sha = self._next, self._starts, self._stops, self._sha
        count = len(starts)
        if group < count and self._within >= 0:  # the rest of a group begun in an earlier piece
            stop = min(int(stops[group]), end)
            if self._within < position:
                raise DmlBridgeError(f"internal error: the fingerprint missed bytes {self._within}..{position}")
            sha.update(view[self._within - position : stop - position])
            if stop < int(stops[group]):
                self._within = stop
                return
            group, self._within = group + 1, -1
        if group < count and int(starts[group]) < position:
            raise DmlBridgeError(f"internal error: the fingerprint missed bytes from {int(starts[group])}")
        whole = int(np.searchsorted(stops, end, side="right"))  # groups [group, whole) end within this piece
        if whole > group:
            _hash_ranges(sha, view, starts[group:whole] - position, stops[group:whole] - position,
                         self._rows[group:whole])
            group = whole
        if group < count and int(starts[group]) < end:  # one that begins here and ends after
            sha.update(self._rows[group])
            sha.update(view[int(starts[group]) - position :])
            self._within = end
        self._next = group

    def hexdigest(self) -> str:
        if self._next < len(self._starts):
            raise DmlBridgeError("internal error: the fingerprint was not fed every sampled byte")
        return self._sha.hexdigest()


def fingerprint_problem(
    fd: int, name: str, expected: str | None, size: int, offsets: list[int], totals: list[int],
    fingerprint: str | None = None,
) -> str | None:
    """Why the buffer file ``fd`` (``name`` in messages) does not match the ``expected`` fingerprint (None when it
    does, or when none is expected); ManifestError when it cannot be read. ``fingerprint``: the file's, computed
    already from bytes read for another purpose (:class:`FingerprintStream`); else it is read here."""
    if expected is None:
        return None
    if fingerprint is None:
        try:
            fingerprint = bin_fingerprint(fd, size, offsets, totals, repr(name))
        except OSError as exc:
            raise ManifestError(f"cannot read the buffer file {name!r}: {exc.strerror or exc}") from None
    if fingerprint == expected:
        return None
    return (
        f"the buffer file {name!r} does not match the manifest's fingerprint (its sampled bytes differ): it was "
        "changed after the manifest was written; convert the model again"
    )
