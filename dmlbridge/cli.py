"""The ``dmlbridge`` command line. User errors print one line on stderr and exit 2; never a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dmlbridge.errors import DmlBridgeError
from dmlbridge.mapping import MappingRow, mapping_table
from dmlbridge.target import Target
from dmlbridge.types import DmlDataType

__all__ = ["main", "format_table"]


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
    parser.add_argument("--feature-level", default="6.4", help="DirectML feature level, e.g. 6.2 (default 6.4)")
    parser.add_argument(
        "--unsupported", default="", metavar="TYPES", help="DML types the device lacks, e.g. FLOAT16,INT64"
    )
    parser.add_argument(
        "--int64", choices=("emulate", "narrow"), default="emulate", help="INT64/UINT64 without 64-bit support"
    )
    parser.add_argument("--allow-lossy", action="store_true", help="round DOUBLE to FLOAT32 without FLOAT64")


def format_table(rows: Sequence[MappingRow], markdown: bool) -> str:
    """The mapping table as aligned text, or as a markdown table (the README carries the default one)."""
    header = ("ONNX", "#", "DML", "conversion", "lossless", "reason")
    body = [
        (r.onnx_name, str(r.onnx_type), r.dml_type.name if r.dml_type else "—", r.conversion,
         "yes" if r.lossless else "no", r.reason)
        for r in rows
    ]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in [header, *body]
    )


def _cmd_table(args: argparse.Namespace) -> int:
    print(format_table(mapping_table(_target_from(args)), args.markdown))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``dmlbridge`` command."""
    parser = argparse.ArgumentParser(
        prog="dmlbridge", description="ONNX tensors and numpy arrays as byte-exact DirectML buffer tensors."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    table = commands.add_parser("table", help="print the ONNX -> DirectML type mapping for a target")
    _add_target_options(table)
    table.add_argument("--markdown", action="store_true", help="print a markdown table")
    table.set_defaults(run=_cmd_table)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 user error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except DmlBridgeError as exc:
        print(f"dmlbridge {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dmlbridge {args.command}: interrupted", file=sys.stderr)
        return 130
