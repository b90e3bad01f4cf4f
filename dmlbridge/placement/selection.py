"""Which constants a conversion takes: glob patterns on keys, origin kinds and a minimum size.

A constant is selected when its key matches one of ``include`` (every key, when ``include`` is None), matches
none of ``exclude``, is of one of ``kinds`` (every kind, when None) and its values take at least ``min_bytes``
bytes as a numpy array (``nbytes``). Patterns are shell-style (``fnmatch``, case-sensitive; ``*`` also crosses
the ``/`` of subgraph keys). The manifest records the selection, so that ``verify`` compares a plan with the
constants it was made from and does not report the others as missing.

    >>> selection = Selection.check(include=["layers.*"], exclude=["*.bias"], min_bytes=16)
    >>> selection.selects("layers.0.weight", "initializer", 64), selection.selects("layers.0.bias", "initializer", 64)
    (True, False)
    >>> selection.selects("head.weight", "initializer", 64), selection.selects("layers.1.weight", "initializer", 8)
    (False, False)
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from dmlbridge.errors import InvalidArgumentError

__all__ = ["CONSTANT_KINDS", "MAX_PATTERNS", "MAX_PATTERN_LENGTH", "Selection"]

CONSTANT_KINDS: tuple[str, ...] = (
    "initializer", "sparse_initializer", "value", "sparse_value", "value_float", "value_floats", "value_int",
    "value_ints", "value_string", "value_strings", "derived",
)
"""Every origin kind of a constant (``ModelConstant.kind``; tests hold the two lists equal)."""
MAX_PATTERNS = 1024  # patterns per list: the manifest records them
MAX_PATTERN_LENGTH = 4096  # characters per pattern (as many as a key)


class Selection(NamedTuple):
    """Which constants a conversion takes (see the module docstring); the default takes every one.

    Example:
        >>> Selection().everything, Selection.check(kinds=["initializer"]).everything
        (True, False)
    """

    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    kinds: tuple[str, ...] | None = None
    min_bytes: int = 0
    drop_quantized_sources: bool = False
    """Leave out the model's constants that only quantized nodes read and whose values the image holds in derived
    entries instead (a 4-bit weight made 8-bit below feature level 6.3, say): see :mod:`dmlbridge.quantized.nodes`."""

    @classmethod
    def check(
        cls, include: Any = None, exclude: Any = None, kinds: Any = None, min_bytes: Any = 0,
        drop_quantized_sources: Any = False,
    ) -> Selection:
        """The selection the keywords describe, each checked (InvalidArgumentError names the keyword)."""
        chosen_kinds = None if kinds is None else _strings("kinds", kinds)
        if chosen_kinds is not None:
            unknown = [kind for kind in chosen_kinds if kind not in CONSTANT_KINDS]
            if unknown:
                raise InvalidArgumentError(
                    f"kinds names {unknown[0]!r}, which is not a kind of constant; the kinds are "
                    f"{', '.join(CONSTANT_KINDS)}"
                )
            chosen_kinds = tuple(kind for kind in CONSTANT_KINDS if kind in chosen_kinds)  # canonical order
        if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 0:
            raise InvalidArgumentError(f"min_bytes must be a non-negative integer, got {min_bytes!r}")
        if not isinstance(drop_quantized_sources, bool):
            raise InvalidArgumentError(f"drop_quantized_sources must be True or False, not {drop_quantized_sources!r}")
        return cls(None if include is None else _strings("include", include),
                   () if exclude is None else _strings("exclude", exclude), chosen_kinds, min_bytes,
                   drop_quantized_sources)

    @property
    def everything(self) -> bool:
        """True when every constant is selected (the default)."""
        return (self.include is None and not self.exclude and self.kinds is None and self.min_bytes == 0
                and not self.drop_quantized_sources)

    def selects(self, key: str, kind: str, nbytes: int) -> bool:
        """Whether the constant of this key, origin kind and decoded size is selected."""
        if nbytes < self.min_bytes or (self.kinds is not None and kind not in self.kinds):
            return False
        if self.include is not None and not _matcher(self.include)(key):
            return False
        return not (self.exclude and _matcher(self.exclude)(key))

    def describe(self) -> dict[str, Any]:
        """The JSON form (the manifest's ``selection``)."""
        return {
            "include": None if self.include is None else list(self.include),
            "exclude": list(self.exclude),
            "kinds": None if self.kinds is None else list(self.kinds),
            "min_bytes": self.min_bytes,
            "drop_quantized_sources": self.drop_quantized_sources,
        }


def _strings(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(
            f"{name} must be a list of strings, got {value!r}" + (f"; write {name}=[{value!r}]"
                                                                  if isinstance(value, str) else "")
        )
    items = tuple(value)
    if len(items) > MAX_PATTERNS:
        raise InvalidArgumentError(f"{name} holds {len(items)} items, more than {MAX_PATTERNS}")
    for item in items:
        if not isinstance(item, str) or not item or len(item) > MAX_PATTERN_LENGTH:
            raise InvalidArgumentError(
                f"{name} must hold non-empty strings of at most {MAX_PATTERN_LENGTH} characters, got {item!r:.80}"
            )
    return items


EVERY_CONSTANT = Selection()
"""The default selection: every constant."""

_MATCHERS: dict[tuple[str, ...], Any] = {}


def _matcher(patterns: tuple[str, ...]) -> Any:
    """One compiled regular expression for a list of patterns (a model may have 100,000 keys to test)."""
    matcher = _MATCHERS.get(patterns)
    if matcher is None:
        if len(_MATCHERS) > 64:
            _MATCHERS.clear()
        matcher = _MATCHERS[patterns] = re.compile("|".join(fnmatch.translate(p) for p in patterns)).match
    return matcher
