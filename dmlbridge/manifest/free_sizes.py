"""A format-7 manifest's free sizes: ``shapes``, the sizes the conversion was given (``input_shapes``,
``dim_params``), and ``graph_inputs``, the shapes the model's graph inputs declare with the ``dim_param`` names
``load_plan`` gives sizes to (docs/manifest.md).

    >>> graph_inputs_from_json({"x": ["batch", 3]}, "manifest.graph_inputs")
    (('x', ('batch', 3)),)
"""

from __future__ import annotations

import json
from typing import Any

from dmlbridge.errors import InvalidArgumentError, ManifestError
from dmlbridge.manifest.json_fields import INT64_MAX, Fields, kind_of, whole_number
from dmlbridge.model.named_sizes import NamedShape
from dmlbridge.model.shapes import MOST_GRAPH_INPUTS, MOST_INPUT_DIMS, GivenShapes, GraphInputs
from dmlbridge.placement.options import MAX_KEY_LENGTH

__all__ = ["graph_inputs_from_json", "graph_inputs_json", "shapes_from_json"]


def graph_inputs_json(graph_inputs: GraphInputs) -> dict[str, Any]:
    """The manifest form of ``Manifest.graph_inputs``: an object of each input's shape (an array, or null)."""
    return {name: None if shape is None else list(shape) for name, shape in graph_inputs}


def shapes_from_json(value: Any, where: str) -> GivenShapes:
    """A format-7 manifest's ``shapes``: the sizes the conversion was given, as ``GivenShapes.check`` takes them."""
    fields = Fields(value, where, ("input_shapes", "dim_params"))
    try:
        return GivenShapes.check(fields.get("input_shapes"), fields.get("dim_params"))
    except InvalidArgumentError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def graph_inputs_from_json(value: Any, where: str) -> GraphInputs:
    """A format-7 manifest's ``graph_inputs``: an object of at most MOST_GRAPH_INPUTS names (1 to MAX_KEY_LENGTH
    characters), each an array of at most MOST_INPUT_DIMS sizes (1 to 2^63 - 1), dim_param names (1 to
    MAX_KEY_LENGTH characters) or nulls, or null; one that names a free dimension at least."""
    if not isinstance(value, dict) or not 0 < len(value) <= MOST_GRAPH_INPUTS:
        raise ManifestError(f"{where} must be an object of 1 to {MOST_GRAPH_INPUTS} graph inputs' shapes, got "
                            f"{kind_of(value)}")
    inputs: list[tuple[str, NamedShape | None]] = []
    for name, shape in value.items():
        at = f"{where}[{json.dumps(name)[:80]}]"
        if not 0 < len(name) <= MAX_KEY_LENGTH:
            raise ManifestError(f"{where} has a graph input name of {len(name)} characters, not 1 to "
                                f"{MAX_KEY_LENGTH}")
        if shape is None:
            inputs.append((name, None))
            continue
        if not isinstance(shape, list) or len(shape) > MOST_INPUT_DIMS:
            raise ManifestError(f"{at} must be null or an array of at most {MOST_INPUT_DIMS} sizes, dim_param names "
                                f"or nulls, got {kind_of(shape)}")
        dims: list[int | str | None] = []
        for k, dim in enumerate(shape):
            if isinstance(dim, str) and not 0 < len(dim) <= MAX_KEY_LENGTH:
                raise ManifestError(f"{at}[{k}] must be a dim_param name of 1 to {MAX_KEY_LENGTH} characters")
            dims.append(dim if dim is None or isinstance(dim, str) else whole_number(dim, f"{at}[{k}]", 1, INT64_MAX))
        inputs.append((name, tuple(dims)))
    if not any(isinstance(dim, str) for _, shape in inputs for dim in shape or ()):
        raise ManifestError(f"{where} names no free dimension (a dim_param); a manifest records graph_inputs only "
                            "when one does")
    return tuple(inputs)
