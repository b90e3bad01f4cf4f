"""Uploads read back from the GPU: every entry of multi-buffer conversions of every type equals ``plan.array`` and
the model's own values, its bytes the independent reference encoder's; every quantized part equals its bytes in
the buffer file; prepared tensors come back as they went; and an upload allocates no more than its bounded upload
heap, whatever the conversion's size."""

from __future__ import annotations

import ctypes
import json
import os
import tracemalloc
from pathlib import Path
from typing import Any

import budget
import numpy as np
import onnx
import pytest
import reference
from gpu_runtime import TALLY
from models import TYPED, build_model, consumer_layout_model, ref_target, same_values
from onnx import helper, numpy_helper

import dmlbridge
import dmlbridge.gpu
from dmlbridge.cli.demo import build_sample_model

TARGETS = {
    "6.4": dmlbridge.Target(),
    # no 64-bit types, no 4-bit types: INT64 emulated, INT4 widened, DOUBLE skipped, quantized records of
    # ELEMENT_WISE_DEQUANTIZE_LINEAR
    "6.2 without 64-bit": dmlbridge.Target("6.2", supported={"FLOAT32", "FLOAT16", "UINT32", "INT32", "UINT16",
                                                              "INT16", "UINT8", "INT8"}),
}


def _check_binding(uploaded: dmlbridge.gpu.UploadedPlan, key: Any, buffer: int, offset: int,
                   desc: dmlbridge.BufferTensorDesc) -> None:
    binding = uploaded.binding(key)
    assert (binding.Buffer, binding.Offset, binding.SizeInBytes) == (
        uploaded.resource(buffer), offset, desc.total_tensor_size_in_bytes), key
    bound = uploaded.binding_desc(key)
    assert (bound.Type, bound.Desc) == (1, ctypes.addressof(bound.buffer_binding))  # DML_BINDING_TYPE_BUFFER
    assert bytes(bound.buffer_binding) == bytes(binding)
    struct = uploaded.buffer_tensor_desc(key)
    assert (struct.DataType, struct.TotalTensorSizeInBytes, list(struct.Sizes[: struct.DimensionCount])) == (
        desc.data_type, desc.total_tensor_size_in_bytes, list(desc.sizes)), key


def _needs_target(device: dmlbridge.gpu.Device, target: dmlbridge.Target) -> None:
    """Skip where the device lacks a type of ``target``: upload refuses a plan converted for a richer target."""
    missing = sorted(t.name for t in target.types - device.types)
    if missing:
        pytest.skip(f"this device reports no {', '.join(missing)} (DIRECTML_FP16=1 turns the 16-bit types on here)")


@pytest.mark.parametrize("target_name", list(TARGETS))
def test_every_entry_of_every_type_reads_back_from_the_gpu(device: dmlbridge.gpu.Device, tmp_path: Path,
                                                           target_name: str) -> None:
    target = TARGETS[target_name]
    _needs_target(device, target)
    model_path, expected = build_model(tmp_path)
    plan = dmlbridge.convert_model(model_path, tmp_path / "w", target=target, progress=False, max_buffer_bytes=1024)
    ref = ref_target(target)
    # (an upload heap of two 256-byte halves: each buffer file takes several chunks, alternating between them)
    with plan, dmlbridge.gpu.upload(plan, device, staging_bytes=512) as uploaded:
        assert uploaded.staging_bytes == 512
        assert len(plan.buffers) >= 5 and len(uploaded.resources) == len(plan.buffers)
        converted = plan.converted
        assert {e.dml_type.name for e in converted} >= {"FLOAT32", "UINT8", "INT8", "INT32", "FLOAT16", "UINT16"}
        for entry in converted:
            values = uploaded.read(entry.key)
            data = uploaded.read_bytes(entry.key).tobytes()
            want = expected[entry.key]
            ok = (same_values(values, plan.array(entry.key)) and values.dtype == want.dtype
                  and values.shape == want.shape and same_values(values, want)
                  # the bytes the per-element reference encoder gives, independently of dmlbridge
                  and data == reference.prepare(want, target=ref, min_dims=len(entry.sizes))["data"])
            TALLY.entries += 1
            TALLY.mismatches += not ok
            assert ok, (entry.key, values, want)
            _check_binding(uploaded, entry.key, entry.buffer, entry.offset, entry.buffer_desc)
        skipped = next(e.key for e in plan.skipped)
        with pytest.raises(dmlbridge.InvalidArgumentError, match="skipped"):
            uploaded.binding(skipped)
        with pytest.raises(dmlbridge.InvalidArgumentError, match="no such entry"):
            uploaded.read("no such key")


def test_entries_laid_out_for_their_consumers_read_back_as_their_onnx_values(device: dmlbridge.gpu.Device,
                                                                              tmp_path: Path) -> None:
    """Conv weights at the convolution's rank, Gemm Cs broadcast with strides of 0, MatMul Bs and Gather data at
    their consumer's rank: each is bound through its own desc, reads back as its ONNX values (``plan.array``), and
    its bytes decoded through that desc are what DirectML sees (``plan.dml_array``)."""
    plan = dmlbridge.convert_model(consumer_layout_model(), tmp_path / "w", progress=False, max_buffer_bytes=4096)
    with plan, dmlbridge.gpu.upload(plan, device, staging_bytes=1024) as uploaded:
        paddings = {e.padding for e in plan.converted}
        assert {"broadcast", "rank", "spatial"} <= paddings, paddings
        for entry in plan.converted:
            desc = entry.buffer_desc
            seen = dmlbridge.decode(uploaded.read_bytes(entry.key), desc.data_type, desc.sizes, desc.strides)
            ok = same_values(uploaded.read(entry.key), plan.array(entry.key)) \
                and same_values(seen, plan.dml_array(entry.key))
            TALLY.entries += 1
            TALLY.mismatches += not ok
            assert ok, entry.key
            _check_binding(uploaded, entry.key, entry.buffer, entry.offset, desc)


def _file_bytes(directory: Path, doc: dict[str, Any], buffer: int, offset: int, size: int) -> bytes:
    with open(directory / doc["buffers"][buffer]["file"], "rb") as f:
        f.seek(offset)
        return f.read(size)


@pytest.mark.parametrize("target_name", list(TARGETS))
def test_every_quantized_part_reads_back_from_the_gpu(device: dmlbridge.gpu.Device, tmp_path: Path,
                                                      target_name: str) -> None:
    """The sample's MatMulNBits, blocked DequantizeLinear and GatherBlockQuantized weights, each part of each form
    read back through its own desc: the bytes of the buffer file, and their values element by element."""
    model = build_sample_model(tmp_path)
    target = dmlbridge.Target(target_name.split()[0])  # (the sample's INT64 needs 64-bit types)
    _needs_target(device, target)
    plan = dmlbridge.convert_model(model, tmp_path / "w", target=target, progress=False,
                                   max_buffer_bytes=16384)
    doc = json.loads((tmp_path / "w.json").read_text())
    with plan, dmlbridge.gpu.upload(plan, device) as uploaded:
        assert len(plan.buffers) >= 3
        forms_seen = set()
        for record_key, record in plan.quantized.items():
            forms = {"split": record.parts()}
            if record.operator == "DEQUANTIZE" and record.granularity == "block" \
                    and record.axis == len(record.shape) - 1:
                forms["blocked"] = record.blocked_form()
            for form, parts in forms.items():
                forms_seen.add((form, record.operator))
                for role, part in zip(("weight", "scales", "zero_points"), parts, strict=True):
                    key = (record_key, form, role)
                    desc = part.buffer_desc
                    data = uploaded.read_bytes(key).tobytes()
                    file = _file_bytes(tmp_path, doc, part.buffer, part.offset, desc.total_tensor_size_in_bytes)
                    values = uploaded.read(key)
                    bits = reference.decode(file, desc.data_type, desc.sizes, desc.strides)
                    width = dmlbridge.DmlDataType(desc.data_type).bitwidth
                    got = [int(v) & ((1 << width) - 1) for v in
                           (values.view(f"u{values.itemsize}") if width >= 8 else values.astype(np.int64)).ravel()]
                    ok = data == file and got == bits
                    TALLY.parts += 1
                    TALLY.mismatches += not ok
                    assert ok, key
                    _check_binding(uploaded, key, part.buffer, part.offset, desc)
        assert len(plan.quantized) == 3
        with pytest.raises(dmlbridge.InvalidArgumentError, match="form is 'blocked' or 'split'"):
            uploaded.binding(("qmatmul", "packed", "weight"))
        with pytest.raises(dmlbridge.InvalidArgumentError, match="no quantized weight"):
            uploaded.binding(("nothing", "split", "weight"))
        with pytest.raises(dmlbridge.InvalidArgumentError, match="record, form, role"):
            uploaded.binding(("qmatmul", "split"))
    operators = {operator for _, operator in forms_seen}
    assert operators == ({"DEQUANTIZE"} if target_name == "6.4" else {"ELEMENT_WISE_DEQUANTIZE_LINEAR"})


def test_the_buffers_of_constants_read_on_the_cpu_are_not_uploaded(device: dmlbridge.gpu.Device,
                                                                   tmp_path: Path) -> None:
    """upload="bound": a Reshape's shape is in a buffer file after the uploaded one, which is not uploaded; the
    uploaded buffer's indices are unchanged, and the shape has no binding (its values come from plan.array)."""
    shape = numpy_helper.from_array(np.array([3, 2], np.int64), "shape")
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32) + 0.5, "w")
    graph = helper.make_graph([helper.make_node("Reshape", ["w", "shape"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [shape, w])
    plan = dmlbridge.convert_model(helper.make_model(graph), tmp_path / "w", progress=False)
    with plan, dmlbridge.gpu.upload(plan, device) as uploaded:
        assert [b.uploaded for b in plan.buffers] == [True, False] and len(uploaded.resources) == 1
        got = uploaded.read("w")
        TALLY.entries += 1
        TALLY.mismatches += not np.array_equal(got, np.arange(6, dtype=np.float32).reshape(6) + 0.5)
        assert got.tolist() == [0.5, 1.5, 2.5, 3.5, 4.5, 5.5] and uploaded.binding("w").Offset == 0
        for call in (uploaded.binding, uploaded.read, uploaded.buffer_tensor_desc):
            with pytest.raises(dmlbridge.InvalidArgumentError, match=r"read on the CPU .*plan\.array\('shape'\)"):
                call("shape")
        assert plan.array("shape").tolist() == [3, 2]


@pytest.mark.parametrize("min_dims", [1, 4])
def test_prepared_tensors_come_back_as_they_went(device: dmlbridge.gpu.Device, min_dims: int) -> None:
    arrays = list(TYPED.values())
    tensors = [dmlbridge.prepare(a, min_dims=min_dims) for a in arrays
               if dmlbridge.dml_type_for(reference.onnx_type_name(a.dtype)) is not None]
    with dmlbridge.gpu.upload_tensors(tensors, device) as uploaded:
        assert all(offset % 256 == 0 for offset in uploaded.offsets)
        assert all(b > a for a, b in zip(uploaded.offsets, uploaded.offsets[1:], strict=False))
        for index, tensor in enumerate(tensors):
            values = uploaded.read(index)
            ok = (uploaded.read_bytes(index).tobytes() == tensor.data.tobytes()
                  and same_values(values, tensor.to_numpy()) and values.dtype == tensor.to_numpy().dtype)
            TALLY.tensors += 1
            TALLY.mismatches += not ok
            assert ok, index
            binding = uploaded.binding(index)
            assert (binding.Buffer, binding.Offset, binding.SizeInBytes) == (
                uploaded.resource(), uploaded.offsets[index], tensor.total_tensor_size_in_bytes)
        with pytest.raises(dmlbridge.InvalidArgumentError, match="tensor's index"):
            uploaded.read(len(tensors))
    with dmlbridge.gpu.upload_tensors(tensors[:3], device, alignment=16) as packed:
        assert all(offset % 16 == 0 for offset in packed.offsets) and packed.offsets[1] < 256
        assert all(same_values(packed.read(i), t.to_numpy()) for i, t in enumerate(tensors[:3]))


def test_bad_upload_arguments_are_refused(device: dmlbridge.gpu.Device, tmp_path: Path) -> None:
    t = dmlbridge.prepare(np.ones(2, np.float32))
    for bad, match in (([], "non-empty"), ([np.ones(2)], "PreparedTensor"), ("t", "non-empty")):
        with pytest.raises(dmlbridge.InvalidArgumentError, match=match):
            dmlbridge.gpu.upload_tensors(bad, device)  # type: ignore[arg-type]
    with pytest.raises(dmlbridge.InvalidArgumentError, match="multiple of 16"):
        dmlbridge.gpu.upload_tensors([t], device, alignment=8)
    with pytest.raises(dmlbridge.InvalidArgumentError, match="staging_bytes"):
        dmlbridge.gpu.upload_tensors([t], device, staging_bytes=100)
    model = helper.make_model(helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.ones(3, np.float32),
                                                                                          "w")]))
    with pytest.raises(dmlbridge.InvalidArgumentError, match="not written"):
        dmlbridge.gpu.upload(dmlbridge.plan_model(model), device)
    with pytest.raises(dmlbridge.InvalidArgumentError, match="UploadPlan"):
        dmlbridge.gpu.upload("w.json", device)  # type: ignore[arg-type]
    with dmlbridge.gpu.upload_tensors([t], device) as uploaded:
        with pytest.raises(dmlbridge.TensorTooLargeError, match="max_tensor_bytes=4"):
            uploaded.read(0, max_tensor_bytes=4)
    with pytest.raises(dmlbridge.InvalidArgumentError, match="closed"):
        uploaded.read(0)


# --- memory ---------------------------------------------------------------------------------------------------

BUDGET = 256 << 20  # what dmlbridge may allocate while a conversion of any size uploads (its upload heap included)


def _large_model(directory: Path, tensors: int, elements: int) -> Path:
    """A model of ``tensors`` float32 initializers of ``elements`` each in one external data file, written a
    tensor at a time (values: the element's index, plus the tensor's number, so that each position is known)."""
    data = directory / "large.data"
    inits = []
    with open(data, "wb") as f:
        for t in range(tensors):
            offset = f.tell()
            for start in range(0, elements, 1 << 22):
                f.write((np.arange(start, min(elements, start + (1 << 22)), dtype=np.float32) + t).tobytes())
            tensor = onnx.TensorProto(name=f"w{t}", data_type=onnx.TensorProto.FLOAT, dims=[elements],
                                      data_location=onnx.TensorProto.EXTERNAL)
            for field, value in (("location", "large.data"), ("offset", offset), ("length", elements * 4)):
                tensor.external_data.add(key=field, value=str(value))
            inits.append(tensor)
    path = directory / "large.onnx"
    onnx.save(helper.make_model(helper.make_graph([], "g", [], [], inits)), path)
    return path


def _upload_within_budget(device: dmlbridge.gpu.Device, prefix: Path, staging_bytes: int,
                          bound: int) -> tuple[int, int]:
    """Upload a conversion under tracemalloc; (Python's peak during the upload, the upload heap's size)."""
    with dmlbridge.load_plan(str(prefix) + ".json") as plan:
        tracemalloc.start()
        try:
            uploaded = dmlbridge.gpu.upload(plan, device, staging_bytes=staging_bytes)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        with uploaded:
            TALLY.uploads.append(f"{sum(b.size for b in plan.buffers) / 2**20:.0f} MiB in {len(plan.buffers)} "
                                 f"buffer files uploaded with a Python peak of {peak / 2**10:.0f} KiB through a "
                                 f"{uploaded.staging_bytes / 2**10:.0f} KiB upload heap")
            assert peak + uploaded.staging_bytes <= bound, (peak, uploaded.staging_bytes)
            for entry in plan.converted if bound < BUDGET else plan.converted[-1:]:
                ok = (uploaded.read_bytes(entry.key, max_tensor_bytes=1 << 40).tobytes()
                      == plan.read(entry.key, max_tensor_bytes=1 << 40).tobytes())
                TALLY.entries += 1
                TALLY.mismatches += not ok
                assert ok, entry.key
            return peak, uploaded.staging_bytes


def test_an_upload_allocates_only_its_bounded_upload_heap(device: dmlbridge.gpu.Device, tmp_path: Path) -> None:
    """A 4 MiB conversion (1 MiB tensors, two buffer files) through a 64 KiB upload heap: Python's peak stays under
    256 KiB, so nothing grew with a tensor or a file; and by default the heap is at most 64 MiB."""
    path = _large_model(tmp_path, 4, 1 << 18)
    dmlbridge.convert_model(path, tmp_path / "w", progress=False, max_buffer_bytes=2 << 20).close()
    peak, heap = _upload_within_budget(device, tmp_path / "w", 64 << 10, (64 << 10) + (256 << 10))
    assert heap == 64 << 10 and peak < 256 << 10
    with dmlbridge.load_plan(tmp_path / "w.json") as plan, dmlbridge.gpu.upload(plan, device) as uploaded:
        assert uploaded.staging_bytes <= dmlbridge.gpu.DEFAULT_STAGING_BYTES == 64 << 20
        assert uploaded.read("w3")[-3:].tolist() == [(1 << 18) + 0.0, (1 << 18) + 1.0, (1 << 18) + 2.0]


def test_a_5_gib_conversion_uploads_within_256_mib(device: dmlbridge.gpu.Device, tmp_path: Path) -> None:
    """Ten 512 MiB tensors in three buffer files of at most 2 GiB, uploaded through the default 64 MiB heap: what
    dmlbridge allocates (the heap and Python's peak) stays within 256 MiB. (On a software device the default-heap
    buffers are process memory, so the process' size is not the measure.)"""
    if not budget.LONG:
        pytest.skip("DMLBRIDGE_LONG=1 runs the 5 GiB upload")
    path = _large_model(tmp_path, 10, 1 << 27)
    dmlbridge.convert_model(path, tmp_path / "w", progress=False).close()
    os.remove(tmp_path / "large.data")  # (the disk holds the conversion, not both)
    peak, heap = _upload_within_budget(device, tmp_path / "w", dmlbridge.gpu.DEFAULT_STAGING_BYTES, BUDGET)
    assert heap <= 64 << 20 and peak + heap <= BUDGET
