"""The packages, checked on the source: what import-linter's contracts (pyproject.toml) cannot say.

- Every module lives in a package but the entry points and the two foundations (``__init__``, ``__main__``,
  ``errors``, ``version``), and every package has a docstring naming its concept and what it may import.
- No library module imports an underscore name from another, or the package root (``import dmlbridge``): modules
  export plain names, and only ``dmlbridge/__init__.py`` gathers the public ones.
- No import inside a function: every dependency is visible at the top of its module.
- One concept per module: none is longer than 600 lines, and no two modules' names differ only by a suffix.
- No test module imports another test module (shared pieces live in tests/helpers/, such as models.py).
- ``docs/architecture.md``'s module map is the one this module draws from the contract and the docstrings
  (``python tests/whole/test_architecture.py --write`` redraws it).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dmlbridge"
LIBRARY = sorted(PACKAGE.rglob("*.py"))
TESTS = sorted((ROOT / "tests").rglob("*.py"))
FLAT = {"__init__.py", "__main__.py", "errors.py", "version.py"}
PACKAGES = sorted(p.parent for p in PACKAGE.glob("*/__init__.py"))
ARCHITECTURE = ROOT / "docs" / "architecture.md"
_MAP_START = "<!-- module map: drawn by tests/whole/test_architecture.py -->\n"
_MAP_END = "<!-- end of the module map -->\n"


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _first_paragraph(path: Path) -> str:
    return " ".join((ast.get_docstring(_tree(path)) or "").split("\n\n")[0].split())


def test_every_module_is_in_a_package_but_the_entry_points() -> None:
    assert {p.name for p in PACKAGE.glob("*.py")} == FLAT
    assert all(p.parent == PACKAGE or p.parent in PACKAGES for p in LIBRARY), "no package inside a package"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_every_package_names_its_concept_and_what_it_may_import(package: Path) -> None:
    text = ast.get_docstring(_tree(package / "__init__.py")) or ""
    assert text.split("\n\n")[0].strip(), f"{package.name}: no docstring"
    assert "May import:" in text, f"{package.name}: its docstring does not say what it may import"


def test_no_two_modules_or_packages_differ_only_by_a_suffix() -> None:
    stems = sorted({p.stem for p in LIBRARY} - {"__init__", "__main__"} | {p.name for p in PACKAGES})
    pairs = [(a, b) for a in stems for b in stems if a != b and b.startswith(a) and len(b) - len(a) <= 4]
    assert not pairs, pairs


@pytest.mark.parametrize("path", LIBRARY, ids=_name)
def test_library_modules_import_plain_names_from_their_modules(path: Path) -> None:
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dmlbridge":
            assert node.module != "dmlbridge" or path == PACKAGE / "__init__.py", f"{_name(path)}: imports the root"
            private = [a.name for a in node.names if a.name.startswith("_") and a.name != "__version__"]
            assert not private, f"{_name(path)}:{node.lineno} imports {private} from {node.module}"
        if isinstance(node, ast.Import):
            assert all(a.name != "dmlbridge" for a in node.names), f"{_name(path)}: imports the package root"


@pytest.mark.parametrize("path", LIBRARY, ids=_name)
def test_no_import_inside_a_function(path: Path) -> None:
    for node in ast.walk(_tree(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested = [n.lineno for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
            assert not nested, f"{_name(path)}: {node.name} imports at line(s) {nested}"


@pytest.mark.parametrize("path", LIBRARY, ids=_name)
def test_modules_stay_small(path: Path) -> None:
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 600


@pytest.mark.parametrize("path", TESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_test_module_imports_another(path: Path) -> None:
    for node in ast.walk(_tree(path)):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
        assert not [n for n in names if n.split(".")[-1].startswith("test_")], f"{path.name} imports {names}"


def test_the_package_root_loads_what_its_imports_name() -> None:
    """``import dmlbridge`` imports the errors and the version; every other public name is imported for type
    checkers only, and loaded at its first use from the module that import names (``_HOMES``)."""
    import dmlbridge

    tree = _tree(PACKAGE / "__init__.py")
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    typed = {node.module: tuple(a.name for a in node.names) for node in guarded.body
             if isinstance(node, ast.ImportFrom)}
    assert typed == dmlbridge._HOMES
    eager = {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom)
             and node.module in ("dmlbridge.errors", "dmlbridge.version") for a in node.names}
    assert set(dmlbridge.__all__) | {"__version__"} == eager | {name for names in typed.values() for name in names}


def _layers() -> list[list[str]]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        pytest.skip("tomllib is Python 3.11+")
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    layers = next(c["layers"] for c in contract["contracts"] if c["type"] == "layers")
    return [[name.strip() for name in layer.split("|")] for layer in layers]


def module_map() -> str:
    """The module map: the contract's layers, top first; each package with its concept, each module with the
    first paragraph of its docstring."""
    lines = [_MAP_START]
    for number, layer in enumerate(_layers(), 1):
        lines.append(f"{number}. " + " | ".join(f"`{name}`" for name in layer) + "\n")
        for name in layer:
            path = ROOT / name.replace(".", "/")
            if path.is_dir():
                lines.append(f"   - **`{name}`**: {_first_paragraph(path / '__init__.py')}\n")
                for module in sorted(path.glob("*.py")):
                    if module.name != "__init__.py":
                        lines.append(f"     - `{module.stem}`: {_first_paragraph(module)}\n")
            else:
                lines.append(f"   - `{name}`: {_first_paragraph(path.with_suffix('.py'))}\n")
    return "".join(lines) + _MAP_END


def test_the_contract_names_every_package_and_flat_module() -> None:
    named = {name for layer in _layers() for name in layer}
    expected = {f"dmlbridge.{p.name}" for p in PACKAGES} | {f"dmlbridge.{Path(f).stem}" for f in FLAT - {"__init__.py"}}
    assert named == expected


def test_the_module_map_is_drawn_from_the_contract_and_the_docstrings() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    found = re.search(re.escape(_MAP_START) + ".*?" + re.escape(_MAP_END), text, re.S)
    assert found, f"{ARCHITECTURE.name} has no module map"
    assert found.group(0) == module_map(), "run: python tests/whole/test_architecture.py --write"


def _public_classes_returned() -> dict[str, set[str]]:
    """For every public function, and every public method and property of a public class, the dmlbridge classes
    its return annotation names (a container's items included)."""
    import inspect
    import typing

    import dmlbridge

    def named(hint: object) -> set[type]:
        found = {hint} if isinstance(hint, type) and hint.__module__.startswith("dmlbridge") else set()
        for argument in typing.get_args(hint):
            found |= named(argument)
        return found

    import dmlbridge.gpu

    returned: dict[str, set[str]] = {}
    for package, name in [(dmlbridge, n) for n in dmlbridge.__all__] + [(dmlbridge.gpu, n) for n in
                                                                       dmlbridge.gpu.__all__]:
        value = getattr(package, name)
        members = [(name, value)] if inspect.isfunction(value) else []
        if isinstance(value, type):
            for attribute, member in vars(value).items():
                if attribute.startswith("_"):
                    continue
                member = member.fget if isinstance(member, property) else member
                if inspect.isfunction(member):
                    members.append((f"{name}.{attribute}", member))
        for where, function in members:
            try:
                hints = typing.get_type_hints(function, vars(sys.modules[function.__module__]))
            except (NameError, TypeError):
                continue
            classes = named(hints.get("return"))
            if classes:
                returned[where] = {f"{c.__module__}.{c.__qualname__}" for c in classes}
    return returned


def test_every_class_a_public_call_returns_is_public_and_shows_dmlbridge_as_its_module() -> None:
    returned = _public_classes_returned()
    assert "UploadPlan.quantized" in returned and "dmlbridge.QuantizedWeight" in returned["UploadPlan.quantized"]
    assert "upload" in returned and returned["upload"] == {"dmlbridge.gpu.UploadedPlan"}
    hidden = {where: classes for where, classes in returned.items()
              if any(not re.fullmatch(r"dmlbridge\.(gpu\.)?\w+", name) for name in classes)}
    assert not hidden, hidden


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    found = re.search(re.escape(_MAP_START) + ".*?" + re.escape(_MAP_END), text, re.S)
    if found:
        text = text[: found.start()] + module_map() + text[found.end() :]
    else:
        text += "\n" + module_map()
    ARCHITECTURE.write_text(text, encoding="utf-8")
