"""The GPU suite's fixtures and its closing counts (the runtime is in gpu_runtime.py, the consumer suite's harness
in consumer_runs.py)."""

import pytest
from consumer_runs import consumer_summary
from gpu_runtime import device, pytest_runtest_makereport, windows
from gpu_runtime import pytest_terminal_summary as gpu_summary

__all__ = ["device", "pytest_runtest_makereport", "pytest_terminal_summary", "windows"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    gpu_summary(terminalreporter)
    consumer_summary(terminalreporter)
