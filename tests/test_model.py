"""Whole-model conversion (dmlbridge.convert_model): round trips, the manifest and .bin against an independent
recomputation, atomic outputs under failures and Ctrl-C, and load_plan refusing every kind of corruption."""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
import random
import stat
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from models import (
    DEFAULT_SKIPPED,
    NAN,
    TARGETS,
    build_model,
    check_independently,
    no_temp_files,
    same_values,
    typed_storage,
)
from onnx import external_data_helper, helper, numpy_helper

import dmlbridge
import dmlbridge.image_writer as image_writer
from dmlbridge import PlanEntry, UploadPlan, convert_model, load_plan, plan_model
from dmlbridge.errors import (
    DestinationError,
    DmlBridgeError,
    ExternalDataError,
    InvalidArgumentError,
    LayoutError,
    ManifestError,
    TensorProtoError,
    TensorTooLargeError,
    UnsupportedTypeError,
    ValueRangeError,
)
from dmlbridge.target import Target


@pytest.mark.parametrize("name", list(TARGETS))
def test_round_trip_agrees_with_independent_recomputation(tmp_path: Path, name: str) -> None:
    target, min_dims, alignment = TARGETS[name]
    path, expected = build_model(tmp_path)
    prefix = tmp_path / "out"
    plan = convert_model(path, prefix, target=target, min_dims=min_dims, alignment=alignment, checksum=True)
    check_independently(prefix, expected, target, min_dims, alignment)

    loaded = load_plan(str(prefix) + ".json", verify=True)
    loaded.verify(path)
    assert loaded.manifest() == plan.manifest() == json.loads((tmp_path / "out.json").read_text())
    assert loaded.bin_sha256 == hashlib.sha256((tmp_path / "out.bin").read_bytes()).hexdigest()
    assert list(loaded.entries) == list(expected)
    for key, array in expected.items():
        entry = loaded.entries[key]
        if entry.skipped is not None:
            continue
        back = loaded.array(key)
        assert back.dtype == array.dtype and back.shape == array.shape, key
        if entry.conversion == "lossy":
            with np.errstate(over="ignore"):
                array = array.astype(np.float32).astype(np.float64)
        if entry.conversion == "native":
            assert back.tobytes() == array.tobytes(), key  # bit for bit, NaN payloads included
        assert same_values(back, array), key
        dml = loaded.dml_array(key)
        assert dml.shape == tuple(entry.sizes or ()) and dml.dtype == entry.dml_type.numpy(), key  # type: ignore[union-attr]
    assert no_temp_files(tmp_path)


def test_hand_computed_bytes(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    plan = convert_model(path, tmp_path / "out")
    data = (tmp_path / "out.bin").read_bytes()

    def at(key: str) -> bytes:
        e = plan.entries[key]
        assert e.offset is not None and e.total_tensor_size_in_bytes is not None
        return data[e.offset : e.offset + e.total_tensor_size_in_bytes]

    assert at("t_int4") == bytes.fromhex("f8100700")  # -8,-1 | 0,1 | 7 ; low nibble first, padded to 4
    assert at("t_uint2") == bytes.fromhex("03210300")  # 3,0 | 1,2 | 3 widened to UINT4 nibbles
    assert at("t_bool") == bytes([1, 0, 1, 0])
    assert at("t_float16") == struct.pack("<3e", 1.0, -2.0, 0.5) + bytes(2)
    assert at("t_bfloat16")[:8] == struct.pack("<2f", 1.0, -3.0)  # bfloat16 widened to FLOAT32
    assert at("t_int16") == struct.pack("<3h", -32768, 5, 32767) + bytes(2)
    assert at("k_float") == struct.pack("<f", -1.25)
    assert at("k_ints") == struct.pack("<3q", -1, 0, 3)
    assert at("sp") == struct.pack("<12h", 0, 4, 0, 0, 0, 0, 0, 0, 5, 0, 0, 6)
    assert at("ext_f32") == (np.arange(256, dtype=np.float32) / 7).tobytes()
    # INT64 emulated as ONNX Runtime did: 8-byte elements, INT32 desc with doubled strides.
    emulated = convert_model(path, tmp_path / "emu", target=Target(feature_level="2.0"))
    e = emulated.entries["t_int64"]
    assert e.dml_type is dmlbridge.DmlDataType.INT32 and e.strides == (2,) and e.total_tensor_size_in_bytes == 24
    raw = (tmp_path / "emu.bin").read_bytes()
    assert e.offset is not None and raw[e.offset : e.offset + 24] == struct.pack("<3q", -5, 7, 2**31 - 1)
    assert emulated.dml_array("t_int64").tolist() == [-5, 7, 2**31 - 1]


def test_manifest_entries_and_plan_api(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    plan = convert_model(path, tmp_path / "out")
    assert isinstance(plan, UploadPlan) and plan.bin_path == str(tmp_path / "out.bin")
    assert plan.source_name == "model.onnx" and plan.source_size == path.stat().st_size
    assert plan.bin_sha256 is None and "bin_sha256" not in json.loads((tmp_path / "out.json").read_text())
    assert {e.key for e in plan.skipped} == DEFAULT_SKIPPED
    entry = plan.entries["loop/body/inner/then_branch/T"]
    assert isinstance(entry, PlanEntry)
    assert entry.origin == "initializer in loop/body/inner/then_branch"
    assert plan.entries["k_sparse"].origin.startswith("Constant node") and "sparse_value" in plan.entries[
        "k_sparse"].origin
    assert plan.entries["sp"].origin == "sparse_initializer"
    skipped = plan.entries["t_empty"]
    assert skipped.offset is None and skipped.dml_type is None and skipped.desc() is None
    assert "empty" in (skipped.skipped or "")
    assert "string" in (plan.entries["k_strings"].skipped or "")
    assert "complex" in (plan.entries["t_complex"].skipped or "")
    ctypes_desc = plan.entries["t_float"].as_ctypes()
    assert ctypes_desc.DataType == 1 and ctypes_desc.TotalTensorSizeInBytes == 24
    assert ctypes_desc.GuaranteedBaseOffsetAlignment == 256 and not ctypes_desc.Strides
    with pytest.raises(InvalidArgumentError, match="skipped"):
        plan.array("t_string")
    with pytest.raises(InvalidArgumentError, match="no entry"):
        plan.dml_array("nope")
    assert plan.dml_array("t_bool").dtype == np.uint8
    assert plan.array("t_bool").dtype == np.bool_
    # plan_model predicts the same layout without writing anything.
    predicted = plan_model(path)
    assert predicted.bin_path is None and predicted.entries == plan.entries
    assert predicted.total_size == plan.total_size
    with pytest.raises(InvalidArgumentError, match="not written"):
        predicted.read("t_float")


def test_bytes_and_modelproto_inputs(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    convert_model(path, tmp_path / "from_path")
    raw = path.read_bytes()
    with pytest.raises(ExternalDataError, match="base_dir"):
        convert_model(raw, tmp_path / "from_bytes")
    assert not (tmp_path / "from_bytes.bin").exists() and no_temp_files(tmp_path)
    plan = convert_model(raw, tmp_path / "from_bytes", base_dir=tmp_path)
    assert plan.source_name is None and plan.source_size == len(raw)
    proto = onnx.load(path, load_external_data=False)
    convert_model(proto, tmp_path / "from_proto", base_dir=tmp_path)
    reference_bin = (tmp_path / "from_path.bin").read_bytes()
    assert (tmp_path / "from_bytes.bin").read_bytes() == reference_bin
    assert (tmp_path / "from_proto.bin").read_bytes() == reference_bin
    plan.verify(raw, base_dir=tmp_path)
    # A model without external data needs no directory.
    simple = helper.make_model(helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.ones(3), "x")]))
    assert convert_model(simple, tmp_path / "simple").total_size == 24


def test_model_without_constants_gives_an_empty_bin(tmp_path: Path) -> None:
    empty = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [], []))
    plan = convert_model(empty, tmp_path / "out", checksum=True)
    assert plan.total_size == 0 and not plan.entries
    assert (tmp_path / "out.bin").read_bytes() == b""
    assert load_plan(tmp_path / "out.json", verify=True).bin_sha256 == hashlib.sha256(b"").hexdigest()


def test_alignment_and_min_dims_shape_the_layout(tmp_path: Path) -> None:
    path, expected = build_model(tmp_path)
    for alignment in (16, 32, 1024, 65536):
        plan = convert_model(path, tmp_path / f"a{alignment}", alignment=alignment, min_dims=4)
        for e in plan.converted:
            assert e.offset is not None and e.offset % alignment == 0
            assert e.guaranteed_base_offset_alignment == alignment and len(e.sizes or ()) >= 4
        check_independently(tmp_path / f"a{alignment}", expected, Target(), 4, alignment)


@pytest.mark.parametrize("alignment", [0, 8, 15, 24, 100, 2**32, True, 256.0, "256", -256])
def test_bad_alignment(tmp_path: Path, alignment: Any) -> None:
    path, _ = build_model(tmp_path)
    with pytest.raises(InvalidArgumentError, match="alignment"):
        convert_model(path, tmp_path / "out", alignment=alignment)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"min_dims": -1}, "min_dims"),
        ({"min_dims": 9}, "min_dims"),
        ({"min_dims": 6, "target": Target(feature_level="2.0")}, "min_dims"),
        ({"min_dims": 1.0}, "min_dims"),
        ({"target": "6.2"}, "target"),
        ({"progress": "yes"}, "progress"),
        ({"checksum": 1}, "checksum"),
        ({"strict": None}, "strict"),
        ({"max_tensor_bytes": -1}, "max_tensor_bytes"),
    ],
)
def test_bad_options(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    path, _ = build_model(tmp_path)
    with pytest.raises(InvalidArgumentError, match=message):
        convert_model(path, tmp_path / "out", **kwargs)
    assert not (tmp_path / "out.bin").exists() and no_temp_files(tmp_path)


@pytest.mark.parametrize("content", [b"garbage that is no protobuf \xff\xff\xff", b"", b"\x08\x07"])
def test_models_that_are_not_models(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(content)
    with pytest.raises(InvalidArgumentError, match=r"bad\.onnx"):
        convert_model(bad, tmp_path / "out")
    with pytest.raises(InvalidArgumentError):
        convert_model(content, tmp_path / "out")
    with pytest.raises(InvalidArgumentError, match="cannot read model"):
        convert_model(tmp_path / "missing.onnx", tmp_path / "out")
    with pytest.raises(InvalidArgumentError, match="not a regular file"):
        convert_model(tmp_path, tmp_path / "out")
    with pytest.raises(InvalidArgumentError, match="model must be"):
        convert_model(12345, tmp_path / "out")


def test_output_problems(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    with pytest.raises(DestinationError, match="does not exist"):
        convert_model(path, tmp_path / "no" / "such" / "dir" / "out")
    for prefix in ("", str(tmp_path) + os.sep):
        with pytest.raises(InvalidArgumentError, match="out_prefix"):
            convert_model(path, prefix)
    # Never overwrite the model's own external data, nor the model file.
    os.rename(tmp_path / "weights.data", tmp_path / "weights.bin")
    for t in (m := onnx.load(path, load_external_data=False)).graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = "weights.bin"
    onnx.save(m, path)
    before = (tmp_path / "weights.bin").read_bytes()
    with pytest.raises(InvalidArgumentError, match="overwrite"):
        convert_model(path, tmp_path / "weights")
    assert (tmp_path / "weights.bin").read_bytes() == before
    same_name = tmp_path / "m.bin"
    same_name.write_bytes(path.read_bytes())
    with pytest.raises(InvalidArgumentError, match="overwrite"):
        convert_model(same_name, tmp_path / "m")
    assert same_name.read_bytes() == path.read_bytes()


def test_output_files_get_normal_permissions(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    convert_model(path, tmp_path / "out")
    mask = os.umask(0o022)
    os.umask(mask)
    for name in ("out.bin", "out.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~mask
    os.chmod(tmp_path / "out.bin", 0o640)
    convert_model(path, tmp_path / "out")  # a replaced output keeps its mode
    assert stat.S_IMODE((tmp_path / "out.bin").stat().st_mode) == 0o640


def test_strict_turns_skips_into_errors_before_writing(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    with pytest.raises(UnsupportedTypeError, match=r"t_string.*strict"):
        convert_model(path, tmp_path / "out", strict=True)
    assert not (tmp_path / "out.bin").exists() and no_temp_files(tmp_path)
    only_empty = helper.make_model(helper.make_graph([], "g", [], [], [
        numpy_helper.from_array(np.ones(2, np.float32), "ok"), numpy_helper.from_array(np.zeros((2, 0)), "e")]))
    with pytest.raises(LayoutError, match=r"'e'.*empty"):
        convert_model(only_empty, tmp_path / "out", strict=True)
    assert convert_model(only_empty, tmp_path / "out").entries["e"].skipped


def test_too_many_dimensions_is_a_skip_with_the_layout_reason(tmp_path: Path) -> None:
    m = helper.make_model(helper.make_graph([], "g", [], [], [
        numpy_helper.from_array(np.ones((1,) * 6, np.float32), "six")]))
    plan = convert_model(m, tmp_path / "out", target=Target(feature_level="2.0"))
    assert "1 to 5 dimensions" in (plan.entries["six"].skipped or "")
    with pytest.raises(LayoutError):
        convert_model(m, tmp_path / "out", target=Target(feature_level="2.0"), strict=True)


def test_checksum_is_of_the_bin_and_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = build_model(tmp_path)
    plan = convert_model(path, tmp_path / "out", checksum=True, progress=True)
    assert plan.bin_sha256 == hashlib.sha256((tmp_path / "out.bin").read_bytes()).hexdigest()
    assert "B" in capsys.readouterr().err  # tqdm drew a bar of bytes
    convert_model(path, tmp_path / "out")  # progress=None and stderr is not a terminal: silent
    convert_model(path, tmp_path / "out", progress=False)
    assert capsys.readouterr().err == ""


def test_max_tensor_bytes_names_the_constant(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    with pytest.raises(TensorTooLargeError, match="ext_f32"):
        convert_model(path, tmp_path / "out", max_tensor_bytes=512)
    assert no_temp_files(tmp_path)


# --- failures leave nothing behind ------------------------------------------------------------------------------


def _previous_outputs(tmp_path: Path) -> tuple[bytes, bytes]:
    path, _ = build_model(tmp_path)
    convert_model(path, tmp_path / "out", alignment=16)
    return (tmp_path / "out.bin").read_bytes(), (tmp_path / "out.json").read_bytes()


def _unchanged(tmp_path: Path, before: tuple[bytes, bytes]) -> bool:
    return ((tmp_path / "out.bin").read_bytes(), (tmp_path / "out.json").read_bytes()) == before


def test_bad_tensor_halfway_leaves_previous_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _previous_outputs(tmp_path)
    bad = numpy_helper.from_array(np.array([True, False]), "t_bad_bool")
    bad.raw_data = b"\x01\x02"  # a BOOL byte that is not 0 or 1: only found when the values are decoded
    path, _ = build_model(tmp_path, bad=bad)
    written: list[int] = []
    # Counts the constants written one at a time (the others are runs of the model's own bytes).
    real_write_stored = image_writer._write_stored
    monkeypatch.setattr(image_writer, "_write_stored", lambda *a, **k: written.append(1) or real_write_stored(*a, **k))
    with pytest.raises(TensorProtoError, match="t_bad_bool"):
        convert_model(path, tmp_path / "out")
    assert len(written) > 20  # it failed halfway, after writing many tensors
    assert _unchanged(tmp_path, before) and no_temp_files(tmp_path)


def test_value_that_cannot_narrow_halfway(tmp_path: Path) -> None:
    before = _previous_outputs(tmp_path)
    bad = numpy_helper.from_array(np.array([1, 2**40], np.int64), "t_big")
    path, _ = build_model(tmp_path, bad=bad)
    target = Target(supported={"FLOAT32", "INT32"}, int64="narrow")
    with pytest.raises(ValueRangeError, match=r"t_big.*does not fit INT32"):
        convert_model(path, tmp_path / "out", target=target)
    assert _unchanged(tmp_path, before) and no_temp_files(tmp_path)


@pytest.mark.parametrize("at_call", [1, 3, 20])
def test_keyboard_interrupt_while_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at_call: int) -> None:
    before = _previous_outputs(tmp_path)
    path, _ = build_model(tmp_path)
    calls: list[int] = []
    real_write_stored = image_writer._write_stored  # called once per constant written one at a time

    def interrupting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == at_call:
            raise KeyboardInterrupt
        return real_write_stored(*args, **kwargs)

    monkeypatch.setattr(image_writer, "_write_stored", interrupting)
    with pytest.raises(KeyboardInterrupt):
        convert_model(path, tmp_path / "out", checksum=True)
    assert _unchanged(tmp_path, before) and no_temp_files(tmp_path)


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_failure_between_the_two_renames_restores_the_previous_bin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: type[BaseException]
) -> None:
    before = _previous_outputs(tmp_path)
    path, _ = build_model(tmp_path)
    real_replace = os.replace

    def failing_json_replace(src: Any, dst: Any) -> None:
        if str(dst).endswith(".json"):
            raise failure("injected")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_json_replace)
    with pytest.raises(KeyboardInterrupt if failure is KeyboardInterrupt else DestinationError):
        convert_model(path, tmp_path / "out", alignment=64)
    monkeypatch.undo()
    assert _unchanged(tmp_path, before) and no_temp_files(tmp_path)
    # Without previous outputs, nothing is left at all.
    monkeypatch.setattr(os, "replace", failing_json_replace)
    with pytest.raises(BaseException):  # noqa: B017 - whichever of the two was injected
        convert_model(path, tmp_path / "fresh")
    assert not (tmp_path / "fresh.bin").exists() and not (tmp_path / "fresh.json").exists()
    assert no_temp_files(tmp_path)


def test_fsync_false_skips_the_flushes_and_same_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = build_model(tmp_path)
    convert_model(path, tmp_path / "a")
    flushed: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: flushed.append(fd))
    convert_model(path, tmp_path / "b", fsync=False)
    assert flushed == []
    convert_model(path, tmp_path / "c")
    assert len(flushed) == (3 if os.name == "posix" else 2)  # the .bin, the .json (and the directory)
    for ext in ("bin", "json"):
        assert (tmp_path / f"a.{ext}").read_bytes() == (tmp_path / f"b.{ext}").read_bytes()
    with pytest.raises(InvalidArgumentError, match="fsync"):
        convert_model(path, tmp_path / "d", fsync=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("kernel", ["copy_file_range", "sendfile", "neither", "checksum"])
def test_stored_bytes_are_written_as_prepare_writes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    """Native tensors are written from their stored bytes (large external ones copied by the kernel, or read and
    written when it cannot, or when the .bin is hashed): the same bytes prepare gives, odd INT4 counts and
    padding included."""
    rng = np.random.default_rng(7)
    arrays = {
        "i4": rng.integers(-8, 8, (3 << 20) + 1).astype(ml_dtypes.int4),
        "u4": rng.integers(0, 16, (1 << 21) + 3).astype(ml_dtypes.uint4),
        "u8": rng.integers(0, 256, (1 << 20) + 3, dtype=np.uint8),
        "f16": rng.standard_normal((1 << 20) + 1).astype(np.float16),
        "f32": rng.standard_normal(1 << 18).astype(np.float32),
        "small_i4": np.array([1, -2, 3], ml_dtypes.int4),
    }
    inits, blob = [], bytearray()
    for index, (name, array) in enumerate(arrays.items()):
        tensor = numpy_helper.from_array(array, name)
        blob += bytes(index % 3)  # unaligned offsets
        external_data_helper.set_external_data(tensor, "w.data", offset=len(blob), length=len(tensor.raw_data))
        blob += tensor.raw_data
        tensor.ClearField("raw_data")
        inits.append(tensor)
    inits.append(numpy_helper.from_array(np.array([5, -6, 7, -8, 1], ml_dtypes.int4), "raw_i4"))
    inits.append(typed_storage("typed_f32", np.array([1.5, NAN, -0.0], np.float32)))
    inits.append(typed_storage("typed_i64", np.array([-(2**40), 3], np.int64)))
    arrays.update(raw_i4=np.array([5, -6, 7, -8, 1], ml_dtypes.int4), typed_f32=np.array([1.5, NAN, -0.0], np.float32),
                  typed_i64=np.array([-(2**40), 3], np.int64))
    (tmp_path / "w.data").write_bytes(bytes(blob))
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(helper.make_graph([], "g", [], [], inits)), path)

    def refuse(code: int) -> Any:
        def call(*args: Any) -> int:
            raise OSError(code, os.strerror(code))
        return call

    if kernel in ("sendfile", "neither"):
        monkeypatch.setattr(os, "copy_file_range", refuse(errno.EXDEV), raising=False)
    if kernel == "neither":
        monkeypatch.setattr(os, "sendfile", refuse(errno.EINVAL), raising=False)
    plan = convert_model(path, tmp_path / "out", checksum=kernel == "checksum", min_dims=4)
    for name, array in arrays.items():
        expected = dmlbridge.prepare(array, min_dims=4, guaranteed_base_offset_alignment=256)
        assert plan.entries[name].desc() == expected.desc()
        assert plan.read(name).tobytes() == expected.data.tobytes(), name
    load_plan(tmp_path / "out.json", verify=kernel == "checksum")


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_full_disk_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    before = _previous_outputs(tmp_path)
    script = textwrap.dedent(f"""
        import resource, sys
        import dmlbridge as m
        resource.setrlimit(resource.RLIMIT_FSIZE, (600, 600))  # Python ignores SIGXFSZ: writes fail with EFBIG
        try:
            m.convert_model({str(path)!r}, {str(tmp_path / "out")!r})
        except m.DestinationError as exc:
            print("DestinationError:", exc)
            sys.exit(3)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result.stderr
    assert "cannot write" in result.stdout
    assert _unchanged(tmp_path, before) and no_temp_files(tmp_path)


# --- verify ------------------------------------------------------------------------------------------------------


def test_verify_finds_a_changed_byte_and_a_changed_model(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    plan = convert_model(path, tmp_path / "out")
    plan.verify(path)
    data = bytearray((tmp_path / "out.bin").read_bytes())
    e = plan.entries["t_float16"]
    assert e.offset is not None
    data[e.offset + 7] ^= 0x01  # a padding byte: values read back the same, but the bytes are wrong
    (tmp_path / "out.bin").write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="bin_fingerprint"):  # load_plan samples the .bin: refused
        load_plan(tmp_path / "out.json")
    with pytest.raises(ManifestError, match=r"2 mismatches.*bin_fingerprint.*'t_float16': 1 byte\(s\) differ"):
        plan.verify(path)
    data[e.offset + 7] ^= 0x01
    data[e.offset + 1] ^= 0x80  # the sign of the first value
    (tmp_path / "out.bin").write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="t_float16"):
        plan.verify(path)
    data[e.offset + 1] ^= 0x80
    (tmp_path / "out.bin").write_bytes(bytes(data))
    plan.verify(path)

    changed = onnx.load(path, load_external_data=False)
    for t in changed.graph.initializer:
        if t.name == "t_last":
            t.CopyFrom(numpy_helper.from_array(np.array([0.5], np.float32), "t_last"))
    changed.graph.initializer.append(numpy_helper.from_array(np.ones(1, np.int8), "extra"))
    with pytest.raises(ManifestError, match=r"2 mismatches.*'t_last'.*differ.*'extra'.*not in the plan|"
                                            r"2 mismatches.*'extra'.*'t_last'"):
        plan.verify(changed, base_dir=tmp_path)


# --- load_plan refuses corruption ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    directory = tmp_path_factory.mktemp("written")
    path, _ = build_model(directory)
    convert_model(path, directory / "out", checksum=True, alignment=64)
    return directory, json.loads((directory / "out.json").read_text())


def _first(doc: dict[str, Any], converted: bool = True) -> dict[str, Any]:
    return next(e for e in doc["entries"] if (e["skipped"] is None) == converted)


def _set(path: str, value: Any) -> Any:
    def mutate(doc: dict[str, Any]) -> None:
        target: Any = doc
        parts = path.split(".")
        for part in parts[:-1]:
            target = _first(doc) if part == "E" else _first(doc, False) if part == "S" else (
                target[int(part)] if isinstance(target, list) else target[part])
        last: Any = int(parts[-1]) if isinstance(target, list) else parts[-1]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value(target[last]) if callable(value) else value
    return mutate


_DELETE = object()

MUTATIONS = {
    "format": _set("format", "onnx"),
    "format_version": _set("format_version", 2),
    "format_version_str": _set("format_version", "1"),
    "format_version_bool": _set("format_version", True),
    "missing_alignment": _set("alignment", _DELETE),
    "unknown_field": _set("extra", 1),
    "dmlbridge_version": _set("dmlbridge_version", 1),
    "source_not_object": _set("source", "model.onnx"),
    "source_size": _set("source.size", -1),
    "source_name": _set("source.name", 5),
    "alignment_24": _set("alignment", 24),
    "alignment_8": _set("alignment", 8),
    "alignment_float": _set("alignment", 64.0),
    "min_dims_9": _set("min_dims", 9),
    "min_dims_neg": _set("min_dims", -1),
    "total_size_neg": _set("total_size", -1),
    "total_size_str": _set("total_size", "100"),
    "total_size_mismatch": _set("total_size", lambda v: v + 64),
    "bin_sha256": _set("bin_sha256", "XYZ"),
    "bin_fingerprint_missing": _set("bin_fingerprint", _DELETE),
    "bin_fingerprint_null": _set("bin_fingerprint", None),
    "bin_fingerprint_not_hex": _set("bin_fingerprint", "XYZ"),
    "bin_fingerprint_upper": _set("bin_fingerprint", lambda v: v.upper()),
    "bin_fingerprint_other": _set("bin_fingerprint", lambda v: ("0" if v[0] != "0" else "1") + v[1:]),
    "target_level": _set("target.feature_level", "9.9"),
    "target_supported": _set("target.supported", ["BOGUS"]),
    "target_supported_unsorted": _set("target.supported", lambda v: list(reversed(v))),
    "target_int64": _set("target.int64", "maybe"),
    "target_lossy": _set("target.allow_lossy", "no"),
    "target_not_object": _set("target", None),
    "entries_not_list": _set("entries", {}),
    "entry_not_object": _set("entries.0", 7),
    "entry_missing_key": _set("E.key", _DELETE),
    "entry_empty_key": _set("E.key", ""),
    "entry_unknown_field": _set("E.note", "x"),
    "onnx_type": _set("E.onnx_type", "FLOAT99"),
    "onnx_type_undefined": _set("E.onnx_type", "UNDEFINED"),
    "shape_negative": _set("E.shape", [-2, 3]),
    "shape_float": _set("E.shape", [2.0, 3]),
    "shape_wrong": _set("E.shape", [3, 2, 1, 1, 1, 1, 1, 1, 1]),
    "dml_type_unknown": _set("E.dml_type", "FLOAT8"),
    "dml_type_inconsistent": _set("E.dml_type", "FLOAT64"),
    "conversion_unknown": _set("E.conversion", "magic"),
    "conversion_inconsistent": _set("E.conversion", "widen"),
    "offset_unaligned": _set("E.offset", lambda v: v + 16),
    "offset_null": _set("E.offset", None),
    "offset_past_end": _set("E.offset", 2**40),
    "desc_missing": _set("E.desc", None),
    "desc_field_missing": _set("E.desc.Flags", _DELETE),
    "desc_extra_field": _set("E.desc.Extra", 0),
    "desc_datatype": _set("E.desc.DataType", 2),
    "desc_flags": _set("E.desc.Flags", 1),
    "desc_dimcount": _set("E.desc.DimensionCount", 3),
    "desc_sizes": _set("E.desc.Sizes", [3, 2]),
    "desc_strides": _set("E.desc.Strides", [3, 1]),
    "desc_total": _set("E.desc.TotalTensorSizeInBytes", lambda v: v + 4),
    "desc_total_bool": _set("E.desc.Flags", False),
    "desc_alignment": _set("E.desc.GuaranteedBaseOffsetAlignment", 0),
    "skipped_with_offset": _set("S.offset", 0),
    "skipped_with_desc": _set("S.desc", {}),
    "skipped_empty_reason": _set("S.skipped", ""),
    "skipped_number": _set("S.skipped", 3),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_load_plan_refuses_each_corrupted_field(written: tuple[Path, dict[str, Any]], tmp_path: Path,
                                                name: str) -> None:
    directory, doc = written
    bad = copy.deepcopy(doc)
    MUTATIONS[name](bad)
    (tmp_path / "m.json").write_text(json.dumps(bad))
    (tmp_path / "m.bin").write_bytes((directory / "out.bin").read_bytes())
    with pytest.raises(ManifestError):
        load_plan(tmp_path / "m.json")


def test_load_plan_refuses_overlaps_and_duplicate_keys(written: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    directory, doc = written
    (tmp_path / "m.bin").write_bytes((directory / "out.bin").read_bytes())
    bad = copy.deepcopy(doc)
    converted = [e for e in bad["entries"] if e["skipped"] is None]
    converted[1]["offset"] = converted[0]["offset"]
    (tmp_path / "m.json").write_text(json.dumps(bad))
    with pytest.raises(ManifestError, match="overlap"):
        load_plan(tmp_path / "m.json")
    bad = copy.deepcopy(doc)
    bad["entries"][1]["key"] = bad["entries"][0]["key"]
    (tmp_path / "m.json").write_text(json.dumps(bad))
    with pytest.raises(ManifestError, match="repeats the key"):
        load_plan(tmp_path / "m.json")


@pytest.mark.parametrize(
    "text",
    [
        "", "{", "[]", "null", '"plan"', "{} {}", '{"format": NaN}', '{"a": 1, "a": 2}', "[" * 100000 + "]" * 100000,
        '{"total_size": ' + "9" * 5000 + "}",
    ],
    ids=["empty", "truncated", "list", "null", "string", "two", "nan", "duplicate", "deep", "huge-int"],
)
def test_load_plan_refuses_text_that_is_not_a_manifest(tmp_path: Path, text: str) -> None:
    (tmp_path / "m.json").write_text(text)
    (tmp_path / "m.bin").write_bytes(b"")
    with pytest.raises(ManifestError):
        load_plan(tmp_path / "m.json")
    (tmp_path / "m.json").write_bytes(b'{"format": "\xff\xfe"}')
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_plan(tmp_path / "m.json")


def test_load_plan_checks_the_bin(written: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    directory, doc = written
    data = (directory / "out.bin").read_bytes()
    (tmp_path / "m.json").write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match="cannot read the buffer image"):
        load_plan(tmp_path / "m.json")
    for wrong in (data + b"\x00", data[:-1], b""):
        (tmp_path / "m.bin").write_bytes(wrong)
        with pytest.raises(ManifestError, match="holds"):
            load_plan(tmp_path / "m.json")
    (tmp_path / "m.bin").write_bytes(data)
    assert load_plan(tmp_path / "m.json", verify=True).total_size == len(data)
    tampered = bytearray(data)
    tampered[-1] ^= 0xFF
    (tmp_path / "m.bin").write_bytes(bytes(tampered))
    with pytest.raises(ManifestError, match="bin_fingerprint"):  # sizes agree: the sampled fingerprint tells
        load_plan(tmp_path / "m.json")
    with pytest.raises(ManifestError, match="bin_fingerprint"):
        load_plan(tmp_path / "m.json", verify=True)
    (tmp_path / "m.bin").write_bytes(data)
    without = dict(doc)
    del without["bin_sha256"]
    (tmp_path / "m.json").write_text(json.dumps(without))
    with pytest.raises(ManifestError, match="no bin_sha256"):
        load_plan(tmp_path / "m.json", verify=True)
    os.unlink(tmp_path / "m.bin")
    os.mkdir(tmp_path / "m.bin")
    with pytest.raises(ManifestError, match="not a regular file"):
        load_plan(tmp_path / "m.json")
    with pytest.raises(ManifestError, match="cannot read manifest"):
        load_plan(tmp_path / "missing.json")
    with pytest.raises(ManifestError, match=r"\.json"):
        load_plan(tmp_path / "m.manifest")
    (tmp_path / "other.data").write_bytes(data)
    assert load_plan(tmp_path / "m.json", bin_path=tmp_path / "other.data").bin_path == str(tmp_path / "other.data")


def test_manifest_claiming_a_terabyte_is_refused_without_allocating(
    written: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    directory, doc = written
    bad = copy.deepcopy(doc)
    last = [e for e in bad["entries"] if e["skipped"] is None][-1]
    last["offset"] = 2**40
    bad["total_size"] = 2**40 + last["desc"]["TotalTensorSizeInBytes"]
    (tmp_path / "m.json").write_text(json.dumps(bad))
    (tmp_path / "m.bin").write_bytes((directory / "out.bin").read_bytes())
    script = textwrap.dedent(f"""
        import resource, dmlbridge
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        try:
            dmlbridge.load_plan({str(tmp_path / "m.json")!r})
        except dmlbridge.ManifestError as exc:
            print("refused:", exc)
    """)
    if sys.platform == "win32":
        pytest.skip("RLIMIT_AS is POSIX")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "refused:" in result.stdout and "holds" in result.stdout, result.stderr


def test_random_manifest_mutations_only_raise_manifest_error(
    written: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    directory, _ = written
    text = (directory / "out.json").read_bytes()
    (tmp_path / "m.bin").write_bytes((directory / "out.bin").read_bytes())
    rng = random.Random(20240601)
    outcomes = {"refused": 0, "accepted": 0}
    runs = int(os.environ.get("DMLBRIDGE_FUZZ_EXAMPLES") or 300)  # a longer run: DMLBRIDGE_FUZZ_EXAMPLES=20000
    for _ in range(runs):
        mutated = bytearray(text)
        for _ in range(rng.randint(1, 4)):
            how = rng.random()
            position = rng.randrange(len(mutated))
            if how < 0.5:
                mutated[position] = rng.randrange(256)
            elif how < 0.7:
                del mutated[position : position + rng.randint(1, 40)]
            elif how < 0.9:
                mutated[position:position] = rng.choice([b"0", b"9", b"-", b'"', b",", b"[", b"}", b"null"])
            else:
                mutated = mutated[:position]
        (tmp_path / "m.json").write_bytes(bytes(mutated))
        try:
            plan = load_plan(tmp_path / "m.json", verify=rng.random() < 0.3)
        except ManifestError:
            outcomes["refused"] += 1
        except DmlBridgeError as exc:  # pragma: no cover - would be a bug: load_plan raises ManifestError only
            pytest.fail(f"{type(exc).__name__}: {exc}")
        else:
            outcomes["accepted"] += 1
            for entry in plan.converted:  # an accepted plan must be readable
                plan.dml_array(entry.key)
    assert outcomes["refused"] > runs * 0.8
