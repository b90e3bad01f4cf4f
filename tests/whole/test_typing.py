"""The public API's types hold for a user's code: converted entries need no None checks, skipped ones do."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from builders import model_of
from onnx import numpy_helper

import dmlbridge

USER_CODE = textwrap.dedent('''
    import dmlbridge

    def ends(plan: dmlbridge.UploadPlan) -> list[int]:
        return [entry.offset + entry.total_tensor_size_in_bytes for entry in plan.converted]

    def first_size(plan: dmlbridge.UploadPlan, key: str) -> int:
        return plan.entries[key].as_converted().sizes[0]
''')
WRONG = textwrap.dedent('''
    import dmlbridge

    def end(plan: dmlbridge.UploadPlan, key: str) -> int:
        return plan.entries[key].offset + 1  # an entry may be skipped: offset is int | None
''')


def test_converted_entries_type_check_without_none_tests(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    (tmp_path / "user.py").write_text(USER_CODE)
    (tmp_path / "wrong.py").write_text(WRONG)
    out, err, status = api.run([str(tmp_path / "user.py"), "--strict", "--no-incremental"])
    assert status == 0, out + err
    out, _, status = api.run([str(tmp_path / "wrong.py"), "--strict", "--no-incremental"])
    assert status == 1 and "Unsupported operand types for + (\"None\" and \"int\")" in out, out


def test_as_converted_refuses_a_skipped_entry() -> None:
    labels = numpy_helper.from_array(np.array(["a"], dtype=object), "labels")
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    plan = dmlbridge.plan_model(model_of([labels, w]))
    assert plan.entries["w"].as_converted().end == 8 and [e.key for e in plan.converted] == ["w"]
    with pytest.raises(dmlbridge.InvalidArgumentError, match="'labels' was skipped"):
        plan.entries["labels"].as_converted()
