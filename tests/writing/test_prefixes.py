"""What an output prefix may name, and where its folder is: one rule for writing and reading.

A file at PREFIX.json that is not a manifest of dmlbridge is never replaced; a prefix whose last component is
``.`` or ``..``, or whose name is not UTF-8, is refused; the folder is resolved once, as the system resolves it
when it opens the files (a symbolic link first, then ``..``), so ``load_plan`` reads what ``convert_model``
wrote. A model whose file or external data is a file of the prefix that the conversion would remove (named like a
buffer file, a temporary manifest or a retired file of it) is refused. Each case leaves every file as it was.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from builders import model_of
from command_line import one_line_error, run
from onnx import TensorProto, numpy_helper

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


def _model_of_data_in(folder: Path, location: str, values: np.ndarray) -> Path:
    """``m.onnx`` in ``folder``, its one constant ``v`` the bytes of ``values`` at the start of the file
    ``location`` beside it (written there unless it exists)."""
    if not (folder / location).exists():
        (folder / location).write_bytes(values.tobytes())
    tensor = numpy_helper.from_array(values, "v")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value=location)
    tensor.external_data.add(key="length", value=str(values.nbytes))
    onnx.save(model_of([tensor]), folder / "m.onnx")
    return folder / "m.onnx"


def test_a_model_whose_data_the_conversion_would_remove_is_refused_before_anything_is_created(
    tmp_path: Path,
) -> None:
    """A model that keeps its weights in an earlier conversion's buffer file (``w.<id>.00000.bin``), converted
    into ``w`` again: the conversion read the file, published, and removed it as the previous conversion's, and
    the model had lost its data. So too a model whose data is a buffer file no manifest lists, a retired file or a
    temporary manifest of the prefix, under any name of it (a hard link), and a model file named as one. Each is
    refused before anything is created, naming out_prefix (-o/--output) and the file; into another prefix, the
    model converts."""
    first = convert_model(_model(), tmp_path / "w", progress=False)
    first.close()
    listed = Path(first.bin_path or "")
    data = np.arange(4, dtype=np.float32)  # (the first bytes of the earlier conversion: its constant w)
    cases = [listed.name, "w.0123456789abcdef.00007.bin", ".w.0123456789abcdef.00000.bin.dmlbridge-old"]
    for location in cases:
        model = _model_of_data_in(tmp_path, location, data)
        before = _files(tmp_path)
        with pytest.raises(InvalidArgumentError, match=rf"out_prefix '.*w' would remove '[^']*{location}'.*the "
                                                       r"model's own file"):
            convert_model(model, tmp_path / "w", progress=False)
        line = one_line_error(run("convert", model, "-o", tmp_path / "w", "--quiet"))
        assert f"-o/--output {str(tmp_path / 'w')!r} would remove" in line and location in line, line
        assert _files(tmp_path) == before, location
    if hasattr(os, "link"):  # (another name of the listed file: removing it would remove the data)
        os.link(listed, tmp_path / "data.bin")
        model = _model_of_data_in(tmp_path, "data.bin", data)
        with pytest.raises(InvalidArgumentError, match=rf"would remove '[^']*{listed.name}'"):
            convert_model(model, tmp_path / "w", progress=False)
        os.unlink(tmp_path / "data.bin")
    named = tmp_path / ".w.json.0123456789abcdef.dmlbridge-tmp"  # (the model file itself)
    named.write_bytes(_model().SerializeToString())  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgumentError, match=r"would remove '[^']*dmlbridge-tmp'"):
        convert_model(named, tmp_path / "w", progress=False)
    assert named.read_bytes() == _model().SerializeToString()  # type: ignore[attr-defined]
    model = _model_of_data_in(tmp_path, listed.name, data)
    with convert_model(model, tmp_path / "v", progress=False) as plan:
        assert plan.array("v").tolist() == [0, 1, 2, 3]
    assert listed.read_bytes()[:16] == data.tobytes()


def _refused_everywhere(folder: Path, name: str, reason: str) -> None:
    """``name`` as out_prefix and as -o is refused for ``reason``, naming the argument, and nothing is created."""
    (folder / "m.onnx").write_bytes(_model().SerializeToString())  # type: ignore[attr-defined]
    before = _files(folder)
    prefix = os.path.join(str(folder), name)
    with pytest.raises(InvalidArgumentError, match=rf"out_prefix .* which .*{re.escape(reason)}.* choose another"):
        convert_model(_model(), prefix, progress=False)
    line = one_line_error(run("convert", folder / "m.onnx", "-o", prefix, "--quiet"))
    assert line.count("-o/--output") == 1 and reason in line, line
    assert _files(folder) == before, name


@pytest.mark.parametrize(("name", "reason"), [
    (".w", "begins with a dot"), ("wx:y", "holds ':'"), ("model.onnx:x", "holds ':'"), ("w\\x", "holds '\\\\'"),
    ("x" * 232, "is longer than 255 bytes"),
])
def test_a_prefix_whose_files_the_manifest_reader_refuses_is_refused_before_anything_is_created(
    tmp_path: Path, name: str, reason: str
) -> None:
    """A prefix whose buffer files load_plan would not take as plain names beside the manifest: it converted
    (`.w`, `w\\x` and `wx:y` on Linux; on NTFS `model.onnx:x` writes streams into the model's file), and then
    load_plan, verify, bindings and clean refused the result. It is refused first, on every system, by the reader's
    own rule (a conversion made on Linux must load on Windows); a leading dot stays refused, as the reader and
    dmlupload refuse it (hidden files, and the names of the prefix's temporary and retired files)."""
    if WINDOWS and "\\" in name:
        pytest.skip("a backslash separates folders on Windows")
    _refused_everywhere(tmp_path, name, reason)


@pytest.mark.parametrize("name", ["LPT1", "prn", "CON", "CONIN$", "conout$", "COM9", "aux", "NUL", "lpt\u00b9",
                                  "nul.x", "Com1 ", "CON.", "PRN . model"])
def test_a_windows_device_name_as_a_prefix_is_refused_on_every_system(tmp_path: Path, name: str) -> None:
    """A device name (with an extension after it, or trailing spaces and dots) is the device on Windows, not a file:
    the conversion failed there naming the lock ('No such file or directory', 'Invalid handle'), and one made on
    Linux could never be read on Windows. So it is refused by name on every system, naming out_prefix (-o)."""
    _refused_everywhere(tmp_path, name, "a Windows device name")
    (tmp_path / "sub").mkdir()  # (a name with no device in it is a prefix as any other)
    convert_model(_model(), tmp_path / "sub" / "console", progress=False).close()
    convert_model(_model(), tmp_path / "sub" / "w.con", progress=False).close()
    assert load_plan(tmp_path / "sub" / "console.json").array("w").tolist() == [0, 1, 2, 3]
