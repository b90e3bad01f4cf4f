"""A whole ONNX model's constants: reading the model file, finding every constant (initializers, Constant
nodes, subgraphs, functions, sparse tensors), the byte scan that finds small ones fast, reading a constant a
range at a time, and which nodes consume each.

May import: ``onnx``, ``types``, ``system`` and ``errors``; not ``tensor`` (it finds constants, it does not
encode them).
"""
