"""The ``dmlbridge`` command's arguments: every command's options, help and examples, and how a usage error reads
(one line on stderr naming the command and its --help, exit 2).

    >>> args = build_parser().parse_args(["convert", "m.onnx", "-o", "w", "--max-buffer-bytes", "1GiB"])
    >>> args.command, args.output, args.max_buffer_bytes
    ('convert', 'w', 1073741824)
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, NoReturn

from dmlbridge.cli.early import VERSION_LINE
from dmlbridge.cli.report import MIN_WIDTH
from dmlbridge.errors import DmlBridgeError
from dmlbridge.placement.cpu_read import UPLOADS
from dmlbridge.placement.options import (
    DEFAULT_MAX_BUFFER_BYTES,
    DEFAULT_MAX_CONSTANTS,
    DEFAULT_MAX_MANIFEST_BYTES,
    DEFAULT_MAX_NODES,
    DEFAULT_MAX_TENSOR_BYTES,
    parse_byte_count,
)
from dmlbridge.placement.selection import CONSTANT_KINDS
from dmlbridge.system.workers import MAX_WORKERS, check_workers
from dmlbridge.tensor.descs import DML_TENSOR_FLAG_OWNED_BY_DML
from dmlbridge.types.data_types import DmlDataType

__all__ = ["FLAG_VALUES", "OUTPUT_RULE", "build_parser"]


def _add_target_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--feature-level", default="6.4",
                        help="DirectML feature level: 1.0 to 6.4, as 6.2, 6_2 or 0x6200 (default 6.4)")
    parser.add_argument(
        "--unsupported", default="", metavar="TYPES",
        help="DML types the device lacks, comma-separated, from: "
        + ", ".join(t.name for t in DmlDataType if t is not DmlDataType.UNKNOWN)
    )
    parser.add_argument(
        "--int64", choices=("emulate", "narrow", "saturate"), default="emulate",
        help="INT64/UINT64 without 64-bit support: emulate (8-byte elements), narrow (4-byte values; each must fit), "
        "saturate (4-byte values clamped to 32 bits; needs --allow-lossy)"
    )
    parser.add_argument("--allow-lossy", action="store_true",
                        help="round DOUBLE to FLOAT32 without FLOAT64 (and allow --int64 saturate)")


def _add_max_constants(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-constants", type=int, default=DEFAULT_MAX_CONSTANTS, metavar="N",
                        help="refuse a model of more than N constants, counted before it is read (default 524288; "
                        "each takes memory: docs/guide.md, Streaming)")
    parser.add_argument("--max-nodes", type=int, default=DEFAULT_MAX_NODES, metavar="N",
                        help="refuse a model of more than N nodes, counted before it is read (default 524288; "
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
    parser.add_argument("--upload", choices=UPLOADS, default="bound",
                        help="what the upload buffers hold: bound (default) leaves the constants ONNX Runtime's "
                        "DirectML provider reads on the CPU (a Reshape's shape, a Slice's ends) to buffer files of "
                        "their own, marked not uploaded; all uploads every constant")
    sizes = parser.add_argument_group("free sizes (the manifest records them)")
    sizes.add_argument("--input-shape", action="append", type=_input_shape, metavar="NAME=D1,D2,...",
                       help="a graph input's whole shape, for the sizes the model leaves free (repeatable; e.g. "
                       "x=1,3,224,224): they decide the descs of constants an element-wise node reads")
    sizes.add_argument("--dim-param", action="append", type=_dim_param, metavar="NAME=N",
                       help="the size of a dim_param wherever the model's graph inputs, outputs and value_info name "
                       "it (repeatable; e.g. batch=1)")
    choose = parser.add_argument_group("choosing constants (the manifest records the choice)")
    choose.add_argument("--include", action="append", metavar="GLOB",
                        help="only constants whose key matches GLOB (repeatable; shell-style, e.g. 'layers.*')")
    choose.add_argument("--exclude", action="append", metavar="GLOB",
                        help="leave out constants whose key matches GLOB (repeatable)")
    choose.add_argument("--kinds", metavar="KINDS",
                        help="only constants of these origin kinds, comma-separated, from: "
                        + ", ".join(CONSTANT_KINDS))
    choose.add_argument("--min-bytes", type=_byte_count, default=0, metavar="BYTES",
                        help="only constants whose values take at least BYTES bytes (e.g. 4096 or 1KiB)")
    choose.add_argument("--drop-quantized-sources", action="store_true",
                        help="leave out quantized weights' packed bytes when derived entries carry their values "
                        "(e.g. 4-bit weights made 8-bit below feature level 6.3)")


def _input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, equals, sizes = text.partition("=")
    try:
        shape = tuple(int(size) for size in sizes.split(","))
    except ValueError:
        shape = ()
    if not name or not equals or not shape:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=D1,D2,... (a graph input and its sizes, e.g. "
                                         "x=1,3,224,224)")
    return name, shape


def _dim_param(text: str) -> tuple[str, int]:
    name, equals, size = text.partition("=")
    if not name or not equals or not size.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=N (a dim_param and its size, e.g. batch=1)")
    return name, int(size)


# --flags: the DML_TENSOR_FLAGS value of each choice
FLAG_VALUES = {"none": 0, "owned-by-dml": DML_TENSOR_FLAG_OWNED_BY_DML}


def _add_limit_options(parser: argparse.ArgumentParser, when: str = "") -> None:
    """The limits and flags convert takes (``inspect --check`` takes them too, to refuse what convert would)."""
    parser.add_argument("--max-tensor-bytes", type=_byte_count, default=DEFAULT_MAX_TENSOR_BYTES, metavar="BYTES",
                        help=when + "refuse constants larger than BYTES (e.g. 2GiB; default 16GiB)")
    parser.add_argument("--max-output-bytes", type=_byte_count, default=None, metavar="BYTES",
                        help=when + "refuse an upload image larger than BYTES (default: 8 x the model's bytes + "
                        "64MiB)")
    parser.add_argument("--max-manifest-bytes", type=_byte_count, default=DEFAULT_MAX_MANIFEST_BYTES,
                        metavar="BYTES", help=when + "refuse a manifest larger than BYTES (default 256MiB)")
    parser.add_argument("--flags", choices=tuple(FLAG_VALUES), default="none",
                        help="DML_TENSOR_FLAGS of every converted tensor (owned-by-dml: weights DirectML copies at "
                        "operator initialization)")


# What --wide turns off in inspect and demo.
_CUT_RULE = ("notes wrap and origins are cut at their end first, then keys and shapes in their middle, each cut "
             "marked with … (model.layers.0…q_proj.weight, 1x3x…x224); when a key would get fewer than 24 columns, "
             "each constant takes two lines or more, its key and the rest; sentences wrap")


# The rule of convert's -o, word for word docs/cli.md's (tests/cli/test_commands.py holds them equal).
OUTPUT_RULE = (
    "PREFIX names the outputs PREFIX.json, PREFIX.lock and PREFIX.<id>.<n>.bin, in a folder that exists; -o w.json "
    "and -o w.bin mean the prefix w. A folder gets <model>.dml in it: an existing folder (-o . or -o out), or a path "
    "ending in / (-o out/), which must exist. Refused: an empty -o; a folder that does not exist; a PREFIX ending in "
    ".onnx; a device, FIFO or socket at PREFIX; anything but a regular file at PREFIX.json (a symlink there is "
    "replaced) or at PREFIX.lock; a folder on a kernel filesystem such as /dev, /proc or /sys; on every system, a "
    "name that is not a plain file name everywhere (a : or \\, a leading dot, over 232 bytes) or a Windows device "
    "name (CON, PRN, AUX, NUL, COM1, LPT1, CONIN$, ..., with any extension). Default: the model's path minus .onnx, "
    "plus .dml."
)


def _add_wide(parser: argparse.ArgumentParser, wraps: str) -> None:
    parser.add_argument("--wide", action="store_true",
                        help=f"print everything in full, whatever the width (without it, lines fit COLUMNS, else the "
                        f"terminal's width, else 120 columns, and at least {MIN_WIDTH}: {wraps})")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), like every other user error, an unknown flag is
    named as such, by the command it was given to, even when a required argument is missing too, and a flag is
    taken only as it is spelled (argparse's default takes --check for --checksum; the subcommands' parsers are of
    this class, so they refuse abbreviations too: argparse does not pass allow_abbrev down)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
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
        self.exit(2, f"{self.prog}: error: {message}{self._did_you_mean(message)} (see {self.prog} --help)\n")

    def _did_you_mean(self, message: str) -> str:
        """"; did you mean 'convert'?" for a mistyped command, choice or flag, when one is close enough."""
        choice = _INVALID_CHOICE.search(message)
        if choice is not None:
            words = [choice.group(1)]
            known = [str(name) for action in self._actions if action.choices for name in action.choices]
        elif message.startswith("unrecognized arguments: "):
            words = [word.partition("=")[0] for word in message.split()[2:] if word.startswith("-")]
            known = list(self._option_string_actions)
        else:
            return ""
        for word in words:
            close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
            if close:
                return f"; did you mean {close[0]!r}?"
        return ""

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


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)'")  # (argparse's words, 3.10 to 3.13)


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
    parser.add_argument("--version", action="version", version=VERSION_LINE)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands (dmlbridge COMMAND --help "
                                     "tells more)")  # (none: main prints this help)
    table = commands.add_parser("table", help="print the ONNX -> DirectML type mapping for a target",
                                **_help("Print how each ONNX type becomes a DirectML type on a target.",
                                        "dmlbridge table --feature-level 6.2 --unsupported FLOAT16"))
    _add_target_options(table)
    table.add_argument("--markdown", action="store_true", help="print a markdown table (never cut)")
    _add_wide(table, "reasons wrap; on a narrow terminal each type is one wrapped line")

    inspect = commands.add_parser("inspect", help="list every constant of a model and how it would convert",
                                  **_help("List every constant of a model and how it would convert, writing "
                                          "nothing (values are not read; external data files are opened and "
                                          "checked, not read).",
                                          "dmlbridge inspect model.onnx --feature-level 6.2 --json"))
    inspect.add_argument("model", help="the .onnx file")
    inspect.add_argument("--json", action="store_true",
                         help="print the plan as JSON (the manifest + totals; never cut)")
    _add_wide(inspect, _CUT_RULE)
    inspect.add_argument("--check", action="store_true",
                         help="read every value (external data too) and report exactly what convert would")
    inspect.add_argument("--strict", action="store_true", help="fail on constants that cannot be converted")
    inspect.add_argument("--external-data-root", metavar="DIR", help="allow external data files under DIR")
    _add_plan_options(inspect)
    _add_limit_options(inspect, "with --check: ")
    _add_workers(inspect, "convert constants with --check")

    convert = commands.add_parser("convert", help="write a model's constants as an upload buffer + manifest",
                                  **_help("Write every constant of a model as a DirectML upload buffer file "
                                          "(PREFIX.<id>.00000.bin) and its manifest (PREFIX.json). Converting "
                                          "again into PREFIX replaces the previous conversion at once and removes "
                                          "its buffer files before it ends (a file it cannot remove is a warning; "
                                          "'dmlbridge clean PREFIX' removes it, and whatever a killed run left).",
                                          "dmlbridge convert model.onnx -o weights --min-dims 4 --checksum"))
    convert.add_argument("model", help="the .onnx file")
    convert.add_argument("-o", "--output", metavar="PREFIX", help=OUTPUT_RULE)
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
    at = bindings.add_argument_group("free sizes at run time (the bytes never change)")
    at.add_argument("--input-shape", action="append", type=_input_shape, metavar="NAME=D1,D2,...",
                    help="a graph input's whole shape: each tensor whose desc the model's free dimensions (its "
                    "dim_params) decide is listed at those sizes (repeatable; e.g. x=8,3,224,224)")
    at.add_argument("--dim-param", action="append", type=_dim_param, metavar="NAME=N",
                    help="the size of a dim_param of the model's graph inputs, as --input-shape (repeatable; e.g. "
                    "batch=8)")

    cleaning = commands.add_parser(
        "clean", help="remove the files killed or failed conversions into a prefix left behind",
        **_help("Remove what conversions into PREFIX left behind: buffer files PREFIX.json does not list (a killed "
                "conversion's, or a replaced one's that could not be removed), temporary manifests "
                "(.PREFIX.json.<id>.dmlbridge-tmp), retired buffer files of earlier versions "
                "(.PREFIX.<id>.<n>.bin.dmlbridge-old) and a stale PREFIX.lock (a killed conversion's, which no "
                "one holds). Never the current conversion's files, another prefix's, a file a live writer holds, "
                "or a PREFIX.lock that is not a lock of dmlbridge; refused while a conversion into PREFIX runs, "
                "the lock left to it. A conversion removes "
                "the files of the one it replaces itself, before it ends: this is for what a killed one left.",
                "dmlbridge clean weights",
                "0 done, 1 some files could not be removed (each is listed), 2 a usage or input error"))
    cleaning.add_argument("prefix", metavar="PREFIX", help="the prefix given to convert -o (PREFIX.json names it too)")
    cleaning.add_argument("--quiet", action="store_true", help="print only what could not be removed")
    cleaning.add_argument("--max-manifest-bytes", type=_byte_count, default=DEFAULT_MAX_MANIFEST_BYTES,
                          metavar="BYTES", help="refuse a manifest larger than BYTES (default 256MiB)")

    demo = commands.add_parser("demo", help="build a sample model, convert it, verify it, print the summary",
                               **_help("Build a sample model, convert it, verify it and print what went where.",
                                       "dmlbridge demo --keep demo"))
    demo.add_argument("--keep", metavar="DIR", help="build and convert in DIR (created) and keep the files")
    _add_wide(demo, _CUT_RULE)
    parser.commands = {name: sub for name, sub in commands.choices.items() if isinstance(sub, _Parser)}
    return parser


