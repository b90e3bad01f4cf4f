"""What a program uploading a written plan reads through it: a buffer file a piece at a time
(``UploadPlan.read_buffer``, the bytes ``open()`` reads from the file), and an entry's ONNX values decoded from its
bytes read elsewhere (``UploadPlan.array_from``, what ``array`` gives and what the model holds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from models import build_model, same_values

import dmlbridge


def test_read_buffer_reads_each_buffer_file_piece_by_piece(tmp_path: Path) -> None:
    model, _ = build_model(tmp_path)
    with dmlbridge.convert_model(model, tmp_path / "w", progress=False, max_buffer_bytes=1024) as plan:
        assert len(plan.buffers) > 3
        for index, buffer in enumerate(plan.buffers):
            whole = Path(buffer.path).read_bytes()
            pieces = []
            for offset in range(0, buffer.size, 100):  # (pieces that cut tensors anywhere)
                out = np.full(min(100, buffer.size - offset), 0xA5, np.uint8)
                plan.read_buffer(index, offset, out)
                pieces.append(out.tobytes())
            assert b"".join(pieces) == whole
        out = np.empty(8, np.uint8)
        for index, offset in ((len(plan.buffers), 0), (-1, 0), (0, -1), (0, plan.buffers[0].size - 7), (True, 0)):
            with pytest.raises(dmlbridge.InvalidArgumentError, match="has no 8 bytes at offset"):
                plan.read_buffer(index, offset, out)
        for bad in (np.empty(8, np.int16), np.empty((4, 4), np.uint8)[:, :2], bytearray(8),
                    np.empty(8, np.uint8)[::-1].copy().view(np.uint8)[::2]):
            with pytest.raises(dmlbridge.InvalidArgumentError, match="writable, contiguous numpy uint8"):
                plan.read_buffer(0, 0, bad)  # type: ignore[arg-type]
    with pytest.raises(dmlbridge.InvalidArgumentError, match="closed"):
        plan.read_buffer(0, 0, out)
    with pytest.raises(dmlbridge.InvalidArgumentError, match="not written"):
        dmlbridge.plan_model(model).read_buffer(0, 0, out)


def test_array_from_decodes_bytes_read_elsewhere_as_array_does(tmp_path: Path) -> None:
    model, expected = build_model(tmp_path)
    for target in (dmlbridge.Target(), dmlbridge.Target("6.2", supported={"FLOAT32", "INT32", "UINT8", "INT8"})):
        with dmlbridge.convert_model(model, tmp_path / "w", target=target, progress=False) as plan:
            for entry in plan.converted:
                data = bytes(plan.read(entry.key))  # (as a GPU's readback would give them: plain bytes)
                values = plan.array_from(entry.key, data)
                assert same_values(values, plan.array(entry.key)) and values.dtype == plan.array(entry.key).dtype
                assert same_values(values, expected[entry.key]), entry.key
            key = plan.converted[0].key
            with pytest.raises(dmlbridge.InvalidArgumentError, match=rf"entry '{key}' holds \d+ bytes; data has 3"):
                plan.array_from(key, b"abc")
            with pytest.raises(dmlbridge.InvalidArgumentError, match="skipped"):
                plan.array_from(plan.skipped[0].key, b"")
