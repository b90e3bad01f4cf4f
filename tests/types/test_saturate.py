"""``Target(int64="saturate")``: INT64/UINT64 written as 4-byte values clamped to the 32-bit range on targets
without 64-bit types, each entry counting the values it clamped (the bytes themselves are held to the
independent reference by the known-answer vectors)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from command_line import run
from onnx import helper, numpy_helper

import dmlbridge
from dmlbridge import InvalidArgumentError, ManifestError, Target

SATURATE = Target("2.0", int64="saturate", allow_lossy=True)
I64 = [2**63 - 1, -(2**63), 2**31, -(2**31) - 1, 2**31 - 1, -(2**31), 0, 5]
U64 = [2**64 - 1, 2**32, 2**32 - 1, 0]


def clamped_by_hand(values: list[int], low: int, high: int) -> tuple[list[int], int]:
    return [min(max(v, low), high) for v in values], sum(1 for v in values if not low <= v <= high)


def slice_model() -> onnx.ModelProto:
    """The silero-vad pattern: Slice with an INT64_MAX "to the end" sentinel, and a UINT64 constant (converted
    with upload="all": by default the Slice's inputs, read on the CPU, keep their INT64 and are not narrowed)."""
    inits = [numpy_helper.from_array(np.array([1], np.int64), "starts"),
             numpy_helper.from_array(np.array([2**63 - 1], np.int64), "ends"),
             numpy_helper.from_array(np.array(I64, np.int64), "many"),
             numpy_helper.from_array(np.array(U64, np.uint64), "unsigned")]
    node = helper.make_node("Slice", ["x", "starts", "ends"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [4])],
                              [helper.make_tensor_value_info("y", 1, [3])], inits)
    return helper.make_model(graph)


def test_saturate_needs_allow_lossy() -> None:
    with pytest.raises(InvalidArgumentError, match=r"int64='saturate' changes the values .*pass allow_lossy=True"):
        Target("2.0", int64="saturate")
    assert Target("2.0", int64="saturate", allow_lossy=True).describe()["int64"] == "saturate"


def test_the_mapping_saturates_only_where_64_bits_are_missing() -> None:
    assert dmlbridge.dml_type_for("INT64", SATURATE).name == "INT32"
    row = dmlbridge.mapping_table(SATURATE)[dmlbridge.OnnxDataType.UINT64]
    assert (row.dml_type.name if row.dml_type else None, row.conversion, row.lossless) == ("UINT32", "saturate", False)
    wide = Target("6.4", int64="saturate", allow_lossy=True)
    assert dmlbridge.mapping_table(wide)[dmlbridge.OnnxDataType.INT64].conversion == "native"


def test_prepare_clamps_and_counts() -> None:
    t = dmlbridge.prepare(np.array(I64, np.int64), target=SATURATE)
    values, count = clamped_by_hand(I64, -(2**31), 2**31 - 1)
    assert t.conversion == "saturate" and t.dml_type.name == "INT32" and t.clamped == count == 4
    assert t.data[: 4 * len(I64)].view("<i4").tolist() == values and t.to_numpy().tolist() == values
    u = dmlbridge.prepare(np.array(U64, np.uint64), target=SATURATE)
    values, count = clamped_by_hand(U64, 0, 2**32 - 1)
    assert u.clamped == count == 2 and u.data[:16].view("<u4").tolist() == values
    wide = Target("6.4", int64="saturate", allow_lossy=True)
    assert dmlbridge.prepare(np.array(I64, np.int64), target=wide).clamped == 0  # native there: nothing clamped


def test_a_model_with_sentinels_converts_and_verifies(tmp_path: Path) -> None:
    model = slice_model()
    with pytest.raises(dmlbridge.ValueRangeError, match="'ends'"):
        dmlbridge.convert_model(model, tmp_path / "emulated", target=Target("2.0"), progress=False, upload="all")
    plan = dmlbridge.convert_model(model, tmp_path / "w", target=SATURATE, progress=False, upload="all")
    counts = {key: entry.clamped for key, entry in plan.entries.items()}
    assert counts == {"starts": 0, "ends": 1, "many": 4, "unsigned": 2}
    assert plan.array("ends").tolist() == [2**31 - 1]
    assert dmlbridge.plan_model(model, target=SATURATE, upload="all").entries["ends"].clamped is None  # (not read)
    assert dmlbridge.check_conversion(model, target=SATURATE, upload="all").entries["many"].clamped == 4
    loaded = dmlbridge.load_plan(tmp_path / "w.json")
    assert loaded == plan and loaded.entries["unsigned"].clamped == 2
    loaded.verify(model)
    doc = json.loads((tmp_path / "w.json").read_text())
    assert [e["clamped"] for e in doc["entries"]] == [0, 1, 4, 2]


def test_counts_in_the_manifest_are_checked(tmp_path: Path) -> None:
    model = slice_model()
    dmlbridge.convert_model(model, tmp_path / "w", target=SATURATE, progress=False, upload="all")
    manifest = tmp_path / "w.json"
    text = manifest.read_text()
    doc = json.loads(text)
    doc["entries"][2]["clamped"] = 3  # within range, but not what the values give
    manifest.write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match="'many': the plan counts 3 values clamped, a fresh conversion 4"):
        dmlbridge.load_plan(manifest).verify(model)
    for clamped, message in [(9, r"clamped is 9, outside 0\.\.8"), (None, "must be a whole number"),
                             (-1, "outside")]:
        doc["entries"][2]["clamped"] = clamped
        manifest.write_text(json.dumps(doc))
        with pytest.raises(ManifestError, match=message):
            dmlbridge.load_plan(manifest)
    plain = dmlbridge.convert_model(model, tmp_path / "n", target=Target("6.4"), progress=False, upload="all")
    doc = json.loads(Path(plain.manifest_path or "").read_text())
    doc["entries"][0]["clamped"] = 0
    Path(plain.manifest_path or "").write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match="must be null: only a saturate entry counts clamped values"):
        dmlbridge.load_plan(tmp_path / "n.json")


def test_the_command_line_saturates(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(slice_model(), path)

    refused = run("convert", path, "-o", tmp_path / "w", "--feature-level", "2.0", "--int64", "saturate")
    assert refused.returncode == 2 and "pass --allow-lossy with it" in refused.stderr, refused.stderr
    done = run("convert", path, "-o", tmp_path / "w", "--feature-level", "2.0", "--int64", "saturate",
               "--allow-lossy", "--quiet")
    assert done.returncode == 0, done.stderr
    assert run("verify", tmp_path / "w.json", path).returncode == 0


def test_a_value_past_32_bits_names_saturate() -> None:
    """Without 64-bit types (feature level 1.0), emulate and narrow refuse an INT64_MAX sentinel naming the option
    that converts it, in Python terms."""
    named = r"clamp such values to the 32-bit range with Target\(\.\.\., int64='saturate', allow_lossy=True\)"
    for int64 in ("emulate", "narrow"):
        target = Target("1.0", int64=int64)
        with pytest.raises(dmlbridge.ValueRangeError, match=r"'ends'.*does not fit INT32.*" + named):
            dmlbridge.check_conversion(slice_model(), target=target, upload="all")
        with pytest.raises(dmlbridge.ValueRangeError, match=r"value 4294967296 .*does not fit UINT32.*" + named):
            dmlbridge.prepare(np.array([2**32], np.uint64), target=target)
    saturated = dmlbridge.check_conversion(slice_model(), target=Target("1.0", int64="saturate", allow_lossy=True),
                                           upload="all")
    assert saturated.entries["ends"].clamped == 1
