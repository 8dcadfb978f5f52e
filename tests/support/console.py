"""Helpers for the console's browser tests: Debian's Chromium, signing in, screenshots and an
accessibility check written for these pages (landmarks, names, captions, contrast, focus).

The browser is the one the set-up installs (``scripts/ensure-chromium``); Playwright's own
download is never used, and a missing browser fails the tests instead of skipping them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final

from playwright.sync_api import Page
from tests.support.cluster import RunningCluster, ficc

CHROMIUM: Final = Path(os.environ.get("FICC_CHROMIUM", "/usr/bin/chromium"))
LAUNCH_ARGS: Final = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS: Final = Path(
    os.environ.get("FICC_CONSOLE_SCREENSHOTS")
    or Path(os.environ.get("TMPDIR", "/tmp")) / "ficc-console-screenshots"
)
"""Where the tests save each page; ``make screenshots`` points it at docs/console."""
DESKTOP: Final = {"width": 1280, "height": 900}
PHONE: Final = {"width": 390, "height": 844}
UI_DEADLINE_MS: Final = 20_000
A11Y_SCRIPT: Final = (Path(__file__).parent / "console_a11y.js").read_text()


def chromium_executable() -> str:
    """The Chromium to drive; an AssertionError (a failure, not a skip) when it is missing."""
    assert CHROMIUM.exists(), (
        f"{CHROMIUM} is missing: run scripts/ensure-chromium (make setup-test does) "
        "or set FICC_CHROMIUM to a Chromium executable"
    )
    return str(CHROMIUM)


def sign_in(page: Page, cluster: RunningCluster, path: str = "/ui") -> None:
    """Open a fresh one-time login link (as `ficc login-link` prints it), then ``path``."""
    result = ficc("login-link", state_dir=cluster.state_dir)
    assert result.returncode == 0, result.stderr
    page.goto(result.stdout.strip())
    if path != "/ui":
        page.goto(cluster.url + path)


def screenshot(page: Page, name: str) -> Path:
    """Save the whole page as NAME.png in :data:`SCREENSHOTS` (docs/console shows them)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def accessibility_problems(page: Page) -> list[dict[str, Any]]:
    """Serious problems the checker finds on the page as it is now (an empty list: none)."""
    found = page.evaluate(A11Y_SCRIPT)
    assert isinstance(found, list)
    return found


def describe(problems: list[dict[str, Any]]) -> str:
    return json.dumps(problems, indent=1)[:4000]
