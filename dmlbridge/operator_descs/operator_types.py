"""DirectML's operator numbers, every ``DML_OPERATOR_TYPE`` of DirectML.h as :class:`DmlOperatorType`, and the
enums the fields of operator descs take (a convolution's mode and direction, a matrix transform, ...).

tests/gpu/test_graph_structs.py holds every value to the header with the Windows compiler.

    >>> DmlOperatorType.GEMM, DmlOperatorType["ELEMENT_WISE_ADD"].value, DmlConvolutionMode.CROSS_CORRELATION.value
    (<DmlOperatorType.GEMM: 54>, 4, 1)
"""

from __future__ import annotations

import enum

__all__ = [
    "DmlConvolutionDirection", "DmlConvolutionMode", "DmlExecutionFlags", "DmlMatrixTransform",
    "DmlMultiheadAttentionMaskType", "DmlOperatorType", "DmlQuantizationType", "DmlRecurrentNetworkDirection",
]


class DmlOperatorType(enum.IntEnum):
    """``DML_OPERATOR_TYPE``: every operator of DirectML.h (DirectX-Headers' copy in tools/directml/include), by
    its name without ``DML_OPERATOR_``: a ``DML_OPERATOR_DESC``'s ``Type``. ``SCATTER`` is the header's alias of
    ``SCATTER_ELEMENTS``, so the operators after it are one less than counting the names gives.

    Example:
        >>> import dmlbridge.gpu
        >>> t = dmlbridge.gpu.DmlOperatorType.ELEMENT_WISE_ADD
        >>> t, int(t), str(t), dmlbridge.gpu.DmlOperatorType.SCATTER.name
        (<DmlOperatorType.ELEMENT_WISE_ADD: 4>, 4, 'ELEMENT_WISE_ADD', 'SCATTER_ELEMENTS')
    """

    INVALID = 0
    ELEMENT_WISE_IDENTITY = 1
    ELEMENT_WISE_ABS = 2
    ELEMENT_WISE_ACOS = 3
    ELEMENT_WISE_ADD = 4
    ELEMENT_WISE_ASIN = 5
    ELEMENT_WISE_ATAN = 6
    ELEMENT_WISE_CEIL = 7
    ELEMENT_WISE_CLIP = 8
    ELEMENT_WISE_COS = 9
    ELEMENT_WISE_DIVIDE = 10
    ELEMENT_WISE_EXP = 11
    ELEMENT_WISE_FLOOR = 12
    ELEMENT_WISE_LOG = 13
    ELEMENT_WISE_LOGICAL_AND = 14
    ELEMENT_WISE_LOGICAL_EQUALS = 15
    ELEMENT_WISE_LOGICAL_GREATER_THAN = 16
    ELEMENT_WISE_LOGICAL_LESS_THAN = 17
    ELEMENT_WISE_LOGICAL_NOT = 18
    ELEMENT_WISE_LOGICAL_OR = 19
    ELEMENT_WISE_LOGICAL_XOR = 20
    ELEMENT_WISE_MAX = 21
    ELEMENT_WISE_MEAN = 22
    ELEMENT_WISE_MIN = 23
    ELEMENT_WISE_MULTIPLY = 24
    ELEMENT_WISE_POW = 25
    ELEMENT_WISE_CONSTANT_POW = 26
    ELEMENT_WISE_RECIP = 27
    ELEMENT_WISE_SIN = 28
    ELEMENT_WISE_SQRT = 29
    ELEMENT_WISE_SUBTRACT = 30
    ELEMENT_WISE_TAN = 31
    ELEMENT_WISE_THRESHOLD = 32
    ELEMENT_WISE_QUANTIZE_LINEAR = 33
    ELEMENT_WISE_DEQUANTIZE_LINEAR = 34
    ACTIVATION_ELU = 35
    ACTIVATION_HARDMAX = 36
    ACTIVATION_HARD_SIGMOID = 37
    ACTIVATION_IDENTITY = 38
    ACTIVATION_LEAKY_RELU = 39
    ACTIVATION_LINEAR = 40
    ACTIVATION_LOG_SOFTMAX = 41
    ACTIVATION_PARAMETERIZED_RELU = 42
    ACTIVATION_PARAMETRIC_SOFTPLUS = 43
    ACTIVATION_RELU = 44
    ACTIVATION_SCALED_ELU = 45
    ACTIVATION_SCALED_TANH = 46
    ACTIVATION_SIGMOID = 47
    ACTIVATION_SOFTMAX = 48
    ACTIVATION_SOFTPLUS = 49
    ACTIVATION_SOFTSIGN = 50
    ACTIVATION_TANH = 51
    ACTIVATION_THRESHOLDED_RELU = 52
    CONVOLUTION = 53
    GEMM = 54
    REDUCE = 55
    AVERAGE_POOLING = 56
    LP_POOLING = 57
    MAX_POOLING = 58
    ROI_POOLING = 59
    SLICE = 60
    CAST = 61
    SPLIT = 62
    JOIN = 63
    PADDING = 64
    VALUE_SCALE_2D = 65
    UPSAMPLE_2D = 66
    GATHER = 67
    SPACE_TO_DEPTH = 68
    DEPTH_TO_SPACE = 69
    TILE = 70
    TOP_K = 71
    BATCH_NORMALIZATION = 72
    MEAN_VARIANCE_NORMALIZATION = 73
    LOCAL_RESPONSE_NORMALIZATION = 74
    LP_NORMALIZATION = 75
    RNN = 76
    LSTM = 77
    GRU = 78
    ELEMENT_WISE_SIGN = 79
    ELEMENT_WISE_IS_NAN = 80
    ELEMENT_WISE_ERF = 81
    ELEMENT_WISE_SINH = 82
    ELEMENT_WISE_COSH = 83
    ELEMENT_WISE_TANH = 84
    ELEMENT_WISE_ASINH = 85
    ELEMENT_WISE_ACOSH = 86
    ELEMENT_WISE_ATANH = 87
    ELEMENT_WISE_IF = 88
    ELEMENT_WISE_ADD1 = 89
    ACTIVATION_SHRINK = 90
    MAX_POOLING1 = 91
    MAX_UNPOOLING = 92
    DIAGONAL_MATRIX = 93
    SCATTER_ELEMENTS = 94
    SCATTER = 94  # an alias of SCATTER_ELEMENTS (DirectML.h keeps the old name)
    ONE_HOT = 95
    RESAMPLE = 96
    ELEMENT_WISE_BIT_SHIFT_LEFT = 97
    ELEMENT_WISE_BIT_SHIFT_RIGHT = 98
    ELEMENT_WISE_ROUND = 99
    ELEMENT_WISE_IS_INFINITY = 100
    ELEMENT_WISE_MODULUS_TRUNCATE = 101
    ELEMENT_WISE_MODULUS_FLOOR = 102
    FILL_VALUE_CONSTANT = 103
    FILL_VALUE_SEQUENCE = 104
    CUMULATIVE_SUMMATION = 105
    REVERSE_SUBSEQUENCES = 106
    GATHER_ELEMENTS = 107
    GATHER_ND = 108
    SCATTER_ND = 109
    MAX_POOLING2 = 110
    SLICE1 = 111
    TOP_K1 = 112
    DEPTH_TO_SPACE1 = 113
    SPACE_TO_DEPTH1 = 114
    MEAN_VARIANCE_NORMALIZATION1 = 115
    RESAMPLE1 = 116
    MATRIX_MULTIPLY_INTEGER = 117
    QUANTIZED_LINEAR_MATRIX_MULTIPLY = 118
    CONVOLUTION_INTEGER = 119
    QUANTIZED_LINEAR_CONVOLUTION = 120
    ELEMENT_WISE_BIT_AND = 121
    ELEMENT_WISE_BIT_OR = 122
    ELEMENT_WISE_BIT_XOR = 123
    ELEMENT_WISE_BIT_NOT = 124
    ELEMENT_WISE_BIT_COUNT = 125
    ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL = 126
    ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL = 127
    ACTIVATION_CELU = 128
    ACTIVATION_RELU_GRAD = 129
    AVERAGE_POOLING_GRAD = 130
    MAX_POOLING_GRAD = 131
    RANDOM_GENERATOR = 132
    NONZERO_COORDINATES = 133
    RESAMPLE_GRAD = 134
    SLICE_GRAD = 135
    ADAM_OPTIMIZER = 136
    ARGMIN = 137
    ARGMAX = 138
    ROI_ALIGN = 139
    GATHER_ND1 = 140
    ELEMENT_WISE_ATAN_YX = 141
    ELEMENT_WISE_CLIP_GRAD = 142
    ELEMENT_WISE_DIFFERENCE_SQUARE = 143
    LOCAL_RESPONSE_NORMALIZATION_GRAD = 144
    CUMULATIVE_PRODUCT = 145
    BATCH_NORMALIZATION_GRAD = 146
    ELEMENT_WISE_QUANTIZED_LINEAR_ADD = 147
    DYNAMIC_QUANTIZE_LINEAR = 148
    ROI_ALIGN1 = 149
    ROI_ALIGN_GRAD = 150
    BATCH_NORMALIZATION_TRAINING = 151
    BATCH_NORMALIZATION_TRAINING_GRAD = 152
    ELEMENT_WISE_CLIP1 = 153
    ELEMENT_WISE_CLIP_GRAD1 = 154
    PADDING1 = 155
    ELEMENT_WISE_NEGATE = 156
    ACTIVATION_GELU = 157
    ACTIVATION_SOFTMAX1 = 158
    ACTIVATION_LOG_SOFTMAX1 = 159
    ACTIVATION_HARDMAX1 = 160
    RESAMPLE2 = 161
    RESAMPLE_GRAD1 = 162
    DIAGONAL_MATRIX1 = 163
    MULTIHEAD_ATTENTION = 164
    LP_POOLING1 = 165
    AVERAGE_POOLING1 = 166
    ACTIVATION_SWISH = 167
    ACTIVATION_HARD_SWISH = 168
    QUANTIZED_LINEAR_AVERAGE_POOLING = 169
    MATRIX_MULTIPLY_INTEGER_TO_FLOAT = 170
    MEAN_VARIANCE_NORMALIZATION2 = 171
    MULTIHEAD_ATTENTION1 = 172
    QUANTIZE = 173
    DEQUANTIZE = 174
    RESAMPLE3 = 175
    FOLD = 176
    UNFOLD = 177

    def __str__(self) -> str:
        return self.name  # (an IntEnum prints its number otherwise)


class DmlConvolutionMode(enum.IntEnum):
    """``DML_CONVOLUTION_MODE``: a convolution's kernel flipped (``CONVOLUTION``) or not (``CROSS_CORRELATION``,
    ONNX's Conv).

    Example:
        >>> import dmlbridge.gpu
        >>> int(dmlbridge.gpu.DmlConvolutionMode.CROSS_CORRELATION)
        1
    """

    CONVOLUTION = 0
    CROSS_CORRELATION = 1


class DmlConvolutionDirection(enum.IntEnum):
    """``DML_CONVOLUTION_DIRECTION``: ``FORWARD`` (Conv) or ``BACKWARD`` (ConvTranspose).

    Example:
        >>> import dmlbridge.gpu
        >>> int(dmlbridge.gpu.DmlConvolutionDirection.BACKWARD)
        1
    """

    FORWARD = 0
    BACKWARD = 1


class DmlMatrixTransform(enum.IntEnum):
    """``DML_MATRIX_TRANSFORM``: GEMM's ``TransA`` and ``TransB``.

    Example:
        >>> import dmlbridge.gpu
        >>> int(dmlbridge.gpu.DmlMatrixTransform.TRANSPOSE)
        1
    """

    NONE = 0
    TRANSPOSE = 1


class DmlRecurrentNetworkDirection(enum.IntEnum):
    """``DML_RECURRENT_NETWORK_DIRECTION``: the ``Direction`` of LSTM, GRU and RNN (ONNX's ``forward``,
    ``reverse`` and ``bidirectional``).

    Example:
        >>> import dmlbridge.gpu
        >>> int(dmlbridge.gpu.DmlRecurrentNetworkDirection.BIDIRECTIONAL)
        2
    """

    FORWARD = 0
    BACKWARD = 1
    BIDIRECTIONAL = 2


class DmlQuantizationType(enum.IntEnum):
    """``DML_QUANTIZATION_TYPE``: what DEQUANTIZE's ``QuantizationTensors`` are (a scale, or a scale and a zero
    point).

    Example:
        >>> import dmlbridge.gpu
        >>> int(dmlbridge.gpu.DmlQuantizationType.SCALE_ZERO_POINT)
        2
    """

    NONE = 0
    SCALE = 1
    SCALE_ZERO_POINT = 2


class DmlMultiheadAttentionMaskType(enum.IntEnum):
    """``DML_MULTIHEAD_ATTENTION_MASK_TYPE``: what MULTIHEAD_ATTENTION's ``MaskTensor`` holds.

    Example:
        >>> import dmlbridge.gpu
        >>> int(dmlbridge.gpu.DmlMultiheadAttentionMaskType.BOOLEAN)
        4
    """

    NONE = 0
    KEY_SEQUENCE_LENGTH = 1
    KEY_SEQUENCE_END_START = 2
    KEY_QUERY_SEQUENCE_LENGTH_START_END = 3
    BOOLEAN = 4


class DmlExecutionFlags(enum.IntFlag):
    """``DML_EXECUTION_FLAGS``: what DirectML may do compiling an operator or a graph (``execution_flags=`` of
    ``run_operator`` and ``run_graph``): compute in half precision where the tensors are FLOAT32, leave the
    driver's meta commands out, let the descriptors change after binding.

    Example:
        >>> import dmlbridge.gpu
        >>> flags = dmlbridge.gpu.DmlExecutionFlags
        >>> int(flags.ALLOW_HALF_PRECISION_COMPUTATION | flags.DISABLE_META_COMMANDS)
        3
    """

    NONE = 0
    ALLOW_HALF_PRECISION_COMPUTATION = 1
    DISABLE_META_COMMANDS = 2
    DESCRIPTORS_VOLATILE = 4
