"""Shared fixtures of the FICC suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cluster import RunningCluster, start_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    """One real FICC server for a test module."""
    running = start_cluster(tmp_path_factory.mktemp("cluster") / "state")
    yield running
    running.stop()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"
