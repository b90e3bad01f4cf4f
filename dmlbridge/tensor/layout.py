"""Buffer-tensor layout: sizes, strides, element positions and the DirectML buffer-size rule.

An element with index (i_0, ..., i_n) sits at *position* sum(i_k * stride_k), counted in elements; a 4-bit
element at position p lives in byte p // 2 (low nibble when p is even). The positions run from 0 to
``span - 1``, where span = sum((size_k - 1) * stride_k) + 1 (or the element count when packed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dmlbridge.errors import LayoutError, counted
from dmlbridge.types.data_types import DmlDataType

__all__ = [
    "Layout",
    "buffer_bytes",
    "calc_buffer_tensor_size",
    "check_sizes",
    "check_strides",
    "emulated_int64",
    "is_injective",
    "make_layout",
    "packed_strides",
    "span_of",
]

UINT32_MAX = 2**32 - 1


def _as_int(value: object, what: str) -> int:
    # Accept Python and numpy integers; refuse floats, bools and anything else rather than truncate.
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise LayoutError(f"{what} must be whole numbers, got {value!r} ({type(value).__name__})")
    return int(value)


def check_sizes(sizes: Sequence[int], max_dims: int = 8) -> tuple[int, ...]:
    """Validate DirectML sizes: 1..max_dims dimensions, each 1..2^32-1, at most 2^32-1 elements in all."""
    try:
        values = tuple(_as_int(s, "sizes") for s in sizes)
    except TypeError:
        raise LayoutError(f"sizes must be a sequence of whole numbers, got {sizes!r}") from None
    if not 1 <= len(values) <= max_dims:
        raise LayoutError(
            f"a DirectML tensor has 1 to {max_dims} dimensions on this target, got {len(values)} ({list(values)})"
        )
    for axis, size in enumerate(values):
        if size < 1:
            raise LayoutError(
                f"size {size} in dimension {axis} of {list(values)}: DirectML has no empty tensors, every size "
                "must be at least 1; leave empty tensors out (they have no bytes to upload)"
            )
        if size > UINT32_MAX:
            raise LayoutError(f"size {size} in dimension {axis} does not fit UINT32 (max {UINT32_MAX})")
    count = math.prod(values)
    if count > UINT32_MAX:
        raise LayoutError(
            f"sizes {list(values)} hold {count} elements; a DirectML tensor may hold at most 2^32 - 1 = "
            f"{UINT32_MAX}: split the tensor"
        )
    return values


def check_strides(strides: Sequence[int], sizes: Sequence[int]) -> tuple[int, ...]:
    """Validate strides against validated sizes: one per dimension, each 0..2^32-1 (in elements), and the index
    of the last element, sum((size_i - 1) * stride_i), at most 2^32-1 too."""
    try:
        values = tuple(_as_int(s, "strides") for s in strides)
    except TypeError:
        raise LayoutError(f"strides must be a sequence of whole numbers, got {strides!r}") from None
    if len(values) != len(sizes):
        raise LayoutError(f"{counted(len(values), 'stride')} {list(values)} for {counted(len(sizes), 'size')} "
                          f"{list(sizes)}: give one each")
    for axis, stride in enumerate(values):
        if not 0 <= stride <= UINT32_MAX:
            raise LayoutError(
                f"stride {stride} in dimension {axis} is outside UINT32 (0..{UINT32_MAX}); strides count "
                "elements, not bytes, and cannot be negative"
            )
    last = sum((size - 1) * stride for size, stride in zip(sizes, values, strict=True))
    if last > UINT32_MAX:
        raise LayoutError(
            f"sizes {list(sizes)} with strides {list(values)} put the last element at index {last}, which does not "
            f"fit UINT32 (max {UINT32_MAX}): DirectML computes element indices in 32 bits; use smaller strides"
        )
    return values


def packed_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """The strides of a packed tensor, last dimension fastest."""
    strides = []
    step = 1
    for size in reversed(sizes):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def span_of(sizes: Sequence[int], strides: Sequence[int] | None) -> int:
    """How many element positions the tensor covers: the element count when packed, else the last position + 1."""
    if strides is None:
        return math.prod(sizes)
    return sum((size - 1) * stride for size, stride in zip(sizes, strides, strict=True)) + 1


def calc_buffer_tensor_size(
    dml_type: DmlDataType | int | str, sizes: Sequence[int], strides: Sequence[int] | None = None
) -> int:
    """The minimum ``TotalTensorSizeInBytes`` of a buffer tensor (DirectMLX's bit-based ``DMLCalcBufferTensorSize``).

    bits = span * bit width; bytes = ceil(bits / 8) rounded up to a multiple of 4. Python integers, so huge
    tensors do not overflow as DirectMLX's 32-bit strided path does.

    Example:
        >>> import dmlbridge
        >>> dmlbridge.calc_buffer_tensor_size("FLOAT16", [1, 3])  # 6 bytes, rounded up to a multiple of 4
        8
        >>> dmlbridge.calc_buffer_tensor_size(dmlbridge.DmlDataType.INT4, [2, 3], strides=[4, 1])  # span 7
        4
    """
    dtype = DmlDataType.parse(dml_type)
    checked = check_sizes(sizes)
    strides_checked = None if strides is None else check_strides(strides, checked)
    return buffer_bytes(dtype, span_of(checked, strides_checked))


def buffer_bytes(dml_type: DmlDataType, span: int) -> int:
    """DirectML's buffer-size rule, the one place it is written: ``span`` elements of ``dml_type`` need
    ceil(span * bit width / 8) bytes, rounded up to a multiple of 4."""
    return ((span * dml_type.bitwidth + 7) // 8 + 3) // 4 * 4


def is_injective(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """True when no two elements share a position, proven by nesting: sorted by stride, each dimension's
    stride clears everything the smaller ones reach. False means "maybe overlapping", not "overlapping"."""
    reach = 0
    for size, stride in sorted(((sz, st) for sz, st in zip(sizes, strides, strict=True) if sz > 1), key=lambda p: p[1]):
        if stride <= reach:
            return False
        reach += (size - 1) * stride
    return True


@dataclass(frozen=True)
class Layout:
    """Where a tensor's elements go in its buffer.

    Attributes:
        sizes: the DirectML sizes (after 0-d and min_dims padding).
        strides: the element strides given by the caller (after padding), or None when packed.
        span: number of element positions (see the module docstring).
        packed: True when the elements fill positions 0..span-1 in C order (no strides, or packed ones).
        injective: True when no two elements can share a position.
    """

    sizes: tuple[int, ...]
    strides: tuple[int, ...] | None
    span: int
    packed: bool
    injective: bool

    @property
    def element_strides(self) -> tuple[int, ...]:
        """The strides in elements, packed ones when none were given."""
        return self.strides if self.strides is not None else packed_strides(self.sizes)


def make_layout(
    shape: Sequence[int], strides: Sequence[int] | None, min_dims: int, max_dims: int
) -> Layout:
    """Build the layout of an array of ``shape``: 0-d becomes [1], leading 1s pad to ``min_dims``; strides may be
    given for the padded dimensions or for the array's own (padding dimensions then get stride = span)."""
    if isinstance(min_dims, bool) or not isinstance(min_dims, (int, np.integer)) or min_dims < 0:
        raise LayoutError(f"min_dims must be a whole number from 0 to {max_dims}, got {min_dims!r}")
    if min_dims > max_dims:
        raise LayoutError(f"min_dims={min_dims} is more than the {max_dims} dimensions this target allows")
    own = tuple(shape) if len(shape) else (1,)
    pad = max(0, int(min_dims) - len(own))
    sizes = check_sizes((1,) * pad + own, max_dims)
    if strides is None:
        return Layout(sizes, None, math.prod(sizes), True, True)
    given = list(strides) if not isinstance(strides, (str, bytes)) else None
    if given is None:
        raise LayoutError(f"strides must be a sequence of whole numbers, got {strides!r}")
    if len(given) == len(sizes):
        full = check_strides(given, sizes)
    elif len(given) in (len(shape), len(own)) and len(given) < len(sizes):
        own_strides = check_strides(given, own) if given else (1,)
        span = span_of(own, own_strides)
        full = check_strides((span,) * (len(sizes) - len(own)) + own_strides, sizes)
    else:
        raise LayoutError(
            f"{counted(len(given), 'stride')} {given} for sizes {list(sizes)}: give one stride per dimension "
            f"({len(sizes)}, or {len(own)} for the array's own dimensions)"
        )
    packed = full == packed_strides(sizes)
    return Layout(sizes, full, span_of(sizes, full), packed, packed or is_injective(sizes, full))


def emulated_int64(layout: Layout) -> tuple[tuple[int, ...], int]:
    """The desc strides and TotalTensorSizeInBytes of an INT64 tensor emulated as INT32 (ONNX Runtime's
    emulation, docs/directml-facts.md): its 8-byte elements read as their low 32 bits through doubled strides."""
    return check_strides([2 * s for s in layout.element_strides], layout.sizes), 8 * layout.span
