"""Finding every constant of a model (dmlbridge.model.constants): where they live, their keys, their values (sparse
ones densified), checked against onnx's own helpers and a naive per-element densifier (models.naive_densify)."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from builders import model_of, sparse
from models import naive_densify
from onnx import AttributeProto, ModelProto, TensorProto, helper, numpy_helper

from dmlbridge.errors import InvalidArgumentError, TensorProtoError, TensorTooLargeError
from dmlbridge.model.constants import find_constants
from dmlbridge.types.data_types import OnnxDataType as O

# --- helpers ----------------------------------------------------------------------------------------------


def graph(nodes: list, name: str, initializers: list | None = None, outputs: list[str] = (), **kw: object) -> object:
    return helper.make_graph(
        nodes, name, [], [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializers or [], **kw,
    )


def rich_model() -> object:
    """Every place a constant can live, with names that collide and names that are missing."""
    then_g = graph([helper.make_node("Identity", ["T"], ["t_out"])], "then", [numpy_helper.from_array(
        np.array([1.0, 2.0], np.float32), "T")], ["t_out"])
    else_g = graph([helper.make_node("Constant", [], ["E"], name="else_c", value_int=5)], "else", outputs=["E"])
    inner_if = helper.make_node("If", ["c"], ["if_out"], name="inner_if", then_branch=then_g, else_branch=else_g)
    body = graph([inner_if], "body", [numpy_helper.from_array(np.array([3], np.int16), "B")], ["if_out"])
    loop = helper.make_node("Loop", ["", ""], ["loop_out"], name="loop", body=body)
    # An unnamed If: its scope is op_type + index in the graph.
    unnamed_if = helper.make_node(
        "If", ["c"], ["u_out"],
        then_branch=graph([], "t2", [numpy_helper.from_array(np.array([7], np.uint8), "U")], ["U"]),
        else_branch=graph([], "e2", [numpy_helper.from_array(np.array([8], np.uint8), "U")], ["U"]),
    )
    multi = helper.make_node("Multi", [], ["m"], name="multi", domain="custom")
    multi.attribute.append(helper.make_attribute("branches", [
        graph([], "g0", [numpy_helper.from_array(np.array([1.5], np.float16), "G")]),
        graph([], "g1", [numpy_helper.from_array(np.array([2.5], np.float16), "G")]),
    ]))
    nodes = [
        helper.make_node("Constant", [], ["c_value"], name="cv", value=numpy_helper.from_array(
            np.array([[1, 2], [3, 4]], np.int32))),
        helper.make_node("Constant", [], ["c_float"], value_float=0.5),
        helper.make_node("Constant", [], ["c_floats"], value_floats=[1.0, -2.0, 3.5]),
        helper.make_node("Constant", [], ["c_int"], value_int=-7),
        helper.make_node("Constant", [], ["c_ints"], value_ints=[1, 2**40]),
        helper.make_node("Constant", [], ["c_string"], value_string="hello"),
        helper.make_node("Constant", [], ["c_strings"], value_strings=["a", "b"]),
        helper.make_node("Constant", [], ["c_sparse"], sparse_value=sparse(
            "sv", np.array([4.0, 5.0], np.float32), np.array([[0, 1], [1, 2]], np.int64), [2, 3])),
        helper.make_node("Constant", [], ["dup"]),  # collides with the initializer "dup"
        loop,
        unnamed_if,
        multi,
        helper.make_node("Constant", [], ["not_const"], domain="custom", value_float=1.0),  # another op
    ]
    nodes[8].attribute.append(helper.make_attribute("value_float", 9.0))
    inits = [
        numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "W"),
        numpy_helper.from_array(np.array([1, 2], np.int8), ""),  # no name
        numpy_helper.from_array(np.array([3, 4], np.int8), "dup"),
        numpy_helper.from_array(np.array([5], np.int8), "dup#2"),  # a real name that a generated key must avoid
        numpy_helper.from_array(np.array([True]), "c"),
    ]
    sparse_inits = [
        sparse("S_lin", np.array([1, 2, 3], np.int32), np.array([0, 5, 7], np.int64), [2, 4]),
        sparse("S_coo", np.array([9.0, 8.0], np.float64), np.array([[1, 0, 1], [0, 1, 0]], np.int64), [2, 2, 2]),
    ]
    g = helper.make_graph(nodes, "main", [], [], inits, sparse_initializer=sparse_inits)
    fn_const = helper.make_node("Constant", [], ["k"], name="kc", value_floats=[2.0])
    fn_ref = helper.make_node("Constant", [], ["from_caller"])
    fn_ref.attribute.append(helper.make_attribute_ref("value", AttributeProto.TENSOR))
    function = helper.make_function(
        "custom.fn", "Scale", ["x"], ["y"], [fn_const, fn_ref, helper.make_node("Mul", ["x", "k"], ["y"])],
        [helper.make_opsetid("", 21)],
    )
    return helper.make_model(g, functions=[function], opset_imports=[helper.make_opsetid("", 21)])


EXPECTED = [
    # key, kind, type, shape
    ("W", "initializer", O.FLOAT, (2, 3)),
    ("<unnamed 1>", "initializer", O.INT8, (2,)),
    ("dup", "initializer", O.INT8, (2,)),
    ("dup#2", "initializer", O.INT8, (1,)),
    ("c", "initializer", O.BOOL, (1,)),
    ("S_lin", "sparse_initializer", O.INT32, (2, 4)),
    ("S_coo", "sparse_initializer", O.DOUBLE, (2, 2, 2)),
    ("c_value", "value", O.INT32, (2, 2)),
    ("c_float", "value_float", O.FLOAT, ()),
    ("c_floats", "value_floats", O.FLOAT, (3,)),
    ("c_int", "value_int", O.INT64, ()),
    ("c_ints", "value_ints", O.INT64, (2,)),
    ("c_string", "value_string", O.STRING, ()),
    ("c_strings", "value_strings", O.STRING, (2,)),
    ("c_sparse", "sparse_value", O.FLOAT, (2, 3)),
    ("dup#3", "value_float", O.FLOAT, ()),
    ("loop/body/B", "initializer", O.INT16, (1,)),
    # helper.make_node sorts its keyword attributes: else_branch comes first in the protobuf, and so here.
    ("loop/body/inner_if/else_branch/E", "value_int", O.INT64, ()),
    ("loop/body/inner_if/then_branch/T", "initializer", O.FLOAT, (2,)),
    ("If_10/else_branch/U", "initializer", O.UINT8, (1,)),
    ("If_10/then_branch/U", "initializer", O.UINT8, (1,)),
    ("multi/branches[0]/G", "initializer", O.FLOAT16, (1,)),
    ("multi/branches[1]/G", "initializer", O.FLOAT16, (1,)),
    ("functions/custom.fn/Scale/k", "value_floats", O.FLOAT, (1,)),
]


# --- finding ----------------------------------------------------------------------------------------------


def test_finds_every_constant_in_model_order_with_unique_keys() -> None:
    found = find_constants(rich_model())
    assert [(c.key, c.kind, c.onnx_type, c.shape) for c in found] == EXPECTED
    assert len({c.key for c in found}) == len(found)


def test_origins_and_scopes_say_where_each_constant_lives() -> None:
    by_key = {c.key: c for c in find_constants(rich_model())}
    assert by_key["W"].origin == "initializer" and by_key["W"].scope == ""
    assert by_key["S_lin"].origin == "sparse_initializer"
    assert by_key["c_value"].origin == "Constant node 'cv' (value)"
    assert by_key["c_float"].origin == "Constant node #1 (value_float)"
    assert by_key["loop/body/inner_if/then_branch/T"].origin == "initializer in loop/body/inner_if/then_branch"
    assert by_key["loop/body/inner_if/else_branch/E"].origin == (
        "Constant node 'else_c' (value_int) in loop/body/inner_if/else_branch"
    )
    assert by_key["functions/custom.fn/Scale/k"].scope == "functions/custom.fn/Scale"
    assert by_key["loop/body/B"].name == "B"
    assert by_key["<unnamed 1>"].name == ""


def test_values_equal_onnx_numpy_helper_and_attribute_semantics() -> None:
    model = rich_model()
    found = {c.key: c for c in find_constants(model)}
    g = model.graph
    for tensor in g.initializer:
        if tensor.name == "W":
            np.testing.assert_array_equal(found["W"].to_array(), numpy_helper.to_array(tensor))
    assert found["c_value"].to_array().tolist() == [[1, 2], [3, 4]]
    value = found["c_float"].to_array()
    assert value.dtype == np.float32 and value.shape == () and value == 0.5
    assert found["c_floats"].to_array().dtype == np.float32
    assert found["c_floats"].to_array().tolist() == [1.0, -2.0, 3.5]
    ints = found["c_ints"].to_array()
    assert ints.dtype == np.int64 and ints.tolist() == [1, 2**40]
    assert found["c_int"].to_array().dtype == np.int64 and found["c_int"].to_array() == -7
    assert found["c_strings"].to_array().tolist() == ["a", "b"]
    assert found["c_string"].to_array().item() == "hello"
    assert found["dup#3"].to_array() == np.float32(9.0)
    # Sparse: against the naive densifier and the literal expectation.
    lin = found["S_lin"].to_array()
    assert lin.dtype == np.int32
    np.testing.assert_array_equal(lin, naive_densify(np.array([1, 2, 3], np.int32), np.array([0, 5, 7]), [2, 4]))
    assert lin.tolist() == [[1, 0, 0, 0], [0, 2, 0, 3]]
    coo = found["S_coo"].to_array()
    assert coo[1, 0, 1] == 9.0 and coo[0, 1, 0] == 8.0 and np.count_nonzero(coo) == 2
    assert found["c_sparse"].to_array().tolist() == [[0, 4, 0], [0, 0, 5]]
    assert found["loop/body/inner_if/then_branch/T"].to_array().tolist() == [1.0, 2.0]


def test_generated_keys_never_take_a_real_name() -> None:
    inits = [numpy_helper.from_array(np.array([i], np.int8), n) for i, n in enumerate(["a", "a", "a#2", "a"])]
    model = model_of(inits)
    assert [c.key for c in find_constants(model)] == ["a", "a#3", "a#2", "a#4"]


def test_empty_names_get_placeholder_keys_that_stay_unique() -> None:
    inits = [numpy_helper.from_array(np.array([1], np.int8), "") for _ in range(3)]
    nodes = [helper.make_node("Constant", [], [""], value_int=1), helper.make_node("Constant", [], [], value_int=2)]
    model = model_of(inits, nodes)
    keys = [c.key for c in find_constants(model)]
    assert keys == ["<unnamed 0>", "<unnamed 1>", "<unnamed 2>", "<unnamed 0>#2", "<unnamed 1>#2"]


def test_function_attribute_references_are_not_constants() -> None:
    keys = [c.key for c in find_constants(rich_model())]
    assert not any("from_caller" in k for k in keys)
    assert "not_const" not in keys  # a node called Constant in another domain is someone else's op


@pytest.mark.parametrize(
    "attrs, message",
    [
        ([], "no value attribute"),
        ([helper.make_attribute("value_float", 1.0), helper.make_attribute("value_int", 1)], "several value"),
        ([AttributeProto(name="value_float", type=AttributeProto.INT, i=1)], "must be AttributeProto type 1"),
    ],
)
def test_malformed_constant_nodes_are_refused(attrs: list, message: str) -> None:
    node = helper.make_node("Constant", [], ["x"], name="bad")
    node.attribute.extend(attrs)
    model = model_of(nodes=[node])
    with pytest.raises(TensorProtoError, match=message):
        find_constants(model)


def test_constant_string_that_is_not_utf8_is_an_error_when_decoded() -> None:
    node = helper.make_node("Constant", [], ["s"])
    node.attribute.append(AttributeProto(name="value_string", type=AttributeProto.STRING, s=b"\xff\xfe"))
    (found,) = find_constants(model_of(nodes=[node]))
    with pytest.raises(TensorProtoError, match="UTF-8"):
        found.to_array()


def test_deep_nesting_is_an_error_not_a_recursion_crash() -> None:
    # Built in place: protobuf refuses to parse or copy messages this deep, but a ModelProto in memory can be.
    model = ModelProto()
    g = model.graph
    for depth in range(80):
        node = g.node.add(op_type="If", name=f"n{depth}")
        attr = node.attribute.add(name="then_branch", type=AttributeProto.GRAPH)
        g = attr.g
    g.initializer.append(numpy_helper.from_array(np.array([1], np.int8), "x"))
    with pytest.raises(TensorProtoError, match="nested more than"):
        find_constants(model)


def test_not_a_model() -> None:
    with pytest.raises(InvalidArgumentError):
        find_constants(TensorProto())
    with pytest.raises(InvalidArgumentError):
        find_constants(b"\x00")


def test_malformed_initializer_is_found_at_scan_time() -> None:
    bad = numpy_helper.from_array(np.arange(4, dtype=np.float32), "bad")
    bad.raw_data = bad.raw_data[:-1]
    with pytest.raises(TensorProtoError, match="bad"):
        find_constants(model_of([bad]))


# --- sparse tensors as constants (the densifier itself: tests/onnx/test_sparse.py) ----------------------------


def _model_with_sparse(sp: object) -> object:
    return model_of(sparse=[sp])


def test_sparse_with_bad_indices_fails_when_decoded_naming_it() -> None:
    sp = sparse("S", np.array([1.0, 2.0], np.float32), np.array([1, 1], np.int64), [4])
    (found,) = find_constants(_model_with_sparse(sp))
    with pytest.raises(TensorProtoError, match=r"'S'.*more than once"):
        found.to_array()


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: sparse("S", np.ones((2, 1), np.float32), np.array([0, 1]), [4]), "values must be 1-D"),
        (lambda: sparse("S", np.ones(2, np.float32), np.array([0.0, 1.0], np.float32), [4]), "integer tensor"),
        (lambda: sparse("S", np.ones(2, np.float32), np.array([0, 1, 2]), [4]), "indices have shape"),
        (lambda: sparse("S", np.ones(2, np.float32), np.array([0, 1]), [-4]), "negative dims"),
        (lambda: sparse("S", np.ones(2, np.float32), np.array([0, 1]), [2**62, 2**62]), "more elements"),
    ],
)
def test_malformed_sparse_tensors_are_refused_at_scan_time(build: object, message: str) -> None:
    with pytest.raises(TensorProtoError, match=message):
        find_constants(_model_with_sparse(build()))  # type: ignore[operator]


def test_sparse_dense_size_is_checked_before_allocating() -> None:
    sp = sparse("huge", np.ones(2, np.float32), np.array([0, 1]), [2**20, 2**20])  # 4 TiB if densified
    (found,) = find_constants(_model_with_sparse(sp))
    assert found.nbytes == 4 * 2**40
    with pytest.raises(TensorTooLargeError, match="max_tensor_bytes"):
        found.to_array()
    with pytest.raises(TensorTooLargeError):
        found.to_array(max_tensor_bytes=1000)


def test_sparse_value_constant_and_all_index_dtypes() -> None:
    for index_dtype in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        sp = sparse("S", np.array([1, 2], np.int16), np.array([3, 0], index_dtype), [2, 2])
        node = helper.make_node("Constant", [], ["k"], sparse_value=sp)
        (found,) = find_constants(model_of(nodes=[node]))
        assert found.kind == "sparse_value" and found.to_array().tolist() == [[2, 0], [0, 1]]


def test_value_tensors_decode_like_numpy_helper_raw_and_typed() -> None:
    arrays = {
        "f32": np.array([1.5, -0.0], np.float32), "f16": np.array([np.nan, 2], np.float16),
        "i4": np.array([-8, 7, 1], ml_dtypes.int4), "u2": np.array([3, 0, 1], ml_dtypes.uint2),
        "bf": np.array([1, -3], ml_dtypes.bfloat16), "b": np.array([True, False]),
        "u64": np.array([2**64 - 1], np.uint64), "f6": np.array([1.5, -3], ml_dtypes.float6_e3m2fn),
    }
    nodes = []
    for (name, a), raw in itertools.product(arrays.items(), (True, False)):
        t = numpy_helper.from_array(a, "")  # raw_data, packed as ONNX packs it
        if not raw:
            t = helper.make_tensor("", t.data_type, a.shape, a, raw=False)
        nodes.append(helper.make_node("Constant", [], [f"{name}_{raw}"], value=t))
    found = find_constants(model_of(nodes=nodes))
    for constant, node in zip(found, nodes, strict=True):
        expected = numpy_helper.to_array(node.attribute[0].t)
        got = constant.to_array()
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.tobytes() == expected.tobytes(), constant.key
