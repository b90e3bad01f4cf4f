"""Hypothesis properties: dmlbridge against the reference encoder over random dtypes, shapes, strides, targets."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import reference as ref
from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dmlbridge
from dmlbridge import DmlDataType, FeatureLevel, Target

# A longer hunt: DMLBRIDGE_EXAMPLES (tests/helpers/budget.py); the default keeps this file at a few seconds.
SETTINGS = settings(
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Every ONNX type a numpy array can have and dmlbridge can map (STRING/COMPLEX are covered by the vectors).
ONNX_NAMES = [n for n in ref.ONNX_DTYPE_NAME if n not in ("STRING", "COMPLEX64", "COMPLEX128")]
LEVELS = ["FL_1_0", "FL_2_1", "FL_3_0", "FL_5_2", "FL_6_2", "FL_6_3", "FL_6_4"]
IEEE = {"FLOAT": (32, 23), "DOUBLE": (64, 52), "FLOAT16": (16, 10), "BFLOAT16": (16, 7)}


@dataclass
class Case:
    onnx: str
    arr: np.ndarray
    target: ref.RefTarget
    strides: list[int] | None
    min_dims: int

    def lib_target(self) -> Target:
        sup = self.target.supported
        return Target(
            feature_level=FeatureLevel[self.target.feature_level],
            supported=None if sup is None else {DmlDataType[n] for n in sup},
            int64="narrow" if self.target.int64 == "narrow" else "emulate",
            allow_lossy=self.target.allow_lossy,
        )

    def kwargs(self) -> dict[str, Any]:
        return {"target": self.lib_target(), "strides": self.strides, "min_dims": self.min_dims}


def ieee_specials(width: int, mbits: int) -> list[int]:
    """±0, ±inf, quiet/signalling NaNs with payloads, the smallest subnormal and the largest finite value."""
    sign = 1 << (width - 1)
    inf = ((1 << (width - 1 - mbits)) - 1) << mbits
    quiet = 1 << (mbits - 1)
    pats = [0, inf, inf | quiet, inf | quiet | 1, inf | 1, inf | (quiet - 1), 1, inf - 1, (1 << mbits) - 1]
    return pats + [p | sign for p in pats]


def double_bits(x: float) -> int:
    return int.from_bytes(struct.pack("<d", x), "little")


def low_bits(width: int) -> Callable[[int], int]:
    """Two's complement of a value in `width` bits."""
    return lambda v: v & ((1 << width) - 1)


@st.composite
def element_bits(draw: st.DrawFn, onnx: str, n: int) -> list[int]:
    """n element bit patterns of an ONNX type, biased towards edge values."""
    if onnx in IEEE:
        width, mbits = IEEE[onnx]
        one = st.one_of(st.integers(0, (1 << width) - 1), st.sampled_from(ieee_specials(width, mbits)))
        if onnx == "DOUBLE":  # doubles float32 can hold, and ties, so the lossy path is exercised too
            one = st.one_of(
                one,
                st.floats(width=32).map(double_bits),
                st.floats(-1e39, 1e39).map(double_bits),
            )
    elif onnx in ref.SUB_BYTE_INT:
        w, signed = ref.SUB_BYTE_INT[onnx]
        lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if signed else (0, (1 << w) - 1)
        one = st.integers(lo, hi).map(low_bits(w))  # ml_dtypes keeps the low bits
    elif onnx in ref.SUB_BYTE_FLOAT_BITS:
        one = st.integers(0, (1 << ref.SUB_BYTE_FLOAT_BITS[onnx]) - 1)
    elif onnx == "BOOL":
        one = st.one_of(st.integers(0, 1), st.integers(0, 255))
    else:
        width = 8 * ref.resolve_dtype(ref.ONNX_DTYPE_NAME[onnx]).itemsize
        mask = (1 << width) - 1
        one = st.one_of(
            st.integers(0, mask),
            st.integers(-3, 3).map(low_bits(width)),
            st.integers(-(2**31), 2**32 - 1).map(low_bits(width)),  # int32/uint32 range: emulation works
            st.sampled_from([0, mask, mask >> 1, (mask >> 1) + 1]),
        )
        if width == 64 and draw(st.booleans()):  # every value fits 32 bits: emulate/narrow succeed
            lo, hi = (-(2**31), 2**31 - 1) if onnx == "INT64" else (0, 2**32 - 1)
            one = st.integers(lo, hi).map(low_bits(width))
    return draw(st.lists(one, min_size=n, max_size=n))


@st.composite
def targets(draw: st.DrawFn) -> ref.RefTarget:
    supported = draw(
        st.one_of(
            st.none(),
            st.frozensets(st.sampled_from(sorted(ref.DML_TYPES))),
            st.just(frozenset(ref.DML_TYPES) - {"FLOAT16", "FLOAT64", "INT64", "UINT64"}),  # the usual holes
        )
    )
    return ref.RefTarget(
        feature_level=draw(st.sampled_from(LEVELS)),
        supported=supported,
        int64=draw(st.sampled_from(["emulate", "narrow"])),
        allow_lossy=draw(st.booleans()),
    )


def own_strides(shape: tuple[int, ...], strides: list[int]) -> list[int]:
    """The strides of the array's own dimensions, whichever way they were given."""
    if len(strides) == len(shape):
        return strides
    return strides[len(strides) - len(shape) :] if shape else []


def positions(shape: tuple[int, ...], own: list[int] | None) -> list[int]:
    if own is None:
        own = ref.packed_strides(list(shape))
    return [sum(i * s for i, s in zip(idx, own, strict=True)) for idx in np.ndindex(*shape)]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    # the types with the most special paths (emulate, narrow, lossy) are drawn more often
    onnx = draw(st.sampled_from(ONNX_NAMES + ["INT64", "UINT64", "DOUBLE"] * 4))
    dtype_name = ref.ONNX_DTYPE_NAME[onnx]
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=5)))
    n = math.prod(shape)
    bits = draw(element_bits(onnx, n))
    min_dims = draw(st.sampled_from([0, 1, 1, 2, 4, 4, 5, 6, 8]))
    final_ndim = max(min_dims, len(shape) or 1)

    strides: list[int] | None = None
    if draw(st.booleans()):
        lengths = [final_ndim] + ([len(shape)] if shape and len(shape) != final_ndim else [])
        length = draw(st.sampled_from(lengths))
        strides = draw(st.lists(st.integers(0, 5), min_size=length, max_size=length))
        if draw(st.integers(0, 3)):  # mostly: equal values wherever positions coincide (broadcasts succeed)
            first: dict[int, int] = {}
            pos = positions(shape, own_strides(shape, strides))
            bits = [first.setdefault(p, b) for p, b in zip(pos, bits, strict=True)]

    itemsize = ref.resolve_dtype(dtype_name).itemsize
    spec: dict[str, Any] = {
        "dtype": dtype_name,
        "shape": list(shape),
        "hex": b"".join(b.to_bytes(itemsize, "little") for b in bits).hex(),
    }
    if itemsize > 1 and dtype_name not in ref.ML_DTYPES_ONNX and draw(st.booleans()):
        spec["byteorder"] = ">"
    if len(shape) >= 2 and draw(st.booleans()):
        spec["order"] = "F"
    if shape:
        spec["view"] = draw(st.sampled_from([None, None, "reversed", "strided", "unaligned"]))
    return Case(onnx, ref.build_array(spec), draw(targets()), strides, min_dims)


def reference_or_error(c: Case) -> dict[str, Any] | str:
    try:
        return ref.prepare(c.arr, target=c.target, strides=c.strides, min_dims=c.min_dims)
    except ref.RefError as e:
        return type(e).__name__


def has_conflict(c: Case) -> bool:
    """Two source elements with different bits at one position (for int64 emulate/narrow, the only conversions
    with range errors, equal after conversion means equal before for in-range values)."""
    if c.strides is None:
        return False
    seen: dict[int, int] = {}
    flat = [ref.element_bits(c.arr, idx) for idx in np.ndindex(*c.arr.shape)]
    for p, b in zip(positions(c.arr.shape, own_strides(c.arr.shape, c.strides)), flat, strict=True):
        if seen.setdefault(p, b) != b:
            return True
    return False


def acceptable_errors(c: Case, expected: str) -> set[str]:
    """The order of a range error and a position conflict is not specified: either may be reported first."""
    ok = {expected}
    if expected == "LayoutError":
        try:
            ref.prepare(c.arr, target=c.target)  # packed: only a value can be wrong
        except ref.ValueRangeError:
            ok.add("ValueRangeError")
        except ref.RefError:
            pass
    if expected == "ValueRangeError" and has_conflict(c):
        ok.add("LayoutError")
    return ok


def prepared_fields(t: dmlbridge.PreparedTensor) -> dict[str, Any]:
    return {
        "onnx_type": int(t.onnx_type),
        "dml_type": int(t.dml_type),
        "conversion": t.conversion,
        "sizes": list(t.sizes),
        "strides": None if t.strides is None else list(t.strides),
        "total_tensor_size_in_bytes": t.total_tensor_size_in_bytes,
        "data": np.asarray(t.data).tobytes(),
    }


def snapshot(arr: np.ndarray) -> tuple[Any, ...]:
    f = arr.flags
    return (arr.tobytes(), arr.dtype, arr.shape, arr.strides, f.writeable, f.c_contiguous, f.f_contiguous)


@SETTINGS
@given(cases())
def test_prepare_matches_reference(c: Case) -> None:
    expected = reference_or_error(c)
    before = snapshot(c.arr)
    if isinstance(expected, str):
        with pytest.raises(dmlbridge.DmlBridgeError) as info:
            dmlbridge.prepare(c.arr, **c.kwargs())
        assert type(info.value).__name__ in acceptable_errors(c, expected), repr(info.value)
    else:
        t = dmlbridge.prepare(c.arr, **c.kwargs())
        assert prepared_fields(t) == expected
        assert len(t.data) == t.total_tensor_size_in_bytes
    assert snapshot(c.arr) == before, "the source array was modified"


@SETTINGS
@given(cases())
def test_to_numpy_round_trip(c: Case) -> None:
    expected = reference_or_error(c)
    if isinstance(expected, str):
        return
    t = dmlbridge.prepare(c.arr, **c.kwargs())
    back = t.to_numpy()
    assert back.shape == c.arr.shape
    assert back.dtype == c.arr.dtype.newbyteorder("=")
    assert back.dtype.byteorder in ("=", "|")
    for idx in np.ndindex(*c.arr.shape):
        src, got = ref.element_bits(c.arr, idx), ref.element_bits(back, idx)
        if c.onnx == "BOOL":
            assert got == (1 if src else 0), idx  # any nonzero byte comes back as True
        elif t.conversion == "lossy":  # the float32 value read back as a double, a NaN bit for bit
            single = ref.decode_float32(ref.convert("DOUBLE", "FLOAT32", "lossy", src, 8))
            as_double = (ref.widen_nan("FLOAT", "FLOAT64", single) if isinstance(single, ref.NaN)
                         else ref.encode_float("FLOAT64", single))
            assert got == as_double, idx
        else:  # every other conversion reads back as the source's bits, NaN payloads and signalling NaNs included
            assert got == src, idx


def dml_element_bits(value: Any, dml: DmlDataType) -> int:
    arr = np.asarray(value)
    if dml.bitwidth == 4:
        return int(arr.astype(np.int8)) & 0xF
    return int.from_bytes(arr.astype(arr.dtype.newbyteorder("<")).tobytes(), "little")


@SETTINGS
@given(cases())
def test_decode_gives_the_dml_values(c: Case) -> None:
    expected = reference_or_error(c)
    if isinstance(expected, str):
        return
    dml = DmlDataType(expected["dml_type"])
    got = dmlbridge.decode(expected["data"], dml, expected["sizes"], expected["strides"])
    assert got.shape == tuple(expected["sizes"])
    assert got.dtype == dml.numpy()
    want = ref.decode(expected["data"], expected["dml_type"], expected["sizes"], expected["strides"])
    assert [dml_element_bits(v, dml) for v in got.ravel()] == want
    # and the decoded values are the converted source elements (emulation: their low 32 bits)
    if expected["conversion"] != "lossy":
        for flat_i, idx in enumerate(np.ndindex(*c.arr.shape)):
            src = ref.element_bits(c.arr, idx)
            conv = ref.convert(c.onnx, dml.name, expected["conversion"], src, c.arr.dtype.itemsize)
            padded = (0,) * (len(expected["sizes"]) - c.arr.ndim) + idx if c.arr.ndim else (0,) * len(got.shape)
            assert dml_element_bits(got[padded], dml) == conv & ((1 << dml.bitwidth) - 1), (flat_i, idx)


@SETTINGS
@given(
    st.sampled_from([t for t in DmlDataType if t is not DmlDataType.UNKNOWN]),
    st.lists(st.integers(1, 2**16), min_size=1, max_size=8),
    st.one_of(st.none(), st.lists(st.integers(0, 2**32 - 1), min_size=8, max_size=8)),
)
def test_calc_buffer_tensor_size_formula(dml: DmlDataType, sizes: list[int], strides: list[int] | None) -> None:
    if math.prod(sizes) > 2**32 - 1:
        sizes = [min(s, 15) for s in sizes]  # keep within DirectML's element limit
    if strides is not None:
        strides = strides[: len(sizes)]
    bits = ref.DML_TYPES[dml.name][1]
    if strides is None:
        count = math.prod(sizes)
    else:
        count = sum((s - 1) * st_ for s, st_ in zip(sizes, strides, strict=True)) + 1
        if count - 1 > 2**32 - 1:  # the last element's index must fit UINT32
            with pytest.raises(dmlbridge.LayoutError, match="last element"):
                dmlbridge.calc_buffer_tensor_size(dml, sizes, strides)
            return
    nbytes = -(-count * bits // 8)  # ceil(bits / 8)
    want = -(-nbytes // 4) * 4  # rounded up to a multiple of 4
    assert dmlbridge.calc_buffer_tensor_size(dml, sizes, strides) == want
    assert dmlbridge.calc_buffer_tensor_size(int(dml), tuple(sizes), strides) == want


@SETTINGS
@given(cases(), st.integers(0, 4), st.sampled_from([0, 0, 16, 32, 64, 256]), st.integers(0, 40), st.binary(
    min_size=1, max_size=1))  # fmt: skip
def test_prepare_into_writes_only_its_range(c: Case, k: int, align: int, extra: int, fill: bytes) -> None:
    expected = reference_or_error(c)
    if isinstance(expected, str):
        return
    offset = k * (align or 16)  # every alignment drawn is >= the largest element size
    total = expected["total_tensor_size_in_bytes"]
    dst = bytearray(fill * (offset + total + extra))
    before = snapshot(c.arr)
    t = dmlbridge.prepare_into(dst, offset, c.arr, **c.kwargs(), guaranteed_base_offset_alignment=align)
    assert prepared_fields(t) == expected
    assert t.guaranteed_base_offset_alignment == align
    assert bytes(dst[offset : offset + total]) == expected["data"]
    assert dst[:offset] == fill * offset and dst[offset + total :] == fill * extra
    assert snapshot(c.arr) == before
    # data is a view into dst
    dst[offset] ^= 0xFF
    assert np.asarray(t.data)[0] == dst[offset]


def zero_copy_expected(c: Case, expected: dict[str, Any]) -> bool:
    """decisions.md: a read-only view exactly when the conversion is native (or int64 emulation, whose 8-byte
    elements are the source's own bytes), no strides (or the packed ones) were given, the source is C-contiguous
    little-endian and its byte count is a multiple of 4. Sub-byte sources are one byte per element, so they are
    never the packed bytes themselves."""
    arr = c.arr
    strides = expected["strides"]
    if expected["conversion"] == "emulate":
        strides = [s // 2 for s in strides]  # the desc strides are the logical ones doubled
    elif (
        expected["conversion"] != "native"
        or arr.dtype.itemsize * 8 != ref.DML_TYPES[ref.DML_NAME_OF_VALUE[expected["dml_type"]]][1]
    ):
        return False
    if c.strides is not None and strides != ref.packed_strides(expected["sizes"]):
        return False
    little = arr.dtype.byteorder in ("<", "|") or (arr.dtype.byteorder == "=" and np.little_endian)
    return bool(arr.flags.c_contiguous) and little and arr.nbytes % 4 == 0


@SETTINGS
@given(cases())
def test_zero_copy_exactly_when_allowed(c: Case) -> None:
    expected = reference_or_error(c)
    if isinstance(expected, str):
        return
    t = dmlbridge.prepare(c.arr, **c.kwargs())
    if zero_copy_expected(c, expected):
        assert np.shares_memory(t.data, c.arr) and not t.data.flags.writeable
    else:
        assert not np.shares_memory(t.data, c.arr) and t.data.flags.writeable
