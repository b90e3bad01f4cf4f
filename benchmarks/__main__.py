"""``python -m benchmarks [--quick] [--json PATH] [--only CASES] [--large] [--markdown]``."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks import core_cases, model_cases, performance_cases, quantized_cases, verify_cases
from benchmarks.harness import Row, Settings, Skipped, machine, table

CASES: dict[str, Callable[[Settings], list[Row | Skipped]]] = {
    "1": core_cases.native,
    "2": core_cases.four_bit,
    "3": core_cases.widening,
    "4": core_cases.tensors,
    "5": model_cases.models,
    "6": model_cases.constants,
    "7": quantized_cases.matmul_nbits,
    "8": performance_cases.cases,
    "9": verify_cases.verification,
}
RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cases, print the table, write the JSON; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds (for CI)")
    parser.add_argument("--json", type=Path, help="where to write the results (default: benchmarks/results/)")
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated case numbers (default: all)")
    parser.add_argument("--large", action="store_true", help="also convert a 4× larger model (memory check)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown (for docs/performance.md)")
    parser.add_argument("--workdir", type=Path, help="temporary files go here (default: a new folder in /tmp)")
    args = parser.parse_args(argv)
    wanted = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; cases are {', '.join(CASES)}")
    destination = args.json or RESULTS / ("quick.json" if args.quick else "latest.json")

    started = time.perf_counter()
    results: list[Row | Skipped] = []
    with tempfile.TemporaryDirectory(prefix="dmlbridge-bench-", dir=args.workdir) as tmp:
        settings = Settings.make(args.quick, args.large, Path(tmp))
        info = machine()
        for key in wanted:
            print(f"case {key} ...", file=sys.stderr, flush=True)
            results.extend(CASES[key](settings))
    rows = [r for r in results if isinstance(r, Row)]
    skipped = [r for r in results if isinstance(r, Skipped)]
    heading = (
        f"dmlbridge {info['dmlbridge']} on {info['cpu']} ({info['cpus']} CPUs, {info.get('memory_gib', '?')} GiB), "
        f"numpy {info['numpy']}, onnx {info['onnx']}, onnx_ir {info['onnx_ir']}, ml_dtypes {info['ml_dtypes']}, "
        f"Python {info['python']}; medians; dml/peer < 1 means dmlbridge is faster"
    )
    if args.quick:
        heading += "\nquick mode: small sizes and few runs, so the verdicts say nothing about the targets"
    print(heading)
    print(table(rows, skipped, markdown=args.markdown))
    missed = [r.case for r in rows if r.met() is False]
    report = {
        "format": "dmlbridge-benchmarks",
        "version": 1,
        "quick": args.quick,
        "machine": info,
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(settings).items() if k != "workdir"},
        "seconds": time.perf_counter() - started,
        "rows": [r.to_json() for r in rows],
        "skipped": [{"case": s.case, "reason": s.reason} for s in skipped],
        "missed": missed,
    }
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_text(json.dumps(report, indent=1) + "\n")
    # The same table as Markdown beside the JSON, ready for docs/performance.md.
    destination.with_suffix(".md").write_text(heading + "\n\n" + table(rows, skipped, markdown=True) + "\n")
    print(f"{len(rows)} rows, {len(missed)} missed a target, {len(skipped)} skipped; results in {destination} (+ .md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
