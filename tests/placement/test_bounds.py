"""Amplification: what a small model may make a conversion write, hold or compute is bounded, and every bound is
refused before any file is created, with a message that names the option to raise."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from builders import model_of, sparse
from command_line import one_line_error, run
from onnx import TensorProto, numpy_helper

from dmlbridge import (
    InvalidArgumentError,
    TensorTooLargeError,
    check_conversion,
    convert_model,
    load_plan,
    plan_model,
)
from dmlbridge.model.constants import find_constants
from dmlbridge.onnx.external_data import ExternalDataReader
from dmlbridge.plan.external_files import external_data_bytes


def _sparse_model(dense_elements: int) -> bytes:
    """A model of one sparse initializer: one FLOAT value in a dense tensor of ``dense_elements``."""
    model = model_of(sparse=[sparse("s", np.array([1.0], np.float32), np.array([0], np.int64), [dense_elements])])
    return bytes(model.SerializeToString())


def test_a_small_model_cannot_claim_a_large_image(tmp_path: Path) -> None:
    """A model of a few dozen bytes whose sparse initializer densifies to 80 MiB is over the default
    max_output_bytes (8 times the model's bytes, plus one alignment per constant and 64 MiB); raising the option
    converts it."""
    data = _sparse_model(20 << 20)
    assert len(data) < 200
    with pytest.raises(TensorTooLargeError, match=r"max_output_bytes.*--max-output-bytes"):
        convert_model(data, tmp_path / "w", progress=False)
    assert os.listdir(tmp_path) == []
    plan = convert_model(data, tmp_path / "w", progress=False, max_output_bytes=100 << 20)
    assert plan.total_size == 80 << 20
    with pytest.raises(InvalidArgumentError, match="max_output_bytes"):
        convert_model(data, tmp_path / "x", progress=False, max_output_bytes=-1)


def test_max_tensor_bytes_counts_the_larger_of_the_decoded_and_the_directml_sizes(tmp_path: Path) -> None:
    """FLOAT8 widens to FLOAT16: 1,000 decoded bytes make 2,000 DirectML bytes, and the limit counts those."""
    array = np.linspace(-1, 1, 1000).astype(ml_dtypes.float8_e4m3fn)
    model = model_of({"f8": array})
    with pytest.raises(TensorTooLargeError, match=r"'f8'.*2000 bytes.*max_tensor_bytes=1500"):
        convert_model(model, tmp_path / "w", progress=False, max_tensor_bytes=1500)
    assert os.listdir(tmp_path) == []
    assert convert_model(model, tmp_path / "w", progress=False, max_tensor_bytes=2000).total_size == 2000


def test_keys_are_bounded_so_the_manifest_is(tmp_path: Path) -> None:
    """A key of more than 4,096 characters is refused (keys are written into the manifest, one per constant, so
    the manifest is at most about 76 KiB per constant); so is a manifest over max_manifest_bytes, before any
    file exists."""
    long = model_of({"n" * 5000: np.ones(1, np.float32)})
    for call in (lambda: plan_model(long), lambda: convert_model(long, tmp_path / "w", progress=False)):
        with pytest.raises(InvalidArgumentError, match="key of 5000 characters"):
            call()
    many = model_of({f"w{i}": np.ones(1, np.float32) for i in range(100)})
    with pytest.raises(InvalidArgumentError, match=r"max_manifest_bytes=2000.*--max-manifest-bytes"):
        convert_model(many, tmp_path / "w", progress=False, max_manifest_bytes=2000)
    assert os.listdir(tmp_path) == []
    convert_model(many, tmp_path / "w", progress=False)
    size = (tmp_path / "w.json").stat().st_size
    with pytest.raises(Exception, match="max_manifest_bytes"):
        load_plan(tmp_path / "w.json", max_manifest_bytes=size - 1)
    assert len(load_plan(tmp_path / "w.json", max_manifest_bytes=size).entries) == 100


def test_keys_of_many_constants_sharing_one_name_are_made_in_linear_time() -> None:
    """16,000 constants named alike get w, w#2, ..., w#16000 in one pass (it took 47 s when each repeat searched
    from #2 again)."""
    tensors = [TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1], raw_data=bytes(4)) for _ in range(16000)]
    model = model_of(tensors)
    started = time.perf_counter()
    keys = [c.key for c in find_constants(model)]
    assert time.perf_counter() - started < 5
    assert keys[:3] == ["w", "w#2", "w#3"] and keys[-1] == "w#16000" and len(set(keys)) == 16000


def test_a_plan_reads_no_entry_larger_than_max_tensor_bytes(tmp_path: Path) -> None:
    """An entry claiming more than the limit (16 GiB by default: a crafted manifest over a sparse buffer file can
    claim 32 GiB) is refused before anything is allocated."""
    plan = convert_model(model_of({"w": np.ones(100, np.float32)}), tmp_path / "w", progress=False)
    for read in (plan.read, plan.array, plan.dml_array):
        with pytest.raises(TensorTooLargeError, match=r"'w' holds 400 bytes.*max_tensor_bytes=399"):
            read("w", max_tensor_bytes=399)
    assert plan.array("w", max_tensor_bytes=400).tolist() == [1.0] * 100


def _aliasing_model(folder: Path, count: int, elements: int) -> Path:
    """A model of ``count`` FLOAT initializers of ``elements`` each, all naming the same range of one external
    file (w.bin, of exactly that range), written to ``folder``."""
    (folder / "w.bin").write_bytes(np.arange(elements, dtype=np.float32).tobytes())
    tensors = []
    for i in range(count):
        tensor = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[elements],
                             data_location=TensorProto.EXTERNAL)
        for key, value in (("location", "w.bin" if i % 2 else "./w.bin"), ("offset", "0"),
                           ("length", str(4 * elements))):
            tensor.external_data.add(key=key, value=value)
        tensors.append(tensor)
    path = folder / "m.onnx"
    path.write_bytes(model_of(tensors).SerializeToString())
    return path


def test_external_data_named_many_times_counts_once_in_the_output_bound(tmp_path: Path) -> None:
    """1,100 initializers naming one 64 KiB range of one file (by two spellings) make a 69 MiB image from a 60 KB
    model: the default bound counts the file's bytes once (8 times the model's bytes and 64 KiB, plus one
    alignment per constant and 64 MiB: under 66 MiB) and refuses it before any file is created; counting every
    tensor's bytes, it allowed 550 MiB. An explicit max_output_bytes the range fits but the sum does not is
    refused too."""
    path = _aliasing_model(tmp_path, 1100, 16384)
    assert path.stat().st_size < 100_000
    assert plan_model(path).total_size >= 1100 * 65536
    proto = onnx.load(path, load_external_data=False)
    for model, where in ((path, {}), (path.read_bytes(), {"base_dir": tmp_path}), (proto, {"base_dir": tmp_path})):
        for call in (check_conversion, functools.partial(convert_model, out_prefix=tmp_path / "out", progress=False)):
            with pytest.raises(TensorTooLargeError, match=r"upload image would take \d+ bytes, more than \d+ "
                                                          r"\(8 times the model's bytes \(its external data's"):
                call(model, **where)
    for command in (["inspect", path, "--check"], ["convert", path, "-o", tmp_path / "out"]):
        one_line_error(run(*command), "upload image would take", "--max-output-bytes")
    small = _aliasing_model(tmp_path, 64, 16384)  # 4 MiB of output from one 64 KiB range
    with pytest.raises(TensorTooLargeError, match=r"more than 1048576 \(max_output_bytes\)"):
        convert_model(small, tmp_path / "out", progress=False, max_output_bytes=1 << 20)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "w.bin"]


def test_external_data_bytes_are_the_union_of_the_ranges_of_each_file(tmp_path: Path) -> None:
    """Per file (``a.bin`` and ``./a.bin`` are one), the bytes of the union of the ranges read, at most the
    file's size; a file that cannot be found counts each tensor's bytes."""
    (tmp_path / "a.bin").write_bytes(bytes(1000))
    (tmp_path / "b.bin").write_bytes(bytes(100))

    def external(name: str, location: str, offset: int, size: int) -> TensorProto:
        tensor = numpy_helper.from_array(np.zeros(size, np.uint8), name)
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(offset))):
            tensor.external_data.add(key=key, value=value)
        return tensor

    tensors = [external("x", "a.bin", 0, 400), external("y", "./a.bin", 300, 400),  # 0..700
               external("z", "a.bin", 900, 100), external("x2", "a.bin", 950, 50),  # 900..1000
               external("v", "b.bin", 0, 100), external("v2", "b.bin", 0, 100),  # 0..100
               external("m", "missing.bin", 0, 30), external("m2", "missing.bin", 0, 30)]  # 30 each
    constants = find_constants(model_of(tensors))
    reader = ExternalDataReader(tmp_path)
    assert external_data_bytes(constants, reader) == 700 + 100 + 100 + 60
    assert external_data_bytes(constants, None) == sum(t.dims[0] for t in tensors)  # (no reader: none found)
    reader.close()
