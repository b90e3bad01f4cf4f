"""``run_graph`` and ``run_compiled`` on every system: what they are given is checked before any COM call (an
InvalidArgumentError naming the argument), and well-formed arguments off Windows say the call needs Windows."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import dmlbridge
import dmlbridge.gpu
from dmlbridge.gpu import DML_OPERATOR_DESC, InputEdge, IntermediateEdge, OutputEdge

OP = DML_OPERATOR_DESC(1, None)


@pytest.mark.parametrize(("changes", "message"), [
    ({"operators": []}, "operators must be a non-empty sequence of DML_OPERATOR_DESC"),
    ({"operators": [object()]}, "operators must be a non-empty sequence of DML_OPERATOR_DESC"),
    ({"input_edges": [(0, 0)]}, r"input_edges\[0\] is \(0, 0\): give 3 indices"),
    ({"intermediate_edges": [(0, 0, 1, -1)]}, r"intermediate_edges\[0\] is \(0, 0, 1, -1\): give 4 indices"),
    ({"output_edges": "0 0 0"}, "output_edges must be a sequence"),
    ({"inputs": "x"}, "inputs and output_sizes must be sequences"),
], ids=["no operators", "not a desc", "short input edge", "negative index", "edges as text", "inputs as text"])
def test_run_graph_checks_its_arguments_first(changes: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"operators": [OP, OP], "input_edges": [InputEdge(0, 0, 0)],
                                 "intermediate_edges": [IntermediateEdge(0, 0, 1, 0)],
                                 "output_edges": [OutputEdge(1, 0, 0)], "inputs": [None], "output_sizes": [16]}
    arguments.update(changes)
    with pytest.raises(dmlbridge.InvalidArgumentError, match=message):
        dmlbridge.gpu.run_graph(0x20000, **arguments)


def test_off_windows_a_graph_says_it_needs_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    with pytest.raises(dmlbridge.GpuUnavailableError, match="needs Windows"):
        dmlbridge.gpu.run_graph(0x20000, [OP], [InputEdge(0, 0, 0)], [], [OutputEdge(0, 0, 0)], [None], [16])
    with pytest.raises(dmlbridge.GpuUnavailableError, match="needs Windows"):
        dmlbridge.gpu.run_compiled(0x20000, 0x30000, [], [16])


@pytest.mark.parametrize("compiled", [0, None, True, 1.5])
def test_run_compiled_wants_a_compiled_operators_address(compiled: Any) -> None:
    with pytest.raises(dmlbridge.InvalidArgumentError, match="compiled must be the address"):
        dmlbridge.gpu.run_compiled(0x20000, compiled, [], [16])


def test_a_binding_of_a_closed_upload_is_refused_before_any_com_call() -> None:
    binding = dmlbridge.DML_BUFFER_BINDING(0x40000, 0, 16)  # (no resource there: never called)
    binding.upload = SimpleNamespace(closed=True)
    binding.tensor_desc = dmlbridge.prepare(np.ones(4, np.float32)).buffer_desc
    arguments = ([OP], [InputEdge(0, 0, 0)], [], [OutputEdge(0, 0, 0)], [binding], [16])
    with pytest.raises(dmlbridge.InvalidArgumentError, match=r"inputs\[0\] is a binding of an upload that was closed"):
        dmlbridge.gpu.run_graph(0x20000, *arguments)
    binding.upload = SimpleNamespace(closed=False)
    binding.SizeInBytes = 8
    with pytest.raises(dmlbridge.InvalidArgumentError, match=r"TotalTensorSizeInBytes \(16\)"):
        dmlbridge.gpu.run_compiled(0x20000, 0x30000, [binding], [16])


@pytest.mark.parametrize("flags", [-1, 8, 1.0, True, "1"])
def test_execution_flags_are_dml_execution_flags(flags: Any) -> None:
    """DML_EXECUTION_FLAGS (0 to 7), refused otherwise before any COM call, by run_operator and run_graph alike."""
    with pytest.raises(dmlbridge.InvalidArgumentError, match="execution_flags must be DML_EXECUTION_FLAGS"):
        dmlbridge.gpu.run_operator(0x20000, OP, [None], [16], execution_flags=flags)
    with pytest.raises(dmlbridge.InvalidArgumentError, match="execution_flags must be DML_EXECUTION_FLAGS"):
        dmlbridge.gpu.run_graph(0x20000, [OP], [InputEdge(0, 0, 0)], [], [OutputEdge(0, 0, 0)], [None], [16],
                                execution_flags=flags)


@pytest.mark.parametrize(("keywords", "message"), [
    ({"staging_bytes": 0xFFFF0001}, "staging_bytes must be a whole number of bytes, 512 to 0xFFFF0000"),
    ({"staging_bytes": 256}, "staging_bytes must be a whole number of bytes, 512 to 0xFFFF0000"),
    ({"max_buffer_bytes": 0x1_0000_0000}, "max_buffer_bytes must be a multiple of the alignment"),
    ({"max_buffer_bytes": 1024}, r"the 2 tensors take 2048 bytes in one buffer, more than max_buffer_bytes=1024"),
], ids=["staging past 0xFFFF0000", "staging under 512", "buffer past 0xFFFF0000", "tensors past the buffer"])
def test_an_upload_is_bounded_before_anything_is_made(keywords: dict[str, Any], message: str) -> None:
    """The upload heap stops at 0xFFFF0000 (past it a GPU makes none), and upload_tensors' one buffer at
    max_buffer_bytes (2 GiB by default, as conversions keep to): both refused before any COM call."""
    tensors = [dmlbridge.prepare(np.ones(256, np.float32)) for _ in range(2)]  # 1024 bytes each, 1024 apart
    with pytest.raises(dmlbridge.InvalidArgumentError, match=message):
        dmlbridge.gpu.upload_tensors(tensors, 0x20000, **keywords)
