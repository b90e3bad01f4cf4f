"""Every example in the library's docstrings runs and gives what it shows (doctest)."""

from __future__ import annotations

import doctest
import importlib
import tempfile
from pathlib import Path

import pytest

MODULES = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "dmlbridge").glob("*.py")
                 if p.stem != "__main__")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the examples' temporary folders go to pytest's
    module = importlib.import_module("dmlbridge" if name == "__init__" else f"dmlbridge.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
