"""Seeing any bytes-like object (bytes, bytearray, memoryview, mmap, numpy array) as a flat uint8 array."""

from __future__ import annotations

from typing import Any

import numpy as np

from dmlbridge.errors import DestinationError, InvalidArgumentError

__all__ = ["as_bytes", "as_writable_bytes"]


def as_bytes(data: Any, what: str) -> np.ndarray:
    """A flat uint8 view of ``data`` without copying; numpy arrays must be contiguous."""
    if isinstance(data, np.ndarray):
        if not (data.flags.c_contiguous or data.flags.f_contiguous):
            raise InvalidArgumentError(f"{what} must be a contiguous buffer; pass np.ascontiguousarray(...)")
        return data.reshape(-1, order="A").view(np.uint8) if data.size else np.empty(0, np.uint8)
    try:
        view = memoryview(data)
    except TypeError:
        raise InvalidArgumentError(
            f"{what} must be a bytes-like object (bytes, bytearray, memoryview, mmap, numpy array), "
            f"got {type(data).__name__}"
        ) from None
    if not view.contiguous:
        raise InvalidArgumentError(f"{what} must be a contiguous buffer")
    return np.frombuffer(view.cast("B") if view.ndim != 1 or view.format != "B" else view, dtype=np.uint8)


def as_writable_bytes(dst: Any) -> np.ndarray:
    """A flat, writable uint8 view of ``dst``; DestinationError when it is read-only or not contiguous."""
    if isinstance(dst, np.ndarray):
        if not dst.flags.writeable:
            raise DestinationError("the destination array is read-only; pass a writable buffer")
    else:
        try:
            view = memoryview(dst)
        except TypeError:
            raise DestinationError(
                f"the destination must be a writable buffer (bytearray, memoryview, mmap, numpy array), "
                f"got {type(dst).__name__}"
            ) from None
        if view.readonly:
            raise DestinationError(
                f"the destination {type(dst).__name__} is read-only; pass a bytearray, a writable mmap or array"
            )
    try:
        out = as_bytes(dst, "the destination")
    except InvalidArgumentError as exc:
        raise DestinationError(str(exc)) from None
    if not out.flags.writeable:
        raise DestinationError("the destination is read-only; pass a writable buffer")
    return out
