"""Which DirectML.dll ``dmlbridge.gpu`` loads (dmlbridge/gpu/directml_dll.py): each order of the search in a fresh
process of Windows' CPython (the test session has loaded one already, which then wins), the one loaded reported by
the device, and a second copy refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dmlbridge
import dmlbridge.gpu

BESIDE = Path(sys.executable).resolve().parent / "DirectML.dll"


def child(script: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """What a fresh Windows CPython prints (one JSON object) running ``script``."""
    environ = {key: value for key, value in os.environ.items() if key != "DMLBRIDGE_DIRECTML_DLL"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          env={**environ, **(env or {})}, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


DEVICE = """
    import json, sys, dmlbridge.gpu
    with dmlbridge.gpu.create_device(**json.loads(sys.argv[1] if len(sys.argv) > 1 else "{}")) as device:
        print(json.dumps({"dll": device.directml_dll, "version": device.directml_version,
                          "level": device.feature_level.dotted}))
"""


@pytest.fixture
def copy(tmp_path: Path, windows: None) -> Path:
    """A copy of the DirectML.dll beside the program, in a folder of its own."""
    if not BESIDE.is_file():
        pytest.skip("no DirectML.dll beside this Python (the Windows run of CI puts one there)")
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    copied = folder / "DirectML.dll"
    copied.write_bytes(BESIDE.read_bytes())  # (not shutil.copy2: Wine 8 lacks the CopyFile2 it calls)
    return copied


def test_the_dll_beside_the_program_is_loaded_and_reported(copy: Path) -> None:
    got = child(DEVICE)
    assert os.path.samefile(got["dll"], BESIDE), got
    assert got["version"].startswith("1.15."), got  # (DirectML 1.15.4, the onnxruntime-directml 1.24.4 wheel's)
    assert got["level"] == "6.4"


def test_the_variable_and_the_keyword_come_before_the_program(copy: Path) -> None:
    named = child(DEVICE, {"DMLBRIDGE_DIRECTML_DLL": str(copy)})
    assert os.path.samefile(named["dll"], copy) and named["version"].startswith("1.15."), named
    script = DEVICE.replace("**json.loads(sys.argv[1] if len(sys.argv) > 1 else \"{}\")",
                            f"directml_dll={str(copy)!r}")
    given = child(script, {"DMLBRIDGE_DIRECTML_DLL": str(BESIDE)})  # (the keyword first)
    assert os.path.samefile(given["dll"], copy), given


def test_onnxruntime_directmls_dll_comes_before_system32(tmp_path: Path, windows: None) -> None:
    """Without one loaded, named, or beside the program: onnxruntime-directml's capi folder (found, not imported),
    then System32."""
    site = tmp_path / "site"
    (site / "onnxruntime" / "capi").mkdir(parents=True)
    (site / "onnxruntime" / "__init__.py").write_text("raise ImportError('never imported')\n")
    capi = site / "onnxruntime" / "capi" / "DirectML.dll"
    capi.write_bytes(b"")
    script = f"""
        import json, sys
        sys.path.insert(0, {str(site)!r})
        sys.executable = {str(tmp_path / "python.exe")!r}  # (a program with no DirectML.dll beside it)
        from dmlbridge.gpu.directml_dll import find_directml
        first = find_directml()
        import os; os.remove({str(capi)!r})
        print(json.dumps({{"capi": first, "then": find_directml()}}))
    """
    got = child(script)
    assert got["capi"][1] == "onnxruntime-directml's onnxruntime\\capi", got  # (the child removed it since)
    assert os.path.normcase(got["capi"][0]) == os.path.normcase(str(capi)), got
    assert got["then"][1] == "System32" and got["then"][0].lower().endswith("\\system32\\directml.dll"), got


def test_a_loaded_dll_is_used_and_a_second_copy_refused(device: dmlbridge.gpu.Device, copy: Path) -> None:
    """This process has loaded the one beside the program: naming it again is fine, naming another file is refused
    before any device is made."""
    assert os.path.samefile(device.directml_dll or "", BESIDE)
    with dmlbridge.gpu.create_device(directml_dll=BESIDE) as again:
        assert again.directml_dll == device.directml_dll
    with pytest.raises(dmlbridge.InvalidArgumentError, match=r"has loaded .* already .* pass directml_dll=None"):
        dmlbridge.gpu.create_device(directml_dll=copy)


def test_min_feature_level_is_asked_of_directml(device: dmlbridge.gpu.Device) -> None:
    """The level is passed to DMLCreateDevice1: 6.4, this DirectML's highest, makes a device; a name that is no
    level is refused. (No level above 6.4 exists to show the refusal of a DirectML without it.)"""
    with dmlbridge.gpu.create_device(min_feature_level="6.4") as at:
        assert at.feature_level is dmlbridge.FeatureLevel.FL_6_4
    for wrong in ("6.9", 6.4, True):
        with pytest.raises(dmlbridge.InvalidArgumentError, match="min_feature_level must be"):
            dmlbridge.gpu.create_device(min_feature_level=wrong)  # type: ignore[arg-type]
