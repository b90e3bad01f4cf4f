"""The suite's shared setup: the helpers (tests/helpers/) importable by name from every test folder, and every
manifest dmlbridge writes during the tests checked against the JSON Schema the package ships."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from dmlbridge.manifest.format import manifest_schema
from dmlbridge.writing.publish import Publication

# The tests import the shared helpers by name (``from models import build_model``), wherever the test lives.
sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))

# No test depends on the machine's speed: Hypothesis' per-example deadline is off everywhere.
settings.register_profile("dmlbridge", deadline=None)
settings.load_profile("dmlbridge")

try:
    import jsonschema
except ImportError:  # pragma: no cover - the test extra installs it
    jsonschema = None


@pytest.fixture(scope="session")
def manifest_validator() -> Any:
    """One validator for the session (building it costs more than a small manifest's check)."""
    if jsonschema is None:
        pytest.skip("jsonschema is not installed (pip install -e '.[test]')")
    schema = manifest_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(autouse=True)
def _manifests_follow_the_schema(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[None]:
    if jsonschema is None:
        yield
        return
    validator = request.getfixturevalue("manifest_validator")
    publish = Publication.publish

    def checked(self: Publication, manifest: bytes) -> Any:
        document = json.loads(manifest)
        if isinstance(document, dict) and document.get("format") == "dmlbridge-upload-plan":  # (not a test's {})
            error = jsonschema.exceptions.best_match(validator.iter_errors(document))
            assert error is None, f"the manifest breaks the schema: {error.message} at {list(error.absolute_path)}"
        return publish(self, manifest)

    monkeypatch.setattr(Publication, "publish", checked)
    yield
