"""The benchmark models and their conversions, pinned by SHA-256: ``python -m benchmarks.pins [--write]``.

A change meant to keep every output byte (a refactor, say) is checked on the models the benchmarks time, not
only on the small golden models of the tests: each model is built here at a modest size with the benchmarks' own
builders and fixed seeds, converted on several targets, and the SHA-256 of the model file, its external data and
every output (the buffer bytes, and the manifest with its random conversion id, buffer names and version made
neutral) is compared with ``benchmarks/pins.json``. ``--write`` records them from the code as it is. Exit status
0 when all are equal, 1 with one line per difference otherwise. The quantized model needs ONNX Runtime's
quantizer (the bench extra); without it that model is reported as not checked.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dmlbridge
from benchmarks.model_cases import make_constants_model, make_external_model

PINS = Path(__file__).resolve().parent / "pins.json"
_ALL = {"FLOAT32", "FLOAT16", "UINT32", "UINT16", "UINT8", "INT32", "INT16", "INT8", "FLOAT64", "UINT64", "INT64",
        "UINT4", "INT4"}
TARGETS: dict[str, tuple[dmlbridge.Target, dict[str, Any]]] = {
    "6.4": (dmlbridge.Target(), {}),
    "6.4-split": (dmlbridge.Target(), {"max_buffer_bytes": 1 << 20, "checksum": True}),
    "5.0": (dmlbridge.Target(feature_level="5.0"), {}),
    "1.0-min4": (dmlbridge.Target(feature_level="1.0"), {"min_dims": 4}),
    "no-float16": (dmlbridge.Target(supported=_ALL - {"FLOAT16"}), {}),
}


def _quantized(folder: Path) -> Path:
    from benchmarks.quantized_cases import build_matmul_nbits_model

    return build_matmul_nbits_model(folder, layers=4, k=256, n=128)


MODELS: dict[str, Callable[[Path], Path]] = {
    "float32 external (case 5)": lambda folder: make_external_model(folder, 16, 256 << 10),
    "mixed INT4 and FLOAT8 (case 5)": lambda folder: make_external_model(folder, 8, 64 << 10, mixed=True),
    "tiny constants (case 6)": lambda folder: make_constants_model(folder, 2_000),
    "MatMulNBits (case 7)": _quantized,
}
_VOLATILE = re.compile(r'"dmlbridge_version": "[^"]*"|"file": "[^"]*"')


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _outputs(prefix: Path) -> dict[str, str]:
    manifest = Path(str(prefix) + ".json").read_text()
    document = json.loads(manifest)
    data = b"".join((prefix.parent / buffer["file"]).read_bytes() for buffer in document["buffers"])
    neutral = _VOLATILE.sub("<volatile>", manifest.replace(document["conversion_id"], "<id>"))
    return {"buffers": _sha(data), "manifest": _sha(neutral.encode())}


def pins() -> dict[str, dict[str, str]]:
    """Every model's and every conversion's SHA-256, or the error a conversion raised."""
    results: dict[str, dict[str, str]] = {}
    for name, build in MODELS.items():
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            try:
                model = build(folder / "model")
            except ImportError as exc:
                results[name] = {"not checked": f"{exc}"}
                continue
            results[name] = {path.name: _sha(path.read_bytes()) for path in sorted((folder / "model").iterdir())}
            for target_name, (target, options) in TARGETS.items():
                prefix = folder / target_name
                try:
                    dmlbridge.convert_model(model, prefix, target=target, progress=False, fsync=False, **options)
                except dmlbridge.DmlBridgeError as exc:
                    results[f"{name} @ {target_name}"] = {"error": f"{type(exc).__name__}: {exc}"}
                    continue
                results[f"{name} @ {target_name}"] = _outputs(prefix)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pins", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="record the hashes from the code as it is")
    args = parser.parse_args(argv)
    now = pins()
    if args.write:
        PINS.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(now)} pins to {PINS}")
        return 0
    pinned = json.loads(PINS.read_text())
    differences = [f"{key}: pinned {pinned.get(key)}, now {now.get(key)}"
                   for key in sorted(set(pinned) | set(now)) if pinned.get(key) != now.get(key)]
    for line in differences:
        print(line)
    print(f"{len(now) - len(differences)} of {len(now)} pins equal")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
