"""Recording GPU work: a command allocator and a graphics command list on it (:class:`CommandList`), submitted to a
device's queue and reused once the queue is past it.

A list records copies, barriers and DirectML dispatches; ``submit()`` closes and executes it and returns the fence
value that says it is done; ``reopen()`` waits for that value and resets the allocator and the list for the next
commands (an allocator must not be reset while the GPU still runs what it holds).
"""

from __future__ import annotations

import ctypes

from dmlbridge.gpu.com import invoke, release
from dmlbridge.gpu.device import Device
from dmlbridge.gpu.interfaces import IID, ID3D12CommandAllocator, ID3D12Device, ID3D12GraphicsCommandList
from dmlbridge.gpu.structs import D3D12_COMMAND_LIST_TYPE_DIRECT, D3D12_RESOURCE_BARRIER

__all__ = ["CommandList"]


class CommandList:
    """A command allocator and a command list recording for ``device``'s queue (open for recording when made)."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.allocator = self.list = 0
        self.pending = 0  # the fence value of the last submission
        self.recording = True
        try:
            self.allocator = device.create(ID3D12Device.CreateCommandAllocator, D3D12_COMMAND_LIST_TYPE_DIRECT,
                                           ctypes.byref(IID.ID3D12CommandAllocator), doing="making a command allocator")
            self.list = device.create(ID3D12Device.CreateCommandList, 0, D3D12_COMMAND_LIST_TYPE_DIRECT,
                                      self.allocator, None, ctypes.byref(IID.ID3D12GraphicsCommandList),
                                      doing="making a command list")
        except BaseException:
            self.close()
            raise

    def copy(self, destination: int, destination_offset: int, source: int, source_offset: int, size: int) -> None:
        """Record a copy of ``size`` bytes between two buffers (``CopyBufferRegion``)."""
        self._open()
        invoke(self.list, ID3D12GraphicsCommandList.CopyBufferRegion, destination, destination_offset, source,
               source_offset, size)

    def barrier(self, *barriers: D3D12_RESOURCE_BARRIER) -> None:
        """Record resource barriers (transitions, UAV barriers)."""
        self._open()
        array = (D3D12_RESOURCE_BARRIER * len(barriers))(*barriers)
        invoke(self.list, ID3D12GraphicsCommandList.ResourceBarrier, len(barriers), array)

    def set_descriptor_heaps(self, *heaps: int) -> None:
        """Record the shader-visible descriptor heaps DirectML's dispatches use."""
        self._open()
        array = (ctypes.c_void_p * len(heaps))(*heaps)
        invoke(self.list, ID3D12GraphicsCommandList.SetDescriptorHeaps, len(heaps), array)

    def submit(self, doing: str = "") -> int:
        """Close the list and execute it on the device's queue; the fence value that says it is done."""
        self._open()
        self.recording = False
        self.device.check(self.list, ID3D12GraphicsCommandList.Close, doing=doing or "closing a command list")
        self.pending = self.device.submit(self.list)
        return self.pending

    def reopen(self, doing: str = "") -> None:
        """Wait for the last submission and make the list record again, from an empty allocator."""
        if self.recording:
            return
        self.device.wait(self.pending, doing)
        self.device.check(self.allocator, ID3D12CommandAllocator.Reset, doing="resetting a command allocator")
        self.device.check(self.list, ID3D12GraphicsCommandList.Reset, self.allocator, None,
                          doing="resetting a command list")
        self.recording = True

    def run(self, doing: str) -> None:
        """Submit what was recorded, wait for it, and open the list again."""
        self.submit(doing)
        self.reopen(doing)

    def _open(self) -> None:
        if not self.recording:
            self.reopen()

    def close(self) -> None:
        """Wait for the last submission (unless the Direct3D 12 device is lost), then release the list and its
        allocator."""
        try:
            if not self.recording and self.pending and not self.device.closed:
                self.device.settle(self.pending)
        finally:
            release(self.list)
            release(self.allocator)
            self.list = self.allocator = 0
