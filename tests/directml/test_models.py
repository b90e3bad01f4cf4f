"""Whole models, converted and read back by DirectML entry by entry from their buffer files: the golden models,
a model of every type and place, a multi-buffer image bound from several Direct3D 12 buffers, the
consumer-aware layouts of Conv and BatchNormalization parameters, and the layouts for the other consumers (a
convolution's weight, a Gemm's C and a MatMul's B broadcast with strides of 0, a Gather's data). Every value is
held to what onnx decodes from the model (a walk of the model written here), never to dmlbridge's own reading."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from bindings_format import encode, parse
from dml_runtime import DirectML
from models import build_model, consumer_layout_model
from onnx import TensorProto, helper, numpy_helper
from oracle import compare, expected_output, merged, through_desc

import dmlbridge
from dmlbridge import Target

GOLDEN = Path(__file__).resolve().parents[1] / "helpers" / "golden"
NO_64 = {t.name for t in dmlbridge.DmlDataType if t.name != "UNKNOWN"} - {"INT64", "UINT64", "FLOAT64"}


def _dense(sparse: Any) -> np.ndarray:
    values, indices = numpy_helper.to_array(sparse.values), numpy_helper.to_array(sparse.indices)
    dense = np.zeros(tuple(sparse.dims), values.dtype)
    if indices.ndim == 1:
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


def _constant(node: Any) -> np.ndarray | None:
    attribute = node.attribute[0]
    value = helper.get_attribute_value(attribute)
    if attribute.name == "value":
        return numpy_helper.to_array(value)
    if attribute.name == "sparse_value":
        return _dense(value)
    if attribute.name in ("value_float", "value_floats"):
        return np.array(value, np.float32)
    if attribute.name in ("value_int", "value_ints"):
        return np.array(value, np.int64)
    return None  # (strings)


def model_values(model: Any) -> dict[str, np.ndarray]:
    """Every constant of ``model`` by key, as onnx decodes it: initializers, sparse initializers, Constant nodes,
    subgraphs (keyed by the path of their enclosing nodes) and model-local functions."""
    found: dict[str, np.ndarray] = {}

    def walk(graph: Any, prefix: str) -> None:
        for tensor in graph.initializer:
            found[prefix + tensor.name] = numpy_helper.to_array(tensor)
        for sparse in graph.sparse_initializer:
            found[prefix + sparse.values.name] = _dense(sparse)
        nodes(graph.node, prefix)

    def nodes(items: Any, prefix: str) -> None:
        for node in items:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                value = _constant(node)
                if value is not None:
                    found[prefix + node.output[0]] = value
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    walk(attribute.g, f"{prefix}{node.name}/{attribute.name}/")

    walk(model.graph, "")
    for function in model.functions:
        nodes(function.node, f"functions/{function.domain}/{function.name}/")
    return found


def conv_model() -> tuple[Any, dict[str, np.ndarray]]:
    """A Conv with its bias and a BatchNormalization with its four parameters: per-channel inputs all."""
    rng = np.random.default_rng(3)
    arrays = {"W": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "B": rng.standard_normal(4).astype(np.float32),
              "scale": rng.random(4).astype(np.float32), "bias": rng.standard_normal(4).astype(np.float32),
              "mean": rng.standard_normal(4).astype(np.float32), "var": (rng.random(4) + 0.5).astype(np.float32)}
    graph = helper.make_graph(
        [helper.make_node("Conv", ["X", "W", "B"], ["C"], name="conv"),
         helper.make_node("BatchNormalization", ["C", "scale", "bias", "mean", "var"], ["Y"], name="bn")],
        "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4, 6, 6])],
        [numpy_helper.from_array(a, k) for k, a in arrays.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), arrays


def cpu_read_model() -> Any:
    """x [2, 3] + c [3] (bound broadcast), a Reshape's shape and a Slice's starts and ends (read on the CPU: in a
    buffer file that is not uploaded), and y (undeclared) * c (a consumer whose sizes are undecided)."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["s"], name="add"),
         helper.make_node("Reshape", ["s", "shape"], ["r"], name="reshape"),
         helper.make_node("Slice", ["r", "starts", "ends"], ["z"], name="slice"),
         helper.make_node("Mul", ["y", "c"], ["m"], name="mul")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
              helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [],
        [numpy_helper.from_array(np.array([1.5, -2, 3], np.float32), "c"),
         numpy_helper.from_array(np.array([3, 2], np.int64), "shape"),
         numpy_helper.from_array(np.array([0], np.int64), "starts"),
         numpy_helper.from_array(np.array([2**63 - 1], np.int64), "ends")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


# (name, target, keywords): every kind of target, min_dims 4, and a small max_buffer_bytes (several buffers).
CONVERSIONS = [
    ("6.4", Target(), {}),
    ("6.2", Target("6.2"), {}),
    ("min_dims=4", Target(), {"min_dims": 4}),
    ("no-64-bit", Target(supported=NO_64, allow_lossy=True), {}),
    ("buffers of 1 KiB", Target(), {"max_buffer_bytes": 1024, "alignment": 16}),
    ("2.0", Target("2.0", allow_lossy=True), {"min_dims": 4}),
]


@pytest.fixture(scope="module")
def converted(directml: DirectML, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Any]:
    folder = tmp_path_factory.mktemp("models")
    made = tmp_path_factory.mktemp("made")
    path, every_expected = build_model(made)
    models: dict[str, tuple[Any, dict[str, np.ndarray]]] = {
        "demo": (GOLDEN / "demo" / "sample.onnx", {}),
        "every-type": (GOLDEN / "every_type" / "model.onnx", {}),
        "small": (GOLDEN / "small" / "model.onnx", {}),
        "every-place": (path, every_expected),
        "conv": conv_model(),
        "layouts": (consumer_layout_model(), {}),
        "cpu-read": (cpu_read_model(), {}),
    }
    lists, plans = {}, {}
    for model_name, (model, given) in models.items():
        loaded = onnx.load(str(model)) if isinstance(model, Path) else model
        values = {**model_values(loaded), **given}
        for name, target, keywords in CONVERSIONS:
            case = f"{model_name}@{name}"
            try:
                plan = dmlbridge.convert_model(model, folder / case.replace(" ", "_").replace("@", "-at-"),
                                               target=target, progress=False, **keywords)
            except dmlbridge.DmlBridgeError as exc:  # (a model a target cannot take: the golden tests pin which)
                assert name in ("no-64-bit", "2.0", "buffers of 1 KiB"), (case, exc)
                continue
            lists[case] = dmlbridge.binding_list(plan)
            plans[case] = (plan, values)
            plan.close()
    run = directml.run(merged(lists), directory=folder)
    return plans, run


def test_every_entry_of_every_model_reads_back_as_the_model_holds_it(converted: tuple) -> None:
    plans, run = converted
    problems, compared = [], 0
    for case, (plan, values) in plans.items():
        for entry in plan.converted:
            if entry.key.rsplit("/", 1)[0] in plan.quantized:  # (derived for a quantized record: group 4)
                continue
            assert entry.key in values, f"{case}: no value known for {entry.key!r} ({entry.origin})"
            if entry.reads_on == "cpu":  # (bound nowhere: an operator attribute)
                assert encode(f"{case}:{entry.key}") in run.on_cpu, (case, entry.key)
                continue
            result = run.results[encode(f"{case}:{entry.key}")]
            repeated = entry.sizes if entry.padding == "broadcast" else None  # (strides of 0: DirectML repeats)
            verdict = compare(result, expected_output(values[entry.key], entry.dml_type.name, repeated), "3 models",
                              f"{case}:{entry.key}")
            compared += verdict.compared
            problems += verdict.mismatched
    assert not problems, "\n".join(problems[:20])
    assert compared > 300
    cpu_read = {encode(case) for case in plans if case.startswith("cpu-read")}
    assert {name.split(":")[0] for name in run.on_cpu} == cpu_read and len(cpu_read) >= 5


def test_every_consumer_desc_reads_its_tensors_bytes_as_numpy_strides_them(converted: tuple) -> None:
    """Each consumer line: DirectML takes the desc its operator binds (a broadcast with strides of 0, a Gather's
    indices at the output's rank, ...) over its tensor's bytes and reads what numpy reads through the same sizes
    and strides, from the buffer file."""
    plans, run = converted
    problems, compared, undecided = [], 0, 0
    for case, (plan, _) in plans.items():
        listed = parse(dmlbridge.binding_list(plan))
        for consumer in listed.consumers:
            name = encode(f"{case}:{consumer.key}") + f"#{consumer.index}"
            if consumer.desc is None:
                assert name in run.undecided, name
                undecided += 1
                continue
            raw = Path(plan.buffers[consumer.buffer].path).read_bytes()[consumer.offset :]
            expected = expected_output(through_desc(raw[: consumer.desc.total], consumer.desc),
                                       consumer.desc.data_type)
            verdict = compare(run.results[name], expected, "5 consumer descs", name)
            compared += verdict.compared
            problems += verdict.mismatched
    assert not problems, "\n".join(problems[:20])
    assert compared > 50 and undecided > 0


def test_a_multi_buffer_image_is_bound_from_several_buffers(converted: tuple) -> None:
    plans, run = converted
    plan, _ = plans["every-place@buffers of 1 KiB"]
    assert len(plan.buffers) >= 3
    used = {entry.buffer for entry in plan.converted}
    assert used == set(range(len(plan.buffers)))
    assert all(run.results[encode(f"every-place@buffers of 1 KiB:{e.key}")].ok for e in plan.converted)


@pytest.mark.parametrize("conversion", ["6.4", "min_dims=4", "2.0"])
def test_conv_and_batchnorm_parameters_take_the_channel_axis(converted: tuple, conversion: str) -> None:
    # [1, C, 1, 1], what DirectML's convolution and normalization operators take, whatever min_dims is.
    plans, run = converted
    plan, values = plans[f"conv@{conversion}"]
    for key in ("B", "scale", "bias", "mean", "var"):
        entry = plan.entries[key]
        assert entry.sizes == (1, 4, 1, 1) and entry.padding == "channel", key
        result = run.results[encode(f"conv@{conversion}:{key}")]
        assert not compare(result, expected_output(values[key], "FLOAT32"), None, key).mismatched
    assert plan.entries["W"].sizes == (4, 3, 3, 3)


@pytest.mark.parametrize("conversion", ["6.4", "min_dims=4", "2.0"])
def test_the_layouts_for_their_consumers_read_as_numpy_broadcasts_them(converted: tuple, conversion: str) -> None:
    """A 1-D convolution's weight [M, C/g, 1, k], a Gemm's C and a MatMul's B broadcast with strides of 0, a
    Gather's data at the output's rank: DirectML takes each desc and reads the model's values, the repeats too."""
    plans, run = converted
    plan, values = plans[f"layouts@{conversion}"]
    assert plan.entries["W1"].sizes == (6, 2, 1, 3) and 0 in (plan.entries["GC"].strides or ())
    layouts = {entry.padding for entry in plan.converted}
    assert {"spatial", "broadcast"} <= layouts
    for entry in plan.converted:
        repeated = entry.sizes if entry.padding == "broadcast" else None
        result = run.results[encode(f"layouts@{conversion}:{entry.key}")]
        expected = expected_output(values[entry.key], entry.dml_type.name, repeated)
        assert not compare(result, expected, None, entry.key).mismatched, entry.key
    gc = plan.entries["GC"]
    assert run.results[encode(f"layouts@{conversion}:GC")].values().size == 15  # ([3, 5] read from 5 elements)
    assert gc.total_tensor_size_in_bytes == 20
