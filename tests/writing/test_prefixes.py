"""What an output prefix may name, and where its folder is: one rule for writing and reading.

A file at PREFIX.json that is not a manifest of dmlbridge is never replaced; a prefix whose last component is
``.`` or ``..``, or whose name is not UTF-8, is refused; the folder is resolved once, as the system resolves it
when it opens the files (a symbolic link first, then ``..``), so ``load_plan`` reads what ``convert_model``
wrote. Each case leaves every file as it was.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from builders import model_of
from command_line import one_line_error, run
from onnx import numpy_helper

from dmlbridge import DestinationError, InvalidArgumentError, convert_model, load_plan

WINDOWS = sys.platform == "win32"


def _model() -> object:
    return model_of([numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")])


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_file_at_the_manifests_name_that_is_no_manifest_is_refused_and_kept(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text('{"theme": "dark"}\n')
    (tmp_path / "notes.json").write_text("")  # (empty: not a manifest either)
    (tmp_path / "m.onnx").write_bytes(_model().SerializeToString())  # type: ignore[attr-defined]
    before = _files(tmp_path)
    with pytest.raises(DestinationError, match=r"settings\.json'?, which is a file that is not a dmlbridge manifest"):
        convert_model(_model(), tmp_path / "settings", progress=False)
    for flag in ("settings", "notes.json", "notes"):  # (-o notes.json means the prefix notes)
        line = one_line_error(run("convert", tmp_path / "m.onnx", "-o", tmp_path / flag, "--quiet"))
        assert "-o/--output" in line and "not a dmlbridge manifest" in line, line
    assert _files(tmp_path) == before
    convert_model(_model(), tmp_path / "w", progress=False).close()  # a manifest of its own is replaced
    convert_model(_model(), tmp_path / "w", progress=False).close()
    assert load_plan(tmp_path / "w.json").array("w").tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("last", [".", ".."])
def test_a_prefix_ending_in_a_dot_component_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       last: str) -> None:
    """`convert_model(m, ".")` wrote `..json`, `..lock` and a buffer file into the parent folder."""
    (tmp_path / "x").mkdir()
    monkeypatch.chdir(tmp_path / "x")
    before = _files(tmp_path)
    for prefix in (last, f"x/{last}", f"./{last}", os.path.join(str(tmp_path), "x", last)):
        with pytest.raises(InvalidArgumentError, match=rf"out_prefix .* ends in '{last}', which names a folder"):
            convert_model(_model(), prefix.replace("/", os.sep), progress=False)
    assert _files(tmp_path) == before


def test_a_missing_folder_on_the_way_is_refused_where_the_system_refuses_it(tmp_path: Path) -> None:
    """`missing/../w` names no folder on POSIX (the system cannot pass through a folder that is not there), as
    docs/cli.md says of a missing folder; Windows reads `..` before it looks, so there it is `w`."""
    prefix = tmp_path / "missing" / ".." / "w"
    if WINDOWS:
        convert_model(_model(), prefix, progress=False).close()
        assert load_plan(tmp_path / "w.json").array("w").tolist() == [0, 1, 2, 3]
        return
    with pytest.raises(DestinationError, match="does not exist"):
        convert_model(_model(), prefix, progress=False)
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(WINDOWS, reason="symbolic links: Windows makes them only with a privilege (and Wine not at all)")
def test_a_prefix_through_a_symlinked_folder_is_written_where_it_is_read(tmp_path: Path) -> None:
    """With `link` a symlink to `real/inner`, `link/../w` is `real/w` for the system: the conversion writes there
    (it wrote `./w`, lexically), and `load_plan("link/../w.json")` reads that very conversion."""
    (tmp_path / "real" / "inner").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real" / "inner")
    stale = convert_model(model_of([numpy_helper.from_array(np.full(4, 9, np.float32), "w")]), tmp_path / "w",
                          progress=False)  # (an older manifest where the lexical reading would look)
    stale.close()
    written = convert_model(_model(), tmp_path / "link" / ".." / "w", progress=False)
    written.close()
    assert Path(written.manifest_path or "") == tmp_path / "real" / "w.json"
    with load_plan(tmp_path / "link" / ".." / "w.json") as plan:
        assert plan.array("w").tolist() == [0, 1, 2, 3] and plan.conversion_id == written.conversion_id
    assert load_plan(tmp_path / "w.json").array("w").tolist() == [9, 9, 9, 9]  # (untouched)


@pytest.mark.skipif(WINDOWS, reason="Windows' file names are Unicode: every name is UTF-8 there")
def test_a_prefix_whose_name_is_not_utf_8_is_refused(tmp_path: Path) -> None:
    """A name with the byte 0xFF: the binding list named `n%ED%B3%BF...` while the file was `n\\xff...`, so no
    reader found it, and convert, verify and bindings all exited 0."""
    prefix = os.path.join(str(tmp_path), os.fsdecode(b"n\xff"))
    with pytest.raises(InvalidArgumentError, match="not UTF-8"):
        convert_model(_model(), prefix, progress=False)
    (tmp_path / "m.onnx").write_bytes(_model().SerializeToString())  # type: ignore[attr-defined]
    line = one_line_error(run("convert", tmp_path / "m.onnx", "-o", prefix, "--quiet"))
    assert "not UTF-8" in line
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]
