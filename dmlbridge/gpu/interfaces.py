"""Every COM method the GPU package calls: its interface, its vtable slot and its C signature, and the interface
IDs, all from the headers (d3d12.h and dxgi.h of mingw-w64, DirectML.h of DirectX-Headers).

A slot counts the methods of every base interface first: IUnknown has 3 (QueryInterface, AddRef, Release),
ID3D12Object and IDMLObject 4 more (GetPrivateData, SetPrivateData, SetPrivateDataInterface, SetName), and a
device child 1 more (GetDevice). A method that returns a struct is called the way the MSVC ABI (the DLLs') passes
it: a pointer to the result right after ``this``, and the same pointer returned.

    >>> ID3D12Device.CreateCommittedResource.slot, IDMLDevice.GetParentDevice.slot, IDMLDevice1.CompileGraph.slot
    (27, 16, 17)
    >>> ID3D12Device.CreateFence.call_name
    'ID3D12Device::CreateFence'
"""

from __future__ import annotations

import ctypes
from typing import Any, NamedTuple

from dmlbridge.gpu.structs import GUID

__all__ = [
    "HRESULT",
    "IID",
    "ID3D12CommandAllocator",
    "ID3D12CommandQueue",
    "ID3D12Debug",
    "ID3D12DescriptorHeap",
    "ID3D12Device",
    "ID3D12Fence",
    "ID3D12GraphicsCommandList",
    "ID3D12Resource",
    "IDMLBindingTable",
    "IDMLCommandRecorder",
    "IDMLDevice",
    "IDMLDevice1",
    "IDMLDispatchable",
    "IDXGIAdapter1",
    "IDXGIFactory1",
    "IUnknown",
    "Method",
]

HRESULT = ctypes.c_int32  # (a LONG: 32 bits on Windows, whatever ctypes' c_long is elsewhere)
_P = ctypes.c_void_p
_U32 = ctypes.c_uint32
_U64 = ctypes.c_uint64


class Method(NamedTuple):
    """One COM method: ``interface::name`` at vtable ``slot``, returning ``restype`` and taking ``argtypes`` after
    ``this``."""

    interface: str
    name: str
    slot: int
    restype: Any
    argtypes: tuple[Any, ...]

    @property
    def call_name(self) -> str:
        """How errors name the call: ``ID3D12Device::CreateCommittedResource``."""
        return f"{self.interface}::{self.name}"


def _methods(interface: str, first: int, *methods: tuple[str, Any, tuple[Any, ...]]) -> dict[str, Method]:
    return {name: Method(interface, name, first + i, restype, argtypes)
            for i, (name, restype, argtypes) in enumerate(methods) if name}


class _Interface:
    """The methods of one interface, as attributes: ``ID3D12Device.CreateFence``."""

    def __init__(self, methods: dict[str, Method]) -> None:
        self.__dict__.update(methods)

    def __getattr__(self, name: str) -> Method:  # (for mypy: every attribute is a Method)
        raise AttributeError(name)


_UNKNOWN = (("QueryInterface", HRESULT, (_P, _P)), ("AddRef", _U32, ()), ("Release", _U32, ()))
_SKIP: tuple[str, Any, tuple[Any, ...]] = ("", None, ())  # a method dmlbridge does not call

IUnknown = _Interface(_methods("IUnknown", 0, *_UNKNOWN))

# d3d12.h: ID3D12Device : ID3D12Object (slots 3-6)
ID3D12Device = _Interface(_methods(
    "ID3D12Device", 7,
    ("GetNodeCount", _U32, ()),
    ("CreateCommandQueue", HRESULT, (_P, _P, _P)),
    ("CreateCommandAllocator", HRESULT, (ctypes.c_int32, _P, _P)),
    _SKIP, _SKIP,  # CreateGraphicsPipelineState, CreateComputePipelineState
    ("CreateCommandList", HRESULT, (_U32, ctypes.c_int32, _P, _P, _P, _P)),
    ("CheckFeatureSupport", HRESULT, (ctypes.c_int32, _P, _U32)),
    ("CreateDescriptorHeap", HRESULT, (_P, _P, _P)),
    ("GetDescriptorHandleIncrementSize", _U32, (ctypes.c_int32,)),
    *[_SKIP] * 11,  # CreateRootSignature ... GetCustomHeapProperties (16-26)
    ("CreateCommittedResource", HRESULT, (_P, ctypes.c_int32, _P, ctypes.c_int32, _P, _P, _P)),
    *[_SKIP] * 8,  # CreateHeap ... Evict (28-35)
    ("CreateFence", HRESULT, (_U64, ctypes.c_int32, _P, _P)),
    ("GetDeviceRemovedReason", HRESULT, ()),
))
# ID3D12CommandQueue : ID3D12Pageable : ID3D12DeviceChild (GetDevice, slot 7)
ID3D12CommandQueue = _Interface(_methods(
    "ID3D12CommandQueue", 10,
    ("ExecuteCommandLists", None, (_U32, _P)),
    _SKIP, _SKIP, _SKIP,  # SetMarker, BeginEvent, EndEvent
    ("Signal", HRESULT, (_P, _U64)),
))
ID3D12CommandAllocator = _Interface(_methods("ID3D12CommandAllocator", 8, ("Reset", HRESULT, ())))
# ID3D12GraphicsCommandList : ID3D12CommandList (GetType, slot 8)
ID3D12GraphicsCommandList = _Interface({
    **_methods("ID3D12GraphicsCommandList", 9, ("Close", HRESULT, ()), ("Reset", HRESULT, (_P, _P))),
    **_methods("ID3D12GraphicsCommandList", 15, ("CopyBufferRegion", None, (_P, _U64, _P, _U64, _U64))),
    **_methods("ID3D12GraphicsCommandList", 26, ("ResourceBarrier", None, (_U32, _P))),
    **_methods("ID3D12GraphicsCommandList", 28, ("SetDescriptorHeaps", None, (_U32, _P))),
})
ID3D12Fence = _Interface(_methods(
    "ID3D12Fence", 8, ("GetCompletedValue", _U64, ()), ("SetEventOnCompletion", HRESULT, (_U64, _P)),
))
ID3D12Resource = _Interface(_methods(
    "ID3D12Resource", 8,
    ("Map", HRESULT, (_U32, _P, _P)),
    ("Unmap", None, (_U32, _P)),
    ("GetDesc", _P, (_P,)),  # (returns a struct: MSVC ABI)
    ("GetGPUVirtualAddress", _U64, ()),
))
ID3D12DescriptorHeap = _Interface(_methods(
    "ID3D12DescriptorHeap", 9,
    ("GetCPUDescriptorHandleForHeapStart", _P, (_P,)),  # (returns a struct: MSVC ABI)
    ("GetGPUDescriptorHandleForHeapStart", _P, (_P,)),
))
ID3D12Debug = _Interface(_methods("ID3D12Debug", 3, ("EnableDebugLayer", None, ())))

# dxgi.h: IDXGIFactory1 : IDXGIFactory : IDXGIObject (4 methods), IDXGIAdapter1 : IDXGIAdapter : IDXGIObject
IDXGIFactory1 = _Interface(_methods("IDXGIFactory1", 12, ("EnumAdapters1", HRESULT, (_U32, _P))))
IDXGIAdapter1 = _Interface(_methods("IDXGIAdapter1", 10, ("GetDesc1", HRESULT, (_P,))))

# DirectML.h: IDMLDevice : IDMLObject (slots 3-6)
IDMLDevice = _Interface(_methods(
    "IDMLDevice", 7,
    ("CheckFeatureSupport", HRESULT, (ctypes.c_int32, _U32, _P, _U32, _P)),
    ("CreateOperator", HRESULT, (_P, _P, _P)),
    ("CompileOperator", HRESULT, (_P, ctypes.c_int32, _P, _P)),
    ("CreateOperatorInitializer", HRESULT, (_U32, _P, _P, _P)),
    ("CreateCommandRecorder", HRESULT, (_P, _P)),
    ("CreateBindingTable", HRESULT, (_P, _P, _P)),
    ("Evict", HRESULT, (_U32, _P)),
    ("MakeResident", HRESULT, (_U32, _P)),
    ("GetDeviceRemovedReason", HRESULT, ()),
    ("GetParentDevice", HRESULT, (_P, _P)),
))
IDMLDevice1 = _Interface(_methods("IDMLDevice1", 17, ("CompileGraph", HRESULT, (_P, ctypes.c_int32, _P, _P))))
# IDMLDispatchable : IDMLPageable : IDMLDeviceChild (GetDevice, slot 7)
IDMLDispatchable = _Interface(_methods("IDMLDispatchable", 8, ("GetBindingProperties", _P, (_P,))))
IDMLBindingTable = _Interface(_methods(
    "IDMLBindingTable", 8,
    ("BindInputs", None, (_U32, _P)),
    ("BindOutputs", None, (_U32, _P)),
    ("BindTemporaryResource", None, (_P,)),
    ("BindPersistentResource", None, (_P,)),
    ("Reset", HRESULT, (_P,)),
))
IDMLCommandRecorder = _Interface(_methods("IDMLCommandRecorder", 8, ("RecordDispatch", None, (_P, _P, _P))))


class IID:
    """The interface IDs the package asks for (``__uuidof``), from the headers' declarations."""

    ID3D12Device = GUID.parse("189819f1-1db6-4b57-be54-1821339b85f7")
    ID3D12CommandQueue = GUID.parse("0ec870a6-5d7e-4c22-8cfc-5baae07616ed")
    ID3D12CommandAllocator = GUID.parse("6102dee4-af59-4b09-b999-b44d73f09b24")
    ID3D12GraphicsCommandList = GUID.parse("5b160d0f-ac1b-4185-8ba8-b3ae42a5a455")
    ID3D12Fence = GUID.parse("0a753dcf-c4d8-4b91-adf6-be5a60d95a76")
    ID3D12Resource = GUID.parse("696442be-a72e-4059-bc79-5b5c98040fad")
    ID3D12DescriptorHeap = GUID.parse("8efb471d-616c-4f49-90f7-127bb763fa51")
    ID3D12Debug = GUID.parse("344488b7-6846-474b-b989-f027448245e0")
    IDXGIFactory1 = GUID.parse("770aae78-f26f-4dba-a829-253c83d1b387")
    IDMLDevice = GUID.parse("6dbd6437-96fd-423f-a98c-ae5e7c2a573f")
    IDMLDevice1 = GUID.parse("a0884f9a-d2be-4355-aa5d-5901281ad1d2")
    IDMLOperator = GUID.parse("26caae7a-3081-4633-9581-226fbe57695d")
    IDMLCompiledOperator = GUID.parse("6b15e56a-bf5c-4902-92d8-da3a650afea4")
    IDMLOperatorInitializer = GUID.parse("427c1113-435c-469c-8676-4d5dd072f813")
    IDMLBindingTable = GUID.parse("29c687dc-de74-4e3b-ab00-1168f2fc3cfc")
    IDMLCommandRecorder = GUID.parse("e6857a76-2e3e-4fdd-bff4-5d2ba10fb453")
