"""Usage receipts survive ``ficc backup`` and ``ficc restore``: a grantor's chain, signed by
the metering of a real SQLite state directory, reads back whole from the restored directory and
verifies with the public cluster key the backup's manifest names, and one altered on the
restored disk is named by its seq."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.support.cluster import ficc
from tests.unit.contracts.records import NOW, grant, peer

from ficc.adapters.keys import ClusterKey, verify_signature
from ficc.adapters.sql.database import Database, default_url
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
from ficc.domain import metering as m
from ficc.domain import usage_receipts as r
from ficc.domain.receipts import unb64
from ficc.services.metering import Meter

REQUESTS = 5


async def _meter_requests(state_dir: Path) -> str:
    """Requests settled as the grantor settles them: records and receipts in one transaction."""
    database = Database(default_url(state_dir))
    factory = SqlUnitOfWorkFactory(database)
    key = ClusterKey.load(state_dir / "cluster.key")
    meter = Meter(factory, lambda: NOW, sign=key.sign)
    holder = peer()
    given = grant(holder.id)
    try:
        async with factory() as uow:
            await uow.peers.add(holder)
            await uow.grants.add(given)
            await uow.commit()
        for index in range(REQUESTS):
            tab = meter.open_tab(given, f"req-{index}", "inference.invoke", None, 100 + index)
            await tab.admit(10, 20)
            tab.engine_started, tab.completion_tokens = True, index
            await meter.settle(tab, m.CANCELLED if index == 2 else m.COMPLETED)
    finally:
        await database.dispose()
    return given.id


async def _chain(state_dir: Path, grant_id: str) -> list[tuple[int, dict[str, Any]]]:
    database = Database(default_url(state_dir))
    try:
        async with SqlUnitOfWorkFactory(database)() as uow:
            kept = await uow.usage_receipts.page(grant_id, m.GRANTOR, after=0, limit=100)
    finally:
        await database.dispose()
    return [(item.seq, dict(item.receipt)) for item in kept]


def _run(*args: str, state_dir: Path) -> dict[str, Any]:
    done = ficc(*args, state_dir=state_dir)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_grantors_receipt_chain_survives_backup_and_restore_and_still_verifies(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    assert ficc("init", state_dir=state).returncode == 0
    grant_id = asyncio.run(_meter_requests(state))
    before = asyncio.run(_chain(state, grant_id))
    assert [seq for seq, _ in before] == list(range(1, REQUESTS + 1))

    backup_dir = tmp_path / "backup"
    _run("backup", "--to", str(backup_dir), state_dir=state)
    restored = tmp_path / "restored"
    _run("restore", "--from", str(backup_dir), state_dir=restored)
    manifest = json.loads((backup_dir / "manifest.json").read_text())
    public_key = unb64(manifest["cluster_key"])

    after = asyncio.run(_chain(restored, grant_id))
    assert after == before
    head, findings = r.verify_chain(
        after, grant=grant_id, public_key=public_key, verify=verify_signature
    )
    assert (findings, head.seq, head.totals["requests"]) == ([], REQUESTS, REQUESTS)
    assert after[2][1]["body"]["outcome"] == "cancelled"

    with sqlite3.connect(restored / "ficc.db") as connection:
        connection.execute(
            # The grantor keeps each receipt in its usage record's row.
            "UPDATE usage_records SET receipt = replace(receipt, '\"completion_tokens\":3', "
            "'\"completion_tokens\":0') WHERE receipt_seq = 4"
        )
    connection.close()
    _, findings = r.verify_chain(
        asyncio.run(_chain(restored, grant_id)),
        grant=grant_id,
        public_key=public_key,
        verify=verify_signature,
    )
    assert findings == [r.Finding(4, r.DIGEST)]
