"""COM objects made in Python, for testing ``dmlbridge.gpu``'s plumbing on any system: a vtable of ctypes callbacks
behind an address, exactly what a COM pointer is."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from dmlbridge.gpu.com import FUNCTYPE
from dmlbridge.gpu.interfaces import Method


def signed(hresult: int) -> int:
    """An HRESULT as the 32-bit signed value a method returns."""
    return hresult - (1 << 32) if hresult & 0x80000000 else hresult


class FakeCom:
    """An object at ``address`` whose vtable holds ``methods`` (a Python function per Method, called with ``this``
    and the method's arguments); every call is recorded in ``calls``."""

    def __init__(self, methods: dict[Method, Callable[..., Any]]) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self._callbacks = []
        self._vtable = (ctypes.c_void_p * (max(m.slot for m in methods) + 1))()
        for method, function in methods.items():
            def call(this: int, *args: Any, _method: Method = method, _function: Any = function) -> Any:
                self.calls.append((_method.name, args))
                return _function(this, *args)
            callback = FUNCTYPE(method.restype, ctypes.c_void_p, *method.argtypes)(call)
            self._callbacks.append(callback)
            self._vtable[method.slot] = ctypes.cast(callback, ctypes.c_void_p).value
        self._object = ctypes.c_void_p(ctypes.addressof(self._vtable))
        self.address = ctypes.addressof(self._object)
