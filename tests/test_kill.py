"""convert_model killed with SIGKILL at random moments, in a child process.

A killed process cannot clean up, so what must hold is this: after every kill, PREFIX.bin and PREFIX.json are
each absent, the complete previous version or the complete new version (byte for byte), never partial; the one
mixed state a kill can leave (the new .bin beside the previous .json, killed between the two renames) is refused
by ``load_plan`` through the manifest's ``bin_fingerprint`` even though both .bin files have the same size; the
killed writer's temporary files carry its pid and are removed by the next conversion into the same prefix.

The child prints a marker at each step of the conversion (each constant, the fingerprint, every rename, link and
unlink). "Step" trials make it wait at each marker and kill it exactly at a randomly chosen one, or a random few
milliseconds after letting it go on; "free" trials let it run and kill it after a random delay.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import external_data_helper, helper, numpy_helper

from dmlbridge import convert_model, load_plan
from dmlbridge.commit import TEMP_SUFFIX
from dmlbridge.errors import ManifestError

pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGKILL and the stale-file cleanup are POSIX")

# DMLBRIDGE_KILL_TRIALS (e.g. 300) and DMLBRIDGE_KILL_SEED run a longer or different kill session.
STEP_TRIALS = max(2, int(os.environ.get("DMLBRIDGE_KILL_TRIALS") or 30) * 2 // 3)
FREE_TRIALS = max(0, int(os.environ.get("DMLBRIDGE_KILL_TRIALS") or 30) - STEP_TRIALS)
ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import os, sys
    import dmlbridge.commit as commit
    import dmlbridge.convert as convert
    import dmlbridge.image_writer as image_writer

    model, prefix, mode = sys.argv[1:4]
    step = mode == "step"

    def mark(name):
        sys.stdout.write(name + "\\n")
        sys.stdout.flush()
        if step and sys.stdin.readline() != "go\\n":
            os._exit(9)

    def hook(module, name, label):
        real = getattr(module, name)
        def hooked(*args, **kwargs):
            mark(label(*args))
            result = real(*args, **kwargs)
            mark("after " + label(*args))
            return result
        setattr(module, name, hooked)

    base = os.path.basename
    # Constants the byte scan read go by runs to _place_spans; every other one is offered to _write_stored.
    hook(image_writer, "_place_spans", lambda writer, offsets, first, stop, *rest: "spans %d" % (stop - first))
    hook(image_writer, "_write_stored", lambda writer, constant, *rest: "entry " + constant.key)
    hook(convert, "bin_fingerprint", lambda path, *rest: "fingerprint")
    hook(convert, "temp_file", lambda directory, target, temps: "temp " + base(target))
    hook(convert, "fsync_directory", lambda directory: "fsync-dir")
    hook(os, "replace", lambda src, dst: "replace " + base(dst))
    hook(os, "link", lambda src, dst: "link " + base(src))
    # A removed leftover of an earlier (killed) run is "stale"; this run's own files are "own".
    own = ".p%d-" % os.getpid()
    hook(os, "unlink", lambda path: "unlink " + ("own" if own in base(path) else "stale"))
    mark("start")
    convert.convert_model(model, prefix, progress=False)
    mark("done")
    """
)

TEMP_NAME = re.compile(r"^\.out\.(bin|json)\.p([0-9]+)-h[0-9a-f]{8}\.[A-Za-z0-9_]+" + re.escape(TEMP_SUFFIX) + "$")


def _write_model(directory: Path, name: str, seed: int) -> Path:
    """A model with ~25 MB of external data and some inline constants; every seed gives the same layout (so the
    .bin of two seeds has the same size) but different values."""
    rng = np.random.default_rng(seed)
    inits = []
    blob = bytearray()
    for i in range(36):
        if i % 6 == 5:
            array: np.ndarray = rng.standard_normal(320 * 1024).astype(ml_dtypes.bfloat16)  # widened: CPU work
        elif i % 6 == 4:
            array = rng.integers(-8, 8, 640 * 1024).astype(ml_dtypes.int4)  # packed into nibbles
        else:
            array = rng.standard_normal(160 * 1024).astype(np.float32)
        tensor = numpy_helper.from_array(array, f"w{i:02d}")
        raw = tensor.raw_data
        external_data_helper.set_external_data(tensor, f"{name}.data", offset=len(blob), length=len(raw))
        tensor.ClearField("raw_data")
        blob += raw + bytes(-len(raw) % 4096)
        inits.append(tensor)
    inits.append(numpy_helper.from_array(rng.standard_normal((3, 5)).astype(np.float16), "inline_h"))
    inits.append(numpy_helper.from_array(rng.integers(-9, 9, 7).astype(np.int64), "inline_i"))
    nodes = [helper.make_node("Constant", [], ["k"], value_floats=rng.standard_normal(4).tolist())]
    (directory / f"{name}.data").write_bytes(bytes(blob))
    path = directory / f"{name}.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [], [], inits)), path)
    return path


class Versions:
    """The previous (model A) and new (model B) outputs, as a completed conversion writes them."""

    def __init__(self, directory: Path) -> None:
        self.a = _write_model(directory, "a", 1)
        self.b = _write_model(directory, "b", 2)
        ref = directory / "ref"
        ref.mkdir()
        convert_model(self.a, ref / "a")
        convert_model(self.b, ref / "b")
        self.files = {
            (version, ext): (ref / f"{version}.{ext}").read_bytes() for version in "ab" for ext in ("bin", "json")
        }
        assert len(self.files["a", "bin"]) == len(self.files["b", "bin"]) > 20 << 20  # same size, ~25 MB
        assert self.files["a", "bin"] != self.files["b", "bin"]

    def state(self, path: Path) -> str:
        """'-' (absent), 'a', 'b' or 'partial' for one output file."""
        if not path.exists():
            return "-"
        data = path.read_bytes()
        ext = path.suffix[1:]
        return next((v for v in "ab" if data == self.files[v, ext]), "partial")


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> Versions:
    return Versions(tmp_path_factory.mktemp("kill"))


def _env() -> dict[str, str]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _start(model: Path, prefix: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(model), str(prefix), mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )


def _readline(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        assert child.stderr is not None
        child.wait(30)
        pytest.fail(f"the child ended early (exit {child.returncode}): {child.stderr.read()[-2000:]}")
    return line.rstrip("\n")


def _go(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.write("go\n")
    child.stdin.flush()


def _kill(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    for stream in (child.stdin, child.stdout, child.stderr):
        if stream is not None:
            stream.close()


def _stale(marker: str) -> bool:
    """Markers of removing an earlier run's leftovers: how many there are depends on the earlier kills."""
    return marker.endswith(" stale")


def _markers(versions: Versions, directory: Path, previous: str) -> list[str]:
    """Every marker of a conversion over the given previous outputs (step mode), leftovers aside."""
    _set_previous(versions, directory, previous)
    child = _start(versions.b, directory / "out", "step")
    markers = []
    while True:
        marker = _readline(child)
        if not _stale(marker):
            markers.append(marker)
        _go(child)
        if marker == "done":
            break
    assert child.wait(60) == 0
    return markers


def _duration(versions: Versions, directory: Path) -> float:
    """How long a free run takes, from its "start" marker to "done"."""
    _set_previous(versions, directory, "a")
    child = _start(versions.b, directory / "out", "free")
    assert _readline(child) == "start"
    began = time.perf_counter()
    while _readline(child) != "done":
        pass
    duration = time.perf_counter() - began
    assert child.wait(60) == 0
    return duration


def _set_previous(versions: Versions, directory: Path, previous: str) -> None:
    for ext in ("bin", "json"):
        target = directory / f"out.{ext}"
        if previous == "-":
            target.unlink(missing_ok=True)
        else:
            target.write_bytes(versions.files[previous, ext])


def _check_after_kill(versions: Versions, directory: Path, previous: str, dead: set[int]) -> str:
    """The outputs are whole versions; a mixed pair is refused by load_plan; temporary files are recognisable."""
    bin_state = versions.state(directory / "out.bin")
    json_state = versions.state(directory / "out.json")
    pair = bin_state + json_state
    allowed = {"-": {"--", "b-", "bb"}, "a": {"aa", "ba", "bb"}}[previous]
    assert pair in allowed, f"after a kill over {previous!r}: .bin is {bin_state}, .json is {json_state}"
    if pair in ("aa", "bb"):
        plan = load_plan(directory / "out.json")
        assert plan.total_size == len(versions.files[pair[0], "bin"])
    elif pair == "ba":
        # Killed between the two renames: the new .bin (same size) beside the previous manifest.
        with pytest.raises(ManifestError, match="bin_fingerprint"):
            load_plan(directory / "out.json")
    elif pair == "b-":
        with pytest.raises(ManifestError, match="cannot read manifest"):
            load_plan(directory / "out.json")
    for name in os.listdir(directory):
        if name in ("out.bin", "out.json"):
            continue
        match = TEMP_NAME.match(name)
        assert match is not None, f"unexpected file {name!r}"
        assert int(match.group(2)) in dead, f"{name!r} was not left by a killed child"
    return pair


def test_sigkill_at_random_moments_never_leaves_partial_outputs(versions: Versions, tmp_path: Path) -> None:
    seed = int(os.environ.get("DMLBRIDGE_KILL_SEED", "20240611"))
    rng = random.Random(seed)
    directory = tmp_path / "out_dir"
    directory.mkdir()
    markers = {previous: _markers(versions, directory, previous) for previous in "-a"}
    duration = _duration(versions, directory)
    between = markers["a"].index("after replace out.bin")  # the window between the two renames
    assert markers["a"][between + 1] == "replace out.json"
    assert "link out.bin" in markers["a"] and "link out.bin" not in markers["-"]  # the backup of the previous .bin
    offered = sum(m.startswith("entry ") for m in markers["a"])
    spans = sum(int(m.split()[1]) for m in markers["a"] if m.startswith("spans "))
    assert offered + spans == 39 and spans > 0 and offered > 0 and duration > 0

    dead: set[int] = set()
    outcomes: Counter[str] = Counter()
    where: Counter[str] = Counter()
    for trial in range(STEP_TRIALS + FREE_TRIALS):
        previous = "a" if trial < 2 else rng.choice("-aa")
        _set_previous(versions, directory, previous)
        if trial < STEP_TRIALS:
            # Two trials kill exactly between the renames; the rest anywhere, sometimes a moment after a marker.
            expected = markers[previous]
            stop = between if trial < 2 else rng.randrange(len(expected) - 1)
            delay = 0.0 if trial < 2 or rng.random() < 0.5 else rng.uniform(0, 0.02)
            child = _start(versions.b, directory / "out", "step")
            index = 0
            while True:
                marker = _readline(child)
                if _stale(marker):
                    _go(child)
                    continue
                assert marker == expected[index]
                if index == stop:
                    break
                _go(child)
                index += 1
            label = re.sub(r"entry \S+", "entry", expected[stop]) + (" +delay" if delay else "")
            if delay:
                # Let it run on its own from here, then kill it.
                _go(child)
                _run_freely(child, delay)
        else:
            child = _start(versions.b, directory / "out", "free")
            assert _readline(child) == "start"
            delay = rng.uniform(0, duration * 1.05)
            time.sleep(delay)
            label = f"free {delay / duration:.0%}"
        finished = child.poll() == 0  # a free run may finish before its kill
        _kill(child)  # (Popen signals only a process that has not ended)
        if finished:
            outcomes["finished"] += 1
        else:
            dead.add(child.pid)
            where[label] += 1
        outcomes[_check_after_kill(versions, directory, previous, dead)] += 1

    kills = sum(where.values())
    print(f"\n{kills} kills, seed {seed}: outcomes {dict(outcomes)}; where {dict(where)}")
    assert kills >= min(20, STEP_TRIALS)
    assert outcomes["ba"] >= 2  # the mixed pair was produced, and refused
    assert sum(n for label, n in where.items() if "entry" in label) >= 3  # some kills mid-writing

    # The next conversion into the prefix removes every temporary file the killed children left, and completes.
    convert_model(versions.b, directory / "out")
    assert sorted(os.listdir(directory)) == ["out.bin", "out.json"]
    assert versions.state(directory / "out.bin") == versions.state(directory / "out.json") == "b"


def _run_freely(child: subprocess.Popen[str], delay: float) -> None:
    """Answer every further marker with "go" for ``delay`` seconds (the child runs on, freely), then return."""
    assert child.stdout is not None and child.stdin is not None
    os.set_blocking(child.stdout.fileno(), False)
    deadline = time.perf_counter() + delay
    buffered = ""
    while time.perf_counter() < deadline and child.poll() is None:
        try:
            chunk = os.read(child.stdout.fileno(), 4096).decode()
        except BlockingIOError:
            chunk = ""
        buffered += chunk
        while "\n" in buffered:
            line, buffered = buffered.split("\n", 1)
            try:
                _go(child)
            except BrokenPipeError:
                return
            if line == "done":
                return
        if not chunk:
            time.sleep(0.0005)


# --- the pieces, one at a time ---------------------------------------------------------------------------------


def test_same_size_bin_of_another_conversion_is_refused(versions: Versions, tmp_path: Path) -> None:
    (tmp_path / "out.json").write_bytes(versions.files["a", "json"])
    (tmp_path / "out.bin").write_bytes(versions.files["b", "bin"])
    with pytest.raises(ManifestError, match="bin_fingerprint"):
        load_plan(tmp_path / "out.json")
    (tmp_path / "out.bin").write_bytes(versions.files["a", "bin"])
    assert load_plan(tmp_path / "out.json").total_size == len(versions.files["a", "bin"])


def test_fingerprint_reads_samples_not_the_whole_file(tmp_path: Path) -> None:
    """The always-on check costs a few reads whatever the size: a 64 GiB (sparse) .bin is fingerprinted at once,
    and a changed byte that no sample covers is left to the opt-in full SHA-256 (checksum=True, verify=True)."""
    from dmlbridge.fingerprint import bin_fingerprint

    big = tmp_path / "big.bin"
    with open(big, "wb") as file:
        file.truncate(64 << 30)
    start = time.perf_counter()
    bin_fingerprint(str(big), 64 << 30, [], [])
    assert time.perf_counter() - start < 2.0

    array = np.arange(1 << 20, dtype=np.float32)  # 4 MiB: most of it is not sampled
    m = helper.make_model(helper.make_graph([], "g", [], [], [numpy_helper.from_array(array, "w")]))
    convert_model(m, tmp_path / "out", checksum=True)
    data = bytearray((tmp_path / "out.bin").read_bytes())
    data[len(data) // 2 + 1000] ^= 1  # between two of the evenly spaced samples
    (tmp_path / "out.bin").write_bytes(bytes(data))
    load_plan(tmp_path / "out.json")
    with pytest.raises(ManifestError, match="SHA-256"):
        load_plan(tmp_path / "out.json", verify=True)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_next_conversion_removes_only_dead_writers_temporary_files(tmp_path: Path) -> None:
    from dmlbridge.commit import owner_tag

    host = owner_tag().split("-h")[1]
    other_host = "0" * 8 if host != "0" * 8 else "1" * 8
    dead, alive = _dead_pid(), os.getppid()
    names = {
        f".out.bin.p{dead}-h{host}.abc123{TEMP_SUFFIX}": False,  # dead writer, this host: removed
        f".out.json.p{dead}-h{host}.x_9{TEMP_SUFFIX}": False,
        f".out.bin.p{alive}-h{host}.abc123{TEMP_SUFFIX}": True,  # its writer still runs
        f".out.bin.p{os.getpid()}-h{host}.abc123{TEMP_SUFFIX}": True,  # this very process
        f".out.bin.p{dead}-h{other_host}.abc123{TEMP_SUFFIX}": True,  # another machine (network share)
        f".other.bin.p{dead}-h{host}.abc123{TEMP_SUFFIX}": True,  # another prefix
        f".out.bin.abc123{TEMP_SUFFIX}": True,  # not a name this version makes
        f".out.binx.p{dead}-h{host}.abc123{TEMP_SUFFIX}": True,
        "out.bin.notes": True,
    }
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    os.mkdir(tmp_path / f".out.json.p{dead}-h{host}.dir{TEMP_SUFFIX}")  # not a regular file: left alone
    m = helper.make_model(helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.ones(3), "w")]))
    convert_model(m, tmp_path / "out")
    left = set(os.listdir(tmp_path))
    for name, kept in names.items():
        assert (name in left) == kept, name
    assert {"out.bin", "out.json", f".out.json.p{dead}-h{host}.dir{TEMP_SUFFIX}"} <= left


def test_temporary_files_name_their_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real_replace = os.replace

    def spying(src: Any, dst: Any) -> None:
        seen.append(os.path.basename(src))
        real_replace(src, dst)

    m = helper.make_model(helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.ones(3), "w")]))
    convert_model(m, tmp_path / "out")
    monkeypatch.setattr(os, "replace", spying)
    convert_model(m, tmp_path / "out")  # over previous outputs: a backup link is made too
    monkeypatch.undo()
    assert len(seen) == 2
    for name in seen:
        match = TEMP_NAME.match(name)
        assert match is not None and int(match.group(2)) == os.getpid(), name
    assert sorted(os.listdir(tmp_path)) == ["out.bin", "out.json"]
