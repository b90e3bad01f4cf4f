"""Which ``DirectML.dll`` ``dmlbridge.gpu`` loads, and which one it is.

Windows' own search finds the DLL beside the program, else the older copy Windows keeps in System32 (DirectML 1.8
on Windows 11 22H2: feature level 5.0, no INT4, no DEQUANTIZE), and never the one ``pip install
onnxruntime-directml`` puts in ``site-packages\\onnxruntime\\capi``. So dmlbridge looks, in this order:

1. a ``DirectML.dll`` already loaded in this process (by onnxruntime, say): it is used, and never a second copy
   beside it (a ``directml_dll=`` naming another file is refused);
2. ``directml_dll=``;
3. the environment variable ``DMLBRIDGE_DIRECTML_DLL``;
4. beside the program (the Python executable);
5. onnxruntime-directml's ``onnxruntime\\capi`` (found without importing onnxruntime);
6. System32.

``Device.directml_dll`` and ``Device.directml_version`` then say which file was loaded.

    >>> SOURCES[0], SOURCES[-1]
    ('already loaded', 'System32')
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from dmlbridge.errors import InvalidArgumentError
from dmlbridge.gpu.dlls import load_dll

__all__ = ["ENVIRONMENT_VARIABLE", "SOURCES", "dll_version", "find_directml", "loaded_path"]

ENVIRONMENT_VARIABLE = "DMLBRIDGE_DIRECTML_DLL"
"""The variable that names the DirectML.dll to load when ``directml_dll=`` does not."""
NAME = "DirectML.dll"
SOURCES = ("already loaded", "directml_dll=", ENVIRONMENT_VARIABLE, "beside the program",
           "onnxruntime-directml's onnxruntime\\capi", "System32")
"""Where the DLL can come from, in the order they are looked at."""


def find_directml(directml_dll: str | os.PathLike[str] | None = None) -> tuple[str, str]:
    """(the path of the DirectML.dll to load, which of :data:`SOURCES` it came from). InvalidArgumentError when
    ``directml_dll`` names another file than the DirectML.dll this process has loaded already."""
    loaded = loaded_path()
    if loaded is not None:
        if directml_dll is not None and not _same_file(os.fspath(directml_dll), loaded):
            raise InvalidArgumentError(
                f"directml_dll={os.fspath(directml_dll)!r}, but this process has loaded {loaded} already (onnxruntime "
                "loads its own, say), and a second DirectML.dll beside it is not loaded: pass directml_dll=None to "
                "use that one, or give this path in a process that loads no other")
        return loaded, SOURCES[0]
    if directml_dll is not None:
        return os.fspath(directml_dll), SOURCES[1]
    named = os.environ.get(ENVIRONMENT_VARIABLE)
    if named:
        return named, SOURCES[2]
    beside = Path(sys.executable).resolve().parent / NAME
    if beside.is_file():
        return str(beside), SOURCES[3]
    capi = _onnxruntime_capi()
    if capi is not None:
        return str(capi), SOURCES[4]
    return str(Path(os.environ.get("SystemRoot", r"C:\Windows")) / "System32" / NAME), SOURCES[5]


def loaded_path() -> str | None:
    """The path of the DirectML.dll this process has loaded (None: none)."""
    kernel32 = load_dll("kernel32.dll", "it is part of Windows")
    kernel32.GetModuleHandleW.restype = ctypes.c_void_p
    kernel32.GetModuleHandleW.argtypes = [ctypes.c_wchar_p]
    module = kernel32.GetModuleHandleW(NAME)
    if not module:
        return None
    kernel32.GetModuleFileNameW.restype = ctypes.c_uint32
    kernel32.GetModuleFileNameW.argtypes = [ctypes.c_void_p, ctypes.c_wchar_p, ctypes.c_uint32]
    buffer = ctypes.create_unicode_buffer(32768)
    length = kernel32.GetModuleFileNameW(module, buffer, len(buffer))
    return buffer.value[:length] if length else None


def dll_version(path: str) -> str | None:
    """The file version of the DLL at ``path`` (``"1.15.4.0"``), from its version resource; None without one."""
    version = load_dll("version.dll", "it is part of Windows")
    version.GetFileVersionInfoSizeW.restype = ctypes.c_uint32
    version.GetFileVersionInfoSizeW.argtypes = [ctypes.c_wchar_p, ctypes.c_void_p]
    version.GetFileVersionInfoW.restype = ctypes.c_int32
    version.GetFileVersionInfoW.argtypes = [ctypes.c_wchar_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p]
    version.VerQueryValueW.restype = ctypes.c_int32
    version.VerQueryValueW.argtypes = [ctypes.c_void_p, ctypes.c_wchar_p, ctypes.c_void_p,
                                       ctypes.POINTER(ctypes.c_uint32)]
    size = version.GetFileVersionInfoSizeW(path, None)
    if not size:
        return None
    data = ctypes.create_string_buffer(size)
    if not version.GetFileVersionInfoW(path, 0, size, data):
        return None
    fixed, length = ctypes.c_void_p(), ctypes.c_uint32()
    if not version.VerQueryValueW(data, "\\", ctypes.byref(fixed), ctypes.byref(length)) or length.value < 52:
        return None
    words = (ctypes.c_uint32 * 13).from_address(fixed.value or 0)  # VS_FIXEDFILEINFO: its version at words 2 and 3
    if words[0] != 0xFEEF04BD:
        return None
    return f"{words[2] >> 16}.{words[2] & 0xFFFF}.{words[3] >> 16}.{words[3] & 0xFFFF}"


def _onnxruntime_capi() -> Path | None:
    """onnxruntime-directml's DirectML.dll, where its package is installed (not imported)."""
    try:
        spec = importlib.util.find_spec("onnxruntime")
    except (ImportError, ValueError):
        return None
    folders: Any = spec.submodule_search_locations if spec is not None else None
    for folder in folders or ():
        path = Path(folder) / "capi" / NAME
        if path.is_file():
            return path
    return None


def _same_file(path: str, other: str) -> bool:
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False
