"""Threads for the compute-bound part of a conversion: how many, and how their results come back in order.

Decoding and converting a constant (widening FLOAT8 to FLOAT16, packing INT4, narrowing INT64, densifying a
sparse tensor) is numpy work that releases the GIL, so a pool of threads uses every core. The file is still
written by one thread, in order: :class:`Prefetch` runs the large constants' jobs a few ahead of the writer,
within a budget of bytes in flight (each job charged its peak), and hands each result back when the writer
reaches its constant. The bytes
written are the same whatever the number of workers: only where the work runs changes.

    >>> with Prefetch(lambda n: n * n, [(2, 1), (3, 1)], workers=2, budget=1 << 20) as ahead:
    ...     ahead.take(2), ahead.take(3)
    (4, 9)
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Generic, TypeVar

from dmlbridge.errors import DmlBridgeError, InvalidArgumentError

__all__ = ["IN_FLIGHT_BYTES", "MAX_WORKERS", "POOL_MIN_BYTES", "Prefetch", "available_cpus", "check_workers",
           "sigint_deferred"]

MAX_WORKERS = 256
"""The most threads a conversion or a verification starts."""
IN_FLIGHT_BYTES = 128 << 20
"""The most the jobs not yet written may allocate at once, each charged its peak (what it reads and decodes, its
temporaries and its result): what bounds memory, whatever the number of workers. A larger job runs alone."""
POOL_MIN_BYTES = 1 << 20
"""Constants smaller than this are converted by the writer itself: handing them to a thread costs more than it
saves (a model may hold 100,000 tiny ones)."""

_CGROUP_ROOT = "/sys/fs/cgroup"

Item = TypeVar("Item")
Result = TypeVar("Result")


def available_cpus(cgroup_root: str = _CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> int:
    """The CPUs this process may use: those it may run on (``os.sched_getaffinity``, else ``os.cpu_count``),
    bounded by a CPU quota of its cgroup when one is set (a container limited to 1.5 CPUs gets 2).

    Example:
        >>> available_cpus() >= 1
        True
    """
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    quota = _cgroup_quota(cgroup_root, proc_cgroup) if sys.platform.startswith("linux") else None
    if quota is not None:
        count = min(count, max(1, math.ceil(quota)))
    return max(1, count)


def _cgroup_quota(root: str, proc_cgroup: str) -> float | None:
    """The smallest CPU quota (in CPUs) of this process's cgroup and its parents: cgroup v2 ``cpu.max``
    ("QUOTA PERIOD" or "max PERIOD"), else cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1: none).
    None when no quota is set or none can be read."""
    try:
        with open(proc_cgroup, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers, path = parts[1].split(","), parts[2].strip("/")
        if parts[0] == "0" and parts[1] == "":  # cgroup v2: one hierarchy
            for folder in _with_parents(os.path.join(root, path) if path else root, root):
                quotas += _ratio(_read(os.path.join(folder, "cpu.max")), None)
        elif "cpu" in controllers:  # cgroup v1: the cpu controller's own hierarchy
            base = os.path.join(root, ",".join(controllers))
            if not os.path.isdir(base):
                base = os.path.join(root, "cpu")
            for folder in _with_parents(os.path.join(base, path) if path else base, base):
                quotas += _ratio(_read(os.path.join(folder, "cpu.cfs_quota_us")),
                                 _read(os.path.join(folder, "cpu.cfs_period_us")))
    return min(quotas) if quotas else None


def _with_parents(folder: str, root: str) -> list[str]:
    """``folder`` and each parent up to ``root`` (a cgroup's limits are its own and its ancestors')."""
    chain = [folder]
    while os.path.normpath(folder) != os.path.normpath(root) and len(chain) < 64:
        folder = os.path.dirname(folder)
        chain.append(folder)
    return chain


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read(200).strip()
    except (OSError, UnicodeDecodeError):
        return None


def _ratio(quota: str | None, period: str | None) -> list[float]:
    """The quota in CPUs, as a list of none or one: v2 gives "QUOTA PERIOD" in one file, v1 two files."""
    if quota is None:
        return []
    if period is None:  # cgroup v2 cpu.max
        fields = quota.split()
        if len(fields) != 2 or fields[0] == "max":
            return []
        quota, period = fields
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return []
    return [q / p] if q > 0 and p > 0 else []


def check_workers(workers: Any) -> int:
    """``workers`` checked: None (the CPUs this process may use, :func:`available_cpus`) or an integer from 1 to
    256; 1 converts everything in the calling thread."""
    if workers is None:
        return min(available_cpus(), MAX_WORKERS)
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise InvalidArgumentError(
            f"workers must be None (every CPU this process may use) or an integer from 1 to {MAX_WORKERS}, "
            f"got {workers!r}"
        )
    return workers


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold back Ctrl-C (SIGINT) for the duration, in the main thread; raise KeyboardInterrupt after it if one came.

    Python raises KeyboardInterrupt between any two steps of the main thread, and its threading primitives are
    written in Python: one raised inside ``Condition.wait`` (under ``ThreadPoolExecutor.submit``,
    ``Future.result``, ``Thread.start``, ``Event.set``, ``Thread.join``) can leave a lock released twice
    ("RuntimeError: release unlocked lock") or a pool that never ends. Every call the main thread makes into
    them here runs under this, as does each step that must not be cut in two (a rename and its bookkeeping). A
    handler the caller installed is left alone, as are threads other than the main one (signals reach only it).

    Example:
        >>> with sigint_deferred():
        ...     pass
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        yield  # the caller handles SIGINT its own way (or holds it already: nested)
        return
    received: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        received.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            raise KeyboardInterrupt  # (wins over an error of the block: the user asked to stop)


class Prefetch(Generic[Item, Result]):
    """Runs ``job(item)`` in a pool of ``workers`` threads for each ``(item, cost)`` of ``jobs``, in order and a
    few ahead of the caller, who takes each result with :meth:`take` in the same order.

    ``cost`` is the most the job allocates (its peak: what it reads, decodes, converts and returns). The jobs not
    yet taken, plus the one taken last (still being written), hold at most ``budget`` bytes by their costs; one job
    runs even when its cost alone is larger. A job may also name memory it shares with the jobs next to it, as a
    third element ``(key, bytes)``: those bytes (a large constant's values, kept while its chunks are converted)
    are charged once, from the first job of ``key`` started until the last one is released. A job's exception is
    raised by :meth:`take` of its item, so the first failure in order is the one seen, whatever the number of
    workers. With ``workers=1`` there is no thread: :meth:`take` runs the job, in the caller's thread. Leaving the
    ``with`` block cancels the jobs not started and waits for the running ones (none outlives the conversion,
    whose files they read). Ctrl-C in the main thread is held back while it waits or hands out jobs
    (:func:`sigint_deferred`), and raised when that step is over.
    """

    def __init__(self, job: Callable[[Item], Result], jobs: Iterable[tuple[Any, ...]], *, workers: int,
                 budget: int | None = None) -> None:
        self._job = job
        self._jobs = iter(jobs)
        self._budget = IN_FLIGHT_BYTES if budget is None else budget  # (read here: tests lower it)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dmlbridge") if workers > 1 else None
        self._ahead: collections.deque[tuple[Item, int, Hashable, Future[Result]]] = collections.deque()
        self._held = 0  # the cost of the jobs in ``_ahead``, of the one taken last and of their shared bytes
        self._taken: tuple[int, Hashable] = (0, None)  # the cost and the key of the one taken last
        self._shared: dict[Hashable, list[int]] = {}  # key -> [bytes, jobs started and not released]
        self._next: tuple[Item, int, Hashable, int] | None = self._advance()
        try:
            with sigint_deferred():
                self._fill()
        except BaseException:
            self.close()  # (no ``with`` holds this one yet)
            raise

    def _advance(self) -> tuple[Item, int, Hashable, int] | None:
        entry = next(self._jobs, None)
        if entry is None:
            return None
        key, shared = entry[2] if len(entry) > 2 and entry[2] is not None else (None, 0)
        return entry[0], entry[1], key, shared

    @property
    def next_item(self) -> Item | None:
        """The item whose result :meth:`take` gives next (None when every one was taken)."""
        if self._ahead:
            return self._ahead[0][0]
        return None if self._next is None else self._next[0]

    def _charge(self, cost: int, key: Hashable, shared: int) -> None:
        self._held += cost
        if key is not None:
            entry = self._shared.setdefault(key, [shared, 0])
            self._held += shared if entry[1] == 0 else 0
            entry[1] += 1

    def _release(self, cost: int, key: Hashable) -> None:
        self._held -= cost
        if key is not None:
            entry = self._shared[key]
            entry[1] -= 1
            if entry[1] == 0:
                self._held -= entry[0]
                del self._shared[key]

    def _fill(self) -> None:
        if self._pool is None:
            return
        while self._next is not None:
            item, cost, key, shared = self._next
            extra = shared if key is not None and key not in self._shared else 0
            if self._ahead and self._held + cost + extra > self._budget:
                break
            self._charge(cost, key, shared)
            self._ahead.append((item, cost, key, self._pool.submit(self._job, item)))
            self._next = self._advance()

    def take(self, item: Item) -> Result:
        """The result of ``item``'s job (which must be :attr:`next_item`), waiting for it if need be."""
        self._release(*self._taken)  # the one taken before is written by now
        self._taken = (0, None)
        if self._pool is None:  # no thread: the job runs now
            if self._next is None or self._next[0] != item:
                raise DmlBridgeError(f"internal error: {item!r} taken out of order (next: {self.next_item!r})")
            self._next = self._advance()
            return self._job(item)
        with sigint_deferred():
            self._fill()
            if not self._ahead or self._ahead[0][0] != item:
                raise DmlBridgeError(f"internal error: {item!r} taken out of order (next: {self.next_item!r})")
            _, cost, key, future = self._ahead.popleft()
            self._taken = (cost, key)
            try:
                return future.result()
            finally:
                self._fill()

    def close(self) -> None:
        """Cancel the jobs not started and wait for the running ones."""
        with sigint_deferred():
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
            self._ahead.clear()

    def __enter__(self) -> Prefetch[Item, Result]:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
