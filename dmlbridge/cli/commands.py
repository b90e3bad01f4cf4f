"""The ``dmlbridge`` command line: ``table``, ``inspect``, ``convert``, ``verify``, ``bindings``, ``clean``, ``demo``.

User errors (bad options, missing or unreadable files, models that are not ONNX, manifests that do not validate)
print one line on stderr and exit 2; never a traceback. ``verify`` exits 1 when the plan and the model differ.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import textwrap
import threading
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from dmlbridge.cli.demo import run_demo
from dmlbridge.cli.messages import in_flags, one_line
from dmlbridge.cli.report import MIN_WIDTH, format_plan, format_table, human_size
from dmlbridge.errors import CleanupWarning, DestinationError, DmlBridgeError, InvalidArgumentError
from dmlbridge.placement.entries import ConvertedEntry
from dmlbridge.placement.options import (
    DEFAULT_MAX_BUFFER_BYTES,
    DEFAULT_MAX_CONSTANTS,
    DEFAULT_MAX_MANIFEST_BYTES,
    DEFAULT_MAX_TENSOR_BYTES,
    PlanOptions,
    parse_byte_count,
)
from dmlbridge.placement.selection import CONSTANT_KINDS, Selection
from dmlbridge.plan.bindings import binding_list
from dmlbridge.plan.upload_plan import plan_with_notes, read_plan
from dmlbridge.plan.verify import find_mismatches
from dmlbridge.system.workers import MAX_WORKERS, check_workers
from dmlbridge.tensor.descs import DML_TENSOR_FLAG_OWNED_BY_DML
from dmlbridge.types.data_types import DmlDataType
from dmlbridge.types.mapping import mapping_table
from dmlbridge.types.target import Target
from dmlbridge.version import __version__
from dmlbridge.writing.convert import check_conversion, convert_model
from dmlbridge.writing.folder import clean

__all__ = ["build_parser", "main"]


def _target_from(args: argparse.Namespace) -> Target:
    unsupported = {DmlDataType.parse(name) for name in args.unsupported.split(",") if name.strip()}
    every = {t for t in DmlDataType if t is not DmlDataType.UNKNOWN}
    return Target(
        feature_level=args.feature_level,
        supported=None if not unsupported else every - unsupported,
        int64=args.int64,
        allow_lossy=args.allow_lossy,
    )


def _add_target_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--feature-level", default="6.4",
                        help="DirectML feature level: 1.0 to 6.4, as 6.2, 6_2 or 0x6200 (default 6.4)")
    parser.add_argument(
        "--unsupported", default="", metavar="TYPES",
        help="DML types the device lacks, comma-separated, from: "
        + ",".join(t.name for t in DmlDataType if t is not DmlDataType.UNKNOWN)
    )
    parser.add_argument(
        "--int64", choices=("emulate", "narrow", "saturate"), default="emulate",
        help="INT64/UINT64 without 64-bit support: emulate (8-byte elements), narrow (4-byte values; each must fit), "
        "saturate (4-byte values clamped to 32 bits; needs --allow-lossy)"
    )
    parser.add_argument("--allow-lossy", action="store_true",
                        help="round DOUBLE to FLOAT32 without FLOAT64 (and allow --int64 saturate)")


def _cmd_table(args: argparse.Namespace) -> int:
    print(format_table(mapping_table(_target_from(args)), args.markdown, None if args.markdown else _width(args)))
    return 0


def _add_max_constants(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-constants", type=int, default=DEFAULT_MAX_CONSTANTS, metavar="N",
                        help="refuse a model of more than N constants, counted before it is read (default 524288; "
                        "each takes memory: docs/guide.md, Streaming)")


def _add_plan_options(parser: argparse.ArgumentParser) -> None:
    _add_target_options(parser)
    _add_max_constants(parser)
    parser.add_argument("--alignment", type=_byte_count, default=256,
                        help="offset alignment in bytes, a power of two >= 16 (default 256)")
    parser.add_argument("--min-dims", type=int, default=None, metavar="N",
                        help="pad sizes with leading 1s to N dims (default: 4 below feature level 3.0, else 1)")
    parser.add_argument("--max-buffer-bytes", type=_byte_count, default=DEFAULT_MAX_BUFFER_BYTES, metavar="BYTES",
                        help="split the image into buffer files of at most BYTES, never splitting a tensor (a "
                        "multiple of --alignment, at most 0xFFFF0000; default 2GiB, what Direct3D 12 guarantees on a "
                        "GPU with 8GiB or more: a quarter of the VRAM, at least 128MiB, on smaller ones)")
    choose = parser.add_argument_group("choosing constants (the manifest records the choice)")
    choose.add_argument("--include", action="append", metavar="GLOB",
                        help="only constants whose key matches GLOB (repeatable; shell-style, e.g. 'layers.*')")
    choose.add_argument("--exclude", action="append", metavar="GLOB",
                        help="leave out constants whose key matches GLOB (repeatable)")
    choose.add_argument("--kinds", metavar="KINDS",
                        help="only constants of these origin kinds, comma-separated, from: " + ",".join(CONSTANT_KINDS))
    choose.add_argument("--min-bytes", type=_byte_count, default=0, metavar="BYTES",
                        help="only constants whose values take at least BYTES bytes (e.g. 4096 or 1KiB)")
    choose.add_argument("--drop-quantized-sources", action="store_true",
                        help="leave out quantized weights' packed bytes when derived entries carry their values "
                        "(e.g. 4-bit weights made 8-bit below feature level 6.3)")


def _selection_from(args: argparse.Namespace) -> dict[str, Any]:
    kinds = None if args.kinds is None else [k.strip() for k in args.kinds.split(",") if k.strip()]
    return {"include": args.include, "exclude": args.exclude, "kinds": kinds, "min_bytes": args.min_bytes,
            "drop_quantized_sources": args.drop_quantized_sources}


# --flags: the DML_TENSOR_FLAGS value of each choice
_FLAG_VALUES = {"none": 0, "owned-by-dml": DML_TENSOR_FLAG_OWNED_BY_DML}


def _add_limit_options(parser: argparse.ArgumentParser, when: str = "") -> None:
    """The limits and flags convert takes (``inspect --check`` takes them too, to refuse what convert would)."""
    parser.add_argument("--max-tensor-bytes", type=_byte_count, default=DEFAULT_MAX_TENSOR_BYTES, metavar="BYTES",
                        help=when + "refuse constants larger than BYTES (e.g. 2GiB; default 16GiB)")
    parser.add_argument("--max-output-bytes", type=_byte_count, default=None, metavar="BYTES",
                        help=when + "refuse an upload image larger than BYTES (default: 8 x the model's bytes + "
                        "64MiB)")
    parser.add_argument("--max-manifest-bytes", type=_byte_count, default=DEFAULT_MAX_MANIFEST_BYTES,
                        metavar="BYTES", help=when + "refuse a manifest larger than BYTES (default 256MiB)")
    parser.add_argument("--flags", choices=tuple(_FLAG_VALUES), default="none",
                        help="DML_TENSOR_FLAGS of every converted tensor (owned-by-dml: weights DirectML copies at "
                        "operator initialization)")


def _cmd_inspect(args: argparse.Namespace) -> int:
    options = {"target": _target_from(args), "alignment": args.alignment, "min_dims": args.min_dims,
               "strict": args.strict, "max_buffer_bytes": args.max_buffer_bytes, **_selection_from(args)}
    notes: dict[str, str] = {}
    if args.check:
        plan = check_conversion(
            args.model, **options, external_data_root=args.external_data_root, max_tensor_bytes=args.max_tensor_bytes,
            max_output_bytes=args.max_output_bytes, max_manifest_bytes=args.max_manifest_bytes,
            flags=_FLAG_VALUES[args.flags], workers=args.workers, max_constants=args.max_constants,
        )
    else:
        layout = PlanOptions.check(options["target"], args.alignment, args.min_dims, 0, args.max_buffer_bytes)
        plan, notes = plan_with_notes(args.model, layout, Selection.check(**_selection_from(args)), args.strict,
                                      max_constants=args.max_constants)
    if args.json:
        document = plan.manifest()
        converted = plan.converted
        document["totals"] = {
            "constants": len(plan.entries),
            "converted": len(converted),
            "skipped": len(plan.skipped),
            "tensor_bytes": sum(e.total_tensor_size_in_bytes for e in converted),
            "total_size": plan.total_size,
            "buffer_sizes": list(plan.buffer_sizes),
        }
        print(json.dumps(document, indent=1))
    else:
        if notes:
            print(f"dmlbridge inspect: {len(notes)} constants unchecked (see the note column): values that must fit "
                  "32 bits or live in external data are read only by convert; --check reads them now and reports what "
                  "convert would", file=sys.stderr)
        print(format_plan(plan, _width(args), notes))
    return 0


# What --wide turns off in inspect and demo.
_CUT_RULE = ("notes wrap and origins are cut at their end first, then keys and shapes in their middle, each cut "
             "marked with … (model.layers.0…q_proj.weight, 1x3x…x224); when a key would get fewer than 24 columns, "
             "each constant takes two lines or more, its key and the rest; sentences wrap")


def _default_prefix(model: str) -> str:
    stem = model[: -len(".onnx")] if model.lower().endswith(".onnx") else model
    return stem + ".dml"


# The rule of convert's -o, word for word docs/cli.md's (tests/cli/test_commands.py holds them equal).
_OUTPUT_RULE = (
    "PREFIX names the outputs PREFIX.json, PREFIX.lock and PREFIX.<id>.<n>.bin, in a folder that exists; -o w.json "
    "and -o w.bin mean the prefix w. A folder gets <model>.dml in it: an existing folder (-o . or -o out), or a path "
    "ending in / (-o out/), which must exist. Refused: an empty -o; a folder that does not exist; a PREFIX ending in "
    ".onnx; a device, FIFO or socket at PREFIX; anything but a regular file at PREFIX.json (a symlink there is "
    "replaced) or at PREFIX.lock; a folder on a kernel filesystem such as /dev, /proc or /sys. Default: the model's "
    "path minus .onnx, plus .dml."
)


def _output_prefix(output: str | None, model: str) -> str:
    """The prefix ``-o`` means (_OUTPUT_RULE; convert_model refuses the rest, naming -o/--output)."""
    if output is None:
        return _default_prefix(model)
    if not output:
        raise InvalidArgumentError(
            f"-o/--output is empty: give a prefix (-o weights writes weights.json) or leave -o out for "
            f"{_default_prefix(model)!r}"
        )
    separators = tuple(s for s in (os.sep, os.altsep) if s)
    if output.endswith(separators):  # a folder, which must exist
        folder = output.rstrip("".join(separators)) or output
        if not os.path.isdir(output):
            if os.path.lexists(folder):
                raise DestinationError(f"-o/--output {output!r} ends in a slash, so it names a folder, but "
                                       f"{folder!r} is a file: give a folder that exists, or a prefix")
            raise DestinationError(
                f"-o/--output {output!r} names a folder that does not exist: create it (mkdir {folder}) or drop the "
                f"trailing slash to use {folder!r} as the prefix"
            )
    if os.path.isdir(output):
        return os.path.join(output, os.path.basename(_default_prefix(model)))
    for suffix in (".json", ".bin"):
        if output.lower().endswith(suffix) and os.path.basename(output[: -len(suffix)]):
            return output[: -len(suffix)]
    return output


def _cmd_convert(args: argparse.Namespace) -> int:
    prefix = _output_prefix(args.output, args.model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CleanupWarning)
        plan = convert_model(
            args.model, prefix, target=_target_from(args), alignment=args.alignment, min_dims=args.min_dims,
            progress=False if args.quiet else None, strict=args.strict, external_data_root=args.external_data_root,
            checksum=args.checksum, max_tensor_bytes=args.max_tensor_bytes, fsync=not args.no_fsync,
            max_output_bytes=args.max_output_bytes, max_manifest_bytes=args.max_manifest_bytes,
            flags=_FLAG_VALUES[args.flags], max_buffer_bytes=args.max_buffer_bytes, **_selection_from(args),
            workers=args.workers, max_constants=args.max_constants,
        )
    for warning in caught:  # (a file of the replaced conversion left: one line, as every message here is)
        if issubclass(warning.category, CleanupWarning):
            print(f"dmlbridge convert: warning: {one_line(str(warning.message))}", file=sys.stderr)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    if not args.quiet:
        for entry in plan.skipped:
            print(f"dmlbridge convert: skipped {entry.key!r} ({entry.origin}): {entry.skipped}", file=sys.stderr)
        written = plan.bin_path or f"{len(plan.buffers)} buffer files ({plan.buffers[0].path}, ...)"
        print(
            f"wrote {written} ({human_size(plan.total_size)}, {len(plan.converted)} tensors) and "
            f"{plan.manifest_path} ({len(plan.entries)} entries, {len(plan.skipped)} skipped)"
        )
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    # A .bin that fails its fingerprint is reported by find_mismatches, with the constants that differ (exit 1).
    # Exit 1 for every way the files do not match the model (the SHA-256 too); 2 only for usage and configuration.
    limit = args.max_manifest_bytes
    plan = read_plan(args.manifest, verify=False, bin_path=None, check_fingerprint=False, max_manifest_bytes=limit)
    problems = find_mismatches(
        plan, args.model, external_data_root=args.external_data_root, max_tensor_bytes=args.max_tensor_bytes,
        sha256=all(b.sha256 is not None for b in plan.buffers), progress=False if args.quiet else None,
        workers=args.workers, max_constants=args.max_constants,
    )
    if problems:
        for problem in problems[:20]:
            print(f"dmlbridge verify: mismatch: {problem}", file=sys.stderr)
        more = " (first 20 shown)" if len(problems) > 20 else ""
        print(f"dmlbridge verify: FAILED: {len(problems)} mismatches{more}", file=sys.stderr)
        return 1
    every = "the buffer file's" if len(plan.buffers) == 1 else f"each of the {len(plan.buffers)} buffer files'"
    checksum = f"; {every} SHA-256 matches" if all(b.sha256 for b in plan.buffers) else ""
    changed = _changed(plan.converted)
    print(f"ok: {len(plan.converted)} converted constants match {args.model} bit for bit"
          f"{f' but for {changed};' if changed else ','} {len(plan.skipped)} skipped{checksum}")
    return 0


def _changed(entries: Sequence[ConvertedEntry]) -> str:
    """What of a verified plan is not the model's values bit for bit: the values a lossy target changed (verify
    compares them with the model's values changed alike); "" for none."""
    clamped = [entry.clamped for entry in entries if entry.conversion == "saturate" and entry.clamped]
    rounded = sum(1 for entry in entries if entry.conversion == "lossy")
    changes = []
    if clamped:
        values = sum(clamped)
        changes.append(f"{values} value{'' if values == 1 else 's'} of {len(clamped)} {_entries(len(clamped))} "
                       "clamped to the 32-bit range (--int64 saturate)")
    if rounded:
        changes.append(f"the values of {rounded} {_entries(rounded)} rounded from DOUBLE to FLOAT32 (--allow-lossy)")
    return " and ".join(changes)


def _entries(count: int) -> str:
    return "entry" if count == 1 else "entries"


def _cmd_bindings(args: argparse.Namespace) -> int:
    with read_plan(args.manifest, verify=False, bin_path=None, check_fingerprint=True,
                   max_manifest_bytes=args.max_manifest_bytes) as plan:
        text = binding_list(plan)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    temporary = f"{args.output}.{os.getpid()}.tmp"
    try:
        with open(temporary, "x", encoding="ascii", newline="\n") as file:
            file.write(text)
        os.replace(temporary, args.output)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return 0


def _cmd_clean(args: argparse.Namespace) -> int:
    prefix = args.prefix
    if prefix.lower().endswith(".json") and len(prefix) > len(".json"):
        prefix = prefix[: -len(".json")]  # (PREFIX.json names the prefix PREFIX, as for convert -o)
    report = clean(prefix, max_manifest_bytes=args.max_manifest_bytes)
    if not args.quiet:
        for path in report.removed:
            print(f"removed {path}")
    for path in report.held:
        print(f"dmlbridge clean: kept {path}: a live writer holds it", file=sys.stderr)
    for path, why in report.failed:
        print(f"dmlbridge clean: cannot remove {path}: {why}", file=sys.stderr)
    if not args.quiet and report.removed:
        files = "1 file" if len(report.removed) == 1 else f"{len(report.removed)} files"
        print(f"{files} removed ({human_size(report.freed)} freed)")
    elif not args.quiet and not (report.held or report.failed):
        print(f"nothing to remove: {prefix} holds no file that conversions left behind")
    return 1 if report.failed else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(keep=args.keep, width=_width(args))


def _width(args: argparse.Namespace) -> int | None:
    """The columns text output fits: None with --wide; else COLUMNS, the terminal's width, or 120 (at least 40)."""
    if args.wide:
        return None
    columns = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").strip().isdigit() else 0
    if columns <= 0 and sys.stdout.isatty():
        columns = shutil.get_terminal_size((0, 0)).columns
    return max(columns if columns > 0 else 120, MIN_WIDTH)


def _add_wide(parser: argparse.ArgumentParser, wraps: str) -> None:
    parser.add_argument("--wide", action="store_true",
                        help=f"print everything in full, whatever the width (without it, lines fit COLUMNS, else the "
                        f"terminal's width, else 120 columns, and at least {MIN_WIDTH}: {wraps})")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), like every other user error, and an unknown
    flag is named as such, by the command it was given to, even when a required argument is missing too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._given: list[str] = []
        self._probing = False
        self.commands: dict[str, _Parser] = {}  # (the subcommands' parsers, by name)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._given, namespace)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:  # named by the command they followed: "dmlbridge convert: error: unrecognized arguments: ..."
            self.commands.get(getattr(parsed, "command", None) or "", self).error(
                "unrecognized arguments: " + " ".join(unknown))
        return parsed

    def error(self, message: str) -> NoReturn:
        if self._probing:
            raise _ProbeError
        if message.startswith("the following arguments are required"):
            unknown = self._unknown_arguments()
            if unknown:  # "dmlbridge --bogus": the flag is the mistake, not the command it left out
                message = "unrecognized arguments: " + " ".join(unknown)
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _unknown_arguments(self) -> list[str]:
        """What this parser leaves unrecognized in the arguments it was given, were nothing required."""
        required = [(action, action.required) for action in self._actions]
        self._probing = True
        try:
            for action, _ in required:
                action.required = False
            return self.parse_known_args(self._given)[1]
        except _ProbeError:
            return []
        finally:
            self._probing = False
            for action, was in required:
                action.required = was


class _ProbeError(Exception):
    """A usage error while _Parser looks for unknown arguments (the original error is reported instead)."""


def _byte_count(text: str) -> int:
    try:
        return parse_byte_count(text)
    except DmlBridgeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _worker_count(text: str) -> int:
    try:
        return check_workers(int(text))
    except (ValueError, DmlBridgeError):
        raise argparse.ArgumentTypeError(
            f"not a number of threads: {text!r}; write a whole number from 1 to {MAX_WORKERS} (the default is every "
            "CPU this process may use)"
        ) from None


def _add_workers(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--workers", type=_worker_count, default=None, metavar="N",
                        help=f"threads that {what} (default: every CPU this process may use; 1: one thread; the "
                        "output is the same bytes either way)")


def _help(description: str, example: str, exits: str = "0 done, 2 a usage or input error") -> dict[str, Any]:
    """A subcommand's description and its epilog: an example and the exit codes (130: interrupted)."""
    return {
        "description": textwrap.fill(description, 79),
        "epilog": f"example:\n  {example}\n\nexit status: {exits}; 130 interrupted (Ctrl-C)",
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``dmlbridge`` command."""
    parser = _Parser(
        prog="dmlbridge", description="ONNX tensors and numpy arrays as byte-exact DirectML buffer tensors."
    )
    parser.add_argument("--version", action="version", version=f"dmlbridge {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    table = commands.add_parser("table", help="print the ONNX -> DirectML type mapping for a target",
                                **_help("Print how each ONNX type becomes a DirectML type on a target.",
                                        "dmlbridge table --feature-level 6.2 --unsupported FLOAT16"))
    _add_target_options(table)
    table.add_argument("--markdown", action="store_true", help="print a markdown table (never cut)")
    _add_wide(table, "reasons wrap; on a narrow terminal each type is one wrapped line")
    table.set_defaults(run=_cmd_table)

    inspect = commands.add_parser("inspect", help="list every constant of a model and how it would convert",
                                  **_help("List every constant of a model and how it would convert, writing "
                                          "nothing (values and external data are not read).",
                                          "dmlbridge inspect model.onnx --feature-level 6.2 --json"))
    inspect.add_argument("model", help="the .onnx file")
    inspect.add_argument("--json", action="store_true",
                         help="print the plan as JSON (the manifest + totals; never cut)")
    _add_wide(inspect, _CUT_RULE)
    inspect.add_argument("--check", action="store_true",
                         help="read every value (external data too) and report exactly what convert would")
    inspect.add_argument("--strict", action="store_true", help="fail on constants that cannot be converted")
    inspect.add_argument("--external-data-root", metavar="DIR", help="with --check: allow external data under DIR")
    _add_plan_options(inspect)
    _add_limit_options(inspect, "with --check: ")
    _add_workers(inspect, "convert constants with --check")
    inspect.set_defaults(run=_cmd_inspect)

    convert = commands.add_parser("convert", help="write a model's constants as an upload buffer + manifest",
                                  **_help("Write every constant of a model as a DirectML upload buffer file "
                                          "(PREFIX.<id>.00000.bin) and its manifest (PREFIX.json). Converting "
                                          "again into PREFIX replaces the previous conversion at once and removes "
                                          "its buffer files before it ends (a file it cannot remove is a warning; "
                                          "'dmlbridge clean PREFIX' removes it, and whatever a killed run left).",
                                          "dmlbridge convert model.onnx -o weights --min-dims 4 --checksum"))
    convert.add_argument("model", help="the .onnx file")
    convert.add_argument("-o", "--output", metavar="PREFIX", help=_OUTPUT_RULE)
    _add_plan_options(convert)
    convert.add_argument("--strict", action="store_true", help="fail on constants that cannot be converted")
    convert.add_argument("--quiet", action="store_true", help="no progress bar, no summary")
    convert.add_argument("--checksum", action="store_true",
                         help="record the SHA-256 of each buffer file in the manifest")
    convert.add_argument("--external-data-root", metavar="DIR", help="allow external data files under DIR")
    _add_limit_options(convert)
    convert.add_argument("--no-fsync", action="store_true",
                         help="do not flush the outputs to the disk before renaming them into place (faster; still "
                         "atomic if the process dies, but a power loss may leave an empty or partial output)")
    _add_workers(convert, "convert constants")
    convert.set_defaults(run=_cmd_convert)

    verify = commands.add_parser("verify", help="check that an upload plan matches a model bit for bit",
                                 **_help("Check that a written plan holds exactly a model's constants, bit for bit;\n"
                                         "values a lossy target changed (--int64 saturate, --allow-lossy) are\n"
                                         "compared changed alike and counted in the result.",
                                         "dmlbridge verify weights.json model.onnx",
                                         "0 they match, 1 they do not (each mismatch is listed), 2 a usage or "
                                         "configuration error"))
    verify.add_argument("manifest", help="the PREFIX.json written by convert")
    verify.add_argument("model", help="the .onnx file it was converted from")
    verify.add_argument("--external-data-root", metavar="DIR", help="allow external data files under DIR")
    verify.add_argument("--quiet", action="store_true", help="no progress bar")
    verify.add_argument("--max-tensor-bytes", type=_byte_count, default=DEFAULT_MAX_TENSOR_BYTES, metavar="BYTES",
                        help="refuse constants larger than BYTES (e.g. 2GiB; default 16GiB)")
    verify.add_argument("--max-manifest-bytes", type=_byte_count, default=DEFAULT_MAX_MANIFEST_BYTES,
                        metavar="BYTES", help="refuse a manifest larger than BYTES (default 256MiB)")
    _add_max_constants(verify)
    _add_workers(verify, "compare constants")
    verify.set_defaults(run=_cmd_verify)

    bindings = commands.add_parser(
        "bindings", help="print a conversion's bindings as plain lines for native programs",
        **_help("Print the binding list of a conversion (docs/bindings.md): one line per buffer file, tensor and "
                "quantized part, with its buffer, offset and every DML_BUFFER_TENSOR_DESC field. The buffer files "
                "are checked (size and fingerprint) first.",
                "dmlbridge bindings weights.json -o weights.bindings"))
    bindings.add_argument("manifest", help="the PREFIX.json written by convert")
    bindings.add_argument("-o", "--output", metavar="FILE", help="write the list to FILE (default: standard output)")
    bindings.add_argument("--max-manifest-bytes", type=_byte_count, default=DEFAULT_MAX_MANIFEST_BYTES,
                          metavar="BYTES", help="refuse a manifest larger than BYTES (default 256MiB)")
    bindings.set_defaults(run=_cmd_bindings)

    cleaning = commands.add_parser(
        "clean", help="remove the files killed or failed conversions into a prefix left behind",
        **_help("Remove what conversions into PREFIX left behind: buffer files PREFIX.json does not list (a killed "
                "conversion's, or a replaced one's that could not be removed), temporary manifests "
                "(.PREFIX.json.<id>.dmlbridge-tmp) and retired buffer files of earlier versions "
                "(.PREFIX.<id>.<n>.bin.dmlbridge-old). Never the current conversion's files, another prefix's, or "
                "a file a live writer holds; refused while a conversion into PREFIX runs. A conversion removes "
                "the files of the one it replaces itself, before it ends: this is for what a killed one left.",
                "dmlbridge clean weights",
                "0 done, 1 some files could not be removed (each is listed), 2 a usage or input error"))
    cleaning.add_argument("prefix", metavar="PREFIX", help="the prefix given to convert -o (PREFIX.json names it too)")
    cleaning.add_argument("--quiet", action="store_true", help="print only what could not be removed")
    cleaning.add_argument("--max-manifest-bytes", type=_byte_count, default=DEFAULT_MAX_MANIFEST_BYTES,
                          metavar="BYTES", help="refuse a manifest larger than BYTES (default 256MiB)")
    cleaning.set_defaults(run=_cmd_clean)

    demo = commands.add_parser("demo", help="build a sample model, convert it, verify it, print the summary",
                               **_help("Build a sample model, convert it, verify it and print what went where.",
                                       "dmlbridge demo --keep demo"))
    demo.add_argument("--keep", metavar="DIR", help="build and convert in DIR (created) and keep the files")
    _add_wide(demo, _CUT_RULE)
    demo.set_defaults(run=_cmd_demo)
    parser.commands = {name: sub for name, sub in commands.choices.items() if isinstance(sub, _Parser)}
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 verification failed, 2 user error, 130 Ctrl-C).
    Ctrl-C prints one line from the first instruction on (files being written are removed first)."""
    command = "dmlbridge"
    try:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on, Ctrl-C is KeyboardInterrupt
        _escape_unencodable_output()  # (before --help, which shows the marker)
        parser = build_parser()
        args = parser.parse_args(argv)
        command = f"dmlbridge {args.command}"
        return int(args.run(args))
    except DmlBridgeError as exc:
        print(f"{command}: error: {in_flags(one_line(str(exc)))}", file=sys.stderr)
        return 2
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):  # e.g. `dmlbridge inspect big.onnx | head`
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        print(f"{command}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130


def _escape_unencodable_output() -> None:
    """Constant names come from the model: print the ones the terminal's encoding cannot show as escapes
    (a Windows console, or output redirected to a file in a legacy code page) instead of failing."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            with contextlib.suppress(Exception):  # a replaced stream (tests, IDEs) may refuse: keep it as it is
                reconfigure(errors="backslashreplace")
