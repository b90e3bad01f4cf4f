"""Writing the upload image, a buffer file at a time: each constant's bytes at its planned offset, zeros between.

Tensors are written one at a time, a large one a chunk at a time, so the memory conversion needs is bounded by the
jobs' budget (dmlbridge.system.workers), not by the model. A constant whose stored bytes already are its DirectML
bytes (a
"native" type such as FLOAT, FLOAT16, INT64 or INT4 in raw_data or external data) is written without being decoded;
large external ones are copied from their file by the kernel (``copy_file_range``/``sendfile``, after the same
checks as any external read) when no checksum is computed. Runs of constants the byte scan read are placed by a few
numpy steps, straight from the model's bytes. Everything else is decoded and converted by ``prepare``, as
DMLBRIDGE_CHECKED_PATH_ONLY makes every constant go.

    >>> import io, numpy as np
    >>> from onnx import helper, numpy_helper
    >>> from dmlbridge.model.constants import find_constants
    >>> from dmlbridge.placement.options import ConvertOptions, PlanOptions
    >>> from dmlbridge.placement.entries import place_constants
    >>> model = helper.make_model(helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.ones(2, np.float32))]))
    >>> layout = PlanOptions.check(alignment=16)
    >>> options = ConvertOptions.check(layout, progress=False, strict=False, external_data_root=None,
    ...                                checksum=False, max_tensor_bytes=1 << 20, fsync=False)
    >>> constants = find_constants(model)
    >>> placement, out = place_constants(constants, layout), io.BytesIO()
    >>> written = write_image(out, constants, placement, None, None, options, Progress(False, 0, ""))
    >>> out.getvalue().hex()
    '0000803f0000803f'
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import itertools
import operator
import queue
import sys
import threading
from collections.abc import Iterator
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from dmlbridge.errors import DmlBridgeError
from dmlbridge.model.byte_scan import BytesScan
from dmlbridge.model.constants import ModelConstant
from dmlbridge.model.onnx_file import checked_path_only
from dmlbridge.onnx.external_data import ExternalDataReader
from dmlbridge.onnx.wire import float_field
from dmlbridge.placement.entries import FOUR_BIT, Pair, Placement, PlanEntry
from dmlbridge.placement.options import ConvertOptions
from dmlbridge.system.progress import Progress
from dmlbridge.system.workers import Prefetch, sigint_deferred
from dmlbridge.types.data_types import OnnxDataType
from dmlbridge.writing.jobs import STORED_KINDS, ConstantJobs, Item, prepared_constant

__all__ = ["ImageWriter", "WrittenImage", "write_image"]

_ZEROS = bytes(1 << 16)
_ZERO_VIEW = memoryview(_ZEROS)


class ImageWriter:
    """Writes a buffer file and, when asked, feeds the same bytes to SHA-256 (it is hashed while written).

    ``file`` is unbuffered: small writes (a model can hold 100,000 tiny constants) are gathered here and written
    in large pieces; large ones go straight to the file, and :meth:`copy_external` lets the kernel copy a
    tensor's external data without passing it through this process.
    """

    GATHER = 1 << 20  # writes below this size are gathered; the gathered bytes are written at this size

    def __init__(self, file: BinaryIO, hashing: bool, kernel_copy: bool = True,
                 hasher: _HashThread | None = None) -> None:
        self._file = file
        self._kernel_copy = kernel_copy and not hashing  # (hashing needs the bytes here)
        self._hash = hashlib.sha256() if hashing else None
        self._hasher = hasher if hashing else None  # hashes large pieces while they are written
        self._buffer = memoryview(bytearray(self.GATHER))  # reused: no fresh pages to fault in
        self._array = np.frombuffer(self._buffer, dtype=np.uint8)
        self._used = 0
        self.position = 0
        self.clamped: dict[int, int] = {}  # position of a "saturate" constant -> values clamped

    def write(self, data: Any) -> None:
        view = data if type(data) is bytes else memoryview(data).cast("B")
        n = len(view)
        if n < self.GATHER:
            end = self._used + n
            if end > self.GATHER:
                self.flush()
                end = n
            self._buffer[end - n : end] = view
            self._used = end
        else:
            self.flush()
            self._out(memoryview(view))
        self.position += n

    def place(self, offsets: np.ndarray, lengths: np.ndarray, source: np.ndarray, starts: np.ndarray) -> None:
        """Zeros and, at each of ``offsets`` (ascending, from ``position`` on; from the first to the end of the
        last at most the gather buffer), ``lengths[i]`` bytes of ``source`` from ``starts[i]``: many small
        constants placed by a few numpy steps."""
        self.zeros(int(offsets[0]) - self.position)  # (an alignment can be larger than the gather buffer)
        start, end = self.position, int(offsets[-1] + lengths[-1])
        if end - start > self.GATHER:
            raise DmlBridgeError(f"internal error: a batch of small constants spans {end - start} bytes")
        if self._used + end - start > self.GATHER:
            self.flush()
        region = self._array[self._used : self._used + end - start]
        region.fill(0)
        # Byte j of piece i is source[starts[i] + j] and goes to region[offsets[i] - start + j].
        within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        region[np.repeat(offsets - start, lengths) + within] = source[np.repeat(starts, lengths) + within]
        self._used += end - start
        self.position = end

    def zeros(self, count: int) -> None:
        end = self._used + count
        if 0 < count <= len(_ZEROS) and end <= self.GATHER:  # the usual gap or padding: straight into the buffer
            self._buffer[self._used : end] = _ZERO_VIEW[:count]
            self._used = end
            self.position += count
            return
        while count > 0:
            chunk = min(count, len(_ZEROS))
            self.write(_ZERO_VIEW[:chunk])
            count -= chunk

    def copy_external(self, reader: ExternalDataReader, tensor: Any, nbytes: int, count: int) -> int:
        """Copy the first ``count`` bytes of a tensor's external data into the file in the kernel; returns how
        many were copied (0 when hashing, which needs the bytes here, when told not to (the bytes must pass
        through: ``inspect --check`` writes to a null device) or when the kernel cannot copy them)."""
        if not self._kernel_copy:
            return 0
        self.flush()
        done = reader.copy_to(tensor, nbytes, self._file.fileno(), count)
        self.position += done
        return done

    def flush(self) -> None:
        if self._used:
            self._out(self._buffer[: self._used])
            self._used = 0

    def _out(self, view: memoryview) -> None:
        if self._hasher is not None and self._hash is not None:
            with self._hasher.hashing(self._hash, view):  # (returns when both are done: the bytes may be reused)
                self._write_out(view)
            return
        if self._hash is not None:
            self._hash.update(view)
        self._write_out(view)

    def _write_out(self, view: memoryview) -> None:
        while len(view):
            written = self._file.write(view)
            view = view[written:]

    def hexdigest(self) -> str | None:
        return None if self._hash is None else self._hash.hexdigest()




class _HashThread:
    """A thread that feeds SHA-256 (which releases the GIL) the bytes the writer is writing at the same time: the
    digest costs no more time than the write, where it would add to it."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Any, memoryview] | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="dmlbridge-sha256", daemon=True)
        with sigint_deferred():  # (start waits on a Condition)
            self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            digest, view = job
            try:
                digest.update(view)
                self._done.put(None)
            except BaseException as exc:  # noqa: BLE001 (handed to the writer, which raises it)
                self._done.put(exc)

    @contextlib.contextmanager
    def hashing(self, digest: Any, view: memoryview) -> Iterator[None]:
        """Hash ``view`` into ``digest`` in the thread while the block runs; wait for it after (Ctrl-C held back
        meanwhile: the writer must not reuse ``view`` while the thread still reads it)."""
        with sigint_deferred():
            self._jobs.put((digest, view))
            try:
                yield
            finally:
                failure = self._done.get()
        if failure is not None:
            raise failure

    def close(self) -> None:
        with sigint_deferred():
            self._jobs.put(None)
            self._thread.join()


class WrittenImage(NamedTuple):
    """What writing an image found out: its SHA-256 (when ``options.checksum``) and, per position of a
    ``"saturate"`` constant, how many of its values were clamped."""

    sha256: str | None
    clamped: dict[int, int]


def write_image(
    file: BinaryIO, constants: list[ModelConstant], placement: Placement, scan: BytesScan | None,
    reader: ExternalDataReader | None, options: ConvertOptions, bar: Progress, *, kernel_copy: bool = True,
    buffer: int = 0,
) -> WrittenImage:
    """Write buffer ``buffer`` of the image of ``placement`` into ``file`` (unbuffered, empty). ``scan``: the byte
    scan that found ``constants``, if one did. ``kernel_copy=False``: external data passes through this process
    (and its checks) even where the kernel could copy it. The large constants that need converting are jobs
    (whole, or in chunks: dmlbridge.writing.jobs); with ``options.workers`` above 1 that many threads convert
    them, a few ahead of the writer (dmlbridge.system.workers), else the writer does, one at a time."""
    within = placement.buffer_range(buffer)
    size = placement.buffer_sizes[buffer]
    with contextlib.ExitStack() as stack:
        hasher = None
        if options.checksum and options.workers > 1:
            hasher = _HashThread()
            stack.callback(hasher.close)
        writer = ImageWriter(file, options.checksum, kernel_copy, hasher)
        ahead, work = None, ConstantJobs(constants, placement, scan, reader, options)
        items = work.items(within.start, within.stop)
        first_item = next(items, None)
        if first_item is not None:  # (workers=1: the jobs run in this thread, one at a time)
            ahead = stack.enter_context(Prefetch(work.run, itertools.chain([first_item], items),
                                                 workers=options.workers))
        for first, stop, as_is in _runs(constants, placement.pairs, scan, within.start, within.stop):
            if as_is:
                _place_spans(writer, placement.offsets, first, stop, scan, bar)  # type: ignore[arg-type]
            else:
                _write_each(writer, work, placement, first, stop, reader, options, bar, ahead)
        bar.update(size - writer.position)
        writer.zeros(size - writer.position)  # the last constant's padding
        writer.flush()
    if writer.position != size:
        raise DmlBridgeError(f"internal error: wrote {writer.position} bytes but planned {size}")
    return WrittenImage(writer.hexdigest(), writer.clamped)


_LITTLE_ENDIAN = sys.byteorder == "little"
# Typed fields whose entries are the values themselves, with no range to check (tensor_to_array makes them an
# array of the type as they are): array.array of the same width writes the same native bytes.
_TYPED_AS_IS = {
    onnx_type: (field_name, code)
    for onnx_type, field_name, code in (
        (OnnxDataType.FLOAT, "float_data", "f"),
        (OnnxDataType.DOUBLE, "double_data", "d"),
        (OnnxDataType.INT32, "int32_data", "i"),
        (OnnxDataType.INT64, "int64_data", "q"),
        (OnnxDataType.UINT64, "uint64_data", "Q"),
    )
    if array.array(code).itemsize == onnx_type.numpy().itemsize
}


_KERNEL_COPY_MIN = 1 << 20  # external tensors from this size are copied by the kernel (when not hashing)


_AS_IS = operator.attrgetter("as_is")


def _runs(
    constants: list[ModelConstant], pairs: list[Pair], scan: BytesScan | None, start: int, stop: int
) -> Iterator[tuple[int, int, bool]]:
    """The constants from ``start`` to ``stop`` in runs (first, stop, as_is): as_is when each is a span of the
    model's bytes (byte scan) that is its DirectML bytes as stored (Pair.as_is). Such a run is written by a few
    numpy steps whatever its length; the others are written one at a time."""
    if scan is None:
        yield start, stop, False
        return
    # (A constant read from the bytes is at most 64 KiB, and conversion has held it to max_tensor_bytes.)
    as_is = (scan.starts[start:stop] >= 0) & np.fromiter(map(_AS_IS, pairs[start:stop]), dtype=bool,
                                                         count=stop - start)
    edges = np.flatnonzero(as_is[1:] != as_is[:-1]) + 1 + start
    bounds = [start, *edges.tolist(), stop]
    for first, end in itertools.pairwise(bounds):
        if end > first:
            yield first, end, bool(as_is[first - start])


def _place_spans(
    writer: ImageWriter, offsets: list[int | None], first: int, stop: int, scan: BytesScan, bar: Progress
) -> None:
    """Write constants[first:stop], each a span of the model's bytes, with the zeros before and between them."""
    places = np.array(offsets[first:stop], dtype=np.int64)
    starts, lengths = scan.starts[first:stop], scan.lengths[first:stop]
    ends = places + lengths
    done = 0
    while done < len(places):
        # As many as end within one gather buffer from the first.
        more = int(np.searchsorted(ends[done:], places[done] + ImageWriter.GATHER, side="right"))
        batch = slice(done, done + max(more, 1))
        before = writer.position
        writer.place(places[batch], lengths[batch], scan.source, starts[batch])
        bar.update(writer.position - before)
        done = batch.stop


def _write_each(
    writer: ImageWriter, work: ConstantJobs, placement: Placement, first: int, stop: int,
    reader: ExternalDataReader | None, options: ConvertOptions, bar: Progress,
    ahead: Prefetch[Item, tuple[np.ndarray, int, np.ndarray]] | None = None,
) -> None:
    """Write constants[first:stop] one at a time: the stored bytes as they are where they already are the
    DirectML bytes, else decoded, converted by ``prepare`` (or taken from ``ahead``, whose workers did that) and
    written."""
    stored = not checked_path_only()
    constants, scan = work.constants, work.scan
    for position in range(first, stop):
        offset = placement.offsets[position]
        if offset is None:
            continue  # skipped
        constant = constants[position]
        if constant.proto is None:
            constant = scan.with_tensor(position)  # type: ignore[union-attr]
        before = writer.position
        writer.zeros(offset - before)
        entry = placement.entries.at(position, keep=False)
        if ahead is not None and ahead.next_item is not None and ahead.next_item[0] == position:
            clamped = _write_jobs(writer, ahead, work, position, entry, reader, options)
        elif stored and _write_stored(writer, constant, entry, reader, options.max_tensor_bytes):
            clamped = 0
        else:
            prepared = prepared_constant(constant, entry, reader, options.layout, options.max_tensor_bytes)
            writer.write(prepared.data)
            clamped = prepared.clamped
        if entry.conversion == "saturate":
            writer.clamped[position] = clamped
        bar.update(writer.position - before)


def _write_jobs(
    writer: ImageWriter, ahead: Prefetch[Item, tuple[np.ndarray, int, np.ndarray]], work: ConstantJobs,
    position: int,
    entry: PlanEntry, reader: ExternalDataReader | None, options: ConvertOptions,
) -> int:
    """Write what the workers made of the constant at ``position`` (whole or in chunks, then its padding);
    returns how many values were clamped."""
    chunks = work.chunks(position)
    if not chunks:
        data, clamped, buffer = ahead.take((position, -1))
        writer.write(data)
        work.give_back(buffer)
        return clamped
    start, clamped = writer.position, 0
    for chunk in range(chunks):
        try:
            data, count, buffer = ahead.take((position, chunk))
        except DmlBridgeError:
            # The error of the whole tensor (a value's index in it, not in the chunk), else this one.
            prepared_constant(work.constant(position), entry, reader, options.layout, options.max_tensor_bytes)
            raise
        writer.write(data)
        work.give_back(buffer)
        clamped += count
    work.done(position)
    assert entry.total_tensor_size_in_bytes is not None
    writer.zeros(entry.total_tensor_size_in_bytes - (writer.position - start))
    return clamped


def _stored_bytes(constant: ModelConstant) -> bytes | None:
    """What a TensorProto stores, as bytes: its raw_data, or the entries of a typed field that are the values
    themselves (FLOAT float_data, ...; through array.array, on little-endian hosts). None for any other storage,
    or when the count no longer matches what was found (the usual path checks it again)."""
    storage = constant.storage
    if storage == "raw":
        data = constant.proto.raw_data
    elif storage == "typed" and _LITTLE_ENDIAN and constant.onnx_type in _TYPED_AS_IS:
        field_name, code = _TYPED_AS_IS[constant.onnx_type]
        entries = getattr(constant.proto, field_name)
        if code in "fd":  # the stored bits: a float passed through Python would quiet a signalling NaN
            data = float_field(constant.proto, field_name).tobytes()
        else:
            data = array.array(code, entries[:]).tobytes()  # a slice: a list, fast to read
    else:
        return None
    return data if len(data) == constant.packed_nbytes else None


def _write_stored(
    writer: ImageWriter,
    constant: ModelConstant,
    entry: PlanEntry,
    reader: ExternalDataReader | None,
    max_tensor_bytes: int,
) -> bool:
    """Write a tensor whose stored bytes are already its DirectML bytes, without decoding and preparing it;
    False (nothing written) for every other constant.

    That is a "native" TensorProto (the DML type is its own type; a packed layout: whole-model entries have no
    strides): its raw_data or external bytes are little-endian elements in C order, exactly what ``prepare``
    writes, followed by the zero padding up to TotalTensorSizeInBytes. For INT4/UINT4 they are nibbles in
    DirectML's order; only the spare high nibble of an odd count must be zeroed. A typed field (float_data, ...)
    is decoded as ``tensor_to_array`` does (with its checks) and written as is; the fields whose entries are the
    values themselves (float_data of FLOAT, int64_data of INT64, ...) go through ``array.array``, which is faster
    for small tensors and writes the same bytes. Every check ``tensor_to_array`` makes on these bytes was made when
    the constant was found (exact byte and entry counts) or is made here by the same code (the external data
    reader, the typed-field decoder).
    """
    if constant.kind not in STORED_KINDS or entry.conversion != "native":
        return False
    if constant.nbytes > max_tensor_bytes:
        return False  # the usual path raises the usual error
    assert entry.dml_type is not None and entry.total_tensor_size_in_bytes is not None
    tensor, storage, packed = constant.proto, constant.storage, constant.packed_nbytes
    padding = entry.total_tensor_size_in_bytes - packed
    odd_nibble = entry.dml_type in FOUR_BIT and constant.size % 2 == 1
    data: Any
    if storage == "typed":
        if entry.dml_type in FOUR_BIT or not _LITTLE_ENDIAN:
            return False  # packed bytes in int32_data, or a big-endian host: the usual path
        if constant.onnx_type in _TYPED_AS_IS:  # entries that are the values themselves: no numpy array
            data = _stored_bytes(constant)
            if data is None:
                return False
        else:
            data = constant.to_array(reader=reader, max_tensor_bytes=max_tensor_bytes)
            if not data.flags.c_contiguous or data.nbytes != packed:
                return False
    elif storage == "raw":
        data = _stored_bytes(constant)
        if data is None:
            return False
    else:
        if reader is None:
            return False  # the usual path names the problem
        whole = packed - odd_nibble  # the bytes that are copied unchanged
        copied = writer.copy_external(reader, tensor, packed, whole) if whole >= _KERNEL_COPY_MIN else 0
        data = reader.read(tensor, packed)[copied:] if copied < packed else b""
    if odd_nibble:
        writer.write(data[:-1])
        writer.write(bytes((data[-1] & 0x0F,)))  # the spare high nibble is zero
    else:
        writer.write(data)
    writer.zeros(padding)
    return True


