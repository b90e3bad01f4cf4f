"""Comparing one chunk of an entry: its bytes in the buffer file with a fresh conversion of the model's values, and
the values read back from them with the model's.

Verification (:mod:`dmlbridge.plan.verify`) cuts each large entry into chunks. A chunk's bytes in the buffer file
(:class:`ChunkBytes`) are read a block of :data:`BLOCK` bytes at a time as the comparison asks for them, and
each block is compared with the fresh bytes while both are still in the processor's cache: read whole first and
compared after, both would come back from memory, which took half of verify's time. The fresh bytes are those
``prepare`` gives for the chunk's values; for a native constant in external data (its stored bytes are its
DirectML bytes, the spare high nibble of an odd 4-bit count aside, as conversion writes them), its stored bytes,
read a block at a time beside the buffer file's. Only when a block differs (or the conversion does not read back
exactly) is the chunk compared the long way, whole, to say what differs: the same messages, whatever the path.

    >>> import numpy as np
    >>> piece = ChunkBytes.given(np.array([1, 2, 3, 0], np.uint8))
    >>> same_blocks(np.array([1, 2, 3], np.uint8), piece, 3), same_blocks(np.array([1, 2, 4], np.uint8), piece, 3)
    (True, False)
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import numpy as np

from dmlbridge.errors import DmlBridgeError, ExternalDataError
from dmlbridge.model.constants import ModelConstant
from dmlbridge.model.slices import ConstantSlices
from dmlbridge.onnx.external_data import ExternalDataReader, OpenedData
from dmlbridge.placement.entries import FOUR_BIT, PlanEntry
from dmlbridge.plan.bits import differing_bits
from dmlbridge.plan.buffer_pass import BufferReads
from dmlbridge.tensor.descs import BufferTensorDesc
from dmlbridge.tensor.encode import PreparedTensor, prepare
from dmlbridge.types.data_types import OnnxDataType
from dmlbridge.types.float_bits import cast
from dmlbridge.types.target import Target

__all__ = ["BLOCK", "FAILED", "READBACK_BYTES", "Chunk", "ChunkBytes", "Found", "StoredBytes", "compare_chunk",
           "element_bits", "same_blocks"]

BLOCK = 1 << 20
"""The bytes of a chunk read and compared at a time (a block of the buffer file's and one of the fresh bytes stay
in the processor's cache)."""
_READBACK_BLOCK = 1 << 18
"""Elements read back and compared at a time (the decoded values, their restored dtype and the masks stay a few
MiB)."""
READBACK_BYTES = 8 << 20
"""What reading back and comparing one block allocates, at most."""
_EXACT = ("native", "widen", "emulate", "narrow")
"""The conversions whose values read back exactly, bit for bit."""


class Chunk:
    """Elements ``[begin, end)`` of the constant at ``index`` (model order) and their bytes ``[start, stop)`` in
    buffer ``buffer`` (for the last chunk, the entry's padding too); ``by_job``: compared by a job, which reads its
    bytes itself. Compared by identity (an item of workers.Prefetch)."""

    __slots__ = ("begin", "buffer", "by_job", "end", "index", "start", "stop")

    def __init__(self, index: int, buffer: int, begin: int, end: int, start: int, stop: int, by_job: bool) -> None:
        self.index, self.buffer, self.begin, self.end = index, buffer, begin, end
        self.start, self.stop, self.by_job = start, stop, by_job


class Found(NamedTuple):
    """What comparing one chunk found: bytes that differ from a fresh conversion (and the first, from the
    entry's start; -1: none), values "saturate" clamped, whether the values read back differ from the model's as
    converted, the first element whose read-back bits differ from the model's value as converted and as it is
    (index in the tensor, the buffer's value, the model's), and whether the fresh conversion failed."""

    differ: int
    first: int
    clamped: int
    values_differ: bool
    first_converted: tuple[int, Any, Any] | None
    first_value: tuple[int, Any, Any] | None
    failed: bool = False


FAILED = Found(0, -1, 0, False, None, None, True)


class ChunkBytes:
    """A chunk's bytes in its buffer file, ``[start, start + len(data))``, read into ``data`` as far as
    :meth:`upto` asks (each byte once), or :meth:`given` whole (bytes read with others, in the main thread)."""

    def __init__(self, reads: BufferReads | None, start: int, data: np.ndarray) -> None:
        self._reads, self._start, self.data = reads, start, data
        self._filled = 0 if reads is not None else len(data)

    @classmethod
    def given(cls, data: np.ndarray) -> ChunkBytes:
        return cls(None, 0, data)

    def upto(self, stop: int) -> np.ndarray:
        """The chunk's bytes ``[0, stop)``, those not read yet read now."""
        if stop > self._filled:
            assert self._reads is not None
            self._reads.read_part(self._start + self._filled, self.data[self._filled : stop])
            self._filled = stop
        return self.data[:stop]

    def whole(self) -> np.ndarray:
        return self.upto(len(self.data))


def element_bits(entry: PlanEntry) -> int:
    """The bits one element of an entry takes in its buffer file."""
    assert entry.dml_type is not None
    return 64 if entry.conversion == "emulate" else entry.dml_type.bitwidth  # (emulation: 8-byte elements)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two byte arrays of one length are equal (compared eight bytes at a time: a quarter of a byte-wise
    pass)."""
    whole = len(a) // 8 * 8
    return bool(np.array_equal(a[:whole].view("<u8"), b[:whole].view("<u8")) and np.array_equal(a[whole:], b[whole:]))


def same_blocks(expected: np.ndarray, piece: ChunkBytes, used: int) -> bool:
    """Whether a chunk's first ``used`` bytes are ``expected`` and the rest (an entry's padding) zeros, read and
    compared a block at a time."""
    for low in range(0, used, BLOCK):
        high = min(used, low + BLOCK)
        if not _same(expected[low:high], piece.upto(high)[low:high]):
            return False
    return not piece.whole()[used:].any()


class StoredBytes:
    """A native constant's stored bytes in external data, which its chunks are compared with as they are: the
    file opened once, by the first chunk that reads it (in any thread), and closed by :meth:`close`, once every
    chunk is done."""

    def __init__(self, reader: ExternalDataReader, constant: ModelConstant) -> None:
        self._reader, self.constant = reader, constant
        self._lock = threading.Lock()
        self._data: OpenedData | None = None
        self._failed = False

    def _opened(self) -> OpenedData | None:
        with self._lock:
            if self._data is None and not self._failed:
                try:
                    self._data = self._reader.open_data(self.constant.proto, self.constant.packed_nbytes)
                except DmlBridgeError:
                    self._failed = True  # (the usual path says why, chunk by chunk, as it always did)
            return self._data

    def same(self, piece: ChunkBytes, first: int, used: int, scratch: np.ndarray, odd_nibble: bool) -> bool:
        """Whether a chunk's first ``used`` bytes are the stored bytes from byte ``first`` (the spare high nibble
        of an odd 4-bit count zero: ``odd_nibble``) and the rest zeros, read side by side a block at a time
        (``scratch``: where the stored bytes are read). False too when the model's file cannot be read: the
        usual path then says why, as it always did."""
        data = self._opened()
        if data is None:
            return False
        low = 0
        try:
            for block in data.read_blocks(first, used, scratch):
                high = low + len(block)
                if odd_nibble and high == used:
                    scratch[len(block) - 1] &= 0x0F  # (a view of scratch: the same byte)
                if not _same(block, piece.upto(high)[low:high]):
                    return False
                low = high
        except DmlBridgeError:
            return False
        return low == used and not piece.whole()[used:].any()

    def close(self) -> None:
        with self._lock:
            if self._data is not None:
                self._data.close()
            self._data, self._failed = None, True


def compare_chunk(target: Target, alignment: int, constant: ModelConstant, entry: PlanEntry, chunk: Chunk,
                  piece: ChunkBytes, slices: ConstantSlices | None, reader: ExternalDataReader | None,
                  max_tensor_bytes: int, buffer: np.ndarray | None = None, stored: StoredBytes | None = None) -> Found:
    """Compare one chunk's bytes in the buffer file (``piece``) with a fresh conversion of the model's values
    (read into ``buffer`` when it is large enough), and the values read back from them with the model's, a block
    of elements at a time. ``stored``: the fresh conversion is native, its bytes the constant's stored bytes in
    external data, which are then compared first (read into ``buffer``'s first BLOCK bytes)."""
    bits = element_bits(entry)
    count = chunk.end - chunk.begin
    used = (count * bits + 7) // 8
    base = chunk.start - (entry.offset or 0)
    if stored is not None and buffer is not None and buffer.shape[0]:
        odd = entry.dml_type in FOUR_BIT and constant.size % 2 == 1 and chunk.end == constant.size
        if stored.same(piece, chunk.begin * bits // 8, used, buffer[:BLOCK], odd):
            return Found(0, -1, 0, False, None, None)  # (a native conversion clamps nothing, reads back exactly)
    try:
        if slices is None:
            values = constant.to_array(reader=reader, max_tensor_bytes=max_tensor_bytes).reshape(-1)
        else:
            values = slices.values(chunk.begin, chunk.end, buffer=buffer)
        expected = prepare(values, target=target, min_dims=1, flags=entry.flags,
                           guaranteed_base_offset_alignment=alignment)
    except ExternalDataError:
        piece.whole()  # (the buffer file's errors first, as when it was read before the model)
        raise  # the model's files cannot be read: one error for the whole run, not a mismatch per constant
    except DmlBridgeError:
        piece.whole()
        return FAILED
    assert entry.dml_type is not None and entry.conversion is not None
    exact = (entry.conversion == expected.conversion and entry.conversion in _EXACT
             and entry.dml_type is expected.dml_type)
    if exact and same_blocks(expected.data, piece, used):
        # The bytes are the fresh conversion's, of a conversion every value of which reads back as itself (a
        # native type's bytes are its values; widening and the 32-bit forms of fitting INT64 are exact: the
        # round trip the tests hold to the reference encoder): the values read back are the model's. Reading
        # them back again would only repeat that (and narrowing FLOAT16 back to FLOAT8 costs more than the rest).
        return Found(0, -1, expected.clamped, False, None, None)
    actual = piece.whole()
    differ = _differing_bytes(expected.data[:used], actual[:used])
    padding = np.flatnonzero(actual[used:]) + used
    first = int(differ[0]) if differ.size else int(padding[0]) if padding.size else -1
    if not differ.size and exact:
        return Found(len(padding), base + first if first >= 0 else -1, expected.clamped, False, None, None)
    converted = values
    if entry.conversion == "lossy":  # (rounded to FLOAT32 as the conversion rounds, and back: float_bits)
        converted = cast(cast(values, np.float32), values.dtype)
    elif entry.conversion == "saturate":
        info = np.iinfo(np.int32 if constant.onnx_type is OnnxDataType.INT64 else np.uint32)
        converted = np.clip(values, info.min, info.max).astype(values.dtype)
    values_differ, first_converted, first_value = False, None, None
    for low in range(0, count, _READBACK_BLOCK):
        high = min(count, low + _READBACK_BLOCK)
        back = PreparedTensor(
            entry.onnx_type, entry.conversion,
            BufferTensorDesc(entry.dml_type, entry.flags, (high - low,), None, used, alignment),
            actual[low * bits // 8 : (high * bits + 7) // 8], entry.onnx_type.numpy(), (high - low,), None).to_numpy()
        values_differ = values_differ or bool(differing_bits(back, converted[low:high]).any())
        if first_converted is None:
            first_converted = _first_of(back, converted, low, chunk.begin)
        if first_value is None:
            first_value = first_converted if converted is values else _first_of(back, values, low, chunk.begin)
    return Found(len(differ) + len(padding), base + first if first >= 0 else -1, expected.clamped, values_differ,
                 first_converted, first_value)


def _differing_bytes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The positions where two byte arrays of one length differ (none, the usual case, found at a quarter of the
    cost of a byte-wise pass)."""
    if _same(a, b):
        return np.zeros(0, np.intp)
    return np.flatnonzero(a != b)


def _first_of(back: np.ndarray, values: np.ndarray, low: int, begin: int) -> tuple[int, Any, Any] | None:
    """The first element of ``back`` (elements ``low`` on of ``values``) whose bits differ: (its index in the
    tensor, the buffer's value, the model's)."""
    part = values[low : low + len(back)]
    differ = np.flatnonzero(differing_bits(back, part))
    if not differ.size:
        return None
    at = int(differ[0])
    return begin + low + at, back[at], part[at]

