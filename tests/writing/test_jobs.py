"""Conversion and verification on worker threads (dmlbridge.writing.jobs): the same bytes and the same mismatches for
any number of workers, whole and in chunks, memory bounded whatever the number, and failures and Ctrl-C with jobs
in flight leaving the previous conversion untouched (the pool itself: tests/system/test_workers.py)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import json
import mmap
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import background
import memory
import ml_dtypes
import numpy as np
import onnx
import pytest
from builders import model_of
from command_line import one_line_error, run
from models import TARGETS, buffer_paths, build_model, check_independently, no_temp_files, output_names, outputs
from onnx import TensorProto, external_data_helper, helper, numpy_helper

import dmlbridge
from dmlbridge import ValueRangeError
from dmlbridge.plan import verify
from dmlbridge.plan.upload_plan import read_plan
from dmlbridge.system import workers
from dmlbridge.writing import jobs as constant_jobs
from dmlbridge.writing.publish import Publication

# Larger constants of the types whose conversion is work (widening, narrowing, packing, densifying), each in a
# form the byte scan does not take; at full size (1 MiB and more) each goes to a worker at the real POOL_MIN_BYTES.
RNG = np.random.default_rng(5)


def large_constants(elements: int) -> dict[str, np.ndarray]:
    return {
        "l_float8": RNG.integers(0, 256, 2 * elements, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn),
        "l_bfloat16": RNG.standard_normal(elements).astype(ml_dtypes.bfloat16),
        "l_int64": RNG.integers(-(2**31), 2**31, elements // 4, dtype=np.int64),
        "l_double": RNG.standard_normal(elements // 4),
        "l_uint2": RNG.integers(0, 4, 4 * elements, dtype=np.uint8).astype(ml_dtypes.uint2),
        "l_float4": RNG.integers(0, 16, 4 * elements + 1, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn),
        "l_bool": RNG.integers(0, 2, 3 * elements).astype(bool),
        "l_int4": RNG.integers(-8, 8, 4 * elements + 3, dtype=np.int8).astype(ml_dtypes.int4),
        "l_uint4": RNG.integers(0, 16, 4 * elements + 1, dtype=np.uint8).astype(ml_dtypes.uint4),
        "l_float": RNG.standard_normal(elements // 2).astype(np.float32),  # native: written as stored, by the writer
    }


def every_type_model(folder: Path, elements: int) -> tuple[Path, dict[str, np.ndarray]]:
    """tests/helpers/models.py's model of every type, place and form, with :func:`large_constants` added (half of
    them in external data) and two sparse initializers of ``elements`` elements densified (FLOAT16 at coordinates in
    order, INT64 at linear indices in no order)."""
    path, expected = build_model(folder)
    model = onnx.load(path, load_external_data=False)
    large = large_constants(elements)
    if large:
        for index, (name, values) in enumerate(large.items()):
            tensor = numpy_helper.from_array(values, name)
            if index % 2:
                (folder / f"{name}.data").write_bytes(tensor.raw_data)
                external_data_helper.set_external_data(tensor, f"{name}.data")
                tensor.ClearField("raw_data")
            model.graph.initializer.append(tensor)
            expected[name] = values
        dense = np.zeros((elements // 1024, 1024), np.float16)
        dense[::7, ::3] = 1.5
        where = np.argwhere(dense)
        model.graph.sparse_initializer.append(helper.make_sparse_tensor(
            numpy_helper.from_array(dense[dense != 0], "l_sparse"), numpy_helper.from_array(where, "l_sparse_i"),
            list(dense.shape)))
        expected["l_sparse"] = dense
        # INT64 values (narrowed or emulated on the 32-bit targets: densified into an array of their own) at
        # INT32 linear indices in no order (checked against a bitmap; each chunk looks through all of them).
        wide = np.zeros(elements, np.int64)
        where = RNG.permutation(elements)[: elements // 5].astype(np.int32)
        wide[where] = RNG.integers(-(2**31), 2**31, where.size)
        model.graph.sparse_initializer.append(helper.make_sparse_tensor(
            numpy_helper.from_array(wide[where], "l_sparse64"), numpy_helper.from_array(where, "l_sparse64_i"),
            [elements]))
        expected["l_sparse64"] = wide
        # Model order: the initializers (the new ones after t_last), then the sparse ones, then the rest.
        keys = list(expected)
        keys = [k for k in keys if k not in large and k not in ("l_sparse", "l_sparse64")]
        at = keys.index("t_last") + 1
        keys[at:at] = list(large)
        keys[keys.index("sp") + 1 : keys.index("sp") + 1] = ["l_sparse", "l_sparse64"]
        expected = {key: expected[key] for key in keys}
    onnx.save(model, path)
    return path, expected


@pytest.fixture
def every_type(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """The model of every type with small "large" constants (8 KiB and so): for the pool's paths (tiny_jobs)."""
    folder = tmp_path / "model"
    folder.mkdir()
    return every_type_model(folder, 4096)


@pytest.fixture(params=["whole", "chunks"])
def tiny_jobs(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """Every constant a worker's job, at most 64 KiB in flight, and (``"chunks"``) every constant of 2 KiB and
    more cut into chunks of about 1 KiB: the pool's paths on a small model."""
    monkeypatch.setattr(constant_jobs, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(verify, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(workers, "IN_FLIGHT_BYTES", 64 << 10)
    if request.param == "chunks":
        monkeypatch.setattr(constant_jobs, "CHUNK_BYTES", 1 << 10)
        monkeypatch.setattr(verify, "CHUNK_BYTES", 1 << 10)
    return str(request.param)


@pytest.mark.parametrize("checked_only", [False, True], ids=["fast-paths", "checked-path-only"])
def test_the_same_bytes_whatever_the_number_of_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_jobs: str, checked_only: bool,
) -> None:
    """Every constant of a model of every type in every place and form a worker's job (the "large" ones of 2 KiB
    and more, so cut into chunks too): workers=1, 2 and 8 write the same buffer files and manifests, in one buffer
    and in several (2 to 8 of 32 KiB); those bytes are the independent reference's, and verify (with workers)
    finds nothing."""
    if checked_only:
        monkeypatch.setenv("DMLBRIDGE_CHECKED_PATH_ONLY", "1")
    (tmp_path / "model").mkdir()
    path, expected = every_type_model(tmp_path / "model", 1024)
    for name in ("no64-narrow-lossy", "default", "no64-emulate"):  # (INT4/UINT4 as such by the second)
        _same_for_any_workers(path, tmp_path / name, (2 << 30, 32 << 10), expected, name)


def test_the_same_bytes_for_large_constants(tmp_path: Path) -> None:
    """The same at the real thresholds: constants of 1 MiB and more converted by the workers, the others by the
    writer, in one buffer and in several."""
    (tmp_path / "model").mkdir()
    path, _ = every_type_model(tmp_path / "model", 1 << 19)
    _same_for_any_workers(path, tmp_path, (2 << 30, 12 << 20), None, "no64-narrow-lossy")


def _same_for_any_workers(path: Path, tmp_path: Path, limits: tuple[int, int],
                          expected: dict[str, np.ndarray] | None, target_name: str) -> None:
    tmp_path.mkdir(exist_ok=True)
    target, min_dims, alignment = TARGETS[target_name]
    for limit in limits:  # one buffer; several
        results = {}
        for count in (1, 2, 8):
            prefix = tmp_path / f"w{count}-{limit}"
            plan = dmlbridge.convert_model(path, prefix, target=target, min_dims=min_dims, alignment=alignment,
                                           progress=False, fsync=False, max_buffer_bytes=limit, workers=count,
                                           checksum=count == 2)
            results[count] = outputs(prefix)
            plan.verify(path, workers=count)
            plan.close()
        assert (len(buffer_paths(tmp_path / f"w1-{limit}")) == 1) == (limit > 1 << 30)
        one = results[1]
        assert results[8] == one
        # (checksum=True for workers=2: the manifest has the SHA-256s; the bytes are the same.)
        assert results[2][0] == one[0]
        recorded = [b["sha256"] for b in json.loads(results[2][1])["buffers"]]
        files = buffer_paths(tmp_path / f"w2-{limit}")
        assert recorded == [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]  # hashed in a thread
        if expected is not None:
            check_independently(tmp_path / f"w8-{limit}", expected, target, min_dims, alignment, limit)


def test_verify_reports_the_same_mismatches_with_workers(
    every_type: tuple[Path, dict[str, np.ndarray]], tmp_path: Path, tiny_jobs: str,
) -> None:
    path, _ = every_type
    plan = dmlbridge.convert_model(path, tmp_path / "w", progress=False, fsync=False, workers=1)
    entry = plan.entries["l_float8"]
    assert entry.offset is not None
    with open(buffer_paths(tmp_path / "w")[0], "r+b") as f:  # one byte of one entry changed, its size kept
        f.seek(entry.offset + 1000)
        byte = f.read(1)
        f.seek(entry.offset + 1000)
        f.write(bytes([byte[0] ^ 0x40]))
    plan.close()
    loaded = read_plan(tmp_path / "w.json", verify=False, bin_path=None, check_fingerprint=False)  # (as verify)
    found = {count: verify.find_mismatches(loaded, path, workers=count) for count in (1, 2, 8)}
    assert found[1] and found[1] == found[2] == found[8]
    assert any("'l_float8'" in problem for problem in found[1])


def test_verify_reports_the_same_mismatches_in_chunks(every_type: tuple[Path, dict[str, np.ndarray]], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Constants compared in chunks of about 1 KiB (read back a few elements at a time) give the messages they
    give compared whole, with any number of workers: the bytes that differ counted over every chunk, the first
    one's offset, the first element whose value differs (here in a later chunk), a changed padding byte."""
    path, _ = every_type
    plan = dmlbridge.convert_model(path, tmp_path / "w", progress=False, fsync=False, workers=1, checksum=True)
    with open(buffer_paths(tmp_path / "w")[0], "r+b") as f:
        for key, at in (("l_float8", 5000), ("l_float8", 7001), ("l_bfloat16", 6000), ("l_int64", 3000),
                        ("l_uint4", 4321), ("l_sparse64", 24000)):
            entry = plan.entries[key]
            assert entry.offset is not None
            f.seek(entry.offset + at)
            byte = f.read(1)
            f.seek(entry.offset + at)
            f.write(bytes([byte[0] ^ 0x21]))
        entry = plan.entries["l_float4"]  # 16385 values: its last byte's spare nibble, then padding
        assert entry.offset is not None and entry.total_tensor_size_in_bytes is not None
        f.seek(entry.offset + entry.total_tensor_size_in_bytes - 1)
        f.write(b"\x01")
    plan.close()
    found = {}
    for chunks in (False, True):
        monkeypatch.setattr(verify, "POOL_MIN_BYTES", 0 if chunks else 1 << 20)
        monkeypatch.setattr(verify, "CHUNK_BYTES", 1 << 10 if chunks else 1 << 40)
        for count in (1, 2):
            loaded = read_plan(tmp_path / "w.json", verify=False, bin_path=None, check_fingerprint=False)
            found[chunks, count] = verify.find_mismatches(loaded, path, workers=count, sha256=True)
            loaded.close()
    whole = found[False, 1]
    assert all(problems == whole for problems in found.values()), found
    for key in ("l_float8", "l_bfloat16", "l_int64", "l_uint4", "l_sparse64", "l_float4"):
        assert any(f"{key!r}: " in problem and "differ" in problem for problem in whole), (key, whole)
    assert any("'l_float8': 2 bytes differ" in problem and "element [" in problem for problem in whole), whole
    assert "SHA-256" in whole[0] or "fingerprint" in whole[0], whole[0]


def _bad_model(folder: Path, bad: list[int]) -> Path:
    """Eight INT64 constants of 64 KiB, those at ``bad`` with a value outside 32 bits (a target that narrows
    INT64 refuses them)."""
    inits = []
    for index in range(8):
        values = np.arange(8192, dtype=np.int64) - 4096
        if index in bad:
            values[100 + index] = 2**40 + index
        inits.append(numpy_helper.from_array(values, f"c{index}"))
    path = folder / "bad.onnx"
    onnx.save(model_of(inits), path)
    return path


NARROW = dmlbridge.Target(supported={"FLOAT32", "INT32", "UINT32", "INT8", "UINT8", "INT16", "UINT16"},
                          int64="narrow", allow_lossy=True)


def test_a_failing_worker_leaves_the_previous_conversion(tmp_path: Path, tiny_jobs: str) -> None:
    """A constant that fails in a worker: the error the writer meets first in model order (the same for any
    number of workers, and for a constant cut into chunks: the index in the tensor), the previous conversion's
    files as they were, nothing else left."""
    good = _bad_model(tmp_path, [])
    dmlbridge.convert_model(good, tmp_path / "w", target=NARROW, progress=False, fsync=False).close()
    before = outputs(tmp_path / "w")
    names = output_names(tmp_path)
    bad = _bad_model(tmp_path, [3, 6])
    messages = set()
    for count in (1, 2, 8):
        with pytest.raises(ValueRangeError) as caught:
            dmlbridge.convert_model(bad, tmp_path / "w", target=NARROW, progress=False, fsync=False, workers=count)
        messages.add(str(caught.value))
        assert outputs(tmp_path / "w") == before
        assert output_names(tmp_path) == names and no_temp_files(tmp_path)
        assert not [t for t in threading.enumerate() if t.name.startswith("dmlbridge")]  # none outlives it
    assert len(messages) == 1
    assert "'c3'" in (message := messages.pop()) and f"at index [{100 + 3}]" in message, message


def test_memory_with_eight_workers_stays_within_the_bound(tmp_path: Path) -> None:
    """Peak RSS growth of a conversion with workers=8, in a child process: 48 FLOAT8 constants of 2 MiB (96 MiB
    in external data, widened to 192 MiB) with 32 MiB in flight; the writer's jobs would pile up without it."""
    folder = tmp_path / "m"
    folder.mkdir()
    inits = []
    with open(folder / "w.data", "wb") as f:
        for index in range(48):
            tensor = TensorProto(name=f"f{index}", data_type=TensorProto.FLOAT8E4M3FN, dims=[2048, 1024],
                                 data_location=TensorProto.EXTERNAL)
            for key, value in (("location", "w.data"), ("offset", str(f.tell())), ("length", str(2 << 20))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            RNG.integers(0, 256, 2 << 20, dtype=np.uint8).tofile(f)
            inits.append(tensor)
    onnx.save(model_of(inits), folder / "m.onnx")
    code = memory.PEAK_RSS + textwrap.dedent(f"""
        import dmlbridge
        from dmlbridge.system import workers
        workers.IN_FLIGHT_BYTES = 32 << 20
        dmlbridge.convert_model({str(folder / "m.onnx")!r}, {str(tmp_path / "w")!r}, fsync=False,
                                progress=False, workers=1).close()  # (imports, onnx, first-use caches)
        before = peak_rss_kib()
        plan = dmlbridge.convert_model({str(folder / "m.onnx")!r}, {str(tmp_path / "w")!r}, fsync=False,
                                       progress=False, workers=8)
        print(plan.total_size, (peak_rss_kib() - before) / 1024)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    total, growth_mib = result.stdout.split()
    assert int(total) == 48 * (4 << 20)
    # 32 MiB in flight (each job 6 MiB: 2 read, 4 written), the one being written and the allocator's slack.
    assert float(growth_mib) <= 80, growth_mib  # (25-46 MiB measured; 131 with no budget)


def _mincore_resident(path: Path) -> int:
    """How many pages of ``path`` are in the page cache (mincore on a mapping of it)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mapped:
        view = np.frombuffer(mapped, dtype=np.uint8)
        status = libc.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size), vec)
        del view  # (the mapping closes only when no array holds it)
    if status != 0:
        raise OSError(ctypes.get_errno(), "mincore")
    return sum(v & 1 for v in vec)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="posix_fadvise, sync_file_range, mincore: Linux")
@pytest.mark.parametrize("fsync", [True, False])
def test_a_reconversion_releases_the_previous_buffers_pages(tmp_path: Path, fsync: bool) -> None:
    """The previous conversion's buffer files give back their page cache while the new one is written (written
    to the disk first when the previous conversion ran without fsync), and stay whole until the commit point."""
    inits = [numpy_helper.from_array(RNG.standard_normal(1 << 20).astype(np.float32), "w")]
    path = tmp_path / "m.onnx"
    onnx.save(model_of(inits), path)
    dmlbridge.convert_model(path, tmp_path / "w", progress=False, fsync=fsync).close()
    old = buffer_paths(tmp_path / "w")[0]
    old_bytes = old.read_bytes()  # and in the page cache
    assert _mincore_resident(old) > 0
    with Publication(str(tmp_path / "w"), fsync=True) as publication:
        thread = publication._tidy._thread
        assert thread is not None
        thread.join(timeout=600)
        assert _mincore_resident(old) == 0
        assert old.read_bytes() == old_bytes  # (read back from the disk)
        dmlbridge.load_plan(tmp_path / "w.json").close()
    assert old.exists()  # nothing published: the previous conversion stays


def test_ctrl_c_with_jobs_in_flight(tmp_path: Path) -> None:
    """SIGINT while worker threads are converting: exit 130 with one line, the previous conversion as it was,
    no temporary file, no buffer file of the interrupted one, and the process ends (no thread keeps it)."""
    # bfloat16 is widened to FLOAT32: work for the workers (1 MiB each).
    inits = [numpy_helper.from_array(RNG.standard_normal(1 << 19).astype(ml_dtypes.bfloat16), f"c{i}")
             for i in range(24)]
    path = tmp_path / "m.onnx"
    onnx.save(model_of(inits), path)
    out = tmp_path / "out"
    out.mkdir()
    dmlbridge.convert_model(path, out / "w", progress=False, fsync=False).close()
    before, names = outputs(out / "w"), output_names(out)
    # The child's jobs say when they run and take a while, so that the signal lands with jobs in flight. Windows
    # has no way to send one process SIGINT: there the child's third job gives it to the main thread, as Ctrl-C
    # does (Python's handler runs in the main thread whichever thread the signal came to).
    code = textwrap.dedent(f"""
        import _thread, signal, sys, threading, time
        from dmlbridge.writing.jobs import ConstantJobs
        real = ConstantJobs.run
        started = []
        lock = threading.Lock()
        def slow(*args, **kwargs):
            sys.stdout.write("job\\n"); sys.stdout.flush()
            with lock:
                started.append(1)
                if len(started) == 3 and {os.name != "posix"}:
                    _thread.interrupt_main(signal.SIGINT)
            time.sleep(0.3)
            return real(*args, **kwargs)
        ConstantJobs.run = slow
        import dmlbridge_entry
        sys.argv = ["dmlbridge", "convert", {str(path)!r}, "-o", {str(out / "w")!r}, "--quiet", "--workers", "4",
                    "--no-fsync"]
        dmlbridge_entry.main()
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for _ in range(3):
        assert child.stdout.readline() == "job\n"
    if os.name == "posix":
        child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=600)
    assert (child.returncode, stderr) == (130, "dmlbridge convert: interrupted\n"), stderr
    assert outputs(out / "w") == before and output_names(out) == names and no_temp_files(out)


def test_the_command_line_takes_workers(every_type: tuple[Path, dict[str, np.ndarray]], tmp_path: Path) -> None:
    path, _ = every_type
    for args, status in ((["convert", str(path), "-o", str(tmp_path / "w"), "--workers", "2", "--quiet"], 0),
                         (["verify", str(tmp_path / "w.json"), str(path), "--workers", "3", "--quiet"], 0),
                         (["inspect", str(path), "--check", "--workers", "2"], 0)):
        result = run(*args)
        assert result.returncode == status, result.stderr
    one_line_error(run("convert", path, "--workers", "0"), "--workers")


# --- memory: each job charged what it allocates ---------------------------------------------------------------


_GROWTH: dict[str, background.Job[dict[str, float]]] = {}


def start_in_background(queue: background.Queue, folder: Path) -> None:
    """Every kind's conversion memory, measured beside the other tests (tests/conftest.py calls this)."""
    if memory.linux_only() is None:
        for kind in memory.KINDS:
            _GROWTH[kind] = queue.add(functools.partial(memory.conversion_growth, kind, folder / kind))


@pytest.mark.skipif(memory.linux_only() is not None, reason=str(memory.linux_only()))
@pytest.mark.parametrize("kind", memory.KINDS)
def test_conversion_memory_stays_within_the_budget(tmp_path: Path, kind: str) -> None:
    """Peak RSS growth of converting eight constants of one kind (about 24 MiB each, in external data) with 1, 2
    and 8 workers stays within the budget: each job is charged what it allocates at its peak, not its output,
    and densifying checks indices a block at a time (INT8 coordinates made int64 whole were 64 times their
    bytes: 262, 553 and 1656 MiB of growth for the first kind, each job charged 8 MiB)."""
    job = _GROWTH.get(kind)  # (measured in the background since the session began)
    growth = job.result() if job is not None else memory.conversion_growth(kind, tmp_path / kind)
    assert max(growth.values()) <= memory.BUDGET_MIB, growth
