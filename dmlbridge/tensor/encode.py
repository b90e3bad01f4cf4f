"""Array -> DirectML buffer tensor: the type conversion, the layout and the bytes, in one pass.

Data flows one way: source array -> (mapping) DML type -> (layout) sizes, strides, size -> bytes written straight
into the output. A native, packed, little-endian source whose byte count needs no padding is not copied at all.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from dmlbridge.errors import (
    DestinationError,
    ExternalDataError,
    InvalidArgumentError,
    LayoutError,
    UnsupportedTypeError,
    ValueRangeError,
    counted,
)
from dmlbridge.onnx.tensor_proto import tensor_to_array
from dmlbridge.system.bytes_view import as_writable_bytes
from dmlbridge.tensor.decode import decode, read_elements, restore_values
from dmlbridge.tensor.descs import BufferDescMethods, BufferTensorDesc, check_flags
from dmlbridge.tensor.layout import Layout, buffer_bytes, emulated_int64, make_layout
from dmlbridge.types.data_types import DmlDataType, OnnxDataType, onnx_type_of_dtype
from dmlbridge.types.float_bits import cast, cast_into
from dmlbridge.types.mapping import Conversion, resolve
from dmlbridge.types.nibbles import pack_nibbles_into, to_nibbles
from dmlbridge.types.target import Target

__all__ = ["ElementWriter", "PreparedTensor", "element_writer", "prepare", "prepare_into"]

DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT = 16
_DEFAULT_TARGET = Target()


@dataclass(frozen=True, eq=False)
class PreparedTensor(BufferDescMethods):
    """A tensor ready for DirectML: its DML_BUFFER_TENSOR_DESC fields and the exact bytes to upload.

    ``data`` is a uint8 array of ``total_tensor_size_in_bytes`` bytes: every padding byte and unreached position
    is zero. For ``prepare_into`` it is a view into the destination; for a zero-copy ``prepare`` it is a read-only
    view of the source.

    Example:
        >>> import dmlbridge, numpy as np
        >>> t = dmlbridge.prepare(np.array([1.0, 2.0], dtype=np.float16))
        >>> t.dml_type.name, t.total_tensor_size_in_bytes, t.data.tobytes().hex()
        ('FLOAT16', 4, '003c0040')
        >>> t.to_numpy()
        array([1., 2.], dtype=float16)
    """

    onnx_type: OnnxDataType
    conversion: Conversion
    buffer_desc: BufferTensorDesc
    """The DML_BUFFER_TENSOR_DESC fields (``dml_type``, ``sizes``, ``strides``, ... read them by name)."""
    data: np.ndarray = field(repr=False)
    source_dtype: np.dtype = field(repr=False)
    source_shape: tuple[int, ...] = field(repr=False)
    # Logical element strides (not doubled for int64 emulation); None when packed without given strides.
    element_strides: tuple[int, ...] | None = field(repr=False)
    clamped: int = 0
    """How many values ``"saturate"`` clamped to the 32-bit range (0 for every other conversion)."""

    def to_numpy(self) -> np.ndarray:
        """The original logical values read back from ``data``: source dtype (native byte order), source shape."""
        target = self.source_dtype.newbyteorder("=")
        if self.conversion == "emulate":
            wide = np.dtype("<i8") if self.onnx_type is OnnxDataType.INT64 else np.dtype("<u8")
            values = read_elements(self.data, wide, self.sizes, self.element_strides)
        else:
            values = decode(self.data, self.dml_type, self.sizes, self.strides)
        return restore_values(values, target).reshape(self.source_shape)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """``np.asarray(tensor)``: its values as :meth:`to_numpy` gives them, as ``dtype`` when one is asked for.
        They are decoded from ``data``, a new array every time: ``copy=False`` (numpy 2's "never copy") raises
        InvalidArgumentError (a ValueError, as numpy asks of an object that cannot give its values without a
        copy).

        Example:
            >>> import dmlbridge, numpy as np
            >>> np.asarray(dmlbridge.prepare(np.array([1.5, -2.0], np.float16)), dtype=np.float32)
            array([ 1.5, -2. ], dtype=float32)
        """
        if copy is False:
            raise InvalidArgumentError("a PreparedTensor's values are decoded from its bytes, so they cannot be given "
                                       "without a copy: use np.asarray(tensor) (copy=None), or tensor.data for the "
                                       "bytes themselves")
        values = self.to_numpy()
        return values if dtype is None else values.astype(dtype, copy=False)



@dataclass(frozen=True)
class _Encoding:
    """Everything decided before a byte is written."""

    source: np.ndarray  # the source with the layout's leading 1s added (a view)
    onnx_type: OnnxDataType
    dml_type: DmlDataType
    conversion: Conversion
    layout: Layout
    element: np.dtype | None  # the element dtype written, None for 4-bit
    desc_strides: tuple[int, ...] | None
    total: int
    flags: int
    alignment: int
    source_dtype: np.dtype
    source_shape: tuple[int, ...]

    def result(self, data: np.ndarray) -> PreparedTensor:
        clamped = _count_outside_32(self.source, self.onnx_type) if self.conversion == "saturate" else 0
        return PreparedTensor(
            self.onnx_type,
            self.conversion,
            BufferTensorDesc(self.dml_type, self.flags, self.layout.sizes, self.desc_strides, self.total,
                             self.alignment),
            data,
            self.source_dtype,
            self.source_shape,
            self.layout.strides,
            clamped,
        )


def _as_array(array: Any) -> np.ndarray:
    if isinstance(array, np.ndarray):
        return array
    if type(array).__name__ == "TensorProto":  # onnx's class, matched by name: no onnx import needed here
        if array.data_location == 1:  # EXTERNAL: only the caller knows the model's directory
            raise ExternalDataError(
                f"tensor {array.name!r} keeps its values in external data; read it with "
                "dmlbridge.tensor_to_array(tensor, base_dir=<the model's directory>) and prepare that array"
            )
        return tensor_to_array(array)
    try:
        return np.asarray(array)
    except Exception as exc:  # noqa: BLE001 - numpy raises many types for unconvertible objects
        raise InvalidArgumentError(
            f"cannot read a {type(array).__name__} as an array ({exc}); pass a numpy array or a TensorProto"
        ) from None


def _plan(
    array: Any,
    target: Target,
    strides: Sequence[int] | None,
    min_dims: int | None,
    flags: int,
    guaranteed_base_offset_alignment: int,
) -> _Encoding:
    if not isinstance(target, Target):
        raise InvalidArgumentError(f"target must be a dmlbridge.Target, got {type(target).__name__}")
    source = _as_array(array)
    onnx_type = onnx_type_of_dtype(source.dtype)
    row = resolve(onnx_type, target)
    if row.dml_type is None:
        raise UnsupportedTypeError(
            f"cannot prepare an array of dtype {source.dtype} (ONNX {row.onnx_name}): {row.reason}"
        )
    dml = row.dml_type
    if source.size == 0:
        raise LayoutError(
            f"the array has shape {source.shape} and no elements; DirectML has no empty tensors, leave it out"
        )
    min_dims = target.check_min_dims(min_dims, LayoutError)
    layout = make_layout(source.shape, strides, min_dims, target.max_dimension_count)
    flags = check_flags(flags)
    alignment = guaranteed_base_offset_alignment
    if (
        isinstance(alignment, bool)
        or not isinstance(alignment, (int, np.integer))
        or alignment < 0
        or (alignment and (alignment & (alignment - 1) or alignment < dml.itemsize))
        or alignment > 2**32 - 1
    ):
        raise InvalidArgumentError(
            f"guaranteed_base_offset_alignment must be 0 or a power of two >= the {dml.name} element size "
            f"({counted(dml.itemsize, 'byte')}), got {alignment!r}; DirectML recommends 32 or more"
        )
    desc_strides: tuple[int, ...] | None
    if row.conversion == "emulate":
        desc_strides, total = emulated_int64(layout)
        element: np.dtype | None = np.dtype("<i8" if onnx_type is OnnxDataType.INT64 else "<u8")
    else:
        desc_strides, total = layout.strides, buffer_bytes(dml, layout.span)
        element = None if dml.bitwidth == 4 else dml.numpy()
    padded = source.reshape(1) if source.ndim == 0 else source
    padded = padded[(np.newaxis,) * (len(layout.sizes) - padded.ndim)]
    return _Encoding(
        padded, onnx_type, dml, row.conversion, layout, element, desc_strides, total, int(flags), int(alignment),
        source.dtype, source.shape,
    )


def _can_share(plan: _Encoding) -> bool:
    """True when the source's bytes are already the buffer: no conversion, no gaps, no padding, no swap."""
    source = plan.source
    return (
        plan.conversion in ("native", "emulate")
        and plan.element is not None
        and plan.layout.packed
        and source.flags.c_contiguous
        and (source.dtype.byteorder == "<" or (source.dtype.byteorder in "=|" and np.little_endian))
        and source.nbytes == plan.total
    )


def prepare(
    array: Any,
    *,
    target: Target = _DEFAULT_TARGET,
    strides: Sequence[int] | None = None,
    min_dims: int | None = None,
    flags: int = 0,
    guaranteed_base_offset_alignment: int = 0,
) -> PreparedTensor:
    """Turn a numpy array (any ONNX dtype, ml_dtypes included) or TensorProto into a DirectML buffer tensor.

    Args:
        array: the values; never modified.
        target: the DirectML target (feature level, supported types, int64 and lossy policy).
        strides: element strides, one per dimension, or None for a packed tensor.
        min_dims: pad sizes with leading 1s to at least this many dimensions (most DirectML operators want 4);
            None (the default) is the target's fewest: 4 below feature level 3.0, else 1.
        flags: DML_TENSOR_FLAGS (0, or 1 for OWNED_BY_DML).
        guaranteed_base_offset_alignment: 0, or the power of two the binding offset will be a multiple of.

    Returns a PreparedTensor whose ``data`` holds exactly ``total_tensor_size_in_bytes`` bytes. When the source's
    bytes already fit, ``data`` is a read-only view of them (no copy).

    Example:
        >>> import dmlbridge, numpy as np
        >>> t = dmlbridge.prepare(np.array([True, False, True]))
        >>> t.dml_type.name, t.conversion, t.data.tobytes().hex()
        ('UINT8', 'widen', '01000100')
        >>> t.desc()["Sizes"], t.desc()["TotalTensorSizeInBytes"]
        ([3], 4)
    """
    plan = _plan(array, target, strides, min_dims, flags, guaranteed_base_offset_alignment)
    if _can_share(plan):
        if plan.conversion == "emulate":
            _check_fits_32(plan.source, plan.onnx_type, len(plan.source_shape))
        data = plan.source.reshape(-1).view(np.uint8)
        data.flags.writeable = False
        return plan.result(data)
    data = np.empty(plan.total, dtype=np.uint8)
    _write(plan, data)
    return plan.result(data)


def prepare_into(
    dst: Any,
    offset: int,
    array: Any,
    *,
    target: Target = _DEFAULT_TARGET,
    strides: Sequence[int] | None = None,
    min_dims: int | None = None,
    flags: int = 0,
    guaranteed_base_offset_alignment: int = 0,
) -> PreparedTensor:
    """Like :func:`prepare`, but write the bytes into ``dst[offset : offset + total]`` (an upload buffer, an mmap,
    a bytearray). ``offset`` must be a multiple of 16, or of ``guaranteed_base_offset_alignment`` when nonzero.
    Bytes outside that range are not touched. The result's ``data`` is a view into ``dst``.

    Example:
        >>> import dmlbridge, numpy as np
        >>> buffer = bytearray(24)
        >>> t = dmlbridge.prepare_into(buffer, 16, np.array([1, -2], dtype=np.int16))
        >>> t.dml_type.name, t.total_tensor_size_in_bytes, buffer[16:].hex()
        ('INT16', 4, '0100feff00000000')
    """
    plan = _plan(array, target, strides, min_dims, flags, guaranteed_base_offset_alignment)
    out = as_writable_bytes(dst)
    # A binding offset is always a multiple of 16; a larger guaranteed_base_offset_alignment raises that, a
    # smaller one never lowers it (docs/directml-facts.md).
    step = max(plan.alignment, DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT)
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or offset < 0 or offset % step:
        why = ("guaranteed_base_offset_alignment" if plan.alignment > DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT
               else "DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT: DirectML binds buffer tensors at multiples of 16 bytes")
        raise DestinationError(f"offset {offset!r} must be a non-negative multiple of {step} ({why})")
    offset = int(offset)
    if offset + plan.total > out.shape[0]:
        raise DestinationError(
            f"the destination holds {counted(out.shape[0], 'byte')}; this tensor needs {plan.total} at offset {offset} "
            f"(up to byte {offset + plan.total})"
        )
    region = out[offset : offset + plan.total]
    if _overlaps(region, plan.source):
        raise DestinationError("the destination range overlaps the source array; use a separate buffer")
    _write(plan, region)
    return plan.result(region)


class ElementWriter:
    """Writes the DirectML bytes of runs of one array's elements, planned once: what :func:`prepare_into` writes
    for a 1-D run of them, without planning each run anew (verify converts a large constant a 1 MiB block at a
    time, and planning every block cost a tenth of its time). Each run's values are still checked as
    :func:`prepare` checks them (an INT64 out of INT32's range under "narrow"). Only for whole-byte elements.

    Example:
        >>> import numpy as np
        >>> writer = element_writer(np.zeros(1, np.int64), target=Target(supported={"INT32"}, int64="narrow"))
        >>> out = np.zeros(8, np.uint8)
        >>> writer.conversion, writer.dml_type.name, writer.write(np.array([1, -1]), out), out.tobytes().hex()
        ('narrow', 'INT32', 8, '01000000ffffffff')
    """

    def __init__(self, plan: _Encoding) -> None:
        assert plan.element is not None
        self._plan, self._element = plan, plan.element
        self.conversion: Conversion = plan.conversion
        self.dml_type: DmlDataType = plan.dml_type

    def write(self, values: np.ndarray, out: np.ndarray) -> int:
        """Write the bytes of ``values`` (1-D, the planned array's dtype) at the start of ``out`` (uint8, large
        enough); returns how many."""
        used = values.shape[0] * self._element.itemsize
        if values.ndim != 1 or out.shape[0] < used:
            raise InvalidArgumentError(f"an ElementWriter writes a 1-D run of values into at least {used} bytes; "
                                       f"got values of shape {values.shape} and {counted(out.shape[0], 'byte')}")
        _convert(self._plan, values, out[:used].view(self._element))
        return used


def element_writer(array: Any, *, target: Target = _DEFAULT_TARGET, flags: int = 0,
                   guaranteed_base_offset_alignment: int = 0) -> ElementWriter | None:
    """An :class:`ElementWriter` for the elements of ``array`` (a sample of them is enough: the dtype decides),
    planned as :func:`prepare` plans a 1-D array; None for 4-bit elements (two to a byte), which have none.
    Raises what :func:`prepare` raises for a type the target lacks."""
    sample = _as_array(array).reshape(-1)[:1]
    plan = _plan(sample, target, None, 1, flags, guaranteed_base_offset_alignment)
    return None if plan.element is None else ElementWriter(plan)


def _overlaps(region: np.ndarray, source: np.ndarray) -> bool:
    try:
        return bool(np.shares_memory(region, source))
    except np.exceptions.TooHardError:
        return True


def _write(plan: _Encoding, out: np.ndarray) -> None:
    """Write the tensor's bytes into ``out`` (uint8, exactly ``plan.total`` long): values, gaps and padding."""
    layout = plan.layout
    if plan.element is None:
        _write_4bit(plan, out)
        return
    used = layout.span * plan.element.itemsize
    out[used:] = 0
    typed = out[:used].view(plan.element)
    if layout.packed:
        _convert(plan, plan.source, typed.reshape(layout.sizes))
        return
    typed[...] = 0
    assert layout.strides is not None
    dest = as_strided(typed, shape=layout.sizes, strides=[s * plan.element.itemsize for s in layout.strides])
    if layout.injective:
        _convert(plan, plan.source, dest)
        return
    values = np.empty(layout.sizes, dtype=plan.element)
    _convert(plan, plan.source, values)
    dest[...] = values
    _check_no_conflicts(dest, values)


def _write_4bit(plan: _Encoding, out: np.ndarray) -> None:
    layout = plan.layout
    signed = plan.dml_type is DmlDataType.INT4
    used = (layout.span + 1) // 2
    out[used:] = 0
    if layout.packed:
        pack_nibbles_into(out, plan.source.reshape(-1), signed)
        return
    assert layout.strides is not None
    nibbles = np.zeros(layout.span, dtype=np.uint8)
    dest = as_strided(nibbles, shape=layout.sizes, strides=layout.strides)
    values = to_nibbles(plan.source.reshape(-1), signed).reshape(layout.sizes)
    dest[...] = values
    if not layout.injective:
        _check_no_conflicts(dest, values)
    pack_nibbles_into(out, nibbles, signed=False)


def _check_no_conflicts(dest: np.ndarray, values: np.ndarray) -> None:
    """After a scatter through overlapping strides, every element must read back as itself (bit for bit)."""
    bits = np.dtype(f"u{values.dtype.itemsize}")
    differ = dest.view(bits) != values.view(bits)
    if differ.any():
        index = tuple(int(i) for i in np.argwhere(differ)[0])
        raise LayoutError(
            f"the strides make element {list(index)} share its position with another element of a different "
            "value; a broadcast (stride 0) dimension must hold equal values along it"
        )


def _convert(plan: _Encoding, source: np.ndarray, dest: np.ndarray) -> None:
    """Write the DML values of ``source`` into ``dest`` (same shape, the plan's element dtype)."""
    # NaN and overflow casts are defined behaviour here (signalling NaNs quieted, lossy overflow to inf).
    with np.errstate(all="ignore"):
        _convert_values(plan, source, dest)


def _convert_values(plan: _Encoding, source: np.ndarray, dest: np.ndarray) -> None:
    conversion = plan.conversion
    if conversion in ("native", "emulate"):
        if conversion == "emulate":
            _check_fits_32(source, plan.onnx_type, len(plan.source_shape))
        # A bit copy (through unsigned views) keeps NaN payloads and swaps byte order when needed.
        bits = f"u{dest.dtype.itemsize}"
        np.copyto(dest.view("<" + bits), source.view(source.dtype.byteorder.replace("|", "=") + bits))
    elif conversion == "narrow":
        _check_fits_32(source, plan.onnx_type, len(plan.source_shape))
        np.copyto(dest, source, casting="unsafe")
    elif conversion == "saturate":
        info = np.iinfo(dest.dtype)
        np.copyto(dest, np.clip(source, info.min, info.max), casting="unsafe")
    elif conversion == "lossy":  # (round to nearest even; a NaN FLOAT32 holds is kept bit for bit)
        cast_into(source, dest)
    elif plan.onnx_type is OnnxDataType.BOOL:
        np.copyto(dest, source.view(np.uint8) != 0, casting="unsafe")
    elif plan.onnx_type.is_float and source.dtype.itemsize == 1:
        _widen_small_float(source, dest)
    elif plan.onnx_type is OnnxDataType.BFLOAT16 and dest.dtype == np.dtype("<f4"):
        # bfloat16 is the top half of a float32: shifting the bits keeps NaN payloads (float_bits' rule, faster).
        np.left_shift(source.view(np.uint16), 16, out=dest.view("<u4"), dtype=np.uint32)
    else:  # integers sign- or zero-extended; floats exactly, NaN payloads and signalling NaNs kept (float_bits)
        cast_into(source, dest)


# Codes per np.take: it turns its indices into intp (8 bytes each), a temporary of 4 MiB at this size. Smaller
# blocks were slower: 64 Ki codes took 16 % longer alone, and with two threads widening at once (verify's workers)
# the many short calls that hand the GIL back and forth cost a fifth of verify's time.
_WIDEN_BLOCK = 1 << 20


def _widen_small_float(source: np.ndarray, dest: np.ndarray) -> None:
    """8-, 6- and 4-bit floats through lookup tables built by float_bits' cast (ml_dtypes' values, FLOAT8E5M2's
    NaN payloads kept: exact by construction): pairs of codes index a 65,536-entry table of value pairs, which
    halves the lookups; an odd tail uses the 256-entry table."""
    table = _widening_table(source.dtype, dest.dtype)
    codes, out = source.view(np.uint8), dest.view(table.dtype)
    if not (codes.flags.c_contiguous and out.flags.c_contiguous):
        np.take(table, codes, out=out, mode="clip")  # strided layouts: rare, and np.take copes
        return
    codes, out = codes.reshape(-1), out.reshape(-1)
    n = codes.shape[0]
    even = n - n % 2 if dest.itemsize <= 4 else 0
    if even:
        pairs = _pair_table(source.dtype, dest.dtype)
        words, wide = codes[:even].view("<u2"), out[:even].view(pairs.dtype)
        half = _WIDEN_BLOCK // 2
        for start in range(0, even // 2, half):
            np.take(pairs, words[start : start + half], out=wide[start : start + half], mode="clip")
    for start in range(even, n, _WIDEN_BLOCK):
        np.take(table, codes[start : start + _WIDEN_BLOCK], out=out[start : start + _WIDEN_BLOCK], mode="clip")


@functools.cache
def _pair_table(source: np.dtype, dest: np.dtype) -> np.ndarray:
    # Entry w holds the values of codes (w & 0xFF, w >> 8) side by side, as a little-endian pair would read.
    single = _widening_table(source, dest)
    wide = np.dtype(f"<u{2 * dest.itemsize}")
    words = np.arange(1 << 16, dtype=wide)
    table = single[words & 0xFF].astype(wide) | (single[words >> 8].astype(wide) << (8 * dest.itemsize))
    table.flags.writeable = False
    return table


@functools.cache
def _widening_table(source: np.dtype, dest: np.dtype) -> np.ndarray:
    patterns = np.arange(256, dtype=np.uint8).view(source)
    values = cast(patterns, dest.newbyteorder("<"))
    table = values.view(f"<u{dest.itemsize}")
    table.flags.writeable = False
    return table


def _count_outside_32(values: np.ndarray, onnx_type: OnnxDataType) -> int:
    """How many of ``values`` (INT64 or UINT64) lie outside INT32 or UINT32: what "saturate" clamps."""
    info = np.iinfo(np.int32 if onnx_type is OnnxDataType.INT64 else np.uint32)
    return int(np.count_nonzero((values < info.min) | (values > info.max)))


def _check_fits_32(values: np.ndarray, onnx_type: OnnxDataType, rank: int) -> None:
    """INT64 must fit INT32 and UINT64 UINT32 to be emulated or narrowed; name the first value that does not, by
    its index in the caller's array (``rank`` dimensions: the layout's leading 1s left out)."""
    info = np.iinfo(np.int32 if onnx_type is OnnxDataType.INT64 else np.uint32)
    if values.size == 0:
        return
    if values.min() >= info.min and values.max() <= info.max:
        return
    bad = np.argwhere((values < info.min) | (values > info.max))[0][values.ndim - rank :]
    value = values.reshape(values.shape[values.ndim - rank :])[tuple(bad)].item()
    name = "INT32" if onnx_type is OnnxDataType.INT64 else "UINT32"
    raise ValueRangeError(
        f"value {value} at index {list(int(i) for i in bad)} does not fit {name} ({info.min}..{info.max}), "
        f"which stands in for {onnx_type.name} on this target; use a target with 64-bit types, or clamp such values "
        "to the 32-bit range with Target(..., int64='saturate', allow_lossy=True) (lossy, for INT64_MAX-style "
        "sentinels such as Slice's and Gather's; each entry counts the values it clamps)"
    )
