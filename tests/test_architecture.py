"""The layering, checked on the source: what import-linter's contracts (pyproject.toml) cannot say.

- No library module imports an underscore name from another, or the package root (``import dmlbridge``): private
  modules export plain names, and only ``dmlbridge/__init__.py`` gathers them.
- No import inside a function: every dependency is visible at the top of its module.
- One concept per module: none is longer than 600 lines.
- No test module imports another test module (shared pieces live in helper modules such as models.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = sorted((ROOT / "dmlbridge").glob("*.py"))
TESTS = sorted((ROOT / "tests").glob("*.py"))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.name)
def test_library_modules_import_plain_names_from_their_modules(path: Path) -> None:
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dmlbridge":
            assert node.module != "dmlbridge" or path.name == "__init__.py", f"{path.name}: imports the package root"
            private = [a.name for a in node.names if a.name.startswith("_") and a.name != "__version__"]
            assert not private, f"{path.name}:{node.lineno} imports {private} from {node.module}"
        if isinstance(node, ast.Import):
            assert all(a.name != "dmlbridge" for a in node.names), f"{path.name}: imports the package root"


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.name)
def test_no_import_inside_a_function(path: Path) -> None:
    for node in ast.walk(_tree(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested = [n.lineno for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
            assert not nested, f"{path.name}: {node.name} imports at line(s) {nested}"


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: p.name)
def test_modules_stay_small(path: Path) -> None:
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 600


@pytest.mark.parametrize("path", TESTS, ids=lambda p: p.name)
def test_no_test_module_imports_another(path: Path) -> None:
    for node in ast.walk(_tree(path)):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
        assert not [n for n in names if n.startswith("test_")], f"{path.name} imports {names}"


def test_the_module_map_names_every_module_in_its_layer() -> None:
    """docs/architecture.md lists every module of the package, layer by layer as the import contract has them."""
    tomllib = pytest.importorskip("tomllib")  # (Python 3.11+)
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    layers = next(c["layers"] for c in contract["contracts"] if c["type"] == "layers")
    for number, layer in enumerate(layers, 1):
        names = ", ".join(f"`{m.strip().split('.')[-1]}`" for m in layer.split("|"))
        assert f"{number}. {names}\n" in text, layer
    modules = {p.stem for p in (ROOT / "dmlbridge").glob("*.py")} - {"__init__"}
    assert modules == {m.strip().split(".")[-1] for layer in layers for m in layer.split("|")}
    for module in modules:
        assert f"   - `{module}`: " in text, module
