"""dmlbridge: ONNX tensors and numpy arrays as byte-exact DirectML buffer tensors.

    >>> import numpy as np, dmlbridge
    >>> t = dmlbridge.prepare(np.arange(6, dtype=np.float32).reshape(2, 3), min_dims=4)
    >>> t.dml_type.name, t.sizes, t.total_tensor_size_in_bytes
    ('FLOAT32', (1, 1, 2, 3), 24)

See README.md for the mapping table and the layout rules. Only the names exported here are the public API: the
submodules (``dmlbridge.plan``, ``dmlbridge.convert``, ...) are the library's own layout and may change.
"""

from __future__ import annotations

from dmlbridge.bindings import binding_list
from dmlbridge.convert import check_conversion, convert_model
from dmlbridge.decode import decode
from dmlbridge.descs import BufferTensorDesc, tensor_desc_array
from dmlbridge.encode import PreparedTensor, prepare, prepare_into
from dmlbridge.errors import (
    CleanupWarning,
    DestinationError,
    DmlBridgeError,
    ExternalDataError,
    InvalidArgumentError,
    LayoutError,
    ManifestError,
    TensorProtoError,
    TensorTooLargeError,
    UnsupportedTypeError,
    ValueRangeError,
)
from dmlbridge.layout import calc_buffer_tensor_size
from dmlbridge.manifest import BufferFile
from dmlbridge.mapping import MappingRow, dml_type_for, mapping_table
from dmlbridge.onnx_tensor import TensorInfo, tensor_info, tensor_to_array
from dmlbridge.options import DEFAULT_MAX_BUFFER_BYTES, DEFAULT_MAX_TENSOR_BYTES, max_buffer_bytes_for
from dmlbridge.output_folder import CleanReport, clean
from dmlbridge.packing import pack_4bit, unpack_4bit
from dmlbridge.plan import Binding, UploadPlan, load_plan, plan_model
from dmlbridge.planning import ConvertedEntry, PlanEntry
from dmlbridge.target import Target
from dmlbridge.types import DmlDataType, FeatureLevel, OnnxDataType
from dmlbridge.version import __version__ as __version__
from dmlbridge.workers import available_cpus

__all__ = [
    "DEFAULT_MAX_BUFFER_BYTES",
    "DEFAULT_MAX_TENSOR_BYTES",
    "Binding",
    "BufferFile",
    "BufferTensorDesc",
    "CleanReport",
    "CleanupWarning",
    "ConvertedEntry",
    "DestinationError",
    "DmlBridgeError",
    "DmlDataType",
    "ExternalDataError",
    "FeatureLevel",
    "InvalidArgumentError",
    "LayoutError",
    "ManifestError",
    "MappingRow",
    "OnnxDataType",
    "PlanEntry",
    "PreparedTensor",
    "Target",
    "TensorInfo",
    "TensorProtoError",
    "TensorTooLargeError",
    "UnsupportedTypeError",
    "UploadPlan",
    "ValueRangeError",
    "available_cpus",
    "binding_list",
    "calc_buffer_tensor_size",
    "check_conversion",
    "clean",
    "convert_model",
    "decode",
    "dml_type_for",
    "load_plan",
    "mapping_table",
    "max_buffer_bytes_for",
    "pack_4bit",
    "plan_model",
    "prepare",
    "prepare_into",
    "tensor_desc_array",
    "tensor_info",
    "tensor_to_array",
    "unpack_4bit",
]
