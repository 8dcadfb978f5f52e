"""The HyperNet port peers know, held by another process (a former active paused, not dead):
the companion serves on another port meanwhile, keeps the known one on record, and moves back
once it is free, so that peers reach the cluster again by themselves."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.support.fakes.clock import FakeClock
from tests.support.fakes.unit_of_work import FakeStore, FakeUnitOfWorkFactory

from ficc.base.errors import FiccError
from ficc.services import companion as companion_module
from ficc.services.companion import COMPANION_SETTING, Companion

KNOWN_PORT = 4433


class FakeTransport:
    """Binds a port of ``taken`` (the machine's UDP ports) or fails as a taken port does."""

    def __init__(self, taken: set[int], bind: str, fallback_port: int) -> None:
        self._taken = taken
        port = int(bind.rpartition(":")[2])
        self.port = port or fallback_port
        self.started = False

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{self.port}"]

    async def start(self) -> None:
        if self.port in self._taken:
            raise FiccError(f"port {self.port} is in use")
        self._taken.add(self.port)
        self.started = True

    async def stop(self) -> None:
        if self.started:
            self._taken.discard(self.port)
            self.started = False


async def test_a_companion_whose_known_port_is_held_moves_back_once_it_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(companion_module, "RECLAIM_PORT_SECONDS", 0.0, raising=False)
    store = FakeStore()
    store.settings[COMPANION_SETTING] = {"agent_directory": str(tmp_path), "port": KNOWN_PORT}
    taken = {KNOWN_PORT}  # the paused former active's
    made: list[FakeTransport] = []

    def factory(_directory: Path, bind: str) -> Any:
        made.append(FakeTransport(taken, bind, fallback_port=5000 + len(made)))
        return made[-1]

    companion = Companion(
        FakeUnitOfWorkFactory(store), FakeClock(), factory, "key", bind_address="127.0.0.1:0"
    )
    await companion.restore()
    assert companion.transport.addresses != [f"127.0.0.1:{KNOWN_PORT}"]
    for _ in range(20):  # it keeps trying while the port is held
        await asyncio.sleep(0)
    assert store.settings[COMPANION_SETTING]["port"] == KNOWN_PORT  # not the stand-in's
    taken.discard(KNOWN_PORT)  # the paused process woke and ended
    for _ in range(1000):
        if companion.transport.addresses == [f"127.0.0.1:{KNOWN_PORT}"]:
            break
        await asyncio.sleep(0)
    assert companion.transport.addresses == [f"127.0.0.1:{KNOWN_PORT}"]
    assert [t.started for t in made if t.port != KNOWN_PORT] == [False]  # the stand-in ended
    await companion.stop()
    assert taken == set()
