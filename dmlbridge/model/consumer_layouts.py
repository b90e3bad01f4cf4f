"""The layout a constant's consumers want: the sizes and strides each consumer's desc gives its bytes, and the one
the entry's own desc gives them.

A constant's bytes are its ONNX values in C order, whatever its layout; only a desc's Sizes and Strides change
(``TotalTensorSizeInBytes`` with them: never). By default the sizes are the ONNX shape with leading 1s up to
``min_dims`` (*leading*). Some DirectML operators want an input in a layout of their node's (the operator table,
``dmlbridge.model.operators``; docs/directml-facts.md), so a consumer of such an input *wants* a layout:

- *channel*: a 1-D per-channel constant on axis 1, ``[1, C, 1, ...]`` of its node's dimension count (a
  convolution's bias, a normalization's scale, bias, mean and variance);
- *spatial*: a convolution's weight at the convolution's dimension count, 1s inserted before its spatial axes
  (a 1-D convolution's ``[M, C/g, k]`` is ``[M, C/g, 1, k]``, run as a 2-D one);
- *rank*: leading 1s up to the node's dimension count (a Gather's data and indices; a normalization's scale and
  bias; a MatMul's B where the model gives the output's rank but not its batch sizes);
- *broadcast*: the sizes the node's output gives, with strides of 0 where the constant's dimension is 1 or
  missing (an element-wise operand, a Gemm's C at the output's ``[M, N]``, a MatMul's B at the batch sizes);
- *axis*: a (de)quantization's per-axis scale or zero point at its input's sizes, stride 1 on its axis only;
- *rnn*: exactly 4 dimensions, leading 1s (every input of LSTM, GRU and RNN);
- *group*: a GroupNorm's gamma or beta ``[C]`` at ``[N, C/groups, H·W, groups]``, strides ``[0, 1, 0, C/groups]``:
  the sizes MEAN_VARIANCE_NORMALIZATION1 reads the NHWC input ``[N, H, W, C]`` at, each channel's value repeated
  over the batch and the pixels.

Each but *rnn* at least ``min_dims`` dimensions. A consumer wants nothing where its layout is the leading one
(:func:`consumer_view` gives each its own). An entry whose consumers that bind it want one layout gets it; one
whose consumers want different ones keeps the leading layout, *mixed* (each consumer still has its own desc).
Where a consumer would want a layout the model does not declare enough for (a Gemm whose M is not declared, say),
it keeps what it has and its ``note`` says why and what to do at run time. Manifests before format 7 followed
older rules: ``version`` applies them (before format 6, :func:`padding_of`).

    >>> from dmlbridge.model.consumers import Consumer
    >>> choose_layout((8,), (Consumer("conv", "Conv", 2, 4, None, "gpu", "CONVOLUTION", "channel"),), 1)
    ConsumerLayout(padding='channel', sizes=(1, 8, 1, 1), strides=None, note=None)
    >>> choose_layout((4,), (Consumer("fc", "Gemm", 2, None, (3, 4), "gpu", "GEMM", "broadcast"),), 1)
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
    MATRIX_PRODUCTS,
    PER_OPERATOR_VERSION,
    Consumer,
)

__all__ = [
    "GEMM_MOST_DIMS", "LEADING", "ConsumerLayout", "Padding", "channel_dims", "choose_layout", "consumer_view",
    "padded_sizes",
    "padding_of",
]

Padding = Literal["leading", "channel", "spatial", "rank", "broadcast", "axis", "rnn", "group", "mixed"]

_RNN_DIMS = 4  # LSTM, GRU and RNN take exactly 4-D tensors
_PER_ROW = (1, 2, 6, 7)  # QLinearMatMul's scales and zero points of A and of the output: one per row when 1-D

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
    "broadcast": "{operator} wants it at the output's sizes, which the model does not declare: it keeps its ONNX "
                 "layout; broadcast it at run time (dmlbridge.broadcast_desc), or give the free dimensions "
                 "(input_shapes, dim_params)",
    "rank": "{operator} wants it at its node's dimension count, which the model does not declare: it keeps its ONNX "
            "layout; add leading 1s at run time (dmlbridge.with_leading_ones)",
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
        >>> choose_layout((5, 3), (Consumer("emb", "Gather", 0, 3, None, "gpu", "GATHER", "rank"),), 1).sizes
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
    the rule of manifest format ``version`` (None: the current one): the layout every consumer its DirectML
    operator binds agrees on. LayoutError when a consumer's ``output_sizes`` do not broadcast the shape (a
    manifest's claim: the model's consumers never do)."""
    rule = PER_OPERATOR_VERSION if version is None else version
    if rule < CONSUMER_LAYOUTS_VERSION:
        padding = padding_of(shape, consumers, min_dims, rule)
        if padding != "channel":
            return LEADING if padding == "leading" else ConsumerLayout(padding, None, None)
        return ConsumerLayout("channel", padded_sizes(shape, "channel", channel_dims(consumers, min_dims, rule)),
                              None)
    bound = [consumer for consumer in consumers if consumer.reads_on == "gpu"]
    if not bound:
        return LEADING
    wants = [consumer_view(shape, consumer, min_dims, rule) for consumer in bound]
    views = {(want.sizes, want.strides) for want in wants}
    notes = list(dict.fromkeys(want.note for want in wants if want.note is not None))
    note = "; ".join(notes) or None
    if len(views) == 1:
        return wants[0]._replace(note=note)
    said = dict.fromkeys(f"{c.op_type} input {c.input}: {want.padding if want.sizes else 'its ONNX layout'}"
                         for c, want in zip(bound, wants, strict=True))
    shown = ", ".join(list(said)[:4]) + (", ..." if len(said) > 4 else "")
    each = "" if rule < PER_OPERATOR_VERSION else "; bind each consumer's own desc (consumers[i].as_ctypes())"
    return ConsumerLayout("mixed", None, None, f"its consumers want different layouts ({shown}): it keeps its ONNX "
                                               f"layout{each}")


def consumer_view(shape: tuple[int, ...], consumer: Consumer, min_dims: int,
                  version: int | None = None) -> ConsumerLayout:
    """The layout one consumer of a constant of ``shape`` binds it at, by the rule of manifest format ``version``
    (None: the current one): LEADING (``sizes`` None) where that is the ONNX shape with leading 1s, and a ``note``
    where the consumer would want a layout the model does not say enough for.

    Example:
        >>> from dmlbridge.model.consumers import Consumer
        >>> add = Consumer("add", "Add", 1, None, (2, 3), "gpu", "ELEMENT_WISE_ADD", "broadcast")
        >>> consumer_view((3,), add, 1)
        ConsumerLayout(padding='broadcast', sizes=(2, 3), strides=(0, 1), note=None)
    """
    rule = PER_OPERATOR_VERSION if version is None else version
    leading = _with_ones(shape or (1,), None, min_dims)
    want, note = _wanted(consumer, shape, min_dims, rule)
    if rule >= PER_OPERATOR_VERSION and consumer.note is not None and consumer.note.startswith("not laid out"):
        note = consumer.note
    if want is None or (want.sizes, want.strides) == leading:
        return LEADING if note is None else LEADING._replace(note=note)
    return want._replace(note=note)


def _wanted(consumer: Consumer, shape: tuple[int, ...], min_dims: int,
            rule: int) -> tuple[ConsumerLayout | None, str | None]:
    """The layout one consumer wants (None: none, or the leading one) and why it cannot want one it would."""
    kind = consumer.layout_rule(rule)
    sizes = consumer.output_sizes
    named = consumer.named_sizes
    if kind == "broadcast" and named is not None and (len(named) < len(shape) or any(
            own not in (1, size) for own, size in zip(shape, named[len(named) - len(shape):], strict=True))):
        raise LayoutError(f"sizes {list(named)} do not broadcast the shape {list(shape)} whatever their names' sizes")
    if kind == "channel" and (len(shape) == 1 or (not shape and rule >= PER_OPERATOR_VERSION)):
        # (a scalar per-tensor one too: a QLinearConv's w_scale of one value is [1, 1, 1, 1])
        return _packed("channel", (1, math.prod(shape), *(1,) * (max(min_dims, consumer.dims or CHANNEL_DIMS) - 2)),
                       min_dims), None
    if kind == "spatial" and 3 <= len(shape) <= 5:
        count = max(min_dims, consumer.dims or CHANNEL_DIMS)
        if count > len(shape):
            return _packed("spatial", (*shape[:2], *(1,) * (count - len(shape)), *shape[2:]), min_dims), None
        return None, None
    if kind == "rank":
        if consumer.op_type == "QLinearMatMul" and consumer.input in _PER_ROW and math.prod(shape) > 1:
            return None, (f"{consumer.dml_operator} wants a per-row scale or zero point on the row axis "
                          "([..., M, 1]), which dmlbridge does not lay out: it keeps its ONNX layout")
        if consumer.op_type == "com.microsoft:RotaryEmbedding" and consumer.input == 1 and len(shape) < 2:
            return None, ("ELEMENT_WISE_ADD wants a position offset broadcast to [1, 1, batch, sequence], which "
                          "dmlbridge does not lay out: it keeps its ONNX layout")
        if consumer.dims is None:
            return None, _NOTES["gather" if consumer.op_type == "Gather" else "rank"].format(
                operator=consumer.dml_operator)
        return _packed("rank", (1,) * max(0, consumer.dims - len(shape)) + shape, min_dims), None
    if kind == "rnn":
        if len(shape) > _RNN_DIMS:
            return None, f"{consumer.op_type} takes 4-D tensors, and input {consumer.input} has {len(shape)}"
        return ConsumerLayout("rnn", (1,) * (_RNN_DIMS - len(shape)) + shape, None), None
    if kind == "axis":
        return _on_axis(shape, consumer, min_dims)
    if kind == "group":
        return _grouped(shape, consumer, min_dims)
    if kind != "broadcast":
        return None, None
    if consumer.op_type == "Gemm" and len(shape) <= 2:
        return (None, _free_note(consumer) or _NOTES["gemm"]) if sizes is None else \
            (_broadcast(shape, sizes, min_dims), None)
    if consumer.op_type in MATRIX_PRODUCTS and len(shape) >= 2:
        rank = len(sizes) if sizes is not None else consumer.dims
        if rank is not None and rank > GEMM_MOST_DIMS:
            return None, _NOTES["matmul folded"]
        if sizes is not None:
            return _broadcast(shape, sizes, min_dims), None
        if consumer.dims is not None:
            return _packed("rank", (1,) * max(0, consumer.dims - len(shape)) + shape, min_dims), \
                _free_note(consumer, "it has the output's rank") or _NOTES["matmul batch"]
        return None, _NOTES["matmul"]
    if consumer.op_type == "Gemm" or consumer.op_type in MATRIX_PRODUCTS:
        return None, None  # (a C or B of a shape GEMM reads as it is)
    if sizes is None:
        return None, _free_note(consumer) or _NOTES["broadcast"].format(operator=consumer.dml_operator)
    return _broadcast(shape, sizes, min_dims), None


def _free_note(consumer: Consumer, kept: str = "it keeps its ONNX layout") -> str | None:
    """The note of a consumer whose output sizes are free dimensions the graph inputs name (None: it has none);
    ``kept``: what it has meanwhile."""
    named = consumer.named_sizes
    if named is None:
        return None
    free = ", ".join(dict.fromkeys(repr(size) for size in named if isinstance(size, str)))
    shown = ", ".join(str(size) for size in named)
    return (f"{consumer.dml_operator} wants it at the output's sizes [{shown}], of which the model leaves {free} "
            f"free: {kept}; give them to load_plan (dim_params=, input_shapes=) for this "
            "consumer's desc at those sizes, or broadcast it at run time (dmlbridge.broadcast_desc)")


def _on_axis(shape: tuple[int, ...], consumer: Consumer,
             min_dims: int) -> tuple[ConsumerLayout | None, str | None]:
    """A (de)quantization's scale or zero point at its input's sizes: a scalar broadcast whole, a 1-D one on the
    node's axis (strides of 0 elsewhere); one of the input's own shape (blocked) as it is."""
    sizes = consumer.output_sizes
    if sizes is None:
        return None, _free_note(consumer) or _NOTES["broadcast"].format(operator=consumer.dml_operator)
    if math.prod(shape) == 1:
        return _broadcast((), sizes, min_dims), None
    if len(shape) == 1 and consumer.axis is not None and sizes[consumer.axis] == shape[0]:
        strides = tuple(1 if k == consumer.axis else 0 for k in range(len(sizes)))
        return ConsumerLayout("axis", *_with_ones(sizes, strides, min_dims)), None
    if shape == sizes:
        return None, None
    return None, (f"{consumer.op_type} input {consumer.input} of shape {list(shape)} is neither a scalar nor one "
                  f"value per element of axis {consumer.axis} of {list(sizes)}: it keeps its ONNX layout")


def _grouped(shape: tuple[int, ...], consumer: Consumer,
             min_dims: int) -> tuple[ConsumerLayout | None, str | None]:
    """A GroupNorm's gamma or beta at the sizes its normalization reads the NHWC input at (see the module
    docstring)."""
    sizes, groups = consumer.output_sizes, consumer.groups
    if sizes is None:
        return None, (f"{consumer.dml_operator} wants it at the input's sizes, which the model does not declare: it "
                      "keeps its ONNX layout; give the free dimensions (input_shapes, dim_params)")
    if groups is None or len(sizes) != 4 or shape != sizes[3:] or sizes[3] % groups:
        return None, (f"{consumer.op_type} input {consumer.input} of shape {list(shape)} is not one value per "
                      f"channel of {list(sizes)} in {groups} groups: it keeps its ONNX layout")
    batch, height, width, channels = sizes
    per_group = channels // groups
    return ConsumerLayout("group", *_with_ones((batch, per_group, height * width, groups), (0, 1, 0, per_group),
                                               min_dims)), None


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
