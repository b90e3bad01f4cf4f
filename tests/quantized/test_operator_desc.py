"""``QuantizedWeight.operator_desc(output=...)``: the DEQUANTIZE or ELEMENT_WISE_DEQUANTIZE_LINEAR desc a record
names, read back through its pointers (each input the part's own desc, the output the one given, all alive as long
as the desc is), in every form ``output`` takes, and every refusal. tests/gpu/test_consumer_operators.py runs these
descs on DirectML."""

from __future__ import annotations

import ctypes
import gc
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from onnx import helper, numpy_helper
from quantized_models import dq_model

import dmlbridge
import dmlbridge.gpu
from dmlbridge import DML_BUFFER_TENSOR_DESC, DML_TENSOR_DESC, InvalidArgumentError, Target

SIZES_BLOCKED, SIZES_SPLIT = (4, 48), (4, 3, 16)


def matmul_nbits() -> dmlbridge.QuantizedWeight:
    """A 4-bit MatMulNBits (N=4, K=48, blocks of 16, no zero points) planned at the default level (DEQUANTIZE)."""
    b = numpy_helper.from_array(np.arange(4 * 3 * 8, dtype=np.uint8).reshape(4, 3, 8), "B")
    s = numpy_helper.from_array(np.full((4, 3), 0.5, np.float32), "S")
    node = helper.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], "mm", domain="com.microsoft", K=48, N=4, bits=4,
                            block_size=16)
    return dmlbridge.plan_model(helper.make_model(helper.make_graph([node], "g", [], [], [b, s]))).quantized["mm"]


def per_axis(level: str) -> dmlbridge.QuantizedWeight:
    """An INT8 DequantizeLinear per axis 1, [3, 5], planned at ``level``."""
    x = np.arange(-7, 8, dtype=np.int8).reshape(3, 5)
    model, _ = dq_model(x, np.linspace(0.5, 2.5, 5, dtype=np.float32), np.arange(5, dtype=np.int8), axis=1)
    return dmlbridge.plan_model(model, target=Target(level)).quantized["dq"]


def fields(address: int) -> dict[str, Any]:
    """The DML_BUFFER_TENSOR_DESC a DML_TENSOR_DESC at ``address`` points at, as ``desc()`` gives a part's."""
    tensor = DML_TENSOR_DESC.from_address(address)
    assert tensor.Type == 1 and tensor.Desc
    buffer = DML_BUFFER_TENSOR_DESC.from_address(tensor.Desc)
    count = buffer.DimensionCount
    return {"DataType": buffer.DataType, "Flags": buffer.Flags, "DimensionCount": count,
            "Sizes": list(buffer.Sizes[:count]), "Strides": list(buffer.Strides[:count]) if buffer.Strides else None,
            "TotalTensorSizeInBytes": buffer.TotalTensorSizeInBytes,
            "GuaranteedBaseOffsetAlignment": buffer.GuaranteedBaseOffsetAlignment}


def output(sizes: tuple[int, ...], dtype: Any = np.float32) -> dmlbridge.PreparedTensor:
    return dmlbridge.prepare(np.zeros(sizes, dtype))


def test_dequantize_takes_the_blocked_form_by_default_and_the_split_form_when_asked() -> None:
    q = matmul_nbits()
    assert q.operator == "DEQUANTIZE"
    for form, parts, sizes in [(None, q.blocked_form(), SIZES_BLOCKED), ("blocked", q.blocked_form(), SIZES_BLOCKED),
                               ("split", q.parts(), SIZES_SPLIT)]:
        out = output(sizes).as_ctypes_tensor_desc()
        desc = q.operator_desc(output=out, form=form)
        struct = desc.struct
        assert isinstance(desc, dmlbridge.gpu.DML_OPERATOR_DESC) and desc.Desc == ctypes.addressof(struct)
        assert isinstance(struct, dmlbridge.gpu.DML_DEQUANTIZE_OPERATOR_DESC)
        assert desc.Type == dmlbridge.gpu.DmlOperatorType.DEQUANTIZE == 174
        assert struct.QuantizationType == dmlbridge.gpu.DmlQuantizationType.SCALE_ZERO_POINT
        assert struct.QuantizationTensorCount == 2
        weight, scales, zero_points = parts
        assert fields(struct.InputTensor) == weight.desc()
        step = ctypes.sizeof(DML_TENSOR_DESC)
        assert fields(struct.QuantizationTensors) == scales.desc()
        assert fields(struct.QuantizationTensors + step) == zero_points.desc()
        assert struct.OutputTensor == ctypes.addressof(out)  # (the caller's own desc, kept alive by the struct)
        assert fields(struct.OutputTensor)["Sizes"] == list(sizes)


def test_element_wise_dequantize_linear_takes_the_split_form() -> None:
    q = per_axis("6.2")
    assert q.operator == "ELEMENT_WISE_DEQUANTIZE_LINEAR" and q.sizes == (3, 5)
    desc = q.operator_desc(output=output((3, 5)))
    struct = desc.struct
    assert desc.Type == dmlbridge.gpu.DmlOperatorType.ELEMENT_WISE_DEQUANTIZE_LINEAR == 34
    assert isinstance(struct, dmlbridge.gpu.DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC)
    weight, scales, zero_points = q.parts()
    assert (fields(struct.InputTensor), fields(struct.ScaleTensor), fields(struct.ZeroPointTensor)) == \
        (weight.desc(), scales.desc(), zero_points.desc())
    assert scales.strides == (0, 1)  # (one scale per index of axis 1, repeated down axis 0)
    # At 6.3 the same node is DEQUANTIZE's, in the split form (it is not blocked).
    at_6_3 = per_axis("6.3").operator_desc(output=output((3, 5)))
    assert at_6_3.Type == 174 and fields(at_6_3.struct.InputTensor) == weight.desc()


def test_every_form_of_output_gives_the_same_desc_and_is_left_as_it_was() -> None:
    q = matmul_nbits()
    prepared = output(SIZES_BLOCKED)
    buffer = prepared.as_ctypes()
    before = bytes(buffer)
    forms = [prepared, prepared.buffer_desc, buffer, prepared.as_ctypes_tensor_desc()]
    descs = [q.operator_desc(output=form) for form in forms]  # (held: the fields are read through their pointers)
    assert all(fields(desc.struct.OutputTensor) == prepared.desc() for desc in descs)
    assert bytes(buffer) == before


def test_the_desc_keeps_everything_it_points_at_alive() -> None:
    """Each pointer's target is an object the desc holds (so ctypes cannot free it while the desc lives): the
    struct, each DML_TENSOR_DESC, the array of two, and each buffer desc behind them (and so their Sizes and
    Strides, which a DML_BUFFER_TENSOR_DESC holds)."""
    q = matmul_nbits()
    want = [part.desc() for part in q.blocked_form()]
    desc = q.operator_desc(output=output(SIZES_BLOCKED))
    del q
    gc.collect()
    struct = desc.struct
    assert desc.Desc == ctypes.addressof(struct)
    held = struct.kept
    assert sorted(held) == ["InputTensor", "OutputTensor", "QuantizationTensors"]
    for name in ("InputTensor", "OutputTensor"):
        tensor = held[name]
        assert getattr(struct, name) == ctypes.addressof(tensor) and tensor.Desc == ctypes.addressof(tensor.buffer_desc)
    array = held["QuantizationTensors"]
    assert struct.QuantizationTensors == ctypes.addressof(array) and len(array) == 2
    assert [slot.Desc for slot in array] == [ctypes.addressof(buffer) for buffer in array.buffer_descs]
    step = ctypes.sizeof(DML_TENSOR_DESC)
    assert [fields(struct.InputTensor), fields(struct.QuantizationTensors),
            fields(struct.QuantizationTensors + step)] == want


def test_refusals() -> None:
    q = matmul_nbits()
    good = output(SIZES_BLOCKED)
    owned = good.buffer_desc._replace(flags=1)
    short = good.buffer_desc._replace(total_tensor_size_in_bytes=good.total_tensor_size_in_bytes - 4)
    cases: list[tuple[Any, dict[str, Any], str]] = [
        (q, {"output": output(SIZES_SPLIT)}, r"DEQUANTIZE writes Sizes \[4, 48\] \(the weight's\) and DataType "
                                             r"FLOAT32 \(the scales'\), but output= has Sizes \[4, 3, 16\]"),
        (q, {"output": good, "form": "split"}, r"writes Sizes \[4, 3, 16\].*output= has Sizes \[4, 48\]"),
        (q, {"output": output(SIZES_BLOCKED, np.float16)}, r"but output= has Sizes \[4, 48\] and DataType FLOAT16; "
                                                            r"give .*np\.float32"),
        (q, {"output": owned}, "flagged DML_TENSOR_FLAG_OWNED_BY_DML"),
        (q, {"output": short}, "has TotalTensorSizeInBytes 764; its sizes and strides need 768"),
        (q, {"output": np.zeros(SIZES_BLOCKED, np.float32)}, "output= is a ndarray; give a DML_TENSOR_DESC"),
        (q, {"output": None}, "output= is a NoneType"),
        (q, {"output": dmlbridge.PreparedTensor}, "output= is a type"),
        (q, {"output": DML_TENSOR_DESC(1, None)}, "does not hold the buffer desc it points at"),
        (q, {"output": DML_BUFFER_TENSOR_DESC()}, "output= has no Sizes"),
        (q, {"output": good, "form": "packed"}, "form must be 'blocked', 'split' or None"),
        (per_axis("6.2"), {"output": output((3, 5)), "form": "blocked"}, "not blocked on its last axis"),
        (replace(q, operator=None), {"output": good}, "manifest of format 1 to 4.*convert the model again"),
        (replace(q, weight=None, skipped="(a reason)"), {"output": good}, r"was skipped \(\(a reason\)\)"),
    ]
    for record, arguments, message in cases:
        with pytest.raises(InvalidArgumentError, match=message):
            record.operator_desc(**arguments)
    with pytest.raises(TypeError):
        q.operator_desc(good)  # type: ignore[misc]  # (output is a keyword)
