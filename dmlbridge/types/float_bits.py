"""Casts between float types that keep every NaN the destination can hold: its sign, its payload, and whether it
is signalling.

numpy's and ml_dtypes' ``astype`` is exact for every number, but not for every NaN: ml_dtypes makes each
float8_e5m2 NaN and each float32 NaN cast to bfloat16 the canonical quiet NaN, and the processor's float32 to
float64 conversion quiets a signalling NaN. :func:`cast` is ``astype`` for every number, and for the NaNs of the
types with one NaN a sign (float8_e4m3fn, the fnuz types, float8_e8m0fnu). The IEEE-style types (float16,
bfloat16, float32, float64 and float8_e5m2, whose NaNs are an all-ones exponent and any nonzero mantissa) carry
a payload in that mantissa: a NaN cast to a wider one keeps its sign and its mantissa bits, shifted to the top
of the wider mantissa (float8_e5m2 is the top byte of a float16: its NaN ``c`` becomes ``c << 8``). Cast to a
narrower one, a NaN whose dropped bits are zero (every NaN a widening made) becomes the NaN it was widened from;
any other NaN is ``astype``'s (quiet, of its sign). So a value widened and narrowed back is its own bits.

    >>> import ml_dtypes
    >>> codes = np.array([0x7D, 0xFF], np.uint8).view(ml_dtypes.float8_e5m2)
    >>> [hex(bits) for bits in cast(codes, np.float16).view(np.uint16)]
    ['0x7d00', '0xff00']
    >>> wide = np.array([0x7F810000], np.uint32).view(np.float32)
    >>> [hex(bits) for bits in cast(wide, ml_dtypes.bfloat16).view(np.uint16)]
    ['0x7f81']
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

__all__ = ["cast", "cast_into", "ieee_format"]

_IEEE_FORMATS: dict[type, tuple[int, int]] = {
    np.float16: (16, 10), np.float32: (32, 23), np.float64: (64, 52), ml_dtypes.bfloat16: (16, 7),
    ml_dtypes.float8_e5m2: (8, 2),
}


def ieee_format(dtype: Any) -> tuple[int, int] | None:
    """(width, mantissa bits) of an IEEE-style float dtype, whose NaNs carry a payload; None for any other.

    Example:
        >>> ieee_format(np.float16), ieee_format(ml_dtypes.float8_e4m3fn)
        ((16, 10), None)
    """
    return _IEEE_FORMATS.get(np.dtype(dtype).type)


def cast(values: np.ndarray, dtype: Any) -> np.ndarray:
    """``values`` as ``dtype`` (a new array), NaNs kept as the module docstring says.

    Example:
        >>> signalling = np.array([0x7F800001], np.uint32).view(np.float32)
        >>> hex(cast(signalling, np.float64).view(np.uint64)[0])
        '0x7ff0000020000000'
    """
    out = np.empty(np.shape(values), dtype=dtype)
    cast_into(values, out)
    return out


def cast_into(source: np.ndarray, dest: np.ndarray) -> None:
    """Write ``source`` cast to ``dest``'s dtype into ``dest`` (of the same shape, any strides), NaNs kept as the
    module docstring says.

    Example:
        >>> out = np.empty(1, np.float32)
        >>> cast_into(np.array([0x7D00], np.uint16).view(np.float16), out)
        >>> hex(out.view(np.uint32)[0])
        '0x7fa00000'
    """
    have, want = ieee_format(source.dtype), ieee_format(dest.dtype)
    with np.errstate(all="ignore"):  # (a signalling NaN raises the invalid flag: defined here)
        if have is None or want is None or have == want:
            np.copyto(dest, source, casting="unsafe")
        elif source.flags.c_contiguous and dest.flags.c_contiguous:  # (a block at a time, while it is in cache)
            flat_source, flat_dest = source.reshape(-1), dest.reshape(-1)
            for start in range(0, flat_source.shape[0], _BLOCK):
                block, out = flat_source[start : start + _BLOCK], flat_dest[start : start + _BLOCK]
                np.copyto(out, block, casting="unsafe")
                _keep_nans(block, out, have, want)
        else:
            np.copyto(dest, source, casting="unsafe")
            _keep_nans(source, dest, have, want)


_BLOCK = 1 << 16
"""Elements cast and checked for NaNs at a time (the masks and their temporaries: a few hundred KiB)."""


def _keep_nans(source: np.ndarray, dest: np.ndarray, have: tuple[int, int], want: tuple[int, int]) -> None:
    """Write into ``dest`` the NaNs of ``source`` that its type holds, bit for bit (see the module docstring)."""
    width, mantissa_bits = have
    bits = _bits(source)
    word = np.dtype(f"u{source.dtype.itemsize}").type
    infinity = ((1 << (width - 1 - mantissa_bits)) - 1) << mantissa_bits
    mantissa = word((1 << mantissa_bits) - 1)
    nan = (bits & word((1 << (width - 1)) - 1)) > word(infinity)  # (a magnitude above infinity's)
    if not nan.any():
        return
    shift = want[1] - mantissa_bits
    if shift < 0:  # narrowing: only the NaNs whose dropped bits are zero, and whose kept bits are not
        nan &= ((bits & word((1 << -shift) - 1)) == 0) & ((bits & mantissa) >> word(-shift) != 0)
        if not nan.any():
            return
    picked = bits[nan].astype(np.uint64)
    payload = picked & np.uint64((1 << mantissa_bits) - 1)
    payload = payload << np.uint64(shift) if shift >= 0 else payload >> np.uint64(-shift)
    sign = (picked >> np.uint64(width - 1)) << np.uint64(want[0] - 1)
    all_ones = np.uint64(((1 << (want[0] - 1 - want[1])) - 1) << want[1])
    out = _bits(dest)
    out[nan] = (sign | all_ones | payload).astype(out.dtype)


def _bits(array: np.ndarray) -> np.ndarray:
    """The array's elements as unsigned integers of their width and byte order (a view)."""
    order = array.dtype.byteorder if array.dtype.byteorder in "<>" else "="
    return array.view(np.dtype(f"u{array.dtype.itemsize}").newbyteorder(order))
