"""Data types: DirectML's and ONNX's, what a DirectML device takes (:class:`Target`), the ONNX -> DirectML
mapping, and 4-bit nibble packing.

May import: ``system`` and ``errors``.
"""
