"""The binding list: a written plan's bindings as plain lines a native program reads without a JSON parser.

One line per buffer file (uploaded, or holding constants read on the CPU), per tensor (every converted entry,
with where it is read), per GPU consumer of a tensor (the desc its DirectML operator binds the same bytes at) and
per part of every quantized weight (in its blocked form where it has one, and in its split form): which buffer,
which offset and every DML_BUFFER_TENSOR_DESC field. docs/bindings.md is the format's specification;
``native/dmlupload.cpp`` reads it.

    >>> import os, tempfile, numpy as np, dmlbridge
    >>> from onnx import helper, numpy_helper
    >>> w = numpy_helper.from_array(np.ones((2, 3), np.float32), "my weight")
    >>> plan = dmlbridge.convert_model(helper.make_model(helper.make_graph([], "g", [], [], [w])),
    ...                                os.path.join(tempfile.mkdtemp(), "w"), progress=False)
    >>> print(binding_list(plan).splitlines()[3])
    tensor my%20weight 0 0 FLOAT32 0 2 2,3 - 24 256 none
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from dmlbridge.errors import InvalidArgumentError, LayoutError
from dmlbridge.tensor.descs import BufferTensorDesc
from dmlbridge.types.data_types import DmlDataType

if TYPE_CHECKING:  # (only for the annotation: the plan is read, never made here)
    from dmlbridge.placement.consumer_descs import PlanConsumer
    from dmlbridge.plan.upload_plan import UploadPlan

__all__ = ["BINDINGS_FORMAT", "binding_lines", "binding_list"]

BINDINGS_FORMAT = "dmlbridge-bindings 2"
"""The first line of a binding list: the format and its version."""

# Bytes written as they are in keys and file names; every other byte is %XX (docs/bindings.md).
_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/:")


def _encoded(text: str) -> str:
    return "".join(chr(b) if b in _PLAIN else f"%{b:02X}" for b in text.encode("utf-8", "surrogatepass"))


def _numbers(values: tuple[int, ...] | None) -> str:
    return "-" if values is None else ",".join(str(int(v)) for v in values)


def _desc_fields(desc: BufferTensorDesc) -> str:
    return " ".join([
        DmlDataType(desc.data_type).name, str(desc.flags), str(len(desc.sizes)), _numbers(desc.sizes),
        _numbers(desc.strides), str(desc.total_tensor_size_in_bytes), str(desc.guaranteed_base_offset_alignment),
    ])


def _consumer_desc(consumer: PlanConsumer) -> str:
    # The desc as_ctypes() binds, or "-" where it raises LayoutError: sizes the model leaves undecided (the
    # manifest's layout note says why and what to call at run time).
    try:
        consumer.as_ctypes()
    except LayoutError:
        return "-"
    assert consumer.buffer_desc is not None  # (as_ctypes returned it)
    return _desc_fields(consumer.buffer_desc)


def binding_lines(plan: UploadPlan) -> Iterator[str]:
    """The lines of :func:`binding_list` (without their line ends), one at a time.

    Example:
        >>> import os, tempfile, numpy as np, dmlbridge
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.ones(4, np.float16), "w")
        >>> plan = dmlbridge.convert_model(helper.make_model(helper.make_graph([], "g", [], [], [w])),
        ...                                os.path.join(tempfile.mkdtemp(), "w"), progress=False)
        >>> [line.split()[0] for line in binding_lines(plan)]
        ['dmlbridge-bindings', 'target', 'buffer', 'tensor']
        >>> w = numpy_helper.from_array(np.ones(3, np.float32), "b")
        >>> x = helper.make_tensor_value_info("x", 1, [2, 3])
        >>> add = helper.make_node("Add", ["x", "b"], ["y"], name="add")
        >>> plan = dmlbridge.convert_model(helper.make_model(helper.make_graph([add], "g", [x], [], [w])),
        ...                                os.path.join(tempfile.mkdtemp(), "w"), progress=False)
        >>> print(*list(binding_lines(plan))[3:], sep="\\n")
        tensor b 0 0 FLOAT32 0 2 2,3 0,1 12 256 gpu
        consumer b 0 add 1 ELEMENT_WISE_ADD FLOAT32 0 2 2,3 0,1 12 256
    """
    if not plan.buffers:
        raise InvalidArgumentError(
            "this plan was not written (plan_model): its bindings name buffer files; give the plan convert_model "
            "or load_plan returns"
        )
    yield BINDINGS_FORMAT
    yield f"target {plan.target.feature_level.dotted}"
    uploaded = plan.upload_buffer_count  # (the buffers after these hold constants read on the CPU)
    for index, buffer in enumerate(plan.buffers):
        where = "gpu" if index < uploaded else "cpu"
        yield f"buffer {index} {_encoded(os.path.basename(buffer.path))} {buffer.size} {where}"
    for entry in plan.converted:
        key = _encoded(entry.key)
        yield f"tensor {key} {entry.buffer} {entry.offset} {_desc_fields(entry.buffer_desc)} {entry.reads_on}"
        for index, consumer in enumerate(entry.consumers):
            if consumer.reads_on == "gpu":
                yield (f"consumer {key} {index} {_encoded(consumer.node)} {consumer.input} "
                       f"{consumer.dml_operator or '-'} {_consumer_desc(consumer)}")
    for key, record in plan.quantized_records.items():
        if record.skipped is not None:
            continue
        forms = [("split", record.parts())]
        if record.granularity == "block" and record.axis == len(record.shape) - 1 \
                and record.operator in (None, "DEQUANTIZE"):  # (ONNX Runtime's form of DEQUANTIZE, first)
            forms.insert(0, ("blocked", record.blocked_form()))
        yield f"quantized {_encoded(key)} {record.operator or '-'}"
        for form, parts in forms:
            for role, part in zip(("weight", "scales", "zero_points"), parts, strict=True):
                yield (f"part {_encoded(key)} {form} {role} {_encoded(part.key)} {part.buffer} {part.offset} "
                       f"{_desc_fields(part.buffer_desc)}")


def binding_list(plan: UploadPlan) -> str:
    """The binding list of a written plan (from ``convert_model`` or ``load_plan``): the text of docs/bindings.md,
    one line per buffer file, converted entry, GPU consumer and quantized part, each ending in ``\\n``.

    Example:
        >>> import os, tempfile, numpy as np, dmlbridge
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.arange(3, dtype=np.int64), "w")
        >>> plan = dmlbridge.convert_model(helper.make_model(helper.make_graph([], "g", [], [], [w])),
        ...                                os.path.join(tempfile.mkdtemp(), "w"), progress=False)
        >>> print(dmlbridge.binding_list(plan).splitlines()[-1])
        tensor w 0 0 INT64 0 1 3 - 24 256 none
    """
    return "".join(line + "\n" for line in binding_lines(plan))
