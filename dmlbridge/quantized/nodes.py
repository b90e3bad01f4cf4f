"""Finding quantized weights: the MatMulNBits, DequantizeLinear and GatherBlockQuantized nodes of a model whose
inputs are constants, what each weight is (``QuantizedSpec``), and the *derived* constants the image needs for it
(``records``, beside it, has the layout rule and the records).

A derived constant (kind ``"derived"``, key ``<node key>/<part>``) holds values made from the model's constants
when they are written: a weight unpacked from 2-bit or packed 4-bit bytes (a target without 4-bit types, or
2-bit values), a weight padded to whole blocks, a default zero point, FLOAT16 scales widened to FLOAT (below
feature level 6.0, where ELEMENT_WISE_DEQUANTIZE_LINEAR takes FLOAT32 scales only). It has the ONNX type of its
values (2- or 4-bit for weights), so the target's mapping chooses its DML type as for any constant (UINT2 becomes
UINT4 at feature level 6.3 and UINT8 below).

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper
    >>> from dmlbridge.model.constants import find_constants
    >>> from dmlbridge.model.consumers import find_consumers
    >>> from dmlbridge.types.target import Target
    >>> x = numpy_helper.from_array(np.ones((2, 32), np.int8), "x")
    >>> s = numpy_helper.from_array(np.ones((2, 2), np.float32), "s")
    >>> node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"], "dq", axis=1, block_size=16)
    >>> model = helper.make_model(helper.make_graph([node], "g", [], [], [x, s]))
    >>> constants, nodes = find_constants(model), {}
    >>> specs, derived = find_quantized(constants, find_consumers(model, constants, nodes, QUANTIZED_NODES), nodes,
    ...                                 Target())
    >>> specs[0].parts[0].sizes, [c.key for c in derived]
    ((2, 2, 16), ['dq/zero_points'])
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper

from dmlbridge.errors import DmlBridgeError, counted
from dmlbridge.model.constants import ModelConstant, make_constant
from dmlbridge.model.consumers import Consumer
from dmlbridge.quantized.records import QUANTIZED_OPS, Granularity, PartSpec, QuantizedSpec, dequantize_operator
from dmlbridge.tensor.layout import packed_strides
from dmlbridge.types.data_types import DmlDataType, OnnxDataType
from dmlbridge.types.float_bits import cast
from dmlbridge.types.mapping import resolve
from dmlbridge.types.target import Target

__all__ = ["QUANTIZED_NODES", "Derivation", "find_quantized", "replaced_sources"]

QUANTIZED_NODES = frozenset(QUANTIZED_OPS)
"""The op types whose nodes ``find_consumers`` collects for :func:`find_quantized`."""
_UNSIGNED = {2: OnnxDataType.UINT2, 4: OnnxDataType.UINT4, 8: OnnxDataType.UINT8}
_FOUR_OR_EIGHT = {OnnxDataType.INT8, OnnxDataType.UINT8, OnnxDataType.INT4, OnnxDataType.UINT4,
                  OnnxDataType.INT2, OnnxDataType.UINT2}
_FLOATS = {OnnxDataType.FLOAT, OnnxDataType.FLOAT16, OnnxDataType.BFLOAT16}


class Derivation:
    """The values of a derived constant, computed when they are written (so a model's derived weights are never
    all in memory at once): ``make`` from the values of ``sources``."""

    def __init__(self, sources: list[ModelConstant], make: Callable[[list[np.ndarray]], np.ndarray]) -> None:
        self.sources = sources
        self.make = make

    def values(self, reader: Any, max_tensor_bytes: int) -> np.ndarray:
        return self.make([s.to_array(reader=reader, max_tensor_bytes=max_tensor_bytes) for s in self.sources])


def _derived(key: str, origin: str, onnx_type: OnnxDataType, shape: tuple[int, ...], derivation: Derivation,
             scope: str) -> ModelConstant:
    size = math.prod(shape)
    nbytes = size * onnx_type.numpy().itemsize
    packed = -(-size * onnx_type.bitwidth // 8)
    return make_constant((key, "", scope, "derived", origin, derivation, "", onnx_type, shape, nbytes, "derived",
                          size, packed))


def find_quantized(
    constants: list[ModelConstant], consumers: Mapping[str, tuple[Consumer, ...]], nodes: Mapping[str, Any],
    target: Target, with_tensor: Callable[[int], ModelConstant] | None = None,
) -> tuple[list[QuantizedSpec], list[ModelConstant]]:
    """The quantized nodes' weights (``nodes``: node key -> NodeProto of the QUANTIZED_OPS, as
    :func:`dmlbridge.model.consumers.find_consumers` collects them) and the derived constants they need, in node order.
    ``with_tensor``: a constant by position with its TensorProto (the byte scan's), when some have none."""
    if not nodes:
        return [], []  # (the usual model: nothing to look up among its constants)
    position = {c.key: i for i, c in enumerate(constants)}
    inputs: dict[str, dict[int, str]] = {}
    for key, read_by in consumers.items():
        for consumer in read_by:
            if consumer.op_type in QUANTIZED_OPS:
                inputs.setdefault(consumer.node, {})[consumer.input] = key

    def constant(key: str) -> ModelConstant:
        found = constants[position[key]]
        return found if found.proto is not None or with_tensor is None else with_tensor(position[key])

    specs: list[QuantizedSpec] = []
    derived: list[ModelConstant] = []
    for node_key, node in nodes.items():
        op = QUANTIZED_OPS[f"{node.domain}:{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type]
        found = {index: constant(key) for index, key in inputs.get(node_key, {}).items()}
        finder = {"MatMulNBits": _matmul_nbits, "DequantizeLinear": _dequantize_linear,
                  "GatherBlockQuantized": _gather_block_quantized}[op]
        try:
            spec, extra = finder(node_key, node, found, target)
        except _NotAnIntegerError as exc:
            spec, extra = _skip(node_key, op, f"{op} node {node_key!r}", f"its attribute {exc} is not an integer"), []
        if spec.parts is not None and spec.parts[0].key == spec.parts[2].key:
            spec, extra = _own_zero_points(spec, found[_ZERO_POINT_INPUTS[op]], extra)
        scales = found.get(2 if op != "DequantizeLinear" else 1)
        if spec.parts is not None and scales is not None:
            spec = spec._replace(zero_scales=_zero_scales(scales))
        specs.append(spec)
        derived += extra
    return specs, derived


_ZERO_POINT_INPUTS = {"MatMulNBits": 3, "DequantizeLinear": 2, "GatherBlockQuantized": 3}


def _own_zero_points(spec: QuantizedSpec, source: ModelConstant, extra: list[ModelConstant]
                     ) -> tuple[QuantizedSpec, list[ModelConstant]]:
    """``spec`` whose zero points are its weight's constant (a node that reads one constant as both) with its zero
    points in a derived copy, ``<node key>/zero_points``: each part of a record has an entry of its own."""
    assert spec.parts is not None
    weight, scales, zero_points = spec.parts
    key = f"{spec.key}/zero_points"
    copy = _derived(key, f"zero points of {spec.origin}, a copy of {source.key!r} (its weight too: each part has an "
                         "entry of its own)", source.onnx_type, source.shape, Derivation([source], _copied),
                    _scope(spec.key))
    return spec._replace(parts=(weight, scales, zero_points._replace(key=key))), [*extra, copy]


def _copied(sources: list[np.ndarray]) -> np.ndarray:
    """``sources[0]`` as it is."""
    return sources[0]


def _zero_scales(scales: ModelConstant) -> bool | None:
    """Whether a scale is 0 (None when the scales are in external data: planning reads none)."""
    if scales.storage == "external":
        return None
    try:
        return bool((scales.to_array() == 0).any())
    except DmlBridgeError:
        return None  # (a broken tensor: conversion names it)


class _NotAnIntegerError(Exception):
    """An attribute these operators define as an integer is something else (a broken or hostile model)."""


def _attrs(node: Any) -> dict[str, Any]:
    """The node's attributes; _NotAnIntegerError for one of the integer attributes these operators read that is not."""
    values = {}
    for attr in node.attribute:
        if attr.name in _INTEGER_ATTRIBUTES and attr.type != onnx.AttributeProto.INT:
            raise _NotAnIntegerError(attr.name)
        values[attr.name] = attr.i if attr.name in _INTEGER_ATTRIBUTES else helper.get_attribute_value(attr)
    return values


_INTEGER_ATTRIBUTES = frozenset({"K", "N", "bits", "block_size", "accuracy_level", "weight_prepacked", "axis",
                                 "output_dtype", "precision", "gather_axis", "quantize_axis"})


def _skip(key: str, op: str, origin: str, why: str) -> QuantizedSpec:
    return QuantizedSpec(key, op, origin, 0, False, "tensor", None, 0, (), OnnxDataType.FLOAT, None, why)


def _scope(node_key: str) -> str:
    return node_key.rpartition("/")[0]


def _unpack(values: np.ndarray, bits: int, count: int, dtype: Any) -> np.ndarray:
    """Values packed ``8 // bits`` per byte, first in the low bits, along the last axis: the first ``count`` of
    each row, as ``dtype``."""
    per = 8 // bits
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    out = (values[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return out.reshape(*values.shape[:-1], values.shape[-1] * per)[..., :count].astype(dtype)


def _matmul_nbits(key: str, node: Any, found: dict[int, ModelConstant], target: Target
                  ) -> tuple[QuantizedSpec, list[ModelConstant]]:
    op, attrs = "MatMulNBits", _attrs(node)
    origin = f"MatMulNBits node {key!r}"
    k, n, bits, block = attrs.get("K", 0), attrs.get("N", 0), attrs.get("bits", 4), attrs.get("block_size", 0)
    b, scales, zero_points = found.get(1), found.get(2), found.get(3)
    names = list(node.input) + [""] * 6
    reason = None
    if bits not in (2, 4, 8):
        reason = f"bits={bits}: only 2, 4 and 8 are defined"
    elif block < 16 or block & (block - 1) or k <= 0 or n <= 0:
        reason = f"block_size={block}, K={k}, N={n}: not a valid MatMulNBits"
    elif attrs.get("weight_prepacked"):
        reason = "weight_prepacked: B is in a device-specific layout, not the bytes MatMulNBits defines"
    elif names[4]:
        reason = "g_idx (act-order): the blocks are not contiguous along K"
    elif b is None or scales is None or (names[3] and zero_points is None):
        reason = "B, scales and zero points must be constants"
    if reason:
        return _skip(key, op, origin, reason), []
    assert b is not None and scales is not None
    blocks = -(-k // block)
    blob = block * bits // 8
    if b.onnx_type is not OnnxDataType.UINT8 or b.shape != (n, blocks, blob) or 0 in b.shape:
        return _skip(key, op, origin, f"B is {b.onnx_type.name} {list(b.shape)}, not UINT8 [{n}, {blocks}, {blob}]"), []
    if scales.onnx_type not in _FLOATS or scales.shape not in ((n, blocks), (n * blocks,)):
        return _skip(key, op, origin, f"scales are {scales.onnx_type.name} {list(scales.shape)}, not "
                                      f"[{n}, {blocks}] of FLOAT, FLOAT16 or BFLOAT16"), []
    sizes = (n, blocks, block)
    scope = _scope(key)
    derived: list[ModelConstant] = []
    four_bit = resolve(OnnxDataType.UINT4, target).dml_type is DmlDataType.UINT4
    packed_type = _UNSIGNED[bits]
    if bits == 8 or (bits == 4 and four_bit):
        weight = PartSpec(b.key, sizes, None, DmlDataType.UINT4 if bits == 4 else None)
    else:  # unpacked into an entry of its own, of the 2- or 4-bit ONNX type: the target's mapping chooses its DML type
        weight_key = f"{key}/weight"
        derived.append(_derived(weight_key, f"weight of {origin}, unpacked from {b.key!r}", packed_type,
                                (n, blocks * block),
                                Derivation([b], functools.partial(_unpacked_rows, bits=bits, count=blocks * block,
                                                                  dtype=packed_type.numpy())), scope))
        weight = PartSpec(weight_key, sizes, None)
    bias = found.get(5)
    if bias is not None and (bias.onnx_type is not scales.onnx_type or bias.shape != (n,)):
        return _skip(key, op, origin, f"bias is {bias.onnx_type.name} {list(bias.shape)}, not [{n}] of the scales' "
                                      "type"), []
    scale_part = PartSpec(_scales_key(key, origin, scales, target, scope, derived), sizes, (blocks, 1, 0))
    if zero_points is None:
        zp_key = f"{key}/zero_points"
        middle = 1 << (bits - 1)
        derived.append(_derived(zp_key, f"zero points of {origin} (the default, {middle})", packed_type, (1,),
                                Derivation([], functools.partial(_filled, value=middle, dtype=packed_type.numpy())),
                                scope))
        zp_part = PartSpec(zp_key, sizes, (0, 0, 0))
    else:
        row = -(-blocks * bits // 8)
        if zero_points.onnx_type is not OnnxDataType.UINT8:
            return _skip(key, op, origin, f"zero points of type {zero_points.onnx_type.name}: float zero points "
                                          "have no exact DirectML form here"), derived[:0]
        if zero_points.shape not in ((n, row), (n * row,)):
            return _skip(key, op, origin, f"zero points are {list(zero_points.shape)}, not [{n}, {row}]"), []
        if bits == 8:
            zp_part = PartSpec(zero_points.key, sizes, (row, 1, 0))
        elif bits == 4 and four_bit:  # rows of whole bytes: a spare nibble ends an odd row, skipped by the stride
            zp_part = PartSpec(zero_points.key, sizes, (2 * row, 1, 0), DmlDataType.UINT4)
        else:
            zp_key = f"{key}/zero_points"
            derived.append(_derived(zp_key, f"zero points of {origin}, unpacked from {zero_points.key!r}",
                                    packed_type, (n, blocks),
                                    Derivation([zero_points], functools.partial(
                                        _unpacked_rows, bits=bits, count=blocks, dtype=packed_type.numpy(), rows=n)),
                                    scope))
            zp_part = PartSpec(zp_key, sizes, (blocks, 1, 0))
    spec = QuantizedSpec(key, op, origin, bits, False, "block", 1, block, (n, k), scales.onnx_type,
                         (weight, scale_part, zp_part), None, bias=None if bias is None else bias.key)
    return spec, derived


def _blocked_strides(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """Element strides of a packed tensor of ``shape`` (the blocked scales), a 0 inserted after ``axis`` for
    the elements of a block."""
    strides = packed_strides(shape) if shape else ()
    return (*strides[: axis + 1], 0, *strides[axis + 1 :])


def _dequantize_linear(key: str, node: Any, found: dict[int, ModelConstant], target: Target
                       ) -> tuple[QuantizedSpec, list[ModelConstant]]:
    op, attrs = "DequantizeLinear", _attrs(node)
    contrib = node.domain == "com.microsoft"
    origin = f"{'com.microsoft ' if contrib else ''}DequantizeLinear node {key!r}"
    x, scale, zero_point = found.get(0), found.get(1), found.get(2)
    names = list(node.input) + [""] * 3
    if x is None or scale is None or (names[2] and zero_point is None):
        return _skip(key, op, origin, "x, x_scale and x_zero_point must be constants"), []
    if contrib and ({"block_size", "output_dtype"} & set(attrs) or scale.onnx_type is OnnxDataType.BFLOAT16):
        return _skip(key, op, origin, "com.microsoft DequantizeLinear has no block_size or output_dtype and takes "
                                      "FLOAT or FLOAT16 scales"), []
    if x.onnx_type not in _FOUR_OR_EIGHT:
        return _skip(key, op, origin, f"x is {x.onnx_type.name}: DirectML's DEQUANTIZE reads 2-, 4- and 8-bit "
                                      "integers here"), []
    if scale.onnx_type not in _FLOATS or (zero_point is not None and zero_point.onnx_type is not x.onnx_type):
        return _skip(key, op, origin, "scale must be FLOAT, FLOAT16 or BFLOAT16 and the zero point of x's type"), []
    if attrs.get("output_dtype", 0) not in (0, int(scale.onnx_type)):
        return _skip(key, op, origin, "output_dtype differs from the scale's type"), []
    shape = x.shape or (1,)
    rank, block = len(shape), int(attrs.get("block_size", 0))
    axis = int(attrs.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    if 0 in x.shape:
        return _skip(key, op, origin, "x is empty"), []
    if zero_point is not None and zero_point.shape != scale.shape and not (
            zero_point.size == scale.size == 1 and len(zero_point.shape) <= 1 and len(scale.shape) <= 1):
        return _skip(key, op, origin, f"x_zero_point is {list(zero_point.shape)} and x_scale "
                                      f"{list(scale.shape)}: they must have the same shape"), []
    bits = x.onnx_type.bitwidth
    signed = x.onnx_type.is_signed
    scope, derived = _scope(key), []
    if scale.size == 1 and block == 0 and len(scale.shape) <= 1:
        granularity: Granularity = "tensor"
        sizes, weight = shape, PartSpec(x.key, shape, None)
        per_scale: tuple[int, ...] = (0,) * rank
        the_axis: int | None = None
    elif not 0 <= axis < rank:
        return _skip(key, op, origin, f"axis {attrs.get('axis', 1)} is outside x's {counted(rank, 'dimension')}"), []
    elif block == 0:
        if scale.shape != (shape[axis],):
            return _skip(key, op, origin, f"a per-axis scale must be [{shape[axis]}], not {list(scale.shape)}"), []
        granularity, sizes, the_axis = "axis", shape, axis
        weight = PartSpec(x.key, shape, None)
        per_scale = tuple(1 if d == axis else 0 for d in range(rank))
    else:
        length = shape[axis]
        block = min(block, length)  # (a block longer than the axis is one block of the axis: the same values)
        blocks = -(-length // block) if block > 0 else 0
        expected = (*shape[:axis], blocks, *shape[axis + 1 :])
        if scale.shape != expected or block < 0:
            return _skip(key, op, origin, f"a blocked scale must be {list(expected)}, not {list(scale.shape)}"), []
        granularity, the_axis = "block", axis
        if block == 1:
            sizes, per_scale = shape, packed_strides(expected)
            weight = PartSpec(x.key, shape, None)
        else:
            sizes = (*shape[:axis], blocks, block, *shape[axis + 1 :])
            per_scale = _blocked_strides(expected, axis)
            if length % block == 0:
                weight = PartSpec(x.key, sizes, None)
            else:  # padded to whole blocks, in an entry of its own (the padding is zeros, past the logical values)
                weight_key = f"{key}/weight"
                padded = (*shape[:axis], blocks * block, *shape[axis + 1 :])
                derived.append(_derived(weight_key, f"weight of {origin}, padded to whole blocks from {x.key!r}",
                                        x.onnx_type, padded, Derivation([x], functools.partial(
                                            _padded, shape=shape, padded=padded, axis=axis)), scope))
                weight = PartSpec(weight_key, sizes, None)
    scale_part = PartSpec(_scales_key(key, origin, scale, target, scope, derived), sizes, per_scale)
    if zero_point is None:
        zp_key = f"{key}/zero_points"
        derived.append(_derived(zp_key, f"zero point of {origin} (the default, 0)", x.onnx_type, (1,),
                                Derivation([], functools.partial(_filled, value=0, dtype=x.onnx_type.numpy())),
                                scope))
        zp_part = PartSpec(zp_key, sizes, (0,) * len(sizes))
    else:
        zp_part = PartSpec(zero_point.key, sizes, per_scale)
    spec = QuantizedSpec(key, op, origin, bits, signed, granularity, the_axis, block if granularity == "block" else 0,
                         x.shape, scale.onnx_type, (weight, scale_part, zp_part), None)
    return spec, derived


def _scales_key(key: str, origin: str, scales: ModelConstant, target: Target, scope: str,
                derived: list[ModelConstant]) -> str:
    """The key of the entry the scales part reads: the model's scales, or where the target's operator does not
    take their DML type (FLOAT16 below feature level 6.0), a derived FLOAT copy added to ``derived``."""
    operator = dequantize_operator(target.feature_level)
    row = resolve(scales.onnx_type, target)
    if row.dml_type is None or row.dml_type in operator.scales or DmlDataType.FLOAT32 not in operator.scales:
        return scales.key
    widened = f"{key}/scales"
    derived.append(_derived(widened, f"scales of {origin}, widened to FLOAT from {scales.key!r} ({operator.name} at "
                                     f"feature level {target.feature_level.dotted} takes FLOAT32 scales)",
                            OnnxDataType.FLOAT, scales.shape,
                            Derivation([scales], functools.partial(_widened)), scope))
    return widened


def _widened(sources: list[np.ndarray]) -> np.ndarray:
    """``sources[0]`` (float16 scales) as float32: exact, NaNs bit for bit (as any FLOAT16 widened to FLOAT32)."""
    return cast(sources[0], np.float32)


def _padded(sources: list[np.ndarray], shape: tuple[int, ...], padded: tuple[int, ...], axis: int) -> np.ndarray:
    """The values of ``sources[0]`` (of ``shape``) in a zero array of ``padded``."""
    out = np.zeros(padded, dtype=sources[0].dtype)
    out[(slice(None),) * axis + (slice(0, shape[axis]),)] = sources[0].reshape(shape)
    return out


def _filled(sources: list[np.ndarray], value: int, dtype: Any) -> np.ndarray:
    """One element of ``value``: a default zero point, repeated over every element by strides of 0."""
    return np.array([value], dtype=dtype)


def _unpacked_rows(sources: list[np.ndarray], bits: int, count: int, dtype: Any, rows: int | None = None
                   ) -> np.ndarray:
    """``sources[0]`` (uint8, values packed along its rows) unpacked: the first ``count`` values of each row."""
    packed = sources[0]
    return _unpack(packed.reshape(packed.shape[0] if rows is None else rows, -1), bits, count, dtype)


def _gather_block_quantized(key: str, node: Any, found: dict[int, ModelConstant], target: Target
                            ) -> tuple[QuantizedSpec, list[ModelConstant]]:
    op, attrs = "GatherBlockQuantized", _attrs(node)
    origin = f"GatherBlockQuantized node {key!r}"
    data, scales, zero_points = found.get(0), found.get(2), found.get(3)
    names = list(node.input) + [""] * 4
    bits, block = int(attrs.get("bits", 4)), int(attrs.get("block_size", 128))
    if data is None or scales is None or (names[3] and zero_points is None):
        return _skip(key, op, origin, "data, scales and zero points must be constants"), []
    if data.onnx_type in (OnnxDataType.INT4, OnnxDataType.UINT4):
        packed, bits = False, 4
    elif data.onnx_type is OnnxDataType.UINT8 and bits in (2, 4, 8):
        packed = bits < 8
    else:
        return _skip(key, op, origin, f"data of type {data.onnx_type.name} (bits={bits}): float8 and float4 data, "
                                      "and other widths, have no exact DirectML form here"), []
    if not data.shape or 0 in data.shape or block < 1 or scales.onnx_type not in _FLOATS:
        return _skip(key, op, origin, "empty data, a block_size under 1 or scales not of a float type"), []
    per = 8 // bits if packed else 1
    shape = (*data.shape[:-1], data.shape[-1] * per)
    rank = len(shape)
    axis = int(attrs.get("quantize_axis", 1))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return _skip(key, op, origin, f"quantize_axis {attrs.get('quantize_axis', 1)} is outside the data's "
                                      f"{counted(rank, 'dimension')}"), []
    length = shape[axis]
    block = min(block, length)  # (a block longer than the axis is one block of the axis: the same values)
    blocks = -(-length // block)
    scale_shape = (*shape[:axis], blocks, *shape[axis + 1 :])
    if scales.shape != scale_shape:
        return _skip(key, op, origin, f"scales must be {list(scale_shape)}, not {list(scales.shape)}"), []
    unsigned_type = _UNSIGNED[bits] if data.onnx_type is OnnxDataType.UINT8 else data.onnx_type
    four_bit = resolve(OnnxDataType.UINT4, target).dml_type is DmlDataType.UINT4
    split = block > 1
    sizes = (*shape[:axis], blocks, block, *shape[axis + 1 :]) if split else shape
    per_scale = _blocked_strides(scale_shape, axis) if split else packed_strides(scale_shape)
    scope, derived = _scope(key), []
    whole = length % block == 0
    if whole and (not packed or (bits == 4 and four_bit)):
        weight = PartSpec(data.key, sizes, None, DmlDataType.UINT4 if packed else None)
    else:  # unpacked and/or padded to whole blocks, of the 2- or 4-bit ONNX type (the mapping picks its DML type)
        weight_key = f"{key}/weight"
        padded = (*shape[:axis], blocks * block, *shape[axis + 1 :])
        derived.append(_derived(weight_key, f"weight of {origin}, from {data.key!r}", unsigned_type, padded,
                                Derivation([data], functools.partial(_gather_weight, bits=bits if packed else 0,
                                                                     shape=shape, padded=padded, axis=axis,
                                                                     dtype=unsigned_type.numpy())), scope))
        weight = PartSpec(weight_key, sizes, None)
    scale_part = PartSpec(_scales_key(key, origin, scales, target, scope, derived), sizes, per_scale)
    if zero_points is None:
        zp_key = f"{key}/zero_points"
        middle = (1 << (bits - 1)) if data.onnx_type is OnnxDataType.UINT8 else 0
        derived.append(_derived(zp_key, f"zero points of {origin} (the default, {middle})", unsigned_type, (1,),
                                Derivation([], functools.partial(_filled, value=middle, dtype=unsigned_type.numpy())),
                                scope))
        zp_part = PartSpec(zp_key, sizes, (0,) * len(sizes))
    elif not packed:
        if zero_points.onnx_type is not data.onnx_type or zero_points.shape != scale_shape:
            return _skip(key, op, origin, f"zero points must be {data.onnx_type.name} {list(scale_shape)}"), []
        zp_part = PartSpec(zero_points.key, sizes, per_scale)
    else:
        row = -(-scale_shape[-1] * bits // 8)
        if zero_points.onnx_type is not OnnxDataType.UINT8 or zero_points.shape != (*scale_shape[:-1], row):
            return _skip(key, op, origin, f"zero points must be UINT8 {[*scale_shape[:-1], row]}"), []
        if bits == 4 and four_bit:  # nibbles; a row that ends in a spare one is stepped over by the stride
            nibbles = packed_strides((*scale_shape[:-1], 2 * row))
            zp_part = PartSpec(zero_points.key, sizes, (*nibbles[: axis + 1], 0, *nibbles[axis + 1 :]) if split
                               else nibbles, DmlDataType.UINT4)
        else:
            zp_key = f"{key}/zero_points"
            derived.append(_derived(zp_key, f"zero points of {origin}, unpacked from {zero_points.key!r}",
                                    unsigned_type, scale_shape,
                                    Derivation([zero_points], functools.partial(
                                        _unpacked_last, bits=bits, count=scale_shape[-1],
                                        dtype=unsigned_type.numpy())), scope))
            zp_part = PartSpec(zp_key, sizes, per_scale)
    spec = QuantizedSpec(key, op, origin, bits, data.onnx_type is OnnxDataType.INT4, "block", axis, block, shape,
                         scales.onnx_type, (weight, scale_part, zp_part), None)
    return spec, derived


def _unpacked_last(sources: list[np.ndarray], bits: int, count: int, dtype: Any) -> np.ndarray:
    """``sources[0]`` (uint8, values packed along its last axis) unpacked: the first ``count`` of each row."""
    return _unpack(sources[0], bits, count, dtype)


def _gather_weight(sources: list[np.ndarray], bits: int, shape: tuple[int, ...], padded: tuple[int, ...],
                   axis: int, dtype: Any) -> np.ndarray:
    """GatherBlockQuantized's data as its logical values (unpacked when ``bits``), padded to whole blocks."""
    values = _unpack(sources[0], bits, shape[-1], dtype) if bits else sources[0].astype(dtype)
    return _padded([values], shape, padded, axis) if padded != shape else values


_SOURCE_INPUTS = {"com.microsoft:MatMulNBits": frozenset({1, 2, 3}), "DequantizeLinear": frozenset({0, 1, 2}),
                  "com.microsoft:DequantizeLinear": frozenset({0, 1, 2}),
                  "com.microsoft:GatherBlockQuantized": frozenset({0, 2, 3})}
"""The inputs of each op whose values a derived entry may carry instead (weights, scales and zero points)."""


def replaced_sources(consumers: Mapping[str, tuple[Consumer, ...]], specs: list[QuantizedSpec]) -> set[str]:
    """The keys of the constants whose values the image holds elsewhere: read only as the weight or zero points
    of described quantized nodes, and the bytes of none of their parts (``drop_quantized_sources``)."""
    described = {spec.key: spec for spec in specs if spec.parts is not None}
    used = {part.key for spec in described.values() for part in spec.parts or ()}
    used |= {spec.bias for spec in described.values() if spec.bias}
    return {
        key for key, read_by in consumers.items()
        if key not in used and read_by
        and all(c.node in described and c.input in _SOURCE_INPUTS.get(c.op_type, ()) for c in read_by)
    }
