"""The audit log refuses updates and deletes: the trigger on a real SQLite file (the account
rules run in process in tests/unit/services/test_accounts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy

from ficc.bootstrap import Settings, lifecycle, open_cluster


async def test_the_audit_log_refuses_updates_and_deletes(tmp_path: Path) -> None:
    cluster = await open_cluster(Settings(state_dir=tmp_path / "s"))
    try:
        connection = await cluster.database.connect()
        try:
            count = (
                await connection.execute(sqlalchemy.text("SELECT count(*) FROM audit_log"))
            ).scalar_one()
            assert count >= 2
            with pytest.raises(sqlalchemy.exc.DBAPIError, match="append-only"):
                await connection.execute(sqlalchemy.text("UPDATE audit_log SET actor = 'x'"))
            await connection.rollback()
            with pytest.raises(sqlalchemy.exc.DBAPIError, match="append-only"):
                await connection.execute(sqlalchemy.text("DELETE FROM audit_log"))
        finally:
            await connection.close()
    finally:
        await lifecycle.close(cluster)
