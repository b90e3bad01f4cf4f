"""What reading a manifest may cost, bounded before it is parsed: a manifest within ``max_manifest_bytes`` whose JSON
is dense in objects, arrays and short values (32 MiB of ``{}`` entries took 816 MiB and 15 s before it was
refused) is refused from its bytes, before the parse, by ``load_plan``, ``verify``, ``bindings`` and ``clean``; the
bound is ``PARSE_COST_FACTOR`` times the manifest's size, which the manifests dmlbridge writes meet too. Peak
memory is measured with tracemalloc (what Python allocates), on documents of 128 KiB.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import model_of
from command_line import one_line_error, run
from onnx import TensorProto, helper, numpy_helper

import dmlbridge
from dmlbridge import ManifestError, convert_model, load_plan
from dmlbridge.manifest import json_fields
from dmlbridge.manifest.format import parse_manifest
from dmlbridge.manifest.json_fields import PARSE_COST_FACTOR, parse_cost, parse_json

_SIZE = 128 << 10  # bytes of each document measured


def _peak(call: Callable[[], Any]) -> int:
    """The most Python allocated at once while ``call`` ran (what it returns let go first)."""
    gc.collect()
    tracemalloc.start()
    try:
        call()
    except ManifestError:
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def _honest(folder: Path, count: int) -> Path:
    """A conversion of ``count`` small constants into ``folder / "m"``: a manifest of about 330 bytes an entry."""
    model = model_of([numpy_helper.from_array(np.full((2, 3), i, np.float32), f"w{i}") for i in range(count)])
    convert_model(model, folder / "m", progress=False).close()
    return folder / "m.json"


def _with_entries(manifest: Path, item: bytes, size: int = _SIZE) -> bytes:
    """``manifest``'s head, then an ``entries`` array of ``item`` repeated to about ``size`` bytes."""
    document = json.loads(manifest.read_bytes())
    document["entries"] = []
    head = json.dumps(document).encode()
    head = head[: head.rindex(b"[]")]
    return head + b"[" + b",".join([item] * (size // (len(item) + 1))) + b"]}"


# JSON as dense as it gets in each kind of value: what each costs per byte is what the bound must cover
_DENSE = {
    "objects": b"{}", "arrays": b"[]", "nested arrays": b"[[[[[[[[]]]]]]]]", "one-key objects": b'{"a":0}',
    "objects of objects": b'{"a":{}}', "arrays of one": b"[0]", "short strings": b'"ab"', "numbers": b"1000",
    "floats": b"1.5", "escaped characters": b'"\\u1234"', "astral characters": b'"\\ud83d\\ude00"',
    "long numbers": b"123456789012345678901234567890", "objects of strings": b'{"ab":"ab"}',
}


def test_the_bound_covers_what_the_parse_of_any_json_takes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """parse_cost, read from the bytes alone, is at least what the parse then takes, for JSON of each kind of
    value as dense as it gets, for one object of many distinct keys and for text that is not ASCII."""
    monkeypatch.setattr(json_fields, "PARSE_COST_FACTOR", 10**6)  # (parsed, to be measured)
    size = _SIZE // 2
    documents = {kind: b"[" + b",".join([item] * (size // (len(item) + 1))) + b"]" for kind, item in _DENSE.items()}
    documents["distinct keys"] = b"[{" + b",".join(b'"%x":0' % i for i in range(size // 8)) + b"}]"
    documents["distinct strings"] = b"[" + b",".join(b'"%x"' % i for i in range(size // 6)) + b"]"
    documents["a wide character"] = '["\U0001f600'.encode() + b"a" * size + b'"]'
    for kind, raw in documents.items():
        peak = _peak(lambda raw=raw: parse_json(raw, "m.json"))
        assert peak <= parse_cost(raw), (kind, peak / len(raw), parse_cost(raw) / len(raw))


def _reshapes(folder: Path, count: int) -> Path:
    """A conversion of a chain of ``count`` Reshape nodes, each reading its own shape constant (one of the densest
    manifests: short entries, each with a consumer of short fields)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    shapes = [numpy_helper.from_array(np.array([1, 4], np.int64), f"s{i}") for i in range(count)]
    nodes = [helper.make_node("Reshape", ["x" if i == 0 else f"y{i - 1}", f"s{i}"], [f"y{i}"]) for i in range(count)]
    y = helper.make_tensor_value_info(f"y{count - 1}", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], shapes))
    convert_model(model, folder / "r", progress=False).close()
    return folder / "r.json"


def test_honest_manifests_meet_the_bound(tmp_path: Path) -> None:
    """A manifest dmlbridge writes is within the bound with room (14 to 15 times its size, for constants alone and
    for constants each read by a node; its parse, measured, takes 4 to 5), and parse_manifest's peak is within it."""
    for manifest in (_honest(tmp_path, 400), _reshapes(tmp_path, 300)):
        raw = manifest.read_bytes()
        assert len(raw) > 64 << 10 and parse_cost(raw) <= 0.8 * PARSE_COST_FACTOR * len(raw), parse_cost(raw) / len(raw)
    raw = (tmp_path / "m.json").read_bytes()
    peak = _peak(lambda: parse_manifest(raw, "m.json"))
    assert peak <= PARSE_COST_FACTOR * len(raw), peak / len(raw)
    with load_plan(tmp_path / "m.json") as plan:
        assert plan.array("w399").tolist() == [[399.0] * 3] * 2


@pytest.mark.parametrize("kind", ["objects", "nested arrays", "one-key objects", "arrays of one"])
def test_a_dense_manifest_is_refused_before_it_is_parsed_everywhere(tmp_path: Path, kind: str) -> None:
    """A manifest of the right head whose entries are ``{}`` (or nested arrays, one-key objects, arrays of one
    number), within max_manifest_bytes: parsing it took 25 to 41 times its size before any entry was checked.
    load_plan refuses it from its bytes (its peak: the bytes it read, at most three times their size), and so do
    verify, bindings and clean (which reads a PREFIX.json planted beside a prefix), each with one line naming the
    file."""
    manifest = _honest(tmp_path, 2)
    raw = _with_entries(manifest, _DENSE[kind])
    manifest.write_bytes(raw)
    peak = _peak(lambda: load_plan(manifest))
    with pytest.raises(ManifestError, match=r"times its size .*refused before parsing"):
        load_plan(manifest)
    assert peak <= 3 * len(raw), peak / len(raw)  # (the bytes read, twice on Windows, where they are copied)
    (tmp_path / "m.onnx").write_bytes(model_of([]).SerializeToString())  # type: ignore[attr-defined]
    for command in (["verify", manifest, tmp_path / "m.onnx"], ["bindings", manifest], ["clean", tmp_path / "m"]):
        line = one_line_error(run(*command))
        assert "refused before parsing" in line and "m.json" in line, (command, line)
    with pytest.raises(ManifestError, match="refused before parsing"):
        dmlbridge.clean(tmp_path / "m")


def test_the_head_is_checked_before_the_parse(tmp_path: Path) -> None:
    """A file that begins as a manifest of another format or of a version this dmlbridge does not read is refused
    from its first bytes, whatever follows (here 128 KiB of ``{}``), with the parse's own words; a manifest whose
    fields are in another order is read all the same (the parse checks it)."""
    manifest = _honest(tmp_path, 2)
    document = json.loads(manifest.read_bytes())
    dense = b", " + b",".join([b"{}"] * (_SIZE // 3))
    for head, message in ((b'{"format": "onnx", "format_version": 7', "not a dmlbridge upload plan .format 'onnx'"),
                          (b'{"format": "dmlbridge-upload-plan", "format_version": 99', "has format_version 99")):
        (tmp_path / "x.json").write_bytes(head + dense)
        with pytest.raises(ManifestError, match=message):
            load_plan(tmp_path / "x.json")
    manifest.write_text(json.dumps(dict(sorted(document.items()))))
    with load_plan(manifest) as plan:
        assert plan.array("w1").tolist() == [[1.0] * 3] * 2
