"""Case 9: verifying a written conversion against its model, as ``dmlbridge verify`` does, against reading the files.

Verification reads every byte of the buffer files once and every byte of the model's external data once (the
values a fresh conversion is made from), so its floors are ``cat`` of the buffer files alone and ``cat`` of the
buffer files and the model's data (each to /dev/null, in a child process, the page cache warm as for verify).
Its peak RSS growth must stay within the 256 MiB conversion keeps, whatever the model's size. The INT4 + FLOAT8
model is verified too: its FLOAT8 constants are widened again, work for the workers.

Each model is timed twice in the same run: as the machine is (quiet, as far as the other users of its cores
allow), then loaded, with two processes spinning on the CPU beside it (started here and stopped before the next
model). Each measurement names the 1-minute load average (``os.getloadavg``) over its runs: the machine is shared,
and "quiet" may not be.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from benchmarks.harness import Peer, Row, Settings, Skipped, median, run_child
from benchmarks.model_cases import make_external_model
from dmlbridge import convert_model

__all__ = ["verification"]

Result = list[Row | Skipped]
HOGS = 2
"""The processes spinning on the CPU beside the loaded runs."""
LIMITS = {"float32": 2.0, "INT4+FLOAT8": 3.0}
"""The most verify (no checksum, two workers) may take, in times ``cat`` of the files it reads."""


@contextlib.contextmanager
def cpu_hogs(count: int) -> Iterator[None]:
    """``count`` processes that spin on the CPU (``while True: pass``) for the duration, stopped after it."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # (not every system has one)
        return float("nan")


def _rounds(jobs: dict[str, dict[str, Any]], settings: Settings) -> dict[str, list[dict[str, Any]]]:
    """A B A B rounds of child jobs (the quick run: one round, in this process: the code paths only), each
    report with the load average just before its job (``load``)."""
    rounds, in_process = (1, True) if settings.quick else (max(1, settings.model_rounds - 4), False)
    reports: dict[str, list[dict[str, Any]]] = {name: [] for name in jobs}
    for _ in range(rounds):
        for name, job in jobs.items():
            load = _load()
            reports[name].append({**run_child(job, in_process), "load": load})
    return reports


def _with_load(name: str, reports: list[dict[str, Any]]) -> str:
    loads = [r["load"] for r in reports]
    return f"{name} (load {min(loads):.1f}-{max(loads):.1f})"


def _rows(case: str, size: int, reports: dict[str, list[dict[str, Any]]], notes: list[str],
          limit: float | None, after: str = "") -> Result:
    """The wall-time rows (the no-checksum one within ``limit`` x cat of the files verify reads; ``after``: the
    end of the rows' names)."""
    rows: Result = []
    for checksum in (False, True):
        name = f"verify, workers=2{', checksum' if checksum else ''}"
        runs = [r["seconds"] for r in reports[name]]
        row = Row(f"{case} wall time{', checksum' if checksum else ''}{after}", size,
                  _with_load(name, reports[name]), median(runs), runs=runs, notes=notes if not checksum else [])
        for peer, most in (("cat buffer files", None), ("cat buffer files and model data", limit)):
            times = [r["seconds"] for r in reports[peer]]
            row.peers.append(Peer(_with_load(peer, reports[peer]), median(times), most if not checksum else None,
                                  times))
        rows.append(row)
    return rows


def verification(settings: Settings) -> Result:
    """Case 9: verify of the float32 and the INT4 + FLOAT8 models of case 5 (with and without the SHA-256), with
    two workers, against cat of the files it reads, quiet and loaded; its peak RSS growth."""
    folder = settings.workdir / "case9"
    rows: Result = []
    try:
        for mixed, label in ((False, "float32"), (True, "INT4+FLOAT8")):
            shutil.rmtree(folder, ignore_errors=True)
            model = make_external_model(folder, settings.model_tensors, settings.model_tensor_bytes, mixed=mixed)
            plan = convert_model(model, folder / "out", progress=False, fsync=False, checksum=True)
            buffers = [os.fspath(buffer.path) for buffer in plan.buffers]
            plan.close()
            manifest, data = os.fspath(folder / "out.json"), os.fspath(folder / "model.data")
            verify = {"kind": "verify", "manifest": manifest, "model": os.fspath(model), "workers": 2}
            jobs = {
                "cat buffer files": {"kind": "cat", "paths": buffers},
                "verify, workers=2": {**verify, "checksum": False},
                "cat buffer files and model data": {"kind": "cat", "paths": [*buffers, data]},
                "verify, workers=2, checksum": {**verify, "checksum": True},
            }
            memory_jobs = {} if settings.quick else {"verify, workers=1": {**verify, "workers": 1, "checksum": True},
                                                     "verify, workers=8": {**verify, "workers": 8, "checksum": True}}
            quiet = _rounds({**jobs, **memory_jobs}, settings)
            with cpu_hogs(HOGS):
                loaded = _rounds(jobs, settings)
            size = settings.model_tensors * settings.model_tensor_bytes
            notes = [f"as dmlbridge verify: the manifest read, then every entry compared with a fresh conversion of "
                     f"the {label} model's constants; the page cache warm; peak RSS growth over the runs with 1, 2 "
                     "and 8 workers, with and without the checksum, quiet and loaded"]
            case = f"9 verify {label} external"
            rows += _rows(case, size, quiet, notes, LIMITS[label])
            rows += _rows(case, size, loaded, [f"the same, with {HOGS} processes spinning on the CPU beside it"],
                          LIMITS[label], f", loaded ({HOGS} CPU hogs)")
            growth = [r["rss_growth_mib"] for runs in (quiet, loaded) for name in runs if name.startswith("verify")
                      for r in runs[name]]
            rows.append(Row(f"{case} peak RSS growth", size, "verify (every run above)", max(growth), unit="MiB",
                            abs_limit=256.0, runs=growth))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rows
