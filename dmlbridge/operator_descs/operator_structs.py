"""DirectML operator descs as ctypes, laid out as DirectML.h declares them for 64-bit Windows, under its names:
``DML_OPERATOR_DESC``, :class:`OperatorStruct`, their base (each knows its ``DML_OPERATOR_TYPE`` and keeps what its
pointers point at alive), :func:`operator_desc` and :func:`operator_desc_array`, and the descs of the operators
dmlbridge's operator table binds constants to but the element-wise ones (``element_wise_structs``, beside it):
activations, convolutions, GEMM, GATHER, normalizations, recurrent networks, JOIN, the quantized and integer operators
and attention (tests/gpu/test_graph_structs.py checks each size and offset against the header).

    >>> desc = DML_GEMM_OPERATOR_DESC(Alpha=1.0, Beta=1.0)
    >>> operator_desc(desc).Type, ctypes.sizeof(desc)
    (54, 56)
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, ClassVar

from dmlbridge.operator_descs.operator_types import DmlOperatorType

__all__ = [
    "DML_ACTIVATION_PARAMETERIZED_RELU_OPERATOR_DESC", "DML_ACTIVATION_RELU_OPERATOR_DESC",
    "DML_ACTIVATION_SIGMOID_OPERATOR_DESC", "DML_ACTIVATION_TANH_OPERATOR_DESC",
    "DML_BATCH_NORMALIZATION_OPERATOR_DESC", "DML_CONVOLUTION_INTEGER_OPERATOR_DESC", "DML_CONVOLUTION_OPERATOR_DESC",
    "DML_DEQUANTIZE_OPERATOR_DESC", "DML_GATHER_OPERATOR_DESC", "DML_GEMM_OPERATOR_DESC", "DML_GRU_OPERATOR_DESC",
    "DML_JOIN_OPERATOR_DESC", "DML_LSTM_OPERATOR_DESC", "DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC",
    "DML_MEAN_VARIANCE_NORMALIZATION1_OPERATOR_DESC", "DML_MEAN_VARIANCE_NORMALIZATION2_OPERATOR_DESC",
    "DML_MULTIHEAD_ATTENTION_OPERATOR_DESC", "DML_OPERATOR_DESC",
    "DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC", "DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC",
    "DML_RNN_OPERATOR_DESC", "DML_SLICE1_OPERATOR_DESC", "OperatorStruct", "operator_desc", "operator_desc_array",
]

_P = ctypes.c_void_p  # every pointer: a DML_TENSOR_DESC, an array, a DML_OPERATOR_DESC, a DML_SCALE_BIAS
_U = ctypes.c_uint32  # UINT
_ENUM = _BOOL = ctypes.c_int32  # an enum (DML_CONVOLUTION_MODE, ...), a BOOL
_TARGETS = (ctypes.Structure, ctypes.Union, ctypes.Array)  # what a pointer field takes as the object it points at


class DML_OPERATOR_DESC(ctypes.Structure):  # noqa: N801 - the DirectML name
    """``DML_OPERATOR_DESC`` (DirectML.h): an operator's type (``DML_OPERATOR_TYPE``) and a pointer to its own desc
    struct (``DML_ELEMENT_WISE_ADD_OPERATOR_DESC``, ...); the ones ``operator_desc()`` returns keep that struct alive
    (``.struct``), and one made here leaves it to the caller.

    Example:
        >>> import ctypes, dmlbridge.gpu
        >>> desc = dmlbridge.gpu.DML_OPERATOR_DESC(1, None)   # DML_OPERATOR_ELEMENT_WISE_IDENTITY, no desc yet
        >>> desc.Type, ctypes.sizeof(desc)
        (1, 16)
    """

    _fields_ = [("Type", ctypes.c_int32), ("Desc", ctypes.c_void_p)]

    struct: ctypes.Structure


class OperatorStruct(ctypes.Structure):
    """The base of every ``DML_*_OPERATOR_DESC`` here: ``OPERATOR_TYPE``, its ``DML_OPERATOR_TYPE``, and pointer
    fields that take the ctypes object they point at, a ``DML_TENSOR_DESC`` (a plan entry's or a prepared tensor's
    ``as_ctypes_tensor_desc()``), an array (``dmlbridge.tensor_desc_array``, ``(ctypes.c_uint32 * 2)(1, 1)``), a
    ``DML_OPERATOR_DESC`` or a ``DML_SCALE_BIAS``: the field holds its address and the struct keeps the object alive
    (``kept``, by field name). An address given as an int, or None for NULL, is stored as it is (what it points at
    is then the caller's to keep alive).

    Example:
        >>> import ctypes, numpy as np, dmlbridge, dmlbridge.gpu as gpu
        >>> x = dmlbridge.prepare(np.zeros((2, 3), np.float32)).as_ctypes_tensor_desc()
        >>> desc = gpu.DML_ACTIVATION_RELU_OPERATOR_DESC(InputTensor=x, OutputTensor=x)
        >>> desc.InputTensor == ctypes.addressof(x), desc.kept["OutputTensor"] is x
        (True, True)
        >>> isinstance(desc, gpu.OperatorStruct), desc.OPERATOR_TYPE
        (True, <DmlOperatorType.ACTIVATION_RELU: 44>)
    """

    OPERATOR_TYPE: ClassVar[DmlOperatorType]
    kept: dict[str, Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.__dict__["kept"] = {}
        super().__init__(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        if any(field == name and kind is _P for field, kind, *_ in self._fields_):
            kept = self.__dict__.setdefault("kept", {})
            kept.pop(name, None)
            if isinstance(value, _TARGETS):
                kept[name] = value
                value = ctypes.addressof(value)
        super().__setattr__(name, value)


def operator_desc(struct: OperatorStruct) -> DML_OPERATOR_DESC:
    """The ``DML_OPERATOR_DESC`` of an operator desc struct: its ``OPERATOR_TYPE`` and its address. The result
    keeps the struct alive (``.struct``), and the struct what its pointers point at; a copy of the result (into a
    ctypes array, say) does not: :func:`operator_desc_array` makes arrays of them.

    Example:
        >>> import numpy as np, dmlbridge
        >>> a = dmlbridge.prepare(np.ones(4, np.float32)).as_ctypes_tensor_desc()
        >>> prelu = DML_ACTIVATION_PARAMETERIZED_RELU_OPERATOR_DESC(InputTensor=a, SlopeTensor=a, OutputTensor=a)
        >>> desc = operator_desc(prelu)
        >>> desc.Type, desc.Desc == ctypes.addressof(prelu), desc.struct is prelu
        (42, True, True)
    """
    desc = DML_OPERATOR_DESC(struct.OPERATOR_TYPE, ctypes.addressof(struct))
    desc.struct = struct
    return desc


def operator_desc_array(structs: Sequence[OperatorStruct]) -> ctypes.Array[DML_OPERATOR_DESC]:
    """A ctypes array of ``DML_OPERATOR_DESC``, one per struct, for the fields that take one
    (``ActivationDescs`` of LSTM, GRU and RNN). The array keeps every struct alive (``.structs``).

    Example:
        >>> sigmoid, tanh = DML_ACTIVATION_SIGMOID_OPERATOR_DESC(), DML_ACTIVATION_TANH_OPERATOR_DESC()
        >>> activations = operator_desc_array([sigmoid, tanh])
        >>> gru = DML_GRU_OPERATOR_DESC(ActivationDescCount=len(activations), ActivationDescs=activations)
        >>> [desc.Type for desc in activations], gru.kept["ActivationDescs"] is activations
        ([47, 51], True)
    """
    array = (DML_OPERATOR_DESC * len(structs))(
        *(DML_OPERATOR_DESC(struct.OPERATOR_TYPE, ctypes.addressof(struct)) for struct in structs))
    array.structs = list(structs)  # type: ignore[attr-defined]  # what the descs point at, kept alive
    return array


class DML_ACTIVATION_PARAMETERIZED_RELU_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ACTIVATION_PARAMETERIZED_RELU_OPERATOR_DESC``: Output = Input where it is >= 0, else Slope · Input (ONNX's
    PRelu).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ACTIVATION_PARAMETERIZED_RELU_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ACTIVATION_PARAMETERIZED_RELU: 42>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ACTIVATION_PARAMETERIZED_RELU
    _fields_ = [("InputTensor", _P), ("SlopeTensor", _P), ("OutputTensor", _P)]


class DML_ACTIVATION_SIGMOID_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ACTIVATION_SIGMOID_OPERATOR_DESC``: Output = 1 / (1 + e^-Input); as a fused activation (an RNN's, a GEMM's)
    with both tensors None.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ACTIVATION_SIGMOID_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ACTIVATION_SIGMOID: 47>, 16)
    """

    OPERATOR_TYPE = DmlOperatorType.ACTIVATION_SIGMOID
    _fields_ = [("InputTensor", _P), ("OutputTensor", _P)]


class DML_ACTIVATION_TANH_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ACTIVATION_TANH_OPERATOR_DESC``: Output = tanh(Input); as a fused activation with both tensors None.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ACTIVATION_TANH_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ACTIVATION_TANH: 51>, 16)
    """

    OPERATOR_TYPE = DmlOperatorType.ACTIVATION_TANH
    _fields_ = [("InputTensor", _P), ("OutputTensor", _P)]


class DML_ACTIVATION_RELU_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ACTIVATION_RELU_OPERATOR_DESC``: Output = max(Input, 0); as a fused activation with both tensors None.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ACTIVATION_RELU_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ACTIVATION_RELU: 44>, 16)
    """

    OPERATOR_TYPE = DmlOperatorType.ACTIVATION_RELU
    _fields_ = [("InputTensor", _P), ("OutputTensor", _P)]


class DML_CONVOLUTION_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_CONVOLUTION_OPERATOR_DESC``: A convolution (ONNX's Conv: ``CROSS_CORRELATION``, ``FORWARD``; ConvTranspose:
    ``BACKWARD``) over ``DimensionCount`` spatial dimensions; ``Strides``, ``Dilations``, ``StartPadding``,
    ``EndPadding`` and ``OutputPadding`` are UINT arrays of that many.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_CONVOLUTION_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.CONVOLUTION: 53>, 104)
    """

    OPERATOR_TYPE = DmlOperatorType.CONVOLUTION
    _fields_ = [("InputTensor", _P), ("FilterTensor", _P), ("BiasTensor", _P), ("OutputTensor", _P), ("Mode", _ENUM),
                ("Direction", _ENUM), ("DimensionCount", _U), ("Strides", _P), ("Dilations", _P), ("StartPadding", _P),
                ("EndPadding", _P), ("OutputPadding", _P), ("GroupCount", _U), ("FusedActivation", _P)]


class DML_GEMM_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_GEMM_OPERATOR_DESC``: Output = Alpha · op(A) · op(B) + Beta · C, op a :class:`DmlMatrixTransform` (ONNX's
    Gemm and MatMul).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_GEMM_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.GEMM: 54>, 56)
    """

    OPERATOR_TYPE = DmlOperatorType.GEMM
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("CTensor", _P), ("OutputTensor", _P), ("TransA", _ENUM),
                ("TransB", _ENUM), ("Alpha", ctypes.c_float), ("Beta", ctypes.c_float), ("FusedActivation", _P)]


class DML_GATHER_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_GATHER_OPERATOR_DESC``: The slices of Input that Indices picks on ``Axis`` (ONNX's Gather: every tensor at
    one dimension count, ``IndexDimensions`` the indices' own).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_GATHER_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.GATHER: 67>, 32)
    """

    OPERATOR_TYPE = DmlOperatorType.GATHER
    _fields_ = [("InputTensor", _P), ("IndicesTensor", _P), ("OutputTensor", _P), ("Axis", _U), ("IndexDimensions", _U)]


class DML_SLICE1_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_SLICE1_OPERATOR_DESC``: the window of Input at ``InputWindowOffsets`` of ``InputWindowSizes``, read every
    ``InputWindowStrides`` (ONNX's Slice: its data bound, its starts, ends, axes and steps read on the CPU).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_SLICE1_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.SLICE1: 111>, 48)
    """

    OPERATOR_TYPE = DmlOperatorType.SLICE1
    _fields_ = [("InputTensor", _P), ("OutputTensor", _P), ("DimensionCount", _U), ("InputWindowOffsets", _P),
                ("InputWindowSizes", _P), ("InputWindowStrides", _P)]


class DML_BATCH_NORMALIZATION_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_BATCH_NORMALIZATION_OPERATOR_DESC``: (Input - Mean) / sqrt(Variance + Epsilon) · Scale + Bias, per channel
    (ONNX's BatchNormalization, ``Spatial`` 1).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_BATCH_NORMALIZATION_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.BATCH_NORMALIZATION: 72>, 64)
    """

    OPERATOR_TYPE = DmlOperatorType.BATCH_NORMALIZATION
    _fields_ = [("InputTensor", _P), ("MeanTensor", _P), ("VarianceTensor", _P), ("ScaleTensor", _P),
                ("BiasTensor", _P), ("OutputTensor", _P), ("Spatial", _BOOL), ("Epsilon", ctypes.c_float),
                ("FusedActivation", _P)]


class DML_MEAN_VARIANCE_NORMALIZATION1_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_MEAN_VARIANCE_NORMALIZATION1_OPERATOR_DESC``: Normalization over ``Axes`` (a UINT array of ``AxisCount``),
    then Scale and Bias (ONNX's LayerNormalization and InstanceNormalization).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_MEAN_VARIANCE_NORMALIZATION1_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.MEAN_VARIANCE_NORMALIZATION1: 115>, 64)
    """

    OPERATOR_TYPE = DmlOperatorType.MEAN_VARIANCE_NORMALIZATION1
    _fields_ = [("InputTensor", _P), ("ScaleTensor", _P), ("BiasTensor", _P), ("OutputTensor", _P), ("AxisCount", _U),
                ("Axes", _P), ("NormalizeVariance", _BOOL), ("Epsilon", ctypes.c_float), ("FusedActivation", _P)]


class DML_MEAN_VARIANCE_NORMALIZATION2_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_MEAN_VARIANCE_NORMALIZATION2_OPERATOR_DESC`` (feature level 6.3): Normalization over ``Axes``, the mean
    subtracted only with ``UseMean`` (ONNX Runtime's LayerNormalization, and SimplifiedLayerNormalization without
    it), then Scale and Bias.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_MEAN_VARIANCE_NORMALIZATION2_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.MEAN_VARIANCE_NORMALIZATION2: 171>, 72)
    """

    OPERATOR_TYPE = DmlOperatorType.MEAN_VARIANCE_NORMALIZATION2
    _fields_ = [("InputTensor", _P), ("ScaleTensor", _P), ("BiasTensor", _P), ("OutputTensor", _P), ("AxisCount", _U),
                ("Axes", _P), ("UseMean", _BOOL), ("UseVariance", _BOOL), ("Epsilon", ctypes.c_float),
                ("FusedActivation", _P)]


class DML_LSTM_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_LSTM_OPERATOR_DESC``: ONNX's LSTM: every tensor 4-D; ``ActivationDescs`` an array of ``DML_OPERATOR_DESC``
    (:func:`operator_desc_array`), three per direction.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_LSTM_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.LSTM: 77>, 120)
    """

    OPERATOR_TYPE = DmlOperatorType.LSTM
    _fields_ = [("InputTensor", _P), ("WeightTensor", _P), ("RecurrenceTensor", _P), ("BiasTensor", _P),
                ("HiddenInitTensor", _P), ("CellMemInitTensor", _P), ("SequenceLengthsTensor", _P),
                ("PeepholeTensor", _P), ("OutputSequenceTensor", _P), ("OutputSingleTensor", _P),
                ("OutputCellSingleTensor", _P), ("ActivationDescCount", _U), ("ActivationDescs", _P),
                ("Direction", _ENUM), ("ClipThreshold", ctypes.c_float), ("UseClipThreshold", _BOOL),
                ("CoupleInputForget", _BOOL)]


class DML_GRU_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_GRU_OPERATOR_DESC``: ONNX's GRU: every tensor 4-D; ``ActivationDescs`` an array of ``DML_OPERATOR_DESC``
    (:func:`operator_desc_array`), two per direction.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_GRU_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.GRU: 78>, 88)
    """

    OPERATOR_TYPE = DmlOperatorType.GRU
    _fields_ = [("InputTensor", _P), ("WeightTensor", _P), ("RecurrenceTensor", _P), ("BiasTensor", _P),
                ("HiddenInitTensor", _P), ("SequenceLengthsTensor", _P), ("OutputSequenceTensor", _P),
                ("OutputSingleTensor", _P), ("ActivationDescCount", _U), ("ActivationDescs", _P), ("Direction", _ENUM),
                ("LinearBeforeReset", _BOOL)]


class DML_RNN_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_RNN_OPERATOR_DESC``: ONNX's RNN: every tensor 4-D; ``ActivationDescs`` an array of ``DML_OPERATOR_DESC``
    (:func:`operator_desc_array`), one per direction.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_RNN_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.RNN: 76>, 88)
    """

    OPERATOR_TYPE = DmlOperatorType.RNN
    _fields_ = [("InputTensor", _P), ("WeightTensor", _P), ("RecurrenceTensor", _P), ("BiasTensor", _P),
                ("HiddenInitTensor", _P), ("SequenceLengthsTensor", _P), ("OutputSequenceTensor", _P),
                ("OutputSingleTensor", _P), ("ActivationDescCount", _U), ("ActivationDescs", _P), ("Direction", _ENUM)]


class DML_JOIN_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_JOIN_OPERATOR_DESC``: The ``InputCount`` tensors of ``InputTensors`` (``dmlbridge.tensor_desc_array``)
    joined on ``Axis`` (ONNX's Concat).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_JOIN_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.JOIN: 63>, 32)
    """

    OPERATOR_TYPE = DmlOperatorType.JOIN
    _fields_ = [("InputCount", _U), ("InputTensors", _P), ("OutputTensor", _P), ("Axis", _U)]


class DML_DEQUANTIZE_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_DEQUANTIZE_OPERATOR_DESC``: Input dequantized by ``QuantizationTensors`` (``dmlbridge.tensor_desc_array``)
    of a :class:`DmlQuantizationType` (MatMulNBits' blocked weights, ``UploadPlan.quantized``).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_DEQUANTIZE_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.DEQUANTIZE: 174>, 32)
    """

    OPERATOR_TYPE = DmlOperatorType.DEQUANTIZE
    _fields_ = [("InputTensor", _P), ("QuantizationType", _ENUM), ("QuantizationTensorCount", _U),
                ("QuantizationTensors", _P), ("OutputTensor", _P)]


class DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC``: ONNX's QLinearConv: a convolution of quantized tensors, each
    with its scale and zero point.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.QUANTIZED_LINEAR_CONVOLUTION: 120>, 128)
    """

    OPERATOR_TYPE = DmlOperatorType.QUANTIZED_LINEAR_CONVOLUTION
    _fields_ = [("InputTensor", _P), ("InputScaleTensor", _P), ("InputZeroPointTensor", _P), ("FilterTensor", _P),
                ("FilterScaleTensor", _P), ("FilterZeroPointTensor", _P), ("BiasTensor", _P), ("OutputScaleTensor", _P),
                ("OutputZeroPointTensor", _P), ("OutputTensor", _P), ("DimensionCount", _U), ("Strides", _P),
                ("Dilations", _P), ("StartPadding", _P), ("EndPadding", _P), ("GroupCount", _U)]


class DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC``: ONNX's QLinearMatMul: a matrix product of quantized
    tensors, each with its scale and zero point.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY: 118>, 72)
    """

    OPERATOR_TYPE = DmlOperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY
    _fields_ = [("ATensor", _P), ("AScaleTensor", _P), ("AZeroPointTensor", _P), ("BTensor", _P), ("BScaleTensor", _P),
                ("BZeroPointTensor", _P), ("OutputScaleTensor", _P), ("OutputZeroPointTensor", _P),
                ("OutputTensor", _P)]


class DML_CONVOLUTION_INTEGER_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_CONVOLUTION_INTEGER_OPERATOR_DESC``: ONNX's ConvInteger: a convolution of integers less their zero points,
    into INT32.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_CONVOLUTION_INTEGER_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.CONVOLUTION_INTEGER: 119>, 88)
    """

    OPERATOR_TYPE = DmlOperatorType.CONVOLUTION_INTEGER
    _fields_ = [("InputTensor", _P), ("InputZeroPointTensor", _P), ("FilterTensor", _P), ("FilterZeroPointTensor", _P),
                ("OutputTensor", _P), ("DimensionCount", _U), ("Strides", _P), ("Dilations", _P), ("StartPadding", _P),
                ("EndPadding", _P), ("GroupCount", _U)]


class DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC``: ONNX's MatMulInteger: a matrix product of integers less their zero
    points, into INT32.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.MATRIX_MULTIPLY_INTEGER: 117>, 40)
    """

    OPERATOR_TYPE = DmlOperatorType.MATRIX_MULTIPLY_INTEGER
    _fields_ = [("ATensor", _P), ("AZeroPointTensor", _P), ("BTensor", _P), ("BZeroPointTensor", _P),
                ("OutputTensor", _P)]


class DML_MULTIHEAD_ATTENTION_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_MULTIHEAD_ATTENTION_OPERATOR_DESC``: Attention of ``HeadCount`` heads (com.microsoft's Attention,
    MultiHeadAttention and GroupQueryAttention); the query, key and value given apart or stacked.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_MULTIHEAD_ATTENTION_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.MULTIHEAD_ATTENTION: 164>, 128)
    """

    OPERATOR_TYPE = DmlOperatorType.MULTIHEAD_ATTENTION
    _fields_ = [("QueryTensor", _P), ("KeyTensor", _P), ("ValueTensor", _P), ("StackedQueryKeyTensor", _P),
                ("StackedKeyValueTensor", _P), ("StackedQueryKeyValueTensor", _P), ("BiasTensor", _P),
                ("MaskTensor", _P), ("RelativePositionBiasTensor", _P), ("PastKeyTensor", _P), ("PastValueTensor", _P),
                ("OutputTensor", _P), ("OutputPresentKeyTensor", _P), ("OutputPresentValueTensor", _P),
                ("Scale", ctypes.c_float), ("MaskFilterValue", ctypes.c_float), ("HeadCount", _U), ("MaskType", _ENUM)]

