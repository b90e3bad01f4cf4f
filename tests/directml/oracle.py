"""What DirectML must return for a source array, and the comparison rules of the suite.

The expected values come from the source as onnx, numpy and ml_dtypes decode it, converted by numpy to the
program's output type (dml_runtime.OUTPUT_TYPE), never from dmlbridge's own readback. Integer outputs must be
equal bit for bit. In a float output NaN equals NaN, and a subnormal that the GPU's float rules flush to zero is
counted (``flushed``), not failed, as is a NaN whose payload changed (``quieted``): Direct3D promises neither.
What must come back bit for bit, NaN payloads and subnormals included, is a FLOAT32 or FLOAT64 tensor's bits read:
the same bytes through IDENTITY as UINT32 or UINT64, a plain copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
from bindings_format import DML_TYPES, HEADER, ConsumerLine, Desc, desc_fields, encode, parse
from dml_runtime import NUMPY, OUTPUT_TYPE, TALLY, Result


def expected_output(source: np.ndarray, dml_type: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The source's values as the program's output type for a tensor of ``dml_type`` (flat, C order, broadcast to
    ``shape`` when given). Integers that dmlbridge narrows or emulates in 32 bits are compared as 32-bit values."""
    values = np.asarray(source)
    if values.dtype == np.bool_:
        values = values.astype(np.uint8)
    if values.dtype == np.dtype(ml_dtypes.float8_e5m2):
        # The top byte of a float16, NaN payloads included (ml_dtypes' astype gives the quiet NaN instead).
        codes = values.reshape(-1).view(np.uint8)  # (flat: numpy 1.26 views no 0-d array as another dtype)
        values = (codes.astype(np.uint16) << 8).view(np.float16).reshape(values.shape)
    out = NUMPY[OUTPUT_TYPE[dml_type]]
    if dml_type in ("INT32", "UINT32") and values.dtype.itemsize == 8:
        values = values.astype(np.int64 if values.dtype.kind == "i" else np.uint64)
    # (DOUBLE beyond FLOAT32's range rounds to an infinity, as dmlbridge's does; numpy's float16 to float32 keeps
    # a NaN's payload, signalling or not)
    with np.errstate(over="ignore", invalid="ignore"):
        converted = values.astype(out)
    if shape is not None:
        converted = np.broadcast_to(converted.reshape(values.shape), shape)
    return np.ascontiguousarray(converted).reshape(-1)


_ELEMENTS = {"FLOAT32": "<f4", "FLOAT16": "<f2", "FLOAT64": "<f8", "UINT32": "<u4", "INT32": "<i4", "UINT16": "<u2",
             "INT16": "<i2", "UINT8": "u1", "INT8": "i1", "UINT64": "<u8", "INT64": "<i8"}


def through_desc(raw: bytes, desc: Desc) -> np.ndarray:
    """The elements a desc reads from ``raw`` (a tensor's bytes from its offset), as numpy reads them: element i
    of each dimension at i times its stride (packed C order without strides; 4-bit elements low nibble first)."""
    if desc.data_type in ("UINT4", "INT4"):
        codes = np.frombuffer(raw, np.uint8)
        flat = np.stack([codes & 0xF, codes >> 4], axis=-1).reshape(-1)
        if desc.data_type == "INT4":
            flat = (flat.astype(np.int8) ^ 8) - 8
    else:
        flat = np.frombuffer(raw[: len(raw) // np.dtype(_ELEMENTS[desc.data_type]).itemsize
                                 * np.dtype(_ELEMENTS[desc.data_type]).itemsize], _ELEMENTS[desc.data_type])
    strides = desc.strides
    if strides is None:  # (packed: C order)
        strides = tuple(int(np.prod(desc.sizes[i + 1 :])) for i in range(len(desc.sizes)))
    assert sum((n - 1) * s for n, s in zip(desc.sizes, strides, strict=True)) < flat.size, desc
    return np.lib.stride_tricks.as_strided(flat, desc.sizes, [s * flat.itemsize for s in strides]).copy()


@dataclass
class Verdict:
    compared: int
    mismatched: list[str]
    flushed: int  # subnormals a float-typed read gave back as zeros
    quieted: int = 0  # NaNs a float-typed read gave back with another payload


def compare(result: Result, expected: np.ndarray, group: str | None, what: str) -> Verdict:
    """Compare one output with its expected values by the suite's rules; counted in the session's tally (a
    ``group`` of None counts nothing: the tests that break a desc on purpose)."""
    verdict = _compare(result, expected, what)
    if group is not None:
        TALLY.count(group, 1)
        TALLY.mismatches += bool(verdict.mismatched)
        TALLY.flushed += verdict.flushed
        TALLY.quieted += verdict.quieted
    return verdict


def _compare(result: Result, expected: np.ndarray, what: str) -> Verdict:
    if not result.ok:
        return Verdict(1, [f"{what}: {result.operator} returned {result.hresult}"], 0)
    got = result.values()
    if got.shape != expected.shape:
        return Verdict(1, [f"{what}: {got.size} values, expected {expected.size}"], 0)
    if got.dtype.kind != "f":
        return Verdict(1, _bit_for_bit(got, expected, f"{what}: ", f"through {result.operator}"), 0)
    both_nan = np.isnan(got) & np.isnan(expected)
    equal = (got == expected) | both_nan
    # A subnormal expected value that came back as a zero of either sign: flushed, as Direct3D's float rules allow.
    tiny = np.finfo(got.dtype).tiny
    with np.errstate(invalid="ignore"):
        flushed = ~equal & (got == 0) & (np.abs(expected.astype(np.float64)) < tiny) & (expected != 0)
    unsigned = f"u{got.itemsize}"
    quieted = both_nan & (got.view(unsigned) != np.ascontiguousarray(expected).view(unsigned))
    problems = []
    bad = np.flatnonzero(~equal & ~flushed)
    if bad.size:
        first = bad[0]
        problems.append(f"{what}: {bad.size} of {got.size} values differ through {result.operator}, first at "
                        f"{first}: {got[first]!r} != {expected[first]!r}")
    if result.operator == "IDENTITY" and result.kind == "read":  # (a FLOAT32 or FLOAT64 tensor: its bits read
        # must give back every bit; a consumer's read of the same bytes has none)
        bits = result.bits
        if bits is None or not bits.ok:
            problems.append(f"{what}: no bits read of it as {unsigned.replace('u', 'UINT')}" if bits is None else
                            f"{what}: its bits read returned {bits.hresult}")
        else:
            problems += _bit_for_bit(bits.values(), np.ascontiguousarray(expected).view(unsigned), f"{what}: ",
                                     f"through IDENTITY as {bits.out_type}")
    return Verdict(1, problems, int(flushed.sum()), int(quieted.sum()))


def _bit_for_bit(got: np.ndarray, expected: np.ndarray, what: str, how: str) -> list[str]:
    if got.shape != expected.shape:
        return [f"{what}{got.size} values {how}, expected {expected.size}"]
    unsigned = f"u{got.itemsize}"
    bad = np.flatnonzero(got.view(unsigned) != np.ascontiguousarray(expected).view(unsigned))
    if not bad.size:
        return []
    first = bad[0]
    return [f"{what}{bad.size} of {got.size} differ bit for bit {how}, first at {first}: {got[first]!r} != "
            f"{expected[first]!r}"]


class Image:
    """One buffer file of tensors at 256-byte offsets, and its binding list (written with the test's own
    writer of the spec, tests/helpers/bindings_format.py, from each tensor's desc)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.rows: list[str] = []

    def add(self, key: str, prepared: object) -> None:
        desc = prepared.desc()  # type: ignore[attr-defined]
        self.data += bytes(-len(self.data) % 256)
        offset = len(self.data)
        self.data += prepared.data.tobytes()  # type: ignore[attr-defined]
        fields = desc_fields(DML_TYPES[desc["DataType"]], tuple(desc["Sizes"]),
                             None if desc["Strides"] is None else tuple(desc["Strides"]),
                             desc["TotalTensorSizeInBytes"], desc["Flags"], desc["GuaranteedBaseOffsetAlignment"])
        self.rows.append(f"tensor {encode(key)} 0 {offset} {fields} gpu")

    def write(self, folder: Path, name: str = "image.bin") -> str:
        """Write the buffer file into ``folder``; returns the binding list's text."""
        self.data += bytes(-len(self.data) % 16)
        (folder / name).write_bytes(bytes(self.data))
        return "\n".join([HEADER, "target 6.4", f"buffer 0 {name} {len(self.data)} gpu",
                          *self.rows]) + "\n"


def merged(lists: dict[str, str]) -> str:
    """One binding list of several conversions whose buffer files share one folder, each key and record named
    ``CASE:key`` (the list of each conversion read by the test's own parser of the spec, its buffers renumbered:
    the uploaded ones of every conversion first, then those of the constants read on the CPU)."""
    rows, buffers = [HEADER, "target 6.4"], []
    body = []
    every = [(case, parse(text)) for case, text in lists.items()]
    numbers = {}  # (case, buffer) -> its number in the merged list
    for upload in ("gpu", "cpu"):
        for case, listed in every:
            for i, (file, size) in enumerate(listed.buffers):
                if listed.uploads[i] == upload:
                    numbers[case, i] = len(buffers)
                    buffers.append((file, size, upload))
    for case, listed in every:
        announced = set()
        for line in listed.lines:
            if line.kind == "part" and line.record not in announced:
                announced.add(line.record)
                body.append(f"quantized {encode(case + ':' + (line.record or ''))} {listed.operators[line.record]}")
            fields = desc_fields(line.desc.data_type, line.desc.sizes, line.desc.strides, line.desc.total,
                                 line.desc.flags, line.desc.alignment)
            where = f"{encode(case + ':' + line.key)} {numbers[case, line.buffer]} {line.offset} {fields}"
            if line.kind == "tensor":
                body.append(f"tensor {where} {line.reads_on}")
                body += [_consumer_row(case, c) for c in listed.consumers if c.key == line.key]
            else:
                body.append(f"part {encode(case + ':' + (line.record or ''))} {line.form} {line.role} {where}")
    rows += [f"buffer {i} {encode(file)} {size} {upload}" for i, (file, size, upload) in enumerate(buffers)]
    return "\n".join(rows + body) + "\n"


def _consumer_row(case: str, c: ConsumerLine) -> str:
    d = c.desc
    fields = "-" if d is None else desc_fields(d.data_type, d.sizes, d.strides, d.total, d.flags, d.alignment)
    return f"consumer {encode(case + ':' + c.key)} {c.index} {encode(c.node)} {c.input} {c.operator or '-'} {fields}"
