"""Rows written before times had one width (``12:00:00Z``, no fraction) are rewritten by the
migration, so that they compare with new times correctly; the append-only audit log keeps its
rows as written and still reads them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from ficc.adapters.sql.database import Database, normalise_url
from ficc.adapters.sql.schema import SCRIPT_LOCATION
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory

WHOLE = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
HALF = timedelta(milliseconds=500)
OLD_FORM = "2026-11-30T12:00:00Z"


def _at_0009_with_old_rows(url: str) -> None:
    engine = create_engine(normalise_url(url))
    try:
        with engine.begin() as connection:
            config = Config()
            config.set_main_option("script_location", SCRIPT_LOCATION)
            config.attributes["connection"] = connection
            command.upgrade(config, "0009")
            connection.execute(
                text(
                    "INSERT INTO users (id, username, is_owner, scopes, projects, created_at) "
                    "VALUES ('user_1', 'u', false, '[]', '[]', :at)"
                ),
                {"at": "2026-11-30T11:00:00.250000Z"},
            )
            connection.execute(
                text(
                    "INSERT INTO web_sessions "
                    "(id, user_id, secret_hash, csrf_token, created_at, expires_at) "
                    "VALUES ('session_1', 'user_1', 'h', 'c', :created, :expires)"
                ),
                {"created": "2026-11-30T11:00:00.250000Z", "expires": OLD_FORM},
            )
            connection.execute(
                text(
                    "INSERT INTO audit_log (at, actor, action, target, details) "
                    "VALUES (:at, 'owner', 'test', 't', '{}')"
                ),
                {"at": OLD_FORM},
            )
    finally:
        engine.dispose()


async def test_the_migration_rewrites_old_times_and_leaves_the_audit_log_as_written(
    database_url: str,
) -> None:
    _at_0009_with_old_rows(database_url)
    database = Database(database_url)
    try:
        await database.migrate()
        connection = await database.connect()
        try:
            stored = await connection.execute(text("SELECT expires_at FROM web_sessions"))
            assert stored.scalar_one() == "2026-11-30T12:00:00.000000Z"
            audit = await connection.execute(text("SELECT at FROM audit_log"))
            assert audit.scalar_one() == OLD_FORM
        finally:
            await connection.rollback()
            await connection.close()
        uow_factory = SqlUnitOfWorkFactory(database)
        async with uow_factory() as uow:
            assert await uow.sessions.purge(now=WHOLE - HALF) == 0
            assert await uow.sessions.purge(now=WHOLE + HALF) == 1
            [entry] = await uow.audit.list(project=None, after_seq=0, limit=10)
            assert entry.at == WHOLE
    finally:
        await database.dispose()
