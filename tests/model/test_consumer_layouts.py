"""Layouts for the operators that read each constant (manifest format 6): a convolution's weight at its node's
dimension count, a Gemm's C at the output's [M, N] and a MatMul's B at the output's batch sizes broadcast with
strides of 0, a Gather's data at the output's rank; the ONNX layout and a note where the model does not declare
what a layout needs, or the consumers disagree.

Every desc below is worked out by hand from DirectML's documented rules (docs/directml-facts.md: CONVOLUTION, GEMM
and GATHER want their tensors in one DimensionCount, GEMM wants C at the output's sizes; a stride of 0 repeats an
element; TotalTensorSizeInBytes is 4 bytes a FLOAT32 position of the span). The bytes are the model's values in C
order whatever the layout: held to onnx's numpy_helper and to a conversion of the same constants that no node
reads."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import reference
from command_line import run
from models import consumer_layout_model, older
from onnx import TensorProto, helper, numpy_helper

import dmlbridge
from dmlbridge import Consumer, ManifestError, Target

# key: (padding, sizes, strides, TotalTensorSizeInBytes) at the default min_dims (1), by hand:
EXPECTED: dict[str, tuple[str, tuple[int, ...], tuple[int, ...] | None, int]] = {
    # Conv, 1-D, groups 2: W [M=6, C/g=2, k=3] run as 2-D, [6, 2, 1, 3], beside its bias [1, 6, 1, 1]
    "W1": ("spatial", (6, 2, 1, 3), None, 6 * 2 * 3 * 4),
    "B1": ("channel", (1, 6, 1, 1), None, 6 * 4),
    "W2": ("leading", (4, 3, 3, 3), None, 4 * 3 * 3 * 3 * 4),  # (2-D: as it is)
    "W3": ("leading", (2, 4, 1, 2, 2), None, 2 * 4 * 2 * 2 * 4),  # (3-D: as it is; X undeclared, W tells)
    "B3": ("channel", (1, 2, 1, 1, 1), None, 2 * 4),
    "WT": ("spatial", (3, 2, 1, 4), None, 3 * 2 * 4 * 4),  # (ConvTranspose 1-D: [C, M/g, 1, k])
    # Gemm, A [3, 6]: C [N=5] at [M=3, N]: each row the same 5 elements, 20 bytes
    "GB": ("leading", (6, 5), None, 120),  # (B, transB 0: 2-D like A and the output)
    "GC": ("broadcast", (3, 5), (0, 1), 20),
    "GBT": ("leading", (5, 6), None, 120),  # (B, transB 1: [N, K])
    "GCT": ("broadcast", (3, 5), (0, 1), 20),  # (C [1, N]: its 1 grows)
    "GB3": ("leading", (6, 2), None, 48),
    "GC3": ("broadcast", (4, 2), (1, 0), 16),  # (transA 1: M = A's dimension 1 = 4; C [M, 1] across each row)
    "GCS": ("broadcast", (3, 5), (0, 0), 4),  # (C scalar: one element everywhere)
    "GCU": ("leading", (5,), None, 20),  # (A ['batch', 6]: M not declared, the ONNX layout)
    "GCY": ("broadcast", (2, 5), (0, 1), 20),  # (A undeclared; the output [2, 5] says M)
    "GC1": ("broadcast", (1, 5), None, 20),  # (M = 1: [1, N], packed)
    "GCA": ("broadcast", (3, 5), (0, 1), 20),  # (two Gemms of one M: they agree)
    "GCM": ("mixed", (5,), None, 20),  # (Gemms of M 3 and 4: the ONNX layout)
    # Gather: data at the output's rank, data rank - 1 + indices rank
    "GD1": ("leading", (10, 3), None, 120),  # (indices [4]: 2 + 1 - 1 = 2, its own)
    "GD2": ("rank", (1, 10, 3), None, 120),  # (indices ['batch', 'sequence']: 3)
    "GD3": ("rank", (1, 7, 2), None, 56),  # (constant indices [2, 2]: 3)
    "GD4": ("leading", (5, 2), None, 40),  # (indices and output undeclared)
    "GD5": ("leading", (5, 2), None, 40),  # (0-D indices: 1, less than the data's 2)
    "GI3": ("rank", (1, 2, 2), None, 32),  # (the indices themselves: at the output's rank too, 3)
    # MatMul: B at the output's batch sizes, then its own [K=6, N=5]
    "MB": ("broadcast", (2, 6, 5), (0, 5, 1), 120),  # (A [2, 4, 6])
    "MB4": ("broadcast", (2, 3, 6, 5), (0, 30, 5, 1), 360),  # (A [2, 3, 4, 6], B [3, 6, 5]: its 3 kept)
    "MB1": ("broadcast", (1, 6, 5), None, 120),  # (A [1, 4, 6]: a batch of 1, packed)
    "MBU": ("rank", (1, 6, 5), None, 120),  # (A ['b', 4, 6]: the rank, not the batch)
    "MB2": ("leading", (6, 5), None, 120),  # (A [4, 6]: as it is)
    "MB5": ("leading", (6, 5), None, 120),  # (A of 5 dimensions: more than GEMM takes)
    "WI": ("spatial", (2, 2, 1, 3), None, 48),  # (a Conv's weight an Identity reads too: it binds nothing)
}

# the ones whose layout differs at min_dims 4, by hand (every other: its default one with leading 1s to 4)
EXPECTED_AT_4: dict[str, tuple[str, tuple[int, ...], tuple[int, ...] | None]] = {
    "GC": ("broadcast", (1, 1, 3, 5), (5, 5, 0, 1)),  # (leading dimensions' strides: the span, 5)
    "GCT": ("broadcast", (1, 1, 3, 5), (5, 5, 0, 1)),
    "GCY": ("broadcast", (1, 1, 2, 5), (5, 5, 0, 1)),
    "GCA": ("broadcast", (1, 1, 3, 5), (5, 5, 0, 1)),
    "MB4": ("broadcast", (2, 3, 6, 5), (0, 30, 5, 1)),  # (4 dimensions already)
    "GC3": ("broadcast", (1, 1, 4, 2), (4, 4, 1, 0)),  # (span 3 * 1 + 1 * 0 + 1 = 4)
    "GCS": ("broadcast", (1, 1, 3, 5), (1, 1, 0, 0)),
    "GC1": ("leading", (1, 1, 1, 5), None),  # ([1, 5] with leading 1s is the leading layout itself)
    "GD2": ("leading", (1, 1, 10, 3), None),  # (rank 3 < 4: leading 1s are enough)
    "GD3": ("leading", (1, 1, 7, 2), None),
    "GI3": ("leading", (1, 1, 2, 2), None),
    "MB": ("broadcast", (1, 2, 6, 5), (30, 0, 5, 1)),  # (span 1 * 0 + 5 * 5 + 4 * 1 + 1 = 30)
    "MB1": ("leading", (1, 1, 6, 5), None),
    "MBU": ("leading", (1, 1, 6, 5), None),
}

NOTES = {  # the entries that keep a layout no consumer wants, and what their note says
    "GCU": "GEMM wants it at the output's sizes [batch, 5], of which the model leaves 'batch' free",
    "GCM": "its consumers want different layouts (Gemm input 2: broadcast)",
    "GD4": "GATHER wants a Gather's data at the output's rank, which the model does not declare",
    "MBU": "GEMM wants it at the output's sizes [b, 6, 5], of which the model leaves 'b' free: it has the output's "
           "rank",
    "MB5": "GEMM takes at most 4 dimensions",
}


def _values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {tensor.name: numpy_helper.to_array(tensor) for tensor in model.graph.initializer}


@pytest.mark.parametrize("checked_only", ["", "1"], ids=["fast-paths", "checked-path-only"])
def test_every_consumer_case_gets_its_known_desc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 checked_only: str) -> None:
    monkeypatch.setenv("DMLBRIDGE_CHECKED_PATH_ONLY", checked_only)
    model = consumer_layout_model()
    onnx.save(model, tmp_path / "m.onnx")
    plan = dmlbridge.convert_model(tmp_path / "m.onnx", tmp_path / "w", progress=False)
    assert set(plan.entries) == set(EXPECTED)
    for key, (padding, sizes, strides, total) in EXPECTED.items():
        entry = plan.entries[key]
        assert (entry.padding, entry.sizes, entry.strides, entry.total_tensor_size_in_bytes) == \
            (padding, sizes, strides, total), key
        assert entry.desc()["DimensionCount"] == len(sizes), key
        assert dmlbridge.calc_buffer_tensor_size("INT64" if key == "GI3" else "FLOAT32", sizes, strides) == total
        assert (entry.layout_note is not None) == (key in NOTES), key
        assert key not in NOTES or NOTES[key] in (entry.layout_note or ""), key
    four = dmlbridge.plan_model(model, min_dims=4)
    for key, (_, sizes, _, total) in EXPECTED.items():
        padding, want, strides = EXPECTED_AT_4.get(key, (EXPECTED[key][0], (1,) * (4 - len(sizes)) + sizes, None))
        entry = four.entries[key]
        assert (entry.padding, entry.sizes, entry.strides, entry.total_tensor_size_in_bytes) == \
            (padding, want, strides, total), key


def test_the_consumers_record_what_the_model_declares() -> None:
    plan = dmlbridge.plan_model(consumer_layout_model())
    consumers = {key: tuple(c.facts() for c in entry.consumers) for key, entry in plan.entries.items()}
    conv, gemm, gather, matmul = "CONVOLUTION", "GEMM", "GATHER", "GEMM"
    assert consumers["W1"] == (Consumer("conv1d", "Conv", 1, 4, None, "gpu", conv, "spatial"),)
    assert consumers["W3"] == (Consumer("conv3d", "Conv", 1, 5, None, "gpu", conv, "spatial"),)
    assert consumers["WT"] == (Consumer("deconv1d", "ConvTranspose", 1, 4, None, "gpu", conv, "spatial"),)
    assert consumers["GC"] == (Consumer("gemm", "Gemm", 2, None, (3, 5), "gpu", gemm, "broadcast"),)
    assert consumers["GC3"] == (Consumer("gemm_ta", "Gemm", 2, None, (4, 2), "gpu", gemm, "broadcast"),)
    assert consumers["GCU"] == (Consumer("gemm_batch", "Gemm", 2, None, None, "gpu", gemm, "broadcast",
                                         named_sizes=("batch", 5)),)
    assert consumers["GB"][0] == Consumer("gemm", "Gemm", 1, None, None, "gpu", gemm)  # (B: its own layout)
    assert consumers["GD2"] == (Consumer("gather2", "Gather", 0, 3, None, "gpu", gather, "rank"),)
    assert consumers["GD4"] == (Consumer("gather_unknown", "Gather", 0, None, None, "gpu", gather, "rank"),)
    assert consumers["GI3"] == (Consumer("gather_const", "Gather", 1, 3, None, "gpu", gather, "rank"),)
    assert consumers["MB4"] == (Consumer("matmul4", "MatMul", 1, None, (2, 3, 6, 5), "gpu", matmul, "broadcast"),)
    assert consumers["MBU"] == (Consumer("matmul_batch", "MatMul", 1, 3, None, "gpu", matmul, "broadcast",
                                         named_sizes=("b", 6, 5)),)
    assert consumers["WI"] == (Consumer("conv_shared", "Conv", 1, 4, None, "gpu", conv, "spatial"),
                               Consumer("identity", "Identity", 0, reads_on="none",
                                        note="ONNX Runtime folds an Identity of a constant away"))
    assert plan.entries["WI"].reads_on == "gpu"


def test_the_bytes_are_the_onnx_values_and_the_arrays_come_back_in_their_onnx_shape(tmp_path: Path) -> None:
    """The buffer file holds the same bytes as a conversion of the same constants that no node reads (only the
    descs differ), each the values in C order; plan.array gives numpy_helper's array, ONNX shape and all, from a
    written plan and from one loaded from its manifest; dml_array reads what DirectML reads: the repeats too."""
    model = consumer_layout_model()
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    alone = helper.make_model(helper.make_graph([], "alone", [], [], list(model.graph.initializer)))
    bare = dmlbridge.convert_model(alone, tmp_path / "bare", progress=False)
    assert [e.offset for e in plan.converted] == [e.offset for e in bare.converted]
    assert [b.size for b in plan.buffers] == [b.size for b in bare.buffers]
    assert Path(plan.buffers[0].path).read_bytes() == Path(bare.buffers[0].path).read_bytes()
    values = _values(model)
    loaded = dmlbridge.load_plan(tmp_path / "w.json")
    for key, value in values.items():
        stored = value.tobytes()
        assert plan.read(key).tobytes() == stored + bytes(-len(stored) % 4), key
        for which in (plan, loaded):
            back = which.array(key)
            assert back.shape == value.shape and back.dtype == value.dtype and np.array_equal(back, value), key
    assert np.array_equal(plan.dml_array("GC"), np.broadcast_to(values["GC"], (3, 5)))
    assert np.array_equal(plan.dml_array("GC3"), np.broadcast_to(values["GC3"], (4, 2)))
    assert np.array_equal(plan.dml_array("MB4"), np.broadcast_to(values["MB4"], (2, 3, 6, 5)))
    assert np.array_equal(plan.dml_array("W1"), values["W1"].reshape(6, 2, 1, 3))
    # the per-element reference reads every element of a broadcast desc from the entry's own bytes
    entry = plan.entries["MB"]
    read = reference.decode(plan.read("MB").tobytes(), 1, entry.sizes, entry.strides)
    assert read == np.broadcast_to(values["MB"], (2, 6, 5)).reshape(-1).view(np.uint32).tolist()
    assert loaded == plan
    plan.verify(model)
    loaded.verify(model)


def test_a_broadcast_of_emulated_int64_keeps_its_8_byte_elements(tmp_path: Path) -> None:
    """An INT64 Gemm's C on a device without 64-bit integers: INT32 over the 8-byte elements, strides doubled
    ([0, 2]: each row the same low halves), 8 bytes an element of the ONNX shape."""
    c = numpy_helper.from_array(np.array([-1, 2, 3], np.int64), "C")
    b = numpy_helper.from_array(np.ones((4, 3), np.int64), "B")
    gemm = helper.make_node("Gemm", ["A", "B", "C"], ["Y"], name="gemm")
    graph = helper.make_graph([gemm], "g", [helper.make_tensor_value_info("A", TensorProto.INT64, [2, 4])],
                              [helper.make_tensor_value_info("Y", TensorProto.INT64, None)], [b, c])
    model = helper.make_model(graph)
    no64 = Target(supported=["FLOAT32", "INT32", "UINT32"])
    plan = dmlbridge.convert_model(model, tmp_path / "w", target=no64, progress=False)
    entry = plan.entries["C"]
    assert (entry.dml_type.name, entry.conversion, entry.padding) == ("INT32", "emulate", "broadcast")
    assert (entry.sizes, entry.strides, entry.total_tensor_size_in_bytes) == ((2, 3), (0, 2), 24)
    assert plan.read("C").tobytes() == np.array([-1, 2, 3], "<i8").tobytes()
    assert reference.decode(plan.read("C").tobytes(), 6, entry.sizes, entry.strides) == [2**32 - 1, 2, 3] * 2
    assert np.array_equal(plan.array("C"), [-1, 2, 3])
    dmlbridge.load_plan(tmp_path / "w.json").verify(model)


def test_a_broadcast_entry_is_verified_as_the_packed_bytes_it_is(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A MatMul's B broadcast to a batch of 2 is compared a chunk at a time from the one pass over its buffer file,
    as a packed entry: never read again whole (an entry whose strides are not its layout's is)."""
    model = consumer_layout_model()
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    assert plan.entries["MB"].strides == (0, 5, 1)

    def whole(self: Any, key: str, **_: Any) -> Any:
        raise AssertionError(f"entry {key!r} was read again, whole")

    monkeypatch.setattr(dmlbridge.UploadPlan, "read", whole)
    plan.verify(model)


# --- the manifest ------------------------------------------------------------------------------------------------


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, dict[str, Any], onnx.ModelProto]:
    model = consumer_layout_model()
    onnx.save(model, tmp_path / "m.onnx")
    dmlbridge.convert_model(tmp_path / "m.onnx", tmp_path / "w", progress=False)
    return tmp_path / "w.json", json.loads((tmp_path / "w.json").read_text()), model


@pytest.fixture
def written6(written: tuple[Path, dict[str, Any], onnx.ModelProto]) -> tuple[Path, dict[str, Any], onnx.ModelProto]:
    """The same conversion as format 6 wrote it (what the previous release wrote), in place of the manifest."""
    manifest, doc, model = written
    old = older(doc, 6)
    manifest.write_text(json.dumps(old))
    return manifest, old, model


def _entry(doc: dict[str, Any], key: str) -> dict[str, Any]:
    entry: dict[str, Any] = next(e for e in doc["entries"] if e["key"] == key)
    return entry


def test_the_manifest_records_the_layout_and_the_consumer_it_was_made_for(
        written: tuple[Path, dict[str, Any], onnx.ModelProto]) -> None:
    _, doc, _ = written
    assert doc["format_version"] == 7
    gc = _entry(doc, "GC")
    assert gc["padding"] == "broadcast" and gc["shape"] == [5]  # (the ONNX shape, whatever the layout)
    assert gc["desc"] == {"DataType": 1, "Flags": 0, "DimensionCount": 2, "Sizes": [3, 5], "Strides": [0, 1],
                          "TotalTensorSizeInBytes": 20, "GuaranteedBaseOffsetAlignment": 256}
    assert gc["consumers"] == [{"node": "gemm", "op_type": "Gemm", "input": 2, "reads_on": "gpu",
                                "dml_operator": "GEMM", "layout": "broadcast", "output_sizes": [3, 5]}]
    w1 = _entry(doc, "W1")
    assert w1["padding"] == "spatial" and w1["consumers"] == [{"node": "conv1d", "op_type": "Conv", "input": 1,
                                                               "reads_on": "gpu", "dml_operator": "CONVOLUTION",
                                                               "layout": "spatial", "dims": 4}]
    assert _entry(doc, "WI")["consumers"][1] == {"node": "identity", "op_type": "Identity", "input": 0,
                                                 "reads_on": "none",
                                                 "note": "ONNX Runtime folds an Identity of a constant away"}
    assert "layout_note" not in gc and "layout_note" in _entry(doc, "GCU")
    assert _entry(doc, "GD2")["consumers"][0]["dims"] == 3 and "padding" not in _entry(doc, "GB")


@pytest.mark.parametrize(
    ("key", "change", "message"),
    [
        ("GC", {"padding": "leading"},
         r"\('GC'\)\.padding is \"leading\", but .* is padded \"broadcast\" \(format 6\)"),
        ("GC", {"desc": {"Strides": [5, 1]}}, r"\('GC'\)\.desc\.Strides is \[5, 1\], but .* needs \[0, 1\]"),
        ("GC", {"desc": {"TotalTensorSizeInBytes": 60}}, r"TotalTensorSizeInBytes is 60, but .* needs 20"),
        ("GC", {"consumers": [{"node": "gemm", "op_type": "Gemm", "input": 2, "sizes": [3, 4]}]},
         r"\('GC'\)\.consumers: sizes \[3, 4\] do not broadcast the shape \[5\]"),
        ("GC", {"consumers": [{"node": "gemm", "op_type": "Gemm", "input": 2, "sizes": [1, 3, 5]}]},
         r"consumers\[0\]\.sizes has 3 items, more than 2"),
        ("GC", {"consumers": [{"node": "gemm", "op_type": "Gemm", "input": 2, "sizes": [3, 0]}]}, r"outside 1\.\."),
        ("GC", {"consumers": [{"node": "gemm", "op_type": "Gemm", "input": 2, "dims": 2}]},
         r"has 'dims', which this input does not record"),
        ("GCU", {"layout_note": None}, r"\('GCU'\)\.layout_note is null, but these consumers give \"GEMM wants"),
        ("GC", {"layout_note": "made up"}, r"\('GC'\)\.layout_note is \"made up\", but these consumers give null"),
        ("W1", {"consumers": [{"node": "conv1d", "op_type": "Conv", "input": 1}]}, r"lacks the field 'dims'"),
        ("W1", {"consumers": [{"node": "conv1d", "op_type": "Conv", "input": 1, "dims": 4, "sizes": [6, 2]}]},
         r"has 'sizes', which this input does not record"),
        ("MB", {"consumers": [{"node": "matmul", "op_type": "MatMul", "input": 1, "dims": 3, "sizes": [2, 6, 5]}]},
         r"has both 'dims' and 'sizes'"),
        ("GD2", {"consumers": [{"node": "gather2", "op_type": "Gather", "input": 0, "dims": 9}]}, r"outside 1\.\.8"),
        ("GD2", {"consumers": [{"node": "gather2", "op_type": "Gather", "input": 0, "dims": 2}]},
         r"\('GD2'\)\.padding is \"rank\", but .* is padded \"leading\""),
        ("GB", {"consumers": [{"node": "gemm", "op_type": "Gemm", "input": 1, "sizes": [6, 5]}]},
         r"has 'sizes', which this input does not record"),
    ],
)
def test_a_tampered_format_6_layout_is_refused(written6: tuple[Path, dict[str, Any], onnx.ModelProto], key: str,
                                               change: dict[str, Any], message: str) -> None:
    manifest, doc, _ = written6
    changed = json.loads(json.dumps(doc))
    entry = _entry(changed, key)
    for name, value in change.items():
        if name == "desc":
            entry["desc"].update(value)
        elif value is None:
            entry.pop(name, None)
        else:
            entry[name] = value
    manifest.write_text(json.dumps(changed))
    with pytest.raises(ManifestError, match=message):
        dmlbridge.load_plan(manifest)


def test_a_consistent_layout_the_model_does_not_give_is_a_mismatch(
        written6: tuple[Path, dict[str, Any], onnx.ModelProto]) -> None:
    """C at [4, 5] with the sizes recorded to match: a manifest the reader takes, which the model contradicts."""
    manifest, doc, model = written6
    changed = json.loads(json.dumps(doc))
    entry = _entry(changed, "GC")
    entry["consumers"][0]["sizes"] = [4, 5]
    entry["desc"]["Sizes"] = [4, 5]
    manifest.write_text(json.dumps(changed))
    plan = dmlbridge.load_plan(manifest)
    assert plan.entries["GC"].sizes == (4, 5)
    with pytest.raises(ManifestError, match=r"'GC': the plan has consumers \[gemm \(Gemm input 2, sizes \[4, 5\]\)\] "
                                            r"\(broadcast padding\), the model \[gemm \(Gemm input 2, sizes "
                                            r"\[3, 5\]\)\]"):
        plan.verify(model)


def test_a_format_5_manifest_is_read_and_verified_by_its_own_rule(
        written: tuple[Path, dict[str, Any], onnx.ModelProto]) -> None:
    """What the previous release wrote for the same model (format 5: every weight, C, B and data in its ONNX
    layout, dims on per-channel inputs only) loads and verifies, on the command line too; the current layouts
    claiming format 5 are refused, format 5's claiming format 6, and format 7's claiming format 6."""
    manifest, doc, model = written
    old = older(doc, 5)
    w1, gc = _entry(old, "W1"), _entry(old, "GC")
    assert w1["desc"]["Sizes"] == [6, 2, 3] and "padding" not in w1 and "dims" not in w1["consumers"][0]
    assert (gc["desc"]["Sizes"], gc["desc"]["Strides"], "sizes" in gc["consumers"][0]) == ([5], None, False)
    assert _entry(old, "B1")["consumers"][0]["dims"] == 4 and _entry(old, "B1")["padding"] == "channel"
    manifest.write_text(json.dumps(old))
    plan = dmlbridge.load_plan(manifest)
    assert plan.format_version == 5 and plan.entries["W1"].sizes == (6, 2, 3) and plan.entries["GC"].sizes == (5,)
    assert tuple(c.facts() for c in plan.entries["GC"].consumers) == (Consumer("gemm", "Gemm", 2),)
    assert plan.manifest() == old  # (a plan keeps its format version: its entries follow that version's rules)
    plan.verify(model)
    assert np.array_equal(plan.array("GC"), _values(model)["GC"])
    verified = run("verify", manifest, manifest.parent / "m.onnx")
    assert verified.returncode == 0, verified.stderr
    for claim, message in [
        ({**older(doc, 6), "format_version": 5}, r"\('W1'\)\.consumers\[0\] \(Conv input 1\) has 'dims', which "
                                                 r"only a per-channel input has"),
        ({**doc, "format_version": 6}, r"has unknown field\(s\) '(upload|graph_inputs)'"),  # (format 7's)
        ({**{k: v for k, v in doc.items() if k not in ("graph_inputs", "upload")}, "format_version": 6},
         r"\('W1'\)\.consumers\[0\] has unknown field\(s\) 'reads_on'"),
        ({**old, "format_version": 6}, r"\('W1'\)\.consumers\[0\] \(Conv input 1\) lacks the field 'dims'"),
    ]:
        manifest.write_text(json.dumps(claim))
        with pytest.raises(ManifestError, match=message):
            dmlbridge.load_plan(manifest)
    current_as_5 = json.loads(json.dumps(old))
    for entry, now in zip(current_as_5["entries"], doc["entries"], strict=True):
        entry["desc"] = now["desc"]
    manifest.write_text(json.dumps(current_as_5))
    with pytest.raises(ManifestError, match=r"\('W1'\)\.desc\.DimensionCount is 4, but .* needs 3"):
        dmlbridge.load_plan(manifest)


def test_older_formats_of_the_model_all_read(written: tuple[Path, dict[str, Any], onnx.ModelProto]) -> None:
    manifest, doc, model = written
    for version in (4, 3, 2):
        old = older(doc, version)
        manifest.write_text(json.dumps(old))
        plan = dmlbridge.load_plan(manifest)
        assert plan.format_version == version and plan.entries["MB4"].sizes == (3, 6, 5), version
        plan.verify(model)


def test_the_notes_tell_what_to_do_at_run_time() -> None:
    """Where the model does not declare M, broadcast_desc makes the desc GEMM wants for the M of the run."""
    plan = dmlbridge.plan_model(consumer_layout_model())
    entry = plan.entries["GCU"]
    assert "dmlbridge.broadcast_desc" in (entry.layout_note or "")
    at_run = dmlbridge.broadcast_desc(entry, (7, 5))
    assert (at_run.sizes, at_run.strides, at_run.total_tensor_size_in_bytes) == ((7, 5), (0, 1), 20)
    assert "dmlbridge.with_leading_ones" in (plan.entries["GD4"].layout_note or "")
    assert dmlbridge.with_leading_ones(plan.entries["GD4"], 3).sizes == (1, 5, 2)
    assert math.prod(at_run.sizes) == 35  # (35 elements read from 5)


def test_empty_constants_and_hostile_declarations_get_no_layout() -> None:
    """An empty C or B is skipped as any empty tensor (no sizes are recorded for it), and a declared M whose
    [M, N] no DirectML tensor holds (more than 2^32 - 1 elements) is not taken: the ONNX layout and the note."""
    c = numpy_helper.from_array(np.zeros(0, np.float32), "C")
    b = numpy_helper.from_array(np.zeros((0, 5), np.float32), "B")
    big = numpy_helper.from_array(np.ones(5, np.float32), "big")
    nodes = [helper.make_node("Gemm", ["A", "GB", "C"], ["Y"], name="empty_c"),
             helper.make_node("MatMul", ["MA", "B"], ["Z"], name="empty_b"),
             helper.make_node("Gemm", ["HA", "GB", "big"], ["W"], name="huge")]
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT, [3, 6]),
              helper.make_tensor_value_info("MA", TensorProto.FLOAT, [2, 4, 0]),
              helper.make_tensor_value_info("HA", TensorProto.FLOAT, [2**30, 6]),
              helper.make_tensor_value_info("GB", TensorProto.FLOAT, [6, 5])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                                                   for n in ("Y", "Z", "W")], [c, b, big])
    plan = dmlbridge.plan_model(helper.make_model(graph))
    gemm = {"reads_on": "gpu", "dml_operator": "GEMM", "layout": "broadcast"}
    assert plan.entries["C"].skipped and \
        tuple(c.facts() for c in plan.entries["C"].consumers) == (Consumer("empty_c", "Gemm", 2, **gemm),)
    assert plan.entries["B"].skipped and \
        tuple(c.facts() for c in plan.entries["B"].consumers) == (Consumer("empty_b", "MatMul", 1, **gemm),)
    assert plan.entries["C"].consumers[0].desc() is None  # (a skipped entry binds nothing)
    huge = plan.entries["big"]
    assert (huge.sizes, huge.padding, tuple(c.facts() for c in huge.consumers)) == \
        ((5,), "leading", (Consumer("huge", "Gemm", 2, **gemm),))
    assert "does not declare" in (huge.layout_note or "")


def test_a_scalar_output_is_read_at_one_element_and_its_manifest_reads_back(tmp_path: Path) -> None:
    """A Mul of two scalars (a quantized model's scale times its input's scale): its output is 0-D, which
    DirectML holds as one element, so the constant's consumer is laid out at [1] and the manifest that records
    it is read back."""
    node = helper.make_node("Mul", ["x", "s"], ["y"], name="scale_mul")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
                              [numpy_helper.from_array(np.array(0.5, np.float32), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    consumer = plan.entries["s"].consumers[0]
    assert (consumer.output_sizes, consumer.sizes) == ((1,), (1,))
    plan.close()
    with dmlbridge.load_plan(tmp_path / "w.json") as loaded:
        assert loaded.entries["s"].consumers[0].output_sizes == (1,)
