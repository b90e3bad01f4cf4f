"""The public API's types hold for a user's code: converted entries need no None checks, skipped ones do."""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import background
import numpy as np
import pytest
from builders import model_of
from onnx import numpy_helper

import dmlbridge

USER_CODE = textwrap.dedent('''
    import dmlbridge

    def ends(plan: dmlbridge.UploadPlan) -> list[int]:
        return [entry.offset + entry.total_tensor_size_in_bytes for entry in plan.converted]

    def first_size(plan: dmlbridge.UploadPlan, key: str) -> int:
        return plan.entries[key].as_converted().sizes[0]
''')
WRONG = textwrap.dedent('''
    import dmlbridge

    def end(plan: dmlbridge.UploadPlan, key: str) -> int:
        return plan.entries[key].offset + 1  # an entry may be skipped: offset is int | None
''')


def _type_check(folder: Path) -> subprocess.CompletedProcess[str]:
    """mypy --strict over user.py and wrong.py, written into ``folder``, in one run (the package analysed once)."""
    (folder / "user.py").write_text(USER_CODE)
    (folder / "wrong.py").write_text(WRONG)
    # mypy finds the package this process imported: a checkout's from its folder (it cannot follow an editable
    # install's import hook), an installed one in site-packages (whose other modules must not be taken for the
    # user's, as they would be from there)
    home = Path(dmlbridge.__file__).resolve().parents[1]
    where = home if (home / "pyproject.toml").is_file() else folder
    return subprocess.run([sys.executable, "-m", "mypy", str(folder / "user.py"), str(folder / "wrong.py"),
                           "--strict", "--no-incremental", "--cache-dir", str(folder / "cache"),
                           "--follow-imports", "silent"],  # (the user's files are checked; the package is the linters')
                          capture_output=True, text=True, timeout=600, cwd=where,
                          env=dict(os.environ))  # (a snapshot: see tests/helpers/background.py)


_CHECKED: list[background.Job[subprocess.CompletedProcess[str]]] = []


def start_in_background(queue: background.Queue, folder: Path) -> None:
    """mypy runs beside the other tests (tests/conftest.py calls this)."""
    if importlib.util.find_spec("mypy") is not None:
        _CHECKED.append(queue.add(functools.partial(_type_check, folder)))


def test_converted_entries_type_check_without_none_tests(tmp_path: Path) -> None:
    """user.py has no error, wrong.py its one."""
    pytest.importorskip("mypy.api", reason="mypy (the dev extra's) is not installed: the Windows run has none, as "
                        "mypy 2.4's compiled parser does not load under Wine 8.0; CI type-checks on Linux")
    result = _CHECKED[0].result() if _CHECKED else _type_check(tmp_path)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert result.returncode == 1 and len(errors) == 1, result.stdout + result.stderr
    assert "wrong.py:" in errors[0] and "user.py" not in errors[0], errors
    assert "Unsupported operand types for + (\"None\" and \"int\")" in errors[0], errors


def test_as_converted_refuses_a_skipped_entry() -> None:
    labels = numpy_helper.from_array(np.array(["a"], dtype=object), "labels")
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    plan = dmlbridge.plan_model(model_of([labels, w]))
    assert plan.entries["w"].as_converted().end == 8 and [e.key for e in plan.converted] == ["w"]
    with pytest.raises(dmlbridge.InvalidArgumentError, match="'labels' was skipped"):
        plan.entries["labels"].as_converted()
