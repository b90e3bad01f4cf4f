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

Sizes the model leaves free (a batch, a sequence length) the caller may give (:class:`GivenShapes`), as ONNX
Runtime's free-dimension overrides do: a graph input's whole shape (``input_shapes``), or every dimension of a
``dim_param`` name (``dim_params``). They are set on the copy's graph inputs before inference; a name that is no
graph input or dim_param, or a size that contradicts one the model declares, is an error naming it.

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

from collections.abc import Mapping
from typing import Any, NamedTuple

import onnx
from onnx import GraphProto, ModelProto, NodeProto, TensorProto

from dmlbridge.errors import InvalidArgumentError
from dmlbridge.model.named_sizes import MOST_NAME, NamedShape, declared_shape

__all__ = ["MOST_GRAPH_INPUTS", "MOST_INPUT_DIMS", "NO_SHAPES", "PROPAGATED_ELEMENTS", "GivenShapes", "GraphInputs",
           "inferred", "recorded_inputs"]

_MOST_SIZE = 2**32 - 1  # a DirectML size's most
_MOST_NAMES = 1 << 12  # (the most graph inputs or dim_params given: far more than any model has)


class GivenShapes(NamedTuple):
    """Sizes the caller gives a model's free dimensions: ``input_shapes``, (graph input, its whole shape) pairs,
    and ``dim_params``, (dim_param name, its size) pairs, each sorted by name.

    Example:
        >>> GivenShapes.check({"x": (1, 3, 224, 224)}, {"batch": 1}).to_json()
        {'input_shapes': {'x': [1, 3, 224, 224]}, 'dim_params': {'batch': 1}}
    """

    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    dim_params: tuple[tuple[str, int], ...] = ()

    @classmethod
    def check(cls, input_shapes: Any = None, dim_params: Any = None) -> GivenShapes:
        """The shapes, each checked (InvalidArgumentError names the keyword): a mapping of graph input names to
        sequences of sizes 1 to 2^32 - 1, and one of dim_param names to such a size; None: none."""
        shapes = []
        for name, value in _named("input_shapes", input_shapes):
            if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) > 64:
                raise InvalidArgumentError(f"input_shapes[{name!r}] must be a sequence of sizes, got {value!r}")
            shapes.append((name, tuple(_size(f"input_shapes[{name!r}]", size) for size in value)))
        params = [(name, _size(f"dim_params[{name!r}]", value)) for name, value in _named("dim_params", dim_params)]
        return cls(tuple(sorted(shapes)), tuple(sorted(params)))

    def to_json(self) -> dict[str, Any]:
        """The manifest form: ``input_shapes`` and ``dim_params`` as objects."""
        return {"input_shapes": {name: list(sizes) for name, sizes in self.input_shapes},
                "dim_params": dict(self.dim_params)}


NO_SHAPES = GivenShapes()
"""No size given: the model's own shapes, and what inference gives."""

GraphInputs = tuple[tuple[str, NamedShape | None], ...]
"""The shapes a model's graph inputs declare, by name, in order (see :func:`recorded_inputs`)."""
MOST_GRAPH_INPUTS = 1 << 16
"""The most graph inputs a manifest records (a model of more records none: load_plan then takes no sizes)."""
MOST_INPUT_DIMS = 64
"""The most dimensions of a graph input's recorded shape (as ``input_shapes`` takes them)."""


def recorded_inputs(graph: GraphProto) -> GraphInputs:
    """The graph inputs (its initializers left out) with the shapes they declare (:func:`declared_shape`: a size,
    a free dimension's dim_param name, or None), as a manifest records them: only when one of them names a free
    dimension, at most MOST_GRAPH_INPUTS of names up to MOST_NAME characters (a shape of more than
    MOST_INPUT_DIMS dimensions recorded as None: undeclared); none otherwise.

        >>> from onnx import helper
        >>> x = helper.make_tensor_value_info("x", 1, ["batch", 3])
        >>> recorded_inputs(helper.make_graph([], "g", [x], []))
        (('x', ('batch', 3)),)
    """
    constants = {tensor.name for tensor in graph.initializer} | {sparse.values.name
                                                                for sparse in graph.sparse_initializer}
    inputs: dict[str, NamedShape | None] = {}
    for value in graph.input:
        if value.name not in constants and value.name not in inputs:
            shape = declared_shape(value)
            inputs[value.name] = None if shape is None or len(shape) > MOST_INPUT_DIMS else shape
    named = any(isinstance(size, str) for shape in inputs.values() for size in shape or ())
    if not named or len(inputs) > MOST_GRAPH_INPUTS or any(not 0 < len(name) <= MOST_NAME for name in inputs):
        return ()
    return tuple(inputs.items())


def _named(keyword: str, value: Any) -> list[tuple[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, Mapping) or len(value) > _MOST_NAMES:
        raise InvalidArgumentError(f"{keyword} must be a mapping of names to sizes (a dict), got "
                                   f"{type(value).__name__}")
    for name in value:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"{keyword} must be keyed by non-empty names (str), got {name!r}")
    return list(value.items())


def _size(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MOST_SIZE:
        raise InvalidArgumentError(f"{where} must be sizes from 1 to 2^32 - 1 (whole numbers), got {value!r}")
    return value

PROPAGATED_ELEMENTS = 64
"""The most elements of an integer constant whose values the copy keeps (a shape, axes, pads: what data
propagation reads); a larger constant keeps its type and dims only."""

_INTEGERS = frozenset({TensorProto.INT64, TensorProto.INT32})


def inferred(model: ModelProto, given: GivenShapes = NO_SHAPES) -> ModelProto:
    """A copy of ``model``'s graphs, functions and opsets without its constants' data (see the module docstring),
    ``given``'s sizes set on its graph inputs, with the shapes ONNX shape inference gives added to each graph's
    value_info; the copy without them where onnx refuses the model. InvalidArgumentError where ``given`` names no
    graph input or dim_param, or contradicts the model."""
    copy = ModelProto()
    copy.ir_version = model.ir_version
    copy.opset_import.extend(model.opset_import)
    copy.functions.extend(model.functions)  # (functions hold no initializers; their Constant nodes are small)
    copy.graph.CopyFrom(_stripped(model.graph))
    if given != NO_SHAPES:
        _give(copy.graph, given)
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


def _give(graph: GraphProto, given: GivenShapes) -> None:
    """Set ``given``'s sizes on ``graph``'s inputs (and a dim_param's on its outputs and value_info too)."""
    inputs = {value.name: value for value in graph.input}
    for name, sizes in given.input_shapes:
        value = inputs.get(name)
        if value is None:
            shown = ", ".join(repr(n) for n in list(inputs)[:8]) + (", ..." if len(inputs) > 8 else "")
            raise InvalidArgumentError(f"input_shapes names {name!r}, which is no graph input of the model (its "
                                       f"inputs: {shown or 'none'})")
        tensor = value.type.tensor_type
        if tensor.HasField("shape") and len(tensor.shape.dim) != len(sizes):
            raise InvalidArgumentError(f"input_shapes gives {name!r} {len(sizes)} dimensions, but the model declares "
                                       f"{len(tensor.shape.dim)}")
        declared = list(tensor.shape.dim) if tensor.HasField("shape") else []
        for k, dim in enumerate(declared):
            if dim.HasField("dim_value") and dim.dim_value > 0 and dim.dim_value != sizes[k]:
                raise InvalidArgumentError(f"input_shapes gives {name!r} dimension {k} as {sizes[k]}, but the model "
                                           f"declares {dim.dim_value}")
        tensor.shape.ClearField("dim")
        for size in sizes:
            tensor.shape.dim.add().dim_value = size
    found: set[str] = set()
    for values in (graph.input, graph.output, graph.value_info):
        for value in values:
            for dim in value.type.tensor_type.shape.dim if value.type.HasField("tensor_type") else ():
                if dim.HasField("dim_param") and dim.dim_param in dict(given.dim_params):
                    found.add(dim.dim_param)
                    dim.dim_value = dict(given.dim_params)[dim.dim_param]
    missing = [name for name, _ in given.dim_params if name not in found]
    if missing:
        raise InvalidArgumentError(f"dim_params names {missing[0]!r}, which is no dim_param of the model's graph "
                                   "inputs, outputs or value_info")
