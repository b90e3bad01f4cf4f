"""The whole-model half's rarer error paths, each reached once: a DmlBridgeError subclass whose message says what
went wrong and what to do, never an OSError, a ValueError or a traceback. (Races and failing disks are stood in
for by a read or an open that fails where the real one would.)"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from builders import model_of
from models import buffer_path
from onnx import helper, numpy_helper

import dmlbridge
import dmlbridge.onnx.external_data as external_data
import dmlbridge.plan.open_buffers as buffer_files
import dmlbridge.writing.publish as commit
from dmlbridge import DestinationError, InvalidArgumentError, ManifestError, TensorTooLargeError
from dmlbridge.placement.options import MAX_KEY_LENGTH
from dmlbridge.plan.fingerprint import bin_fingerprint, fingerprint_problem


def small_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(64, dtype=np.float32), "w")
    return model_of([w])


@pytest.fixture
def written(tmp_path: Path) -> Path:
    dmlbridge.convert_model(small_model(), tmp_path / "m", progress=False, checksum=True).close()
    return tmp_path / "m.json"


def failing_read(*_: Any) -> bytes:
    raise OSError(5, "Input/output error")


def test_a_buffer_file_cut_short_after_loading(written: Path) -> None:
    with dmlbridge.load_plan(written) as plan:
        os.truncate(buffer_path(written.with_suffix("")), 100)
        with pytest.raises(ManifestError, match="ended at byte 100, before byte 256; it was cut short after"):
            plan.read("w")


def test_a_failing_read_of_a_buffer_file(written: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with dmlbridge.load_plan(written) as plan:
        monkeypatch.setattr(buffer_files, "read_at", failing_read)
        monkeypatch.setattr(buffer_files, "read_into", failing_read)
        with pytest.raises(ManifestError, match=r"cannot read .*Input/output error"):
            plan.read("w")
        with pytest.raises(ManifestError, match=r"cannot read .*Input/output error"):
            plan.buffer_problems(sha256=True)


def test_no_memory_for_an_entry(written: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with dmlbridge.load_plan(written) as plan:
        def no_memory(*_: Any, **__: Any) -> Any:
            raise MemoryError

        monkeypatch.setattr(dmlbridge.plan.upload_plan.np, "empty", no_memory)  # type: ignore[attr-defined]
        with pytest.raises(TensorTooLargeError, match="the allocation failed; free memory"):
            plan.read("w")


def test_a_fingerprint_that_meets_the_end_of_the_file(tmp_path: Path) -> None:
    """The file is shorter than the ranges sampled: in one window read, and in a range read in pieces."""
    path = tmp_path / "short.bin"
    path.write_bytes(bytes(100))
    with open(path, "rb") as file:
        with pytest.raises(OSError, match="ended at byte 100, before byte"):
            bin_fingerprint(file.fileno(), 1000, [0], [1000])
        many = 8 << 20  # small entries packed over more than one read's worth of bytes: one range read in pieces
        with pytest.raises(OSError, match="ended at byte 100, before byte"):
            bin_fingerprint(file.fileno(), many, list(range(0, many, 64)), [64] * (many // 64))
        with pytest.raises(ManifestError, match=r"cannot read the buffer file 'short.bin': .*ended at byte 100"):
            fingerprint_problem(file.fileno(), "short.bin", "0" * 64, 1000, [0], [1000])


def test_the_output_directory_cannot_be_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def refuse_directories(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & getattr(os, "O_DIRECTORY", 0) and os.fspath(path) == str(tmp_path):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(commit.os, "open", refuse_directories)
    if not getattr(os, "O_DIRECTORY", 0):
        pytest.skip("the directory is opened only where O_DIRECTORY exists")
    with pytest.raises(DestinationError, match=r"cannot open the output directory .*Permission denied"):
        dmlbridge.convert_model(small_model(), tmp_path / "m", progress=False)
    assert not os.listdir(tmp_path)


def test_a_buffer_file_name_taken_between_two_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The new buffer file's name (random) exists already: refused, never overwritten."""
    monkeypatch.setattr(commit.secrets, "token_hex", lambda n: "ab" * n)
    taken = tmp_path / f"m.{'ab' * 8}.00000.bin"
    taken.write_bytes(b"someone else's")
    with pytest.raises(DestinationError, match="exists already; convert again"):
        dmlbridge.convert_model(small_model(), tmp_path / "m", progress=False)
    assert taken.read_bytes() == b"someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == [taken.name]  # (the lock removed as the conversion ended)


def test_verifying_a_plan_that_was_never_written() -> None:
    with pytest.raises(InvalidArgumentError, match=r"not written .*no buffer file to verify"):
        dmlbridge.plan_model(small_model()).verify(small_model())


def test_a_manifest_whose_external_data_list_is_not_a_list(written: Path) -> None:
    doc = json.loads(written.read_text())
    doc["source"]["external_data"] = "w.data"
    written.write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match=r"external_data must be an array of at most 65536 files, got"):
        dmlbridge.load_plan(written)


def test_max_manifest_bytes_none() -> None:
    with pytest.raises(InvalidArgumentError, match="max_manifest_bytes must be a non-negative integer, got None"):
        dmlbridge.check_conversion(small_model(), max_manifest_bytes=None)  # type: ignore[arg-type]


def test_an_external_data_root_that_cannot_be_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    root.mkdir()
    real_open = os.open

    def refuse_root(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == str(root):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(external_data.os, "open", refuse_root)
    onnx.save(small_model(), tmp_path / "m.onnx")
    if not external_data._WALK_OPEN:
        pytest.skip("the root is opened only where directories can be walked by descriptor")
    with pytest.raises(InvalidArgumentError, match=r"external_data_root .* cannot be opened"):
        dmlbridge.check_conversion(tmp_path / "m.onnx", external_data_root=root)


def test_an_origin_too_long_for_the_manifest() -> None:
    """A short key with a node name of 9,000 characters: the origin (which names the node) is refused."""
    node = helper.make_node("Constant", [], ["c"], name="n" * (2 * MAX_KEY_LENGTH + 1),
                            value=numpy_helper.from_array(np.ones(2, np.float32)))
    model = helper.make_model(helper.make_graph([node], "g", [], [helper.make_tensor_value_info("c", 1, [2])]))
    with pytest.raises(InvalidArgumentError, match=r"has a key of 1 characters .*at most 4096 .*origins twice that"):
        dmlbridge.plan_model(model)


def test_external_data_root_without_a_directory() -> None:
    with pytest.raises(InvalidArgumentError, match="external_data_root= needs base_dir= when the model is given"):
        dmlbridge.check_conversion(small_model().SerializeToString(), external_data_root=".")


def test_a_field_given_twice_in_a_manifest(written: Path) -> None:
    """JSON allows a repeated name and keeps the last; a manifest must not (which one would the reader trust?)."""
    text = written.read_text()
    first_entry = text.index('"key"')
    written.write_text(text[:first_entry] + '"key": "other", ' + text[first_entry:])
    with pytest.raises(ManifestError, match="duplicate field 'key'"):
        dmlbridge.load_plan(written)


def _external(length: str) -> onnx.TensorProto:
    tensor = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[1],
                              data_location=onnx.TensorProto.EXTERNAL)
    tensor.external_data.add(key="location", value="w.bin")
    tensor.external_data.add(key="length", value=length)
    return tensor


@pytest.mark.parametrize(("call", "words"), [
    (lambda _: dmlbridge.tensor_to_array(onnx.TensorProto(name="t", data_type=onnx.TensorProto.FLOAT)),
     "has dims [] (1 element) but no data"),
    (lambda _: dmlbridge.tensor_to_array(onnx.TensorProto(name="t", data_type=onnx.TensorProto.FLOAT, dims=[1],
                                                          raw_data=b"\0")), "has 1 byte of raw_data"),
    (lambda _: dmlbridge.tensor_to_array(onnx.TensorProto(name="t", data_type=onnx.TensorProto.FLOAT, dims=[2],
                                                          float_data=[1.0])), "has 1 entry in float_data"),
    (lambda folder: dmlbridge.tensor_to_array(_external("1"), folder), "external data length is 1 byte but"),
    (lambda _: dmlbridge.unpack_4bit(b"", 1, signed=False), "unpacking 1 4-bit element needs 1 byte, data has 0"),
    (lambda _: dmlbridge.decode(b"\0", "UINT16", [1]), "data holds 1 byte but a UINT16 tensor"),
    (lambda _: dmlbridge.prepare(np.zeros((2, 3), np.float32), strides=[1]), "1 stride [1] for sizes"),
    (lambda _: dmlbridge.prepare(np.zeros(4, np.int8), guaranteed_base_offset_alignment=3),
     "element size (1 byte)"),
])
def test_counts_of_one_are_singular_in_the_librarys_errors(tmp_path: Path, call: Any, words: str) -> None:
    with pytest.raises(dmlbridge.DmlBridgeError) as caught:
        call(tmp_path)
    assert words in str(caught.value), caught.value


def test_a_plans_repr_counts_its_entries() -> None:
    assert repr(dmlbridge.plan_model(small_model())).startswith("UploadPlan(<1 entry>, ")
