"""Fuzzing the preparers: random arrays, sizes, strides, targets and destinations.

The only exceptions allowed out of dmlbridge are DmlBridgeError subclasses. The number of examples is bounded
for the suite; DMLBRIDGE_EXAMPLES multiplies it (tests/helpers/budget.py).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dmlbridge
from dmlbridge import DmlBridgeError, DmlDataType, FeatureLevel, Target

FUZZ = settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))

DTYPES = [
    np.float32,
    np.float16,
    np.float64,
    np.int8,
    np.uint8,
    np.int16,
    np.uint16,
    np.int32,
    np.uint32,
    np.int64,
    np.uint64,
    np.bool_,
    np.complex64,
    ">f4",
    ">i8",
    ">u2",
    "U2",
    "datetime64[s]",
    ml_dtypes.bfloat16,
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e4m3fnuz,
    ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e5m2fnuz,
    ml_dtypes.float8_e8m0fnu,
    ml_dtypes.int4,
    ml_dtypes.uint4,
    ml_dtypes.int2,
    ml_dtypes.uint2,
    ml_dtypes.float4_e2m1fn,
    ml_dtypes.float6_e2m3fn,
    ml_dtypes.float6_e3m2fn,
    ml_dtypes.float8_e4m3b11fnuz,  # an ml_dtypes type ONNX does not have
]

BIG = st.sampled_from([2**31, 2**32 - 1, 2**32, 2**63, -(2**31)])


@st.composite
def arrays(draw: st.DrawFn) -> np.ndarray:
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
    count = int(np.prod(shape))
    if dtype.kind in "UM":
        return np.zeros(shape, dtype)
    raw = draw(st.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize))
    array = np.frombuffer(raw, np.uint8).view(dtype).reshape(shape) if count else np.zeros(shape, dtype)
    if draw(st.booleans()) and array.ndim >= 2:
        array = array.T
    return array


@st.composite
def targets(draw: st.DrawFn) -> Target:
    level = draw(st.sampled_from(list(FeatureLevel)))
    supported = draw(st.none() | st.sets(st.sampled_from([t for t in DmlDataType if t is not DmlDataType.UNKNOWN])))
    return Target(level, supported, draw(st.sampled_from(["emulate", "narrow"])), draw(st.booleans()))


strides_st = st.none() | st.lists(st.integers(-2, 12) | BIG, max_size=9)
options = st.fixed_dictionaries(
    {
        "strides": strides_st,
        "min_dims": st.integers(-1, 10),
        "flags": st.sampled_from([0, 1, 2, -1]),
        "guaranteed_base_offset_alignment": st.sampled_from([0, 1, 2, 4, 8, 16, 3, 256, -4]),
    }
)


@FUZZ
@given(arrays(), targets(), options)
def test_prepare_raises_only_dmlbridge_errors(array: np.ndarray, target: Target, kwargs: dict) -> None:
    before = array.tobytes()
    try:
        t = dmlbridge.prepare(array, target=target, **kwargs)
    except DmlBridgeError:
        pass
    else:
        assert len(t.data) == t.total_tensor_size_in_bytes
        assert t.total_tensor_size_in_bytes >= dmlbridge.calc_buffer_tensor_size(t.dml_type, t.sizes, t.strides)
        t.to_numpy()
        t.as_ctypes_tensor_desc()
    assert array.tobytes() == before


@FUZZ
@given(arrays(), targets(), options, st.integers(0, 96), st.integers(-32, 96))
def test_prepare_into_raises_only_dmlbridge_errors(
    array: np.ndarray, target: Target, kwargs: dict, size: int, offset: int
) -> None:
    dst = bytearray(b"\xa5" * size)
    try:
        t = dmlbridge.prepare_into(dst, offset, array, target=target, **kwargs)
    except DmlBridgeError:
        assert dst == bytearray(b"\xa5" * size)  # a refused call writes nothing
    else:
        end = offset + t.total_tensor_size_in_bytes
        assert dst[:offset] == b"\xa5" * offset and dst[end:] == b"\xa5" * (size - end)


@FUZZ
@given(
    st.binary(max_size=64),
    st.integers(-1, 14) | st.sampled_from(["INT4", "BOOL", "float16", ""]),
    st.lists(st.integers(-1, 6) | BIG, max_size=9),
    strides_st,
)
def test_decode_raises_only_dmlbridge_errors(data: bytes, dml_type: object, sizes: list, strides: object) -> None:
    try:
        dmlbridge.decode(data, dml_type, sizes, strides)  # type: ignore[arg-type]
    except DmlBridgeError:
        pass


@FUZZ
@given(
    st.integers(-1, 14) | st.sampled_from(["INT4", "BOOL"]),
    st.lists(st.integers(-1, 6) | BIG, max_size=9),
    strides_st,
)
def test_calc_buffer_tensor_size_raises_only_dmlbridge_errors(dml_type: object, sizes: list, strides: object) -> None:
    try:
        size = dmlbridge.calc_buffer_tensor_size(dml_type, sizes, strides)  # type: ignore[arg-type]
    except DmlBridgeError:
        pass
    else:
        assert size % 4 == 0 and size > 0


@FUZZ
@given(arrays(), st.binary(max_size=16), st.integers(-2, 40), st.booleans())
def test_pack_unpack_raise_only_dmlbridge_errors(array: np.ndarray, data: bytes, count: int, signed: bool) -> None:
    try:
        packed = dmlbridge.pack_4bit(array)
    except DmlBridgeError:
        pass
    else:
        assert len(packed) == (array.size + 1) // 2
    try:
        dmlbridge.unpack_4bit(data, count, signed)
    except DmlBridgeError:
        pass
