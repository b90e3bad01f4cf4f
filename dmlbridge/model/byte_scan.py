"""The byte scan: finding the main graph's small constants straight from a model's serialized bytes.

A model of many tiny constants (50,000 Constant nodes and initializers) spends most of its conversion time in
Python, reading protobuf fields one at a time: a few microseconds a constant. This module reads those constants
from the protobuf wire format instead, all records of a kind at once, with numpy. Anything it does not
recognise is left to :mod:`dmlbridge.model.constants`, which reads the parsed ``ModelProto``. The two must find the
same constants; ``tests/model/test_byte_scan.py`` holds them to it.

What it reads of ONNX's messages
--------------------------------
The wire format itself is :mod:`dmlbridge.onnx.wire`'s; the field numbers are onnx.proto's, named below
(``tests/model/test_byte_scan.py`` checks them against onnx's own descriptors).

- **ModelProto:** ``graph`` is field 7. It is read only if it occurs exactly once (protobuf merges a second
  occurrence into the first).
- **GraphProto:** ``node`` (1) and ``initializer`` (5) records are each read as a message of their own.
  ``sparse_initializer`` and everything else are left to the parsed model. The record counts must equal the
  parsed model's.
- **TensorProto in the common form:**
  - ``dims`` (1, one varint each: ONNX's proto2 does not pack them), ``data_type`` (2) and ``name`` (8);
  - one data field: ``raw_data`` (9) or, for FLOAT/COMPLEX64 and DOUBLE/COMPLEX128, the packed ``float_data``
    (4) or ``double_data`` (10), whose bytes are the little-endian values.

  These go to the parsed model instead (``constants``): any other field, a field twice, a
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

from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

import numpy as np

from dmlbridge.model.constants import (
    ModelConstant,
    function_constants,
    initializer_constant,
    make_constant,
    make_keys_unique,
    node_constants,
    sparse_constants,
)
from dmlbridge.onnx.tensor_proto import TYPE_OF_CODE, tensor_sizes
from dmlbridge.onnx.wire import (
    LENGTH,
    VARINT,
    RecordWalk,
    field_positions,
    once,
    single_field_span,
    span_text,
    spans_equal,
    varints,
)
from dmlbridge.types.data_types import OnnxDataType

__all__ = ["BYTE_SCAN_MAX_BYTES", "SCANNED_MAX_BYTES", "BytesScan", "scan_bytes"]

BYTE_SCAN_MAX_BYTES = 1 << 26
"""Models up to this size keep their bytes for this scan (they are held in memory while converting)."""


class ModelField(IntEnum):
    """ModelProto's field read here (onnx.proto)."""

    GRAPH = 7


class GraphField(IntEnum):
    """GraphProto's fields read here."""

    NODE = 1
    INITIALIZER = 5


class NodeField(IntEnum):
    """NodeProto's fields read here."""

    OUTPUT = 2
    NAME = 3
    OP_TYPE = 4
    ATTRIBUTE = 5
    DOMAIN = 7


class AttributeField(IntEnum):
    """AttributeProto's fields read here."""

    NAME = 1
    T = 5
    G = 6
    GRAPHS = 11
    TYPE = 20


class TensorField(IntEnum):
    """TensorProto's fields read here."""

    DIMS = 1
    DATA_TYPE = 2
    FLOAT_DATA = 4
    NAME = 8
    RAW_DATA = 9
    DOUBLE_DATA = 10


ATTRIBUTE_TYPE_TENSOR = 4  # AttributeProto.AttributeType.TENSOR
_CHUNK = 1 << 15  # records parsed together: bounds the temporaries
# More records than this (a hostile model of millions of empty ones) are left to the parsed model: the positions
# of every field of the graph are held at once, and a few arrays of them would take more memory than is useful.
_MAX_RECORDS = 1 << 22
_MAX_DIMS = 8  # a tensor with more dims is left to the parsed model
SCANNED_MAX_BYTES = 1 << 16  # a tensor with more bytes of data is left to the parsed model
_CONSTANT = b"Constant"
# The packed typed fields whose bytes are the values themselves: the field and each entry's width.
_TYPED_FIELD = {
    OnnxDataType.FLOAT: (TensorField.FLOAT_DATA, 4),
    OnnxDataType.COMPLEX64: (TensorField.FLOAT_DATA, 4),
    OnnxDataType.DOUBLE: (TensorField.DOUBLE_DATA, 8),
    OnnxDataType.COMPLEX128: (TensorField.DOUBLE_DATA, 8),
}
_DATA_FIELDS = (TensorField.FLOAT_DATA, TensorField.RAW_DATA, TensorField.DOUBLE_DATA)


@dataclass(frozen=True)
class BytesScan:
    """The constants of a model, the main graph's common ones read from its bytes.

    ``found``: every constant, as constants.find_constants gives them, but with ``proto`` None for those read from
    the bytes. ``starts``: for each constant, where its stored bytes (raw_data or a packed typed field) begin in
    ``source``, or -1; ``lengths``: how many there are (``packed_nbytes``). ``indices``: for those, the index of
    its initializer or Constant node in the main graph.
    """

    found: list[ModelConstant]
    source: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    indices: np.ndarray
    graph: Any

    def subset(self, positions: list[int]) -> BytesScan:
        """The scan of ``found[i]`` for each of ``positions`` only, in that order (a selection of constants)."""
        at = np.asarray(positions, dtype=np.intp)
        return replace(self, found=[self.found[i] for i in positions], starts=self.starts[at],
                       lengths=self.lengths[at], indices=self.indices[at])

    def extended(self, more: list[ModelConstant]) -> BytesScan:
        """This scan with ``more`` constants after its own, none read from the bytes (derived constants)."""
        if not more:
            return self
        none = np.full(len(more), -1, dtype=self.starts.dtype)
        return replace(self, found=[*self.found, *more], starts=np.concatenate([self.starts, none]),
                       lengths=np.concatenate([self.lengths, np.zeros(len(more), self.lengths.dtype)]),
                       indices=np.concatenate([self.indices, np.zeros(len(more), self.indices.dtype)]))

    def with_tensor(self, position: int) -> ModelConstant:
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




def scan_bytes(model: Any, data: bytes, graph_fields: np.ndarray | None = None) -> BytesScan | None:
    """Every constant of ``model`` (a ModelProto parsed from ``data``), as constants.find_constants finds them;
    None when the bytes are not laid out as this module expects (the caller then reads the parsed model).
    ``graph_fields``: where each field of the model's one graph begins, when the census read them already."""
    graph = model.graph
    if len(graph.initializer) + len(graph.node) > _MAX_RECORDS:
        return None
    span = single_field_span(data, ModelField.GRAPH)
    if span is None:
        return None
    source = np.frombuffer(data, dtype=np.uint8)
    records = _graph_records(data, source, *span, graph_fields)
    if records is None:
        return None
    init_starts, init_ends, node_starts, node_ends = records
    if len(init_starts) != len(graph.initializer) or len(node_starts) != len(graph.node):
        return None
    found: list[ModelConstant] = []
    starts: list[np.ndarray] = []  # pieces of BytesScan.starts, .lengths and .indices
    lengths: list[np.ndarray] = []
    indices: list[np.ndarray] = []
    parsed: dict[str, list[Any]] = {}  # the parsed model's records, listed when first needed

    def add(made: list[ModelConstant | None], read: _Read, read_indices: np.ndarray, kind: str) -> None:
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
                found.append(initializer_constant(parsed[kind], index, ""))
            else:
                node_constants(parsed[kind][index], index, "", found, 0)
            unread(before)

    def unread(before: int) -> None:
        if len(found) > before:
            starts.append(np.full(len(found) - before, -1, dtype=np.int64))
            lengths.append(starts[-1])
            indices.append(starts[-1])

    for first in range(0, len(init_starts), _CHUNK):
        tensors = _Tensors(source, init_starts[first : first + _CHUNK], init_ends[first : first + _CHUNK])
        made: list[ModelConstant | None] = [
            None if tail is None else make_constant((name or f"<unnamed {index}>", name, "", "initializer",
                                                     "initializer", None, name, *tail))
            for index, name, tail in zip(range(first, first + tensors.count), tensors.names, tensors.tails,
                                         strict=True)
        ]
        add(made, tensors, np.arange(first, first + tensors.count, dtype=np.int64), "initializer")
    before = len(found)
    sparse_constants(graph, "", found)
    unread(before)
    for first in range(0, len(node_starts), _CHUNK):
        nodes = _Nodes(source, node_starts[first : first + _CHUNK], node_ends[first : first + _CHUNK])
        made = [
            None if tail is None else make_constant((
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
    function_constants(model, found)
    unread(before)
    make_keys_unique(found)
    none = np.zeros(0, dtype=np.int64)
    return BytesScan(found, source, np.concatenate([none, *starts]), np.concatenate([none, *lengths]),
                     np.concatenate([none, *indices]), graph)


def _graph_records(
    data: bytes, source: np.ndarray, at: int, end: int, positions: np.ndarray | None = None
) -> tuple[np.ndarray, ...] | None:
    """The payload spans of the graph's initializer and node records: (starts, ends) of each, in order
    (``positions``: where each field of the graph begins, if known)."""
    if positions is None:
        positions = field_positions(data, at, end)
    if positions is None:
        return None
    tags, tag_lengths, _ = varints(source, positions)
    _, length_lengths, _ = varints(source, positions + tag_lengths)
    starts = positions + tag_lengths + length_lengths
    ends = np.append(positions[1:], end)
    fields, wires = tags >> 3, tags & 7
    records = (fields == GraphField.NODE) | (fields == GraphField.INITIALIZER)
    if (wires[records] != LENGTH).any():
        return None  # a node or an initializer with another wire type: protobuf's business
    initializers, nodes = np.flatnonzero(fields == GraphField.INITIALIZER), np.flatnonzero(fields == GraphField.NODE)
    return starts[initializers], ends[initializers], starts[nodes], ends[nodes]


# The facts of a (data_type, dims) pair: (type, size, nbytes, packed bytes, the typed field or 0, its entries),
# computed once per pair; only pairs of at most SCANNED_MAX_BYTES bytes. Cleared past _SHAPES_MAX: a hostile model can
# have any number of shapes.
_SHAPE_FACTS: dict[tuple[int, tuple[int, ...]], tuple[OnnxDataType, int, int, int, int, int]] = {}
_SHAPES_MAX = 4096


def shape_facts(code: int, shape: tuple[int, ...]) -> tuple[OnnxDataType, int, int, int, int, int] | None:
    """The facts of a tensor of ONNX type ``code`` and dims ``shape`` (see _SHAPE_FACTS), or None when the type is
    unknown, UNDEFINED or STRING, a dim is negative, the dims are more than any array can hold, or the tensor is
    over SCANNED_MAX_BYTES bytes."""
    onnx_type = TYPE_OF_CODE.get(code)
    if onnx_type is None or onnx_type in (OnnxDataType.UNDEFINED, OnnxDataType.STRING):
        return None
    counts = tensor_sizes(onnx_type, shape)  # (None: the checked path names what is wrong)
    if counts is None or counts[1] > SCANNED_MAX_BYTES:
        return None
    size, nbytes, packed = counts
    typed_field, width = _TYPED_FIELD.get(onnx_type, (0, 0))
    entries = size * (2 if onnx_type in (OnnxDataType.COMPLEX64, OnnxDataType.COMPLEX128) else 1)
    facts = (onnx_type, size, nbytes, packed, typed_field if size else 0, entries * width)
    if len(_SHAPE_FACTS) >= _SHAPES_MAX:
        _SHAPE_FACTS.clear()
    _SHAPE_FACTS[code, shape] = facts
    return facts


# --- the records: many messages of one kind, a field of each at a time ---------------------------------------


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
        walk = RecordWalk(source, starts, ends)
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
            is_dim = (fields == TensorField.DIMS) & (wires == VARINT)
            r, count = rows[is_dim], ndims[rows[is_dim]]
            fits = count < _MAX_DIMS
            dims[r[fits], count[fits]] = values[is_dim][fits]
            ndims[r] += 1
            single = ((fields == TensorField.DATA_TYPE) & (wires == VARINT)) | (
                ((fields == TensorField.NAME) | (fields == TensorField.RAW_DATA) | (fields == TensorField.FLOAT_DATA)
                 | (fields == TensorField.DOUBLE_DATA)) & (wires == LENGTH)
            )
            unusual[rows[~is_dim & ~single]] = True
            r, f, v, p = once(single, rows, fields, values, payload, seen, unusual)
            m = f == TensorField.DATA_TYPE
            code[r[m]] = v[m]
            m = f == TensorField.NAME
            name_start[r[m]], name_end[r[m]] = p[m], p[m] + v[m]
            m = (f != TensorField.DATA_TYPE) & (f != TensorField.NAME)
            data_start[r[m]], data_length[r[m]], data_field[r[m]] = p[m], v[m], f[m]
        data_fields = sum(seen >> number & 1 for number in _DATA_FIELDS)
        good = ~walk.broken & ~unusual & (ndims <= _MAX_DIMS) & (data_fields == 1)
        tails: list[tuple[Any, ...] | None] = [None] * n
        rows = np.flatnonzero(good)
        if rows.size:
            pair_tails, pair_of = _pair_facts(code[rows], ndims[rows], dims[rows], data_field[rows],
                                              data_length[rows])
            rows = rows[pair_of >= 0]
            pair_of = pair_of[pair_of >= 0]
            names = span_text(source, name_start[rows], name_end[rows])
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
    raw = data_field == TensorField.RAW_DATA
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
        facts = _SHAPE_FACTS.get((code, shape)) or shape_facts(code, shape)
        tails.append(())
        if facts is None:
            continue
        onnx_type, size, nbytes, packed, typed_field, typed_bytes = facts
        tails[g] = (onnx_type, shape, nbytes, "raw" if is_raw else "typed", size, packed)
        if is_raw:
            expected[g], field[g] = packed, TensorField.RAW_DATA
        elif typed_field:
            expected[g], field[g] = typed_bytes, typed_field
    fits = same & (data_field == field[group]) & (data_length == expected[group]) & (field[group] >= 0)
    return tails, np.where(fits, group, -1)


_MIX = np.random.default_rng(0x0DDBA11).integers(1, 1 << 62, 16, dtype=np.int64) | 1


class _Nodes(_Read):
    """NodeProto records: the Constant nodes in the usual form (read here) and the nodes left to the parsed model
    (with a subgraph, or not as expected), in order; ``rows`` are their row numbers, and ``tails`` is None for
    those left to the parsed model."""

    def __init__(self, source: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        n = len(starts)
        walk = RecordWalk(source, starts, ends)
        outputs = np.zeros(n, dtype=np.int64)
        output = (np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
        spans = {f: (np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
                 for f in (NodeField.NAME, NodeField.OP_TYPE, NodeField.DOMAIN)}
        seen = np.zeros(n, dtype=np.int64)
        odd = np.zeros(n, dtype=bool)
        attribute_rows, attribute_starts, attribute_ends = [], [], []
        for rows, fields, wires, values, payload in walk.rounds():
            odd[rows[(fields <= 10) & (wires != LENGTH)]] = True  # a known field of another wire type
            m = (fields == NodeField.OUTPUT) & (wires == LENGTH)
            r = rows[m]
            first = outputs[r] == 0
            output[0][r[first]] = payload[m][first]
            output[1][r[first]] = payload[m][first] + values[m][first]
            outputs[r] += 1
            single = (
                (fields == NodeField.NAME) | (fields == NodeField.OP_TYPE) | (fields == NodeField.DOMAIN)
            ) & (wires == LENGTH)
            r, f, v, p = once(single, rows, fields, values, payload, seen, odd)
            for number, (span_start, span_end) in spans.items():
                m = f == number
                span_start[r[m]], span_end[r[m]] = p[m], p[m] + v[m]
            m = (fields == NodeField.ATTRIBUTE) & (wires == LENGTH)
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
        domain = spans[NodeField.DOMAIN]
        constant = spans_equal(source, *spans[NodeField.OP_TYPE], _CONSTANT) & (  # in the default domain
            (domain[0] < 0) | spans_equal(source, *domain, b"") | spans_equal(source, *domain, b"ai.onnx")
        )
        # The usual Constant: one attribute, the usual value.
        attributes = np.bincount(a_rows, minlength=n)
        only = np.full(n, -1, dtype=np.int64)  # the position of a node's attribute among a_rows, if it has one
        only[a_rows] = np.arange(len(a_rows))
        candidates = np.flatnonzero(constant & ~left & (attributes == 1))
        candidates = candidates[usual[only[candidates]]]
        at = only[candidates]
        tensors = _Tensors(source, tensor_start[at], tensor_end[at])
        outputs_text = span_text(source, output[0][candidates], output[1][candidates])
        name_start, name_end = spans[NodeField.NAME]
        names_text = span_text(source, name_start[candidates], name_end[candidates])
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


def _attributes(
    source: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For AttributeProto records: which are the usual ``value`` of a Constant (name "value", type TENSOR or
    unstated, a tensor and nothing else), which hold a subgraph (or are malformed), and the tensor's span."""
    n = len(starts)
    walk = RecordWalk(source, starts, ends)
    seen = np.zeros(n, dtype=np.int64)
    other = np.zeros(n, dtype=bool)
    subgraph = np.zeros(n, dtype=bool)
    attribute_type = np.zeros(n, dtype=np.int64)
    name = (np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
    tensor = (np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
    for rows, fields, wires, values, payload in walk.rounds():
        subgraph[rows[(fields == AttributeField.G) | (fields == AttributeField.GRAPHS)]] = True
        known = (
            ((fields == AttributeField.NAME) & (wires == LENGTH)) | ((fields == AttributeField.T) & (wires == LENGTH))
            | ((fields == AttributeField.TYPE) & (wires == VARINT))
        )
        other[rows[~known]] = True
        r, f, v, p = once(known, rows, fields, values, payload, seen, other)
        m = f == AttributeField.TYPE
        attribute_type[r[m]] = v[m]
        m = f == AttributeField.NAME
        name[0][r[m]], name[1][r[m]] = p[m], p[m] + v[m]
        m = f == AttributeField.T
        tensor[0][r[m]], tensor[1][r[m]] = p[m], p[m] + v[m]
    subgraph |= walk.broken
    typed = (seen >> AttributeField.TYPE & 1) == 1
    usual = (
        ~other & ~subgraph & (tensor[0] >= 0) & spans_equal(source, *name, b"value")
        & (~typed | (attribute_type == ATTRIBUTE_TYPE_TENSOR))
    )
    return usual, subgraph, tensor[0], tensor[1]
