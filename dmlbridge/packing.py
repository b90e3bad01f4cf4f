"""4-bit nibble packing: two elements per byte, the first in the low nibble (DirectML's and ONNX's order).

Work proceeds in cache-sized blocks so no full-size temporaries are made: packing a large tensor touches each
source byte once and each output byte once.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from dmlbridge.errors import InvalidArgumentError, ValueRangeError

__all__ = ["pack_4bit", "pack_nibbles_into", "to_nibbles", "unpack_4bit", "unpack_nibbles"]

# Elements per block: 1 Mi elements keeps the temporaries (a few bytes each) inside L2 on common machines.
BLOCK = 1 << 20

_INT4_LIKE = {np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)}
_INT2_LIKE = {np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.uint2)}


def _nibbles(block: np.ndarray, signed: bool, start: int) -> np.ndarray:
    """The low-nibble bit patterns (uint8) of one block of integer values, checking the 4-bit range
    (``start`` is the block's flat index, for the error message)."""
    dtype = block.dtype
    if dtype in _INT4_LIKE:
        # ml_dtypes keeps a 4-bit value in the low nibble of its byte (two's complement for int4).
        return block.view(np.uint8) & np.uint8(0x0F)
    if dtype in _INT2_LIKE:
        # Sign- or zero-extend the 2-bit value to 4 bits.
        return block.astype(np.int8).view(np.uint8) & np.uint8(0x0F)
    lo, hi = (-8, 7) if signed else (0, 15)
    if block.size and (block.min() < lo or block.max() > hi):
        bad = np.flatnonzero((block < lo) | (block > hi))[0]
        raise ValueRangeError(
            f"value {block[bad].item()!r} at flat index {start + int(bad)} does not fit "
            f"{'INT4' if signed else 'UINT4'} ({lo}..{hi}); 4-bit values are never wrapped: clip or requantise "
            "the data first"
        )
    return block.astype(np.uint8, casting="unsafe") & np.uint8(0x0F)


def pack_nibbles_into(out: np.ndarray, values: np.ndarray, signed: bool) -> None:
    """Pack the 1-D integer ``values`` into ``out`` (uint8, at least ceil(n / 2) bytes), block by block.

    Only the first ceil(n / 2) bytes of ``out`` are written; the spare high nibble of an odd count is zero.
    Raises ValueRangeError (naming the flat index) for a value outside the 4-bit range.
    """
    n = values.shape[0]
    for start in range(0, n - n % 2, BLOCK):
        stop = min(start + BLOCK, n - n % 2)
        nib = _nibbles(values[start:stop], signed, start)
        low = nib[0::2]
        np.left_shift(nib[1::2], 4, out=out[start // 2 : stop // 2], dtype=np.uint8)
        np.bitwise_or(out[start // 2 : stop // 2], low, out=out[start // 2 : stop // 2])
    if n % 2:
        out[n // 2] = _nibbles(values[n - 1 :], signed, n - 1)[0]


def pack_4bit(values: Any) -> np.ndarray:
    """Pack integers into 4-bit DirectML/ONNX bytes: two per byte, first in the low nibble, ceil(n / 2) bytes.

    Signedness comes from the dtype: signed integers and ml_dtypes int4/int2 give INT4 (-8..7), unsigned
    integers and uint4/uint2 give UINT4 (0..15). Any shape is packed in C order. Values out of range raise
    ValueRangeError, never wrap. Returns a new uint8 array (no padding to 4 bytes: that is the buffer's job).
    """
    array = np.asarray(values)
    kind = array.dtype.kind
    if array.dtype in _INT4_LIKE or array.dtype in _INT2_LIKE:
        signed = array.dtype in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.int2))
    elif kind in "iu":
        signed = kind == "i"
    else:
        raise InvalidArgumentError(
            f"pack_4bit takes integers (int8/uint8/... or ml_dtypes int4/uint4), got dtype {array.dtype}"
        )
    flat = array.reshape(-1)
    out = np.empty((flat.shape[0] + 1) // 2, dtype=np.uint8)
    pack_nibbles_into(out, flat, signed)
    return out


def to_nibbles(values: np.ndarray, signed: bool) -> np.ndarray:
    """The 1-D integer ``values`` as a uint8 array of nibble bit patterns (0..15), range-checked block by block."""
    out = np.empty(values.shape[0], dtype=np.uint8)
    for start in range(0, values.shape[0], BLOCK):
        stop = min(start + BLOCK, values.shape[0])
        out[start:stop] = _nibbles(values[start:stop], signed, start)
    return out


def unpack_nibbles(data: np.ndarray, count: int) -> np.ndarray:
    """The first ``count`` nibbles of packed uint8 ``data`` as a uint8 array of values 0..15."""
    used = data[: (count + 1) // 2]
    out = np.empty(used.shape[0] * 2, dtype=np.uint8)
    np.bitwise_and(used, 0x0F, out=out[0::2])
    np.right_shift(used, 4, out=out[1::2])
    return out[:count]


def unpack_4bit(data: Any, count: int, signed: bool) -> np.ndarray:
    """Unpack ``count`` 4-bit elements from packed bytes: int8 (-8..7) when ``signed``, else uint8 (0..15).

    ``data`` is any bytes-like object or uint8 array holding at least ceil(count / 2) bytes; extra bytes (such
    as the padding of a DirectML buffer) are ignored.
    """
    from dmlbridge.buffers import as_bytes

    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise InvalidArgumentError(f"count must be a non-negative whole number, got {count!r}")
    raw = as_bytes(data, "data")
    need = (int(count) + 1) // 2
    if raw.shape[0] < need:
        raise InvalidArgumentError(f"{count} 4-bit elements need {need} bytes, data has {raw.shape[0]}")
    nib = unpack_nibbles(raw, int(count))
    if not signed:
        return nib
    # Sign-extend: (x ^ 8) - 8 maps 8..15 to -8..-1.
    return ((nib ^ np.uint8(8)).view(np.int8) - np.int8(8)).astype(np.int8, copy=False)
