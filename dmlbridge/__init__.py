"""dmlbridge: ONNX tensors and numpy arrays as byte-exact DirectML buffer tensors.

    >>> import numpy as np, dmlbridge
    >>> t = dmlbridge.prepare(np.arange(6, dtype=np.float32).reshape(2, 3), min_dims=4)
    >>> t.dml_type.name, t.sizes, t.total_tensor_size_in_bytes
    ('FLOAT32', (1, 1, 2, 3), 24)

The public API is the names of ``__all__`` below, grouped by what they are for, and their keyword arguments;
``dmlbridge.errors`` holds the errors too. The packages and modules (``dmlbridge.plan``,
``dmlbridge.writing.convert``, ...) are the library's own layout and change between versions, and so does a
pickled object: plans and entries are not meant to be pickled across versions. Public classes say ``dmlbridge``
as their module. ``import dmlbridge`` itself loads only the errors and the version: the first use of any other
name loads the library (numpy and onnx with it), as the import did in earlier versions.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dmlbridge.errors import (
    CleanupWarning,
    ComError,
    DestinationError,
    DeviceRemovedError,
    DmlBridgeError,
    ExternalDataError,
    GpuError,
    GpuOutOfMemoryError,
    GpuUnavailableError,
    InvalidArgumentError,
    LayoutError,
    ManifestError,
    TensorProtoError,
    TensorTooLargeError,
    UnsupportedTypeError,
    ValueRangeError,
)
from dmlbridge.version import __version__ as __version__

if TYPE_CHECKING:  # (what _HOMES loads at the first use of a name: the type checkers' view of it)
    from dmlbridge.manifest.format import MANIFEST_FORMAT_VERSION, BufferFile, manifest_schema
    from dmlbridge.model.consumers import Consumer
    from dmlbridge.onnx.tensor_proto import DEFAULT_MAX_TENSOR_BYTES, TensorInfo, tensor_info, tensor_to_array
    from dmlbridge.placement.consumer_descs import PlanConsumer
    from dmlbridge.placement.entries import ConvertedEntry, PlanEntry
    from dmlbridge.placement.options import DEFAULT_MAX_BUFFER_BYTES, max_buffer_bytes_for
    from dmlbridge.placement.selection import CONSTANT_KINDS
    from dmlbridge.plan.bindings import binding_list
    from dmlbridge.plan.buffer_binding import Binding
    from dmlbridge.plan.upload_plan import UploadPlan, load_plan, plan_model
    from dmlbridge.quantized.records import QuantizedPart, QuantizedWeight
    from dmlbridge.system.workers import available_cpus
    from dmlbridge.tensor.decode import decode
    from dmlbridge.tensor.descs import (
        DML_BUFFER_BINDING,
        DML_BUFFER_TENSOR_DESC,
        DML_TENSOR_DESC,
        BufferTensorDesc,
        tensor_desc_array,
    )
    from dmlbridge.tensor.encode import PreparedTensor, prepare, prepare_into
    from dmlbridge.tensor.layout import calc_buffer_tensor_size
    from dmlbridge.tensor.views import broadcast_desc, with_leading_ones
    from dmlbridge.types.data_types import DmlDataType, FeatureLevel, OnnxDataType
    from dmlbridge.types.mapping import MappingRow, dml_type_for, mapping_table
    from dmlbridge.types.nibbles import pack_4bit, unpack_4bit
    from dmlbridge.types.target import Target
    from dmlbridge.writing.cleanup import CleanReport, clean
    from dmlbridge.writing.convert import check_conversion, convert_model

__all__ = [  # noqa: RUF022 (grouped by concept, not sorted)
    # One tensor: an array or TensorProto as a DirectML buffer tensor, and back
    "prepare",
    "prepare_into",
    "PreparedTensor",
    "BufferTensorDesc",
    "tensor_desc_array",
    "broadcast_desc",
    "with_leading_ones",
    "calc_buffer_tensor_size",
    "decode",
    "pack_4bit",
    "unpack_4bit",
    # DirectML's structs as ctypes (what the as_ctypes methods return)
    "DML_BUFFER_TENSOR_DESC",
    "DML_TENSOR_DESC",
    "DML_BUFFER_BINDING",
    # Data types, devices and the mapping between ONNX and DirectML
    "DmlDataType",
    "OnnxDataType",
    "FeatureLevel",
    "Target",
    "dml_type_for",
    "mapping_table",
    "MappingRow",
    # ONNX tensors as stored
    "tensor_to_array",
    "tensor_info",
    "TensorInfo",
    "DEFAULT_MAX_TENSOR_BYTES",
    # Whole models: plan, convert, load, verify (UploadPlan.verify), bind, clean
    "plan_model",
    "convert_model",
    "check_conversion",
    "load_plan",
    "UploadPlan",
    "PlanEntry",
    "ConvertedEntry",
    "Consumer",
    "PlanConsumer",
    "BufferFile",
    "Binding",
    "binding_list",
    "QuantizedWeight",
    "QuantizedPart",
    "CONSTANT_KINDS",
    "DEFAULT_MAX_BUFFER_BYTES",
    "max_buffer_bytes_for",
    "available_cpus",
    "clean",
    "CleanReport",
    # The manifest format (docs/manifest.md)
    "MANIFEST_FORMAT_VERSION",
    "manifest_schema",
    # Errors (every one a DmlBridgeError) and the one warning
    "DmlBridgeError",
    "InvalidArgumentError",
    "UnsupportedTypeError",
    "ValueRangeError",
    "LayoutError",
    "TensorProtoError",
    "TensorTooLargeError",
    "ExternalDataError",
    "ManifestError",
    "DestinationError",
    "GpuError",
    "GpuUnavailableError",
    "ComError",
    "GpuOutOfMemoryError",
    "DeviceRemovedError",
    "CleanupWarning",
]

# Where each public name but the errors and the version is defined. `import dmlbridge` loads only those two (so
# `dmlbridge --version` needs neither numpy nor onnx, which take a second to import); the first use of any other
# name loads every module below, as one import of the package did before.
_HOMES: dict[str, tuple[str, ...]] = {
    "dmlbridge.manifest.format": ("MANIFEST_FORMAT_VERSION", "BufferFile", "manifest_schema"),
    "dmlbridge.model.consumers": ("Consumer",),
    "dmlbridge.onnx.tensor_proto": ("DEFAULT_MAX_TENSOR_BYTES", "TensorInfo", "tensor_info", "tensor_to_array"),
    "dmlbridge.placement.consumer_descs": ("PlanConsumer",),
    "dmlbridge.placement.entries": ("ConvertedEntry", "PlanEntry"),
    "dmlbridge.placement.options": ("DEFAULT_MAX_BUFFER_BYTES", "max_buffer_bytes_for"),
    "dmlbridge.placement.selection": ("CONSTANT_KINDS",),
    "dmlbridge.plan.bindings": ("binding_list",),
    "dmlbridge.plan.buffer_binding": ("Binding",),
    "dmlbridge.plan.upload_plan": ("UploadPlan", "load_plan", "plan_model"),
    "dmlbridge.quantized.records": ("QuantizedPart", "QuantizedWeight"),
    "dmlbridge.system.workers": ("available_cpus",),
    "dmlbridge.tensor.decode": ("decode",),
    "dmlbridge.tensor.descs": ("DML_BUFFER_BINDING", "DML_BUFFER_TENSOR_DESC", "DML_TENSOR_DESC",
                               "BufferTensorDesc", "tensor_desc_array"),
    "dmlbridge.tensor.encode": ("PreparedTensor", "prepare", "prepare_into"),
    "dmlbridge.tensor.layout": ("calc_buffer_tensor_size",),
    "dmlbridge.tensor.views": ("broadcast_desc", "with_leading_ones"),
    "dmlbridge.types.data_types": ("DmlDataType", "FeatureLevel", "OnnxDataType"),
    "dmlbridge.types.mapping": ("MappingRow", "dml_type_for", "mapping_table"),
    "dmlbridge.types.nibbles": ("pack_4bit", "unpack_4bit"),
    "dmlbridge.types.target": ("Target",),
    "dmlbridge.writing.convert": ("check_conversion", "convert_model"),
    "dmlbridge.writing.cleanup": ("CleanReport", "clean"),
}


def _load_everything() -> None:
    for home, names in _HOMES.items():
        module = importlib.import_module(home)
        globals().update((name, getattr(module, name)) for name in names)
    for name in __all__:  # public classes show the name users import them by (as onnx-ir does)
        value = globals()[name]
        if isinstance(value, type) and value.__module__.startswith("dmlbridge."):
            value.__module__ = "dmlbridge"


if not TYPE_CHECKING:  # (type checkers see the imports above, and flag a name the package does not have)

    def __getattr__(name: str) -> Any:
        """A public name's first use loads the library (PEP 562); then it is an ordinary attribute."""
        if name.startswith("__"):
            raise AttributeError(f"module 'dmlbridge' has no attribute {name!r}")
        _load_everything()
        try:
            return globals()[name]
        except KeyError:
            raise AttributeError(f"module 'dmlbridge' has no attribute {name!r}") from None

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))


for _name in __all__:  # (the errors, loaded already: the rest are renamed as they load)
    _value = globals().get(_name)
    if isinstance(_value, type) and _value.__module__.startswith("dmlbridge."):
        _value.__module__ = "dmlbridge"
del _name, _value
