"""Each constant's consumers, and the channel axis for per-channel inputs: Conv and ConvTranspose input 2,
BatchNormalization inputs 1-4, InstanceNormalization inputs 1-2 become [1, C, 1, 1] (DirectML's NCHW) for a node
of 4 dimensions and [1, C, 1, 1, 1] for one of 5, whatever min_dims is (a floor); a constant whose consumers
disagree keeps leading 1s. Manifests of format 4 followed the older rule (channel padding only when min_dims
pads) and are still read and verified by it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from builders import model_of
from command_line import run
from models import layout_facts, older, per_channel_model
from onnx import TensorProto, helper, numpy_helper

import dmlbridge
from dmlbridge import ManifestError, Target
from dmlbridge.model.consumers import Consumer, find_consumers

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


EXPECTED = {  # (dims: the per-channel inputs' nodes are 4-D: conv_w is [C, C, 1, 1], y1 and y2 declare no rank)
    "conv_w": (Consumer("conv", "Conv", 1, 4), Consumer("ms_conv", "com.example:Conv", 1)),
    "conv_b": (Consumer("conv", "Conv", 2, 4), Consumer("branch/else_branch/else_id", "Identity", 0),  # (attributes
               Consumer("branch/then_branch/then_add", "Add", 0)),  # in the node's order: make_node sorts them)
    "bn_scale": (Consumer("bn", "BatchNormalization", 1, 4),),
    "bn_b": (Consumer("bn", "BatchNormalization", 2, 4),),
    "shared_mean": (Consumer("bn", "BatchNormalization", 3, 4), Consumer("add", "Add", 1)),
    "bn_var": (Consumer("bn", "BatchNormalization", 4, 4),),
    "in_scale": (Consumer("InstanceNormalization_2", "InstanceNormalization", 1, 4),),
    "in_b": (Consumer("InstanceNormalization_2", "InstanceNormalization", 2, 4),),
    "ms_b": (Consumer("ms_conv", "com.example:Conv", 2),),
    "cond": (Consumer("branch", "If", 0),),
    "branch/then_branch/bn_var": (Consumer("branch/then_branch/then_add", "Add", 1),),
    "functions/local/Scale2/k": (Consumer("functions/local/Scale2/mul", "Mul", 1),),
}


def test_consumers_follow_onnx_scoping() -> None:
    """Worked out by hand: outer names seen from subgraphs, a subgraph's initializer shadowing the outer one, a
    function seeing only its own, a node of another domain marked with it."""
    assert {key: layout_facts(read_by) for key, read_by in find_consumers(conv_model()).items()} == EXPECTED


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
        assert layout_facts(entry.consumers) == EXPECTED[key]
        start = {"bn_scale": 1, "bn_var": 1, "in_scale": 1, "branch/then_branch/bn_var": 9}.get(key, 0)
        assert plan.array(key).tobytes() == (np.arange(C, dtype=np.float32) + start).tobytes(), key
    five = dmlbridge.plan_model(model, min_dims=5)
    assert five.entries["bn_b"].sizes == (1, C, 1, 1, 1) and five.entries["conv_b"].sizes == (1, 1, 1, 1, C)
    assert dmlbridge.plan_model(model, min_dims=1).entries["bn_b"].sizes == (1, C, 1, 1)  # its node's 4
    assert dmlbridge.plan_model(model, min_dims=1).entries["conv_b"].sizes == (C,)  # mixed: leading, to min_dims
    assert dmlbridge.plan_model(model, target=Target("2.0")).entries["bn_b"].sizes == (1, C, 1, 1)  # the default
    leading = dmlbridge.convert_model(model, tmp_path / "lead", min_dims=1, progress=False, include=["bn_b"])
    assert plan.read("bn_b").tobytes() == leading.read("bn_b").tobytes()  # the same bytes, other Sizes
    loaded = dmlbridge.load_plan(tmp_path / "w.json")
    assert loaded == plan and loaded.entries["bn_b"].padding == "channel"
    loaded.verify(model)
    doc = json.loads((tmp_path / "w.json").read_text())
    bn_b = next(e for e in doc["entries"] if e["key"] == "bn_b")
    assert bn_b["padding"] == "channel" and bn_b["desc"]["Sizes"] == [1, C, 1, 1]
    assert bn_b["consumers"] == [{"node": "bn", "op_type": "BatchNormalization", "input": 2, "reads_on": "gpu",
                                  "dml_operator": "BATCH_NORMALIZATION", "layout": "channel", "dims": 4}]


def test_channel_padding_in_the_manifest_is_checked(tmp_path: Path) -> None:
    model = conv_model()
    dmlbridge.convert_model(model, tmp_path / "w", min_dims=4, progress=False)
    manifest = tmp_path / "w.json"
    doc = json.loads(manifest.read_text())
    index = next(i for i, e in enumerate(doc["entries"]) if e["key"] == "bn_b")
    bn = {"node": "bn", "op_type": "BatchNormalization", "input": 2, "reads_on": "gpu",
          "dml_operator": "BATCH_NORMALIZATION", "layout": "channel"}
    for change, message in [
        ({"padding": "leading"}, r"padding is \"leading\", but a 1-D constant with these consumers at min_dims 4 "
                                 r"is padded \"channel\" \(format 7\)"),
        ({"consumers": []}, "padding is \"channel\", but"),
        ({"consumers": [{"node": "bn", "op_type": "BatchNormalization"}]}, "lacks the field"),
        ({"consumers": [{"node": "bn", "op_type": "BatchNormalization", "input": 2}]}, "lacks the field.* 'reads_on'"),
        ({"consumers": [bn]}, "lacks the field 'dims'"),
        ({"consumers": [{**bn, "dims": 3}]}, "lacks the field 'dims' or has fewer than 4"),
        ({"consumers": [{**bn, "dims": 9}]}, r"outside 1\.\.8"),
        ({"consumers": [{**bn, "dims": 5}]},
         r"DimensionCount is 4, but FLOAT \[3\] as FLOAT32 \(native, min_dims 4, channel padding\) needs 5"),
        ({"consumers": [{**bn, "op_type": "Add", "dims": 4}]}, "which dmlbridge's operator table does not give"),
        ({"consumers": [{**bn, "reads_on": "cpu", "dims": 4}]}, "is read on cpu and has 'dml_operator'"),
        ({"consumers": [{**bn, "reads_on": "tpu", "dims": 4}]}, "reads_on is \"tpu\", not one of gpu, cpu, none"),
        ({"consumers": [{**bn, "layout": "diagonal", "dims": 4}]}, "layout is \"diagonal\", not one of"),
        ({"consumers": [{**bn, "dml_operator": "batch norm", "dims": 4}]}, "not a DML_OPERATOR_TYPE name"),
        ({"consumers": [{**bn, "dims": 4, "note": ""}]}, "note must be a sentence of 1 to 1024 characters"),
        ({"consumers": [{**bn, "dims": 4, "output_sizes": [3, 0]}]}, r"outside 1\.\."),
        ({"consumers": [{**bn, "dims": 4, "output_sizes": [2**20] * 3}]}, r"output_sizes must be 1 to 8 sizes"),
        ({"consumers": [{**bn, "dims": 4, "output_sizes": [3], "axis": 1}]}, "axis 1 is not an axis of its "
                                                                               "output_sizes"),
        ({"consumers": [{k: v for k, v in bn.items() if k != "layout"} | {"dims": 4}]},
         "has facts of a layout but no 'layout'"),
        ({"desc": {**doc["entries"][index]["desc"], "Sizes": [1, 1, 1, C]}}, "Sizes is"),
    ]:
        changed = json.loads(json.dumps(doc))
        changed["entries"][index].update(change)
        manifest.write_text(json.dumps(changed))
        with pytest.raises(ManifestError, match=message):
            dmlbridge.load_plan(manifest)
    changed = json.loads(json.dumps(doc))  # consistent, but not what the model says: verify tells
    changed["entries"][index]["consumers"] = [{**bn, "node": "other", "op_type": "Conv", "dml_operator": "CONVOLUTION",
                                               "dims": 4}]
    manifest.write_text(json.dumps(changed))
    with pytest.raises(ManifestError, match="'bn_b': the plan has consumers \\[other \\(Conv input 2, 4-D\\)\\]"):
        dmlbridge.load_plan(manifest).verify(model)
    changed = json.loads(json.dumps(doc))  # another count, sizes to match: consistent, but not the model's
    changed["entries"][index]["consumers"][0]["dims"] = 5
    changed["entries"][index]["desc"].update(DimensionCount=5, Sizes=[1, C, 1, 1, 1])
    manifest.write_text(json.dumps(changed))
    with pytest.raises(ManifestError, match=r"'bn_b': the plan has consumers \[bn \(BatchNormalization input 2, "
                                            r"5-D\)\] \(channel padding\), the model \[bn \(BatchNormalization "
                                            r"input 2, 4-D\)\]"):
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
    model = model_of([w], [helper.make_node("", ["w"], ["y"], name="n")])
    dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    assert layout_facts(dmlbridge.load_plan(tmp_path / "w.json").entries["w"].consumers) == (Consumer("n", "?", 0),)


# --- the node's dimension count, whatever min_dims is ---------------------------------------------------------


@pytest.mark.parametrize("checked_only", ["", "1"], ids=["fast-paths", "checked-path-only"])
def test_per_channel_constants_get_their_nodes_dimensions_at_the_default_min_dims(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checked_only: str
) -> None:
    """At the default min_dims (1 from feature level 3.0) a Conv bias is [1, C, 1, 1] for a 4-D weight (and a
    3-D one: a 1-D convolution runs as 2-D), [1, C, 1, 1, 1] for a 5-D weight; normalization parameters as the
    input X is declared. The bytes are the constant's own: only the sizes differ."""
    monkeypatch.setenv("DMLBRIDGE_CHECKED_PATH_ONLY", checked_only)
    model, values, sizes = per_channel_model()
    onnx.save(model, tmp_path / "m.onnx")
    plan = dmlbridge.convert_model(tmp_path / "m.onnx", tmp_path / "w", progress=False)
    assert plan.min_dims == 1
    for key, want in sizes.items():
        entry = plan.entries[key]
        assert (entry.sizes, entry.strides, entry.padding) == (want, None, "channel"), key
        stored = values[key].tobytes()
        assert entry.total_tensor_size_in_bytes == -(-len(stored) // 4) * 4, key  # (whole 4-byte words)
        assert plan.read(key).tobytes() == stored + bytes(-len(stored) % 4), key
    assert layout_facts(plan.entries["b2"].consumers) == (Consumer("conv2d", "Conv", 2, 4),)
    assert layout_facts(plan.entries["b3"].consumers) == (Consumer("conv3d", "Conv", 2, 5),)
    assert layout_facts(plan.entries["b1"].consumers) == (Consumer("conv1d", "Conv", 2, 4),)
    assert layout_facts(plan.entries["bt"].consumers) == (Consumer("deconv", "ConvTranspose", 2, 4),)
    assert layout_facts(plan.entries["bn5_var"].consumers) == (Consumer("bn5", "BatchNormalization", 4, 5),)
    assert layout_facts(plan.entries["in_b"].consumers) == (Consumer("in", "InstanceNormalization", 2, 5),)
    assert plan.entries["w2"].sizes == (4, 3, 3, 3)
    assert layout_facts(plan.entries["w2"].consumers) == (Consumer("conv2d", "Conv", 1, 4),)
    doc = json.loads((tmp_path / "w.json").read_text())
    b3 = next(e for e in doc["entries"] if e["key"] == "b3")
    assert b3["padding"] == "channel" and b3["desc"]["Sizes"] == [1, 2, 1, 1, 1] and b3["desc"]["DimensionCount"] == 5
    assert b3["consumers"] == [{"node": "conv3d", "op_type": "Conv", "input": 2, "reads_on": "gpu",
                                "dml_operator": "CONVOLUTION", "layout": "channel", "dims": 5}]
    loaded = dmlbridge.load_plan(tmp_path / "w.json")
    assert loaded == plan and loaded.format_version == 7
    loaded.verify(tmp_path / "m.onnx")
    below = dmlbridge.plan_model(model, target=Target("2.0"))  # (min_dims 4 there: the same sizes)
    assert {key: below.entries[key].sizes for key in sizes} == sizes


def test_min_dims_stays_a_floor() -> None:
    model, _, _ = per_channel_model()
    five = dmlbridge.plan_model(model, min_dims=5)
    assert five.entries["b2"].sizes == (1, 4, 1, 1, 1) and five.entries["b3"].sizes == (1, 2, 1, 1, 1)
    assert five.entries["bn_b"].sizes == (1, 3, 1, 1, 1) and five.entries["b2"].padding == "channel"
    four = dmlbridge.plan_model(model, min_dims=4)
    assert four.entries["b2"].sizes == (1, 4, 1, 1) and four.entries["b3"].sizes == (1, 2, 1, 1, 1)
    one = dmlbridge.plan_model(model, min_dims=1)
    assert one.entries["b1"].sizes == (1, 5, 1, 1) and one.entries["in_scale"].sizes == (1, 2, 1, 1, 1)
    assert one.entries["w1"].sizes == (5, 3, 1, 3)  # (the weight of a 1-D convolution, run as 2-D)
    assert five.entries["w2"].sizes == (4, 3, 1, 3, 3) and five.entries["w2"].padding == "spatial"


def _shared_model() -> onnx.ModelProto:
    """``both`` is the bias of a 2-D and of a 3-D convolution, ``added`` the bias of a 2-D one and an Add input,
    ``twice`` the bias of two 2-D convolutions."""
    inits = [numpy_helper.from_array(np.ones((C, 2, 3, 3), np.float32), "w4"),
             numpy_helper.from_array(np.ones((C, 2, 3, 3, 3), np.float32), "w5"),
             vec("both"), vec("added", 1), vec("twice", 2)]
    nodes = [helper.make_node("Conv", ["x", "w4", "both"], ["a"], name="c4"),
             helper.make_node("Conv", ["v", "w5", "both"], ["b"], name="c5"),
             helper.make_node("Conv", ["x", "w4", "added"], ["c"], name="c4b"),
             helper.make_node("Add", ["c", "added"], ["d"], name="add"),
             helper.make_node("Conv", ["x", "w4", "twice"], ["e"], name="c4c"),
             helper.make_node("Conv", ["x", "w4", "twice"], ["f"], name="c4d")]
    return model_of(inits, nodes)


def test_consumers_that_disagree_keep_leading_ones() -> None:
    """Per-channel inputs of nodes of 4 and 5 dimensions, or a per-channel input and another: "mixed", leading 1s
    to min_dims (none at the default); two per-channel inputs of one count: "channel"."""
    model = _shared_model()
    plan = dmlbridge.plan_model(model)
    assert layout_facts(plan.entries["both"].consumers) == (Consumer("c4", "Conv", 2, 4), Consumer("c5", "Conv", 2, 5))
    assert layout_facts(plan.entries["added"].consumers) == (Consumer("c4b", "Conv", 2, 4), Consumer("add", "Add", 1))
    expected = {  # min_dims: (both, added, twice)
        None: ((C,), (C,), (1, C, 1, 1)),
        4: ((1, 1, 1, C), (1, 1, 1, C), (1, C, 1, 1)),
        5: ((1, C, 1, 1, 1), (1, 1, 1, 1, C), (1, C, 1, 1, 1)),  # (at 5, both convolutions want [1, C, 1, 1, 1])
    }
    for min_dims, want in expected.items():
        plan = dmlbridge.plan_model(model, min_dims=min_dims)
        assert tuple(plan.entries[key].sizes for key in ("both", "added", "twice")) == want, min_dims
        both = "channel" if min_dims == 5 else "mixed"
        assert [plan.entries[key].padding for key in ("both", "added", "twice")] == [both, "mixed", "channel"]
        assert plan.entries["added"].layout_note.startswith("its consumers want different layouts (Conv input 2: "
                                                            "channel, Add input 1: ")


def test_a_conv_whose_weight_is_not_a_constant_takes_its_rank_from_what_the_model_declares() -> None:
    """The rank of W, else X, else Y, from a graph input, output or value_info (of the node's graph or one around
    it); 4 when none is declared (or only one of more than 8 dimensions)."""
    inits = [vec(name) for name in ("b_none", "b_w", "b_x", "b_y", "b_outer", "b_huge")]
    inits.append(numpy_helper.from_array(np.array(True), "cond"))
    then_branch = helper.make_graph(
        [helper.make_node("Conv", ["x", "w_outer", "b_outer"], ["t"], name="inner")], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("Conv", ["x", "w_in", "b_none"], ["y0"], name="none"),  # W an input without a shape
        helper.make_node("Conv", ["x", "w5_in", "b_w"], ["y1"], name="by_w"),  # W an input of 5 dimensions
        helper.make_node("DequantizeLinear", ["wq", "scale"], ["w_dq"], name="dq"),
        helper.make_node("Conv", ["x5", "w_dq", "b_x"], ["y2"], name="by_x"),  # W computed, X of 5
        helper.make_node("Identity", ["w_in"], ["w_id"], name="id"),
        helper.make_node("Conv", ["x", "w_id", "b_y"], ["y5"], name="by_y"),  # Y declared in value_info
        helper.make_node("Identity", ["w_in"], ["w_outer"], name="id2"),
        helper.make_node("If", ["cond"], ["z"], name="branch", then_branch=then_branch, else_branch=then_branch),
        helper.make_node("Conv", ["x", "w9_in", "b_huge"], ["y9"], name="huge"),  # W of 9: no DirectML rank
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("w_in", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("w5_in", TensorProto.FLOAT, [C, 2, 3, 3, 3]),
         helper.make_tensor_value_info("x5", TensorProto.FLOAT, [1, 2, 4, 4, 4]),
         helper.make_tensor_value_info("w9_in", TensorProto.FLOAT, [C, 2] + [1] * 7),
         helper.make_tensor_value_info("wq", TensorProto.INT8, None),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("y0", "y1", "y2", "y9", "z")],
        inits,
        value_info=[helper.make_tensor_value_info("y5", TensorProto.FLOAT, [1, C, 2, 2, 2]),
                    helper.make_tensor_value_info("w_outer", TensorProto.FLOAT, [C, 2, 1, 1, 1])])
    plan = dmlbridge.plan_model(helper.make_model(graph))
    expected = {"b_none": (1, C, 1, 1), "b_w": (1, C, 1, 1, 1), "b_x": (1, C, 1, 1, 1), "b_y": (1, C, 1, 1, 1),
                "b_outer": (1, C, 1, 1, 1), "b_huge": (1, C, 1, 1)}
    assert {key: plan.entries[key].sizes for key in expected} == expected
    assert layout_facts(plan.entries["b_outer"].consumers) == (Consumer("branch/else_branch/inner", "Conv", 2, 5),
                                                 Consumer("branch/then_branch/inner", "Conv", 2, 5))


def test_a_normalization_of_fewer_or_more_dimensions() -> None:
    """An [N, C] input is run as 4-D: [1, C, 1, 1]; a 6-D input gives 6-D parameters, which a target of at most 5
    dimensions (below feature level 3.0) cannot hold: a layout skip, as any tensor of too many dimensions."""
    inits = [vec(f"{name}_{p}") for name in ("flat", "six") for p in ("scale", "b", "mean", "var")]
    nodes = [helper.make_node("BatchNormalization", ["x2", "flat_scale", "flat_b", "flat_mean", "flat_var"], ["y2"],
                              name="flat"),
             helper.make_node("BatchNormalization", ["x6", "six_scale", "six_b", "six_mean", "six_var"], ["y6"],
                              name="six")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x2", TensorProto.FLOAT, [8, C]),
                                           helper.make_tensor_value_info("x6", TensorProto.FLOAT, [1, C, 2, 2, 2, 2])],
                              [], inits)
    model = helper.make_model(graph)
    plan = dmlbridge.plan_model(model)
    assert plan.entries["flat_b"].sizes == (1, C, 1, 1) and plan.entries["six_b"].sizes == (1, C, 1, 1, 1, 1)
    old = dmlbridge.plan_model(model, target=Target("2.0"))
    assert old.entries["flat_b"].sizes == (1, C, 1, 1)
    assert old.entries["six_b"].skipped == ("a DirectML tensor has 1 to 5 dimensions on this target, got 6 "
                                            "([1, 3, 1, 1, 1, 1])")


# --- manifests of format 4, which padded on the channel axis only when min_dims pads ---------------------------


@pytest.mark.parametrize("min_dims", [None, 4])
def test_a_format_4_manifest_is_read_and_verified_by_its_own_rule(tmp_path: Path, min_dims: int | None) -> None:
    """What the previous release wrote for the same model (format 4: a Conv bias [C] at the default min_dims,
    [1, C, 1, 1] at 4 even for a 3-D convolution, no dims) loads and verifies, also on the command line; claiming
    format 5 it is refused, and the current layout claiming format 4 is too."""
    model, _, _ = per_channel_model()
    onnx.save(model, tmp_path / "m.onnx")
    dmlbridge.convert_model(tmp_path / "m.onnx", tmp_path / "w", min_dims=min_dims, progress=False)
    manifest = tmp_path / "w.json"
    doc = json.loads(manifest.read_text())
    old = older(doc, 4)
    entries = {e["key"]: e for e in old["entries"]}
    if min_dims is None:  # (worked out by hand: format 4 left every 1-D constant as it is at min_dims 1)
        assert entries["b3"]["desc"]["Sizes"] == [2] and "padding" not in entries["b3"]
        assert entries["bn5_b"]["desc"]["Sizes"] == [2] and entries["b1"]["desc"]["DimensionCount"] == 1
    else:
        assert entries["b3"]["desc"]["Sizes"] == [1, 2, 1, 1] and entries["b3"]["padding"] == "channel"
    assert entries["b3"]["consumers"] == [{"node": "conv3d", "op_type": "Conv", "input": 2}]
    manifest.write_text(json.dumps(old))
    plan = dmlbridge.load_plan(manifest)
    assert plan.format_version == 4 and layout_facts(plan.entries["b3"].consumers) == (Consumer("conv3d", "Conv", 2),)
    assert plan.entries["b3"].sizes == ((2,) if min_dims is None else (1, 2, 1, 1))
    assert plan.manifest() == old  # (a plan keeps its format version: its entries follow that version's rules)
    plan.verify(model)
    verified = run("verify", manifest, tmp_path / "m.onnx")
    assert verified.returncode == 0, verified.stderr
    for claim, message in [
        ({**old, "format_version": 5}, r"entries\[\d+\] \('b2'\)\.consumers\[0\] \(Conv input 2\) is a per-channel "
                                       r"input and lacks the field 'dims'"),
        (_with_dims(old, doc), r"\('\w+'\)\.(padding is \"leading\"|desc\.DimensionCount is 4), but"),
        ({**_without(doc, "upload"), "format_version": 4},
         r"\('w2'\)\.consumers\[0\] has unknown field\(s\) 'reads_on', 'dml_operator', 'layout', 'dims'"),
    ]:
        manifest.write_text(json.dumps(claim))
        with pytest.raises(ManifestError, match=message):
            dmlbridge.load_plan(manifest)
    current = {**_without(doc, "upload"), "format_version": 4,
               "entries": [{**e, **({"consumers": [{k: c[k] for k in ("node", "op_type", "input")}
                                                   for c in e["consumers"]]} if "consumers" in e else {})}
                           for e in doc["entries"]]}
    manifest.write_text(json.dumps(current))  # the current layout, claiming the previous format
    refused = r"\('\w+'\)\.(padding is \"(channel|spatial)\"|desc\.DimensionCount is \d), but"
    with pytest.raises(ManifestError, match=refused):
        dmlbridge.load_plan(manifest)


def _with_dims(old: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """The format-4 document ``old`` claiming format 5, its consumers with the dims format 5 gives ``doc`` (the
    current one)."""
    claim = copy.deepcopy(old)
    claim["format_version"] = 5
    for entry, current in zip(claim["entries"], older(doc, 5)["entries"], strict=True):
        if "consumers" in current:
            entry["consumers"] = current["consumers"]
    return claim


def _without(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """A manifest without one top-level field (format 7's, in a document claimed to be older)."""
    return {key: value for key, value in doc.items() if key != name}
