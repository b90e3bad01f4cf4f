"""The DirectML suite's runtime: Microsoft's DirectML, driven through the upload program of
``native/`` (``dmlupload``), reads what dmlbridge wrote.

Where it runs:
- Linux: DirectML 1.15 under Wine on the CPU, as ``tools/directml/setup.sh`` installs it (``$DIRECTML_WINE``,
  default ``~/.cache/dmlbridge-directml``), with mingw-w64 to build the program. One Xvfb and one wineserver serve the
  whole session; another session may use the same prefix at the same time.
- Windows: ``DMLBRIDGE_DMLUPLOAD`` names a ``dmlupload.exe`` built as ``native/README.md`` says; it loads the
  ``DirectML.dll`` beside it, else the system's.
Elsewhere, or with a piece missing, every test here is skipped with one line saying what is missing;
``DMLBRIDGE_DIRECTML=required`` (CI) makes that a failure instead.

Every run of the program starts with its known-answer self-test; a run whose self-test fails fails its tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "tools" / "directml"
WINE = Path("/usr/lib/wine/wine64")
WINESERVER = Path("/usr/lib/wine/wineserver")
README_HINT = "see 'The DirectML suite' in README.md"
SERVER_LINGERS = 5  # seconds the session's wineserver waits for the next program before it exits

# The output type the program reads each DML type into (native/README.md): exact for every value.
OUTPUT_TYPE = {
    "FLOAT32": "FLOAT32", "FLOAT64": "FLOAT64", "UINT32": "UINT32", "INT32": "INT32", "UINT64": "UINT64",
    "INT64": "INT64", "FLOAT16": "FLOAT32", "UINT8": "FLOAT32", "INT8": "FLOAT32", "UINT16": "FLOAT32",
    "INT16": "FLOAT32", "UINT4": "FLOAT32", "INT4": "FLOAT32",
}
NUMPY = {"FLOAT32": np.float32, "FLOAT64": np.float64, "UINT32": np.uint32, "INT32": np.int32,
         "UINT64": np.uint64, "INT64": np.int64, "FLOAT16": np.float16}


@dataclass
class Result:
    """One output line of the program: what ran, its HRESULT and its output bytes; for a FLOAT32 or FLOAT64 read,
    ``bits`` is the read of the same bytes as UINT32 or UINT64 (a plain copy on every GPU)."""

    kind: str  # read, bits, consumer, dequantize, gemm
    name: str
    operator: str
    hresult: str
    out_type: str
    data: bytes | None
    bits: Result | None = None

    @property
    def ok(self) -> bool:
        return self.hresult == "0x00000000" and self.data is not None

    def values(self) -> np.ndarray:
        assert self.data is not None, (self.name, self.hresult)
        return np.frombuffer(self.data, NUMPY[self.out_type])


@dataclass
class Run:
    stdout: str
    device_flags: str
    results: dict[str, Result] = field(default_factory=dict)  # by NAME: a consumer's is KEY#INDEX
    probes: dict[str, int] = field(default_factory=dict)
    on_cpu: set[str] = field(default_factory=set)  # the tensors read on the CPU, bound nowhere
    undecided: set[str] = field(default_factory=set)  # the consumers without a desc (DESC "-")


@dataclass
class Attempt:
    """One run of the program as it ended, judged by nobody: its exit status, what it printed, and where its
    ``--dump`` file would be."""

    returncode: int
    stdout: str
    stderr: str
    dump: Path


@dataclass
class Tally:
    """What the session's DirectML runs did, printed at the end of the test run."""

    executed: int = 0
    compared: int = 0
    mismatches: int = 0
    refused: int = 0
    flushed: int = 0
    quieted: int = 0  # NaNs whose payload a float-typed read changed (their bits reads are exact)
    probed: int = 0
    probe_equal: int = 0  # probes whose smallest accepted size equals calc_buffer_tensor_size
    self_tests: int = 0
    runs: int = 0
    groups: dict[str, int] = field(default_factory=dict)

    def count(self, group: str, compared: int) -> None:
        self.compared += compared
        self.groups[group] = self.groups.get(group, 0) + compared


TALLY = Tally()


class DirectML:
    """Runs the upload program on binding lists, in the session's Xvfb and wineserver (or natively on Windows)."""

    def __init__(self, exe: Path, env: dict[str, str] | None, workdir: Path) -> None:
        self.exe, self.env, self.workdir = exe, env, workdir
        self._count = 0

    def attempt(self, bindings: str | Path, args: Sequence[str] = (), directory: Path | None = None,
                faults: Sequence[str] = ()) -> Attempt:
        """Run the program on ``bindings`` (a path, or the text of a list whose files are in ``directory``) and
        return how it ended, asserting nothing; ``faults`` are the test faults it injects (DMLUPLOAD_FAULTS,
        native/README.md)."""
        self._count += 1
        work = self.workdir / f"run{self._count}"
        work.mkdir()
        if isinstance(bindings, str):
            path = work / "list.bindings"
            path.write_text(bindings, newline="\n")  # (the list's lines end in \n alone)
        else:
            path = bindings
        dump = work / "dump.bin"
        command = [str(self.exe), str(path), "--dump", str(dump), *args]
        if directory is not None:
            command += ["--dir", str(directory)]
        if self.env is not None:
            command = [str(WINE), *command]
        env = dict(self.env if self.env is not None else os.environ)
        env.pop("DMLUPLOAD_FAULTS", None)
        if faults:
            env["DMLUPLOAD_FAULTS"] = ",".join(faults)
        # Files, not pipes: the Wine services the first program of a prefix starts inherit its standard streams
        # and outlive it, so reading a pipe to its end would wait for them.
        with open(work / "stdout", "wb") as out, open(work / "stderr", "wb") as err:
            returncode = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                        check=False).returncode
        return Attempt(returncode, (work / "stdout").read_text(errors="replace"),
                       (work / "stderr").read_text(errors="replace"), dump)

    def run(self, bindings: str | Path, args: Sequence[str] = (), directory: Path | None = None,
            counted: bool = True, faults: Sequence[str] = ()) -> Run:
        """Run the program on ``bindings`` as ``attempt`` does, and hold it to its self-test and exit status 0;
        ``counted=False`` for descs broken on purpose and injected faults (their refusals are not the suite's)."""
        ended = self.attempt(bindings, args, directory, faults)
        returncode, stdout, stderr, dump = ended.returncode, ended.stdout, ended.stderr, ended.dump
        TALLY.runs += 1
        assert "self-test ok" in stdout.splitlines(), (
            f"the program's known-answer self-test did not pass (exit {returncode}):\n{stdout[-3000:]}\n"
            f"{stderr[-3000:]}")
        TALLY.self_tests += 1
        assert returncode == 0, f"exit {returncode}:\n{stdout[-3000:]}\n{stderr[-3000:]}"
        raw = dump.read_bytes() if dump.exists() else b""
        run = Run(stdout, "")
        for line in stdout.splitlines():
            words = line.split()
            if words[:2] == ["device", "flags"]:
                run.device_flags = " ".join(words[2:])
            elif words and words[0] in ("read", "bits", "consumer", "dequantize", "gemm") and len(words) >= 7:
                _, name, operator, hresult, out_type, size, offset = words[:7]
                data = None
                if hresult == "0x00000000" and int(offset) >= 0:
                    data = raw[int(offset) : int(offset) + int(size)]
                    assert len(data) == int(size), line
                    TALLY.executed += counted
                else:
                    TALLY.refused += counted
                result = Result(words[0], name, operator, hresult, out_type, data)
                if words[0] == "bits":  # (right after its tensor's read line)
                    run.results[name].bits = result
                else:
                    run.results[name] = result
            elif words[:1] == ["cpu"]:
                run.on_cpu.add(words[1])
            elif words[:1] == ["consumer"] and words[2:] == ["undecided"]:
                run.undecided.add(words[1])
            elif words and words[0] == "probe":
                run.probes[words[1]] = int(words[3])
                TALLY.probed += 1
        return run


def _missing_on_linux() -> tuple[str | None, dict[str, str], Path, Path]:
    home = Path(os.environ.get("DIRECTML_WINE") or Path.home() / ".cache" / "dmlbridge-directml")
    include = Path(os.environ.get("DMLBRIDGE_DIRECTML_INCLUDE") or SETUP / "include")
    needs = [
        (home / "bin" / "DirectML.dll", "DirectML.dll (run tools/directml/setup.sh)"),
        (home / "prefix" / "system.reg", "the Wine prefix (run tools/directml/setup.sh)"),
        (WINE, "wine64"), (WINESERVER, "wineserver"), (include / "DirectML.h", "DirectML.h"),
    ]
    for path, what in needs:
        if not path.exists():
            return f"{what} not found at {path}", {}, home, include
    for tool in ("Xvfb", "x86_64-w64-mingw32-g++", "make"):
        if shutil.which(tool) is None:
            return f"{tool} not found", {}, home, include
    env = dict(os.environ, WINEPREFIX=str(home / "prefix"), WINEARCH="win64", WINEDEBUG="-all",
               VKD3D_DEBUG="none", WINEDLLOVERRIDES="d3d12=n;winedbg.exe=d",  # (a crash exits, not held by winedbg)
               VK_ICD_FILENAMES="/usr/share/vulkan/icd.d/lvp_icd.x86_64.json",
               DMLWINE_FORCE_TYPED_UAV_LOADS="1",  # FLOAT16/UINT16/INT16 readable (DIRECTML_FP16=1 in run.sh)
               XDG_RUNTIME_DIR=str(home / "xdg"))
    return None, env, home, include


def _unavailable(why: str) -> None:
    message = f"DirectML suite not run: {why}; {README_HINT}"
    if os.environ.get("DMLBRIDGE_DIRECTML") == "required":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def directml() -> Iterator[DirectML]:
    """The session's DirectML: the program built once, one Xvfb and one wineserver for every run."""
    workdir = Path(tempfile.mkdtemp(prefix="dmlbridge-directml-"))
    try:
        if sys.platform == "win32":
            exe = os.environ.get("DMLBRIDGE_DMLUPLOAD")
            if not exe or not Path(exe).exists():
                _unavailable("DMLBRIDGE_DMLUPLOAD does not name a built dmlupload.exe")
            yield DirectML(Path(str(exe)), None, workdir)
            return
        why, env, home, include = _missing_on_linux()
        if why is not None:
            _unavailable(why)
        build = subprocess.run(["make", "-s", "-C", str(REPO / "native"), f"O={workdir}",
                                f"DIRECTML_INCLUDE={include}"], capture_output=True, text=True, check=False)
        assert build.returncode == 0, f"native/ did not build:\n{build.stdout}\n{build.stderr}"
        exe = workdir / "dmlupload.exe"
        for dll in (home / "bin").glob("*.dll"):  # (Wine looks for a program's DLLs beside it)
            (workdir / dll.name).symlink_to(dll)
        Path(env["XDG_RUNTIME_DIR"]).mkdir(mode=0o700, exist_ok=True)
        read_fd, write_fd = os.pipe()
        xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "640x480x24", "-nolisten",
                                 "tcp"], pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(write_fd)
        with os.fdopen(read_fd) as display:
            number = display.readline().strip()
        assert number, "Xvfb did not start"
        env["DISPLAY"] = f":{number}"
        # A server that outlives each run by a few seconds, so that the next one starts quicker. Never ended with
        # `wineserver -k`: that ends every program of the prefix, another checkout's test runs among them, which
        # then exit with status 1 having printed nothing. (If another run's server has the prefix, this one exits
        # at once and the runs share that one.)
        server = subprocess.Popen([str(WINESERVER), f"-p{SERVER_LINGERS}", "-f"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            yield DirectML(exe, env, workdir)
        finally:
            try:
                server.wait(timeout=SERVER_LINGERS + 30)
            except subprocess.TimeoutExpired:
                pass  # (still serving another run's programs: it ends when they do)
            xvfb.terminate()
            xvfb.wait()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TALLY.runs == 0:
        return
    groups = ", ".join(f"{name} {count}" for name, count in sorted(TALLY.groups.items()))
    terminalreporter.write_line(
        f"DirectML: {TALLY.runs} runs, each after its known-answer self-test ({TALLY.self_tests} passed); "
        f"{TALLY.executed} operators executed, {TALLY.compared} outputs compared ({groups}), {TALLY.mismatches} "
        f"mismatches, {TALLY.refused} refused or not run, {TALLY.flushed} subnormals flushed and {TALLY.quieted} "
        f"NaN payloads changed by float-typed reads (allowed; the bits reads of FLOAT32 and FLOAT64 tensors are "
        f"exact); {TALLY.probed} "
        f"descs probed for their smallest size, {TALLY.probe_equal} of them at exactly calc_buffer_tensor_size"
    )
