"""Which nodes read each constant, and where a 1-D constant's one axis goes when its sizes are padded.

A *consumer* is a node input that names a constant: the node's key (its name, or ``{op_type}_{index}``, under the
path of its enclosing nodes, as constant keys are), its op type and the input's index. Names are resolved as ONNX
scopes them: a graph sees its own constants and the names of the graphs around it, unless a graph input or a node
output of its own shadows them; a model-local function sees only its own.

Padding to ``min_dims`` puts leading 1s before the sizes (``[C]`` becomes ``[1, 1, 1, C]``). DirectML's
convolution bias and the normalization operators' scale, bias, mean and variance want their channels on axis 1
(``[1, C, 1, 1]``, DirectML's NCHW), so a 1-D constant every consumer of which is one of those inputs gets the
*channel* padding instead; one whose consumers disagree keeps the leading 1s (*mixed*, noted in its entry).

    >>> from onnx import helper, numpy_helper
    >>> import numpy as np
    >>> bias = numpy_helper.from_array(np.zeros(8, np.float32), "b")
    >>> conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv1")
    >>> model = helper.make_model(helper.make_graph([conv], "g", [], [], [bias]))
    >>> consumers = find_consumers(model)
    >>> consumers["b"]
    (Consumer(node='conv1', op_type='Conv', input=2),)
    >>> padding_of((8,), consumers["b"], 4), padded_sizes((8,), "channel", 4)
    ('channel', (1, 8, 1, 1))
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from dmlbridge.constants import ModelConstant, find_constants

__all__ = ["PER_CHANNEL_INPUTS", "Consumer", "Padding", "find_consumers", "padded_sizes", "padding_of"]

Padding = Literal["leading", "channel", "mixed"]

PER_CHANNEL_INPUTS: dict[str, frozenset[int]] = {
    "Conv": frozenset({2}),  # B: one bias per output channel
    "ConvTranspose": frozenset({2}),
    "BatchNormalization": frozenset({1, 2, 3, 4}),  # scale, B, input_mean, input_var
    "InstanceNormalization": frozenset({1, 2}),  # scale, B
}
"""The inputs (by op type of the ONNX domain, by index) that hold one value per channel, which DirectML reads on
axis 1 of a 4-D or 5-D tensor."""

_ONNX_DOMAINS = ("", "ai.onnx")


class Consumer(NamedTuple):
    """One node input that reads a constant."""

    node: str
    op_type: str
    input: int

    @property
    def per_channel(self) -> bool:
        """True for the per-channel inputs of PER_CHANNEL_INPUTS (ONNX domain only; see :func:`find_consumers`)."""
        return self.input in PER_CHANNEL_INPUTS.get(self.op_type, ())


def padding_of(shape: tuple[int, ...], consumers: tuple[Consumer, ...], min_dims: int) -> Padding:
    """How a constant's sizes are padded: "channel" for a 1-D constant read only by per-channel inputs when
    ``min_dims`` pads it (2 or more), "mixed" when some of its consumers are per-channel inputs and others not,
    "leading" otherwise."""
    if len(shape) != 1 or min_dims < 2 or not consumers:
        return "leading"
    wanted = {consumer.per_channel for consumer in consumers}
    if wanted == {True}:
        return "channel"
    return "mixed" if True in wanted else "leading"


def padded_sizes(shape: tuple[int, ...], padding: Padding, min_dims: int) -> tuple[int, ...]:
    """The sizes of a packed constant: ``[1, C, 1, ...]`` for channel padding, else leading 1s (a 0-d constant is
    ``[1]``); at least ``min_dims`` dimensions either way."""
    if padding == "channel":
        return (1, shape[0], *(1,) * (min_dims - 2))
    base = shape or (1,)
    return (1,) * max(0, min_dims - len(base)) + tuple(base)


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
    found: dict[str, list[Consumer]] = {}
    wanted = (op_types, {} if nodes is None else nodes)
    _walk(model.graph, "", {}, by_scope, found, others, wanted)
    for function in model.functions:
        scope = _function_scope(function)
        _walk_nodes(scope, dict(by_scope.get(scope, {})), by_scope, found, others, wanted)
    return {key: tuple(consumers) for key, consumers in found.items()}


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


def _walk(graph: Any, scope: str, outer: dict[str, str], by_scope: dict[str, dict[str, str]],
          found: dict[str, list[Consumer]], others: dict[str, list[tuple[int, Any]]], wanted: Wanted) -> None:
    visible = dict(outer)
    for value in graph.input:
        visible.pop(value.name, None)  # a graph input shadows an outer constant (its own initializer wins below)
    visible.update(by_scope.get(scope, {}))
    _walk_nodes(scope, visible, by_scope, found, others, wanted)


def _walk_nodes(scope: str, visible: dict[str, str], by_scope: dict[str, dict[str, str]],
                found: dict[str, list[Consumer]], others: dict[str, list[tuple[int, Any]]], wanted: Wanted) -> None:
    own = by_scope.get(scope, {})
    for index, node in others.get(scope, ()):  # (no Constant node: their outputs are this scope's constants)
        op_type = _text(node.op_type)
        onnx_domain = node.domain in _ONNX_DOMAINS
        node_key = None
        if wanted[0] and (op_type if onnx_domain else f"{_text(node.domain)}:{op_type}") in wanted[0]:
            node_key = _node_key(node, op_type, index, scope)
            wanted[1][node_key] = node
        for position, name in enumerate(node.input):
            key = visible.get(name) if name else None
            if key is not None:
                node_key = node_key or _node_key(node, op_type, index, scope)
                # (Another domain's op of the same name is not ONNX's: its inputs are never per-channel.)
                # (A node without an op type is a broken model's: it is named "?", never the empty string.)
                found.setdefault(key, []).append(Consumer(node_key, (op_type or "?") if onnx_domain else
                                                          f"{_text(node.domain)}:{op_type}", position))
        for attr in node.attribute:  # subgraphs, scoped as constants.py scopes them
            if attr.HasField("g") or len(attr.graphs):
                prefix = f"{_node_key(node, op_type, index, scope)}/{_text(attr.name)}"
                if attr.HasField("g"):
                    _walk(attr.g, prefix, visible, by_scope, found, others, wanted)
                for k, graph in enumerate(attr.graphs):
                    _walk(graph, f"{prefix}[{k}]", visible, by_scope, found, others, wanted)
        for name in node.output:
            if name and name not in own:  # a computed value shadows an outer constant of the same name
                visible.pop(name, None)


def _node_key(node: Any, op_type: str, index: int, scope: str) -> str:
    """As constants name a node's scope: its name, or ``{op_type}_{index}``, under the enclosing scope."""
    segment = _text(node.name) or f"{op_type}_{index}"
    return f"{scope}/{segment}" if scope else segment


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "backslashreplace")
