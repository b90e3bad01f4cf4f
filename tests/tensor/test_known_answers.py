"""Known-answer tests: the checked-in vectors (made by the reference encoder) and hand-worked literal cases."""

from __future__ import annotations

import ctypes
import json
import mmap
import re
import struct
from pathlib import Path
from typing import Any

import make_vectors
import ml_dtypes
import numpy as np
import pytest
import reference as ref
from builders import model_of

import dmlbridge
from dmlbridge import DmlDataType, FeatureLevel, Target

CASES: list[dict[str, Any]] = json.loads(make_vectors.VECTORS.read_text())["cases"]

NO16_NO64 = {t for t in DmlDataType if t is not DmlDataType.UNKNOWN} - {
    DmlDataType.FLOAT16,
    DmlDataType.FLOAT64,
    DmlDataType.UINT64,
    DmlDataType.INT64,
}


def lib_target(d: dict[str, Any]) -> Target:
    sup = d["supported"]
    return Target(
        feature_level=FeatureLevel[d["feature_level"]],
        supported=None if sup is None else {DmlDataType[n] for n in sup},
        int64=d["int64"],
        allow_lossy=d["allow_lossy"],
    )


def assert_matches(t: dmlbridge.PreparedTensor, exp: dict[str, Any]) -> None:
    """Every PreparedTensor field and every byte equals the reference's answer."""
    got = {
        "onnx_type": int(t.onnx_type),
        "dml_type": int(t.dml_type),
        "conversion": t.conversion,
        "sizes": list(t.sizes),
        "strides": None if t.strides is None else list(t.strides),
        "total_tensor_size_in_bytes": t.total_tensor_size_in_bytes,
        "data": np.asarray(t.data).tobytes().hex(),
    }
    assert got == exp
    assert isinstance(t.data, np.ndarray) and t.data.dtype == np.uint8 and t.data.ndim == 1
    assert len(t.data) == t.total_tensor_size_in_bytes
    assert t.desc() == {
        "DataType": exp["dml_type"],
        "Flags": t.flags,
        "DimensionCount": len(exp["sizes"]),
        "Sizes": exp["sizes"],
        "Strides": exp["strides"],
        "TotalTensorSizeInBytes": exp["total_tensor_size_in_bytes"],
        "GuaranteedBaseOffsetAlignment": t.guaranteed_base_offset_alignment,
    }


# --- the vectors -----------------------------------------------------------------------------------------------


def test_vectors_are_current() -> None:
    """The checked-in file is exactly what the reference produces now: the vectors cannot go stale."""
    assert make_vectors.VECTORS.read_text() == make_vectors.render(), "run: python tests/helpers/make_vectors.py"


def test_vectors_cover_every_onnx_type_and_target() -> None:
    seen = {(c["input"]["dtype"], c["target_name"]) for c in CASES}
    for onnx, dtype_name in ref.ONNX_DTYPE_NAME.items():
        if onnx == "STRING":
            continue
        for target in make_vectors.TARGETS:
            assert (dtype_name, target) in seen, (onnx, target)
    assert any(c["input"]["dtype"].startswith(("<U", "S")) for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_vector(case: dict[str, Any]) -> None:
    arr = ref.build_array(case["input"])
    before = (arr.tobytes(), arr.dtype, arr.strides, arr.flags.writeable)
    kwargs = {"target": lib_target(case["target"]), "strides": case["strides"], "min_dims": case["min_dims"]}
    if "error" in case:
        with pytest.raises(dmlbridge.DmlBridgeError) as info:
            dmlbridge.prepare(arr, **kwargs)
        assert type(info.value).__name__ == case["error"], repr(info.value)
        assert isinstance(info.value, getattr(dmlbridge, case["error"]))
        assert str(info.value), "an error must say what is wrong"
    else:
        assert_matches(dmlbridge.prepare(arr, **kwargs), case["expected"])
    assert (arr.tobytes(), arr.dtype, arr.strides, arr.flags.writeable) == before


# --- the mapping table against the reference's rule ------------------------------------------------------------


@pytest.mark.parametrize("name", list(make_vectors.ALL_TARGETS))
def test_mapping_table_matches_reference(name: str) -> None:
    rt = make_vectors.ALL_TARGETS[name]
    target = lib_target(rt.to_json())
    rows = dmlbridge.mapping_table(target)
    assert [int(r.onnx_type) for r in rows] == list(range(29))
    for row in rows:
        onnx = ref.ONNX_NAME_OF_VALUE[int(row.onnx_type)]
        assert row.onnx_name == onnx
        try:
            dml, conversion = ref.map_type(onnx, rt)
        except ref.UnsupportedTypeError:
            assert (row.dml_type, row.conversion, row.lossless) == (None, "unsupported", False), onnx
            with pytest.raises(dmlbridge.UnsupportedTypeError):
                dmlbridge.dml_type_for(int(row.onnx_type), target)
            continue
        assert (row.dml_type, row.conversion) == (DmlDataType[dml], conversion), onnx
        assert row.lossless == (conversion in ("native", "widen")), onnx
        assert row.reason, onnx
        assert dmlbridge.dml_type_for(int(row.onnx_type), target) is DmlDataType[dml]


def test_default_mapping_literal() -> None:
    """The issue's table for the default target, written out by hand."""
    d = {r.onnx_name: (r.dml_type.name if r.dml_type else None, r.conversion) for r in dmlbridge.mapping_table()}
    for name in ("UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "FLOAT16", "UINT32", "UINT64"):
        assert d[name] == (name, "native")
    assert d["FLOAT"] == ("FLOAT32", "native") and d["DOUBLE"] == ("FLOAT64", "native")
    assert d["UINT4"] == ("UINT4", "native") and d["INT4"] == ("INT4", "native")
    assert d["BOOL"] == ("UINT8", "widen")
    assert d["UINT2"] == ("UINT4", "widen") and d["INT2"] == ("INT4", "widen")
    assert d["BFLOAT16"] == d["FLOAT8E8M0"] == ("FLOAT32", "widen")
    for name in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT4E2M1", "FLOAT6E2M3",
                 "FLOAT6E3M2"):  # fmt: skip
        assert d[name] == ("FLOAT16", "widen")
    for name in ("UNDEFINED", "STRING", "COMPLEX64", "COMPLEX128"):
        assert d[name] == (None, "unsupported")


# --- hand-worked literals (struct in the test body, no reference) ----------------------------------------------


def data(t: dmlbridge.PreparedTensor) -> bytes:
    return np.asarray(t.data).tobytes()


def test_float32_one() -> None:
    t = dmlbridge.prepare(np.array([1.0], dtype=np.float32))
    assert struct.pack("<f", 1.0) == bytes([0x00, 0x00, 0x80, 0x3F])
    assert data(t) == bytes([0x00, 0x00, 0x80, 0x3F])
    assert (t.dml_type, t.conversion, t.sizes, t.strides) == (DmlDataType.FLOAT32, "native", (1,), None)


def test_uint4_directml_doc_example() -> None:
    """DirectML docs: [1,2,3,4,5] as UINT4 is 21 43 05; dmlbridge pads to a DWORD with zeros."""
    t = dmlbridge.prepare(np.array([1, 2, 3, 4, 5], dtype=ml_dtypes.uint4))
    assert data(t) == bytes([0x21, 0x43, 0x05, 0x00])
    assert (t.dml_type, t.total_tensor_size_in_bytes, t.sizes) == (DmlDataType.UINT4, 4, (5,))


def test_int4_minus8_7_minus1() -> None:
    t = dmlbridge.prepare(np.array([-8, 7, -1], dtype=ml_dtypes.int4))
    assert data(t) == bytes([0x78, 0x0F, 0x00, 0x00])  # -8 = 0x8 low, 7 high; -1 = 0xF low, spare nibble 0


def test_int4_below_6_3_is_sign_extended_int8() -> None:
    t = dmlbridge.prepare(np.array([-8, 7, -1], dtype=ml_dtypes.int4), target=Target(FeatureLevel.FL_6_2))
    assert (t.dml_type, t.conversion) == (DmlDataType.INT8, "widen")
    assert data(t) == struct.pack("<3b", -8, 7, -1) + b"\0"


def test_bool_nonzero_bytes_become_one() -> None:
    arr = np.array([0, 2, 1], dtype=np.uint8).view(np.bool_)
    t = dmlbridge.prepare(arr)
    assert data(t) == bytes([0x00, 0x01, 0x01, 0x00])
    assert (t.dml_type, t.conversion) == (DmlDataType.UINT8, "widen")


def test_emulated_int64_desc() -> None:
    values = [[1, -2, 3], [2**31 - 1, -(2**31), 0]]
    t = dmlbridge.prepare(np.array(values, dtype=np.int64), target=Target(supported=NO16_NO64))
    assert (t.dml_type, t.conversion) == (DmlDataType.INT32, "emulate")
    assert data(t) == struct.pack("<6q", *values[0], *values[1])  # the 8-byte elements, untouched
    assert t.desc() == {
        "DataType": 6,
        "Flags": 0,
        "DimensionCount": 2,
        "Sizes": [2, 3],
        "Strides": [6, 2],  # packed strides (3, 1), doubled
        "TotalTensorSizeInBytes": 48,
        "GuaranteedBaseOffsetAlignment": 0,
    }


def test_emulated_uint64_strided() -> None:
    t = dmlbridge.prepare(np.array([7, 2**32 - 1], dtype=np.uint64), target=Target(FeatureLevel.FL_2_1), strides=[2])
    # (Feature level 2.1 pads to 4 dimensions; the padding dimensions take the stride 3 of a 3-element span.)
    assert (t.dml_type, t.sizes, t.strides, t.total_tensor_size_in_bytes) == (DmlDataType.UINT32, (1, 1, 1, 2),
                                                                              (6, 6, 6, 4), 24)
    assert data(t) == struct.pack("<3Q", 7, 0, 2**32 - 1)


def test_narrowed_int64() -> None:
    t = dmlbridge.prepare(np.array([5, -6, 7], dtype=np.int64), target=Target(supported=NO16_NO64, int64="narrow"))
    assert (t.dml_type, t.conversion, t.strides, t.total_tensor_size_in_bytes) == (DmlDataType.INT32, "narrow",
                                                                                   None, 12)  # fmt: skip
    assert data(t) == struct.pack("<3i", 5, -6, 7)


def test_int64_out_of_range_names_value_and_index() -> None:
    with pytest.raises(dmlbridge.ValueRangeError) as info:
        dmlbridge.prepare(np.array([0, 1, 2**31], dtype=np.int64), target=Target(supported=NO16_NO64))
    assert str(2**31) in str(info.value) and re.search(r"\b2\b", str(info.value)), "value and index 2"


def test_float8_nans_of_one_pattern_become_quiet_with_sign() -> None:
    def widened(dtype: Any, pattern: int, fmt: str) -> bytes:
        return data(dmlbridge.prepare(np.array([pattern], dtype=np.uint8).view(dtype)))[: struct.calcsize(fmt)]

    assert widened(ml_dtypes.float8_e4m3fn, 0x7F, "<e") == struct.pack("<H", 0x7E00)
    assert widened(ml_dtypes.float8_e4m3fn, 0xFF, "<e") == struct.pack("<H", 0xFE00)
    assert widened(ml_dtypes.float8_e4m3fnuz, 0x80, "<e") == struct.pack("<H", 0xFE00)
    assert widened(ml_dtypes.float8_e5m2fnuz, 0x80, "<e") == struct.pack("<H", 0xFE00)
    assert widened(ml_dtypes.float8_e5m2, 0x7D, "<e") == struct.pack("<H", 0x7D00)  # (the top byte: payload kept)
    assert widened(ml_dtypes.float8_e8m0fnu, 0xFF, "<f") == struct.pack("<I", 0x7FC00000)
    assert widened(ml_dtypes.float8_e8m0fnu, 0x00, "<f") == struct.pack("<f", 2.0**-127)
    assert widened(ml_dtypes.float8_e4m3fn, 0x7E, "<e") == struct.pack("<e", 448.0)
    assert widened(ml_dtypes.float8_e4m3fn, 0x01, "<e") == struct.pack("<e", 2.0**-9)


def test_bfloat16_payload_survives() -> None:
    t = dmlbridge.prepare(np.array([0x7F81, 0xFFC1, 0x3F80], dtype=np.uint16).view(ml_dtypes.bfloat16))
    assert data(t) == struct.pack("<3I", 0x7F810000, 0xFFC10000, 0x3F800000)


def test_native_float_nan_payloads_are_bit_copies() -> None:
    f16 = dmlbridge.prepare(np.array([0x7E01, 0x7C01], dtype=np.uint16).view(np.float16))
    assert data(f16) == struct.pack("<2H", 0x7E01, 0x7C01)
    f32 = dmlbridge.prepare(np.array([0x7FC00001, 0xFFBFFFFF], dtype=np.uint32).view(np.float32))
    assert data(f32) == struct.pack("<2I", 0x7FC00001, 0xFFBFFFFF)


def test_lossy_double() -> None:
    src = np.array([0.1, 1e300, -1e300, 1 + 2**-24, 2.0**-150], dtype=np.float64)
    lossy = Target(FeatureLevel.FL_2_1, allow_lossy=True)
    t = dmlbridge.prepare(src, target=lossy)
    assert (t.dml_type, t.conversion) == (DmlDataType.FLOAT32, "lossy")
    # 1 + 2**-24 is a tie between 1.0 and the next float32: to even gives 1.0; 2**-150 is a tie with 0: gives 0
    assert data(t) == struct.pack("<f", 0.1) + struct.pack("<3I", 0x7F800000, 0xFF800000, 0x3F800000) + bytes(4)
    with pytest.raises(dmlbridge.UnsupportedTypeError):
        dmlbridge.prepare(src, target=Target(FeatureLevel.FL_2_1))


def test_strided_gap_is_zero_and_padded() -> None:
    t = dmlbridge.prepare(np.array([1.0, 2.0], dtype=np.float32), strides=[2])
    assert data(t) == struct.pack("<3f", 1.0, 0.0, 2.0) and t.total_tensor_size_in_bytes == 12
    assert t.strides == (2,)


def test_min_dims_pads_sizes_and_strides() -> None:
    t = dmlbridge.prepare(np.zeros((2, 3), dtype=np.float16), strides=[4, 1], min_dims=4)
    assert t.sizes == (1, 1, 2, 3) and t.strides == (7, 7, 4, 1)
    assert t.total_tensor_size_in_bytes == 16  # 7 elements * 2 bytes = 14, rounded up to 16


def test_zero_d() -> None:
    t = dmlbridge.prepare(np.array(3.0, dtype=np.float32), min_dims=4)
    assert t.sizes == (1, 1, 1, 1) and data(t) == struct.pack("<f", 3.0)
    assert t.to_numpy().shape == ()


def test_big_endian_and_fortran_sources() -> None:
    be = np.array([[1, 2, 3], [4, 5, 6]], dtype=">i4")
    f = np.asfortranarray(np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32))
    expect = struct.pack("<6i", 1, 2, 3, 4, 5, 6)
    assert data(dmlbridge.prepare(be)) == expect == data(dmlbridge.prepare(f))
    assert data(dmlbridge.prepare(f.T)) == struct.pack("<6i", 1, 4, 2, 5, 3, 6)


def test_calc_buffer_tensor_size_literals() -> None:
    calc = dmlbridge.calc_buffer_tensor_size
    assert calc(DmlDataType.UINT4, [5]) == 4
    assert calc(DmlDataType.INT4, [9]) == 8  # 36 bits -> 5 bytes -> 8
    assert calc(DmlDataType.FLOAT16, [3]) == 8
    assert calc(DmlDataType.UINT8, [2, 3], [0, 1]) == 4
    assert calc(DmlDataType.FLOAT32, [2, 3], [8, 2]) == 4 * 13
    assert calc(DmlDataType.INT4, [2, 2], [3, 1]) == 4  # span 5 -> 20 bits -> 3 bytes -> 4
    assert calc(DmlDataType.FLOAT64, [1]) == 8
    # 64-bit arithmetic: the last index is 2^32 - 1, its span 2^32 (a 32-bit span would overflow); one more is
    # refused: DirectML computes the index itself in 32 bits.
    assert calc(DmlDataType.FLOAT32, [2, 2], [2**32 - 2, 1]) == 4 * 2**32
    with pytest.raises(dmlbridge.LayoutError, match="does not fit UINT32"):
        calc(DmlDataType.FLOAT32, [2, 2], [2**32 - 1, 1])
    assert calc(DmlDataType.FLOAT32, [2**16, 2**16 - 1], [2**16 - 1, 1]) == 4 * (2**32 - 2**16)
    assert calc(DmlDataType.UINT64, [2**32 - 1]) == 8 * (2**32 - 1)


# --- error paths not expressible as vectors --------------------------------------------------------------------


def test_too_many_elements() -> None:
    huge = np.broadcast_to(np.float32(1.0), (2**16, 2**16 + 1))  # 2^32 + 2^16 elements, no memory
    with pytest.raises(dmlbridge.LayoutError):
        dmlbridge.prepare(huge)


def test_size_beyond_uint32() -> None:
    huge = np.broadcast_to(np.uint8(1), (2**32,))
    with pytest.raises(dmlbridge.LayoutError):
        dmlbridge.prepare(huge)


@pytest.mark.parametrize("flags", [2, -1, 3])
def test_bad_flags(flags: int) -> None:
    with pytest.raises(dmlbridge.InvalidArgumentError):
        dmlbridge.prepare(np.zeros(4, np.float32), flags=flags)


def test_owned_by_dml_flag() -> None:
    t = dmlbridge.prepare(np.zeros(4, np.float32), flags=1)
    assert t.flags == 1 and t.desc()["Flags"] == 1


@pytest.mark.parametrize(("dtype", "alignment"), [(np.float32, 3), (np.float32, 2), (np.float64, 4), (np.int8, 24)])
def test_bad_alignment(dtype: Any, alignment: int) -> None:
    with pytest.raises(dmlbridge.InvalidArgumentError):
        dmlbridge.prepare(np.zeros(4, dtype), guaranteed_base_offset_alignment=alignment)


@pytest.mark.parametrize(("dtype", "alignment"), [(np.float32, 4), (np.float32, 256), (ml_dtypes.int4, 1),
                                                  (np.int8, 1), (np.float16, 32)])  # fmt: skip
def test_good_alignment(dtype: Any, alignment: int) -> None:
    t = dmlbridge.prepare(np.zeros(4, dtype), guaranteed_base_offset_alignment=alignment)
    assert t.guaranteed_base_offset_alignment == alignment == t.desc()["GuaranteedBaseOffsetAlignment"]


def test_prepare_into_destination_errors() -> None:
    arr = np.arange(5, dtype=np.float32)  # 20 bytes
    with pytest.raises(dmlbridge.DestinationError):
        dmlbridge.prepare_into(bytes(64), 0, arr)  # read-only
    ro = np.zeros(64, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(dmlbridge.DestinationError):
        dmlbridge.prepare_into(ro, 0, arr)
    with pytest.raises(dmlbridge.DestinationError):
        dmlbridge.prepare_into(bytearray(35), 16, arr)  # 16 + 20 > 35
    with pytest.raises(dmlbridge.DestinationError):
        dmlbridge.prepare_into(bytearray(64), 8, arr)  # not a multiple of 16
    with pytest.raises(dmlbridge.DestinationError):
        dmlbridge.prepare_into(bytearray(64), -16, arr)
    with pytest.raises(dmlbridge.DestinationError):
        dmlbridge.prepare_into(bytearray(96), 16, arr, guaranteed_base_offset_alignment=32)
    dst = bytearray(96)
    t = dmlbridge.prepare_into(dst, 32, arr, guaranteed_base_offset_alignment=32)
    assert bytes(dst[32:52]) == struct.pack("<5f", 0, 1, 2, 3, 4) and not any(dst[:32]) and not any(dst[52:])
    dst2 = bytearray(36)
    dmlbridge.prepare_into(dst2, 16, arr)  # exactly large enough
    assert bytes(dst2[16:]) == struct.pack("<5f", 0, 1, 2, 3, 4)
    assert t.data.dtype == np.uint8 and len(t.data) == 20


def test_prepare_into_view_of_dst() -> None:
    dst = np.full(64, 0xAA, dtype=np.uint8)
    t = dmlbridge.prepare_into(dst, 16, np.array([1, 2, 3], dtype=np.int8))
    assert np.shares_memory(t.data, dst)
    assert bytes(dst[16:20]) == bytes([1, 2, 3, 0])  # padding written as zero
    assert all(b == 0xAA for b in dst[:16]) and all(b == 0xAA for b in dst[20:])


def test_zero_copy_rules() -> None:
    src = np.arange(4, dtype=np.float32)
    t = dmlbridge.prepare(src)
    assert np.shares_memory(t.data, src) and not t.data.flags.writeable
    odd = np.arange(3, dtype=np.int8)  # 3 bytes: needs padding, so a fresh copy
    t2 = dmlbridge.prepare(odd)
    assert not np.shares_memory(t2.data, odd) and t2.data.flags.writeable
    be = np.arange(4, dtype=">f4")
    assert not np.shares_memory(dmlbridge.prepare(be).data, be)
    # decisions.md: int64 emulation keeps the source's 8-byte elements, so a packed little-endian source is a view
    i64 = np.arange(4, dtype=np.int64)
    t3 = dmlbridge.prepare(i64, target=Target(supported=NO16_NO64))
    assert t3.conversion == "emulate"
    assert np.shares_memory(t3.data, i64) and not t3.data.flags.writeable
    # ... but narrowing writes 4-byte values: a fresh copy
    t4 = dmlbridge.prepare(i64, target=Target(supported=NO16_NO64, int64="narrow"))
    assert not np.shares_memory(t4.data, i64) and t4.data.flags.writeable


# C's long double: 80-bit extended on x86-64 Linux (numpy's float128, which ONNX has no type for), but the same
# 64-bit IEEE double as double with MSVC on Windows, where it is ONNX's DOUBLE like any float64
LONGDOUBLE_IS_DOUBLE = np.finfo(np.longdouble).nmant == np.finfo(np.float64).nmant


def test_unsupported_numpy_dtypes() -> None:
    unsupported = [np.zeros(2, np.complex64), np.array(["a"]), np.array([b"a"]), np.array([object()], dtype=object),
                   np.zeros(2, "M8[s]")]  # fmt: skip
    if not LONGDOUBLE_IS_DOUBLE:
        unsupported.append(np.zeros(2, np.longdouble))
    for arr in unsupported:
        with pytest.raises(dmlbridge.UnsupportedTypeError) as info:
            dmlbridge.prepare(arr)
        assert str(info.value)
    if LONGDOUBLE_IS_DOUBLE:
        t = dmlbridge.prepare(np.array([1.5, -2.0], np.longdouble))
        assert t.onnx_type == dmlbridge.OnnxDataType.DOUBLE
        assert np.asarray(t.data).tobytes() == struct.pack("<2d", 1.5, -2.0)


def test_errors_are_builtin_subclasses_too() -> None:
    assert issubclass(dmlbridge.UnsupportedTypeError, TypeError)
    for cls in (dmlbridge.LayoutError, dmlbridge.ValueRangeError, dmlbridge.DestinationError,
                dmlbridge.InvalidArgumentError):  # fmt: skip
        assert issubclass(cls, dmlbridge.DmlBridgeError) and issubclass(cls, ValueError)


@pytest.mark.parametrize("kind", ["bytearray", "memoryview", "numpy", "numpy-float32", "mmap", "ctypes"])
def test_prepare_into_any_writable_buffer(kind: str) -> None:
    size = 64
    dst: Any = {
        "bytearray": lambda: bytearray(size),
        "memoryview": lambda: memoryview(bytearray(size)),
        "numpy": lambda: np.zeros(size, np.uint8),
        "numpy-float32": lambda: np.zeros(size // 4, np.float32),  # offsets are in bytes whatever the dtype
        "mmap": lambda: mmap.mmap(-1, size),
        "ctypes": lambda: (ctypes.c_uint8 * size)(),
    }[kind]()
    t = dmlbridge.prepare_into(dst, 16, np.array([1, 2, 3], dtype=ml_dtypes.uint4))
    raw = bytes(memoryview(dst).cast("B"))
    assert raw[16:20] == bytes([0x21, 0x03, 0x00, 0x00])
    assert not any(raw[:16]) and not any(raw[20:])
    assert np.asarray(t.data).tobytes() == bytes([0x21, 0x03, 0x00, 0x00])


def test_decode_literals_and_short_data() -> None:
    got = dmlbridge.decode(bytes([0x21, 0x43, 0x05]), DmlDataType.UINT4, [5])
    assert got.dtype == np.dtype(ml_dtypes.uint4) and got.astype(np.int64).tolist() == [1, 2, 3, 4, 5]
    got = dmlbridge.decode(struct.pack("<3f", 1.0, 9.0, 2.0), DmlDataType.FLOAT32, [2], [2])
    assert got.tolist() == [1.0, 2.0]
    got = dmlbridge.decode(struct.pack("<4q", 1, -2, 3, -4), DmlDataType.INT32, [2, 2], [4, 2])  # emulated int64
    assert got.tolist() == [[1, -2], [3, -4]]
    with pytest.raises(dmlbridge.DmlBridgeError):
        dmlbridge.decode(bytes(11), DmlDataType.FLOAT32, [3])
    with pytest.raises(dmlbridge.DmlBridgeError):
        dmlbridge.decode(bytes(2), DmlDataType.INT4, [5])


@pytest.mark.parametrize(
    ("dtype", "onnx_type"),
    [
        (np.intc, 6), (np.uintc, 12), (np.longlong, 7), (np.ulonglong, 13),
        # numpy's int_ and uint are C's long before numpy 2: 64 bits on Linux, 32 on Windows
        (np.int_, {4: 6, 8: 7}[np.dtype(np.int_).itemsize]), (np.uint, {4: 12, 8: 13}[np.dtype(np.uint).itemsize]),
        (np.single, 1), (np.double, 11), (np.half, 10), (np.byte, 3), (np.ubyte, 2), (np.short, 5),
        (np.ushort, 4), (np.bool_, 9), ("<i8", 7), (">i8", 7), ("=u2", 4), (">f4", 1), ("i4", 6), ("f8", 11),
    ],
)  # fmt: skip
def test_dtype_aliases(dtype: Any, onnx_type: int) -> None:
    arr = np.array([1, 0, 1], dtype=dtype)
    t = dmlbridge.prepare(arr)
    assert int(t.onnx_type) == onnx_type
    want = ref.prepare(arr)
    assert np.asarray(t.data).tobytes() == want["data"] and int(t.dml_type) == want["dml_type"]


def test_read_only_and_broadcast_sources() -> None:
    ro = np.frombuffer(struct.pack("<4f", 1, 2, 3, 4), dtype=np.float32)
    assert np.asarray(dmlbridge.prepare(ro).data).tobytes() == struct.pack("<4f", 1, 2, 3, 4)
    rows = np.broadcast_to(np.array([1, -2, 3], dtype=np.int16), (2, 3))  # zero-stride, read-only source
    t = dmlbridge.prepare(rows)
    assert np.asarray(t.data).tobytes() == struct.pack("<6h", 1, -2, 3, 1, -2, 3) + bytes(0)
    assert t.to_numpy().tolist() == [[1, -2, 3], [1, -2, 3]]
    # and described as a broadcast: one row in memory
    t = dmlbridge.prepare(rows, strides=[0, 1])
    assert np.asarray(t.data).tobytes() == struct.pack("<3h", 1, -2, 3) + bytes(2)


@pytest.mark.parametrize("scan", [True, False], ids=["byte-scan", "parsed-model"])
def test_signalling_nans_in_typed_fields_keep_their_bits(tmp_path: Path, monkeypatch: Any, scan: bool) -> None:
    """float_data / double_data holding signalling NaNs: the .bin has their exact bits on either path. (Read
    through a Python float, 0x7F8F5019 would come out quieted as 0x7FCF5019.)"""
    from onnx import TensorProto, helper

    if not scan:
        monkeypatch.setenv("DMLBRIDGE_CHECKED_PATH_ONLY", "1")
    head = TensorProto(name="f", data_type=TensorProto.FLOAT, dims=[2]).SerializeToString()
    f = TensorProto.FromString(head + bytes([0x22, 8]) + struct.pack("<II", 0x7F8F5019, 0xFF800001))
    head = TensorProto(name="d", data_type=TensorProto.DOUBLE, dims=[1]).SerializeToString()
    d = TensorProto.FromString(head + bytes([0x52, 8]) + struct.pack("<Q", 0x7FF4000000000001))
    graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("f", TensorProto.FLOAT, [2])], [f, d])
    plan = dmlbridge.convert_model(helper.make_model(graph), tmp_path / "w", progress=False, alignment=16)
    data = open(plan.bin_path, "rb").read()
    assert plan.entries["f"].offset == 0 and plan.entries["d"].offset == 16
    assert data[:8] == struct.pack("<II", 0x7F8F5019, 0xFF800001)
    assert data[16:24] == struct.pack("<Q", 0x7FF4000000000001)


def test_signalling_nans_in_float_attributes_and_typed_fields_decode_exactly() -> None:
    """tensor_to_array and Constant nodes' value_float(s) keep a signalling NaN's bits, whatever protobuf's
    Python floats would do to them (a float32 read through Python is quieted)."""
    from onnx import AttributeProto, NodeProto, TensorProto

    from dmlbridge.model.constants import find_constants

    snan = struct.pack("<I", 0x7F8F5019)
    head = TensorProto(name="f", data_type=TensorProto.COMPLEX64, dims=[1]).SerializeToString()
    complex64 = TensorProto.FromString(head + bytes([0x22, 8]) + snan + struct.pack("<I", 0xFF800001))
    assert dmlbridge.tensor_to_array(complex64).view(np.uint32).tolist() == [0x7F8F5019, 0xFF800001]
    # AttributeProto: name (1), f (2, fixed32), floats (7, one fixed32 each), type (20).
    single = AttributeProto.FromString(b"\x0a\x0bvalue_float" + b"\x15" + snan + b"\xa0\x01\x01")
    many = AttributeProto.FromString(b"\x0a\x0cvalue_floats" + b"\x3d" + snan + b"\x3d" + snan + b"\xa0\x01\x06")
    nodes = []
    for name, attribute in (("one", single), ("two", many)):
        node = NodeProto(op_type="Constant", output=[name])
        node.attribute.add().CopyFrom(attribute)
        nodes.append(node)

    found = {c.key: c for c in find_constants(model_of(nodes=nodes))}
    assert found["one"].to_array().view(np.uint32).tolist() == 0x7F8F5019
    assert found["two"].to_array().view(np.uint32).tolist() == [0x7F8F5019, 0x7F8F5019]


def test_type_names_and_feature_levels_read_as_written() -> None:
    assert str(DmlDataType.FLOAT32) == "FLOAT32" and str(dmlbridge.OnnxDataType.BFLOAT16) == "BFLOAT16"
    assert f"{DmlDataType.INT4}" == "INT4" and int(DmlDataType.INT4) == 13
    for written in (6.2, "6.2", "6_2", "FL_6_2", 0x6200, "0x6200", " 0X6200 "):
        assert Target(written).feature_level is FeatureLevel.FL_6_2, written
    assert Target(3.0).feature_level is FeatureLevel.FL_3_0
    for wrong in (6.25, 7.0, "0x6250", "0xzz"):
        with pytest.raises(dmlbridge.InvalidArgumentError, match="unknown DirectML feature level"):
            Target(wrong)


def test_binding_offsets_are_multiples_of_16_whatever_the_alignment() -> None:
    """guaranteed_base_offset_alignment may raise the binding offset's step above 16, never lower it."""
    buffer = bytearray(256)
    x = np.ones(2, np.float32)
    for alignment, good, bad in ((0, 16, 8), (4, 16, 4), (8, 32, 8), (64, 64, 16)):
        dmlbridge.prepare_into(buffer, good, x, guaranteed_base_offset_alignment=alignment)
        with pytest.raises(dmlbridge.DestinationError, match=f"multiple of {max(alignment, 16)}"):
            dmlbridge.prepare_into(buffer, bad, x, guaranteed_base_offset_alignment=alignment)


def test_the_last_elements_index_must_fit_uint32() -> None:
    """sum((size_i - 1) * stride_i) is an element index DirectML computes in 32 bits."""
    with pytest.raises(dmlbridge.LayoutError, match=r"last element at index 4294967296"):
        dmlbridge.calc_buffer_tensor_size("FLOAT32", [2, 2], [2**31, 2**31])
    assert dmlbridge.calc_buffer_tensor_size("UINT8", [2, 2], [2**31 - 1, 2**31]) == 2**32
    with pytest.raises(dmlbridge.LayoutError, match="does not fit UINT32"):
        dmlbridge.prepare(np.zeros((2, 2), np.uint8), strides=[2**31, 2**31])
