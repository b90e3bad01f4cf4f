"""The ``dmlbridge`` command line for the tests, in this process or in a child process.

:func:`run` calls ``dmlbridge.cli.commands.main`` here, with its output captured: what the command prints and the
status it exits with, without a Python interpreter's start for every run. :func:`run_process` runs
``python -m dmlbridge`` in a child process, for what only a process shows: the exit status Python itself
reports, signals, the terminal's encoding, what happens while the package is imported.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dmlbridge.cli import commands


@dataclass(frozen=True)
class Ran:
    """What a run of the command line did: its exit status and everything it printed."""

    returncode: int
    stdout: str
    stderr: str


def run(*args: str | Path, cwd: Path | None = None) -> Ran:
    """``dmlbridge ARGS`` in this process (in the folder ``cwd``, when given): the status ``main`` returns, or the
    one argparse exits with (usage errors, ``--help``, ``--version``), and its stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = commands.main([str(a) for a in args])
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    finally:
        os.chdir(here)
    return Ran(status, out.getvalue(), err.getvalue())


def run_process(*args: str | Path, cwd: Path | None = None,
                env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m dmlbridge ARGS`` in a child process (with ``env`` as its environment, when given)."""
    return subprocess.run([sys.executable, "-m", "dmlbridge", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd, env=None if env is None else dict(env))


def one_line_error(result: Ran | subprocess.CompletedProcess[str], *words: str) -> str:
    """A user error: exit status 2, one line on stderr holding each of ``words``, no traceback; returns the line."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]
