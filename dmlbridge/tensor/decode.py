"""Reading a DirectML buffer tensor back into numpy: the inverse of the layout, not of the type mapping."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import as_strided

from dmlbridge.errors import InvalidArgumentError, counted
from dmlbridge.system.bytes_view import as_bytes
from dmlbridge.tensor.layout import check_sizes, check_strides, span_of
from dmlbridge.types.data_types import DmlDataType
from dmlbridge.types.float_bits import cast, ieee_format
from dmlbridge.types.nibbles import unpack_nibbles

__all__ = ["decode", "read_elements", "restore_values"]

_SMALL_INTS = {np.dtype(t) for t in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2)}


def read_elements(
    raw: np.ndarray, element: np.dtype, sizes: tuple[int, ...], strides: tuple[int, ...] | None
) -> np.ndarray:
    """Gather the elements at their positions into a new C-ordered array of ``sizes`` in native byte order.

    ``raw`` is a uint8 array already known to hold every position; ``element`` is a byte-sized-or-larger dtype.
    """
    count = int(np.prod(sizes))
    span = span_of(sizes, strides)
    typed = raw[: span * element.itemsize].view(element)
    if strides is None:
        view = typed[:count].reshape(sizes)
    else:
        view = as_strided(typed, shape=sizes, strides=[s * element.itemsize for s in strides], writeable=False)
    return view.astype(element.newbyteorder("="), order="C", copy=True)


def decode(
    data: Any, dml_type: DmlDataType | int | str, sizes: Sequence[int], strides: Sequence[int] | None = None
) -> np.ndarray:
    """Read a DirectML buffer tensor back: a new array of shape ``sizes`` in ``dml_type.numpy()``.

    ``data`` is any bytes-like object or uint8 array (the readback buffer, or ``PreparedTensor.data``); it must
    hold every position the sizes and strides reach. 4-bit tensors come back as ml_dtypes ``uint4``/``int4``.

    Example:
        >>> import dmlbridge
        >>> pair = dmlbridge.decode(bytes.fromhex("0100000002000000"), "INT32", [2])
        >>> pair.tolist(), pair.dtype.name
        ([1, 2], 'int32')
        >>> values = dmlbridge.decode(bytes.fromhex("21f3"), dmlbridge.DmlDataType.INT4, [3])
        >>> values.tolist(), values.dtype.name  # (an ml_dtypes int4 array)
        ([1, 2, 3], 'int4')
    """
    dml = DmlDataType.parse(dml_type)
    checked_sizes = check_sizes(sizes)
    checked_strides = None if strides is None else check_strides(strides, checked_sizes)
    raw = as_bytes(data, "data")
    span = span_of(checked_sizes, checked_strides)
    need = (span * dml.bitwidth + 7) // 8
    if raw.shape[0] < need:
        raise InvalidArgumentError(
            f"data holds {counted(raw.shape[0], 'byte')} but a {dml.name} tensor of sizes {list(checked_sizes)} and "
            f"strides "
            f"{None if checked_strides is None else list(checked_strides)} reaches {need}"
        )
    if dml.bitwidth == 4:
        nibbles = unpack_nibbles(raw, span)
        if checked_strides is None:  # already a fresh array in C order: no second copy
            return nibbles.reshape(checked_sizes).view(dml.numpy())
        # A nibble's value is exactly how ml_dtypes stores a 4-bit element (two's complement for int4).
        return read_elements(nibbles, np.dtype(np.uint8), checked_sizes, checked_strides).view(dml.numpy())
    return read_elements(raw, dml.numpy(), checked_sizes, checked_strides)


def restore_values(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Decoded DML values back in the source's ``dtype``: the inverse of the type mapping.

    Exact for native and widened values: a widened float narrows back to its own bits, NaN payloads and
    signalling NaNs included (:mod:`dmlbridge.types.float_bits`); BOOL comes back as ``values != 0``.
    """
    dtype = np.dtype(dtype)
    with np.errstate(all="ignore"):
        if dtype == np.bool_:
            return values != 0
        if dtype in _SMALL_INTS or values.dtype in _SMALL_INTS:
            # ml_dtypes casts between its own sub-byte integers only through a regular integer type.
            return values.astype(np.int64).astype(dtype)
        if ieee_format(values.dtype) and ieee_format(dtype):
            return cast(values, dtype)
        return values.astype(dtype)
