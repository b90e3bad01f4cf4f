"""Which nodes read each constant, and what the model says about the tensors each such node reads beside it.

A *consumer* is a node input that names a constant: the node's key (its name, or ``{op_type}_{index}``, under the
path of its enclosing nodes, as constant keys are), its op type and the input's index. Names are resolved as ONNX
scopes them: a graph sees its own constants and the names of the graphs around it, unless a graph input or a node
output of its own shadows them; a model-local function sees only its own.

Each consumer says how ONNX Runtime's DirectML provider reads it, from the operator table
(:mod:`dmlbridge.model.operators`): bound to a DirectML operator ("gpu"), read on the CPU as an attribute ("cpu"),
or read by nothing ("none"). A bound input whose operator wants it in a layout of its node's records what the model
says of that node (the constants' shapes, and the shapes of graph inputs, outputs and value_info): ``dims``, the
dimension count DirectML reads the node's tensors at, ``output_sizes``, the sizes it is broadcast to, and
``axis``; none of them when the model does not say. ``dmlbridge.model.consumer_layouts`` turns them into each
consumer's desc. Manifests before format 7 recorded only the facts of format 6's layout inputs, before format 6
``dims`` of per-channel inputs only, and before format 5 none (:func:`recorded`).

    >>> from onnx import helper, numpy_helper
    >>> import numpy as np
    >>> bias = numpy_helper.from_array(np.zeros(8, np.float32), "b")
    >>> weight = numpy_helper.from_array(np.zeros((8, 3, 3, 3), np.float32), "w")
    >>> conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv1")
    >>> model = helper.make_model(helper.make_graph([conv], "g", [], [], [weight, bias]))
    >>> consumers = find_consumers(model)
    >>> consumers["b"][0].dims, consumers["b"][0].layout, consumers["b"][0].dml_operator
    (4, 'channel', 'CONVOLUTION')
    >>> consumers["w"][0].dims, consumers["w"][0].layout
    (4, 'spatial')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from dmlbridge.model.constants import ModelConstant, find_constants
from dmlbridge.model.einsum import EINSUM_BOUND, einsum_form
from dmlbridge.model.named_sizes import (
    MOST_CHANNEL_DIMS,
    Declared,
    NamedShape,
    NamedSizes,
    Shape,
    fits,
    free_names,
    gemm_c_named,
    int_attribute,
    matmul_b_named,
    named_axis_sizes,
    named_broadcasts,
    named_output_sizes,
    text,
)
from dmlbridge.model.node_sizes import (
    attention_sizes,
    axis_facts,
    broadcasts,
    gather_dims,
    gemm_c_sizes,
    matmul_b_facts,
    output_sizes,
)
from dmlbridge.model.operators import (
    CONSUMER_LAYOUTS_VERSION,
    PER_OPERATOR_VERSION,
    Layout,
    ReadsOn,
    input_rule,
    operator_rule,
)

__all__ = [
    "CHANNEL_DIMS", "CONSUMER_DIMS_VERSION", "CONSUMER_LAYOUTS_VERSION", "MATRIX_PRODUCTS", "MOST_CHANNEL_DIMS",
    "PER_OPERATOR_VERSION", "Consumer", "find_consumers", "node_dims", "recorded",
]

CHANNEL_DIMS = 4
"""The dimension count of a per-channel input whose node's rank the model does not tell: DirectML's fewest for its
NCHW convolution and normalization operators (a 1-D convolution runs as a 2-D one)."""
CONSUMER_DIMS_VERSION = 5
"""The first manifest format version whose padding rule is consumer-aware (its per-channel consumers record
``dims``); versions 3 and 4 padded on the channel axis only when ``min_dims`` pads, and 1 and 2 never."""

_RANK_SOURCES: dict[str, tuple[tuple[str, int], ...]] = {  # where a node's rank is read, first found wins
    "Conv": (("input", 1), ("input", 0), ("output", 0)),  # W (its rank is the convolution's), X, Y
    "ConvTranspose": (("input", 1), ("input", 0), ("output", 0)),
    "ConvInteger": (("input", 1), ("input", 0), ("output", 0)),
    "QLinearConv": (("input", 3), ("input", 0), ("output", 0)),
}  # (any other node: its input X, then its output Y)

MATRIX_PRODUCTS = frozenset({"MatMul", "MatMulInteger", "QLinearMatMul"})
"""The op types whose B GEMM-like operators read at the output's batch sizes (the rule of a MatMul's B)."""

_ONNX_DOMAINS = ("", "ai.onnx")
_FOUR_D = frozenset({"RotaryEmbedding"})  # operators ONNX Runtime runs on 4-D tensors whatever their ranks
# Attributes with which ONNX Runtime's DirectML provider leaves a node to the CPU (its support query)
_ON_THE_CPU_WITH = {"Attention": ("unidirectional", "do_rotary", "past_present_share_buffer")}



class Consumer(NamedTuple):
    """One node input that reads a constant, and how ONNX Runtime's DirectML provider reads it
    (:mod:`dmlbridge.model.operators`): ``reads_on`` ("gpu", "cpu" or "none"), the ``dml_operator`` that binds it,
    the ``layout`` its desc wants (None: its ONNX layout), and what the model says of its node that the layout needs:
    ``dims``, the dimension count DirectML reads the node's tensors at (a convolution or normalization: its rank
    raised to 4, :func:`node_dims`; a Gather: the output's rank), ``output_sizes``, the output's sizes the input is
    broadcast to (an element-wise operand, a Gemm's C, a MatMul's B: the output's batch sizes then B's last two, a
    normalization's scale), and ``axis``, where a per-axis scale lies. None where the model does not say, and in
    plans read from older manifests (before format 6, ``output_sizes``; before 5, ``dims``). ``note``: why an
    input is read on the CPU or not laid out. ``named_sizes``: where ``output_sizes`` is None because some of the
    output's sizes are free dimensions that the graph inputs name (a ``dim_param``: ``("batch", 3)``), the sizes
    with those names, which ``load_plan(dim_params=...)`` turns into ``output_sizes`` (:meth:`with_dim_params`).
    ``groups``: a GroupNorm's groups, which its gamma's and beta's layout needs.

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import helper, numpy_helper
        >>> node = helper.make_node("Add", ["x", "w"], ["y"], name="add")
        >>> w = numpy_helper.from_array(np.ones(3, np.float32), "w")
        >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([node], "g", [], [], [w])))
        >>> c = plan.entries["w"].consumers[0]
        >>> c.node, c.op_type, c.input, c.reads_on, c.dml_operator
        ('add', 'Add', 1, 'gpu', 'ELEMENT_WISE_ADD')
    """

    node: str
    op_type: str
    input: int
    dims: int | None = None
    output_sizes: tuple[int, ...] | None = None
    reads_on: ReadsOn = "gpu"
    dml_operator: str | None = None
    layout: Layout | None = None
    axis: int | None = None
    note: str | None = None
    named_sizes: NamedSizes | None = None
    groups: int | None = None

    def with_dim_params(self, dims: Mapping[str, int]) -> Consumer:
        """This consumer with its ``named_sizes`` made ``output_sizes`` by ``dims`` (dim_param name -> size), as a
        conversion given those sizes records it; unchanged where a name is not in ``dims``.

            >>> add = Consumer("add", "Add", 1, None, None, "gpu", "ELEMENT_WISE_ADD", "broadcast",
            ...                named_sizes=("batch", 3))
            >>> add.with_dim_params({"batch": 4}).output_sizes
            (4, 3)
        """
        named = self.named_sizes
        if named is None or any(isinstance(size, str) and size not in dims for size in named):
            return self
        sizes = fits(tuple(dims[size] if isinstance(size, str) else size for size in named))
        # (A MatMul's B records the output's rank only while its batch sizes are not known.)
        known = None if sizes is not None and self.op_type in MATRIX_PRODUCTS else self.dims
        return self._replace(output_sizes=sizes, named_sizes=None, dims=known)

    @property
    def per_channel(self) -> bool:
        """True for an input on the channel axis of a format-5 rule (a convolution's bias, a normalization's
        scale, bias, mean and variance)."""
        rule = self.layout_rule(CONSUMER_DIMS_VERSION)
        return rule == "channel"

    def layout_rule(self, version: int) -> Layout | None:
        """The layout this input wants by the rule of manifest format ``version``: its own ``layout`` from
        PER_OPERATOR_VERSION; before, the table's for an ONNX op type of that format's rule (None: none)."""
        if version >= PER_OPERATOR_VERSION:
            return self.layout
        rule = input_rule("", self.op_type, None, self.input)
        return rule.layout if rule is not None and rule.reads_on == "gpu" and rule.since_format <= version else None

    def to_json(self, version: int | None = None) -> dict[str, Any]:
        """The manifest form in format ``version`` (None: the current one): node, op_type, input, reads_on, and the
        other fields where they are set; before PER_OPERATOR_VERSION, node, op_type, input, and ``dims`` and (as
        ``sizes``) ``output_sizes`` where they are set (as :func:`recorded` leaves them)."""
        fields: dict[str, Any] = {"node": self.node, "op_type": self.op_type, "input": self.input}
        if version is not None and version < PER_OPERATOR_VERSION:
            fields.update({} if self.dims is None else {"dims": self.dims})
            fields.update({} if self.output_sizes is None else {"sizes": list(self.output_sizes)})
            return fields
        fields["reads_on"] = self.reads_on
        for name in ("dml_operator", "layout", "dims", "axis", "groups", "note"):
            if getattr(self, name) is not None:
                fields[name] = getattr(self, name)
        if self.output_sizes is not None:
            fields["output_sizes"] = list(self.output_sizes)
        elif self.named_sizes is not None:
            fields["output_sizes"] = list(self.named_sizes)
        return fields


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


def recorded(consumers: tuple[Consumer, ...], version: int | None) -> tuple[Consumer, ...]:
    """The consumers as a manifest of format ``version`` records them (None: the current one): none before
    format 3, without ``dims`` before CONSUMER_DIMS_VERSION, with ``dims`` of per-channel inputs only and no
    ``output_sizes`` before CONSUMER_LAYOUTS_VERSION, and with only the facts of format 6's layout inputs before
    PER_OPERATOR_VERSION (their ``reads_on``, operator and layout are not recorded: "gpu" is assumed)."""
    if version is None or version >= PER_OPERATOR_VERSION:
        return consumers
    if version < 3:
        return ()
    if version >= CONSUMER_LAYOUTS_VERSION:
        return tuple(Consumer(c.node, c.op_type, c.input, *((c.dims, c.output_sizes) if c.layout_rule(version)
                                                              else (None, None)))
                     for c in consumers)
    keep = version >= CONSUMER_DIMS_VERSION
    return tuple(Consumer(c.node, c.op_type, c.input, c.dims if keep and c.per_channel else None)
                 for c in consumers)


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
    names = {constant.name for constant in constants}
    used: set[str] = set()  # the constants' names some node reads: only those constants can have consumers
    _reads(model.graph.node, names, used)
    for function in model.functions:
        _reads(function.node, names, used)
    if not used and not op_types:
        return {}
    by_scope: dict[str, dict[str, str]] = {}  # scope -> value name -> key (the first, for a broken model's twins)
    for constant in constants:
        if constant.name in used:
            by_scope.setdefault(constant.scope, {}).setdefault(constant.name, constant.key)
    walk = _Walk(by_scope, (op_types, {} if nodes is None else nodes), constants, free_names(model.graph.input))
    walk.use_opsets(model.opset_import)
    _walk(model.graph, "", {}, None, walk)
    for function in model.functions:
        scope = _function_scope(function)
        walk.use_opsets(function.opset_import)
        declared = Declared((), (), getattr(function, "value_info", ()), None)  # (inputs and outputs: names)
        _walk_nodes(scope, function.node, dict(by_scope.get(scope, {})), declared, walk)
    return {key: tuple(consumers) for key, consumers in walk.found.items()}


def _function_scope(function: Any) -> str:
    scope = f"functions/{text(function.domain)}/{text(function.name)}"
    overload = text(getattr(function, "overload", ""))
    return f"{scope}:{overload}" if overload else scope


def _reads(nodes: Any, names: set[str], used: set[str]) -> None:
    """Gather the constants' ``names`` that the nodes (and their subgraphs' nodes) read. Nothing is kept per node:
    a model may hold millions of nodes, and only its constants' consumers are wanted."""
    for node in nodes:
        if node.op_type == "Constant" and node.domain in _ONNX_DOMAINS:
            continue  # (no inputs, no subgraphs)
        used.update(names.intersection(node.input))
        for attr in node.attribute:
            if attr.HasField("g"):
                _reads(attr.g.node, names, used)
            for graph in attr.graphs:
                _reads(graph.node, names, used)


Wanted = tuple[frozenset[str], dict[str, Any]]  # op types whose nodes are collected, and where


class _Walk:
    """What the walk over the graphs shares: the constants by scope, the consumers found, the nodes collected, and
    the constants' shapes by key (made when a layout input first needs them)."""

    def __init__(self, by_scope: dict[str, dict[str, str]], wanted: Wanted, constants: list[ModelConstant],
                 nameable: frozenset[str] = frozenset()) -> None:
        self.by_scope, self.wanted, self.constants = by_scope, wanted, constants
        self.nameable = nameable  # the dim_param names of the graph inputs (see free_names)
        self.found: dict[str, list[Consumer]] = {}
        self._shapes: dict[str, tuple[int, ...]] | None = None
        self.opsets: dict[str, int] = {}  # the opset of each domain ("" for ONNX's) where the walk is

    def use_opsets(self, imports: Any) -> None:
        """Read the opsets of a model's or a function's ``opset_import``."""
        self.opsets = {("" if text(o.domain) == "ai.onnx" else text(o.domain)): int(o.version) for o in imports}

    def shape(self, key: str) -> tuple[int, ...]:
        if self._shapes is None:
            self._shapes = {constant.key: constant.shape for constant in self.constants}
        return self._shapes[key]


class _Shapes:
    """The shapes of the values a scope's nodes read and write: a visible constant's, else what the graphs
    declare (``visible`` is the walk's own dict: a node output that shadows a constant is seen as it goes)."""

    def __init__(self, visible: dict[str, str], declared: Declared, walk: _Walk) -> None:
        self.visible, self.declared, self.walk = visible, declared, walk

    def of(self, names: Any, position: int) -> Shape | None:
        name = names[position] if position < len(names) else ""
        if not name:
            return None
        key = self.visible.get(name)
        return self.walk.shape(key) if key is not None else self.declared.shape(name)

    def named(self, names: Any, position: int) -> NamedShape | None:
        """As :meth:`of`, with the free dimensions the graph inputs name by those names."""
        name = names[position] if position < len(names) else ""
        if not name:
            return None
        key = self.visible.get(name)
        if key is not None:
            return self.walk.shape(key)
        named = self.declared.named(name)
        nameable = self.walk.nameable
        return None if named is None else tuple(
            size if not isinstance(size, str) or size in nameable else None for size in named)


def _rank_of(node: Any, op_type: str, shapes: _Shapes) -> int | None:
    """The rank of a convolution or normalization node (see _RANK_SOURCES; any other: its X, then its Y): the
    first of its values whose rank is known, from a constant's shape or a declared one, and at most
    MOST_CHANNEL_DIMS."""
    for kind, position in _RANK_SOURCES.get(op_type, (("input", 0), ("output", 0))):
        shape = shapes.of(node.input if kind == "input" else node.output, position)
        if shape is not None and len(shape) <= MOST_CHANNEL_DIMS:
            return len(shape)
    return None


Facts = tuple[int | None, tuple[int, ...] | None, int | None, NamedSizes | None]
"""(dims, output_sizes, axis, named_sizes) of a consumer (see :class:`Consumer`)."""


def _facts(layout: Layout, node: Any, op_type: str, constant: tuple[int, ...], shapes: _Shapes,
           rank: list[int | None]) -> Facts:
    """(dims, output_sizes, axis) of a consumer whose input wants ``layout`` (see :class:`Consumer`), and where
    the output sizes are free but named, ``named_sizes``; ``rank`` holds the node's rank once an input of a
    convolution or normalization has found it."""
    dims, sizes, axis = _known_facts(layout, node, op_type, constant, shapes, rank)
    if sizes is not None or layout not in ("axis", "broadcast") or op_type == "Attention":
        return dims, sizes, axis, None
    if op_type in MATRIX_PRODUCTS:  # (its output's rank kept beside: the layout it has until the sizes are given)
        return dims, None, None, None if dims is None else matmul_b_named(node, constant, shapes)
    if layout == "axis":
        named = named_axis_sizes(node, shapes)
        axis = int_attribute(node, "axis", 1)
        axis = axis + len(named) if named is not None and axis < 0 else axis
        if named is None or not 0 <= axis < len(named):
            return dims, None, None, None
        return dims, None, axis if len(constant) == 1 else None, named
    named = gemm_c_named(node, constant, shapes) if op_type == "Gemm" else named_output_sizes(node, shapes)
    return dims, None, axis, named if named is not None and named_broadcasts(constant, named) else None


def _known_facts(layout: Layout, node: Any, op_type: str, constant: tuple[int, ...], shapes: _Shapes,
                 rank: list[int | None]) -> tuple[int | None, tuple[int, ...] | None, int | None]:
    """(dims, output_sizes, axis) of a consumer whose input wants ``layout``, from the sizes the model gives."""
    if layout == "rank" and op_type == "Gather":
        return gather_dims(node, shapes), None, None
    if layout == "rank" and op_type in _FOUR_D:
        return 4, None, None
    if layout == "rank" and op_type == "Einsum":
        return max(4, len(constant)), None, None
    if layout == "group":  # (NHWC: the output's sizes, from the input where the model declares no output)
        sizes = output_sizes(node, shapes)
        return None, sizes if sizes is not None and len(sizes) == 4 else None, None
    if layout in ("channel", "spatial", "rank"):
        if not rank:
            rank.append(_rank_of(node, op_type, shapes))
        if layout != "rank" or op_type in _RANK_SOURCES:
            return node_dims(rank[0]), None, None
        return rank[0], None, None  # (a normalization's scale and bias: leading 1s to its input's rank)
    if layout == "axis":
        sizes, axis = axis_facts(node, shapes)
        return None, sizes, axis if len(constant) == 1 else None
    if layout != "broadcast":
        return None, None, None
    if op_type == "Gemm":
        return None, gemm_c_sizes(node, constant, shapes), None
    if op_type in MATRIX_PRODUCTS:
        dims, sizes = matmul_b_facts(node, constant, shapes)
        return dims, sizes, None
    if op_type == "Attention":
        return None, attention_sizes(constant, shapes.of(node.input, 0)), None
    sizes = output_sizes(node, shapes)
    return None, sizes if sizes is not None and broadcasts(constant, sizes) else None, None


def _consumer(node: Any, node_key: str, domain: str, op_type: str, position: int, opset: int | None,
              constant: tuple[int, ...], shapes: _Shapes, rank: list[int | None]) -> Consumer:
    """The consumer that input ``position`` of ``node`` is: how the table says it is read, and its facts."""
    onnx_domain = domain in _ONNX_DOMAINS
    named = (op_type or "?") if onnx_domain else f"{domain}:{op_type}"
    # (A node without an op type is a broken model's: it is named "?", never the empty string.)
    row = operator_rule(domain, op_type, opset)
    if row is None:
        if onnx_domain:
            return Consumer(node_key, named, position,
                            note=f"not laid out: dmlbridge's operator table has no row for {named} (opset {opset}): "
                                 "its ONNX layout")
        return Consumer(node_key, named, position, reads_on="cpu",
                        note=f"ONNX Runtime's DirectML provider has no kernel for {named}: it runs on the CPU")
    rule = row.inputs.get(position, row.others)
    if rule is None:
        return Consumer(node_key, named, position, reads_on="none",
                        note=f"{named} has no input {position} at opset {opset}")
    if rule.reads_on != "gpu":
        note = None if rule.reads_on == "cpu" and row.others is not None else row.source
        return Consumer(node_key, named, position, reads_on=rule.reads_on, note=note)
    unsupported = [name for name in _ON_THE_CPU_WITH.get(op_type, ()) if not onnx_domain and int_attribute(node, name)]
    if unsupported:
        return Consumer(node_key, named, position, reads_on="cpu",
                        note=f"ONNX Runtime's DirectML provider does not run {named} with {unsupported[0]} set: it "
                             "runs on the CPU")
    if op_type == "Pow" and onnx_domain and position == 1 and _one_element(constant):
        return Consumer(node_key, named, position, reads_on="cpu",
                        note="ONNX Runtime's DirectML provider runs a Pow of a one-element constant exponent as "
                             "ELEMENT_WISE_CONSTANT_POW, the exponent read on the CPU as its Exponent")
    if rule.layout == "unknown":
        return Consumer(node_key, named, position, dml_operator=rule.dml_operator,
                        note=f"not laid out: dmlbridge does not know the desc {rule.dml_operator} binds {named}'s "
                             f"input {position} at: its ONNX layout")
    if op_type == "Einsum" and onnx_domain:
        early = _einsum_consumer(node, node_key, named, position)
        if early is not None:
            return early
    if rule.layout == "group" and not int_attribute(node, "channels_last", 1):
        return Consumer(node_key, named, position, dml_operator=rule.dml_operator,
                        note=f"not laid out: ONNX Runtime's {named} reads its input as NHWC (channels_last 1), and "
                             "this node's is NCHW: its ONNX layout")
    dml_operator = _by_attribute(node, op_type, rule.dml_operator)
    if op_type == "Einsum" and onnx_domain:
        dml_operator = EINSUM_BOUND.get(einsum_form(_equation(node)) or "", dml_operator)
    layout = None if rule.layout == "leading" else rule.layout
    facts: Facts = (None, None, None, None) if layout is None else _facts(layout, node, op_type, constant, shapes,
                                                                          rank)
    groups = int_attribute(node, "groups") if layout == "group" else None
    return Consumer(node_key, named, position, facts[0], facts[1], "gpu", dml_operator, layout, facts[2],
                    named_sizes=facts[3], groups=groups if groups is None or 0 < groups < 2**32 else None)


def _one_element(shape: tuple[int, ...]) -> bool:
    return all(size == 1 for size in shape)


def _equation(node: Any) -> str:
    return next((text(attr.s) for attr in node.attribute if text(attr.name) == "equation"), "")


def _einsum_consumer(node: Any, node_key: str, named: str, position: int) -> Consumer | None:
    """The consumer an Einsum's input is where its equation's form (``dmlbridge.model.einsum``) is not one whose
    inputs are laid out: read on the CPU where the provider does not take the equation, else not laid out (None:
    laid out, by the table's row)."""
    equation = _equation(node)
    form = einsum_form(equation)
    shown = equation[:80]
    if form is None:
        return Consumer(node_key, named, position, reads_on="cpu",
                        note=f"ONNX Runtime's DirectML provider takes no Einsum of the equation {shown!r}: it runs on "
                             "the CPU")
    if form in EINSUM_BOUND or (form == "outer" and position == 1):
        return None
    operator = "GEMM" if form.startswith("matmul") or form == "outer" else None
    return Consumer(node_key, named, position, dml_operator=operator,
                    note=f"not laid out: ONNX Runtime's DirectML provider runs the Einsum {shown!r} as its {form} "
                         "form, whose input dmlbridge does not lay out: its ONNX layout")


def _by_attribute(node: Any, op_type: str, dml_operator: str | None) -> str | None:
    """The DirectML operator of a node whose attribute chooses it (a Mod's fmod, a BitShift's direction)."""
    if op_type == "Mod" and int_attribute(node, "fmod"):
        return "ELEMENT_WISE_MODULUS_TRUNCATE"
    if op_type == "BitShift" and any(text(attr.name) == "direction" and attr.s in (b"RIGHT", "RIGHT")
                                     for attr in node.attribute):
        return "ELEMENT_WISE_BIT_SHIFT_RIGHT"
    return dml_operator


def _walk(graph: Any, scope: str, outer: dict[str, str], outer_declared: Declared | None, walk: _Walk) -> None:
    visible = dict(outer)
    for value in graph.input:
        visible.pop(value.name, None)  # a graph input shadows an outer constant (its own initializer wins below)
    visible.update(walk.by_scope.get(scope, {}))
    declared = Declared(graph.input, graph.output, graph.value_info, outer_declared)
    _walk_nodes(scope, graph.node, visible, declared, walk)


def _walk_nodes(scope: str, nodes: Any, visible: dict[str, str], declared: Declared, walk: _Walk) -> None:
    own = walk.by_scope.get(scope, {})
    found, wanted = walk.found, walk.wanted
    shapes = _Shapes(visible, declared, walk)
    for index, node in enumerate(nodes):
        onnx_domain = node.domain in _ONNX_DOMAINS
        if onnx_domain and node.op_type == "Constant":
            continue  # (its output is this scope's constant; it reads nothing and holds no subgraph)
        op_type = text(node.op_type)
        node_key = None
        if wanted[0] and (op_type if onnx_domain else f"{text(node.domain)}:{op_type}") in wanted[0]:
            node_key = _node_key(node, op_type, index, scope)
            wanted[1][node_key] = node
        domain = text(node.domain)
        opset = walk.opsets.get("" if domain == "ai.onnx" else domain)
        rank: list[int | None] = []  # the node's rank, found when a convolution's input first needs it
        for position, name in enumerate(node.input):
            key = visible.get(name) if name else None
            if key is not None:
                node_key = node_key or _node_key(node, op_type, index, scope)
                found.setdefault(key, []).append(_consumer(node, node_key, domain, op_type, position, opset,
                                                           walk.shape(key), shapes, rank))
        for attr in node.attribute:  # subgraphs, scoped as constants.py scopes them
            if attr.HasField("g") or len(attr.graphs):
                prefix = f"{_node_key(node, op_type, index, scope)}/{text(attr.name)}"
                if attr.HasField("g"):
                    _walk(attr.g, prefix, visible, declared, walk)
                for k, graph in enumerate(attr.graphs):
                    _walk(graph, f"{prefix}[{k}]", visible, declared, walk)
        for name in node.output:
            if name and name not in own:  # a computed value shadows an outer constant of the same name
                visible.pop(name, None)


def _node_key(node: Any, op_type: str, index: int, scope: str) -> str:
    """As constants name a node's scope: its name, or ``{op_type}_{index}``, under the enclosing scope."""
    segment = text(node.name) or f"{op_type}_{index}"
    return f"{scope}/{segment}" if scope else segment


