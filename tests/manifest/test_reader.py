"""load_plan never trusts the manifest: every corrupted field, overlaps, duplicate keys, text that is not a
manifest, a .bin that does not belong, claims of terabytes, random mutations: ManifestError, nothing else."""


from __future__ import annotations

import copy
import json
import os
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from budget import examples
from models import buffer_path, build_model, older
from system_calls import symlinks_work

from dmlbridge import convert_model, load_plan
from dmlbridge.errors import (
    DmlBridgeError,
    InvalidArgumentError,
    ManifestError,
)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    directory = tmp_path_factory.mktemp("written")
    path, _ = build_model(directory)
    convert_model(path, directory / "out", checksum=True, alignment=64)
    return directory, json.loads((directory / "out.json").read_text())


def _buffer(folder: Path, doc: dict[str, Any]) -> Path:
    """Where ``doc`` (a written manifest) says its buffer file is, for a copy of it in ``folder``."""
    return folder / doc["buffers"][0]["file"]


def _first(doc: dict[str, Any], converted: bool = True) -> dict[str, Any]:
    return next(e for e in doc["entries"] if (e["skipped"] is None) == converted)


def _set(path: str, value: Any) -> Any:
    def mutate(doc: dict[str, Any]) -> None:
        target: Any = doc
        parts = path.split(".")
        for part in parts[:-1]:
            target = _first(doc) if part == "E" else _first(doc, False) if part == "S" else (
                target[int(part)] if isinstance(target, list) else target[part])
        last: Any = int(parts[-1]) if isinstance(target, list) else parts[-1]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value(target[last]) if callable(value) else value
    return mutate


_DELETE = object()

MUTATIONS = {
    "format": _set("format", "onnx"),
    "format_version": _set("format_version", 8),
    "format_version_1_fields": _set("format_version", 1),
    "format_version_str": _set("format_version", "1"),
    "format_version_bool": _set("format_version", True),
    "missing_alignment": _set("alignment", _DELETE),
    "unknown_field": _set("extra", 1),
    "dmlbridge_version": _set("dmlbridge_version", 1),
    "source_not_object": _set("source", "model.onnx"),
    "source_size": _set("source.size", -1),
    "source_name": _set("source.name", 5),
    "alignment_24": _set("alignment", 24),
    "alignment_8": _set("alignment", 8),
    "alignment_float": _set("alignment", 64.0),
    "min_dims_9": _set("min_dims", 9),
    "min_dims_neg": _set("min_dims", -1),
    "total_size_neg": _set("total_size", -1),
    "total_size_str": _set("total_size", "100"),
    "total_size_mismatch": _set("total_size", lambda v: v + 64),
    "sha256": _set("buffers.0.sha256", "XYZ"),
    "fingerprint_missing": _set("buffers.0.fingerprint", _DELETE),
    "fingerprint_null": _set("buffers.0.fingerprint", None),
    "fingerprint_not_hex": _set("buffers.0.fingerprint", "XYZ"),
    "fingerprint_upper": _set("buffers.0.fingerprint", lambda v: v.upper()),
    "fingerprint_other": _set("buffers.0.fingerprint", lambda v: ("0" if v[0] != "0" else "1") + v[1:]),
    "conversion_id_missing": _set("conversion_id", _DELETE),
    "conversion_id_upper": _set("conversion_id", lambda v: v.upper()),
    "conversion_id_short": _set("conversion_id", "abc"),
    "conversion_id_other": _set("conversion_id", lambda v: ("0" if v[0] != "0" else "1") + v[1:]),
    "buffers_missing": _set("buffers", _DELETE),
    "buffers_empty": _set("buffers", []),
    "buffers_two": _set("buffers", lambda v: v + v),
    "buffer_not_object": _set("buffers.0", "out.bin"),
    "buffer_unknown_field": _set("buffers.0.extra", 1),
    "buffer_size": _set("buffers.0.size", lambda v: v + 1),
    "buffer_in_a_folder": _set("buffers.0.file", lambda v: "../" + v),
    "buffer_absolute": _set("buffers.0.file", lambda v: "/tmp/" + v),
    "buffer_hidden": _set("buffers.0.file", lambda v: "." + v),
    "buffer_other_conversion": _set("buffers.0.file", lambda v: v.replace(".0", ".1", 1)),
    "buffer_backslash": _set("buffers.0.file", lambda v: "a\\" + v),
    "buffer_stream": _set("buffers.0.file", lambda v: "model.onnx:" + v),
    "buffer_device": _set("buffers.0.file", lambda v: "LPT1" + v[v.index("."):]),
    "buffer_device_spaced": _set("buffers.0.file", lambda v: "con " + v[v.index("."):]),
    "target_level": _set("target.feature_level", "9.9"),
    "target_supported": _set("target.supported", ["BOGUS"]),
    "target_supported_unsorted": _set("target.supported", lambda v: list(reversed(v))),
    "target_int64": _set("target.int64", "maybe"),
    "target_lossy": _set("target.allow_lossy", "no"),
    "target_not_object": _set("target", None),
    "entries_not_list": _set("entries", {}),
    "entry_not_object": _set("entries.0", 7),
    "entry_missing_key": _set("E.key", _DELETE),
    "entry_empty_key": _set("E.key", ""),
    "entry_unknown_field": _set("E.note", "x"),
    "onnx_type": _set("E.onnx_type", "FLOAT99"),
    "onnx_type_undefined": _set("E.onnx_type", "UNDEFINED"),
    "shape_negative": _set("E.shape", [-2, 3]),
    "shape_float": _set("E.shape", [2.0, 3]),
    "shape_wrong": _set("E.shape", [3, 2, 1, 1, 1, 1, 1, 1, 1]),
    "dml_type_unknown": _set("E.dml_type", "FLOAT8"),
    "dml_type_inconsistent": _set("E.dml_type", "FLOAT64"),
    "conversion_unknown": _set("E.conversion", "magic"),
    "conversion_inconsistent": _set("E.conversion", "widen"),
    "offset_unaligned": _set("E.offset", lambda v: v + 16),
    "offset_null": _set("E.offset", None),
    "offset_past_end": _set("E.offset", 2**40),
    "desc_missing": _set("E.desc", None),
    "desc_field_missing": _set("E.desc.Flags", _DELETE),
    "desc_extra_field": _set("E.desc.Extra", 0),
    "desc_datatype": _set("E.desc.DataType", 2),
    "desc_flags": _set("E.desc.Flags", 2),
    "desc_dimcount": _set("E.desc.DimensionCount", 3),
    "desc_sizes": _set("E.desc.Sizes", [3, 2]),
    "desc_strides": _set("E.desc.Strides", [3, 1]),
    "desc_total": _set("E.desc.TotalTensorSizeInBytes", lambda v: v + 4),
    "desc_total_bool": _set("E.desc.Flags", False),
    "desc_alignment": _set("E.desc.GuaranteedBaseOffsetAlignment", 0),
    "skipped_with_offset": _set("S.offset", 0),
    "skipped_with_desc": _set("S.desc", {}),
    "skipped_empty_reason": _set("S.skipped", ""),
    "skipped_number": _set("S.skipped", 3),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_load_plan_refuses_each_corrupted_field(written: tuple[Path, dict[str, Any]], tmp_path: Path,
                                                name: str) -> None:
    directory, doc = written
    bad = copy.deepcopy(doc)
    MUTATIONS[name](bad)
    (tmp_path / "m.json").write_text(json.dumps(bad))
    _buffer(tmp_path, doc).write_bytes(buffer_path(directory / "out").read_bytes())
    with pytest.raises(ManifestError):
        load_plan(tmp_path / "m.json")


@pytest.mark.skipif(sys.platform == "win32", reason="such a file cannot be made on Windows: the name is the device")
def test_load_plan_refuses_a_buffer_file_named_as_a_windows_device(written: tuple[Path, dict[str, Any]],
                                                                   tmp_path: Path) -> None:
    """A manifest listing ``LPT1.<id>.00000.bin`` is refused by the name rule convert_model follows, not read:
    on Windows that name is the printer port, whatever follows its dot."""
    directory, doc = written
    bad = copy.deepcopy(doc)
    name = bad["buffers"][0]["file"]
    bad["buffers"][0]["file"] = "LPT1" + name[name.index(".") :]
    (tmp_path / "m.json").write_text(json.dumps(bad))
    (tmp_path / bad["buffers"][0]["file"]).write_bytes(buffer_path(directory / "out").read_bytes())
    with pytest.raises(ManifestError, match="LPT1, a Windows device name"):
        load_plan(tmp_path / "m.json")


def test_load_plan_refuses_overlaps_and_duplicate_keys(written: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    directory, doc = written
    _buffer(tmp_path, doc).write_bytes(buffer_path(directory / "out").read_bytes())
    bad = copy.deepcopy(doc)
    converted = [e for e in bad["entries"] if e["skipped"] is None]
    converted[1]["offset"] = converted[0]["offset"]
    (tmp_path / "m.json").write_text(json.dumps(bad))
    with pytest.raises(ManifestError, match="overlap"):
        load_plan(tmp_path / "m.json")
    bad = copy.deepcopy(doc)
    bad["entries"][1]["key"] = bad["entries"][0]["key"]
    (tmp_path / "m.json").write_text(json.dumps(bad))
    with pytest.raises(ManifestError, match="repeats the key"):
        load_plan(tmp_path / "m.json")


@pytest.mark.parametrize(
    "text",
    [
        "", "{", "[]", "null", '"plan"', "{} {}", '{"format": NaN}', '{"a": 1, "a": 2}', "[" * 100000 + "]" * 100000,
        '{"total_size": ' + "9" * 5000 + "}",
    ],
    ids=["empty", "truncated", "list", "null", "string", "two", "nan", "duplicate", "deep", "huge-int"],
)
def test_load_plan_refuses_text_that_is_not_a_manifest(tmp_path: Path, text: str) -> None:
    (tmp_path / "m.json").write_text(text)
    with pytest.raises(ManifestError):
        load_plan(tmp_path / "m.json")
    (tmp_path / "m.json").write_bytes(b'{"format": "\xff\xfe"}')
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_plan(tmp_path / "m.json")


def test_load_plan_checks_the_buffer_file(written: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    directory, doc = written
    data = buffer_path(directory / "out").read_bytes()
    buffer = _buffer(tmp_path, doc)
    (tmp_path / "m.json").write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match="cannot open the buffer file"):
        load_plan(tmp_path / "m.json")
    for wrong in (data + b"\x00", data[:-1], b""):
        buffer.write_bytes(wrong)
        with pytest.raises(ManifestError, match="holds"):
            load_plan(tmp_path / "m.json")
    buffer.write_bytes(data)
    assert load_plan(tmp_path / "m.json", verify=True).total_size == len(data)
    tampered = bytearray(data)
    tampered[-1] ^= 0xFF
    buffer.write_bytes(bytes(tampered))
    with pytest.raises(ManifestError, match="fingerprint"):  # sizes agree: the sampled fingerprint tells
        load_plan(tmp_path / "m.json")
    with pytest.raises(ManifestError, match="fingerprint"):
        load_plan(tmp_path / "m.json", verify=True)
    buffer.write_bytes(data)
    without = copy.deepcopy(doc)
    without["buffers"][0]["sha256"] = None
    (tmp_path / "m.json").write_text(json.dumps(without))
    with pytest.raises(ManifestError, match="no SHA-256"):
        load_plan(tmp_path / "m.json", verify=True)
    with pytest.raises(InvalidArgumentError, match="format-1"):
        load_plan(tmp_path / "m.json", bin_path=buffer)
    os.unlink(buffer)
    os.mkdir(buffer)
    with pytest.raises(ManifestError, match="not a regular file"):
        load_plan(tmp_path / "m.json")
    os.rmdir(buffer)
    if symlinks_work():  # (not on Wine, nor on a Windows without the privilege)
        (tmp_path / "elsewhere.bin").write_bytes(data)
        os.symlink(tmp_path / "elsewhere.bin", buffer)  # a buffer file is opened without following a symlink
        with pytest.raises(ManifestError, match="cannot open the buffer file"):
            load_plan(tmp_path / "m.json")
    with pytest.raises(ManifestError, match="cannot read manifest"):
        load_plan(tmp_path / "missing.json")


def test_format_1_manifests_are_still_read(written: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """The manifests earlier versions wrote: no conversion id and no buffer list; the buffer is PREFIX.bin, or
    the file bin_path= names."""
    directory, doc = written
    data = buffer_path(directory / "out").read_bytes()
    old = older(doc, 1)
    (tmp_path / "m.json").write_text(json.dumps(old))
    (tmp_path / "m.bin").write_bytes(data)
    plan = load_plan(tmp_path / "m.json", verify=True)
    assert plan.bin_path == str(tmp_path / "m.bin") and plan.format_version == 1 and plan.conversion_id is None
    assert plan.bin_sha256 == doc["buffers"][0]["sha256"]
    assert plan.manifest() == {**{k: v for k, v in doc.items() if k != "upload"},  # (format 7's)
                               "format_version": 1, "conversion_id": None,  # (its own version)
                               "buffers": plan.manifest()["buffers"],
                               "source": {**old["source"], "sha256": None, "external_data": []},
                               "max_buffer_bytes": None,  # (format 1 knows no consumers, one buffer of any size)
                               "entries": [{**e, "buffer": 0 if e["skipped"] is None else None}
                                           for e in old["entries"]]}
    key = next(e["key"] for e in doc["entries"] if e["skipped"] is None)
    assert plan.read(key).tobytes() == load_plan(directory / "out.json").read(key).tobytes()
    os.rename(tmp_path / "m.json", tmp_path / "m.manifest")
    with pytest.raises(ManifestError, match=r"\.json"):
        load_plan(tmp_path / "m.manifest")
    (tmp_path / "other.data").write_bytes(data)
    assert load_plan(tmp_path / "m.manifest", bin_path=tmp_path / "other.data").bin_path == str(tmp_path / "other.data")
    with pytest.raises(ManifestError, match=r"cannot open the buffer file .*embedded null"):
        load_plan(tmp_path / "m.manifest", bin_path=str(tmp_path / "other\x00.data"))


def test_a_nul_in_a_path_is_a_manifest_error() -> None:
    for path in ("a\x00b.json", "a\x00b"):
        with pytest.raises(ManifestError, match=r"cannot read manifest .*embedded null"):
            load_plan(path)


@pytest.mark.skipif(os.name != "posix", reason="FIFOs and /dev/zero are POSIX")
def test_load_plan_refuses_manifests_that_are_not_files(tmp_path: Path) -> None:
    """Refused before a byte is read: a FIFO (which would block), a device (endless), a file over
    max_manifest_bytes (a sparse 64 GiB file would be read into memory)."""
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(ManifestError, match="not a regular file"):
        load_plan(tmp_path / "fifo.json")
    os.symlink("/dev/zero", tmp_path / "zero.json")
    with pytest.raises(ManifestError, match="not a regular file"):
        load_plan(tmp_path / "zero.json")
    with open(tmp_path / "sparse.json", "wb") as file:
        file.truncate(64 << 30)
    with pytest.raises(ManifestError, match="max_manifest_bytes"):
        load_plan(tmp_path / "sparse.json")
    (tmp_path / "small.json").write_text("{" + " " * 100 + "}")
    with pytest.raises(ManifestError, match="max_manifest_bytes=50"):
        load_plan(tmp_path / "small.json", max_manifest_bytes=50)


def test_manifest_claiming_a_terabyte_is_refused_without_allocating(
    written: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    directory, doc = written
    bad = older(doc, 3)  # (format 4 holds a buffer to 0xFFFF0000 bytes: its size alone is refused)
    last = [e for e in bad["entries"] if e["skipped"] is None][-1]
    last["offset"] = 2**40
    bad["total_size"] = bad["buffers"][0]["size"] = 2**40 + last["desc"]["TotalTensorSizeInBytes"]
    (tmp_path / "m.json").write_text(json.dumps(bad))
    _buffer(tmp_path, doc).write_bytes(buffer_path(directory / "out").read_bytes())
    script = textwrap.dedent(f"""
        import resource, dmlbridge
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        try:
            dmlbridge.load_plan({str(tmp_path / "m.json")!r})
        except dmlbridge.ManifestError as exc:
            print("refused:", exc)
    """)
    if sys.platform == "win32":
        pytest.skip("RLIMIT_AS is POSIX")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "refused:" in result.stdout and "holds" in result.stdout, result.stderr


def test_random_manifest_mutations_only_raise_manifest_error(
    written: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    directory, doc = written
    text = (directory / "out.json").read_bytes()
    _buffer(tmp_path, doc).write_bytes(buffer_path(directory / "out").read_bytes())
    rng = random.Random(20240601)
    outcomes = {"refused": 0, "accepted": 0}
    runs = examples(300)
    for _ in range(runs):
        mutated = bytearray(text)
        for _ in range(rng.randint(1, 4)):
            how = rng.random()
            position = rng.randrange(len(mutated))
            if how < 0.5:
                mutated[position] = rng.randrange(256)
            elif how < 0.7:
                del mutated[position : position + rng.randint(1, 40)]
            elif how < 0.9:
                mutated[position:position] = rng.choice([b"0", b"9", b"-", b'"', b",", b"[", b"}", b"null"])
            else:
                mutated = mutated[:position]
        (tmp_path / "m.json").write_bytes(bytes(mutated))
        try:
            plan = load_plan(tmp_path / "m.json", verify=rng.random() < 0.3)
        except ManifestError:
            outcomes["refused"] += 1
        except DmlBridgeError as exc:  # pragma: no cover - would be a bug: load_plan raises ManifestError only
            pytest.fail(f"{type(exc).__name__}: {exc}")
        else:
            outcomes["accepted"] += 1
            for entry in plan.converted:  # an accepted plan must be readable
                plan.dml_array(entry.key)
    assert outcomes["refused"] > runs * 0.8


def _quantized_doc(directory: Path) -> tuple[Any, dict[str, Any]]:
    """A converted model with a per-axis INT8 DequantizeLinear ('dq'), a MatMulNBits with a bias and a scale of 0
    ('mm') and two plain constants ('u' UINT8 [8], 'f' FLOAT [4, 8]), and its manifest."""
    import numpy as np
    from onnx import helper, numpy_helper
    from quantized_models import OPSETS

    rng = np.random.default_rng(1)
    inits = {"x": rng.integers(-128, 128, (4, 8)).astype(np.int8), "s": (rng.random(8) + 0.1).astype(np.float32),
             "z": rng.integers(-128, 128, 8).astype(np.int8), "B": rng.integers(0, 256, (8, 3, 8)).astype(np.uint8),
             "S": (rng.random((8, 3)) + 0.1).astype(np.float32) * (np.arange(24) != 5).reshape(8, 3),
             "bias": np.arange(8, dtype=np.float32),
             "u": np.arange(8, dtype=np.uint8), "f": np.ones((4, 8), np.float32)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], "dq", axis=1),
             helper.make_node("MatMulNBits", ["A", "B", "S", "", "", "bias"], ["Y"], "mm", domain="com.microsoft",
                              K=48, N=8, bits=4, block_size=16)]
    graph = helper.make_graph(nodes, "g", [], [], [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=OPSETS)
    convert_model(model, directory / "q", progress=False)
    return model, json.loads((directory / "q.json").read_text())


def _repoint(doc: dict[str, Any], record: dict[str, Any], part: str, key: str, as_type: str | None = None) -> None:
    """Make ``record``'s ``part`` read entry ``key`` with the same sizes and strides, its desc right for that
    entry (so that only the part's role can tell), of the entry's DataType or ``as_type`` (UINT4 over a UINT8
    entry's bytes)."""
    from dmlbridge.tensor.layout import calc_buffer_tensor_size
    from dmlbridge.types.data_types import DmlDataType

    entry = next(e for e in doc["entries"] if e["key"] == key)
    desc = record[part]["desc"]
    dml = DmlDataType[as_type or entry["dml_type"]]
    total = calc_buffer_tensor_size(dml, desc["Sizes"], desc["Strides"])
    record[part] = {"key": key, "buffer": entry["buffer"], "offset": entry["offset"],
                    "desc": {**desc, "DataType": int(dml), "TotalTensorSizeInBytes": total}}


def test_tampered_quantized_records_are_refused(tmp_path: Path) -> None:
    """Each field of a quantized record against what its entries say and the planner gives: bits (against the
    types of the weight's and the zero points' entries too), each part's DML type for its role, parts that name
    three entries, each of its role (its own derived entry, or a constant its node reads as that input),
    signed, output_type, bias, granularity, the dimension count and the operator, and zero_scales against the
    scales' bytes."""
    model, doc = _quantized_doc(tmp_path)
    assert [r["key"] for r in doc["quantized"]] == ["dq", "mm"] and all(r["skipped"] is None for r in doc["quantized"])
    assert [r["zero_scales"] for r in doc["quantized"]] == [False, True]

    def dq(r: dict[str, Any]) -> dict[str, Any]:
        return next(x for x in r["quantized"] if x["key"] == "dq")

    def mm(r: dict[str, Any]) -> dict[str, Any]:
        return next(x for x in r["quantized"] if x["key"] == "mm")

    damages = {
        "bits 3": lambda d: dq(d).update(bits=3),
        "bits 0": lambda d: dq(d).update(bits=0),
        "bits 4 on an 8-bit weight": lambda d: dq(d).update(bits=4),
        "bits 2 on a 4-bit MatMulNBits": lambda d: mm(d).update(bits=2),
        "bits 8 on a 4-bit MatMulNBits": lambda d: mm(d).update(bits=8),
        "zero points over the record's own weight entry": lambda d: _repoint(d, mm(d), "zero_points", "B", "UINT4"),
        "zero points over a UINT8 entry the node does not read": lambda d: _repoint(d, mm(d), "zero_points", "u",
                                                                                      "UINT4"),
        "scales over another node's scales": lambda d: _repoint(d, dq(d), "scales", "S"),
        "zero_scales true over scales of no 0": lambda d: dq(d).update(zero_scales=True),
        "zero_scales false over a scale of 0": lambda d: mm(d).update(zero_scales=False),
        "scales over the INT8 weight": lambda d: _repoint(d, dq(d), "scales", "x"),
        "zero points over a UINT8 entry": lambda d: _repoint(d, dq(d), "zero_points", "u"),
        "zero points over the scales": lambda d: _repoint(d, dq(d), "zero_points", "s"),
        "weight over a FLOAT32 entry": lambda d: _repoint(d, dq(d), "weight", "f"),
        "output_type": lambda d: dq(d).update(output_type="FLOAT16"),
        "signed": lambda d: dq(d).update(signed=False),
        "signed MatMulNBits": lambda d: mm(d).update(signed=True),
        "bias of another shape": lambda d: mm(d).update(bias="f"),
        "bias on a DequantizeLinear": lambda d: dq(d).update(bias="bias"),
        "granularity without its axis": lambda d: dq(d).update(granularity="axis", axis=None),
        "per tensor with an axis": lambda d: dq(d).update(granularity="tensor"),
        "a weight with strides": lambda d: dq(d)["weight"]["desc"].update(Strides=[8, 1]),
        "a dimension more": lambda d: [dq(d).update(sizes=[1, 4, 8])] + [
            dq(d)[p]["desc"].update(DimensionCount=3, Sizes=[1, 4, 8], Strides=None if dq(d)[p]["desc"]["Strides"]
                                    is None else [0, *dq(d)[p]["desc"]["Strides"]]) for p in ("weight", "scales",
                                                                                            "zero_points")],
        "another operator": lambda d: dq(d).update(operator="ELEMENT_WISE_DEQUANTIZE_LINEAR"),
        "no operator": lambda d: dq(d).update(operator=None),
        "operator left out": lambda d: dq(d).pop("operator"),
        "skipped with an operator": lambda d: mm(d).update(skipped="no", sizes=None, weight=None, scales=None,
                                                           zero_points=None),
    }
    why = {  # (what the newer damages are refused for: each passes every other check)
        "bits 2 on a 4-bit MatMulNBits": r"weight.*UINT8 entry 'B' as UINT4, but with bits 2 and signed false the "
                                         r"weight are UINT2 values",
        "zero points over the record's own weight entry": r"name the entries.*entry of its own",
        "zero points over a UINT8 entry the node does not read": r"zero_points.*'u'.*neither the record's own entry "
                                                                 r"'mm/zero_points' nor a constant its node reads",
        "scales over another node's scales": r"scales.*'S'.*nor a constant its node reads as input 1",
        "zero_scales true over scales of no 0": r"'dq' says zero_scales=True but its scales 's' have no 0",
        "zero_scales false over a scale of 0": r"'mm' says zero_scales=False but its scales 'S' have 0",
    }
    for name, damage in damages.items():
        bad = copy.deepcopy(doc)
        damage(bad)
        (tmp_path / "q.json").write_text(json.dumps(bad))
        try:
            load_plan(tmp_path / "q.json")
        except ManifestError as exc:
            assert re.search(why.get(name, ""), str(exc)), (name, str(exc))
            continue
        pytest.fail(f"a record with {name} was accepted")
    old = older(doc, 4)  # (format 4 has no operator: one is an unknown field)
    old["quantized"][0]["operator"] = "DEQUANTIZE"
    (tmp_path / "q.json").write_text(json.dumps(old))
    with pytest.raises(ManifestError, match="unknown field"):
        load_plan(tmp_path / "q.json")

    (tmp_path / "q.json").write_text(json.dumps(doc))
    plan = load_plan(tmp_path / "q.json")
    plan.verify(model)
    assert plan.quantized["mm"].bias == "bias" and plan.quantized["dq"].dequantize().shape == (4, 8)
