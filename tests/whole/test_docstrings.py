"""Every example in the library's docstrings runs and gives what it shows (doctest)."""

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
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_every_public_name_has_an_example() -> None:
    """Every name of ``dmlbridge.__all__`` that has a docstring shows an example in it."""
    import dmlbridge

    missing = [name for name in dmlbridge.__all__ if callable(getattr(dmlbridge, name))
               and ">>>" not in (getattr(dmlbridge, name).__doc__ or "")]
    assert not missing, missing
