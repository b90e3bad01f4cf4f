"""The main job end to end, as a user runs it, on every system the suite runs on (Linux, and Windows' own CPython
in CI): from Python and from the command line, convert, convert again, convert again while a reader holds the
plan, load with verification, verify, write the binding list, clean, and the demo, each with the outcome
docs/guide.md states (its "Windows" section says what differs there: a file a plan holds open is removed when the
plan closes it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import onnx
from command_line import run
from models import build_model, same_values
from onnx import numpy_helper

import dmlbridge
from dmlbridge import convert_model, load_plan

WINDOWS = sys.platform == "win32"


def _buffer_names(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".bin") and not name.startswith("sample"))


def test_the_main_job_from_python(tmp_path: Path) -> None:
    """Several buffer files, two workers, a checksum and fsync; a re-conversion while a reader holds the first
    plan: the reader keeps its own values, the new plan reads the new ones, and once the reader is closed only the
    new conversion's files are in the folder."""
    path, expected = build_model(tmp_path)
    prefix = tmp_path / "w"
    options = {"max_buffer_bytes": 4096, "workers": 2, "checksum": True, "progress": False}
    first = convert_model(path, prefix, **options)
    assert len(first.buffers) > 1
    first.close()
    reader = load_plan(f"{prefix}.json", verify=True)
    assert all(same_values(reader.array(key), expected[key]) for key, entry in reader.entries.items()
               if key in expected and entry.skipped is None)
    old_names = _buffer_names(tmp_path)

    changed = tmp_path / "changed.onnx"  # (edited with onnx itself, as a user would; its external data is shared)
    model = onnx.load(path, load_external_data=False)
    weight = next(t for t in model.graph.initializer if t.name == "t_float")
    new_values = numpy_helper.to_array(weight) + 1
    weight.CopyFrom(numpy_helper.from_array(new_values, "t_float"))
    onnx.save(model, changed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (removing what the reader holds is no failure, on either system)
        second = convert_model(changed, prefix, **options)
    assert same_values(reader.array("t_float"), expected["t_float"])  # the reader's own bytes
    with load_plan(f"{prefix}.json", verify=True) as fresh:
        assert same_values(fresh.array("t_float"), new_values)
        fresh.verify(changed)
    if not WINDOWS:  # (on Windows the removal of a file a plan holds is pending until the plan closes it)
        assert not set(old_names) & set(_buffer_names(tmp_path))
    reader.close()
    second.close()
    assert _buffer_names(tmp_path) == sorted(os.path.basename(b.path) for b in second.buffers)
    assert dmlbridge.clean(prefix) == dmlbridge.CleanReport((), 0, (), ())  # nothing left to clean


def test_the_main_job_on_the_command_line(tmp_path: Path) -> None:
    """demo --keep, inspect, convert twice, verify, bindings, clean and table, each exiting 0 with its output."""
    demo = run("demo", "--keep", tmp_path / "demo")
    assert demo.returncode == 0, demo.stderr
    model = tmp_path / "demo" / "sample.onnx"
    assert model.exists()
    assert run("inspect", model).returncode == 0
    for _ in range(2):  # (the second one replaces the first)
        converted = run("convert", model, "-o", tmp_path / "w", "--checksum", "--quiet", "--workers", "2")
        assert converted.returncode == 0, converted.stderr
    manifest = json.loads((tmp_path / "w.json").read_text())
    assert _buffer_names(tmp_path) == sorted(b["file"] for b in manifest["buffers"])
    verified = run("verify", tmp_path / "w.json", model)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    listed = run("bindings", tmp_path / "w.json", "-o", tmp_path / "w.bindings")
    assert listed.returncode == 0, listed.stderr
    assert (tmp_path / "w.bindings").read_text().strip()
    cleaned = run("clean", tmp_path / "w")
    assert cleaned.returncode == 0, cleaned.stderr
    assert run("table").returncode == 0
    assert run("convert", tmp_path / "missing.onnx", "-o", tmp_path / "x").returncode == 2


def test_the_binding_list_on_standard_output_ends_its_lines_in_a_newline_alone(tmp_path: Path) -> None:
    """`dmlbridge bindings PREFIX.json > FILE` writes the list native programs read, whose lines end in \\n alone:
    also on Windows, whose text streams would write \\r\\n."""
    path, _ = build_model(tmp_path)
    convert_model(path, tmp_path / "w", progress=False).close()
    listed = subprocess.run([sys.executable, "-m", "dmlbridge", "bindings", str(tmp_path / "w.json")],
                            capture_output=True, timeout=600, check=True)
    assert listed.stdout.count(b"\n") > 3 and b"\r" not in listed.stdout
    assert listed.stdout.decode("ascii") == dmlbridge.binding_list(load_plan(tmp_path / "w.json"))
