"""Reading a JSON document that must not be trusted: one parse that refuses duplicate keys and NaN, and typed
access to each object's fields with messages that say where the problem is (the manifest reader's tools).

    >>> document = parse_json(b'{"size": 3, "name": "w"}', "m.json")
    >>> fields = Fields(document, "m.json", ("size", "name"))
    >>> fields.integer("size"), fields.string("name")
    (3, 'w')
    >>> Fields(document, "m.json", ("size",))
    Traceback (most recent call last):
    ...
    dmlbridge.ManifestError: m.json has unknown field(s) 'name'
"""

from __future__ import annotations

import json
from typing import Any

from dmlbridge.errors import ManifestError, counted

__all__ = ["INT64_MAX", "PARSE_COST_FACTOR", "Fields", "int_list", "kind_of", "parse_cost", "parse_json",
           "whole_number"]

INT64_MAX = 2**63 - 1
_SMALL = 1 << 16  # bytes: any document this small is parsed (its cost is the parser's own, whatever its form)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):  # (the usual case, no duplicate, costs one dict)
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ManifestError(f"duplicate field {key!r}")
            seen.add(key)
    return result


def _no_constants(name: str) -> Any:
    raise ManifestError(f"{name} is not valid JSON (not a number)")


PARSE_COST_FACTOR = 20
"""The most memory :func:`parse_json` may take, as a multiple of the document's size (:func:`parse_cost`, an upper
bound, is checked before the parse). The manifests dmlbridge writes bound to 14 to 15 times their size (their
parse takes 4 to 5); a hostile one of ``{}`` objects took 25 times, of nested arrays 41."""

# An upper bound of what parsing takes per byte of JSON's structure (CPython 3.11's and 3.12's sizes, with room):
# an object (a dict, its slot in its parent), an array, a value after a comma, a key (its slot in the dict, and the pair
# the object hook takes it in meanwhile), a quote (each string is two), and the text itself (its str: 1 byte a
# character, and the numbers' digits; up to 4 bytes a character, and a copy of a string, when it is not ASCII).
_COSTS = ((b"{", 200), (b"[", 100), (b",", 40), (b":", 110), (b'"', 24))
_TEXT_COST, _WIDE_TEXT_COST = 2, 9


def parse_cost(raw: bytes) -> int:
    """An upper bound, in bytes, of the memory ``json.loads`` takes for ``raw``, from its counts of JSON's
    structural bytes (read as bytes, before any parse: one pass each, at the speed of memory).

    Example:
        >>> parse_cost(b'{"a": [1, 2]}') >= 200 + 100 + 40 + 110 + 2 * 24
        True
    """
    text = _TEXT_COST if raw.isascii() else _WIDE_TEXT_COST
    return sum(weight * raw.count(byte) for byte, weight in _COSTS) + text * len(raw)


def parse_json(raw: bytes, path: str) -> Any:
    """The JSON document in ``raw``; ManifestError (naming ``path``) for anything else, and, before the parse, for a
    document whose parse could take more than :data:`PARSE_COST_FACTOR` times its size."""
    cost = parse_cost(raw)
    if cost > PARSE_COST_FACTOR * len(raw) + _SMALL:
        raise ManifestError(
            f"manifest {path!r} is not a manifest dmlbridge wrote: its {counted(len(raw), 'byte')} are so dense in "
            f"JSON objects, arrays, keys and short values that parsing them could take {cost / 2**20:.3g} MiB, more "
            f"than {PARSE_COST_FACTOR} times its size (a manifest's parse takes less); it was refused before parsing"
        )
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
    except ManifestError as exc:
        raise ManifestError(f"manifest {path!r}: {exc}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, int digit limits
        raise ManifestError(f"manifest {path!r} is not valid JSON: {exc}") from None


class Fields:
    """Typed access to one JSON object of the manifest, with messages that say where the problem is."""

    def __init__(self, value: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
        if not isinstance(value, dict):
            raise ManifestError(f"{where} must be a JSON object, got {kind_of(value)}")
        missing = [k for k in required if k not in value]
        if missing:
            raise ManifestError(f"{where} lacks the field(s) {', '.join(map(repr, missing))}")
        unknown = [k for k in value if k not in required and k not in optional]
        if unknown:
            raise ManifestError(f"{where} has unknown field(s) {', '.join(map(repr, unknown[:5]))}")
        self.value = value
        self.where = where

    def at(self, key: str) -> str:
        return f"{self.where}.{key}"

    def get(self, key: str) -> Any:
        return self.value.get(key)

    def integer(self, key: str, low: int = 0, high: int = INT64_MAX, nullable: bool = False) -> Any:
        return whole_number(self.value.get(key), self.at(key), low, high, nullable)

    def string(self, key: str, nullable: bool = False, nonempty: bool = False) -> Any:
        value = self.value.get(key)
        if value is None and nullable:
            return None
        if not isinstance(value, str) or (nonempty and not value):
            what = "a non-empty string" if nonempty else "a string"
            raise ManifestError(f"{self.at(key)} must be {what}, got {kind_of(value)}")
        return value


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value[:60]!r}"
    return {"list": "an array", "dict": "an object"}.get(type(value).__name__, type(value).__name__)


def whole_number(value: Any, where: str, low: int = 0, high: int = INT64_MAX, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(f"{where} must be a whole number, got {kind_of(value)}")
    if not low <= value <= high:
        raise ManifestError(f"{where} is {value}, outside {low}..{high}")
    return value


def int_list(value: Any, where: str, low: int = 0, high: int = INT64_MAX, max_len: int = 64) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ManifestError(f"{where} must be an array of whole numbers, got {kind_of(value)}")
    if len(value) > max_len:
        raise ManifestError(f"{where} has {counted(len(value), 'item')}, more than {max_len}")
    return tuple(whole_number(v, f"{where}[{i}]", low, high) for i, v in enumerate(value))
