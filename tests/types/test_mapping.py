"""The mapping table: the documented rule for the default target, fallbacks for smaller ones, and its copies
in docs/mapping.md (whole) and the README (some rows)."""

from __future__ import annotations

from pathlib import Path

import pytest
from command_line import run

import dmlbridge
from dmlbridge import DmlDataType as D
from dmlbridge import FeatureLevel, Target

README = Path(__file__).resolve().parents[2] / "README.md"
MAPPING = Path(__file__).resolve().parents[2] / "docs" / "mapping.md"  # the full table

# The issue's table for the default target (6_4, every type), written out by hand.
DEFAULT = {
    "FLOAT": ("FLOAT32", "native"),
    "UINT8": ("UINT8", "native"),
    "INT8": ("INT8", "native"),
    "UINT16": ("UINT16", "native"),
    "INT16": ("INT16", "native"),
    "INT32": ("INT32", "native"),
    "INT64": ("INT64", "native"),
    "FLOAT16": ("FLOAT16", "native"),
    "DOUBLE": ("FLOAT64", "native"),
    "UINT32": ("UINT32", "native"),
    "UINT64": ("UINT64", "native"),
    "UINT4": ("UINT4", "native"),
    "INT4": ("INT4", "native"),
    "BOOL": ("UINT8", "widen"),
    "UINT2": ("UINT4", "widen"),
    "INT2": ("INT4", "widen"),
    "BFLOAT16": ("FLOAT32", "widen"),
    "FLOAT8E8M0": ("FLOAT32", "widen"),
    "FLOAT8E4M3FN": ("FLOAT16", "widen"),
    "FLOAT8E4M3FNUZ": ("FLOAT16", "widen"),
    "FLOAT8E5M2": ("FLOAT16", "widen"),
    "FLOAT8E5M2FNUZ": ("FLOAT16", "widen"),
    "FLOAT4E2M1": ("FLOAT16", "widen"),
    "FLOAT6E2M3": ("FLOAT16", "widen"),
    "FLOAT6E3M2": ("FLOAT16", "widen"),
    "UNDEFINED": (None, "unsupported"),
    "STRING": (None, "unsupported"),
    "COMPLEX64": (None, "unsupported"),
    "COMPLEX128": (None, "unsupported"),
}


def _as_dict(target: Target) -> dict[str, tuple[str | None, str]]:
    rows = dmlbridge.mapping_table(target)
    return {r.onnx_name: (r.dml_type.name if r.dml_type else None, r.conversion) for r in rows}


def test_default_table_is_the_issues_table() -> None:
    rows = dmlbridge.mapping_table()
    assert [r.onnx_type for r in rows] == list(range(29))
    assert _as_dict(Target()) == DEFAULT
    for row in rows:
        assert row.lossless == (row.conversion in ("native", "widen"))
        assert row.reason


def test_feature_level_6_2_has_no_4bit() -> None:
    table = _as_dict(Target(feature_level=FeatureLevel.FL_6_2))
    assert table["INT4"] == table["INT2"] == ("INT8", "widen")
    assert table["UINT4"] == table["UINT2"] == ("UINT8", "widen")
    assert {k: v for k, v in table.items() if k not in ("INT4", "INT2", "UINT4", "UINT2")} == {
        k: v for k, v in DEFAULT.items() if k not in ("INT4", "INT2", "UINT4", "UINT2")
    }


def test_no_float16_and_no_64_bit() -> None:
    small = {D.FLOAT32, D.UINT32, D.UINT16, D.UINT8, D.INT32, D.INT16, D.INT8, D.UINT4, D.INT4}
    table = _as_dict(Target(supported=small))
    for name in ("FLOAT16", "FLOAT8E4M3FN", "FLOAT8E5M2FNUZ", "FLOAT4E2M1", "FLOAT6E3M2"):
        assert table[name] == ("FLOAT32", "widen")
    assert table["INT64"] == ("INT32", "emulate") and table["UINT64"] == ("UINT32", "emulate")
    assert table["DOUBLE"] == (None, "unsupported")
    narrow = _as_dict(Target(supported=small, int64="narrow", allow_lossy=True))
    assert narrow["INT64"] == ("INT32", "narrow") and narrow["UINT64"] == ("UINT32", "narrow")
    assert narrow["DOUBLE"] == ("FLOAT32", "lossy")


def test_fallbacks_keep_kind_and_exactness() -> None:
    # Only 16-bit unsigned and 64-bit signed: UINT8 goes to UINT16 (same width class first), INT8 to INT64.
    table = _as_dict(Target(supported={D.UINT16, D.INT64, D.FLOAT64}))
    assert table["UINT8"] == ("UINT16", "widen") and table["INT8"] == ("INT64", "widen")
    assert table["BOOL"] == ("UINT16", "widen") and table["FLOAT"] == ("FLOAT64", "widen")
    assert table["UINT32"] == ("INT64", "widen") and table["INT64"] == ("INT64", "native")
    # Nothing integral: integers never become floats.
    floats = _as_dict(Target(supported={D.FLOAT32}))
    assert floats["INT8"][1] == floats["UINT4"][1] == floats["BOOL"][1] == "unsupported"
    with pytest.raises(dmlbridge.UnsupportedTypeError, match="supports none of INT8"):
        dmlbridge.dml_type_for("INT8", Target(supported={D.FLOAT32}))


def test_feature_levels_define_types() -> None:
    assert Target(feature_level="2.1").types == {D(v) for v in range(1, 9)}
    assert Target(feature_level="3.0").types == {D(v) for v in range(1, 12)}
    assert Target(feature_level="6.3").types == {D(v) for v in range(1, 14)}
    # supported is intersected with the level: INT4 on 6.2 is ignored.
    assert Target(feature_level="6.2", supported={"INT4", "INT8"}).types == {D.INT8}
    assert FeatureLevel.FL_2_1.max_dimension_count == 5 and FeatureLevel.FL_3_0.max_dimension_count == 8
    assert [int(f) for f in FeatureLevel][:3] == [0x1000, 0x2000, 0x2100] and int(FeatureLevel.FL_6_4) == 0x6400


def test_dml_type_properties() -> None:
    assert [int(t) for t in D] == list(range(14))
    assert D.INT4.bitwidth == 4 and D.INT4.is_signed and not D.UINT4.is_signed and not D.INT4.is_float
    assert D.FLOAT16.is_float and D.FLOAT16.numpy().str == "<f2" and D.UINT64.introduced_in == FeatureLevel.FL_3_0
    assert D.UINT4.introduced_in == FeatureLevel.FL_6_3 and D.INT8.introduced_in == FeatureLevel.FL_1_0


def _table_block(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return text.split("<!-- mapping-table:start -->\n")[1].split("\n<!-- mapping-table:end -->")[0].strip().splitlines()


def test_readme_carries_the_default_table() -> None:
    """docs/mapping.md carries the whole default table as `dmlbridge table --markdown` prints it; the README some
    of its rows, each as printed, in the table's order."""
    printed = run("table", "--markdown")
    assert printed.returncode == 0
    lines = printed.stdout.strip().splitlines()
    assert _table_block(MAPPING) == lines
    rows = _table_block(README)
    assert rows[:2] == lines[:2] and len(rows) > 6
    assert rows[2:] == [line for line in lines[2:] if line in rows[2:]]


def test_table_command_for_other_targets() -> None:
    out = run("table", "--feature-level", "6.2", "--unsupported", "FLOAT16,INT64", "--wide").stdout
    lines = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert lines["INT4"][2:4] == ["INT8", "widen"]
    assert lines["FLOAT16"][2:4] == ["FLOAT32", "widen"]
    assert lines["INT64"][2:4] == ["INT32", "emulate"]
    bad = run("table", "--unsupported", "BOGUS")
    assert bad.returncode == 2 and "BOGUS" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_the_table_notes_where_exact_storage_still_surprises() -> None:
    reasons = {row.onnx_name: row.reason for row in dmlbridge.mapping_table()}
    assert "subnormal" in reasons["BFLOAT16"] and "subnormal" in reasons["FLOAT8E8M0"]
    assert "QUANTIZE and DEQUANTIZE" in reasons["INT2"] and "QUANTIZE and DEQUANTIZE" in reasons["UINT2"]
    assert "UINT32" not in reasons["BOOL"]
    old = {row.onnx_name: row for row in dmlbridge.mapping_table(dmlbridge.Target("1.0"))}
    assert "at feature level 1.0 the logical operators take UINT32" in old["BOOL"].reason
    assert old["INT2"].dml_type is dmlbridge.DmlDataType.INT8 and "QUANTIZE" not in old["INT2"].reason
