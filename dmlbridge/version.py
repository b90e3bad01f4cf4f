"""The installed package's version, for the manifest and ``--version`` (one place, imported by everything else).

    >>> from dmlbridge.version import __version__
    >>> isinstance(__version__, str)
    True
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("dmlbridge")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
