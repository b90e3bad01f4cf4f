"""Bindings on the GPU: a binding keeps its upload (and so its buffer) alive; one of a closed upload, one past the
end of its buffer, or one that no longer fits the desc it binds is refused before any GPU work; and threads
sharing one upload read its values, each read a known answer."""

from __future__ import annotations

import ctypes
import gc
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gpu_runtime import IdentityDesc, identity
from onnx import helper, numpy_helper

import dmlbridge
import dmlbridge.gpu
from dmlbridge.gpu import InputEdge, OutputEdge

VALUES = np.array([1, 2, 3, 4], np.float32)


def _identity_op(tensor: dmlbridge.PreparedTensor) -> tuple[dmlbridge.gpu.DML_OPERATOR_DESC, list[Any]]:
    desc = tensor.as_ctypes_tensor_desc()
    op = IdentityDesc(ctypes.addressof(desc), ctypes.addressof(desc), None)
    return dmlbridge.gpu.DML_OPERATOR_DESC(1, ctypes.addressof(op)), [desc, op]


def _runs(device: dmlbridge.gpu.Device, tensor: dmlbridge.PreparedTensor) -> dict[str, Any]:
    """Each run that takes bindings, as a function of one binding."""
    op, keep = _identity_op(tensor)
    size = tensor.total_tensor_size_in_bytes
    return {
        "run_operator": lambda b: (keep, dmlbridge.gpu.run_operator(device, op, [b], [size])),
        "run_graph": lambda b: dmlbridge.gpu.run_graph(device, [op], [InputEdge(0, 0, 0)], [],
                                                       [OutputEdge(0, 0, 0)], [b], [size]),
        # (refused before the compiled operator is looked at: no operator is at this address)
        "run_compiled": lambda b: dmlbridge.gpu.run_compiled(device, 0x10, [b], [size]),
    }


def test_a_binding_keeps_its_upload_alive(device: dmlbridge.gpu.Device) -> None:
    x = dmlbridge.prepare(VALUES)
    upload = dmlbridge.gpu.upload_tensors([x], device)
    alive = weakref.ref(upload)
    binding = upload.binding(0)
    del upload
    gc.collect()
    assert alive() is not None and binding.upload is alive()
    # (another upload, of other values, where the dropped one's buffer would be reused were it freed)
    with dmlbridge.gpu.upload_tensors([dmlbridge.prepare(np.full(4, 7, np.float32))], device) as other:
        assert dmlbridge.decode(identity(device, x, binding), "FLOAT32", [4]).tolist() == [1, 2, 3, 4]
        assert other.read(0).tolist() == [7, 7, 7, 7]
    bound = dmlbridge.gpu.upload_tensors([x], device).binding_desc(0)  # (the desc keeps its binding, and so on)
    gc.collect()
    assert not bound.buffer_binding.upload.closed
    bound.buffer_binding.upload.close()


def test_a_binding_of_a_closed_upload_is_refused(device: dmlbridge.gpu.Device) -> None:
    x = dmlbridge.prepare(VALUES)
    with dmlbridge.gpu.upload_tensors([x], device) as upload:
        binding = upload.binding(0)
    for name, run in _runs(device, x).items():
        with pytest.raises(dmlbridge.InvalidArgumentError, match=r"inputs\[0\] is a binding of an upload that "
                                                                 "was closed"):
            run(binding)
        assert device.removed_reason() == ("", 0), name


def test_a_binding_past_its_buffer_is_refused_before_any_gpu_work(device: dmlbridge.gpu.Device) -> None:
    x = dmlbridge.prepare(VALUES)
    with dmlbridge.gpu.upload_tensors([x], device) as upload:
        assert upload.size == 16
        given = upload.binding(0)
        given.Offset = 16  # (one 16-byte slot past the end of its 16-byte buffer)
        plain = dmlbridge.DML_BUFFER_BINDING(upload.resource(0), 16, 16)  # (a binding of the caller's own)
        for name, run in _runs(device, x).items():
            for binding in (given, plain):
                with pytest.raises(dmlbridge.InvalidArgumentError, match=r"inputs\[0\] binds bytes 16 to 32 of a "
                                                                         "resource of 16 bytes: past its end"):
                    run(binding)
            assert device.removed_reason() == ("", 0), name
        assert dmlbridge.decode(identity(device, x, upload.binding(0)), "FLOAT32", [4]).tolist() == [1, 2, 3, 4]


def test_a_binding_that_no_longer_fits_its_desc_is_refused(device: dmlbridge.gpu.Device) -> None:
    x = dmlbridge.prepare(VALUES, guaranteed_base_offset_alignment=256)
    with dmlbridge.gpu.upload_tensors([x, x], device) as upload:
        assert upload.offsets == (0, 256)
        short, moved = upload.binding(1), upload.binding(1)
        short.SizeInBytes = 8
        moved.Offset = 32  # (a multiple of 16, not of the desc's 256)
        run = _runs(device, x)["run_operator"]
        for binding in (short, moved):
            with pytest.raises(dmlbridge.InvalidArgumentError, match=r"GuaranteedBaseOffsetAlignment \(256\).*"
                                                                     r"TotalTensorSizeInBytes \(16\)"):
                run(binding)


def test_threads_reading_one_upload_each_read_its_values(device: dmlbridge.gpu.Device, tmp_path: Path) -> None:
    arrays = {f"w{i}": np.arange(i * 64, (i + 1) * 64, dtype=np.float32).reshape(8, 8) * (i + 1) for i in range(4)}
    model = helper.make_model(helper.make_graph(
        [], "g", [], [], [numpy_helper.from_array(a, k) for k, a in arrays.items()]))
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    reads = 8
    start = threading.Barrier(len(arrays))
    results: dict[str, list[Any]] = {key: [] for key in arrays}
    with plan, dmlbridge.gpu.upload(plan, device, staging_bytes=512) as uploaded:

        def read(key: str) -> None:
            start.wait()
            for _ in range(reads):
                try:
                    results[key].append(uploaded.read(key))
                except Exception as exc:  # noqa: BLE001 (reported by the main thread's asserts)
                    results[key].append(exc)

        threads = [threading.Thread(target=read, args=(key,)) for key in arrays]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for key, got in results.items():
            want = plan.array(key)
            assert np.array_equal(want, arrays[key])
            assert len(got) == reads and all(isinstance(r, np.ndarray) and np.array_equal(r, want) for r in got), (
                key, [r if isinstance(r, Exception) else r.ravel()[:4] for r in got])
