"""An entry's ``consumers`` in a manifest: each read and checked by the rules of its manifest's format version
(docs/manifest.md, "Each of consumers" and the rules between fields), into the :class:`Consumer` records the layout
rules take.

    >>> consumers_from_json([{"node": "add", "op_type": "Add", "input": 1, "reads_on": "gpu",
    ...                       "dml_operator": "ELEMENT_WISE_ADD", "layout": "broadcast", "output_sizes": [2, 3]}],
    ...                     "entries[0].consumers", 7)[0].output_sizes
    (2, 3)
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, cast

from dmlbridge.errors import ManifestError
from dmlbridge.manifest.json_fields import Fields, int_list, kind_of, whole_number
from dmlbridge.model.consumers import (
    CHANNEL_DIMS,
    CONSUMER_DIMS_VERSION,
    CONSUMER_LAYOUTS_VERSION,
    MATRIX_PRODUCTS,
    MOST_CHANNEL_DIMS,
    PER_OPERATOR_VERSION,
    Consumer,
)
from dmlbridge.model.operators import layouts_of
from dmlbridge.placement.options import MAX_KEY_LENGTH

__all__ = ["consumers_from_json"]


def consumers_from_json(value: Any, where: str, version: int) -> tuple[Consumer, ...]:
    """An entry's ``consumers``; from format 5, ``dims`` on each per-channel input and on no other; from format 6,
    what each input of format 6's layouts records of its node (:func:`_layout_facts`); from format 7, where each is
    read and all its facts (:func:`_operator_facts`)."""
    if not isinstance(value, list) or len(value) > 1 << 20:
        raise ManifestError(f"{where} must be an array of at most 2^20 consumers, got {kind_of(value)}")
    required: tuple[str, ...] = ("node", "op_type", "input")
    optional: tuple[str, ...] = ("dims", "sizes") if version >= CONSUMER_LAYOUTS_VERSION else ("dims",) if \
        version >= CONSUMER_DIMS_VERSION else ()
    if version >= PER_OPERATOR_VERSION:
        required += ("reads_on",)
        optional = ("dml_operator", "layout", "dims", "output_sizes", "axis", "groups", "note")
    consumers = []
    for index, item in enumerate(value):
        fields = Fields(item, f"{where}[{index}]", required, optional)
        node, op_type = fields.string("node", nonempty=True), fields.string("op_type", nonempty=True)
        if len(node) > 4 * MAX_KEY_LENGTH or len(op_type) > MAX_KEY_LENGTH:
            raise ManifestError(f"{where}[{index}] has a node key or op type longer than the limits of keys")
        consumer = Consumer(node, op_type, fields.integer("input", 0, 2**31 - 1))
        what = f"{where}[{index}] ({op_type[:40]} input {consumer.input})"
        if version >= PER_OPERATOR_VERSION:
            consumer = _operator_facts(fields, consumer, what)
        elif version >= CONSUMER_LAYOUTS_VERSION:
            consumer = _layout_facts(fields, consumer, what)
        elif version >= CONSUMER_DIMS_VERSION and consumer.per_channel:
            if "dims" not in fields.value:
                raise ManifestError(f"{what} is a per-channel input and lacks the field 'dims' (format 5 records its "
                                    "node's dimension count)")
            consumer = consumer._replace(dims=fields.integer("dims", CHANNEL_DIMS, MOST_CHANNEL_DIMS))
        elif "dims" in fields.value:
            raise ManifestError(f"{what} has 'dims', which only a per-channel input has")
        consumers.append(consumer)
    return tuple(consumers)


_READS_ON = ("gpu", "cpu", "none")
_LAYOUTS = ("channel", "spatial", "rank", "broadcast", "axis", "rnn", "group")
_OPERATOR_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
_MOST_NOTE = 1024  # characters: a consumer's note is one of dmlbridge's sentences


def _operator_facts(fields: Fields, consumer: Consumer, what: str) -> Consumer:
    """A format-7 consumer's ``reads_on`` and, for a bound one, its operator, its layout and the facts the layout
    needs: ``dims`` (1 to 8), ``output_sizes`` (1 to 8 sizes of at most 2^32 - 1 elements in all), ``axis``
    (one of them) and ``groups`` (a GroupNorm's, beside its output_sizes); none of those on an input not bound."""
    reads_on = fields.string("reads_on")
    if reads_on not in _READS_ON:
        raise ManifestError(f"{fields.at('reads_on')} is {json.dumps(reads_on)[:40]}, not one of "
                            f"{', '.join(_READS_ON)}")
    note = fields.string("note", nullable=True) if "note" in fields.value else None
    if note is not None and not 0 < len(note) <= _MOST_NOTE:
        raise ManifestError(f"{fields.at('note')} must be a sentence of 1 to {_MOST_NOTE} characters")
    if reads_on != "gpu":
        extra = [name for name in ("dml_operator", "layout", "dims", "output_sizes", "axis", "groups")
                 if name in fields.value]
        if extra:
            raise ManifestError(f"{what} is read on {reads_on} and has {extra[0]!r}, which only a bound input has")
        return consumer._replace(reads_on=reads_on, note=note)
    operator = fields.string("dml_operator", nullable=True) if "dml_operator" in fields.value else None
    if operator is not None and not _OPERATOR_NAME.match(operator):
        raise ManifestError(f"{fields.at('dml_operator')} is {json.dumps(operator)[:80]}, not a DML_OPERATOR_TYPE "
                            "name without its prefix")
    layout = fields.string("layout") if "layout" in fields.value else None
    if layout is not None and layout not in _LAYOUTS:
        raise ManifestError(f"{fields.at('layout')} is {json.dumps(layout)[:40]}, not one of {', '.join(_LAYOUTS)}")
    dims = fields.integer("dims", 1, MOST_CHANNEL_DIMS) if "dims" in fields.value else None
    sizes = named = None
    sizes_of: tuple[int | str, ...] = ()
    if "output_sizes" in fields.value:
        named = _named_sizes(fields.get("output_sizes"), fields.at("output_sizes"))
        given = [size for size in named if isinstance(size, int)]
        if not named or math.prod(given) > _MOST_ELEMENTS:
            raise ManifestError(f"{fields.at('output_sizes')} must be 1 to {MOST_CHANNEL_DIMS} sizes of at most "
                                f"2^32 - 1 elements in all, got {list(named)[:10]}")
        if len(given) == len(named):
            sizes, named = cast(tuple[int, ...], named), None
        elif layout not in ("broadcast", "axis") or (consumer.op_type in MATRIX_PRODUCTS and dims is None):
            raise ManifestError(f"{fields.at('output_sizes')} names a free dimension, which only an element-wise "
                                "operand, a Gemm's C, a MatMul's B (beside its dims) or a per-axis scale records")
        sizes_of = sizes if sizes is not None else cast(tuple[int | str, ...], named)
    axis = None
    if "axis" in fields.value:
        axis = fields.integer("axis", 0, MOST_CHANNEL_DIMS - 1)
        if axis >= len(sizes_of):
            raise ManifestError(f"{fields.at('axis')} {axis} is not an axis of its output_sizes")
    groups = None
    if "groups" in fields.value:
        groups = fields.integer("groups", 1, _MOST_ELEMENTS)
        if layout != "group":
            raise ManifestError(f"{what} has 'groups', which only a GroupNorm's gamma and beta (layout \"group\") "
                                "record")
    if layout == "group" and (sizes is None) != (groups is None):
        raise ManifestError(f"{what} has layout \"group\" with {'groups' if sizes is None else 'output_sizes'} "
                            f"but no {'output_sizes' if sizes is None else 'groups'}: format 7 records both or neither")
    if layout is None and (dims is not None or sizes is not None or named is not None):
        raise ManifestError(f"{what} has facts of a layout but no 'layout'")
    known = layouts_of(consumer.op_type, consumer.input)
    if known is not None and layout not in known:
        raise ManifestError(f"{what} has layout {json.dumps(layout)}, which dmlbridge's operator table does not "
                            f"give this input (it gives {sorted(map(json.dumps, known - {None}))} or none)")
    if layout in ("channel", "spatial") and (dims is None or dims < CHANNEL_DIMS):
        raise ManifestError(f"{what} lacks the field 'dims' or has fewer than {CHANNEL_DIMS} (format 7 records the "
                            "dimension count of a convolution's or normalization's node, 4 to 8)")
    return consumer._replace(dims=dims, output_sizes=sizes, reads_on="gpu", dml_operator=operator,
                             layout=cast(Any, layout), axis=axis, note=note, named_sizes=named, groups=groups)


def _named_sizes(value: Any, where: str) -> tuple[int | str, ...]:
    """``output_sizes``: 1 to 8 items, each a size (1 to 2^32 - 1) or a free dimension's dim_param name (1 to
    MAX_KEY_LENGTH characters)."""
    if not isinstance(value, list) or len(value) > MOST_CHANNEL_DIMS:
        raise ManifestError(f"{where} must be an array of at most {MOST_CHANNEL_DIMS} sizes or dim_param names, got "
                            f"{kind_of(value)}")
    items: list[int | str] = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            if not 0 < len(item) <= MAX_KEY_LENGTH:
                raise ManifestError(f"{where}[{index}] must be a dim_param name of 1 to {MAX_KEY_LENGTH} characters")
            items.append(item)
        else:
            items.append(whole_number(item, f"{where}[{index}]", 1, _MOST_ELEMENTS))
    return tuple(items)


_MOST_ELEMENTS = 2**32 - 1


def _layout_facts(fields: Fields, consumer: Consumer, what: str) -> Consumer:
    """A format-6 consumer's ``dims`` and ``sizes``: ``dims`` (4 to 8) on each convolution and normalization
    input of format 6's layouts, ``dims`` (1 to 8) or nothing on a Gather's data, ``sizes`` (2) or nothing on a Gemm's
    C, ``sizes`` (2 to 8) or ``dims`` (2 to 8) or neither on a MatMul's B, and neither on any other input."""
    kind = consumer.layout_rule(CONSUMER_LAYOUTS_VERSION)
    has_dims, has_sizes = "dims" in fields.value, "sizes" in fields.value
    dims = sizes = None
    if kind in ("channel", "spatial"):
        if not has_dims:
            raise ManifestError(f"{what} lacks the field 'dims' (format 6 records the dimension count of a "
                                "convolution's or normalization's node)")
        dims = fields.integer("dims", CHANNEL_DIMS, MOST_CHANNEL_DIMS)
    elif kind == "rank" and has_dims:
        dims = fields.integer("dims", 1, MOST_CHANNEL_DIMS)
    elif kind == "broadcast" and has_dims and has_sizes:
        raise ManifestError(f"{what} has both 'dims' and 'sizes'; a MatMul's B records its sizes, or where the model "
                            "does not give them the output's rank")
    elif kind == "broadcast" and consumer.op_type == "MatMul" and has_dims:
        dims = fields.integer("dims", 2, MOST_CHANNEL_DIMS)
    elif kind == "broadcast" and has_sizes:
        count = (2, 2) if consumer.op_type == "Gemm" else (2, MOST_CHANNEL_DIMS)
        sizes = int_list(fields.get("sizes"), fields.at("sizes"), 1, _MOST_ELEMENTS, count[1])
        if not count[0] <= len(sizes) <= count[1] or math.prod(sizes) > _MOST_ELEMENTS:
            raise ManifestError(f"{fields.at('sizes')} must be {count[0]} to {count[1]} sizes of at most 2^32 - 1 "
                                f"elements in all, got {list(sizes)[:10]}")
    if (has_dims and dims is None) or (has_sizes and sizes is None):
        extra = "sizes" if has_sizes and sizes is None else "dims"
        raise ManifestError(f"{what} has '{extra}', which this input does not record")
    return consumer._replace(dims=dims, output_sizes=sizes)
