"""What runs inside a replica's Ray actor, on its node: the engine process and its end.

This module does not import Ray: the Ray runtime turns :class:`EngineHost` into an actor class.
The engine is the actor's child, started through ``parent_guard`` so that it dies with the
actor, and confined by FICC's sandbox (:mod:`.sandbox`); the actor verifies the model file by its
digest before launching.

A node keeps model files in its own blob store: the directory named by ``FICC_NODE_STORE`` in
the environment its ``ray start`` ran with, else (a node on FICC's machine) FICC's own store. A
blob missing there is received in chunks from FICC, hashed as it is written to a locked temp
file, and moved to its address only when its SHA-256 matches: the blob store's own
write-verify-rename, so a corrupted copy is refused and never seen by an engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from ficc.adapters.blobstore import BlobStore, BlobWriter
from ficc.adapters.runtimes.processes import EngineProcess, engine_environment
from ficc.adapters.runtimes.sandbox import EngineSandbox
from ficc.adapters.runtimes.supervised import KEPT_LOGS_PER_SERVICE
from ficc.base.errors import FiccError
from ficc.services.ports.runtimes import ReplicaExit

HASH_CHUNK_BYTES: Final = 4 * 1024 * 1024
GUARD_SCRIPT: Final = Path(__file__).with_name("parent_guard.py")
"""Run by path: the engine's small environment has no PYTHONPATH to find FICC's modules by."""
NODE_STORE_VARIABLE: Final = "FICC_NODE_STORE"
"""The node's blob store directory, set in the environment of its ``ray start``."""
_SHA256_NAME = re.compile(r"^[0-9a-f]{64}$")


class ModelFileRefused(Exception):
    """The model file is missing on this node or its bytes do not match its digest."""


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def verify_model_file(path: Path) -> None:
    """The blob store names a model file by its SHA-256: rehash it here, on the node."""
    if not _SHA256_NAME.fullmatch(path.name):
        raise ModelFileRefused(f"{path.name} is not a blob named by its SHA-256")
    if not path.is_file():
        raise ModelFileRefused(f"blob {path.name} is not on this node")
    actual = file_sha256(path)
    if actual != path.name:
        raise ModelFileRefused(f"blob {path.name} on this node has SHA-256 {actual}")


def free_port(host: str) -> int:
    """A TCP port free on ``host`` now (another program may take it before the engine does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def node_store_root(default_root: str | None) -> Path:
    """This node's blob store: ``FICC_NODE_STORE``, else FICC's own when it shares this machine."""
    configured = os.environ.get(NODE_STORE_VARIABLE, "").strip() or default_root
    if not configured:
        raise ModelFileRefused(
            f"this node has no blob store: start it with {NODE_STORE_VARIABLE}=DIRECTORY in the "
            "environment of `ray start`"
        )
    return Path(configured)


def prune_node_logs(folder: Path) -> None:
    """Keep a service's newest logs on the node (one fewer: the new attempt's comes next)."""
    with contextlib.suppress(FileNotFoundError):
        logs = sorted(folder.glob("*.log"), key=lambda path: path.stat().st_mtime)
        for path in logs[: max(0, len(logs) - KEPT_LOGS_PER_SERVICE + 1)]:
            path.unlink(missing_ok=True)


class EngineHost:
    """One engine on one node, owned by one Ray actor."""

    def __init__(self) -> None:
        self._process: EngineProcess | None = None
        self._fetch: tuple[BlobStore, BlobWriter] | None = None
        self._fetched: set[str] = set()
        self._adoption: dict[str, object] = {}

    async def reserve_port(self, host: str) -> int:
        """A port free on ``host`` (this node's address, or loopback) now, for the engine."""
        return free_port(host)

    async def locate_blob(self, sha256: str, default_store: str | None) -> str | None:
        """The path of blob ``sha256`` in this node's store; None when it must be fetched."""
        if not _SHA256_NAME.fullmatch(sha256):
            raise ModelFileRefused(f"{sha256} is not a blob named by its SHA-256")
        store = await asyncio.to_thread(BlobStore, node_store_root(default_store))
        return str(store.blob_path(sha256)) if store.has(sha256) else None

    async def begin_fetch(self, sha256: str, size: int, default_store: str | None) -> None:
        """Open a temp file in this node's store for blob ``sha256`` of ``size`` bytes."""
        if self._fetch is not None:
            raise ModelFileRefused("a blob is being received already")
        store = await asyncio.to_thread(BlobStore, node_store_root(default_store))
        self._fetch = store, store.begin(expected_sha256=sha256, max_bytes=size, field="model")

    async def write_chunk(self, data: bytes) -> int:
        """Hash and append the next chunk; the bytes received so far.

        Written on the event loop, not in a thread: chunks must land in the order they were
        sent, and the sender awaits each one before the next.
        """
        if self._fetch is None:
            raise ModelFileRefused("no blob is being received")
        _store, writer = self._fetch
        try:
            writer.write(data)
        except FiccError as exc:
            self._fetch = None
            writer.abort()
            raise ModelFileRefused(f"the model's blob was refused: {exc.message}") from None
        return writer.size

    async def finish_fetch(self) -> str:
        """Check the digest of what arrived and move it to its address; the blob's path.

        A mismatch removes the temp file and refuses: no partial or wrong blob stays behind.
        """
        fetch, self._fetch = self._fetch, None
        if fetch is None:
            raise ModelFileRefused("no blob is being received")
        store, writer = fetch
        with writer:
            try:
                sha256, _size = await asyncio.to_thread(writer.commit)
            except FiccError as exc:
                raise ModelFileRefused(f"the model's blob was refused: {exc.message}") from None
        path = store.blob_path(sha256)
        self._fetched.add(str(path))
        return str(path)

    async def start(
        self,
        argv: Sequence[str],
        variables: Mapping[str, str],
        log_path: str,
        model_path: str | None,
        sandbox: EngineSandbox | None = None,
        adoption: Mapping[str, object] | None = None,
    ) -> tuple[int, int]:
        """Verify the model, start the engine confined by ``sandbox`` (FICC's, hiding this
        node's blob store too; the engine binds its own port, so it shares the node's network);
        its pid and start ticks.

        ``log_path`` is absolute on FICC's machine, else relative to the node store's ``logs``.

        ``variables`` (the attempt and its API key) reach the engine through its environment,
        never its command line. ``adoption`` is what a later FICC process needs to reach the
        engine (its address and key): kept here, beside the engine, and never written to disk.
        """
        if self._process is not None:
            raise RuntimeError("this actor started its engine already")
        if model_path is not None and model_path not in self._fetched:
            # A blob this actor just received was hashed as it arrived; any other is rehashed.
            await asyncio.to_thread(verify_model_file, Path(model_path))
        log = Path(log_path)
        if not log.is_absolute():
            # A node on another machine keeps the log in its own store; its tail comes back
            # with the engine's end (``wait``).
            log = node_store_root(None) / "logs" / log
            await asyncio.to_thread(prune_node_logs, log.parent)
        sandbox = sandbox or EngineSandbox()
        if configured := os.environ.get(NODE_STORE_VARIABLE, "").strip():
            sandbox = sandbox.with_hidden(Path(configured))
        reveal = [] if model_path is None else [Path(model_path)]
        confined = sandbox.command(argv, reveal=reveal, private_network=False)
        guarded = [sys.executable, str(GUARD_SCRIPT), str(os.getpid()), *confined]
        self._process = await EngineProcess.spawn(
            guarded, log_path=log, env=engine_environment(variables)
        )
        self._adoption = dict(adoption or {})
        return self._process.identity.pid, self._process.identity.start_ticks

    async def adoption(self) -> dict[str, object] | None:
        """What a FICC process taking this replica over needs (the engine's pid and start ticks
        beside what ``start`` was given); None once the engine has ended or before it started.

        Any driver of FICC's Ray namespace may ask: one that can reach the Ray cluster can run
        code on its nodes anyway, so this reveals nothing a Ray client could not take.
        """
        if self._process is None or self._process.returncode is not None:
            return None
        identity = self._process.identity
        return {**self._adoption, "pid": identity.pid, "start_ticks": identity.start_ticks}

    async def identity(self) -> tuple[int, int] | None:
        """The engine's pid and start ticks, if it was started."""
        if self._process is None:
            return None
        return self._process.identity.pid, self._process.identity.start_ticks

    async def wait(self) -> ReplicaExit:
        """Return when the engine ends."""
        if self._process is None:
            raise RuntimeError("no engine was started")
        return await self._process.wait()

    async def stop(self, grace_seconds: float) -> ReplicaExit | None:
        """SIGTERM, SIGKILL after the grace period; None when no engine was started."""
        if self._process is None:
            return None
        return await self._process.stop(grace_seconds)
