"""Files are read into buffers that start on a page boundary (:mod:`dmlbridge.system.aligned`): reading into one
16 bytes past a page, where a plain numpy allocation starts, copied at half the speed on the benchmark machine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from builders import model_of
from onnx import TensorProto, external_data_helper

from dmlbridge import convert_model
from dmlbridge.plan import verify
from dmlbridge.plan.upload_plan import read_plan
from dmlbridge.system import windows
from dmlbridge.system.aligned import PAGE, empty_aligned


def _address(buffer: Any) -> int:
    return int(np.frombuffer(buffer, np.uint8).__array_interface__["data"][0])


@pytest.mark.parametrize("size", [0, 1, (64 << 10) - 1, 64 << 10, (1 << 20) + 5])
def test_a_buffer_has_the_size_asked_for_and_from_64_kib_starts_on_a_page(size: int) -> None:
    buffer = empty_aligned(size)
    assert buffer.shape == (size,) and buffer.dtype == np.uint8 and buffer.flags.writeable
    if size >= 64 << 10:
        assert _address(buffer) % PAGE == 0
        buffer[-1] = 7  # (the last byte is within the allocation)


def _record_destinations(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(address, length) of the destination of every positioned read into a buffer from now on. A read into a new
    ``bytes`` is not one (the manifest and the fingerprint's samples are read so): ``os.pread`` on POSIX, and on
    Windows a ``bytearray`` read into, then copied (no faster aligned under Wine)."""
    seen: list[tuple[int, int]] = []
    if hasattr(os, "preadv"):
        preadv = os.preadv

        def recorded(fd: int, buffers: list[Any], offset: int) -> int:
            seen.extend((_address(b), memoryview(b).nbytes) for b in buffers)
            return preadv(fd, buffers, offset)

        monkeypatch.setattr(os, "preadv", recorded)
    read_into_at = windows.read_into_at  # (never called off Windows)

    def recorded_windows(fd: int, view: memoryview, offset: int) -> int:
        if not isinstance(view.obj, bytearray):
            seen.append((_address(view), view.nbytes))
        return read_into_at(fd, view, offset)

    monkeypatch.setattr(windows, "read_into_at", recorded_windows)
    return seen


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "checksum"])
def test_conversion_and_verify_read_large_stretches_into_page_aligned_buffers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, checksum: bool) -> None:
    """A FLOAT8E4M3FN constant (widened: its codes read into a buffer) and an INT4 one (compared as stored) in
    external data, converted, verified and read back: every read of 64 KiB or more into a buffer lands on a page
    boundary."""
    rng = np.random.default_rng(3)
    stored = [("f8", TensorProto.FLOAT8E4M3FN, 600_000, rng.integers(0, 256, 600_000, dtype=np.uint8).tobytes()),
              ("i4", TensorProto.INT4, 800_000, rng.integers(0, 256, 400_000, dtype=np.uint8).tobytes())]
    inits, content = [], bytearray()
    for name, data_type, count, data in stored:
        tensor = TensorProto(name=name, data_type=data_type, dims=[count], raw_data=data)
        external_data_helper.set_external_data(tensor, "m.data", offset=len(content), length=len(data))
        tensor.ClearField("raw_data")
        content += data
        inits.append(tensor)
    (tmp_path / "m.data").write_bytes(bytes(content))
    path = tmp_path / "m.onnx"
    onnx.save(model_of(inits), path)
    monkeypatch.setattr(verify, "POOL_MIN_BYTES", 4096)
    seen = _record_destinations(monkeypatch)
    convert_model(path, tmp_path / "w", progress=False, fsync=False, checksum=checksum, workers=workers).close()
    with read_plan(tmp_path / "w.json", verify=False, bin_path=None, check_fingerprint=False) as plan:
        assert verify.find_mismatches(plan, path, sha256=checksum, workers=workers) == []
        assert plan.read("f8").shape == (1_200_000,)  # (an entry read whole: FLOAT16, two bytes an element)
    large = [(address, length) for address, length in seen if length >= 64 << 10]
    assert large, "no large read was seen"
    assert [(address % PAGE, length) for address, length in large if address % PAGE] == []
