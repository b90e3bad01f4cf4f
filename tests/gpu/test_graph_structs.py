"""The graph structs and operator descs of ``dmlbridge.gpu`` (the ones the consumer suite builds among them), held
to DirectML.h by the Windows compiler itself: a C++ file of ``static_assert``s (every struct's size and every field's
offset, every DML_OPERATOR_TYPE number, every value of the enums operator descs take) compiled by mingw-w64 against
the header (CI's, which builds native/), so a field out of place or an operator number miscounted fails here,
before any GPU run. And every DirectML operator the operator table names has its number and its desc struct."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

import dmlbridge.gpu
from dmlbridge.gpu import graph_structs
from dmlbridge.model.operators import OPERATORS
from dmlbridge.operator_descs import element_wise_structs, operator_structs, operator_types
from dmlbridge.operator_descs.operator_structs import OperatorStruct
from dmlbridge.operator_descs.operator_types import DmlOperatorType

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


ENUM_PREFIXES = {  # each enum of operator_types, and the prefix of its members' names in DirectML.h
    "DmlOperatorType": "DML_OPERATOR_", "DmlConvolutionMode": "DML_CONVOLUTION_MODE_",
    "DmlConvolutionDirection": "DML_CONVOLUTION_DIRECTION_", "DmlMatrixTransform": "DML_MATRIX_TRANSFORM_",
    "DmlRecurrentNetworkDirection": "DML_RECURRENT_NETWORK_DIRECTION_",
    "DmlQuantizationType": "DML_QUANTIZATION_TYPE_",
    "DmlMultiheadAttentionMaskType": "DML_MULTIHEAD_ATTENTION_MASK_TYPE_",
    "DmlExecutionFlags": "DML_EXECUTION_FLAG_",
}
ATTRIBUTE_CHOSEN = {"ELEMENT_WISE_MODULUS_TRUNCATE", "ELEMENT_WISE_BIT_SHIFT_RIGHT", "ELEMENT_WISE_MULTIPLY"}
"""The operators a node's attribute picks in place of its row's (a Mod's ``fmod``, a BitShift's ``direction``, an
Einsum's equation)."""


def public_structs() -> dict[str, type[ctypes.Structure | ctypes.Union]]:
    """Every struct and union of the operator-desc modules, by name (their base, which has no fields, aside)."""
    found = {}
    for module in (operator_structs, element_wise_structs):
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, (ctypes.Structure, ctypes.Union)) and \
                    "_fields_" in vars(value):
                found[name] = value
    return found


def table_operators() -> set[str]:
    """Every DirectML operator the operator table binds constants to."""
    rules = [rule for row in OPERATORS.values() for rule in [*row.inputs.values(), row.others]]
    return {rule.dml_operator for rule in rules if rule and rule.dml_operator} | ATTRIBUTE_CHOSEN


def source() -> str:
    lines = [PROLOGUE]
    for name, struct in public_structs().items():
        lines += _asserts(name, struct)
    for name in operator_types.__all__:
        prefix = ENUM_PREFIXES[name]
        for member, value in getattr(operator_types, name).__members__.items():  # (aliases too)
            lines.append(f"static_assert({prefix}{member} == {int(value)}, \"{prefix}{member}\");")
    for name in graph_structs.__all__:
        value = getattr(graph_structs, name)
        if isinstance(value, type):
            lines += _asserts(name, value)
        else:
            lines.append(f"static_assert({name} == {value}, \"{name}\");")
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
    assert source().count("static_assert") > 500
    # (Counting the enum's names gives DEQUANTIZE 175: DML_OPERATOR_SCATTER is an alias, not a number of its own.)
    assert "DML_OPERATOR_DEQUANTIZE == 174" in source()
    assert "DML_OPERATOR_SCATTER == 94" in source() and "DML_OPERATOR_SCATTER_ELEMENTS == 94" in source()
    assert "offsetof(DML_MULTIHEAD_ATTENTION_OPERATOR_DESC, MaskType)" in source()


def test_every_operator_of_the_table_has_its_number_and_its_struct() -> None:
    operators = table_operators()
    assert {"ELEMENT_WISE_ADD", "GEMM", "LSTM", "MULTIHEAD_ATTENTION", "JOIN"} <= operators
    assert operators <= set(DmlOperatorType.__members__)
    structs = {struct.OPERATOR_TYPE.name: name for name, struct in public_structs().items()
               if issubclass(struct, OperatorStruct)}
    assert all(structs[operator] == f"DML_{operator}_OPERATOR_DESC" for operator in operators), \
        operators - set(structs)


def test_every_operator_struct_is_named_for_its_operator_and_exported() -> None:
    structs = public_structs()
    assert len(structs) == 53  # 50 operator descs, DML_OPERATOR_DESC, DML_SCALE_BIAS and DML_SCALAR_UNION
    for name, struct in structs.items():
        assert name in dmlbridge.gpu.__all__ and struct.__module__ == "dmlbridge.gpu"
        if issubclass(struct, OperatorStruct):
            assert name == f"DML_{struct.OPERATOR_TYPE.name}_OPERATOR_DESC"

