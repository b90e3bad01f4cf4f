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
import stat
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from dmlbridge.cli.demo import run_demo
from dmlbridge.cli.messages import in_flags, one_line
from dmlbridge.cli.parser import FLAG_VALUES, build_parser
from dmlbridge.cli.report import MIN_WIDTH, format_plan, format_table, human_size, reads_on_totals
from dmlbridge.errors import (
    CleanupWarning,
    DestinationError,
    DmlBridgeError,
    InvalidArgumentError,
    ManifestError,
    counted,
)
from dmlbridge.model.shapes import GivenShapes
from dmlbridge.placement.entries import ConvertedEntry
from dmlbridge.placement.options import PlanOptions, check_max_constants, check_max_nodes
from dmlbridge.placement.selection import Selection
from dmlbridge.plan.bindings import binding_list
from dmlbridge.plan.upload_plan import plan_with_notes, read_plan
from dmlbridge.plan.verify import find_mismatches
from dmlbridge.system.identity import ids
from dmlbridge.types.data_types import DmlDataType
from dmlbridge.types.mapping import mapping_table
from dmlbridge.types.target import Target
from dmlbridge.writing.cleanup import clean
from dmlbridge.writing.convert import check_conversion, convert_model
from dmlbridge.writing.folder import FILE_HELD

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


def _cmd_table(args: argparse.Namespace) -> int:
    print(format_table(mapping_table(_target_from(args)), args.markdown, None if args.markdown else _width(args)))
    return 0


def _selection_from(args: argparse.Namespace) -> dict[str, Any]:
    kinds = None if args.kinds is None else [k.strip() for k in args.kinds.split(",") if k.strip()]
    return {"include": args.include, "exclude": args.exclude, "kinds": kinds, "min_bytes": args.min_bytes,
            "drop_quantized_sources": args.drop_quantized_sources}


def _shapes_from(args: argparse.Namespace) -> dict[str, Any]:
    """``input_shapes`` and ``dim_params`` from --input-shape and --dim-param (a name given twice: the last)."""
    return {"input_shapes": None if not args.input_shape else dict(args.input_shape),
            "dim_params": None if not args.dim_param else dict(args.dim_param)}


def _cmd_inspect(args: argparse.Namespace) -> int:
    options = {"target": _target_from(args), "alignment": args.alignment, "min_dims": args.min_dims,
               "strict": args.strict, "max_buffer_bytes": args.max_buffer_bytes, **_selection_from(args),
               **_shapes_from(args), "upload": args.upload}
    notes: dict[str, str] = {}
    if args.check:
        plan = check_conversion(
            args.model, **options, external_data_root=args.external_data_root, max_tensor_bytes=args.max_tensor_bytes,
            max_output_bytes=args.max_output_bytes, max_manifest_bytes=args.max_manifest_bytes,
            flags=FLAG_VALUES[args.flags], workers=args.workers, max_constants=args.max_constants,
            max_nodes=args.max_nodes,
        )
    else:
        layout = PlanOptions.check(options["target"], args.alignment, args.min_dims, 0, args.max_buffer_bytes,
                                   **_shapes_from(args), upload=args.upload)
        plan, notes = plan_with_notes(args.model, layout, Selection.check(**_selection_from(args)), args.strict,
                                      open_external_data=True, external_data_root=args.external_data_root,
                                      max_constants=check_max_constants(args.max_constants),
                                      max_nodes=check_max_nodes(args.max_nodes))
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
            "upload_size": plan.upload_size,
            "reads_on": reads_on_totals(plan),
        }
        print(json.dumps(document, indent=1))
    else:
        if notes:
            print(f"dmlbridge inspect: {counted(len(notes), 'constant')} unchecked (see the note column): values "
                  "that must fit 32 bits or live in external data are read only by convert; --check reads them now "
                  "and reports what convert would", file=sys.stderr)
        print(format_plan(plan, _width(args), notes))
    return 0


def _default_prefix(model: str) -> str:
    stem = model[: -len(".onnx")] if model.lower().endswith(".onnx") else model
    return stem + ".dml"


def _output_prefix(output: str | None, model: str) -> str:
    """The prefix ``-o`` means (the parser's OUTPUT_RULE; convert_model refuses the rest, naming -o/--output)."""
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
            flags=FLAG_VALUES[args.flags], max_buffer_bytes=args.max_buffer_bytes, **_selection_from(args),
            workers=args.workers, max_constants=args.max_constants, max_nodes=args.max_nodes, **_shapes_from(args),
            upload=args.upload,
        )
    for warning in caught:  # (a file of the replaced conversion left: one line, as every message here is)
        if issubclass(warning.category, CleanupWarning):
            print(f"dmlbridge convert: warning: {one_line(str(warning.message))}", file=sys.stderr)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    for entry in plan.skipped:  # (--quiet too: only the progress bar and the summary go)
        print(f"dmlbridge convert: skipped {entry.key!r} ({entry.origin}): {entry.skipped}", file=sys.stderr)
    if not args.quiet:
        written = plan.bin_path or f"{len(plan.buffers)} buffer files ({plan.buffers[0].path}, ...)"
        print(
            f"wrote {written} ({human_size(plan.total_size)}, {counted(len(plan.converted), 'tensor')}) and "
            f"{plan.manifest_path} ({counted(len(plan.entries), 'entry', 'entries')}, {len(plan.skipped)} skipped)"
        )
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    # A .bin that fails its fingerprint is reported by find_mismatches, with the constants that differ (exit 1).
    # Exit 1 for every way the files do not match the model (the SHA-256 too); 2 only for usage and configuration.
    limit = args.max_manifest_bytes
    try:
        plan = read_plan(args.manifest, verify=False, bin_path=None, check_fingerprint=False, max_manifest_bytes=limit)
    except ManifestError as exc:
        if args.manifest.lower().endswith(".onnx") or args.model.lower().endswith(".json"):
            raise ManifestError(f"{args.manifest!r} is not a manifest: the arguments look swapped (the manifest "
                                f"comes first, then the model): dmlbridge verify {args.model} {args.manifest}") from exc
        raise
    problems = find_mismatches(
        plan, args.model, external_data_root=args.external_data_root, max_tensor_bytes=args.max_tensor_bytes,
        sha256=all(b.sha256 is not None for b in plan.buffers), progress=False if args.quiet else None,
        workers=args.workers, max_constants=args.max_constants, max_nodes=args.max_nodes,
    )
    if problems:
        for problem in problems[:20]:
            print(f"dmlbridge verify: mismatch: {problem}", file=sys.stderr)
        more = " (first 20 shown)" if len(problems) > 20 else ""
        print(f"dmlbridge verify: FAILED: {counted(len(problems), 'mismatch', 'mismatches')}{more}", file=sys.stderr)
        return 1
    every = "the buffer file's" if len(plan.buffers) == 1 else f"each of the {len(plan.buffers)} buffer files'"
    checksum = f"; {every} SHA-256 matches" if all(b.sha256 for b in plan.buffers) else ""
    changed = _changed(plan.converted)
    matches = "matches" if len(plan.converted) == 1 else "match"
    print(f"ok: {counted(len(plan.converted), 'converted constant')} {matches} {args.model} bit for bit"
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
        changes.append(f"{counted(values, 'value')} of {counted(len(clamped), 'entry', 'entries')} "
                       "clamped to the 32-bit range (--int64 saturate)")
    if rounded:
        changes.append(f"the values of {counted(rounded, 'entry', 'entries')} rounded from DOUBLE to FLOAT32 "
                       "(--allow-lossy)")
    return " and ".join(changes)


def _cmd_bindings(args: argparse.Namespace) -> int:
    folder = None if args.output is None else _file_folder(args.output)  # (refused before the plan is read)
    with read_plan(args.manifest, verify=False, bin_path=None, check_fingerprint=True,
                   max_manifest_bytes=args.max_manifest_bytes,
                   shapes=GivenShapes.check(**_shapes_from(args))) as plan:
        if args.output is not None:
            _refuse_an_input(args.output, args.manifest, [buffer.path for buffer in plan.buffers])
        text = binding_list(plan)
    if args.output is None or folder is None:
        binary = getattr(sys.stdout, "buffer", None)
        if binary is None:  # (a text stream only)
            sys.stdout.write(text)
        else:  # lines end in \n alone, also on Windows, whose text streams would write \r\n
            sys.stdout.flush()
            binary.write(text.encode("ascii"))
            binary.flush()
        return 0
    _replace_file(args.output, folder, text)
    return 0


def _file_folder(output: str) -> str:
    """The folder of the file ``-o`` names, which must exist; DestinationError, saying what to give, for an empty
    -o, a folder, a path under something that is not a folder, and anything but a regular file (a FIFO, a device:
    never replaced)."""
    if not output:
        raise DestinationError("-o/--output is empty: give the name of a file, or leave -o out to print the list")
    separators = tuple(s for s in (os.sep, os.altsep) if s)
    named = output.rstrip("".join(separators)) or output
    example = os.path.join(named, "w.bindings")
    if output.endswith(separators) and not os.path.isdir(named) and os.path.lexists(named):
        raise DestinationError(f"-o/--output {output!r} ends in a slash, but {named!r} is a file, not a folder: give "
                               "the name of a file")
    if output.endswith(separators):
        raise DestinationError(f"-o/--output {output!r} ends in a slash, so it names a folder: give the name of a "
                               f"file (-o {example})")
    if os.path.isdir(output):
        raise DestinationError(f"-o/--output {output!r} is a folder: give the name of a file (-o {example})")
    folder = os.path.dirname(output) or os.curdir
    if not os.path.isdir(folder):
        if os.path.lexists(folder):
            raise DestinationError(f"-o/--output {output!r}: {folder!r} is a file, not a folder")
        raise DestinationError(f"-o/--output {output!r}: the folder {folder!r} does not exist: create it "
                               f"(mkdir -p {folder}) or give a file in a folder that exists")
    with contextlib.suppress(OSError):
        mode = os.lstat(output).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):  # (a symlink is replaced, never followed)
            kind = next((name for test, name in _KINDS if test(mode)), "not a file")
            raise DestinationError(f"-o/--output {output!r} is {kind}, not a regular file: give the name of a file, "
                                   "or leave -o out to print the list on standard output")
    return folder


def _refuse_an_input(output: str, manifest: str, buffers: list[str]) -> None:
    """DestinationError when ``-o`` names the manifest read or a buffer file it lists, as a file (by any path or
    link to it, and on Windows in any letter case or by its short name), not as spelled: writing the list there
    would replace the conversion it is made from."""
    target = ids(output)
    if not target:
        return  # (nothing there yet)
    for what, path in (("the manifest", manifest), *(("the buffer file", buffer) for buffer in buffers)):
        if ids(path) & target:
            example = os.path.join(os.path.dirname(manifest), os.path.splitext(os.path.basename(manifest))[0])
            raise DestinationError(
                f"-o/--output {output!r} is {what} {path!r} the list is made from (the same file, by another name "
                f"or link): the list would replace it; give another file (-o {example}.bindings)"
            )


# What a path is, for messages about what it should have been.
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _replace_file(output: str, folder: str, text: str) -> None:
    """Write ``text`` to ``output`` in one step: into a new file beside it, renamed over it (a reader never sees
    half a list); an error names -o/--output and its folder, never the temporary file, which is removed."""
    temporary = os.path.join(folder, f".{os.path.basename(output)}.{os.getpid()}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
        with os.fdopen(fd, "w", encoding="ascii", newline="\n") as file:
            file.write(text)
        os.replace(temporary, output)
    except OSError as exc:
        raise DestinationError(
            f"cannot write -o/--output {output!r}: {exc.strerror or exc} (the list is written beside it and renamed "
            f"over it, so the folder {folder!r} must be writable)"
        ) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def _cmd_clean(args: argparse.Namespace) -> int:
    prefix = args.prefix
    if prefix.lower().endswith(".json") and len(prefix) > len(".json"):
        prefix = prefix[: -len(".json")]  # (PREFIX.json names the prefix PREFIX, as for convert -o)
    report = clean(prefix, max_manifest_bytes=args.max_manifest_bytes)
    if not args.quiet:
        for path in report.removed:
            print(f"removed {path}")
    for path in report.held:
        print(f"dmlbridge clean: kept {path}: {FILE_HELD}", file=sys.stderr)
    for path, why in report.failed:
        print(f"dmlbridge clean: cannot remove {path}: {why}", file=sys.stderr)
    if not args.quiet and report.removed:
        print(f"{counted(len(report.removed), 'file')} removed ({human_size(report.freed)} freed)")
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


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "table": _cmd_table, "inspect": _cmd_inspect, "convert": _cmd_convert, "verify": _cmd_verify,
    "bindings": _cmd_bindings, "clean": _cmd_clean, "demo": _cmd_demo,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 verification failed, 2 user error, 3 a fault of
    dmlbridge's own, 130 Ctrl-C).
    Ctrl-C prints one line from the first instruction on (files being written are removed first)."""
    command = "dmlbridge"
    try:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on, Ctrl-C is KeyboardInterrupt
        _escape_unencodable_output()  # (before --help, which shows the marker)
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:  # a bare `dmlbridge`: its usage and its commands
            parser.print_help()
            return 0
        command = f"dmlbridge {args.command}"
        return int(_COMMANDS[args.command](args))
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
    except Exception as exc:  # noqa: BLE001 - a fault of dmlbridge's own: one line still, never a traceback
        print(f"{command}: internal error: {type(exc).__name__}: {one_line(str(exc))} (a fault in dmlbridge, not "
              "in what it was given: please report it, with the command and the model)", file=sys.stderr)
        return 3


def _escape_unencodable_output() -> None:
    """Constant names come from the model: print the ones the terminal's encoding cannot show as escapes
    (a Windows console, or output redirected to a file in a legacy code page) instead of failing."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            with contextlib.suppress(Exception):  # a replaced stream (tests, IDEs) may refuse: keep it as it is
                reconfigure(errors="backslashreplace")
