"""Cases 5-6 of the performance issue: whole-model conversion (time and peak RSS) and many small constants."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benchmarks import diy
from benchmarks.harness import MiB, Peer, Row, Settings, Skipped, compare, median, run_child
from dmlbridge import convert_model

Result = list[Row | Skipped]
OPSET = 21  # Identity takes INT4 and FLOAT8 from opset 21


def _external(tensor: TensorProto, location: str, offset: int, length: int) -> None:
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def make_external_model(folder: Path, count: int, tensor_bytes: int, mixed: bool = False, seed: int = 0) -> Path:
    """``folder/model.onnx`` with ``count`` initializers of ``tensor_bytes`` each in ``folder/model.data``.

    float32 tensors, or (``mixed``) half INT4 and half FLOAT8E4M3FN. Each initializer feeds an Identity whose
    output is a graph output, so the model is valid ONNX.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    inits, nodes, outputs = [], [], []
    offset = 0
    with open(folder / "model.data", "wb") as f:
        for i in range(count):
            if mixed and i % 2:
                dtype, elements = TensorProto.FLOAT8E4M3FN, tensor_bytes
                rng.integers(0, 256, tensor_bytes, dtype=np.uint8).tofile(f)
            elif mixed:
                dtype, elements = TensorProto.INT4, 2 * tensor_bytes
                rng.integers(0, 256, tensor_bytes, dtype=np.uint8).tofile(f)
            else:
                dtype, elements = TensorProto.FLOAT, tensor_bytes // 4
                rng.random(elements, dtype=np.float32).tofile(f)
            shape = [elements // 1024, 1024] if elements % 1024 == 0 else [elements]
            tensor = TensorProto(name=f"w{i}", data_type=dtype, dims=shape)
            _external(tensor, "model.data", offset, tensor_bytes)
            offset += tensor_bytes
            inits.append(tensor)
            nodes.append(helper.make_node("Identity", [f"w{i}"], [f"y{i}"]))
            outputs.append(helper.make_tensor_value_info(f"y{i}", dtype, shape))
    graph = helper.make_graph(nodes, "external", [], outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def make_constants_model(folder: Path, count: int, seed: int = 0) -> Path:
    """``folder/many.onnx``: ``count`` tiny constants, half Constant nodes (float_data), half initializers (raw)."""
    folder.mkdir(parents=True, exist_ok=True)
    values = np.random.default_rng(seed).random((count, 4), dtype=np.float32)
    nodes, inits = [], []
    for i in range(count // 2):
        nodes.append(
            helper.make_node(
                "Constant", [], [f"c{i}"], value=helper.make_tensor(f"c{i}", TensorProto.FLOAT, [4], values[i])
            )
        )
    for i in range(count // 2, count):
        inits.append(numpy_helper.from_array(values[i], f"i{i}"))
    nodes.append(helper.make_node("Identity", ["c0"], ["y"]))
    graph = helper.make_graph(
        nodes, "many", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], initializer=inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    path = folder / "many.onnx"
    path.write_bytes(model.SerializeToString())
    return path


# The two ways convert_model runs: without fsync (compared with shutil.copyfile, the floor of the target:
# every byte read once and written once) and with it, the default (compared with copyfile + fsync).
NO_FSYNC = "convert_model(fsync=False)"
FSYNC = "convert_model()"
SPLIT = "convert_model(fsync=False, max_buffer_bytes=image/4)"


def size_of(count: int, settings: Settings) -> int:
    """The bytes of ``count`` tensors of the settings' size."""
    return count * settings.model_tensor_bytes


def _contenders(model: Path, out: Path) -> dict[str, dict[str, Any]]:
    """The child jobs of case 5, by name: the file floors, convert_model both ways, the do-it-yourself converters.

    The order is the order of each A B A B round: each convert_model next to its floor.
    """
    data, copy = os.fspath(model.parent / "model.data"), os.fspath(out) + ".copy"
    convert = {"kind": "dmlbridge", "model": os.fspath(model), "out": os.fspath(out)}
    jobs: dict[str, dict[str, Any]] = {
        "shutil.copyfile": {"kind": "copyfile", "src": data, "dst": copy},
        NO_FSYNC: {**convert, "fsync": False},
        # convert_model() fsyncs its outputs before renaming them into place; this floor does the same.
        "copyfile + fsync": {"kind": "copyfile_fsync", "src": data, "dst": copy},
        FSYNC: convert,
        "DIY onnx": {"kind": "diy_onnx", "model": os.fspath(model), "out": os.fspath(out)},
    }
    try:
        import onnx_ir  # noqa: F401

        jobs["DIY onnx_ir"] = {"kind": "diy_onnx_ir", "model": os.fspath(model), "out": os.fspath(out)}
    except ImportError:
        pass
    return jobs


def _clean(out: Path) -> None:
    """Remove what a run wrote (every buffer file too): each run converts into an empty prefix, as each copy
    writes a new file."""
    for path in [*out.parent.glob(out.name + ".*"), *out.parent.glob("." + out.name + ".*")]:  # (hidden too)
        if path.name != out.name + ".lock":
            path.unlink(missing_ok=True)


def _ab_runs(jobs: dict[str, dict[str, Any]], rounds: int, out: Path, warm: int = 0,
             in_process: bool = False) -> dict[str, list[dict[str, Any]]]:
    """A B A B: each round runs every contender once, each in a fresh child; outputs are removed after each run.
    ``warm``: before each, a child writes and deletes a scratch file of that many bytes, so that every contender
    starts with warm free memory (see benchmarks/performance_cases.py: on a virtual machine whose host takes back
    freed memory, a run that follows nothing meets cold pages, 2-3 s per GiB, whoever it is). ``in_process``: the
    quick run's jobs, in this process (see ``run_child``)."""
    reports: dict[str, list[dict[str, Any]]] = {name: [] for name in jobs}
    for _ in range(rounds):
        for name, job in jobs.items():
            try:
                if warm:
                    run_child({"kind": "warm", "bytes": warm, "path": os.fspath(out.parent / "scratch.bin")})
                reports[name].append(run_child(job, in_process))
            finally:
                _clean(out)
    return reports


def _series(reports: dict[str, list[dict[str, Any]]], name: str, key: str) -> list[float]:
    return [r[key] for r in reports[name]]


def _time_row(
    case: str,
    size: int,
    reports: dict[str, list[dict[str, Any]]],
    dml: str,
    peers: Mapping[str, float | None],
    notes: list[str],
) -> Row:
    """A wall-time row: the convert_model job ``dml`` against ``peers`` (name -> limit on dml/peer), those run."""
    runs = _series(reports, dml, "seconds")
    row = Row(case, size, dml, median(runs), runs=runs, notes=notes)
    for name, limit in peers.items():
        if name in reports:
            times = _series(reports, name, "seconds")
            row.peers.append(Peer(name, median(times), limit, times))
    return row


def _rss_row(case: str, size: int, reports: dict[str, list[dict[str, Any]]], dml: str, rss_limit: float | None) -> Row:
    """A peak-RSS-growth row: ``dml`` against the other converters (the file copies are not converters)."""
    growth = _series(reports, dml, "rss_growth_mib")
    row = Row(case, size, dml, median(growth), unit="MiB", abs_limit=rss_limit, runs=growth)
    for name in reports:
        if name != dml and name.startswith("DIY"):
            peer = _series(reports, name, "rss_growth_mib")
            row.peers.append(Peer(name, median(peer), None, peer))
    return row


def models(settings: Settings) -> Result:
    """Case 5: convert_model of an external-data model against copyfile and the do-it-yourself converters."""
    folder = settings.workdir / "case5"
    out = folder / "out"
    total = settings.model_tensors * settings.model_tensor_bytes
    what = f"{settings.model_tensors} × {settings.model_tensor_bytes // MiB or settings.model_tensor_bytes} "
    what += "MiB" if settings.model_tensor_bytes >= MiB else "B"
    runs = "each run in a fresh process, A B A B, page cache warm, each after a warm-up of free memory"
    rows: Result = []
    try:
        model = make_external_model(folder, settings.model_tensors, settings.model_tensor_bytes)
        warm = 0 if settings.quick else total + 256 * MiB  # (the quick run checks code paths, not times)
        reports = _ab_runs(_contenders(model, out), settings.model_rounds, out, warm, settings.quick)
        case = "5 convert float32 external"
        rows += [
            _time_row(
                f"{case} wall time, no fsync", total, reports, NO_FSYNC,
                {"shutil.copyfile": 1.3, "DIY onnx": 1.0, "DIY onnx_ir": 1.0},
                [f"{what} float32 tensors; {runs}; the do-it-yourself converters do not fsync either"],
            ),
            _time_row(
                f"{case} wall time, fsync", total, reports, FSYNC, {"copyfile + fsync": None},
                ["the default: outputs flushed to the disk before they are renamed into place"],
            ),
            _rss_row(f"{case} peak RSS growth", total, reports, FSYNC, 256.0),
        ]
        shutil.rmtree(folder)
        model = make_external_model(folder, settings.model_tensors, settings.model_tensor_bytes, mixed=True)
        jobs = _contenders(model, out)
        if settings.quick:  # the code path only: one child instead of six
            jobs = {FSYNC: jobs[FSYNC]}
        reports = _ab_runs(jobs, max(1, settings.model_rounds - 2), out, warm * 3 // 2, settings.quick)
        case = "5 convert INT4+FLOAT8 external"
        notes = ["half INT4 (copied as they are), half FLOAT8E4M3FN (widened to FLOAT16: 1.5× the bytes out)"]
        if NO_FSYNC in reports:
            rows.append(
                _time_row(f"{case} wall time, no fsync", total, reports, NO_FSYNC,
                          {"shutil.copyfile": None, "DIY onnx": None, "DIY onnx_ir": None}, notes)
            )
        rows += [
            _time_row(f"{case} wall time, fsync", total, reports, FSYNC, {"copyfile + fsync": None},
                      [] if NO_FSYNC in reports else notes),
            _rss_row(f"{case} peak RSS growth", total, reports, FSYNC, None),
        ]
        if settings.large_model:
            shutil.rmtree(folder)
            count = 4 * settings.model_tensors
            model = make_external_model(folder, count, settings.model_tensor_bytes)
            jobs = _contenders(model, out)
            chosen = ("shutil.copyfile", NO_FSYNC, "copyfile + fsync", FSYNC)
            # The same image in buffers of a quarter of its size (1 GiB of 4 GiB, 16 MiB of 64 MiB when quick).
            jobs[SPLIT] = {**jobs[NO_FSYNC], "max_buffer_bytes": size_of(count, settings) // 4}
            reports = _ab_runs({k: jobs[k] for k in (*chosen, SPLIT)}, 1, out, warm=warm * 4)
            case = "5 convert float32 external ×4"
            size = count * settings.model_tensor_bytes
            rows += [
                _time_row(f"{case} wall time, no fsync", size, reports, NO_FSYNC, {"shutil.copyfile": 1.3},
                          ["memory must not grow with the model"]),
                _time_row(f"{case} wall time, fsync", size, reports, FSYNC, {"copyfile + fsync": None}, []),
                _rss_row(f"{case} peak RSS growth", size, reports, FSYNC, 256.0),
                _time_row(f"{case} in 4 buffers, no fsync", size, reports, SPLIT, {"shutil.copyfile": 1.3},
                          ["max_buffer_bytes a quarter of the image: four buffer files"]),
                _rss_row(f"{case} in 4 buffers, peak RSS growth", size, reports, SPLIT, 256.0),
            ]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def constants(settings: Settings) -> Result:
    """Case 6: a model of many tiny constants converts in ≤ 3× the time onnx.load takes to parse it."""
    folder = settings.workdir / "case6"
    try:
        model = make_constants_model(folder, settings.small_constants)
        out = os.fspath(folder / "out")
        path = os.fspath(model)
        peers: list[tuple[str, Callable[[], Any], float | None]] = [
            ("onnx.load", lambda: onnx.load(path), 3.0),
            ("DIY onnx", lambda: diy.convert_with_onnx(path, out + "-diy"), None),
        ]
        try:
            import onnx_ir  # noqa: F401

            peers.append(("DIY onnx_ir", lambda: diy.convert_with_onnx_ir(path, out + "-ir"), None))
        except ImportError:
            pass
        repeat = settings.repeat  # 9 rounds: its verdict sits near the target, and single rounds swing by 15 %
        notes = [f"{settings.small_constants} float32[4] constants: half Constant nodes, half initializers"]
        # The target row leaves out fsync: onnx.load writes nothing, and the target is about per-constant work, not
        # about how long this disk takes to flush 2 files. The default call (fsync=True) is the next row.
        row = compare(
            "6 many constants convert_model, no fsync",
            model.stat().st_size,
            (NO_FSYNC, lambda: convert_model(path, out, progress=False, fsync=False)),
            peers,
            repeat,
            notes=notes,
        )
        synced = compare(
            "6 many constants convert_model, fsync",
            model.stat().st_size,
            (FSYNC, lambda: convert_model(path, out, progress=False)),
            [("onnx.load", lambda: onnx.load(path), None)],
            repeat,
        )
        plan = convert_model(path, out, progress=False)
        row.checks["every constant converted"] = len(plan.converted) == settings.small_constants
        return [row, synced]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
