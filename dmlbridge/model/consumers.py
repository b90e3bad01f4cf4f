"""Which nodes read each constant, and where a 1-D constant's one axis goes when its sizes are padded.

A *consumer* is a node input that names a constant: the node's key (its name, or ``{op_type}_{index}``, under the
path of its enclosing nodes, as constant keys are), its op type and the input's index. Names are resolved as ONNX
scopes them: a graph sees its own constants and the names of the graphs around it, unless a graph input or a node
output of its own shadows them; a model-local function sees only its own.

Padding to ``min_dims`` puts leading 1s before the sizes (``[C]`` becomes ``[1, 1, 1, C]``). DirectML's
convolution bias and the normalization operators' scale, bias, mean and variance want their channels on axis 1
of as many dimensions as the operator's input (``[1, C, 1, 1]`` for a 2-D convolution, DirectML's NCHW;
``[1, C, 1, 1, 1]`` for a 3-D one), and DirectML refuses them 1-D. So a consumer that is one of those inputs
records its node's dimension count (``dims``, :func:`node_dims`), and a 1-D constant every consumer of which is
such an input, all of one count, gets the *channel* padding: ``[1, C, 1, ...]`` of that count, or of ``min_dims``
when it asks for more, whatever ``min_dims`` is. One whose consumers disagree (on the count, or some are other
inputs) keeps the leading 1s (*mixed*, noted in its entry). Manifests of format 3 and 4 followed an older rule
(channel padding only when ``min_dims`` pads, to ``min_dims``; no ``dims``): the ``version`` arguments below
apply it.

    >>> from onnx import helper, numpy_helper
    >>> import numpy as np
    >>> bias = numpy_helper.from_array(np.zeros(8, np.float32), "b")
    >>> weight = numpy_helper.from_array(np.zeros((8, 3, 3, 3), np.float32), "w")
    >>> conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv1")
    >>> model = helper.make_model(helper.make_graph([conv], "g", [], [], [weight, bias]))
    >>> consumers = find_consumers(model)
    >>> consumers["b"]
    (Consumer(node='conv1', op_type='Conv', input=2, dims=4),)
    >>> padding_of((8,), consumers["b"], 1), padded_sizes((8,), "channel", channel_dims(consumers["b"], 1))
    ('channel', (1, 8, 1, 1))
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from dmlbridge.model.constants import ModelConstant, find_constants

__all__ = [
    "CHANNEL_DIMS", "CONSUMER_DIMS_VERSION", "MOST_CHANNEL_DIMS", "PER_CHANNEL_INPUTS", "Consumer", "Padding",
    "channel_dims", "find_consumers", "node_dims", "padded_sizes", "padding_of", "recorded",
]

Padding = Literal["leading", "channel", "mixed"]

PER_CHANNEL_INPUTS: dict[str, frozenset[int]] = {
    "Conv": frozenset({2}),  # B: one bias per output channel
    "ConvTranspose": frozenset({2}),
    "BatchNormalization": frozenset({1, 2, 3, 4}),  # scale, B, input_mean, input_var
    "InstanceNormalization": frozenset({1, 2}),  # scale, B
}
"""The inputs (by op type of the ONNX domain, by index) that hold one value per channel, which DirectML reads on
axis 1 of a 4-D or 5-D tensor."""

CHANNEL_DIMS = 4
"""The dimension count of a per-channel input whose node's rank the model does not tell: DirectML's fewest for its
NCHW convolution and normalization operators (a 1-D convolution runs as a 2-D one)."""
MOST_CHANNEL_DIMS = 8
"""The most dimensions a DirectML tensor has (feature level 3.0 on): a rank above it is no DirectML operator's."""
CONSUMER_DIMS_VERSION = 5
"""The first manifest format version whose padding rule is consumer-aware (its per-channel consumers record
``dims``); versions 3 and 4 padded on the channel axis only when ``min_dims`` pads, and 1 and 2 never."""

_RANK_SOURCES: dict[str, tuple[tuple[str, int], ...]] = {  # where a node's rank is read, first found wins
    "Conv": (("input", 1), ("input", 0), ("output", 0)),  # W (its rank is the convolution's), X, Y
    "ConvTranspose": (("input", 1), ("input", 0), ("output", 0)),
    "BatchNormalization": (("input", 0), ("output", 0)),  # X, Y
    "InstanceNormalization": (("input", 0), ("output", 0)),
}

_ONNX_DOMAINS = ("", "ai.onnx")


class Consumer(NamedTuple):
    """One node input that reads a constant. ``dims``: for a per-channel input (PER_CHANNEL_INPUTS), the
    dimension count DirectML reads its node's tensors at (:func:`node_dims`); None for any other input, and in
    plans read from manifests before format 5.

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import helper, numpy_helper
        >>> node = helper.make_node("Add", ["x", "w"], ["y"], name="add")
        >>> w = numpy_helper.from_array(np.ones(3, np.float32), "w")
        >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([node], "g", [], [], [w])))
        >>> plan.entries["w"].consumers
        (Consumer(node='add', op_type='Add', input=1, dims=None),)
    """

    node: str
    op_type: str
    input: int
    dims: int | None = None

    @property
    def per_channel(self) -> bool:
        """True for the per-channel inputs of PER_CHANNEL_INPUTS (ONNX domain only; see :func:`find_consumers`)."""
        return self.input in PER_CHANNEL_INPUTS.get(self.op_type, ())

    def to_json(self) -> dict[str, Any]:
        """The manifest form: node, op_type, input, and dims when there is one."""
        fields = {"node": self.node, "op_type": self.op_type, "input": self.input}
        return fields if self.dims is None else {**fields, "dims": self.dims}


def node_dims(rank: int | None) -> int:
    """The dimension count DirectML reads a convolution or normalization node's tensors at, given the node's rank
    (the rank of a Conv's weight, of a normalization's input X): at least CHANNEL_DIMS (a 1-D convolution, an
    ``[N, C]`` input, run as 4-D), and CHANNEL_DIMS when the rank is not known or more than any DirectML tensor's.

        >>> node_dims(3), node_dims(4), node_dims(5), node_dims(None)
        (4, 4, 5, 4)
    """
    if rank is None or rank > MOST_CHANNEL_DIMS:
        return CHANNEL_DIMS
    return max(CHANNEL_DIMS, rank)


def padding_of(
    shape: tuple[int, ...], consumers: tuple[Consumer, ...], min_dims: int, version: int | None = None
) -> Padding:
    """How a constant's sizes are padded: "channel" for a 1-D constant read only by per-channel inputs of one
    dimension count, "mixed" when some of its consumers are per-channel inputs and others are not or the counts
    differ, "leading" otherwise. ``version``: the manifest format version whose rule applies (None: the current
    one); before CONSUMER_DIMS_VERSION only a ``min_dims`` of 2 or more pads on the channel axis, and the counts
    are not looked at; before format 3, every constant is padded with leading 1s."""
    if len(shape) != 1 or not consumers:
        return "leading"
    rule = CONSUMER_DIMS_VERSION if version is None else version
    if rule < 3 or (rule < CONSUMER_DIMS_VERSION and min_dims < 2):
        return "leading"
    wanted = {consumer.per_channel for consumer in consumers}
    if wanted == {True}:
        same = rule < CONSUMER_DIMS_VERSION or len({consumer.dims for consumer in consumers}) == 1
        return "channel" if same else "mixed"
    return "mixed" if True in wanted else "leading"


def channel_dims(consumers: tuple[Consumer, ...], min_dims: int, version: int | None = None) -> int:
    """The dimension count of a constant these consumers read with "channel" padding (:func:`padding_of`): their
    ``dims``, or ``min_dims`` when it is more; ``min_dims`` before CONSUMER_DIMS_VERSION."""
    if version is not None and version < CONSUMER_DIMS_VERSION:
        return min_dims
    return max(min_dims, consumers[0].dims or CHANNEL_DIMS)


def padded_sizes(shape: tuple[int, ...], padding: Padding, min_dims: int) -> tuple[int, ...]:
    """The sizes of a packed constant: ``[1, C, 1, ...]`` for channel padding (``min_dims``: the count
    :func:`channel_dims` gives), else leading 1s (a 0-d constant is ``[1]``); at least ``min_dims`` dimensions
    either way."""
    if padding == "channel":
        return (1, shape[0], *(1,) * (min_dims - 2))
    base = shape or (1,)
    return (1,) * max(0, min_dims - len(base)) + tuple(base)


def recorded(consumers: tuple[Consumer, ...], version: int | None) -> tuple[Consumer, ...]:
    """The consumers as a manifest of format ``version`` records them (None: the current one): none before
    format 3, without ``dims`` before CONSUMER_DIMS_VERSION."""
    if version is None or version >= CONSUMER_DIMS_VERSION:
        return consumers
    if version < 3:
        return ()
    return tuple(consumer._replace(dims=None) if consumer.dims is not None else consumer for consumer in consumers)


def find_consumers(
    model: Any, constants: list[ModelConstant] | None = None, nodes: dict[str, Any] | None = None,
    op_types: frozenset[str] = frozenset(),
) -> dict[str, tuple[Consumer, ...]]:
    """Per constant key, the node inputs that read it, in graph order (constants nobody reads are left out).
    ``constants``: the model's constants, as ``find_constants`` gives them (found again when not given).
    ``nodes``: filled with the NodeProto of every node whose op type (another domain's as ``domain:Op``) is in
    ``op_types``, by node key, in graph order."""
    if constants is None:
        constants = find_constants(model)
    used: set[str] = set()  # every name a node reads: only those constants can have consumers
    others: dict[str, list[tuple[int, Any]]] = {}  # per scope: its nodes but the Constant nodes
    _inputs(model.graph.node, "", used, others)
    for function in model.functions:
        _inputs(function.node, _function_scope(function), used, others)
    if not used and not op_types:
        return {}
    by_scope: dict[str, dict[str, str]] = {}  # scope -> value name -> key (the first, for a broken model's twins)
    for constant in constants:
        if constant.name in used:
            by_scope.setdefault(constant.scope, {}).setdefault(constant.name, constant.key)
    walk = _Walk(by_scope, others, (op_types, {} if nodes is None else nodes), constants)
    _walk(model.graph, "", {}, None, walk)
    for function in model.functions:
        scope = _function_scope(function)
        declared = _Declared((), (), getattr(function, "value_info", ()), None)  # (inputs and outputs: names)
        _walk_nodes(scope, dict(by_scope.get(scope, {})), declared, walk)
    return {key: tuple(consumers) for key, consumers in walk.found.items()}


def _function_scope(function: Any) -> str:
    scope = f"functions/{_text(function.domain)}/{_text(function.name)}"
    overload = _text(getattr(function, "overload", ""))
    return f"{scope}:{overload}" if overload else scope


def _inputs(nodes: Any, scope: str, used: set[str], others: dict[str, list[tuple[int, Any]]]) -> None:
    """Gather the names the nodes of ``scope`` (and their subgraphs) read, and the nodes that are not Constant
    nodes, which have no inputs and no subgraphs (a model may hold 100,000 of them: the second walk skips them)."""
    kept = others[scope] = []
    for index, node in enumerate(nodes):
        if node.op_type == "Constant" and node.domain in _ONNX_DOMAINS:
            continue
        kept.append((index, node))
        used.update(node.input)
        for attr in node.attribute:
            if attr.HasField("g") or len(attr.graphs):
                prefix = f"{_node_key(node, _text(node.op_type), index, scope)}/{_text(attr.name)}"
                if attr.HasField("g"):
                    _inputs(attr.g.node, prefix, used, others)
                for k, graph in enumerate(attr.graphs):
                    _inputs(graph.node, f"{prefix}[{k}]", used, others)


Wanted = tuple[frozenset[str], dict[str, Any]]  # op types whose nodes are collected, and where


class _Walk:
    """What the walk over the graphs shares: the constants by scope, the nodes of each scope, the consumers found,
    the nodes collected, and the constants' shapes by key (made when a per-channel input first needs them)."""

    def __init__(self, by_scope: dict[str, dict[str, str]], others: dict[str, list[tuple[int, Any]]],
                 wanted: Wanted, constants: list[ModelConstant]) -> None:
        self.by_scope, self.others, self.wanted, self.constants = by_scope, others, wanted, constants
        self.found: dict[str, list[Consumer]] = {}
        self._shapes: dict[str, tuple[int, ...]] | None = None

    def shape(self, key: str) -> tuple[int, ...]:
        if self._shapes is None:
            self._shapes = {constant.key: constant.shape for constant in self.constants}
        return self._shapes[key]


class _Declared:
    """The ranks a graph's inputs, outputs and value_info declare (None: declared without a shape), read on first
    use, before those of the graphs around it."""

    def __init__(self, inputs: Any, outputs: Any, value_info: Any, outer: _Declared | None) -> None:
        self._values, self._outer = (inputs, outputs, value_info), outer
        self._ranks: dict[str, int | None] | None = None

    def rank(self, name: str) -> int | None:
        if self._ranks is None:
            ranks: dict[str, int | None] = {}
            for values in self._values:
                for value in values:
                    ranks.setdefault(_text(value.name), None)
                    tensor = value.type.tensor_type if value.type.HasField("tensor_type") else None
                    if tensor is not None and tensor.HasField("shape") and ranks[_text(value.name)] is None:
                        ranks[_text(value.name)] = len(tensor.shape.dim)
            self._ranks = ranks
        if name in self._ranks:
            return self._ranks[name]
        return None if self._outer is None else self._outer.rank(name)


def _rank_of(node: Any, op_type: str, visible: dict[str, str], declared: _Declared, walk: _Walk) -> int | None:
    """The rank of a convolution or normalization node (see _RANK_SOURCES): the first of its values whose rank is
    known, from a constant's shape or a declared one, and at most MOST_CHANNEL_DIMS."""
    for kind, position in _RANK_SOURCES[op_type]:
        names = node.input if kind == "input" else node.output
        name = names[position] if position < len(names) else ""
        if not name:
            continue
        key = visible.get(name)
        rank = len(walk.shape(key)) if key is not None else declared.rank(name)
        if rank is not None and rank <= MOST_CHANNEL_DIMS:
            return rank
    return None


def _walk(graph: Any, scope: str, outer: dict[str, str], outer_declared: _Declared | None, walk: _Walk) -> None:
    visible = dict(outer)
    for value in graph.input:
        visible.pop(value.name, None)  # a graph input shadows an outer constant (its own initializer wins below)
    visible.update(walk.by_scope.get(scope, {}))
    _walk_nodes(scope, visible, _Declared(graph.input, graph.output, graph.value_info, outer_declared), walk)


def _walk_nodes(scope: str, visible: dict[str, str], declared: _Declared, walk: _Walk) -> None:
    own = walk.by_scope.get(scope, {})
    found, wanted = walk.found, walk.wanted
    for index, node in walk.others.get(scope, ()):  # (no Constant node: their outputs are this scope's constants)
        op_type = _text(node.op_type)
        onnx_domain = node.domain in _ONNX_DOMAINS
        node_key = None
        if wanted[0] and (op_type if onnx_domain else f"{_text(node.domain)}:{op_type}") in wanted[0]:
            node_key = _node_key(node, op_type, index, scope)
            wanted[1][node_key] = node
        per_channel = PER_CHANNEL_INPUTS.get(op_type, ()) if onnx_domain else ()
        dims = None  # the node's dimension count, found when a per-channel input of it reads a constant
        for position, name in enumerate(node.input):
            key = visible.get(name) if name else None
            if key is not None:
                node_key = node_key or _node_key(node, op_type, index, scope)
                if position in per_channel:
                    dims = dims or node_dims(_rank_of(node, op_type, visible, declared, walk))
                # (Another domain's op of the same name is not ONNX's: its inputs are never per-channel.)
                # (A node without an op type is a broken model's: it is named "?", never the empty string.)
                found.setdefault(key, []).append(Consumer(node_key, (op_type or "?") if onnx_domain else
                                                          f"{_text(node.domain)}:{op_type}", position,
                                                          dims if position in per_channel else None))
        for attr in node.attribute:  # subgraphs, scoped as constants.py scopes them
            if attr.HasField("g") or len(attr.graphs):
                prefix = f"{_node_key(node, op_type, index, scope)}/{_text(attr.name)}"
                if attr.HasField("g"):
                    _walk(attr.g, prefix, visible, declared, walk)
                for k, graph in enumerate(attr.graphs):
                    _walk(graph, f"{prefix}[{k}]", visible, declared, walk)
        for name in node.output:
            if name and name not in own:  # a computed value shadows an outer constant of the same name
                visible.pop(name, None)


def _node_key(node: Any, op_type: str, index: int, scope: str) -> str:
    """As constants name a node's scope: its name, or ``{op_type}_{index}``, under the enclosing scope."""
    segment = _text(node.name) or f"{op_type}_{index}"
    return f"{scope}/{segment}" if scope else segment


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "backslashreplace")
