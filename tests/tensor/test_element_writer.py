"""The ElementWriter, which verify uses to make a large constant's fresh bytes a block at a time, planned once:
each element's bytes are the per-element reference's (tests/helpers/reference.py), for every code of the one-byte
floats and for each conversion that writes whole bytes; out-of-range values still refused; 4-bit types have none."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import reference as ref

from dmlbridge import Target
from dmlbridge.errors import DmlBridgeError, InvalidArgumentError
from dmlbridge.tensor.encode import element_writer

NO_FLOAT16 = Target("6.4", supported={"FLOAT32", "UINT8", "INT8", "UINT32", "INT32"})
NARROW = Target("6.4", supported={"INT32", "UINT32"}, int64="narrow")
EMULATE = Target("6.4", supported={"INT32", "UINT32"}, int64="emulate")

# (ONNX type, its dtype, the codes (bit patterns) to write, the target)
CASES = [
    ("FLOAT8E4M3FN", ml_dtypes.float8_e4m3fn, range(256), Target()),
    ("FLOAT8E5M2", ml_dtypes.float8_e5m2, range(256), Target()),
    ("FLOAT8E4M3FNUZ", ml_dtypes.float8_e4m3fnuz, range(256), NO_FLOAT16),
    ("BOOL", np.bool_, [0, 1, 1, 0], Target()),
    ("INT8", np.int8, range(256), Target()),
    ("INT64", np.int64, [0, 1, (1 << 64) - 1, (1 << 31) - 1, (1 << 64) - (1 << 31)], NARROW),
    ("INT64", np.int64, [0, 1, (1 << 64) - 1, (1 << 31) - 1], EMULATE),
    ("BFLOAT16", ml_dtypes.bfloat16, [0, 0x3F80, 0x7FC1, 0xFF81, 0x8000], NO_FLOAT16),
]  # fmt: skip


@pytest.mark.parametrize(("onnx", "dtype", "codes", "target"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_run_of_elements_is_written_as_the_reference_says(onnx: str, dtype: Any, codes: Any, target: Target) -> None:
    """A run from the middle of an array (not its start: a view with an offset), written into a larger buffer:
    each element's bytes are the reference's for that code, and the bytes after the run are untouched."""
    bits = np.dtype(dtype).itemsize * 8
    codes = list(codes)
    source = np.array([0, *codes], dtype=f"<u{bits // 8}").view(dtype)[1:]  # (offset by one element)
    writer = element_writer(source, target=target)
    assert writer is not None
    dml = writer.dml_type.name
    width = ref.DML_TYPES[dml][1] // 8 * (2 if writer.conversion == "emulate" else 1)
    out = np.full(len(codes) * width + 8, 0xAB, np.uint8)
    assert writer.write(source, out) == len(codes) * width
    expected = [ref.convert(onnx, dml, writer.conversion, code, bits // 8) for code in codes]
    got = np.frombuffer(out[: len(codes) * width].tobytes(), f"<u{width}").tolist()
    assert got == expected
    assert out[len(codes) * width :].tolist() == [0xAB] * 8


def test_a_value_out_of_range_is_still_refused() -> None:
    """Narrowing checks each run's values, as prepare does."""
    writer = element_writer(np.zeros(1, np.int64), target=NARROW)
    assert writer is not None
    with pytest.raises(DmlBridgeError, match="32"):
        writer.write(np.array([1, 1 << 40], np.int64), np.zeros(8, np.uint8))


def test_a_run_too_long_for_its_room_is_refused() -> None:
    writer = element_writer(np.zeros(1, np.float32))
    assert writer is not None
    with pytest.raises(InvalidArgumentError, match="at least 8 bytes"):
        writer.write(np.ones(2, np.float32), np.zeros(4, np.uint8))


def test_four_bit_elements_have_no_writer() -> None:
    assert element_writer(np.zeros(1, ml_dtypes.int4)) is None
