"""One measured job in a fresh interpreter: ``python -m benchmarks.child '<json job>'``.

Prints one JSON line: wall seconds of the job and its peak RSS growth: the peak resident set during the job minus
the resident set before it. Every library is imported before the baseline is taken.

On Linux the peak is the kernel's high-water mark, reset just before the job (``/proc/self/clear_refs``, then
``VmHWM``): ``resource.getrusage(...).ru_maxrss`` cannot be used there because a child started with vfork + exec
inherits the parent's peak (a benchmark process holding 300 MiB of arrays makes every child report >= 300 MiB,
hiding any growth below that). Elsewhere ``ru_maxrss`` is the fallback.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from typing import Any

import numpy as np  # noqa: F401 - imported before the baseline, like every library a job uses
import onnx

import dmlbridge
from benchmarks import diy
from dmlbridge.plan.upload_plan import read_plan
from dmlbridge.plan.verify import find_mismatches

try:
    import onnx_ir  # noqa: F401 - imported before the baseline when installed
except ImportError:  # pragma: no cover - the onnx_ir jobs are then not run
    pass


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def _reset_peak() -> tuple[str, int]:
    """Start measuring: (method, baseline KiB)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the high-water mark to the current RSS
        return "VmHWM", _status_kib("VmRSS")
    except OSError:
        return "ru_maxrss", _ru_maxrss_kib()


def _ru_maxrss_kib() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS, KiB on Linux


def _peak_kib(method: str) -> int:
    return _status_kib("VmHWM") if method == "VmHWM" else _ru_maxrss_kib()


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Run one job (copyfile, copyfile_fsync, dmlbridge, verify, cat, diy_onnx, diy_onnx_ir, onnx_load, warm) and
    measure it."""
    kind = job["kind"]
    method, base = _reset_peak()
    start = time.perf_counter()
    if kind == "copyfile":
        shutil.copyfile(job["src"], job["dst"])
    elif kind == "copyfile_fsync":
        shutil.copyfile(job["src"], job["dst"])
        with open(job["dst"], "rb+") as f:
            os.fsync(f.fileno())
    elif kind == "dmlbridge":
        limit = job.get("max_buffer_bytes", dmlbridge.DEFAULT_MAX_BUFFER_BYTES)
        dmlbridge.convert_model(job["model"], job["out"], progress=False, fsync=job.get("fsync", True),
                                max_buffer_bytes=limit, workers=job.get("workers"),
                                checksum=job.get("checksum", False)).close()
    elif kind == "verify":  # as dmlbridge verify: the manifest read (no fingerprint), then every entry compared
        with read_plan(job["manifest"], verify=False, bin_path=None, check_fingerprint=False) as plan:
            problems = find_mismatches(plan, job["model"], sha256=job.get("checksum", False),
                                       workers=job.get("workers"))
        if problems:
            raise RuntimeError(f"verify found {len(problems)} mismatches: {problems[:3]}")
    elif kind == "cat":  # the files read to /dev/null by cat(1)
        with open(os.devnull, "wb") as null:
            subprocess.run(["cat", *job["paths"]], stdout=null, check=True)
    elif kind == "diy_onnx":
        diy.convert_with_onnx(job["model"], job["out"])
    elif kind == "diy_onnx_ir":
        diy.convert_with_onnx_ir(job["model"], job["out"])
    elif kind == "onnx_load":
        onnx.load(job["model"])
    elif kind == "warm":  # write and delete a file: the next process finds warm free pages (performance_cases)
        chunk = bytes(64 << 20)
        with open(job["path"], "wb") as f:
            for _ in range(-(-job["bytes"] // len(chunk))):
                f.write(chunk)
        os.unlink(job["path"])
    else:
        raise ValueError(f"unknown job kind {kind!r}")
    seconds = time.perf_counter() - start
    peak = _peak_kib(method)
    return {
        "kind": kind,
        "seconds": seconds,
        "rss_method": method,
        "rss_base_mib": base / 1024,
        "rss_peak_mib": peak / 1024,
        "rss_growth_mib": (peak - base) / 1024,
        "pid": os.getpid(),
        "dmlbridge": dmlbridge.__version__,
    }


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))
