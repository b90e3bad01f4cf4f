"""Quantized weights against an oracle nobody here wrote: ONNX Runtime's quantizer makes the MatMulNBits and QDQ
models, its CPU provider computes what they mean (MatMulNBits fed an identity matrix, DequantizeLinear's output,
GatherBlockQuantized of every index), and both ``dequantize()`` and a per-element decode written here, which reads
only the buffer files through the three descs, must give it bit for bit (the identity product cannot show the
sign of a zero: there +0 and -0 are equal)."""

from __future__ import annotations

import copy
import json
import logging
import math
import struct
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx

# The oracle is part of the test extra: a missing one fails here, never skips the module (the quantizer needs
# onnx-ir, also in the test extra).
import pytest
from onnx import TensorProto, helper, numpy_helper
from quantized_models import (
    INT_TYPES,
    OPSETS,
    dq_model,
    gbq_model,
    identity_product,
    ints,
    node_output,
    quantized,
)

import dmlbridge
from dmlbridge import ManifestError, Target

logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)



# --- the independent decode: the buffer files, the descs, one element at a time --------------------------------

_FORMATS = {1: "<f", 2: "<e", 5: "<B", 8: "<b"}  # FLOAT32, FLOAT16, UINT8, INT8 (DML_TENSOR_DATA_TYPE values)


def _element(data: bytes, dml: int, position: int) -> int | float:
    if dml in (12, 13):  # UINT4, INT4: two per byte, the first in the low nibble
        nibble = (data[position // 2] >> (4 * (position % 2))) & 0xF
        return nibble - 16 if dml == 13 and nibble >= 8 else nibble
    fmt = _FORMATS[dml]
    size = struct.calcsize(fmt)
    return struct.unpack_from(fmt, data, position * size)[0]  # type: ignore[no-any-return]


def read_part(directory: Path, doc: dict[str, Any], part: dict[str, Any]) -> np.ndarray:
    """A part's values over its sizes, read from its buffer file through its desc, element by element."""
    desc = part["desc"]
    data = (directory / doc["buffers"][part["buffer"]]["file"]).read_bytes()[part["offset"]:]
    data = data[: desc["TotalTensorSizeInBytes"]]
    sizes = desc["Sizes"]
    strides = desc["Strides"] or [math.prod(sizes[k + 1 :]) for k in range(len(sizes))]
    out = np.empty(sizes, dtype=np.float64)
    for index in np.ndindex(*sizes):
        out[index] = _element(data, desc["DataType"], sum(i * s for i, s in zip(index, strides, strict=True)))
    return out


def independent_dequantize(directory: Path, record: dict[str, Any]) -> np.ndarray:
    doc = json.loads((directory / "w.json").read_text())
    w, s, z = (read_part(directory, doc, record[name]) for name in ("weight", "scales", "zero_points"))
    out_type = {"FLOAT": np.float32, "FLOAT16": np.float16}[record["output_type"]]
    values = ((w - z).astype(np.float32) * s.astype(np.float32)).astype(out_type)
    shape, axis, block = record["shape"], record["axis"], record["block_size"]
    split = record["granularity"] == "block" and block > 1
    rank = len(shape) + split
    values = values.reshape(values.shape[values.ndim - rank :])
    if split:
        values = values.reshape(*values.shape[:axis], -1, *values.shape[axis + 2 :])
        values = values[(slice(None),) * axis + (slice(0, shape[axis]),)]
    return np.ascontiguousarray(values).reshape(shape)


def same_bits(a: np.ndarray, b: np.ndarray, signed_zero: bool = True) -> bool:
    """Bit for bit; without ``signed_zero``, -0 counts as +0."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not signed_zero:
        a, b = a.copy(), b.copy()
        a[a == 0], b[b == 0] = 0, 0
    return bool(np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}")))


def check(model: onnx.ModelProto, directory: Path, expected: dict[str, np.ndarray], target: Target | None = None,
          signed_zero: bool = True, **kw: Any) -> dmlbridge.UploadPlan:
    """Convert, load, and hold every quantized weight to ``expected`` (by node key) both ways."""
    dmlbridge.convert_model(model, directory / "w", target=target or Target(), progress=False, checksum=True, **kw)
    plan = dmlbridge.load_plan(directory / "w.json", verify=True)
    plan.verify(model)
    doc = json.loads((directory / "w.json").read_text())
    records = {r["key"]: r for r in doc["quantized"]}
    assert set(plan.quantized) == set(expected) == set(records)
    for key, want in expected.items():
        q = plan.quantized[key]
        assert q.skipped is None, q.skipped
        assert same_bits(q.dequantize(), want, signed_zero), key
        assert same_bits(independent_dequantize(directory, records[key]), want, signed_zero), key
        assert len(q.sizes or ()) >= plan.min_dims
    return plan


# --- models made by ONNX Runtime's quantizer ----------------------------------------------------------------------


MATMUL_CASES = [  # (K, N, bits, block_size, symmetric): K whole blocks and not, an odd number of blocks
    (64, 8, 4, 16, False), (72, 8, 4, 16, True), (80, 6, 4, 32, False), (96, 5, 4, 32, True),
    (256, 4, 4, 64, False), (300, 3, 4, 128, True), (512, 2, 4, 256, False), (48, 8, 8, 16, False),
    (72, 6, 8, 32, True), (64, 8, 2, 16, False), (112, 4, 2, 32, True),
]


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
    rng = np.random.default_rng(abs(hash((type_name, shape, axis, block))) % 1000)
    rank_axis = axis % len(shape)
    if granularity == "tensor":
        scale_shape: tuple[int, ...] = ()
    elif granularity == "axis":
        scale_shape = (shape[rank_axis],)
    else:
        scale_shape = tuple(-(-d // block) if i == rank_axis else d for i, d in enumerate(shape))
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


@pytest.mark.parametrize("data_type", ["uint8 bits 2", "uint8 bits 4", "uint8 bits 8", "int4", "uint4"])
@pytest.mark.parametrize("length", [40, 64])  # the quantized axis: not whole blocks of 16, and whole
def test_gather_block_quantized(tmp_path: Path, data_type: str, length: int) -> None:
    rng = np.random.default_rng(length)
    rows, block = 6, 16
    blocks = -(-length // block)
    scales = (rng.random((rows, blocks)) + 0.01).astype(np.float16 if data_type == "int4" else np.float32)
    if data_type.startswith("uint8"):
        bits = int(data_type.split()[-1])
        data = rng.integers(0, 256, (rows, length * bits // 8)).astype(np.uint8)
        zp = rng.integers(0, 256, (rows, -(-blocks * bits // 8))).astype(np.uint8)
    else:
        bits = 4
        data, zp = ints(rng, data_type, (rows, length)), ints(rng, data_type, (rows, blocks))
    for with_zp in (False, True):
        model, node = gbq_model(data, scales, zp if with_zp else None, bits, block, 1, 0)
        directory = tmp_path / f"zp{with_zp}"
        directory.mkdir()
        out = TensorProto.FLOAT if scales.dtype == np.float32 else TensorProto.FLOAT16
        check(model, directory, {"gbq": node_output(model, node, out)})
        below = tmp_path / f"fl62-zp{with_zp}"
        below.mkdir()
        check(model, below, {"gbq": node_output(model, node, out)}, Target("6.2"))


# --- the target's rules, the manifest, what cannot be expressed ---------------------------------------------------


def test_target_rules(tmp_path: Path) -> None:
    model = quantized(72, 8, 4, 16, False)
    (node,) = model.graph.node
    fp16 = copy.deepcopy(model)
    scales = next(t for t in fp16.graph.initializer if t.name == node.input[2])
    scales.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scales).astype(np.float16), scales.name))
    cases = {"6.3": Target("6.3"), "no-float16": Target(supported={"FLOAT32", "UINT8", "UINT4", "INT32"}),
             "min4": Target("6.4")}
    for name, target in cases.items():
        directory = tmp_path / name
        directory.mkdir()
        plan = dmlbridge.convert_model(fp16, directory / "w", target=target, progress=False,
                                       min_dims=4 if name == "min4" else None)
        q = plan.quantized[node.name]
        assert q.weight is not None and q.scales is not None
        assert q.weight.dml_type.name == "UINT4" and q.output_type.name == "FLOAT16"
        assert q.scales.dml_type.name == ("FLOAT32" if name == "no-float16" else "FLOAT16")
        assert len(q.sizes or ()) == (4 if name == "min4" else 3)
        record = json.loads((directory / "w.json").read_text())["quantized"][0]
        assert q.dequantize().dtype == np.float16
        assert same_bits(q.dequantize(), independent_dequantize(directory, record))


def test_what_cannot_be_expressed_is_listed(tmp_path: Path) -> None:
    model = quantized(64, 4, 4, 16, False)
    (node,) = model.graph.node
    for change, why in (
        (lambda n: n.attribute.append(helper.make_attribute("weight_prepacked", 1)), "weight_prepacked"),
        (lambda n: n.input.extend([""] * (4 - len(n.input)) + ["g"]), "g_idx"),  # (input 4)
        (lambda n: n.input.__setitem__(1, "A"), "must be constants"),
    ):
        changed = copy.deepcopy(model)
        change(changed.graph.node[0])
        plan = dmlbridge.plan_model(changed)
        q = plan.quantized[node.name]
        assert q.skipped is not None and why in q.skipped and q.weight is None
        assert all(e.skipped is None for e in plan.entries.values())  # the constants are converted as ever
    x = numpy_helper.from_array(np.zeros((2, 4), np.float32).astype(ml_dtypes.float8_e4m3fn), "x")
    s = numpy_helper.from_array(np.float32(1), "s")
    node8 = helper.make_node("DequantizeLinear", ["x", "s"], ["y"], "dq")
    plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([node8], "g", [], [], [x, s]),
                                                  opset_imports=OPSETS))
    assert "2-, 4- and 8-bit" in (plan.quantized["dq"].skipped or "")
    empty = copy.deepcopy(model)  # an omitted projection: B with no bytes
    b = next(t for t in empty.graph.initializer if t.name == node.input[1])
    b.CopyFrom(numpy_helper.from_array(np.zeros((0, 4, 8), np.uint8), b.name))
    assert "not UINT8" in (dmlbridge.plan_model(empty).quantized[node.name].skipped or "")
    f8 = numpy_helper.from_array(np.zeros((4, 32), np.float32).astype(ml_dtypes.float8_e4m3fn), "t")
    gbq = helper.make_node("GatherBlockQuantized", ["t", "i", "sc"], ["e"], "g8", domain="com.microsoft",
                           block_size=32, gather_axis=0, quantize_axis=1)
    plan = dmlbridge.plan_model(helper.make_model(helper.make_graph(
        [gbq], "g", [], [], [f8, numpy_helper.from_array(np.ones((4, 1), np.float32), "sc")]), opset_imports=OPSETS))
    assert "float8 and float4 data" in (plan.quantized["g8"].skipped or "")
    deep = np.zeros((2, 2, 2, 2, 32), np.int8)  # blocked: 6 dimensions, more than feature level 2.0's 5
    model6, _ = dq_model(deep, np.ones((2, 2, 2, 2, 2), np.float32), None, axis=4, block_size=16)
    plan = dmlbridge.plan_model(model6, target=Target("2.0"))
    assert "dimensions" in (plan.quantized["dq"].skipped or "")


def test_selection_and_tampering(tmp_path: Path) -> None:
    model = quantized(72, 8, 4, 16, True)
    (node,) = model.graph.node
    excluded = dmlbridge.plan_model(model, exclude=["*/zero_points"])
    assert "not in the plan" in (excluded.quantized[node.name].skipped or "")
    dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    doc = json.loads((tmp_path / "w.json").read_text())
    assert [e["origin"] for e in doc["entries"] if e["key"] == f"{node.name}/zero_points"] == [
        f"zero points of MatMulNBits node {node.name!r} (the default, 8)"]
    damages = {
        "type": lambda r: r["weight"]["desc"].update(DataType=5),
        "offset": lambda r: r["scales"].update(offset=r["scales"]["offset"] + 256),
        "sizes": lambda r: r.update(sizes=[8, 4, 16]),
        "key": lambda r: r["zero_points"].update(key="nothing"),
        "strides": lambda r: r["scales"]["desc"].update(Strides=[5, 1, 1], TotalTensorSizeInBytes=4096),
        "shape": lambda r: r.update(shape=[8, 96]),  # (a K within the same blocks: verify() tells)
        "op": lambda r: r.update(op="MatMul"),
    }
    for name, damage in damages.items():
        bad = copy.deepcopy(doc)
        damage(bad["quantized"][0])
        (tmp_path / "w.json").write_text(json.dumps(bad))
        with pytest.raises(ManifestError):
            dmlbridge.load_plan(tmp_path / "w.json")
            pytest.fail(name)
    (tmp_path / "w.json").write_text(json.dumps(doc))
    assert dmlbridge.load_plan(tmp_path / "w.json").quantized[node.name].zero_scales is False


def test_blocked_form_is_what_onnx_runtimes_directml_ep_binds() -> None:
    model = quantized(80, 4, 4, 16, False)
    (node,) = model.graph.node
    q = dmlbridge.plan_model(model).quantized[node.name]
    weight, scales, zero_points = q.blocked_form()
    assert (weight.sizes, weight.strides, weight.dml_type.name) == ((4, 80), None, "UINT4")
    assert (scales.sizes, scales.strides) == ((4, 5), (5, 1))
    assert (zero_points.sizes, zero_points.strides) == ((4, 5), (6, 1))  # rows of 3 bytes: 6 nibbles, one spare


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


def test_a_shared_weight_gives_each_node_a_view_of_one_entry(tmp_path: Path) -> None:
    """Tied embeddings: one uint8 table read by a GatherBlockQuantized and by a MatMulNBits (bfloat16 scales,
    which the target widens to FLOAT32); float zero points cannot be rendered exactly and are listed."""
    rng = np.random.default_rng(3)
    vocab, dim, block = 8, 64, 32
    table = rng.integers(0, 256, (vocab, dim // 2)).astype(np.uint8)
    scales = (rng.random((vocab, dim // block)) + 0.1).astype(ml_dtypes.bfloat16)
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(scales, "scales"),
             numpy_helper.from_array(np.arange(vocab, dtype=np.int64), "ids")]
    gather = helper.make_node("GatherBlockQuantized", ["table", "ids", "scales"], ["e"], "embed",
                              domain="com.microsoft", bits=4, block_size=block, gather_axis=0, quantize_axis=1)
    head = helper.make_node("MatMulNBits", ["h", "table3", "scales"], ["logits"], "lm_head", domain="com.microsoft",
                            K=dim, N=vocab, bits=4, block_size=block)
    reshaped = numpy_helper.from_array(table.reshape(vocab, dim // block, block // 2), "table3")
    model = helper.make_model(helper.make_graph([gather, head], "g", [], [], [*inits, reshaped]),
                              opset_imports=OPSETS)
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    embed, lm_head = plan.quantized["embed"], plan.quantized["lm_head"]
    assert embed.scales is not None and lm_head.scales is not None
    assert embed.scales.key == lm_head.scales.key == "scales" and embed.scales.dml_type.name == "FLOAT32"
    assert embed.output_type.name == "BFLOAT16" and embed.dequantize().dtype == ml_dtypes.bfloat16
    assert (embed.weight.key if embed.weight else None) == "table"
    # The same values both ways: the embedding dequantized is the head's weight (its zero point 8 both).
    assert same_bits(embed.dequantize(), lm_head.dequantize())
    float_zp = copy.deepcopy(model)
    float_zp.graph.initializer.append(numpy_helper.from_array(np.zeros((vocab, 2), np.float32), "fzp"))
    float_zp.graph.node[1].input.append("fzp")
    assert "float zero points" in (dmlbridge.plan_model(float_zp).quantized["lm_head"].skipped or "")


def test_refusals_of_the_records_and_options() -> None:
    """A skipped record has no parts to give, an unwritten plan nothing to dequantize, a weight blocked on
    another axis than the last no blocked form, and drop_quantized_sources takes only True or False."""
    model = quantized(64, 4, 4, 16, False)
    (node,) = model.graph.node
    changed = copy.deepcopy(model)
    changed.graph.node[0].attribute.append(helper.make_attribute("weight_prepacked", 1))
    skipped = dmlbridge.plan_model(changed).quantized[node.name]
    with pytest.raises(dmlbridge.InvalidArgumentError, match="was skipped"):
        skipped.parts()
    with pytest.raises(dmlbridge.InvalidArgumentError, match="was not written"):
        dmlbridge.plan_model(model).quantized[node.name].dequantize()
    x, s = np.zeros((32, 4), np.int8), np.ones((2, 4), np.float32)
    dq, _ = dq_model(x, s, None, axis=0, block_size=16)
    with pytest.raises(dmlbridge.InvalidArgumentError, match="not blocked on its last axis"):
        dmlbridge.plan_model(dq).quantized["dq"].blocked_form()
    with pytest.raises(dmlbridge.InvalidArgumentError, match="drop_quantized_sources must be True or False"):
        dmlbridge.plan_model(model, drop_quantized_sources=1)  # type: ignore[arg-type]
    bad_attr = copy.deepcopy(model)
    bad_attr.graph.node[0].attribute[0].CopyFrom(helper.make_attribute("K", 64.0))
    assert "is not an integer" in (dmlbridge.plan_model(bad_attr).quantized[node.name].skipped or "")
