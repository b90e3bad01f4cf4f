"""The manifest's JSON Schema as the suite checks every manifest it writes: the shipped schema with every ``$ref``
replaced by the definition it names. It gives the same answers (a ``$ref`` applies the schema it names, in place)
in about half the time jsonschema takes to follow the references, entry by entry, through a large manifest.
tests/manifest/test_schema.py holds the two to the same answers."""

from __future__ import annotations

from typing import Any


def inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each ``{"$ref": "#/$defs/NAME", ...}`` replaced by definition NAME (with the keywords beside
    the reference, an ``allOf`` of it and them), recursively, and without its ``$defs``."""
    definitions = schema.get("$defs", {})

    def resolve(node: Any, within: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [resolve(item, within) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" not in node:
            return {key: resolve(value, within) for key, value in node.items() if key != "$defs"}
        reference = node["$ref"]
        name = reference.removeprefix("#/$defs/")
        if reference == name or name not in definitions or name in within:
            raise ValueError(f"cannot inline the reference {reference!r}")  # (another document; a cycle)
        target = resolve(definitions[name], (*within, name))
        beside = {key: resolve(value, within) for key, value in node.items() if key != "$ref"}
        return {"allOf": [target], **beside} if beside else target

    return resolve(schema, ())  # type: ignore[no-any-return]
