"""`python -m benchmarks --quick` runs and writes well-formed JSON (no timing assertions: the machine is shared)."""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import background
import pytest

REPO = Path(__file__).resolve().parents[2]
POSIX = os.name == "posix"
pytestmark = pytest.mark.skipif(not POSIX, reason="the benchmarks are POSIX's: peak memory by resource and /proc, "
                                                   "peers such as cat(1)")


def _quick_run(folder: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = folder / "quick.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               DMLBRIDGE_BENCH_CACHE=str(folder / "cache"))  # (case 7's model, never in $HOME)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,  # (no timeout: a slow machine must not fail a correct run)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


_QUICK: list[background.Job[tuple[subprocess.CompletedProcess[str], dict]]] = []


def start_in_background(queue: background.Queue, folder: Path) -> None:
    """The quick run runs beside the other tests (tests/conftest.py calls this)."""
    if POSIX:
        _QUICK.append(queue.add(functools.partial(_quick_run, folder)))


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict]:
    return _QUICK[0].result() if _QUICK else _quick_run(tmp_path_factory.mktemp("bench"))


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def test_quick_run_writes_well_formed_json(quick: tuple[subprocess.CompletedProcess[str], dict]) -> None:
    _, report = quick
    assert report["format"] == "dmlbridge-benchmarks" and report["quick"] is True
    for key in ("cpu", "cpus", "numpy", "onnx", "ml_dtypes", "python", "dmlbridge"):
        assert key in report["machine"]
    assert report["rows"], "no case ran"
    cases = set()
    for row in report["rows"]:
        cases.add(row["case"].split()[0])
        assert isinstance(row["case"], str) and row["size"] > 0 and row["unit"] in ("s", "MiB")
        assert _number(row["dml"]) and row["dml"] >= 0 and row["runs"] and all(_number(t) for t in row["runs"])
        assert row["met"] in (True, False, None)
        assert all(isinstance(ok, bool) for ok in row["checks"].values())
        for peer in row["peers"]:
            assert isinstance(peer["name"], str) and _number(peer["value"]) and peer["value"] >= 0
            assert peer["ratio"] is None or _number(peer["ratio"])
            assert peer["limit"] is None or _number(peer["limit"])
            assert peer["met"] in (True, False, None)
    for skipped in report["skipped"]:
        assert isinstance(skipped["case"], str) and skipped["reason"]
        cases.add(skipped["case"].split()[0])
    assert {"1", "2", "3", "4", "5", "6"} <= cases  # every case ran or says why not
    assert set(report["missed"]) <= {row["case"] for row in report["rows"]}


def test_quick_run_prints_one_table(quick: tuple[subprocess.CompletedProcess[str], dict]) -> None:
    proc, report = quick
    header = [line for line in proc.stdout.splitlines() if line.startswith("case ")]
    assert len(header) == 1 and "dml/peer" in header[0]
    for row in report["rows"]:
        assert row["case"] in proc.stdout
