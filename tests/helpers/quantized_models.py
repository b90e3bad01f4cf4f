"""Quantized models for the tests: made by ONNX Runtime's quantizer (MatMulNBits, QDQ) or by hand
(DequantizeLinear, GatherBlockQuantized), what ONNX Runtime's CPU provider computes for them (the oracle), and an
independent decode of a written record (its parts read from the buffer files through their descs, element by
element) to hold ``dequantize()`` and the oracle to."""

from __future__ import annotations

import copy
import json
import logging
import math
import struct
from pathlib import Path
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

import dmlbridge
from dmlbridge import Target

logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)

OPSETS = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
MATMUL_CASES = [  # (K, N, bits, block_size, symmetric): K whole blocks and not, an odd number of blocks
    (64, 8, 4, 16, False), (72, 8, 4, 16, True), (80, 6, 4, 32, False), (96, 5, 4, 32, True),
    (256, 4, 4, 64, False), (300, 3, 4, 128, True), (512, 2, 4, 256, False), (48, 8, 8, 16, False),
    (72, 6, 8, 32, True), (64, 8, 2, 16, False), (112, 4, 2, 32, True),
]
# GatherBlockQuantized's data: uint8 bytes packing 2, 4 or 8 bits, or int4 and uint4 values (see gbq_inputs).
GBQ_DATA_TYPES = ["uint8 bits 2", "uint8 bits 4", "uint8 bits 8", "int4", "uint4"]


def matmul_model(k: int, n: int, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((k, n)) * 0.3).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "W"], ["Y"], name="mm")], "g",
                              [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])],
                              [numpy_helper.from_array(w, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def with_float16_scales(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of a one-MatMulNBits ``model`` whose scales (the node's input 2) are FLOAT16."""
    changed = copy.deepcopy(model)
    scales = next(t for t in changed.graph.initializer if t.name == changed.graph.node[0].input[2])
    scales.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scales).astype(np.float16), scales.name))
    return changed


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


def dq_scale_shape(shape: tuple[int, ...], granularity: str, axis: int, block: int) -> tuple[int, ...]:
    """The shape of a DequantizeLinear's scales (and zero points) for an input of ``shape``: one value
    (``"tensor"``), one per index of ``axis`` (``"axis"``), or one per ``block`` values along it (``"block"``)."""
    rank_axis = axis % len(shape)
    if granularity == "tensor":
        return ()
    if granularity == "axis":
        return (shape[rank_axis],)
    return tuple(-(-d // block) if i == rank_axis else d for i, d in enumerate(shape))


def dq_model(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, **attrs: int) -> tuple[onnx.ModelProto, Any]:
    inits = [numpy_helper.from_array(x, "x"), numpy_helper.from_array(scale, "s")]
    inputs = ["x", "s"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "z"))
        inputs.append("z")
    node = helper.make_node("DequantizeLinear", inputs, ["y"], "dq", **attrs)
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=OPSETS), node


def gbq_inputs(rng: np.random.Generator, data_type: str, length: int, rows: int = 6,
               block: int = 16) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """GatherBlockQuantized's inputs for ``rows`` rows of ``length`` values quantized along axis 1 in blocks of
    ``block``: the data of ``data_type`` (one of GBQ_DATA_TYPES), its scales (FLOAT16 for int4, else FLOAT32), its
    zero points, and the bits per value."""
    blocks = -(-length // block)
    scales = (rng.random((rows, blocks)) + 0.01).astype(np.float16 if data_type == "int4" else np.float32)
    if data_type.startswith("uint8"):
        bits = int(data_type.split()[-1])
        data = rng.integers(0, 256, (rows, length * bits // 8)).astype(np.uint8)
        zero_points = rng.integers(0, 256, (rows, -(-blocks * bits // 8))).astype(np.uint8)
        return data, scales, zero_points, bits
    return ints(rng, data_type, (rows, length)), scales, ints(rng, data_type, (rows, blocks)), 4


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


# --- the independent decode: the buffer files, the descs, one element at a time --------------------------------

_FORMATS = {1: "<f", 2: "<e", 5: "<B", 8: "<b"}  # FLOAT32, FLOAT16, UINT8, INT8 (DML_TENSOR_DATA_TYPE values)


def _element(data: bytes, dml: int, position: int) -> int | float:
    if dml in (12, 13):  # UINT4, INT4: two per byte, the first in the low nibble
        nibble = (data[position // 2] >> (4 * (position % 2))) & 0xF
        return nibble - 16 if dml == 13 and nibble >= 8 else nibble
    fmt = _FORMATS[dml]
    size = struct.calcsize(fmt)
    return struct.unpack_from(fmt, data, position * size)[0]  # type: ignore[no-any-return]


def read_part(directory: Path, doc: dict[str, Any], part: dict[str, Any]) -> np.ndarray:
    """A part's values over its sizes, read from its buffer file through its desc, element by element."""
    desc = part["desc"]
    data = (directory / doc["buffers"][part["buffer"]]["file"]).read_bytes()[part["offset"]:]
    data = data[: desc["TotalTensorSizeInBytes"]]
    sizes = desc["Sizes"]
    strides = desc["Strides"] or [math.prod(sizes[k + 1 :]) for k in range(len(sizes))]
    out = np.empty(sizes, dtype=np.float64)
    for index in np.ndindex(*sizes):
        out[index] = _element(data, desc["DataType"], sum(i * s for i, s in zip(index, strides, strict=True)))
    return out


def independent_dequantize(directory: Path, record: dict[str, Any]) -> np.ndarray:
    doc = json.loads((directory / "w.json").read_text())
    w, s, z = (read_part(directory, doc, record[name]) for name in ("weight", "scales", "zero_points"))
    out_type = {"FLOAT": np.float32, "FLOAT16": np.float16}[record["output_type"]]
    values = ((w - z).astype(np.float32) * s.astype(np.float32)).astype(out_type)
    shape, axis, block = record["shape"], record["axis"], record["block_size"]
    split = record["granularity"] == "block" and block > 1
    rank = len(shape) + split
    values = values.reshape(values.shape[values.ndim - rank :])
    if split:
        values = values.reshape(*values.shape[:axis], -1, *values.shape[axis + 2 :])
        values = values[(slice(None),) * axis + (slice(0, shape[axis]),)]
    return np.ascontiguousarray(values).reshape(shape)


def same_bits(a: np.ndarray, b: np.ndarray, signed_zero: bool = True) -> bool:
    """Bit for bit; without ``signed_zero``, -0 counts as +0."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not signed_zero:
        a, b = a.copy(), b.copy()
        a[a == 0], b[b == 0] = 0, 0
    return bool(np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}")))


def check(model: onnx.ModelProto, directory: Path, expected: dict[str, np.ndarray], target: Target | None = None,
          signed_zero: bool = True, **kw: Any) -> dmlbridge.UploadPlan:
    """Convert, load, and hold every quantized weight to ``expected`` (by node key) both ways."""
    dmlbridge.convert_model(model, directory / "w", target=target or Target(), progress=False, checksum=True, **kw)
    plan = dmlbridge.load_plan(directory / "w.json", verify=True)
    plan.verify(model)
    doc = json.loads((directory / "w.json").read_text())
    records = {r["key"]: r for r in doc["quantized"]}
    assert set(plan.quantized) == set(expected) == set(records)
    for key, want in expected.items():
        q = plan.quantized[key]
        assert q.skipped is None, q.skipped
        assert same_bits(q.dequantize(), want, signed_zero), key
        assert same_bits(independent_dequantize(directory, records[key]), want, signed_zero), key
        assert len(q.sizes or ()) >= plan.min_dims
    return plan
