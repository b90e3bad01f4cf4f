"""Running DirectML operators as one compiled graph (:func:`run_graph`): each operator created from its
``DML_OPERATOR_DESC``, the graph compiled by ``IDMLDevice1::CompileGraph``, then initialized (inputs flagged
``DML_TENSOR_FLAG_OWNED_BY_DML`` bound then), executed and its outputs read back as ``run_operator`` does.

The edges name what feeds each node input: a graph input (:class:`InputEdge`), another node's output
(:class:`IntermediateEdge`); and which node output each graph output is (:class:`OutputEdge`).

    >>> InputEdge(graph_input=0, node=1, node_input=2)
    InputEdge(graph_input=0, node=1, node_input=2)
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from dmlbridge.errors import ComError, InvalidArgumentError
from dmlbridge.gpu.com import failed, hresult_text, invoke, out_pointer, release
from dmlbridge.gpu.device import as_device
from dmlbridge.gpu.dispatch import check_execution_flags, check_extents, check_inputs, run_compiled
from dmlbridge.gpu.graph_structs import (
    DML_GRAPH_DESC,
    DML_GRAPH_EDGE_DESC,
    DML_GRAPH_EDGE_TYPE_INPUT,
    DML_GRAPH_EDGE_TYPE_INTERMEDIATE,
    DML_GRAPH_EDGE_TYPE_OUTPUT,
    DML_GRAPH_NODE_DESC,
    DML_GRAPH_NODE_TYPE_OPERATOR,
    DML_INPUT_GRAPH_EDGE_DESC,
    DML_INTERMEDIATE_GRAPH_EDGE_DESC,
    DML_OPERATOR_GRAPH_NODE_DESC,
    DML_OUTPUT_GRAPH_EDGE_DESC,
)
from dmlbridge.gpu.interfaces import IID, IDMLDevice, IDMLDevice1, IUnknown
from dmlbridge.gpu.structs import DML_OPERATOR_DESC
from dmlbridge.tensor.descs import DML_BUFFER_BINDING

__all__ = ["InputEdge", "IntermediateEdge", "OutputEdge", "run_graph"]


class InputEdge(NamedTuple):
    """Graph input ``graph_input`` feeds input ``node_input`` of node ``node`` (``DML_INPUT_GRAPH_EDGE_DESC``).

    Example:
        >>> import dmlbridge.gpu
        >>> dmlbridge.gpu.InputEdge(graph_input=1, node=0, node_input=1)   # the second graph input is node 0's B
        InputEdge(graph_input=1, node=0, node_input=1)
    """

    graph_input: int
    node: int
    node_input: int


class IntermediateEdge(NamedTuple):
    """Output ``from_output`` of node ``from_node`` feeds input ``to_input`` of node ``to_node``
    (``DML_INTERMEDIATE_GRAPH_EDGE_DESC``).

    Example:
        >>> import dmlbridge.gpu
        >>> dmlbridge.gpu.IntermediateEdge(0, 0, 1, 1)   # node 0's output is node 1's second input
        IntermediateEdge(from_node=0, from_output=0, to_node=1, to_input=1)
    """

    from_node: int
    from_output: int
    to_node: int
    to_input: int


class OutputEdge(NamedTuple):
    """Output ``node_output`` of node ``node`` is graph output ``graph_output`` (``DML_OUTPUT_GRAPH_EDGE_DESC``).

    Example:
        >>> import dmlbridge.gpu
        >>> dmlbridge.gpu.OutputEdge(node=1, node_output=0, graph_output=0)
        OutputEdge(node=1, node_output=0, graph_output=0)
    """

    node: int
    node_output: int
    graph_output: int


def _edges(kind: int, struct: Any, edges: Sequence[Any], what: str, fields: int) -> tuple[Any, list[Any]]:
    """A DML_GRAPH_EDGE_DESC array of ``edges``, and the structs it points at (kept alive by the caller)."""
    if isinstance(edges, (str, bytes)) or not isinstance(edges, Sequence):
        raise InvalidArgumentError(f"{what} must be a sequence of {what[:-1]} tuples")
    descs = []
    for index, edge in enumerate(edges):
        if not isinstance(edge, tuple) or len(edge) != fields or \
                not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**32 for n in edge):
            raise InvalidArgumentError(f"{what}[{index}] is {edge!r}: give {fields} indices (dmlbridge.gpu."
                                       f"{struct.__name__})")
        descs.append(struct(*edge, None))
    array = (DML_GRAPH_EDGE_DESC * max(1, len(descs)))(
        *[DML_GRAPH_EDGE_DESC(kind, ctypes.addressof(desc)) for desc in descs])
    return array, descs


_EDGE_STRUCTS = {"input_edges": DML_INPUT_GRAPH_EDGE_DESC, "intermediate_edges": DML_INTERMEDIATE_GRAPH_EDGE_DESC,
                 "output_edges": DML_OUTPUT_GRAPH_EDGE_DESC}


def run_graph(device: Any, operators: Sequence[DML_OPERATOR_DESC], input_edges: Sequence[InputEdge],
              intermediate_edges: Sequence[IntermediateEdge], output_edges: Sequence[OutputEdge],
              inputs: Sequence[DML_BUFFER_BINDING | None], output_sizes: Sequence[int], *,
              owned_by_dml: Sequence[int] = (), execution_flags: int = 0) -> list[np.ndarray]:
    """Compile ``operators`` into one DirectML graph joined by the edges (``IDMLDevice1::CompileGraph``), run it,
    and return each graph output's bytes (uint8 arrays of ``output_sizes``).

    ``inputs`` holds one binding per graph input (an upload's ``binding(key)``), ``owned_by_dml`` the graph inputs
    whose tensor descs carry ``DML_TENSOR_FLAG_OWNED_BY_DML`` (bound when the graph is initialized), as
    :func:`~dmlbridge.gpu.run_operator` takes them; the graph has ``len(inputs)`` inputs and ``len(output_sizes)``
    outputs. Each operator's own desc struct, and the tensor descs it points at, stay alive until this returns.
    ``execution_flags``: as :func:`~dmlbridge.gpu.run_operator` takes them. A graph DirectML refuses is a ComError
    naming ``IDMLDevice1::CompileGraph``.

    Example:
        >>> import ctypes, dmlbridge, dmlbridge.gpu, numpy as np
        >>> class IDENTITY(ctypes.Structure):         # DML_ELEMENT_WISE_IDENTITY_OPERATOR_DESC
        ...     _fields_ = [("InputTensor", ctypes.c_void_p), ("OutputTensor", ctypes.c_void_p),
        ...                 ("ScaleBias", ctypes.c_void_p)]
        >>> x = dmlbridge.prepare(np.array([1.5, -2, 3, 0], np.float32))
        >>> desc = x.as_ctypes_tensor_desc()
        >>> identity = IDENTITY(ctypes.addressof(desc), ctypes.addressof(desc), None)
        >>> op = dmlbridge.gpu.DML_OPERATOR_DESC(1, ctypes.addressof(identity))
        >>> with dmlbridge.gpu.create_device() as device, dmlbridge.gpu.upload_tensors([x], device) as up:
        ...     out = dmlbridge.gpu.run_graph(device, [op, op], [dmlbridge.gpu.InputEdge(0, 0, 0)],
        ...                                   [dmlbridge.gpu.IntermediateEdge(0, 0, 1, 0)],
        ...                                   [dmlbridge.gpu.OutputEdge(1, 0, 0)], [up.binding(0)], [16])
        >>> dmlbridge.decode(out[0], "FLOAT32", [4]).tolist()
        [1.5, -2.0, 3.0, 0.0]
    """
    if isinstance(operators, (str, bytes)) or not isinstance(operators, Sequence) or not operators or \
            not all(isinstance(op, DML_OPERATOR_DESC) for op in operators):
        raise InvalidArgumentError("operators must be a non-empty sequence of DML_OPERATOR_DESC "
                                   "(dmlbridge.gpu.DML_OPERATOR_DESC), one per graph node")
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence) or \
            isinstance(output_sizes, (str, bytes)) or not isinstance(output_sizes, Sequence):
        raise InvalidArgumentError("inputs and output_sizes must be sequences: one binding per graph input, one "
                                   "byte count per graph output")
    bindings, _ = check_inputs(inputs, owned_by_dml)
    flags = check_execution_flags(execution_flags)
    keep: list[Any] = []
    arrays = []
    for what, edges in (("input_edges", input_edges), ("intermediate_edges", intermediate_edges),
                        ("output_edges", output_edges)):
        kind = {"input_edges": DML_GRAPH_EDGE_TYPE_INPUT, "intermediate_edges": DML_GRAPH_EDGE_TYPE_INTERMEDIATE,
                "output_edges": DML_GRAPH_EDGE_TYPE_OUTPUT}[what]
        array, structs = _edges(kind, _EDGE_STRUCTS[what], edges, what, len(_EDGE_STRUCTS[what]._fields_) - 1)
        arrays.append(array)
        keep.append(structs)
    held, owns = as_device(device)
    made: list[int] = []
    try:
        check_extents(bindings)  # (before any GPU work: a binding past its buffer can remove the device)
        dml1 = out_pointer()
        hresult = invoke(held.dml, IUnknown.QueryInterface, ctypes.byref(IID.IDMLDevice1), ctypes.byref(dml1))
        if failed(hresult) or not dml1.value:
            raise ComError(f"IUnknown::QueryInterface for IDMLDevice1 failed with HRESULT {hresult_text(hresult)}: "
                           "this DirectML predates graphs (DirectML 1.1)", "IUnknown::QueryInterface",
                           hresult & 0xFFFFFFFF)
        made.append(dml1.value)
        nodes = []
        for index, operator in enumerate(operators):
            op = held.create(IDMLDevice.CreateOperator, ctypes.byref(operator), ctypes.byref(IID.IDMLOperator),
                             on=held.dml, doing=f"(DirectML refused the desc of graph node {index})")
            made.append(op)
            node = DML_OPERATOR_GRAPH_NODE_DESC(op, f"node{index}".encode())
            keep.append(node)
            nodes.append(DML_GRAPH_NODE_DESC(DML_GRAPH_NODE_TYPE_OPERATOR, ctypes.addressof(node)))
        node_array = (DML_GRAPH_NODE_DESC * len(nodes))(*nodes)
        graph = DML_GRAPH_DESC(len(inputs), len(output_sizes), len(nodes), ctypes.addressof(node_array),
                               len(input_edges), ctypes.addressof(arrays[0]) if input_edges else None,
                               len(output_edges), ctypes.addressof(arrays[2]),
                               len(intermediate_edges), ctypes.addressof(arrays[1]) if intermediate_edges else None)
        compiled = held.create(IDMLDevice1.CompileGraph, ctypes.byref(graph), flags,
                               ctypes.byref(IID.IDMLCompiledOperator), on=dml1.value, doing="compiling the graph")
        made.append(compiled)
        return run_compiled(held, compiled, inputs, output_sizes, owned_by_dml=owned_by_dml)
    finally:
        for address in reversed(made):
            release(address)
        if owns:
            held.close()
