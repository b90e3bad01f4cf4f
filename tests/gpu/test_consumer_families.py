"""Each consumer bound at its own desc as the plan gives it (``entry.consumers[i].as_ctypes()``), for the operator
families whose constants DirectML refuses in their ONNX layout: element-wise operands broadcast at the output's
sizes (ADD, SUBTRACT with the constant first, MAX, DIVIDE, ELEMENT_WISE_IF, PARAMETERIZED_RELU), Gather's indices
at the output's dimension count, LayerNormalization's and SimplifiedLayerNormalization's scale and bias at the
input's dimension count (MEAN_VARIANCE_NORMALIZATION2), SkipLayerNormalization as ONNX Runtime runs it (its skip
and bias broadcast to two ELEMENT_WISE_ADDs, then the normalization; one graph), DequantizeLinear's per-axis scale
and zero point at the input's sizes, a bidirectional GRU's, RNN's and LSTM's every input (4-D, the lengths as
UINT32, the LSTM's peepholes too), a Slice's data (SLICE1), a constant joined by Concat (JOIN), QLinearConv's
scalars at 4-D and per-channel scale, zero point and bias on the channel (QUANTIZED_LINEAR_CONVOLUTION), and
QLinearMatMul's B at the batch with its scales at A's dimension count (QUANTIZED_LINEAR_MATRIX_MULTIPLY),
GroupNorm's gamma and beta at its grouped sizes (MEAN_VARIANCE_NORMALIZATION1) and RotaryEmbedding's caches at 4
dimensions (GATHER).
Each computes what ONNX Runtime's CPU provider computes on the same inputs, and each family has a control bound
at another entry's offset, which must mismatch (a run that computes nothing would pass neither)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dml_operators as ops
import numpy as np
import onnx
import pytest
from consumer_runs import CONSUMERS, ConsumerRun, created, onnx_runtime, within
from onnx import TensorProto, helper, numpy_helper

import dmlbridge
import dmlbridge.gpu
from dmlbridge.gpu import InputEdge, IntermediateEdge, OutputEdge

F32 = TensorProto.FLOAT


def one_node(node: Any, inputs: dict[str, tuple[int, list[int]]], output: tuple[int, list[int] | None],
             constants: dict[str, np.ndarray], opset: int = 17, extra_outputs: tuple[str, ...] = ()) -> onnx.ModelProto:
    """A model of one node, its graph inputs declared, its constants first a spare one (``pad``: an earlier
    entry the controls bind at)."""
    initializers = [numpy_helper.from_array(np.arange(64, dtype=np.float32) + 0.5, "pad")]
    initializers += [numpy_helper.from_array(value, name) for name, value in constants.items()]
    outputs = [helper.make_tensor_value_info("y", output[0], output[1])]
    outputs += [helper.make_tensor_value_info(name, F32, None) for name in extra_outputs]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
                              outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


# --- element-wise operands --------------------------------------------------------------------------------------

ELEMENT_WISE = {  # name: (ONNX op, DML operator, x shape, constant shape, the constant's input)
    "add-per-channel": ("Add", "ELEMENT_WISE_ADD", (2, 3, 4, 5), (3, 1, 1), 1),
    "sub-scalar-first": ("Sub", "ELEMENT_WISE_SUBTRACT", (2, 3, 4), (), 0),
    "max-row": ("Max", "ELEMENT_WISE_MAX", (3, 5), (5,), 1),
    "div-4d": ("Div", "ELEMENT_WISE_DIVIDE", (1, 4, 2, 3), (1, 4, 1, 1), 1),
    "add-scalar": ("Add", "ELEMENT_WISE_ADD", (2, 3, 4), (), 1),
    "sub-scalar-second": ("Sub", "ELEMENT_WISE_SUBTRACT", (2, 3, 4), (), 1),
    "sub-row-first": ("Sub", "ELEMENT_WISE_SUBTRACT", (2, 3, 4), (4,), 0),
    "add-one-4": ("Add", "ELEMENT_WISE_ADD", (2, 3, 4), (1,), 1),
}


@pytest.mark.parametrize("name", list(ELEMENT_WISE))
def test_an_element_wise_constant_is_taken_at_the_output_sizes(device: dmlbridge.gpu.Device, tmp_path: Path,
                                                               name: str) -> None:
    op, dml, x_shape, c_shape, position = ELEMENT_WISE[name]
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(x_shape).astype(np.float32)
    c = (rng.random(c_shape) + 0.5).astype(np.float32)
    inputs = ["x", "c"] if position == 1 else ["c", "x"]
    model = one_node(helper.make_node(op, inputs, ["y"], name="n"), {"x": (F32, list(x_shape))}, (F32, None),
                     {"c": c})
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want = run.expected["y"]
        consumer = run.plan.entries["c"].consumers[0]
        assert (consumer.reads_on, consumer.dml_operator, consumer.sizes) == ("gpu", dml, x_shape)
        results = []
        for at in (None, "pad"):
            run.reset()  # (the inputs are asked for in the operator's order: A, then B)
            if position == 1:
                a, b = run.feed("x"), run.consumer("c", at=at)
            else:
                a, b = run.consumer("c", at=at), run.feed("x")
            (got,) = run.run(ops.element_wise(dml, a, b, run.output(x_shape, np.float32)))
            # (one IEEE operation: exact, but for a division, which DirectML may make a multiplication)
            results.append(within(got, want, "sum", k=1, size=np.abs(want), control=at is not None)
                           if op == "Div" else within(got, want, "exact", control=at is not None))
        assert results == [True, False], name


def test_where_and_prelu_take_their_constants_at_the_output_sizes(device: dmlbridge.gpu.Device,
                                                                 tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    slope = (rng.random((3, 1)) + 0.1).astype(np.float32)
    model = one_node(helper.make_node("PRelu", ["x", "slope"], ["y"], name="p"), {"x": (F32, [2, 3, 4])},
                     (F32, None), {"slope": slope})
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want = run.expected["y"]
        assert run.plan.entries["slope"].consumers[0].strides == (0, 1, 0)
        desc = run.uploaded.buffer_tensor_desc("slope", consumer=0)  # (the upload gives each consumer's desc too)
        assert (list(desc.Sizes[: desc.DimensionCount]), list(desc.Strides[: desc.DimensionCount])) == \
            ([2, 3, 4], [0, 1, 0])
        with pytest.raises(dmlbridge.InvalidArgumentError, match="consumer is the index"):
            run.uploaded.buffer_tensor_desc("slope", consumer=1)
        results = []
        for at in (None, "pad"):
            run.reset()
            xd, sd = run.feed("x"), run.consumer("slope", at=at)
            (got,) = run.run(ops.parameterized_relu(xd, sd, run.output((2, 3, 4), np.float32)))
            results.append(within(got, want, "exact", control=at is not None))
        assert results == [True, False]
    other = rng.standard_normal((4,)).astype(np.float32)
    model = one_node(helper.make_node("Where", ["cond", "x", "other"], ["y"], name="w"),
                     {"cond": (TensorProto.BOOL, [2, 3, 4]), "x": (F32, [2, 3, 4])}, (F32, None), {"other": other})
    cond = rng.random((2, 3, 4)) < 0.5
    (tmp_path / "where").mkdir()
    with ConsumerRun(device, tmp_path / "where", model, {"cond": cond, "x": x}) as run:
        want = run.expected["y"]
        results = []
        for at in (None, "pad"):
            run.reset()
            cd, xd, od = run.feed("cond"), run.feed("x"), run.consumer("other", at=at)
            (got,) = run.run(ops.if_(cd, xd, od, run.output((2, 3, 4), np.float32)))
            results.append(within(got, want, "exact", control=at is not None))
        assert results == [True, False]


# --- Gather's indices -------------------------------------------------------------------------------------------

def test_gather_takes_constant_indices_at_the_output_dimension_count(device: dmlbridge.gpu.Device,
                                                                     tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    data = rng.standard_normal((5, 3, 4)).astype(np.float32)
    model = one_node(helper.make_node("Gather", ["data", "idx"], ["y"], name="g", axis=1),
                     {"data": (F32, [5, 3, 4])}, (F32, None), {"idx": np.array([2, 0, 1], np.int64)})
    with ConsumerRun(device, tmp_path, model, {"data": data}) as run:
        want = run.expected["y"]  # [5, 3, 4]
        assert run.plan.entries["idx"].consumers[0].sizes == (1, 1, 3)
        results = []
        for at in (None, "pad"):
            run.reset()
            dd, xd = run.feed("data"), run.consumer("idx", at=at)
            (got,) = run.run(ops.gather(dd, xd, run.output(want.shape, np.float32), axis=1, index_dimensions=1))
            results.append(within(got, want, "exact", control=at is not None))
        assert results == [True, False]


# --- LayerNormalization -----------------------------------------------------------------------------------------

def test_layer_normalization_takes_its_scale_and_bias_at_the_input_dimension_count(device: dmlbridge.gpu.Device,
                                                                                   tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    scale, bias = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    model = one_node(helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], name="ln", axis=-1,
                                      epsilon=1e-5), {"x": (F32, [2, 3, 8])}, (F32, None),
                     {"scale": scale, "bias": bias})
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want = run.expected["y"]
        for key in ("scale", "bias"):
            consumer = run.plan.entries[key].consumers[0]
            assert (consumer.dml_operator, consumer.sizes, consumer.strides) == \
                ("MEAN_VARIANCE_NORMALIZATION2", (1, 1, 8), None), key
        results = []
        for at in (None, "pad"):
            run.reset()
            xd, sd, bd = run.feed("x"), run.consumer("scale", at=at), run.consumer("bias")
            (got,) = run.run(ops.mean_variance_normalization2(xd, sd, bd, run.output((2, 3, 8), np.float32),
                                                             axes=(2,), epsilon=1e-5))
            # (x - mean) / sqrt(var + eps) * scale + bias: a few roundings of terms of at most this size
            size = np.abs(want) + np.abs(bias) + 4 * np.abs(scale)
            results.append(within(got, want, "sum", k=16, size=size, control=at is not None))
        assert results == [True, False]


# --- DequantizeLinear per axis ----------------------------------------------------------------------------------

def test_dequantize_linear_takes_a_per_axis_scale_on_its_axis(device: dmlbridge.gpu.Device,
                                                              tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    x = rng.integers(-128, 128, (4, 6)).astype(np.int8)
    scale = (rng.random(4) + 0.25).astype(np.float32)
    zero = rng.integers(-5, 6, 4).astype(np.int8)
    model = one_node(helper.make_node("DequantizeLinear", ["x", "scale", "zero"], ["y"], name="dq", axis=0),
                     {"x": (TensorProto.INT8, [4, 6])}, (F32, None), {"scale": scale, "zero": zero}, opset=13)
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want = run.expected["y"]
        for key in ("scale", "zero"):
            consumer = run.plan.entries[key].consumers[0]
            assert (consumer.sizes, consumer.strides) == ((4, 6), (1, 0)), key
        results = []
        for at in (None, "pad"):
            run.reset()
            xd, sd, zd = run.feed("x"), run.consumer("scale", at=at), run.consumer("zero")
            (got,) = run.run(ops.dequantize_linear(xd, sd, zd, run.output((4, 6), np.float32)))
            results.append(within(got, want, "exact", control=at is not None))
        assert results == [True, False]


# --- GRU and RNN ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("op", "gates"), [("GRU", 3), ("RNN", 1)])
def test_a_bidirectional_gru_and_rnn_take_every_constant_input_in_four_dimensions(
        op: str, gates: int, device: dmlbridge.gpu.Device, tmp_path: Path) -> None:
    rng = np.random.default_rng(17 + gates)
    seq, batch, size, hidden, dirs = 3, 2, 4, 5, 2
    x = rng.standard_normal((seq, batch, size)).astype(np.float32)
    consts = {"w": (rng.standard_normal((dirs, gates * hidden, size)) / 2).astype(np.float32),
              "r": (rng.standard_normal((dirs, gates * hidden, hidden)) / 2).astype(np.float32),
              "b": (rng.standard_normal((dirs, 2 * gates * hidden)) / 4).astype(np.float32),
              "lengths": np.array([3, 2], np.int32),
              "h0": rng.standard_normal((dirs, batch, hidden)).astype(np.float32)}
    node = helper.make_node(op, ["x", "w", "r", "b", "lengths", "h0"], ["y", "y_h"], name=op.lower(),
                            hidden_size=hidden, direction="bidirectional")
    model = one_node(node, {"x": (F32, [seq, batch, size])}, (F32, None), consts, opset=14, extra_outputs=("y_h",))
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want, want_h = run.expected["y"], run.expected["y_h"]
        sizes = {key: run.plan.entries[key].consumers[0].sizes for key in consts}
        assert sizes == {"w": (1, dirs, gates * hidden, size), "r": (1, dirs, gates * hidden, hidden),
                         "b": (1, 1, dirs, 2 * gates * hidden), "lengths": (1, 1, 1, batch),
                         "h0": (1, dirs, batch, hidden)}
        assert run.plan.entries["lengths"].consumers[0].desc()["DataType"] == dmlbridge.DmlDataType.UINT32
        # (GRU and RNN take no input flagged OWNED_BY_DML, which the conversion asked for: each is bound when it runs)
        assert {run.plan.entries[key].consumers[0].desc()["Flags"] for key in sizes} == {0}
        assert run.plan.entries["w"].desc()["Flags"] == 1
        results = []
        for at in (None, "pad"):
            run.reset()
            xd = run.feed("x", (1, seq, batch, size))
            wd, rd = run.consumer("w"), run.consumer("r", at=at)
            bd, hd, ld = run.consumer("b"), run.consumer("h0"), run.consumer("lengths")
            yd = run.output((seq, dirs, batch, hidden), np.float32)
            yhd = run.output((1, dirs, batch, hidden), np.float32)
            network = ops.gru(xd, wd, rd, bd, hd, ld, yd, yhd, direction="bidirectional", linear_before_reset=0) \
                if op == "GRU" else ops.rnn(xd, wd, rd, bd, hd, ld, yd, yhd, direction="bidirectional")
            got, got_h = run.run(network)
            results.append(within(got, want, "close", control=at is not None)
                           & within(got_h.reshape(want_h.shape), want_h, "close", control=at is not None))
        assert results == [True, False]


# --- Slice's data --------------------------------------------------------------------------------------------


def test_a_slices_constant_data_is_taken_by_slice1_as_emitted(device: dmlbridge.gpu.Device, tmp_path: Path) -> None:
    """A Slice of a constant: its data bound to SLICE1 at its own layout, its starts, ends, axes and steps read on
    the CPU (the window worked out by hand: rows 1 to 2, every second column)."""
    data = -np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 1.25  # (not the spare's values: the control differs)
    node = helper.make_node("Slice", ["d", "starts", "ends", "axes", "steps"], ["y"], name="n")
    window = {"starts": [1, 0], "ends": [3, 2**63 - 1], "axes": [1, 2], "steps": [1, 2]}
    model = one_node(node, {}, (F32, None), {"d": data, **{k: np.array(v, np.int64) for k, v in window.items()}},
                     opset=13)
    with ConsumerRun(device, tmp_path, model, {}) as run:
        want = run.expected["y"]
        assert want.tolist() == data[:, 1:3, ::2].tolist()
        consumer = run.plan.entries["d"].consumers[0]
        assert (consumer.reads_on, consumer.dml_operator, consumer.sizes) == ("gpu", "SLICE1", (2, 3, 4))
        assert all(run.plan.entries[key].reads_on == "cpu" for key in window)
        results = []
        for at in (None, "pad"):
            run.reset()
            (got,) = run.run(ops.slice1(run.consumer("d", at=at), run.output(want.shape, np.float32),
                                        offsets=(0, 1, 0), sizes=(2, 2, 4), strides=(1, 1, 2)))
            results.append(within(got, want, "exact", control=at is not None))
        assert results == [True, False]


# --- the layer normalizations ------------------------------------------------------------------------------------

def test_simplified_layer_normalization_takes_its_scale_at_the_input_dimension_count(device: dmlbridge.gpu.Device,
                                                                                     tmp_path: Path) -> None:
    """x / sqrt(mean(x^2) + epsilon) * scale: MEAN_VARIANCE_NORMALIZATION2 without the mean."""
    rng = np.random.default_rng(19)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    scale = rng.standard_normal(8).astype(np.float32)
    model = one_node(helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], name="rms", axis=-1,
                                      epsilon=1e-5), {"x": (F32, [2, 3, 8])}, (F32, None), {"scale": scale})
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want = run.expected["y"]
        consumer = run.plan.entries["scale"].consumers[0]
        assert (consumer.dml_operator, consumer.sizes) == ("MEAN_VARIANCE_NORMALIZATION2", (1, 1, 8))
        results = []
        for at in (None, "pad"):
            run.reset()
            xd, sd = run.feed("x"), run.consumer("scale", at=at)
            run.absent()
            (got,) = run.run(ops.mean_variance_normalization2(xd, sd, None, run.output((2, 3, 8), np.float32),
                                                             axes=(2,), epsilon=1e-5, use_mean=False))
            results.append(within(got, want, "sum", k=16, size=np.abs(want) + 4 * np.abs(scale),
                                  control=at is not None))
        assert results == [True, False]


def test_skip_layer_normalization_adds_its_skip_and_bias_broadcast_then_normalizes(device: dmlbridge.gpu.Device,
                                                                                   tmp_path: Path) -> None:
    """ONNX Runtime's graph for com.microsoft's SkipLayerNormalization: ELEMENT_WISE_ADD of the skip (here one per
    sequence position, [S, H], broadcast over the batch), ELEMENT_WISE_ADD of the bias ([H], broadcast), then
    MEAN_VARIANCE_NORMALIZATION2 with gamma and beta at the input's dimension count; one compiled graph."""
    rng = np.random.default_rng(23)
    batch, seq, hidden = 2, 3, 8
    x = rng.standard_normal((batch, seq, hidden)).astype(np.float32)
    consts = {"skip": rng.standard_normal((seq, hidden)).astype(np.float32),
              "gamma": rng.standard_normal(hidden).astype(np.float32),
              "beta": rng.standard_normal(hidden).astype(np.float32),
              "bias": rng.standard_normal(hidden).astype(np.float32)}
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"], ["y"], name="sln",
                            domain="com.microsoft", epsilon=1e-5)
    model = one_node(node, {"x": (F32, [batch, seq, hidden])}, (F32, None), consts)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    shape = (batch, seq, hidden)
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want = run.expected["y"]
        seen = {key: (c.dml_operator, c.sizes, c.strides) for key in consts
                for c in run.plan.entries[key].consumers}
        assert seen == {"skip": ("ELEMENT_WISE_ADD", shape, (0, hidden, 1)),
                        "bias": ("ELEMENT_WISE_ADD", shape, (0, 0, 1)),
                        "gamma": ("MEAN_VARIANCE_NORMALIZATION2", (1, 1, hidden), None),
                        "beta": ("MEAN_VARIANCE_NORMALIZATION2", (1, 1, hidden), None)}
        results = []
        for at in (None, "pad"):
            run.reset()
            xd, kd, bd = run.feed("x"), run.consumer("skip", at=at), run.consumer("bias")
            gd, ed = run.consumer("gamma"), run.consumer("beta")
            t1, t2, y = (run.output(shape, np.float32) for _ in range(3))
            add_skip = ops.element_wise("ELEMENT_WISE_ADD", xd, kd, t1)
            add_bias = ops.element_wise("ELEMENT_WISE_ADD", t1, bd, t2)
            norm = ops.mean_variance_normalization2(t2, gd, ed, y, axes=(2,), epsilon=1e-5)
            # graph inputs: 0 x, 1 skip, 2 bias, 3 gamma, 4 beta; only y is read (t1 and t2 stay inside)
            run.outputs = run.outputs[2:]
            edges = [InputEdge(0, 0, 0), InputEdge(1, 0, 1), InputEdge(2, 1, 1), InputEdge(3, 2, 1),
                     InputEdge(4, 2, 2)]
            inner = [IntermediateEdge(0, 0, 1, 0), IntermediateEdge(1, 0, 2, 0)]
            (got,) = run.run_graph([add_skip, add_bias, norm], edges, inner, [OutputEdge(2, 0, 0)])
            summed = np.abs(x) + np.abs(consts["skip"]) + np.abs(consts["bias"])
            size = np.abs(want) + np.abs(consts["beta"]) + 4 * np.abs(consts["gamma"]) * (1 + summed)
            results.append(within(got, want, "sum", k=16, size=size, control=at is not None))
        assert results == [True, False]


# --- LSTM -------------------------------------------------------------------------------------------------------

def test_a_bidirectional_lstm_takes_every_constant_input_with_its_peepholes(device: dmlbridge.gpu.Device,
                                                                            tmp_path: Path) -> None:
    """All eight inputs, P among them ([dirs, 3·hidden] as [1, 1, dirs, 3·hidden]). (A forward LSTM is what this
    runtime cannot compile; a bidirectional one runs.)"""
    rng = np.random.default_rng(31)
    seq, batch, size, hidden, dirs = 3, 2, 4, 3, 2
    x = rng.standard_normal((seq, batch, size)).astype(np.float32)
    consts = {"w": (rng.standard_normal((dirs, 4 * hidden, size)) / 2).astype(np.float32),
              "r": (rng.standard_normal((dirs, 4 * hidden, hidden)) / 2).astype(np.float32),
              "b": (rng.standard_normal((dirs, 8 * hidden)) / 4).astype(np.float32),
              "lengths": np.array([3, 2], np.int32),
              "h0": rng.standard_normal((dirs, batch, hidden)).astype(np.float32),
              "c0": rng.standard_normal((dirs, batch, hidden)).astype(np.float32),
              "p": (rng.standard_normal((dirs, 3 * hidden)) / 2).astype(np.float32)}
    node = helper.make_node("LSTM", ["x", *consts], ["y", "y_h", "y_c"], name="lstm", hidden_size=hidden,
                            direction="bidirectional")
    model = one_node(node, {"x": (F32, [seq, batch, size])}, (F32, None), consts, opset=14,
                     extra_outputs=("y_h", "y_c"))
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want = [run.expected[name] for name in ("y", "y_h", "y_c")]
        sizes = {key: run.plan.entries[key].consumers[0].sizes for key in consts}
        assert sizes == {"w": (1, dirs, 4 * hidden, size), "r": (1, dirs, 4 * hidden, hidden),
                         "b": (1, 1, dirs, 8 * hidden), "lengths": (1, 1, 1, batch), "h0": (1, dirs, batch, hidden),
                         "c0": (1, dirs, batch, hidden), "p": (1, 1, dirs, 3 * hidden)}
        results = []
        for at in (None, "pad"):
            run.reset()
            xd = run.feed("x", (1, seq, batch, size))
            # (bound in the operator's order: W, R, B, initial_h, initial_c, sequence_lens, P)
            wd, rd, bd, hd = run.consumer("w"), run.consumer("r"), run.consumer("b"), run.consumer("h0")
            cd, ld, pd = run.consumer("c0"), run.consumer("lengths"), run.consumer("p", at=at)
            outs = (run.output((seq, dirs, batch, hidden), np.float32),
                    run.output((1, dirs, batch, hidden), np.float32), run.output((1, dirs, batch, hidden), np.float32))
            got = run.run(ops.lstm(xd, wd, rd, bd, hd, cd, ld, pd, *outs, direction="bidirectional"))
            results.append(all([within(g.reshape(w.shape), w, "close", control=at is not None)
                                for g, w in zip(got, want, strict=True)]))
        assert results == [True, False]


# --- Concat -------------------------------------------------------------------------------------------------------

def test_concat_joins_a_constant_as_emitted(device: dmlbridge.gpu.Device, tmp_path: Path) -> None:
    rng = np.random.default_rng(37)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    c = rng.standard_normal((2, 2, 4)).astype(np.float32)
    model = one_node(helper.make_node("Concat", ["x", "c"], ["y"], name="cat", axis=1), {"x": (F32, [2, 3, 4])},
                     (F32, None), {"c": c})
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want = run.expected["y"]
        consumer = run.plan.entries["c"].consumers[0]
        assert (consumer.dml_operator, consumer.sizes, consumer.strides) == ("JOIN", (2, 2, 4), None)
        results = []
        for at in (None, "pad"):
            run.reset()
            xd, cd = run.feed("x"), run.consumer("c", at=at)
            (got,) = run.run(ops.join([xd, cd], run.output((2, 5, 4), np.float32), axis=1))
            results.append(within(got, want, "exact", control=at is not None))
        assert results == [True, False]


# --- QLinearConv and QLinearMatMul -------------------------------------------------------------------------------
# (Scales chosen so that every requantization multiplies by a whole power of two: no rounding, so DirectML and
# ONNX Runtime agree exactly, saturation included.)

@pytest.mark.parametrize("per_channel", [True, False])
def test_qlinear_conv_takes_scalars_at_four_dimensions_and_per_channel_ones_on_the_channel(
        device: dmlbridge.gpu.Device, tmp_path: Path, per_channel: bool) -> None:
    """Per channel, the filter's scale and zero point are [1, M, 1, 1]; per tensor (0-D), [1, 1, 1, 1]."""
    rng = np.random.default_rng(41)
    u8 = TensorProto.UINT8
    x = rng.integers(0, 5, (1, 2, 5, 5)).astype(np.uint8)
    consts = {"x_scale": np.array(1.0, np.float32), "x_zero": np.array(2, np.uint8),
              "w": rng.integers(-2, 3, (3, 2, 3, 3)).astype(np.int8),
              "w_scale": np.array([0.25, 0.5, 1.0] if per_channel else 0.5, np.float32),
              "w_zero": np.zeros(3 if per_channel else (), np.int8),
              "y_scale": np.array(0.25, np.float32), "y_zero": np.array(128, np.uint8),
              "b": np.array([1, -2, 3], np.int32)}
    node = helper.make_node("QLinearConv", ["x", *consts], ["y"], name="qconv", pads=[1, 1, 1, 1])
    model = one_node(node, {"x": (u8, [1, 2, 5, 5])}, (u8, None), consts, opset=13)
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want = run.expected["y"]
        sizes = {key: run.plan.entries[key].consumers[0].sizes for key in consts}
        assert sizes == {"x_scale": (1, 1, 1, 1), "x_zero": (1, 1, 1, 1), "w": (3, 2, 3, 3),
                         "w_scale": (1, 3 if per_channel else 1, 1, 1), "w_zero": (1, 3 if per_channel else 1, 1, 1),
                         "y_scale": (1, 1, 1, 1),
                         "y_zero": (1, 1, 1, 1), "b": (1, 3, 1, 1)}
        results = []
        for at in (None, "pad"):
            run.reset()
            xd = run.feed("x")
            xs, xz, wd = run.consumer("x_scale"), run.consumer("x_zero"), run.consumer("w", at=at)
            ws, wz, bd = run.consumer("w_scale"), run.consumer("w_zero"), run.consumer("b")
            ys, yz = run.consumer("y_scale"), run.consumer("y_zero")
            (got,) = run.run(ops.quantized_linear_convolution(
                xd, xs, xz, wd, ws, wz, bd, ys, yz, run.output((1, 3, 5, 5), np.uint8), strides=(1, 1),
                dilations=(1, 1), start=(1, 1), end=(1, 1), groups=1))
            results.append(within(got, want, "exact", control=at is not None))
        assert results == [True, False]


def test_qlinear_matmul_takes_b_at_the_batch_and_its_scales_at_as_dimension_count(device: dmlbridge.gpu.Device,
                                                                                 tmp_path: Path) -> None:
    rng = np.random.default_rng(43)
    u8 = TensorProto.UINT8
    a = rng.integers(0, 6, (2, 3, 4)).astype(np.uint8)
    consts = {"a_scale": np.array(1.0, np.float32), "a_zero": np.array(3, np.uint8),
              "b": rng.integers(0, 5, (4, 5)).astype(np.uint8),
              "b_scale": np.array([0.25, 0.5, 1.0, 0.25, 0.5], np.float32),
              "b_zero": np.array([2, 1, 2, 3, 2], np.uint8),
              "y_scale": np.array(0.25, np.float32), "y_zero": np.array(100, np.uint8)}
    node = helper.make_node("QLinearMatMul", ["a", *consts], ["y"], name="qmm")
    model = one_node(node, {"a": (u8, [2, 3, 4])}, (u8, [2, 3, 5]), consts, opset=13)
    with ConsumerRun(device, tmp_path, model, {"a": a}) as run:
        want = run.expected["y"]
        views = {key: (run.plan.entries[key].consumers[0].sizes, run.plan.entries[key].consumers[0].strides)
                 for key in consts}
        assert views == {"a_scale": ((1, 1, 1), None), "a_zero": ((1, 1, 1), None), "b": ((2, 4, 5), (0, 5, 1)),
                         "b_scale": ((1, 1, 5), None), "b_zero": ((1, 1, 5), None), "y_scale": ((1, 1, 1), None),
                         "y_zero": ((1, 1, 1), None)}
        results = []
        for at in (None, "pad"):
            run.reset()
            ad = run.feed("a")
            as_, az, bd = run.consumer("a_scale"), run.consumer("a_zero"), run.consumer("b", at=at)
            bs, bz, ys, yz = (run.consumer(key) for key in ("b_scale", "b_zero", "y_scale", "y_zero"))
            (got,) = run.run(ops.quantized_linear_matrix_multiply(ad, as_, az, bd, bs, bz, ys, yz,
                                                                  run.output((2, 3, 5), np.uint8)))
            results.append(within(got, want, "exact", control=at is not None))
        assert results == [True, False]


# --- GroupNorm and RotaryEmbedding (com.microsoft) ---------------------------------------------------------------

def test_group_norm_takes_gamma_and_beta_at_the_grouped_sizes(device: dmlbridge.gpu.Device, tmp_path: Path) -> None:
    """com.microsoft's GroupNorm (NHWC) as ONNX Runtime's DirectML provider runs it: MEAN_VARIANCE_NORMALIZATION1
    over axes 1 and 2 of the input seen as [N, C/groups, H·W, groups], gamma and beta at those sizes with strides
    [0, 1, 0, C/groups]. ONNX Runtime's CPU provider has no GroupNorm: the reference is ONNX's GroupNormalization
    (opset 21) between two Transposes, on that provider."""
    rng = np.random.default_rng(29)
    n, h, w, c, groups = 2, 3, 4, 8, 4
    per_group = c // groups
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    consts = {"gamma": rng.standard_normal(c).astype(np.float32), "beta": rng.standard_normal(c).astype(np.float32)}
    node = helper.make_node("GroupNorm", ["x", "gamma", "beta"], ["y"], name="gn", domain="com.microsoft",
                            groups=groups, activation=0, epsilon=1e-5, channels_last=1)
    model = one_node(node, {"x": (F32, [n, h, w, c])}, (F32, None), consts)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    reference = helper.make_model(helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
         helper.make_node("GroupNormalization", ["xt", "gamma", "beta"], ["yt"], num_groups=groups, epsilon=1e-5),
         helper.make_node("Transpose", ["yt"], ["y"], perm=[0, 2, 3, 1])], "reference",
        [helper.make_tensor_value_info("x", F32, [n, h, w, c])], [helper.make_tensor_value_info("y", F32, None)],
        [numpy_helper.from_array(value, name) for name, value in consts.items()]),
        opset_imports=[helper.make_opsetid("", 21)])
    grouped = ((n, per_group, h * w, groups), (h * w * c, 1, c, per_group))  # the input as the operator reads it
    with ConsumerRun(device, tmp_path, model, {"x": x}, reference=reference) as run:
        want = run.expected["y"]
        for key in consts:
            consumer = run.plan.entries[key].consumers[0]
            assert (consumer.dml_operator, consumer.sizes, consumer.strides) == \
                ("MEAN_VARIANCE_NORMALIZATION1", grouped[0], (0, 1, 0, per_group)), key
        results = []
        for at in (None, "pad"):
            run.reset()
            xd, gd, bd = run.feed("x", *grouped), run.consumer("gamma", at=at), run.consumer("beta")
            y = run.output((n, h, w, c), np.float32, view=grouped)
            (got,) = run.run(ops.mean_variance_normalization(xd, gd, bd, y, axes=(1, 2), epsilon=1e-5))
            size = np.abs(want) + np.abs(consts["beta"]) + 4 * np.abs(consts["gamma"])
            results.append(within(got, want, "sum", k=16, size=size, control=at is not None))
        assert results == [True, False]


def test_rotary_embedding_gathers_its_cos_and_sin_caches_at_four_dimensions(device: dmlbridge.gpu.Device,
                                                                         tmp_path: Path) -> None:
    """com.microsoft's RotaryEmbedding as ONNX Runtime's DirectML provider binds its caches: GATHER of cos_cache and
    sin_cache ([max_seq, head/2] as [1, 1, max_seq, head/2]) by the position ids ([1, 1, batch, seq]) on axis 2,
    then x·cos + rotate(x)·sin with the gathered rows broadcast over the heads. The provider compiles it all as one
    graph; this runtime fails to compile a graph of those products and their sum, and an ELEMENT_WISE_ADD of two
    packed tensors, so here the two GATHERs are one graph, each product an operator of its own, fed the gathered rows
    at the sizes the provider's graph reads them at, and the sum is numpy's (one float32 rounding, as the GPU's).
    The provider makes rotate(x) (the two halves of each head swapped, the second negated) with SPLIT and JOIN from
    x; here it is an input, made with numpy from x."""
    rng = np.random.default_rng(31)
    batch, seq, heads, head, max_seq = 2, 3, 2, 8, 6
    half, hidden = head // 2, heads * head
    x = rng.standard_normal((batch, seq, hidden)).astype(np.float32)
    positions = rng.integers(0, max_seq, (batch, seq)).astype(np.int64)
    angles = rng.uniform(0, np.pi, (max_seq, half))
    consts = {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
    node = helper.make_node("RotaryEmbedding", ["x", "positions", "cos", "sin"], ["y"], name="rope",
                            domain="com.microsoft")
    model = one_node(node, {"x": (F32, [batch, seq, hidden]), "positions": (TensorProto.INT64, [batch, seq])},
                     (F32, None), consts)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    x5 = x.reshape(batch, seq, heads, 2, half)
    rotated = np.concatenate([-x5[:, :, :, 1:], x5[:, :, :, :1]], axis=3)
    rows = (1, batch, seq, half)
    # x in halves of heads, [1, batch·seq, heads·2, half]; the gathered rows seen at those sizes, strides of 0 over
    # the heads and halves (the provider's 5-D [batch, seq, heads, 2, half], its first two merged)
    halves = (1, batch * seq, heads * 2, half)
    spread = (batch * seq * half, half, 0, 1)
    with ConsumerRun(device, tmp_path, model, {"x": x, "positions": positions}) as run:
        run.feeds["rotated"] = rotated
        want = run.expected["y"]
        for key in consts:
            consumer = run.plan.entries[key].consumers[0]
            assert (consumer.dml_operator, consumer.sizes, consumer.strides) == \
                ("GATHER", (1, 1, max_seq, half), None), key
        results = []
        for at in (None, "pad"):
            run.reset()
            pd, cd, sd = run.feed("positions", (1, 1, batch, seq)), run.consumer("cos", at=at), run.consumer("sin")
            gathers = [ops.gather(cd, pd, run.output(rows, np.float32), axis=2, index_dimensions=2),
                       ops.gather(sd, pd, run.output(rows, np.float32), axis=2, index_dimensions=2)]
            cos_rows, sin_rows = run.run_graph(gathers, [InputEdge(0, 0, 1), InputEdge(0, 1, 1), InputEdge(1, 0, 0),
                                                         InputEdge(2, 1, 0)], [], [OutputEdge(0, 0, 0),
                                                                                   OutputEdge(1, 0, 1)])
            gathered = CONSUMERS.pending
            run.reset()
            run.feeds.update({"cos_rows": cos_rows, "sin_rows": sin_rows})
            for product, (data, cache) in enumerate((("x", "cos_rows"), ("rotated", "sin_rows"))):
                run.reset()
                a, b = run.feed(data, halves), run.feed(cache, halves, spread)
                (run.feeds[f"product{product}"],) = run.run(ops.element_wise(
                    "ELEMENT_WISE_MULTIPLY", a, b, run.output(halves, np.float32)))
            got = run.feeds["product0"] + run.feeds["product1"]  # (one float32 rounding, as ELEMENT_WISE_ADD's)
            CONSUMERS.pending = gathered  # (the caches' descs are the first graph's)
            size = (np.abs(x5) + np.abs(rotated)).reshape(want.shape)
            results.append(within(got.reshape(want.shape), want, "sum", k=4, size=size, control=at is not None))
        assert results == [True, False]


# --- Attention and MultiHeadAttention (com.microsoft) ------------------------------------------------------------

def test_attention_takes_its_weights_and_bias_broadcast_to_the_batch(device: dmlbridge.gpu.Device,
                                                                     tmp_path: Path) -> None:
    """com.microsoft's Attention as ONNX Runtime's DirectML provider runs it: one GEMM of the input [B, S, in] and the
    weights [in, 3W] broadcast to [B, in, 3W] (strides [0, 3W, 1]), plus the bias [3W] broadcast to [B, S, 3W]
    (strides [0, 0, 1]), compared with ONNX Runtime's MatMul and Add of the same values. The provider then runs
    MULTIHEAD_ATTENTION over that product, which binds no constant, and which this runtime cannot run (its shaders
    remove the device)."""
    rng = np.random.default_rng(37)
    batch, seq, width, heads, head = 2, 3, 8, 2, 2
    hidden = heads * head
    x = rng.standard_normal((batch, seq, width)).astype(np.float32)
    consts = {"weights": rng.standard_normal((width, 3 * hidden)).astype(np.float32),
              "bias": rng.standard_normal(3 * hidden).astype(np.float32)}
    node = helper.make_node("Attention", ["x", "weights", "bias"], ["y"], name="attention", domain="com.microsoft",
                            num_heads=heads)
    model = one_node(node, {"x": (F32, [batch, seq, width])}, (F32, None), consts)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    product = one_node(helper.make_node("MatMul", ["x", "weights"], ["xw"]), {"x": (F32, [batch, seq, width])},
                       (F32, None), consts)
    product.graph.node.append(helper.make_node("Add", ["xw", "bias"], ["y"]))
    qkv = onnx_runtime(product, {"x": x})["y"]
    qkv_shape = (batch, seq, 3 * hidden)
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        seen = {key: (c.dml_operator, c.sizes, c.strides) for key in consts for c in run.plan.entries[key].consumers}
        assert seen == {"weights": ("GEMM", (batch, width, 3 * hidden), (0, 3 * hidden, 1)),
                        "bias": ("GEMM", qkv_shape, (0, 0, 1))}
        results = []
        for at in (None, "pad"):
            run.reset()
            xd, wd, bd = run.feed("x"), run.consumer("weights", at=at), run.consumer("bias")
            (got,) = run.run(ops.gemm(xd, wd, bd, run.output(qkv_shape, np.float32)))
            size = np.abs(x) @ np.abs(consts["weights"]) + np.abs(consts["bias"])
            results.append(within(got, qkv, "sum", k=width + 1, size=size, control=at is not None))
        assert results == [True, False]


def test_multihead_attention_takes_its_bias_as_it_is(device: dmlbridge.gpu.Device, tmp_path: Path) -> None:
    """com.microsoft's MultiHeadAttention: its bias [3W] is bound to MULTIHEAD_ATTENTION as it is (the operator adds
    its thirds to the query, key and value). This runtime cannot run MULTIHEAD_ATTENTION (its shaders remove the
    device): DirectML creates and compiles the operator with the bias at the consumer's desc, counted
    compile-limited, never taken; ONNX Runtime's CPU provider runs the node, so the model is one it takes."""
    rng = np.random.default_rng(41)
    batch, seq, heads, head = 2, 3, 2, 2
    hidden = heads * head
    feeds = {name: rng.standard_normal((batch, seq, hidden)).astype(np.float32) for name in ("q", "k", "v")}
    consts = {"bias": rng.standard_normal(3 * hidden).astype(np.float32)}
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "bias"], ["y"], name="mha", domain="com.microsoft",
                            num_heads=heads)
    model = one_node(node, {name: (F32, [batch, seq, hidden]) for name in feeds}, (F32, None), consts)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with ConsumerRun(device, tmp_path, model, feeds) as run:
        (consumer,) = run.plan.entries["bias"].consumers
        assert (consumer.dml_operator, consumer.layout, consumer.sizes[-1]) == ("MULTIHEAD_ATTENTION", None, 3 * hidden)
        q, k, v = (run.feed(name) for name in ("q", "k", "v"))
        operator = ops.multihead_attention(run.output(run.expected["y"].shape, np.float32), heads=heads,
                                           scale=head ** -0.5, query=q, key=k, value=v, bias=run.consumer("bias"))
        assert created(device, operator, run.consumers)


# --- Einsum ------------------------------------------------------------------------------------------------------

def test_an_einsum_of_a_matrix_product_form_takes_its_weight_at_four_dimensions(device: dmlbridge.gpu.Device,
                                                                             tmp_path: Path) -> None:
    """``ij,kj->ik`` (a Linear layer's weight [k, j]) as ONNX Runtime's DirectML provider runs it: GEMM with B
    transposed, every tensor with leading 1s to 4 dimensions, the weight [1, 1, k, j]. The provider binds no C; this
    runtime removes its device running a GEMM without one, so here C is zeros, with Beta 0."""
    rng = np.random.default_rng(43)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    consts = {"weight": rng.standard_normal((4, 5)).astype(np.float32)}
    model = one_node(helper.make_node("Einsum", ["x", "weight"], ["y"], name="einsum", equation="ij,kj->ik"),
                     {"x": (F32, [3, 5])}, (F32, None), consts)
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        run.feeds["zeros"] = np.zeros((3, 4), np.float32)
        want = run.expected["y"]
        (consumer,) = run.plan.entries["weight"].consumers
        assert (consumer.dml_operator, consumer.sizes, consumer.strides) == ("GEMM", (1, 1, 4, 5), None)
        results = []
        for at in (None, "pad"):
            run.reset()
            xd, wd, cd = run.feed("x", (1, 1, 3, 5)), run.consumer("weight", at=at), run.feed("zeros", (1, 1, 3, 4))
            (got,) = run.run(ops.gemm(xd, wd, cd, run.output((1, 1, 3, 4), np.float32), trans_b=True, beta=0.0))
            size = np.abs(x) @ np.abs(consts["weight"]).T
            results.append(within(got.reshape(want.shape), want, "sum", k=5, size=size, control=at is not None))
        assert results == [True, False]
