"""A plan converted for a richer target than the device is refused by ``upload`` before anything is uploaded,
naming the entries and records that need what the device lacks; a plan for a lower target fits, and the
constants read on the CPU (never uploaded, of their ONNX type) do not count. The check runs on every system
against a ``Target`` standing for the device; its wiring into ``upload`` on Windows' CPython."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from quantized_models import quantized

import dmlbridge
import dmlbridge.gpu
from dmlbridge.gpu.upload import check_plan_fits

ALL_BUT_64 = {"FLOAT32", "FLOAT16", "UINT32", "INT32", "UINT16", "INT16", "UINT8", "INT8", "UINT4", "INT4"}


def _half_then_reshape(tmp_path: Path, target: dmlbridge.Target | None = None) -> dmlbridge.UploadPlan:
    """FLOAT16 ``w`` added to the input (uploaded), then a Reshape by the INT64 ``shape`` (read on the CPU)."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["z"]), helper.make_node("Reshape", ["z", "shape"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3, 2])],
        [numpy_helper.from_array(np.arange(6, dtype=np.float16).reshape(2, 3), "w"),
         numpy_helper.from_array(np.array([3, 2], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return dmlbridge.convert_model(model, tmp_path / "m", progress=False, target=target or dmlbridge.Target())


def test_the_constants_read_on_the_cpu_do_not_count(tmp_path: Path) -> None:
    with _half_then_reshape(tmp_path) as plan:
        shape = plan.entries["shape"]
        assert shape.reads_on == "cpu" and (shape.buffer or 0) >= plan.upload_buffer_count
        check_plan_fits(plan, dmlbridge.Target("6.4", supported=ALL_BUT_64))  # (no INT64: shape is not uploaded)
        with pytest.raises(dmlbridge.InvalidArgumentError, match=r"the device lacks what entry 'w' \(FLOAT16\) "
                                                                 r"needs; .*target=dmlbridge\.gpu\.target_of\(device\)"
                           ) as caught:
            check_plan_fits(plan, dmlbridge.Target("6.4", supported=ALL_BUT_64 - {"FLOAT16"}))
        assert "shape" not in str(caught.value)


def test_a_dequantize_record_below_6_3_is_refused_and_a_lower_plan_fits(tmp_path: Path) -> None:
    model = quantized(64, 4, 4, 16, False)
    with dmlbridge.convert_model(model, tmp_path / "q", progress=False) as plan:
        (record,) = plan.quantized.values()
        assert record.operator == "DEQUANTIZE"
        check_plan_fits(plan, dmlbridge.Target("6.3"))
        with pytest.raises(dmlbridge.InvalidArgumentError) as caught:
            check_plan_fits(plan, dmlbridge.Target("6.2"))
        message = str(caught.value)
        assert f"quantized record {record.key!r} (DEQUANTIZE, from feature level 6.3)" in message
        assert f"quantized record {record.key!r}'s weight (UINT4)" in message, message
    lower = dmlbridge.Target("6.2", supported=ALL_BUT_64)
    with dmlbridge.convert_model(model, tmp_path / "low", target=lower, progress=False) as plan:
        assert next(iter(plan.quantized.values())).operator == "ELEMENT_WISE_DEQUANTIZE_LINEAR"
        check_plan_fits(plan, lower)
        check_plan_fits(plan, dmlbridge.Target("6.4"))


def test_upload_refuses_a_plan_for_a_richer_device(device: dmlbridge.gpu.Device, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for folder in ("own", "rich"):
        (tmp_path / folder).mkdir()
    # (for the device's own target the plan uploads; its INT64 constant, read on the CPU, is not uploaded)
    with _half_then_reshape(tmp_path / "own", dmlbridge.gpu.target_of(device)) as plan, \
            dmlbridge.gpu.upload(plan, device) as uploaded:
        assert uploaded.read("w").tolist() == [[0, 1, 2], [3, 4, 5]]
    # (a plan for every type of 6.4, on the same device made to look poorer: no FLOAT16, feature level 6.2)
    monkeypatch.setattr(device, "types", frozenset(t for t in device.types if t.name != "FLOAT16"))
    monkeypatch.setattr(device, "feature_level", dmlbridge.FeatureLevel.FL_6_2)
    with _half_then_reshape(tmp_path / "rich") as plan:
        with pytest.raises(dmlbridge.InvalidArgumentError, match=r"feature level 6\.2.*entry 'w' \(FLOAT16\).*"
                                                                 r"target=dmlbridge\.gpu\.target_of\(device\)"):
            dmlbridge.gpu.upload(plan, device)
