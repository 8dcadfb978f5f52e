"""The schema's revision: which one a database is at, which is the newest, and upgrading.

An upgrade of a SQLite database that holds a schema first copies it beside itself with
SQLite's own backup API (``ficc.db.at-REVISION-TIME.bak``), so a failed or unwanted migration
can be undone by putting the copy back.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import text

from ficc.adapters.sql.database import Database

SCRIPT_LOCATION: Final = "ficc.adapters.sql:migrations"
PROBE_TIMEOUT_SECONDS: Final = 2.0


def script_directory() -> ScriptDirectory:
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    return ScriptDirectory.from_config(config)


def head_revision() -> str:
    head = script_directory().get_current_head()
    assert head is not None
    return head


def previous_revision(revision: str) -> str | None:
    """The revision ``revision`` upgrades from (``None`` for the first)."""
    down = script_directory().get_revision(revision).down_revision
    return down if isinstance(down, str) or down is None else str(down[0])


def sqlite_path(database: Database) -> Path | None:
    """The file of a SQLite database, or ``None`` for another backend or an in-memory one."""
    prefix = "sqlite:///"
    if not database.url.startswith(prefix):
        return None
    path = database.url.removeprefix(prefix).split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def _sqlite_revision(path: Path) -> str | None:
    """Open the file read-write without creating it: a missing file or directory fails."""
    uri = f"file:{path}?mode=rw"
    connection = sqlite3.connect(uri, uri=True, timeout=PROBE_TIMEOUT_SECONDS)
    try:
        try:
            row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None
            raise
        return None if row is None else str(row[0])
    finally:
        connection.close()


async def current_revision(database: Database) -> str | None:
    """The revision the database is at, ``None`` if it has no schema yet.

    Raises ``OSError`` or the driver's error when the database does not answer. A SQLite file
    is opened afresh each time, so a file that was removed or made unreadable is noticed
    even while pooled connections still hold it open.
    """
    path = sqlite_path(database)
    if path is not None:
        return _sqlite_revision(path)
    connection = await database.connect()
    try:
        try:
            result = await connection.execute(text("SELECT version_num FROM alembic_version"))
            row = result.first()
        except Exception:  # noqa: BLE001 - any driver error here means "no such table"
            return None
        return None if row is None else str(row[0])
    finally:
        await connection.rollback()
        await connection.close()


@dataclass(frozen=True)
class SchemaState:
    current: str | None
    head: str

    @property
    def at_head(self) -> bool:
        return self.current == self.head


async def schema_state(database: Database) -> SchemaState:
    return SchemaState(current=await current_revision(database), head=head_revision())


def copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a live SQLite database (WAL included), by SQLite's backup API."""
    reader = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    try:
        writer = sqlite3.connect(target)
        try:
            reader.backup(writer)
        finally:
            writer.close()
    finally:
        reader.close()
    target.chmod(0o600)


async def upgrade(database: Database, *, now: datetime | None = None) -> Path | None:
    """Migrate to the head revision; back a SQLite database up first if it needs migrating.

    Returns the backup file, or ``None`` when nothing was copied (already at head, a new
    database, or another backend).
    """
    backup: Path | None = None
    path = sqlite_path(database)
    state = await schema_state(database) if path is not None and path.exists() else None
    if path is not None and state is not None and state.current is not None and not state.at_head:
        moment = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
        backup = path.with_name(f"{path.name}.at-{state.current}-{moment}.bak")
        copy_sqlite(path, backup)
    await database.migrate()
    return backup
