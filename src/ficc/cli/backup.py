"""``ficc backup``, ``ficc restore`` and ``ficc db current|upgrade``: offline-capable, no server.

A backup may be taken while the cluster serves (SQLite's backup API reads a consistent
snapshot); restore and upgrade write a state directory no server is using.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ficc.cli.exits import handles_errors
from ficc.cli.group import DATABASE_HELP, cli, emit, private_files, state_options

if TYPE_CHECKING:  # the storage libraries load inside the commands (``ficc --help`` stays fast)
    from ficc.adapters.backup import BackupSummary
    from ficc.adapters.sql.database import Database


def _summary(summary: BackupSummary) -> dict[str, object]:
    fields = asdict(summary)
    fields["directory"] = str(summary.directory)
    return fields


@cli.command("backup")
@state_options
@click.option(
    "--to",
    "destination",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="A new or empty directory to write the backup into.",
)
@handles_errors
def backup_command(state_dir: Path, project: str, destination: Path) -> None:
    """Copy the cluster's database, keys (cluster and HyperNet) and blobs; safe while serving.

    The backup is as secret as the state directory: its folders are 0700 and its files 0600
    (blobs 0444 inside them), whatever the umask or the mode of an existing empty directory.
    """
    from ficc.adapters import backup as backups
    from ficc.adapters.state_dir import StateDir

    private_files()
    emit(_summary(backups.backup(StateDir(state_dir), destination)))


@cli.command("restore")
@state_options
@click.option(
    "--from",
    "source",
    required=True,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="A directory `ficc backup` wrote.",
)
@click.option(
    "--agent-directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to put the HyperNet key (default: STATE_DIR/agent).",
)
@handles_errors
def restore_command(
    state_dir: Path, project: str, source: Path, agent_directory: Path | None
) -> None:
    """Make a new state directory serving the backup's identity, pairings and models."""
    from ficc.adapters import backup as backups
    from ficc.adapters.state_dir import StateDir

    private_files()
    agent = None if agent_directory is None else agent_directory.absolute()
    summary = backups.restore(source, StateDir(state_dir.absolute()), agent_directory=agent)
    emit(_summary(summary))


@cli.group("db")
def db() -> None:
    """The database schema: which revision it is at, and upgrading it."""


database_option = click.option("--database", default=None, help=DATABASE_HELP)


def _on_database(
    state_dir: Path, url: str | None, work: Callable[[Database], Awaitable[dict[str, object]]]
) -> dict[str, object]:
    """What ``work`` answers on the database at ``url`` (default: SQLite in the state dir),
    which is closed after it, whatever happened."""
    from ficc.adapters.sql.database import Database, default_url

    async def run() -> dict[str, object]:
        engine = Database(url or default_url(state_dir))
        try:
            return await work(engine)
        finally:
            await engine.dispose()

    return asyncio.run(run())


@db.command("current")
@state_options
@database_option
@handles_errors
def db_current(state_dir: Path, project: str, database: str | None) -> None:
    """Print the schema revision of the database and the newest this FICC knows."""
    from ficc.adapters.sql.schema import schema_state

    async def current(engine: Database) -> dict[str, object]:
        state = await schema_state(engine)
        return {"current": state.current, "head": state.head, "at_head": state.at_head}

    emit(_on_database(state_dir, database, current))


@db.command("upgrade")
@state_options
@database_option
@handles_errors
def db_upgrade(state_dir: Path, project: str, database: str | None) -> None:
    """Upgrade the schema to the newest revision, backing a SQLite file up first."""
    from ficc.adapters.sql.schema import schema_state, upgrade

    async def run_upgrade(engine: Database) -> dict[str, object]:
        before = await schema_state(engine)
        copy = await upgrade(engine)
        after = await schema_state(engine)
        return {
            "from": before.current,
            "to": after.current,
            "backup": None if copy is None else str(copy),
        }

    emit(_on_database(state_dir, database, run_upgrade))
