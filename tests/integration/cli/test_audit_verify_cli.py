"""``ficc audit-verify`` on a real SQLite file: a row altered on disk with sqlite3 (after
dropping the trigger that refuses it) is found naming its seq, exit status 1; backup and
restore carry the chain and its signed heads whole."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from tests.support.cluster import ficc

from ficc.adapters.keys import ClusterKey
from ficc.adapters.sql.database import Database, default_url
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
from ficc.base.times import parse_time
from ficc.domain.audit import AuditEntry
from ficc.domain.audit_chain import HEAD_INTERVAL

ROWS = HEAD_INTERVAL + 8


async def _append(state_dir: Path, rows: int) -> None:
    """Rows as the server appends them: through the unit of work, signed by the cluster key."""
    database = Database(default_url(state_dir))
    factory = SqlUnitOfWorkFactory(
        database, audit_signer=ClusterKey.load(state_dir / "cluster.key")
    )
    try:
        async with factory() as uow:
            for n in range(rows):
                await uow.audit.append(
                    AuditEntry(
                        "project.created",
                        "owner:tok_test",
                        None,
                        f"p{n}",
                        parse_time("2026-12-01T10:00:00.5Z"),
                        details={"n": n},
                    )
                )
            await uow.commit()
    finally:
        await database.dispose()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    done = ficc("init", state_dir=state)
    assert done.returncode == 0, done.stderr
    asyncio.run(_append(state, ROWS))
    return state


def _verify(state_dir: Path) -> tuple[int, dict[str, Any], str]:
    done = ficc("audit-verify", "--format", "json", state_dir=state_dir)
    return done.returncode, json.loads(done.stdout), done.stderr


def test_audit_verify_finds_a_row_altered_on_disk_naming_its_seq(state_dir: Path) -> None:
    status, report, _ = _verify(state_dir)
    assert status == 0
    assert report["intact"] is True
    assert report["rows"] == ROWS + 2  # init's owner and token rows, then ours
    assert report["signed_through"] == HEAD_INTERVAL

    with sqlite3.connect(state_dir / "ficc.db") as connection:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            connection.execute("UPDATE audit_log SET actor = 'x' WHERE seq = 7")
        connection.execute("DROP TRIGGER audit_log_no_update")
        connection.execute("UPDATE audit_log SET details = '{\"n\": 99}' WHERE seq = 7")
    connection.close()

    status, report, stderr = _verify(state_dir)
    assert status == 1
    assert report["intact"] is False
    assert (report["broken"]["seq"], report["broken"]["reason"]) == (7, "digest_mismatch")
    error = json.loads(stderr)["error"]
    assert error["code"] == "audit_chain_broken"
    assert error["details"] == {"seq": 7, "reason": "digest_mismatch"}
    assert "row 7" in error["message"]

    # Text that is no JSON at all still reads, and is found.
    with sqlite3.connect(state_dir / "ficc.db") as connection:
        connection.execute("UPDATE audit_log SET details = 'not json' WHERE seq = 3")
    connection.close()
    status, report, _ = _verify(state_dir)
    assert (status, report["broken"]["seq"], report["broken"]["reason"]) == (
        1,
        3,
        "digest_mismatch",
    )


def test_a_dropped_row_and_a_deleted_head_are_found_on_disk(state_dir: Path) -> None:
    with sqlite3.connect(state_dir / "ficc.db") as connection:
        connection.execute("DROP TRIGGER audit_log_no_delete")
        connection.execute("DELETE FROM audit_heads")
    connection.close()
    status, report, _ = _verify(state_dir)
    assert (status, report["broken"]["seq"], report["broken"]["reason"]) == (
        1,
        HEAD_INTERVAL,
        "head_missing",
    )
    with sqlite3.connect(state_dir / "ficc.db") as connection:
        connection.execute("DELETE FROM audit_log WHERE seq = 12")
    connection.close()
    status, report, _ = _verify(state_dir)
    assert (status, report["broken"]["seq"], report["broken"]["reason"]) == (1, 12, "missing")


def test_backup_and_restore_carry_the_chain_and_its_signed_heads(
    state_dir: Path, tmp_path: Path
) -> None:
    _, before, _ = _verify(state_dir)
    backup = tmp_path / "backup"
    done = ficc("backup", "--to", str(backup), state_dir=state_dir)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((backup / "manifest.json").read_text())
    assert manifest["audit_head"] == before["head"]
    restored = tmp_path / "restored"
    done = ficc("restore", "--from", str(backup), state_dir=restored)
    assert done.returncode == 0, done.stderr
    status, after, _ = _verify(restored)
    assert status == 0
    assert after == before

    # A backup whose log lost its last rows is refused: the manifest names the head.
    with sqlite3.connect(backup / "ficc.db") as connection:
        connection.execute("DROP TRIGGER audit_log_no_delete")
        connection.execute("DELETE FROM audit_log WHERE seq = ?", (before["head"]["seq"],))
    connection.close()
    refused = ficc("restore", "--from", str(backup), state_dir=tmp_path / "again")
    assert refused.returncode == 1
    assert json.loads(refused.stderr)["error"]["details"] == {"field": "from"}
    assert not (tmp_path / "again").exists()
