"""Shared fixtures of the FICC suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cluster import RunningCluster, start_cluster
from tests.support.postgres import PostgresServer, start_postgres


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    """One real FICC server for a test module."""
    running = start_cluster(tmp_path_factory.mktemp("cluster") / "state")
    yield running
    running.stop()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session; each user makes its own database on it."""
    server = start_postgres()
    yield server
    server.stop()
