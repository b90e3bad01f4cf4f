"""Quantized weights through DirectML's DEQUANTIZE and ELEMENT_WISE_DEQUANTIZE_LINEAR, held to ONNX Runtime's CPU
provider.

MatMulNBits at 2, 4 and 8 bits in blocks of 16 to 256 (K whole blocks and not) and QDQ models, made by ONNX
Runtime's own quantizer; blocked, per-axis and per-tensor DequantizeLinear and GatherBlockQuantized of every data
type, made by hand; FLOAT32 and FLOAT16 scales; at feature levels 6.4 and 6.2 (where 4-bit parts become 8-bit),
and a few at 6.0, 5.0 (FLOAT16 scales get a FLOAT32 copy), 2.1 (exactly 4 dimensions) and 1.0 (UINT8 only).
Each record's three descs, split and blocked, go as they are to the operator the record names: DEQUANTIZE from
6.3, ELEMENT_WISE_DEQUANTIZE_LINEAR below (which refuses every 4-bit split form, as its table says). Both write in
the scales' type and this runtime's FLOAT16 writes are not exact, so a FLOAT16 record's operator only has to run;
its values are compared through FLOAT32, from DirectML's reading of each part (weight and zero point through
DEQUANTIZE with a scale of 1, scales through CAST) combined on the CPU. The comparison is bit for bit, up to the
sign of zero (ONNX Runtime's identity product cannot show it). MatMulNBits also runs as DEQUANTIZE then GEMM on
DirectML, against ONNX Runtime's CPU MatMulNBits on the same input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from bindings_format import encode
from dml_runtime import TALLY, DirectML
from oracle import merged
from quantized_models import (
    GBQ_DATA_TYPES,
    INT_TYPES,
    MATMUL_CASES,
    dq_model,
    dq_scale_shape,
    gbq_inputs,
    gbq_model,
    identity_product,
    ints,
    node_output,
    quantized,
    with_float16_scales,
)

import dmlbridge
from dmlbridge import Target

DQ = [((6, 10), "tensor", 0, 0), ((6, 10), "axis", 1, 0), ((6, 10), "axis", 0, 0), ((6, 40), "block", 1, 16),
      ((6, 32), "block", 1, 16), ((40, 6), "block", 0, 16), ((3, 4, 20), "block", -1, 8)]


def _cases() -> list[tuple[str, Any, str, np.ndarray, Target, dict[str, Any]]]:
    """(case name, model, node key, ONNX Runtime's output, target, facts)."""
    out = []
    for index, (k, n, bits, block, symmetric) in enumerate(MATMUL_CASES):
        model = quantized(k, n, bits, block, symmetric)
        (node,) = model.graph.node
        want = identity_product(model, k).T.copy()
        for level in ("6.4", "6.2", *(("5.0", "2.1") if index < 3 else ())):
            out.append((f"mm{k}x{n}b{bits}q{block}{'s' if symmetric else ''}@{level}", model, node.name, want,
                        Target(level), {"matmul": (k, n, block)}))
    model = quantized(72, 8, 4, 16, False)  # FLOAT16 scales
    (node,) = model.graph.node
    fp16 = with_float16_scales(model)
    for value in (*fp16.graph.input, *fp16.graph.output):  # (A and Y in the scales' type, as MatMulNBits wants)
        value.type.tensor_type.elem_type = 10
    session = ort.InferenceSession(fp16.SerializeToString(), providers=["CPUExecutionProvider"])
    want16 = session.run(None, {"A": np.eye(72, dtype=np.float16)})[0].T.copy()
    for level in ("6.4", "6.0", "5.0"):  # (below 6.0 the scales get a FLOAT32 copy)
        out.append((f"mm-float16-scales@{level}", fp16, node.name, want16, Target(level), {}))
    for symmetric in (False, True):
        model = quantized(72, 8, 4, 16, symmetric, qdq=True)
        dq = next(node for node in model.graph.node if node.op_type == "DequantizeLinear")
        out.append((f"qdq{'s' if symmetric else ''}", model, dq.name, node_output(model, dq), Target(), {}))
    rng = np.random.default_rng(7)
    for type_name in INT_TYPES:
        for shape, granularity, axis, block in DQ:
            scale_shape = dq_scale_shape(shape, granularity, axis, block)
            x = ints(rng, type_name, shape)
            scale = (rng.random(scale_shape) + 0.01).astype(np.float32)
            for with_zp in (False, True):
                zp = ints(rng, type_name, scale_shape) if with_zp else None
                model, node = dq_model(x, scale, zp, axis=axis, **({"block_size": block} if block else {}))
                name = f"dq-{type_name}-{'x'.join(map(str, shape))}-{granularity}{axis}{'-zp' if with_zp else ''}"
                out.append((name, model, "dq", node_output(model, node), Target(), {}))
    for data_type in GBQ_DATA_TYPES:
        for length in (40, 64):
            data, scales16, zp, bits = gbq_inputs(rng, data_type, length)
            for with_zp in (False, True):
                model, node = gbq_model(data, scales16, zp if with_zp else None, bits, 16, 1, 0)
                out_type = 1 if scales16.dtype == np.float32 else 10
                want = node_output(model, node, out_type)
                for level in ("6.4", "6.2", *(("1.0",) if data_type == "uint8 bits 8" else ())):
                    name = f"gbq-{data_type.replace(' ', '')}-{length}{'-zp' if with_zp else ''}@{level}"
                    out.append((name, model, "gbq", want, Target(level), {}))
    return out


def logical(values: np.ndarray, record: Any, form: str, sizes: tuple[int, ...]) -> np.ndarray:
    """DirectML's output over the record's DML sizes as the logical weight: padding 1s dropped, the split axis
    joined, the padding of the last block cut (the layout rule, written here again)."""
    shape, axis = tuple(record.shape), record.axis
    split = form == "split" and record.granularity == "block" and record.block_size > 1
    rank = len(shape) + split
    values = values.reshape(sizes[len(sizes) - rank:]) if rank else values.reshape(())
    if split:
        values = values.reshape(*values.shape[:axis], -1, *values.shape[axis + 2:])
    if axis is not None and record.granularity == "block":
        values = values[(slice(None),) * axis + (slice(0, shape[axis]),)]
    return np.ascontiguousarray(values).reshape(shape)


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """Bit for bit up to the sign of zero, NaN equal to NaN."""
    return got.shape == want.shape and got.dtype == want.dtype and bool(np.all((got == want) | (np.isnan(got) &
                                                                                                   np.isnan(want))))


@pytest.fixture(scope="module")
def readings(directml: DirectML, tmp_path_factory: pytest.TempPathFactory) -> tuple[list, Any, dict, Path]:
    folder = tmp_path_factory.mktemp("quantized")
    lists, records, inputs = {}, [], {}
    for case, model, key, want, target, facts in _cases():
        plan = dmlbridge.convert_model(model, folder / case.replace("@", "-at-"), target=target, progress=False)
        record = plan.quantized[key]
        assert record.skipped is None, (case, record.skipped)
        lists[case] = dmlbridge.binding_list(plan)
        plan.close()
        records.append((case, record, want, facts))
        if "matmul" in facts and target.feature_level == dmlbridge.FeatureLevel.FL_6_4 and \
                facts["matmul"][0] % facts["matmul"][2] == 0:
            k = facts["matmul"][0]
            a = np.random.default_rng(k).standard_normal((3, k)).astype(np.float32)
            (folder / f"{case}.a.bin").write_bytes(a.tobytes())
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            inputs[case] = (a, session.run(None, {"A": a})[0])
    gemm = []
    for case, record, _, _ in records:
        if case in inputs:
            gemm += ["--gemm", f"{encode(case + ':' + record.key)}={folder / (case + '.a.bin')}"]
    text = merged(lists)
    (folder / "all.bindings").write_text(text, newline="\n")
    run = directml.run(text, gemm, directory=folder)
    return records, run, inputs, folder


def test_every_record_dequantizes_as_onnx_runtime_does(readings: tuple) -> None:
    records, run, _, _ = readings
    problems, compared = [], 0
    for case, record, want, _ in records:
        name = encode(f"{case}:{record.key}")
        forms = ["split"] + (["blocked"] if record.granularity == "block" and record.axis == len(record.shape) - 1
                             and record.operator == "DEQUANTIZE" else [])
        for form in forms:
            result = run.results.get(f"{name}/{form}")
            assert result is not None and result.operator == record.operator, (case, form)  # (the record's own)
            if not result.ok:
                problems.append(f"{case} {form}: DEQUANTIZE returned {result.hresult}")
                continue
            parts = {role: run.results[f"{name}/{form}/{role}"] for role in ("weight", "scales", "zero_points")}
            sizes = (record.parts()[0].sizes if form == "split" else record.blocked_form()[0].sizes)
            # Through FLOAT32: DirectML's reading of each part, combined here. The split form's parts share their
            # sizes; the blocked form's scales and zero points hold one value per block of the last axis.
            w, s, z = (parts[r].values().astype(np.float32) for r in ("weight", "scales", "zero_points"))
            if form == "blocked":  # (the weight's last axis is whole blocks: K' = k_blocks * block_size)
                blocks = sizes[-1] // record.block_size
                s, z = (np.repeat(v.reshape(-1, blocks), record.block_size, axis=1).reshape(-1) for v in (s, z))
            combined = ((w - z) * s).astype(want.dtype)
            checks = [("parts", logical(combined, record, form, sizes))]
            if result.out_type == "FLOAT32":  # (DEQUANTIZE's own FLOAT16 writes are not exact here)
                checks.append(("DEQUANTIZE", logical(result.values(), record, form, sizes).astype(want.dtype)))
            else:
                assert result.out_type == "FLOAT16" and want.dtype == np.float16
            for how, got in checks:
                compared += 1
                if not _same(got, want):
                    bad = int(np.sum(got != want))
                    problems.append(f"{case} {form} through {how}: {bad} of {want.size} values differ")
    assert {r.operator for _, r, _, _ in records} == {"DEQUANTIZE", "ELEMENT_WISE_DEQUANTIZE_LINEAR"}
    TALLY.count("4 quantized", compared)
    TALLY.mismatches += len(problems)
    assert not problems, "\n".join(problems[:20])
    assert compared >= 2 * len(records)


def test_matmul_nbits_as_dequantize_then_gemm(readings: tuple) -> None:
    records, run, inputs, _ = readings
    checked = 0
    for case, record, want, _ in records:
        if case not in inputs:
            continue
        a, expected = inputs[case]  # (ONNX Runtime's CPU MatMulNBits on the same input: A x dequant(B)^T)
        result = run.results[encode(f"{case}:{record.key}")]
        assert result.kind == "gemm" and result.ok, (case, result.hresult)
        got = result.values().reshape(expected.shape)
        # Both sum K float32 products in orders of their own: each is within the classic bound of a float32 sum,
        # K * eps * sum(|a_k * w_k|) (Higham, Accuracy and Stability of Numerical Algorithms, 3.1), of the exact
        # sum, so the two are within twice that of each other. The weights are the same exactly (checked above).
        k = a.shape[1]
        bound = 2 * k * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(want).astype(np.float64).T)
        assert np.all(np.abs(got.astype(np.float64) - expected) <= bound), case
        checked += 1
    TALLY.count("4 quantized (GEMM)", checked)
    assert checked >= 5


def test_element_wise_dequantize_linear_takes_no_4_bit_type(readings: tuple, directml: DirectML) -> None:
    # DirectML's tensor-support table for ELEMENT_WISE_DEQUANTIZE_LINEAR lists no UINT4/INT4: the reason a record
    # below feature level 6.3 is made 8-bit and one at 6.3 or above names DEQUANTIZE. Run the 4-bit split forms
    # through it anyway: every one is refused.
    records, _, _, folder = readings
    names = {encode(f"{case}:{record.key}") for case, record, _, _ in records
             if record.parts()[0].dml_type.name in ("UINT4", "INT4")}
    assert len(names) > 20
    lines = [f"quantized {line.split()[1]} ELEMENT_WISE_DEQUANTIZE_LINEAR"
             if line.startswith("quantized ") and line.split()[1] in names else line
             for line in (folder / "all.bindings").read_text().splitlines()]
    run = directml.run("\n".join(lines) + "\n", directory=folder, counted=False)
    for name in names:
        result = run.results[f"{name}/split"]
        assert (result.operator, result.hresult) == ("ELEMENT_WISE_DEQUANTIZE_LINEAR", "0x80070057"), name
