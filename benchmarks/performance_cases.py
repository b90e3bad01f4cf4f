"""Case 8: conversion work on every core, and converting again into an existing prefix.

Free memory on a virtual machine can be cold: a host that takes back the pages its guest freed makes the next
first touch of each page slow (2-3 s per GiB measured on this project's machines, against 0.2 s for pages freed
an instant before). A run that follows the deletion of a large file gets warm pages; one that follows nothing
gets cold ones, whatever it is. So that every contender starts alike, the rows marked "warm" run a child that
writes and deletes a scratch file a little larger than the output (its page cache freed: warm pages) just before
each timed child. The re-conversion rows are also measured without it ("as is"), which is what a user running the
two conversions back to back sees.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from benchmarks.harness import MiB, Peer, Row, Settings, Skipped, median, run_child
from benchmarks.model_cases import make_external_model

Result = list[Row | Skipped]


def _clean(out: Path) -> None:
    for path in [*out.parent.glob(out.name + ".*"), *out.parent.glob("." + out.name + ".*")]:  # (hidden too)
        if path.name != out.name + ".lock":
            path.unlink(missing_ok=True)


def _rounds(steps: list[tuple[str, dict[str, Any], bool]], settings: Settings,
            warm: int) -> dict[str, list[dict[str, Any]]]:
    """Each round runs ``steps`` in order: (name, child job, whether to remove the outputs first); a ``warm``
    child of that many bytes before each timed one when ``warm``. The quick run: one round, no warm-up, in this
    process (the code paths only)."""
    rounds, in_process = (1, True) if settings.quick else (settings.model_rounds, False)
    warm = 0 if settings.quick else warm
    reports: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in steps}
    for _ in range(rounds):
        for name, job, clean_first in steps:
            if clean_first:
                _clean(Path(job.get("out") or job["dst"]))
            if warm:
                scratch = Path(job.get("out") or job["dst"]).parent / "scratch.bin"
                run_child({"kind": "warm", "bytes": warm, "path": str(scratch)})
            reports[name].append(run_child(job, in_process))
    return reports


def _seconds(reports: dict[str, list[dict[str, Any]]], name: str) -> list[float]:
    return [r["seconds"] for r in reports[name]]


def _row(case: str, size: int, reports: dict[str, list[dict[str, Any]]], name: str,
         peers: dict[str, float | None], notes: list[str]) -> Row:
    runs = _seconds(reports, name)
    row = Row(case, size, name, median(runs), runs=runs, notes=notes)
    for peer, limit in peers.items():
        times = _seconds(reports, peer)
        row.peers.append(Peer(peer, median(times), limit, times))
    return row


def workers(settings: Settings) -> Result:
    """The INT4 + FLOAT8 model (widening: compute-bound) with workers=2 against copyfile of a file the size of
    its output, and against workers=1; peak RSS with workers=8."""
    folder = settings.workdir / "case8w"
    out = folder / "out"
    try:
        model = make_external_model(folder, settings.model_tensors, settings.model_tensor_bytes, mixed=True)
        data = folder / "model.data"
        output_size = settings.model_tensors * settings.model_tensor_bytes * 3 // 2  # INT4 as is, FLOAT8 x2
        same_size = folder / "output-size.bin"
        with open(data, "rb") as src, open(same_size, "wb") as dst:
            shutil.copyfileobj(src, dst)
            src.seek(0)
            dst.write(src.read(output_size - data.stat().st_size))
        convert = {"kind": "dmlbridge", "model": os.fspath(model), "out": os.fspath(out), "fsync": False}
        steps: list[tuple[str, dict[str, Any], bool]] = [
            ("convert_model(workers=2)", {**convert, "workers": 2}, True),
            ("convert_model(workers=1)", {**convert, "workers": 1}, True),
            ("shutil.copyfile, output size", {"kind": "copyfile", "src": os.fspath(same_size),
                                              "dst": os.fspath(folder / "copy.bin")}, True),
            ("convert_model(workers=8)", {**convert, "workers": 8}, True),
        ]
        warm = output_size + 256 * MiB
        reports = _rounds(steps, settings, warm)
        total = settings.model_tensors * settings.model_tensor_bytes
        notes = ["half INT4 (copied), half FLOAT8E4M3FN widened to FLOAT16 by the workers; no fsync; warm: each "
                 "child starts with warm free memory (see benchmarks/performance_cases.py)"]
        growth = [r["rss_growth_mib"] for r in reports["convert_model(workers=8)"]]
        return [
            _row("8 INT4+FLOAT8 workers=2, warm", total, reports, "convert_model(workers=2)",
                 {"shutil.copyfile, output size": 1.5, "convert_model(workers=1)": None}, notes),
            Row("8 INT4+FLOAT8 workers=8 peak RSS growth", total, "convert_model(workers=8)", median(growth),
                unit="MiB", abs_limit=256.0, runs=growth),
        ]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def reconversion(settings: Settings) -> Result:
    """The 1 GiB float32 model converted into an empty prefix, then again into the same prefix (which removes the
    previous conversion's buffers before it returns), with and without fsync, warm and as is; copyfile to a new
    file and onto the existing one alike. The target of both re-conversions is a fresh conversion *with* fsync:
    freeing the previous buffers waits for the disk on a filesystem mounted with discard, as a flush does
    (docs/decisions.md)."""
    folder = settings.workdir / "case8r"
    out = folder / "out"
    try:
        model = make_external_model(folder, settings.model_tensors, settings.model_tensor_bytes)
        total = settings.model_tensors * settings.model_tensor_bytes
        convert = {"kind": "dmlbridge", "model": os.fspath(model), "out": os.fspath(out)}
        copy = {"kind": "copyfile", "src": os.fspath(folder / "model.data"), "dst": os.fspath(out) + ".copy"}
        steps: list[tuple[str, dict[str, Any], bool]] = [
            ("into an empty prefix, no fsync", {**convert, "fsync": False}, True),
            ("again into the prefix, no fsync", {**convert, "fsync": False}, False),
            ("into an empty prefix, fsync", {**convert, "fsync": True}, True),
            ("again into the prefix, fsync", {**convert, "fsync": True}, False),
            ("shutil.copyfile, new file", copy, True),
            ("shutil.copyfile onto the existing file", copy, False),
        ]
        rows: Result = []
        passes = (("warm", total + 256 * MiB), ("as is", 0)) if not settings.quick else (("as is", 0),)
        for how, warm in passes:
            reports = _rounds(steps, settings, warm)
            limit = 1.3 if how == "warm" else None
            notes = [f"{how}: " + ("each child starts with warm free memory" if warm else
                                   "no warm-up: the first conversion reuses the pages the clean-up before it freed, "
                                   "the second needs new ones (cold on this machine: see docs/performance.md)")]
            for fsync in ("no fsync", "fsync"):
                peers: dict[str, float | None] = {"into an empty prefix, fsync": limit}
                if fsync == "no fsync":
                    peers["into an empty prefix, no fsync"] = None
                peers["shutil.copyfile onto the existing file"] = None
                rows.append(_row(f"8 re-conversion, {fsync}, {how}", total, reports, f"again into the prefix, {fsync}",
                                 peers, notes if fsync == "fsync" else []))
            rows.append(_row(f"8 copyfile onto an existing file, {how}", total, reports,
                             "shutil.copyfile onto the existing file", {"shutil.copyfile, new file": None}, []))
        return rows
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def cases(settings: Settings) -> Result:
    """Case 8: both parts."""
    return [*workers(settings), *reconversion(settings)]
