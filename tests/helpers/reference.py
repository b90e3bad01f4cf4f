"""A slow, obviously correct reference encoder for dmlbridge's buffer tensors.

It shares no code with dmlbridge (it must not import it): every rule is re-derived from
``docs/directml-facts.md`` and ``docs/decisions.md`` and applied one element at a time with plain Python ints and
floats, ``struct`` and ``int.to_bytes``. The tests compare the library against it, and ``make_vectors.py``
freezes its answers into ``tests/helpers/vectors/known_answers.json``.

Element values are handled as bit patterns (Python ints): the bits of the source element as stored in memory,
and the bits of the DML element it becomes.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

UINT32_MAX = 2**32 - 1


# --- errors: same class names as dmlbridge's, so vectors can name them --------------------------------------


class RefError(Exception):
    """Base of the reference's errors; the class name is what a vector records."""


class UnsupportedTypeError(RefError):
    pass


class LayoutError(RefError):
    pass


class ValueRangeError(RefError):
    pass


class InvalidArgumentError(RefError):
    pass


# --- types ------------------------------------------------------------------------------------------------

# DML_TENSOR_DATA_TYPE: name -> (value, bits, signed, is_float)
DML_TYPES: dict[str, tuple[int, int, bool, bool]] = {
    "FLOAT32": (1, 32, True, True),
    "FLOAT16": (2, 16, True, True),
    "UINT32": (3, 32, False, False),
    "UINT16": (4, 16, False, False),
    "UINT8": (5, 8, False, False),
    "INT32": (6, 32, True, False),
    "INT16": (7, 16, True, False),
    "INT8": (8, 8, True, False),
    "FLOAT64": (9, 64, True, True),
    "UINT64": (10, 64, False, False),
    "INT64": (11, 64, True, False),
    "UINT4": (12, 4, False, False),
    "INT4": (13, 4, True, False),
}
DML_NAME_OF_VALUE = {v[0]: name for name, v in DML_TYPES.items()}

FEATURE_LEVELS: dict[str, int] = {
    "FL_1_0": 0x1000, "FL_2_0": 0x2000, "FL_2_1": 0x2100, "FL_3_0": 0x3000, "FL_3_1": 0x3100,
    "FL_4_0": 0x4000, "FL_4_1": 0x4100, "FL_5_0": 0x5000, "FL_5_1": 0x5100, "FL_5_2": 0x5200,
    "FL_6_0": 0x6000, "FL_6_1": 0x6100, "FL_6_2": 0x6200, "FL_6_3": 0x6300, "FL_6_4": 0x6400,
}  # fmt: skip

ONNX_TYPES: dict[str, int] = {
    "UNDEFINED": 0, "FLOAT": 1, "UINT8": 2, "INT8": 3, "UINT16": 4, "INT16": 5, "INT32": 6, "INT64": 7,
    "STRING": 8, "BOOL": 9, "FLOAT16": 10, "DOUBLE": 11, "UINT32": 12, "UINT64": 13, "COMPLEX64": 14,
    "COMPLEX128": 15, "BFLOAT16": 16, "FLOAT8E4M3FN": 17, "FLOAT8E4M3FNUZ": 18, "FLOAT8E5M2": 19,
    "FLOAT8E5M2FNUZ": 20, "UINT4": 21, "INT4": 22, "FLOAT4E2M1": 23, "FLOAT8E8M0": 24, "UINT2": 25,
    "INT2": 26, "FLOAT6E2M3": 27, "FLOAT6E3M2": 28,
}  # fmt: skip
ONNX_NAME_OF_VALUE = {v: k for k, v in ONNX_TYPES.items()}

# ml_dtypes scalar type name -> ONNX type name (decisions.md "ONNX type of a numpy array").
ML_DTYPES_ONNX: dict[str, str] = {
    "bfloat16": "BFLOAT16",
    "float8_e4m3fn": "FLOAT8E4M3FN",
    "float8_e4m3fnuz": "FLOAT8E4M3FNUZ",
    "float8_e5m2": "FLOAT8E5M2",
    "float8_e5m2fnuz": "FLOAT8E5M2FNUZ",
    "uint4": "UINT4",
    "int4": "INT4",
    "float4_e2m1fn": "FLOAT4E2M1",
    "float8_e8m0fnu": "FLOAT8E8M0",
    "uint2": "UINT2",
    "int2": "INT2",
    "float6_e2m3fn": "FLOAT6E2M3",
    "float6_e3m2fn": "FLOAT6E3M2",
}

# numpy (kind, itemsize) -> ONNX type name, for numpy's own dtypes in any byte order or alias.
NUMPY_ONNX: dict[tuple[str, int], str] = {
    ("f", 4): "FLOAT", ("u", 1): "UINT8", ("i", 1): "INT8", ("u", 2): "UINT16", ("i", 2): "INT16",
    ("i", 4): "INT32", ("i", 8): "INT64", ("b", 1): "BOOL", ("f", 2): "FLOAT16", ("f", 8): "DOUBLE",
    ("u", 4): "UINT32", ("u", 8): "UINT64", ("c", 8): "COMPLEX64", ("c", 16): "COMPLEX128",
}  # fmt: skip

# The ONNX type name -> numpy dtype used to build arrays of that type (one per type that has values).
ONNX_DTYPE_NAME: dict[str, str] = {
    "FLOAT": "float32", "UINT8": "uint8", "INT8": "int8", "UINT16": "uint16", "INT16": "int16",
    "INT32": "int32", "INT64": "int64", "STRING": "<U2", "BOOL": "bool", "FLOAT16": "float16",
    "DOUBLE": "float64", "UINT32": "uint32", "UINT64": "uint64", "COMPLEX64": "complex64",
    "COMPLEX128": "complex128", **{onnx: ml for ml, onnx in ML_DTYPES_ONNX.items()},
}  # fmt: skip


def resolve_dtype(name: str) -> np.dtype:
    """A dtype from a vector's dtype name: ml_dtypes names first (numpy alone reads 'int4' differently)."""
    if name in ML_DTYPES_ONNX:
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def onnx_type_name(dtype: np.dtype) -> str:
    """ONNX type name of a numpy dtype, or UnsupportedTypeError."""
    for ml_name, onnx_name in ML_DTYPES_ONNX.items():
        if dtype.type is getattr(ml_dtypes, ml_name):
            return onnx_name
    if dtype.kind in "USO":
        return "STRING"
    if dtype.kind in "fiubc" and (dtype.kind, dtype.itemsize) in NUMPY_ONNX:
        return NUMPY_ONNX[(dtype.kind, dtype.itemsize)]
    raise UnsupportedTypeError(f"no ONNX type for {dtype}")


# --- the mapping rule (docs/decisions.md) ---------------------------------------------------------------------

_FLOAT8ISH = ["FLOAT16", "FLOAT32", "FLOAT64"]
CANDIDATES: dict[str, list[str]] = {
    "FLOAT": ["FLOAT32", "FLOAT64"],
    "FLOAT16": ["FLOAT16", "FLOAT32", "FLOAT64"],
    "DOUBLE": ["FLOAT64"],
    "BFLOAT16": ["FLOAT32", "FLOAT64"],
    "FLOAT8E8M0": ["FLOAT32", "FLOAT64"],
    "FLOAT8E4M3FN": _FLOAT8ISH,
    "FLOAT8E4M3FNUZ": _FLOAT8ISH,
    "FLOAT8E5M2": _FLOAT8ISH,
    "FLOAT8E5M2FNUZ": _FLOAT8ISH,
    "FLOAT4E2M1": _FLOAT8ISH,
    "FLOAT6E2M3": _FLOAT8ISH,
    "FLOAT6E3M2": _FLOAT8ISH,
    "UINT4": ["UINT4", "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64"],
    "UINT2": ["UINT4", "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64"],
    "INT4": ["INT4", "INT8", "INT16", "INT32", "INT64"],
    "INT2": ["INT4", "INT8", "INT16", "INT32", "INT64"],
    "BOOL": ["UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64"],
    "UINT8": ["UINT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64"],
    "INT8": ["INT8", "INT16", "INT32", "INT64"],
    "UINT16": ["UINT16", "UINT32", "INT32", "UINT64", "INT64"],
    "INT16": ["INT16", "INT32", "INT64"],
    "INT32": ["INT32", "INT64"],
    "UINT32": ["UINT32", "UINT64", "INT64"],
    "INT64": ["INT64"],
    "UINT64": ["UINT64"],
}
# The DML type of the same name: conversion "native" rather than "widen".
NATIVE: dict[str, str] = {
    "FLOAT": "FLOAT32", "FLOAT16": "FLOAT16", "DOUBLE": "FLOAT64", "UINT8": "UINT8", "INT8": "INT8",
    "UINT16": "UINT16", "INT16": "INT16", "INT32": "INT32", "UINT32": "UINT32", "INT64": "INT64",
    "UINT64": "UINT64", "UINT4": "UINT4", "INT4": "INT4",
}  # fmt: skip


@dataclass(frozen=True)
class RefTarget:
    feature_level: str = "FL_6_4"
    supported: frozenset[str] | None = None  # DML type names; None = all the level defines
    int64: str = "emulate"
    allow_lossy: bool = False

    def types(self) -> set[str]:
        level = FEATURE_LEVELS[self.feature_level]
        out = {"FLOAT32", "FLOAT16", "UINT32", "UINT16", "UINT8", "INT32", "INT16", "INT8"}
        if level >= 0x3000:
            out |= {"FLOAT64", "UINT64", "INT64"}
        if level >= 0x6300:
            out |= {"UINT4", "INT4"}
        if self.supported is not None:
            out &= set(self.supported)
        return out

    def max_dims(self) -> int:
        return 8 if FEATURE_LEVELS[self.feature_level] >= 0x3000 else 5

    def to_json(self) -> dict[str, Any]:
        return {
            "feature_level": self.feature_level,
            "supported": None if self.supported is None else sorted(self.supported, key=lambda n: DML_TYPES[n][0]),
            "int64": self.int64,
            "allow_lossy": self.allow_lossy,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RefTarget:
        sup = d["supported"]
        return cls(d["feature_level"], None if sup is None else frozenset(sup), d["int64"], d["allow_lossy"])


def map_type(onnx_name: str, target: RefTarget) -> tuple[str, str]:
    """(DML type name, conversion) for an ONNX type under a target, or UnsupportedTypeError."""
    have = target.types()
    for cand in CANDIDATES.get(onnx_name, []):
        if cand in have:
            return cand, ("native" if NATIVE.get(onnx_name) == cand else "widen")
    if onnx_name in ("INT64", "UINT64"):
        narrow32 = "INT32" if onnx_name == "INT64" else "UINT32"
        if narrow32 in have:
            return narrow32, target.int64
    if onnx_name == "DOUBLE" and target.allow_lossy and "FLOAT32" in have:
        return "FLOAT32", "lossy"
    raise UnsupportedTypeError(f"{onnx_name} has no DML type on {target}")


# --- per-element values ---------------------------------------------------------------------------------------

# Minifloat formats: name -> (exponent bits, mantissa bits, bias, special-value rule).
#   "ieee": all-ones exponent is inf (mantissa 0) or NaN; "fn": only all-ones exponent+mantissa is NaN, no inf;
#   "fnuz": only 1000...0 (negative zero's pattern) is NaN, no inf, no -0; "none": every pattern is finite.
MINIFLOATS: dict[str, tuple[int, int, int, str]] = {
    "FLOAT16": (5, 10, 15, "ieee"),
    "BFLOAT16": (8, 7, 127, "ieee"),
    "FLOAT8E4M3FN": (4, 3, 7, "fn"),
    "FLOAT8E4M3FNUZ": (4, 3, 8, "fnuz"),
    "FLOAT8E5M2": (5, 2, 15, "ieee"),
    "FLOAT8E5M2FNUZ": (5, 2, 16, "fnuz"),
    "FLOAT4E2M1": (2, 1, 1, "none"),
    "FLOAT6E2M3": (2, 3, 1, "none"),
    "FLOAT6E3M2": (3, 2, 3, "none"),
}

# (sign bit, exponent mask, mantissa bits) of the DML float types, for building NaNs by hand.
IEEE_OUT = {"FLOAT16": (15, 0x1F, 10), "FLOAT32": (31, 0xFF, 23), "FLOAT64": (63, 0x7FF, 52)}
STRUCT_FMT = {"FLOAT16": "<e", "FLOAT32": "<f", "FLOAT64": "<d"}


@dataclass(frozen=True)
class NaN:
    """A NaN as a source had it: its sign and its mantissa (payload incl. the quiet bit) of `bits` bits."""

    sign: int
    mantissa: int
    bits: int


def decode_minifloat(fmt: str, bits: int) -> float | NaN:
    ebits, mbits, bias, rule = MINIFLOATS[fmt]
    width = 1 + ebits + mbits
    sign = (bits >> (width - 1)) & 1
    exp = (bits >> mbits) & ((1 << ebits) - 1)
    man = bits & ((1 << mbits) - 1)
    top = (1 << ebits) - 1
    if rule == "ieee" and exp == top:
        return NaN(sign, man, mbits) if man else (-math.inf if sign else math.inf)
    if rule == "fn" and exp == top and man == (1 << mbits) - 1:
        return NaN(sign, man, mbits)
    if rule == "fnuz" and sign and exp == 0 and man == 0:
        return NaN(sign, 0, mbits)
    if exp == 0:  # zero or subnormal
        mag = math.ldexp(man, 1 - bias - mbits)
    else:
        mag = math.ldexp((1 << mbits) | man, exp - bias - mbits)
    return -mag if sign else mag  # -0.0 for a negative zero


def decode_e8m0(bits: int) -> float | NaN:
    """float8_e8m0fnu: no sign, no zero, 2**(e - 127); 0xFF is NaN."""
    return NaN(0, 0, 0) if bits == 0xFF else math.ldexp(1.0, bits - 127)


def decode_float32(bits: int) -> float | NaN:
    if (bits >> 23) & 0xFF == 0xFF and bits & 0x7FFFFF:
        return NaN(bits >> 31, bits & 0x7FFFFF, 23)
    return float(struct.unpack("<f", bits.to_bytes(4, "little"))[0])


def decode_float64(bits: int) -> float | NaN:
    if (bits >> 52) & 0x7FF == 0x7FF and bits & ((1 << 52) - 1):
        return NaN(bits >> 63, bits & ((1 << 52) - 1), 52)
    return float(struct.unpack("<d", bits.to_bytes(8, "little"))[0])


def encode_float(dml: str, x: float) -> int:
    """Bits of a finite/infinite Python float in a DML float type: struct rounds to nearest even; a finite
    value too large for FLOAT32 becomes inf, as numpy's astype does (struct raises OverflowError instead)."""
    try:
        raw = struct.pack(STRUCT_FMT[dml], x)
    except OverflowError:
        raw = struct.pack(STRUCT_FMT[dml], math.copysign(math.inf, x))
    return int.from_bytes(raw, "little")


def encode_nan(dml: str, sign: int, mantissa: int) -> int:
    sbit, emask, mbits = IEEE_OUT[dml]
    return (sign << sbit) | (emask << mbits) | mantissa


def widen_nan(src: str, dml: str, nan: NaN) -> int:
    """A source NaN in a wider DML float type (docs/decisions.md, "Values"):
    - the IEEE-style types, whose NaNs carry a payload in their mantissa (FLOAT16, BFLOAT16, FLOAT, FLOAT8E5M2):
      the same sign, the mantissa (payload and quiet bit) shifted to the top of the wider one, so a signalling
      NaN stays signalling (FLOAT8E5M2 -> FLOAT16 is the code shifted up 8 bits);
    - the types with one NaN a sign (FLOAT8E4M3FN, the fnuz types, FLOAT8E8M0): the canonical quiet NaN with
      the source's sign (fnuz NaN 0x80 is negative, e8m0 0xFF positive), as ml_dtypes gives it."""
    _, _, mbits = IEEE_OUT[dml]
    if src in ("FLOAT16", "BFLOAT16", "FLOAT", "FLOAT8E5M2"):
        return encode_nan(dml, nan.sign, nan.mantissa << (mbits - nan.bits))
    return encode_nan(dml, nan.sign, 1 << (mbits - 1))


def lossy_nan(nan: NaN) -> int:
    """DOUBLE NaN -> FLOAT32: kept bit for bit when its low 29 mantissa bits are zero (a NaN FLOAT32 holds: the
    same sign and top 23 bits), else quieted with the top 23 payload bits kept, as numpy's astype does."""
    top = nan.mantissa >> 29
    if top and not nan.mantissa & ((1 << 29) - 1):
        return encode_nan("FLOAT32", nan.sign, top)
    return encode_nan("FLOAT32", nan.sign, top | (1 << 22))


def element_bits(arr: np.ndarray, idx: tuple[int, ...]) -> int:
    """The bits of one element exactly as stored (byte order undone), read from the array's own memory."""
    one = arr[tuple(slice(i, i + 1) for i in idx)]  # a 1-element view: keeps dtype and byte order
    raw = one.tobytes()
    if one.dtype.byteorder == ">" or (one.dtype.byteorder == "=" and np.little_endian is False):
        raw = raw[::-1]
    return int.from_bytes(raw, "little")


# Sub-byte ml_dtypes types store one element per byte; the value is in the low bits (ml_dtypes reads only those).
SUB_BYTE_INT = {"UINT4": (4, False), "INT4": (4, True), "UINT2": (2, False), "INT2": (2, True)}
SUB_BYTE_FLOAT_BITS = {"FLOAT4E2M1": 4, "FLOAT6E2M3": 6, "FLOAT6E3M2": 6}


def source_value(onnx_name: str, bits: int, itemsize: int) -> int | float | NaN:
    """The logical value of a source element from its bits: an int for integers and BOOL, else a float/NaN."""
    if onnx_name == "BOOL":
        return 1 if bits else 0  # any nonzero byte is True
    if onnx_name in SUB_BYTE_INT:
        width, signed = SUB_BYTE_INT[onnx_name]
        v = bits & ((1 << width) - 1)
        return v - (1 << width) if signed and v >> (width - 1) else v
    if onnx_name in SUB_BYTE_FLOAT_BITS:
        return decode_minifloat(onnx_name, bits & ((1 << SUB_BYTE_FLOAT_BITS[onnx_name]) - 1))
    if onnx_name in MINIFLOATS:
        return decode_minifloat(onnx_name, bits)
    if onnx_name == "FLOAT8E8M0":
        return decode_e8m0(bits)
    if onnx_name == "FLOAT":
        return decode_float32(bits)
    if onnx_name == "DOUBLE":
        return decode_float64(bits)
    signed = onnx_name.startswith("INT")
    return bits - (1 << 8 * itemsize) if signed and bits >> (8 * itemsize - 1) else bits


def int_range(dml: str) -> tuple[int, int]:
    _, b, signed, _ = DML_TYPES[dml]
    return (-(1 << (b - 1)), (1 << (b - 1)) - 1) if signed else (0, (1 << b) - 1)


def convert(onnx_name: str, dml: str, conversion: str, bits: int, itemsize: int) -> int:
    """The DML element bits for one source element (for "emulate": the 8 source bytes, range-checked)."""
    if conversion == "native":
        return bits & ((1 << DML_TYPES[dml][1]) - 1)  # a bit copy, NaN payloads and all
    value = source_value(onnx_name, bits, itemsize)
    if conversion in ("emulate", "narrow"):
        assert isinstance(value, int)
        lo, hi = int_range(dml)
        if not lo <= value <= hi:
            raise ValueRangeError(f"{value} does not fit {dml}")
        return bits if conversion == "emulate" else value & 0xFFFFFFFF
    if conversion == "saturate":
        assert isinstance(value, int)
        lo, hi = int_range(dml)
        return min(max(value, lo), hi) & 0xFFFFFFFF
    if conversion == "lossy":
        assert isinstance(value, (float, NaN))
        return lossy_nan(value) if isinstance(value, NaN) else encode_float("FLOAT32", value)
    # widen
    if DML_TYPES[dml][3]:
        assert isinstance(value, (float, NaN))
        return widen_nan(onnx_name, dml, value) if isinstance(value, NaN) else encode_float(dml, value)
    assert isinstance(value, int)
    lo, hi = int_range(dml)
    assert lo <= value <= hi  # an exact candidate holds every source value
    return value & ((1 << DML_TYPES[dml][1]) - 1)


# --- layout ----------------------------------------------------------------------------------------------------


def min_buffer_size(bits: int, sizes: Sequence[int], strides: Sequence[int] | None) -> int:
    """DirectMLX DMLCalcBufferTensorSize, bit-based (docs/directml-facts.md): whole bytes, rounded up to 4."""
    if strides is None:
        count = math.prod(sizes)
    else:
        count = sum((s - 1) * st for s, st in zip(sizes, strides, strict=True)) + 1
    nbytes = (count * bits + 7) // 8
    return (nbytes + 3) // 4 * 4


def packed_strides(sizes: Sequence[int]) -> list[int]:
    return [math.prod(sizes[k + 1 :]) for k in range(len(sizes))]


def write_element(data: bytearray, pos: int, bits_per: int, value: int) -> None:
    """Element at position pos occupies bits [pos*bits_per, (pos+1)*bits_per) of the little-endian buffer."""
    if bits_per % 8 == 0:
        n = bits_per // 8
        data[pos * n : (pos + 1) * n] = value.to_bytes(n, "little")
        return
    for b in range(bits_per):  # sub-byte: bit by bit, LSB first (first element in the low nibble)
        if (value >> b) & 1:
            off = pos * bits_per + b
            data[off // 8] |= 1 << (off % 8)


def read_element(data: bytes, pos: int, bits_per: int) -> int:
    value = 0
    for b in range(bits_per):
        off = pos * bits_per + b
        value |= ((data[off // 8] >> (off % 8)) & 1) << b
    return value


def prepare(
    arr: np.ndarray,
    *,
    target: RefTarget = RefTarget(),
    strides: Sequence[int] | None = None,
    min_dims: int | None = None,
) -> dict[str, Any]:
    """The reference answer for dmlbridge.prepare: the PreparedTensor fields, data as bytes. Below feature level
    3.0 every buffer tensor has 4 or 5 dimensions: min_dims None means 4 there (1 elsewhere), and less is refused."""
    onnx_name = onnx_type_name(arr.dtype)
    dml, conversion = map_type(onnx_name, target)
    _, dml_bits, _, _ = DML_TYPES[dml]

    least = 4 if target.max_dims() == 5 else 1  # (the levels below 3.0 are the ones of 5 dimensions at most)
    if min_dims is None:
        min_dims = least
    elif min_dims < least:
        raise InvalidArgumentError("min_dims below the 4 dimensions of feature levels below 3.0")
    base = list(arr.shape) if arr.ndim else [1]
    if min_dims > target.max_dims():
        raise LayoutError("min_dims above the target's maximum dimension count")
    sizes = [1] * max(0, min_dims - len(base)) + base
    npad = len(sizes) - len(base)
    if len(sizes) > target.max_dims():
        raise LayoutError("too many dimensions")
    if any(s == 0 for s in sizes):
        raise LayoutError("zero-size dimension")
    if any(s > UINT32_MAX for s in sizes) or math.prod(sizes) > UINT32_MAX:
        raise LayoutError("too many elements")

    logical: list[int] | None
    if strides is None:
        logical = None
    else:
        given = [int(s) for s in strides]
        if any(s < 0 or s > UINT32_MAX for s in given):
            raise LayoutError("stride out of UINT32 range")
        if len(given) == len(sizes):
            logical = given
        elif arr.ndim and len(given) == arr.ndim:
            span = sum((s - 1) * st for s, st in zip(base, given, strict=True)) + 1
            logical = [span] * npad + given
        else:
            raise LayoutError("wrong number of strides")
        if any(s > UINT32_MAX for s in logical):
            raise LayoutError("padding stride out of UINT32 range")
    place = logical if logical is not None else packed_strides(sizes)
    span = sum((s - 1) * st for s, st in zip(sizes, place, strict=True)) + 1
    if span - 1 > UINT32_MAX:  # DirectML computes element indices in 32 bits
        raise LayoutError("the last element's index does not fit UINT32")

    if conversion == "emulate":
        elem_bits = 64
        desc_strides: list[int] | None = [2 * s for s in place]
        if any(s > UINT32_MAX for s in desc_strides) or 2 * (span - 1) > UINT32_MAX:
            raise LayoutError("the doubled strides of the emulation do not fit UINT32")
        total = 8 * span
    else:
        elem_bits = dml_bits
        desc_strides = logical
        total = min_buffer_size(dml_bits, sizes, logical)

    data = bytearray(total)
    placed: dict[int, int] = {}
    for idx in np.ndindex(*arr.shape):
        v = convert(onnx_name, dml, conversion, element_bits(arr, idx), arr.dtype.itemsize)
        pos = sum(i * st for i, st in zip(idx, place[npad:] if arr.ndim else [], strict=True))
        if pos in placed:
            if placed[pos] != v:
                raise LayoutError(f"two elements at position {pos} differ")
            continue
        placed[pos] = v
        write_element(data, pos, elem_bits, v)

    return {
        "onnx_type": ONNX_TYPES[onnx_name],
        "dml_type": DML_TYPES[dml][0],
        "conversion": conversion,
        "sizes": sizes,
        "strides": desc_strides,
        "total_tensor_size_in_bytes": total,
        "data": bytes(data),
    }


def decode(data: bytes, dml_value: int, sizes: Sequence[int], strides: Sequence[int] | None) -> list[int]:
    """The element bits dmlbridge.decode should give, in C order of sizes (the element at sum(i_k * stride_k))."""
    bits = DML_TYPES[DML_NAME_OF_VALUE[dml_value]][1]
    place = list(strides) if strides is not None else packed_strides(sizes)
    return [
        read_element(data, sum(i * st for i, st in zip(idx, place, strict=True)), bits) for idx in np.ndindex(*sizes)
    ]


# --- building test inputs ------------------------------------------------------------------------------------


def build_array(spec: dict[str, Any]) -> np.ndarray:
    """A source array from a vector's input: dtype name, shape, hex of the C-order little-endian elements, and
    optionally byteorder '>' (numpy dtypes), order 'F', or view 'reversed' / 'strided' (non-contiguous) /
    'unaligned'."""
    dt = resolve_dtype(spec["dtype"])
    arr = np.frombuffer(bytes.fromhex(spec["hex"]), dtype=dt).reshape(spec["shape"]).copy()
    if spec.get("byteorder") == ">":
        arr = arr.byteswap().view(dt.newbyteorder(">"))
    if spec.get("order") == "F":
        arr = np.asfortranarray(arr)
    view = spec.get("view")
    if view == "reversed":  # negative strides on every axis
        arr = np.flip(np.flip(arr).copy())
    elif view == "unaligned":  # the elements start one byte into a buffer: flags.aligned is False
        buf = np.zeros(arr.nbytes + 1, dtype=np.uint8)
        buf[1:] = np.frombuffer(arr.tobytes(), dtype=np.uint8)
        arr = buf[1:].view(arr.dtype).reshape(arr.shape)
    elif view == "strided":  # every other element of a larger array along the last axis
        big = np.zeros((*arr.shape[:-1], 2 * arr.shape[-1]), dtype=arr.dtype)
        big[..., ::2] = arr
        arr = big[..., ::2]
    return arr
