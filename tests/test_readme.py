"""The README stays true: its quickstart runs, and the values its comments promise are the ones it gets."""

from __future__ import annotations

import re
from pathlib import Path

import dmlbridge

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_quickstart_runs_and_its_comments_hold() -> None:
    code = re.search(r"```python\n(.*?)```", _section("Quickstart"), re.S)
    assert code is not None
    lines = code.group(1).splitlines()
    namespace: dict[str, object] = {}
    exec("\n".join(lines), namespace)
    # A line `expression  # value` promises a value wherever the comment is itself an expression.
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
    assert promised >= 5
