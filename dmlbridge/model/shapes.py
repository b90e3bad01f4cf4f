"""The shapes of a model's values beyond what it declares: ONNX shape inference, run on a copy of the model's
graphs without its constants' data.

Real models seldom declare the shapes of the values between their nodes, and an element-wise operand's desc needs
its node's output sizes. ``onnx.shape_inference`` works them out from the graph inputs' shapes and each operator's
rule, with data propagation (a Shape into a Reshape). It runs here on a copy that keeps every node, attribute,
graph input, output and value_info, and of each constant only its type and dims: the data of small integer
constants (at most :data:`PROPAGATED_ELEMENTS`, the shapes and axes data propagation reads) is kept, nothing else,
and external data is never read. So its memory grows with the model's nodes, not its weights. It runs
non-strictly: where onnx's inference refuses a node (or the whole model), the shapes it could not give are simply
not there, and the consumers keep their notes; that is never an error.

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper
    >>> x = helper.make_tensor_value_info("x", 1, [2, 3])
    >>> add = helper.make_node("Add", ["x", "b"], ["y"])
    >>> relu = helper.make_node("Relu", ["y"], ["z"])
    >>> b = numpy_helper.from_array(np.ones(3, np.float32), "b")
    >>> model = helper.make_model(helper.make_graph([add, relu], "g", [x], [], [b]))
    >>> [(v.name, [d.dim_value for d in v.type.tensor_type.shape.dim]) for v in inferred(model).graph.value_info]
    [('y', [2, 3]), ('z', [2, 3])]
"""

from __future__ import annotations

from typing import Any

import onnx
from onnx import GraphProto, ModelProto, NodeProto, TensorProto

__all__ = ["PROPAGATED_ELEMENTS", "inferred"]

PROPAGATED_ELEMENTS = 64
"""The most elements of an integer constant whose values the copy keeps (a shape, axes, pads: what data
propagation reads); a larger constant keeps its type and dims only."""

_INTEGERS = frozenset({TensorProto.INT64, TensorProto.INT32})


def inferred(model: ModelProto) -> ModelProto:
    """A copy of ``model``'s graphs, functions and opsets without its constants' data (see the module docstring),
    with the shapes ONNX shape inference gives added to each graph's value_info; the copy without them where onnx
    refuses the model."""
    copy = ModelProto()
    copy.ir_version = model.ir_version
    copy.opset_import.extend(model.opset_import)
    copy.functions.extend(model.functions)  # (functions hold no initializers; their Constant nodes are small)
    copy.graph.CopyFrom(_stripped(model.graph))
    try:
        return onnx.shape_inference.infer_shapes(copy, check_type=False, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, ValueError):
        return copy  # (inference is a help, never a condition: the shapes the model declares stay)


def _stripped(graph: GraphProto) -> GraphProto:
    """``graph`` with each constant's data dropped (its type and dims kept), in its subgraphs too."""
    out = GraphProto()
    out.name = graph.name
    out.input.extend(graph.input)
    out.output.extend(graph.output)
    out.value_info.extend(graph.value_info)
    for tensor in graph.initializer:
        out.initializer.append(_header(tensor))
    for sparse in graph.sparse_initializer:
        out.sparse_initializer.add().CopyFrom(_sparse_header(sparse))
    for node in graph.node:
        out.node.append(_node(node))
    return out


def _node(node: NodeProto) -> NodeProto:
    copy = NodeProto()
    copy.name, copy.op_type, copy.domain = node.name, node.op_type, node.domain
    copy.input.extend(node.input)
    copy.output.extend(node.output)
    if getattr(node, "overload", ""):
        copy.overload = node.overload
    for attr in node.attribute:
        kept = copy.attribute.add()
        if attr.HasField("t"):
            kept.name, kept.type = attr.name, attr.type
            kept.t.CopyFrom(_header(attr.t))
        elif attr.HasField("sparse_tensor"):
            kept.name, kept.type = attr.name, attr.type
            kept.sparse_tensor.CopyFrom(_sparse_header(attr.sparse_tensor))
        elif attr.HasField("g") or len(attr.graphs):
            kept.name, kept.type = attr.name, attr.type
            if attr.HasField("g"):
                kept.g.CopyFrom(_stripped(attr.g))
            for graph in attr.graphs:
                kept.graphs.append(_stripped(graph))
        else:
            kept.CopyFrom(attr)
    return copy


def _header(tensor: TensorProto) -> TensorProto:
    """The tensor's name, type and dims, and its data only when it is a small integer one stored in the model."""
    count = 1
    for size in tensor.dims:
        count *= max(0, size)
    if tensor.data_type in _INTEGERS and count <= PROPAGATED_ELEMENTS \
            and tensor.data_location != TensorProto.EXTERNAL:
        return tensor
    header = TensorProto()
    header.name, header.data_type = tensor.name, tensor.data_type
    header.dims.extend(tensor.dims)
    return header


def _sparse_header(sparse: Any) -> Any:
    copy = type(sparse)()
    copy.dims.extend(sparse.dims)
    copy.values.CopyFrom(_header(sparse.values))
    copy.values.dims[:] = [0]  # (no values: an empty sparse tensor of the same dims and type)
    copy.indices.data_type = TensorProto.INT64
    copy.indices.dims.extend([0])
    return copy
