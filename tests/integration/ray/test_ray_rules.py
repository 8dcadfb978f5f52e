"""The rules of FICC's Ray mode that need no Ray cluster: lazy import, node IDs, dead nodes,
the engine's listen address, and a model blob received by a node (verified, streamed)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ficc.adapters.ray_nodes import RayNodes, ficc_node_id, namespace_of, parse_ray_node
from ficc.adapters.runtimes.ray import bound_to
from ficc.adapters.runtimes.ray_calls import FETCH_CHUNK_BYTES, place_model
from ficc.adapters.runtimes.ray_replica import NODE_STORE_VARIABLE, EngineHost, ModelFileRefused
from ficc.base.errors import InvalidInput
from ficc.domain.nodes import Capacity, Gpu

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RAY_ID = "e00f9e8930e596a2259ff87893ef6805e53b1915587240781921b070"


def test_the_cli_and_the_default_serve_path_do_not_load_ray() -> None:
    probe = (
        "import sys, ficc.cli.main, ficc.cli.serve, ficc.bootstrap;"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
    shown = subprocess.run(
        [sys.executable, "-m", "ficc", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "--ray ADDRESS" in shown.stdout


def test_a_ray_node_keeps_its_ficc_id_and_a_dead_one_is_unavailable() -> None:
    entry = {
        "NodeID": RAY_ID,
        "Alive": False,
        "NodeManagerAddress": "127.0.0.1",
        "NodeManagerHostname": "vm",
        "Resources": {"CPU": 2.0, "memory": 4096.0, "GPU": 1.0},
        "Labels": {"zone": "a"},
    }
    node = parse_ray_node(entry, {"memory": 1024.0})
    assert node.capacity == Capacity(2, 4096, 1024, (Gpu(0, "GPU", 0, 0),))
    (listed,) = RayNodes("127.0.0.1:6379", namespace_of("abc")).as_nodes([node], NOW)
    assert listed.id == ficc_node_id(RAY_ID)
    assert ficc_node_id(RAY_ID) == ficc_node_id(RAY_ID.upper().lower())
    assert listed.ray_node_id == RAY_ID
    assert (listed.cpu_count, listed.memory_bytes, len(listed.gpus)) == (2, 4096, 1)
    assert listed.available is False
    assert listed.memory_available_bytes == 0
    shown = listed.as_json()
    assert shown["labels"] == {"zone": "a"}
    assert shown["availability"]["available"] is False
    assert shown["availability"]["reason"] == "the node left the Ray cluster"


def test_each_ficc_cluster_has_its_own_fixed_namespace() -> None:
    assert namespace_of("KEYONE") == namespace_of("KEYONE")
    assert namespace_of("KEYONE") != namespace_of("KEYTWO")


def test_the_engine_binds_the_address_it_is_given_and_nothing_else() -> None:
    argv = ["python", "-m", "server", "--host", "127.0.0.1", "--port", "8000"]
    assert bound_to(argv, "10.0.0.7") == [
        "python", "-m", "server", "--host", "10.0.0.7", "--port", "8000"
    ]  # fmt: skip
    with pytest.raises(InvalidInput, match="--host"):
        bound_to(["python", "-m", "server", "--port", "8000"], "10.0.0.7")
    with pytest.raises(InvalidInput, match="--host"):
        bound_to(["python", "-m", "server", "--host"], "10.0.0.7")


def store_files(store: Path) -> list[Path]:
    return sorted(path for path in store.rglob("*") if path.is_file())


async def test_a_node_refuses_a_blob_that_does_not_match_and_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NODE_STORE_VARIABLE, str(tmp_path / "node"))
    content = b"model bytes " * 1000
    digest = hashlib.sha256(content).hexdigest()
    host = EngineHost()
    assert await host.locate_blob(digest, None) is None
    await host.begin_fetch(digest, len(content), None)
    await host.write_chunk(content[:-1] + b"X")
    with pytest.raises(ModelFileRefused, match=f"not the expected {digest}"):
        await host.finish_fetch()
    assert store_files(tmp_path / "node") == []
    assert await host.locate_blob(digest, None) is None
    # More bytes than the blob has are refused as they arrive, and the temp file goes.
    await host.begin_fetch(digest, len(content), None)
    with pytest.raises(ModelFileRefused, match="larger than"):
        await host.write_chunk(content + b"!")
    assert store_files(tmp_path / "node") == []
    with pytest.raises(ModelFileRefused, match="no blob is being received"):
        await host.finish_fetch()


async def test_a_remote_node_without_a_blob_store_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(NODE_STORE_VARIABLE, raising=False)
    with pytest.raises(ModelFileRefused, match=NODE_STORE_VARIABLE):
        await EngineHost().locate_blob("a" * 64, None)


class NodeCalls:
    """Calls ``EngineHost`` methods the way a Ray actor handle does (``actor.method.remote``),
    recording how many are in flight at once and the largest chunk sent."""

    def __init__(self, host: EngineHost) -> None:
        self._host = host
        self.in_flight = 0
        self.most_in_flight = 0
        self.largest_chunk = 0
        self.chunks = 0

    def __getattr__(self, name: str) -> Any:
        method: Callable[..., Awaitable[Any]] = getattr(self._host, name)
        calls = self

        class Remote:
            @staticmethod
            async def remote(*args: Any) -> Any:
                if name == "write_chunk":
                    calls.largest_chunk = max(calls.largest_chunk, len(args[0]))
                    calls.chunks += 1
                calls.in_flight += 1
                calls.most_in_flight = max(calls.most_in_flight, calls.in_flight)
                try:
                    return await method(*args)
                finally:
                    calls.in_flight -= 1

        return Remote


async def test_a_blob_goes_to_a_node_in_bounded_chunks_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NODE_STORE_VARIABLE, str(tmp_path / "node"))
    content = bytes(range(256)) * (5 * FETCH_CHUNK_BYTES // 256 // 2)  # two and a half chunks
    digest = hashlib.sha256(content).hexdigest()
    source = tmp_path / "ficc" / digest
    source.parent.mkdir()
    source.write_bytes(content)
    calls = NodeCalls(EngineHost())
    placed = await place_model(calls, source, None)
    assert placed == tmp_path / "node" / "blobs" / digest[:2] / digest
    assert hashlib.sha256(placed.read_bytes()).hexdigest() == digest
    assert (calls.chunks, calls.largest_chunk, calls.most_in_flight) == (3, FETCH_CHUNK_BYTES, 1)
    # Present and verified now: the next launch on this node sends nothing.
    again = NodeCalls(EngineHost())
    assert await place_model(again, source, None) == placed
    assert again.chunks == 0
