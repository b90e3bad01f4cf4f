"""The binding list (docs/bindings.md): what ``binding_list`` and ``dmlbridge bindings`` write, read back by an
independent parser of the spec (tests/helpers/bindings_format.py) and held to the manifest's JSON, parsed by
``json``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from bindings_format import DML_TYPES, Desc, decode, encode, parse
from builders import model_of
from models import buffer_paths

import dmlbridge
from dmlbridge.cli.commands import main
from dmlbridge.cli.demo import build_sample_model

REPO = Path(__file__).resolve().parents[2]


def _model(arrays: dict[str, np.ndarray]) -> object:
    return model_of(arrays)


def _desc_of(manifest_desc: dict) -> tuple:
    return (manifest_desc["DataType"], manifest_desc["Flags"], tuple(manifest_desc["Sizes"]),
            None if manifest_desc["Strides"] is None else tuple(manifest_desc["Strides"]),
            manifest_desc["TotalTensorSizeInBytes"], manifest_desc["GuaranteedBaseOffsetAlignment"])


def _line_desc(line: object) -> tuple:
    from bindings_format import DML_TYPES

    d = line.desc  # type: ignore[attr-defined]
    return (DML_TYPES.index(d.data_type), d.flags, d.sizes, d.strides, d.total, d.alignment)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("demo")
    model = build_sample_model(folder)
    plan = dmlbridge.convert_model(model, folder / "w", progress=False)
    text = dmlbridge.binding_list(plan)
    plan.close()
    return folder, text


def test_every_entry_and_part_is_a_line_equal_to_the_manifest(demo: tuple[Path, str]) -> None:
    folder, text = demo
    listed = parse(text)
    manifest = json.loads((folder / "w.json").read_text())
    assert listed.target == manifest["target"]["feature_level"]
    assert listed.buffers == [(b["file"], b["size"]) for b in manifest["buffers"]]
    tensors = [line for line in listed.lines if line.kind == "tensor"]
    converted = [e for e in manifest["entries"] if e["skipped"] is None]
    assert [t.key for t in tensors] == [e["key"] for e in converted]
    for line, entry in zip(tensors, converted, strict=True):
        assert (line.buffer, line.offset) == (entry["buffer"], entry["offset"])
        assert _line_desc(line) == _desc_of(entry["desc"])
    parts = [line for line in listed.lines if line.kind == "part"]
    split = {(p.record, p.role): p for p in parts if p.form == "split"}
    records = [q for q in manifest["quantized"] if q["skipped"] is None]
    assert records and {r for r, _ in split} == {q["key"] for q in records}
    for record in records:
        for role in ("weight", "scales", "zero_points"):
            line, part = split[record["key"], role], record[role]
            assert (line.key, line.buffer, line.offset) == (part["key"], part["buffer"], part["offset"])
            assert _line_desc(line) == _desc_of(part["desc"])


def test_the_blocked_form_of_a_matmulnbits_weight(demo: tuple[Path, str]) -> None:
    # The demo's MatMulNBits: N=4, K=48, 4 bits in blocks of 16: B [4, 3, 8] uint8 = UINT4 [4, 48]; scales [4, 3];
    # zero points packed [4, 2] (rows of 4 nibbles, the last spare), read as UINT4 [4, 3] with a row stride of 4.
    _, text = demo
    blocked = {p.role: p for p in parse(text).lines if p.kind == "part" and p.record == "qmatmul"
               and p.form == "blocked"}
    assert (blocked["weight"].desc.data_type, blocked["weight"].desc.sizes, blocked["weight"].desc.strides,
            blocked["weight"].desc.total) == ("UINT4", (4, 48), None, 96)
    assert (blocked["scales"].desc.sizes, blocked["scales"].desc.strides) == ((4, 3), (3, 1))
    assert (blocked["zero_points"].desc.data_type, blocked["zero_points"].desc.sizes,
            blocked["zero_points"].desc.strides, blocked["zero_points"].desc.total) == ("UINT4", (4, 3), (4, 1), 8)
    # Only weights blocked on their last axis have a blocked form (the demo's GatherBlockQuantized is blocked on
    # axis 1 of 2, its DequantizeLinear on axis 1 of 2: both last; none is per axis).
    forms = {(p.record, p.form) for p in parse(text).lines if p.kind == "part"}
    assert {r for r, f in forms if f == "blocked"} == {r for r, f in forms if f == "split"}


def test_every_gpu_consumer_of_the_demo_is_a_line_with_its_own_desc(demo: tuple[Path, str]) -> None:
    folder, text = demo
    listed = parse(text)
    with dmlbridge.load_plan(folder / "w.json") as plan:
        expected = [(e.key, i, c.node, c.input, c.dml_operator, _bound(c)) for e in plan.converted
                    for i, c in enumerate(e.consumers) if c.reads_on == "gpu"]
        assert listed.uploads == ["gpu"] * plan.upload_buffer_count + ["cpu"] * (
            len(plan.buffers) - plan.upload_buffer_count)
        assert [t.reads_on for t in listed.lines if t.kind == "tensor"] == [e.reads_on for e in plan.converted]
    assert [(c.key, c.index, c.node, c.input, c.operator, _consumer_dict(c.desc))
            for c in listed.consumers] == expected
    assert len(expected) >= 10 and sum(desc is None for *_, desc in expected) == 1  # (a DequantizeLinear's scale)


def _bound(consumer: object) -> dict | None:
    """The desc ``as_ctypes()`` binds, or None where it raises LayoutError (its layout note says why)."""
    try:
        consumer.as_ctypes()  # type: ignore[attr-defined]
    except dmlbridge.LayoutError:
        return None
    return consumer.desc()  # type: ignore[attr-defined,no-any-return]


def _consumer_dict(d: Desc | None) -> dict | None:
    """A line's desc as ``PlanConsumer.desc()`` gives one."""
    if d is None:
        return None
    return {"DataType": DML_TYPES.index(d.data_type), "Flags": d.flags, "DimensionCount": len(d.sizes),
            "Sizes": list(d.sizes), "Strides": None if d.strides is None else list(d.strides),
            "TotalTensorSizeInBytes": d.total, "GuaranteedBaseOffsetAlignment": d.alignment}


def _cpu_and_broadcast_model(undecided: bool = True) -> object:
    """x [2, 3] + c [3] (a broadcast operand), a Reshape's shape (read on the CPU) and u (undeclared) * c."""
    from onnx import helper, numpy_helper

    nodes = [helper.make_node("Add", ["x", "c"], ["s"], name="add"),
             helper.make_node("Reshape", ["s", "shape"], ["r"], name="reshape"),
             helper.make_node("Mul", ["u", "c"], ["m"], name="mul u")][: 3 if undecided else 2]
    inits = [numpy_helper.from_array(np.arange(3, dtype=np.float32), "c"),
             numpy_helper.from_array(np.array([3, 2], np.int64), "shape")]
    inputs = [helper.make_tensor_value_info("x", 1, [2, 3]), helper.make_tensor_value_info("u", 1, None)]
    return helper.make_model(helper.make_graph(nodes, "g", inputs, [], inits))


@pytest.mark.parametrize("upload", ["bound", "all"])
def test_constants_read_on_the_cpu_and_each_consumers_desc(tmp_path: Path, upload: str) -> None:
    with dmlbridge.convert_model(_cpu_and_broadcast_model(), tmp_path / "w", upload=upload,
                                 progress=False) as plan:
        text = dmlbridge.binding_list(plan)
        listed = parse(text)
        assert listed.uploads == ["gpu" if b.uploaded else "cpu" for b in plan.buffers]
        tensors = {t.key: t for t in listed.lines}
        assert {k: t.reads_on for k, t in tensors.items()} == {"c": "gpu", "shape": "cpu"}
        assert (listed.uploads[tensors["shape"].buffer] == "cpu") == (upload == "bound")
        assert (tensors["shape"].desc.data_type, tensors["shape"].desc.sizes) == ("INT64", (2,))  # (its values)
        consumers = plan.entries["c"].consumers
    add, mul = listed.consumers  # (none for the Reshape's shape: it binds nothing)
    assert (add.key, add.index, add.node, add.input, add.operator) == ("c", 0, "add", 1, "ELEMENT_WISE_ADD")
    assert (add.desc.sizes, add.desc.strides, add.desc.total) == ((2, 3), (0, 1), 12)
    assert _consumer_dict(add.desc) == consumers[0].desc()
    assert (add.buffer, add.offset) == (tensors["c"].buffer, tensors["c"].offset)
    # Undeclared sizes: "-", and the manifest's layout note says why.
    assert (mul.node, mul.operator, mul.desc) == ("mul u", "ELEMENT_WISE_MULTIPLY", None)
    assert consumers[1].layout_note and re.search(r"^consumer c 1 mul%20u 1 ELEMENT_WISE_MULTIPLY -$", text, re.M)


def test_keys_and_file_names_are_percent_encoded(tmp_path: Path) -> None:
    keys = ["a b", "100%", "ü/ß:x", "tab\there", "-", "semi;colon,comma"]
    arrays = {k: np.full(2, i, np.float32) for i, k in enumerate(keys)}
    prefix = tmp_path / "my weights"
    with dmlbridge.convert_model(_model(arrays), prefix, progress=False) as plan:
        text = dmlbridge.binding_list(plan)
    assert re.search(r"^tensor a%20b ", text, re.M) and re.search(r"^tensor 100%25 ", text, re.M)
    assert re.search(r"^tensor %C3%BC/%C3%9F:x ", text, re.M) and "tab%09here" in text
    listed = parse(text)
    assert [line.key for line in listed.lines] == keys
    assert listed.buffers[0][0] == buffer_paths(prefix)[0].name and listed.buffers[0][0].startswith("my weights.")
    assert " my%20weights." in text
    assert decode(encode("x y")) == "x y"


def test_several_buffer_files(tmp_path: Path) -> None:
    arrays = {f"w{i}": np.arange(64, dtype=np.float32) + i for i in range(5)}
    with dmlbridge.convert_model(_model(arrays), tmp_path / "w", max_buffer_bytes=512, progress=False) as plan:
        listed = parse(dmlbridge.binding_list(plan))
        assert len(listed.buffers) == len(plan.buffers) == 3  # 256 bytes each: two per 512-byte buffer
        assert [(line.buffer, line.offset) for line in listed.lines] == [(0, 0), (0, 256), (1, 0), (1, 256), (2, 0)]
        assert [size for _, size in listed.buffers] == [p.stat().st_size for p in buffer_paths(tmp_path / "w")]


def test_emulated_int64_is_int32_with_doubled_strides(tmp_path: Path) -> None:
    target = dmlbridge.Target("6.4", supported={"FLOAT32", "INT32", "UINT32"})
    with dmlbridge.convert_model(_model({"i": np.array([1, -2, 3], np.int64)}), tmp_path / "w", target=target,
                                 progress=False) as plan:
        (line,) = parse(dmlbridge.binding_list(plan)).lines
    assert (line.desc.data_type, line.desc.sizes, line.desc.strides, line.desc.total) == ("INT32", (3,), (2,), 24)


def test_a_plan_that_was_not_written_has_no_bindings() -> None:
    plan = dmlbridge.plan_model(_model({"w": np.ones(2, np.float32)}))
    with pytest.raises(dmlbridge.InvalidArgumentError, match="not written"):
        dmlbridge.binding_list(plan)


def test_the_command_prints_or_writes_the_list(demo: tuple[Path, str], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    folder, text = demo
    assert main(["bindings", str(folder / "w.json")]) == 0
    assert capsys.readouterr().out == text
    assert main(["bindings", str(folder / "w"), "-o", str(tmp_path / "w.bindings")]) == 0  # (a prefix works too)
    assert (tmp_path / "w.bindings").read_text() == text and capsys.readouterr().out == ""
    assert [p.name for p in tmp_path.iterdir()] == ["w.bindings"]  # (no temporary file left)


def test_the_command_refuses_a_missing_or_damaged_conversion(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bindings", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dmlbridge bindings: error: ") and len(err.splitlines()) == 1
    dmlbridge.convert_model(_model({"w": np.ones(64, np.float32)}), tmp_path / "w", progress=False).close()
    (bin_file,) = buffer_paths(tmp_path / "w")
    bin_file.write_bytes(bin_file.read_bytes()[:-4])
    assert main(["bindings", str(tmp_path / "w.json"), "-o", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert "holds 252 bytes" in captured.err and captured.out == "" and not (tmp_path / "out").exists()


def test_the_spec_example_follows_the_spec() -> None:
    doc = (REPO / "docs" / "bindings.md").read_text()
    demo, cpu = (block.split("```", 1)[0] for block in doc.split("```text\n")[1:])
    listed = parse(demo)
    assert listed.buffers and {line.kind for line in listed.lines} == {"tensor", "part"} and listed.consumers
    assert any(c.desc is None for c in listed.consumers)
    assert parse(cpu).uploads == ["gpu", "cpu"]


def test_an_older_manifests_list_uploads_every_buffer(tmp_path: Path) -> None:
    # Format 6 marks no buffer as not uploaded, and took every consumer as binding its constant (it names no
    # operator): every buffer and tensor is gpu, each consumer's operator "-" and its desc the entry's.
    from models import older

    dmlbridge.convert_model(_cpu_and_broadcast_model(undecided=False), tmp_path / "w", upload="all",
                            progress=False).close()
    manifest = tmp_path / "w.json"
    manifest.write_text(json.dumps(older(json.loads(manifest.read_text()), 6)))
    with dmlbridge.load_plan(manifest) as plan:
        listed = parse(dmlbridge.binding_list(plan))
        assert listed.uploads == ["gpu"] * len(plan.buffers)
        assert [(t.key, t.reads_on) for t in listed.lines] == [("c", "gpu"), ("shape", "gpu")]
        assert [(c.key, c.index, c.node, c.input, c.operator) for c in listed.consumers] == [
            ("c", 0, "add", 1, None), ("shape", 0, "reshape", 1, None)]
        assert [c.desc for c in listed.consumers] == [t.desc for t in listed.lines]
