"""OpenAI's success answer schemas (``openai_schemas.json``), as a JSON Schema validator.

OpenAI's OpenAPI document is 3.1 but still marks some nullable values the 3.0 way
(``"nullable": true``); JSON Schema knows no such keyword, so :func:`nullable_as_null` writes
``null`` into those values' ``type`` (and ``enum``) before validating: else a stream chunk's
``finish_reason: null`` would look wrong.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMAS = Path(__file__).with_name("openai_schemas.json")


def nullable_as_null(schema: Any) -> Any:
    """``schema`` with every ``nullable: true`` turned into JSON Schema's ``null``."""
    if isinstance(schema, list):
        return [nullable_as_null(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {key: nullable_as_null(value) for key, value in schema.items()}
    if converted.pop("nullable", False) is not True:
        return converted
    if "$ref" in converted or "type" not in converted:
        # A $ref's siblings apply with it: null has to be one branch of an anyOf instead.
        return {"anyOf": [converted, {"type": "null"}]}
    kinds = converted["type"]
    converted["type"] = [*kinds, "null"] if isinstance(kinds, list) else [kinds, "null"]
    if "enum" in converted:
        converted["enum"] = [*converted["enum"], None]
    return converted


@cache
def _document() -> dict[str, Any]:
    loaded = json.loads(SCHEMAS.read_text(encoding="utf-8"))
    return {"components": nullable_as_null(loaded["components"])}


@cache
def _validator(name: str) -> Draft202012Validator:
    root = {**_document(), "$ref": f"#/components/schemas/{name}"}
    Draft202012Validator.check_schema(root)
    return Draft202012Validator(root)


def schema_errors(name: str, value: Any) -> list[str]:
    """Where ``value`` breaks OpenAI's schema ``name``: one line per error, empty when none."""
    return [
        f"{'/'.join(str(part) for part in error.absolute_path) or '(root)'}: {error.message}"
        for error in _validator(name).iter_errors(value)
    ]


def assert_matches(name: str, value: Any) -> None:
    errors = schema_errors(name, value)
    assert not errors, f"not an OpenAI {name}:\n" + "\n".join(errors)
