"""The docstring examples that make a GPU device (``create_device(``), which tests/whole/test_docstrings.py leaves
out, run on Windows' CPython against DirectML and give what they show."""

from __future__ import annotations

import doctest
import importlib
import tempfile
from pathlib import Path

import pytest

import dmlbridge.gpu

PACKAGE = Path(dmlbridge.gpu.__file__).resolve().parent
MODULES = ["dmlbridge.gpu", *sorted(f"dmlbridge.gpu.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__")]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _device_examples(name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(name)
    return [test for test in doctest.DocTestFinder().find(module, name)
            if any("create_device(" in example.source for example in test.examples)]


def test_the_device_examples_are_found() -> None:
    found = {test.name.rsplit(".", 1)[-1] for name in MODULES for test in _device_examples(name)}
    assert {"create_device", "target_of", "upload", "upload_tensors", "run_operator", "run_graph",
            "UploadedPlan"} <= found


@pytest.mark.parametrize("name", MODULES)
def test_device_examples_run(device: object, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in _device_examples(name):
        runner.run(test)
    assert runner.failures == 0
