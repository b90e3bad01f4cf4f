"""The command line's tests' models: the demo's sample model (built once) and a small model of three constants."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from builders import model_of

from dmlbridge.cli.demo import build_sample_model


@pytest.fixture(scope="session")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's sample model (every kind of constant, external data, quantized weights): read, never written."""
    return Path(build_sample_model(tmp_path_factory.mktemp("sample")))


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """``small.onnx``, alone in a folder of its own: a model whose INT64 values fit 32 bits, so narrow and emulate
    targets can take it."""
    path = tmp_path / "small.onnx"
    onnx.save(model_of({"ids": np.array([[1, -2], [3, 4]], np.int64),
                        "half": np.arange(6, dtype=np.float16).reshape(2, 3),
                        "w": np.array([1.5, -2.0], np.float32)}), path)
    return path
