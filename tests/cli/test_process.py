"""The ``dmlbridge`` command as a process: what only a child process shows. The console script answers Ctrl-C from
its first instruction, and in the last moments of its life; ``python -m dmlbridge`` exits with the command's status
and prints what the terminal's encoding cannot show as escapes. (The commands themselves: test_commands.py, in
this process.)"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
from budget import examples
from builders import model_of
from command_line import one_line_error, run, run_process
from models import buffer_path

import dmlbridge


def test_names_the_terminal_cannot_show_are_escaped_not_a_traceback(tmp_path: Path) -> None:
    # A Windows console or a file in a legacy code page cannot encode every constant name a model may carry.
    path = tmp_path / "模型.onnx"
    onnx.save(model_of({"poids_é_权重": np.ones(2, np.float32)}), path)
    env = dict(os.environ, PYTHONIOENCODING="ascii")
    with ThreadPoolExecutor(1) as pool:  # (inspect beside convert, then verify: the processes are independent)
        inspect = pool.submit(run_process, "inspect", path, env=env)
        results = [run_process("convert", path, "-o", tmp_path / "out", env=env),
                   run_process("verify", tmp_path / "out.json", path, env=env), inspect.result()]
    for result in results:
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
    assert "poids_\\xe9_\\u6743\\u91cd" in inspect.result().stdout


def test_ctrl_c_from_the_first_instruction_prints_one_line(small: Path, tmp_path: Path) -> None:
    """SIGINT at random moments from the command's start (while it imports, parses, converts): one line and exit
    130, or a finished run; never a traceback, never a file left, not even the prefix's lock."""
    if os.name != "posix":
        pytest.skip("SIGINT sent from outside at random moments is POSIX's (Windows sends Ctrl-C to a console)")
    script = Path(sys.executable).parent / "dmlbridge"
    if not script.exists():
        pytest.skip("the installed console script is needed (pip install -e .)")
    rng = random.Random(7)
    outcomes: list[str] = []
    # The moments are drawn between the latest one that landed before the command and the earliest that landed
    # after it, as the runs report them: a machine slow to start Python (a loaded one) moves the window, and the
    # draws follow it, so the command is interrupted however long its start takes.
    early, late = 0.0, 0.6
    run_index = 0
    while run_index < examples(12) or ("interrupted" not in outcomes and run_index < 80):
        out = tmp_path / f"run{run_index}"
        run_index += 1
        out.mkdir()
        child = subprocess.Popen([str(script), "convert", str(small), "-o", str(out / "w"), "--quiet"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        moment = rng.uniform(early, late)
        time.sleep(moment)
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=600)
        if child.returncode == 0:
            outcomes.append("finished")
            late = moment
            continue
        ours = stderr.startswith("dmlbridge") or "dmlbridge_entry.py" in stderr or "/dmlbridge/" in stderr
        if not ours:  # Python itself was starting (site, ...) or shutting down: not the command's time
            if os.listdir(out):  # after the command: its conversion is complete
                assert dmlbridge.load_plan(out / "w.json").total_size > 0
                late = moment
            else:
                early, late = moment, max(late, 2 * moment)  # (still starting: later moments)
            outcomes.append("before or after the command")
            continue
        assert "Traceback" not in stderr, stderr
        assert child.returncode == 130 and stderr.strip().endswith("interrupted"), (child.returncode, stderr)
        assert len(stderr.strip().splitlines()) == 1, stderr
        # No temporary file, no lock; the conversion's files only if it was interrupted after it was published,
        # whole.
        assert not [name for name in os.listdir(out) if name.startswith(".") or name.endswith(".lock")], \
            os.listdir(out)
        if os.listdir(out):
            assert dmlbridge.load_plan(out / "w.json").total_size > 0
            assert len(os.listdir(out)) == 2, os.listdir(out)
        outcomes.append("interrupted")
    assert "interrupted" in outcomes


@pytest.mark.parametrize("when", ["as the command returns", "while Python exits"])
def test_ctrl_c_after_the_command_returned(when: str) -> None:
    """The last window of the command's life: a SIGINT as its main returns is one line and exit 130; one while
    Python exits after it is too late to stop anything and changes nothing. Neither prints a traceback."""
    # (raise_signal: the C runtime's raise(), which delivers SIGINT to the process on Windows too)
    if when == "as the command returns":  # the command's own handler is installed, then the signal lands
        stub = ("def main():\n    signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                "    signal.raise_signal(signal.SIGINT)\n    return 0\n")
    else:
        stub = "def main():\n    atexit.register(signal.raise_signal, signal.SIGINT)\n    return 0\n"
    code = ("import atexit, os, signal, sys, types\nimport dmlbridge_entry\n"
            "cli = types.ModuleType('dmlbridge.cli.commands')\n" + "exec(" + repr(stub) + ", cli.__dict__)\n"
            "cli.__dict__.update(os=os, signal=signal, atexit=atexit)\n"
            "sys.modules['dmlbridge.cli.commands'] = cli\ndmlbridge_entry.main()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert "Traceback" not in result.stderr, result.stderr
    if when == "as the command returns":
        assert (result.returncode, result.stderr) == (130, "dmlbridge: interrupted\n")
    else:
        assert (result.returncode, result.stderr) == (0, "")


def test_the_process_exits_with_the_commands_status(small: Path, tmp_path: Path) -> None:
    """``python -m dmlbridge`` exits with the status the command returns: 0 for a command that did its work, 1 for
    a verification that found a difference, 2 for a user error, told in one line."""
    dmlbridge.convert_model(small, tmp_path / "w", progress=False).close()
    buffer = buffer_path(tmp_path / "w")
    data = bytearray(buffer.read_bytes())
    data[0] ^= 0x40  # the first value of the first constant
    buffer.write_bytes(bytes(data))
    with ThreadPoolExecutor(3) as pool:  # (three independent processes)
        table, failed, missing = pool.map(lambda args: run_process(*args), [
            ["table"], ["verify", tmp_path / "w.json", small], ["convert", tmp_path / "missing.onnx"]])
    assert table.returncode == 0 and "INT4" in table.stdout and table.stderr == ""
    assert failed.returncode == 1 and "mismatch: 'ids'" in failed.stderr and "Traceback" not in failed.stderr
    one_line_error(missing, "missing.onnx", "No such file")


@pytest.mark.parametrize("entry", ["dmlbridge", "python -m dmlbridge"])
def test_the_version_is_printed_without_importing_numpy_or_onnx(entry: str) -> None:
    """``--version`` answers before the library is imported (numpy, onnx and protobuf take a second to load):
    the child process's sys.modules, as it exits, holds none of them, and the line is the parser's own."""
    heavy = ("numpy", "onnx", "ml_dtypes", "google", "tqdm")
    start = ("import dmlbridge_entry\ndmlbridge_entry.main()\n" if entry == "dmlbridge" else
             "import runpy\nrunpy.run_module('dmlbridge', run_name='__main__', alter_sys=True)\n")
    code = ("import atexit, sys\n"
            f"atexit.register(lambda: sys.stderr.write(repr(sorted({{name.split('.')[0] for name in sys.modules}} & "
            f"{set(heavy)!r}))))\n"
            "sys.argv[1:] = ['--version']\n" + start)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert (result.returncode, result.stderr) == (0, "[]"), result.stderr
    assert result.stdout == run("--version").stdout == f"dmlbridge {dmlbridge.__version__}\n"
