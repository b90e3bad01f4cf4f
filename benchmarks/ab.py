"""A/B timing of ``convert_model`` in two source trees: ``python -m benchmarks.ab OLD_TREE NEW_TREE [--rounds 9]
[--cases 5,6] [--size-mib 1024] [--workdir DIR]``.

Each tree is a directory holding a ``dmlbridge/`` package (a git worktree of another commit, say). The models are
built once, in a temporary folder both trees share: case 5 is a float32 model of ``--size-mib`` MiB in external
data (64 tensors), case 6 a model of 50,000 tiny constants. Then, for each case, ``--rounds`` rounds of A B: each
timing runs in a fresh child (``sys.executable``, working directory and first ``PYTHONPATH`` entry the tree), which
imports ``dmlbridge`` through the package's public names only, checks that ``dmlbridge.__file__`` lies inside the
tree, converts the model once to warm up (page cache, lazy imports), then times one
``convert_model(path, out, progress=False, fsync=False)``. For case 6 the same child also times ``onnx.load`` of
the model (after one untimed load), so that each tree's time is also given as a ratio to the parser that shares
its process and moment. Printed per case and tree: the median, the min–max range, and for case 6 the median of
the per-child ratios to onnx.load; then new/old, the ratio of the medians (below 1: the new tree is faster).
Outputs are deleted after each child, so every conversion writes fresh files.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness import MiB, median
from benchmarks.model_cases import make_constants_model, make_external_model

CASES = {"5": "float32 model in external data, 64 tensors", "6": "50,000 tiny constants"}
TENSORS, CONSTANTS = 64, 50_000

# The child: argv is tree, case, model, output prefix; prints one JSON line of seconds.
CHILD = r"""
import json, os, sys, time
from pathlib import Path
tree, case, model, out = sys.argv[1:5]
import onnx
import dmlbridge
if not Path(dmlbridge.__file__).resolve().is_relative_to(Path(tree).resolve()):
    sys.exit(f"dmlbridge was imported from {dmlbridge.__file__}, not from {tree}")
def clean(prefix):  # every output of the prefix (PREFIX.bin of older trees, PREFIX.<id>.00000.bin, the lock)
    for path in Path(prefix).parent.glob(Path(prefix).name + ".*"):
        path.unlink()
dmlbridge.convert_model(model, out + "-warmup", progress=False, fsync=False)
clean(out + "-warmup")
start = time.perf_counter()
dmlbridge.convert_model(model, out, progress=False, fsync=False)
report = {"seconds": time.perf_counter() - start}
clean(out)
if case == "6":
    onnx.load(model)
    start = time.perf_counter()
    onnx.load(model)
    report["onnx_load"] = time.perf_counter() - start
print(json.dumps(report))
"""


def run_child(tree: Path, case: str, model: Path, out: Path) -> dict[str, float]:
    """One timing in a fresh interpreter that imports dmlbridge from ``tree``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), case, str(model), str(out)],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )
    for suffix in (".bin", ".json", "-warmup.bin", "-warmup.json"):
        Path(str(out) + suffix).unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"case {case} in {tree} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def summary(name: str, tree: Path, runs: Sequence[dict[str, float]]) -> str:
    """One tree's line: median, range and, when measured, the median ratio to onnx.load."""
    times = [r["seconds"] for r in runs]
    line = f"  {name} {tree}: median {ms(median(times))}, range {ms(min(times))}–{ms(max(times))}"
    if all("onnx_load" in r for r in runs):
        line += f", {median([r['seconds'] / r['onnx_load'] for r in runs]):.2f}× onnx.load (median ratio)"
    return line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", type=Path, help="the old tree (a directory holding dmlbridge/)")
    parser.add_argument("new", type=Path, help="the new tree")
    parser.add_argument("--rounds", type=int, default=9, help="A B rounds per case (default: 9)")
    parser.add_argument("--cases", default="5,6", help="comma-separated cases, of 5 and 6 (default: 5,6)")
    parser.add_argument("--size-mib", type=int, default=1024, help="case 5's model size in MiB (default: 1024)")
    parser.add_argument("--workdir", type=Path, help="temporary files go here (default: a new folder in /tmp)")
    args = parser.parse_args(argv)
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    for tree in trees.values():
        if not (tree / "dmlbridge" / "__init__.py").is_file():
            parser.error(f"{tree} holds no dmlbridge/ package")
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if not cases or set(cases) - set(CASES):
        parser.error(f"--cases must name some of {', '.join(CASES)}")
    if args.rounds < 1 or args.size_mib < 1:
        parser.error("--rounds and --size-mib must be at least 1")

    runs: dict[tuple[str, str], list[dict[str, float]]] = {(c, n): [] for c in cases for n in trees}
    with tempfile.TemporaryDirectory(prefix="dmlbridge-ab-", dir=args.workdir) as tmp:
        work = Path(tmp)
        models = {
            "5": lambda: make_external_model(work / "case5", TENSORS, args.size_mib * MiB // TENSORS),
            "6": lambda: make_constants_model(work / "case6", CONSTANTS),
        }
        for case in cases:
            print(f"case {case}: building the model ...", file=sys.stderr, flush=True)
            model = models[case]()
            for round_ in range(args.rounds):
                for name, tree in trees.items():  # A B A B
                    runs[case, name].append(run_child(tree, case, model, work / "out"))
                times = ", ".join(f"{n} {ms(runs[case, n][-1]['seconds'])}" for n in trees)
                print(f"case {case} round {round_ + 1}/{args.rounds}: {times}", file=sys.stderr, flush=True)

    print(f"{args.rounds} rounds A B, each timing in a fresh process after one warm-up; convert_model(fsync=False)")
    for case in cases:
        what = CASES[case] + (f", {args.size_mib} MiB" if case == "5" else "")
        print(f"case {case}: {what}")
        for name, tree in trees.items():
            print(summary(name, tree, runs[case, name]))
        old, new = (median([r["seconds"] for r in runs[case, n]]) for n in ("old", "new"))
        print(f"  new/old {new / old:.3f} (ratio of medians; below 1: new is faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
