"""Reading a written plan's buffer file once, front to back: the bytes verification compares, its SHA-256 and
its fingerprint, all from the same reads.

Verification compares each entry of a buffer file, a chunk at a time, in file order. :class:`BufferReads` is
given those chunks' ranges (``pieces``) up front. A large piece is read by the job that compares it (a worker's
positioned reads, :meth:`BufferReads.read_part`), which hands its bytes back, in order, through
:meth:`BufferReads.provided`; small ones are read here, many at once (:meth:`BufferReads.read`). Every byte read,
either way, is fed once to SHA-256 (when asked: then the bytes between the pieces are read too, and no byte of
the file is left out) and to the fingerprint's sampled ranges (:class:`~dmlbridge.plan.fingerprint.FingerprintStream`,
whose few samples outside the pieces are read on their own). No byte is read twice.

    >>> import os, tempfile, numpy as np
    >>> fd, path = tempfile.mkstemp()
    >>> _ = os.write(fd, bytes(range(100)))
    >>> reads = BufferReads(fd, path, 100, [(10, 14, False), (20, 22, False)], sha256=True)
    >>> reads.read(10, 14).tolist(), reads.read(20, 22).tolist()
    ([10, 11, 12, 13], [20, 21])
    >>> import hashlib; reads.finish()[0] == hashlib.sha256(bytes(range(100))).hexdigest()
    True
    >>> os.close(fd); os.remove(path)
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from dmlbridge.errors import DmlBridgeError, ManifestError
from dmlbridge.plan.fingerprint import FingerprintStream
from dmlbridge.system.aligned import empty_aligned
from dmlbridge.system.files import read_into

__all__ = ["BLOCK", "BufferReads"]

BLOCK = 4 << 20
"""The most one read here takes: small pieces are read this many bytes at a time, and so are the bytes between
pieces that only the SHA-256 wants."""
_JOIN = 64 << 10  # small pieces closer than this are read with one read


class BufferReads:
    """One buffer file (descriptor ``fd``, ``name`` in messages, ``size`` bytes), read once; ``pieces``: the
    ranges verification compares, ``(start, stop, by_job)`` in ascending order without overlaps (``by_job``: read
    by the job that compares it). ``sha256``: hash every byte of the file; ``fingerprint``: compute its
    fingerprint from the same bytes. :meth:`read` and :meth:`provided` are called for the pieces in order."""

    def __init__(self, fd: int, name: str, size: int, pieces: list[tuple[int, int, bool]], *, sha256: bool,
                 fingerprint: FingerprintStream | None = None) -> None:
        self._fd, self._name, self._size = fd, name, size
        self._pieces = pieces
        self._next = 0  # the next piece in order
        self._sha = hashlib.sha256() if sha256 else None
        self._fingerprint = fingerprint
        self._position = 0  # every byte before this one was fed (or passed over)
        self._block: np.ndarray | None = None  # the small pieces read together, from ``_block_start``
        self._block_start = 0

    def _read(self, start: int, out: np.ndarray) -> None:
        try:
            done = read_into(self._fd, out.data.cast("B"), start)
        except OSError as exc:
            raise ManifestError(f"cannot read {self._name!r}: {exc.strerror or exc}") from None
        if done < len(out):
            raise ManifestError(
                f"the buffer file {self._name!r} ended at byte {start + done}, before byte {start + len(out)}; it "
                "was cut short after the plan was loaded"
            )

    def _feed(self, start: int, data: Any) -> None:
        if self._sha is not None:
            self._sha.update(data)
        if self._fingerprint is not None:
            self._fingerprint.feed(start, data)
        self._position = start + len(data)

    def _skip_to(self, stop: int) -> None:
        """Pass over the bytes up to ``stop`` that no piece holds: read and fed when hashing, else only those the
        fingerprint samples."""
        start = self._position
        if stop <= start:
            return
        if self._sha is not None:
            scratch = empty_aligned(min(BLOCK, stop - start))
            while start < stop:
                part = scratch[: min(BLOCK, stop - start)]
                self._read(start, part)
                self._feed(start, part)
                start += len(part)
        elif self._fingerprint is not None:
            for low, high in self._fingerprint.needed(start, stop):
                part = np.empty(high - low, np.uint8)
                self._read(low, part)
                self._fingerprint.feed(low, part)
        self._position = stop

    def _piece(self, start: int, stop: int, by_job: bool) -> None:
        """Check that ``[start, stop)`` is the next piece (and how it is read), and move past it."""
        if self._next >= len(self._pieces) or self._pieces[self._next] != (start, stop, by_job):
            raise DmlBridgeError(f"internal error: bytes {start}..{stop} of {self._name!r} asked for out of order")
        self._next += 1

    def read(self, start: int, stop: int) -> np.ndarray:
        """The bytes of the next piece, a small one: a view of one read of it and the small pieces after it."""
        self._piece(start, stop, False)
        block = self._block
        if block is None or not (self._block_start <= start and stop <= self._block_start + len(block)):
            end, last = stop, self._next  # as far as the small pieces after it go, close together
            while last < len(self._pieces):
                low, high, by_job = self._pieces[last]
                if by_job or low - end > _JOIN or high - start > BLOCK:
                    break
                end, last = high, last + 1
            self._skip_to(start)
            block = self._block = empty_aligned(end - start)
            self._block_start = start
            self._read(start, block)
            self._feed(start, block)
        return block[start - self._block_start : stop - self._block_start]

    def read_part(self, start: int, out: np.ndarray) -> None:
        """Fill ``out`` with the file's bytes from ``start``: part of a piece read by its job (in any thread, in any
        order, a block at a time if it likes), which hands the whole piece back through :meth:`provided` (the
        digests take it in file order)."""
        self._read(start, out)

    def provided(self, start: int, data: np.ndarray) -> None:
        """The bytes of the next piece, which its job read."""
        self._piece(start, start + len(data), True)
        self._skip_to(start)
        self._feed(start, data)

    @property
    def hashes(self) -> bool:
        """Whether every byte is hashed (SHA-256): a job then hands back every byte of its piece, else only those
        the fingerprint samples (:meth:`sampled`, :meth:`provided_samples`)."""
        return self._sha is not None

    def sampled(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The stretches of ``[start, stop)`` the fingerprint samples (in any thread)."""
        return [] if self._fingerprint is None else self._fingerprint.sampled(start, stop)

    def provided_samples(self, start: int, stop: int, samples: list[tuple[int, Any]]) -> None:
        """The next piece, ``[start, stop)``, which its job read, by the bytes the fingerprint samples in it
        (``(position, bytes)`` in file order, every stretch of :meth:`sampled`): when no SHA-256 is computed."""
        self._piece(start, stop, True)
        if self._sha is not None:
            raise DmlBridgeError(f"internal error: bytes {start}..{stop} of {self._name!r} handed back sampled")
        self._skip_to(start)
        if self._fingerprint is not None:
            for position, data in samples:
                self._fingerprint.feed(position, data)
        self._position = stop

    def finish(self) -> tuple[str | None, str | None]:
        """The file's SHA-256 and fingerprint (each None when not asked for), once the bytes after the last piece
        are passed over."""
        self._skip_to(self._size)
        self._block = None
        sha = None if self._sha is None else self._sha.hexdigest()
        return sha, None if self._fingerprint is None else self._fingerprint.hexdigest()
