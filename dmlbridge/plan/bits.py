"""Comparing values bit for bit: what verification calls equal. No float arithmetic is done (a NaN is its bits,
and comparing them raises no warning), and -0 is not +0.

    >>> import numpy as np
    >>> nan = np.array([0x7F81, 0x7FC0], np.uint16).view(np.float16)
    >>> differing_bits(nan, nan[::-1]).tolist(), same_bits(nan, nan.copy())
    ([True, True], True)
"""

from __future__ import annotations

import numpy as np

__all__ = ["differing_bits", "same_bits"]

_SUB_BYTE_INTEGERS = frozenset({"int4", "uint4", "int2", "uint2"})


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-for-bit equality of two arrays of one dtype and shape."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return not differing_bits(a, b).any()


def differing_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element, whether two arrays of one shape and dtype differ bit for bit."""
    if a.dtype == np.bool_:
        return np.asarray(a != b)
    name = a.dtype.name
    if name in _SUB_BYTE_INTEGERS:  # (ml_dtypes' sub-byte types, one byte per element: only the low bits count)
        return np.asarray(a.astype(np.int64) != b.astype(np.int64))
    if name.startswith(("float4", "float6")):  # (no NaN; float32 holds every value and keeps -0 apart from +0)
        with np.errstate(all="ignore"):  # (bits past the format's own, which a hostile buffer may hold, warn)
            a, b = a.astype(np.float32), b.astype(np.float32)
    bits = np.dtype(f"u{a.dtype.itemsize}")
    return np.asarray(a.view(bits) != b.view(bits))
