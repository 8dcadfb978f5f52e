"""Two in-process clusters over fakes and an in-memory channel: the federation's rules in the
fast tier (pairing, approval, grants, the gate, lost answers)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.support.fakes.peer_channel import Pair, open_pair


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[Pair]:
    async with open_pair(tmp_path) as opened:
        yield opened
