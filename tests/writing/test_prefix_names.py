"""Which files are a prefix's, as their folder tells: ``clean`` and a conversion keep the files the manifest lists
by identity (whatever name the manifest gives them), and take a name in other letter case for the prefix's only
in a folder that ignores case (on Windows, as NTFS does; on Linux, as vfat or a casefold folder would), never in
one that keeps ``Model`` and ``model`` apart.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from builders import model_of
from models import buffer_path
from onnx import numpy_helper
from system_calls import let_go

import dmlbridge
from dmlbridge import convert_model, load_plan


def _model(value: float = 1.0) -> object:
    return model_of([numpy_helper.from_array(np.full(3, value, np.float32), "w")])


def _ignores_case(folder: Path) -> bool:
    """Whether ``folder`` looks names up in any letter case (a file made to ask it, then removed)."""
    (folder / "probe").write_bytes(b"")
    try:
        return (folder / "PROBE").exists()
    finally:
        (folder / "probe").unlink()


def _list_as(prefix: Path, name: str) -> None:
    """Make ``PREFIX.json`` name its one buffer file ``name`` (the file stays as it is on the disk)."""
    manifest = Path(f"{prefix}.json")
    document = json.loads(manifest.read_text())
    document["buffers"][0]["file"] = name
    manifest.write_text(json.dumps(document))


def test_clean_keeps_the_listed_buffer_file_however_the_manifest_spells_it(tmp_path: Path) -> None:
    """A listed buffer file is the manifest's by identity, not by name: with another name of it beside (a hard
    link under a buffer file's name the manifest does not list), clean removes neither, and where the folder
    ignores case (Windows), a manifest naming it in other letters (``W.<id>.00000.bin``, which ``load_plan`` opens
    all the same) keeps it too: clean removed it, and the conversion was gone."""
    convert_model(_model(), tmp_path / "w", progress=False, checksum=True).close()
    listed = buffer_path(tmp_path / "w")
    other = tmp_path / "w.fedcba9876543210.00000.bin"
    os.link(listed, other)
    assert dmlbridge.clean(tmp_path / "w") == dmlbridge.CleanReport((), 0, (), ())
    assert listed.exists() and other.exists()
    other.unlink()
    if _ignores_case(tmp_path):
        _list_as(tmp_path / "w", "W" + listed.name[1:])
        with load_plan(tmp_path / "w.json") as plan:
            assert plan.array("w").tolist() == [1.0] * 3
        assert dmlbridge.clean(tmp_path / "w") == dmlbridge.CleanReport((), 0, (), ())
        assert listed.exists()
        with load_plan(tmp_path / "w.json", verify=True) as plan:
            assert plan.array("w").tolist() == [1.0] * 3


def test_names_in_other_letter_case_are_the_prefixes_only_where_the_folder_ignores_case(tmp_path: Path) -> None:
    """``Model`` and ``model`` in one folder: where the folder keeps them apart (Linux, mostly), they are two
    prefixes, and neither a conversion into ``model`` nor ``clean("model")`` touches ``Model``'s files; where it
    ignores case (Windows, mostly), they are one prefix: ``clean("model")`` removes ``Model``'s leftovers but the
    buffer file ``Model.json`` lists, and a conversion into ``model`` replaces ``Model``'s conversion and removes
    its buffer files (they stayed, a hidden copy of the conversion it replaced)."""
    first = convert_model(_model(), tmp_path / "Model", progress=False)
    let_go(first)
    listed = buffer_path(tmp_path / "Model")
    leftover = tmp_path / "Model.fedcba9876543210.00000.bin"  # (as a killed conversion leaves it)
    leftover.write_bytes(bytes(256))
    if not _ignores_case(tmp_path):
        convert_model(_model(2.0), tmp_path / "model", progress=False).close()
        assert dmlbridge.clean(tmp_path / "model") == dmlbridge.CleanReport((), 0, (), ())
        assert listed.exists() and leftover.exists()
        assert load_plan(tmp_path / "Model.json").array("w").tolist() == [1.0] * 3
        return
    assert dmlbridge.clean(tmp_path / "model") == dmlbridge.CleanReport((str(tmp_path / leftover.name),), 256, (), ())
    assert listed.exists() and not leftover.exists()
    second = convert_model(_model(2.0), tmp_path / "model", progress=False)
    let_go(second)
    assert not listed.exists()
    names = sorted(name.lower() for name in os.listdir(tmp_path))
    assert names == sorted(["model.json", buffer_path(tmp_path / "model").name.lower()]), names
    assert load_plan(tmp_path / "Model.json").array("w").tolist() == [2.0] * 3


def test_a_reconversion_into_the_prefix_in_other_letter_case_leaves_no_previous_buffer_file(tmp_path: Path) -> None:
    """``Model``, then ``model``: where the folder ignores case (Windows), the second replaces the first's
    manifest, so the first's buffer file, which no manifest lists any more, is a previous buffer of ``model`` and
    is removed by the conversion (it stayed, unseen by ``clean("model")`` too); where the folder keeps letter case
    apart, both conversions stay whole."""
    first = convert_model(_model(), tmp_path / "Model", progress=False)
    let_go(first)
    listed = buffer_path(tmp_path / "Model")
    second = convert_model(_model(2.0), tmp_path / "model", progress=False)
    let_go(second)
    if not _ignores_case(tmp_path):
        assert listed.exists() and load_plan(tmp_path / "Model.json").array("w").tolist() == [1.0] * 3
        return
    assert not listed.exists()
    names = sorted(name.lower() for name in os.listdir(tmp_path))
    assert names == sorted(["model.json", buffer_path(tmp_path / "model").name.lower()]), names
    assert dmlbridge.clean(tmp_path / "model") == dmlbridge.CleanReport((), 0, (), ())
