"""The database engine: SQLite (WAL) by default, PostgreSQL by URL; migrations at open."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

SQLITE_FILE = "ficc.db"


def default_url(state_dir: Path) -> str:
    return f"sqlite+aiosqlite:///{state_dir / SQLITE_FILE}"


def normalise_url(url: str) -> str:
    """Pick the async driver for a plain URL (``sqlite:///``, ``postgresql://``)."""
    if url.startswith("sqlite:///"):
        return "sqlite+aiosqlite:///" + url.removeprefix("sqlite:///")
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def create_engine(url: str) -> AsyncEngine:
    engine = create_async_engine(normalise_url(url))
    if engine.dialect.name == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def _upgrade(connection: Connection) -> None:
    config = Config()
    config.set_main_option("script_location", "ficc.adapters.sql:migrations")
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


async def migrate(engine: AsyncEngine) -> None:
    """Bring the schema to the newest migration; a no-op when it is there already."""
    async with engine.begin() as connection:
        await connection.run_sync(_upgrade)


def is_sqlite(engine: AsyncEngine) -> bool:
    return engine.dialect.name == "sqlite"


class WriterLock:
    """SQLite has one writer: FICC serialises its transactions instead of retrying on busy."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._lock: asyncio.Lock | None = asyncio.Lock() if is_sqlite(engine) else None

    async def __aenter__(self) -> None:
        if self._lock is not None:
            await self._lock.acquire()

    async def __aexit__(self, *_: object) -> None:
        if self._lock is not None:
            self._lock.release()
