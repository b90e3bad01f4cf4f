"""Finding every constant of an ONNX model, and densifying sparse tensors.

A model keeps constant values in more places than ``graph.initializer``:

- ``graph.sparse_initializer`` (densified here: zeros everywhere but at the given indices),
- ``Constant`` nodes, in every form: ``value``, ``sparse_value``, ``value_float(s)``, ``value_int(s)``, and
  ``value_string(s)`` (found, but strings have no DirectML form),
- the subgraphs of ``If``/``Loop``/``Scan`` (any GRAPH or GRAPHS attribute of any node), to any depth,
- the nodes of model-local functions (``model.functions``).

Each constant gets a unique *key*: its value name in the main graph; ``SCOPE/name`` elsewhere, where the scope is
the path of enclosing nodes and attributes, e.g. ``Loop_0/body/If_0/then_branch/W`` (a node is named by its
``name``, or ``{op_type}_{index}`` when it has none) or ``functions/{domain}/{name}/c`` for a function. An
empty name becomes ``<unnamed {index}>``; a key already taken gets ``#2``, ``#3``, ... (never a name that occurs
in the model), so keys are unique whatever the model says.

Finding constants reads only the protobuf: no value is decoded and no external file is opened until
:meth:`ModelConstant.to_array` is called, one constant at a time.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import sys
from collections.abc import Iterator
from typing import Any, Literal, NamedTuple

import numpy as np

from dmlbridge.errors import InvalidArgumentError, TensorProtoError, TensorTooLargeError, counted
from dmlbridge.onnx.external_data import ExternalDataReader
from dmlbridge.onnx.sparse import densify_sparse
from dmlbridge.onnx.tensor_proto import (
    DEFAULT_MAX_TENSOR_BYTES,
    TensorInfo,
    decode_examined,
    examine_tensor,
    tensor_info,
    tensor_to_array,
)
from dmlbridge.onnx.wire import float_field
from dmlbridge.types.data_types import OnnxDataType

__all__ = [
    "ConstantKind",
    "ModelConstant",
    "collector_paused",
    "densify_sparse",
    "find_constants",
    "function_constants",
    "initializer_constant",
    "iter_external_tensors",
    "make_constant",
    "make_keys_unique",
    "node_constants",
    "sparse_constants",
    "sparse_parts",
]

ConstantKind = Literal[
    "initializer",
    "sparse_initializer",
    "value",
    "sparse_value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
    "derived",
]

# AttributeProto.AttributeType codes (onnx.proto); 0 (UNDEFINED) is accepted as "not stated" for old models.
_ATTR_TYPES: dict[str, int] = {
    "value_float": 1,
    "value_int": 2,
    "value_string": 3,
    "value": 4,
    "value_floats": 6,
    "value_ints": 7,
    "value_strings": 8,
    "sparse_value": 11,
}
_ATTR_FIELD = {
    "value_float": "f",
    "value_int": "i",
    "value_string": "s",
    "value": "t",
    "value_floats": "floats",
    "value_ints": "ints",
    "value_strings": "strings",
    "sparse_value": "sparse_tensor",
}
_ATTR_ONNX_TYPE = {
    "value_float": OnnxDataType.FLOAT,
    "value_floats": OnnxDataType.FLOAT,
    "value_int": OnnxDataType.INT64,
    "value_ints": OnnxDataType.INT64,
    "value_string": OnnxDataType.STRING,
    "value_strings": OnnxDataType.STRING,
}
# Protobuf itself refuses messages nested deeper than 100; this bound only matters for a ModelProto built in
# memory, where it keeps the walk from hitting Python's recursion limit.
_MAX_DEPTH = 64
_INTEGER_TYPES = frozenset(
    {
        OnnxDataType.INT8,
        OnnxDataType.INT16,
        OnnxDataType.INT32,
        OnnxDataType.INT64,
        OnnxDataType.UINT8,
        OnnxDataType.UINT16,
        OnnxDataType.UINT32,
        OnnxDataType.UINT64,
    }
)


class ModelConstant(NamedTuple):
    """One constant of a model, found but not decoded (a tuple: a model can hold 100,000 constants).

    Attributes:
        key: unique within the model (see the module docstring).
        name: the value name as the model spells it ("" when it has none).
        scope: the path of enclosing nodes and attributes; "" in the main graph.
        kind: where the value lives: ``initializer``, ``sparse_initializer`` or the Constant attribute name.
        origin: a readable description, e.g. ``initializer in If_0/then_branch`` or
            ``Constant node 'c0' (value_floats)``.
        proto: the TensorProto (``initializer``, ``value``), SparseTensorProto or AttributeProto holding it;
            None for a constant the byte scan read from the model's bytes (it fetches the proto when needed).
        tensor_name: the TensorProto's own name ("" for the other kinds).
        onnx_type: the element type.
        shape: the ONNX shape (dense shape for sparse tensors).
        nbytes: bytes of the decoded numpy array (one per element for sub-byte types).
        storage: ``raw``, ``typed``, ``external`` (a TensorProto's storage), ``sparse`` or ``attribute``.
        size: the number of elements.
        packed_nbytes: the bytes ONNX stores for a TensorProto (``ceil(size * bits / 8)``); 0 for the other kinds.

    The fields from ``tensor_name`` on are tensor_info's, in TensorInfo's order: a TensorProto is examined once,
    when it is found, and decoding does not check it again.
    """

    key: str
    name: str
    scope: str
    kind: ConstantKind
    origin: str
    proto: Any
    tensor_name: str
    onnx_type: OnnxDataType
    shape: tuple[int, ...]
    nbytes: int
    storage: str
    size: int
    packed_nbytes: int

    @property
    def info(self) -> TensorInfo:
        """What ``tensor_info`` said of the constant's TensorProto when it was found (its fields are this tuple's,
        from ``tensor_name`` on): decoding takes it instead of examining the proto again."""
        return TensorInfo(self.tensor_name, self.onnx_type, self.shape, self.nbytes,
                          self.storage, self.size, self.packed_nbytes)  # type: ignore[arg-type]  # (a TensorProto's storage)

    def tensors(self) -> list[Any]:
        """The TensorProtos holding this constant's data (two for a sparse tensor, none for scalar attributes)."""
        if self.kind in ("initializer", "value"):
            return [self.proto]
        if self.kind in ("sparse_initializer", "sparse_value"):
            return [self.proto.values, self.proto.indices]
        return []

    def to_array(
        self,
        *,
        reader: ExternalDataReader | None = None,
        max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    ) -> np.ndarray:
        """The values, with ``onnx.numpy_helper.to_array``'s dtype and shape (sparse tensors densified).

        ``reader`` resolves external data (None refuses it). A result larger than ``max_tensor_bytes`` raises
        TensorTooLargeError before it is allocated.
        """
        kind = self.kind
        if kind in ("initializer", "value"):
            info = self.info
            return decode_examined(self.proto, info, reader=reader, max_tensor_bytes=max_tensor_bytes)
        if kind == "derived":  # made from other constants (dmlbridge.quantized.records): proto computes the values
            return self.proto.values(reader, max_tensor_bytes)
        if kind in ("sparse_initializer", "sparse_value"):
            return _densify_proto(self.proto, self.onnx_type, self.shape, reader, max_tensor_bytes, self.key)
        attr = self.proto
        if kind == "value_float":
            return float_field(attr, "f").reshape(()).astype(np.float32)  # the stored bits, in native order
        if kind == "value_floats":
            return float_field(attr, "floats").astype(np.float32).reshape(self.shape)
        if kind == "value_int":
            return np.array(attr.i, dtype=np.int64)
        if kind == "value_ints":
            return np.array(attr.ints, dtype=np.int64).reshape(self.shape)
        strings = [attr.s] if kind == "value_string" else list(attr.strings)
        values = np.empty(len(strings), dtype=object)
        try:
            values[:] = [s.decode("utf-8") for s in strings]
        except UnicodeDecodeError as exc:
            raise TensorProtoError(f"constant {self.key!r} has a string that is not valid UTF-8: {exc}") from None
        return values.reshape(self.shape)

    def densify_into(
        self, out: np.ndarray, *, reader: ExternalDataReader | None = None,
        max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    ) -> None:
        """A sparse constant's dense values written into ``out`` (a flat array of every element, of the values'
        dtype in any byte order: the first bytes of an output buffer, say), as :meth:`to_array` gives them."""
        _densify_proto(self.proto, self.onnx_type, self.shape, reader, max_tensor_bytes, self.key, out)


make_constant = functools.partial(tuple.__new__, ModelConstant)
"""ModelConstant._make without its length check (the finders make one per constant: 100,000 in some models)."""


# _FRESH: protobuf's wrapper of a message whose repeated fields were read holds a table of them as long as it lives
# (about 370 bytes; upb). A constant keeps the wrapper of its TensorProto for the whole conversion, so it keeps a
# fresh one, fetched again after the one examined is let go: a million constants keep 370 MB less.


def _tensor_facts(tensor: Any) -> tuple[Any, ...]:
    """tensor_info's fields of a TensorProto, in ModelConstant's order (its last seven fields)."""
    info = examine_tensor(tensor)[0]
    return info.name, info.onnx_type, info.shape, info.nbytes, info.storage, info.size, info.packed_nbytes


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (as timeit does): finding 100,000 constants makes a few hundred
    thousand objects and no cycle, and the collector would walk all of them again and again."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def find_constants(model: Any) -> list[ModelConstant]:
    """Every constant of an ``onnx.ModelProto``, in model order (main graph first, subgraphs where their node
    is, then functions). Reads only the protobuf; raises TensorProtoError for malformed constants."""
    with collector_paused():
        return _find(model)


def _find(model: Any) -> list[ModelConstant]:
    if getattr(getattr(model, "DESCRIPTOR", None), "full_name", None) != "onnx.ModelProto":
        raise InvalidArgumentError(f"expected an onnx.ModelProto, got {type(model).__name__}")
    found: list[ModelConstant] = []
    _scan_graph(model.graph, "", found, 0)
    function_constants(model, found)
    make_keys_unique(found)
    return found


def function_constants(model: Any, found: list[ModelConstant]) -> None:
    for function in model.functions:
        scope = f"functions/{_text(function.domain)}/{_text(function.name)}"
        overload = _text(getattr(function, "overload", ""))
        if overload:
            scope += f":{overload}"
        _scan_nodes(function.node, scope, found, 0)


def _text(value: str | bytes) -> str:
    # proto2 hands back bytes for a string field that is not valid UTF-8.
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return value


def _where(scope: str) -> str:
    return f" in {scope}" if scope else ""


def _scan_graph(graph: Any, scope: str, found: list[ModelConstant], depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise TensorProtoError(f"subgraphs are nested more than {_MAX_DEPTH} deep at {scope!r}")
    append = found.append
    origin = "initializer" + _where(scope)  # (one string for the graph's initializers: a scope can be long)
    initializers = graph.initializer
    for index in range(len(initializers)):
        append(initializer_constant(initializers, index, scope, origin))
    sparse_constants(graph, scope, found)
    _scan_nodes(graph.node, scope, found, depth)


def initializer_constant(initializers: Any, index: int, scope: str, origin: str | None = None) -> ModelConstant:
    """The constant of the initializer at ``index`` of ``initializers`` (its graph's, in ``scope``; ``origin``:
    the graph's ``initializer in SCOPE``, made once for all its initializers)."""
    facts = _tensor_facts(initializers[index])
    name = facts[0]  # the tensor's name, decoded as _text does
    key = (f"{scope}/" if scope else "") + (name or f"<unnamed {index}>")
    origin = "initializer" + _where(scope) if origin is None else origin
    return make_constant((key, name, scope, "initializer", origin, initializers[index], *facts))


def sparse_constants(graph: Any, scope: str, found: list[ModelConstant]) -> None:
    where = _where(scope)
    prefix = f"{scope}/" if scope else ""
    origin = "sparse_initializer" + where
    for index, sparse in enumerate(graph.sparse_initializer):
        name = _text(sparse.values.name)
        label = f"sparse initializer {name!r}" if name else f"sparse initializer #{index}"
        onnx_type, shape, nbytes = _sparse_info(sparse, label + where)
        found.append(make_constant((f"{prefix}{name or f'<unnamed sparse {index}>'}", name, scope, "sparse_initializer",
                             origin, sparse, "", onnx_type, shape, nbytes, "sparse",
                             math.prod(shape), 0)))


def _scan_nodes(nodes: Any, scope: str, found: list[ModelConstant], depth: int) -> None:
    for index in range(len(nodes)):  # (one node's wrapper at a time: see _FRESH)
        node_constants(nodes[index], index, scope, found, depth)


def node_constants(node: Any, index: int, scope: str, found: list[ModelConstant], depth: int) -> None:
    """The constants of one node: its own (a Constant node) and those of its subgraphs."""
    values: list[tuple[str, Any]] | None = None
    op_type = node.op_type
    attributes = node.attribute[:]
    if op_type == "Constant" and node.domain in ("", "ai.onnx"):
        values = []
    subgraphs: list[tuple[Any, Any]] | None = None
    for attr in attributes:  # one pass: the Constant's value attributes and any subgraphs
        if values is not None:
            attr_name = attr.name
            if attr_name in _ATTR_TYPES:  # (a name that is not valid UTF-8 comes as bytes: not a value name)
                values.append((attr_name, attr))
        if attr.HasField("g"):
            subgraphs = subgraphs or []
            subgraphs.append((attr, None))
        graphs = attr.graphs
        if graphs:
            subgraphs = subgraphs or []
            subgraphs.append((attr, graphs))
    if values is not None:
        constant = _constant_node(node, values, index, scope)
        if constant is not None:
            found.append(constant)
    if subgraphs:
        prefix = _node_path(node, _text(op_type), index, scope)
        for attr, graphs in subgraphs:
            attr_name = _text(attr.name)
            if graphs is None:
                _scan_graph(attr.g, f"{prefix}/{attr_name}", found, depth + 1)
            else:
                for k, graph in enumerate(graphs):
                    _scan_graph(graph, f"{prefix}/{attr_name}[{k}]", found, depth + 1)


def _node_path(node: Any, op_type: str, index: int, scope: str) -> str:
    """The scope of a node's subgraphs: the node's name (or ``{op_type}_{index}``) under the enclosing scope."""
    segment = _text(node.name) or f"{op_type}_{index}"
    return f"{scope}/{segment}" if scope else segment


def _constant_node(node: Any, values: list[tuple[str, Any]], index: int, scope: str) -> ModelConstant | None:
    """The constant of a Constant node, from its attributes named like a value (``values``, in node order)."""
    present = []
    references = 0
    for attr_name, attr in values:
        code = _ATTR_TYPES[attr_name]
        if attr.ref_attr_name:
            references += 1  # a function body's placeholder for a caller's attribute: no value here
            continue
        if attr.type not in (0, code):
            raise TensorProtoError(
                f"{_constant_where(node, index, scope)}: attribute {attr_name!r} has type {attr.type}, but "
                f"{attr_name} must be AttributeProto type {code}"
            )
        present.append((attr_name, attr))
    if not present:
        if references:
            return None
        raise TensorProtoError(
            f"{_constant_where(node, index, scope)} has no value attribute (value, value_float(s), value_int(s), ...)"
        )
    if len(present) > 1:
        names = ", ".join(name for name, _ in present)
        raise TensorProtoError(
            f"{_constant_where(node, index, scope)} has several value attributes ({names}); a Constant has exactly one"
        )
    kind, attr = present[0]
    return _constant_of(node, kind, attr, index, scope)  # type: ignore[arg-type]  # kind is a key of _ATTR_TYPES


def _constant_of(node: Any, kind: ConstantKind, attr: Any, index: int, scope: str) -> ModelConstant:
    """The constant of a Constant node whose value is the attribute ``attr``, named ``kind``."""
    node_name = node.name
    if type(node_name) is not str:
        node_name = _text(node_name)
    label = f"Constant node {node_name!r}" if node_name else f"Constant node #{index}"
    outputs = node.output[:]
    name = outputs[0] if outputs else ""
    if type(name) is not str:
        name = _text(name)
    origin = f"{label} ({kind}) in {scope}" if scope else f"{label} ({kind})"
    key = (f"{scope}/" if scope else "") + (name or f"<unnamed {index}>")
    if kind == "value":
        facts = _tensor_facts(attr.t)
        return make_constant((key, name, scope, kind, origin, attr.t, *facts))  # (a fresh wrapper: see _FRESH)
    if kind == "sparse_value":
        proto = attr.sparse_tensor
        onnx_type, shape, nbytes = _sparse_info(proto, label + _where(scope))
        return make_constant((key, name, scope, kind, origin, proto, "", onnx_type, shape, nbytes, "sparse",
                       math.prod(shape), 0))
    # The list and scalar forms: the attribute itself holds the values.
    onnx_type = _ATTR_ONNX_TYPE[kind]
    shape = (len(getattr(attr, _ATTR_FIELD[kind])),) if kind.endswith("s") else ()
    size = math.prod(shape)
    return make_constant((key, name, scope, kind, origin, attr, "", onnx_type, shape, size * onnx_type.numpy().itemsize,
                   "attribute", size, 0))


def _constant_where(node: Any, index: int, scope: str) -> str:
    node_name = _text(node.name)
    label = f"Constant node {node_name!r}" if node_name else f"Constant node #{index}"
    return label + _where(scope)


def _sparse_info(sparse: Any, where: str) -> tuple[OnnxDataType, tuple[int, ...], int]:
    """Type, dense shape and dense byte size of a SparseTensorProto, with every check that needs no decoding."""
    values = tensor_info(sparse.values)
    indices = tensor_info(sparse.indices)
    shape = tuple(int(d) for d in sparse.dims)
    if any(d < 0 for d in shape):
        raise TensorProtoError(f"{where} has negative dims {list(shape)}; every dimension must be >= 0")
    itemsize = values.onnx_type.numpy().itemsize
    if math.prod(d for d in shape if d) * itemsize > sys.maxsize:
        raise TensorProtoError(f"{where} has dims {list(shape)}, more elements than any array can hold")
    if len(values.shape) != 1:
        raise TensorProtoError(f"{where}: values must be 1-D ([NNZ]), got shape {list(values.shape)}")
    nnz = values.shape[0]
    if indices.onnx_type not in _INTEGER_TYPES:
        raise TensorProtoError(f"{where}: indices must be an integer tensor (INT64), got {indices.onnx_type.name}")
    if indices.shape not in ((nnz,), (nnz, len(shape))):
        raise TensorProtoError(
            f"{where}: indices have shape {list(indices.shape)}; with {counted(nnz, 'value')} and "
            f"{counted(len(shape), 'dim')} they must be [{nnz}] (linear indices) or [{nnz}, {len(shape)}] (coordinates)"
        )
    return values.onnx_type, shape, math.prod(shape) * itemsize


def _densify_proto(
    sparse: Any,
    onnx_type: OnnxDataType,
    shape: tuple[int, ...],
    reader: ExternalDataReader | None,
    max_tensor_bytes: int,
    key: str,
    out: np.ndarray | None = None,
) -> np.ndarray:
    values, indices = sparse_parts(sparse, onnx_type, shape, reader, max_tensor_bytes, key)
    try:
        return densify_sparse(values, indices, shape, label=f"sparse tensor {key!r}", out=out)
    except MemoryError:
        raise TensorTooLargeError(
            f"sparse tensor {key!r} densifies to {math.prod(shape) * onnx_type.numpy().itemsize} bytes "
            f"({onnx_type.name} {list(shape)}) and the allocation failed; free memory, or set max_tensor_bytes below "
            "this size to refuse such tensors up front"
        ) from None


def sparse_parts(
    sparse: Any,
    onnx_type: OnnxDataType,
    shape: tuple[int, ...],
    reader: ExternalDataReader | None,
    max_tensor_bytes: int,
    key: str,
) -> tuple[np.ndarray, np.ndarray]:
    """A SparseTensorProto's values and indices decoded (each one copy of its stored bytes), once its dense size
    is known to be within ``max_tensor_bytes`` (TensorTooLargeError before anything is read)."""
    nbytes = math.prod(shape) * onnx_type.numpy().itemsize
    if nbytes > max_tensor_bytes:
        raise TensorTooLargeError(
            f"sparse tensor {key!r} densifies to {nbytes} bytes ({onnx_type.name} {list(shape)}), more than "
            f"max_tensor_bytes={max_tensor_bytes}; pass a larger max_tensor_bytes= if you trust this model"
        )
    values = tensor_to_array(sparse.values, reader=reader, max_tensor_bytes=max_tensor_bytes)
    indices = tensor_to_array(sparse.indices, reader=reader, max_tensor_bytes=max_tensor_bytes)
    return values, indices


def make_keys_unique(found: list[ModelConstant]) -> None:
    """Give every repeated key ``#2``, ``#3``, ... in order, never a key that occurs elsewhere in the model (the
    next number to try is kept per key: 16,000 constants of one name take one pass)."""
    keys = [item[0] for item in found]
    if len(set(keys)) == len(keys):
        return
    taken = set(keys)
    seen: set[str] = set()
    next_number: dict[str, int] = {}
    for position, item in enumerate(found):
        key = item[0]
        if key in seen:
            n = next_number.get(key, 2)
            while f"{key}#{n}" in taken:
                n += 1
            next_number[key] = n + 1
            found[position] = item._replace(key=f"{key}#{n}")
            taken.add(f"{key}#{n}")
            continue
        seen.add(key)


def iter_external_tensors(constants: list[ModelConstant]) -> Iterator[Any]:
    """The TensorProtos among ``constants`` that keep their data in external files."""
    for constant in constants:
        kind = constant.kind
        if kind in ("initializer", "value"):
            if constant.storage != "external":
                continue  # examined when found: in raw_data or a typed field
            tensors: tuple[Any, ...] = (constant.proto,)
        elif kind in ("sparse_initializer", "sparse_value"):
            tensors = (constant.proto.values, constant.proto.indices)
        else:
            continue  # the attribute forms: no TensorProto
        for tensor in tensors:
            if tensor.data_location == 1:  # TensorProto.EXTERNAL
                yield tensor
