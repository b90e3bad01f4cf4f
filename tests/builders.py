"""Shared model pieces for the whole-model tests."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper, numpy_helper


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
