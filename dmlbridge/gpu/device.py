"""The device every GPU call runs on (:class:`Device`): a Direct3D 12 device, the DirectML device on it and a
command queue with its fence; what the device reports (its feature level and data types, as a ``Target``); and
the forms a ``device`` argument takes.

A :class:`Device` holds one reference to each COM object it names, released by ``close()``. Every wait on its
fence checks whether the device was removed, and every failed call whether that is why: a lost device is a
:class:`~dmlbridge.errors.DeviceRemovedError` with ``GetDeviceRemovedReason``'s reason, never a hang or a zero
result.

    >>> from dmlbridge.errors import InvalidArgumentError
    >>> try:
    ...     as_device("not a device")
    ... except InvalidArgumentError as exc:
    ...     print(str(exc)[:39])
    device must be a create_device() result
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from typing import Any

from dmlbridge.errors import (
    ComError,
    DeviceRemovedError,
    GpuOutOfMemoryError,
    GpuUnavailableError,
    InvalidArgumentError,
)
from dmlbridge.gpu.com import (
    E_OUTOFMEMORY,
    address_of,
    check_object,
    failed,
    hresult_text,
    invoke,
    out_pointer,
    release,
)
from dmlbridge.gpu.directml_dll import ENVIRONMENT_VARIABLE, dll_version, find_directml, loaded_path
from dmlbridge.gpu.dlls import Event, load_dll, needs_windows
from dmlbridge.gpu.interfaces import HRESULT, IID, ID3D12CommandQueue, ID3D12Device, ID3D12Fence, IDMLDevice, IUnknown
from dmlbridge.gpu.structs import (
    D3D12_COMMAND_LIST_TYPE_DIRECT,
    D3D12_COMMAND_QUEUE_DESC,
    DML_CREATE_DEVICE_FLAG_DEBUG,
    DML_CREATE_DEVICE_FLAG_NONE,
    DML_FEATURE_DATA_FEATURE_LEVELS,
    DML_FEATURE_DATA_TENSOR_DATA_TYPE_SUPPORT,
    DML_FEATURE_FEATURE_LEVELS,
    DML_FEATURE_QUERY_FEATURE_LEVELS,
    DML_FEATURE_QUERY_TENSOR_DATA_TYPE_SUPPORT,
    DML_FEATURE_TENSOR_DATA_TYPE_SUPPORT,
)
from dmlbridge.types.data_types import DmlDataType, FeatureLevel
from dmlbridge.types.target import Int64Mode, Target

__all__ = ["Device", "as_device", "create_dml_device", "debug_layers_missing", "dll_function", "target_of"]

_E_NOINTERFACE = 0x80004002
_DXGI_ERROR_SDK_COMPONENT_MISSING = 0x887A002D
_DIRECTML_HINT = ("install it with DirectML's redistributable (the Microsoft.AI.DirectML NuGet package, or the "
                  "DirectML.dll of the onnxruntime-directml wheel) beside your program, or pass directml_dll=")
_POLL_MS = 1000  # how often a wait looks whether the device was lost (a lost device may never signal)


class Device:
    """A Direct3D 12 device, the DirectML device on it, and a command queue with its fence (what
    :func:`~dmlbridge.gpu.create_device` returns, and what every ``dmlbridge.gpu`` call taking a ``device`` runs
    on). The COM objects are given as addresses (ints): ``d3d12`` (``ID3D12Device*``), ``dml`` (``IDMLDevice*``),
    ``queue`` (``ID3D12CommandQueue*``) and ``fence`` (``ID3D12Fence*``); pass them to your own ctypes or comtypes
    code as they are. ``feature_level`` and ``types`` are what the DirectML device reported
    (``DML_FEATURE_FEATURE_LEVELS``, ``DML_FEATURE_TENSOR_DATA_TYPE_SUPPORT``), ``adapter`` the adapter's
    description (None when the device came from elsewhere), ``debug`` whether the debug layers are on, and
    ``directml_dll`` and ``directml_version`` the path and file version of the DirectML.dll this process loaded
    (:mod:`dmlbridge.gpu.directml_dll` says which it looks for).

    ``close()`` (or leaving a ``with`` block) releases them; a closed device refuses every call.

    Threads may share a device: ``lock`` (a reentrant lock) is held around each record-submit-wait (an upload,
    a read, a run), which share the queue, its fence and the event waits use; the work of two threads on one
    device runs one after the other.

    Example:
        >>> import dmlbridge.gpu
        >>> with dmlbridge.gpu.create_device() as device:
        ...     print(device.feature_level.dotted, device.queue != 0)
        6.4 True
    """

    def __init__(self, d3d12: int, dml: int, *, adapter: str | None = None, debug: bool = False,
                 keep: list[int] | None = None) -> None:
        """Take over one reference to each of ``d3d12`` and ``dml`` (and of the objects of ``keep``, released after
        them), released by ``close()`` (or here if the queue cannot be made), and make the queue, its fence and the
        event waits use."""
        needs_windows("dmlbridge.gpu.Device")
        self.d3d12, self.dml, self.adapter, self.debug = d3d12, dml, adapter, debug
        self._keep = list(keep or [])
        self.queue = self.fence = 0
        self._event: Event | None = None
        self._fence_value = 0
        self._closed = False
        self.lock = threading.RLock()
        """Held around each record-submit-wait on this device (reentrant: a run's reads take it again)."""
        try:
            queue_desc = D3D12_COMMAND_QUEUE_DESC(D3D12_COMMAND_LIST_TYPE_DIRECT, 0, 0, 0)
            self.queue = self.create(ID3D12Device.CreateCommandQueue, ctypes.byref(queue_desc),
                                     ctypes.byref(IID.ID3D12CommandQueue), doing="making the command queue")
            self.fence = self.create(ID3D12Device.CreateFence, 0, 0, ctypes.byref(IID.ID3D12Fence),
                                     doing="making the queue's fence")
            self._event = Event()
            self.feature_level = _feature_level(self)
            self.types = _data_types(self)
        except BaseException:
            self.close()
            raise

    @functools.cached_property
    def directml_dll(self) -> str | None:
        """The path of the DirectML.dll this process loaded (None: the caller's device came from elsewhere and no
        module of that name is loaded). Looked up when first asked: a caller's device pointer is wrapped anew by
        every call that takes it."""
        return loaded_path()

    @functools.cached_property
    def directml_version(self) -> str | None:
        """The file version of :attr:`directml_dll` (``"1.15.4.0"``; None where it has no version resource)."""
        return None if self.directml_dll is None else dll_version(self.directml_dll)

    # --- the queue -------------------------------------------------------------------------------------------

    def submit(self, command_list: int) -> int:
        """Execute one closed command list on the queue; the fence value that says it is done."""
        with self.lock:
            self._check_open()
            lists = (ctypes.c_void_p * 1)(command_list)
            invoke(self.queue, ID3D12CommandQueue.ExecuteCommandLists, 1, lists)
            return self.signal()

    def signal(self) -> int:
        """Have the queue signal the fence when everything submitted so far is done; the value it will have."""
        with self.lock:
            self._check_open()
            self._fence_value += 1
            self.check(self.queue, ID3D12CommandQueue.Signal, self.fence, self._fence_value,
                       doing="signaling the fence")
            return self._fence_value

    def completed(self) -> int:
        """The fence's value: every submission signaled up to it is done."""
        self._check_open()
        return int(invoke(self.fence, ID3D12Fence.GetCompletedValue))

    def wait(self, value: int, doing: str = "") -> None:
        """Wait until the queue has done everything up to fence ``value``; DeviceRemovedError if the device is lost
        before (or while) it does."""
        with self.lock:  # (one event serves every wait: two waits at once would take each other's signal)
            if self.completed() < value:
                assert self._event is not None
                self.check(self.fence, ID3D12Fence.SetEventOnCompletion, value, self._event.handle, doing=doing)
                while self.completed() < value:
                    if not self._event.wait(_POLL_MS):
                        self.check_removed(doing)
            self.check_removed(doing)

    def flush(self) -> None:
        """Wait until everything submitted so far is done."""
        with self.lock:
            self.wait(self.signal(), "waiting for the queue")

    def settle(self, value: int | None = None) -> None:
        """For a close path: wait until the queue has done everything up to fence ``value`` (None: everything
        submitted), unless the Direct3D 12 device is lost. A DirectML device lost alone leaves the queue running and
        its buffers in use, so it is waited for all the same; nothing here raises."""
        with self.lock:
            if not (self.fence and self.queue and self._event is not None) or self.d3d12_removed():
                return
            if value is None:
                self._fence_value += 1
                if failed(invoke(self.queue, ID3D12CommandQueue.Signal, self.fence, self._fence_value)):
                    return
                value = self._fence_value
            if int(invoke(self.fence, ID3D12Fence.GetCompletedValue)) >= value:
                return
            if failed(invoke(self.fence, ID3D12Fence.SetEventOnCompletion, value, self._event.handle)):
                return
            while int(invoke(self.fence, ID3D12Fence.GetCompletedValue)) < value:
                if not self._event.wait(_POLL_MS) and self.d3d12_removed():
                    return

    # --- COM calls -------------------------------------------------------------------------------------------

    def removed_reason(self) -> tuple[str, int]:
        """Which device says it was removed, and why: ``("", 0)`` while neither the Direct3D 12 device nor the
        DirectML device (which can lose its device on its own) has been."""
        for call, this, method in (("ID3D12Device::GetDeviceRemovedReason", self.d3d12,
                                    ID3D12Device.GetDeviceRemovedReason),
                                   ("IDMLDevice::GetDeviceRemovedReason", self.dml, IDMLDevice.GetDeviceRemovedReason)):
            if this:
                reason = int(invoke(this, method)) & 0xFFFFFFFF
                if reason:
                    return call, reason
        return "", 0

    def d3d12_removed(self) -> bool:
        """Whether the Direct3D 12 device (and with it the queue) was removed: not just the DirectML device."""
        return bool(self.d3d12) and bool(int(invoke(self.d3d12, ID3D12Device.GetDeviceRemovedReason)) & 0xFFFFFFFF)

    def check_removed(self, doing: str) -> None:
        """Raise DeviceRemovedError, with the reason, if the device was removed (naming which: the Direct3D 12
        device, or the DirectML device alone)."""
        call, reason = self.removed_reason()
        if reason:
            which = "Direct3D 12" if call.startswith("ID3D12") else "DirectML"
            raise DeviceRemovedError(
                f"the {which} device was removed{' ' + doing if doing else ''}: {call} gives "
                f"{hresult_text(reason)}; nothing on this device can be used again: close it and create a new device "
                "(in a new process, if the driver blamed this one for a hang)", call, reason)

    def check(self, this: int, method: Any, *args: Any, doing: str = "") -> None:
        """Call an HRESULT method; ComError naming it and its HRESULT if it fails, or DeviceRemovedError with the
        reason if it failed because the device was removed."""
        hresult = invoke(this, method, *args)
        if failed(hresult):
            self.check_removed(doing)
            code = hresult & 0xFFFFFFFF
            message = f"{method.call_name} failed with HRESULT {hresult_text(hresult)}" + (f" {doing}" if doing else "")
            if code == E_OUTOFMEMORY:
                raise GpuOutOfMemoryError(f"{message}: the device has not that much memory; retry with less (a "
                                          "smaller staging_bytes, fewer or smaller tensors, smaller buffers)",
                                          method.call_name, code)
            raise ComError(message, method.call_name, code)

    def create(self, method: Any, *args: Any, on: int | None = None, doing: str = "") -> int:
        """Call a method whose last argument is the ``void**`` a new interface is written to (``on`` the object to
        call it on, the Direct3D 12 device by default); the new object's address."""
        self._check_open()
        out = out_pointer()
        self.check(self.d3d12 if on is None else on, method, *args, ctypes.byref(out), doing=doing)
        if not out.value:
            raise ComError(f"{method.call_name} returned S_OK and no object {doing}".rstrip(), method.call_name, 0)
        return out.value

    # --- lifetime --------------------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgumentError("this device was closed; create a new one (dmlbridge.gpu.create_device)")

    def close(self) -> None:
        """Wait for the queue, then release the fence, the queue and the devices (again: nothing)."""
        with self.lock:
            if self._closed:
                return
            self._close()

    def _close(self) -> None:
        try:
            self.settle()
        finally:
            self._closed = True
            if self._event is not None:
                self._event.close()
            for name in ("fence", "queue", "dml", "d3d12"):
                release(getattr(self, name))
                setattr(self, name, 0)
            for pointer in self._keep:
                release(pointer)
            self._keep = []

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._closed:
            return "<dmlbridge.gpu.Device (closed)>"
        return (f"<dmlbridge.gpu.Device feature_level={self.feature_level.dotted} adapter={self.adapter!r}"
                f"{' debug' if self.debug else ''}>")


def dll_function(dll: Any, name: str, *argtypes: Any) -> Any:
    """A DLL export returning an HRESULT, with its argument types set."""
    function = getattr(dll, name)
    function.restype = HRESULT
    function.argtypes = list(argtypes)
    return function


def debug_layers_missing(missing: list[str]) -> GpuUnavailableError:
    """The error of ``debug=True`` where debug layers are missing: each one named, with how to get it.

        >>> print(debug_layers_missing(["the layer (how to get it)"]))
        debug=True needs debug layers this machine lacks: the layer (how to get it); or pass debug=False
    """
    return GpuUnavailableError(f"debug=True needs debug layers this machine lacks: {'; and '.join(missing)}; "
                               "or pass debug=False")


def create_dml_device(d3d12: int, *, debug: bool = False, directml_dll: str | os.PathLike[str] | None = None,
                      missing: tuple[str, ...] = (), minimum: FeatureLevel = FeatureLevel.FL_1_0) -> int:
    """A DirectML device on the Direct3D 12 device at ``d3d12`` (``DMLCreateDevice1`` at feature level ``minimum``:
    the device then reports the highest it has), from the DirectML.dll :func:`find_directml` finds; ``debug`` adds
    ``DML_CREATE_DEVICE_FLAG_DEBUG``. GpuUnavailableError when DirectML (or its debug layer) is missing, or has not
    ``minimum``; ``missing`` names the debug layers already found missing, so that the error names them all."""
    path, source = find_directml(directml_dll)
    dll = load_dll(path, _DIRECTML_HINT)
    try:
        create = dll_function(dll, "DMLCreateDevice1", ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32,
                           ctypes.c_void_p, ctypes.c_void_p)
    except AttributeError:
        raise GpuUnavailableError(f"the DirectML.dll loaded has no DMLCreateDevice1 (it predates DirectML 1.1, "
                                  f"feature level 2.0); {_DIRECTML_HINT}") from None
    out = out_pointer()
    flags = DML_CREATE_DEVICE_FLAG_DEBUG if debug else DML_CREATE_DEVICE_FLAG_NONE
    hresult = create(d3d12, flags, int(minimum), ctypes.byref(IID.IDMLDevice), ctypes.byref(out))
    if debug and (hresult & 0xFFFFFFFF) == _DXGI_ERROR_SDK_COMPONENT_MISSING:
        raise debug_layers_missing([
            *missing, f"DirectML's debug layer (DMLCreateDevice1 with DML_CREATE_DEVICE_FLAG_DEBUG failed with "
            f"HRESULT {hresult_text(hresult)}): put DirectML.Debug.dll, from the Microsoft.AI.DirectML NuGet "
            "package (bin/x64-win), beside DirectML.dll"])
    if failed(hresult) or not out.value:
        if missing:  # (a debug layer is known to be missing: that is the error to act on first)
            raise debug_layers_missing(list(missing))
        if minimum > FeatureLevel.FL_1_0:
            highest = _highest_level(create, d3d12)
            loaded = loaded_path() or path
            raise GpuUnavailableError(
                f"the DirectML.dll loaded ({loaded}, {source}; version "
                f"{dll_version(loaded) or 'unknown'}) has not feature level {minimum.dotted} "
                f"(min_feature_level){'' if highest is None else f': its highest is {highest.dotted}'}; give a newer "
                f"one (the Microsoft.AI.DirectML NuGet package, or onnxruntime-directml's) with directml_dll= or "
                f"{ENVIRONMENT_VARIABLE}")
        raise ComError(f"DMLCreateDevice1 failed with HRESULT {hresult_text(hresult)}", "DMLCreateDevice1",
                       hresult & 0xFFFFFFFF)
    return out.value


def _highest_level(create: Any, d3d12: int) -> FeatureLevel | None:
    """The highest feature level a DirectML device of this DLL reports (None: it makes none), for a message."""
    out = out_pointer()
    if failed(create(d3d12, DML_CREATE_DEVICE_FLAG_NONE, int(FeatureLevel.FL_1_0), ctypes.byref(IID.IDMLDevice),
                     ctypes.byref(out))) or not out.value:
        return None
    try:
        hresult, level = _ask_feature_level(out.value)
        return None if failed(hresult) else level
    finally:
        release(out.value)


def _ask_feature_level(dml: int) -> tuple[int, FeatureLevel | None]:
    """(HRESULT, the highest level dmlbridge knows that the DirectML device at ``dml`` supports): one
    DML_FEATURE_FEATURE_LEVELS query."""
    levels = (ctypes.c_int32 * len(FeatureLevel))(*[int(level) for level in FeatureLevel])
    query = DML_FEATURE_QUERY_FEATURE_LEVELS(len(FeatureLevel), levels)
    data = DML_FEATURE_DATA_FEATURE_LEVELS()
    hresult = invoke(dml, IDMLDevice.CheckFeatureSupport, DML_FEATURE_FEATURE_LEVELS, ctypes.sizeof(query),
                     ctypes.byref(query), ctypes.sizeof(data), ctypes.byref(data))
    return int(hresult), None if failed(hresult) else FeatureLevel(data.MaxSupportedFeatureLevel)


def _check_feature(device: Device, feature: int, query: Any, data: Any) -> bool:
    hresult = invoke(device.dml, IDMLDevice.CheckFeatureSupport, feature, ctypes.sizeof(query), ctypes.byref(query),
                     ctypes.sizeof(data), ctypes.byref(data))
    return not failed(hresult)


def _feature_level(device: Device) -> FeatureLevel:
    """The highest feature level dmlbridge knows that the DirectML device supports (DML_FEATURE_FEATURE_LEVELS)."""
    hresult, level = _ask_feature_level(device.dml)
    if level is None:
        device.check_removed("asking for the device's feature level (DML_FEATURE_FEATURE_LEVELS)")
        raise ComError(f"IDMLDevice::CheckFeatureSupport failed with HRESULT {hresult_text(hresult)} asking for the "
                       "device's feature level (DML_FEATURE_FEATURE_LEVELS)", "IDMLDevice::CheckFeatureSupport",
                       hresult & 0xFFFFFFFF)
    return level


def _data_types(device: Device) -> frozenset[DmlDataType]:
    """The types the DirectML device says it supports (DML_FEATURE_TENSOR_DATA_TYPE_SUPPORT, one query each; a
    type the DLL does not know, which it refuses to be asked about, is unsupported)."""
    supported = set()
    for dml_type in DmlDataType:
        if dml_type is DmlDataType.UNKNOWN:
            continue
        query = DML_FEATURE_QUERY_TENSOR_DATA_TYPE_SUPPORT(int(dml_type))
        data = DML_FEATURE_DATA_TENSOR_DATA_TYPE_SUPPORT()
        if _check_feature(device, DML_FEATURE_TENSOR_DATA_TYPE_SUPPORT, query, data) and data.IsSupported:
            supported.add(dml_type)
    return frozenset(supported)


def _query_interface(this: int, iid: Any) -> int | None:
    """The object's interface ``iid`` (a new reference), or None if it has none (E_NOINTERFACE)."""
    out = out_pointer()
    hresult = invoke(this, IUnknown.QueryInterface, ctypes.byref(iid), ctypes.byref(out))
    if (hresult & 0xFFFFFFFF) == _E_NOINTERFACE:
        return None
    if failed(hresult) or not out.value:
        raise ComError(f"IUnknown::QueryInterface failed with HRESULT {hresult_text(hresult)} on the device given",
                       "IUnknown::QueryInterface", hresult & 0xFFFFFFFF)
    return out.value


def as_device(device: Any, *, directml_dll: str | os.PathLike[str] | None = None) -> tuple[Device, bool]:
    """The :class:`Device` a ``device`` argument names, and whether the caller now owns it (and must close it).

    ``device`` is a :class:`Device` (used as it is: not owned), or the address of an ``IDMLDevice`` in any form
    :func:`~dmlbridge.gpu.com.address_of` takes (an int, a ``ctypes.c_void_p``, a comtypes pointer): its Direct3D 12
    device is then found with ``IDMLDevice::GetParentDevice``, and a queue of its own made on it (owned). An
    ``ID3D12Device`` gets a DirectML device of its own (from ``directml_dll``, as ``create_device`` loads it).
    """
    if isinstance(device, Device):
        device._check_open()
        return device, False
    address = address_of(device)
    needs_windows("dmlbridge.gpu")
    check_object(address)
    try:
        dml = _query_interface(address, IID.IDMLDevice)
    except OSError as exc:  # (ctypes' words for an access violation inside the call, which Windows let it catch)
        raise InvalidArgumentError(
            f"calling the COM object at 0x{address:x} failed ({exc}): it is not a live IDMLDevice or ID3D12Device, "
            "and this process may now be unstable; pass a create_device() result, or the address of a live device "
            "of this process, kept alive for the call") from None
    d3d12 = None
    try:
        if dml is None:
            d3d12 = _query_interface(address, IID.ID3D12Device)
            if d3d12 is None:
                raise InvalidArgumentError(
                    f"the COM object at 0x{address:x} is neither an IDMLDevice nor an ID3D12Device; pass a "
                    "create_device() result, or the address of your IDMLDevice"
                )
            dml = create_dml_device(d3d12, directml_dll=directml_dll)
        else:
            out = out_pointer()
            hresult = invoke(dml, IDMLDevice.GetParentDevice, ctypes.byref(IID.ID3D12Device), ctypes.byref(out))
            if failed(hresult) or not out.value:
                raise ComError(f"IDMLDevice::GetParentDevice failed with HRESULT {hresult_text(hresult)} on the "
                               "device given", "IDMLDevice::GetParentDevice", hresult & 0xFFFFFFFF)
            d3d12 = out.value
        d3d12_taken, dml_taken = d3d12, dml
        d3d12 = dml = None  # (the Device owns them from here, and releases them if it fails)
        return Device(d3d12_taken, dml_taken), True
    finally:
        release(dml)
        release(d3d12)


def target_of(device: Any, *, int64: Int64Mode = "emulate", allow_lossy: bool = False) -> Target:
    """The :class:`~dmlbridge.Target` a device is: its own feature level (``DML_FEATURE_FEATURE_LEVELS``) and the
    data types it reports (``DML_FEATURE_TENSOR_DATA_TYPE_SUPPORT``), with the fallback policy given
    (``int64``, ``allow_lossy``, as ``Target`` takes them). ``device``: as :func:`~dmlbridge.gpu.upload` takes it.

    Example:
        >>> import dmlbridge.gpu
        >>> with dmlbridge.gpu.create_device() as device:
        ...     dmlbridge.gpu.target_of(device).feature_level.dotted
        '6.4'
    """
    held, owned = as_device(device)
    try:
        return Target(held.feature_level, supported=held.types, int64=int64, allow_lossy=allow_lossy)
    finally:
        if owned:
            held.close()
