"""``PREFIX.lock`` exists only while a conversion (or ``clean``) holds it, and after a killed one.

A conversion removes its lock when it ends, published or failed; a killed one leaves it, held by no one, and the
next conversion or ``dmlbridge.clean`` takes it and removes it. ``clean`` never removes a lock a live process
holds. The lock is removed while it is held (POSIX) or just after it is let go (Windows), so a process that opened
the file just before may lock a file that is no longer at the name: it looks again, and two processes never both
hold the lock of one prefix. Earlier versions left the lock beside every prefix, after failures too, and
``clean`` never removed it.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import background
import numpy as np
import onnx
import pytest
from budget import examples
from builders import model_of
from lock_holders import hold, release
from models import build_model, output_names
from onnx import numpy_helper

import dmlbridge
import dmlbridge.writing.folder as folder_module
import dmlbridge.writing.image as image_writer
from dmlbridge import CleanReport, DestinationError, convert_model
from dmlbridge.errors import ExternalDataError, TensorProtoError
from dmlbridge.system.locks import try_lock
from dmlbridge.writing.folder import LOCK_GONE, LOCK_HELD, OutputFolder

WINDOWS = sys.platform == "win32"
# Rounds of each racing process (DMLBRIDGE_EXAMPLES multiplies them): without the check that the lock's name is
# still the file locked, 3,000 rounds of three processes found 14 overlaps on Linux; each system call costs more
# under Wine, so fewer there.
ROUNDS = examples(200 if WINDOWS else 1000)


def _model(value: float = 1.0) -> Any:
    return model_of([numpy_helper.from_array(np.full(3, value, np.float32), "w")])


def _held_by_another(path: Path) -> bool:
    """Whether a process holds the lock of ``path`` (this one, through another open file, or another)."""
    fd = os.open(path, os.O_RDWR | getattr(os, "O_BINARY", 0))
    try:
        return not try_lock(fd)
    finally:
        os.close(fd)


def _fail_midway(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    """``error`` raised at the third constant written one at a time (files of the conversion exist by then)."""
    real_write_stored = image_writer._write_stored
    calls: list[int] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise error
        return real_write_stored(*args, **kwargs)

    monkeypatch.setattr(image_writer, "_write_stored", failing)


@pytest.mark.parametrize("ending", ["published", "missing external data", "a bad tensor halfway",
                                    "Ctrl-C halfway", "a second conversion refused"])
def test_no_lock_remains_when_a_conversion_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str
                                                ) -> None:
    """However a conversion ends (published, or failed with a DmlBridgeError or Ctrl-C, over previous outputs
    or none), PREFIX.lock is gone after it, and nothing but the previous outputs is left."""
    path, _ = build_model(tmp_path)
    convert_model(path, tmp_path / "previous", progress=False)
    before = output_names(tmp_path)
    for prefix in ("previous", "fresh"):
        if ending == "published":
            convert_model(path, tmp_path / prefix, progress=False)
            continue
        if ending == "missing external data":
            os.replace(tmp_path / "weights.data", tmp_path / "weights.away")
            with pytest.raises(ExternalDataError, match=r"weights\.data"):
                convert_model(path, tmp_path / prefix, progress=False)
            os.replace(tmp_path / "weights.away", tmp_path / "weights.data")
        elif ending == "a second conversion refused":
            child = hold(tmp_path / f"{prefix}.lock", "pid 4242 on other-host\n")
            try:
                with pytest.raises(DestinationError, match="pid 4242 on other-host"):
                    convert_model(path, tmp_path / prefix, progress=False)
                assert _held_by_another(tmp_path / f"{prefix}.lock")  # (left to its holder, who still holds it)
            finally:
                release(child)
            (tmp_path / f"{prefix}.lock").unlink()  # (the stand-in holder does not remove its lock)
        else:
            bad = numpy_helper.from_array(np.array([True, False]), "t_bad_bool")
            bad.raw_data = b"\x01\x02"  # a BOOL byte that is neither 0 nor 1: found only as it is written
            bad_path, _ = build_model(tmp_path, bad=bad) if ending == "a bad tensor halfway" else (path, None)
            if ending == "Ctrl-C halfway":
                _fail_midway(monkeypatch, KeyboardInterrupt())
            with pytest.raises(TensorProtoError if ending == "a bad tensor halfway" else KeyboardInterrupt):
                convert_model(bad_path, tmp_path / prefix, progress=False)
            monkeypatch.undo()
        assert output_names(tmp_path) == before, ending
    if ending == "published":
        assert output_names(tmp_path) == sorted([*before, "fresh.ID.00000.bin", "fresh.json"])
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".lock")]


def test_clean_keeps_a_lock_a_live_conversion_holds_and_removes_it_once_stale(tmp_path: Path) -> None:
    """A lock another process holds is its: clean is refused (naming the holder) and leaves it held and as it
    was, also when it is the prefix's only file to look at. Let go without being removed (as a killed conversion
    leaves it), it is stale: clean takes it, removes it and reports it with its bytes; then there is nothing."""
    convert_model(_model(), tmp_path / "w", progress=False)
    lock = tmp_path / "w.lock"
    text = b"pid 4242 on other-host\n"
    child = hold(lock, text.decode())
    try:
        with pytest.raises(DestinationError, match=r"w\.lock.*pid 4242 on other-host.*then clean again"):
            dmlbridge.clean(tmp_path / "w")
        assert lock.read_bytes() == text and _held_by_another(lock)
    finally:
        release(child)
    assert dmlbridge.clean(tmp_path / "w") == CleanReport((str(lock),), len(text), (), ())
    assert not lock.exists() and output_names(tmp_path) == ["w.ID.00000.bin", "w.json"]
    assert dmlbridge.clean(tmp_path / "w") == CleanReport((), 0, (), ())


# A conversion in a child process that stops once its buffer file is created, until it is killed.
STALLED = textwrap.dedent("""
    import sys
    import dmlbridge.writing.convert as convert
    def stalled(*args, **kwargs):
        print("writing", flush=True)
        sys.stdin.readline()
    convert.write_image = stalled
    convert.convert_model(sys.argv[1], sys.argv[2], progress=False)
""")
KILLED_AFTER = ["clean", "the next conversion"]
_JOBS: dict[str, background.Job[Any]] = {}


def start_in_background(queue: background.Queue, folder: Path) -> None:
    """The killed conversions and the racing processes run beside the other tests (tests/conftest.py calls this):
    most of their time is their interpreters' start."""
    for after in KILLED_AFTER:
        _JOBS[after] = queue.add(functools.partial(_killed_conversion, folder / f"killed, then {after}"))
    _JOBS["race"] = queue.add(functools.partial(_race, folder / "race"))


def _killed_conversion(directory: Path) -> tuple[Path, list[str], list[str]]:
    """A conversion into ``directory / "w"`` over a previous one, killed while it writes (SIGKILL on POSIX,
    TerminateProcess on Windows: no code of it runs). Returns the model, the output names before it, and the
    names it left."""
    directory.mkdir()
    model = directory / "m.onnx"
    onnx.save(_model(2.0), model)
    convert_model(model, directory / "w", progress=False)
    before, names = output_names(directory), set(os.listdir(directory))
    child = subprocess.Popen([sys.executable, "-c", STALLED, str(model), str(directory / "w")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ))  # (a snapshot: see tests/helpers/background.py)
    try:
        assert child.stdout is not None and child.stdout.readline() == "writing\n"
        assert _held_by_another(directory / "w.lock")
    finally:
        child.kill()
        child.wait(30)
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()
    return model, before, sorted(set(os.listdir(directory)) - names)


@pytest.mark.parametrize("after", KILLED_AFTER)
def test_a_killed_conversions_lock_is_removed_by_the_next_conversion_or_clean(tmp_path: Path, after: str) -> None:
    """A conversion killed while it writes leaves its lock, held by no one, and its buffer file. clean removes
    both and reports them; the next conversion takes the stale lock, and removes it and the buffer file as it
    ends."""
    model, before, left = _JOBS[after].result() if after in _JOBS else _killed_conversion(tmp_path / "killed")
    directory = model.parent
    assert len(left) == 2 and "w.lock" in left and not _held_by_another(directory / "w.lock"), left
    if after == "clean":
        size = (directory / "w.lock").stat().st_size
        assert dmlbridge.clean(directory / "w") == CleanReport(tuple(str(directory / n) for n in left), size, (), ())
    else:
        convert_model(model, directory / "w", progress=False)
    assert output_names(directory) == before


@pytest.mark.parametrize("meanwhile", ["let go", "let go and taken by a third"])
def test_a_lock_let_go_while_another_takes_it_is_held_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             meanwhile: str) -> None:
    """B opens the lock file while A holds it; before B locks it, A lets go (and removes it), and in the second
    case C takes the lock anew. On POSIX, B's lock on the file it opened then succeeds, though that file is no
    longer at the name: B sees so and looks again, so it takes the file at the name (first case) or is refused by
    C, who holds it (second case). On Windows A's removal fails while B has the file open (it stays, the same
    file), and B takes it or is refused by C alike. Never do two hold it, and the one who holds it holds the file
    at the name."""
    prefix = str(tmp_path / "w")
    lock = tmp_path / "w.lock"
    a, b, c, d = (OutputFolder(prefix) for _ in range(4))
    a.take_lock()
    real_try_lock = folder_module.try_lock
    released: list[str | None] = []

    def between_open_and_lock(fd: int) -> bool:
        if not released:  # (B's call: A lets go, and C takes the lock, in between)
            released.append(a.release_lock())
            if meanwhile != "let go":
                c.take_lock()
        return real_try_lock(fd)

    monkeypatch.setattr(folder_module, "try_lock", between_open_and_lock)
    try:
        if meanwhile == "let go":
            b.take_lock()
            holder = b
        else:
            with pytest.raises(DestinationError, match=rf"is running: it holds the lock .*\(pid {os.getpid()} on "):
                b.take_lock()
            holder = c
        monkeypatch.undo()
        assert released == [LOCK_HELD if WINDOWS else None]  # (removed on POSIX; on Windows B has it open)
        assert [f.lock_fd is not None for f in (a, b, c)] == [False, holder is b, holder is c]
        assert holder.lock_fd is not None
        held, named = os.fstat(holder.lock_fd), lock.lstat()
        assert (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)
        with pytest.raises(DestinationError, match="another conversion"):
            d.take_lock()
        assert holder.release_lock() is None and not lock.exists()
        assert a.release_lock() == LOCK_GONE  # (nothing held: nothing done)
    finally:
        for each in (a, b, c, d):
            each.close()


# Processes taking and letting go of one prefix's lock as fast as they can, each counting the times it held it and
# the times it found another inside (a file only a holder creates, exclusively, and removes before it lets go).
RACE = textwrap.dedent("""
    import os, sys
    from dmlbridge.errors import DestinationError
    from dmlbridge.writing.folder import OutputFolder
    prefix, inside, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    held = overlaps = 0
    print("ready", flush=True)
    sys.stdin.readline()
    for _ in range(rounds):
        folder = OutputFolder(prefix)
        try:
            folder.take_lock()
        except DestinationError:
            folder.close()
            continue
        try:
            os.close(os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            overlaps += 1
        else:
            held += 1
            os.unlink(inside)
        folder.close()
    print(held, overlaps, flush=True)
""")


def _race(directory: Path) -> tuple[Path, list[list[str]]]:
    """Three processes racing for the lock of ``directory / "w"``, ROUNDS times each, started together; returns
    the folder and each one's counts (times it held the lock, times it found another inside)."""
    directory.mkdir()
    children = [subprocess.Popen([sys.executable, "-c", RACE, str(directory / "w"), str(directory / "inside"),
                                  str(ROUNDS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env=dict(os.environ))  # (a snapshot: see tests/helpers/background.py)
                for _ in range(3)]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("\n")
            child.stdin.flush()
        counts = [child.communicate(timeout=600)[0].split() for child in children]
    finally:
        for child in children:
            child.kill()
            child.wait(30)
    assert all(child.returncode == 0 for child in children)
    return directory, counts


def test_processes_racing_for_one_lock_never_hold_it_together(tmp_path: Path) -> None:
    """Three processes take and let go of one prefix's lock ROUNDS times each, started together: never is one
    inside while another is, and on POSIX no lock is left once they are done (on Windows a removal that met another
    process's open handle leaves a stale lock, which clean removes)."""
    directory, counts = _JOBS["race"].result() if "race" in _JOBS else _race(tmp_path / "race")
    held, overlaps = sum(int(held) for held, _ in counts), sum(int(overlaps) for _, overlaps in counts)
    assert overlaps == 0 and held > 0, counts
    if not WINDOWS:
        assert not (directory / "w.lock").exists()
    dmlbridge.clean(directory / "w")
    assert os.listdir(directory) == []
