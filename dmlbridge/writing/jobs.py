"""The conversion of a buffer's large constants as jobs for worker threads: whole constants, or chunks of one.

A constant of 1 MiB or more whose bytes must be computed (widened, narrowed, packed, densified) is a job; one of
32 MiB or more is cut into chunks of about 16 MiB of output, so that one large tensor (an LLM's embedding, say)
uses every core and never needs its whole output in memory. Chunks work because every conversion of a whole
model's constant is element by element into a packed layout: the bytes of elements ``[a, b)`` converted alone
(``b - a`` even, for 4-bit types) are bytes ``[a, b)`` of the whole tensor's, scaled by the element size; a chunk
of external data reads only its own bytes (dmlbridge.model.slices). Each job is charged what it allocates at its peak
(:meth:`ConstantJobs.cost`), which is what bounds memory (dmlbridge.system.workers); a sparse tensor of a native type is
densified straight into the output buffer. A chunk that fails is converted again whole, by the writer, so that
the error is the one the whole tensor gives (the index of a value out of range is the index in the tensor).

    >>> import ml_dtypes, numpy as np
    >>> from onnx import helper, numpy_helper
    >>> from dmlbridge.model.constants import find_constants
    >>> from dmlbridge.placement.options import ConvertOptions, PlanOptions
    >>> from dmlbridge.placement.entries import place_constants
    >>> values = np.arange(6).astype(ml_dtypes.bfloat16)  # widened to FLOAT32
    >>> model = helper.make_model(helper.make_graph([], "g", [], [], [numpy_helper.from_array(values, "b")]))
    >>> constants = find_constants(model)
    >>> options = ConvertOptions.check(PlanOptions.check(), progress=False, strict=False, external_data_root=None,
    ...                                checksum=False, max_tensor_bytes=1 << 20, fsync=False, workers=2)
    >>> work = ConstantJobs(constants, place_constants(constants, options.layout), None, None, options)
    >>> [item for item, cost, shared in work.items(0, 1, min_bytes=0, chunk_bytes=8)]
    [(0, 0), (0, 1), (0, 2)]
    >>> data, clamped, _ = work.run((0, 1))
    >>> data.view("<f4").tolist(), clamped
    ([2.0, 3.0], 0)
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

import numpy as np

from dmlbridge.errors import DmlBridgeError, TensorTooLargeError
from dmlbridge.model.byte_scan import SCANNED_MAX_BYTES, BytesScan
from dmlbridge.model.constants import ModelConstant
from dmlbridge.model.onnx_file import checked_path_only
from dmlbridge.model.slices import CHUNK_BYTES, ConstantSlices, decode_bytes, sparse_direct, step_of
from dmlbridge.onnx.external_data import ExternalDataReader
from dmlbridge.placement.entries import Placement, PlanEntry
from dmlbridge.placement.options import ConvertOptions, PlanOptions
from dmlbridge.system.aligned import empty_aligned
from dmlbridge.system.workers import POOL_MIN_BYTES
from dmlbridge.tensor.encode import PreparedTensor, prepare, prepare_into
from dmlbridge.types.data_types import OnnxDataType

__all__ = ["CHUNK_BYTES", "SPARE_BYTES", "STORED_KINDS", "ConstantJobs", "Item", "prepared_constant"]

SPARE_BYTES = 32 << 20
"""The output buffers kept for reuse once written (their pages warm): beyond the jobs' budget, so kept small."""
SLACK = 2 << 20
"""What every job is charged beyond its arrays: the blocks of the block-wise conversions (widening, packing,
densifying) and numpy's own."""
STORED_KINDS = ("initializer", "value")  # the constants whose stored bytes may be written as they are
_RESHAPED = ("channel", "spatial", "rank")  # layouts that only add 1s (broadcast ones repeat by strides of 0)

Item = tuple[int, int]
"""A job: (position of the constant, chunk index); chunk -1 is the whole constant."""
WHOLE = -1


def prepared_constant(
    constant: ModelConstant, entry: PlanEntry, reader: ExternalDataReader | None, options: PlanOptions,
    max_tensor_bytes: int, out: np.ndarray | None = None,
) -> PreparedTensor:
    """The constant decoded and converted by ``prepare`` (checked against the plan): what is written for it;
    into ``out`` (``prepare_into``) when given, a buffer large enough."""
    try:
        values = constant.to_array(reader=reader, max_tensor_bytes=max_tensor_bytes)
        if entry.padding in _RESHAPED:  # the same bytes with 1s where its consumers want them ([C] as [1, C, 1, 1])
            assert entry.sizes is not None
            values = values.reshape(entry.sizes)
        if out is None:
            prepared = prepare(values, target=options.target, min_dims=options.min_dims, flags=options.flags,
                               guaranteed_base_offset_alignment=options.alignment)
        else:
            prepared = prepare_into(out, 0, values, target=options.target, min_dims=options.min_dims,
                                    flags=options.flags, guaranteed_base_offset_alignment=options.alignment)
    except DmlBridgeError as exc:
        # Name the constant: messages from the value checks (ValueRangeError, ...) do not know it.
        raise type(exc)(f"constant {constant.key!r} ({constant.origin}): {exc}") from exc
    except MemoryError:
        raise TensorTooLargeError(
            f"constant {constant.key!r} ({constant.origin}) needs {constant.nbytes} bytes "
            f"({constant.onnx_type.name} {list(constant.shape)}) and the allocation failed; free memory, or set "
            "max_tensor_bytes (--max-tensor-bytes) below this size to refuse such constants up front"
        ) from None
    planned = entry.buffer_desc
    if entry.padding == "broadcast" and planned is not None:
        # Its desc repeats elements with strides of 0 over the very bytes of its ONNX shape, whose desc it differs
        # from in its sizes and strides alone.
        planned = planned._replace(sizes=prepared.sizes, strides=prepared.strides)
    if prepared.buffer_desc != planned:
        raise DmlBridgeError(f"internal error: constant {constant.key!r} was planned as {entry} but became {prepared}")
    return prepared


def _convert_bytes(constant: ModelConstant, entry: PlanEntry, count: int) -> int:
    """The temporaries converting ``count`` of the constant's elements makes beyond its output: "saturate" clips
    a copy and counts through masks, BOOL compares through a mask; the others work in place or in small blocks."""
    per = constant.nbytes // max(1, constant.size)
    if entry.conversion == "saturate":
        return count * (per + 3)
    if constant.onnx_type is OnnxDataType.BOOL:
        return count
    return 0


class ConstantJobs:
    """The jobs of one conversion's constants: :meth:`items` lists them (for ``workers.Prefetch``), :meth:`run`
    does one (in a worker thread: it only reads), giving the bytes to write and the values clamped."""

    def __init__(self, constants: list[ModelConstant], placement: Placement, scan: BytesScan | None,
                 reader: ExternalDataReader | None, options: ConvertOptions) -> None:
        self.constants = constants
        self._placement = placement
        self.scan = scan
        self._reader = reader
        self._options = options
        self._slices: dict[int, ConstantSlices] = {}  # the constants cut into chunks
        self._steps: dict[int, int] = {}  # elements per chunk
        self._spare: list[np.ndarray] = []  # output buffers written and given back: reused, their pages warm
        self._lock = threading.Lock()

    def constant(self, position: int) -> ModelConstant:
        constant = self.constants[position]
        return constant if constant.proto is not None or self.scan is None else self.scan.with_tensor(position)

    def items(self, start: int, stop: int, *, min_bytes: int | None = None,
              chunk_bytes: int | None = None) -> Iterator[tuple[Item, int, tuple[int, int] | None]]:
        """(item, cost, shared) of the constants from ``start`` to ``stop`` worth a job: written, at least
        ``min_bytes`` (POOL_MIN_BYTES), and converted (not written as stored). The cost is the most the job
        allocates (see :meth:`cost`). A constant whose values or output take ``2 * chunk_bytes`` and more is
        listed as chunks; ``shared`` is then (position, what its chunks share: ConstantSlices.held_bytes), else
        None. Nothing is decoded here."""
        least = POOL_MIN_BYTES if min_bytes is None else min_bytes  # (read here: tests lower them)
        chunk_bytes = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
        stored = not checked_path_only()
        placement = self._placement
        positions: Iterable[int] = range(start, stop)
        # The constants the byte scan read are small (at most 8 x its data limit decoded): skipped all at once.
        if self.scan is not None and least > 8 * SCANNED_MAX_BYTES:
            positions = (np.flatnonzero(self.scan.starts[start:stop] < 0) + start).tolist()
        for position in positions:
            constant = self.constants[position]
            if constant.nbytes < least or placement.offsets[position] is None:
                continue
            entry = placement.entries.at(position)
            if stored and constant.kind in STORED_KINDS and entry.conversion == "native":
                continue  # copied as stored, by the writer
            constant = self.constant(position)
            total = entry.total_tensor_size_in_bytes or 0
            larger = max(constant.nbytes, total)
            if larger < 2 * chunk_bytes or constant.size < 4:
                yield (position, WHOLE), self.cost(constant, entry), None
                continue
            slices = ConstantSlices(constant, self._reader, self._options.max_tensor_bytes)
            step = step_of(constant, larger, chunk_bytes)
            self._slices[position], self._steps[position] = slices, step
            shared = (position, slices.held_bytes())
            for chunk, begin in enumerate(range(0, constant.size, step)):
                yield (position, chunk), self.cost(constant, entry, slices, min(step, constant.size - begin)), shared

    def cost(self, constant: ModelConstant, entry: PlanEntry, slices: ConstantSlices | None = None,
             count: int | None = None) -> int:
        """The most a job allocates: the whole constant's (its values decoded, dense values of a sparse one
        except where they go straight into the output, its output and conversion temporaries), or a chunk's of
        ``count`` elements (what its values take beyond ``slices``' held ones, its output and temporaries)."""
        assert entry.dml_type is not None and entry.total_tensor_size_in_bytes is not None
        direct = sparse_direct(constant, entry.conversion, entry.dml_type.bitwidth)
        if slices is None or count is None:
            values = decode_bytes(constant) - (constant.nbytes if direct else 0)
            return values + entry.total_tensor_size_in_bytes + _convert_bytes(constant, entry, constant.size) + SLACK
        values = 0 if direct else slices.chunk_bytes(count)
        output = (count * (64 if entry.conversion == "emulate" else entry.dml_type.bitwidth) + 7) // 8 + 4
        return values + output + _convert_bytes(constant, entry, count) + SLACK

    def chunks(self, position: int) -> int:
        """How many chunks the constant at ``position`` was cut into (0: it was not)."""
        step = self._steps.get(position)
        return 0 if step is None else -(-self.constants[position].size // step)

    def _buffer(self, size: int) -> np.ndarray:
        """An output buffer of at least ``size`` bytes: the smallest spare one that is large enough, else a new
        one (fresh memory costs page faults, and on a virtual machine much more)."""
        with self._lock:
            fits = [b for b in self._spare if b.shape[0] >= size]
            if fits:
                chosen = min(fits, key=len)
                self._spare = [b for b in self._spare if b is not chosen]
                return chosen
        return empty_aligned(size)

    def give_back(self, buffer: np.ndarray) -> None:
        """Return an output buffer once its bytes are written (at most SPARE_BYTES of them are kept)."""
        with self._lock:
            self._spare.append(buffer)
            while sum(b.shape[0] for b in self._spare) > SPARE_BYTES:
                smallest = min(self._spare, key=len)
                self._spare = [b for b in self._spare if b is not smallest]  # (by identity: arrays compare)

    def run(self, item: Item) -> tuple[np.ndarray, int, np.ndarray]:
        """Job ``item``: (the bytes to write, how many values "saturate" clamped, the buffer that holds them, for
        :meth:`give_back` once written)."""
        position, chunk = item
        entry = self._placement.entries.at(position)
        layout = self._options.layout
        assert entry.total_tensor_size_in_bytes is not None and entry.dml_type is not None
        constant = self.constant(position)
        direct = sparse_direct(constant, entry.conversion, entry.dml_type.bitwidth)
        if chunk == WHOLE:
            buffer = self._buffer(entry.total_tensor_size_in_bytes)
            if direct:  # the dense values are the bytes: densified into the output, then its padding
                data = buffer[: entry.total_tensor_size_in_bytes]
                used = constant.nbytes
                data[used:] = 0
                try:
                    constant.densify_into(_elements(data[:used], constant), reader=self._reader,
                                          max_tensor_bytes=self._options.max_tensor_bytes)
                except DmlBridgeError as exc:
                    raise type(exc)(f"constant {constant.key!r} ({constant.origin}): {exc}") from exc
                return data, 0, buffer
            prepared = prepared_constant(constant, entry, self._reader, layout, self._options.max_tensor_bytes, buffer)
            return prepared.data, prepared.clamped, buffer
        step, slices = self._steps[position], self._slices[position]
        begin, end = chunk * step, min((chunk + 1) * step, constant.size)
        bits = 64 if entry.conversion == "emulate" else entry.dml_type.bitwidth  # (emulation: 8-byte elements)
        used = ((end - begin) * bits + 7) // 8
        buffer = self._buffer(used + 4)  # (prepare_into pads to a multiple of 4)
        if direct:
            slices.values(begin, end, _elements(buffer[:used], constant))
            return buffer[:used], 0, buffer
        values = slices.values(begin, end)
        prepared = prepare_into(buffer, 0, values, target=layout.target, min_dims=1, flags=layout.flags,
                                guaranteed_base_offset_alignment=layout.alignment)
        if prepared.dml_type is not entry.dml_type or prepared.conversion != entry.conversion:
            raise DmlBridgeError(f"internal error: a chunk of {entry.key!r} became {prepared}")
        return prepared.data[:used], prepared.clamped, buffer

    def done(self, position: int) -> None:
        """Forget the values of a constant written in chunks."""
        slices = self._slices.pop(position, None)
        if slices is not None:
            slices.release()
        self._steps.pop(position, None)


def _elements(data: np.ndarray, constant: ModelConstant) -> np.ndarray:
    """Output bytes seen as the constant's elements, little-endian: a native type's DirectML bytes are its
    values."""
    return data.view(constant.onnx_type.numpy().newbyteorder("<"))
