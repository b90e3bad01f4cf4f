"""The worker pool (dmlbridge.system.workers): Prefetch keeps its budget and its order, a Ctrl-C is held back while
the pool hands out a job, while a result is awaited and while the checksum thread reads (sigint_deferred), and the
pool's size follows the CPUs the process may use (affinity and cgroup v1 and v2 quotas)."""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import dmlbridge
from dmlbridge import DmlBridgeError, InvalidArgumentError
from dmlbridge.system import workers
from dmlbridge.system.workers import Prefetch, available_cpus, check_workers
from dmlbridge.writing import image as image_writer


def test_prefetch_keeps_its_budget_and_order() -> None:
    """At most the budget's worth of jobs not yet written, however many workers; results in order; the first
    failure in order raised, though a later job failed sooner."""
    running = {"now": 0, "most": 0}
    lock = threading.Lock()

    def job(item: int) -> int:
        with lock:
            running["now"] += 1
            running["most"] = max(running["most"], running["now"])
        time.sleep(0.002)
        with lock:
            running["now"] -= 1
        if item in (5, 7):
            time.sleep(0.05 if item == 5 else 0)
            raise DmlBridgeError(f"job {item}")
        return item * 10

    held = []
    with Prefetch(job, [(i, 10) for i in range(5)], workers=8, budget=35) as ahead:
        for item in range(5):
            held.append(len(ahead._ahead))
            assert ahead.take(item) == item * 10
    assert max(held) <= 3 and running["most"] <= 3  # 35 bytes hold three jobs of 10 (the last taken counts)
    with Prefetch(job, [(i, 1) for i in range(9)], workers=8, budget=100) as ahead:
        for item in range(5):
            assert ahead.take(item) == item * 10
        with pytest.raises(DmlBridgeError, match="job 5"):
            ahead.take(5)
    with Prefetch(job, [(0, 1000)], workers=2, budget=10) as ahead:  # one job larger than the budget runs
        assert ahead.take(0) == 0
        assert ahead.next_item is None
    with Prefetch(job, [(0, 1), (1, 1)], workers=2, budget=10) as ahead, pytest.raises(DmlBridgeError):
        ahead.take(1)  # out of order


def _innermost(error: BaseException) -> str:
    """The function a KeyboardInterrupt was raised in (sigint_deferred when it was held back and raised after)."""
    tb = error.__traceback__
    assert tb is not None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_name


def _interrupt_main_thread() -> None:
    """SIGINT for the main thread, as Ctrl-C gives it, on every platform (Windows has no pthread_kill)."""
    _thread.interrupt_main(signal.SIGINT)


def _no_dmlbridge_threads() -> bool:
    deadline = time.monotonic() + 5
    while any(t.name.startswith("dmlbridge") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not any(t.name.startswith("dmlbridge") for t in threading.enumerate())


def test_ctrl_c_is_held_back_while_jobs_are_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C that lands inside the pool's own locking (here: while a job is submitted) is raised once that step
    is over, never inside it (Python's threading code cut in two leaves a lock released twice)."""
    real = ThreadPoolExecutor.submit
    submitted: list[int] = []

    def submit(self: ThreadPoolExecutor, *args: Any, **kwargs: Any) -> Any:
        signal.raise_signal(signal.SIGINT)  # (without the hold, KeyboardInterrupt comes out of this call)
        future = real(self, *args, **kwargs)
        submitted.append(1)
        return future

    monkeypatch.setattr(ThreadPoolExecutor, "submit", submit)
    with pytest.raises(KeyboardInterrupt) as raised:
        Prefetch(lambda n: n, [(1, 1), (2, 1)], workers=2, budget=1 << 20)
    assert submitted == [1, 1] and _innermost(raised.value) == "sigint_deferred"
    assert _no_dmlbridge_threads()


def test_ctrl_c_is_held_back_while_a_result_is_awaited() -> None:
    """A Ctrl-C while the writer waits for a job: the wait ends with the job, then KeyboardInterrupt; leaving the
    ``with`` block waits for the other running jobs, and no thread is left."""
    finished: list[int] = []

    def job(n: int) -> int:
        if n == 1:
            _interrupt_main_thread()
        time.sleep(0.2)
        finished.append(n)
        return n

    with pytest.raises(KeyboardInterrupt) as raised, Prefetch(job, [(n, 1) for n in range(1, 5)], workers=2) as ahead:
        ahead.take(1)
    assert 1 in finished and _innermost(raised.value) == "sigint_deferred"
    assert _no_dmlbridge_threads()


def test_ctrl_c_is_held_back_while_the_hash_thread_reads() -> None:
    """The checksum thread reads the bytes the writer wrote: a Ctrl-C while the writer waits for it is raised only
    once it has finished with them (the writer reuses its buffer)."""
    done: list[int] = []

    class SlowDigest:
        def update(self, view: memoryview) -> None:
            _interrupt_main_thread()
            time.sleep(0.2)
            done.append(len(view))

    hasher = image_writer._HashThread()
    try:
        with pytest.raises(KeyboardInterrupt) as raised, hasher.hashing(SlowDigest(), memoryview(b"abc")):
            pass
        assert done == [3] and _innermost(raised.value) == "sigint_deferred"
    finally:
        hasher.close()


def test_sigint_deferred_holds_back_ctrl_c_until_the_block_ends() -> None:
    """Raised after the block, even over the block's own error; nested blocks hold it to the outermost; a
    handler the caller installed is left alone; other threads are not held back (signals reach only the main
    one)."""
    steps: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        with workers.sigint_deferred():
            with workers.sigint_deferred():
                signal.raise_signal(signal.SIGINT)
                steps.append("inner")
            steps.append("outer")
    assert steps == ["inner", "outer"] and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt) as raised, workers.sigint_deferred():
        signal.raise_signal(signal.SIGINT)
        raise ValueError("the block's own error")
    assert isinstance(raised.value.__context__, ValueError)
    seen: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with workers.sigint_deferred():
            signal.raise_signal(signal.SIGINT)
            assert seen == [signal.SIGINT]  # the caller's handler ran at once
    finally:
        signal.signal(signal.SIGINT, previous)
    in_thread: list[bool] = []

    def elsewhere() -> None:
        with workers.sigint_deferred():
            in_thread.append(signal.getsignal(signal.SIGINT) is signal.default_int_handler)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert in_thread == [True]


def _cgroups(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[str, str]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (tmp_path / "proc_cgroup").write_text(proc)
    return str(root), str(tmp_path / "proc_cgroup")


@pytest.mark.parametrize(
    ("proc", "files", "quota"),
    [
        ("0::/job\n", {"job/cpu.max": "150000 100000\n"}, 2),  # 1.5 CPUs: 2 threads
        ("0::/job\n", {"job/cpu.max": "max 100000\n"}, None),
        ("0::/a/b\n", {"a/b/cpu.max": "max 100000\n", "a/cpu.max": "100000 100000\n"}, 1),  # a parent's quota
        ("0::/\n", {"cpu.max": "300000 100000\n"}, 3),
        ("4:cpu,cpuacct:/job\n", {"cpu,cpuacct/job/cpu.cfs_quota_us": "200000\n",
                                  "cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"}, 2),
        ("4:cpu:/job\n", {"cpu/job/cpu.cfs_quota_us": "-1\n", "cpu/job/cpu.cfs_period_us": "100000\n"}, None),
        ("0::/job\n", {"job/cpu.max": "garbage\n"}, None),
        ("0::/job\n", {}, None),
    ],
)
def test_available_cpus_honours_a_cgroup_quota(tmp_path: Path, proc: str, files: dict[str, str],
                                               quota: int | None) -> None:
    root, proc_file = _cgroups(tmp_path, proc, files)
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    linux = sys.platform.startswith("linux")  # (cgroups are Linux's: elsewhere no such file is read)
    expected = affinity if quota is None or not linux else min(affinity, quota)
    assert available_cpus(root, proc_file) == expected
    assert available_cpus(root, str(tmp_path / "missing")) == affinity


def test_workers_is_checked() -> None:
    assert check_workers(None) == min(available_cpus(), 256) and check_workers(3) == 3
    for bad in (0, -1, 257, True, 1.5, "2"):
        with pytest.raises(InvalidArgumentError, match="workers must be"):
            check_workers(bad)
    with pytest.raises(InvalidArgumentError, match="workers must be"):
        dmlbridge.convert_model(b"", "x", workers=0)
