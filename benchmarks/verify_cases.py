"""Case 9: verifying a written conversion against its model, as ``dmlbridge verify`` does, against reading the files.

Verification reads every byte of the buffer files once and every byte of the model's external data once (the
values a fresh conversion is made from), so its floors are ``cat`` of the buffer files alone and ``cat`` of the
buffer files and the model's data (each to /dev/null, in a child process, the page cache warm as for verify).
Its peak RSS growth must stay within the 256 MiB conversion keeps, whatever the model's size. The INT4 + FLOAT8
model is verified too: its FLOAT8 constants are widened again and read back (FLOAT16 to FLOAT8), work for the
workers.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from benchmarks.harness import Peer, Row, Settings, Skipped, median, run_child
from benchmarks.model_cases import make_external_model
from dmlbridge import convert_model

__all__ = ["verification"]

Result = list[Row | Skipped]


def _rounds(jobs: dict[str, dict[str, Any]], settings: Settings) -> dict[str, list[dict[str, Any]]]:
    """A B A B rounds of child jobs (the quick run: one round, in this process: the code paths only)."""
    rounds, in_process = (1, True) if settings.quick else (max(1, settings.model_rounds - 4), False)
    reports: dict[str, list[dict[str, Any]]] = {name: [] for name in jobs}
    for _ in range(rounds):
        for name, job in jobs.items():
            reports[name].append(run_child(job, in_process))
    return reports


def _rows(case: str, size: int, reports: dict[str, list[dict[str, Any]]], notes: list[str], target: bool) -> Result:
    """The wall-time rows (``target``: the no-checksum one within 3 x cat of the files verify reads) and the peak
    RSS growth row (within 256 MiB)."""
    rows: Result = []
    for checksum in (False, True):
        name = f"verify, workers=2{', checksum' if checksum else ''}"
        runs = [r["seconds"] for r in reports[name]]
        row = Row(f"{case} wall time{', checksum' if checksum else ''}", size, name, median(runs), runs=runs,
                  notes=notes if not checksum else [])
        for peer, limit in (("cat buffer files", None), ("cat buffer files and model data", 3.0 if target else None)):
            times = [r["seconds"] for r in reports[peer]]
            row.peers.append(Peer(peer, median(times), limit if not checksum else None, times))
        rows.append(row)
    growth = [r["rss_growth_mib"] for name in reports if name.startswith("verify") for r in reports[name]]
    rows.append(Row(f"{case} peak RSS growth", size, "verify (every run above)", max(growth), unit="MiB",
                    abs_limit=256.0, runs=growth))
    return rows


def verification(settings: Settings) -> Result:
    """Case 9: verify of the float32 and the INT4 + FLOAT8 models of case 5 (with and without the SHA-256), with
    two workers, against cat of the files it reads; its peak RSS growth."""
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
            if not settings.quick:
                jobs["verify, workers=1"] = {**verify, "workers": 1, "checksum": True}
                jobs["verify, workers=8"] = {**verify, "workers": 8, "checksum": True}
            reports = _rounds(jobs, settings)
            size = settings.model_tensors * settings.model_tensor_bytes
            notes = [f"as dmlbridge verify: the manifest read, then every entry compared with a fresh conversion of "
                     f"the {label} model's constants and read back; the page cache warm; peak RSS growth over the "
                     "runs with 1, 2 and 8 workers, with and without the checksum"]
            rows += _rows(f"9 verify {label} external", size, reports, notes, target=not mixed)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rows
