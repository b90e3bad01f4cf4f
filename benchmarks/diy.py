"""The "do it yourself" converters a user writes today: load the model, decode each constant, pad and write it.

Written the way a user would, with onnx (``onnx.load`` with external data, ``numpy_helper.to_array``) and with
onnx_ir (``ir.load``, ``Tensor.tobytes``): each constant's bytes at a 256-byte-aligned offset of one .bin file,
padded to 4 bytes, and a small JSON manifest. Small floats become float16 and 4-bit integers stay packed, as
DirectML wants them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, BinaryIO

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

ALIGNMENT = 256
_SMALL_FLOATS = {
    np.dtype(t)
    for t in (
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2,
        ml_dtypes.float8_e5m2fnuz,
        ml_dtypes.float4_e2m1fn,
    )
}
_FOUR_BIT = {np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)}


def _dml_bytes(array: np.ndarray) -> bytes:
    """The bytes DirectML wants for a decoded array (the common types only: this is glue, not a library)."""
    if array.dtype in _SMALL_FLOATS:
        return array.astype(np.float16).tobytes()
    if array.dtype in _FOUR_BIT:
        return numpy_helper._pack_4bitx2(array).tobytes()
    if array.dtype == np.bool_:
        return array.astype(np.uint8).tobytes()
    if array.dtype == np.dtype(ml_dtypes.bfloat16):
        return array.astype(np.float32).tobytes()
    return array.tobytes()


class _Writer:
    """Appends tensors at aligned offsets and remembers where each went."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.offset = 0
        self.entries: list[dict[str, Any]] = []

    def add(self, name: str, dtype: str, shape: list[int], data: bytes) -> None:
        pad = -self.offset % ALIGNMENT
        if pad:
            self.file.write(bytes(pad))
            self.offset += pad
        self.entries.append({"name": name, "dtype": dtype, "shape": shape, "offset": self.offset})
        self.file.write(data)
        tail = -len(data) % 4
        if tail:
            self.file.write(bytes(tail))
        self.offset += len(data) + tail


def _onnx_constants(graph: onnx.GraphProto) -> Iterator[tuple[str, onnx.TensorProto]]:
    yield from ((t.name, t) for t in graph.initializer)
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    yield node.output[0], attr.t


def convert_with_onnx(model_path: str, out_prefix: str) -> int:
    """onnx.load (external data loaded into memory), to_array, pad, write. Returns the .bin size."""
    model = onnx.load(model_path)
    with open(out_prefix + ".bin", "wb") as f:
        writer = _Writer(f)
        for name, tensor in _onnx_constants(model.graph):
            array = numpy_helper.to_array(tensor)
            writer.add(name, str(array.dtype), list(array.shape), _dml_bytes(array))
    with open(out_prefix + ".json", "w") as f:
        json.dump(writer.entries, f)
    return writer.offset


def convert_with_onnx_ir(model_path: str, out_prefix: str) -> int:
    """ir.load (external data memory-mapped), Tensor.tobytes (4-bit already packed), pad, write."""
    import onnx_ir as ir

    small = {
        ir.DataType.FLOAT8E4M3FN,
        ir.DataType.FLOAT8E4M3FNUZ,
        ir.DataType.FLOAT8E5M2,
        ir.DataType.FLOAT8E5M2FNUZ,
        ir.DataType.FLOAT4E2M1,
    }
    model = ir.load(model_path)
    tensors: list[tuple[str, Any]] = [(name, v.const_value) for name, v in model.graph.initializers.items()]
    for node in model.graph:
        if node.op_type == "Constant" and "value" in node.attributes:
            tensors.append((node.outputs[0].name or "", node.attributes["value"].as_tensor()))
    with open(out_prefix + ".bin", "wb") as f:
        writer = _Writer(f)
        for name, tensor in tensors:
            if tensor is None:
                continue
            if tensor.dtype in small:
                data = tensor.numpy().astype(np.float16).tobytes()
            elif tensor.dtype == ir.DataType.BOOL:
                data = tensor.numpy().astype(np.uint8).tobytes()
            else:
                data = tensor.tobytes()
            writer.add(name, tensor.dtype.name, [int(d) for d in tensor.shape], data)
    with open(out_prefix + ".json", "w") as f:
        json.dump(writer.entries, f)
    return writer.offset
