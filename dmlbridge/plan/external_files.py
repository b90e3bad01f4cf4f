"""A plan's external data files, looked at without reading their bytes: checked, as ``dmlbridge inspect`` does so
that a missing or short file is the error a conversion would give before any conversion runs; and measured, each
byte of a file once however many tensors name it (:func:`external_data_bytes`), for the default bound of a
conversion's output.

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper
    >>> from dmlbridge.model.onnx_file import read_model
    >>> w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    >>> with read_model(helper.make_model(helper.make_graph([], "g", [], [], [w])), None) as loaded:
    ...     examine_external_data(loaded, [], None)  # (no external data: nothing to open)
"""

from __future__ import annotations

import os
from typing import Any

from dmlbridge.errors import ExternalDataError
from dmlbridge.model.constants import ModelConstant, iter_external_tensors
from dmlbridge.model.onnx_file import LoadedModel, external_data_reader, need_reader
from dmlbridge.onnx.external_data import ExternalDataReader
from dmlbridge.onnx.tensor_proto import tensor_info

__all__ = ["examine_external_data", "external_data_bytes"]


def examine_external_data(loaded: LoadedModel, constants: list[ModelConstant],
                          external_data_root: str | os.PathLike[str] | None) -> None:
    """Open and check the external data file of each of ``constants`` as a conversion would, reading none of its
    bytes (:meth:`dmlbridge.onnx.external_data.ExternalDataReader.examine`); ExternalDataError names the first
    that is missing or too short."""
    reader = external_data_reader(loaded, external_data_root)
    need_reader(constants, reader)  # (no reader: no external data, or this refuses it)
    if reader is None:
        return
    try:
        for tensor in iter_external_tensors(constants):
            reader.examine(tensor, tensor_info(tensor).packed_nbytes)
    finally:
        reader.close()


def external_data_bytes(constants: list[ModelConstant], reader: ExternalDataReader | None) -> int:
    """The bytes of external data the external ``constants`` read, each byte of a file counted once: per file (by
    identity: two names of one file are one file), the union of the ranges read from it, at most its size. Many
    tensors may name the same range of one file (300 initializers naming one 1 MiB range ask for 300 MiB from a
    10 KB model), so the sum of their sizes bounds nothing. A tensor whose file cannot be found counts its own
    size (its conversion fails on it anyway).

        >>> external_data_bytes([], None)
        0
    """
    ranges: dict[Any, list[tuple[int, int]]] = {}
    sizes: dict[Any, int] = {}
    found: dict[str, tuple[Any, int]] = {}  # location -> (file, size): each location resolved once
    alone = 0
    for constant in constants:
        if constant.storage != "external" or constant.packed_nbytes <= 0:
            continue
        tensor, nbytes = constant.proto, constant.packed_nbytes
        location = next((e.value for e in tensor.external_data if e.key == "location"), None)
        try:
            if reader is None or not isinstance(location, str):
                raise ExternalDataError("no file to count")
            offset = next((e.value for e in tensor.external_data if e.key == "offset"), "0")
            if location not in found or not offset.isdigit():
                file, start, size = reader.locate(tensor, nbytes)
                found[location] = (file, size)
            else:
                file, size = found[location]
                start = int(offset)
        except ExternalDataError:
            alone += nbytes
            continue
        ranges.setdefault(file, []).append((start, start + nbytes))
        sizes[file] = size
    total = alone
    for file, spans in ranges.items():
        spans.sort()
        covered, reached = 0, 0
        for start, end in spans:
            start, end = max(start, reached), min(end, sizes[file])
            if end > start:
                covered += end - start
                reached = end
        total += covered
    return total
