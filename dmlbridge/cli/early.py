"""What the command answers before it imports the library: ``--version`` (numpy, onnx and protobuf take a second
to import, and the version needs none of them).

    >>> VERSION_LINE.startswith("dmlbridge ")
    True
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from dmlbridge.version import __version__

__all__ = ["VERSION_LINE", "answered_early"]

VERSION_LINE = f"dmlbridge {__version__}"
"""What ``dmlbridge --version`` prints (the parser's --version too)."""


def answered_early(argv: Sequence[str]) -> bool:
    """Print the version line and return True when ``argv`` (the arguments after the program's name) asks for it
    first: argparse prints the same line and exits at a leading ``--version``, whatever follows (a ``--version``
    later on is left to it). False for every other command line: the entry point imports the library then.

    Example:
        >>> answered_early(["convert", "m.onnx"])
        False
    """
    if list(argv[:1]) != ["--version"]:
        return False
    print(VERSION_LINE)
    sys.stdout.flush()
    return True
