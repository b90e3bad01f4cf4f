"""prepare and prepare_into take an ONNX TensorProto directly."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import dmlbridge


def test_prepare_raw_and_typed_tensorprotos() -> None:
    uint4 = numpy_helper.from_array(np.array([1, 2, 3, 4, 5], ml_dtypes.uint4), "w")
    assert dmlbridge.prepare(uint4).data.tobytes() == bytes([0x21, 0x43, 0x05, 0x00])
    typed = helper.make_tensor("x", onnx.TensorProto.FLOAT, [3], [1.0, 2.0, -0.5])
    t = dmlbridge.prepare(typed, min_dims=4)
    assert t.sizes == (1, 1, 1, 3)
    assert t.data.tobytes() == bytes.fromhex("0000803f" "00000040" "000000bf")
    buf = bytearray(64)
    dmlbridge.prepare_into(buf, 32, helper.make_tensor("b", onnx.TensorProto.BOOL, [2], [True, False]))
    assert bytes(buf[32:36]) == b"\x01\x00\x00\x00"


def test_external_tensor_needs_its_directory() -> None:
    tensor = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "w.bin"
    with pytest.raises(dmlbridge.ExternalDataError, match="tensor_to_array"):
        dmlbridge.prepare(tensor)


def test_malformed_tensorproto_is_a_dmlbridge_error() -> None:
    tensor = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    tensor.raw_data = tensor.raw_data[:-1]
    with pytest.raises(dmlbridge.TensorProtoError, match="'w'"):
        dmlbridge.prepare(tensor)
