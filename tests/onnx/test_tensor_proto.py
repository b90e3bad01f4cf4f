"""TensorProto decoding: bit-identical to onnx.numpy_helper.to_array, stricter where onnx is lax, and never
allocating what a tensor merely claims.

(a) ONNX's own node-test corpus; (b) every storage form of every type built by hand; (c) each strictness rule;
(d) a child process under an address-space limit; (e) a bounded fuzz run where only DmlBridgeErrors may escape.
"""

from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
import textwrap
import time
import tracemalloc
import warnings
from pathlib import Path

import background
import numpy as np
import onnx_corpus
import pytest
import reference as ref
from budget import examples
from builders import EDITS, mutate_bytes
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from limits import ADDRESS_SPACE_LIMIT
from onnx import TensorProto, helper, numpy_helper

import dmlbridge
from dmlbridge.errors import (
    DmlBridgeError,
    ExternalDataError,
    InvalidArgumentError,
    TensorProtoError,
    TensorTooLargeError,
    UnsupportedTypeError,
)
from dmlbridge.onnx.tensor_proto import DEFAULT_MAX_TENSOR_BYTES, TensorInfo, tensor_info, tensor_to_array
from dmlbridge.types.data_types import OnnxDataType

T = OnnxDataType
VALUED_TYPES = [t for t in OnnxDataType if t is not T.UNDEFINED]
SHAPES = [(), (0,), (1,), (2,), (3,), (5,), (7,), (2, 3), (3, 0, 2), (4, 5, 3), (1, 1, 9)]


def assert_same(got: np.ndarray, ref: np.ndarray, what: str = "") -> None:
    """Same dtype, shape and bytes (same Python values for STRING object arrays)."""
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} != {ref.dtype}"
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    if ref.dtype == object:
        assert [(type(v), v) for v in got.flat] == [(type(v), v) for v in ref.flat], what
    else:
        assert got.tobytes() == ref.tobytes(), f"{what}: bytes differ"


# --- (a) ONNX's node-test corpus ------------------------------------------------------------------------------


def _typed_twin(tensor: TensorProto) -> TensorProto | None:
    """The same values stored in the typed field instead of raw_data (None when onnx cannot build it)."""
    if not tensor.HasField("raw_data"):
        return None
    try:
        array = numpy_helper.to_array(tensor)
        return helper.make_tensor(tensor.name, tensor.data_type, tensor.dims, array.flatten(), raw=False)
    except Exception:  # noqa: BLE001
        return None


_CORPUS: list[background.Job[Path]] = []


def start_in_background(queue: background.Queue, folder: Path) -> None:
    """The corpus is collected by a child process beside the other tests (tests/conftest.py calls this)."""
    _CORPUS.append(queue.add(functools.partial(onnx_corpus.write_in_child, folder / "corpus.bin")))


@pytest.fixture(scope="module")
def corpus() -> list[tuple[str, TensorProto]]:
    if _CORPUS:
        return onnx_corpus.read(_CORPUS[0].result())
    return onnx_corpus.collect()


def test_onnx_corpus_decodes_like_numpy_helper(corpus):
    start = time.perf_counter()
    checked, typed, types, failures = 0, 0, set(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, tensor in corpus:
            for form, proto in (("as given", tensor), ("typed twin", _typed_twin(tensor))):
                if proto is None:
                    continue
                try:
                    ref = numpy_helper.to_array(proto)
                except Exception:  # noqa: BLE001 - onnx cannot decode it either: nothing to compare
                    continue
                try:
                    got = tensor_to_array(proto)
                    assert_same(got, ref, f"{label} ({form})")
                except (AssertionError, DmlBridgeError) as exc:
                    failures.append(f"{label} ({form}): {exc}")
                checked += 1
                typed += form == "typed twin"
                types.add(proto.data_type)
    assert not failures, f"{len(failures)} of {checked} differ, e.g. {failures[:5]}"
    assert checked > 8000 and typed > 3000, (checked, typed)
    # The corpus must exercise most types (it has no COMPLEX and few STRING tensors of its own).
    assert len(types) >= 24, sorted(types)
    assert time.perf_counter() - start < 60


# --- (b) every storage form of every type, by hand ----------------------------------------------------------


def sample(onnx_type: OnnxDataType, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values covering the whole bit-pattern space of a type (NaNs, infinities, subnormals included)."""
    dtype, n = onnx_type.numpy(), math.prod(shape)
    if onnx_type is T.STRING:
        words = ["", "a", "héllo", "日本語", "tab\tnew\nline", "x" * 40, "nul\x00inside"]
        return np.array([words[i % len(words)] for i in range(n)], dtype=object).reshape(shape)
    if onnx_type is T.BOOL:
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if onnx_type.bitwidth < 8:
        return rng.integers(0, 1 << onnx_type.bitwidth, n).astype(np.uint8).view(dtype).reshape(shape)
    return rng.integers(0, 256, n * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)


def make_external(tensor: TensorProto, directory: Path, offset: int = 0) -> TensorProto:
    """Move a raw tensor's bytes into ``directory/<name>.<offset>.bin`` at ``offset`` (with junk before it): a file
    of its own, since the arrays read from an earlier one may still map it (Windows cannot rewrite a mapped file)."""
    path = directory / f"{tensor.name}.{offset}.bin"
    path.write_bytes(b"\xa5" * offset + tensor.raw_data)
    moved = TensorProto()
    moved.CopyFrom(tensor)
    moved.ClearField("raw_data")
    moved.data_location = TensorProto.EXTERNAL
    for key, value in (("location", path.name), ("offset", str(offset)), ("length", str(len(tensor.raw_data)))):
        entry = moved.external_data.add()
        entry.key, entry.value = key, value
    return moved


@pytest.mark.parametrize("onnx_type", VALUED_TYPES, ids=lambda t: t.name)
def test_every_storage_form_matches_numpy_helper(onnx_type, tmp_path):
    rng = np.random.default_rng(int(onnx_type))
    for k, shape in enumerate(SHAPES):
        values = sample(onnx_type, shape, rng)
        typed = helper.make_tensor(f"t{k}", int(onnx_type), shape, values.flatten(), raw=False)
        assert_same(tensor_to_array(typed), numpy_helper.to_array(typed), f"typed {shape}")
        assert tensor_info(typed).storage == "typed"
        if onnx_type is T.STRING:
            continue
        raw = helper.make_tensor(f"r{k}", int(onnx_type), shape, values, raw=True)
        got = tensor_to_array(raw)
        assert_same(got, numpy_helper.to_array(raw), f"raw {shape}")
        assert_same(got, values, f"raw {shape} vs the source")
        assert tensor_info(raw).storage == "raw"
        for offset in (0, 5):
            external = make_external(raw, tmp_path, offset)
            got = tensor_to_array(external, tmp_path)
            assert_same(got, numpy_helper.to_array(external, str(tmp_path)), f"external {shape} @{offset}")
            assert tensor_info(external).storage == "external"


@pytest.mark.parametrize("onnx_type", [t for t in VALUED_TYPES if t.bitwidth >= 8 and t is not T.STRING])
def test_raw_data_is_a_read_only_view(onnx_type):
    values = sample(onnx_type, (4, 3), np.random.default_rng(1))
    got = tensor_to_array(helper.make_tensor("v", int(onnx_type), (4, 3), values, raw=True))
    assert not got.flags.writeable and not got.flags.owndata
    base = got
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, bytes), "expected a view of the protobuf bytes, not a copy"


def test_sub_byte_layouts_by_hand():
    # docs/directml-facts.md: 4-bit low nibble first; 2-bit x0 | x1<<2 | x2<<4 | x3<<6; 6-bit an LSB-first stream.
    def raw(t, dims, data):
        return tensor_to_array(helper.make_tensor("s", int(t), dims, bytes(data), raw=True))

    assert raw(T.UINT4, [5], [0x21, 0x43, 0x05]).view(np.uint8).tolist() == [1, 2, 3, 4, 5]
    assert raw(T.INT4, [3], [0xF8, 0x07]).astype(np.int8).tolist() == [-8, -1, 7]
    assert raw(T.UINT2, [5], [0b11100100, 0b10]).view(np.uint8).tolist() == [0, 1, 2, 3, 2]
    assert raw(T.INT2, [4], [0b00011011]).astype(np.int8).tolist() == [-1, -2, 1, 0]
    # 6-bit: codes 1, 2, 3, 4, 63 -> bits 000001 000010 000011 000100 111111, LSB first.
    codes = [1, 2, 3, 4, 63]
    stream = sum(c << (6 * i) for i, c in enumerate(codes))
    packed = stream.to_bytes(math.ceil(6 * len(codes) / 8), "little")
    assert raw(T.FLOAT6E2M3, [5], packed).view(np.uint8).tolist() == codes
    # Typed forms: one packed byte per int32_data entry (4/2-bit), one element per entry (6-bit).
    t = TensorProto(name="p", data_type=TensorProto.UINT4, dims=[3], int32_data=[0x21, 0x03])
    assert tensor_to_array(t).view(np.uint8).tolist() == [1, 2, 3]
    t = TensorProto(name="p", data_type=TensorProto.FLOAT6E3M2, dims=[2], int32_data=[63, 5])
    assert tensor_to_array(t).view(np.uint8).tolist() == [63, 5]


def test_padding_bits_are_ignored():
    t = helper.make_tensor("p", TensorProto.UINT4, [1], b"\xf3", raw=True)
    assert tensor_to_array(t).view(np.uint8).tolist() == [3]


def test_float_bit_patterns_survive():
    # NaN payloads, negative zero, subnormals: typed int32_data bit patterns and raw bytes both keep them.
    bits = np.array([0x7C01, 0xFE00, 0x8000, 0x0001, 0x7BFF, 0xFC00], dtype=np.uint16)
    typed = TensorProto(name="h", data_type=TensorProto.FLOAT16, dims=[6], int32_data=bits.tolist())
    assert tensor_to_array(typed).view(np.uint16).tolist() == bits.tolist()
    raw = helper.make_tensor("h", TensorProto.FLOAT16, [6], bits.tobytes(), raw=True)
    assert tensor_to_array(raw).view(np.uint16).tolist() == bits.tolist()


def test_strings_keep_their_exact_text():
    t = TensorProto(name="s", data_type=TensorProto.STRING, dims=[3], string_data=[b"a\x00", "é".encode(), b""])
    got = tensor_to_array(t)
    assert got.dtype == object and got.tolist() == ["a\x00", "é", ""]  # numpy_helper would drop the NUL


def test_tensor_info_fields():
    t = helper.make_tensor("i4", TensorProto.INT4, [3, 5], np.zeros(15, np.int8), raw=False)
    assert tensor_info(t) == TensorInfo("i4", T.INT4, (3, 5), 15, "typed", 15, 8)
    t = helper.make_tensor("f6", TensorProto.FLOAT6E2M3, [5], b"\x00" * 4, raw=True)
    assert tensor_info(t) == TensorInfo("f6", T.FLOAT6E2M3, (5,), 5, "raw", 5, 4)
    t = helper.make_tensor("c", TensorProto.COMPLEX128, [2], [1 + 2j, 3j])
    assert tensor_info(t) == TensorInfo("c", T.COMPLEX128, (2,), 32, "typed", 2, 32)
    t = helper.make_tensor("s", TensorProto.STRING, [2], [b"ab", b"c"])
    assert tensor_info(t).nbytes == 2 * np.dtype(object).itemsize and tensor_info(t).packed_nbytes == 0
    assert tensor_info(TensorProto(name="e", data_type=TensorProto.FLOAT, dims=[0, 4])).storage == "typed"


# --- (c) strictness -------------------------------------------------------------------------------------------


def proto(data_type: int, dims, name: str = "bad", **fields) -> TensorProto:
    tensor = TensorProto(name=name, data_type=data_type, dims=list(dims))
    for key, value in fields.items():
        if key == "raw_data":
            tensor.raw_data = value
        else:
            getattr(tensor, key).extend(value)
    return tensor


def refused(tensor: TensorProto, match: str, error: type[Exception] = TensorProtoError, **kw) -> None:
    with pytest.raises(error, match=match) as info:
        tensor_to_array(tensor, **kw)
    assert isinstance(info.value, DmlBridgeError)
    if tensor.name:
        assert repr(tensor.name) in str(info.value), "the error must name the tensor"


@pytest.mark.parametrize(
    ("data_type", "dims", "nbytes", "need"),
    [
        (TensorProto.FLOAT, [3], 11, 12),
        (TensorProto.FLOAT, [3], 13, 12),
        (TensorProto.FLOAT, [3], 0, 12),
        (TensorProto.DOUBLE, [2, 2], 16, 32),
        (TensorProto.BOOL, [4], 5, 4),
        (TensorProto.COMPLEX64, [2], 8, 16),
        (TensorProto.INT4, [3], 1, 2),
        (TensorProto.INT4, [3], 3, 2),
        (TensorProto.UINT4, [4], 3, 2),
        (TensorProto.UINT2, [5], 1, 2),
        (TensorProto.INT2, [4], 2, 1),
        (TensorProto.FLOAT4E2M1, [1], 0, 1),
        (TensorProto.FLOAT6E2M3, [5], 3, 4),
        (TensorProto.FLOAT6E2M3, [5], 5, 4),
        (TensorProto.FLOAT6E3M2, [4], 4, 3),
        (TensorProto.FLOAT8E4M3FN, [4], 8, 4),
        (TensorProto.FLOAT, [0], 4, 0),
    ],
)
def test_raw_data_must_have_exact_byte_count(data_type, dims, nbytes, need):
    held = f"{nbytes} byte{'' if nbytes == 1 else 's'}"
    refused(proto(data_type, dims, raw_data=b"\x01" * nbytes), f"{held} of raw_data .* need exactly {need}")


@pytest.mark.parametrize(
    ("data_type", "dims", "field", "count", "need"),
    [
        (TensorProto.FLOAT, [3], "float_data", 2, 3),
        (TensorProto.FLOAT, [3], "float_data", 4, 3),
        (TensorProto.COMPLEX64, [2], "float_data", 3, 4),
        (TensorProto.COMPLEX128, [1], "double_data", 1, 2),
        (TensorProto.INT64, [2, 2], "int64_data", 3, 4),
        (TensorProto.UINT64, [1], "uint64_data", 2, 1),
        (TensorProto.UINT32, [2], "uint64_data", 1, 2),
        (TensorProto.INT8, [2], "int32_data", 3, 2),
        (TensorProto.FLOAT16, [2], "int32_data", 1, 2),
        (TensorProto.INT4, [3], "int32_data", 3, 2),
        (TensorProto.INT4, [3], "int32_data", 1, 2),
        (TensorProto.UINT2, [5], "int32_data", 5, 2),
        (TensorProto.FLOAT6E2M3, [5], "int32_data", 4, 5),
        (TensorProto.STRING, [2], "string_data", 1, 2),
    ],
)
def test_typed_field_must_have_exact_entry_count(data_type, dims, field, count, need):
    values = [b"s"] * count if field == "string_data" else [1] * count
    held = f"{count} {'entry' if count == 1 else 'entries'}"
    refused(proto(data_type, dims, **{field: values}), f"{held} in {field} .* need exactly {need}")


@pytest.mark.parametrize(
    ("data_type", "field"),
    [
        (TensorProto.FLOAT, "int32_data"),
        (TensorProto.FLOAT, "double_data"),
        (TensorProto.INT64, "int32_data"),
        (TensorProto.UINT32, "int32_data"),
        (TensorProto.INT32, "int64_data"),
        (TensorProto.FLOAT16, "float_data"),
        (TensorProto.DOUBLE, "float_data"),
        (TensorProto.STRING, "int32_data"),
        (TensorProto.BOOL, "uint64_data"),
    ],
)
def test_values_must_be_in_their_types_field(data_type, field):
    refused(proto(data_type, [1], **{field: [1]}), f"stores its values in {field}")


@pytest.mark.parametrize(
    ("data_type", "field", "bad", "good"),
    [
        (TensorProto.INT8, "int32_data", [128, -129], [-128, 127]),
        (TensorProto.UINT8, "int32_data", [256, -1], [0, 255]),
        (TensorProto.INT16, "int32_data", [32768, -32769], [-32768, 32767]),
        (TensorProto.UINT16, "int32_data", [65536, -1], [0, 65535]),
        (TensorProto.BOOL, "int32_data", [2, -1], [0, 1]),
        (TensorProto.FLOAT16, "int32_data", [65536, -1], [0, 65535]),
        (TensorProto.BFLOAT16, "int32_data", [65536, -1], [0, 65535]),
        (TensorProto.FLOAT8E4M3FN, "int32_data", [256, -1], [0, 255]),
        (TensorProto.FLOAT8E5M2FNUZ, "int32_data", [256, -1], [0, 255]),
        (TensorProto.FLOAT8E8M0, "int32_data", [256, -1], [0, 255]),
        (TensorProto.FLOAT6E2M3, "int32_data", [64, -1], [0, 63]),
        (TensorProto.UINT32, "uint64_data", [2**32, 2**64 - 1], [0, 2**32 - 1]),
    ],
)
def test_typed_entries_must_fit_their_width(data_type, field, bad, good):
    for value in bad:
        refused(proto(data_type, [2], **{field: [good[0], value]}), rf"{field}\[1\] = {value} is outside")
    got = tensor_to_array(proto(data_type, [2], **{field: good}))
    assert_same(got, numpy_helper.to_array(proto(data_type, [2], **{field: good})))


@pytest.mark.parametrize("data_type", [TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT4E2M1, TensorProto.INT2])
def test_packed_bytes_must_fit_a_byte(data_type):
    refused(proto(data_type, [2], int32_data=[256]), r"int32_data\[0\] = 256 is outside 0..255.*packed byte")
    refused(proto(data_type, [2], int32_data=[-1]), r"int32_data\[0\] = -1 is outside")


def test_raw_bool_bytes_must_be_0_or_1():
    refused(proto(TensorProto.BOOL, [3], raw_data=b"\x01\x00\x02"), "byte 2 of its data is 2")
    assert tensor_to_array(proto(TensorProto.BOOL, [2], raw_data=b"\x01\x00")).tolist() == [True, False]


def test_dims():
    refused(proto(TensorProto.FLOAT, [2, -1], float_data=[]), "negative dims")
    refused(proto(TensorProto.FLOAT, [2**62, 2**62, 0]), "more elements than any array can hold")
    refused(proto(TensorProto.UINT8, [2**40, 2**40]), "more elements than any array can hold")
    refused(proto(TensorProto.FLOAT, [2]), r"2 elements\) but no data")
    # Zero-sized tensors with huge other dims are fine while numpy can address them.
    assert tensor_to_array(proto(TensorProto.FLOAT, [2**40, 0])).shape == (2**40, 0)


def test_storage_form_rules():
    refused(proto(TensorProto.FLOAT, [1], raw_data=b"\0" * 4, float_data=[1.0]), "more than one place")
    refused(proto(TensorProto.FLOAT, [1], float_data=[1.0], int32_data=[1]), "more than one place")
    both = proto(TensorProto.FLOAT, [1], raw_data=b"\0" * 4)
    both.data_location = TensorProto.EXTERNAL
    both.external_data.add(key="location", value="w.bin")
    refused(both, "more than one place")
    stale = proto(TensorProto.FLOAT, [1], float_data=[1.0])
    stale.external_data.add(key="location", value="w.bin")
    refused(stale, "data_location is not EXTERNAL")
    refused(proto(TensorProto.STRING, [1], raw_data=b"a"), "STRING tensor in raw_data")
    ext_string = proto(TensorProto.STRING, [1])
    ext_string.data_location = TensorProto.EXTERNAL
    ext_string.external_data.add(key="location", value="s.bin")
    refused(ext_string, "STRING tensor in external data")


def test_types_and_segments():
    refused(proto(TensorProto.UNDEFINED, [1], raw_data=b"\0"), "UNDEFINED")
    for code in (29, 1000, -1):
        refused(proto(code, [1], raw_data=b"\0"), f"unknown data_type {code}", UnsupportedTypeError)
    segmented = proto(TensorProto.FLOAT, [1], float_data=[1.0])
    segmented.segment.begin, segmented.segment.end = 0, 1
    refused(segmented, "segments")


def test_bad_utf8():
    refused(proto(TensorProto.STRING, [2], string_data=[b"ok", b"\xff\xfe"]), "not valid UTF-8")
    named = proto(TensorProto.FLOAT, [2], name="NAME", float_data=[1.0])
    hostile = TensorProto()
    hostile.ParseFromString(named.SerializeToString().replace(b"NAME", b"N\xffME"))
    with pytest.raises(TensorProtoError, match=r"N\\\\xffME"):
        tensor_to_array(hostile)
    assert tensor_info(proto(TensorProto.FLOAT, [1], float_data=[1.0])).name == "bad"


def test_arguments():
    with pytest.raises(InvalidArgumentError, match=r"onnx\.TensorProto"):
        tensor_to_array(np.zeros(3))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        tensor_info(b"\x08\x01")  # type: ignore[arg-type]
    ok = proto(TensorProto.FLOAT, [1], float_data=[1.0])
    for limit in (-1, 1.5, True, "10"):
        with pytest.raises(InvalidArgumentError, match="max_tensor_bytes"):
            tensor_to_array(ok, max_tensor_bytes=limit)  # type: ignore[arg-type]
    from dmlbridge.onnx.external_data import ExternalDataReader

    with pytest.raises(InvalidArgumentError, match="reader"):
        tensor_to_array(ok, ".", reader=ExternalDataReader("."))


def test_max_tensor_bytes():
    assert DEFAULT_MAX_TENSOR_BYTES == 16 * 2**30
    t = proto(TensorProto.FLOAT, [100], float_data=[0.0] * 100)
    refused(t, "needs 400 bytes .* max_tensor_bytes=399", TensorTooLargeError, max_tensor_bytes=399)
    assert tensor_to_array(t, max_tensor_bytes=400).shape == (100,)
    # Sub-byte types count their unpacked size (one byte per element).
    t = proto(TensorProto.INT4, [10], raw_data=b"\0" * 5)
    refused(t, "needs 10 bytes", TensorTooLargeError, max_tensor_bytes=9)
    # The default refuses a (consistent) 32 GiB external claim before looking for the file.
    big = proto(TensorProto.FLOAT, [8 * 2**30])
    big.data_location = TensorProto.EXTERNAL
    big.external_data.add(key="location", value="nowhere.bin")
    big.external_data.add(key="length", value=str(32 * 2**30))
    refused(big, "pass a larger max_tensor_bytes", TensorTooLargeError)


def test_claims_fail_cheaply():
    # 2**40 elements with 10 bytes of data fail on the count check, before anything of the claimed size exists:
    # every allocation traced (numpy's too), the peak stays far below a MiB.
    claims = [
        proto(TensorProto.FLOAT, [2**40], raw_data=b"\0" * 10),
        proto(TensorProto.UINT4, [2**40], raw_data=b"\0" * 10),
        proto(TensorProto.FLOAT16, [2**20, 2**20], int32_data=[0] * 10),
        proto(TensorProto.STRING, [2**40], string_data=[b"x"] * 10),
    ]
    tracemalloc.start()
    try:
        for t in claims:
            with pytest.raises(TensorProtoError, match="need exactly"):
                tensor_to_array(t, max_tensor_bytes=2**62)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def test_external_needs_base_dir():
    t = proto(TensorProto.FLOAT, [1])
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="w.bin")
    refused(t, "base_dir", ExternalDataError)


# --- (d) no allocation on a claim, under an address-space limit ---------------------------------------------


CHILD = ADDRESS_SPACE_LIMIT + textwrap.dedent(
    """
    import os, resource, sys
    import numpy as np
    from onnx import TensorProto
    from dmlbridge.errors import TensorProtoError, TensorTooLargeError, ExternalDataError
    from dmlbridge.onnx.tensor_proto import tensor_to_array

    base = sys.argv[1]

    def case(label, tensor, **kw):
        try:
            tensor_to_array(tensor, base, **kw)
        except (TensorProtoError, TensorTooLargeError) as exc:
            print(label, type(exc).__name__)
        else:
            sys.exit(label + ": decoded?")

    n = 2**40
    t = TensorProto(name="raw", data_type=TensorProto.FLOAT, dims=[n], raw_data=b"0123456789")
    case("raw", t)
    case("raw-unlimited", t, max_tensor_bytes=2**62)
    t = TensorProto(name="typed", data_type=TensorProto.INT8, dims=[n], int32_data=list(range(10)))
    case("typed-unlimited", t, max_tensor_bytes=2**62)
    t = TensorProto(name="int4", data_type=TensorProto.INT4, dims=[n], raw_data=b"0123456789")
    case("int4-unlimited", t, max_tensor_bytes=2**62)
    for length in (None, 4 * n):
        t = TensorProto(name="ext", data_type=TensorProto.FLOAT, dims=[n])
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value="ten.bin")
        if length is not None:
            t.external_data.add(key="length", value=str(length))
        case(f"external-{length}", t)
        case(f"external-{length}-unlimited", t, max_tensor_bytes=2**62)
    print("ok")
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced reliably on Linux")
def test_no_allocation_on_a_claim_under_rlimit_as(tmp_path):
    (tmp_path / "ten.bin").write_bytes(b"0123456789")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MemoryError" not in result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "ok"
    # Raw and typed claims fail the count check; external ones the size limit, or (limit raised) the file's size.
    assert dict(line.split() for line in lines[:-1]) == {
        "raw": "TensorProtoError",
        "raw-unlimited": "TensorProtoError",
        "typed-unlimited": "TensorProtoError",
        "int4-unlimited": "TensorProtoError",
        "external-None": "TensorTooLargeError",
        "external-None-unlimited": "ExternalDataError",
        f"external-{4 * 2**40}": "TensorTooLargeError",
        f"external-{4 * 2**40}-unlimited": "ExternalDataError",
    }


# --- (e) bounded fuzzing: only DmlBridgeErrors escape -------------------------------------------------------


def _seed_tensors() -> list[bytes]:
    rng = np.random.default_rng(7)
    seeds = []
    for onnx_type in VALUED_TYPES:
        values = sample(onnx_type, (3, 2), rng)
        seeds.append(helper.make_tensor("f", int(onnx_type), (3, 2), values.flatten()).SerializeToString())
        if onnx_type is not T.STRING:
            seeds.append(helper.make_tensor("r", int(onnx_type), (3, 2), values, raw=True).SerializeToString())
    return seeds


SEEDS = _seed_tensors()


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(SEEDS), edits=EDITS)
def test_fuzz_mutated_tensors(seed, edits):
    tensor = TensorProto()
    try:
        tensor.ParseFromString(mutate_bytes(seed, edits))
    except Exception:  # noqa: BLE001 - not a message at all
        return
    _decode_only_dmlbridge_errors(tensor)


@settings(max_examples=examples(300), deadline=None)
@given(
    data_type=st.integers(-3, 40),
    dims=st.lists(st.one_of(st.integers(-3, 9), st.sampled_from([2**31, 2**40, 2**62, 2**63 - 1])), max_size=4),
    raw=st.one_of(st.none(), st.binary(max_size=64)),
    field=st.sampled_from(["float_data", "int32_data", "int64_data", "uint64_data", "double_data", "string_data"]),
    count=st.integers(0, 12),
    value=st.integers(-(2**31), 2**31 - 1),
    name=st.sampled_from([b"fuzz", b"", b"\xff\xfe", b"w\xc3", "权重".encode(), b"x" * 300]),
    external=st.one_of(st.none(), st.lists(st.tuples(
        st.sampled_from(["location", "offset", "length", "checksum", "other"]),
        st.sampled_from(["w.bin", "../w.bin", "/etc/passwd", "0", "-1", "4", "9" * 30, "", "0" * 40])), max_size=4)),
)
# FLOAT16 values in float_data (none here): where numpy_helper quiets NaNs, the comparison quiets float16 ones too
@example(data_type=10, dims=[0], raw=None, field="float_data", count=0, value=0, name=b"fuzz", external=None)
def test_fuzz_random_tensors(data_type, dims, raw, field, count, value, name, external):
    tensor = TensorProto(name=_PLACEHOLDER, data_type=data_type, dims=dims)
    if external is not None:
        tensor.data_location = TensorProto.EXTERNAL
        for key, entry_value in external:
            tensor.external_data.add(key=key, value=entry_value)
    if raw is not None:
        tensor.raw_data = raw
    container = getattr(tensor, field)
    if field == "string_data":
        container.extend([bytes([value & 0xFF])] * count)
    elif field == "uint64_data":
        container.extend([value % 2**64] * count)
    else:
        container.extend([value] * count)
    # Names that are not UTF-8 can only come from the wire: swap the placeholder's bytes in the serialized form.
    field = b"\x42" + bytes([len(_PLACEHOLDER)]) + _PLACEHOLDER.encode()
    data = tensor.SerializeToString()
    assert data.count(field) == 1
    tensor = TensorProto()
    tensor.ParseFromString(data.replace(field, b"\x42" + _varint(len(name)) + name))
    _decode_only_dmlbridge_errors(tensor)


_PLACEHOLDER = "name-placeholder-7f3a9c21"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _numpy_helper_keeps_signaling_nans() -> bool:
    """Whether numpy_helper gives back the bits of a signaling NaN stored in ``float_data`` (with protobuf 7; with
    protobuf 6 the values pass through Python floats, which quiets them: a fuzzed message may hold one)."""
    snan = bytes.fromhex("0100807f")  # float32 0x7f800001
    tensor = TensorProto()
    tensor.ParseFromString(TensorProto(data_type=TensorProto.FLOAT, dims=[1]).SerializeToString() + b"\x22\x04" + snan)
    return numpy_helper.to_array(tensor).tobytes() == snan


NUMPY_HELPER_KEEPS_SIGNALING_NANS = _numpy_helper_keeps_signaling_nans()


def _quieted(values: np.ndarray) -> np.ndarray:
    """``values`` (float16, float32, float64 or complex) with each NaN made quiet, as a conversion to a Python float
    does: the top bit of the fraction set (bit 9, 22 or 51), in the integers of the values' own width."""
    parts = values.view(values.real.dtype) if values.dtype.kind == "c" else values
    bits = parts.view(f"<u{parts.dtype.itemsize}").copy()
    quiet_bit = {2: 9, 4: 22, 8: 51}[parts.dtype.itemsize]
    bits[np.isnan(parts)] |= np.array(1 << quiet_bit, bits.dtype)
    return bits.view(parts.dtype).view(values.dtype)


def _decode_only_dmlbridge_errors(tensor: TensorProto) -> None:
    try:
        info = tensor_info(tensor)
        got = tensor_to_array(tensor, max_tensor_bytes=1 << 24)
    except DmlBridgeError:
        return
    assert got.shape == info.shape and got.dtype == info.onnx_type.numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ref = numpy_helper.to_array(tensor)
        except Exception:  # noqa: BLE001 - we accepted what onnx refuses: only allowed when both agree below
            pytest.fail(f"decoded a tensor numpy_helper refuses: {tensor}")
    if ref.dtype == object:  # numpy_helper drops trailing NULs; dmlbridge keeps them
        assert [v.rstrip("\x00") for v in got.flat] == list(ref.flat)
    elif info.storage == "typed" and got.dtype.kind in "fc" and not NUMPY_HELPER_KEEPS_SIGNALING_NANS:
        # (float_data and double_data: dmlbridge keeps the stored bits; this numpy_helper has quieted any sNaN)
        assert_same(_quieted(got), ref, "fuzz")
    else:
        assert_same(got, ref, "fuzz")


def test_onnx_corpus_encodes_like_the_reference(corpus):
    """Every corpus tensor dmlbridge can prepare gives the bytes and desc of the per-element reference encoder
    (tests/helpers/reference.py, which shares no code with dmlbridge); the ones it refuses, the reference refuses too.
    Large tensors are cut to their first 1024 elements: the reference is deliberately slow."""
    checked, refused, mismatches = 0, 0, []
    for label, tensor in corpus:
        try:
            array = numpy_helper.to_array(tensor)
        except Exception:  # noqa: BLE001 - onnx cannot decode it either
            continue
        if array.dtype.kind in "OUSc":
            continue
        if array.size > 1024:
            array = np.ascontiguousarray(array.reshape(-1)[:1024])
            tensor = numpy_helper.from_array(array, tensor.name)
        try:
            want = ref.prepare(array)
        except ref.RefError as exc:
            with pytest.raises(DmlBridgeError):
                dmlbridge.prepare(tensor)
            refused += 1
            assert type(exc).__name__ in ("LayoutError", "UnsupportedTypeError"), label
            continue
        got = dmlbridge.prepare(tensor)
        fields = (int(got.dml_type), got.conversion, list(got.sizes), got.total_tensor_size_in_bytes)
        if fields != (want["dml_type"], want["conversion"], list(want["sizes"]), want["total_tensor_size_in_bytes"]):
            mismatches.append(f"{label}: desc {fields}")
        elif got.data.tobytes() != want["data"]:
            mismatches.append(f"{label}: bytes differ")
        checked += 1
    assert not mismatches, f"{len(mismatches)} of {checked} differ, e.g. {mismatches[:5]}"
    assert checked > 8000 and refused < 200, (checked, refused)
