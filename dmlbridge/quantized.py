"""Quantized weights: MatMulNBits, blocked DequantizeLinear and GatherBlockQuantized as DirectML descs.

ONNX models keep 4-bit weights as operator inputs, not as INT4 tensors: ``com.microsoft`` MatMulNBits (B uint8
``[N, k_blocks, blob]``, scales ``[N, k_blocks]``, packed zero points), opset-21 DequantizeLinear with a
``block_size``, and ``com.microsoft`` GatherBlockQuantized. For each such node whose inputs are constants, a
:class:`QuantizedWeight` gives three DML_BUFFER_TENSOR_DESCs over the upload image (weight, scales, zero points)
that DirectML's DEQUANTIZE (feature level 6.3) or DEQUANTIZE_LINEAR consume as they are.

The layout rule: the three parts share one set of ``sizes``, the logical weight's shape with the quantized axis
of length L split into ``(k_blocks, block_size)`` when blocks are longer than one element; the weight covers whole
blocks (``k_blocks * block_size >= L``; the logical values are the first L). Scales and zero points repeat over a
block by a stride of 0 (over everything, per tensor). Elementwise ``(weight - zero_point) * scale`` over these
sizes, the first L along the axis kept, is :meth:`QuantizedWeight.dequantize`.

The bytes come from the model's own constants where they already fit (MatMulNBits' B is whole blocks of nibbles
in DirectML's order: a UINT4 view of its UINT8 entry, no second copy). Where they do not (a target without 4-bit
types, 2-bit values, a quantized axis that is not whole blocks, zero points the model leaves to their default),
*derived* constants are added to the image, keyed ``<node key>/<part>`` (:mod:`dmlbridge.quantized_ops` finds
the nodes and makes them). Zero points are always explicit.

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper
    >>> import dmlbridge
    >>> b = numpy_helper.from_array(np.full((4, 2, 8), 0x98, np.uint8), "B")
    >>> s = numpy_helper.from_array(np.full((4, 2), 0.5, np.float32), "S")
    >>> node = helper.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], "mm", domain="com.microsoft", K=32, N=4,
    ...                         bits=4, block_size=16)
    >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([node], "g", [], [], [b, s])))
    >>> q = plan.quantized["mm"]
    >>> q.sizes, q.weight.key, q.weight.dml_type.name, q.zero_points.key, q.scales.strides
    ((4, 2, 16), 'B', 'UINT4', 'mm/zero_points', (2, 1, 0))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

import numpy as np

from dmlbridge.decode import decode
from dmlbridge.descs import BufferDescMethods, BufferTensorDesc
from dmlbridge.errors import InvalidArgumentError
from dmlbridge.layout import calc_buffer_tensor_size
from dmlbridge.planning import PlanEntry
from dmlbridge.target import Target
from dmlbridge.types import DmlDataType, OnnxDataType

__all__ = ["QUANTIZED_OPS", "Granularity", "PartSpec", "QuantizedPart", "QuantizedSpec", "QuantizedWeight",
           "quantized_views"]

Granularity = Literal["tensor", "axis", "block"]
QUANTIZED_OPS = {
    "com.microsoft:MatMulNBits": "MatMulNBits",
    "DequantizeLinear": "DequantizeLinear",
    "com.microsoft:GatherBlockQuantized": "GatherBlockQuantized",
}
"""The op types (as consumers name them: another domain's as ``domain:Op``) whose weights are described."""

_PARTS = ("weight", "scales", "zero_points")


@dataclass(frozen=True)
class QuantizedPart(BufferDescMethods):
    """One part of a quantized weight: a DML_BUFFER_TENSOR_DESC over the bytes of plan entry ``key``, at
    ``offset`` (absolute in buffer file ``buffer``, the entry's own offset: a multiple of 16).

    Example:
        >>> part = QuantizedPart("B", 0, 256, DmlDataType.UINT4, (4, 2, 16), None, 64, 256, 0)
        >>> part.desc()["Sizes"], part.desc()["TotalTensorSizeInBytes"]
        ([4, 2, 16], 64)
    """

    key: str
    buffer: int
    offset: int
    dml_type: DmlDataType
    sizes: tuple[int, ...]
    strides: tuple[int, ...] | None
    total_tensor_size_in_bytes: int
    guaranteed_base_offset_alignment: int
    flags: int = 0

    @property
    def buffer_desc(self) -> BufferTensorDesc:
        """The DML_BUFFER_TENSOR_DESC fields as one value (``desc()``, ``as_ctypes()``: BufferDescMethods)."""
        return BufferTensorDesc(self.dml_type, self.flags, self.sizes, self.strides, self.total_tensor_size_in_bytes,
                                self.guaranteed_base_offset_alignment)


class PartSpec(NamedTuple):
    """How a part is seen: over the entry ``key`` with these sizes and element strides (None: packed), as the
    entry's own DML type or, for ``as_type``, its bytes read as that 4-bit type."""

    key: str
    sizes: tuple[int, ...]
    strides: tuple[int, ...] | None
    as_type: DmlDataType | None = None


class QuantizedSpec(NamedTuple):
    """What a quantized node's weight is, found from the model before planning (see :func:`find_quantized`)."""

    key: str
    op: str
    origin: str
    bits: int
    signed: bool
    granularity: Granularity
    axis: int | None
    block_size: int
    shape: tuple[int, ...]
    output_type: OnnxDataType
    parts: tuple[PartSpec, PartSpec, PartSpec] | None
    skipped: str | None
    zero_scales: bool | None = None
    bias: str | None = None


@dataclass(frozen=True)
class QuantizedWeight:
    """One quantized node's weight as DirectML sees it (see the module docstring).

    ``op`` is ``"MatMulNBits"``, ``"DequantizeLinear"`` or ``"GatherBlockQuantized"``; ``bits`` the width of
    the quantized values in the model (2, 4 or 8; 0 in a record skipped before it was known); ``shape`` the logical
    weight (``[N, K]`` for MatMulNBits); ``sizes`` the DML sizes its three parts share; ``weight``, ``scales`` and
    ``zero_points`` the parts (None, with ``skipped`` saying why, when the weight cannot be expressed exactly);
    ``zero_scales`` whether a scale is 0 (undefined behaviour in DirectML's dequantize; None when the scales live
    in external data, which planning does not read).

    Example:
        >>> import numpy as np, dmlbridge, os, tempfile
        >>> from onnx import helper, numpy_helper
        >>> x = numpy_helper.from_array(np.array([[1, -2], [3, 4]], np.int8), "x")
        >>> s = numpy_helper.from_array(np.array([0.5, 2.0], np.float32), "s")
        >>> node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"], "dq", axis=0)
        >>> model = helper.make_model(helper.make_graph([node], "g", [], [], [x, s]))
        >>> plan = dmlbridge.convert_model(model, os.path.join(tempfile.mkdtemp(), "w"), progress=False)
        >>> plan.quantized["dq"].granularity, plan.quantized["dq"].dequantize().tolist()
        ('axis', [[0.5, -1.0], [6.0, 8.0]])
    """

    key: str
    op: str
    origin: str
    bits: int
    signed: bool
    granularity: Granularity
    axis: int | None
    block_size: int
    shape: tuple[int, ...]
    output_type: OnnxDataType
    sizes: tuple[int, ...] | None
    weight: QuantizedPart | None
    scales: QuantizedPart | None
    zero_points: QuantizedPart | None
    zero_scales: bool | None = False
    skipped: str | None = None
    bias: str | None = None
    """MatMulNBits' ``bias`` input, when it is a constant: the key of its plain entry (DirectML's GEMM takes it
    as C)."""
    _read: Callable[[str], np.ndarray] | None = field(default=None, repr=False, compare=False)

    def parts(self) -> tuple[QuantizedPart, QuantizedPart, QuantizedPart]:
        """(weight, scales, zero_points); InvalidArgumentError when the weight was skipped."""
        if self.weight is None or self.scales is None or self.zero_points is None:
            raise InvalidArgumentError(f"quantized weight {self.key!r} was skipped ({self.skipped}); it has no descs")
        return self.weight, self.scales, self.zero_points

    def dequantize(self) -> np.ndarray:
        """The weight's values, of ``shape``, in the dtype ONNX Runtime outputs (the scales' ONNX type), read from
        the image through the three descs: ``(weight - zero_point) * scale`` elementwise, computed in float32 and
        rounded once to the output type."""
        parts = self.parts()
        if self._read is None:
            raise InvalidArgumentError("this plan was not written (plan_model); there is no image to dequantize")
        w, zp, s = (decode(self._read(p.key), p.dml_type, p.sizes, p.strides) for p in (parts[0], parts[2], parts[1]))
        values = (w.astype(np.int32) - zp.astype(np.int32)).astype(np.float32) * s.astype(np.float32)
        return _logical(values.astype(self.output_type.numpy()), self.shape, self.axis, self.block_size,
                        self.granularity)

    def blocked_form(self) -> tuple[QuantizedPart, QuantizedPart, QuantizedPart]:
        """The three parts as ONNX Runtime's DirectML EP binds them to DEQUANTIZE: no split, the weight
        ``[..., K']`` (K' = k_blocks * block_size), scales and zero points ``[..., k_blocks]`` with their own
        strides (zero-point rows keep their padded stride). Only for a blocked weight quantized on its last axis.

        Example:
            >>> import numpy as np, dmlbridge
            >>> from onnx import helper, numpy_helper
            >>> b = numpy_helper.from_array(np.zeros((4, 3, 8), np.uint8), "B")
            >>> s = numpy_helper.from_array(np.ones((4, 3), np.float32), "S")
            >>> z = numpy_helper.from_array(np.zeros((4, 2), np.uint8), "Z")
            >>> node = helper.make_node("MatMulNBits", ["A", "B", "S", "Z"], ["Y"], "mm", domain="com.microsoft",
            ...                         K=48, N=4, bits=4, block_size=16)
            >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([node], "g", [], [], [b, s, z])))
            >>> [(p.sizes, p.strides) for p in plan.quantized["mm"].blocked_form()]
            [((4, 48), None), ((4, 3), (3, 1)), ((4, 3), (4, 1))]
        """
        weight, scales, zero_points = self.parts()
        if self.granularity != "block" or self.axis != len(self.shape) - 1 or self.sizes is None:
            raise InvalidArgumentError(
                f"quantized weight {self.key!r} is not blocked on its last axis; the blocked form is for those"
            )
        lead = len(self.sizes) - len(self.shape) - 1  # (padding 1s before the logical dimensions)
        merged = (*self.sizes[lead:-2], self.sizes[-2] * self.sizes[-1])

        def unsplit(part: QuantizedPart, sizes: tuple[int, ...]) -> QuantizedPart:
            strides = None if part.strides is None else part.strides[lead:-1]
            return replace(part, sizes=sizes, strides=strides,
                           total_tensor_size_in_bytes=calc_buffer_tensor_size(part.dml_type, sizes, strides))

        blocks = (*self.sizes[lead:-1],)
        return unsplit(weight, merged), unsplit(scales, blocks), unsplit(zero_points, blocks)

    def to_json(self) -> dict[str, Any]:
        """The manifest form of this record."""
        return {
            "key": self.key, "op": self.op, "origin": self.origin, "bits": self.bits, "signed": self.signed,
            "granularity": self.granularity, "axis": self.axis, "block_size": self.block_size,
            "shape": list(self.shape), "output_type": self.output_type.name,
            "sizes": None if self.sizes is None else list(self.sizes),
            **{name: None if part is None else _part_json(part)
               for name, part in zip(_PARTS, (self.weight, self.scales, self.zero_points), strict=True)},
            "zero_scales": self.zero_scales, "skipped": self.skipped, "bias": self.bias,
        }


def _part_json(part: QuantizedPart) -> dict[str, Any]:
    return {"key": part.key, "buffer": part.buffer, "offset": part.offset, "desc": part.desc()}


def _logical(values: np.ndarray, shape: tuple[int, ...], axis: int | None, block_size: int,
             granularity: Granularity) -> np.ndarray:
    """The values over the shared sizes as the logical weight: padding dimensions dropped, the split axis joined
    and cut to its length."""
    split = granularity == "block" and block_size > 1 and axis is not None
    rank = len(shape) + (1 if split else 0)
    values = values.reshape(values.shape[len(values.shape) - rank :]) if rank else values.reshape(())
    if split:
        assert axis is not None
        joined = (*values.shape[:axis], values.shape[axis] * values.shape[axis + 1], *values.shape[axis + 2 :])
        values = values.reshape(joined)
        values = values[(slice(None),) * axis + (slice(0, shape[axis]),)]
    return np.ascontiguousarray(values.reshape(shape))


# --- the views (after planning) ----------------------------------------------------------------------------------


def quantized_views(specs: list[QuantizedSpec], entries: Mapping[str, PlanEntry], min_dims: int, target: Target,
                    alignment: int) -> dict[str, QuantizedWeight]:
    """Each spec's record over the planned entries: its parts' buffers, offsets and DML types."""
    records: dict[str, QuantizedWeight] = {}
    for spec in specs:
        base = QuantizedWeight(spec.key, spec.op, spec.origin, spec.bits, spec.signed, spec.granularity, spec.axis,
                               spec.block_size, spec.shape, spec.output_type, None, None, None, None,
                               spec.zero_scales, spec.skipped, spec.bias)
        if spec.parts is None:
            records[spec.key] = base
            continue
        rank = max(len(spec.parts[0].sizes), min_dims)
        if rank > target.max_dimension_count:
            records[spec.key] = replace(base, skipped=f"its sizes take {rank} dimensions; the target allows "
                                                      f"{target.max_dimension_count}")
            continue
        parts, why = [], None
        for spec_part in spec.parts:
            entry = entries.get(spec_part.key)
            if entry is None or entry.skipped is not None:
                why = (f"its constant {spec_part.key!r} is not in the plan" if entry is None else
                       f"its constant {spec_part.key!r} was skipped ({entry.skipped})")
                break
            parts.append(_part(spec_part, entry, rank, alignment))
        if why is not None:
            records[spec.key] = replace(base, skipped=why)
            continue
        weight, scales, zero_points = parts
        records[spec.key] = replace(base, sizes=weight.sizes, weight=weight, scales=scales, zero_points=zero_points)
    return records


def _part(spec: PartSpec, entry: PlanEntry, rank: int, alignment: int) -> QuantizedPart:
    entry = entry.as_converted()  # type: ignore[assignment]
    assert entry.dml_type is not None and entry.offset is not None and entry.buffer is not None
    assert entry.total_tensor_size_in_bytes is not None
    dml = spec.as_type or entry.dml_type
    pad = rank - len(spec.sizes)
    sizes = (1,) * pad + spec.sizes
    strides = None if spec.strides is None else (0,) * pad + spec.strides
    if entry.conversion == "emulate":  # (not a quantized type: never; kept honest)
        raise InvalidArgumentError(f"{spec.key!r} is emulated; it cannot be a quantized part")
    total = calc_buffer_tensor_size(dml, sizes, strides)
    if total > entry.total_tensor_size_in_bytes:
        raise InvalidArgumentError(f"internal error: the view of {spec.key!r} needs {total} bytes, its entry holds "
                                   f"{entry.total_tensor_size_in_bytes}")
    return QuantizedPart(spec.key, entry.buffer, entry.offset, dml, sizes, strides, total, alignment, entry.flags)

