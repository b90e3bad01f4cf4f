"""External tensor data: the hostile-location battery, range and checksum rules, and how the bytes are read.

Every refusal must be an ExternalDataError naming the tensor, and nothing outside the allowed root may be opened:
an ``opened`` recorder wraps os.open, open, mmap.mmap and Windows' shared open (dmlbridge.system.windows) to log
every path touched, and (on Linux) an inotify watch on the outside directory independently catches any open or read
of the sentinel files there.
"""

from __future__ import annotations

import builtins
import ctypes
import ctypes.util
import errno
import hashlib
import io
import mmap
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from builders import model_of
from onnx import TensorProto, helper, numpy_helper
from system_calls import record_positioned_reads

from dmlbridge.errors import DmlBridgeError, ExternalDataError, InvalidArgumentError, TensorTooLargeError
from dmlbridge.onnx import external_data as ed
from dmlbridge.onnx.external_data import ExternalDataReader, check_location
from dmlbridge.onnx.tensor_proto import tensor_info, tensor_to_array
from dmlbridge.system import windows

if sys.platform == "win32":
    import msvcrt

posix_only = pytest.mark.skipif(os.name != "posix", reason="needs POSIX symlinks, FIFOs and /dev")
VALUES = np.arange(4, dtype=np.float32) + 0.5  # 16 bytes
SENTINEL_BYTES = b"TOP SECRET DATA!"  # 16 bytes too: a leak would decode without a length error


def external_tensor(location: str, *, dims=(4,), data_type=TensorProto.FLOAT, name="w", **keys) -> TensorProto:
    """A tensor whose data lives at ``location``; keys (offset, length, checksum, ...) are stored as given."""
    tensor = TensorProto(name=name, data_type=data_type, dims=list(dims))
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    for key, value in keys.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, str(value)
    return tensor


# --- the recorders ----------------------------------------------------------------------------------------


def _fd_path(fd: int) -> str:
    """The path of the file a descriptor is: Linux's /proc/self/fd, Windows' GetFinalPathNameByHandleW."""
    try:
        if sys.platform == "win32":
            buffer = ctypes.create_unicode_buffer(32768)
            if ctypes.windll.kernel32.GetFinalPathNameByHandleW(msvcrt.get_osfhandle(fd), buffer, len(buffer), 0):
                return buffer.value.removeprefix("\\\\?\\")
        else:
            return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    return f"<fd {fd}>"


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch, watch_outside: Inotify | None) -> list[str]:
    """Every path opened or mapped while the test runs (set up after the inotify watch, whose own set-up
    opens files)."""
    log: list[str] = []
    real_os_open, real_open, real_mmap, real_open_shared = os.open, builtins.open, mmap.mmap, windows.open_shared

    # Successful opens are logged by what the descriptor really is (/proc/self/fd), so a refused O_NOFOLLOW
    # attempt on a swapped-in symlink is not mistaken for a read of its target.
    def os_open(path, flags, mode=0o777, *, dir_fd=None):
        fd = real_os_open(path, flags, mode, dir_fd=dir_fd)
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # (a directory opened to walk from is not data read)
            log.append(_fd_path(fd))
        return fd

    def open_shared(path, **kwargs):  # (Windows: how dmlbridge opens what it reads)
        fd = real_open_shared(path, **kwargs)
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            log.append(_fd_path(fd))
        return fd

    def py_open(file, *args, **kwargs):
        handle = real_open(file, *args, **kwargs)
        path = _fd_path(handle.fileno())
        # (An anonymous pipe is no file a model can name: it is the suite's background queue, whose threads start
        # processes while this test runs, wrapping their pipes with open().)
        if not path.startswith("pipe:["):
            log.append(path)
        return handle

    class RecordingMmap(real_mmap):  # type: ignore[misc,valid-type]
        def __new__(cls, fileno, *args, **kwargs):
            log.append(_fd_path(fileno))
            return real_mmap.__new__(cls, fileno, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(windows, "open_shared", open_shared)
    monkeypatch.setattr(builtins, "open", py_open)
    monkeypatch.setattr(io, "open", py_open)
    monkeypatch.setattr(mmap, "mmap", RecordingMmap)
    return log


class Inotify:
    """IN_OPEN/IN_ACCESS events on one directory (Linux), to prove nothing there was opened or read."""

    IN_ACCESS, IN_OPEN, IN_NONBLOCK = 0x1, 0x20, 0o4000

    def __init__(self, directory: Path) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self.fd = libc.inotify_init1(self.IN_NONBLOCK)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, os.fsencode(directory), self.IN_OPEN | self.IN_ACCESS) < 0:
            raise OSError(ctypes.get_errno(), "inotify unavailable")

    def events(self) -> bytes:
        try:
            return os.read(self.fd, 65536)
        except BlockingIOError:
            return b""

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """model/ (the base dir: w.bin, sub/x.bin, dir/), outside/ (secret.bin sentinel and a FIFO sentinel)."""
    model, outside = tmp_path / "model", tmp_path / "outside"
    model.mkdir()
    outside.mkdir()
    (model / "w.bin").write_bytes(VALUES.tobytes())
    (model / "sub").mkdir()
    (model / "sub" / "x.bin").write_bytes(VALUES.tobytes())
    (model / "dir").mkdir()
    (outside / "secret.bin").write_bytes(SENTINEL_BYTES)
    if hasattr(os, "mkfifo"):
        os.mkfifo(outside / "pipe")
    yield {"model": model, "outside": outside, "tmp": tmp_path}


@pytest.fixture
def watch_outside(tree: dict[str, Path]) -> Iterator[Inotify | None]:
    try:
        watcher = Inotify(tree["outside"])
    except (OSError, AttributeError):
        yield None
        return
    yield watcher
    watcher.close()


def assert_refused(
    tensor: TensorProto,
    tree: dict[str, Path],
    opened: list[str],
    watcher: Inotify | None,
    match: str | None = None,
    **kw,
) -> ExternalDataError:
    with pytest.raises(ExternalDataError, match=match) as info:
        tensor_to_array(tensor, tree["model"], **kw)
    assert repr(tensor.name) in str(info.value), "the error must name the tensor"
    outside = os.path.normcase(os.path.realpath(tree["outside"]))  # (Windows' names ignore case)
    leaked = [p for p in opened if os.path.normcase(os.path.realpath(p)).startswith(outside)]
    assert not leaked, f"opened outside the root: {leaked}"
    if watcher is not None:
        assert watcher.events() == b"", "inotify saw the outside directory's files opened or read"
    return info.value


def test_the_recorders_have_teeth(tree, opened, watch_outside):
    # A deliberate read of the sentinel is seen by both the recorder and inotify, so silence means something.
    with builtins.open(tree["outside"] / "secret.bin", "rb") as f:
        f.read()
    assert any(p.endswith("secret.bin") for p in opened)
    if watch_outside is None:
        pytest.skip("inotify is Linux's" if sys.platform != "linux" else "inotify unavailable")
    assert watch_outside.events() != b""


# --- hostile locations --------------------------------------------------------------------------------------


SYNTAX_BATTERY = [
    # absolute POSIX
    "/etc/passwd",
    "{outside}/secret.bin",
    # Windows drive forms
    "C:\\Windows\\System32\\config\\SAM",
    "C:/x/secret.bin",
    "C:secret.bin",
    "c:..\\outside\\secret.bin",
    # UNC and friends
    "\\\\server\\share\\secret.bin",
    "//server/share/secret.bin",
    "\\\\?\\C:\\secret.bin",
    "\\\\.\\PhysicalDrive0",
    "\\secret.bin",
    # '..' in every position
    "..",
    "../outside/secret.bin",
    "./../outside/secret.bin",
    "sub/../../outside/secret.bin",
    "sub/..",
    "sub/../w.bin",
    "..\\outside\\secret.bin",
    "sub\\..\\..\\outside\\secret.bin",
    "sub/..\\..\\outside/secret.bin",
    "w.bin/..",
    # URL forms
    "file:///etc/passwd",
    "file://{outside}/secret.bin",
    "file:secret.bin",
    "http://example.com/w.bin",
    "s3://bucket/w.bin",
    # NUL byte, NTFS stream, empty or directory-only names
    "w.bin\x00../../outside/secret.bin",
    "\x00",
    "w.bin:stream",
    "",
    ".",
    "./",
    "sub/",
    "sub//x.bin",
    # over-long
    "a" * 256,
    "a/" * 2100 + "w.bin",
]


@pytest.mark.parametrize("location", SYNTAX_BATTERY, ids=lambda s: repr(s[:40]))
def test_hostile_location_is_refused(location, tree, opened, watch_outside):
    location = location.replace("{outside}", str(tree["outside"]))
    assert_refused(external_tensor(location, length=16), tree, opened, watch_outside)
    # Nothing was opened at all: these are refused on their text alone.
    assert opened == []


@posix_only
def test_symlink_to_outside_is_refused(tree, opened, watch_outside):
    os.symlink(tree["outside"] / "secret.bin", tree["model"] / "link.bin")
    os.symlink("../outside", tree["model"] / "linkdir")
    assert_refused(external_tensor("link.bin"), tree, opened, watch_outside, match="outside the allowed")
    assert_refused(external_tensor("linkdir/secret.bin"), tree, opened, watch_outside, match="outside the allowed")


@posix_only
def test_symlink_chain_leaving_the_root_is_refused(tree, opened, watch_outside):
    # inside -> inside -> outside: only the final real path counts.
    os.symlink(tree["outside"] / "secret.bin", tree["model"] / "hop2")
    os.symlink("hop2", tree["model"] / "hop1")
    assert_refused(external_tensor("hop1"), tree, opened, watch_outside, match="outside the allowed")


@posix_only
def test_symlink_loop_is_refused(tree, opened, watch_outside):
    os.symlink("loop_b", tree["model"] / "loop_a")
    os.symlink("loop_a", tree["model"] / "loop_b")
    os.symlink("self", tree["model"] / "self")
    assert_refused(external_tensor("loop_a"), tree, opened, watch_outside, match="loop")
    assert_refused(external_tensor("self"), tree, opened, watch_outside, match="loop")
    assert opened == []


def test_directory_is_refused(tree, opened, watch_outside):
    assert_refused(external_tensor("dir"), tree, opened, watch_outside, match="directory")
    assert_refused(external_tensor("sub"), tree, opened, watch_outside, match="directory")
    assert opened == []


@posix_only
def test_fifo_is_refused_without_blocking(tree, opened, watch_outside):
    # Inside the root: refused by the stat check before any open (an open could block forever).
    os.mkfifo(tree["model"] / "pipe")
    os.symlink("pipe", tree["model"] / "pipe_link")
    assert_refused(external_tensor("pipe"), tree, opened, watch_outside, match="FIFO")
    assert_refused(external_tensor("pipe_link"), tree, opened, watch_outside, match="FIFO")
    # Outside the root, through a symlink: refused as outside.
    os.symlink(tree["outside"] / "pipe", tree["model"] / "out_pipe")
    assert_refused(external_tensor("out_pipe"), tree, opened, watch_outside, match="outside the allowed")
    assert opened == []


@posix_only
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_device_by_symlink_is_refused(tree, opened, watch_outside):
    os.symlink("/dev/zero", tree["model"] / "zero.bin")
    assert_refused(external_tensor("zero.bin"), tree, opened, watch_outside, match="outside the allowed")
    # Even with the root widened to '/', a device is not a regular file and is never opened.
    assert_refused(external_tensor("zero.bin"), tree, opened, watch_outside, match="device", external_data_root="/")
    assert not any(p.startswith("/dev/") for p in opened)


@posix_only
def test_hard_link_to_outside_is_refused(tree, opened, watch_outside):
    try:
        os.link(tree["outside"] / "secret.bin", tree["model"] / "hard.bin")
    except OSError as exc:  # pragma: no cover - file systems without hard links
        pytest.skip(f"no hard links here: {exc}")
    watch_outside and watch_outside.events()  # creating the link is not our read
    assert_refused(external_tensor("hard.bin"), tree, opened, watch_outside, match="hard link")
    assert opened == []


def test_hard_link_inside_is_refused_too(tree):
    # The rule is st_nlink == 1, full stop: a second name inside the root cannot be told from one outside.
    try:
        os.link(tree["model"] / "w.bin", tree["model"] / "w2.bin")
    except OSError as exc:  # pragma: no cover
        pytest.skip(f"no hard links here: {exc}")
    with pytest.raises(ExternalDataError, match="2 hard links"):
        tensor_to_array(external_tensor("w2.bin"), tree["model"])


def test_missing_file(tree, opened):
    with pytest.raises(ExternalDataError, match="cannot be resolved"):
        tensor_to_array(external_tensor("nope.bin"), tree["model"])
    assert opened == []


def test_a_missing_file_says_where_it_was_looked_for(tree):
    """The path the location led to, in the model's folder (where locations are resolved), is in the message."""
    looked = os.path.join(os.path.realpath(tree["model"]), "sub", "nope.bin")
    with pytest.raises(ExternalDataError) as caught:
        tensor_to_array(external_tensor("sub/nope.bin"), tree["model"])
    assert f"looked for {looked!r}" in str(caught.value) and "relative to the model's folder" in str(caught.value)


def test_location_not_utf8_is_refused(tree):
    tensor = external_tensor("w.bin")
    data = tensor.SerializeToString().replace(b"w.bin", b"w\xff.bi")
    hostile = TensorProto()
    hostile.ParseFromString(data)
    with pytest.raises(ExternalDataError, match="not valid UTF-8"):
        tensor_to_array(hostile, tree["model"])


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({"offset": "-1"}, "offset"),
        ({"offset": "abc"}, "offset"),
        ({"offset": "1e3"}, "offset"),
        ({"offset": "+4"}, "offset"),
        ({"offset": " 4"}, "offset"),
        ({"offset": "0x10"}, "offset"),
        ({"offset": "1_0"}, "offset"),
        ({"offset": ""}, "offset"),
        ({"offset": "٤"}, "offset"),  # a non-ASCII digit that int() would accept
        ({"offset": "9" * 5000}, "offset"),
        ({"length": "-16"}, "length"),
        ({"length": "sixteen"}, "length"),
        ({"length": "16.0"}, "length"),
        ({"length": "8"}, "need exactly 16"),
        ({"length": "32"}, "need exactly 16"),
        ({"length": "99999999999999999999"}, "need exactly 16"),
        ({"offset": "17"}, "past the end"),
        ({"offset": "99999999999999999999"}, "past the end"),
        ({"offset": "1", "length": "16"}, "past the end"),
        ({"offset": "1"}, "runs from offset 1"),
        ({"checksum": "0" * 40}, "checksum mismatch"),
        ({"checksum": "not-a-sha1"}, "not a SHA-1"),
        ({"checksum": hashlib.sha256(VALUES.tobytes()).hexdigest()}, "not a SHA-1"),
    ],
)
def test_bad_offset_length_checksum(keys, match, tree, opened, watch_outside):
    assert_refused(external_tensor("w.bin", **keys), tree, opened, watch_outside, match=match)


def test_length_without_offset_must_cover_the_rest_of_the_file(tree):
    (tree["model"] / "long.bin").write_bytes(VALUES.tobytes() + b"\x00" * 4)
    with pytest.raises(ExternalDataError, match="runs from offset 0"):
        tensor_to_array(external_tensor("long.bin"), tree["model"])
    # With an explicit length, trailing bytes are fine.
    got = tensor_to_array(external_tensor("long.bin", length=16), tree["model"])
    assert got.tobytes() == VALUES.tobytes()


def test_entry_rules(tree):
    no_location = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    no_location.data_location = TensorProto.EXTERNAL
    with pytest.raises(ExternalDataError, match="no 'location'"):
        tensor_to_array(no_location, tree["model"])
    twice = external_tensor("w.bin", length=16)
    entry = twice.external_data.add()
    entry.key, entry.value = "location", "sub/x.bin"
    with pytest.raises(ExternalDataError, match="given twice"):
        tensor_to_array(twice, tree["model"])
    # Unknown keys are ignored (onnx warns and ignores them too); basepath is a known onnx key.
    extra = external_tensor("w.bin", length=16, basepath="ignored", colour="blue")
    assert tensor_to_array(extra, tree["model"]).tobytes() == VALUES.tobytes()


def test_external_data_needs_base_dir(tree):
    with pytest.raises(ExternalDataError, match="base_dir"):
        tensor_to_array(external_tensor("w.bin"))
    with pytest.raises(InvalidArgumentError, match="not an existing directory"):
        tensor_to_array(external_tensor("w.bin"), tree["model"] / "missing")
    with pytest.raises(InvalidArgumentError, match="not a directory"):
        tensor_to_array(external_tensor("w.bin"), tree["model"] / "w.bin")


def test_error_names_undecodable_tensor_name(tree):
    tensor = external_tensor("../x", name="NAME")
    hostile = TensorProto()
    hostile.ParseFromString(tensor.SerializeToString().replace(b"NAME", b"N\xffME"))
    with pytest.raises(ExternalDataError, match=r"N\\\\xffME"):
        tensor_to_array(hostile, tree["model"])


def test_size_limit_comes_before_any_file_access(tree, opened):
    huge = external_tensor("w.bin", dims=(2**40,), length=4 * 2**40)
    with pytest.raises(TensorTooLargeError, match="max_tensor_bytes"):
        tensor_to_array(huge, tree["model"])
    assert opened == []
    # Raised limit: the file is checked, and its 16 bytes cannot back 4 TiB; nothing of that size is allocated.
    with pytest.raises(ExternalDataError, match="past the end"):
        tensor_to_array(huge, tree["model"], max_tensor_bytes=2**50)


# --- shrinking files ----------------------------------------------------------------------------------------


def _shrink_first(path: Path, real):
    def wrapper(*args, **kwargs):
        with builtins.open(path, "r+b") as f:
            f.truncate(4)
        return real(*args, **kwargs)

    return wrapper


def test_file_shrinking_before_mmap(tree, monkeypatch):
    target = tree["model"] / "w.bin"
    monkeypatch.setattr(mmap, "mmap", _shrink_first(target, mmap.mmap))
    with pytest.raises(ExternalDataError, match="short read"):
        tensor_to_array(external_tensor("w.bin", length=16), tree["model"])


def test_file_shrinking_before_positioned_read(tree, monkeypatch):
    target = tree["model"] / "w.bin"
    record_positioned_reads(monkeypatch, before=_shrink_first(target, lambda: None))
    reader = ExternalDataReader(tree["model"], use_mmap=False)
    with pytest.raises(ExternalDataError, match="short read"):
        tensor_to_array(external_tensor("w.bin", length=16), reader=reader)


def test_file_shrinking_during_checksum(tree, monkeypatch):
    target = tree["model"] / "w.bin"
    record_positioned_reads(monkeypatch, before=_shrink_first(target, lambda: None))
    digest = hashlib.sha1(VALUES.tobytes()).hexdigest()
    with pytest.raises(ExternalDataError, match=r"shrank|mismatch"):
        tensor_to_array(external_tensor("w.bin", length=16, checksum=digest), tree["model"])


def test_file_replaced_between_check_and_open(tree, monkeypatch):
    # The path is swapped for another file after stat: fstat sees a different inode.
    real_stat = os.stat
    target = tree["model"] / "w.bin"

    def stat_then_swap(path, *args, **kwargs):
        result = real_stat(path, *args, **kwargs)
        if os.fspath(path) == os.path.realpath(target):
            os.replace(tree["model"] / "sub" / "x.bin", target)
        return result

    monkeypatch.setattr(os, "stat", stat_then_swap)
    with pytest.raises(ExternalDataError, match="replaced"):
        tensor_to_array(external_tensor("w.bin", length=16), tree["model"])


@posix_only
def test_symlink_swapped_in_after_check_is_not_followed(tree, monkeypatch, opened, watch_outside):
    real_stat = os.stat
    target = tree["model"] / "sub"

    def stat_then_swap(path, *args, **kwargs):
        result = real_stat(path, *args, **kwargs)
        if os.fspath(path).endswith("x.bin") and not os.path.islink(target):
            os.rename(target, tree["model"] / "sub_old")
            os.symlink(tree["outside"], target)
        return result

    (tree["outside"] / "x.bin").write_bytes(SENTINEL_BYTES)
    watch_outside and watch_outside.events()
    opened.clear()  # the test's own write above
    monkeypatch.setattr(os, "stat", stat_then_swap)
    assert_refused(external_tensor("sub/x.bin", length=16), tree, opened, watch_outside, match="cannot be opened")


# --- what is allowed, and how it is read --------------------------------------------------------------------


def test_allowed_forms(tree):
    for location in ["w.bin", "./w.bin", "sub/x.bin", "sub\\x.bin", "./sub/./x.bin"]:
        got = tensor_to_array(external_tensor(location), tree["model"])
        assert got.dtype == np.float32 and got.tobytes() == VALUES.tobytes(), location
    if os.name != "nt":  # (Windows drops the dots that end a name: no file there is called '...')
        (tree["model"] / "...").write_bytes(VALUES.tobytes())  # '...' is a name, not a parent
        assert tensor_to_array(external_tensor("..."), tree["model"]).tobytes() == VALUES.tobytes()


@posix_only
def test_symlink_inside_root_is_allowed_and_root_can_be_widened(tree):
    os.symlink("sub/x.bin", tree["model"] / "inner.bin")
    assert tensor_to_array(external_tensor("inner.bin"), tree["model"]).tobytes() == VALUES.tobytes()
    # A Hugging Face style cache: the model dir holds symlinks into a blobs folder beside it.
    blobs = tree["tmp"] / "blobs"
    blobs.mkdir()
    (blobs / "abc123").write_bytes(VALUES.tobytes())
    os.symlink("../blobs/abc123", tree["model"] / "hf.bin")
    with pytest.raises(ExternalDataError, match="external_data_root"):
        tensor_to_array(external_tensor("hf.bin"), tree["model"])
    got = tensor_to_array(external_tensor("hf.bin"), tree["model"], external_data_root=tree["tmp"])
    assert got.tobytes() == VALUES.tobytes()


def _bases(array: np.ndarray) -> list[object]:
    chain, base = [], array.base
    while base is not None:
        chain.append(base)
        base = getattr(base, "base", None) if isinstance(base, np.ndarray) else getattr(base, "obj", None)
    return chain


@pytest.mark.parametrize("offset", [0, 3, 4096, 4096 + 5, 3 * 65536 + 12345])
@pytest.mark.parametrize("use_mmap", [True, False])
def test_reads_just_the_range(tree, monkeypatch, offset, use_mmap):
    big = tree["model"] / "big.bin"
    with builtins.open(big, "wb") as f:
        f.truncate(64 << 20)  # sparse 64 MiB
        f.seek(offset)
        f.write(VALUES.tobytes())
    mapped: list[int] = []
    read: list[int] = []
    real_mmap, real_preadv = mmap.mmap, getattr(os, "preadv", None)

    class CountingMmap(real_mmap):  # type: ignore[misc,valid-type]
        def __new__(cls, fileno, length, *args, **kwargs):
            mapped.append(length)
            return real_mmap.__new__(cls, fileno, length, *args, **kwargs)

    monkeypatch.setattr(mmap, "mmap", CountingMmap)
    if real_preadv is not None:

        def counting_preadv(fd, buffers, off):
            n = real_preadv(fd, buffers, off)
            read.append(n)
            return n

        monkeypatch.setattr(os, "preadv", counting_preadv)
    reader = ExternalDataReader(tree["model"], use_mmap=use_mmap)
    got = tensor_to_array(external_tensor("big.bin", offset=offset, length=16), reader=reader)
    assert got.tobytes() == VALUES.tobytes() and got.dtype == np.float32
    assert not got.flags.writeable
    if use_mmap:
        assert mapped and mapped[0] <= 16 + mmap.ALLOCATIONGRANULARITY
        assert any(isinstance(b, mmap.mmap) for b in _bases(got)), "expected a view over the mapping"
    else:
        assert not mapped
        if real_preadv is not None:
            assert sum(read) == 16


def test_mapping_outlives_the_reader(tree):
    reader = ExternalDataReader(tree["model"])
    got = tensor_to_array(external_tensor("w.bin"), reader=reader)
    del reader
    import gc

    gc.collect()
    assert got.tolist() == VALUES.tolist()


def test_checksum_verified_once_per_file_per_reader(tree, monkeypatch):
    data = VALUES.tobytes() + VALUES.tobytes()[::-1]
    (tree["model"] / "two.bin").write_bytes(data)
    digest = hashlib.sha1(data).hexdigest()
    calls = []
    real_sha1 = hashlib.sha1

    def counting_sha1(*args, **kwargs):
        calls.append(1)
        return real_sha1(*args, **kwargs)

    monkeypatch.setattr(ed.hashlib, "sha1", counting_sha1)
    reader = ExternalDataReader(tree["model"])
    first = external_tensor("two.bin", offset=0, length=16, checksum=digest.upper())
    second = external_tensor("two.bin", offset=16, length=16, checksum=digest)
    assert tensor_to_array(first, reader=reader).tobytes() == data[:16]
    assert tensor_to_array(second, reader=reader).tobytes() == data[16:]
    assert len(calls) == 1
    # A changed file (size or mtime) is hashed again and fails.
    (tree["model"] / "two.bin").write_bytes(data + b"x")
    with pytest.raises(ExternalDataError, match="checksum mismatch"):
        tensor_to_array(first, reader=reader)
    assert len(calls) == 2


def test_checksum_streams_in_chunks(tree, monkeypatch):
    monkeypatch.setattr(ed, "_CHUNK", 7)
    reads = record_positioned_reads(monkeypatch)
    digest = hashlib.sha1(VALUES.tobytes()).hexdigest()
    tensor_to_array(external_tensor("w.bin", checksum=digest), tree["model"])  # (the values are then mapped)
    assert max(read.asked for read in reads) <= 7 and sum(read.asked for read in reads) == 16


def test_zero_size_tensor(tree):
    (tree["model"] / "empty.bin").write_bytes(b"")
    got = tensor_to_array(external_tensor("empty.bin", dims=(0, 3)), tree["model"])
    assert got.shape == (0, 3) and got.dtype == np.float32
    got = tensor_to_array(external_tensor("w.bin", dims=(0,), offset=16, length=0), tree["model"])
    assert got.shape == (0,)
    with pytest.raises(ExternalDataError, match="past the end"):
        tensor_to_array(external_tensor("w.bin", dims=(0,), offset=17, length=0), tree["model"])


def test_tensor_info_opens_nothing(tree, opened):
    info = tensor_info(external_tensor("does-not-exist.bin", dims=(2, 3), data_type=TensorProto.INT4))
    assert (info.storage, info.shape, info.nbytes, info.packed_nbytes) == ("external", (2, 3), 6, 3)
    with pytest.raises(ExternalDataError):
        tensor_info(external_tensor("../escape.bin"))
    assert opened == []


def test_matches_onnx_loader_on_a_saved_model(tmp_path):
    # A model saved by onnx itself with external data decodes like numpy_helper.
    arrays = {
        "f": np.linspace(-1, 1, 3000, dtype=np.float32).reshape(30, 100),
        "i": np.arange(-600, 600, dtype=np.int64),
        "h": np.arange(2048, dtype=np.float16),
    }
    inits = [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("f", TensorProto.FLOAT, [30, 100])], inits)
    model = helper.make_model(graph)
    onnx.save_model(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    loaded = onnx.load_model(tmp_path / "m.onnx", load_external_data=False)
    for tensor in loaded.graph.initializer:
        assert tensor.data_location == TensorProto.EXTERNAL
        got = tensor_to_array(tensor, tmp_path)
        ref = numpy_helper.to_array(tensor, str(tmp_path))
        assert got.dtype == ref.dtype and got.shape == ref.shape and got.tobytes() == ref.tobytes()


def test_check_location_components():
    assert check_location("a/b\\c.bin") == ("a", "b", "c.bin")
    assert check_location("./a/./b") == ("a", "b")
    with pytest.raises(ExternalDataError):
        check_location(None)


def test_errors_are_dmlbridge_errors(tree):
    for location in ["../x", "dir", "nope"]:
        with pytest.raises(DmlBridgeError):
            tensor_to_array(external_tensor(location), tree["model"])


def test_open_failure_is_an_external_data_error(tree, monkeypatch):
    # (A chmod 000 file cannot be used: the suite may run as root.) The final open is refused by the OS.
    real_open, real_open_shared = os.open, windows.open_shared

    def deny(path, flags, *args, **kwargs):
        if os.fsdecode(path).endswith("w.bin"):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *args, **kwargs)

    def deny_shared(path, **kwargs):  # (Windows: how dmlbridge opens what it reads)
        if os.fsdecode(path).endswith("w.bin"):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open_shared(path, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    monkeypatch.setattr(windows, "open_shared", deny_shared)
    with pytest.raises(ExternalDataError, match="cannot be opened"):
        tensor_to_array(external_tensor("w.bin"), tree["model"])


def test_conversion_and_verification_never_map_external_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that shrinks under a mapping kills the process with SIGBUS; conversion and verification read by
    position instead, so a shrinking file is an ExternalDataError (tensor_to_array may still map: see its
    ``use_mmap``)."""
    import dmlbridge
    from dmlbridge.onnx.external_data import ExternalDataReader as Reader

    values = np.arange(1 << 18, dtype=np.float32)
    tensor = numpy_helper.from_array(values, "w")
    (tmp_path / "w.data").write_bytes(tensor.raw_data)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="w.data")
    model = tmp_path / "m.onnx"
    model.write_bytes(model_of([tensor]).SerializeToString())
    monkeypatch.setattr(mmap, "mmap", lambda *a, **k: pytest.fail("external data mapped"))
    # (checksum=True: the bytes pass through the process, where a mapping could be; no copy by the kernel)
    plan = dmlbridge.convert_model(model, tmp_path / "out", progress=False, checksum=True)
    plan.verify(model)
    assert plan.array("w").tobytes() == values.tobytes()
    real_open_checked = Reader._open_checked

    def opened_then_shrunk(self: Any, *args: Any) -> Any:
        result = real_open_checked(self, *args)
        os.truncate(tmp_path / "w.data", 100)  # the file shrinks between its checks and the read
        return result

    monkeypatch.setattr(Reader, "_open_checked", opened_then_shrunk)
    with pytest.raises(dmlbridge.ExternalDataError):
        dmlbridge.convert_model(model, tmp_path / "out2", progress=False, checksum=True)


@pytest.mark.skipif(not (sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")),
                    reason="a pinned directory's path comes from Linux's /proc/self/fd")
def test_the_models_directory_is_pinned_when_the_model_is_opened(tmp_path: Path, monkeypatch: Any) -> None:
    """An attacker who controls the parent of the model's folder swaps the folder for a symlink to another one
    after the model was read: external data is still read in the folder the model was read from."""
    import dmlbridge
    import dmlbridge.plan.upload_plan as plan_module

    values = np.arange(16, dtype=np.float32)
    tensor = numpy_helper.from_array(values, "w")
    folder, victim = tmp_path / "models", tmp_path / "victim"
    folder.mkdir()
    victim.mkdir()
    (folder / "w.data").write_bytes(tensor.raw_data)
    (victim / "w.data").write_bytes(b"secret!!" * 8)  # the same size: only the bytes tell
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="w.data")
    (folder / "m.onnx").write_bytes(model_of([tensor]).SerializeToString())
    real_constants = plan_module.model_constants

    def swap_then_find(loaded: Any) -> Any:
        os.rename(folder, tmp_path / "moved")
        os.symlink(victim, folder)  # the path now leads to the victim's folder
        return real_constants(loaded)

    monkeypatch.setattr(plan_module, "model_constants", swap_then_find)
    plan = dmlbridge.convert_model(folder / "m.onnx", tmp_path / "out", progress=False)
    assert plan.array("w").tobytes() == values.tobytes()


def test_tensor_to_array_copies_external_data_when_asked(tmp_path: Path, monkeypatch: Any) -> None:
    values = np.arange(64, dtype=np.float32)
    tensor = numpy_helper.from_array(values, "w")
    (tmp_path / "w.data").write_bytes(tensor.raw_data)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="w.data")
    maps: list[int] = []
    real_mmap = mmap.mmap

    class CountingMmap(real_mmap):  # type: ignore[misc,valid-type]
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            maps.append(1)
            return real_mmap.__new__(cls, *args, **kwargs)

    monkeypatch.setattr(mmap, "mmap", CountingMmap)
    mapped = tensor_to_array(tensor, tmp_path)  # a view of a map: no copy
    assert maps == [1] and not mapped.flags.writeable
    copied = tensor_to_array(tensor, tmp_path, use_mmap=False)
    assert maps == [1] and copied.tobytes() == mapped.tobytes() == values.tobytes()
