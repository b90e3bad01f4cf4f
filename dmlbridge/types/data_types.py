"""DirectML and ONNX data types, and DirectML feature levels.

Each enum carries its own properties (bit width, signedness, numpy dtype, the feature level that introduced
it), in the style of onnx-ir's ``_enums``: a caller never needs a side table to ask a type about itself.
Values are from DirectML.h (DirectML 1.15) and onnx.proto (onnx 1.23); see ``docs/directml-facts.md``.
"""

from __future__ import annotations

import contextlib
import enum
from typing import Any

import ml_dtypes
import numpy as np

from dmlbridge.errors import InvalidArgumentError, UnsupportedTypeError

__all__ = ["DmlDataType", "FeatureLevel", "OnnxDataType", "onnx_type_of_dtype"]


class FeatureLevel(enum.IntEnum):
    """A DirectML feature level (equal to its ``DML_TARGET_VERSION``).

    Example:
        >>> import dmlbridge
        >>> level = dmlbridge.FeatureLevel.parse("6.2")
        >>> level, hex(level), level.dotted, level.max_dimension_count
        (<FeatureLevel.FL_6_2: 25088>, '0x6200', '6.2', 8)
    """

    FL_1_0 = 0x1000
    FL_2_0 = 0x2000
    FL_2_1 = 0x2100
    FL_3_0 = 0x3000
    FL_3_1 = 0x3100
    FL_4_0 = 0x4000
    FL_4_1 = 0x4100
    FL_5_0 = 0x5000
    FL_5_1 = 0x5100
    FL_5_2 = 0x5200
    FL_6_0 = 0x6000
    FL_6_1 = 0x6100
    FL_6_2 = 0x6200
    FL_6_3 = 0x6300
    FL_6_4 = 0x6400

    @property
    def max_dimension_count(self) -> int:
        """The most dimensions a buffer tensor may have at this level (5 before 3_0, 8 from it)."""
        return 8 if self >= FeatureLevel.FL_3_0 else 5

    @property
    def min_dimension_count(self) -> int:
        """The fewest dimensions a buffer tensor may have at this level (4 before 3_0, 1 from it)."""
        return 1 if self >= FeatureLevel.FL_3_0 else 4

    @property
    def dotted(self) -> str:
        """The level as people write it: ``"6.4"``."""
        return f"{self.value >> 12}.{(self.value >> 8) & 0xF}"

    @classmethod
    def parse(cls, text: str | int | float | FeatureLevel) -> FeatureLevel:
        """Read a level from ``"6.2"``, ``"6_2"``, ``"FL_6_2"``, ``6.2``, ``0x6200`` or ``"0x6200"``, or a
        FeatureLevel."""
        if isinstance(text, float):
            text = str(text)  # 6.2 as a number means "6.2" (6.25 is no level: refused below)
        if isinstance(text, (int, FeatureLevel)) and not isinstance(text, bool):
            try:
                return cls(int(text))
            except ValueError:
                pass
        elif isinstance(text, str) and text.strip().lower().startswith("0x"):
            with contextlib.suppress(ValueError):
                return cls.parse(int(text.strip(), 16))
        elif isinstance(text, str):
            key = text.strip().upper().removeprefix("FL_").replace(".", "_")
            member = cls.__members__.get("FL_" + key)
            if member is not None:
                return member
        known = ", ".join(level.dotted for level in cls)
        raise InvalidArgumentError(f"unknown DirectML feature level {text!r}; use one of {known}")


class DmlDataType(enum.IntEnum):
    """``DML_TENSOR_DATA_TYPE``: the element types a DirectML buffer tensor can have.

    Example:
        >>> import dmlbridge
        >>> t = dmlbridge.DmlDataType.parse("float16")
        >>> t, t.bitwidth, t.numpy(), t.introduced_in.dotted
        (<DmlDataType.FLOAT16: 2>, 16, dtype('float16'), '1.0')
        >>> dmlbridge.DmlDataType.INT4.introduced_in
        <FeatureLevel.FL_6_3: 25344>
    """

    UNKNOWN = 0
    FLOAT32 = 1
    FLOAT16 = 2
    UINT32 = 3
    UINT16 = 4
    UINT8 = 5
    INT32 = 6
    INT16 = 7
    INT8 = 8
    FLOAT64 = 9
    UINT64 = 10
    INT64 = 11
    UINT4 = 12
    INT4 = 13

    @property
    def bitwidth(self) -> int:
        """Bits per element (4 for UINT4/INT4). Zero for UNKNOWN."""
        return _DML_BITS[self]

    @property
    def itemsize(self) -> int:
        """Bytes per element, rounded up (1 for the 4-bit types)."""
        return (self.bitwidth + 7) // 8

    @property
    def is_float(self) -> bool:
        """True for FLOAT16, FLOAT32 and FLOAT64."""
        return self in (DmlDataType.FLOAT16, DmlDataType.FLOAT32, DmlDataType.FLOAT64)

    @property
    def is_signed(self) -> bool:
        """True for the float types and the signed integers."""
        return self.is_float or self.name.startswith("INT")

    @property
    def introduced_in(self) -> FeatureLevel:
        """The first feature level that defines this type."""
        if self in (DmlDataType.FLOAT64, DmlDataType.UINT64, DmlDataType.INT64):
            return FeatureLevel.FL_3_0
        if self in (DmlDataType.UINT4, DmlDataType.INT4):
            return FeatureLevel.FL_6_3
        if self is DmlDataType.UNKNOWN:
            raise UnsupportedTypeError("DML_TENSOR_DATA_TYPE_UNKNOWN is not a real data type")
        return FeatureLevel.FL_1_0

    def numpy(self) -> np.dtype:
        """The numpy dtype of one element (little-endian; ml_dtypes ``uint4``/``int4`` for the 4-bit types)."""
        if self is DmlDataType.UNKNOWN:
            raise UnsupportedTypeError("DML_TENSOR_DATA_TYPE_UNKNOWN has no numpy dtype")
        return np.dtype(_DML_NUMPY[self])

    def __str__(self) -> str:
        return self.name  # (an IntEnum prints its number otherwise)

    @classmethod
    def parse(cls, text: str | int | DmlDataType) -> DmlDataType:
        """Read a type from its name (``"FLOAT16"``, ``"float16"``) or its value."""
        if isinstance(text, str):
            member = cls.__members__.get(text.strip().upper().removeprefix("DML_TENSOR_DATA_TYPE_"))
            if member is not None and member is not cls.UNKNOWN:
                return member
        elif isinstance(text, int) and not isinstance(text, bool) and 1 <= int(text) <= 13:
            return cls(int(text))
        names = ", ".join(t.name for t in cls if t is not cls.UNKNOWN)
        if text in (0, "UNKNOWN", cls.UNKNOWN):
            raise UnsupportedTypeError(f"DML_TENSOR_DATA_TYPE_UNKNOWN is not a data type; use one of {names}")
        raise UnsupportedTypeError(f"unknown DirectML data type {text!r}; use one of {names}")


_DML_BITS = {
    DmlDataType.UNKNOWN: 0,
    DmlDataType.FLOAT32: 32,
    DmlDataType.FLOAT16: 16,
    DmlDataType.UINT32: 32,
    DmlDataType.UINT16: 16,
    DmlDataType.UINT8: 8,
    DmlDataType.INT32: 32,
    DmlDataType.INT16: 16,
    DmlDataType.INT8: 8,
    DmlDataType.FLOAT64: 64,
    DmlDataType.UINT64: 64,
    DmlDataType.INT64: 64,
    DmlDataType.UINT4: 4,
    DmlDataType.INT4: 4,
}

_DML_NUMPY: dict[DmlDataType, Any] = {
    DmlDataType.FLOAT32: "<f4",
    DmlDataType.FLOAT16: "<f2",
    DmlDataType.UINT32: "<u4",
    DmlDataType.UINT16: "<u2",
    DmlDataType.UINT8: "u1",
    DmlDataType.INT32: "<i4",
    DmlDataType.INT16: "<i2",
    DmlDataType.INT8: "i1",
    DmlDataType.FLOAT64: "<f8",
    DmlDataType.UINT64: "<u8",
    DmlDataType.INT64: "<i8",
    DmlDataType.UINT4: ml_dtypes.uint4,
    DmlDataType.INT4: ml_dtypes.int4,
}


class OnnxDataType(enum.IntEnum):
    """``TensorProto.DataType``: the element types of ONNX tensors (onnx 1.23).

    Example:
        >>> import dmlbridge
        >>> t = dmlbridge.OnnxDataType.parse("bfloat16")
        >>> t, t.bitwidth, t.is_float, t.numpy()
        (<OnnxDataType.BFLOAT16: 16>, 16, True, dtype(bfloat16))
    """

    UNDEFINED = 0
    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    STRING = 8
    BOOL = 9
    FLOAT16 = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    COMPLEX64 = 14
    COMPLEX128 = 15
    BFLOAT16 = 16
    FLOAT8E4M3FN = 17
    FLOAT8E4M3FNUZ = 18
    FLOAT8E5M2 = 19
    FLOAT8E5M2FNUZ = 20
    UINT4 = 21
    INT4 = 22
    FLOAT4E2M1 = 23
    FLOAT8E8M0 = 24
    UINT2 = 25
    INT2 = 26
    FLOAT6E2M3 = 27
    FLOAT6E3M2 = 28

    @property
    def bitwidth(self) -> int:
        """Bits per element in ONNX's packed ``raw_data`` form (0 for UNDEFINED and STRING)."""
        return _ONNX_BITS.get(self, 0)

    @property
    def is_float(self) -> bool:
        """True for every floating-point type (complex excluded)."""
        return self.name.startswith(("FLOAT", "BFLOAT")) or self is OnnxDataType.DOUBLE

    @property
    def is_signed(self) -> bool:
        """True for the float types and the signed integers."""
        return self.is_float or self.name.startswith("INT")

    @property
    def has_values(self) -> bool:
        """False for UNDEFINED, which has no values at all."""
        return self is not OnnxDataType.UNDEFINED

    def numpy(self) -> np.dtype:
        """The logical numpy dtype, as ``onnx.numpy_helper.to_array`` returns it (ml_dtypes for the new types;
        one byte per element for the sub-byte ones; ``object`` for STRING)."""
        if self is OnnxDataType.UNDEFINED:
            raise UnsupportedTypeError("ONNX data type UNDEFINED (0) has no values")
        return np.dtype(_ONNX_NUMPY[self])

    def __str__(self) -> str:
        return self.name  # (an IntEnum prints its number otherwise)

    @classmethod
    def parse(cls, text: str | int | OnnxDataType) -> OnnxDataType:
        """Read a type from its name (``"FLOAT16"``, ``"float16"``) or its value."""
        if isinstance(text, str):
            member = cls.__members__.get(text.strip().upper())
            if member is not None:
                return member
        elif isinstance(text, int) and not isinstance(text, bool):
            try:
                return cls(int(text))
            except ValueError:
                pass
        raise UnsupportedTypeError(
            f"unknown ONNX data type {text!r}; ONNX defines 0..{max(cls)} ({', '.join(cls.__members__)})"
        )


_ONNX_BITS = {
    OnnxDataType.FLOAT: 32,
    OnnxDataType.UINT8: 8,
    OnnxDataType.INT8: 8,
    OnnxDataType.UINT16: 16,
    OnnxDataType.INT16: 16,
    OnnxDataType.INT32: 32,
    OnnxDataType.INT64: 64,
    OnnxDataType.BOOL: 8,
    OnnxDataType.FLOAT16: 16,
    OnnxDataType.DOUBLE: 64,
    OnnxDataType.UINT32: 32,
    OnnxDataType.UINT64: 64,
    OnnxDataType.COMPLEX64: 64,
    OnnxDataType.COMPLEX128: 128,
    OnnxDataType.BFLOAT16: 16,
    OnnxDataType.FLOAT8E4M3FN: 8,
    OnnxDataType.FLOAT8E4M3FNUZ: 8,
    OnnxDataType.FLOAT8E5M2: 8,
    OnnxDataType.FLOAT8E5M2FNUZ: 8,
    OnnxDataType.UINT4: 4,
    OnnxDataType.INT4: 4,
    OnnxDataType.FLOAT4E2M1: 4,
    OnnxDataType.FLOAT8E8M0: 8,
    OnnxDataType.UINT2: 2,
    OnnxDataType.INT2: 2,
    OnnxDataType.FLOAT6E2M3: 6,
    OnnxDataType.FLOAT6E3M2: 6,
}

_ONNX_NUMPY: dict[OnnxDataType, Any] = {
    OnnxDataType.FLOAT: np.float32,
    OnnxDataType.UINT8: np.uint8,
    OnnxDataType.INT8: np.int8,
    OnnxDataType.UINT16: np.uint16,
    OnnxDataType.INT16: np.int16,
    OnnxDataType.INT32: np.int32,
    OnnxDataType.INT64: np.int64,
    OnnxDataType.STRING: object,
    OnnxDataType.BOOL: np.bool_,
    OnnxDataType.FLOAT16: np.float16,
    OnnxDataType.DOUBLE: np.float64,
    OnnxDataType.UINT32: np.uint32,
    OnnxDataType.UINT64: np.uint64,
    OnnxDataType.COMPLEX64: np.complex64,
    OnnxDataType.COMPLEX128: np.complex128,
    OnnxDataType.BFLOAT16: ml_dtypes.bfloat16,
    OnnxDataType.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
    OnnxDataType.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    OnnxDataType.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    OnnxDataType.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
    OnnxDataType.UINT4: ml_dtypes.uint4,
    OnnxDataType.INT4: ml_dtypes.int4,
    OnnxDataType.FLOAT4E2M1: ml_dtypes.float4_e2m1fn,
    OnnxDataType.FLOAT8E8M0: ml_dtypes.float8_e8m0fnu,
    OnnxDataType.UINT2: ml_dtypes.uint2,
    OnnxDataType.INT2: ml_dtypes.int2,
    OnnxDataType.FLOAT6E2M3: ml_dtypes.float6_e2m3fn,
    OnnxDataType.FLOAT6E3M2: ml_dtypes.float6_e3m2fn,
}

# Native-byte-order dtype -> ONNX type, for reading a numpy array's ONNX type.
_DTYPE_TO_ONNX = {np.dtype(v): k for k, v in _ONNX_NUMPY.items() if k is not OnnxDataType.STRING}


def onnx_type_of_dtype(dtype: np.dtype) -> OnnxDataType:
    """The ONNX data type of a numpy dtype, in any byte order or alias (``'>i4'``, ``intc``, ...).

    Raises UnsupportedTypeError for dtypes ONNX has no type for (datetime, void, float128, ...).
    """
    dtype = np.dtype(dtype)
    if dtype.kind in "OUS":
        return OnnxDataType.STRING
    found = _DTYPE_TO_ONNX.get(dtype.newbyteorder("=")) if dtype.byteorder != "|" else _DTYPE_TO_ONNX.get(dtype)
    if found is None:
        raise UnsupportedTypeError(
            f"numpy dtype {dtype} has no ONNX equivalent; use one of the numpy or ml_dtypes types ONNX defines "
            "(float32, float16, int8..int64, uint8..uint64, bool, bfloat16, float8_*, int4, uint4, ...)"
        )
    return found
