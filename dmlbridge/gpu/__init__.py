"""From Python to the GPU: a Direct3D 12 and DirectML device, the ``Target`` it is, a conversion uploaded into it
and each tensor's binding, through the standard library's ctypes (Windows only: it imports anywhere, and its
calls raise GpuUnavailableError elsewhere).

May import: ``plan`` and below.

    >>> import dmlbridge.gpu
    >>> {"create_device", "target_of", "upload", "upload_tensors"} <= set(dmlbridge.gpu.__all__)
    True
"""

from __future__ import annotations

from dmlbridge.errors import ComError, DeviceRemovedError, GpuError, GpuUnavailableError
from dmlbridge.gpu.device import Device, target_of
from dmlbridge.gpu.dispatch import run_compiled, run_operator
from dmlbridge.gpu.graph import InputEdge, IntermediateEdge, OutputEdge, run_graph
from dmlbridge.gpu.resources import DEFAULT_STAGING_BYTES
from dmlbridge.gpu.runtime import create_device
from dmlbridge.gpu.structs import DML_BINDING_DESC, DML_OPERATOR_DESC
from dmlbridge.gpu.upload import UploadedPlan, UploadedTensors, upload, upload_tensors

__all__ = [  # noqa: RUF022 (grouped by concept, not sorted)
    # The device
    "create_device",
    "Device",
    "target_of",
    # Uploads
    "upload",
    "upload_tensors",
    "UploadedPlan",
    "UploadedTensors",
    "DEFAULT_STAGING_BYTES",
    # Operators
    "run_operator",
    "run_compiled",
    # Graphs
    "run_graph",
    "InputEdge",
    "IntermediateEdge",
    "OutputEdge",
    # DirectML's structs as ctypes
    "DML_BINDING_DESC",
    "DML_OPERATOR_DESC",
    # Errors
    "GpuError",
    "GpuUnavailableError",
    "ComError",
    "DeviceRemovedError",
]

for _name in __all__:  # public classes show the name users import them by
    _value = globals()[_name]
    if isinstance(_value, type) and _value.__module__.startswith("dmlbridge.gpu."):
        _value.__module__ = "dmlbridge.gpu"
del _name, _value
