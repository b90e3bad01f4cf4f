"""dmlbridge: ONNX tensors and numpy arrays as byte-exact DirectML buffer tensors.

    >>> import numpy as np, dmlbridge
    >>> t = dmlbridge.prepare(np.arange(6, dtype=np.float32).reshape(2, 3), min_dims=4)
    >>> t.dml_type.name, t.sizes, t.total_tensor_size_in_bytes
    ('FLOAT32', (1, 1, 2, 3), 24)

See README.md for the mapping table and the layout rules. Only the names exported here are the public API: the
packages and modules (``dmlbridge.plan``, ``dmlbridge.writing.convert``, ...) are the library's own layout
and change between versions.
"""

from __future__ import annotations

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
from dmlbridge.manifest.format import BufferFile
from dmlbridge.onnx.tensor_proto import TensorInfo, tensor_info, tensor_to_array
from dmlbridge.plan.bindings import binding_list
from dmlbridge.plan.upload_plan import Binding, UploadPlan, load_plan, plan_model
from dmlbridge.planning.options import DEFAULT_MAX_BUFFER_BYTES, DEFAULT_MAX_TENSOR_BYTES, max_buffer_bytes_for
from dmlbridge.planning.placement import ConvertedEntry, PlanEntry
from dmlbridge.system.workers import available_cpus
from dmlbridge.tensor.decode import decode
from dmlbridge.tensor.descs import BufferTensorDesc, tensor_desc_array
from dmlbridge.tensor.encode import PreparedTensor, prepare, prepare_into
from dmlbridge.tensor.layout import calc_buffer_tensor_size
from dmlbridge.types.data_types import DmlDataType, FeatureLevel, OnnxDataType
from dmlbridge.types.mapping import MappingRow, dml_type_for, mapping_table
from dmlbridge.types.nibbles import pack_4bit, unpack_4bit
from dmlbridge.types.target import Target
from dmlbridge.version import __version__ as __version__
from dmlbridge.writing.convert import check_conversion, convert_model
from dmlbridge.writing.folder import CleanReport, clean

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
