"""Slow child processes that need no test before them, run beside the suite instead of in their turn.

A test module that has such work defines ``start_in_background(queue, folder)``: tests/conftest.py calls it as the
session starts (for each module with a selected test), and the module adds its jobs to the session's
:class:`Queue`, which runs them one after the other on a thread of their own, while the main thread runs the
tests: on a machine of two CPUs, the child processes take the second. A test then waits for its job's result
(``job.result()``), which re-raises whatever the job raised. What a child process measures of itself (its peak
memory) is the same beside other processes as alone. :func:`run_in_child` runs a job's code in a fresh interpreter.

A job starts every child process with ``env=`` a copy of ``os.environ``, never the default: CPython starts a child
by vfork, and a child left to read this process's own environment reads it while a test on the main thread may be
changing it (``monkeypatch.setenv``), which reallocates it: the child's exec then fails with EFAULT ("Bad
address"). A copy is built before the fork and is the child's alone. An audit hook refuses any other child
started on the queue's thread, so a job that forgets fails every time, not once in a while.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Job(Generic[T]):
    """One job of a :class:`Queue`: its result, once it has run."""

    def __init__(self, run: Callable[[], T]) -> None:
        self._run = run
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    def result(self, timeout: float = 3600) -> T:
        """What the job returned (waiting for it to run), or the exception it raised, raised here."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"a background job did not finish within {timeout:.0f} s")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def cancel(self, why: str) -> None:
        """End the job without running it: its result raises RuntimeError(why)."""
        self._error = RuntimeError(why)
        self._done.set()

    def run(self) -> None:
        try:
            self._value = self._run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test that waits for it
            self._error = exc
        finally:
            self._done.set()


_THREAD_NAME = "background-jobs"


def _refuse_the_shared_environment(event: str, args: tuple[object, ...]) -> None:
    """An audit hook: a child started on the queue's thread must be given ``env=`` (see the module's docstring)."""
    if event == "subprocess.Popen" and args[3] is None and threading.current_thread().name == _THREAD_NAME:
        raise RuntimeError("a background job started a child process without env=dict(os.environ): its exec can "
                           "fail with EFAULT while a test changes the environment (tests/helpers/background.py)")


class Queue:
    """Jobs run one at a time, in the order they were added, on a thread of their own."""

    _hooked = False

    def __init__(self) -> None:
        if not Queue._hooked:  # (an audit hook stays for the process: one is enough)
            sys.addaudithook(_refuse_the_shared_environment)
            Queue._hooked = True
        self._jobs: list[Job[object]] = []
        self._ready = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=_THREAD_NAME, daemon=True)
        self._thread.start()

    def add(self, run: Callable[[], T]) -> Job[T]:
        job = Job(run)
        with self._ready:
            self._jobs.append(job)  # type: ignore[arg-type]
            self._ready.notify()
        return job

    def close(self) -> None:
        """Run no job that has not begun (the session is over); wait for the one running."""
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._thread.join(timeout=600)

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._jobs and not self._closed:
                    self._ready.wait()
                if self._closed:
                    for job in self._jobs:  # (never run: their tests, if any still wait, are told so)
                        job.cancel("the session ended before this background job ran")
                    return
                job = self._jobs.pop(0)
            job.run()


def run_in_child(code: str) -> None:
    """Run ``code`` in a fresh interpreter that imports what this process can (the helpers too); it must succeed.
    (This process's sys.path is set in the code itself too: Windows' embeddable CPython ignores PYTHONPATH.)"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    code = f"import sys\nsys.path[:0] = {sys.path!r}\n" + textwrap.dedent(code)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr
