"""Densifying sparse tensors, a block of indices at a time.

ONNX's sparse format holds ``values`` [NNZ] at ``indices``: [NNZ] linear (C-order) positions or [NNZ, rank]
coordinates, of any integer type; every other element is all-zero bits. Indices are never trusted: out-of-range,
negative and duplicate ones raise TensorProtoError. They are converted to int64, checked and linearised in
blocks of at most :data:`INDEX_BLOCK` entries, so the temporaries stay a few MiB whatever NNZ is (a whole int64
copy of [NNZ, 8] INT8 coordinates would be 64 times their bytes). Indices in ascending order, as the spec asks,
are unique by that order alone; any other order is checked against a bitmap of the dense tensor (one bit per
element), so a different order gives the same dense tensor and the same errors.

The dense values go where the caller says: a fresh array, the first bytes of an output buffer (a native type's
DirectML bytes are its values), or one range of elements at a time (a large tensor converted in chunks).

    >>> import numpy as np
    >>> densify_sparse(np.array([5, 6], np.int8), np.array([[0, 1], [1, 2]], np.int8), [2, 3]).tolist()
    [[0, 5, 0], [0, 0, 6]]
    >>> indices = SparseIndices(np.array([4, 1]), (6,), 2)
    >>> indices.check()
    >>> part = np.zeros(3, np.int8); indices.scatter(np.array([7, 8], np.int8), part, 3, 6); part.tolist()
    [0, 7, 0]
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from dmlbridge.errors import TensorProtoError, counted

__all__ = ["INDEX_BLOCK", "WORK_BYTES", "SparseIndices", "densify_sparse"]

INDEX_BLOCK = 1 << 17
"""Index entries (rows × rank) converted to int64 and checked at a time."""
WORK_BYTES = 4 << 20
"""The most the temporaries of one block take (int64 indices, their linear positions, masks): what densifying
allocates beyond its inputs, its output and the bitmap of unordered indices (:meth:`SparseIndices.bitmap_bytes`)."""
_INT64_MAX = np.iinfo(np.int64).max


class SparseIndices:
    """A sparse tensor's ``indices`` for a dense ``shape`` with ``nnz`` values; the checks that need no pass over
    them are made here (TensorProtoError, naming ``label``). :meth:`check` makes the others, in one pass;
    :meth:`scatter` then places values, a range of dense elements at a time."""

    def __init__(self, indices: np.ndarray, shape: tuple[int, ...], nnz: int, label: str = "sparse tensor") -> None:
        self.shape = shape
        self.count = math.prod(shape)
        self.label = label
        if indices.dtype.kind not in "iu":
            raise TensorProtoError(f"{label}: indices must be integers, got {indices.dtype}")
        if indices.dtype == np.uint64:  # (a value over INT64_MAX would wrap in the int64 blocks)
            flat = indices.reshape(-1)
            for start in range(0, flat.size, INDEX_BLOCK):
                block = flat[start : start + INDEX_BLOCK]
                if block.max() > _INT64_MAX:
                    bad = start + int(np.argmax(block > _INT64_MAX))
                    raise TensorProtoError(f"{label}: index entry {bad} = {flat[bad]} is out of range")
        rank = len(shape)
        if indices.shape == (nnz,):
            self.coordinates = False
        elif indices.shape == (nnz, rank):
            self.coordinates = True
        else:
            raise TensorProtoError(
                f"{label}: indices have shape {list(indices.shape)}; with {counted(nnz, 'value')} and "
                f"{counted(rank, 'dim')} they must be [{nnz}] or [{nnz}, {rank}]"
            )
        self.indices = indices
        self.nnz = nnz
        self.rows = max(1, INDEX_BLOCK // rank) if self.coordinates and rank else INDEX_BLOCK
        self._limits = np.array(shape, dtype=np.int64)
        self._strides = np.array([math.prod(shape[k + 1 :]) for k in range(rank)], dtype=np.int64)
        self.ascending: bool | None = None
        """Whether the linear positions ascend strictly (known after :meth:`check`)."""

    def bitmap_bytes(self) -> int:
        """The bytes of the bitmap that unordered indices are checked against."""
        return (self.count + 7) // 8

    def _blocks(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        for first in range(start, stop, self.rows):
            yield first, min(first + self.rows, stop)

    def _linear(self, start: int, stop: int, checked: bool) -> np.ndarray:
        """The linear positions of entries ``[start, stop)`` (int64); ``checked``: raise for those out of range."""
        idx = self.indices[start:stop].astype(np.int64)
        if not self.coordinates:
            if checked:
                bad_mask = (idx < 0) | (idx >= self.count)
                if bad_mask.any():
                    bad = int(np.argmax(bad_mask))
                    raise TensorProtoError(
                        f"{self.label}: linear index {int(idx[bad])} of value {start + bad} is outside "
                        f"0..{self.count - 1} (dense shape {list(self.shape)})"
                    )
            return idx
        if checked:
            bad_mask = (idx < 0) | (idx >= self._limits)
            if bad_mask.any():
                row, axis = (int(i) for i in np.argwhere(bad_mask)[0])
                raise TensorProtoError(
                    f"{self.label}: coordinates {idx[row].tolist()} of value {start + row} are outside dense shape "
                    f"{list(self.shape)} (axis {axis})"
                )
        if not self.shape:
            return np.zeros(stop - start, dtype=np.int64)
        # C-order linearisation; each coordinate is in range, so the sum stays below count.
        return idx @ self._strides

    def check(self, values: np.ndarray | None = None, dense: np.ndarray | None = None) -> None:
        """Check every index (in range, unique) in one pass, and learn whether they ascend; with ``values`` and
        ``dense`` (a flat array of every element), place the values while at it. An index out of range raises
        at once (the first in order); a duplicate raises after the pass, naming the smallest such position (what
        sorting all of them would find first)."""
        previous = -1
        seen: np.ndarray | None = None
        smallest: int | None = None
        for start, stop in self._blocks(0, self.nnz):
            linear = self._linear(start, stop, checked=True)
            if dense is not None and values is not None:
                dense[linear] = values[start:stop]
            if seen is None:
                if linear[0] > previous and bool(np.all(linear[1:] > linear[:-1])):
                    previous = int(linear[-1])
                    continue
                seen = np.zeros(self.bitmap_bytes(), dtype=np.uint8)  # out of order: every block so far marked
                for first, end in self._blocks(0, start):
                    self._mark(seen, self._linear(first, end, checked=False))
            repeated = self._mark(seen, linear)
            if repeated is not None and (smallest is None or repeated < smallest):
                smallest = repeated
        self.ascending = seen is None
        if smallest is not None:
            where = [int(i) for i in np.unravel_index(smallest, self.shape)] if self.shape else []
            raise TensorProtoError(
                f"{self.label}: index {where} (linear {smallest}) appears more than once; sparse indices must be "
                "unique"
            )

    @staticmethod
    def _mark(seen: np.ndarray, linear: np.ndarray) -> int | None:
        """Set the bits of ``linear`` in ``seen``; the smallest position that was set already or that ``linear``
        holds twice (None: none)."""
        ordered = np.sort(linear)
        byte = ordered >> 3
        bit = np.left_shift(1, ordered & 7).astype(np.uint8)
        repeated = ordered[(seen[byte] & bit) != 0]
        twice = ordered[1:][ordered[1:] == ordered[:-1]]
        firsts = np.flatnonzero(np.r_[True, byte[1:] != byte[:-1]])
        seen[byte[firsts]] |= np.bitwise_or.reduceat(bit, firsts)
        found = [int(a[0]) for a in (repeated, twice) if a.size]
        return min(found) if found else None

    def _position(self, linear: int) -> int:
        """The first entry whose linear position is at least ``linear`` (ascending indices: a binary search)."""
        low, high = 0, self.nnz
        while low < high:
            middle = (low + high) // 2
            if int(self._linear(middle, middle + 1, checked=False)[0]) < linear:
                low = middle + 1
            else:
                high = middle
        return low

    def scatter(self, values: np.ndarray, dest: np.ndarray, start: int, stop: int) -> None:
        """Place the values of dense elements ``[start, stop)`` into ``dest`` (``stop - start`` elements, zeroed by
        the caller), after :meth:`check`. Ascending indices are found by a binary search; others by a pass over
        all of them."""
        if self.ascending is None:
            raise TensorProtoError(f"{self.label}: internal error: indices scattered before they were checked")
        if self.ascending:
            for first, end in self._blocks(self._position(start), self._position(stop)):
                dest[self._linear(first, end, checked=False) - start] = values[first:end]
            return
        for first, end in self._blocks(0, self.nnz):
            linear = self._linear(first, end, checked=False)
            inside = (linear >= start) & (linear < stop)
            dest[linear[inside] - start] = values[first:end][inside]


def densify_sparse(values: np.ndarray, indices: np.ndarray, dims: tuple[int, ...] | list[int], *,
                   label: str = "sparse tensor", out: np.ndarray | None = None) -> np.ndarray:
    """The dense array of ONNX sparse format: ``values`` [NNZ] at ``indices``, either [NNZ] linear (C order)
    indices or [NNZ, rank] coordinates; every other element is all-zero bits ("" for strings).

    Indices are never trusted: out-of-range, negative and duplicate indices raise TensorProtoError. Their order
    does not matter (the spec asks for ascending order; a different order does not change the dense tensor).
    ``out``: a flat array of every element (of ``values``' dtype, any byte order) to write into instead of a new
    one; it is zeroed first.
    """
    shape = tuple(int(d) for d in dims)
    if values.ndim != 1:
        raise TensorProtoError(f"{label}: values must be 1-D ([NNZ]), got shape {list(values.shape)}")
    sparse = SparseIndices(indices, shape, values.shape[0], label)
    if out is not None:
        dense = out
        dense[...] = 0
    elif values.dtype == object:
        dense = np.full(sparse.count, "", dtype=object)
    else:
        dense = np.zeros(sparse.count, dtype=values.dtype)
    sparse.check(values, dense)
    return dense.reshape(shape)
