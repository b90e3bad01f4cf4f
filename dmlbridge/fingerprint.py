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
from typing import Any

import numpy as np

from dmlbridge.errors import ManifestError
from dmlbridge.file_reads import read_at

__all__ = ["bin_fingerprint", "fingerprint_problem"]

_FINGERPRINT_TAG = b"dmlbridge-bin-fingerprint-1\x00"
_FINGERPRINT_EDGE = 64 << 10
_FINGERPRINT_ENTRY = 64
_FINGERPRINT_SPREAD = 1024
_FINGERPRINT_WINDOW = 64 << 10  # sampled ranges closer than this are read with one read
_CHUNK = 4 << 20


def bin_fingerprint(fd: int, size: int, offsets: list[int], totals: list[int], name: str = "the buffer") -> str:
    """SHA-256 over a buffer file's size and sampled ranges (see the module docstring), read through its open
    descriptor ``fd``: cheap at any file size, and different for a file that is not the one the manifest was
    written with (raises OSError, naming the file as ``name``, when the file is shorter than ``size``).

    ``offsets`` and ``totals``: the converted entries' offsets and TotalTensorSizeInBytes. The hashed stream: the
    tag and the size, then for each merged range (overlapping or touching sampled ranges
    merged, in file order) its start and stop (8-byte little-endian each) and its bytes.
    """
    spread = [i * size // _FINGERPRINT_SPREAD for i in range(_FINGERPRINT_SPREAD)]
    starts = np.array([0, max(0, size - _FINGERPRINT_EDGE), *offsets, *spread], dtype=np.int64)
    stops = np.concatenate([
        np.array([min(_FINGERPRINT_EDGE, size), size], dtype=np.int64),
        np.array(offsets, dtype=np.int64) + np.minimum(np.array(totals, dtype=np.int64), _FINGERPRINT_ENTRY),
        np.minimum(np.array(spread, dtype=np.int64) + _FINGERPRINT_ENTRY, size),
    ])
    # Merge (vectorised: a model can have 100,000 entries). Sorted by start, a range joins the current group when
    # it starts at or before the furthest stop so far; each group runs to that furthest stop.
    first, last = starts, stops
    keep = first < last
    first, last = first[keep], last[keep]
    order = np.argsort(first, kind="stable")
    first, reach = first[order], np.maximum.accumulate(last[order])
    opens = np.flatnonzero(np.r_[True, first[1:] > reach[:-1]]) if len(first) else np.zeros(0, np.intp)
    group_start = first[opens]
    group_stop = reach[np.r_[opens[1:] - 1, len(first) - 1]] if len(first) else reach
    headers = np.stack([group_start, group_stop], axis=1).astype("<u8").tobytes()
    header_rows = np.frombuffer(headers, dtype=np.uint8).reshape(-1, 16)
    starts_at, stops_at = group_start.tolist(), group_stop.tolist()

    # Ranges closer than _FINGERPRINT_WINDOW are read together and their bytes hashed in batches (the digest of
    # a stream does not depend on how it is cut), so 100,000 small entries cost a few large reads.
    sha = hashlib.sha256(_FINGERPRINT_TAG + size.to_bytes(8, "little"))
    # Runs of ranges with gaps of at most _FINGERPRINT_WINDOW, spanning at most _CHUNK bytes, are read at once.
    gaps = np.flatnonzero(group_start[1:] - group_stop[:-1] > _FINGERPRINT_WINDOW) + 1
    bounds = [0, *gaps.tolist(), len(starts_at)]
    for low, high in itertools.pairwise(bounds):
        begin = low
        while begin < high:
            base = starts_at[begin]
            end = begin + int(np.searchsorted(group_stop[begin:high], base + _CHUNK, side="right"))
            if end > begin:
                window = memoryview(read_at(fd, base, stops_at[end - 1] - base))
                available = base + len(window)  # less than asked only where the file ends
                if stops_at[end - 1] > available:
                    short = next(k for k in range(begin, end) if stops_at[k] > available)
                    start, stop = starts_at[short], stops_at[short]
                    raise OSError(f"{name} ended at byte {max(start, available)}, before byte {stop}")
                _hash_ranges(sha, window, group_start[begin:end] - base, group_stop[begin:end] - base,
                             header_rows[begin:end])
            else:  # one range longer than _CHUNK (many small entries packed together): in _CHUNK pieces
                start, stop = starts_at[begin], stops_at[begin]
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


def fingerprint_problem(
    fd: int, name: str, expected: str | None, size: int, offsets: list[int], totals: list[int]
) -> str | None:
    """Why the buffer file ``fd`` (``name`` in messages) does not match the ``expected`` fingerprint (None when it
    does, or when none is expected); ManifestError when it cannot be read."""
    if expected is None:
        return None
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
