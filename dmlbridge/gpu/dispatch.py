"""Running one DirectML operator on bound buffers (:func:`run_operator`): created and compiled from its
``DML_OPERATOR_DESC``, initialized (weights flagged ``DML_TENSOR_FLAG_OWNED_BY_DML`` bound then), executed, and its
outputs read back; for scripts, tests and the known-answer check a GPU run starts with.

Each output is a fresh default-heap buffer filled with 0xA5 before the operator runs, so an output the operator did
not write shows as the pattern, never as zeros or stale bytes.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from dmlbridge.errors import InvalidArgumentError
from dmlbridge.gpu.com import invoke, release
from dmlbridge.gpu.commands import CommandList
from dmlbridge.gpu.device import as_device
from dmlbridge.gpu.interfaces import (
    IID,
    ID3D12DescriptorHeap,
    ID3D12Device,
    ID3D12Resource,
    IDMLBindingTable,
    IDMLCommandRecorder,
    IDMLDevice,
    IDMLDispatchable,
)
from dmlbridge.gpu.resources import PATTERN, Readback, Staging, create_buffer
from dmlbridge.gpu.structs import (
    D3D12_CPU_DESCRIPTOR_HANDLE,
    D3D12_DESCRIPTOR_HEAP_DESC,
    D3D12_DESCRIPTOR_HEAP_FLAG_SHADER_VISIBLE,
    D3D12_DESCRIPTOR_HEAP_TYPE_CBV_SRV_UAV,
    D3D12_GPU_DESCRIPTOR_HANDLE,
    D3D12_HEAP_TYPE_DEFAULT,
    D3D12_RESOURCE_DESC,
    D3D12_RESOURCE_DIMENSION_BUFFER,
    D3D12_RESOURCE_STATE_COPY_DEST,
    D3D12_RESOURCE_STATE_UNORDERED_ACCESS,
    DML_BINDING_DESC,
    DML_BINDING_PROPERTIES,
    DML_BINDING_TABLE_DESC,
    DML_BINDING_TYPE_BUFFER,
    DML_BINDING_TYPE_BUFFER_ARRAY,
    DML_BINDING_TYPE_NONE,
    DML_BUFFER_ARRAY_BINDING,
    DML_OPERATOR_DESC,
    uav_barrier,
)
from dmlbridge.operator_descs.operator_types import DmlExecutionFlags
from dmlbridge.tensor.descs import DML_BUFFER_BINDING

__all__ = ["check_extents", "check_inputs", "run_compiled", "run_operator"]

_PERSISTENT_ALIGNMENT = 256  # DML_PERSISTENT_BUFFER_ALIGNMENT


def _binding_properties(dispatchable: int) -> DML_BINDING_PROPERTIES:
    """``IDMLDispatchable::GetBindingProperties``, which returns a struct (MSVC ABI: a pointer to it after this)."""
    props = DML_BINDING_PROPERTIES()
    invoke(dispatchable, IDMLDispatchable.GetBindingProperties, ctypes.byref(props))
    return props


def _buffer_desc(binding: DML_BUFFER_BINDING | None) -> DML_BINDING_DESC:
    if binding is None:
        return DML_BINDING_DESC(DML_BINDING_TYPE_NONE, None)
    desc = DML_BINDING_DESC(DML_BINDING_TYPE_BUFFER, ctypes.addressof(binding))
    desc.buffer_binding = binding
    return desc


def check_inputs(inputs: Sequence[Any], owned_by_dml: Sequence[int]) -> tuple[list[DML_BUFFER_BINDING | None],
                                                                                 set[int]]:
    """A run's ``inputs`` and ``owned_by_dml`` checked before any COM call (what can be checked without the
    device: each binding's resource and offset, and for a binding of an upload, that the upload is open and the
    binding still fits its desc); the bindings, and the set of owned indices.

    Example:
        >>> bindings, owned = check_inputs([None, DML_BUFFER_BINDING(0x10000, 256, 16)], [1])
        >>> bindings[1].Offset, owned
        (256, {1})
    """
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        raise InvalidArgumentError("inputs must be a sequence of DML_BUFFER_BINDING (or None for an optional input "
                                   "left unbound), one per operator input, in the operator desc's order")
    bindings: list[DML_BUFFER_BINDING | None] = []
    for index, item in enumerate(inputs):
        if item is not None and not isinstance(item, DML_BUFFER_BINDING):
            raise InvalidArgumentError(f"inputs[{index}] is a {type(item).__name__}; give a DML_BUFFER_BINDING "
                                       "(an upload's binding(key)) or None")
        if item is not None and (not item.Buffer or item.Offset % 16):
            raise InvalidArgumentError(f"inputs[{index}] has no resource, or an offset that is not a multiple of 16 "
                                       "(which can remove the device instead of failing a call)")
        if item is not None:
            _check_from_upload(item, f"inputs[{index}]")
        bindings.append(item)
    owned = set()
    for index in owned_by_dml:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(bindings) \
                or bindings[index] is None:
            raise InvalidArgumentError(f"owned_by_dml holds {index!r}: give the indices of bound inputs whose "
                                       "tensors are flagged DML_TENSOR_FLAG_OWNED_BY_DML")
        owned.add(index)
    return bindings, owned


def _check_from_upload(binding: DML_BUFFER_BINDING, name: str) -> None:
    """A binding an upload gave (``.upload``): refused once the upload is closed (its buffer freed), or where it
    no longer fits the desc it binds (an offset off its GuaranteedBaseOffsetAlignment, a size short of its
    TotalTensorSizeInBytes)."""
    upload = getattr(binding, "upload", None)
    if upload is None:
        return
    if upload.closed:
        raise InvalidArgumentError(f"{name} is a binding of an upload that was closed, which freed its buffer; "
                                   "keep the upload open until the run returns (close it after), or upload again")
    desc = binding.tensor_desc
    alignment = max(1, desc.guaranteed_base_offset_alignment)
    if binding.Offset % alignment or binding.SizeInBytes < desc.total_tensor_size_in_bytes:
        raise InvalidArgumentError(
            f"{name} has Offset {binding.Offset} and SizeInBytes {binding.SizeInBytes}, where its tensor desc wants "
            f"an offset that is a multiple of its GuaranteedBaseOffsetAlignment ({alignment}) and at least its "
            f"TotalTensorSizeInBytes ({desc.total_tensor_size_in_bytes}) bytes; bind it as the upload's binding() "
            "gives it")


def check_extents(bindings: Sequence[DML_BUFFER_BINDING | None]) -> None:
    """Each binding's Offset + SizeInBytes within its resource (``ID3D12Resource::GetDesc``'s Width): a binding
    past its buffer can remove the device rather than fail a call (docs/bindings.md). Called on Windows, after the
    checks of :func:`check_inputs`, before any GPU work."""
    for index, binding in enumerate(bindings):
        if binding is None:
            continue
        desc = D3D12_RESOURCE_DESC()
        invoke(binding.Buffer, ID3D12Resource.GetDesc, ctypes.byref(desc))
        if desc.Dimension != D3D12_RESOURCE_DIMENSION_BUFFER:
            raise InvalidArgumentError(f"inputs[{index}]'s resource is not a buffer (D3D12_RESOURCE_DIMENSION "
                                       f"{desc.Dimension}); DirectML binds buffers")
        if binding.Offset + binding.SizeInBytes > desc.Width:
            raise InvalidArgumentError(
                f"inputs[{index}] binds bytes {binding.Offset} to {binding.Offset + binding.SizeInBytes} of a "
                f"resource of {desc.Width} bytes: past its end, which can remove the device instead of failing a "
                "call; give an Offset and SizeInBytes within the buffer")


def check_execution_flags(flags: object) -> int:
    """``execution_flags`` checked: DML_EXECUTION_FLAGS, an int of the flags DirectML.h names (0 to 7)."""
    if isinstance(flags, bool) or not isinstance(flags, int) or not 0 <= flags <= _ALL_FLAGS:
        raise InvalidArgumentError(f"execution_flags must be DML_EXECUTION_FLAGS, dmlbridge.gpu.DmlExecutionFlags "
                                   f"joined with | (an int, 0 to {_ALL_FLAGS}), not {flags!r}")
    return int(flags)


_ALL_FLAGS = int(DmlExecutionFlags.ALLOW_HALF_PRECISION_COMPUTATION | DmlExecutionFlags.DISABLE_META_COMMANDS
                 | DmlExecutionFlags.DESCRIPTORS_VOLATILE)


def _check_output_sizes(output_sizes: Sequence[int]) -> list[int]:
    """``output_sizes`` checked: a non-empty sequence of positive byte counts, one per output."""
    if isinstance(output_sizes, (str, bytes)) or not isinstance(output_sizes, Sequence) or not output_sizes or \
            not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in output_sizes):
        raise InvalidArgumentError("output_sizes must be a non-empty sequence of byte counts, one per output")
    return list(output_sizes)


def run_operator(device: Any, operator: DML_OPERATOR_DESC, inputs: Sequence[DML_BUFFER_BINDING | None],
                 output_sizes: Sequence[int], *, owned_by_dml: Sequence[int] = (),
                 execution_flags: int = 0) -> list[np.ndarray]:
    """Run one DirectML operator and return each output's bytes (uint8 arrays of ``output_sizes``).

    ``operator`` is the operator's ``DML_OPERATOR_DESC`` (its own desc struct, and the tensor descs it points at,
    kept alive by the caller until this returns). ``inputs`` holds one ``DML_BUFFER_BINDING`` per operator input
    in the desc's order (an upload's ``binding(key)``), None for an optional input left out; ``owned_by_dml`` the
    indices of the inputs whose tensor descs carry ``DML_TENSOR_FLAG_OWNED_BY_DML``: those are bound when the
    operator is initialized, the others when it executes. Each output gets a fresh buffer of its size, filled
    with 0xA5 first. ``device``: as ``upload`` takes it. ``execution_flags``: the ``DML_EXECUTION_FLAGS`` it is
    compiled with (:class:`~dmlbridge.gpu.DmlExecutionFlags`; none by default). A desc DirectML refuses is a
    ComError naming ``IDMLDevice::CreateOperator`` and its HRESULT.

    Example:
        >>> import ctypes, dmlbridge, dmlbridge.gpu, numpy as np
        >>> class IDENTITY(ctypes.Structure):         # DML_ELEMENT_WISE_IDENTITY_OPERATOR_DESC
        ...     _fields_ = [("InputTensor", ctypes.c_void_p), ("OutputTensor", ctypes.c_void_p),
        ...                 ("ScaleBias", ctypes.c_void_p)]
        >>> x = dmlbridge.prepare(np.array([1.5, -2, 3, 0], np.float32))
        >>> desc = x.as_ctypes_tensor_desc()
        >>> identity = IDENTITY(ctypes.addressof(desc), ctypes.addressof(desc), None)
        >>> with dmlbridge.gpu.create_device() as device, dmlbridge.gpu.upload_tensors([x], device) as up:
        ...     out = dmlbridge.gpu.run_operator(device, dmlbridge.gpu.DML_OPERATOR_DESC(1, ctypes.addressof(identity)),
        ...                                      [up.binding(0)], [16])
        >>> dmlbridge.decode(out[0], "FLOAT32", [4]).tolist()
        [1.5, -2.0, 3.0, 0.0]
    """
    if not isinstance(operator, DML_OPERATOR_DESC):
        raise InvalidArgumentError(f"operator must be a DML_OPERATOR_DESC (dmlbridge.gpu.DML_OPERATOR_DESC), not "
                                   f"{type(operator).__name__}")
    bindings, owned = check_inputs(inputs, owned_by_dml)
    sizes = _check_output_sizes(output_sizes)
    flags = check_execution_flags(execution_flags)
    held, owns = as_device(device)
    try:
        check_extents(bindings)
        return _Run(held).run(operator, bindings, owned, sizes, flags=flags)
    finally:
        if owns:
            held.close()


def run_compiled(device: Any, compiled: int, inputs: Sequence[DML_BUFFER_BINDING | None], output_sizes: Sequence[int],
                 *, owned_by_dml: Sequence[int] = ()) -> list[np.ndarray]:
    """Run a compiled operator, or a compiled graph (``IDMLCompiledOperator*``, an int, which the caller keeps and
    releases), as :func:`run_operator` runs an operator it compiles: ``inputs`` one binding per input of the
    operator (of the graph), ``owned_by_dml`` those bound when it is initialized, each output a fresh buffer of
    its size filled with 0xA5 first; each output's bytes returned (uint8 arrays).

    Example:
        >>> import dmlbridge.gpu
        >>> dmlbridge.gpu.run_compiled.__name__   # (dmlbridge.gpu.run_graph compiles a graph and runs it with this)
        'run_compiled'
    """
    if isinstance(compiled, bool) or not isinstance(compiled, int) or not compiled:
        raise InvalidArgumentError("compiled must be the address (an int) of an IDMLCompiledOperator")
    bindings, owned = check_inputs(inputs, owned_by_dml)
    sizes = _check_output_sizes(output_sizes)
    held, owns = as_device(device)
    try:
        check_extents(bindings)
        return _Run(held).run(None, bindings, owned, sizes, compiled=compiled)
    finally:
        if owns:
            held.close()


class _Run:
    """The COM objects of one run, released together."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.objects: list[int] = []

    def make(self, method: Any, *args: Any, doing: str) -> int:
        address = self.device.create(method, *args, on=self.device.dml, doing=doing)
        self.objects.append(address)
        return address

    def buffer(self, size: int, doing: str, state: int = D3D12_RESOURCE_STATE_UNORDERED_ACCESS) -> int:
        address = create_buffer(self.device, size, D3D12_HEAP_TYPE_DEFAULT, state, doing)
        self.objects.append(address)
        return address

    def run(self, operator: DML_OPERATOR_DESC | None, inputs: list[DML_BUFFER_BINDING | None], owned: set[int],
            output_sizes: list[int], compiled: int = 0, flags: int = 0) -> list[np.ndarray]:
        """Run ``operator`` (compiled with ``flags``), or the compiled operator (or graph) at ``compiled``, which the
        caller keeps."""
        with self.device.lock:  # (one run's record-submit-wait at a time on a device: they share its queue)
            return self._run(operator, inputs, owned, output_sizes, compiled, flags)

    def _run(self, operator: DML_OPERATOR_DESC | None, inputs: list[DML_BUFFER_BINDING | None], owned: set[int],
             output_sizes: list[int], compiled: int, flags: int) -> list[np.ndarray]:
        device = self.device
        commands = readback = None
        try:
            if not compiled:
                assert operator is not None
                op = self.make(IDMLDevice.CreateOperator, ctypes.byref(operator), ctypes.byref(IID.IDMLOperator),
                               doing="(DirectML refused the operator desc)")
                compiled = self.make(IDMLDevice.CompileOperator, op, flags, ctypes.byref(IID.IDMLCompiledOperator),
                                     doing="compiling the operator")
            operators = (ctypes.c_void_p * 1)(compiled)
            initializer = self.make(IDMLDevice.CreateOperatorInitializer, 1, operators,
                                    ctypes.byref(IID.IDMLOperatorInitializer), doing="making its initializer")
            recorder = self.make(IDMLDevice.CreateCommandRecorder, ctypes.byref(IID.IDMLCommandRecorder),
                                 doing="making a command recorder")
            init_props, exec_props = _binding_properties(initializer), _binding_properties(compiled)
            counts = [max(1, init_props.RequiredDescriptorCount), max(1, exec_props.RequiredDescriptorCount)]
            heap_desc = D3D12_DESCRIPTOR_HEAP_DESC(D3D12_DESCRIPTOR_HEAP_TYPE_CBV_SRV_UAV, sum(counts),
                                                   D3D12_DESCRIPTOR_HEAP_FLAG_SHADER_VISIBLE, 0)
            heap = device.create(ID3D12Device.CreateDescriptorHeap, ctypes.byref(heap_desc),
                                 ctypes.byref(IID.ID3D12DescriptorHeap), doing="making a descriptor heap")
            self.objects.append(heap)
            cpu, gpu = D3D12_CPU_DESCRIPTOR_HANDLE(), D3D12_GPU_DESCRIPTOR_HANDLE()
            invoke(heap, ID3D12DescriptorHeap.GetCPUDescriptorHandleForHeapStart, ctypes.byref(cpu))
            invoke(heap, ID3D12DescriptorHeap.GetGPUDescriptorHandleForHeapStart, ctypes.byref(gpu))
            increment = int(invoke(device.d3d12, ID3D12Device.GetDescriptorHandleIncrementSize,
                                    D3D12_DESCRIPTOR_HEAP_TYPE_CBV_SRV_UAV))
            temporary_size = max(init_props.TemporaryResourceSize, exec_props.TemporaryResourceSize)
            temporary = self.buffer(temporary_size, "making the temporary resource") if temporary_size else 0
            persistent_size = exec_props.PersistentResourceSize
            persistent = self.buffer(persistent_size, "making the persistent resource") if persistent_size else 0
            outputs = [self.buffer(size, f"making output {i}", D3D12_RESOURCE_STATE_COPY_DEST)
                       for i, size in enumerate(output_sizes)]
            staging = Staging(device, min(2 * max(output_sizes), 64 << 20), max(output_sizes))
            try:  # (each output through the upload heap, then in UNORDERED_ACCESS)
                for output, size in zip(outputs, output_sizes, strict=True):
                    staging.upload(output, size, lambda out, start: out.fill(PATTERN), "filling an output with 0xA5")
                staging.flush()
            finally:
                staging.close()

            commands = CommandList(device)
            commands.set_descriptor_heaps(heap)
            tables = []
            keep: list[Any] = []  # what the binding tables point at, alive until recorded
            for index, (dispatchable, count) in enumerate(((initializer, counts[0]), (compiled, counts[1]))):
                offset = sum(counts[:index]) * increment
                table_desc = DML_BINDING_TABLE_DESC(dispatchable, D3D12_CPU_DESCRIPTOR_HANDLE(cpu.ptr + offset),
                                                    D3D12_GPU_DESCRIPTOR_HANDLE(gpu.ptr + offset), count)
                table = self.make(IDMLDevice.CreateBindingTable, ctypes.byref(table_desc),
                                  ctypes.byref(IID.IDMLBindingTable), doing="making a binding table")
                tables.append(table)
                props = init_props if index == 0 else exec_props
                if props.TemporaryResourceSize:
                    temp = _buffer_desc(DML_BUFFER_BINDING(temporary, 0, temporary_size))
                    keep.append(temp)
                    invoke(table, IDMLBindingTable.BindTemporaryResource, ctypes.byref(temp))
                persist = _buffer_desc(DML_BUFFER_BINDING(persistent, 0, persistent_size) if persistent else None)
                keep.append(persist)
                if index == 0:
                    if owned:
                        array = (DML_BUFFER_BINDING * len(inputs))(*[
                            b if i in owned and b is not None else DML_BUFFER_BINDING() for i, b in enumerate(inputs)])
                        buffer_array = DML_BUFFER_ARRAY_BINDING(len(inputs), ctypes.addressof(array))
                        init_inputs = DML_BINDING_DESC(DML_BINDING_TYPE_BUFFER_ARRAY, ctypes.addressof(buffer_array))
                        keep += [array, buffer_array, init_inputs]
                        invoke(table, IDMLBindingTable.BindInputs, 1, ctypes.byref(init_inputs))
                    invoke(table, IDMLBindingTable.BindOutputs, 1, ctypes.byref(persist))
                else:
                    # (an array copies each DML_BINDING_DESC, not the binding it points at: the descs are kept)
                    input_descs = [_buffer_desc(None if i in owned else b) for i, b in enumerate(inputs)]
                    output_descs = [_buffer_desc(DML_BUFFER_BINDING(o, 0, size))
                                    for o, size in zip(outputs, output_sizes, strict=True)]
                    bound = (DML_BINDING_DESC * len(inputs))(*input_descs)
                    out = (DML_BINDING_DESC * len(outputs))(*output_descs)
                    keep += [bound, out, input_descs, output_descs]
                    if inputs:
                        invoke(table, IDMLBindingTable.BindInputs, len(inputs), bound)
                    invoke(table, IDMLBindingTable.BindOutputs, len(outputs), out)
                    if persistent:
                        invoke(table, IDMLBindingTable.BindPersistentResource, ctypes.byref(persist))
                invoke(recorder, IDMLCommandRecorder.RecordDispatch, commands.list, dispatchable, table)
                commands.barrier(uav_barrier())
            commands.run("running the operator")
            readback = Readback(device, max(256, min(32 << 20, max(output_sizes))))
            return [readback.read(output, 0, size) for output, size in zip(outputs, output_sizes, strict=True)]
        finally:
            if readback is not None:
                readback.close()
            if commands is not None:
                commands.close()
            for address in reversed(self.objects):
                release(address)
