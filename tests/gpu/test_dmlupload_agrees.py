"""``dmlupload`` and ``dmlbridge.gpu`` agree: for the same conversion, every entry and every quantized part is bound
at the same buffer, offset and desc by both. The binding list ``dmlbridge bindings`` writes (what ``dmlupload``
reads, docs/bindings.md) is read by the independent reader of tests/helpers/bindings_format.py and held line by
line to the upload's bindings; where ``dmlupload.exe`` is built (DMLBRIDGE_DMLUPLOAD), it runs on that list too,
and what DirectML read through each of its bindings equals what ``dmlbridge.gpu`` reads back from the GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import bindings_format
import numpy as np
import pytest
from gpu_runtime import TALLY

import dmlbridge
import dmlbridge.gpu
from dmlbridge.cli.demo import build_sample_model

OUTPUT = {"FLOAT32": np.float32, "FLOAT64": np.float64, "UINT32": np.uint32, "INT32": np.int32,
          "UINT64": np.uint64, "INT64": np.int64}  # dmlupload's output types (native/README.md)


@pytest.fixture(scope="module")
def conversion(device: dmlbridge.gpu.Device, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample model (every type, three quantized weights) converted for the device's own target, in several
    buffer files, and its binding list written by ``dmlbridge bindings``."""
    folder = tmp_path_factory.mktemp("bindings")
    dmlbridge.convert_model(build_sample_model(folder), folder / "w", target=dmlbridge.gpu.target_of(device),
                            progress=False, max_buffer_bytes=16384).close()
    run = subprocess.run([sys.executable, "-m", "dmlbridge", "bindings", str(folder / "w.json"), "-o",
                          str(folder / "w.bindings")], capture_output=True, text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stderr
    return folder


def _key(line: bindings_format.Line) -> Any:
    return line.key if line.kind == "tensor" else (line.record, line.form, line.role)


def test_every_binding_of_the_list_is_the_uploads(device: dmlbridge.gpu.Device, conversion: Path) -> None:
    listed = bindings_format.parse((conversion / "w.bindings").read_text(encoding="ascii"))
    with dmlbridge.load_plan(conversion / "w.json") as plan, dmlbridge.gpu.upload(plan, device) as uploaded:
        assert [os.path.basename(b.path) for b in plan.buffers] == [file for file, _ in listed.buffers]
        assert len(listed.buffers) >= 3
        keys = [e.key for e in plan.converted]
        for record_key, record in plan.quantized.items():
            # (the blocked form, ONNX Runtime's, where DEQUANTIZE takes a weight blocked on its last axis)
            forms = ["blocked"] if record.operator == "DEQUANTIZE" and record.granularity == "block" \
                and record.axis == len(record.shape) - 1 else []
            keys += [(record_key, form, role) for form in [*forms, "split"]
                     for role in ("weight", "scales", "zero_points")]
        assert sorted(map(str, keys)) == sorted(str(_key(line)) for line in listed.lines)  # the same tensors
        for line in listed.lines:
            key = _key(line)
            if listed.uploads[line.buffer] == "cpu":  # (read on the CPU, not uploaded: no GPU binding)
                with pytest.raises(dmlbridge.InvalidArgumentError, match=re.escape("plan.array(")):
                    uploaded.binding(key)
                continue
            binding = uploaded.binding(key)
            assert (binding.Buffer, binding.Offset, binding.SizeInBytes) == (
                uploaded.resource(line.buffer), line.offset, line.desc.total), key
            desc = uploaded.buffer_tensor_desc(key)
            dims = desc.DimensionCount
            strides = None if not desc.Strides else tuple(desc.Strides[:dims])
            assert bindings_format.Desc(bindings_format.DML_TYPES[desc.DataType], desc.Flags,
                                        tuple(desc.Sizes[:dims]), strides, desc.TotalTensorSizeInBytes,
                                        desc.GuaranteedBaseOffsetAlignment) == line.desc, key
        assert len(listed.lines) == len(keys) >= 40
        for consumer in listed.consumers:  # each consumer's own desc, as buffer_tensor_desc(key, consumer=i) gives it
            if consumer.desc is None:
                with pytest.raises(dmlbridge.LayoutError):
                    uploaded.buffer_tensor_desc(consumer.key, consumer=consumer.index)
                continue
            desc = uploaded.buffer_tensor_desc(consumer.key, consumer=consumer.index)
            dims = desc.DimensionCount
            strides = None if not desc.Strides else tuple(desc.Strides[:dims])
            assert bindings_format.Desc(bindings_format.DML_TYPES[desc.DataType], desc.Flags,
                                        tuple(desc.Sizes[:dims]), strides, desc.TotalTensorSizeInBytes,
                                        desc.GuaranteedBaseOffsetAlignment) == consumer.desc, consumer.name
        assert len(listed.consumers) >= 10


def _dmlupload() -> str:
    exe = os.environ.get("DMLBRIDGE_DMLUPLOAD")
    if not exe or not Path(exe).exists():
        pytest.skip("DMLBRIDGE_DMLUPLOAD does not name a built dmlupload.exe (native/README.md)")
    return exe


def test_dmlupload_reads_what_dmlbridge_gpu_reads(device: dmlbridge.gpu.Device, conversion: Path,
                                                   tmp_path: Path) -> None:
    """dmlupload binds each line to a DirectML operator (IDENTITY, CAST or DEQUANTIZE into an exact output type)
    and dumps what it read: for every tensor and part, those values equal the GPU's bytes as dmlbridge.gpu reads
    them, decoded through the same desc."""
    exe = _dmlupload()
    dump = tmp_path / "dump.bin"
    run = subprocess.run([exe, str(conversion / "w.bindings"), "--dump", str(dump)], capture_output=True, text=True,
                         check=False, timeout=900)
    assert run.returncode == 0 and "self-test ok" in run.stdout.splitlines(), run.stdout + run.stderr
    listed = bindings_format.parse((conversion / "w.bindings").read_text(encoding="ascii"))
    by_name = {line.name: line for line in listed.lines}
    raw = dump.read_bytes()
    compared = 0
    with dmlbridge.load_plan(conversion / "w.json") as plan, dmlbridge.gpu.upload(plan, device) as uploaded:
        for words in (row.split() for row in run.stdout.splitlines()):
            if not words or words[0] != "read":
                continue
            name, _, hresult, out_type, size, offset = words[1:7]
            line = by_name[name]
            assert hresult == "0x00000000", words
            theirs = np.frombuffer(raw[int(offset) : int(offset) + int(size)], OUTPUT[out_type])
            desc = line.desc
            ours = dmlbridge.decode(uploaded.read_bytes(_key(line)), desc.data_type, desc.sizes, desc.strides)
            ok = np.array_equal(theirs.view(f"u{theirs.itemsize}"),
                                ours.astype(OUTPUT[out_type]).reshape(-1).view(f"u{theirs.itemsize}")) \
                or np.array_equal(theirs, ours.astype(OUTPUT[out_type]).reshape(-1), equal_nan=True)
            TALLY.entries += line.kind == "tensor"
            TALLY.parts += line.kind == "part"
            TALLY.mismatches += not ok
            assert ok, name
            compared += 1
    assert compared == sum(line.reads_on != "cpu" for line in listed.lines)  # (dmlupload binds no cpu tensor)
    summary = re.search(r"^summary (\d+) executed, 0 refused, 0 binding-refused, 0 desc-refused, \d+ on-cpu, "
                        r"\d+ undecided$", run.stdout, re.M)
    assert summary, run.stdout
    TALLY.dmlupload_operators += int(summary.group(1))


def test_dmlupload_lets_another_program_remove_the_files_it_reads(conversion: Path, tmp_path: Path) -> None:
    """dmlupload opens the buffer files sharing delete (FILE_SHARE_DELETE), as dmlbridge's own readers do: a
    re-conversion that replaces them while it reads can remove them (the removal done once it closes them), never
    refused with a sharing violation. ``DMLUPLOAD_FAULTS=hold-files`` pauses it with every file open."""
    exe = _dmlupload()
    listed = bindings_format.parse((conversion / "w.bindings").read_text(encoding="ascii"))
    for name in ["w.bindings", *(file for file, _ in listed.buffers)]:  # (a copy: the module's other tests read it)
        (tmp_path / name).write_bytes((conversion / name).read_bytes())
    victim = tmp_path / listed.buffers[0][0]
    held = subprocess.Popen([exe, str(tmp_path / "w.bindings")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "DMLUPLOAD_FAULTS": "hold-files"})
    try:
        assert held.stderr is not None and "buffer files open" in held.stderr.readline()
        os.remove(victim)  # (a sharing violation, PermissionError, were it opened without FILE_SHARE_DELETE)
        out, err = held.communicate("\n", timeout=900)
    finally:
        if held.poll() is None:
            held.kill()
            held.wait()
    assert held.returncode == 0 and "self-test ok" in out.splitlines(), out + err
    assert not victim.exists()
