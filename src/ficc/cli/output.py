"""How the CLI shows results and errors: JSON for scripts, Rich tables for people.

``--format`` picks one; without it a terminal on stdout gets tables and anything else (a pipe,
a file) gets JSON, so scripts keep working. Errors are always the JSON error envelope on
stderr, usage errors included. Rich is imported only on the table and spinner paths.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar

import click

from ficc.base.errors import ficc_envelope
from ficc.base.times import parse_time
from ficc.base.units import DAY_SECONDS, HOUR_SECONDS, MINUTE_SECONDS, KiB

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

FORMATS: Final = ("json", "table")
_FORMAT_KEY: Final = "ficc.format"
_FIRST_COLUMNS: Final = ("seq", "id", "name", "label", "state", "direction")
_NOT_SHOWN: Final = "—"

F = TypeVar("F", bound=Callable[..., Any])


def _remember_format(ctx: click.Context, _: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.meta[_FORMAT_KEY] = value


def format_option(function: F) -> F:
    """``--format json|table``, remembered on the click context for :func:`emit`."""
    return click.option(
        "--format",
        type=click.Choice(FORMATS),
        default=None,
        envvar="FICC_FORMAT",
        expose_value=False,
        callback=_remember_format,
        help="json or table (default: $FICC_FORMAT, else table on a terminal, json otherwise).",
    )(function)


def chosen_format() -> str:
    context = click.get_current_context(silent=True)
    chosen = None if context is None else context.meta.get(_FORMAT_KEY)
    if isinstance(chosen, str):
        return chosen
    return "table" if sys.stdout.isatty() else "json"


def emit(
    result: Any, *, title: str | None = None, view: Callable[[Any], Any] | None = None
) -> None:
    """Print a command's result in the chosen format.

    ``view`` turns the result into what the tables show (the columns a person reads first);
    JSON is always the whole result, as the API gives it.
    """
    if chosen_format() == "json" or not isinstance(result, dict | list):
        click.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    shown = result if view is None else view(result)
    console = stdout_console()
    for table in tables_of(shown, title=title, now=datetime.now(UTC)):
        console.print(table)


def show_error(envelope: Mapping[str, Any]) -> None:
    """An error's JSON envelope (:func:`ficc.base.errors.render`'s FICC shape) on stderr."""
    click.echo(json.dumps(envelope), err=True)


def fail_with(
    code: str, message: str, details: Mapping[str, Any] | None, exit_code: int
) -> NoReturn:
    """The JSON error envelope of one of the CLI's own codes (``usage_error``, ``no_server``)
    on stderr, then exit with the CLI's status for it."""
    show_error(ficc_envelope(code, message, details))
    sys.exit(exit_code)


def stdout_console() -> Console:
    from rich.console import Console

    return Console(highlight=False)


@contextlib.contextmanager
def activity(message: str) -> Iterator[Callable[[str], None]]:
    """A spinner on a terminal's stderr while waiting; a function that changes its text."""
    if not sys.stderr.isatty():
        yield lambda _text: None
        return
    from rich.console import Console

    with Console(stderr=True).status(message) as status:
        yield lambda text: status.update(text)


# --- tables ----------------------------------------------------------------------------------


def tables_of(
    result: dict[str, Any] | list[Any], *, title: str | None, now: datetime
) -> list[Table]:
    """A table per part of the result: its plain fields, then each list and object inside."""
    if isinstance(result, list):
        return [_record_table(result, title, now)]
    plain = {key: value for key, value in result.items() if not _is_section(value)}
    tables = []
    if plain:
        tables.append(_field_table(plain, title, now))
    for key, value in result.items():
        if isinstance(value, list):
            tables.append(_record_table(value, key, now))
        elif isinstance(value, dict) and _is_section(value):
            tables.extend(tables_of(value, title=key, now=now))
    return tables


def _is_section(value: Any) -> bool:
    """Lists of records and objects with objects inside get tables of their own."""
    if isinstance(value, list):
        return any(isinstance(item, dict) for item in value) or not value
    if isinstance(value, dict):
        return any(isinstance(item, dict | list) for item in value.values()) and len(value) > 3
    return False


def _field_table(fields: Mapping[str, Any], title: str | None, now: datetime) -> Table:
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in fields.items():
        table.add_row(key, cell(key, value, now))
    return table


def _record_table(records: list[Any], title: str | None, now: datetime) -> Table:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    columns = _columns(records)
    if not records:
        table.add_column("(none)")
        return table
    for column in columns:
        table.add_column(column, overflow="fold")
    for record in records:
        if isinstance(record, dict):
            table.add_row(*(cell(column, record.get(column), now) for column in columns))
        else:
            table.add_row(cell("value", record, now))
    return table


def _columns(records: list[Any]) -> list[str]:
    seen: list[str] = []
    for record in records:
        if isinstance(record, dict):
            seen.extend(key for key in record if key not in seen)
        elif "value" not in seen:
            seen.append("value")
    first = [key for key in _FIRST_COLUMNS if key in seen]
    return first + [key for key in seen if key not in first]


def cell(key: str, value: Any, now: datetime) -> str:
    """One value as a person reads it: relative times, sizes, allowances, short lists."""
    if value is None:
        return _NOT_SHOWN
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str) and key.endswith("_at"):
        return relative_time(key, value, now)
    if isinstance(value, int) and (key.endswith("bytes") or key.startswith("bytes_")):
        return format_bytes(value)
    if key == "remaining" and isinstance(value, dict):
        return allowance(value)
    if isinstance(value, list):
        if all(not isinstance(item, dict | list) for item in value):
            return ", ".join(str(item) for item in value) or _NOT_SHOWN
        return f"{len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return ", ".join(f"{name}={cell(name, item, now)}" for name, item in value.items())
    return str(value)


def allowance(remaining: Mapping[str, Any]) -> str:
    """``requests 998, transfer 1.0 GiB``: what a grant still allows."""
    parts = []
    for key, value in remaining.items():
        if value is None:
            continue  # not limited by that rule
        if key.endswith("bytes") and isinstance(value, int):
            parts.append(f"{key.removesuffix('_bytes')} {format_bytes(value)}")
        else:
            parts.append(f"{key} {_NOT_SHOWN if value is None else value}")
    return ", ".join(parts) or _NOT_SHOWN


def relative_time(key: str, text: str, now: datetime) -> str:
    """``expires in 3h``, ``expired 2m ago``, ``5d ago``; the text itself when not a time."""
    try:
        moment = parse_time(text)
    except ValueError:
        return text
    seconds = (moment - now).total_seconds()
    span = duration(abs(seconds))
    if key == "expires_at":
        return f"expires in {span}" if seconds > 0 else f"expired {span} ago"
    return f"in {span}" if seconds > 0 else f"{span} ago"


def duration(seconds: float) -> str:
    """The largest whole unit: ``45s``, ``12m``, ``3h``, ``6d``."""
    for unit, size in (("d", DAY_SECONDS), ("h", HOUR_SECONDS), ("m", MINUTE_SECONDS)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def format_bytes(size: int) -> str:
    """``512 B``, ``1.5 MiB``: binary units, one decimal."""
    if abs(size) < KiB:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        value /= KiB
        if abs(value) < KiB:
            return f"{value:.1f} {unit}"
    return f"{value / KiB:.1f} TiB"


# --- running the command line ----------------------------------------------------------------

EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130


def run(command: click.Command) -> NoReturn:
    """Run the CLI; click's usage errors become the JSON error on stderr with exit status 2."""
    try:
        result = command.main(standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx is not None else str(exc))
        sys.exit(0)
    except click.UsageError as exc:
        details: dict[str, Any] = {}
        if exc.ctx is not None:
            details["usage"] = exc.ctx.get_usage()
            details["command"] = exc.ctx.command_path
        fail_with("usage_error", exc.format_message(), details, EXIT_USAGE)
    except click.ClickException as exc:
        fail_with("usage_error", exc.format_message(), None, exc.exit_code)
    except click.Abort:
        fail_with("interrupted", "interrupted", None, EXIT_INTERRUPTED)
    sys.exit(result if isinstance(result, int) else 0)
