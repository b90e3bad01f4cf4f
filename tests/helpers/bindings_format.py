"""An independent reader and writer of the binding list (docs/bindings.md), written from the spec alone: the tests
hold dmlbridge's writer to it, and the DirectML suite writes lists of its own descs with it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote_to_bytes

DML_TYPES = ("UNKNOWN", "FLOAT32", "FLOAT16", "UINT32", "UINT16", "UINT8", "INT32", "INT16", "INT8", "FLOAT64",
             "UINT64", "INT64", "UINT4", "INT4")  # DML_TENSOR_DATA_TYPE values 0 to 13, from DirectML.h


@dataclass(frozen=True)
class Desc:
    data_type: str
    flags: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...] | None
    total: int
    alignment: int


@dataclass(frozen=True)
class Line:
    kind: str  # "tensor" or "part"
    key: str
    buffer: int
    offset: int
    desc: Desc
    record: str | None = None
    form: str | None = None
    role: str | None = None
    reads_on: str | None = None  # a tensor's: "gpu", "cpu" or "none"

    @property
    def name(self) -> str:
        """How the upload program names the line: a tensor's encoded key, a part's RECORD/FORM/ROLE."""
        return encode(self.key) if self.kind == "tensor" else f"{encode(self.record or '')}/{self.form}/{self.role}"


@dataclass(frozen=True)
class ConsumerLine:
    key: str
    index: int  # its position in the manifest's consumers of the entry
    node: str
    input: int
    operator: str | None
    desc: Desc | None  # None: "-", sizes the model leaves undecided
    buffer: int  # (its tensor's)
    offset: int

    @property
    def name(self) -> str:
        """How the upload program names the line: the encoded key, # and the index."""
        return f"{encode(self.key)}#{self.index}"


@dataclass(frozen=True)
class BindingList:
    target: str
    buffers: list[tuple[str, int]]
    lines: list[Line]
    operators: dict[str, str]  # RECORD -> OPERATOR, from the quantized lines
    uploads: list[str]  # each buffer's UPLOAD: "gpu" or "cpu"
    consumers: list[ConsumerLine]


def encode(text: str) -> str:
    return quote(text.encode("utf-8", "surrogatepass"), safe="-._~/:")


def decode(text: str) -> str:
    assert re.fullmatch(r"(?:[A-Za-z0-9\-._~/:]|%[0-9A-F]{2})+", text), text
    return unquote_to_bytes(text).decode("utf-8", "surrogatepass")


def _numbers(text: str) -> tuple[int, ...]:
    assert re.fullmatch(r"\d+(,\d+)*", text), text
    return tuple(int(v) for v in text.split(","))


def _desc(fields: list[str]) -> Desc:
    data_type, flags, count, sizes, strides, total, alignment = fields
    assert data_type in DML_TYPES[1:], data_type
    parsed_sizes = _numbers(sizes)
    parsed_strides = None if strides == "-" else _numbers(strides)
    assert int(count) == len(parsed_sizes) and (parsed_strides is None or len(parsed_strides) == len(parsed_sizes))
    return Desc(data_type, int(flags), parsed_sizes, parsed_strides, int(total), int(alignment))


def parse(text: str) -> BindingList:
    """Parse and check a binding list by the spec; AssertionError for anything it forbids."""
    assert text.endswith("\n") and text.isascii()
    rows = [row for row in text[:-1].split("\n") if not row.startswith("#")]
    assert rows[0] == "dmlbridge-bindings 2"
    kind, target = rows[1].split(" ")
    assert kind == "target" and re.fullmatch(r"\d\.\d", target)
    buffers: list[tuple[str, int]] = []
    uploads: list[str] = []
    lines: list[Line] = []
    operators: dict[str, str] = {}
    consumers: list[ConsumerLine] = []
    previous = ""  # the kind of the line before
    for row in rows[2:]:
        fields = row.split(" ")
        if fields[0] == "buffer":
            assert not lines and len(fields) == 5 and int(fields[1]) == len(buffers)
            assert fields[4] in ("gpu", "cpu") and (fields[4] == "cpu" or "cpu" not in uploads), "cpu before gpu"
            buffers.append((decode(fields[2]), int(fields[3])))
            uploads.append(fields[4])
        elif fields[0] == "tensor":
            assert len(fields) == 12 and fields[11] in ("gpu", "cpu", "none")
            line = Line("tensor", decode(fields[1]), int(fields[2]), int(fields[3]), _desc(fields[4:11]),
                        reads_on=fields[11])
            assert 0 <= line.buffer < len(buffers)
            assert uploads[line.buffer] == "gpu" or line.reads_on == "cpu", "a tensor in a cpu buffer not cpu"
            lines.append(line)
        elif fields[0] == "consumer":
            assert len(fields) in (7, 13) and (len(fields) == 7) == (fields[6] == "-")
            assert previous in ("tensor", "consumer"), "a consumer line not after its tensor's"
            tensor = lines[-1]
            assert decode(fields[1]) == tensor.key and tensor.reads_on == "gpu"
            index = int(fields[2])
            assert not consumers or consumers[-1].key != tensor.key or previous == "tensor" \
                or consumers[-1].index < index
            assert re.fullmatch(r"\d+", fields[4]) and re.fullmatch(r"[A-Z0-9_]+|-", fields[5])
            consumers.append(ConsumerLine(tensor.key, index, decode(fields[3]), int(fields[4]),
                                          None if fields[5] == "-" else fields[5],
                                          None if len(fields) == 7 else _desc(fields[6:]), tensor.buffer,
                                          tensor.offset))
        elif fields[0] == "quantized":
            assert len(fields) == 3 and decode(fields[1]) not in operators
            assert fields[2] in ("DEQUANTIZE", "ELEMENT_WISE_DEQUANTIZE_LINEAR", "-"), fields[2]
            operators[decode(fields[1])] = fields[2]
        elif fields[0] == "part":
            assert len(fields) == 14 and fields[2] in ("split", "blocked")
            assert decode(fields[1]) in operators, "a part before its quantized line"
            assert fields[3] in ("weight", "scales", "zero_points")
            lines.append(Line("part", decode(fields[4]), int(fields[5]), int(fields[6]), _desc(fields[7:]),
                              decode(fields[1]), fields[2], fields[3]))
        else:
            raise AssertionError(f"unknown line {row!r}")
        previous = fields[0]
    parts = [line for line in lines if line.kind == "part"]
    for i in range(0, len(parts), 3):  # the three lines of a form follow each other, weight first
        group = parts[i : i + 3]
        assert [p.role for p in group] == ["weight", "scales", "zero_points"]
        assert len({(p.record, p.form) for p in group}) == 1
    for line in [*lines, *consumers]:
        assert 0 <= line.buffer < len(buffers)
        if line.desc is not None:
            assert line.offset % 16 == 0 and line.offset + line.desc.total <= buffers[line.buffer][1]
            assert not line.desc.alignment or line.offset % line.desc.alignment == 0
    return BindingList(target, buffers, lines, operators, uploads, consumers)


def desc_fields(data_type: str, sizes: tuple[int, ...], strides: tuple[int, ...] | None, total: int,
                flags: int = 0, alignment: int = 0) -> str:
    """The seven desc fields of a line."""
    numbers = ",".join(map(str, sizes))
    return (f"{data_type} {flags} {len(sizes)} {numbers} {'-' if strides is None else ','.join(map(str, strides))} "
            f"{total} {alignment}")


HEADER = "dmlbridge-bindings 2"


def write(buffers: list[tuple[str, int]], tensors: list[tuple[str, int, int, str]], target: str = "6.4") -> str:
    """A binding list of ``buffers`` (file, size; each uploaded) and ``tensors`` (key, buffer, offset, desc
    fields; each read on the GPU)."""
    rows = [HEADER, f"target {target}"]
    rows += [f"buffer {i} {encode(file)} {size} gpu" for i, (file, size) in enumerate(buffers)]
    rows += [f"tensor {encode(key)} {buffer} {offset} {fields} gpu" for key, buffer, offset, fields in tensors]
    return "\n".join(rows) + "\n"
