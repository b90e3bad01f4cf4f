"""What dmlbridge knows per ONNX operator: which of its inputs ONNX Runtime's DirectML provider binds to a DirectML
operator, which it reads on the CPU, and the layout each bound input's desc wants. One table, :data:`OPERATORS`,
keyed by (domain, op type, the first opset the row holds for), following ONNX Runtime :data:`ORT_VERSION`
(``onnxruntime/core/providers/dml/DmlExecutionProvider/src/``: ``Operators/DmlOperator*.cpp`` for what is bound and
its desc, ``Operators/OperatorRegistration.cpp``'s ``requiredConstantCpuInputs`` for what is read on the CPU);
docs/directml-facts.md gives the source of each row and what DirectML confirmed.

An input is read on one of three places (``reads_on``):

- ``"gpu"``: a DirectML operator binds it (``dml_operator``, its ``DML_OPERATOR_TYPE`` name without the prefix),
  with a desc in one of these layouts (``dmlbridge.model.consumer_layouts`` computes them):

  - *leading*: the ONNX shape with leading 1s (what every operator of rank-preserving inputs takes);
  - *channel*: a 1-D per-channel constant on axis 1, ``[1, C, 1, ...]`` at the node's dimension count (a
    quantized convolution's 0-D filter scale or zero point as ``[1, 1, 1, 1]``);
  - *spatial*: a convolution's weight at the convolution's dimension count, 1s before its spatial axes;
  - *rank*: leading 1s up to the node's dimension count (GATHER's data and indices; a quantized convolution's
    scalars; a quantized matrix product's scales and zero points; MEAN_VARIANCE_NORMALIZATION2's scale and bias,
    at its input's rank; a RotaryEmbedding's cos and sin caches and position ids, at 4);
  - *broadcast*: at the output's sizes, strides of 0 where the constant repeats (every ELEMENT_WISE_* tensor,
    GEMM's C, a MatMul's B at the batch sizes; an Attention's weights at ``[B, in, 3W]`` and bias at
    ``[B, S, 3W]``);
  - *axis*: a 1-D per-axis constant placed on the node's ``axis`` of the output's sizes, then broadcast (a per-axis
    scale or zero point of ELEMENT_WISE_(DE)QUANTIZE_LINEAR; a scalar is broadcast whole);
  - *rnn*: exactly 4 dimensions, leading 1s (LSTM, GRU and RNN take nothing else);
  - *group*: a GroupNorm's per-channel gamma or beta at the sizes MEAN_VARIANCE_NORMALIZATION1 reads its NHWC input
    at, ``[N, C/groups, H·W, groups]``, strides ``[0, 1, 0, C/groups]``;
  - *unknown*: ONNX Runtime binds it, but dmlbridge does not lay it out yet: it keeps its ONNX layout, with a note.

- ``"cpu"``: ONNX Runtime reads its values on the CPU, as an attribute (a Reshape's shape, a Slice's starts), or
  runs the node on the CPU (an operator the provider has no kernel for);
- ``"none"``: nothing reads its values on either: only its shape (Shape, Size), or control flow, or a node ONNX
  Runtime folds away before it runs (Identity, a Cast of a constant).

Each bound layout came with a manifest format (``since_format``): format 6 laid out convolutions,
normalizations, Gather's data, Gemm's C and MatMul's B; format 7 every row here. A manifest of an older format is
read by its own rule.

    >>> rule = input_rule("", "Add", 17, 1)
    >>> rule.reads_on, rule.dml_operator, rule.layout
    ('gpu', 'ELEMENT_WISE_ADD', 'broadcast')
    >>> input_rule("", "Reshape", 14, 1).reads_on
    'cpu'
    >>> input_rule("", "Clip", 6, 1) is None, input_rule("", "Clip", 13, 1).reads_on
    (True, 'cpu')
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, NamedTuple

__all__ = [
    "CONSUMER_LAYOUTS_VERSION",
    "OPERATORS",
    "ORT_VERSION",
    "PER_OPERATOR_VERSION",
    "InputRule",
    "Layout",
    "OperatorRule",
    "ReadsOn",
    "input_rule",
    "layouts_of",
    "operator_rule",
]

ORT_VERSION = "1.24.4"
"""The ONNX Runtime release whose DirectML provider the table follows (the one whose onnxruntime-directml wheel
ships the DirectML.dll the test suite runs)."""

CONSUMER_LAYOUTS_VERSION = 6
"""The first manifest format whose consumers record what convolutions, normalizations, Gather's data, Gemm's C and
MatMul's B need (``dims`` or ``sizes``)."""
PER_OPERATOR_VERSION = 7
"""The first manifest format that lays out every row of the table and gives each consumer its own desc."""

ReadsOn = Literal["gpu", "cpu", "none"]
Layout = Literal["leading", "channel", "spatial", "rank", "broadcast", "axis", "rnn", "group", "unknown"]


class InputRule(NamedTuple):
    """How one input of an operator is read: ``reads_on`` (see the module docstring), the DirectML operator that
    binds it and the ``layout`` its desc wants, ``unsigned``: bound as the unsigned type of its width (ONNX
    Runtime's ``ForceUnsignedDataType``: an RNN's sequence_lens), the manifest format that first laid it out, and
    ``takes_owned``: whether the operator takes it flagged DML_TENSOR_FLAG_OWNED_BY_DML.

    Example:
        >>> input_rule("", "LSTM", 14, 4)
        InputRule(reads_on='gpu', dml_operator='LSTM', layout='rnn', unsigned=True, since_format=7, takes_owned=False)
    """

    reads_on: ReadsOn
    dml_operator: str | None = None
    layout: Layout = "leading"
    unsigned: bool = False
    since_format: int = PER_OPERATOR_VERSION
    takes_owned: bool = True
    """Whether the operator takes it flagged DML_TENSOR_FLAG_OWNED_BY_DML (an RNN's inputs: no)."""


class OperatorRule(NamedTuple):
    """One row of :data:`OPERATORS`: the rule of each input by index, the rule of any input not named (None: the
    input does not exist, or a variadic one as ``others``), and where ONNX Runtime's provider says so."""

    inputs: dict[int, InputRule]
    others: InputRule | None
    source: str


_CPU = InputRule("cpu")
_NONE = InputRule("none")


def _gpu(operator: str, layouts: dict[int, Layout] | None = None, others: Layout | None = "leading",
         source: str = "", since: dict[int, int] | None = None, unsigned: Iterable[int] = (),
         cpu: Iterable[int] = (), not_owned: Iterable[int] = ()) -> OperatorRule:
    """A row for an operator bound to ``operator``: ``layouts`` by input, ``others`` for the rest (None: there are
    no others), ``since``: the format that laid an input out before this one, ``cpu``: inputs read on the CPU."""
    unsigned, not_owned = set(unsigned), set(not_owned)
    inputs = {index: InputRule("gpu", operator, layout, index in unsigned,
                               (since or {}).get(index, PER_OPERATOR_VERSION), index not in not_owned)
              for index, layout in (layouts or {}).items()}
    inputs.update(dict.fromkeys(cpu, _CPU))
    return OperatorRule(inputs, None if others is None else InputRule("gpu", operator, others), source)


def _cpu_inputs(indices: Iterable[int], source: str = "OperatorRegistration.cpp",
                binds: str | None = None) -> OperatorRule:
    """A row whose ``indices`` are read on the CPU, its other inputs bound as they are (to ``binds``, where named)."""
    return OperatorRule(dict.fromkeys(indices, _CPU), InputRule("gpu", binds, "leading"), source)


def _not_run(source: str = "no DirectML kernel") -> OperatorRule:
    """A row for an operator the provider does not run: every input on the CPU."""
    return OperatorRule({}, _CPU, source)


def _unread(source: str) -> OperatorRule:
    return OperatorRule({}, _NONE, source)


def _skip_normalization(inputs: dict[int, Literal["add", "rank"]]) -> OperatorRule:
    """A row for SkipLayerNormalization and its simplified form: the inputs marked "add" bound to ELEMENT_WISE_ADD at
    the input's sizes (the skip, the bias), the others to MEAN_VARIANCE_NORMALIZATION2 at its rank."""
    rules = {index: InputRule("gpu", "ELEMENT_WISE_ADD", "broadcast") if kind == "add" else
             InputRule("gpu", "MEAN_VARIANCE_NORMALIZATION2", "rank") for index, kind in inputs.items()}
    return OperatorRule(rules, None, _SKIP_SOURCE)


def _rotary_embedding() -> OperatorRule:
    """RotaryEmbedding's row: its position ids and caches bound to GATHER at 4 dimensions, its input multiplied
    (seen as 5-D halves, which dmlbridge does not lay out)."""
    row = _gpu("GATHER", {1: "rank", 2: "rank", 3: "rank"}, None, _ROTARY_SOURCE)
    return row._replace(inputs={0: InputRule("gpu", "ELEMENT_WISE_MULTIPLY", "unknown"), **row.inputs})


def _attention() -> OperatorRule:
    """Attention's row: its input, weights and bias to one GEMM (the weights and bias broadcast to the batch, the
    bias to the sequence too), the rest to MULTIHEAD_ATTENTION as they are, but a mask, which dmlbridge does not
    lay out."""
    row = _gpu("MULTIHEAD_ATTENTION", {3: "unknown"}, source=_ATTENTION_SOURCE)
    gemm = _gpu("GEMM", {0: "leading", 1: "broadcast", 2: "broadcast"})
    return row._replace(inputs={**gemm.inputs, **row.inputs})


_ELEMENT_WISE = {  # op type -> (DML operator, first opset with today's broadcasting)
    "Add": "ELEMENT_WISE_ADD", "Sub": "ELEMENT_WISE_SUBTRACT", "Mul": "ELEMENT_WISE_MULTIPLY",
    "Div": "ELEMENT_WISE_DIVIDE", "Pow": "ELEMENT_WISE_POW", "Max": "ELEMENT_WISE_MAX", "Min": "ELEMENT_WISE_MIN",
    "Mean": "ELEMENT_WISE_MEAN", "Sum": "ELEMENT_WISE_ADD", "Equal": "ELEMENT_WISE_LOGICAL_EQUALS",
    "Less": "ELEMENT_WISE_LOGICAL_LESS_THAN", "Greater": "ELEMENT_WISE_LOGICAL_GREATER_THAN",
    "LessOrEqual": "ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL",
    "GreaterOrEqual": "ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL", "And": "ELEMENT_WISE_LOGICAL_AND",
    "Or": "ELEMENT_WISE_LOGICAL_OR", "Xor": "ELEMENT_WISE_LOGICAL_XOR", "Where": "ELEMENT_WISE_IF",
    "PRelu": "ACTIVATION_PARAMETERIZED_RELU", "Mod": "ELEMENT_WISE_MODULUS_FLOOR",
    "BitShift": "ELEMENT_WISE_BIT_SHIFT_LEFT", "BitwiseAnd": "ELEMENT_WISE_BIT_AND",
    "BitwiseOr": "ELEMENT_WISE_BIT_OR", "BitwiseXor": "ELEMENT_WISE_BIT_XOR",
}
_ELEMENT_WISE_SOURCE = ("DmlOperatorElementwise.cpp: every input's TensorDesc at the output's sizes (broadcast); a "
                        "Pow's one-element constant exponent read on the CPU (ELEMENT_WISE_CONSTANT_POW)")
_RNN_SOURCE = ("DmlOperatorRecurrentNeuralNetwork.cpp: every tensor 4-D, leading 1s; sequence_lens as UINT32; "
               "none OWNED_BY_DML (CreateOperator refuses them flagged: measured)")
_NORMALIZATION_SOURCE = ("DmlOperatorLayerNormalization.cpp: scale and bias with leading 1s to the input's rank "
                         "(MEAN_VARIANCE_NORMALIZATION2, UseMean off when simplified)")
_SKIP_SOURCE = ("DmlOperatorSkipLayerNormalization.cpp: ELEMENT_WISE_ADD of skip, then of bias broadcast to the "
                "input's sizes; gamma and beta with leading 1s to MEAN_VARIANCE_NORMALIZATION2")
_MVN2 = "MEAN_VARIANCE_NORMALIZATION2"
_ROTARY_SOURCE = ("DmlOperatorRotaryEmbedding.cpp: every tensor at 4 dimensions, leading 1s; cos_cache and "
                  "sin_cache GATHERed on axis 2 by position_ids (a 1-D one, an offset, is added to a sequence)")
_ATTENTION_SOURCE = ("DmlOperatorAttention.cpp: GEMM of the input [B, S, in] and the weights [in, 3W] broadcast to "
                     "[B, in, 3W], plus the bias [3W] broadcast to [B, S, 3W]; then MULTIHEAD_ATTENTION, its mask "
                     "broadcast to [B, heads, S, S]; none of it when unidirectional, do_rotary or "
                     "past_present_share_buffer is set (the CPU runs it)")
_MHA_SOURCE = ("DmlOperatorMultiHeadAttention.cpp: every input as it is (at least 1 dimension), but the key padding "
               "mask, broadcast to [B, heads, S, T] (a 1-D one: [1, B])")
_GROUP_SOURCE = ("DmlOperatorGroupNorm.cpp: gamma and beta at the NHWC input's sizes as MEAN_VARIANCE_NORMALIZATION1 "
                 "reads it, [N, C/groups, H*W, groups], strides [0, 1, 0, C/groups]")
_QUANTIZE_SOURCE = "DmlOperatorQuantization.cpp: scale and zero point broadcast to the input's sizes on axis"
_CONV_SOURCE = "DmlOperatorConvolution.cpp"
_ONNX = ""
_MS = "com.microsoft"

Key = tuple[str, str, int]

OPERATORS: dict[Key, OperatorRule] = {
    # --- bound, with layouts of their node's -------------------------------------------------------------------
    **{(_ONNX, op, 7): _gpu(dml, others="broadcast", source=_ELEMENT_WISE_SOURCE) for op, dml in _ELEMENT_WISE.items()},
    (_ONNX, "Conv", 1): _gpu("CONVOLUTION", {1: "spatial", 2: "channel"}, since={1: 6, 2: 5}, source=_CONV_SOURCE),
    (_ONNX, "ConvTranspose", 1): _gpu("CONVOLUTION", {1: "spatial", 2: "channel"}, since={1: 6, 2: 5},
                                      source=_CONV_SOURCE),
    (_ONNX, "BatchNormalization", 1): _gpu("BATCH_NORMALIZATION", dict.fromkeys((1, 2, 3, 4), "channel"),
                                           since=dict.fromkeys((1, 2, 3, 4), 5),
                                           source="DmlOperatorBatchNormalization.cpp"),
    (_ONNX, "InstanceNormalization", 1): _gpu("MEAN_VARIANCE_NORMALIZATION1", dict.fromkeys((1, 2), "channel"),
                                              since=dict.fromkeys((1, 2), 5),
                                              source="DmlOperatorInstanceNormalization.cpp"),
    (_ONNX, "Gather", 1): _gpu("GATHER", {0: "rank", 1: "rank"}, since={0: 6},
                               source="DmlOperatorGather.cpp: data, indices and output at one dimension count"),
    (_ONNX, "Gemm", 1): _gpu("GEMM", {2: "broadcast"}, since={2: 6}, source="DmlOperatorGemm.cpp"),
    (_ONNX, "MatMul", 1): _gpu("GEMM", {1: "broadcast"}, since={1: 6}, source="DmlOperatorMatMul.cpp"),
    (_ONNX, "LayerNormalization", 17): _gpu(_MVN2, {1: "rank", 2: "rank"}, source=_NORMALIZATION_SOURCE),
    (_MS, "LayerNormalization", 1): _gpu(_MVN2, {1: "rank", 2: "rank"}, source=_NORMALIZATION_SOURCE),
    (_ONNX, "SimplifiedLayerNormalization", 1): _gpu(_MVN2, {1: "rank"}, source=_NORMALIZATION_SOURCE),
    (_MS, "SimplifiedLayerNormalization", 1): _gpu(_MVN2, {1: "rank"}, source=_NORMALIZATION_SOURCE),
    (_MS, "SkipLayerNormalization", 1): _skip_normalization({0: "add", 1: "add", 2: "rank", 3: "rank", 4: "add"}),
    (_MS, "SkipSimplifiedLayerNormalization", 1): _skip_normalization({0: "add", 1: "add", 2: "rank", 3: "rank"}),
    (_ONNX, "LSTM", 1): _gpu("LSTM", dict.fromkeys(range(8), "rnn"), None, _RNN_SOURCE, unsigned=(4,),
                                not_owned=range(8)),
    (_ONNX, "GRU", 1): _gpu("GRU", dict.fromkeys(range(6), "rnn"), None, _RNN_SOURCE, unsigned=(4,),
                                not_owned=range(6)),
    (_ONNX, "RNN", 1): _gpu("RNN", dict.fromkeys(range(6), "rnn"), None, _RNN_SOURCE, unsigned=(4,),
                                not_owned=range(6)),
    (_ONNX, "DequantizeLinear", 10): _gpu("ELEMENT_WISE_DEQUANTIZE_LINEAR", {1: "axis", 2: "axis"},
                                          source=_QUANTIZE_SOURCE),
    (_ONNX, "QuantizeLinear", 10): _gpu("ELEMENT_WISE_QUANTIZE_LINEAR", {1: "axis", 2: "axis"},
                                        source=_QUANTIZE_SOURCE),
    (_ONNX, "QLinearConv", 10): _gpu("QUANTIZED_LINEAR_CONVOLUTION", {
        1: "rank", 2: "rank", 3: "spatial", 4: "channel", 5: "channel", 6: "rank", 7: "rank", 8: "channel"},
        source="DmlOperatorQLinearConv.cpp: scalars [1,1,1,1], per channel [1,M,1,1]"),
    (_ONNX, "ConvInteger", 10): _gpu("CONVOLUTION_INTEGER", {1: "spatial"}, source="DmlOperatorConvInteger.cpp"),
    (_ONNX, "MatMulInteger", 10): _gpu("MATRIX_MULTIPLY_INTEGER", {1: "broadcast"},
                                       source="DmlOperatorMatMulInteger.cpp"),
    (_ONNX, "QLinearMatMul", 10): _gpu("QUANTIZED_LINEAR_MATRIX_MULTIPLY", {
        **dict.fromkeys((1, 2, 4, 5, 6, 7), "rank"), 3: "broadcast"}, None,
        source="DmlOperatorQLinearMatMul.cpp: scales and zero points at A's dimension count (a per-column one of B "
               "on the last axis; a per-row one of A or the output on the one before, which dmlbridge does not lay "
               "out)"),
    (_ONNX, "Concat", 1): _gpu("JOIN", source="DmlOperatorConcat.cpp: every input at the output's dimension count"),
    (_MS, "MatMulNBits", 1): _gpu("DEQUANTIZE", source="DmlOperatorMatMulNBits.cpp: bound through its quantized "
                                                      "record (UploadPlan.quantized)"),
    (_MS, "Attention", 1): _attention(),
    (_MS, "MultiHeadAttention", 1): _gpu("MULTIHEAD_ATTENTION", {4: "unknown"}, source=_MHA_SOURCE),
    (_MS, "RotaryEmbedding", 1): _rotary_embedding(),
    (_MS, "GroupQueryAttention", 1): _gpu("MULTIHEAD_ATTENTION", others="unknown", cpu=(6,),
                                          source="DmlOperatorGroupQueryAttention.cpp"),
    (_MS, "GroupNorm", 1): _gpu("MEAN_VARIANCE_NORMALIZATION1", {0: "unknown", 1: "group", 2: "group"}, None,
                                _GROUP_SOURCE),
    (_ONNX, "Einsum", 12): _gpu("GEMM", others="rank", source="DmlOperatorEinSum.cpp: by the equation's form "
                                                             "(dmlbridge.model.einsum), leading 1s to 4 dimensions"),
    # --- inputs read on the CPU, as attributes (requiredConstantCpuInputs) -----------------------------------------
    (_ONNX, "Reshape", 5): _cpu_inputs((1,)),
    (_ONNX, "Slice", 10): _cpu_inputs((1, 2, 3, 4), "DmlOperatorSlice.cpp", "SLICE1"),
    (_ONNX, "Resize", 10): _cpu_inputs((1,)),
    (_ONNX, "Resize", 11): _cpu_inputs((1, 2, 3)),
    (_ONNX, "Upsample", 9): _cpu_inputs((1,)),
    (_ONNX, "Pad", 11): _cpu_inputs((1, 2)),
    (_ONNX, "Pad", 18): _cpu_inputs((1, 2, 3)),
    (_ONNX, "Clip", 6): _gpu("ELEMENT_WISE_CLIP", {}, None),
    (_ONNX, "Clip", 11): _cpu_inputs((1, 2)),
    (_ONNX, "Expand", 8): _cpu_inputs((1,)),
    (_ONNX, "Tile", 6): _cpu_inputs((1,)),
    (_ONNX, "Squeeze", 13): _cpu_inputs((1,)),
    (_ONNX, "Unsqueeze", 13): _cpu_inputs((1,)),
    (_ONNX, "ReduceSum", 13): _cpu_inputs((1,)),
    **{(_ONNX, op, 18): _cpu_inputs((1,)) for op in (
        "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
        "ReduceLogSumExp", "ReduceSumSquare")},
    (_ONNX, "Split", 13): _cpu_inputs((1,)),
    (_ONNX, "TopK", 10): _cpu_inputs((1,)),
    (_ONNX, "ConstantOfShape", 9): _cpu_inputs((0,)),
    (_ONNX, "Range", 11): _cpu_inputs((0, 1, 2)),
    (_ONNX, "OneHot", 9): _cpu_inputs((1,)),
    (_ONNX, "CumSum", 11): _cpu_inputs((1,)),
    (_ONNX, "Trilu", 14): _cpu_inputs((1,)),
    (_ONNX, "NonMaxSuppression", 10): _cpu_inputs((2, 3, 4)),
    (_ONNX, "Dropout", 12): _cpu_inputs((1, 2)),
    # --- read by nothing: only the shape, control flow, or folded away ---------------------------------------------
    (_ONNX, "Shape", 1): _unread("a Shape reads its input's shape, not its values"),
    (_ONNX, "Size", 1): _unread("a Size reads its input's shape, not its values"),
    (_ONNX, "Identity", 1): _unread("ONNX Runtime folds an Identity of a constant away"),
    (_ONNX, "Cast", 1): _unread("ONNX Runtime folds a Cast of a constant away"),
    (_ONNX, "If", 1): _unread("control flow"),
    (_ONNX, "Loop", 1): _unread("control flow"),
    (_ONNX, "Scan", 8): _unread("control flow"),
    # --- nodes the provider does not run ----------------------------------------------------------------------------
    (_MS, "DynamicQuantizeLSTM", 1): _not_run(),
    (_MS, "GatherBlockQuantized", 1): _not_run(),
}
"""Per (domain, op type, first opset), how ONNX Runtime's DirectML provider reads each input (see the module
docstring). The domain is "" for ONNX's ("ai.onnx" is looked up as "")."""

_BY_OPERATOR: dict[tuple[str, str], list[tuple[int, OperatorRule]]] = {}
for (_domain, _op, _since), _rule in sorted(OPERATORS.items(), key=lambda item: -item[0][2]):
    _BY_OPERATOR.setdefault((_domain, _op), []).append((_since, _rule))


def operator_rule(domain: str, op_type: str, opset: int | None) -> OperatorRule | None:
    """The row for a node (None: the table has none: an operator dmlbridge knows nothing of). ``opset``: the
    model's opset for the node's domain (None: unknown, the newest row)."""
    rows = _BY_OPERATOR.get(("" if domain == "ai.onnx" else domain, op_type))
    if not rows:
        return None
    return next((rule for since, rule in rows if opset is None or since <= opset), None)


def layouts_of(op_type: str, index: int) -> frozenset[Layout | None] | None:
    """The layouts the table gives input ``index`` of ``op_type`` (another domain's as ``domain:Op``) at any opset
    (None for one it binds as it is; the whole result None: an operator the table does not know), for a manifest
    reader to check a recorded layout against.

        >>> layouts_of("Conv", 2) == {None, "channel"}, layouts_of("Custom:Op", 0)
        (True, None)
    """
    domain, _, op = op_type.rpartition(":")
    rows = _BY_OPERATOR.get((domain, op))
    if not rows:
        return None
    rules = [rule.inputs.get(index, rule.others) for _, rule in rows]
    # (None always: an opset before the table's first row for the operator binds it in its ONNX layout)
    return frozenset({None} | {None if rule.layout in ("leading", "unknown") else rule.layout
                               for rule in rules if rule is not None and rule.reads_on == "gpu"})


def input_rule(domain: str, op_type: str, opset: int | None, index: int) -> InputRule | None:
    """How input ``index`` of a node is read (None: the table has no row for it, or the input is not one the
    operator has at that opset)."""
    rule = operator_rule(domain, op_type, opset)
    if rule is None:
        return None
    return rule.inputs.get(index, rule.others)
