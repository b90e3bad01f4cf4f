"""The ctypes descriptors, read as raw memory: DML_BUFFER_TENSOR_DESC and DML_TENSOR_DESC as
docs/directml-facts.md lays them out (x64)."""

from __future__ import annotations

import ctypes
import gc
import struct
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from builders import model_of

import dmlbridge
from dmlbridge import DmlDataType, Target

pytestmark = pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="the documented layout is the 64-bit one")

NO64 = {t for t in DmlDataType if t is not DmlDataType.UNKNOWN} - {DmlDataType.INT64, DmlDataType.UINT64}

# (name, offset, size) from docs/directml-facts.md
BUFFER_FIELDS = [
    ("DataType", 0, 4),
    ("Flags", 4, 4),
    ("DimensionCount", 8, 4),
    ("Sizes", 16, 8),
    ("Strides", 24, 8),
    ("TotalTensorSizeInBytes", 32, 8),
    ("GuaranteedBaseOffsetAlignment", 40, 4),
]


def read_buffer_desc(address: int) -> dict[str, Any]:
    """Decode a DML_BUFFER_TENSOR_DESC at an address from its raw bytes, following the two pointers."""
    raw = ctypes.string_at(address, 48)
    data_type, flags, count = struct.unpack_from("<iII", raw, 0)
    sizes_ptr, strides_ptr, total = struct.unpack_from("<QQQ", raw, 16)
    (alignment,) = struct.unpack_from("<I", raw, 40)

    def uints(ptr: int) -> list[int]:
        return list(struct.unpack(f"<{count}I", ctypes.string_at(ptr, 4 * count)))

    return {
        "DataType": data_type,
        "Flags": flags,
        "DimensionCount": count,
        "Sizes": uints(sizes_ptr),
        "Strides": None if strides_ptr == 0 else uints(strides_ptr),
        "TotalTensorSizeInBytes": total,
        "GuaranteedBaseOffsetAlignment": alignment,
    }


def churn() -> None:
    """Free what can be freed and reuse the memory, so a dangling pointer would read garbage."""
    gc.collect()
    junk: list[Any] = [(ctypes.c_uint32 * 8)(*([0xDEADBEEF] * 8)) for _ in range(2000)]
    junk += [np.full(16, 0xEE, np.uint8).tobytes() for _ in range(2000)]
    del junk
    gc.collect()


def make_desc(**kwargs: Any) -> Any:
    """as_ctypes() of a tensor that is dropped at once: the struct alone must keep its arrays alive."""
    t = dmlbridge.prepare(np.arange(6, dtype=np.float32).reshape(2, 3), **kwargs)
    return t.as_ctypes()


def test_buffer_desc_layout() -> None:
    t = dmlbridge.prepare(np.zeros((2, 3), np.float32))
    c = t.as_ctypes()
    assert ctypes.sizeof(c) == 48
    assert ctypes.alignment(type(c)) == 8
    for name, offset, size in BUFFER_FIELDS:
        field = getattr(type(c), name)
        assert (field.offset, field.size) == (offset, size), name


def test_buffer_desc_packed_reads_back() -> None:
    c = make_desc(min_dims=4)
    churn()
    assert read_buffer_desc(ctypes.addressof(c)) == {
        "DataType": 1,
        "Flags": 0,
        "DimensionCount": 4,
        "Sizes": [1, 1, 2, 3],
        "Strides": None,  # packed: NULL
        "TotalTensorSizeInBytes": 24,
        "GuaranteedBaseOffsetAlignment": 0,
    }


def test_buffer_desc_strided_reads_back() -> None:
    c = make_desc(strides=[4, 1], min_dims=4, flags=1, guaranteed_base_offset_alignment=32)
    churn()
    assert read_buffer_desc(ctypes.addressof(c)) == {
        "DataType": 1,
        "Flags": 1,
        "DimensionCount": 4,
        "Sizes": [1, 1, 2, 3],
        "Strides": [7, 7, 4, 1],
        "TotalTensorSizeInBytes": 28,
        "GuaranteedBaseOffsetAlignment": 32,
    }


def test_buffer_desc_matches_desc_dict() -> None:
    cases = [
        dmlbridge.prepare(np.array([1, 2, 3, 4, 5], dtype=ml_dtypes.uint4)),
        dmlbridge.prepare(np.array([-8, 7, -1], dtype=ml_dtypes.int4), strides=[3]),
        dmlbridge.prepare(np.arange(6, dtype=np.int64).reshape(3, 2), target=Target(supported=NO64)),
        dmlbridge.prepare(np.ones((1, 2, 1, 2, 1, 2, 1, 2), np.float16)),
    ]
    for t in cases:
        c = t.as_ctypes()
        assert read_buffer_desc(ctypes.addressof(c)) == t.desc()
    held = cases[2].as_ctypes()  # a temporary would be freed before its memory is read
    emulated = read_buffer_desc(ctypes.addressof(held))
    assert emulated["DataType"] == int(DmlDataType.INT32) and emulated["Strides"] == [4, 2]
    assert emulated["TotalTensorSizeInBytes"] == 48


def test_buffer_desc_outlives_everything() -> None:
    descs = [make_desc(strides=[5, 1], min_dims=3) for _ in range(20)]
    churn()
    for c in descs:
        got = read_buffer_desc(ctypes.addressof(c))
        assert got["Sizes"] == [1, 2, 3] and got["Strides"] == [8, 5, 1], got


def test_tensor_desc() -> None:
    t = dmlbridge.prepare(np.zeros((2, 3), np.float16), strides=[3, 1])
    td = t.as_ctypes_tensor_desc()
    assert ctypes.sizeof(td) == 16
    raw = ctypes.string_at(ctypes.addressof(td), 16)
    (kind,) = struct.unpack_from("<i", raw, 0)
    (pointer,) = struct.unpack_from("<Q", raw, 8)
    assert kind == 1  # DML_TENSOR_TYPE_BUFFER
    assert (type(td).Type.offset, type(td).Desc.offset) == (0, 8)
    assert pointer != 0
    assert read_buffer_desc(pointer) == t.desc()


def test_tensor_desc_outlives_everything() -> None:
    def make() -> Any:
        t = dmlbridge.prepare(np.zeros((4, 2), np.int8), strides=[2, 1], min_dims=4)
        return t.as_ctypes_tensor_desc()

    tds = [make() for _ in range(20)]
    churn()
    for td in tds:
        (pointer,) = struct.unpack_from("<Q", ctypes.string_at(ctypes.addressof(td), 16), 8)
        got = read_buffer_desc(pointer)
        assert (got["DataType"], got["Sizes"], got["Strides"]) == (8, [1, 1, 4, 2], [8, 8, 2, 1]), got
        assert got["TotalTensorSizeInBytes"] == 8


def test_tensor_desc_array_keeps_what_it_points_at_alive(tmp_path: Any) -> None:
    """An array of DML_TENSOR_DESC built from prepared tensors and plan entries points at live buffer descs,
    whatever else is allocated and freed meanwhile."""
    import gc

    import numpy as np

    plan = dmlbridge.convert_model(model_of({"w": np.ones((2, 2), np.int8)}), tmp_path / "w", progress=False,
                                   min_dims=4)
    array = dmlbridge.tensor_desc_array([dmlbridge.prepare(np.ones((4, 2), np.int8), min_dims=4),
                                         plan.entries["w"], dmlbridge.BufferTensorDesc(8, 0, (1, 1, 1, 5), None, 8, 0)])
    gc.collect()
    junk = [ctypes.create_string_buffer(48) for _ in range(2000)]  # reuse freed memory, if any was freed
    del junk
    descs = []
    for td in array:
        assert td.Type == 1
        descs.append(read_buffer_desc(td.Desc))
    assert [d["Sizes"] for d in descs] == [[1, 1, 4, 2], [1, 1, 2, 2], [1, 1, 1, 5]]
    assert [d["TotalTensorSizeInBytes"] for d in descs] == [8, 4, 8]
    entry = plan.entries["w"].as_ctypes_tensor_desc()
    assert read_buffer_desc(entry.Desc)["Sizes"] == [1, 1, 2, 2]
    with pytest.raises(dmlbridge.InvalidArgumentError, match="item 0 is a str"):
        dmlbridge.tensor_desc_array(["nope"])
