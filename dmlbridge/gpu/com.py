"""COM through ctypes: a method called by its vtable slot, a failed HRESULT as a :class:`~dmlbridge.errors.ComError`
naming the call and the code, and a pointer given in any of the forms Python DirectML code holds as an address.

A COM object is an address whose first 8 bytes point at its vtable, an array of function pointers; ``invoke``
reads the slot and calls it with ``this`` first. On 64-bit Windows there is one calling convention, so the same
call works on ctypes objects built in Python, which is how the tests exercise this module off Windows.

    >>> hresult_text(0x80070057)
    '0x80070057 (E_INVALIDARG)'
    >>> address_of(ctypes.c_void_p(0x20000)), address_of(0x20000)
    (131072, 131072)
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from dmlbridge.errors import ComError, InvalidArgumentError
from dmlbridge.gpu.interfaces import IUnknown, Method
from dmlbridge.system.process_memory import module_path, readable

__all__ = ["FUNCTYPE", "HRESULT_NAMES", "address_of", "check", "check_object", "failed", "hresult_text", "invoke",
           "out_pointer", "release"]

FUNCTYPE: Callable[..., Any] = getattr(ctypes, "WINFUNCTYPE", ctypes.CFUNCTYPE)  # (the same ABI on 64-bit Windows)

E_OUTOFMEMORY = 0x8007000E
"""What a call that found too little memory returns (``GpuOutOfMemoryError``)."""
HRESULT_NAMES = {
    0x80004001: "E_NOTIMPL",
    0x80004002: "E_NOINTERFACE",
    0x80004003: "E_POINTER",
    0x80004005: "E_FAIL",
    0x8000FFFF: "E_UNEXPECTED",
    0x80070005: "E_ACCESSDENIED",
    0x80070006: "E_HANDLE",
    0x8007000E: "E_OUTOFMEMORY",
    0x80070057: "E_INVALIDARG",
    0x887A0001: "DXGI_ERROR_INVALID_CALL",
    0x887A0002: "DXGI_ERROR_NOT_FOUND",
    0x887A0004: "DXGI_ERROR_UNSUPPORTED",
    0x887A0005: "DXGI_ERROR_DEVICE_REMOVED",
    0x887A0006: "DXGI_ERROR_DEVICE_HUNG",
    0x887A0007: "DXGI_ERROR_DEVICE_RESET",
    0x887A0020: "DXGI_ERROR_DRIVER_INTERNAL_ERROR",
    0x887A002D: "DXGI_ERROR_SDK_COMPONENT_MISSING",
    0x887E0001: "D3D12_ERROR_ADAPTER_NOT_FOUND",
    0x887E0002: "D3D12_ERROR_DRIVER_VERSION_MISMATCH",
}
"""The names of the HRESULTs Direct3D 12 and DirectML return (winerror.h), for messages."""

_prototypes: dict[Method, Any] = {}
_LOWEST_ADDRESS = 0x10000  # Windows never maps the lowest 64 KiB: a smaller "address" is a mistake, not an object


def hresult_text(hresult: int) -> str:
    """An HRESULT as errors print it: eight hex digits, and its name when it has a known one."""
    code = hresult & 0xFFFFFFFF
    name = HRESULT_NAMES.get(code)
    return f"0x{code:08X}" + (f" ({name})" if name else "")


def failed(hresult: int) -> bool:
    """Whether an HRESULT is a failure (its top bit set: FAILED())."""
    return bool(hresult & 0x80000000)


def invoke(this: int, method: Method, *args: Any) -> Any:
    """Call ``method`` on the COM object at ``this`` through its vtable, and return what it returns."""
    prototype = _prototypes.get(method)
    if prototype is None:
        prototype = _prototypes[method] = FUNCTYPE(method.restype, ctypes.c_void_p, *method.argtypes)
    vtable = ctypes.c_void_p.from_address(this).value or 0
    function = ctypes.c_void_p.from_address(vtable + ctypes.sizeof(ctypes.c_void_p) * method.slot).value
    return prototype(function)(this, *args)


def check(this: int, method: Method, *args: Any, doing: str = "") -> None:
    """Call an HRESULT method, and raise ComError naming it and its HRESULT if it fails; ``doing`` says what for
    (``"creating a 64 MiB upload heap"``)."""
    hresult = invoke(this, method, *args)
    if failed(hresult):
        raise ComError(f"{method.call_name} failed with HRESULT {hresult_text(hresult)}"
                       + (f" {doing}" if doing else ""), method.call_name, hresult & 0xFFFFFFFF)


def out_pointer() -> ctypes.c_void_p:
    """A place for a method to write an interface pointer (``void**``): pass ``ctypes.byref`` of it."""
    return ctypes.c_void_p()


def release(this: int | None) -> None:
    """Release one reference to the COM object at ``this`` (nothing for None or 0)."""
    if this:
        invoke(this, IUnknown.Release)


def address_of(pointer: Any, what: str = "device") -> int:
    """The address a Python DirectML program holds a COM pointer as: an int, a ``ctypes.c_void_p`` or a subclass
    of it (comtypes' interface pointers), a ctypes pointer, or an object with ``.value`` or ``__int__`` (pywin32's
    handles). A null pointer, or anything else, is an InvalidArgumentError naming ``what``.

    Example:
        >>> address_of(ctypes.cast(0x20000, ctypes.POINTER(ctypes.c_int)))
        131072
    """
    address: Any
    if isinstance(pointer, (bool, float, complex, str, bytes)):
        address = None
    elif isinstance(pointer, int):
        address = pointer
    elif isinstance(pointer, (ctypes._Pointer, ctypes.c_void_p)):
        # (comtypes' interface pointers subclass c_void_p, and their .value is the pointer itself, not its address)
        address = ctypes.cast(pointer, ctypes.c_void_p).value
    elif hasattr(pointer, "value") and (pointer.value is None or isinstance(pointer.value, int)):
        address = pointer.value
    elif hasattr(pointer, "__int__"):
        address = int(pointer)
    else:
        address = None
    if not isinstance(address, int) or isinstance(address, bool) or not _LOWEST_ADDRESS <= address < 2**64:
        null = address == 0 or (address is None and hasattr(pointer, "value"))
        small = isinstance(address, int) and 0 < address < _LOWEST_ADDRESS
        raise InvalidArgumentError(
            f"{what} must be a create_device() result or the address of a COM object: an int, a ctypes.c_void_p, "
            f"a ctypes or comtypes pointer, or an object with .value or __int__; got {pointer!r}"
            + (" (a null pointer)" if null else " (no object lives at so low an address)" if small else "")
        )
    return address


_POINTER = ctypes.sizeof(ctypes.c_void_p)


def check_object(address: int, what: str = "device") -> None:
    """Before the first call on a COM pointer a caller passed (Windows): its 8 bytes and its vtable's first three
    slots (IUnknown's) are readable memory, and its QueryInterface lies in a loaded module. Reading an address
    that maps nothing ends the process, so what fails these checks is refused, an InvalidArgumentError naming
    ``what``. A released object may still pass them (its memory kept, its DLL loaded): the caller keeps the object
    alive for the call (docs/windows.md)."""
    why = None
    if not readable(address, _POINTER):
        why = "no readable memory is there"
    else:
        vtable = ctypes.c_void_p.from_address(address).value or 0
        if vtable < _LOWEST_ADDRESS or not readable(vtable, 3 * _POINTER):
            why = f"its first 8 bytes (0x{vtable:x}) point at no readable vtable"
        else:
            method = ctypes.c_void_p.from_address(vtable).value or 0
            if method < _LOWEST_ADDRESS or module_path(method) is None:
                why = f"its QueryInterface (0x{method:x}) lies in no loaded module"
    if why is not None:
        raise InvalidArgumentError(
            f"{what} 0x{address:x} is not a live COM object: {why}; pass a create_device() result, or the address of "
            "a live IDMLDevice or ID3D12Device of this process, kept alive for the call")
