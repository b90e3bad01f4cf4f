"""A real model's Conv and Gemm layers on DirectML: the CRNN that the ``captcha-whisperer`` package ships
(``captcha_whisperer/models/captcha_crnn.onnx``, MIT; a ResNet-style encoder of 24 Conv layers and an LSTM unrolled
into 80 Gemm layers, 19 MB; in the test extra), converted whole for the device's own target with every entry
OWNED_BY_DML, uploaded, and every Conv and Gemm layer run as one DirectML operator on its weights as the manifest
gives them, against ONNX Runtime's CPU provider running that layer with the model's own weights on the same
input (within the summation bound: consumer_runs.py).

The model does not declare its Gemms' M (the batch is a dim_param), so their Cs keep their ONNX layout with the
manifest's note saying to broadcast them at run time: they are bound through ``dmlbridge.broadcast_desc``, as the
note says. The Gemms whose C is a value the model computes get it as an input.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import dml_operators as ops
import numpy as np
import onnx
import pytest
from consumer_runs import CONSUMERS, ConsumerRun, magnitude, within
from onnx import TensorProto, helper, numpy_helper

import dmlbridge
import dmlbridge.gpu

PACKAGE = "captcha_whisperer"
MODEL = Path("models") / "captcha_crnn.onnx"


@pytest.fixture(scope="module")
def crnn(device: dmlbridge.gpu.Device, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The model, its conversion for the device and its upload."""
    spec = importlib.util.find_spec(PACKAGE)  # (without importing it: only its model file is read)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("captcha-whisperer (the test extra's real model) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL
    model = onnx.load(str(path))
    plan = dmlbridge.convert_model(path, tmp_path_factory.mktemp("crnn") / "w",
                                   target=dmlbridge.gpu.target_of(device), flags="owned-by-dml", progress=False)
    uploaded = dmlbridge.gpu.upload(plan, device)
    try:
        yield model, plan, uploaded
    finally:
        uploaded.close()
        plan.close()


def _attributes(node: Any) -> dict[str, Any]:
    return {attr.name: helper.get_attribute_value(attr) for attr in node.attribute}


def _layer(node: Any, inputs: dict[str, list[int]], constants: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The layer alone: its node, its activations as graph inputs and the model's own weights."""
    graph = helper.make_graph([node], "layer",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
                              [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(value, name) for name, value in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_every_conv_layer_of_a_real_model(device: dmlbridge.gpu.Device, crnn: Any, tmp_path: Path) -> None:
    model, plan, uploaded = crnn
    weights = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    convs = [node for node in model.graph.node if node.op_type == "Conv"]
    rng = np.random.default_rng(17)
    for index, node in enumerate(convs):
        attrs = _attributes(node)
        w = weights[node.input[1]]
        constants = {node.input[1]: w}
        if len(node.input) > 2 and node.input[2]:
            constants[node.input[2]] = weights[node.input[2]]
        groups = int(attrs.get("group", 1))
        x = rng.standard_normal((1, w.shape[1] * groups, 6, 6)).astype(np.float32)
        layer = _layer(node, {node.input[0]: list(x.shape)}, constants)
        with ConsumerRun(device, tmp_path, layer, {node.input[0]: x}, converted=(plan, uploaded)) as run:
            want = run.expected[node.output[0]]
            xd, wd = run.feed(node.input[0]), run.weight(node.input[1])
            bd = run.weight(node.input[2]) if len(constants) > 1 else run.absent()
            pads = tuple(attrs.get("pads", (0, 0, 0, 0)))
            op = ops.convolution(xd, wd, bd, run.output(want.shape, np.float32),
                                 strides=tuple(attrs.get("strides", (1, 1))),
                                 dilations=tuple(attrs.get("dilations", (1, 1))), start=pads[:2], end=pads[2:],
                                 groups=groups)
            (got,) = run.run(op)
            k = int(np.prod(w.shape[1:])) + (len(constants) > 1)
            assert within(got, want, "sum", k=k, size=magnitude(layer, {node.input[0]: x})[node.output[0]]), \
                (index, node.name)
    assert len(convs) == 24


def test_every_gemm_layer_of_a_real_model(device: dmlbridge.gpu.Device, crnn: Any, tmp_path: Path) -> None:
    model, plan, uploaded = crnn
    weights = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    gemms = [node for node in model.graph.node if node.op_type == "Gemm"]
    rng = np.random.default_rng(19)
    broadcast = 0
    for index, node in enumerate(gemms):
        attrs = _attributes(node)
        assert not attrs.get("transA", 0)
        trans_b = bool(attrs.get("transB", 0))
        b = weights[node.input[1]]
        k, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
        a = (rng.standard_normal((1, k)) * 0.1).astype(np.float32)
        feeds = {node.input[0]: a}
        constants = {node.input[1]: b}
        c_is_weight = node.input[2] in weights
        if c_is_weight:
            constants[node.input[2]] = weights[node.input[2]]
        else:
            feeds[node.input[2]] = rng.standard_normal((1, n)).astype(np.float32)
        layer = _layer(node, {name: list(value.shape) for name, value in feeds.items()}, constants)
        with ConsumerRun(device, tmp_path, layer, feeds, converted=(plan, uploaded)) as run:
            want = run.expected[node.output[0]]
            ad, bd = run.feed(node.input[0]), run.weight(node.input[1])
            if c_is_weight:
                entry = plan.entries[node.input[2]]
                assert entry.sizes == (n,) and "broadcast it at run time" in (entry.layout_note or ""), entry
                cd = run.weight_seen_as(node.input[2], dmlbridge.broadcast_desc(entry, (1, n)))
                broadcast += 1
            else:
                cd = run.feed(node.input[2])
            op = ops.gemm(ad, bd, cd, run.output((1, n), np.float32), trans_b=trans_b,
                          alpha=float(attrs.get("alpha", 1.0)), beta=float(attrs.get("beta", 1.0)))
            (got,) = run.run(op)
            assert within(got, want, "sum", k=k + 1, size=magnitude(layer, feeds)[node.output[0]]), \
                (index, node.name)
    assert len(gemms) == 80 and broadcast == 60


def test_a_real_models_cpu_read_constants_bind_nothing(device: dmlbridge.gpu.Device, crnn: Any) -> None:
    """The constants the CRNN's Unsqueeze, Split, Slice, Reshape and ConstantOfShape nodes read (axes, splits,
    starts, shapes) are read on the CPU: no consumer of theirs has a desc, they are in a buffer file that is not
    uploaded, and the upload refuses to give a binding or a desc, naming plan.array where their values are."""
    _, plan, uploaded = crnn
    on_cpu = [key for key, entry in plan.entries.items() if entry.reads_on == "cpu"]
    for key in on_cpu:
        entry = plan.entries[key]
        assert {c.op_type for c in entry.consumers} <= {"Unsqueeze", "Split", "Slice", "Reshape", "ConstantOfShape"}
        assert all(c.reads_on == "cpu" and c.desc() is None for c in entry.consumers), key
        with pytest.raises(dmlbridge.InvalidArgumentError, match=rf"plan\.array\('{key}'\)"):
            uploaded.buffer_tensor_desc(key, consumer=0)
        with pytest.raises(dmlbridge.InvalidArgumentError, match=rf"plan\.array\('{key}'\)"):
            uploaded.binding(key)  # (its buffer file, after the uploaded ones, is not uploaded)
        assert entry.buffer >= plan.upload_buffer_count and not plan.buffers[entry.buffer].uploaded, key
        assert plan.array(key).size >= 1
        CONSUMERS.cpu_read += 1
    assert len(on_cpu) == 93 and len(uploaded.resources) == plan.upload_buffer_count
    assert {b.key for b in plan.bindings()}.isdisjoint(on_cpu)
