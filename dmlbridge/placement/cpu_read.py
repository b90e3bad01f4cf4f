"""Which constants go to the GPU: ``upload="bound"`` (the default) keeps the constants ONNX Runtime's DirectML
provider reads on the CPU (a Reshape's shape, a Slice's ends: ``reads_on == "cpu"``) out of the upload buffers.

They stay converted, each with a buffer and an offset, in buffer files of their own after the upload buffers
(placed last, in model order among themselves), which the manifest marks as not uploaded: the upload buffers'
indices are those ``upload="all"`` gives them when nothing is CPU-read, and a program uploads a prefix of the
buffer list. A CPU-read constant keeps its ONNX type and bytes whatever the target (DirectML never reads it: a
Slice's ``ends`` of 2^63 - 1 stays INT64 on a target that narrows INT64). A quantized record's parts are always
uploaded, and so is what nothing reads (``"none"``: a graph output, a Loop's initial value, another domain's
node may still need it on the GPU).

    >>> from dmlbridge.model.consumers import Consumer
    >>> reshape = Consumer("r", "Reshape", 1, reads_on="cpu")
    >>> sorted(cpu_read_keys({"shape": (reshape,), "w": ()}, frozenset()))
    ['shape']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from dmlbridge.errors import InvalidArgumentError
from dmlbridge.model.consumers import Consumer
from dmlbridge.types.target import Target

__all__ = ["CPU_READ_TARGET", "UPLOADS", "Upload", "check_upload", "cpu_read_keys", "upload_order"]

Upload = Literal["bound", "all"]
UPLOADS: tuple[Upload, ...] = ("bound", "all")
CPU_READ_TARGET = Target()
"""The mapping a CPU-read constant keeps: every ONNX type as its own DML type where DirectML has one (INT64 stays
INT64), whatever the conversion's target."""


def check_upload(value: Any) -> Upload:
    """``upload`` checked: ``"bound"`` or ``"all"`` (InvalidArgumentError names the keyword)."""
    if value not in UPLOADS or not isinstance(value, str):
        raise InvalidArgumentError(
            f"upload must be 'bound' (the upload buffers hold what DirectML binds; the constants read on the CPU go "
            f"in buffer files of their own) or 'all' (every constant uploaded), got {value!r}")
    return value  # type: ignore[return-value]  # (one of UPLOADS)


def cpu_read_keys(consumers: Mapping[str, Sequence[Consumer]], parts: frozenset[str]) -> frozenset[str]:
    """The keys of the constants read only on the CPU: a consumer reads each there and none binds it on the GPU,
    and no quantized record names it as a part (``PlanEntry.reads_on == "cpu"``)."""
    found = set()
    for key, read_by in consumers.items():
        if read_by and key not in parts:
            places = {consumer.reads_on for consumer in read_by}
            if "cpu" in places and "gpu" not in places:
                found.add(key)
    return frozenset(found)


def upload_order(keys: Sequence[str], cpu_read: frozenset[str]) -> list[int] | None:
    """The positions of ``keys`` with the CPU-read ones moved last (each group in model order); None when they
    already are last."""
    if not cpu_read:
        return None
    uploaded = [i for i, key in enumerate(keys) if key not in cpu_read]
    if uploaded == list(range(len(uploaded))):
        return None
    return uploaded + [i for i, key in enumerate(keys) if key in cpu_read]
