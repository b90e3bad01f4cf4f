"""NaNs through every float conversion, both ways: payloads, signalling NaNs and negative NaNs.

The answers are worked out by hand (the bits of each NaN written down, ``struct`` packing them) or by the per-element
reference (tests/helpers/reference.py), never by dmlbridge: a widened NaN of an IEEE-style type (FLOAT16,
BFLOAT16, FLOAT, FLOAT8E5M2) keeps its sign and its mantissa shifted to the top of the wider one; a NaN of a type
with one NaN a sign becomes the canonical quiet NaN of its sign; every value reads back as its own bits.
"""

from __future__ import annotations

import struct
import warnings
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import reference as ref

import dmlbridge
from dmlbridge import DmlDataType, Target

_EVERY = {t for t in DmlDataType if t is not DmlDataType.UNKNOWN}
NO_FLOAT16 = Target(supported=_EVERY - {DmlDataType.FLOAT16})
ONLY_FLOAT64 = Target(supported={DmlDataType.FLOAT64, DmlDataType.INT8})  # (every float type becomes FLOAT64)
NO_FLOAT64 = Target(supported=_EVERY - {DmlDataType.FLOAT64}, allow_lossy=True)


def _source(dtype: Any, codes: list[int]) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    return np.array(codes, dtype=f"<u{width}").view(dtype)


def _written(dtype: Any, codes: list[int], target: Target) -> tuple[str, bytes]:
    prepared = dmlbridge.prepare(_source(dtype, codes), target=target)
    return prepared.dml_type.name, prepared.data.tobytes()


# (source dtype, source codes, target, DML type, the DML elements' bits, worked out by hand)
KNOWN_ANSWERS = [
    # FLOAT8E5M2 is the top byte of a FLOAT16: 0x7D (signalling, payload 01) is 0x7D00, not the quiet 0x7E00.
    (ml_dtypes.float8_e5m2, [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF, 0x7C, 0x3C], Target(), "FLOAT16",
     [0x7D00, 0x7E00, 0x7F00, 0xFD00, 0xFE00, 0xFF00, 0x7C00, 0x3C00]),
    # ... and its mantissa (2 bits) at the top of FLOAT32's (23): shifted by 21, the sign kept.
    (ml_dtypes.float8_e5m2, [0x7D, 0xFF, 0x7E], NO_FLOAT16, "FLOAT32", [0x7FA00000, 0xFFE00000, 0x7FC00000]),
    (ml_dtypes.float8_e5m2, [0x7D, 0xFE], ONLY_FLOAT64, "FLOAT64", [0x7FF4000000000000, 0xFFF8000000000000]),
    # FLOAT16 (10 mantissa bits) in FLOAT32: shifted by 13; 0x7C01 stays signalling.
    (np.float16, [0x7C01, 0xFD55, 0x7E00], NO_FLOAT16, "FLOAT32", [0x7F802000, 0xFFAAA000, 0x7FC00000]),
    (np.float16, [0x7C01], ONLY_FLOAT64, "FLOAT64", [0x7FF0040000000000]),
    # BFLOAT16 (7 bits) in FLOAT32: its bits shifted by 16; in FLOAT64 its mantissa shifted by 45, not quieted.
    (ml_dtypes.bfloat16, [0x7F81, 0xFF81, 0xFFC1], Target(), "FLOAT32", [0x7F810000, 0xFF810000, 0xFFC10000]),
    (ml_dtypes.bfloat16, [0x7F81, 0xFF81], ONLY_FLOAT64, "FLOAT64", [0x7FF0200000000000, 0xFFF0200000000000]),
    # FLOAT (23 bits) in FLOAT64: shifted by 29; the processor's conversion would quiet 0x7F800001.
    (np.float32, [0x7F800001, 0xFFBFFFFF], ONLY_FLOAT64, "FLOAT64", [0x7FF0000020000000, 0xFFF7FFFFE0000000]),
    # The types of one NaN a sign: the canonical quiet NaN of that sign.
    (ml_dtypes.float8_e4m3fn, [0x7F, 0xFF], Target(), "FLOAT16", [0x7E00, 0xFE00]),
    (ml_dtypes.float8_e4m3fnuz, [0x80], Target(), "FLOAT16", [0xFE00]),
    (ml_dtypes.float8_e5m2fnuz, [0x80], NO_FLOAT16, "FLOAT32", [0xFFC00000]),
    (ml_dtypes.float8_e8m0fnu, [0xFF], Target(), "FLOAT32", [0x7FC00000]),
    # DOUBLE rounded to FLOAT32 (lossy): a NaN whose low 29 mantissa bits are zero is one FLOAT32 holds, and is
    # kept (still signalling); one that is not is quieted with its top payload bits.
    (np.float64, [0xFFF0000020000000, 0x7FF0000000000001, 0x7FF8000000000001], NO_FLOAT64, "FLOAT32",
     [0xFF800001, 0x7FC00000, 0x7FC00000]),
]
_STRUCT = {"FLOAT16": "<H", "FLOAT32": "<I", "FLOAT64": "<Q"}


def _ids(case: tuple[Any, ...]) -> str:
    return f"{np.dtype(case[0]).name}->{case[3]}"


@pytest.mark.parametrize("case", KNOWN_ANSWERS, ids=_ids)
def test_nans_widen_as_worked_out_by_hand(case: tuple[Any, ...]) -> None:
    dtype, codes, target, dml, bits = case
    written = _written(dtype, codes, target)
    fmt = _STRUCT[dml]
    assert written[0] == dml
    assert written[1][: len(bits) * struct.calcsize(fmt)] == b"".join(struct.pack(fmt, b) for b in bits)


@pytest.mark.parametrize("case", [c for c in KNOWN_ANSWERS if c[0] is not np.float64], ids=_ids)
def test_nans_read_back_as_their_own_bits(case: tuple[Any, ...]) -> None:
    """to_numpy() gives the source's bits: FLOAT32 0x7F810000 is BFLOAT16 0x7F81, not the quiet 0x7FC0."""
    dtype, codes, target, _, _ = case
    source = _source(dtype, codes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no numpy RuntimeWarning on a NaN either)
        back = dmlbridge.prepare(source, target=target).to_numpy()
    width = f"<u{source.dtype.itemsize}"
    assert back.dtype == source.dtype and back.view(width).tolist() == codes


def test_a_lossy_nan_reads_back_as_the_float32_it_became() -> None:
    """Only the NaNs FLOAT32 holds come back as they were; the others as the quiet NaN they were rounded to."""
    source = _source(np.float64, [0xFFF0000020000000, 0x7FF0000000000001])
    back = dmlbridge.prepare(source, target=NO_FLOAT64).to_numpy()
    assert back.view("<u8").tolist() == [0xFFF0000020000000, 0x7FF8000000000000]


# (source ONNX type, its dtype, the bits of its codes) for every code of the small float types
_EVERY_CODE = [
    ("FLOAT16", np.float16, 16), ("BFLOAT16", ml_dtypes.bfloat16, 16), ("FLOAT8E4M3FN", ml_dtypes.float8_e4m3fn, 8),
    ("FLOAT8E4M3FNUZ", ml_dtypes.float8_e4m3fnuz, 8), ("FLOAT8E5M2", ml_dtypes.float8_e5m2, 8),
    ("FLOAT8E5M2FNUZ", ml_dtypes.float8_e5m2fnuz, 8), ("FLOAT8E8M0", ml_dtypes.float8_e8m0fnu, 8),
    ("FLOAT4E2M1", ml_dtypes.float4_e2m1fn, 4), ("FLOAT6E2M3", ml_dtypes.float6_e2m3fn, 6),
    ("FLOAT6E3M2", ml_dtypes.float6_e3m2fn, 6),
]  # fmt: skip
_TARGETS = {"default": Target(), "no FLOAT16": NO_FLOAT16, "only FLOAT64": ONLY_FLOAT64}


@pytest.mark.parametrize("target_name", sorted(_TARGETS))
@pytest.mark.parametrize(("onnx", "dtype", "bits"), _EVERY_CODE, ids=[c[0] for c in _EVERY_CODE])
def test_every_code_widens_as_the_reference_says_and_reads_back_as_itself(
        onnx: str, dtype: Any, bits: int, target_name: str) -> None:
    """Every code of each type: its DML bits are the reference's (element by element), and to_numpy() gives the
    code back, NaNs included."""
    codes = list(range(1 << bits))
    source = _source(dtype, codes)
    prepared = dmlbridge.prepare(source, target=_TARGETS[target_name])
    dml = prepared.dml_type.name
    width = ref.DML_TYPES[dml][1] // 8
    expected = [ref.convert(onnx, dml, prepared.conversion, code, source.dtype.itemsize) for code in codes]
    got = np.frombuffer(prepared.data.tobytes()[: len(codes) * width], dtype=f"<u{width}").tolist()
    assert got == expected
    back = prepared.to_numpy()
    assert back.view(f"<u{source.dtype.itemsize}").tolist() == codes


_ONE_BYTE_CODES = [c for c in _EVERY_CODE if c[2] <= 8]


@pytest.mark.parametrize("target_name", sorted(_TARGETS))
@pytest.mark.parametrize(("onnx", "dtype", "bits"), _ONE_BYTE_CODES, ids=[c[0] for c in _ONE_BYTE_CODES])
def test_every_pair_of_codes_widens_as_the_reference_says(onnx: str, dtype: Any, bits: int, target_name: str) -> None:
    """Every ordered pair of codes side by side (the two-code lookup table's every entry, both halves), then one
    code alone (the one-code table of an odd tail): each element's DML bits are the reference's, element by
    element (its answer for each code, placed by index)."""
    count = 1 << bits
    first, second = np.divmod(np.arange(count * count), count)
    codes = [*np.stack([first, second], axis=1).reshape(-1).tolist(), count - 1]
    prepared = dmlbridge.prepare(_source(dtype, codes), target=_TARGETS[target_name])
    dml = prepared.dml_type.name
    width = ref.DML_TYPES[dml][1] // 8
    answer = np.array([ref.convert(onnx, dml, prepared.conversion, code, 1) for code in range(count)], np.uint64)
    got = np.frombuffer(prepared.data.tobytes()[: len(codes) * width], dtype=f"<u{width}")
    assert np.array_equal(got.astype(np.uint64), answer[np.array(codes)])


@pytest.mark.parametrize("block", [6, 1 << 20])
def test_widening_is_the_same_across_its_blocks(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The codes widened a block of np.take at a time (a few codes, to cross many blocks, and the block the code
    uses, crossed by 2 Mi + 3 codes): each element's bits are the reference's answer for its code."""
    monkeypatch.setattr("dmlbridge.tensor.encode._WIDEN_BLOCK", block)
    count = 2 * max(block, 1 << 10) + 3
    codes = np.random.default_rng(block).integers(0, 256, count).tolist()
    prepared = dmlbridge.prepare(_source(ml_dtypes.float8_e4m3fn, codes))
    answer = np.array([ref.convert("FLOAT8E4M3FN", "FLOAT16", "widen", code, 1) for code in range(256)], np.uint16)
    got = np.frombuffer(prepared.data.tobytes()[: count * 2], dtype="<u2")
    assert np.array_equal(got, answer[np.array(codes)])
