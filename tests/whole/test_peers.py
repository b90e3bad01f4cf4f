"""Cross-checks against peers: onnx's own 4-bit packing and ml_dtypes/numpy float conversions."""

from __future__ import annotations

import warnings
from typing import Any

import ml_dtypes
import numpy as np
import onnx.numpy_helper
import pytest
import reference as ref
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import dmlbridge
from dmlbridge import DmlDataType, Target

ALL = frozenset(t for t in DmlDataType if t is not DmlDataType.UNKNOWN)
UNSIGNED_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# --- 4-bit packing against onnx.numpy_helper.from_array ------------------------------------------------------


@settings(max_examples=examples(150), deadline=None)
@given(st.data(), st.booleans(), st.integers(0, 41))
def test_pack_4bit_equals_onnx_raw_data(data: st.DataObject, signed: bool, n: int) -> None:
    lo, hi = (-8, 7) if signed else (0, 15)
    values = data.draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))
    arr = np.array(values, dtype=ml_dtypes.int4 if signed else ml_dtypes.uint4)
    if n % 3 == 0 and n:  # any shape packs in C order, as onnx flattens it
        arr = arr.reshape(3, n // 3)
    packed = dmlbridge.pack_4bit(arr)
    assert isinstance(packed, np.ndarray) and packed.dtype == np.uint8
    assert packed.tobytes() == onnx.numpy_helper.from_array(arr).raw_data
    # the same values in a plain int8/uint8 array pack the same way
    assert dmlbridge.pack_4bit(np.array(values, dtype=np.int8 if signed else np.uint8)).tobytes() == packed.tobytes()
    back = dmlbridge.unpack_4bit(packed, n, signed)
    assert back.dtype == (np.int8 if signed else np.uint8)
    assert back.ravel().tolist() == values
    # extra trailing bytes (a DirectML buffer's padding) are ignored
    assert dmlbridge.unpack_4bit(packed.tobytes() + b"\xff\xff\xff", n, signed).ravel().tolist() == values


def test_pack_4bit_literals() -> None:
    assert dmlbridge.pack_4bit(np.array([1, 2, 3, 4, 5], dtype=np.uint8)).tobytes() == bytes([0x21, 0x43, 0x05])
    assert dmlbridge.pack_4bit(np.array([-8, 7, -1], dtype=np.int8)).tobytes() == bytes([0x78, 0x0F])
    assert dmlbridge.unpack_4bit(bytes([0x78, 0xFF]), 3, True).tolist() == [-8, 7, -1]
    assert dmlbridge.unpack_4bit(bytes([0x78, 0xFF]), 3, False).tolist() == [8, 7, 15]


@pytest.mark.parametrize(
    "values",
    [
        np.array([0, 8], dtype=np.int8),
        np.array([-9], dtype=np.int8),
        np.array([127, 1], dtype=np.int8),
        np.array([16], dtype=np.uint8),
        np.array([3, 255], dtype=np.uint8),
        np.array([-9, 0, 0], dtype=np.int16),
        np.array([0, 1 << 20], dtype=np.int32),
        np.array([16], dtype=np.uint64),
    ],
)
def test_pack_4bit_out_of_range_is_an_error(values: np.ndarray) -> None:
    with pytest.raises(dmlbridge.ValueRangeError) as info:
        dmlbridge.pack_4bit(values)
    assert str(info.value)


# --- float widening against ml_dtypes / numpy astype, every bit pattern ------------------------------------------

SMALL_FLOATS = [
    ("float8_e4m3fn", 256),
    ("float8_e4m3fnuz", 256),
    ("float8_e5m2", 256),
    ("float8_e5m2fnuz", 256),
    ("float8_e8m0fnu", 256),
    ("float4_e2m1fn", 16),
    ("float6_e2m3fn", 64),
    ("float6_e3m2fn", 64),
    ("bfloat16", 65536),
    ("float16", 65536),
]
# Targets that make each float type widen to FLOAT16, FLOAT32 or FLOAT64.
WIDEN_TARGETS = {
    "FLOAT16": Target(supported=ALL - {DmlDataType.FLOAT32}),
    "FLOAT32": Target(supported=ALL - {DmlDataType.FLOAT16}),
    "FLOAT64": Target(supported=ALL - {DmlDataType.FLOAT16, DmlDataType.FLOAT32}),
}


def every_pattern(name: str, n: int) -> np.ndarray:
    return np.arange(n, dtype=np.uint8 if n <= 256 else np.uint16).view(ref.resolve_dtype(name))


# IEEE-style formats by their (exponent, mantissa) bits: where a NaN is all ones in the exponent.
_IEEE = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23), "float64": (11, 52), "float8_e5m2": (5, 2)}


def astype_bits(src: np.ndarray, dml: DmlDataType) -> bytes:
    """What ml_dtypes' and numpy's astype give, but for NaNs widened, which keep their sign and payload (their
    mantissa bits, shifted up: docs/decisions.md "Values"), worked out here from the formats' bit layouts."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NaN casts warn
        out = src.astype(dml.numpy())
    source, target = _IEEE.get(src.dtype.name), _IEEE.get(out.dtype.name)
    if source is None or target is None or target[1] < source[1]:  # (only widening keeps a payload whole)
        return out.tobytes()
    (src_exp, src_mant), (dst_exp, dst_mant) = source, target
    codes = src.reshape(-1).view(f"u{src.dtype.itemsize}").astype(object)
    bits = out.reshape(-1).view(f"u{out.dtype.itemsize}").copy()
    for i, code in enumerate(codes):
        mantissa, exponent = code & ((1 << src_mant) - 1), (code >> src_mant) & ((1 << src_exp) - 1)
        if exponent == (1 << src_exp) - 1 and mantissa:  # a NaN
            sign = code >> (src_exp + src_mant)
            bits[i] = (sign << (dst_exp + dst_mant)) | (((1 << dst_exp) - 1) << dst_mant) | (
                mantissa << (dst_mant - src_mant))
    return bits.tobytes()


# (source dtype, pattern count, DML float type it can widen to)
WIDENINGS = [
    (name, n, dml)
    for name, n in SMALL_FLOATS
    for dml in ref.CANDIDATES[ref.onnx_type_name(ref.resolve_dtype(name))]
    if dml != ref.NATIVE.get(ref.onnx_type_name(ref.resolve_dtype(name)))
]


@pytest.mark.parametrize(("name", "n", "dml_name"), WIDENINGS, ids=[f"{w[0]}-{w[2]}" for w in WIDENINGS])
def test_widening_equals_astype(name: str, n: int, dml_name: str) -> None:
    src = every_pattern(name, n)
    t = dmlbridge.prepare(src, target=WIDEN_TARGETS[dml_name])
    dml = DmlDataType[dml_name]
    assert (t.dml_type, t.conversion) == (dml, "widen")
    want = astype_bits(src, dml)
    got = np.asarray(t.data).tobytes()[: len(want)]
    if got != want:
        size = dml.itemsize
        bad = next(i for i in range(n) if got[i * size : (i + 1) * size] != want[i * size : (i + 1) * size])
        pytest.fail(f"{name} pattern {bad:#x}: got {got[bad * size:(bad + 1) * size].hex()}, "
                    f"astype gives {want[bad * size:(bad + 1) * size].hex()}")  # fmt: skip


def test_float32_to_float64_equals_astype() -> None:
    rng = np.random.default_rng(5)
    bits = np.concatenate([
        rng.integers(0, 2**32, 5000, dtype=np.uint64).astype(np.uint32),
        np.array([0x7F800001, 0xFFBFFFFF, 0x7FC00001, 0x00000001, 0x80000000, 0x7F800000], dtype=np.uint32),
    ])  # fmt: skip
    src = bits.view(np.float32)
    t = dmlbridge.prepare(src, target=WIDEN_TARGETS["FLOAT64"])
    assert np.asarray(t.data).tobytes() == astype_bits(src, DmlDataType.FLOAT64)


def test_lossy_double_equals_astype() -> None:
    rng = np.random.default_rng(7)
    exps = rng.integers(1023 - 160, 1023 + 135, 5000, dtype=np.uint64) << np.uint64(52)
    near = exps | rng.integers(0, 2**52, 5000, dtype=np.uint64) | (rng.integers(0, 2, 5000, dtype=np.uint64) << 63)
    bits = np.concatenate([near, rng.integers(0, 2**63, 3000, dtype=np.uint64) * np.uint64(2) + np.uint64(1)])
    src = bits.view(np.float64)
    t = dmlbridge.prepare(src, target=Target(supported=ALL - {DmlDataType.FLOAT64}, allow_lossy=True))
    assert t.conversion == "lossy"
    assert np.asarray(t.data).tobytes() == astype_bits(src, DmlDataType.FLOAT32)


@pytest.mark.parametrize(("name", "n"), SMALL_FLOATS, ids=[s[0] for s in SMALL_FLOATS])
def test_reference_widening_equals_astype(name: str, n: int) -> None:
    """The reference's formulas agree with ml_dtypes too, so the vectors rest on two independent derivations."""
    src = every_pattern(name, n)
    onnx_name = ref.onnx_type_name(src.dtype)
    raw = src.view(UNSIGNED_OF_SIZE[src.dtype.itemsize])
    for dml_name in ref.CANDIDATES[onnx_name]:
        if dml_name == ref.NATIVE.get(onnx_name):
            continue
        dml = DmlDataType[dml_name]
        want = np.frombuffer(astype_bits(src, dml), dtype=UNSIGNED_OF_SIZE[dml.itemsize])
        got = [ref.convert(onnx_name, dml_name, "widen", int(b), src.dtype.itemsize) for b in raw]
        assert got == want.tolist()


def test_bool_and_sub_byte_ints_against_numpy() -> None:
    """Integer widening is numpy's astype (BOOL: nonzero -> 1)."""
    b = np.arange(256, dtype=np.uint8).view(np.bool_)
    t = dmlbridge.prepare(b)
    assert np.asarray(t.data).tobytes() == (np.arange(256) != 0).astype(np.uint8).tobytes()
    for name, dml_dtype, target in [
        ("int4", np.int8, Target("6.2")),
        ("uint4", np.uint8, Target("6.2")),
        ("int2", np.int16, Target(supported={"INT16"})),
        ("uint2", np.int32, Target(supported={"INT32"})),
    ]:
        dt = ref.resolve_dtype(name)
        lo, hi = (int(ml_dtypes.iinfo(dt).min), int(ml_dtypes.iinfo(dt).max))
        src = np.arange(lo, hi + 1).astype(dt)
        got = np.asarray(dmlbridge.prepare(src, target=target).data).tobytes()
        assert got[: src.size * np.dtype(dml_dtype).itemsize] == src.astype(dml_dtype).tobytes(), name


def test_onnx_tensor_round_trip_through_numpy_helper() -> None:
    """An array read from an ONNX TensorProto prepares the same as the array it was made from."""
    for arr in (
        np.array([1, 2, 3, 4, 5], dtype=ml_dtypes.uint4),
        np.array([[-8, 7, -1]], dtype=ml_dtypes.int4),
        np.array([1.5, -0.0, np.nan], dtype=ml_dtypes.float8_e4m3fn),
        np.array([1.0, 2.0], dtype=ml_dtypes.bfloat16),
        np.array([True, False, True]),
    ):
        back: Any = onnx.numpy_helper.to_array(onnx.numpy_helper.from_array(arr))
        a, b = dmlbridge.prepare(arr), dmlbridge.prepare(back)
        assert np.asarray(a.data).tobytes() == np.asarray(b.data).tobytes()
        assert (a.onnx_type, a.dml_type, a.sizes) == (b.onnx_type, b.dml_type, b.sizes)


@pytest.mark.parametrize("dml", ["FLOAT16", "FLOAT32", "FLOAT64"])
@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn", "float6_e3m2fn"])
def test_widening_large_arrays_equals_ml_dtypes(name: str, dml: str) -> None:
    # More than one 64 Ki block, an odd count (the table tail) and a strided view (the np.take fallback).
    dtype = np.dtype(getattr(ml_dtypes, name))
    codes = np.random.default_rng(7).integers(0, 256, 3 * 65536 + 3, dtype=np.uint8)
    source = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32).astype(dtype)[codes]
    target = dmlbridge.Target(supported={dml})
    for array in (source, source[::-1], source.reshape(3, -1)[:, ::2]):
        prepared = dmlbridge.prepare(array, target=target)
        want = array.astype(dmlbridge.DmlDataType[dml].numpy())
        bits = f"<u{want.dtype.itemsize}"
        got = prepared.data[: want.nbytes].view(bits)
        assert np.array_equal(got, want.reshape(-1).view(bits))
