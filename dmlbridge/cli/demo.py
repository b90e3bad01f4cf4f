"""``dmlbridge demo``: build a small sample model, convert it, verify it, and print what happened.

The sample holds a constant of every ONNX type DirectML can take (directly or widened), a STRING constant (to
show a skipped entry), a ``Constant`` node, an ``If`` node whose branches carry their own constants, one weight
stored as external data beside the model, which is what real exported models look like, and one quantized weight
of each kind: a MatMulNBits, a blocked DequantizeLinear and a GatherBlockQuantized
(see :mod:`dmlbridge.quantized.records`).
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import TextIO

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from dmlbridge.cli.report import format_plan, wrap_text
from dmlbridge.errors import DestinationError
from dmlbridge.plan.upload_plan import load_plan
from dmlbridge.writing.convert import convert_model

__all__ = ["build_sample_model", "quantized_arrays", "run_demo", "sample_arrays"]


def sample_arrays() -> dict[str, np.ndarray]:
    """One small array per convertible ONNX type, named ``w_<type>`` (values chosen to exercise signs,
    fractions and the sub-byte packings), plus the 64x64 FLOAT ``weight`` that goes to external data."""
    floats = np.array([[0.0, 1.5, -2.0], [0.25, -0.5, 3.0]])
    arrays: dict[str, np.ndarray] = {
        "w_float": floats.astype(np.float32),
        "w_double": floats.astype(np.float64),
        "w_float16": floats.astype(np.float16),
        "w_bfloat16": floats.astype(ml_dtypes.bfloat16),
        "w_float8e4m3fn": floats.astype(ml_dtypes.float8_e4m3fn),
        "w_float8e4m3fnuz": floats.astype(ml_dtypes.float8_e4m3fnuz),
        "w_float8e5m2": floats.astype(ml_dtypes.float8_e5m2),
        "w_float8e5m2fnuz": floats.astype(ml_dtypes.float8_e5m2fnuz),
        "w_float8e8m0": np.array([0.5, 1.0, 2.0, 4.0]).astype(ml_dtypes.float8_e8m0fnu),
        "w_float4e2m1": floats.astype(ml_dtypes.float4_e2m1fn),
        "w_float6e2m3": floats.astype(ml_dtypes.float6_e2m3fn),
        "w_float6e3m2": floats.astype(ml_dtypes.float6_e3m2fn),
        "w_int8": np.array([-128, -1, 0, 1, 127], dtype=np.int8),
        "w_uint8": np.array([0, 1, 128, 255], dtype=np.uint8),
        "w_int16": np.array([-32768, -2, 0, 3, 32767], dtype=np.int16),
        "w_uint16": np.array([0, 1, 65535], dtype=np.uint16),
        "w_int32": np.array([-(2**31), -1, 0, 2**31 - 1], dtype=np.int32),
        "w_uint32": np.array([0, 1, 2**32 - 1], dtype=np.uint32),
        "w_int64": np.array([-(2**40), -1, 0, 2**40], dtype=np.int64),
        "w_uint64": np.array([0, 1, 2**64 - 1], dtype=np.uint64),
        "w_bool": np.array([True, False, True], dtype=np.bool_),
        "w_int4": np.array([-8, -1, 0, 1, 7], dtype=ml_dtypes.int4),
        "w_uint4": np.array([0, 1, 9, 15, 4], dtype=ml_dtypes.uint4),
        "w_int2": np.array([-2, -1, 0, 1, 1], dtype=ml_dtypes.int2),
        "w_uint2": np.array([0, 1, 2, 3, 2], dtype=ml_dtypes.uint2),
        "weight": np.linspace(-1.0, 1.0, 64 * 64, dtype=np.float32).reshape(64, 64),
    }
    return arrays


def quantized_arrays() -> dict[str, np.ndarray]:
    """The constants of the sample's quantized nodes: a MatMulNBits weight (N=4, K=48, 4 bits in blocks of 16,
    with zero points), an INT4 weight [4, 40] for a DequantizeLinear in blocks of 16 (40 is not whole blocks) and a
    4-bit embedding table [6, 32] packed in uint8 for a GatherBlockQuantized (both without zero points)."""
    codes = np.arange(4 * 3 * 8, dtype=np.int64)
    return {
        "q_B": ((codes * 37 + 11) % 256).astype(np.uint8).reshape(4, 3, 8),
        "q_scales": np.linspace(0.01, 0.12, 12, dtype=np.float32).reshape(4, 3),
        "q_zero_points": np.array([[0x87, 0x08], [0x78, 0x07], [0x88, 0x09], [0x69, 0x08]], dtype=np.uint8),
        "q_x": ((np.arange(160) % 16) - 8).astype(ml_dtypes.int4).reshape(4, 40),
        "q_x_scale": np.linspace(0.5, 2.0, 12, dtype=np.float32).reshape(4, 3),
        "q_table": ((np.arange(96) * 29) % 256).astype(np.uint8).reshape(6, 16),
        "q_table_scales": np.linspace(0.1, 1.2, 12, dtype=np.float32).reshape(6, 2),
    }


def build_sample_model(directory: str | os.PathLike[str]) -> str:
    """Write ``sample.onnx`` and its external data file ``sample.weights`` into ``directory``; return the model's
    path."""
    initializers = [numpy_helper.from_array(a, name) for name, a in sample_arrays().items()]
    initializers.append(numpy_helper.from_array(np.array(True), "cond"))
    initializers.append(numpy_helper.from_array(np.array(["cat", "dog"], dtype=object), "labels"))
    initializers += [numpy_helper.from_array(a, name) for name, a in quantized_arrays().items()]

    then_branch = helper.make_graph(
        [helper.make_node("Add", ["X", "then_bias"], ["then_out"])],
        "then_branch",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.full((2, 3), 0.5, np.float32), "then_bias")],
    )
    else_branch = helper.make_graph(
        [
            helper.make_node("Constant", [], ["else_bias"], name="else_const",
                             value=numpy_helper.from_array(np.array([1, -1, 2], np.int32))),
            helper.make_node("Cast", ["else_bias"], ["else_bias_f"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["X", "else_bias_f"], ["else_out"]),
        ],
        "else_branch",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, 3])],
    )
    nodes = [
        helper.make_node("Constant", [], ["scale"], name="scale_const", value_floats=[0.5, 2.0, 4.0]),
        helper.make_node("Mul", ["X", "scale"], ["scaled"], name="mul"),
        helper.make_node("Add", ["scaled", "w_float"], ["Y"], name="add"),
        helper.make_node("If", ["cond"], ["Z"], name="branch", then_branch=then_branch, else_branch=else_branch),
        helper.make_node("MatMul", ["weight", "weight"], ["W2"], name="matmul"),
        # 4-bit weights as ONNX Runtime's quantizer and model builder store them:
        helper.make_node("MatMulNBits", ["A", "q_B", "q_scales", "q_zero_points"], ["QY"], name="qmatmul",
                         domain="com.microsoft", K=48, N=4, bits=4, block_size=16),
        helper.make_node("DequantizeLinear", ["q_x", "q_x_scale"], ["QD"], name="qdq", axis=1, block_size=16),
        helper.make_node("GatherBlockQuantized", ["q_table", "ids", "q_table_scales"], ["QG"], name="qgather",
                         domain="com.microsoft", bits=4, block_size=16, gather_axis=0, quantize_axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "dmlbridge_sample",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, 48]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, [2])],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("Z", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("W2", TensorProto.FLOAT, [64, 64]),
            helper.make_tensor_value_info("QY", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("QD", TensorProto.FLOAT, [4, 40]),
            helper.make_tensor_value_info("QG", TensorProto.FLOAT, [2, 32]),
        ],
        initializers,
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    path = os.path.join(os.fspath(directory), "sample.onnx")
    # Only `weight` (16 KiB) is above the threshold: it goes to sample.weights, the rest stays inline.
    onnx.save_model(
        model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="sample.weights",
        size_threshold=4096,
    )
    return path


def run_demo(keep: str | os.PathLike[str] | None = None, out: TextIO | None = None, width: int | None = None) -> int:
    """Build the sample model, convert it, load the plan back (checking the SHA-256), verify it against the model
    and print a summary, its lines fitted to ``width`` columns when given (see :mod:`dmlbridge.cli.report`). Works in
    a temporary folder that is removed afterwards, unless ``keep`` names a folder. Returns 0 (errors raise
    DmlBridgeError)."""
    out = sys.stdout if out is None else out

    def say(text: str) -> None:
        print(wrap_text(text, width), file=out)

    with tempfile.TemporaryDirectory(prefix="dmlbridge-demo-") as scratch:
        folder = scratch
        if keep is not None:
            folder = _kept_folder(os.fspath(keep))
        model_path = build_sample_model(folder)
        prefix = os.path.join(folder, "sample.dml")
        convert_model(model_path, prefix, checksum=True, progress=False).close()
        with load_plan(prefix + ".json", verify=True) as plan:
            plan.verify(model_path)
            say(f"dmlbridge demo: converted {model_path} (+ its external data sample.weights)")
            say(f"into {plan.bin_path} and {prefix}.json, for DirectML feature level "
                f"{plan.target.feature_level.dotted}:")
            print(file=out)
            print(format_plan(plan, width), file=out)
            int4 = plan.entries["w_int4"]
            data = plan.read("w_int4")
            print(file=out)
            say(f"e.g. w_int4 {plan.array('w_int4').tolist()} is {data.tobytes().hex(' ')} at offset "
                f"{int4.offset}: two nibbles per byte, low nibble first, padded to 4 bytes")
        say("verified: the buffer file's SHA-256 matches the manifest and every converted constant reads back bit "
            "for bit")
        if keep is not None:
            say(f"files kept in {folder}")
        else:
            say("(the files were in a temporary folder, removed now; `dmlbridge demo --keep DIR` keeps them)")
    return 0


def _kept_folder(folder: str) -> str:
    """``folder``, made when missing (its parents too); DestinationError, naming --keep, when it cannot be."""
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise DestinationError(f"--keep {folder!r} is a file, not a folder: give a folder (made if missing)")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise DestinationError(f"cannot create the folder {folder!r} (--keep): {exc.strerror or exc}") from None
    return folder
