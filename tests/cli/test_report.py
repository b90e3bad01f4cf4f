"""What ``dmlbridge inspect``, ``table`` and ``demo`` print fits the terminal: COLUMNS, else the terminal's width,
else 120 columns, never fewer than 40; keys and shapes are cut in their middle and marked, free text is cut at its
end or wrapped, and ``--wide`` prints everything in full. ``--json`` and ``--markdown`` are never cut."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from builders import model_of
from onnx import numpy_helper

import dmlbridge
import dmlbridge.cli.commands
from dmlbridge.cli.report import MARK, MIN_WIDTH, _elide_middle, _elide_shape, _width, format_plan, format_table
from dmlbridge.placement.options import PlanOptions
from dmlbridge.placement.selection import EVERY_CONSTANT
from dmlbridge.plan.upload_plan import plan_with_notes

# Keys as long as real exports make them (and longer), on 8-D constants.
LONG_KEYS = [f"model.decoder.transformer_blocks.{layer}.very_long_component_name_for_testing.{part}"
             for layer in range(3) for part in ("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                                "mlp.down_proj.bias")]
HUGE_KEY = "start." + "x" * 300 + ".end"


@pytest.fixture(scope="module")
def long_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    inits = [numpy_helper.from_array(np.ones((1, 2, 1, 3, 1, 1, 2, 5), np.float16), key) for key in LONG_KEYS]
    inits.append(numpy_helper.from_array(np.ones((1, 3, 1, 1, 1, 1, 224, 224), np.int8), HUGE_KEY))
    inits.append(numpy_helper.from_array(np.ones((7, 6, 5, 4, 3, 2, 1, 8), np.float32), "权重.weight"))
    path = tmp_path_factory.mktemp("long") / "long.onnx"
    onnx.save(model_of(inits), path)
    return path


def output(capsys: pytest.CaptureFixture[str], *args: str | Path) -> str:
    """What the command line prints on stdout, run in this process (it must succeed)."""
    assert dmlbridge.cli.commands.main([str(a) for a in args]) == 0
    return capsys.readouterr().out


def commands(sample: Path, long_model: Path) -> dict[str, list[str | Path]]:
    return {"inspect sample": ["inspect", sample], "inspect long": ["inspect", long_model],
            "inspect notes": ["inspect", sample, "--feature-level", "2.0"], "table": ["table"],
            "table 6.2": ["table", "--feature-level", "6.2", "--unsupported", "FLOAT16"], "demo": ["demo"]}


@pytest.mark.parametrize("columns", ["80", "120", None, "40"])
def test_every_line_fits_the_width(sample: Path, long_model: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch, columns: str | None) -> None:
    """COLUMNS=80, 120 and 40, and no COLUMNS with stdout piped (120): every line of every command fits, where the
    full output (--wide) does not."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    width = int(columns or 120)
    for name, args in commands(sample, long_model).items():
        fitted = output(capsys, *args).splitlines()
        wide = output(capsys, *args, "--wide").splitlines()
        assert max(map(_width, fitted)) <= width, (name, max(fitted, key=_width))
        assert max(map(_width, wide)) > width, name
        assert "".join(fitted).count("skipped") == "".join(wide).count("skipped"), name  # no row lost


def test_cut_keys_keep_their_start_and_end(long_model: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Each key is printed whole, or as its start, the marker and its end; so are shapes, by whole dimensions."""
    keys = [*LONG_KEYS, HUGE_KEY, "权重.weight"]
    for columns in ("120", "80", "40"):
        monkeypatch.setenv("COLUMNS", columns)
        words = output(capsys, "inspect", long_model).split()
        for key in keys:
            shown = [w for w in words if w == key or (
                MARK in w and key.startswith(w.split(MARK)[0]) and key.endswith(w.split(MARK)[1]))]
            assert shown, (columns, key)
            assert all(w == key or min(map(len, w.split(MARK))) >= 4 for w in shown), (columns, shown)
        assert any(MARK in w and w.startswith("model.decoder.") and w.endswith("q_proj.weight") for w in words)
        shapes = [w for w in words if w.startswith("1x3x1") or w.startswith("7x6x")]
        assert len(shapes) == 2, (columns, shapes)
        for shape, full in zip(shapes, ("1x3x1x1x1x1x224x224", "7x6x5x4x3x2x1x8"), strict=True):
            head, _, tail = shape.partition(MARK)
            assert full.startswith(head) and full.endswith(tail), (columns, shape)
            assert shape == full or (head.endswith("x") and tail.startswith("x")), shape  # never part of a number


def test_wide_prints_todays_full_output(sample: Path, long_model: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    for model in (sample, long_model):
        wide = output(capsys, "inspect", model, "--wide")
        plan, notes = plan_with_notes(model, PlanOptions.check(), EVERY_CONSTANT, strict=False)
        assert wide == format_plan(plan, None, notes) + "\n"
        assert MARK not in wide
    assert all(key in wide.split() for key in [*LONG_KEYS, HUGE_KEY])
    assert output(capsys, "table", "--wide") == format_table(dmlbridge.mapping_table(), markdown=False) + "\n"
    demo = output(capsys, "demo", "--wide")
    assert "\n  " not in demo and MARK not in demo


def test_json_and_markdown_are_never_cut(long_model: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    doc = json.loads(output(capsys, "inspect", long_model, "--json"))
    assert [e["key"] for e in doc["entries"]] == [*LONG_KEYS, HUGE_KEY, "权重.weight"]
    markdown = output(capsys, "table", "--markdown")
    assert markdown == format_table(dmlbridge.mapping_table(), markdown=True) + "\n"
    assert max(map(len, markdown.splitlines())) > 100


def test_a_narrow_terminal_is_taken_as_the_minimum(sample: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Below 40 columns the output is the 40-column one; COLUMNS that is not a number is ignored."""
    assert MIN_WIDTH == 40
    monkeypatch.setenv("COLUMNS", "40")
    at_40 = [output(capsys, "inspect", sample), output(capsys, "table")]
    for columns in ("12", "1"):
        monkeypatch.setenv("COLUMNS", columns)
        assert [output(capsys, "inspect", sample), output(capsys, "table")] == at_40
    monkeypatch.setenv("COLUMNS", "wide")
    at_120 = output(capsys, "inspect", sample)
    monkeypatch.setenv("COLUMNS", "120")
    assert output(capsys, "inspect", sample) == at_120


def test_a_terminals_own_width_is_used_without_columns(sample: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(shutil, "get_terminal_size", lambda fallback=(80, 24): os.terminal_size((90, 30)))
    lines = output(capsys, "inspect", sample).splitlines()
    assert max(map(_width, lines)) <= 90 < max(map(_width, output(capsys, "inspect", sample, "--wide").splitlines()))


def test_columns_give_way_in_order(sample: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """At 120 columns the demo's origins are cut and its keys kept; inspect's notes wrap, whole; at 80 each
    constant takes two lines, its key then the rest; the mapping table's reasons wrap, whole."""
    monkeypatch.setenv("COLUMNS", "120")
    lines = output(capsys, "demo").splitlines()
    assert lines[4].split()[:4] == ["key", "origin", "ONNX", "shape"]
    row = next(line for line in lines if line.startswith("branch/else_branch/else_bias "))
    assert f"Constant node 'else_c{MARK}" in row  # the origin, cut at its end
    assert "qdq/zero_points " in "\n".join(lines)
    noted = output(capsys, "inspect", sample, "--feature-level", "2.0")
    assert " ".join(noted.split()).count("unchecked: values must fit 32 bits") == 2
    assert " ".join(noted.split()).count("unchecked: external data") == 1
    monkeypatch.setenv("COLUMNS", "80")
    lines = output(capsys, "inspect", sample).splitlines()
    at = lines.index("branch/else_branch/else_bias")
    assert lines[at + 1:at + 3] == ["  Constant node 'else_const' (value): INT32 3 -> INT32 native, buffer 0,",
                                    "    offset 25088, 12 bytes"]  # (a label stays with its value)
    table = output(capsys, "table")
    reason = "DirectML has no BFLOAT16; FLOAT32 holds every value exactly; codes below 2^-126 become FLOAT32 subnormals"
    assert reason in " ".join(table.split())
    monkeypatch.setenv("COLUMNS", "40")
    assert "BFLOAT16 (ONNX 16) -> FLOAT32 widen," in output(capsys, "table").splitlines()


def test_help_names_the_width_the_marker_and_wide(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("inspect", "table", "demo"):
        with pytest.raises(SystemExit):
            dmlbridge.cli.commands.main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--wide" in text and "COLUMNS" in text and "120 columns" in text and "at least 40" in text, command
        if command != "table":
            assert f"marked with {MARK}" in text and f"model.layers.0{MARK}q_proj.weight" in text, command


def test_every_command_is_in_the_help_test() -> None:
    """test_commands.py's help test covers every subcommand (each has an example and its exit codes)."""
    source = (Path(__file__).parent / "test_commands.py").read_text(encoding="utf-8")
    listed = source.split('@pytest.mark.parametrize("command", ', 1)[1].split("]", 1)[0]
    assert sorted(dmlbridge.cli.commands.build_parser().commands) == sorted(json.loads(listed + "]"))


def test_the_cutting_rules() -> None:
    assert _elide_middle("model.layers.0.self_attn.q_proj.weight", 20) == f"model.lay{MARK}roj.weight"
    assert _elide_middle("权重权重权重权重", 7) == f"权重{MARK}重"  # (two columns a character)
    assert _width(_elide_middle("权重权重权重权重", 8)) <= 8
    assert _elide_shape("1x3x1x1x1x1x224x224", 12) == f"1x3x1x{MARK}x224"
    assert _elide_shape("1x3x1x1x1x1x224x224", 19) == "1x3x1x1x1x1x224x224"
    assert _elide_shape("151936x3072", 10) == f"151936x{MARK}"
    assert _elide_shape("151936x3072", 5) == MARK
