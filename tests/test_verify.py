"""UploadPlan.verify: a changed byte of the .bin, a changed model, every mismatch named."""


from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from models import (
    buffer_path,
    build_model,
)
from onnx import numpy_helper

from dmlbridge import convert_model, load_plan
from dmlbridge.errors import (
    ManifestError,
)


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
    with pytest.raises(ManifestError, match=r"2 mismatches.*fingerprint.*'t_float16': 1 byte\(s\) differ"):
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
    with pytest.raises(ManifestError, match=r"1 mismatches.*made from another model file"):
        loaded.verify(other)
    with open(tmp_path / "weights.data", "ab") as file:
        file.write(b"\0" * 16)
    with pytest.raises(ManifestError, match=r"weights.data' holds \d+ bytes; the plan was made from one of"):
        loaded.verify(path)
