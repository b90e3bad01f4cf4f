"""The manifest's writer: the text streamed in pieces is the manifest, its entries' size worked out from the plan's
columns is the size of the lines written, and every line holds at least MIN_ENTRY_LINE characters besides its key
and origin (the lower bound a model's constants are refused by before it is parsed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from builders import model_of
from models import small_model
from onnx import helper, numpy_helper

import dmlbridge
from dmlbridge.manifest import format
from dmlbridge.manifest.format import check_manifest_size, entries_size, manifest_chunks, manifest_text
from dmlbridge.model.model_limits import MIN_ENTRY_LINE


def _models() -> dict[str, tuple[object, dict[str, object]]]:
    """Models whose lines take every form: shared pair texts, several buffers, skipped entries, consumers,
    clamped counts, keys and origins that JSON escapes."""
    mixed, _ = small_model(300, seed=3)
    many = model_of({f"w{i}": np.ones(1 + i % 3, np.float32) for i in range(100)})  # (16 lines a piece, below)
    odd = model_of({"wé\"\\x\n": np.ones(3, np.float32), "b": np.array(["s"], object), "e": np.zeros((0, 2))},
                   [helper.make_node("Conv", ["x", "wé\"\\x\n", "b"], ["y"], name="n\u2192"),
                    helper.make_node("Add", ["b", "e"], ["z"])])
    wide = model_of({"big": np.array([2**40, -5, 3], np.int64), "n": np.ones(2, np.float32)})
    lossy = dmlbridge.Target("2.0", int64="saturate", allow_lossy=True)
    return {"mixed": (mixed, {}), "many": (many, {}), "split": (many, {"max_buffer_bytes": 1 << 16}), "odd": (odd, {}),
            "clamped": (wide, {"target": lossy}), "empty": (model_of({}), {}),
            "unsupported": (odd, {"target": dmlbridge.Target("1.0")})}


@pytest.mark.parametrize("name", list(_models()))
def test_the_size_worked_out_is_the_size_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setattr(format, "_LINES_AT_ONCE", 16)  # (4096 lines a piece otherwise: several pieces here)
    model, options = _models()[name]
    plan = dmlbridge.convert_model(model, tmp_path / "w", progress=False, alignment=16, **options)  # type: ignore[arg-type]
    text = (tmp_path / "w.json").read_text()
    assert text == manifest_text(plan) == b"".join(manifest_chunks(plan)).decode()
    assert len(list(manifest_chunks(plan))) == ((len(plan.entries) + 15) // 16 + 1 if plan.entries else 1)
    _, _, rest = text.partition('  "entries": [\n')
    lines = rest.rsplit("\n  ]\n}\n", 1)[0].split(",\n") if plan.entries else []
    assert len(lines) == len(plan.entries)
    if name != "clamped":  # (the clamped counts are known once the values are written: not before)
        assert entries_size(plan.entries) == sum(map(len, lines))
        check_manifest_size(plan.entries, sum(map(len, lines)))
        if lines:  # (the upper bound it checks first never lets a larger one through)
            with pytest.raises(dmlbridge.InvalidArgumentError, match="max_manifest_bytes"):
                check_manifest_size(plan.entries, sum(map(len, lines)) - 1)
    assert entries_size(dmlbridge.load_plan(tmp_path / "w.json").entries) == sum(map(len, lines))
    for line in lines:
        entry = json.loads(line)
        assert len(line) >= MIN_ENTRY_LINE + len(entry["key"]) + len(entry["origin"]), line


def test_a_manifest_over_the_limit_is_refused_naming_it() -> None:
    """At the limit exactly it passes; a byte below, it is refused (the upper bound checked first is not)."""
    plan = dmlbridge.plan_model(model_of({f"w{i}\u00e9": np.ones(1, np.float32) for i in range(10)}))
    size = entries_size(plan.entries)
    check_manifest_size(plan.entries, size)
    with pytest.raises(dmlbridge.InvalidArgumentError, match=rf"10 constants .* max_manifest_bytes={size - 1} "):
        check_manifest_size(plan.entries, size - 1)


def test_the_shortest_line_is_longer_than_the_bound() -> None:
    """The shortest line there is: a skipped entry of a one-letter name whose reason is the shortest."""
    strings = numpy_helper.from_array(np.array(["s"], object), "s")
    plan = dmlbridge.plan_model(model_of([strings], [helper.make_node("Constant", [], ["c"], value_string="x")]))
    shortest = min(len(json.dumps(entry.to_json())) + 4 - len(entry.key) - len(entry.origin)
                   for entry in plan.entries.values())
    assert MIN_ENTRY_LINE <= shortest < MIN_ENTRY_LINE + 60, shortest
