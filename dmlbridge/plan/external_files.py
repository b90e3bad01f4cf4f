"""Checking a plan's external data files without reading their bytes: what ``dmlbridge inspect`` does, so that a
missing or short file is the error a conversion would give, before any conversion runs.

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper
    >>> from dmlbridge.model.onnx_file import read_model
    >>> w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    >>> with read_model(helper.make_model(helper.make_graph([], "g", [], [], [w])), None) as loaded:
    ...     examine_external_data(loaded, [], None)  # (no external data: nothing to open)
"""

from __future__ import annotations

import os

from dmlbridge.model.constants import ModelConstant, iter_external_tensors
from dmlbridge.model.onnx_file import LoadedModel, external_data_reader, need_reader
from dmlbridge.onnx.tensor_proto import tensor_info

__all__ = ["examine_external_data"]


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
