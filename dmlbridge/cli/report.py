"""Plans and the mapping table as text: what ``dmlbridge inspect``, ``dmlbridge table`` and the demo print.

    >>> import dmlbridge
    >>> print(format_table(dmlbridge.mapping_table()[1:2], markdown=True))
    | ONNX | # | DML | conversion | lossless | reason |
    |---|---|---|---|---|---|
    | FLOAT | 1 | FLOAT32 | native | yes | stored as is |

Given a ``width`` (a terminal's), every line fits it, down to :data:`MIN_WIDTH` columns. What does not fit is
either wrapped onto the next lines (sentences, notes, the mapping table's reasons) or cut and marked with
:data:`MARK`: keys and shapes in the middle, so that their start and end stay (a shape by whole dimensions),
origins at their end. The free-text columns give way first (the note, then the origin), then the keys, then the
shapes; when even that leaves a key fewer than 24 columns, each constant takes two lines or more instead (its
key, then the rest, wrapped), and the mapping table one wrapped line per type. Without a width, nothing is cut
or wrapped: the lines are as long as their contents.

    >>> _elide_middle("model.layers.0.self_attn.q_proj.weight", 33)
    'model.layers.0.s…tn.q_proj.weight'
    >>> _elide_shape("1x3x1x1x1x1x224x224", 12)
    '1x3x1x…x224'
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping, Sequence

from dmlbridge.errors import counted
from dmlbridge.plan.upload_plan import UploadPlan
from dmlbridge.quantized.records import QuantizedPart, QuantizedWeight
from dmlbridge.types.mapping import MappingRow

__all__ = ["MARK", "MIN_WIDTH", "format_plan", "format_table", "human_size", "reads_on_totals", "wrap_text"]

MARK = "…"  # where a key, a shape or a free text was cut
MIN_WIDTH = 40  # narrower widths are taken as this one
_GAP = 2  # the spaces between two columns

_KEY_FLOOR = 24  # below this, a plan's keys go on lines of their own
_REASON_FLOOR = 20  # below this, the mapping table's rows become wrapped lines


def format_table(rows: Sequence[MappingRow], markdown: bool, width: int | None = None) -> str:
    """The mapping table as aligned text, or as a markdown table (docs/mapping.md carries the default one).

    With ``width``, the reasons wrap in their column; where even that leaves them too little room, each type is
    one wrapped line of its own. The markdown table ignores ``width``."""
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
    widths = [max(_width(row[i]) for row in [header, *body]) for i in range(len(header) - 1)]
    room = None if width is None else max(width, MIN_WIDTH) - sum(widths) - _GAP * len(widths)
    if room is not None and room < min(_REASON_FLOOR, max(_width(row[-1]) for row in [header, *body])):
        width = max(width or 0, MIN_WIDTH)
        return "\n".join(line for r in body for line in _wrap(
            f"{r[0]} (ONNX {r[1]}) -> {r[2]} {r[3]}, {'lossless' if r[4] == 'yes' else 'not lossless'}: {r[5]}",
            width))
    lines = []
    for row in [header, *body]:
        head = "".join(_pad(cell, w) + " " * _GAP for cell, w in zip(row[:-1], widths, strict=True))
        reason = _wrap(row[-1], room, rest="")
        lines += [head + reason[0]] + [" " * _width(head) + more for more in reason[1:]]
    return "\n".join(lines)


def human_size(size: int) -> str:
    """``size`` bytes as a person reads them: ``1 byte``, ``26,116 bytes``, ``1.5 MiB``, ``2.00 GiB``."""
    if size < 1 << 20:
        return f"{size:,} byte{'' if size == 1 else 's'}"
    scaled = size / (1 << 20)
    return f"{scaled:.1f} MiB" if scaled < 1024 else f"{scaled / 1024:.2f} GiB"


def wrap_text(text: str, width: int | None) -> str:
    """``text`` in lines of at most ``width`` columns (the following ones indented by two spaces), broken at
    spaces; a word longer than a line is cut in its middle, marked with :data:`MARK`. ``None``: ``text``."""
    return "\n".join(_wrap(text, None if width is None else max(width, MIN_WIDTH)))


def reads_on_totals(plan: UploadPlan) -> dict[str, dict[str, int]]:
    """Per place a plan's converted entries are read (``PlanEntry.reads_on``): how many, and their bytes.

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import helper, numpy_helper
        >>> shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
        >>> node = helper.make_node("Reshape", ["x", "shape"], ["y"])
        >>> totals = reads_on_totals(dmlbridge.plan_model(helper.make_model(helper.make_graph([node], "g", [], [],
        ...                                                                                     [shape]))))
        >>> totals["cpu"], totals["gpu"]
        ({'constants': 1, 'bytes': 16}, {'constants': 0, 'bytes': 0})
    """
    totals = {place: {"constants": 0, "bytes": 0} for place in ("gpu", "cpu", "none")}
    for entry in plan.converted:
        totals[entry.reads_on]["constants"] += 1
        totals[entry.reads_on]["bytes"] += entry.total_tensor_size_in_bytes
    return totals


def format_plan(plan: UploadPlan, width: int | None = None, notes: Mapping[str, str] | None = None) -> str:
    """An upload plan as an aligned text table (one row per constant) followed by a totals line.

    Names come from the model: control characters are escaped, wide characters take two columns, and the origin
    leaves out the subgraph path the key already shows. With ``width`` (a terminal's) every line fits it (see the
    module's docstring). ``notes``: a last column, by key (what was not checked)."""
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
        ) + ((_printable(notes.get(e.key, "")),) if notes else ()))
    if notes:
        header = (*header, "note")
    if width is not None:
        width = max(width, MIN_WIDTH)
    # The columns give way in this order: the note (wrapped), the origin, the key, the shape (each with the
    # function that fits its cells and the fewest columns it keeps); when that is not enough, each row becomes a
    # record.
    cuts: list[tuple[int, Callable[[str, int], str | list[str]], int]] = [
        (9, _wrap_cell, 12), (1, _cut_end, 12), (0, _elide_middle, _KEY_FLOOR), (3, _elide_shape, 10)]
    lines = _columns(header, rows, width, cuts)
    if lines is None:
        lines = [line for row in rows for line in _record(row, width)]
    text = []
    for e in plan.skipped:
        text.append(f"skipped {_printable(e.key)!r}: {_printable(e.skipped or '')}")
    converted = plan.converted
    sizes = plan.buffer_sizes
    counts = [0] * len(sizes)
    for each in converted:
        counts[each.buffer] += 1
    uploaded = plan.upload_buffer_count
    for index, (size, count) in enumerate(zip(sizes, counts, strict=True)):
        name = f" {plan.buffers[index].path}" if plan.buffers else ""
        apart = "" if index < uploaded else " (read on the CPU: not uploaded)"
        text.append(f"buffer {index}{name}: {human_size(size)}, {counted(count, 'tensor')}{apart}")
    for q in plan.quantized_records.values():
        text.append(_quantized_line(q, plan))
    places = reads_on_totals(plan)
    if places["cpu"]["constants"]:  # (where ONNX Runtime reads them, when some are not uploaded to be bound)
        text.append("read on the GPU: {}; on the CPU (as attributes): {}; by nothing: {}".format(
            *(f"{counted(places[p]['constants'], 'constant')} ({human_size(places[p]['bytes'])})"
              for p in ("gpu", "cpu", "none"))) + f"; uploaded: {human_size(plan.upload_size)} (upload={plan.upload})")
    data = sum(e.total_tensor_size_in_bytes for e in converted)
    apiece = " each" if len(sizes) > 1 else ""
    limit = "" if plan.max_buffer_bytes is None else f" (at most {human_size(plan.max_buffer_bytes)}{apiece})"
    where = (f"one buffer of {human_size(plan.total_size)}" if len(sizes) == 1 else
             f"{len(sizes)} buffers, {human_size(plan.total_size)} together")
    text.append(
        f"{counted(len(plan.entries), 'constant')}: {len(converted)} converted ({human_size(data)} of tensor data in "
        f"{where}{limit}; alignment {plan.alignment}), {len(plan.skipped)} skipped"
        + (f"; {derived} derived from quantized weights" if (derived := sum(
            key.rpartition("/")[0] in plan.quantized_records for key in plan.entries)) else "")
        + (f"; {counted(len(plan.quantized_records), 'quantized weight')}" if plan.quantized_records else "")
    )
    return "\n".join(lines + [line for each in text for line in _wrap(each, width)])


def _columns(header: tuple[str, ...], rows: list[tuple[str, ...]], width: int | None,
             cuts: list[tuple[int, Callable[[str, int], str | list[str]], int]]) -> list[str] | None:
    """``rows`` as aligned columns of at most ``width`` columns in all, the ``cuts`` columns fitted in turn
    (cut, or wrapped onto lines of their own), each to no fewer than its floor; None if that is not enough."""
    widths = [max(_width(r[i]) for r in [header, *rows]) for i in range(len(header))]
    cutters = {}
    if width is not None:
        over = sum(widths) + _GAP * (len(widths) - 1) - width
        for column, cutter, floor in cuts:
            if column >= len(widths) or over <= 0:
                continue
            cut = min(over, max(0, widths[column] - max(floor, _width(header[column]))))
            widths[column] -= cut
            over -= cut
            cutters[column] = cutter
        if over > 0:
            return None
    lines = []
    for row in [header, *rows]:
        cells = [cutters[i](c, w) if i in cutters else c for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        stacked = [[cell] if isinstance(cell, str) else cell for cell in cells]
        for depth in range(max(map(len, stacked))):
            lines.append((" " * _GAP).join(_pad(cell[depth] if depth < len(cell) else "", w)
                                           for cell, w in zip(stacked, widths, strict=True)).rstrip())
    return lines


def _record(row: tuple[str, ...], width: int | None) -> list[str]:
    """A plan's row as two lines or more: the key (cut in its middle if need be), then the rest, wrapped."""
    key, origin, onnx_type, shape, dml_type, conversion, buffer, offset, size, *note = row
    text = f"{origin}: {onnx_type} {_elide_shape(shape, (width or 0) - 4) if width else shape}"
    if conversion == "skipped":
        text += ", skipped"
    else:  # (a NUL keeps a label with its value on one line)
        text += f" ->\0{dml_type} {conversion}, buffer\0{buffer}, offset\0{offset}, {size}\0bytes"
    if note and note[0]:
        text += f"; {note[0]}"
    details = [line.replace("\0", " ") for line in _wrap(text, width, first="  ", rest="    ")]
    return [key if width is None else _elide_middle(key, width), *details]


def _wrap(text: str, width: int | None, first: str = "", rest: str = "  ") -> list[str]:
    """``text`` after ``first`` broken at spaces into lines of at most ``width`` columns, the following ones
    after ``rest``; a word no line holds is cut in its middle."""
    if width is None or _width(first + text) <= width:
        return [first + text]
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        word = _elide_middle(word, width - max(_width(first), _width(rest)))
        indent = rest if lines else first
        if line and _width(indent + line + " " + word) > width:
            lines.append(indent + line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append((rest if lines else first) + line)
    return [each.rstrip() for each in lines]


def _wrap_cell(text: str, width: int) -> list[str]:
    """A cell of free text in lines of at most ``width`` columns."""
    return _wrap(text, width, rest="")


def _quantized_line(q: QuantizedWeight, plan: UploadPlan) -> str:
    """``quantized 'mm': MatMulNBits 4 bits, block 32, [N, K] = weight 'B' UINT4 [..], scales .., zero points ..``;
    a part of another type than its entry's row (MatMulNBits' B is uint8 in the model, the weight is its nibbles)
    says so."""
    head = (f"quantized {_printable(q.key)!r}: {q.op} {q.bits} bits, {q.granularity}"
            + (f" {q.block_size}" if q.block_size else "") + f", shape {list(q.shape)}")
    if q.skipped is not None:
        return f"{head}: not described ({_printable(q.skipped)})"
    parts = ", ".join(f"{name} {_printable(p.key)!r} {p.dml_type.name}{_read_as(p, plan)}"
                      for name, p in (("weight", q.weight), ("scales", q.scales), ("zero points", q.zero_points))
                      if p is not None)
    operator = f" (for {q.operator})" if q.operator else ""
    return f"{head}, sizes {list(q.sizes or ())}{operator}: {parts}"


def _read_as(part: QuantizedPart, plan: UploadPlan) -> str:
    """`` (its UINT8 row's bytes, two 4-bit values each)`` for a part that reads its entry's bytes as another type
    (the model packs 4-bit values in uint8; DirectML takes them as UINT4 or INT4, no second copy); else ""."""
    entry = plan.entries.get(part.key)
    row = None if entry is None or entry.dml_type is None else entry.dml_type
    if row is None or row is part.dml_type:
        return ""
    return f" (its {row.name} row's bytes, two 4-bit values each)"


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


def _take(chars: Sequence[str], width: int) -> str:
    """The longest start of ``chars`` that takes at most ``width`` columns."""
    out, used = [], 0
    for ch in chars:
        used += _width(ch)
        if used > width:
            break
        out.append(ch)
    return "".join(out)


def _cut_end(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns, marked with MARK where it was cut (free text: its start matters)."""
    if _width(text) <= width:
        return text
    return _take(text, width - 1) + MARK if width > 0 else ""


def _elide_middle(text: str, width: int) -> str:
    """``text`` in ``width`` columns, its middle replaced by MARK: a key keeps its start and its end."""
    if _width(text) <= width:
        return text
    if width < 3:
        return MARK[:width]
    tail = _take(text[::-1], width // 2)[::-1]
    head = _take(text, width - 1 - _width(tail))
    return head + MARK + tail


def _elide_shape(shape: str, width: int) -> str:
    """A shape (``1x3x224x224``) in ``width`` columns: whole dimensions from its start and its end around MARK
    (``1x3x…x224``), never a part of a number."""
    if _width(shape) <= width:
        return shape
    dims = shape.split("x")
    for kept in range(len(dims) - 1, 0, -1):  # as many as fit, as evenly from both ends as they fit
        for head in sorted(range(1, max(kept, 2)), key=lambda head: abs(2 * head - kept)):  # (both ends)
            text = "x".join([*dims[:head], MARK, *dims[len(dims) - kept + head:]])
            if _width(text) <= width:
                return text
    return MARK if width > 0 else ""
