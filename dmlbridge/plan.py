"""The upload plan: what a conversion writes (or would write), as an object to read bytes and descs from.

An :class:`UploadPlan` maps each constant's key to a :class:`~dmlbridge.planning.PlanEntry`. It comes from
:func:`plan_model` (nothing written), ``convert_model`` (the files it wrote) or :func:`load_plan` (a manifest and
its .bin, validated: the manifest by :mod:`dmlbridge.manifest`, the .bin by its size, its fingerprint and, when
asked, its SHA-256). A written plan reads its entries' bytes from the .bin one entry at a time, on request.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from typing import Any

import numpy as np

from dmlbridge.constants import ModelConstant, collector_paused
from dmlbridge.decode import decode
from dmlbridge.encode import PreparedTensor
from dmlbridge.errors import InvalidArgumentError, ManifestError
from dmlbridge.fingerprint import fingerprint_problem
from dmlbridge.manifest import Manifest, manifest_document, parse_manifest
from dmlbridge.model_file import model_constants, read_model
from dmlbridge.options import DEFAULT_MAX_TENSOR_BYTES, DEFAULT_TARGET, PlanOptions
from dmlbridge.planning import Pair, PlanEntry, plan_constants
from dmlbridge.target import Target
from dmlbridge.verify import find_mismatches
from dmlbridge.version import __version__

__all__ = ["UploadPlan", "load_plan", "plan_model", "raise_if_skipped", "read_plan"]

_CHUNK = 4 << 20  # the SHA-256 of a .bin is read in pieces of this size


@dataclass(frozen=True, eq=False)
class UploadPlan(Manifest):
    """An upload buffer's layout: where each constant of a model sits in the .bin and how DirectML sees it.

    ``entries`` maps each key to its :class:`PlanEntry`, in model order; the fields a manifest holds are
    :class:`~dmlbridge.manifest.Manifest`'s. ``bin_path`` and ``manifest_path`` are the files of a written plan,
    None for a plan from :func:`plan_model`, which has no bytes.

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.arange(3, dtype=np.float32), "w")
        >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([], "g", [], [], [w])))
        >>> plan.total_size, plan.entries["w"].dml_type.name
        (12, 'FLOAT32')
    """

    bin_path: str | None = None
    manifest_path: str | None = None

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
        return manifest_document(self)

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



def plan_model(
    model: Any,
    *,
    target: Target = DEFAULT_TARGET,
    alignment: int = 256,
    min_dims: int = 1,
    strict: bool = False,
    base_dir: str | os.PathLike[str] | None = None,
) -> UploadPlan:
    """The plan :func:`convert_model` would write, computed from the model's protobuf alone (no value is decoded
    and no external file opened, so value errors such as an INT64 too large to narrow are not found here).

    The result has no .bin (``bin_path`` is None): its entries, offsets and total size are what conversion gives.

    Example:
        >>> import dmlbridge, numpy as np
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
        >>> plan = dmlbridge.plan_model(helper.make_model(helper.make_graph([], "g", [], [], [w])), min_dims=4)
        >>> plan.entries["w"].sizes
        (1, 1, 2, 3)
    """
    options = PlanOptions.check(target, alignment, min_dims)
    loaded = read_model(model, base_dir)
    with collector_paused():
        constants, _ = model_constants(loaded)
        planned = plan_constants(constants, options)
    if strict:
        raise_if_skipped(constants, planned.pairs)
    return UploadPlan(planned.entries, target, alignment, min_dims, planned.total, loaded.name, loaded.size,
                      __version__)


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
) -> UploadPlan:
    """Read and validate an upload plan (``PREFIX.json``) and its buffer image (``PREFIX.bin``, or ``bin_path``).

    Every field is checked: format and version, types and ranges, known ONNX/DML types, each converted entry's
    DML type and conversion against the target's mapping, its desc against the layout rules and
    ``calc_buffer_tensor_size``, offsets (aligned, inside the .bin, no overlaps), total_size against the entries
    and the .bin's real size and ``bin_fingerprint`` (sampled bytes: a .bin from another conversion is refused
    even when its size is the same). ``verify=True`` also checks the .bin's SHA-256 against ``bin_sha256`` (which
    ``convert_model(..., checksum=True)`` records). Any problem raises ManifestError.

    Example:
        >>> import dmlbridge, numpy as np, os, shutil, tempfile
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.array([1.5, -2.0], dtype=np.float32), "w")
        >>> folder = tempfile.mkdtemp()
        >>> _ = dmlbridge.convert_model(helper.make_model(helper.make_graph([], "g", [], [], [w])),
        ...                             os.path.join(folder, "m"), progress=False, checksum=True)
        >>> dmlbridge.load_plan(os.path.join(folder, "m.json"), verify=True).array("w")
        array([ 1.5, -2. ], dtype=float32)
        >>> shutil.rmtree(folder)
    """
    return read_plan(manifest_path, verify=verify, bin_path=bin_path, check_fingerprint=True)


def read_plan(
    manifest_path: str | os.PathLike[str],
    *,
    verify: bool,
    bin_path: str | os.PathLike[str] | None,
    check_fingerprint: bool,
) -> UploadPlan:
    """:func:`load_plan`; ``check_fingerprint=False`` is for ``dmlbridge verify``, which reports a .bin that does not
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
    plan = UploadPlan(**vars(parse_manifest(raw, path)), bin_path=bin_file, manifest_path=path)
    _check_image(plan, bin_file, verify, check_fingerprint)
    return plan


def _check_image(plan: UploadPlan, bin_file: str, verify: bool, check_fingerprint: bool = True) -> None:
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
    converted = plan.converted  # (converted entries have an offset and a total)
    problem = None
    if check_fingerprint:
        problem = fingerprint_problem(bin_file, plan.bin_fingerprint, plan.total_size,
                                      [e.offset or 0 for e in converted],
                                      [e.total_tensor_size_in_bytes or 0 for e in converted])
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
