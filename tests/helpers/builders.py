"""Shared model pieces for the tests: the one-graph model most tests build (:func:`model_of`), sparse tensors,
Constant nodes of every form, an If inside a Loop, and byte-level mutations of serialized messages."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from hypothesis import strategies as st
from onnx import ModelProto, NodeProto, SparseTensorProto, TensorProto, helper, numpy_helper


def model_of(
    initializers: Mapping[str, np.ndarray] | Iterable[TensorProto] = (),
    nodes: Iterable[NodeProto] = (),
    *,
    sparse: Iterable[SparseTensorProto] = (),
    **model_fields: Any,
) -> ModelProto:
    """A model of one graph ``g`` with no inputs or outputs that holds ``initializers`` (TensorProtos, or arrays by
    name), ``nodes`` and ``sparse`` initializers; ``model_fields`` go to ``helper.make_model`` (``opset_imports``,
    ``functions``)."""
    if isinstance(initializers, Mapping):
        initializers = [numpy_helper.from_array(array, name) for name, array in initializers.items()]
    graph = helper.make_graph(list(nodes), "g", [], [], list(initializers), sparse_initializer=list(sparse))
    return helper.make_model(graph, **model_fields)


def sparse(name: str, values: np.ndarray, indices: np.ndarray, dims: list[int]) -> SparseTensorProto:
    """A sparse tensor ``name`` of ``values`` at ``indices`` (linear, or coordinates) in a dense tensor of ``dims``
    (its indices tensor named ``name_i``)."""
    return helper.make_sparse_tensor(
        numpy_helper.from_array(values, name), numpy_helper.from_array(indices, name + "_i"), dims
    )


def constant_nodes(sparse_value: Any) -> list[Any]:
    """Constant nodes in every form ONNX allows (value, value_float(s), value_int(s), value_string(s),
    sparse_value), producing k_value, k_float, k_floats, k_int, k_ints, k_string, k_strings and k_sparse."""
    return [
        helper.make_node("Constant", [], ["k_value"], value=numpy_helper.from_array(np.array([[7, 8]], np.uint16))),
        helper.make_node("Constant", [], ["k_float"], value_float=-1.25),
        helper.make_node("Constant", [], ["k_floats"], value_floats=[0.5, 1e-3]),
        helper.make_node("Constant", [], ["k_int"], value_int=42),
        helper.make_node("Constant", [], ["k_ints"], value_ints=[-1, 0, 3]),
        helper.make_node("Constant", [], ["k_string"], value_string="s"),
        helper.make_node("Constant", [], ["k_strings"], value_strings=["s", "t"]),
        helper.make_node("Constant", [], ["k_sparse"], sparse_value=sparse_value),
    ]


def loop_with_if() -> Any:
    """A Loop node ``loop`` whose body holds an initializer B (int8 [3]) and an If ``inner`` whose branches hold
    constants of their own: then_branch an initializer T (float32 [9, -9]), else_branch a Constant E (ints 5, 6)."""
    then_g = helper.make_graph([], "then", [], [helper.make_tensor_value_info("T", TensorProto.FLOAT, [2])],
                               [numpy_helper.from_array(np.array([9.0, -9.0], np.float32), "T")])
    else_g = helper.make_graph([helper.make_node("Constant", [], ["E"], value_ints=[5, 6])], "else", [],
                               [helper.make_tensor_value_info("E", TensorProto.INT64, [2])])
    body = helper.make_graph(
        [helper.make_node("If", ["c"], ["r"], name="inner", then_branch=then_g, else_branch=else_g)], "body", [],
        [], [numpy_helper.from_array(np.array([3], np.int8), "B")],
    )
    return helper.make_node("Loop", ["", ""], ["lo"], name="loop", body=body)


# --- byte-level mutations of serialized messages ----------------------------------------------------------------

EDIT = st.tuples(
    st.sampled_from(["flip", "set", "delete", "insert", "truncate", "duplicate", "varint"]),
    st.integers(0, 2**24),
    st.binary(min_size=1, max_size=8),
)
EDITS = st.lists(EDIT, min_size=1, max_size=4)


def mutate_bytes(data: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    """``data`` with the ``edits`` (drawn from EDITS) applied in turn: bit flips, set bytes, deletions, insertions,
    truncations, duplicated chunks and large varints."""
    out = bytearray(data)
    for kind, position, value in edits:
        if not out:
            break
        i = position % len(out)
        if kind == "flip":
            out[i] ^= 1 << (value[0] % 8)
        elif kind == "set":
            out[i] = value[0]
        elif kind == "delete":
            del out[i : i + 1 + value[0] % 16]
        elif kind == "insert":
            out[i:i] = value
        elif kind == "truncate":
            del out[i:]
        elif kind == "duplicate":
            chunk = out[i : i + 1 + value[0] % 64]
            j = (position // 7 + value[-1]) % len(out)
            out[j:j] = chunk
        else:  # a large varint where a length, dim or enum was: 0xff bytes then a terminator
            out[i : i + 1] = b"\xff" * (1 + value[0] % 9) + bytes([value[-1] & 0x7F])
    return bytes(out)
