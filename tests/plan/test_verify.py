"""UploadPlan.verify: a changed byte of the .bin, a changed model, every mismatch named; memory within the budget
and each byte of the buffer files read once."""


from __future__ import annotations

import functools
import hashlib
import os
import shutil
import threading
import warnings
from pathlib import Path
from typing import Any

import background
import memory
import ml_dtypes
import numpy as np
import onnx
import pytest
from builders import model_of
from models import (
    buffer_path,
    build_model,
)
from onnx import TensorProto, external_data_helper, numpy_helper
from system_calls import Read, file_of, record_positioned_reads

from dmlbridge import DmlDataType, Target, convert_model, load_plan
from dmlbridge.errors import (
    DmlBridgeError,
    ManifestError,
)
from dmlbridge.model import slices
from dmlbridge.plan import chunk_compare, verify
from dmlbridge.plan.upload_plan import read_plan
from dmlbridge.tensor.encode import ElementWriter


def test_verify_finds_a_changed_byte_and_a_changed_model(tmp_path: Path) -> None:
    path, _ = build_model(tmp_path)
    plan = convert_model(path, tmp_path / "out")
    plan.verify(path)
    buffer = buffer_path(tmp_path / "out")
    data = bytearray(buffer.read_bytes())
    e = plan.entries["t_float16"]
    assert e.offset is not None
    data[e.offset + 7] ^= 0x01  # a padding byte: values read back the same, but the bytes are wrong
    buffer.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="fingerprint"):  # load_plan samples the buffer file: refused
        load_plan(tmp_path / "out.json")
    with pytest.raises(ManifestError, match=r"2 mismatches.*fingerprint.*'t_float16': 1 byte differs"):
        plan.verify(path)
    data[e.offset + 7] ^= 0x01
    data[e.offset + 1] ^= 0x80  # the sign of the first value
    buffer.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="t_float16"):
        plan.verify(path)
    data[e.offset + 1] ^= 0x80
    buffer.write_bytes(bytes(data))
    plan.verify(path)

    changed = onnx.load(path, load_external_data=False)
    for t in changed.graph.initializer:
        if t.name == "t_last":
            t.CopyFrom(numpy_helper.from_array(np.array([0.5], np.float32), "t_last"))
    changed.graph.initializer.append(numpy_helper.from_array(np.ones(1, np.int8), "extra"))
    with pytest.raises(ManifestError, match=r"3 mismatches.*another model file.*'t_last'.*differ.*'extra'.*not in "
                                            r"the plan"):
        plan.verify(changed, base_dir=tmp_path)


def test_verify_says_when_the_plan_was_made_from_another_model(tmp_path: Path) -> None:
    """The manifest records the model's SHA-256 and its external data files' sizes; verify names a change."""
    path, _ = build_model(tmp_path)
    plan = convert_model(path, tmp_path / "out", progress=False)
    assert plan.source_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert plan.source_external == (("weights.data", (tmp_path / "weights.data").stat().st_size),)
    loaded = load_plan(tmp_path / "out.json")
    assert (loaded.source_sha256, loaded.source_external) == (plan.source_sha256, plan.source_external)
    changed = onnx.load(path, load_external_data=False)
    changed.doc_string = "edited"  # the same constants, another file
    other = tmp_path / "other.onnx"
    onnx.save(changed, other)
    with pytest.raises(ManifestError, match=r"1 mismatch\).*made from another model file"):
        loaded.verify(other)
    with open(tmp_path / "weights.data", "ab") as file:
        file.write(b"\0" * 16)
    with pytest.raises(ManifestError, match=r"weights.data' holds \d+ bytes; the plan was made from one of"):
        loaded.verify(path)


def test_nans_read_back_and_verify_bit_for_bit_without_a_warning(tmp_path: Path) -> None:
    """plan.array() gives each NaN's own bits (BFLOAT16 0x7F81 in FLOAT32 0x7F810000 is 0x7F81 again, not the
    quiet 0x7FC0; FLOAT8E5M2 0x7D is FLOAT16 0x7D00), on a target with FLOAT16 and one without; verify compares
    NaNs bit for bit, names a changed payload with its bits, and no numpy warning is printed."""
    codes = {"bf": (ml_dtypes.bfloat16, [0x7F81, 0xFF81, 0x7FC0, 0x3F80]), "e5": (ml_dtypes.float8_e5m2,
             [0x7D, 0xFF, 0x7E, 0x3C]), "h": (np.float16, [0x7C01, 0xFD55, 0x3C00, 0x7E00])}
    values = {key: np.array(bits, f"<u{np.dtype(dtype).itemsize}").view(dtype) for key, (dtype, bits) in codes.items()}
    model = model_of(values)
    every = {t for t in DmlDataType if t is not DmlDataType.UNKNOWN}
    for name, target in (("default", Target()), ("no16", Target(supported=every - {DmlDataType.FLOAT16}))):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            plan = convert_model(model, tmp_path / name, target=target, progress=False)
            for key, (dtype, bits) in codes.items():
                assert plan.array(key).view(f"<u{np.dtype(dtype).itemsize}").tolist() == bits, (name, key)
            plan.verify(model)
            load_plan(tmp_path / f"{name}.json").verify(model)
            buffer = buffer_path(tmp_path / name)
            data = bytearray(buffer.read_bytes())
            offset = plan.entries["bf"].offset
            assert offset is not None and data[offset + 2 : offset + 4] == b"\x81\x7f"
            data[offset + 2] = 0x83  # the payload of the first NaN: 0x7F81 becomes 0x7F83
            buffer.write_bytes(bytes(data))
            with pytest.raises(ManifestError, match=r"'bf': 1 byte differs.*element \[0\]: the buffer holds nan "
                                                    r"\(bits 0x7f83\), the model nan \(bits 0x7f81\)"):
                plan.verify(model)
        plan.close()


# --- streaming: memory within the budget, each byte of the buffer files read once ------------------------------


def _verify_growth(folder: Path) -> dict[str, float]:
    """The peak RSS growth of verifying the model of four 96 MiB constants (written and converted by a child
    process) with and without the SHA-256, with 1, 2 and 8 workers, in another (the folder is removed after)."""
    path = folder / "m" / "m.onnx"
    try:
        background.run_in_child(f"""
            import pathlib, dmlbridge, memory
            memory.memory_model(pathlib.Path({str(folder / "m")!r}), "float32", mib=96, count=4)
            dmlbridge.convert_model({str(path)!r}, {str(folder / "w")!r}, progress=False, fsync=False,
                                    checksum=True).close()
        """)
        return memory.peak_growth(f"""
            from dmlbridge.plan.upload_plan import read_plan
            from dmlbridge.plan.verify import find_mismatches
            for count in (1, 2, 8):
                for sha256 in (False, True):
                    with measured(f"workers={{count}}, sha256={{sha256}}"):
                        plan = read_plan({str(folder / "w.json")!r}, verify=False, bin_path=None,
                                         check_fingerprint=False)  # (as dmlbridge verify)
                        assert find_mismatches(plan, {str(path)!r}, sha256=sha256, workers=count) == []
                        plan.close()
        """)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_GROWTH: list[background.Job[dict[str, float]]] = []


def start_in_background(queue: background.Queue, folder: Path) -> None:
    """The verification's memory, measured beside the other tests (tests/conftest.py calls this)."""
    if memory.linux_only() is None:
        _GROWTH.append(queue.add(functools.partial(_verify_growth, folder / "verify-memory")))


@pytest.mark.skipif(memory.linux_only() is not None, reason=str(memory.linux_only()))
def test_verify_memory_stays_within_the_budget(tmp_path: Path) -> None:
    """Peak RSS growth of verifying a model of four 96 MiB float32 constants in external data (384 MiB, a few
    times the budget's working set), with and without the SHA-256, with 1, 2 and 8 workers, in a child process:
    each constant is compared in chunks whose values, fresh bytes and bytes read are charged to the budget
    (before: 403-421 MiB, each constant read, converted and read back whole, and its buffer bytes read twice)."""
    growth = _GROWTH[0].result() if _GROWTH else _verify_growth(tmp_path / "verify-memory")
    assert max(growth.values()) <= memory.BUDGET_MIB, growth


def _times_read(reads: list[Read], fd: int, size: int) -> np.ndarray:
    """How many times each byte of the file open as ``fd`` was read (through any descriptor)."""
    counts = np.zeros(size + 1, np.int64)
    for read in reads:
        if read.file == file_of(fd):
            counts[read.offset] += 1
            counts[read.offset + read.got] -= 1
    return np.cumsum(counts)[:size]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "checksum"])
def test_verify_reads_each_buffer_byte_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int,
                                            checksum: bool) -> None:
    """As ``dmlbridge verify`` runs (the manifest read, then every entry compared, the fingerprint checked and,
    with a checksum, the SHA-256): no byte of any buffer file is read twice, every byte of every entry is read, and
    with a checksum every byte of the files is; the fingerprint and the SHA-256 come from the same reads. Entries
    of every size (read many at once, by a job, in chunks) in three buffers."""
    monkeypatch.setattr(verify, "POOL_MIN_BYTES", 4096)  # (the jobs' paths, and their chunks, on a small model)
    monkeypatch.setattr(verify, "CHUNK_BYTES", 16 << 10, raising=False)
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), f"c{i}")
             for i, n in enumerate([5, 300, 40000, 7, 9000, 120000, 3, 2048, 70000, 11])]
    inits.append(numpy_helper.from_array(rng.integers(0, 256, 50001, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn),
                                         "f8"))  # widened: fresh bytes that are not the stored ones
    path = tmp_path / "m.onnx"
    onnx.save(model_of(inits), path)
    convert_model(path, tmp_path / "w", progress=False, fsync=False, checksum=checksum, max_buffer_bytes=512 << 10,
                  alignment=4096).close()
    reads = record_positioned_reads(monkeypatch)
    plan = read_plan(tmp_path / "w.json", verify=False, bin_path=None, check_fingerprint=False)
    assert len(plan.buffers) == 3, plan.buffer_sizes
    assert verify.find_mismatches(plan, path, sha256=checksum, workers=workers) == []
    for index, buffer in enumerate(plan.buffers):
        times = _times_read(reads, plan._open_files().fd(index), buffer.size)
        assert times.max() == 1, (index, int(np.argmax(times > 1)))
        entries = [e for e in plan.converted if e.buffer == index]
        for entry in entries:
            assert times[entry.offset : entry.end].min() == 1, entry.key
        if checksum:
            assert times.min() == 1
    plan.close()


# --- a chunk compared a block at a time, native constants as their stored bytes ---------------------------------

_INT4_COUNT = 2 * 20000 + 1  # an odd count: the last byte's high nibble is spare


def _external_model(folder: Path) -> Path:
    """A float32 and an INT4 constant (odd count) in ``m.data``, and a FLOAT8E4M3FN one (widened) in ``f8.data``."""
    rng = np.random.default_rng(11)
    stored = {
        "w_float": ("m.data", TensorProto.FLOAT, [40000], rng.standard_normal(40000).astype(np.float32).tobytes()),
        "w_int4": ("m.data", TensorProto.INT4, [_INT4_COUNT], rng.integers(0, 256, _INT4_COUNT // 2 + 1,
                                                                            dtype=np.uint8).tobytes()),
        "w_float8": ("f8.data", TensorProto.FLOAT8E4M3FN, [30000], rng.integers(0, 256, 30000, dtype=np.uint8)
                     .tobytes()),
    }
    stored["w_int4"] = (*stored["w_int4"][:3], stored["w_int4"][3][:-1] + bytes([stored["w_int4"][3][-1] & 0x0F]))
    files: dict[str, bytearray] = {}
    inits = []
    for name, (location, data_type, dims, data) in stored.items():
        content = files.setdefault(location, bytearray())
        tensor = TensorProto(name=name, data_type=data_type, dims=dims, raw_data=data)
        external_data_helper.set_external_data(tensor, location, offset=len(content), length=len(data))
        tensor.ClearField("raw_data")
        content += data
        inits.append(tensor)
    for location, content in files.items():
        (folder / location).write_bytes(bytes(content))
    path = folder / "m.onnx"
    onnx.save(model_of(inits), path)
    return path


def _identity(path: Path) -> tuple[int, int]:
    """The file at ``path`` as :class:`system_calls.Read` names the file a read was from."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        return file_of(fd)
    finally:
        os.close(fd)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Constants of 4 KiB and more compared by jobs, in chunks of about 16 KiB, blocks of 4 KiB."""
    monkeypatch.setattr(verify, "POOL_MIN_BYTES", 4096)
    monkeypatch.setattr(verify, "CHUNK_BYTES", 16 << 10)
    monkeypatch.setattr(chunk_compare, "BLOCK", 4096)


@pytest.mark.parametrize("workers", [1, 2])
def test_verify_compares_a_chunk_a_block_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int,
                                                   small_chunks: None) -> None:
    """The buffer file is read a block at a time (each block compared while it is in the cache, not a whole
    chunk read and compared after), and so is the model's external data of a native constant, which is compared
    as it is stored, never decoded (before: chunks of 16 KiB read whole, and the INT4 constant unpacked and packed
    again); the widened FLOAT8 constant is decoded and converted, as before."""
    path = _external_model(tmp_path)
    convert_model(path, tmp_path / "w", progress=False, fsync=False, alignment=4096).close()
    decoded: list[str] = []
    decode_range = slices.decode_range

    def counted_decode_range(tensor: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        decoded.append(tensor.name)
        return decode_range(tensor, *args, **kwargs)

    monkeypatch.setattr(slices, "decode_range", counted_decode_range)
    plan = read_plan(tmp_path / "w.json", verify=False, bin_path=None, check_fingerprint=False)
    files = {_identity(tmp_path / "m.data"): "model", _identity(buffer_path(tmp_path / "w")): "buffer"}
    recorded = record_positioned_reads(monkeypatch)
    assert verify.find_mismatches(plan, path, workers=workers) == []
    reads: dict[str, list[int]] = {"model": [], "buffer": []}
    for read in recorded:
        reads.setdefault(files.get(read.file, "other"), []).append(read.got)
    assert reads["buffer"] and max(reads["buffer"]) <= 4096, reads["buffer"]
    assert reads["model"] and max(reads["model"]) <= 4096, reads["model"]
    assert set(decoded) == {"w_float8"}, decoded
    plan.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_verify_makes_a_widened_chunks_fresh_bytes_a_block_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, small_chunks: None) -> None:
    """The widened FLOAT8 constant's fresh FLOAT16 bytes are made a block at a time into one reused block of
    memory, each compared with the buffer file's block while both are in the cache: never a whole chunk's (before:
    each chunk converted whole, into fresh memory, then read again to be compared). Whatever makes them (prepare,
    prepare_into or an ElementWriter planned once) is counted."""
    path = _external_model(tmp_path)
    convert_model(path, tmp_path / "w", progress=False, fsync=False, alignment=4096).close()
    made: list[int] = []
    prepare, prepare_into = chunk_compare.prepare, chunk_compare.prepare_into

    def counted_prepare(values: np.ndarray, **kwargs: Any) -> Any:
        made.append(values.size)
        return prepare(values, **kwargs)

    def counted_prepare_into(dst: Any, offset: int, values: np.ndarray, **kwargs: Any) -> Any:
        made.append(values.size)
        return prepare_into(dst, offset, values, **kwargs)

    write = ElementWriter.write

    def counted_write(self: ElementWriter, values: np.ndarray, out: np.ndarray) -> int:
        made.append(values.size)
        return write(self, values, out)

    monkeypatch.setattr(chunk_compare, "prepare", counted_prepare)
    monkeypatch.setattr(chunk_compare, "prepare_into", counted_prepare_into)
    monkeypatch.setattr(ElementWriter, "write", counted_write)
    plan = read_plan(tmp_path / "w.json", verify=False, bin_path=None, check_fingerprint=False)
    assert verify.find_mismatches(plan, path, workers=workers) == []
    plan.close()
    assert sum(made) == 30000 and max(made) == 4096 // 2, made  # (FLOAT16: 2 bytes an element; every one once)


def _mismatches(plan_prefix: Path, path: Path, sha256: bool) -> list[str] | str:
    """What verify finds (workers 1 and 2 alike), or the message of the error it raises."""
    found: list[list[str] | str] = []
    for workers in (1, 2):
        plan = read_plan(Path(str(plan_prefix) + ".json"), verify=False, bin_path=None, check_fingerprint=False)
        try:
            found.append(verify.find_mismatches(plan, path, workers=workers, sha256=sha256))
        except DmlBridgeError as exc:
            found.append(str(exc))
        finally:
            plan.close()
    assert found[0] == found[1], found
    return found[0]


def test_verify_says_the_same_whatever_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Changed bytes in the buffer file (a float32 value, the spare nibble and a padding byte of the INT4 entry, a
    FLOAT8 one widened) and in the model's data (a float32 value; the spare nibble of the INT4 constant, which is
    no difference), then the model's data cut short: the messages of chunks compared a block at a time, native
    constants as they are stored, are those of the checked path (every constant decoded and converted) and of
    each constant compared whole."""
    path = _external_model(tmp_path)
    plan = convert_model(path, tmp_path / "w", progress=False, fsync=False, alignment=4096, checksum=True)
    entries = {key: plan.entries[key] for key in ("w_float", "w_int4", "w_float8")}
    plan.close()
    buffer = bytearray(buffer_path(tmp_path / "w").read_bytes())
    int4_end = (entries["w_int4"].offset or 0) + _INT4_COUNT // 2 + 1
    buffer[(entries["w_float"].offset or 0) + 30001] ^= 0x04
    buffer[int4_end - 1] |= 0x30  # the spare nibble
    buffer[int4_end + 2] = 0x01  # padding
    buffer[(entries["w_float8"].offset or 0) + 20000] ^= 0x01
    buffer_path(tmp_path / "w").write_bytes(bytes(buffer))
    data = bytearray((tmp_path / "m.data").read_bytes())
    data[-1] |= 0xF0  # the INT4 constant's spare nibble in the model: not a difference
    data[100] ^= 0x80  # the sign of a float32 value

    def every_path(sha256: bool) -> list[str] | str:
        found = []
        for checked_only, chunked in ((False, True), (True, True), (False, False)):
            with monkeypatch.context() as patch:
                if checked_only:
                    patch.setenv("DMLBRIDGE_CHECKED_PATH_ONLY", "1")
                patch.setattr(verify, "POOL_MIN_BYTES", 4096 if chunked else 1 << 30)
                patch.setattr(verify, "CHUNK_BYTES", 16 << 10 if chunked else 1 << 40)
                patch.setattr(chunk_compare, "BLOCK", 4096)
                found.append(_mismatches(tmp_path / "w", path, sha256))
        assert found[0] == found[1] == found[2], found
        return found[0]

    (tmp_path / "m.data").write_bytes(bytes(data))
    problems = every_path(sha256=True)
    assert every_path(sha256=False) == problems  # (the bytes compared kept or not: the fingerprint speaks first)
    assert isinstance(problems, list) and len(problems) == 4, problems  # (fingerprint, w_float, w_int4, w_float8)
    assert "fingerprint" in problems[0], problems[0]
    assert "'w_float': 2 bytes differ" in problems[1] and "element [25]" in problems[1], problems[1]
    assert f"'w_int4': 2 bytes differ from a fresh conversion, the first at offset {int4_end - 1}" in problems[2]
    assert "'w_float8': 1 byte differs" in problems[3], problems[3]
    with monkeypatch.context() as patch:  # (and the chunks that differ read no byte of the buffer file twice)
        patch.setattr(verify, "POOL_MIN_BYTES", 4096)
        patch.setattr(verify, "CHUNK_BYTES", 16 << 10)
        patch.setattr(chunk_compare, "BLOCK", 4096)
        reads = record_positioned_reads(patch)
        plan = read_plan(tmp_path / "w.json", verify=False, bin_path=None, check_fingerprint=False)
        assert verify.find_mismatches(plan, path, workers=2) == problems
        assert _times_read(reads, plan._open_files().fd(0), len(buffer)).max() == 1
        plan.close()
    (tmp_path / "m.data").write_bytes(bytes(data[:-1000]))  # cut short: an error, the same on every path
    message = every_path(sha256=False)
    assert isinstance(message, str) and "m.data" in message and every_path(sha256=True) == message, message


def test_two_workers_compare_two_chunks_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the real chunk size and budget, a float32 model of 16 MiB constants in external data: the first job
    that compares a chunk meets a second one comparing beside it (before: one job's charge alone filled the budget,
    so two workers compared one chunk at a time)."""
    folder = tmp_path / "m"
    folder.mkdir()
    inits, data = [], bytearray()
    for index in range(3):
        values = np.arange(4 << 20, dtype=np.float32) + index
        tensor = numpy_helper.from_array(values, f"w{index}")
        external_data_helper.set_external_data(tensor, "m.data", offset=len(data), length=values.nbytes)
        tensor.ClearField("raw_data")
        data += values.tobytes()
        inits.append(tensor)
    (folder / "m.data").write_bytes(bytes(data))
    path = folder / "m.onnx"
    onnx.save(model_of(inits), path)
    convert_model(path, tmp_path / "w", progress=False, fsync=False).close()
    started: list[bool] = []
    second = threading.Event()
    lock = threading.Lock()
    compare_chunk = verify.compare_chunk

    def meeting(*args: Any, **kwargs: Any) -> Any:
        with lock:
            started.append(False)
            order = len(started)
        if order == 2:
            second.set()
        elif order == 1:
            started[0] = second.wait(timeout=30)  # (a second worker starts at once, or never while this runs)
        return compare_chunk(*args, **kwargs)

    monkeypatch.setattr(verify, "compare_chunk", meeting)
    plan = read_plan(tmp_path / "w.json", verify=False, bin_path=None, check_fingerprint=False)
    assert verify.find_mismatches(plan, path, workers=2) == []
    plan.close()
    assert len(started) > 2 and started[0], started
