"""The consumer suite's harness: an ONNX model run by ONNX Runtime's CPU provider, converted by dmlbridge for the
device's own target with every entry flagged DML_TENSOR_FLAG_OWNED_BY_DML, uploaded, and its entries bound to
DirectML operators through the manifest's descs as they are; and the comparisons.

- integers (and what only moves values: GATHER) exactly;
- float32 within the bound of a sum of K products computed in two orders, 2·K·eps·Σ|a·w| (each order is within
  K·eps·Σ|a·w| of the exact sum: Higham, Accuracy and Stability of Numerical Algorithms, 3.1);
- FLOAT16 within one ulp: the inputs are multiples of 1/8 small enough that every product and partial sum is
  exact in float32, so each side rounds once, when it writes, and this stack's writes round toward zero where
  ONNX Runtime rounds to nearest.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from gpu_runtime import TALLY
from onnx import numpy_helper

import dmlbridge
import dmlbridge.gpu
from dmlbridge.gpu.com import release
from dmlbridge.gpu.interfaces import IID, IDMLDevice

OWNED_BY_DML = 1


@dataclass
class ConsumerTally:
    """What the consumer suite did on DirectML, printed at the end of the run (its operators and mismatches count
    in the GPU suite's own line too)."""

    operators: int = 0
    graphs: int = 0  # compiled graphs run (IDMLDevice1::CompileGraph)
    outputs: int = 0  # operator and graph outputs compared with ONNX Runtime's CPU provider
    refusals: int = 0  # descs DirectML's validation is shown to refuse
    mismatches: int = 0
    controls: int = 0  # runs bound at a wrong offset on purpose, each of which must mismatch
    # Each consumer's own desc (PlanEntry.consumers[i]), as the suite binds them:
    constants: set[str] = field(default_factory=set)  # the entries bound through a consumer's desc
    consumers: set[tuple[str, int]] = field(default_factory=set)  # ... and the consumers (entry, index) bound
    taken: int = 0  # consumer descs in operators DirectML created, compiled and ran (wrong-offset controls aside)
    equal: int = 0  # ... whose outputs then equalled ONNX Runtime's
    refused: int = 0  # consumer descs in operators DirectML refused (CreateOperator)
    compile_limited: int = 0  # ... in operators this runtime cannot compile (CompileOperator E_FAIL) or run (created)
    cpu_read: int = 0  # constants checked to be read on the CPU: bound by no desc
    pending: int = 0  # consumer descs of the last operator run, until its outputs are compared
    models: list[str] = field(default_factory=list)  # a line per real model run (test_real_models.py)

    def failed(self, bad: bool) -> None:
        self.mismatches += bad
        TALLY.mismatches += bad


CONSUMERS = ConsumerTally()


def consumer_summary(terminalreporter: Any) -> None:
    """The consumer suite's closing line (nothing when it ran nothing)."""
    done = CONSUMERS
    if done.operators or done.graphs or done.refusals:
        terminalreporter.write_line(
            f"GPU consumers: {done.operators} operators and {done.graphs} graphs run, {done.outputs} outputs "
            f"compared with ONNX Runtime, {done.refusals} refusals checked, {done.controls} wrong-offset controls "
            f"run; {done.mismatches} mismatches")
    if done.constants or done.cpu_read:
        terminalreporter.write_line(
            f"GPU consumer descs: {len(done.constants)} constants, {len(done.consumers)} consumers, "
            f"{done.taken} taken, {done.equal} equal, {done.refused} refused, {done.compile_limited} compile-limited, "
            f"{done.cpu_read} CPU-read")
    for line in done.models:
        terminalreporter.write_line(f"GPU consumers of a real model: {line}")


def onnx_runtime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every graph output, by name, from ONNX Runtime's CPU provider."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [value.name for value in model.graph.output]
    return dict(zip(names, session.run(names, feeds), strict=True))


def magnitude(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Σ|a·w| of each output element of a model of sums of products (Conv, Gemm, MatMul): the model run on the
    absolute values of its constants and inputs (no cancellation: float32 gives it within K·eps)."""
    absolute = onnx.ModelProto()
    absolute.CopyFrom(model)
    for init in absolute.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(np.abs(numpy_helper.to_array(init)), init.name))
    return onnx_runtime(absolute, {name: np.abs(value) for name, value in feeds.items()})


def within(got: np.ndarray, want: np.ndarray, how: str, *, k: int = 0, size: np.ndarray | None = None,
           control: bool = False) -> bool:
    """Whether ``got`` (DirectML's) is ``want`` (ONNX Runtime's) as ``how`` says: "exact", "sum" (2·k·eps·size,
    ``size`` the Σ|a·w| of each element), "ulp" (FLOAT16, one ulp) or "close" (a recurrent network's sigmoids
    and tanhs, whose DirectML and ONNX Runtime approximations differ: within 1e-5 of each other, relative or
    absolute); counted in the suite's tally (``control``: a run bound at a wrong offset, counted apart)."""
    got, want = np.asarray(got), np.asarray(want)
    ok = got.shape == want.shape and got.dtype == want.dtype
    if ok and how == "exact":
        ok = bool(np.all((got == want) | (np.isnan(got) & np.isnan(want)) if got.dtype.kind == "f" else got == want))
    elif ok and how == "sum":
        assert size is not None and want.dtype == np.float32
        bound = 2 * k * np.finfo(np.float32).eps * size.astype(np.float64) * (1 + k * np.finfo(np.float32).eps)
        ok = bool(np.all(np.abs(got.astype(np.float64) - want.astype(np.float64)) <= bound))
    elif ok and how == "ulp":
        assert want.dtype == np.float16
        ordinal = [np.where(v.view(np.int16) < 0, -(v.view(np.int16) & 0x7FFF).astype(np.int32),
                            v.view(np.int16).astype(np.int32)) for v in (got, want)]
        ok = bool(np.all(np.abs(ordinal[0] - ordinal[1]) <= 1))
    elif ok and how == "close":
        ok = bool(np.allclose(got, want, rtol=1e-5, atol=1e-5))
    if control:
        CONSUMERS.controls += 1
        CONSUMERS.pending = 0
        return ok
    CONSUMERS.taken += CONSUMERS.pending  # (the consumer descs of the run these outputs came from)
    if ok:
        CONSUMERS.equal += CONSUMERS.pending
    CONSUMERS.pending = 0
    CONSUMERS.outputs += 1
    CONSUMERS.failed(not ok)
    return ok


def grid16(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """FLOAT16 values that are multiples of 1/8 in [-2, 2]: products and sums of a few hundred are exact in
    float32."""
    return (rng.integers(-16, 17, shape) / 8).astype(np.float16)


class ConsumerRun:
    """One model: ONNX Runtime's outputs (``expected``), its conversion (``plan``) uploaded (``uploaded``), and the
    inputs of the operator (or graph) being built, in the order they are asked for."""

    def __init__(self, device: dmlbridge.gpu.Device, folder: Path, model: onnx.ModelProto,
                 feeds: dict[str, np.ndarray], *, target: dmlbridge.Target | None = None,
                 converted: tuple[Any, Any] | None = None, flags: Any = "owned-by-dml",
                 input_shapes: dict[str, tuple[int, ...]] | None = None,
                 reference: onnx.ModelProto | None = None) -> None:
        """``converted``: the (plan, upload) of a larger model whose entries ``model`` reads (kept open here);
        else ``model`` itself is converted (at ``input_shapes``, the sizes of its free dimensions) and uploaded.
        ``reference``: the model ONNX Runtime's CPU provider runs for ``expected`` where it has no kernel for
        ``model``'s node (the same inputs, outputs and constants)."""
        self.device, self.feeds = device, feeds
        self.expected = onnx_runtime(reference if reference is not None else model, feeds)
        self.target = target if target is not None else dmlbridge.gpu.target_of(device)
        self._owns = converted is None
        if converted is None:
            self.plan = dmlbridge.convert_model(model, folder / "w", target=self.target, flags=flags,
                                                input_shapes=input_shapes, progress=False)
            self.uploaded = dmlbridge.gpu.upload(self.plan, device)
        else:
            self.plan, self.uploaded = converted
        self.scope = ""  # (the model's name, before its keys in the tally's constants)
        self.bindings: list[Any] = []
        self.consumers = 0  # consumer descs among the inputs asked for
        self.owned: list[int] = []
        self.outputs: list[tuple[tuple[int, ...], np.dtype[Any], int]] = []
        self._uploads: list[Any] = []
        self._keep: list[Any] = []

    def __enter__(self) -> ConsumerRun:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for uploaded in self._uploads:
            uploaded.close()
        if self._owns:
            self.uploaded.close()
            self.plan.close()

    def _input(self, desc: Any, binding: Any, owned: bool) -> Any:
        if owned:
            assert desc.buffer_desc.Flags == OWNED_BY_DML, "the manifest's desc is not flagged OWNED_BY_DML"
            self.owned.append(len(self.bindings))
        self.bindings.append(binding)
        self._keep.append(desc)
        return desc

    def absent(self) -> None:
        """An optional input left out: its slot is still bound, with nothing (DML_BINDING_TYPE_NONE), since
        DirectML counts a binding for every input of the operator, given or not."""
        self.bindings.append(None)

    def weight(self, key: str) -> Any:
        """An entry's desc as the manifest gives it, bound at initialization."""
        entry = self.plan.entries[key]
        assert entry.skipped is None, (key, entry.skipped)
        return self._input(entry.as_ctypes_tensor_desc(), self.uploaded.binding(key), True)

    def consumer(self, key: str, index: int = 0, *, at: str | None = None) -> Any:
        """An entry bound through the desc of its ``index``-th consumer as the plan gives it (``at``: bound at
        another entry's offset instead, a control that must mismatch)."""
        entry = self.plan.entries[key]
        assert entry.skipped is None, (key, entry.skipped)
        desc = entry.consumers[index].as_ctypes_tensor_desc()
        binding = self.uploaded.binding(key)
        if at is not None:  # (the same size, at an earlier entry's offset: inside the buffer, the wrong bytes)
            other = self.uploaded.binding(at)
            assert other.Offset < binding.Offset, (at, key)
            binding = type(binding)(binding.Buffer, other.Offset, binding.SizeInBytes)
        CONSUMERS.constants.add(self.scope + key)
        CONSUMERS.consumers.add((self.scope + key, index))
        self.consumers += 1
        return self._input(desc, binding, desc.buffer_desc.Flags == OWNED_BY_DML)

    def weight_seen_as(self, key: str, desc: dmlbridge.BufferTensorDesc) -> Any:
        """An entry bound through a desc dmlbridge made of it at run time (``broadcast_desc``)."""
        return self._input(dmlbridge.DML_TENSOR_DESC.pointing_at(desc.as_ctypes()), self.uploaded.binding(key),
                           True)

    def part(self, record: str, form: str, role: str, *, at: str | None = None) -> Any:
        """A quantized part's desc as the record gives it, bound at initialization (``at``: bound at an earlier
        entry's offset instead, a control that must mismatch)."""
        quantized = self.plan.quantized[record]
        parts = quantized.parts() if form == "split" else quantized.blocked_form()
        part = dict(zip(("weight", "scales", "zero_points"), parts, strict=True))[role]
        binding = self.uploaded.binding((record, form, role))
        if at is not None:
            other = self.uploaded.binding(at)
            assert other.Offset < binding.Offset, (at, record)
            binding = type(binding)(binding.Buffer, other.Offset, binding.SizeInBytes)
        return self._input(part.as_ctypes_tensor_desc(), binding, True)

    def part_desc(self, record: str, form: str, role: str) -> Any:
        quantized = self.plan.quantized[record]
        parts = quantized.parts() if form == "split" else quantized.blocked_form()
        return dict(zip(("weight", "scales", "zero_points"), parts, strict=True))[role]

    def feed(self, name: str, sizes: tuple[int, ...] | None = None,
             strides: tuple[int, ...] | None = None) -> Any:
        """A model input (or any array, by name in ``feeds``) at ``sizes`` (with ``strides``: its C-order values
        seen at those sizes and strides), uploaded; bound when the operator runs."""
        value = self.feeds[name]
        if strides is None:
            tensor = dmlbridge.prepare(value.reshape(sizes if sizes is not None else value.shape), target=self.target)
            desc = tensor.as_ctypes_tensor_desc()
        else:
            tensor = dmlbridge.prepare(value, target=self.target)
            desc = seen_as(tensor, sizes or value.shape, strides)
        uploaded = dmlbridge.gpu.upload_tensors([tensor], self.device)
        self._uploads.append(uploaded)
        return self._input(desc, uploaded.binding(0), False)

    def output(self, sizes: tuple[int, ...], dtype: Any,
               view: tuple[tuple[int, ...], tuple[int, ...]] | None = None) -> Any:
        """An output of ``sizes`` (its desc), packed, or written at ``view``'s sizes and strides."""
        tensor = dmlbridge.prepare(np.zeros(sizes, dtype), target=self.target)
        desc = tensor.as_ctypes_tensor_desc() if view is None else seen_as(tensor, *view)
        self.outputs.append((sizes, np.dtype(dtype), tensor.total_tensor_size_in_bytes))
        self._keep.append(desc)
        return desc

    def _decoded(self, results: list[np.ndarray]) -> list[np.ndarray]:
        return [np.frombuffer(data.tobytes()[: np.prod(sizes) * dtype.itemsize], dtype).reshape(sizes)
                for data, (sizes, dtype, _) in zip(results, self.outputs, strict=True)]

    def run(self, operator: Any) -> list[np.ndarray]:
        """Run one operator (an ``Operator`` of dml_operators.py, or a DML_OPERATOR_DESC) on the inputs asked for;
        its outputs, decoded at their sizes."""
        try:
            results = dmlbridge.gpu.run_operator(self.device, _desc(operator), self.bindings,
                                                 [size for _, _, size in self.outputs], owned_by_dml=self.owned)
        except dmlbridge.ComError as exc:
            if "CompileOperator" in str(exc):
                CONSUMERS.compile_limited += self.consumers
            elif "CreateOperator" in str(exc):
                CONSUMERS.refused += self.consumers
            raise
        CONSUMERS.pending = self.consumers
        TALLY.operators += 1
        CONSUMERS.operators += 1
        return self._decoded(results)

    def run_graph(self, operators: list[Any], input_edges: list[Any], intermediate_edges: list[Any],
                  output_edges: list[Any]) -> list[np.ndarray]:
        """Run the operators as one compiled graph: graph input i is the i-th input asked for."""
        results = dmlbridge.gpu.run_graph(self.device, [_desc(op) for op in operators], input_edges,
                                          intermediate_edges, output_edges, self.bindings,
                                          [size for _, _, size in self.outputs], owned_by_dml=self.owned)
        CONSUMERS.pending = self.consumers
        CONSUMERS.graphs += 1
        return self._decoded(results)

    def reset(self) -> None:
        """Forget the inputs and outputs asked for (the next operator on the same upload)."""
        self.bindings, self.owned, self.outputs = [], [], []
        self.consumers = 0


def created(device: dmlbridge.gpu.Device, operator: Any, consumers: int) -> bool:
    """Whether DirectML creates and compiles ``operator`` (an ``Operator`` of dml_operators.py), never running it:
    for an operator this runtime cannot run (MULTIHEAD_ATTENTION's shaders remove its device). Its ``consumers``
    descs count as compile-limited, never as taken."""
    made: list[int] = []
    try:
        made.append(device.create(IDMLDevice.CreateOperator, ctypes.byref(_desc(operator)),
                                  ctypes.byref(IID.IDMLOperator), on=device.dml))
        made.append(device.create(IDMLDevice.CompileOperator, made[0], 0, ctypes.byref(IID.IDMLCompiledOperator),
                                  on=device.dml))
    except dmlbridge.ComError:
        CONSUMERS.refused += consumers
        return False
    finally:
        for address in reversed(made):
            release(address)
    CONSUMERS.compile_limited += consumers
    return True


def seen_as(tensor: Any, sizes: tuple[int, ...], strides: tuple[int, ...]) -> Any:
    """A DML_TENSOR_DESC of a prepared tensor's bytes (or an operator output's, by its prepared zeros) at other
    sizes and strides (its type, flags and TotalTensorSizeInBytes kept)."""
    view = tensor.buffer_desc._replace(sizes=tuple(sizes), strides=tuple(strides))
    return dmlbridge.DML_TENSOR_DESC.pointing_at(view.as_ctypes())


def _desc(operator: Any) -> Any:
    """The DML_OPERATOR_DESC of an ``Operator`` (its ``desc``), or the one given (``QuantizedWeight.operator_desc``)."""
    return operator if isinstance(operator, dmlbridge.gpu.DML_OPERATOR_DESC) else operator.desc


def sizes_of(desc: Any) -> tuple[int, ...]:
    """The Sizes of a DML_TENSOR_DESC."""
    buffer = desc.buffer_desc
    return tuple(buffer.Sizes[: buffer.DimensionCount])


__all__ = ["CONSUMERS", "ConsumerRun", "consumer_summary", "created", "grid16", "magnitude", "onnx_runtime", "seen_as",
           "sizes_of", "within"]
