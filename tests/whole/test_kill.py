"""convert_model killed with SIGKILL at random moments, in a child process.

A killed process cannot clean up, so what must hold is this: after every kill, ``PREFIX.json`` is absent, the
previous manifest or the new one, and ``load_plan`` reads it with exactly the buffer files of its own conversion,
whose bytes are byte for byte the previous image or the new one (the two conversions differ in one byte of one
tensor, so a mix of the two would show). The trials run with one buffer, and with several where the previous
conversion has more buffers than the new one, and fewer. Every other file left behind is recognisable (a buffer
file of a killed conversion, or of the previous one when the kill came while they were removed after the commit
point; a temporary manifest; the lock, held by no one), and ``dmlbridge.clean`` or the next conversion into the
prefix removes it. (Each trial's conversion starts beside the lock the killed one before it left.)

The child (tests/helpers/killed_conversion.py, forked from a fork server that has dmlbridge imported, so that a
trial costs milliseconds) sends a marker at each step of the conversion (each constant, the fingerprint, the
manifest's write, every fsync, the rename, every removal). "Step" trials make it wait at each marker and kill it
exactly at one: every step of the commit protocol once, then randomly chosen ones, sometimes a random few
milliseconds after letting it go on; "free" trials let it run and kill it after a random delay.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from budget import examples
from builders import model_of
from killed_conversion import convert_in_steps
from models import buffer_path, buffer_paths, outputs
from onnx import external_data_helper, helper, numpy_helper

from dmlbridge import clean, convert_model, load_plan
from dmlbridge.errors import ManifestError
from dmlbridge.system.locks import try_lock

pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGKILL trials from a fork server are POSIX")

# The random trials (a third of them "free"): DMLBRIDGE_EXAMPLES multiplies them (tests/helpers/budget.py) and
# DMLBRIDGE_KILL_SEED picks other moments.
TRIALS = examples(30)
STEP_TRIALS = max(2, TRIALS * 2 // 3)
FREE_TRIALS = max(0, TRIALS - STEP_TRIALS)

LEFTOVER = re.compile(r"^(out\.[0-9a-f]{16}\.[0-9]{5}\.bin|\.out\.json\.[0-9a-f]{16}\.dmlbridge-tmp|out\.lock)$")
ONE_BUFFER = 2 << 30
# The buffer limits of the previous conversion ("a") and the new one ("b"): one buffer each; seven buffers
# before four; four before seven (the ~3 MB image in 512 KiB or 1 MiB buffers).
LAYOUTS = {"one buffer": (ONE_BUFFER, ONE_BUFFER), "7 buffers to 4": (512 << 10, 1 << 20),
           "4 buffers to 7": (1 << 20, 512 << 10)}


def _write_model(directory: Path, name: str, seed: int, flip: bool = False) -> Path:
    """A model with ~3 MB of external data and some inline constants; ``flip`` changes one bit of one of its
    float32 tensors (the same layout and size, one byte apart)."""
    rng = np.random.default_rng(seed)
    inits = []
    blob = bytearray()
    for i in range(36):
        if i % 6 == 5:
            array: np.ndarray = rng.standard_normal(40 * 1024).astype(ml_dtypes.bfloat16)  # widened: CPU work
        elif i % 6 == 4:
            array = rng.integers(-8, 8, 80 * 1024).astype(ml_dtypes.int4)  # packed into nibbles
        else:
            array = rng.standard_normal(20 * 1024).astype(np.float32)
        if flip and i == 20:
            array = array.copy()
            array.view(np.uint8)[12345] ^= 0x10
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
    onnx.save(model_of(inits, nodes), path)
    return path


class Versions:
    """Two models whose upload images differ in one byte, and their outputs as a completed conversion writes
    them (each in a folder of its own, under the prefix ``out``)."""

    def __init__(self, directory: Path, limits: tuple[int, int]) -> None:
        self.a = _write_model(directory, "a", 1)
        self.b = _write_model(directory, "b", 1, flip=True)
        self.limits = dict(zip("ab", limits, strict=True))
        self.outputs = {}
        self.files: dict[str, dict[str, bytes]] = {}
        for version, model in (("a", self.a), ("b", self.b)):
            ref = directory / f"ref_{version}"
            ref.mkdir()
            convert_model(model, ref / "out", max_buffer_bytes=self.limits[version])
            self.outputs[version] = outputs(ref / "out")
            self.files[version] = {p.name: p.read_bytes() for p in ref.iterdir()}
            assert "out.lock" not in self.files[version]  # (removed as the conversion ended)
        image_a, image_b = (np.frombuffer(self.outputs[v][0], np.uint8) for v in "ab")
        assert image_a.size == image_b.size > 2 << 20  # the same size, ~3 MB
        assert np.count_nonzero(image_a != image_b) == 1  # one byte apart

    def state(self, directory: Path) -> str:
        """'-' (no manifest), 'a' or 'b': the whole conversion that load_plan reads in ``directory``; anything
        else fails the test."""
        if not (directory / "out.json").exists():
            return "-"
        plan = load_plan(directory / "out.json")
        found = outputs(directory / "out")
        assert [Path(b.path) for b in plan.buffers] == buffer_paths(directory / "out")
        version = next((v for v in "ab" if found == self.outputs[v]), None)
        assert version is not None, "the manifest and its buffer file are not one whole conversion"
        return version


@pytest.fixture(scope="module", params=list(LAYOUTS))
def versions(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Versions:
    return Versions(tmp_path_factory.mktemp("kill"), LAYOUTS[request.param])


# The children are forked from a fork server that has imported the child's module (and dmlbridge with it): a
# trial starts in milliseconds, not in the second an interpreter takes to import numpy and onnx.
FORKS = multiprocessing.get_context("forkserver" if os.name == "posix" else "spawn")  # (skipped off POSIX)
if os.name == "posix":
    FORKS.set_forkserver_preload(["killed_conversion"])


@pytest.fixture(scope="module", autouse=True)
def _fork_server() -> None:
    """The fork server, started once for the module: it imports the child's module from tests/helpers (its path
    given in PYTHONPATH: the fork server does not take this process's sys.path), with numpy on one thread."""
    helpers = Path(convert_in_steps.__code__.co_filename).parent
    with pytest.MonkeyPatch.context() as patched:
        patched.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(helpers), *sys.path])))
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            patched.setenv(name, "1")
        multiprocessing.forkserver.ensure_running()


class Child:
    """The new conversion ("b") in a child process: its markers read one at a time, told to go on, killed."""

    def __init__(self, versions: Versions, prefix: Path, mode: str) -> None:
        self.conn, theirs = FORKS.Pipe()
        previous = frozenset(name for name in versions.files["a"] if name.endswith(".bin"))
        self.process = FORKS.Process(target=convert_in_steps, args=(theirs, str(versions.b), str(prefix), mode,
                                                                    versions.limits["b"], previous))
        self.process.start()
        theirs.close()

    def readline(self) -> str:
        """The next marker (the test fails if the child ends or fails without one)."""
        try:
            if not self.conn.poll(600):
                pytest.fail("the child sent no marker for 600 s")
            marker = str(self.conn.recv())
        except EOFError:
            self.process.join(30)
            pytest.fail(f"the child ended early (exit {self.process.exitcode})")
        if marker.startswith("error in the child"):
            pytest.fail(marker)
        return marker

    def go(self) -> None:
        self.conn.send("go")

    def poll(self) -> int | None:
        """Its exit status; None while it runs."""
        return self.process.exitcode

    def wait(self, timeout: float) -> int | None:
        self.process.join(timeout)
        return self.process.exitcode

    def kill(self) -> None:
        """SIGKILL (once it has ended, nothing), then its pipe closed."""
        self.process.kill()
        self.process.join(30)
        self.conn.close()


def _stale(marker: str) -> bool:
    """Markers of removing leftovers and the previous buffer: how many there are depends on the earlier kills."""
    return marker.endswith(" stale")


def _markers(versions: Versions, directory: Path, previous: str) -> list[str]:
    """Every marker of a conversion over the given previous outputs (step mode), removals aside."""
    _set_previous(versions, directory, previous)
    child = Child(versions, directory / "out", "step")
    markers = []
    while True:
        marker = child.readline()
        if not _stale(marker):
            markers.append(marker)
        child.go()
        if marker == "done":
            break
    assert child.wait(60) == 0
    child.kill()
    return markers


def _duration(versions: Versions, directory: Path) -> float:
    """How long a free run takes, from its "start" marker to "done"."""
    _set_previous(versions, directory, "a")
    child = Child(versions, directory / "out", "free")
    assert child.readline() == "start"
    began = time.perf_counter()
    while child.readline() != "done":
        pass
    duration = time.perf_counter() - began
    assert child.wait(60) == 0
    child.kill()
    return duration


def _set_previous(versions: Versions, directory: Path, previous: str) -> None:
    """The outputs of a completed conversion of ``previous`` ('-': none), beside whatever killed runs left."""
    (directory / "out.json").unlink(missing_ok=True)
    for name in os.listdir(directory):
        if any(name in files for files in versions.files.values()):
            (directory / name).unlink()
    if previous != "-":
        for name, data in versions.files[previous].items():
            (directory / name).write_bytes(data)


def _check_after_kill(versions: Versions, directory: Path, previous: str) -> str:
    """One whole conversion, previous or new; every other file a recognisable leftover."""
    state = versions.state(directory)
    allowed = {"-": {"-", "b"}, "a": {"a", "b"}}[previous]
    assert state in allowed, f"after a kill over {previous!r}: {state}"
    current = {"out.json"} | ({p.name for p in buffer_paths(directory / "out")} if state != "-" else set())
    for name in set(os.listdir(directory)) - current:
        assert LEFTOVER.match(name), f"unexpected file {name!r}"
    if (directory / "out.lock").exists():  # (a stale lock: no one holds it, so the next conversion takes it)
        fd = os.open(directory / "out.lock", os.O_RDWR)
        try:
            assert try_lock(fd)
        finally:
            os.close(fd)
    return state


def test_sigkill_at_random_moments_leaves_one_whole_conversion(versions: Versions, tmp_path: Path) -> None:
    seed = int(os.environ.get("DMLBRIDGE_KILL_SEED", "20240611"))
    rng = random.Random(seed)
    one_buffer = versions.limits == {"a": ONE_BUFFER, "b": ONE_BUFFER}
    # (Several buffers: the commit protocol swept whole, and a third of the random trials.)
    step_trials, free_trials = (STEP_TRIALS, FREE_TRIALS) if one_buffer else (STEP_TRIALS // 3, FREE_TRIALS // 3)
    directory = tmp_path / "out_dir"
    directory.mkdir()
    markers = {previous: _markers(versions, directory, previous) for previous in "-a"}
    duration = _duration(versions, directory)
    commit_point = markers["a"].index("replace out.json")  # the one step that publishes the conversion
    assert [m for m in markers["a"] if m.startswith("replace")] == ["replace out.json"]
    removed = [i for i, m in enumerate(markers["a"]) if m.startswith("remove ")]  # then a's buffers, each
    assert len(removed) == len(versions.files["a"]) - 1 and min(removed) > commit_point
    assert not any(m.startswith("remove ") for m in markers["-"])
    offered = sum(m.startswith("entry ") for m in markers["a"])
    spans = sum(int(m.split()[1]) for m in markers["a"] if m.startswith("spans "))
    assert offered + spans == 39 and spans > 0 and offered > 0 and duration > 0
    last_fingerprint = len(markers["a"]) - 1 - markers["a"][::-1].index("fingerprint")  # (of the last buffer)
    assert markers["a"].count("fingerprint") == len(versions.files["b"]) - 1  # (one per buffer file)
    assert last_fingerprint < markers["a"].index("write manifest") < commit_point

    outcomes: Counter[str] = Counter()
    where: Counter[str] = Counter()
    held = 0  # trials killed while waiting at a marker (the others may finish before their kill)
    # Every step of the protocol once (from the fingerprint of the last buffer to the end, over previous
    # outputs), then random ones.
    protocol = list(range(last_fingerprint, len(markers["a"]) - 1))
    for trial in range(len(protocol) + step_trials + free_trials):
        previous = "a" if trial < len(protocol) else rng.choice("-aa")
        _set_previous(versions, directory, previous)
        if trial < len(protocol) + step_trials:
            expected = markers[previous]
            swept = trial < len(protocol)
            stop = protocol[trial] if swept else rng.randrange(len(expected) - 1)
            delay = 0.0 if swept or rng.random() < 0.5 else rng.uniform(0, 0.02)
            child = Child(versions, directory / "out", "step")
            index = 0
            while True:
                marker = child.readline()
                if _stale(marker):
                    child.go()
                    continue
                assert marker == expected[index]
                if index == stop:
                    break
                child.go()
                index += 1
            label = re.sub(r"entry \S+", "entry", expected[stop]) + (" +delay" if delay else "")
            if delay:
                child.go()  # let it run on its own from here, then kill it
                _run_freely(child, delay)
        else:
            child = Child(versions, directory / "out", "free")
            assert child.readline() == "start"
            delay = rng.uniform(0, duration * 1.05)
            time.sleep(delay)
            label = f"free {delay / duration:.0%}"
        waiting = trial < len(protocol) + step_trials and not delay  # (at a marker, for its "go")
        finished = child.poll() == 0  # a run let go may finish before its kill
        child.kill()
        assert not (waiting and finished)
        held += waiting
        if finished:
            outcomes["finished"] += 1
        else:
            where[label] += 1
        outcomes[f"{previous}->{_check_after_kill(versions, directory, previous)}"] += 1

    kills = sum(where.values())
    print(f"\n{kills} kills, seed {seed}: outcomes {dict(outcomes)}; where {dict(where)}")
    assert kills >= held >= len(protocol)
    assert outcomes["a->a"] >= 2 and outcomes["a->b"] >= 2  # killed before and after the commit point
    assert sum(n for label, n in where.items() if "entry" in label) >= (3 if one_buffer else 1)  # mid-writing

    # dmlbridge.clean removes every file the killed children left and leaves the conversion in place; then the
    # next conversion into the prefix completes, and the one after, back to the previous layout, removes the
    # files of this one: the folder holds one conversion, nothing hidden.
    state = versions.state(directory)
    kept = {"out.json", *(p.name for p in buffer_paths(directory / "out"))} if state != "-" else set()
    leftovers = sorted(str(directory / name) for name in set(os.listdir(directory)) - kept)
    assert all(LEFTOVER.match(os.path.basename(path)) for path in leftovers)
    assert clean(directory / "out").removed == tuple(leftovers)
    assert versions.state(directory) == state and set(os.listdir(directory)) == kept
    convert_model(versions.b, directory / "out", max_buffer_bytes=versions.limits["b"])
    assert versions.state(directory) == "b"
    names = ["out.json", *(p.name for p in buffer_paths(directory / "out"))]
    assert sorted(os.listdir(directory)) == sorted(names) and len(names) == len(versions.files["b"])
    convert_model(versions.a, directory / "out", max_buffer_bytes=versions.limits["a"])
    assert versions.state(directory) == "a"
    names = ["out.json", *(p.name for p in buffer_paths(directory / "out"))]
    assert sorted(os.listdir(directory)) == sorted(names) and len(names) == len(versions.files["a"])


def _run_freely(child: Child, delay: float) -> None:
    """Answer every further marker with "go" for ``delay`` seconds (the child runs on, freely), then return."""
    deadline = time.perf_counter() + delay
    while time.perf_counter() < deadline and child.poll() is None:
        try:
            if not child.conn.poll(0.0005):
                continue
            marker = child.conn.recv()
            child.go()
        except (EOFError, OSError):  # (it ended)
            return
        if marker == "done":
            return


# --- the pieces, one at a time ---------------------------------------------------------------------------------


def test_the_names_not_the_fingerprint_keep_a_manifest_with_its_buffer(versions: Versions, tmp_path: Path) -> None:
    """The two images of the kill trials differ in a byte that no fingerprint sample covers: swapped in under the
    manifest's buffer name, the other image passes the fingerprint. What keeps a manifest with its own buffer file
    is the protocol (a buffer name no other conversion writes, one rename that publishes); the full SHA-256
    (checksum=True) catches a swap made by hand."""
    convert_model(versions.a, tmp_path / "out", checksum=True)
    buffer_path(tmp_path / "out").write_bytes(versions.outputs["b"][0])
    load_plan(tmp_path / "out.json")
    with pytest.raises(ManifestError, match="SHA-256"):
        load_plan(tmp_path / "out.json", verify=True)


