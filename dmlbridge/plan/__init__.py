"""The plan a user holds (:class:`UploadPlan`): planned or written, its entries, its bytes and descs, its
buffer files held open, verification against the model, and the binding list.

May import: ``manifest`` and below.
"""
