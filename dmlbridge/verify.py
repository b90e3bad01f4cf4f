"""Verification: whether a written plan is exactly a model's constants, one message per difference.

A plan and a model agree when they hold the same keys, each with the same ONNX type and shape, each converted or
skipped alike, each entry's bytes in its buffer file equal to what a fresh conversion of the model's value gives,
and the values read back from the buffer files equal to the model's bit for bit (a NaN of a widened float equals
any NaN). The model is read one constant at a time; the buffer files one entry at a time.

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
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from dmlbridge.constants import ModelConstant, find_constants
from dmlbridge.consumers import Consumer, find_consumers, recorded
from dmlbridge.encode import prepare
from dmlbridge.errors import DmlBridgeError, ExternalDataError, InvalidArgumentError
from dmlbridge.external_data import ExternalDataReader
from dmlbridge.manifest import BufferFile
from dmlbridge.manifest_parts import OPERATOR_VERSION
from dmlbridge.model_file import external_data_reader, need_reader, read_model
from dmlbridge.options import DEFAULT_MAX_TENSOR_BYTES, PlanOptions
from dmlbridge.planning import PlanEntry, plan_constants
from dmlbridge.progress import Progress
from dmlbridge.quantized import QuantizedWeight, quantized_views
from dmlbridge.quantized_ops import QUANTIZED_NODES, find_quantized, replaced_sources
from dmlbridge.selection import Selection
from dmlbridge.target import Target
from dmlbridge.workers import POOL_MIN_BYTES, Prefetch, check_workers

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
    def quantized_records(self) -> dict[str, QuantizedWeight]: ...
    @property
    def format_version(self) -> int: ...
    def buffer_problems(self, *, sha256: bool = False) -> list[str]: ...
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
) -> list[str]:
    """Where a written plan and a model's constants differ, one message each (empty when they agree); the
    first ones say so when a buffer file no longer matches its size or fingerprint (or, with ``sha256``, the
    SHA-256 its manifest records). ``progress``: a bar of the bytes compared on stderr (None: when stderr is a
    terminal). ``workers``: threads comparing the large constants (None: every CPU this process may use).

    The engine of :meth:`UploadPlan.verify` and ``dmlbridge verify``. The plan's layout is compared with the
    model's by the rules of the plan's ``format_version`` (a manifest an earlier dmlbridge wrote follows its own:
    format 4 padded a 1-D constant on the channel axis only when ``min_dims`` pads; see :mod:`dmlbridge.manifest`).
    """
    workers = check_workers(workers)
    if not plan.buffers:
        raise InvalidArgumentError("this plan was not written (plan_model); there is no buffer file to verify")
    with read_model(model, base_dir) as loaded:
        reader = external_data_reader(loaded, external_data_root)
        selection = plan.selection
        every = find_constants(loaded.proto)
        nodes: dict[str, Any] = {}
        consumers = find_consumers(loaded.proto, every, nodes, QUANTIZED_NODES)
        specs, derived = find_quantized(every, consumers, nodes, plan.target)
        dropped = replaced_sources(consumers, specs) if selection.drop_quantized_sources else set()
        constants = [c for c in [*every, *derived] if selection.selects(c.key, c.kind, c.nbytes)
                     and c.key not in dropped]
        need_reader(constants, reader)
        compared = sum(entry.total_tensor_size_in_bytes or 0 for entry in plan.entries.values())
        bar = Progress(progress, compared, "verify")
        try:
            problems = _find(plan, constants, consumers, reader, max_tensor_bytes, limit, sha256, bar, workers)
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
                problems.insert(0, f"the external data file {file!r} holds {seen} bytes; the plan was made from one "
                                   f"of {size}")
        return problems


def _find(
    plan: WrittenPlan, constants: list[ModelConstant], consumers: dict[str, tuple[Consumer, ...]],
    reader: ExternalDataReader | None, max_tensor_bytes: int, limit: int, sha256: bool, bar: Progress,
    workers: int = 1,
) -> list[str]:
    problems = plan.buffer_problems(sha256=sha256)
    keys = {c.key for c in constants}
    for key in plan.entries:
        if key not in keys:
            problems.append(f"{key!r} is in the plan but not in the model")
    # A fresh plan of every constant at once (flags change no size: each entry's own are used below), by the
    # layout rules of the plan's format version, with the consumers as that version records them.
    version = plan.format_version
    fresh = plan_constants(constants, PlanOptions(plan.target, plan.alignment, plan.min_dims, 0), consumers,
                           version).pairs

    def same_consumers(index: int) -> tuple[PlanEntry | None, tuple[Consumer, ...]]:
        constant = constants[index]
        entry = plan.entries.get(constant.key)
        read_by = recorded(consumers.get(constant.key, ()), version)
        if entry is None or entry.consumers != read_by or entry.padding != fresh[index].fields["padding"]:
            return None, read_by
        return entry, read_by

    def compare(index: int) -> str | None:
        entry = plan.entries[constants[index].key]
        return _compare(plan, constants[index], entry, fresh[index].total >= 0, reader, max_tensor_bytes)

    jobs = []
    if workers > 1:
        for index, constant in enumerate(constants):
            entry = same_consumers(index)[0] if constant.nbytes >= POOL_MIN_BYTES else None
            if entry is not None:  # (values, fresh bytes, bytes read and values read back)
                jobs.append((index, constant.nbytes * 2 + 2 * (entry.total_tensor_size_in_bytes or 0)))
    with contextlib.ExitStack() as stack:
        ahead = stack.enter_context(Prefetch(compare, jobs, workers=workers)) if jobs else None
        for index, constant in enumerate(constants):
            if len(problems) >= limit:
                break
            entry, read_by = same_consumers(index)
            if entry is None:
                if constant.key not in plan.entries:
                    problems.append(f"{constant.key!r} ({constant.origin}) is in the model but not in the plan")
                    continue
                mine = plan.entries[constant.key]
                problems.append(f"{constant.key!r}: the plan has consumers {_consumer_list(mine.consumers)} "
                                f"({mine.padding} padding), the model {_consumer_list(read_by)} "
                                f"({fresh[index].fields['padding']} padding)")
                continue
            problem = ahead.take(index) if ahead is not None and ahead.next_item == index else compare(index)
            bar.update(entry.total_tensor_size_in_bytes or 0)
            if problem:
                problems.append(f"{constant.key!r}: {problem}")
    return problems


def _compare(
    plan: WrittenPlan, constant: ModelConstant, entry: PlanEntry, converts: bool, reader: ExternalDataReader | None,
    max_tensor_bytes: int,
) -> str | None:
    """What differs between a constant and its entry (None: nothing); ``converts``: whether a fresh conversion
    converts the constant (or skips it)."""
    if constant.onnx_type is not entry.onnx_type or constant.shape != entry.shape:
        return (f"the model has {constant.onnx_type.name} {list(constant.shape)}, the plan "
                f"{entry.onnx_type.name} {list(entry.shape)}")
    if converts != (entry.skipped is None):
        return f"skipped in {'the plan' if entry.skipped else 'a fresh conversion'} but not in the other"
    if entry.skipped is not None:
        return None
    try:
        values = constant.to_array(reader=reader, max_tensor_bytes=max_tensor_bytes)
        expected = prepare(values, target=plan.target, min_dims=plan.min_dims, flags=entry.flags,
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
        return (f"{len(differ)} byte(s) differ from a fresh conversion, the first at offset {entry.offset + first} "
                f"of the buffer file{_first_element(plan, entry, values)}")
    back = plan.array(entry.key)
    if entry.conversion == "lossy":
        with np.errstate(over="ignore"):  # out of FLOAT32 range becomes inf, as in the conversion
            values = values.astype(np.float32).astype(values.dtype)
    elif entry.conversion == "saturate":
        if entry.clamped != expected.clamped:
            return f"the plan counts {entry.clamped} values clamped, a fresh conversion {expected.clamped}"
        assert expected.dml_type is not None
        info = np.iinfo(expected.dml_type.numpy())
        values = np.clip(values, info.min, info.max).astype(values.dtype)
    if not _same_values(back, values, widened_float=entry.conversion == "widen" and constant.onnx_type.is_float):
        return ("the values read back from the buffer file differ from the model's"
                + _first_element(plan, entry, values, back))
    return None


def _consumer_list(consumers: tuple[Consumer, ...]) -> str:
    shown = ", ".join(f"{c.node} ({c.op_type} input {c.input}{'' if c.dims is None else f', {c.dims}-D'})"
                      for c in consumers[:3])
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
    differ = np.flatnonzero(_differing(back, values, widened_float=False))
    if not differ.size:
        return ""
    index = int(differ[0])
    where = [int(i) for i in np.unravel_index(index, values.shape)] if values.shape else []
    return f"; element {where}: the buffer holds {back.reshape(-1)[index]}, the model {values.reshape(-1)[index]}"


def _same_values(a: np.ndarray, b: np.ndarray, *, widened_float: bool) -> bool:
    """Bit-for-bit equality of two arrays of one dtype (NaN vs NaN of any payload allowed when widened_float)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return not _differing(a, b, widened_float=widened_float).any()


def _differing(a: np.ndarray, b: np.ndarray, *, widened_float: bool) -> np.ndarray:
    """Per element, whether two arrays of one shape and dtype differ bit for bit (a NaN and a NaN of any payload
    do not, when widened_float)."""
    if a.dtype == np.bool_:
        return np.asarray(a != b)
    if a.dtype.kind == "V":  # ml_dtypes sub-byte types, one byte per element
        if a.dtype.name.startswith(("int", "uint")):
            return np.asarray(a.astype(np.int64) != b.astype(np.int64))
        # float4/float6: float32 holds every value exactly and keeps -0 apart from +0.
        a, b = a.astype(np.float32), b.astype(np.float32)
    bits = np.dtype(f"u{a.dtype.itemsize}")
    differ = np.asarray(a.view(bits) != b.view(bits))
    if widened_float:
        differ &= ~(np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64)))
    return differ
