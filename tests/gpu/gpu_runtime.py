"""The GPU suite's runtime: Windows' CPython driving Direct3D 12 and DirectML through ``dmlbridge.gpu``.

Off Windows every test that needs the device is skipped with one line saying so (what runs there without a
device: test_com.py, test_graph_structs.py, test_graph_arguments.py and the checks of test_plan_fits.py). On
Windows, a device that cannot be made skips them too, unless ``DMLBRIDGE_DIRECTML=required`` (CI), which makes that
a failure. The session's device starts with a known-answer check: bytes written by ``struct`` uploaded and read
back (through a readback heap filled with 0xA5 first) and run through DirectML's IDENTITY as UINT32 (bit patterns
of float32 subnormals and NaNs with payloads, which a FLOAT32 IDENTITY need not keep: Direct3D's float rules let a
GPU flush the one and quiet the other), so a broken stack that returns zeros or nothing fails every test instead of
passing.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest

import dmlbridge
import dmlbridge.gpu

NEEDS_WINDOWS = "the GPU suite needs Windows' CPython and DirectML (tests/gpu; see docs/windows.md)"

# Known answers: float32 bit patterns (zeros, 1, -1.5, the largest, the smallest normal, subnormals, infinities,
# NaNs with payloads, pi), none of them 0xA5A5A5A5.
KNOWN_BITS = (0x00000000, 0x80000000, 0x3F800000, 0xBFC00000, 0x7F7FFFFF, 0x00800000, 0x00000001, 0x807FFFFF,
              0x7F800000, 0xFF800000, 0x7FC12345, 0xFFA00001, 0x40490FDB, 0x3DCCCCCD, 0xC2F6E979, 0x4B000001)


@dataclass
class Tally:
    """What the session did on the GPU, printed at the end of the run."""

    known_answers: int = 0
    entries: int = 0
    parts: int = 0
    tensors: int = 0
    operators: int = 0
    dmlupload_operators: int = 0  # (run by dmlupload.exe, in its own process)
    mismatches: int = 0
    uploads: list[str] = field(default_factory=list)  # the measured uploads: size, Python's peak, the heap


TALLY = Tally()


class IdentityDesc(ctypes.Structure):
    """DML_ELEMENT_WISE_IDENTITY_OPERATOR_DESC (DirectML.h): input, output, optional scale-bias."""

    _fields_ = [("InputTensor", ctypes.c_void_p), ("OutputTensor", ctypes.c_void_p), ("ScaleBias", ctypes.c_void_p)]


def identity(device: dmlbridge.gpu.Device, tensor: dmlbridge.PreparedTensor,
             binding: dmlbridge.DML_BUFFER_BINDING) -> np.ndarray:
    """DirectML's IDENTITY of a bound tensor into a packed output of its own type: the output's bytes."""
    desc = tensor.as_ctypes_tensor_desc()
    packed = dmlbridge.prepare(np.zeros(tensor.sizes, tensor.dml_type.numpy())).as_ctypes_tensor_desc()
    op = IdentityDesc(ctypes.addressof(desc), ctypes.addressof(packed), None)
    out = dmlbridge.gpu.run_operator(device, dmlbridge.gpu.DML_OPERATOR_DESC(1, ctypes.addressof(op)), [binding],
                                     [packed.buffer_desc.TotalTensorSizeInBytes])
    TALLY.operators += 1
    return out[0]


def known_answer_check(device: dmlbridge.gpu.Device) -> None:
    """Fail unless the device copies and computes the known answers (see the module docstring)."""
    expected = struct.pack("<16I", *KNOWN_BITS)
    tensor = dmlbridge.prepare(np.frombuffer(expected, np.float32).reshape(1, 1, 4, 4))
    bits = dmlbridge.prepare(np.frombuffer(expected, np.uint32).reshape(1, 1, 4, 4))  # (the same bytes, as UINT32)
    with dmlbridge.gpu.upload_tensors([tensor], device) as uploaded:
        copied = uploaded.read_bytes(0).tobytes()
        assert copied == expected, f"known answer: the bytes read back are {copied.hex()}, not {expected.hex()}"
        computed = identity(device, bits, uploaded.binding(0)).tobytes()
        assert computed == expected, f"known answer: IDENTITY gave {computed.hex()}, not {expected.hex()}"
    TALLY.known_answers += 1


def unavailable(why: str) -> None:
    message = f"GPU suite not run: {why}"
    if os.environ.get("DMLBRIDGE_DIRECTML") == "required":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def windows() -> None:
    """Skips off Windows (one line for the whole suite)."""
    if sys.platform != "win32":
        pytest.skip(NEEDS_WINDOWS)


@pytest.fixture(scope="session")
def device(windows: None) -> Iterator[dmlbridge.gpu.Device]:
    """The session's device, after its known-answer check."""
    try:
        made = dmlbridge.gpu.create_device()
    except dmlbridge.GpuError as exc:
        unavailable(f"no DirectML device: {exc}")
    try:
        known_answer_check(made)
        yield made
    finally:
        made.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Off Windows, every skip of the suite is reported at one place, so that ``-ra`` shows it as one line."""
    report: pytest.TestReport = yield
    if report.skipped and isinstance(report.longrepr, tuple) and report.longrepr[2].endswith(NEEDS_WINDOWS):
        report.longrepr = ("tests/gpu/conftest.py", 1, report.longrepr[2])
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TALLY.known_answers == 0:
        return
    compared = TALLY.entries + TALLY.parts + TALLY.tensors
    terminalreporter.write_line(
        f"GPU: {TALLY.known_answers} known-answer check(s) passed; {TALLY.operators + TALLY.dmlupload_operators} "
        f"operators run ({TALLY.operators} by dmlbridge.gpu, {TALLY.dmlupload_operators} by dmlupload); "
        f"{compared} outputs compared ({TALLY.entries} plan entries, {TALLY.parts} quantized parts, "
        f"{TALLY.tensors} prepared tensors read back from the GPU); {TALLY.mismatches} mismatches"
        + "".join(f"; {upload}" for upload in TALLY.uploads))
