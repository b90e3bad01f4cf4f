"""ONNX's own node-test corpus: every tensor of its test cases' inputs, outputs and models (onnx.backend.test), labelled
by case, for tests/onnx/test_tensor_proto.py. :func:`collect` builds it (a few seconds of onnx running its cases'
code); :func:`write_in_child` has a child process build it into a file that :func:`read` reads back, so that it is
built in the background (tests/helpers/background.py)."""

from __future__ import annotations

import struct
import warnings
from collections.abc import Iterator
from pathlib import Path

import background
import numpy as np
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto, numpy_helper


def _value_tensors(value: object, name: str) -> Iterator[TensorProto]:
    if value is None:
        return
    if isinstance(value, TensorProto):
        yield value
    elif isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        try:
            yield numpy_helper.from_array(array, name)
        except Exception:  # noqa: BLE001 - arrays onnx itself cannot store are not our corpus
            return
    elif isinstance(value, (list, tuple)):  # sequence inputs/outputs
        for i, item in enumerate(value):
            yield from _value_tensors(item, f"{name}[{i}]")
    elif isinstance(value, dict):  # maps
        for key, item in value.items():
            yield from _value_tensors(item, f"{name}[{key!r}]")


def _graph_tensors(graph: GraphProto) -> Iterator[TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        yield from _attribute_tensors(node.attribute)


def _attribute_tensors(attributes) -> Iterator[TensorProto]:
    for attr in attributes:
        if attr.type == AttributeProto.TENSOR:
            yield attr.t
        elif attr.type == AttributeProto.TENSORS:
            yield from attr.tensors
        elif attr.type == AttributeProto.SPARSE_TENSOR:
            yield attr.sparse_tensor.values
            yield attr.sparse_tensor.indices
        elif attr.type == AttributeProto.GRAPH:
            yield from _graph_tensors(attr.g)
        elif attr.type == AttributeProto.GRAPHS:
            for graph in attr.graphs:
                yield from _graph_tensors(graph)


def _model_tensors(model: ModelProto) -> Iterator[TensorProto]:
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            yield from _attribute_tensors(node.attribute)


def collect() -> list[tuple[str, TensorProto]]:
    """(label, tensor) for every tensor of the corpus."""
    from onnx.backend.test.case.node import collect_testcases  # (here: importing it runs much of onnx's test code)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    found: list[tuple[str, TensorProto]] = []
    for case in cases:
        for d, (inputs, outputs) in enumerate(case.data_sets or []):
            for kind, values in (("input", inputs), ("output", outputs)):
                for i, value in enumerate(values):
                    label = f"{case.name}/{d}/{kind}{i}"
                    found.extend((label, t) for t in _value_tensors(value, label))
        if case.model is not None:
            found.extend((f"{case.name}/model", t) for t in _model_tensors(case.model))
    return found


def write(path: Path) -> Path:
    """The corpus into ``path``: each tensor's label and serialized bytes, each preceded by its length."""
    with open(path, "wb") as file:
        for label, tensor in collect():
            name, data = label.encode(), tensor.SerializeToString()
            file.write(struct.pack("<IQ", len(name), len(data)) + name + data)
    return path


def write_in_child(path: Path) -> Path:
    """:func:`write`, by a child process."""
    background.run_in_child(f"import pathlib, onnx_corpus; onnx_corpus.write(pathlib.Path({str(path)!r}))")
    return path


def read(path: Path) -> list[tuple[str, TensorProto]]:
    """The corpus :func:`write` wrote."""
    data, found, at = path.read_bytes(), [], 0
    while at < len(data):
        name_size, size = struct.unpack_from("<IQ", data, at)
        at += 12
        label = data[at : at + name_size].decode()
        found.append((label, TensorProto.FromString(data[at + name_size : at + name_size + size])))
        at += name_size + size
    return found
