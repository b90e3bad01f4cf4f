"""The DLLs the GPU package calls into: the check that this is Windows at all, a DLL loaded by name, and the
kernel's events a fence wait blocks on.

Everything here imports on any system; only calling it needs Windows (a :class:`~dmlbridge.errors.GpuUnavailableError`
elsewhere).

    >>> try:
    ...     needs_windows("this call")
    ...     said = "this call needs Windows, and has it"
    ... except GpuUnavailableError as exc:   # (off Windows: it says so, naming the call)
    ...     said = str(exc)
    >>> said.startswith("this call needs Windows")
    True
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

from dmlbridge.errors import GpuError, GpuUnavailableError
from dmlbridge.system.windows import on_windows

__all__ = ["WAIT_OBJECT_0", "Event", "load_dll", "needs_windows"]

WAIT_OBJECT_0 = 0
_WAIT_FAILED = 0xFFFFFFFF


def needs_windows(what: str) -> None:
    """Raise GpuUnavailableError unless this is Windows: ``what`` is the call that needs it."""
    if not on_windows():
        raise GpuUnavailableError(
            f"{what} needs Windows: dmlbridge.gpu drives Direct3D 12 and DirectML, which only Windows has (this is "
            f"{sys.platform}); on other systems, convert here and upload on Windows"
        )


def load_dll(name: str | os.PathLike[str], hint: str) -> Any:
    """Load a DLL (``"d3d12.dll"``, or a path) with the standard calling convention of its exports; ``hint`` says
    how to get it when it is missing."""
    needs_windows(f"loading {os.fspath(name)}")
    try:
        return getattr(ctypes, "WinDLL")(os.fspath(name))  # noqa: B009 (ctypes.WinDLL exists only on Windows)
    except OSError as exc:
        raise GpuUnavailableError(f"cannot load {os.fspath(name)}: {exc}; {hint}") from None


class Event:
    """A Win32 auto-reset event (``CreateEventW``): a fence signals it, a wait returns when it is."""

    def __init__(self) -> None:
        self._kernel32 = load_dll("kernel32.dll", "it is part of Windows")
        self._kernel32.CreateEventW.restype = ctypes.c_void_p
        self._kernel32.CreateEventW.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p]
        self._kernel32.WaitForSingleObject.restype = ctypes.c_uint32
        self._kernel32.WaitForSingleObject.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        self._kernel32.CloseHandle.argtypes = [ctypes.c_void_p]
        handle = self._kernel32.CreateEventW(None, 0, 0, None)
        if not handle:
            raise GpuError("CreateEventW failed: Windows has no event left to wait on the GPU with")
        self.handle: int | None = handle

    def wait(self, milliseconds: int) -> bool:
        """Wait until the event is signaled, at most ``milliseconds``; whether it was."""
        result = self._kernel32.WaitForSingleObject(self.handle, milliseconds)
        if result == _WAIT_FAILED:
            raise GpuError("WaitForSingleObject failed on a fence's event")
        return bool(result == WAIT_OBJECT_0)

    def close(self) -> None:
        if self.handle:
            self._kernel32.CloseHandle(self.handle)
        self.handle = None
