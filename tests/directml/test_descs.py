"""Descs as callers make them: ``prepare_into`` at 16-byte offsets inside one large buffer, caller strides and
broadcast (stride 0) descs; DirectML's validator as a check on dmlbridge's size rule; and descs broken on purpose,
which DirectML must refuse or misread (the suite can fail)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from bindings_format import HEADER, desc_fields, encode
from dml_runtime import TALLY, DirectML
from oracle import compare, expected_output

import dmlbridge

DTYPES = {"FLOAT32": np.float32, "FLOAT16": np.float16, "UINT32": np.uint32, "UINT16": np.uint16, "UINT8": np.uint8,
          "INT32": np.int32, "INT16": np.int16, "INT8": np.int8, "FLOAT64": np.float64, "UINT64": np.uint64,
          "INT64": np.int64, "UINT4": ml_dtypes.uint4, "INT4": ml_dtypes.int4}


def _values(dml_type: str, count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(DTYPES[dml_type])
    if dml_type.endswith("4"):
        low = -8 if dml_type == "INT4" else 0
        return rng.integers(low, low + 16, count).astype(dtype)
    if dtype.kind == "f":
        return (rng.standard_normal(count) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)


def _layouts(dml_type: str) -> list[tuple[str, np.ndarray, tuple[int, ...] | None]]:
    """(name, logical array, strides): packed vectors of many lengths, padded rows, column-major, broadcast."""
    out: list[tuple[str, np.ndarray, tuple[int, ...] | None]] = []
    for n in (1, 2, 3, 5, 7, 8, 9, 16, 17, 33, 255):
        out.append((f"packed {n}", _values(dml_type, n, n), None))
    grid = _values(dml_type, 15, 99).reshape(3, 5)
    out.append(("rows of 7", grid, (7, 1)))
    out.append(("column-major", grid, (1, 3)))
    out.append(("8-d strided", _values(dml_type, 24, 7).reshape(1, 2, 1, 2, 1, 1, 2, 3), (99, 24, 40, 8, 3, 5, 3, 1)))
    row = _values(dml_type, 5, 5)
    out.append(("broadcast rows", np.broadcast_to(row, (4, 5)), (0, 1)))
    column = _values(dml_type, 3, 3)
    out.append(("broadcast columns", np.broadcast_to(column[:, None], (3, 6)), (1, 0)))
    out.append(("one value everywhere", np.broadcast_to(row[:1], (2, 3, 4)), (0, 0, 0)))
    return out


@pytest.fixture(scope="module")
def placed(directml: DirectML, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, object, str, Path]:
    """Every DML type in every layout, written by prepare_into into one buffer at offsets 16 bytes apart."""
    folder = tmp_path_factory.mktemp("descs")
    cases = [(t, name, array, strides, dmlbridge.Target()) for t in DTYPES for name, array, strides in _layouts(t)]
    # INT64 and UINT64 emulated on a device without 64-bit types: 8-byte elements read as INT32 / UINT32 through
    # doubled strides (their TotalTensorSizeInBytes covers the high halves too, by design).
    no_64 = dmlbridge.Target(supported={"FLOAT32", "INT32", "UINT32"})
    cases += [(f"emulated {t}", f"packed {n}", np.arange(n, dtype=DTYPES[t]), None, no_64)
              for t in ("INT64", "UINT64") for n in (1, 2, 3, 8, 9)]
    sizes = [dmlbridge.prepare(array, strides=strides, target=target).total_tensor_size_in_bytes
             for _, _, array, strides, target in cases]
    upload = bytearray(sum(-(-s // 16) * 16 + 16 for s in sizes))
    rows, offset, placed = [], 16, {}
    for (dml_type, name, array, strides, target), size in zip(cases, sizes, strict=True):
        t = dmlbridge.prepare_into(upload, offset, array, strides=strides, target=target)
        d = t.desc()
        key = f"{dml_type}/{name}"
        rows.append(f"tensor {encode(key)} 0 {offset} " + desc_fields(
            t.dml_type.name, tuple(d["Sizes"]), None if d["Strides"] is None else tuple(d["Strides"]),
            d["TotalTensorSizeInBytes"], d["Flags"], d["GuaranteedBaseOffsetAlignment"]) + " gpu")
        placed[key] = (array, t, offset)
        offset += -(-size // 16) * 16 + 16 * (len(placed) % 2)  # 16-byte offsets, not all 32-byte ones
    (folder / "upload.bin").write_bytes(bytes(upload))
    text = "\n".join([HEADER, "target 6.4", f"buffer 0 upload.bin {len(upload)} gpu", *rows]) + "\n"
    run = directml.run(text, ["--probe-sizes"], directory=folder)  # (each tensor read, then its size probed)
    return placed, (run, run), text, folder


def test_prepare_into_at_16_byte_offsets_with_caller_strides_and_broadcasts(placed: tuple) -> None:
    cases, (_, reading), _, _ = placed
    problems = []
    assert any(offset % 32 == 16 for _, _, offset in cases.values())
    for key, (array, prepared, _) in cases.items():
        result = reading.results[encode(key)]
        verdict = compare(result, expected_output(array, prepared.dml_type.name), "2 placed descs", key)
        problems += verdict.mismatched
    assert not problems, "\n".join(problems[:20])


def test_directml_accepts_no_smaller_size_than_dmlbridge_writes(placed: tuple) -> None:
    cases, (probing, _), _, _ = placed
    smaller = []
    for key, (_, prepared, _) in cases.items():
        smallest = probing.probes[encode(key)]
        assert smallest > 0, f"{key}: DirectML refused the desc dmlbridge wrote"
        rule = dmlbridge.calc_buffer_tensor_size(prepared.dml_type, prepared.sizes, prepared.strides)
        if key.startswith("emulated"):  # (the high half of the last element is past the desc's reach)
            assert prepared.total_tensor_size_in_bytes == rule + 4 and smallest == rule, key
            continue
        assert rule == prepared.total_tensor_size_in_bytes
        if smallest != rule:
            smaller.append(f"{key}: DirectML takes {smallest}, dmlbridge writes {rule}")
        TALLY.probe_equal += smallest == rule
    # DirectML's own minimum is DirectMLX's bit-based rule, rounded up to 4 bytes: the very rule dmlbridge uses.
    assert not smaller, "\n".join(smaller)


def test_a_desc_one_byte_short_is_refused(placed: tuple, directml: DirectML) -> None:
    _, _, text, folder = placed
    broken, short = [], {}
    for line in text.splitlines():
        words = line.split(" ")
        if words[0] == "tensor" and len(broken) < 40:
            words[-3] = str(int(words[-3]) - 1)  # (TotalTensorSizeInBytes, before the alignment and READS_ON)
            short[words[1]] = line
        broken.append(" ".join(words))
    run = directml.run("\n".join(broken) + "\n", directory=folder, counted=False)
    refused = [name for name in short if run.results[name].hresult != "0x00000000"]
    assert refused == list(short), f"accepted one byte short: {sorted(set(short) - set(refused))[:5]}"


def test_a_wrong_stride_reads_other_values(placed: tuple, directml: DirectML) -> None:
    cases, _, text, folder = placed
    lines, keys = [], []
    for line in text.splitlines():
        words = line.split(" ")
        if words[0] == "tensor" and "rows%20of%207" in words[1]:
            words[8] = "6,1"  # (the rows are 7 apart; 6 reads across them)
            keys.append(words[1])
        lines.append(" ".join(words))
    run = directml.run("\n".join(lines) + "\n", directory=folder, counted=False)
    for name in keys:
        key = name.replace("%20", " ")
        array, prepared, _ = cases[key]
        verdict = compare(run.results[name], expected_output(array, prepared.dml_type.name), None, key)
        assert verdict.mismatched, f"{key}: a wrong stride went unnoticed"
    assert len(keys) == len(DTYPES)
    assert any(key.startswith("emulated") for key in cases)
