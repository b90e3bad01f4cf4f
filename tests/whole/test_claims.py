"""No allocation on a claim, for whole models: convert_model in a child process under an address-space limit.

A model whose dims promise 2^40 elements with 10 bytes of data, as a graph initializer, a Constant node, a
sparse initializer or a sparse Constant (whose dense shape is the claim) or external data, fails with a
DmlBridgeError before anything of that size is allocated, and leaves no file behind. ``max_tensor_bytes`` (on
convert_model and ``--max-tensor-bytes`` on the command line) refuses large constants up front and every such
error names it; an allocation that fails anyway (a claim under the limit but over the memory there is) is a
TensorTooLargeError too, never a MemoryError.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from limits import ADDRESS_SPACE_LIMIT
from onnx import helper, numpy_helper

from dmlbridge import convert_model
from dmlbridge.errors import TensorTooLargeError

ROOT = Path(__file__).resolve().parents[2]

CHILD = ADDRESS_SPACE_LIMIT + textwrap.dedent(
    """
    import contextlib, io, os, resource, sys
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from dmlbridge.cli import commands as cli
    from dmlbridge.errors import DmlBridgeError
    from dmlbridge import convert_model

    base = sys.argv[1]

    N = 2**40
    TEN = b"0123456789"

    def model(inits=(), nodes=(), sparse=()):
        graph = helper.make_graph(list(nodes), "g", [], [], list(inits), sparse_initializer=list(sparse))
        return helper.make_model(graph).SerializeToString()

    def sparse(dims, values=np.arange(5, dtype=np.int16)):  # 5 INT16 values: 10 bytes of data
        indices = np.arange(len(values), dtype=np.int64)
        return helper.make_sparse_tensor(
            numpy_helper.from_array(values, "sp"), numpy_helper.from_array(indices, "sp_i"), list(dims))

    def external(dims):
        t = TensorProto(name="ext", data_type=TensorProto.FLOAT, dims=list(dims))
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value="ten.bin")
        return t

    def leftovers():
        # (The prefix's lock too: a conversion removes it as it ends, refused or not.)
        return sorted(n for n in os.listdir(base) if n.startswith(("out", ".out")))

    def case(label, data, **kw):
        path = os.path.join(base, "m.onnx")
        with open(path, "wb") as f:
            f.write(data)
        try:
            plan = convert_model(path, os.path.join(base, "out"), progress=False, **kw)
        except DmlBridgeError as exc:
            names = any(f"max_{limit}_bytes" in str(exc) for limit in ("tensor", "output", "buffer"))
            print(label, type(exc).__name__, "names-limit" if names else "-", leftovers() or "clean", flush=True)
        except BaseException as exc:
            print(label, "ESCAPED", type(exc).__name__, flush=True)
        else:
            skipped = [e.key for e in plan.skipped]
            print(label, "converted", "skipped=" + ",".join(skipped), flush=True)
            for name in leftovers():
                os.unlink(os.path.join(base, name))

    raw = TensorProto(name="raw", data_type=TensorProto.FLOAT, dims=[N], raw_data=TEN)
    typed = TensorProto(name="typed", data_type=TensorProto.INT8, dims=[N], int32_data=list(TEN))
    const = helper.make_node("Constant", [], ["k"], value=raw)
    sparse_const = helper.make_node("Constant", [], ["ks"], sparse_value=sparse([N]))
    unlimited = {"max_tensor_bytes": 2**62}

    case("initializer", model([raw]))
    case("initializer-unlimited", model([raw]), **unlimited)
    case("initializer-typed", model([typed]), **unlimited)
    case("constant", model(nodes=[const]))
    case("constant-unlimited", model(nodes=[const]), **unlimited)
    case("sparse-initializer", model(sparse=[sparse([N])]))
    case("sparse-initializer-2d", model(sparse=[sparse([2**20, 2**20])]))
    case("sparse-constant", model(nodes=[sparse_const]))
    # Past the limit's reach (more than DirectML's 2^32-1 elements): skipped, never densified; strict refuses.
    case("sparse-initializer-unlimited", model(sparse=[sparse([N])]), **unlimited)
    case("sparse-initializer-unlimited-strict", model(sparse=[sparse([N])]), strict=True, **unlimited)
    # 2^31 INT16 elements (4 GiB dense): under the default max_tensor_bytes, over the memory there is, and over the
    # default max_output_bytes (8 times the model's bytes and 64 MiB): refused before anything is allocated.
    case("sparse-4gib", model(sparse=[sparse([2**31])]))
    case("sparse-4gib-limit", model(sparse=[sparse([2**31])]), max_tensor_bytes=1 << 30)
    case("external", model([external([N])]))
    case("external-unlimited", model([external([N])]), **unlimited)
    case("external-8gib", model([external([2**31])]))
    with open(os.path.join(base, "m.onnx"), "wb") as f:
        f.write(model(sparse=[sparse([2**31])]))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = cli.main(["convert", os.path.join(base, "m.onnx"), "-o", os.path.join(base, "out"), "--quiet",
                           "--max-tensor-bytes", "1000000"])
    print("cli", status, "names-option" if "--max-tensor-bytes" in err.getvalue() else err.getvalue().strip(),
          leftovers() or "clean", flush=True)
    print("ok")
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced reliably on Linux")
def test_whole_model_claims_fail_before_allocating_under_rlimit_as(tmp_path: Path) -> None:
    (tmp_path / "ten.bin").write_bytes(b"0123456789")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ESCAPED" not in result.stdout and "MemoryError" not in result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "ok"
    got = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in lines[:-1]}
    assert got == {
        # 10 bytes cannot be 2^40 elements: refused when the model is scanned, before any output exists.
        "initializer": "TensorProtoError - clean",
        "initializer-unlimited": "TensorProtoError - clean",
        "initializer-typed": "TensorProtoError - clean",
        "constant": "TensorProtoError - clean",
        "constant-unlimited": "TensorProtoError - clean",
        # A sparse tensor's dense shape is a claim only max_tensor_bytes can bound: refused up front.
        "sparse-initializer": "TensorTooLargeError names-limit clean",
        "sparse-initializer-2d": "TensorTooLargeError names-limit clean",
        "sparse-constant": "TensorTooLargeError names-limit clean",
        "sparse-initializer-unlimited": "converted skipped=sp",
        "sparse-initializer-unlimited-strict": "LayoutError - clean",
        "sparse-4gib": "TensorTooLargeError names-limit clean",
        "sparse-4gib-limit": "TensorTooLargeError names-limit clean",
        "external": "TensorTooLargeError names-limit clean",
        "external-unlimited": "converted skipped=ext",  # more than 2^32-1 elements: never read
        "external-8gib": "TensorTooLargeError names-limit clean",  # over max_buffer_bytes: never read
        "cli": "2 names-option clean",
    }


def test_max_tensor_bytes_is_checked_before_any_file_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dmlbridge.writing.convert as convert_module

    m = helper.make_model(helper.make_graph([], "g", [], [], [
        numpy_helper.from_array(np.ones(4, np.float32), "small"),
        numpy_helper.from_array(np.ones(1000, np.float32), "big"),
    ]))
    created: list[str] = []
    monkeypatch.setattr(convert_module, "Publication", lambda *a, **k: created.append(a[0]) or pytest.fail("made"))
    with pytest.raises(TensorTooLargeError, match=r"'big'.*4000 bytes.*max_tensor_bytes=3999"):
        convert_model(m, tmp_path / "out", max_tensor_bytes=3999)
    assert created == [] and os.listdir(tmp_path) == []
    monkeypatch.undo()
    assert convert_model(m, tmp_path / "out", max_tensor_bytes=4000).total_size == 256 + 4000
