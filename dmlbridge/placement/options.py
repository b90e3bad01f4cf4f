"""The options of whole-model conversion, checked once where a public function takes them.

Each public function (``plan_model``, ``convert_model``, ``UploadPlan.verify``, ``tensor_to_array``) checks the
keywords it was given with the helpers here and passes the result on as one record (:class:`PlanOptions`,
:class:`ConvertOptions`), never as a dozen positional parameters.

    >>> from dmlbridge.placement.options import PlanOptions
    >>> PlanOptions.check(alignment=16).alignment
    16
"""

from __future__ import annotations

import os
import re
from typing import Any, NamedTuple

from dmlbridge.errors import InvalidArgumentError
from dmlbridge.model.model_limits import DEFAULT_MAX_CONSTANTS, DEFAULT_MAX_NODES, check_max_constants, check_max_nodes
from dmlbridge.model.shapes import NO_SHAPES, GivenShapes
from dmlbridge.onnx.tensor_proto import DEFAULT_MAX_TENSOR_BYTES, check_max_tensor_bytes
from dmlbridge.placement.cpu_read import Upload, check_upload
from dmlbridge.placement.selection import EVERY_CONSTANT, Selection
from dmlbridge.system.workers import check_workers
from dmlbridge.tensor.descs import check_flags
from dmlbridge.types.target import Target

__all__ = [
    "DEFAULT_MAX_BUFFER_BYTES",
    "DEFAULT_MAX_CONSTANTS",
    "DEFAULT_MAX_MANIFEST_BYTES",
    "DEFAULT_MAX_NODES",
    "DEFAULT_MAX_TENSOR_BYTES",
    "DEFAULT_TARGET",
    "MAX_ALIGNMENT",
    "MAX_BUFFER_BYTES",
    "MAX_BUFFER_COUNT",
    "MAX_KEY_LENGTH",
    "ConvertOptions",
    "PlanOptions",
    "byte_count_text",
    "check_flag",
    "check_max_buffer_bytes",
    "check_max_constants",
    "check_max_nodes",
    "check_max_tensor_bytes",
    "check_names",
    "max_buffer_bytes_for",
    "parse_byte_count",
    "round_limit",
    "smallest_max_buffer_bytes",
    "what_fits",
]

DEFAULT_MAX_MANIFEST_BYTES = 256 << 20
"""The largest manifest written or read unless the caller raises the limit."""
MAX_KEY_LENGTH = 4096
"""The longest key (in characters) a constant may have; its origin may be twice as long. A model whose names are
longer is refused: every key is written into the manifest, whose size this bounds."""

MAX_ALIGNMENT = 2**31  # GuaranteedBaseOffsetAlignment is a UINT: the largest power of two it holds
DEFAULT_MAX_BUFFER_BYTES = 2048 << 20
"""The largest buffer file a conversion writes unless told otherwise: the size Direct3D 12 guarantees a resource
on a GPU with 8 GiB or more of dedicated memory, min(max(128 MiB, VRAM / 4), 2048 MiB)."""
MAX_BUFFER_BYTES = 0xFFFF0000
"""The largest ``max_buffer_bytes``: a CPU-visible (upload) buffer stops there (the Agility SDK's limit)."""
MAX_BUFFER_COUNT = 256
"""The most buffer files one conversion writes: a written plan holds each open, and a conversion twice that many
while it writes (a process may open about 1,000 files by default); real models need a few (14 GB in 2 GiB
buffers: 7; 256 of them hold 512 GiB)."""
_MIN_GUARANTEED = 128 << 20  # D3D12_REQ_RESOURCE_SIZE_IN_MEGABYTES_EXPRESSION_A_TERM (MB meaning 2^20 bytes)
DEFAULT_TARGET = Target()


_BYTE_COUNT = re.compile(r"\s*(0[xX][0-9a-fA-F]+|\d+)\s*([A-Za-z]*)\s*")
_BINARY_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_DECIMAL_UNITS = {"k": "KiB", "kb": "KiB", "m": "MiB", "mb": "MiB", "g": "GiB", "gb": "GiB", "t": "TiB", "tb": "TiB"}


def parse_byte_count(text: str) -> int:
    """A byte count as a person writes it: a whole number (``4096``, ``0x1000``) or one with a binary unit
    (``512KiB``, ``512MiB``, ``2GiB``, ``1TiB``; any case). Decimal units (``MB``, ``G``) are refused with a
    hint rather than guessed (2 GB is 2,000,000,000 bytes, 2 GiB 2,147,483,648). InvalidArgumentError otherwise.

    Example:
        >>> parse_byte_count("512MiB"), parse_byte_count("2 GiB"), parse_byte_count("4096")
        (536870912, 2147483648, 4096)
    """
    match = _BYTE_COUNT.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _BINARY_UNITS:
        if match and unit in _DECIMAL_UNITS:
            binary = f"{match.group(1)}{_DECIMAL_UNITS[unit]}"
            raise InvalidArgumentError(
                f"not a byte count: {text!r} (decimal units are not guessed: {text.strip()} could mean 10^n or 2^n "
                f"bytes); write {binary} for {match.group(1)} x 2^{10 * (1 + 'kmgt'.index(unit[0]))} bytes"
            )
        raise InvalidArgumentError(
            f"not a byte count: {text!r}; write a whole number of bytes or one with KiB, MiB, GiB or TiB (2GiB)"
        )
    return int(match.group(1), 0) * _BINARY_UNITS[unit]


def check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, not {value!r}")
    return value


def max_buffer_bytes_for(vram_bytes: int, alignment: int = 256) -> int:
    """The largest buffer Direct3D 12 guarantees on a GPU with ``vram_bytes`` of dedicated memory,
    min(max(128 MiB, VRAM / 4), 2048 MiB) (``D3D12_REQ_RESOURCE_SIZE_IN_MEGABYTES_EXPRESSION_A/B/C_TERM``), rounded
    down to a multiple of ``alignment``: a ``max_buffer_bytes`` every such device takes. (DXGI_ADAPTER_DESC's
    DedicatedVideoMemory gives the VRAM size.)

    Example:
        >>> max_buffer_bytes_for(4 << 30) == 1 << 30, max_buffer_bytes_for(16 << 30) == 2 << 30
        (True, True)
        >>> max_buffer_bytes_for(256 << 20) == 128 << 20
        True
    """
    if isinstance(vram_bytes, bool) or not isinstance(vram_bytes, int) or vram_bytes < 0:
        raise InvalidArgumentError(f"vram_bytes must be a non-negative integer, got {vram_bytes!r}")
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 16 or alignment & (alignment - 1):
        raise InvalidArgumentError(f"alignment must be a power of two from 16, got {alignment!r}")
    guaranteed = min(max(_MIN_GUARANTEED, vram_bytes // 4), DEFAULT_MAX_BUFFER_BYTES)
    return max(guaranteed // alignment * alignment, alignment)


def check_max_buffer_bytes(value: Any, alignment: int) -> int:
    """``max_buffer_bytes`` checked: an integer, a multiple of ``alignment``, from it to 0xFFFF0000."""
    if (
        isinstance(value, bool) or not isinstance(value, int) or value < alignment or value > MAX_BUFFER_BYTES
        or value % alignment
    ):
        raise InvalidArgumentError(
            f"max_buffer_bytes must be a multiple of the alignment ({alignment}) from {alignment} to 0xFFFF0000 "
            f"(4 GiB - 64 KiB, the largest upload buffer Direct3D 12 makes), got {value!r}; the default, 2 GiB, is "
            "what every GPU with 8 GiB of memory guarantees (dmlbridge.max_buffer_bytes_for gives it for others)"
        )
    return value


def buffer_count(totals: list[int], limit: int, alignment: int) -> int:
    """How many buffers constants of these sizes (in model order, skipped ones left out) take within ``limit``:
    the rule of :func:`dmlbridge.placement.entries.place_constants` (a new buffer where the next constant would end
    past the limit; one larger than it alone in its buffer)."""
    count, end = 1, 0
    for total in totals:
        offset = -(-end // alignment) * alignment
        if offset + total > limit and end > 0:
            count, offset = count + 1, 0
        end = offset + total
    return count


def smallest_max_buffer_bytes(totals: list[int], alignment: int) -> int | None:
    """The smallest ``max_buffer_bytes`` (a multiple of ``alignment``) with which constants of these sizes all fit
    in at most MAX_BUFFER_COUNT buffers; None when none does (a constant over 0xFFFF0000). A larger limit never
    takes more buffers (a buffer's constants keep their offsets when it holds fewer), so it is found by halving.

    Example:
        >>> smallest_max_buffer_bytes([6000, 12000, 20], 256)
        12032
    """
    low = max(-(-max(totals, default=0) // alignment), 1)  # in alignments
    high = MAX_BUFFER_BYTES // alignment
    if low > high or buffer_count(totals, high * alignment, alignment) > MAX_BUFFER_COUNT:
        return None
    while low < high:
        middle = (low + high) // 2
        if buffer_count(totals, middle * alignment, alignment) <= MAX_BUFFER_COUNT:
            high = middle
        else:
            low = middle + 1
    return low * alignment


def round_limit(needed: int, alignment: int) -> int | None:
    """``needed`` rounded up to a number a person writes: a whole number of GiB, MiB or KiB, the coarsest that
    adds at most a sixteenth, else ``needed`` itself; a multiple of ``alignment`` (a power of two) and at most
    0xFFFF0000, or None when no such number is at least ``needed``.

    Example:
        >>> round_limit(12032, 256), round_limit(2469606195, 256) == 2356 << 20
        (12288, True)
    """
    aligned = -(-needed // alignment) * alignment
    if aligned > MAX_BUFFER_BYTES:
        return None
    for unit in (1 << 30, 1 << 20, 1 << 10):
        step = max(unit, alignment)
        value = -(-needed // step) * step
        if value <= MAX_BUFFER_BYTES and value - needed <= needed // 16:
            return value
    return aligned


def byte_count_text(count: int) -> str:
    """``count`` as :func:`parse_byte_count` reads it, in the largest binary unit that divides it exactly.

    Example:
        >>> byte_count_text(12288), byte_count_text(2 << 30), byte_count_text(1000)
        ('12KiB', '2GiB', '1000')
    """
    for unit, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if count >= unit and count % unit == 0:
            return f"{count // unit}{name}"
    return str(count)


def what_fits(fitting: int | None) -> str:
    """What to pass instead, in the keyword's terms (the command line names its flag)."""
    if fitting is None:
        return ("no max_buffer_bytes up to 0xFFFF0000 (the largest upload buffer Direct3D 12 makes) holds them: "
                "leave out the largest constants (exclude)")
    text = byte_count_text(fitting)
    guaranteed = ("" if fitting <= DEFAULT_MAX_BUFFER_BYTES else
                  "; buffers over 2 GiB are not guaranteed by Direct3D 12: check that the device makes them")
    return (f"pass max_buffer_bytes={fitting}{'' if text.isdigit() else f' ({text})'}: the smallest round limit "
            f"with which every constant of this model fits a buffer{guaranteed}")


def check_names(keys: list[str], origins: list[str]) -> None:
    """InvalidArgumentError when a key or an origin is longer than dmlbridge takes (checked once for all)."""
    if keys and (max(map(len, keys)) > MAX_KEY_LENGTH or max(map(len, origins)) > 2 * MAX_KEY_LENGTH):
        key, origin = next((k, o) for k, o in zip(keys, origins, strict=True)
                           if len(k) > MAX_KEY_LENGTH or len(o) > 2 * MAX_KEY_LENGTH)
        raise InvalidArgumentError(
            f"constant {key[:100]!r}... has a key of {len(key)} characters (origin {len(origin)}); dmlbridge takes "
            f"keys of at most {MAX_KEY_LENGTH} (origins twice that), which every real model's names fit: this "
            "model's names or subgraph paths are unreasonably long"
        )


class PlanOptions(NamedTuple):
    """How constants are laid out: the target, every offset's alignment, the least number of dimensions, the
    flags of every desc and the largest buffer file."""

    target: Target
    alignment: int
    min_dims: int
    flags: int = 0
    max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES
    shapes: GivenShapes = NO_SHAPES
    """Sizes given to the model's free dimensions (``input_shapes``, ``dim_params``), for its consumers' descs."""
    upload: Upload = "bound"
    """Which constants the upload buffers hold (:mod:`dmlbridge.placement.cpu_read`)."""

    @classmethod
    def check(
        cls, target: Any = DEFAULT_TARGET, alignment: Any = 256, min_dims: Any = None, flags: Any = 0,
        max_buffer_bytes: Any = DEFAULT_MAX_BUFFER_BYTES, input_shapes: Any = None, dim_params: Any = None,
        upload: Any = "bound",
    ) -> PlanOptions:
        """The options, each checked (InvalidArgumentError names the keyword)."""
        if not isinstance(target, Target):
            raise InvalidArgumentError(f"target must be a dmlbridge.Target, got {type(target).__name__}")
        if (
            isinstance(alignment, bool)
            or not isinstance(alignment, int)
            or alignment < 16
            or alignment > MAX_ALIGNMENT
            or alignment & (alignment - 1)
        ):
            raise InvalidArgumentError(
                f"alignment must be a power of two from 16 (DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT) to 2^31, got "
                f"{alignment!r}; 256 suits most uses"
            )
        return cls(target, alignment, target.check_min_dims(min_dims), check_flags(flags),
                   check_max_buffer_bytes(max_buffer_bytes, alignment), GivenShapes.check(input_shapes, dim_params),
                   check_upload(upload))


class ConvertOptions(NamedTuple):
    """What ``convert_model`` does besides the layout (see its docstring for each)."""

    layout: PlanOptions
    progress: bool | None
    strict: bool
    external_data_root: str | os.PathLike[str] | None
    checksum: bool
    max_tensor_bytes: int
    fsync: bool
    max_output_bytes: int | None = None  # None: the default bound, from the model's size
    max_manifest_bytes: int = DEFAULT_MAX_MANIFEST_BYTES
    selection: Selection = EVERY_CONSTANT
    workers: int = 1  # threads converting constants (dmlbridge.system.workers); 1: all in the calling thread
    max_constants: int | None = DEFAULT_MAX_CONSTANTS  # (None: any number; dmlbridge.model.census)
    max_nodes: int | None = DEFAULT_MAX_NODES  # (None: any number; dmlbridge.model.census)

    @classmethod
    def check(
        cls, layout: PlanOptions, *, progress: Any, strict: Any, external_data_root: Any, checksum: Any,
        max_tensor_bytes: Any, fsync: Any, max_output_bytes: Any = None,
        max_manifest_bytes: Any = DEFAULT_MAX_MANIFEST_BYTES, selection: Selection = EVERY_CONSTANT,
        workers: Any = 1, max_constants: Any = DEFAULT_MAX_CONSTANTS, max_nodes: Any = DEFAULT_MAX_NODES,
    ) -> ConvertOptions:
        """The options, each checked (InvalidArgumentError names the keyword)."""
        strict, checksum = check_flag("strict", strict), check_flag("checksum", checksum)
        fsync = check_flag("fsync", fsync)
        if progress is not None and not isinstance(progress, bool):
            raise InvalidArgumentError(f"progress must be None, True or False, not {progress!r}")
        max_tensor_bytes = check_max_tensor_bytes(max_tensor_bytes)
        for name, value in (("max_output_bytes", max_output_bytes), ("max_manifest_bytes", max_manifest_bytes)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidArgumentError(f"{name} must be a non-negative integer, got {value!r}")
        if max_manifest_bytes is None:
            raise InvalidArgumentError("max_manifest_bytes must be a non-negative integer, got None")
        return cls(layout, progress, strict, external_data_root, checksum, max_tensor_bytes, fsync, max_output_bytes,
                   max_manifest_bytes, selection, check_workers(workers), check_max_constants(max_constants),
                   check_max_nodes(max_nodes))
