"""Buffers within a size: an image split into buffer files of at most ``max_buffer_bytes``, in model order, no
tensor split; checked against the independent recomputation in ``models.check_independently`` (offsets, descs and
the reference encoder's bytes, buffer by buffer) and onnx's own decoding."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from budget import LONG
from builders import model_of
from command_line import run
from models import buffer_paths, check_independently
from onnx import external_data_helper, numpy_helper
from system_calls import PLANS_KEEP_NAMES, let_go

import dmlbridge
import dmlbridge.cli.commands
import dmlbridge.writing.image as image_writer
from dmlbridge import InvalidArgumentError, ManifestError, Target, TensorTooLargeError

KIB = 1 << 10
ALIGNMENT = 256


def mixed_model(limit: int, seed: int = 5) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """About 16 times ``limit`` of constants of mixed types and sizes, from a few bytes to exactly ``limit``:
    tensors that fill a buffer to the byte, that end just under it, and many small ones between."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    dtypes = [np.float32, np.float16, np.int8, np.int64, ml_dtypes.bfloat16, ml_dtypes.int4, np.uint16]
    total, i = 0, 0
    while total < 16 * limit:
        kind = i % 9
        dtype = np.dtype(dtypes[i % len(dtypes)])
        if kind == 0:
            array = rng.standard_normal(limit // 4).astype(np.float32)  # exactly the limit
        elif kind == 1:
            array = rng.standard_normal(limit // 4 - 1).astype(np.float32)  # 4 bytes under it
        elif kind == 2:
            array = rng.standard_normal(limit // 8 + 3).astype(np.float32)  # over half: never two in a buffer
        else:
            count = int(rng.integers(1, limit // 64))
            array = (rng.standard_normal(count) * 50).astype(dtype) if dtype.kind in "fV" and dtype != np.dtype(
                ml_dtypes.int4) else rng.integers(-8, 8, count).astype(dtype)
        arrays[f"t{i:03d}"] = array
        total += array.nbytes
        i += 1
    inits = [numpy_helper.from_array(a, k) for k, a in arrays.items()]
    return model_of(inits), arrays


@pytest.mark.parametrize(("limit", "paths"), [(16 * KIB, "fast-paths"), (16 * KIB, "checked-path-only"),
                                              (32 * KIB, "fast-paths"), (64 * KIB, "fast-paths")])
def test_an_image_split_into_buffers_is_exact(tmp_path: Path, limit: int, paths: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    if paths == "checked-path-only":
        monkeypatch.setenv("DMLBRIDGE_CHECKED_PATH_ONLY", "1")
    model, arrays = mixed_model(limit)
    plan = dmlbridge.convert_model(model, tmp_path / "w", alignment=ALIGNMENT, max_buffer_bytes=limit,
                                   checksum=True, progress=False)
    doc = check_independently(tmp_path / "w", arrays, Target(), 1, ALIGNMENT, limit)
    assert len(doc["buffers"]) > 10  # many buffers
    assert any(size == limit for size in plan.buffer_sizes)  # filled to the byte
    loaded = dmlbridge.load_plan(tmp_path / "w.json", verify=True)
    assert loaded == plan and loaded.buffer_sizes == plan.buffer_sizes
    for key, array in arrays.items():  # every value bit for bit as onnx decodes it
        expected = numpy_helper.to_array(numpy_helper.from_array(array, key))
        back = loaded.array(key)
        assert back.dtype == expected.dtype and back.tobytes() == expected.tobytes(), key
    loaded.verify(model)
    # plan_model says the same before anything is written.
    placement = dmlbridge.plan_model(model, alignment=ALIGNMENT, max_buffer_bytes=limit)
    assert placement.buffer_sizes == plan.buffer_sizes and placement.bindings() == plan.bindings()


def test_external_data_is_copied_into_each_buffer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tensors in external data from a size on (1 MiB; here 64 KiB) go by the kernel's copy, now into the buffer
    file each is in."""
    monkeypatch.setattr(image_writer, "_KERNEL_COPY_MIN", 64 * KIB)
    copied: list[int] = []
    copy_external = image_writer.ImageWriter.copy_external
    monkeypatch.setattr(image_writer.ImageWriter, "copy_external",
                        lambda writer, *args: copied.append(copy_external(writer, *args)) or copied[-1])
    rng = np.random.default_rng(3)
    arrays = {f"e{i}": rng.standard_normal((1 << 14) + 1000 * i).astype(np.float32) for i in range(5)}
    arrays["small"] = np.arange(7, dtype=np.float32)
    inits = []
    for key, array in arrays.items():
        tensor = numpy_helper.from_array(array, key)
        if array.nbytes >= 64 * KIB:
            raw = tensor.raw_data
            (tmp_path / f"{key}.bin").write_bytes(raw)
            external_data_helper.set_external_data(tensor, f"{key}.bin", offset=0, length=len(raw))
            tensor.ClearField("raw_data")
        inits.append(tensor)
    path = tmp_path / "m.onnx"
    onnx.save(model_of(inits), path)
    limit = 128 * KIB
    plan = dmlbridge.convert_model(path, tmp_path / "w", alignment=ALIGNMENT, max_buffer_bytes=limit, progress=False)
    check_independently(tmp_path / "w", arrays, Target(), 1, ALIGNMENT, limit)
    assert len(plan.buffers) == 5
    if sys.platform.startswith("linux"):  # (copy_file_range, else sendfile: the kernel copies every byte)
        assert sorted(copied) == sorted(a.nbytes for a in arrays.values() if a.nbytes >= 64 * KIB)
    plan.verify(path)


def test_one_buffer_when_the_model_fits(tmp_path: Path) -> None:
    model, arrays = mixed_model(64 * KIB)
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    assert len(plan.buffers) == 1 and plan.bin_path == plan.buffers[0].path
    assert plan.max_buffer_bytes == dmlbridge.DEFAULT_MAX_BUFFER_BYTES == 2 << 30
    assert [p.name for p in buffer_paths(tmp_path / "w")] == [f"w.{plan.conversion_id}.00000.bin"]
    check_independently(tmp_path / "w", arrays, Target(), 1, 256)
    empty = dmlbridge.convert_model(model_of(), tmp_path / "e",
                                    progress=False, max_buffer_bytes=256)
    assert empty.buffer_sizes == (0,) and len(empty.buffers) == 1


def test_a_tensor_over_the_limit_is_refused_before_any_file_exists(tmp_path: Path) -> None:
    model, _ = mixed_model(64 * KIB)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(TensorTooLargeError) as caught:
        dmlbridge.convert_model(model, out / "w", max_buffer_bytes=32 * KIB, progress=False)
    message = str(caught.value)
    assert "'t000'" in message and "65536 bytes" in message and "max_buffer_bytes=32768" in message
    assert os.listdir(out) == []
    with pytest.raises(TensorTooLargeError):
        dmlbridge.plan_model(model, max_buffer_bytes=32 * KIB)
    with pytest.raises(TensorTooLargeError):
        dmlbridge.check_conversion(model, max_buffer_bytes=32 * KIB)
    onnx.save(model, tmp_path / "m.onnx")
    result = run("convert", tmp_path / "m.onnx", "-o", out / "w", "--max-buffer-bytes", "32KiB")
    assert result.returncode == 2 and "--max-buffer-bytes" in result.stderr and "max_buffer_bytes" not in \
        result.stderr.replace("--max-buffer-bytes", ""), result.stderr
    assert os.listdir(out) == []


def _two_large(first: int, second: int) -> onnx.ModelProto:
    """A small constant, then two float32 ones of ``first`` and ``second`` bytes, then a small one."""
    return model_of({"small": np.ones(3, np.float32), "a": np.ones(first // 4, np.float32),
                     "b": np.ones(second // 4, np.float32), "tail": np.ones(5, np.float32)})


@pytest.mark.parametrize(("alignment", "works", "named"), [(256, 12 * KIB, "12288 (12KiB)"),
                                                             (8 * KIB, 16 * KIB, "16384 (16KiB)")])
def test_the_refusal_names_the_one_round_limit_that_converts_the_whole_model(alignment: int, works: int,
                                                                              named: str) -> None:
    """Two constants over the limit, the later one larger (10,000 and 12,000 bytes over 4 KiB, or 8 KiB): the
    error names the smallest round limit every constant fits, not the first constant's size, so one retry
    converts the model. Worked by hand: 12,000 bytes need 12,032 (a multiple of 256), rounded up to 12 KiB; with
    8 KiB alignment, the smallest multiple of it over 12,000 is 16 KiB. One KiB less (one alignment less) is
    refused."""
    model = _two_large(10000, 12000)
    with pytest.raises(TensorTooLargeError) as caught:
        dmlbridge.plan_model(model, max_buffer_bytes=alignment if alignment > 4 * KIB else 4 * KIB,
                             alignment=alignment)
    message = str(caught.value)
    assert "'a'" in message and f"pass max_buffer_bytes={named}" in message, message
    assert "the smallest round limit with which every constant of this model fits a buffer" in message, message
    dmlbridge.plan_model(model, max_buffer_bytes=works, alignment=alignment)
    with pytest.raises(TensorTooLargeError):
        dmlbridge.plan_model(model, max_buffer_bytes=works - max(alignment, KIB), alignment=alignment)


def test_too_many_buffers_names_the_limit_that_makes_few_enough() -> None:
    """257 tensors of 256 bytes at a 256-byte limit take 257 buffers, one more than a conversion writes; two a
    buffer (512 bytes) take 129."""
    model = model_of([numpy_helper.from_array(np.zeros(64, np.float32), f"w{i}") for i in range(257)])
    with pytest.raises(InvalidArgumentError, match="more than 256 buffers") as caught:
        dmlbridge.plan_model(model, max_buffer_bytes=256)
    assert "pass max_buffer_bytes=512:" in str(caught.value), caught.value
    assert len(dmlbridge.plan_model(model, max_buffer_bytes=512).buffer_sizes) == 129


def test_round_limits_are_whole_units_of_at_most_a_sixteenth_more() -> None:
    """The rounding the refusal names, by hand: the coarsest of GiB, MiB and KiB that adds at most 1/16 and
    keeps the alignment, else the exact value; never past 0xFFFF0000."""
    from dmlbridge.placement.options import byte_count_text, round_limit

    cases = [(12032, 256, 12 * KIB), (26116, 256, 26 * KIB), (9728 * KIB, 256, 10 << 20),
             (5 * (1 << 20) + 1, 256, 5121 * KIB), (2469606195, 256, 2356 << 20), (512, 256, 512),
             (12001, 8 * KIB, 16 * KIB), (0xFFFF0000 - 100, 256, 0xFFFF0000)]
    for needed, alignment, rounded in cases:
        got = round_limit(needed, alignment)
        assert got == rounded, (needed, alignment, got)
    assert round_limit(0xFFFF0000 + 1, 256) is None and round_limit(3 << 30, 1 << 31) is None
    assert [byte_count_text(n) for n in (512, 12 * KIB, 10 << 20, 5121 * KIB, 2 << 30, 0xFFFF0000)] == \
        ["512", "12KiB", "10MiB", "5121KiB", "2GiB", "4194240KiB"]


@pytest.mark.parametrize("limit", [0, 8, 255, 257, 0xFFFF0000 + 256, 1 << 32, -256, True, 2.0 ** 20])
def test_limits_outside_the_range_are_refused(tmp_path: Path, limit: Any) -> None:
    model, _ = mixed_model(64 * KIB)
    with pytest.raises(InvalidArgumentError, match="max_buffer_bytes must be a multiple of the alignment"):
        dmlbridge.convert_model(model, tmp_path / "w", max_buffer_bytes=limit, progress=False)
    assert os.listdir(tmp_path) == []


def test_the_largest_limit_is_an_upload_buffers_and_alignment_bounds_it() -> None:
    model, _ = mixed_model(64 * KIB)
    assert dmlbridge.plan_model(model, max_buffer_bytes=0xFFFF0000).max_buffer_bytes == 0xFFFF0000
    with pytest.raises(InvalidArgumentError):  # 0xFFFF0000 is not a multiple of 2^17
        dmlbridge.plan_model(model, alignment=1 << 17, max_buffer_bytes=0xFFFF0000)
    inits = [numpy_helper.from_array(np.zeros(64, np.float32), f"w{i}") for i in range(257)]
    many = model_of(inits)
    with pytest.raises(InvalidArgumentError, match="more than 256 buffers"):
        dmlbridge.plan_model(many, max_buffer_bytes=256)  # (a buffer per 256-byte tensor)
    inits.pop()
    assert len(dmlbridge.plan_model(model_of(inits),
                                    max_buffer_bytes=256).buffer_sizes) == 256


def test_the_command_line_takes_the_limit_and_inspect_shows_the_buffers(tmp_path: Path) -> None:
    model, _ = mixed_model(64 * KIB)
    onnx.save(model, tmp_path / "m.onnx")
    shown = run("inspect", tmp_path / "m.onnx", "--max-buffer-bytes", "64KiB", "--wide")  # (one line each)
    planned = dmlbridge.plan_model(model, max_buffer_bytes=64 * KIB)
    lines = shown.stdout.splitlines()
    assert shown.returncode == 0 and lines[0].split()[6:8] == ["buffer", "offset"]
    buffer_lines = [line for line in lines if line.startswith("buffer ")]
    assert len(buffer_lines) == len(planned.buffer_sizes) > 10 and buffer_lines[0].startswith("buffer 0: ")
    assert f"in {len(planned.buffer_sizes)} buffers, " in lines[-1] and "(at most 65,536 bytes each)" in lines[-1]
    as_json = json.loads(run("inspect", tmp_path / "m.onnx", "--max-buffer-bytes", "65536", "--json").stdout)
    assert as_json["totals"]["buffer_sizes"] == list(planned.buffer_sizes)
    assert as_json["max_buffer_bytes"] == 64 * KIB
    result = run("convert", tmp_path / "m.onnx", "-o", tmp_path / "w", "--max-buffer-bytes", "64KiB", "--checksum")
    assert result.returncode == 0 and f"wrote {len(planned.buffer_sizes)} buffer files" in result.stdout
    verified = run("verify", tmp_path / "w.json", tmp_path / "m.onnx")
    assert verified.returncode == 0 and "each of the" in verified.stdout, verified.stderr
    for bad in ("64KB", "64k", "0x100000000"):
        refused = run("inspect", tmp_path / "m.onnx", "--max-buffer-bytes", bad)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr


def test_every_buffer_of_the_previous_conversion_is_removed_however_many_it_had(tmp_path: Path) -> None:
    """Every buffer file of the previous conversion is removed by the conversion that replaces it, before it
    returns, however many either has: the folder holds the current conversion's files and nothing hidden."""
    model, _ = mixed_model(64 * KIB)
    many = dmlbridge.convert_model(model, tmp_path / "w", max_buffer_bytes=64 * KIB, progress=False)
    assert len([n for n in os.listdir(tmp_path) if n.endswith(".bin")]) == len(many.buffers) > 10
    t005 = many.array("t005").tobytes()
    let_go(many)
    fewer = dmlbridge.convert_model(model, tmp_path / "w", max_buffer_bytes=256 * KIB, progress=False)
    names = [os.path.basename(b.path) for b in fewer.buffers]
    assert sorted(os.listdir(tmp_path)) == sorted(["w.json", *names])
    let_go(fewer)
    one = dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    assert sorted(os.listdir(tmp_path)) == sorted(["w.json", os.path.basename(one.buffers[0].path)])
    assert one.array("t005").tobytes() == t005
    if not PLANS_KEEP_NAMES:  # (the old plan reads its open files, removed)
        assert many.array("t005").tobytes() == t005


@pytest.fixture()
def written(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    model, _ = mixed_model(64 * KIB)
    dmlbridge.convert_model(model, tmp_path / "w", max_buffer_bytes=64 * KIB, progress=False, checksum=True)
    return tmp_path, json.loads((tmp_path / "w.json").read_text())


def test_a_missing_truncated_or_swapped_buffer_file_is_refused(written: tuple[Path, dict[str, Any]]) -> None:
    directory, doc = written
    paths = buffer_paths(directory / "w")
    sizes = [b["size"] for b in doc["buffers"]]
    same = next((i, j) for i in range(len(sizes)) for j in range(i + 1, len(sizes)) if sizes[i] == sizes[j])
    backup = directory / "backup"
    backup.mkdir()
    for path in paths:
        shutil.copy(path, backup / path.name)

    def restore() -> None:
        for path in paths:
            shutil.copy(backup / path.name, path)

    paths[3].unlink()
    with pytest.raises(ManifestError, match="cannot open the buffer file"):
        dmlbridge.load_plan(directory / "w.json")
    restore()
    os.truncate(paths[2], sizes[2] - 1)
    with pytest.raises(ManifestError, match=r"holds \d+ bytes but the manifest says"):
        dmlbridge.load_plan(directory / "w.json")
    restore()
    a, b = paths[same[0]], paths[same[1]]  # two buffers of one size swapped: their fingerprints tell them apart
    os.rename(a, directory / "tmp")
    os.rename(b, a)
    os.rename(directory / "tmp", b)
    with pytest.raises(ManifestError, match="fingerprint"):
        dmlbridge.load_plan(directory / "w.json")
    restore()
    dmlbridge.load_plan(directory / "w.json", verify=True)


def _tamper(directory: Path, doc: dict[str, Any], change: Any) -> None:
    bad = json.loads(json.dumps(doc))
    change(bad)
    (directory / "w.json").write_text(json.dumps(bad))


def _move_to_previous_buffer(doc: dict[str, Any]) -> None:
    """The first entry of buffer 1 moved to the end of buffer 0, where it does not fit in the limit."""
    first = next(e for e in doc["entries"] if e["buffer"] == 1)
    first["buffer"], first["offset"] = 0, -(-doc["buffers"][0]["size"] // 256) * 256


def _buffer_of_the_next(doc: dict[str, Any]) -> None:
    """Two buffers' entries in each other's files, sizes adjusted: not model order."""
    for e in doc["entries"]:
        if e["buffer"] in (0, 1):
            e["buffer"] = 1 - e["buffer"]
    doc["buffers"][0], doc["buffers"][1] = doc["buffers"][1], doc["buffers"][0]


def _opened_early(doc: dict[str, Any]) -> None:
    """Two buffers merged in the manifest where the second's first entry would have fit in the first."""
    doc["max_buffer_bytes"] = doc["max_buffer_bytes"] * 4


TAMPERING = {
    "buffer index past the list": lambda d: d["entries"][0].update(buffer=len(d["buffers"])),
    "buffer index negative": lambda d: d["entries"][0].update(buffer=-1),
    "buffer index a string": lambda d: d["entries"][0].update(buffer="0"),
    "skipped entry with a buffer": lambda d: d["entries"].append({**d["entries"][0], "key": "x", "skipped": "no",
                                                                  "conversion": None, "offset": None,
                                                                  "dml_type": None, "desc": None}),
    "entry past its buffer": lambda d: d["entries"][0].update(offset=d["buffers"][0]["size"]),
    "buffer over the limit": lambda d: d.update(max_buffer_bytes=d["buffers"][0]["size"] - 256),
    "limit not a multiple of the alignment": lambda d: d.update(max_buffer_bytes=d["max_buffer_bytes"] + 16),
    "limit over 0xFFFF0000": lambda d: d.update(max_buffer_bytes=1 << 32),
    "buffer list empty": lambda d: d.update(buffers=[]),
    "buffer renamed to another index": lambda d: d["buffers"][1].update(file=d["buffers"][2]["file"]),
    "sizes not adding up": lambda d: d.update(total_size=d["total_size"] + 1),
    "entry moved to the previous buffer": _move_to_previous_buffer,
    "buffers out of model order": _buffer_of_the_next,
    "a buffer begun before it was needed": _opened_early,
    "no max_buffer_bytes": lambda d: d.pop("max_buffer_bytes"),
    "no entry buffer": lambda d: d["entries"][0].pop("buffer"),
}


@pytest.mark.parametrize("name", list(TAMPERING))
def test_tampered_buffer_records_are_refused(written: tuple[Path, dict[str, Any]], name: str) -> None:
    directory, doc = written
    _tamper(directory, doc, TAMPERING[name])
    with pytest.raises(ManifestError):
        dmlbridge.load_plan(directory / "w.json")


def test_bindings_name_each_entrys_buffer(written: tuple[Path, dict[str, Any]]) -> None:
    directory, doc = written
    plan = dmlbridge.load_plan(directory / "w.json")
    bindings = plan.bindings()
    assert [(b.key, b.buffer, b.offset, b.size) for b in bindings] == [
        (e["key"], e["buffer"], e["offset"], e["desc"]["TotalTensorSizeInBytes"]) for e in doc["entries"]
        if e["skipped"] is None]
    resources = [0x10000 * (i + 1) for i in range(len(plan.buffers))]
    last = bindings[-1].as_ctypes(resources)
    assert (last.Buffer, last.Offset, last.SizeInBytes) == (resources[-1], bindings[-1].offset, bindings[-1].size)
    assert ctypes.sizeof(last) == 24
    with pytest.raises(InvalidArgumentError, match="one resource per buffer file"):
        bindings[-1].as_ctypes(resources[:1])
    entry = plan.entries[bindings[-1].key]
    assert entry.buffer == bindings[-1].buffer and entry.as_converted().buffer == entry.buffer


def test_the_guaranteed_size_for_a_vram_size() -> None:
    """min(max(128 MiB, VRAM / 4), 2048 MiB), the D3D12_REQ_RESOURCE_SIZE_IN_MEGABYTES_EXPRESSION terms."""
    cases = {0: 128 << 20, 256 << 20: 128 << 20, 1 << 30: 256 << 20, 3 << 30: 768 << 20, 8 << 30: 2 << 30,
             24 << 30: 2 << 30, (1 << 30) + 1000: 256 << 20}
    for vram, expected in cases.items():
        assert dmlbridge.max_buffer_bytes_for(vram) == expected, vram
    assert dmlbridge.max_buffer_bytes_for((2 << 30) + 4 * 1000, alignment=4096) == 512 << 20
    with pytest.raises(InvalidArgumentError):
        dmlbridge.max_buffer_bytes_for(-1)


@pytest.mark.skipif(not LONG, reason="a long run: DMLBRIDGE_LONG=1 runs it")
def test_a_few_hundred_mib_in_64_mib_buffers(tmp_path: Path) -> None:
    """The opt-in large run: about 400 MiB of float32 in 64 MiB buffers, checked as the small runs are (the
    per-element reference makes it take several minutes)."""
    rng = np.random.default_rng(11)
    arrays = {f"w{i:02d}": rng.standard_normal(int(rng.integers(1 << 20, 4 << 20))).astype(np.float32)
              for i in range(40)}
    arrays["full"] = rng.standard_normal(16 << 20).astype(np.float32)  # exactly 64 MiB
    model = model_of(arrays)
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data")
    limit = 64 << 20
    plan = dmlbridge.convert_model(tmp_path / "m.onnx", tmp_path / "w", max_buffer_bytes=limit, progress=False)
    check_independently(tmp_path / "w", arrays, Target(), 1, 256, limit)
    assert len(plan.buffers) >= 6
    plan.verify(tmp_path / "m.onnx")
