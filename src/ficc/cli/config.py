"""``ficc serve --config FILE``: a TOML file whose keys are the flags' names.

Precedence, highest first: a flag on the command line, its ``FICC_*`` environment variable,
the config file, the built-in default. Keys may be spelled like the flag (``hypernet-bind``)
or with underscores; an unknown key is refused by name, so a typo is never silently ignored.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import click

ENV_PREFIX = "FICC_"


def env_name(option: str) -> str:
    """``hypernet-bind`` → ``FICC_HYPERNET_BIND``."""
    return ENV_PREFIX + option.replace("-", "_").upper()


def read_config(path: Path, known: set[str]) -> dict[str, Any]:
    """The file's settings keyed by parameter name; refuses unknown keys and bad TOML."""
    try:
        document = tomllib.loads(path.read_text())
    except OSError as exc:
        message = f"cannot read {path}: {exc.strerror}"
        raise click.BadParameter(message, param_hint="--config") from exc
    except tomllib.TOMLDecodeError as exc:
        raise click.BadParameter(f"{path} is not valid TOML: {exc}", param_hint="--config") from exc
    settings: dict[str, Any] = {}
    for key, value in document.items():
        name = key.replace("-", "_")
        if name not in known or name == "config":
            allowed = ", ".join(sorted(k.replace("_", "-") for k in known if k != "config"))
            raise click.BadParameter(
                f"{path}: unknown key {key!r}; the keys are: {allowed}", param_hint="--config"
            )
        settings[name] = value
    return settings


def load_config_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    """Eager callback of ``--config``: the file's values become the command's defaults."""
    if value is None:
        return
    known = {p.name for p in ctx.command.params if p.name is not None}
    ctx.default_map = {**(ctx.default_map or {}), **read_config(value, known)}
