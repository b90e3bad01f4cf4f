"""The .bin fingerprint (dmlbridge.plan.fingerprint): a per-range reference recomputes it, the bytes verification
reads elsewhere give the same digest, and it costs a few reads at any size (a changed byte it does not sample is
left to the opt-in SHA-256)."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from budget import examples
from builders import model_of
from hypothesis import given, settings
from hypothesis import strategies as st
from models import buffer_path
from system_calls import file_of, record_positioned_reads

from dmlbridge import convert_model, load_plan
from dmlbridge.errors import ManifestError
from dmlbridge.plan.fingerprint import FingerprintStream, bin_fingerprint


def test_the_fingerprint_from_bytes_read_elsewhere_is_the_fingerprint() -> None:
    """FingerprintStream, fed a file's bytes in pieces of any size, or only the bytes it says it still needs, gives
    bin_fingerprint's digest (verification computes it from the bytes it compares)."""
    rng = np.random.default_rng(11)
    for _ in range(examples(60)):
        size = int(rng.integers(1, 1 << 21))
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        offsets = sorted({int(x) // 16 * 16 for x in rng.integers(0, size, int(rng.integers(0, 40)))})
        totals = [max(1, min(int(rng.integers(1, 100000)), size - offset)) for offset in offsets]
        with tempfile.TemporaryFile() as file:
            file.write(data)
            file.flush()
            expected = bin_fingerprint(file.fileno(), size, offsets, totals)
        stream, view, position = FingerprintStream(size, offsets, totals), memoryview(data), 0
        while position < size:
            end = min(size, position + int(rng.integers(1, 300000)))
            if rng.random() < 0.5:
                stream.feed(position, view[position:end])
            else:
                for low, high in stream.needed(position, end):
                    stream.feed(low, view[low:high])
            position = end
        assert stream.hexdigest() == expected


def reference_fingerprint(path: Path, size: int, entries: list[tuple[int, int]]) -> str:
    """The .bin fingerprint as fingerprint.py's docstring defines it, one range at a time."""
    ranges = [(0, min(64 << 10, size)), (max(0, size - (64 << 10)), size)]
    ranges += [(offset, offset + min(total, 64)) for offset, total in entries]
    ranges += [(i * size // 1024, min(i * size // 1024 + 64, size)) for i in range(1024)]
    merged: list[list[int]] = []
    for start, stop in sorted((r for r in ranges if r[0] < r[1]), key=lambda r: r[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    data = path.read_bytes()
    sha = hashlib.sha256(b"dmlbridge-bin-fingerprint-1\x00" + size.to_bytes(8, "little"))
    for start, stop in merged:
        sha.update(start.to_bytes(8, "little") + stop.to_bytes(8, "little") + data[start:stop])
    return sha.hexdigest()


@settings(max_examples=examples(60), deadline=None)
@given(lengths=st.lists(st.sampled_from([4, 16, 16, 16, 64, 100, 300, 5000]), max_size=3000),
       gaps=st.sampled_from([0, 16, 240, 4096]), seed=st.integers(0, 2**32 - 1))
def test_fingerprint_matches_a_per_range_reference(tmp_path_factory: Any, lengths: list[int], gaps: int,
                                                   seed: int) -> None:
    entries, position = [], 0
    for length in lengths:
        entries.append((position, length))
        position += length + gaps
    size = position + 7
    path = tmp_path_factory.mktemp("fp") / "x.bin"
    path.write_bytes(np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes())
    with open(path, "rb") as file:
        got = bin_fingerprint(file.fileno(), size, [o for o, _ in entries], [t for _, t in entries])
    assert got == reference_fingerprint(path, size, entries)


def test_fingerprint_reads_samples_not_the_whole_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The always-on check costs a few reads whatever the size: of a 64 GiB (sparse) file it reads its two 64 KiB
    ends and 1024 samples of 64 bytes, every read recorded; a changed byte that no sample covers is left to the
    opt-in full SHA-256 (checksum=True, verify=True)."""
    big = tmp_path / "big.bin"
    with open(big, "w+b") as file:
        file.truncate(64 << 30)
        with monkeypatch.context() as patched:
            recorded = record_positioned_reads(patched)
            bin_fingerprint(file.fileno(), 64 << 30, [], [])
            reads = [read for read in recorded if read.file == file_of(file.fileno())]
    # (a read the system ends short is continued where it stopped: one range, read in two calls)
    ranges = [read for before, read in zip([None, *reads], reads, strict=False)
              if before is None or read.offset != before.offset + before.got]
    unusual = [read for read in reads if read.asked not in (64, 64 << 10)]
    assert reads and len(ranges) <= 2 + 1024, (len(ranges), unusual)
    assert sum(read.got for read in reads) <= 2 * (64 << 10) + 1024 * 64, sum(read.got for read in reads)

    array = np.arange(1 << 20, dtype=np.float32)  # 4 MiB: most of it is not sampled
    m = model_of({"w": array})
    convert_model(m, tmp_path / "out", checksum=True)
    buffer = buffer_path(tmp_path / "out")
    data = bytearray(buffer.read_bytes())
    data[len(data) // 2 + 1000] ^= 1  # between two of the evenly spaced samples
    buffer.write_bytes(bytes(data))
    load_plan(tmp_path / "out.json")
    with pytest.raises(ManifestError, match="SHA-256"):
        load_plan(tmp_path / "out.json", verify=True)
