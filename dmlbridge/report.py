"""Plans and the mapping table as text: what ``dmlbridge inspect``, ``dmlbridge table`` and the demo print.

    >>> import dmlbridge
    >>> print(format_table(dmlbridge.mapping_table()[1:2], markdown=True))
    | ONNX | # | DML | conversion | lossless | reason |
    |---|---|---|---|---|---|
    | FLOAT | 1 | FLOAT32 | native | yes | stored as is |
"""

from __future__ import annotations

from collections.abc import Sequence

from dmlbridge.mapping import MappingRow
from dmlbridge.plan import UploadPlan

__all__ = ["format_plan", "format_table", "human_size"]


def format_table(rows: Sequence[MappingRow], markdown: bool) -> str:
    """The mapping table as aligned text, or as a markdown table (the README carries the default one)."""
    header = ("ONNX", "#", "DML", "conversion", "lossless", "reason")
    body = [
        (r.onnx_name, str(r.onnx_type), r.dml_type.name if r.dml_type else "—", r.conversion,
         "yes" if r.lossless else "no", r.reason)
        for r in rows
    ]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in [header, *body]
    )


def human_size(size: int) -> str:
    if size < 1 << 20:
        return f"{size:,} bytes"
    scaled = size / (1 << 20)
    return f"{scaled:.1f} MiB" if scaled < 1024 else f"{scaled / 1024:.2f} GiB"


def format_plan(plan: UploadPlan) -> str:
    """An upload plan as an aligned text table (one row per constant) followed by a totals line."""
    header = ("key", "origin", "ONNX", "shape", "DML", "conversion", "offset", "bytes")
    rows = []
    for e in plan.entries.values():
        rows.append((
            e.key, e.origin, e.onnx_type.name, "x".join(map(str, e.shape)) or "scalar",
            e.dml_type.name if e.dml_type else "—", e.conversion or "skipped",
            "" if e.offset is None else str(e.offset),
            "" if e.total_tensor_size_in_bytes is None else str(e.total_tensor_size_in_bytes),
        ))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    for e in plan.skipped:
        lines.append(f"skipped {e.key!r}: {e.skipped}")
    converted = plan.converted
    data = sum(e.total_tensor_size_in_bytes or 0 for e in converted)
    lines.append(
        f"{len(plan.entries)} constants: {len(converted)} converted ({human_size(data)} of tensor data in a "
        f"{human_size(plan.total_size)} buffer, alignment {plan.alignment}), {len(plan.skipped)} skipped"
    )
    return "\n".join(lines)


