"""Timing, results and the printed table shared by every case."""

from __future__ import annotations

import gc
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20
GiB = 1 << 30


@dataclass
class Settings:
    """How much work a run does: sizes and repetitions."""

    quick: bool
    tensor_bytes: int  # the "64 MiB tensor" of cases 1-4
    repeat: int  # interleaved rounds for in-process timings
    model_tensors: int  # external-data model: tensor count ...
    model_tensor_bytes: int  # ... and bytes per tensor
    model_rounds: int  # A B A B rounds of child-process conversions (the slower INT4+FLOAT8 model: 2 fewer)
    small_constants: int  # case 6: constants in the model
    large_model: bool  # also the 4 GiB memory check
    workdir: Path  # temporary files

    @classmethod
    def make(cls, quick: bool, large: bool, workdir: Path) -> Settings:
        if quick:
            return cls(True, 1 * MiB, 3, 4, 256 * 1024, 1, 400, False, workdir)
        return cls(False, 64 * MiB, 9, 64, 16 * MiB, 9, 50_000, large, workdir)


@dataclass
class Peer:
    """One comparison: a peer's measurement and, optionally, the most dmlbridge/peer may be."""

    name: str
    value: float  # seconds, or MiB for memory rows
    limit: float | None = None  # target: dmlbridge value / peer value <= limit
    runs: list[float] = field(default_factory=list)

    def ratio(self, dml: float) -> float | None:
        """dmlbridge / peer; None when the peer measured nothing (0 MiB)."""
        return dml / self.value if self.value > 0 else None

    def met(self, dml: float) -> bool | None:
        ratio = self.ratio(dml)
        return None if self.limit is None else ratio is not None and ratio <= self.limit


@dataclass
class Row:
    """One case: dmlbridge's measurement, its peers, and absolute or yes/no checks."""

    case: str
    size: int  # bytes of the source data
    dml_name: str
    dml: float  # seconds, or MiB when unit == "MiB"
    unit: str = "s"
    peers: list[Peer] = field(default_factory=list)
    abs_limit: float | None = None  # target: dml <= abs_limit (same unit)
    checks: dict[str, bool] = field(default_factory=dict)  # e.g. zero copy, bit-identical
    runs: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def met(self) -> bool | None:
        """True when every target of the row is met, None when it has none."""
        verdicts = [bool(p.met(self.dml)) for p in self.peers if p.limit is not None]
        if self.abs_limit is not None:
            verdicts.append(self.dml <= self.abs_limit)
        verdicts.extend(self.checks.values())
        return all(verdicts) if verdicts else None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["met"] = self.met()
        for peer, out in zip(self.peers, data["peers"], strict=True):
            out["ratio"] = peer.ratio(self.dml)
            out["met"] = peer.met(self.dml)
        return data


@dataclass
class Skipped:
    """A case that could not run, and why."""

    case: str
    reason: str


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def interleaved(funcs: dict[str, Callable[[], Any]], repeat: int, warmup: int = 1) -> dict[str, list[float]]:
    """Time each function ``repeat`` times, round-robin (the order rotates each round), after ``warmup`` calls.

    Interleaving spreads the noise of a shared machine over every contender instead of one.
    """
    names = list(funcs)
    for _ in range(warmup):
        for name in names:
            funcs[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()  # no collection pauses inside a timing; arrays are freed by reference counting anyway
    try:
        for round_ in range(repeat):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                start = time.perf_counter()
                result = funcs[name]()
                times[name].append(time.perf_counter() - start)
                del result  # free a fresh result before the next contender allocates
    finally:
        if enabled:
            gc.enable()
    return times


def compare(
    case: str,
    size: int,
    dml: tuple[str, Callable[[], Any]],
    peers: Sequence[tuple[str, Callable[[], Any], float | None]],
    repeat: int,
    notes: Sequence[str] = (),
    warmup: int = 1,
) -> Row:
    """Time dmlbridge against its peers (name, function, limit on dmlbridge/peer) and make a Row of medians."""
    funcs = {dml[0]: dml[1]} | {name: fn for name, fn, _ in peers}
    times = interleaved(funcs, repeat, warmup)
    return Row(
        case,
        size,
        dml[0],
        median(times[dml[0]]),
        peers=[Peer(name, median(times[name]), limit, times[name]) for name, _, limit in peers],
        runs=times[dml[0]],
        notes=list(notes),
    )


def run_child(job: dict[str, Any], in_process: bool = False, timeout: float = 900) -> dict[str, Any]:
    """Run one job of ``benchmarks.child`` in a fresh interpreter; returns its JSON report (seconds, RSS).

    ``in_process`` (the quick run) runs it in this process instead: the code path without the 1-2 s of a fresh
    interpreter's imports, its times and peaks meaningless (the quick run's verdicts say nothing anyway).
    """
    if in_process:
        from benchmarks import child

        return child.run(job)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.child", json.dumps(job)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child job {job.get('kind')} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def machine() -> dict[str, Any]:
    """The machine and library versions the numbers belong to."""
    import ml_dtypes
    import onnx

    info: dict[str, Any] = {
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": np.__version__,
        "onnx": onnx.__version__,
        "ml_dtypes": ml_dtypes.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    try:
        import onnx_ir

        info["onnx_ir"] = onnx_ir.__version__
    except ImportError:
        info["onnx_ir"] = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / (1 << 20), 1)
                break
        info["load_average"] = list(os.getloadavg())
    except OSError:
        pass
    import dmlbridge

    info["dmlbridge"] = dmlbridge.__version__
    return info


def _size(n: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"


def _value(value: float, unit: str) -> str:
    if unit == "MiB":
        return f"{value:.0f} MiB" if value >= 10 else f"{value:.1f} MiB"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.1f} µs"


def _target(limit: float | None) -> str:
    if limit is None:
        return ""
    if limit < 1:
        return f"≤ {limit:.2f} (≥ {1 / limit:.0f}× faster)"
    return f"≤ {limit:g}"


def _verdict(ok: bool | None) -> str:
    return "" if ok is None else ("yes" if ok else "MISSED")


def table(rows: Sequence[Row], skipped: Sequence[Skipped], markdown: bool = False) -> str:
    """One table: case, size, dmlbridge value, each peer's value, dmlbridge/peer ratio, target, met."""
    header = ["case", "size", "dmlbridge", "time", "peer", "peer time", "dml/peer", "target", "met"]
    lines: list[list[str]] = []
    for row in rows:
        first = [row.case, _size(row.size), row.dml_name, _value(row.dml, row.unit)]
        extra = []
        if row.abs_limit is not None:
            extra.append(f"≤ {_value(row.abs_limit, row.unit)}: {_verdict(row.dml <= row.abs_limit)}")
        extra += [f"{name}: {_verdict(ok)}" for name, ok in row.checks.items()]
        if not row.peers:
            lines.append([*first, "", "", "", "; ".join(extra), _verdict(row.met())])
            continue
        for i, peer in enumerate(row.peers):
            ok = peer.met(row.dml)
            ratio = peer.ratio(row.dml)
            target = _target(peer.limit)
            if i == 0 and extra:
                target = "; ".join([t for t in [target, *extra] if t])
                ok = row.met() if ok is None else (ok and bool(row.met()))
            lines.append(
                [
                    *(first if i == 0 else [""] * 4),
                    peer.name,
                    _value(peer.value, row.unit),
                    "—" if ratio is None else f"{ratio:.2f}",
                    target,
                    _verdict(ok),
                ]
            )
    lines += [[s.case, "", "skipped", "", s.reason, "", "", "", ""] for s in skipped]
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |" for line in lines]
        return "\n".join(out)
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(header)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*line).rstrip() for line in lines]
    return "\n".join(out)
