"""The contract tier runs every repository behaviour on the fake unit of work and on a SQLite
file; ``tests/integration/storage/test_repository_contracts.py`` runs the same on PostgreSQL."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.fakes.unit_of_work import FakeUnitOfWorkFactory

from ficc.adapters.sql.database import Database
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
from ficc.services.ports import UnitOfWorkFactory


async def _migrate(url: str) -> None:
    database = Database(url)
    await database.migrate()
    await database.dispose()


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file at the newest schema, copied for each test (migrating takes longer)."""
    path = tmp_path_factory.mktemp("contracts") / "migrated.db"
    asyncio.run(_migrate(f"sqlite+pysqlite:///{path}"))
    return path


@pytest.fixture(params=["fake", "sqlite"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The back end under test: ``fake`` or the URL of a database at the newest schema."""
    if request.param == "fake":
        return "fake"
    path = tmp_path / "ficc.db"
    shutil.copyfile(request.getfixturevalue("migrated_sqlite"), path)
    return f"sqlite+pysqlite:///{path}"


@pytest.fixture
async def uow_factory(database_url: str) -> AsyncIterator[UnitOfWorkFactory]:
    if database_url == "fake":
        yield FakeUnitOfWorkFactory()
        return
    database = Database(database_url)
    try:
        yield SqlUnitOfWorkFactory(database)
    finally:
        await database.dispose()
