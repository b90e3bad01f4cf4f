"""docs/windows.md stays true: each of its Python blocks runs on its own on Windows' CPython against DirectML, in
a fresh process in an empty folder, and every value a ``print(...)  # value`` line promises is what it printed."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import background
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "windows.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(encoding="utf-8"), re.S | re.M)


def test_the_page_has_its_blocks() -> None:
    assert len(BLOCKS) >= 5
    code = "".join(BLOCKS)
    for call in ("create_device(", "target_of(", "convert_model(", "upload(", "binding(", "run_operator(",
                 ".read("):
        assert call in code, call


def _run_block(code: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh ``python -`` in the empty ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-"], input=code, text=True, cwd=folder, capture_output=True,
                          env={**os.environ, "PYTHONIOENCODING": "utf-8"}, timeout=600)


_RUNS: dict[int, background.Job[subprocess.CompletedProcess[str]]] = {}


def start_in_background(queue: background.Queue, folder: Path) -> None:
    """On Windows, the blocks' fresh processes run beside the other tests (tests/conftest.py calls this): each
    takes seconds to start and to make its device. Their tests still wait for the suite's known-answer check."""
    if sys.platform == "win32":
        for number, code in enumerate(BLOCKS):
            _RUNS[number] = queue.add(functools.partial(_run_block, code, folder / f"block{number}"))


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_each_python_block_runs_on_windows(device: object, number: int, tmp_path: Path) -> None:
    code = BLOCKS[number]
    assert re.search(r"^import dmlbridge\.gpu$", code, re.M), f"block {number} does not import dmlbridge.gpu"
    job = _RUNS.get(number)  # (run in the background since the session began)
    run = job.result() if job is not None else _run_block(code, tmp_path)
    assert run.returncode == 0, f"docs/windows.md block {number} failed:\n{run.stdout}\n{run.stderr}"
    for promised in re.findall(r"^\s*print\(.*\)\s+# (\[[^\]]*\])", code, re.M):
        assert promised in run.stdout, (number, promised, run.stdout)
