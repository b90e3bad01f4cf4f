"""The layout a constant's consumers want: the sizes and strides its desc gives its bytes.

A constant's bytes are its ONNX values in C order, whatever its layout; only its desc's Sizes and Strides change
(``TotalTensorSizeInBytes`` with them: never). By default the sizes are the ONNX shape with leading 1s up to
``min_dims`` (*leading*). Some DirectML operators want an input in a layout of their node's
(docs/directml-facts.md), so a consumer that is such an input (``consumers.LAYOUT_INPUTS``) *wants* a layout:

- *channel*: a 1-D per-channel constant on axis 1, ``[1, C, 1, ...]`` of its node's dimension count (a
  convolution's bias, a normalization's scale, bias, mean and variance);
- *spatial*: a convolution's weight at the convolution's dimension count, 1s inserted before its spatial axes
  (a 1-D convolution's ``[M, C/g, k]`` is ``[M, C/g, 1, k]``, run as a 2-D one);
- *rank*: leading 1s up to the node's dimension count (a Gather's data beside indices of more than one
  dimension; a MatMul's B where the model gives the output's rank but not its batch sizes);
- *broadcast*: the sizes the node's output gives, with strides of 0 where the constant's dimension is 1 or
  missing (a Gemm's C at the output's ``[M, N]``, a MatMul's B at the output's batch sizes).

Each at least ``min_dims`` dimensions. A consumer wants nothing where its layout is the leading one. A constant
whose consumers want one layout gets it; one whose consumers want different ones (one wanting nothing counts)
keeps the leading layout, *mixed*. Where a consumer would want a layout the model does not declare enough for
(a Gemm whose M is not declared, say), the entry keeps what it has and its ``note`` says why and what to do at run
time. Manifests before format 6 followed an older rule (:func:`padding_of`): ``version`` applies it.

    >>> from dmlbridge.model.consumers import Consumer
    >>> choose_layout((8,), (Consumer("conv", "Conv", 2, 4),), 1)
    ConsumerLayout(padding='channel', sizes=(1, 8, 1, 1), strides=None, note=None)
    >>> choose_layout((4,), (Consumer("fc", "Gemm", 2, None, (3, 4)),), 1)
    ConsumerLayout(padding='broadcast', sizes=(3, 4), strides=(0, 1), note=None)
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

from dmlbridge.errors import LayoutError
from dmlbridge.model.consumers import (
    CHANNEL_DIMS,
    CONSUMER_DIMS_VERSION,
    CONSUMER_LAYOUTS_VERSION,
    Consumer,
)

__all__ = [
    "GEMM_MOST_DIMS", "LEADING", "ConsumerLayout", "Padding", "channel_dims", "choose_layout", "padded_sizes",
    "padding_of",
]

Padding = Literal["leading", "channel", "spatial", "rank", "broadcast", "mixed"]

GEMM_MOST_DIMS = 4
"""The most dimensions GEMM takes (2 to 4 from feature level 4.0, exactly 4 below): a MatMul of more is folded
by its caller, so its B wants no layout of its own."""

_NOTES = {
    "gemm": "GEMM wants a Gemm's C at the output's sizes [M, N], which the model does not declare: it keeps its "
            "ONNX layout; broadcast it at run time (dmlbridge.broadcast_desc)",
    "matmul batch": "GEMM wants a MatMul's B at the output's batch sizes, which the model does not declare: it has "
                    "the output's rank; where a batch size is more than 1, broadcast it at run time "
                    "(dmlbridge.broadcast_desc)",
    "matmul": "GEMM wants a MatMul's B at the output's batch sizes, which the model does not declare, nor the "
              "output's rank: it keeps its ONNX layout; broadcast it at run time (dmlbridge.broadcast_desc)",
    "matmul folded": "GEMM takes at most 4 dimensions, fewer than this MatMul's output has: it keeps its ONNX "
                     "layout; fold the batch dimensions to bind it",
    "gather": "GATHER wants a Gather's data at the output's rank, which the model does not declare (nor the "
              "indices' rank): it keeps its ONNX layout; add leading 1s at run time (dmlbridge.with_leading_ones)",
}


class ConsumerLayout(NamedTuple):
    """The layout chosen for a constant: ``padding`` (see the module docstring), the desc's ``sizes`` and element
    ``strides`` over the constant's C-order values (at least ``min_dims`` dimensions; both None where the layout
    is the leading one, which the ONNX shape and ``min_dims`` give; ``strides`` None when packed), and ``note``:
    why the layout is not what a consumer wants, when that is so.

    Example:
        >>> from dmlbridge.model.consumers import Consumer
        >>> choose_layout((5, 3), (Consumer("emb", "Gather", 0, 3),), 1).sizes
        (1, 5, 3)
    """

    padding: Padding
    sizes: tuple[int, ...] | None
    strides: tuple[int, ...] | None
    note: str | None = None


LEADING = ConsumerLayout("leading", None, None)
"""The layout of a constant no consumer wants another for: the ONNX shape with leading 1s to ``min_dims``."""


def choose_layout(shape: tuple[int, ...], consumers: tuple[Consumer, ...], min_dims: int,
                  version: int | None = None) -> ConsumerLayout:
    """The layout of a constant of ``shape`` read by ``consumers``, at ``min_dims`` (see the module docstring), by
    the rule of manifest format ``version`` (None: the current one). LayoutError when a consumer's ``sizes`` do not
    broadcast the shape (a manifest's claim: the model's consumers never do)."""
    rule = CONSUMER_LAYOUTS_VERSION if version is None else version
    if rule < CONSUMER_LAYOUTS_VERSION:
        padding = padding_of(shape, consumers, min_dims, rule)
        if padding != "channel":
            return LEADING if padding == "leading" else ConsumerLayout(padding, None, None)
        return ConsumerLayout("channel", padded_sizes(shape, "channel", channel_dims(consumers, min_dims, rule)),
                              None)
    if not consumers:
        return LEADING
    leading = _with_ones(shape or (1,), None, min_dims)
    wants = [_wanted(consumer, shape, min_dims, leading) for consumer in consumers]
    views = {(want.sizes, want.strides) if want is not None else None for want, _ in wants}
    notes = list(dict.fromkeys(note for _, note in wants if note is not None))
    note = "; ".join(notes) or None
    if views == {None}:
        return LEADING if note is None else ConsumerLayout("leading", None, None, note)
    if None not in views and len(views) == 1:
        first = next(want for want, _ in wants if want is not None)
        return first._replace(note=note)
    said = dict.fromkeys(f"{c.op_type} input {c.input}: {want.padding if want else 'its ONNX layout'}"
                         for c, (want, _) in zip(consumers, wants, strict=True))
    shown = ", ".join(list(said)[:4]) + (", ..." if len(said) > 4 else "")
    return ConsumerLayout("mixed", None, None, f"its consumers want different layouts ({shown}): it keeps its ONNX "
                                               "layout")


def _wanted(consumer: Consumer, shape: tuple[int, ...], min_dims: int,
            leading: tuple[tuple[int, ...], tuple[int, ...] | None]) -> tuple[ConsumerLayout | None, str | None]:
    """The layout one consumer wants (None: none, or the leading one) and why it cannot want one it would."""
    kind = consumer.layout_input
    want: ConsumerLayout | None = None
    note: str | None = None
    if kind == "channel" and len(shape) == 1:
        want = _packed("channel", (1, shape[0], *(1,) * (max(min_dims, consumer.dims or CHANNEL_DIMS) - 2)),
                       min_dims)
    elif kind == "spatial" and 3 <= len(shape) <= 5:
        count = max(min_dims, consumer.dims or CHANNEL_DIMS)
        if count > len(shape):
            want = _packed("spatial", (*shape[:2], *(1,) * (count - len(shape)), *shape[2:]), min_dims)
    elif kind == "rank":
        if consumer.dims is None:
            note = _NOTES["gather"]
        else:
            want = _packed("rank", (1,) * max(0, consumer.dims - len(shape)) + shape, min_dims)
    elif kind == "broadcast" and consumer.op_type == "Gemm" and len(shape) <= 2:
        if consumer.sizes is None:
            note = _NOTES["gemm"]
        else:
            want = _broadcast(shape, consumer.sizes, min_dims)
    elif kind == "broadcast" and consumer.op_type == "MatMul" and len(shape) >= 2:
        rank = len(consumer.sizes) if consumer.sizes is not None else consumer.dims
        if rank is not None and rank > GEMM_MOST_DIMS:
            note = _NOTES["matmul folded"]
        elif consumer.sizes is not None:
            want = _broadcast(shape, consumer.sizes, min_dims)
        elif consumer.dims is not None:
            want = _packed("rank", (1,) * max(0, consumer.dims - len(shape)) + shape, min_dims)
            note = _NOTES["matmul batch"]
        else:
            note = _NOTES["matmul"]
    if want is not None and (want.sizes, want.strides) == leading:
        want = None
    return want, note


def _packed(padding: Padding, sizes: tuple[int, ...], min_dims: int) -> ConsumerLayout:
    return ConsumerLayout(padding, *_with_ones(sizes, None, min_dims))


def _with_ones(sizes: tuple[int, ...], strides: tuple[int, ...] | None,
               min_dims: int) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """``sizes`` and ``strides`` with leading 1s up to ``min_dims``: each new dimension's stride is the span, as
    the layout rules pad a strided tensor."""
    pad = max(0, min_dims - len(sizes))
    if strides is None:
        return (1,) * pad + sizes, None
    span = sum((size - 1) * stride for size, stride in zip(sizes, strides, strict=True)) + 1
    return (1,) * pad + sizes, (span,) * pad + strides


def _broadcast(shape: tuple[int, ...], sizes: tuple[int, ...], min_dims: int) -> ConsumerLayout:
    """The constant broadcast to ``sizes`` (numpy's rule: aligned to the right, a dimension of 1 or a missing one
    repeated with a stride of 0; packed when nothing grows)."""
    pad = len(sizes) - len(shape)
    if pad < 0 or any(own not in (1, size) for own, size in zip(shape, sizes[pad:], strict=True)):
        raise LayoutError(f"sizes {list(sizes)} do not broadcast the shape {list(shape)}")
    if math.prod(sizes) == math.prod(shape):  # (only 1s added: the same elements in the same order)
        return _packed("broadcast", sizes, min_dims)
    packed = [math.prod(shape[k + 1 :]) for k in range(len(shape))]
    strides = (0,) * pad + tuple(stride if own == size else 0
                                 for own, size, stride in zip(shape, sizes[pad:], packed, strict=True))
    return ConsumerLayout("broadcast", *_with_ones(sizes, strides, min_dims))


# --- the rule of formats 3 to 5 ----------------------------------------------------------------------------------


def padding_of(
    shape: tuple[int, ...], consumers: tuple[Consumer, ...], min_dims: int, version: int | None = None
) -> Padding:
    """How a constant's sizes were padded before format 6: "channel" for a 1-D constant read only by per-channel
    inputs of one dimension count, "mixed" when some of its consumers are per-channel inputs and others are not or
    the counts differ, "leading" otherwise. ``version``: the manifest format version whose rule applies (None:
    format 5's); before CONSUMER_DIMS_VERSION only a ``min_dims`` of 2 or more pads on the channel axis, and the
    counts are not looked at; before format 3, every constant is padded with leading 1s.

        >>> padding_of((8,), (Consumer("conv", "Conv", 2, 4),), 1)
        'channel'
    """
    if len(shape) != 1 or not consumers:
        return "leading"
    rule = CONSUMER_DIMS_VERSION if version is None else version
    if rule < 3 or (rule < CONSUMER_DIMS_VERSION and min_dims < 2):
        return "leading"
    wanted = {consumer.per_channel for consumer in consumers}
    if wanted == {True}:
        same = rule < CONSUMER_DIMS_VERSION or len({consumer.dims for consumer in consumers}) == 1
        return "channel" if same else "mixed"
    return "mixed" if True in wanted else "leading"


def channel_dims(consumers: tuple[Consumer, ...], min_dims: int, version: int | None = None) -> int:
    """The dimension count of a constant these consumers read with "channel" padding before format 6
    (:func:`padding_of`): their ``dims``, or ``min_dims`` when it is more; ``min_dims`` before
    CONSUMER_DIMS_VERSION."""
    if version is not None and version < CONSUMER_DIMS_VERSION:
        return min_dims
    return max(min_dims, consumers[0].dims or CHANNEL_DIMS)


def padded_sizes(shape: tuple[int, ...], padding: Padding, min_dims: int) -> tuple[int, ...]:
    """The sizes of a packed constant padded before format 6: ``[1, C, 1, ...]`` for channel padding
    (``min_dims``: the count :func:`channel_dims` gives), else leading 1s (a 0-d constant is ``[1]``); at least
    ``min_dims`` dimensions either way."""
    if padding == "channel":
        return (1, shape[0], *(1,) * (min_dims - 2))
    base = shape or (1,)
    return (1,) * max(0, min_dims - len(base)) + tuple(base)
