"""The operator table and what it gives each consumer: where ONNX Runtime's DirectML provider reads each input, the
DirectML operator that binds it, and each consumer's own desc over the entry's bytes, worked out here by hand from
DirectML's rules (docs/directml-facts.md, "The operator table"): an element-wise operand at the output's sizes with
strides of 0, Gather's indices and a normalization's scale with leading 1s, a per-axis scale on its axis, every RNN
input at 4 dimensions (sequence_lens as UINT32, none flagged OWNED_BY_DML); the inputs read on the CPU bind nothing;
shapes the model does not declare come from ONNX shape inference; the manifest gives it all back."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from command_line import run
from onnx import TensorProto, helper, numpy_helper

import dmlbridge
from dmlbridge import InvalidArgumentError, LayoutError
from dmlbridge.model.operators import OPERATORS, input_rule, operator_rule

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes: list[Any], inputs: dict[str, tuple[int, list[Any] | None]], constants: dict[str, np.ndarray],
           opset: int = 17, domains: tuple[str, ...] = ()) -> onnx.ModelProto:
    outputs = [helper.make_tensor_value_info(out, F32, None) for node in nodes for out in node.output]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
                              outputs, [numpy_helper.from_array(v, k) for k, v in constants.items()])
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in domains)]
    return helper.make_model(graph, opset_imports=opsets)


def test_the_table_follows_the_opset_of_the_nodes_domain() -> None:
    assert input_rule("", "Clip", 6, 1) is None  # (Clip 6 takes min and max as attributes)
    assert input_rule("", "Clip", 11, 1).reads_on == "cpu"  # type: ignore[union-attr]
    assert input_rule("", "Squeeze", 11, 1) is None and input_rule("", "Squeeze", 13, 1).reads_on == "cpu"  # type: ignore[union-attr]
    assert input_rule("ai.onnx", "Resize", 10, 1).reads_on == "cpu"  # type: ignore[union-attr]
    assert input_rule("", "Resize", 11, 3).reads_on == "cpu"  # type: ignore[union-attr]
    assert operator_rule("", "Add", 6) is None and operator_rule("", "Add", 14) is operator_rule("", "Add", 7)
    assert all(key[1] and key[2] >= 1 for key in OPERATORS)


def test_inputs_read_on_the_cpu_bind_nothing(tmp_path: Path) -> None:
    """A Reshape's shape, a Slice's starts and ends, a Clip's min and max (opset 13): "cpu", no desc, and binding
    one is refused naming plan.array; an Identity's input and a Shape's: "none"."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             helper.make_node("Slice", ["r", "starts", "ends"], ["s"], name="slice"),
             helper.make_node("Clip", ["s", "lo", "hi"], ["c"], name="clip"),
             helper.make_node("Identity", ["w"], ["i"], name="id"),
             helper.make_node("Shape", ["w"], ["sh"], name="shape_of")]
    constants = {"shape": np.array([3, 2], np.int64), "starts": np.array([0], np.int64),
                 "ends": np.array([2**63 - 1], np.int64), "lo": np.array(0, np.float32),
                 "hi": np.array(6, np.float32), "w": np.ones(4, np.float32)}
    model = _model(nodes, {"x": (F32, [2, 3])}, constants, opset=13)
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    for key in ("shape", "starts", "ends", "lo", "hi"):
        entry = plan.entries[key]
        assert entry.reads_on == "cpu", key
        (consumer,) = entry.consumers
        assert (consumer.reads_on, consumer.dml_operator, consumer.desc(), consumer.sizes) == ("cpu", None, None, None)
        with pytest.raises(InvalidArgumentError, match=rf"plan\.array\('{key}'\)"):
            consumer.as_ctypes()
    assert plan.entries["w"].reads_on == "none"
    assert [c.reads_on for c in plan.entries["w"].consumers] == ["none", "none"]
    loaded = dmlbridge.load_plan(tmp_path / "w.json")
    assert loaded == plan and loaded.entries["ends"].reads_on == "cpu"
    assert loaded.entries["ends"].consumers == plan.entries["ends"].consumers


def test_an_element_wise_constant_gets_the_output_sizes_shape_inference_gives() -> None:
    """No value between the nodes is declared: onnx's shape inference gives the Add's output [2, 4, 3, 3] from the
    Conv's rule; the bias [4, 1, 1] is bound there with strides of 0, 36 bytes of its own 16."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv"),
             helper.make_node("Add", ["y", "b"], ["z"], name="add")]
    model = _model(nodes, {"x": (F32, [2, 3, 5, 5])},
                   {"w": np.ones((4, 3, 3, 3), np.float32), "b": np.arange(4, dtype=np.float32).reshape(4, 1, 1)})
    assert not model.graph.value_info
    entry = dmlbridge.plan_model(model).entries["b"]
    (add,) = entry.consumers
    assert (add.dml_operator, add.layout, add.output_sizes) == ("ELEMENT_WISE_ADD", "broadcast", (2, 4, 3, 3))
    assert (add.sizes, add.strides, add.desc()["TotalTensorSizeInBytes"]) == ((2, 4, 3, 3), (0, 1, 0, 0), 16)
    assert (entry.padding, entry.sizes, entry.strides) == ("broadcast", (2, 4, 3, 3), (0, 1, 0, 0))
    four = dmlbridge.plan_model(model, min_dims=5).entries["b"].consumers[0]
    assert (four.sizes, four.strides) == ((1, 2, 4, 3, 3), (4, 0, 1, 0, 0))  # (a new leading dimension: the span)


def test_sizes_no_one_gives_are_a_note_and_a_refusal_to_bind() -> None:
    """The batch is free and nothing fixes it: the Mul's constant keeps its ONNX layout, says what to do, and its
    consumer's desc refuses to be bound as if it were the output's."""
    model = _model([helper.make_node("Mul", ["x", "k"], ["y"], name="mul")], {"x": (F32, ["batch", 3])},
                   {"k": np.ones(3, np.float32)})
    entry = dmlbridge.plan_model(model).entries["k"]
    (mul,) = entry.consumers
    assert mul.output_sizes is None and mul.sizes == (3,) and "broadcast it at run time" in (mul.layout_note or "")
    assert entry.padding == "leading" and entry.layout_note == mul.layout_note
    with pytest.raises(LayoutError, match="ELEMENT_WISE_MULTIPLY wants it at the output's sizes"):
        mul.as_ctypes()


def test_one_constant_read_by_two_operators_binds_at_each_ones_desc() -> None:
    nodes = [helper.make_node("Mul", ["p", "k"], ["p2"], name="mul"),
             helper.make_node("Add", ["q", "k"], ["q2"], name="add")]
    model = _model(nodes, {"p": (F32, [3, 2]), "q": (F32, [2, 2, 2])}, {"k": np.array([2, 3], np.float32)})
    entry = dmlbridge.plan_model(model).entries["k"]
    mul, add = entry.consumers
    assert (mul.sizes, mul.strides, add.sizes, add.strides) == ((3, 2), (0, 1), (2, 2, 2), (0, 0, 1))
    assert entry.padding == "mixed" and (entry.sizes, entry.strides) == ((2,), None)
    assert "bind each consumer's own desc" in (entry.layout_note or "")
    for consumer in (mul, add):  # (the same bytes, offset, type and size: only Sizes and Strides differ)
        desc = consumer.as_ctypes()
        assert (desc.DataType, desc.TotalTensorSizeInBytes, desc.DimensionCount) == \
            (1, 8, len(consumer.sizes or ()))


def test_gather_indices_and_a_normalizations_scale_get_leading_ones() -> None:
    nodes = [helper.make_node("Gather", ["data", "idx"], ["g"], name="gather", axis=1),
             helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["n"], name="ln", axis=-1)]
    model = _model(nodes, {"data": (F32, [5, 3, 4]), "x": (F32, [2, 3, 8])},
                   {"idx": np.array([2, 0, 1], np.int64), "scale": np.ones(8, np.float32),
                    "bias": np.zeros(8, np.float32)})
    plan = dmlbridge.plan_model(model)
    (gather,) = plan.entries["idx"].consumers
    assert (gather.dml_operator, gather.dims, gather.sizes) == ("GATHER", 3, (1, 1, 3))
    for key in ("scale", "bias"):
        (ln,) = plan.entries[key].consumers
        assert (ln.dml_operator, ln.dims, ln.sizes, ln.strides) == ("MEAN_VARIANCE_NORMALIZATION2", 3, (1, 1, 8), None)


def test_a_per_axis_scale_lies_on_its_axis() -> None:
    node = helper.make_node("DequantizeLinear", ["x", "scale", "zero"], ["y"], name="dq", axis=0)
    model = _model([node], {"x": (TensorProto.INT8, [4, 6])},
                   {"scale": np.ones(4, np.float32), "zero": np.zeros(4, np.int8)}, opset=13)
    plan = dmlbridge.plan_model(model)
    for key in ("scale", "zero"):
        (dq,) = plan.entries[key].consumers
        assert (dq.dml_operator, dq.axis, dq.sizes, dq.strides) == ("ELEMENT_WISE_DEQUANTIZE_LINEAR", 0, (4, 6), (1, 0))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_every_input_of_a_recurrent_network_is_four_dimensional(op: str, tmp_path: Path) -> None:
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs, hidden, size, batch = 2, 5, 4, 3
    constants = {"w": np.ones((dirs, gates * hidden, size), np.float32),
                 "r": np.ones((dirs, gates * hidden, hidden), np.float32),
                 "b": np.ones((dirs, 2 * gates * hidden), np.float32), "lengths": np.full(batch, 2, np.int32),
                 "h0": np.zeros((dirs, batch, hidden), np.float32)}
    node = helper.make_node(op, ["x", "w", "r", "b", "lengths", "h0"], ["y"], name="rnn", hidden_size=hidden,
                            direction="bidirectional")
    plan = dmlbridge.convert_model(_model([node], {"x": (F32, [2, batch, size])}, constants), tmp_path / "w",
                                   flags="owned-by-dml", progress=False)
    sizes = {key: plan.entries[key].consumers[0].sizes for key in constants}
    assert sizes == {"w": (1, dirs, gates * hidden, size), "r": (1, dirs, gates * hidden, hidden),
                     "b": (1, 1, dirs, 2 * gates * hidden), "lengths": (1, 1, 1, batch), "h0": (1, dirs, batch, hidden)}
    descs = {key: plan.entries[key].consumers[0].desc() for key in constants}
    assert descs["lengths"]["DataType"] == dmlbridge.DmlDataType.UINT32 == 3  # (bound unsigned; stored INT32)
    assert plan.entries["lengths"].dml_type == dmlbridge.DmlDataType.INT32
    assert {desc["Flags"] for desc in descs.values()} == {0} and plan.entries["w"].flags == 1


def test_a_group_norms_gamma_and_beta_lie_at_its_grouped_sizes(tmp_path: Path) -> None:
    """[C] at [N, C/groups, H·W, groups], strides [0, 1, 0, C/groups] (element (n, j, p, g) is channel g·C/groups
    + j, worked out by hand); NCHW or undeclared sizes keep the ONNX layout, each with its note; the manifest gives
    the groups back, and refuses them where they do not belong."""
    def group_norm(shape: list[Any] | None, **attributes: Any) -> onnx.ModelProto:
        node = helper.make_node("GroupNorm", ["x", "gamma", "beta"], ["y"], name="gn", domain="com.microsoft",
                                groups=4, activation=0, **attributes)
        return _model([node], {"x": (F32, shape)}, {"gamma": np.ones(8, np.float32), "beta": np.zeros(8, np.float32)},
                      domains=("com.microsoft",))

    plan = dmlbridge.convert_model(group_norm([2, 3, 5, 8]), tmp_path / "w", progress=False)
    for key in ("gamma", "beta"):
        (gn,) = plan.entries[key].consumers
        assert (gn.dml_operator, gn.layout, gn.groups, gn.output_sizes, gn.sizes, gn.strides) == \
            ("MEAN_VARIANCE_NORMALIZATION1", "group", 4, (2, 3, 5, 8), (2, 2, 15, 4), (0, 1, 0, 2))
        assert gn.desc()["TotalTensorSizeInBytes"] == 32  # (the last element read: 1 + 3·2 = 7, the 8th)
    loaded = dmlbridge.load_plan(tmp_path / "w.json")
    assert loaded.entries["gamma"].consumers == plan.entries["gamma"].consumers
    (nchw,) = dmlbridge.plan_model(group_norm([2, 8, 3, 5], channels_last=0)).entries["gamma"].consumers
    assert nchw.sizes == (8,) and "NHWC" in (nchw.layout_note or "")
    (free,) = dmlbridge.plan_model(group_norm(["n", 3, 5, 8])).entries["gamma"].consumers
    assert free.sizes == (8,) and "does not declare" in (free.layout_note or "")
    doc = json.loads((tmp_path / "w.json").read_text())
    index = next(i for i, e in enumerate(doc["entries"]) if e["key"] == "gamma")
    consumer = doc["entries"][index]["consumers"][0]
    assert consumer["groups"] == 4 and consumer["output_sizes"] == [2, 3, 5, 8]
    for change, message in [({"groups": None}, "has layout \"group\" with output_sizes but no groups"),
                             ({"layout": "rank", "dims": 4}, "has 'groups', which only a GroupNorm's"),
                             ({"groups": 0}, "outside 1")]:
        changed = json.loads(json.dumps(doc))
        edited = {**consumer, **change}
        changed["entries"][index]["consumers"] = [{k: v for k, v in edited.items() if v is not None}]
        (tmp_path / "w.json").write_text(json.dumps(changed))
        with pytest.raises(dmlbridge.ManifestError, match=message):
            dmlbridge.load_plan(tmp_path / "w.json")


def test_a_rotary_embeddings_caches_and_positions_are_gathered_at_four_dimensions() -> None:
    """cos_cache and sin_cache [max_seq, head/2] as [1, 1, max_seq, head/2], position ids [B, S] as [1, 1, B, S];
    a 1-D position offset keeps its ONNX layout, with a note."""
    def rotary(positions: np.ndarray) -> onnx.ModelProto:
        node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rope",
                                domain="com.microsoft")
        caches = {"cos": np.ones((6, 4), np.float32), "sin": np.ones((6, 4), np.float32)}
        return _model([node], {"x": (F32, [2, 3, 16])}, {"pos": positions, **caches}, domains=("com.microsoft",))

    plan = dmlbridge.plan_model(rotary(np.zeros((2, 3), np.int64)))
    seen = {key: (c.dml_operator, c.dims, c.sizes) for key in ("pos", "cos", "sin")
            for c in plan.entries[key].consumers}
    assert seen == {"pos": ("GATHER", 4, (1, 1, 2, 3)), "cos": ("GATHER", 4, (1, 1, 6, 4)),
                    "sin": ("GATHER", 4, (1, 1, 6, 4))}
    (offset,) = dmlbridge.plan_model(rotary(np.zeros(1, np.int64))).entries["pos"].consumers
    assert offset.sizes == (1,) and "position offset" in (offset.layout_note or "")


def test_an_attentions_weights_and_bias_are_broadcast_to_its_gemm() -> None:
    """Weights [in, 3W] at [B, in, 3W] (strides [0, 3W, 1]) and bias [3W] at [B, S, 3W] (strides [0, 0, 1]), from
    the input [B, S, in]; with unidirectional (or do_rotary, past_present_share_buffer) set, ONNX Runtime's
    DirectML provider leaves the node to the CPU; MultiHeadAttention's bias is bound as it is."""
    def attention(shape: list[Any], **attributes: Any) -> onnx.ModelProto:
        node = helper.make_node("Attention", ["x", "w", "b"], ["y"], name="att", domain="com.microsoft",
                                num_heads=2, **attributes)
        return _model([node], {"x": (F32, shape)}, {"w": np.ones((8, 12), np.float32), "b": np.ones(12, np.float32)},
                      domains=("com.microsoft",))

    plan = dmlbridge.plan_model(attention([2, 3, 8]))
    seen = {key: (c.dml_operator, c.sizes, c.strides) for key in "wb" for c in plan.entries[key].consumers}
    assert seen == {"w": ("GEMM", (2, 8, 12), (0, 12, 1)), "b": ("GEMM", (2, 3, 12), (0, 0, 1))}
    (free,) = dmlbridge.plan_model(attention(["n", 3, 8])).entries["b"].consumers
    assert free.sizes == (12,) and "does not declare" in (free.layout_note or "")
    for name in ("unidirectional", "do_rotary", "past_present_share_buffer"):
        cpu = dmlbridge.plan_model(attention([2, 3, 8], **{name: 1}))
        assert cpu.entries["w"].reads_on == "cpu" and name in (cpu.entries["w"].consumers[0].note or "")
    mha = helper.make_node("MultiHeadAttention", ["q", "k", "v", "b"], ["y"], name="mha", domain="com.microsoft",
                           num_heads=2)
    model = _model([mha], {n: (F32, [2, 3, 4]) for n in "qkv"}, {"b": np.ones(12, np.float32)},
                   domains=("com.microsoft",))
    (bias,) = dmlbridge.plan_model(model).entries["b"].consumers
    assert (bias.dml_operator, bias.layout, bias.layout_note) == ("MULTIHEAD_ATTENTION", None, None)


@pytest.mark.parametrize(("equation", "x", "w", "want"), [
    ("ij,kj->ik", [3, 5], (4, 5), ("gpu", "GEMM", (1, 1, 4, 5))),  # a Linear layer's weight, transposed by GEMM
    ("bij,bjk->bik", [2, 3, 5], (2, 5, 4), ("gpu", "GEMM", (1, 2, 5, 4))),
    ("ij,ij->ij", [3, 5], (3, 5), ("gpu", "ELEMENT_WISE_MULTIPLY", (1, 1, 3, 5))),
    ("j,i->ji", [3], (4,), ("gpu", "GEMM", (1, 1, 1, 4))),  # an outer product's B
    ("i,j->ij", [3], (4,), ("gpu", "GEMM", (4,))),  # ... and its A, [1, 1, i, 1]: not laid out
    ("aibj,ajbk->aibk", [1, 2, 3, 4], (1, 4, 3, 5), ("gpu", "GEMM", (1, 4, 3, 5))),  # strided: not laid out
    ("bij,jk->bik", [2, 3, 5], (5, 4), ("cpu", None, None)),  # no form the provider takes
    ("...ij,jk", [3, 5], (5, 4), ("cpu", None, None)),
])
def test_an_einsum_binds_its_constant_by_its_equations_form(equation: str, x: list[int], w: tuple[int, ...],
                                                             want: tuple[Any, ...]) -> None:
    node = helper.make_node("Einsum", ["w", "x"] if equation.startswith("i,j") else ["x", "w"], ["y"], name="e",
                            equation=equation)
    plan = dmlbridge.plan_model(_model([node], {"x": (F32, x)}, {"w": np.ones(w, np.float32)}))
    (consumer,) = plan.entries["w"].consumers
    assert (consumer.reads_on, consumer.dml_operator, consumer.sizes) == want
    if want[2] == w:
        assert "not laid out" in (consumer.layout_note or "")


def test_a_pows_one_element_exponent_is_read_on_the_cpu() -> None:
    """ELEMENT_WISE_CONSTANT_POW takes a one-element constant exponent as a number (Pow(x, 2) of a decomposed
    LayerNormalization): read on the CPU, not uploaded; an exponent of more elements is bound, broadcast."""
    nodes = [helper.make_node("Pow", ["x", "two"], ["y"], name="square"),
             helper.make_node("Pow", ["x", "each"], ["z"], name="each")]
    plan = dmlbridge.plan_model(_model(nodes, {"x": (F32, [2, 3])}, {"two": np.full((1, 1), 2, np.float32),
                                                                     "each": np.arange(3, dtype=np.float32)}))
    (square,) = plan.entries["two"].consumers
    assert plan.entries["two"].reads_on == "cpu" and "ELEMENT_WISE_CONSTANT_POW" in (square.note or "")
    (each,) = plan.entries["each"].consumers
    assert (each.reads_on, each.dml_operator, each.sizes, each.strides) == ("gpu", "ELEMENT_WISE_POW", (2, 3), (0, 1))


def test_operators_the_provider_does_not_run_or_dmlbridge_does_not_know() -> None:
    nodes = [helper.make_node("DynamicQuantizeLSTM", ["x", "w"], ["y"], name="dq_lstm", domain="com.microsoft"),
             helper.make_node("Custom", ["x", "v"], ["z"], name="custom", domain="com.example"),
             helper.make_node("GatherND", ["u", "nd"], ["t"], name="gather_nd")]
    model = _model(nodes, {"x": (F32, [1, 2]), "u": (F32, [2, 2])},
                   {"w": np.ones(4, np.int8), "v": np.ones(2, np.float32), "nd": np.zeros((1, 2), np.int64)},
                   domains=("com.microsoft", "com.example"))
    plan = dmlbridge.plan_model(model)
    assert plan.entries["w"].reads_on == "cpu" and plan.entries["v"].reads_on == "cpu"
    assert "no kernel" in (plan.entries["v"].consumers[0].note or "")
    nd = plan.entries["nd"]
    assert nd.reads_on == "gpu" and "not laid out" in (nd.layout_note or "")


def test_a_model_onnx_inference_refuses_still_plans() -> None:
    """An Add whose constant does not broadcast to its input: onnx's inference fails on the model, and the plan
    is made all the same, the constant in its ONNX layout with its note."""
    nodes = [helper.make_node("Add", ["x", "k"], ["y"], name="add"),
             helper.make_node("Mul", ["y", "m"], ["z"], name="mul")]
    model = _model(nodes, {"x": (F32, [2, 3])}, {"k": np.ones(4, np.float32), "m": np.ones(3, np.float32)})
    with pytest.raises(onnx.shape_inference.InferenceError):
        onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    plan = dmlbridge.plan_model(model)
    (add,) = plan.entries["k"].consumers
    assert (add.reads_on, add.output_sizes, add.sizes) == ("gpu", None, (4,))
    assert "does not declare" in (add.layout_note or "")


def test_a_format_7_manifest_gives_back_every_consumer_and_its_desc(tmp_path: Path) -> None:
    nodes = [helper.make_node("Gather", ["data", "idx"], ["g"], name="gather", axis=0),
             helper.make_node("Add", ["g", "k"], ["y"], name="add"),
             helper.make_node("Reshape", ["y", "shape"], ["r"], name="reshape")]
    model = _model(nodes, {"data": (F32, [5, 4])},
                   {"idx": np.array([[1, 2]], np.int64), "k": np.ones(4, np.float32),
                    "shape": np.array([-1], np.int64)})
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    loaded = dmlbridge.load_plan(tmp_path / "w.json")
    for key in plan.entries:
        assert loaded.entries[key].consumers == plan.entries[key].consumers, key
    assert loaded.entries["k"].consumers[0].sizes == (1, 2, 4)
    loaded.verify(model)


def test_a_real_models_constants_are_told_apart_by_where_they_are_read() -> None:
    """The CRNN the test extra's captcha-whisperer ships (24 Conv, 80 Gemm, LSTM gates as Add and Mul): every
    constant only Unsqueeze, Split, Slice, Reshape or ConstantOfShape reads (axes, splits, starts, shapes) is read
    on the CPU, and only those; the Gemm, Conv and Gather inputs are bound."""
    spec = importlib.util.find_spec("captcha_whisperer")  # (without importing it: only its model file is read)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("captcha-whisperer (the test extra's real model) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / "captcha_crnn.onnx"
    plan = dmlbridge.plan_model(path)
    on_cpu = {"Unsqueeze", "Split", "Slice", "Reshape", "ConstantOfShape"}
    for key, entry in plan.entries.items():
        places = {c.op_type: c.reads_on for c in entry.consumers}
        assert (entry.reads_on == "cpu") == (bool(places) and set(places) <= on_cpu), (key, places)
        for op, place in places.items():
            assert place == ("cpu" if op in on_cpu else "none" if op == "Identity" else "gpu"), (key, op)
    counts = {place: sum(e.reads_on == place for e in plan.entries.values()) for place in ("gpu", "cpu", "none")}
    assert counts == {"gpu": 107, "cpu": 93, "none": 0}


def _free_batch_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["x", "k"], ["y"], name="mul"),
             helper.make_node("Add", ["y", "b"], ["z"], name="add")]
    return _model(nodes, {"x": (F32, ["batch", 3, 2])},
                  {"k": np.arange(2, dtype=np.float32), "b": np.ones((3, 1), np.float32)})


def test_free_sizes_given_decide_the_descs_and_are_recorded(tmp_path: Path) -> None:
    """A batch the model leaves free: no desc until it is given, by dim_param or by the input's whole shape (as
    ONNX Runtime's free-dimension overrides give it); the manifest records it, and verification uses it."""
    model = _free_batch_model()
    assert dmlbridge.plan_model(model).entries["k"].consumers[0].output_sizes is None
    for given in ({"dim_params": {"batch": 2}}, {"input_shapes": {"x": (2, 3, 2)}}):
        plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False, **given)  # type: ignore[arg-type]
        mul, add = plan.entries["k"].consumers[0], plan.entries["b"].consumers[0]
        assert (mul.sizes, mul.strides, add.sizes, add.strides) == ((2, 3, 2), (0, 0, 1), (2, 3, 2), (0, 1, 0))
        loaded = dmlbridge.load_plan(tmp_path / "w.json")
        assert loaded.shapes == plan.shapes != dmlbridge.plan_model(model).shapes
        assert loaded.entries["k"].consumers == plan.entries["k"].consumers
        loaded.verify(model)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"  # (the caller's model as it was)


@pytest.mark.parametrize(("given", "message"), [
    ({"input_shapes": {"y": (1, 3, 2)}}, r"input_shapes names 'y', which is no graph input of the model \(its "
                                         r"inputs: 'x'\)"),
    ({"input_shapes": {"x": (1, 3)}}, r"input_shapes gives 'x' 2 dimensions, but the model declares 3"),
    ({"input_shapes": {"x": (1, 4, 2)}}, r"input_shapes gives 'x' dimension 1 as 4, but the model declares 3"),
    ({"dim_params": {"sequence": 4}}, r"dim_params names 'sequence', which is no dim_param"),
    ({"dim_params": {"batch": 0}}, r"dim_params\['batch'\] must be sizes from 1 to 2\^32 - 1"),
    ({"dim_params": [("batch", 1)]}, r"dim_params must be a mapping of names to sizes"),
    ({"input_shapes": {"x": "1,3,2"}}, r"input_shapes\['x'\] must be a sequence of sizes"),
])
def test_free_sizes_that_do_not_fit_the_model_are_refused(given: dict[str, Any], message: str,
                                                           tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        dmlbridge.convert_model(_free_batch_model(), tmp_path / "w", progress=False, **given)
    assert list(tmp_path.iterdir()) == []  # (refused before anything is created)


def test_free_sizes_on_the_command_line(tmp_path: Path) -> None:
    onnx.save(_free_batch_model(), tmp_path / "m.onnx")
    done = run("convert", tmp_path / "m.onnx", "-o", tmp_path / "w", "--dim-param", "batch=2", "--quiet")
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "w.json").read_text())
    assert doc["shapes"] == {"input_shapes": {}, "dim_params": {"batch": 2}}
    assert next(e for e in doc["entries"] if e["key"] == "k")["consumers"][0]["output_sizes"] == [2, 3, 2]
    done = run("convert", tmp_path / "m.onnx", "-o", tmp_path / "v", "--input-shape", "x=2,4,2")
    assert done.returncode == 2 and "--input-shape gives 'x' dimension 1 as 4" in done.stderr, done.stderr
    done = run("inspect", tmp_path / "m.onnx", "--input-shape", "x=2,3")
    assert done.returncode == 2 and "--input-shape gives 'x' 2 dimensions" in done.stderr, done.stderr
    assert run("verify", tmp_path / "w.json", tmp_path / "m.onnx").returncode == 0


@pytest.mark.parametrize(("shapes", "message"), [
    ({"input_shapes": {"x": [2, 0, 2]}, "dim_params": {}}, r"shapes: input_shapes\['x'\] must be sizes from 1"),
    ({"input_shapes": {}}, r"shapes lacks the field\(s\) 'dim_params'"),
    ({"input_shapes": {}, "dim_params": {"batch": True}}, r"shapes: dim_params\['batch'\] must be sizes"),
])
def test_a_tampered_shapes_field_is_refused(shapes: dict[str, Any], message: str, tmp_path: Path) -> None:
    dmlbridge.convert_model(_free_batch_model(), tmp_path / "w", progress=False, dim_params={"batch": 2})
    doc = json.loads((tmp_path / "w.json").read_text())
    (tmp_path / "w.json").write_text(json.dumps({**doc, "shapes": shapes}))
    with pytest.raises(dmlbridge.ManifestError, match=message):
        dmlbridge.load_plan(tmp_path / "w.json")


def test_free_sizes_of_no_form_are_a_usage_error(tmp_path: Path) -> None:
    onnx.save(_free_batch_model(), tmp_path / "m.onnx")
    for flag, value in (("--dim-param", "batch"), ("--dim-param", "batch=two"), ("--input-shape", "x=2,y")):
        done = run("convert", tmp_path / "m.onnx", "-o", tmp_path / "w", flag, value)
        assert done.returncode == 2 and f"argument {flag}: {value!r} is not NAME=" in done.stderr, done.stderr
    assert not list(tmp_path.glob("w*"))


def test_inspect_tells_where_the_constants_are_read(tmp_path: Path) -> None:
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             helper.make_node("Add", ["r", "k"], ["y"], name="add")]
    onnx.save(_model(nodes, {"x": (F32, [2, 3])}, {"shape": np.array([3, 2], np.int64), "k": np.ones(2, np.float32)}),
              tmp_path / "m.onnx")
    text = run("inspect", tmp_path / "m.onnx", "--wide")
    assert text.returncode == 0, text.stderr
    assert "read on the GPU: 1 constant (8 bytes); on the CPU (as attributes): 1 constant (16 bytes); by nothing: 0 " \
           "constants (0 bytes); uploaded: 8 bytes (upload=bound)" in text.stdout.splitlines()
    doc = json.loads(run("inspect", tmp_path / "m.onnx", "--json").stdout)
    assert doc["totals"]["reads_on"] == {"gpu": {"constants": 1, "bytes": 8}, "cpu": {"constants": 1, "bytes": 16},
                                         "none": {"constants": 0, "bytes": 0}}
    assert [c["reads_on"] for e in doc["entries"] for c in e["consumers"]] == ["gpu", "cpu"]  # (CPU-read: last)
