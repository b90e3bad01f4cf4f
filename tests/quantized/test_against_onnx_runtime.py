"""Quantized weights against an oracle nobody here wrote: ONNX Runtime's quantizer makes the MatMulNBits and QDQ
models, its CPU provider computes what they mean (MatMulNBits fed an identity matrix, DequantizeLinear's output,
GatherBlockQuantized of every index), and both ``dequantize()`` and a per-element decode written here, which reads
only the buffer files through the three descs, must give it bit for bit (the identity product cannot show the
sign of a zero: there +0 and -0 are equal)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest
from builders import model_of
from onnx import TensorProto, helper, numpy_helper
from quantized_models import (
    GBQ_DATA_TYPES,
    INT_TYPES,
    MATMUL_CASES,
    OPSETS,
    check,
    dq_model,
    dq_scale_shape,
    gbq_inputs,
    gbq_model,
    identity_product,
    independent_dequantize,
    ints,
    node_output,
    quantized,
    same_bits,
    static_quantized,
    with_float16_scales,
)

import dmlbridge
from dmlbridge import Target

# --- models made by ONNX Runtime's quantizer ----------------------------------------------------------------------


@pytest.mark.parametrize(("k", "n", "bits", "block", "symmetric"), MATMUL_CASES)
def test_matmul_nbits_from_the_quantizer(tmp_path: Path, k: int, n: int, bits: int, block: int,
                                         symmetric: bool) -> None:
    model = quantized(k, n, bits, block, symmetric)
    (node,) = model.graph.node
    assert node.op_type == "MatMulNBits"
    assert next(helper.get_attribute_value(a) for a in node.attribute if a.name == "bits") == bits
    want = identity_product(model, k).T.copy()
    for level in ("6.4", "6.2"):
        directory = tmp_path / level
        directory.mkdir()
        plan = check(model, directory, {node.name: want}, Target(level), signed_zero=False)
        q = plan.quantized[node.name]
        assert q.sizes == (n, -(-k // block), block) and q.shape == (n, k) and q.bits == bits
        four = level == "6.4" and bits == 4
        assert q.weight is not None and q.weight.key == (node.input[1] if four or bits == 8 else f"{node.name}/weight")
        assert q.weight.dml_type.name == ("UINT4" if level == "6.4" and bits in (2, 4) else "UINT8")
        if four:  # no second copy of B: the image is the model's constants and at most a default zero point
            assert len(plan.entries) == len(model.graph.initializer) + (0 if len(node.input) > 3 else 1)
            aligned = sum(-(-numpy_helper.to_array(t).nbytes // 256) * 256 for t in model.graph.initializer)
            assert plan.total_size <= aligned + 256
            at63 = dmlbridge.plan_model(model, target=Target("6.3"))
            assert at63.buffer_sizes == plan.buffer_sizes


@pytest.mark.parametrize("symmetric", [False, True])
def test_qdq_models_from_the_quantizer(tmp_path: Path, symmetric: bool) -> None:
    model = quantized(72, 8, 4, 16, symmetric, qdq=True)
    dq = next(node for node in model.graph.node if node.op_type == "DequantizeLinear")
    assert [node.op_type for node in model.graph.node] == ["DequantizeLinear", "MatMul"]
    plan = check(model, tmp_path, {dq.name: node_output(model, dq)})
    q = plan.quantized[dq.name]
    assert (q.op, q.granularity, q.axis, q.block_size, q.signed) == ("DequantizeLinear", "block", 0, 16, symmetric)
    assert q.weight is not None and q.weight.key == f"{dq.name}/weight"  # 72 is not whole blocks of 16: padded


# --- hand-built DequantizeLinear and GatherBlockQuantized ---------------------------------------------------------

DQ_CASES = [  # (x shape, granularity, axis, block)
    ((6, 10), "tensor", 0, 0), ((6, 10), "axis", 1, 0), ((6, 10), "axis", 0, 0), ((6, 40), "block", 1, 16),
    ((6, 32), "block", 1, 16), ((40, 6), "block", 0, 16), ((20, 3, 4), "block", 0, 8), ((3, 20, 4), "block", 1, 8),
    ((3, 4, 20), "block", -1, 8),
]


@pytest.mark.parametrize("type_name", list(INT_TYPES))
@pytest.mark.parametrize(("shape", "granularity", "axis", "block"), DQ_CASES)
def test_dequantize_linear(tmp_path: Path, type_name: str, shape: tuple[int, ...], granularity: str, axis: int,
                           block: int) -> None:
    rng = np.random.default_rng(zlib.crc32(repr((type_name, shape, axis, block)).encode()))  # (one seed a case)
    scale_shape = dq_scale_shape(shape, granularity, axis, block)
    x = ints(rng, type_name, shape)
    scale = (rng.random(scale_shape) + 0.01).astype(np.float32)
    for with_zp in (False, True):
        zp = ints(rng, type_name, scale_shape) if with_zp else None
        attrs = {"axis": axis, **({"block_size": block} if block else {})}
        model, node = dq_model(x, scale, zp, **attrs)
        directory = tmp_path / f"zp{with_zp}"
        directory.mkdir()
        plan = check(model, directory, {"dq": node_output(model, node)})
        q = plan.quantized["dq"]
        assert (q.granularity, q.signed) == (granularity, type_name.startswith("int"))
        assert (q.zero_points.key if q.zero_points else None) == ("z" if with_zp else "dq/zero_points")


@pytest.mark.parametrize("data_type", GBQ_DATA_TYPES)
@pytest.mark.parametrize("length", [40, 64])  # the quantized axis: not whole blocks of 16, and whole
def test_gather_block_quantized(tmp_path: Path, data_type: str, length: int) -> None:
    data, scales, zp, bits = gbq_inputs(np.random.default_rng(length), data_type, length)
    for with_zp in (False, True):
        model, node = gbq_model(data, scales, zp if with_zp else None, bits, 16, 1, 0)
        directory = tmp_path / f"zp{with_zp}"
        directory.mkdir()
        out = TensorProto.FLOAT if scales.dtype == np.float32 else TensorProto.FLOAT16
        check(model, directory, {"gbq": node_output(model, node, out)})
        below = tmp_path / f"fl62-zp{with_zp}"
        below.mkdir()
        check(model, below, {"gbq": node_output(model, node, out)}, Target("6.2"))


def test_older_1d_scales_and_a_bias(tmp_path: Path) -> None:
    """Scales stored 1-D ([N * k_blocks], older models) read the same; MatMulNBits' bias stays a plain entry,
    named by the record."""
    model = quantized(72, 8, 4, 16, False)
    (node,) = model.graph.node
    want = identity_product(model, 72).T.copy()
    scales = next(t for t in model.graph.initializer if t.name == node.input[2])
    scales.dims[:] = [scales.dims[0] * scales.dims[1]]
    bias = numpy_helper.from_array(np.arange(8, dtype=np.float32), "bias")
    model.graph.initializer.append(bias)
    node.input.extend(["", "bias"][len(node.input) - 4 :] if len(node.input) == 4 else ["", "", "bias"])
    plan = check(model, tmp_path, {node.name: want}, signed_zero=False)
    q = plan.quantized[node.name]
    assert q.bias == "bias" and plan.entries["bias"].skipped is None
    assert q.scales is not None and q.scales.strides == (5, 1, 0)


def test_dropping_the_sources_that_derived_entries_replace(tmp_path: Path) -> None:
    """Below feature level 6.3 a 4-bit B is written unpacked to UINT8: drop_quantized_sources leaves its packed
    bytes out (and the packed zero points), and the records, values and verification are the same."""
    model = quantized(72, 8, 4, 16, False)
    (node,) = model.graph.node
    want = identity_product(model, 72).T.copy()
    plan = check(model, tmp_path, {node.name: want}, Target("6.2"), signed_zero=False, drop_quantized_sources=True)
    assert node.input[1] not in plan.entries and node.input[3] not in plan.entries  # B and its zero points
    assert node.input[2] in plan.entries and plan.selection.drop_quantized_sources
    kept = dmlbridge.plan_model(model, target=Target("6.4"), drop_quantized_sources=True)
    assert set(kept.entries) == {t.name for t in model.graph.initializer}  # at 6.4 the views read B itself


def test_a_zero_point_of_another_shape_skips_its_node_only(tmp_path: Path) -> None:
    """A DequantizeLinear whose zero point is not of its scale's shape is a skipped record with the reason; the
    rest of the model converts, its other quantized weights described."""
    x = numpy_helper.from_array(np.arange(64, dtype=np.int8).reshape(4, 16), "x")
    s = numpy_helper.from_array(np.full(16, 0.5, np.float32), "s")
    z = numpy_helper.from_array(np.zeros(2, np.int8), "z")
    bad = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], "bad", axis=1)
    good = helper.make_node("DequantizeLinear", ["x", "s"], ["y2"], "good", axis=1)
    model = model_of([x, s, z], [bad, good], opset_imports=OPSETS)
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    assert "same shape" in (plan.quantized["bad"].skipped or "")
    assert plan.quantized["good"].skipped is None and all(e.skipped is None for e in plan.entries.values())
    assert same_bits(plan.quantized["good"].dequantize(), node_output(model, good))


@pytest.mark.parametrize("min_dims", [None, 4])
def test_blocked_form_of_blocks_of_one(tmp_path: Path, min_dims: int | None) -> None:
    """Blocks of 1 on the last axis (a valid opset-21 model): the blocked form is the weight and one scale per
    element, all of the weight's shape, and the values it reads are dequantize()'s."""
    x = np.array([[1, -2, 3, -4], [5, 6, -7, 8]], np.int8)
    scale = np.array([[0.5, 1, 2, 4], [8, 0.25, 3, 1]], np.float32)
    zp = np.array([[0, 1, 2, 3], [-1, -2, -3, -4]], np.int8)
    model, node = dq_model(x, scale, zp, axis=1, block_size=1)
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False, min_dims=min_dims)
    q = plan.quantized["dq"]
    weight, scales, zero_points = q.blocked_form()
    assert (weight.sizes, scales.sizes, zero_points.sizes) == ((2, 4), (2, 4), (2, 4))
    assert (weight.strides, scales.strides, zero_points.strides) == (None, (4, 1), (4, 1))
    w, s, z = (dmlbridge.decode(plan.read(p.key), p.dml_type, p.sizes, p.strides) for p in (weight, scales,
                                                                                            zero_points))
    values = ((w.astype(np.int32) - z.astype(np.int32)).astype(np.float32) * s).astype(np.float32)
    assert same_bits(values, q.dequantize()) and same_bits(values, node_output(model, node))


def test_a_block_longer_than_its_axis_is_one_block_in_plan_and_conversion(tmp_path: Path) -> None:
    """block_size 2^40 on an axis of 4: one block of the axis, described alike by plan_model and convert_model
    (no padding to 2^40 elements), and the values are ONNX Runtime's."""
    x = np.arange(8, dtype=np.int8).reshape(2, 4)
    model, node = dq_model(x, np.array([[0.5], [2.0]], np.float32), None, axis=1, block_size=2**40)
    planned = dmlbridge.plan_model(model).quantized["dq"]
    converted = dmlbridge.convert_model(model, tmp_path / "w", progress=False).quantized["dq"]
    assert planned.skipped is None and converted.skipped is None
    assert planned.to_json() == converted.to_json() and converted.block_size == 4 and converted.sizes == (2, 1, 4)
    assert same_bits(converted.dequantize(), node_output(model, node))


OPERATOR_LEVELS = [  # (level, operator, weight, scales DML type of FLOAT16 scales, dimensions)
    ("6.4", "DEQUANTIZE", "UINT4", "FLOAT16", 3), ("6.3", "DEQUANTIZE", "UINT4", "FLOAT16", 3),
    ("6.2", "ELEMENT_WISE_DEQUANTIZE_LINEAR", "UINT8", "FLOAT16", 3),
    ("6.0", "ELEMENT_WISE_DEQUANTIZE_LINEAR", "UINT8", "FLOAT16", 3),
    ("5.0", "ELEMENT_WISE_DEQUANTIZE_LINEAR", "UINT8", "FLOAT32", 3),
    ("3.0", "ELEMENT_WISE_DEQUANTIZE_LINEAR", "UINT8", "FLOAT32", 3),
    ("2.1", "ELEMENT_WISE_DEQUANTIZE_LINEAR", "UINT8", "FLOAT32", 4),
    ("1.0", "ELEMENT_WISE_DEQUANTIZE_LINEAR", "UINT8", "FLOAT32", 4),
]


@pytest.mark.parametrize(("level", "operator", "weight", "scales", "dims"), OPERATOR_LEVELS)
def test_each_record_names_the_operator_that_takes_it(tmp_path: Path, level: str, operator: str, weight: str,
                                                      scales: str, dims: int) -> None:
    """A MatMulNBits with FLOAT16 scales at each feature level: the operator of the level, parts of the types its
    tensor-support table lists there (FLOAT16 scales widened to a FLOAT32 copy below 6.0, exactly 4 dimensions
    below 3.0), the same values as at 6.4 both ways, the operator in the manifest."""
    model = with_float16_scales(quantized(72, 8, 4, 16, False))
    name = model.graph.node[0].name
    want = dmlbridge.plan_model(model)  # (6.4: the values, through the independent decode below)
    (tmp_path / "64").mkdir()
    dmlbridge.convert_model(model, tmp_path / "64" / "w", progress=False)
    reference = dmlbridge.load_plan(tmp_path / "64" / "w.json").quantized[name].dequantize()
    assert want.quantized[name].operator == "DEQUANTIZE"
    plan = check(model, tmp_path, {name: reference}, Target(level))
    q = plan.quantized[name]
    assert q.weight is not None and q.scales is not None and q.zero_points is not None and q.sizes is not None
    assert (q.operator, q.weight.dml_type.name, q.scales.dml_type.name, len(q.sizes)) == (operator, weight, scales,
                                                                                          dims)
    assert q.zero_points.dml_type is q.weight.dml_type and q.output_type.name == "FLOAT16"
    assert q.scales.key == (f"{name}/scales" if scales == "FLOAT32" else model.graph.node[0].input[2])
    record = json.loads((tmp_path / "w.json").read_text())["quantized"][0]
    assert record["operator"] == operator
    if operator == "DEQUANTIZE":
        assert [p.sizes for p in q.blocked_form()] == [(8, 80), (8, 5), (8, 5)]
    else:
        with pytest.raises(dmlbridge.InvalidArgumentError, match="split form"):
            q.blocked_form()


def test_com_microsoft_dequantize_linear_from_quantize_static(tmp_path: Path) -> None:
    """ONNX Runtime's quantize_static with 4-bit per-channel weights on an opset-12 model writes com.microsoft
    DequantizeLinear nodes: their constant weights are described (the values ONNX Runtime's CPU provider gives
    each node, bit for bit, both ways), the others skipped with the reason."""
    model = static_quantized()
    dqs = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert dqs and all(n.domain == "com.microsoft" for n in dqs)
    weights = {n.name: node_output(model, n) for n in dqs if n.input[0].endswith("_quantized")
               and numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == n.input[0])).dtype
               != np.int32}
    assert set(weights) == {"W_DequantizeLinear", "W2_DequantizeLinear"}
    dmlbridge.convert_model(model, tmp_path / "w", progress=False, checksum=True)
    plan = dmlbridge.load_plan(tmp_path / "w.json", verify=True)
    plan.verify(model)
    doc = {r["key"]: r for r in json.loads((tmp_path / "w.json").read_text())["quantized"]}
    assert set(plan.quantized) == {n.name for n in dqs}
    for key, want in weights.items():
        q = plan.quantized[key]
        assert q.skipped is None and q.weight is not None and q.weight.dml_type.name == "UINT4"
        assert q.origin.startswith("com.microsoft DequantizeLinear") and q.granularity == "axis"
        assert same_bits(q.dequantize(), want) and same_bits(independent_dequantize(tmp_path, doc[key]), want)
    for key, q in plan.quantized.items():
        if key not in weights:
            assert q.skipped and ("must be constants" in q.skipped or "INT32" in q.skipped), (key, q.skipped)
