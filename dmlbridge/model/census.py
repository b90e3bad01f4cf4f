"""Counting a model's constants from its bytes, before protobuf parses them: what a conversion's memory grows with.

A conversion holds a record per constant of the model (its place in the plan, its key and origin, protobuf's
parsed message), so its memory grows with their number, and with how deep the subgraphs around them are nested: a
constant's key and origin name every node and attribute around it. :func:`count_constants` counts them from the
serialized model with numpy, one level of subgraphs at a time, before anything per constant is allocated (protobuf's
parsed model alone takes about 250 bytes a constant), so that ``model_limits.check_count`` refuses a model over
the caller's limits first. It counts the nodes too: protobuf's parsed model takes about 360 bytes a node, whatever the
node (an Identity node of short names; more for a node of long names or many attributes), and a file of 23 bytes a
node may hold millions: given ``max_nodes``, the count stops at the level of subgraphs that passes it, before that
level's nodes are read, so that refusing such a model takes no memory per node.

What it reads (onnx.proto's field numbers; ``tests/model/test_census.py`` checks them against onnx's descriptors):

- ModelProto: ``graph`` (7), ``training_info`` (20), ``functions`` (25);
- TrainingInfoProto: ``initialization`` (1), ``algorithm`` (2);
- GraphProto: ``node`` (1), ``initializer`` (5), ``sparse_initializer`` (15);
- FunctionProto: ``node`` (7), ``attribute_proto`` (11);
- NodeProto: ``name`` (3), ``op_type`` (4), ``attribute`` (5), ``domain`` (7);
- AttributeProto: ``name`` (1), ``g`` (6), ``graphs`` (11).

A constant here is an initializer, a sparse initializer or a Constant node of the ONNX domain, in the main graph,
a subgraph at any depth or a function: what :func:`dmlbridge.model.constants.find_constants` finds, or a few more
(a function's Constant whose value is a reference to the caller's attribute has none). The graphs of
``training_info`` and the graphs of a function's attribute defaults are not converted, but protobuf parses them
all the same: their nodes count among the nodes, and their constants, counted apart
(``ConstantCount.apart``), among the constants ``max_constants`` holds to. A message that occurs
twice is counted twice, as protobuf merges it (its repeated fields joined). Each key is at least its scope and a
character, each origin at least ``initializer`` and the scope: ``ConstantCount.name_chars`` is a lower bound
of what their manifest lines hold.

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper
    >>> inner = helper.make_graph([], "then", [], [], [numpy_helper.from_array(np.ones(1, np.float32), "t")])
    >>> node = helper.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=inner)
    >>> w = numpy_helper.from_array(np.ones(1, np.float32), "w")
    >>> count = count_constants(helper.make_model(helper.make_graph([node], "g", [], [], [w])).SerializeToString())
    >>> count.total, count.in_subgraphs, count.depth, count.busiest
    (3, 2, 1, 'If_0')
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import IntEnum
from typing import NamedTuple

import numpy as np

from dmlbridge.model.model_limits import ConstantCount
from dmlbridge.onnx.wire import (
    FIXED32,
    FIXED64,
    LENGTH,
    VARINT,
    RecordWalk,
    field_position_runs,
    read_tag,
    span_text,
    spans_equal,
    varint,
    varints,
)

__all__ = ["AttributeField", "GraphField", "ModelField", "NodeField", "TrainingInfoField", "count_constants"]


_MOST_LEVELS = 100  # protobuf parses no deeper nesting; constants.py refuses subgraphs nested deeper than 64
_RUN = 1 << 20  # fields of one message read at a time (a main graph may have millions)


class ModelField(IntEnum):
    GRAPH = 7
    TRAINING_INFO = 20
    FUNCTIONS = 25


class TrainingInfoField(IntEnum):
    INITIALIZATION = 1
    ALGORITHM = 2


class GraphField(IntEnum):
    NODE = 1
    INITIALIZER = 5
    SPARSE_INITIALIZER = 15


FUNCTION_NODE = 7  # FunctionProto.node
FUNCTION_ATTRIBUTE_PROTO = 11  # FunctionProto.attribute_proto: attributes' defaults, which may hold graphs


class NodeField(IntEnum):
    NAME = 3
    OP_TYPE = 4
    ATTRIBUTE = 5
    DOMAIN = 7


class AttributeField(IntEnum):
    NAME = 1
    G = 6
    GRAPHS = 11


# --- text models ----------------------------------------------------------------------------------------------


# --- the walk ---------------------------------------------------------------------------------------------------


class _Fields(NamedTuple):
    """Every field of some records: its record (row), number, wire type, value (the length of a LENGTH field)
    and where its payload starts."""

    rows: np.ndarray
    numbers: np.ndarray
    wires: np.ndarray
    values: np.ndarray
    payload: np.ndarray

    def spans(self, number: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows, starts and ends of field ``number``'s LENGTH occurrences, in order."""
        chosen = (self.numbers == number) & (self.wires == LENGTH)
        return self.rows[chosen], self.payload[chosen], self.payload[chosen] + self.values[chosen]

    def last_span(self, number: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Per record, the start and end of field ``number``'s last LENGTH occurrence (-1, -1 where none): the
        one protobuf keeps of a singular field."""
        rows, starts, ends = self.spans(number)
        last = np.r_[rows[1:] != rows[:-1], True] if len(rows) else np.zeros(0, dtype=bool)
        first, stop = np.full(count, -1, dtype=np.int64), np.full(count, -1, dtype=np.int64)
        first[rows[last]], stop[rows[last]] = starts[last], ends[last]
        return first, stop


def _walk_one(data: bytes, at: int, end: int) -> Iterator[_Fields | None]:
    """The fields of the message in data[at:end], read one at a time, _RUN at a time: 10-byte varints (negative
    integers) and groups (skipped) included, which the numpy walk leaves out; a None run last when the bytes
    are not a protobuf message."""
    while at < end:
        fields: list[tuple[int, int, int, int]] = []
        while at < end and len(fields) < _RUN:
            tag, at = read_tag(data, at, end)
            if tag < 8:
                yield None
                return
            number, wire = tag >> 3, tag & 7
            value, payload = 0, at
            if wire == VARINT:
                value, at = varint(data, at, end)
                value = min(value, 0)  # (-1: malformed; a value is never used)
            elif wire == LENGTH:
                value, payload = varint(data, at, end)
                at = payload + value
            elif wire in (FIXED64, FIXED32):
                at += 8 if wire == FIXED64 else 4
            elif wire == 3:  # a group: skipped to its end tag
                at = _skip_group(data, at, end, number)
            else:
                yield None
                return
            if value < 0 or at > end:
                yield None
                return
            fields.append((number, wire, value, payload))
        columns = np.array(fields, dtype=np.int64).reshape(-1, 4).T
        yield _Fields(np.zeros(len(fields), dtype=np.int64), *columns)


def _skip_group(data: bytes, at: int, end: int, number: int) -> int:
    """Where the group of field ``number`` that starts at ``at`` ends (after its end tag); end + 1 if never, or
    when groups nest more than _MOST_LEVELS deep in it (protobuf parses no deeper nesting). One loop and a stack of
    the open groups' numbers: a model of nested groups never recurses."""
    open_groups = [number]
    while at < end:
        tag, at = read_tag(data, at, end)
        if tag < 8:
            return end + 1
        wire = tag & 7
        if wire == 4:
            if tag >> 3 != open_groups.pop():
                return end + 1
            if not open_groups:
                return at
        elif wire == VARINT:
            at = varint(data, at, end)[1]
        elif wire == LENGTH:
            length, at = varint(data, at, end)
            at = at + length if length >= 0 else end + 1
        elif wire in (FIXED64, FIXED32):
            at += 8 if wire == FIXED64 else 4
        elif wire == 3:
            if len(open_groups) >= _MOST_LEVELS:
                return end + 1
            open_groups.append(tag >> 3)
        else:
            return end + 1
    return end + 1


class _Read(NamedTuple):
    """What was read of some records: the LENGTH fields asked for, record by record and each record's in order;
    per number counted, how many LENGTH fields of it each record has; and, for the records that were walked one
    field at a time (those of many fields), where each of their fields begins."""

    fields: _Fields
    counts: dict[int, np.ndarray]
    positions: dict[int, np.ndarray]
    over: bool = False  # more than ``most`` fields wanted: some were not kept


def _fields(
    data: bytes, source: np.ndarray, starts: np.ndarray, ends: np.ndarray, wanted: tuple[int, ...],
    counted: tuple[int, ...] = (), *, large: bool | np.ndarray = False, with_positions: bool = False,
    most: int | None = None,
) -> _Read | None:
    """The fields ``wanted`` of the records data[starts[i]:ends[i]] (LENGTH ones: spans), and the number of
    those ``counted``: read together with numpy, and one record at a time those numpy leaves (more than
    MAX_ROUNDS fields, 10-byte varints, groups), or all of them when they are ``large`` (a main graph; or a mask of
    the records that are). Only what
    is asked for is kept: a level of subgraphs may hold millions of fields. ``most``: of the records read one at a
    time, keep no more than this many fields ``wanted`` (once past it, they are only counted: the caller refuses
    the model by the counts and reads no field). None when a record is not a message."""
    count = len(starts)
    counts = {number: np.zeros(count, dtype=np.int64) for number in counted}
    pieces: list[tuple[np.ndarray, ...]] = []

    def keep(rows: np.ndarray, numbers: np.ndarray, wires: np.ndarray, values: np.ndarray,
             payload: np.ndarray) -> None:
        length = wires == LENGTH
        for number in counted:
            counts[number] += np.bincount(rows[length & (numbers == number)], minlength=count)
        chosen = np.zeros(len(rows), dtype=bool)
        for number in wanted:
            chosen |= numbers == number
        chosen &= length
        pieces.append((rows[chosen], numbers[chosen], wires[chosen], values[chosen], payload[chosen]))

    if large is True:
        broken = np.ones(count, dtype=bool)
    else:
        walk = RecordWalk(source, starts, ends)
        for fields in walk.rounds():
            keep(*fields)
        broken = walk.broken if large is False else walk.broken | large
    positions: dict[int, np.ndarray] = {}
    kept = 0  # fields wanted, of the records read one at a time
    if broken.any():
        for number in counted:
            counts[number][broken] = 0
        pieces = [tuple(column[~broken[piece[0]]] for column in piece) for piece in pieces]
        for row in np.flatnonzero(broken).tolist():
            read = _message_fields(data, source, int(starts[row]), int(ends[row]), wanted, counted, with_positions,
                                   None if most is None else max(most - kept, -1))
            if read is None:
                return None
            fields, row_counts, where, over = read
            kept = (most or 0) + 1 if over else kept + len(fields.rows)
            pieces.append((np.full(len(fields.rows), row, dtype=np.int64), *fields[1:]))
            for number, many in row_counts.items():
                counts[number][row] = many
            if where is not None:
                positions[row] = where
    if not pieces:
        empty = np.zeros(0, dtype=np.int64)
        return _Read(_Fields(empty, empty, empty, empty, empty), counts, positions, most is not None and kept > most)
    fields = _Fields(*(np.concatenate([piece[k] for piece in pieces]) for k in range(5)))
    if len(pieces) > 1:  # record by record, each in its order: a round holds a field of each record, in order
        order = np.argsort(fields.rows, kind="stable")
        fields = _Fields(*(column[order] for column in fields))
    return _Read(fields, counts, positions, most is not None and kept > most)


def _message_fields(
    data: bytes, source: np.ndarray, at: int, end: int, wanted: tuple[int, ...], counted: tuple[int, ...],
    with_positions: bool, most: int | None = None,
) -> tuple[_Fields, dict[int, int], np.ndarray | None, bool] | None:
    """The fields ``wanted`` of one message of many fields (a main graph: one per node and initializer), the
    number of those ``counted``, and (``with_positions``) where each field begins; read _RUN fields at a time,
    with numpy, or one at a time where it has an oddity. Past ``most`` fields wanted, none is kept (none is
    returned, and the last item says so) and the rest are only counted. None when it is not a message."""
    for fast in (True, False):
        kept: list[_Fields] = []
        counts = dict.fromkeys(counted, 0)
        runs: list[np.ndarray] = []
        many = 0  # fields wanted so far
        for fields in _fast_runs(data, source, at, end, runs) if fast else _walk_one(data, at, end):
            if fields is None:
                break
            length = fields.wires == LENGTH
            for number in counted:
                counts[number] += int(np.count_nonzero(length & (fields.numbers == number)))
            chosen = np.zeros(len(fields.rows), dtype=bool)
            for number in wanted:
                chosen |= fields.numbers == number
            chosen &= length
            many += int(np.count_nonzero(chosen))
            if most is not None and many > most:  # (too many: what was kept goes, and nothing more is)
                kept.clear()
                runs.clear()
                continue
            kept.append(_Fields(*(column[chosen] for column in fields)))
        else:
            joined = _Fields(*(np.concatenate([piece[k] for piece in kept]) for k in range(5))) if kept else (
                _Fields(*[np.zeros(0, dtype=np.int64)] * 5))
            where = (np.concatenate(runs) if runs else np.zeros(0, dtype=np.int64)) if with_positions and fast else None
            return joined, counts, where, most is not None and many > most
    return None


def _fast_runs(data: bytes, source: np.ndarray, at: int, end: int, runs: list[np.ndarray]) -> Iterator[_Fields | None]:
    """The fields of one message, _RUN at a time, read with numpy from where each begins (appended to ``runs``);
    a None run last where the message has a field numpy does not read (a 10-byte varint, a group)."""
    for positions in field_position_runs(data, at, end, _RUN):
        if positions is None:
            yield None
            return
        tags, tag_lengths, _ = varints(source, positions)
        values, value_lengths, _ = varints(source, positions + tag_lengths)
        wires = tags & 7
        values = np.where(wires == LENGTH, values, 0)  # (only lengths are used)
        runs.append(positions)
        yield _Fields(np.zeros(len(positions), dtype=np.int64), tags >> 3, wires, values,
                      positions + tag_lengths + value_lengths)


def _digits(values: np.ndarray) -> np.ndarray:
    """The decimal digits of each non-negative integer."""
    return 1 + sum((values >= 10**k).astype(np.int64) for k in range(1, 19))


class _Level(NamedTuple):
    """The graphs (or functions' node lists) of one level: their spans, which field holds their nodes, their
    scope's length, the main-graph node they are under (-1: none) and whether they are apart (not converted)."""

    starts: np.ndarray
    ends: np.ndarray
    node_field: np.ndarray
    scope: np.ndarray
    root: np.ndarray
    apart: np.ndarray


def _empty_level() -> _Level:
    empty = np.zeros(0, dtype=np.int64)
    return _Level(empty, empty, empty, empty, empty, np.zeros(0, dtype=bool))


def count_constants(data: bytes, graph_fields: bool = True, max_nodes: int | None = None) -> ConstantCount | None:
    """The constants of the serialized ModelProto ``data`` (see the module docstring); None when the bytes are not
    a protobuf message as this module reads one. ``graph_fields``: keep where each field of the main graph begins
    (8 bytes a field), for the byte scan. ``max_nodes``: stop at the first level of subgraphs that takes the nodes
    past it, before its nodes are read (the count is then ``nodes_partial``): the count's own memory stays within
    what the limit allows, whatever the model holds."""
    source = np.frombuffer(data, dtype=np.uint8)
    read = _message_fields(data, source, 0, len(data),
                           (ModelField.GRAPH, ModelField.FUNCTIONS, ModelField.TRAINING_INFO), (), False)
    if read is None:
        return None
    top = read[0]
    _, graph_starts, graph_ends = top.spans(ModelField.GRAPH)
    _, function_starts, function_ends = top.spans(ModelField.FUNCTIONS)
    _, training_starts, training_ends = top.spans(ModelField.TRAINING_INFO)
    training = _fields(data, source, training_starts, training_ends,
                       (TrainingInfoField.INITIALIZATION, TrainingInfoField.ALGORITHM))
    if training is None:
        return None
    apart_starts, apart_ends = training.fields.payload, training.fields.payload + training.fields.values
    starts = np.concatenate([graph_starts, function_starts, apart_starts])
    ends = np.concatenate([graph_ends, function_ends, apart_ends])
    kinds = np.r_[np.full(len(graph_starts), GraphField.NODE), np.full(len(function_starts), FUNCTION_NODE),
                  np.full(len(apart_starts), GraphField.NODE)]
    # (A function's scope is functions/DOMAIN/NAME: at least 11 characters.)
    scope = np.r_[np.zeros(len(graph_starts), np.int64), np.full(len(function_starts), 11, np.int64),
                  np.zeros(len(apart_starts), np.int64)]
    apart = np.r_[np.zeros(len(graph_starts) + len(function_starts), dtype=bool), np.ones(len(apart_starts), bool)]
    level = _Level(starts, ends, kinds.astype(np.int64), scope, np.full(len(starts), -1, dtype=np.int64), apart)
    total = in_subgraphs = depth = name_chars = apart_total = 0
    node_total = node_subgraphs = node_depth = nodes_apart = 0
    main_fields = None
    under = np.zeros(0, dtype=np.int64)  # constants under each main-graph node
    main_nodes: tuple[np.ndarray, ...] = ()  # the main graph's nodes: their spans, op types and indices
    for depth_now in range(_MOST_LEVELS):
        if not len(level.starts):
            break
        counted = _count_level(data, source, level, depth_now == 0 and len(graph_starts) == 1, graph_fields,
                               None if max_nodes is None else max_nodes - node_total)
        if counted is None:
            return None
        if isinstance(counted, _Over):  # (more nodes than max_nodes: refused by them alone)
            subgraphs = counted.nodes if depth_now else 0
            return ConstantCount(total, in_subgraphs, depth, name_chars, None, 0, None, node_total + counted.nodes,
                                 node_subgraphs + subgraphs, depth_now if subgraphs else node_depth, True,
                                 apart_total, nodes_apart + counted.apart)
        per_graph, children, nodes, positions, apart_here = counted
        node_total += len(nodes[0])
        nodes_apart += apart_here
        if depth_now > 0 and len(nodes[0]):
            node_subgraphs += len(nodes[0])
            node_depth = depth_now
        if depth_now == 0:
            main_fields, main_nodes = positions, nodes
            under = np.zeros(max(len(nodes[0]), 1), dtype=np.int64)
        apart_total += int(per_graph[level.apart].sum())
        per_graph = np.where(level.apart, 0, per_graph)
        here = int(per_graph.sum())
        total += here
        scope = level.scope
        key_least = np.where(scope > 0, scope + 2, 1)
        origin_least = 11 + np.where(scope > 0, scope + 4, 0)
        name_chars += int((per_graph * (key_least + origin_least)).sum())
        if depth_now > 0 and here:
            in_subgraphs += here
            depth = depth_now
            rooted = level.root >= 0
            np.add.at(under, level.root[rooted], per_graph[rooted])
        level = children
    busiest, most = None, 0
    if in_subgraphs and under.size:
        node = int(np.argmax(under))
        most = int(under[node])
        busiest = _node_label(data, source, main_nodes, node)
    return ConstantCount(total, in_subgraphs, depth, name_chars, busiest, most, main_fields, node_total,
                         node_subgraphs, node_depth, False, apart_total, nodes_apart)


class _Over(NamedTuple):
    """A level of more nodes than the count may read: how many, and how many of them are in graphs apart."""

    nodes: int
    apart: int


def _count_level(
    data: bytes, source: np.ndarray, level: _Level, main: bool, graph_fields: bool, most: int | None
) -> tuple[np.ndarray, _Level, tuple[np.ndarray, ...], np.ndarray | None, int] | _Over | None:
    """The constants of each graph of ``level``, the graphs of the next level, this level's nodes (their spans,
    op_type spans and index in their graph), for the one main graph where its fields begin, and how many of the
    nodes are in graphs apart; or, when the level holds more than ``most`` nodes, how many, and how many of them
    apart (its nodes not read)."""
    count = len(level.starts)
    is_graph = level.node_field == GraphField.NODE

    # (The main graph is read field by field, the other graphs of its level, if any, as every level's are.)
    large = (np.arange(count) == 0) if main and count > 1 else main

    def graph_fields_within(limit: int | None) -> _Read | None:
        return _fields(data, source, level.starts, level.ends, (GraphField.NODE, FUNCTION_NODE),
                       (GraphField.INITIALIZER, GraphField.SPARSE_INITIALIZER, GraphField.NODE, FUNCTION_NODE),
                       large=large, with_positions=main and graph_fields, most=limit)

    read = graph_fields_within(most)
    if read is None:
        return None
    per_graph_nodes = np.where(is_graph, read.counts[GraphField.NODE], read.counts[FUNCTION_NODE])
    level_nodes = int(per_graph_nodes.sum())
    apart_nodes = int(per_graph_nodes[level.apart].sum())
    if most is not None and level_nodes > most:
        return _Over(level_nodes, apart_nodes)
    if read.over:  # (the fields kept passed ``most``, a function's names among them, but its nodes did not)
        read = graph_fields_within(None)
        if read is None:
            return None
    graphs = read.fields
    positions = read.positions.get(0) if main else None
    per_graph = np.where(is_graph, read.counts[GraphField.INITIALIZER] + read.counts[GraphField.SPARSE_INITIALIZER],
                         0)
    chosen = graphs.numbers == level.node_field[graphs.rows]
    node_graph, node_starts = graphs.rows[chosen], graphs.payload[chosen]
    node_ends = node_starts + graphs.values[chosen]
    first_of_graph = np.searchsorted(node_graph, np.arange(count))
    node_index = np.arange(len(node_graph)) - first_of_graph[node_graph]
    read = _fields(data, source, node_starts, node_ends, (NodeField.OP_TYPE, NodeField.ATTRIBUTE, NodeField.DOMAIN))
    if read is None:
        return None
    nodes = read.fields
    n = len(node_starts)
    op_type = nodes.last_span(NodeField.OP_TYPE, n)
    domain = nodes.last_span(NodeField.DOMAIN, n)
    constant = spans_equal(source, *op_type, b"Constant") & (
        (domain[0] < 0) | spans_equal(source, *domain, b"") | spans_equal(source, *domain, b"ai.onnx"))
    per_graph += np.bincount(node_graph[constant], minlength=count)
    attribute_node, attribute_starts, attribute_ends = nodes.spans(NodeField.ATTRIBUTE)
    read = _fields(data, source, attribute_starts, attribute_ends, (AttributeField.G, AttributeField.GRAPHS))
    if read is None:
        return None
    subgraphs = read.fields  # (most models have none: the names below are read only for those that do)
    nodes_read = (node_starts, node_ends, op_type[0], op_type[1], node_index)
    defaults = _default_graphs(data, source, level)
    if defaults is None:
        return None
    if not len(subgraphs.rows):
        return per_graph, defaults, nodes_read, positions, apart_nodes
    # A subgraph's scope: its node's (name, or {op_type}_{index}), then its attribute's name.
    holders = np.unique(subgraphs.rows)
    read = _fields(data, source, attribute_starts[holders], attribute_ends[holders], (AttributeField.NAME,))
    if read is None:
        return None
    name_length = np.zeros(len(attribute_starts), dtype=np.int64)
    named = read.fields.last_span(AttributeField.NAME, len(holders))
    name_length[holders] = np.maximum(named[1] - named[0], 0)
    parents = np.unique(attribute_node[holders])
    read = _fields(data, source, node_starts[parents], node_ends[parents], (NodeField.NAME,))
    if read is None:
        return None
    segment = np.zeros(n, dtype=np.int64)
    named = read.fields.last_span(NodeField.NAME, len(parents))
    own = np.maximum(named[1] - named[0], 0)
    segment[parents] = np.where(own > 0, own, np.maximum(op_type[1][parents] - op_type[0][parents], 0) + 1
                                + _digits(node_index[parents]))
    children = []
    for number in (AttributeField.G, AttributeField.GRAPHS):
        rows, starts, ends = subgraphs.spans(number)
        node = attribute_node[rows]
        graph = node_graph[node]
        parent = level.scope[graph]
        scope = np.where(parent > 0, parent + 1, 0) + segment[node] + 1 + name_length[rows]
        if number == AttributeField.GRAPHS:  # graphs[k]: k counts the attribute's graphs
            k = np.arange(len(rows)) - np.searchsorted(rows, rows)
            scope = scope + 2 + _digits(k)
        root = np.where(level.root[graph] >= 0, level.root[graph], np.where(level.node_field[graph] == GraphField.NODE,
                                                                             node if main else -1, -1))
        root = np.where(level.apart[graph], -1, root)
        children.append((starts, ends, scope, root, level.apart[graph]))
    children.append((defaults.starts, defaults.ends, defaults.scope, defaults.root, defaults.apart))
    child_starts, child_ends, child_scope, child_root, child_apart = (np.concatenate([c[k] for c in children])
                                                                      for k in range(5))
    next_level = _Level(child_starts, child_ends, np.full(len(child_starts), GraphField.NODE, dtype=np.int64),
                        child_scope, child_root, child_apart)
    return per_graph, next_level, nodes_read, positions, apart_nodes


def _default_graphs(data: bytes, source: np.ndarray, level: _Level) -> _Level | None:
    """The graphs of the attribute defaults of the functions of ``level`` (FunctionProto.attribute_proto's g and
    graphs): not converted, but parsed, so their nodes and constants are counted (apart). None when a record is
    not a message."""
    functions = np.flatnonzero(level.node_field == FUNCTION_NODE)
    if not functions.size:
        return _empty_level()
    read = _fields(data, source, level.starts[functions], level.ends[functions], (FUNCTION_ATTRIBUTE_PROTO,))
    if read is None:
        return None
    _, starts, ends = read.fields.spans(FUNCTION_ATTRIBUTE_PROTO)
    read = _fields(data, source, starts, ends, (AttributeField.G, AttributeField.GRAPHS))
    if read is None:
        return None
    graphs = read.fields
    count = len(graphs.rows)
    none = np.zeros(count, dtype=np.int64)
    return _Level(graphs.payload, graphs.payload + graphs.values, np.full(count, GraphField.NODE, dtype=np.int64),
                  none, none - 1, np.ones(count, dtype=bool))


def _node_label(data: bytes, source: np.ndarray, nodes: tuple[np.ndarray, ...], node: int) -> str:
    """A main-graph node as its constants' keys name it: its name, or {op_type}_{index}."""
    starts, ends, op_start, op_end, index = (column[node : node + 1] for column in nodes)
    read = _fields(data, source, starts, ends, (NodeField.NAME,))
    if read is not None:
        name_start, name_end = read.fields.last_span(NodeField.NAME, 1)
        name = span_text(source, name_start, name_end)[0] if name_start[0] >= 0 else ""
        if name:
            return name
    op_type = span_text(source, op_start, op_end)[0] if op_start[0] >= 0 else ""
    return f"{op_type}_{int(index[0])}"
