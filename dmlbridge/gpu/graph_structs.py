"""The structs of a DirectML graph (``IDMLDevice1::CompileGraph``), as ctypes laid out as DirectML.h declares them
for 64-bit Windows: the graph desc, its operator nodes and its three kinds of edges (tests/gpu/test_graph_structs.py
checks each size and offset against the header).

    >>> ctypes.sizeof(DML_GRAPH_DESC), ctypes.sizeof(DML_INTERMEDIATE_GRAPH_EDGE_DESC)
    (72, 24)
"""

from __future__ import annotations

import ctypes

__all__ = [
    "DML_EXECUTION_FLAG_NONE", "DML_GRAPH_DESC", "DML_GRAPH_EDGE_DESC", "DML_GRAPH_EDGE_TYPE_INPUT",
    "DML_GRAPH_EDGE_TYPE_INTERMEDIATE", "DML_GRAPH_EDGE_TYPE_OUTPUT", "DML_GRAPH_NODE_DESC",
    "DML_GRAPH_NODE_TYPE_OPERATOR", "DML_INPUT_GRAPH_EDGE_DESC", "DML_INTERMEDIATE_GRAPH_EDGE_DESC",
    "DML_OPERATOR_GRAPH_NODE_DESC", "DML_OUTPUT_GRAPH_EDGE_DESC",
]

# DML_GRAPH_EDGE_TYPE, DML_GRAPH_NODE_TYPE and DML_EXECUTION_FLAGS (DirectML.h)
DML_GRAPH_EDGE_TYPE_INPUT = 1
DML_GRAPH_EDGE_TYPE_OUTPUT = 2
DML_GRAPH_EDGE_TYPE_INTERMEDIATE = 3
DML_GRAPH_NODE_TYPE_OPERATOR = 1
DML_EXECUTION_FLAG_NONE = 0


class DML_GRAPH_EDGE_DESC(ctypes.Structure):  # noqa: N801 - the DirectML name
    _fields_ = [("Type", ctypes.c_int32), ("Desc", ctypes.c_void_p)]


class DML_INPUT_GRAPH_EDGE_DESC(ctypes.Structure):  # noqa: N801
    _fields_ = [("GraphInputIndex", ctypes.c_uint32), ("ToNodeIndex", ctypes.c_uint32),
                ("ToNodeInputIndex", ctypes.c_uint32), ("Name", ctypes.c_char_p)]


class DML_OUTPUT_GRAPH_EDGE_DESC(ctypes.Structure):  # noqa: N801
    _fields_ = [("FromNodeIndex", ctypes.c_uint32), ("FromNodeOutputIndex", ctypes.c_uint32),
                ("GraphOutputIndex", ctypes.c_uint32), ("Name", ctypes.c_char_p)]


class DML_INTERMEDIATE_GRAPH_EDGE_DESC(ctypes.Structure):  # noqa: N801
    _fields_ = [("FromNodeIndex", ctypes.c_uint32), ("FromNodeOutputIndex", ctypes.c_uint32),
                ("ToNodeIndex", ctypes.c_uint32), ("ToNodeInputIndex", ctypes.c_uint32), ("Name", ctypes.c_char_p)]


class DML_GRAPH_NODE_DESC(ctypes.Structure):  # noqa: N801
    _fields_ = [("Type", ctypes.c_int32), ("Desc", ctypes.c_void_p)]


class DML_OPERATOR_GRAPH_NODE_DESC(ctypes.Structure):  # noqa: N801
    _fields_ = [("Operator", ctypes.c_void_p), ("Name", ctypes.c_char_p)]


class DML_GRAPH_DESC(ctypes.Structure):  # noqa: N801
    _fields_ = [("InputCount", ctypes.c_uint32), ("OutputCount", ctypes.c_uint32),
                ("NodeCount", ctypes.c_uint32), ("Nodes", ctypes.c_void_p),
                ("InputEdgeCount", ctypes.c_uint32), ("InputEdges", ctypes.c_void_p),
                ("OutputEdgeCount", ctypes.c_uint32), ("OutputEdges", ctypes.c_void_p),
                ("IntermediateEdgeCount", ctypes.c_uint32), ("IntermediateEdges", ctypes.c_void_p)]
