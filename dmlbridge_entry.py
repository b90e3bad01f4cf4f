"""The ``dmlbridge`` command's entry point: Ctrl-C is answered from its first instruction on.

Importing the package (numpy, onnx, protobuf) takes a noticeable moment, and a Ctrl-C during it would print
Python's traceback. This module installs a handler before it imports anything (``_signal``, ``os`` and ``sys``
are loaded before any program starts): until the command line takes over (``dmlbridge.cli.commands.main``, which answers
Ctrl-C itself and removes what it was writing), an interrupt prints one line and exits with 130. No file exists
yet at that point, so leaving at once is safe.
"""

import _signal
import os
import sys


def _interrupted(signum: int, frame: object) -> None:
    try:
        os.write(2, b"dmlbridge: interrupted\n")
    finally:
        os._exit(130)


_signal.signal(_signal.SIGINT, _interrupted)

__all__ = ["main"]


def main() -> None:
    """Import the package and run the command line (the handler above stays until it takes over).

    Once the command has returned, a Ctrl-C is too late to stop anything: it is ignored while Python exits with
    the command's status. One that lands between the return and that line is answered like any other."""
    from dmlbridge.cli.early import answered_early  # (the version: no numpy, no onnx)

    if answered_early(sys.argv[1:]):
        sys.exit(0)
    from dmlbridge.cli.commands import main as run  # the heavy imports, under the handler

    try:
        status = run()
        _signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # finalization would print a KeyboardInterrupt traceback
    except KeyboardInterrupt:
        _interrupted(_signal.SIGINT, None)
    sys.exit(status)
