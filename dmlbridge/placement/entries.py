"""Plan entries: where each constant of a model goes in the upload image and how DirectML sees it.

:func:`place_constants` gives every constant a :class:`PlanEntry`: its DirectML type and conversion (the target's
mapping), its DML_BUFFER_TENSOR_DESC (the layout rules) and its offset (the end of the previous converted entry,
rounded up to the alignment). A constant DirectML cannot hold (an empty tensor, a string, a type the target
lacks, a shape the layout rules refuse) is *skipped*: its entry says why and has no bytes. Entries of one
(ONNX type, shape) share everything but key, origin and offset, so each pair is planned once (:class:`Pair`).

    >>> from dmlbridge.model.constants import find_constants
    >>> from dmlbridge.placement.options import PlanOptions
    >>> from onnx import helper, numpy_helper
    >>> import numpy as np
    >>> graph = helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.ones(3, np.float32), "w")])
    >>> placement = place_constants(find_constants(helper.make_model(graph)), PlanOptions.check())
    >>> placement.entries["w"].desc()["Sizes"], placement.total
    ([3], 12)
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, cast

import numpy as np

from dmlbridge.errors import (
    DmlBridgeError,
    InvalidArgumentError,
    LayoutError,
    TensorTooLargeError,
    UnsupportedTypeError,
)
from dmlbridge.model.constants import ModelConstant
from dmlbridge.model.consumer_layouts import LEADING, ConsumerLayout, Padding, choose_layout
from dmlbridge.model.consumers import Consumer
from dmlbridge.model.operators import PER_OPERATOR_VERSION, ReadsOn
from dmlbridge.placement.consumer_descs import PlanConsumer, entry_layout, plan_consumers
from dmlbridge.placement.cpu_read import CPU_READ_TARGET
from dmlbridge.placement.options import (
    MAX_BUFFER_BYTES,
    MAX_BUFFER_COUNT,
    PlanOptions,
    check_names,
    round_limit,
    smallest_max_buffer_bytes,
    what_fits,
)
from dmlbridge.tensor.descs import DML_BUFFER_BINDING, DML_BUFFER_TENSOR_DESC, DML_TENSOR_DESC, BufferTensorDesc
from dmlbridge.types.data_types import DmlDataType, OnnxDataType
from dmlbridge.types.mapping import Conversion, MappingRow, resolve

__all__ = [
    "FOUR_BIT",
    "ConvertedEntry",
    "Pair",
    "Placement",
    "PlanEntries",
    "PlanEntry",
    "entry_layout",
    "place_constants",
    "refuse_oversized",
]

FOUR_BIT = frozenset({DmlDataType.INT4, DmlDataType.UINT4})


class ConvertedEntry(Protocol):
    """A :class:`PlanEntry` that has bytes (``UploadPlan.converted`` gives these), typed with its fields filled:
    no ``None`` to test before using ``offset``, ``sizes`` or the DML type.

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.ones(3, np.float32), "w")
        >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([], "g", [], [], [w])))
        >>> entry: dmlbridge.ConvertedEntry = plan.converted[0]
        >>> entry.offset + entry.total_tensor_size_in_bytes, entry.dml_type.name
        (12, 'FLOAT32')
    """

    @property
    def key(self) -> str: ...
    @property
    def origin(self) -> str: ...
    @property
    def onnx_type(self) -> OnnxDataType: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def conversion(self) -> Conversion: ...
    @property
    def offset(self) -> int: ...
    @property
    def dml_type(self) -> DmlDataType: ...
    @property
    def sizes(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...] | None: ...
    @property
    def total_tensor_size_in_bytes(self) -> int: ...
    @property
    def guaranteed_base_offset_alignment(self) -> int: ...
    @property
    def skipped(self) -> None: ...
    @property
    def flags(self) -> int: ...
    @property
    def clamped(self) -> int | None: ...
    @property
    def padding(self) -> Padding: ...
    @property
    def layout_note(self) -> str | None: ...
    @property
    def consumers(self) -> tuple[PlanConsumer, ...]: ...
    @property
    def reads_on(self) -> ReadsOn: ...
    @property
    def buffer(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def buffer_desc(self) -> BufferTensorDesc: ...
    def desc(self) -> dict[str, Any]: ...
    def as_ctypes(self) -> DML_BUFFER_TENSOR_DESC: ...
    def as_ctypes_tensor_desc(self) -> DML_TENSOR_DESC: ...
    def as_ctypes_binding(self, resource: int) -> DML_BUFFER_BINDING: ...
    def to_json(self, version: int | None = None) -> dict[str, Any]: ...


@dataclass(frozen=True)
class PlanEntry:
    """One constant of an upload plan.

    Converted entries have a ``buffer`` (the index of their buffer file), an ``offset`` in it and their
    DML_BUFFER_TENSOR_DESC (``buffer_desc``, whose fields ``dml_type``, ``sizes``, ``strides`` — None when
    packed —, ``total_tensor_size_in_bytes``, ``guaranteed_base_offset_alignment`` and ``flags`` also read).
    Skipped entries (empty tensors, strings, complex, types the target cannot hold) have all of those None and
    say why in ``skipped``.

    Example:
        >>> import dmlbridge
        >>> desc = dmlbridge.BufferTensorDesc(dmlbridge.DmlDataType.FLOAT32, 0, (2,), None, 8, 256)
        >>> entry = dmlbridge.PlanEntry("w", "initializer", dmlbridge.OnnxDataType.FLOAT, (2,), "native", 0, desc,
        ...                             None)
        >>> entry.end, entry.sizes, entry.desc()["TotalTensorSizeInBytes"]
        (8, (2,), 8)
    """

    key: str
    origin: str
    onnx_type: OnnxDataType
    shape: tuple[int, ...]
    conversion: Conversion | None
    offset: int | None
    buffer_desc: BufferTensorDesc | None
    """The DML_BUFFER_TENSOR_DESC fields as one value (None when skipped); its ``data_type`` is a DmlDataType."""
    skipped: str | None
    clamped: int | None = None
    """For a ``"saturate"`` entry of a written plan: how many of its values were clamped to the 32-bit range
    (None before the values are read, as in ``plan_model``, and for every other conversion)."""
    padding: Padding = "leading"
    """The layout its consumers chose (:mod:`dmlbridge.model.consumer_layouts`): "leading" (the ONNX shape, leading
    1s to ``min_dims``), "channel" (a 1-D constant on axis 1), "spatial" (a convolution's weight at the convolution's
    dimension count), "rank" (leading 1s to its consumer's dimension count), "broadcast" (at the sizes its
    consumer's output gives, strides of 0 where it repeats) or "mixed" (leading: its consumers want different
    layouts). Whatever it is, the bytes are the ONNX values in C order and ``shape`` is the ONNX shape."""
    consumers: tuple[PlanConsumer, ...] = ()
    """The node inputs that read the constant (:class:`PlanConsumer`): what the model says of each, where ONNX
    Runtime's DirectML provider reads it (``reads_on``) and the desc its DirectML operator binds the bytes at."""
    buffer: int | None = None
    """The index of the buffer file holding the entry's bytes (``UploadPlan.buffers``; ``offset`` is in that
    file). None when skipped."""
    layout_note: str | None = None
    """Why the layout is not the one a consumer wants, and what to do at run time (a Gemm whose M the model does
    not declare, consumers that disagree); None when every consumer has its layout."""
    record_part: bool = False
    """Whether a quantized record (``UploadPlan.quantized``) names it as one of its parts."""

    @property
    def reads_on(self) -> ReadsOn:
        """Where its values are read: "gpu" when a consumer's DirectML operator binds it or a quantized record
        names it as a part, else "cpu" when a consumer reads it on the CPU (an attribute: a Reshape's shape), else
        "none" (only control flow, a shape, a node ONNX Runtime folds away, or no node at all)."""
        places = {consumer.reads_on for consumer in self.consumers}
        if self.record_part or "gpu" in places:
            return "gpu"
        return "cpu" if "cpu" in places else "none"

    @property
    def end(self) -> int | None:
        """The offset just past this entry's bytes (None when skipped)."""
        if self.offset is None or self.total_tensor_size_in_bytes is None:
            return None
        return self.offset + self.total_tensor_size_in_bytes

    @property
    def dml_type(self) -> DmlDataType | None:
        """The DML_TENSOR_DATA_TYPE (None when skipped)."""
        return None if self.buffer_desc is None else DmlDataType(self.buffer_desc.data_type)

    @property
    def sizes(self) -> tuple[int, ...] | None:
        """The desc's Sizes (None when skipped)."""
        return None if self.buffer_desc is None else self.buffer_desc.sizes

    @property
    def strides(self) -> tuple[int, ...] | None:
        """The desc's Strides: None when packed (and when skipped)."""
        return None if self.buffer_desc is None else self.buffer_desc.strides

    @property
    def total_tensor_size_in_bytes(self) -> int | None:
        """The desc's TotalTensorSizeInBytes (None when skipped)."""
        return None if self.buffer_desc is None else self.buffer_desc.total_tensor_size_in_bytes

    @property
    def guaranteed_base_offset_alignment(self) -> int | None:
        """The desc's GuaranteedBaseOffsetAlignment (None when skipped)."""
        return None if self.buffer_desc is None else self.buffer_desc.guaranteed_base_offset_alignment

    @property
    def flags(self) -> int:
        """DML_TENSOR_FLAGS: 0, or 1 (DML_TENSOR_FLAG_OWNED_BY_DML) when the conversion asked for it."""
        return 0 if self.buffer_desc is None else self.buffer_desc.flags

    def desc(self) -> dict[str, Any] | None:
        """The DML_BUFFER_TENSOR_DESC fields by their DirectML names (as PreparedTensor.desc()), None if skipped."""
        desc = self.buffer_desc
        return None if desc is None else desc.as_dict()

    def as_ctypes(self) -> DML_BUFFER_TENSOR_DESC:
        """A ctypes DML_BUFFER_TENSOR_DESC for this entry (InvalidArgumentError when it was skipped)."""
        desc = self.buffer_desc
        if desc is None:
            raise InvalidArgumentError(f"entry {self.key!r} was skipped ({self.skipped}); it has no desc")
        return desc.as_ctypes()

    def as_ctypes_tensor_desc(self) -> DML_TENSOR_DESC:
        """A ctypes DML_TENSOR_DESC (type BUFFER) pointing at a fresh ``as_ctypes()`` struct it keeps alive (as
        ``PreparedTensor.as_ctypes_tensor_desc``); for an array of them, use ``dmlbridge.tensor_desc_array``."""
        return DML_TENSOR_DESC.pointing_at(self.as_ctypes())

    def as_ctypes_binding(self, resource: int) -> DML_BUFFER_BINDING:
        """The DML_BUFFER_BINDING of this entry in the buffer ``resource`` (an ``ID3D12Resource*`` as an integer,
        holding the uploaded buffer file number ``buffer``): its offset and its TotalTensorSizeInBytes."""
        if self.offset is None or self.total_tensor_size_in_bytes is None:
            raise InvalidArgumentError(f"entry {self.key!r} was skipped ({self.skipped}); it has no bytes to bind")
        return DML_BUFFER_BINDING(resource, self.offset, self.total_tensor_size_in_bytes)

    def as_converted(self) -> ConvertedEntry:
        """This entry typed as converted (its fields filled); InvalidArgumentError when it was skipped.

        Example:
            >>> import dmlbridge
            >>> desc = dmlbridge.BufferTensorDesc(dmlbridge.DmlDataType.FLOAT32, 0, (2,), None, 8, 256)
            >>> entry = dmlbridge.PlanEntry("w", "initializer", dmlbridge.OnnxDataType.FLOAT, (2,), "native", 0,
            ...                             desc, None)
            >>> entry.as_converted().end
            8
        """
        if self.skipped is not None:
            raise InvalidArgumentError(f"entry {self.key!r} was skipped ({self.skipped}); it has no bytes")
        return cast(ConvertedEntry, self)

    def to_json(self, version: int | None = None) -> dict[str, Any]:
        """The manifest form of this entry, in format ``version`` (None: the current one)."""
        return {
            "key": self.key,
            "origin": self.origin,
            "onnx_type": self.onnx_type.name,
            "shape": list(self.shape),
            "conversion": self.conversion,
            "buffer": self.buffer,
            "offset": self.offset,
            "dml_type": None if self.dml_type is None else self.dml_type.name,
            "desc": self.desc(),
            "skipped": self.skipped,
            # (Left out at their defaults: a model may have 100,000 entries, most with none of these.)
            **({} if self.clamped is None else {"clamped": self.clamped}),
            **({} if self.padding == "leading" else {"padding": self.padding}),
            **({} if self.layout_note is None else {"layout_note": self.layout_note}),
            **({"consumers": [consumer.to_json(version) for consumer in self.consumers]} if self.consumers else {}),
        }


class PlanEntries(Mapping[str, PlanEntry]):
    """A plan's entries by key, in model order, each made on first access from the fields it shares with the
    entries of its (type, shape) and its own key, origin and offset: a model can hold 100,000 constants and a
    caller usually reads a few. Read-only, like the MappingProxyType of a plan read by load_plan."""

    def __init__(
        self, keys: list[str], origins: list[str], offsets: list[int | None], pairs: list[Pair],
        clamped: dict[int, int] | None = None, consumers: list[tuple[Consumer, ...]] | None = None,
        buffers: list[int | None] | None = None, views: tuple[int, int, int | None] = (1, 8, None),
        parts: frozenset[str] = frozenset(),
    ) -> None:
        self._keys, self._origins, self._offsets, self._pairs = keys, origins, offsets, pairs
        self._views = views  # (min_dims, the target's most dimensions, the format's rule): each consumer's desc
        self._parts = parts  # the keys quantized records name as parts
        # Each entry's buffer index (None when skipped); without a list, every converted entry is in buffer 0.
        self._buffers = [None if o is None else 0 for o in offsets] if buffers is None else buffers
        self._clamped = {} if clamped is None else clamped  # position -> values clamped ("saturate")
        no_consumers: tuple[Consumer, ...] = ()
        self._consumers = [no_consumers] * len(keys) if consumers is None else consumers
        self._positions: dict[str, int] | None = None  # made on first lookup
        self._made: list[PlanEntry | None] = [None] * len(keys)

    def with_clamped(self, clamped: dict[int, int]) -> PlanEntries:
        """These entries, with how many values each ``"saturate"`` one (by position) had clamped."""
        return PlanEntries(self._keys, self._origins, self._offsets, self._pairs, {**self._clamped, **clamped},
                           self._consumers, self._buffers, self._views, self._parts)

    def with_parts(self, parts: frozenset[str]) -> PlanEntries:
        """These entries, with the keys that quantized records name as parts (``PlanEntry.record_part``)."""
        return PlanEntries(self._keys, self._origins, self._offsets, self._pairs, self._clamped, self._consumers,
                           self._buffers, self._views, parts)

    @property
    def _index(self) -> dict[str, int]:
        if self._positions is None:
            self._positions = {key: i for i, key in enumerate(self._keys)}
        return self._positions

    def __getitem__(self, key: str) -> PlanEntry:
        return self.at(self._index[key])

    def at(self, i: int, *, keep: bool = True) -> PlanEntry:
        """The entry of the ``i``-th constant (no lookup by key: the image writer goes through them in order);
        ``keep=False`` makes it without keeping it (the writer and the manifest read each entry once: a million
        entries kept would take a few hundred MB)."""
        entry = self._made[i]
        if entry is None:
            fields, key = self._pairs[i].fields, self._keys[i]
            consumers = plan_consumers(key, fields["shape"], self._consumers[i], fields["buffer_desc"],
                                       fields["onnx_type"], fields["conversion"], *self._views) \
                if self._consumers[i] else ()
            entry = PlanEntry(
                **{**fields, "key": key, "origin": self._origins[i], "offset": self._offsets[i],
                   "clamped": self._clamped.get(i), "consumers": consumers, "buffer": self._buffers[i],
                   "record_part": key in self._parts}
            )
            if keep:
                self._made[i] = entry
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __repr__(self) -> str:
        return f"<{len(self)} plan entries>"

    def columns(self) -> tuple[list[str], list[str], list[int | None], list[Pair]]:
        """Every entry's key, origin, offset and pair, without making the entries (the manifest writer's input)."""
        return self._keys, self._origins, self._offsets, self._pairs

    @property
    def consumers(self) -> list[tuple[Consumer, ...]]:
        """Every entry's consumers, in order (the manifest writer's input)."""
        return self._consumers

    @property
    def buffers(self) -> list[int | None]:
        """Every entry's buffer index (None when skipped), in order (the manifest writer's input)."""
        return self._buffers

    @property
    def clamped(self) -> dict[int, int]:
        """The positions of the entries with a count of clamped values, and the counts."""
        return self._clamped


_ENTRY_FIELDS = (
    "key", "origin", "onnx_type", "shape", "conversion", "offset", "buffer_desc", "skipped",
)


class Pair(NamedTuple):
    """What the entries of one (ONNX type, shape) share: a model repeats both, so each pair is planned once.

    ``fields``: a PlanEntry's fields with key, origin and offset None; ``total``: TotalTensorSizeInBytes, -1 when
    the pair is skipped; ``error``: the error class a skip raises under strict=True; ``as_is``: its stored bytes
    are its DirectML bytes (a "native" conversion; 4-bit types aside: their spare nibble must be zeroed).
    """

    fields: dict[str, Any]
    total: int
    error: type[DmlBridgeError]
    conversion: Conversion | None
    dml_type: DmlDataType | None
    as_is: bool


class Placement(NamedTuple):
    """The plan of a model's constants: the entries, each constant's offset in its buffer (None when skipped) and
    pair, in the constants' order, the size of the image (every buffer's bytes), and per buffer its size and the
    position of its first constant."""

    entries: PlanEntries
    offsets: list[int | None]
    pairs: list[Pair]
    total: int
    buffer_sizes: tuple[int, ...] = (0,)
    buffer_starts: tuple[int, ...] = (0,)
    oversized: int | None = None
    """The position of the first constant larger than ``max_buffer_bytes`` (alone in its buffer), if any."""
    fitting: int | None = None
    """With ``oversized``: the round ``max_buffer_bytes`` with which every constant fits (None: there is none)."""
    uploaded_buffers: int | None = None
    """How many buffers, from the first, are uploaded: the rest hold the constants read on the CPU
    (:mod:`dmlbridge.placement.cpu_read`). None: every buffer."""

    def buffer_range(self, buffer: int) -> slice:
        """The positions of the constants in buffer ``buffer`` (skipped ones between them included)."""
        stop = self.buffer_starts[buffer + 1] if buffer + 1 < len(self.buffer_starts) else len(self.offsets)
        return slice(self.buffer_starts[buffer], stop)

    def converted_ranges(self, buffer: int) -> tuple[np.ndarray, np.ndarray]:
        """The offsets and TotalTensorSizeInBytes of buffer ``buffer``'s converted constants, in order, as arrays
        (what its fingerprint samples; no list of them: a buffer may hold a million)."""
        within = self.buffer_range(buffer)
        count = within.stop - within.start
        totals = np.fromiter(map(_TOTAL, itertools.islice(self.pairs, within.start, within.stop)), np.int64, count)
        converted = totals >= 0
        kept = int(np.count_nonzero(converted))
        offsets = np.fromiter(itertools.compress(itertools.islice(self.offsets, within.start, within.stop),
                                                 converted.tolist()), np.int64, kept)
        return offsets, totals[converted]


_TOTAL = operator.attrgetter("total")


def place_constants(
    constants: list[ModelConstant], options: PlanOptions, consumers: dict[str, tuple[Consumer, ...]] | None = None,
    version: int | None = None, cpu_read: frozenset[str] = frozenset(),
) -> Placement:
    """Plan every constant, in order (see the module docstring); ``consumers``: the nodes that read each, by key
    (:func:`dmlbridge.model.consumers.find_consumers`), which choose each constant's layout, by the rule of
    manifest format ``version`` (None: the current one; verification plans by a manifest's own).

    Buffers: a new buffer starts where the next converted constant would end past ``options.max_buffer_bytes``.
    A constant larger than that is planned alone in a buffer and noted in ``oversized``: :func:`refuse_oversized`
    refuses it once the checks that come first (``max_tensor_bytes``) have been made.

    ``cpu_read``: the keys of the constants kept out of the upload buffers (``upload="bound"``), which come last
    (:func:`~dmlbridge.placement.cpu_read.upload_order`): the first of them begins a buffer, and each keeps its ONNX
    type (``CPU_READ_TARGET``'s mapping). Verification, which reads only the pairs, may pass them in model order."""
    readers = {} if consumers is None else consumers
    rule = PER_OPERATOR_VERSION if version is None else version
    # Only a constant some layout input reads can be laid out otherwise than with leading 1s: the others (all but
    # a few) are looked up by (type, shape) alone.
    per_layout = {key for key, read_by in readers.items()
                  if any(c.layout is not None or c.note is not None or c.layout_rule(rule) for c in read_by)}
    alignment = options.alignment
    keys: list[str] = []
    origins: list[str] = []
    offsets: list[int | None] = []
    pairs: list[Pair] = []
    buffers: list[int | None] = []
    buffer_sizes: list[int] = []
    buffer_starts = [0]
    limit = options.max_buffer_bytes
    oversized: int | None = None
    end = 0
    pair_of: dict[tuple[Any, ...], Pair] = {}
    rows: dict[tuple[OnnxDataType, bool], MappingRow] = {}
    get_pair, add_key, add_origin, add_pair = pair_of.get, keys.append, origins.append, pairs.append
    add_offset, add_buffer = offsets.append, buffers.append
    buffer = 0
    uploaded_buffers: int | None = None
    for constant in constants:  # (a model may hold 100,000 constants: the usual path does as little as it can)
        key, onnx_type, shape = constant.key, constant.onnx_type, constant.shape
        add_key(key)
        add_origin(constant.origin)
        layout = LEADING
        if per_layout and key in per_layout:
            layout = choose_layout(shape, readers[key], options.min_dims, version)
        on_cpu = bool(cpu_read) and key in cpu_read
        pair_key: tuple[Any, ...] = (onnx_type, shape) if layout is LEADING else (onnx_type, shape, layout)
        if on_cpu:
            pair_key += (CPU_READ_TARGET,)
        pair = get_pair(pair_key)
        if pair is None:
            row_key = (onnx_type, on_cpu)
            row = rows.get(row_key)
            if row is None:
                row = rows[row_key] = resolve(onnx_type, CPU_READ_TARGET if on_cpu else options.target)
            pair = pair_of[pair_key] = _plan_pair(onnx_type, shape, row, options, layout)
        add_pair(pair)
        total = pair.total
        if total < 0:
            add_offset(None)
            add_buffer(None)
            continue
        offset = -(-end // alignment) * alignment
        if on_cpu and uploaded_buffers is None:  # (the first CPU-read constant begins the buffers not uploaded)
            uploaded_buffers = buffer + (end > 0)
            if end > 0:
                buffer_sizes.append(end)
                buffer_starts.append(len(keys) - 1)
                buffer, offset, end = buffer + 1, 0, 0
        if offset + total > limit:  # (rare: the next buffer, or a constant no buffer holds)
            if total > limit and oversized is None:
                oversized = len(keys) - 1  # (refused by refuse_oversized, after the checks that come first)
            if end > 0:
                buffer_sizes.append(end)  # the next buffer starts here
                buffer_starts.append(len(keys) - 1)
                buffer, offset = buffer + 1, 0
        add_offset(offset)
        add_buffer(buffer)
        end = offset + total
    check_names(keys, origins)
    buffer_sizes.append(end)
    fitting = None
    if oversized is not None or len(buffer_sizes) > MAX_BUFFER_COUNT:  # (the refusal names a limit that works)
        fitting = _fitting_limit(pairs, alignment)
    if len(buffer_sizes) > MAX_BUFFER_COUNT:
        raise InvalidArgumentError(
            f"max_buffer_bytes={limit} splits this model's constants into more than {MAX_BUFFER_COUNT} buffers, the "
            f"most a conversion writes; {what_fits(fitting)}"
        )
    each = [readers.get(key, ()) for key in keys] if readers else None
    entries = PlanEntries(keys, origins, offsets, pairs, None, each, buffers,
                          (options.min_dims, options.target.max_dimension_count, version))
    return Placement(entries, offsets, pairs, sum(buffer_sizes), tuple(buffer_sizes), tuple(buffer_starts), oversized,
                     fitting, uploaded_buffers)


def _fitting_limit(pairs: list[Pair], alignment: int) -> int | None:
    """The round max_buffer_bytes with which every converted constant fits a buffer (and few enough buffers are
    written), None when there is none (see smallest_max_buffer_bytes and round_limit)."""
    smallest = smallest_max_buffer_bytes([pair.total for pair in pairs if pair.total >= 0], alignment)
    return None if smallest is None else round_limit(smallest, alignment)


def refuse_oversized(constants: list[ModelConstant], placement: Placement, limit: int) -> None:
    """TensorTooLargeError for the first constant larger than ``max_buffer_bytes`` (a tensor is never split):
    an image without its largest tensors would be of no use. It names the limit with which the whole model
    converts, so that one retry is enough."""
    if placement.oversized is not None:
        raise _too_large_for_a_buffer(constants[placement.oversized], placement.pairs[placement.oversized].total, limit,
                                      placement.fitting)


def _too_large_for_a_buffer(constant: ModelConstant, total: int, limit: int,
                            fitting: int | None) -> TensorTooLargeError:
    over = (" It is larger than any upload buffer Direct3D 12 makes (0xFFFF0000 bytes), so it cannot be uploaded "
            "in one piece: leave it out (exclude)." if total > MAX_BUFFER_BYTES else
            f" To convert the model, {what_fits(fitting)}.")
    return TensorTooLargeError(
        f"constant {constant.key!r} ({constant.origin}) takes {total} bytes ({constant.onnx_type.name} "
        f"{list(constant.shape)}), more than max_buffer_bytes={limit}: a tensor is never split across buffers."
        + over
    )


def _plan_pair(
    onnx_type: OnnxDataType, shape: tuple[int, ...], row: MappingRow, options: PlanOptions, layout: ConsumerLayout,
) -> Pair:
    fields: dict[str, Any] = dict.fromkeys(_ENTRY_FIELDS)
    fields["onnx_type"], fields["shape"], fields["padding"] = onnx_type, shape, layout.padding
    fields["layout_note"] = layout.note
    if row.dml_type is None:
        fields["skipped"] = f"{onnx_type.name}: {row.reason}"
        return Pair(fields, -1, UnsupportedTypeError, None, None, False)
    if 0 in shape:
        fields["skipped"] = f"empty tensor (shape {list(shape)}): DirectML has no empty tensors"
        return Pair(fields, -1, LayoutError, None, None, False)
    try:
        sizes, strides, total = entry_layout(onnx_type, shape, row.dml_type, row.conversion, options.min_dims,
                                             options.target.max_dimension_count, layout)
    except LayoutError as exc:
        fields["skipped"] = str(exc)
        return Pair(fields, -1, LayoutError, None, None, False)
    fields.update(conversion=row.conversion,
                  buffer_desc=BufferTensorDesc(row.dml_type, options.flags, sizes, strides, total, options.alignment))
    as_is = row.conversion == "native" and row.dml_type not in FOUR_BIT
    return Pair(fields, total, DmlBridgeError, row.conversion, row.dml_type, as_is)
