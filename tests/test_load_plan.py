"""load_plan never trusts the manifest: every corrupted field, overlaps, duplicate keys, text that is not a
manifest, a .bin that does not belong, claims of terabytes, random mutations: ManifestError, nothing else."""


from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from models import (
    build_model,
)

from dmlbridge import convert_model, load_plan
from dmlbridge.errors import (
    DmlBridgeError,
    ManifestError,
)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    directory = tmp_path_factory.mktemp("written")
    path, _ = build_model(directory)
    convert_model(path, directory / "out", checksum=True, alignment=64)
    return directory, json.loads((directory / "out.json").read_text())


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
    "format_version": _set("format_version", 2),
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
    "bin_sha256": _set("bin_sha256", "XYZ"),
    "bin_fingerprint_missing": _set("bin_fingerprint", _DELETE),
    "bin_fingerprint_null": _set("bin_fingerprint", None),
    "bin_fingerprint_not_hex": _set("bin_fingerprint", "XYZ"),
    "bin_fingerprint_upper": _set("bin_fingerprint", lambda v: v.upper()),
    "bin_fingerprint_other": _set("bin_fingerprint", lambda v: ("0" if v[0] != "0" else "1") + v[1:]),
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
    "desc_flags": _set("E.desc.Flags", 1),
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
    (tmp_path / "m.bin").write_bytes((directory / "out.bin").read_bytes())
    with pytest.raises(ManifestError):
        load_plan(tmp_path / "m.json")


def test_load_plan_refuses_overlaps_and_duplicate_keys(written: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    directory, doc = written
    (tmp_path / "m.bin").write_bytes((directory / "out.bin").read_bytes())
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
    (tmp_path / "m.bin").write_bytes(b"")
    with pytest.raises(ManifestError):
        load_plan(tmp_path / "m.json")
    (tmp_path / "m.json").write_bytes(b'{"format": "\xff\xfe"}')
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_plan(tmp_path / "m.json")


def test_load_plan_checks_the_bin(written: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    directory, doc = written
    data = (directory / "out.bin").read_bytes()
    (tmp_path / "m.json").write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match="cannot read the buffer image"):
        load_plan(tmp_path / "m.json")
    for wrong in (data + b"\x00", data[:-1], b""):
        (tmp_path / "m.bin").write_bytes(wrong)
        with pytest.raises(ManifestError, match="holds"):
            load_plan(tmp_path / "m.json")
    (tmp_path / "m.bin").write_bytes(data)
    assert load_plan(tmp_path / "m.json", verify=True).total_size == len(data)
    tampered = bytearray(data)
    tampered[-1] ^= 0xFF
    (tmp_path / "m.bin").write_bytes(bytes(tampered))
    with pytest.raises(ManifestError, match="bin_fingerprint"):  # sizes agree: the sampled fingerprint tells
        load_plan(tmp_path / "m.json")
    with pytest.raises(ManifestError, match="bin_fingerprint"):
        load_plan(tmp_path / "m.json", verify=True)
    (tmp_path / "m.bin").write_bytes(data)
    without = dict(doc)
    del without["bin_sha256"]
    (tmp_path / "m.json").write_text(json.dumps(without))
    with pytest.raises(ManifestError, match="no bin_sha256"):
        load_plan(tmp_path / "m.json", verify=True)
    os.unlink(tmp_path / "m.bin")
    os.mkdir(tmp_path / "m.bin")
    with pytest.raises(ManifestError, match="not a regular file"):
        load_plan(tmp_path / "m.json")
    with pytest.raises(ManifestError, match="cannot read manifest"):
        load_plan(tmp_path / "missing.json")
    with pytest.raises(ManifestError, match=r"\.json"):
        load_plan(tmp_path / "m.manifest")
    (tmp_path / "other.data").write_bytes(data)
    assert load_plan(tmp_path / "m.json", bin_path=tmp_path / "other.data").bin_path == str(tmp_path / "other.data")


def test_manifest_claiming_a_terabyte_is_refused_without_allocating(
    written: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    directory, doc = written
    bad = copy.deepcopy(doc)
    last = [e for e in bad["entries"] if e["skipped"] is None][-1]
    last["offset"] = 2**40
    bad["total_size"] = 2**40 + last["desc"]["TotalTensorSizeInBytes"]
    (tmp_path / "m.json").write_text(json.dumps(bad))
    (tmp_path / "m.bin").write_bytes((directory / "out.bin").read_bytes())
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
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "refused:" in result.stdout and "holds" in result.stdout, result.stderr


def test_random_manifest_mutations_only_raise_manifest_error(
    written: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    directory, _ = written
    text = (directory / "out.json").read_bytes()
    (tmp_path / "m.bin").write_bytes((directory / "out.bin").read_bytes())
    rng = random.Random(20240601)
    outcomes = {"refused": 0, "accepted": 0}
    runs = int(os.environ.get("DMLBRIDGE_FUZZ_EXAMPLES") or 300)  # a longer run: DMLBRIDGE_FUZZ_EXAMPLES=20000
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
