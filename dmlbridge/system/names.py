"""Plain file names: those every system takes as one file beside the manifest, the only names a manifest lists
and a conversion gives its files (one made on Linux is read on Windows).

A plain name is one component (no ``/``, ``\\`` or ``:``, which is a drive or an NTFS stream: ``model.onnx:x``
would write into the model's file), no NUL, at most 255 bytes of UTF-8, not beginning with a dot (a hidden file;
``.`` and ``..`` name folders, and a prefix's temporary and retired files are the ones that begin with a dot), and
no Windows device name: ``CON``, ``PRN``, ``AUX``, ``NUL``, ``CONIN$``, ``CONOUT$``, ``COM0`` to ``COM9`` and
``LPT0`` to ``LPT9`` (also with a superscript 1, 2 or 3), in any letter case, which Windows takes for the device
whatever extension follows (``LPT1.json``) and with trailing spaces before it (``CON .json``).

    >>> name_problem("model.0123456789abcdef.00000.bin") is None
    True
    >>> name_problem("lpt1.json"), name_problem(".w.json")
    ('is LPT1, a Windows device name, whatever follows its first dot', 'begins with a dot')
"""

from __future__ import annotations

__all__ = ["MAX_NAME_BYTES", "device_name", "name_problem"]

MAX_NAME_BYTES = 255
"""The longest file name (in bytes of UTF-8) the file systems take."""

_DEVICES = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"}
    | {f"{port}{n}" for port in ("COM", "LPT") for n in "0123456789\u00b9\u00b2\u00b3"}
)


def device_name(name: str) -> str | None:
    """The Windows device ``name`` is taken for (upper case), or None: its part before the first dot, trailing
    spaces and dots left out, in any letter case.

    Example:
        >>> device_name("Con .json"), device_name("console.json"), device_name("w.nul")
        ('CON', None, None)
    """
    stem = name.partition(".")[0].rstrip(" .").upper()
    return stem if stem in _DEVICES else None


def name_problem(name: str) -> str | None:
    """What keeps ``name`` from being a plain file name on every system (see the module docstring), as a phrase
    ("begins with a dot"), or None when it is one.

    Example:
        >>> name_problem("w:x.json"), name_problem("w.json")
        ("holds ':'", None)
    """
    for character in ("/", "\\", ":", "\x00"):
        if character in name:
            return f"holds {character!r}"
    if name.startswith("."):
        return "begins with a dot"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    device = device_name(name)
    if device is not None:
        return f"is {device}, a Windows device name, whatever follows its first dot"
    return None
