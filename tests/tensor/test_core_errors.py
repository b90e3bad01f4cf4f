"""Every error path of the core raises a DmlBridgeError subclass whose message says what was wrong."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from builders import model_of
from onnx import numpy_helper

import dmlbridge
from dmlbridge import (
    DestinationError,
    DmlBridgeError,
    InvalidArgumentError,
    LayoutError,
    Target,
    TensorTooLargeError,
    UnsupportedTypeError,
    ValueRangeError,
)


def tiny_model() -> onnx.ModelProto:
    """One FLOAT initializer "w" of shape [2]."""
    w = numpy_helper.from_array(np.array([1.5, -2.0], np.float32), "w")
    return model_of([w])


NO_64 = Target(supported={"FLOAT32", "FLOAT16", "UINT32", "UINT16", "UINT8", "INT32", "INT16", "INT8"})


def test_every_error_is_a_dmlbridge_error() -> None:
    for name in dmlbridge.__all__:
        obj = getattr(dmlbridge, name)
        if isinstance(obj, type) and issubclass(obj, Warning):
            assert issubclass(obj, UserWarning), name  # (a warning, never raised: shown unless filtered out)
        elif isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, DmlBridgeError), name


@pytest.mark.parametrize(
    ("shape", "target", "words"),
    [
        ((1,) * 9, Target(), "1 to 8 dimensions"),
        ((1,) * 6, Target(feature_level="2.1"), "1 to 5 dimensions"),
        ((2, 0, 3), Target(), "no empty tensors"),
    ],
)
def test_dimension_rules(shape: tuple[int, ...], target: Target, words: str) -> None:
    with pytest.raises(LayoutError, match=words):
        dmlbridge.prepare(np.zeros(shape, np.float32), target=target)


def test_more_than_uint32_elements_fails_before_allocating() -> None:
    huge = np.broadcast_to(np.float32(0), (2**16, 2**16 + 1))  # a view: no memory behind it
    with pytest.raises(LayoutError, match="at most 2\\^32 - 1"):
        dmlbridge.prepare(huge)
    with pytest.raises(LayoutError, match="does not fit UINT32"):
        dmlbridge.calc_buffer_tensor_size(dmlbridge.DmlDataType.UINT8, [2**32])


@pytest.mark.parametrize(
    ("strides", "words"),
    [
        ([2**32, 1], "outside UINT32"),
        ([-1, 1], "cannot be negative"),
        ([1], "1 stride \\[1\\] for sizes"),
        ([1.5, 1], "whole numbers"),
        ("ab", "sequence of whole numbers"),
    ],
)
def test_bad_strides(strides: object, words: str) -> None:
    with pytest.raises(LayoutError, match=words):
        dmlbridge.prepare(np.zeros((2, 3), np.float32), strides=strides)  # type: ignore[arg-type]


def test_broadcast_positions_must_agree() -> None:
    ok = dmlbridge.prepare(np.array([[1, 2], [1, 2]], np.int8), strides=[0, 1])
    assert ok.data.tobytes() == b"\x01\x02\x00\x00"
    with pytest.raises(LayoutError, match="share its position"):
        dmlbridge.prepare(np.array([[1, 2], [1, 3]], np.int8), strides=[0, 1])
    with pytest.raises(LayoutError, match="share its position"):
        dmlbridge.prepare(np.array([[1, 2], [1, 3]], ml_dtypes.int4), strides=[0, 1])


@pytest.mark.parametrize("min_dims", [9, -1, 2.0, True])
def test_bad_min_dims(min_dims: object) -> None:
    with pytest.raises(LayoutError, match="min_dims"):
        dmlbridge.prepare(np.zeros(3, np.float32), min_dims=min_dims)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "array",
    [
        np.array(["a", "b"]),
        np.array([1 + 2j], np.complex64),
        np.array([1 + 2j], np.complex128),
        np.array(["2020-01-01"], "datetime64[D]"),
        np.zeros(2, np.longdouble) if np.dtype(np.longdouble).itemsize > 8 else np.zeros(2, "V3"),
    ],
)
def test_types_with_no_directml_form(array: np.ndarray) -> None:
    with pytest.raises(UnsupportedTypeError) as info:
        dmlbridge.prepare(array)
    assert str(array.dtype) in str(info.value) or "ONNX" in str(info.value)


def test_unsupported_onnx_types_in_dml_type_for() -> None:
    for name in ("UNDEFINED", "STRING", "COMPLEX64", "COMPLEX128"):
        with pytest.raises(UnsupportedTypeError, match=name):
            dmlbridge.dml_type_for(name)
    with pytest.raises(UnsupportedTypeError, match="unknown ONNX data type 99"):
        dmlbridge.dml_type_for(99)


def test_double_without_float64_needs_allow_lossy() -> None:
    with pytest.raises(UnsupportedTypeError, match="allow_lossy=True"):
        dmlbridge.prepare(np.array([0.1]), target=NO_64)
    lossy = dmlbridge.prepare(np.array([0.1]), target=Target(supported=NO_64.types, allow_lossy=True))
    assert lossy.conversion == "lossy" and lossy.data.view("<f4")[0] == np.float32(0.1)


@pytest.mark.parametrize("mode", ["emulate", "narrow"])
@pytest.mark.parametrize(
    ("values", "words"),
    [
        (np.array([0, 2**31], np.int64), "value 2147483648 at index \\[1\\] does not fit INT32"),
        (np.array([[0], [-(2**31) - 1]], np.int64), "value -2147483649 at index \\[1, 0\\] does not fit INT32"),
        (np.array([2**32], np.uint64), "value 4294967296 at index \\[0\\] does not fit UINT32"),
    ],
)
def test_int64_that_does_not_fit_32_bits(mode: str, values: np.ndarray, words: str) -> None:
    target = Target(supported=NO_64.types, int64=mode)  # type: ignore[arg-type]
    with pytest.raises(ValueRangeError, match=words):
        dmlbridge.prepare(values, target=target)
    with pytest.raises(ValueRangeError, match=words):
        dmlbridge.prepare_into(bytearray(64), 0, values, target=target)


def test_prepare_into_destination_checks() -> None:
    values = np.arange(4, dtype=np.float32)
    with pytest.raises(DestinationError, match="read-only"):
        dmlbridge.prepare_into(bytes(64), 0, values)
    readonly = np.zeros(64, np.uint8)
    readonly.flags.writeable = False
    with pytest.raises(DestinationError, match="read-only"):
        dmlbridge.prepare_into(readonly, 0, values)
    with pytest.raises(DestinationError, match="needs 16 at offset 16"):
        dmlbridge.prepare_into(bytearray(31), 16, values)
    with pytest.raises(DestinationError, match="multiple of 16"):
        dmlbridge.prepare_into(bytearray(64), 8, values)
    with pytest.raises(DestinationError, match="multiple of 64"):
        dmlbridge.prepare_into(bytearray(256), 16, values, guaranteed_base_offset_alignment=64)
    with pytest.raises(DestinationError, match="writable buffer"):
        dmlbridge.prepare_into(object(), 0, values)
    with pytest.raises(DestinationError, match="overlaps"):
        dmlbridge.prepare_into(values, 0, values[:2])
    # A destination that fits exactly, at an offset that is a multiple of the guaranteed alignment.
    buf = bytearray(b"\xee" * 96)
    t = dmlbridge.prepare_into(buf, 64, values[:3], guaranteed_base_offset_alignment=32)
    assert bytes(buf[:64]) == b"\xee" * 64 and bytes(buf[76:]) == b"\xee" * 20
    assert bytes(buf[64:76]) == values[:3].tobytes() and t.total_tensor_size_in_bytes == 12
    assert np.shares_memory(t.data, np.frombuffer(buf, np.uint8))


@pytest.mark.parametrize(("alignment", "dtype"), [(3, np.float32), (2, np.float32), (-16, np.int8), (2**33, np.int8)])
def test_bad_guaranteed_base_offset_alignment(alignment: int, dtype: type) -> None:
    with pytest.raises(InvalidArgumentError, match="power of two"):
        dmlbridge.prepare(np.zeros(2, dtype), guaranteed_base_offset_alignment=alignment)


@pytest.mark.parametrize("flags", [2, -1, True, 1.0])
def test_bad_flags(flags: object) -> None:
    with pytest.raises(InvalidArgumentError, match="OWNED_BY_DML"):
        dmlbridge.prepare(np.zeros(2, np.float32), flags=flags)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (np.array([0, 9], np.int8), "value 9 at flat index 1 does not fit INT4"),
        (np.array([-9], np.int32), "value -9 at flat index 0 does not fit INT4"),
        (np.array([3, 16], np.uint8), "value 16 at flat index 1 does not fit UINT4"),
        (np.array([0] * (2**20 + 5) + [100], np.int16), f"value 100 at flat index {2**20 + 5} does not fit INT4"),
    ],
)
def test_pack_4bit_never_wraps(values: np.ndarray, words: str) -> None:
    with pytest.raises(ValueRangeError, match=words):
        dmlbridge.pack_4bit(values)


def test_pack_and_unpack_argument_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="takes integers"):
        dmlbridge.pack_4bit(np.array([1.0]))
    with pytest.raises(InvalidArgumentError, match="needs 3 bytes"):
        dmlbridge.unpack_4bit(b"\x21\x43", 5, signed=False)
    with pytest.raises(InvalidArgumentError, match="non-negative"):
        dmlbridge.unpack_4bit(b"\x21", -1, signed=False)
    with pytest.raises(InvalidArgumentError, match="bytes-like"):
        dmlbridge.unpack_4bit(12, 1, signed=False)


def test_decode_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="reaches 12"):
        dmlbridge.decode(b"\0" * 8, "FLOAT32", [3])
    with pytest.raises(InvalidArgumentError, match="reaches 3"):
        dmlbridge.decode(b"\0" * 2, "UINT4", [5])
    with pytest.raises(UnsupportedTypeError, match="UNKNOWN"):
        dmlbridge.decode(b"\0" * 4, 0, [1])
    with pytest.raises(UnsupportedTypeError, match="unknown DirectML data type 'BOOL'"):
        dmlbridge.decode(b"\0" * 4, "BOOL", [1])
    with pytest.raises(LayoutError, match="no empty tensors"):
        dmlbridge.decode(b"\0" * 4, "UINT8", [0])


def test_target_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="feature level"):
        Target(feature_level="7.0")
    with pytest.raises(InvalidArgumentError, match="'emulate', 'narrow' or 'saturate'"):
        Target(int64="truncate")  # type: ignore[arg-type]
    with pytest.raises(UnsupportedTypeError, match="unknown DirectML data type 'BFLOAT16'"):
        Target(supported={"BFLOAT16"})
    with pytest.raises(InvalidArgumentError, match="not the string"):
        Target(supported="FLOAT32")
    with pytest.raises(InvalidArgumentError, match=r"dmlbridge\.Target"):
        dmlbridge.prepare(np.zeros(1), target="6.4")  # type: ignore[arg-type]


def test_nothing_the_caller_passed_is_modified() -> None:
    source = np.array([[1, -2, 3], [4, 5, -6]], dtype=">i8")[:, ::-1]
    before = (source.tobytes(), source.flags.writeable, source.strides)
    for target in (Target(), NO_64, Target(supported=NO_64.types, int64="narrow")):
        t = dmlbridge.prepare(source, target=target, strides=[1, 2], min_dims=4)
        assert np.array_equal(t.to_numpy(), source)
    assert (source.tobytes(), source.flags.writeable, source.strides) == before
    sizes, strides = [2, 3], [3, 1]
    dmlbridge.calc_buffer_tensor_size("INT4", sizes, strides)
    assert sizes == [2, 3] and strides == [3, 1]


def test_numpy_integer_min_dims_below_the_targets_fewest_is_refused() -> None:
    """A numpy integer is checked like an int: below feature level 3.0 fewer than 4 dimensions is refused."""
    x = np.zeros(3, np.float32)
    for value in (1, np.int64(1), np.uint8(3)):
        with pytest.raises(InvalidArgumentError, match=r"min_dims=.* is below the 4 dimensions"):
            dmlbridge.prepare(x, target=Target("2.0"), min_dims=value)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match=r"min_dims=.* is below the 4 dimensions"):
            dmlbridge.plan_model(tiny_model(), target=Target("2.0"), min_dims=value)  # type: ignore[arg-type]
    assert dmlbridge.prepare(x, target=Target("2.0"), min_dims=np.int64(5)).sizes == (1, 1, 1, 1, 3)
    assert dmlbridge.plan_model(tiny_model(), min_dims=np.int64(2)).entries["w"].sizes == (1, 2)  # type: ignore[arg-type]


@pytest.mark.parametrize("flags", [2, -1, True, 1.0, "OWNED_BY_DML", None])
def test_bad_flags_are_refused_the_same_everywhere(flags: object) -> None:
    with pytest.raises(InvalidArgumentError, match="flags must be 0"):
        dmlbridge.prepare(np.zeros(2, np.float32), flags=flags)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="flags must be 0"):
        dmlbridge.check_conversion(tiny_model(), flags=flags)  # type: ignore[arg-type]


def test_flags_by_name_and_numpy_integer() -> None:
    assert dmlbridge.prepare(np.zeros(2, np.float32), flags="owned-by-dml").flags == 1  # type: ignore[arg-type]
    assert dmlbridge.prepare(np.zeros(2, np.float32), flags=np.uint32(1)).flags == 1  # type: ignore[arg-type]
    assert dmlbridge.check_conversion(tiny_model(), flags="owned-by-dml").entries["w"].flags == 1


def test_a_value_that_does_not_fit_32_bits_is_named_by_its_own_index() -> None:
    """The index is in the caller's array, not in the padded layout."""
    narrow = Target("2.0", int64="narrow")
    with pytest.raises(ValueRangeError, match=r"value 1099511627776 at index \[1, 0\] does not fit INT32"):
        dmlbridge.prepare(np.array([[1], [2**40]], np.int64), target=narrow)
    with pytest.raises(ValueRangeError, match=r"value 1099511627776 at index \[\] does not fit INT32"):
        dmlbridge.prepare(np.array(2**40, np.int64), target=Target("2.0"))


def test_check_conversion_refuses_what_convert_model_refuses_up_front() -> None:
    with pytest.raises(TensorTooLargeError, match="upload image would take"):
        dmlbridge.check_conversion(tiny_model(), max_output_bytes=4)
    with pytest.raises(InvalidArgumentError, match="max_manifest_bytes=10 "):
        dmlbridge.check_conversion(tiny_model(), max_manifest_bytes=10)
    with pytest.raises(InvalidArgumentError, match="strict must be True or False"):
        dmlbridge.plan_model(tiny_model(), strict="no")  # type: ignore[arg-type]
