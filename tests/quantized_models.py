"""Quantized models for the tests: made by ONNX Runtime's quantizer (MatMulNBits, QDQ) or by hand
(DequantizeLinear, GatherBlockQuantized), and what ONNX Runtime's CPU provider computes for them (the oracle)."""

from __future__ import annotations

import copy
import logging
from typing import Any

import ml_dtypes
import numpy as np
import onnx

# The oracle is part of the test extra: a missing one fails where it is imported, never skips (the quantizer needs
# onnx-ir, also in the test extra).
import onnxruntime as ort
import onnxruntime.quantization.matmul_nbits_quantizer as quantizer
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantFormat

logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)

OPSETS = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]


def matmul_model(k: int, n: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((k, n)) * 0.3).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "W"], ["Y"], name="mm")], "g",
                              [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])],
                              [numpy_helper.from_array(w, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def quantized(k: int, n: int, bits: int, block: int, symmetric: bool, qdq: bool = False) -> onnx.ModelProto:
    config = quantizer.DefaultWeightOnlyQuantConfig(
        block_size=block, is_symmetric=symmetric, bits=bits, accuracy_level=0,
        quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator)
    q = quantizer.MatMulNBitsQuantizer(copy.deepcopy(matmul_model(k, n)), algo_config=config)
    q.process()
    model: onnx.ModelProto = q.model.model
    return model


def identity_product(model: onnx.ModelProto, k: int) -> np.ndarray:
    """What MatMulNBits computes for A = I: dequant(B)^T, as [K, N] (transposed back by the caller)."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"A": np.eye(k, dtype=np.float32)})[0]  # type: ignore[no-any-return]


def node_output(model: onnx.ModelProto, node: Any, out_type: int = TensorProto.FLOAT) -> np.ndarray:
    """The output of one node of ``model`` with its constant inputs, computed by ONNX Runtime (no fusion)."""
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info(node.output[0], out_type, None)],
                              list(model.graph.initializer))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    one = helper.make_model(graph, opset_imports=OPSETS)
    session = ort.InferenceSession(one.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {})[0]  # type: ignore[no-any-return]


INT_TYPES = {"int8": np.int8, "uint8": np.uint8, "int4": ml_dtypes.int4, "uint4": ml_dtypes.uint4}


def ints(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    low, high = {"int8": (-128, 128), "uint8": (0, 256), "int4": (-8, 8), "uint4": (0, 16)}[name]
    return rng.integers(low, high, shape).astype(INT_TYPES[name])


def dq_model(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, **attrs: int) -> tuple[onnx.ModelProto, Any]:
    inits = [numpy_helper.from_array(x, "x"), numpy_helper.from_array(scale, "s")]
    inputs = ["x", "s"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "z"))
        inputs.append("z")
    node = helper.make_node("DequantizeLinear", inputs, ["y"], "dq", **attrs)
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=OPSETS), node


def gbq_model(data: np.ndarray, scales: np.ndarray, zp: np.ndarray | None, bits: int, block: int,
              quantize_axis: int, gather_axis: int) -> tuple[onnx.ModelProto, Any]:
    inits = [numpy_helper.from_array(data, "data"), numpy_helper.from_array(scales, "scales"),
             numpy_helper.from_array(np.arange(data.shape[gather_axis], dtype=np.int64), "idx")]
    inputs = ["data", "idx", "scales"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "zp"))
        inputs.append("zp")
    node = helper.make_node("GatherBlockQuantized", inputs, ["y"], "gbq", domain="com.microsoft", bits=bits,
                            block_size=block, quantize_axis=quantize_axis, gather_axis=gather_axis)
    out = TensorProto.FLOAT if scales.dtype == np.float32 else TensorProto.FLOAT16
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", out, None)], inits)
    return helper.make_model(graph, opset_imports=OPSETS), node


def static_quantized(weight_type: Any = None, seed: int = 0) -> onnx.ModelProto:
    """A small opset-12 Conv + MatMul model quantized by ONNX Runtime's own quantize_static (QDQ, per channel, a
    calibration reader of a few random inputs). With 4-bit weights (the default, QUInt4) the quantizer writes
    ``com.microsoft`` QuantizeLinear and DequantizeLinear nodes, the ONNX ones not taking 4 bits before opset 21."""
    import os
    import tempfile

    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "B"),
             numpy_helper.from_array((rng.standard_normal((8 * 6 * 6, 5)) * 0.3).astype(np.float32), "W2"),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["C"], "conv"), helper.make_node("Relu", ["C"], ["R"], "relu"),
             helper.make_node("Reshape", ["R", "shape"], ["F"], "flat"),
             helper.make_node("MatMul", ["F", "W2"], ["Y"], "mm")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.inputs = iter([{"X": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.inputs, None)

    with tempfile.TemporaryDirectory() as directory:
        source, target = os.path.join(directory, "m.onnx"), os.path.join(directory, "q.onnx")
        onnx.save(model, source)
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # (the quantizer's advice to pre-process, and its domain note)
        try:
            quantize_static(source, target, Reader(), weight_type=weight_type or QuantType.QUInt4,
                            activation_type=QuantType.QUInt8, per_channel=True, quant_format=QuantFormat.QDQ)
        finally:
            root.setLevel(level)
        return onnx.load(target)
