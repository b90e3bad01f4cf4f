"""A progress bar of bytes on stderr (tqdm), for conversion and verification, or nothing.

``wanted``: True always, False never, None when stderr is a terminal (so that logs and pipes stay clean).

    >>> bar = Progress(False, 100, "w")
    >>> bar.update(10); bar.active
    False
    >>> bar.close()
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm

__all__ = ["Progress"]


class Progress:
    """A tqdm bar of bytes on stderr, or nothing."""

    def __init__(self, wanted: bool | None, total: int, label: str) -> None:
        self._bar: Any = None
        if wanted is False:
            return
        if wanted is None:
            try:
                if not (sys.stderr is not None and sys.stderr.isatty()):
                    return
            except (AttributeError, ValueError):
                return
        self._bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr, desc=label,
                         leave=False, dynamic_ncols=True)

    @property
    def active(self) -> bool:
        return self._bar is not None

    def update(self, n: int) -> None:
        if self._bar is not None and n:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
