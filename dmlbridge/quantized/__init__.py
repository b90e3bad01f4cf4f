"""Quantized weights: finding the MatMulNBits, DequantizeLinear and GatherBlockQuantized nodes whose inputs
are constants, and their records (the parts' descs, the DirectML operator that consumes them, and
``dequantize``).

May import: ``placement`` and below.
"""
