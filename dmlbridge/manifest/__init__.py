"""The manifest format (``PREFIX.json``): its specification (``docs/manifest.md``), its schema, its one writer
and its validating reader.

May import: ``quantized``, ``placement`` and below.
"""
