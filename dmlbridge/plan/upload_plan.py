"""The upload plan: what a conversion writes (or would write), as an object to read bytes and descs from.

An :class:`UploadPlan` maps each constant's key to a :class:`~dmlbridge.placement.entries.PlanEntry`. It comes from
:func:`plan_model` (nothing written), ``convert_model`` (the files it wrote) or :func:`load_plan` (a manifest and
its buffer files, validated: the manifest by :mod:`dmlbridge.manifest.format`, each buffer file by its size, its
fingerprint and, when asked, its SHA-256). A written plan reads its entries' bytes from its buffer files one entry at
a time, on request.
"""

from __future__ import annotations

import os
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, cast

import numpy as np

from dmlbridge.errors import InvalidArgumentError, ManifestError, TensorTooLargeError, counted
from dmlbridge.manifest.format import BufferFile, Manifest, manifest_document, parse_manifest, read_manifest_file
from dmlbridge.model.byte_scan import BytesScan
from dmlbridge.model.constants import ModelConstant, collector_paused, iter_external_tensors
from dmlbridge.model.onnx_file import LoadedModel, model_constants, read_model
from dmlbridge.model.shapes import NO_SHAPES, GivenShapes, recorded_inputs
from dmlbridge.placement.cpu_read import cpu_read_keys, upload_order
from dmlbridge.placement.entries import (
    ConvertedEntry,
    Pair,
    Placement,
    PlanEntry,
    entry_layout,
    place_constants,
    refuse_oversized,
)
from dmlbridge.placement.options import (
    DEFAULT_MAX_BUFFER_BYTES,
    DEFAULT_MAX_CONSTANTS,
    DEFAULT_MAX_MANIFEST_BYTES,
    DEFAULT_MAX_NODES,
    DEFAULT_MAX_TENSOR_BYTES,
    DEFAULT_TARGET,
    PlanOptions,
    check_flag,
    check_max_constants,
    check_max_nodes,
    check_max_tensor_bytes,
)
from dmlbridge.placement.selection import EVERY_CONSTANT, Selection
from dmlbridge.plan.buffer_binding import Binding
from dmlbridge.plan.external_files import examine_external_data
from dmlbridge.plan.fingerprint import fingerprint_problem
from dmlbridge.plan.load_shapes import entries_at_sizes, sizes_at_load
from dmlbridge.plan.open_buffers import BufferFileMissingError, OpenBuffers
from dmlbridge.plan.selected import select_constants
from dmlbridge.plan.verify import find_mismatches
from dmlbridge.quantized.records import (
    QuantizedWeight,
    check_zero_scales,
    part_keys,
    quantized_views,
    spec_part_keys,
)
from dmlbridge.system.aligned import empty_aligned
from dmlbridge.system.bytes_view import as_bytes
from dmlbridge.tensor.decode import decode
from dmlbridge.tensor.encode import PreparedTensor
from dmlbridge.types.target import Target
from dmlbridge.version import __version__

__all__ = ["ModelAndPlan", "UploadPlan", "load_plan", "plan_loaded", "plan_model", "plan_with_notes",
           "raise_if_skipped", "read_plan"]

_LOAD_ATTEMPTS = 5  # manifests read while other conversions publish (see read_plan)


@dataclass(frozen=True, eq=False)
class UploadPlan(Manifest):
    """An upload image's layout: which buffer and offset each constant of a model has, and how DirectML sees it.

    ``entries`` maps each key to its :class:`PlanEntry`, in model order; the fields a manifest holds are
    :class:`~dmlbridge.manifest.format.Manifest`'s. A written plan (from ``convert_model`` or :func:`load_plan`) lists
    its ``buffers`` (:class:`~dmlbridge.manifest.format.BufferFile`), holds them open and reads them through the open
    files; ``bin_path`` is the buffer file's path when there is one. A plan from :func:`plan_model` has none.

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.arange(3, dtype=np.float32), "w")
        >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([], "g", [], [], [w])))
        >>> plan.total_size, plan.entries["w"].dml_type.name
        (12, 'FLOAT32')
    """

    manifest_path: str | None = None
    load_sizes: tuple[tuple[str, int], ...] = ()
    """The sizes :func:`load_plan` gave the model's free dimensions, by dim_param name, sorted (its
    ``input_shapes=`` turned into the dim_params they name, with those the conversion was given): the consumers'
    descs and the entries' layouts are at them. Verification compares the model's consumers at them too."""
    _files: OpenBuffers | None = field(default=None, repr=False, compare=False)

    def __eq__(self, other: object) -> bool:
        """Plans are equal when their manifests say the same (wherever their files are)."""
        if not isinstance(other, UploadPlan):
            return NotImplemented
        return self is other or manifest_document(self) == manifest_document(other)

    __hash__ = None  # type: ignore[assignment]  # (mutable-looking: equal by content, like a dict)

    def __repr__(self) -> str:
        where = f", manifest_path={self.manifest_path!r}" if self.manifest_path else ""
        return (f"UploadPlan(<{counted(len(self.entries), 'entry', 'entries')}>, target={self.target.describe()}, "
                f"total_size={self.total_size}, buffers={len(self.buffers)}{where})")

    @property
    def bin_path(self) -> str | None:
        """The path of the buffer file, when the plan was written and has one (``buffers[0].path``)."""
        return self.buffers[0].path if len(self.buffers) == 1 else None

    @property
    def quantized(self) -> Mapping[str, QuantizedWeight]:
        """The quantized weights of the model (MatMulNBits, DequantizeLinear, GatherBlockQuantized nodes), by node
        key: the three descs of each over this plan's image (see :mod:`dmlbridge.quantized.records`); ``dequantize()``
        reads them from the buffer files of a written plan."""
        if not self.quantized_records:
            return types.MappingProxyType({})
        read = self.read if self._files is not None else None
        return types.MappingProxyType({key: replace(q, _read=read) for key, q in self.quantized_records.items()})

    def close(self) -> None:
        """Close the buffer files the plan holds open (a written plan keeps reading the files it checked)."""
        if self._files is not None:
            self._files.close()

    def __enter__(self) -> UploadPlan:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def converted(self) -> list[ConvertedEntry]:
        """The entries that have bytes in a buffer file, in manifest (model) order, typed with their fields filled
        (:class:`~dmlbridge.placement.entries.ConvertedEntry`: ``offset``, ``dml_type``, ``sizes``, ... are never
        None)."""
        return [cast(ConvertedEntry, e) for e in self.entries.values() if e.skipped is None]

    @property
    def skipped(self) -> list[PlanEntry]:
        """The entries that could not be converted."""
        return [e for e in self.entries.values() if e.skipped is not None]

    def manifest(self) -> dict[str, Any]:
        """The manifest (the JSON document of ``PREFIX.json``) as a dict."""
        return manifest_document(self)

    def _entry(self, key: str) -> PlanEntry:
        entry = self.entries.get(key) if isinstance(key, str) else None
        if entry is None:
            raise InvalidArgumentError(f"the plan has no entry {key!r}")
        if entry.skipped is not None:
            raise InvalidArgumentError(f"entry {key!r} was skipped ({entry.skipped}); it has no bytes")
        return entry

    def _open_files(self) -> OpenBuffers:
        """The buffer files, held open (InvalidArgumentError for a plan that was not written): verification's
        own access to them."""
        if self._files is None:
            raise InvalidArgumentError("this plan was not written (plan_model); it has no buffer file to read")
        return self._files

    def read(self, key: str, *, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> np.ndarray:
        """The entry's bytes in its buffer file (``total_tensor_size_in_bytes`` of them), read now, as a uint8
        array: from the file the plan checked when it was loaded or written, whatever has become of its name. An
        entry larger than ``max_tensor_bytes`` is refused (TensorTooLargeError) before anything is allocated."""
        entry = self._entry(key)
        files = self._open_files()
        assert entry.offset is not None and entry.total_tensor_size_in_bytes is not None
        size = entry.total_tensor_size_in_bytes
        if size > check_max_tensor_bytes(max_tensor_bytes):
            raise TensorTooLargeError(
                f"entry {key!r} holds {counted(size, 'byte')}, more than max_tensor_bytes={max_tensor_bytes}; pass a "
                "larger max_tensor_bytes= to read it if you have the memory"
            )
        try:
            out = empty_aligned(size)
            files.read_into(entry.buffer or 0, entry.offset, out)
        except MemoryError:
            raise TensorTooLargeError(
                f"entry {key!r} holds {size} bytes and the allocation failed; free memory, or read a smaller entry"
            ) from None
        return out

    def buffer_problems(self, *, sha256: bool = False) -> list[str]:
        """Why the buffer files do not match the manifest (empty when they do): their size and fingerprint, and
        with ``sha256`` their SHA-256 (ManifestError when none was recorded)."""
        return [message for _, message in self.buffer_checks(sha256=sha256)]

    def buffer_checks(self, *, sha256: bool = False, fingerprint: bool = True) -> list[tuple[str, str]]:
        """:meth:`buffer_problems`, each with what failed: ``"size"``, ``"fingerprint"`` or ``"sha256"``;
        ``fingerprint=False``: the sizes alone (and the SHA-256 when asked), the sampled bytes left unread."""
        files = self._open_files()
        offsets: list[list[int]] = [[] for _ in self.buffers]
        totals: list[list[int]] = [[] for _ in self.buffers]
        for entry in self.converted:
            offsets[entry.buffer].append(entry.offset)
            totals[entry.buffer].append(entry.total_tensor_size_in_bytes)
        problems = []
        for index, buffer in enumerate(self.buffers):
            size = files.size(index)
            if size != buffer.size:
                problems.append(("size",
                    f"the buffer file {buffer.path!r} holds {counted(size, 'byte')} but the manifest says "
                    f"{buffer.size}; the two files do not belong together (or one was cut short)"
                ))
                continue
            problem = fingerprint_problem(files.fd(index), buffer.path, buffer.fingerprint, buffer.size,
                                          offsets[index], totals[index]) if fingerprint else None
            if problem is not None:
                problems.append(("fingerprint", problem))
            elif sha256:
                if buffer.sha256 is None:
                    raise ManifestError(
                        "verify=True, but the manifest records no SHA-256 of its buffer files; convert with "
                        "checksum=True (--checksum)"
                    )
                digest = files.sha256(index)
                if digest != buffer.sha256:
                    problems.append(("sha256",
                        f"the buffer file {buffer.path!r} has SHA-256 {digest}, but the manifest records "
                        f"{buffer.sha256}; the file is corrupt or belongs to another manifest"
                    ))
        return problems

    def bindings(self) -> list[Binding]:
        """What each uploaded entry's DML_BUFFER_BINDING needs, in plan order: its key, the index of its buffer
        (in ``buffers``: bind the resource that buffer file was uploaded into), its offset in that buffer and its
        size (TotalTensorSizeInBytes). ``Binding.as_ctypes(resources)`` makes the struct. The entries read on the
        CPU (``upload="bound"``: in the buffers after the first :attr:`upload_buffer_count`) have none.

        Example:
            >>> import dmlbridge, numpy as np
            >>> from onnx import helper, numpy_helper
            >>> ws = [numpy_helper.from_array(np.ones(64, np.float32), name) for name in ("a", "b")]
            >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([], "g", [], [], ws)),
            ...                             max_buffer_bytes=256)
            >>> plan.bindings()
            [Binding(key='a', buffer=0, offset=0, size=256), Binding(key='b', buffer=1, offset=0, size=256)]
        """
        uploaded = self.upload_buffer_count
        return [Binding(e.key, e.buffer, e.offset, e.total_tensor_size_in_bytes) for e in self.converted
                if (e.buffer or 0) < uploaded]

    def read_buffer(self, index: int, offset: int, out: np.ndarray) -> None:
        """Fill ``out`` (a writable, contiguous uint8 array) with buffer file ``index``'s bytes from ``offset``."""
        self._open_files().read_checked(index, offset, out)

    def array_from(self, key: str, data: Any) -> np.ndarray:
        """The entry's ONNX values, as :meth:`array` gives them, from ``data``: its bytes read elsewhere (a GPU)."""
        if (raw := as_bytes(data, "data")).size != (size := self._entry(key).total_tensor_size_in_bytes):
            raise InvalidArgumentError(f"entry {key!r} holds {size} bytes; data has {raw.size}")
        return self._prepared(key, DEFAULT_MAX_TENSOR_BYTES, as_onnx=True, data=raw).to_numpy()

    def _prepared(self, key: str, max_tensor_bytes: int, as_onnx: bool = False, data: Any = None) -> PreparedTensor:
        # The buffer file's bytes (or ``data``); ``as_onnx``: seen through the ONNX shape's packed desc (what they are).
        entry = self._entry(key)
        assert entry.buffer_desc is not None and entry.conversion is not None and entry.dml_type is not None
        desc = entry.buffer_desc
        if as_onnx:
            sizes, strides, total = entry_layout(entry.onnx_type, entry.shape, entry.dml_type, entry.conversion, 1,
                                                 self.target.max_dimension_count)
            desc = desc._replace(sizes=sizes, strides=strides, total_tensor_size_in_bytes=total)
        return PreparedTensor(
            onnx_type=entry.onnx_type,
            conversion=entry.conversion,
            buffer_desc=desc,
            data=self.read(key, max_tensor_bytes=max_tensor_bytes) if data is None else data,
            source_dtype=entry.onnx_type.numpy(),
            source_shape=entry.shape,
            element_strides=None,  # (the ONNX shape's bytes are packed)
        )

    def dml_array(self, key: str, *, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> np.ndarray:
        """The entry as DirectML sees it: its bytes decoded as ``dml_type`` with the desc's sizes and strides (a
        broadcast entry's repeated elements too)."""
        prepared = self._prepared(key, max_tensor_bytes)
        return decode(prepared.data, prepared.dml_type, prepared.sizes, prepared.strides)

    def array(self, key: str, *, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> np.ndarray:
        """The entry's original ONNX values read back from its buffer file: the dtype
        ``onnx.numpy_helper.to_array`` gives and the ONNX shape, whatever layout its consumers chose. (A "lossy"
        DOUBLE entry gives its FLOAT32-rounded values.) Entries over ``max_tensor_bytes`` are refused, as
        :meth:`read` does."""
        return self._prepared(key, max_tensor_bytes, as_onnx=True).to_numpy()

    def verify(
        self,
        model: Any,
        *,
        base_dir: str | os.PathLike[str] | None = None,
        external_data_root: str | os.PathLike[str] | None = None,
        max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
        progress: bool | None = None,
        workers: int | None = None,
        sha256: bool | None = None,
        max_constants: int | None = DEFAULT_MAX_CONSTANTS, max_nodes: int | None = DEFAULT_MAX_NODES,
    ) -> None:
        """Check that the plan is exactly ``model``'s constants: the same keys, types and shapes, the bytes a
        fresh conversion gives, and values that read back bit for bit (NaN payloads included), and that each
        buffer file matches its fingerprint and, with ``sha256`` (None, the default: when the
        manifest records them), its SHA-256. ``max_constants``, ``max_nodes``: as ``convert_model`` takes them (a
        model of more constants or nodes is refused before it is parsed). The buffer files are read once, front to
        back, within the memory budget conversion keeps. ``progress``: a bar on stderr, as ``convert_model`` shows
        (None: when stderr is a terminal). ``workers``: threads comparing constants of 1 MiB and more (None, the
        default: every CPU this process may use; 1: none), as ``convert_model`` takes it.

        Raises ManifestError listing the mismatches.
        """
        if progress is not None and not isinstance(progress, bool):
            raise InvalidArgumentError(f"progress must be None, True or False, not {progress!r}")
        if sha256 is None:
            sha256 = bool(self.buffers) and all(buffer.sha256 is not None for buffer in self.buffers)
        problems = find_mismatches(
            self, model, base_dir=base_dir, external_data_root=external_data_root, max_tensor_bytes=max_tensor_bytes,
            progress=progress, workers=workers, sha256=sha256, max_constants=max_constants, max_nodes=max_nodes,
        )
        if problems:
            shown = "; ".join(problems[:10]) + ("; ..." if len(problems) > 10 else "")
            found = counted(len(problems), "mismatch", "mismatches")
            raise ManifestError(f"the plan does not match the model ({found}): {shown}")



def plan_model(
    model: Any,
    *,
    target: Target = DEFAULT_TARGET,
    alignment: int = 256,
    min_dims: int | None = None,
    strict: bool = False,
    base_dir: str | os.PathLike[str] | None = None,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
    min_bytes: int = 0,
    drop_quantized_sources: bool = False,
    max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES,
    max_constants: int | None = DEFAULT_MAX_CONSTANTS,
    max_nodes: int | None = DEFAULT_MAX_NODES,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    dim_params: Mapping[str, int] | None = None,
    upload: str = "bound",
) -> UploadPlan:
    """The plan :func:`convert_model` would write, computed from the model's protobuf alone (no value is decoded
    and no external file opened, so value errors such as an INT64 too large to narrow are not found here).

    The result has no buffer file: its entries, buffers, offsets and sizes are what conversion gives, so
    ``buffer_sizes`` tells how many buffers a ``max_buffer_bytes`` gives, before anything is written. Every keyword
    is ``convert_model``'s (the selection, the limits, the free sizes, ``upload``).

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
        >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([], "g", [], [], [w])), min_dims=4)
        >>> plan.entries["w"].sizes
        (1, 1, 2, 3)
    """
    options = PlanOptions.check(target, alignment, min_dims, 0, max_buffer_bytes, input_shapes, dim_params, upload)
    strict = check_flag("strict", strict)
    selection = Selection.check(include, exclude, kinds, min_bytes, drop_quantized_sources)
    return plan_with_notes(model, options, selection, strict, base_dir,
                           max_constants=check_max_constants(max_constants), max_nodes=check_max_nodes(max_nodes))[0]


def plan_with_notes(
    model: Any, options: PlanOptions, selection: Selection, strict: bool,
    base_dir: str | os.PathLike[str] | None = None, *, open_external_data: bool = False,
    external_data_root: str | os.PathLike[str] | None = None, max_constants: int | None = DEFAULT_MAX_CONSTANTS,
    max_nodes: int | None = DEFAULT_MAX_NODES,
) -> tuple[UploadPlan, dict[str, str]]:
    """:func:`plan_model` of checked options, and per key what it did not check (``dmlbridge inspect``'s note
    column): "external data" and "values must fit 32 bits" (INT64/UINT64 narrowed or emulated).

    With ``open_external_data`` each external data file the planned constants keep their values in is opened and
    checked as a conversion checks it, none of its bytes read (:meth:`ExternalDataReader.examine`): a missing one
    is the ExternalDataError conversion gives (``external_data_root``: as convert_model's)."""
    with read_model(model, base_dir, max_constants=max_constants, max_nodes=max_nodes) as loaded, \
            collector_paused():  # (closes the dir)
        model_plan = plan_loaded(loaded, options, strict, selection)
        if open_external_data:  # (what the plan does not skip)
            entries = model_plan.plan.entries
            examine_external_data(loaded, [c for c in model_plan.not_in_the_bytes()
                                           if c.key not in entries or not entries[c.key].skipped], external_data_root)
    refuse_oversized(model_plan.constants, model_plan.placement, options.max_buffer_bytes)
    notes: dict[str, list[str]] = {}
    for constant in model_plan.constants:
        if next(iter_external_tensors([constant]), None) is not None:
            notes.setdefault(constant.key, []).append("external data")
    for entry in model_plan.plan.converted:
        if entry.conversion in ("narrow", "emulate"):
            notes.setdefault(entry.key, []).append("values must fit 32 bits")
        elif entry.conversion == "saturate":
            notes.setdefault(entry.key, []).append("values clamped to 32 bits not counted")
    return model_plan.plan, {key: "unchecked: " + ", ".join(why) for key, why in notes.items()}


class ModelAndPlan(NamedTuple):
    """A model's constants and their plan: what plan_model, ``inspect --check`` and convert_model share."""

    constants: list[ModelConstant]
    scan: BytesScan | None
    """The byte scan that found ``constants``, if one did (the image writer reads their bytes from it)."""
    placement: Placement
    plan: UploadPlan
    """The plan (not written: no buffer file)."""

    def not_in_the_bytes(self) -> list[ModelConstant]:
        """The constants the byte scan did not read from the model's bytes: the only ones that may use external
        data (every constant when there was no scan). A model may hold 100,000 constants the scan read; looking
        at each again costs as much as a tenth of the whole conversion."""
        if self.scan is None:
            return self.constants
        return [self.constants[i] for i in np.flatnonzero(self.scan.starts < 0).tolist()]


def plan_loaded(
    loaded: LoadedModel, options: PlanOptions, strict: bool, selection: Selection = EVERY_CONSTANT
) -> ModelAndPlan:
    """Find, select and plan the constants of a read model; ``strict``: the first selected one that would be
    skipped is an error."""
    found, scan = model_constants(loaded)
    constants, keep, consumers, specs, derived = select_constants(
        loaded.proto, found, options.target, selection, None if scan is None else scan.with_tensor, options.shapes)
    if scan is not None and derived:
        scan = scan.extended(derived)
    if scan is not None and keep is not None:
        scan = scan.subset(keep)
    cpu_read: frozenset[str] = frozenset()
    if options.upload == "bound":  # (the CPU-read constants go last, into buffers of their own)
        cpu_read = cpu_read_keys(consumers, spec_part_keys(specs))
        order = upload_order([c.key for c in constants], cpu_read)
        if order is not None:
            constants = [constants[i] for i in order]
            scan = None if scan is None else scan.subset(order)
    placement = place_constants(constants, options, consumers, cpu_read=cpu_read)
    if strict:
        raise_if_skipped(constants, placement.pairs)
    records = quantized_views(specs, placement.entries, options.min_dims, options.target, options.alignment)
    entries = placement.entries.with_parts(part_keys(records.values()))
    plan = UploadPlan(entries, options.target, options.alignment, options.min_dims, placement.total,
                      loaded.name, loaded.size, __version__, source_sha256=loaded.sha256, selection=selection,
                      max_buffer_bytes=options.max_buffer_bytes, quantized_records=records, shapes=options.shapes,
                      upload=options.upload, uploaded_buffers=placement.uploaded_buffers,
                      graph_inputs=recorded_inputs(loaded.proto.graph))
    return ModelAndPlan(constants, scan, placement, plan)


def raise_if_skipped(constants: list[ModelConstant], pairs: list[Pair]) -> None:
    """The error strict=True makes of the first constant that would be skipped (none: nothing happens)."""
    skipped = [i for i, pair in enumerate(pairs) if pair.total < 0]
    if skipped:
        constant, pair = constants[skipped[0]], pairs[skipped[0]]
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        raise pair.error(
            f"constant {constant.key!r} ({constant.origin}) cannot be converted: {pair.fields['skipped']}{more}; "
            "strict=True makes that an error"
        )


def load_plan(
    manifest_path: str | os.PathLike[str],
    *,
    verify: bool = False,
    bin_path: str | os.PathLike[str] | None = None,
    max_manifest_bytes: int = DEFAULT_MAX_MANIFEST_BYTES,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    dim_params: Mapping[str, int] | None = None,
) -> UploadPlan:
    """Read and validate an upload plan (``PREFIX.json``) and open the buffer files it lists.

    The manifest must be a regular file of at most ``max_manifest_bytes``. Every field is checked: format and
    version, types and ranges, known ONNX/DML types, each converted entry's DML type and conversion against the
    target's mapping, its desc against the layout rules and ``calc_buffer_tensor_size``, offsets (aligned, inside
    the buffer, no overlaps), and each buffer file's size and fingerprint (sampled bytes: a file of another
    conversion is refused even when its size is the same). ``verify=True`` also checks each buffer file's
    SHA-256 (which ``convert_model(..., checksum=True)`` records). Any problem raises ManifestError.

    ``manifest_path`` may also be the prefix given to ``convert_model`` (``"weights"`` for ``weights.json``).
    A conversion into the prefix that publishes while the plan is loaded removes the buffer files of the manifest
    read: the manifest is then read again and the new conversion loaded (a few times at most), so a reader gets
    one whole conversion, never an error because a writer published.
    The plan keeps its buffer files open and reads them, not their names, from then on; ``close()`` it, or use
    it in a ``with`` block, to let them go. ``bin_path=`` names the .bin of a format-1 manifest (written by
    earlier versions, whose buffer was ``PREFIX.bin``); later manifests list their own buffer files.

    ``input_shapes`` and ``dim_params`` give the model's free dimensions at run time, as ``convert_model``'s do:
    each consumer whose output sizes a graph input's dim_param names (an Add of ``x[batch, 3]``) gets its desc at
    those sizes, over the same bytes (:mod:`dmlbridge.plan.load_shapes`). What contradicts the model or the
    conversion's own sizes, and a manifest before format 7, is refused (InvalidArgumentError); without them such a
    consumer keeps its ONNX layout and a note, and its ``as_ctypes()`` raises LayoutError.

    Example:
        >>> import dmlbridge, numpy as np, os, shutil, tempfile
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.array([1.5, -2.0], dtype=np.float32), "w")
        >>> folder = tempfile.mkdtemp()
        >>> dmlbridge.convert_model(helper.make_model(helper.make_graph([], "g", [], [], [w])),
        ...                         os.path.join(folder, "m"), progress=False, checksum=True).close()
        >>> with dmlbridge.load_plan(os.path.join(folder, "m.json"), verify=True) as plan:
        ...     plan.array("w")
        array([ 1.5, -2. ], dtype=float32)
        >>> shutil.rmtree(folder)  # (the plans closed first: on Windows an open file may not be removable)
    """
    return read_plan(manifest_path, verify=verify, bin_path=bin_path, check_fingerprint=True,
                     max_manifest_bytes=max_manifest_bytes, shapes=GivenShapes.check(input_shapes, dim_params))


def read_plan(
    manifest_path: str | os.PathLike[str],
    *,
    verify: bool,
    bin_path: str | os.PathLike[str] | None,
    check_fingerprint: bool,
    max_manifest_bytes: int = DEFAULT_MAX_MANIFEST_BYTES,
    shapes: GivenShapes = NO_SHAPES,
) -> UploadPlan:
    """:func:`load_plan` (``shapes``: its ``input_shapes`` and ``dim_params``); ``check_fingerprint=False`` is
    for ``dmlbridge verify``, which reports a buffer file that does not match its fingerprint as a mismatch
    (through find_mismatches) along with the constants that differ."""
    if not isinstance(manifest_path, (str, os.PathLike)):
        raise InvalidArgumentError(f"manifest_path must be a path, not {type(manifest_path).__name__}")
    path = os.fspath(manifest_path)
    path = path if isinstance(path, str) else os.fsdecode(path)
    if not path.endswith(".json") and not os.path.lexists(path) and os.path.lexists(path + ".json"):
        path += ".json"  # the prefix given to convert_model
    if bin_path is not None:
        bin_file = os.fspath(bin_path) if isinstance(bin_path, (str, os.PathLike)) else ""
        bin_file = bin_file if isinstance(bin_file, str) else os.fsdecode(bin_file)
        if not bin_file:
            raise InvalidArgumentError(f"bin_path must be a path, got {bin_path!r}")
    else:
        bin_file = path[: -len(".json")] + ".bin" if path.endswith(".json") else ""
    # A conversion into the prefix removes the previous one's buffer files once it has published: a buffer file that
    # vanished since the manifest was read belongs to a replaced manifest (read unchanged again: truly missing).
    missing: BufferFileMissingError | None = None
    previous = b""
    for _ in range(_LOAD_ATTEMPTS):
        data = read_manifest_file(path, max_manifest_bytes)
        if missing is not None and data == previous:
            raise missing
        try:
            return _plan_from(data, path, bin_file, bin_path, verify, check_fingerprint, shapes)
        except BufferFileMissingError as exc:
            missing, previous = exc, data
    raise ManifestError(
        f"manifest {path!r} was replaced {_LOAD_ATTEMPTS} times while its buffer files were being opened (another "
        "conversion into the prefix keeps publishing, and each removes the buffer files of the one before); load "
        "the plan again once it is done"
    )


def _plan_from(data: bytes, path: str, bin_file: str, bin_path: object, verify: bool,
               check_fingerprint: bool, shapes: GivenShapes = NO_SHAPES) -> UploadPlan:
    """The plan of the manifest bytes ``data`` read from ``path``, its buffer files opened and checked, its
    consumers at the sizes ``shapes`` gives."""
    manifest = parse_manifest(data, path, os.path.basename(bin_file))
    sizes = sizes_at_load(manifest, shapes)
    if sizes:
        manifest = replace(manifest, entries=entries_at_sizes(manifest, sizes))
    directory = os.path.realpath(os.path.dirname(path) or os.curdir)  # (as the system resolves it: prefix_folder)
    buffers: tuple[BufferFile, ...]
    if manifest.format_version == 1:
        if not bin_file:
            raise ManifestError(f"{path!r} does not end in .json; pass bin_path= to name its .bin")
        files = OpenBuffers.at_paths([bin_file])
        buffers = (replace(manifest.buffers[0], path=bin_file),)
    else:
        if bin_path is not None:
            raise InvalidArgumentError(
                "bin_path= names the .bin of a format-1 manifest; this manifest lists its own buffer files"
            )
        files = OpenBuffers.beside(directory, [buffer.path for buffer in manifest.buffers])
        buffers = tuple(replace(buffer, path=os.path.join(directory, buffer.path)) for buffer in manifest.buffers)
    plan = UploadPlan(**{**vars(manifest), "buffers": buffers}, manifest_path=path,
                      load_sizes=tuple(sorted(sizes.items())), _files=files)
    try:
        # Without check_fingerprint (dmlbridge verify), a buffer file that fails its fingerprint is find_mismatches'
        # to report, with the constants that differ; any other problem is an error here.
        problems = [message for _, message in plan.buffer_checks(sha256=verify, fingerprint=check_fingerprint)]
        if problems:
            raise ManifestError(problems[0])
        if check_fingerprint:  # (dmlbridge verify compares the records with the model's, reading each byte once)
            check_zero_scales(plan.quantized_records, plan.entries, lambda entry, start, out: files.read_into(
                entry.buffer or 0, (entry.offset or 0) + start, out))
    except BaseException:
        files.close()
        raise
    return plan
