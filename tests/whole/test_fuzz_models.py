"""Fuzzing whole models: real serialized models with bit flips, byte changes, truncations, insertions and
duplicated chunks, and parsed models with hostile field values, fed to plan_model, convert_model (as bytes and as
a file) and ``dmlbridge inspect``.

The only exceptions allowed out are DmlBridgeError subclasses (no DecodeError, RecursionError, MemoryError,
KeyError, ...); a failed conversion leaves the previous outputs exactly as they were and no other file; a model
that converts reads back through load_plan and verifies bit for bit. The seeds are the demo's sample model, a
generated model with a constant in every place and form, and models from onnx's backend test data.

The number of examples per test is bounded for the suite; DMLBRIDGE_EXAMPLES multiplies it, as for every random
test (tests/helpers/budget.py).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import random
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from budget import examples
from builders import EDITS, constant_nodes, loop_with_if, mutate_bytes
from command_line import run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import output_names
from onnx import TensorProto, external_data_helper, helper, numpy_helper
from system_calls import let_go

from dmlbridge import convert_model, load_plan, plan_model
from dmlbridge.cli import commands as cli
from dmlbridge.cli.demo import build_sample_model
from dmlbridge.errors import DmlBridgeError

EXAMPLES = examples(100)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
LIMIT = 1 << 26  # max_tensor_bytes while fuzzing: a mutated claim must not make the suite slow
ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
ONNX_MODELS = [
    "pytorch-converted/test_Conv2d",
    "pytorch-converted/test_BatchNorm2d_eval",
    "pytorch-converted/test_Embedding",
    "pytorch-converted/test_PReLU_2d_multiparam",
    "pytorch-operator/test_operator_addconstant",
    "pytorch-operator/test_operator_non_float_params",
    "pytorch-operator/test_operator_repeat_dim_overflow",
    "simple/test_sequence_model1",
]
BAD_NAME = "\x01BADNAME\x01"  # replaced by invalid UTF-8 of the same length after serializing


def build_rich_model(directory: Path) -> Path:
    """A model with a constant in every place and form: initializers (raw and typed, every kind of type),
    external data, a sparse initializer, Constant nodes of every form, If/Loop/Scan subgraphs, a function."""
    inits = [
        numpy_helper.from_array(np.array([[1.5, -2.0], [0.25, 3.0]], np.float32), "f32"),
        helper.make_tensor("f16", TensorProto.FLOAT16, [3], np.array([1, -2, 0.5], np.float16), raw=False),
        numpy_helper.from_array(np.array([1, -3], ml_dtypes.bfloat16), "bf16"),
        helper.make_tensor("i4", TensorProto.INT4, [5], np.array([-8, -1, 0, 1, 7], ml_dtypes.int4), raw=False),
        numpy_helper.from_array(np.array([3, 0, 1, 2, 3], ml_dtypes.uint2), "u2"),
        numpy_helper.from_array(np.array([0.5, -28, 3], ml_dtypes.float6_e3m2fn), "f6"),
        helper.make_tensor("i64", TensorProto.INT64, [3], [-5, 7, 2**31 - 1], raw=False),
        helper.make_tensor("u64", TensorProto.UINT64, [2], [0, 2**32 - 1], raw=False),
        numpy_helper.from_array(np.array([True, False]), "b"),
        numpy_helper.from_array(np.array([1 / 3, -0.0]), "f64"),
        numpy_helper.from_array(np.array(["a", "bc"], dtype=object), "s"),
        numpy_helper.from_array(np.zeros((0, 3), np.float32), "empty"),
    ]
    blob = np.arange(64, dtype=np.float32).tobytes()
    (directory / "rich.data").write_bytes(blob + bytes(64))
    ext = TensorProto(name="ext", data_type=TensorProto.FLOAT, dims=[8, 8], raw_data=blob)
    external_data_helper.set_external_data(ext, "rich.data", offset=0, length=len(blob))
    ext.ClearField("raw_data")
    inits.append(ext)
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([4, 5, 6], np.int16), "sp"),
        numpy_helper.from_array(np.array([[0, 1], [2, 0], [2, 3]], np.int64), "sp_i"), [3, 4])
    sparse_value = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.5], np.float16), "ks"), numpy_helper.from_array(np.array([2]), "ks_i"),
        [4])
    nodes = constant_nodes(sparse_value)
    scan_body = helper.make_graph(
        [helper.make_node("Constant", [], ["S"], value=numpy_helper.from_array(np.array([1, 2], np.int32)))],
        "scan", [], [])
    nodes.append(loop_with_if())
    nodes.append(helper.make_node("Scan", ["x"], ["so"], name="scan", body=scan_body, num_scan_inputs=1))
    function = helper.make_function(
        "local", "Fn", ["x"], ["y"],
        [helper.make_node("Constant", [], ["fk"], value=numpy_helper.from_array(np.array([2, 3], np.uint32))),
         helper.make_node("Mul", ["x", "fk"], ["y"])],
        [helper.make_opsetid("", 21)])
    graph = helper.make_graph(nodes, "main", [], [], inits, sparse_initializer=[sparse])
    model = helper.make_model(graph, functions=[function], opset_imports=[helper.make_opsetid("", 21)])
    path = directory / "rich.onnx"
    onnx.save(model, path)
    return path


class Seed:
    """A real serialized model, the directory its external data lives in, and the outputs it converts to."""

    def __init__(self, name: str, path: Path, work: Path) -> None:
        self.name = name
        self.data = path.read_bytes()
        self.directory = work / name.replace("/", "_")
        self.directory.mkdir()
        for sibling in path.parent.iterdir():  # the model's external data, if any
            if sibling.is_file() and sibling != path and not sibling.name.endswith(".pb"):
                shutil.copy(sibling, self.directory / sibling.name)
        previous = self.directory / "previous"
        previous.mkdir()
        convert_model(self.data, previous / "o", base_dir=self.directory, progress=False)
        self.previous = {p.name: p.read_bytes() for p in previous.iterdir()}


def _seeds() -> list[Seed]:
    work = Path(tempfile.mkdtemp(prefix="dmlbridge-fuzz-models-"))
    sources = [("demo", Path(build_sample_model(work)))]
    (work / "rich_src").mkdir()
    sources.append(("rich", build_rich_model(work / "rich_src")))
    sources += [(name, ONNX_DATA / name / "model.onnx") for name in ONNX_MODELS
                if (ONNX_DATA / name / "model.onnx").is_file()]
    return [Seed(name, path, work) for name, path in sources]


@pytest.fixture(scope="module")
def seeds() -> Iterator[list[Seed]]:
    found = _seeds()
    assert len(found) >= 6, "onnx's backend test data models are missing"
    yield found
    shutil.rmtree(found[0].directory.parent, ignore_errors=True)


STATS: Counter[str] = Counter()


def _outcome(what: str, call: Any) -> Any:
    """Run call(); a DmlBridgeError is a refusal (None), anything else escaping fails the test."""
    try:
        result = call()
    except DmlBridgeError as exc:
        STATS[f"{what} refused: {type(exc).__name__}"] += 1
        return None
    STATS[f"{what} accepted"] += 1
    return result


def _exercise(seed: Seed, data: bytes) -> None:
    _outcome("plan_model", lambda: plan_model(data))
    out = Path(tempfile.mkdtemp(dir=seed.directory, prefix="out-"))
    try:
        for form in ("bytes", "file"):
            for name, content in seed.previous.items():
                (out / name).write_bytes(content)
            if form == "bytes":
                model: Any = data
                kwargs: dict[str, Any] = {"base_dir": seed.directory}
            else:
                model = seed.directory / "fuzz.onnx"
                model.write_bytes(data)
                kwargs = {}
            plan = _outcome(f"convert {form}", functools.partial(
                convert_model, model, out / "o", progress=False, max_tensor_bytes=LIMIT, **kwargs))
            if plan is None:
                # Refused: the previous outputs are untouched and nothing else was left behind, not the lock.
                assert set(os.listdir(out)) == set(seed.previous)
                assert {name: (out / name).read_bytes() for name in seed.previous} == seed.previous
            else:  # the new conversion, and the previous one's buffer file gone
                assert output_names(out) == ["o.ID.00000.bin", "o.json"]
                assert not set(seed.previous) - {"o.json"} & set(os.listdir(out))
                loaded = load_plan(out / "o.json", verify=False)
                assert loaded.manifest() == plan.manifest()
                loaded.verify(model, max_tensor_bytes=LIMIT, **kwargs)
                let_go(plan, loaded)  # (so that the next form's folder lists only its own buffer file)
        path = seed.directory / "fuzz.onnx"
        for extra in ([], ["--json"]):
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                status = cli.main(["inspect", str(path), *extra])
            assert status in (0, 2), status
            if status == 2:
                assert len(stderr.getvalue().strip().splitlines()) == 1, stderr.getvalue()
    finally:
        shutil.rmtree(out, ignore_errors=True)


# --- byte-level mutations of serialized models ----------------------------------------------------------------

@FUZZ
@given(index=st.integers(0, 63), edits=EDITS)
def test_mutated_serialized_models_raise_only_dmlbridge_errors(seeds: list[Seed], index: int, edits: list) -> None:
    seed = seeds[index % len(seeds)]
    _exercise(seed, mutate_bytes(seed.data, edits))


# --- field-level mutations of parsed models --------------------------------------------------------------------

HUGE = [0, 1, -1, 3, 2**31, 2**32, 2**40, 2**62, 2**63 - 1, -(2**63)]


def _tensors(model: onnx.ModelProto) -> tuple[list[TensorProto], list[Any], list[Any]]:
    """Every TensorProto, SparseTensorProto and Constant-node attribute in the model."""
    tensors: list[TensorProto] = []
    sparse: list[Any] = []
    attributes: list[Any] = []

    def walk_nodes(nodes: Any) -> None:
        for node in nodes:
            for attr in node.attribute:
                attributes.append(attr)
                if attr.HasField("t"):
                    tensors.append(attr.t)
                if attr.HasField("sparse_tensor"):
                    sparse.append(attr.sparse_tensor)
                    tensors.extend([attr.sparse_tensor.values, attr.sparse_tensor.indices])
                if attr.HasField("g"):
                    walk_graph(attr.g)
                for graph in attr.graphs:
                    walk_graph(graph)

    def walk_graph(graph: Any) -> None:
        tensors.extend(graph.initializer)
        for s in graph.sparse_initializer:
            sparse.append(s)
            tensors.extend([s.values, s.indices])
        walk_nodes(graph.node)

    walk_graph(model.graph)
    for function in model.functions:
        walk_nodes(function.node)
    return tensors, sparse, attributes


def mutate_fields(model: onnx.ModelProto, rng: random.Random) -> None:
    tensors, sparse, attributes = _tensors(model)
    if not tensors:
        model.graph.initializer.add().CopyFrom(TensorProto(name="t", data_type=1, dims=[1], float_data=[1.0]))
        tensors, sparse, attributes = _tensors(model)
    t = rng.choice(tensors)
    choice = rng.randrange(16)
    if choice == 0:
        t.data_type = rng.choice([*range(-2, 32), 2**31 - 1, -(2**31)])
    elif choice == 1:
        if t.dims:
            t.dims[rng.randrange(len(t.dims))] = rng.choice(HUGE)
        else:
            t.dims.append(rng.choice(HUGE))
    elif choice == 2:
        t.dims.extend([1] * rng.randrange(1, 12))
    elif choice == 3:
        t.raw_data = rng.randbytes(rng.randrange(0, 40))
    elif choice == 4:
        t.data_location = rng.choice([0, 1])
    elif choice == 5:
        entry = t.external_data.add()
        entry.key = rng.choice(["location", "offset", "length", "checksum", "basepath", "other"])
        entry.value = rng.choice(["rich.data", "sample.weights", "0", "-1", "16", "99999999999999999999", "../x",
                                  "/etc/passwd", "C:\\x", "file:///x", "a" * 300, "0" * 40, ""])
    elif choice == 6:
        t.ClearField("dims")
    elif choice == 7:
        field = rng.choice(["float_data", "int32_data", "int64_data", "uint64_data", "double_data", "string_data"])
        values = getattr(t, field)
        if field == "string_data":
            values.append(rng.randbytes(3))
        elif field == "uint64_data":
            values.append(rng.choice([0, 2**64 - 1, 5]))
        elif field in ("float_data", "double_data"):
            values.append(rng.choice([1.5, float("nan"), -0.0]))
        elif field == "int32_data":
            values.append(rng.choice([0, -1, 2**31 - 1, 300, -(2**31)]))
        else:
            values.append(rng.choice([0, -1, 2**63 - 1]))
    elif choice == 8 and sparse:
        s = rng.choice(sparse)
        if s.dims and rng.random() < 0.5:
            s.dims[rng.randrange(len(s.dims))] = rng.choice(HUGE)
        else:
            s.dims.append(rng.choice(HUGE))
    elif choice == 9 and sparse:
        s = rng.choice(sparse)
        indices = rng.choice([[0], [5, 5], [-1], [2**40], [[0, 0]], [[9, 9], [0, 0], [1, 1]], []])
        s.indices.CopyFrom(numpy_helper.from_array(np.array(indices, dtype=np.int64), "i"))
    elif choice == 10 and attributes:
        rng.choice(attributes).type = rng.randrange(0, 15)
    elif choice == 11 and attributes:
        attr = rng.choice(attributes)
        if rng.random() < 0.5:
            attr.floats.append(1.0)
        else:
            attr.ints.append(2**63 - 1)
    elif choice == 12:
        t.segment.begin = 0
    elif choice == 13:
        t.ClearField("raw_data")
    elif choice == 14:
        t.name = BAD_NAME
    else:
        (rng.choice(attributes) if attributes and rng.random() < 0.5 else t).name = rng.choice(
            ["", "x" * 5000, "dup", "../../etc", "a/b#2"])


@FUZZ
@given(index=st.integers(0, 63), seed=st.integers(0, 2**32 - 1), count=st.integers(1, 4))
def test_models_with_hostile_fields_raise_only_dmlbridge_errors(
    seeds: list[Seed], index: int, seed: int, count: int
) -> None:
    source = seeds[index % len(seeds)]
    model = onnx.ModelProto()
    model.ParseFromString(source.data)
    rng = random.Random(seed)
    for _ in range(count):
        mutate_fields(model, rng)
    data = model.SerializeToString()
    data = data.replace(BAD_NAME.encode(), b"\xff\xfe\xc3BADNAME\xc0")  # same length, not UTF-8
    _exercise(source, data)


# --- the command line, as a user runs it -----------------------------------------------------------------------


def test_command_line_on_mutated_models_never_shows_a_traceback(seeds: list[Seed], tmp_path: Path) -> None:
    rng = random.Random(5)
    statuses: Counter[int] = Counter()
    for n in range(examples(4)):
        seed = seeds[n % len(seeds)]
        edits = [(rng.choice(["flip", "set", "delete", "varint"]), rng.randrange(2**24), rng.randbytes(4))]
        path = tmp_path / f"m{n}.onnx"
        path.write_bytes(mutate_bytes(seed.data, edits))
        for command in (["inspect", str(path)], ["convert", str(path), "-o", str(tmp_path / f"o{n}"), "--quiet"]):
            result = run(*command)
            assert result.returncode in (0, 2), result.stderr
            assert "Traceback" not in result.stderr
            if result.returncode == 2:
                assert len(result.stderr.strip().splitlines()) == 1, result.stderr
            statuses[result.returncode] += 1
    leftovers = [p.name for p in tmp_path.iterdir() if "dmlbridge-tmp" in p.name]
    assert not leftovers


def test_report_fuzz_statistics() -> None:
    """Prints how the fuzz examples of this module ended (run with -s to see it)."""
    if STATS:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(STATS.items()))
        print(f"\nfuzz_models ({EXAMPLES} examples per test): {counts}")
