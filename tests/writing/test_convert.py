"""convert_model and plan_model on whole models: round trips against the independent recomputation
(tests/helpers/models.py), the manifest and plan API, options, inputs that are not models, outputs that cannot be
written."""


from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from builders import model_of
from models import (
    DEFAULT_SKIPPED,
    TARGETS,
    buffer_path,
    build_model,
    check_independently,
    no_temp_files,
    same_values,
)
from onnx import helper

import dmlbridge
from dmlbridge import PlanEntry, UploadPlan, convert_model, load_plan, plan_model
from dmlbridge.errors import (
    DestinationError,
    ExternalDataError,
    InvalidArgumentError,
    LayoutError,
    TensorTooLargeError,
    UnsupportedTypeError,
)
from dmlbridge.types.target import Target


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
    assert loaded.bin_sha256 == hashlib.sha256(buffer_path(tmp_path / "out").read_bytes()).hexdigest()
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
    data = buffer_path(tmp_path / "out").read_bytes()

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
    # INT64 emulated in ONNX Runtime's later scheme: 8-byte elements, INT32 desc with doubled strides.
    emulated = convert_model(path, tmp_path / "emu", target=Target(feature_level="2.0"))
    e = emulated.entries["t_int64"]
    # (Feature level 2.0: 4 dimensions at least, so sizes [1, 1, 1, 3] and the padding dims' strides 2 x 3.)
    assert e.dml_type is dmlbridge.DmlDataType.INT32 and e.sizes == (1, 1, 1, 3) and e.strides == (6, 6, 6, 2)
    assert e.total_tensor_size_in_bytes == 24 and emulated.min_dims == 4
    raw = buffer_path(tmp_path / "emu").read_bytes()
    assert e.offset is not None and raw[e.offset : e.offset + 24] == struct.pack("<3q", -5, 7, 2**31 - 1)
    assert emulated.dml_array("t_int64").reshape(-1).tolist() == [-5, 7, 2**31 - 1]
    with pytest.raises(dmlbridge.InvalidArgumentError, match="min_dims=1 is below the 4 dimensions"):
        convert_model(path, tmp_path / "low", target=Target(feature_level="2.0"), min_dims=1)


def test_manifest_entries_and_plan_api(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    plan = convert_model(path, tmp_path / "out")
    assert isinstance(plan, UploadPlan) and plan.bin_path == str(buffer_path(tmp_path / "out"))
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
    assert not (tmp_path / "from_bytes.json").exists() and no_temp_files(tmp_path)
    plan = convert_model(raw, tmp_path / "from_bytes", base_dir=tmp_path)
    assert plan.source_name is None and plan.source_size == len(raw)
    proto = onnx.load(path, load_external_data=False)
    convert_model(proto, tmp_path / "from_proto", base_dir=tmp_path)
    reference_bin = buffer_path(tmp_path / "from_path").read_bytes()
    assert buffer_path(tmp_path / "from_bytes").read_bytes() == reference_bin
    assert buffer_path(tmp_path / "from_proto").read_bytes() == reference_bin
    plan.verify(raw, base_dir=tmp_path)
    # A model without external data needs no directory.
    simple = model_of({"x": np.ones(3)})
    assert convert_model(simple, tmp_path / "simple").total_size == 24


def test_model_without_constants_gives_an_empty_bin(tmp_path: Path) -> None:
    empty = model_of(nodes=[helper.make_node("Identity", ["x"], ["y"])])
    plan = convert_model(empty, tmp_path / "out", checksum=True)
    assert plan.total_size == 0 and not plan.entries
    assert buffer_path(tmp_path / "out").read_bytes() == b""
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
    assert not (tmp_path / "out.json").exists() and no_temp_files(tmp_path)


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
    # Never overwrite the model's own external data, nor the model file (PREFIX.json and PREFIX.lock are the
    # names a conversion writes over; its buffer files have new names).
    os.rename(tmp_path / "weights.data", tmp_path / "weights.json")
    for t in (m := onnx.load(path, load_external_data=False)).graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = "weights.json"
    onnx.save(m, path)
    before = (tmp_path / "weights.json").read_bytes()
    with pytest.raises(InvalidArgumentError, match="overwrite"):
        convert_model(path, tmp_path / "weights")
    assert (tmp_path / "weights.json").read_bytes() == before
    same_name = tmp_path / "m.lock"
    same_name.write_bytes(path.read_bytes())
    with pytest.raises(InvalidArgumentError, match="overwrite"):
        convert_model(same_name, tmp_path / "m")
    assert same_name.read_bytes() == path.read_bytes()


def test_out_prefixes_that_name_no_outputs_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    """The -o rule's refusals, in Python terms: each error names out_prefix, and nothing is created."""
    path, _ = build_model(tmp_path)
    before = sorted(os.listdir(tmp_path))
    (tmp_path / "m.json").mkdir()
    (tmp_path / "k.lock").mkdir()
    (tmp_path / "sub").mkdir()
    cases: list[tuple[Any, type[Exception], str]] = [
        ("", InvalidArgumentError, "out_prefix is empty"),
        (str(tmp_path / "folder") + os.sep, InvalidArgumentError, "out_prefix .* ends in a path separator"),
        # (an existing folder's name: its outputs would be sub.json beside it, named as the folder)
        (tmp_path / "sub", InvalidArgumentError, r"out_prefix .*sub' is a folder, not the outputs' names: give a "
                                                 r"prefix in it, e\.g\. .*model'"),
        (path, InvalidArgumentError, r"out_prefix .* ends in \.onnx, a model's extension"),
        (tmp_path / "w.json", InvalidArgumentError, r"ends in \.json, an output's extension .*w\.json\.json'"),
        (tmp_path / "w.BIN", InvalidArgumentError, r"ends in \.BIN"),
        (tmp_path / "no" / "x", DestinationError, "output directory .* of out_prefix .* does not exist: create it"),
        (tmp_path / "m", DestinationError, r"out_prefix .* names the manifest .*m\.json', which is a directory"),
        (tmp_path / "k", DestinationError, r"out_prefix .* names the lock .*k\.lock', which is a directory"),
    ]
    posix = os.name == "posix"  # (by the platform: Wine shows Linux's /dev and /proc to Windows programs too)
    if posix:
        cases.append(("/dev/null", DestinationError, "out_prefix '/dev/null' is a character device"))
    if sys.platform.startswith("linux"):
        cases.append(("/proc/dmlbridge-probe", DestinationError, "out_prefix .* kernel's proc filesystem"))
    devices = set(os.listdir("/dev")) if posix else set()
    try:
        for prefix, error, message in cases:
            with pytest.raises(error, match=message):
                convert_model(path, prefix, progress=False)
    finally:  # (what a conversion allowed into /dev would have left there)
        written = set(os.listdir("/dev")) - devices if posix else set()
        for name in written:
            if name.startswith("null."):
                os.unlink(os.path.join("/dev", name))
    assert sorted(os.listdir(tmp_path)) == sorted([*before, "m.json", "k.lock", "sub"]) and not written


def test_output_files_get_normal_permissions(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    convert_model(path, tmp_path / "out")
    mask = os.umask(0o022)
    os.umask(mask)
    for name in (buffer_path(tmp_path / "out"), tmp_path / "out.json"):
        assert stat.S_IMODE(name.stat().st_mode) == 0o666 & ~mask
    assert not (tmp_path / "out.lock").exists()  # (removed as the conversion ended)
    os.chmod(tmp_path / "out.json", 0o640)
    convert_model(path, tmp_path / "out")  # new outputs get the ordinary mode, never the one they replace
    assert stat.S_IMODE((tmp_path / "out.json").stat().st_mode) == 0o666 & ~mask


def test_strict_turns_skips_into_errors_before_writing(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    with pytest.raises(UnsupportedTypeError, match=r"t_string.*strict"):
        convert_model(path, tmp_path / "out", strict=True)
    assert not (tmp_path / "out.json").exists() and no_temp_files(tmp_path)
    only_empty = model_of({"ok": np.ones(2, np.float32), "e": np.zeros((2, 0))})
    with pytest.raises(LayoutError, match=r"'e'.*empty"):
        convert_model(only_empty, tmp_path / "out", strict=True)
    assert convert_model(only_empty, tmp_path / "out").entries["e"].skipped


def test_too_many_dimensions_is_a_skip_with_the_layout_reason(tmp_path: Path) -> None:
    m = model_of({"six": np.ones((1,) * 6, np.float32)})
    plan = convert_model(m, tmp_path / "out", target=Target(feature_level="2.0"))
    assert "1 to 5 dimensions" in (plan.entries["six"].skipped or "")
    with pytest.raises(LayoutError):
        convert_model(m, tmp_path / "out", target=Target(feature_level="2.0"), strict=True)


def test_checksum_is_of_the_bin_and_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = build_model(tmp_path)
    plan = convert_model(path, tmp_path / "out", checksum=True, progress=True)
    assert plan.bin_sha256 == hashlib.sha256(buffer_path(tmp_path / "out").read_bytes()).hexdigest()
    assert "B" in capsys.readouterr().err  # tqdm drew a bar of bytes
    convert_model(path, tmp_path / "out")  # progress=None and stderr is not a terminal: silent
    convert_model(path, tmp_path / "out", progress=False)
    assert capsys.readouterr().err == ""


def test_verify_shows_a_progress_bar_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = build_model(tmp_path)
    plan = convert_model(path, tmp_path / "out", progress=False)
    plan.verify(path, progress=True)
    assert "verify" in capsys.readouterr().err  # tqdm drew the bar, labelled
    plan.verify(path)  # progress=None and stderr is not a terminal: silent
    plan.verify(path, progress=False)
    assert capsys.readouterr().err == ""
    with pytest.raises(InvalidArgumentError, match="progress must be None, True or False"):
        plan.verify(path, progress="yes")  # type: ignore[arg-type]


def test_max_tensor_bytes_names_the_constant(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    with pytest.raises(TensorTooLargeError, match="ext_f32"):
        convert_model(path, tmp_path / "out", max_tensor_bytes=512)
    assert no_temp_files(tmp_path)


def test_plans_compare_by_content_and_print_short(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    written = convert_model(path, tmp_path / "out", progress=False)
    loaded = load_plan(tmp_path / "out")  # the prefix given to convert_model is enough
    assert loaded.manifest_path == str(tmp_path / "out.json")
    assert loaded == written and written == load_plan(tmp_path / "out.json") and loaded != plan_model(path)
    other = convert_model(path, tmp_path / "again", progress=False)  # another conversion: another id and file
    assert other != written and len(repr(loaded)) < 400 and repr(loaded).startswith("UploadPlan(<")
    assert Target() == Target("6.4", supported=Target().types) and Target("6.2") != Target()
    assert Target("1.0").types == Target("2.0").types and Target("1.0") != Target("2.0")  # BOOL, dims differ
    assert hash(Target()) == hash(Target("6.4", supported=Target().types))
    assert len({Target(), Target("6.4", supported=Target().types)}) == 1


def test_owned_by_dml_flags_and_buffer_bindings(tmp_path: Path) -> None:
    """flags="owned-by-dml" marks every converted entry's desc (the bytes are the same); an entry gives the
    DML_BUFFER_BINDING of its bytes in the buffer that holds the uploaded file."""
    import ctypes

    path, _ = build_model(tmp_path)
    plain = convert_model(path, tmp_path / "plain", progress=False)
    owned = convert_model(path, tmp_path / "owned", progress=False, flags="owned-by-dml")
    assert buffer_path(tmp_path / "owned").read_bytes() == buffer_path(tmp_path / "plain").read_bytes()
    loaded = load_plan(tmp_path / "owned")
    for plan in (owned, loaded):
        assert all(e.flags == 1 and e.desc()["Flags"] == 1 and e.as_ctypes().Flags == 1 for e in plan.converted)
    assert all(e.flags == 0 for e in plain.converted)
    loaded.verify(path)
    entry = loaded.entries["t_float16"]
    binding = entry.as_ctypes_binding(0x1234)
    assert ctypes.sizeof(binding) == 24 and binding.Buffer == 0x1234
    assert (binding.Offset, binding.SizeInBytes) == (entry.offset, entry.total_tensor_size_in_bytes)
    with pytest.raises(InvalidArgumentError, match="skipped"):
        loaded.entries["t_string"].as_ctypes_binding(0x1234)
    with pytest.raises(InvalidArgumentError, match="flags"):
        convert_model(path, tmp_path / "bad", flags=2)
