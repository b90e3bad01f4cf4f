"""The limits a model is held to before it is parsed: how many constants and nodes it may hold
(``max_constants``, ``max_nodes``), what :func:`~dmlbridge.model.census.count_constants` counts of them
(:class:`ConstantCount`), the refusals of a count over them, and the bound a text-format model gets from its text
alone (onnx parses text models slowly: its count cannot wait for the parse).

    >>> check_max_nodes(None), check_max_constants(10)
    (None, 10)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dmlbridge.errors import InvalidArgumentError

__all__ = ["DEFAULT_MAX_CONSTANTS", "DEFAULT_MAX_NODES", "MIN_ENTRY_LINE", "ConstantCount", "check_count",
           "check_max_constants", "check_max_nodes", "check_text_model", "text_bound"]


DEFAULT_MAX_CONSTANTS = 1 << 19
"""The most constants a model may hold unless the caller raises the limit (524,288; real models hold a few
thousand): a conversion of that many stays within 1 GiB (docs/guide.md, Streaming)."""


DEFAULT_MAX_NODES = 1 << 19
"""The most nodes a model may hold unless the caller raises the limit (524,288; real models hold up to some tens of
thousands): protobuf's parsed model takes about 360 bytes a node, so that many stay within 1 GiB beside the most
constants (docs/guide.md, Streaming)."""


MIN_ENTRY_LINE = 160
"""Fewer characters than any manifest entry line has besides its key and origin (the shortest, a skipped
entry's, has about 190; tests/manifest holds it to that)."""


class ConstantCount(NamedTuple):
    """How many constants a model holds and where (see the module docstring).

    ``total``: all of them; ``in_subgraphs``: those in subgraphs (of If, Loop, Scan, ... at any depth);
    ``depth``: the deepest level of subgraphs that holds one (0: none); ``name_chars``: a lower bound of the
    characters of their keys and origins; ``busiest``: the main graph's node whose subgraphs hold the most
    (its name, or ``{op_type}_{index}``), and ``under_busiest`` how many (None and 0 when there are none).
    ``graph_fields``: where each field of the main graph begins, when the model has one main graph (the byte scan
    reads them again otherwise). ``nodes``: every node of every graph, subgraph and function (Constant nodes
    included), ``nodes_in_subgraphs`` those in subgraphs and ``node_depth`` the deepest level that holds one;
    ``nodes_partial``: the count stopped at a level of more than ``max_nodes`` (``nodes`` counts the levels
    down to it, and the other counts are not whole). ``apart``: the constants of the graphs a conversion does not
    read (``training_info``'s, a function's attribute defaults', and their subgraphs), which ``total`` leaves
    out; ``nodes_apart``: the nodes of those graphs, which ``nodes`` counts."""

    total: int
    in_subgraphs: int
    depth: int
    name_chars: int
    busiest: str | None = None
    under_busiest: int = 0
    graph_fields: np.ndarray | None = None
    nodes: int = 0
    nodes_in_subgraphs: int = 0
    node_depth: int = 0
    nodes_partial: bool = False
    apart: int = 0
    nodes_apart: int = 0

    def where(self) -> str:
        """Where the constants are, for a message: ``"12 in the main graph"`` or with the subgraphs'."""
        elsewhere = "in training_info graphs and function attribute graphs, which are not converted but parsed"
        if not self.total and self.apart:
            return f"{self.apart} {elsewhere}"
        apart = f"; {self.apart} more {elsewhere}" if self.apart else ""
        if not self.in_subgraphs:
            return f"all in the main graph and functions{apart}"
        under = (f", {self.under_busiest} of them under node {self.busiest!r}" if self.busiest is not None
                 else "")
        return f"{self.in_subgraphs} in subgraphs nested up to {self.depth} deep{under}{apart}"


def check_max_constants(value: object) -> int | None:
    """``max_constants`` checked: a non-negative integer, or None (any number)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidArgumentError(f"max_constants must be a non-negative integer or None, got {value!r}")
    return value


def check_max_nodes(value: object) -> int | None:
    """``max_nodes`` checked: a non-negative integer, or None (any number)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidArgumentError(f"max_nodes must be a non-negative integer or None, got {value!r}")
    return value


def check_count(count: ConstantCount, max_constants: int | None, max_manifest_bytes: int | None,
                max_nodes: int | None = DEFAULT_MAX_NODES) -> None:
    """InvalidArgumentError when the model holds more than ``max_nodes`` nodes or ``max_constants`` constants
    (None: any number), or when their manifest would take more than ``max_manifest_bytes`` (None: none is written)
    on the lower bound of its lines alone."""
    if max_nodes is not None and count.nodes > max_nodes:
        where = (f"{count.nodes_in_subgraphs} in subgraphs nested up to {count.node_depth} deep"
                 if count.nodes_in_subgraphs else "all in the main graph and functions")
        if count.nodes_apart:
            where += (f"; {'at least ' if count.nodes_partial else ''}{count.nodes_apart} in training_info graphs "
                      "and function attribute graphs, which are not converted but parsed")
        raise InvalidArgumentError(
            f"the model holds {'at least ' if count.nodes_partial else ''}{count.nodes} nodes ({where}), more than "
            f"max_nodes={max_nodes} (--max-nodes on the "
            "command line): protobuf's parsed model takes about 360 bytes a node while a conversion runs "
            "(docs/guide.md, Streaming); raise the limit if you trust this model and have the memory"
        )
    if max_constants is not None and count.total + count.apart > max_constants:
        raise InvalidArgumentError(
            f"the model holds {count.total + count.apart} constants ({count.where()}), more than "
            f"max_constants={max_constants} "
            "(--max-constants on the command line): a conversion keeps a record of each while it runs (about 550 "
            "bytes in the main graph and 900 in subgraphs, as measured, with its key and origin, which grow with "
            "every level of subgraphs around it; docs/guide.md, "
            "Streaming); raise the limit if you trust this model and have the memory"
        )
    least = count.total * MIN_ENTRY_LINE + count.name_chars
    if max_manifest_bytes is not None and least > max_manifest_bytes:
        raise InvalidArgumentError(
            f"the manifest of these {count.total} constants would take more than max_manifest_bytes="
            f"{max_manifest_bytes} bytes ({max_manifest_bytes / 2**20:.3g} MiB; --max-manifest-bytes on the command "
            f"line), which load_plan also needs to read it: at least {least} bytes, {count.name_chars} of them "
            f"their keys and origins ({count.where()}); raise the limit on both if you trust this model"
        )


def text_bound(data: bytes, text_format: str) -> int:
    """At least as many as the nodes, and as the constants, of the text-format model ``data`` (``json``,
    ``textproto`` or ``onnxtxt``, as onnx names them), counted from its text alone, at the speed of
    ``bytes.count``: every node and every constant is a message of its own, and in JSON and protobuf's text
    format each message is written between braces (``{`` or, in text format, ``<``); in ONNX's own text syntax
    each node and each initializer has its ``=``. (Counting ``node`` tokens bounds nothing: ``"node": [{...},
    {...}]`` writes any number of nodes with one.)

        >>> text_bound(b'{"graph": {"node": [{"opType": "Relu"}, {}]}}', "json")
        4
    """
    if text_format == "onnxtxt":
        return data.count(b"=")
    return data.count(b"{") + (data.count(b"<") if text_format == "textproto" else 0)


def check_text_model(data: bytes, text_format: str, what: str, max_constants: int | None,
                     max_nodes: int | None) -> None:
    """InvalidArgumentError, before the text model ``data`` is parsed (onnx parses text models slowly: 3 MB of
    JSON take a minute and 220 MiB), when :func:`text_bound` passes ``max_nodes`` or ``max_constants``. ``what``
    names the model. The model parsed is counted exactly as a binary one is, from its serialization."""
    bound = text_bound(data, text_format)
    for limit, keyword, things in ((max_nodes, "max_nodes", "nodes"), (max_constants, "max_constants", "constants")):
        if limit is not None and bound > limit:
            marks = "'='" if text_format == "onnxtxt" else "message braces"
            raise InvalidArgumentError(
                f"{what} is a {text_format} text model of {bound} {marks}, so it may hold that many {things}, "
                f"more than {keyword}={limit} (--{keyword.replace('_', '-')} on the command line): a text model is "
                "counted from its text before it is parsed; save it as a binary .onnx (onnx.save_model) to have "
                "it counted exactly, or raise the limit if you trust it"
            )
