"""broadcast_desc and with_leading_ones: a desc's bytes at other sizes. Known answers worked out by hand from
DirectML's rules (a stride of 0 repeats an element; TotalTensorSizeInBytes is the span's), held to numpy's own
broadcasting (np.broadcast_to's strides) and to the per-element reference reading the very bytes."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import reference
from onnx import helper, numpy_helper

import dmlbridge
from dmlbridge import BufferTensorDesc, DmlDataType, InvalidArgumentError, LayoutError, Target


def _desc(sizes: tuple[int, ...], strides: tuple[int, ...] | None, total: int,
          dml: DmlDataType = DmlDataType.FLOAT32) -> BufferTensorDesc:
    return BufferTensorDesc(dml, 0, sizes, strides, total, 256)


@pytest.mark.parametrize(
    ("sizes", "strides", "total", "new", "want_strides"),
    [
        # (a Gemm's C [N] at [M, N]: each row the same N elements)
        ((5,), None, 20, (3, 5), (0, 1)),
        # (a column [M, 1]: each of its M elements across a row)
        ((3, 1), None, 12, (3, 5), (1, 0)),
        # (a scalar everywhere, its one element)
        ((1,), None, 4, (3, 5), (0, 0)),
        # (a MatMul's B [K, N] at the batch [2, 3]: new dimensions repeat)
        ((6, 5), None, 120, (2, 3, 6, 5), (0, 0, 5, 1)),
        # (B [3, K, N] under A [2, 3, M, K]: the batch of 3 kept, its stride K*N)
        ((3, 6, 5), None, 360, (2, 3, 6, 5), (0, 30, 5, 1)),
        # (a strided desc keeps its strides where sizes stay: a padded row of stride 8)
        ((2, 3), (8, 1), 44, (4, 2, 3), (0, 8, 1)),
        # (nothing grows: leading 1s only, still packed)
        ((6, 5), None, 120, (1, 1, 6, 5), None),
        # (a dimension of 1 that stays 1 keeps its stride)
        ((1, 5), (5, 1), 20, (1, 5), (5, 1)),
    ],
)
def test_broadcast_desc_known_answers(sizes: tuple[int, ...], strides: tuple[int, ...] | None, total: int,
                                      new: tuple[int, ...], want_strides: tuple[int, ...] | None) -> None:
    desc = _desc(sizes, strides, total)
    out = dmlbridge.broadcast_desc(desc, new)
    assert (out.sizes, out.strides, out.total_tensor_size_in_bytes) == (new, want_strides, total)
    assert out.as_dict()["DimensionCount"] == len(new)
    assert (out.data_type, out.flags, out.guaranteed_base_offset_alignment) == (1, 0, 256)
    # numpy's broadcast_to of a view with these strides steps over the same elements (its strides in elements;
    # the stride of a dimension of 1 steps nowhere, so only the others are compared)
    itemsize = 4
    base = np.lib.stride_tricks.as_strided(np.zeros(total // itemsize, np.float32), sizes,
                                           [s * itemsize for s in (strides or reference.packed_strides(sizes))])
    numpy_strides = [s // itemsize for s in np.broadcast_to(base, new).strides]
    ours = list(want_strides or reference.packed_strides(new))
    assert [a for a, n in zip(numpy_strides, new, strict=True) if n > 1] == \
        [b for b, n in zip(ours, new, strict=True) if n > 1]
    assert dmlbridge.calc_buffer_tensor_size("FLOAT32", new, want_strides) <= total


def test_broadcast_desc_reads_the_same_bytes_as_numpy_broadcasts_them() -> None:
    """The reference reads every element through the new desc: the values numpy's broadcast gives."""
    values = np.array([[1.5], [-2.0], [3.25]], np.float32)  # [M, 1]
    prepared = dmlbridge.prepare(values)
    out = dmlbridge.broadcast_desc(prepared, (2, 3, 4))
    assert (out.sizes, out.strides, out.total_tensor_size_in_bytes) == ((2, 3, 4), (0, 1, 0), 12)
    read = reference.decode(prepared.data.tobytes(), 1, out.sizes, out.strides)
    assert read == np.broadcast_to(values, (2, 3, 4)).reshape(-1).view(np.uint32).tolist()


def test_broadcast_desc_of_emulated_int64_and_of_4_bit_types() -> None:
    """Emulated INT64 keeps its doubled strides (0 where it repeats) and its 8 bytes an element; a UINT4 row of 3
    repeated in 2 rows is 4 bytes still (3 nibbles, rounded up to a word)."""
    no64 = Target(supported=["FLOAT32", "INT32", "UINT32"])
    c = dmlbridge.prepare(np.array([7, -8, 9], np.int64), target=no64)
    assert (c.dml_type, c.strides, c.total_tensor_size_in_bytes) == (DmlDataType.INT32, (2,), 24)
    out = dmlbridge.broadcast_desc(c, (2, 3))
    assert (out.sizes, out.strides, out.total_tensor_size_in_bytes) == ((2, 3), (0, 2), 24)
    low = reference.decode(c.data.tobytes(), int(DmlDataType.INT32), out.sizes, out.strides)
    assert low == [7, 2**32 - 8, 9] * 2  # (the low halves, as INT32 bits)
    q = dmlbridge.prepare(np.array([1, 2, 3], ml_dtypes.uint4))
    grown = dmlbridge.broadcast_desc(q, (2, 3))
    assert (grown.sizes, grown.strides, grown.total_tensor_size_in_bytes) == ((2, 3), (0, 1), 4)
    assert reference.decode(q.data.tobytes(), int(DmlDataType.UINT4), grown.sizes, grown.strides) == [1, 2, 3] * 2


@pytest.mark.parametrize(
    ("sizes", "strides", "total", "count", "want_sizes", "want_strides"),
    [
        ((5, 3), None, 60, 3, (1, 5, 3), None),  # (a Gather's data beside 2-D indices)
        ((6, 5), None, 120, 4, (1, 1, 6, 5), None),
        ((2, 3), (8, 1), 44, 4, (1, 1, 2, 3), (11, 11, 8, 1)),  # (span 1*8 + 2*1 + 1 = 11, as prepare pads)
        ((3, 5), (0, 1), 20, 4, (1, 1, 3, 5), (5, 5, 0, 1)),  # (a broadcast C at min_dims 4: span 5)
        ((4,), None, 16, 1, (4,), None),  # (as many already: as it is)
    ],
)
def test_with_leading_ones_known_answers(sizes: tuple[int, ...], strides: tuple[int, ...] | None, total: int,
                                         count: int, want_sizes: tuple[int, ...],
                                         want_strides: tuple[int, ...] | None) -> None:
    out = dmlbridge.with_leading_ones(_desc(sizes, strides, total), count)
    assert (out.sizes, out.strides, out.total_tensor_size_in_bytes) == (want_sizes, want_strides, total)


def test_with_leading_ones_matches_prepare_with_min_dims() -> None:
    """prepare(min_dims=N) and with_leading_ones(prepare(...), N) describe the same bytes alike, strided too."""
    values = np.arange(6, dtype=np.float16).reshape(2, 3)
    for strides in (None, (8, 1)):
        padded = dmlbridge.prepare(values, min_dims=5, strides=strides)
        added = dmlbridge.with_leading_ones(dmlbridge.prepare(values, strides=strides), 5)
        assert added == padded.buffer_desc


def test_the_helpers_take_what_holds_a_desc_and_change_nothing() -> None:
    values = np.arange(4, dtype=np.float32)
    prepared = dmlbridge.prepare(values)
    before = prepared.buffer_desc
    entry = dmlbridge.plan_model(_model_with("w", values)).entries["w"]
    for holder in (prepared, entry, before):
        assert dmlbridge.broadcast_desc(holder, (2, 4)).strides == (0, 1)
        assert dmlbridge.with_leading_ones(holder, 2).sizes == (1, 4)
    assert prepared.buffer_desc == before and np.array_equal(prepared.to_numpy(), values)
    assert dmlbridge.broadcast_desc(prepared, (2, 4)).as_ctypes().Strides[0] == 0


def _model_with(name: str, values: np.ndarray) -> Any:
    return helper.make_model(helper.make_graph([], "g", [], [], [numpy_helper.from_array(values, name)]))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda d: dmlbridge.broadcast_desc(d, (3, 4)), LayoutError, r"sizes=\[3, 4\] do not broadcast"),
        (lambda d: dmlbridge.broadcast_desc(d, (5,)), LayoutError, r"sizes=\[5\] has 1 dimensions, fewer"),
        (lambda d: dmlbridge.broadcast_desc(d, (2, 0, 5)), LayoutError, r"sizes=\[2, 0, 5\]: size 0"),
        (lambda d: dmlbridge.broadcast_desc(d, (1,) * 9), LayoutError, r"sizes=\[1, 1, 1, 1, 1, 1, 1, 1, 1\]: a "),
        (lambda d: dmlbridge.broadcast_desc(d, "25"), LayoutError, r"sizes= must be a sequence"),
        (lambda d: dmlbridge.broadcast_desc(d, (2.0, 5)), LayoutError, r"sizes=\[2.0, 5\]: sizes must be whole"),
        (lambda d: dmlbridge.broadcast_desc(d, (2**16, 2**16, 5)), LayoutError, r"elements"),
        (lambda d: dmlbridge.broadcast_desc(np.zeros(3), (3,)), InvalidArgumentError, r"desc= must be a "),
        (lambda d: dmlbridge.with_leading_ones(d, 1), InvalidArgumentError, r"dimension_count must be a whole"),
        (lambda d: dmlbridge.with_leading_ones(d, 9), InvalidArgumentError, r"dimension_count .* to 8, got 9"),
        (lambda d: dmlbridge.with_leading_ones(d, True), InvalidArgumentError, r"dimension_count"),
        (lambda d: dmlbridge.with_leading_ones(d, 2.0), InvalidArgumentError, r"dimension_count"),
        (lambda d: dmlbridge.with_leading_ones("desc", 3), InvalidArgumentError, r"desc= must be a "),
    ],
)
def test_bad_input_is_an_error_naming_the_keyword(call: Any, error: type[Exception], message: str) -> None:
    desc = _desc((2, 5), None, 40)
    with pytest.raises(error, match=message):
        call(desc)
    assert desc == _desc((2, 5), None, 40)


def test_a_skipped_entry_has_no_desc_to_change() -> None:
    plan = dmlbridge.plan_model(_model_with("s", np.array(["a"], dtype=object)))
    with pytest.raises(InvalidArgumentError, match=r"desc= is entry 's', which was skipped"):
        dmlbridge.broadcast_desc(plan.entries["s"], (2, 1))
    assert dmlbridge.with_leading_ones(_desc((3,), None, 12), np.int64(2)).sizes == (1, 3)  # (numpy integers too)
