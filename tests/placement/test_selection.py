"""Choosing what to convert: include/exclude patterns on keys, origin kinds, a minimum size; recorded in the
manifest, honoured by verify."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any, get_args

import numpy as np
import onnx
import pytest
from builders import model_of, sparse
from command_line import run
from models import older
from onnx import helper, numpy_helper

import dmlbridge
from dmlbridge import InvalidArgumentError, ManifestError
from dmlbridge.model.constants import ConstantKind, find_constants
from dmlbridge.placement.selection import CONSTANT_KINDS, Selection
from dmlbridge.plan.verify import find_mismatches


def model_of_kinds() -> onnx.ModelProto:
    """Initializers, Constant nodes of several kinds, a sparse initializer, of several sizes."""
    inits = [
        numpy_helper.from_array(np.arange(64, dtype=np.float32), "layers.0.weight"),
        numpy_helper.from_array(np.arange(4, dtype=np.float32), "layers.0.bias"),
        numpy_helper.from_array(np.arange(32, dtype=np.float16), "layers.1.weight"),
        numpy_helper.from_array(np.arange(2, dtype=np.int64), "head.shape"),
    ]
    nodes = [
        helper.make_node("Constant", [], ["c_tensor"], value=numpy_helper.from_array(np.ones(8, np.float32))),
        helper.make_node("Constant", [], ["c_float"], value_float=2.5),
        helper.make_node("Constant", [], ["c_ints"], value_ints=[1, 2, 3]),
    ]
    return model_of(inits, nodes, sparse=[sparse("sp", np.array([1.0, 2.0], np.float32), np.array([1, 3], np.int64),
                                                 [4])])


def expected_keys(model: onnx.ModelProto, include: list[str] | None, exclude: list[str], kinds: list[str] | None,
                  min_bytes: int) -> list[str]:
    """The selection worked out with fnmatch itself, one constant at a time."""
    keys = []
    for c in find_constants(model):
        if include is not None and not any(fnmatch.fnmatchcase(c.key, p) for p in include):
            continue
        if any(fnmatch.fnmatchcase(c.key, p) for p in exclude):
            continue
        if kinds is not None and c.kind not in kinds:
            continue
        if c.nbytes < min_bytes:
            continue
        keys.append(c.key)
    return keys


def test_the_kinds_are_the_constants_kinds() -> None:
    assert CONSTANT_KINDS == get_args(ConstantKind)


@pytest.mark.parametrize("checked_only", ["", "1"], ids=["fast-paths", "checked-path-only"])
@pytest.mark.parametrize(
    ("include", "exclude", "kinds", "min_bytes"),
    [
        (["layers.*"], [], None, 0),
        (None, ["*.bias", "c_*"], None, 0),
        (["layers.*", "head.*"], ["*.1.*"], None, 0),
        (None, [], ["value", "value_float"], 0),
        (None, [], None, 64),
        (["nothing*"], [], None, 0),
    ],
)
def test_a_selection_converts_exactly_the_constants_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checked_only: str, include: list[str] | None,
    exclude: list[str], kinds: list[str] | None, min_bytes: int,
) -> None:
    monkeypatch.setenv("DMLBRIDGE_CHECKED_PATH_ONLY", checked_only)
    model = model_of_kinds()
    whole = dmlbridge.convert_model(model, tmp_path / "all", progress=False)
    chosen = dmlbridge.convert_model(model, tmp_path / "some", progress=False, include=include, exclude=exclude,
                                     kinds=kinds, min_bytes=min_bytes)
    keys = expected_keys(model, include, exclude, kinds, min_bytes)
    assert list(chosen.entries) == keys
    initializers = {i.name: i for i in model.graph.initializer}
    for key in keys:  # each selected constant's bytes are what converting everything gives
        assert chosen.read(key).tobytes() == whole.read(key).tobytes()
        if key in initializers:
            assert chosen.array(key).tobytes() == numpy_helper.to_array(initializers[key]).tobytes()
    assert dmlbridge.plan_model(model, include=include, exclude=exclude, kinds=kinds,
                                min_bytes=min_bytes).entries.keys() == chosen.entries.keys()
    loaded = dmlbridge.load_plan(tmp_path / "some.json", verify=False)
    assert loaded == chosen and loaded.selection == Selection.check(include, exclude, kinds, min_bytes)
    loaded.verify(model)  # the constants left out are not "missing"


def test_verify_compares_only_the_selected_constants(tmp_path: Path) -> None:
    model = model_of_kinds()
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False, include=["layers.*"])
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    changed.graph.initializer[3].CopyFrom(numpy_helper.from_array(np.arange(5, dtype=np.int64), "head.shape"))
    # head.shape is not in the selection: only the model file's hash tells it changed
    (problem,) = find_mismatches(plan, changed)
    assert problem.startswith("the plan was made from another model file")
    changed.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones(64, dtype=np.float32), "layers.0.weight"))
    assert [p.split(":")[0] for p in find_mismatches(plan, changed)[1:]] == ["'layers.0.weight'"]


def test_strict_applies_to_the_selected_constants_only(tmp_path: Path) -> None:
    model = model_of_kinds()
    model.graph.initializer.append(numpy_helper.from_array(np.array(["a", "b"], dtype=object), "labels"))
    with pytest.raises(dmlbridge.UnsupportedTypeError, match="'labels'"):
        dmlbridge.convert_model(model, tmp_path / "w", progress=False, strict=True)
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False, strict=True, exclude=["labels"])
    assert "labels" not in plan.entries and all(e.skipped is None for e in plan.entries.values())


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"include": "layers.*"}, r"include must be a list of strings, got 'layers.\*'; write include=\['layers"),
        ({"exclude": [""]}, "exclude must hold non-empty strings"),
        ({"exclude": [3]}, "exclude must hold non-empty strings"),
        ({"kinds": ["initialiser"]}, "kinds names 'initialiser', which is not a kind of constant; the kinds are"),
        ({"min_bytes": -1}, "min_bytes must be a non-negative integer"),
        ({"min_bytes": True}, "min_bytes must be a non-negative integer"),
        ({"include": ["*"] * 1025}, "include holds 1025 items, more than 1024"),
    ],
)
def test_bad_selections_are_refused(keywords: dict[str, Any], message: str) -> None:
    for function in (dmlbridge.plan_model, dmlbridge.check_conversion):
        with pytest.raises(InvalidArgumentError, match=message):
            function(model_of_kinds(), **keywords)


def test_a_manifest_with_a_bad_selection_is_refused(tmp_path: Path) -> None:
    dmlbridge.convert_model(model_of_kinds(), tmp_path / "w", progress=False, include=["layers.*"])
    manifest = tmp_path / "w.json"
    doc = json.loads(manifest.read_text())
    for selection, message in [({**doc["selection"], "kinds": ["nope"]}, "kinds names 'nope'"),
                               ({**doc["selection"], "min_bytes": -2}, "min_bytes is -2"),
                               ({"include": None}, "lacks the field"),
                               ("all", "must be a JSON object")]:
        manifest.write_text(json.dumps({**doc, "selection": selection}))
        with pytest.raises(ManifestError, match=message):
            dmlbridge.load_plan(manifest)


def test_a_format_2_manifest_selects_every_constant(tmp_path: Path) -> None:
    model = model_of_kinds()
    dmlbridge.convert_model(model, tmp_path / "w", progress=False)
    manifest = tmp_path / "w.json"
    manifest.write_text(json.dumps(older(json.loads(manifest.read_text()), 2)))
    plan = dmlbridge.load_plan(manifest)
    assert plan.format_version == 2 and plan.selection.everything
    plan.verify(model)


def test_the_command_line_selects_too(tmp_path: Path) -> None:
    model = model_of_kinds()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)

    chosen = ["--include", "layers.*", "--include", "head.*", "--exclude", "*.bias", "--min-bytes", "32"]
    inspect = run("inspect", path, "--json", *chosen)
    assert inspect.returncode == 0, inspect.stderr
    assert [e["key"] for e in json.loads(inspect.stdout)["entries"]] == ["layers.0.weight", "layers.1.weight"]
    converted = run("convert", path, "-o", tmp_path / "w", "--quiet", *chosen, "--kinds", "initializer")
    assert converted.returncode == 0, converted.stderr
    assert list(dmlbridge.load_plan(tmp_path / "w.json").entries) == ["layers.0.weight", "layers.1.weight"]
    verified = run("verify", tmp_path / "w.json", path)
    assert verified.returncode == 0, verified.stderr
    bad = run("convert", path, "-o", tmp_path / "x", "--kinds", "initialiser")
    assert bad.returncode == 2 and "--kinds names 'initialiser'" in bad.stderr, bad.stderr
