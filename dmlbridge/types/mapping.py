"""The ONNX -> DirectML type mapping: for each ONNX type, the narrowest DML type that holds it exactly.

The candidate lists below are the whole rule (docs/decisions.md explains them): the first candidate the target
supports wins. Integers never fall back to floats nor floats to integers, because operators treat them
differently even where the values would fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dmlbridge.errors import UnsupportedTypeError
from dmlbridge.types.data_types import DmlDataType as D
from dmlbridge.types.data_types import FeatureLevel
from dmlbridge.types.data_types import OnnxDataType as O
from dmlbridge.types.target import Target

__all__ = ["Conversion", "MappingRow", "dml_type_for", "mapping_table", "resolve"]

Conversion = Literal["native", "widen", "emulate", "narrow", "saturate", "lossy", "unsupported"]

_UNSIGNED_FROM_8 = (D.UINT8, D.UINT16, D.INT16, D.UINT32, D.INT32, D.UINT64, D.INT64)
_SIGNED_FROM_8 = (D.INT8, D.INT16, D.INT32, D.INT64)
# A 4-bit unsigned value fits INT8 too, so INT8 comes before the 16-bit types.
_UNSIGNED_FROM_4 = (D.UINT4, D.UINT8, D.INT8, D.UINT16, D.INT16, D.UINT32, D.INT32, D.UINT64, D.INT64)
_SMALL_FLOAT = (D.FLOAT16, D.FLOAT32, D.FLOAT64)

_CANDIDATES: dict[O, tuple[D, ...]] = {
    O.FLOAT: (D.FLOAT32, D.FLOAT64),
    O.UINT8: _UNSIGNED_FROM_8,
    O.INT8: _SIGNED_FROM_8,
    O.UINT16: (D.UINT16, D.UINT32, D.INT32, D.UINT64, D.INT64),
    O.INT16: (D.INT16, D.INT32, D.INT64),
    O.INT32: (D.INT32, D.INT64),
    O.INT64: (D.INT64,),
    O.BOOL: (D.UINT8, D.INT8, D.UINT16, D.INT16, D.UINT32, D.INT32, D.UINT64, D.INT64),
    O.FLOAT16: _SMALL_FLOAT,
    O.DOUBLE: (D.FLOAT64,),
    O.UINT32: (D.UINT32, D.UINT64, D.INT64),
    O.UINT64: (D.UINT64,),
    O.BFLOAT16: (D.FLOAT32, D.FLOAT64),
    O.FLOAT8E4M3FN: _SMALL_FLOAT,
    O.FLOAT8E4M3FNUZ: _SMALL_FLOAT,
    O.FLOAT8E5M2: _SMALL_FLOAT,
    O.FLOAT8E5M2FNUZ: _SMALL_FLOAT,
    O.UINT4: _UNSIGNED_FROM_4,
    O.INT4: (D.INT4, *_SIGNED_FROM_8),
    O.FLOAT4E2M1: _SMALL_FLOAT,
    O.FLOAT8E8M0: (D.FLOAT32, D.FLOAT64),
    O.UINT2: _UNSIGNED_FROM_4,
    O.INT2: (D.INT4, *_SIGNED_FROM_8),
    O.FLOAT6E2M3: _SMALL_FLOAT,
    O.FLOAT6E3M2: _SMALL_FLOAT,
}

# The DML type of the same name, for telling "native" from "widen".
_SAME_NAME: dict[O, D] = {
    O.FLOAT: D.FLOAT32,
    O.DOUBLE: D.FLOAT64,
    **{o: D[o.name] for o in O if o.name in D.__members__ and o is not O.UNDEFINED},
}

# int64 modes: the 32-bit type that stands in when the 64-bit one is missing.
_NARROW_64 = {O.INT64: D.INT32, O.UINT64: D.UINT32}

_NO_DML_TYPE = {
    O.UNDEFINED: "UNDEFINED has no values",
    O.STRING: "DirectML has no string tensors",
    O.COMPLEX64: "DirectML has no complex tensors; split real and imaginary parts into two FLOAT tensors",
    O.COMPLEX128: "DirectML has no complex tensors; split real and imaginary parts into two DOUBLE tensors",
}


@dataclass(frozen=True)
class MappingRow:
    """How one ONNX data type becomes a DirectML type on a given target.

    Example:
        >>> import dmlbridge
        >>> row = dmlbridge.mapping_table()[dmlbridge.OnnxDataType.BOOL]
        >>> row.dml_type.name, row.conversion, row.lossless
        ('UINT8', 'widen', True)
        >>> row.reason
        'DirectML has no bool: stored as UINT8 0 or 1 (DirectML/ONNX Runtime convention)'
    """

    onnx_type: int
    onnx_name: str
    dml_type: D | None
    conversion: Conversion
    lossless: bool
    reason: str


def resolve(onnx_type: O | int, target: Target | None = None) -> MappingRow:
    """The mapping of one ONNX type on ``target`` (default: feature level 6_4, every type), as a MappingRow.

    Never raises for a known ONNX type: a type with no DML representation gets conversion "unsupported" and a
    reason that says what to change.
    """
    target = Target() if target is None else target
    onnx = O.parse(onnx_type)
    if onnx in _NO_DML_TYPE:
        return MappingRow(int(onnx), onnx.name, None, "unsupported", False, _NO_DML_TYPE[onnx])
    for dml in _CANDIDATES[onnx]:
        if target.supports(dml):
            if dml is _SAME_NAME.get(onnx):
                return MappingRow(int(onnx), onnx.name, dml, "native", True, "stored as is")
            return MappingRow(int(onnx), onnx.name, dml, "widen", True, _widen_reason(onnx, dml, target))
    level = target.feature_level.dotted
    if onnx in _NARROW_64:
        small = _NARROW_64[onnx]
        if target.supports(small):
            mode = target.int64
            if mode == "saturate":
                return MappingRow(
                    int(onnx), onnx.name, small, mode, False,
                    f"target (FL {level}) lacks {onnx.name}: values written as 4-byte {small.name}, clamped to its "
                    "range (allow_lossy; each entry counts the values clamped)",
                )
            how = (
                "8-byte elements described as {0} with doubled strides (ONNX Runtime's later scheme, INT64 as "
                "INT32 and UINT64 as UINT32)"
                if mode == "emulate"
                else "values written as 4-byte {0}"
            ).format(small.name)
            return MappingRow(
                int(onnx), onnx.name, small, mode, False,
                f"target (FL {level}) lacks {onnx.name}: {how}; every value must fit {small.name}",
            )
    if onnx is O.DOUBLE and target.supports(D.FLOAT32):
        if target.allow_lossy:
            return MappingRow(
                int(onnx), onnx.name, D.FLOAT32, "lossy", False,
                f"target (FL {level}) lacks FLOAT64: rounded to FLOAT32 (round to nearest even)",
            )
        return MappingRow(
            int(onnx), onnx.name, None, "unsupported", False,
            f"target (FL {level}) lacks FLOAT64; pass allow_lossy=True to round DOUBLE to FLOAT32",
        )
    wanted = ", ".join(d.name for d in _CANDIDATES[onnx])
    return MappingRow(
        int(onnx), onnx.name, None, "unsupported", False,
        f"target (FL {level}) supports none of {wanted}, which could hold {onnx.name} exactly",
    )


# Where storing every value exactly still surprises, the mapping table says so.
_SURPRISES = {
    O.BFLOAT16: "; codes below 2^-126 become FLOAT32 subnormals, which Direct3D's float arithmetic flushes to zero",
    O.FLOAT8E8M0: "; the code 0 (2^-127) becomes a FLOAT32 subnormal, which Direct3D's float arithmetic flushes to "
                  "zero",
    O.UINT2: "; only DirectML's QUANTIZE and DEQUANTIZE read 4-bit types",
    O.INT2: "; only DirectML's QUANTIZE and DEQUANTIZE read 4-bit types",
}


def _widen_reason(onnx: O, dml: D, target: Target) -> str:
    if onnx is O.BOOL:
        reason = f"DirectML has no bool: stored as {dml.name} 0 or 1 (DirectML/ONNX Runtime convention)"
        if target.feature_level < FeatureLevel.FL_2_0:
            reason += "; at feature level 1.0 the logical operators take UINT32 instead"
        return reason
    surprise = _SURPRISES.get(onnx, "") if dml in (D.FLOAT32, D.UINT4, D.INT4) else ""
    if onnx.name in D.__members__ or onnx is O.FLOAT16:
        return f"target lacks {onnx.name}; {dml.name} holds every value exactly{surprise}"
    return f"DirectML has no {onnx.name}; {dml.name} holds every value exactly{surprise}"


def mapping_table(target: Target | None = None) -> list[MappingRow]:
    """One MappingRow per ONNX data type 0..28, in order, for ``target`` (default: FL 6_4, every type).

    Example:
        >>> import dmlbridge
        >>> rows = dmlbridge.mapping_table(dmlbridge.Target("2.0"))
        >>> len(rows), rows[7].onnx_name, rows[7].dml_type.name, rows[7].conversion, rows[7].lossless
        (29, 'INT64', 'INT32', 'emulate', False)
    """
    target = Target() if target is None else target
    return [resolve(onnx, target) for onnx in O]


def dml_type_for(onnx_type: O | int | str, target: Target | None = None) -> D:
    """The DML type an ONNX type becomes on ``target``; raises UnsupportedTypeError when there is none.

    Example:
        >>> import dmlbridge
        >>> dmlbridge.dml_type_for("BFLOAT16")
        <DmlDataType.FLOAT32: 1>
        >>> dmlbridge.dml_type_for(dmlbridge.OnnxDataType.FLOAT16, dmlbridge.Target(supported={"FLOAT32"})).name
        'FLOAT32'
    """
    row = resolve(O.parse(onnx_type), target)
    if row.dml_type is None:
        raise UnsupportedTypeError(f"ONNX {row.onnx_name} cannot be a DirectML tensor: {row.reason}")
    return row.dml_type
