"""Verification: whether a written plan is exactly a model's constants, one message per difference.

A plan and a model agree when they hold the same keys, each with the same ONNX type and shape, each converted or
skipped alike, each entry's bytes in its buffer file equal to what a fresh conversion of the model's value gives,
and the values read back from the buffer files equal to the model's bit for bit (NaN payloads and signalling NaNs
included: every conversion but "lossy" and "saturate" reads back as the model's bits, and those as the model's
values converted). The model is read one constant at a time, a large one a chunk at a time (as conversion
converts it); the buffer files are read once, front to back (:mod:`dmlbridge.plan.buffer_pass`), and their
fingerprint and, when asked, their SHA-256 come from the same reads. The chunks a job compares (constants of 1 MiB
and more: in worker threads with ``workers`` above 1) are charged what they allocate to the budget conversion
keeps (dmlbridge.system.workers), so memory stays within it whatever the model's size.

    >>> import tempfile, os, numpy as np, dmlbridge
    >>> from onnx import helper, numpy_helper
    >>> graph = helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.ones(2, np.float32), "w")])
    >>> model = helper.make_model(graph)
    >>> plan = dmlbridge.convert_model(model, os.path.join(tempfile.mkdtemp(), "w"), progress=False)
    >>> find_mismatches(plan, model)
    []
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from dmlbridge.errors import DmlBridgeError, ExternalDataError, InvalidArgumentError, ManifestError, counted
from dmlbridge.manifest.format import BufferFile
from dmlbridge.manifest.sections import OPERATOR_VERSION
from dmlbridge.model.constants import ModelConstant, find_constants
from dmlbridge.model.consumers import Consumer, recorded
from dmlbridge.model.onnx_file import checked_path_only, external_data_reader, need_reader, read_model
from dmlbridge.model.shapes import GivenShapes
from dmlbridge.model.slices import ConstantSlices, decode_bytes, step_of
from dmlbridge.onnx.external_data import ExternalDataReader
from dmlbridge.placement.cpu_read import CPU_READ_TARGET, cpu_read_keys
from dmlbridge.placement.entries import Pair, PlanEntry, place_constants
from dmlbridge.placement.options import (
    DEFAULT_MAX_CONSTANTS,
    DEFAULT_MAX_NODES,
    DEFAULT_MAX_TENSOR_BYTES,
    PlanOptions,
    check_max_constants,
    check_max_nodes,
)
from dmlbridge.placement.selection import Selection
from dmlbridge.plan.bits import differing_bits, same_bits
from dmlbridge.plan.buffer_pass import BufferReads
from dmlbridge.plan.chunk_compare import (
    BLOCK,
    READBACK_BYTES,
    Chunk,
    ChunkBytes,
    Found,
    StoredBytes,
    compare_chunk,
    element_bits,
)
from dmlbridge.plan.fingerprint import FingerprintStream, fingerprint_problem
from dmlbridge.plan.open_buffers import OpenBuffers
from dmlbridge.plan.selected import select_constants
from dmlbridge.quantized.records import QuantizedWeight, quantized_views, spec_part_keys
from dmlbridge.system.aligned import empty_aligned
from dmlbridge.system.progress import Progress
from dmlbridge.system.workers import POOL_MIN_BYTES, Prefetch, check_workers
from dmlbridge.tensor.encode import prepare
from dmlbridge.types.float_bits import cast
from dmlbridge.types.target import Target

CHUNK_BYTES = 8 << 20
"""About this many bytes (of values or of the entry, the larger) per chunk compared; constants of twice this size
and more are cut. Half of conversion's chunk: each job is charged about five times its chunk (workers.Prefetch),
and with 16 MiB chunks one job alone filled the budget, so that a second worker never ran beside the first."""
_SPARE_BYTES = 32 << 20
"""The buffers read into that are kept for reuse (beyond the jobs' budget, so kept small)."""

__all__ = ["WrittenPlan", "find_mismatches"]


class WrittenPlan(Protocol):
    """What verification needs of an UploadPlan whose .bin was written."""

    @property
    def entries(self) -> Mapping[str, PlanEntry]: ...
    @property
    def target(self) -> Target: ...
    @property
    def alignment(self) -> int: ...
    @property
    def min_dims(self) -> int: ...
    @property
    def total_size(self) -> int: ...
    @property
    def buffers(self) -> tuple[BufferFile, ...]: ...
    @property
    def source_sha256(self) -> str | None: ...
    @property
    def source_external(self) -> tuple[tuple[str, int], ...]: ...
    @property
    def selection(self) -> Selection: ...
    @property
    def shapes(self) -> GivenShapes: ...
    @property
    def upload(self) -> str: ...
    @property
    def uploaded_buffers(self) -> int | None: ...
    @property
    def load_sizes(self) -> tuple[tuple[str, int], ...]: ...
    @property
    def quantized_records(self) -> dict[str, QuantizedWeight]: ...
    @property
    def format_version(self) -> int: ...
    def _open_files(self) -> OpenBuffers: ...
    def read(self, key: str) -> np.ndarray: ...
    def array(self, key: str) -> np.ndarray: ...


def find_mismatches(
    plan: WrittenPlan,
    model: Any,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    external_data_root: str | os.PathLike[str] | None = None,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    limit: int = 1000,
    sha256: bool = False,
    progress: bool | None = False,
    workers: int | None = 1,
    max_constants: int | None = DEFAULT_MAX_CONSTANTS,
    max_nodes: int | None = DEFAULT_MAX_NODES,
) -> list[str]:
    """Where a written plan and a model's constants differ, one message each (empty when they agree; the
    comparison's stop at ``limit``); the first ones say so when a buffer file no longer matches its size or
    fingerprint (or, with ``sha256``, the SHA-256 its manifest records: ManifestError when it records none).
    ``progress``: a bar of the bytes compared on stderr (None: when stderr is a terminal). ``workers``: threads
    comparing the large constants (None: every CPU this process may use). Each byte of the buffer files is read
    once (an entry whose size or layout is not a fresh conversion's, in a plan that was tampered with, is read
    again, whole).

    The engine of :meth:`UploadPlan.verify` and ``dmlbridge verify``. The plan's layout is compared with the
    model's by the rules of the plan's ``format_version`` (a manifest an earlier dmlbridge wrote follows its own:
    format 4 padded a 1-D constant on the channel axis only when ``min_dims`` pads; see
    :mod:`dmlbridge.manifest.format`).
    """
    workers = check_workers(workers)
    if not plan.buffers:
        raise InvalidArgumentError("this plan was not written (plan_model); there is no buffer file to verify")
    with read_model(model, base_dir, max_constants=check_max_constants(max_constants),
                    max_nodes=check_max_nodes(max_nodes)) as loaded:
        reader = external_data_reader(loaded, external_data_root)
        constants, _, consumers, specs, _ = select_constants(
            loaded.proto, find_constants(loaded.proto), plan.target, plan.selection, None, plan.shapes)
        if plan.load_sizes:  # (a plan loaded at other sizes: the model's consumers at them too)
            sizes = dict(plan.load_sizes)
            consumers = {key: tuple(c.with_dim_params(sizes) for c in read_by) for key, read_by in consumers.items()}
        need_reader(constants, reader)
        compared = sum(entry.total_tensor_size_in_bytes or 0 for entry in plan.entries.values())
        bar = Progress(progress, compared, "verify")
        try:
            cpu_read = cpu_read_keys(consumers, spec_part_keys(specs)) if plan.upload == "bound" else frozenset()
            problems = _find(plan, constants, consumers, reader, max_tensor_bytes, limit, sha256, bar, workers,
                             cpu_read)
        finally:
            bar.close()
        fresh = quantized_views(specs, plan.entries, plan.min_dims, plan.target, plan.alignment)
        if plan.format_version < OPERATOR_VERSION:  # (its records did not name their operator)
            fresh = {key: replace(record, operator=None) for key, record in fresh.items()}
        for key in sorted(set(fresh) | set(plan.quantized_records)):
            mine, theirs = plan.quantized_records.get(key), fresh.get(key)
            if mine is None or theirs is None or mine.to_json() != theirs.to_json():
                how = "missing in the plan" if mine is None else "not in the model" if theirs is None else "differs"
                problems.append(f"quantized weight {key!r}: the plan's record {how} (a fresh view of the model's "
                                "node gives another)")
        source = plan.source_sha256
        if source is not None and loaded.sha256 is not None and source != loaded.sha256:
            problems.insert(0, f"the plan was made from another model file (SHA-256 {source[:16]}..., this one's "
                               f"{loaded.sha256[:16]}...)")
        for file, size in plan.source_external:
            seen = None if reader is None else reader.files.get(file)
            if seen is not None and seen != size:
                problems.insert(0, f"the external data file {file!r} holds {counted(seen, 'byte')}; the plan was "
                                   f"made from one of {size}")
        return problems


def _find(
    plan: WrittenPlan, constants: list[ModelConstant], consumers: dict[str, tuple[Consumer, ...]],
    reader: ExternalDataReader | None, max_tensor_bytes: int, limit: int, sha256: bool, bar: Progress,
    workers: int = 1, cpu_read: frozenset[str] = frozenset(),
) -> list[str]:
    files = plan._open_files()
    front: list[list[str]] = []  # per buffer file: its size, fingerprint and SHA-256 problems
    for index, buffer in enumerate(plan.buffers):
        size = files.size(index)
        front.append([] if size == buffer.size else [
            f"the buffer file {buffer.path!r} holds {counted(size, 'byte')} but the manifest says {buffer.size}; the "
            "two files do not belong together (or one was cut short)"])
        if sha256 and buffer.sha256 is None:
            raise ManifestError("verify=True, but the manifest records no SHA-256 of its buffer files; convert with "
                                "checksum=True (--checksum)")
    keys = {c.key for c in constants}
    problems = [f"{key!r} is in the plan but not in the model" for key in plan.entries if key not in keys]
    # A fresh plan of every constant at once (flags change no size: each entry's own are used below), by the
    # layout rules of the plan's format version, with the consumers as that version records them.
    version = plan.format_version
    fresh = place_constants(constants, PlanOptions(plan.target, plan.alignment, plan.min_dims, 0), consumers,
                           version, cpu_read).pairs  # (CPU-read ones keep their ONNX type: upload="bound")
    found: dict[int, str | None] = {}  # model index -> what differs (None: nothing)
    streamed: list[tuple[int, PlanEntry, list[Chunk], ConstantSlices | None]] = []
    for index, constant in enumerate(constants):
        entry = plan.entries.get(constant.key)
        read_by = recorded(consumers.get(constant.key, ()), version)
        if entry is None:
            found[index] = f"{constant.key!r} ({constant.origin}) is in the model but not in the plan"
            continue
        facts = tuple(consumer.facts() for consumer in entry.consumers)
        if facts != read_by or entry.padding != fresh[index].fields["padding"]:
            found[index] = (f"{constant.key!r}: the plan has consumers {_consumer_list(facts)} "
                            f"({entry.padding} padding), the model {_consumer_list(read_by)} "
                            f"({fresh[index].fields['padding']} padding)")
            continue
        problem = _differs_before_bytes(constant, entry, fresh[index].total >= 0)
        if problem is not None or entry.skipped is not None:
            found[index] = None if problem is None else f"{constant.key!r}: {problem}"
            continue
        chunks, slices = _chunks(index, constant, entry, fresh[index].total, reader, max_tensor_bytes)
        streamed.append((index, entry, chunks, slices))
    streamed.sort(key=lambda task: (task[1].buffer or 0, task[1].offset or 0))
    pieces: list[list[tuple[int, int, bool]]] = [[] for _ in plan.buffers]
    for task in streamed:
        for chunk in task[2]:
            placed = pieces[chunk.buffer]
            if placed and placed[-1][1] > chunk.start:  # overlapping entries (a plan that was tampered with)
                task[2].clear()  # compared whole, by reading the entry again
                break
        pieces_of = pieces[task[1].buffer or 0]
        pieces_of += [(c.start, c.stop, c.by_job) for c in task[2]]
    ranges = _entry_ranges(plan)
    streams = [BufferReads(files.fd(index), buffer.path, buffer.size, pieces[index], sha256=sha256 and not front[index],
                           fingerprint=None if front[index] or buffer.fingerprint is None else FingerprintStream(
                               buffer.size, *ranges[index]))
               for index, buffer in enumerate(plan.buffers)]
    slices_of = {task[0]: task[3] for task in streamed}
    # The native constants in external data that jobs compare: their stored bytes are their DirectML bytes (as
    # conversion writes them), compared as they are, a block at a time (chunk_compare).
    stored_of = {} if reader is None or checked_path_only() else {
        index: StoredBytes(reader, constants[index]) for index, entry, chunks, _ in streamed
        if chunks and chunks[0].by_job and _as_stored(constants[index], entry, fresh[index])}

    spare = _Spare()

    def compare(chunk: Chunk) -> tuple[Found, ChunkBytes]:
        constant = constants[chunk.index]
        size = chunk.stop - chunk.start
        reads = streams[chunk.buffer]
        # (Not hashed: the bytes read a block at a time into the same few pages, the sampled ones kept.)
        room = size if reads.hashes else min(size, BLOCK)
        out = spare.take(room)
        piece = ChunkBytes(reads, chunk.start, size, empty_aligned(room) if out is None else out, reads.hashes)
        stored = -(-constant.packed_nbytes * (chunk.end - chunk.begin) // max(1, constant.size)) + 1
        buffer = spare.take(stored) if slices_of[chunk.index] is not None else None
        if buffer is None and slices_of[chunk.index] is not None:
            buffer = empty_aligned(stored)
        try:
            return compare_chunk(_target_of(plan, plan.entries[constant.key]), plan.alignment, constant,
                                 plan.entries[constant.key], chunk, piece,
                                 slices_of[chunk.index], reader, max_tensor_bytes, buffer,
                                 stored_of.get(chunk.index)), piece
        finally:
            spare.give(buffer)

    jobs = ((chunk, _cost(constants[task[0]], task[1], chunk, task[3]), _shared(task[0], task[3]))
            for task in streamed for chunk in task[2] if chunk.by_job)
    finished = 0  # the buffers before this one are read to their end
    with _closed_after(stored_of), Prefetch(compare, jobs, workers=workers) as ahead:
        for index, entry, chunks, slices in streamed:
            key = constants[index].key
            if not chunks:  # (compared whole: see above)
                problem = _compare(plan, constants[index], entry, reader, max_tensor_bytes)
                found[index] = None if problem is None else f"{key!r}: {problem}"
                bar.update(entry.total_tensor_size_in_bytes or 0)
                continue
            while finished < chunks[0].buffer:
                _finish(plan, finished, streams[finished], front)
                finished += 1
            results = []
            for chunk in chunks:
                reads = streams[chunk.buffer]
                if chunk.by_job:
                    result, piece = ahead.take(chunk)
                    piece.hand_back(reads)
                    spare.give(piece.buffer)
                else:
                    result = compare_chunk(_target_of(plan, entry), plan.alignment, constants[index], entry, chunk,
                                           ChunkBytes.given(reads.read(chunk.start, chunk.stop)), slices, reader,
                                           max_tensor_bytes)
                results.append(result)
            if slices is not None:
                slices.release()
            if index in stored_of:
                stored_of.pop(index).close()
            problem = _merge(plan, constants[index], entry, results, reader, max_tensor_bytes)
            found[index] = None if problem is None else f"{key!r}: {problem}"
            bar.update(entry.total_tensor_size_in_bytes or 0)
    for index in range(finished, len(streams)):
        _finish(plan, index, streams[index], front)
    problems = [message for per in front for message in per] + problems
    problems += [message for _, message in sorted(found.items()) if message is not None]
    return problems[:limit]


@contextlib.contextmanager
def _closed_after(stored: dict[int, StoredBytes]) -> Iterator[None]:
    """The files of ``stored`` closed after the block (once the jobs that read them are done)."""
    try:
        yield
    finally:
        for data in stored.values():
            data.close()


def _finish(plan: WrittenPlan, index: int, reads: BufferReads, front: list[list[str]]) -> None:
    """Read what is left of buffer ``index`` for its digests, and add its fingerprint or SHA-256 problem."""
    buffer = plan.buffers[index]
    digest, fingerprint = reads.finish()
    if front[index]:
        return
    problem = fingerprint_problem(-1, buffer.path, buffer.fingerprint, buffer.size, [], [], fingerprint or "")
    if problem is not None:
        front[index].append(problem)
    elif digest is not None and digest != buffer.sha256:
        front[index].append(f"the buffer file {buffer.path!r} has SHA-256 {digest}, but the manifest records "
                            f"{buffer.sha256}; the file is corrupt or belongs to another manifest")


def _entry_ranges(plan: WrittenPlan) -> list[tuple[list[int], list[int]]]:
    """Per buffer, the offsets and sizes of its converted entries (what its fingerprint samples)."""
    ranges: list[tuple[list[int], list[int]]] = [([], []) for _ in plan.buffers]
    for entry in plan.entries.values():
        if entry.skipped is None and entry.offset is not None:
            offsets, totals = ranges[entry.buffer or 0]
            offsets.append(entry.offset)
            totals.append(entry.total_tensor_size_in_bytes or 0)
    return ranges


def _differs_before_bytes(constant: ModelConstant, entry: PlanEntry, converts: bool) -> str | None:
    """What differs between a constant and its entry before any byte is read (None: nothing yet); ``converts``:
    whether a fresh conversion converts the constant (or skips it)."""
    if constant.onnx_type is not entry.onnx_type or constant.shape != entry.shape:
        return (f"the model has {constant.onnx_type.name} {list(constant.shape)}, the plan "
                f"{entry.onnx_type.name} {list(entry.shape)}")
    if converts != (entry.skipped is None):
        return f"skipped in {'the plan' if entry.skipped else 'a fresh conversion'} but not in the other"
    return None


def _chunks(index: int, constant: ModelConstant, entry: PlanEntry, fresh_total: int,
            reader: ExternalDataReader | None, max_tensor_bytes: int) -> tuple[list[Chunk], ConstantSlices | None]:
    """The chunks an entry is compared in (none: compared whole, by reading the entry again: its size is not a
    fresh conversion's, or it is not packed), and the slices of a constant cut into more than one."""
    assert entry.offset is not None and entry.total_tensor_size_in_bytes is not None
    total = entry.total_tensor_size_in_bytes
    if fresh_total != total or (entry.strides is not None and entry.conversion != "emulate"
                                and entry.padding != "broadcast"):
        return [], None  # (a broadcast entry's strides of 0 repeat its packed bytes: compared as those)
    bits, buffer, offset, size = element_bits(entry), entry.buffer or 0, entry.offset, constant.size
    by_job = constant.nbytes >= POOL_MIN_BYTES
    larger = max(constant.nbytes, total)
    if larger < 2 * CHUNK_BYTES or size < 4:  # (external data: read by range all the same, into a reused buffer)
        external = constant.kind in ("initializer", "value") and constant.storage == "external" and reader is not None
        slices = ConstantSlices(constant, reader, max_tensor_bytes) if external else None
        return [Chunk(index, buffer, 0, size, offset, offset + total, by_job)], slices
    step = step_of(constant, larger, CHUNK_BYTES)
    bounds = [*range(0, size, step), size]
    chunks = [Chunk(index, buffer, begin, end, offset + begin * bits // 8,
                     offset + (total if end == size else end * bits // 8), by_job)
              for begin, end in itertools.pairwise(bounds)]
    return chunks, ConstantSlices(constant, reader, max_tensor_bytes)


def _as_stored(constant: ModelConstant, entry: PlanEntry, fresh: Pair) -> bool:
    """Whether an entry's bytes are its constant's stored bytes in external data: a native conversion, the
    plan's and a fresh one's, of one DML type (4-bit types: but the spare nibble of an odd count)."""
    return (constant.kind in ("initializer", "value") and constant.storage == "external"
            and entry.conversion == fresh.conversion == "native" and entry.dml_type is fresh.dml_type)


def _cost(constant: ModelConstant, entry: PlanEntry, chunk: Chunk, slices: ConstantSlices | None) -> int:
    """The most comparing a chunk allocates: its values (beyond what the slices hold), a fresh conversion of them,
    the bytes read, and the read-back blocks."""
    size = chunk.stop - chunk.start
    values = decode_bytes(constant) if slices is None else slices.chunk_bytes(chunk.end - chunk.begin)
    converted = size if entry.conversion in ("lossy", "saturate") else 0  # (a converted copy of the values)
    return values + 3 * size + converted + READBACK_BYTES


def _shared(index: int, slices: ConstantSlices | None) -> tuple[int, int] | None:
    return None if slices is None or not slices.held_bytes() else (index, slices.held_bytes())


class _Spare:
    """Buffers read into and given back, reused (fresh memory costs a page fault a page): at most SPARE_BYTES."""

    def __init__(self) -> None:
        self._buffers: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> np.ndarray | None:
        """The smallest kept buffer of at least ``size`` bytes (None: none; the caller allocates)."""
        with self._lock:
            fits = [b for b in self._buffers if b.shape[0] >= size]
            if not fits:
                return None
            chosen = min(fits, key=len)
            self._buffers = [b for b in self._buffers if b is not chosen]
            return chosen

    def give(self, buffer: np.ndarray | None) -> None:
        if buffer is None or buffer.dtype != np.uint8 or buffer.ndim != 1:
            return
        with self._lock:
            self._buffers.append(buffer)
            while sum(b.shape[0] for b in self._buffers) > _SPARE_BYTES:
                smallest = min(self._buffers, key=len)
                self._buffers = [b for b in self._buffers if b is not smallest]  # (by identity: arrays compare)


def _differ(count: int) -> str:
    """``1 byte differs``, ``2 bytes differ``."""
    return f"{counted(count, 'byte')} {'differs' if count == 1 else 'differ'}"


def _merge(plan: WrittenPlan, constant: ModelConstant, entry: PlanEntry, results: list[Found],
           reader: ExternalDataReader | None, max_tensor_bytes: int) -> str | None:
    """What differs between a constant and its entry, from what its chunks found (None: nothing)."""
    if any(result.failed for result in results):  # the error the whole tensor gives (an index in it)
        return _compare(plan, constant, entry, reader, max_tensor_bytes)
    differ = sum(result.differ for result in results)
    if differ:
        first = next(result.first for result in results if result.first >= 0)
        assert entry.offset is not None
        return (f"{_differ(differ)} from a fresh conversion, the first at offset {entry.offset + first} of "
                f"the buffer file{_element(constant, next((r.first_value for r in results if r.first_value), None))}")
    clamped = sum(result.clamped for result in results)
    if entry.conversion == "saturate" and entry.clamped != clamped:
        return f"the plan counts {counted(entry.clamped or 0, 'value')} clamped, a fresh conversion {clamped}"
    if any(result.values_differ for result in results):
        first_converted = next((r.first_converted for r in results if r.first_converted), None)
        return "the values read back from the buffer file differ from the model's" + _element(constant, first_converted)
    return None


def _element(constant: ModelConstant, first: tuple[int, Any, Any] | None) -> str:
    """``"; element [i, j]: the buffer holds A, the model B"`` (empty when no element differs)."""
    if first is None:
        return ""
    index, held, value = first
    where = [int(i) for i in np.unravel_index(index, constant.shape)] if constant.shape else []
    return f"; element {where}: the buffer holds {_shown(held)}, the model {_shown(value)}"


def _shown(value: Any) -> str:
    """An element as a message shows it: a NaN with its bits (every NaN prints as ``nan``)."""
    text = str(value)
    if text.lstrip("-") != "nan":
        return text
    element = np.asarray(value)
    bits = int(element.reshape(1).view(f"u{element.dtype.itemsize}")[0])
    return f"{text} (bits 0x{bits:0{2 * element.dtype.itemsize}x})"


def _target_of(plan: WrittenPlan, entry: PlanEntry) -> Target:
    """The target an entry was converted for: the plan's, or for a constant read on the CPU, in a buffer not
    uploaded, ``CPU_READ_TARGET`` (its ONNX type kept)."""
    apart = plan.uploaded_buffers is not None and (entry.buffer or 0) >= plan.uploaded_buffers
    return CPU_READ_TARGET if apart else plan.target


def _compare(
    plan: WrittenPlan, constant: ModelConstant, entry: PlanEntry, reader: ExternalDataReader | None,
    max_tensor_bytes: int,
) -> str | None:
    """What differs between a constant and its entry, compared whole (the entry read again: a plan that was
    tampered with, or the error of a fresh conversion that failed in a chunk); None: nothing."""
    try:
        values = constant.to_array(reader=reader, max_tensor_bytes=max_tensor_bytes)
        expected = prepare(values, target=_target_of(plan, entry), min_dims=plan.min_dims, flags=entry.flags,
                           guaranteed_base_offset_alignment=plan.alignment)
    except ExternalDataError:
        raise  # the model's files cannot be read: one error for the whole run, not a mismatch per constant
    except DmlBridgeError as exc:
        return f"the model's value cannot be converted: {exc}"
    actual = plan.read(entry.key)
    if expected.data.shape != actual.shape or not np.array_equal(expected.data, actual):
        differ = np.flatnonzero(expected.data != actual) if expected.data.shape == actual.shape else np.array([0])
        first = int(differ[0])
        assert entry.offset is not None
        return (f"{_differ(len(differ))} from a fresh conversion, the first at offset {entry.offset + first} "
                f"of the buffer file{_first_element(plan, entry, values)}")
    back = plan.array(entry.key)
    if entry.conversion == "lossy":  # (rounded to FLOAT32 as the conversion rounds, and back: float_bits)
        values = cast(cast(values, np.float32), values.dtype)
    elif entry.conversion == "saturate":
        if entry.clamped != expected.clamped:
            planned = counted(entry.clamped or 0, "value")
            return f"the plan counts {planned} clamped, a fresh conversion {expected.clamped}"
        assert expected.dml_type is not None
        info = np.iinfo(expected.dml_type.numpy())
        values = np.clip(values, info.min, info.max).astype(values.dtype)
    if not same_bits(back, values):
        return ("the values read back from the buffer file differ from the model's"
                + _first_element(plan, entry, values, back))
    return None


def _consumer_list(consumers: tuple[Consumer, ...]) -> str:
    shown = ", ".join(f"{c.node} ({c.op_type} input {c.input}{'' if c.dims is None else f', {c.dims}-D'}"
                      f"{'' if (sizes := c.output_sizes or c.named_sizes) is None else f', sizes {list(sizes)}'}"
                      f"{'' if c.reads_on == 'gpu' else f', read on {c.reads_on}'})" for c in consumers[:3])
    return f"[{shown}{', ...' if len(consumers) > 3 else ''}]"


def _first_element(plan: WrittenPlan, entry: PlanEntry, values: np.ndarray, back: np.ndarray | None = None) -> str:
    """``"; element [i, j]: the buffer holds A, the model B"`` for the first element whose value differs (``back``:
    the values read back, when the caller has them)."""
    try:
        back = plan.array(entry.key) if back is None else back
    except DmlBridgeError:
        return ""
    if back.shape != values.shape or back.dtype != values.dtype:
        return ""
    differ = np.flatnonzero(differing_bits(back, values))
    if not differ.size:
        return ""
    index = int(differ[0])
    where = [int(i) for i in np.unravel_index(index, values.shape)] if values.shape else []
    return (f"; element {where}: the buffer holds {_shown(back.reshape(-1)[index])}, the model "
            f"{_shown(values.reshape(-1)[index])}")
