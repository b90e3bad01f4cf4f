"""The upload program itself (native/dmlupload.cpp) under hostile input and failing calls: buffer files outside
the list's folder, a GEMM weight with K = 0, sizes whose element count wraps 64 bits, and, through its test faults
(DMLUPLOAD_FAULTS, native/README.md), a GPU that flushes subnormals and NaN payloads, an operator that writes
nothing, and calls that fail. Each ends in the exit status and message the README promises, never in a crash, a
silent fallback or a file read outside the folder."""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from bindings_format import HEADER, encode
from dml_runtime import DirectML
from oracle import Image, compare, expected_output

import dmlbridge

SECRET = b"outside the list" * 4  # (64 bytes: a FLOAT32 tensor of 16 values, were it ever read)
OLD = 978_307_200 * 10**9  # 2001-01-01: an access time that any read of the file would move (relatime)
PATTERN = struct.unpack("<f", b"\xa5" * 4)[0]  # what an output holds before its operator writes it


def _list(*lines: str) -> str:
    return "\n".join([HEADER, "target 6.4", *lines]) + "\n"


def _reads_move_the_access_time(folder: Path) -> bool:
    """Whether this file system records reads (not mounted noatime): then the access time shows a file was read."""
    probe = folder / "atime-probe"
    probe.write_bytes(b"x")
    os.utime(probe, ns=(OLD, probe.stat().st_mtime_ns))
    if probe.stat().st_atime_ns != OLD:
        return False  # (an access time that cannot be set, as under Wine, shows nothing)
    probe.read_bytes()
    return probe.stat().st_atime_ns != OLD


def _hostile_file(name: str, outside: Path) -> str:
    if name == "absolute":  # (Wine maps the root as drive Z:)
        path = str(outside) if sys.platform == "win32" else "Z:" + str(outside).replace("/", "\\")
        return encode(path)
    return name


@pytest.mark.parametrize("name", ["../outside.bin", "%2E%2E%2Foutside.bin", "..%5Coutside.bin", "sub/b.bin",
                                  "link.bin", "absolute", "%2E%2E"])
def test_buffer_files_outside_the_lists_folder_are_neither_read_nor_dumped(directml: DirectML, tmp_path: Path,
                                                                           name: str) -> None:
    inside = tmp_path / "inside"
    (inside / "sub").mkdir(parents=True)
    outside = tmp_path / "outside.bin"
    targets = [outside, inside / "sub" / "b.bin"]
    for target in targets:
        target.write_bytes(SECRET)
    (inside / "link.bin").symlink_to(Path("..") / "outside.bin")
    for target in targets:
        os.utime(target, ns=(OLD, target.stat().st_mtime_ns))
    before = {target: target.stat() for target in targets}
    text = _list(f"buffer 0 {_hostile_file(name, outside)} {len(SECRET)} gpu", "tensor t 0 0 FLOAT32 0 1 16 - 64 0 gpu")
    (inside / "list.bindings").write_text(text, newline="\n")

    ended = directml.attempt(inside / "list.bindings", directory=inside)
    assert ended.returncode == 2, (ended.returncode, ended.stdout, ended.stderr)
    assert "buffer 0" in ended.stderr or "FILE" in ended.stderr, ended.stderr
    assert "device" not in ended.stdout and "uploaded" not in ended.stdout, ended.stdout  # (no GPU was started)
    assert not ended.dump.exists()
    records_reads = _reads_move_the_access_time(tmp_path)
    for target in targets:
        after = target.stat()
        assert target.read_bytes() == SECRET and after.st_mtime_ns == before[target].st_mtime_ns, target
        if records_reads:
            assert after.st_atime_ns == OLD, f"{target} was read"


def test_a_plain_file_name_beside_the_list_is_read(directml: DirectML, tmp_path: Path) -> None:
    values = np.arange(16, dtype=np.float32)
    (tmp_path / "w.bin").write_bytes(values.tobytes())
    run = directml.run(_list("buffer 0 w.bin 64 gpu", "tensor t 0 0 FLOAT32 0 1 16 - 64 0 gpu"), directory=tmp_path)
    assert np.array_equal(run.results["t"].values(), values)


def _quantized(folder: Path, k: int) -> str:
    """A blocked UINT4 record by hand: weight [2, K] of the nibbles 1, 2, 1, 2, ..., scales 1.0, zero points 0."""
    weight = bytes([0x21]) * (2 * k // 2)
    data = weight.ljust(32, b"\0") + struct.pack("<4f", 1, 1, 1, 1) + bytes(16)
    (folder / "q.bin").write_bytes(data)
    return _list(f"buffer 0 q.bin {len(data)} gpu", "quantized q DEQUANTIZE",
                 f"part q blocked weight w 0 0 UINT4 0 2 2,{k} - {max(4, len(weight))} 0",
                 "part q blocked scales s 0 32 FLOAT32 0 2 2,2 - 16 0",
                 "part q blocked zero_points z 0 48 UINT4 0 2 2,2 - 4 0")


def test_a_gemm_weight_with_k_0_is_bad_input(directml: DirectML, tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(bytes(64))
    ended = directml.attempt(_quantized(tmp_path, 0), ["--gemm", f"q={tmp_path / 'a.bin'}"], directory=tmp_path)
    assert ended.returncode == 2, (ended.returncode, ended.stdout, ended.stderr)  # (not a division by zero)
    assert "--gemm q" in ended.stderr and "[2, 0]" in ended.stderr, ended.stderr


def _one_hot_rows(folder: Path) -> Path:
    a = np.zeros((2, 32), np.float32)
    a[0, 0] = a[1, 5] = 1  # (row 0 picks k = 0 of each weight row, row 1 picks k = 5)
    (folder / "a.bin").write_bytes(a.tobytes())
    return folder / "a.bin"


def test_gemm_reads_the_dequantized_weight(directml: DirectML, tmp_path: Path) -> None:
    a = _one_hot_rows(tmp_path)
    run = directml.run(_quantized(tmp_path, 32), ["--gemm", f"q={a}"], directory=tmp_path)
    assert run.results["q"].values().tolist() == [1, 1, 2, 2]  # (nibble 1 at k = 0, nibble 2 at k = 5)


def test_a_dequantize_that_writes_nothing_shows_in_the_gemm_product(directml: DirectML, tmp_path: Path) -> None:
    # DEQUANTIZE not dispatched (a fault): GEMM must then multiply the 0xA5 pattern, never a new buffer's zeros
    # (nor the weight of the product before, which a reused buffer would hold).
    a = _one_hot_rows(tmp_path)
    run = directml.run(_quantized(tmp_path, 32), ["--gemm", f"q={a}"], directory=tmp_path, counted=False,
                       faults=["skip-first-step"])
    got = run.results["q"].values()
    assert got.tolist() == [PATTERN] * 4, got


def test_sizes_whose_element_count_wraps_are_refused_before_directml(directml: DirectML, tmp_path: Path) -> None:
    # 2^20 x 2^20 x 2^24 is 2^64: a product in 64 bits wraps to 0, an output desc of 0 bytes.
    (tmp_path / "w.bin").write_bytes(bytes(64))
    text = _list("buffer 0 w.bin 64 gpu", "tensor huge 0 0 FLOAT32 0 3 1048576,1048576,16777216 - 64 0 gpu",
                 "tensor small 0 0 FLOAT32 0 1 16 - 64 0 gpu")
    run = directml.run(text, ["--probe-sizes"], directory=tmp_path, counted=False)
    assert run.results["huge"].hresult == "refused-desc" and run.probes["huge"] == -1
    line = next(line for line in run.stdout.splitlines() if line.startswith("read huge "))
    assert "1048576,1048576,16777216 hold more than the 2^32 - 1 elements" in line, line
    assert run.results["small"].ok and "1 desc-refused" in run.stdout


def test_float_reads_may_flush_while_the_bits_reads_stay_exact(directml: DirectML, tmp_path: Path) -> None:
    # A GPU whose float rules flush subnormals and drop NaN payloads (a fault rewrites every float-typed output so):
    # the self-test passes and counts them, the suite's comparison allows and counts them, and the UINT32 / UINT64
    # reads of the same bytes still give back every bit.
    image, sources = Image(), {}
    f32 = np.array([0x00000001, 0x807FFFFF, 0x7FC12345, 0xFFA00001, 0x3F800000, 0x80000000], np.uint32)
    f64 = np.array([1, 0x800FFFFFFFFFFFFF, 0x7FF8000000012345, 0x3FF0000000000000], np.uint64)
    for key, array in (("f32", f32.view(np.float32)), ("f64", f64.view(np.float64))):
        prepared = dmlbridge.prepare(array)
        image.add(key, prepared)
        sources[key] = (array, prepared.dml_type.name)
    run = directml.run(image.write(tmp_path), directory=tmp_path, counted=False, faults=["flush"])
    assert "self-test float-typed IDENTITY: 2 of 2 subnormals flushed, 2 of 2 NaN payloads changed" in run.stdout
    flushed = quieted = 0
    for key, (array, dml_type) in sources.items():
        result = run.results[key]
        assert result.bits is not None and result.bits.data == array.tobytes(), key  # every bit, through UINT
        verdict = compare(result, expected_output(array, dml_type), None, key)
        assert not verdict.mismatched, verdict.mismatched
        flushed, quieted = flushed + verdict.flushed, quieted + verdict.quieted
        assert result.data != array.tobytes(), key  # (the fault did change the float-typed read)
    assert (flushed, quieted) == (4, 3)


def test_the_bits_read_catches_what_the_float_read_allows(directml: DirectML, tmp_path: Path) -> None:
    # The float-typed comparison lets a flushed subnormal pass; the bits read of the same tensor does not.
    image = Image()
    array = np.array([0x00000001, 0x3F800000], np.uint32).view(np.float32)
    image.add("f32", dmlbridge.prepare(array))
    run = directml.run(image.write(tmp_path), directory=tmp_path, counted=False, faults=["flush"])
    result = run.results["f32"]
    assert result.bits is not None
    result.bits.data = bytes(8)  # (as a GPU whose integer copy were broken would return it)
    verdict = compare(result, expected_output(array, "FLOAT32"), None, "f32")
    assert verdict.flushed == 1 and verdict.mismatched and "as UINT32" in verdict.mismatched[0]


@pytest.mark.parametrize(("fault", "status", "message"), [
    ("no-pattern", 3, "self-test FAILED IDENTITY as UINT32: HRESULT 0x8007000e"),
    ("no-feature-levels", 1, "device FAILED CheckFeatureSupport(DML_FEATURE_FEATURE_LEVELS) 0x80004005"),
    ("no-event", 1, "device FAILED CreateEventW 0x80070008"),
])
def test_a_failing_call_is_reported_never_passed_over(directml: DirectML, tmp_path: Path, fault: str, status: int,
                                                      message: str) -> None:
    # Without the 0xA5 pattern an operator that wrote nothing would not show; a device whose feature level cannot
    # be told is not a 1.0 device; without an event no wait can be trusted.
    (tmp_path / "w.bin").write_bytes(bytes(64))
    ended = directml.attempt(_list("buffer 0 w.bin 64 gpu", "tensor t 0 0 FLOAT32 0 1 16 - 64 0 gpu"),
                             directory=tmp_path, faults=[fault])
    assert (ended.returncode, message in ended.stdout.splitlines()) == (status, True), (ended.stdout, ended.stderr)
    assert "read t " not in ended.stdout


def test_out_of_memory_while_uploading_is_said_as_such(directml: DirectML, tmp_path: Path) -> None:
    # A sparse 1 TiB buffer file (no disk blocks): the device works, it cannot hold one buffer that large.
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(1 << 40)
    ended = directml.attempt(_list(f"buffer 0 big.bin {1 << 40} gpu"), directory=tmp_path)
    assert ended.returncode == 5, (ended.returncode, ended.stdout, ended.stderr)
    assert "out of memory (E_OUTOFMEMORY 0x8007000e)" in ended.stderr and "--max-buffer-bytes" in ended.stderr
    assert "device FAILED" not in ended.stdout


def test_debug_names_the_debug_layers_this_machine_lacks(directml: DirectML, tmp_path: Path) -> None:
    ended = directml.attempt(_list(), ["--self-test-only", "--debug"])
    if directml.env is None and ended.returncode == 0:  # (Windows with both layers installed)
        assert "self-test ok" in ended.stdout.splitlines()
        return
    assert ended.returncode == 2, (ended.returncode, ended.stdout, ended.stderr)
    if directml.env is not None:  # (this runtime: vkd3d has no debug layer, and there is no DirectML.Debug.dll)
        assert "the Direct3D 12 debug layer (D3D12GetDebugInterface returned 0x80004001" in ended.stderr
        assert "the DirectML debug layer" in ended.stderr and "DirectML.Debug.dll" in ended.stderr
    assert "--debug: this machine lacks" in ended.stderr and "self-test" not in ended.stdout, ended.stderr


BUFFER = "buffer 0 w.bin 64 gpu"
TENSOR = "tensor t 0 0 FLOAT32 0 1 3 - 12 0 gpu"
BROADCAST = "FLOAT32 0 2 2,3 0,1 12 0"  # (t's 3 values as [2, 3], each row the same)


@pytest.mark.parametrize(("lines", "message"), [
    (["buffer 0 w.bin 64 maybe"], "UPLOAD 'maybe': expected gpu or cpu"),
    (["buffer 0 w.bin 64"], "a buffer line is 'buffer INDEX FILE SIZE UPLOAD'"),
    (["buffer 0 c.bin 64 cpu", "buffer 1 w.bin 64 gpu"], "is uploaded (gpu) after one that is not (cpu)"),
    (["buffer 0 c.bin 64 cpu", "tensor t 0 0 FLOAT32 0 1 3 - 12 0 gpu"], "which is not uploaded (cpu)"),
    (["buffer 0 c.bin 64 cpu", "tensor t 0 0 FLOAT32 0 1 3 - 12 0 none"], "which is not uploaded (cpu)"),
    ([BUFFER, "tensor t 0 0 FLOAT32 0 1 3 - 12 0"], "a tensor line is 'tensor KEY BUFFER OFFSET', the 7 desc"),
    ([BUFFER, "tensor t 0 0 FLOAT32 0 1 3 - 12 0 gpu"[:-3] + "GPU"], "READS_ON 'GPU': expected gpu, cpu or none"),
    ([BUFFER, f"consumer t 0 add 1 ELEMENT_WISE_ADD {BROADCAST}"], "comes right after its tensor line"),
    ([BUFFER, TENSOR, "quantized q DEQUANTIZE", f"consumer t 0 add 1 ELEMENT_WISE_ADD {BROADCAST}"],
     "comes right after its tensor line"),
    ([BUFFER, TENSOR, "tensor u 0 16 FLOAT32 0 1 3 - 12 0 gpu", f"consumer t 0 add 1 ELEMENT_WISE_ADD {BROADCAST}"],
     "a consumer line of t after the tensor line of u"),
    ([BUFFER, "tensor t 0 0 FLOAT32 0 1 3 - 12 0 cpu", f"consumer t 0 add 1 ELEMENT_WISE_ADD {BROADCAST}"],
     "whose READS_ON is cpu"),
    ([BUFFER, TENSOR, f"consumer t 1 add 1 ELEMENT_WISE_ADD {BROADCAST}",
      f"consumer t 1 mul 1 ELEMENT_WISE_MULTIPLY {BROADCAST}"], "in increasing INDEX"),
    ([BUFFER, TENSOR, "consumer t 0 add 1 ELEMENT_WISE_ADD FLOAT32 0 2 2,3 0,1 12"],
     "a consumer line is 'consumer KEY INDEX NODE INPUT OPERATOR' and the 7 desc fields, or -"),
    ([BUFFER, TENSOR, "consumer t 0 add 1 ELEMENT_WISE_ADD - -"], "a consumer line is"),
    ([BUFFER, TENSOR, f"consumer t 0 add 1 element_wise_add {BROADCAST}"], "OPERATOR 'element_wise_add'"),
    ([BUFFER, TENSOR, f"consumer t 0 a%2 1 ELEMENT_WISE_ADD {BROADCAST}"], "NODE 'a%2'"),
])
def test_a_malformed_version_2_line_is_bad_input(directml: DirectML, tmp_path: Path, lines: list[str],
                                                  message: str) -> None:
    for name in ("w.bin", "c.bin"):
        (tmp_path / name).write_bytes(bytes(64))
    ended = directml.attempt(_list(*lines), directory=tmp_path)
    assert ended.returncode == 2 and message in ended.stderr, (ended.returncode, ended.stdout, ended.stderr)
    assert "device" not in ended.stdout  # (refused before a GPU starts)


def test_a_version_1_list_is_refused_with_what_to_do(directml: DirectML, tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(bytes(64))
    text = "dmlbridge-bindings 1\ntarget 6.4\nbuffer 0 w.bin 64\ntensor t 0 0 FLOAT32 0 1 16 - 64 0\n"
    ended = directml.attempt(text, directory=tmp_path)
    assert ended.returncode == 2, (ended.returncode, ended.stdout, ended.stderr)
    assert "binding list version 1: this program reads version 2" in ended.stderr
    assert "dmlbridge bindings PREFIX.json" in ended.stderr and "device" not in ended.stdout


def test_cpu_buffers_are_not_uploaded_and_consumers_read_through_their_own_desc(directml: DirectML,
                                                                                tmp_path: Path) -> None:
    # t [3] bound by one consumer broadcast to [2, 3] and by one whose sizes are undecided; s, read on the CPU, in
    # a buffer that is not uploaded; a quantized part there could only be a hostile list's: refused, never bound.
    values = np.array([1.5, -2, 3], np.float32)
    (tmp_path / "w.bin").write_bytes(values.tobytes().ljust(64, b"\0"))
    (tmp_path / "c.bin").write_bytes(np.array([3, 2], np.int64).tobytes())
    text = _list(BUFFER, "buffer 1 c.bin 16 cpu", TENSOR,
                 f"consumer t 0 add 1 ELEMENT_WISE_ADD {BROADCAST}", "consumer t 2 mul 1 ELEMENT_WISE_MULTIPLY -",
                 "tensor s 1 0 INT64 0 1 2 - 16 0 cpu", "quantized q DEQUANTIZE",
                 "part q split weight s 1 0 UINT4 0 1 4 - 4 0", "part q split scales t 0 0 FLOAT32 0 1 1 - 4 0",
                 "part q split zero_points t 0 0 UINT4 0 1 1 - 4 0")
    run = directml.run(text, directory=tmp_path, counted=False)
    lines = run.stdout.splitlines()
    assert "buffer 1 c.bin 16 not-uploaded" in lines and "buffer 0 w.bin 64 uploaded" in lines
    assert run.on_cpu == {"s"} and "read s " not in run.stdout and "cpu s 1 0 16 read on the CPU, not bound" in lines
    assert run.results["t#0"].kind == "consumer" and run.results["t#0"].values().tolist() == [1.5, -2, 3] * 2
    assert run.undecided == {"t#2"} and np.array_equal(run.results["t"].values(), values)
    weight = next(line for line in lines if line.startswith("read q/split/weight "))
    assert "refused-binding" in weight and "buffer 1 is not uploaded (its UPLOAD is cpu)" in weight
    assert lines[-1] == "summary 6 executed, 0 refused, 2 binding-refused, 0 desc-refused, 1 on-cpu, 1 undecided"


@pytest.mark.parametrize(("desc", "why"), [
    ("FLOAT32 0 2 4,16 0,1 64 0", "offset 16 + TotalTensorSizeInBytes 64 is past the end of buffer 0 (64 bytes)"),
    ("FLOAT32 0 2 2,3 0,1 12 256", "offset 16 is not a multiple of GuaranteedBaseOffsetAlignment 256"),
])
def test_a_consumer_binding_out_of_bounds_is_refused_never_bound(directml: DirectML, tmp_path: Path, desc: str,
                                                                 why: str) -> None:
    # The consumer's desc over its tensor's bytes, at its tensor's offset (16): checked as every binding is.
    (tmp_path / "w.bin").write_bytes(bytes(64))
    run = directml.run(_list(BUFFER, "tensor t 0 16 FLOAT32 0 1 3 - 12 0 gpu", f"consumer t 0 add 1 ADD {desc}"),
                       directory=tmp_path, counted=False)
    line = next(line for line in run.stdout.splitlines() if line.startswith("consumer t#0 "))
    assert line.split()[3] == "refused-binding" and line.endswith(why), line
    assert run.results["t"].ok and "1 binding-refused" in run.stdout
