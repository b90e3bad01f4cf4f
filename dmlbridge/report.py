"""Plans and the mapping table as text: what ``dmlbridge inspect``, ``dmlbridge table`` and the demo print.

    >>> import dmlbridge
    >>> print(format_table(dmlbridge.mapping_table()[1:2], markdown=True))
    | ONNX | # | DML | conversion | lossless | reason |
    |---|---|---|---|---|---|
    | FLOAT | 1 | FLOAT32 | native | yes | stored as is |
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence

from dmlbridge.mapping import MappingRow
from dmlbridge.plan import UploadPlan
from dmlbridge.quantized import QuantizedWeight

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


def format_plan(plan: UploadPlan, width: int | None = None, notes: Mapping[str, str] | None = None) -> str:
    """An upload plan as an aligned text table (one row per constant) followed by a totals line.

    Names come from the model: control characters are escaped, wide characters take two columns, and the origin
    leaves out the subgraph path the key already shows. With ``width`` (a terminal's), the key and origin
    columns are shortened with "…" so that a row fits. ``notes``: a last column, by key (what was not checked).
    """
    header: tuple[str, ...] = ("key", "origin", "ONNX", "shape", "DML", "conversion", "buffer", "offset", "bytes")
    notes = notes or {}
    rows = []
    for e in plan.entries.values():
        rows.append((
            _printable(e.key), _printable(_short_origin(e.key, e.origin)), e.onnx_type.name,
            "x".join(map(str, e.shape)) or "scalar", e.dml_type.name if e.dml_type else "—",
            e.conversion or "skipped", "" if e.buffer is None else str(e.buffer),
            "" if e.offset is None else str(e.offset),
            "" if e.total_tensor_size_in_bytes is None else str(e.total_tensor_size_in_bytes),
        ) + ((notes.get(e.key, ""),) if notes else ()))
    if notes:
        header = (*header, "note")
    widths = [max(_width(r[i]) for r in [header, *rows]) for i in range(len(header))]
    if width is not None:
        over = sum(widths) + 2 * (len(widths) - 1) - width
        for column in (1, 0):  # the origin gives way first, then the key; neither below 12 columns
            cut = min(over, max(0, widths[column] - 12))
            widths[column] -= cut
            over -= cut
        rows = [(_fit(r[0], widths[0]), _fit(r[1], widths[1]), *r[2:]) for r in rows]
    lines = ["  ".join(_pad(c, w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    for e in plan.skipped:
        lines.append(f"skipped {_printable(e.key)!r}: {_printable(e.skipped or '')}")
    converted = plan.converted
    sizes = plan.buffer_sizes
    counts = [0] * len(sizes)
    for each in converted:
        counts[each.buffer] += 1
    for index, (size, count) in enumerate(zip(sizes, counts, strict=True)):
        name = f" {plan.buffers[index].path}" if plan.buffers else ""
        lines.append(f"buffer {index}{name}: {human_size(size)}, {count} tensors")
    for q in plan.quantized_records.values():
        lines.append(_quantized_line(q))
    data = sum(e.total_tensor_size_in_bytes for e in converted)
    limit = "" if plan.max_buffer_bytes is None else f" (at most {human_size(plan.max_buffer_bytes)} each)"
    where = (f"a {human_size(plan.total_size)} buffer" if len(sizes) == 1 else
             f"{len(sizes)} buffers, {human_size(plan.total_size)} together")
    lines.append(
        f"{len(plan.entries)} constants: {len(converted)} converted ({human_size(data)} of tensor data in {where}"
        f"{limit}; alignment {plan.alignment}), {len(plan.skipped)} skipped"
        + (f"; {derived} derived from quantized weights" if (derived := sum(
            key.rpartition("/")[0] in plan.quantized_records for key in plan.entries)) else "")
        + (f"; {len(plan.quantized_records)} quantized weights" if plan.quantized_records else "")
    )
    return "\n".join(lines)




def _quantized_line(q: QuantizedWeight) -> str:
    """``quantized 'mm': MatMulNBits 4 bits, block 32, [N, K] = weight 'B' UINT4 [..], scales .., zero points ..``"""
    head = (f"quantized {_printable(q.key)!r}: {q.op} {q.bits} bits, {q.granularity}"
            + (f" {q.block_size}" if q.block_size else "") + f", shape {list(q.shape)}")
    if q.skipped is not None:
        return f"{head}: not described ({_printable(q.skipped)})"
    parts = ", ".join(f"{name} {_printable(p.key)!r} {p.dml_type.name}"
                      for name, p in (("weight", q.weight), ("scales", q.scales), ("zero points", q.zero_points))
                      if p is not None)
    operator = f" (for {q.operator})" if q.operator else ""
    return f"{head}, sizes {list(q.sizes or ())}{operator}: {parts}"


def _short_origin(key: str, origin: str) -> str:
    """The origin without its `` in SCOPE`` ending when the key already begins with that scope."""
    head, found, scope = origin.rpartition(" in ")
    return head if found and key.startswith(scope + "/") else origin


def _printable(text: str) -> str:
    """``text`` with control characters (a name can hold any) written as escapes."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else ascii(ch)[1:-1] for ch in text)


def _width(text: str) -> int:
    """The columns ``text`` takes in a terminal: wide characters two, combining marks none."""
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
               for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * max(0, width - _width(text))


def _fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns, with "…" where it was cut."""
    if _width(text) <= width:
        return text
    out, used = "", 0
    for ch in text:
        step = _width(ch)
        if used + step > width - 1:
            break
        out, used = out + ch, used + step
    return out + "…"
