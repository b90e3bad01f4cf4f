"""Models of many nodes: a conversion's peak memory grows by a bounded amount per node (protobuf's parsed node;
nothing of dmlbridge's own is kept per node), measured in child processes beside the tests, whatever the depth of
the subgraphs around them; DMLBRIDGE_LONG=1 measures a million nodes, refused with the default max_nodes and
converted with it raised, within 1 GiB. The refusal before the parse is tested in test_census.py."""

from __future__ import annotations

import functools
import tracemalloc
from pathlib import Path

import background
import memory
import pytest
from budget import LONG

from dmlbridge.model import census

_COUNTS, _DEPTHS = (25_000, 100_000), (0, 9)
_GROWTH: list[background.Job[dict[str, float]]] = []


def start_in_background(queue: background.Queue, folder: Path) -> None:
    """The conversions' memory, measured beside the other tests (tests/conftest.py calls this)."""
    if memory.linux_only() is None:
        _GROWTH.append(queue.add(functools.partial(memory.nodes_growth, folder / "nodes", _COUNTS, _DEPTHS)))


@pytest.mark.skipif(memory.linux_only() is not None, reason=str(memory.linux_only()))
def test_memory_grows_by_a_bounded_amount_per_node(tmp_path: Path) -> None:
    """Peak RSS growth of converting 25,000 and 100,000 Identity nodes (ten of them reading a constant), in the
    main graph and nine If deep, each in a child process: the difference per node is the conversion's cost of one,
    whatever the machine's speed. Before: about 1,000 bytes (find_consumers kept every node's protobuf wrapper and
    a set of every name a node reads); after: about 390, protobuf's parsed node (docs/guide.md, Streaming)."""
    growth = _GROWTH[0].result() if _GROWTH else memory.nodes_growth(tmp_path / "nodes", _COUNTS, _DEPTHS)
    assert memory.growth_per_item(growth, _COUNTS, 0) <= 600, growth
    assert memory.growth_per_item(growth, _COUNTS, 9) <= 600, growth


@pytest.mark.skipif(not LONG or memory.linux_only() is not None, reason="a long run: DMLBRIDGE_LONG=1 runs it")
def test_a_million_nodes_are_refused_and_convert_within_1_gib(tmp_path: Path) -> None:
    """The opt-in large run: a model of a million Identity nodes and ten constants (23 MB), in the main graph and
    17 If deep, is refused with the default max_nodes, before the parse, and converts with max_nodes=None, the
    whole process's peak within 1 GiB each time (before: not refused, about 1,045 MiB converting; now refused at
    about 156 MiB, converted at 507 in the main graph and 422 17 deep)."""
    for depth in (0, 17):
        path = memory.nodes_model(tmp_path / f"nodes{depth}.onnx", 1_000_000, depth)
        peak, message = memory.process_peak(f"""
            try:
                dmlbridge.convert_model({str(path)!r}, {str(tmp_path / "r")!r}, fsync=False, progress=False)
            except dmlbridge.InvalidArgumentError as exc:
                print(exc)
        """)
        assert f"holds at least {1_000_000 + depth} nodes" in message, message
        assert "more than max_nodes=524288" in message, message
        print(f"a million nodes {depth} deep, refused: peak {peak:.0f} MiB")
        assert peak <= 1024, peak
        peak, entries = memory.process_peak(f"""
            plan = dmlbridge.convert_model({str(path)!r}, {str(tmp_path / "w")!r}, fsync=False, progress=False,
                                           workers=1, max_nodes=None)
            print(len(plan.entries), sum(len(entry.consumers) for entry in plan.entries.values()))
        """)
        assert entries == "10 10", entries
        print(f"a million nodes {depth} deep, converted: peak {peak:.0f} MiB")
        assert peak <= 1024, peak
        path.unlink()


@pytest.mark.parametrize("depth", [0, 3])
def test_the_count_keeps_nothing_per_node_past_max_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         depth: int) -> None:
    """Counting a model of more nodes than ``max_nodes`` stops at the level that passes it, its nodes never read,
    and holds a run of fields at a time (4,096 here): its peak (traced allocations, numpy's included) does not grow
    with the nodes, where the whole count's grows by some 250 bytes a node."""
    monkeypatch.setattr(census, "_RUN", 1 << 12)
    peaks: dict[tuple[int, int | None], float] = {}  # peak bytes, by nodes and limit
    for count in (20_000, 80_000):
        data = memory.nodes_model(tmp_path / "n.onnx", count, depth).read_bytes()
        for limit in (None, 1000):
            tracemalloc.start()
            try:
                counted = census.count_constants(data, max_nodes=limit)
                peaks[count, limit] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert counted is not None and counted.nodes == count + depth
            assert counted.nodes_partial == (limit is not None)
            assert counted.node_depth == depth and counted.nodes_in_subgraphs == (count + depth - 1 if depth else 0)
    per_node = {limit: (peaks[80_000, limit] - peaks[20_000, limit]) / 60_000 for limit in (None, 1000)}
    assert per_node[1000] <= 4, per_node
    assert per_node[None] >= 100, per_node
