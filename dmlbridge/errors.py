"""The errors dmlbridge raises.

Every error is a :class:`DmlBridgeError`. Each subclass also derives from the builtin exception a Python
programmer would expect (``TypeError`` for a type that cannot be mapped, ``ValueError`` for bad values), so
``except ValueError`` keeps working in code that predates dmlbridge.
"""

from __future__ import annotations

__all__ = [
    "DestinationError",
    "DmlBridgeError",
    "ExternalDataError",
    "InvalidArgumentError",
    "LayoutError",
    "ManifestError",
    "TensorProtoError",
    "TensorTooLargeError",
    "UnsupportedTypeError",
    "ValueRangeError",
]


class DmlBridgeError(Exception):
    """Base class of every error dmlbridge raises."""


class InvalidArgumentError(DmlBridgeError, ValueError):
    """An argument is malformed: a bad option, a Target that makes no sense, a wrong kind of object."""


class UnsupportedTypeError(DmlBridgeError, TypeError):
    """A data type has no DirectML representation for the chosen target."""


class LayoutError(DmlBridgeError, ValueError):
    """Sizes, strides, dimension count or alignment break a DirectML buffer-tensor rule."""


class ValueRangeError(DmlBridgeError, ValueError):
    """A value does not fit the DirectML type it must be written as (e.g. 9 as INT4, 2**40 as INT32)."""


class DestinationError(DmlBridgeError, ValueError):
    """The destination buffer of ``prepare_into`` is read-only, too small or wrongly aligned."""


class TensorProtoError(DmlBridgeError, ValueError):
    """An ONNX TensorProto is malformed: wrong byte or entry count, bad dims, unknown data type."""


class ExternalDataError(TensorProtoError):
    """External tensor data is refused: an unsafe location, a range outside the file, a checksum mismatch."""


class TensorTooLargeError(DmlBridgeError, ValueError):
    """A tensor is larger than the caller's ``max_tensor_bytes`` limit (checked before anything is allocated)."""


class ManifestError(DmlBridgeError, ValueError):
    """An upload-plan manifest or its .bin file is malformed or inconsistent."""
