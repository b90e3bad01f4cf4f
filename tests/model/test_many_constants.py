"""Models of many small constants: the fast paths give exactly what the checked path gives, and memory grows by
a bounded amount per constant.

- Whole models of small constants, some in the usual forms the byte scan reads and some edited so that it must
  hand them to the parsed model, convert to the same .bin and manifest (or the same error) with the fast paths on
  and with DMLBRIDGE_CHECKED_PATH_ONLY.
- The bytes, offsets and descs of many small constants are recomputed from the rules (``models.check_independently``).
- The progress bar counts every byte, and a conversion's entries read like the loaded plan's.
- A conversion's peak memory grows with its constants by at most a few hundred bytes each, in the main graph and in
  subgraphs, and by a few bytes each per level of subgraphs around them (measured in child processes, beside the
  tests); DMLBRIDGE_LONG=1 converts a million within 1 GiB and refuses a model of 4.7 million within it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import background
import memory
import numpy as np
import pytest
from budget import LONG, examples
from builders import model_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import check_independently, outputs, small_model
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from dmlbridge import Target, convert_model
from dmlbridge.errors import DmlBridgeError
from dmlbridge.model.constants import find_constants
from dmlbridge.writing.image import ImageWriter

# --- tensors: quick == checked -------------------------------------------------------------------------------

FIELD_EDITS = st.lists(
    st.sampled_from([
        "no_name", "long_name", "unicode_name", "empty_name", "negative_dim", "no_data_type", "bad_data_type",
        "raw_short", "raw_long", "raw_empty", "float_data", "double_data", "int32_data", "int64_data",
        "uint64_data", "string_data", "external", "data_location_0", "segment", "doc_string", "metadata",
        "scalar", "empty_dims",
    ]),
    max_size=3,
)
TYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8, TensorProto.INT64,
         TensorProto.UINT64, TensorProto.INT4, TensorProto.UINT4, TensorProto.BOOL, TensorProto.COMPLEX64,
         TensorProto.FLOAT8E4M3FN, TensorProto.STRING, TensorProto.UINT32]


def _tensor(code: int, dims: list[int], storage: str, edits: list[str], rng: np.random.Generator) -> TensorProto:
    """A tensor of ``code`` and ``dims`` in raw_data or its typed field, then edited."""
    t = TensorProto(name="w", data_type=code, dims=dims)
    array = numpy_helper.to_array(helper.make_tensor("x", code, dims, _values(code, dims, rng)))
    made = numpy_helper.from_array(array, "w")
    if storage == "raw" and code != TensorProto.STRING:
        t.raw_data = made.raw_data
    else:
        typed = helper.make_tensor("w", code, dims, _values(code, dims, rng))
        t.CopyFrom(typed)
    for edit in edits:
        if edit == "no_name":
            t.ClearField("name")
        elif edit == "long_name":
            t.name = "n" * 300
        elif edit == "unicode_name":
            t.name = "wéight→"
        elif edit == "empty_name":
            t.name = ""
        elif edit == "negative_dim" and t.dims:
            t.dims[0] = -1
        elif edit == "no_data_type":
            t.ClearField("data_type")
        elif edit == "bad_data_type":
            t.data_type = 99
        elif edit == "raw_short":
            t.raw_data = t.raw_data[:-1]
        elif edit == "raw_long":
            t.raw_data = t.raw_data + b"\x00"
        elif edit == "raw_empty":
            t.raw_data = b""
        elif edit in ("float_data", "double_data", "int32_data", "int64_data", "uint64_data"):
            getattr(t, edit).append(1)
        elif edit == "string_data":
            t.string_data.append(b"s")
        elif edit == "external":
            t.data_location = TensorProto.EXTERNAL
            t.external_data.add(key="location", value="w.bin")
        elif edit == "data_location_0":
            t.data_location = TensorProto.DEFAULT
        elif edit == "segment":
            t.segment.begin = 0
        elif edit == "doc_string":
            t.doc_string = "d"
        elif edit == "metadata":
            t.metadata_props.add(key="k", value="v")
        elif edit == "scalar":
            t.ClearField("dims")
        elif edit == "empty_dims":
            del t.dims[:]
            t.dims.append(0)
    return t


def _values(code: int, dims: list[int], rng: np.random.Generator) -> Any:
    n = int(np.prod(dims)) if dims else 1
    if code == TensorProto.STRING:
        return [b"a"] * n
    if code == TensorProto.BOOL:
        return rng.integers(0, 2, n).astype(bool).tolist()
    if code in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.FLOAT8E4M3FN):
        return rng.standard_normal(n).tolist()
    if code == TensorProto.COMPLEX64:
        return (rng.standard_normal(n) + 1j).tolist()
    if code == TensorProto.INT4:
        return rng.integers(-8, 8, n).tolist()
    if code == TensorProto.UINT4:
        return rng.integers(0, 16, n).tolist()
    return rng.integers(0, 100, n).tolist()


# --- whole models: fast paths == checked path -----------------------------------------------------------------


def _edited_constant(index: int, kind: str, rng: np.random.Generator) -> Any:
    value = _tensor(TensorProto.FLOAT, [2], "raw" if index % 2 else "typed", [], rng)
    node = helper.make_node("Constant", [], [f"c{index}"], name=f"n{index}" if index % 3 else "", value=value)
    attr = node.attribute[0]
    if kind == "type_unstated":
        attr.ClearField("type")
    elif kind == "type_wrong":
        attr.type = AttributeProto.FLOAT
    elif kind == "reference":
        attr.ref_attr_name = "r"
    elif kind == "graph":
        attr.g.CopyFrom(helper.make_graph([], "inner", [], [], [numpy_helper.from_array(np.ones(1, np.int8), "x")]))
    elif kind == "graphs":
        attr.graphs.add().CopyFrom(helper.make_graph([], "inner", [], []))
    elif kind == "doc":
        attr.doc_string = "d"
    elif kind == "renamed":
        attr.name = "value_x"
    elif kind == "second":
        node.attribute.add().CopyFrom(helper.make_attribute("value_float", 1.0))
    elif kind == "domain":
        node.domain = "com.example"
    elif kind == "no_output":
        del node.output[:]
    elif kind == "tensor_extra":
        attr.t.doc_string = "d"
    return node


CONSTANT_EDITS = ["plain", "type_unstated", "type_wrong", "reference", "graph", "graphs", "doc", "renamed", "second",
                  "domain", "no_output", "tensor_extra"]


def _outputs(model: Any, prefix: Path) -> Any:
    """The .bin and manifest a conversion writes, or the error it raises."""
    try:
        convert_model(model, prefix, progress=False, alignment=16)
    except DmlBridgeError as exc:
        return type(exc), str(exc)
    return outputs(prefix)


@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(st.sampled_from(CONSTANT_EDITS), min_size=1, max_size=12),
       edits=st.lists(FIELD_EDITS, min_size=2, max_size=2), seed=st.integers(0, 2**32 - 1))
def test_models_convert_the_same_with_the_fast_paths_off(
    tmp_path_factory: Any, monkeypatch: pytest.MonkeyPatch, kinds: list[str], edits: list[list[str]], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    nodes = [_edited_constant(i, kind, rng) for i, kind in enumerate(kinds)]
    inits = [_tensor(code, [3], storage, edit, rng)
             for code, storage, edit in zip(TYPES[:2], ("raw", "typed"), edits, strict=True)]
    for i, tensor in enumerate(inits):
        tensor.name = tensor.name or f"i{i}"
    model = model_of(inits, nodes)
    folder = tmp_path_factory.mktemp("same")
    fast = _outputs(model, folder / "fast")
    with monkeypatch.context() as patched:
        patched.setenv("DMLBRIDGE_CHECKED_PATH_ONLY", "1")
        assert _outputs(model, folder / "checked") == fast


# --- whole models: bytes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("count", "alignment"), [(1, 16), (40, 16), (300, 256), (400, 1024), (9, 1 << 18)])
def test_many_small_constants_convert_byte_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int,
                                                   alignment: int) -> None:
    """Batches of small constants (up to the writer's gather buffer each: 1 MiB, here 128 KiB, still twice the
    largest constant the byte scan reads) land at their offsets with zero gaps; 400 constants at 1 KiB alignment
    need several batches, and at 256 KiB alignment each gap is larger than the gather buffer."""
    monkeypatch.setattr(ImageWriter, "GATHER", 128 << 10)
    model, expected = small_model(count, seed=count)
    plan = convert_model(model, tmp_path / "out", alignment=alignment, min_dims=4, progress=False)
    check_independently(tmp_path / "out", expected, Target(), 4, alignment)
    assert len(plan.entries) == count


def test_progress_counts_every_byte_of_small_constants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dmlbridge.system.progress as progress

    seen = []

    class Bar:
        def __init__(self, total: int, **kwargs: Any) -> None:
            self.total, self.n = total, 0
            seen.append(self)

        def update(self, n: int) -> None:
            self.n += n

        def close(self) -> None:
            pass

    monkeypatch.setattr(progress, "tqdm", Bar)
    model, _ = small_model(500, seed=5)
    plan = convert_model(model, tmp_path / "out", progress=True)
    (bar,) = seen
    assert bar.total == plan.total_size
    assert bar.n == plan.total_size
    plan.verify(model, progress=True)  # verify's bar counts each entry's bytes (not the padding between)
    assert seen[1].n == seen[1].total == sum(e.total_tensor_size_in_bytes or 0 for e in plan.converted)


# --- the typed fields, the plan's entries ------------------------------------------------------------------------


def test_a_field_of_the_same_size_in_place_of_the_typed_one_is_not_taken_for_it() -> None:
    """16 bytes of int32_data varints weigh exactly what four floats of float_data weigh: a reader that went by
    sizes alone could not tell them apart."""
    for entries in ([5] * 16, [1 << 21] * 4):
        tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
        tensor.int32_data.extend(entries)
        assert tensor.ByteSize() == helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0] * 4).ByteSize()
        node = helper.make_node("Constant", [], ["c"], value=tensor)
        with pytest.raises(DmlBridgeError, match="int32_data"):
            find_constants(model_of([tensor], [node]))


def test_plan_entries_read_like_the_loaded_ones(tmp_path: Path) -> None:
    """convert_model's entries are made when first read; they equal load_plan's and stay the same objects."""
    from dmlbridge import load_plan, plan_model

    model, expected = small_model(300, seed=9)
    plan = convert_model(model, tmp_path / "out", progress=False)
    loaded = load_plan(tmp_path / "out.json")
    assert plan.entries == loaded.entries and loaded.entries == plan.entries
    assert plan_model(model).entries == plan.entries
    assert list(plan.entries) == list(expected) == [e.key for e in plan.entries.values()]
    key = next(iter(expected))
    assert plan.entries[key] is plan.entries[key] and key in plan.entries and "nope" not in plan.entries
    assert plan.entries.get("nope") is None and len(plan.entries) == 300
    with pytest.raises(TypeError):
        plan.entries[key] = plan.entries[key]  # type: ignore[index]
    assert [e.key for e in plan.skipped] == [k for k, v in expected.items() if v.size == 0]


# --- memory: what grows with the constants ----------------------------------------------------------------------

_COUNTS, _DEPTHS = (20_000, 100_000), (0, 1, 9)
_GROWTH: list[background.Job[dict[str, float]]] = []


def start_in_background(queue: background.Queue, folder: Path) -> None:
    """The conversions' memory, measured beside the other tests (tests/conftest.py calls this)."""
    if memory.linux_only() is None:
        _GROWTH.append(queue.add(functools.partial(memory.constants_growth, folder / "growth", _COUNTS, _DEPTHS)))


@pytest.mark.skipif(memory.linux_only() is not None, reason=str(memory.linux_only()))
def test_memory_grows_by_a_bounded_amount_per_constant(tmp_path: Path) -> None:
    """Peak RSS growth of converting 20,000 and 100,000 one-element initializers, in the main graph, one If deep
    and nine deep, each in a child process: the difference per constant is the conversion's cost of one
    (protobuf's parsed message, the plan's record, the writer's share), whatever the machine's speed. Before:
    1,696 bytes in the main graph, 2,787 one If deep and 3,828 nine deep (the manifest's lines, text and bytes
    whole in memory, three copies; a protobuf wrapper of about 450 bytes kept per constant, an origin string per
    constant), 128 bytes per level; after: about 550, 900 and 900, and 7 to 10 per level (docs/guide.md,
    Streaming)."""
    growth = _GROWTH[0].result() if _GROWTH else memory.constants_growth(tmp_path / "growth", _COUNTS, _DEPTHS)
    assert memory.growth_per_item(growth, _COUNTS, 0) <= 800, growth
    assert memory.growth_per_item(growth, _COUNTS, 1) <= 1100, growth
    assert memory.growth_per_item(growth, _COUNTS, 9) <= 1100, growth
    high = _COUNTS[1]
    per_level = (growth[f"{high}@9"] - growth[f"{high}@1"]) * 2**20 / (8 * high)
    assert per_level <= 48, growth


@pytest.mark.skipif(not LONG or memory.linux_only() is not None, reason="a long run: DMLBRIDGE_LONG=1 runs it")
def test_a_million_tiny_constants_convert_within_1_gib(tmp_path: Path) -> None:
    """The opt-in large run: a million one-element initializers (21 MB) convert with max_constants and
    max_manifest_bytes raised (the manifest is 338 MB), the whole process's peak within 1 GiB (before: 1.73 GB);
    a model of 4.7 million constants nested 17 If deep (100 MB) is refused with the default limits within it
    (before: 8.8 GB, refused after minutes when the manifest's lines were made)."""
    path = memory.constants_model(tmp_path / "many.onnx", 1_000_000)
    peak, entries = memory.process_peak(f"""
        plan = dmlbridge.convert_model({str(path)!r}, {str(tmp_path / "w")!r}, fsync=False, progress=False,
                                       workers=1, max_constants=1_000_000, max_manifest_bytes=1 << 31)
        assert plan.array("w999999").tolist() == [1.0] and plan.entries["w0"].offset == 0
        print(len(plan.entries))
    """)
    assert entries == "1000000"
    print(f"a million tiny constants: peak {peak:.0f} MiB")
    assert peak <= 1024, peak
    path.unlink()
    nested = memory.constants_model(tmp_path / "nested.onnx", 4_700_000, depth=17)
    peak, message = memory.process_peak(f"""
        try:
            dmlbridge.convert_model({str(nested)!r}, {str(tmp_path / "n")!r}, fsync=False, progress=False)
        except dmlbridge.InvalidArgumentError as exc:
            print(exc)
    """)
    assert "holds 4700000 constants (4700000 in subgraphs nested up to 17 deep" in message, message
    print(f"4.7 million nested 17 deep, refused: peak {peak:.0f} MiB")
    assert peak <= 1024, peak
