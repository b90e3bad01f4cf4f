"""Each constant's consumers, and the channel axis for per-channel inputs when sizes are padded: Conv and
ConvTranspose input 2, BatchNormalization inputs 1-4, InstanceNormalization inputs 1-2 become [1, C, 1, 1]
(DirectML's NCHW) at min_dims 4 and [1, C, 1, 1, 1] at 5; a constant whose consumers disagree keeps leading 1s."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dmlbridge
from dmlbridge import ManifestError, Target
from dmlbridge.consumers import Consumer, find_consumers

C = 3


def vec(name: str, start: float = 0.0) -> TensorProto:
    return numpy_helper.from_array(np.arange(C, dtype=np.float32) + start, name)


def conv_model() -> onnx.ModelProto:
    """Conv with a bias, BatchNormalization, InstanceNormalization; ``shared_mean`` is also an Add input (mixed);
    an If branch reads the outer ``conv_b`` and shadows ``bn_var`` with its own initializer; a node of another
    domain named Conv; a model-local function with a Constant node."""
    inits = [numpy_helper.from_array(np.ones((C, C, 1, 1), np.float32), "conv_w"), vec("conv_b"),
             vec("bn_scale", 1), vec("bn_b"), vec("shared_mean"), vec("bn_var", 1), vec("in_scale", 1), vec("in_b"),
             vec("ms_b"), numpy_helper.from_array(np.array(True), "cond")]
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["conv_b", "bn_var"], ["t"], name="then_add")], "then", [],
        [helper.make_tensor_value_info("t", 1, [C])], [vec("bn_var", 9)])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["conv_b"], ["e"], name="else_id")], "else", [],
        [helper.make_tensor_value_info("e", 1, [C])])
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["y1"], name="conv"),
        helper.make_node("BatchNormalization", ["y1", "bn_scale", "bn_b", "shared_mean", "bn_var"], ["y2"],
                         name="bn"),
        helper.make_node("InstanceNormalization", ["y2", "in_scale", "in_b"], ["y3"]),  # unnamed: its index
        helper.make_node("Add", ["y3", "shared_mean"], ["y4"], name="add"),
        helper.make_node("Conv", ["y4", "conv_w", "ms_b"], ["y5"], name="ms_conv", domain="com.example"),
        helper.make_node("If", ["cond"], ["z"], name="branch", then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Scale2", ["y5"], ["y6"], domain="local"),
    ]
    function = helper.make_function(
        "local", "Scale2", ["a"], ["b"],
        [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.float32(2.0))),
         helper.make_node("Mul", ["a", "k"], ["b"], name="mul")],
        [helper.make_opsetid("", 18)])
    outputs = [helper.make_tensor_value_info("y6", 1, None), helper.make_tensor_value_info("z", 1, None)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1, C, 4, 4])], outputs, inits)
    return helper.make_model(graph, functions=[function],
                             opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1),
                                            helper.make_opsetid("com.example", 1)])


EXPECTED = {
    "conv_w": (Consumer("conv", "Conv", 1), Consumer("ms_conv", "com.example:Conv", 1)),
    "conv_b": (Consumer("conv", "Conv", 2), Consumer("branch/else_branch/else_id", "Identity", 0),  # (attributes
               Consumer("branch/then_branch/then_add", "Add", 0)),  # in the node's order: make_node sorts them)
    "bn_scale": (Consumer("bn", "BatchNormalization", 1),),
    "bn_b": (Consumer("bn", "BatchNormalization", 2),),
    "shared_mean": (Consumer("bn", "BatchNormalization", 3), Consumer("add", "Add", 1)),
    "bn_var": (Consumer("bn", "BatchNormalization", 4),),
    "in_scale": (Consumer("InstanceNormalization_2", "InstanceNormalization", 1),),
    "in_b": (Consumer("InstanceNormalization_2", "InstanceNormalization", 2),),
    "ms_b": (Consumer("ms_conv", "com.example:Conv", 2),),
    "cond": (Consumer("branch", "If", 0),),
    "branch/then_branch/bn_var": (Consumer("branch/then_branch/then_add", "Add", 1),),
    "functions/local/Scale2/k": (Consumer("functions/local/Scale2/mul", "Mul", 1),),
}


def test_consumers_follow_onnx_scoping() -> None:
    """Worked out by hand: outer names seen from subgraphs, a subgraph's initializer shadowing the outer one, a
    function seeing only its own, a node of another domain marked with it."""
    assert find_consumers(conv_model()) == EXPECTED


PADDED = {  # the sizes at min_dims 4, worked out by hand
    "conv_b": (1, 1, 1, C),  # Conv bias, but also read by the If branches: mixed
    "bn_scale": (1, C, 1, 1), "bn_b": (1, C, 1, 1), "bn_var": (1, C, 1, 1),
    "shared_mean": (1, 1, 1, C),  # BatchNormalization mean and an Add input: mixed
    "in_scale": (1, C, 1, 1), "in_b": (1, C, 1, 1),
    "ms_b": (1, 1, 1, C),  # another domain's Conv: not DirectML's per-channel input
    "branch/then_branch/bn_var": (1, 1, 1, C),
}
PADDING = {"conv_b": "mixed", "shared_mean": "mixed", "bn_scale": "channel", "bn_b": "channel",
           "bn_var": "channel", "in_scale": "channel", "in_b": "channel"}


@pytest.mark.parametrize("checked_only", ["", "1"], ids=["fast-paths", "checked-path-only"])
def test_per_channel_inputs_get_the_channel_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 checked_only: str) -> None:
    monkeypatch.setenv("DMLBRIDGE_CHECKED_PATH_ONLY", checked_only)
    model = conv_model()
    plan = dmlbridge.convert_model(model, tmp_path / "w", min_dims=4, progress=False)
    for key, sizes in PADDED.items():
        entry = plan.entries[key]
        assert entry.sizes == sizes and entry.strides is None, key
        assert entry.padding == PADDING.get(key, "leading"), key
        assert entry.consumers == EXPECTED[key]
        start = {"bn_scale": 1, "bn_var": 1, "in_scale": 1, "branch/then_branch/bn_var": 9}.get(key, 0)
        assert plan.array(key).tobytes() == (np.arange(C, dtype=np.float32) + start).tobytes(), key
    five = dmlbridge.plan_model(model, min_dims=5)
    assert five.entries["bn_b"].sizes == (1, C, 1, 1, 1) and five.entries["conv_b"].sizes == (1, 1, 1, 1, C)
    assert dmlbridge.plan_model(model, min_dims=1).entries["bn_b"].sizes == (C,)  # nothing padded
    assert dmlbridge.plan_model(model, target=Target("2.0")).entries["bn_b"].sizes == (1, C, 1, 1)  # the default
    leading = dmlbridge.convert_model(model, tmp_path / "lead", min_dims=1, progress=False, include=["bn_b"])
    assert plan.read("bn_b").tobytes() == leading.read("bn_b").tobytes()  # the same bytes, other Sizes
    loaded = dmlbridge.load_plan(tmp_path / "w.json")
    assert loaded == plan and loaded.entries["bn_b"].padding == "channel"
    loaded.verify(model)
    doc = json.loads((tmp_path / "w.json").read_text())
    bn_b = next(e for e in doc["entries"] if e["key"] == "bn_b")
    assert bn_b["padding"] == "channel" and bn_b["desc"]["Sizes"] == [1, C, 1, 1]
    assert bn_b["consumers"] == [{"node": "bn", "op_type": "BatchNormalization", "input": 2}]


def test_channel_padding_in_the_manifest_is_checked(tmp_path: Path) -> None:
    model = conv_model()
    dmlbridge.convert_model(model, tmp_path / "w", min_dims=4, progress=False)
    manifest = tmp_path / "w.json"
    doc = json.loads(manifest.read_text())
    index = next(i for i, e in enumerate(doc["entries"]) if e["key"] == "bn_b")
    for change, message in [
        ({"padding": "leading"}, r"padding is \"leading\", but a 1-D constant with these consumers at min_dims 4 "
                                 r"is padded \"channel\""),
        ({"consumers": []}, "padding is \"channel\", but"),
        ({"consumers": [{"node": "bn", "op_type": "BatchNormalization"}]}, "lacks the field"),
        ({"desc": {**doc["entries"][index]["desc"], "Sizes": [1, 1, 1, C]}}, "Sizes is"),
    ]:
        changed = json.loads(json.dumps(doc))
        changed["entries"][index].update(change)
        manifest.write_text(json.dumps(changed))
        with pytest.raises(ManifestError, match=message):
            dmlbridge.load_plan(manifest)
    changed = json.loads(json.dumps(doc))  # consistent, but not what the model says: verify tells
    changed["entries"][index]["consumers"] = [{"node": "other", "op_type": "Conv", "input": 2}]
    manifest.write_text(json.dumps(changed))
    with pytest.raises(ManifestError, match="'bn_b': the plan has consumers \\[other \\(Conv input 2\\)\\]"):
        dmlbridge.load_plan(manifest).verify(model)


def test_the_writer_leaves_defaults_out_and_the_reader_takes_them_either_way(tmp_path: Path) -> None:
    model = conv_model()
    plan = dmlbridge.convert_model(model, tmp_path / "w", min_dims=4, progress=False)
    manifest = tmp_path / "w.json"
    doc = json.loads(manifest.read_text())
    plain = next(e for e in doc["entries"] if e["key"] == "functions/local/Scale2/k")  # leading padding
    assert "padding" not in plain and "clamped" not in plain and plain["consumers"]
    unread = numpy_helper.from_array(np.ones(2, np.float32), "unread")
    model.graph.initializer.append(unread)
    doc = json.loads(Path(dmlbridge.convert_model(model, tmp_path / "u", progress=False).manifest_path or "")
                     .read_text())
    entry = next(e for e in doc["entries"] if e["key"] == "unread")
    assert set(entry) == {"key", "origin", "onnx_type", "shape", "conversion", "buffer", "offset", "dml_type", "desc",
                          "skipped"}
    for e in doc["entries"]:  # the defaults written out are read the same
        e.setdefault("padding", "leading")
        e.setdefault("consumers", [])
        e.setdefault("clamped", None)
    (tmp_path / "u.json").write_text(json.dumps(doc))
    assert dmlbridge.load_plan(tmp_path / "u.json").manifest() == json.loads(
        Path(dmlbridge.convert_model(model, tmp_path / "v", progress=False).manifest_path or "").read_text()
    ) | {"conversion_id": doc["conversion_id"], "buffers": doc["buffers"]}
    assert plan.entries["bn_b"].padding == "channel"


def test_a_node_without_an_op_type_gives_a_readable_manifest(tmp_path: Path) -> None:
    """A broken model's node with no op type still names a consumer the manifest can hold ("?")."""
    w = numpy_helper.from_array(np.ones(3, np.float32), "w")
    model = helper.make_model(helper.make_graph([helper.make_node("", ["w"], ["y"], name="n")], "g", [], [], [w]))
    dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    assert dmlbridge.load_plan(tmp_path / "w.json").entries["w"].consumers == (Consumer("n", "?", 0),)
