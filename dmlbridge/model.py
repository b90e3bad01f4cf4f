"""Whole-model conversion: every constant of an ONNX model in one DirectML upload buffer, plus its manifest.

:func:`convert_model` writes ``PREFIX.bin`` (the upload buffer image: each tensor's bytes at an offset that is a
multiple of ``alignment``, zero bytes between) and ``PREFIX.json`` (the manifest: every constant's key, origin,
ONNX type and shape, conversion, offset and DML_BUFFER_TENSOR_DESC fields). :func:`load_plan` reads a manifest
back and validates it against its .bin; :func:`plan_model` computes the same plan without writing anything.

Guarantees:

- Streaming: tensors are decoded and written one at a time (external data through a read-only mmap of just the
  tensor's range; small stored constants in batches of at most 1 MiB), so the memory conversion needs is bounded
  by the largest tensor, not by the model. (The model protobuf itself is parsed into memory by onnx: weights kept
  inline in a single .onnx file are in memory anyway.)
  A tensor whose stored bytes already are its DirectML bytes (a "native" type such as FLOAT, FLOAT16, INT64 or
  INT4 in raw_data or external data) is written without being decoded; large external ones are copied from
  their file by the kernel (``copy_file_range``/``sendfile``, after the same checks as any external read) when
  no checksum is computed.
- Atomic outputs: both files are written to temporary files beside the targets
  (``.NAME.pPID-hHOST.XXXXXXXX.dmlbridge-tmp``: NAME is ``PREFIX.bin`` or ``PREFIX.json``, PID the writing
  process, HOST a hash of its host name), fsync'd, and renamed into place (.bin, then .json) only when both are
  complete, and the directory is fsync'd after the renames; Ctrl-C during the two renames is deferred until they
  are done, and a failed .json rename puts the previous .bin back (through a hard link made just before). On any
  error or KeyboardInterrupt the temporary files are removed and the previous outputs are untouched.
  ``fsync=False`` skips the fsyncs: the renames are still atomic for the process (errors, Ctrl-C, SIGKILL), but
  after a power loss or an operating system crash a renamed output may be empty or incomplete.
- A process killed outright (SIGKILL, power loss) cannot clean up. Its outputs are still whole: each target is
  absent, the complete previous version or the complete new one, but a kill between the two renames leaves the
  new .bin beside the previous .json. ``load_plan`` always refuses such a pair: the manifest records
  ``bin_fingerprint``, a SHA-256 over the .bin's size and sampled bytes (the first and last 64 KiB, the first
  64 bytes of every entry, 1024 evenly spaced 64-byte samples), taken from the finished temporary file
  just before the renames and checked on every load (a few reads, whatever the file's size; the full SHA-256
  of ``checksum=True`` stays opt-in because it reads everything). Its temporary files stay behind, named as
  above; the next ``convert_model`` into the same prefix removes those whose writer, on this host, is no longer
  running (POSIX; elsewhere they are left for the user to delete).
- Outputs never overwrite the model file or one of its external data files.
- ``load_plan`` never trusts the manifest: every field's type and range, known types, each entry's desc against
  the target's mapping and ``calc_buffer_tensor_size``, alignment, bounds, overlaps and the .bin's size are checked,
  and nothing is allocated on the manifest's word alone (the .bin is read one entry at a time, on request).

External data of a model given as a path is resolved against the model's directory. A model given as bytes or as
a ModelProto has no directory: its external data is refused unless the caller passes ``base_dir=``.
"""

from __future__ import annotations

import array
import contextlib
import functools
import hashlib
import itertools
import operator
import os
import re
import secrets
import signal
import socket
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO

import numpy as np

from dmlbridge.constants import ModelConstant, _collector_paused, _find, _Found, find_constants, iter_external_tensors
from dmlbridge.encode import prepare
from dmlbridge.errors import (
    DestinationError,
    DmlBridgeError,
    ExternalDataError,
    InvalidArgumentError,
    LayoutError,
    TensorTooLargeError,
    UnsupportedTypeError,
)
from dmlbridge.external_data import ExternalDataReader, check_location
from dmlbridge.manifest import (
    _MAX_ALIGNMENT,
    MANIFEST_FORMAT,
    MANIFEST_FORMAT_VERSION,
    PlanEntry,
    UploadPlan,
    _bin_fingerprint,
    _Entries,
    _entry_json,
    _entry_line,
    _fingerprint_problem,
    _layout_of,
    _manifest_text,
    _shared_json,
    load_plan,
    manifest_text,
)
from dmlbridge.mapping import resolve
from dmlbridge.onnx_tensor import DEFAULT_MAX_TENSOR_BYTES
from dmlbridge.target import Target
from dmlbridge.types import DmlDataType, OnnxDataType
from dmlbridge.wire_scan import WIRE_SCAN_MAX_BYTES, BytesScan, scan_bytes

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_FORMAT_VERSION",
    "PlanEntry",
    "UploadPlan",
    "convert_model",
    "find_mismatches",
    "load_plan",
    "manifest_text",
    "plan_model",
    "read_model",
]

TEMP_SUFFIX = ".dmlbridge-tmp"
_ZEROS = bytes(1 << 16)
_ZERO_VIEW = memoryview(_ZEROS)
_DEFAULT_TARGET = Target()


# --- loading models ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedModel:
    """A model as convert_model reads it: the protobuf (external data not loaded) and where it came from."""

    proto: Any
    name: str | None
    size: int
    path: str | None
    base_dir: str | None
    serialized: bytes | None = field(default=None, repr=False, compare=False)
    """The model's bytes, kept when the model is at most WIRE_SCAN_MAX_BYTES (for wire_scan); else None."""


def read_model(model: Any, base_dir: str | os.PathLike[str] | None = None) -> LoadedModel:
    """Read a model (a path, serialized bytes or an ``onnx.ModelProto``) without loading external data.

    Unreadable files and data that is not an ONNX model raise InvalidArgumentError (never DecodeError/OSError).
    """
    import onnx

    path = None
    serialized: bytes | None = None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not isinstance(path, str):
            path = os.fsdecode(path)
        try:
            st = os.stat(path)
        except (OSError, ValueError) as exc:
            raise InvalidArgumentError(f"cannot read model {path!r}: {getattr(exc, 'strerror', None) or exc}") from None
        if not stat.S_ISREG(st.st_mode):
            raise InvalidArgumentError(f"model {path!r} is not a regular file")
        try:
            if _protobuf_file(path) and st.st_size <= WIRE_SCAN_MAX_BYTES:
                with open(path, "rb") as file:  # read here, as onnx.load does, to keep the bytes
                    serialized = file.read()
                proto = onnx.load_model_from_string(serialized)
            else:
                proto = onnx.load(path, load_external_data=False)
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read model {path!r}: {exc.strerror or exc}") from None
        except Exception as exc:  # noqa: BLE001 - protobuf and onnx raise many types for garbage input
            raise InvalidArgumentError(f"{path!r} is not a valid ONNX model ({type(exc).__name__}: {exc})") from None
        name: str | None = os.path.basename(path)
        size = st.st_size
        if base_dir is None:
            base_dir = os.path.dirname(os.path.abspath(path))
    elif isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        try:
            proto = onnx.load_model_from_string(data)
        except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError, RuntimeError, ...
            raise InvalidArgumentError(f"the bytes are not a valid ONNX model ({type(exc).__name__}: {exc})") from None
        name, size = None, len(data)
        serialized = data if size <= WIRE_SCAN_MAX_BYTES else None
    elif getattr(getattr(model, "DESCRIPTOR", None), "full_name", None) == "onnx.ModelProto":
        proto, name, size = model, None, model.ByteSize()
        # (Serializing it costs a tenth of what the byte scan saves on a model of many small constants.)
        serialized = model.SerializeToString() if size <= WIRE_SCAN_MAX_BYTES else None
    else:
        raise InvalidArgumentError(
            f"model must be a path, the bytes of a .onnx file or an onnx.ModelProto, not {type(model).__name__}"
        )
    if not proto.HasField("graph"):
        what = repr(path) if path else "the model"
        raise InvalidArgumentError(f"{what} has no graph: it is not an ONNX model (or an empty one)")
    directory = None if base_dir is None else os.fspath(base_dir)
    return LoadedModel(proto, name, size, path, None if directory is None else str(directory), serialized)


def _protobuf_file(path: str) -> bool:
    """Whether onnx.load reads ``path`` as binary protobuf (it picks a text format by the file's extension)."""
    from onnx.serialization import registry

    return registry.get_format_from_file_extension(os.path.splitext(path)[1]) in (None, "protobuf")


def _constants(loaded: LoadedModel) -> tuple[list[_Found], BytesScan | None]:
    """The model's constants, and the byte scan that found them when it could read the model's bytes."""
    scan = None if loaded.serialized is None else scan_bytes(loaded.proto, loaded.serialized)
    return (_find(loaded.proto), None) if scan is None else (scan.found, scan)


def _reader(loaded: LoadedModel, external_data_root: str | os.PathLike[str] | None) -> ExternalDataReader | None:
    if loaded.base_dir is None:
        if external_data_root is not None:
            raise InvalidArgumentError(
                "external_data_root= needs base_dir= when the model is given as bytes or a ModelProto"
            )
        return None  # external data is then refused by tensor_to_array, naming the tensor
    return ExternalDataReader(loaded.base_dir, external_data_root)


# --- planning ------------------------------------------------------------------------------------------------


def _align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


_PLAN_FIELDS = (
    "key", "origin", "onnx_type", "shape", "conversion", "offset", "dml_type", "sizes", "strides",
    "total_tensor_size_in_bytes", "guaranteed_base_offset_alignment", "skipped",
)


@dataclass(frozen=True)
class _Pair:
    """What the entries of one (ONNX type, shape) pair share: a model repeats both, so each pair is planned once.

    ``fields``: a PlanEntry's fields with key, origin and offset None; ``total``: TotalTensorSizeInBytes, -1 when
    the pair is skipped; ``error``: the error class a skip raises under strict=True; ``json``: the text of its
    manifest lines around the offset (("", "") when skipped); ``as_is``: its stored bytes are its DirectML bytes
    (a "native" conversion; 4-bit types aside: their spare nibble is _write_stored's).
    """

    fields: dict[str, Any]
    total: int
    error: type[DmlBridgeError]
    json: tuple[str, str]
    conversion: str | None
    dml_type: DmlDataType | None
    as_is: bool = False


def _plan_entries(
    constants: list[ModelConstant] | list[_Found], target: Target, alignment: int, min_dims: int,
    lines: list[str] | None = None,
) -> tuple[_Entries, list[int | None], list[_Pair], int]:
    """The entries by key, each constant's offset (None when skipped) and pair, and the .bin size; when ``lines``
    is given, each entry's manifest line is appended to it (made here from the text its pair shares).

    The entries are made when first read (a model can hold 100,000 constants): conversion works from the offsets
    and pairs.
    """
    keys: list[str] = []
    origins: list[str] = []
    offsets: list[int | None] = []
    pairs: list[_Pair] = []
    end = 0
    planned: dict[tuple[OnnxDataType, tuple[int, ...]], _Pair] = {}
    rows: dict[OnnxDataType, Any] = {}
    for constant in constants:
        onnx_type, shape = constant.onnx_type, constant.shape
        pair = planned.get((onnx_type, shape))
        if pair is None:
            row = rows.get(onnx_type)
            if row is None:
                row = rows[onnx_type] = resolve(onnx_type, target)
            pair = planned[onnx_type, shape] = _plan_pair(onnx_type, shape, row, alignment, min_dims,
                                                          target.max_dimension_count)
        key, origin = constant.key, constant.origin
        keys.append(key)
        origins.append(origin)
        pairs.append(pair)
        if pair.total >= 0:
            offset = -(-end // alignment) * alignment
            offsets.append(offset)
            end = offset + pair.total
            if lines is not None:
                lines.append(_entry_line(key, origin, offset, pair.json))
        else:
            offsets.append(None)
            if lines is not None:
                lines.append(_entry_json(PlanEntry(**{**pair.fields, "key": key, "origin": origin})))
    entries = _Entries(keys, origins, offsets, [pair.fields for pair in pairs])
    return entries, offsets, pairs, end


def _plan_pair(
    onnx_type: OnnxDataType, shape: tuple[int, ...], row: Any, alignment: int, min_dims: int, max_dims: int
) -> _Pair:
    fields = dict.fromkeys(_PLAN_FIELDS)
    fields["onnx_type"], fields["shape"] = onnx_type, shape
    if row.dml_type is None:
        fields["skipped"] = f"{onnx_type.name}: {row.reason}"
        return _Pair(fields, -1, UnsupportedTypeError, ("", ""), None, None)
    if 0 in shape:
        fields["skipped"] = f"empty tensor (shape {list(shape)}): DirectML has no empty tensors"
        return _Pair(fields, -1, LayoutError, ("", ""), None, None)
    try:
        sizes, strides, total = _layout_of(onnx_type, shape, row.dml_type, row.conversion, min_dims, max_dims)
    except LayoutError as exc:
        fields["skipped"] = str(exc)
        return _Pair(fields, -1, LayoutError, ("", ""), None, None)
    fields.update(conversion=row.conversion, dml_type=row.dml_type, sizes=sizes, strides=strides,
                  total_tensor_size_in_bytes=total, guaranteed_base_offset_alignment=alignment)
    shared = _shared_json(onnx_type, shape, row.conversion, row.dml_type, sizes, strides, total, alignment)
    as_is = row.conversion == "native" and row.dml_type not in _FOUR_BIT
    return _Pair(fields, total, DmlBridgeError, shared, row.conversion, row.dml_type, as_is)


def _check_options(target: Any, alignment: Any, min_dims: Any) -> None:
    if not isinstance(target, Target):
        raise InvalidArgumentError(f"target must be a dmlbridge.Target, got {type(target).__name__}")
    if (
        isinstance(alignment, bool)
        or not isinstance(alignment, int)
        or alignment < 16
        or alignment > _MAX_ALIGNMENT
        or alignment & (alignment - 1)
    ):
        raise InvalidArgumentError(
            f"alignment must be a power of two from 16 (DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT) to 2^31, got "
            f"{alignment!r}; 256 suits most uses"
        )
    if isinstance(min_dims, bool) or not isinstance(min_dims, int) or not 0 <= min_dims <= target.max_dimension_count:
        raise InvalidArgumentError(
            f"min_dims must be a whole number from 0 to {target.max_dimension_count} (the most dimensions feature "
            f"level {target.feature_level.dotted} allows), got {min_dims!r}"
        )


def _dmlbridge_version() -> str:
    from dmlbridge import __version__

    return __version__


def plan_model(
    model: Any,
    *,
    target: Target = _DEFAULT_TARGET,
    alignment: int = 256,
    min_dims: int = 1,
    strict: bool = False,
    base_dir: str | os.PathLike[str] | None = None,
) -> UploadPlan:
    """The plan :func:`convert_model` would write, computed from the model's protobuf alone (no value is decoded
    and no external file opened, so value errors such as an INT64 too large to narrow are not found here).

    The result has no .bin (``bin_path`` is None): its entries, offsets and total size are what conversion gives.
    """
    _check_options(target, alignment, min_dims)
    loaded = read_model(model, base_dir)
    with _collector_paused():
        constants, _ = _constants(loaded)
        entries, _, pairs, total = _plan_entries(constants, target, alignment, min_dims)
    if strict:
        _raise_if_skipped(constants, pairs)
    return UploadPlan(entries, target, alignment, min_dims, total, loaded.name, loaded.size, _dmlbridge_version())


def _raise_if_skipped(constants: list[_Found], pairs: list[_Pair]) -> None:
    skipped = [i for i, pair in enumerate(pairs) if pair.total < 0]
    if skipped:
        constant, pair = constants[skipped[0]], pairs[skipped[0]]
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        raise pair.error(
            f"constant {constant.key!r} ({constant.origin}) cannot be converted: {pair.fields['skipped']}{more}; "
            "strict=True makes that an error"
        )


# --- converting ----------------------------------------------------------------------------------------------


def convert_model(
    model: Any,
    out_prefix: str | os.PathLike[str],
    *,
    target: Target = _DEFAULT_TARGET,
    alignment: int = 256,
    min_dims: int = 1,
    progress: bool | None = None,
    strict: bool = False,
    external_data_root: str | os.PathLike[str] | None = None,
    checksum: bool = False,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    base_dir: str | os.PathLike[str] | None = None,
    fsync: bool = True,
) -> UploadPlan:
    """Convert every constant of an ONNX model into one DirectML upload buffer: ``out_prefix.bin`` and its
    manifest ``out_prefix.json``.

    Args:
        model: a path to a .onnx file, its bytes, or an ``onnx.ModelProto``.
        out_prefix: the output path without extension.
        target: the DirectML target (feature level, supported types, int64 and lossy policy).
        alignment: each tensor's offset is a multiple of this (a power of two >= 16); it is also every desc's
            GuaranteedBaseOffsetAlignment.
        min_dims: pad sizes with leading 1s to at least this many dimensions (most operators want 4).
        progress: a progress bar (tqdm) on stderr: None shows it when stderr is a terminal, True always,
            False never.
        strict: raise instead of skipping constants that cannot be converted (empty, strings, complex,
            types the target cannot hold, tensors DirectML's layout rules refuse).
        external_data_root: widen the directory external data files may resolve into (the model's directory
            by default), e.g. to a Hugging Face cache whose files are symlinks into a blobs folder.
        checksum: record the SHA-256 of the .bin (computed while writing) as the manifest's ``bin_sha256``.
        max_tensor_bytes: refuse (TensorTooLargeError) a model with a constant whose decoded array would be
            larger (checked from the model's dims before any file is created, and again as each is decoded).
        base_dir: the directory external data locations are relative to; default: the model file's directory.
            Needed for external data when ``model`` is bytes or a ModelProto.
        fsync: True (the default) flushes both files to the disk before they are renamed into place, and the
            directory after, so that even a power loss or an operating system crash leaves each output absent,
            whole-previous or whole-new. False skips those flushes (``--no-fsync``): faster (the disk writes
            happen later, in the background), and the outputs are still replaced atomically if the process
            fails, is interrupted or is killed, but after a power loss or a crash of the operating system a
            renamed output may be empty or incomplete.

    Returns the :class:`UploadPlan` of the written files (the same as ``load_plan`` of the manifest).
    """
    _check_options(target, alignment, min_dims)
    for name, flag in (("strict", strict), ("checksum", checksum), ("fsync", fsync)):
        if not isinstance(flag, bool):
            raise InvalidArgumentError(f"{name} must be True or False, not {flag!r}")
    if progress is not None and not isinstance(progress, bool):
        raise InvalidArgumentError(f"progress must be None, True or False, not {progress!r}")
    if isinstance(max_tensor_bytes, bool) or not isinstance(max_tensor_bytes, int) or max_tensor_bytes < 0:
        raise InvalidArgumentError(f"max_tensor_bytes must be a non-negative integer, got {max_tensor_bytes!r}")
    bin_path, json_path = _output_paths(out_prefix)
    loaded = read_model(model, base_dir)
    with _collector_paused():
        return _convert(loaded, bin_path, json_path, target, alignment, min_dims, progress, strict, external_data_root,
                        checksum, max_tensor_bytes, fsync)


def _convert(
    loaded: LoadedModel, bin_path: str, json_path: str, target: Target, alignment: int, min_dims: int,
    progress: bool | None, strict: bool, external_data_root: str | os.PathLike[str] | None, checksum: bool,
    max_tensor_bytes: int, fsync: bool,
) -> UploadPlan:
    constants, scan = _constants(loaded)
    lines: list[str] = []
    entries, offsets, pairs, total = _plan_entries(constants, target, alignment, min_dims, lines)
    if strict:
        _raise_if_skipped(constants, pairs)
    reader = _reader(loaded, external_data_root)
    # (What the byte scan read is stored in the model: only the others may use external data.)
    stored_elsewhere = constants if scan is None else [constants[i] for i in np.flatnonzero(scan.starts < 0).tolist()]
    _need_reader(stored_elsewhere, reader)
    _refuse_overwriting_inputs((bin_path, json_path), loaded, stored_elsewhere, reader)
    plan = UploadPlan(entries, target, alignment, min_dims, total, loaded.name, loaded.size, _dmlbridge_version())
    _refuse_too_large(constants, max_tensor_bytes)
    digest, fingerprint = _write_outputs(
        plan, constants, offsets, pairs, bin_path, json_path, reader, max_tensor_bytes, checksum, progress, fsync,
        lines, scan,
    )
    return replace(plan, bin_sha256=digest, bin_fingerprint=fingerprint, bin_path=bin_path, manifest_path=json_path)


def _refuse_too_large(constants: list[_Found], max_tensor_bytes: int) -> None:
    """Refuse, before any output exists, a model with a constant whose decoded array would exceed the limit
    (even one that would be skipped: a claim that large is a broken or hostile model, e.g. a sparse tensor of
    2^40 elements)."""
    for constant in constants:
        if constant.nbytes > max_tensor_bytes:
            raise TensorTooLargeError(
                f"constant {constant.key!r} ({constant.origin}) claims {constant.nbytes} bytes "
                f"({constant.onnx_type.name} {list(constant.shape)}), more than max_tensor_bytes={max_tensor_bytes} "
                f"({max_tensor_bytes / 2**30:.3g} GiB; --max-tensor-bytes on the command line); raise the limit if "
                "you trust this model and have the memory"
            )


def _output_paths(out_prefix: Any) -> tuple[str, str]:
    if not isinstance(out_prefix, (str, os.PathLike)):
        raise InvalidArgumentError(f"out_prefix must be a path, not {type(out_prefix).__name__}")
    prefix = os.fspath(out_prefix)
    if not isinstance(prefix, str):
        prefix = os.fsdecode(prefix)
    if not prefix or prefix.endswith(("/", os.sep)) or "\x00" in prefix:
        raise InvalidArgumentError(f"out_prefix {prefix!r} must name a file (without extension), e.g. 'out/model'")
    directory = os.path.dirname(os.path.abspath(prefix))
    if not os.path.isdir(directory):
        raise DestinationError(f"the output directory {directory!r} does not exist")
    return prefix + ".bin", prefix + ".json"


def _same_file(a: str, b: str) -> bool:
    try:
        if os.path.realpath(a) == os.path.realpath(b):
            return True
        return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _need_reader(constants: list[_Found] | list[ModelConstant], reader: ExternalDataReader | None) -> None:
    """Refuse external data up front (before any output exists) when there is no directory to resolve it in."""
    if reader is None:
        for tensor in iter_external_tensors(constants):
            raise ExternalDataError(
                f"tensor {tensor.name!r} uses external data, but the model was given as bytes or a ModelProto, "
                "which has no directory; pass base_dir= (the directory of the model file)"
            )


def _refuse_overwriting_inputs(
    outputs: tuple[str, ...], loaded: LoadedModel, constants: list[_Found], reader: ExternalDataReader | None
) -> None:
    inputs = [loaded.path] if loaded.path else []
    if reader is not None:
        for tensor in iter_external_tensors(constants):
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            inputs.append(os.path.join(reader.base_dir, *check_location(location, f"tensor {tensor.name!r}")))
    for output in outputs:
        for source in dict.fromkeys(inputs):  # once per file, however many tensors it holds
            if _same_file(output, source):
                raise InvalidArgumentError(
                    f"the output {output!r} would overwrite the model's own file {source!r}; choose another prefix"
                )


class _Progress:
    """A tqdm bar of bytes on stderr, or nothing."""

    def __init__(self, wanted: bool | None, total: int, label: str) -> None:
        self._bar: Any = None
        if wanted is False:
            return
        if wanted is None:
            try:
                if not (sys.stderr is not None and sys.stderr.isatty()):
                    return
            except (AttributeError, ValueError):
                return
        try:
            from tqdm import tqdm
        except ImportError:
            if wanted:
                raise InvalidArgumentError("progress=True needs the tqdm package (pip install tqdm)") from None
            return
        self._bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr, desc=label,
                         leave=False, dynamic_ncols=True)

    @property
    def active(self) -> bool:
        return self._bar is not None

    def update(self, n: int) -> None:
        if self._bar is not None and n:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class _HashingWriter:
    """Writes the .bin and, when asked, feeds the same bytes to SHA-256 (the .bin is hashed while written).

    ``file`` is unbuffered: small writes (a model can hold 100,000 tiny constants) are gathered here and written
    in large pieces; large ones go straight to the file, and :meth:`copy_external` lets the kernel copy a
    tensor's external data without passing it through this process.
    """

    _GATHER = 1 << 20  # writes below this size are gathered; the gathered bytes are written at this size

    def __init__(self, file: BinaryIO, hashing: bool) -> None:
        self._file = file
        self._hash = hashlib.sha256() if hashing else None
        self._buffer = memoryview(bytearray(self._GATHER))  # reused: no fresh pages to fault in
        self._array = np.frombuffer(self._buffer, dtype=np.uint8)
        self._used = 0
        self.position = 0

    def write(self, data: Any) -> None:
        view = data if type(data) is bytes else memoryview(data).cast("B")
        n = len(view)
        if n < self._GATHER:
            end = self._used + n
            if end > self._GATHER:
                self.flush()
                end = n
            self._buffer[end - n : end] = view
            self._used = end
        else:
            self.flush()
            self._out(memoryview(view))
        self.position += n

    def place_many(self, offsets: list[int], pieces: list[bytes]) -> None:
        """Zeros and ``pieces`` (small bytes), each at its offset (ascending, from ``position`` on, spanning at
        most the gather buffer): the batch of many small constants, placed by a few numpy steps."""
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        self.place(np.asarray(offsets, dtype=np.int64), lengths, np.frombuffer(b"".join(pieces), dtype=np.uint8),
                   np.cumsum(lengths) - lengths)

    def place(self, offsets: np.ndarray, lengths: np.ndarray, source: np.ndarray, starts: np.ndarray) -> None:
        """Zeros and, at each of ``offsets`` (ascending, from ``position`` on; from the first to the end of the
        last at most the gather buffer), ``lengths[i]`` bytes of ``source`` from ``starts[i]``: many small
        constants placed by a few numpy steps."""
        self.zeros(int(offsets[0]) - self.position)  # (an alignment can be larger than the gather buffer)
        start, end = self.position, int(offsets[-1] + lengths[-1])
        if end - start > self._GATHER:
            raise DmlBridgeError(f"internal error: a batch of small constants spans {end - start} bytes")
        if self._used + end - start > self._GATHER:
            self.flush()
        region = self._array[self._used : self._used + end - start]
        region.fill(0)
        # Byte j of piece i is source[starts[i] + j] and goes to region[offsets[i] - start + j].
        within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        region[np.repeat(offsets - start, lengths) + within] = source[np.repeat(starts, lengths) + within]
        self._used += end - start
        self.position = end

    def zeros(self, count: int) -> None:
        end = self._used + count
        if 0 < count <= len(_ZEROS) and end <= self._GATHER:  # the usual gap or padding: straight into the buffer
            self._buffer[self._used : end] = _ZERO_VIEW[:count]
            self._used = end
            self.position += count
            return
        while count > 0:
            chunk = min(count, len(_ZEROS))
            self.write(_ZERO_VIEW[:chunk])
            count -= chunk

    def copy_external(self, reader: ExternalDataReader, tensor: Any, nbytes: int, count: int) -> int:
        """Copy the first ``count`` bytes of a tensor's external data into the file in the kernel; returns how
        many were copied (0 when hashing, which needs the bytes here, or when the kernel cannot copy them)."""
        if self._hash is not None:
            return 0
        self.flush()
        done = reader.copy_to(tensor, nbytes, self._file.fileno(), count)
        self.position += done
        return done

    def flush(self) -> None:
        if self._used:
            self._out(self._buffer[: self._used])
            self._used = 0

    def _out(self, view: memoryview) -> None:
        if self._hash is not None:
            self._hash.update(view)
        while len(view):
            written = self._file.write(view)
            view = view[written:]

    def hexdigest(self) -> str | None:
        return None if self._hash is None else self._hash.hexdigest()


def _write_outputs(
    plan: UploadPlan,
    constants: list[_Found],
    offsets: list[int | None],
    pairs: list[_Pair],
    bin_path: str,
    json_path: str,
    reader: ExternalDataReader | None,
    max_tensor_bytes: int,
    checksum: bool,
    progress: bool | None,
    fsync: bool = True,
    entry_lines: list[str] | None = None,
    scan: BytesScan | None = None,
) -> tuple[str | None, str]:
    """Write both outputs atomically; returns the .bin's SHA-256 (when ``checksum``) and its fingerprint.
    ``entry_lines``: the manifest's entry lines, when _plan_entries made them; ``scan``: the byte scan that found
    ``constants``, if one did."""
    directory = os.path.dirname(os.path.abspath(bin_path))
    _remove_stale_temps(directory, (bin_path, json_path))
    temps: list[str] = []
    bar = _Progress(progress, plan.total_size, os.path.basename(bin_path))
    try:
        tmp_bin = _temp_file(directory, bin_path, temps)
        try:
            with _open_temp(tmp_bin) as file:
                writer = _HashingWriter(file, checksum)
                for first, stop, as_is in _runs(constants, offsets, pairs, scan):
                    if as_is:
                        _place_spans(writer, offsets, first, stop, scan, bar)  # type: ignore[arg-type]
                    else:
                        _write_each(writer, plan, constants, offsets, pairs, first, stop, scan, reader,
                                    max_tensor_bytes, bar)
                bar.update(plan.total_size - writer.position)
                writer.zeros(plan.total_size - writer.position)  # the last small constant's padding
                writer.flush()
                if fsync:
                    os.fsync(file.fileno())
            if writer.position != plan.total_size:
                raise DmlBridgeError(
                    f"internal error: wrote {writer.position} bytes but planned {plan.total_size}"
                )
            digest = writer.hexdigest()
            # Sampled from the finished file as it is on disk, just before the renames.
            fingerprint = _bin_fingerprint(tmp_bin, plan.total_size, [o for o in offsets if o is not None],
                                           [pair.total for pair in pairs if pair.total >= 0])
            text = _manifest_text(replace(plan, bin_sha256=digest, bin_fingerprint=fingerprint), entry_lines)
            tmp_json = _temp_file(directory, json_path, temps)
            with _open_temp(tmp_json) as file:
                file.write(text.encode("ascii"))
                file.flush()
                if fsync:
                    os.fsync(file.fileno())
            _copy_mode(tmp_bin, bin_path)
            _copy_mode(tmp_json, json_path)
            _commit(tmp_bin, bin_path, tmp_json, json_path, temps)
        except OSError as exc:
            raise DestinationError(
                f"cannot write {bin_path!r} / {json_path!r}: {exc.strerror or exc}"
                + (" (the disk is full)" if getattr(exc, "errno", None) in (28, 27) else "")
            ) from exc
        if fsync:
            _fsync_directory(directory)
        return digest, fingerprint
    except BaseException:
        # Failure or Ctrl-C: remove what this call created; the previous outputs were never touched.
        for path in temps:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    finally:
        bar.close()


_LITTLE_ENDIAN = sys.byteorder == "little"
# Typed fields whose entries are the values themselves, with no range to check (tensor_to_array makes them an
# array of the type as they are): array.array of the same width writes the same native bytes.
_TYPED_AS_IS = {
    onnx_type: (field_name, code)
    for onnx_type, field_name, code in (
        (OnnxDataType.FLOAT, "float_data", "f"),
        (OnnxDataType.DOUBLE, "double_data", "d"),
        (OnnxDataType.INT32, "int32_data", "i"),
        (OnnxDataType.INT64, "int64_data", "q"),
        (OnnxDataType.UINT64, "uint64_data", "Q"),
    )
    if array.array(code).itemsize == onnx_type.numpy().itemsize
}
_FLOAT_CODES = {"f": np.float32, "d": np.float64}
_FOUR_BIT = frozenset({DmlDataType.INT4, DmlDataType.UINT4})


_SMALL = 1 << 16  # see _small_stored
_KERNEL_COPY_MIN = 1 << 20  # external tensors from this size are copied by the kernel (when not hashing)


_AS_IS = operator.attrgetter("as_is")


def _runs(
    constants: list[_Found], offsets: list[int | None], pairs: list[_Pair], scan: BytesScan | None
) -> Iterator[tuple[int, int, bool]]:
    """The constants in runs (first, stop, as_is): as_is when each is a span of the model's bytes (wire_scan) that
    is its DirectML bytes as stored (_Pair.as_is). Such a run is written by a few numpy steps whatever its
    length; the others are written one at a time."""
    if scan is None:
        yield 0, len(constants), False
        return
    # (A constant read from the bytes is at most 64 KiB, and _refuse_too_large has held it to max_tensor_bytes.)
    as_is = (scan.starts >= 0) & np.fromiter(map(_AS_IS, pairs), dtype=bool, count=len(pairs))
    edges = np.flatnonzero(as_is[1:] != as_is[:-1]) + 1
    bounds = [0, *edges.tolist(), len(constants)]
    for first, stop in itertools.pairwise(bounds):
        if stop > first:
            yield first, stop, bool(as_is[first])


def _place_spans(
    writer: _HashingWriter, offsets: list[int | None], first: int, stop: int, scan: BytesScan, bar: _Progress
) -> None:
    """Write constants[first:stop], each a span of the model's bytes, with the zeros before and between them."""
    places = np.array(offsets[first:stop], dtype=np.int64)
    starts, lengths = scan.starts[first:stop], scan.lengths[first:stop]
    ends = places + lengths
    done = 0
    while done < len(places):
        # As many as end within one gather buffer from the first.
        more = int(np.searchsorted(ends[done:], places[done] + _HashingWriter._GATHER, side="right"))
        batch = slice(done, done + max(more, 1))
        before = writer.position
        writer.place(places[batch], lengths[batch], scan.source, starts[batch])
        bar.update(writer.position - before)
        done = batch.stop


def _write_each(
    writer: _HashingWriter, plan: UploadPlan, constants: list[_Found], offsets: list[int | None], pairs: list[_Pair],
    first: int, stop: int, scan: BytesScan | None, reader: ExternalDataReader | None, max_tensor_bytes: int,
    bar: _Progress,
) -> None:
    """Write constants[first:stop] one at a time: small ones stored in their DirectML bytes are gathered and
    placed together, the others decoded (or copied) and written."""
    small = min(_SMALL, max_tensor_bytes)
    placed: list[int] = []
    pieces: list[bytes] = []
    batch_end = 0
    for position in range(first, stop):
        offset = offsets[position]
        if offset is None:
            continue  # skipped
        constant = constants[position]
        if constant.proto is None:
            constant = scan.with_tensor(position)  # type: ignore[union-attr]
        data = _small_stored(constant, pairs[position], small)
        if data is not None:
            if placed and offset + len(data) > batch_end:
                _place_batch(writer, placed, pieces, bar)
            if not placed:
                batch_end = offset + _HashingWriter._GATHER
            placed.append(offset)
            pieces.append(data)
            continue
        if placed:
            _place_batch(writer, placed, pieces, bar)
        before = writer.position
        writer.zeros(offset - before)
        _write_entry(writer, constant, plan.entries[constant.key], plan, reader, max_tensor_bytes)
        bar.update(writer.position - before)
    if placed:
        _place_batch(writer, placed, pieces, bar)


def _place_batch(writer: _HashingWriter, offsets: list[int], pieces: list[bytes], bar: _Progress) -> None:
    before = writer.position
    writer.place_many(offsets, pieces)
    bar.update(writer.position - before)
    offsets.clear()
    pieces.clear()


def _small_stored(constant: _Found, pair: _Pair, limit: int) -> bytes | None:
    """The DirectML bytes (without padding) of a small constant stored in them, or None: the common case of a
    model of many tiny constants, up to ``limit`` bytes, 4-bit types aside (their spare nibble is _write_stored's).
    """
    if pair.conversion != "native" or constant.nbytes > limit or pair.dml_type in _FOUR_BIT:
        return None
    return _stored_bytes(constant)


def _stored_bytes(constant: _Found) -> bytes | None:
    """What a TensorProto stores, as bytes: its raw_data, or the entries of a typed field that are the values
    themselves (FLOAT float_data, ...; through array.array, on little-endian hosts). None for any other storage,
    or when the count no longer matches what was found (the usual path checks it again)."""
    storage = constant.storage
    if storage == "raw":
        data = constant.proto.raw_data
    elif storage == "typed" and _LITTLE_ENDIAN and constant.onnx_type in _TYPED_AS_IS:
        field_name, code = _TYPED_AS_IS[constant.onnx_type]
        entries = getattr(constant.proto, field_name)
        if code in "fd":  # numpy reads the field's own bits: a float passed through Python would quiet a sNaN
            data = np.array(entries, dtype=_FLOAT_CODES[code]).tobytes()
        else:
            data = array.array(code, entries[:]).tobytes()  # a slice: a list, fast to read
    else:
        return None
    return data if len(data) == constant.packed_nbytes else None


def _write_entry(
    writer: _HashingWriter,
    constant: _Found,
    entry: PlanEntry,
    plan: UploadPlan,
    reader: ExternalDataReader | None,
    max_tensor_bytes: int,
) -> None:
    try:
        if _write_stored(writer, constant, entry, reader, max_tensor_bytes):
            return
        values = constant.constant().to_array(reader=reader, max_tensor_bytes=max_tensor_bytes)
        prepared = prepare(
            values, target=plan.target, min_dims=plan.min_dims, guaranteed_base_offset_alignment=plan.alignment
        )
    except DmlBridgeError as exc:
        # Name the constant: messages from the value checks (ValueRangeError, ...) do not know it.
        raise type(exc)(f"constant {constant.key!r} ({constant.origin}): {exc}") from exc
    except MemoryError:
        raise TensorTooLargeError(
            f"constant {constant.key!r} ({constant.origin}) needs {constant.nbytes} bytes "
            f"({constant.onnx_type.name} {list(constant.shape)}) and the allocation failed; free memory, or set "
            "max_tensor_bytes (--max-tensor-bytes) below this size to refuse such constants up front"
        ) from None
    if (
        prepared.dml_type is not entry.dml_type
        or prepared.sizes != entry.sizes
        or prepared.strides != entry.strides
        or prepared.total_tensor_size_in_bytes != entry.total_tensor_size_in_bytes
    ):
        raise DmlBridgeError(f"internal error: constant {constant.key!r} was planned as {entry} but became {prepared}")
    writer.write(prepared.data)


def _write_stored(
    writer: _HashingWriter,
    constant: _Found,
    entry: PlanEntry,
    reader: ExternalDataReader | None,
    max_tensor_bytes: int,
) -> bool:
    """Write a tensor whose stored bytes are already its DirectML bytes, without decoding and preparing it;
    False (nothing written) for every other constant.

    That is a "native" TensorProto (the DML type is its own type; a packed layout: whole-model entries have no
    strides): its raw_data or external bytes are little-endian elements in C order, exactly what ``prepare``
    writes, followed by the zero padding up to TotalTensorSizeInBytes. For INT4/UINT4 they are nibbles in
    DirectML's order; only the spare high nibble of an odd count must be zeroed. A typed field (float_data, ...)
    is decoded as ``tensor_to_array`` does (with its checks) and written as is; the fields whose entries are the
    values themselves (float_data of FLOAT, int64_data of INT64, ...) go through ``array.array``, which is faster
    for small tensors and writes the same bytes. Every check ``tensor_to_array`` makes on these bytes was made when
    the constant was found (exact byte and entry counts) or is made here by the same code (the external data
    reader, the typed-field decoder).
    """
    if constant.kind not in ("initializer", "value") or entry.conversion != "native":
        return False
    if constant.nbytes > max_tensor_bytes:
        return False  # the usual path raises the usual error
    assert entry.dml_type is not None and entry.total_tensor_size_in_bytes is not None
    tensor, storage, packed = constant.proto, constant.storage, constant.packed_nbytes
    padding = entry.total_tensor_size_in_bytes - packed
    odd_nibble = entry.dml_type in _FOUR_BIT and constant.size % 2 == 1
    data: Any
    if storage == "typed":
        if entry.dml_type in _FOUR_BIT or not _LITTLE_ENDIAN:
            return False  # packed bytes in int32_data, or a big-endian host: the usual path
        if constant.onnx_type in _TYPED_AS_IS:  # entries that are the values themselves: no numpy array
            data = _stored_bytes(constant)
            if data is None:
                return False
        else:
            data = constant.constant().to_array(reader=reader, max_tensor_bytes=max_tensor_bytes)
            if not data.flags.c_contiguous or data.nbytes != packed:
                return False
    elif storage == "raw":
        data = _stored_bytes(constant)
        if data is None:
            return False
    else:
        if reader is None:
            return False  # the usual path names the problem
        whole = packed - odd_nibble  # the bytes that are copied unchanged
        copied = writer.copy_external(reader, tensor, packed, whole) if whole >= _KERNEL_COPY_MIN else 0
        data = reader.read(tensor, packed)[copied:] if copied < packed else b""
    if odd_nibble:
        writer.write(data[:-1])
        writer.write(bytes((data[-1] & 0x0F,)))  # the spare high nibble is zero
    else:
        writer.write(data)
    writer.zeros(padding)
    return True


def _commit(tmp_bin: str, bin_path: str, tmp_json: str, json_path: str, temps: list[str]) -> None:
    """Rename both temporary files into place, .bin first; if the .json rename fails, put the old .bin back."""
    # A second name for the previous .bin (a hard link: no copy) lets a failed .json rename be undone.
    backup = _link_backup(bin_path, temps)
    had_bin = backup is not None or os.path.lexists(bin_path)
    with _sigint_deferred():
        os.replace(tmp_bin, bin_path)
        temps.remove(tmp_bin)
        try:
            os.replace(tmp_json, json_path)
            temps.remove(tmp_json)
        except BaseException:
            with contextlib.suppress(OSError):
                if backup is not None:
                    os.replace(backup, bin_path)
                    temps.remove(backup)
                elif not had_bin:
                    os.unlink(bin_path)
            raise
    if backup is not None:
        with contextlib.suppress(OSError):
            os.unlink(backup)
            temps.remove(backup)


def _link_backup(path: str, temps: list[str]) -> str | None:
    if not os.path.isfile(path) or os.path.islink(path):
        return None
    directory, base = os.path.split(os.path.abspath(path))
    for _ in range(8):
        candidate = os.path.join(directory, f".{base}.{_owner_tag()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
        try:
            os.link(path, candidate)
        except FileExistsError:
            continue
        except (OSError, NotImplementedError):
            return None  # no hard links here (FAT, some network shares): no undo, the window stays tiny
        temps.append(candidate)
        return candidate
    return None


@functools.lru_cache(maxsize=1)
def _host_tag() -> str:
    try:
        host = socket.gethostname()
    except OSError:  # pragma: no cover - gethostname does not fail in practice
        host = ""
    return hashlib.sha256(host.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def _owner_tag() -> str:
    """``pPID-hHOST``: who writes a temporary file, so that a later run can tell a dead writer's leftovers."""
    return f"p{os.getpid()}-h{_host_tag()}"


def _temp_pattern(target: str) -> re.Pattern[str]:
    base = re.escape(os.path.basename(target))
    return re.compile(rf"^\.{base}\.p([0-9]{{1,10}})-h([0-9a-f]{{8}})\.[A-Za-z0-9_]+{re.escape(TEMP_SUFFIX)}$")


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not a process id we wrote: leave the file alone
    try:
        os.kill(pid, 0)  # signal 0: an existence check, nothing is sent (POSIX only: see _remove_stale_temps)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):
        return True  # EPERM: alive, owned by someone else; anything else: do not guess
    return True


def _remove_stale_temps(directory: str, targets: tuple[str, ...]) -> None:
    """Remove the temporary files a killed convert_model left for these targets: only names this module makes,
    written on this host by a process that no longer exists. Never fails (leftovers are harmless)."""
    if os.name != "posix":
        return  # os.kill(pid, 0) is not an existence check on Windows (it terminates the process)
    patterns = [_temp_pattern(t) for t in targets]
    try:
        with os.scandir(directory) as listing:
            names = [entry.name for entry in listing if entry.name.endswith(TEMP_SUFFIX)]
    except OSError:
        return
    own = os.getpid()
    for name in names:
        for pattern in patterns:
            match = pattern.match(name)
            if match is None:
                continue
            pid = int(match.group(1))
            if match.group(2) != _host_tag() or pid == own or _pid_alive(pid):
                break
            path = os.path.join(directory, name)
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(path).st_mode):
                    os.unlink(path)
            break


def _temp_file(directory: str, target: str, temps: list[str]) -> str:
    try:
        fd, path = tempfile.mkstemp(
            prefix=f".{os.path.basename(target)}.{_owner_tag()}.", suffix=TEMP_SUFFIX, dir=directory
        )
    except OSError as exc:
        raise DestinationError(f"cannot create a file in {directory!r}: {exc.strerror or exc}") from None
    temps.append(path)
    os.close(fd)
    return path


def _open_temp(path: str) -> BinaryIO:
    """The (empty) temporary file _temp_file made, opened for writing, unbuffered. Not with O_TRUNC: on ext4,
    truncating a file and writing it again makes close() start writing it all back to the disk at once (the
    "auto_da_alloc" safeguard for programs that do not fsync), which costs a third of the time of copying 1 GiB."""
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    return open(fd, "wb", buffering=0)


def _copy_mode(temp: str, final: str) -> None:
    """mkstemp makes 0600 files; give the output the existing file's mode, or what a plain open() would."""
    try:
        mode = stat.S_IMODE(os.stat(final).st_mode)
    except OSError:
        mask = os.umask(0o022)
        os.umask(mask)
        mode = 0o666 & ~mask
    with contextlib.suppress(OSError):
        os.chmod(temp, mode)


def _fsync_directory(directory: str) -> None:
    # Makes the renames durable on POSIX; Windows cannot open directories this way.
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold back Ctrl-C while the outputs are renamed, so the .bin and .json are replaced together."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        yield  # the caller handles SIGINT its own way: leave that alone
        return
    received: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        received.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


# --- verifying -----------------------------------------------------------------------------------------------


def find_mismatches(
    plan: UploadPlan,
    model: Any,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    external_data_root: str | os.PathLike[str] | None = None,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    limit: int = 1000,
) -> list[str]:
    """Where a written plan and a model's constants differ, one message each (empty when they agree); the
    first says so when the .bin no longer matches the manifest's bin_fingerprint.

    The engine of :meth:`UploadPlan.verify`; the model is read one constant at a time.
    """
    if plan.bin_path is None:
        raise InvalidArgumentError("this plan was not written (plan_model); there is no .bin to verify")
    loaded = read_model(model, base_dir)
    reader = _reader(loaded, external_data_root)
    constants = find_constants(loaded.proto)
    _need_reader(constants, reader)
    problems: list[str] = []
    fingerprint = _fingerprint_problem(plan, plan.bin_path)
    if fingerprint is not None:
        problems.append(fingerprint)
    keys = {c.key for c in constants}
    for key in plan.entries:
        if key not in keys:
            problems.append(f"{key!r} is in the plan but not in the model")
    for constant in constants:
        if len(problems) >= limit:
            break
        entry = plan.entries.get(constant.key)
        if entry is None:
            problems.append(f"{constant.key!r} ({constant.origin}) is in the model but not in the plan")
            continue
        problem = _compare(plan, constant, entry, reader, max_tensor_bytes)
        if problem:
            problems.append(f"{constant.key!r}: {problem}")
    return problems


def _compare(
    plan: UploadPlan, constant: ModelConstant, entry: PlanEntry, reader: ExternalDataReader | None,
    max_tensor_bytes: int,
) -> str | None:
    if constant.onnx_type is not entry.onnx_type or constant.shape != entry.shape:
        return (f"the model has {constant.onnx_type.name} {list(constant.shape)}, the plan "
                f"{entry.onnx_type.name} {list(entry.shape)}")
    _, _, replanned, _ = _plan_entries([constant], plan.target, plan.alignment, plan.min_dims)
    if (replanned[0].total >= 0) != (entry.skipped is None):
        return f"skipped in {'the plan' if entry.skipped else 'a fresh conversion'} but not in the other"
    if entry.skipped is not None:
        return None
    try:
        values = constant.to_array(reader=reader, max_tensor_bytes=max_tensor_bytes)
        expected = prepare(values, target=plan.target, min_dims=plan.min_dims,
                           guaranteed_base_offset_alignment=plan.alignment)
    except DmlBridgeError as exc:
        return f"the model's value cannot be converted: {exc}"
    actual = plan.read(entry.key)
    if expected.data.shape != actual.shape or not np.array_equal(expected.data, actual):
        differ = np.flatnonzero(expected.data != actual) if expected.data.shape == actual.shape else np.array([0])
        first = int(differ[0])
        assert entry.offset is not None
        return (f"{len(differ)} byte(s) differ from a fresh conversion, the first at .bin offset "
                f"{entry.offset + first}")
    back = plan.array(entry.key)
    if entry.conversion == "lossy":
        with np.errstate(over="ignore"):  # out of FLOAT32 range becomes inf, as in the conversion
            values = values.astype(np.float32).astype(values.dtype)
    if not _same_values(back, values, widened_float=entry.conversion == "widen" and constant.onnx_type.is_float):
        return "the values read back from the .bin differ from the model's"
    return None


def _same_values(a: np.ndarray, b: np.ndarray, *, widened_float: bool) -> bool:
    """Bit-for-bit equality of two arrays of one dtype (NaN vs NaN of any payload allowed when widened_float)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype == np.bool_:
        return bool(np.array_equal(a, b))
    if a.dtype.kind == "V":  # ml_dtypes sub-byte types, one byte per element
        if a.dtype.name.startswith(("int", "uint")):
            return bool(np.array_equal(a.astype(np.int64), b.astype(np.int64)))
        # float4/float6: float32 holds every value exactly and keeps -0 apart from +0.
        a, b = a.astype(np.float32), b.astype(np.float32)
    bits = np.dtype(f"u{a.dtype.itemsize}")
    same = a.view(bits) == b.view(bits)
    if widened_float:
        same |= np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    return bool(same.all())
