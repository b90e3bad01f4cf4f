"""The sizes and dimension counts the layouts of a node's constant inputs need, from the shapes the model gives its
values (a constant's own, or a declared one: ``shapes.of(names, position)``); None wherever the model does not give
them.

    >>> from onnx import helper
    >>> class Declared:
    ...     def of(self, names, position):
    ...         return {"x": (2, 3), "w": (3,)}.get(names[position]) if position < len(names) else None
    >>> output_sizes(helper.make_node("Add", ["x", "w"], ["y"]), Declared())
    (2, 3)
"""

from __future__ import annotations

from typing import Any, Protocol, cast

from dmlbridge.model.named_sizes import MOST_CHANNEL_DIMS, Shape, fits, gemm_c_window, input_shapes, int_attribute

__all__ = ["ShapesOf", "attention_sizes", "axis_facts", "broadcasts", "gather_dims", "gemm_c_sizes",
           "matmul_b_facts", "output_sizes"]


class ShapesOf(Protocol):
    """Where the shapes of a node's values come from: the shape of ``names[position]`` (a node's inputs or
    outputs), None where it has none or the model does not give it."""

    def of(self, names: Any, position: int) -> Shape | None: ...


def gather_dims(node: Any, shapes: ShapesOf) -> int | None:
    """A Gather's dimension count, its data's, indices' and output's: the output's rank (the data's, less one,
    plus the indices'), or the data's when that is more (0-D indices); None when the model gives neither the
    data's and indices' ranks nor the output's."""
    data, indices, output = shapes.of(node.input, 0), shapes.of(node.input, 1), shapes.of(node.output, 0)
    if data is not None and len(data) == 0:
        return None
    if data is not None and indices is not None:
        rank = len(data) - 1 + len(indices)
    elif output is not None:
        rank = len(output)
    else:
        return None
    dims = max(len(data) if data is not None else 0, rank)
    return dims if 1 <= dims <= MOST_CHANNEL_DIMS else None


def output_sizes(node: Any, shapes: ShapesOf) -> tuple[int, ...] | None:
    """The sizes of a node's output 0 where the model declares every one, else the broadcast of its inputs' sizes
    where it gives every one (numpy's rule, as ONNX's multidirectional broadcasting); None otherwise. A 0-D output
    is one element, [1]: DirectML has no tensor of no dimensions (and a manifest records at least one size)."""
    declared = shapes.of(node.output, 0)
    if declared is not None and None not in declared:
        return fits(declared or (1,))
    found = cast("list[tuple[int, ...]] | None", input_shapes(node, shapes.of))
    if not found:
        return None
    rank = max(len(shape) for shape in found)
    sizes = []
    for k in range(rank):
        column = {shape[k - rank + len(shape)] for shape in found if k - rank + len(shape) >= 0} - {1}
        if len(column) > 1:
            return None  # (they do not broadcast: a broken model's)
        sizes.append(column.pop() if column else 1)
    return fits(tuple(sizes) or (1,))


def axis_facts(node: Any, shapes: ShapesOf) -> tuple[tuple[int, ...] | None, int | None]:
    """(output_sizes, axis) of a (de)quantization's scale or zero point: its input's sizes (or its output's) and
    its ``axis`` attribute made non-negative (default 1)."""
    x = shapes.of(node.input, 0)
    if x is None or None in x:
        x = shapes.of(node.output, 0)
    if x is None or None in x or not x:
        return None, None
    axis = int_attribute(node, "axis", 1)
    axis = axis + len(x) if axis < 0 else axis
    return fits(x), axis if 0 <= axis < len(x) else None  # (a scale that fits neither: its ONNX layout, noted)


def gemm_c_sizes(node: Any, c: tuple[int, ...], shapes: ShapesOf) -> tuple[int, ...] | None:
    """The sizes GEMM wants a Gemm's C at, the output's [M, N]: C's own where they are more than 1, else M from A
    (by transA) or the output, N from B (by transB) or the output; None when the model does not give them or C
    does not broadcast to them."""
    window = gemm_c_window(node, c, shapes.of(node.input, 0), shapes.of(node.input, 1), shapes.of(node.output, 0))
    return None if window is None else fits(window)


def matmul_b_facts(node: Any, b: tuple[int, ...], shapes: ShapesOf) -> tuple[int | None, tuple[int, ...] | None]:
    """(dims, sizes) of a MatMul's B: the sizes GEMM wants it at (the output's batch sizes, numpy-broadcast from
    A's and B's, then B's last two), or where the model does not give every batch size, the output's rank."""
    if len(b) < 2 or 0 in b:
        return None, None  # (a 1-D B is a column of ONNX's making, not GEMM's B as it is; an empty one is skipped)
    a, y = shapes.of(node.input, 0), shapes.of(node.output, 0)
    if (a is not None and len(a) < 2) or (a is None and y is not None and len(y) < len(b)):
        return None, fits(b)  # a 1-D A: the output drops its M, and its batch sizes are B's own
    given = a if a is not None else y
    if given is None:
        return None, None
    rank = max(len(given), len(b))
    if rank > MOST_CHANNEL_DIMS:
        return None, None
    batch: list[int | None] = []
    for k in range(rank - 2, 0, -1):  # batch positions counted from the right, left to right
        own = b[-2 - k] if k <= len(b) - 2 else 1
        other = given[-2 - k] if k <= len(given) - 2 else 1
        if own > 1:
            batch.append(own if other in (None, 1, own) else None)
        else:
            out = y[-2 - k] if other is None and y is not None and len(y) == rank else None
            batch.append(other if other is not None else out)
    sizes = fits((*batch, *b[-2:]))
    return (None, sizes) if sizes is not None else (rank, None)


def attention_sizes(constant: tuple[int, ...], x: Shape | None) -> tuple[int, ...] | None:
    """The sizes GEMM reads an Attention's weights ``[in, 3W]`` at, ``[B, in, 3W]``, or its bias ``[3W]`` at,
    ``[B, S, 3W]``, from its input ``[B, S, in]``; None where the model does not give them."""
    if x is None or len(x) != 3 or x[0] is None or (len(constant) == 1 and x[1] is None):
        return None
    if len(constant) == 2 and x[2] in (None, constant[0]):
        return fits((x[0], *constant))
    return fits((x[0], cast(int, x[1]), *constant)) if len(constant) == 1 else None


def broadcasts(shape: tuple[int, ...], sizes: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``sizes`` (numpy's rule): a declared output that contradicts a constant is a
    broken model's, and gives no sizes."""
    pad = len(sizes) - len(shape)
    return pad >= 0 and all(own in (1, size) for own, size in zip(shape, sizes[pad:], strict=True))
