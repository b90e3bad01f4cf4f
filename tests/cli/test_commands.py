"""The ``dmlbridge`` command line, run in this process (tests/helpers/command_line.py): exit statuses, stdout,
one-line errors on stderr, and ``--json`` output parsed. What only a child process shows is in test_process.py."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from builders import model_of
from command_line import one_line_error, run
from models import buffer_path, output_names, outputs
from onnx import TensorProto, numpy_helper
from system_calls import short_name, symlinks_work

import dmlbridge
from dmlbridge import plan_model
from dmlbridge.cli import commands
from dmlbridge.cli.demo import build_sample_model
from dmlbridge.placement.selection import CONSTANT_KINDS


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"dmlbridge {dmlbridge.__version__}"


def test_table_still_works() -> None:
    result = run("table")
    assert result.returncode == 0 and "INT4" in result.stdout and result.stderr == ""


def test_inspect_text(sample: Path) -> None:
    result = run("inspect", sample, "--wide")  # (one line a row and a sentence: test_report.py fits them)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["key", "origin", "ONNX", "shape"]
    rows = {line.split()[0]: line for line in lines[1:]
            if line and not line.startswith(("skipped", "41 ", "buffer ", "quantized ", "read on "))}
    assert "branch/then_branch/then_bias" in rows and "scale" in rows and "weight" in rows
    assert rows["w_int2"].split()[-5:-2] == ["INT4", "widen", "0"]  # (DML, conversion, buffer)
    assert lines[-5].startswith("buffer 0: ") and lines[-5].endswith(", 40 tensors")
    assert [line.split()[1] for line in lines[-4:-1]] == ["'qmatmul':", "'qdq':", "'qgather':"]
    assert "skipped 'labels': STRING: DirectML has no string tensors" in lines
    assert lines[-1].startswith("41 constants: 40 converted") and lines[-1].endswith("; 3 quantized weights")


def test_inspect_json_is_the_plan(sample: Path) -> None:
    result = run("inspect", sample, "--json", "--feature-level", "6.2", "--min-dims", "4", "--alignment", "64")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    entries = {e["key"]: e for e in doc["entries"]}
    assert entries["w_int4"]["dml_type"] == "INT8" and entries["w_int4"]["conversion"] == "widen"
    assert entries["w_int4"]["desc"]["Sizes"] == [1, 1, 1, 5]
    assert entries["labels"]["skipped"] and entries["labels"]["offset"] is None
    assert len(doc["entries"]) == 44  # (at 6.2 the 4-bit weights of the quantized nodes have 8-bit entries)
    assert doc["totals"] == {"constants": 44, "converted": 43, "skipped": 1,
                             "tensor_bytes": sum(e["desc"]["TotalTensorSizeInBytes"] for e in doc["entries"]
                                                 if e["desc"]),
                             "total_size": doc["total_size"], "buffer_sizes": doc["totals"]["buffer_sizes"],
                             "upload_size": doc["totals"]["buffer_sizes"][0], "reads_on": doc["totals"]["reads_on"]}
    # (the sample's Reshape shape, read on the CPU, in a buffer of its own after the uploaded one)
    assert sum(doc["totals"]["buffer_sizes"]) == doc["total_size"] and len(doc["totals"]["buffer_sizes"]) == 2
    places = doc["totals"]["reads_on"]  # (where each converted constant is read, as its consumers say)
    assert sum(p["constants"] for p in places.values()) == 43 and set(places) == {"gpu", "cpu", "none"}
    assert sum(p["bytes"] for p in places.values()) == doc["totals"]["tensor_bytes"]
    from dmlbridge.types.target import Target

    expected = plan_model(sample, target=Target(feature_level="6.2"), min_dims=4, alignment=64).manifest()
    del doc["totals"]
    assert doc == expected
    assert not list(sample.parent.glob("*.dml.*"))  # inspect writes nothing


def test_convert_default_prefix_then_verify(sample: Path, tmp_path: Path) -> None:
    model = tmp_path / "sample.onnx"
    model.write_bytes(sample.read_bytes())
    (tmp_path / "sample.weights").write_bytes((sample.parent / "sample.weights").read_bytes())
    result = run("convert", model)
    assert result.returncode == 0, result.stderr
    buffer = buffer_path(tmp_path / "sample.dml")
    assert buffer.exists() and (tmp_path / "sample.dml.json").exists()
    assert "wrote" in result.stdout and buffer.name in result.stdout
    assert "skipped 'labels'" in result.stderr and "Traceback" not in result.stderr
    doc = json.loads((tmp_path / "sample.dml.json").read_text())
    assert doc["alignment"] == 256 and doc["buffers"][0]["sha256"] is None

    ok = run("verify", tmp_path / "sample.dml.json", model)
    assert ok.returncode == 0 and ok.stdout.startswith("ok: 40 converted constants match"), ok.stderr
    data = bytearray(buffer.read_bytes())
    data[doc["entries"][0]["offset"]] ^= 0x40
    buffer.write_bytes(bytes(data))
    bad = run("verify", tmp_path / "sample.dml.json", model)
    assert bad.returncode == 1 and "mismatch: 'w_float'" in bad.stderr and "FAILED: 2 mismatches" in bad.stderr
    assert "fingerprint" in bad.stderr  # the buffer file no longer matches its manifest's sampled fingerprint


def test_convert_options_reach_the_manifest(small: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "out" / "plan"
    prefix.parent.mkdir()
    result = run("convert", small, "-o", prefix, "--unsupported", "INT64,UINT64,FLOAT16", "--int64", "narrow",
                 "--alignment", "16", "--min-dims", "4", "--checksum", "--quiet", "--feature-level", "6.2")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""
    doc = json.loads(prefix.with_suffix(".json").read_text())
    assert doc["alignment"] == 16 and doc["min_dims"] == 4 and len(doc["buffers"][0]["sha256"]) == 64
    assert doc["target"]["feature_level"] == "6.2" and doc["target"]["int64"] == "narrow"
    assert "INT64" not in doc["target"]["supported"] and "FLOAT16" not in doc["target"]["supported"]
    entries = {e["key"]: e for e in doc["entries"]}
    assert (entries["ids"]["dml_type"], entries["ids"]["conversion"]) == ("INT32", "narrow")
    assert (entries["half"]["dml_type"], entries["half"]["conversion"]) == ("FLOAT32", "widen")
    assert entries["w"]["desc"]["Sizes"] == [1, 1, 1, 2]
    assert [e["offset"] for e in doc["entries"]] == [0, 16, 48]
    verified = run("verify", prefix.with_suffix(".json"), small)
    assert verified.returncode == 0 and "SHA-256 matches" in verified.stdout
    data = bytearray(buffer_path(prefix).read_bytes())
    data[-1] ^= 1
    buffer_path(prefix).write_bytes(bytes(data))
    corrupted = run("verify", prefix.with_suffix(".json"), small)  # a buffer file that no longer matches: exit 1
    assert corrupted.returncode == 1 and "fingerprint" in corrupted.stderr and "Traceback" not in corrupted.stderr


def test_convert_no_fsync_writes_the_same_files(small: Path, tmp_path: Path) -> None:
    for prefix, extra in (("a", []), ("b", ["--no-fsync"])):
        result = run("convert", small, "-o", tmp_path / prefix, "--quiet", *extra)
        assert result.returncode == 0 and result.stderr == "", result.stderr
    assert outputs(tmp_path / "a") == outputs(tmp_path / "b")


def test_convert_errors_are_one_line_and_leave_nothing(sample: Path, tmp_path: Path) -> None:
    model = tmp_path / "sample.onnx"
    model.write_bytes(sample.read_bytes())
    (tmp_path / "sample.weights").write_bytes((sample.parent / "sample.weights").read_bytes())
    one_line_error(run("convert", model, "--strict"), "labels", "strict")
    # w_int64 holds 2^40: it cannot be narrowed, and that is found halfway through writing.
    one_line_error(run("convert", model, "--unsupported", "INT64", "--int64", "narrow"), "w_int64", "INT32")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sample.onnx", "sample.weights"]  # (no lock either)


def test_clean_removes_what_a_killed_conversion_left_and_says_what(small: Path, tmp_path: Path) -> None:
    """``dmlbridge clean PREFIX`` (or PREFIX.json) removes the files no manifest lists and prints each, then a
    summary; with nothing left it says so; --quiet prints nothing; errors are one line."""
    assert run("convert", small, "-o", tmp_path / "w", "--quiet").returncode == 0
    dead = [tmp_path / "w.fedcba9876543210.00000.bin", tmp_path / ".w.json.fedcba9876543210.dmlbridge-tmp"]
    for path in dead:
        path.write_bytes(b"x" * 100)
    result = run("clean", tmp_path / "w.json")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.splitlines() == [*(f"removed {p}" for p in sorted(map(str, dead))),
                                          "2 files removed (200 bytes freed)"]
    assert output_names(tmp_path) == ["small.onnx", "w.ID.00000.bin", "w.json"]
    again = run("clean", tmp_path / "w")
    assert again.returncode == 0 and again.stdout == f"nothing to remove: {tmp_path / 'w'} holds no file that " \
        "conversions left behind\n"
    (tmp_path / "w.lock").write_bytes(b"pid 4242 on other-host\n")  # (a stale lock, as a killed conversion leaves it)
    stale = run("clean", tmp_path / "w")
    assert stale.returncode == 0 and stale.stderr == "", stale.stderr
    assert stale.stdout.splitlines() == [f"removed {tmp_path / 'w.lock'}", "1 file removed (23 bytes freed)"]
    assert output_names(tmp_path) == ["small.onnx", "w.ID.00000.bin", "w.json"]
    dead[0].write_bytes(b"x")
    quiet = run("clean", tmp_path / "w", "--quiet")
    assert quiet.returncode == 0 and quiet.stdout == quiet.stderr == "" and not dead[0].exists()
    one_line_error(run("clean", tmp_path / "no" / "such" / "w"), "does not exist")
    (tmp_path / "w.json").write_text("{")
    one_line_error(run("clean", tmp_path / "w"), "cannot tell which buffer files", "nothing was removed")


def test_a_file_left_behind_is_one_line_on_stderr_and_clean_exits_1_when_it_cannot_remove(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A previous buffer file that cannot be removed: convert succeeds (exit 0) with one warning line naming
    ``dmlbridge clean``; clean, meeting the same error, lists the file and exits 1."""
    from dmlbridge.cli.commands import main

    assert main(["convert", str(small), "-o", str(tmp_path / "w"), "--quiet"]) == 0
    old = buffer_path(tmp_path / "w")
    real_unlink = os.unlink

    def failing(path: object, **kwargs: object) -> None:
        if os.path.basename(str(path)) == old.name:
            raise OSError(13, "Permission denied")
        real_unlink(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", failing)
    capsys.readouterr()
    assert main(["convert", str(small), "-o", str(tmp_path / "w"), "--quiet"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("dmlbridge convert: warning: the conversion into ") and \
        f"dmlbridge clean {tmp_path / 'w'}" in err[0] and old.name in err[0], err
    assert main(["clean", str(tmp_path / "w")]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"dmlbridge clean: cannot remove {old}: Permission denied\n"
    assert captured.out == ""
    monkeypatch.undo()
    assert main(["clean", str(tmp_path / "w"), "--quiet"]) == 0 and not old.exists()


def test_demo(tmp_path: Path) -> None:
    result = run("demo")
    assert result.returncode == 0, result.stderr
    assert "verified" in result.stdout and "w_float8e4m3fn" in result.stdout and "branch/else_branch" in result.stdout
    assert "f8 10 07 00" in result.stdout
    kept = run("demo", "--keep", tmp_path / "kept")
    assert kept.returncode == 0, kept.stderr
    assert output_names(tmp_path / "kept") == ["sample.dml.ID.00000.bin", "sample.dml.json", "sample.onnx",
                                               "sample.weights"]  # (no lock: the conversion removed it)


@pytest.mark.parametrize(
    "args, words",
    [
        (["convert", "{tmp}/missing.onnx"], ["missing.onnx", "No such file"]),
        (["inspect", "{tmp}/missing.onnx"], ["missing.onnx"]),
        (["convert", "{tmp}/garbage.onnx"], ["garbage.onnx", "not a valid ONNX model"]),
        (["inspect", "{tmp}/empty.onnx"], ["no graph"]),
        (["convert", "{tmp}"], ["not a regular file"]),
        (["convert", "{small}", "--alignment", "24"], ["alignment"]),
        (["convert", "{small}", "--alignment", "abc"], ["--alignment", "not a byte count"]),
        (["convert", "{small}", "--min-dims", "9"], ["--min-dims must be"]),
        (["convert", "{small}", "--feature-level", "9.9"], ["9.9"]),
        (["convert", "{small}", "--unsupported", "BOGUS"], ["BOGUS"]),
        (["convert", "{small}", "-o", "{tmp}/no/such/dir/x"], ["does not exist"]),
        (["convert", "{small}", "--max-tensor-bytes", "8"], ["--max-tensor-bytes 8"]),
        (["verify", "{tmp}/missing.json", "{small}"], ["missing.json"]),
        (["verify", "{tmp}/garbage.json", "{small}"], ["not valid JSON"]),
        (["frobnicate"], ["invalid choice"]),
        (["convert"], ["required: model"]),
    ],
)
def test_user_errors(small: Path, tmp_path: Path, args: list[str], words: list[str]) -> None:
    (tmp_path / "garbage.onnx").write_bytes(b"\xff\xfe not a model at all")
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "garbage.json").write_text("{not json")
    filled = [a.format(tmp=tmp_path, small=small) for a in args]
    one_line_error(run(*filled), *words)


def test_messages_name_the_commands_flags(small: Path, tmp_path: Path) -> None:
    """An error printed by the command line names its flag, never the Python keyword."""
    model, doubles = tmp_path / "s.onnx", tmp_path / "d.onnx"
    onnx.save(model_of({"s": np.array(["a"], dtype=object)}), model)
    onnx.save(model_of({"d": np.array([1.0, 2.0], np.float64)}), doubles)
    cases = [
        (["convert", model, "-o", tmp_path / "o", "--strict"], ["--strict"]),
        (["convert", small, "-o", tmp_path / "o", "--max-tensor-bytes", "4"], ["--max-tensor-bytes 4"]),
        (["convert", doubles, "-o", tmp_path / "o", "--unsupported", "FLOAT64", "--strict"], ["--allow-lossy"]),
        (["convert", small, "-o", tmp_path / "o", "--feature-level", "2.0", "--min-dims", "1"], ["--min-dims 1"]),
    ]
    for args, words in cases:
        result = run(*args)
        one_line_error(result, *words)
        assert not any(f"{word}=" in result.stderr for word in ("strict", "max_tensor_bytes", "allow_lossy",
                                                                "min_dims", "external_data_root")), result.stderr


def test_output_prefix_forms(small: Path, tmp_path: Path) -> None:
    """-o w.json and -o w.bin mean the prefix w; -o DIR writes DIR/<model>.dml; a prefix under a file says so."""
    for given, prefix in (("w.json", "w"), ("x.bin", "x")):
        assert run("convert", small, "-o", tmp_path / given, "--quiet").returncode == 0
        assert (tmp_path / f"{prefix}.json").exists() and not (tmp_path / f"{given}.json").exists()
    folder = tmp_path / "out"
    folder.mkdir()
    assert run("convert", small, "-o", folder, "--quiet").returncode == 0
    assert (folder / "small.dml.json").exists()
    assert run("convert", small, "-o", ".", "--quiet", cwd=folder).returncode == 0
    assert (folder / "small.dml.json").exists()
    one_line_error(run("convert", small, "-o", small / "w"), "is a file, not a folder")


def test_verify_exits_1_for_every_mismatch_and_2_for_configuration(tmp_path: Path) -> None:
    """A changed byte no fingerprint sample covers is caught by the SHA-256: exit 1, like any mismatch, naming
    the first differing element; external data that cannot be read is one configuration error: exit 2."""
    values = np.arange(1 << 18, dtype=np.float32)
    model = tmp_path / "m.onnx"
    onnx.save(model_of({"w": values}), model)
    assert run("convert", model, "-o", tmp_path / "w", "--checksum", "--quiet").returncode == 0
    buffer = buffer_path(tmp_path / "w")
    data = bytearray(buffer.read_bytes())
    data[len(data) // 2 + 1000] ^= 0x40  # between the fingerprint's samples
    buffer.write_bytes(bytes(data))
    result = run("verify", tmp_path / "w.json", model)
    assert result.returncode == 1 and "SHA-256" in result.stderr and "Traceback" not in result.stderr
    assert "'w': 1 byte differs" in result.stderr and "element [131322]" in result.stderr, result.stderr

    external = numpy_helper.from_array(values[:64], "e")
    (tmp_path / "e.data").write_bytes(external.raw_data)
    external.ClearField("raw_data")
    external.data_location = TensorProto.EXTERNAL
    external.external_data.add(key="location", value="e.data")
    onnx.save(model_of([external]), tmp_path / "x.onnx")
    assert run("convert", tmp_path / "x.onnx", "-o", tmp_path / "x", "--quiet").returncode == 0
    os.unlink(tmp_path / "e.data")
    one_line_error(run("verify", tmp_path / "x.json", tmp_path / "x.onnx"), "e.data")


def test_convert_flags_owned_by_dml(small: Path, tmp_path: Path) -> None:
    assert run("convert", small, "-o", tmp_path / "w", "--flags", "owned-by-dml", "--quiet").returncode == 0
    doc = json.loads((tmp_path / "w.json").read_text())
    assert {e["desc"]["Flags"] for e in doc["entries"] if e["desc"]} == {1}
    assert run("verify", tmp_path / "w.json", small).returncode == 0


@pytest.mark.parametrize("command", ["table", "inspect", "convert", "verify", "bindings", "clean", "demo"])
def test_each_command_has_help_with_an_example_and_exit_codes(command: str) -> None:
    result = run(command, "--help")
    assert result.returncode == 0 and "example:" in result.stdout and "exit status:" in result.stdout
    assert f"example:\n  dmlbridge {command} " in result.stdout
    if command in ("table", "inspect", "convert"):
        assert "FLOAT16" in result.stdout and "0x6200" in result.stdout  # the accepted type names and levels


def test_plan_tables_stay_readable(tmp_path: Path) -> None:
    """Subgraph keys are not repeated in the origin, control characters are escaped, wide characters take two
    columns, and a terminal's width is honoured."""
    from models import build_model

    from dmlbridge.cli.report import _width, format_plan

    path, _ = build_model(tmp_path)
    plan = dmlbridge.plan_model(path)
    text = format_plan(plan)
    row = next(line for line in text.splitlines() if line.startswith("loop/body/inner/then_branch/T"))
    assert "then_branch" not in row.split("  ", 1)[1]  # the origin leaves the path to the key
    narrow = format_plan(plan, width=120).splitlines()
    assert max(map(_width, narrow)) <= 120 < max(map(_width, text.splitlines()))
    assert any("…" in line for line in narrow)
    odd = model_of({name: np.ones(1, np.float32) for name in ("a\x1b[31mred", "权重", "ab")})
    lines = format_plan(dmlbridge.plan_model(odd)).splitlines()
    assert "\x1b" not in "\n".join(lines) and lines[1].startswith("a\\x1b[31mred")
    wide, plain = lines[2], lines[3]
    assert _width(wide[: wide.index("initializer")]) == _width(plain[: plain.index("initializer")])


def test_inspect_marks_what_it_did_not_check_and_check_reports_what_convert_would(tmp_path: Path) -> None:
    """inspect never says a constant converts where convert would then fail: what it did not read (external data,
    values that must fit 32 bits) is marked; --check reads it and fails exactly as convert does."""
    folder = tmp_path / "demo"
    folder.mkdir()
    model = Path(build_sample_model(folder))
    plain = run("inspect", model, "--feature-level", "2.0", "--wide")
    assert plain.returncode == 0, plain.stderr
    rows = {line.split()[0]: line for line in plain.stdout.splitlines() if line.strip()}
    assert "unchecked: values must fit 32 bits" in rows["w_int64"] and "unchecked: external data" in rows["weight"]
    checked = run("inspect", model, "--feature-level", "2.0", "--check")
    converted = run("convert", model, "-o", tmp_path / "out", "--feature-level", "2.0")
    one_line_error(checked, "w_int64", "does not fit INT32")
    one_line_error(converted, "w_int64", "does not fit INT32")
    assert checked.stderr.split("error: ", 1)[1] == converted.stderr.split("error: ", 1)[1]
    ok = run("inspect", model, "--check")
    assert ok.returncode == 0 and "unchecked" not in ok.stdout
    one_line_error(run("inspect", model, "--strict"), "labels", "--strict")


def test_inspect_check_refuses_what_convert_refuses_up_front(small: Path, tmp_path: Path) -> None:
    """The output and manifest limits are checked by inspect --check too, with the same flags and messages."""
    for flag, value, words in [("--max-output-bytes", "8", ["upload image", "--max-output-bytes"]),
                               ("--max-manifest-bytes", "100", ["max-manifest-bytes"]),
                               ("--max-tensor-bytes", "4", ["--max-tensor-bytes"])]:
        checked = run("inspect", small, "--check", flag, value)
        converted = run("convert", small, "-o", tmp_path / "out", flag, value)
        one_line_error(checked, *words)
        one_line_error(converted, *words)
        assert checked.stderr.split("error: ", 1)[1] == converted.stderr.split("error: ", 1)[1]
        assert not list(tmp_path.glob("out*.json"))
    flagged = run("inspect", small, "--check", "--json", "--flags", "owned-by-dml")
    assert flagged.returncode == 0, flagged.stderr
    assert {entry["desc"]["Flags"] for entry in json.loads(flagged.stdout)["entries"]} == {1}


def test_messages_name_flags_but_never_rewrite_the_users_names(tmp_path: Path) -> None:
    """Keywords become the flags that set them; a constant named like a keyword stays as the model spells it."""
    named = numpy_helper.from_array(np.arange(64, dtype=np.float32), "min_dims=3 max_tensor_bytes")
    model = tmp_path / "m.onnx"
    onnx.save(model_of([named]), model)
    too_big = run("convert", model, "-o", tmp_path / "out", "--max-tensor-bytes", "8")
    one_line_error(too_big, "'min_dims=3 max_tensor_bytes'", "more than --max-tensor-bytes 8")
    below = run("convert", model, "-o", tmp_path / "out", "--feature-level", "2.0", "--min-dims", "1")
    one_line_error(below, "--min-dims 1 is below", "leave --min-dims out (the default: 4)")
    assert "min_dims" not in below.stderr and "None" not in below.stderr
    one_line_error(run("convert", model, "-o", tmp_path / "out", "--min-dims", "9"), "--min-dims must be", "got 9")
    one_line_error(run("convert", model, "-o", tmp_path / "out", "--alignment", "24"), "--alignment must be")
    image = run("convert", model, "-o", tmp_path / "out", "--max-output-bytes", "8")
    one_line_error(image, "(--max-output-bytes)", "pass --max-output-bytes if")
    assert "max_output_bytes" not in image.stderr


@pytest.mark.parametrize(("text", "value"), [("4096", 4096), ("0x1000", 4096), ("1KiB", 1024), ("512 MiB", 512 << 20),
                                             ("2GiB", 2 << 30), ("2gib", 2 << 30), ("1TiB", 1 << 40), ("7B", 7)])
def test_byte_counts_take_binary_units(text: str, value: int) -> None:
    from dmlbridge.placement.options import parse_byte_count

    assert parse_byte_count(text) == value


@pytest.mark.parametrize(("text", "words"), [("2GB", ["decimal units are not guessed", "write 2GiB"]),
                                             ("512M", ["write 512MiB"]), ("1.5GiB", ["not a byte count"]),
                                             ("-1", ["not a byte count"]), ("2 GiBs", ["not a byte count"])])
def test_byte_counts_refuse_what_they_would_guess(small: Path, tmp_path: Path, text: str, words: list[str]) -> None:
    from dmlbridge.placement.options import parse_byte_count

    with pytest.raises(dmlbridge.InvalidArgumentError, match="not a byte count"):
        parse_byte_count(text)
    for flag in ("--max-tensor-bytes", "--max-output-bytes", "--max-manifest-bytes", "--min-bytes", "--alignment"):
        one_line_error(run("convert", small, "-o", tmp_path / "w", flag, text), flag, *words)


def test_every_byte_count_option_takes_units(small: Path, tmp_path: Path) -> None:
    done = run("convert", small, "-o", tmp_path / "w", "--quiet", "--max-tensor-bytes", "1KiB", "--alignment", "1KiB",
               "--max-output-bytes", "64KiB", "--max-manifest-bytes", "1MiB", "--min-bytes", "0B")
    assert done.returncode == 0, done.stderr
    assert dmlbridge.load_plan(tmp_path / "w.json").alignment == 1024
    one_line_error(run("convert", small, "-o", tmp_path / "x", "--max-tensor-bytes", "8B"), "--max-tensor-bytes 8")


@pytest.fixture
def kernel_folders() -> Iterator[None]:
    """Whatever a test makes in /dev is removed after it (a conversion allowed there writes PREFIX.* in /dev)."""
    posix = os.name == "posix"  # (by the platform: Wine shows Linux's /dev to Windows programs too)
    before = set(os.listdir("/dev")) if posix else set()
    yield
    if posix:
        for name in set(os.listdir("/dev")) - before:
            if name.startswith(("null.", "dmlbridge-probe")):
                os.unlink(os.path.join("/dev", name))


def test_the_output_rule_is_written_once(capsys: pytest.CaptureFixture[str]) -> None:
    """convert --help states the -o rule word for word as docs/cli.md does."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    paragraph = page.split("**`-o PREFIX`.** ", 1)[1].split("\n\n", 1)[0]
    rule = " ".join(paragraph.replace("`", "").split())
    with pytest.raises(SystemExit):
        commands.main(["convert", "--help"])
    assert rule in " ".join(capsys.readouterr().out.split())
    assert rule.startswith("PREFIX names the outputs") and "Refused: an empty -o;" in rule


def test_an_empty_output_is_refused_not_the_default(small: Path) -> None:
    line = one_line_error(run("convert", small, "-o", "", "--quiet"))
    assert "-o/--output is empty" in line and "leave -o out" in line and "small.dml" in line
    assert sorted(p.name for p in small.parent.iterdir()) == ["small.onnx"]


def test_a_trailing_slash_names_a_folder_that_must_exist(small: Path) -> None:
    """out/ and out agree for an existing folder (out/small.dml); a missing folder with the slash is an error
    that says to create it or drop the slash, and nothing is written."""
    line = one_line_error(run("convert", small, "-o", f"{small.parent / 'newdir'}/", "--quiet"))
    assert "names a folder that does not exist" in line and "create it" in line and "drop the trailing slash" in line
    assert sorted(p.name for p in small.parent.iterdir()) == ["small.onnx"]
    folder = small.parent / "demo"
    folder.mkdir()
    written = []
    for given in (f"{folder}/", str(folder)):
        assert commands.main(["convert", str(small), "-o", given, "--quiet"]) == 0
        written.append(output_names(folder))
    assert written[0] == written[1] == ["small.dml.ID.00000.bin", "small.dml.json"]
    line = one_line_error(run("convert", small, "-o", f"{small}/", "--quiet"))
    assert "ends in a slash" in line and "is a file" in line


def test_a_model_name_as_the_prefix_is_refused(small: Path) -> None:
    for given in (small, small.parent / "other.ONNX", small.parent / "w.onnx.json"):
        line = one_line_error(run("convert", small, "-o", given, "--quiet"))
        assert "-o/--output" in line and "ends in .onnx" in line.lower() and "out_prefix" not in line, line
    assert sorted(p.name for p in small.parent.iterdir()) == ["small.onnx"]


@pytest.mark.skipif(os.name != "posix", reason="a POSIX /dev")
@pytest.mark.usefixtures("kernel_folders")
def test_a_device_as_the_prefix_is_refused(small: Path) -> None:
    assert not [name for name in os.listdir("/dev") if name.startswith("null.")]
    line = one_line_error(run("convert", small, "-o", "/dev/null", "--quiet"))
    assert "-o/--output '/dev/null' is a character device" in line
    assert not [name for name in os.listdir("/dev") if name.startswith("null.")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's mount table (/proc/self/mountinfo)")
@pytest.mark.usefixtures("kernel_folders")
@pytest.mark.parametrize(("folder", "filesystem"), [("/dev", "devtmpfs"), ("/proc", "proc"), ("/sys", "sysfs")])
def test_a_prefix_on_a_kernel_filesystem_is_refused(small: Path, folder: str, filesystem: str) -> None:
    types = {line.split(" - ")[1].split()[0] for line in Path("/proc/self/mountinfo").read_text().splitlines()
             if f" {folder} " in line.split(" - ")[0]}
    if filesystem not in types:
        pytest.skip(f"{folder} is not {filesystem} here")
    prefix = f"{folder}/dmlbridge-probe-{os.getpid()}"
    line = one_line_error(run("convert", small, "-o", prefix, "--quiet"))
    assert f"a folder of the kernel's {filesystem} filesystem" in line and "-o/--output" in line, line
    assert not [name for name in os.listdir(folder) if name.startswith("dmlbridge-probe")]


def test_a_folder_at_the_manifests_name_is_refused_before_writing(small: Path) -> None:
    (small.parent / "w.json").mkdir()
    line = one_line_error(run("convert", small, "-o", small.parent / "w", "--quiet"))
    assert "names the manifest" in line and "which is a directory, not a regular file" in line
    assert sorted(p.name for p in small.parent.iterdir()) == ["small.onnx", "w.json"]


@pytest.mark.parametrize("args", [["--bogus"], ["convert", "--bogus"], ["convert", "{small}", "--bogus"],
                                  ["verify", "--bogus", "-x"], ["--bogus", "table"]])
def test_unknown_flags_are_named(small: Path, args: list[str]) -> None:
    """An unknown flag is the error, even where a required argument is missing too; the command it followed
    says so and points at its own --help."""
    line = one_line_error(run(*[a.format(small=small) for a in args]))
    flags = " ".join(a for a in args if a.startswith("-"))
    command = next((a for a in args if not a.startswith("-")), None)
    prog = f"dmlbridge {command}" if command in ("convert", "verify", "table") else "dmlbridge"
    assert line.startswith(f"{prog}: error: unrecognized arguments: {flags} (see {prog} --help)"), line


@pytest.mark.parametrize(("args", "given"), [(["convert", "{small}", "--check"], "--check"),
                                             (["inspect", "{small}", "--feature-leve", "6.2"], "--feature-leve 6.2"),
                                             (["verify", "w.json", "{small}", "--quie"], "--quie"),
                                             (["--vers"], "--vers")])
def test_abbreviated_flags_are_refused_not_guessed(small: Path, args: list[str], given: str) -> None:
    """A flag is taken only as it is spelled: --check is not --checksum, --feature-leve not --feature-level."""
    line = one_line_error(run(*[a.format(small=small) for a in args]))
    assert f"error: unrecognized arguments: {given}; did you mean '{given.split()[0]}" in line, line  # (a guess)
    assert sorted(p.name for p in small.parent.iterdir()) == ["small.onnx"]  # (convert --check wrote nothing)


def test_a_bare_command_prints_the_usage_and_its_commands() -> None:
    result = run()
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith("usage: dmlbridge ")
    listed = {line.split()[0]: " ".join(line.split()[1:]) for line in result.stdout.splitlines()
              if line.startswith("    ") and line.split()[0] in commands.build_parser().commands}
    assert list(listed) == ["table", "inspect", "convert", "verify", "bindings", "clean", "demo"]
    assert listed["convert"] == "write a model's constants as an upload buffer + manifest"


def sentinel_model(path: Path, *, double: bool = False) -> Path:
    """silero-vad's pattern: INT64 constants with INT64_MAX "to the end" sentinels (7 values outside 32 bits in 3
    constants, and one constant that fits), and with ``double`` a DOUBLE constant FLOAT32 cannot hold exactly."""
    inits = [numpy_helper.from_array(np.array([1], np.int64), "starts"),
             numpy_helper.from_array(np.array([2**63 - 1], np.int64), "ends"),
             numpy_helper.from_array(np.array([2**63 - 1, -(2**63), 2**31, -(2**31) - 1, 0], np.int64), "many"),
             numpy_helper.from_array(np.array([2**64 - 1, 2**32, 7], np.uint64), "unsigned")]
    if double:
        inits.append(numpy_helper.from_array(np.array([0.1, 2.0]), "d"))
    onnx.save(model_of(inits), path)
    return path


def test_a_value_past_32_bits_names_the_saturate_flags(tmp_path: Path) -> None:
    """At feature level 1.0 (no 64-bit types) an INT64_MAX sentinel names --int64 saturate --allow-lossy, the
    option that converts such a model, in flags; saturate without --allow-lossy says so in flags too."""
    model = sentinel_model(tmp_path / "m.onnx")
    for extra in ([], ["--int64", "narrow"], ["--int64", "emulate"]):
        for command in (["convert", model, "-o", tmp_path / "w"], ["inspect", model, "--check"]):
            line = one_line_error(run(*command, "--feature-level", "1.0", *extra))
            assert "'ends'" in line and "does not fit INT32" in line, line
            assert "clamp such values to the 32-bit range with --int64 saturate --allow-lossy (lossy" in line, line
            assert "int64=" not in line and "allow_lossy" not in line and "Target(" not in line, line
    line = one_line_error(run("convert", model, "-o", tmp_path / "w", "--feature-level", "1.0", "--int64", "saturate"))
    assert "--int64 saturate changes the values" in line and "pass --allow-lossy with it" in line, line
    assert "int64=" not in line, line
    assert commands.main(["convert", str(model), "-o", str(tmp_path / "w"), "--feature-level", "1.0",
                               "--int64", "saturate", "--allow-lossy", "--quiet"]) == 0


def test_a_constant_named_like_the_saturate_keywords_keeps_its_name(tmp_path: Path) -> None:
    name = "Target(..., int64='saturate', allow_lossy=True)"
    model = tmp_path / "m.onnx"
    onnx.save(model_of({name: np.array([2**40], np.int64)}), model)
    line = one_line_error(run("convert", model, "-o", tmp_path / "w", "--feature-level", "1.0"))
    assert line.startswith(f"dmlbridge convert: error: constant {name!r} (initializer)"), line
    assert line.count("--int64 saturate --allow-lossy") == 1, line


def test_verify_says_which_values_were_clamped_not_bit_for_bit(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """After a saturating conversion verify counts the values clamped and the entries that hold them (and the
    DOUBLE entries rounded); a conversion that changed nothing stays "bit for bit"."""
    model = sentinel_model(tmp_path / "m.onnx", double=True)
    target = ["--feature-level", "1.0", "--int64", "saturate", "--allow-lossy", "--quiet"]
    assert commands.main(["convert", str(model), "-o", str(tmp_path / "w"), *target]) == 0
    capsys.readouterr()
    assert commands.main(["verify", str(tmp_path / "w.json"), str(model), "--quiet"]) == 0
    assert capsys.readouterr().out == (
        f"ok: 5 converted constants match {model} bit for bit but for 7 values of 3 entries clamped to the 32-bit "
        "range (--int64 saturate) and the values of 1 entry rounded from DOUBLE to FLOAT32 (--allow-lossy); "
        "0 skipped\n")
    assert [e.clamped for e in dmlbridge.load_plan(tmp_path / "w.json").entries.values()] == [0, 1, 4, 2, None]
    single = tmp_path / "one.onnx"
    onnx.save(model_of({"big": np.array([2**40, 3], np.int64)}), single)
    assert commands.main(["convert", str(single), "-o", str(tmp_path / "one"), *target, "--checksum"]) == 0
    assert commands.main(["verify", str(tmp_path / "one.json"), str(single), "--quiet"]) == 0
    assert capsys.readouterr().out == (
        f"ok: 1 converted constant matches {single} bit for bit but for 1 value of 1 entry clamped to the 32-bit "
        "range (--int64 saturate); 0 skipped; the buffer file's SHA-256 matches\n")
    assert commands.main(["convert", str(model), "-o", str(tmp_path / "native"), "--quiet"]) == 0
    assert commands.main(["verify", str(tmp_path / "native.json"), str(model), "--quiet"]) == 0
    assert capsys.readouterr().out == f"ok: 5 converted constants match {model} bit for bit, 0 skipped\n"


@pytest.fixture
def converted(small: Path) -> Path:
    """A conversion of ``small`` beside it, ``w.json``: what bindings reads."""
    dmlbridge.convert_model(small, small.parent / "w", progress=False).close()
    return small.parent / "w.json"


def _bindings_output_cases(folder: Path) -> list[tuple[str, list[str]]]:
    (folder / "out").mkdir()
    (folder / "plain").write_text("a file")
    fifo = [(str(folder / "fifo"), ["is a FIFO, not a regular file", "leave -o out"])]
    if hasattr(os, "mkfifo"):  # (FIFOs are POSIX)
        os.mkfifo(folder / "fifo")
    else:
        fifo = []
    return [
        (str(folder / "out"), [f"-o/--output {str(folder / 'out')!r} is a folder", "give the name of a file",
                               f"-o {folder / 'out' / 'w.bindings'}"]),
        (f"{folder / 'out'}/", ["ends in a slash, so it names a folder", "give the name of a file"]),
        (str(folder / "nodir" / "x"), [f"the folder {str(folder / 'nodir')!r} does not exist",
                                       f"mkdir -p {folder / 'nodir'}"]),
        (f"{folder / 'plain'}/", [f"{str(folder / 'plain')!r} is a file, not a folder"]),
        (str(folder / "plain" / "x"), [f"{str(folder / 'plain')!r} is a file, not a folder"]),
        *fifo,
        ("", ["-o/--output is empty"]),
    ]


def test_bindings_output_errors_say_what_to_do_never_errno_or_temporary_names(converted: Path) -> None:
    """bindings -o with a folder (with or without a slash), a missing folder, a file as a folder, a FIFO: one line
    that says what is wrong and what to give, naming -o/--output; nothing is written, the FIFO stays one."""
    folder = converted.parent
    for output, words in _bindings_output_cases(folder):
        before = sorted(p.name for p in folder.rglob("*"))
        line = one_line_error(run("bindings", converted, "-o", output), "dmlbridge bindings: error: ", *words)
        assert "Errno" not in line and ".tmp" not in line and "Not a directory" not in line, line
        assert sorted(p.name for p in folder.rglob("*")) == before, output
    assert (folder / "fifo").is_fifo() or not hasattr(os, "mkfifo")  # (FIFOs are POSIX)


def test_bindings_output_that_cannot_be_written_names_the_file_not_a_temporary_one(
    converted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder the list cannot be written into (read-only, full): the error names -o/--output and the folder, with
    the system's reason, and leaves nothing."""
    real_open = os.open

    def read_only(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and os.path.dirname(str(path)) == str(converted.parent):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", read_only)
    before = sorted(p.name for p in converted.parent.iterdir())
    line = one_line_error(run("bindings", converted, "-o", converted.parent / "w.bindings"))
    assert f"cannot write -o/--output {str(converted.parent / 'w.bindings')!r}: Permission denied" in line, line
    assert f"the folder {str(converted.parent)!r} must be writable" in line and ".tmp" not in line, line
    assert sorted(p.name for p in converted.parent.iterdir()) == before


def test_bindings_output_that_is_an_input_is_refused_before_anything_changes(converted: Path) -> None:
    """bindings -o naming, by any spelling or link, the manifest it reads or a buffer file that manifest lists (the
    same name, another path to it, a hard link, a symbolic link, and on Windows the name in other letters and its
    short name): one line naming -o/--output and the file, exit 2, and every file as it was."""
    folder = converted.parent
    buffer = buffer_path(folder / "w")
    outputs = [converted, buffer, folder / "." / converted.name]
    if hasattr(os, "link"):
        os.link(converted, folder / "hard.json")
        outputs.append(folder / "hard.json")
    if symlinks_work():  # (Wine makes none)
        os.symlink(buffer, folder / "link.bin")
        outputs.append(folder / "link.bin")
    if sys.platform == "win32":  # (NTFS names a file in any letter case, and by its 8.3 short name)
        outputs.append(folder / converted.name.upper())
        outputs.extend(Path(name) for name in {short_name(converted), short_name(buffer)} - {None})
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    for output in outputs:
        line = one_line_error(run("bindings", converted, "-o", output), "dmlbridge bindings: error: ",
                              f"-o/--output {str(output)!r}")
        assert "is the manifest" in line or "is the buffer file" in line, line
        assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == files, output
    assert run("bindings", converted, "-o", folder / "w.bindings").returncode == 0  # (another file: written)


def test_demo_keep_names_a_folder(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("a file")
    line = one_line_error(run("demo", "--keep", tmp_path / "plain"))
    assert f"--keep {str(tmp_path / 'plain')!r} is a file, not a folder" in line and "Errno" not in line, line
    line = one_line_error(run("demo", "--keep", tmp_path / "plain" / "sub"))
    assert f"cannot create the folder {str(tmp_path / 'plain' / 'sub')!r} (--keep)" in line, line
    assert "Errno" not in line, line
    assert (tmp_path / "plain").read_text() == "a file"


@pytest.mark.parametrize("before", ["no conversion yet", "a previous conversion"])
def test_a_folder_that_cannot_be_written_is_named_as_such(small: Path, monkeypatch: pytest.MonkeyPatch,
                                                         before: str) -> None:
    """A read-only folder (simulated: every open of the prefix's files for writing is refused, as a read-only
    filesystem or a folder of another user refuses it; root ignores permission bits): one line saying the folder
    cannot be written, with the system's reason and the option to change, not a lock that cannot be opened."""
    folder = small.parent
    if before == "a previous conversion":
        dmlbridge.convert_model(small, folder / "w", progress=False).close()
    real_open = os.open

    def read_only(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and os.path.basename(str(path)).startswith(("w.", ".w.")):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", read_only)
    line = one_line_error(run("convert", small, "-o", folder / "w", "--quiet"))
    assert f"cannot write into the folder {str(folder)!r}" in line and "Permission denied" in line, line
    assert "-o/--output" in line and "lock" not in line, line


def test_a_tensor_over_max_buffer_bytes_names_the_flag_value_that_converts_the_model(tmp_path: Path) -> None:
    """The first constant over --max-buffer-bytes is 6,000 bytes, a later one 12,000: the error names the one
    round value with which the whole model converts (12 KiB, worked by hand in
    tests/placement/test_max_buffer_bytes.py), in flags; that value converts it."""
    model = tmp_path / "m.onnx"
    onnx.save(model_of({"a": np.ones(1500, np.float32), "b": np.ones(3000, np.float32)}), model)
    line = one_line_error(run("convert", model, "-o", tmp_path / "w", "--max-buffer-bytes", "4KiB"))
    assert "pass --max-buffer-bytes 12288 (12KiB): the smallest round limit" in line, line
    assert "max_buffer_bytes" not in line.replace("--max-buffer-bytes", ""), line
    assert run("convert", model, "-o", tmp_path / "w", "--max-buffer-bytes", "12KiB", "--quiet").returncode == 0


def test_swapped_verify_arguments_are_named_as_such(converted: Path, small: Path) -> None:
    """verify MODEL MANIFEST: the manifest it was given is a model, which is not JSON: the error says the two
    look swapped and gives the command in the right order."""
    line = one_line_error(run("verify", small, converted))
    assert "the arguments look swapped" in line and f"dmlbridge verify {converted} {small}" in line, line
    assert "codec" not in line, line


@pytest.fixture
def external(tmp_path: Path) -> Path:
    """``x.onnx`` in a folder of its own, its constant ``e`` in the external file ``data/e.bin`` beside it."""
    tensor = numpy_helper.from_array(np.arange(64, dtype=np.float32), "e")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "e.bin").write_bytes(tensor.raw_data)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="data/e.bin")
    onnx.save(model_of([tensor]), tmp_path / "x.onnx")
    return tmp_path / "x.onnx"


def test_missing_external_data_says_where_it_was_looked_for_and_fails_inspect_too(external: Path) -> None:
    """inspect opens every external data file it lists (it reads none): a missing one is the error convert
    gives, naming the path it looked for, also without --check; a file too short for its tensor too."""
    assert run("inspect", external).returncode == 0
    os.unlink(external.parent / "data" / "e.bin")
    looked = os.path.join(os.path.realpath(external.parent), "data", "e.bin")
    lines = [one_line_error(run(*args)) for args in (["inspect", external], ["inspect", external, "--check"],
                                                      ["convert", external, "-o", external.parent / "w"])]
    for line in lines:
        assert "tensor 'e': external data file 'data/e.bin' cannot be resolved (No such file or directory)" in line
        assert f"looked for {looked!r}" in line, line
    assert not (external.parent / "w.lock").exists()  # (the failed conversion removed its lock)
    (external.parent / "data" / "e.bin").write_bytes(b"\0" * 100)
    one_line_error(run("inspect", external), "'data/e.bin'", "the tensor needs exactly 256")


def test_quiet_keeps_the_skipped_lines(tmp_path: Path) -> None:
    """--quiet drops the progress bar and the summary, as docs/cli.md says, never what was left out."""
    model = tmp_path / "m.onnx"
    onnx.save(model_of({"w": np.ones(2, np.float32), "s": np.array(["a"], dtype=object)}), model)
    result = run("convert", model, "-o", tmp_path / "w", "--quiet")
    assert result.returncode == 0 and result.stdout == ""
    assert result.stderr == "dmlbridge convert: skipped 's' (initializer): STRING: DirectML has no string tensors\n"


def _one_of_each(folder: Path) -> Path:
    """One constant in external data (unchecked by inspect) and one MatMulNBits weight: every count is 1."""
    path = folder / "one.onnx"
    b = numpy_helper.from_array(np.full((4, 2, 8), 0x98, np.uint8), "B")
    s = numpy_helper.from_array(np.full((4, 2), 0.5, np.float32), "S")
    node = onnx.helper.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], "mm", domain="com.microsoft", K=32, N=4,
                                 bits=4, block_size=16)
    graph = onnx.helper.make_graph([node], "g", [], [], [b, s])
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("com.microsoft", 1)]), path)
    return path


def test_counts_of_one_are_singular(tmp_path: Path, external: Path) -> None:
    """inspect, convert and verify say "1 constant", "1 tensor", "1 entry", "1 quantized weight", "one buffer
    of 256 bytes", "1 mismatch", "1 byte" (and the plural for every other count)."""
    from dmlbridge.cli.report import human_size

    assert (human_size(1), human_size(2), human_size(26116)) == ("1 byte", "2 bytes", "26,116 bytes")
    inspected = run("inspect", external, "--wide")
    assert inspected.stderr.startswith("dmlbridge inspect: 1 constant unchecked (see the note column)")
    lines = inspected.stdout.splitlines()
    assert lines[-2] == "buffer 0: 256 bytes, 1 tensor", lines
    assert lines[-1].startswith("1 constant: 1 converted (256 bytes of tensor data in one buffer of 256 bytes (at "
                                "most 2.00 GiB); alignment 256)"), lines
    quantized = run("inspect", _one_of_each(tmp_path), "--wide").stdout.splitlines()
    assert quantized[-1].endswith("; 1 quantized weight") and quantized[-1].startswith("3 constants: "), quantized
    converted = run("convert", external, "-o", tmp_path / "w")
    assert converted.stdout.endswith(f"(256 bytes, 1 tensor) and {tmp_path / 'w.json'} (1 entry, 0 skipped)\n")
    verified = run("verify", tmp_path / "w.json", external)
    assert verified.stdout.startswith(f"ok: 1 converted constant matches {external} bit for bit, 0 skipped")
    data = bytearray(buffer_path(tmp_path / "w").read_bytes())
    data[0] ^= 1
    buffer_path(tmp_path / "w").write_bytes(bytes(data))
    failed = run("verify", tmp_path / "w.json", external).stderr.splitlines()
    assert failed[-1] == "dmlbridge verify: FAILED: 2 mismatches" and "'e': 1 byte differs" in failed[-2], failed


def test_a_part_read_as_4_bit_says_so(sample: Path) -> None:
    """MatMulNBits' B is uint8 in the model and UINT4 in its quantized record (the same bytes, no second copy):
    inspect says why the row and the record disagree."""
    lines = run("inspect", sample, "--wide").stdout.splitlines()
    assert lines[[line.split()[0] for line in lines].index("q_B")].split()[2:5] == ["UINT8", "4x3x8", "UINT8"]
    qmatmul = next(line for line in lines if line.startswith("quantized 'qmatmul'"))
    assert "weight 'q_B' UINT4 (its UINT8 row's bytes, two 4-bit values each)" in qmatmul, qmatmul
    assert "scales 'q_scales' FLOAT32, zero points" in qmatmul, qmatmul


@pytest.mark.parametrize(("args", "hint"), [
    (("conver", "m.onnx"), "did you mean 'convert'?"),
    (("inspct", "m.onnx"), "did you mean 'inspect'?"),
    (("convert", "m.onnx", "--chekcsum"), "did you mean '--checksum'?"),
    (("convert", "m.onnx", "--int64", "narow"), "did you mean 'narrow'?"),
    (("inspect", "m.onnx", "--upload=al"), "did you mean 'all'?"),
])
def test_a_mistyped_command_choice_or_flag_gets_a_did_you_mean(args: tuple[str, ...], hint: str) -> None:
    line = one_line_error(run(*args), hint)
    assert line.endswith("--help)"), line


def test_a_usage_error_far_from_any_word_gets_no_guess() -> None:
    assert "did you mean" not in one_line_error(run("convert", "m.onnx", "--zzzz"), "unrecognized arguments: --zzzz")


def test_help_wraps_its_lists_of_names_between_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 80 columns, every DML type and origin kind the help lists stands whole on a line (the lists broke
    mid-word: FLO / AT32)."""
    monkeypatch.setenv("COLUMNS", "80")
    text = run("convert", "--help").stdout
    words = {word.strip(",") for line in text.splitlines() for word in line.split()}
    names = [t.name for t in dmlbridge.DmlDataType if t is not dmlbridge.DmlDataType.UNKNOWN]
    kinds = list(CONSTANT_KINDS)
    assert set(names) <= words and set(kinds) <= words, sorted(set(names + kinds) - words)


@pytest.mark.parametrize("fault", [RecursionError("maximum recursion depth exceeded"), OverflowError("too big"),
                                   KeyError("x")])
def test_a_fault_of_dmlbridges_own_is_one_line_and_exit_3_never_a_traceback(
    small: Path, monkeypatch: pytest.MonkeyPatch, fault: Exception
) -> None:
    """An exception that is no DmlBridgeError is a bug, but the command line still prints one line naming it,
    and exits 3 (a user error's 2 is kept for what the user can change)."""

    def broken(args: object) -> int:
        raise fault

    monkeypatch.setitem(commands._COMMANDS, "inspect", broken)
    result = run("inspect", small)
    assert result.returncode == 3, result
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"dmlbridge inspect: internal error: {type(fault).__name__}: ") and "report" in line
