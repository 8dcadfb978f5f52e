"""The browser tier: one headless Chromium for the session, two real clusters per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cluster import RunningCluster
from tests.support.console import LAUNCH_ARGS, chromium_executable
from tests.support.federation import configure
from tests.support.transfers import Clusters, start_tuned

RANGE_BYTES = 256 * 1024
"""Small ranges keep a model of a few tens of MiB in flight long enough to watch and pause."""
STALL_SECONDS = 10.0


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """pytest-playwright's launch arguments plus Debian's Chromium (it has no flag for it)."""
    return {
        **browser_type_launch_args,
        "executable_path": chromium_executable(),
        "headless": True,
        "args": LAUNCH_ARGS,
    }


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    """alpha (the requester) and beta (the grantor), companions configured, not paired."""
    root: Path = tmp_path_factory.mktemp("console")
    started: list[RunningCluster] = []
    try:
        for name in ("alpha", "beta"):
            started.append(
                start_tuned(root / name, range_bytes=RANGE_BYTES, stall_seconds=STALL_SECONDS)
            )
        alpha, beta = started
        configure(alpha, "alpha-lab")
        configure(beta, "beta-lab")
        yield Clusters(alpha, beta, RANGE_BYTES, STALL_SECONDS)
    finally:
        for cluster in started:
            cluster.stop()
