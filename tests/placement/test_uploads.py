"""upload="bound" (the default): the constants ONNX Runtime's DirectML provider reads on the CPU go, converted with
their ONNX type, into buffer files of their own after the upload buffers, marked not uploaded; upload="all" keeps
every constant in the upload buffers. Known answers are worked out with struct."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import model_of
from command_line import run as run_cli
from onnx import TensorProto, helper, numpy_helper
from quantized_models import gbq_inputs, gbq_model

import dmlbridge
from dmlbridge import InvalidArgumentError, ManifestError, TensorTooLargeError

INT64_MAX = 2**63 - 1
NARROW = dmlbridge.Target("6.4", supported={"FLOAT32", "INT32", "UINT32"}, int64="narrow")


def sliced_model() -> Any:
    """A weight read on the GPU (Add), then a Slice's starts and ends (the ends 2^63 - 1, ONNX's "to the end")
    read on the CPU, then a second weight read on the GPU (Mul)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Add", ["x", "w"], ["a"], "add"),
             helper.make_node("Slice", ["a", "starts", "ends"], ["y"], "slice"),
             helper.make_node("Mul", ["a", "v"], ["z"], "mul")]
    inits = [numpy_helper.from_array(np.array([1.5, 2.5, 3.5, 4.5], np.float32), "w"),
             numpy_helper.from_array(np.array([1], np.int64), "starts"),
             numpy_helper.from_array(np.array([INT64_MAX], np.int64), "ends"),
             numpy_helper.from_array(np.full(4, 0.25, np.float32), "v")]
    graph = helper.make_graph(nodes, "g", [x], [y, z], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_cpu_read_constants_go_last_in_buffers_not_uploaded(tmp_path: Path) -> None:
    plan = dmlbridge.convert_model(sliced_model(), tmp_path / "m", progress=False, checksum=True)
    assert list(plan.entries) == ["w", "v", "starts", "ends"]  # (the CPU-read ones last, each group in model order)
    assert [plan.entries[k].reads_on for k in plan.entries] == ["gpu", "gpu", "cpu", "cpu"]
    assert [(plan.entries[k].buffer, plan.entries[k].offset) for k in plan.entries] == [(0, 0), (0, 256), (1, 0),
                                                                                          (1, 256)]
    assert [b.uploaded for b in plan.buffers] == [True, False]
    assert plan.upload == "bound" and plan.upload_buffer_count == 1 and plan.upload_size == 256 + 16
    assert [b.key for b in plan.bindings()] == ["w", "v"]
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["upload"] == "bound" and [b.get("uploaded", True) for b in doc["buffers"]] == [True, False]
    # The CPU-read buffer's bytes, worked out by hand: starts (1) at 0, zeros to 256, ends (2^63 - 1) at 256.
    data = Path(plan.buffers[1].path).read_bytes()
    assert data == struct.pack("<q", 1) + bytes(248) + struct.pack("<q", INT64_MAX)
    assert Path(plan.buffers[0].path).read_bytes()[:16] == struct.pack("<4f", 1.5, 2.5, 3.5, 4.5)
    assert plan.array("ends").tolist() == [INT64_MAX]
    assert plan.verify(sliced_model()) is None
    loaded = dmlbridge.load_plan(tmp_path / "m.json", verify=True)
    assert loaded == plan and loaded.upload_buffer_count == 1 and [b.key for b in loaded.bindings()] == ["w", "v"]
    loaded.close()
    plan.close()


def test_a_cpu_read_constant_keeps_its_onnx_type_whatever_the_target(tmp_path: Path) -> None:
    """A Slice's ends of 2^63 - 1 on a target without INT64: kept as INT64 (DirectML never reads it), where
    upload="all" narrows it to INT32 and refuses the value."""
    plan = dmlbridge.convert_model(sliced_model(), tmp_path / "m", progress=False, target=NARROW, checksum=True)
    ends = plan.entries["ends"]
    assert (ends.dml_type.name, ends.conversion, ends.total_tensor_size_in_bytes) == ("INT64", "native", 8)
    assert plan.entries["w"].dml_type.name == "FLOAT32"
    assert plan.read("ends").tobytes() == struct.pack("<q", INT64_MAX)
    assert plan.verify(sliced_model()) is None
    assert dmlbridge.load_plan(tmp_path / "m.json", verify=True).entries["ends"].dml_type.name == "INT64"
    plan.close()
    with pytest.raises(dmlbridge.ValueRangeError, match="does not fit INT32"):
        dmlbridge.convert_model(sliced_model(), tmp_path / "a", progress=False, target=NARROW, upload="all")


def test_upload_all_keeps_every_constant_in_the_upload_buffers_in_model_order(tmp_path: Path) -> None:
    bound = dmlbridge.convert_model(sliced_model(), tmp_path / "b", progress=False)
    every = dmlbridge.convert_model(sliced_model(), tmp_path / "a", progress=False, upload="all")
    assert list(every.entries) == ["w", "starts", "ends", "v"] and every.upload == "all"
    assert [b.uploaded for b in every.buffers] == [True] and every.upload_buffer_count == 1
    assert [b.key for b in every.bindings()] == list(every.entries)
    assert "uploaded" not in json.dumps(json.loads((tmp_path / "a.json").read_text())["buffers"])
    for key in every.entries:  # (the same bytes for each entry, wherever it is)
        assert every.read(key).tobytes() == bound.read(key).tobytes()
    assert dmlbridge.plan_model(sliced_model(), upload="all").buffer_sizes == (16 + 256 * 3,)
    every.close()
    bound.close()


def test_the_cpu_read_buffers_are_split_by_max_buffer_bytes_and_bounded_by_max_output_bytes(tmp_path: Path) -> None:
    shapes = {f"s{i}": np.arange(64, dtype=np.int64) for i in range(3)}  # 512 bytes each, read by Reshapes
    nodes = [helper.make_node("Reshape", ["w", name], [f"y{i}"]) for i, name in enumerate(shapes)]
    model = model_of({"w": np.ones(4, np.float32), **shapes}, nodes)
    plan = dmlbridge.plan_model(model, max_buffer_bytes=1024)
    assert plan.buffer_sizes == (16, 1024, 512) and plan.upload_buffer_count == 1 and plan.upload_size == 16
    assert [plan.entries[k].buffer for k in ("w", "s0", "s1", "s2")] == [0, 1, 1, 2]
    # A hostile model cannot route bytes past max_output_bytes through constants read on the CPU.
    with pytest.raises(TensorTooLargeError, match=r"1552 bytes, more than 1024 \(max_output_bytes\)"):
        dmlbridge.convert_model(model, tmp_path / "m", progress=False, max_output_bytes=1024)
    assert not list(tmp_path.iterdir())
    only_cpu = model_of(shapes, [helper.make_node("Reshape", ["x", name], [f"y{i}"]) for i, name in enumerate(shapes)])
    plan = dmlbridge.convert_model(only_cpu, tmp_path / "c", progress=False)  # (nothing uploaded at all)
    assert plan.upload_buffer_count == 0 and plan.upload_size == 0 and not plan.bindings()
    assert [b.uploaded for b in plan.buffers] == [False] and plan.verify(only_cpu) is None
    plan.close()
    read_by_nothing = model_of(shapes, [helper.make_node("Reshape", ["x", "s0"], ["y"])])  # (s1, s2: uploaded)
    plan = dmlbridge.plan_model(read_by_nothing)
    assert [plan.entries[k].reads_on for k in plan.entries] == ["none", "none", "cpu"]
    assert plan.upload_buffer_count == 1 and plan.buffer_sizes == (1024, 512)
    assert [plan.entries[k].buffer for k in plan.entries] == [0, 0, 1]


def test_a_quantized_record_part_is_uploaded_though_its_node_runs_on_the_cpu(tmp_path: Path) -> None:
    """GatherBlockQuantized has no DirectML kernel (its inputs are read on the CPU), but its record's parts are
    bound to DEQUANTIZE: they are uploaded; its indices, read only by it, are not."""
    data, scales, zp, bits = gbq_inputs(np.random.default_rng(3), "uint8 4", 64, block=32)
    model, _ = gbq_model(data, scales, zp, bits, 32, 1, 0)
    plan = dmlbridge.plan_model(model)
    assert {k: plan.entries[k].reads_on for k in plan.entries} == {"data": "gpu", "scales": "gpu", "zp": "gpu",
                                                                     "idx": "cpu"}
    assert plan.entries["idx"].buffer == 1 and plan.upload_buffer_count == 1
    assert {plan.entries[k].buffer for k in ("data", "scales", "zp")} == {0}


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(upload="some"), r"upload is \"some\"; it must be \"bound\" or \"all\""),
    (lambda d: d.update(upload="all"), r"buffers\[2\]\.uploaded is false, but upload is \"all\""),
    (lambda d: d["buffers"][2].update(uploaded=1), r"uploaded must be true or false"),
    (lambda d: d["buffers"][2].update(uploaded=True), r"entry 'starts' is read on the CPU but is in buffers\[2\], "
                                                      r"uploaded"),
    (lambda d: [d["buffers"][0].update(uploaded=False), d["buffers"][2].pop("uploaded")],
     r"the buffers not uploaded must all come after the uploaded ones"),
    (lambda d: d["entries"][2]["consumers"][0].update(reads_on="none"),
     r"entry 'starts' is read on the GPU or by nothing but is in buffers\[2\], not uploaded"),
])
def test_a_manifest_whose_upload_marks_disagree_is_refused(tmp_path: Path, edit: Any, message: str) -> None:
    """(One constant a buffer: each buffer after the first is begun as a conversion begins one.)"""
    dmlbridge.convert_model(sliced_model(), tmp_path / "m", progress=False, max_buffer_bytes=256).close()
    doc = json.loads((tmp_path / "m.json").read_text())
    assert [b.get("uploaded", True) for b in doc["buffers"]] == [True, True, False, False]
    edit(doc)
    (tmp_path / "m.json").write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match=message):
        dmlbridge.load_plan(tmp_path / "m.json")


def test_upload_is_checked_and_the_command_line_takes_it(tmp_path: Path) -> None:
    for bad in ("none", None, 1, "ALL"):
        with pytest.raises(InvalidArgumentError, match="upload must be 'bound'"):
            dmlbridge.plan_model(sliced_model(), upload=bad)  # type: ignore[arg-type]
    model = tmp_path / "m.onnx"
    model.write_bytes(sliced_model().SerializeToString())
    text = run_cli("inspect", str(model))
    assert "buffer 1: 264 bytes, 2 tensors (read on the CPU: not uploaded)" in text.stdout
    assert "uploaded: 272 bytes (upload=bound)" in text.stdout.replace("\n  ", " ")
    totals = json.loads(run_cli("inspect", str(model), "--json", "--upload", "all").stdout)["totals"]
    assert totals["buffer_sizes"] == [784] and totals["upload_size"] == 784
    assert run_cli("convert", str(model), "-o", str(tmp_path / "w"), "--upload", "all").returncode == 0
    assert json.loads((tmp_path / "w.json").read_text())["upload"] == "all"
    wrong = run_cli("convert", str(model), "-o", str(tmp_path / "x"), "--upload", "some")
    assert wrong.returncode == 2 and "--upload" in wrong.stderr
