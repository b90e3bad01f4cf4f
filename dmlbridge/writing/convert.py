"""Whole-model conversion: every constant of an ONNX model in DirectML upload buffers, plus their manifest.

:func:`convert_model` writes the buffer files ``PREFIX.<id>.<n>.bin`` (the upload image: each tensor's bytes at
an offset that is a multiple of ``alignment``, zero bytes between, a new file where the next tensor would pass
``max_buffer_bytes``; :mod:`dmlbridge.writing.image`) and ``PREFIX.json`` (the manifest,
:mod:`dmlbridge.manifest.format`),
published together (:mod:`dmlbridge.writing.publish`). Everything that can be refused is
refused before any file is created: bad options, constants over ``max_tensor_bytes``, strict skips, external
data without a directory, outputs that would overwrite the model's own files. On any error or Ctrl-C the
temporary files are removed and the previous outputs are untouched.

External data of a model given as a path is resolved against the model's directory. A model given as bytes or as
a ModelProto has no directory: its external data is refused unless the caller passes ``base_dir=``.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from dmlbridge.errors import CleanupWarning, DestinationError, InvalidArgumentError, TensorTooLargeError, counted
from dmlbridge.manifest.format import MANIFEST_FORMAT, BufferFile, check_manifest_size, manifest_chunks
from dmlbridge.model.constants import ModelConstant, collector_paused, iter_external_tensors
from dmlbridge.model.onnx_file import LoadedModel, external_data_reader, need_reader, read_model
from dmlbridge.onnx.external_data import ExternalDataReader, check_location
from dmlbridge.placement.entries import Placement, PlanEntries, refuse_oversized
from dmlbridge.placement.options import (
    DEFAULT_MAX_BUFFER_BYTES,
    DEFAULT_MAX_CONSTANTS,
    DEFAULT_MAX_MANIFEST_BYTES,
    DEFAULT_MAX_NODES,
    DEFAULT_MAX_TENSOR_BYTES,
    DEFAULT_TARGET,
    ConvertOptions,
    PlanOptions,
)
from dmlbridge.placement.selection import Selection
from dmlbridge.plan.external_files import external_data_bytes
from dmlbridge.plan.fingerprint import bin_fingerprint
from dmlbridge.plan.open_buffers import OpenBuffers
from dmlbridge.plan.upload_plan import ModelAndPlan, UploadPlan, plan_loaded
from dmlbridge.system.files import keep_open, open_regular, read_at
from dmlbridge.system.identity import ids
from dmlbridge.system.progress import Progress
from dmlbridge.types.target import Target
from dmlbridge.writing.folder import FILE_HELD, LEFTOVERS, LOCK_SUFFIX, OutputFolder, prefix_folder
from dmlbridge.writing.image import write_image
from dmlbridge.writing.publish import Publication

__all__ = ["check_conversion", "convert_model"]


def convert_model(
    model: Any,
    out_prefix: str | os.PathLike[str],
    *,
    target: Target = DEFAULT_TARGET,
    alignment: int = 256,
    min_dims: int | None = None,
    progress: bool | None = None,
    strict: bool = False,
    external_data_root: str | os.PathLike[str] | None = None,
    checksum: bool = False,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    base_dir: str | os.PathLike[str] | None = None,
    fsync: bool = True,
    max_output_bytes: int | None = None,
    max_manifest_bytes: int = DEFAULT_MAX_MANIFEST_BYTES,
    flags: int | str = 0,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
    min_bytes: int = 0,
    drop_quantized_sources: bool = False,
    max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES,
    workers: int | None = None,
    max_constants: int | None = DEFAULT_MAX_CONSTANTS,
    max_nodes: int | None = DEFAULT_MAX_NODES,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    dim_params: Mapping[str, int] | None = None,
    upload: str = "bound",
) -> UploadPlan:
    """Convert every constant of an ONNX model into DirectML upload buffers: the buffer files
    ``out_prefix.<conversion id>.00000.bin``, ``.00001.bin``, ... (one when the model fits in ``max_buffer_bytes``)
    and their manifest ``out_prefix.json``, published together (the manifest's rename is the one step that
    replaces a previous conversion; see :mod:`dmlbridge.writing.publish`). The buffer files of the conversion it
    replaces
    (and any a failed or killed one left) are removed before it returns; a file that cannot be removed is a
    :class:`~dmlbridge.errors.CleanupWarning`, not an error (the conversion is published), and
    :func:`dmlbridge.clean` removes it later. ``out_prefix.lock`` guards the prefix against a second conversion
    at the same time and stays in place.

    Args:
        model: a path to a .onnx file, its bytes, or an ``onnx.ModelProto``.
        out_prefix: the output path without extension, naming files in a folder that exists. Refused before
            anything is created (InvalidArgumentError): an empty path, one ending in a separator (a folder, not
            names in it) and one ending in .onnx, .json or .bin (an extension: the outputs would be
            ``model.onnx.json`` and the like); (DestinationError) a folder that does not exist, a device, FIFO
            or socket at ``out_prefix``, anything but a regular file (or, for the manifest, a symlink, which is
            replaced) at ``out_prefix.json`` or ``out_prefix.lock``, and a folder on a kernel filesystem such
            as /dev, /proc or /sys (Linux); (InvalidArgumentError) a model file or external data file that is
            the prefix's manifest or lock, or a file of the prefix the conversion would remove (one named like
            its buffer files, temporary manifests or retired files, that it did not write).
        target: the DirectML target (feature level, supported types, int64 and lossy policy).
        alignment: each tensor's offset is a multiple of this (a power of two >= 16); it is also every desc's
            GuaranteedBaseOffsetAlignment.
        min_dims: pad sizes with leading 1s to at least this many dimensions (most operators want 4); None (the
            default) is the target's fewest: 4 below feature level 3.0, else 1. The manifest records the value used.
        progress: a progress bar (tqdm) on stderr: None shows it when stderr is a terminal, True always,
            False never.
        strict: raise instead of skipping constants that cannot be converted (empty, strings, complex,
            types the target cannot hold, tensors DirectML's layout rules refuse).
        external_data_root: widen the directory external data files may resolve into (the model's directory
            by default), e.g. to a Hugging Face cache whose files are symlinks into a blobs folder.
        checksum: record the SHA-256 of the buffer file (computed while writing) in the manifest.
        max_tensor_bytes: refuse (TensorTooLargeError) a model with a constant whose decoded array or whose
            DirectML bytes would be larger (checked from the model's dims before any file is created, and again
            as each is decoded).
        base_dir: the directory external data locations are relative to; default: the model file's directory.
            Needed for external data when ``model`` is bytes or a ModelProto.
        fsync: True (the default) flushes the new files to the disk before the manifest is renamed into place,
            and the directory after, so that even a power loss or an operating system crash leaves the previous
            conversion or the new one. False skips those flushes (``--no-fsync``): faster (the disk writes happen
            later, in the background), and the conversion is still published atomically if the process fails,
            is interrupted or is killed, but after a power loss or a crash of the operating system a published
            file may be empty or incomplete.
        max_output_bytes: refuse (TensorTooLargeError, before any file is created) a conversion whose upload image
            would be larger. None (the default) allows 8 times the model's bytes (the model file and the
            external data it uses, each byte of a file once however many tensors name it: 8 times is the largest
            widening, FLOAT4E2M1 to FLOAT32), plus one alignment per constant and 64 MiB: a few bytes that claim
            gigabytes (sparse tensors densified, say) need the option.
        max_manifest_bytes: refuse (InvalidArgumentError, before any file is created) a conversion whose manifest
            would be larger; ``load_plan`` reads no larger manifest unless given the same limit.
        flags: the DML_TENSOR_FLAGS of every converted entry: 0, or 1 / ``"owned-by-dml"``
            (DML_TENSOR_FLAG_OWNED_BY_DML, for weights bound for an operator's initialization, which DirectML
            copies); recorded in each entry's desc.
        include, exclude: shell-style patterns (``fnmatch``) on keys: only constants whose key matches one of
            ``include`` (default: every key) and none of ``exclude`` are converted; the others are not entries.
        kinds: only constants of these origin kinds (``"initializer"``, ``"value"`` for Constant nodes, ...; see
            ``dmlbridge.placement.selection.CONSTANT_KINDS``); default: every kind.
        min_bytes: only constants whose values take at least this many bytes as a numpy array. The manifest
            records the selection; ``verify`` compares the plan with the constants it selects.
        drop_quantized_sources: leave out the constants that only quantized nodes read as weights or zero points
            and whose values derived entries carry instead (below feature level 6.3 a 4-bit MatMulNBits B is
            written unpacked to UINT8: its packed bytes are then of no use to DirectML); see ``plan.quantized``.
        max_buffer_bytes: the largest buffer file (a multiple of ``alignment``, at most 0xFFFF0000, the largest
            upload buffer Direct3D 12 makes). Constants go into buffers in model order; a new buffer starts when
            the next one would not fit, and no constant is split: one larger than the limit is refused
            (TensorTooLargeError) before any file is created. The default, 2 GiB, is the size Direct3D 12
            guarantees a resource on a GPU with 8 GiB or more; :func:`dmlbridge.max_buffer_bytes_for` gives it for
            others. A model with a constant over 2 GiB needs a larger limit.
        workers: how many threads decode and convert constants (``--workers``): None (the default) is every CPU
            this process may use (its CPU affinity, bounded by a cgroup CPU quota when one is set); 1 does
            everything in the calling thread. Constants of 1 MiB and more that need converting (widening,
            packing, narrowing, densifying) go to the threads, a few ahead of the one thread that writes the
            files in order, within 128 MiB of values and results in flight; a constant is converted by one
            thread. The files are the same bytes whatever the number.
        max_constants: refuse (InvalidArgumentError, before the model is parsed) a model of more constants
            than this (``--max-constants``; None: any number), counted in every graph, subgraph and function:
            the conversion keeps a record of each (docs/guide.md, Streaming, says how much). The default,
            524,288, keeps a conversion within 1 GiB; real models hold a few thousand.
        max_nodes: refuse (InvalidArgumentError, before the model is parsed) a model of more nodes than this
            (``--max-nodes``; None: any number), counted in every graph, subgraph and function: protobuf's parsed
            model takes about 360 bytes a node. The default, 524,288, keeps a conversion within 1 GiB beside the
            most constants; real models hold up to some tens of thousands.
        input_shapes: sizes the model leaves free, by graph input: ``{"x": (1, 3, 224, 224)}``
            (``--input-shape x=1,3,224,224``), as ONNX Runtime's free-dimension overrides give them; they decide
            the output sizes of the nodes that read constants (an element-wise operand's desc: see
            docs/mapping.md), recorded in the manifest. A name that is no graph input, a count of dimensions other
            than the model's or a size that contradicts one it declares is an InvalidArgumentError naming it.
        dim_params: sizes by dim_param name, in every graph input, output and value_info: ``{"batch": 1}``
            (``--dim-param batch=1``); a name no shape has is an InvalidArgumentError.
        upload: what the upload buffers hold (``--upload``). ``"bound"`` (the default): every constant but those
            ONNX Runtime's DirectML provider reads on the CPU as attributes (``reads_on == "cpu"``: a Reshape's
            shape, a Slice's ends), which go, converted with their ONNX type whatever the target, into buffer
            files of their own after the upload buffers (``BufferFile.uploaded`` False). ``"all"``: every constant
            in the upload buffers. The manifest records which.

    Returns the :class:`UploadPlan` of the written files (the same as ``load_plan`` of the manifest).

    Example:
        >>> import dmlbridge, numpy as np, os, shutil, tempfile
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.array([1.5, -2.0], dtype=np.float32), "w")
        >>> folder = tempfile.mkdtemp()
        >>> plan = dmlbridge.convert_model(helper.make_model(helper.make_graph([], "g", [], [], [w])),
        ...                                os.path.join(folder, "m"), progress=False)
        >>> plan.buffers[0].path == os.path.join(folder, f"m.{plan.conversion_id}.00000.bin")
        True
        >>> plan.entries["w"].desc()["DataType"], plan.read("w").tobytes().hex()
        (1, '0000c03f000000c0')
        >>> plan.close()  # (its files let go: on Windows an open file may not be removable)
        >>> shutil.rmtree(folder)
    """
    layout = PlanOptions.check(target, alignment, min_dims, flags, max_buffer_bytes, input_shapes,
                                dim_params, upload)
    options = ConvertOptions.check(layout, progress=progress, strict=strict, external_data_root=external_data_root,
                                   checksum=checksum, max_tensor_bytes=max_tensor_bytes, fsync=fsync,
                                   max_output_bytes=max_output_bytes, max_manifest_bytes=max_manifest_bytes,
                                   selection=Selection.check(include, exclude, kinds, min_bytes,
                                                             drop_quantized_sources), workers=workers,
                                   max_constants=max_constants, max_nodes=max_nodes)
    prefix = _output_prefix(out_prefix)
    with _read(model, base_dir, options) as loaded, collector_paused():
        return _convert(loaded, prefix, options)


def check_conversion(
    model: Any,
    *,
    target: Target = DEFAULT_TARGET,
    alignment: int = 256,
    min_dims: int | None = None,
    strict: bool = False,
    external_data_root: str | os.PathLike[str] | None = None,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    base_dir: str | os.PathLike[str] | None = None,
    max_output_bytes: int | None = None,
    max_manifest_bytes: int = DEFAULT_MAX_MANIFEST_BYTES,
    flags: int | str = 0,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
    min_bytes: int = 0,
    drop_quantized_sources: bool = False,
    max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES,
    workers: int | None = None,
    max_constants: int | None = DEFAULT_MAX_CONSTANTS,
    max_nodes: int | None = DEFAULT_MAX_NODES,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    dim_params: Mapping[str, int] | None = None,
    upload: str = "bound",
) -> UploadPlan:
    """Everything :func:`convert_model` does but write: every refusal it makes up front (the same limits), every
    value decoded and converted (external data read, values that must narrow checked), each error the one
    convert_model would raise. ``dmlbridge inspect --check``. The keywords are convert_model's.

    Returns the plan (not written: it has no buffer file).

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import helper, numpy_helper
        >>> big = numpy_helper.from_array(np.array([2**40], dtype=np.int64), "big")
        >>> model = helper.make_model(helper.make_graph([], "g", [], [], [big]))
        >>> dmlbridge.check_conversion(model, target=dmlbridge.Target("2.0", int64="narrow"))
        Traceback (most recent call last):
        ...
        dmlbridge.ValueRangeError: constant 'big' (initializer): value 1099511627776 at index [0] ...saturate...
    """
    layout = PlanOptions.check(target, alignment, min_dims, flags, max_buffer_bytes, input_shapes,
                                dim_params, upload)
    options = ConvertOptions.check(layout, progress=False, strict=strict, external_data_root=external_data_root,
                                   checksum=False, max_tensor_bytes=max_tensor_bytes, fsync=False,
                                   max_output_bytes=max_output_bytes, max_manifest_bytes=max_manifest_bytes,
                                   selection=Selection.check(include, exclude, kinds, min_bytes,
                                                             drop_quantized_sources), workers=workers,
                                   max_constants=max_constants, max_nodes=max_nodes)
    with _read(model, base_dir, options) as loaded, collector_paused():
        model_plan, reader = _checked(loaded, options)
        clamped: dict[int, int] = {}
        try:
            with open(os.devnull, "wb", buffering=0) as sink:  # every value passes through; nothing is kept
                for index in range(len(model_plan.placement.buffer_sizes)):
                    clamped.update(write_image(sink, model_plan.constants, model_plan.placement, model_plan.scan,
                                               reader, options, Progress(False, 0, ""), kernel_copy=False,
                                               buffer=index).clamped)
        finally:
            if reader is not None:
                reader.close()
        if not clamped:
            return model_plan.plan
        return replace(model_plan.plan, entries=cast(PlanEntries, model_plan.plan.entries).with_clamped(clamped))


def _read(model: Any, base_dir: str | os.PathLike[str] | None, options: ConvertOptions) -> LoadedModel:
    """The model read, once its nodes and constants are counted within ``max_nodes`` and ``max_constants`` and
    their manifest's least size within ``max_manifest_bytes``."""
    return read_model(model, base_dir, max_constants=options.max_constants,
                      max_manifest_bytes=options.max_manifest_bytes, max_nodes=options.max_nodes)


def _checked(loaded: LoadedModel, options: ConvertOptions) -> tuple[ModelAndPlan, ExternalDataReader | None]:
    """The model placement and its external-data reader, after every refusal that comes before any output
    exists (convert_model and check_conversion make the same ones)."""
    model_plan = plan_loaded(loaded, options.layout, options.strict, options.selection)
    constants, placement = model_plan.constants, model_plan.placement
    reader = external_data_reader(loaded, options.external_data_root)
    try:
        need_reader(model_plan.not_in_the_bytes(), reader)
        _refuse_too_large(constants, placement, options.max_tensor_bytes)
        _refuse_large_output(loaded, constants, placement, options, reader)
        refuse_oversized(constants, placement, options.layout.max_buffer_bytes)
        check_manifest_size(placement.entries, options.max_manifest_bytes, model_plan.plan.graph_inputs)
    except BaseException:
        if reader is not None:
            reader.close()
        raise
    return model_plan, reader


def _convert(loaded: LoadedModel, prefix: str, options: ConvertOptions) -> UploadPlan:
    model_plan, reader = _checked(loaded, options)
    try:
        inputs = _inputs(loaded, model_plan.not_in_the_bytes(), reader)
        _refuse_overwriting_inputs((prefix + ".json", prefix + LOCK_SUFFIX), inputs)
        _refuse_removing_inputs(prefix, inputs)
        if not _replaceable_manifest(prefix + ".json"):
            raise DestinationError(
                f"out_prefix {prefix!r} names the manifest {prefix + '.json'!r}, which is a file that is not a "
                "dmlbridge manifest: a conversion replaces only a manifest of its own; move the file away or choose "
                "another prefix"
            )
        return _write_outputs(model_plan, prefix, reader, options)
    finally:
        if reader is not None:
            reader.close()


def _refuse_too_large(constants: list[ModelConstant], placement: Placement, max_tensor_bytes: int) -> None:
    """Refuse, before any output exists, a model with a constant whose decoded array or DirectML bytes would
    exceed the limit (even one that would be skipped: a claim that large is a broken or hostile model, e.g. a
    sparse tensor of 2^40 elements)."""
    for constant, pair in zip(constants, placement.pairs, strict=True):
        size = max(constant.nbytes, pair.total)
        if size > max_tensor_bytes:
            raise TensorTooLargeError(
                f"constant {constant.key!r} ({constant.origin}) claims {size} bytes "
                f"({constant.onnx_type.name} {list(constant.shape)}), more than max_tensor_bytes={max_tensor_bytes} "
                f"({max_tensor_bytes / 2**30:.3g} GiB; --max-tensor-bytes on the command line); raise the limit if "
                "you trust this model and have the memory"
            )


def _refuse_large_output(
    loaded: LoadedModel, constants: list[ModelConstant], placement: Placement, options: ConvertOptions,
    reader: ExternalDataReader | None,
) -> None:
    """Refuse, before any output exists, an upload image larger than ``max_output_bytes`` (see convert_model)."""
    limit = options.max_output_bytes
    if limit is None:
        external = external_data_bytes(constants, reader)  # (each byte of a file once, however many name it)
        limit = 8 * (loaded.size + external) + options.layout.alignment * len(constants) + (64 << 20)
        how = ("8 times the model's bytes (its external data's counted once each), plus one alignment per constant "
               "and 64 MiB")
    else:
        how = "max_output_bytes"
    if placement.total > limit:
        raise TensorTooLargeError(
            f"the upload image would take {placement.total} bytes, more than {limit} ({how}); a model this small "
            "that claims this much is broken or hostile (densified sparse tensors, say): pass max_output_bytes= "
            "(--max-output-bytes on the command line) if you trust it"
        )


# Kernel filesystems (Linux /proc/self/mountinfo names): device nodes, process and kernel state, not folders to
# write files in. A prefix whose folder is on one is refused before anything is created.
_KERNEL_FILESYSTEMS = frozenset({
    "devtmpfs", "devfs", "devpts", "proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
    "pstore", "bpf", "configfs", "fusectl", "mqueue", "binfmt_misc", "efivarfs", "selinuxfs", "hugetlbfs", "nsfs",
    "rpc_pipefs",
})
_MOUNTINFO = "/proc/self/mountinfo"


def _output_prefix(out_prefix: Any) -> str:
    """``out_prefix`` checked (see convert_model): names files in an existing, ordinary folder, or an error
    naming ``out_prefix``, raised before anything is created."""
    if not isinstance(out_prefix, (str, os.PathLike)):
        raise InvalidArgumentError(f"out_prefix must be a path, not {type(out_prefix).__name__}")
    prefix = os.fspath(out_prefix)
    if not isinstance(prefix, str):
        prefix = os.fsdecode(prefix)
    if not prefix:
        raise InvalidArgumentError("out_prefix is empty: give the path of the outputs without extension, e.g. "
                                   "'out/model' for out/model.json")
    if "\x00" in prefix:
        raise InvalidArgumentError(f"out_prefix {prefix!r} holds a NUL character; no file can be named so")
    if prefix.endswith(tuple(s for s in (os.sep, os.altsep) if s)):
        raise InvalidArgumentError(
            f"out_prefix {prefix!r} ends in a path separator, so it names a folder, not the outputs' names: give a "
            f"prefix in it, e.g. {os.path.join(prefix, 'model')!r}"
        )
    for extension in (".onnx", ".json", ".bin"):
        if prefix.lower().endswith(extension):
            stem = prefix[: -len(extension)]
            what = "a model's" if extension == ".onnx" else "an output's"
            raise InvalidArgumentError(
                f"out_prefix {prefix!r} ends in {prefix[-len(extension):]}, {what} extension (the outputs would be "
                f"{prefix + '.json'!r} and the like): give the prefix without it, e.g. "
                f"{stem if os.path.basename(stem) else os.path.join(stem, 'model')!r}"
            )
    directory = prefix_folder(prefix)
    if os.path.isdir(prefix):  # (a folder's name would give outputs beside it, named as the folder)
        raise InvalidArgumentError(f"out_prefix {prefix!r} is a folder, not the outputs' names: give a prefix in it, "
                                   f"e.g. {os.path.join(prefix, 'model')!r}")
    kind = _special_kind(prefix, follow=True)
    if kind is not None:
        raise DestinationError(
            f"out_prefix {prefix!r} is {kind}, not a name for files: choose a prefix in an ordinary folder, e.g. "
            "'out/model'"
        )
    filesystem = _kernel_filesystem(directory)
    if filesystem is not None:
        raise DestinationError(
            f"out_prefix {prefix!r} is in {directory!r}, a folder of the kernel's {filesystem} filesystem, not one "
            "for files: choose a prefix in an ordinary folder, e.g. 'out/model'"
        )
    for what, suffix, symlink in (("manifest", ".json", True), ("lock", LOCK_SUFFIX, False)):
        kind = _special_kind(prefix + suffix, follow=False, symlink=symlink)
        if kind is not None:
            why = " (a lock is never taken through a symlink)" if kind == "a symlink" else ""
            raise DestinationError(
                f"out_prefix {prefix!r} names the {what} {prefix + suffix!r}, which is {kind}, not a regular "
                f"file{why}: move it away or choose another prefix"
            )
    return prefix


# How a manifest dmlbridge wrote begins: its first field (docs/manifest.md), within its first bytes.
_MANIFEST_START = re.compile(rb'\A\s*\{\s*"format"\s*:\s*"' + MANIFEST_FORMAT.encode() + rb'"')
_MANIFEST_HEAD_BYTES = 256


def _replaceable_manifest(path: str) -> bool:
    """Whether a conversion may replace what is at ``path``: nothing, a symlink (replaced, never followed) or a
    manifest of dmlbridge (a regular file that begins as one). A user's ``settings.json`` is not."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return True  # (nothing or a symlink; other kinds were refused above)
        fd, _ = open_regular(path, nofollow=True)
    except OSError:
        return True  # (gone meanwhile, or unreadable: the conversion's own steps report it)
    try:
        head = read_at(fd, 0, _MANIFEST_HEAD_BYTES)
    finally:
        os.close(fd)
    return _MANIFEST_START.match(head) is not None


def _special_kind(path: str, *, follow: bool, symlink: bool = True) -> str | None:
    """What ``path`` is when it exists and an output cannot be written there: a device, FIFO or socket (with
    ``follow``, what a symlink leads to), a directory (without ``follow``), a symlink (unless ``symlink``); None
    for a regular file or nothing."""
    try:
        mode = (os.stat if follow else os.lstat)(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or (follow and stat.S_ISDIR(mode)) or (symlink and stat.S_ISLNK(mode)):
        return None
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _kernel_filesystem(directory: str) -> str | None:
    """The type of the kernel filesystem ``directory`` is on (devtmpfs for /dev, proc, sysfs, ...), or None: an
    ordinary filesystem, or a system without /proc/self/mountinfo (found by the folder's device number, so a
    symlink or a bind mount cannot hide it)."""
    if not sys.platform.startswith("linux"):  # (Wine shows Linux's /proc to Windows programs: not theirs)
        return None
    try:
        device = os.stat(directory).st_dev
        with open(_MOUNTINFO, encoding="utf-8", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return None
    number = f"{os.major(device)}:{os.minor(device)}"
    for line in lines:  # ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPEROPTIONS
        fields = line.split()
        if len(fields) < 8 or fields[2] != number or "-" not in fields[6:-1]:
            continue
        kind = fields[fields.index("-", 6) + 1]
        if kind in _KERNEL_FILESYSTEMS:
            return kind
    return None


def _same_file(a: str, b: str) -> bool:
    try:
        if os.path.realpath(a) == os.path.realpath(b):
            return True
        return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _inputs(loaded: LoadedModel, constants: list[ModelConstant], reader: ExternalDataReader | None) -> list[str]:
    """The paths of the model's own files: the model file and each external data file, once each."""
    inputs = [loaded.path] if loaded.path else []
    if reader is not None:
        for tensor in iter_external_tensors(constants):
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            inputs.append(os.path.join(reader.base_dir, *check_location(location, f"tensor {tensor.name!r}")))
    return list(dict.fromkeys(inputs))  # once per file, however many tensors it holds


def _refuse_overwriting_inputs(outputs: tuple[str, ...], inputs: list[str]) -> None:
    for output in outputs:
        for source in inputs:
            if _same_file(output, source):
                raise InvalidArgumentError(
                    f"the output {output!r} would overwrite the model's own file {source!r}; choose another prefix"
                )


def _refuse_removing_inputs(prefix: str, inputs: list[str]) -> None:
    """InvalidArgumentError, naming ``out_prefix`` and the file, when a model file is (by identity: any name or
    link of it) a file of the prefix the conversion would remove once it is published: one named like a buffer
    file, a temporary manifest or a retired file of the prefix (a model that keeps its weights in an earlier
    conversion's buffer file, converted into that prefix again)."""
    folder = OutputFolder(prefix)
    try:
        removed = folder.files_of(LEFTOVERS)
    finally:
        folder.close()
    for source in inputs:
        name = next((removed[identity] for identity in ids(source) if identity in removed), None)
        if name is not None:
            raise InvalidArgumentError(
                f"out_prefix {prefix!r} would remove {folder.where(name)!r}, the model's own file {source!r}: a "
                f"conversion removes, once it is published, every file of its prefix named like a buffer file "
                f"({folder.base}.<16 hex digits>.<5 digits>.bin), a temporary manifest or a retired file that it did "
                "not write (and dmlbridge clean those the manifest does not list); give the model's file a name of "
                "its own, or choose another out_prefix"
            )


def _write_outputs(
    model_plan: ModelAndPlan, prefix: str, reader: ExternalDataReader | None, options: ConvertOptions
) -> UploadPlan:
    """Write the buffer file and the manifest, and publish them together (dmlbridge.writing.publish); returns the
    written plan, which holds its buffer file open."""
    constants, scan, placement, plan = model_plan
    bar = Progress(options.progress, plan.total_size, os.path.basename(prefix))
    kept: list[int] = []  # the plan's own descriptors of the files it wrote
    files: OpenBuffers | None = None  # (once made, it owns them)
    try:
        with Publication(prefix, fsync=options.fsync) as publication:
            try:
                buffers, clamped = [], {}
                for index, size in enumerate(placement.buffer_sizes):  # one file per buffer, in order
                    with publication.new_buffer(index) as file:
                        image = write_image(file, constants, placement, scan, reader, options, bar, buffer=index)
                        fingerprint = bin_fingerprint(file.fileno(), size, *placement.converted_ranges(index))
                        path = os.path.join(publication.directory, publication.buffer_names[index])
                        kept.append(keep_open(file.fileno(), path))
                    buffers.append(BufferFile(path, size, fingerprint, image.sha256, placement.uploaded_buffers is None
                                              or index < placement.uploaded_buffers))
                    clamped.update(image.clamped)
                external = () if reader is None else tuple(sorted(reader.files.items()))
                if clamped:  # ("saturate" entries: their counts go into the manifest)
                    plan = replace(plan, entries=cast(PlanEntries, plan.entries).with_clamped(clamped))
                files = OpenBuffers([b.path for b in buffers], kept)
                written = replace(plan, conversion_id=publication.conversion_id, source_external=external,
                                  buffers=tuple(buffers),
                                  manifest_path=os.path.join(publication.directory, publication.manifest_name),
                                  _files=files)
                removals = publication.publish(manifest_chunks(written))  # (streamed: never whole in memory)
            except BaseException:
                # Each descriptor closed once: closed here and again by the plan's files when collected, a number
                # another thread had opened since (a lock, a pipe) was closed under it.
                if files is not None:
                    files.close()
                else:
                    for fd in kept:
                        os.close(fd)
                raise
        left = [*((name, FILE_HELD) for name in removals.held), *removals.failed]
        if left:  # (every previous file that stays is named: held ones too, or they stayed unseen)
            _warn_left(prefix, publication.directory, left)
        return written
    except OSError as exc:
        raise DestinationError(
            f"cannot write the conversion into {prefix!r}: {exc.strerror or exc}"
            + (" (the disk is full)" if getattr(exc, "errno", None) in (28, 27) else "")
        ) from exc
    finally:
        bar.close()


def _warn_left(prefix: str, directory: str, left: list[tuple[str, str]]) -> None:
    """The CleanupWarning of files the publication could not remove, each with why (the conversion is
    published)."""
    shown = "; ".join(f"{os.path.join(directory, name)!r}: {why}" for name, why in left[:3])
    more = f"; and {len(left) - 3} more" if len(left) > 3 else ""
    warnings.warn(CleanupWarning(
        f"the conversion into {prefix!r} is published, but {counted(len(left), 'file')} it replaces could "
        "not be "
        f"removed ({shown}{more}); they stay on the disk until `dmlbridge clean {prefix}` (dmlbridge.clean) "
        "removes them"
    ), stacklevel=5)  # (the caller of convert_model)
