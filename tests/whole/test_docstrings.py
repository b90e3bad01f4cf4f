"""Every example in the library's docstrings runs and gives what it shows (doctest).

An example that makes a GPU device (``create_device(``) needs Windows and DirectML: it is left out here, and
tests/gpu/test_device_examples.py runs it there, with the GPU suite's device (skipped, or required, as that suite is).
"""

from __future__ import annotations

import doctest
import importlib
import linecache
import tempfile
from pathlib import Path

import pytest

_PACKAGE = Path(__file__).resolve().parents[2] / "dmlbridge"
MODULES = sorted(".".join(p.relative_to(_PACKAGE).with_suffix("").parts).removesuffix(".__init__")
                 for p in _PACKAGE.rglob("*.py") if p.stem != "__main__")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def needs_a_device(test: doctest.DocTest) -> bool:
    """Whether a docstring's examples make a GPU device (and so need Windows and DirectML)."""
    return any("create_device(" in example.source for example in test.examples)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the examples' temporary folders go to pytest's
    # doctest makes a debugger for each docstring, which stats every file linecache holds (thousands, late in the
    # suite): a millisecond each on Windows' CPython under Wine, so seconds a module
    linecache.clearcache()
    module = importlib.import_module("dmlbridge" if name == "__init__" else f"dmlbridge.{name}")
    if name == "__init__":  # (the public names, loaded at their first use: their docstrings are the root's)
        for public in module.__all__:
            getattr(module, public)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in doctest.DocTestFinder().find(module, module.__name__):
        if not needs_a_device(test):
            runner.run(test)
    assert runner.failures == 0


def test_every_public_name_has_an_example() -> None:
    """Every name of ``dmlbridge.__all__`` and ``dmlbridge.gpu.__all__`` that has a docstring shows an example
    in it."""
    import dmlbridge
    import dmlbridge.gpu

    missing = [f"{package.__name__}.{name}" for package in (dmlbridge, dmlbridge.gpu) for name in package.__all__
               if callable(getattr(package, name)) and ">>>" not in (getattr(package, name).__doc__ or "")]
    assert not missing, missing
