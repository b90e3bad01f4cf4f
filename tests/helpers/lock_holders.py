"""Another process holding a file as a live conversion does: its lock (``flock`` on POSIX, ``LockFileEx`` on
Windows, where the open handle alone also keeps the file from being removed), taken through
:func:`dmlbridge.system.locks.try_lock`. The holder never removes the file: let go, it leaves it as a killed
conversion leaves its lock.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

__all__ = ["HOLD", "hold", "release"]

HOLD = textwrap.dedent("""
    import os, sys, time
    from dmlbridge.system.locks import try_lock
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o600)
    assert try_lock(fd)
    if len(sys.argv) > 2:
        os.write(fd, sys.argv[2].encode())
    print("held", flush=True)
    sys.stdin.readline()
""")


def hold(path: Path, text: str = "") -> subprocess.Popen[str]:
    """A child process that holds ``path`` (created when missing, ``text`` written into it) until
    :func:`release`."""
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(path), *([text] if text else [])],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "held\n"
    return child


def release(child: subprocess.Popen[str]) -> None:
    """Let the holder go and wait for it to end (the file stays)."""
    assert child.stdin is not None
    child.stdin.write("\n")
    child.stdin.close()
    child.wait(30)
    if child.stdout is not None:
        child.stdout.close()
