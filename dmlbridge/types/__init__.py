"""Data types: DirectML's and ONNX's, what a DirectML device takes (:class:`Target`), the ONNX -> DirectML
mapping, 4-bit nibble packing, and float casts that keep every NaN bit for bit.

May import: ``system`` and ``errors``.
"""
