"""Request bodies from ``--input FILE`` or from flags, never from both."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import click

from ficc.cli.group import read_input


def input_or_flags(input_path: str | None, flags: Mapping[str, Any]) -> Any:
    """The ``--input`` body, or ``None`` when flags are to build it.

    Flags next to ``--input`` would be silently dropped, so they are a usage error that names
    them. ``flags`` maps each body flag's name (``--scope``) to its value as given (None, an
    empty tuple or False when absent).
    """
    given = [name for name, value in flags.items() if value not in (None, (), False)]
    if input_path is None:
        return None
    if given:
        raise click.UsageError(
            f"--input replaces the body flags; drop {', '.join(given)} or drop --input"
        )
    return read_input(input_path)


def missing_flags(flags: Mapping[str, Any]) -> None:
    """Refuse with every required flag that is missing, all at once."""
    missing = [name for name, value in flags.items() if value in (None, ())]
    if missing:
        raise click.UsageError(f"give --input FILE, or {', '.join(missing)}")


def parse_assignments(option: str, pairs: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as an object; a VALUE that reads as JSON (2, true) is that value."""
    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, equals, text = pair.partition("=")
        if not equals or not key:
            raise click.UsageError(f"{option} must be KEY=VALUE, not {pair!r}")
        try:
            parsed[key] = json.loads(text)
        except ValueError:
            parsed[key] = text
    return parsed
