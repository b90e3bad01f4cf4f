"""The operator desc structs of ``dmlbridge.gpu`` as a program uses them, off the GPU: a pointer field takes the
ctypes object it points at and keeps it alive (what a temporary ``as_ctypes_tensor_desc()`` needs), an address or
None replaces it, and ``operator_desc`` and ``operator_desc_array`` keep the structs they point at alive.
(tests/gpu/test_graph_structs.py holds their layouts to DirectML.h.)"""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

import dmlbridge
import dmlbridge.gpu as gpu


def _tensor(values: np.ndarray) -> dmlbridge.DML_TENSOR_DESC:
    return dmlbridge.prepare(values).as_ctypes_tensor_desc()


def _sizes(address: int) -> list[int]:
    """The Sizes of the DML_TENSOR_DESC at ``address``, read through its pointers as DirectML reads them."""
    tensor = dmlbridge.DML_TENSOR_DESC.from_address(address)
    buffer = dmlbridge.DML_BUFFER_TENSOR_DESC.from_address(tensor.Desc)
    return list(buffer.Sizes[: buffer.DimensionCount])


def test_a_pointer_field_keeps_a_temporary_desc_alive() -> None:
    add = gpu.DML_ELEMENT_WISE_ADD_OPERATOR_DESC(ATensor=_tensor(np.ones((2, 3), np.float32)),
                                                 BTensor=_tensor(np.ones(3, np.float32)))
    add.OutputTensor = _tensor(np.ones((4, 5), np.float32))
    gc.collect()
    assert sorted(add.kept) == ["ATensor", "BTensor", "OutputTensor"]
    assert (_sizes(add.ATensor), _sizes(add.BTensor), _sizes(add.OutputTensor)) == ([2, 3], [3], [4, 5])
    assert add.ATensor == ctypes.addressof(add.kept["ATensor"])


def test_an_address_or_none_replaces_what_the_field_kept() -> None:
    a = _tensor(np.ones(2, np.float32))
    relu = gpu.DML_ACTIVATION_RELU_OPERATOR_DESC(a, a)  # (positional fields too)
    assert relu.kept == {"InputTensor": a, "OutputTensor": a}
    relu.InputTensor = None
    relu.OutputTensor = ctypes.addressof(a)
    assert relu.InputTensor is None and relu.OutputTensor == ctypes.addressof(a) and relu.kept == {}
    with pytest.raises(TypeError):
        relu.InputTensor = "a desc"  # (ctypes' own refusal: not a ctypes object, an address or None)


def test_arrays_and_fused_activations_are_kept_and_other_fields_are_plain() -> None:
    strides = (ctypes.c_uint32 * 2)(2, 2)
    conv = gpu.DML_CONVOLUTION_OPERATOR_DESC(Mode=gpu.DmlConvolutionMode.CROSS_CORRELATION, DimensionCount=2,
                                             Strides=strides, GroupCount=1,
                                             FusedActivation=gpu.operator_desc(gpu.DML_ACTIVATION_RELU_OPERATOR_DESC()))
    assert list((ctypes.c_uint32 * 2).from_address(conv.Strides)) == [2, 2]
    fused = gpu.DML_OPERATOR_DESC.from_address(conv.FusedActivation)
    assert fused.Type == gpu.DmlOperatorType.ACTIVATION_RELU
    assert (conv.Mode, conv.DimensionCount, conv.GroupCount) == (1, 2, 1)
    assert sorted(conv.kept) == ["FusedActivation", "Strides"]
    clip = gpu.DML_ELEMENT_WISE_CLIP1_OPERATOR_DESC(MinMaxDataType=dmlbridge.DmlDataType.INT8,
                                                    Min=gpu.DML_SCALAR_UNION(Int8=-3), Max=gpu.DML_SCALAR_UNION(Int8=3))
    assert (clip.Min.Int8, clip.Max.Int8, clip.kept) == (-3, 3, {})  # (held by value, not pointed at)


def test_operator_desc_keeps_its_struct_and_an_array_keeps_every_one() -> None:
    desc = gpu.operator_desc(gpu.DML_GEMM_OPERATOR_DESC(Alpha=2.0, Beta=1.0))
    gc.collect()
    assert desc.Type == gpu.DmlOperatorType.GEMM and int(gpu.DmlOperatorType.GEMM) == 54
    assert gpu.DML_GEMM_OPERATOR_DESC.from_address(desc.Desc).Alpha == 2.0 and desc.struct.Alpha == 2.0
    array = gpu.operator_desc_array([gpu.DML_ACTIVATION_SIGMOID_OPERATOR_DESC(),
                                     gpu.DML_ACTIVATION_TANH_OPERATOR_DESC()])
    gc.collect()
    assert [d.Type for d in array] == [gpu.DmlOperatorType.ACTIVATION_SIGMOID, gpu.DmlOperatorType.ACTIVATION_TANH]
    assert [d.Desc for d in array] == [ctypes.addressof(s) for s in array.structs]  # type: ignore[attr-defined]


def test_the_operator_numbers() -> None:
    assert len(gpu.DmlOperatorType.__members__) == 179 and len(gpu.DmlOperatorType) == 178  # (SCATTER an alias)
    assert gpu.DmlOperatorType["SCATTER"] is gpu.DmlOperatorType.SCATTER_ELEMENTS
    assert [int(gpu.DmlOperatorType[name]) for name in ("INVALID", "ELEMENT_WISE_ADD", "ONE_HOT", "UNFOLD")] == [
        0, 4, 95, 177]
    assert str(gpu.DmlOperatorType.GEMM) == "GEMM" and gpu.DmlOperatorType.__module__ == "dmlbridge.gpu"
