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

import functools
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from dmlbridge.errors import DmlBridgeError, ExternalDataError
from dmlbridge.model.constants import ModelConstant
from dmlbridge.model.slices import ConstantSlices
from dmlbridge.onnx.external_data import ExternalDataReader, OpenedData
from dmlbridge.placement.entries import FOUR_BIT, PlanEntry
from dmlbridge.plan.bits import differing_bits
from dmlbridge.plan.buffer_pass import BufferReads
from dmlbridge.system.aligned import empty_aligned
from dmlbridge.tensor.descs import BufferTensorDesc
from dmlbridge.tensor.encode import PreparedTensor, element_writer, prepare, prepare_into
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
_BY_BLOCK = ("widen", "emulate", "narrow")
"""The exact conversions that write new bytes, each element's from its value alone: their fresh bytes are made a
block at a time, beside the buffer file's (see :func:`_same_by_block`)."""


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
    """A chunk's bytes in its buffer file, ``[start, start + size)``, read a block at a time, in order, as the
    comparison asks for them (:meth:`block`), each byte once: kept in ``out`` when the main thread needs them all
    (``keep``: the SHA-256), else read into ``out``'s first BLOCK bytes, again and again (they stay in the cache),
    only the bytes the fingerprint samples kept. A chunk that differs from the fresh bytes is then compared the
    long way, whole (:meth:`whole`): the blocks found equal to them are those bytes (:meth:`keep_from`), the one
    that differed is at hand, the rest is read. :meth:`given`: bytes read with others, in the main thread."""

    def __init__(self, reads: BufferReads | None, start: int, size: int, out: np.ndarray, keep: bool = True) -> None:
        self._reads, self._start, self.size, self.buffer = reads, start, size, out
        self._kept: np.ndarray | None = out[:size] if keep else None
        self._filled = 0 if reads is not None else size
        self._low = 0  # the first byte of the block in ``buffer`` (when not kept)
        self._sampled = [] if keep or reads is None else reads.sampled(start, start + size)
        self.samples: list[tuple[int, bytes]] = []
        """The sampled bytes read (when not kept): ``(position in the file, bytes)``, in file order."""
        self.matched = 0
        """The bytes ``[0, matched)`` were found equal to the fresh bytes (zeros after those of the values)."""

    @classmethod
    def given(cls, data: np.ndarray) -> ChunkBytes:
        return cls(None, 0, len(data), data)

    def block(self, low: int, high: int) -> np.ndarray:
        """The chunk's bytes ``[low, high)`` (when not kept: the next ones, at most BLOCK of them)."""
        if self._kept is not None:
            if high > self._filled:
                assert self._reads is not None
                self._reads.read_part(self._start + self._filled, self._kept[self._filled : high])
                self._filled = high
            return self._kept[low:high]
        assert self._reads is not None and low == self._filled and high - low <= max(1, len(self.buffer))
        data = self.buffer[: high - low]
        self._reads.read_part(self._start + low, data)
        self._low, self._filled = low, high
        first, last = self._start + low, self._start + high
        for begin, end in self._sampled:
            if begin < last and end > first:
                at, to = max(begin, first), min(end, last)
                self.samples.append((at, data[at - first : to - first].tobytes()))
        return data

    def zeros_from(self, low: int) -> bool:
        """Whether the chunk's bytes from ``low`` on (an entry's padding) are zeros (``matched`` as far as they
        are)."""
        step = max(1, BLOCK if self._kept is not None else len(self.buffer))
        for at in range(low, self.size, step):
            if self.block(at, min(self.size, at + step)).any():
                return False
            self.matched = min(self.size, at + step)
        return True

    def rest(self) -> None:
        """Read the bytes not read yet (for the digests)."""
        step = max(1, BLOCK if self._kept is not None else len(self.buffer))
        for at in range(self._filled, self.size, step):
            self.block(at, min(self.size, at + step))

    def keep_from(self, known: Callable[[np.ndarray], None] | None) -> None:
        """Keep every byte from now on; ``known`` writes into an array the fresh bytes of ``[0, matched)``
        (None: not at hand: those bytes are read again)."""
        if self._kept is not None:
            return
        kept = empty_aligned(self.size)
        if known is None:
            self._filled = 0
        else:
            known(kept[: self.matched])
            kept[self.matched : self._filled] = self.buffer[self.matched - self._low : self._filled - self._low]
        self._kept, self._sampled, self.samples = kept, [], []  # (the fingerprint takes the kept bytes)

    def whole(self) -> np.ndarray:
        """Every byte of the chunk (kept by :meth:`keep_from` first, when not kept)."""
        if self._kept is None:
            self.keep_from(None)
        assert self._kept is not None
        return self.block(0, self.size)

    def hand_back(self, reads: BufferReads) -> None:
        """Give the main thread's digests what they take of this chunk: its bytes, or those the fingerprint
        samples."""
        if self._kept is not None:
            reads.provided(self._start, self._kept)
        else:
            reads.provided_samples(self._start, self._start + self.size, self.samples)


def _fresh(expected: np.ndarray, used: int) -> Callable[[np.ndarray], None]:
    """What writes the fresh bytes of a chunk's first bytes into an array: ``expected[:used]``, then zeros."""

    def known(out: np.ndarray) -> None:
        head = min(len(out), used)
        out[:head] = expected[:head]
        out[head:] = 0

    return known


def element_bits(entry: PlanEntry) -> int:
    """The bits one element of an entry takes in its buffer file."""
    assert entry.dml_type is not None
    return 64 if entry.conversion == "emulate" else entry.dml_type.bitwidth  # (emulation: 8-byte elements)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two byte arrays of one length are equal (compared eight bytes at a time: a quarter of a byte-wise
    pass; the last few as bytes objects, and no np.array_equal, whose checks cost as much as a MiB's comparison)."""
    whole = len(a) // 8 * 8
    if whole < len(a) and a[whole:].tobytes() != b[whole:].tobytes():
        return False
    return not np.not_equal(a[:whole].view("<u8"), b[:whole].view("<u8")).any()


def same_blocks(expected: np.ndarray, piece: ChunkBytes, used: int) -> bool:
    """Whether a chunk's first ``used`` bytes are ``expected`` and the rest (an entry's padding) zeros, read and
    compared a block at a time (when not, ``piece`` keeps its bytes from then on: see ChunkBytes)."""
    for low in range(0, used, BLOCK):
        high = min(used, low + BLOCK)
        if not _same(expected[low:high], piece.block(low, high)):
            piece.keep_from(_fresh(expected, used))
            return False
        piece.matched = high
    if piece.zeros_from(used):
        return True
    piece.keep_from(_fresh(expected, used))
    return False


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
                if not _same(block, piece.block(low, high)):
                    break
                piece.matched = low = high
            else:
                if piece.zeros_from(used):
                    return True
            piece.keep_from(functools.partial(self._known, data, first, used, odd_nibble))
        except ExternalDataError:
            piece.keep_from(None)  # (the model's file failed: the usual path says why, as it always did)
        return False

    @staticmethod
    def _known(data: OpenedData, first: int, used: int, odd_nibble: bool, out: np.ndarray) -> None:
        """The fresh bytes of a chunk's first ``len(out)`` bytes, found equal to the stored ones: those read
        again, the spare nibble zeroed, zeros after them."""
        head = min(len(out), used)
        if head:
            for _ in data.read_blocks(first, head, out[:head]):
                pass
            if odd_nibble and head == used:
                out[head - 1] &= 0x0F
        out[head:] = 0

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
    by_block = entry.conversion in _BY_BLOCK
    try:
        if slices is None:
            values = constant.to_array(reader=reader, max_tensor_bytes=max_tensor_bytes).reshape(-1)
        else:
            values = slices.values(chunk.begin, chunk.end, buffer=buffer)
    except ExternalDataError:
        piece.rest()  # (the buffer file's errors first, as when it was read before the model)
        raise  # the model's files cannot be read: one error for the whole run, not a mismatch per constant
    except DmlBridgeError:
        piece.rest()
        return FAILED
    if by_block and _same_by_block(target, alignment, entry, values, piece, used, bits):
        return Found(0, -1, 0, False, None, None)  # (exact, as below: the values read back as the model's)
    try:
        expected = prepare(values, target=target, min_dims=1, flags=entry.flags,
                           guaranteed_base_offset_alignment=alignment)
    except DmlBridgeError:
        piece.rest()
        return FAILED
    if by_block:  # (some blocks compared: the rest of the chunk is compared the long way, whole)
        piece.keep_from(_fresh(expected.data, used))
    assert entry.dml_type is not None and entry.conversion is not None
    exact = (entry.conversion == expected.conversion and entry.conversion in _EXACT
             and entry.dml_type is expected.dml_type)
    if exact and same_blocks(expected.data, piece, used):
        # The bytes are the fresh conversion's, of a conversion every value of which reads back as itself (a
        # native type's bytes are its values; widening and the 32-bit forms of fitting INT64 are exact: the
        # round trip the tests hold to the reference encoder): the values read back are the model's. Reading
        # them back again would only repeat that (and narrowing FLOAT16 back to FLOAT8 costs more than the rest).
        return Found(0, -1, expected.clamped, False, None, None)
    actual = piece.whole()  # (kept from the block that differed on, when not kept)
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


def _same_by_block(target: Target, alignment: int, entry: PlanEntry, values: np.ndarray, piece: ChunkBytes,
                   used: int, bits: int) -> bool:
    """Whether a chunk's first ``used`` bytes are a fresh conversion of ``values`` (of ``entry``'s conversion and
    DML type) and the rest zeros, the fresh bytes made a block at a time into one reused block of memory and
    compared with the buffer file's while both are in the processor's cache. Made whole, an 8 MiB chunk's fresh
    bytes went to memory (fresh pages, a page fault each) and came back to be compared. The conversions of
    _BY_BLOCK convert each element from its value alone, so a block's bytes are those of the whole chunk's
    conversion at the block's place (blocks of a whole number of bytes: 4-bit pairs stay whole). False: they
    differ, the conversion is not the entry's, or it fails (a value out of range): the caller then converts the
    whole chunk and compares it the long way, or says why it cannot be converted."""
    step = BLOCK * 8 // bits  # (elements per block)
    scratch = np.empty(BLOCK + 8, np.uint8)  # (prepare_into rounds a block's bytes up to a multiple of 4)
    try:  # (planned once: planning each block anew cost a tenth of verify's time)
        writer = element_writer(values[:1], target=target, flags=entry.flags,
                                guaranteed_base_offset_alignment=alignment)
    except DmlBridgeError:
        return False  # (the caller converts the whole chunk, which fails the same way, and says so)
    for low in range(0, len(values), step):
        high = min(len(values), low + step)
        start, stop = low * bits // 8, (high * bits + 7) // 8
        try:
            if writer is not None:
                writer.write(values[low:high], scratch)
                fresh, conversion, dml_type = scratch, writer.conversion, writer.dml_type
            else:  # 4-bit elements: a block of whole bytes, made as prepare makes a tensor of them
                made = prepare_into(scratch, 0, values[low:high], target=target, min_dims=1, flags=entry.flags,
                                    guaranteed_base_offset_alignment=alignment)
                fresh, conversion, dml_type = made.data, made.conversion, made.dml_type
        except DmlBridgeError:
            return False  # (as above)
        if conversion != entry.conversion or dml_type is not entry.dml_type:
            return False
        if not _same(fresh[: stop - start], piece.block(start, stop)):
            return False
        piece.matched = stop
    return piece.zeros_from(used)


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

