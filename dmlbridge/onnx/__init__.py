"""ONNX tensors as stored: a TensorProto decoded into numpy, the protobuf wire format, external data files and
sparse tensors.

May import: ``types``, ``system`` and ``errors``. One tensor at a time: whole models are ``model``'s.
"""
