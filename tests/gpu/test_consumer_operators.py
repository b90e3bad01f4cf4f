"""Every layout dmlbridge emits for a consumer, bound as the manifest gives it to that consumer's DirectML operator,
with the weights flagged DML_TENSOR_FLAG_OWNED_BY_DML and bound when the operator is initialized, and computing
what ONNX Runtime's CPU provider computes on the same inputs (consumer_runs.py has the harness and the bounds):
CONVOLUTION 1-D, 2-D and 3-D (weight, bias, groups, strides, pads, dilations), BATCH_NORMALIZATION (mean,
variance, scale, bias at 3, 4 and 5 dimensions), GEMM (B with and without TransB, C broadcast; a MatMul's B at
the output's batch sizes), GATHER (data with 1-D and 2-D indices), ELEMENT_WISE_ADD and MULTIPLY with a
per-channel constant, DEQUANTIZE then GEMM for MatMulNBits, and ELEMENT_WISE_DEQUANTIZE_LINEAR for the records
made for levels below 6.3 (both dequantize descs as the records build them, ``QuantizedWeight.operator_desc``).
Each runs as one compiled operator; the layers of one small model run again as one graph
(``IDMLDevice1::CompileGraph``), and DEQUANTIZE feeds GEMM inside a graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dml_operators as ops
import numpy as np
import onnx
import pytest
from consumer_runs import CONSUMERS, ConsumerRun, grid16, magnitude, sizes_of, within
from onnx import TensorProto, helper, numpy_helper
from quantized_models import dq_model, identity_product, node_output, quantized

import dmlbridge
import dmlbridge.gpu
from dmlbridge.gpu import InputEdge, IntermediateEdge, OutputEdge

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


def one_node(node: Any, inputs: dict[str, tuple[int, list[int]]], output: tuple[int, list[int] | None],
             constants: dict[str, np.ndarray], opset: int = 17) -> onnx.ModelProto:
    """A model of one node: its graph inputs (type, shape), its output ``y`` and its constants."""
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(name, t, shape) for name, (t, shape) in inputs.items()],
        [helper.make_tensor_value_info("y", output[0], output[1])],
        [numpy_helper.from_array(value, name) for name, value in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _needs_float16(device: dmlbridge.gpu.Device) -> None:
    if dmlbridge.DmlDataType.FLOAT16 not in device.types:
        pytest.skip("this device reports no FLOAT16 (DIRECTML_FP16=1 turns it on here)")


# --- CONVOLUTION --------------------------------------------------------------------------------------------------

CONVS = {  # name: (x shape, w shape, groups, strides, pads (begins, ends), dilations, float16)
    "1d": ((1, 4, 11), (6, 2, 3), 2, (2,), (1, 2), (1,), False),
    "2d": ((1, 4, 7, 6), (6, 2, 3, 2), 2, (2, 1), (1, 0, 0, 1), (1, 2), False),
    "2d-depthwise": ((2, 3, 5, 5), (3, 1, 3, 3), 3, (1, 1), (1, 1, 1, 1), (1, 1), False),
    "3d": ((1, 2, 4, 5, 6), (4, 2, 2, 3, 2), 1, (1, 2, 1), (0, 1, 0, 0, 1, 1), (1, 1, 2), False),
    "2d-float16": ((1, 4, 6, 5), (6, 2, 3, 3), 2, (1, 1), (1, 1, 1, 1), (1, 1), True),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_convolution_takes_its_weight_and_bias_as_emitted(device: dmlbridge.gpu.Device, tmp_path: Path,
                                                          name: str) -> None:
    x_shape, w_shape, groups, strides, pads, dilations, half = CONVS[name]
    if half:
        _needs_float16(device)
    rng = np.random.default_rng(len(name))
    if half:
        x, w, b = grid16(rng, x_shape), grid16(rng, w_shape), grid16(rng, (w_shape[0],))
    else:
        x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (x_shape, w_shape, (w_shape[0],)))
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", group=groups, strides=list(strides),
                            pads=list(pads), dilations=list(dilations))
    kind = F16 if half else F32
    model = one_node(node, {"x": (kind, list(x_shape))}, (kind, None), {"w": w, "b": b})
    spatial = len(strides)
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want = run.expected["y"]
        rank = max(4, 2 + spatial)
        grow = (1,) * (rank - 2 - spatial)  # a 1-D convolution runs as a 2-D one: 1s before the spatial axes
        assert run.plan.entries["w"].sizes == (*w_shape[:2], *grow, *w_shape[2:])
        assert run.plan.entries["b"].sizes == (1, w_shape[0], *(1,) * (rank - 2))
        xd = run.feed("x", (*x_shape[:2], *grow, *x_shape[2:]))
        wd, bd = run.weight("w"), run.weight("b")
        yd = run.output((*want.shape[:2], *grow, *want.shape[2:]), want.dtype)
        lead = (0,) * len(grow)
        op = ops.convolution(xd, wd, bd, yd, strides=(1,) * len(grow) + strides,
                             dilations=(1,) * len(grow) + dilations, start=lead + pads[:spatial],
                             end=lead + pads[spatial:], groups=groups)
        (got,) = run.run(op)
        got = got.reshape(want.shape)
        if half:
            assert within(got, want, "ulp"), name
        else:
            k = w_shape[1] * int(np.prod(w_shape[2:])) + 1
            assert within(got, want, "sum", k=k, size=magnitude(model, {"x": x})["y"]), name


# --- BATCH_NORMALIZATION ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape", [(2, 3, 7), (2, 3, 4, 5), (1, 3, 2, 3, 4)], ids=["3d", "4d", "5d"])
def test_batch_normalization_takes_its_four_parameters_as_emitted(device: dmlbridge.gpu.Device, tmp_path: Path,
                                                                  x_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(x_shape))
    c = x_shape[1]
    x = rng.standard_normal(x_shape).astype(np.float32)
    scale, bias, mean = (rng.standard_normal(c).astype(np.float32) for _ in range(3))
    var = (rng.random(c) + 0.5).astype(np.float32)
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], name="bn",
                            epsilon=1e-5)
    model = one_node(node, {"x": (F32, list(x_shape))}, (F32, None),
                     {"scale": scale, "bias": bias, "mean": mean, "var": var})
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want = run.expected["y"]
        rank = max(4, len(x_shape))
        dml_x = x_shape + (1,) * (rank - len(x_shape))
        for key in ("scale", "bias", "mean", "var"):
            assert run.plan.entries[key].sizes == (1, c, *(1,) * (rank - 2)), key
        xd = run.feed("x", dml_x)
        md, vd, sd, bd = (run.weight(key) for key in ("mean", "var", "scale", "bias"))
        (got,) = run.run(ops.batch_normalization(xd, md, vd, sd, bd, run.output(dml_x, np.float32), epsilon=1e-5))
        # (x - mean) / sqrt(var + eps) * scale + bias: about 6 roundings of terms of at most this size, each side
        shape = (1, c, *(1,) * (len(x_shape) - 2))
        size = (np.abs(x) + np.abs(mean).reshape(shape)) * np.abs(scale / np.sqrt(var + 1e-5)).reshape(shape) \
            + np.abs(bias).reshape(shape)
        assert within(got.reshape(want.shape), want, "sum", k=6, size=size)


# --- GEMM ---------------------------------------------------------------------------------------------------------

GEMMS = {  # name: (M, K, N, transB, alpha, beta, C shape, float16)
    "B": (3, 5, 4, 0, 1.0, 1.0, (4,), False),
    "B transposed": (3, 5, 4, 1, 0.5, 2.0, (4,), False),
    "C one row": (2, 6, 3, 1, 1.0, 1.0, (1, 3), False),
    "C one column": (3, 4, 5, 0, 1.0, 1.0, (3, 1), False),
    "float16": (3, 8, 4, 1, 1.0, 1.0, (4,), True),
}


@pytest.mark.parametrize("name", list(GEMMS))
def test_gemm_takes_b_and_a_broadcast_c_as_emitted(device: dmlbridge.gpu.Device, tmp_path: Path, name: str) -> None:
    m, k, n, trans_b, alpha, beta, c_shape, half = GEMMS[name]
    if half:
        _needs_float16(device)
    rng = np.random.default_rng(len(name))
    b_shape = (n, k) if trans_b else (k, n)
    if half:
        a, b, c = grid16(rng, (m, k)), grid16(rng, b_shape), grid16(rng, c_shape)
    else:
        a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), b_shape, c_shape))
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="fc", transB=trans_b, alpha=alpha, beta=beta)
    kind = F16 if half else F32
    model = one_node(node, {"a": (kind, [m, k])}, (kind, [m, n]), {"b": b, "c": c})
    with ConsumerRun(device, tmp_path, model, {"a": a}) as run:
        want = run.expected["y"]
        c_entry = run.plan.entries["c"]
        assert (c_entry.padding, c_entry.sizes) == ("broadcast", (m, n)), (c_entry.padding, c_entry.sizes)
        ad, bd, cd = run.feed("a"), run.weight("b"), run.weight("c")
        yd = run.output((m, n), want.dtype)
        (got,) = run.run(ops.gemm(ad, bd, cd, yd, trans_b=bool(trans_b), alpha=alpha, beta=beta))
        if half:
            assert within(got, want, "ulp"), name
        else:
            size = magnitude(model, {"a": a})["y"]  # (alpha and beta are powers of 2: exact scalings)
            assert within(got, want, "sum", k=k + 1, size=size), name


@pytest.mark.parametrize("a_shape", [(2, 3, 5), (1, 3, 5), (2, 2, 3, 5)], ids=["batch 2", "batch 1", "batch 2x2"])
def test_gemm_takes_a_matmul_b_at_the_outputs_batch_sizes(device: dmlbridge.gpu.Device, tmp_path: Path,
                                                          a_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    out_shape = (*a_shape[:-1], 4)
    model = one_node(helper.make_node("MatMul", ["a", "b"], ["y"], name="mm"), {"a": (F32, list(a_shape))},
                     (F32, list(out_shape)), {"b": b})
    with ConsumerRun(device, tmp_path, model, {"a": a}) as run:
        want = run.expected["y"]
        entry = run.plan.entries["b"]
        batch = a_shape[:-2]
        assert entry.padding == "broadcast" and entry.sizes == (*batch, 5, 4), (entry.padding, entry.sizes)
        ad, bd, no_c = run.feed("a"), run.weight("b"), run.absent()
        (got,) = run.run(ops.gemm(ad, bd, no_c, run.output(out_shape, np.float32)))
        assert within(got, want, "sum", k=5, size=magnitude(model, {"a": a})["y"])


# --- GATHER -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("indices_shape", [(4,), (2, 3)], ids=["1-D indices", "2-D indices"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32], ids=["float32", "int32"])
def test_gather_takes_its_data_as_emitted(device: dmlbridge.gpu.Device, tmp_path: Path,
                                          indices_shape: tuple[int, ...], dtype: Any) -> None:
    rng = np.random.default_rng(5)
    data = (rng.standard_normal((5, 3)) * 100).astype(dtype)
    indices = rng.integers(0, 5, indices_shape).astype(np.int32)
    onnx_type = F32 if dtype == np.float32 else TensorProto.INT32
    out_shape = [*indices_shape, 3]
    model = one_node(helper.make_node("Gather", ["data", "i"], ["y"], name="emb", axis=0),
                     {"i": (TensorProto.INT32, list(indices_shape))}, (onnx_type, out_shape), {"data": data})
    with ConsumerRun(device, tmp_path, model, {"i": indices}) as run:
        want = run.expected["y"]
        rank = len(out_shape)
        assert run.plan.entries["data"].sizes == (1,) * (rank - 2) + (5, 3)
        dd = run.weight("data")
        idx = run.feed("i", (1,) * (rank - len(indices_shape)) + indices_shape)
        (got,) = run.run(ops.gather(dd, idx, run.output(tuple(out_shape), dtype), axis=rank - 2,
                                    index_dimensions=len(indices_shape)))
        assert within(got, want, "exact")


# --- ELEMENT_WISE_ADD and MULTIPLY --------------------------------------------------------------------------------

@pytest.mark.parametrize("op_type", ["Add", "Mul"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32], ids=["float32", "int32"])
def test_element_wise_takes_a_per_channel_constant(device: dmlbridge.gpu.Device, tmp_path: Path, op_type: str,
                                                   dtype: Any) -> None:
    """The constant ([C, 1, 1], as ONNX broadcasts it) seen at the output's sizes through dmlbridge.broadcast_desc,
    as the manifest's note for element-wise consumers says (they are no layout inputs: their sizes are the run's)."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((2, 3, 2, 4)) * 50).astype(dtype)
    c = (rng.standard_normal((3, 1, 1)) * 50).astype(dtype)
    onnx_type = F32 if dtype == np.float32 else TensorProto.INT32
    model = one_node(helper.make_node(op_type, ["x", "c"], ["y"], name="ew"), {"x": (onnx_type, [2, 3, 2, 4])},
                     (onnx_type, [2, 3, 2, 4]), {"c": c})
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want = run.expected["y"]
        entry = run.plan.entries["c"]
        view = dmlbridge.broadcast_desc(entry, (2, 3, 2, 4))
        assert (view.sizes, view.strides) == ((2, 3, 2, 4), (0, 1, 0, 0))
        xd, cd = run.feed("x"), run.weight_seen_as("c", view)
        name = {"Add": "ELEMENT_WISE_ADD", "Mul": "ELEMENT_WISE_MULTIPLY"}[op_type]
        (got,) = run.run(ops.element_wise(name, xd, cd, run.output((2, 3, 2, 4), dtype)))
        assert within(got, want, "exact")  # (one rounding each side, of the same operation: IEEE's)


# --- quantized weights --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", [(64, 8, 4, 16, False), (96, 5, 4, 32, True), (48, 8, 8, 16, False)],
                         ids=["4-bit", "4-bit symmetric", "8-bit"])
def test_matmul_nbits_as_dequantize_then_gemm(device: dmlbridge.gpu.Device, tmp_path: Path,
                                              case: tuple[int, int, int, int, bool]) -> None:
    """DEQUANTIZE (the blocked form) and GEMM, as two operators and as one graph (a graph's inputs are those its
    edges name: GEMM's C, left out, is no graph input)."""
    k, n, _, _, _ = case
    model = quantized(*case)
    (node,) = model.graph.node
    a = np.random.default_rng(k).standard_normal((3, k)).astype(np.float32)
    weight = identity_product(model, k).T  # (ONNX Runtime's dequantized B, [N, K])
    with ConsumerRun(device, tmp_path, model, {"A": a}) as run:
        record = run.plan.quantized[node.name]
        assert record.operator == "DEQUANTIZE"
        want = run.expected["Y"]
        size = np.abs(a).astype(np.float64) @ np.abs(weight).astype(np.float64).T
        wd, sd, zd = (run.part(node.name, "blocked", role) for role in ("weight", "scales", "zero_points"))
        bd = run.output(sizes_of(wd), np.float32)
        (dequantized,) = run.run(record.operator_desc(output=bd))  # (the record's own desc: the blocked form)
        assert (sd, zd) != (None, None)
        assert within(dequantized + np.float32(0), weight + np.float32(0), "exact")  # (+0: the sign of zero)
        # GEMM alone, on DEQUANTIZE's output uploaded again (Y = A x B^T, MatMulNBits' meaning).
        run.reset()
        run.feeds["B"] = dequantized
        ad, b_in, no_c = run.feed("A"), run.feed("B"), run.absent()
        (alone,) = run.run(ops.gemm(ad, b_in, no_c, run.output((3, n), np.float32), trans_b=True))
        assert within(alone, want, "sum", k=k, size=size)
        # As one graph: DEQUANTIZE's output is GEMM's B.
        run.reset()
        wd, _, _ = (run.part(node.name, "blocked", role) for role in ("weight", "scales", "zero_points"))
        ad = run.feed("A")
        dq = record.operator_desc(output=b_in)
        gm = ops.gemm(ad, b_in, None, run.output((3, n), np.float32), trans_b=True)
        (got,) = run.run_graph([dq, gm], [InputEdge(0, 0, 0), InputEdge(1, 0, 1), InputEdge(2, 0, 2),
                                          InputEdge(3, 1, 0)],
                               [IntermediateEdge(0, 0, 1, 1)], [OutputEdge(1, 0, 0)])
        assert within(got, want, "sum", k=k, size=size)


def test_dequantize_linear_takes_the_records_made_below_6_3(device: dmlbridge.gpu.Device, tmp_path: Path) -> None:
    """MatMulNBits (4-bit, made 8-bit) and a per-axis DequantizeLinear, converted for feature level 6.2 (with the
    device's types): their split forms through ELEMENT_WISE_DEQUANTIZE_LINEAR, bit for bit ONNX Runtime's."""
    target = dmlbridge.Target("6.2", supported=device.types)
    rng = np.random.default_rng(11)
    cases: list[tuple[str, onnx.ModelProto, str, np.ndarray, dict[str, np.ndarray]]] = []
    model = quantized(72, 6, 4, 16, False)
    cases.append(("matmul", model, model.graph.node[0].name, identity_product(model, 72).T, {}))
    x = rng.integers(-128, 128, (6, 10)).astype(np.int8)
    scale = (rng.random(10) + 0.01).astype(np.float32)
    zp = rng.integers(-128, 128, 10).astype(np.int8)
    dq, dq_node = dq_model(x, scale, zp, axis=1)
    cases.append(("dq", dq, "dq", node_output(dq, dq_node), {}))
    for index, (name, case_model, key, want, feeds) in enumerate(cases):
        folder = tmp_path / name
        folder.mkdir()
        run_feeds = feeds or ({"A": np.eye(72, dtype=np.float32)} if name == "matmul" else {})
        with ConsumerRun(device, folder, case_model, run_feeds, target=target) as run:
            record = run.plan.quantized[key]
            assert record.operator == "ELEMENT_WISE_DEQUANTIZE_LINEAR", index
            for role in ("weight", "scales", "zero_points"):  # (bound in the operator's order of inputs)
                run.part(key, "split", role)
            (got,) = run.run(record.operator_desc(output=run.output(record.sizes, np.float32)))  # (the split form)
            shape = tuple(record.shape)
            if record.granularity == "block":  # (the split axis joined, the last block's padding cut)
                got = got.reshape(*shape[:record.axis], -1, *shape[record.axis + 1:])
                got = got[(slice(None),) * record.axis + (slice(0, shape[record.axis]),)]
            got = np.ascontiguousarray(got).reshape(shape) + np.float32(0)  # (+0: the sign of zero, see the module)
            assert within(got, want.reshape(shape) + np.float32(0), "exact"), name


# --- one graph ----------------------------------------------------------------------------------------------------

def test_the_layers_of_a_small_model_run_as_one_graph(device: dmlbridge.gpu.Device, tmp_path: Path) -> None:
    """Conv, BatchNormalization, Mul and Add by per-channel constants: each layer as one operator, then all four
    as one compiled graph, both against ONNX Runtime's output of each layer."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    c = 4
    consts = {"w": rng.standard_normal((c, 3, 3, 3)).astype(np.float32),
              "b": rng.standard_normal(c).astype(np.float32),
              "scale": rng.standard_normal(c).astype(np.float32), "bias": rng.standard_normal(c).astype(np.float32),
              "mean": rng.standard_normal(c).astype(np.float32), "var": (rng.random(c) + 0.5).astype(np.float32),
              "m": rng.standard_normal((c, 1, 1)).astype(np.float32),
              "a": rng.standard_normal((c, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t1"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["t1", "scale", "bias", "mean", "var"], ["t2"], name="bn"),
             helper.make_node("Mul", ["t2", "m"], ["t3"], name="mul"),
             helper.make_node("Add", ["t3", "a"], ["y"], name="add")]
    shape = [1, c, 6, 6]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [1, 3, 6, 6])],
                              [helper.make_tensor_value_info(name, F32, shape) for name in ("t1", "t2", "t3", "y")],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sizes = tuple(shape)
    with ConsumerRun(device, tmp_path, model, {"x": x}) as run:
        want = run.expected
        xd, wd, bd = run.feed("x"), run.weight("w"), run.weight("b")
        md, vd, sd, bnd = (run.weight(key) for key in ("mean", "var", "scale", "bias"))
        mul_c = run.weight_seen_as("m", dmlbridge.broadcast_desc(run.plan.entries["m"], sizes))
        add_c = run.weight_seen_as("a", dmlbridge.broadcast_desc(run.plan.entries["a"], sizes))
        t1, t2, t3, y = (run.output(sizes, np.float32) for _ in range(4))
        conv = ops.convolution(xd, wd, bd, t1, strides=(1, 1), dilations=(1, 1), start=(1, 1), end=(1, 1),
                               groups=1)
        bn = ops.batch_normalization(t1, md, vd, sd, bnd, t2, epsilon=1e-5)
        mul = ops.element_wise("ELEMENT_WISE_MULTIPLY", t2, mul_c, t3)
        add = ops.element_wise("ELEMENT_WISE_ADD", t3, add_c, y)
        # graph inputs: 0 x, 1 w, 2 b, 3 mean, 4 var, 5 scale, 6 bias, 7 m, 8 a
        edges = [InputEdge(0, 0, 0), InputEdge(1, 0, 1), InputEdge(2, 0, 2), *[InputEdge(3 + i, 1, 1 + i)
                                                                                for i in range(4)],
                 InputEdge(7, 2, 1), InputEdge(8, 3, 1)]
        inner = [IntermediateEdge(0, 0, 1, 0), IntermediateEdge(1, 0, 2, 0), IntermediateEdge(2, 0, 3, 0)]
        outputs = [OutputEdge(0, 0, 0), OutputEdge(1, 0, 1), OutputEdge(2, 0, 2), OutputEdge(3, 0, 3)]
        got = run.run_graph([conv, bn, mul, add], edges, inner, outputs)
        # Each output within the bound of its terms: the convolution's sum of 28 products, then normalization's
        # (x - mean) / sqrt(var + eps) * scale + bias (6 roundings), then one multiplication, then one addition.
        conv_model = helper.make_model(helper.make_graph(
            nodes[:1], "g", [helper.make_tensor_value_info("x", F32, [1, 3, 6, 6])],
            [helper.make_tensor_value_info("t1", F32, shape)],
            [numpy_helper.from_array(consts[k], k) for k in ("w", "b")]), opset_imports=[helper.make_opsetid("", 17)])
        per_channel = (1, c, 1, 1)
        gain = np.abs(consts["scale"] / np.sqrt(consts["var"] + np.float32(1e-5))).reshape(per_channel)
        sizes1 = magnitude(conv_model, {"x": x})["t1"].astype(np.float64)
        sizes2 = (sizes1 + np.abs(consts["mean"]).reshape(per_channel)) * gain + np.abs(consts["bias"]).reshape(
            per_channel)
        sizes3 = sizes2 * np.abs(consts["m"]).reshape(per_channel)
        sizes4 = sizes3 + np.abs(consts["a"]).reshape(per_channel)
        for index, (name, k, size) in enumerate((("t1", 28, sizes1), ("t2", 34, sizes2), ("t3", 35, sizes3),
                                                 ("y", 36, sizes4))):
            assert within(got[index], want[name], "sum", k=k, size=size), name


# --- what the consumer layouts replace ----------------------------------------------------------------------------

def _refused(device: dmlbridge.gpu.Device, operator: Any) -> bool:
    """Whether DirectML's validation refuses the operator desc (E_INVALIDARG from CreateOperator; nothing runs)."""
    try:
        dmlbridge.gpu.run_operator(device, operator.desc, [], [16])
    except dmlbridge.ComError as exc:
        return exc.call == "IDMLDevice::CreateOperator" and exc.hresult == 0x80070057
    return False


def test_the_onnx_shape_layouts_are_refused(device: dmlbridge.gpu.Device) -> None:
    """The layouts the ONNX shapes give (``prepare``'s, and what manifests before format 6 emitted), beside the same
    operators' other tensors: DirectML refuses each when the operator is created, which is why the consumer
    layouts exist. (Nothing is bound: validation comes first.)"""
    def desc(shape: tuple[int, ...], **options: Any) -> Any:
        return dmlbridge.prepare(np.zeros(shape, np.float32), **options).as_ctypes_tensor_desc()

    cases = {
        # a 1-D convolution's weight [M, C/g, k] beside its 4-D input, bias and output
        "conv 1-d weight": ops.convolution(desc((1, 4, 1, 9)), desc((6, 2, 3)), desc((1, 6, 1, 1)),
                                           desc((1, 6, 1, 7)), strides=(1, 1), dilations=(1, 1), start=(0, 0),
                                           end=(0, 0), groups=2),
        # ... and with leading 1s (min_dims=4)
        "conv 1-d weight, min_dims 4": ops.convolution(desc((1, 4, 1, 9)), desc((6, 2, 3), min_dims=4),
                                                       desc((1, 6, 1, 1)), desc((1, 6, 1, 7)), strides=(1, 1),
                                                       dilations=(1, 1), start=(0, 0), end=(0, 0), groups=2),
        # a Gemm's C [N] and [1, N] beside A [M, K] and the output [M, N]
        "gemm c [N]": ops.gemm(desc((3, 5)), desc((5, 4)), desc((4,)), desc((3, 4))),
        "gemm c [1, N]": ops.gemm(desc((3, 5)), desc((5, 4)), desc((4,), min_dims=2), desc((3, 4))),
        # Gather's data [5, 3] beside 2-D indices and the output [2, 2, 3]
        "gather data": ops.gather(desc((5, 3)), dmlbridge.prepare(np.zeros((1, 2, 2), np.int32))
                                  .as_ctypes_tensor_desc(), desc((2, 2, 3)), axis=1, index_dimensions=2),
    }
    refused = {name: _refused(device, operator) for name, operator in cases.items()}
    CONSUMERS.refusals += len(refused)
    for was_refused in refused.values():
        CONSUMERS.failed(not was_refused)
    assert all(refused.values()), refused
