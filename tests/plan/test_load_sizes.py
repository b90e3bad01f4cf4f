"""Sizes given at load: ``load_plan(..., input_shapes=..., dim_params=...)`` gives each consumer whose output sizes
are free dimensions of the model (a graph input's dim_param) its desc at those sizes, over the same bytes. The
expected descs are worked out here by hand from DirectML's broadcasting rule (docs/directml-facts.md): the output's
sizes, strides of 0 where the constant's dimension is 1 or missing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from budget import examples
from command_line import run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import older
from onnx import TensorProto, helper, numpy_helper

import dmlbridge
from dmlbridge import InvalidArgumentError, LayoutError, ManifestError
from dmlbridge.manifest.format import check_manifest_size, entries_size

F32 = TensorProto.FLOAT


def _model(nodes: list[Any], inputs: dict[str, tuple[int, list[Any]]], constants: dict[str, np.ndarray],
           opset: int = 17) -> onnx.ModelProto:
    outputs = [helper.make_tensor_value_info(out, F32, None) for node in nodes for out in node.output]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
                              outputs, [numpy_helper.from_array(v, k) for k, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _add_model() -> onnx.ModelProto:
    """x[batch, 3] + c[3]."""
    return _model([helper.make_node("Add", ["x", "c"], ["y"], name="add")], {"x": (F32, ["batch", 3])},
                  {"c": np.array([1.5, -2.0, 4.0], np.float32)})


def _batch_model() -> onnx.ModelProto:
    """x[batch, 3, 2] * k[2] + b[3, 1]: the Add's output sizes come from shape inference, with the dim_param."""
    nodes = [helper.make_node("Mul", ["x", "k"], ["y"], name="mul"),
             helper.make_node("Add", ["y", "b"], ["z"], name="add")]
    return _model(nodes, {"x": (F32, ["batch", 3, 2])},
                  {"k": np.arange(2, dtype=np.float32), "b": np.ones((3, 1), np.float32)})


def test_a_plan_loaded_at_a_batch_binds_each_consumer_there_over_the_same_bytes(tmp_path: Path) -> None:
    model = _add_model()
    dmlbridge.convert_model(model, tmp_path / "w", progress=False).close()
    doc = json.loads((tmp_path / "w.json").read_text())
    assert doc["graph_inputs"] == {"x": ["batch", 3]}
    assert doc["entries"][0]["consumers"][0]["output_sizes"] == ["batch", 3]
    with dmlbridge.load_plan(tmp_path / "w.json") as plan:
        free = plan.entries["c"].consumers[0]
        assert free.output_sizes is None and free.named_sizes == ("batch", 3) and free.sizes == (3,)
        assert "load_plan (dim_params=, input_shapes=)" in (free.layout_note or "")
        with pytest.raises(LayoutError, match=r"leaves 'batch' free: .*give them to load_plan"):
            free.as_ctypes()
        raw = plan.read("c").tobytes()
    for sizes, batch in (({"dim_params": {"batch": 4}}, 4), ({"input_shapes": {"x": (5, 3)}}, 5)):
        with dmlbridge.load_plan(tmp_path / "w.json", **sizes) as plan:  # type: ignore[arg-type]
            entry, add = plan.entries["c"], plan.entries["c"].consumers[0]
            assert (add.output_sizes, add.named_sizes, add.sizes, add.strides) == ((batch, 3), None, (batch, 3),
                                                                                   (0, 1))
            assert add.desc()["TotalTensorSizeInBytes"] == 12 and add.layout_note is None  # type: ignore[index]
            assert (entry.padding, entry.sizes, entry.strides, entry.layout_note) == ("broadcast", (batch, 3), (0, 1),
                                                                                      None)
            assert add.as_ctypes().TotalTensorSizeInBytes == 12
            assert plan.read("c").tobytes() == raw and plan.load_sizes == (("batch", batch),)
            assert np.array_equal(plan.array("c"), np.array([1.5, -2.0, 4.0], np.float32))
            plan.verify(model)
            direct = dmlbridge.plan_model(model, dim_params={"batch": batch}).entries["c"]
            assert add.desc() == direct.consumers[0].desc() and entry.desc() == direct.desc()


def test_sizes_given_at_load_are_those_a_conversion_given_them_records(tmp_path: Path) -> None:
    """Each consumer (its facts and its desc) and each entry of a plan loaded at a batch of 2 are those of the
    plan converted with it; the model's dim_param stays free in the manifest."""
    model = _batch_model()
    dmlbridge.convert_model(model, tmp_path / "w", progress=False).close()
    direct = dmlbridge.plan_model(model, dim_params={"batch": 2})
    with dmlbridge.load_plan(tmp_path / "w", dim_params={"batch": 2}) as plan:
        for key in ("k", "b"):
            assert plan.entries[key].consumers == direct.entries[key].consumers, key
            assert plan.entries[key].desc() == direct.entries[key].desc(), key
        mul, add = plan.entries["k"].consumers[0], plan.entries["b"].consumers[0]
        assert (mul.sizes, mul.strides, add.sizes, add.strides) == ((2, 3, 2), (0, 0, 1), (2, 3, 2), (0, 1, 0))
        plan.verify(model)
    assert run("verify", tmp_path / "w.json", tmp_path / "m.onnx").returncode == 2  # (no model file: usage)
    onnx.save(model, tmp_path / "m.onnx")
    assert run("verify", tmp_path / "w.json", tmp_path / "m.onnx").returncode == 0


def test_a_gemm_c_a_matmul_b_and_a_per_axis_scale_take_the_sizes_given_at_load(tmp_path: Path) -> None:
    """A Gemm's C at [M, N] where M is the batch; a MatMul's B [6, 5] beside A [batch, 4, 6] at [batch, 6, 5]
    (the output's rank, [1, 6, 5], until then); a DequantizeLinear's scale at its input's sizes, stride 1 on its
    axis only."""
    nodes = [helper.make_node("Gemm", ["a", "w", "c"], ["y"], name="gemm"),
             helper.make_node("MatMul", ["m", "b"], ["p"], name="matmul"),
             helper.make_node("DequantizeLinear", ["q", "s"], ["d"], name="dq", axis=1)]
    inputs = {"a": (F32, ["batch", 6]), "m": (F32, ["batch", 4, 6]), "q": (TensorProto.INT8, ["batch", 4])}
    model = _model(nodes, inputs, {"w": np.ones((6, 5), np.float32), "c": np.ones(5, np.float32),
                                   "b": np.ones((6, 5), np.float32), "s": np.full(4, 0.5, np.float32)})
    dmlbridge.convert_model(model, tmp_path / "w", progress=False).close()
    with dmlbridge.load_plan(tmp_path / "w") as plan:
        b = plan.entries["b"].consumers[0]
        assert (b.dims, b.named_sizes, b.sizes, b.strides) == (3, ("batch", 6, 5), (1, 6, 5), None)
        assert "it has the output's rank; give them to load_plan" in (b.layout_note or "")
    with dmlbridge.load_plan(tmp_path / "w", dim_params={"batch": 7}) as plan:
        c, s = plan.entries["c"].consumers[0], plan.entries["s"].consumers[0]
        assert (c.sizes, c.strides, s.sizes, s.strides, s.axis) == ((7, 5), (0, 1), (7, 4), (0, 1), 1)
        b = plan.entries["b"].consumers[0]
        assert (b.dims, b.output_sizes, b.sizes, b.strides, b.layout_note) == (None, (7, 6, 5), (7, 6, 5), (0, 5, 1),
                                                                               None)
        direct = dmlbridge.plan_model(model, dim_params={"batch": 7})
        for key in ("c", "b", "s"):
            assert plan.entries[key].consumers == direct.entries[key].consumers, key
        plan.verify(model)


def test_a_batch_shape_inference_carries_through_a_conv_is_sized_at_load(tmp_path: Path) -> None:
    """Conv keeps its input's batch (the dim_param) in its output: the Add's bias [4, 1, 1] is bound at
    [batch, 4, 3, 3] with strides of 0 but on the channel."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv"),
             helper.make_node("Add", ["y", "b"], ["z"], name="add")]
    model = _model(nodes, {"x": (F32, ["batch", 3, 5, 5])},
                   {"w": np.ones((4, 3, 3, 3), np.float32), "b": np.arange(4, dtype=np.float32).reshape(4, 1, 1)})
    dmlbridge.convert_model(model, tmp_path / "w", progress=False).close()
    with dmlbridge.load_plan(tmp_path / "w", dim_params={"batch": 2}) as plan:
        add = plan.entries["b"].consumers[0]
        assert (add.sizes, add.strides, add.desc()["TotalTensorSizeInBytes"]) == (  # type: ignore[index]
            (2, 4, 3, 3), (0, 1, 0, 0), 16)
        plan.verify(model)


def test_a_size_inference_invents_a_name_for_stays_free_at_load(tmp_path: Path) -> None:
    """A Reshape's [-1, 3] of x[batch, 6]: ONNX's inference calls the new dimension unk__0, which no caller can
    give. The Add's constant keeps its note at load (a conversion given the batch works it out, by data
    propagation), and the plan still verifies."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"),
             helper.make_node("Add", ["r", "c"], ["z"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, ["batch", 6])],
                              [helper.make_tensor_value_info("z", F32, None)],
                              [numpy_helper.from_array(np.array([-1, 3], np.int64), "s"),
                               numpy_helper.from_array(np.ones(3, np.float32), "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    dmlbridge.convert_model(model, tmp_path / "w", progress=False).close()
    with dmlbridge.load_plan(tmp_path / "w", dim_params={"batch": 2}) as plan:
        add = plan.entries["c"].consumers[0]
        assert add.named_sizes is None and add.sizes == (3,) and "does not declare" in (add.layout_note or "")
        with pytest.raises(LayoutError):
            add.as_ctypes()
        plan.verify(model)
    assert dmlbridge.plan_model(model, dim_params={"batch": 2}).entries["c"].consumers[0].sizes == (4, 3)


@pytest.mark.parametrize(("given", "message"), [
    ({"dim_params": {"sequence": 4}}, r"dim_params names 'sequence', which is no dim_param of the model's graph "
                                      r"inputs \(they name: 'batch'\)"),
    ({"input_shapes": {"y": (1, 3, 2)}}, r"input_shapes names 'y', which is no graph input of the model \(its "
                                         r"inputs: 'x'\)"),
    ({"input_shapes": {"x": (1, 3)}}, r"input_shapes gives 'x' 2 dimensions, but the model declares 3"),
    ({"input_shapes": {"x": (1, 4, 2)}}, r"input_shapes gives 'x' dimension 1 as 4, but the model declares 3"),
    ({"input_shapes": {"x": (2, 3, 2)}, "dim_params": {"batch": 3}},
     r"dim_params gives 'batch' as 3, but input_shapes gives 'x' dimension 0 \('batch'\) as 2 \(both are dim_param "
     r"'batch'\)"),
    ({"dim_params": {"batch": 0}}, r"dim_params\['batch'\] must be sizes from 1 to 2\^32 - 1"),
    ({"input_shapes": {"x": "1,3,2"}}, r"input_shapes\['x'\] must be a sequence of sizes"),
])
def test_sizes_at_load_that_do_not_fit_the_model_are_refused(given: dict[str, Any], message: str,
                                                              tmp_path: Path) -> None:
    dmlbridge.convert_model(_batch_model(), tmp_path / "w", progress=False).close()
    with pytest.raises(InvalidArgumentError, match=message):
        dmlbridge.load_plan(tmp_path / "w", **given)


def test_sizes_given_at_conversion_and_at_load_must_agree(tmp_path: Path) -> None:
    """The conversion's sizes are in its descs: load may repeat them, never change them."""
    dmlbridge.convert_model(_batch_model(), tmp_path / "w", progress=False, dim_params={"batch": 2}).close()
    with dmlbridge.load_plan(tmp_path / "w", input_shapes={"x": (2, 3, 2)}) as plan:
        assert plan.entries["k"].consumers[0].sizes == (2, 3, 2)
    with pytest.raises(InvalidArgumentError, match=r"dim_params gives 'batch' as 3, but the conversion was given "
                                                   r"'batch' = 2 \(the manifest's shapes\)"):
        dmlbridge.load_plan(tmp_path / "w", dim_params={"batch": 3})


def test_sizes_at_load_are_refused_where_the_manifest_records_no_free_dimension(tmp_path: Path) -> None:
    """A format-6 manifest names no free dimension, nor does one of a model whose graph inputs fix their sizes:
    the sizes would change nothing, so they are refused rather than ignored."""
    dmlbridge.convert_model(_batch_model(), tmp_path / "w", progress=False).close()
    doc = json.loads((tmp_path / "w.json").read_text())
    (tmp_path / "w.json").write_text(json.dumps(older(doc, 6)))
    with dmlbridge.load_plan(tmp_path / "w") as plan:
        assert plan.format_version == 6 and plan.entries["k"].consumers[0].output_sizes is None
    with pytest.raises(InvalidArgumentError, match=r"this manifest is of format 6, which records no free dimension"):
        dmlbridge.load_plan(tmp_path / "w", dim_params={"batch": 2})
    fixed = _model([helper.make_node("Add", ["x", "c"], ["y"])], {"x": (F32, [2, 3])}, {"c": np.ones(3, np.float32)})
    dmlbridge.convert_model(fixed, tmp_path / "f", progress=False).close()
    assert "graph_inputs" not in json.loads((tmp_path / "f.json").read_text())  # (as before: nothing is free)
    with pytest.raises(InvalidArgumentError, match=r"input_shapes given, but the manifest records no graph input "
                                                   r"with a free dimension"):
        dmlbridge.load_plan(tmp_path / "f", input_shapes={"x": (2, 3)})


def _entry(doc: dict[str, Any], key: str) -> dict[str, Any]:
    return next(entry for entry in doc["entries"] if entry["key"] == key)


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: _entry(d, "k")["consumers"][0].update(output_sizes=["batch", 3, ""]),
     r"output_sizes\[2\] must be a dim_param name of 1 to 4096 characters"),
    (lambda d: _entry(d, "k")["consumers"][0].update(output_sizes=["batch", 3, 0]),
     r"output_sizes\[2\] is 0, outside 1\.\.4294967295"),
    (lambda d: _entry(d, "k")["consumers"][0].update(output_sizes=["batch", 3, 5]),
     r"sizes \['batch', 3, 5\] do not broadcast the shape \[2\]"),
    (lambda d: d.update(graph_inputs={"x": [2, 3, 2]}), r"graph_inputs names no free dimension"),
    (lambda d: d.update(graph_inputs={"x": "batch"}), r"graph_inputs\[\"x\"\] must be null or an array"),
    (lambda d: d.update(graph_inputs={"x": ["batch", 0, 2]}), r"graph_inputs\[\"x\"\]\[1\] is 0, outside 1\.\."),
    (lambda d: d.update(graph_inputs={}), r"graph_inputs must be an object of 1 to 65536"),
])
def test_a_tampered_free_dimension_is_refused(change: Any, message: str, tmp_path: Path) -> None:
    dmlbridge.convert_model(_batch_model(), tmp_path / "w", progress=False).close()
    doc = json.loads((tmp_path / "w.json").read_text())
    change(doc)
    (tmp_path / "w.json").write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match=message):
        dmlbridge.load_plan(tmp_path / "w")


def test_a_name_on_a_consumer_that_records_no_sizes_is_refused(tmp_path: Path) -> None:
    model = _model([helper.make_node("Gather", ["t", "i"], ["y"], name="g")], {"i": (TensorProto.INT64, ["n"])},
                   {"t": np.ones((4, 2), np.float32)})
    dmlbridge.convert_model(model, tmp_path / "w", progress=False).close()
    doc = json.loads((tmp_path / "w.json").read_text())
    _entry(doc, "t")["consumers"][0]["output_sizes"] = ["n", 2]
    (tmp_path / "w.json").write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match=r"output_sizes names a free dimension, which only an element-wise"):
        dmlbridge.load_plan(tmp_path / "w")


def test_the_manifest_size_check_counts_the_graph_inputs() -> None:
    """A model's graph inputs are recorded whole: their names count against max_manifest_bytes before anything is
    written."""
    name = "x" * 4000
    model = _model([helper.make_node("Add", [name, "c"], ["y"])], {name: (F32, ["batch", 3])},
                   {"c": np.ones(3, np.float32)})
    plan = dmlbridge.plan_model(model)
    assert plan.graph_inputs == ((name, ("batch", 3)),)
    lines = entries_size(plan.entries)
    check_manifest_size(plan.entries, lines)  # (the entries alone fit)
    with pytest.raises(InvalidArgumentError, match=r"max_manifest_bytes"):
        check_manifest_size(plan.entries, lines + 4000, plan.graph_inputs)
    check_manifest_size(plan.entries, lines + 4100, plan.graph_inputs)


def test_the_binding_list_at_a_batch_given_on_the_command_line(tmp_path: Path) -> None:
    """``dmlbridge bindings`` lists the entry at [8, 3] with strides 0,1 (its 12 bytes as they are), and names
    the flag of a size that does not fit."""
    dmlbridge.convert_model(_add_model(), tmp_path / "w", progress=False).close()
    plain = run("bindings", tmp_path / "w.json")
    assert plain.returncode == 0 and "tensor c 0 0 FLOAT32 0 1 3 - 12 256" in plain.stdout, plain.stderr
    sized = run("bindings", tmp_path / "w.json", "--dim-param", "batch=8")
    assert sized.returncode == 0 and "tensor c 0 0 FLOAT32 0 2 8,3 0,1 12 256" in sized.stdout, sized.stderr
    assert run("bindings", tmp_path / "w.json", "--input-shape", "x=8,3").stdout == sized.stdout
    wrong = run("bindings", tmp_path / "w.json", "--input-shape", "x=8,4")
    assert wrong.returncode == 2 and "--input-shape gives 'x' dimension 1 as 4, but the model declares 3" in \
        wrong.stderr, wrong.stderr


@st.composite
def _free_models(draw: st.DrawFn) -> tuple[onnx.ModelProto, dict[str, int]]:
    """Two element-wise nodes over x of 1 to 4 dimensions, each a size or a dim_param ("batch", "seq"), each node
    with a constant that broadcasts to x (1 under a name), and a size for each name."""
    rank = draw(st.integers(1, 4))
    dims = [draw(st.one_of(st.sampled_from(["batch", "seq"]), st.integers(1, 4))) for _ in range(rank)]
    ops = draw(st.lists(st.sampled_from(["Add", "Mul", "Sub", "Div", "Max"]), min_size=2, max_size=2))
    constants = {}
    for k in range(2):
        own = draw(st.integers(0, rank))
        shape = [1 if isinstance(d, str) else draw(st.sampled_from([1, d])) for d in dims[rank - own:]]
        constants[f"c{k}"] = np.full(shape, k + 2, np.float32)
    nodes = [helper.make_node(ops[0], ["x", "c0"], ["y"], name="first"),
             helper.make_node(ops[1], ["y", "c1"], ["z"], name="second")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, dims)],
                              [helper.make_tensor_value_info("z", F32, None)],
                              [numpy_helper.from_array(v, k) for k, v in constants.items()])
    sizes = {name: draw(st.integers(1, 5)) for name in sorted({d for d in dims if isinstance(d, str)})}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), sizes


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])
@given(case=_free_models())
def test_random_free_sizes_given_at_load_give_the_descs_a_conversion_given_them_gives(
        case: tuple[onnx.ModelProto, dict[str, int]], tmp_path: Path) -> None:
    model, sizes = case
    dmlbridge.convert_model(model, tmp_path / "w", progress=False).close()
    direct = dmlbridge.plan_model(model, dim_params=sizes or None)
    with dmlbridge.load_plan(tmp_path / "w", dim_params=sizes or None) if sizes else \
            dmlbridge.load_plan(tmp_path / "w") as plan:
        for key in ("c0", "c1"):
            assert [c.desc() for c in plan.entries[key].consumers] == \
                [c.desc() for c in direct.entries[key].consumers], key
            assert plan.entries[key].desc() == direct.entries[key].desc(), key
        plan.verify(model, progress=False)
