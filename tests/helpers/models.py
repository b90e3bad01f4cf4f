"""Whole models for the tests, and the independent recomputation their outputs are checked against.

- :func:`build_model`: a constant of every ONNX type in every place and form (initializers raw and typed,
  external data, sparse initializers, Constant nodes of every attribute, an If inside a Loop, a function), with
  the values each key must hold written down here, not taken from dmlbridge.
- :func:`consumer_layout_model`: a constant for each layout a DirectML operator wants of its input.
- :func:`small_model`: many small constants of mixed types and forms (the many-small-constants case).
- :func:`check_independently`: every offset, desc and byte of a written conversion recomputed from the rules and
  the per-element reference encoder (``reference.py``), with no help from dmlbridge's layout code.
- :func:`naive_densify`: a sparse tensor densified one element at a time, from the ONNX spec's wording.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import reference
from builders import constant_nodes, loop_with_if, model_of, sparse
from onnx import TensorProto, external_data_helper, helper, numpy_helper

import dmlbridge
from dmlbridge import Consumer, Target

NAN = float("nan")

# One array per ONNX type that has values, chosen to exercise signs, NaN, -0, range ends and sub-byte packing.
# 64-bit integers fit 32 bits so that every target (emulate, narrow) can take them.
TYPED: dict[str, np.ndarray] = {
    "FLOAT": np.array([[1.5, -2.0, 0.25], [NAN, -0.0, 3e38]], np.float32),
    "UINT8": np.array([0, 1, 255], np.uint8),
    "INT8": np.array([-128, 0, 127], np.int8),
    "UINT16": np.array([0, 65535], np.uint16),
    "INT16": np.array([-32768, 5, 32767], np.int16),
    "INT32": np.array([-(2**31), 2**31 - 1], np.int32),
    "INT64": np.array([-5, 7, 2**31 - 1], np.int64),
    "BOOL": np.array([True, False, True]),
    "FLOAT16": np.array([1.0, -2.0, 0.5], np.float16),
    "DOUBLE": np.array([1 / 3, -0.0, 1e300], np.float64),
    "UINT32": np.array([0, 2**32 - 1], np.uint32),
    "UINT64": np.array([0, 7, 2**32 - 1], np.uint64),
    "BFLOAT16": np.array([1, -3, NAN], ml_dtypes.bfloat16),
    "FLOAT8E4M3FN": np.array([0.5, -448, NAN], ml_dtypes.float8_e4m3fn),
    "FLOAT8E4M3FNUZ": np.array([0.5, -240, NAN], ml_dtypes.float8_e4m3fnuz),
    "FLOAT8E5M2": np.array([0.5, -57344, -np.inf], ml_dtypes.float8_e5m2),
    "FLOAT8E5M2FNUZ": np.array([0.5, -57344, NAN], ml_dtypes.float8_e5m2fnuz),
    "UINT4": np.array([0, 15, 9, 1, 2], ml_dtypes.uint4),
    "INT4": np.array([-8, -1, 0, 1, 7], ml_dtypes.int4),
    "FLOAT4E2M1": np.array([0.5, -6, 1.5], ml_dtypes.float4_e2m1fn),
    "FLOAT8E8M0": np.array([1, 2, 0.5, 2.0**-127], ml_dtypes.float8_e8m0fnu),
    "UINT2": np.array([3, 0, 1, 2, 3], ml_dtypes.uint2),
    "INT2": np.array([-2, -1, 0, 1, 1], ml_dtypes.int2),
    "FLOAT6E2M3": np.array([[0.5, -7.5], [1.125, 0]], ml_dtypes.float6_e2m3fn),
    "FLOAT6E3M2": np.array([0.25, -28, 3], ml_dtypes.float6_e3m2fn),
}
DEFAULT_SKIPPED = {"t_string", "t_empty", "t_complex", "k_string", "k_strings"}


def typed_storage(name: str, array: np.ndarray) -> TensorProto:
    """The tensor in the typed field ONNX uses for its type (not raw_data)."""
    t = numpy_helper.from_array(array, name)
    return helper.make_tensor(name, t.data_type, array.shape, array, raw=False)


def naive_densify(values: np.ndarray, indices: np.ndarray, dims: list[int]) -> np.ndarray:
    """One element at a time, straight from the ONNX spec's wording."""
    dense = np.zeros(math.prod(dims), dtype=values.dtype)
    strides = [math.prod(dims[k + 1 :]) for k in range(len(dims))]
    for i, value in enumerate(values):
        if indices.ndim == 1:
            position = int(indices[i])
        else:
            position = sum(int(c) * s for c, s in zip(indices[i], strides, strict=True))
        dense[position] = value
    return dense.reshape(dims)


def build_model(directory: Path, *, bad: TensorProto | None = None) -> tuple[Path, dict[str, np.ndarray]]:
    """A model with a constant in every place and form, and one external data file. Returns its path and the
    values every key must hold, written down here independently of dmlbridge's own walk."""
    expected: dict[str, np.ndarray] = {}
    inits = []
    for index, (type_name, array) in enumerate(TYPED.items()):
        name = f"t_{type_name.lower()}"
        tensor = numpy_helper.from_array(array, name) if index % 2 else typed_storage(name, array)
        inits.append(tensor)
        # What the model holds, per onnx (make_tensor rounds FLOAT8E8M0's 2^-127 up to 2^-126 in typed storage).
        expected[name] = numpy_helper.to_array(tensor)
    inits.append(numpy_helper.from_array(np.array(["a", "b"], dtype=object), "t_string"))
    inits.append(numpy_helper.from_array(np.zeros((0, 3), np.float32), "t_empty"))
    inits.append(numpy_helper.from_array(np.array([1 + 2j], np.complex64), "t_complex"))
    expected.update(t_string=np.array(["a", "b"], dtype=object), t_empty=np.zeros((0, 3), np.float32),
                    t_complex=np.array([1 + 2j], np.complex64))

    # External data: two tensors in one file, the second at an offset.
    ext_f32 = np.arange(256, dtype=np.float32).reshape(16, 16) / 7
    ext_i4 = np.array([1, -2, 3, -4, 5, -6, 7], ml_dtypes.int4)
    blob = ext_f32.tobytes() + bytes(1024 - ext_f32.nbytes % 1024 if ext_f32.nbytes % 1024 else 0)
    i4_tensor = numpy_helper.from_array(ext_i4, "ext_i4")
    (directory / "weights.data").write_bytes(blob + i4_tensor.raw_data)
    for name, array, offset in (("ext_f32", ext_f32, 0), ("ext_i4", ext_i4, len(blob))):
        t = numpy_helper.from_array(array, name)
        length = len(t.raw_data)
        external_data_helper.set_external_data(t, "weights.data", offset=offset, length=length)
        t.ClearField("raw_data")
        inits.append(t)
        expected[name] = array
    if bad is not None:
        inits.append(bad)
    inits.append(numpy_helper.from_array(np.array([0.75], np.float32), "t_last"))
    expected["t_last"] = np.array([0.75], np.float32)

    sparse_inits = [sparse("sp", np.array([4, 5, 6], np.int16), np.array([[0, 1], [2, 0], [2, 3]]), [3, 4])]
    expected["sp"] = np.array([[0, 4, 0, 0], [0, 0, 0, 0], [5, 0, 0, 6]], np.int16)

    nodes = constant_nodes(sparse("ks", np.array([1.5], np.float16), np.array([2]), [4]))
    expected.update(
        k_value=np.array([[7, 8]], np.uint16), k_float=np.array(-1.25, np.float32),
        k_floats=np.array([0.5, 1e-3], np.float32), k_int=np.array(42, np.int64),
        k_ints=np.array([-1, 0, 3], np.int64), k_string=np.array("s", dtype=object),
        k_strings=np.array(["s", "t"], dtype=object), k_sparse=np.array([0, 0, 1.5, 0], np.float16),
    )
    # An If inside a Loop body, each branch with its own constants.
    nodes.append(loop_with_if())
    expected.update({
        "loop/body/B": np.array([3], np.int8),
        # make_node sorts keyword attributes, so else_branch precedes then_branch in the protobuf.
        "loop/body/inner/else_branch/E": np.array([5, 6], np.int64),
        "loop/body/inner/then_branch/T": np.array([9.0, -9.0], np.float32),
    })
    graph = helper.make_graph(nodes, "main", [], [], inits, sparse_initializer=sparse_inits)
    function = helper.make_function(
        "local", "Fn", ["x"], ["y"],
        [helper.make_node("Constant", [], ["fk"], value=numpy_helper.from_array(np.array([2, 3], np.uint32))),
         helper.make_node("Mul", ["x", "fk"], ["y"])],
        [helper.make_opsetid("", 21)],
    )
    expected["functions/local/Fn/fk"] = np.array([2, 3], np.uint32)
    model = helper.make_model(graph, functions=[function], opset_imports=[helper.make_opsetid("", 21)])
    path = directory / "model.onnx"
    onnx.save(model, path)
    return path, expected


# --- per-channel constants -----------------------------------------------------------------------------------

def per_channel_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, tuple[int, ...]]]:
    """Convolutions of 1, 2 and 3 spatial dimensions, a ConvTranspose and normalizations of 4-D and 5-D inputs,
    their per-channel inputs initializers and Constant nodes of their own channel counts; with each such constant's
    values and the sizes it gets at the default min_dims, worked out by hand: ``[1, C, 1, 1]`` for a node of at
    most 4 dimensions (a weight of 3 or 4, an input X declared 4-D), ``[1, C, 1, 1, 1]`` for one of 5."""
    values = {
        "b2": np.arange(4, dtype=np.float32) + 0.5,  # Conv, weight [4, 3, 3, 3]: 2-D
        "b3": np.array([-1.0, 2.0], np.float32),  # Conv, weight [2, 4, 1, 1, 1] (Constant nodes): 3-D
        "b1": np.array([1, -2, 0.5, 3, 4], np.float16),  # Conv, weight [5, 3, 3]: 1-D, run as 2-D
        "bt": np.arange(6, dtype=np.float32),  # ConvTranspose, weight [3, 6, 2, 2]
        "bn_scale": np.array([1, 2, 3], np.float32), "bn_b": np.array([4, 5, 6], np.float32),  # X [1, 3, 8, 8]
        "bn_mean": np.array([7, 8, 9], np.float32), "bn_var": np.array([1, 1, 2], np.float32),
        "bn5_scale": np.array([1, 2], np.float32), "bn5_b": np.array([3, 4], np.float32),  # X [1, 2, 4, 4, 4]
        "bn5_mean": np.array([5, 6], np.float32), "bn5_var": np.array([7, 8], np.float32),
        "in_scale": np.array([2, 3], np.float32), "in_b": np.array([0, 1], np.float32),  # X of value_info: 5-D
    }
    sizes = {"b2": (1, 4, 1, 1), "b3": (1, 2, 1, 1, 1), "b1": (1, 5, 1, 1), "bt": (1, 6, 1, 1),
             **{f"bn_{p}": (1, 3, 1, 1) for p in ("scale", "b", "mean", "var")},
             **{f"bn5_{p}": (1, 2, 1, 1, 1) for p in ("scale", "b", "mean", "var")},
             "in_scale": (1, 2, 1, 1, 1), "in_b": (1, 2, 1, 1, 1)}
    inits = [numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w2"),
             numpy_helper.from_array(np.ones((5, 3, 3), np.float16), "w1"),
             numpy_helper.from_array(np.ones((3, 6, 2, 2), np.float32), "wt")]
    inits += [numpy_helper.from_array(array, key) for key, array in values.items() if key != "b3"]
    nodes = [
        helper.make_node("Constant", [], ["w3"], value=numpy_helper.from_array(np.ones((2, 4, 1, 1, 1), np.float32))),
        helper.make_node("Constant", [], ["b3"], value=numpy_helper.from_array(values["b3"])),
        helper.make_node("Conv", ["x", "w2", "b2"], ["y2"], name="conv2d"),
        helper.make_node("Conv", ["v", "w3", "b3"], ["y3"], name="conv3d"),
        helper.make_node("Conv", ["s", "w1", "b1"], ["y1"], name="conv1d"),
        helper.make_node("ConvTranspose", ["x", "wt", "bt"], ["yt"], name="deconv"),
        helper.make_node("BatchNormalization", ["x", "bn_scale", "bn_b", "bn_mean", "bn_var"], ["n4"], name="bn"),
        helper.make_node("BatchNormalization", ["v5", "bn5_scale", "bn5_b", "bn5_mean", "bn5_var"], ["n5"],
                         name="bn5"),
        helper.make_node("Relu", ["v5"], ["h"], name="relu"),
        helper.make_node("InstanceNormalization", ["h", "in_scale", "in_b"], ["i5"], name="in"),
    ]
    graph = helper.make_graph(
        nodes, "per_channel",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, None),  # (no shape: the weight tells)
         helper.make_tensor_value_info("s", TensorProto.FLOAT16, [1, 3, 16]),
         helper.make_tensor_value_info("v5", TensorProto.FLOAT, [1, 2, 4, 4, 4])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("y2", "y3", "yt", "n4", "n5", "i5")]
        + [helper.make_tensor_value_info("y1", TensorProto.FLOAT16, None)],
        inits, value_info=[helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", 2, 4, 4, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), values, sizes


def consumer_layout_model() -> onnx.ModelProto:
    """A constant for each layout a DirectML operator wants of its input, and their edge cases: convolutions of 1
    (grouped), 2 and 3 spatial dimensions and a 1-D ConvTranspose, each weight's node declared or told by the
    weight; Gemms whose M is declared by A (transA 0 and 1), by the output alone, as 1, or not at all, with C of
    shape [N], [1, N], [M, 1] and [] and B with transB 0 and 1; Gathers of 1-D, 2-D (declared and constant), 0-D
    and unknown indices; MatMuls of batch [2], [2, 3], [1], unknown, none and of 5 dimensions; a C two Gemms of one
    M read, one two Gemms of different M read, and a 1-D convolution's weight an Identity reads too. The values are
    distinct per constant (arange), so a wrong read shows."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    shapes = {"W1": (6, 2, 3), "B1": (6,), "W2": (4, 3, 3, 3), "W3": (2, 4, 1, 2, 2), "B3": (2,), "WT": (3, 2, 4),
              "GB": (6, 5), "GC": (5,), "GBT": (5, 6), "GCT": (1, 5), "GB3": (6, 2), "GC3": (4, 1), "GCS": (),
              "GCU": (5,), "GCY": (5,), "GC1": (5,), "GCA": (5,), "GCM": (5,),
              "GD1": (10, 3), "GD2": (10, 3), "GD3": (7, 2), "GD4": (5, 2), "GD5": (5, 2),
              "MB": (6, 5), "MB4": (3, 6, 5), "MB1": (6, 5), "MBU": (6, 5), "MB2": (6, 5), "MB5": (6, 5),
              "WI": (2, 2, 3)}
    start = 0
    inits = []
    for name, shape in shapes.items():
        count = math.prod(shape)
        inits.append(numpy_helper.from_array((np.arange(count, dtype=np.float32) + start).reshape(shape), name))
        start += count
    inits.append(numpy_helper.from_array(np.array([[0, 6], [1, 3]], np.int64), "GI3"))
    nodes = [
        helper.make_node("Conv", ["X1", "W1", "B1"], ["Y1"], name="conv1d", group=2),
        helper.make_node("Conv", ["X2", "W2"], ["Y2"], name="conv2d"),
        helper.make_node("Conv", ["X3", "W3", "B3"], ["Y3"], name="conv3d"),  # (X3 undeclared: W3 tells)
        helper.make_node("ConvTranspose", ["XT", "WT"], ["YT"], name="deconv1d"),
        helper.make_node("Gemm", ["A", "GB", "GC"], ["G"], name="gemm"),
        helper.make_node("Gemm", ["A", "GBT", "GCT"], ["GT"], name="gemm_tb", transB=1),
        helper.make_node("Gemm", ["A3", "GB3", "GC3"], ["G3"], name="gemm_ta", transA=1),
        helper.make_node("Gemm", ["A", "GB", "GCS"], ["GS"], name="gemm_scalar"),
        helper.make_node("Gemm", ["AU", "GB", "GCU"], ["GU"], name="gemm_batch"),
        helper.make_node("Gemm", ["AY", "GB", "GCY"], ["GY"], name="gemm_by_y"),
        helper.make_node("Gemm", ["A1", "GB", "GC1"], ["G1"], name="gemm_m1"),
        helper.make_node("Gemm", ["A", "GB", "GCA"], ["GA1"], name="gemm_a1"),
        helper.make_node("Gemm", ["A", "GB", "GCA"], ["GA2"], name="gemm_a2"),
        helper.make_node("Gemm", ["A", "GB", "GCM"], ["GM1"], name="gemm_m3"),
        helper.make_node("Gemm", ["A4", "GB", "GCM"], ["GM2"], name="gemm_m4"),
        helper.make_node("Gather", ["GD1", "I1"], ["E1"], name="gather1"),
        helper.make_node("Gather", ["GD2", "ids"], ["E2"], name="gather2"),
        helper.make_node("Gather", ["GD3", "GI3"], ["E3"], name="gather_const", axis=0),
        helper.make_node("Gather", ["GD4", "I4"], ["E4"], name="gather_unknown"),
        helper.make_node("Gather", ["GD5", "I0"], ["E5"], name="gather_scalar"),
        helper.make_node("MatMul", ["MA", "MB"], ["M"], name="matmul"),
        helper.make_node("MatMul", ["MA4", "MB4"], ["M4"], name="matmul4"),
        helper.make_node("MatMul", ["MA1", "MB1"], ["M1"], name="matmul_b1"),
        helper.make_node("MatMul", ["MAU", "MBU"], ["MU"], name="matmul_batch"),
        helper.make_node("MatMul", ["MA2", "MB2"], ["M2"], name="matmul2"),
        helper.make_node("MatMul", ["MA5", "MB5"], ["M5"], name="matmul5"),
        helper.make_node("Conv", ["XI", "WI"], ["YI"], name="conv_shared"),
        helper.make_node("Identity", ["WI"], ["WI_copy"], name="identity"),
    ]
    declared = {"X1": [1, 4, 16], "X2": [1, 3, 8, 8], "XT": [1, 3, 8], "A": [3, 6], "A3": [6, 4], "AU": ["batch", 6],
                "A1": [1, 6], "A4": [4, 6], "I1": [4], "ids": ["batch", "sequence"], "I0": [],
                "MA": [2, 4, 6], "MA4": [2, 3, 4, 6], "MA1": [1, 4, 6], "MAU": ["b", 4, 6], "MA2": [4, 6],
                "MA5": [2, 2, 2, 4, 6], "XI": [1, 2, 8]}
    inputs = [helper.make_tensor_value_info(name, i64 if name in ("I1", "ids", "I0", "I4") else f32, shape)
              for name, shape in declared.items()]
    inputs += [helper.make_tensor_value_info(name, f32, None) for name in ("X3", "AY")]
    inputs.append(helper.make_tensor_value_info("I4", i64, None))
    outputs = [helper.make_tensor_value_info("GY", f32, [2, 5])]  # (gemm_by_y's M: its output alone says 2)
    outputs += [helper.make_tensor_value_info(output, f32, None) for node in nodes for output in node.output
                if output != "GY"]
    graph = helper.make_graph(nodes, "layouts", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


# --- the independent recomputation --------------------------------------------------------------------------

DML_BITS = {"FLOAT32": 32, "FLOAT16": 16, "UINT32": 32, "UINT16": 16, "UINT8": 8, "INT32": 32, "INT16": 16,
            "INT8": 8, "FLOAT64": 64, "UINT64": 64, "INT64": 64, "UINT4": 4, "INT4": 4}
DML_VALUE = {"FLOAT32": 1, "FLOAT16": 2, "UINT32": 3, "UINT16": 4, "UINT8": 5, "INT32": 6, "INT16": 7, "INT8": 8,
             "FLOAT64": 9, "UINT64": 10, "INT64": 11, "UINT4": 12, "INT4": 13}


def ref_target(target: Target) -> reference.RefTarget:
    level = "FL_" + target.feature_level.dotted.replace(".", "_")
    supported = None if target.supported is None else frozenset(t.name for t in target.supported)
    return reference.RefTarget(level, supported, target.int64, target.allow_lossy)


def check_independently(prefix: Path, expected: dict[str, np.ndarray], target: Target, min_dims: int,
                        alignment: int, max_buffer_bytes: int = 2**31) -> dict[str, Any]:
    """Recompute every buffer, offset, desc and byte from the rules, with no help from dmlbridge's layout code."""
    doc = json.loads(Path(str(prefix) + ".json").read_text())
    files = [(Path(str(prefix)).parent / b["file"]).read_bytes() for b in doc["buffers"]]
    assert doc["format"] == "dmlbridge-upload-plan" and doc["format_version"] == 7
    assert doc["max_buffer_bytes"] == max_buffer_bytes
    assert [b["size"] for b in doc["buffers"]] == [len(f) for f in files]
    assert all(len(f) <= max_buffer_bytes for f in files)
    assert doc["selection"] == {"include": None, "exclude": [], "kinds": None, "min_bytes": 0,
                                "drop_quantized_sources": False}
    assert doc["alignment"] == alignment and doc["min_dims"] == min_dims and doc["target"] == target.describe()
    assert [e["key"] for e in doc["entries"]] == list(expected)  # every constant, in model order
    ref = ref_target(target)
    cursor = buffer = 0
    for e in doc["entries"]:
        array = expected[e["key"]]
        onnx_name = reference.onnx_type_name(array.dtype)
        assert e["onnx_type"] == onnx_name and e["shape"] == list(array.shape)
        try:
            dml, conversion = reference.map_type(onnx_name, ref)
        except reference.UnsupportedTypeError:
            dml = conversion = None
        if dml is None or array.size == 0:
            assert e["skipped"] and e["offset"] is None and e["dml_type"] is None and e["desc"] is None, e
            assert e["buffer"] is None, e
            continue
        assert e["skipped"] is None and (e["dml_type"], e["conversion"]) == (dml, conversion), e
        own = list(array.shape) or [1]
        sizes = [1] * max(0, min_dims - len(own)) + own
        count = math.prod(sizes)
        if conversion == "emulate":
            total = 8 * count
            strides: list[int] | None = [2 * math.prod(sizes[k + 1 :]) for k in range(len(sizes))]
        else:
            total = (count * DML_BITS[dml] + 7) // 8
            total = (total + 3) // 4 * 4
            strides = None
        offset = (cursor + alignment - 1) // alignment * alignment
        if offset + total > max_buffer_bytes:  # a new buffer: the one before ends with its last tensor
            assert total <= max_buffer_bytes and cursor > 0, e["key"]
            assert len(files[buffer]) == cursor, (buffer, len(files[buffer]), cursor)
            buffer, cursor, offset = buffer + 1, 0, 0
        data = files[buffer]
        assert (e["buffer"], e["offset"]) == (buffer, offset), e["key"]
        assert e["desc"] == {
            "DataType": DML_VALUE[dml], "Flags": 0, "DimensionCount": len(sizes), "Sizes": sizes,
            "Strides": strides, "TotalTensorSizeInBytes": total, "GuaranteedBaseOffsetAlignment": alignment,
        }, e["key"]
        assert data[cursor:offset] == bytes(offset - cursor), "the gap before an entry must be zeros"
        chunk = data[offset : offset + total]
        assert chunk == dmlbridge.prepare(array, target=target, min_dims=min_dims).data.tobytes(), e["key"]
        assert chunk == reference.prepare(array, target=ref, min_dims=min_dims)["data"], e["key"]
        cursor = offset + total
    assert buffer == len(files) - 1 and len(files[buffer]) == cursor
    assert doc["total_size"] == sum(map(len, files))
    return doc


PER_CHANNEL = {"Conv": {2}, "ConvTranspose": {2}, "BatchNormalization": {1, 2, 3, 4}, "InstanceNormalization": {1, 2}}
FORMAT_6_INPUTS = {**PER_CHANNEL, **{op: {1, 2} for op in ("Conv", "ConvTranspose")}, "Gather": {0}, "Gemm": {2},
                   "MatMul": {1}}  # the inputs whose layouts format 6 knew


def as_format_6_entry(entry: dict[str, Any], min_dims: int) -> dict[str, Any]:
    """An entry of format 7 as format 6 wrote it: its consumers with only ``node``, ``op_type`` and ``input``, and
    the ``dims`` (or ``sizes``, which format 7 calls ``output_sizes``) of format 6's layout inputs; an entry that only
    inputs of layouts new in format 7 lay out has format 6's leading layout, and one that a format-6 layout input reads
    beside a consumer that wants nothing is "mixed" (format 6 took every consumer as binding it)."""
    old = copy.deepcopy(entry)
    if not any("reads_on" in c for c in entry.get("consumers", [])):
        return old  # (format 6 already: no consumer, or none of format 7's fields)
    consumers, new, named = [], False, ""
    for c in old.get("consumers", []):
        six = c["input"] in FORMAT_6_INPUTS.get(c["op_type"], ()) and c["reads_on"] == "gpu"
        new = new or (not six and c.get("layout") is not None)
        kept = {k: c[k] for k in ("node", "op_type", "input")}
        if six and "dims" in c:
            kept["dims"] = c["dims"]
        if six and "output_sizes" in c and all(isinstance(size, int) for size in c["output_sizes"]):
            kept["sizes"] = c["output_sizes"]
        if six and "output_sizes" in c and "sizes" not in kept:  # (format 6 names no free size)
            named = c["op_type"]
        consumers.append(kept)
    if consumers:
        old["consumers"] = consumers
    laid_out = [c for c in entry.get("consumers", []) if c.get("layout") is not None
                and c["input"] in FORMAT_6_INPUTS.get(c["op_type"], ())]
    if laid_out and len(laid_out) < len(consumers) and old["desc"] is not None:
        # format 6 read every consumer as binding the constant: one that wants nothing makes it "mixed"
        assert len(laid_out) == 1, entry["key"]
        shown = ", ".join(f"{c['op_type']} input {c['input']}: "
                          f"{old.get('padding', 'leading') if c in laid_out else 'its ONNX layout'}"
                          for c in entry["consumers"])
        old["padding"] = "mixed"
        old["layout_note"] = f"its consumers want different layouts ({shown}): it keeps its ONNX layout"
        new = True
    if new:
        assert old.get("padding") == "mixed" or not any(c["input"] in FORMAT_6_INPUTS.get(c["op_type"], ())
                                                        for c in consumers), entry["key"]
        padding, note = old.pop("padding", None), old.pop("layout_note", None)
        if padding == "mixed":
            old["padding"], old["layout_note"] = padding, note
        if old["desc"] is not None:
            own = list(old["shape"]) or [1]
            sizes = [1] * max(0, min_dims - len(own)) + own
            strides = [2 * math.prod(sizes[k + 1 :]) for k in range(len(sizes))] \
                if old["conversion"] == "emulate" else None
            old["desc"].update(DimensionCount=len(sizes), Sizes=sizes, Strides=strides)
    elif old.get("layout_note") and "consumers" in old:  # (format 6's notes: of its own layout inputs only)
        old["layout_note"] = old["layout_note"].replace(
            "; bind each consumer's own desc (consumers[i].as_ctypes())", "")
    if named and old.get("padding", "leading") != "mixed":  # (a Gemm's C or a MatMul's B at a dim_param: format 6's)
        old["layout_note"] = (
            "GEMM wants a Gemm's C at the output's sizes [M, N], which the model does not declare: it keeps its ONNX "
            "layout; broadcast it at run time (dmlbridge.broadcast_desc)" if named == "Gemm" else
            "GEMM wants a MatMul's B at the output's batch sizes, which the model does not declare: it has the "
            "output's rank; where a batch size is more than 1, broadcast it at run time (dmlbridge.broadcast_desc)")
    return old


def as_older_entry(entry: dict[str, Any], min_dims: int, version: int) -> dict[str, Any]:
    """An entry of the current format (7) as format ``version`` (5 to 1) wrote it, by that version's rule, worked
    out here from the entry's shape and consumers (the same bytes, offset and TotalTensorSizeInBytes: only Sizes,
    Strides, DimensionCount, padding and the consumers' fields differ):

    - format 5: consumers record ``dims`` of per-channel inputs only and no ``sizes``; no ``layout_note``; a 1-D
      constant that only per-channel inputs of one ``dims`` read is ``[1, C, 1, ...]`` of ``dims`` dimensions (or
      ``min_dims`` when more), "channel"; "mixed" when some consumers are per-channel and the others not, or their
      ``dims`` differ; every other entry leading 1s to ``min_dims`` (no spatial, rank or broadcast layout);
    - formats 4 and 3: no ``dims``, and a 1-D constant padded on the channel axis only when ``min_dims`` is 2 or
      more, to ``min_dims`` dimensions;
    - before format 3, every entry padded with leading 1s."""
    old = as_format_6_entry(entry, min_dims)
    old.pop("layout_note", None)
    consumers = [{k: v for k, v in c.items()
                  if k not in ("dims", "sizes") or (k == "dims" and version >= 5
                                                    and c["input"] in PER_CHANNEL.get(c["op_type"], ()))}
                 for c in old.get("consumers", [])]
    if consumers:
        old["consumers"] = consumers
    per = {c["input"] in PER_CHANNEL.get(c["op_type"], ()) for c in consumers}
    counts = {c.get("dims") for c in consumers}
    padding, count = "leading", min_dims
    if len(old["shape"]) == 1 and consumers and version >= 5:
        padding = ("channel" if len(counts) == 1 else "mixed") if per == {True} else "mixed" if True in per else \
            "leading"
        count = max(min_dims, next(iter(counts)) or 4) if padding == "channel" else min_dims
    elif len(old["shape"]) == 1 and consumers and min_dims >= 2 and version >= 3:
        padding = "channel" if per == {True} else "mixed" if True in per else "leading"
    old.pop("padding", None)
    if padding != "leading":
        old["padding"] = padding
    if old["desc"] is not None:
        own = list(old["shape"]) or [1]
        sizes = [1, own[0]] + [1] * (count - 2) if padding == "channel" else [1] * max(0, min_dims - len(own)) + own
        strides = old["desc"]["Strides"]
        if old["conversion"] == "emulate":  # (emulated 64-bit integers: twice the packed strides)
            strides = [2 * math.prod(sizes[k + 1 :]) for k in range(len(sizes))]
        elif strides is not None:  # (a broadcast entry of format 6: the ONNX shape's own bytes, packed)
            strides = None
        old["desc"].update(DimensionCount=len(sizes), Sizes=sizes, Strides=strides)
    return old


def older(doc: dict[str, Any], version: int) -> dict[str, Any]:
    """A manifest ``doc`` (the current format) as format ``version`` (6, 5, 4, 3, 2 or 1; one buffer before 4)
    wrote it: entries laid out by that version's rule (:func:`as_format_6_entry`, :func:`as_older_entry`)."""
    old = copy.deepcopy(doc)
    old["format_version"] = version
    old.pop("upload", None)  # (format 7's; a conversion with buffers not uploaded has no older form)
    assert all(buffer.pop("uploaded", True) for buffer in old.get("buffers", ())), "convert with upload='all'"
    old.pop("graph_inputs", None)  # (format 7's)
    if version == 6:
        old["entries"] = [as_format_6_entry(e, old["min_dims"]) for e in old["entries"]]
        return old
    old["entries"] = [as_older_entry(e, old["min_dims"], version) for e in old["entries"]]
    if version == 5:
        return old
    if version == 4:  # (format 5 added each quantized record's operator)
        for record in old["quantized"]:
            del record["operator"]
        return old
    del old["max_buffer_bytes"], old["quantized"]
    for entry in old["entries"]:
        assert entry.pop("buffer") in (0, None)
    if version == 3:
        del old["selection"]["drop_quantized_sources"]
    if version <= 2:
        del old["selection"]
        old["entries"] = [{k: v for k, v in e.items() if k not in ("clamped", "padding", "consumers")}
                          for e in old["entries"]]
    if version == 1:
        buffer = old.pop("buffers")[0]
        del old["conversion_id"]
        old.update(bin_fingerprint=buffer["fingerprint"], bin_sha256=buffer["sha256"],
                   source={"name": old["source"]["name"], "size": old["source"]["size"]})
    return old


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values (NaN equal to NaN of any payload; -0 apart from +0), for any of the types above."""
    if a.dtype.kind == "V" and a.dtype.name.startswith(("int", "uint")):
        return bool(np.array_equal(a.astype(np.int64), b.astype(np.int64)))
    if a.dtype.kind in "biu":
        return bool(np.array_equal(a, b))
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    return bool(np.all((np.isnan(fa) & np.isnan(fb)) | ((fa == fb) & (np.signbit(fa) == np.signbit(fb)))))


def no_temp_files(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if "dmlbridge-tmp" in p.name]


# --- round trips ----------------------------------------------------------------------------------------------

TARGETS = {
    "default": (Target(), 1, 256),
    "fl62-min4-align16": (Target(feature_level="6.2"), 4, 16),
    "no64-emulate": (Target(supported={"FLOAT32", "FLOAT16", "INT32", "UINT32", "INT16", "UINT16", "INT8",
                                       "UINT8", "FLOAT64"}), 2, 64),
    "no64-narrow-lossy": (Target(supported={"FLOAT32", "INT32", "UINT32", "INT8", "UINT8", "INT16", "UINT16"},
                                 int64="narrow", allow_lossy=True), 1, 4096),
    "no-float16-no-double": (Target(feature_level="6.3", supported={"FLOAT32", "INT64", "UINT64", "INT32",
                                                                    "UINT32", "INT8", "UINT8", "INT4", "UINT4"}),
                             3, 32),
    "fl2": (Target(feature_level="2.0"), 5, 128),
}


def small_model(count: int, seed: int) -> tuple[Any, dict[str, np.ndarray]]:
    """``count`` small constants of many types and forms, in initializers and Constant nodes."""
    rng = np.random.default_rng(seed)
    kinds = [
        lambda: rng.standard_normal(rng.integers(1, 9)).astype(np.float32),
        lambda: rng.standard_normal((2, 3)).astype(np.float16),
        lambda: rng.integers(-128, 128, 5).astype(np.int8),
        lambda: rng.integers(-(2**40), 2**40, 3).astype(np.int64),
        lambda: rng.standard_normal(2),
        lambda: rng.integers(0, 2, 7).astype(bool),
        lambda: np.array(rng.standard_normal(), np.float32),
        lambda: np.zeros((0, 2), np.float32),
        lambda: rng.integers(0, 60000, 4).astype(np.uint16),
    ]
    expected: dict[str, np.ndarray] = {}
    inits, nodes = [], []
    for i in range(count):
        array = kinds[int(rng.integers(len(kinds)))]()
        typed = bool(rng.integers(2))
        tensor = (helper.make_tensor(f"t{i}", helper.np_dtype_to_tensor_dtype(array.dtype), array.shape,
                                     array.reshape(-1).tolist())
                  if typed and array.dtype in (np.float32, np.float64, np.int64) else numpy_helper.from_array(array))
        tensor.name = f"t{i}"
        if rng.integers(2):
            inits.append(tensor)
            expected[f"t{i}"] = array
        else:
            nodes.append(helper.make_node("Constant", [], [f"c{i}"], value=tensor))
            expected[f"c{i}"] = array
    expected = {k: expected[k] for k in [t.name for t in inits] + [n.output[0] for n in nodes]}
    return model_of(inits, nodes), expected


def buffer_path(prefix: Path | str) -> Path:
    """The buffer file that ``PREFIX.json`` lists (one, beside the manifest)."""
    manifest = Path(str(prefix) + ".json")
    (buffer,) = json.loads(manifest.read_text())["buffers"]
    return manifest.parent / buffer["file"]


def buffer_paths(prefix: Path | str) -> list[Path]:
    """The buffer files that ``PREFIX.json`` lists, in order."""
    manifest = Path(str(prefix) + ".json")
    return [manifest.parent / buffer["file"] for buffer in json.loads(manifest.read_text())["buffers"]]


def outputs(prefix: Path | str) -> tuple[bytes, str]:
    """A conversion's buffer bytes (every buffer's, in order) and its manifest text with what differs between two
    runs of one conversion (the random conversion id, and the buffer files' names, which hold the prefix and the
    id) made neutral; the manifest gives each buffer's size."""
    manifest = Path(str(prefix) + ".json").read_text()
    conversion_id = json.loads(manifest)["conversion_id"]
    neutral = re.sub(r'"file": "[^"]*"', '"file": "<buffer>"', manifest.replace(conversion_id, "<id>"))
    return b"".join(path.read_bytes() for path in buffer_paths(prefix)), neutral


def output_names(directory: Path) -> list[str]:
    """The file names in ``directory`` but retired buffer files (:func:`retired_names`), each buffer file's
    conversion id written as ``ID``."""
    return sorted(re.sub(r"\.[0-9a-f]{16}\.", ".ID.", name) for name in os.listdir(directory)
                  if not name.endswith(".dmlbridge-old"))


def retired_names(directory: Path) -> list[str]:
    """The retired buffer files in ``directory`` (``.PREFIX.ID.N.bin.dmlbridge-old``, as earlier versions left a
    previous conversion's; conversions and ``dmlbridge.clean`` remove them), by their names before retirement."""
    return sorted(name[1 : -len(".dmlbridge-old")] for name in os.listdir(directory)
                  if name.endswith(".dmlbridge-old"))


def layout_facts(consumers: Any) -> tuple[Consumer, ...]:
    """What format 6 recorded of each consumer (node, op type, input, ``dims`` and output sizes), as a
    :class:`Consumer`: what the layout tests of format 6 compare (where each is read, and its operator and layout,
    have tests of their own)."""
    kept = []
    for c in consumers:
        facts = c if isinstance(c, Consumer) else c.facts()
        six = facts.layout_rule(6) is not None
        kept.append(Consumer(c.node, c.op_type, c.input, *((c.dims, c.output_sizes) if six else (None, None))))
    return tuple(kept)
