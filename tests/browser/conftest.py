"""The browser tier: one headless Chromium for the session, two real clusters per module."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, sync_playwright
from tests.support.cluster import RunningCluster
from tests.support.console import LAUNCH_ARGS, chromium_executable
from tests.support.federation import configure
from tests.support.transfers import Clusters, start_tuned

RANGE_BYTES = 256 * 1024
"""Small ranges keep a model of a few tens of MiB in flight long enough to watch and pause."""
STALL_SECONDS = 10.0


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless, for one module.

    Playwright's sync API runs an event loop of its own on this thread while it is started:
    it is stopped at the end of the module, so the asyncio tests that follow can run theirs.
    """
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium_executable(), headless=True, args=LAUNCH_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def new_context(browser: Browser) -> Iterator[Callable[..., BrowserContext]]:
    """Opens browser contexts for one test; each is closed after it."""
    opened: list[BrowserContext] = []

    def open_context(**options: Any) -> BrowserContext:
        context = browser.new_context(**options)
        opened.append(context)
        return context

    yield open_context
    for context in opened:
        context.close()


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
