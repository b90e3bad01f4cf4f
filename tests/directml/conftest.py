"""The DirectML suite's fixture and its closing count (the runtime is in dml_runtime.py)."""

from dml_runtime import directml, pytest_terminal_summary

__all__ = ["directml", "pytest_terminal_summary"]
