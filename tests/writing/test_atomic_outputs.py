"""Failures leave nothing behind: a bad tensor halfway, Ctrl-C while writing or between the two renames, a full
disk, fsync: the previous outputs stay as they were and no temporary file is left."""


from __future__ import annotations

import errno
import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from builders import model_of
from models import (
    NAN,
    build_model,
    no_temp_files,
    outputs,
    typed_storage,
)
from onnx import external_data_helper, numpy_helper

import dmlbridge
import dmlbridge.writing.convert
import dmlbridge.writing.image as image_writer
import dmlbridge.writing.publish as publish
from dmlbridge import convert_model, load_plan
from dmlbridge.errors import (
    DestinationError,
    InvalidArgumentError,
    TensorProtoError,
    ValueRangeError,
)
from dmlbridge.types.target import Target


def _outputs(tmp_path: Path) -> dict[str, bytes]:
    """Every output file of the prefix ``out``, by name (its lock is removed when a conversion ends)."""
    return {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("out.")}


def _previous_outputs(tmp_path: Path) -> dict[str, bytes]:
    path, _ = build_model(tmp_path)
    convert_model(path, tmp_path / "out", alignment=16)
    return _outputs(tmp_path)


def _unchanged(tmp_path: Path, before: dict[str, bytes]) -> bool:
    return _outputs(tmp_path) == before


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

    def failing_json_replace(src: Any, dst: Any, **kwargs: Any) -> None:
        if str(dst).endswith(".json"):
            raise failure("injected")
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", failing_json_replace)
    with pytest.raises(KeyboardInterrupt if failure is KeyboardInterrupt else DestinationError):
        convert_model(path, tmp_path / "out", alignment=64)
    monkeypatch.undo()
    assert _unchanged(tmp_path, before) and no_temp_files(tmp_path)
    # Without previous outputs, nothing is left at all, not even the lock.
    monkeypatch.setattr(os, "replace", failing_json_replace)
    with pytest.raises(BaseException):  # noqa: B017 - whichever of the two was injected
        convert_model(path, tmp_path / "fresh")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("fresh")] == []
    assert no_temp_files(tmp_path)


def test_fsync_false_skips_the_flushes_and_same_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = build_model(tmp_path)
    convert_model(path, tmp_path / "a")
    flushed: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: flushed.append(fd))
    convert_model(path, tmp_path / "b", fsync=False)
    assert flushed == []
    convert_model(path, tmp_path / "c")
    assert len(flushed) == (3 if os.name == "posix" else 2)  # the buffer, the manifest (and the directory)
    assert outputs(tmp_path / "a") == outputs(tmp_path / "b")
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
    onnx.save(model_of(inits), path)

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
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 3, result.stderr
    assert "cannot write" in result.stdout
    assert _unchanged(tmp_path, before) and no_temp_files(tmp_path)


def test_a_conversion_that_fails_to_publish_closes_each_of_its_files_once(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's own descriptors of the buffer files it wrote are closed once when publishing fails: closed by the
    conversion and again by the plan's files when collected, a descriptor another thread had opened in between (a
    lock, a pipe) was closed under it, and its writes went to the wrong file."""
    closed: list[int] = []
    real_close = os.close

    def recording_close(fd: int) -> None:
        closed.append(fd)
        real_close(fd)

    def failing_publish(self: Any, manifest: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(publish.Publication, "publish", failing_publish)
    model = model_of({"a": np.ones(64, np.float32), "b": np.ones(64, np.float32)})
    opened: list[int] = []
    real_keep = dmlbridge.writing.convert.keep_open

    def recording_keep(fd: int, path: str) -> int:
        opened.append(real_keep(fd, path))
        return opened[-1]

    monkeypatch.setattr(dmlbridge.writing.convert, "keep_open", recording_keep)
    monkeypatch.setattr(os, "close", recording_close)
    with pytest.raises(DestinationError, match="disk is full"):
        convert_model(model, tmp_path / "w", progress=False, max_buffer_bytes=256)
    gc.collect()  # (the failed plan's files, if anything still held them)
    monkeypatch.undo()
    assert len(opened) == 2 and all(closed.count(fd) == 1 for fd in opened), (opened, closed)
