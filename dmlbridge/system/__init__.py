"""What the machine gives: reading files by position (into buffers that start on a page), which file a name is,
which names are plain file names on every system, threads, a progress bar, and any bytes-like object seen as flat
bytes.

May import: ``dmlbridge.errors``. Nothing here knows of tensors or models.
"""
