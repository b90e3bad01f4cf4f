"""The Direct3D 12 and DirectML structs and constants the GPU package passes, as ctypes, laid out as d3d12.h and
DirectML.h declare them for 64-bit Windows (docs/directml-facts.md has the sizes and where they were checked).

Only what dmlbridge itself fills in is here; the operator descs a program builds (``DML_GEMM_OPERATOR_DESC``, ...)
and the ``DML_OPERATOR_DESC`` that points at one are in the ``operator_descs`` package (imported here for the GPU
package's modules).

    >>> ctypes.sizeof(D3D12_RESOURCE_DESC), ctypes.sizeof(D3D12_RESOURCE_BARRIER), ctypes.sizeof(DML_BINDING_PROPERTIES)
    (56, 32, 24)
"""

from __future__ import annotations

import ctypes

from dmlbridge.operator_descs.operator_structs import DML_OPERATOR_DESC

__all__ = [
    "D3D12_COMMAND_LIST_TYPE_DIRECT", "D3D12_COMMAND_QUEUE_DESC", "D3D12_CPU_DESCRIPTOR_HANDLE",
    "D3D12_DESCRIPTOR_HEAP_DESC", "D3D12_DESCRIPTOR_HEAP_FLAG_SHADER_VISIBLE", "D3D12_DESCRIPTOR_HEAP_TYPE_CBV_SRV_UAV",
    "D3D12_GPU_DESCRIPTOR_HANDLE", "D3D12_HEAP_PROPERTIES", "D3D12_HEAP_TYPE_DEFAULT", "D3D12_HEAP_TYPE_READBACK",
    "D3D12_HEAP_TYPE_UPLOAD", "D3D12_RANGE", "D3D12_RESOURCE_BARRIER", "D3D12_RESOURCE_DESC",
    "D3D12_RESOURCE_STATE_COPY_DEST", "D3D12_RESOURCE_STATE_COPY_SOURCE", "D3D12_RESOURCE_STATE_GENERIC_READ",
    "D3D12_RESOURCE_STATE_UNORDERED_ACCESS", "D3D_FEATURE_LEVEL_11_0", "DML_BINDING_DESC", "DML_BINDING_PROPERTIES",
    "DML_BINDING_TABLE_DESC", "DML_BINDING_TYPE_BUFFER", "DML_BINDING_TYPE_BUFFER_ARRAY", "DML_BINDING_TYPE_NONE",
    "DML_BUFFER_ARRAY_BINDING", "DML_CREATE_DEVICE_FLAG_DEBUG", "DML_CREATE_DEVICE_FLAG_NONE",
    "DML_FEATURE_DATA_FEATURE_LEVELS", "DML_FEATURE_DATA_TENSOR_DATA_TYPE_SUPPORT", "DML_FEATURE_FEATURE_LEVELS",
    "DML_FEATURE_QUERY_FEATURE_LEVELS", "DML_FEATURE_QUERY_TENSOR_DATA_TYPE_SUPPORT",
    "DML_FEATURE_TENSOR_DATA_TYPE_SUPPORT", "DML_OPERATOR_DESC", "DXGI_ADAPTER_DESC1", "GUID", "buffer_desc",
    "heap_properties", "transition", "uav_barrier",
]

# D3D_FEATURE_LEVEL (d3dcommon.h): the lowest level DirectML runs on.
D3D_FEATURE_LEVEL_11_0 = 0xB000

# D3D12_HEAP_TYPE
D3D12_HEAP_TYPE_DEFAULT = 1
D3D12_HEAP_TYPE_UPLOAD = 2
D3D12_HEAP_TYPE_READBACK = 3

# D3D12_RESOURCE_STATES (the ones a buffer goes through here)
D3D12_RESOURCE_STATE_UNORDERED_ACCESS = 0x8
D3D12_RESOURCE_STATE_COPY_DEST = 0x400
D3D12_RESOURCE_STATE_COPY_SOURCE = 0x800
D3D12_RESOURCE_STATE_GENERIC_READ = 0xAC3  # an upload heap's only state

D3D12_RESOURCE_DIMENSION_BUFFER = 1
D3D12_TEXTURE_LAYOUT_ROW_MAJOR = 1
D3D12_RESOURCE_FLAG_ALLOW_UNORDERED_ACCESS = 0x4
D3D12_RESOURCE_BARRIER_TYPE_TRANSITION = 0
D3D12_RESOURCE_BARRIER_TYPE_UAV = 2
D3D12_RESOURCE_BARRIER_ALL_SUBRESOURCES = 0xFFFFFFFF
D3D12_COMMAND_LIST_TYPE_DIRECT = 0
D3D12_DESCRIPTOR_HEAP_TYPE_CBV_SRV_UAV = 0
D3D12_DESCRIPTOR_HEAP_FLAG_SHADER_VISIBLE = 1

# DirectML.h
DML_CREATE_DEVICE_FLAG_NONE = 0
DML_CREATE_DEVICE_FLAG_DEBUG = 1
DML_FEATURE_TENSOR_DATA_TYPE_SUPPORT = 0
DML_FEATURE_FEATURE_LEVELS = 1
DML_BINDING_TYPE_NONE = 0
DML_BINDING_TYPE_BUFFER = 1
DML_BINDING_TYPE_BUFFER_ARRAY = 2


class GUID(ctypes.Structure):
    """A COM GUID (16 bytes), made from its text form.

    Example:
        >>> str(GUID.parse("6dbd6437-96fd-423f-a98c-ae5e7c2a573f"))
        '6dbd6437-96fd-423f-a98c-ae5e7c2a573f'
    """

    _fields_ = [("Data1", ctypes.c_uint32), ("Data2", ctypes.c_uint16), ("Data3", ctypes.c_uint16),
                ("Data4", ctypes.c_ubyte * 8)]

    @classmethod
    def parse(cls, text: str) -> GUID:
        parts = text.split("-")
        tail = bytes.fromhex(parts[3] + parts[4])
        return cls(int(parts[0], 16), int(parts[1], 16), int(parts[2], 16), (ctypes.c_ubyte * 8)(*tail))

    def __str__(self) -> str:
        tail = bytes(self.Data4).hex()
        return f"{self.Data1:08x}-{self.Data2:04x}-{self.Data3:04x}-{tail[:4]}-{tail[4:]}"


class DXGI_ADAPTER_DESC1(ctypes.Structure):  # noqa: N801 - the DXGI name
    _fields_ = [("Description", ctypes.c_wchar * 128), ("VendorId", ctypes.c_uint32), ("DeviceId", ctypes.c_uint32),
                ("SubSysId", ctypes.c_uint32), ("Revision", ctypes.c_uint32), ("DedicatedVideoMemory", ctypes.c_size_t),
                ("DedicatedSystemMemory", ctypes.c_size_t), ("SharedSystemMemory", ctypes.c_size_t),
                ("AdapterLuid", ctypes.c_uint32 * 2), ("Flags", ctypes.c_uint32)]


class D3D12_HEAP_PROPERTIES(ctypes.Structure):  # noqa: N801 - the Direct3D name
    _fields_ = [("Type", ctypes.c_int32), ("CPUPageProperty", ctypes.c_int32),
                ("MemoryPoolPreference", ctypes.c_int32), ("CreationNodeMask", ctypes.c_uint32),
                ("VisibleNodeMask", ctypes.c_uint32)]


class DXGI_SAMPLE_DESC(ctypes.Structure):  # noqa: N801
    _fields_ = [("Count", ctypes.c_uint32), ("Quality", ctypes.c_uint32)]


class D3D12_RESOURCE_DESC(ctypes.Structure):  # noqa: N801
    _fields_ = [("Dimension", ctypes.c_int32), ("Alignment", ctypes.c_uint64), ("Width", ctypes.c_uint64),
                ("Height", ctypes.c_uint32), ("DepthOrArraySize", ctypes.c_uint16), ("MipLevels", ctypes.c_uint16),
                ("Format", ctypes.c_int32), ("SampleDesc", DXGI_SAMPLE_DESC), ("Layout", ctypes.c_int32),
                ("Flags", ctypes.c_int32)]


class D3D12_COMMAND_QUEUE_DESC(ctypes.Structure):  # noqa: N801
    _fields_ = [("Type", ctypes.c_int32), ("Priority", ctypes.c_int32), ("Flags", ctypes.c_int32),
                ("NodeMask", ctypes.c_uint32)]


class D3D12_RANGE(ctypes.Structure):  # noqa: N801
    _fields_ = [("Begin", ctypes.c_size_t), ("End", ctypes.c_size_t)]


class D3D12_RESOURCE_TRANSITION_BARRIER(ctypes.Structure):  # noqa: N801
    _fields_ = [("pResource", ctypes.c_void_p), ("Subresource", ctypes.c_uint32), ("StateBefore", ctypes.c_int32),
                ("StateAfter", ctypes.c_int32)]


class D3D12_RESOURCE_ALIASING_BARRIER(ctypes.Structure):  # noqa: N801
    _fields_ = [("pResourceBefore", ctypes.c_void_p), ("pResourceAfter", ctypes.c_void_p)]


class D3D12_RESOURCE_UAV_BARRIER(ctypes.Structure):  # noqa: N801
    _fields_ = [("pResource", ctypes.c_void_p)]


class _BarrierUnion(ctypes.Union):
    _fields_ = [("Transition", D3D12_RESOURCE_TRANSITION_BARRIER), ("Aliasing", D3D12_RESOURCE_ALIASING_BARRIER),
                ("UAV", D3D12_RESOURCE_UAV_BARRIER)]


class D3D12_RESOURCE_BARRIER(ctypes.Structure):  # noqa: N801
    _anonymous_ = ("u",)
    _fields_ = [("Type", ctypes.c_int32), ("Flags", ctypes.c_int32), ("u", _BarrierUnion)]


class D3D12_DESCRIPTOR_HEAP_DESC(ctypes.Structure):  # noqa: N801
    _fields_ = [("Type", ctypes.c_int32), ("NumDescriptors", ctypes.c_uint32), ("Flags", ctypes.c_int32),
                ("NodeMask", ctypes.c_uint32)]


class D3D12_CPU_DESCRIPTOR_HANDLE(ctypes.Structure):  # noqa: N801
    _fields_ = [("ptr", ctypes.c_size_t)]


class D3D12_GPU_DESCRIPTOR_HANDLE(ctypes.Structure):  # noqa: N801
    _fields_ = [("ptr", ctypes.c_uint64)]


class DML_FEATURE_QUERY_TENSOR_DATA_TYPE_SUPPORT(ctypes.Structure):  # noqa: N801 - the DirectML name
    _fields_ = [("DataType", ctypes.c_int32)]


class DML_FEATURE_DATA_TENSOR_DATA_TYPE_SUPPORT(ctypes.Structure):  # noqa: N801
    _fields_ = [("IsSupported", ctypes.c_int32)]  # a BOOL


class DML_FEATURE_QUERY_FEATURE_LEVELS(ctypes.Structure):  # noqa: N801
    _fields_ = [("RequestedFeatureLevelCount", ctypes.c_uint32),
                ("RequestedFeatureLevels", ctypes.POINTER(ctypes.c_int32))]


class DML_FEATURE_DATA_FEATURE_LEVELS(ctypes.Structure):  # noqa: N801
    _fields_ = [("MaxSupportedFeatureLevel", ctypes.c_int32)]


class DML_BINDING_PROPERTIES(ctypes.Structure):  # noqa: N801
    _fields_ = [("RequiredDescriptorCount", ctypes.c_uint32), ("TemporaryResourceSize", ctypes.c_uint64),
                ("PersistentResourceSize", ctypes.c_uint64)]


class DML_BINDING_DESC(ctypes.Structure):  # noqa: N801
    """``DML_BINDING_DESC`` (DirectML.h): a binding's type (``DML_BINDING_TYPE_BUFFER``, ...) and a pointer to it;
    the ones ``binding_desc()`` returns keep the ``DML_BUFFER_BINDING`` they point at alive (``.buffer_binding``).

    Example:
        >>> import ctypes, dmlbridge.gpu
        >>> desc = dmlbridge.gpu.DML_BINDING_DESC(0, None)   # DML_BINDING_TYPE_NONE: an optional input unbound
        >>> desc.Type, ctypes.sizeof(desc)
        (0, 16)
    """

    _fields_ = [("Type", ctypes.c_int32), ("Desc", ctypes.c_void_p)]

    buffer_binding: ctypes.Structure


class DML_BUFFER_ARRAY_BINDING(ctypes.Structure):  # noqa: N801
    _fields_ = [("BindingCount", ctypes.c_uint32), ("Bindings", ctypes.c_void_p)]


class DML_BINDING_TABLE_DESC(ctypes.Structure):  # noqa: N801
    _fields_ = [("Dispatchable", ctypes.c_void_p), ("CPUDescriptorHandle", D3D12_CPU_DESCRIPTOR_HANDLE),
                ("GPUDescriptorHandle", D3D12_GPU_DESCRIPTOR_HANDLE), ("SizeInDescriptors", ctypes.c_uint32)]


def heap_properties(heap_type: int) -> D3D12_HEAP_PROPERTIES:
    """The properties of a heap of one type on the first (only) GPU node."""
    return D3D12_HEAP_PROPERTIES(heap_type, 0, 0, 1, 1)


def buffer_desc(size: int, unordered_access: bool) -> D3D12_RESOURCE_DESC:
    """The desc of a buffer resource of ``size`` bytes; ``unordered_access`` for the default-heap buffers DirectML
    binds (it binds every buffer as an unordered-access view).

    Example:
        >>> desc = buffer_desc(4096, True)
        >>> desc.Width, desc.Flags, desc.SampleDesc.Count
        (4096, 4, 1)
    """
    flags = D3D12_RESOURCE_FLAG_ALLOW_UNORDERED_ACCESS if unordered_access else 0
    return D3D12_RESOURCE_DESC(D3D12_RESOURCE_DIMENSION_BUFFER, 0, size, 1, 1, 1, 0, DXGI_SAMPLE_DESC(1, 0),
                               D3D12_TEXTURE_LAYOUT_ROW_MAJOR, flags)


def transition(resource: int, before: int, after: int) -> D3D12_RESOURCE_BARRIER:
    """A transition barrier of every subresource of ``resource``."""
    barrier = D3D12_RESOURCE_BARRIER()
    barrier.Type = D3D12_RESOURCE_BARRIER_TYPE_TRANSITION
    barrier.Transition = D3D12_RESOURCE_TRANSITION_BARRIER(resource, D3D12_RESOURCE_BARRIER_ALL_SUBRESOURCES,
                                                           before, after)
    return barrier


def uav_barrier() -> D3D12_RESOURCE_BARRIER:
    """A UAV barrier on every resource: one dispatch's writes are done before the next one reads them."""
    barrier = D3D12_RESOURCE_BARRIER()
    barrier.Type = D3D12_RESOURCE_BARRIER_TYPE_UAV
    return barrier
