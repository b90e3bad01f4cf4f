"""The child side of the SIGKILL trials (tests/whole/test_kill.py): a conversion that reports each step it takes.

:func:`convert_in_steps` runs in a process forked from a fork server that imported it (and with it dmlbridge), so a
trial starts in milliseconds. Before and after each step of the conversion (each constant written, each
fingerprint, the manifest's write, every fsync, the rename, every removal) it sends a marker to the test; in step
mode it then waits for the test's "go", so that the test can kill it at exactly that step. A failure of its own is
sent as a marker starting with "error", with its traceback.
"""

from __future__ import annotations

import os
import threading
import traceback
from multiprocessing.connection import Connection
from typing import Any

import dmlbridge.writing.convert as convert
import dmlbridge.writing.image as image_writer
import dmlbridge.writing.publish as commit


def convert_in_steps(conn: Connection, model: str, prefix: str, mode: str, limit: int,
                     previous_buffers: frozenset[str]) -> None:
    """Convert ``model`` into ``prefix`` (buffers of at most ``limit`` bytes), marking every step. ``mode``:
    "step" (wait for "go" after each marker) or "free". ``previous_buffers``: the names of the previous
    conversion's buffer files, whose removal is a step of the protocol."""
    step = mode == "step"
    marking = threading.Lock()  # one marker and its "go" at a time (the clean-up thread marks too)

    def mark(name: str) -> None:
        with marking:
            conn.send(name)
            if step and conn.recv() != "go":
                os._exit(9)

    def hook(module: Any, name: str, label: Any) -> None:
        real = getattr(module, name)

        def hooked(*args: Any, **kwargs: Any) -> Any:
            mark(label(*args))
            result = real(*args, **kwargs)
            mark("after " + label(*args))
            return result

        setattr(module, name, hooked)

    base = os.path.basename
    try:
        # Constants the byte scan read go by runs to _place_spans; every other one is offered to _write_stored.
        hook(image_writer, "_place_spans", lambda writer, offsets, first, stop, *rest: f"spans {stop - first}")
        hook(image_writer, "_write_stored", lambda writer, constant, *rest: "entry " + constant.key)
        hook(convert, "bin_fingerprint", lambda fd, *rest: "fingerprint")
        hook(commit, "write_all", lambda fd, data: "write manifest")
        hook(os, "fsync", lambda fd: "fsync")
        hook(os, "replace", lambda src, dst, **kw: "replace " + base(dst))
        # Any other removed file is a leftover of an earlier (killed) run: "stale", as how many there are depends
        # on the earlier kills.
        hook(os, "unlink", lambda path, **kw: "remove " + base(path) if base(path) in previous_buffers
             else "unlink stale")
        mark("start")
        convert.convert_model(model, prefix, progress=False, max_buffer_bytes=limit)
        mark("done")
    except BaseException:
        conn.send("error in the child: " + traceback.format_exc())
        raise
