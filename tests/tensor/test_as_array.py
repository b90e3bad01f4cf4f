"""``np.asarray(prepared)``: a PreparedTensor's values as numpy 2's ``__array__(dtype, copy)`` gives them (it was a
0-d object array), held to the source values for every kind of conversion."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dmlbridge
from dmlbridge import InvalidArgumentError, Target


@pytest.mark.parametrize(("values", "target"), [
    (np.array([[1.5, -2.0, 0.25]], np.float32), Target()),
    (np.array([1.0, -0.5], np.float16), Target()),
    (np.array([True, False, True]), Target()),  # (bool: stored as UINT8)
    (np.array([-8, -1, 0, 7], ml_dtypes.int4), Target()),  # (4-bit: nibbles packed)
    (np.array([2**20, -3], np.int64), Target("2.0")),  # (emulated: 8-byte elements described as 4-byte ones)
    (np.array([1.5, 2.5], ml_dtypes.bfloat16), Target()),  # (widened to FLOAT32)
    (np.float32(3.25), Target()),  # (a scalar: 0-d)
])
def test_as_array_gives_the_source_values(values: np.ndarray, target: Target) -> None:
    prepared = dmlbridge.prepare(values, target=target)
    got = np.asarray(prepared)
    assert got.dtype == values.dtype and got.shape == np.shape(values)
    assert got.tobytes() == np.asarray(values).tobytes()
    assert np.array(prepared, dtype=np.float64).tolist() == np.asarray(values).astype(np.float64).tolist()


def test_as_array_refuses_never_to_copy() -> None:
    """numpy 2's protocol, called as numpy 2 calls it (numpy 1, which the Windows run has, passes no copy)."""
    prepared = dmlbridge.prepare(np.arange(4, dtype=np.float32))
    assert prepared.__array__(copy=None).tolist() == [0, 1, 2, 3]
    assert prepared.__array__(np.float64, copy=True).dtype == np.float64
    with pytest.raises(InvalidArgumentError, match="cannot be given without a copy"):
        prepared.__array__(copy=False)
