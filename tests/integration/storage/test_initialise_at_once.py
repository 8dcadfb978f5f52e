"""Two processes sharing one PostgreSQL database (an active one and a standby) started at once on
an empty database: one migrates and creates the first rows and the cluster key, the other then
finds them; neither fails and both serve the same cluster."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from tests.support.postgres import PostgresServer

from ficc.adapters.keys import ClusterKey
from ficc.adapters.sql.database import Database
from ficc.adapters.sql.schema import schema_state
from ficc.bootstrap.lifecycle import initialise
from ficc.bootstrap.settings import Settings


async def test_two_initialisations_at_once_on_an_empty_database_make_one_cluster(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    settings = Settings(state_dir=tmp_path / "state", database_url=postgres.database("at_once"))
    async with asyncio.timeout(60):  # the two must not wait on each other for ever
        first, second = await asyncio.gather(initialise(settings), initialise(settings))
    assert first.cluster_key == second.cluster_key
    assert ClusterKey.load(settings.state.cluster_key).public_text == first.cluster_key
    assert [first.created, second.created].count(True) == 1
    database = Database(settings.database)
    try:
        assert (await schema_state(database)).at_head
    finally:
        await database.dispose()


def test_two_ficc_init_processes_started_at_once_both_succeed_on_one_cluster(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.database("at_once")
    command = [sys.executable, "-m", "ficc", "init", "--state-dir", str(tmp_path / "state")]
    started = [
        subprocess.Popen(
            [*command, "--database", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=120) for process in started]
    assert [process.returncode for process in started] == [0, 0], outputs
    shown = [json.loads(stdout) for stdout, _ in outputs]
    kept = ClusterKey.load(tmp_path / "state" / "cluster.key").public_text
    assert [result["cluster_key"] for result in shown] == [kept, kept]
    assert sorted(result["created"] for result in shown) == [False, True]
