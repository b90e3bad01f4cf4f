"""Making a device from nothing: the Direct3D 12 and DirectML DLLs, the adapters DXGI lists, the debug layers, and
:func:`create_device`.

``DirectML.dll`` is loaded by name, so the one beside the program (or the interpreter) comes before the older copy
Windows keeps in System32, as DirectML's redistributable is meant to be used; ``directml_dll=`` names another.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from dmlbridge.errors import ComError, GpuUnavailableError, InvalidArgumentError
from dmlbridge.gpu.com import address_of, check_object, failed, hresult_text, invoke, out_pointer, release
from dmlbridge.gpu.device import Device, create_dml_device, debug_layers_missing, dll_function
from dmlbridge.gpu.dlls import load_dll, needs_windows
from dmlbridge.gpu.interfaces import IID, ID3D12Debug, IDXGIAdapter1, IDXGIFactory1
from dmlbridge.gpu.structs import (
    D3D_FEATURE_LEVEL_11_0,
    DXGI_ADAPTER_DESC1,
)
from dmlbridge.types.data_types import FeatureLevel

__all__ = ["create_device", "enable_debug_layer"]

_DXGI_ERROR_NOT_FOUND = 0x887A0002


def enable_debug_layer() -> None:
    """Turn on the Direct3D 12 debug layer (before a device is made); GpuUnavailableError where it is not installed.

    Example:
        >>> import dmlbridge
        >>> try:                       # (where the Graphics Tools are installed, this turns the layer on)
        ...     enable_debug_layer()
        ... except dmlbridge.GpuUnavailableError as exc:
        ...     print("debug layer" in str(exc))
        True
    """
    missing = _enable_debug_layer()
    if missing is not None:
        raise debug_layers_missing([missing])


def _enable_debug_layer() -> str | None:
    """Turn on the Direct3D 12 debug layer; where it is not installed, what is missing and how to get it."""
    needs_windows("the Direct3D 12 debug layer")
    d3d12 = load_dll("d3d12.dll", "Direct3D 12 is part of Windows 10 and later")
    get_debug = dll_function(d3d12, "D3D12GetDebugInterface", ctypes.c_void_p, ctypes.c_void_p)
    debug = out_pointer()
    hresult = get_debug(ctypes.byref(IID.ID3D12Debug), ctypes.byref(debug))
    if failed(hresult) or not debug.value:
        return (f"the Direct3D 12 debug layer (D3D12GetDebugInterface failed with HRESULT {hresult_text(hresult)}): "
                "on Windows, add the optional feature 'Graphics Tools' (Settings > System > Optional features)")
    try:
        invoke(debug.value, ID3D12Debug.EnableDebugLayer)
    finally:
        release(debug.value)
    return None


def _adapter(adapter: Any) -> tuple[int | None, str | None]:
    """The IDXGIAdapter1 to make the device on (a new reference; None: the default adapter) and its description."""
    if adapter is None or (isinstance(adapter, int) and not isinstance(adapter, bool) and 0 <= adapter < 2**16):
        index = 0 if adapter is None else adapter
        dxgi = load_dll("dxgi.dll", "DXGI is part of Windows")
        create_factory = dll_function(dxgi, "CreateDXGIFactory1", ctypes.c_void_p, ctypes.c_void_p)
        factory = out_pointer()
        hresult = create_factory(ctypes.byref(IID.IDXGIFactory1), ctypes.byref(factory))
        if failed(hresult) or not factory.value:
            if adapter is None:
                return None, None  # (D3D12CreateDevice finds the default adapter without DXGI's help)
            raise ComError(f"CreateDXGIFactory1 failed with HRESULT {hresult_text(hresult)}", "CreateDXGIFactory1",
                           hresult & 0xFFFFFFFF)
        try:
            found = out_pointer()
            hresult = invoke(factory.value, IDXGIFactory1.EnumAdapters1, index, ctypes.byref(found))
        finally:
            release(factory.value)
        if (hresult & 0xFFFFFFFF) == _DXGI_ERROR_NOT_FOUND:
            raise GpuUnavailableError(f"adapter={index}: this machine has no adapter {index} (IDXGIFactory1::"
                                      "EnumAdapters1 lists them from 0, the default one)")
        if failed(hresult) or not found.value:
            raise ComError(f"IDXGIFactory1::EnumAdapters1 failed with HRESULT {hresult_text(hresult)}",
                           "IDXGIFactory1::EnumAdapters1", hresult & 0xFFFFFFFF)
        desc = DXGI_ADAPTER_DESC1()
        if failed(invoke(found.value, IDXGIAdapter1.GetDesc1, ctypes.byref(desc))):
            return found.value, None
        return found.value, desc.Description
    address = address_of(adapter, "adapter")
    check_object(address, "adapter")
    return address, None  # (the caller's: not released here)


def create_device(adapter: Any = None, debug: bool = False, *,
                  directml_dll: str | os.PathLike[str] | None = None,
                  min_feature_level: FeatureLevel | str | None = None) -> Device:
    """A Direct3D 12 device, a DirectML device on it and a command queue, for scripts and tests (a program that
    has its own devices passes its ``IDMLDevice`` instead, wherever a ``device`` is taken).

    ``adapter``: None for the default adapter, the index of one in DXGI's order (``IDXGIFactory1::EnumAdapters1``,
    0 first), or an ``IDXGIAdapter`` pointer (a ``ctypes.c_void_p`` or a comtypes pointer). ``debug=True`` turns on
    the Direct3D 12 debug layer and DirectML's (``DML_CREATE_DEVICE_FLAG_DEBUG``): GpuUnavailableError where they
    are not installed. ``directml_dll``: the path of the ``DirectML.dll`` to use; by default, one this process has
    loaded already, else the one ``DMLBRIDGE_DIRECTML_DLL`` names, else the one beside the program, else
    onnxruntime-directml's, else System32's (:mod:`dmlbridge.gpu.directml_dll`; ``Device.directml_dll`` and
    ``directml_version`` say which was loaded). ``min_feature_level`` (a ``dmlbridge.FeatureLevel`` or ``"6.3"``)
    is passed to ``DMLCreateDevice1``: a DirectML without it is a GpuUnavailableError naming the DLL, its version
    and its highest level. Not on Windows: GpuUnavailableError.

    Example:
        >>> import dmlbridge.gpu
        >>> device = dmlbridge.gpu.create_device()
        >>> device.feature_level.dotted, "FLOAT32" in {t.name for t in device.types}
        ('6.4', True)
        >>> device.close()
    """
    needs_windows("dmlbridge.gpu.create_device")
    minimum = _minimum_level(min_feature_level)
    if not isinstance(debug, bool):
        raise InvalidArgumentError(f"debug must be True or False, not {debug!r}")
    if isinstance(adapter, bool) or (isinstance(adapter, int) and not 0 <= adapter < 2**16):
        raise InvalidArgumentError(f"adapter must be None, an adapter index (0, 1, ...) or an IDXGIAdapter pointer "
                                   f"(a ctypes.c_void_p or a comtypes pointer), not {adapter!r}")
    # Where the Direct3D 12 layer is missing, DirectML's is still asked for, so that one error names all that is.
    missing = [] if not debug else [m for m in [_enable_debug_layer()] if m is not None]
    # An adapter DXGI made before the device lives as long as the device: releasing it earlier breaks Wine's
    # vkd3d. For the default adapter, DXGI is asked for its description after the device is made.
    adapter_pointer, description = (None, None) if adapter is None else _adapter(adapter)
    keep = [adapter_pointer] if adapter_pointer and isinstance(adapter, int) else []
    d3d12 = dml = None
    try:
        dll = load_dll("d3d12.dll", "Direct3D 12 is part of Windows 10 and later")
        create = dll_function(dll, "D3D12CreateDevice", ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p,
                           ctypes.c_void_p)
        out = out_pointer()
        hresult = create(adapter_pointer, D3D_FEATURE_LEVEL_11_0, ctypes.byref(IID.ID3D12Device), ctypes.byref(out))
        if failed(hresult) or not out.value:
            raise GpuUnavailableError(f"D3D12CreateDevice failed with HRESULT {hresult_text(hresult)}: no Direct3D 12 "
                                      "device at feature level 11.0 on this adapter (DirectML needs one)")
        d3d12 = out.value
        if adapter is None:
            default, description = _adapter(None)
            release(default)
        dml = create_dml_device(d3d12, debug=debug, directml_dll=directml_dll, missing=tuple(missing),
                                minimum=minimum)
        if missing:
            raise debug_layers_missing(missing)
        taken = d3d12, dml, keep
        d3d12 = dml = None  # (the Device owns them from here)
        keep = []
        return Device(taken[0], taken[1], adapter=description, debug=debug, keep=taken[2])
    finally:
        release(dml)
        release(d3d12)
        for pointer in keep:
            release(pointer)


def _minimum_level(level: object) -> FeatureLevel:
    """``min_feature_level`` checked: a FeatureLevel, or its dotted name (None: 1.0, DirectML's least)."""
    if level is None:
        return FeatureLevel.FL_1_0
    if isinstance(level, FeatureLevel):
        return level
    if isinstance(level, str):
        try:
            return FeatureLevel.parse(level)
        except ValueError:
            pass
    raise InvalidArgumentError(f"min_feature_level must be a dmlbridge.FeatureLevel or its name (\"6.3\"), not "
                               f"{level!r}")
