"""Quantized records on their own terms: the target's rules for each part, what cannot be expressed (a
skipped record with its reason) and what no operator takes at a feature level, the blocked form, one weight shared
by two nodes, selection and tampered records, records of older manifest formats, a record claiming more than its
image, ``dequantize``'s memory, and fuzzed records (only DmlBridgeError). Their values are held to ONNX Runtime
in test_against_onnx_runtime.py."""

from __future__ import annotations

import copy
import json
import logging
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from budget import examples
from builders import model_of
from limits import ADDRESS_SPACE_LIMIT
from models import older
from onnx import helper, numpy_helper
from quantized_models import (
    OPSETS,
    check,
    dq_model,
    independent_dequantize,
    ints,
    node_output,
    quantized,
    same_bits,
    with_float16_scales,
)

import dmlbridge
from dmlbridge import DmlBridgeError, ManifestError, Target

logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)


# --- the target's rules, the manifest, what cannot be expressed ---------------------------------------------------


def test_target_rules(tmp_path: Path) -> None:
    model = quantized(72, 8, 4, 16, False)
    (node,) = model.graph.node
    fp16 = with_float16_scales(model)
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
    plan = dmlbridge.plan_model(model_of([x, s], [node8], opset_imports=OPSETS))
    assert "2-, 4- and 8-bit" in (plan.quantized["dq"].skipped or "")
    empty = copy.deepcopy(model)  # an omitted projection: B with no bytes
    b = next(t for t in empty.graph.initializer if t.name == node.input[1])
    b.CopyFrom(numpy_helper.from_array(np.zeros((0, 4, 8), np.uint8), b.name))
    assert "not UINT8" in (dmlbridge.plan_model(empty).quantized[node.name].skipped or "")
    f8 = numpy_helper.from_array(np.zeros((4, 32), np.float32).astype(ml_dtypes.float8_e4m3fn), "t")
    gbq = helper.make_node("GatherBlockQuantized", ["t", "i", "sc"], ["e"], "g8", domain="com.microsoft",
                           block_size=32, gather_axis=0, quantize_axis=1)
    plan = dmlbridge.plan_model(model_of([f8, numpy_helper.from_array(np.ones((4, 1), np.float32), "sc")], [gbq],
                                         opset_imports=OPSETS))
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
    model = model_of([*inits, reshaped], [gather, head], opset_imports=OPSETS)
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


@pytest.mark.parametrize("level", ["6.4", "6.2"])
def test_a_constant_read_as_weight_and_zero_points_gives_each_part_an_entry(tmp_path: Path, level: str) -> None:
    """DequantizeLinear(x, s, x): the record's zero points are a derived copy of x, so its three parts name three
    entries (which load_plan requires of every record); the values are ONNX Runtime's."""
    x = np.array([[1, -2, 3, 7], [-8, 0, 5, -1]], ml_dtypes.int4)
    node = helper.make_node("DequantizeLinear", ["x", "s", "x"], ["y"], "dq", axis=1, block_size=1)
    model = model_of({"x": x, "s": np.array([[0.5, 2.0, 1.0, 3.0], [1.5, 0.25, 4.0, 8.0]], np.float32)}, [node],
                     opset_imports=OPSETS)
    plan = check(model, tmp_path, {"dq": node_output(model, node)}, target=Target(level))
    q = plan.quantized["dq"]
    assert q.weight is not None and q.zero_points is not None
    assert (q.weight.key, q.zero_points.key) == ("x", "dq/zero_points")
    assert plan.entries["dq/zero_points"].origin == ("zero points of DequantizeLinear node 'dq', a copy of 'x' (its "
                                                     "weight too: each part has an entry of its own)")


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


# --- bounds, hostile records, the operator per feature level ------------------------------------------------------


def _hostile_record_script(manifest: Path) -> str:
    return ADDRESS_SPACE_LIMIT + textwrap.dedent(f"""
        import dmlbridge
        try:
            plan = dmlbridge.load_plan({str(manifest)!r})
            q = plan.quantized["dq"]
            q.dequantize()
        except dmlbridge.DmlBridgeError as exc:
            print("refused:", type(exc).__name__, exc)
    """)


def test_a_record_claiming_more_than_its_image_is_refused_before_allocating(tmp_path: Path) -> None:
    """A 5 KB manifest whose record claims [65535, 65537] elements over 4-byte entries by strides of 0: load_plan
    refuses it (a weight part is packed, so its elements are bytes of the file), and a record made so by hand is
    refused by dequantize's max_tensor_bytes before anything is allocated (in a child under a 2 GiB limit)."""
    if sys.platform == "win32":
        pytest.skip("RLIMIT_AS is POSIX")
    model, _ = dq_model(np.arange(4, dtype=np.int8), np.float32(0.5), np.int8(1))
    dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    doc = json.loads((tmp_path / "w.json").read_text())
    record = doc["quantized"][0]
    record["shape"] = record["sizes"] = [65535, 65537]
    for name in ("weight", "scales", "zero_points"):
        desc = record[name]["desc"]
        desc.update(DimensionCount=2, Sizes=[65535, 65537], Strides=[0, 0], TotalTensorSizeInBytes=4)
    (tmp_path / "w.json").write_text(json.dumps(doc))
    assert (tmp_path / "w.json").stat().st_size < 6000
    result = subprocess.run([sys.executable, "-c", _hostile_record_script(tmp_path / "w.json")], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0 and "refused: ManifestError" in result.stdout, (result.stdout, result.stderr)
    assert "weight" in result.stdout

    plan = dmlbridge.convert_model(model, tmp_path / "v", progress=False)
    q = plan.quantized["dq"]
    assert q.dequantize(max_tensor_bytes=16).tolist() == [-0.5, 0.0, 0.5, 1.0]
    with pytest.raises(dmlbridge.TensorTooLargeError, match="max_tensor_bytes=15"):
        q.dequantize(max_tensor_bytes=15)
    script = ADDRESS_SPACE_LIMIT + textwrap.dedent(f"""
        import dataclasses, dmlbridge
        plan = dmlbridge.load_plan({str(tmp_path / "v.json")!r})
        q = plan.quantized["dq"]
        sizes = (65535, 65537 * 4)
        parts = [dataclasses.replace(p, buffer_desc=p.buffer_desc._replace(sizes=sizes, strides=(0, 0)))
                 for p in q.parts()]
        huge = dataclasses.replace(q, shape=sizes, sizes=sizes, weight=parts[0], scales=parts[1],
                                   zero_points=parts[2])
        try:
            huge.dequantize()
        except dmlbridge.TensorTooLargeError as exc:
            print("refused:", exc)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "refused:" in result.stdout and "max_tensor_bytes" in result.stdout, (
        result.stdout, result.stderr)


def test_dequantize_memory_is_the_output_and_bounded_temporaries(tmp_path: Path) -> None:
    """A MatMulNBits weight of 64 MiB as float32 ([4096, 4096], 4 bits): dequantize's peak is the output, the
    parts' entries and bounded temporaries (measured in a child process)."""
    rng = np.random.default_rng(5)
    n = k = 4096
    block = 32
    blocks = k // block
    b = numpy_helper.from_array(rng.integers(0, 256, (n, blocks, block // 2)).astype(np.uint8), "B")
    s = numpy_helper.from_array((rng.random((n, blocks)) + 0.01).astype(np.float32), "S")
    z = numpy_helper.from_array(rng.integers(0, 256, (n, blocks // 2)).astype(np.uint8), "Z")
    node = helper.make_node("MatMulNBits", ["A", "B", "S", "Z"], ["Y"], "mm", domain="com.microsoft", K=k, N=n,
                            bits=4, block_size=block)
    model = model_of([b, s, z], [node], opset_imports=OPSETS)
    dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    script = textwrap.dedent(f"""
        import dmlbridge

        def status(field):  # (VmHWM: this process' peak; ru_maxrss would count the forked parent's)
            with open("/proc/self/status") as f:
                return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

        plan = dmlbridge.load_plan({str(tmp_path / "w.json")!r})
        q = plan.quantized["mm"]
        before = status("VmRSS")
        values = q.dequantize()
        print(values.nbytes, status("VmHWM") - before)
    """)
    if not sys.platform.startswith("linux"):
        pytest.skip("the measurement reads Linux's /proc/self/status")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    out, grown = map(int, result.stdout.split())
    entries = n * blocks * (block // 2 + 4 + 1)  # B, the scales and the zero points, read whole
    assert out == 64 << 20
    assert grown < out + entries + (48 << 20), f"dequantize grew the peak by {grown >> 20} MiB"


def test_what_no_operator_takes_at_the_level_is_skipped() -> None:
    """INT8 weights at feature level 1.0 (ELEMENT_WISE_DEQUANTIZE_LINEAR reads UINT8 only there), 5 dimensions
    where it takes exactly 4, and min_dims 5 there: skipped records with the reason; UINT8 is described."""
    signed, _ = dq_model(np.zeros((4, 8), np.int8), np.ones(8, np.float32), None, axis=1)
    assert "reads UINT8" in (dmlbridge.plan_model(signed, target=Target("1.0")).quantized["dq"].skipped or "")
    unsigned, _ = dq_model(np.zeros((4, 8), np.uint8), np.ones(8, np.float32), None, axis=1)
    q = dmlbridge.plan_model(unsigned, target=Target("1.0")).quantized["dq"]
    assert q.skipped is None and q.sizes == (1, 1, 4, 8) and q.operator == "ELEMENT_WISE_DEQUANTIZE_LINEAR"
    deep, _ = dq_model(np.zeros((2, 2, 2, 32), np.uint8), np.ones((2, 2, 2, 2), np.float32), None, axis=3,
                       block_size=16)
    assert "exactly 4" in (dmlbridge.plan_model(deep, target=Target("2.1")).quantized["dq"].skipped or "")
    assert "exactly 4" in (dmlbridge.plan_model(unsigned, target=Target("2.1"), min_dims=5).quantized["dq"].skipped
                           or "")


def test_records_of_older_formats_report_no_operator(tmp_path: Path) -> None:
    model = quantized(72, 8, 4, 16, False)
    name = model.graph.node[0].name
    dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    doc = json.loads((tmp_path / "w.json").read_text())
    (tmp_path / "w.json").write_text(json.dumps(older(doc, 4)))
    plan = dmlbridge.load_plan(tmp_path / "w.json")
    q = plan.quantized[name]
    assert q.operator is None and q.skipped is None
    plan.verify(model)  # (a fresh view names its operator; the old record's lack of one is no difference)
    assert [p.sizes for p in q.blocked_form()] == [(8, 80), (8, 5), (8, 5)]


# --- fuzzing the records: what load_plan accepts, dequantize and blocked_form read without another error ----------

_POOL: list[Any] = [0, 1, -1, 2, 3, 4, 5, 7, 8, 12, 13, 16, 255, 65535, 65537, 2**31, 2**32, 2**63, None, True,
                    False, "", "x", "B", "UINT4", "DEQUANTIZE", "ELEMENT_WISE_DEQUANTIZE_LINEAR", "FLOAT16", "FLOAT",
                    "block", "axis", "tensor", "MatMulNBits", [], [0], [1, 1], [65535, 65537], [0, 0, 0], {}]


def _fuzz_model() -> onnx.ModelProto:
    """A MatMulNBits (zero points and a bias), a per-axis INT8 and a blocked INT4 DequantizeLinear (not whole
    blocks), a GatherBlockQuantized: every kind of record and part."""
    rng = np.random.default_rng(11)
    model = quantized(40, 4, 4, 16, False)
    (mm,) = model.graph.node
    model.graph.initializer.append(numpy_helper.from_array(np.arange(4, dtype=np.float32), "bias"))
    mm.input.extend(["", "bias"])
    x8, s8 = ints(rng, "int8", (3, 5)), (rng.random(5) + 0.1).astype(np.float32)
    x4, s4 = ints(rng, "int4", (2, 20)), (rng.random((2, 3)) + 0.1).astype(np.float32)
    table, ts = rng.integers(0, 256, (4, 16)).astype(np.uint8), (rng.random((4, 2)) + 0.1).astype(np.float32)
    model.graph.initializer.extend([numpy_helper.from_array(v, k) for k, v in (
        ("x8", x8), ("s8", s8), ("z8", ints(rng, "int8", (5,))), ("x4", x4), ("s4", s4), ("table", table),
        ("ts", ts), ("ids", np.arange(4, dtype=np.int64)))])
    model.graph.node.extend([
        helper.make_node("DequantizeLinear", ["x8", "s8", "z8"], ["y8"], "dq8", axis=1),
        helper.make_node("DequantizeLinear", ["x4", "s4"], ["y4"], "dq4", axis=1, block_size=8),
        helper.make_node("GatherBlockQuantized", ["table", "ids", "ts"], ["e"], "gbq", domain="com.microsoft",
                         bits=4, block_size=16, gather_axis=0, quantize_axis=1)])
    del model.opset_import[:]
    model.opset_import.extend(OPSETS)
    return model


def _mutate(rng: random.Random, doc: dict[str, Any]) -> None:
    records = doc["quantized"]
    for _ in range(rng.randint(1, 3)):
        record = rng.choice(records)
        how = rng.random()
        if how < 0.15:  # a part, or a whole field, from another record
            other = rng.choice(records)
            name = rng.choice(list(other))
            record[name] = copy.deepcopy(other[name])
            continue
        if not record:
            continue
        target: Any = record
        key = rng.choice(list(record))
        while isinstance(target[key], dict) and target[key] and rng.random() < 0.7:
            target = target[key]
            key = rng.choice(list(target))
        value = target.get(key)
        if how < 0.25:
            target.pop(key, None)
        elif isinstance(value, bool) or value is None or how < 0.55:
            target[key] = copy.deepcopy(rng.choice(_POOL))
        elif isinstance(value, int):
            target[key] = rng.choice([value + 1, value - 1, value * 2, value * 65536, value // 2, 0])
        elif isinstance(value, list) and value:
            changed = list(value)
            at = rng.randrange(len(changed))
            changed[at] = rng.choice([0, 1, 2, 65535, 2**32]) if rng.random() < 0.6 else changed[at]
            target[key] = changed if rng.random() < 0.7 else [*changed, 1] if rng.random() < 0.5 else [1, *changed]
        else:
            target[key] = copy.deepcopy(rng.choice(_POOL))


@pytest.mark.parametrize("level", ["6.4", "5.0"])
def test_fuzzed_quantized_records_raise_only_dmlbridge_errors(tmp_path: Path, level: str) -> None:
    """Mutated quantized sections of a manifest (fields changed, dropped, swapped between records): load_plan
    refuses them or what it accepts dequantizes (within a max_tensor_bytes) and gives its blocked form, with no
    exception but a DmlBridgeError."""
    model = _fuzz_model()
    dmlbridge.convert_model(model, tmp_path / "w", target=Target(level), progress=False)
    doc = json.loads((tmp_path / "w.json").read_text())
    assert len([r for r in doc["quantized"] if r["skipped"] is None]) == 4
    rng = random.Random(f"quantized {level}")
    outcomes = {"refused": 0, "accepted": 0}
    runs = examples(200)
    for _ in range(runs):
        mutated = copy.deepcopy(doc)
        _mutate(rng, mutated)
        (tmp_path / "w.json").write_text(json.dumps(mutated))
        try:
            plan = dmlbridge.load_plan(tmp_path / "w.json")
        except ManifestError:
            outcomes["refused"] += 1
            continue
        except DmlBridgeError as exc:  # pragma: no cover - would be a bug: load_plan raises ManifestError only
            pytest.fail(f"{type(exc).__name__}: {exc}")
        outcomes["accepted"] += 1
        for q in plan.quantized.values():
            for read in (lambda q=q: q.dequantize(max_tensor_bytes=1 << 24), q.blocked_form):
                try:
                    read()
                except DmlBridgeError:
                    pass
        plan.close()
    assert outcomes["refused"] > runs * 0.5 and outcomes["accepted"], outcomes
