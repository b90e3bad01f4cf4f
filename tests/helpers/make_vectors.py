"""Build tests/helpers/vectors/known_answers.json from the reference encoder (tests/helpers/reference.py).

Run ``python tests/helpers/make_vectors.py`` after changing the reference or the case list; ``test_known_answers.py``
regenerates the file in memory and fails when the checked-in copy differs, so it cannot go stale.

A case is {"id", "input": {"dtype", "shape", "hex", optional "byteorder"/"order"/"view"}, "target",
"strides", "min_dims"} plus either "expected" (the PreparedTensor fields, data as hex) or "error" (the name of
the DmlBridgeError subclass). Input hex holds the elements in logical C order, each little-endian (one byte
per element for the sub-byte ml_dtypes types); see reference.build_array.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference as ref
from reference import RefTarget

VECTORS = Path(__file__).resolve().parent / "vectors" / "known_answers.json"

ALL_DML = frozenset(ref.DML_TYPES)
TARGETS: dict[str, RefTarget] = {
    "default": RefTarget(),
    "fl62": RefTarget("FL_6_2"),
    "no16-no64-emulate": RefTarget(supported=ALL_DML - {"FLOAT16", "FLOAT64", "UINT64", "INT64"}),
    "no16-no64-narrow": RefTarget(supported=ALL_DML - {"FLOAT16", "FLOAT64", "UINT64", "INT64"}, int64="narrow"),
    # Every candidate list has to walk past missing types: FLOAT->FLOAT64, UINT8->INT16, BOOL->INT8, ...
    "sparse": RefTarget(supported=frozenset({"FLOAT64", "INT8", "INT16", "UINT32", "INT64", "UINT64"})),
}
EXTRA_TARGETS: dict[str, RefTarget] = {
    "fl21": RefTarget("FL_2_1"),
    "fl21-narrow": RefTarget("FL_2_1", int64="narrow"),
    "fl21-lossy": RefTarget("FL_2_1", allow_lossy=True),
    "no64-lossy": RefTarget(supported=ALL_DML - {"FLOAT64"}, allow_lossy=True),
    "no64-nolossy": RefTarget(supported=ALL_DML - {"FLOAT64"}),
    "int8-only": RefTarget(supported=frozenset({"INT8"})),
    "no-int32-narrow": RefTarget(supported=ALL_DML - {"INT32", "INT64"}, int64="narrow"),
    "no64-saturate": RefTarget(supported=ALL_DML - {"FLOAT64", "UINT64", "INT64"}, int64="saturate",
                               allow_lossy=True),
    "fl21-saturate": RefTarget("FL_2_1", int64="saturate", allow_lossy=True),
}
ALL_TARGETS = {**TARGETS, **EXTRA_TARGETS}


def f32(x: float) -> int:
    return int.from_bytes(struct.pack("<f", x), "little")


def f64(x: float) -> int:
    return int.from_bytes(struct.pack("<d", x), "little")


# Edge values per ONNX type, as element bit patterns (ints are two's complement of the element width).
EDGE_BITS: dict[str, list[int]] = {
    "FLOAT": [
        0x00000000, 0x80000000, f32(1.0), f32(-2.5), 0x7F800000, 0xFF800000,  # ±0, ±inf
        0x7FC00000, 0x7FC00001, 0xFFBFFFFF, 0x7F800001, 0xFFC00000,  # NaNs: quiet, payload, signalling
        0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,  # subnormals, min normal, ±max
    ],
    "FLOAT16": [
        0x0000, 0x8000, 0x3C00, 0xC100, 0x7C00, 0xFC00, 0x7E00, 0x7E01, 0x7C01, 0xFD55,
        0x0001, 0x83FF, 0x0400, 0x7BFF, 0xFBFF,
    ],
    "DOUBLE": [
        0, 1 << 63, f64(1.0), f64(-0.1), f64(float("inf")), f64(float("-inf")),
        0x7FF8000000000000, 0x7FF8000000000001, 0x7FF0000000000001, 0xFFF7FFFFFFFFFFFF, 0xFFF0000020000000,
        0x0000000000000001, 0x800FFFFFFFFFFFFF, 0x0010000000000000, 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF,
        # float32 rounding: ties to even, the FLT_MAX boundary, float32 subnormals and underflow to ±0
        f64(1 + 2**-24), f64(1 + 3 * 2**-24), f64(1 + 2**-24 + 2**-40), f64(3.4028235677973366e38),
        f64(3.4028235677973362e38), f64(-3.4028236692093846e38), f64(2**-149), f64(-(2**-150)), f64(3 * 2**-150),
        f64(1e300), f64(-1e-300),
    ],
    "BFLOAT16": [
        0x0000, 0x8000, 0x3F80, 0xC020, 0x7F80, 0xFF80, 0x7FC0, 0x7FC1, 0x7F81, 0xFFFF,
        0x0001, 0x807F, 0x0080, 0x7F7F, 0xFF7F,
    ],
    "BOOL": [0, 1, 2, 0xFF, 0x80, 1, 0],
}  # fmt: skip
# Every bit pattern of the small float types (their edges are all there is).
for _name, _n in [
    ("FLOAT8E4M3FN", 256), ("FLOAT8E4M3FNUZ", 256), ("FLOAT8E5M2", 256), ("FLOAT8E5M2FNUZ", 256),
    ("FLOAT8E8M0", 256), ("FLOAT4E2M1", 16), ("FLOAT6E2M3", 64), ("FLOAT6E3M2", 64),
]:  # fmt: skip
    EDGE_BITS[_name] = list(range(_n))

INT_BITS = {"UINT8": 8, "INT8": 8, "UINT16": 16, "INT16": 16, "INT32": 32, "INT64": 64, "UINT32": 32, "UINT64": 64}


def int_edges(name: str) -> list[int]:
    b = INT_BITS[name]
    if name.startswith("U"):
        return [0, 1, 2, 0x7F, 0x80, (1 << (b - 1)) - 1, 1 << (b - 1), (1 << b) - 2, (1 << b) - 1]
    lo, hi = -(1 << (b - 1)), (1 << (b - 1)) - 1
    return [0, 1, -1, 2, -2, 0x7F, -0x80, lo, lo + 1, hi - 1, hi]


# Values that fit the 32-bit type, for emulate/narrow successes.
INT64_IN32 = [0, 1, -1, 2**31 - 1, -(2**31), 123456789, -987654321]
UINT64_IN32 = [0, 1, 2**31, 2**32 - 1, 0xDEADBEEF]


def itemsize(dtype_name: str) -> int:
    return ref.resolve_dtype(dtype_name).itemsize


def hex_of(dtype_name: str, values: list[int]) -> str:
    """Element bit patterns (or signed ints) -> the little-endian hex of a vector input."""
    n = itemsize(dtype_name)
    return b"".join((v % (1 << 8 * n)).to_bytes(n, "little") for v in values).hex()


def sub_byte_hex(onnx: str, values: list[int]) -> str:
    """One byte per element as ml_dtypes stores int4/uint4/int2/uint2: the value's low bits."""
    width = ref.SUB_BYTE_INT[onnx][0]
    return bytes(v & ((1 << width) - 1) for v in values).hex()


def spec(dtype_name: str, shape: list[int], values: list[int], **extra: Any) -> dict[str, Any]:
    onnx = next((o for o, d in ref.ONNX_DTYPE_NAME.items() if d == dtype_name), None)
    h = sub_byte_hex(onnx, values) if onnx in ref.SUB_BYTE_INT else hex_of(dtype_name, values)
    return {"dtype": dtype_name, "shape": shape, "hex": h, **extra}


def case(
    cid: str,
    inp: dict[str, Any],
    target: str = "default",
    strides: list[int] | None = None,
    min_dims: int | None = None,
) -> dict[str, Any]:
    """Run the reference on one input and record its answer (or its error's class name)."""
    out: dict[str, Any] = {
        "id": cid,
        "input": inp,
        "target": ALL_TARGETS[target].to_json(),
        "target_name": target,
        "strides": strides,
        "min_dims": min_dims,
    }
    try:
        got = ref.prepare(ref.build_array(inp), target=ALL_TARGETS[target], strides=strides, min_dims=min_dims)
    except ref.RefError as e:
        out["error"] = type(e).__name__
    else:
        out["expected"] = {**got, "data": got["data"].hex()}
    return out


def edge_inputs() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Per ONNX type with values: the named inputs every standard target is run on."""
    inputs: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for onnx, dtype_name in ref.ONNX_DTYPE_NAME.items():
        cases: list[tuple[str, dict[str, Any]]] = []
        if onnx in EDGE_BITS:
            vals = EDGE_BITS[onnx]
            shape = [16, len(vals) // 16] if len(vals) >= 64 else [len(vals)]
            cases.append(("edge", spec(dtype_name, shape, vals)))
        elif onnx in INT_BITS:
            cases.append(("edge", spec(dtype_name, [len(int_edges(onnx))], int_edges(onnx))))
            if onnx == "INT64":
                cases.append(("in32", spec(dtype_name, [len(INT64_IN32)], INT64_IN32)))
                cases.append(("in32-2d", spec(dtype_name, [2, 3], INT64_IN32[1:])))
            if onnx == "UINT64":
                cases.append(("in32", spec(dtype_name, [len(UINT64_IN32)], UINT64_IN32)))
        elif onnx in ref.SUB_BYTE_INT:
            width, signed = ref.SUB_BYTE_INT[onnx]
            lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
            full = list(range(lo, hi + 1))
            cases.append(("all", spec(dtype_name, [len(full)], full)))
            for n in (1, 3, 5):  # odd lengths: the spare nibble must be zero
                cases.append((f"len{n}", spec(dtype_name, [n], [full[(7 * i + 3) % len(full)] for i in range(n)])))
            cases.append(("2x3", spec(dtype_name, [2, 3], [lo, hi, 0, 1, hi, lo])))
        elif onnx == "STRING":
            cases.append(("str", {"dtype": "<U2", "shape": [2], "hex": "abc\0".encode("utf-32-le").hex()}))
            cases.append(("bytes", {"dtype": "S3", "shape": [2], "hex": b"abcde\0".hex()}))
        elif onnx in ("COMPLEX64", "COMPLEX128"):
            n = itemsize(dtype_name)
            cases.append(("edge", {"dtype": dtype_name, "shape": [2], "hex": (b"\0" * n + b"\x3f" * n).hex()}))
        inputs[onnx] = cases
    return inputs


def layout_cases() -> list[dict[str, Any]]:
    c: list[dict[str, Any]] = []
    s = spec
    f6 = [f32(x) for x in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)]
    # DirectML doc example: UINT4 [1,2,3,4,5] -> 21 43 05 (padded to 4 bytes)
    c.append(case("UINT4/default/doc-example", s("uint4", [5], [1, 2, 3, 4, 5])))
    c.append(case("INT4/default/-8,7,-1", s("int4", [3], [-8, 7, -1])))
    c.append(case("BOOL/default/0,2,1", s("bool", [3], [0, 2, 1])))
    # strides: gaps, transposed, broadcast, overlap
    c.append(case("FLOAT/default/gaps", s("float32", [2, 3], f6), strides=[8, 2]))
    c.append(case("FLOAT/default/transposed", s("float32", [2, 3], f6), strides=[1, 2]))
    c.append(case("INT16/default/transposed-3d", s("int16", [2, 3, 2], list(range(-6, 6))), strides=[1, 2, 6]))
    c.append(case("FLOAT16/default/broadcast-rows", s("float16", [3, 2], [0x3C00, 0x4000] * 3), strides=[0, 1]))
    c.append(case("FLOAT16/default/broadcast-conflict", s("float16", [2, 2], [0x3C00, 0x4000, 0x3C00, 0x4001]),
                  strides=[0, 1]))  # fmt: skip
    c.append(case("FLOAT/default/broadcast-zero-signs", s("float32", [2], [0, 0x80000000]), strides=[0]))
    c.append(case("FLOAT/default/broadcast-nan-equal", s("float32", [2], [0x7FC00001, 0x7FC00001]), strides=[0]))
    c.append(case("INT32/default/overlap-equal", s("int32", [2, 2], [1, 2, 2, 3]), strides=[1, 1]))
    c.append(case("INT32/default/overlap-conflict", s("int32", [2, 2], [1, 2, 5, 3]), strides=[1, 1]))
    c.append(case("BOOL/default/broadcast-nonzero-bytes", s("bool", [2, 2], [1, 0, 7, 0]), strides=[0, 1]))
    c.append(case("UINT8/default/all-zero-strides", s("uint8", [2, 3], [9] * 6), strides=[0, 0]))
    # the index of the last element, sum((size_i - 1) * stride_i), must fit UINT32 (each stride does)
    c.append(case("INT8/default/last-index-2^32", s("int8", [2, 2], [1, 2, 3, 4]), strides=[2**31, 2**31]))
    c.append(case("INT64/no16-no64-emulate/doubled-last-index", s("int64", [3], [1, 2, 3]),
                  target="no16-no64-emulate", strides=[2**30]))  # fmt: skip
    c.append(case("UINT8/default/packed-strides-given", s("uint8", [2, 3], [1, 2, 3, 4, 5, 6]), strides=[3, 1]))
    c.append(case("FLOAT8E4M3FN/default/broadcast-nan", s("float8_e4m3fn", [2], [0x7F, 0x7F]), strides=[0]))
    c.append(case("BFLOAT16/default/gaps", s("bfloat16", [3], [0x3F80, 0x7FC1, 0xFF80]), strides=[3]))
    c.append(case("INT8/fl62/int4-source-strided", s("int4", [2, 2], [-8, 7, -1, 3]), target="fl62", strides=[3, 1]))
    # 4-bit positions: odd offsets, gaps, transposes, broadcast
    c.append(case("INT4/default/stride2", s("int4", [3], [-8, 7, -1]), strides=[2]))
    c.append(case("INT4/default/stride3", s("int4", [3], [1, 2, 3]), strides=[3]))
    c.append(case("UINT4/default/transposed", s("uint4", [2, 3], [1, 2, 3, 4, 5, 6]), strides=[1, 2]))
    c.append(case("UINT4/default/broadcast", s("uint4", [3, 3], [1, 2, 3] * 3), strides=[0, 1]))
    c.append(case("UINT4/default/broadcast-conflict", s("uint4", [2, 2], [1, 2, 1, 3]), strides=[0, 1]))
    c.append(case("UINT2/default/stride2", s("uint2", [3], [3, 2, 1]), strides=[2]))
    c.append(case("INT4/default/min-dims4-own-strides", s("int4", [3], [-1, -2, -3]), strides=[2], min_dims=4))
    # min_dims padding
    c.append(case("FLOAT/default/min-dims4", s("float32", [2, 3], f6), min_dims=4))
    c.append(case("FLOAT/default/min-dims4-own-strides", s("float32", [2, 3], f6), strides=[4, 1], min_dims=4))
    c.append(case("FLOAT/default/min-dims4-final-strides", s("float32", [2, 3], f6), strides=[0, 7, 3, 1],
                  min_dims=4))  # fmt: skip
    c.append(case("FLOAT/default/min-dims0", s("float32", [2, 3], f6), min_dims=0))
    c.append(case("FLOAT/default/min-dims2-of-3", s("float32", [1, 2, 3], f6), min_dims=2))
    c.append(case("UINT4/default/min-dims4-odd", s("uint4", [3], [1, 2, 3]), min_dims=4))
    c.append(case("FLOAT/default/min-dims8", s("float32", [2], f6[:2]), min_dims=8))
    c.append(case("FLOAT/default/min-dims9", s("float32", [2], f6[:2]), min_dims=9))
    c.append(case("FLOAT/fl21/min-dims5", s("float32", [2], f6[:2]), target="fl21", min_dims=5))
    c.append(case("FLOAT/fl21/min-dims6", s("float32", [2], f6[:2]), target="fl21", min_dims=6))
    c.append(case("FLOAT/fl21/min-dims1", s("float32", [2], f6[:2]), target="fl21", min_dims=1))  # below 4
    c.append(case("FLOAT/fl21/min-dims4", s("float32", [2], f6[:2]), target="fl21", min_dims=4))
    # 0-d arrays
    c.append(case("FLOAT/default/0d", s("float32", [], [f32(-1.5)])))
    c.append(case("FLOAT/default/0d-min-dims4", s("float32", [], [f32(-1.5)]), min_dims=4))
    c.append(case("INT4/default/0d", s("int4", [], [-3])))
    c.append(case("BOOL/default/0d", s("bool", [], [5])))
    c.append(case("INT64/no16-no64-emulate/0d", s("int64", [], [-5]), target="no16-no64-emulate"))
    c.append(case("FLOAT/default/0d-strides", s("float32", [], [f32(2.0)]), strides=[5]))
    c.append(case("FLOAT8E5M2/default/0d", s("float8_e5m2", [], [0x7D])))
    # byte order, memory order, views
    c.append(case("FLOAT/default/big-endian", s("float32", [2, 3], f6, byteorder=">")))
    c.append(case("FLOAT/default/big-endian-nan", s("float32", [3], [0x7FC00001, 0xFFBFFFFF, 0x00000001],
                                                    byteorder=">")))  # fmt: skip
    c.append(case("INT16/default/big-endian", s("int16", [3], [-2, 0x1234, -32768], byteorder=">")))
    c.append(case("FLOAT16/default/big-endian", s("float16", [3], [0x7E01, 0x3C00, 0x8001], byteorder=">")))
    c.append(case("FLOAT16/no16-no64-emulate/big-endian", s("float16", [3], [0x7E01, 0x3C00, 0x8001], byteorder=">"),
                  target="no16-no64-emulate"))  # fmt: skip
    c.append(case("DOUBLE/default/big-endian", s("float64", [2], [f64(-0.1), 0x7FF0000000000001], byteorder=">")))
    c.append(case("DOUBLE/no64-lossy/big-endian", s("float64", [2], [f64(-0.1), 0x7FF0000000000001], byteorder=">"),
                  target="no64-lossy"))  # fmt: skip
    c.append(case("UINT64/no16-no64-emulate/big-endian", s("uint64", [3], [1, 2**32 - 1, 7], byteorder=">"),
                  target="no16-no64-emulate"))  # fmt: skip
    c.append(case("INT64/no16-no64-narrow/big-endian", s("int64", [3], [-1, 2**31 - 1, 7], byteorder=">"),
                  target="no16-no64-narrow"))  # fmt: skip
    c.append(case("UINT32/default/big-endian-strided", s("uint32", [2, 2], [1, 2, 3, 4], byteorder=">"),
                  strides=[1, 3]))  # fmt: skip
    c.append(case("FLOAT/default/fortran", s("float32", [2, 3], f6, order="F")))
    c.append(case("INT4/default/fortran", s("int4", [3, 3], [-8, -7, -6, -5, 0, 1, 2, 3, 7], order="F")))
    c.append(case("UINT16/default/fortran-3d", s("uint16", [2, 3, 2], list(range(12)), order="F")))
    c.append(case("INT16/default/fortran-big-endian", s("int16", [2, 3], [1, -2, 3, -4, 5, -6], order="F",
                                                        byteorder=">")))  # fmt: skip
    c.append(case("FLOAT/default/reversed", s("float32", [2, 3], f6, view="reversed")))
    c.append(case("INT8/default/reversed", s("int8", [4], [-128, -1, 0, 127], view="reversed")))
    c.append(case("UINT4/default/reversed", s("uint4", [5], [1, 2, 3, 4, 5], view="reversed")))
    c.append(case("UINT8/default/strided-view", s("uint8", [2, 3], [1, 2, 3, 4, 5, 6], view="strided")))
    c.append(case("BFLOAT16/default/strided-view", s("bfloat16", [2, 2], [0x3F80, 0x7F81, 0xFF80, 0x0001],
                                                     view="strided")))  # fmt: skip
    c.append(case("FLOAT/default/unaligned", s("float32", [2, 3], f6, view="unaligned")))
    c.append(case("DOUBLE/default/unaligned-big-endian", s("float64", [3], [f64(0.1), 1, 0x7FF0000000000001],
                                                            view="unaligned", byteorder=">")))  # fmt: skip
    c.append(case("UINT64/no16-no64-emulate/unaligned", s("uint64", [2], [3, 2**32 - 1], view="unaligned"),
                  target="no16-no64-emulate"))  # fmt: skip
    # distinct sources that are equal after conversion may share a position
    c.append(case("FLOAT8E5M2/default/broadcast-different-nans", s("float8_e5m2", [3], [0x7D, 0x7E, 0x7F]),
                  strides=[0]))  # fmt: skip
    c.append(case("FLOAT8E4M3FN/no16-no64-emulate/broadcast-sign-differs", s("float8_e4m3fn", [2], [0x7F, 0xFF]),
                  target="no16-no64-emulate", strides=[0]))  # fmt: skip
    c.append(case("DOUBLE/no64-lossy/broadcast-nan-payloads", s("float64", [2], [0x7FF8000000000001,
                  0x7FF8000000000002]), target="no64-lossy", strides=[0]))  # fmt: skip
    c.append(case("DOUBLE/no64-lossy/broadcast-round-differs", s("float64", [2], [f64(1.0), f64(1 + 2**-22)]),
                  target="no64-lossy", strides=[0]))  # fmt: skip
    c.append(case("INT8/fl62/int4-broadcast", s("int4", [2, 2], [-1, 5, -1, 5]), target="fl62", strides=[0, 1]))
    # int64 emulation and narrowing
    for t in ("no16-no64-emulate", "no16-no64-narrow", "fl21", "fl21-narrow"):
        c.append(case(f"INT64/{t}/strided", s("int64", [2, 2], [-1, 2, -(2**31), 2**31 - 1]), target=t,
                      strides=[4, 1]))  # fmt: skip
        c.append(case(f"INT64/{t}/min-dims4", s("int64", [3], [-1, 0, 1]), target=t, min_dims=4))
        c.append(case(f"INT64/{t}/too-big", s("int64", [3], [0, 2**31, 1]), target=t))
        c.append(case(f"INT64/{t}/too-small", s("int64", [2], [-(2**31) - 1, 0]), target=t))
        c.append(case(f"UINT64/{t}/too-big", s("uint64", [2], [2**32 - 1, 2**32]), target=t))
        c.append(case(f"UINT64/{t}/broadcast", s("uint64", [2, 2], [5, 6, 5, 6]), target=t, strides=[0, 1]))
        c.append(case(f"UINT64/{t}/transposed", s("uint64", [2, 3], [1, 2, 3, 4, 5, 6]), target=t, strides=[1, 2]))
    c.append(case("INT64/no-int32-narrow/unsupported", s("int64", [1], [1]), target="no-int32-narrow"))
    # int64 saturation: values outside the 32-bit range clamp to its ends (Slice/Gather sentinels)
    for t in ("no64-saturate", "fl21-saturate"):
        c.append(case(f"INT64/{t}/sentinels", s("int64", [6], [2**63 - 1, -(2**63), 2**31, -(2**31) - 1, 7, -7]),
                      target=t))  # fmt: skip
        c.append(case(f"INT64/{t}/strided", s("int64", [2, 2], [2**40, 2, -(2**40), 2**31 - 1]), target=t,
                      strides=[4, 1]))  # fmt: skip
        c.append(case(f"UINT64/{t}/sentinels", s("uint64", [4], [2**64 - 1, 2**32, 2**32 - 1, 0]), target=t))
        c.append(case(f"UINT64/{t}/broadcast", s("uint64", [2, 2], [2**40, 6, 2**40, 6]), target=t, strides=[0, 1]))
    # lossy DOUBLE
    for t in ("no64-lossy", "fl21-lossy", "no64-nolossy", "fl21"):
        c.append(case(f"DOUBLE/{t}/edge", s("float64", [len(EDGE_BITS["DOUBLE"])], EDGE_BITS["DOUBLE"]), target=t))
    c.append(case("DOUBLE/no64-lossy/strided", s("float64", [2, 2], [f64(0.1), f64(0.2), f64(0.3), f64(0.4)]),
                  target="no64-lossy", strides=[1, 3]))  # fmt: skip
    # rounding may merge distinct doubles into one float32 at a broadcast position: equal after conversion is fine
    c.append(case("DOUBLE/no64-lossy/broadcast-merged", s("float64", [2], [f64(1.0), f64(1 + 2**-30)]),
                  target="no64-lossy", strides=[0]))  # fmt: skip
    c.append(case("FLOAT16/int8-only/unsupported", s("float16", [1], [0x3C00]), target="int8-only"))
    c.append(case("UINT4/int8-only/to-int8", s("uint4", [3], [15, 0, 8]), target="int8-only"))
    c.append(case("BOOL/int8-only/to-int8", s("bool", [3], [0, 3, 1]), target="int8-only"))
    c.append(case("UINT8/int8-only/unsupported", s("uint8", [1], [1]), target="int8-only"))
    # layout errors and limits
    c.append(case("FLOAT/default/zero-size", s("float32", [2, 0], [])))
    c.append(case("FLOAT/default/zero-size-1d", s("float32", [0], [])))
    c.append(case("FLOAT/default/8-dims", s("float32", [1, 2, 1, 1, 1, 1, 1, 2], f6[:4])))
    c.append(case("FLOAT/default/9-dims", s("float32", [1] * 8 + [2], f6[:2])))
    c.append(case("FLOAT/fl21/5-dims", s("float32", [1, 1, 1, 1, 2], f6[:2]), target="fl21"))
    c.append(case("FLOAT/fl21/6-dims", s("float32", [1, 1, 1, 1, 1, 2], f6[:2]), target="fl21"))
    c.append(case("FLOAT/default/negative-stride", s("float32", [2, 3], f6), strides=[3, -1]))
    c.append(case("FLOAT/default/stride-2^32", s("float32", [2], f6[:2]), strides=[2**32]))
    c.append(case("FLOAT/default/stride-2^32-1-size1", s("float32", [1, 2], f6[:2]), strides=[2**32 - 1, 1]))
    c.append(case("FLOAT/default/wrong-stride-count", s("float32", [2, 3], f6), strides=[1]))
    c.append(case("FLOAT/default/wrong-stride-count-padded", s("float32", [2, 3], f6), strides=[6, 3, 1],
                  min_dims=4))  # fmt: skip
    c.append(case("FLOAT/default/padding-stride-overflow", s("float32", [2, 2], f6[:4]), strides=[2**31, 2**31],
                  min_dims=3))  # fmt: skip
    # dtypes ONNX does not have
    c.append(case("none/default/datetime64", {"dtype": "<M8[s]", "shape": [1], "hex": "00" * 8}))
    c.append(case("none/default/void", {"dtype": "V3", "shape": [1], "hex": "000000"}))
    return c


def build_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for onnx, inputs in edge_inputs().items():
        for name, inp in inputs:
            for target in TARGETS:
                cases.append(case(f"{onnx}/{target}/{name}", inp, target=target))
    cases.extend(layout_cases())
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    return cases


def render() -> str:
    """The exact text of known_answers.json (deterministic: fixed order, sorted keys)."""
    doc = {
        "about": "Known-answer vectors for dmlbridge.prepare, generated by tests/helpers/make_vectors.py from "
        "tests/helpers/reference.py. Do not edit by hand.",
        "cases": build_cases(),
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def main() -> None:
    VECTORS.parent.mkdir(exist_ok=True)
    VECTORS.write_text(render())
    n = len(json.loads(VECTORS.read_text())["cases"])
    print(f"wrote {n} cases to {VECTORS}")


if __name__ == "__main__":
    main()
