"""The JSON Schema shipped in the package covers every manifest version the code writes or reads, and refuses
the shapes load_plan refuses (every manifest the suite writes is checked against it in conftest.py, its
references inlined: the inlined schema is held to the same answers here)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import model_of
from models import consumer_layout_model, older
from onnx import helper, numpy_helper

import dmlbridge
from dmlbridge.manifest.format import MANIFEST_FORMAT_VERSION, READABLE_VERSIONS, manifest_schema


@pytest.fixture
def document(tmp_path: Path) -> dict[str, Any]:
    inits = [numpy_helper.from_array(np.arange(4, dtype=np.float32), "w"),
             numpy_helper.from_array(np.array(["a"], dtype=object), "labels"),
             numpy_helper.from_array(np.zeros(3, np.float32), "bias")]
    conv = helper.make_node("Conv", ["x", "w", "bias"], ["y"], name="conv")
    model = model_of(inits, [conv])
    plan = dmlbridge.convert_model(model, tmp_path / "m", min_dims=4, progress=False, checksum=True,
                                   exclude=["nothing"])
    doc: dict[str, Any] = json.loads(Path(plan.manifest_path or "").read_text())
    return doc


def test_the_schema_covers_every_version(manifest_validator: Any, fast_manifest_validator: Any,
                                        document: dict[str, Any]) -> None:
    assert READABLE_VERSIONS == (1, 2, 3, 4, 5, 6, 7) and MANIFEST_FORMAT_VERSION == 7
    schema = manifest_schema()
    assert {schema["$defs"][f"version{v}"]["properties"]["format_version"]["const"] for v in READABLE_VERSIONS} \
        == set(READABLE_VERSIONS)
    assert document["entries"][2]["padding"] == "channel"  # the optional fields are exercised
    assert document["entries"][2]["consumers"] == [{"node": "conv", "op_type": "Conv", "input": 2, "reads_on": "gpu",
                                                    "dml_operator": "CONVOLUTION", "layout": "channel", "dims": 4}]
    for version in READABLE_VERSIONS:
        doc = document if version == 7 else older(document, version)
        manifest_validator.validate(doc)
        fast_manifest_validator.validate(doc)
    newer_entries = {**older(document, 4), "entries": document["entries"]}  # (dims: 5 on)
    assert not manifest_validator.is_valid(newer_entries) and not fast_manifest_validator.is_valid(newer_entries)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (["format_version"], 8),
        (["conversion_id"], "XYZ"),
        (["alignment"], 8),
        (["selection", "kinds"], ["initialiser"]),
        (["buffers", 0, "fingerprint"], "0" * 63),
        (["entries", 0, "conversion"], "truncate"),
        (["entries", 0, "desc", "Flags"], 2),
        (["entries", 0, "desc", "Sizes"], [1] * 9),
        (["entries", 1, "desc"], {"DataType": 1}),  # a skipped entry with a desc
        (["entries", 2, "padding"], "trailing"),
        (["entries", 2, "consumers", 0, "input"], -1),
        (["entries", 2, "consumers", 0, "dims"], 9),
        (["entries", 2, "consumers", 0, "dims"], "4"),
        (["entries", 0, "extra"], 1),
        (["source", "external_data"], "w.data"),
    ],
)
def test_the_schema_refuses_what_load_plan_refuses(manifest_validator: Any, fast_manifest_validator: Any,
                                                   document: dict[str, Any], path: list[Any], value: Any,
                                                   tmp_path: Path) -> None:
    doc = copy.deepcopy(document)
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    assert not manifest_validator.is_valid(doc) and not fast_manifest_validator.is_valid(doc)
    manifest = next(tmp_path.glob("m.json"))
    manifest.write_text(json.dumps(doc))
    with pytest.raises(dmlbridge.ManifestError):
        dmlbridge.load_plan(manifest)


def test_the_schema_covers_the_layouts_of_format_6(manifest_validator: Any, fast_manifest_validator: Any,
                                                   tmp_path: Path) -> None:
    """Every layout and consumer field of format 6 follows the schema, and format 5's document does too; the
    schema refuses a padding, a note or sizes no format has, and format 6's fields in a format-5 document."""
    dmlbridge.convert_model(consumer_layout_model(), tmp_path / "m", progress=False)
    document: dict[str, Any] = older(json.loads((tmp_path / "m.json").read_text()), 6)
    paddings = {entry.get("padding", "leading") for entry in document["entries"]}
    assert paddings == {"leading", "channel", "spatial", "rank", "broadcast", "mixed"}
    for doc in (document, older(document, 5)):
        assert manifest_validator.is_valid(doc) and fast_manifest_validator.is_valid(doc)
    by_key = {entry["key"]: index for index, entry in enumerate(document["entries"])}
    for key, field, value in [("GC", "padding", "sideways"), ("GCU", "layout_note", ""), ("GCU", "layout_note", 3),
                              ("GC", "consumers", [{"node": "gemm", "op_type": "Gemm", "input": 2, "sizes": [3, 0]}]),
                              ("GC", "consumers", [{"node": "gemm", "op_type": "Gemm", "input": 2, "sizes": [5]}]),
                              ("GD2", "consumers", [{"node": "g", "op_type": "Gather", "input": 0, "dims": 0}])]:
        doc = copy.deepcopy(document)
        doc["entries"][by_key[key]][field] = value
        assert not manifest_validator.is_valid(doc) and not fast_manifest_validator.is_valid(doc), (key, field)
    newer = {**older(document, 5), "entries": document["entries"]}  # (spatial, sizes and notes: 6 on)
    assert not manifest_validator.is_valid(newer) and not fast_manifest_validator.is_valid(newer)


def test_the_schema_covers_the_consumers_of_format_7(manifest_validator: Any, fast_manifest_validator: Any,
                                                     tmp_path: Path) -> None:
    """Where each consumer is read, its operator, layout and facts follow the schema; it refuses a place, a layout
    or an operator name no format has, a consumer without ``reads_on``, and format 7's fields in format 6."""
    dmlbridge.convert_model(consumer_layout_model(), tmp_path / "m", progress=False)
    document: dict[str, Any] = json.loads((tmp_path / "m.json").read_text())
    assert document["format_version"] == 7
    assert manifest_validator.is_valid(document) and fast_manifest_validator.is_valid(document)
    by_key = {entry["key"]: index for index, entry in enumerate(document["entries"])}
    gc = {"node": "gemm", "op_type": "Gemm", "input": 2, "reads_on": "gpu", "dml_operator": "GEMM",
          "layout": "broadcast", "output_sizes": [3, 5]}
    one = {**document, "entries": [document["entries"][by_key["GC"]]]}  # (the schema checks each entry alone)
    assert manifest_validator.is_valid(one) and fast_manifest_validator.is_valid(one)
    for change in [{"reads_on": "tpu"}, {"layout": "sideways"}, {"dml_operator": "gemm"}, {"output_sizes": [3, 0]},
                   {"axis": 8}, {"note": ""}, {"reads_on": None}]:
        doc = copy.deepcopy(one)
        consumer = {k: v for k, v in {**gc, **change}.items() if v is not None}
        doc["entries"][0]["consumers"] = [consumer]
        assert not manifest_validator.is_valid(doc) and not fast_manifest_validator.is_valid(doc), change
    newer = {**older(document, 6), "entries": document["entries"]}  # (reads_on and the rest: 7 on)
    assert not manifest_validator.is_valid(newer) and not fast_manifest_validator.is_valid(newer)
