"""How much each random test runs: its own bounded default, times one multiplier.

Every random test of the suite takes its count of cases from :func:`examples`: the Hypothesis properties and
fuzzers (``max_examples``), the seeded loops of mutated manifests and quantized records, the SIGKILL trials and the
other random trials. ``DMLBRIDGE_EXAMPLES=N`` (a whole number, 1 when unset) runs N times the default of every one
of them, so one variable makes a longer session of the whole suite: ``DMLBRIDGE_EXAMPLES=10`` about ten times the
random cases. ``DMLBRIDGE_LONG=1`` adds the runs that are too long for the default suite (:data:`LONG`), each an
extra on top of a test of the same guarantee that always runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def multiplier(environ: Mapping[str, str] = os.environ) -> int:
    """``DMLBRIDGE_EXAMPLES``: a whole number of at least 1, 1 when it is not set (ValueError otherwise)."""
    text = environ.get("DMLBRIDGE_EXAMPLES", "").strip()
    if not text:
        return 1
    if not text.isdecimal() or int(text) < 1:
        raise ValueError(f"DMLBRIDGE_EXAMPLES must be a whole number of at least 1 (a multiplier of every random "
                         f"test's default number of cases), not {text!r}")
    return int(text)


def long_runs(environ: Mapping[str, str] = os.environ) -> bool:
    """``DMLBRIDGE_LONG``: 1 runs the long runs too; unset, empty or 0 does not (ValueError otherwise)."""
    text = environ.get("DMLBRIDGE_LONG", "").strip()
    if text not in ("", "0", "1"):
        raise ValueError(f"DMLBRIDGE_LONG must be 1 (run the long runs too) or 0, not {text!r}")
    return text == "1"


try:
    MULTIPLIER, LONG = multiplier(), long_runs()
except ValueError:  # (tests/conftest.py refuses the run with the message before any test runs)
    MULTIPLIER, LONG = 1, False


def examples(default: int) -> int:
    """The number of random cases of a test whose default is ``default``: ``default`` times DMLBRIDGE_EXAMPLES."""
    return default * MULTIPLIER
