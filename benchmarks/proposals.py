"""Measured prototypes of changes proposed for modules the benchmark does not own: ``python -m benchmarks.proposals``.

Each prototype is checked bit for bit against the current code path before it is timed (interleaved medians).

1. encode.py, small-float widening: ``np.take`` converts its whole index array to intp first (8 bytes per element:
   a 512 MiB temporary for 64 Mi float8 codes), so the lookup runs at the speed of page faults. Taking in blocks
   keeps that temporary in cache; a 65,536-entry table indexed by byte *pairs* halves the lookups again.
2. onnx_tensor.py / decode.py, INT4 readback: ``packing.unpack_nibbles`` (blocked, 16-bit words) instead of two
   full-size strided passes; and no second copy of the fresh nibble array in ``decode``.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import ml_dtypes
import numpy as np
from onnx import numpy_helper

import dmlbridge
from benchmarks.harness import MiB, interleaved, median
from dmlbridge.packing import unpack_nibbles

WIDEN_BLOCK = 1 << 16  # codes per np.take call: the intp index temporary (512 KiB) stays in L2


@functools.cache
def byte_table(source: np.dtype, dest: np.dtype) -> np.ndarray:
    """dest bit patterns of the 256 source codes, from ml_dtypes (as encode.py builds it)."""
    with np.errstate(all="ignore"):
        values = np.arange(256, dtype=np.uint8).view(source).astype(dest)
    return values.view(f"<u{dest.itemsize}")


@functools.cache
def pair_table(source: np.dtype, dest: np.dtype) -> np.ndarray:
    """dest bit patterns of all 65,536 code pairs: entry ``c0 | c1 << 8`` holds f(c0) in its low half."""
    codes = np.arange(1 << 16, dtype="<u2").view(np.uint8).view(source)
    with np.errstate(all="ignore"):
        values = codes.astype(dest.newbyteorder("<"))
    return values.view(f"<u{2 * dest.itemsize}")


def widen_into(codes: np.ndarray, out: np.ndarray, source: np.dtype, dest: np.dtype) -> None:
    """Proposed encode.py kernel: 1-D contiguous uint8 ``codes`` -> 1-D contiguous ``out`` (dest bit patterns)."""
    n = codes.shape[0]
    even = n - n % 2
    if dest.itemsize <= 4 and even:
        pairs, wide = codes[:even].view("<u2"), out[:even].view(f"<u{2 * dest.itemsize}")
        table = pair_table(source, dest)
        half = WIDEN_BLOCK // 2
        for start in range(0, even // 2, half):
            np.take(table, pairs[start : start + half], out=wide[start : start + half], mode="clip")
    else:
        even = 0
    table = byte_table(source, dest)
    for start in range(even, n, WIDEN_BLOCK):
        np.take(table, codes[start : start + WIDEN_BLOCK], out=out[start : start + WIDEN_BLOCK], mode="clip")


def widen_blocked_bytes(codes: np.ndarray, out: np.ndarray, source: np.dtype, dest: np.dtype) -> None:
    """The smaller change: the same 256-entry table, taken in blocks."""
    table = byte_table(source, dest)
    for start in range(0, codes.shape[0], WIDEN_BLOCK):
        np.take(table, codes[start : start + WIDEN_BLOCK], out=out[start : start + WIDEN_BLOCK], mode="clip")


def _widen_fresh(codes: np.ndarray, source: np.dtype, dest: np.dtype) -> np.ndarray:
    """widen_into a freshly allocated output, as ``prepare`` does."""
    out = np.empty(codes.shape[0], dtype=f"<u{dest.itemsize}")
    widen_into(codes, out, source, dest)
    return out


def _report(title: str, times: dict[str, list[float]], base: str) -> None:
    print(title)
    for name, runs in times.items():
        print(f"  {name:<44} {median(runs) * 1e3:9.1f} ms   {median(runs) / median(times[base]):5.2f}× {base}")


def widening(n: int, repeat: int) -> None:
    """Proposal 1: current prepare_into vs blocked byte table vs blocked pair table, against ml_dtypes astype."""
    raw = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
    dst = np.zeros(2 * n + 256, dtype=np.uint8)
    dest = np.dtype("<f2")
    for name, bits in (("float8_e4m3fn", 8), ("float8_e5m2", 8), ("float6_e2m3fn", 6), ("float4_e2m1fn", 4)):
        source = np.dtype(getattr(ml_dtypes, name))
        codes = raw & np.uint8((1 << bits) - 1)
        src = codes.view(source)
        out = dst[: 2 * n].view("<u2")
        with np.errstate(all="ignore"):
            expected = src.astype(np.float16).view("<u2")
        for kernel in (widen_into, widen_blocked_bytes):
            out.fill(0)
            kernel(codes, out, source, dest)
            assert np.array_equal(out, expected), (name, kernel.__name__)
        funcs: dict[str, Callable[[], Any]] = {
            "ml_dtypes astype": partial(src.astype, np.float16),
            "current prepare_into": partial(dmlbridge.prepare_into, dst, 0, src),
            "current prepare": partial(dmlbridge.prepare, src),
            "blocked byte table (into)": partial(widen_blocked_bytes, codes, out, source, dest),
            "blocked pair table (into)": partial(widen_into, codes, out, source, dest),
            "blocked pair table (fresh output)": partial(_widen_fresh, codes, source, dest),
        }
        _report(f"{name} -> FLOAT16, {n // MiB} Mi elements", interleaved(funcs, repeat), "ml_dtypes astype")


def readback(n: int, repeat: int) -> None:
    """Proposal 2: INT4 readback with the blocked unpack, against onnx's to_array."""
    src4 = (np.random.default_rng(1).integers(0, 16, n, dtype=np.uint8).astype(np.int8) - 8).astype(ml_dtypes.int4)
    proto = numpy_helper.from_array(src4)
    packed = np.frombuffer(proto.raw_data, dtype=np.uint8)
    expected = numpy_helper.to_array(proto).view(np.uint8)
    proposed = unpack_nibbles(np.frombuffer(proto.raw_data, np.uint8), n).view(ml_dtypes.int4)
    assert np.array_equal(proposed.view(np.uint8), expected)
    funcs: dict[str, Callable[[], Any]] = {
        "numpy_helper.to_array": lambda: numpy_helper.to_array(proto),
        "proposed tensor_to_array core": lambda: unpack_nibbles(np.frombuffer(proto.raw_data, np.uint8), n).view(
            ml_dtypes.int4
        ),
        "current decode": lambda: dmlbridge.decode(packed, "INT4", [n]),
        "proposed decode (no second copy)": lambda: unpack_nibbles(packed, n).view(ml_dtypes.int4),
    }
    try:
        from dmlbridge.onnx_tensor import tensor_to_array

        funcs["current tensor_to_array"] = lambda: tensor_to_array(proto)
    except ImportError:
        pass
    _report(f"INT4 readback, {n // MiB} Mi elements", interleaved(funcs, repeat), "numpy_helper.to_array")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.proposals", description=__doc__)
    parser.add_argument("--elements", type=int, default=64 * MiB)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    widening(args.elements, args.repeat)
    readback(args.elements, args.repeat)
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
