"""`ficc service-logs SERVICE [--follow]`: what a service's engine wrote, for its operator."""

from __future__ import annotations

import json
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, NoReturn
from urllib.parse import urlencode

import click

from ficc.cli.client import ControlClient
from ficc.cli.exits import handles_errors
from ficc.cli.group import cli, emit, state_options
from ficc.cli.output import chosen_format

PREFIX: Final = "/api/v1/inference/services"
FOLLOW_POLL_SECONDS: Final = 1.0
"""How often ``--follow`` asks for new lines (it polls; the server holds no stream open)."""
FOLLOW_READ_LINES: Final = 1000
"""Lines ``--follow`` asks for after the first read: the most one read gives."""

Reader = Callable[[dict[str, Any]], dict[str, Any]]
Shower = Callable[[str | None, str], None]


def printable(line: str) -> str:
    """An engine's line made safe for a terminal: control characters (escape sequences among
    them) shown as U+FFFD, tabs kept."""
    return "".join(
        "\ufffd" if unicodedata.category(c) in ("Cc", "Cf") and c != "\t" else c for c in line
    )


def follow_log(
    read: Reader, show: Shower, pause: Callable[[], None], *, lines: int, replica: int | None
) -> NoReturn:
    """Show the last ``lines`` lines, then every line written after them, moving on to a
    replica's newer attempt once the older one's log is read to its end; ends by Ctrl-C."""
    where: dict[str, Any] = {"lines": lines}
    if replica is not None:
        where["replica"] = replica
    answer = read(where)
    where["lines"] = FOLLOW_READ_LINES
    while True:
        for line in answer["lines"]:
            show(answer["attempt"], line)
        attempt, latest = answer["attempt"], answer["latest"]
        if answer["replica"] is not None:
            where["replica"] = answer["replica"]  # stay with the replica first shown
        if attempt is not None and not answer["more"] and latest not in (None, attempt):
            where.update(attempt=latest, after=0)  # a newer attempt: its log from the start
            answer = read(where)
            continue
        if not answer["more"]:
            pause()
        if attempt is None:
            answer = read(where)  # nothing ran yet: ask again for the newest attempt
            continue
        where.update(attempt=attempt, after=answer["next"])
        answer = read(where)


@cli.command("service-logs")
@state_options
@click.argument("service")
@click.option(
    "--lines",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="How many of the last lines (at most 1000).",
)
@click.option("--replica", type=click.IntRange(min=0), help="This replica's newest attempt.")
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Keep printing lines as the engine writes them, and a restart's (Ctrl-C ends).",
)
@handles_errors
def service_logs(
    state_dir: Path, project: str, service: str, lines: int, replica: int | None, follow: bool
) -> None:
    """Show the engine log of a service's newest attempt (state directory: run/SERVICE/).

    A terminal gets the lines bare; otherwise the JSON answer, or with --follow one JSON
    object a line ({"attempt", "line"}).
    """
    as_json = chosen_format() == "json"

    def show(attempt: str | None, line: str) -> None:
        if as_json:
            click.echo(json.dumps({"attempt": attempt, "line": line}))
        else:
            click.echo(printable(line))

    with ControlClient(state_dir, project) as client:

        def read(where: dict[str, Any]) -> dict[str, Any]:
            answer: dict[str, Any] = client.request(
                "GET", f"{PREFIX}/{service}/log?{urlencode(where)}"
            )
            return answer

        if follow:
            follow_log(
                read,
                show,
                lambda: time.sleep(FOLLOW_POLL_SECONDS),
                lines=lines,
                replica=replica,
            )
        answer = read({"lines": lines} if replica is None else {"lines": lines, "replica": replica})
    if as_json:
        emit(answer)
        return
    for line in answer["lines"]:
        show(answer["attempt"], line)
