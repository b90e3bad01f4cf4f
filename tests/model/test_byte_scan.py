"""The byte scan (dmlbridge.model.byte_scan) against the parsed model (constants.find_constants).

The byte scan reads the main graph's common constants from the protobuf wire format and leaves every other
record to the parsed model. Either it gives up on a model (None), or it finds exactly what ``find_constants`` finds:
- the same constants, in the same order, with the same errors;
- where it read a constant from the bytes, a span holding exactly the constant's stored bytes, checked here
  against ``struct``.

The models are written here, byte by byte, by a small encoder of our own. It can write what protobuf's own
serializer never does but a hostile or odd writer may:
- packed dims and unpacked float_data;
- a field twice (protobuf keeps the last scalar, concatenates repeated fields and merges messages);
- overlong varints, unknown fields, shuffled field order;
- names that are not UTF-8 or that hold a NUL.
Protobuf parses them its own way, and the byte scan must agree or hand over.
"""

from __future__ import annotations

import math
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from budget import examples
from builders import EDIT, mutate_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import TARGETS, build_model, check_independently, outputs, per_channel_model, small_model
from onnx import TensorProto, helper, numpy_helper

import dmlbridge.model.onnx_file as model_file
from dmlbridge import Target, convert_model, load_plan, plan_model
from dmlbridge.errors import DmlBridgeError, TensorProtoError
from dmlbridge.model import byte_scan
from dmlbridge.model.constants import find_constants
from dmlbridge.model.onnx_file import read_model
from dmlbridge.writing.image import ImageWriter

# --- a protobuf encoder of our own -----------------------------------------------------------------------------


def varint(value: int, overlong: int = 0) -> bytes:
    """The varint of ``value`` (negative: two's complement in 64 bits, as protobuf writes int64), padded with
    ``overlong`` extra continuation bytes (still a valid varint, as protobuf reads them)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value | (0x80 if overlong else 0))
    out.extend([0x80] * (overlong - 1) + [0x00] if overlong else [])
    return bytes(out)


def field(number: int, wire: int, payload: bytes | int) -> bytes:
    tag = varint(number << 3 | wire)
    if wire == 0:
        assert isinstance(payload, int)
        return tag + varint(payload)
    assert isinstance(payload, bytes)
    if wire == 2:
        return tag + varint(len(payload)) + payload
    return tag + payload  # 1 and 5: the caller gives 8 or 4 bytes


# Bits per element of the ONNX types used here (onnx.proto), for the raw_data byte count.
BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64, 14: 64, 16: 16,
        17: 8, 21: 4, 22: 4}
CODES = [1, 1, 1, 11, 10, 3, 7, 22, 21, 9, 14, 12, 13, 16, 0, 8, 99]  # FLOAT most often; UNDEFINED, STRING, unknown


TENSOR_TWISTS = [
    "packed_dims", "overlong_dim", "negative_dim", "many_dims", "no_type", "type_twice", "type_wire_2",
    "no_name", "empty_name", "unicode_name", "bad_utf8_name", "nul_name", "long_name", "name_twice",
    "raw_short", "raw_long", "raw_empty", "float_packed", "float_unpacked", "float_split", "double_packed",
    "int32_packed", "raw_and_float", "raw_twice", "no_data", "doc_string", "unknown_field", "external",
    "segment", "shuffle", "overlong_length",
]
# The twists that leave a FLOAT[4] tensor in a common form, which the byte scan reads.
STILL_COMMON = {"overlong_dim", "overlong_length", "no_name", "empty_name", "unicode_name", "nul_name",
                "long_name", "float_packed", "shuffle"}


@st.composite
def tensor_records(draw: st.DrawFn) -> bytes:
    """The bytes of a TensorProto: usually in a common form, often with a twist."""
    code = draw(st.sampled_from(CODES))
    dims = draw(st.lists(st.integers(0, 4), max_size=3))
    plain: list[str] = []  # two in three: most records of a model are in the common form
    twists = draw(st.one_of(st.just(plain), st.just(plain), st.lists(st.sampled_from(TENSOR_TWISTS), min_size=1,
                                                                      max_size=3)))
    return tensor_bytes(code, dims, twists, draw(st.integers(0, 2**32 - 1)))


def tensor_bytes(code: int, dims: list[int], twists: list[str], seed: int) -> bytes:
    """A TensorProto of ``code`` and ``dims`` holding raw_data (random bytes), with the ``twists`` applied."""
    size = math.prod(dims)
    rng = random.Random(seed)
    fields: list[bytes] = []
    if "packed_dims" in twists:
        fields.append(field(1, 2, b"".join(varint(d) for d in dims)))
    else:
        for k, d in enumerate(dims):
            fields.append(field(1, 0, -1 if k == 0 and "negative_dim" in twists else d)
                          if "overlong_dim" not in twists else varint(1 << 3) + varint(d, overlong=2))
    if "many_dims" in twists:
        fields.extend(field(1, 0, 1) for _ in range(9))
    if "no_type" not in twists:
        fields.append(field(2, 2, varint(code)) if "type_wire_2" in twists else field(2, 0, code))
    if "type_twice" in twists:
        fields.append(field(2, 0, rng.choice([1, 11, 7])))
    name = b"w%d" % rng.randrange(10**6)
    for twist, text in (("empty_name", b""), ("unicode_name", "wé→".encode()), ("bad_utf8_name", b"w\xff"),
                        ("nul_name", b"a\x00b"), ("long_name", b"n" * 200)):
        if twist in twists:
            name = text
    if "no_name" not in twists:
        fields.append(field(8, 2, name))
    if "name_twice" in twists:
        fields.append(field(8, 2, b"other"))
    raw_length = -(-size * BITS.get(code, 8) // 8)
    raw = bytes(rng.randrange(256) for _ in range(raw_length))
    floats = [rng.uniform(-2, 2) for _ in range(size * (2 if code == 14 else 1))]
    if "raw_short" in twists:
        raw = raw[:-1]
    if "raw_long" in twists:
        raw += b"\x01"
    if "raw_empty" in twists:
        raw = b""
    if "float_packed" in twists:
        fields.append(field(4, 2, struct.pack(f"<{len(floats)}f", *floats)))
    elif "float_unpacked" in twists:
        fields.extend(field(4, 5, struct.pack("<f", v)) for v in floats)
    elif "float_split" in twists and floats:
        half = len(floats) // 2
        fields.append(field(4, 2, struct.pack(f"<{half}f", *floats[:half])))
        fields.append(field(4, 2, struct.pack(f"<{len(floats) - half}f", *floats[half:])))
    elif "double_packed" in twists:
        fields.append(field(10, 2, struct.pack(f"<{len(floats)}d", *floats)))
    elif "int32_packed" in twists:
        fields.append(field(5, 2, b"".join(varint(rng.randrange(100)) for _ in range(size))))
    elif "no_data" not in twists:
        if "overlong_length" in twists:
            fields.append(varint(9 << 3 | 2) + varint(len(raw), overlong=1) + raw)
        else:
            fields.append(field(9, 2, raw))
    if "raw_and_float" in twists:
        fields.append(field(4, 2, struct.pack("<f", 1.0)))
    if "raw_twice" in twists:
        fields.append(field(9, 2, raw))
    if "doc_string" in twists:
        fields.append(field(12, 2, b"doc"))
    if "unknown_field" in twists:
        fields.append(field(99, 0, 7))
    if "external" in twists:
        fields.append(field(13, 2, field(1, 2, b"location") + field(2, 2, b"w.bin")))
        fields.append(field(14, 0, 1))
    if "segment" in twists:
        fields.append(field(3, 2, field(1, 0, 0) + field(2, 0, 1)))
    if "shuffle" in twists:
        rng.shuffle(fields)
    return b"".join(fields)


def attribute(name: bytes, tensor: bytes | None, attribute_type: int | None = 4, extra: bytes = b"") -> bytes:
    out = field(1, 2, name)
    if attribute_type is not None:
        out += field(20, 0, attribute_type)
    if tensor is not None:
        out += field(5, 2, tensor)
    return out + extra


def subgraph(tensor: bytes) -> bytes:
    """A GraphProto with an initializer and a Constant node, both holding ``tensor``."""
    node = field(2, 2, b"inner_c") + field(4, 2, b"Constant") + field(5, 2, attribute(b"value", tensor))
    return field(1, 2, node) + field(2, 2, b"inner") + field(5, 2, tensor)


# Node forms the byte scan reads (a Constant in the usual form) and those it leaves to the parsed model.
READ_NODES = ["usual", "type_unstated", "named", "domain_ai_onnx", "domain_empty", "two_outputs", "no_output",
              "unknown_field", "doc_string", "unicode_names"]
OTHER_NODES = ["type_zero", "type_wrong", "second_attribute", "attribute_doc", "reference", "renamed",
               "value_twice", "op_type_twice", "domain_other", "output_wire_0", "if", "loop_graphs",
               "constant_floats", "bad_utf8_output", "no_tensor", "identity", "identity_with_attribute",
               "many_inputs"]


@st.composite
def node_records(draw: st.DrawFn, tensor: bytes) -> bytes:
    """The bytes of a NodeProto: usually a Constant holding ``tensor`` in the usual form, often with a twist."""
    form = draw(st.sampled_from(["usual"] * 6 + READ_NODES + OTHER_NODES))
    return node_bytes(form, tensor, draw(st.integers(0, 10**6)), draw(st.booleans()))


def node_bytes(form: str, tensor: bytes, index: int = 0, shuffle: bool = False) -> bytes:
    """A NodeProto of ``form``: a Constant node holding ``tensor`` (as its value or in a subgraph), or another
    node."""
    output = b"c%d" % index
    op_type = b"Constant"
    fields: list[bytes] = []
    value = attribute(b"value", tensor)
    attributes = [value]
    if form == "type_unstated":
        attributes = [attribute(b"value", tensor, None)]
    elif form == "type_zero":
        attributes = [attribute(b"value", tensor, 0)]
    elif form == "type_wrong":
        attributes = [attribute(b"value", tensor, 1)]
    elif form == "second_attribute":
        attributes.append(field(1, 2, b"value_float") + field(2, 5, struct.pack("<f", 1.0)) + field(20, 0, 1))
    elif form == "attribute_doc":
        attributes = [attribute(b"value", tensor, extra=field(13, 2, b"doc"))]
    elif form == "reference":
        attributes = [attribute(b"value", None, extra=field(21, 2, b"outer"))]
    elif form == "renamed":
        attributes = [attribute(b"value_x", tensor)]
    elif form == "value_twice":
        attributes = [attribute(b"value", tensor, extra=field(5, 2, tensor))]
    elif form == "constant_floats":
        attributes = [field(1, 2, b"value_floats") + field(7, 5, struct.pack("<f", 2.5)) + field(20, 0, 6)]
    elif form == "no_tensor":
        attributes = [attribute(b"value", None)]
    elif form in ("identity", "identity_with_attribute", "if", "loop_graphs", "many_inputs"):
        op_type = {"if": b"If", "loop_graphs": b"Loop"}.get(form, b"Identity")
        attributes = []
        fields.append(field(1, 2, b"x"))
        if form == "identity_with_attribute":
            attributes = [field(1, 2, b"axis") + field(3, 0, 1) + field(20, 0, 2)]
        elif form == "if":
            attributes = [field(1, 2, b"then_branch") + field(6, 2, subgraph(tensor)) + field(20, 0, 5)]
        elif form == "loop_graphs":
            attributes = [field(1, 2, b"bodies") + field(11, 2, subgraph(tensor)) + field(20, 0, 10)]
        elif form == "many_inputs":
            fields.extend(field(1, 2, b"x%d" % k) for k in range(40))
    if form == "bad_utf8_output":
        output = b"c\xff"
    if form == "unicode_names":
        output = "cé".encode()
        fields.append(field(3, 2, "nœud".encode()))
    if form not in ("no_output", "output_wire_0"):
        fields.append(field(2, 2, output))
    if form == "output_wire_0":
        fields.append(field(2, 0, 5))
    if form == "two_outputs":
        fields.append(field(2, 2, b"second"))
    if form == "named":
        fields.append(field(3, 2, b"node%d" % index))
    fields.append(field(4, 2, op_type))
    if form == "op_type_twice":
        fields.append(field(4, 2, b"Identity"))
    fields.extend(field(5, 2, a) for a in attributes)
    if form == "domain_ai_onnx":
        fields.append(field(7, 2, b"ai.onnx"))
    elif form == "domain_empty":
        fields.append(field(7, 2, b""))
    elif form == "domain_other":
        fields.append(field(7, 2, b"com.example"))
    elif form == "unknown_field":
        fields.append(field(77, 2, b"?"))
    elif form == "doc_string":
        fields.append(field(6, 2, b"doc"))
    if shuffle:
        random.Random(index).shuffle(fields)
    return b"".join(fields)


def model_bytes(initializers: list[bytes], nodes: list[bytes], order: list[bool] | None = None,
                graph_extra: bytes = b"", model_extra: bytes = b"") -> bytes:
    """A ModelProto: ir_version, an opset and a graph of these records (interleaved as ``order`` says: True
    takes the next initializer)."""
    records = []
    inits, rest = iter(initializers), iter(nodes)
    for take_initializer in order or [True] * len(initializers) + [False] * len(nodes):
        records.append(field(5, 2, next(inits)) if take_initializer else field(1, 2, next(rest)))
    records.extend(field(5, 2, t) for t in inits)
    records.extend(field(1, 2, n) for n in rest)
    graph = field(2, 2, b"g") + b"".join(records) + graph_extra
    return field(1, 0, 10) + field(8, 2, field(2, 0, 21)) + field(7, 2, graph) + model_extra


# --- the comparison --------------------------------------------------------------------------------------------


def _outcome(function: Any) -> Any:
    try:
        return function()
    except DmlBridgeError as exc:
        return type(exc), str(exc)


def stored_bytes(tensor: TensorProto, storage: str, onnx_type: Any) -> bytes:
    """What a tensor stores: raw_data as it is; float_data / double_data as the bytes protobuf itself writes for
    that one field. Never through Python floats: float -> double -> float quiets a signalling NaN
    (0x7f8f5019 -> 0x7fcf5019), and struct.pack of a float is such a round trip."""
    if storage == "raw":
        return tensor.raw_data
    name, key = ("float_data", 4 << 3 | 2) if len(tensor.float_data) else ("double_data", 10 << 3 | 2)
    only = TensorProto()
    only.CopyFrom(tensor)  # a message copy: the values keep their bits
    for descriptor, _ in only.ListFields():
        if descriptor.name != name:
            only.ClearField(descriptor.name)
    encoded = only.SerializeToString()  # one packed field: its key, a varint length, the little-endian values
    assert encoded[0] == key
    length, shift, at = 0, 0, 1
    while True:
        length |= (encoded[at] & 0x7F) << shift
        shift, at = shift + 7, at + 1
        if encoded[at - 1] < 0x80:
            break
    assert len(encoded) == at + length
    return encoded[at:]


def same_as_parsed(data: bytes) -> Any:
    """Check the byte scan of ``data`` against find_constants of its parsed model; returns the scan (None: gave up),
    or "unparsable"."""
    try:
        model = onnx.ModelProto.FromString(data)
    except Exception:  # noqa: BLE001 - protobuf refused the bytes: nothing to compare
        return "unparsable"
    before = model.SerializeToString()
    expected = _outcome(lambda: [tuple(found) for found in find_constants(model)])
    scan = _outcome(lambda: byte_scan.scan_bytes(model, data))
    assert model.SerializeToString() == before  # nothing the caller passed in is modified
    if scan is None:
        return None
    if isinstance(scan, tuple):
        assert scan == expected
        return scan
    got = [tuple(scan.with_tensor(i)) for i in range(len(scan.found))]
    assert got == expected
    for i in np.flatnonzero(scan.starts >= 0).tolist():
        constant = scan.with_tensor(i)
        assert constant.kind in ("initializer", "value") and constant.storage in ("raw", "typed")
        assert scan.found[i].proto is None and scan.lengths[i] == constant.packed_nbytes
        span = data[scan.starts[i] : scan.starts[i] + scan.lengths[i]]
        assert span == stored_bytes(constant.proto, constant.storage, constant.onnx_type)
    assert np.array_equal(scan.starts < 0, scan.lengths < 0) and np.array_equal(scan.starts < 0, scan.indices < 0)
    return scan


def read_from_bytes(scan: Any) -> int:
    return 0 if scan is None or isinstance(scan, (str, tuple)) else int((scan.starts >= 0).sum())


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_byte_scan_finds_what_the_parsed_model_finds(data: st.DataObject) -> None:
    initializers = data.draw(st.lists(tensor_records(), max_size=6))
    nodes = [data.draw(node_records(data.draw(tensor_records()))) for _ in range(data.draw(st.integers(0, 6)))]
    order = data.draw(st.permutations([True] * len(initializers) + [False] * len(nodes)))
    same_as_parsed(model_bytes(initializers, nodes, order))


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 999), edits=st.lists(EDIT, min_size=1, max_size=2))  # more of them still parse
def test_mutated_bytes_find_what_the_parsed_model_finds(seed: int, edits: list[tuple[str, int, bytes]]) -> None:
    """A valid model's bytes with a few edits (builders.mutate_bytes): where protobuf still parses them, the byte
    scan agrees or gives up."""
    model, _ = small_model(12, seed=seed)
    same_as_parsed(mutate_bytes(model.SerializeToString(), edits))


# --- what must be read from the bytes, and what must be handed over ---------------------------------------------


def usual_tensor(code: int = 1, dims: tuple[int, ...] = (4,), name: bytes = b"w", form: str = "raw") -> bytes:
    size = math.prod(dims)
    out = b"".join(field(1, 0, d) for d in dims) + field(2, 0, code) + field(8, 2, name)
    if form == "raw":
        return out + field(9, 2, bytes(k % 251 for k in range(-(-size * BITS[code] // 8))))
    fmt = "f" if form == "float" else "d"
    return out + field(4 if fmt == "f" else 10, 2, struct.pack(f"<{size}{fmt}", *range(size)))


def usual_constant(output: bytes, tensor: bytes, node_name: bytes = b"") -> bytes:
    named = field(3, 2, node_name) if node_name else b""
    return field(2, 2, output) + named + field(4, 2, b"Constant") + field(5, 2, attribute(b"value", tensor))


def test_the_common_forms_are_read_from_the_bytes() -> None:
    """If a change sent the usual constants to the parsed model, the conversion would be correct but several
    times slower; this says so."""
    inits = [usual_tensor(1, (4,), b"a"), usual_tensor(11, (2, 3), b"b", "double"), usual_tensor(1, (), b"", "float"),
             usual_tensor(10, (1, 1, 1, 130), "wé".encode()), usual_tensor(22, (5,), b"q"),
             usual_tensor(1, (0,), b"empty"), usual_tensor(7, (3,), b"i64")]
    nodes = [usual_constant(b"c0", usual_tensor(1, (2,), b"t0")),
             usual_constant(b"c1", usual_tensor(1, (2,), b"t1", "float"), b"named"),
             usual_constant(b"", usual_tensor(9, (3,), b"")),
             field(1, 2, b"c0") + field(2, 2, b"y") + field(4, 2, b"Relu")]
    scan = same_as_parsed(model_bytes(inits, nodes))
    assert read_from_bytes(scan) == len(inits) + 3 == len(scan.found)


@pytest.mark.parametrize("twist", TENSOR_TWISTS)
def test_each_tensor_twist_is_handed_over_or_read_alike(twist: str) -> None:
    """Each twist on its own, on a FLOAT[4] tensor, as an initializer and as a Constant node's value."""
    record = tensor_bytes(1, [4], [twist], 0)
    scan = same_as_parsed(model_bytes([record], [node_bytes("usual", record)]))
    assert read_from_bytes(scan) == (2 if twist in STILL_COMMON else 0)


@pytest.mark.parametrize("form", READ_NODES + OTHER_NODES)
@pytest.mark.parametrize("shuffle", [False, True])
def test_each_node_form_is_read_or_handed_over(form: str, shuffle: bool) -> None:
    """Each node form on its own: the usual Constant's are read here, every other is the parsed model's."""
    scan = same_as_parsed(model_bytes([], [node_bytes(form, usual_tensor(), 7, shuffle)]))
    assert read_from_bytes(scan) == (1 if form in READ_NODES else 0)


def test_a_second_graph_field_is_merged_by_protobuf_so_the_scan_gives_up() -> None:
    first = model_bytes([usual_tensor(name=b"a")], [])
    second = field(7, 2, field(5, 2, usual_tensor(name=b"b")))
    assert same_as_parsed(first + second) is None
    assert [c.key for c in find_constants(onnx.ModelProto.FromString(first + second))] == ["a", "b"]


def test_functions_sparse_initializers_and_subgraphs_come_from_the_parsed_model() -> None:
    values = numpy_helper.from_array(np.array([1.5, 2.5], np.float32), "sv")
    indices = numpy_helper.from_array(np.array([0, 3], np.int64), "si")
    sparse = helper.make_sparse_tensor(values, indices, [5])
    function = helper.make_function("local", "f", ["x"], ["y"], [
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.ones(2, np.float32))),
        helper.make_node("Add", ["x", "k"], ["y"]),
    ], [helper.make_opsetid("", 21)])
    body = helper.make_graph([helper.make_node("Constant", [], ["inner"], value=helper.make_tensor(
        "t", TensorProto.FLOAT, [2], [1.0, 2.0]))], "then", [], [], [numpy_helper.from_array(np.ones(3), "w")])
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.arange(3, dtype=np.int8))),
             helper.make_node("If", ["cond"], ["o"], then_branch=body, else_branch=body)]
    graph = helper.make_graph(nodes, "g", [], [], [numpy_helper.from_array(np.ones(2, np.float16), "h")],
                              sparse_initializer=[sparse])
    model = helper.make_model(graph, functions=[function], opset_imports=[helper.make_opsetid("", 21)])
    scan = same_as_parsed(model.SerializeToString())
    # The main graph's initializer, its sparse initializer, its Constant node, the If's two branches (attributes
    # in name order, as helper.make_node sorts them), then the function.
    assert [c.key for c in scan.found] == [
        "h", "sv", "c", "If_1/else_branch/w", "If_1/else_branch/inner", "If_1/then_branch/w",
        "If_1/then_branch/inner", "functions/local/f/k",
    ]
    assert read_from_bytes(scan) == 2  # h and c


def test_chunks_join_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Records are parsed in chunks; with chunks of 7, constants read here and handed over interleave across the
    chunk boundaries."""
    monkeypatch.setattr(byte_scan, "_CHUNK", 7)
    rng = random.Random(5)
    inits = [usual_tensor(name=b"i%d" % k) if rng.random() < 0.7 else usual_tensor(name=b"i%d" % k) + field(12, 2, b"d")
             for k in range(40)]
    nodes = [usual_constant(b"c%d" % k, inits[k]) if k % 5 else field(2, 2, b"y%d" % k) + field(4, 2, b"Relu")
             for k in range(40)]
    scan = same_as_parsed(model_bytes(inits, nodes))
    assert 20 < read_from_bytes(scan) < 80


def test_a_model_of_millions_of_records_is_left_to_the_parsed_model(monkeypatch: pytest.MonkeyPatch) -> None:
    data = model_bytes([usual_tensor(name=b"i%d" % k) for k in range(5)], [])
    assert read_from_bytes(same_as_parsed(data)) == 5
    monkeypatch.setattr(byte_scan, "_MAX_RECORDS", 4)
    assert same_as_parsed(data) is None


def test_duplicate_keys_get_the_same_suffixes() -> None:
    nodes = [usual_constant(b"w", usual_tensor()), usual_constant(b"w#2", usual_tensor())]
    scan = same_as_parsed(model_bytes([usual_tensor(name=b"w"), usual_tensor(name=b"w")], nodes))
    assert [c.key for c in scan.found] == ["w", "w#3", "w#4", "w#2"]


# --- whole conversions: the same files with the byte scan and without ------------------------------------------


def layout(plan: Any) -> Any:
    return dict(plan.entries), plan.total_size, plan.alignment, plan.min_dims


@pytest.mark.parametrize("target_name", list(TARGETS))
def test_conversion_writes_the_same_files_with_and_without_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target_name: str
) -> None:
    """models.py's model of every type in every place (external data, sparse, subgraphs, functions) on every
    target (native, emulated, narrowed and skipped types): the same .bin and manifest either way, and both
    checked against models.py's independent recomputation."""
    target, min_dims, alignment = TARGETS[target_name]
    path, expected = build_model(tmp_path)
    options: dict[str, Any] = {"target": target, "min_dims": min_dims, "alignment": alignment}
    scan = byte_scan.scan_bytes(read_model(path).proto, path.read_bytes())
    assert read_from_bytes(scan) > 15  # half the initializers are in raw_data; the others' typed fields
    same_files(tmp_path, path, options, monkeypatch)
    check_independently(tmp_path / "a", expected, target, min_dims, alignment)


@pytest.mark.parametrize(("count", "alignment"), [(300, 256), (2000, 16), (9, 1 << 18)])
def test_many_constants_convert_alike_with_and_without_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int, alignment: int
) -> None:
    """Many small constants of many types (some read here, some not: 4-bit, empty, bool), over several
    gather-buffer windows at 16-byte alignment, and with gaps larger than the gather buffer at 256 KiB (the
    writer's gather buffer: 1 MiB, here 16 KiB, still 500 times the largest of these constants)."""
    monkeypatch.setattr(ImageWriter, "GATHER", 16 << 10)
    model, expected = small_model(count, seed=count)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    same_files(tmp_path, path, {"min_dims": 4, "alignment": alignment}, monkeypatch)
    check_independently(tmp_path / "a", expected, Target(), 4, alignment)


def same_files(tmp_path: Path, path: Path, options: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Convert ``path`` to a.bin/a.json with the fast paths and to b.bin/b.json with DMLBRIDGE_CHECKED_PATH_ONLY
    (no byte scan, every constant through prepare): the same files."""
    scanned = convert_model(path, tmp_path / "a", progress=False, checksum=True, **options)
    with monkeypatch.context() as patched:
        patched.setenv("DMLBRIDGE_CHECKED_PATH_ONLY", "1")
        parsed = convert_model(path, tmp_path / "b", progress=False, checksum=True, **options)
        assert layout(plan_model(path, **options)) == layout(parsed)
    assert outputs(tmp_path / "a") == outputs(tmp_path / "b")
    assert layout(plan_model(path, **options)) == layout(scanned) == layout(parsed)


@pytest.mark.parametrize("min_dims", [None, 4, 5])
def test_per_channel_constants_are_padded_alike_with_and_without_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, min_dims: int | None
) -> None:
    """The channel axis and the node's dimension count of each Conv, ConvTranspose and normalization constant
    (initializers and Constant nodes the scan reads) are the same whichever path found the constants."""
    model, _, sizes = per_channel_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    scan = byte_scan.scan_bytes(model, path.read_bytes())
    assert scan is not None and read_from_bytes(scan) == len(model.graph.initializer) + 2  # (+ w3, b3: nodes)
    same_files(tmp_path, path, {"min_dims": min_dims}, monkeypatch)
    plan = load_plan(tmp_path / "a.json")
    floor = min_dims or 1
    assert {key: plan.entries[key].sizes for key in sizes} == {  # (the node's count, or min_dims when more)
        key: (1, want[1]) + (1,) * (max(floor, len(want)) - 2) for key, want in sizes.items()}


def test_read_model_keeps_the_bytes_of_binary_models_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = small_model(20, seed=4)
    binary, text = tmp_path / "m.onnx", tmp_path / "m.textproto"
    onnx.save(model, binary)
    onnx.save(model, text, format="textproto")
    assert read_model(binary).serialized == binary.read_bytes()
    assert read_model(text).serialized is None
    assert read_model(model).serialized == model.SerializeToString()
    assert "serialized" not in repr(read_model(binary))
    assert layout(plan_model(text)) == layout(plan_model(binary))
    monkeypatch.setattr(model_file, "BYTE_SCAN_MAX_BYTES", 100)
    assert read_model(binary).serialized is None and read_model(model).serialized is None
    assert layout(plan_model(binary)) == layout(plan_model(text))


def test_a_signalling_nan_in_float_data_is_read_as_stored() -> None:
    """The span the scan reads holds the NaN's own bits, as the reference does (once a flaky reference: it
    re-packed the floats through Python, which quiets 0x7F8F5019 to 0x7FCF5019)."""
    floats = field(4, 2, struct.pack("<2I", 0x7F8F5019, 0x3F800000))
    doubles = field(10, 2, struct.pack("<Q", 0x7FF4000000000001))
    inits = [field(1, 0, 2) + field(2, 0, 1) + field(8, 2, b"f") + floats,
             field(1, 0, 1) + field(2, 0, 11) + field(8, 2, b"d") + doubles]
    scan = same_as_parsed(model_bytes(inits, []))
    assert read_from_bytes(scan) == 2


def test_the_field_numbers_are_onnx_protos() -> None:
    """The byte scan's named field numbers are the ones onnx's own descriptors give."""
    messages = {byte_scan.ModelField: onnx.ModelProto, byte_scan.GraphField: onnx.GraphProto,
                byte_scan.NodeField: onnx.NodeProto, byte_scan.AttributeField: onnx.AttributeProto,
                byte_scan.TensorField: TensorProto}
    for fields, message in messages.items():
        for field_name in fields:
            assert message.DESCRIPTOR.fields_by_name[field_name.name.lower()].number == field_name, field_name
    assert onnx.AttributeProto.TENSOR == byte_scan.ATTRIBUTE_TYPE_TENSOR


def test_dims_no_array_can_hold_are_refused_with_and_without_the_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """[0, 2^62] FLOAT has no elements, but numpy cannot make its array: the checked path refuses it, so the byte
    scan must leave it to the checked path rather than accept it."""
    data = model_bytes([usual_tensor(1, (0, 2**62), b"huge")], [])
    scan = same_as_parsed(data)
    assert scan is None or isinstance(scan, tuple) or read_from_bytes(scan) == 0
    messages = []
    for checked_only in ("", "1"):
        monkeypatch.setenv("DMLBRIDGE_CHECKED_PATH_ONLY", checked_only)
        with pytest.raises(TensorProtoError, match="more elements than any array can hold") as caught:
            plan_model(data)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
