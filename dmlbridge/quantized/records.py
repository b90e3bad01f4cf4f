"""Quantized weights: MatMulNBits, blocked DequantizeLinear and GatherBlockQuantized as DirectML descs.

ONNX models keep 4-bit weights as operator inputs, not as INT4 tensors: ``com.microsoft`` MatMulNBits (B uint8
``[N, k_blocks, blob]``, scales ``[N, k_blocks]``, packed zero points), opset-21 DequantizeLinear with a
``block_size``, and ``com.microsoft`` GatherBlockQuantized. For each such node whose inputs are constants, a
:class:`QuantizedWeight` gives three DML_BUFFER_TENSOR_DESCs over the upload image (weight, scales, zero points)
and the DirectML operator that consumes them at the target's feature level (``operator``:
:func:`dequantize_operator`): DEQUANTIZE from feature level 6.3, ELEMENT_WISE_DEQUANTIZE_LINEAR below. A weight
that operator cannot take at that level is skipped, with the reason.

The layout rule: the three parts share one set of ``sizes``, the logical weight's shape with the quantized axis
of length L split into ``(k_blocks, block_size)`` when blocks are longer than one element; the weight covers whole
blocks (``k_blocks * block_size >= L``; the logical values are the first L). Scales and zero points repeat over a
block by a stride of 0 (over everything, per tensor). Elementwise ``(weight - zero_point) * scale`` over these
sizes, the first L along the axis kept, is :meth:`QuantizedWeight.dequantize`.

The bytes come from the model's own constants where they already fit (MatMulNBits' B is whole blocks of nibbles
in DirectML's order: a UINT4 view of its UINT8 entry, no second copy). Where they do not (a target without 4-bit
types, 2-bit values, a quantized axis that is not whole blocks, zero points the model leaves to their default),
*derived* constants are added to the image, keyed ``<node key>/<part>`` (:mod:`dmlbridge.quantized.nodes` finds
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

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

import numpy as np

from dmlbridge.errors import InvalidArgumentError, ManifestError, TensorTooLargeError, counted
from dmlbridge.onnx.tensor_proto import DEFAULT_MAX_TENSOR_BYTES, check_max_tensor_bytes
from dmlbridge.operator_descs.operator_structs import DML_OPERATOR_DESC
from dmlbridge.placement.entries import PlanEntry
from dmlbridge.quantized.dequantize_desc import dequantize_desc
from dmlbridge.system.aligned import empty_aligned
from dmlbridge.tensor.descs import BufferDescMethods, BufferTensorDesc
from dmlbridge.tensor.layout import calc_buffer_tensor_size, packed_strides, span_of
from dmlbridge.types.data_types import DmlDataType, FeatureLevel, OnnxDataType
from dmlbridge.types.target import Target

__all__ = [
    "QUANTIZED_OPS",
    "DequantizeOperator",
    "Granularity",
    "PartSpec",
    "QuantizedPart",
    "QuantizedSpec",
    "QuantizedWeight",
    "check_zero_scales",
    "dequantize_operator",
    "part_keys",
    "quantized_views",
    "spec_part_keys",
]

Granularity = Literal["tensor", "axis", "block"]
QUANTIZED_OPS = {
    "com.microsoft:MatMulNBits": "MatMulNBits",
    "DequantizeLinear": "DequantizeLinear",
    "com.microsoft:DequantizeLinear": "DequantizeLinear",
    "com.microsoft:GatherBlockQuantized": "GatherBlockQuantized",
}
"""The op types (as consumers name them: another domain's as ``domain:Op``) whose weights are described.
``com.microsoft`` DequantizeLinear (what ONNX Runtime's quantizer writes for 4- and 16-bit types before opset 21)
is the ONNX one's per-tensor and per-axis forms, with the same formula, and has the record op
``"DequantizeLinear"``."""

_PARTS = ("weight", "scales", "zero_points")
_CHUNK_ELEMENTS = 1 << 18
"""How many output elements :meth:`QuantizedWeight.dequantize` computes at a time (its temporaries: about 40
bytes per element, 10 MiB)."""
_INTEGERS = frozenset({DmlDataType.INT8, DmlDataType.UINT8, DmlDataType.INT16, DmlDataType.UINT16,
                       DmlDataType.INT32, DmlDataType.UINT32})
_FLOAT_SCALES = frozenset({DmlDataType.FLOAT32, DmlDataType.FLOAT16})
SIGNED_TYPES = frozenset({DmlDataType.INT4, DmlDataType.INT8, DmlDataType.INT16, DmlDataType.INT32})
"""The signed DML types a quantized weight can have."""


class DequantizeOperator(NamedTuple):
    """The DirectML operator that dequantizes a weight at a feature level, and what its tensor-support table
    takes there: ``inputs`` (the weight's and zero point's DML types), ``scales`` (the scales' DML types, also
    the output's) and ``dims`` (fewest and most dimensions)."""

    name: str
    inputs: frozenset[DmlDataType]
    scales: frozenset[DmlDataType]
    dims: tuple[int, int]


def dequantize_operator(level: FeatureLevel) -> DequantizeOperator:
    """The operator that consumes a quantized weight's parts at ``level``: DEQUANTIZE from 6.3 (INT4, UINT4,
    INT8, UINT8; FLOAT32 or FLOAT16 scales; 1 to 8 dimensions), ELEMENT_WISE_DEQUANTIZE_LINEAR below (never
    4-bit types; FLOAT16 scales from 6.0; 1 to 8 dimensions from 3.0 and exactly 4 before; INT8 and wider from
    2.1, UINT8 only before). The tables are DirectML's tensor-support tables of each operator
    (docs/directml-facts.md).

    Example:
        >>> dequantize_operator(FeatureLevel.FL_5_0).name, sorted(t.name for t in dequantize_operator(
        ...     FeatureLevel.FL_5_0).scales)
        ('ELEMENT_WISE_DEQUANTIZE_LINEAR', ['FLOAT32'])
    """
    if level >= FeatureLevel.FL_6_3:
        return DequantizeOperator("DEQUANTIZE", frozenset({DmlDataType.INT4, DmlDataType.UINT4, DmlDataType.INT8,
                                                           DmlDataType.UINT8}), _FLOAT_SCALES, (1, 8))
    name = "ELEMENT_WISE_DEQUANTIZE_LINEAR"
    if level >= FeatureLevel.FL_6_0:
        return DequantizeOperator(name, _INTEGERS, _FLOAT_SCALES, (1, 8))
    if level >= FeatureLevel.FL_3_0:
        return DequantizeOperator(name, _INTEGERS, frozenset({DmlDataType.FLOAT32}), (1, 8))
    if level >= FeatureLevel.FL_2_1:
        return DequantizeOperator(name, _INTEGERS, frozenset({DmlDataType.FLOAT32}), (4, 4))
    return DequantizeOperator(name, frozenset({DmlDataType.UINT8}), frozenset({DmlDataType.FLOAT32}), (4, 4))


def quantized_rank(dims: int, min_dims: int, operator: DequantizeOperator) -> int:
    """The dimension count of a record's parts: its sizes' own ``dims`` raised to ``min_dims``, or exactly 4
    where the operator takes exactly 4 (more is then not a record: the caller skips it)."""
    return 4 if operator.dims == (4, 4) and max(dims, min_dims) <= 4 else max(dims, min_dims)


@dataclass(frozen=True)
class QuantizedPart(BufferDescMethods):
    """One part of a quantized weight: a DML_BUFFER_TENSOR_DESC over the bytes of plan entry ``key``, at
    ``offset`` (absolute in buffer file ``buffer``, the entry's own offset: a multiple of 16).

    Example:
        >>> part = QuantizedPart("B", 0, 256, BufferTensorDesc(DmlDataType.UINT4, 0, (4, 2, 16), None, 64, 256))
        >>> part.sizes, part.desc()["TotalTensorSizeInBytes"]
        ((4, 2, 16), 64)
    """

    key: str
    buffer: int
    offset: int
    buffer_desc: BufferTensorDesc
    """The DML_BUFFER_TENSOR_DESC fields (``dml_type``, ``sizes``, ... read them by name; BufferDescMethods)."""


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

    ``op`` is ``"MatMulNBits"``, ``"DequantizeLinear"`` (of the ONNX or the ``com.microsoft`` domain) or
    ``"GatherBlockQuantized"``; ``bits`` the width of the quantized values in the model (2, 4 or 8; 0 in a record
    skipped before it was known); ``block_size`` the length of a block along ``axis`` (the node's, or the axis'
    length when the node's is longer: one block either way); ``shape`` the logical weight (``[N, K]`` for
    MatMulNBits); ``sizes`` the DML sizes its three parts share; ``weight``, ``scales`` and ``zero_points`` the
    parts (None, with ``skipped`` saying why, when the weight cannot be expressed exactly or no DirectML operator
    takes it at the target's level); ``zero_scales`` whether a scale is 0 (undefined behaviour in DirectML's
    dequantize; None when the scales live in external data, which planning does not read); ``operator`` the
    DirectML operator that consumes the parts at the target's feature level (:func:`dequantize_operator`: None in a
    skipped record and in one read from a manifest of format 1 to 4, which did not record it).

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
    operator: str | None = None
    """``"DEQUANTIZE"`` or ``"ELEMENT_WISE_DEQUANTIZE_LINEAR"``: the operator that takes the parts at the
    target's level (None when skipped, or read from a manifest of format 1 to 4)."""
    _read: Callable[..., np.ndarray] | None = field(default=None, repr=False, compare=False)

    def parts(self) -> tuple[QuantizedPart, QuantizedPart, QuantizedPart]:
        """(weight, scales, zero_points); InvalidArgumentError when the weight was skipped."""
        if self.weight is None or self.scales is None or self.zero_points is None:
            raise InvalidArgumentError(f"quantized weight {self.key!r} was skipped ({self.skipped}); it has no descs")
        return self.weight, self.scales, self.zero_points

    def dequantize(self, *, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> np.ndarray:
        """The weight's values, of ``shape``, in the dtype ONNX Runtime outputs (the scales' ONNX type), read from
        the image through the three descs: ``(weight - zero_point) * scale`` elementwise, computed in float32 and
        rounded once to the output type.

        The output (``shape``'s elements times the output type's size) must fit ``max_tensor_bytes``, checked
        before anything is allocated (TensorTooLargeError), as must each part's entry; the values are computed a
        slice at a time, so the memory used is the output, the parts' entries and about 10 MiB. A record whose
        ``zero_scales`` says otherwise than the scales it reads is refused (ManifestError)."""
        parts = self.parts()
        if self._read is None:
            raise InvalidArgumentError("this plan was not written (plan_model); there is no image to dequantize")
        limit = check_max_tensor_bytes(max_tensor_bytes)
        out_type = np.dtype(self.output_type.numpy())
        dims = self.shape or (1,)
        need = math.prod(dims) * out_type.itemsize
        if need > limit:
            raise TensorTooLargeError(
                f"quantized weight {self.key!r} decodes to {counted(need, 'byte')} ({self.output_type.name} "
                f"{list(self.shape)}), more than max_tensor_bytes={max_tensor_bytes}; pass a larger max_tensor_bytes= "
                "to dequantize it if you have the memory"
            )
        weight, scales, zero_points = (_Gather(part, self._read(part.key, max_tensor_bytes=limit), self)
                                       for part in parts)
        try:
            out = np.empty(dims, dtype=out_type)
        except MemoryError:
            raise TensorTooLargeError(
                f"quantized weight {self.key!r} decodes to {need} bytes and the allocation failed; free memory"
            ) from None
        zero = False
        for where, offsets in _chunks(dims):
            w, z, s = (g.values(offsets) for g in (weight, zero_points, scales))
            s32 = s.astype(np.float32)
            zero = zero or bool((s32 == 0).any())
            out[where] = ((w - z).astype(np.float32) * s32).astype(out_type)
        if self.zero_scales is not None and zero != self.zero_scales:
            raise ManifestError(f"quantized weight {self.key!r} says zero_scales={self.zero_scales} but its scales "
                                f"{'have' if zero else 'have no'} 0; the record does not match its image")
        return out.reshape(self.shape)

    def blocked_form(self) -> tuple[QuantizedPart, QuantizedPart, QuantizedPart]:
        """The three parts in the form ONNX Runtime's DirectML EP binds to DEQUANTIZE: no split, the weight
        ``[..., K']`` (K' = k_blocks * block_size), scales and zero points ``[..., k_blocks]`` with their own
        strides (zero-point rows keep their padded stride, which ONNX Runtime's packed desc does not). Only for a
        blocked weight quantized on its last axis.

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
        if self.operator not in (None, "DEQUANTIZE"):
            raise InvalidArgumentError(
                f"quantized weight {self.key!r} is consumed by {self.operator} at this target's feature level, which "
                "takes the split form (the parts' shared sizes); the blocked form is DEQUANTIZE's (feature level 6.3)"
            )
        split = self.block_size > 1
        lead = len(self.sizes) - len(self.shape) - (1 if split else 0)  # (padding 1s before the logical dimensions)
        if lead < 0:
            raise InvalidArgumentError(f"quantized weight {self.key!r} has sizes {list(self.sizes)} that are not "
                                       f"its shape {list(self.shape)} split into blocks")
        logical = self.sizes[lead:]
        merged = (*logical[:-2], logical[-2] * logical[-1]) if split else logical

        def unsplit(part: QuantizedPart, sizes: tuple[int, ...]) -> QuantizedPart:
            strides = None if part.strides is None else part.strides[lead : len(part.strides) - (1 if split else 0)]
            total = calc_buffer_tensor_size(part.dml_type, sizes, strides)
            return replace(part, buffer_desc=part.buffer_desc._replace(sizes=sizes, strides=strides,
                                                                       total_tensor_size_in_bytes=total))

        blocks = logical[:-1] if split else logical
        return unsplit(weight, merged), unsplit(scales, blocks), unsplit(zero_points, blocks)

    def operator_desc(self, *, output: Any, form: Literal["blocked", "split"] | None = None) -> DML_OPERATOR_DESC:
        """The ``DML_OPERATOR_DESC`` of ``operator`` over this record's parts, writing ``output`` (the dequantized
        tensor's desc: a ``DML_TENSOR_DESC`` from ``as_ctypes_tensor_desc()``, a ``DML_BUFFER_TENSOR_DESC``, a
        ``BufferTensorDesc`` or a ``PreparedTensor``), ready for CreateOperator, ``dmlbridge.gpu.run_operator`` or
        a graph. It keeps its ``dmlbridge.gpu.DML_DEQUANTIZE_OPERATOR_DESC`` (or ELEMENT_WISE_DEQUANTIZE_LINEAR's)
        alive as ``.struct``, and the struct every desc it points at. Bind its inputs in the order weight, scales, zero
        points, each part in the resource of its ``buffer`` at its ``offset``.

        ``form`` picks the parts: ``"blocked"`` (:meth:`blocked_form`, DEQUANTIZE only) or ``"split"`` (the parts
        themselves, sizes ``sizes``); by default the blocked form for DEQUANTIZE of a weight blocked on its last
        axis (the form ONNX Runtime binds), the split form otherwise. ``output`` must have that form's weight sizes
        and the scales' type, Flags 0 and the bytes its sizes need. InvalidArgumentError otherwise, for a skipped
        record and for one read from a manifest of format 1 to 4 (no ``operator``). ``dequantize()`` is the same
        values on the CPU.

        Example:
            >>> import numpy as np, dmlbridge
            >>> from onnx import helper, numpy_helper
            >>> b = numpy_helper.from_array(np.full((4, 3, 8), 0x98, np.uint8), "B")
            >>> s = numpy_helper.from_array(np.full((4, 3), 0.5, np.float32), "S")
            >>> node = helper.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], "mm", domain="com.microsoft",
            ...                         K=48, N=4, bits=4, block_size=16)
            >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([node], "g", [], [], [b, s])))
            >>> q = plan.quantized["mm"]
            >>> out = dmlbridge.prepare(np.zeros((4, 48), np.float32))   # the blocked form's [N, K]
            >>> desc = q.operator_desc(output=out.as_ctypes_tensor_desc())
            >>> desc.Type, type(desc.struct).__name__, desc.struct.QuantizationTensorCount
            (174, 'DML_DEQUANTIZE_OPERATOR_DESC', 2)
        """
        if form not in (None, "blocked", "split"):
            raise InvalidArgumentError(f"form must be 'blocked', 'split' or None (the operator's usual form), "
                                       f"got {form!r}")
        parts = self.parts()
        if self.operator is None:
            raise InvalidArgumentError(
                f"quantized weight {self.key!r} was read from a manifest of format 1 to 4, which does not record the "
                "operator that takes it; convert the model again to get its operator desc"
            )
        if form is None:
            blocked = self.granularity == "block" and self.axis == len(self.shape) - 1
            form = "blocked" if self.operator == "DEQUANTIZE" and blocked else "split"
        return dequantize_desc(self.key, self.operator, self.blocked_form() if form == "blocked" else parts, output)

    def to_json(self) -> dict[str, Any]:
        """The manifest form of this record."""
        return {
            "key": self.key, "op": self.op, "operator": self.operator, "origin": self.origin, "bits": self.bits,
            "signed": self.signed,
            "granularity": self.granularity, "axis": self.axis, "block_size": self.block_size,
            "shape": list(self.shape), "output_type": self.output_type.name,
            "sizes": None if self.sizes is None else list(self.sizes),
            **{name: None if part is None else _part_json(part)
               for name, part in zip(_PARTS, (self.weight, self.scales, self.zero_points), strict=True)},
            "zero_scales": self.zero_scales, "skipped": self.skipped, "bias": self.bias,
        }


def _part_json(part: QuantizedPart) -> dict[str, Any]:
    return {"key": part.key, "buffer": part.buffer, "offset": part.offset, "desc": part.desc()}


class _Gather:
    """A part's elements at given positions (counted in elements from the part's offset), as int32 (integer
    types) or their own float type; ``record`` gives the logical-to-part mapping."""

    def __init__(self, part: QuantizedPart, raw: np.ndarray, record: QuantizedWeight) -> None:
        sizes, strides = part.sizes, part.strides or packed_strides(part.sizes)
        span = span_of(sizes, strides)
        if len(raw) < (span * part.dml_type.bitwidth + 7) // 8 or len(sizes) != len(strides):
            raise ManifestError(f"quantized weight {record.key!r}: the part over {part.key!r} reaches past its entry")
        self.dml = part.dml_type
        if self.dml.bitwidth == 4:
            self.data = raw
        else:
            element = np.dtype(self.dml.numpy()).newbyteorder("<")
            self.data = raw[: len(raw) // element.itemsize * element.itemsize].view(element)
        split = record.granularity == "block" and record.block_size > 1 and record.axis is not None
        dims = record.shape or (1,)
        lead = len(sizes) - len(dims) - (1 if split else 0)
        if lead < 0 or any(size != 1 for size in sizes[:lead]):
            raise ManifestError(f"quantized weight {record.key!r}: its sizes are not its shape split into blocks")
        own = strides[lead:]
        self.steps: list[Callable[[np.ndarray], np.ndarray]] = []
        for d in range(len(dims)):
            if split and record.axis is not None and d == record.axis:
                self.steps.append(functools.partial(_blocked_step, block=record.block_size, outer=own[d],
                                                    inner=own[d + 1]))
            else:
                self.steps.append(functools.partial(np.multiply, own[d + 1 if split and d > (record.axis or 0) else d]))

    def values(self, offsets: list[np.ndarray]) -> np.ndarray:
        """The elements at the positions ``sum(steps[d](offsets[d]))`` (``offsets``: one index array per logical
        dimension, broadcasting to the slice's shape)."""
        position = sum((step(np.asarray(index, dtype=np.int64)) for step, index in zip(self.steps, offsets,
                                                                                      strict=True)),
                       np.zeros((), dtype=np.int64))
        if self.dml.bitwidth == 4:
            nibbles = ((self.data[position >> 1] >> ((position & 1) << 2).astype(np.uint8)) & 0xF).astype(np.int32)
            return nibbles - ((nibbles & 8) << 1) if self.dml is DmlDataType.INT4 else nibbles
        values = self.data[position]
        return values if values.dtype.kind == "f" else values.astype(np.int32)


def _blocked_step(index: np.ndarray, block: int, outer: int, inner: int) -> np.ndarray:
    """The position along a split axis: block ``index // block`` at stride ``outer``, ``index % block`` at
    ``inner``."""
    return (index // block) * outer + (index % block) * inner


def _chunks(dims: tuple[int, ...]) -> Any:
    """Slices of an array of ``dims`` of at most about _CHUNK_ELEMENTS elements each, in C order: for each, the
    index (for assignment) and one index array per dimension, shaped to broadcast to the slice."""
    rank = len(dims)
    cut = next(d for d in range(rank) if math.prod(dims[d + 1 :]) <= _CHUNK_ELEMENTS)
    step = max(1, _CHUNK_ELEMENTS // math.prod(dims[cut + 1 :]))
    tail = [np.arange(n, dtype=np.int64).reshape((n,) + (1,) * (rank - d - 1)) for d, n in enumerate(dims)
            if d > cut]
    for prefix in np.ndindex(*dims[:cut]):
        for start in range(0, dims[cut], step):
            stop = min(start + step, dims[cut])
            here = np.arange(start, stop, dtype=np.int64).reshape((stop - start,) + (1,) * (rank - cut - 1))
            offsets = [np.int64(i) for i in prefix] + [here] + tail
            yield (*prefix, slice(start, stop)), offsets


_SCALE_MAGNITUDES: dict[DmlDataType, tuple[np.dtype[Any], int]] = {
    DmlDataType.FLOAT32: (np.dtype("<u4"), 0x7FFFFFFF), DmlDataType.FLOAT16: (np.dtype("<u2"), 0x7FFF)}
"""The scales' DML types, as little-endian words and the bits that are a value's magnitude (0: a zero, + or -)."""
_SCAN_BYTES = 1 << 20
"""The scales' bytes :func:`check_zero_scales` reads at a time."""


def check_zero_scales(records: Mapping[str, QuantizedWeight], entries: Mapping[str, PlanEntry],
                      read: Callable[[PlanEntry, int, np.ndarray], None]) -> None:
    """Each described record's ``zero_scales`` against the bytes of its scales' entry (``read(entry, start, out)``
    fills the uint8 array ``out`` with the entry's bytes from ``start``): ManifestError for a record they
    contradict. Each entry is read once, a MiB at a time, its elements' bits compared (no float arithmetic); the
    scales are small beside their weights (one value a block).

    Example:
        >>> check_zero_scales({}, {}, lambda entry, start, out: None)  # (a plan without quantized weights)
    """
    found: dict[str, bool] = {}
    for record in records.values():
        if record.scales is None or record.zero_scales is None:
            continue  # (skipped, or scales the conversion did not read: external data)
        key = record.scales.key
        if key not in found:
            found[key] = _has_a_zero(entries[key], read)
        if found[key] != record.zero_scales:
            raise ManifestError(f"quantized weight {record.key!r} says zero_scales={record.zero_scales} but its "
                                f"scales {key!r} {'have' if found[key] else 'have no'} 0; the record does not match "
                                "its image")


def _has_a_zero(entry: PlanEntry, read: Callable[[PlanEntry, int, np.ndarray], None]) -> bool:
    """Whether a value of a FLOAT32 or FLOAT16 entry is 0 (its padding left out)."""
    if entry.dml_type not in _SCALE_MAGNITUDES:  # (the manifest reader refuses such records first)
        raise ManifestError(f"the scales {entry.key!r} are {entry.dml_type}; scales are FLOAT32 or FLOAT16")
    word, magnitude = _SCALE_MAGNITUDES[entry.dml_type]
    size = math.prod(entry.shape) * word.itemsize
    step = _SCAN_BYTES // word.itemsize * word.itemsize
    out = empty_aligned(min(step, size))
    for start in range(0, size, step):
        chunk = out[: min(step, size - start)]
        read(entry, start, chunk)
        if not (chunk.view(word) & magnitude).all():
            return True
    return False


# --- the views (after planning) ----------------------------------------------------------------------------------


def quantized_views(specs: list[QuantizedSpec], entries: Mapping[str, PlanEntry], min_dims: int, target: Target,
                    alignment: int) -> dict[str, QuantizedWeight]:
    """Each spec's record over the planned entries: its parts' buffers, offsets and DML types, and the operator
    that takes them at the target's level (a record it cannot take is skipped, with the reason)."""
    records: dict[str, QuantizedWeight] = {}
    operator = dequantize_operator(target.feature_level)
    level = target.feature_level.dotted
    for spec in specs:
        base = QuantizedWeight(spec.key, spec.op, spec.origin, spec.bits, spec.signed, spec.granularity, spec.axis,
                               spec.block_size, spec.shape, spec.output_type, None, None, None, None,
                               spec.zero_scales, spec.skipped, spec.bias)
        if spec.parts is None:
            records[spec.key] = base
            continue
        dims = len(spec.parts[0].sizes)
        rank = quantized_rank(dims, min_dims, operator)
        if operator.dims == (4, 4) and rank != 4:
            records[spec.key] = replace(base, skipped=(
                f"{operator.name} takes exactly 4 dimensions at feature level {level}; its sizes take {dims} "
                f"and min_dims is {min_dims}"))
            continue
        if rank > target.max_dimension_count:
            records[spec.key] = replace(base, skipped=f"its sizes take {rank} dimensions; the target allows "
                                                      f"{target.max_dimension_count}")
            continue
        records[spec.key] = _viewed(spec, base, entries, rank, alignment, operator, level)
    return records


def _viewed(spec: QuantizedSpec, base: QuantizedWeight, entries: Mapping[str, PlanEntry], rank: int, alignment: int,
            operator: DequantizeOperator, level: str) -> QuantizedWeight:
    """One record with its parts, or skipped with why they are not there or not what ``operator`` takes."""
    assert spec.parts is not None
    parts = []
    for spec_part in spec.parts:
        entry = entries.get(spec_part.key)
        if entry is None or entry.skipped is not None:
            return replace(base, skipped=f"its constant {spec_part.key!r} is not in the plan" if entry is None else
                           f"its constant {spec_part.key!r} was skipped ({entry.skipped})")
        try:
            parts.append(_part(spec_part, entry, rank, alignment))
        except InvalidArgumentError as exc:  # (a part the finder got wrong: this record, never the model)
            return replace(base, skipped=str(exc))
    if spec.bias is not None:
        bias = entries.get(spec.bias)
        if bias is None or bias.skipped is not None:
            return replace(base, skipped=f"its bias {spec.bias!r} is not in the plan" if bias is None else
                           f"its bias {spec.bias!r} was skipped ({bias.skipped})")
    weight, scales, zero_points = parts
    takes = ", ".join(sorted(t.name for t in operator.inputs))
    if weight.dml_type not in operator.inputs or zero_points.dml_type is not weight.dml_type:
        return replace(base, skipped=f"its weight is {weight.dml_type.name} (zero points {zero_points.dml_type.name}); "
                                     f"{operator.name} at feature level {level} reads {takes}, zero points of the "
                                     "weight's type")
    if scales.dml_type not in operator.scales:
        return replace(base, skipped=f"its scales are {scales.dml_type.name}; {operator.name} at feature level "
                                     f"{level} takes {', '.join(sorted(t.name for t in operator.scales))}")
    return replace(base, sizes=weight.sizes, weight=weight, scales=scales, zero_points=zero_points,
                   operator=operator.name)


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
        raise InvalidArgumentError(f"its view of {spec.key!r} needs {total} bytes, but that entry holds "
                                   f"{entry.total_tensor_size_in_bytes} (a part of another shape than the node's)")
    return QuantizedPart(spec.key, entry.buffer, entry.offset,
                         BufferTensorDesc(dml, entry.flags, sizes, strides, total, alignment))



def spec_part_keys(specs: Iterable[QuantizedSpec]) -> frozenset[str]:
    """The keys of the entries quantized nodes name as parts, before planning (what :func:`part_keys` of their
    records gives, and the parts of records skipped later)."""
    return frozenset(part.key for spec in specs if spec.parts is not None for part in spec.parts)


def part_keys(records: Iterable[QuantizedWeight]) -> frozenset[str]:
    """The keys of the entries that ``records`` name as parts: each is bound on the GPU, whatever its node."""
    return frozenset(part.key for record in records
                     for part in (record.weight, record.scales, record.zero_points) if part is not None)
