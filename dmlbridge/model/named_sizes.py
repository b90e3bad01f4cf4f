"""The sizes a model declares and names: a value's declared shape with the ``dim_param`` names of its free
dimensions, the names a caller may give sizes to (the graph inputs'), and a node's output sizes with those names
where they are free (what :class:`~dmlbridge.model.consumers.Consumer` records as ``named_sizes``, for
``load_plan(dim_params=...)`` to give at run time); and whether sizes fit a DirectML tensor.

    >>> from onnx import helper
    >>> free_names([helper.make_tensor_value_info("x", 1, ["batch", 3])])
    frozenset({'batch'})
"""

from __future__ import annotations

import math
from typing import Any, Protocol, cast

__all__ = [
    "MOST_CHANNEL_DIMS", "MOST_ELEMENTS", "MOST_NAME", "Declared", "NamedShape", "NamedShapes", "NamedSizes", "Shape",
    "declared_shape", "fits", "free_names", "gemm_c_named", "gemm_c_window", "input_shapes", "int_attribute",
    "matmul_b_named",
    "named_axis_sizes", "named_broadcasts", "named_fits", "named_output_sizes", "text",
]

MOST_CHANNEL_DIMS = 8
"""The most dimensions a DirectML tensor has (feature level 3.0 on): a rank above it is no DirectML operator's."""
Shape = tuple[int | None, ...]
"""A value's shape as the model gives it: a constant's sizes, or a declared shape (None: a dimension the model
does not fix, a ``dim_param`` or nothing)."""
NamedShape = tuple[int | str | None, ...]
"""A declared shape with its free dimensions' ``dim_param`` names where the graph inputs name them (None: a
dimension the model neither fixes nor names so)."""
NamedSizes = tuple[int | str, ...]
"""Output sizes of which some are ``dim_param`` names of the graph inputs: sizes given at ``load_plan``."""
MOST_NAME = 4096
"""The most characters of a dim_param name a consumer's ``named_sizes`` hold (a key's most)."""
MOST_ELEMENTS = 2**32 - 1  # a DirectML tensor's most elements, and its most for one size


class Declared:
    """The shapes a graph's inputs, outputs and value_info declare (None: declared without a shape), read on first
    use, before those of the graphs around it."""

    def __init__(self, inputs: Any, outputs: Any, value_info: Any, outer: Declared | None) -> None:
        self._values, self._outer = (inputs, outputs, value_info), outer
        self._shapes: dict[str, NamedShape | None] | None = None

    def shape(self, name: str) -> Shape | None:
        named = self.named(name)
        return None if named is None else tuple(None if isinstance(size, str) else size for size in named)

    def named(self, name: str) -> NamedShape | None:
        """The declared shape with its dim_param names (see :func:`declared_shape`)."""
        if self._shapes is None:
            shapes: dict[str, NamedShape | None] = {}
            for values in self._values:
                for value in values:
                    if shapes.get(text(value.name)) is None:
                        shapes[text(value.name)] = declared_shape(value)
            self._shapes = shapes
        if name in self._shapes:
            return self._shapes[name]
        return None if self._outer is None else self._outer.named(name)


class NamedShapes(Protocol):
    """Where a node's values' shapes are looked up with their free dimensions' names."""

    def named(self, names: Any, position: int) -> NamedShape | None:
        """The shape of value ``names[position]``, with the free dimensions the graph inputs name by those names."""
        ...


def declared_shape(value: Any) -> NamedShape | None:
    """The shape a ValueInfoProto declares, with the ``dim_param`` names of its free dimensions (None: no tensor
    shape declared).

        >>> from onnx import helper
        >>> declared_shape(helper.make_tensor_value_info("x", 1, ["batch", 3, None]))
        ('batch', 3, None)
    """
    if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
        return None
    return tuple(dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else
                 text(dim.dim_param) if dim.HasField("dim_param") and 0 < len(dim.dim_param) <= MOST_NAME else None
                 for dim in value.type.tensor_type.shape.dim)

def free_names(inputs: Any) -> frozenset[str]:
    """The ``dim_param`` names of these graph inputs' free dimensions (at most MOST_NAME characters each): the
    only names a consumer's ``named_sizes`` hold (ONNX's inference invents others, ``unk__0``, which no caller
    can give)."""
    return frozenset(name for value in inputs for name in declared_shape(value) or () if isinstance(name, str))

def fits(sizes: tuple[int | None, ...]) -> tuple[int, ...] | None:
    """``sizes`` when every one is known and DirectML can hold a tensor of them, else None."""
    if any(size is None or size < 1 for size in sizes):
        return None
    known = tuple(size for size in sizes if size is not None)
    return known if math.prod(known) <= MOST_ELEMENTS and len(known) <= MOST_CHANNEL_DIMS else None

def named_fits(sizes: NamedSizes) -> NamedSizes | None:
    """``sizes`` when some are names, and the others fit DirectML's most dimensions and elements."""
    known = [size for size in sizes if isinstance(size, int)]
    if len(known) == len(sizes) or len(sizes) > MOST_CHANNEL_DIMS or math.prod(known) > MOST_ELEMENTS:
        return None
    return sizes

def named_broadcasts(shape: tuple[int, ...], sizes: NamedSizes) -> bool:
    """Whether ``shape`` broadcasts to ``sizes`` whatever their names' sizes: a 1 under each name."""
    pad = len(sizes) - len(shape)
    return pad >= 0 and all(own == 1 or own == size for own, size in zip(shape, sizes[pad:], strict=True))

def input_shapes(node: Any, read: Any) -> list[Any] | None:
    """The shape ``read(node.input, position)`` gives each input a node names, in order; None where one has none,
    or a size in it is neither known nor named (None)."""
    found = []
    for position in range(len(node.input)):
        if not node.input[position]:
            continue
        shape = read(node.input, position)
        if shape is None or None in shape:
            return None
        found.append(shape)
    return found

def named_output_sizes(node: Any, shapes: NamedShapes) -> NamedSizes | None:
    """Where ``node_sizes.output_sizes`` gives none, the output's sizes with the graph inputs' dim_param names where
    they are free (the declared output's, else its inputs' broadcast: a column of a name and 1s is the name's, of a
    name and a size more than 1 is the size); None where a size is neither known nor so named, or two names meet
    (either may be 1)."""
    declared = shapes.named(node.output, 0)
    if declared is not None and None not in declared:
        return named_fits(cast(NamedSizes, declared))
    found = cast("list[NamedSizes] | None", input_shapes(node, shapes.named))
    if not found:
        return None
    rank = max(len(shape) for shape in found)
    sizes: list[int | str] = []
    for k in range(rank):
        column = {shape[k - rank + len(shape)] for shape in found if k - rank + len(shape) >= 0} - {1}
        known = {size for size in column if isinstance(size, int)}
        if len(known) > 1 or (not known and len(column) > 1):
            return None
        sizes.append(known.pop() if known else column.pop() if column else 1)
    return named_fits(tuple(sizes))

def named_axis_sizes(node: Any, shapes: NamedShapes) -> NamedSizes | None:
    """A (de)quantization's input sizes with their dim_param names where ``node_sizes.axis_facts`` finds none."""
    x = shapes.named(node.input, 0)
    return None if x is None or None in x or not x else named_fits(cast(NamedSizes, x))

def gemm_c_window(node: Any, c: tuple[int, ...], a: Any, b: Any, y: Any) -> tuple[Any, Any] | None:
    """[M, N], the sizes GEMM reads a Gemm's C at, from the shapes of A, B and the output (sizes, names or None):
    C's own where more than 1, else M from A (by transA) or the output, N from B (by transB) or the output; None
    for a C of more than 2 dimensions or an empty one (no DirectML tensor)."""
    if len(c) > 2 or 0 in c:
        return None
    c2 = (1,) * (2 - len(c)) + c
    from_a = a[1 if int_attribute(node, "transA") else 0] if a is not None and len(a) == 2 else None
    from_b = b[0 if int_attribute(node, "transB") else 1] if b is not None and len(b) == 2 else None
    from_y = y if y is not None and len(y) == 2 else (None, None)
    return (c2[0] if c2[0] > 1 else from_a or from_y[0]), (c2[1] if c2[1] > 1 else from_b or from_y[1])


def gemm_c_named(node: Any, c: tuple[int, ...], shapes: NamedShapes) -> NamedSizes | None:
    """Where the sizes alone give none, a Gemm's C's sizes [M, N] with M or N a dim_param name of the graph
    inputs (:func:`gemm_c_window`)."""
    window = gemm_c_window(node, c, shapes.named(node.input, 0), shapes.named(node.input, 1),
                           shapes.named(node.output, 0))
    return None if window is None or None in window else named_fits(window)


def matmul_b_named(node: Any, b: tuple[int, ...], shapes: NamedShapes) -> NamedSizes | None:
    """Where :func:`_matmul_b` gives only the output's rank, a MatMul's B's sizes with the batch sizes the graph
    inputs name by their dim_params (as there: B's own where more than 1, else A's, else the output's)."""
    a, y = shapes.named(node.input, 0), shapes.named(node.output, 0)
    given = a if a is not None else y
    if len(b) < 2 or given is None or len(given) < 2:
        return None
    rank = max(len(given), len(b))
    batch: list[int | str] = []
    for k in range(rank - 2, 0, -1):
        own = b[-2 - k] if k <= len(b) - 2 else 1
        other = given[-2 - k] if k <= len(given) - 2 else 1
        out = y[-2 - k] if y is not None and len(y) == rank else None
        size = own if own > 1 else other if other is not None else out
        if size is None or (own > 1 and isinstance(other, int) and other not in (1, own)):
            return None
        batch.append(size)
    return named_fits((*batch, *b[-2:]))

def int_attribute(node: Any, name: str, default: int = 0) -> int:
    """A node's integer attribute ``name`` (``default`` where it has none)."""
    return next((int(attr.i) for attr in node.attribute if text(attr.name) == name), default)

def text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "backslashreplace")
