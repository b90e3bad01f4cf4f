"""The suite's shared setup: the helpers (tests/helpers/) importable by name from every test folder, one budget for
every random test (DMLBRIDGE_EXAMPLES, and DMLBRIDGE_LONG for the long runs: tests/helpers/budget.py), the slow
child processes started in the background with the session, and every manifest dmlbridge writes during the tests
checked against the JSON Schema the package ships."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from dmlbridge.manifest.format import manifest_schema
from dmlbridge.writing.publish import Publication

try:
    import jsonschema
except ImportError:  # pragma: no cover - the test extra installs it
    jsonschema = None

# The tests import the shared helpers by name (``from models import build_model``), wherever the test lives.
sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))
import background
import budget
import fast_schema

# No test depends on the machine's speed: Hypothesis' per-example deadline is off everywhere. How many examples
# each property runs is its own bounded default times DMLBRIDGE_EXAMPLES (tests/helpers/budget.py). The default
# suite is the same run every time (its examples seeded by each test, no database of earlier failures): what it
# finds, it finds on every run and platform alike; DMLBRIDGE_EXAMPLES=N (N > 1) explores new examples each run.
_SAME_EVERY_RUN = {"derandomize": True, "database": None} if budget.MULTIPLIER == 1 else {}
settings.register_profile("dmlbridge", deadline=None, **_SAME_EVERY_RUN)
settings.load_profile("dmlbridge")

# The variables earlier versions of the suite read: refused, so that a longer run asked for the old way does
# not silently run the default one.
_REPLACED = {
    "DMLBRIDGE_FUZZ_EXAMPLES": "DMLBRIDGE_EXAMPLES (a multiplier of every random test's default number of cases)",
    "DMLBRIDGE_KILL_TRIALS": "DMLBRIDGE_EXAMPLES (a multiplier of every random test's default, the kill trials too)",
    "DMLBRIDGE_LARGE_BUFFERS": "DMLBRIDGE_LONG=1",
}


def pytest_configure(config: pytest.Config) -> None:
    replaced = [f"{old} is replaced by {new}" for old, new in _REPLACED.items() if old in os.environ]
    try:
        budget.multiplier(), budget.long_runs()
    except ValueError as exc:
        replaced.append(str(exc))
    if replaced:
        raise pytest.UsageError("; ".join(replaced))


def pytest_report_header(config: pytest.Config) -> str:
    return (f"dmlbridge: DMLBRIDGE_EXAMPLES={budget.MULTIPLIER} (times each random test's default), "
            f"DMLBRIDGE_LONG={int(budget.LONG)} (the long runs {'included' if budget.LONG else 'left out'})")


@pytest.fixture(scope="session", autouse=True)
def _started_in_background(request: pytest.FixtureRequest,
                           tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The slow child processes that need no test before them start as the session does: each test module with a
    selected test and a ``start_in_background(queue, folder)`` adds its jobs to one queue, which runs them beside
    the tests (tests/helpers/background.py)."""
    modules = {id(item.module): item.module for item in request.session.items
               if hasattr(getattr(item, "module", None), "start_in_background")}
    queue = background.Queue()
    for module in modules.values():
        module.start_in_background(queue, tmp_path_factory.mktemp(module.__name__))
    yield
    queue.close()


@pytest.fixture(scope="session")
def manifest_validator() -> Any:
    """One validator for the session (building it costs more than a small manifest's check)."""
    if jsonschema is None:
        pytest.skip("jsonschema is not installed (pip install -e '.[test]')")
    schema = manifest_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="session")
def fast_manifest_validator(manifest_validator: Any) -> Any:
    """The shipped schema with its references inlined (tests/helpers/fast_schema.py), the same answers in about
    half the time: what every manifest the tests write is checked against."""
    return jsonschema.Draft202012Validator(fast_schema.inlined(manifest_validator.schema))


@pytest.fixture(autouse=True)
def _manifests_follow_the_schema(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[None]:
    if jsonschema is None:
        yield
        return
    validator = request.getfixturevalue("fast_manifest_validator")
    publish = Publication.publish

    def checked(self: Publication, manifest: bytes | Iterable[bytes]) -> Any:
        manifest = manifest if isinstance(manifest, bytes) else b"".join(manifest)  # (the writer streams it)
        document = json.loads(manifest)
        if isinstance(document, dict) and document.get("format") == "dmlbridge-upload-plan":  # (not a test's {})
            error = jsonschema.exceptions.best_match(validator.iter_errors(document))
            assert error is None, f"the manifest breaks the schema: {error.message} at {list(error.absolute_path)}"
        return publish(self, manifest)

    monkeypatch.setattr(Publication, "publish", checked)
    yield


# The Windows run (DMLBRIDGE_WINDOWS_RUN=required, set by CI) may skip at most this share of the tests: only those
# testing what Windows lacks (SIGKILL, fork, FIFOs, /proc, symbolic links without a privilege), each with its reason.
MAX_WINDOWS_SKIPS = 0.05


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    if sys.platform != "win32":
        return
    counts = {kind: len(terminalreporter.stats.get(kind, [])) for kind in ("passed", "failed", "skipped", "error")}
    total = sum(counts.values())
    share = counts["skipped"] / total if total else 0.0
    terminalreporter.write_line(
        f"Windows run: {counts['passed']} passed, {counts['failed']} failed, {counts['error']} errors, "
        f"{counts['skipped']} skipped ({share:.1%} of {total}; at most {MAX_WINDOWS_SKIPS:.0%})")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if sys.platform != "win32" or os.environ.get("DMLBRIDGE_WINDOWS_RUN") != "required":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {})
    total = sum(len(stats.get(kind, [])) for kind in ("passed", "failed", "skipped", "error"))
    if total and len(stats.get("skipped", [])) > MAX_WINDOWS_SKIPS * total:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if reporter is not None:
            reporter.write_line(f"the Windows run skipped more than {MAX_WINDOWS_SKIPS:.0%} of its tests")
