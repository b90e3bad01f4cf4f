"""The output side against an attacker, a crash and a second writer: symlinks planted at output names, files
used by name after they were created, short writes, a second conversion into the same prefix, a plan read while
another conversion replaces its files, live temporary files of another process, a failed rename over a symlink.

Each test reproduces one way the earlier commit protocol (PREFIX.bin and PREFIX.json renamed one after the other,
temporary files reopened and chmod'ed by name) broke, and shows that it cannot happen now.
"""

from __future__ import annotations

import builtins
import errno
import json
import os
import re
import shutil
import stat
import sys
import threading
import time
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import model_of
from command_line import run
from lock_holders import hold, release
from models import output_names, retired_names
from onnx import numpy_helper

import dmlbridge
from dmlbridge import DestinationError, convert_model, load_plan
from dmlbridge.system.locks import try_lock

LINUX = sys.platform.startswith("linux")
WINDOWS = sys.platform == "win32"
needs_symlinks = pytest.mark.skipif(WINDOWS, reason="symbolic links: Windows makes them only with a privilege "
                                    "(and Wine not at all)")
needs_fifos = pytest.mark.skipif(WINDOWS, reason="FIFOs (named pipes in the file system) are POSIX")


def _model(value: float = 1.0, count: int = 3) -> Any:
    w = numpy_helper.from_array(np.full(count, value, np.float32), "w")
    return model_of([w])


def _umask_mode() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@needs_symlinks
def test_a_symlink_at_an_output_name_is_replaced_not_followed(tmp_path: Path) -> None:
    """A setuid file behind a symlink planted as PREFIX.json keeps its bytes and mode; the new manifest is an
    ordinary file with the umask's mode (the old protocol copied the mode through the symlink, setuid bit and
    all, onto a file made of the model's bytes)."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"#!/bin/sh\n")
    os.chmod(victim, 0o4755)
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / "w.json")
    plan = convert_model(_model(), out / "w", progress=False)
    assert victim.read_bytes() == b"#!/bin/sh\n" and stat.S_IMODE(victim.stat().st_mode) == 0o4755
    for path in (out / "w.json", Path(plan.bin_path or "")):
        info = path.lstat()
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == _umask_mode()
    # A symlink planted as the lock is never followed: the conversion is refused, the target untouched.
    os.symlink(victim, out / "x.lock")
    with pytest.raises(DestinationError, match="lock"):
        convert_model(_model(), out / "x", progress=False)
    assert victim.read_bytes() == b"#!/bin/sh\n" and stat.S_IMODE(victim.stat().st_mode) == 0o4755


def test_new_files_are_used_through_their_descriptors_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file a conversion creates is opened once, exclusively and without following a symlink; its name is
    never opened, stat'ed or chmod'ed again (a symlink swapped in between could not be followed: there is no
    second use of the name to follow it)."""
    convert_model(_model(), tmp_path / "w", progress=False)  # previous outputs, to be replaced
    calls: list[tuple[str, str, int]] = []
    real_open, real_chmod, real_stat, real_lstat = os.open, os.chmod, os.stat, os.lstat

    def ours(path: Any) -> bool:
        return "w." in os.path.basename(os.fsdecode(path)) or ".w." in os.path.basename(os.fsdecode(path))

    def open_spy(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if ours(path):
            calls.append(("open", os.path.basename(os.fsdecode(path)), flags))
        return real_open(path, flags, *args, **kwargs)

    def chmod_spy(path: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(path, int) and ours(path):
            calls.append(("chmod", os.path.basename(os.fsdecode(path)), 0))
        real_chmod(path, *args, **kwargs)

    def stat_spy(path: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(path, int) and ours(path):
            calls.append(("stat", os.path.basename(os.fsdecode(path)), 0))
        return real_stat(path, *args, **kwargs)

    def lstat_spy(path: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(path, int) and ours(path):
            calls.append(("lstat", os.path.basename(os.fsdecode(path)), 0))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_spy)
    monkeypatch.setattr(os, "chmod", chmod_spy)
    monkeypatch.setattr(os, "stat", stat_spy)
    monkeypatch.setattr(os, "lstat", lstat_spy)
    real_builtin_open = builtins.open

    def builtin_open_spy(file: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(file, int) and ours(file):
            pytest.fail(f"open() by name: {file}")
        return real_builtin_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", builtin_open_spy)
    plan = convert_model(_model(2.0), tmp_path / "w", progress=False, checksum=True)
    monkeypatch.undo()
    created = [name for kind, name, flags in calls if kind == "open" and flags & os.O_CREAT and flags & os.O_EXCL]
    assert sorted(created) == sorted([os.path.basename(plan.bin_path or ""), f".w.json.{plan.conversion_id}"
                                      ".dmlbridge-tmp", "w.lock"])  # (the previous conversion removed its lock)
    # (The manifest's and the lock's names are lstat'ed, never followed: what is there before the conversion, which
    # did not create it, must be a regular file.)
    # (Windows has no O_NOFOLLOW: a new file is created exclusively, which no symlink at its name survives, the lock
    # is opened after its lstat and checked to be the same file by its descriptor, and the previous conversion's
    # files are lstat'ed before they are removed.)
    # (Before anything is created, the previous conversion's files are lstat'ed, never followed, to know them from
    # the model's own files.)
    # (Once locked, the lock's name is lstat'ed again, to check that it is still the file locked: never followed,
    # never opened again.)
    followed = getattr(os, "O_NOFOLLOW", 0) or (os.O_EXCL if WINDOWS else 0)
    for kind, name, flags in calls:
        assert (kind == "open" and (flags & followed or (WINDOWS and name == "w.lock"))) or (kind, name) in {
            ("lstat", "w.lock"), ("lstat", "w.json")} or (kind == "lstat" and name not in created), (
            kind, name)
        assert name not in created or (kind == "open" and flags & os.O_EXCL) or (kind, name) == ("lstat", "w.lock"), (
            f"{name} used again by name")
    assert load_plan(tmp_path / "w.json", verify=True).array("w").tolist() == [2.0, 2.0, 2.0]


def test_short_writes_are_completed_and_a_write_of_nothing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """One write() may take fewer bytes than asked (Linux caps it at 0x7ffff000, a filling disk at what is
    left): the rest is written. A write that takes nothing is a full disk: the conversion fails and the previous
    outputs stay."""
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, memoryview(data)[:7]))
    convert_model(_model(3.0, 2000), tmp_path / "w", progress=False)
    monkeypatch.undo()
    assert load_plan(tmp_path / "w.json").array("w").tolist() == [3.0] * 2000
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    monkeypatch.setattr(os, "write", lambda fd, data: 0)
    with pytest.raises(DestinationError, match="w"):
        convert_model(_model(4.0, 2000), tmp_path / "w", progress=False)
    monkeypatch.undo()
    assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before  # (no lock left)


def test_a_second_writer_fails_fast_naming_the_lock_and_itsholder(tmp_path: Path) -> None:
    convert_model(_model(), tmp_path / "w", progress=False)
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path) if name != "w.lock"}
    holder = hold(tmp_path / "w.lock", "pid 4242 on other-host\n")
    try:
        started = time.perf_counter()
        with pytest.raises(DestinationError, match=r"w\.lock.*pid 4242 on other-host"):
            convert_model(_model(5.0), tmp_path / "w", progress=False)
        assert time.perf_counter() - started < 5
    finally:
        release(holder)
    assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path) if name != "w.lock"} == before
    convert_model(_model(5.0), tmp_path / "w", progress=False)  # the lock is free again
    assert load_plan(tmp_path / "w.json").array("w").tolist() == [5.0, 5.0, 5.0]
    assert not (tmp_path / "w.lock").exists()  # (the holder's, left as it let go, taken and removed)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not LINUX, reason="FIFOs, and counts the descriptors in Linux's /proc/self/fd")
def test_only_a_lock_file_of_its_own_is_locked_and_nothing_else_is_touched(tmp_path: Path) -> None:
    """PREFIX.lock is opened like every other output. A FIFO there (with and without a process holding a flock on
    it), a hard link to another file, a file of other content, a folder or a symlink is refused with a
    DestinationError that names the lock and says what to do; nothing is written into it or through it (the
    earlier code wrote its holder's name into a hard-linked file, and answered a held FIFO with "Illegal seek"),
    and 50 refusals of each, and 50 of a second writer, leave no descriptor open. Once the thing is removed, the
    conversion makes a lock of its own."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    os.mkfifo(tmp_path / "fifo.lock")
    os.mkfifo(tmp_path / "held.lock")
    os.link(victim, tmp_path / "linked.lock")
    (tmp_path / "notes.lock").write_bytes(b"my notes\n")
    (tmp_path / "folder.lock").mkdir()
    os.symlink(victim, tmp_path / "symlink.lock")
    # (A FIFO, a folder or a symlink is refused by convert_model's check of its outputs' names, before anything is
    # opened; a hard link or a file of other content by the lock itself, once opened without following.)
    why = {"fifo": "is a FIFO", "held": "is a FIFO", "linked": "is a file with 2 names",
           "notes": "holds something else", "folder": "is a directory", "symlink": "is a symlink"}
    convert_model(_model(), tmp_path / "w", progress=False)
    names = sorted(os.listdir(tmp_path))
    held = os.open(tmp_path / "held.lock", os.O_RDWR | os.O_NONBLOCK)
    assert try_lock(held)
    second = hold(tmp_path / "w.lock", "pid 4242 on other-host\n")
    try:
        before = _open_descriptors()
        for name, reason in why.items():
            for _ in range(50):
                with pytest.raises(DestinationError) as caught:
                    convert_model(_model(2.0), tmp_path / name, progress=False)
            message = str(caught.value)
            assert repr(str(tmp_path / f"{name}.lock")) in message and reason in message, message
            assert "move it away" in message or "remove it" in message, message
        for _ in range(50):
            with pytest.raises(DestinationError, match="pid 4242 on other-host"):
                convert_model(_model(2.0), tmp_path / "w", progress=False)
        assert _open_descriptors() == before
    finally:
        os.close(held)
        release(second)
    for name in why:  # none removed by clean either, which refuses them as a conversion does
        with pytest.raises(DestinationError, match="lock"):
            dmlbridge.clean(tmp_path / name)
    assert victim.read_bytes() == b"precious\n" and (tmp_path / "notes.lock").read_bytes() == b"my notes\n"
    assert sorted(os.listdir(tmp_path)) == sorted([*names, "w.lock"])  # (the stand-in holder leaves its lock)
    (tmp_path / "linked.lock").unlink()
    convert_model(_model(3.0), tmp_path / "linked", progress=False)
    assert not (tmp_path / "linked.lock").exists() and victim.read_bytes() == b"precious\n"
    assert load_plan(tmp_path / "linked.json").array("w").tolist() == [3.0, 3.0, 3.0]


def test_a_plan_keeps_reading_the_files_it_checked(tmp_path: Path) -> None:
    """Another conversion replaces the files (and removes the old buffer) while a plan is loaded: the plan still
    returns its own conversion's bytes, never the other's; a newly loaded plan reads the new ones. The same
    holds for a buffer swapped for a FIFO after loading, which would block a read by name."""
    convert_model(_model(1.0), tmp_path / "w", progress=False)
    old = load_plan(tmp_path / "w.json")
    written = convert_model(_model(1.0), tmp_path / "w", progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (nothing is left to warn of: the removal of a file open in a plan succeeds)
        convert_model(_model(7.0), tmp_path / "w", progress=False)
    # Removed once the new manifest was in place; on Windows, its removal is pending while the plan holds it.
    if not WINDOWS:
        assert not Path(old.bin_path or "").exists()
    assert old.array("w").tolist() == written.array("w").tolist() == [1.0, 1.0, 1.0]
    new = load_plan(tmp_path / "w.json")
    assert new.array("w").tolist() == [7.0, 7.0, 7.0]
    old.close()
    written.close()
    assert not Path(old.bin_path or "").exists()  # and once no plan holds it, it is gone, on every system
    assert sorted(name for name in os.listdir(tmp_path) if name.endswith(".bin")) == [Path(new.bin_path or "").name]
    path = Path(new.bin_path or "")
    path.unlink()
    if not WINDOWS:  # (a FIFO in its place is POSIX; on Windows the name stays until the plan closes the file)
        os.mkfifo(path)
    assert new.array("w").tolist() == [7.0, 7.0, 7.0]
    with new:
        pass
    with pytest.raises(dmlbridge.InvalidArgumentError, match="closed"):
        new.read("w")


def _layers(value: float) -> Any:
    """Three constants of 1 KiB: three buffer files with max_buffer_bytes=1024."""
    ws = [numpy_helper.from_array(np.full(256, value, np.float32), f"w{i}") for i in range(3)]
    return model_of(ws)


def _values(plan: dmlbridge.UploadPlan) -> set[float]:
    return {float(v) for key in plan.entries for v in plan.array(key)}


@pytest.mark.parametrize("when", ["after the manifest is read", "after the first buffer file is opened"])
def test_a_plan_loaded_while_another_conversion_publishes_is_one_whole_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """load_plan reads the manifest, then opens the buffer files it lists; a conversion into the prefix that
    publishes in between removes those files (the hook runs a whole conversion between the reader's two steps,
    or between its opening of two buffer files: no timing). The reader reads the new manifest and gets the new
    conversion, whole, never an error (before, "cannot open the buffer file ... No such file"); the descriptor it
    had opened is closed."""
    import dmlbridge.plan.open_buffers as buffer_files
    import dmlbridge.plan.upload_plan as plan_module

    convert_model(_layers(1.0), tmp_path / "w", progress=False, max_buffer_bytes=1024)
    reads: list[bytes] = []
    real_read, real_open = plan_module.read_manifest_file, buffer_files.open_regular
    opened: list[str] = []

    def reading(path: str, limit: int) -> bytes:
        data = real_read(path, limit)
        reads.append(data)
        if len(reads) == 1 and when == "after the manifest is read":
            convert_model(_layers(2.0), tmp_path / "w", progress=False, max_buffer_bytes=1024)
        return data

    def opening(name: str, **kwargs: Any) -> tuple[int, int]:
        opened.append(name)
        if len(opened) == 2 and when == "after the first buffer file is opened":
            convert_model(_layers(2.0), tmp_path / "w", progress=False, max_buffer_bytes=1024)
        return real_open(name, **kwargs)

    monkeypatch.setattr(plan_module, "read_manifest_file", reading)
    monkeypatch.setattr(buffer_files, "open_regular", opening)
    before = _open_descriptors() if LINUX else 0  # (the descriptors are counted in Linux's /proc/self/fd)
    with load_plan(tmp_path / "w.json") as plan:
        assert _values(plan) == {2.0} and len(plan.buffers) == 3 and len(reads) == 2
        assert plan.conversion_id == json.loads((tmp_path / "w.json").read_text())["conversion_id"]
    assert (_open_descriptors() if LINUX else 0) == before


def test_a_missing_buffer_file_is_a_clear_error_after_bounded_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A buffer file that is missing while the manifest stays the same is truly missing: ManifestError, once the
    manifest was read again and found unchanged. A writer that publishes between every read of the manifest and
    the opening of its buffer files is outlasted a few times, then named."""
    import dmlbridge.plan.upload_plan as plan_module

    written = convert_model(_layers(1.0), tmp_path / "w", progress=False, max_buffer_bytes=1024)
    written.close()  # (on Windows, a file a plan holds open stays until the plan closes it)
    Path(written.buffers[1].path).unlink()
    reads: list[int] = []
    real_read = plan_module.read_manifest_file
    publish = False

    def reading(path: str, limit: int) -> bytes:
        data = real_read(path, limit)
        reads.append(len(data))
        if publish:
            convert_model(_layers(float(len(reads))), tmp_path / "w", progress=False, max_buffer_bytes=1024)
        return data

    monkeypatch.setattr(plan_module, "read_manifest_file", reading)
    missing = "(No such file|File not found)"  # (POSIX's words, Windows')
    with pytest.raises(dmlbridge.ManifestError, match=rf"cannot open the buffer file .*{missing}.*convert the "
                       "model again"):
        load_plan(tmp_path / "w.json")
    assert len(reads) == 2
    reads.clear()
    publish = True
    with pytest.raises(dmlbridge.ManifestError, match=r"was replaced 5 times while its buffer files were being "
                       r"opened .*load the plan again once it is done"):
        load_plan(tmp_path / "w.json")
    assert len(reads) == 5
    publish = False
    assert _values(load_plan(tmp_path / "w.json")) == {5.0}


def test_plans_across_pickle(tmp_path: Path) -> None:
    """A pickled plan opens its buffer files again on the first read, and refuses them if they changed."""
    import pickle

    plan = convert_model(_model(3.0), tmp_path / "w", progress=False)
    copy = pickle.loads(pickle.dumps(plan))
    assert copy.array("w").tolist() == [3.0, 3.0, 3.0]
    stale = pickle.loads(pickle.dumps(plan))
    Path(plan.bin_path or "").write_bytes(b"\0" * os.path.getsize(plan.bin_path or ""))
    with pytest.raises(dmlbridge.ManifestError, match="no longer the file"):
        stale.array("w")


def test_abandoned_files_are_removed_only_when_no_live_writer_holds_them(tmp_path: Path) -> None:
    """Another process (in any pid namespace: only the flock counts) holding a temporary manifest or a buffer
    file of its own keeps it; once it is gone, the next conversion removes them, and only files of this prefix
    (not those of the prefix "w.x", whose names begin with "w." too)."""
    convert_model(_model(), tmp_path / "w", progress=False)
    live_temp = tmp_path / ".w.json.0123456789abcdef.dmlbridge-tmp"
    live_buffer = tmp_path / "w.0123456789abcdef.00000.bin"
    dead_temp = tmp_path / ".w.json.fedcba9876543210.dmlbridge-tmp"
    dead_buffer = tmp_path / "w.fedcba9876543210.00000.bin"
    others = [tmp_path / "x.0123456789abcdef.00000.bin", tmp_path / "w.notes", tmp_path / "w.0123.00000.bin",
              tmp_path / "w.x.fedcba9876543210.00000.bin", tmp_path / ".w.x.json.fedcba9876543210.dmlbridge-tmp",
              tmp_path / ".w.x.fedcba9876543210.00000.bin.dmlbridge-old"]
    for path in (dead_temp, dead_buffer, *others):
        path.write_bytes(b"x")
    holders = [hold(live_temp), hold(live_buffer)]
    try:
        with pytest.warns(dmlbridge.CleanupWarning, match="2 files it replaces could not be removed"):  # (named)
            convert_model(_model(), tmp_path / "w", progress=False)
        assert live_temp.exists() and live_buffer.exists()
        assert not dead_temp.exists() and not dead_buffer.exists()
        assert all(path.exists() for path in others)
    finally:
        for holder in holders:
            release(holder)
    convert_model(_model(), tmp_path / "w", progress=False)
    assert not live_temp.exists() and not live_buffer.exists() and all(path.exists() for path in others)
    assert output_names(tmp_path) == sorted(["w.ID.00000.bin", "w.json", "x.ID.00000.bin", "w.notes",
                                             "w.0123.00000.bin", "w.x.ID.00000.bin", ".w.x.json.ID.dmlbridge-tmp"])
    assert retired_names(tmp_path) == ["w.x.fedcba9876543210.00000.bin"]  # (the other prefix's)


def _events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """Record each os.replace onto a manifest and each os.unlink: (what, the file's name, the thread)."""
    seen: list[tuple[str, str, str]] = []
    real_unlink, real_replace = os.unlink, os.replace

    def unlink(path: Any, **kwargs: Any) -> None:
        seen.append(("unlink", os.path.basename(path), threading.current_thread().name))
        real_unlink(path, **kwargs)

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        seen.append(("replace", os.path.basename(dst), threading.current_thread().name))
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    monkeypatch.setattr(os, "replace", replace)
    return seen


def test_a_reconversion_removes_the_previous_buffers_before_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the new manifest is in place, the previous conversion's buffer files (all three) are removed by the
    call itself, before it returns: no hidden copy of the previous conversion stays on the disk (earlier versions
    renamed them to hidden .dmlbridge-old names and removed them one conversion later), and retired files an
    earlier version left go too. A plan loaded before keeps reading its open files."""
    first = convert_model(_layers(1.0), tmp_path / "w", progress=False, max_buffer_bytes=1024)
    first_names = [os.path.basename(b.path) for b in first.buffers]
    legacy = tmp_path / ".w.0123456789abcdef.00000.bin.dmlbridge-old"  # (as an earlier version left it)
    legacy.write_bytes(b"x" * 1024)
    events = _events(monkeypatch)
    second = convert_model(_layers(2.0), tmp_path / "w", progress=False, max_buffer_bytes=1024)
    monkeypatch.undo()
    assert events == [("replace", "w.json", "MainThread"),
                      *sorted(("unlink", name, "MainThread") for name in [*first_names, legacy.name]),
                      ("unlink", "w.lock", "MainThread")]  # (the lock last, as the conversion ends)
    assert _values(first) == {1.0} and _values(load_plan(tmp_path / "w.json")) == {2.0}
    if WINDOWS:  # (there, a file a plan holds open is removed when the plan closes it)
        first.close()
    assert sorted(os.listdir(tmp_path)) == sorted(["w.json", *(os.path.basename(b.path) for b in second.buffers)])


def test_an_interrupt_while_the_previous_buffers_are_removed_is_held_back_until_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C that lands while the published conversion removes the previous one's buffer files is raised once
    they are all gone: an interrupted run leaves no previous buffer behind."""
    import signal

    first = convert_model(_layers(1.0), tmp_path / "w", progress=False, max_buffer_bytes=1024)
    real_unlink = os.unlink

    def unlink_then_interrupt(path: Any, **kwargs: Any) -> None:
        real_unlink(path, **kwargs)
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(os, "unlink", unlink_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        convert_model(_layers(2.0), tmp_path / "w", progress=False, max_buffer_bytes=1024)
    monkeypatch.undo()
    if WINDOWS:  # (there, a file a plan holds open is removed when the plan closes it)
        first.close()
    assert not any(Path(b.path).exists() for b in first.buffers)
    assert output_names(tmp_path) == ["w.ID.00000.bin", "w.ID.00001.bin", "w.ID.00002.bin", "w.json"]
    assert _values(load_plan(tmp_path / "w.json")) == {2.0}


def test_retired_files_are_removed_first_when_the_disk_is_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the filesystem has no room for another copy of the previous conversion, the retired files an earlier
    version left are removed before anything is written (their blocks may be needed), by the calling thread."""
    first = convert_model(_model(1.0), tmp_path / "w", progress=False)
    retired = tmp_path / f".w.{'0' * 16}.00000.bin.dmlbridge-old"
    retired.write_bytes(Path(first.bin_path or "").read_bytes())
    if hasattr(os, "statvfs"):
        monkeypatch.setattr(os, "statvfs", lambda path: os.statvfs_result((4096,) * 2 + (0,) * 8))
    else:  # Windows
        monkeypatch.setattr(shutil, "disk_usage", lambda path: types.SimpleNamespace(total=0, used=0, free=0))
    events = _events(monkeypatch)
    created: list[int] = []
    monkeypatch.setattr(dmlbridge.writing.publish.Publication, "new_buffer", _recording(
        dmlbridge.writing.publish.Publication.new_buffer, lambda: created.append(len(events))))
    convert_model(_model(3.0), tmp_path / "w", progress=False)
    assert events[0] == ("unlink", retired.name, "MainThread") and created == [1]
    assert not retired.exists() and retired_names(tmp_path) == []


def _recording(method: Any, before: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before()
        return method(*args, **kwargs)
    return wrapper


def test_a_previous_buffer_that_cannot_be_removed_is_a_warning_and_clean_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A previous buffer file whose removal fails (an injected EIO) does not fail the conversion, which is
    published, and is not silent either: a CleanupWarning names the file and `dmlbridge clean`, which then
    removes it."""
    first = convert_model(_model(1.0, 1000), tmp_path / "w", progress=False)
    old = Path(first.bin_path or "")
    real_unlink = os.unlink

    def failing(path: Any, **kwargs: Any) -> None:
        if os.path.basename(path) == old.name:
            raise OSError(errno.EIO, "Input/output error")
        real_unlink(path, **kwargs)

    monkeypatch.setattr(os, "unlink", failing)
    where, prefix = re.escape(repr(str(old))), re.escape(str(tmp_path / "w"))
    with pytest.warns(dmlbridge.CleanupWarning, match=rf"published, but 1 file it replaces could not be removed "
                      rf"\({where}: Input/output error\).*`dmlbridge clean {prefix}`"):
        second = convert_model(_model(2.0, 1000), tmp_path / "w", progress=False)
    monkeypatch.undo()
    assert old.exists() and load_plan(tmp_path / "w.json").array("w").tolist() == [2.0] * 1000
    report = dmlbridge.clean(tmp_path / "w")
    assert report == dmlbridge.CleanReport((str(old),), 4000, (), ())
    first.close()  # (on Windows, the removal of a file a plan holds open is done when the plan closes it)
    assert sorted(os.listdir(tmp_path)) == sorted(["w.json", os.path.basename(second.bin_path or "")])


def test_a_previous_buffer_another_program_holds_is_a_warning_saying_why(tmp_path: Path) -> None:
    """A previous buffer file that another process holds stays, and is named: on Windows one that has it open
    without FILE_SHARE_DELETE (Python's own open() does so, and so did dmlupload: a reader), on POSIX a live
    writer's flock. The re-conversion is published and warns, naming the file, why it stays and `dmlbridge clean`
    (it stayed unseen); `dmlbridge clean` keeps it saying the same, and removes it once it is let go."""
    first = convert_model(_model(1.0, 1000), tmp_path / "w", progress=False)
    first.close()
    old = Path(first.bin_path or "")
    why = "another program has the file open" if WINDOWS else "a live writer holds it"
    holder = hold(old)  # (a child process: os.open, no FILE_SHARE_DELETE on Windows, and a lock)
    try:
        where, prefix = re.escape(repr(str(old))), re.escape(str(tmp_path / "w"))
        with pytest.warns(dmlbridge.CleanupWarning, match=rf"published, but 1 file it replaces could not be removed "
                          rf"\({where}: {why}\).*`dmlbridge clean {prefix}`"):
            convert_model(_model(2.0, 1000), tmp_path / "w", progress=False).close()
        assert old.exists() and load_plan(tmp_path / "w.json").array("w").tolist() == [2.0] * 1000
        ran = run("clean", tmp_path / "w")
        assert ran.returncode == 0 and f"kept {old}: {why}" in ran.stderr, ran
        assert dmlbridge.clean(tmp_path / "w") == dmlbridge.CleanReport((), 0, (str(old),), ())
    finally:
        release(holder)
    assert dmlbridge.clean(tmp_path / "w") == dmlbridge.CleanReport((str(old),), 4000, (), ())


def test_clean_removes_what_conversions_left_and_nothing_else(tmp_path: Path) -> None:
    """dmlbridge.clean removes a killed conversion's buffer files (no manifest lists them), abandoned temporary
    manifests and retired files; never the current conversion's files, another prefix's, a symlink, or a file a
    live writer holds (reported as held, removed once it is let go); it reports what it removed and the bytes
    freed, and with nothing to remove creates nothing."""
    plan = convert_model(_model(1.0), tmp_path / "w", progress=False)
    dead = {tmp_path / "w.fedcba9876543210.00000.bin": 1000, tmp_path / "w.fedcba9876543210.00001.bin": 24,
            tmp_path / ".w.json.fedcba9876543210.dmlbridge-tmp": 7,
            tmp_path / ".w.0123456789abcdef.00000.bin.dmlbridge-old": 300}
    for path, size in dead.items():
        path.write_bytes(b"x" * size)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    if not WINDOWS:  # (symbolic links: Windows makes them only with a privilege)
        os.symlink(victim, tmp_path / "w.aaaaaaaaaaaaaaaa.00000.bin")
    others = [tmp_path / "x.fedcba9876543210.00000.bin", tmp_path / "w.x.fedcba9876543210.00000.bin",
              tmp_path / ".w.x.json.fedcba9876543210.dmlbridge-tmp", tmp_path / "w.notes"]
    for path in others:
        path.write_bytes(b"x")
    live = tmp_path / "w.0123456789abcdef.00000.bin"
    holder = hold(live)
    try:
        report = dmlbridge.clean(tmp_path / "w")
    finally:
        release(holder)
    assert report == dmlbridge.CleanReport(tuple(sorted(str(p) for p in dead)), 1331, (str(live),), ())
    assert not any(path.exists() for path in dead) and live.exists() and all(path.exists() for path in others)
    assert victim.read_bytes() == b"precious" and (WINDOWS or os.path.islink(tmp_path / "w.aaaaaaaaaaaaaaaa.00000.bin"))
    assert load_plan(tmp_path / "w.json", verify=False).array("w").tolist() == [1.0] * 3
    assert Path(plan.bin_path or "").exists()
    assert dmlbridge.clean(str(tmp_path / "w")) == dmlbridge.CleanReport((str(live),), 0, (), ())
    assert dmlbridge.clean(tmp_path / "w") == dmlbridge.CleanReport((), 0, (), ())
    assert dmlbridge.clean(tmp_path / "fresh") == dmlbridge.CleanReport((), 0, (), ())
    assert not (tmp_path / "fresh.lock").exists()


def test_clean_refuses_while_a_conversion_runs_and_without_a_readable_manifest(tmp_path: Path) -> None:
    """clean takes the prefix's lock: while a conversion holds it, a DestinationError names it and nothing is
    removed. A manifest it cannot read is a ManifestError (it cannot tell which buffer files are current), and
    nothing is removed; without a manifest every buffer file of the prefix is a leftover. Bad prefixes are
    errors that say what is wrong."""
    plan = convert_model(_model(1.0), tmp_path / "w", progress=False)
    dead = tmp_path / "w.fedcba9876543210.00000.bin"
    dead.write_bytes(b"x")
    holder = hold(tmp_path / "w.lock", "pid 4242 on other-host\n")
    try:
        with pytest.raises(DestinationError, match=r"w\.lock.*pid 4242 on other-host.*then clean again"):
            dmlbridge.clean(tmp_path / "w")
    finally:
        release(holder)
    assert dead.exists()
    manifest = (tmp_path / "w.json").read_bytes()
    (tmp_path / "w.json").write_bytes(manifest[:-20])
    with pytest.raises(dmlbridge.ManifestError, match=r"cannot tell which buffer files .* nothing was removed.*"
                       r"repair or remove"):
        dmlbridge.clean(tmp_path / "w")
    assert dead.exists() and Path(plan.bin_path or "").exists()
    (tmp_path / "w.json").unlink()
    assert (tmp_path / "w.lock").exists()  # (the holder's, left as it let go: a stale lock, kept while nothing was)
    assert dmlbridge.clean(tmp_path / "w").removed == tuple(sorted([str(dead), plan.bin_path or "",
                                                                    str(tmp_path / "w.lock")]))
    with pytest.raises(dmlbridge.InvalidArgumentError, match="prefix must be a path"):
        dmlbridge.clean(3)  # type: ignore[arg-type]
    with pytest.raises(DestinationError, match="does not exist"):
        dmlbridge.clean(tmp_path / "no" / "such" / "w")


def test_a_failed_reconversion_leaves_the_previous_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error halfway through a re-conversion: the previous conversion is as it was (visible, loadable, its
    buffer files in place), no file of the failed one is left."""
    convert_model(_model(1.0), tmp_path / "w", progress=False)
    convert_model(_model(2.0), tmp_path / "w", progress=False)
    before, names = Path(tmp_path / "w.json").read_bytes(), output_names(tmp_path)

    def failing(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EIO, "disk error")

    monkeypatch.setattr(dmlbridge.writing.convert, "write_image", failing)
    with pytest.raises(DestinationError):
        convert_model(_model(3.0), tmp_path / "w", progress=False)
    assert (tmp_path / "w.json").read_bytes() == before and output_names(tmp_path) == names
    assert load_plan(tmp_path / "w.json").array("w").tolist() == [2.0] * 3


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
@needs_symlinks
def test_a_failed_publish_over_a_symlinked_manifest_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: type[BaseException]
) -> None:
    """PREFIX.json is a symlink to a manifest kept elsewhere and the one rename fails: the symlink, the manifest
    it points at and its buffer stay; the new conversion's files are removed."""
    store = tmp_path / "store"
    store.mkdir()
    convert_model(_model(1.0), store / "w", progress=False)
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(store / "w.json", out / "w.json")
    before = {p.name: p.read_bytes() for p in store.iterdir()}
    real_replace = os.replace

    def failing(src: Any, dst: Any, **kwargs: Any) -> None:
        if str(dst).endswith(".json"):
            raise failure(errno.EIO, "injected") if failure is OSError else failure()
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(DestinationError if failure is OSError else KeyboardInterrupt):
        convert_model(_model(2.0), out / "w", progress=False)
    monkeypatch.undo()
    assert os.readlink(out / "w.json") == str(store / "w.json")
    assert {p.name: p.read_bytes() for p in store.iterdir()} == before
    assert sorted(os.listdir(out)) == ["w.json"]


def test_an_interrupt_during_cleanup_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C that arrives while a failed conversion removes its files is held back until they are gone."""
    import signal

    import dmlbridge.writing.publish as commit

    real_unlink = os.unlink

    def unlink_then_interrupt(path: Any, **kwargs: Any) -> None:
        real_unlink(path, **kwargs)
        signal.raise_signal(signal.SIGINT)  # a second Ctrl-C, mid-cleanup

    real_write_all = commit.write_all

    def failing_write_all(fd: int, data: Any) -> None:
        monkeypatch.setattr(os, "unlink", unlink_then_interrupt)
        raise OSError(errno.ENOSPC, "injected")

    monkeypatch.setattr(commit, "write_all", failing_write_all)
    with pytest.raises((KeyboardInterrupt, DestinationError)):
        convert_model(_model(), tmp_path / "w", progress=False)
    monkeypatch.undo()
    assert real_write_all is commit.write_all
    assert sorted(os.listdir(tmp_path)) == []
