"""The GPU suite's fixtures and its closing count (the runtime is in gpu_runtime.py)."""

from gpu_runtime import device, pytest_runtest_makereport, pytest_terminal_summary, windows

__all__ = ["device", "pytest_runtest_makereport", "pytest_terminal_summary", "windows"]
