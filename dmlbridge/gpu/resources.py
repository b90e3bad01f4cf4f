"""GPU buffers and the two ways bytes cross to and from them: the upload heap (:class:`Staging`), reused in
bounded chunks while the GPU copies the one before, and the readback heap (:class:`Readback`), filled with a
pattern before each copy so that a copy that wrote nothing shows.

Every default-heap buffer is made in ``COPY_DEST`` and left in ``UNORDERED_ACCESS`` once filled: DirectML binds
every buffer as an unordered-access view. The upload heap is split in two halves: the CPU fills one while the GPU
copies from the other, and a half is refilled only once the fence says its copy is done, so at most the heap's
size is ever in flight and it is the only memory an upload of any size allocates.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from dmlbridge.errors import InvalidArgumentError
from dmlbridge.gpu.com import invoke, release
from dmlbridge.gpu.commands import CommandList
from dmlbridge.gpu.device import Device
from dmlbridge.gpu.interfaces import IID, ID3D12Device, ID3D12Resource
from dmlbridge.gpu.structs import (
    D3D12_HEAP_TYPE_DEFAULT,
    D3D12_HEAP_TYPE_READBACK,
    D3D12_HEAP_TYPE_UPLOAD,
    D3D12_RANGE,
    D3D12_RESOURCE_STATE_COPY_DEST,
    D3D12_RESOURCE_STATE_COPY_SOURCE,
    D3D12_RESOURCE_STATE_GENERIC_READ,
    D3D12_RESOURCE_STATE_UNORDERED_ACCESS,
    buffer_desc,
    heap_properties,
    transition,
)
from dmlbridge.placement.options import MAX_BUFFER_BYTES

__all__ = ["DEFAULT_STAGING_BYTES", "PATTERN", "Readback", "Staging", "check_staging_bytes", "create_buffer",
           "mib"]

DEFAULT_STAGING_BYTES = 64 << 20
"""The upload heap's size: the most an upload has in flight (two halves of 32 MiB)."""
PATTERN = 0xA5
"""The byte a readback heap holds before each copy into it."""
_MIN_STAGING = 512  # two slots of 256 bytes


def mib(size: int) -> str:
    """A size for messages: ``"64 MiB"``, ``"1.5 KiB"``, ``"12 bytes"``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.4g} {unit}"
    return f"{size} bytes"


def check_staging_bytes(staging_bytes: object) -> int:
    """``staging_bytes`` checked: a whole number of 512 (two slots of 256 bytes) to 0xFFFF0000 (the largest
    CPU-visible buffer: an upload heap past it fails on GPUs) bytes, the upload heap's size."""
    if isinstance(staging_bytes, bool) or not isinstance(staging_bytes, int) or \
            not _MIN_STAGING <= staging_bytes <= MAX_BUFFER_BYTES:
        raise InvalidArgumentError(f"staging_bytes must be a whole number of bytes, {_MIN_STAGING} to 0xFFFF0000 (the "
                                   "largest upload heap a GPU makes; it is the most an upload has in flight: the "
                                   f"default, {mib(DEFAULT_STAGING_BYTES)}, is plenty), not {staging_bytes!r}")
    return staging_bytes


def create_buffer(device: Device, size: int, heap_type: int, state: int, doing: str) -> int:
    """A committed buffer resource of at least ``size`` bytes (rounded up to 16) in a heap of ``heap_type``, in
    ``state``; its ``ID3D12Resource*``."""
    width = max(16, (size + 15) // 16 * 16)
    props = heap_properties(heap_type)
    desc = buffer_desc(width, heap_type == D3D12_HEAP_TYPE_DEFAULT)
    return device.create(ID3D12Device.CreateCommittedResource, ctypes.byref(props), 0, ctypes.byref(desc), state,
                         None, ctypes.byref(IID.ID3D12Resource), doing=f"{doing} ({mib(width)})")


def _map(device: Device, resource: int, read: tuple[int, int], size: int, doing: str) -> np.ndarray:
    """The resource's memory as a uint8 array of ``size`` (``read``: the range the CPU will read)."""
    pointer = ctypes.c_void_p()
    read_range = D3D12_RANGE(*read)
    device.check(resource, ID3D12Resource.Map, 0, ctypes.byref(read_range), ctypes.byref(pointer), doing=doing)
    assert pointer.value
    return np.ctypeslib.as_array((ctypes.c_ubyte * size).from_address(pointer.value))


def _unmap(resource: int, written: tuple[int, int]) -> None:
    """Unmap the resource; ``written``: the range the CPU wrote."""
    written_range = D3D12_RANGE(*written)
    invoke(resource, ID3D12Resource.Unmap, 0, ctypes.byref(written_range))


Fill = Callable[[np.ndarray, int], None]
"""Writes the bytes of a buffer image from a position into an array: ``fill(out, start)``."""


class Staging:
    """The upload heap of ``staging_bytes`` (at most the largest upload, rounded up), mapped once, in two halves
    each with its own command list and fence value."""

    def __init__(self, device: Device, staging_bytes: int, largest: int) -> None:
        self.device = device
        half = (min(staging_bytes, max(2 * largest, _MIN_STAGING)) // 2) // 256 * 256
        self.slot_bytes = max(256, half)
        self.size = 2 * self.slot_bytes
        self.heap = 0
        self.lists: list[CommandList] = []
        self._next = 0
        try:
            self.heap = create_buffer(device, self.size, D3D12_HEAP_TYPE_UPLOAD, D3D12_RESOURCE_STATE_GENERIC_READ,
                                      "making the upload heap")
            self.memory = _map(device, self.heap, (0, 0), self.size, "mapping the upload heap")
            self.lists = [CommandList(device), CommandList(device)]
        except BaseException:
            self.close()
            raise

    def upload(self, destination: int, size: int, fill: Fill, doing: str) -> None:
        """Fill ``destination`` (a default-heap buffer in COPY_DEST) with ``size`` bytes, a half of the heap at a
        time, and leave it in UNORDERED_ACCESS once the last copy is done."""
        done = 0
        while done < size:
            commands = self.lists[self._next]
            commands.reopen(doing)  # (waits until the half's previous copy is done)
            start = self._next * self.slot_bytes
            count = min(self.slot_bytes, size - done)
            fill(self.memory[start : start + count], done)
            commands.copy(destination, done, self.heap, start, count)
            done += count
            if done == size:
                commands.barrier(transition(destination, D3D12_RESOURCE_STATE_COPY_DEST,
                                            D3D12_RESOURCE_STATE_UNORDERED_ACCESS))
            commands.submit(doing)
            self._next = 1 - self._next

    def flush(self) -> None:
        """Wait until every copy submitted is done."""
        for commands in self.lists:
            commands.reopen("waiting for the upload")

    def close(self) -> None:
        """Wait for the copies (unless the device is lost) and release the heap and the lists."""
        try:
            for commands in self.lists:
                commands.close()
        finally:
            release(self.heap)
            self.heap = 0
            self.lists = []


class Readback:
    """A readback heap of at most ``chunk_bytes``, made on the first read and grown as reads need, with its own
    command list."""

    def __init__(self, device: Device, chunk_bytes: int) -> None:
        self.device = device
        self.chunk_bytes = chunk_bytes
        self.heap = 0
        self.size = 0
        self.commands = CommandList(device)

    def read(self, source: int, offset: int, size: int, out: np.ndarray | None = None) -> np.ndarray:
        """``size`` bytes of the default-heap buffer ``source`` (in UNORDERED_ACCESS) from ``offset``, copied to the
        CPU a chunk at a time, into ``out`` (a new uint8 array if None)."""
        with self.device.lock:  # (the heap and the command list are this reader's: one read at a time)
            return self._read(source, offset, size, out)

    def _read(self, source: int, offset: int, size: int, out: np.ndarray | None) -> np.ndarray:
        result = np.empty(size, np.uint8) if out is None else out
        want = min(self.chunk_bytes, size)
        if want > self.size:
            release(self.heap)
            self.heap, self.size = 0, 0
            self.heap = create_buffer(self.device, want, D3D12_HEAP_TYPE_READBACK, D3D12_RESOURCE_STATE_COPY_DEST,
                                      "making a readback heap")
            self.size = want
        done = 0
        while done < size:
            count = min(self.size, size - done)
            memory = _map(self.device, self.heap, (0, 0), count, "mapping the readback heap")
            memory[:] = PATTERN  # (a copy that writes nothing leaves the pattern, never stale or zero bytes)
            _unmap(self.heap, (0, count))
            self.commands.barrier(transition(source, D3D12_RESOURCE_STATE_UNORDERED_ACCESS,
                                             D3D12_RESOURCE_STATE_COPY_SOURCE))
            self.commands.copy(self.heap, 0, source, offset + done, count)
            self.commands.barrier(transition(source, D3D12_RESOURCE_STATE_COPY_SOURCE,
                                             D3D12_RESOURCE_STATE_UNORDERED_ACCESS))
            self.commands.run("reading a buffer back")
            memory = _map(self.device, self.heap, (0, count), count, "mapping the readback heap")
            result[done : done + count] = memory
            _unmap(self.heap, (0, 0))
            done += count
        return result

    def close(self) -> None:
        try:
            self.commands.close()
        finally:
            release(self.heap)
            self.heap = 0
