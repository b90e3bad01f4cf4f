"""From Python to the GPU: a Direct3D 12 and DirectML device, the ``Target`` it is, a conversion uploaded into it
and each tensor's binding, through the standard library's ctypes (Windows only: it imports anywhere, and its
calls raise GpuUnavailableError elsewhere).

May import: ``plan`` and below. DirectML's operator descs (``DML_GEMM_OPERATOR_DESC``, ...) are defined in
``operator_descs``, below ``quantized``, which builds the dequantize desc of a record, and are public here.

    >>> import dmlbridge.gpu
    >>> {"create_device", "target_of", "upload", "upload_tensors"} <= set(dmlbridge.gpu.__all__)
    True
"""

from __future__ import annotations

from dmlbridge.errors import ComError, DeviceRemovedError, GpuError, GpuOutOfMemoryError, GpuUnavailableError
from dmlbridge.gpu.device import Device, target_of
from dmlbridge.gpu.dispatch import run_compiled, run_operator
from dmlbridge.gpu.graph import InputEdge, IntermediateEdge, OutputEdge, run_graph
from dmlbridge.gpu.resources import DEFAULT_STAGING_BYTES
from dmlbridge.gpu.runtime import create_device
from dmlbridge.gpu.structs import DML_BINDING_DESC, DML_OPERATOR_DESC
from dmlbridge.gpu.upload import UploadedPlan, UploadedTensors, upload, upload_tensors
from dmlbridge.operator_descs.element_wise_structs import (
    DML_ELEMENT_WISE_ADD1_OPERATOR_DESC,
    DML_ELEMENT_WISE_ADD_OPERATOR_DESC,
    DML_ELEMENT_WISE_BIT_AND_OPERATOR_DESC,
    DML_ELEMENT_WISE_BIT_OR_OPERATOR_DESC,
    DML_ELEMENT_WISE_BIT_SHIFT_LEFT_OPERATOR_DESC,
    DML_ELEMENT_WISE_BIT_SHIFT_RIGHT_OPERATOR_DESC,
    DML_ELEMENT_WISE_BIT_XOR_OPERATOR_DESC,
    DML_ELEMENT_WISE_CLIP1_OPERATOR_DESC,
    DML_ELEMENT_WISE_CLIP_OPERATOR_DESC,
    DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC,
    DML_ELEMENT_WISE_DIVIDE_OPERATOR_DESC,
    DML_ELEMENT_WISE_IF_OPERATOR_DESC,
    DML_ELEMENT_WISE_LOGICAL_AND_OPERATOR_DESC,
    DML_ELEMENT_WISE_LOGICAL_EQUALS_OPERATOR_DESC,
    DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OPERATOR_DESC,
    DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL_OPERATOR_DESC,
    DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OPERATOR_DESC,
    DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL_OPERATOR_DESC,
    DML_ELEMENT_WISE_LOGICAL_OR_OPERATOR_DESC,
    DML_ELEMENT_WISE_LOGICAL_XOR_OPERATOR_DESC,
    DML_ELEMENT_WISE_MAX_OPERATOR_DESC,
    DML_ELEMENT_WISE_MEAN_OPERATOR_DESC,
    DML_ELEMENT_WISE_MIN_OPERATOR_DESC,
    DML_ELEMENT_WISE_MODULUS_FLOOR_OPERATOR_DESC,
    DML_ELEMENT_WISE_MODULUS_TRUNCATE_OPERATOR_DESC,
    DML_ELEMENT_WISE_MULTIPLY_OPERATOR_DESC,
    DML_ELEMENT_WISE_POW_OPERATOR_DESC,
    DML_ELEMENT_WISE_QUANTIZE_LINEAR_OPERATOR_DESC,
    DML_ELEMENT_WISE_SUBTRACT_OPERATOR_DESC,
    DML_SCALAR_UNION,
    DML_SCALE_BIAS,
)
from dmlbridge.operator_descs.operator_structs import (
    DML_ACTIVATION_PARAMETERIZED_RELU_OPERATOR_DESC,
    DML_ACTIVATION_RELU_OPERATOR_DESC,
    DML_ACTIVATION_SIGMOID_OPERATOR_DESC,
    DML_ACTIVATION_TANH_OPERATOR_DESC,
    DML_BATCH_NORMALIZATION_OPERATOR_DESC,
    DML_CONVOLUTION_INTEGER_OPERATOR_DESC,
    DML_CONVOLUTION_OPERATOR_DESC,
    DML_DEQUANTIZE_OPERATOR_DESC,
    DML_GATHER_OPERATOR_DESC,
    DML_GEMM_OPERATOR_DESC,
    DML_GRU_OPERATOR_DESC,
    DML_JOIN_OPERATOR_DESC,
    DML_LSTM_OPERATOR_DESC,
    DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC,
    DML_MEAN_VARIANCE_NORMALIZATION1_OPERATOR_DESC,
    DML_MEAN_VARIANCE_NORMALIZATION2_OPERATOR_DESC,
    DML_MULTIHEAD_ATTENTION_OPERATOR_DESC,
    DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC,
    DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC,
    DML_RNN_OPERATOR_DESC,
    DML_SLICE1_OPERATOR_DESC,
    OperatorStruct,
    operator_desc,
    operator_desc_array,
)
from dmlbridge.operator_descs.operator_types import (
    DmlConvolutionDirection,
    DmlConvolutionMode,
    DmlExecutionFlags,
    DmlMatrixTransform,
    DmlMultiheadAttentionMaskType,
    DmlOperatorType,
    DmlQuantizationType,
    DmlRecurrentNetworkDirection,
)

__all__ = [  # noqa: RUF022 (grouped by concept, not sorted)
    # The device
    "create_device",
    "Device",
    "target_of",
    # Uploads
    "upload",
    "upload_tensors",
    "UploadedPlan",
    "UploadedTensors",
    "DEFAULT_STAGING_BYTES",
    # Operators
    "run_operator",
    "run_compiled",
    # Graphs
    "run_graph",
    "InputEdge",
    "IntermediateEdge",
    "OutputEdge",
    # DirectML's structs as ctypes
    "DML_BINDING_DESC",
    "DML_OPERATOR_DESC",
    # DirectML's operators: their numbers, their descs' enums and structs, and a struct's DML_OPERATOR_DESC
    "DmlOperatorType",
    "DmlConvolutionDirection",
    "DmlConvolutionMode",
    "DmlExecutionFlags",
    "DmlMatrixTransform",
    "DmlMultiheadAttentionMaskType",
    "DmlQuantizationType",
    "DmlRecurrentNetworkDirection",
    "OperatorStruct",
    "operator_desc",
    "operator_desc_array",
    "DML_ACTIVATION_PARAMETERIZED_RELU_OPERATOR_DESC",
    "DML_ACTIVATION_RELU_OPERATOR_DESC",
    "DML_ACTIVATION_SIGMOID_OPERATOR_DESC",
    "DML_ACTIVATION_TANH_OPERATOR_DESC",
    "DML_BATCH_NORMALIZATION_OPERATOR_DESC",
    "DML_CONVOLUTION_INTEGER_OPERATOR_DESC",
    "DML_CONVOLUTION_OPERATOR_DESC",
    "DML_DEQUANTIZE_OPERATOR_DESC",
    "DML_ELEMENT_WISE_ADD1_OPERATOR_DESC",
    "DML_ELEMENT_WISE_ADD_OPERATOR_DESC",
    "DML_ELEMENT_WISE_BIT_AND_OPERATOR_DESC",
    "DML_ELEMENT_WISE_BIT_OR_OPERATOR_DESC",
    "DML_ELEMENT_WISE_BIT_SHIFT_LEFT_OPERATOR_DESC",
    "DML_ELEMENT_WISE_BIT_SHIFT_RIGHT_OPERATOR_DESC",
    "DML_ELEMENT_WISE_BIT_XOR_OPERATOR_DESC",
    "DML_ELEMENT_WISE_CLIP1_OPERATOR_DESC",
    "DML_ELEMENT_WISE_CLIP_OPERATOR_DESC",
    "DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC",
    "DML_ELEMENT_WISE_DIVIDE_OPERATOR_DESC",
    "DML_ELEMENT_WISE_IF_OPERATOR_DESC",
    "DML_ELEMENT_WISE_LOGICAL_AND_OPERATOR_DESC",
    "DML_ELEMENT_WISE_LOGICAL_EQUALS_OPERATOR_DESC",
    "DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OPERATOR_DESC",
    "DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL_OPERATOR_DESC",
    "DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OPERATOR_DESC",
    "DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL_OPERATOR_DESC",
    "DML_ELEMENT_WISE_LOGICAL_OR_OPERATOR_DESC",
    "DML_ELEMENT_WISE_LOGICAL_XOR_OPERATOR_DESC",
    "DML_ELEMENT_WISE_MAX_OPERATOR_DESC",
    "DML_ELEMENT_WISE_MEAN_OPERATOR_DESC",
    "DML_ELEMENT_WISE_MIN_OPERATOR_DESC",
    "DML_ELEMENT_WISE_MODULUS_FLOOR_OPERATOR_DESC",
    "DML_ELEMENT_WISE_MODULUS_TRUNCATE_OPERATOR_DESC",
    "DML_ELEMENT_WISE_MULTIPLY_OPERATOR_DESC",
    "DML_ELEMENT_WISE_POW_OPERATOR_DESC",
    "DML_ELEMENT_WISE_QUANTIZE_LINEAR_OPERATOR_DESC",
    "DML_ELEMENT_WISE_SUBTRACT_OPERATOR_DESC",
    "DML_GATHER_OPERATOR_DESC",
    "DML_GEMM_OPERATOR_DESC",
    "DML_GRU_OPERATOR_DESC",
    "DML_JOIN_OPERATOR_DESC",
    "DML_LSTM_OPERATOR_DESC",
    "DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC",
    "DML_MEAN_VARIANCE_NORMALIZATION1_OPERATOR_DESC",
    "DML_MEAN_VARIANCE_NORMALIZATION2_OPERATOR_DESC",
    "DML_MULTIHEAD_ATTENTION_OPERATOR_DESC",
    "DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC",
    "DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC",
    "DML_RNN_OPERATOR_DESC",
    "DML_SLICE1_OPERATOR_DESC",
    "DML_SCALAR_UNION",
    "DML_SCALE_BIAS",
    # Errors
    "GpuError",
    "GpuUnavailableError",
    "ComError",
    "GpuOutOfMemoryError",
    "DeviceRemovedError",
]

for _name in __all__:  # public classes show the name users import them by
    _value = globals()[_name]
    if isinstance(_value, type) and _value.__module__.startswith(("dmlbridge.gpu.", "dmlbridge.operator_descs.")):
        _value.__module__ = "dmlbridge.gpu"
del _name, _value
