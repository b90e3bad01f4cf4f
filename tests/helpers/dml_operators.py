"""The DirectML operators the consumer suite builds (tests/gpu/test_consumer_operators.py), from ``dmlbridge.gpu``'s
desc structs (tests/gpu/test_graph_structs.py checks every size, offset and operator number against the header with
the Windows compiler), and :class:`Operator`, which keeps a desc and everything it points at alive.

A tensor is given as a ``DML_TENSOR_DESC`` (an entry's or a prepared tensor's ``as_ctypes_tensor_desc()``), or
None for an optional tensor left out.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import dmlbridge
import dmlbridge.gpu

STRUCTS: dict[str, type[dmlbridge.gpu.OperatorStruct]] = {
    name: getattr(dmlbridge.gpu, f"DML_{name}_OPERATOR_DESC") for name in (
        "CONVOLUTION", "GEMM", "GATHER", "BATCH_NORMALIZATION", "ELEMENT_WISE_ADD", "ELEMENT_WISE_MULTIPLY",
        "DEQUANTIZE", "ELEMENT_WISE_DEQUANTIZE_LINEAR", "ELEMENT_WISE_SUBTRACT", "ELEMENT_WISE_DIVIDE",
        "ELEMENT_WISE_MAX", "ELEMENT_WISE_IF", "ACTIVATION_PARAMETERIZED_RELU", "ACTIVATION_SIGMOID", "ACTIVATION_TANH",
        "MEAN_VARIANCE_NORMALIZATION1", "GRU", "LSTM", "JOIN", "CONVOLUTION_INTEGER", "MATRIX_MULTIPLY_INTEGER",
        "ELEMENT_WISE_QUANTIZE_LINEAR", "ELEMENT_WISE_POW", "ELEMENT_WISE_MIN", "ELEMENT_WISE_LOGICAL_EQUALS",
        "ELEMENT_WISE_LOGICAL_GREATER_THAN", "ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL",
        "ELEMENT_WISE_LOGICAL_LESS_THAN", "ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL", "ELEMENT_WISE_LOGICAL_AND",
        "ELEMENT_WISE_LOGICAL_OR", "ELEMENT_WISE_LOGICAL_XOR", "SLICE1", "MEAN_VARIANCE_NORMALIZATION2", "RNN",
        "QUANTIZED_LINEAR_CONVOLUTION", "QUANTIZED_LINEAR_MATRIX_MULTIPLY", "MULTIHEAD_ATTENTION",
    )
}
"""The desc struct of each operator the suite builds (``dmlbridge.gpu``'s ``DML_<key>_OPERATOR_DESC``)."""
OPERATOR_TYPES = {name: int(dmlbridge.gpu.DmlOperatorType[name]) for name in ["ELEMENT_WISE_IDENTITY", *STRUCTS]}
CONVOLUTION_MODE_CROSS_CORRELATION = dmlbridge.gpu.DmlConvolutionMode.CROSS_CORRELATION  # (ONNX's Conv)
CONVOLUTION_DIRECTION_FORWARD = dmlbridge.gpu.DmlConvolutionDirection.FORWARD
MATRIX_TRANSFORM_NONE, MATRIX_TRANSFORM_TRANSPOSE = (dmlbridge.gpu.DmlMatrixTransform.NONE,
                                                     dmlbridge.gpu.DmlMatrixTransform.TRANSPOSE)
QUANTIZATION_TYPE_SCALE_ZERO_POINT = dmlbridge.gpu.DmlQuantizationType.SCALE_ZERO_POINT


class Operator:
    """One operator desc (``desc``: its DML_OPERATOR_DESC) and everything it points at, alive together."""

    def __init__(self, name: str, **fields: Any) -> None:
        self.name = name
        self.keep: list[Any] = []
        values = {key: self._value(value) for key, value in fields.items()}
        self.struct = STRUCTS[name](**values)
        self.desc = dmlbridge.gpu.DML_OPERATOR_DESC(OPERATOR_TYPES[name], ctypes.addressof(self.struct))

    def _value(self, value: Any) -> Any:
        if value is None or isinstance(value, (int, float)):
            return value
        if isinstance(value, tuple):  # a UINT array (strides, paddings, ...)
            array = (ctypes.c_uint32 * len(value))(*value)
            self.keep.append(array)
            return ctypes.addressof(array)
        self.keep.append(value)  # a DML_TENSOR_DESC, or an array of them
        return ctypes.addressof(value)


def convolution(x: Any, w: Any, b: Any, y: Any, *, strides: Sequence[int], dilations: Sequence[int],
                start: Sequence[int], end: Sequence[int], groups: int) -> Operator:
    """CONVOLUTION, cross-correlation forward (ONNX's Conv), over ``len(strides)`` spatial dimensions."""
    count = len(strides)
    return Operator("CONVOLUTION", InputTensor=x, FilterTensor=w, BiasTensor=b, OutputTensor=y,
                    Mode=CONVOLUTION_MODE_CROSS_CORRELATION, Direction=CONVOLUTION_DIRECTION_FORWARD,
                    DimensionCount=count, Strides=tuple(strides), Dilations=tuple(dilations), StartPadding=tuple(start),
                    EndPadding=tuple(end), OutputPadding=(0,) * count, GroupCount=groups)


def gemm(a: Any, b: Any, c: Any, y: Any, *, trans_a: bool = False, trans_b: bool = False, alpha: float = 1.0,
         beta: float = 1.0) -> Operator:
    """GEMM: alpha · op(A) · op(B) + beta · C."""
    return Operator("GEMM", ATensor=a, BTensor=b, CTensor=c, OutputTensor=y,
                    TransA=MATRIX_TRANSFORM_TRANSPOSE if trans_a else MATRIX_TRANSFORM_NONE,
                    TransB=MATRIX_TRANSFORM_TRANSPOSE if trans_b else MATRIX_TRANSFORM_NONE, Alpha=alpha, Beta=beta)


def multihead_attention(y: Any, *, heads: int, scale: float, query: Any = None, key: Any = None, value: Any = None,
                        stacked: Any = None, bias: Any = None) -> Operator:
    """MULTIHEAD_ATTENTION of ``heads`` heads, no mask: the query, key and value apart, or ``stacked`` ([B, S, heads,
    3, head]); ``bias`` added to them first."""
    return Operator("MULTIHEAD_ATTENTION", QueryTensor=query, KeyTensor=key, ValueTensor=value,
                    StackedQueryKeyTensor=None, StackedKeyValueTensor=None, StackedQueryKeyValueTensor=stacked,
                    BiasTensor=bias, MaskTensor=None, RelativePositionBiasTensor=None, PastKeyTensor=None,
                    PastValueTensor=None, OutputTensor=y, OutputPresentKeyTensor=None, OutputPresentValueTensor=None,
                    Scale=scale, MaskFilterValue=-10000.0, HeadCount=heads,
                    MaskType=dmlbridge.gpu.DmlMultiheadAttentionMaskType.NONE)


def gather(data: Any, indices: Any, y: Any, *, axis: int, index_dimensions: int) -> Operator:
    return Operator("GATHER", InputTensor=data, IndicesTensor=indices, OutputTensor=y, Axis=axis,
                    IndexDimensions=index_dimensions)


def slice1(x: Any, y: Any, *, offsets: Sequence[int], sizes: Sequence[int], strides: Sequence[int]) -> Operator:
    """SLICE1 (ONNX's Slice): the window of ``sizes`` at ``offsets``, read every ``strides`` (positive here)."""
    return Operator("SLICE1", InputTensor=x, OutputTensor=y, DimensionCount=len(offsets),
                    InputWindowOffsets=tuple(offsets), InputWindowSizes=tuple(sizes), InputWindowStrides=tuple(strides))


def batch_normalization(x: Any, mean: Any, variance: Any, scale: Any, bias: Any, y: Any, *,
                        epsilon: float) -> Operator:
    return Operator("BATCH_NORMALIZATION", InputTensor=x, MeanTensor=mean, VarianceTensor=variance,
                    ScaleTensor=scale, BiasTensor=bias, OutputTensor=y, Spatial=1, Epsilon=epsilon)


def element_wise(name: str, a: Any, b: Any, y: Any) -> Operator:
    """An ELEMENT_WISE_* operator of two inputs A and B (ADD, MULTIPLY, SUBTRACT, DIVIDE, MAX, MIN, LOGICAL_*)."""
    return Operator(name, ATensor=a, BTensor=b, OutputTensor=y)


def pow_(x: Any, exponent: Any, y: Any) -> Operator:
    return Operator("ELEMENT_WISE_POW", InputTensor=x, ExponentTensor=exponent, OutputTensor=y, ScaleBias=None)


def join(inputs: Sequence[Any], y: Any, *, axis: int) -> Operator:
    """JOIN (ONNX's Concat) of ``inputs`` along ``axis``."""
    array = (dmlbridge.DML_TENSOR_DESC * len(inputs))(*inputs)
    return Operator("JOIN", InputCount=len(inputs), InputTensors=array, OutputTensor=y, Axis=axis)


def convolution_integer(x: Any, x_zero: Any, w: Any, w_zero: Any, y: Any, *, strides: Sequence[int],
                        dilations: Sequence[int], start: Sequence[int], end: Sequence[int], groups: int) -> Operator:
    """CONVOLUTION_INTEGER (ONNX's ConvInteger)."""
    return Operator("CONVOLUTION_INTEGER", InputTensor=x, InputZeroPointTensor=x_zero, FilterTensor=w,
                    FilterZeroPointTensor=w_zero, OutputTensor=y, DimensionCount=len(strides),
                    Strides=tuple(strides), Dilations=tuple(dilations), StartPadding=tuple(start),
                    EndPadding=tuple(end), GroupCount=groups)


def matrix_multiply_integer(a: Any, a_zero: Any, b: Any, b_zero: Any, y: Any) -> Operator:
    """MATRIX_MULTIPLY_INTEGER (ONNX's MatMulInteger)."""
    return Operator("MATRIX_MULTIPLY_INTEGER", ATensor=a, AZeroPointTensor=a_zero, BTensor=b, BZeroPointTensor=b_zero,
                    OutputTensor=y)


def quantize_linear(x: Any, scale: Any, zero_point: Any, y: Any) -> Operator:
    return Operator("ELEMENT_WISE_QUANTIZE_LINEAR", InputTensor=x, ScaleTensor=scale, ZeroPointTensor=zero_point,
                    OutputTensor=y)


def dequantize(x: Any, scales: Any, zero_points: Any, y: Any) -> Operator:
    """DEQUANTIZE, SCALE_ZERO_POINT: ``scales`` and ``zero_points`` are parts (anything with ``as_ctypes()``)."""
    array = dmlbridge.tensor_desc_array([scales, zero_points])
    return Operator("DEQUANTIZE", InputTensor=x, QuantizationType=QUANTIZATION_TYPE_SCALE_ZERO_POINT,
                    QuantizationTensorCount=2, QuantizationTensors=array, OutputTensor=y)


def dequantize_linear(x: Any, scale: Any, zero_point: Any, y: Any) -> Operator:
    return Operator("ELEMENT_WISE_DEQUANTIZE_LINEAR", InputTensor=x, ScaleTensor=scale, ZeroPointTensor=zero_point,
                    OutputTensor=y)


def mean_variance_normalization(x: Any, scale: Any, bias: Any, y: Any, *, axes: Sequence[int],
                                epsilon: float) -> Operator:
    """MEAN_VARIANCE_NORMALIZATION1 over ``axes`` (ONNX's LayerNormalization: the axes from ``axis`` on)."""
    return Operator("MEAN_VARIANCE_NORMALIZATION1", InputTensor=x, ScaleTensor=scale, BiasTensor=bias,
                    OutputTensor=y, AxisCount=len(axes), Axes=tuple(axes), NormalizeVariance=1, Epsilon=epsilon,
                    FusedActivation=None)


def mean_variance_normalization2(x: Any, scale: Any, bias: Any, y: Any, *, axes: Sequence[int], epsilon: float,
                                 use_mean: bool = True) -> Operator:
    """MEAN_VARIANCE_NORMALIZATION2 over ``axes``: ONNX Runtime's LayerNormalization, and with ``use_mean`` off its
    SimplifiedLayerNormalization (x / sqrt(mean(x^2) + epsilon))."""
    return Operator("MEAN_VARIANCE_NORMALIZATION2", InputTensor=x, ScaleTensor=scale, BiasTensor=bias,
                    OutputTensor=y, AxisCount=len(axes), Axes=tuple(axes), UseMean=int(use_mean), UseVariance=1,
                    Epsilon=epsilon, FusedActivation=None)


def quantized_linear_convolution(x: Any, x_scale: Any, x_zero: Any, w: Any, w_scale: Any, w_zero: Any, b: Any,
                                 y_scale: Any, y_zero: Any, y: Any, *, strides: Sequence[int],
                                 dilations: Sequence[int], start: Sequence[int], end: Sequence[int],
                                 groups: int) -> Operator:
    """QUANTIZED_LINEAR_CONVOLUTION (ONNX's QLinearConv)."""
    return Operator("QUANTIZED_LINEAR_CONVOLUTION", InputTensor=x, InputScaleTensor=x_scale,
                    InputZeroPointTensor=x_zero, FilterTensor=w, FilterScaleTensor=w_scale,
                    FilterZeroPointTensor=w_zero, BiasTensor=b, OutputScaleTensor=y_scale,
                    OutputZeroPointTensor=y_zero, OutputTensor=y, DimensionCount=len(strides),
                    Strides=tuple(strides), Dilations=tuple(dilations), StartPadding=tuple(start),
                    EndPadding=tuple(end), GroupCount=groups)


def quantized_linear_matrix_multiply(a: Any, a_scale: Any, a_zero: Any, b: Any, b_scale: Any, b_zero: Any,
                                     y_scale: Any, y_zero: Any, y: Any) -> Operator:
    """QUANTIZED_LINEAR_MATRIX_MULTIPLY (ONNX's QLinearMatMul)."""
    return Operator("QUANTIZED_LINEAR_MATRIX_MULTIPLY", ATensor=a, AScaleTensor=a_scale, AZeroPointTensor=a_zero,
                    BTensor=b, BScaleTensor=b_scale, BZeroPointTensor=b_zero, OutputScaleTensor=y_scale,
                    OutputZeroPointTensor=y_zero, OutputTensor=y)


def parameterized_relu(x: Any, slope: Any, y: Any) -> Operator:
    return Operator("ACTIVATION_PARAMETERIZED_RELU", InputTensor=x, SlopeTensor=slope, OutputTensor=y)


def if_(condition: Any, a: Any, b: Any, y: Any) -> Operator:
    return Operator("ELEMENT_WISE_IF", ConditionTensor=condition, ATensor=a, BTensor=b, OutputTensor=y)


RNN_DIRECTIONS = {"forward": dmlbridge.gpu.DmlRecurrentNetworkDirection.FORWARD,
                  "reverse": dmlbridge.gpu.DmlRecurrentNetworkDirection.BACKWARD,
                  "bidirectional": dmlbridge.gpu.DmlRecurrentNetworkDirection.BIDIRECTIONAL}


def gru(x: Any, w: Any, r: Any, b: Any, h0: Any, lengths: Any, y: Any, y_h: Any, *, direction: str,
        linear_before_reset: int) -> Operator:
    """GRU with ONNX's default activations (f = sigmoid, g = tanh) for each direction."""
    per_direction = ("ACTIVATION_SIGMOID", "ACTIVATION_TANH")
    names = per_direction * (2 if direction == "bidirectional" else 1)
    activations = [STRUCTS[name]() for name in names]  # (input and output null: DirectML's fused form)
    array = (dmlbridge.gpu.DML_OPERATOR_DESC * len(names))(
        *(dmlbridge.gpu.DML_OPERATOR_DESC(OPERATOR_TYPES[name], ctypes.addressof(struct))
          for name, struct in zip(names, activations, strict=True)))
    op = Operator("GRU", InputTensor=x, WeightTensor=w, RecurrenceTensor=r, BiasTensor=b, HiddenInitTensor=h0,
                  SequenceLengthsTensor=lengths, OutputSequenceTensor=y, OutputSingleTensor=y_h,
                  ActivationDescCount=len(names), ActivationDescs=array, Direction=RNN_DIRECTIONS[direction],
                  LinearBeforeReset=linear_before_reset)
    op.keep.extend(activations)
    return op


def rnn(x: Any, w: Any, r: Any, b: Any, h0: Any, lengths: Any, y: Any, y_h: Any, *, direction: str) -> Operator:
    """RNN with ONNX's default activation (tanh) for each direction."""
    names = ("ACTIVATION_TANH",) * (2 if direction == "bidirectional" else 1)
    activations = [STRUCTS[name]() for name in names]
    array = (dmlbridge.gpu.DML_OPERATOR_DESC * len(names))(
        *(dmlbridge.gpu.DML_OPERATOR_DESC(OPERATOR_TYPES[name], ctypes.addressof(struct))
          for name, struct in zip(names, activations, strict=True)))
    op = Operator("RNN", InputTensor=x, WeightTensor=w, RecurrenceTensor=r, BiasTensor=b, HiddenInitTensor=h0,
                  SequenceLengthsTensor=lengths, OutputSequenceTensor=y, OutputSingleTensor=y_h,
                  ActivationDescCount=len(names), ActivationDescs=array, Direction=RNN_DIRECTIONS[direction])
    op.keep.extend(activations)
    return op


def lstm(x: Any, w: Any, r: Any, b: Any, h0: Any, c0: Any, lengths: Any, p: Any, y: Any, y_h: Any, y_c: Any, *,
         direction: str) -> Operator:
    """LSTM with ONNX's default activations (f = sigmoid, g = h = tanh) for each direction, no clip, input and
    forget gates apart."""
    per_direction = ("ACTIVATION_SIGMOID", "ACTIVATION_TANH", "ACTIVATION_TANH")
    names = per_direction * (2 if direction == "bidirectional" else 1)
    activations = [STRUCTS[name]() for name in names]
    array = (dmlbridge.gpu.DML_OPERATOR_DESC * len(names))(
        *(dmlbridge.gpu.DML_OPERATOR_DESC(OPERATOR_TYPES[name], ctypes.addressof(struct))
          for name, struct in zip(names, activations, strict=True)))
    op = Operator("LSTM", InputTensor=x, WeightTensor=w, RecurrenceTensor=r, BiasTensor=b, HiddenInitTensor=h0,
                  CellMemInitTensor=c0, SequenceLengthsTensor=lengths, PeepholeTensor=p, OutputSequenceTensor=y,
                  OutputSingleTensor=y_h, OutputCellSingleTensor=y_c, ActivationDescCount=len(names),
                  ActivationDescs=array, Direction=RNN_DIRECTIONS[direction], ClipThreshold=0.0, UseClipThreshold=0,
                  CoupleInputForget=0)
    op.keep.extend(activations)
    return op
