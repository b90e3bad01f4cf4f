"""Typed repeated fields (int64_data, float_data, a Constant's value_ints) decode within 3 times the tensor's
size in peak memory: measured as the growth of the peak resident size of a child process, which builds the
tensor from its bytes first (so that building it does not hide the decoding's peak)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import background
import pytest

CHILD = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from onnx import AttributeProto, TensorProto
    from dmlbridge.model.constants import find_constants
    from dmlbridge.onnx.tensor_proto import tensor_to_array
    from onnx import helper

    field, n = sys.argv[1], int(sys.argv[2])
    head = TensorProto(name="w", dims=[n], data_type=1 if field == "float_data" else 7)
    def varint(v):
        out = bytearray()
        while True:
            out.append(v & 0x7F | (0x80 if v > 0x7F else 0))
            v >>= 7
            if not v:
                return bytes(out)
    if field == "value_ints":
        data = b"\\x0a\\x0avalue_ints" + b"\\x42" + varint(n) + bytes(n) + b"\\xa0\\x01\\x07"  # ints (8), packed
        message = AttributeProto.FromString(data)
        node = helper.make_node("Constant", [], ["k"])
        node.attribute.add().CopyFrom(message)
        model = helper.make_model(helper.make_graph([node], "g", [], []))
        del data, message, node
        (constant,) = find_constants(model)
        decode = lambda: constant.to_array()
        nbytes = 8 * n
    else:
        number, width = (4, 4) if field == "float_data" else (7, 1)
        data = head.SerializeToString() + bytes([number << 3 | 2]) + varint(width * n) + bytes(width * n)
        tensor = TensorProto.FromString(data)
        del data
        decode = lambda: tensor_to_array(tensor)
        nbytes = (4 if field == "float_data" else 8) * n
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    values = decode()
    assert values.nbytes == nbytes, (values.nbytes, nbytes)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(after - before, nbytes)
""")


FIELDS = ("int64_data", "float_data", "value_ints")


def _decode(field: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, field, str(8 << 20)], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ))  # (a snapshot: see tests/helpers/background.py)


_DECODED: dict[str, background.Job[subprocess.CompletedProcess[str]]] = {}


def start_in_background(queue: background.Queue, folder: Path) -> None:
    """The children run beside the other tests (tests/conftest.py calls this)."""
    if sys.platform == "linux":
        for field in FIELDS:
            _DECODED[field] = queue.add(functools.partial(_decode, field))


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KiB is Linux's")
@pytest.mark.parametrize("field", FIELDS)
def test_typed_fields_decode_within_three_times_their_size(field: str) -> None:
    result = _DECODED[field].result() if field in _DECODED else _decode(field)
    assert result.returncode == 0, result.stderr
    growth, nbytes = map(int, result.stdout.split())
    assert growth <= 3 * nbytes, f"{field}: peak grew by {growth / nbytes:.1f} x the tensor's {nbytes} bytes"
