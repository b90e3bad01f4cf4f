"""The desc each consumer of a constant binds: one constant's bytes, written once, seen by each node input that
reads it at the sizes and strides its DirectML operator wants (:class:`PlanConsumer`).

A scalar read by forty Adds of different output sizes binds in each at that Add's sizes, with strides of 0; the
entry's own desc (``PlanEntry.desc()``) is the one its consumers agree on. Only Sizes and Strides differ between
them: the bytes, the offset, the type (but for an RNN's sequence_lens, bound as the unsigned type of its width, as
ONNX Runtime's provider binds it), the flags (but for an RNN's inputs, which LSTM, GRU and RNN do not take flagged
OWNED_BY_DML) and TotalTensorSizeInBytes are the entry's.

    >>> import dmlbridge, numpy as np
    >>> from onnx import helper, numpy_helper
    >>> x = helper.make_tensor_value_info("x", 1, [2, 3])
    >>> add = helper.make_node("Add", ["x", "b"], ["y"], name="add")
    >>> b = numpy_helper.from_array(np.ones(3, np.float32), "b")
    >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([add], "g", [x], [], [b])))
    >>> plan.entries["b"].consumers[0].desc()["Sizes"], plan.entries["b"].consumers[0].strides
    ([2, 3], (0, 1))
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dmlbridge.errors import InvalidArgumentError, LayoutError
from dmlbridge.model.consumer_layouts import LEADING, ConsumerLayout, consumer_view
from dmlbridge.model.consumers import Consumer
from dmlbridge.model.operators import Layout, ReadsOn, input_rule
from dmlbridge.tensor.descs import DML_BUFFER_TENSOR_DESC, DML_TENSOR_DESC, BufferTensorDesc
from dmlbridge.tensor.layout import buffer_bytes, emulated_int64, make_layout
from dmlbridge.types.data_types import DmlDataType, OnnxDataType

__all__ = ["PlanConsumer", "entry_layout", "plan_consumers"]

_UNSIGNED = {DmlDataType.INT32: DmlDataType.UINT32, DmlDataType.INT64: DmlDataType.UINT64,
             DmlDataType.INT16: DmlDataType.UINT16, DmlDataType.INT8: DmlDataType.UINT8}


def entry_layout(
    onnx_type: OnnxDataType, shape: tuple[int, ...], dml: DmlDataType, conversion: str, min_dims: int, max_dims: int,
    layout: ConsumerLayout = LEADING,
) -> tuple[tuple[int, ...], tuple[int, ...] | None, int]:
    """(sizes, desc strides, TotalTensorSizeInBytes) of an entry; LayoutError when DirectML cannot hold it.
    ``layout``: the one its consumers chose (:func:`dmlbridge.model.consumer_layouts.choose_layout`); its sizes and
    strides see the same bytes, the ONNX values in C order, so the size in bytes is the ONNX shape's."""
    if layout.sizes is None:
        made = make_layout(shape, None, min_dims, max_dims)
    else:
        made = make_layout(layout.sizes, layout.strides, min_dims, max_dims)
    if conversion == "emulate":
        strides, total = emulated_int64(made)
        return made.sizes, strides, total
    return made.sizes, made.strides, buffer_bytes(dml, made.span)


class PlanConsumer(NamedTuple):
    """One node input that reads a plan entry: what the model says of it (as :class:`Consumer` has it: ``node``,
    ``op_type``, ``input``, ``dims``, ``output_sizes``, ``reads_on``, ``dml_operator``, ``layout``, ``axis``,
    ``note``, ``named_sizes``, ``groups``) and the desc its DirectML operator binds the entry's bytes at
    (``buffer_desc``; None when it is not bound, ``reads_on`` not "gpu", or the entry was skipped).
    ``layout_note``: why the desc is not the one the operator wants (the model does not give the sizes), and what
    to do at run time.

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import helper, numpy_helper
        >>> node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")
        >>> shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
        >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([node], "g", [], [], [shape])))
        >>> consumer = plan.entries["shape"].consumers[0]
        >>> consumer.reads_on, consumer.desc()
        ('cpu', None)
    """

    node: str
    op_type: str
    input: int
    dims: int | None
    output_sizes: tuple[int, ...] | None
    reads_on: ReadsOn
    dml_operator: str | None
    layout: Layout | None
    axis: int | None
    note: str | None
    named_sizes: tuple[int | str, ...] | None
    groups: int | None
    buffer_desc: BufferTensorDesc | None
    layout_note: str | None
    entry: str
    """The key of the entry it reads."""

    @property
    def sizes(self) -> tuple[int, ...] | None:
        """The desc's Sizes (None when not bound)."""
        return None if self.buffer_desc is None else self.buffer_desc.sizes

    @property
    def strides(self) -> tuple[int, ...] | None:
        """The desc's Strides (None when packed, or not bound)."""
        return None if self.buffer_desc is None else self.buffer_desc.strides

    def desc(self) -> dict[str, Any] | None:
        """The DML_BUFFER_TENSOR_DESC fields by their DirectML names, as ``PlanEntry.desc()`` gives them (None when
        not bound)."""
        return None if self.buffer_desc is None else self.buffer_desc.as_dict()

    def as_ctypes(self) -> DML_BUFFER_TENSOR_DESC:
        """The ctypes DML_BUFFER_TENSOR_DESC to bind for this consumer: InvalidArgumentError when it is read on the
        CPU or by nothing (its values are ``plan.array(key)``), LayoutError when the model does not give its
        sizes (``layout_note`` says what to call at run time)."""
        if self.reads_on != "gpu":
            raise InvalidArgumentError(
                f"{self.op_type} input {self.input} of node {self.node!r} reads entry {self.entry!r} on "
                f"{'the CPU' if self.reads_on == 'cpu' else 'nothing'}: it binds no desc; its values are "
                f"plan.array({self.entry!r})")
        if self.buffer_desc is None:
            raise LayoutError(f"entry {self.entry!r} has no desc for {self.op_type} input {self.input} of node "
                              f"{self.node!r}: {self.layout_note or 'it was skipped'}")
        if self.layout_note is not None and self.layout != "rank":
            raise LayoutError(f"entry {self.entry!r} for {self.op_type} input {self.input} of node "
                              f"{self.node!r}: {self.layout_note}")
        return self.buffer_desc.as_ctypes()

    def as_ctypes_tensor_desc(self) -> DML_TENSOR_DESC:
        """A ctypes DML_TENSOR_DESC (type BUFFER) pointing at a fresh ``as_ctypes()`` struct it keeps alive."""
        return DML_TENSOR_DESC.pointing_at(self.as_ctypes())

    def facts(self) -> Consumer:
        """What the model says of this consumer, as the manifest records it."""
        return Consumer(*self[:12])

    def to_json(self, version: int | None = None) -> dict[str, Any]:
        """The manifest form in format ``version`` (the model's facts: the desc is derived from them)."""
        return self.facts().to_json(version)


def plan_consumers(
    key: str, shape: tuple[int, ...], consumers: tuple[Consumer, ...], buffer_desc: BufferTensorDesc | None,
    onnx_type: OnnxDataType, conversion: str | None, min_dims: int, max_dims: int, version: int | None = None,
) -> tuple[PlanConsumer, ...]:
    """Each consumer of entry ``key`` with the desc its operator binds (see the module docstring), by the rule of
    manifest format ``version`` (None: the current one)."""
    made = []
    for consumer in consumers:
        desc: BufferTensorDesc | None = None
        note: str | None = None
        if consumer.reads_on == "gpu" and buffer_desc is not None and conversion is not None:
            view = consumer_view(shape, consumer, min_dims, version)
            note = view.note
            dml = DmlDataType(buffer_desc.data_type)
            try:
                sizes, strides, _ = entry_layout(onnx_type, shape, dml, conversion, min_dims, max_dims, view)
            except LayoutError as exc:
                note = f"{consumer.op_type} input {consumer.input}: {exc}"
            else:
                rule = input_rule("", consumer.op_type, None, consumer.input) if consumer.layout else None
                desc = buffer_desc._replace(
                    data_type=_UNSIGNED.get(dml, dml) if rule is not None and rule.unsigned else dml,
                    sizes=sizes, strides=strides,
                    flags=0 if rule is not None and not rule.takes_owned else buffer_desc.flags)
        made.append(PlanConsumer(*consumer, desc, note, key))
    return tuple(made)
