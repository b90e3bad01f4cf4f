"""Models whose conversion allocates, and peak RSS growth measured in a child process, for the memory tests.

:func:`memory_model` writes a model of eight constants of one kind, their data in external data (so that the
model file itself is small and what grows is the conversion's own memory): sparse tensors with INT8, INT32 and
INT64 indices (linear and coordinates, in order and not), FLOAT8 widened, INT64 narrowed, UINT2 packed into
UINT4, float32 copied. :func:`peak_growth` runs Python code in a fresh interpreter and reports the peak RSS growth
of each of its measured steps, as benchmarks/child.py measures it: the kernel's high-water mark (``VmHWM``),
reset (``/proc/self/clear_refs``) once the interpreter's freed memory was given back (``malloc_trim``), minus the
resident set at that moment. :func:`conversion_growth` measures a kind's conversions, from
writing its model to the end, in child processes (a test module starts them in the background: background.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import background
import ml_dtypes
import numpy as np
import onnx
from builders import model_of
from onnx import TensorProto, helper, numpy_helper

import dmlbridge

MiB = 1 << 20
BUDGET_MIB = 256
"""The peak RSS growth a conversion or a verification may reach, whatever the model and the number of workers."""
KINDS = ("sparse_int8_coordinates", "sparse_int32_linear", "sparse_int32_coordinates", "sparse_int64_linear",
         "sparse_int64_coordinates", "sparse_int64_unordered", "float8", "float8_large", "int64", "uint2")
NARROW = 'dmlbridge.Target(supported=["FLOAT32", "FLOAT16", "INT32", "INT16", "INT8", "UINT8"], int64="narrow")'
"""The code of the ``int64`` kind's target, for a child process: no 64-bit types, INT64 narrowed to INT32."""


def linux_only() -> str | None:
    """Why the measurement cannot run here (None: it can)."""
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/clear_refs"):
        return "peak RSS growth is measured with /proc/self/clear_refs and VmHWM (Linux)"
    return None


def _external(tensor: TensorProto, file: object, location: str) -> TensorProto:
    """Move a tensor's raw_data to the end of ``file`` (open for writing) as its external data."""
    data = tensor.raw_data
    offset = file.tell()  # type: ignore[attr-defined]
    file.write(data)  # type: ignore[attr-defined]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(len(data)))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def _positions(rng: np.random.Generator, count: int, nnz: int) -> np.ndarray:
    """About ``nnz`` distinct positions below ``count``, ascending."""
    return np.flatnonzero(rng.random(count) < nnz / count)


def memory_model(folder: Path, kind: str, mib: int | None = None, count: int = 8, seed: int = 0) -> Path:
    """``folder/m.onnx``: ``count`` constants of ``kind`` (one of KINDS, or ``float32``), each about ``mib`` MiB of
    stored data in ``folder/w.data`` (default: 24; 8 for ``uint2``, whose values decode to four times that; 12 for
    the unordered sparse tensor, whose check sorts its indices a block at a time; ``float8_large`` is one constant
    of 160 MiB, converted in chunks that each read their own bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    inits, sparse = [], []
    size = (mib or {"uint2": 8, "sparse_int64_unordered": 12, "float8_large": 160}.get(kind, 24)) * MiB
    count = 1 if kind == "float8_large" else count
    with open(folder / "w.data", "wb") as f:
        for index in range(count):
            name = f"c{index}"
            if kind.startswith("sparse_"):
                _, index_type, form = kind.split("_")
                dtype = np.dtype(index_type)
                if index_type == "int8":  # eight axes below 128: coordinates of one byte each, 64 times the data
                    dims = [8, 8, 8, 8, 8, 8, 4, 4]  # when made int64 whole; 4 MiB dense UINT8, converted whole
                    linear = _positions(rng, int(np.prod(dims)), size // 9)
                    values = rng.integers(1, 255, linear.size, dtype=np.uint8)
                else:
                    # INT32: 16 MiB dense float32, converted whole; INT64: 32 MiB, converted in two chunks (the
                    # unordered one of bfloat16 values, widened: densified into an array of its own, not the output).
                    dims = [2048, 2048] if index_type == "int32" else [4096, 2048]
                    per = 4 + dtype.itemsize * (2 if form == "coordinates" else 1)
                    linear = _positions(rng, dims[0] * dims[1], size // per)
                    values = rng.random(linear.size, dtype=np.float32)
                if form == "unordered":
                    order = rng.permutation(linear.size)
                    linear, values = linear[order], values[order].astype(ml_dtypes.bfloat16)
                where = linear
                if form == "coordinates":  # (axis by axis, last first, into the index type)
                    where, rest = np.empty((linear.size, len(dims)), dtype), linear
                    for axis in range(len(dims) - 1, -1, -1):
                        rest, where[:, axis] = np.divmod(rest, dims[axis])
                sparse.append(helper.make_sparse_tensor(
                    _external(numpy_helper.from_array(values, name), f, "w.data"),
                    _external(numpy_helper.from_array(where.astype(dtype, copy=False), name + "_i"), f, "w.data"),
                    dims))
                continue
            if kind.startswith("float8"):  # widened to FLOAT16: twice the bytes out
                tensor = TensorProto(name=name, data_type=TensorProto.FLOAT8E4M3FN, dims=[size // 1024, 1024],
                                     raw_data=rng.integers(0, 256, size, dtype=np.uint8).tobytes())
            elif kind == "int64":  # narrowed to INT32 (NARROW)
                tensor = numpy_helper.from_array(rng.integers(-(2**31), 2**31, size // 8, dtype=np.int64), name)
            elif kind == "uint2":  # four values a byte, decoded one a byte, packed two a byte as UINT4
                tensor = TensorProto(name=name, data_type=TensorProto.UINT2, dims=[size * 4 // 1024, 1024],
                                     raw_data=rng.integers(0, 256, size, dtype=np.uint8).tobytes())
            elif kind == "float32":  # copied as it is
                tensor = numpy_helper.from_array(rng.random(size // 4, dtype=np.float32), name)
            else:
                raise ValueError(kind)
            inits.append(_external(tensor, f, "w.data"))
    path = folder / "m.onnx"
    onnx.save(model_of(inits, sparse=sparse), path)
    return path


_PRELUDE = textwrap.dedent("""
    import contextlib, ctypes, gc, json, sys
    import numpy, onnx, dmlbridge

    _libc = ctypes.CDLL(None)

    def _kib(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])

    _growth = {}

    @contextlib.contextmanager
    def measured(name):
        gc.collect()
        _libc.malloc_trim(0)  # (what earlier steps freed, given back: not reused without growing RSS)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = _kib("VmRSS")
        yield
        _growth[name] = (_kib("VmHWM") - base) / 1024
""")


PEAK_RSS = textwrap.dedent("""
    import sys
    if sys.platform == "win32":  # the peak working set, from GetProcessMemoryInfo
        import ctypes
        from ctypes import wintypes

        class _Counters(ctypes.Structure):
            _fields_ = [("cb", wintypes.DWORD), ("PageFaultCount", wintypes.DWORD)] + [
                (name, ctypes.c_size_t) for name in ("PeakWorkingSetSize", "WorkingSetSize", "QuotaPeakPagedPoolUsage",
                "QuotaPagedPoolUsage", "QuotaPeakNonPagedPoolUsage", "QuotaNonPagedPoolUsage", "PagefileUsage",
                "PeakPagefileUsage")]

        _kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        _kernel32.GetCurrentProcess.restype = wintypes.HANDLE
        _kernel32.K32GetProcessMemoryInfo.argtypes = [wintypes.HANDLE, ctypes.POINTER(_Counters), wintypes.DWORD]

        def peak_rss_kib():
            counters = _Counters(cb=ctypes.sizeof(_Counters))
            if not _kernel32.K32GetProcessMemoryInfo(_kernel32.GetCurrentProcess(), ctypes.byref(counters),
                                                     counters.cb):
                raise ctypes.WinError(ctypes.get_last_error())
            return counters.PeakWorkingSetSize // 1024
    else:  # the high-water mark of the resident set, in KiB on Linux
        import resource

        def peak_rss_kib():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
""")
"""Code for a child process: ``peak_rss_kib()``, the process's peak resident memory so far (KiB), on Linux
(``getrusage``) and on Windows (``GetProcessMemoryInfo``'s peak working set)."""

# (From the folder holding the dmlbridge this process imported: a child imports the same one.)
_HOME = Path(dmlbridge.__file__).resolve().parents[1]


def peak_growth(code: str) -> dict[str, float]:
    """Run ``code`` in a fresh interpreter, after a prelude that imports numpy, onnx and dmlbridge and defines
    ``measured(name)``, a context manager whose block's peak RSS growth (MiB) is reported under ``name``; returns
    every reported growth (the process must succeed)."""
    script = _PRELUDE + textwrap.dedent(code) + "\nprint(json.dumps(_growth))\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=_HOME,
                            env=dict(os.environ))  # (a snapshot: see tests/helpers/background.py)
    assert result.returncode == 0, result.stderr
    growth: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return growth


def process_peak(code: str) -> tuple[float, str]:
    """Run ``code`` in a fresh interpreter (numpy, onnx and dmlbridge imported, the helpers importable) and return
    the whole process's peak RSS (MiB: ``VmHWM``, the interpreter and its imports included) and the last line
    the code printed (the process must succeed)."""
    script = textwrap.dedent("""
        import numpy, onnx, dmlbridge
    """) + textwrap.dedent(code) + textwrap.dedent("""
        with open("/proc/self/status") as _status:
            print(next(int(line.split()[1]) for line in _status if line.startswith("VmHWM:")) / 1024)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_HOME), *sys.path]))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=1800, cwd=_HOME,
                            env=env)
    assert result.returncode == 0, result.stderr
    *printed, peak = result.stdout.strip().splitlines()
    return float(peak), printed[-1] if printed else ""


def conversion_code(path: Path, out: Path, target: str = "dmlbridge.Target()") -> str:
    """The code for :func:`peak_growth` that measures converting ``path`` into ``out`` with 1, 2 and 8 workers
    (``target``: the code that makes the target in the child)."""
    return f"""
        target = {target}
        for count in (1, 2, 8):
            with measured(f"workers={{count}}"):
                dmlbridge.convert_model({str(path)!r}, {str(out)!r}, target=target, fsync=False, progress=False,
                                        workers=count, max_output_bytes=1 << 40).close()
    """


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def constants_model(path: Path, count: int, depth: int = 0) -> Path:
    """``path``: a model of ``count`` one-element FLOAT initializers (``w0``, ``w1``, ..., 1.0 each), in the main
    graph (``depth`` 0) or in the innermost of ``depth`` nested If nodes' then_branch (each else_branch empty),
    written as protobuf bytes directly (a million constants in seconds, with no message object each)."""
    value = bytes.fromhex("0000803f")  # 1.0f, little-endian
    # TensorProto: dims (1) = [1], data_type (2) = FLOAT, name (8), raw_data (9).
    graph = b"".join(_field(5, b"\x08\x01\x10\x01" + _field(8, f"w{i}".encode()) + _field(9, value))
                     for i in range(count)) + _field(2, b"g")
    for level in range(depth):
        # AttributeProto: name (1), type (20) = GRAPH, g (6); NodeProto: input, output, op_type, attribute.
        then_branch = _field(1, b"then_branch") + b"\xa0\x01\x05" + _field(6, graph)
        else_branch = _field(1, b"else_branch") + b"\xa0\x01\x05" + _field(6, _field(2, b"e"))
        node = (_field(1, b"c") + _field(2, f"o{level}".encode()) + _field(4, b"If") + _field(5, then_branch)
                + _field(5, else_branch))
        graph = _field(1, node) + _field(2, f"g{level}".encode())
    # ModelProto: ir_version (1) = 8, graph (7), opset_import (8) = [version 17].
    path.write_bytes(b"\x08\x08" + _field(7, graph) + _field(8, b"\x10\x11"))
    return path


def _models_growth(folder: Path, make: str, counts: tuple[int, ...], depths: tuple[int, ...],
                   limits: str) -> dict[str, float]:
    """The peak RSS growth (MiB) of converting each model ``make`` (a function of this module: ``(path, count,
    depth)``) writes, of ``counts`` at each of ``depths``, written into ``folder`` by a child process and converted
    one at a time in another, with ``limits`` (the code of convert_model's keywords); keyed ``"COUNT@DEPTH"``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        models = {f"{count}@{depth}": folder / f"{make}{count}_{depth}.onnx" for count in counts for depth in depths}
        background.run_in_child(f"""
            import pathlib, memory
            for count in {counts!r}:
                for depth in {depths!r}:
                    memory.{make}(pathlib.Path({str(folder)!r}) / f"{make}{{count}}_{{depth}}.onnx", count, depth)
        """)
        return peak_growth(f"""
            for name, path in {[(name, str(path)) for name, path in models.items()]!r}:
                with measured(name):
                    dmlbridge.convert_model(path, {str(folder / "w")!r}, fsync=False, progress=False, workers=1,
                                            {limits}).close()
        """)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def growth_per_item(growth: dict[str, float], counts: tuple[int, int], depth: int) -> float:
    """Bytes of peak growth per item (constant, node) from ``counts[0]`` to ``counts[1]`` items at ``depth``, of
    what :func:`constants_growth` or :func:`nodes_growth` measured."""
    low, high = counts
    return (growth[f"{high}@{depth}"] - growth[f"{low}@{depth}"]) * 2**20 / (high - low)


def constants_growth(folder: Path, counts: tuple[int, ...], depths: tuple[int, ...],
                     limits: str = "max_constants=None, max_manifest_bytes=1 << 31") -> dict[str, float]:
    """The peak RSS growth (MiB) of converting each :func:`constants_model` of ``counts`` constants at each of
    ``depths`` (see :func:`_models_growth`); keyed ``"COUNT@DEPTH"``."""
    return _models_growth(folder, "constants_model", counts, depths, limits)


def conversion_growth(kind: str, folder: Path) -> dict[str, float]:
    """The peak RSS growth (MiB) of converting the model of ``kind`` (KINDS) with 1, 2 and 8 workers: a child
    process writes the model into ``folder``, another measures its conversions (the folder is removed after)."""
    try:
        background.run_in_child(f"import pathlib, memory; memory.memory_model(pathlib.Path({str(folder / 'm')!r}), "
                                f"{kind!r})")
        target = NARROW if kind == "int64" else "dmlbridge.Target()"
        return peak_growth(conversion_code(folder / "m" / "m.onnx", folder / "w", target))
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # (a few hundred MiB a kind)


def nodes_model(path: Path, count: int, depth: int = 0, constants: int = 10) -> Path:
    """``path``: a model of ``count`` Identity nodes (``x{i}`` to ``y{i}``; the first ``constants`` read the
    one-element initializers ``w0``, ``w1``, ...), in the main graph (``depth`` 0) or in the innermost of ``depth``
    nested If nodes' then_branch, written as protobuf bytes directly like :func:`constants_model`."""
    value = bytes.fromhex("0000803f")
    inits = b"".join(_field(5, b"\x08\x01\x10\x01" + _field(8, f"w{i}".encode()) + _field(9, value))
                     for i in range(constants))
    # NodeProto: input (1), output (2), op_type (4).
    graph = b"".join(_field(1, _field(1, (f"w{i}" if i < constants else f"x{i}").encode())
                            + _field(2, f"y{i}".encode()) + _field(4, b"Identity"))
                     for i in range(count)) + inits + _field(2, b"g")
    for level in range(depth):
        then_branch = _field(1, b"then_branch") + b"\xa0\x01\x05" + _field(6, graph)
        else_branch = _field(1, b"else_branch") + b"\xa0\x01\x05" + _field(6, _field(2, b"e"))
        node = (_field(1, b"c") + _field(2, f"o{level}".encode()) + _field(4, b"If") + _field(5, then_branch)
                + _field(5, else_branch))
        graph = _field(1, node) + _field(2, f"g{level}".encode())
    path.write_bytes(b"\x08\x08" + _field(7, graph) + _field(8, b"\x10\x11"))
    return path


def nodes_growth(folder: Path, counts: tuple[int, ...], depths: tuple[int, ...]) -> dict[str, float]:
    """The peak RSS growth (MiB) of converting each :func:`nodes_model` of ``counts`` Identity nodes at each of
    ``depths`` (max_nodes raised), as :func:`constants_growth` measures constants; keyed ``"COUNT@DEPTH"``."""
    return _models_growth(folder, "nodes_model", counts, depths, "max_nodes=None")
