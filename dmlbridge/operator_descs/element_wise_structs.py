"""The desc structs of DirectML's element-wise operators that dmlbridge's operator table binds constants to (ONNX's
Add, Sub, Mul, Div, Pow, the comparisons, the logical and bitwise operators, Where, Mod, BitShift, Clip,
QuantizeLinear and DequantizeLinear), and the scale-and-bias and scalar they point at or hold, as ctypes laid out as
DirectML.h declares them for 64-bit Windows (tests/gpu/test_graph_structs.py checks each size and offset against
the header). Their base, :class:`~dmlbridge.operator_descs.operator_structs.OperatorStruct`, and ``operator_desc``
are in ``operator_structs``, beside it.

    >>> import numpy as np, dmlbridge
    >>> a = dmlbridge.prepare(np.ones((2, 3), np.float32)).as_ctypes_tensor_desc()
    >>> add = DML_ELEMENT_WISE_ADD_OPERATOR_DESC(ATensor=a, BTensor=a, OutputTensor=a)
    >>> add.OPERATOR_TYPE, sorted(add.kept), ctypes.sizeof(add)
    (<DmlOperatorType.ELEMENT_WISE_ADD: 4>, ['ATensor', 'BTensor', 'OutputTensor'], 24)
"""

# ruff: noqa: RUF012 (ruff cannot see OperatorStruct is a ctypes.Structure, whose _fields_ are class lists)
from __future__ import annotations

import ctypes

from dmlbridge.operator_descs.operator_structs import OperatorStruct
from dmlbridge.operator_descs.operator_types import DmlOperatorType

__all__ = [
    "DML_ELEMENT_WISE_ADD1_OPERATOR_DESC", "DML_ELEMENT_WISE_ADD_OPERATOR_DESC",
    "DML_ELEMENT_WISE_BIT_AND_OPERATOR_DESC", "DML_ELEMENT_WISE_BIT_OR_OPERATOR_DESC",
    "DML_ELEMENT_WISE_BIT_SHIFT_LEFT_OPERATOR_DESC", "DML_ELEMENT_WISE_BIT_SHIFT_RIGHT_OPERATOR_DESC",
    "DML_ELEMENT_WISE_BIT_XOR_OPERATOR_DESC", "DML_ELEMENT_WISE_CLIP1_OPERATOR_DESC",
    "DML_ELEMENT_WISE_CLIP_OPERATOR_DESC", "DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC",
    "DML_ELEMENT_WISE_DIVIDE_OPERATOR_DESC", "DML_ELEMENT_WISE_IF_OPERATOR_DESC",
    "DML_ELEMENT_WISE_LOGICAL_AND_OPERATOR_DESC", "DML_ELEMENT_WISE_LOGICAL_EQUALS_OPERATOR_DESC",
    "DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OPERATOR_DESC",
    "DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL_OPERATOR_DESC", "DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OPERATOR_DESC",
    "DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL_OPERATOR_DESC", "DML_ELEMENT_WISE_LOGICAL_OR_OPERATOR_DESC",
    "DML_ELEMENT_WISE_LOGICAL_XOR_OPERATOR_DESC", "DML_ELEMENT_WISE_MAX_OPERATOR_DESC",
    "DML_ELEMENT_WISE_MEAN_OPERATOR_DESC", "DML_ELEMENT_WISE_MIN_OPERATOR_DESC",
    "DML_ELEMENT_WISE_MODULUS_FLOOR_OPERATOR_DESC", "DML_ELEMENT_WISE_MODULUS_TRUNCATE_OPERATOR_DESC",
    "DML_ELEMENT_WISE_MULTIPLY_OPERATOR_DESC", "DML_ELEMENT_WISE_POW_OPERATOR_DESC",
    "DML_ELEMENT_WISE_QUANTIZE_LINEAR_OPERATOR_DESC", "DML_ELEMENT_WISE_SUBTRACT_OPERATOR_DESC", "DML_SCALAR_UNION",
    "DML_SCALE_BIAS",
]

_P = ctypes.c_void_p  # every pointer: a DML_TENSOR_DESC, a DML_OPERATOR_DESC, a DML_SCALE_BIAS
_ENUM = ctypes.c_int32  # an enum (DML_TENSOR_DATA_TYPE)


class DML_SCALE_BIAS(ctypes.Structure):  # noqa: N801 - the DirectML name
    """``DML_SCALE_BIAS``: Input · Scale + Bias, what ``ScaleBias`` of POW and CLIP points at (None: none).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> clip = gpu.DML_ELEMENT_WISE_CLIP_OPERATOR_DESC(ScaleBias=gpu.DML_SCALE_BIAS(2.0, 0.5), Min=0.0, Max=6.0)
        >>> clip.kept["ScaleBias"].Scale, ctypes.sizeof(gpu.DML_SCALE_BIAS)
        (2.0, 8)
    """

    _fields_ = [("Scale", ctypes.c_float), ("Bias", ctypes.c_float)]


class DML_SCALAR_UNION(ctypes.Union):  # noqa: N801 - the DirectML name
    """``DML_SCALAR_UNION``: one scalar of any ``DML_TENSOR_DATA_TYPE`` in 8 bytes (CLIP1's ``Min`` and ``Max``).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> value = gpu.DML_SCALAR_UNION(Float32=6.0)
        >>> bytes(value.Bytes).hex(), ctypes.sizeof(value)
        ('0000c04000000000', 8)
    """

    _fields_ = [("Bytes", ctypes.c_ubyte * 8), ("Int8", ctypes.c_int8), ("UInt8", ctypes.c_uint8),
                ("Int16", ctypes.c_int16), ("UInt16", ctypes.c_uint16), ("Int32", ctypes.c_int32),
                ("UInt32", ctypes.c_uint32), ("Int64", ctypes.c_int64), ("UInt64", ctypes.c_uint64),
                ("Float32", ctypes.c_float), ("Float64", ctypes.c_double)]


class DML_ELEMENT_WISE_ADD_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_ADD_OPERATOR_DESC``: Output = A + B (ONNX's Add, and Sum of two).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_ADD_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_ADD: 4>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_ADD
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_ADD1_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_ADD1_OPERATOR_DESC``: Output = A + B, then its ``FusedActivation`` (a ``DML_OPERATOR_DESC``,
    or None).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_ADD1_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_ADD1: 89>, 32)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_ADD1
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P), ("FusedActivation", _P)]


class DML_ELEMENT_WISE_SUBTRACT_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_SUBTRACT_OPERATOR_DESC``: Output = A - B (ONNX's Sub).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_SUBTRACT_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_SUBTRACT: 30>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_SUBTRACT
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_MULTIPLY_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_MULTIPLY_OPERATOR_DESC``: Output = A · B (ONNX's Mul).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_MULTIPLY_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_MULTIPLY: 24>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_MULTIPLY
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_DIVIDE_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_DIVIDE_OPERATOR_DESC``: Output = A / B (ONNX's Div).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_DIVIDE_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_DIVIDE: 10>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_DIVIDE
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_POW_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_POW_OPERATOR_DESC``: Output = Input ^ Exponent (ONNX's Pow); ``ScaleBias`` (a
    :class:`DML_SCALE_BIAS`, or None) scales and shifts the input first.

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_POW_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_POW: 25>, 32)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_POW
    _fields_ = [("InputTensor", _P), ("ExponentTensor", _P), ("OutputTensor", _P), ("ScaleBias", _P)]


class DML_ELEMENT_WISE_MAX_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_MAX_OPERATOR_DESC``: Output = max(A, B) (ONNX's Max of two).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_MAX_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_MAX: 21>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_MAX
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_MIN_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_MIN_OPERATOR_DESC``: Output = min(A, B) (ONNX's Min of two).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_MIN_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_MIN: 23>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_MIN
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_MEAN_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_MEAN_OPERATOR_DESC``: Output = (A + B) / 2 (ONNX's Mean of two).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_MEAN_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_MEAN: 22>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_MEAN
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_LOGICAL_EQUALS_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_LOGICAL_EQUALS_OPERATOR_DESC``: Output = A == B, as 0 or 1 (ONNX's Equal).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_LOGICAL_EQUALS_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_LOGICAL_EQUALS: 15>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_LOGICAL_EQUALS
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OPERATOR_DESC``: Output = A < B, as 0 or 1 (ONNX's Less).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_LOGICAL_LESS_THAN: 17>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_LOGICAL_LESS_THAN
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OPERATOR_DESC``: Output = A > B, as 0 or 1 (ONNX's Greater).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_LOGICAL_GREATER_THAN: 16>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_LOGICAL_GREATER_THAN
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL_OPERATOR_DESC``: Output = A <= B, as 0 or 1 (ONNX's LessOrEqual).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL: 127>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL_OPERATOR_DESC``: Output = A >= B, as 0 or 1 (ONNX's
    GreaterOrEqual).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL: 126>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_LOGICAL_AND_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_LOGICAL_AND_OPERATOR_DESC``: Output = A and B, as 0 or 1 (ONNX's And).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_LOGICAL_AND_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_LOGICAL_AND: 14>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_LOGICAL_AND
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_LOGICAL_OR_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_LOGICAL_OR_OPERATOR_DESC``: Output = A or B, as 0 or 1 (ONNX's Or).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_LOGICAL_OR_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_LOGICAL_OR: 19>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_LOGICAL_OR
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_LOGICAL_XOR_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_LOGICAL_XOR_OPERATOR_DESC``: Output = A xor B, as 0 or 1 (ONNX's Xor).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_LOGICAL_XOR_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_LOGICAL_XOR: 20>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_LOGICAL_XOR
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_IF_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_IF_OPERATOR_DESC``: Output = A where Condition is not 0, else B (ONNX's Where).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_IF_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_IF: 88>, 32)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_IF
    _fields_ = [("ConditionTensor", _P), ("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_MODULUS_FLOOR_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_MODULUS_FLOOR_OPERATOR_DESC``: Output = A mod B with B's sign (ONNX's Mod, ``fmod=0``).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_MODULUS_FLOOR_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_MODULUS_FLOOR: 102>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_MODULUS_FLOOR
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_MODULUS_TRUNCATE_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_MODULUS_TRUNCATE_OPERATOR_DESC``: Output = A mod B with A's sign (ONNX's Mod, ``fmod=1``).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_MODULUS_TRUNCATE_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_MODULUS_TRUNCATE: 101>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_MODULUS_TRUNCATE
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_BIT_SHIFT_LEFT_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_BIT_SHIFT_LEFT_OPERATOR_DESC``: Output = A << B (ONNX's BitShift, ``direction=LEFT``).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_BIT_SHIFT_LEFT_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_BIT_SHIFT_LEFT: 97>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_BIT_SHIFT_LEFT
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_BIT_SHIFT_RIGHT_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_BIT_SHIFT_RIGHT_OPERATOR_DESC``: Output = A >> B (ONNX's BitShift, ``direction=RIGHT``).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_BIT_SHIFT_RIGHT_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_BIT_SHIFT_RIGHT: 98>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_BIT_SHIFT_RIGHT
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_BIT_AND_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_BIT_AND_OPERATOR_DESC``: Output = A & B (ONNX's BitwiseAnd).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_BIT_AND_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_BIT_AND: 121>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_BIT_AND
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_BIT_OR_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_BIT_OR_OPERATOR_DESC``: Output = A | B (ONNX's BitwiseOr).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_BIT_OR_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_BIT_OR: 122>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_BIT_OR
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_BIT_XOR_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_BIT_XOR_OPERATOR_DESC``: Output = A ^ B (ONNX's BitwiseXor).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_BIT_XOR_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_BIT_XOR: 123>, 24)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_BIT_XOR
    _fields_ = [("ATensor", _P), ("BTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_CLIP_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_CLIP_OPERATOR_DESC``: Output = Input clamped to [Min, Max], given as floats (ONNX's Clip
    before opset 11).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_CLIP_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_CLIP: 8>, 32)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_CLIP
    _fields_ = [("InputTensor", _P), ("OutputTensor", _P), ("ScaleBias", _P), ("Min", ctypes.c_float),
                ("Max", ctypes.c_float)]


class DML_ELEMENT_WISE_CLIP1_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_CLIP1_OPERATOR_DESC``: Output = Input clamped to [Min, Max], given as
    :class:`DML_SCALAR_UNION` values of ``MinMaxDataType`` (a ``DML_TENSOR_DATA_TYPE``: ``dmlbridge.DmlDataType``).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_CLIP1_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_CLIP1: 153>, 48)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_CLIP1
    _fields_ = [("InputTensor", _P), ("OutputTensor", _P), ("ScaleBias", _P), ("MinMaxDataType", _ENUM),
                ("Min", DML_SCALAR_UNION), ("Max", DML_SCALAR_UNION)]


class DML_ELEMENT_WISE_QUANTIZE_LINEAR_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_QUANTIZE_LINEAR_OPERATOR_DESC``: Output = round(Input / Scale) + ZeroPoint, saturated (ONNX's
    QuantizeLinear).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_QUANTIZE_LINEAR_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_QUANTIZE_LINEAR: 33>, 32)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_QUANTIZE_LINEAR
    _fields_ = [("InputTensor", _P), ("ScaleTensor", _P), ("ZeroPointTensor", _P), ("OutputTensor", _P)]


class DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC(OperatorStruct):  # noqa: N801 - the DirectML name
    """``DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC``: Output = (Input - ZeroPoint) · Scale (ONNX's
    DequantizeLinear).

    Example:
        >>> import ctypes, dmlbridge.gpu as gpu
        >>> desc = gpu.DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC()
        >>> desc.OPERATOR_TYPE, ctypes.sizeof(desc)
        (<DmlOperatorType.ELEMENT_WISE_DEQUANTIZE_LINEAR: 34>, 32)
    """

    OPERATOR_TYPE = DmlOperatorType.ELEMENT_WISE_DEQUANTIZE_LINEAR
    _fields_ = [("InputTensor", _P), ("ScaleTensor", _P), ("ZeroPointTensor", _P), ("OutputTensor", _P)]

