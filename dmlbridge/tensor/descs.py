"""DML_BUFFER_TENSOR_DESC as a value (:class:`BufferTensorDesc`) and the DirectML descriptor structs as ctypes.

:class:`BufferTensorDesc` is the one record of the seven DML_BUFFER_TENSOR_DESC fields; ``PreparedTensor``,
``PlanEntry`` and the manifest all give theirs through it, as a dict by the DirectML names (``as_dict``) or as a
ctypes struct (``as_ctypes``). The structs are laid out as DirectML.h declares them: on 64-bit Windows and
Linux, ``DML_BUFFER_TENSOR_DESC`` is 48 bytes and ``DML_TENSOR_DESC`` 16 (docs/directml-facts.md). The ``Sizes``
and ``Strides`` arrays are assigned to pointer fields, which makes ctypes keep them alive for as long as the
struct lives.

    >>> desc = BufferTensorDesc(1, 0, (2, 3), None, 24, 256)
    >>> desc.as_dict()["DimensionCount"], ctypes.sizeof(desc.as_ctypes())
    (2, 48)
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from dmlbridge.errors import InvalidArgumentError
from dmlbridge.types.data_types import DmlDataType

__all__ = [
    "DML_BUFFER_BINDING",
    "DML_BUFFER_TENSOR_DESC",
    "DML_TENSOR_DESC",
    "DML_TENSOR_FLAG_OWNED_BY_DML",
    "DML_TENSOR_TYPE_BUFFER",
    "BufferDescMethods",
    "BufferTensorDesc",
    "check_flags",
    "tensor_desc_array",
]

DML_TENSOR_TYPE_BUFFER = 1
DML_TENSOR_FLAG_OWNED_BY_DML = 1  # DML_TENSOR_FLAGS: the only flag besides DML_TENSOR_FLAG_NONE (0)


def check_flags(flags: Any) -> int:
    """A DML_TENSOR_FLAGS value checked: 0 (DML_TENSOR_FLAG_NONE), or 1 / ``"owned-by-dml"``
    (DML_TENSOR_FLAG_OWNED_BY_DML); anything else is an InvalidArgumentError naming the ``flags`` keyword.

    Example:
        >>> check_flags("owned-by-dml"), check_flags(np.uint8(0))
        (1, 0)
    """
    if isinstance(flags, str) and flags == "owned-by-dml":
        return DML_TENSOR_FLAG_OWNED_BY_DML
    if isinstance(flags, bool) or not isinstance(flags, (int, np.integer)) or flags not in (0, 1):
        raise InvalidArgumentError(
            f"flags must be 0 (DML_TENSOR_FLAG_NONE) or 1 (DML_TENSOR_FLAG_OWNED_BY_DML, also 'owned-by-dml': for "
            f"weights DirectML copies when it initializes an operator), got {flags!r}"
        )
    return int(flags)


class DML_BUFFER_BINDING(ctypes.Structure):  # noqa: N801 - the DirectML name
    """``DML_BUFFER_BINDING`` (DirectML.h): the ``ID3D12Resource*`` holding a buffer, and the offset and size in
    bytes of one tensor in it (24 bytes on 64-bit).

    Example:
        >>> import ctypes, dmlbridge
        >>> binding = dmlbridge.DML_BUFFER_BINDING(None, 256, 12)
        >>> binding.Offset, binding.SizeInBytes, ctypes.sizeof(binding) == 8 + 2 * 8
        (256, 12, True)

    One an upload's ``binding()`` gives also holds the upload (``.upload``), which it keeps alive, and the
    ``BufferTensorDesc`` it binds (``.tensor_desc``); ``dmlbridge.gpu``'s runs check a binding against both.
    """

    _fields_ = [("Buffer", ctypes.c_void_p), ("Offset", ctypes.c_uint64), ("SizeInBytes", ctypes.c_uint64)]
    upload: Any
    tensor_desc: Any


class DML_BUFFER_TENSOR_DESC(ctypes.Structure):  # noqa: N801 - the DirectML name
    """``DML_BUFFER_TENSOR_DESC`` (DirectML.h), as ``BufferTensorDesc.as_ctypes()`` and the entries' ``as_ctypes()``
    make it (its Sizes and Strides arrays kept alive with it).

    Example:
        >>> import numpy as np, dmlbridge
        >>> desc = dmlbridge.prepare(np.zeros((2, 3), np.float32)).as_ctypes()
        >>> desc.DimensionCount, list(desc.Sizes[:2]), desc.TotalTensorSizeInBytes
        (2, [2, 3], 24)
    """

    _fields_ = [
        ("DataType", ctypes.c_int32),
        ("Flags", ctypes.c_uint32),
        ("DimensionCount", ctypes.c_uint32),
        ("Sizes", ctypes.POINTER(ctypes.c_uint32)),
        ("Strides", ctypes.POINTER(ctypes.c_uint32)),
        ("TotalTensorSizeInBytes", ctypes.c_uint64),
        ("GuaranteedBaseOffsetAlignment", ctypes.c_uint32),
    ]


class DML_TENSOR_DESC(ctypes.Structure):  # noqa: N801 - the DirectML name
    """``DML_TENSOR_DESC`` (DirectML.h): ``Type`` = DML_TENSOR_TYPE_BUFFER and ``Desc`` pointing at the buffer
    desc, which this object keeps alive (``.buffer_desc``).

    Example:
        >>> import numpy as np, dmlbridge
        >>> tensor_desc = dmlbridge.prepare(np.zeros(3, np.float32)).as_ctypes_tensor_desc()
        >>> tensor_desc.Type, tensor_desc.buffer_desc.TotalTensorSizeInBytes
        (1, 12)
    """

    _fields_ = [("Type", ctypes.c_int32), ("Desc", ctypes.c_void_p)]

    buffer_desc: DML_BUFFER_TENSOR_DESC

    @classmethod
    def pointing_at(cls, buffer_desc: DML_BUFFER_TENSOR_DESC) -> DML_TENSOR_DESC:
        """A DML_TENSOR_DESC of type BUFFER whose Desc points at ``buffer_desc`` (kept alive by the result)."""
        desc = cls(DML_TENSOR_TYPE_BUFFER, ctypes.addressof(buffer_desc))
        desc.buffer_desc = buffer_desc
        return desc


class BufferTensorDesc(NamedTuple):
    """The seven DML_BUFFER_TENSOR_DESC fields (DimensionCount is ``len(sizes)``); ``strides`` None is NULL.

    Example:
        >>> import dmlbridge, numpy as np
        >>> desc = dmlbridge.prepare(np.ones((2, 3), np.float16)).buffer_desc
        >>> desc.sizes, desc.as_dict()["TotalTensorSizeInBytes"]
        ((2, 3), 12)
    """

    data_type: int
    flags: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...] | None
    total_tensor_size_in_bytes: int
    guaranteed_base_offset_alignment: int

    def as_dict(self) -> dict[str, Any]:
        """The fields by their DirectML names, JSON-friendly (the manifest's ``desc``)."""
        return {
            "DataType": int(self.data_type),
            "Flags": self.flags,
            "DimensionCount": len(self.sizes),
            "Sizes": list(self.sizes),
            "Strides": None if self.strides is None else list(self.strides),
            "TotalTensorSizeInBytes": self.total_tensor_size_in_bytes,
            "GuaranteedBaseOffsetAlignment": self.guaranteed_base_offset_alignment,
        }

    def as_ctypes(self) -> DML_BUFFER_TENSOR_DESC:
        """A ctypes DML_BUFFER_TENSOR_DESC (48 bytes on 64-bit) that keeps its Sizes and Strides arrays alive
        (Strides is NULL when ``strides`` is None)."""
        desc = DML_BUFFER_TENSOR_DESC()
        desc.DataType = int(self.data_type)
        desc.Flags = self.flags
        desc.DimensionCount = len(self.sizes)
        desc.Sizes = (ctypes.c_uint32 * len(self.sizes))(*self.sizes)
        if self.strides is not None:
            desc.Strides = (ctypes.c_uint32 * len(self.strides))(*self.strides)
        desc.TotalTensorSizeInBytes = self.total_tensor_size_in_bytes
        desc.GuaranteedBaseOffsetAlignment = self.guaranteed_base_offset_alignment
        return desc


class BufferDescMethods:
    """What a record holding one :class:`BufferTensorDesc` (its ``buffer_desc``) reads from it: the fields by
    name (``dml_type``, ``sizes``, ...), ``desc()``, ``as_ctypes()`` and ``as_ctypes_tensor_desc()``; what
    ``PreparedTensor`` and ``QuantizedPart`` share.

    Example:
        >>> import dmlbridge, numpy as np
        >>> t = dmlbridge.prepare(np.ones(3, np.float32))
        >>> t.desc()["Sizes"], t.sizes, t.dml_type.name
        ([3], (3,), 'FLOAT32')
    """

    __slots__ = ()
    buffer_desc: BufferTensorDesc

    @property
    def dml_type(self) -> DmlDataType:
        """The DML_TENSOR_DATA_TYPE."""
        return DmlDataType(self.buffer_desc.data_type)

    @property
    def sizes(self) -> tuple[int, ...]:
        """The desc's Sizes."""
        return self.buffer_desc.sizes

    @property
    def strides(self) -> tuple[int, ...] | None:
        """The desc's Strides (None when packed)."""
        return self.buffer_desc.strides

    @property
    def total_tensor_size_in_bytes(self) -> int:
        """The desc's TotalTensorSizeInBytes: the bytes to upload and bind."""
        return self.buffer_desc.total_tensor_size_in_bytes

    @property
    def guaranteed_base_offset_alignment(self) -> int:
        """The desc's GuaranteedBaseOffsetAlignment."""
        return self.buffer_desc.guaranteed_base_offset_alignment

    @property
    def flags(self) -> int:
        """The desc's DML_TENSOR_FLAGS."""
        return self.buffer_desc.flags

    def desc(self) -> dict[str, Any]:
        """The DML_BUFFER_TENSOR_DESC fields, by their DirectML names."""
        return self.buffer_desc.as_dict()

    def as_ctypes(self) -> DML_BUFFER_TENSOR_DESC:
        """A ctypes DML_BUFFER_TENSOR_DESC (48 bytes on 64-bit); it keeps its Sizes and Strides arrays alive."""
        return self.buffer_desc.as_ctypes()

    def as_ctypes_tensor_desc(self) -> DML_TENSOR_DESC:
        """A ctypes DML_TENSOR_DESC (type BUFFER) pointing at a fresh ``as_ctypes()`` struct it keeps alive."""
        return DML_TENSOR_DESC.pointing_at(self.as_ctypes())


def tensor_desc_array(items: Sequence[Any]) -> ctypes.Array[DML_TENSOR_DESC]:
    """A ctypes array of DML_TENSOR_DESC (type BUFFER), one per item, for an operator desc that takes an array
    of tensor descs (``DML_JOIN_OPERATOR_DESC.InputTensors``, say).

    Each item is a ``PreparedTensor`` or a ``PlanEntry`` (anything with ``as_ctypes()``), a
    :class:`BufferTensorDesc` or a ``DML_BUFFER_TENSOR_DESC``. Copying a DML_TENSOR_DESC into an array copies
    its pointer, not what it points at, so a bare ``(DML_TENSOR_DESC * n)(*descs)`` can end up pointing at freed
    memory. The array this returns keeps every buffer desc it points at (and their Sizes and Strides) alive for
    as long as the array itself is alive: keep a reference to it until DirectML has created the operator.

    Example:
        >>> import dmlbridge, numpy as np
        >>> a, b = dmlbridge.prepare(np.ones(2, np.float32)), dmlbridge.prepare(np.ones(3, np.float16))
        >>> descs = tensor_desc_array([a, b])
        >>> len(descs), descs[0].Type, ctypes.cast(descs[1].Desc, ctypes.POINTER(DML_BUFFER_TENSOR_DESC))[0].DataType
        (2, 1, 2)
    """
    buffer_descs = []
    for index, item in enumerate(items):
        if isinstance(item, DML_BUFFER_TENSOR_DESC):
            buffer_descs.append(item)
        elif isinstance(item, BufferTensorDesc) or hasattr(item, "as_ctypes"):
            buffer_descs.append(item.as_ctypes())
        else:
            raise InvalidArgumentError(
                f"item {index} is a {type(item).__name__}; give PreparedTensor, PlanEntry, BufferTensorDesc or "
                "DML_BUFFER_TENSOR_DESC items"
            )
    array = (DML_TENSOR_DESC * len(buffer_descs))()
    for slot, buffer_desc in zip(array, buffer_descs, strict=True):
        slot.Type = DML_TENSOR_TYPE_BUFFER
        slot.Desc = ctypes.addressof(buffer_desc)
    array.buffer_descs = buffer_descs  # type: ignore[attr-defined]  # what the pointers point at, kept alive
    return array
