"""Decoding ONNX TensorProtos into numpy arrays, strictly and without allocating on a claim.

:func:`tensor_to_array` returns the same dtype, shape and bit patterns as ``onnx.numpy_helper.to_array`` for
every data type that has values, from every storage form, but refuses what onnx lets through:

- ``raw_data`` (and external data) must hold exactly ``ceil(n * bits / 8)`` bytes (6-bit floats: four elements
  per three bytes, an LSB-first bit stream, the last byte zero padded). Padding bits are ignored.
- a typed field must hold exactly the expected number of entries (``ceil(n/2)`` packed bytes for 4-bit types,
  ``ceil(n/4)`` for 2-bit types, ``2n`` floats for COMPLEX64/128, ``n`` otherwise) and must be the field ONNX
  uses for the type (float_data for FLOAT/COMPLEX64, double_data for DOUBLE/COMPLEX128, int64_data for INT64,
  uint64_data for UINT32/UINT64, string_data for STRING, int32_data for the rest).
- entries must fit their type: int32_data INT8 -128..127, UINT8 0..255, INT16 -32768..32767, UINT16 0..65535,
  BOOL 0..1, FLOAT16/BFLOAT16 bit patterns 0..65535, FLOAT8*/FLOAT8E8M0 patterns and packed 4-bit/2-bit bytes
  0..255, FLOAT6* 0..63; uint64_data UINT32 0..2**32-1; BOOL raw bytes 0 or 1.
- exactly one storage form: raw_data, one typed field, or external data (an empty tensor may have none).
- dims are non-negative; ``segment`` is refused; UNDEFINED is a TensorProtoError, an unknown data_type an
  UnsupportedTypeError.
- sizes are checked against ``max_tensor_bytes`` and against the bytes actually present before anything of the
  claimed size is allocated.

STRING tensors decode to an object array of ``str`` (UTF-8), as numpy_helper does (but keeping trailing NULs,
which numpy_helper strips); invalid UTF-8 is a TensorProtoError. Fixed-width ``raw_data`` and external data come
back as read-only views (no copy); other results are fresh arrays.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dmlbridge.errors import (
    DmlBridgeError,
    ExternalDataError,
    InvalidArgumentError,
    TensorProtoError,
    TensorTooLargeError,
    UnsupportedTypeError,
    counted,
)
from dmlbridge.onnx.external_data import ExternalDataReader, parse_external_data, tensor_label
from dmlbridge.onnx.wire import float_field
from dmlbridge.types.data_types import OnnxDataType
from dmlbridge.types.nibbles import unpack_nibbles

__all__ = [
    "DEFAULT_MAX_TENSOR_BYTES",
    "TYPE_OF_CODE",
    "TensorInfo",
    "check_max_tensor_bytes",
    "decode_examined",
    "decode_range",
    "examine_tensor",
    "tensor_info",
    "tensor_sizes",
    "tensor_to_array",
]

DEFAULT_MAX_TENSOR_BYTES = 16 << 30
"""Largest constant (the larger of its decoded array and its DirectML bytes) accepted unless the caller raises the
limit."""


def check_max_tensor_bytes(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"max_tensor_bytes must be a non-negative integer, got {value!r}")
    return value



Storage = Literal["raw", "typed", "external"]

_T = OnnxDataType
_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")
_FIELD_OF = {
    _T.FLOAT: "float_data",
    _T.COMPLEX64: "float_data",
    _T.DOUBLE: "double_data",
    _T.COMPLEX128: "double_data",
    _T.INT64: "int64_data",
    _T.UINT32: "uint64_data",
    _T.UINT64: "uint64_data",
    _T.STRING: "string_data",
}  # every other type: int32_data
_FIELD_DTYPE = {
    "float_data": np.float32,
    "double_data": np.float64,
    "int32_data": np.int32,
    "int64_data": np.int64,
    "uint64_data": np.uint64,
}
_U8, _U16 = (0, 0xFF), (0, 0xFFFF)
_ENTRY_RANGE: dict[OnnxDataType, tuple[int, int]] = {
    _T.INT8: (-0x80, 0x7F),
    _T.UINT8: _U8,
    _T.INT16: (-0x8000, 0x7FFF),
    _T.UINT16: _U16,
    _T.BOOL: (0, 1),
    _T.FLOAT16: _U16,
    _T.BFLOAT16: _U16,
    _T.FLOAT8E4M3FN: _U8,
    _T.FLOAT8E4M3FNUZ: _U8,
    _T.FLOAT8E5M2: _U8,
    _T.FLOAT8E5M2FNUZ: _U8,
    _T.FLOAT8E8M0: _U8,
    _T.UINT4: _U8,
    _T.INT4: _U8,
    _T.FLOAT4E2M1: _U8,
    _T.UINT2: _U8,
    _T.INT2: _U8,
    _T.FLOAT6E2M3: (0, 0x3F),
    _T.FLOAT6E3M2: (0, 0x3F),
    _T.UINT32: (0, 0xFFFFFFFF),
}
_BIT_PATTERN_TYPES = frozenset(
    {
        _T.FLOAT16,
        _T.BFLOAT16,
        _T.FLOAT8E4M3FN,
        _T.FLOAT8E4M3FNUZ,
        _T.FLOAT8E5M2,
        _T.FLOAT8E5M2FNUZ,
        _T.FLOAT8E8M0,
        _T.FLOAT6E2M3,
        _T.FLOAT6E3M2,
    }
)
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


@dataclass(frozen=True)
class TensorInfo:
    """What a TensorProto holds, read without decoding its values.

    ``nbytes`` is the size of the logical numpy array (one byte per element for sub-byte types; 8 per element,
    a pointer, for STRING); ``packed_nbytes`` the size of ONNX's ``raw_data`` / external form
    (``ceil(size * bits / 8)``; 0 for STRING).

    Example:
        >>> import dmlbridge
        >>> from onnx import TensorProto, helper
        >>> info = dmlbridge.tensor_info(helper.make_tensor("q", TensorProto.INT4, [3], [1, -2, 3]))
        >>> info.onnx_type.name, info.shape, info.storage, info.nbytes, info.packed_nbytes
        ('INT4', (3,), 'typed', 3, 2)
    """

    name: str
    onnx_type: OnnxDataType
    shape: tuple[int, ...]
    nbytes: int
    storage: Storage
    size: int
    packed_nbytes: int


def _check_proto(tensor: object) -> None:
    descriptor = getattr(tensor, "DESCRIPTOR", None)
    if getattr(descriptor, "full_name", None) != "onnx.TensorProto":
        raise InvalidArgumentError(f"expected an onnx.TensorProto, got {type(tensor).__name__}")


def _entries_expected(onnx_type: OnnxDataType, size: int) -> int:
    if onnx_type in (_T.COMPLEX64, _T.COMPLEX128):
        return 2 * size
    if onnx_type.bitwidth in (4, 2):  # one packed byte per entry
        return -(-size * onnx_type.bitwidth // 8)
    return size


def tensor_info(tensor: Any) -> TensorInfo:
    """Type, shape, sizes and storage form of a TensorProto, with every check that needs no decoding.

    Raises TensorProtoError for malformed tensors (bad dims, wrong byte or entry count, several storage forms,
    ``segment``, bad external_data entries) and UnsupportedTypeError for an unknown data_type. Opens no file.

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import numpy_helper
        >>> dmlbridge.tensor_info(numpy_helper.from_array(np.zeros((2, 3), dtype=np.int8), "w"))
        TensorInfo(name='w', onnx_type=<OnnxDataType.INT8: 3>, shape=(2, 3), nbytes=6, storage='raw', size=6,
                   packed_nbytes=6)
    """
    return examine_tensor(tensor)[0]


def examine_tensor(tensor: Any) -> tuple[TensorInfo, bytes | None]:
    """tensor_info's checks, plus the raw_data bytes (protobuf copies them on every access: fetch them once).
    Whole-model conversion examines each tensor when it finds it and decodes it later (:func:`decode_examined`)."""
    _check_proto(tensor)
    try:
        return _info(tensor)
    except DmlBridgeError:
        raise
    except Exception as exc:
        raise TensorProtoError(f"{tensor_label(tensor)} cannot be read: {exc}") from exc


# Per-type constants, looked up once per tensor (a model may have 100,000 small constants).
TYPE_OF_CODE = {int(t): t for t in OnnxDataType}
"""Each ONNX data_type code's OnnxDataType."""
_ITEMSIZE: dict[OnnxDataType, int] = {t: t.numpy().itemsize for t in OnnxDataType if t is not _T.UNDEFINED}
_BITS: dict[OnnxDataType, int] = {t: t.bitwidth for t in OnnxDataType}
_STRING = _T.STRING


def tensor_sizes(onnx_type: OnnxDataType, shape: tuple[int, ...]) -> tuple[int, int, int] | None:
    """The elements, decoded bytes and packed bytes (0 for STRING) of a tensor of ``onnx_type`` and ``shape``;
    None when a dim is negative or numpy could not make the array (the one rule for the checked path and the
    byte scan).

    Example:
        >>> tensor_sizes(OnnxDataType.INT4, (3,)), tensor_sizes(OnnxDataType.FLOAT, (0, 2**62))
        ((3, 3, 2), None)
    """
    if shape and min(shape) < 0:
        return None
    itemsize = _ITEMSIZE[onnx_type]
    size = math.prod(shape)
    # numpy's own bound: the product of the non-zero dims times the item size must fit an intp.
    if (size or math.prod(d for d in shape if d)) * itemsize > sys.maxsize:
        return None
    return size, size * itemsize, 0 if onnx_type is _STRING else -(-size * _BITS[onnx_type] // 8)


def _info(tensor: Any) -> tuple[TensorInfo, bytes | None]:
    # The label (for messages) is computed only when a check fails.
    if tensor.HasField("segment"):
        raise TensorProtoError(
            f"{tensor_label(tensor)} is stored in segments, which ONNX tools do not support; re-save the model"
        )
    code = tensor.data_type
    if code == _T.UNDEFINED:
        raise TensorProtoError(f"{tensor_label(tensor)} has data_type UNDEFINED (0); it must name the element type")
    onnx_type = TYPE_OF_CODE.get(code)
    if onnx_type is None:
        raise UnsupportedTypeError(
            f"{tensor_label(tensor)} has unknown data_type {code}; dmlbridge knows ONNX types 1..{max(OnnxDataType)} "
            "(onnx 1.23), so the model may need a newer dmlbridge"
        )

    shape = tuple(tensor.dims)
    if shape and min(shape) < 0:
        raise TensorProtoError(
            f"{tensor_label(tensor)} has negative dims {list(shape)}; every dimension must be >= 0"
        )
    counts = tensor_sizes(onnx_type, shape)
    if counts is None:
        raise TensorProtoError(f"{tensor_label(tensor)} has dims {list(shape)}, more elements than any array can hold")
    size, nbytes, packed = counts

    location = tensor.data_location
    if location != 0 and location != _EXTERNAL:
        raise TensorProtoError(
            f"{tensor_label(tensor)} has unknown data_location {location}; it must be DEFAULT (0) or EXTERNAL (1)"
        )
    forms = [f for f in _TYPED_FIELDS if len(getattr(tensor, f))]
    if tensor.HasField("raw_data"):
        forms.insert(0, "raw_data")
    if location == _EXTERNAL:
        forms.insert(0, "external data")
    elif len(tensor.external_data):
        raise TensorProtoError(
            f"{tensor_label(tensor)} has external_data entries but data_location is not EXTERNAL; fix one of them"
        )
    if len(forms) > 1:
        raise TensorProtoError(
            f"{tensor_label(tensor)} stores its values in more than one place ({', '.join(forms)}); keep one"
        )

    storage: Storage
    raw: bytes | None = None
    if not forms:
        if size:
            raise TensorProtoError(
                f"{tensor_label(tensor)} has dims {list(shape)} ({counted(size, 'element')}) but no data")
        storage = "typed"
    elif forms[0] == "external data":
        if onnx_type is _STRING:
            raise TensorProtoError(
                f"{tensor_label(tensor)} is a STRING tensor in external data; ONNX keeps strings in string_data"
            )
        parse_external_data(tensor, packed)
        storage = "external"
    elif forms[0] == "raw_data":
        if onnx_type is _STRING:
            raise TensorProtoError(
                f"{tensor_label(tensor)} is a STRING tensor in raw_data; ONNX keeps strings in string_data"
            )
        raw = tensor.raw_data
        have = len(raw)
        if have != packed:
            raise TensorProtoError(
                f"{tensor_label(tensor)} has {counted(have, 'byte')} of raw_data but its type {onnx_type.name} and "
                f"dims {list(shape)} need exactly {packed}"
            )
        storage = "raw"
    else:
        field = forms[0]
        expected_field = _FIELD_OF.get(onnx_type, "int32_data")
        if field != expected_field:
            raise TensorProtoError(
                f"{tensor_label(tensor)} is {onnx_type.name} but stores its values in {field}; ONNX keeps them in "
                f"{expected_field} or raw_data"
            )
        have = len(getattr(tensor, field))
        want = _entries_expected(onnx_type, size)
        if have != want:
            raise TensorProtoError(
                f"{tensor_label(tensor)} has {counted(have, 'entry', 'entries')} in {field} but its type "
                f"{onnx_type.name} and dims {list(shape)} need exactly {want}"
            )
        storage = "typed"
    name = tensor.name
    if isinstance(name, bytes):  # proto2 returns bytes for a name that is not valid UTF-8
        name = name.decode("utf-8", "backslashreplace")
    return TensorInfo(name, onnx_type, shape, nbytes, storage, size, packed), raw


def tensor_to_array(
    tensor: Any,
    base_dir: str | os.PathLike[str] | None = None,
    *,
    external_data_root: str | os.PathLike[str] | None = None,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    reader: ExternalDataReader | None = None,
    use_mmap: bool = True,
) -> np.ndarray:
    """The values of an ONNX TensorProto, with onnx.numpy_helper.to_array's dtype, shape and bit patterns.

    ``base_dir`` is the model's directory (needed only for external data); ``external_data_root`` widens the
    directory external files may resolve into. ``reader`` (instead of those two) shares one
    :class:`~dmlbridge.onnx.external_data.ExternalDataReader`, and its checksum cache, across a model's tensors.
    A tensor larger than ``max_tensor_bytes`` raises TensorTooLargeError before anything is read.

    Fixed-width external data comes back as a read-only view of a memory map of just its range (no copy). As with
    every map, a file that shrinks while the array is in use makes the next access kill the process (SIGBUS):
    pass ``use_mmap=False`` for a copy made by positioned reads when the file may change (``convert_model`` and
    ``verify`` always read that way).

    Example:
        >>> import dmlbridge
        >>> from onnx import TensorProto, helper
        >>> dmlbridge.tensor_to_array(helper.make_tensor("h", TensorProto.FLOAT16, [2, 1], [1.0, 2.5]))
        array([[1. ],
               [2.5]], dtype=float16)
    """
    check_max_tensor_bytes(max_tensor_bytes)
    if reader is not None and (base_dir is not None or external_data_root is not None):
        raise InvalidArgumentError("pass either reader= or base_dir=/external_data_root=, not both")
    info, raw = examine_tensor(tensor)
    return _decode(tensor, info, raw, reader, max_tensor_bytes, base_dir, external_data_root, use_mmap)


def decode_examined(
    tensor: Any, info: TensorInfo, *, reader: ExternalDataReader | None, max_tensor_bytes: int
) -> np.ndarray:
    """tensor_to_array(tensor, reader=reader, max_tensor_bytes=...) for a tensor whose ``info`` tensor_info already
    gave (the checks are not redone; raw_data, copied by protobuf on every access, is fetched again)."""
    check_max_tensor_bytes(max_tensor_bytes)
    raw = None
    if info.storage == "raw":
        raw = tensor.raw_data
        if len(raw) != info.packed_nbytes:  # changed since it was examined: check everything again
            return tensor_to_array(tensor, reader=reader, max_tensor_bytes=max_tensor_bytes)
    return _decode(tensor, info, raw, reader, max_tensor_bytes)


def _decode(
    tensor: Any,
    info: TensorInfo,
    raw: bytes | None,
    reader: ExternalDataReader | None,
    max_tensor_bytes: int,
    base_dir: str | os.PathLike[str] | None = None,
    external_data_root: str | os.PathLike[str] | None = None,
    use_mmap: bool = True,
) -> np.ndarray:
    """tensor_to_array after the checks of :func:`examine_tensor`: ``info`` and ``raw`` are what it returned for
    ``tensor`` (whole-model conversion examines each tensor once, when it finds it, and decodes it later)."""
    if info.nbytes > max_tensor_bytes:
        raise TensorTooLargeError(
            f"{tensor_label(tensor)} needs {info.nbytes} bytes ({info.onnx_type.name} {list(info.shape)}), more "
            f"than max_tensor_bytes={max_tensor_bytes} ({max_tensor_bytes / 2**30:.3g} GiB); pass a larger "
            "max_tensor_bytes= if you trust this model and have the memory"
        )
    try:
        if info.storage == "external":
            if reader is None:
                if base_dir is None:
                    raise ExternalDataError(
                        f"{tensor_label(tensor)} uses external data; pass base_dir= (the directory of the model file)"
                    )
                reader = ExternalDataReader(base_dir, external_data_root, use_mmap=use_mmap)
            return _from_packed(reader.read(tensor, info.packed_nbytes), info, tensor)
        if info.storage == "raw":
            return _from_packed(raw, info, tensor)
        return _from_typed(tensor, info)
    except DmlBridgeError:
        raise
    except MemoryError:
        raise TensorTooLargeError(
            f"{tensor_label(tensor)} needs {info.nbytes} bytes and the allocation failed; free memory, or set "
            "max_tensor_bytes below this size to refuse such tensors up front"
        ) from None
    except Exception as exc:
        raise TensorProtoError(f"{tensor_label(tensor)} cannot be decoded: {type(exc).__name__}: {exc}") from exc


def decode_range(tensor: Any, info: TensorInfo, reader: ExternalDataReader, start: int, stop: int,
                 buffer: np.ndarray | None = None) -> np.ndarray:
    """Elements ``[start, stop)`` (flat, C order) of an external-data tensor that tensor_info examined, read and
    decoded alone: only their bytes are read (into ``buffer`` when it is large enough: the values may then be a
    view of it). ``start`` must fall on a byte (even for 4-bit types, a multiple of 4 for 2- and 6-bit ones)."""
    bits = info.onnx_type.bitwidth
    if info.storage != "external" or not bits or (start * bits) % 8 or not 0 <= start < stop <= info.size:
        raise InvalidArgumentError(f"{tensor_label(tensor)}: elements {start}..{stop} cannot be read alone")
    first, last = start * bits // 8, -(-stop * bits // 8)
    part = TensorInfo(info.name, info.onnx_type, (stop - start,), (stop - start) * info.onnx_type.numpy().itemsize,
                      info.storage, stop - start, last - first)
    try:
        return _from_packed(reader.read_range(tensor, info.packed_nbytes, first, last - first, buffer), part,
                            tensor)
    except DmlBridgeError:
        raise
    except MemoryError:
        raise TensorTooLargeError(
            f"{tensor_label(tensor)}: elements {start}..{stop} need {part.nbytes} bytes and the allocation failed"
        ) from None
    except Exception as exc:
        raise TensorProtoError(f"{tensor_label(tensor)} cannot be decoded: {type(exc).__name__}: {exc}") from exc


def _from_little_endian(buffer: Any, dtype: np.dtype) -> np.ndarray:
    """A read-only view of little-endian bytes as ``dtype`` (a converted copy on big-endian hosts)."""
    if sys.byteorder == "little" or dtype.itemsize == 1:
        return np.frombuffer(buffer, dtype=dtype)
    half = dtype.itemsize // 2
    wire = np.dtype(f"<f{half}") if dtype.kind == "c" else np.dtype(f"<u{dtype.itemsize}")
    return np.frombuffer(buffer, dtype=wire).astype(wire.newbyteorder("=")).view(dtype)


def _unpack_bits(packed: np.ndarray, bits: int, size: int) -> np.ndarray:
    """Unpack 4- or 2-bit fields (first element in the lowest bits) into one byte each."""
    if bits == 4:
        return unpack_nibbles(packed, size)  # the core's blocked 4-bit path
    per_byte = 8 // bits
    out = np.empty((packed.size, per_byte), dtype=np.uint8)
    mask = (1 << bits) - 1
    for k in range(per_byte):  # 2 or 4 column passes over the whole array, not a per-element loop
        np.right_shift(packed, k * bits, out=out[:, k])
        out[:, k] &= mask
    return out.reshape(-1)[:size]


def _unpack_6bit(packed: np.ndarray, size: int) -> np.ndarray:
    """Unpack 6-bit fields (an LSB-first stream, four per three bytes) into one byte each."""
    groups = -(-size // 4)
    padded = np.zeros(groups * 3, dtype=np.uint8)
    padded[: packed.size] = packed
    b0, b1, b2 = padded[0::3], padded[1::3], padded[2::3]
    out = np.empty((groups, 4), dtype=np.uint8)
    out[:, 0] = b0 & 0x3F
    out[:, 1] = (b0 >> 6) | ((b1 & 0x0F) << 2)
    out[:, 2] = (b1 >> 4) | ((b2 & 0x03) << 4)
    out[:, 3] = b2 >> 2
    return out.reshape(-1)[:size]


def _from_packed(buffer: Any, info: TensorInfo, tensor: Any) -> np.ndarray:
    """Values from ONNX's raw little-endian form (raw_data or an external file's bytes)."""
    onnx_type, dtype = info.onnx_type, info.onnx_type.numpy()
    bits = onnx_type.bitwidth
    if bits in (4, 2):
        flat = _unpack_bits(np.frombuffer(buffer, dtype=np.uint8), bits, info.size)
        return flat.view(dtype).reshape(info.shape)
    if bits == 6:
        return _unpack_6bit(np.frombuffer(buffer, dtype=np.uint8), info.size).view(dtype).reshape(info.shape)
    if onnx_type is _T.BOOL:
        raw = np.frombuffer(buffer, dtype=np.uint8)
        if raw.size and raw.max() > 1:
            bad = int(np.argmax(raw > 1))
            raise TensorProtoError(
                f"{tensor_label(tensor)} is BOOL but byte {bad} of its data is {raw[bad]}; BOOL bytes must be 0 or 1"
            )
    return _from_little_endian(buffer, dtype).reshape(info.shape)


def _from_typed(tensor: Any, info: TensorInfo) -> np.ndarray:
    """Values from the typed repeated field ONNX uses for the type (counts already checked)."""
    onnx_type, dtype = info.onnx_type, info.onnx_type.numpy()
    field = _FIELD_OF.get(onnx_type, "int32_data")
    if onnx_type is _T.STRING:
        # Strings are Python objects: decoding them one by one is inherent (map runs it in C).
        values = np.empty(info.size, dtype=object)
        try:
            values[:] = list(map(bytes.decode, tensor.string_data))
        except UnicodeDecodeError as exc:
            raise TensorProtoError(f"{tensor_label(tensor)} has a string that is not valid UTF-8: {exc}") from None
        return values.reshape(info.shape)
    if field in ("float_data", "double_data"):
        entries = float_field(tensor, field).copy()  # the stored bits (a signalling NaN stays signalling)
    else:
        entries = np.array(getattr(tensor, field), dtype=_FIELD_DTYPE[field])
    bounds = _ENTRY_RANGE.get(onnx_type)
    if bounds is not None and entries.size:
        low, high = bounds
        if entries.min() < low or entries.max() > high:
            bad = int(np.argmax((entries < low) | (entries > high)))
            what = "value"
            if onnx_type in _BIT_PATTERN_TYPES:
                what = "bit pattern"
            elif onnx_type.bitwidth in (4, 2):
                what = "packed byte"
            raise TensorProtoError(
                f"{tensor_label(tensor)} is {onnx_type.name} but {field}[{bad}] = {entries[bad]} is outside "
                f"{low}..{high}, the range of a {onnx_type.name} {what}"
            )
    if onnx_type.bitwidth in (4, 2):
        flat = _unpack_bits(entries.astype(np.uint8), onnx_type.bitwidth, info.size)
        return flat.view(dtype).reshape(info.shape)
    if onnx_type in (_T.COMPLEX64, _T.COMPLEX128):
        return entries.view(dtype).reshape(info.shape)
    if onnx_type in _BIT_PATTERN_TYPES or onnx_type is _T.BOOL:
        carrier = np.uint16 if dtype.itemsize == 2 else np.uint8
        return entries.astype(carrier).view(dtype).reshape(info.shape)
    return entries.astype(dtype, copy=False).reshape(info.shape)
