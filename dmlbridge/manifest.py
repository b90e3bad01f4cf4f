"""The manifest format (``PREFIX.json``): the spec, its one writer and its validating reader.

A manifest describes an upload image (``PREFIX.bin``): every constant of the model, where its bytes are and how
DirectML sees them. This module turns a :class:`Manifest` (the plan's fields) into the manifest's text and reads
that text back into one, trusting nothing; :mod:`dmlbridge.plan` pairs it with its .bin.

Format ``dmlbridge-upload-plan``, version 3
------------------------------------------
- The file MUST be a UTF-8 JSON object (no duplicate keys, no NaN or Infinity) with exactly these fields:
  ``format`` (the string ``"dmlbridge-upload-plan"``), ``format_version`` (3), ``dmlbridge_version`` (a string),
  ``conversion_id`` (16 lowercase hex digits, random per conversion), ``source`` (the model: ``{"name": string
  or null, "size": integer or null, "sha256": 64 hex digits or null, "external_data": [{"file": string, "size":
  integer}]}``, its file's name, size and SHA-256, and the external data files the conversion read, with their
  sizes), ``target`` (``{"feature_level": "6.4", "supported": [DML type names, sorted], "int64": "emulate" or
  "narrow" or "saturate" (only with allow_lossy), "allow_lossy": bool}``, in the
  canonical form ``Target.describe()`` gives), ``alignment`` (a power of two from 16 to 2^31), ``min_dims`` (0 to
  the target's most dimensions), ``total_size`` (the upload image's size in bytes), ``buffers``, ``selection``
  and ``entries``.
- ``selection`` MUST be ``{"include": [patterns] or null, "exclude": [patterns], "kinds": [kind names] or null,
  "min_bytes": integer}``: which of the model's constants the entries are (:mod:`dmlbridge.selection`; null
  include and kinds, an empty exclude and 0 select every one). At most 1024 patterns per list, each a non-empty
  string of at most 4096 characters; kinds from ``ModelConstant.kind``'s names.
- ``buffers`` MUST be an array of one object ``{"file", "size", "fingerprint", "sha256"}``: the file name of the
  buffer file beside the manifest (no folder; it ends in ``.<conversion_id>.00000.bin``), its size (equal to
  ``total_size``), its fingerprint (64 lowercase hex digits, see :mod:`dmlbridge.fingerprint`) and its SHA-256
  (64 lowercase hex digits) or null when the conversion did not compute it.
- ``entries`` MUST be an array of objects, one per selected constant in model order, each with exactly ``key`` (a
  non-empty string, unique), ``origin`` (a string), ``onnx_type`` (an ONNX type name), ``shape`` (an array of
  at most 64 non-negative integers), ``conversion``, ``offset``, ``dml_type``, ``desc`` and ``skipped``; and
  MAY have ``clamped`` (default null), ``padding`` (default ``"leading"``) and ``consumers`` (default ``[]``),
  which the writer leaves out at their defaults.
- ``consumers`` MUST be an array of ``{"node": string, "op_type": string, "input": integer}``, the node inputs
  that read the constant (:mod:`dmlbridge.consumers`: node keys as constant keys are made, an op type of
  another domain as ``domain:Op``), in graph order. ``padding`` MUST be what they give for the shape and
  ``min_dims``: ``"channel"`` for a 1-D constant that only per-channel inputs read (Conv and ConvTranspose input 2,
  BatchNormalization inputs 1-4, InstanceNormalization inputs 1-2) when ``min_dims`` is 2 or more, whose sizes
  are then ``[1, C, 1, ...]``; ``"mixed"`` when some of its consumers are such inputs and others not (leading
  1s); ``"leading"`` otherwise.
- A skipped entry MUST have ``skipped`` (a non-empty string: why) and null ``conversion``, ``offset``,
  ``dml_type``, ``desc`` and ``clamped``.
- ``clamped`` MUST be null, except in an entry of conversion ``"saturate"`` (INT64/UINT64 written as 4-byte
  values clamped to the 32-bit range, a target with ``"int64": "saturate"``), where it MUST be how many of the
  values were clamped (0 to the number of elements).
- A converted entry MUST have null ``skipped``; ``dml_type`` and ``conversion`` MUST be what the target's
  mapping gives for ``onnx_type``; ``offset`` (in the buffer file) MUST be a multiple of ``alignment``; ``desc``
  MUST be the DML_BUFFER_TENSOR_DESC fields by their DirectML names (DataType, Flags, DimensionCount, Sizes,
  Strides, TotalTensorSizeInBytes, GuaranteedBaseOffsetAlignment), equal to what the layout rules give for the
  shape, ``min_dims`` and ``alignment``; Flags is 0 or 1 (DML_TENSOR_FLAG_OWNED_BY_DML, as the conversion was
  asked).
- Converted entries MUST NOT overlap, and the last one MUST end exactly at ``total_size``.
- A reader MUST refuse a ``format`` or ``format_version`` it does not know, and any field that breaks a rule
  above; it MUST NOT allocate memory on the manifest's word alone. It MUST read a manifest only with the buffer
  files it lists, and check each one's size and fingerprint.
- The writer puts one top-level field per line and one entry per line (readable, diffable, compact); a reader
  MUST NOT depend on that.

The JSON Schema of every version (each field's type and range) ships as ``manifest.schema.json``
(:func:`manifest_schema`).

Versions 1 and 2 are read, no longer written. Version 2 had no ``selection`` (every constant is an entry) and
no ``clamped``, ``padding`` or ``consumers`` (every entry padded with leading 1s).
Version 1 had no ``conversion_id`` and no ``buffers`` either: its one buffer was ``PREFIX.bin`` beside
``PREFIX.json``, described by the top-level fields ``bin_fingerprint`` and, optionally, ``bin_sha256``.

    >>> import tempfile, os, numpy as np, dmlbridge
    >>> from onnx import helper, numpy_helper
    >>> graph = helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.ones(2, np.float32), "w")])
    >>> plan = dmlbridge.convert_model(helper.make_model(graph), os.path.join(tempfile.mkdtemp(), "w"),
    ...                                progress=False)
    >>> text = open(plan.manifest_path).read()
    >>> parse_manifest(text.encode(), "w.json").entries["w"] == plan.entries["w"]
    True
"""

from __future__ import annotations

import json
import math
import os
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from dmlbridge.consumers import Consumer, Padding, padding_of
from dmlbridge.descs import BufferTensorDesc
from dmlbridge.errors import DmlBridgeError, InvalidArgumentError, LayoutError, ManifestError
from dmlbridge.json_fields import INT64_MAX, Fields, int_list, kind_of, parse_json, whole_number
from dmlbridge.mapping import resolve
from dmlbridge.options import MAX_ALIGNMENT, MAX_KEY_LENGTH
from dmlbridge.planning import PlanEntries, PlanEntry, entry_layout
from dmlbridge.selection import EVERY_CONSTANT, Selection
from dmlbridge.target import Target
from dmlbridge.types import DmlDataType, FeatureLevel, OnnxDataType

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_FORMAT_VERSION",
    "READABLE_VERSIONS",
    "BufferFile",
    "Manifest",
    "entry_lines",
    "manifest_document",
    "manifest_schema",
    "manifest_text",
    "parse_manifest",
]

MANIFEST_FORMAT = "dmlbridge-upload-plan"
MANIFEST_FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
_CONVERSION_ID = re.compile(r"^[0-9a-f]{16}$")
_CONVERSIONS = ("native", "widen", "emulate", "narrow", "saturate", "lossy")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LINES_AT_ONCE = 4096
_DESC_FIELDS = tuple(BufferTensorDesc(0, 0, (), None, 0, 0).as_dict())  # DataType, Flags, DimensionCount, ...


@dataclass(frozen=True)
class BufferFile:
    """One buffer file of a written plan: its ``path`` (as the manifest names it, relative to the manifest's
    folder; an ``UploadPlan`` gives it joined to that folder), its ``size`` in bytes, its ``fingerprint`` (see
    :mod:`dmlbridge.fingerprint`) and, when the conversion computed it (``checksum=True``), its ``sha256``.

    Example:
        >>> BufferFile("w.0123456789abcdef.00000.bin", 256, "0" * 64, None).size
        256
    """

    path: str
    size: int
    fingerprint: str
    sha256: str | None = None


@dataclass(frozen=True, eq=False)
class Manifest:
    """What a manifest holds: a plan without its open files (``UploadPlan`` adds them). ``buffers`` is empty for a
    plan that was not written; ``conversion_id`` is None there and in format-1 manifests."""

    entries: Mapping[str, PlanEntry]
    target: Target
    alignment: int
    min_dims: int
    total_size: int
    source_name: str | None
    source_size: int | None
    dmlbridge_version: str
    conversion_id: str | None = None
    buffers: tuple[BufferFile, ...] = ()
    format_version: int = MANIFEST_FORMAT_VERSION
    source_sha256: str | None = None
    """The SHA-256 of the model's bytes (None in format-1 manifests)."""
    source_external: tuple[tuple[str, int], ...] = ()
    """The external data files the conversion read: (location, size), sorted."""
    selection: Selection = EVERY_CONSTANT
    """Which of the model's constants the plan holds (format 3; every one before)."""

    @property
    def bin_sha256(self) -> str | None:
        """The SHA-256 of the buffer file, when there is one and it was computed (``buffers[0].sha256``)."""
        return self.buffers[0].sha256 if len(self.buffers) == 1 else None

    @property
    def bin_fingerprint(self) -> str | None:
        """The fingerprint of the buffer file, when there is one (``buffers[0].fingerprint``)."""
        return self.buffers[0].fingerprint if len(self.buffers) == 1 else None


# --- writing -------------------------------------------------------------------------------------------------


def _head(manifest: Manifest) -> dict[str, Any]:
    """The manifest's fields before ``entries`` (always the current format version)."""
    return {
        "format": MANIFEST_FORMAT,
        "format_version": MANIFEST_FORMAT_VERSION,
        "dmlbridge_version": manifest.dmlbridge_version,
        "conversion_id": manifest.conversion_id,
        "source": {
            "name": manifest.source_name, "size": manifest.source_size, "sha256": manifest.source_sha256,
            "external_data": [{"file": file, "size": size} for file, size in manifest.source_external],
        },
        "target": manifest.target.describe(),
        "alignment": manifest.alignment,
        "min_dims": manifest.min_dims,
        "total_size": manifest.total_size,
        "buffers": [
            {"file": os.path.basename(b.path), "size": b.size, "fingerprint": b.fingerprint, "sha256": b.sha256}
            for b in manifest.buffers
        ],
        "selection": manifest.selection.describe(),
    }


def manifest_document(manifest: Manifest) -> dict[str, Any]:
    """The manifest as a dict (what ``json.loads`` of :func:`manifest_text` gives)."""
    doc = _head(manifest)
    doc["entries"] = [entry.to_json() for entry in manifest.entries.values()]
    return doc


def manifest_text(manifest: Manifest, lines: list[str] | None = None) -> str:
    """The manifest's text: ``json.dumps`` of each top-level field on a line of its own, and of each entry, made
    without a dict and a json.dumps call per entry (a model can hold 100,000 constants). ``lines``: the entries'
    lines, as :func:`entry_lines` made them."""
    head = [f"  {_json(k)}: {_json(v)}" for k, v in _head(manifest).items()]
    return _assemble(head, entry_lines(manifest.entries) if lines is None else lines)


def entry_lines(entries: Mapping[str, PlanEntry], limit: int | None = None) -> list[str]:
    """The manifest's entry lines; InvalidArgumentError, before more than about ``limit`` bytes are made, when
    they would take more (each key is at most MAX_KEY_LENGTH characters, so a line is at most about 76 KiB)."""
    if not isinstance(entries, PlanEntries):
        lines = [_entry_json(entry) for entry in entries.values()]
        _check_size(sum(map(len, lines)), len(lines), limit)
        return lines
    keys, origins, offsets, pairs = entries.columns()
    consumers = entries.consumers
    unique = {id(pair): pair for pair in pairs}
    shared = {ident: _shared_json(pair.fields) for ident, pair in unique.items() if pair.total >= 0}
    lines, size = [], 0
    for first in range(0, len(keys), _LINES_AT_ONCE):  # made in pieces: a refused manifest is never all made
        stop = min(first + _LINES_AT_ONCE, len(keys))
        clamped = entries.clamped
        texts = [None if i in clamped else shared.get(id(pairs[i])) for i in range(first, stop)]
        piece = [
            f'    {{"key": {_quote(key)}, "origin": {_quote(origin)}, {text[0]}{offset}{text[1]}'
            f'{_consumers_json(read_by) if read_by else "}"}'
            if text is not None else _entry_json(entries[key])
            for key, origin, offset, read_by, text in zip(
                keys[first:stop], origins[first:stop], offsets[first:stop], consumers[first:stop],
                texts, strict=True)
        ]
        size += sum(map(len, piece))
        _check_size(size, len(keys), limit)
        lines += piece
    return lines


def _check_size(size: int, count: int, limit: int | None) -> None:
    if limit is not None and size > limit:
        raise InvalidArgumentError(
            f"the manifest of these {count} constants would take more than max_manifest_bytes={limit} bytes "
            f"({limit / 2**20:.3g} MiB; --max-manifest-bytes on the command line), which load_plan also needs to "
            "read it; raise the limit on both if you trust this model"
        )


def _assemble(head: list[str], entries: list[str]) -> str:
    """The manifest text from its top-level field lines and entry lines, joined once (a large model's manifest
    is megabytes: each extra copy costs)."""
    if not entries:
        return "{\n" + ",\n".join([*head, '  "entries": []']) + "\n}\n"
    opening, closing = "".join(["{\n", *[line + ",\n" for line in head], '  "entries": [\n']), "\n  ]\n}\n"
    if len(entries) == 1:
        return opening + entries[0] + closing
    return ",\n".join([opening + entries[0], *entries[1:-1], entries[-1] + closing])


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, allow_nan=False)


_quote = json.encoder.encode_basestring_ascii  # what json.dumps(ensure_ascii=True) uses for every string


_OFFSET_MARK = 2**62 + 12345  # an offset no plan has: where the entry's own offset goes in its pair's text


def _shared_json(fields: Mapping[str, Any]) -> tuple[str, str]:
    """The text of a converted entry's manifest line around its offset, after its key and origin: json.dumps of
    an entry with the fields it shares with the entries of its type and shape, cut at the offset."""
    text = _json(PlanEntry(**{**fields, "key": "", "origin": "", "offset": _OFFSET_MARK}).to_json())
    head, tail = text.split(f'"offset": {_OFFSET_MARK}', 1)
    return head[len('{"key": "", "origin": "", ') :] + '"offset": ', tail[:-1]  # (each line adds consumers and })


def _consumers_json(consumers: tuple[Consumer, ...]) -> str:
    """The end of an entry's line: its consumers, when it has any, and the closing brace."""
    return f', "consumers": {_json([consumer._asdict() for consumer in consumers])}}}' if consumers else "}"


def _entry_json(entry: PlanEntry) -> str:
    """``"    " + json.dumps(entry.to_json())``."""
    return "    " + _json(entry.to_json())


# --- reading -------------------------------------------------------------------------------------------------


def manifest_schema() -> dict[str, Any]:
    """The JSON Schema of every manifest format version this dmlbridge writes or reads (the package's
    ``manifest.schema.json``): each field's type and range; the rules between fields are :func:`parse_manifest`'s.

    Example:
        >>> sorted(manifest_schema()["$defs"]["version3"]["properties"])[:3]
        ['buffers', 'conversion_id', 'entries']
    """
    text = resources.files("dmlbridge").joinpath("manifest.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def parse_manifest(raw: bytes, where: str, bin_name: str = "") -> Manifest:
    """The manifest in ``raw`` (the bytes of a PREFIX.json), every rule of its format version checked;
    ManifestError names ``where`` and what is wrong. ``bin_name``: the name a format-1 manifest's .bin has."""
    return _manifest_from_json(parse_json(raw, where), f"manifest {where!r}", bin_name)


def _manifest_from_json(document: Any, where: str, bin_name: str) -> Manifest:
    """``bin_name``: the name a format-1 manifest's .bin has (format 2 lists its buffer files)."""
    if isinstance(document, dict) and document.get("format") == MANIFEST_FORMAT:
        version = whole_number(document.get("format_version"), f"{where}.format_version", 0, INT64_MAX)
        if version not in READABLE_VERSIONS:
            raise ManifestError(
                f"{where} has format_version {version}; this dmlbridge reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))} (a newer dmlbridge may read it)"
            )
    else:
        version = MANIFEST_FORMAT_VERSION
    if version == 1:
        top = Fields(document, where, ("format", "format_version", "dmlbridge_version", "source", "target",
                                         "alignment", "min_dims", "total_size", "bin_fingerprint", "entries"),
                      ("bin_sha256",))
    else:
        top = Fields(document, where, ("format", "format_version", "dmlbridge_version", "conversion_id", "source",
                                         "target", "alignment", "min_dims", "total_size", "buffers", "entries")
                      + (("selection",) if version >= 3 else ()))
    if top.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"{where} is not a dmlbridge upload plan (format {top.get('format')!r})")
    dmlbridge_version = top.string("dmlbridge_version")
    source = Fields(top.get("source"), top.at("source"),
                     ("name", "size") if version == 1 else ("name", "size", "sha256", "external_data"))
    source_name = source.string("name", nullable=True)
    source_size = source.integer("size", nullable=True)
    source_sha256 = None if version == 1 else _sha256(source, "sha256", nullable=True)
    source_external = () if version == 1 else _external_from_json(source.get("external_data"),
                                                                 source.at("external_data"))
    target = _target_from_json(top.get("target"), top.at("target"))
    alignment = top.integer("alignment", 16, MAX_ALIGNMENT)
    if alignment & (alignment - 1):
        raise ManifestError(f"{top.at('alignment')} is {alignment}, not a power of two")
    min_dims = top.integer("min_dims", 0, target.max_dimension_count)
    total_size = top.integer("total_size")
    conversion_id = None
    buffers: tuple[BufferFile, ...]
    if version == 1:
        fingerprint = _sha256(top, "bin_fingerprint", nullable=False)
        buffers = (BufferFile(bin_name, total_size, fingerprint, _sha256(top, "bin_sha256", nullable=True)),)
    else:
        conversion_id = top.string("conversion_id")
        if not _CONVERSION_ID.match(conversion_id):
            raise ManifestError(
                f"{top.at('conversion_id')} must be 16 lowercase hex digits, got {conversion_id[:80]!r}"
            )
        buffers = _buffers_from_json(top.get("buffers"), top.at("buffers"), conversion_id, total_size)
    selection = EVERY_CONSTANT if version < 3 else _selection_from_json(top.get("selection"), top.at("selection"))
    raw_entries = top.get("entries")
    if not isinstance(raw_entries, list):
        raise ManifestError(f"{top.at('entries')} must be an array, got {kind_of(raw_entries)}")
    entries: dict[str, PlanEntry] = {}
    layouts: dict[tuple[Any, ...], Any] = {}  # (see _entry_from_json)
    for index, raw in enumerate(raw_entries):
        entry = _entry_from_json(raw, f"{where}: entries[{index}]", target, alignment, min_dims, total_size,
                                 layouts, version)
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
    return Manifest(types.MappingProxyType(entries), target, alignment, min_dims, total_size, source_name,
                    source_size, dmlbridge_version, conversion_id, buffers, version, source_sha256, source_external,
                    selection)


def _consumers_from_json(value: Any, where: str) -> tuple[Consumer, ...]:
    if not isinstance(value, list) or len(value) > 1 << 20:
        raise ManifestError(f"{where} must be an array of at most 2^20 consumers, got {kind_of(value)}")
    consumers = []
    for index, item in enumerate(value):
        fields = Fields(item, f"{where}[{index}]", ("node", "op_type", "input"))
        node, op_type = fields.string("node", nonempty=True), fields.string("op_type", nonempty=True)
        if len(node) > 4 * MAX_KEY_LENGTH or len(op_type) > MAX_KEY_LENGTH:
            raise ManifestError(f"{where}[{index}] has a node key or op type longer than the limits of keys")
        consumers.append(Consumer(node, op_type, fields.integer("input", 0, 2**31 - 1)))
    return tuple(consumers)


def _selection_from_json(value: Any, where: str) -> Selection:
    fields = Fields(value, where, ("include", "exclude", "kinds", "min_bytes"))
    try:
        return Selection.check(fields.get("include"), fields.get("exclude"), fields.get("kinds"),
                               fields.integer("min_bytes"))
    except InvalidArgumentError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def _external_from_json(value: Any, where: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, list) or len(value) > 1 << 16:
        raise ManifestError(f"{where} must be an array of at most 65536 files, got {kind_of(value)}")
    files = []
    for index, item in enumerate(value):
        fields = Fields(item, f"{where}[{index}]", ("file", "size"))
        files.append((fields.string("file", nonempty=True)[:4096], fields.integer("size")))
    return tuple(files)


def _sha256(fields: Fields, key: str, nullable: bool) -> Any:
    digest = fields.string(key, nullable=nullable)
    if digest is not None and not _SHA256.match(digest):
        raise ManifestError(f"{fields.at(key)} must be 64 lowercase hex digits, got {digest[:80]!r}")
    return digest


def _buffers_from_json(value: Any, where: str, conversion_id: str, total_size: int) -> tuple[BufferFile, ...]:
    """The buffer files of a format-2 manifest: exactly one, named for the conversion, plain file names only."""
    if not isinstance(value, list) or len(value) != 1:
        raise ManifestError(f"{where} must be an array of one buffer file, got {kind_of(value)}")
    fields = Fields(value[0], f"{where}[0]", ("file", "size", "fingerprint", "sha256"))
    name = fields.string("file", nonempty=True)
    if (
        len(name.encode("utf-8", "surrogatepass")) > 255 or "/" in name or "\\" in name or ":" in name
        or "\x00" in name or name.startswith(".") or not name.endswith(f".{conversion_id}.00000.bin")
    ):
        raise ManifestError(
            f"{fields.at('file')} is {name[:80]!r}; it must be a file name beside the manifest (no folder) ending "
            f"in .{conversion_id}.00000.bin"
        )
    size = fields.integer("size")
    if size != total_size:
        raise ManifestError(f"{fields.at('size')} is {size} but total_size is {total_size}; the two must agree")
    return (BufferFile(name, size, _sha256(fields, "fingerprint", False), _sha256(fields, "sha256", True)),)


def _target_from_json(value: Any, where: str) -> Target:
    fields = Fields(value, where, ("feature_level", "supported", "int64", "allow_lossy"))
    supported = fields.get("supported")
    if not isinstance(supported, list) or not all(isinstance(s, str) for s in supported):
        raise ManifestError(f"{fields.at('supported')} must be an array of DML type names, got {kind_of(supported)}")
    if not isinstance(fields.get("allow_lossy"), bool):
        raise ManifestError(
            f"{fields.at('allow_lossy')} must be true or false, got {kind_of(fields.get('allow_lossy'))}"
        )
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


def _demanded(
    fields: Fields, onnx_type: OnnxDataType, shape: tuple[int, ...], dml_name: str, conversion: str, flags: int,
    padding: Padding, target: Target, alignment: int, min_dims: int,
) -> tuple[DmlDataType, tuple[int, ...], tuple[int, ...] | None, int, dict[str, Any]]:
    """What the target's mapping and the layout rules demand of a converted entry of this type and shape: its
    DML type, sizes, strides, total and desc (ManifestError when the entry's type or conversion is not theirs)."""
    if conversion not in _CONVERSIONS:
        raise ManifestError(f"{fields.at('conversion')} is {conversion[:40]!r}, not one of {', '.join(_CONVERSIONS)}")
    dml_type = DmlDataType.__members__.get(dml_name)
    if dml_type is None or dml_type is DmlDataType.UNKNOWN:
        raise ManifestError(f"{fields.at('dml_type')} is {dml_name[:40]!r}, not a DirectML data type name")
    row = resolve(onnx_type, target)
    if row.dml_type is not dml_type or row.conversion != conversion:
        expected = "unsupported" if row.dml_type is None else f"{row.dml_type.name} ({row.conversion})"
        raise ManifestError(
            f"{fields.where} says {onnx_type.name} -> {dml_type.name} ({conversion}), but the manifest's target maps "
            f"{onnx_type.name} to {expected}"
        )
    try:
        sizes, strides, total = entry_layout(onnx_type, shape, dml_type, conversion, min_dims,
                                             target.max_dimension_count, padding)
    except LayoutError as exc:
        raise ManifestError(f"{fields.at('shape')} {list(shape)} cannot be a DirectML tensor: {exc}") from None
    desc = BufferTensorDesc(dml_type, flags, sizes, strides, total, alignment).as_dict()
    return dml_type, sizes, strides, total, desc


_ENTRY_FIELDS = ("key", "origin", "onnx_type", "shape", "conversion", "offset", "dml_type", "desc", "skipped")


def _entry_from_json(
    raw: Any, where: str, target: Target, alignment: int, min_dims: int, total_size: int,
    layouts: dict[tuple[Any, ...], Any], version: int,
) -> PlanEntry:
    fields = Fields(raw, where, _ENTRY_FIELDS, ("clamped", "padding", "consumers") if version >= 3 else ())
    key = fields.string("key", nonempty=True)
    where = f"{where} ({key[:80]!r})"
    fields.where = where
    origin = fields.string("origin")
    type_name = fields.string("onnx_type")
    onnx_type = OnnxDataType.__members__.get(type_name)
    if onnx_type is None or onnx_type is OnnxDataType.UNDEFINED:
        raise ManifestError(f"{fields.at('onnx_type')} is {type_name[:40]!r}, not an ONNX data type name")
    shape = int_list(fields.get("shape"), fields.at("shape"))
    consumers: tuple[Consumer, ...] = ()
    padding: Padding = "leading"
    if version >= 3:
        consumers = _consumers_from_json(fields.value.get("consumers", []), fields.at("consumers"))
        padding = padding_of(shape, consumers, min_dims)
        if fields.value.get("padding", "leading") != padding:
            raise ManifestError(
                f"{fields.at('padding')} is {json.dumps(fields.value.get('padding', 'leading'))[:40]}, but a "
                f"{len(shape)}-D constant "
                f"with these consumers at min_dims {min_dims} is padded {json.dumps(padding)}"
            )
    skipped = fields.string("skipped", nullable=True)
    if skipped is not None:
        if not skipped:
            raise ManifestError(f"{fields.at('skipped')} is empty; a skipped entry must say why")
        for name in ("conversion", "offset", "dml_type", "desc", "clamped"):
            if fields.get(name) is not None:
                raise ManifestError(f"{where} is skipped but has a {name}; a skipped entry has no bytes")
        return PlanEntry(key, origin, onnx_type, shape, None, None, None, None, None, None, None, skipped,
                         padding=padding, consumers=consumers)

    conversion = fields.string("conversion")
    dml_name = fields.string("dml_type")
    offset = fields.integer("offset")
    if offset % alignment:
        raise ManifestError(f"{fields.at('offset')} {offset} is not a multiple of the alignment {alignment}")
    desc = Fields(fields.get("desc"), fields.at("desc"), _DESC_FIELDS)
    flags = desc.get("Flags") if desc.get("Flags") in (0, 1) and type(desc.get("Flags")) is int else 0
    # What the type, shape, conversion and flags demand is worked out once for each (a model may have 100,000
    # entries of a few shapes).
    cache_key = (onnx_type, shape, dml_name, conversion, flags, padding)
    demanded = layouts.get(cache_key)
    if demanded is None:
        demanded = _demanded(fields, onnx_type, shape, dml_name, conversion, flags, padding, target, alignment,
                             min_dims)
        layouts[cache_key] = demanded
    dml_type, sizes, strides, total, expected_desc = demanded
    for name, want in expected_desc.items():
        have = desc.get(name)
        if have != want or type(have) is not type(want):  # (type: JSON's true is not the number 1)
            raise ManifestError(
                f"{desc.at(name)} is {json.dumps(have)[:80]}, but {onnx_type.name} {list(shape)} as {dml_type.name} "
                f"({conversion}, min_dims {min_dims}) needs {json.dumps(want)}"
            )
    if offset + total > total_size:
        raise ManifestError(
            f"{where}: bytes {offset}..{offset + total} run past total_size {total_size}"
        )
    clamped = None
    if conversion == "saturate" and version >= 3:  # (how many values were clamped: at most every one)
        clamped = fields.integer("clamped", 0, math.prod(shape))
    elif fields.get("clamped") is not None:
        raise ManifestError(f"{fields.at('clamped')} must be null: only a saturate entry counts clamped values")
    return PlanEntry(key, origin, onnx_type, shape, conversion, offset, dml_type, sizes, strides, total,
                     alignment, None, flags, clamped, padding, consumers)


