"""The COM plumbing of ``dmlbridge.gpu``, on every system: it imports anywhere and says it needs Windows when
called elsewhere; every vtable slot and interface ID is the headers'; every struct has the size and field offsets
the Windows compilers give; and calls through a vtable report a failed HRESULT, a removed device and a wrong kind
of object the way the GPU suite needs, shown on COM objects made in Python (fake_com.py)."""

from __future__ import annotations

import ctypes
import re
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fake_com import FakeCom, signed

import dmlbridge
import dmlbridge.gpu
from dmlbridge.gpu import device as device_module
from dmlbridge.gpu import interfaces, structs
from dmlbridge.gpu.com import address_of, check, hresult_text
from dmlbridge.gpu.device import Device, as_device
from dmlbridge.gpu.interfaces import IID, ID3D12CommandQueue, ID3D12Device, ID3D12Fence, IDMLDevice, IUnknown, Method

ROOT = Path(__file__).resolve().parents[2]
DIRECTML_H = ROOT / "tools" / "directml" / "include" / "DirectML.h"
MINGW = Path("/usr/share/mingw-w64/include")  # (where CI's mingw-w64, which builds native/, has d3d12.h and dxgi.h)


def test_off_windows_every_call_says_it_needs_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    tensor = dmlbridge.prepare(np.ones(2, np.float32))
    calls = [lambda: dmlbridge.gpu.create_device(), lambda: dmlbridge.gpu.target_of(0x20000),
             lambda: dmlbridge.gpu.upload_tensors([tensor], 0x20000)]
    for call in calls:
        with pytest.raises(dmlbridge.GpuUnavailableError, match=r"needs Windows: dmlbridge.gpu drives Direct3D 12"):
            call()
    assert issubclass(dmlbridge.GpuUnavailableError, dmlbridge.DmlBridgeError)


# --- against the headers ----------------------------------------------------------------------------------------

def _methods() -> list[Method]:
    tables = [getattr(interfaces, name) for name in interfaces.__all__ if name.startswith("I") and name != "IID"]
    return [method for table in tables for method in vars(table).values() if isinstance(method, Method)]


def _directml_order() -> dict[str, list[str]]:
    """Each interface of DirectML.h: its methods in vtable order, the base interfaces' first."""
    text = DIRECTML_H.read_text(encoding="utf-8")
    order: dict[str, list[str]] = {"IUnknown": ["QueryInterface", "AddRef", "Release"]}
    for name, base, body in re.findall(
            r'interface DML_DECLARE_INTERFACE\("[^"]+"\) (\w+) : (\w+)\s*\{(.*?)\n\};', text, re.S):
        order[name] = order[base] + re.findall(r"IFACEMETHOD_?\((?:[\w ]+, )?(\w+)\)", body)
    return order


def _mingw_order(header: str) -> dict[str, list[str]]:
    text = (MINGW / header).read_text(encoding="utf-8")
    return {name: re.findall(r"\(STDMETHODCALLTYPE \*(\w+)\)", body)
            for name, body in re.findall(r"typedef struct (\w+)Vtbl \{(.*?)\} \1Vtbl;", text, re.S)}


def test_every_vtable_slot_is_the_headers() -> None:
    orders = _directml_order()
    if MINGW.exists():
        orders.update(_mingw_order("d3d12.h"))
        orders.update(_mingw_order("dxgi.h"))
        orders.update(_mingw_order("d3d12sdklayers.h"))
    checked = 0
    for method in _methods():
        if method.interface in orders:
            assert orders[method.interface].index(method.name) == method.slot, method.call_name
            checked += 1
    assert checked == len(_methods()) or not MINGW.exists()
    assert checked >= 20


def test_every_interface_id_is_the_headers() -> None:
    text = DIRECTML_H.read_text(encoding="utf-8")
    declared = {name: guid for guid, name in re.findall(r'DML_DECLARE_INTERFACE\("([^"]+)"\) (\w+)', text)}
    if MINGW.exists():
        for header in ("d3d12.h", "d3d12sdklayers.h", "dxgi.h"):
            for name, numbers in re.findall(r"__CRT_UUID_DECL\((\w+), ([^)]*)\)", (MINGW / header).read_text()):
                parts = [int(p, 16) for p in numbers.replace(" ", "").split(",")]
                tail = "".join(f"{p:02x}" for p in parts[3:])
                declared[name] = f"{parts[0]:08x}-{parts[1]:04x}-{parts[2]:04x}-{tail[:4]}-{tail[4:]}"
    ours = {name: str(value) for name, value in vars(IID).items() if isinstance(value, structs.GUID)}
    assert all(declared[name] == guid for name, guid in ours.items() if name in declared), ours
    assert {"IDMLDevice", "IDMLOperator", "IDMLBindingTable"} <= set(ours) & set(declared)


# Sizes and field offsets printed by a program built with mingw-w64 from d3d12.h and DirectML.h (sizeof, offsetof),
# the ABI of the DLLs (docs/directml-facts.md).
LAYOUTS: dict[str, tuple[int, dict[str, int]]] = {
    "D3D12_HEAP_PROPERTIES": (20, {}),
    "D3D12_RESOURCE_DESC": (56, {"Width": 16, "Height": 24, "Format": 32, "SampleDesc": 36, "Layout": 44,
                                 "Flags": 48}),
    "D3D12_COMMAND_QUEUE_DESC": (16, {}),
    "D3D12_RANGE": (16, {}),
    "D3D12_RESOURCE_BARRIER": (32, {"u": 8}),
    "D3D12_DESCRIPTOR_HEAP_DESC": (16, {}),
    "DML_BINDING_PROPERTIES": (24, {"TemporaryResourceSize": 8}),
    "DML_BINDING_DESC": (16, {}),
    "DML_BUFFER_ARRAY_BINDING": (16, {}),
    "DML_BINDING_TABLE_DESC": (32, {"CPUDescriptorHandle": 8, "GPUDescriptorHandle": 16, "SizeInDescriptors": 24}),
    "DML_FEATURE_QUERY_FEATURE_LEVELS": (16, {"RequestedFeatureLevels": 8}),
    "DML_OPERATOR_DESC": (16, {}),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_struct_has_the_windows_layout(name: str) -> None:
    size, offsets = LAYOUTS[name]
    struct = getattr(structs, name)
    assert ctypes.sizeof(struct) == size
    for field, offset in offsets.items():
        assert getattr(struct, field).offset == offset, field
    assert ctypes.sizeof(dmlbridge.DML_BUFFER_BINDING) == 24


# --- calls through a vtable ---------------------------------------------------------------------------------------

E_INVALIDARG, E_NOINTERFACE = 0x80070057, 0x80004002
DEVICE_HUNG, DEVICE_REMOVED = 0x887A0006, 0x887A0005


def test_a_failed_hresult_is_a_com_error_naming_the_call() -> None:
    refusing = FakeCom({IDMLDevice.CreateOperator: lambda this, desc, iid, out: signed(E_INVALIDARG)})
    with pytest.raises(dmlbridge.ComError) as caught:
        check(refusing.address, IDMLDevice.CreateOperator, None, None, None, doing="(a desc 4 bytes short)")
    assert (caught.value.call, caught.value.hresult) == ("IDMLDevice::CreateOperator", E_INVALIDARG)
    assert str(caught.value) == ("IDMLDevice::CreateOperator failed with HRESULT 0x80070057 (E_INVALIDARG) "
                                 "(a desc 4 bytes short)")
    assert hresult_text(0x12345678) == "0x12345678"


def _device(d3d12_reason: int, dml_reason: int) -> tuple[Device, list[FakeCom]]:
    """A Device over two fake devices reporting these removal reasons (made without Windows' queue and fence)."""
    d3d12 = FakeCom({ID3D12Device.GetDeviceRemovedReason: lambda this: signed(d3d12_reason)})
    dml = FakeCom({IDMLDevice.GetDeviceRemovedReason: lambda this: signed(dml_reason)})
    device = Device.__new__(Device)
    device.d3d12, device.dml, device.queue, device.fence = d3d12.address, dml.address, 0, 0
    device._closed = False
    return device, [d3d12, dml]


def test_a_removed_device_is_reported_with_its_reason() -> None:
    device, _ = _device(DEVICE_HUNG, 0)
    with pytest.raises(dmlbridge.DeviceRemovedError) as caught:
        device.check_removed("reading buffer 0")
    assert (caught.value.call, caught.value.hresult) == ("ID3D12Device::GetDeviceRemovedReason", DEVICE_HUNG)
    assert str(caught.value).startswith(
        "the Direct3D 12 device was removed reading buffer 0: ID3D12Device::GetDeviceRemovedReason gives 0x887A0006 "
        "(DXGI_ERROR_DEVICE_HUNG); nothing on this device can be used again")
    # DirectML loses its device on its own too.
    alone, _ = _device(0, DEVICE_REMOVED)
    assert alone.removed_reason() == ("IDMLDevice::GetDeviceRemovedReason", DEVICE_REMOVED)
    healthy, _ = _device(0, 0)
    healthy.check_removed("anything")
    assert healthy.removed_reason() == ("", 0)


def test_a_call_that_fails_because_the_device_was_removed_says_so() -> None:
    device, _ = _device(DEVICE_HUNG, 0)
    failing = FakeCom({ID3D12Device.CreateFence: lambda this, value, flags, iid, out: signed(DEVICE_REMOVED)})
    with pytest.raises(dmlbridge.DeviceRemovedError, match="DXGI_ERROR_DEVICE_HUNG") as caught:
        device.create(ID3D12Device.CreateFence, 0, 0, None, on=failing.address, doing="making a fence")
    assert caught.value.hresult == DEVICE_HUNG
    healthy, _ = _device(0, 0)
    with pytest.raises(dmlbridge.ComError, match="ID3D12Device::CreateFence failed with HRESULT 0x887A0005") as other:
        healthy.create(ID3D12Device.CreateFence, 0, 0, None, on=failing.address, doing="making a fence")
    assert not isinstance(other.value, dmlbridge.DeviceRemovedError)


def test_a_directml_device_lost_alone_is_named_and_its_queue_still_waited_for() -> None:
    """A DirectML device can be lost while its Direct3D 12 device and queue run on: the error names the DirectML
    device, and every close path (``settle``) still signals the fence and waits for it, where a lost Direct3D 12
    device is not waited for (its queue will never signal)."""
    alone, _ = _device(0, DEVICE_REMOVED)
    with pytest.raises(dmlbridge.DeviceRemovedError, match=r"^the DirectML device was removed reading: "
                                                           r"IDMLDevice::GetDeviceRemovedReason gives 0x887A0005"):
        alone.check_removed("reading")
    assert _signals_settling(0) == [1] and _signals_settling(DEVICE_HUNG) == []


def _signals_settling(d3d12_reason: int) -> list[int]:
    """The fence values ``settle`` signals on a device whose DirectML device was lost, its Direct3D 12 device lost
    with ``d3d12_reason`` (0: running)."""
    device, _ = _device(d3d12_reason, DEVICE_REMOVED)
    signaled: list[int] = []
    queue = FakeCom({ID3D12CommandQueue.Signal: lambda this, fence, value: signaled.append(value) or 0})
    fence = FakeCom({ID3D12Fence.GetCompletedValue: lambda this: signaled[-1] if signaled else 0})
    device.queue, device.fence, device._fence_value = queue.address, fence.address, 0
    device._event, device.lock = object(), threading.RLock()  # type: ignore[assignment]
    device.settle()
    return signaled


def test_a_call_that_finds_too_little_memory_is_an_out_of_memory_error() -> None:
    """E_OUTOFMEMORY: the device works, it has not that much; a GpuOutOfMemoryError (a ComError) says to retry
    with less, and the device is not called removed."""
    healthy, _ = _device(0, 0)
    failing = FakeCom({ID3D12Device.CreateFence: lambda this, value, flags, iid, out: signed(0x8007000E)})
    with pytest.raises(dmlbridge.GpuOutOfMemoryError, match=r"E_OUTOFMEMORY.*retry with less") as caught:
        healthy.create(ID3D12Device.CreateFence, 0, 0, None, on=failing.address, doing="making a buffer")
    assert isinstance(caught.value, dmlbridge.ComError) and not isinstance(caught.value, dmlbridge.DeviceRemovedError)
    assert (caught.value.call, caught.value.hresult) == ("ID3D12Device::CreateFence", 0x8007000E)


class ComtypesLike:
    def __init__(self, address: int) -> None:
        self.value = address


class IntLike:
    def __init__(self, address: int) -> None:
        self.address = address

    def __int__(self) -> int:
        return self.address


def test_every_form_of_a_device_argument_is_called_at_its_address(monkeypatch: pytest.MonkeyPatch) -> None:
    """An object that is neither an IDMLDevice nor an ID3D12Device: checked as a COM object first (here, where its
    methods are ctypes callbacks in no module, the check is recorded, not made: test_device.py makes it), asked for
    both interfaces, by their IIDs, then refused."""
    monkeypatch.setattr(sys, "platform", "win32")  # (no Windows call is made before QueryInterface)
    asked: list[str] = []
    monkeypatch.setattr(device_module, "check_object", lambda address: asked.append(f"checked 0x{address:x}"))

    def query(this: int, iid: int, out: int) -> int:
        asked.append(str(structs.GUID.from_address(iid)))
        return signed(E_NOINTERFACE)

    other = FakeCom({IUnknown.QueryInterface: query})
    forms: list[Any] = [other.address, ctypes.c_void_p(other.address), ComtypesLike(other.address),
                        IntLike(other.address), ctypes.cast(other.address, ctypes.POINTER(ctypes.c_int))]
    for form in forms:
        asked.clear()
        with pytest.raises(dmlbridge.InvalidArgumentError, match="neither an IDMLDevice nor an ID3D12Device"):
            as_device(form)
        assert asked == [f"checked 0x{other.address:x}", str(IID.IDMLDevice), str(IID.ID3D12Device)], form


@pytest.mark.parametrize("given", [None, 0, 1, 0xFFFF, -5, 2**64, 1.5, True, "0x20000", b"", object(),
                                   ctypes.c_void_p(None), ComtypesLike(0)], ids=repr)
def test_what_cannot_be_an_address_is_refused_before_any_call(given: Any) -> None:
    with pytest.raises(dmlbridge.InvalidArgumentError, match="must be a create_device"):
        address_of(given)


def test_an_access_violation_in_the_first_call_is_an_error_that_says_the_process_may_be_unstable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ctypes reports an access violation inside a foreign call as an OSError (Windows): the first call on a
    caller's pointer turns it into an InvalidArgumentError, never a traceback of ctypes' own."""
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(device_module, "check_object", lambda address: None)  # (passed: an object that then faults)

    def fault(this: int, iid: Any) -> int:
        raise OSError("exception: access violation reading 0x0000000000000008")

    monkeypatch.setattr(device_module, "_query_interface", fault)
    with pytest.raises(dmlbridge.InvalidArgumentError, match=r"0x20000 failed .*violation.* may now be unstable"):
        as_device(0x20000)
