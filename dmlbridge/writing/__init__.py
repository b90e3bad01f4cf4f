"""Writing a conversion: the jobs that encode large constants on worker threads, the upload image a buffer
file at a time, the output folder and its lock, and publishing buffers and manifest together.

May import: ``plan`` and below.
"""
