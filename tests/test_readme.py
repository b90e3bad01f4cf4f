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


def test_every_python_block_runs_in_order(tmp_path: Path) -> None:
    """Every Python code block of the README runs as written, in order, in one namespace, in a folder where the
    shell lines they build on have run (`dmlbridge demo --keep demo`)."""
    import os
    import subprocess
    import sys

    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(blocks) >= 2
    assert "dmlbridge demo --keep demo" in README
    subprocess.run([sys.executable, "-m", "dmlbridge", "demo", "--keep", "demo"], cwd=tmp_path, check=True,
                   capture_output=True)
    namespace: dict[str, object] = {}
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        for block in blocks:
            exec(compile(block, "README.md", "exec"), namespace)
    finally:
        os.chdir(here)
