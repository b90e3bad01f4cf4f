"""Case 7: converting a MatMulNBits model (external data) against ``shutil.copyfile`` of its data.

The model is built with ONNX Runtime's own quantizer: one layer of float32 weights quantized to 4 bits
(``MatMulNBitsQuantizer``, blocks of 32, with zero points), its B, scales and zero points written for every
layer of the model (the quantizer needs about 4 times a layer's float32 bytes in memory, so quantizing one layer
and repeating its bytes keeps the build within memory and minutes). It is cached outside the repository,
``$DMLBRIDGE_BENCH_CACHE`` or ``~/.cache/dmlbridge-benchmarks``. At feature level 6.4 every quantized part of it
is a view of the model's own bytes: conversion copies them.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benchmarks.harness import MiB, Row, Settings, Skipped
from benchmarks.model_cases import FSYNC, NO_FSYNC, _ab_runs, _external, _rss_row, _time_row

__all__ = ["matmul_nbits"]


def _cache() -> Path:
    return Path(os.environ.get("DMLBRIDGE_BENCH_CACHE") or Path.home() / ".cache" / "dmlbridge-benchmarks")


def _quantized_layer(k: int, n: int) -> dict[str, np.ndarray]:
    """B, scales and zero points of one [K, N] float32 weight, quantized by ONNX Runtime's quantizer."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (  # (an optional dependency: the bench extra)
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    w = (np.random.default_rng(7).standard_normal((k, n)) * 0.05).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "W"], ["Y"], name="mm")], "g",
                              [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])],
                              [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=False, bits=4)
    quantizer = MatMulNBitsQuantizer(copy.deepcopy(model), algo_config=config)
    quantizer.process()
    made = quantizer.model.model
    (node,) = made.graph.node
    arrays = {t.name: numpy_helper.to_array(t) for t in made.graph.initializer}
    return {"B": arrays[node.input[1]], "scales": arrays[node.input[2]], "zero_points": arrays[node.input[3]]}


def build_matmul_nbits_model(folder: Path, layers: int, k: int, n: int) -> Path:
    """``folder/model.onnx`` of ``layers`` MatMulNBits nodes whose constants are in ``folder/model.data``."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = _quantized_layer(k, n)
    inits, nodes, outputs, offset = [], [], [], 0
    with open(folder / "model.data.tmp", "wb") as f:
        for i in range(layers):
            names = []
            for part, array in parts.items():
                raw = np.ascontiguousarray(array).tobytes()
                tensor = TensorProto(name=f"l{i}.{part}", data_type=helper.np_dtype_to_tensor_dtype(array.dtype),
                                     dims=list(array.shape))
                _external(tensor, "model.data", offset, len(raw))
                f.write(raw + bytes(-len(raw) % 4096))
                offset += len(raw) + (-len(raw) % 4096)
                inits.append(tensor)
                names.append(tensor.name)
            nodes.append(helper.make_node("MatMulNBits", ["A", *names], [f"y{i}"], name=f"layer{i}",
                                          domain="com.microsoft", K=k, N=n, bits=4, block_size=32))
            outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [None, n]))
    graph = helper.make_graph(nodes, "matmulnbits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, k])],
                              outputs, initializer=inits)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    onnx.save(model, folder / "model.onnx")
    os.replace(folder / "model.data.tmp", folder / "model.data")
    return folder / "model.onnx"


def matmul_nbits(settings: Settings) -> list[Row | Skipped]:
    """Case 7: a 1 GiB MatMulNBits model (64 layers of 16 MiB of B; 4 layers of 64 KiB when quick)."""
    try:
        import onnxruntime.quantization.matmul_nbits_quantizer  # noqa: F401  (it needs onnx-ir too)
    except ImportError:
        return [Skipped("7 convert MatMulNBits external", "onnxruntime is not installed (pip install -e '.[bench]')")]
    layers, (k, n) = (64, (4096, 8192)) if not settings.quick else (4, (256, 512))
    folder = _cache() / f"matmulnbits-{layers}x{k}x{n}"
    if not (folder / "model.data").exists():
        build_matmul_nbits_model(folder, layers, k, n)
    work = settings.workdir / "case7"
    work.mkdir(parents=True, exist_ok=True)
    out = work / "out"
    data = folder / "model.data"
    convert: dict[str, Any] = {"kind": "dmlbridge", "model": os.fspath(folder / "model.onnx"), "out": os.fspath(out)}
    jobs = {"shutil.copyfile": {"kind": "copyfile", "src": os.fspath(data), "dst": os.fspath(out) + ".copy"},
            NO_FSYNC: {**convert, "fsync": False}, FSYNC: convert}
    try:
        reports = _ab_runs(jobs, max(1, settings.model_rounds - 4), out, in_process=settings.quick)
        size = data.stat().st_size
        case = "7 convert MatMulNBits external"
        notes = [f"{layers} layers of B uint8 [{n}, {k // 32}, 16] ({k * n // 2 // MiB} MiB each), scales and zero "
                 "points, quantized by ONNX Runtime's MatMulNBitsQuantizer; every quantized part a view of the "
                 "model's own bytes (feature level 6.4)"]
        return [
            _time_row(f"{case} wall time, no fsync", size, reports, NO_FSYNC, {"shutil.copyfile": 1.3}, notes),
            _rss_row(f"{case} peak RSS growth", size, reports, NO_FSYNC, 256.0),
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
