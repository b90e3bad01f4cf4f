"""Densifying sparse tensors (dmlbridge.onnx.sparse): against a naive per-element densifier, for every index form
and order, indices never trusted, and the blocks of indices checked one at a time giving what one pass gives."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from budget import examples
from models import naive_densify

from dmlbridge.errors import TensorProtoError
from dmlbridge.model.constants import densify_sparse
from dmlbridge.onnx import sparse as sparse_module

_DTYPES = [np.float32, np.float16, np.int64, np.uint8, np.bool_, ml_dtypes.int4, ml_dtypes.bfloat16,
           ml_dtypes.float8_e4m3fn]


@pytest.mark.parametrize("dtype", _DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dims", [[7], [3, 4], [2, 3, 5], [1, 1, 1, 6]])
def test_densify_matches_the_naive_densifier(dtype: object, dims: list[int]) -> None:
    rng = np.random.default_rng(sum(dims))
    count = math.prod(dims)
    for nnz in (0, 1, count // 2, count):
        linear = rng.permutation(count)[:nnz]  # any order: the dense tensor does not depend on it
        values = rng.integers(1, 7, nnz).astype(dtype)
        expected = naive_densify(values, linear, dims)
        got = densify_sparse(values, linear.astype(np.int64), dims)
        assert got.dtype == np.dtype(dtype) and got.shape == tuple(dims)
        assert got.tobytes() == expected.tobytes()
        coords = np.array(np.unravel_index(linear, dims)).T.reshape(nnz, len(dims))
        assert densify_sparse(values, coords, dims).tobytes() == expected.tobytes()


def test_densify_scalar_and_strings_and_int32_indices() -> None:
    assert densify_sparse(np.array([3.0]), np.zeros((1, 0), np.int64), []).tolist() == 3.0
    assert densify_sparse(np.array([2.0]), np.array([0]), []).item() == 2.0
    strings = densify_sparse(np.array(["x"], dtype=object), np.array([1], np.int32), [3])
    assert strings.tolist() == ["", "x", ""]


@pytest.mark.parametrize(
    "indices, dims, message",
    [
        (np.array([0, 6]), [2, 3], "outside 0..5"),
        (np.array([-1, 2]), [2, 3], "outside 0..5"),
        (np.array([[0, 3], [1, 1]]), [2, 3], r"coordinates \[0, 3\].*axis 1"),
        (np.array([[0, 0], [-1, 1]]), [2, 3], r"coordinates \[-1, 1\].*axis 0"),
        (np.array([4, 4]), [2, 3], r"index \[1, 1\] \(linear 4\) appears more than once"),
        (np.array([[1, 2], [1, 2]]), [2, 3], "appears more than once"),
        (np.array([[0, 1, 2], [0, 0, 0]]), [2, 3], "indices have shape"),
        (np.array([[0], [1]]), [2, 3], "indices have shape"),
        (np.array([0.0, 1.0]), [2, 3], "must be integers"),
        (np.array([0, 2**64 - 1], np.uint64), [2, 3], "out of range"),
        (np.array([0, 1]), [0, 3], "outside 0..-1"),
    ],
)
def test_densify_never_trusts_indices(indices: np.ndarray, dims: list[int], message: str) -> None:
    with pytest.raises(TensorProtoError, match=message):
        densify_sparse(np.array([1.0, 2.0], np.float32), indices, dims)


@pytest.mark.parametrize("form", ["linear", "coordinates"])
def test_densify_in_blocks_finds_what_one_pass_over_all_indices_finds(
    monkeypatch: pytest.MonkeyPatch, form: str,
) -> None:
    """Indices checked a block at a time (here 6 entries a block): the same dense tensor, ranges of it densified
    on their own, and the same error as one pass over all of them finds: the first index out of range in order,
    else the smallest position given twice, in ascending order (no bitmap) and in any other."""
    monkeypatch.setattr(sparse_module, "INDEX_BLOCK", 6)
    rng = np.random.default_rng(3)
    dims = [4, 5, 3]
    count = math.prod(dims)
    for trial in range(examples(200)):
        nnz = int(rng.integers(1, 40))
        linear = rng.choice(count, nnz, replace=False)
        if trial % 3 == 0:
            linear.sort()
        if trial % 4 == 1:  # a duplicate (some in one block, some across blocks)
            linear[rng.integers(nnz)] = linear[rng.integers(nnz)]
        if trial % 5 == 2:  # one out of range
            linear[rng.integers(nnz)] = count + int(rng.integers(3))
        values = rng.integers(1, 100, nnz).astype(np.int16)
        indices = np.stack(np.unravel_index(np.minimum(linear, count - 1), dims), axis=1) if form == "coordinates" \
            else linear
        if form == "coordinates":  # the out-of-range one on its first axis
            indices[linear >= count, 0] = dims[0]
        outside = np.flatnonzero(linear >= count)
        unique, counts = np.unique(linear, return_counts=True)
        repeated = unique[counts > 1]
        if outside.size:
            message = rf"of value {outside[0]} "
        elif repeated.size:
            message = rf"\(linear {repeated[0]}\) appears more than once"
        else:
            got = densify_sparse(values, indices, dims)
            assert got.tobytes() == naive_densify(values, linear, dims).tobytes()
            checked = sparse_module.SparseIndices(indices, tuple(dims), nnz)
            checked.check()
            assert checked.ascending == bool(np.all(np.diff(linear) > 0))
            for start, stop in ((0, count), (7, 29), (29, 30), (50, count)):
                part = np.zeros(stop - start, np.int16)
                checked.scatter(values, part, start, stop)
                assert part.tobytes() == got.reshape(-1)[start:stop].tobytes(), (trial, start, stop)
            continue
        with pytest.raises(TensorProtoError, match=message):
            densify_sparse(values, indices, dims)


def test_densify_refuses_values_that_are_not_1d() -> None:
    with pytest.raises(TensorProtoError, match="1-D"):
        densify_sparse(np.ones((2, 1), np.float32), np.array([0, 1]), [2])
