"""Limits a model meets before it is read or parsed: protobuf's 2 GiB, refused by the model's size before a byte
is read or copied, and the nodes and constants of a text-format model, bounded from its text before onnx parses it;
at every entry point (a path, bytes, a ModelProto; inspect, convert and verify on the command line)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
import pytest
from command_line import one_line_error, run
from onnx import helper, numpy_helper

import dmlbridge
from dmlbridge.model import onnx_file
from dmlbridge.model.model_limits import text_bound
from dmlbridge.model.onnx_file import PROTOBUF_MAX_BYTES


def _identities(count: int) -> Any:
    """``count`` Identity nodes in a chain from the constant ``w``."""
    nodes = [helper.make_node("Identity", ["w" if i == 0 else f"x{i}"], [f"x{i + 1}"]) for i in range(count)]
    output = helper.make_tensor_value_info(f"x{count}", onnx.TensorProto.FLOAT, [1])
    return helper.make_model(helper.make_graph(nodes, "g", [], [output],
                                               [numpy_helper.from_array(np.ones(1, np.float32), "w")]))


def _entry_points(out: Path) -> list[Any]:
    return [lambda model, **limits: dmlbridge.convert_model(model, out, progress=False, **limits),
            lambda model, **limits: dmlbridge.check_conversion(model, **limits),
            lambda model, **limits: dmlbridge.plan_model(model, **limits)]


# --- over protobuf's limit ------------------------------------------------------------------------------------


def _forbid_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a model file fails the test: a model refused by its size is refused before a byte is read."""

    def read_at(*args: Any) -> Any:
        raise AssertionError("the model file was read")

    monkeypatch.setattr(onnx_file, "read_at", read_at)


@pytest.fixture
def never_read(monkeypatch: pytest.MonkeyPatch) -> None:
    _forbid_reading(monkeypatch)


def _sparse_file(path: Path, size: int) -> Path:
    with open(path, "wb") as file:
        file.truncate(size)  # (sparse: no byte of it is written)
    return path


def test_a_model_over_protobufs_limit_is_refused_by_its_size_before_it_is_read(
    tmp_path: Path, never_read: None
) -> None:
    """A sparse 2 GiB file (binary or text), 2 GiB of bytes (a memoryview over one byte: nothing allocated) and a
    ModelProto whose serialization would be 2 GiB are refused by their size, naming the model and saying that
    the weights belong in external data; a bare MemoryError came before, under an address-space limit."""
    for name in ("big.onnx", "big.json"):
        path = _sparse_file(tmp_path / name, PROTOBUF_MAX_BYTES + 1)
        for call in _entry_points(tmp_path / "out"):
            with pytest.raises(dmlbridge.InvalidArgumentError,
                               match=rf"model '.*{name}' is 2147483648 bytes \(2 GiB\), more than protobuf reads as "
                                     r"one message \(2 GiB less a byte, 2147483647\): weights over 2 GB belong in "
                                     r"external data"):
                call(path)
    huge = memoryview(np.broadcast_to(np.zeros(1, np.uint8), (PROTOBUF_MAX_BYTES + 1,)))
    assert huge.nbytes == PROTOBUF_MAX_BYTES + 1
    proto = SimpleNamespace(DESCRIPTOR=onnx.ModelProto.DESCRIPTOR, ByteSize=lambda: PROTOBUF_MAX_BYTES + 1,
                            SerializeToString=None)  # (called, it would fail the test)
    for model, how in ((huge, "bytes"), (proto, "a ModelProto")):
        for call in _entry_points(tmp_path / "out"):
            with pytest.raises(dmlbridge.InvalidArgumentError,
                               match=rf"the model given as {how} is 2147483648 bytes .*belong in external data"):
                call(model)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.json", "big.onnx"]


def test_the_command_line_refuses_a_model_over_protobufs_limit_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = tmp_path / "small.onnx"
    small.write_bytes(_identities(2).SerializeToString())
    assert run("convert", small, "-o", tmp_path / "w", "--quiet").returncode == 0
    _forbid_reading(monkeypatch)
    big = _sparse_file(tmp_path / "big.onnx", PROTOBUF_MAX_BYTES + 1)
    for command in (["inspect", big], ["inspect", big, "--check"], ["convert", big, "-o", tmp_path / "x"],
                    ["verify", tmp_path / "w.json", big]):
        one_line_error(run(*command), "big.onnx", "2147483648 bytes", "belong in external data")
    assert not (tmp_path / "x.json").exists()


# --- text models ----------------------------------------------------------------------------------------------

_TEXT_FORMATS = (("json", "json"), ("txtpb", "textproto"), ("onnxtxt", "onnxtxt"))


def _forbid_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsing a model fails the test: a text model refused by its bound is refused before it is parsed."""

    def parse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model was parsed")

    monkeypatch.setattr(onnx_file.onnx, "load_model_from_string", parse)


@pytest.fixture
def never_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    _forbid_parsing(monkeypatch)


def _text_model(folder: Path, nodes: int, extension: str, text_format: str) -> Path:
    path = folder / f"m.{extension}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (onnx calls its own text syntax experimental)
        onnx.save_model(_identities(nodes), os.fspath(path), format=text_format)
    return path


def test_a_text_model_is_counted_from_its_text_before_it_is_parsed(tmp_path: Path, never_parsed: None) -> None:
    """40 nodes in JSON, protobuf's text format and ONNX's text syntax, with max_nodes=10 or max_constants=10:
    refused before onnx parses the text (3 MB of JSON took a minute and 220 MiB before), naming the bound, the
    format and the keyword, by every entry point (text models are given as paths)."""
    for extension, text_format in _TEXT_FORMATS:
        path = _text_model(tmp_path, 40, extension, text_format)
        bound = text_bound(path.read_bytes(), text_format)
        assert 41 <= bound <= 50  # (40 nodes and a constant: a bound, and near the count)
        for call in _entry_points(tmp_path / "out"):
            for keyword, things in (("max_nodes", "nodes"), ("max_constants", "constants")):
                with pytest.raises(dmlbridge.InvalidArgumentError,
                                   match=rf"model '.*m.{extension}' is a {text_format} text model of {bound} .*, so "
                                         rf"it may hold that many {things}, more than {keyword}=10 "
                                         r"\(--max-[a-z]+ on the command line\).*save it as a binary \.onnx"):
                    call(path, **{keyword: 10})
        path.unlink()
    assert not list(tmp_path.iterdir())


def test_a_text_model_within_its_bound_is_parsed_and_converted(tmp_path: Path) -> None:
    for extension, text_format in _TEXT_FORMATS:
        path = _text_model(tmp_path, 40, extension, text_format)
        bound = text_bound(path.read_bytes(), text_format)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert list(dmlbridge.plan_model(path, max_nodes=bound, max_constants=bound).entries) == ["w"]


def test_the_command_line_refuses_a_large_text_model_before_parsing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _text_model(tmp_path, 40, "json", "json")
    assert run("convert", path, "-o", tmp_path / "w", "--quiet").returncode == 0
    _forbid_parsing(monkeypatch)
    for command in (["inspect", path], ["inspect", path, "--check"], ["convert", path, "-o", tmp_path / "x"],
                    ["verify", tmp_path / "w.json", path]):
        line = one_line_error(run(*command, "--max-nodes", "10"), "m.json", "json text model of",
                              "more than --max-nodes 10")
        assert "max_nodes" not in line
    assert not (tmp_path / "x.json").exists()
