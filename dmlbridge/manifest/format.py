"""The manifest format (``PREFIX.json``): its one writer and its validating reader.

A manifest describes an upload image (its buffer files): every constant of the model, which buffer file holds its
bytes, where, and how DirectML sees them. This module turns a :class:`Manifest` (the plan's fields) into the
manifest's text and reads that text back into one, trusting nothing (each part through ``sections``, beside it);
``plan.upload_plan`` pairs it with its buffer files.

The specification is docs/manifest.md, and only there: format ``dmlbridge-upload-plan``, version
:data:`MANIFEST_FORMAT_VERSION` written, every version of :data:`READABLE_VERSIONS` read, each checked by the rules
of its own version. The JSON Schema of every version (each field's type and range) ships as
``dmlbridge/manifest/schema.json`` (:func:`manifest_schema`). tests/whole/test_docs.py holds the specification, the
schema and these constants together.

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

import itertools
import json
import os
import re
import types
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

import numpy as np

from dmlbridge.errors import InvalidArgumentError, ManifestError, counted
from dmlbridge.manifest.free_sizes import graph_inputs_from_json, graph_inputs_json, shapes_from_json
from dmlbridge.manifest.json_fields import INT64_MAX, Fields, kind_of, parse_json, whole_number
from dmlbridge.manifest.sections import (
    BufferFile,
    buffers_from_json,
    check_buffers_filled,
    check_cpu_read_apart,
    entry_from_json,
    external_from_json,
    quantized_from_json,
    selection_from_json,
    sha256_field,
    target_from_json,
    uploaded_buffers,
)
from dmlbridge.model.consumers import PER_OPERATOR_VERSION, Consumer
from dmlbridge.model.shapes import NO_SHAPES, GivenShapes, GraphInputs
from dmlbridge.placement.cpu_read import UPLOADS, Upload
from dmlbridge.placement.entries import PlanEntries, PlanEntry
from dmlbridge.placement.options import MAX_ALIGNMENT, MAX_BUFFER_BYTES
from dmlbridge.placement.selection import EVERY_CONSTANT, Selection
from dmlbridge.quantized.records import QuantizedWeight, part_keys
from dmlbridge.system.files import NotRegularFileError, open_regular, read_at
from dmlbridge.tensor.descs import BufferTensorDesc
from dmlbridge.types.target import Target

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_FORMAT_VERSION",
    "READABLE_VERSIONS",
    "BufferFile",
    "Manifest",
    "check_manifest_size",
    "entries_size",
    "graph_inputs_json",
    "manifest_chunks",
    "manifest_document",
    "manifest_schema",
    "manifest_text",
    "parse_manifest",
    "read_manifest_file",
]

MANIFEST_FORMAT = "dmlbridge-upload-plan"
MANIFEST_FORMAT_VERSION = 7
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7)
_CONVERSION_ID = re.compile(r"^[0-9a-f]{16}$")
_CONVERSIONS = ("native", "widen", "emulate", "narrow", "saturate", "lossy")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LINES_AT_ONCE = 4096
_DESC_FIELDS = tuple(BufferTensorDesc(0, 0, (), None, 0, 0).as_dict())  # DataType, Flags, DimensionCount, ...


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
    """The format version whose rules the entries follow: the current one, or an older manifest's when read from
    one (verification compares its layout with the model by that version's rules)."""
    source_sha256: str | None = None
    """The SHA-256 of the model's bytes (None in format-1 manifests)."""
    source_external: tuple[tuple[str, int], ...] = ()
    """The external data files the conversion read: (location, size), sorted."""
    selection: Selection = EVERY_CONSTANT
    """Which of the model's constants the plan holds (format 3; every one before)."""
    max_buffer_bytes: int | None = None
    """The largest buffer file the conversion could write (format 4; None before: one buffer of any size)."""
    quantized_records: dict[str, QuantizedWeight] = field(default_factory=dict)
    """The quantized weights, by node key (format 4; none before); ``UploadPlan.quantized`` gives them."""
    shapes: GivenShapes = NO_SHAPES
    """The sizes the conversion was given for the model's free dimensions (``input_shapes``, ``dim_params``;
    format 7: none before)."""
    upload: Upload = "all"
    """What the upload buffers hold (format 7; "all" before): "bound" leaves the constants read on the CPU out of
    them, in buffers of their own after them (:mod:`dmlbridge.placement.cpu_read`)."""
    uploaded_buffers: int | None = None
    """How many buffers, from the first, a program uploads (None: all of them); the others hold the constants
    read on the CPU (``BufferFile.uploaded`` is False)."""
    graph_inputs: GraphInputs = ()
    """The shapes the model's graph inputs declare, by name, in order: a size, a free dimension's ``dim_param``
    name, or None (free, unnamed); a shape None where none is declared. Recorded when a graph input names a free
    dimension (format 7: none before), so that ``load_plan`` checks and applies the sizes it is given."""

    @property
    def bin_sha256(self) -> str | None:
        """The SHA-256 of the buffer file, when there is one and it was computed (``buffers[0].sha256``)."""
        return self.buffers[0].sha256 if len(self.buffers) == 1 else None

    @property
    def bin_fingerprint(self) -> str | None:
        """The fingerprint of the buffer file, when there is one (``buffers[0].fingerprint``)."""
        return self.buffers[0].fingerprint if len(self.buffers) == 1 else None

    @property
    def buffer_sizes(self) -> tuple[int, ...]:
        """The size of each buffer, in order: the buffer files' sizes, or for a plan that was not written
        (``plan_model``) the sizes conversion would give them, so a ``max_buffer_bytes`` can be chosen first.

        Example:
            >>> import dmlbridge, numpy as np
            >>> from onnx import helper, numpy_helper
            >>> ws = [numpy_helper.from_array(np.ones(64, np.float32), name) for name in ("a", "b", "c")]
            >>> model = helper.make_model(helper.make_graph([], "g", [], [], ws))
            >>> dmlbridge.plan_model(model, max_buffer_bytes=512).buffer_sizes
            (512, 256)
        """
        if self.buffers:
            return tuple(buffer.size for buffer in self.buffers)
        sizes = [0]
        for entry in self.entries.values():
            if entry.buffer is None or entry.end is None:
                continue
            if entry.buffer == len(sizes):
                sizes.append(0)
            sizes[entry.buffer] = max(sizes[entry.buffer], entry.end)
        return tuple(sizes)

    @property
    def upload_buffer_count(self) -> int:
        """How many buffers, from the first, a program uploads: all but those of the constants read on the CPU
        (``upload="bound"``: ``buffers[i].uploaded`` is False for the others, whose values a program reads with
        ``UploadPlan.array`` to pass them as attributes).

        Example:
            >>> import dmlbridge, numpy as np
            >>> from onnx import helper, numpy_helper
            >>> w, shape = (numpy_helper.from_array(np.array(v), n) for v, n in (([1.5, 2.5], "w"), ([2, 1], "s")))
            >>> node = helper.make_node("Reshape", ["w", "s"], ["y"])
            >>> y = helper.make_tensor_value_info("y", 1, None)
            >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([node], "g", [], [y], [w, shape])))
            >>> plan.entries["s"].reads_on, plan.entries["s"].buffer, plan.upload_buffer_count, plan.upload_size
            ('cpu', 1, 1, 16)
        """
        return len(self.buffer_sizes) if self.uploaded_buffers is None else self.uploaded_buffers

    @property
    def upload_size(self) -> int:
        """The bytes a program uploads: the sizes of the first :attr:`upload_buffer_count` buffers (``total_size``
        counts the buffers of the CPU-read constants too)."""
        return sum(self.buffer_sizes[: self.upload_buffer_count])


# --- writing -------------------------------------------------------------------------------------------------


def _head(manifest: Manifest) -> dict[str, Any]:
    """The manifest's fields before ``entries``: those of the current format version, and the manifest's own
    ``format_version`` (the current one, unless it was read from an older manifest: its entries follow that
    version's layout rules)."""
    return {
        "format": MANIFEST_FORMAT,
        "format_version": manifest.format_version,
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
        "max_buffer_bytes": manifest.max_buffer_bytes,
        "buffers": [
            {"file": os.path.basename(b.path), "size": b.size, "fingerprint": b.fingerprint, "sha256": b.sha256,
             **({} if b.uploaded else {"uploaded": False})}
            for b in manifest.buffers
        ],
        "selection": manifest.selection.describe(),
        "quantized": [record.to_json() for record in manifest.quantized_records.values()],
        # (Left out when none were given: the manifests of models with no free sizes stay as they were.)
        **({} if manifest.shapes == NO_SHAPES else {"shapes": manifest.shapes.to_json()}),
        **({"upload": manifest.upload} if manifest.format_version >= PER_OPERATOR_VERSION else {}),
        **({} if not manifest.graph_inputs or manifest.format_version < PER_OPERATOR_VERSION else
           {"graph_inputs": graph_inputs_json(manifest.graph_inputs)}),
    }


def manifest_document(manifest: Manifest) -> dict[str, Any]:
    """The manifest as a dict (what ``json.loads`` of :func:`manifest_text` gives)."""
    doc = _head(manifest)
    doc["entries"] = [entry.to_json(manifest.format_version) for entry in manifest.entries.values()]
    return doc


def manifest_text(manifest: Manifest) -> str:
    """The manifest's text: ``json.dumps`` of each top-level field on a line of its own, and of each entry (what
    :func:`manifest_chunks` gives, whole)."""
    return b"".join(manifest_chunks(manifest)).decode("ascii")


def manifest_chunks(manifest: Manifest) -> Iterator[bytes]:
    """The manifest's text as ASCII bytes, a few thousand entry lines at a time: what a writer streams into its
    file, so that the manifest of a million constants (hundreds of MiB) is never whole in memory. Each entry line
    is made without a dict and a json.dumps call per entry (a model can hold 100,000 constants)."""
    head = [f"  {_json(k)}: {_json(v)}" for k, v in _head(manifest).items()]
    pieces = _entry_pieces(manifest.entries)
    previous = next(pieces, None)
    if previous is None:
        yield ("{\n" + ",\n".join([*head, '  "entries": []']) + "\n}\n").encode("ascii")
        return
    yield "".join(["{\n", *[line + ",\n" for line in head], '  "entries": [\n']).encode("ascii")
    for piece in pieces:
        yield (",\n".join(previous) + ",\n").encode("ascii")
        previous = piece
    yield (",\n".join(previous) + "\n  ]\n}\n").encode("ascii")


def check_manifest_size(entries: Mapping[str, PlanEntry], limit: int,
                        graph_inputs: GraphInputs = ()) -> None:
    """InvalidArgumentError when the manifest's entry lines (and its ``graph_inputs`` line) would take more than
    ``limit`` bytes, worked out without making them (each key is at most MAX_KEY_LENGTH characters, so a line is at
    most about 76 KiB): an upper bound first (what every key's and origin's characters could take escaped), the
    exact size only when that passes the limit."""
    head = len(_json(graph_inputs_json(graph_inputs))) if graph_inputs else 0
    if head + _entries_size(entries, bound=True) > limit:
        _check_size(head + entries_size(entries), len(entries), limit)


def entries_size(entries: Mapping[str, PlanEntry]) -> int:
    """``sum(map(len, lines))`` of the manifest's entry lines, worked out from the plan's columns without making
    them.

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.ones(2, np.float32), "w")
        >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([], "g", [], [], [w])))
        >>> entries_size(plan.entries) == len(manifest_text(plan).splitlines()[-3])
        True
    """
    return _entries_size(entries, bound=False)


# A character of a key or an origin takes at most 12 in JSON (an astral one: two \uXXXX escapes); an offset has at
# most 10 digits (a buffer is at most 0xFFFF0000 bytes), a buffer index at most 3.
_MOST_PER_CHARACTER, _MOST_OFFSET_DIGITS, _MOST_BUFFER_DIGITS = 12, 10, 3


def _entries_size(entries: Mapping[str, PlanEntry], bound: bool) -> int:
    """The size of the entry lines :func:`_entry_pieces` makes (``bound``: an upper bound of it, cheaper), from
    the columns: a line is its key, origin, offset and consumers around the text its pair shares, so only those
    are measured per entry, each column in one pass."""
    if not isinstance(entries, PlanEntries):
        return sum(len(_entry_json(entry)) for entry in entries.values())
    keys, origins, offsets, pairs = entries.columns()
    consumers, buffers, clamped = entries.consumers, entries.buffers, entries.clamped
    several = any(buffers)
    shared, kinds = _shared_texts(pairs, several)
    widths = {ident: len(head) + len(tail) for ident, (head, tail) in shared.items()}
    alone = sorted(clamped)  # the entries whose line is their own json: clamped ones, and skipped ones
    if len(widths) < kinds:
        alone += np.flatnonzero(np.fromiter(map(widths.__contains__, map(id, pairs)), bool, len(pairs)) == 0).tolist()
        alone = sorted(set(alone))
    size = sum(len(_entry_json(entries.at(i, keep=False))) for i in alone)
    count = len(keys) - len(alone)
    if not count:
        return size
    shared_rows = None
    if alone:
        shared_rows = bytearray(b"\x01") * len(keys)
        for i in alone:
            shared_rows[i] = 0

    def rows(column: list[Any]) -> Iterable[Any]:
        return column if shared_rows is None else itertools.compress(column, shared_rows)

    size += 27 * count  # '    {"key": ', ', "origin": ', ', ' and the closing brace
    size += sum(len(_consumers_json(read_by)) - 1 for read_by in filter(None, rows(consumers)))
    if several:
        size += len(', "offset": ') * count
    if bound:
        characters = sum(map(len, rows(keys))) + sum(map(len, rows(origins)))
        return (size + _MOST_PER_CHARACTER * characters + 4 * count
                + (max(widths.values()) + _MOST_OFFSET_DIGITS + several * _MOST_BUFFER_DIGITS) * count)
    size += sum(map(len, map(_quote, rows(keys)))) + sum(map(len, map(_quote, rows(origins))))
    size += _digits(np.fromiter(rows(offsets), np.int64, count)) + sum(map(widths.__getitem__, map(id, rows(pairs))))
    if several:
        size += _digits(np.fromiter(rows(buffers), np.int64, count))
    return size


def _digits(values: np.ndarray) -> int:
    """The decimal digits of non-negative integers below 10^19, all told (``sum(len(str(v)) for v in values)``)."""
    return len(values) + sum(int(np.count_nonzero(values >= 10**k)) for k in range(1, 19))


def _shared_texts(pairs: list[Any], several: bool) -> tuple[dict[int, tuple[str, str]], int]:
    """Per pair (by id) that is converted, the text of its entries' lines around their offset (and buffer):
    :func:`_shared_json`'s; and how many pairs there are, skipped ones included."""
    unique = dict(zip(map(id, pairs), pairs, strict=True))
    return {ident: _shared_json(pair.fields, None if several else 0)
            for ident, pair in unique.items() if pair.total >= 0}, len(unique)


def _entry_pieces(entries: Mapping[str, PlanEntry]) -> Iterator[list[str]]:
    """The manifest's entry lines, _LINES_AT_ONCE at a time."""
    if not isinstance(entries, PlanEntries):
        values = list(entries.values())
        for first in range(0, len(values), _LINES_AT_ONCE):
            yield [_entry_json(entry) for entry in values[first : first + _LINES_AT_ONCE]]
        return
    keys, origins, offsets, pairs = entries.columns()
    consumers, buffers = entries.consumers, entries.buffers
    several = any(buffers)  # (one buffer, the usual case: "buffer": 0 goes into each pair's shared text)
    shared = _shared_texts(pairs, several)[0]
    clamped = entries.clamped
    for first in range(0, len(keys), _LINES_AT_ONCE):
        stop = min(first + _LINES_AT_ONCE, len(keys))
        texts = [None if i in clamped else shared.get(id(pairs[i])) for i in range(first, stop)]
        if several:
            texts = [None if text is None else (f"{text[0]}{buffer}, \"offset\": ", text[1])
                     for text, buffer in zip(texts, buffers[first:stop], strict=True)]
        yield [
            f'    {{"key": {_quote(key)}, "origin": {_quote(origin)}, {text[0]}{offset}{text[1]}'
            f'{_consumers_json(read_by) if read_by else "}"}'
            if text is not None else _entry_json(entries.at(i, keep=False))
            for i, key, origin, offset, read_by, text in zip(
                range(first, stop), keys[first:stop], origins[first:stop], offsets[first:stop],
                consumers[first:stop], texts, strict=True)
        ]


def _check_size(size: int, count: int, limit: int | None) -> None:
    if limit is not None and size > limit:
        raise InvalidArgumentError(
            f"the manifest of {counted(count, 'constant')} would take more than max_manifest_bytes={limit} bytes "
            f"({limit / 2**20:.3g} MiB; --max-manifest-bytes on the command line), which load_plan also needs to "
            "read it; raise the limit on both if you trust this model"
        )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, allow_nan=False)


_quote = json.encoder.encode_basestring_ascii  # what json.dumps(ensure_ascii=True) uses for every string


_OFFSET_MARK = 2**62 + 12345  # an offset no plan has: where the entry's own offset goes in its pair's text


def _shared_json(fields: Mapping[str, Any], buffer: int | None) -> tuple[str, str]:
    """The text of a converted entry's manifest line around its offset (and its buffer, unless ``buffer`` is
    given: then it is in the text), after its key and origin: json.dumps of an entry with the fields it shares
    with the entries of its type and shape, cut there."""
    text = _json(PlanEntry(**{**fields, "key": "", "origin": "", "offset": _OFFSET_MARK, "buffer": 0}).to_json())
    head, tail = text.split(f'"buffer": 0, "offset": {_OFFSET_MARK}', 1)
    head = head[len('{"key": "", "origin": "", ') :]
    return (head + '"buffer": ' if buffer is None else f'{head}"buffer": {buffer}, "offset": '), tail[:-1]


def _consumers_json(consumers: tuple[Consumer, ...]) -> str:
    """The end of an entry's line: its consumers, when it has any, and the closing brace."""
    return f', "consumers": {_json([consumer.to_json() for consumer in consumers])}}}' if consumers else "}"


def _entry_json(entry: PlanEntry) -> str:
    """``"    " + json.dumps(entry.to_json())``."""
    return "    " + _json(entry.to_json())


# --- reading -------------------------------------------------------------------------------------------------


def manifest_schema() -> dict[str, Any]:
    """The JSON Schema of every manifest format version this dmlbridge writes or reads (the package's
    ``dmlbridge/manifest/schema.json``): each field's type and range; the rules between fields are
    :func:`parse_manifest`'s.

    Example:
        >>> sorted(manifest_schema()["$defs"]["version3"]["properties"])[:3]
        ['buffers', 'conversion_id', 'entries']
    """
    text = resources.files("dmlbridge.manifest").joinpath("schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def parse_manifest(raw: bytes, where: str, bin_name: str = "") -> Manifest:
    """The manifest in ``raw`` (the bytes of a PREFIX.json), every rule of its format version checked;
    ManifestError names ``where`` and what is wrong. ``bin_name``: the name a format-1 manifest's .bin has.

    What the parse may cost is bounded before it starts: the format and version at the head of the bytes are
    checked first (where they are the first two fields, as dmlbridge writes them), and a document whose parse could
    take more than ``PARSE_COST_FACTOR`` times its size is refused (:func:`~dmlbridge.manifest.json_fields.parse_json`).
    """
    _check_head(raw, f"manifest {where!r}")
    return _manifest_from_json(parse_json(raw, where), f"manifest {where!r}", bin_name)


# The head of a manifest as dmlbridge writes it: its format and format_version, the first two fields (a manifest
# with its fields in another order is checked by the parse alone).
_HEAD = re.compile(rb'\s*\{\s*"format"\s*:\s*("(?:[^"\\]|\\.){0,200}")\s*,\s*"format_version"\s*:\s*([1-9][0-9]{0,17})'
                   rb'\s*[,}]')
_HEAD_BYTES = 512


def _check_head(raw: bytes, where: str) -> None:
    """Refuse, from its first bytes and before it is parsed, a manifest whose head names another format or a version
    this dmlbridge does not read: a large file of another kind costs no parse."""
    found = _HEAD.match(raw[:_HEAD_BYTES])
    if found is None:
        return
    try:
        name = json.loads(found[1])
    except ValueError:
        return  # (not JSON: the parse says so)
    if name != MANIFEST_FORMAT:
        raise ManifestError(f"{where} is not a dmlbridge upload plan (format {name!r})")
    version = int(found[2])
    if version not in READABLE_VERSIONS:
        raise ManifestError(
            f"{where} has format_version {version}; this dmlbridge reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))} (a newer dmlbridge may read it)"
        )


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
                      + (("selection",) if version >= 3 else ())
                      + (("max_buffer_bytes", "quantized") if version >= 4 else ()),
                      ("shapes", "graph_inputs", "upload") if version >= PER_OPERATOR_VERSION else ())
    if top.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"{where} is not a dmlbridge upload plan (format {top.get('format')!r})")
    dmlbridge_version = top.string("dmlbridge_version")
    source = Fields(top.get("source"), top.at("source"),
                     ("name", "size") if version == 1 else ("name", "size", "sha256", "external_data"))
    source_name = source.string("name", nullable=True)
    source_size = source.integer("size", nullable=True)
    source_sha256 = None if version == 1 else sha256_field(source, "sha256", nullable=True)
    source_external = () if version == 1 else external_from_json(source.get("external_data"),
                                                                 source.at("external_data"))
    target = target_from_json(top.get("target"), top.at("target"))
    alignment = top.integer("alignment", 16, MAX_ALIGNMENT)
    if alignment & (alignment - 1):
        raise ManifestError(f"{top.at('alignment')} is {alignment}, not a power of two")
    min_dims = top.integer("min_dims", 0, target.max_dimension_count)
    total_size = top.integer("total_size")
    max_buffer_bytes = None
    if version >= 4:
        max_buffer_bytes = top.integer("max_buffer_bytes", alignment, MAX_BUFFER_BYTES)
        if max_buffer_bytes % alignment:
            raise ManifestError(f"{top.at('max_buffer_bytes')} is {max_buffer_bytes}, not a multiple of the "
                                f"alignment {alignment}")
    conversion_id = None
    buffers: tuple[BufferFile, ...]
    if version == 1:
        fingerprint = sha256_field(top, "bin_fingerprint", nullable=False)
        buffers = (BufferFile(bin_name, total_size, fingerprint, sha256_field(top, "bin_sha256", nullable=True)),)
    else:
        conversion_id = top.string("conversion_id")
        if not _CONVERSION_ID.match(conversion_id):
            raise ManifestError(
                f"{top.at('conversion_id')} must be 16 lowercase hex digits, got {conversion_id[:80]!r}"
            )
        buffers = buffers_from_json(top.get("buffers"), top.at("buffers"), conversion_id, total_size,
                                     max_buffer_bytes, version)
    selection = (EVERY_CONSTANT if version < 3 else
                 selection_from_json(top.get("selection"), top.at("selection"), version))
    shapes = NO_SHAPES if "shapes" not in top.value else shapes_from_json(top.get("shapes"), top.at("shapes"))
    upload = top.value.get("upload", "all")
    if upload not in UPLOADS:
        raise ManifestError(f"{top.at('upload')} is {json.dumps(upload)[:40]}; it must be \"bound\" or \"all\"")
    uploaded = uploaded_buffers(buffers, upload, top.at("buffers"))
    graph_inputs = () if "graph_inputs" not in top.value else graph_inputs_from_json(top.get("graph_inputs"),
                                                                                       top.at("graph_inputs"))
    raw_entries = top.get("entries")
    if not isinstance(raw_entries, list):
        raise ManifestError(f"{top.at('entries')} must be an array, got {kind_of(raw_entries)}")
    entries: dict[str, PlanEntry] = {}
    layouts: dict[tuple[Any, ...], Any] = {}  # (see _entry_from_json)
    sizes = [buffer.size for buffer in buffers]
    for index, raw in enumerate(raw_entries):
        entry = entry_from_json(raw, f"{where}: entries[{index}]", target, alignment, min_dims, sizes,
                                 layouts, version, uploaded)
        if entry.key in entries:
            raise ManifestError(f"{where}: entries[{index}] repeats the key {entry.key!r}")
        entries[entry.key] = entry
    check_buffers_filled(entries, sizes, alignment, max_buffer_bytes, where, uploaded)
    quantized = {} if version < 4 else quantized_from_json(top.get("quantized"), top.at("quantized"), entries,
                                                           target, alignment, min_dims, version)
    for key in part_keys(quantized.values()):
        entries[key] = replace(entries[key], record_part=True)
    if upload == "bound":
        check_cpu_read_apart(entries, uploaded, where)
    return Manifest(types.MappingProxyType(entries), target, alignment, min_dims, total_size, source_name,
                    source_size, dmlbridge_version, conversion_id, buffers, version, source_sha256, source_external,
                    selection, max_buffer_bytes, quantized, shapes, upload, uploaded, graph_inputs)


def read_manifest_file(path: str, limit: int) -> bytes:
    """The manifest's bytes: a regular file of at most ``limit`` bytes, checked before anything is read (a FIFO,
    a device or a huge sparse file is refused, never read)."""
    try:
        fd, size = open_regular(path)
    except NotRegularFileError:
        raise ManifestError(f"manifest {path!r} is not a regular file") from None
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path!r}: {exc.strerror or exc}") from None
    try:
        if size > limit:
            raise ManifestError(
                f"manifest {path!r} holds {counted(size, 'byte')}, more than max_manifest_bytes={limit}; raise the "
                "limit if you trust this file"
            )
        return read_at(fd, 0, size)
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
