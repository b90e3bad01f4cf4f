"""The README and the docs pages stay true.

- Every Python block of README.md and docs/*.md runs on its own, in a fresh process in an empty folder; the
  quickstart's comments promise the values it gets. (docs/windows.md's drive a GPU: tests/gpu/test_windows_page.py runs
  them on Windows.)
- Every shell block made only of ``dmlbridge`` commands runs as written.
- docs/manifest.md, the manifest format's one specification, states what the code does: its version numbers and
  every field of its tables are the JSON Schema's, and its example is a manifest ``load_plan``'s rules accept.
- The docs name only public names (``dmlbridge.X`` of ``__all__``, ``dmlbridge.gpu.X`` of its own), their links
  lead to files and headings that exist, and every test docs/safety.md names exists.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import background
import pytest

import dmlbridge
import dmlbridge.gpu
from dmlbridge.manifest.format import MANIFEST_FORMAT, READABLE_VERSIONS, parse_manifest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MANIFEST_SPEC = (ROOT / "docs" / "manifest.md").read_text(encoding="utf-8")


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# docs/windows.md drives a GPU: its Python blocks run on Windows' CPython, in tests/gpu/test_windows_page.py.
GPU_PAGES = {"docs/windows.md"}


def _blocks(language: str) -> list[tuple[str, int, str]]:
    """(page, number, code) of every ```language block of the README and the docs pages."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for number, code in enumerate(re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)):
            found.append((_name(page), number, code))
    return found


def _env() -> dict[str, str]:
    """The environment of a block's process: this checkout's dmlbridge first on the path."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


# --- Python blocks ----------------------------------------------------------------------------------------------

PYTHON_BLOCKS = [block for block in _blocks("python") if block[0] not in GPU_PAGES]


def test_the_readme_and_the_docs_have_python_blocks() -> None:
    pages = {page for page, _, _ in PYTHON_BLOCKS}
    assert {"README.md", "docs/guide.md", "docs/quantized.md", "docs/mapping.md", "docs/manifest.md"} <= pages


def _run_python_block(code: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh ``python -`` in the empty ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-"], input=code, text=True, cwd=folder, env=_env(),
                          capture_output=True, timeout=600)


@pytest.mark.parametrize(("page", "number", "code"), PYTHON_BLOCKS, ids=[f"{p}#{n}" for p, n, _ in PYTHON_BLOCKS])
def test_each_python_block_runs_on_its_own(page: str, number: int, code: str, tmp_path: Path) -> None:
    """Each block runs alone, in a fresh ``python -`` in an empty folder: it makes whatever files it needs."""
    assert re.search(r"^import dmlbridge$", code, re.M), f"{page} block {number} does not import dmlbridge"
    job = _BLOCK_RUNS.get((page, number))  # (run in the background since the session began)
    run = job.result() if job is not None else _run_python_block(code, tmp_path)
    assert run.returncode == 0, f"{page} block {number} failed:\n{run.stderr}"


def test_the_quickstarts_comments_promise_the_values_it_gets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A line ``expression  # value`` of the README's first block promises a value wherever the comment is
    itself an expression."""
    monkeypatch.chdir(tmp_path)
    quickstart = README.split("## Quickstart\n", 1)[1]
    code = re.search(r"```python\n(.*?)```", quickstart, re.S)
    assert code is not None
    lines = code.group(1).splitlines()
    namespace: dict[str, object] = {}
    exec("\n".join(lines), namespace)
    promised = 0
    for line in lines:
        expr, _, comment = line.partition("#")
        expr, comment = expr.strip(), comment.strip()
        if not expr or not comment or re.match(r"^\w+ = ", expr):
            continue
        try:
            expected = eval(comment, {**namespace, "DmlDataType": dmlbridge.DmlDataType})
        except (SyntaxError, NameError):
            continue  # prose, not a value
        assert eval(expr, namespace) == expected, (expr, comment)
        promised += 1
    assert promised >= 8


# --- shell blocks -----------------------------------------------------------------------------------------------

COMMAND_BLOCKS = [(page, number, code) for page, number, code in _blocks("(?:bash|sh)")
                  if all(line.startswith("dmlbridge ") for line in code.splitlines() if line.strip())]


_BLOCK_RUNS: dict[tuple[str, int], background.Job[subprocess.CompletedProcess[str]]] = {}
_COMMAND_RUNS: dict[tuple[str, int], background.Job[list[tuple[str, subprocess.CompletedProcess[str]]]]] = {}


def start_in_background(queue: background.Queue, folder: Path) -> None:
    """The blocks' fresh processes run beside the other tests (tests/conftest.py calls this): a process takes
    seconds to start on Windows' CPython, and there are dozens of them."""
    for page, number, code in PYTHON_BLOCKS:
        where = folder / f"python-{page.replace('/', '-')}-{number}"
        _BLOCK_RUNS[page, number] = queue.add(functools.partial(_run_python_block, code, where))
    for page, number, code in COMMAND_BLOCKS:
        where = folder / f"commands-{page.replace('/', '-')}-{number}"
        _COMMAND_RUNS[page, number] = queue.add(functools.partial(_run_commands, code, where))


def test_the_readme_shows_the_commands_that_install_and_test() -> None:
    shell = [code for page, _, code in _blocks("bash") if page == "README.md"]
    assert "pip install . && dmlbridge demo\n" in shell
    assert 'pip install -e ".[test]" && python -m pytest -q\n' in shell
    assert "DMLBRIDGE_DIRECTML=required python -m pytest -q" in (ROOT / ".ci" / "run").read_text(
        encoding="utf-8").splitlines()
    assert "DMLBRIDGE_DIRECTML=required" in README


def _command_words(code: str) -> list[list[str]]:
    """The words of each command of a shell block (``shlex``, comments dropped)."""
    return [shlex.split(line, comments=True) for line in filter(str.strip, code.splitlines())]


def _run_commands(code: str, folder: Path) -> list[tuple[str, subprocess.CompletedProcess[str]]]:
    """Each command of the block as ``python -m dmlbridge ...`` in ``folder``, in order, until one fails."""
    folder.mkdir(parents=True, exist_ok=True)
    runs = []
    for words in _command_words(code):
        run = subprocess.run([sys.executable, "-m", "dmlbridge", *words[1:]], text=True, cwd=folder, env=_env(),
                             capture_output=True, timeout=600)
        runs.append((shlex.join(words), run))
        if run.returncode != 0:
            break
    return runs


@pytest.mark.parametrize(("page", "number", "code"), COMMAND_BLOCKS, ids=[f"{p}#{n}" for p, n, _ in COMMAND_BLOCKS])
def test_each_block_of_dmlbridge_commands_runs(page: str, number: int, code: str, tmp_path: Path) -> None:
    """Shell blocks made only of ``dmlbridge`` commands run as written (with this checkout's dmlbridge), one
    command after the other, each of plain words (no shell needed: they run the same in any shell, Windows' too)."""
    for words in _command_words(code):
        shell = [w for w in words if w in ("|", "||", "&&", ";", "&", "<", ">", ">>") or re.search(r"[$*?`~]", w)]
        assert not shell, f"{page} shell block {number}: {shlex.join(words)!r} needs a shell ({shell})"
    job = _COMMAND_RUNS.get((page, number))  # (run in the background since the session began)
    runs = job.result() if job is not None else _run_commands(code, tmp_path)
    assert len(runs) == len(_command_words(code)) and all(run.returncode == 0 for _, run in runs), (
        f"{page} shell block {number} failed at {runs[-1][0]!r}:\n{runs[-1][1].stderr}")


def test_the_readme_and_the_cli_page_have_command_blocks() -> None:
    assert {"README.md", "docs/cli.md"} <= {page for page, _, _ in COMMAND_BLOCKS}


# --- the manifest format: docs/manifest.md is the specification ----------------------------------------------


def _schema_def(name: str) -> dict[str, object]:
    definition: dict[str, object] = dmlbridge.manifest_schema()["$defs"][name]
    return definition


def _fields(definition: dict[str, object]) -> tuple[set[str], set[str]]:
    """(every field, the required fields) of a schema object, following its allOf references and the fields of
    its oneOf alternatives (an entry's converted and skipped forms)."""
    every = set(definition.get("properties", {}))  # type: ignore[arg-type]
    required = set(definition.get("required", []))  # type: ignore[arg-type]
    for alternative in definition.get("oneOf", []):  # type: ignore[attr-defined]
        every |= set(alternative.get("properties", {}))
    for part in definition.get("allOf", []):  # type: ignore[attr-defined]
        more, more_required = _fields(_schema_def(part["$ref"].rsplit("/", 1)[1]))
        every |= more
        required |= more_required
    return every, required


def _spec_table(heading: str) -> tuple[set[str], set[str]]:
    """(every field, the required fields) of the table under ``### heading`` in docs/manifest.md."""
    section = MANIFEST_SPEC.split(f"\n### {heading}\n", 1)[1].split("\n#", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| `")]
    assert rows, heading
    every = {field.strip().strip("`") for field, _ in rows}
    return every, {field.strip().strip("`") for field, required in rows if required.strip() == "yes"}


def _items(definition: dict[str, object], field: str) -> dict[str, object]:
    items: dict[str, object] = definition["properties"][field]["items"]  # type: ignore[index]
    return items


def test_the_manifest_spec_states_the_versions_the_code_writes_and_reads() -> None:
    version = dmlbridge.MANIFEST_FORMAT_VERSION
    assert f"\n## Format `{MANIFEST_FORMAT}`, version {version}\n" in MANIFEST_SPEC
    assert f"| `format` | yes | the string `\"{MANIFEST_FORMAT}\"` |" in MANIFEST_SPEC
    assert f"| `format_version` | yes | {version} |" in MANIFEST_SPEC
    assert f"\n## Versions 1 to {version - 1}\n" in MANIFEST_SPEC
    assert READABLE_VERSIONS == tuple(range(1, version + 1))
    assert f"reads versions 1 to {version}" in MANIFEST_SPEC
    schema = dmlbridge.manifest_schema()
    assert [ref["$ref"] for ref in schema["oneOf"]] == [f"#/$defs/version{v}" for v in reversed(READABLE_VERSIONS)]
    assert schema["$defs"][f"version{version}"]["properties"]["format_version"] == {"const": version}


def test_every_table_of_the_manifest_spec_is_the_schemas() -> None:
    """Each table of docs/manifest.md lists exactly the fields the schema has for it, of the current version,
    and marks required exactly the ones the schema requires."""
    top = _fields(_schema_def(f"version{dmlbridge.MANIFEST_FORMAT_VERSION}"))
    entry = _fields(_schema_def("entryV7"))
    consumers = _items(_schema_def("entryV7Fields"), "consumers")
    tables = {
        "The top level": top,
        "`source`": _fields(_schema_def("sourceV2")),
        "`target`": _fields(_schema_def("target")),
        "`selection`": _fields(_schema_def("selectionV4")),
        "Each of `buffers`": _fields(_schema_def("bufferV7")),
        "Each of `entries`": entry,
        "Each of `consumers`": _fields(consumers),
        "`desc`": _fields(_schema_def("desc")),
        "Each of `quantized`": _fields(_schema_def("quantizedRecord")),
        "A part": _fields(_schema_def("quantizedPart")),
    }
    for heading, (every, required) in tables.items():
        assert _spec_table(heading) == (every, required), heading
    assert len(re.findall(r"^### ", MANIFEST_SPEC, re.M)) == len(tables)  # no table the test does not check
    assert _schema_def("version7")["properties"]["entries"]["items"] == {"$ref": "#/$defs/entryV7"}  # type: ignore[index]
    assert _schema_def("version7")["properties"]["selection"] == {"$ref": "#/$defs/selectionV4"}  # type: ignore[index]


def test_the_manifest_specs_example_is_a_manifest_the_reader_accepts() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    example = re.search(r"## Example\n.*?```json\n(.*?)```", MANIFEST_SPEC, re.S)
    assert example is not None
    document = json.loads(example.group(1))
    jsonschema.validate(document, dmlbridge.manifest_schema())
    manifest = parse_manifest(example.group(1).encode(), "weights.json")
    assert list(manifest.entries) == ["w", "labels", "b"]
    assert document["format_version"] == dmlbridge.MANIFEST_FORMAT_VERSION


def test_the_manifest_spec_has_one_copy() -> None:
    """The format module's docstring sends readers to docs/manifest.md and holds no rule of its own."""
    source = (ROOT / "dmlbridge" / "manifest" / "format.py").read_text(encoding="utf-8")
    docstring = ast.get_docstring(ast.parse(source)) or ""
    assert "docs/manifest.md" in docstring
    assert "MUST" not in docstring and "MUST" not in source


# --- names, links, tests --------------------------------------------------------------------------------------


def test_the_docs_name_only_public_names() -> None:
    """README.md and docs/*.md name dmlbridge's API as ``dmlbridge.X`` with X in ``__all__``, never by a module
    path (docs/architecture.md, the map of the modules, names modules by design)."""
    public = set(dmlbridge.__all__) | {"__version__", "gpu"}
    gpu = set(dmlbridge.gpu.__all__)
    for page in PAGES:
        if page.name == "architecture.md":
            continue
        text = page.read_text(encoding="utf-8")
        modules = set(re.findall(r"\bdmlbridge\.([a-z_]+)\.(\w+)", text))
        assert {package for package, _ in modules} <= {"gpu"}, _name(page)  # (the one public subpackage)
        assert {name for _, name in modules} <= gpu, (_name(page), {name for _, name in modules} - gpu)
        named = set(re.findall(r"(?<![\w/.])dmlbridge\.(\w+)", text)) - {"dml", "json", "lock"}
        assert named <= public, (_name(page), named - public)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_leads_to_a_file_and_heading_that_exist() -> None:
    for page in [*PAGES, ROOT / "native" / "README.md"]:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{_name(page)} links to {target}: no such file"
            if anchor and linked.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", linked.read_text(encoding="utf-8"), re.M)
                assert anchor in {_slug(h) for h in headings}, f"{_name(page)} links to {target}: no such heading"


def _named_tests(cell: str) -> list[tuple[str, str]]:
    """(test file, test name or pattern, '' for the whole file) of every test a Safety row names."""
    named = []
    for match in re.finditer(r"`(tests/[\w/]+\.py)(?:::(\w+\*?))?`(?: \(([^)]*)\))?", cell):
        path, single, listed = match.groups()
        names = [single] if single else re.findall(r"`(\w+\*?)`", listed or "")
        named += [(path, name) for name in names] or [(path, "")]
    return named


def test_every_test_the_safety_table_names_exists() -> None:
    """Each row of docs/safety.md names tests that show it: each file exists and each test (or pattern) names
    at least one test function of it."""
    rows = [line for line in (ROOT / "docs" / "safety.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and not line.startswith(("| Guarantee", "|---"))]
    assert len(rows) >= 20
    missing = []
    for row in rows:
        cell = re.split(r"(?<!\\)\|", row)[-2]
        named = _named_tests(cell)
        assert named, row[:80]
        for path, name in named:
            file = ROOT / path
            if not file.exists():
                missing.append(path)
                continue
            tests = re.findall(r"^\s*(?:async )?def (test_\w+)", file.read_text(encoding="utf-8"), re.M)
            if name and not fnmatch.filter(tests, name):
                missing.append(f"{path}::{name}")
    assert not missing, missing
