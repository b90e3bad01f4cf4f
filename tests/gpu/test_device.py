"""The device: create_device and target_of report the device's own level and types, every form of a device
argument reaches the same DirectML, the debug layers are a clear error where they are missing, and a refused COM
call names the call and its HRESULT."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gpu_runtime import TALLY, IdentityDesc

import dmlbridge
import dmlbridge.gpu
from dmlbridge.gpu.device import create_dml_device

SIXTEEN_BIT = {"FLOAT16", "UINT16", "INT16"}
EVERY_TYPE = {t.name for t in dmlbridge.DmlDataType if t is not dmlbridge.DmlDataType.UNKNOWN}


def _dmlupload_flags() -> str | None:
    """``device flags ...`` as the native upload program prints them for the same DirectML, when it is built
    (DMLBRIDGE_DMLUPLOAD): an independent reading of the device's level and types."""
    exe = os.environ.get("DMLBRIDGE_DMLUPLOAD")
    if not exe or not Path(exe).exists():
        return None
    run = subprocess.run([exe, "--self-test-only"], capture_output=True, text=True, check=False, timeout=600)
    found = re.search(r"^device flags (.*)$", run.stdout, re.M)
    assert run.returncode == 0 and found, run.stdout + run.stderr
    return found.group(1).strip()


def test_create_device_reports_feature_level_6_4_and_the_devices_types(device: dmlbridge.gpu.Device) -> None:
    assert device.feature_level is dmlbridge.FeatureLevel.FL_6_4
    types = {t.name for t in device.types}
    # Every type of level 6.4; the 16-bit ones only where the device can load them (DIRECTML_FP16=1 under Wine).
    assert types in (EVERY_TYPE, EVERY_TYPE - SIXTEEN_BIT), sorted(types)
    assert device.d3d12 and device.dml and device.queue and device.fence and not device.debug
    assert device.removed_reason() == ("", 0)
    flags = _dmlupload_flags()
    if flags is not None:
        missing = [t for t in dmlbridge.DmlDataType if t.name in EVERY_TYPE - types]  # (in DirectML.h's order)
        assert flags == "--feature-level 6.4" + (f" --unsupported {','.join(t.name for t in missing)}"
                                                  if missing else "")


def test_target_of_is_the_devices_level_and_types(device: dmlbridge.gpu.Device) -> None:
    target = dmlbridge.gpu.target_of(device)
    assert target == dmlbridge.Target("6.4", supported=device.types)
    assert target.types == device.types
    lossy = dmlbridge.gpu.target_of(device, int64="saturate", allow_lossy=True)
    assert (lossy.int64, lossy.allow_lossy, lossy.types) == ("saturate", True, device.types)
    # A tensor prepared for it takes the types it reports as they are, and the ones it lacks are widened.
    expected = "FLOAT16" if dmlbridge.DmlDataType.FLOAT16 in device.types else "FLOAT32"
    assert dmlbridge.prepare(np.ones(2, np.float16), target=target).dml_type.name == expected


class ComtypesLike:
    """What comtypes' POINTER(IDMLDevice) looks like to dmlbridge: an object whose ``.value`` is the address."""

    def __init__(self, address: int) -> None:
        self.value = address


class IntLike:
    def __init__(self, address: int) -> None:
        self._address = address

    def __int__(self) -> int:
        return self._address


def _comtypes_pointer(address: int) -> Any:
    """A real comtypes ``POINTER(IUnknown)`` to the object at ``address`` (comtypes is pinned in the Windows run's
    requirements): a ``c_void_p`` subclass whose ``.value`` is the pointer itself, not the address (dmlbridge once
    read it as "a null pointer"). It holds a reference of its own (AddRef here; comtypes releases it when the
    pointer is collected)."""
    import comtypes  # (Windows only: imported where the suite runs)

    pointer = ctypes.cast(address, ctypes.POINTER(comtypes.IUnknown))
    pointer.AddRef()
    assert isinstance(pointer, ctypes.c_void_p) and pointer.value is pointer
    return pointer


def _forms(device: dmlbridge.gpu.Device) -> dict[str, Any]:
    return {
        "comtypes pointer": _comtypes_pointer(device.dml),
        "comtypes ID3D12Device": _comtypes_pointer(device.d3d12),
        "create_device result": device,
        "int": device.dml,
        "c_void_p": ctypes.c_void_p(device.dml),
        "ctypes pointer": ctypes.cast(device.dml, ctypes.POINTER(ctypes.c_void_p)),
        "object with .value": ComtypesLike(device.dml),
        "object with __int__": IntLike(device.dml),
        "ID3D12Device": ctypes.c_void_p(device.d3d12),
    }


FORMS = ["create_device result", "int", "c_void_p", "ctypes pointer", "comtypes pointer", "object with .value",
         "object with __int__", "ID3D12Device", "comtypes ID3D12Device"]


@pytest.mark.parametrize("form", FORMS)
def test_every_form_of_a_device_argument_reaches_the_device(device: dmlbridge.gpu.Device, form: str) -> None:
    given = _forms(device)[form]
    values = np.array([3, -1, 7, 0x7FFFFFFF], np.int32)
    with dmlbridge.gpu.upload_tensors([dmlbridge.prepare(values)], given) as uploaded:
        assert uploaded.read(0).tolist() == values.tolist()
        TALLY.tensors += 1
        # A wrapped device is the same DirectML device, with a queue of its own.
        if "ID3D12Device" not in form:
            assert uploaded.device.dml == device.dml
        assert (uploaded.device is device) == (form == "create_device result")
        wrapped = uploaded.device
    assert wrapped.closed == (form != "create_device result")  # (closed with the upload that made it)
    assert dmlbridge.gpu.target_of(given) == dmlbridge.gpu.target_of(device)
    assert not device.closed


def _unmapped_address() -> int:
    """An address that was mapped and is no more: a page of an anonymous map, closed."""
    mapped = mmap.mmap(-1, 1 << 16)
    address = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
    mapped.close()  # (nothing refers to the buffer now: the map is gone)
    return address


NOT_OBJECTS = {
    "0x10000 (the lowest address Windows maps; Wine maps it)": "(no readable memory|point at no readable vtable)",
    "a page unmapped after use": "no readable memory",
    "a block of zeros": "point at no readable vtable",
    "a vtable of data, in no module": "lies in no loaded module",
}


@pytest.mark.parametrize("case", sorted(NOT_OBJECTS))
def test_what_is_no_live_com_object_is_refused_before_it_is_read(windows: None, case: str) -> None:
    """Reading an address that maps nothing ended the process (target_of(0x10000) was a page fault): the address,
    its vtable and its QueryInterface are checked first, and what fails is refused, naming the device argument, for
    target_of and upload_tensors alike, and for an adapter."""
    data = (ctypes.c_void_p * 4)()  # (zeros)
    table = (ctypes.c_void_p * 4)(ctypes.addressof(data), ctypes.addressof(data), ctypes.addressof(data))
    fake = (ctypes.c_void_p * 1)(ctypes.addressof(table))  # an object whose vtable's methods point at data
    address = {"0x10000 (the lowest address Windows maps; Wine maps it)": 0x10000,
               "a page unmapped after use": _unmapped_address(), "a block of zeros": ctypes.addressof(data),
               "a vtable of data, in no module": ctypes.addressof(fake)}[case]
    with pytest.raises(dmlbridge.InvalidArgumentError, match=f"0x{address:x} is not a live COM object: .*"
                                                             f"{NOT_OBJECTS[case]}"):
        dmlbridge.gpu.target_of(address)
    with pytest.raises(dmlbridge.InvalidArgumentError, match="not a live COM object"):
        dmlbridge.gpu.upload_tensors([dmlbridge.prepare(np.ones(2, np.float32))], ctypes.c_void_p(address))
    with pytest.raises(dmlbridge.InvalidArgumentError, match=r"adapter 0x.* is not a live COM object"):
        dmlbridge.gpu.create_device(ctypes.c_void_p(address))


@pytest.mark.parametrize("given", ["weights", 0, None, True, 1.5, ctypes.c_void_p(None)], ids=repr)
def test_what_is_not_a_device_is_refused_with_what_to_pass(windows: None, given: Any) -> None:
    with pytest.raises(dmlbridge.InvalidArgumentError, match="create_device"):
        dmlbridge.gpu.upload_tensors([dmlbridge.prepare(np.ones(2, np.float32))], given)


def test_a_closed_device_is_refused(windows: None) -> None:
    made = dmlbridge.gpu.create_device()
    made.close()
    made.close()  # (again: nothing)
    assert made.closed and made.d3d12 == 0
    with pytest.raises(dmlbridge.InvalidArgumentError, match="closed"):
        dmlbridge.gpu.target_of(made)


def test_an_adapter_that_does_not_exist_is_a_clear_error(windows: None) -> None:
    with dmlbridge.gpu.create_device(0) as first:
        assert first.feature_level is dmlbridge.FeatureLevel.FL_6_4 and first.adapter
    with pytest.raises(dmlbridge.GpuUnavailableError, match=r"adapter=4096: this machine has no adapter 4096"):
        dmlbridge.gpu.create_device(4096)
    for bad in (-1, True, "0"):
        with pytest.raises(dmlbridge.InvalidArgumentError, match="adapter"):
            dmlbridge.gpu.create_device(bad)


def _directml_debug_dll_installed() -> bool:
    found = ctypes.util.find_library("DirectML")
    folders = {Path(sys.executable).parent, *([Path(found).parent] if found else [])}
    return any((folder / "DirectML.Debug.dll").exists() for folder in folders)


def test_debug_true_is_a_clear_error_naming_every_debug_layer_missing(windows: None) -> None:
    """On this stack vkd3d's D3D12GetDebugInterface returns E_NOTIMPL and DirectML.Debug.dll is not there: one
    error names both, each with its HRESULT and how to get it (as ``dmlupload --debug`` does), so that installing
    one does not lead to a second error. Where the Graphics Tools and DirectML.Debug.dll are installed, the device
    is made with the layers on."""
    try:
        made = dmlbridge.gpu.create_device(debug=True)
    except dmlbridge.GpuUnavailableError as exc:
        message = str(exc)
        assert message.startswith("debug=True needs debug layers this machine lacks: "), message
        assert message.endswith("; or pass debug=False"), message
        d3d12 = "the Direct3D 12 debug layer (D3D12GetDebugInterface failed with HRESULT 0x80004001 (E_NOTIMPL))"
        directml = ("DirectML's debug layer (DMLCreateDevice1 with DML_CREATE_DEVICE_FLAG_DEBUG failed with HRESULT "
                    "0x887A002D (DXGI_ERROR_SDK_COMPONENT_MISSING))")
        assert (d3d12 in message) or (directml in message), message
        if d3d12 in message:
            assert "add the optional feature 'Graphics Tools'" in message, message
        if not _directml_debug_dll_installed():
            assert directml in message and "put DirectML.Debug.dll" in message, message
    else:
        with made:
            assert made.debug
    with pytest.raises(dmlbridge.InvalidArgumentError, match="debug must be True or False"):
        dmlbridge.gpu.create_device(debug=1)  # type: ignore[arg-type]


def test_directmls_debug_layer_missing_is_named(device: dmlbridge.gpu.Device) -> None:
    """DML_CREATE_DEVICE_FLAG_DEBUG without DirectML.Debug.dll beside DirectML.dll."""
    if _directml_debug_dll_installed():
        pytest.skip("DirectML.Debug.dll is installed: DirectML's debug layer is there")
    with pytest.raises(dmlbridge.GpuUnavailableError) as caught:
        create_dml_device(device.d3d12, debug=True)
    assert "DirectML.Debug.dll" in str(caught.value)
    assert "DMLCreateDevice1 with DML_CREATE_DEVICE_FLAG_DEBUG failed with HRESULT 0x887A002D " \
           "(DXGI_ERROR_SDK_COMPONENT_MISSING)" in str(caught.value)


def test_a_refused_com_call_names_the_call_and_its_hresult(device: dmlbridge.gpu.Device) -> None:
    """A desc 4 bytes short of what its sizes need: DirectML refuses it at CreateOperator with E_INVALIDARG; the
    device goes on working."""
    tensor = dmlbridge.prepare(np.arange(4, dtype=np.float32))
    short = tensor.buffer_desc._replace(total_tensor_size_in_bytes=12).as_ctypes()
    good = tensor.as_ctypes_tensor_desc()
    bad = dmlbridge.DML_TENSOR_DESC.pointing_at(short)
    op = IdentityDesc(ctypes.addressof(bad), ctypes.addressof(good), None)
    with dmlbridge.gpu.upload_tensors([tensor], device) as uploaded:
        with pytest.raises(dmlbridge.ComError) as caught:
            dmlbridge.gpu.run_operator(device, dmlbridge.gpu.DML_OPERATOR_DESC(1, ctypes.addressof(op)),
                                       [uploaded.binding(0)], [16])
        error = caught.value
        assert (error.call, error.hresult) == ("IDMLDevice::CreateOperator", 0x80070057)
        assert "IDMLDevice::CreateOperator failed with HRESULT 0x80070057 (E_INVALIDARG)" in str(error)
        assert not isinstance(error, dmlbridge.DeviceRemovedError)
        assert uploaded.read(0).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert device.removed_reason() == ("", 0)


def test_an_operator_and_a_graph_compile_with_the_execution_flags_given(device: dmlbridge.gpu.Device) -> None:
    """execution_flags reach CompileOperator and CompileGraph: with meta commands off and volatile descriptors, an
    IDENTITY still copies its input exactly."""
    x = dmlbridge.prepare(np.array([1.5, -2, 3, 0.25], np.float32))
    desc = x.as_ctypes_tensor_desc()
    op = IdentityDesc(ctypes.addressof(desc), ctypes.addressof(desc), None)
    operator = dmlbridge.gpu.DML_OPERATOR_DESC(1, ctypes.addressof(op))
    flags = dmlbridge.gpu.DmlExecutionFlags.DISABLE_META_COMMANDS | dmlbridge.gpu.DmlExecutionFlags.DESCRIPTORS_VOLATILE
    with dmlbridge.gpu.upload_tensors([x], device) as uploaded:
        one = dmlbridge.gpu.run_operator(device, operator, [uploaded.binding(0)], [16], execution_flags=flags)
        graph = dmlbridge.gpu.run_graph(device, [operator], [dmlbridge.gpu.InputEdge(0, 0, 0)], [],
                                        [dmlbridge.gpu.OutputEdge(0, 0, 0)], [uploaded.binding(0)], [16],
                                        execution_flags=flags)
    TALLY.operators += 2
    for out in (one, graph):
        assert dmlbridge.decode(out[0], "FLOAT32", [4]).tolist() == [1.5, -2.0, 3.0, 0.25]
