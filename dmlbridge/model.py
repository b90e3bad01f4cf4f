"""Whole-model conversion: every constant of an ONNX model in one DirectML upload buffer, plus its manifest.

:func:`convert_model` writes ``PREFIX.bin`` (the upload buffer image: each tensor's bytes at an offset that is a
multiple of ``alignment``, zero bytes between) and ``PREFIX.json`` (the manifest: every constant's key, origin,
ONNX type and shape, conversion, offset and DML_BUFFER_TENSOR_DESC fields). :func:`load_plan` reads a manifest
back and validates it against its .bin; :func:`plan_model` computes the same plan without writing anything.

Guarantees:

- Streaming: tensors are decoded and written one at a time (external data through a read-only mmap of just the
  tensor's range), so the memory conversion needs is bounded by the largest tensor, not by the model. (The model
  protobuf itself is parsed into memory by onnx: weights kept inline in a single .onnx file are in memory anyway.)
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
import json
import os
import re
import secrets
import signal
import socket
import stat
import sys
import tempfile
import threading
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

import numpy as np

from dmlbridge.constants import ModelConstant, find_constants, iter_external_tensors
from dmlbridge.decode import decode
from dmlbridge.descs import DML_BUFFER_TENSOR_DESC, buffer_tensor_desc_fields, make_buffer_tensor_desc
from dmlbridge.encode import PreparedTensor, prepare
from dmlbridge.errors import (
    DestinationError,
    DmlBridgeError,
    ExternalDataError,
    InvalidArgumentError,
    LayoutError,
    ManifestError,
    TensorTooLargeError,
    UnsupportedTypeError,
)
from dmlbridge.external_data import ExternalDataReader, check_location
from dmlbridge.layout import calc_buffer_tensor_size, check_strides, packed_strides, plan_layout
from dmlbridge.mapping import Conversion, resolve
from dmlbridge.onnx_tensor import DEFAULT_MAX_TENSOR_BYTES, _decode_known
from dmlbridge.target import Target
from dmlbridge.types import DmlDataType, FeatureLevel, OnnxDataType

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

MANIFEST_FORMAT = "dmlbridge-upload-plan"
MANIFEST_FORMAT_VERSION = 1
TEMP_SUFFIX = ".dmlbridge-tmp"
_MAX_ALIGNMENT = 2**31  # GuaranteedBaseOffsetAlignment is a UINT
_ZEROS = bytes(1 << 16)
_ZERO_VIEW = memoryview(_ZEROS)
_CHUNK = 4 << 20
_DEFAULT_TARGET = Target()
_CONVERSIONS = ("native", "widen", "emulate", "narrow", "lossy")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_INT64_MAX = 2**63 - 1
# bin_fingerprint: what is sampled (see the module docstring). Changing any of these changes every fingerprint.
_FINGERPRINT_TAG = b"dmlbridge-bin-fingerprint-1\x00"
_FINGERPRINT_EDGE = 64 << 10
_FINGERPRINT_ENTRY = 64
_FINGERPRINT_SPREAD = 1024
_FINGERPRINT_WINDOW = 64 << 10  # sampled ranges closer than this are read with one read


# --- the plan ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanEntry:
    """One constant of an upload plan.

    Converted entries have an ``offset`` in the .bin, a ``dml_type`` and the DML_BUFFER_TENSOR_DESC fields
    (``sizes``, ``strides`` — None when packed —, ``total_tensor_size_in_bytes``,
    ``guaranteed_base_offset_alignment``; Flags is always 0). Skipped entries (empty tensors, strings, complex,
    types the target cannot hold) have all of those None and say why in ``skipped``.
    """

    key: str
    origin: str
    onnx_type: OnnxDataType
    shape: tuple[int, ...]
    conversion: Conversion | None
    offset: int | None
    dml_type: DmlDataType | None
    sizes: tuple[int, ...] | None
    strides: tuple[int, ...] | None
    total_tensor_size_in_bytes: int | None
    guaranteed_base_offset_alignment: int | None
    skipped: str | None

    @property
    def end(self) -> int | None:
        """The offset just past this entry's bytes (None when skipped)."""
        if self.offset is None or self.total_tensor_size_in_bytes is None:
            return None
        return self.offset + self.total_tensor_size_in_bytes

    def desc(self) -> dict[str, Any] | None:
        """The DML_BUFFER_TENSOR_DESC fields by their DirectML names (as PreparedTensor.desc()), None if skipped."""
        if self.dml_type is None or self.sizes is None:
            return None
        assert self.total_tensor_size_in_bytes is not None and self.guaranteed_base_offset_alignment is not None
        return buffer_tensor_desc_fields(
            self.dml_type,
            0,
            self.sizes,
            self.strides,
            self.total_tensor_size_in_bytes,
            self.guaranteed_base_offset_alignment,
        )

    def as_ctypes(self) -> DML_BUFFER_TENSOR_DESC:
        """A ctypes DML_BUFFER_TENSOR_DESC for this entry (InvalidArgumentError when it was skipped)."""
        desc = self.desc()
        if desc is None:
            raise InvalidArgumentError(f"entry {self.key!r} was skipped ({self.skipped}); it has no desc")
        return make_buffer_tensor_desc(
            desc["DataType"], 0, desc["Sizes"], desc["Strides"], desc["TotalTensorSizeInBytes"],
            desc["GuaranteedBaseOffsetAlignment"],
        )

    def to_json(self) -> dict[str, Any]:
        """The manifest form of this entry."""
        return {
            "key": self.key,
            "origin": self.origin,
            "onnx_type": self.onnx_type.name,
            "shape": list(self.shape),
            "conversion": self.conversion,
            "offset": self.offset,
            "dml_type": None if self.dml_type is None else self.dml_type.name,
            "desc": self.desc(),
            "skipped": self.skipped,
        }


@dataclass(frozen=True, eq=False)
class UploadPlan:
    """An upload buffer's layout: where each constant of a model sits in the .bin and how DirectML sees it.

    ``entries`` maps each key to its :class:`PlanEntry`, in model order. ``bin_path`` is None for a plan from
    :func:`plan_model`, which has no bytes.
    """

    entries: Mapping[str, PlanEntry]
    target: Target
    alignment: int
    min_dims: int
    total_size: int
    source_name: str | None
    source_size: int | None
    dmlbridge_version: str
    bin_sha256: str | None = None
    bin_path: str | None = None
    manifest_path: str | None = None
    bin_fingerprint: str | None = None

    @property
    def converted(self) -> list[PlanEntry]:
        """The entries that have bytes in the .bin, in manifest (model) order."""
        return [e for e in self.entries.values() if e.skipped is None]

    @property
    def skipped(self) -> list[PlanEntry]:
        """The entries that could not be converted."""
        return [e for e in self.entries.values() if e.skipped is not None]

    def manifest(self) -> dict[str, Any]:
        """The manifest (the JSON document of ``PREFIX.json``) as a dict."""
        doc = self._manifest_head()
        doc["entries"] = [e.to_json() for e in self.entries.values()]
        return doc

    def _manifest_head(self) -> dict[str, Any]:
        """The manifest's fields before ``entries``."""
        doc: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_FORMAT_VERSION,
            "dmlbridge_version": self.dmlbridge_version,
            "source": {"name": self.source_name, "size": self.source_size},
            "target": self.target.describe(),
            "alignment": self.alignment,
            "min_dims": self.min_dims,
            "total_size": self.total_size,
        }
        if self.bin_fingerprint is not None:
            doc["bin_fingerprint"] = self.bin_fingerprint
        if self.bin_sha256 is not None:
            doc["bin_sha256"] = self.bin_sha256
        return doc

    def _entry(self, key: str) -> PlanEntry:
        entry = self.entries.get(key) if isinstance(key, str) else None
        if entry is None:
            raise InvalidArgumentError(f"the plan has no entry {key!r}")
        if entry.skipped is not None:
            raise InvalidArgumentError(f"entry {key!r} was skipped ({entry.skipped}); it has no bytes")
        return entry

    def read(self, key: str) -> np.ndarray:
        """The entry's bytes in the .bin (``total_tensor_size_in_bytes`` of them), read now, as a uint8 array."""
        entry = self._entry(key)
        if self.bin_path is None:
            raise InvalidArgumentError("this plan was not written (plan_model); it has no .bin to read")
        assert entry.offset is not None and entry.total_tensor_size_in_bytes is not None
        out = np.empty(entry.total_tensor_size_in_bytes, dtype=np.uint8)
        try:
            with open(self.bin_path, "rb") as file:
                file.seek(entry.offset)
                view = out.data
                done = 0
                while done < len(out):
                    n = file.readinto(view[done:])
                    if not n:
                        raise ManifestError(
                            f"{self.bin_path} ended at byte {entry.offset + done}, inside entry {key!r} "
                            f"(bytes {entry.offset}..{entry.end}); the file changed after the plan was loaded"
                        )
                    done += n
        except OSError as exc:
            raise ManifestError(f"cannot read {self.bin_path}: {exc.strerror or exc}") from None
        return out

    def _prepared(self, key: str) -> PreparedTensor:
        # The core's readback (PreparedTensor.to_numpy) applied to the bytes in the .bin.
        entry = self._entry(key)
        assert entry.dml_type is not None and entry.conversion is not None and entry.sizes is not None
        assert entry.total_tensor_size_in_bytes is not None
        return PreparedTensor(
            onnx_type=entry.onnx_type,
            dml_type=entry.dml_type,
            conversion=entry.conversion,
            sizes=entry.sizes,
            strides=entry.strides,
            total_tensor_size_in_bytes=entry.total_tensor_size_in_bytes,
            flags=0,
            guaranteed_base_offset_alignment=self.alignment,
            data=self.read(key),
            source_dtype=entry.onnx_type.numpy(),
            source_shape=entry.shape,
            element_strides=None,  # whole-model entries are always packed
        )

    def dml_array(self, key: str) -> np.ndarray:
        """The entry as DirectML sees it: its bytes decoded as ``dml_type`` with the desc's sizes and strides."""
        prepared = self._prepared(key)
        return decode(prepared.data, prepared.dml_type, prepared.sizes, prepared.strides)

    def array(self, key: str) -> np.ndarray:
        """The entry's original ONNX values read back from the .bin: the dtype ``onnx.numpy_helper.to_array``
        gives and the ONNX shape. (A "lossy" DOUBLE entry gives its FLOAT32-rounded values.)"""
        return self._prepared(key).to_numpy()

    def verify(
        self,
        model: Any,
        *,
        base_dir: str | os.PathLike[str] | None = None,
        external_data_root: str | os.PathLike[str] | None = None,
        max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
    ) -> None:
        """Check that the plan is exactly ``model``'s constants: the same keys, types and shapes, the bytes a
        fresh conversion gives, and values that read back bit for bit (NaN payloads of widened floats excepted).

        Raises ManifestError listing the mismatches.
        """
        problems = find_mismatches(
            self, model, base_dir=base_dir, external_data_root=external_data_root, max_tensor_bytes=max_tensor_bytes
        )
        if problems:
            shown = "; ".join(problems[:10]) + ("; ..." if len(problems) > 10 else "")
            raise ManifestError(f"the plan does not match the model ({len(problems)} mismatches): {shown}")


# --- loading models ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedModel:
    """A model as convert_model reads it: the protobuf (external data not loaded) and where it came from."""

    proto: Any
    name: str | None
    size: int
    path: str | None
    base_dir: str | None


def read_model(model: Any, base_dir: str | os.PathLike[str] | None = None) -> LoadedModel:
    """Read a model (a path, serialized bytes or an ``onnx.ModelProto``) without loading external data.

    Unreadable files and data that is not an ONNX model raise InvalidArgumentError (never DecodeError/OSError).
    """
    import onnx

    path = None
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
    elif getattr(getattr(model, "DESCRIPTOR", None), "full_name", None) == "onnx.ModelProto":
        proto, name, size = model, None, model.ByteSize()
    else:
        raise InvalidArgumentError(
            f"model must be a path, the bytes of a .onnx file or an onnx.ModelProto, not {type(model).__name__}"
        )
    if not proto.HasField("graph"):
        what = repr(path) if path else "the model"
        raise InvalidArgumentError(f"{what} has no graph: it is not an ONNX model (or an empty one)")
    directory = None if base_dir is None else os.fspath(base_dir)
    return LoadedModel(proto, name, size, path, None if directory is None else str(directory))


def _reader(loaded: LoadedModel, external_data_root: str | os.PathLike[str] | None) -> ExternalDataReader | None:
    if loaded.base_dir is None:
        if external_data_root is not None:
            raise InvalidArgumentError(
                "external_data_root= needs base_dir= when the model is given as bytes or a ModelProto"
            )
        return None  # external data is then refused by tensor_to_array, naming the tensor
    return ExternalDataReader(loaded.base_dir, external_data_root)


# --- planning ------------------------------------------------------------------------------------------------


def _layout_of(
    onnx_type: OnnxDataType, shape: tuple[int, ...], dml: DmlDataType, conversion: str, min_dims: int, max_dims: int
) -> tuple[tuple[int, ...], tuple[int, ...] | None, int]:
    """(sizes, desc strides, TotalTensorSizeInBytes) of a packed tensor; LayoutError when DirectML cannot hold it."""
    layout = plan_layout(shape, None, min_dims, max_dims)
    if conversion == "emulate":
        # ONNX Runtime's int64 emulation: 8-byte elements read through doubled strides.
        strides = check_strides([2 * s for s in packed_strides(layout.sizes)], layout.sizes)
        return layout.sizes, strides, 8 * layout.span
    return layout.sizes, None, calc_buffer_tensor_size(dml, layout.sizes)


def _align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


_PLAN_FIELDS = (
    "key", "origin", "onnx_type", "shape", "conversion", "offset", "dml_type", "sizes", "strides",
    "total_tensor_size_in_bytes", "guaranteed_base_offset_alignment", "skipped",
)
_new = object.__new__


def _entry(*values: Any) -> PlanEntry:
    """PlanEntry(*values) without the frozen dataclass's per-field object.__setattr__ (3x faster, same object):
    a model can hold 100,000 constants."""
    entry = _new(PlanEntry)
    entry.__dict__.update(zip(_PLAN_FIELDS, values, strict=True))
    return entry


def _plan_entries(
    constants: list[ModelConstant], target: Target, alignment: int, min_dims: int
) -> tuple[list[PlanEntry], list[type[DmlBridgeError]], int]:
    """Entries with offsets, the error class each skip would raise under strict=True, and the .bin size."""
    entries: list[PlanEntry] = []
    skip_errors: list[type[DmlBridgeError]] = []
    end = 0
    # The mapping depends only on the ONNX type, the layout only on the type and shape: models repeat both.
    rows: dict[OnnxDataType, Any] = {}
    layouts: dict[tuple[OnnxDataType, tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...] | None, int] | str] = {}
    max_dims = target.max_dimension_count
    for constant in constants:
        onnx_type, shape = constant.onnx_type, constant.shape
        row = rows.get(onnx_type)
        if row is None:
            row = rows[onnx_type] = resolve(onnx_type, target)
        reason: str | None = None
        error: type[DmlBridgeError] = UnsupportedTypeError
        layout = None
        if row.dml_type is None:
            reason = f"{onnx_type.name}: {row.reason}"
        elif 0 in shape:
            reason = f"empty tensor (shape {list(shape)}): DirectML has no empty tensors"
            error = LayoutError
        else:
            found = layouts.get((onnx_type, shape))
            if found is None:
                try:
                    found = _layout_of(onnx_type, shape, row.dml_type, row.conversion, min_dims, max_dims)
                except LayoutError as exc:
                    found = str(exc)
                layouts[onnx_type, shape] = found
            if isinstance(found, str):
                reason, error = found, LayoutError
            else:
                layout = found
        if layout is None:
            entries.append(_entry(constant.key, constant.origin, onnx_type, shape, None, None, None, None, None, None,
                                  None, reason))
            skip_errors.append(error)
            continue
        sizes, strides, total = layout
        offset = -(-end // alignment) * alignment
        entries.append(_entry(constant.key, constant.origin, onnx_type, shape, row.conversion, offset, row.dml_type,
                              sizes, strides, total, alignment, None))
        skip_errors.append(DmlBridgeError)
        end = offset + total
    return entries, skip_errors, end


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
    entries, skip_errors, total = _plan_entries(find_constants(loaded.proto), target, alignment, min_dims)
    if strict:
        _raise_if_skipped(entries, skip_errors)
    return UploadPlan(
        types.MappingProxyType({e.key: e for e in entries}), target, alignment, min_dims, total, loaded.name,
        loaded.size, _dmlbridge_version(),
    )


def _raise_if_skipped(entries: list[PlanEntry], skip_errors: list[type[DmlBridgeError]]) -> None:
    skipped = [(e, err) for e, err in zip(entries, skip_errors, strict=True) if e.skipped is not None]
    if skipped:
        entry, error = skipped[0]
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        raise error(
            f"constant {entry.key!r} ({entry.origin}) cannot be converted: {entry.skipped}{more}; "
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
    constants = find_constants(loaded.proto)
    entries, skip_errors, total = _plan_entries(constants, target, alignment, min_dims)
    if strict:
        _raise_if_skipped(entries, skip_errors)
    reader = _reader(loaded, external_data_root)
    _need_reader(constants, reader)
    _refuse_overwriting_inputs((bin_path, json_path), loaded, constants, reader)
    plan = UploadPlan(
        types.MappingProxyType({e.key: e for e in entries}), target, alignment, min_dims, total, loaded.name,
        loaded.size, _dmlbridge_version(),
    )
    _refuse_too_large(constants, max_tensor_bytes)
    work = [(c, e) for c, e in zip(constants, entries, strict=True) if e.skipped is None]
    digest, fingerprint = _write_outputs(
        plan, work, bin_path, json_path, reader, max_tensor_bytes, checksum, progress, fsync
    )
    return replace(plan, bin_sha256=digest, bin_fingerprint=fingerprint, bin_path=bin_path, manifest_path=json_path)


def _refuse_too_large(constants: list[ModelConstant], max_tensor_bytes: int) -> None:
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


def _need_reader(constants: list[ModelConstant], reader: ExternalDataReader | None) -> None:
    """Refuse external data up front (before any output exists) when there is no directory to resolve it in."""
    if reader is None:
        for tensor in iter_external_tensors(constants):
            raise ExternalDataError(
                f"tensor {tensor.name!r} uses external data, but the model was given as bytes or a ModelProto, "
                "which has no directory; pass base_dir= (the directory of the model file)"
            )


def _refuse_overwriting_inputs(
    outputs: tuple[str, ...], loaded: LoadedModel, constants: list[ModelConstant], reader: ExternalDataReader | None
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
    work: list[tuple[ModelConstant, PlanEntry]],
    bin_path: str,
    json_path: str,
    reader: ExternalDataReader | None,
    max_tensor_bytes: int,
    checksum: bool,
    progress: bool | None,
    fsync: bool = True,
) -> tuple[str | None, str]:
    """Write both outputs atomically; returns the .bin's SHA-256 (when ``checksum``) and its fingerprint."""
    directory = os.path.dirname(os.path.abspath(bin_path))
    _remove_stale_temps(directory, (bin_path, json_path))
    temps: list[str] = []
    bar = _Progress(progress, plan.total_size, os.path.basename(bin_path))
    try:
        tmp_bin = _temp_file(directory, bin_path, temps)
        try:
            with _open_temp(tmp_bin) as file:
                writer = _HashingWriter(file, checksum)
                for constant, entry in work:
                    assert entry.offset is not None
                    before = writer.position
                    writer.zeros(entry.offset - before)
                    _write_entry(writer, constant, entry, plan, reader, max_tensor_bytes)
                    if bar.active:
                        bar.update(writer.position - before)
                writer.flush()
                if fsync:
                    os.fsync(file.fileno())
            if writer.position != plan.total_size:
                raise DmlBridgeError(
                    f"internal error: wrote {writer.position} bytes but planned {plan.total_size}"
                )
            digest = writer.hexdigest()
            # Sampled from the finished file as it is on disk, just before the renames.
            fingerprint = _bin_fingerprint(tmp_bin, plan.total_size, plan.converted)
            text = _manifest_text(replace(plan, bin_sha256=digest, bin_fingerprint=fingerprint))
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
_KERNEL_COPY_MIN = 1 << 20  # external tensors from this size are copied by the kernel (when not hashing)


def _write_entry(
    writer: _HashingWriter,
    constant: ModelConstant,
    entry: PlanEntry,
    plan: UploadPlan,
    reader: ExternalDataReader | None,
    max_tensor_bytes: int,
) -> None:
    try:
        if _write_stored(writer, constant, entry, reader, max_tensor_bytes):
            return
        values = constant.to_array(reader=reader, max_tensor_bytes=max_tensor_bytes)
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
    constant: ModelConstant,
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
    info = constant._info
    if info is None or entry.conversion != "native" or info.nbytes > max_tensor_bytes:
        return False  # max_tensor_bytes: the usual path raises the usual error
    assert entry.dml_type is not None and entry.total_tensor_size_in_bytes is not None
    tensor, storage, packed = constant.proto, info.storage, info.packed_nbytes
    padding = entry.total_tensor_size_in_bytes - packed
    odd_nibble = entry.dml_type.bitwidth == 4 and info.size % 2 == 1
    if storage == "typed":
        if entry.dml_type.bitwidth == 4 or not _LITTLE_ENDIAN:
            return False  # packed bytes in int32_data, or a big-endian host: the usual path
        typed = _TYPED_AS_IS.get(info.onnx_type)
        if typed is not None:  # entries that are the values themselves (nothing to check): no numpy array
            data: Any = array.array(typed[1], getattr(tensor, typed[0]))
            if len(data) * data.itemsize != packed:
                return False
        else:
            data = _decode_known(tensor, info, reader=reader, max_tensor_bytes=max_tensor_bytes)
            if not data.flags.c_contiguous or data.nbytes != packed:
                return False
    elif storage == "raw":
        data = tensor.raw_data
        if len(data) != packed:
            return False  # changed since it was found: the usual path checks it again
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


def _bin_fingerprint(bin_file: str, size: int, entries: list[PlanEntry]) -> str:
    """SHA-256 over the .bin's size and sampled ranges (see the module docstring): cheap at any file size, and
    different for a .bin that is not the one the manifest was written with (raises OSError on a short read).

    The hashed stream: the tag and the size, then for each merged range (overlapping or touching sampled ranges
    merged, in file order) its start and stop (8-byte little-endian each) and its bytes.
    """
    offsets = [e.offset for e in entries]
    totals = [e.total_tensor_size_in_bytes for e in entries]
    if None in offsets or None in totals:
        kept = [(o, t) for o, t in zip(offsets, totals, strict=True) if o is not None and t is not None]
        offsets, totals = [o for o, _ in kept], [t for _, t in kept]
    spread = [i * size // _FINGERPRINT_SPREAD for i in range(_FINGERPRINT_SPREAD)]
    starts = np.array([0, max(0, size - _FINGERPRINT_EDGE), *offsets, *spread], dtype=np.int64)
    stops = np.concatenate([
        np.array([min(_FINGERPRINT_EDGE, size), size], dtype=np.int64),
        np.array(offsets, dtype=np.int64) + np.minimum(np.array(totals, dtype=np.int64), _FINGERPRINT_ENTRY),
        np.minimum(np.array(spread, dtype=np.int64) + _FINGERPRINT_ENTRY, size),
    ])
    # Merge (vectorised: a model can have 100,000 entries). Sorted by start, a range joins the current group when
    # it starts at or before the furthest stop so far; each group runs to that furthest stop.
    first, last = starts, stops
    keep = first < last
    first, last = first[keep], last[keep]
    order = np.argsort(first, kind="stable")
    first, reach = first[order], np.maximum.accumulate(last[order])
    opens = np.flatnonzero(np.r_[True, first[1:] > reach[:-1]]) if len(first) else np.zeros(0, np.intp)
    group_start = first[opens]
    group_stop = reach[np.r_[opens[1:] - 1, len(first) - 1]] if len(first) else reach
    headers = np.stack([group_start, group_stop], axis=1).astype("<u8").tobytes()
    merged = list(zip(group_start.tolist(), group_stop.tolist(), strict=True))

    # Ranges closer than _FINGERPRINT_WINDOW are read together and their bytes hashed in batches (the digest of
    # a stream does not depend on how it is cut), so 100,000 small entries cost a few large reads.
    sha = hashlib.sha256(_FINGERPRINT_TAG + size.to_bytes(8, "little"))
    # O_NONBLOCK: a FIFO swapped in for the .bin must not block the open; fstat then insists on a regular file.
    fd = os.open(bin_file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with open(fd, "rb", buffering=0) as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{bin_file!r} is not a regular file")
        # Windows: runs of ranges with gaps of at most _FINGERPRINT_WINDOW, spanning at most _CHUNK bytes.
        gaps = np.flatnonzero(group_start[1:] - group_stop[:-1] > _FINGERPRINT_WINDOW) + 1
        bounds = [0, *gaps.tolist(), len(merged)]
        for low, high in itertools.pairwise(bounds):
            begin = low
            while begin < high:
                base = merged[begin][0]
                end = begin + int(np.searchsorted(group_stop[begin:high], base + _CHUNK, side="right"))
                if end > begin:
                    window = memoryview(_read_at(file, base, merged[end - 1][1] - base))
                    available = base + len(window)  # less than asked only where the file ends
                    if merged[end - 1][1] > available:
                        start, stop = next(r for r in merged[begin:end] if r[1] > available)
                        raise OSError(f"{bin_file!r} ended at byte {max(start, available)}, before byte {stop}")
                    sha.update(b"".join([
                        piece
                        for k in range(begin, end)
                        for piece in (headers[16 * k : 16 * k + 16], window[merged[k][0] - base : merged[k][1] - base])
                    ]))
                else:  # one range longer than _CHUNK (many small entries packed together): in _CHUNK pieces
                    start, stop = merged[begin]
                    sha.update(headers[16 * begin : 16 * begin + 16])
                    position = start
                    while position < stop:
                        chunk = _read_at(file, position, min(stop - position, _CHUNK))
                        if not chunk:
                            raise OSError(f"{bin_file!r} ended at byte {position}, before byte {stop}")
                        sha.update(chunk)
                        position += len(chunk)
                    end = begin + 1
                begin = end
    return sha.hexdigest()


def _read_at(file: Any, offset: int, size: int) -> bytes:
    """Up to ``size`` bytes of ``file`` from ``offset`` (fewer only where the file ends)."""
    parts = []
    file.seek(offset)
    while size > 0:
        chunk = file.read(size)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


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


def manifest_text(manifest: dict[str, Any]) -> str:
    """A manifest as JSON text: one line per top-level field and one per entry (readable, diffable, compact)."""
    def dump(value: Any) -> str:
        return json.dumps(value, ensure_ascii=True, allow_nan=False)

    head = [f"  {dump(k)}: {dump(v)}" for k, v in manifest.items() if k != "entries"]
    return _assemble(head, [f"    {dump(e)}" for e in manifest.get("entries", [])])


def _assemble(head: list[str], entries: list[str]) -> str:
    """The manifest text from its top-level field lines and entry lines, joined once (a large model's manifest
    is megabytes: each extra copy costs)."""
    if not entries:
        return "{\n" + ",\n".join([*head, '  "entries": []']) + "\n}\n"
    return "".join(["{\n", *[line + ",\n" for line in head], '  "entries": [\n', ",\n".join(entries), "\n  ]\n}\n"])


def _manifest_text(plan: UploadPlan) -> str:
    """``manifest_text(plan.manifest())``, the same text, without a dict and a json.dumps call per entry."""
    head = [f"  {_json(k)}: {_json(v)}" for k, v in plan._manifest_head().items()]
    cache: dict[tuple[Any, ...], tuple[str, str]] = {}
    return _assemble(head, [_entry_json(entry, cache) for entry in plan.entries.values()])


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, allow_nan=False)


_quote = json.encoder.encode_basestring_ascii  # what json.dumps(ensure_ascii=True) uses for every string


def _json_ints(values: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, values)) + "]"


def _entry_json(entry: PlanEntry, cache: dict[tuple[Any, ...], tuple[str, str]] | None = None) -> str:
    """``"    " + json.dumps(entry.to_json())``, the same characters, formatted directly (a model can hold 100,000
    constants): strings through json's own quoting, integers with str() as json writes them. ``cache`` keeps the
    text of the fields entries of one type and shape share."""
    skipped, offset, total = entry.skipped, entry.offset, entry.total_tensor_size_in_bytes
    start = f'    {{"key": {_quote(entry.key)}, "origin": {_quote(entry.origin)}, '
    if skipped is not None and entry.conversion is None and offset is None and entry.dml_type is None:
        return (
            f'{start}"onnx_type": {_quote(entry.onnx_type.name)}, "shape": {_json_ints(entry.shape)}, '
            f'"conversion": null, "offset": null, "dml_type": null, "desc": null, "skipped": {_quote(skipped)}}}'
        )
    if (
        skipped is not None
        or entry.conversion is None
        or entry.dml_type is None
        or entry.sizes is None
        or type(offset) is not int
        or type(total) is not int
        or type(entry.guaranteed_base_offset_alignment) is not int
    ):
        return "    " + _json(entry.to_json())  # not a shape _plan_entries makes
    key = (entry.onnx_type, entry.shape, entry.conversion, entry.dml_type, entry.sizes, entry.strides, total,
           entry.guaranteed_base_offset_alignment)
    parts = None if cache is None else cache.get(key)
    if parts is None:
        strides = "null" if entry.strides is None else _json_ints(entry.strides)
        parts = (
            f'"onnx_type": {_quote(entry.onnx_type.name)}, "shape": {_json_ints(entry.shape)}, '
            f'"conversion": {_quote(entry.conversion)}, "offset": ',
            f', "dml_type": {_quote(entry.dml_type.name)}, "desc": {{"DataType": {int(entry.dml_type)}, "Flags": 0, '
            f'"DimensionCount": {len(entry.sizes)}, "Sizes": {_json_ints(entry.sizes)}, "Strides": {strides}, '
            f'"TotalTensorSizeInBytes": {total}, '
            f'"GuaranteedBaseOffsetAlignment": {entry.guaranteed_base_offset_alignment}}}, "skipped": null}}',
        )
        if cache is not None:
            cache[key] = parts
    return f"{start}{parts[0]}{offset}{parts[1]}"


# --- reading manifests ---------------------------------------------------------------------------------------


def load_plan(
    manifest_path: str | os.PathLike[str],
    *,
    verify: bool = False,
    bin_path: str | os.PathLike[str] | None = None,
) -> UploadPlan:
    """Read and validate an upload plan (``PREFIX.json``) and its buffer image (``PREFIX.bin``, or ``bin_path``).

    Every field is checked: format and version, types and ranges, known ONNX/DML types, each converted entry's
    DML type and conversion against the target's mapping, its desc against the layout rules and
    ``calc_buffer_tensor_size``, offsets (aligned, inside the .bin, no overlaps), total_size against the entries
    and the .bin's real size and ``bin_fingerprint`` (sampled bytes: a .bin from another conversion is refused
    even when its size is the same). ``verify=True`` also checks the .bin's SHA-256 against ``bin_sha256`` (which
    ``convert_model(..., checksum=True)`` records). Any problem raises ManifestError.
    """
    return _load_plan(manifest_path, verify=verify, bin_path=bin_path, check_fingerprint=True)


def _load_plan(
    manifest_path: str | os.PathLike[str],
    *,
    verify: bool,
    bin_path: str | os.PathLike[str] | None,
    check_fingerprint: bool,
) -> UploadPlan:
    """load_plan; ``check_fingerprint=False`` is for ``dmlbridge verify``, which reports a .bin that does not
    match its fingerprint as a mismatch (through find_mismatches) along with the constants that differ."""
    if not isinstance(manifest_path, (str, os.PathLike)):
        raise InvalidArgumentError(f"manifest_path must be a path, not {type(manifest_path).__name__}")
    path = os.fspath(manifest_path)
    path = path if isinstance(path, str) else os.fsdecode(path)
    if bin_path is None:
        if not path.endswith(".json"):
            raise ManifestError(f"{path!r} does not end in .json; pass bin_path= to name its .bin")
        bin_file = path[: -len(".json")] + ".bin"
    else:
        bin_file = os.fspath(bin_path) if isinstance(bin_path, (str, os.PathLike)) else ""
        bin_file = bin_file if isinstance(bin_file, str) else os.fsdecode(bin_file)
        if not bin_file:
            raise InvalidArgumentError(f"bin_path must be a path, got {bin_path!r}")
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path!r}: {exc.strerror or exc}") from None
    document = _parse_json(raw, path)
    plan = _plan_from_manifest(document, f"manifest {path!r}")
    _check_bin(plan, bin_file, verify, check_fingerprint)
    return replace(plan, bin_path=bin_file, manifest_path=path)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ManifestError(f"duplicate field {key!r}")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ManifestError(f"{name} is not valid JSON (not a number)")


def _parse_json(raw: bytes, path: str) -> Any:
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
    except ManifestError as exc:
        raise ManifestError(f"manifest {path!r}: {exc}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, int digit limits
        raise ManifestError(f"manifest {path!r} is not valid JSON: {exc}") from None


class _Fields:
    """Typed access to one JSON object of the manifest, with messages that say where the problem is."""

    def __init__(self, value: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
        if not isinstance(value, dict):
            raise ManifestError(f"{where} must be a JSON object, got {_kind(value)}")
        missing = [k for k in required if k not in value]
        if missing:
            raise ManifestError(f"{where} lacks the field(s) {', '.join(map(repr, missing))}")
        unknown = [k for k in value if k not in required and k not in optional]
        if unknown:
            raise ManifestError(f"{where} has unknown field(s) {', '.join(map(repr, unknown[:5]))}")
        self.value = value
        self.where = where

    def at(self, key: str) -> str:
        return f"{self.where}.{key}"

    def get(self, key: str) -> Any:
        return self.value.get(key)

    def integer(self, key: str, low: int = 0, high: int = _INT64_MAX, nullable: bool = False) -> Any:
        return _int(self.value.get(key), self.at(key), low, high, nullable)

    def string(self, key: str, nullable: bool = False, nonempty: bool = False) -> Any:
        value = self.value.get(key)
        if value is None and nullable:
            return None
        if not isinstance(value, str) or (nonempty and not value):
            what = "a non-empty string" if nonempty else "a string"
            raise ManifestError(f"{self.at(key)} must be {what}, got {_kind(value)}")
        return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value[:60]!r}"
    return {"list": "an array", "dict": "an object"}.get(type(value).__name__, type(value).__name__)


def _int(value: Any, where: str, low: int = 0, high: int = _INT64_MAX, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(f"{where} must be a whole number, got {_kind(value)}")
    if not low <= value <= high:
        raise ManifestError(f"{where} is {value}, outside {low}..{high}")
    return value


def _int_list(value: Any, where: str, low: int = 0, high: int = _INT64_MAX, max_len: int = 64) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ManifestError(f"{where} must be an array of whole numbers, got {_kind(value)}")
    if len(value) > max_len:
        raise ManifestError(f"{where} has {len(value)} items, more than {max_len}")
    return tuple(_int(v, f"{where}[{i}]", low, high) for i, v in enumerate(value))


def _plan_from_manifest(document: Any, where: str) -> UploadPlan:
    top = _Fields(
        document, where,
        ("format", "format_version", "dmlbridge_version", "source", "target", "alignment", "min_dims",
         "total_size", "bin_fingerprint", "entries"),
        ("bin_sha256",),
    )
    if top.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"{where} is not a dmlbridge upload plan (format {top.get('format')!r})")
    version = top.integer("format_version", 0, _INT64_MAX)
    if version != MANIFEST_FORMAT_VERSION:
        raise ManifestError(
            f"{where} has format_version {version}; this dmlbridge reads version {MANIFEST_FORMAT_VERSION}"
        )
    dmlbridge_version = top.string("dmlbridge_version")
    source = _Fields(top.get("source"), top.at("source"), ("name", "size"))
    source_name = source.string("name", nullable=True)
    source_size = source.integer("size", nullable=True)
    target = _target_from_json(top.get("target"), top.at("target"))
    alignment = top.integer("alignment", 16, _MAX_ALIGNMENT)
    if alignment & (alignment - 1):
        raise ManifestError(f"{top.at('alignment')} is {alignment}, not a power of two")
    min_dims = top.integer("min_dims", 0, target.max_dimension_count)
    total_size = top.integer("total_size")
    digest = top.string("bin_sha256", nullable=True)
    if digest is not None and not _SHA256.match(digest):
        raise ManifestError(f"{top.at('bin_sha256')} must be 64 lowercase hex digits, got {digest[:80]!r}")
    fingerprint = top.string("bin_fingerprint")
    if not _SHA256.match(fingerprint):
        raise ManifestError(f"{top.at('bin_fingerprint')} must be 64 lowercase hex digits, got {fingerprint[:80]!r}")
    raw_entries = top.get("entries")
    if not isinstance(raw_entries, list):
        raise ManifestError(f"{top.at('entries')} must be an array, got {_kind(raw_entries)}")
    entries: dict[str, PlanEntry] = {}
    for index, raw in enumerate(raw_entries):
        entry = _entry_from_json(raw, f"{where}: entries[{index}]", target, alignment, min_dims, total_size)
        if entry.key in entries:
            raise ManifestError(f"{where}: entries[{index}] repeats the key {entry.key!r}")
        entries[entry.key] = entry
    placed = sorted((e for e in entries.values() if e.skipped is None), key=lambda e: e.offset or 0)
    end = 0
    previous: PlanEntry | None = None
    for entry in placed:
        assert entry.offset is not None and entry.end is not None
        if previous is not None and entry.offset < end:
            raise ManifestError(
                f"{where}: entries {previous.key!r} (bytes {previous.offset}..{previous.end}) and {entry.key!r} "
                f"(bytes {entry.offset}..{entry.end}) overlap"
            )
        end, previous = entry.end, entry
    if end != total_size:
        raise ManifestError(
            f"{where}: total_size is {total_size} but the entries end at byte {end}; the two must agree"
        )
    return UploadPlan(
        types.MappingProxyType(entries), target, alignment, min_dims, total_size, source_name, source_size,
        dmlbridge_version, digest, bin_fingerprint=fingerprint,
    )


def _target_from_json(value: Any, where: str) -> Target:
    fields = _Fields(value, where, ("feature_level", "supported", "int64", "allow_lossy"))
    supported = fields.get("supported")
    if not isinstance(supported, list) or not all(isinstance(s, str) for s in supported):
        raise ManifestError(f"{fields.at('supported')} must be an array of DML type names, got {_kind(supported)}")
    if not isinstance(fields.get("allow_lossy"), bool):
        raise ManifestError(f"{fields.at('allow_lossy')} must be true or false, got {_kind(fields.get('allow_lossy'))}")
    level = fields.string("feature_level")
    try:
        target = Target(FeatureLevel.parse(level), supported=supported, int64=fields.get("int64"),
                        allow_lossy=fields.get("allow_lossy"))
    except DmlBridgeError as exc:
        raise ManifestError(f"{where}: {exc}") from None
    if target.describe() != value:
        raise ManifestError(
            f"{where} is not in canonical form (expected {json.dumps(target.describe())}); a supported type the "
            "feature level lacks, an unsorted or repeated list, or a non-dotted feature level"
        )
    return target


def _entry_from_json(
    raw: Any, where: str, target: Target, alignment: int, min_dims: int, total_size: int
) -> PlanEntry:
    fields = _Fields(
        raw, where, ("key", "origin", "onnx_type", "shape", "conversion", "offset", "dml_type", "desc", "skipped")
    )
    key = fields.string("key", nonempty=True)
    where = f"{where} ({key[:80]!r})"
    fields.where = where
    origin = fields.string("origin")
    type_name = fields.string("onnx_type")
    onnx_type = OnnxDataType.__members__.get(type_name)
    if onnx_type is None or onnx_type is OnnxDataType.UNDEFINED:
        raise ManifestError(f"{fields.at('onnx_type')} is {type_name[:40]!r}, not an ONNX data type name")
    shape = _int_list(fields.get("shape"), fields.at("shape"))
    skipped = fields.string("skipped", nullable=True)
    if skipped is not None:
        if not skipped:
            raise ManifestError(f"{fields.at('skipped')} is empty; a skipped entry must say why")
        for name in ("conversion", "offset", "dml_type", "desc"):
            if fields.get(name) is not None:
                raise ManifestError(f"{where} is skipped but has a {name}; a skipped entry has no bytes")
        return PlanEntry(key, origin, onnx_type, shape, None, None, None, None, None, None, None, skipped)

    conversion = fields.string("conversion")
    if conversion not in _CONVERSIONS:
        raise ManifestError(f"{fields.at('conversion')} is {conversion[:40]!r}, not one of {', '.join(_CONVERSIONS)}")
    dml_name = fields.string("dml_type")
    dml_type = DmlDataType.__members__.get(dml_name)
    if dml_type is None or dml_type is DmlDataType.UNKNOWN:
        raise ManifestError(f"{fields.at('dml_type')} is {dml_name[:40]!r}, not a DirectML data type name")
    row = resolve(onnx_type, target)
    if row.dml_type is not dml_type or row.conversion != conversion:
        expected = "unsupported" if row.dml_type is None else f"{row.dml_type.name} ({row.conversion})"
        raise ManifestError(
            f"{where} says {onnx_type.name} -> {dml_type.name} ({conversion}), but the manifest's target maps "
            f"{onnx_type.name} to {expected}"
        )
    try:
        sizes, strides, total = _layout_of(onnx_type, shape, dml_type, conversion, min_dims, target.max_dimension_count)
    except LayoutError as exc:
        raise ManifestError(f"{fields.at('shape')} {list(shape)} cannot be a DirectML tensor: {exc}") from None
    offset = fields.integer("offset")
    if offset % alignment:
        raise ManifestError(f"{fields.at('offset')} {offset} is not a multiple of the alignment {alignment}")
    desc = _Fields(
        fields.get("desc"), fields.at("desc"),
        ("DataType", "Flags", "DimensionCount", "Sizes", "Strides", "TotalTensorSizeInBytes",
         "GuaranteedBaseOffsetAlignment"),
    )
    expected_desc = {
        "DataType": int(dml_type),
        "Flags": 0,
        "DimensionCount": len(sizes),
        "Sizes": list(sizes),
        "Strides": None if strides is None else list(strides),
        "TotalTensorSizeInBytes": total,
        "GuaranteedBaseOffsetAlignment": alignment,
    }
    for name, want in expected_desc.items():
        have = desc.get(name)
        if isinstance(have, bool) or have != want or type(have) is not type(want):
            raise ManifestError(
                f"{desc.at(name)} is {json.dumps(have)[:80]}, but {onnx_type.name} {list(shape)} as {dml_type.name} "
                f"({conversion}, min_dims {min_dims}) needs {json.dumps(want)}"
            )
    if offset + total > total_size:
        raise ManifestError(
            f"{where}: bytes {offset}..{offset + total} run past total_size {total_size}"
        )
    return PlanEntry(key, origin, onnx_type, shape, conversion, offset, dml_type, sizes, strides, total,
                     alignment, None)


def _fingerprint_problem(plan: UploadPlan, bin_file: str) -> str | None:
    """Why the .bin does not match the manifest's bin_fingerprint (None when it does)."""
    if plan.bin_fingerprint is None:
        return None
    try:
        fingerprint = _bin_fingerprint(bin_file, plan.total_size, plan.converted)
    except OSError as exc:
        raise ManifestError(f"cannot read the buffer image {bin_file!r}: {exc.strerror or exc}") from None
    if fingerprint == plan.bin_fingerprint:
        return None
    return (
        f"the buffer image {bin_file!r} does not match the manifest's bin_fingerprint (its sampled bytes "
        "differ): the .bin was replaced or changed after the manifest was written, e.g. by a conversion "
        "killed between renaming the .bin and the .json; convert the model again"
    )


def _check_bin(plan: UploadPlan, bin_file: str, verify: bool, check_fingerprint: bool = True) -> None:
    try:
        st = os.stat(bin_file)
    except OSError as exc:
        raise ManifestError(f"cannot read the buffer image {bin_file!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ManifestError(f"the buffer image {bin_file!r} is not a regular file")
    if st.st_size != plan.total_size:
        raise ManifestError(
            f"the buffer image {bin_file!r} holds {st.st_size} bytes but the manifest's total_size is "
            f"{plan.total_size}; the two files do not belong together (or one was cut short)"
        )
    problem = _fingerprint_problem(plan, bin_file) if check_fingerprint else None
    if problem is not None:
        raise ManifestError(problem)
    if not verify:
        return
    if plan.bin_sha256 is None:
        raise ManifestError(
            "verify=True, but the manifest records no bin_sha256; convert with checksum=True (--checksum)"
        )
    sha = hashlib.sha256()
    try:
        with open(bin_file, "rb") as file:
            for chunk in iter(lambda: file.read(_CHUNK), b""):
                sha.update(chunk)
    except OSError as exc:
        raise ManifestError(f"cannot read the buffer image {bin_file!r}: {exc.strerror or exc}") from None
    if sha.hexdigest() != plan.bin_sha256:
        raise ManifestError(
            f"the buffer image {bin_file!r} has SHA-256 {sha.hexdigest()}, but the manifest records "
            f"{plan.bin_sha256}; the .bin is corrupt or belongs to another manifest"
        )


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
    replanned, _, _ = _plan_entries([constant], plan.target, plan.alignment, plan.min_dims)
    if (replanned[0].skipped is None) != (entry.skipped is None):
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
