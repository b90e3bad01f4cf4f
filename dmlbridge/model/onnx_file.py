"""Reading a model for whole-model conversion: the protobuf, where it came from, and its constants.

A model is a path, the bytes of a .onnx file or an ``onnx.ModelProto``. External data is never loaded here; it
is read one tensor at a time when converted, resolved against the model's directory (a path's folder, or the
caller's ``base_dir``). A binary model of at most BYTE_SCAN_MAX_BYTES keeps its bytes, so that the byte scan can
read its constants straight from them (:func:`model_constants`).

    >>> from onnx import helper, numpy_helper
    >>> import numpy as np
    >>> graph = helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.ones(2, np.float32), "w")])
    >>> constants, _ = model_constants(read_model(helper.make_model(graph)))
    >>> [c.key for c in constants]
    ['w']
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass, field
from typing import Any

import onnx
from onnx.serialization import registry

from dmlbridge.errors import ExternalDataError, InvalidArgumentError
from dmlbridge.model.byte_scan import BYTE_SCAN_MAX_BYTES, BytesScan, scan_bytes
from dmlbridge.model.census import count_constants
from dmlbridge.model.constants import ModelConstant, find_constants, iter_external_tensors
from dmlbridge.model.model_limits import (
    DEFAULT_MAX_CONSTANTS,
    DEFAULT_MAX_NODES,
    ConstantCount,
    check_count,
    check_text_model,
)
from dmlbridge.onnx.external_data import ExternalDataReader
from dmlbridge.system.files import NotRegularFileError, open_regular, read_at

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
PROTOBUF_MAX_BYTES = (1 << 31) - 1
"""The most bytes protobuf parses or serializes as one message: a model file (or bytes) over it is refused by its
size before a byte of it is read or copied; weights over 2 GB belong in external data."""
_DIR_FD = os.open in os.supports_dir_fd and hasattr(os, "O_DIRECTORY")

__all__ = ["PROTOBUF_MAX_BYTES", "LoadedModel", "checked_path_only", "external_data_reader", "model_constants",
           "need_reader", "read_model"]


def checked_path_only() -> bool:
    """True when the environment sets DMLBRIDGE_CHECKED_PATH_ONLY (to anything but "" or "0"): every fast path is
    off (no byte scan, every tensor decoded and converted by ``prepare``), for the tests that hold the fast paths
    to the checked path's outputs. A private switch for tests and measurements, not an option for users."""
    return os.environ.get("DMLBRIDGE_CHECKED_PATH_ONLY", "") not in ("", "0")


@dataclass(frozen=True)
class LoadedModel:
    """A model as conversion reads it: the protobuf (external data not loaded) and where it came from.
    ``base_fd``: the model's directory, opened before the model was (POSIX), which external data is read in;
    :meth:`close` closes it."""

    proto: Any
    name: str | None
    size: int
    path: str | None
    base_dir: str | None
    serialized: bytes | None = field(default=None, repr=False, compare=False)
    """The model's bytes, kept when the model is at most BYTE_SCAN_MAX_BYTES (for the byte scan); else None."""
    base_fd: int | None = field(default=None, repr=False, compare=False)
    sha256: str | None = field(default=None, repr=False, compare=False)
    """The SHA-256 of the model's bytes (of its serialization, for a ModelProto)."""
    count: ConstantCount | None = field(default=None, repr=False, compare=False)
    """Its constants counted from its bytes before it was parsed (:mod:`dmlbridge.model.census`)."""

    def close(self) -> None:
        if self.base_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.base_fd)

    def __enter__(self) -> LoadedModel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_model(
    model: Any, base_dir: str | os.PathLike[str] | None = None, *, max_constants: int | None = DEFAULT_MAX_CONSTANTS,
    max_manifest_bytes: int | None = None, max_nodes: int | None = DEFAULT_MAX_NODES,
) -> LoadedModel:
    """Read a model (a path, serialized bytes or an ``onnx.ModelProto``) without loading external data.

    Unreadable files and data that is not an ONNX model raise InvalidArgumentError (never DecodeError/OSError).
    Before the bytes are parsed, their nodes and constants are counted (:mod:`dmlbridge.model.census`): a model of
    more than ``max_nodes`` nodes or ``max_constants`` constants (None: any number), or whose manifest would take
    more than ``max_manifest_bytes`` (None: no manifest is written), is refused with InvalidArgumentError. So is
    a model over protobuf's limit (PROTOBUF_MAX_BYTES), by its size, before it is read or copied.
    """
    path = None
    serialized: bytes | None = None
    base_fd = None
    count: ConstantCount | None = None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not isinstance(path, str):
            path = os.fsdecode(path)
        directory = os.path.dirname(os.path.abspath(path))
        data, size, base_fd = _read_pinned(path, directory, pin=base_dir is None)
        digest = hashlib.sha256(data).hexdigest()
        text_format = registry.get_format_from_file_extension(os.path.splitext(path)[1])
        try:
            if text_format in (None, "protobuf"):
                count = _counted(data, max_constants, max_manifest_bytes, max_nodes)
            else:
                check_text_model(data, text_format, f"model {path!r}", max_constants, max_nodes)
        except BaseException:
            if base_fd is not None:
                os.close(base_fd)
            raise
        try:
            proto = onnx.load_model_from_string(data, format=text_format or "protobuf")
        except Exception as exc:  # noqa: BLE001 - protobuf and onnx raise many types for garbage input
            if base_fd is not None:
                os.close(base_fd)
            raise InvalidArgumentError(f"{path!r} is not a valid ONNX model ({type(exc).__name__}: {exc})") from None
        if text_format not in (None, "protobuf"):  # (a text form: counted from protobuf's serialization)
            try:
                count = _counted(proto.SerializeToString(), max_constants, max_manifest_bytes,
                                 max_nodes)
            except BaseException:
                if base_fd is not None:
                    os.close(base_fd)
                raise
        if text_format in (None, "protobuf") and size <= BYTE_SCAN_MAX_BYTES:
            serialized = data  # kept for the byte scan
        name: str | None = os.path.basename(path)
        if base_dir is None:
            base_dir = directory
    elif isinstance(model, (bytes, bytearray, memoryview)):
        _refuse_over_protobufs_limit(model.nbytes if isinstance(model, memoryview) else len(model),
                                     "the model given as bytes")
        data = bytes(model)
        digest = hashlib.sha256(data).hexdigest()
        count = _counted(data, max_constants, max_manifest_bytes, max_nodes)
        try:
            proto = onnx.load_model_from_string(data)
        except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError, RuntimeError, ...
            raise InvalidArgumentError(f"the bytes are not a valid ONNX model ({type(exc).__name__}: {exc})") from None
        name, size = None, len(data)
        serialized = data if size <= BYTE_SCAN_MAX_BYTES else None
    elif getattr(getattr(model, "DESCRIPTOR", None), "full_name", None) == "onnx.ModelProto":
        # (Serializing it costs a tenth of what the byte scan saves on a model of many small constants.)
        _refuse_over_protobufs_limit(model.ByteSize(), "the model given as a ModelProto")
        whole = model.SerializeToString()
        count = _counted(whole, max_constants, max_manifest_bytes, max_nodes)
        proto, name, size = model, None, len(whole)
        digest = hashlib.sha256(whole).hexdigest()
        serialized = whole if size <= BYTE_SCAN_MAX_BYTES else None
    else:
        raise InvalidArgumentError(
            f"model must be a path, the bytes of a .onnx file or an onnx.ModelProto, not {type(model).__name__}"
        )
    if not proto.HasField("graph"):
        if base_fd is not None:
            os.close(base_fd)
        what = repr(path) if path else "the model"
        raise InvalidArgumentError(f"{what} has no graph: it is not an ONNX model (or an empty one)")
    folder = None if base_dir is None else os.fspath(base_dir)
    return LoadedModel(proto, name, size, path, None if folder is None else str(folder), serialized, base_fd,
                       digest, count)


def _refuse_over_protobufs_limit(size: int, what: str) -> None:
    """InvalidArgumentError for a model of more bytes than protobuf reads in one message (``what``: the model as
    it was given), raised before it is read or copied."""
    if size > PROTOBUF_MAX_BYTES:
        raise InvalidArgumentError(
            f"{what} is {size} bytes ({size / 2**30:.3g} GiB), more than protobuf reads as one message "
            f"(2 GiB less a byte, {PROTOBUF_MAX_BYTES}): weights over 2 GB belong in external data (save the model "
            "with onnx.save_model(..., save_as_external_data=True) and give its path)"
        )


def _counted(data: bytes, max_constants: int | None, max_manifest_bytes: int | None,
             max_nodes: int | None) -> ConstantCount | None:
    """The constants of the serialized model ``data``, counted and held to the limits (None: bytes the count does
    not read, which protobuf then refuses: the count reads whatever protobuf parses)."""
    count = count_constants(data, graph_fields=len(data) <= BYTE_SCAN_MAX_BYTES, max_nodes=max_nodes)
    if count is not None:
        check_count(count, max_constants, max_manifest_bytes, max_nodes)
    return count


def _read_pinned(path: str, directory: str, pin: bool) -> tuple[bytes, int, int | None]:
    """The model file's bytes, its size and (``pin``, POSIX) its directory, opened first: the model is read from
    that directory, and so is its external data later, whatever the directory's path leads to by then."""
    base_fd = None
    try:
        if pin and _DIR_FD:
            base_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC)
            fd, size = open_regular(os.path.basename(path), dir_fd=base_fd)
        else:
            fd, size = open_regular(path)
    except (OSError, ValueError) as exc:
        if base_fd is not None:
            os.close(base_fd)
        if isinstance(exc, NotRegularFileError):
            raise InvalidArgumentError(f"model {path!r} is not a regular file") from None
        raise InvalidArgumentError(f"cannot read model {path!r}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        _refuse_over_protobufs_limit(size, f"model {path!r}")
        data = read_at(fd, 0, size)
        while more := read_at(fd, len(data), 1 << 20):  # (a file that grew since fstat: read to its end)
            data += more
            _refuse_over_protobufs_limit(len(data), f"model {path!r} (it grew while it was read)")
        return data, len(data), base_fd
    except OSError as exc:
        if base_fd is not None:
            os.close(base_fd)
        raise InvalidArgumentError(f"cannot read model {path!r}: {exc.strerror or exc}") from None
    except BaseException:
        if base_fd is not None:
            os.close(base_fd)
        raise
    finally:
        os.close(fd)


def model_constants(loaded: LoadedModel) -> tuple[list[ModelConstant], BytesScan | None]:
    """The model's constants, and the byte scan that found them when it could read the model's bytes (never
    under DMLBRIDGE_CHECKED_PATH_ONLY)."""
    scan = None
    if loaded.serialized is not None and not checked_path_only():
        scan = scan_bytes(loaded.proto, loaded.serialized, None if loaded.count is None else loaded.count.graph_fields)
    return (find_constants(loaded.proto), None) if scan is None else (scan.found, scan)


def external_data_reader(
    loaded: LoadedModel, external_data_root: str | os.PathLike[str] | None
) -> ExternalDataReader | None:
    """The reader of the model's external data (positioned reads, no mapping), or None when the model has no
    directory (bytes or a ModelProto without ``base_dir``): tensor_to_array then refuses external data, naming the
    tensor."""
    if loaded.base_dir is None:
        if external_data_root is not None:
            raise InvalidArgumentError(
                "external_data_root= needs base_dir= when the model is given as bytes or a ModelProto"
            )
        return None
    # Positioned reads, never a mapping: a file that shrinks under a mapping kills the process with SIGBUS, and
    # conversion and verification must answer it with ExternalDataError instead.
    return ExternalDataReader(loaded.base_dir, external_data_root, use_mmap=False, base_fd=loaded.base_fd)


def need_reader(constants: list[ModelConstant], reader: ExternalDataReader | None) -> None:
    """Refuse external data up front (before any output exists) when there is no directory to resolve it in."""
    if reader is None:
        for tensor in iter_external_tensors(constants):
            raise ExternalDataError(
                f"tensor {tensor.name!r} uses external data, but the model was given as bytes or a ModelProto, "
                "which has no directory; pass base_dir= (the directory of the model file)"
            )
