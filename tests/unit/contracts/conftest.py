"""The contract tier runs every repository behaviour on the fake unit of work and on a SQLite
file; ``tests/integration/storage/test_repository_contracts.py`` runs the same on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.fakes.unit_of_work import FakeUnitOfWorkFactory

from ficc.adapters.sql.database import Database
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
from ficc.services.ports import UnitOfWorkFactory


@pytest.fixture(params=["fake", "sqlite"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The back end under test: ``fake`` or a database URL."""
    return "fake" if request.param == "fake" else f"sqlite+pysqlite:///{tmp_path / 'ficc.db'}"


@pytest.fixture
async def uow_factory(database_url: str) -> AsyncIterator[UnitOfWorkFactory]:
    if database_url == "fake":
        yield FakeUnitOfWorkFactory()
        return
    database = Database(database_url)
    await database.migrate()
    try:
        yield SqlUnitOfWorkFactory(database)
    finally:
        await database.dispose()
