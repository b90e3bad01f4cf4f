"""The errors dmlbridge raises, the one warning it gives, and how their messages count (:func:`counted`).

Every error is a :class:`DmlBridgeError`. Each subclass also derives from the builtin exception a Python
programmer would expect (``TypeError`` for a type that cannot be mapped, ``ValueError`` for bad values), so
``except ValueError`` keeps working in code that predates dmlbridge.
"""

from __future__ import annotations

__all__ = [
    "CleanupWarning",
    "ComError",
    "DestinationError",
    "DeviceRemovedError",
    "DmlBridgeError",
    "ExternalDataError",
    "GpuError",
    "GpuOutOfMemoryError",
    "GpuUnavailableError",
    "InvalidArgumentError",
    "LayoutError",
    "ManifestError",
    "TensorProtoError",
    "TensorTooLargeError",
    "UnsupportedTypeError",
    "ValueRangeError",
    "counted",
]


class DmlBridgeError(Exception):
    """Base class of every error dmlbridge raises.

    Example:
        >>> import dmlbridge
        >>> try:
        ...     dmlbridge.dml_type_for("STRING")
        ... except dmlbridge.DmlBridgeError as exc:
        ...     print(type(exc).__name__, isinstance(exc, TypeError))
        UnsupportedTypeError True
    """


class InvalidArgumentError(DmlBridgeError, ValueError):
    """An argument is malformed: a bad option, a Target that makes no sense, a wrong kind of object.

    Example:
        >>> import dmlbridge
        >>> dmlbridge.Target(int64="wrap")
        Traceback (most recent call last):
        ...
        dmlbridge.InvalidArgumentError: int64 must be 'emulate', 'narrow' or 'saturate', not 'wrap'
    """


class UnsupportedTypeError(DmlBridgeError, TypeError):
    """A data type has no DirectML representation for the chosen target.

    Example:
        >>> import dmlbridge
        >>> dmlbridge.dml_type_for("STRING")
        Traceback (most recent call last):
        ...
        dmlbridge.UnsupportedTypeError: ONNX STRING cannot be a DirectML tensor: DirectML has no string tensors
    """


class LayoutError(DmlBridgeError, ValueError):
    """Sizes, strides, dimension count or alignment break a DirectML buffer-tensor rule.

    Example:
        >>> import dmlbridge, numpy as np
        >>> dmlbridge.prepare(np.zeros((0, 3), dtype=np.float32))
        Traceback (most recent call last):
        ...
        dmlbridge.LayoutError: the array has shape (0, 3) and no elements; DirectML has no empty tensors, ...
    """


class ValueRangeError(DmlBridgeError, ValueError):
    """A value does not fit the DirectML type it must be written as (e.g. 9 as INT4, 2**40 as INT32).

    Example:
        >>> import dmlbridge, numpy as np
        >>> dmlbridge.pack_4bit(np.array([1, 9], dtype=np.int8))
        Traceback (most recent call last):
        ...
        dmlbridge.ValueRangeError: value 9 at flat index 1 does not fit INT4 (-8..7); 4-bit values are never ...
    """


class DestinationError(DmlBridgeError, ValueError):
    """The destination buffer of ``prepare_into`` is read-only, too small or wrongly aligned.

    Example:
        >>> import dmlbridge, numpy as np
        >>> dmlbridge.prepare_into(bytearray(4), 0, np.zeros(2, dtype=np.float32))
        Traceback (most recent call last):
        ...
        dmlbridge.DestinationError: the destination holds 4 bytes; this tensor needs 8 at offset 0 (up to byte 8)
    """


class TensorProtoError(DmlBridgeError, ValueError):
    """An ONNX TensorProto is malformed: wrong byte or entry count, bad dims, unknown data type.

    Example:
        >>> import dmlbridge, onnx
        >>> tensor = onnx.TensorProto(name="t", data_type=onnx.TensorProto.FLOAT, dims=[2], raw_data=b"ab")
        >>> dmlbridge.tensor_info(tensor)
        Traceback (most recent call last):
        ...
        dmlbridge.TensorProtoError: tensor 't' has 2 bytes of raw_data but its type FLOAT and dims [2] need ...
    """


class ExternalDataError(TensorProtoError):
    """External tensor data is refused: an unsafe location, a range outside the file, a checksum mismatch.

    Example:
        >>> import dmlbridge, onnx
        >>> tensor = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[1], data_location=1)
        >>> dmlbridge.prepare(tensor)
        Traceback (most recent call last):
        ...
        dmlbridge.ExternalDataError: tensor 'w' keeps its values in external data; read it with ...
    """


class TensorTooLargeError(DmlBridgeError, ValueError):
    """A tensor is larger than the caller's ``max_tensor_bytes`` limit (checked before anything is allocated).

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import numpy_helper
        >>> dmlbridge.tensor_to_array(numpy_helper.from_array(np.zeros(4, dtype=np.float32), "w"), max_tensor_bytes=8)
        Traceback (most recent call last):
        ...
        dmlbridge.TensorTooLargeError: tensor 'w' needs 16 bytes (FLOAT [4]), more than max_tensor_bytes=8 ...
    """


class ManifestError(DmlBridgeError, ValueError):
    """An upload-plan manifest or one of its buffer files is malformed, inconsistent or missing.

    Example:
        >>> import dmlbridge
        >>> dmlbridge.load_plan("no-such-plan.json")
        Traceback (most recent call last):
        ...
        dmlbridge.ManifestError: cannot read manifest 'no-such-plan.json': No such file or directory
    """


class GpuError(DmlBridgeError, RuntimeError):
    """Direct3D 12 or DirectML refused a call of ``dmlbridge.gpu``, or is not there to call.

    Example:
        >>> import dmlbridge
        >>> issubclass(dmlbridge.ComError, dmlbridge.GpuError), issubclass(dmlbridge.GpuError, RuntimeError)
        (True, True)
    """


class GpuUnavailableError(GpuError):
    """``dmlbridge.gpu`` cannot run here: not on Windows, no ``d3d12.dll`` or ``DirectML.dll``, no such adapter,
    or ``debug=True`` where the debug layers are not installed.

    Example:
        >>> import dmlbridge
        >>> str(dmlbridge.GpuUnavailableError("dmlbridge.gpu needs Windows"))
        'dmlbridge.gpu needs Windows'
    """


class ComError(GpuError):
    """A COM call of Direct3D 12 or DirectML failed: ``call`` names it (``"IDMLDevice::CreateOperator"``),
    ``hresult`` is its HRESULT (as an unsigned 32-bit number), and the message says both.

    Example:
        >>> import dmlbridge
        >>> error = dmlbridge.ComError("IDMLDevice::CreateOperator failed with HRESULT 0x80070057 (E_INVALIDARG)",
        ...                            "IDMLDevice::CreateOperator", 0x80070057)
        >>> error.call, hex(error.hresult)
        ('IDMLDevice::CreateOperator', '0x80070057')
    """

    def __init__(self, message: str, call: str, hresult: int) -> None:
        super().__init__(message)
        self.call = call
        self.hresult = hresult

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (str(self), self.call, self.hresult)


class GpuOutOfMemoryError(ComError):
    """Direct3D 12 or DirectML ran out of memory for a call (``E_OUTOFMEMORY``): the device still works, it has not
    that much; retry with less (a smaller ``staging_bytes``, fewer or smaller tensors, a conversion's smaller
    ``max_buffer_bytes``). ``dmlupload`` exits 5 for the same.

    Example:
        >>> import dmlbridge
        >>> error = dmlbridge.GpuOutOfMemoryError("out of memory", "ID3D12Device::CreateCommittedResource",
        ...                                       0x8007000E)
        >>> isinstance(error, dmlbridge.ComError), hex(error.hresult)
        (True, '0x8007000e')
    """


class DeviceRemovedError(ComError):
    """The Direct3D 12 device was removed (lost): ``hresult`` is the reason ``GetDeviceRemovedReason`` gave
    (``DXGI_ERROR_DEVICE_HUNG``, ...), ``call`` what was running when it was found. Nothing on the device can be
    used again: create a new device (a new process, after a hang the driver blamed on this one).

    Example:
        >>> import dmlbridge
        >>> error = dmlbridge.DeviceRemovedError("removed", "ID3D12Fence::SetEventOnCompletion", 0x887A0006)
        >>> isinstance(error, dmlbridge.ComError), hex(error.hresult)
        (True, '0x887a0006')
    """


class CleanupWarning(UserWarning):
    """A conversion was published, but a file it should have removed (a buffer file of the conversion it replaced,
    say) could not be: it is left on the disk, and ``dmlbridge clean PREFIX`` (``dmlbridge.clean``) removes it.
    A warning, not an error: the conversion itself is whole and in place.

    Example:
        >>> import dmlbridge, warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warnings.warn("1 file left", dmlbridge.CleanupWarning)
        >>> caught[0].category.__name__, issubclass(dmlbridge.CleanupWarning, UserWarning)
        ('CleanupWarning', True)
    """


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, in the plural unless ``count`` is 1 (``plural``: when it is not ``noun`` + s).

    Example:
        >>> counted(1, "byte"), counted(26116, "byte"), counted(1, "entry", "entries"), counted(0, "entry", "entries")
        ('1 byte', '26116 bytes', '1 entry', '0 entries')
    """
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
