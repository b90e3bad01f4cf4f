"""A constant's values a range of elements at a time, and what decoding them allocates.

Conversion and verification cut a large constant into chunks of elements and convert (or compare) one chunk at
a time, so that memory is bounded by the chunk, not by the tensor. :class:`ConstantSlices` gives the values of
elements ``[start, stop)``: a tensor in external data reads only their bytes (:func:`decode_range`); a sparse
tensor keeps its values and checked indices and densifies each range on its own (``SparseIndices.scatter``);
any other constant (its bytes inside the model file, which protobuf hands out only as a copy of the whole) is
decoded once, and its values are kept while its chunks are converted: :meth:`ConstantSlices.held_bytes` says how
much that keeps.

:func:`decode_bytes` is the most decoding a whole constant allocates (the stored bytes read, the decoded array, a
sparse tensor's parts and its dense values): with the output, what a job is charged (dmlbridge.system.workers).

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper
    >>> from dmlbridge.model.constants import find_constants
    >>> model = helper.make_model(helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.arange(6.0), "w")]))
    >>> slices = ConstantSlices(find_constants(model)[0], None, 1 << 20)
    >>> slices.values(2, 4).tolist(), slices.held_bytes()
    ([2.0, 3.0], 48)
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from dmlbridge.errors import DmlBridgeError
from dmlbridge.model.constants import ModelConstant, sparse_parts
from dmlbridge.onnx.external_data import ExternalDataReader
from dmlbridge.onnx.sparse import WORK_BYTES, SparseIndices
from dmlbridge.onnx.tensor_proto import TensorInfo, decode_range, tensor_info

__all__ = ["CHUNK_BYTES", "SPARSE_KINDS", "ConstantSlices", "decode_bytes", "sparse_direct", "step_of"]

CHUNK_BYTES = 16 << 20
"""About this many bytes (of values or of output, the larger) per chunk of a constant cut into chunks; constants
of twice this size and more are cut (verification cuts them at half this size: dmlbridge.plan.verify)."""

SPARSE_KINDS = ("sparse_initializer", "sparse_value")
_SUB_BYTE = (2, 4, 6)  # ONNX bit widths whose decoded array is not a view of the stored bytes


def _stored_peak(info: TensorInfo) -> int:
    """What decoding one TensorProto allocates: a copy of its stored bytes (external data is read, raw_data is
    copied by protobuf on every access) and, for sub-byte types, the unpacked array; a typed field's entries (up to
    8 bytes each) and the array made from them."""
    if info.storage == "typed":
        return 8 * info.size + info.nbytes
    return info.packed_nbytes + (info.nbytes if info.onnx_type.bitwidth in _SUB_BYTE else 0)


def _sparse_stored(constant: ModelConstant) -> int:
    """The bytes a sparse constant's values and indices take decoded, with the bitmap of unordered indices."""
    values, indices = tensor_info(constant.proto.values), tensor_info(constant.proto.indices)
    return _stored_peak(values) + _stored_peak(indices) + (constant.size + 7) // 8 + WORK_BYTES


def decode_bytes(constant: ModelConstant) -> int:
    """The most decoding the whole constant (``to_array``) allocates at once."""
    kind = constant.kind
    if kind in ("initializer", "value"):
        return _stored_peak(constant.info)
    if kind in SPARSE_KINDS:
        return _sparse_stored(constant) + constant.nbytes
    if kind == "derived":  # made from its sources' values
        return sum(decode_bytes(source) for source in constant.proto.sources) + 2 * constant.nbytes
    return 2 * constant.nbytes  # the attribute forms: a list's entries, then the array


def sparse_direct(constant: ModelConstant, conversion: str | None, dml_bits: int) -> bool:
    """Whether a sparse constant's DirectML bytes are its dense values as they are (a native type of whole
    bytes): then they are densified straight into the output, with no dense array of their own."""
    return constant.kind in SPARSE_KINDS and conversion == "native" and dml_bits >= 8


def step_of(constant: ModelConstant, larger: int, chunk_bytes: int) -> int:
    """Elements per chunk for about ``chunk_bytes`` of the larger of values and output (``larger`` bytes for the
    whole): even, so that 4-bit chunks are whole bytes, and a multiple of 4 for the 2- and 6-bit types, so that
    each chunk of external data starts on a byte."""
    multiple = 4 if constant.onnx_type.bitwidth in (2, 6) else 2
    return max(multiple, chunk_bytes * constant.size // larger // multiple * multiple)


class ConstantSlices:
    """The values of one constant, a range of elements at a time (see the module docstring). Thread-safe: the
    chunks of one constant may be converted by several workers at once."""

    def __init__(self, constant: ModelConstant, reader: ExternalDataReader | None, max_tensor_bytes: int) -> None:
        self.constant = constant
        self._reader = reader
        self._max_tensor_bytes = max_tensor_bytes
        self.sparse = constant.kind in SPARSE_KINDS
        self._info: TensorInfo | None = None
        if constant.kind in ("initializer", "value") and constant.storage == "external" and reader is not None:
            self._info = constant.info  # read by range: nothing kept
        self._lock = threading.Lock()
        self._values: np.ndarray | None = None
        self._indices: SparseIndices | None = None

    def held_bytes(self) -> int:
        """What this keeps while the constant's chunks are converted: nothing for external data (each chunk reads
        its own bytes), a sparse tensor's values and checked indices, else the decoded values."""
        if self._info is not None:
            return 0
        if self.sparse:
            return _sparse_stored(self.constant)
        return decode_bytes(self.constant)

    def chunk_bytes(self, count: int) -> int:
        """What decoding ``count`` elements allocates beyond what is held: their stored bytes and values (external
        data), their dense values (sparse), nothing (held values: views)."""
        if self._info is not None:
            part = TensorInfo(self._info.name, self._info.onnx_type, (count,),
                              count * self.constant.nbytes // max(1, self.constant.size), "external", count,
                              -(-count * self._info.onnx_type.bitwidth // 8))
            return _stored_peak(part)
        if self.sparse:
            return count * self.constant.onnx_type.numpy().itemsize
        return 0

    def _held(self) -> tuple[np.ndarray, SparseIndices | None]:
        with self._lock:
            if self._values is None:
                constant = self.constant
                if self.sparse:
                    values, indices = sparse_parts(constant.proto, constant.onnx_type, constant.shape, self._reader,
                                                   self._max_tensor_bytes, constant.key)
                    if values.ndim != 1:  # (checked when found; what densify_sparse says)
                        raise DmlBridgeError(f"sparse tensor {constant.key!r}: values must be 1-D")
                    checked = SparseIndices(indices, constant.shape, values.shape[0], f"sparse tensor {constant.key!r}")
                    checked.check()
                    self._values, self._indices = values, checked
                else:
                    self._values = constant.to_array(reader=self._reader,
                                                     max_tensor_bytes=self._max_tensor_bytes).reshape(-1)
            return self._values, self._indices

    def values(self, start: int, stop: int, out: np.ndarray | None = None,
               buffer: np.ndarray | None = None) -> np.ndarray:
        """The values of elements ``[start, stop)``, flat; for a sparse constant written into ``out`` when given
        (``stop - start`` elements of the values' dtype in any byte order: the output buffer, say). ``buffer``: a
        uint8 array external data may be read into (the values may then be a view of it)."""
        if self._info is not None:
            assert self._reader is not None
            return decode_range(self.constant.proto, self._info, self._reader, start, stop, buffer)
        values, indices = self._held()
        if indices is None:
            return values[start:stop]
        dense: Any = out
        if dense is None:
            dense = np.zeros(stop - start, dtype=values.dtype)
        else:
            dense[...] = 0
        indices.scatter(values, dense, start, stop)
        return dense

    def release(self) -> None:
        """Forget what is held (once every chunk is done)."""
        with self._lock:
            self._values = self._indices = None
