"""The ``ficc`` command group and what every command takes: the state options, the call to
the server, the output, and :func:`forwarding` for a command that is one request."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import click

from ficc.cli.client import ControlClient
from ficc.cli.exits import handles_errors
from ficc.cli.output import format_option

F = TypeVar("F", bound=Callable[..., Any])

DATABASE_HELP: Final = "Database URL (default: SQLite in the state dir)."
"""The help of ``--database``, wherever a command takes one."""


def state_options(function: F) -> F:
    """--state-dir and --project, taken by every command."""
    function = click.option(
        "--project",
        default="default",
        show_default=True,
        help="Project to act in.",
    )(function)
    function = click.option(
        "--state-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="FICC_STATE_DIR",
        default=".ficc",
        help="State directory (default $FICC_STATE_DIR, else .ficc).",
    )(function)
    return format_option(function)


def emit(
    result: Any, *, title: str | None = None, view: Callable[[Any], Any] | None = None
) -> None:
    """The result as JSON, or as tables on a terminal (``--format`` decides)."""
    from ficc.cli.output import emit as show

    show(result, title=title, view=view)


def read_input(path: str) -> Any:
    """The JSON body of ``--input FILE`` (``-`` for stdin)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise click.UsageError(f"--input: cannot read {path}: {exc.strerror}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.UsageError(f"--input: {path} is not valid JSON") from exc


def private_files() -> None:
    """Files this process creates (database, journals, server.json, engine logs) are 0600."""
    os.umask(0o077)


def call(state_dir: Path, project: str, method: str, path: str, body: Any = None) -> Any:
    with ControlClient(state_dir, project) as client:
        return client.request(method, path, body)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ficc")
def cli() -> None:
    """FICC: a control plane for inference clusters, with federation."""


def forwarding(
    name: str,
    method: str,
    path: str,
    doc: str,
    argument: str | None = None,
    *,
    done: str | None = None,
) -> None:
    """Register the command ``name`` that sends one request and prints its answer: ``path``
    names the command's one ``argument`` (if any) as ``{argument}``; with ``done``, the answer
    printed is ``{done: ARGUMENT}`` instead. Most commands are that."""

    def command(state_dir: Path, project: str, **given: str) -> None:
        answer = call(state_dir, project, method, path.format(**given))
        emit(answer if done is None or argument is None else {done: given[argument]})

    function: Callable[..., None] = handles_errors(command)
    if argument is not None:
        function = click.argument(argument)(function)
    cli.command(name, help=doc)(state_options(function))
