"""Sizes given when a plan is loaded: each consumer's desc at other sizes of the model's free dimensions.

A conversion records a consumer whose output sizes are free dimensions of the model, named by a graph input's
``dim_param`` (an Add of ``x[batch, 3]``), with those names (``named_sizes``), and the graph inputs' declared
shapes (``Manifest.graph_inputs``). ``load_plan(..., input_shapes=..., dim_params=...)`` checks the sizes it is
given against them (:func:`sizes_at_load`) and gives each such consumer, and its entry, the desc a conversion
given those sizes gives (:func:`entries_at_sizes`). The bytes never change: only Sizes and Strides do, so one
conversion serves many batch sizes.

    >>> import dmlbridge, numpy as np, os, tempfile
    >>> from onnx import helper, numpy_helper
    >>> x = helper.make_tensor_value_info("x", 1, ["batch", 3])
    >>> add = helper.make_node("Add", ["x", "c"], ["y"], name="add")
    >>> c = numpy_helper.from_array(np.ones(3, np.float32), "c")
    >>> prefix = os.path.join(tempfile.mkdtemp(), "m")
    >>> dmlbridge.convert_model(helper.make_model(helper.make_graph([add], "g", [x], [], [c])), prefix,
    ...                         progress=False).close()
    >>> with dmlbridge.load_plan(prefix, dim_params={"batch": 4}) as plan:
    ...     plan.entries["c"].consumers[0].sizes, plan.entries["c"].consumers[0].strides
    ((4, 3), (0, 1))
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import replace

from dmlbridge.errors import InvalidArgumentError, LayoutError
from dmlbridge.manifest.format import Manifest
from dmlbridge.model.consumer_layouts import choose_layout
from dmlbridge.model.consumers import PER_OPERATOR_VERSION
from dmlbridge.model.shapes import NO_SHAPES, GivenShapes
from dmlbridge.placement.consumer_descs import plan_consumers
from dmlbridge.placement.entries import PlanEntry, entry_layout
from dmlbridge.types.data_types import DmlDataType

__all__ = ["entries_at_sizes", "entry_with_dim_params", "sizes_at_load"]


def sizes_at_load(manifest: Manifest, given: GivenShapes) -> dict[str, int]:
    """The size of each dim_param that ``given`` (load_plan's ``input_shapes`` and ``dim_params``) sets, with those
    the conversion was given (``manifest.shapes``); InvalidArgumentError, naming the keyword, the input and the
    dimension, for a manifest before format 7 (it records no free dimension), a name that is no graph input or
    dim_param the manifest records, a size that contradicts one the model declares or the conversion was given,
    and two sizes of one dim_param."""
    if given == NO_SHAPES:
        return {}
    keyword = "input_shapes" if given.input_shapes else "dim_params"
    if manifest.format_version < PER_OPERATOR_VERSION:
        raise InvalidArgumentError(
            f"{keyword} given, but this manifest is of format {manifest.format_version}, which records no free "
            f"dimension of the model (format {PER_OPERATOR_VERSION} does): convert the model again with this "
            "dmlbridge, or give the sizes to convert_model")
    recorded = dict(manifest.graph_inputs)
    if not recorded:
        raise InvalidArgumentError(
            f"{keyword} given, but the manifest records no graph input with a free dimension named by a dim_param "
            "(the model fixes its graph inputs' sizes, or leaves them unnamed): there is nothing to size at load; "
            "give the sizes to convert_model instead")
    converted = _converted_sizes(manifest)
    chosen: dict[str, tuple[int, str]] = {}  # dim_param -> (size, what gave it)

    def choose(name: str, size: int, what: str) -> None:
        if name in converted and converted[name] != size:
            raise InvalidArgumentError(f"{what} as {size}, but the conversion was given {name!r} = {converted[name]} "
                                       "(the manifest's shapes): the plan's descs are at that size; convert without "
                                       "it to choose it at load")
        if name in chosen and chosen[name][0] != size:
            raise InvalidArgumentError(f"{what} as {size}, but {chosen[name][1]} as {chosen[name][0]} (both are "
                                       f"dim_param {name!r})")
        chosen[name] = (size, what)

    for name, sizes in given.input_shapes:
        if name not in recorded:
            shown = ", ".join(repr(n) for n in list(recorded)[:8]) + (", ..." if len(recorded) > 8 else "")
            raise InvalidArgumentError(f"input_shapes names {name!r}, which is no graph input of the model (its "
                                       f"inputs: {shown})")
        shape = recorded[name]
        if shape is None:
            continue  # (declared without a shape: no consumer's sizes are named after it)
        if len(shape) != len(sizes):
            raise InvalidArgumentError(f"input_shapes gives {name!r} {len(sizes)} dimensions, but the model declares "
                                       f"{len(shape)}")
        for k, (declared, size) in enumerate(zip(shape, sizes, strict=True)):
            if isinstance(declared, int) and declared != size:
                raise InvalidArgumentError(f"input_shapes gives {name!r} dimension {k} as {size}, but the model "
                                           f"declares {declared}")
            if isinstance(declared, str):
                choose(declared, size, f"input_shapes gives {name!r} dimension {k} ({declared!r})")
    names = {size for shape in recorded.values() for size in shape or () if isinstance(size, str)}
    for name, size in given.dim_params:
        if name not in names:
            shown = ", ".join(repr(n) for n in sorted(names)[:8]) + (", ..." if len(names) > 8 else "")
            raise InvalidArgumentError(f"dim_params names {name!r}, which is no dim_param of the model's graph "
                                       f"inputs (they name: {shown})")
        choose(name, size, f"dim_params gives {name!r}")
    return {**converted, **{name: size for name, (size, _) in chosen.items()}}


def _converted_sizes(manifest: Manifest) -> dict[str, int]:
    """The dim_params' sizes the conversion was given: its ``dim_params``, and those its ``input_shapes`` gave the
    named dimensions of the graph inputs."""
    sizes = dict(manifest.shapes.dim_params)
    recorded = dict(manifest.graph_inputs)
    for name, given in manifest.shapes.input_shapes:
        shape = recorded.get(name)
        if shape is not None and len(shape) == len(given):
            sizes.update({dim: size for dim, size in zip(shape, given, strict=True) if isinstance(dim, str)})
    return sizes


def entries_at_sizes(manifest: Manifest, dims: Mapping[str, int]) -> Mapping[str, PlanEntry]:
    """The manifest's entries, each whose consumers name free dimensions of ``dims`` made as a conversion given
    those sizes makes it (InvalidArgumentError where DirectML cannot hold it at them)."""
    if not dims:
        return manifest.entries
    entries = dict(manifest.entries)
    for key, entry in manifest.entries.items():
        if any(consumer.named_sizes is not None for consumer in entry.consumers):
            entries[key] = entry_with_dim_params(entry, dims, manifest.min_dims,
                                                 manifest.target.max_dimension_count, manifest.format_version)
    return types.MappingProxyType(entries)


def entry_with_dim_params(entry: PlanEntry, dims: Mapping[str, int], min_dims: int, max_dims: int,
                          version: int | None = None) -> PlanEntry:
    """``entry`` with its consumers' free dimensions given by ``dims`` (dim_param name -> size): each consumer's
    facts as a conversion given those sizes records them (:meth:`Consumer.with_dim_params`), its desc and the
    entry's layout made from them by the rule of manifest format ``version``. Only Sizes and Strides change:
    InvalidArgumentError where DirectML cannot hold the entry at those sizes.

    Example:
        >>> from dmlbridge.model.consumers import Consumer
        >>> from dmlbridge.tensor.descs import BufferTensorDesc
        >>> from dmlbridge.types.data_types import OnnxDataType
        >>> desc = BufferTensorDesc(DmlDataType.FLOAT32, 0, (3,), None, 12, 256)
        >>> add = Consumer("add", "Add", 1, None, None, "gpu", "ELEMENT_WISE_ADD", "broadcast", named_sizes=("n", 3))
        >>> entry = PlanEntry("c", "initializer", OnnxDataType.FLOAT, (3,), "native", 0, desc, None,
        ...                   consumers=plan_consumers("c", (3,), (add,), desc, OnnxDataType.FLOAT, "native", 1, 8))
        >>> entry_with_dim_params(entry, {"n": 2}, 1, 8).sizes
        (2, 3)
    """
    facts = tuple(consumer.facts() for consumer in entry.consumers)
    given = tuple(consumer.with_dim_params(dims) for consumer in facts)
    if given == facts:
        return entry
    layout = choose_layout(entry.shape, given, min_dims, version)
    desc = entry.buffer_desc
    if desc is not None and entry.conversion is not None:
        try:
            sizes, strides, total = entry_layout(entry.onnx_type, entry.shape, DmlDataType(desc.data_type),
                                                 entry.conversion, min_dims, max_dims, layout)
        except LayoutError as exc:
            raise InvalidArgumentError(f"entry {entry.key!r} cannot be a DirectML tensor at the sizes given "
                                       f"({exc}); convert the model with them instead") from None
        if total != desc.total_tensor_size_in_bytes:  # (a layout sees the same bytes, whatever its sizes)
            raise LayoutError(f"entry {entry.key!r} at the sizes given would take {total} bytes, not its "
                              f"{desc.total_tensor_size_in_bytes}")
        desc = desc._replace(sizes=sizes, strides=strides)
    consumers = plan_consumers(entry.key, entry.shape, given, desc, entry.onnx_type, entry.conversion, min_dims,
                               max_dims, version)
    return replace(entry, buffer_desc=desc, padding=layout.padding, layout_note=layout.note, consumers=consumers)
