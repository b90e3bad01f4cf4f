"""Where one converted entry of a written plan is bound: the buffer file, offset and size a DML_BUFFER_BINDING holds
(:meth:`dmlbridge.UploadPlan.bindings` gives one per converted entry)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from dmlbridge.errors import InvalidArgumentError
from dmlbridge.tensor.descs import DML_BUFFER_BINDING

__all__ = ["Binding"]


class Binding(NamedTuple):
    """Where one converted entry is bound: its ``key``, the index of its ``buffer`` file, its ``offset`` in it
    and its ``size`` in bytes (what a DML_BUFFER_BINDING holds, but the resource).

    Example:
        >>> import dmlbridge
        >>> binding = dmlbridge.Binding("w", buffer=0, offset=256, size=12)
        >>> binding.offset + binding.size
        268
    """

    key: str
    buffer: int
    offset: int
    size: int

    def as_ctypes(self, resources: Sequence[int]) -> DML_BUFFER_BINDING:
        """The DML_BUFFER_BINDING, given the ``ID3D12Resource*`` (as integers) holding each buffer file, by index.

        Example:
            >>> Binding("w", 1, 256, 64).as_ctypes([0x1000, 0x2000]).Offset
            256
        """
        if not 0 <= self.buffer < len(resources):
            raise InvalidArgumentError(
                f"entry {self.key!r} is in buffer {self.buffer}, but resources holds {len(resources)}: pass one "
                "resource per buffer file, in the order of plan.buffers"
            )
        return DML_BUFFER_BINDING(resources[self.buffer], self.offset, self.size)
