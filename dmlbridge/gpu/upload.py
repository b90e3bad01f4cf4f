"""Uploading to the GPU: a written plan as one default-heap buffer per buffer file (:func:`upload`), or prepared
tensors in one buffer at aligned offsets (:func:`upload_tensors`); then each tensor's ``DML_BUFFER_BINDING``, and
its values read back from the GPU.

An upload streams through the upload heap of :mod:`~dmlbridge.gpu.resources` (64 MiB by default, the most in
flight): a buffer file is read a piece at a time into it, so what dmlbridge allocates does not grow with the
conversion. The default-heap buffers are GPU memory (on a software device, process memory).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from dmlbridge.errors import InvalidArgumentError, TensorTooLargeError
from dmlbridge.gpu.com import release
from dmlbridge.gpu.device import Device, as_device
from dmlbridge.gpu.resources import (
    DEFAULT_STAGING_BYTES,
    Readback,
    Staging,
    check_staging_bytes,
    create_buffer,
)
from dmlbridge.gpu.structs import (
    D3D12_HEAP_TYPE_DEFAULT,
    D3D12_RESOURCE_STATE_COPY_DEST,
    DML_BINDING_DESC,
    DML_BINDING_TYPE_BUFFER,
)
from dmlbridge.onnx.tensor_proto import DEFAULT_MAX_TENSOR_BYTES
from dmlbridge.placement.options import DEFAULT_MAX_BUFFER_BYTES, check_max_buffer_bytes
from dmlbridge.plan.upload_plan import UploadPlan
from dmlbridge.quantized.records import QuantizedPart
from dmlbridge.tensor.decode import decode
from dmlbridge.tensor.descs import DML_BUFFER_BINDING, DML_BUFFER_TENSOR_DESC, BufferTensorDesc
from dmlbridge.tensor.encode import PreparedTensor
from dmlbridge.types.data_types import DmlDataType, FeatureLevel
from dmlbridge.types.target import Target

__all__ = ["PART_FORMS", "PART_ROLES", "UploadedPlan", "UploadedTensors", "check_plan_fits", "upload",
           "upload_tensors"]

PART_FORMS = ("blocked", "split")
"""A quantized weight's forms (docs/bindings.md): ``blocked_form()`` and ``parts()``."""
PART_ROLES = ("weight", "scales", "zero_points")


class _Uploaded:
    """What both uploads share: their device, the buffers, the readback, the bindings and ``close()``."""

    def __init__(self, device: Device, owns_device: bool, staging_bytes: int) -> None:
        self.device = device
        self._owns_device = owns_device
        self._resources: list[int] = []
        self._readback: Readback | None = None
        self._chunk = staging_bytes // 2
        self.staging_bytes = 0
        """The size of the upload heap the upload went through (freed once it is done)."""
        self._closed = False

    def _fill(self, sizes: Sequence[int], fill: Any, doing: str) -> None:
        """Make one default-heap buffer per size and fill each (``fill(i)`` gives buffer i's fill function)."""
        with self.device.lock:
            staging = Staging(self.device, self._chunk * 2, max(sizes, default=0))
            self.staging_bytes = staging.size
            try:
                for index, size in enumerate(sizes):
                    self._resources.append(create_buffer(self.device, size, D3D12_HEAP_TYPE_DEFAULT,
                                                         D3D12_RESOURCE_STATE_COPY_DEST, f"making buffer {index}"))
                    staging.upload(self._resources[-1], size, fill(index), f"{doing} {index}")
                staging.flush()
            finally:
                staging.close()

    def resource(self, index: int = 0) -> int:
        """The ``ID3D12Resource*`` (an int) of buffer ``index``: a default-heap buffer in UNORDERED_ACCESS, the
        state DirectML binds buffers in. The int is borrowed: it is valid while this upload is open (not closed,
        and referenced); :meth:`binding` gives a binding that keeps the upload alive."""
        self._check_open()
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self._resources):
            raise InvalidArgumentError(f"there is no buffer {index!r}: the upload has {len(self._resources)} "
                                       f"(0 to {len(self._resources) - 1})")
        return self._resources[index]

    @property
    def resources(self) -> tuple[int, ...]:
        """Every buffer's ``ID3D12Resource*``, by index: what ``Binding.as_ctypes(resources)`` takes (borrowed ints,
        valid while this upload is open, as :meth:`resource` says)."""
        self._check_open()
        return tuple(self._resources)

    def _where(self, key: Any) -> tuple[int, int, BufferTensorDesc]:
        raise NotImplementedError

    def binding(self, key: Any) -> DML_BUFFER_BINDING:
        """The ``DML_BUFFER_BINDING`` of ``key``: its buffer's resource, its offset and its
        ``TotalTensorSizeInBytes``. It keeps this upload alive (``.upload``), so that its buffer outlives every
        binding of it; after ``close()``, ``run_operator`` and ``run_graph`` refuse it."""
        buffer, offset, desc = self._where(key)
        binding = DML_BUFFER_BINDING(self.resource(buffer), offset, desc.total_tensor_size_in_bytes)
        binding.upload = self  # (a binding holds a raw resource pointer: the upload frees it when collected)
        binding.tensor_desc = desc
        return binding

    def binding_desc(self, key: Any) -> DML_BINDING_DESC:
        """The ``DML_BINDING_DESC`` (type BUFFER) of ``key``, for ``IDMLBindingTable::BindInputs``: it points at
        :meth:`binding`'s struct, which it keeps alive (``.buffer_binding``)."""
        binding = self.binding(key)
        desc = DML_BINDING_DESC(DML_BINDING_TYPE_BUFFER, ctypes.addressof(binding))
        desc.buffer_binding = binding
        return desc

    def buffer_tensor_desc(self, key: Any) -> DML_BUFFER_TENSOR_DESC:
        """The ``DML_BUFFER_TENSOR_DESC`` ``key`` is bound with (its Sizes and Strides kept alive with it)."""
        return self._where(key)[2].as_ctypes()

    def read_bytes(self, key: Any, *, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> np.ndarray:
        """The ``TotalTensorSizeInBytes`` bytes of ``key`` read back from the GPU now, as a uint8 array (through a
        readback heap of at most half the staging size, filled with 0xA5 before each copy). More than
        ``max_tensor_bytes`` is refused (TensorTooLargeError) before anything is allocated."""
        buffer, offset, desc = self._where(key)
        size = desc.total_tensor_size_in_bytes
        if size > max_tensor_bytes:
            raise TensorTooLargeError(f"{key!r} holds {size} bytes, more than max_tensor_bytes={max_tensor_bytes}; "
                                      "pass a larger max_tensor_bytes= to read it if you have the memory")
        with self.device.lock:  # (threads reading one upload share its readback heap and command list)
            if self._readback is None:
                self._readback = Readback(self.device, max(256, self._chunk))
            return self._readback.read(self.resource(buffer), offset, size)

    def _decoded(self, desc: BufferTensorDesc, data: np.ndarray) -> np.ndarray:
        return decode(data, desc.data_type, desc.sizes, desc.strides)

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgumentError("this upload was closed; upload again to read or bind its buffers")

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def close(self) -> None:
        """Release the buffers (wait for the GPU first), and the device when the upload made its own."""
        with self.device.lock:
            if self._closed:
                return
            self._closed = True
            self._release()

    def _release(self) -> None:
        try:
            if self._readback is not None:
                self._readback.close()
            if not self.device.closed:
                self.device.settle()
        finally:
            for resource in self._resources:
                release(resource)
            self._resources = []
            if self._owns_device:
                self.device.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:  # noqa: BLE001 (a finalizer must not raise)
                pass


class UploadedPlan(_Uploaded):
    """A written plan in GPU memory: one default-heap buffer per buffer file (``resource(i)`` for
    ``plan.buffers[i]``), each entry and quantized part bound where the plan says. The buffer files of the
    constants read on the CPU (``plan.buffers[i].uploaded`` False, after the others) are not uploaded, and their
    entries have no binding: ``plan.array(key)`` gives their values.

    A ``key`` is an entry's key (``"weight"``) or a quantized part, as ``(record, form, role)``:
    ``("qmatmul", "blocked", "weight")``, form ``"blocked"`` (``QuantizedWeight.blocked_form()``) or ``"split"``
    (``parts()``), role ``"weight"``, ``"scales"`` or ``"zero_points"``: the names of the binding list
    (docs/bindings.md). ``close()`` (or a ``with`` block) frees the buffers.

    Example:
        >>> import dmlbridge, dmlbridge.gpu, numpy as np, os, tempfile
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
        >>> plan = dmlbridge.convert_model(helper.make_model(helper.make_graph([], "g", [], [], [w])),
        ...                                os.path.join(tempfile.mkdtemp(), "w"), progress=False)
        >>> with dmlbridge.gpu.create_device() as device, dmlbridge.gpu.upload(plan, device) as uploaded:
        ...     print(uploaded.binding("w").Offset, uploaded.read("w").tolist())
        0 [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        >>> plan.close()
    """

    def __init__(self, plan: UploadPlan, device: Device, owns_device: bool, staging_bytes: int) -> None:
        super().__init__(device, owns_device, staging_bytes)
        self.plan = plan
        try:
            # (the buffers of the constants read on the CPU, after the others, are not uploaded: upload="bound")
            self._fill([buffer.size for buffer in plan.buffers[: plan.upload_buffer_count]], self._file_filler,
                       "uploading buffer file")
        except BaseException:
            self.close()
            raise

    def _file_filler(self, index: int) -> Any:
        return lambda out, start: self.plan.read_buffer(index, start, out)

    def _where(self, key: Any) -> tuple[int, int, BufferTensorDesc]:
        self._check_open()
        if isinstance(key, str):
            entry = self.plan.entries.get(key)
            if entry is None or entry.skipped is not None or entry.buffer_desc is None:
                why = "no such entry" if entry is None else f"it was skipped ({entry.skipped})"
                raise InvalidArgumentError(f"the plan has no binding for {key!r}: {why}")
            assert entry.offset is not None
            if (entry.buffer or 0) >= self.plan.upload_buffer_count:
                raise InvalidArgumentError(
                    f"entry {key!r} is read on the CPU (its reads_on is 'cpu'), so it was not uploaded "
                    f"(upload='bound'); read its values with plan.array({key!r}) and pass them to the operator as "
                    "the attribute they are")
            return entry.buffer or 0, entry.offset, entry.buffer_desc
        part = self._part(key)
        return part.buffer, part.offset, part.buffer_desc

    def buffer_tensor_desc(self, key: Any, *, consumer: int | None = None) -> DML_BUFFER_TENSOR_DESC:
        """The ``DML_BUFFER_TENSOR_DESC`` ``key`` is bound with; ``consumer``: the index of one of the entry's
        consumers (``plan.entries[key].consumers``), whose own desc (its operator's Sizes and Strides over the same
        bytes) is given instead (InvalidArgumentError for one read on the CPU, LayoutError where its sizes are
        not known: see ``PlanConsumer.as_ctypes``)."""
        if consumer is None:
            return super().buffer_tensor_desc(key)
        self._where(key)
        consumers = self.plan.entries[key].consumers
        if isinstance(consumer, bool) or not isinstance(consumer, int) or not 0 <= consumer < len(consumers):
            raise InvalidArgumentError(f"consumer is the index of one of entry {key!r}'s {len(consumers)} consumers; "
                                       f"got {consumer!r}")
        return consumers[consumer].as_ctypes()

    def _part(self, key: Any) -> QuantizedPart:
        if not (isinstance(key, tuple) and len(key) == 3 and all(isinstance(k, str) for k in key)):
            raise InvalidArgumentError(f"a key is an entry's key (a str) or a quantized part as (record, form, role), "
                                       f"such as ('qmatmul', 'blocked', 'weight'); got {key!r}")
        record_key, form, role = key
        record = self.plan.quantized.get(record_key)
        if record is None or record.skipped is not None:
            why = "no such record" if record is None else f"it was skipped ({record.skipped})"
            raise InvalidArgumentError(f"the plan has no quantized weight {record_key!r} to bind: {why}")
        if form not in PART_FORMS or role not in PART_ROLES:
            raise InvalidArgumentError(f"{key!r}: the form is 'blocked' or 'split' and the role 'weight', 'scales' "
                                       "or 'zero_points'")
        parts = record.blocked_form() if form == "blocked" else record.parts()
        return parts[PART_ROLES.index(role)]

    def read(self, key: Any, *, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> np.ndarray:
        """``key``'s values read back from the GPU now: an entry's ONNX values (what ``plan.array(key)`` gives from
        its buffer file), a part's values as DirectML sees them (``dmlbridge.decode`` of its bytes through its own
        desc)."""
        data = self.read_bytes(key, max_tensor_bytes=max_tensor_bytes)
        if isinstance(key, str):
            return self.plan.array_from(key, data)
        return self._decoded(self._where(key)[2], data)


class UploadedTensors(_Uploaded):
    """Prepared tensors in one default-heap buffer (``resource()``), tensor ``i`` at ``offsets[i]``; a key is the
    tensor's index. ``close()`` (or a ``with`` block) frees the buffer.

    Example:
        >>> import dmlbridge, dmlbridge.gpu, numpy as np
        >>> tensors = [dmlbridge.prepare(np.array([1.5, -2], np.float16)), dmlbridge.prepare(np.arange(3))]
        >>> with dmlbridge.gpu.create_device() as device, dmlbridge.gpu.upload_tensors(tensors, device) as up:
        ...     print(up.offsets, up.read(1).tolist())
        (0, 256) [0, 1, 2]
    """

    def __init__(self, tensors: Sequence[PreparedTensor], device: Device, owns_device: bool, staging_bytes: int,
                 offsets: Sequence[int]) -> None:
        """``offsets``: where each tensor goes in the buffer (:func:`_placed`)."""
        super().__init__(device, owns_device, staging_bytes)
        self.tensors = tuple(tensors)
        cursor = offsets[-1] + self.tensors[-1].total_tensor_size_in_bytes
        self.offsets = tuple(offsets)
        """Where each tensor is in the buffer."""
        self.size = cursor
        try:
            self._fill([cursor], lambda _: self._image, "uploading tensors")
        except BaseException:
            self.close()
            raise

    def _image(self, out: np.ndarray, start: int) -> None:
        """Bytes ``start`` to ``start + len(out)`` of the buffer: each tensor's data at its offset, zeros between,
        each byte written once (``out`` is write-combined memory: a write a second time costs it twice)."""
        end, done = start + out.size, start
        for offset, tensor in zip(self.offsets, self.tensors, strict=True):
            data = tensor.data.reshape(-1).view(np.uint8)
            low, high = max(offset, start), min(offset + data.size, end)
            if low < high:
                out[done - start : low - start] = 0
                out[low - start : high - start] = data[low - offset : high - offset]
                done = high
        out[done - start :] = 0

    def _where(self, key: Any) -> tuple[int, int, BufferTensorDesc]:
        self._check_open()
        if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < len(self.tensors):
            raise InvalidArgumentError(f"a key is a tensor's index, 0 to {len(self.tensors) - 1}; got {key!r}")
        return 0, self.offsets[key], self.tensors[key].buffer_desc

    def read(self, index: int, *, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> np.ndarray:
        """Tensor ``index``'s values read back from the GPU now: what its ``to_numpy()`` gives from its bytes."""
        data = self.read_bytes(index, max_tensor_bytes=max_tensor_bytes)
        return replace(self.tensors[index], data=data).to_numpy()


def _placed(tensors: Sequence[PreparedTensor], alignment: int) -> list[int]:
    """Where each tensor goes in :func:`upload_tensors`' buffer: the next multiple of the larger of ``alignment``,
    its desc's alignment and 16."""
    offsets, cursor = [], 0
    for tensor in tensors:
        step = max(alignment, tensor.guaranteed_base_offset_alignment, 16)
        offsets.append((cursor + step - 1) // step * step)
        cursor = offsets[-1] + tensor.total_tensor_size_in_bytes
    return offsets


def _listed(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_plan_fits(plan: UploadPlan, target: Target) -> None:
    """Refuse (InvalidArgumentError) a plan that needs what a device of ``target`` lacks: an uploaded entry, or a
    quantized part, of a type it does not support or with more dimensions than its level takes, or a quantized
    record bound to DEQUANTIZE (feature level 6.3) below 6.3. The constants read on the CPU (in the buffers after
    ``plan.upload_buffer_count``) never reach the device and keep their ONNX type (INT64, say): they do not count.
    A plan made for a lower target fits.

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.ones(4, np.float16), "w")
        >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([], "g", [], [], [w])))
        >>> check_plan_fits(plan, dmlbridge.Target("6.4"))
        >>> try:
        ...     check_plan_fits(plan, dmlbridge.Target("6.4", supported={"FLOAT32"}))
        ... except dmlbridge.InvalidArgumentError as exc:
        ...     print(str(exc).split("): ")[1].split(";")[0])
        the device lacks what entry 'w' (FLOAT16) needs
    """
    uploaded = plan.upload_buffer_count
    needs: list[str] = []
    for entry in plan.converted:
        if (entry.buffer or 0) >= uploaded or entry.buffer_desc is None:
            continue  # (read on the CPU: never on the device)
        why = _lacks(entry.buffer_desc, target)
        if why:
            needs.append(f"entry {entry.key!r} ({why})")
    for record in plan.quantized.values():
        if record.skipped is not None:
            continue
        if record.operator == "DEQUANTIZE" and target.feature_level < FeatureLevel.FL_6_3:
            needs.append(f"quantized record {record.key!r} (DEQUANTIZE, from feature level 6.3)")
        for role, part in zip(PART_ROLES, record.parts(), strict=True):
            why = _lacks(part.buffer_desc, target) if part.buffer < uploaded else ""
            if why:
                needs.append(f"quantized record {record.key!r}'s {role} ({why})")
    if needs:
        types = ", ".join(sorted(t.name for t in target.types))
        raise InvalidArgumentError(
            f"this plan was converted for a richer target than the device (feature level "
            f"{target.feature_level.dotted}, types {types}): the device lacks what {_listed(needs)} "
            f"need{'s' if len(needs) == 1 else ''}; convert the model again with "
            "target=dmlbridge.gpu.target_of(device), or upload to a device that has them")


def _lacks(desc: BufferTensorDesc, target: Target) -> str:
    """What a desc needs that ``target`` lacks (its type, its dimension count), or ""."""
    dml_type = DmlDataType(desc.data_type)
    if not target.supports(dml_type):
        return dml_type.name
    if not target.min_dimension_count <= len(desc.sizes) <= target.max_dimension_count:
        return (f"{len(desc.sizes)} dimensions, where its level takes {target.min_dimension_count} to "
                f"{target.max_dimension_count}")
    return ""


def upload(plan: UploadPlan, device: Any, *, staging_bytes: int = DEFAULT_STAGING_BYTES) -> UploadedPlan:
    """Upload a written plan (``load_plan``'s or ``convert_model``'s result) to the GPU: one default-heap buffer per
    buffer file, each filled through one reused upload heap of ``staging_bytes`` (64 MiB: the most in flight; a
    piece of a buffer file at a time, so memory does not grow with the conversion).

    ``device``: a ``create_device()`` result (used, not closed), or your ``IDMLDevice`` as an int address, a
    ``ctypes.c_void_p`` or a comtypes pointer (its Direct3D 12 device is found with ``GetParentDevice``; the upload
    makes its own queue on it, closed with the upload). The result binds every entry and part
    (:class:`UploadedPlan`). A plan converted for a richer target than the device (a type it lacks, DEQUANTIZE
    below feature level 6.3) is refused, naming what needs it (:func:`check_plan_fits`); one for a lower target
    uploads.

    Example:
        >>> import dmlbridge, dmlbridge.gpu, numpy as np, os, tempfile
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.array([7, -7], np.int8), "w")
        >>> plan = dmlbridge.convert_model(helper.make_model(helper.make_graph([], "g", [], [], [w])),
        ...                                os.path.join(tempfile.mkdtemp(), "w"), progress=False)
        >>> with dmlbridge.gpu.create_device() as device, dmlbridge.gpu.upload(plan, device) as uploaded:
        ...     uploaded.read("w")
        array([ 7, -7], dtype=int8)
        >>> plan.close()
    """
    if not isinstance(plan, UploadPlan):
        raise InvalidArgumentError(f"plan must be an UploadPlan (load_plan's or convert_model's result), not "
                                   f"{type(plan).__name__}")
    if not plan.buffers:
        raise InvalidArgumentError("this plan was not written (plan_model): it has no buffer file to upload; give "
                                   "upload() the plan convert_model or load_plan returns")
    staging = check_staging_bytes(staging_bytes)
    held, owned = as_device(device)
    try:
        check_plan_fits(plan, Target(held.feature_level, supported=held.types))
        return UploadedPlan(plan, held, owned, staging)
    except BaseException:
        if owned:
            held.close()
        raise


def upload_tensors(tensors: Sequence[PreparedTensor], device: Any, *, alignment: int = 256,
                   staging_bytes: int = DEFAULT_STAGING_BYTES,
                   max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES) -> UploadedTensors:
    """Upload prepared tensors (``dmlbridge.prepare`` results) into one default-heap buffer, each at an offset that
    is a multiple of ``alignment`` (and of its desc's ``GuaranteedBaseOffsetAlignment``; 16 at least, DirectML's
    minimum). ``device`` and ``staging_bytes``: as :func:`upload` takes them. The buffer holds at most
    ``max_buffer_bytes`` (2 GiB, the size Direct3D 12 promises a resource on a GPU of 8 GiB, as conversions keep
    to; at most 0xFFFF0000): more is refused before anything is made (convert them, or upload fewer at a time).

    Example:
        >>> import dmlbridge, dmlbridge.gpu, numpy as np
        >>> with dmlbridge.gpu.create_device() as device:
        ...     with dmlbridge.gpu.upload_tensors([dmlbridge.prepare(np.ones(4, np.float32))], device) as up:
        ...         up.binding(0).SizeInBytes
        16
    """
    items = list(tensors) if isinstance(tensors, Sequence) and not isinstance(tensors, (str, bytes)) else None
    if not items or not all(isinstance(t, PreparedTensor) for t in items):
        raise InvalidArgumentError("tensors must be a non-empty sequence of PreparedTensor (dmlbridge.prepare "
                                   "results)")
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 16 or alignment & 15:
        raise InvalidArgumentError(f"alignment must be a multiple of 16 (DirectML's minimum buffer-tensor "
                                   f"alignment), not {alignment!r}")
    staging = check_staging_bytes(staging_bytes)
    most = check_max_buffer_bytes(max_buffer_bytes, 16)
    offsets = _placed(items, alignment)
    size = offsets[-1] + items[-1].total_tensor_size_in_bytes
    if size > most:
        raise InvalidArgumentError(f"the {len(items)} tensors take {size} bytes in one buffer, more than "
                                   f"max_buffer_bytes={most}: upload fewer at a time, or convert them "
                                   "(dmlbridge.convert_model splits its buffers)")
    held, owned = as_device(device)
    try:
        return UploadedTensors(items, held, owned, staging, offsets)
    except BaseException:
        if owned:
            held.close()
        raise
