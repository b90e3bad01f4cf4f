"""The graph structs of ``dmlbridge.gpu`` and the operator descs the consumer suite builds, held to DirectML.h by the
Windows compiler itself: a C++ file of ``static_assert``s (every struct's size and every field's offset, every
operator's DML_OPERATOR_TYPE number) compiled by mingw-w64 against the header (CI's, which builds native/), so a
field out of place or an operator number miscounted fails here, before any GPU run."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import dml_operators
import pytest

from dmlbridge.gpu import graph_structs

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "tools" / "directml" / "include"
COMPILER = "x86_64-w64-mingw32-g++"
PROLOGUE = """#include <windows.h>
#include <d3d12.h>
#define _Inexpressible_(x)
#define _Maybenull_
#define DML_TARGET_VERSION_USE_LATEST
#include "DirectML.h"
#include <cstddef>
"""


def _asserts(c_name: str, struct: type[ctypes.Structure]) -> list[str]:
    lines = [f"static_assert(sizeof({c_name}) == {ctypes.sizeof(struct)}, \"sizeof {c_name}\");"]
    for name, *_ in struct._fields_:
        offset = getattr(struct, name).offset
        lines.append(f"static_assert(offsetof({c_name}, {name}) == {offset}, \"{c_name}::{name}\");")
    return lines


def source() -> str:
    lines = [PROLOGUE]
    for name in graph_structs.__all__:
        value = getattr(graph_structs, name)
        if isinstance(value, type):
            lines += _asserts(name, value)
        else:
            lines.append(f"static_assert({name} == {value}, \"{name}\");")
    for operator, struct in dml_operators.STRUCTS.items():
        lines += _asserts(f"DML_{operator}_OPERATOR_DESC", struct)
    for operator, number in dml_operators.OPERATOR_TYPES.items():
        lines.append(f"static_assert(DML_OPERATOR_{operator} == {number}, \"DML_OPERATOR_{operator}\");")
    for name in ("CONVOLUTION_MODE_CROSS_CORRELATION", "CONVOLUTION_DIRECTION_FORWARD", "MATRIX_TRANSFORM_NONE",
                 "MATRIX_TRANSFORM_TRANSPOSE", "QUANTIZATION_TYPE_SCALE_ZERO_POINT"):
        lines.append(f"static_assert(DML_{name} == {getattr(dml_operators, name)}, \"DML_{name}\");")
    return "\n".join(lines) + "\n"


def test_graph_structs_and_operator_descs_are_directml_hs(tmp_path: Path) -> None:
    compiler = shutil.which(COMPILER)
    if compiler is None:
        pytest.skip(f"{COMPILER} (mingw-w64, which CI installs to build native/) is not here")
    path = tmp_path / "layouts.cpp"
    path.write_text(source(), encoding="utf-8")
    done = subprocess.run([compiler, "-std=c++17", "-fsyntax-only", f"-I{INCLUDE}", str(path)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert source().count("static_assert") > 100
    # (Counting the enum's names gives DEQUANTIZE 175: DML_OPERATOR_SCATTER is an alias, not a number of its own.)
    assert "DML_OPERATOR_DEQUANTIZE == 174" in source()

