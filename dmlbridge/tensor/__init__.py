"""The DirectML buffer tensor: an array's layout (sizes, strides, the buffer-size rule), its
``DML_BUFFER_TENSOR_DESC``, its bytes (``prepare``) and back (``decode``).

May import: ``onnx``, ``types``, ``system`` and ``errors``; knows nothing of whole models (it does not import
``model``).
"""
