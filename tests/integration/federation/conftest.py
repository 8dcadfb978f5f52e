"""Two in-process clusters over an in-memory channel, for the federation's service tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.fakes.peer_channel import Pair, open_pair


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[Pair]:
    async with open_pair(tmp_path) as opened:
        yield opened
