"""DirectML's operator descs as ctypes: every ``DML_OPERATOR_TYPE`` (``DmlOperatorType``), the enums their fields
take, the ``DML_*_OPERATOR_DESC`` structs of the operators dmlbridge binds constants to, and the
``DML_OPERATOR_DESC`` that points at one. Plain structs, with no GPU call: ``quantized`` builds a record's
dequantize desc from them, and ``dmlbridge.gpu`` makes them public and runs them.

May import: ``onnx`` and below (it needs none of them: ctypes and enum only).
"""
