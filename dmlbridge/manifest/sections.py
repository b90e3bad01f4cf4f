"""A manifest's parts, each read and checked on its own: the buffer files, the target, the selection, the
external data files and every entry, and the rules that tie the entries to the buffers. ``format`` (beside it)
reads the top-level fields and puts these together; docs/manifest.md is the format's specification.

    >>> from dmlbridge.manifest.json_fields import Fields
    >>> buffers = buffers_from_json([{"file": "w.0123456789abcdef.00000.bin", "size": 16, "fingerprint": "0" * 64,
    ...                               "sha256": None}], "buffers", "0123456789abcdef", 16, 1024)
    >>> buffers[0].size
    16
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from dmlbridge.errors import DmlBridgeError, InvalidArgumentError, LayoutError, ManifestError, counted
from dmlbridge.manifest.consumer_fields import consumers_from_json
from dmlbridge.manifest.json_fields import INT64_MAX, Fields, int_list, kind_of
from dmlbridge.model.consumer_layouts import LEADING, ConsumerLayout, choose_layout
from dmlbridge.model.consumers import (
    CONSUMER_LAYOUTS_VERSION,
    PER_OPERATOR_VERSION,
    Consumer,
)
from dmlbridge.placement.consumer_descs import plan_consumers
from dmlbridge.placement.cpu_read import CPU_READ_TARGET
from dmlbridge.placement.entries import PlanEntry, entry_layout
from dmlbridge.placement.options import MAX_BUFFER_COUNT, MAX_KEY_LENGTH
from dmlbridge.placement.selection import Selection
from dmlbridge.quantized.records import (
    QUANTIZED_OPS,
    SIGNED_TYPES,
    DequantizeOperator,
    QuantizedPart,
    QuantizedWeight,
    dequantize_operator,
    quantized_rank,
)
from dmlbridge.system.names import name_problem
from dmlbridge.tensor.descs import BufferTensorDesc
from dmlbridge.tensor.layout import calc_buffer_tensor_size, check_strides
from dmlbridge.types.data_types import DmlDataType, FeatureLevel, OnnxDataType
from dmlbridge.types.mapping import resolve
from dmlbridge.types.target import Target

__all__ = [
    "BufferFile",
    "buffers_from_json",
    "check_buffers_filled",
    "check_cpu_read_apart",
    "entry_from_json",
    "external_from_json",
    "quantized_from_json",
    "selection_from_json",
    "sha256_field",
    "target_from_json",
    "uploaded_buffers",
]

_CONVERSIONS = ("native", "widen", "emulate", "narrow", "saturate", "lossy")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DESC_FIELDS = tuple(BufferTensorDesc(0, 0, (), None, 0, 0).as_dict())  # DataType, Flags, DimensionCount, ...


@dataclass(frozen=True)
class BufferFile:
    """One buffer file of a written plan: its ``path`` (as the manifest names it, relative to the manifest's
    folder; an ``UploadPlan`` gives it joined to that folder), its ``size`` in bytes, its ``fingerprint`` (see
    :mod:`dmlbridge.plan.fingerprint`) and, when the conversion computed it (``checksum=True``), its ``sha256``.

    Example:
        >>> BufferFile("w.0123456789abcdef.00000.bin", 256, "0" * 64, None).size
        256
    """

    path: str
    size: int
    fingerprint: str
    sha256: str | None = None
    uploaded: bool = True
    """Whether a program uploads it: False for the buffers of the constants read on the CPU (``upload="bound"``),
    which come after every uploaded one."""


def uploaded_buffers(buffers: tuple[BufferFile, ...], upload: str, where: str) -> int | None:
    """How many buffers, from the first, are uploaded (None: every one); ManifestError unless the buffers not
    uploaded come after every uploaded one, in a manifest of ``upload`` "bound"."""
    flags = [buffer.uploaded for buffer in buffers]
    count = flags.count(True)
    if count == len(flags):
        return None
    if upload != "bound":
        raise ManifestError(f"{where}[{flags.index(False)}].uploaded is false, but upload is \"{upload}\": every "
                            "buffer is uploaded")
    if flags != [True] * count + [False] * (len(flags) - count):
        raise ManifestError(f"{where}: the buffers not uploaded must all come after the uploaded ones")
    return count


def check_cpu_read_apart(entries: dict[str, PlanEntry], uploaded: int | None, where: str) -> None:
    """In a manifest of ``upload`` "bound": the converted entries in the buffers not uploaded (from ``uploaded``)
    are exactly those read only on the CPU (``reads_on`` "cpu")."""
    for entry in entries.values():
        if entry.buffer is None or (not entry.consumers and (uploaded is None or entry.buffer < uploaded)):
            continue  # (skipped, or read by nothing and uploaded: the usual case, decided without a set)
        apart = uploaded is not None and entry.buffer >= uploaded
        if apart != (entry.reads_on == "cpu"):
            read = "on the CPU" if entry.reads_on == "cpu" else "on the GPU or by nothing"
            raise ManifestError(
                f"{where}: entry {entry.key!r} is read {read} but is in buffers[{entry.buffer}], "
                f"{'not ' if apart else ''}uploaded; with upload \"bound\" the buffers not uploaded hold exactly "
                "the constants read on the CPU")


def check_buffers_filled(
    entries: dict[str, PlanEntry], sizes: list[int], alignment: int, limit: int | None, where: str,
    uploaded: int | None = None,
) -> None:
    """The converted entries fill the buffers as a conversion places them: in model order (the CPU-read ones last
    under ``upload`` "bound"), buffer after buffer, none overlapping, each buffer ending with its last entry, and
    each buffer after the first begun by an entry that would have ended past ``limit`` in the one before, or by
    the first constant read on the CPU (buffer ``uploaded``, the first not uploaded)."""
    converted = [e for e in entries.values() if e.skipped is None]
    order = [e.buffer or 0 for e in converted]
    steps = zip([0, *order], order, strict=False)  # (each entry's buffer after the one before: 0 at first)
    if any(not a <= b <= a + 1 for a, b in steps) or (converted and (order[0] != 0 or order[-1] != len(sizes) - 1)) \
            or (not converted and len(sizes) != 1):
        raise ManifestError(
            f"{where}: the entries do not fill the buffers ({counted(len(sizes), 'buffer')}) one after another in "
            "model order"
        )
    first = 0
    for buffer in range(len(sizes)):
        stop = first
        while stop < len(converted) and order[stop] == buffer:
            stop += 1
        placed = sorted(converted[first:stop], key=lambda e: e.offset or 0)
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
        if end != sizes[buffer]:
            what = "total_size" if len(sizes) == 1 else f"buffers[{buffer}].size"
            raise ManifestError(
                f"{where}: {what} is {sizes[buffer]} but the entries end at byte {end}; the two must agree"
            )
        if buffer and limit is not None and buffer != uploaded:
            opening = converted[first].total_tensor_size_in_bytes or 0
            if -(-sizes[buffer - 1] // alignment) * alignment + opening <= limit:
                raise ManifestError(
                    f"{where}: entry {converted[first].key!r} begins buffers[{buffer}] but fits in buffers"
                    f"[{buffer - 1}] within max_buffer_bytes {limit}; a conversion starts a new buffer only "
                    "when the next tensor does not fit"
                )
        first = stop


def selection_from_json(value: Any, where: str, version: int) -> Selection:
    """A format-3 or later manifest's ``selection`` (format 4 adds ``drop_quantized_sources``)."""
    names = ("include", "exclude", "kinds", "min_bytes") + (("drop_quantized_sources",) if version >= 4 else ())
    fields = Fields(value, where, names)
    try:
        return Selection.check(fields.get("include"), fields.get("exclude"), fields.get("kinds"),
                               fields.integer("min_bytes"), fields.value.get("drop_quantized_sources", False))
    except InvalidArgumentError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def external_from_json(value: Any, where: str) -> tuple[tuple[str, int], ...]:
    """``source.external_data``: (file, size) of each external data file the conversion read."""
    if not isinstance(value, list) or len(value) > 1 << 16:
        raise ManifestError(f"{where} must be an array of at most 65536 files, got {kind_of(value)}")
    files = []
    for index, item in enumerate(value):
        fields = Fields(item, f"{where}[{index}]", ("file", "size"))
        files.append((fields.string("file", nonempty=True)[:4096], fields.integer("size")))
    return tuple(files)


def sha256_field(fields: Fields, key: str, nullable: bool) -> Any:
    """The field ``key``: 64 lowercase hex digits (or null when ``nullable``)."""
    digest = fields.string(key, nullable=nullable)
    if digest is not None and not _SHA256.match(digest):
        raise ManifestError(f"{fields.at(key)} must be 64 lowercase hex digits, got {digest[:80]!r}")
    return digest


def buffers_from_json(
    value: Any, where: str, conversion_id: str, total_size: int, limit: int | None, version: int = 4,
) -> tuple[BufferFile, ...]:
    """The buffer files of a format-2 or later manifest, named for the conversion and their index, plain file
    names only: exactly one before format 4 (``limit`` None), else 1 to MAX_BUFFER_COUNT of at most ``limit``
    bytes each, their sizes adding up to ``total_size``; from format 7 each may say it is not ``uploaded``."""
    most = 1 if limit is None else MAX_BUFFER_COUNT
    if not isinstance(value, list) or not 1 <= len(value) <= most:
        count = "one buffer file" if most == 1 else f"1 to {most} buffer files"
        raise ManifestError(f"{where} must be an array of {count}, got {kind_of(value)}")
    buffers = []
    for index, item in enumerate(value):
        fields = Fields(item, f"{where}[{index}]", ("file", "size", "fingerprint", "sha256"),
                        ("uploaded",) if version >= PER_OPERATOR_VERSION else ())
        name = fields.string("file", nonempty=True)
        tail = f".{conversion_id}.{index:05d}.bin"
        problem = name_problem(name) or (None if name.endswith(tail) else f"does not end in {tail}")
        if problem is not None:
            raise ManifestError(
                f"{fields.at('file')} is {name[:80]!r}, which {problem}; it must be a plain file name beside the "
                f"manifest (no folder) ending in {tail}"
            )
        size = fields.integer("size", 0, INT64_MAX if limit is None else limit)
        digests = sha256_field(fields, "fingerprint", False), sha256_field(fields, "sha256", True)
        uploaded = fields.value.get("uploaded", True)
        if uploaded is not False and uploaded is not True:
            raise ManifestError(f"{fields.at('uploaded')} must be true or false, got {kind_of(uploaded)}")
        buffers.append(BufferFile(name, size, *digests, uploaded))
    if sum(b.size for b in buffers) != total_size:
        held = counted(sum(b.size for b in buffers), "byte")
        raise ManifestError(f"{where}: the buffers hold {held} but total_size is {total_size}; the two must agree")
    return tuple(buffers)


def target_from_json(value: Any, where: str) -> Target:
    """The manifest's ``target``, which must be in the canonical form ``Target.describe()`` gives."""
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
    layout: ConsumerLayout, target: Target, alignment: int, min_dims: int,
) -> tuple[dict[str, Any], BufferTensorDesc, DmlDataType]:
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
                                             target.max_dimension_count, layout)
    except LayoutError as exc:
        raise ManifestError(f"{fields.at('shape')} {list(shape)} cannot be a DirectML tensor: {exc}") from None
    desc = BufferTensorDesc(dml_type, flags, sizes, strides, total, alignment)  # (shared by the entries alike)
    return desc.as_dict(), desc, dml_type


_ENTRY_FIELDS = ("key", "origin", "onnx_type", "shape", "conversion", "offset", "dml_type", "desc", "skipped")


def entry_from_json(
    raw: Any, where: str, target: Target, alignment: int, min_dims: int, buffer_sizes: list[int],
    layouts: dict[tuple[Any, ...], Any], version: int, uploaded: int | None = None,
) -> PlanEntry:
    """One element of ``entries``, checked against the target's mapping (``CPU_READ_TARGET``'s in a buffer not
    uploaded, from ``uploaded``), the layout rules and its buffer's size (``buffer_sizes``: each buffer's, by
    index); ``layouts`` keeps what each type and shape demands."""
    optional = ("clamped", "padding", "consumers") if version >= 3 else ()
    fields = Fields(raw, where, _ENTRY_FIELDS + (("buffer",) if version >= 4 else ()),
                    optional + (("layout_note",) if version >= CONSUMER_LAYOUTS_VERSION else ()))
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
    layout = LEADING
    if version >= 3:
        consumers = consumers_from_json(fields.value.get("consumers", []), fields.at("consumers"), version)
        try:
            layout = choose_layout(shape, consumers, min_dims, version)
        except LayoutError as exc:
            raise ManifestError(f"{fields.at('consumers')}: {exc}") from None
        if fields.value.get("padding", "leading") != layout.padding:
            raise ManifestError(
                f"{fields.at('padding')} is {json.dumps(fields.value.get('padding', 'leading'))[:40]}, but a "
                f"{len(shape)}-D constant "
                f"with these consumers at min_dims {min_dims} is padded {json.dumps(layout.padding)} (format {version})"
            )
        if fields.value.get("layout_note") != layout.note:
            raise ManifestError(f"{fields.at('layout_note')} is {json.dumps(fields.value.get('layout_note'))[:80]}, "
                                f"but these consumers give {json.dumps(layout.note)[:200]}")
    skipped = fields.string("skipped", nullable=True)
    if skipped is not None:
        if not skipped:
            raise ManifestError(f"{fields.at('skipped')} is empty; a skipped entry must say why")
        for name in ("conversion", "buffer", "offset", "dml_type", "desc", "clamped"):
            if fields.get(name) is not None:
                raise ManifestError(f"{where} is skipped but has a {name}; a skipped entry has no bytes")
        return PlanEntry(key, origin, onnx_type, shape, None, None, None, skipped, padding=layout.padding,
                         consumers=plan_consumers(key, shape, consumers, None, onnx_type, None, min_dims,
                                                  target.max_dimension_count, version),
                         layout_note=layout.note)

    conversion = fields.string("conversion")
    dml_name = fields.string("dml_type")
    buffer = fields.integer("buffer", 0, len(buffer_sizes) - 1) if version >= 4 else 0
    offset = fields.integer("offset")
    if offset % alignment:
        raise ManifestError(f"{fields.at('offset')} {offset} is not a multiple of the alignment {alignment}")
    desc = Fields(fields.get("desc"), fields.at("desc"), _DESC_FIELDS)
    flags = desc.get("Flags") if desc.get("Flags") in (0, 1) and type(desc.get("Flags")) is int else 0
    # What the type, shape, conversion and flags demand is worked out once for each (a model may have 100,000
    # entries of a few shapes).
    apart = uploaded is not None and buffer >= uploaded  # (a CPU-read constant keeps its ONNX type)
    cache_key = (onnx_type, shape, dml_name, conversion, flags, layout, apart)
    demanded = layouts.get(cache_key)
    if demanded is None:
        demanded = _demanded(fields, onnx_type, shape, dml_name, conversion, flags, layout,
                             CPU_READ_TARGET if apart else target, alignment, min_dims)
        layouts[cache_key] = demanded
    expected_desc, buffer_desc, dml_type = demanded
    total = buffer_desc.total_tensor_size_in_bytes
    for name, want in expected_desc.items():
        have = desc.get(name)
        if have != want or type(have) is not type(want):  # (type: JSON's true is not the number 1)
            raise ManifestError(
                f"{desc.at(name)} is {json.dumps(have)[:80]}, but {onnx_type.name} {list(shape)} as {dml_type.name} "
                f"({conversion}, min_dims {min_dims}, {layout.padding} padding) needs {json.dumps(want)}"
            )
    if offset + total > buffer_sizes[buffer]:
        what = "total_size" if version < 4 else f"the size of buffers[{buffer}]"
        raise ManifestError(f"{where}: bytes {offset}..{offset + total} run past {what} {buffer_sizes[buffer]}")
    clamped = None
    if conversion == "saturate" and version >= 3:  # (how many values were clamped: at most every one)
        clamped = fields.integer("clamped", 0, math.prod(shape))
    elif fields.get("clamped") is not None:
        raise ManifestError(f"{fields.at('clamped')} must be null: only a saturate entry counts clamped values")
    views = plan_consumers(key, shape, consumers, buffer_desc, onnx_type, conversion, min_dims,
                           target.max_dimension_count, version)
    return PlanEntry(key, origin, onnx_type, shape, conversion, offset, buffer_desc, None, clamped, layout.padding,
                     views, buffer, layout.note)




_RECORD_FIELDS = ("key", "op", "origin", "bits", "signed", "granularity", "axis", "block_size", "shape",
                  "output_type", "sizes", "weight", "scales", "zero_points", "zero_scales", "skipped", "bias")
OPERATOR_VERSION = 5
"""The first format whose quantized records name their DirectML ``operator``."""
_OPS = ("MatMulNBits", "DequantizeLinear", "GatherBlockQuantized")
_OUTPUT_TYPES = ("FLOAT", "FLOAT16", "BFLOAT16")
_PARTS = ("weight", "scales", "zero_points")
_REINTERPRETED = {DmlDataType.UINT4: DmlDataType.UINT8}  # a 4-bit view of a native byte entry's bytes
_WEIGHT_TYPES = {(2, False): OnnxDataType.UINT2, (2, True): OnnxDataType.INT2, (4, False): OnnxDataType.UINT4,
                 (4, True): OnnxDataType.INT4, (8, False): OnnxDataType.UINT8, (8, True): OnnxDataType.INT8}
"""The ONNX type of a weight's values by (bits, signed): the target's mapping of it is the weight's DML type."""


def quantized_from_json(
    value: Any, where: str, entries: dict[str, PlanEntry], target: Target, alignment: int, min_dims: int = 0,
    version: int = OPERATOR_VERSION,
) -> dict[str, QuantizedWeight]:
    """A format-4 or later manifest's ``quantized`` records, each checked against the entries it names: three
    entries, each of its part's role and of the values' type ``bits`` gives (:func:`_check_entries`), every part
    at its entry's buffer and offset, of the entry's DML type (or UINT4 over a UINT8 entry's bytes), with sizes
    the weight's shape gives and a TotalTensorSizeInBytes that the layout rules give and the entry holds; each
    part's DML type the one its role and ``bits`` give at the target (weight and zero points the mapping of the
    values' type, scales a float type of ``output_type``), ``signed``, ``output_type`` and ``bias`` as its
    entries say, and from format 5 the ``operator`` the target's level gives (whose table the parts fit).
    ``zero_scales`` needs the scales' bytes: ``load_plan`` checks it (``check_zero_scales``)."""
    if not isinstance(value, list) or len(value) > 1 << 20:
        raise ManifestError(f"{where} must be an array of quantized weights, got {kind_of(value)}")
    with_operator = version >= OPERATOR_VERSION
    operator = dequantize_operator(target.feature_level)
    records: dict[str, QuantizedWeight] = {}
    for index, raw in enumerate(value):
        fields = Fields(raw, f"{where}[{index}]", _RECORD_FIELDS + (("operator",) if with_operator else ()))
        key = fields.string("key", nonempty=True)
        fields.where = f"{where}[{index}] ({key[:80]!r})"
        op, granularity = fields.string("op"), fields.string("granularity")
        output = fields.string("output_type")
        if op not in _OPS or granularity not in ("tensor", "axis", "block") or output not in _OUTPUT_TYPES:
            raise ManifestError(f"{fields.where} has an unknown op, granularity or output_type")
        if key in records or len(key) > 4 * MAX_KEY_LENGTH:
            raise ManifestError(f"{fields.where} repeats a node key or has one too long")
        shape = int_list(fields.get("shape"), fields.at("shape"))
        axis = fields.integer("axis", 0, max(len(shape) - 1, 0), nullable=True)
        block = fields.integer("block_size", 0, 2**31)
        if not isinstance(fields.get("signed"), bool) or not isinstance(fields.get("zero_scales"), (bool, type(None))):
            raise ManifestError(f"{fields.where}: signed must be true or false, zero_scales true, false or null")
        named = fields.string("operator", nullable=True) if with_operator else None
        record = QuantizedWeight(key, op, fields.string("origin"), fields.integer("bits", 0, 8), fields.get("signed"),
                                 granularity, axis, block, shape, OnnxDataType[output], None, None, None, None,
                                 fields.get("zero_scales"), fields.string("skipped", nullable=True),
                                 fields.string("bias", nullable=True), named)
        if record.bits not in (0, 2, 4, 8):
            raise ManifestError(f"{fields.at('bits')} is {record.bits}; a quantized weight has 2, 4 or 8 bits (0 "
                                "when skipped before the width was known)")
        if record.skipped is not None:
            if not record.skipped:
                raise ManifestError(f"{fields.at('skipped')} is empty; a skipped record must say why")
            if any(fields.get(name) is not None for name in ("sizes", "weight", "scales", "zero_points", "operator")):
                raise ManifestError(f"{fields.where} is skipped but has descs or an operator; a skipped record has "
                                    "neither")
            records[key] = record
            continue
        _check_form(fields, record, shape)
        if with_operator and named != operator.name:
            raise ManifestError(f"{fields.at('operator')} is {json.dumps(named)[:60]}, but at feature level "
                                f"{target.feature_level.dotted} the operator that takes quantized weights is "
                                f"{operator.name}")
        sizes = int_list(fields.get("sizes"), fields.at("sizes"))
        split = granularity == "block" and block > 1 and axis is not None
        logical = (*shape[:axis], -(-shape[axis] // block), block, *shape[axis + 1 :]) if split and axis is not None \
            else (shape or (1,))
        rank = quantized_rank(len(logical), min_dims, operator) if with_operator else max(len(logical), min_dims)
        pad = len(sizes) - len(logical)
        if pad < 0 or tuple(sizes[pad:]) != tuple(logical) or set(sizes[:pad]) - {1} or len(sizes) != rank \
                or len(sizes) > target.max_dimension_count or (with_operator and not
                                                               operator.dims[0] <= len(sizes) <= operator.dims[1]):
            raise ManifestError(f"{fields.at('sizes')} are not the shape {list(shape)} split into blocks of {block} "
                                f"in {counted(rank, 'dimension')} (min_dims {min_dims}, {operator.name} at feature "
                                f"level {target.feature_level.dotted})")
        parts = [_quantized_part(fields, name, sizes, entries, alignment) for name in _PARTS]
        _check_entries(fields, record, parts, entries)
        _check_roles(fields, record, parts, entries, target, operator if with_operator else None)
        records[key] = QuantizedWeight(**{**vars(record), "sizes": sizes, "weight": parts[0], "scales": parts[1],
                                          "zero_points": parts[2]})
    return records


def _check_form(fields: Fields, record: QuantizedWeight, shape: tuple[int, ...]) -> None:
    """The fields of a described record agree with each other: its bits, its granularity's axis and block size,
    and what its op allows."""
    if record.bits not in (2, 4, 8):
        raise ManifestError(f"{fields.at('bits')} is {record.bits}; a described quantized weight has 2, 4 or 8 bits")
    axis, block = record.axis, record.block_size
    if (record.granularity == "tensor" and (axis is not None or block)) or (
            record.granularity == "axis" and (axis is None or block)) or (
            record.granularity == "block" and (axis is None or block < 1)):
        raise ManifestError(f"{fields.where}: granularity {record.granularity!r} with axis {axis} and block_size "
                            f"{block}; per tensor has no axis and block_size 0, per axis an axis and block_size 0, "
                            "blocked an axis and a block_size of at least 1")
    if record.op == "MatMulNBits" and (record.granularity != "block" or axis != 1 or len(shape) != 2
                                       or record.signed):
        raise ManifestError(f"{fields.where}: a MatMulNBits weight is unsigned, [N, K] and blocked on axis 1")
    if record.op == "GatherBlockQuantized" and record.granularity != "block":
        raise ManifestError(f"{fields.where}: a GatherBlockQuantized weight is blocked")
    if record.bias is not None and record.op != "MatMulNBits":
        raise ManifestError(f"{fields.at('bias')} is set; only a MatMulNBits record has a bias")


_ROLE_INPUTS = {"MatMulNBits": (1, 2, 3), "DequantizeLinear": (0, 1, 2), "GatherBlockQuantized": (0, 2, 3)}
"""The node input of each part (weight, scales, zero points), by record op."""


def _check_entries(fields: Fields, record: QuantizedWeight, parts: list[QuantizedPart],
                   entries: dict[str, PlanEntry]) -> None:
    """The three parts name three entries, each of its role: the record's own derived entry ``<key>/<part>``, or
    a constant that the record's node reads as that part's input (its ``consumers`` say so); and the weight's and
    the zero points' entries hold values of the type ``bits`` and ``signed`` give (or, at 4 bits, the packed
    bytes of a UINT8 entry read as UINT4)."""
    keys = [part.key for part in parts]
    if len(set(keys)) != len(keys):
        raise ManifestError(f"{fields.where}: its weight, scales and zero points name the entries "
                            f"{json.dumps([key[:80] for key in keys])}; each part of a record has an entry of its own")
    values = _WEIGHT_TYPES[record.bits, record.signed]
    for name, part, index in zip(_PARTS, parts, _ROLE_INPUTS[record.op], strict=True):
        entry = entries[part.key]
        own = f"{record.key}/{name}"
        if part.key != own and not any(consumer.node == record.key and consumer.input == index
                                       and QUANTIZED_OPS.get(consumer.op_type) == record.op
                                       for consumer in entry.consumers):
            raise ManifestError(f"{fields.at(name)} reads {part.key[:80]!r}, which is neither the record's own entry "
                                f"{own[:80]!r} nor a constant its node reads as input {index} (the entry's consumers)")
        packed = (record.bits == 4 and entry.onnx_type is OnnxDataType.UINT8 and part.dml_type is DmlDataType.UINT4)
        if name != "scales" and entry.onnx_type is not values and not packed:
            raise ManifestError(f"{fields.at(name)} reads {entry.onnx_type.name} entry {part.key[:80]!r} as "
                                f"{part.dml_type.name}, but with bits {record.bits} and signed "
                                f"{json.dumps(record.signed)} the {name.replace('_', ' ')} are {values.name} values "
                                "(or, at 4 bits, UINT8 bytes read as UINT4)")


def _check_roles(fields: Fields, record: QuantizedWeight, parts: list[QuantizedPart], entries: dict[str, PlanEntry],
                 target: Target, operator: DequantizeOperator | None) -> None:
    """Each part's DML type is what its role gives, and ``signed``, ``output_type`` and ``bias`` are what the
    entries they name say (``operator``: from format 5, whose tensor-support table the parts must fit)."""
    weight, scales, zero_points = parts
    if weight.strides is not None:
        raise ManifestError(f"{fields.at('weight')} has Strides; a weight is packed (its elements are its entry's "
                            "bytes: only scales and zero points repeat)")
    want = resolve(_WEIGHT_TYPES[record.bits, record.signed], target).dml_type
    if (weight.dml_type in SIGNED_TYPES) != record.signed:
        raise ManifestError(f"{fields.at('signed')} is {json.dumps(record.signed)}, but the weight is "
                            f"{weight.dml_type.name}")
    if weight.dml_type is not want:
        sign = "signed" if record.signed else "unsigned"
        raise ManifestError(f"{fields.at('weight')} is {weight.dml_type.name}; a {sign} {record.bits}-bit weight is "
                            f"{want.name if want else None} at this target")
    if zero_points.dml_type is not weight.dml_type:
        raise ManifestError(f"{fields.at('zero_points')} is {zero_points.dml_type.name}; zero points have the "
                            f"weight's type, {weight.dml_type.name}")
    scales_entry = entries[scales.key]
    widened = (scales_entry.key == f"{record.key}/scales" and scales_entry.onnx_type is OnnxDataType.FLOAT
               and record.output_type is OnnxDataType.FLOAT16 and operator is not None
               and DmlDataType.FLOAT16 not in operator.scales)
    if scales.dml_type not in (DmlDataType.FLOAT32, DmlDataType.FLOAT16) or (
            scales_entry.onnx_type is not record.output_type and not widened):
        raise ManifestError(f"{fields.at('scales')} reads {scales_entry.onnx_type.name} entry {scales.key[:80]!r} as "
                            f"{scales.dml_type.name}; the scales of a {record.output_type.name} weight are its "
                            f"{record.output_type.name} scales as FLOAT32 or FLOAT16 (or their FLOAT copy "
                            f"'{record.key[:80]}/scales' where the operator takes only FLOAT32)")
    if operator is not None and (weight.dml_type not in operator.inputs or scales.dml_type not in operator.scales):
        raise ManifestError(f"{fields.where}: {operator.name} at feature level {target.feature_level.dotted} does not "
                            f"take a {weight.dml_type.name} weight with {scales.dml_type.name} scales")
    if record.bias is not None:
        bias = entries.get(record.bias)
        if bias is None or bias.skipped is not None or bias.onnx_type is not record.output_type \
                or bias.shape != record.shape[:1]:
            raise ManifestError(f"{fields.at('bias')} names {record.bias[:80]!r}; a bias is a converted entry of "
                                f"the weight's type, [{record.shape[0]}]")


def _quantized_part(fields: Fields, name: str, sizes: tuple[int, ...], entries: dict[str, PlanEntry],
                    alignment: int) -> QuantizedPart:
    part = Fields(fields.get(name), fields.at(name), ("key", "buffer", "offset", "desc"))
    key = part.string("key", nonempty=True)
    entry = entries.get(key)
    if entry is None or entry.skipped is not None:
        raise ManifestError(f"{part.where}: {key[:80]!r} is not a converted entry of the manifest")
    if (part.integer("buffer"), part.integer("offset")) != (entry.buffer, entry.offset):
        raise ManifestError(f"{part.where} is not at its entry's buffer and offset ({entry.buffer}, {entry.offset})")
    desc = Fields(part.get("desc"), part.at("desc"), _DESC_FIELDS)
    try:
        dml = DmlDataType(desc.integer("DataType", 1, 64))
    except ValueError:
        raise ManifestError(f"{desc.at('DataType')} is not a DirectML data type") from None
    if dml is not entry.dml_type and not (_REINTERPRETED.get(dml) is entry.dml_type and entry.conversion == "native"):
        raise ManifestError(f"{desc.at('DataType')} is {dml.name}, but its entry {key[:80]!r} is "
                            f"{entry.dml_type.name if entry.dml_type else None}")
    raw_strides = desc.get("Strides")
    strides = None if raw_strides is None else int_list(raw_strides, desc.at("Strides"))
    try:
        if strides is not None:
            check_strides(strides, sizes)
        total = calc_buffer_tensor_size(dml, sizes, strides)
    except (LayoutError, InvalidArgumentError) as exc:
        raise ManifestError(f"{desc.where}: {exc}") from None
    expected = BufferTensorDesc(dml, entry.flags, sizes, strides, total, alignment).as_dict()
    if desc.value != expected or total > (entry.total_tensor_size_in_bytes or 0):
        raise ManifestError(f"{desc.where} is not a desc of sizes {list(sizes)} within its entry {key[:80]!r} "
                            f"(expected {json.dumps(expected)})")
    return QuantizedPart(key, entry.buffer or 0, entry.offset or 0,
                         BufferTensorDesc(dml, entry.flags, sizes, strides, total, alignment))
