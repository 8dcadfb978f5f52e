"""Fixtures of the operations tests: a server that logs JSON."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.cluster import RunningCluster, start_cluster


@pytest.fixture(scope="module")
def json_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    """One real server for a test module, logging JSON at the default level."""
    running = start_cluster(tmp_path_factory.mktemp("ops") / "state", "--log-format", "json")
    yield running
    running.stop()
