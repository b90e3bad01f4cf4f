"""Golden outputs: the .bin and manifest bytes of fixed models on fixed targets, pinned by SHA-256.

The models are files in ``tests/helpers/golden/`` (made once by this module, so that a new onnx release, which may
serialize its helpers' models differently, cannot change them). ``golden/outputs.json`` holds, per model and
target, the SHA-256 of the .bin and of the manifest, or the error the conversion raises. A change to the library
that is meant to keep every output byte (a refactor) must leave them all equal; a change that is meant to change
outputs rewrites them deliberately:

    python tests/whole/test_golden.py --write-outputs     # the hashes, from the library as it is now
    python tests/whole/test_golden.py --write-models      # the model files too (then the hashes)

The manifest's ``dmlbridge_version`` line is compared separately (it is the installed package's version), and
its conversion id (random) and buffer file name are made neutral before it is hashed.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

import dmlbridge
from dmlbridge import DmlBridgeError, Target

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
from models import outputs  # (run as a script too: tests/helpers is not on the path then)

GOLDEN = Path(__file__).resolve().parents[1] / "helpers" / "golden"
OUTPUTS = GOLDEN / "outputs.json"

_ALL = {"FLOAT32", "FLOAT16", "UINT32", "UINT16", "UINT8", "INT32", "INT16", "INT8", "FLOAT64", "UINT64", "INT64",
        "UINT4", "INT4"}
# name: (target, convert_model keywords)
TARGETS: dict[str, tuple[Target, dict[str, Any]]] = {
    "6.4": (Target(), {}),
    "6.4-checksum-align16": (Target(), {"checksum": True, "alignment": 16}),
    "6.2": (Target(feature_level="6.2"), {}),
    "2.0-min4": (Target(feature_level="2.0"), {"min_dims": 4}),
    "no-float16": (Target(supported=_ALL - {"FLOAT16"}), {}),
    "no64-emulate": (Target(supported=_ALL - {"FLOAT64", "INT64", "UINT64"}, int64="emulate"), {}),
    "no64-narrow": (Target(supported=_ALL - {"FLOAT64", "INT64", "UINT64"}, int64="narrow"), {}),
    "no64-narrow-lossy": (Target(supported=_ALL - {"FLOAT64", "INT64", "UINT64"}, int64="narrow", allow_lossy=True),
                          {}),
    "min_dims4": (Target(), {"min_dims": 4}),
}
MODELS = {"every-type": "every_type/model.onnx", "demo": "demo/sample.onnx", "small-constants": "small/model.onnx"}
_VERSION_LINE = re.compile(r'^  "dmlbridge_version": "[^"]*",$', re.M)


def _outcome(model: Path, target: Target, options: dict[str, Any], out: Path) -> dict[str, str]:
    try:
        dmlbridge.convert_model(model, out / "w", target=target, progress=False, **options)
    except DmlBridgeError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    data, text = outputs(out / "w")  # (the manifest with its random conversion id made neutral)
    version = _VERSION_LINE.findall(text)
    assert version == [f'  "dmlbridge_version": "{dmlbridge.__version__}",'], version
    return {
        "bin": hashlib.sha256(data).hexdigest(),
        "manifest": hashlib.sha256(_VERSION_LINE.sub("", text).encode()).hexdigest(),
    }


def outcomes() -> dict[str, dict[str, str]]:
    results = {}
    for model_name, relative in MODELS.items():
        for target_name, (target, options) in TARGETS.items():
            with tempfile.TemporaryDirectory() as scratch:
                results[f"{model_name} @ {target_name}"] = _outcome(GOLDEN / relative, target, options, Path(scratch))
    return results


@pytest.mark.parametrize("checked_only", ["", "1"], ids=["fast-paths", "checked-path-only"])
@pytest.mark.parametrize("case", [f"{m} @ {t}" for m in MODELS for t in TARGETS])
def test_outputs_are_the_golden_ones(case: str, checked_only: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The same bytes with the fast paths and with DMLBRIDGE_CHECKED_PATH_ONLY=1."""
    monkeypatch.setenv("DMLBRIDGE_CHECKED_PATH_ONLY", checked_only)
    expected = json.loads(OUTPUTS.read_text())[case]
    model_name, target_name = case.split(" @ ")
    target, options = TARGETS[target_name]
    assert _outcome(GOLDEN / MODELS[model_name], target, options, tmp_path) == expected


def _write_models() -> None:
    from models import build_model, small_model

    from dmlbridge.cli.demo import build_sample_model

    for folder in ("every_type", "demo", "small"):
        shutil.rmtree(GOLDEN / folder, ignore_errors=True)
        (GOLDEN / folder).mkdir(parents=True)
    build_model(GOLDEN / "every_type")
    build_sample_model(GOLDEN / "demo")
    model, _ = small_model(300, seed=7)
    (GOLDEN / "small" / "model.onnx").write_bytes(model.SerializeToString())


if __name__ == "__main__":
    if "--write-models" in sys.argv:
        _write_models()
    if "--write-models" in sys.argv or "--write-outputs" in sys.argv:
        OUTPUTS.write_text(json.dumps(outcomes(), indent=1, sort_keys=True) + "\n")
    else:
        print(__doc__)
