"""Reading the protobuf wire format: one message in Python, or many records of one message type at once with numpy.

Nothing here knows ONNX; :mod:`dmlbridge.model.byte_scan` names the fields. The format, as much of it as this module
reads: a message is a sequence of *fields*. Each field is a tag (a varint: the field number << 3 | the wire
type), then, by wire type:

- 0 (``VARINT``): a varint;
- 1 (``FIXED64``): 8 bytes;
- 2 (``LENGTH``): a varint length and that many bytes (strings, bytes, nested messages, packed repeated numbers);
- 5 (``FIXED32``): 4 bytes.

A varint is little-endian groups of 7 bits, with the high bit of each byte saying "more", at most 10 bytes (a
negative int64 takes 10); a tag is at most 5 bytes and below 2^32, as protobuf's parser reads them. Groups (wire
types 3 and 4) and the undefined wire types 6 and 7 are treated as malformed here: a caller hands such bytes to
protobuf itself (:mod:`dmlbridge.model.census` skips groups). The numpy reader :func:`varints` takes varints of
at most 9 bytes (below 2^63) and marks longer ones invalid: the callers read those records one field at a time.

    >>> varint(b"\\x96\\x01", 0, 2)
    (150, 2)
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = [
    "FIXED32",
    "FIXED64",
    "LENGTH",
    "MAX_ROUNDS",
    "VARINT",
    "RecordWalk",
    "field_position_runs",
    "field_positions",
    "float_field",
    "once",
    "read_tag",
    "single_field_span",
    "skip",
    "span_text",
    "spans_equal",
    "varint",
    "varints",
]

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
MAX_ROUNDS = 24  # fields a record may have for RecordWalk; a record with more is marked broken
_TEN = np.arange(10, dtype=np.int64)
_SHIFTS = _TEN * 7
_UINT64 = (1 << 64) - 1


# --- one message, in Python --------------------------------------------------------------------------------------


def varint(data: bytes, at: int, end: int) -> tuple[int, int]:
    """The varint at ``at`` and where it ends; (-1, end + 1) when it runs past ``end`` or is over 10 bytes.

    Ten bytes is the longest varint: a negative int64 is written so (as 2^64 plus it). Bits past the 64th, which a
    10th byte above 1 sets, are dropped, as protobuf's parser does (it accepts such a varint: a reader that refused
    it would read less of a model than protobuf).

        >>> varint(b"\\xff" * 9 + b"\\x01", 0, 10)  # -1 as an int64
        (18446744073709551615, 10)
    """
    value = shift = 0
    while at < end and shift < 70:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & _UINT64, at
        shift += 7
    return -1, end + 1


def read_tag(data: bytes, at: int, end: int) -> tuple[int, int]:
    """The field tag at ``at`` and where it ends; (-1, end + 1) when protobuf's parser refuses it: a varint of
    over 5 bytes, or a value of 2^32 and more (a field number is at most 2^29 - 1).

        >>> read_tag(b"\\x80" * 9 + b"\\x01", 0, 10)
        (-1, 11)
    """
    value, after = varint(data, at, min(end, at + 5))
    if value < 0 or value > 0xFFFFFFFF:
        return -1, end + 1
    return value, after


def skip(data: bytes, wire: int, at: int, end: int) -> int:
    """Where the field whose value starts at ``at`` ends, or end + 1 when it is malformed."""
    if wire == VARINT:
        return varint(data, at, end)[1]
    if wire == LENGTH:
        length, at = varint(data, at, end)
        return at + length if length >= 0 else end + 1
    if wire == FIXED64:
        return at + 8
    if wire == FIXED32:
        return at + 4
    return end + 1  # groups (3, 4) and the undefined 6, 7


def single_field_span(data: bytes, number: int) -> tuple[int, int] | None:
    """Where the payload of the length-delimited field ``number`` of the message ``data`` is, if the field occurs
    exactly once (protobuf merges a second occurrence into the first) and the message is well formed."""
    at, end = 0, len(data)
    span = None
    wanted = number << 3 | LENGTH
    while at < end:
        tag, at = read_tag(data, at, end)
        if tag < 0:
            return None
        if tag == wanted:
            if span is not None:
                return None
            length, at = varint(data, at, end)
            if length < 0 or at + length > end:
                return None
            span = (at, at + length)
            at += length
        else:
            at = skip(data, tag & 7, at, end)
            if at > end:
                return None
    return span


def field_positions(data: bytes, at: int, end: int) -> np.ndarray | None:
    """Where each field of the message in data[at:end] begins, or None when they do not add up to its end."""
    runs = list(field_position_runs(data, at, end, end - at + 1))
    if not runs:
        return np.zeros(0, dtype=np.int64)
    return None if runs[-1] is None else runs[0]


def field_position_runs(data: bytes, at: int, end: int, most: int) -> Iterator[np.ndarray | None]:
    """:func:`field_positions` in runs of at most ``most`` fields (a message of millions of fields need not be
    held at once); the last run is None when the fields do not add up to the message's end."""
    while at < end:
        positions = array.array("q")
        add = positions.append
        try:
            for _ in itertools.repeat(None, most):
                if at >= end:
                    break
                add(at)
                tag = data[at]
                if tag < 0x80 and tag & 7 == LENGTH:  # a one-byte tag and a short length: the usual record
                    length = data[at + 1]
                    if length < 0x80:
                        at += 2 + length
                        continue
                tag, after = read_tag(data, at, end)
                if tag < 0:
                    yield None
                    return
                at = skip(data, tag & 7, after, end)
        except IndexError:
            yield None
            return
        if at > end:
            yield None
            return
        yield np.frombuffer(positions, dtype=np.int64)


def float_field(message: Any, name: str) -> np.ndarray:
    """The values of a ``float`` or ``double`` field of a parsed protobuf ``message`` (repeated or not), with the
    bits protobuf stored: read from the field's own serialization, never through Python floats (float -> double
    -> float quiets a signalling NaN: 0x7F8F5019 becomes 0x7FCF5019). A 1-D little-endian array, read-only.
    (Protobuf's pure-Python implementation keeps Python floats itself: there the bits are already lost.)

        >>> from onnx import TensorProto
        >>> t = TensorProto.FromString(bytes([0x22, 4]) + (0x7F8F5019).to_bytes(4, "little"))
        >>> hex(int(float_field(t, "float_data").view("<u4")[0]))
        '0x7f8f5019'
    """
    field = message.DESCRIPTOR.fields_by_name[name]
    dtype = np.dtype("<f4" if field.type == field.TYPE_FLOAT else "<f8")
    data = message.SerializeToString()  # (its values keep their bits; the other fields are skipped below)
    pieces: list[memoryview] = []
    view = memoryview(data)
    at, end = 0, len(data)
    while at < end:  # ``name``'s occurrences: packed runs (LENGTH) or single values (FIXED32/FIXED64)
        tag, at = read_tag(data, at, end)
        if tag < 0:
            break  # (protobuf's own serialization: never malformed)
        if tag >> 3 != field.number:
            at = skip(data, tag & 7, at, end)
            continue
        if tag & 7 == LENGTH:
            length, at = varint(data, at, end)
        else:
            length = dtype.itemsize
        pieces.append(view[at : at + length])
        at += length
    if len(pieces) == 1:
        return np.frombuffer(pieces[0], dtype=dtype)
    if not pieces:  # unset: an empty repeated field, or a singular one's default
        repeated = getattr(field, "is_repeated", None)  # (protobuf 7; older ones have only ``label``)
        if repeated is None:
            repeated = field.label == field.LABEL_REPEATED
        return np.zeros(0, dtype) if repeated else np.array([field.default_value], dtype=dtype)
    return np.frombuffer(b"".join(pieces), dtype=dtype)


# --- many records of one message type, a field of each at a time --------------------------------------------------


def varints(source: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The varints at positions ``at`` of ``source`` (uint8): values, lengths, and which are valid (in the bytes,
    at most 9 bytes: below 2^63). Most are one byte; only the others take the longer way."""
    last = len(source) - 1
    inside = at <= last
    first = source[np.minimum(at, last)]
    values = first.astype(np.int64)
    lengths = np.ones(len(at), dtype=np.int64)
    long = np.flatnonzero(first >= 0x80)
    if long.size:
        window = source[np.minimum(at[long, None] + _TEN, last)].astype(np.int64)
        more = window >= 0x80
        stop = np.argmin(more, axis=1)  # the first byte without "more" (0 if all have it: caught below)
        valid = ~more[np.arange(long.size), stop] & (stop <= 8) & (at[long] + stop <= last)
        values[long] = (((window & 0x7F) << _SHIFTS) * (_TEN <= stop[:, None])).sum(axis=1)
        lengths[long] = stop + 1
        inside[long] &= valid
    return values, lengths, inside


class RecordWalk:
    """Walks many records of one message type together: each round reads the next field of every record still
    going. A malformed field or a record of more than MAX_ROUNDS fields marks the record ``broken``."""

    def __init__(self, source: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self._source = source
        self._pos = starts.copy()
        self._ends = ends
        self.broken = np.zeros(len(starts), dtype=bool)

    def rounds(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Per round: the records read (row numbers), their field numbers, wire types, values (VARINT and LENGTH:
        the varint, for LENGTH the length) and where the payload of a LENGTH field starts; malformed fields left
        out."""
        pos, ends, source = self._pos, self._ends, self._source
        for _ in range(MAX_ROUNDS):
            rows = np.flatnonzero(pos < ends)
            if not rows.size:
                return
            at = pos[rows]
            tags, tag_lengths, tags_ok = varints(source, at)
            at += tag_lengths
            values, value_lengths, values_ok = varints(source, at)
            wires = tags & 7
            payload = at + value_lengths
            after = np.where(wires == VARINT, payload, payload + values)
            after = np.where(wires == FIXED64, at + 8, np.where(wires == FIXED32, at + 4, after))
            end = ends[rows]
            ok = (
                tags_ok & (tags >= 8)
                & (((wires == VARINT) | (wires == LENGTH)) & values_ok | (wires == FIXED64) | (wires == FIXED32))
                & (after <= end) & (after >= at)  # (a huge length wraps below ``at``)
            )
            after[~ok] = end[~ok]
            self.broken[rows[~ok]] = True
            pos[rows] = after
            keep = np.flatnonzero(ok)
            yield rows[keep], tags[keep] >> 3, wires[keep], values[keep], payload[keep]
        self.broken |= pos < ends  # more fields than MAX_ROUNDS


def once(
    chosen: np.ndarray, rows: np.ndarray, fields: np.ndarray, values: np.ndarray, payload: np.ndarray,
    seen: np.ndarray, twice: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ``chosen`` fields of a round, which are singular ones (rows, field numbers, values, payload starts);
    records that had the field already are marked in ``twice`` (``seen`` keeps a bit per field number met)."""
    r, f, v, p = rows[chosen], fields[chosen], values[chosen], payload[chosen]
    bit = np.left_shift(1, f)
    twice[r[(seen[r] & bit) != 0]] = True
    seen[r] |= bit
    return r, f, v, p


def span_text(source: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[str | None]:
    """The UTF-8 text of each span: "" for a span of -1, None where it is not UTF-8."""
    n = len(starts)
    lengths = np.where(starts >= 0, ends - starts, 0)
    total = int(lengths.sum())
    if not total:
        return [""] * n
    # Gather the spans into one bytes object, each followed by a NUL, and split the decoded text at the NULs.
    before = np.cumsum(lengths) - lengths  # where each span's bytes begin among the spans' bytes
    within = np.arange(total, dtype=np.int64) - np.repeat(before, lengths)
    gathered = np.zeros(total + n, dtype=np.uint8)
    gathered[np.repeat(before + np.arange(n), lengths) + within] = source[np.repeat(starts, lengths) + within]
    blob = gathered.tobytes()
    if blob.count(0) == n:  # no NUL inside a span (UTF-8 never uses the byte 0 within a character)
        try:
            return list(blob.decode("utf-8").split("\x00")[:n])
        except UnicodeDecodeError:
            pass
    texts: list[str | None] = []
    for a, b in zip((before + np.arange(n)).tolist(), (before + np.arange(n) + lengths).tolist(), strict=True):
        try:
            texts.append(blob[a:b].decode("utf-8"))
        except UnicodeDecodeError:
            texts.append(None)
    return texts


def spans_equal(source: np.ndarray, starts: np.ndarray, ends: np.ndarray, text: bytes) -> np.ndarray:
    """Which spans hold exactly ``text`` (a span of -1: none)."""
    result = (ends - starts == len(text)) & (starts >= 0)
    rows = np.flatnonzero(result)
    if rows.size and text:
        window = source[starts[rows, None] + np.arange(len(text))]
        result[rows] = (window == np.frombuffer(text, dtype=np.uint8)).all(axis=1)
    return result
