"""Cases 1-4 of the performance issue: native copies, 4-bit packing, small-float widening, TensorProto decoding."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from functools import partial
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

import dmlbridge
from benchmarks.harness import Row, Settings, Skipped, compare

Result = list[Row | Skipped]

ir: Any
try:  # a peer, in the "bench" extra
    import onnx_ir as ir
except ImportError:  # pragma: no cover - the peer rows are left out
    ir = None


def _random_bytes(n: int, seed: int = 0) -> np.ndarray:
    """``n`` random bytes (page-touched, so no first-touch cost lands in a timing)."""
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def _buffer(n: int) -> np.ndarray:
    """A preallocated, already touched destination of ``n`` bytes."""
    out = np.empty(n, dtype=np.uint8)
    out.fill(0)
    return out


def _ir_tobytes(array: np.ndarray) -> list[tuple[str, Callable[[], Any], float | None]]:
    """The onnx_ir peer, ``ir.Tensor(array).tobytes()``, when onnx_ir is installed."""
    if ir is None:
        return []
    return [("ir.Tensor.tobytes", lambda: ir.Tensor(array).tobytes(), None)]


def _copy_floor(n: int) -> tuple[str, Callable[[], Any], float | None]:
    a, b = _buffer(n), _buffer(n)
    return ("np.copyto (same bytes)", lambda: np.copyto(a, b), None)


def native(settings: Settings) -> Result:
    """Case 1: native types into a preallocated buffer (≤ 1.3 × np.copyto), zero-copy prepare, fresh copies."""
    n, repeat = settings.tensor_bytes, settings.repeat
    raw = _random_bytes(n)
    rows: Result = []
    dst = _buffer(n + 256)
    for dtype in (np.float32, np.float16, np.int32):
        src = raw.view(dtype)
        name, copy, _ = _copy_floor(n)
        rows.append(
            compare(
                f"1 native {np.dtype(dtype).name} prepare_into",
                n,
                ("prepare_into", partial(dmlbridge.prepare_into, dst, 0, src)),
                [
                    (name, copy, 1.3),
                    ("numpy_helper.from_array", partial(numpy_helper.from_array, src), None),
                    *_ir_tobytes(src),
                ],
                repeat,
            )
        )
    src = raw.view(np.float32)
    row = compare(
        "1 native float32 prepare (zero copy)",
        n,
        ("prepare", lambda: dmlbridge.prepare(src)),
        [
            ("arr.copy()", src.copy, None),
            ("numpy_helper.from_array", lambda: numpy_helper.from_array(src), None),
            *_ir_tobytes(src),
        ],
        repeat,
    )
    prepared = dmlbridge.prepare(src)
    row.checks["shares memory"] = bool(np.shares_memory(prepared.data, src))
    row.checks["read-only"] = not prepared.data.flags.writeable
    rows.append(row)
    # An odd float16 count needs 2 bytes of padding, so prepare must allocate and copy: compare with arr.copy().
    odd = raw[: n - 2].view(np.float16)  # n / 2 - 1 elements: an odd count, 2 bytes short of a multiple of 4
    rows.append(
        compare(
            "1 native float16 prepare (padded copy)",
            odd.nbytes,
            ("prepare", lambda: dmlbridge.prepare(odd)),
            [("arr.copy()", odd.copy, None)],
            repeat,
            notes=["an odd element count needs padding to 4 bytes, so prepare allocates a fresh buffer"],
        )
    )
    return rows


def four_bit(settings: Settings) -> Result:
    """Case 2: 4-bit packing (≥ 5× from_array, ≥ 3× onnx_ir, ≤ 3× np.copyto) and unpacking (≤ to_array)."""
    n, repeat = settings.tensor_bytes, settings.repeat  # n elements, one byte each in the source
    src8 = (_random_bytes(n, 1) % 16).astype(np.int8) - 8
    src4 = src8.astype(ml_dtypes.int4)
    dst = _buffer(n // 2 + 256)
    rows: Result = []
    name, copy, _ = _copy_floor(n)
    rows.append(
        compare(
            "2 pack int4 → INT4 prepare_into",
            n,
            ("prepare_into", lambda: dmlbridge.prepare_into(dst, 0, src4)),
            [(name, copy, 3.0)],
            repeat,
        )
    )
    peers: list[tuple[str, Callable[[], Any], float | None]] = [
        ("numpy_helper.from_array", lambda: numpy_helper.from_array(src4), 1 / 5),
        *[(p, f, 1 / 3) for p, f, _ in _ir_tobytes(src4)],
        ("onnx _pack_4bitx2", lambda: numpy_helper._pack_4bitx2(src4), None),
    ]
    rows.append(compare("2 pack int4 → INT4 prepare", n, ("prepare", lambda: dmlbridge.prepare(src4)), peers, repeat))
    rows.append(
        compare(
            "2 pack int8 → INT4 pack_4bit",
            n,
            ("pack_4bit", lambda: dmlbridge.pack_4bit(src8)),
            [(name, copy, 3.0), *peers],
            repeat,
            notes=["int8 values are range-checked; the peers get the same values as an ml_dtypes int4 array"],
        )
    )
    expected = numpy_helper._pack_4bitx2(src4)
    results = (dmlbridge.prepare(src4).data[: expected.size], dmlbridge.pack_4bit(src8))
    for row, packed in zip(rows[-2:], results, strict=True):
        assert isinstance(row, Row)
        row.checks["bytes = onnx's"] = bool(np.array_equal(packed, expected))
    rows.extend(_unpack(settings, src4))
    return rows


def _unpack(settings: Settings, src4: np.ndarray) -> Result:
    """Readback of INT4: decode and tensor_to_array against onnx's to_array."""
    n, repeat = src4.size, settings.repeat
    proto = numpy_helper.from_array(src4)
    packed = np.frombuffer(proto.raw_data, dtype=np.uint8)
    peers: list[tuple[str, Callable[[], Any], float | None]] = [
        ("numpy_helper.to_array", lambda: numpy_helper.to_array(proto), 1.0),
        ("onnx _unpack_4bit", lambda: numpy_helper._unpack_4bit(packed, [n]), None),
    ]
    if ir is not None:
        peers.append(("ir.from_proto().numpy()", lambda: ir.from_proto(proto).numpy(), None))
    decoded = compare(
        "2 unpack INT4 decode",
        n,
        ("decode", lambda: dmlbridge.decode(packed, "INT4", [n])),
        peers,
        repeat,
        notes=["decode returns ml_dtypes int4, like to_array"],
    )
    decoded.checks["values = onnx's"] = bool(
        np.array_equal(
            dmlbridge.decode(packed, "INT4", [n]).view(np.uint8), numpy_helper.to_array(proto).view(np.uint8)
        )
    )
    rows: Result = [
        decoded,
        compare(
            "2 unpack INT4 unpack_4bit",
            n,
            ("unpack_4bit", lambda: dmlbridge.unpack_4bit(packed, n, signed=True)),
            peers[:2],
            repeat,
        ),
        compare(
            "2 unpack INT4 tensor_to_array",
            n,
            ("tensor_to_array", lambda: dmlbridge.tensor_to_array(proto)),
            peers,
            repeat,
        ),
    ]
    return rows


_FLOATS = (
    ("float8_e4m3fn", 8),
    ("float8_e5m2", 8),
    ("float6_e2m3fn", 6),
    ("float4_e2m1fn", 4),
)


def widening(settings: Settings) -> Result:
    """Case 3: 8-, 6- and 4-bit floats to FLOAT16, ≥ 3× faster than ml_dtypes astype and bit-identical to it (for
    float8_e5m2, to its codes shifted up 8 bits: ml_dtypes' values but for the NaN payloads it quiets)."""
    n, repeat = settings.tensor_bytes, settings.repeat
    raw = _random_bytes(n, 2)
    dst = _buffer(2 * n + 256)
    f16 = _buffer(2 * n).view(np.float16)
    rows: Result = []
    for name, bits in _FLOATS:
        dtype = np.dtype(getattr(ml_dtypes, name))
        src = (raw & np.uint8((1 << bits) - 1)).view(dtype)
        row = compare(
            f"3 widen {name} → FLOAT16 prepare",
            n,
            ("prepare", partial(dmlbridge.prepare, src)),
            [("ml_dtypes astype", partial(src.astype, np.float16), 1 / 3)],
            repeat,
        )
        with np.errstate(all="ignore"):
            expected = src.astype(np.float16).view(np.uint16)
        if name == "float8_e5m2":  # (the top byte of a float16, NaN payloads included: docs/decisions.md)
            expected = src.view(np.uint8).astype(np.uint16) << 8
        row.checks["bit-identical"] = bool(
            np.array_equal(dmlbridge.prepare(src).data[: 2 * n].view(np.uint16), expected)
        )
        rows.append(row)
        rows.append(
            compare(
                f"3 widen {name} → FLOAT16 prepare_into",
                n,
                ("prepare_into", partial(dmlbridge.prepare_into, dst, 0, src)),
                [
                    (
                        "np.copyto(f16, src) (ml_dtypes cast)",
                        partial(np.copyto, f16, src, casting="unsafe"),
                        None,
                    ),
                    _copy_floor(2 * n),
                ],
                repeat,
            )
        )
    return rows


def _owner(array: np.ndarray) -> Any:
    """The object at the end of an array's ``base``/memoryview chain (bytes, mmap, or an array owning its data)."""
    obj: Any = array
    while True:
        if isinstance(obj, np.ndarray) and obj.base is not None:
            obj = obj.base
        elif isinstance(obj, memoryview) and obj.obj is not None:
            obj = obj.obj
        else:
            return obj


def tensors(settings: Settings) -> Result:
    """Case 4: tensor_to_array of raw_data and of external data returns views, not copies."""
    n, repeat = settings.tensor_bytes, settings.repeat
    src = _random_bytes(n, 3).view(np.float32)
    proto = numpy_helper.from_array(src, "w")
    peers: list[tuple[str, Callable[[], Any], float | None]] = [
        ("numpy_helper.to_array", lambda: numpy_helper.to_array(proto), None),
        ("proto.raw_data (the bytes alone)", lambda: proto.raw_data, None),
    ]
    if ir is not None:
        peers.append(("ir.from_proto().numpy()", lambda: ir.from_proto(proto).numpy(), None))
    row = compare(
        "4 tensor_to_array raw_data float32",
        n,
        ("tensor_to_array", lambda: dmlbridge.tensor_to_array(proto)),
        peers,
        repeat,
        notes=["reading proto.raw_data copies the bytes out of the protobuf message: that copy is the floor"],
    )
    got = dmlbridge.tensor_to_array(proto)
    row.checks["no copy (view of the bytes)"] = not got.flags.owndata and isinstance(_owner(got), bytes)
    rows: Result = [row]

    folder = settings.workdir / "case4"
    folder.mkdir(parents=True, exist_ok=True)
    src.tofile(folder / "w.bin")
    ext = onnx.TensorProto()
    ext.CopyFrom(proto)
    ext.ClearField("raw_data")
    ext.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(n))):
        entry = ext.external_data.add()
        entry.key, entry.value = key, value
    base = os.fspath(folder)
    peers = [("numpy_helper.to_array", partial(numpy_helper.to_array, ext, base), 1.0)]
    if ir is not None:
        peers.append(("ir deserialize_tensor().numpy()", lambda: ir.serde.deserialize_tensor(ext, base).numpy(), None))
    row = compare(
        "4 tensor_to_array external float32",
        n,
        ("tensor_to_array", lambda: dmlbridge.tensor_to_array(ext, base)),
        peers,
        repeat,
        notes=["a memory map: pages are read when first used"],
    )
    got = dmlbridge.tensor_to_array(ext, base)
    row.checks["no copy (memory map)"] = isinstance(_owner(got), mmap.mmap)
    rows.append(row)
    buf = np.empty(n, dtype=np.uint8).view(np.float32)
    buf.fill(0)
    touch: list[tuple[str, Callable[[], Any], float | None]] = [
        ("to_array, then copied", lambda: np.copyto(buf, numpy_helper.to_array(ext, base)), 1.0)
    ]
    if ir is not None:
        touch.append(
            ("ir numpy(), then copied", lambda: np.copyto(buf, ir.serde.deserialize_tensor(ext, base).numpy()), None)
        )
    rows.append(
        compare(
            "4 tensor_to_array external, then copied",
            n,
            ("tensor_to_array, then copied", lambda: np.copyto(buf, dmlbridge.tensor_to_array(ext, base))),
            touch,
            repeat,
            notes=["every byte used once: what a converter pays"],
        )
    )
    return rows
