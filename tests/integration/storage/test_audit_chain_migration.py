"""Migration 0015 chains the audit rows already there, in ``seq`` order, from their stored text
(old time forms and numbers skipped by PostgreSQL's sequence included); the first start signs
their head; the tombstone is the one change the database lets a row take, on both backends."""

from __future__ import annotations

import pytest
import sqlalchemy.exc
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from ficc.adapters.keys import ClusterKey, verify_signature
from ficc.adapters.sql.database import Database, normalise_url
from ficc.adapters.sql.schema import SCRIPT_LOCATION
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
from ficc.base.times import parse_time
from ficc.domain.audit import AuditEntry
from ficc.services.audit import Audit

KEY = ClusterKey.generate()
OLD_ROWS = [
    (1, "2026-11-30T12:00:00Z", "a"),
    (2, "2026-11-30T12:00:01.500000Z", "b"),
    (5, "2026-11-30T12:00:02.000000Z", "c"),  # 3 and 4: inserts rolled back
]


def _at_0011_with_rows(url: str) -> None:
    engine = create_engine(normalise_url(url))
    try:
        with engine.begin() as connection:
            config = Config()
            config.set_main_option("script_location", SCRIPT_LOCATION)
            config.attributes["connection"] = connection
            command.upgrade(config, "0011_stored_times")
            for seq, at, target in OLD_ROWS:
                connection.execute(
                    text(
                        "INSERT INTO audit_log (seq, at, actor, action, target, details) "
                        "VALUES (:seq, :at, 'owner', 'test', :target, :details)"
                    ),
                    {"seq": seq, "at": at, "target": target, "details": '{"k": [1, "ü"]}'},
                )
    finally:
        engine.dispose()


async def test_the_migration_chains_existing_rows_and_the_first_seal_signs_them(
    database_url: str,
) -> None:
    _at_0011_with_rows(database_url)
    database = Database(database_url)
    try:
        await database.migrate()
        factory = SqlUnitOfWorkFactory(database, audit_signer=KEY)
        async with factory() as uow:
            rows = await uow.audit.chain(after_seq=0, limit=10)
        assert [(row.seq, row.at) for row in rows] == [
            (1, OLD_ROWS[0][1]),
            (2, OLD_ROWS[1][1]),
            (3, OLD_ROWS[2][1]),
        ]
        assert [row.entry.target for row in rows if row.entry is not None] == ["a", "b", "c"]
        log = Audit(factory, KEY.public_key, verify_signature)
        assert await log.seal() == 3
        async with factory() as uow:
            await uow.audit.append(
                AuditEntry("later", "owner", None, None, parse_time("2026-12-01T00:00:00Z"))
            )
            await uow.commit()
        report = await log.verify_chain()
        assert report["intact"] is True
        assert (report["rows"], report["signed_through"]) == (4, 3)

        connection = await database.connect()
        try:
            with pytest.raises(sqlalchemy.exc.DBAPIError, match="append-only"):
                await connection.execute(text("UPDATE audit_log SET actor = 'x' WHERE seq = 2"))
        finally:
            await connection.rollback()
            await connection.close()
        connection = await database.connect()
        try:
            with pytest.raises(sqlalchemy.exc.DBAPIError, match="append-only"):
                await connection.execute(text("DELETE FROM audit_log WHERE seq = 4"))
        finally:
            await connection.rollback()
            await connection.close()
        async with factory() as uow:
            assert list(await uow.audit.tombstone([2], parse_time("2026-12-01T01:00:00Z"))) == [2]
            await uow.commit()
        report = await log.verify_chain()
        assert (report["intact"], report["tombstones"]) == (True, 1)
    finally:
        await database.dispose()
