"""Every ONNX type dmlbridge converts, on every kind of target, read by DirectML through its desc.

Each value set is every code of the type where that is small (every FLOAT16, BFLOAT16, 8-, 6- and 4-bit code, every
INT8/UINT8/INT16/UINT16), else the extremes (NaN with payloads, infinities, -0, subnormals, integer limits), in
the shapes that test the layout: the code set as a vector, a 0-d tensor, one element, an odd 4-bit count and an
8-D tensor (where the level has 8 dimensions), padded to ``min_dims`` 1, 4 and 5.
"""

from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from bindings_format import encode
from dml_runtime import DirectML
from oracle import Image, compare, expected_output

import dmlbridge

EVERY = {t.name for t in dmlbridge.DmlDataType if t.name != "UNKNOWN"}
NO_64 = EVERY - {"INT64", "UINT64", "FLOAT64"}


def _codes(dtype: object, bits: int) -> np.ndarray:
    return np.arange(1 << bits, dtype=np.uint16 if bits > 8 else np.uint8).view(dtype)


def _floats(dtype: type, bits: int) -> np.ndarray:
    info = np.finfo(dtype)
    special = [0.0, -0.0, 1.0, -1.5, float(info.max), -float(info.max), float(info.tiny), -float(info.tiny),
               float(info.smallest_subnormal), -float(info.smallest_subnormal), math.inf, -math.inf, math.nan]
    values = np.array(special, dtype)
    raw = np.array([0x7FC00000, 0x7F800001, 0xFFC00123], np.uint32) if bits == 32 else \
        np.array([0x7FF8000000000000, 0x7FF0000000000001, 0xFFF8000000000123], np.uint64)
    random = np.random.default_rng(bits).standard_normal(32).astype(dtype)
    return np.concatenate([values, raw.view(dtype), random])


def _integers(dtype: type, fits_32: bool) -> np.ndarray:
    info = np.iinfo(dtype)
    low, high = (max(info.min, -(2**31)), min(info.max, 2**31 - 1)) if fits_32 and info.min < 0 else \
        (info.min, min(info.max, 2**32 - 1) if fits_32 else info.max)
    random = np.random.default_rng(info.bits).integers(low, high, 32, dtype=dtype, endpoint=True)
    return np.concatenate([np.array([low, high, 0, 1, high - 1, low + 1], dtype), random])


def value_sets(fits_32: bool) -> dict[str, np.ndarray]:
    """One array of every convertible ONNX type, by ONNX name."""
    sets = {
        "FLOAT": _floats(np.float32, 32), "DOUBLE": _floats(np.float64, 64),
        "FLOAT16": _codes(np.float16, 16), "BFLOAT16": _codes(ml_dtypes.bfloat16, 16),
        "FLOAT8E4M3FN": _codes(ml_dtypes.float8_e4m3fn, 8), "FLOAT8E4M3FNUZ": _codes(ml_dtypes.float8_e4m3fnuz, 8),
        "FLOAT8E5M2": _codes(ml_dtypes.float8_e5m2, 8), "FLOAT8E5M2FNUZ": _codes(ml_dtypes.float8_e5m2fnuz, 8),
        "FLOAT8E8M0": _codes(ml_dtypes.float8_e8m0fnu, 8), "FLOAT4E2M1": _codes(ml_dtypes.float4_e2m1fn, 4),
        "FLOAT6E2M3": _codes(ml_dtypes.float6_e2m3fn, 6), "FLOAT6E3M2": _codes(ml_dtypes.float6_e3m2fn, 6),
        "INT8": _codes(np.int8, 8), "UINT8": _codes(np.uint8, 8), "INT16": _codes(np.int16, 16),
        "UINT16": _codes(np.uint16, 16),
        "INT32": _integers(np.int32, False), "UINT32": _integers(np.uint32, False),
        "INT64": _integers(np.int64, fits_32), "UINT64": _integers(np.uint64, fits_32),
        "BOOL": np.array([True, False, True, True, False]),
        "INT4": np.arange(-8, 8).astype(ml_dtypes.int4), "UINT4": np.arange(16).astype(ml_dtypes.uint4),
        "INT2": np.array([-2, -1, 0, 1, -2], ml_dtypes.int2), "UINT2": np.array([0, 1, 2, 3, 1], ml_dtypes.uint2),
    }
    if fits_32:  # (a target without FLOAT64 rounds DOUBLE to FLOAT32: keep to values FLOAT32 holds the range of)
        sets["DOUBLE"] = np.concatenate([sets["DOUBLE"][np.abs(sets["DOUBLE"]) < 1e30],
                                         np.array([math.inf, -math.inf, math.nan])])
    return sets


def shapes(values: np.ndarray, max_dims: int) -> dict[str, np.ndarray]:
    """The value set in the shapes the suite reads."""
    nonzero = values[1] if values.size > 1 else values[0]
    out = {"codes": values, "0-d": np.array(nonzero, values.dtype), "one": values[1:2]}
    if values.dtype.itemsize == 1 and values.size >= 15:
        out["odd"] = values[:15]
    if max_dims >= 8:
        out["8-d"] = np.resize(values, 24).reshape(1, 2, 1, 2, 1, 1, 2, 3)
    return out


# (name, target, min_dims): the default target, an older level, targets without 64-bit types (emulated INT64 and
# narrowed), one without FLOAT16, and min_dims 1, 4 and 5.
TARGETS = [
    ("default", dmlbridge.Target(), None),
    ("min_dims=1", dmlbridge.Target(), 1),
    ("min_dims=4", dmlbridge.Target(), 4),
    ("min_dims=5", dmlbridge.Target(), 5),
    ("6.2", dmlbridge.Target("6.2"), None),
    ("no-64-bit emulate", dmlbridge.Target("6.4", supported=NO_64, allow_lossy=True), None),
    ("no-64-bit narrow", dmlbridge.Target("6.4", supported=NO_64, int64="narrow", allow_lossy=True), 4),
    ("no-FLOAT16", dmlbridge.Target("6.4", supported=EVERY - {"FLOAT16"}), None),
    ("2.1", dmlbridge.Target("2.1", allow_lossy=True), None),
    ("1.0 min_dims=5", dmlbridge.Target("1.0", allow_lossy=True), 5),
]


@pytest.fixture(scope="module")
def readings(directml: DirectML, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """Every (target, type, shape) prepared, in one buffer file, read by DirectML in one run."""
    folder = tmp_path_factory.mktemp("types")
    image, cases = Image(), {}
    for name, target, min_dims in TARGETS:
        fits_32 = "INT64" not in target.types
        for onnx_type, values in value_sets(fits_32).items():
            for shape_name, array in shapes(values, target.max_dimension_count).items():
                key = f"{name}/{onnx_type}/{shape_name}"
                prepared = dmlbridge.prepare(array, target=target, min_dims=min_dims)
                image.add(key, prepared)
                cases[key] = (array, prepared)
    run = directml.run(image.write(folder), directory=folder)
    return {key: (array, prepared, run.results.get(encode(key))) for key, (array, prepared) in cases.items()}


def test_every_type_on_every_target_reads_back_as_its_source(readings: dict[str, tuple]) -> None:
    problems, compared = [], 0
    for key, (array, prepared, result) in readings.items():
        assert result is not None, f"{key}: the program did not read it"
        verdict = compare(result, expected_output(array, prepared.dml_type.name), "1 types", key)
        compared += verdict.compared
        problems += verdict.mismatched
    assert not problems, "\n".join(problems[:30])
    assert compared == len(readings) > 1000


def test_the_descs_are_what_each_target_needs(readings: dict[str, tuple]) -> None:
    # The facts the readings rest on: dimension counts by target and min_dims, the older level's INT8 for INT4,
    # emulated INT64 as INT32 with doubled strides.
    sizes = {key: prepared.sizes for key, (_, prepared, _) in readings.items()}
    types = {key: prepared.dml_type.name for key, (_, prepared, _) in readings.items()}
    strides = {key: prepared.strides for key, (_, prepared, _) in readings.items()}
    assert sizes["default/FLOAT/0-d"] == (1,) and sizes["min_dims=4/FLOAT/one"] == (1, 1, 1, 1)
    assert sizes["min_dims=5/UINT4/odd"] == (1, 1, 1, 1, 15) and len(sizes["default/INT4/8-d"]) == 8
    assert sizes["2.1/FLOAT16/codes"] == (1, 1, 1, 65536) and sizes["1.0 min_dims=5/BOOL/0-d"] == (1,) * 5
    assert types["6.2/INT4/codes"] == "INT8" and types["no-FLOAT16/FLOAT8E4M3FN/codes"] == "FLOAT32"
    assert types["no-64-bit emulate/INT64/codes"] == "INT32" and strides["no-64-bit emulate/INT64/codes"] == (2,)
    assert types["no-64-bit narrow/UINT64/codes"] == "UINT32" and strides["no-64-bit narrow/UINT64/codes"] is None
    assert types["no-64-bit emulate/DOUBLE/codes"] == "FLOAT32"


def test_a_device_reports_itself_as_dmlbridge_flags(directml: DirectML, tmp_path: Path) -> None:
    image = Image()
    image.add("w", dmlbridge.prepare(np.ones(4, np.float32)))
    run = directml.run(image.write(tmp_path), directory=tmp_path)
    words = run.device_flags.split()
    assert words[:2] == ["--feature-level", "6.4"], run.device_flags
    # The flags describe this device to dmlbridge: a target made from them takes what the device reported.
    unsupported = set(words[3].split(",")) if len(words) > 2 else set()
    target = dmlbridge.Target(words[1], supported=EVERY - unsupported)
    assert unsupported <= EVERY and target.feature_level == dmlbridge.FeatureLevel.FL_6_4
