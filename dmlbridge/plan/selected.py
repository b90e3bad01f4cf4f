"""The constants a plan covers: a model's constants, the ones its quantized weights derive, and the selection.

Planning (``plan_model``, ``convert_model``) and verification take the same steps in the same order, here: find
each constant's consumers (with the shapes ONNX shape inference gives, ``dmlbridge.model.shapes``), describe the
quantized nodes (which may derive constants the image needs, appended
after the model's own), then keep what the selection selects (less the sources of described quantized weights
when ``drop_quantized_sources``).

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper
    >>> from dmlbridge.model.constants import find_constants
    >>> from dmlbridge.placement.selection import Selection
    >>> from dmlbridge.types.target import Target
    >>> model = helper.make_model(helper.make_graph([], "g", [], [], [
    ...     numpy_helper.from_array(np.ones(4, np.float32), "big"), numpy_helper.from_array(np.ones(1), "b")]))
    >>> chosen = select_constants(model, find_constants(model), Target(), Selection.check(min_bytes=16))
    >>> [c.key for c in chosen.constants], chosen.positions
    (['big'], [0])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from dmlbridge.model.constants import ModelConstant
from dmlbridge.model.consumers import Consumer, find_consumers
from dmlbridge.model.shapes import NO_SHAPES, GivenShapes, inferred
from dmlbridge.placement.selection import Selection
from dmlbridge.quantized.nodes import QUANTIZED_NODES, find_quantized, replaced_sources
from dmlbridge.quantized.records import QuantizedSpec
from dmlbridge.types.target import Target

__all__ = ["SelectedConstants", "select_constants"]


class SelectedConstants(NamedTuple):
    """What :func:`select_constants` found: the selected ``constants`` (derived ones after the model's own), their
    ``positions`` among all (None: every one, in order), each key's ``consumers``, the quantized nodes' ``specs``,
    and how many constants were ``derived``."""

    constants: list[ModelConstant]
    positions: list[int] | None
    consumers: dict[str, tuple[Consumer, ...]]
    specs: list[QuantizedSpec]
    derived: list[ModelConstant]


_SIZED = frozenset({"broadcast", "rank", "axis"})  # the layouts whose facts come from the shapes between nodes


def _lacks_shapes(consumers: dict[str, tuple[Consumer, ...]]) -> bool:
    """Whether a consumer's layout lacks a fact the model's declared shapes did not give (shape inference may)."""
    return any(c.layout in _SIZED and c.dims is None and c.output_sizes is None
               for read_by in consumers.values() for c in read_by)


def select_constants(
    proto: Any, found: list[ModelConstant], target: Target, selection: Selection,
    with_tensor: Callable[[int], ModelConstant] | None = None, shapes: GivenShapes = NO_SHAPES,
) -> SelectedConstants:
    """The selected constants of the model ``proto`` whose constants are ``found`` (``with_tensor``: the byte
    scan's way to read a found constant's tensor, for the quantized nodes' derived constants; ``shapes``: sizes
    the caller gave the model's free dimensions)."""
    nodes: dict[str, Any] = {}
    consumers = find_consumers(proto, found, nodes, QUANTIZED_NODES)  # (the selection reads none)
    # (found again in a copy of the graphs that shape inference gave more shapes, the sizes given set on it)
    if shapes != NO_SHAPES or _lacks_shapes(consumers):
        nodes.clear()
        consumers = find_consumers(inferred(proto, shapes), found, nodes, QUANTIZED_NODES)
    specs, derived = find_quantized(found, consumers, nodes, target, with_tensor)
    constants = [*found, *derived] if derived else found
    if selection.everything:
        return SelectedConstants(constants, None, consumers, specs, derived)
    dropped = replaced_sources(consumers, specs) if selection.drop_quantized_sources else set()
    keep = [i for i, c in enumerate(constants) if selection.selects(c.key, c.kind, c.nbytes) and c.key not in dropped]
    return SelectedConstants([constants[i] for i in keep], keep, consumers, specs, derived)
