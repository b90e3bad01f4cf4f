"""Counting a model's constants and nodes from its bytes, before it is parsed: the counts equal what find_constants
finds and what the parsed model holds, the names' lower bound holds, and a model over max_constants, max_nodes or
max_manifest_bytes is refused before protobuf parses it, in every form a model is given, naming how many constants
or nodes, how deep and (constants) under which node."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from budget import examples
from builders import model_of, sparse
from command_line import one_line_error, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import (
    AttributeProto,
    FunctionProto,
    GraphProto,
    ModelProto,
    NodeProto,
    TrainingInfoProto,
    helper,
    numpy_helper,
)
from onnx.serialization import registry

import dmlbridge
from dmlbridge.model import census, onnx_file
from dmlbridge.model.census import AttributeField, GraphField, ModelField, NodeField, count_constants
from dmlbridge.model.constants import find_constants
from dmlbridge.model.model_limits import MIN_ENTRY_LINE, text_bound
from dmlbridge.onnx import wire

STATS: Counter[str] = Counter()


def test_the_field_numbers_are_onnx_s() -> None:
    fields = {census.ModelField: ModelProto, census.GraphField: GraphProto, census.NodeField: NodeProto,
              census.AttributeField: AttributeProto}
    for names, message in fields.items():
        for field in names:
            assert message.DESCRIPTOR.fields_by_name[field.name.lower()].number == field, (message, field)
    assert FunctionProto.DESCRIPTOR.fields_by_name["node"].number == census.FUNCTION_NODE
    assert FunctionProto.DESCRIPTOR.fields_by_name["attribute_proto"].number == census.FUNCTION_ATTRIBUTE_PROTO
    for field in census.TrainingInfoField:
        assert TrainingInfoProto.DESCRIPTOR.fields_by_name[field.name.lower()].number == field


# --- the counts ---------------------------------------------------------------------------------------------------


def _tensor(name: str) -> Any:
    return numpy_helper.from_array(np.ones(1, np.float32), name)


@st.composite
def _graphs(draw: Any, depth: int, prefix: str) -> tuple[Any, list[int]]:
    """A graph of initializers, sparse initializers, Constant nodes (some of other domains, some in an odd form)
    and nodes holding subgraphs (g and graphs attributes, named and unnamed nodes); and how many constants each of
    its top-level nodes' subgraphs hold."""
    inits = [_tensor(f"{prefix}i{k}") for k in range(draw(st.integers(0, 3)))]
    sparse_inits = [sparse(f"{prefix}s{k}", np.array([1.0], np.float32), np.array([0], np.int64), [3])
                    for k in range(draw(st.integers(0, 1)))]
    nodes: list[Any] = []
    under: list[int] = []
    for k in range(draw(st.integers(0, 4))):
        form = draw(st.sampled_from(["constant", "constant_other_domain", "constant_ints", "many_inputs",
                                     "negative_int", "if", "graphs"] if depth < 3 else ["constant", "negative_int"]))
        name = draw(st.sampled_from(["", f"{prefix}n{k}", "ünï"]))
        if form == "constant":
            nodes.append(helper.make_node("Constant", [], [f"{prefix}c{k}"], name=name, value=_tensor("v")))
            under.append(0)
        elif form == "constant_other_domain":  # not a constant: a custom operator named Constant
            nodes.append(helper.make_node("Constant", [], [f"{prefix}c{k}"], name=name, domain="com.example",
                                          value=_tensor("v")))
            under.append(0)
        elif form == "constant_ints":
            nodes.append(helper.make_node("Constant", [], [f"{prefix}c{k}"], name=name, value_ints=[-1, 2]))
            under.append(0)
        elif form == "many_inputs":  # more fields than the numpy walk reads a record at a time
            nodes.append(helper.make_node("Concat", [f"x{j}" for j in range(30)], ["y"], name=name, axis=-1))
            under.append(0)
        elif form == "negative_int":  # a 10-byte varint
            nodes.append(helper.make_node("Softmax", ["x"], ["y"], name=name, axis=-1))
            under.append(0)
        else:
            inner = [draw(_graphs(depth + 1, f"{prefix}{k}_{j}_")) for j in range(2)]
            if form == "if":
                node = helper.make_node("If", ["c"], ["y"], name=name, then_branch=inner[0][0],
                                        else_branch=inner[1][0], axis=-7)
            else:
                node = helper.make_node("Scan", ["c"], ["y"], name=name, bodies=[inner[0][0], inner[1][0]])
            nodes.append(node)
            under.append(sum(_constants_in(graph) for graph, _ in inner))
    graph = helper.make_graph(nodes, f"{prefix}g", [], [], inits, sparse_initializer=sparse_inits)
    return graph, under


def _constants_in(graph: Any) -> int:
    model = helper.make_model(graph)
    return len(find_constants(model))


def _depth(constant: Any, scopes: dict[str, int]) -> int:
    return scopes.get(constant.scope, 0)


def _nodes(nodes: Any, depth: int = 0) -> list[int]:
    """The depth of every node, and of every node in their subgraphs."""
    found = []
    for node in nodes:
        found.append(depth)
        for attr in node.attribute:
            for graph in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                found += _nodes(graph.node, depth + 1)
    return found


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=_graphs(0, ""), functions=st.integers(0, 2), apart=st.lists(_graphs(1, "t"), max_size=3))
def test_the_count_is_what_find_constants_finds(
    drawn: tuple[Any, list[int]], functions: int, apart: list[tuple[Any, list[int]]]
) -> None:
    """The counts equal what find_constants finds and what the parsed model holds; the graphs a conversion does
    not read (``training_info``'s and a function's attribute defaults') count among the nodes and, apart, among the
    constants."""
    graph, under = drawn
    function_list = [helper.make_function("local", f"f{k}", ["x"], ["y"], [
        helper.make_node("Constant", [], ["k"], value=_tensor("k")), helper.make_node("Identity", ["x"], ["y"])],
        [helper.make_opsetid("", 17)]) for k in range(functions)]
    model = helper.make_model(graph, functions=function_list)
    apart_graphs = [g for g, _ in apart]
    for k, extra in enumerate(apart_graphs):
        if k % 2 == 0 or not function_list:
            info = model.training_info.add()
            (info.initialization if k % 4 == 0 else info.algorithm).CopyFrom(extra)
        else:
            model.functions[-1].attribute_proto.append(helper.make_attribute("body", extra))
    data = model.SerializeToString()
    count = count_constants(data)
    found = find_constants(onnx.load_model_from_string(data))
    assert count is not None
    assert count.total == len(found)
    assert count.apart == sum(_constants_in(g) for g in apart_graphs)
    subgraph = [c for c in found if c.scope and not c.scope.startswith("functions/")]
    assert count.in_subgraphs == len(subgraph) == sum(under)
    assert count.name_chars <= sum(len(c.key) + len(c.origin) for c in found)
    parsed = onnx.load_model_from_string(data)
    depths = _nodes(parsed.graph.node) + [d for function in parsed.functions for d in _nodes(function.node)]
    depths += [d for info in parsed.training_info for g in (info.initialization, info.algorithm)
               for d in _nodes(g.node)]
    depths += [d for function in parsed.functions for attribute in function.attribute_proto
               for d in _nodes(attribute.g.node, 1)]
    assert count.nodes == len(depths)
    assert count.nodes_in_subgraphs == sum(d > 0 for d in depths)
    assert count.node_depth == max(depths, default=0)
    if subgraph:
        most = max(under)
        top = next(i for i, n in enumerate(under) if n == most)
        node = graph.node[top]
        assert count.busiest == (node.name or f"{node.op_type}_{top}") and count.under_busiest == most
        assert 1 <= count.depth <= 3
    else:
        assert count.depth == 0 and count.busiest is None


def test_graphs_that_are_not_converted_are_counted_and_held_to_the_limits(tmp_path: Path, never_parsed: None) -> None:
    """``training_info``'s graphs and a function's attribute default graphs: protobuf parses them, so their nodes
    pass max_nodes and their constants max_constants as the main graph's do (they took 690 MiB for 5 million
    nodes past the default limit), before the parse, for a path and bytes."""
    nodes = [helper.make_node("Identity", [f"x{i}"], [f"y{i}"]) for i in range(30)]
    body = helper.make_graph(nodes, "body", [], [], [_tensor(f"w{i}") for i in range(20)])
    trained = helper.make_model(helper.make_graph([], "g", [], []))
    trained.training_info.add().algorithm.CopyFrom(body)
    function = helper.make_function("local", "f", ["x"], ["y"], [helper.make_node("Identity", ["x"], ["y"])],
                                    [helper.make_opsetid("", 17)])
    function.attribute_proto.append(helper.make_attribute("body", body))
    defaults = helper.make_model(helper.make_graph([], "g", [], []), functions=[function])
    for model, where in ((trained, r"30 nodes \(all in the main graph and functions; at least 30 in training_info"),
                         (defaults, r"31 nodes \(30 in subgraphs nested up to 1 deep; at least 30 in training_info")):
        path = tmp_path / "m.onnx"
        path.write_bytes(model.SerializeToString())
        for form in (path, path.read_bytes(), model):
            with pytest.raises(dmlbridge.InvalidArgumentError,
                               match=rf"holds at least {where} graphs and function attribute graphs, which are "
                                     r"not converted but parsed\), more than max_nodes=29"):
                dmlbridge.plan_model(form, max_nodes=29)
            with pytest.raises(dmlbridge.InvalidArgumentError,
                               match=r"holds 20 constants \(20 in training_info graphs and function attribute "
                                     r"graphs, which are not converted but parsed\), more than max_constants=19"):
                dmlbridge.convert_model(form, tmp_path / "out", progress=False, max_constants=19)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_the_depth_is_the_deepest_level_holding_a_constant() -> None:
    inner = helper.make_graph([], "inner", [], [], [_tensor("t")])
    for level in range(5):
        inner = helper.make_graph([helper.make_node("If", ["c"], ["y"], name=f"n{level}", then_branch=inner,
                                                    else_branch=helper.make_graph([], "e", [], []))], "g", [], [])
    count = count_constants(helper.make_model(inner).SerializeToString())
    assert count is not None and (count.total, count.depth, count.busiest) == (1, 5, "n4")
    (found,) = find_constants(helper.make_model(inner))
    assert found.key.count("then_branch") == 5


def test_bytes_that_are_not_a_message_are_not_counted() -> None:
    data = model_of({"w": np.ones(2, np.float32)}).SerializeToString()
    assert count_constants(data[:-3]) is None
    assert count_constants(b"\x3a\x05ab") is None  # a graph field longer than the bytes


def test_a_group_in_an_unknown_field_is_walked_over() -> None:
    """Protobuf keeps a group it does not know (wire types 3 and 4) and parses the rest: so does the count."""
    data = model_of({"w": np.ones(2, np.float32)}).SerializeToString()
    group = bytes([15 << 3 | 3, 1 << 3 | 0, 5, 15 << 3 | 4])  # field 15 (unknown): a group holding a varint
    odd = group + data
    assert len(onnx.load_model_from_string(odd).graph.initializer) == 1
    count = count_constants(odd)
    assert count is not None and count.total == 1


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            return bytes(out + bytes([low]))
        out.append(low | 0x80)


def _parses(data: bytes) -> bool:
    try:
        onnx.load_model_from_string(data)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError
        return False
    return True


def test_groups_are_skipped_to_protobufs_depth_without_recursing() -> None:
    """Groups nested 100 deep in an unknown field are skipped, as protobuf skips them; 101 and 10,000 deep are
    malformed to both (the count read them recursively before: 1,000 deep was a RecursionError)."""
    data = model_of({"w": np.ones(2, np.float32)}).SerializeToString()
    for depth, parsed in ((100, True), (101, False), (10_000, False)):
        odd = _varint(15 << 3 | 3) * depth + _varint(15 << 3 | 4) * depth + data
        assert _parses(odd) is parsed, depth
        count = count_constants(odd)
        assert (count is not None and count.total == 1) if parsed else count is None, depth
    crossed = _varint(15 << 3 | 3) + _varint(16 << 3 | 4) + data  # a group ended by another field's end tag
    assert not _parses(crossed) and count_constants(crossed) is None


def test_tags_and_varints_are_read_as_protobuf_reads_them() -> None:
    """One varint reader for the count and the wire format: up to 10 bytes, the bits past the 64th dropped, as
    protobuf's parser does (a 10th byte of 0x7e in a value is accepted by both); a tag of over 5 bytes or of 2^32
    and more is malformed to both (the 10-byte tag ending in 0x7e was an OverflowError)."""
    assert wire.varint(_varint((1 << 64) - 1), 0, 10) == ((1 << 64) - 1, 10)  # -1 as an int64: 10 bytes
    assert wire.varint(b"\xff" * 9 + b"\x7e", 0, 10) == ((1 << 63) - 1, 10)  # (0x7e: bit 63 clear)
    assert wire.varint(b"\xff" * 10 + b"\x00", 0, 11) == (-1, 12)  # 11 bytes
    assert wire.read_tag(_varint(((1 << 29) - 1) << 3), 0, 5) == (((1 << 29) - 1) << 3, 5)
    assert wire.read_tag(b"\x88\x80\x80\x80\x00", 0, 5) == (8, 5)  # an overlong 5-byte tag
    data = model_of({"w": np.ones(2, np.float32)}).SerializeToString()
    for tag in (b"\x80" * 9 + b"\x7e", b"\x80" * 9 + b"\x01", b"\x88" + b"\x80" * 4 + b"\x00", _varint(1 << 32)):
        odd = tag + b"\x05" + data
        assert not _parses(odd) and count_constants(odd) is None, tag
        with pytest.raises(dmlbridge.InvalidArgumentError, match="not a valid ONNX model"):
            dmlbridge.plan_model(odd)
    for last in (b"\x01", b"\x7e"):  # an unknown varint field of 10 bytes: a negative int64, or more bits
        odd = bytes([15 << 3]) + b"\xff" * 9 + last + data
        count = count_constants(odd)
        assert _parses(odd) and count is not None and count.total == 1
    # A negative attribute, in the main graph the byte scan reads field by field: read, not given up on.
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    graph = helper.make_graph([node], "g", [], [], [_tensor("w")])
    serialized = graph.SerializeToString()
    assert wire.field_positions(serialized, 0, len(serialized)) is not None


# --- the limits, before the parse -----------------------------------------------------------------------------


@pytest.fixture
def never_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Protobuf's parser fails the test if it is called: a refused model is refused before it."""

    def parse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model was parsed")

    monkeypatch.setattr(onnx_file.onnx, "load_model_from_string", parse)


def _inside_ifs(graph: Any, depth: int) -> Any:
    """``graph`` as the then_branch of the innermost of ``depth`` nested If nodes (``graph`` itself at 0)."""
    for level in range(depth):
        graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=graph,
                                                    else_branch=helper.make_graph([], "e", [], []))], f"g{level}",
                                  [], [])
    return graph


def _nested(count: int, depth: int) -> Any:
    graph = helper.make_graph([], "inner", [], [], [_tensor(f"w{i}") for i in range(count)])
    return helper.make_model(_inside_ifs(graph, depth))


def test_a_model_of_more_constants_than_max_constants_is_refused_before_it_is_parsed(
    tmp_path: Path, never_parsed: None
) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(_nested(40, 3).SerializeToString())
    calls = [lambda model, limit: dmlbridge.convert_model(model, tmp_path / "out", progress=False,
                                                          max_constants=limit),
             lambda model, limit: dmlbridge.check_conversion(model, max_constants=limit),
             lambda model, limit: dmlbridge.plan_model(model, max_constants=limit)]
    for call in calls:
        for model in (path, path.read_bytes()):
            with pytest.raises(dmlbridge.InvalidArgumentError,
                               match=r"holds 40 constants \(40 in subgraphs nested up to 3 deep, 40 of them under "
                                     r"node 'If_0'\), more than max_constants=39 \(--max-constants"):
                call(model, 39)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def _identities(count: int, depth: int) -> Any:
    """``count`` Identity nodes (the first reading the constant ``w``) in the innermost of ``depth`` nested Ifs."""
    nodes = [helper.make_node("Identity", ["w" if i == 0 else f"x{i}"], [f"y{i}"]) for i in range(count)]
    graph = helper.make_graph(nodes, "inner", [], [], [_tensor("w")])
    return helper.make_model(_inside_ifs(graph, depth))


def test_a_model_of_more_nodes_than_max_nodes_is_refused_before_it_is_parsed(
    tmp_path: Path, never_parsed: None
) -> None:
    """40 Identity nodes under 3 Ifs: 43 nodes, refused at 42 by every entry point, for a path and for bytes,
    naming the count, the depth and the keyword."""
    path = tmp_path / "m.onnx"
    path.write_bytes(_identities(40, 3).SerializeToString())
    calls = [lambda model, limit: dmlbridge.convert_model(model, tmp_path / "out", progress=False, max_nodes=limit),
             lambda model, limit: dmlbridge.check_conversion(model, max_nodes=limit),
             lambda model, limit: dmlbridge.plan_model(model, max_nodes=limit)]
    for call in calls:
        for model in (path, path.read_bytes()):
            with pytest.raises(dmlbridge.InvalidArgumentError,
                               match=r"holds at least 43 nodes \(42 in subgraphs nested up to 3 deep\), more than "
                                     r"max_nodes=42 \(--max-nodes on the command line\).*raise the limit"):
                call(model, 42)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_max_nodes_counts_the_main_graph_and_is_checked(tmp_path: Path) -> None:
    model = _identities(5, 0)
    with pytest.raises(dmlbridge.InvalidArgumentError,
                       match=r"holds at least 5 nodes \(all in the main graph and functions"):
        dmlbridge.plan_model(model, max_nodes=4)
    assert len(dmlbridge.plan_model(model, max_nodes=5).entries) == 1
    assert dmlbridge.plan_model(model, max_nodes=None).entries["w"].consumers[0].op_type == "Identity"
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    with pytest.raises(dmlbridge.InvalidArgumentError, match="holds at least 5 nodes"):
        plan.verify(model, max_nodes=4)
    plan.verify(model, max_nodes=5)
    plan.close()
    for wrong in (-1, 1.5, True, "9"):
        with pytest.raises(dmlbridge.InvalidArgumentError, match="max_nodes must be a non-negative integer"):
            dmlbridge.plan_model(model, max_nodes=wrong)  # type: ignore[arg-type]


def test_a_model_proto_is_counted_too(tmp_path: Path) -> None:
    with pytest.raises(dmlbridge.InvalidArgumentError, match="holds 40 constants"):
        dmlbridge.plan_model(_nested(40, 1), max_constants=39)
    assert len(dmlbridge.plan_model(_nested(40, 1), max_constants=40).entries) == 40
    assert len(dmlbridge.plan_model(_nested(40, 1), max_constants=None).entries) == 40


def test_a_manifest_whose_keys_would_pass_max_manifest_bytes_is_refused_before_the_model_is_parsed(
    tmp_path: Path, never_parsed: None
) -> None:
    """Twenty levels of If make every key and origin some 340 characters: their manifest's least size passes the
    limit before a constant is made."""
    path = tmp_path / "m.onnx"
    path.write_bytes(_nested(100, 20).SerializeToString())
    least = 100 * MIN_ENTRY_LINE + 100 * 2 * 20 * len("If_0/then_branch/")
    with pytest.raises(dmlbridge.InvalidArgumentError,
                       match=r"manifest of these 100 constants would take more than max_manifest_bytes=50000 bytes "
                             r".*--max-manifest-bytes.*nested up to 20 deep, 100 of them under node 'If_0'"):
        dmlbridge.convert_model(path, tmp_path / "out", progress=False, max_manifest_bytes=50_000)
    assert least > 50_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_the_least_manifest_is_no_more_than_the_manifest(tmp_path: Path) -> None:
    """The lower bound the refusal uses never passes the size of the manifest's lines (nested keys, skipped
    entries, long names)."""
    from dmlbridge.manifest.format import entries_size

    strings = numpy_helper.from_array(np.array(["s"], dtype=object), "")
    for model in (_nested(30, 4), model_of([strings, _tensor("n" * 300)]), _nested(1, 0)):
        data = model.SerializeToString()
        count = count_constants(data)
        assert count is not None
        size = entries_size(dmlbridge.plan_model(data).entries)
        assert count.total * MIN_ENTRY_LINE + count.name_chars <= size


def test_the_command_line_names_its_flag(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(_nested(3, 1).SerializeToString())
    for command in (["convert", path, "-o", tmp_path / "w"], ["inspect", path]):
        refused = run(*command, "--max-constants", "2")
        assert refused.returncode == 2
        assert "holds 3 constants" in refused.stderr and "more than --max-constants 2" in refused.stderr
        assert "max_constants" not in refused.stderr
    assert run("convert", path, "-o", tmp_path / "w", "--max-constants", "3", "--quiet").returncode == 0
    verified = run("verify", tmp_path / "w.json", path, "--max-constants", "2")
    assert verified.returncode == 2 and "--max-constants 2" in verified.stderr
    assert run("verify", tmp_path / "w.json", path).returncode == 0
    refused = run("convert", path, "-o", tmp_path / "x", "--max-constants", "-1")
    assert refused.returncode == 2 and "--max-constants must be a non-negative integer" in refused.stderr


def test_the_command_line_names_max_nodes_flag(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(_identities(3, 1).SerializeToString())  # 4 nodes
    for command in (["convert", path, "-o", tmp_path / "w"], ["inspect", path], ["inspect", path, "--check"]):
        refused = run(*command, "--max-nodes", "3")
        assert refused.returncode == 2
        assert "holds at least 4 nodes" in refused.stderr, refused.stderr
        assert "more than --max-nodes 3" in refused.stderr
        assert "max_nodes" not in refused.stderr
    assert run("convert", path, "-o", tmp_path / "w", "--max-nodes", "4", "--quiet").returncode == 0
    verified = run("verify", tmp_path / "w.json", path, "--max-nodes", "3")
    assert verified.returncode == 2 and "--max-nodes 3" in verified.stderr
    assert run("verify", tmp_path / "w.json", path).returncode == 0
    for command in (["convert", path, "-o", tmp_path / "x"], ["inspect", path], ["verify", tmp_path / "w.json", path]):
        refused = run(*command, "--max-nodes", "-1")
        assert refused.returncode == 2 and "--max-nodes must be a non-negative integer" in refused.stderr


def test_the_command_line_refuses_models_the_count_read_wrongly_in_one_line(tmp_path: Path) -> None:
    """Groups nested 1,000 deep and a 10-byte tag: one line and exit 2 from inspect, convert and verify (they were
    a traceback and exit 1)."""
    good = tmp_path / "good.onnx"
    good.write_bytes(model_of({"w": np.ones(2, np.float32)}).SerializeToString())
    assert run("convert", good, "-o", tmp_path / "w", "--quiet").returncode == 0
    data = good.read_bytes()
    for name, odd in (("groups.onnx", _varint(15 << 3 | 3) * 1000 + _varint(15 << 3 | 4) * 1000 + data),
                      ("tag.onnx", b"\x80" * 9 + b"\x7e" + b"\x05" + data)):
        path = tmp_path / name
        path.write_bytes(odd)
        for command in (["inspect", path], ["convert", path, "-o", tmp_path / "x"],
                        ["verify", tmp_path / "w.json", path]):
            one_line_error(run(*command), name, "is not a valid ONNX model")
    assert not (tmp_path / "x.json").exists()


# --- structure-aware fuzzing: odd wire forms in every place, and text models ---------------------------------


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


_UNKNOWN = 1000  # a field number no ONNX message has


@st.composite
def _odd_fields(draw: Any) -> bytes:
    """An unknown field in a form protobuf's serializer never writes: groups nested near protobuf's depth and
    past it, tags of 5 and 10 bytes, varints of 10 bytes with every last byte."""
    form = draw(st.sampled_from(["groups", "long_tag", "ten_byte_tag", "ten_byte_value"]))
    if form == "groups":
        depth = draw(st.sampled_from([1, 2, 97, 98, 99, 100, 101, 102, 1000]))
        return _varint(_UNKNOWN << 3 | 3) * depth + _varint(_UNKNOWN << 3 | 4) * depth
    if form == "long_tag":  # an overlong tag of 5 bytes (read) or 6 (refused)
        tag = _varint(_UNKNOWN << 3)
        length = draw(st.sampled_from([5, 6]))
        return bytes(b | 0x80 for b in tag) + b"\x80" * (length - len(tag) - 1) + b"\x00" + b"\x05"
    if form == "ten_byte_tag":
        return b"\x80" * 9 + bytes([draw(st.integers(0, 0x7F))]) + b"\x05"
    return _varint(_UNKNOWN << 3) + b"\xff" * 9 + bytes([draw(st.integers(0, 0x7F))])


def _parsed_counts(model: Any) -> tuple[int, int, int]:
    """The nodes of every graph protobuf parsed (subgraphs, functions, training_info's graphs and function
    attribute graphs), and the constants and nodes of the graphs a conversion does not read."""
    nodes = len(_nodes(model.graph.node)) + sum(len(_nodes(f.node)) for f in model.functions)
    apart_graphs = [g for info in model.training_info for g in (info.initialization, info.algorithm)]
    apart_graphs += [a.g for f in model.functions for a in f.attribute_proto if a.HasField("g")]
    apart_nodes = sum(len(_nodes(g.node)) for g in apart_graphs)
    return nodes + apart_nodes, sum(_constants_in(g) for g in apart_graphs), apart_nodes


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=_graphs(1, "x"), odd=st.lists(_odd_fields(), min_size=1, max_size=3),
       places=st.lists(st.sampled_from(["model", "graph", "node", "subgraph", "training_info", "function_graph"]),
                       min_size=1, max_size=3))
def test_odd_wire_forms_in_every_place_are_counted_as_protobuf_parses_them(
    drawn: tuple[Any, list[int]], odd: list[bytes], places: list[str]
) -> None:
    """Odd fields put into the model, a graph, a node, a subgraph, a training_info graph and a function's
    attribute graph: the count raises nothing; wherever protobuf parses the bytes, the count reads them and
    equals what protobuf parsed (no count below protobuf's), and the entry points raise only DmlBridgeError."""
    graph = drawn[0]
    body = graph.SerializeToString()
    node = helper.make_node("Identity", ["a"], ["b"]).SerializeToString()
    data = helper.make_model(helper.make_graph([], "g", [], [])).SerializeToString()
    for k, place in enumerate(places):
        junk = odd[k % len(odd)]
        if place == "model":
            data += junk
        elif place == "graph":  # (a second graph field: protobuf merges it into the first)
            data += _field(ModelField.GRAPH, body + junk)
        elif place == "node":
            data += _field(ModelField.GRAPH, _field(GraphField.NODE, node + junk))
        elif place == "subgraph":
            attribute = _field(AttributeField.NAME, b"then_branch") + _field(AttributeField.G, body + junk)
            holder = _field(NodeField.OP_TYPE, b"If") + _field(NodeField.ATTRIBUTE, attribute)
            data += _field(ModelField.GRAPH, _field(GraphField.NODE, holder))
        elif place == "training_info":
            data += _field(ModelField.TRAINING_INFO, _field(census.TrainingInfoField.ALGORITHM, body + junk))
        else:
            attribute = _field(AttributeField.NAME, b"body") + _field(AttributeField.G, body + junk)
            function = _field(1, b"f") + _field(10, b"local") + _field(census.FUNCTION_ATTRIBUTE_PROTO, attribute)
            data += _field(ModelField.FUNCTIONS, function)
    count = count_constants(data)
    try:
        parsed = onnx.load_model_from_string(data)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError
        parsed = None
    STATS["parsed by protobuf" if parsed is not None else "refused by protobuf"] += 1
    if parsed is not None:
        assert count is not None
        assert count.total == len(find_constants(parsed))
        assert (count.nodes, count.apart, count.nodes_apart) == _parsed_counts(parsed)
    try:
        dmlbridge.plan_model(data)
    except dmlbridge.DmlBridgeError:
        pass


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=_graphs(0, ""), apart=st.booleans(),
       text_format=st.sampled_from(["json", "textproto", "onnxtxt"]))
def test_a_text_models_bound_is_never_below_what_it_parses_to(
    drawn: tuple[Any, list[int]], apart: bool, text_format: str
) -> None:
    """The bound counted from a text model's text (JSON, protobuf's text format, ONNX's text syntax) is at least
    its nodes and at least its constants, however its graphs nest, training_info's graphs included."""
    model = helper.make_model(drawn[0])
    if apart:
        model.training_info.add().algorithm.CopyFrom(drawn[0])
    serializer = registry.get(text_format)
    assert serializer is not None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (onnx calls its own text syntax experimental)
            text = serializer.serialize_proto(model)
            parsed = serializer.deserialize_proto(text, onnx.ModelProto())
    except Exception:  # noqa: BLE001 - onnx's own text syntax does not print every model it can read back
        STATS["text models onnx could not print and read back"] += 1
        return
    STATS[f"{text_format} models bounded"] += 1
    text = text if isinstance(text, bytes) else text.encode()
    nodes, apart_constants, _ = _parsed_counts(parsed)
    bound = text_bound(text, text_format)
    assert bound >= nodes
    assert bound >= len(find_constants(parsed)) + apart_constants


def test_report_fuzz_statistics() -> None:
    """Prints how the structure-aware examples of this module ended (run with -s to see it)."""
    if STATS:
        print("\ncensus fuzzing: " + ", ".join(f"{k} {v}" for k, v in sorted(STATS.items())))
