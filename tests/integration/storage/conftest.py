"""The storage tier runs every test on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.postgres import PostgresServer

from ficc.adapters.sql.database import Database, default_url
from ficc.adapters.sql.schema import upgrade


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database of each backend: a file, or a new database on the server."""
    if request.param == "sqlite":
        return default_url(tmp_path)
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.database("storage")


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    """The database at the newest schema."""
    opened = Database(database_url)
    await upgrade(opened)
    yield opened
    await opened.dispose()
