"""dmlbridge benchmarks against its peers (onnx, onnx-ir, ml_dtypes, do-it-yourself glue) and the memory system.

Run ``python -m benchmarks`` (full, 64 MiB tensors and a 1 GiB model) or ``python -m benchmarks --quick`` (small
sizes, a few seconds). Each case times dmlbridge and its peers interleaved, takes medians, prints one table and
writes the results as JSON (``benchmarks/results/latest.json`` by default).
"""
