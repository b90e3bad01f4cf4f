"""docs/windows.md stays true: each of its Python blocks runs on its own on Windows' CPython against DirectML, in
a fresh process in an empty folder, and every value a ``print(...)  # value`` line promises is what it printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_each_python_block_runs_on_windows(device: object, number: int, tmp_path: Path) -> None:
    code = BLOCKS[number]
    assert re.search(r"^import dmlbridge\.gpu$", code, re.M), f"block {number} does not import dmlbridge.gpu"
    run = subprocess.run([sys.executable, "-"], input=code, text=True, cwd=tmp_path, capture_output=True,
                         env={**os.environ, "PYTHONIOENCODING": "utf-8"}, timeout=600)
    assert run.returncode == 0, f"docs/windows.md block {number} failed:\n{run.stdout}\n{run.stderr}"
    for promised in re.findall(r"^\s*print\(.*\)\s+# (\[[^\]]*\])", code, re.M):
        assert promised in run.stdout, (number, promised, run.stdout)
