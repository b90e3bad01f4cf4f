"""A quantized weight's DirectML operator desc: DEQUANTIZE or ELEMENT_WISE_DEQUANTIZE_LINEAR over a record's three
parts and the output tensor a caller gives (:func:`dequantize_desc`, which ``QuantizedWeight.operator_desc``
calls with the parts of the form it chose).

The output is checked before anything is built: a buffer desc of the weight's sizes (in the form used) and of the
scales' data type, not owned by DirectML, whose TotalTensorSizeInBytes covers its sizes and strides.

    >>> import numpy as np, dmlbridge
    >>> x, s, z = (dmlbridge.prepare(np.zeros(4, dtype)) for dtype in (np.int8, np.float32, np.int8))
    >>> desc = dequantize_desc("w", "ELEMENT_WISE_DEQUANTIZE_LINEAR", (x, s, z), s.as_ctypes_tensor_desc())
    >>> desc.Type, desc.struct.kept["OutputTensor"].buffer_desc.DataType
    (34, 1)
"""

from __future__ import annotations

import ctypes
from typing import Any

from dmlbridge.errors import InvalidArgumentError
from dmlbridge.operator_descs.element_wise_structs import DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC
from dmlbridge.operator_descs.operator_structs import DML_DEQUANTIZE_OPERATOR_DESC, DML_OPERATOR_DESC, operator_desc
from dmlbridge.operator_descs.operator_types import DmlQuantizationType
from dmlbridge.tensor.descs import (
    DML_BUFFER_TENSOR_DESC,
    DML_TENSOR_DESC,
    DML_TENSOR_FLAG_OWNED_BY_DML,
    DML_TENSOR_TYPE_BUFFER,
    BufferDescMethods,
    BufferTensorDesc,
    tensor_desc_array,
)
from dmlbridge.tensor.layout import calc_buffer_tensor_size
from dmlbridge.types.data_types import DmlDataType

__all__ = ["DEQUANTIZE_OPERATORS", "dequantize_desc"]

DEQUANTIZE_OPERATORS = ("DEQUANTIZE", "ELEMENT_WISE_DEQUANTIZE_LINEAR")
"""The operators a record's ``operator`` names (``dequantize_operator``)."""


def dequantize_desc(key: str, operator: str, parts: tuple[BufferDescMethods, BufferDescMethods, BufferDescMethods],
                    output: Any) -> DML_OPERATOR_DESC:
    """The ``DML_OPERATOR_DESC`` of ``operator`` (``"DEQUANTIZE"``, with ``DML_QUANTIZATION_TYPE_SCALE_ZERO_POINT``
    and the scales and zero points as its two quantization tensors, or ``"ELEMENT_WISE_DEQUANTIZE_LINEAR"``) over
    ``parts`` (weight, scales, zero points: each bound at its own buffer and offset) writing ``output``. The
    result keeps its struct alive (``.struct``), and the struct every desc it points at (``.struct.kept``).

    ``output`` is a ``DML_TENSOR_DESC`` made by an ``as_ctypes_tensor_desc()`` (it keeps its buffer desc), a
    ``DML_BUFFER_TENSOR_DESC``, a ``BufferTensorDesc``, or anything with ``as_ctypes()`` (a ``PreparedTensor``);
    ``key`` names the record in the messages. InvalidArgumentError when it is none of these, or not the tensor
    the operator writes (see the module).

    Example:
        >>> import numpy as np, dmlbridge
        >>> x, s, z = (dmlbridge.prepare(np.zeros((2, 3), dtype)) for dtype in (np.uint8, np.float16, np.uint8))
        >>> desc = dequantize_desc("w", "DEQUANTIZE", (x, s, z), s)
        >>> desc.Type, desc.struct.QuantizationTensorCount, desc.struct.QuantizationType
        (174, 2, 2)
    """
    if operator not in DEQUANTIZE_OPERATORS:
        raise InvalidArgumentError(f"quantized weight {key!r} names the operator {operator!r}; a desc is built for "
                                   f"{' or '.join(DEQUANTIZE_OPERATORS)}")
    weight, scales, zero_points = parts
    tensor = _output(key, output)
    _check_output(key, operator, tensor.buffer_desc, weight.sizes, scales.dml_type)
    if operator == "DEQUANTIZE":
        struct: Any = DML_DEQUANTIZE_OPERATOR_DESC(
            InputTensor=weight.as_ctypes_tensor_desc(), QuantizationType=DmlQuantizationType.SCALE_ZERO_POINT,
            QuantizationTensorCount=2, QuantizationTensors=tensor_desc_array([scales, zero_points]),
            OutputTensor=tensor)
    else:
        struct = DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC(
            InputTensor=weight.as_ctypes_tensor_desc(), ScaleTensor=scales.as_ctypes_tensor_desc(),
            ZeroPointTensor=zero_points.as_ctypes_tensor_desc(), OutputTensor=tensor)
    return operator_desc(struct)


_FORMS = ("a DML_TENSOR_DESC from as_ctypes_tensor_desc(), a DML_BUFFER_TENSOR_DESC, a BufferTensorDesc or a "
          "PreparedTensor")


def _output(key: str, output: Any) -> DML_TENSOR_DESC:
    """``output`` as a DML_TENSOR_DESC that keeps its buffer desc (``.buffer_desc``); a given one is used as it is."""
    if isinstance(output, DML_TENSOR_DESC):
        buffer = getattr(output, "buffer_desc", None)
        if output.Type != DML_TENSOR_TYPE_BUFFER or not isinstance(buffer, DML_BUFFER_TENSOR_DESC) or \
                output.Desc != ctypes.addressof(buffer):
            raise InvalidArgumentError(
                f"quantized weight {key!r}: output= is a DML_TENSOR_DESC that does not hold the buffer desc it "
                f"points at; give {_FORMS}"
            )
        return output
    if isinstance(output, DML_BUFFER_TENSOR_DESC):
        return DML_TENSOR_DESC.pointing_at(output)
    as_ctypes = getattr(output, "as_ctypes", None)
    if isinstance(output, BufferTensorDesc) or (callable(as_ctypes) and not isinstance(output, type)):
        buffer = output.as_ctypes()
        if isinstance(buffer, DML_BUFFER_TENSOR_DESC):
            return DML_TENSOR_DESC.pointing_at(buffer)
    raise InvalidArgumentError(f"quantized weight {key!r}: output= is a {type(output).__name__}; give {_FORMS} (the "
                               "tensor the operator writes)")


def _check_output(key: str, operator: str, buffer: DML_BUFFER_TENSOR_DESC, sizes: tuple[int, ...],
                  scales: DmlDataType) -> None:
    """The output buffer desc against what ``operator`` writes: the weight's ``sizes``, the scales' type."""
    count = buffer.DimensionCount
    got = tuple(buffer.Sizes[:count]) if buffer.Sizes else None
    strides = tuple(buffer.Strides[:count]) if buffer.Strides else None
    data_type = next((t for t in DmlDataType if t == buffer.DataType), None)
    wanted = f"Sizes {list(sizes)} (the weight's) and DataType {scales.name} (the scales')"
    if got != sizes or data_type is not scales:
        shown = "no Sizes" if got is None else f"Sizes {list(got)}"
        raise InvalidArgumentError(
            f"quantized weight {key!r}: {operator} writes {wanted}, but output= has {shown} and DataType "
            f"{data_type.name if data_type is not None else buffer.DataType}; give the desc of a tensor of those "
            f"sizes and type, e.g. dmlbridge.prepare(np.zeros({tuple(sizes)}, np.{scales.numpy().name}))"
        )
    if buffer.Flags & DML_TENSOR_FLAG_OWNED_BY_DML:
        raise InvalidArgumentError(f"quantized weight {key!r}: output= is flagged DML_TENSOR_FLAG_OWNED_BY_DML, "
                                   "which only an input bound at initialization takes; give Flags 0")
    need = calc_buffer_tensor_size(scales, sizes, strides)
    if buffer.TotalTensorSizeInBytes < need:
        raise InvalidArgumentError(f"quantized weight {key!r}: output= has TotalTensorSizeInBytes "
                                   f"{buffer.TotalTensorSizeInBytes}; its sizes and strides need {need}")
