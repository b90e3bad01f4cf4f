"""Whether an address of this process can be read, and which loaded module holds one (Windows).

A COM pointer a caller passes is read before anything is called on it: its first 8 bytes point at its vtable, whose
first slot is ``QueryInterface``. Reading memory that is not mapped ends the process: Python cannot catch it. So
before the first read, :func:`readable` asks ``VirtualQuery`` whether the bytes are committed and readable, and
:func:`module_path` asks ``GetModuleHandleExW`` which loaded module a function pointer lies in (a live COM object's
methods lie in its DLL). A released object cannot be told from a live one in general; these checks refuse what
is plainly not one (a small int, a freed page, a heap block of data).

On any other system :func:`readable` and :func:`module_path` raise ``OSError`` (``ENOSYS``): dmlbridge.gpu calls
them only on Windows.

    >>> sorted(READABLE_PROTECTIONS)[:2]
    [2, 4]
"""

from __future__ import annotations

import errno
import sys

__all__ = ["READABLE_PROTECTIONS", "module_path", "readable"]

MEM_COMMIT = 0x1000
PAGE_GUARD = 0x100
READABLE_PROTECTIONS = frozenset({0x02, 0x04, 0x08, 0x20, 0x40, 0x80})
"""PAGE_READONLY, PAGE_READWRITE, PAGE_WRITECOPY and their EXECUTE_ forms (winnt.h): the protections that read."""
_FROM_ADDRESS = 0x4  # GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS
_UNCHANGED_REFCOUNT = 0x2  # GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT: nothing to free after


def _unsupported() -> OSError:
    return OSError(errno.ENOSYS, "process memory is probed only on Windows")


if sys.platform == "win32":
    import ctypes
    from ctypes import wintypes

    class _MemoryBasicInformation(ctypes.Structure):
        _fields_ = [("BaseAddress", ctypes.c_void_p), ("AllocationBase", ctypes.c_void_p),
                    ("AllocationProtect", wintypes.DWORD), ("PartitionId", wintypes.WORD),
                    ("RegionSize", ctypes.c_size_t), ("State", wintypes.DWORD), ("Protect", wintypes.DWORD),
                    ("Type", wintypes.DWORD)]

    _kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    _virtual_query = _kernel32.VirtualQuery
    _virtual_query.argtypes = [ctypes.c_void_p, ctypes.POINTER(_MemoryBasicInformation), ctypes.c_size_t]
    _virtual_query.restype = ctypes.c_size_t
    _module_handle = _kernel32.GetModuleHandleExW
    _module_handle.argtypes = [wintypes.DWORD, ctypes.c_void_p, ctypes.POINTER(wintypes.HMODULE)]
    _module_handle.restype = wintypes.BOOL
    _module_file = _kernel32.GetModuleFileNameW
    _module_file.argtypes = [wintypes.HMODULE, wintypes.LPWSTR, wintypes.DWORD]
    _module_file.restype = wintypes.DWORD

    def readable(address: int, size: int) -> bool:
        """Whether the ``size`` bytes at ``address`` are committed memory this process may read (no guard page)."""
        end = address + size
        while address < end:
            info = _MemoryBasicInformation()
            if not _virtual_query(address, ctypes.byref(info), ctypes.sizeof(info)):
                return False  # (past the user address space)
            if (info.State != MEM_COMMIT or info.Protect & PAGE_GUARD
                    or info.Protect & 0xFF not in READABLE_PROTECTIONS):
                return False
            address = (info.BaseAddress or 0) + info.RegionSize
        return True

    def module_path(address: int) -> str | None:
        """The file of the loaded module (EXE or DLL) whose image holds ``address``, or None when none does."""
        handle = wintypes.HMODULE()
        if not _module_handle(_FROM_ADDRESS | _UNCHANGED_REFCOUNT, address, ctypes.byref(handle)):
            return None
        name = ctypes.create_unicode_buffer(32768)
        length = _module_file(handle, name, len(name))
        return name.value[:length] if length else "?"

else:

    def readable(address: int, size: int) -> bool:
        """Whether the ``size`` bytes at ``address`` are committed memory this process may read (Windows only)."""
        raise _unsupported()

    def module_path(address: int) -> str | None:
        """The file of the loaded module whose image holds ``address`` (Windows only)."""
        raise _unsupported()
