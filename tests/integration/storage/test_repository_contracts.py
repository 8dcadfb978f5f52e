"""The repository contracts of ``tests/unit/contracts/`` on PostgreSQL: the fake unit of work
and both SQL back ends are held to the same behaviours (the unit tier runs the fake and
SQLite)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from tests.support.postgres import PostgresServer
from tests.unit.contracts.test_account_repositories import *  # noqa: F403
from tests.unit.contracts.test_audit_chain_repositories import *  # noqa: F403
from tests.unit.contracts.test_catalogue_repositories import *  # noqa: F403
from tests.unit.contracts.test_federation_repositories import *  # noqa: F403
from tests.unit.contracts.test_inference_repositories import *  # noqa: F403
from tests.unit.contracts.test_lease_repositories import *  # noqa: F403
from tests.unit.contracts.test_receipt_chain_repositories import *  # noqa: F403
from tests.unit.contracts.test_route_repositories import *  # noqa: F403
from tests.unit.contracts.test_stored_times import *  # noqa: F403
from tests.unit.contracts.test_token_limit_repositories import *  # noqa: F403
from tests.unit.contracts.test_usage_receipt_repositories import *  # noqa: F403
from tests.unit.contracts.test_usage_repositories import *  # noqa: F403

from ficc.adapters.sql.database import Database
from ficc.adapters.sql.schema import upgrade
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory


async def _migrate(url: str) -> None:
    database = Database(url)
    await upgrade(database)
    await database.dispose()


@pytest.fixture(scope="module")
def migrated(postgres: PostgresServer) -> str:
    """One database at the newest schema, copied for each test."""
    url = postgres.database("contracts")
    asyncio.run(_migrate(url))
    return url


@pytest.fixture(params=["postgresql"])
def database_url(postgres: PostgresServer, migrated: str) -> str:
    """A new database on the session's server, at the newest schema (SQLite runs in the unit
    tier)."""
    return postgres.database("contracts", template=migrated)


@pytest.fixture
async def uow_factory(database_url: str) -> AsyncIterator[SqlUnitOfWorkFactory]:
    database = Database(database_url)
    yield SqlUnitOfWorkFactory(database)
    await database.dispose()
