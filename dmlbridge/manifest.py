"""The upload plan and its manifest: what ``convert_model`` wrote, as ``PREFIX.json`` describes it.

An :class:`UploadPlan` maps each constant's key to a :class:`PlanEntry` (its ONNX type and shape, conversion,
offset in the .bin and DML_BUFFER_TENSOR_DESC fields). This module writes a plan as JSON text and reads it back
with :func:`load_plan`, which never trusts the file: every field's type and range, known types, each entry's desc
against the target's mapping and ``calc_buffer_tensor_size``, alignment, bounds, overlaps and the .bin's size are
checked, and nothing is allocated on the manifest's word alone (the .bin is read one entry at a time, on request).

Every manifest records ``bin_fingerprint``, a SHA-256 over the .bin's size and sampled bytes (the first and last
64 KiB, the first 64 bytes of every entry, 1024 evenly spaced 64-byte samples), checked on every load: a few
reads at any size, enough to refuse a .bin that belongs to another manifest. The full SHA-256 (``bin_sha256``,
``checksum=True``) is opt-in because it reads everything.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import stat
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dmlbridge.decode import decode
from dmlbridge.descs import DML_BUFFER_TENSOR_DESC, buffer_tensor_desc_fields, make_buffer_tensor_desc
from dmlbridge.encode import PreparedTensor
from dmlbridge.errors import (
    DmlBridgeError,
    InvalidArgumentError,
    LayoutError,
    ManifestError,
)
from dmlbridge.layout import calc_buffer_tensor_size, check_strides, packed_strides, plan_layout
from dmlbridge.mapping import Conversion, resolve
from dmlbridge.onnx_tensor import DEFAULT_MAX_TENSOR_BYTES
from dmlbridge.target import Target
from dmlbridge.types import DmlDataType, FeatureLevel, OnnxDataType

__all__ = ["MANIFEST_FORMAT", "MANIFEST_FORMAT_VERSION", "PlanEntry", "UploadPlan", "load_plan", "manifest_text"]


MANIFEST_FORMAT = "dmlbridge-upload-plan"
MANIFEST_FORMAT_VERSION = 1
_MAX_ALIGNMENT = 2**31  # GuaranteedBaseOffsetAlignment is a UINT
_CONVERSIONS = ("native", "widen", "emulate", "narrow", "lossy")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_INT64_MAX = 2**63 - 1
# bin_fingerprint: what is sampled (see the module docstring). Changing any of these changes every fingerprint.
_FINGERPRINT_TAG = b"dmlbridge-bin-fingerprint-1\x00"
_FINGERPRINT_EDGE = 64 << 10
_FINGERPRINT_ENTRY = 64
_FINGERPRINT_SPREAD = 1024
_FINGERPRINT_WINDOW = 64 << 10  # sampled ranges closer than this are read with one read
_CHUNK = 4 << 20


def _layout_of(
    onnx_type: OnnxDataType, shape: tuple[int, ...], dml: DmlDataType, conversion: str, min_dims: int, max_dims: int
) -> tuple[tuple[int, ...], tuple[int, ...] | None, int]:
    """(sizes, desc strides, TotalTensorSizeInBytes) of a packed tensor; LayoutError when DirectML cannot hold it."""
    layout = plan_layout(shape, None, min_dims, max_dims)
    if conversion == "emulate":
        # ONNX Runtime's int64 emulation: 8-byte elements read through doubled strides.
        strides = check_strides([2 * s for s in packed_strides(layout.sizes)], layout.sizes)
        return layout.sizes, strides, 8 * layout.span
    return layout.sizes, None, calc_buffer_tensor_size(dml, layout.sizes)


# --- the plan ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanEntry:
    """One constant of an upload plan.

    Converted entries have an ``offset`` in the .bin, a ``dml_type`` and the DML_BUFFER_TENSOR_DESC fields
    (``sizes``, ``strides`` — None when packed —, ``total_tensor_size_in_bytes``,
    ``guaranteed_base_offset_alignment``; Flags is always 0). Skipped entries (empty tensors, strings, complex,
    types the target cannot hold) have all of those None and say why in ``skipped``.
    """

    key: str
    origin: str
    onnx_type: OnnxDataType
    shape: tuple[int, ...]
    conversion: Conversion | None
    offset: int | None
    dml_type: DmlDataType | None
    sizes: tuple[int, ...] | None
    strides: tuple[int, ...] | None
    total_tensor_size_in_bytes: int | None
    guaranteed_base_offset_alignment: int | None
    skipped: str | None

    @property
    def end(self) -> int | None:
        """The offset just past this entry's bytes (None when skipped)."""
        if self.offset is None or self.total_tensor_size_in_bytes is None:
            return None
        return self.offset + self.total_tensor_size_in_bytes

    def desc(self) -> dict[str, Any] | None:
        """The DML_BUFFER_TENSOR_DESC fields by their DirectML names (as PreparedTensor.desc()), None if skipped."""
        if self.dml_type is None or self.sizes is None:
            return None
        assert self.total_tensor_size_in_bytes is not None and self.guaranteed_base_offset_alignment is not None
        return buffer_tensor_desc_fields(
            self.dml_type,
            0,
            self.sizes,
            self.strides,
            self.total_tensor_size_in_bytes,
            self.guaranteed_base_offset_alignment,
        )

    def as_ctypes(self) -> DML_BUFFER_TENSOR_DESC:
        """A ctypes DML_BUFFER_TENSOR_DESC for this entry (InvalidArgumentError when it was skipped)."""
        desc = self.desc()
        if desc is None:
            raise InvalidArgumentError(f"entry {self.key!r} was skipped ({self.skipped}); it has no desc")
        return make_buffer_tensor_desc(
            desc["DataType"], 0, desc["Sizes"], desc["Strides"], desc["TotalTensorSizeInBytes"],
            desc["GuaranteedBaseOffsetAlignment"],
        )

    def to_json(self) -> dict[str, Any]:
        """The manifest form of this entry."""
        return {
            "key": self.key,
            "origin": self.origin,
            "onnx_type": self.onnx_type.name,
            "shape": list(self.shape),
            "conversion": self.conversion,
            "offset": self.offset,
            "dml_type": None if self.dml_type is None else self.dml_type.name,
            "desc": self.desc(),
            "skipped": self.skipped,
        }


_new = object.__new__
_set = object.__setattr__


class _Entries(Mapping[str, PlanEntry]):
    """A plan's entries by key, in model order, each made on first access from the fields it shares with the
    entries of its (type, shape) and its own key, origin and offset: a model can hold 100,000 constants and a
    caller usually reads a few. Read-only, like the MappingProxyType of a plan read by load_plan."""

    def __init__(self, keys: list[str], origins: list[str], offsets: list[int | None],
                 shared: list[dict[str, Any]]) -> None:
        self._keys, self._origins, self._offsets, self._shared = keys, origins, offsets, shared
        self._positions: dict[str, int] | None = None  # made on first lookup
        self._made: list[PlanEntry | None] = [None] * len(keys)

    @property
    def _index(self) -> dict[str, int]:
        if self._positions is None:
            self._positions = {key: i for i, key in enumerate(self._keys)}
        return self._positions

    def __getitem__(self, key: str) -> PlanEntry:
        i = self._index[key]
        entry = self._made[i]
        if entry is None:
            fields = self._shared[i].copy()
            fields["key"], fields["origin"], fields["offset"] = key, self._origins[i], self._offsets[i]
            entry = _new(PlanEntry)
            _set(entry, "__dict__", fields)  # PlanEntry(**fields) without its per-field __setattr__
            self._made[i] = entry
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __repr__(self) -> str:
        return f"<{len(self)} plan entries>"


@dataclass(frozen=True, eq=False)
class UploadPlan:
    """An upload buffer's layout: where each constant of a model sits in the .bin and how DirectML sees it.

    ``entries`` maps each key to its :class:`PlanEntry`, in model order. ``bin_path`` is None for a plan from
    :func:`plan_model`, which has no bytes.
    """

    entries: Mapping[str, PlanEntry]
    target: Target
    alignment: int
    min_dims: int
    total_size: int
    source_name: str | None
    source_size: int | None
    dmlbridge_version: str
    bin_sha256: str | None = None
    bin_path: str | None = None
    manifest_path: str | None = None
    bin_fingerprint: str | None = None

    @property
    def converted(self) -> list[PlanEntry]:
        """The entries that have bytes in the .bin, in manifest (model) order."""
        return [e for e in self.entries.values() if e.skipped is None]

    @property
    def skipped(self) -> list[PlanEntry]:
        """The entries that could not be converted."""
        return [e for e in self.entries.values() if e.skipped is not None]

    def manifest(self) -> dict[str, Any]:
        """The manifest (the JSON document of ``PREFIX.json``) as a dict."""
        doc = self._manifest_head()
        doc["entries"] = [e.to_json() for e in self.entries.values()]
        return doc

    def _manifest_head(self) -> dict[str, Any]:
        """The manifest's fields before ``entries``."""
        doc: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_FORMAT_VERSION,
            "dmlbridge_version": self.dmlbridge_version,
            "source": {"name": self.source_name, "size": self.source_size},
            "target": self.target.describe(),
            "alignment": self.alignment,
            "min_dims": self.min_dims,
            "total_size": self.total_size,
        }
        if self.bin_fingerprint is not None:
            doc["bin_fingerprint"] = self.bin_fingerprint
        if self.bin_sha256 is not None:
            doc["bin_sha256"] = self.bin_sha256
        return doc

    def _entry(self, key: str) -> PlanEntry:
        entry = self.entries.get(key) if isinstance(key, str) else None
        if entry is None:
            raise InvalidArgumentError(f"the plan has no entry {key!r}")
        if entry.skipped is not None:
            raise InvalidArgumentError(f"entry {key!r} was skipped ({entry.skipped}); it has no bytes")
        return entry

    def read(self, key: str) -> np.ndarray:
        """The entry's bytes in the .bin (``total_tensor_size_in_bytes`` of them), read now, as a uint8 array."""
        entry = self._entry(key)
        if self.bin_path is None:
            raise InvalidArgumentError("this plan was not written (plan_model); it has no .bin to read")
        assert entry.offset is not None and entry.total_tensor_size_in_bytes is not None
        out = np.empty(entry.total_tensor_size_in_bytes, dtype=np.uint8)
        try:
            with open(self.bin_path, "rb") as file:
                file.seek(entry.offset)
                view = out.data
                done = 0
                while done < len(out):
                    n = file.readinto(view[done:])
                    if not n:
                        raise ManifestError(
                            f"{self.bin_path} ended at byte {entry.offset + done}, inside entry {key!r} "
                            f"(bytes {entry.offset}..{entry.end}); the file changed after the plan was loaded"
                        )
                    done += n
        except OSError as exc:
            raise ManifestError(f"cannot read {self.bin_path}: {exc.strerror or exc}") from None
        return out

    def _prepared(self, key: str) -> PreparedTensor:
        # The core's readback (PreparedTensor.to_numpy) applied to the bytes in the .bin.
        entry = self._entry(key)
        assert entry.dml_type is not None and entry.conversion is not None and entry.sizes is not None
        assert entry.total_tensor_size_in_bytes is not None
        return PreparedTensor(
            onnx_type=entry.onnx_type,
            dml_type=entry.dml_type,
            conversion=entry.conversion,
            sizes=entry.sizes,
            strides=entry.strides,
            total_tensor_size_in_bytes=entry.total_tensor_size_in_bytes,
            flags=0,
            guaranteed_base_offset_alignment=self.alignment,
            data=self.read(key),
            source_dtype=entry.onnx_type.numpy(),
            source_shape=entry.shape,
            element_strides=None,  # whole-model entries are always packed
        )

    def dml_array(self, key: str) -> np.ndarray:
        """The entry as DirectML sees it: its bytes decoded as ``dml_type`` with the desc's sizes and strides."""
        prepared = self._prepared(key)
        return decode(prepared.data, prepared.dml_type, prepared.sizes, prepared.strides)

    def array(self, key: str) -> np.ndarray:
        """The entry's original ONNX values read back from the .bin: the dtype ``onnx.numpy_helper.to_array``
        gives and the ONNX shape. (A "lossy" DOUBLE entry gives its FLOAT32-rounded values.)"""
        return self._prepared(key).to_numpy()

    def verify(
        self,
        model: Any,
        *,
        base_dir: str | os.PathLike[str] | None = None,
        external_data_root: str | os.PathLike[str] | None = None,
        max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    ) -> None:
        """Check that the plan is exactly ``model``'s constants: the same keys, types and shapes, the bytes a
        fresh conversion gives, and values that read back bit for bit (NaN payloads of widened floats excepted).

        Raises ManifestError listing the mismatches.
        """
        from dmlbridge.model import find_mismatches  # model imports this module

        problems = find_mismatches(
            self, model, base_dir=base_dir, external_data_root=external_data_root, max_tensor_bytes=max_tensor_bytes
        )
        if problems:
            shown = "; ".join(problems[:10]) + ("; ..." if len(problems) > 10 else "")
            raise ManifestError(f"the plan does not match the model ({len(problems)} mismatches): {shown}")


def _bin_fingerprint(bin_file: str, size: int, offsets: list[int], totals: list[int]) -> str:
    """SHA-256 over the .bin's size and sampled ranges (see the module docstring): cheap at any file size, and
    different for a .bin that is not the one the manifest was written with (raises OSError on a short read).

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
    # O_NONBLOCK: a FIFO swapped in for the .bin must not block the open; fstat then insists on a regular file.
    fd = os.open(bin_file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with open(fd, "rb", buffering=0) as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{bin_file!r} is not a regular file")
        # Windows: runs of ranges with gaps of at most _FINGERPRINT_WINDOW, spanning at most _CHUNK bytes.
        gaps = np.flatnonzero(group_start[1:] - group_stop[:-1] > _FINGERPRINT_WINDOW) + 1
        bounds = [0, *gaps.tolist(), len(starts_at)]
        for low, high in itertools.pairwise(bounds):
            begin = low
            while begin < high:
                base = starts_at[begin]
                end = begin + int(np.searchsorted(group_stop[begin:high], base + _CHUNK, side="right"))
                if end > begin:
                    window = memoryview(_read_at(file, base, stops_at[end - 1] - base))
                    available = base + len(window)  # less than asked only where the file ends
                    if stops_at[end - 1] > available:
                        short = next(k for k in range(begin, end) if stops_at[k] > available)
                        start, stop = starts_at[short], stops_at[short]
                        raise OSError(f"{bin_file!r} ended at byte {max(start, available)}, before byte {stop}")
                    _hash_ranges(sha, window, group_start[begin:end] - base, group_stop[begin:end] - base,
                                 header_rows[begin:end])
                else:  # one range longer than _CHUNK (many small entries packed together): in _CHUNK pieces
                    start, stop = starts_at[begin], stops_at[begin]
                    sha.update(headers[16 * begin : 16 * begin + 16])
                    position = start
                    while position < stop:
                        chunk = _read_at(file, position, min(stop - position, _CHUNK))
                        if not chunk:
                            raise OSError(f"{bin_file!r} ended at byte {position}, before byte {stop}")
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


def _read_at(file: Any, offset: int, size: int) -> bytes:
    """Up to ``size`` bytes of ``file`` from ``offset`` (fewer only where the file ends)."""
    parts = []
    file.seek(offset)
    while size > 0:
        chunk = file.read(size)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)



def manifest_text(manifest: dict[str, Any]) -> str:
    """A manifest as JSON text: one line per top-level field and one per entry (readable, diffable, compact)."""
    def dump(value: Any) -> str:
        return json.dumps(value, ensure_ascii=True, allow_nan=False)

    head = [f"  {dump(k)}: {dump(v)}" for k, v in manifest.items() if k != "entries"]
    return _assemble(head, [f"    {dump(e)}" for e in manifest.get("entries", [])])


def _assemble(head: list[str], entries: list[str]) -> str:
    """The manifest text from its top-level field lines and entry lines, joined once (a large model's manifest
    is megabytes: each extra copy costs)."""
    if not entries:
        return "{\n" + ",\n".join([*head, '  "entries": []']) + "\n}\n"
    opening, closing = "".join(["{\n", *[line + ",\n" for line in head], '  "entries": [\n']), "\n  ]\n}\n"
    if len(entries) == 1:
        return opening + entries[0] + closing
    return ",\n".join([opening + entries[0], *entries[1:-1], entries[-1] + closing])


def _manifest_text(plan: UploadPlan, entry_lines: list[str] | None = None) -> str:
    """``manifest_text(plan.manifest())``, the same text, without a dict and a json.dumps call per entry;
    ``entry_lines``: the entries' lines (``"    " + _entry_json(entry)``), when the caller has made them."""
    head = [f"  {_json(k)}: {_json(v)}" for k, v in plan._manifest_head().items()]
    if entry_lines is None:
        cache: dict[tuple[Any, ...], tuple[str, str]] = {}
        entry_lines = [_entry_json(entry, cache) for entry in plan.entries.values()]
    return _assemble(head, entry_lines)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, allow_nan=False)


_quote = json.encoder.encode_basestring_ascii  # what json.dumps(ensure_ascii=True) uses for every string


def _json_ints(values: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, values)) + "]"


def _entry_line(key: str, origin: str, offset: int, shared: tuple[str, str]) -> str:
    """The manifest line of a converted entry from its own fields and the text it shares with entries of the same
    type and shape (:func:`_shared_json`)."""
    return f'    {{"key": {_quote(key)}, "origin": {_quote(origin)}, {shared[0]}{offset}{shared[1]}'


def _shared_json(
    onnx_type: OnnxDataType, shape: tuple[int, ...], conversion: str, dml_type: DmlDataType, sizes: tuple[int, ...],
    strides: tuple[int, ...] | None, total: int, alignment: int,
) -> tuple[str, str]:
    """The text of a converted entry's manifest line around its offset, after its key and origin."""
    json_strides = "null" if strides is None else _json_ints(strides)
    return (
        f'"onnx_type": {_quote(onnx_type.name)}, "shape": {_json_ints(shape)}, '
        f'"conversion": {_quote(conversion)}, "offset": ',
        f', "dml_type": {_quote(dml_type.name)}, "desc": {{"DataType": {int(dml_type)}, "Flags": 0, '
        f'"DimensionCount": {len(sizes)}, "Sizes": {_json_ints(sizes)}, "Strides": {json_strides}, '
        f'"TotalTensorSizeInBytes": {total}, "GuaranteedBaseOffsetAlignment": {alignment}}}, "skipped": null}}',
    )


def _entry_json(entry: PlanEntry, cache: dict[tuple[Any, ...], tuple[str, str]] | None = None) -> str:
    """``"    " + json.dumps(entry.to_json())``, the same characters, formatted directly (a model can hold 100,000
    constants): strings through json's own quoting, integers with str() as json writes them. ``cache`` keeps the
    text of the fields entries of one type and shape share."""
    skipped, offset, total = entry.skipped, entry.offset, entry.total_tensor_size_in_bytes
    if skipped is not None and entry.conversion is None and offset is None and entry.dml_type is None:
        return (
            f'    {{"key": {_quote(entry.key)}, "origin": {_quote(entry.origin)}, '
            f'"onnx_type": {_quote(entry.onnx_type.name)}, "shape": {_json_ints(entry.shape)}, '
            f'"conversion": null, "offset": null, "dml_type": null, "desc": null, "skipped": {_quote(skipped)}}}'
        )
    if (
        skipped is not None
        or entry.conversion is None
        or entry.dml_type is None
        or entry.sizes is None
        or type(offset) is not int
        or type(total) is not int
        or type(entry.guaranteed_base_offset_alignment) is not int
    ):
        return "    " + _json(entry.to_json())  # not a shape _plan_entries makes
    key = (entry.onnx_type, entry.shape, entry.conversion, entry.dml_type, entry.sizes, entry.strides, total,
           entry.guaranteed_base_offset_alignment)
    shared = None if cache is None else cache.get(key)
    if shared is None:
        shared = _shared_json(*key)
        if cache is not None:
            cache[key] = shared
    return _entry_line(entry.key, entry.origin, offset, shared)


# --- reading manifests ---------------------------------------------------------------------------------------


def load_plan(
    manifest_path: str | os.PathLike[str],
    *,
    verify: bool = False,
    bin_path: str | os.PathLike[str] | None = None,
) -> UploadPlan:
    """Read and validate an upload plan (``PREFIX.json``) and its buffer image (``PREFIX.bin``, or ``bin_path``).

    Every field is checked: format and version, types and ranges, known ONNX/DML types, each converted entry's
    DML type and conversion against the target's mapping, its desc against the layout rules and
    ``calc_buffer_tensor_size``, offsets (aligned, inside the .bin, no overlaps), total_size against the entries
    and the .bin's real size and ``bin_fingerprint`` (sampled bytes: a .bin from another conversion is refused
    even when its size is the same). ``verify=True`` also checks the .bin's SHA-256 against ``bin_sha256`` (which
    ``convert_model(..., checksum=True)`` records). Any problem raises ManifestError.
    """
    return _load_plan(manifest_path, verify=verify, bin_path=bin_path, check_fingerprint=True)


def _load_plan(
    manifest_path: str | os.PathLike[str],
    *,
    verify: bool,
    bin_path: str | os.PathLike[str] | None,
    check_fingerprint: bool,
) -> UploadPlan:
    """load_plan; ``check_fingerprint=False`` is for ``dmlbridge verify``, which reports a .bin that does not
    match its fingerprint as a mismatch (through find_mismatches) along with the constants that differ."""
    if not isinstance(manifest_path, (str, os.PathLike)):
        raise InvalidArgumentError(f"manifest_path must be a path, not {type(manifest_path).__name__}")
    path = os.fspath(manifest_path)
    path = path if isinstance(path, str) else os.fsdecode(path)
    if bin_path is None:
        if not path.endswith(".json"):
            raise ManifestError(f"{path!r} does not end in .json; pass bin_path= to name its .bin")
        bin_file = path[: -len(".json")] + ".bin"
    else:
        bin_file = os.fspath(bin_path) if isinstance(bin_path, (str, os.PathLike)) else ""
        bin_file = bin_file if isinstance(bin_file, str) else os.fsdecode(bin_file)
        if not bin_file:
            raise InvalidArgumentError(f"bin_path must be a path, got {bin_path!r}")
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path!r}: {exc.strerror or exc}") from None
    document = _parse_json(raw, path)
    plan = _plan_from_manifest(document, f"manifest {path!r}")
    _check_bin(plan, bin_file, verify, check_fingerprint)
    return replace(plan, bin_path=bin_file, manifest_path=path)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ManifestError(f"duplicate field {key!r}")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ManifestError(f"{name} is not valid JSON (not a number)")


def _parse_json(raw: bytes, path: str) -> Any:
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
    except ManifestError as exc:
        raise ManifestError(f"manifest {path!r}: {exc}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, int digit limits
        raise ManifestError(f"manifest {path!r} is not valid JSON: {exc}") from None


class _Fields:
    """Typed access to one JSON object of the manifest, with messages that say where the problem is."""

    def __init__(self, value: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
        if not isinstance(value, dict):
            raise ManifestError(f"{where} must be a JSON object, got {_kind(value)}")
        missing = [k for k in required if k not in value]
        if missing:
            raise ManifestError(f"{where} lacks the field(s) {', '.join(map(repr, missing))}")
        unknown = [k for k in value if k not in required and k not in optional]
        if unknown:
            raise ManifestError(f"{where} has unknown field(s) {', '.join(map(repr, unknown[:5]))}")
        self.value = value
        self.where = where

    def at(self, key: str) -> str:
        return f"{self.where}.{key}"

    def get(self, key: str) -> Any:
        return self.value.get(key)

    def integer(self, key: str, low: int = 0, high: int = _INT64_MAX, nullable: bool = False) -> Any:
        return _int(self.value.get(key), self.at(key), low, high, nullable)

    def string(self, key: str, nullable: bool = False, nonempty: bool = False) -> Any:
        value = self.value.get(key)
        if value is None and nullable:
            return None
        if not isinstance(value, str) or (nonempty and not value):
            what = "a non-empty string" if nonempty else "a string"
            raise ManifestError(f"{self.at(key)} must be {what}, got {_kind(value)}")
        return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value[:60]!r}"
    return {"list": "an array", "dict": "an object"}.get(type(value).__name__, type(value).__name__)


def _int(value: Any, where: str, low: int = 0, high: int = _INT64_MAX, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(f"{where} must be a whole number, got {_kind(value)}")
    if not low <= value <= high:
        raise ManifestError(f"{where} is {value}, outside {low}..{high}")
    return value


def _int_list(value: Any, where: str, low: int = 0, high: int = _INT64_MAX, max_len: int = 64) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ManifestError(f"{where} must be an array of whole numbers, got {_kind(value)}")
    if len(value) > max_len:
        raise ManifestError(f"{where} has {len(value)} items, more than {max_len}")
    return tuple(_int(v, f"{where}[{i}]", low, high) for i, v in enumerate(value))


def _plan_from_manifest(document: Any, where: str) -> UploadPlan:
    top = _Fields(
        document, where,
        ("format", "format_version", "dmlbridge_version", "source", "target", "alignment", "min_dims",
         "total_size", "bin_fingerprint", "entries"),
        ("bin_sha256",),
    )
    if top.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"{where} is not a dmlbridge upload plan (format {top.get('format')!r})")
    version = top.integer("format_version", 0, _INT64_MAX)
    if version != MANIFEST_FORMAT_VERSION:
        raise ManifestError(
            f"{where} has format_version {version}; this dmlbridge reads version {MANIFEST_FORMAT_VERSION}"
        )
    dmlbridge_version = top.string("dmlbridge_version")
    source = _Fields(top.get("source"), top.at("source"), ("name", "size"))
    source_name = source.string("name", nullable=True)
    source_size = source.integer("size", nullable=True)
    target = _target_from_json(top.get("target"), top.at("target"))
    alignment = top.integer("alignment", 16, _MAX_ALIGNMENT)
    if alignment & (alignment - 1):
        raise ManifestError(f"{top.at('alignment')} is {alignment}, not a power of two")
    min_dims = top.integer("min_dims", 0, target.max_dimension_count)
    total_size = top.integer("total_size")
    digest = top.string("bin_sha256", nullable=True)
    if digest is not None and not _SHA256.match(digest):
        raise ManifestError(f"{top.at('bin_sha256')} must be 64 lowercase hex digits, got {digest[:80]!r}")
    fingerprint = top.string("bin_fingerprint")
    if not _SHA256.match(fingerprint):
        raise ManifestError(f"{top.at('bin_fingerprint')} must be 64 lowercase hex digits, got {fingerprint[:80]!r}")
    raw_entries = top.get("entries")
    if not isinstance(raw_entries, list):
        raise ManifestError(f"{top.at('entries')} must be an array, got {_kind(raw_entries)}")
    entries: dict[str, PlanEntry] = {}
    for index, raw in enumerate(raw_entries):
        entry = _entry_from_json(raw, f"{where}: entries[{index}]", target, alignment, min_dims, total_size)
        if entry.key in entries:
            raise ManifestError(f"{where}: entries[{index}] repeats the key {entry.key!r}")
        entries[entry.key] = entry
    placed = sorted((e for e in entries.values() if e.skipped is None), key=lambda e: e.offset or 0)
    end = 0
    previous: PlanEntry | None = None
    for entry in placed:
        assert entry.offset is not None and entry.end is not None
        if previous is not None and entry.offset < end:
            raise ManifestError(
                f"{where}: entries {previous.key!r} (bytes {previous.offset}..{previous.end}) and {entry.key!r} "
                f"(bytes {entry.offset}..{entry.end}) overlap"
            )
        end, previous = entry.end, entry
    if end != total_size:
        raise ManifestError(
            f"{where}: total_size is {total_size} but the entries end at byte {end}; the two must agree"
        )
    return UploadPlan(
        types.MappingProxyType(entries), target, alignment, min_dims, total_size, source_name, source_size,
        dmlbridge_version, digest, bin_fingerprint=fingerprint,
    )


def _target_from_json(value: Any, where: str) -> Target:
    fields = _Fields(value, where, ("feature_level", "supported", "int64", "allow_lossy"))
    supported = fields.get("supported")
    if not isinstance(supported, list) or not all(isinstance(s, str) for s in supported):
        raise ManifestError(f"{fields.at('supported')} must be an array of DML type names, got {_kind(supported)}")
    if not isinstance(fields.get("allow_lossy"), bool):
        raise ManifestError(f"{fields.at('allow_lossy')} must be true or false, got {_kind(fields.get('allow_lossy'))}")
    level = fields.string("feature_level")
    try:
        target = Target(FeatureLevel.parse(level), supported=supported, int64=fields.get("int64"),
                        allow_lossy=fields.get("allow_lossy"))
    except DmlBridgeError as exc:
        raise ManifestError(f"{where}: {exc}") from None
    if target.describe() != value:
        raise ManifestError(
            f"{where} is not in canonical form (expected {json.dumps(target.describe())}); a supported type the "
            "feature level lacks, an unsorted or repeated list, or a non-dotted feature level"
        )
    return target


def _entry_from_json(
    raw: Any, where: str, target: Target, alignment: int, min_dims: int, total_size: int
) -> PlanEntry:
    fields = _Fields(
        raw, where, ("key", "origin", "onnx_type", "shape", "conversion", "offset", "dml_type", "desc", "skipped")
    )
    key = fields.string("key", nonempty=True)
    where = f"{where} ({key[:80]!r})"
    fields.where = where
    origin = fields.string("origin")
    type_name = fields.string("onnx_type")
    onnx_type = OnnxDataType.__members__.get(type_name)
    if onnx_type is None or onnx_type is OnnxDataType.UNDEFINED:
        raise ManifestError(f"{fields.at('onnx_type')} is {type_name[:40]!r}, not an ONNX data type name")
    shape = _int_list(fields.get("shape"), fields.at("shape"))
    skipped = fields.string("skipped", nullable=True)
    if skipped is not None:
        if not skipped:
            raise ManifestError(f"{fields.at('skipped')} is empty; a skipped entry must say why")
        for name in ("conversion", "offset", "dml_type", "desc"):
            if fields.get(name) is not None:
                raise ManifestError(f"{where} is skipped but has a {name}; a skipped entry has no bytes")
        return PlanEntry(key, origin, onnx_type, shape, None, None, None, None, None, None, None, skipped)

    conversion = fields.string("conversion")
    if conversion not in _CONVERSIONS:
        raise ManifestError(f"{fields.at('conversion')} is {conversion[:40]!r}, not one of {', '.join(_CONVERSIONS)}")
    dml_name = fields.string("dml_type")
    dml_type = DmlDataType.__members__.get(dml_name)
    if dml_type is None or dml_type is DmlDataType.UNKNOWN:
        raise ManifestError(f"{fields.at('dml_type')} is {dml_name[:40]!r}, not a DirectML data type name")
    row = resolve(onnx_type, target)
    if row.dml_type is not dml_type or row.conversion != conversion:
        expected = "unsupported" if row.dml_type is None else f"{row.dml_type.name} ({row.conversion})"
        raise ManifestError(
            f"{where} says {onnx_type.name} -> {dml_type.name} ({conversion}), but the manifest's target maps "
            f"{onnx_type.name} to {expected}"
        )
    try:
        sizes, strides, total = _layout_of(onnx_type, shape, dml_type, conversion, min_dims, target.max_dimension_count)
    except LayoutError as exc:
        raise ManifestError(f"{fields.at('shape')} {list(shape)} cannot be a DirectML tensor: {exc}") from None
    offset = fields.integer("offset")
    if offset % alignment:
        raise ManifestError(f"{fields.at('offset')} {offset} is not a multiple of the alignment {alignment}")
    desc = _Fields(
        fields.get("desc"), fields.at("desc"),
        ("DataType", "Flags", "DimensionCount", "Sizes", "Strides", "TotalTensorSizeInBytes",
         "GuaranteedBaseOffsetAlignment"),
    )
    expected_desc = {
        "DataType": int(dml_type),
        "Flags": 0,
        "DimensionCount": len(sizes),
        "Sizes": list(sizes),
        "Strides": None if strides is None else list(strides),
        "TotalTensorSizeInBytes": total,
        "GuaranteedBaseOffsetAlignment": alignment,
    }
    for name, want in expected_desc.items():
        have = desc.get(name)
        if isinstance(have, bool) or have != want or type(have) is not type(want):
            raise ManifestError(
                f"{desc.at(name)} is {json.dumps(have)[:80]}, but {onnx_type.name} {list(shape)} as {dml_type.name} "
                f"({conversion}, min_dims {min_dims}) needs {json.dumps(want)}"
            )
    if offset + total > total_size:
        raise ManifestError(
            f"{where}: bytes {offset}..{offset + total} run past total_size {total_size}"
        )
    return PlanEntry(key, origin, onnx_type, shape, conversion, offset, dml_type, sizes, strides, total,
                     alignment, None)


def _fingerprint_problem(plan: UploadPlan, bin_file: str) -> str | None:
    """Why the .bin does not match the manifest's bin_fingerprint (None when it does)."""
    if plan.bin_fingerprint is None:
        return None
    try:
        converted = plan.converted  # (converted entries have an offset and a total)
        fingerprint = _bin_fingerprint(bin_file, plan.total_size, [e.offset or 0 for e in converted],
                                       [e.total_tensor_size_in_bytes or 0 for e in converted])
    except OSError as exc:
        raise ManifestError(f"cannot read the buffer image {bin_file!r}: {exc.strerror or exc}") from None
    if fingerprint == plan.bin_fingerprint:
        return None
    return (
        f"the buffer image {bin_file!r} does not match the manifest's bin_fingerprint (its sampled bytes "
        "differ): the .bin was replaced or changed after the manifest was written, e.g. by a conversion "
        "killed between renaming the .bin and the .json; convert the model again"
    )


def _check_bin(plan: UploadPlan, bin_file: str, verify: bool, check_fingerprint: bool = True) -> None:
    try:
        st = os.stat(bin_file)
    except OSError as exc:
        raise ManifestError(f"cannot read the buffer image {bin_file!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ManifestError(f"the buffer image {bin_file!r} is not a regular file")
    if st.st_size != plan.total_size:
        raise ManifestError(
            f"the buffer image {bin_file!r} holds {st.st_size} bytes but the manifest's total_size is "
            f"{plan.total_size}; the two files do not belong together (or one was cut short)"
        )
    problem = _fingerprint_problem(plan, bin_file) if check_fingerprint else None
    if problem is not None:
        raise ManifestError(problem)
    if not verify:
        return
    if plan.bin_sha256 is None:
        raise ManifestError(
            "verify=True, but the manifest records no bin_sha256; convert with checksum=True (--checksum)"
        )
    sha = hashlib.sha256()
    try:
        with open(bin_file, "rb") as file:
            for chunk in iter(lambda: file.read(_CHUNK), b""):
                sha.update(chunk)
    except OSError as exc:
        raise ManifestError(f"cannot read the buffer image {bin_file!r}: {exc.strerror or exc}") from None
    if sha.hexdigest() != plan.bin_sha256:
        raise ManifestError(
            f"the buffer image {bin_file!r} has SHA-256 {sha.hexdigest()}, but the manifest records "
            f"{plan.bin_sha256}; the .bin is corrupt or belongs to another manifest"
        )
