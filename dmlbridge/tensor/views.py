"""A buffer tensor's bytes seen at other sizes: broadcast with strides of 0, or with leading 1s. Only the desc
changes; the bytes, and so ``TotalTensorSizeInBytes``, stay what they are.

DirectML wants some tensors at sizes a model declares only at run time: GEMM wants its C tensor at the output's
sizes and B at the output's batch sizes, broadcast with strides of 0, and GEMM, GATHER and CONVOLUTION want every
tensor of one operator in one DimensionCount (docs/directml-facts.md). A conversion lays a constant out for its
consumers where the model declares their sizes; these two functions do the same for sizes known later.

    >>> desc = BufferTensorDesc(1, 0, (3,), None, 12, 256)
    >>> broadcast_desc(desc, (2, 3)).strides, with_leading_ones(desc, 4).sizes
    ((0, 1), (1, 1, 1, 3))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dmlbridge.errors import InvalidArgumentError, LayoutError
from dmlbridge.tensor.descs import BufferTensorDesc
from dmlbridge.tensor.layout import check_sizes, check_strides, packed_strides, span_of

__all__ = ["MAX_DIMENSIONS", "broadcast_desc", "with_leading_ones"]

MAX_DIMENSIONS = 8
"""The most dimensions a DirectML buffer tensor has (feature level 3.0 on; 5 below: the operator checks)."""


def _buffer_desc(desc: Any) -> BufferTensorDesc:
    """``desc`` as a BufferTensorDesc: one, or a record holding one (``buffer_desc``: a PreparedTensor, a
    PlanEntry, a QuantizedPart); InvalidArgumentError naming the keyword otherwise."""
    if isinstance(desc, BufferTensorDesc):
        return desc
    held = getattr(desc, "buffer_desc", None)
    if isinstance(held, BufferTensorDesc):
        return held
    if held is None and hasattr(desc, "skipped") and getattr(desc, "skipped", None):
        raise InvalidArgumentError(f"desc= is entry {getattr(desc, 'key', '?')!r}, which was skipped "
                                   f"({desc.skipped}); it has no desc")
    raise InvalidArgumentError(
        f"desc= must be a BufferTensorDesc, or a PreparedTensor, PlanEntry or QuantizedPart (anything with a "
        f"buffer_desc), not {type(desc).__name__}"
    )


def _checked_sizes(sizes: Any, keyword: str) -> tuple[int, ...]:
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise LayoutError(f"{keyword}= must be a sequence of whole numbers, got {sizes!r}")
    try:
        return check_sizes(sizes, MAX_DIMENSIONS)
    except LayoutError as exc:
        raise LayoutError(f"{keyword}={list(sizes)!r}: {exc}") from None


def broadcast_desc(desc: BufferTensorDesc | Any, sizes: Sequence[int]) -> BufferTensorDesc:
    """The same bytes seen at ``sizes``: ``desc`` broadcast as numpy broadcasts, its sizes aligned to the right
    of ``sizes``, each either equal to its new size or 1 (``sizes`` may have more dimensions, at most 8).

    A dimension that keeps its size keeps its stride; one that grows from 1, and each new leading dimension, gets
    a stride of 0, which DirectML reads as the same element again. ``TotalTensorSizeInBytes`` is unchanged: a
    stride of 0 reaches no new element. Strides stay NULL (packed) when nothing grows. ``desc`` is a
    :class:`BufferTensorDesc`, or a ``PreparedTensor``, ``PlanEntry`` or ``QuantizedPart`` (its ``buffer_desc``);
    LayoutError when the sizes do not broadcast, naming ``sizes``.

    Example:
        >>> import dmlbridge, numpy as np
        >>> bias = dmlbridge.prepare(np.arange(4, dtype=np.float32))   # a Gemm's C, [N]
        >>> c = dmlbridge.broadcast_desc(bias, (3, 4))                  # GEMM wants it at the output's [M, N]
        >>> c.sizes, c.strides, c.total_tensor_size_in_bytes
        ((3, 4), (0, 1), 16)
    """
    base = _buffer_desc(desc)
    new = _checked_sizes(sizes, "sizes")
    old = base.sizes
    if len(new) < len(old):
        raise LayoutError(f"sizes={list(new)} has {len(new)} dimensions, fewer than the desc's {len(old)} "
                          f"({list(old)}); broadcasting adds dimensions, never removes them")
    pad = len(new) - len(old)
    for axis, (size, grown) in enumerate(zip(old, new[pad:], strict=True)):
        if size not in (1, grown):
            raise LayoutError(
                f"sizes={list(new)} do not broadcast the desc's sizes {list(old)}: dimension {axis} is {size}, "
                f"which only a size of 1 broadcasts to {grown} (numpy's rule, sizes aligned to the right)"
            )
    grows = any(size != grown for size, grown in zip(old, new[pad:], strict=True)) or any(s > 1 for s in new[:pad])
    if base.strides is None and not grows:
        return base._replace(sizes=new)  # (only leading 1s: still packed)
    own = base.strides if base.strides is not None else packed_strides(old)
    strides = (0,) * pad + tuple(0 if size != grown else stride
                                 for size, grown, stride in zip(old, new[pad:], own, strict=True))
    return base._replace(sizes=new, strides=check_strides(strides, new))


def with_leading_ones(desc: BufferTensorDesc | Any, dimension_count: int) -> BufferTensorDesc:
    """The same bytes with leading 1s added to ``dimension_count`` dimensions (at most 8; a desc that has as
    many already comes back as it is): what an operator that wants every tensor in one DimensionCount needs.

    Strides stay NULL when the desc is packed; otherwise each new dimension's stride is the span, as ``prepare``
    pads a strided array. ``TotalTensorSizeInBytes`` is unchanged. ``desc`` is as for :func:`broadcast_desc`;
    InvalidArgumentError when ``dimension_count`` is not a whole number from the desc's count to 8, naming it.

    Example:
        >>> import dmlbridge, numpy as np
        >>> data = dmlbridge.prepare(np.ones((5, 3), np.float32))      # a Gather's data
        >>> dmlbridge.with_leading_ones(data, 3).sizes                  # beside 2-D indices: the output's rank
        (1, 5, 3)
    """
    base = _buffer_desc(desc)
    count = len(base.sizes)
    if isinstance(dimension_count, (bool, np.bool_)) or not isinstance(dimension_count, (int, np.integer)) \
            or not count <= dimension_count <= MAX_DIMENSIONS:
        raise InvalidArgumentError(f"dimension_count must be a whole number from the desc's {count} dimensions to "
                                   f"{MAX_DIMENSIONS}, got {dimension_count!r}")
    pad = int(dimension_count) - count
    if not pad:
        return base
    sizes = (1,) * pad + base.sizes
    if base.strides is None:
        return base._replace(sizes=sizes)
    span = span_of(base.sizes, base.strides)
    return base._replace(sizes=sizes, strides=(span,) * pad + base.strides)
