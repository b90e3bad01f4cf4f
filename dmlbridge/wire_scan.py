"""Finding the main graph's small constants straight from a model's serialized bytes.

A model of many tiny constants (50,000 Constant nodes and initializers) spends most of its conversion time in
Python, reading protobuf fields one at a time: a few microseconds a constant. This module reads those constants
from the protobuf wire format instead, all records of a kind at once, with numpy. Anything it does not
recognise is left to :mod:`dmlbridge.constants`, which reads the parsed ``ModelProto``. The two must find the
same constants; ``tests/test_wire_scan.py`` holds them to it.

The wire format, as much of it as this module reads
---------------------------------------------------
A message is a sequence of *fields*. Each field is a tag (a varint: the field number << 3 | the wire type),
then, by wire type:

- 0: a varint;
- 1: 8 bytes;
- 2: a varint length and that many bytes (strings, bytes, nested messages, packed repeated numbers);
- 5: 4 bytes.

A varint is little-endian groups of 7 bits, with the high bit of each byte saying "more".

- **ModelProto:** ``graph`` is field 7. It is read only if it occurs exactly once (protobuf merges a second
  occurrence into the first).
- **GraphProto:** ``node`` (1) and ``initializer`` (5) records are each read as a message of their own.
  ``sparse_initializer`` and everything else are left to the parsed model. The record counts must equal the
  parsed model's.
- **TensorProto in the common form:**
  - ``dims`` (1, one varint each: ONNX's proto2 does not pack them), ``data_type`` (2) and ``name`` (8);
  - one data field: ``raw_data`` (9) or, for FLOAT/COMPLEX64 and DOUBLE/COMPLEX128, the packed ``float_data``
    (4) or ``double_data`` (10), whose bytes are the little-endian values.

  These go to the parsed model instead (``onnx_tensor._summary``): any other field, a field twice, a
  negative dim, a name that is not UTF-8, a byte count that does not match the dims, or more than 64 KiB of
  data.
- **NodeProto:** ``output`` (2; the first is the constant's name), ``name`` (3), ``op_type`` (4),
  ``attribute`` (5) and ``domain`` (7); other fields are skipped.
  - A Constant node is read here only in the usual form: one attribute, named ``value``, of type TENSOR (4) or
    unstated, holding only its name, its type and a TensorProto in the common form.
  - A node with a GRAPH or GRAPHS attribute (``g``, 6; ``graphs``, 11) is left to the parsed model, which walks
    its subgraphs.

Nothing read here is decoded. A constant's stored bytes are a span of the model's bytes (``BytesScan.starts``),
which is exactly what conversion writes for a "native" constant. Any other constant's TensorProto is fetched
from the parsed model when it is needed (:meth:`BytesScan.with_tensor`).
"""

from __future__ import annotations

import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from dmlbridge.constants import (
    _Found,
    _found,
    _initializer,
    _make_keys_unique,
    _scan_functions,
    _scan_node,
    _scan_sparse,
)
from dmlbridge.onnx_tensor import _QUICK_TYPED, _SHAPES, _shape_facts

__all__: list[str] = []

WIRE_SCAN_MAX_BYTES = 1 << 26
"""Models up to this size keep their bytes for this scan (they are held in memory while converting)."""

_CHUNK = 1 << 15  # records parsed together: bounds the temporaries
# More records than this (a hostile model of millions of empty ones) are left to the parsed model: the positions
# of every field of the graph are held at once, and a few arrays of them would take more memory than is useful.
_MAX_RECORDS = 1 << 22
_MAX_DIMS = 8  # a tensor with more dims is left to the parsed model
_ROUNDS = 24  # fields a record may have here; a record with more is left to the parsed model
_TEN = np.arange(10, dtype=np.int64)
_SHIFTS = _TEN * 7
_CONSTANT = b"Constant"
_TENSOR_ATTRIBUTE = 4  # AttributeProto.TENSOR
_FIELD_NUMBER = {"float_data": 4, "double_data": 10}
_RAW_DATA = 9


@dataclass(frozen=True)
class BytesScan:
    """The constants of a model, the main graph's common ones read from its bytes.

    ``found``: every constant, as constants._find gives them, but with ``proto`` None for those read from the
    bytes. ``starts``: for each constant, where its stored bytes (raw_data or a packed typed field) begin in
    ``source``, or -1; ``lengths``: how many there are (``packed_nbytes``). ``indices``: for those, the index of
    its initializer or Constant node in the main graph.
    """

    found: list[_Found]
    source: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    indices: np.ndarray
    graph: Any

    def with_tensor(self, position: int) -> _Found:
        """``found[position]`` with its TensorProto, fetched from the parsed model if it was read here."""
        constant = self.found[position]
        if constant.proto is not None:
            return constant
        index = int(self.indices[position])
        if constant.kind == "initializer":
            tensor = self.graph.initializer[index]
        else:
            tensor = self.graph.node[index].attribute[0].t
        return constant._replace(proto=tensor)


def scan_bytes(model: Any, data: bytes) -> BytesScan | None:
    """Every constant of ``model`` (a ModelProto parsed from ``data``), as constants._find finds them; None when
    the bytes are not laid out as this module expects (constants._find then reads the parsed model)."""
    graph = model.graph
    if len(graph.initializer) + len(graph.node) > _MAX_RECORDS:
        return None
    span = _graph_span(data)
    if span is None:
        return None
    source = np.frombuffer(data, dtype=np.uint8)
    records = _graph_records(data, source, *span)
    if records is None:
        return None
    init_starts, init_ends, node_starts, node_ends = records
    if len(init_starts) != len(graph.initializer) or len(node_starts) != len(graph.node):
        return None
    found: list[_Found] = []
    starts: list[np.ndarray] = []  # pieces of BytesScan.starts, .lengths and .indices
    lengths: list[np.ndarray] = []
    indices: list[np.ndarray] = []
    parsed: dict[str, list[Any]] = {}  # the parsed model's records, listed when first needed

    def add(made: list[_Found | None], read: _Read, read_indices: np.ndarray, kind: str) -> None:
        """Append constants read here, in order, with the parsed model's where ``made`` has None."""
        if None not in made:
            found.extend(made)  # type: ignore[arg-type]
            starts.append(read.data_start)
            lengths.append(read.data_length)
            indices.append(read_indices)
            return
        for position, (constant, index) in enumerate(zip(made, read_indices.tolist(), strict=True)):
            if constant is not None:
                found.append(constant)
                starts.append(read.data_start[position : position + 1])
                lengths.append(read.data_length[position : position + 1])
                indices.append(read_indices[position : position + 1])
                continue
            before = len(found)
            if kind not in parsed:
                parsed[kind] = (graph.initializer if kind == "initializer" else graph.node)[:]
            if kind == "initializer":
                found.append(_initializer(parsed[kind][index], index, ""))
            else:
                _scan_node(parsed[kind][index], index, "", found, 0)
            unread(before)

    def unread(before: int) -> None:
        if len(found) > before:
            starts.append(np.full(len(found) - before, -1, dtype=np.int64))
            lengths.append(starts[-1])
            indices.append(starts[-1])

    for first in range(0, len(init_starts), _CHUNK):
        tensors = _Tensors(source, init_starts[first : first + _CHUNK], init_ends[first : first + _CHUNK])
        made: list[_Found | None] = [
            None if tail is None else _found((name or f"<unnamed {index}>", name, "", "initializer", "initializer",
                                              None, name, *tail))
            for index, name, tail in zip(range(first, first + tensors.count), tensors.names, tensors.tails,
                                         strict=True)
        ]
        add(made, tensors, np.arange(first, first + tensors.count, dtype=np.int64), "initializer")
    before = len(found)
    _scan_sparse(graph, "", found)
    unread(before)
    for first in range(0, len(node_starts), _CHUNK):
        nodes = _Nodes(source, node_starts[first : first + _CHUNK], node_ends[first : first + _CHUNK])
        made = [
            None if tail is None else _found((
                name or f"<unnamed {index}>", name, "", "value",
                f"Constant node {node_name!r} (value)" if node_name else f"Constant node #{index} (value)",
                None, tensor_name, *tail))
            for index, name, node_name, tensor_name, tail in zip(
                (nodes.rows + first).tolist(), nodes.outputs, nodes.names, nodes.tensor_names, nodes.tails,
                strict=True,
            )
        ]
        add(made, nodes, nodes.rows + first, "node")
    before = len(found)
    _scan_functions(model, found)
    unread(before)
    _make_keys_unique(found)
    none = np.zeros(0, dtype=np.int64)
    return BytesScan(found, source, np.concatenate([none, *starts]), np.concatenate([none, *lengths]),
                     np.concatenate([none, *indices]), graph)


# --- the top level: a Python walk over the records of the model and of its graph -----------------------------


def _varint(data: bytes, at: int, end: int) -> tuple[int, int]:
    """The varint at ``at`` and where it ends; (-1, end + 1) when it runs past ``end`` or is over 9 bytes."""
    value = shift = 0
    while at < end and shift < 63:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    return -1, end + 1


def _skip(data: bytes, wire: int, at: int, end: int) -> int:
    """Where the field whose value starts at ``at`` ends, or end + 1 when it is malformed."""
    if wire == 0:
        return _varint(data, at, end)[1]
    if wire == 2:
        length, at = _varint(data, at, end)
        return at + length if length >= 0 else end + 1
    if wire == 1:
        return at + 8
    if wire == 5:
        return at + 4
    return end + 1  # groups (3, 4) and the undefined 6, 7


def _graph_span(data: bytes) -> tuple[int, int] | None:
    """Where the payload of ModelProto.graph is, if it occurs once and the model's bytes are well formed."""
    at, end = 0, len(data)
    span = None
    while at < end:
        tag, at = _varint(data, at, end)
        if tag < 0:
            return None
        if tag == (7 << 3 | 2):
            if span is not None:
                return None
            length, at = _varint(data, at, end)
            if length < 0 or at + length > end:
                return None
            span = (at, at + length)
            at += length
        else:
            at = _skip(data, tag & 7, at, end)
            if at > end:
                return None
    return span


def _graph_records(data: bytes, source: np.ndarray, at: int, end: int) -> tuple[np.ndarray, ...] | None:
    """The payload spans of the graph's initializer and node records: (starts, ends) of each, in order."""
    positions = _field_positions(data, at, end)
    if positions is None:
        return None
    tags, tag_lengths, _ = _varints(source, positions)
    _, length_lengths, _ = _varints(source, positions + tag_lengths)
    starts = positions + tag_lengths + length_lengths
    ends = np.append(positions[1:], end)
    fields, wires = tags >> 3, tags & 7
    records = (fields == 1) | (fields == 5)
    if (wires[records] != 2).any():
        return None  # a node or an initializer with another wire type: protobuf's business
    initializers, nodes = np.flatnonzero(fields == 5), np.flatnonzero(fields == 1)
    return starts[initializers], ends[initializers], starts[nodes], ends[nodes]


def _field_positions(data: bytes, at: int, end: int) -> np.ndarray | None:
    """Where each field of the message in data[at:end] begins, or None when they do not add up to its end."""
    positions = array.array("q")
    add = positions.append
    try:
        while at < end:
            add(at)
            tag = data[at]
            if tag < 0x80 and tag & 7 == 2:  # a one-byte tag and a length: the graph's usual field
                length = data[at + 1]
                if length < 0x80:
                    at += 2 + length
                    continue
            tag, after = _varint(data, at, end)
            if tag < 0:
                return None
            at = _skip(data, tag & 7, after, end)
    except IndexError:
        return None
    if at != end:
        return None
    return np.frombuffer(positions, dtype=np.int64)


# --- the records: many messages of one kind, a field of each at a time ---------------------------------------


def _varints(source: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The varints at positions ``at``: values, lengths, and which are valid (in the bytes, at most 9 bytes:
    below 2^63). Most are one byte; only the others take the longer way."""
    last = len(source) - 1
    inside = at <= last
    first = source[np.minimum(at, last)]
    values = first.astype(np.int64)
    lengths = np.ones(len(at), dtype=np.int64)
    long = np.flatnonzero(first >= 0x80)
    if long.size:
        window = source[np.minimum(at[long, None] + _TEN, last)].astype(np.int64)
        more = window >= 0x80
        stop = np.argmin(more, axis=1)  # the first byte without "more" (0 if all have it: caught below)
        valid = ~more[np.arange(long.size), stop] & (stop <= 8) & (at[long] + stop <= last)
        values[long] = (((window & 0x7F) << _SHIFTS) * (_TEN <= stop[:, None])).sum(axis=1)
        lengths[long] = stop + 1
        inside[long] &= valid
    return values, lengths, inside


class _Walk:
    """Walks many records of one message type together: each round reads the next field of every record still
    going. A malformed field or a record longer than _ROUNDS fields marks the record ``broken``."""

    def __init__(self, source: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self._source = source
        self._pos = starts.copy()
        self._ends = ends
        self.broken = np.zeros(len(starts), dtype=bool)

    def rounds(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Per round: the records read (row numbers), their field numbers, wire types, values (wire 0 and 2: the
        varint, for 2 the length) and where the payload of a wire-2 field starts; malformed fields left out."""
        pos, ends, source = self._pos, self._ends, self._source
        for _ in range(_ROUNDS):
            rows = np.flatnonzero(pos < ends)
            if not rows.size:
                return
            at = pos[rows]
            tags, tag_lengths, tags_ok = _varints(source, at)
            at += tag_lengths
            values, value_lengths, values_ok = _varints(source, at)
            wires = tags & 7
            payload = at + value_lengths
            after = np.where(wires == 0, payload, payload + values)
            after = np.where(wires == 1, at + 8, np.where(wires == 5, at + 4, after))
            end = ends[rows]
            ok = (
                tags_ok & (tags >= 8)
                & (((wires == 0) | (wires == 2)) & values_ok | (wires == 1) | (wires == 5))
                & (after <= end) & (after >= at)  # (a huge length wraps below ``at``)
            )
            after[~ok] = end[~ok]
            self.broken[rows[~ok]] = True
            pos[rows] = after
            keep = np.flatnonzero(ok)
            yield rows[keep], tags[keep] >> 3, wires[keep], values[keep], payload[keep]
        self.broken |= pos < ends  # more fields than _ROUNDS


def _singular(
    chosen: np.ndarray, rows: np.ndarray, fields: np.ndarray, values: np.ndarray, payload: np.ndarray,
    seen: np.ndarray, twice: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ``chosen`` fields of a round (singular ones: rows, field numbers, values, payload starts); records
    that had the field already are marked in ``twice`` (``seen`` keeps a bit per field met)."""
    r, f, v, p = rows[chosen], fields[chosen], values[chosen], payload[chosen]
    bit = np.left_shift(1, f)
    twice[r[(seen[r] & bit) != 0]] = True
    seen[r] |= bit
    return r, f, v, p


def _span_text(source: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[str | None]:
    """The UTF-8 text of each span: "" for a span of -1, None where it is not UTF-8."""
    n = len(starts)
    lengths = np.where(starts >= 0, ends - starts, 0)
    total = int(lengths.sum())
    if not total:
        return [""] * n
    # Gather the spans into one bytes object, each followed by a NUL, and split the decoded text at the NULs.
    before = np.cumsum(lengths) - lengths  # where each span's bytes begin among the spans' bytes
    within = np.arange(total, dtype=np.int64) - np.repeat(before, lengths)
    gathered = np.zeros(total + n, dtype=np.uint8)
    gathered[np.repeat(before + np.arange(n), lengths) + within] = source[np.repeat(starts, lengths) + within]
    blob = gathered.tobytes()
    if blob.count(0) == n:  # no NUL inside a span (UTF-8 never uses the byte 0 within a character)
        try:
            return list(blob.decode("utf-8").split("\x00")[:n])
        except UnicodeDecodeError:
            pass
    texts: list[str | None] = []
    for a, b in zip((before + np.arange(n)).tolist(), (before + np.arange(n) + lengths).tolist(), strict=True):
        try:
            texts.append(blob[a:b].decode("utf-8"))
        except UnicodeDecodeError:
            texts.append(None)
    return texts


class _Read:
    """What was read of some records: the summary of each one's tensor after its name (None: not read here),
    where its stored bytes start and how many (-1: not read here)."""

    tails: list[tuple[Any, ...] | None]
    data_start: np.ndarray
    data_length: np.ndarray


class _Tensors(_Read):
    """TensorProto records in the common form: each one's name, the rest of its summary (after the name) and where
    its stored bytes start; the summary is None for a record left to the parsed model."""

    def __init__(self, source: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        n = self.count = len(starts)
        walk = _Walk(source, starts, ends)
        dims = np.zeros((n, _MAX_DIMS), dtype=np.int64)
        ndims = np.zeros(n, dtype=np.int64)
        seen = np.zeros(n, dtype=np.int64)  # a bit per singular field met
        unusual = np.zeros(n, dtype=bool)  # another field, or a field twice
        code = np.zeros(n, dtype=np.int64)
        name_start = np.full(n, -1, dtype=np.int64)
        name_end = np.full(n, -1, dtype=np.int64)
        data_start = np.full(n, -1, dtype=np.int64)
        data_length = np.full(n, -1, dtype=np.int64)
        data_field = np.zeros(n, dtype=np.int64)
        for rows, fields, wires, values, payload in walk.rounds():
            is_dim = (fields == 1) & (wires == 0)
            r, count = rows[is_dim], ndims[rows[is_dim]]
            fits = count < _MAX_DIMS
            dims[r[fits], count[fits]] = values[is_dim][fits]
            ndims[r] += 1
            single = ((fields == 2) & (wires == 0)) | (
                ((fields == 8) | (fields == 9) | (fields == 4) | (fields == 10)) & (wires == 2)
            )
            unusual[rows[~is_dim & ~single]] = True
            r, f, v, p = _singular(single, rows, fields, values, payload, seen, unusual)
            m = f == 2
            code[r[m]] = v[m]
            m = f == 8
            name_start[r[m]], name_end[r[m]] = p[m], p[m] + v[m]
            m = (f != 2) & (f != 8)
            data_start[r[m]], data_length[r[m]], data_field[r[m]] = p[m], v[m], f[m]
        data_fields = (seen >> 4 & 1) + (seen >> 9 & 1) + (seen >> 10 & 1)
        good = ~walk.broken & ~unusual & (ndims <= _MAX_DIMS) & (data_fields == 1)
        tails: list[tuple[Any, ...] | None] = [None] * n
        rows = np.flatnonzero(good)
        if rows.size:
            pair_tails, pair_of = _pair_facts(code[rows], ndims[rows], dims[rows], data_field[rows],
                                              data_length[rows])
            rows = rows[pair_of >= 0]
            pair_of = pair_of[pair_of >= 0]
            names = _span_text(source, name_start[rows], name_end[rows])
            if len(rows) == n and None not in names:  # every one in the common form
                self.names: list[str] = names  # type: ignore[assignment]
                self.tails = list(map(pair_tails.__getitem__, pair_of.tolist()))
                self.data_start, self.data_length = data_start, data_length
                return
            self.names = [""] * n
            for row, name, pair in zip(rows.tolist(), names, pair_of.tolist(), strict=True):
                if name is not None:
                    self.names[row] = name
                    tails[row] = pair_tails[pair]
        else:
            self.names = [""] * n
        self.tails = tails
        read = np.array([tail is not None for tail in tails], dtype=bool)
        self.data_start, self.data_length = np.where(read, data_start, -1), np.where(read, data_length, -1)


def _pair_facts(
    codes: np.ndarray, ndims: np.ndarray, dims: np.ndarray, data_field: np.ndarray, data_length: np.ndarray
) -> tuple[list[tuple[Any, ...]], np.ndarray]:
    """The summary tails of the (data_type, dims, storage) triples of common-form tensors, each computed once, and
    each tensor's triple (-1 where its data field or byte count does not fit its type and dims)."""
    raw = data_field == _RAW_DATA
    keys = np.concatenate([codes[:, None], ndims[:, None], raw[:, None], dims], axis=1)
    # Group equal keys by a hash; a tensor whose key differs from its group's first (a collision) is left out.
    hashes = keys @ _MIX[: keys.shape[1]]
    _, first, group = np.unique(hashes, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    same = (keys == keys[first][group]).all(axis=1)
    tails: list[tuple[Any, ...]] = []
    expected = np.full(len(first), -1, dtype=np.int64)  # the byte count of each group's data field
    field = np.full(len(first), -1, dtype=np.int64)
    for g, (code, count, is_raw, *shape_dims) in enumerate(keys[first].tolist()):
        shape = tuple(shape_dims[:count])
        facts = _SHAPES.get((code, shape)) or _shape_facts(code, shape)
        tails.append(())
        if facts is None:
            continue
        onnx_type, size, nbytes, packed, _, with_typed, typed_field, entries = facts
        tails[g] = (onnx_type, shape, nbytes, "raw" if is_raw else "typed", size, packed)
        if is_raw:
            expected[g], field[g] = packed, _RAW_DATA
        elif with_typed >= 0:
            expected[g], field[g] = entries * _QUICK_TYPED[onnx_type], _FIELD_NUMBER[typed_field]
    fits = same & (data_field == field[group]) & (data_length == expected[group]) & (field[group] >= 0)
    return tails, np.where(fits, group, -1)


_MIX = np.random.default_rng(0x0DDBA11).integers(1, 1 << 62, 16, dtype=np.int64) | 1


class _Nodes(_Read):
    """NodeProto records: the Constant nodes in the usual form (read here) and the nodes left to the parsed model
    (with a subgraph, or not as expected), in order; ``rows`` are their row numbers, and ``tails`` is None for
    those left to the parsed model."""

    def __init__(self, source: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        n = len(starts)
        walk = _Walk(source, starts, ends)
        outputs = np.zeros(n, dtype=np.int64)
        output = (np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
        spans = {f: (np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)) for f in (3, 4, 7)}
        seen = np.zeros(n, dtype=np.int64)
        odd = np.zeros(n, dtype=bool)
        attribute_rows, attribute_starts, attribute_ends = [], [], []
        for rows, fields, wires, values, payload in walk.rounds():
            odd[rows[(fields <= 10) & (wires != 2)]] = True  # a known field of another wire type
            m = (fields == 2) & (wires == 2)
            r = rows[m]
            first = outputs[r] == 0
            output[0][r[first]] = payload[m][first]
            output[1][r[first]] = payload[m][first] + values[m][first]
            outputs[r] += 1
            single = ((fields == 3) | (fields == 4) | (fields == 7)) & (wires == 2)  # name, op_type, domain
            r, f, v, p = _singular(single, rows, fields, values, payload, seen, odd)
            for number, (span_start, span_end) in spans.items():
                m = f == number
                span_start[r[m]], span_end[r[m]] = p[m], p[m] + v[m]
            m = (fields == 5) & (wires == 2)
            attribute_rows.append(rows[m])
            attribute_starts.append(payload[m])
            attribute_ends.append(payload[m] + values[m])
        odd |= walk.broken
        a_rows = np.concatenate(attribute_rows) if attribute_rows else np.zeros(0, dtype=np.int64)
        a_starts = np.concatenate(attribute_starts) if attribute_starts else np.zeros(0, dtype=np.int64)
        a_ends = np.concatenate(attribute_ends) if attribute_ends else np.zeros(0, dtype=np.int64)
        usual, subgraph, tensor_start, tensor_end = _attributes(source, a_starts, a_ends)
        left = odd.copy()  # left to the parsed model
        left[a_rows[subgraph]] = True
        constant = _equals(source, *spans[4], _CONSTANT) & (  # in the default domain, unnamed or named
            (spans[7][0] < 0) | _equals(source, *spans[7], b"") | _equals(source, *spans[7], b"ai.onnx")
        )
        # The usual Constant: one attribute, the usual value.
        attributes = np.bincount(a_rows, minlength=n)
        only = np.full(n, -1, dtype=np.int64)  # the position of a node's attribute among a_rows, if it has one
        only[a_rows] = np.arange(len(a_rows))
        candidates = np.flatnonzero(constant & ~left & (attributes == 1))
        candidates = candidates[usual[only[candidates]]]
        at = only[candidates]
        tensors = _Tensors(source, tensor_start[at], tensor_end[at])
        outputs_text = _span_text(source, output[0][candidates], output[1][candidates])
        names_text = _span_text(source, spans[3][0][candidates], spans[3][1][candidates])
        self.rows = np.flatnonzero(left | constant)
        if (
            len(candidates) == len(self.rows) and None not in tensors.tails and None not in outputs_text
            and None not in names_text
        ):  # every one read here: the usual model of many constants
            self.outputs, self.names, self.tensor_names, self.tails = (
                outputs_text, names_text, tensors.names, tensors.tails,
            )
            self.data_start, self.data_length = tensors.data_start, tensors.data_length
            return
        read: dict[int, tuple[Any, ...]] = {}
        for row, name, node_name, tensor_name, tail, start, length in zip(
            candidates.tolist(), outputs_text, names_text, tensors.names, tensors.tails, tensors.data_start.tolist(),
            tensors.data_length.tolist(), strict=True,
        ):
            if name is not None and node_name is not None and tail is not None:
                read[row] = (name, node_name, tensor_name, tail, start, length)
        none = ("", "", "", None, -1, -1)
        columns = list(zip(*[read.get(row, none) for row in self.rows.tolist()], strict=True)) or [()] * 6
        self.outputs, self.names, self.tensor_names, self.tails = (list(c) for c in columns[:4])
        self.data_start, self.data_length = (np.array(c, dtype=np.int64) for c in columns[4:])


def _equals(source: np.ndarray, starts: np.ndarray, ends: np.ndarray, text: bytes) -> np.ndarray:
    """Which spans hold exactly ``text`` (a span of -1: none)."""
    result = (ends - starts == len(text)) & (starts >= 0)
    rows = np.flatnonzero(result)
    if rows.size and text:
        window = source[starts[rows, None] + np.arange(len(text))]
        result[rows] = (window == np.frombuffer(text, dtype=np.uint8)).all(axis=1)
    return result


def _attributes(
    source: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For AttributeProto records: which are the usual ``value`` of a Constant (name "value", type TENSOR or
    unstated, a tensor and nothing else), which hold a subgraph (or are malformed), and the tensor's span."""
    n = len(starts)
    walk = _Walk(source, starts, ends)
    seen = np.zeros(n, dtype=np.int64)
    other = np.zeros(n, dtype=bool)
    subgraph = np.zeros(n, dtype=bool)
    attribute_type = np.zeros(n, dtype=np.int64)
    name = (np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
    tensor = (np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
    for rows, fields, wires, values, payload in walk.rounds():
        subgraph[rows[(fields == 6) | (fields == 11)]] = True
        known = ((fields == 1) & (wires == 2)) | ((fields == 5) & (wires == 2)) | ((fields == 20) & (wires == 0))
        other[rows[~known]] = True
        r, f, v, p = _singular(known, rows, fields, values, payload, seen, other)
        m = f == 20
        attribute_type[r[m]] = v[m]
        m = f == 1
        name[0][r[m]], name[1][r[m]] = p[m], p[m] + v[m]
        m = f == 5
        tensor[0][r[m]], tensor[1][r[m]] = p[m], p[m] + v[m]
    subgraph |= walk.broken
    typed = (seen >> 20 & 1) == 1
    usual = (
        ~other & ~subgraph & (tensor[0] >= 0) & _equals(source, *name, b"value")
        & (~typed | (attribute_type == _TENSOR_ATTRIBUTE))
    )
    return usual, subgraph, tensor[0], tensor[1]
