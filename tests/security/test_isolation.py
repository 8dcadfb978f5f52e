"""Isolation and admission: projects, grants and peers get only what is theirs.

Fast tier: the grantor's services in process over a real SQLite file, requests driven through
``PeerOperations.serve`` as a proven session drives them; an engine that never stops talking
is a real HTTP server on loopback (run under scripts/in-loopback-netns).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

import sqlalchemy
from tests.support.isolation import (
    PeerOf,
    RefusingRuntime,
    add_node,
    admission_services,
    give_grant,
    grantor,
    paired_peer,
    record_model,
    refusal,
    serve,
    set_state,
    stored_grant,
)
from tests.support.upstream import EngineAt

from ficc.adapters.engines.pool import EngineClients
from ficc.adapters.sql.database import LoopConnection
from ficc.adapters.sql.grants import SqlGrants
from ficc.base.errors import Conflict, InvalidInput, LimitExceeded, NotFound, PeerUnreachable
from ficc.base.ids import new_id
from ficc.base.units import GiB, MiB, TiB
from ficc.bootstrap import Cluster, lifecycle
from ficc.domain import transfers as tr
from ficc.domain.inference import (
    MAX_GRANT_RUNNING_REPLICAS,
    MAX_GRANT_RUNNING_SERVICES,
    ServiceState,
)
from ficc.domain.manifests import MAX_JSON_INTEGER, canonical_sha256, parse_manifest
from ficc.domain.principals import owner_principal
from ficc.services.inference import Actor
from ficc.services.transfers import Fetcher, Transfers

OWNER = Actor("owner")


def mutation_id() -> str:
    return secrets.token_hex(16)


async def stored_blob(cluster: Cluster, tmp_path: Path, content: bytes) -> str:
    source = tmp_path / f"{secrets.token_hex(4)}.gguf"
    source.write_bytes(content)
    digest, _ = await asyncio.to_thread(cluster.blobs.import_file, source)
    return str(digest)


def manifest_naming(digest: str, size: int) -> dict[str, Any]:
    return {
        "name": "borrowed",
        "format": "gguf",
        "files": [{"path": "w.gguf", "size": size, "sha256": digest}],
        "metadata": {},
    }


async def peer_record(cluster: Cluster, peer: PeerOf, grant_id: str, digest: str, size: int) -> str:
    """A record the peer creates through ``models.create`` naming ``digest``; its ID."""
    created = await serve(
        cluster,
        peer,
        grant_id,
        "models.create",
        {"manifest": manifest_naming(digest, size)},
        mutation_id(),
    )
    return str(created["result"]["id"])


# --- F5: a record resolves only to blobs its project owns -----------------------------------


async def test_a_peer_record_naming_another_projects_blob_reads_no_byte_and_tells_nothing(
    tmp_path: Path, figures: Any
) -> None:
    cluster = await grantor(tmp_path)
    try:
        secret = secrets.token_bytes(4096)
        digest = await stored_blob(cluster, tmp_path, secret)
        await record_model(cluster, "b", [len(secret)], owned=True, digests=[digest])
        peer = await paired_peer(cluster)
        grant = await give_grant(
            cluster,
            peer,
            scopes=["models:manage", "models:transfer", "inference:manage"],
            transfer_bytes=MiB,
        )
        borrowed = await peer_record(cluster, peer, grant.id, digest, len(secret))
        never_stored = secrets.token_hex(32)
        absent = await peer_record(cluster, peer, grant.id, never_stored, len(secret))

        async def ranged(model: str, sha256: str) -> Exception:
            body = {"model": model, "file": "w.gguf", "offset": 0, "length": 16, "digest": sha256}
            return await refusal(serve(cluster, peer, grant.id, "models.range", body))

        stored_answer = await ranged(borrowed, digest)
        absent_answer = await ranged(absent, never_stored)
        assert isinstance(stored_answer, PeerUnreachable)
        # The same answer whether the bytes are stored for another project or not at all.
        assert (type(stored_answer), str(stored_answer)) == (
            type(absent_answer),
            str(absent_answer),
        )
        assert (await stored_grant(cluster, grant.id)).transfer_bytes_used == 0
        prepared = await serve(cluster, peer, grant.id, "inference.prepare", {})
        ready = {m["id"]: m["ready"] for m in prepared["result"]["models"]}
        assert ready == {borrowed: False, absent: False}
        figures.record(tries=3, refused=3, bytes_leaked=0)
    finally:
        await lifecycle.close(cluster)


async def test_a_peer_record_naming_an_ungranted_model_of_the_project_reads_no_byte_g6(
    tmp_path: Path, figures: Any
) -> None:
    """G6: a record a peer created resolves only to blobs its grant gave it, not to every
    blob of the grantor's project."""
    cluster = await grantor(tmp_path)
    try:
        node = await add_node(cluster)
        granted_bytes = secrets.token_bytes(4096)
        secret_bytes = secrets.token_bytes(4096)
        granted_digest = await stored_blob(cluster, tmp_path, granted_bytes)
        secret_digest = await stored_blob(cluster, tmp_path, secret_bytes)
        granted = await record_model(
            cluster, "default", [len(granted_bytes)], owned=True, digests=[granted_digest]
        )
        await record_model(
            cluster, "default", [len(secret_bytes)], owned=True, digests=[secret_digest]
        )
        peer = await paired_peer(cluster)
        grant = await give_grant(
            cluster,
            peer,
            scopes=["models:read", "models:manage", "models:transfer", "inference:manage"],
            models=[granted.id],
            nodes=[node.id],
            transfer_bytes=MiB,
        )
        borrowed = await peer_record(cluster, peer, grant.id, secret_digest, len(secret_bytes))
        never_stored = secrets.token_hex(32)
        absent = await peer_record(cluster, peer, grant.id, never_stored, len(secret_bytes))
        # A copy of the granted model's own file: those bytes came through the grant already.
        copied = await peer_record(cluster, peer, grant.id, granted_digest, len(granted_bytes))

        def range_of(model: str, sha256: str) -> dict[str, Any]:
            return {"model": model, "file": "w.gguf", "offset": 0, "length": 16, "digest": sha256}

        stored_answer = await refusal(
            serve(cluster, peer, grant.id, "models.range", range_of(borrowed, secret_digest))
        )
        absent_answer = await refusal(
            serve(cluster, peer, grant.id, "models.range", range_of(absent, never_stored))
        )
        assert isinstance(stored_answer, PeerUnreachable)
        # The same answer whether the bytes are another model's of the project or not stored.
        assert (type(stored_answer), str(stored_answer), stored_answer.details) == (
            type(absent_answer),
            str(absent_answer),
            absent_answer.details,
        )
        assert (await stored_grant(cluster, grant.id)).transfer_bytes_used == 0
        served = await serve(
            cluster, peer, grant.id, "models.range", range_of(copied, granted_digest)
        )
        assert served == {"streamed_bytes": 16}
        assert (await stored_grant(cluster, grant.id)).transfer_bytes_used == 16

        prepared = await serve(cluster, peer, grant.id, "inference.prepare", {})
        ready = {m["id"]: m["ready"] for m in prepared["result"]["models"]}
        assert ready == {granted.id: True, borrowed: False, absent: False, copied: True}

        spec = {"name": "borrowed", "model": borrowed, "runtime": "llama.cpp"}
        created = await serve(
            cluster, peer, grant.id, "inference.create", {"spec": spec}, mutation_id()
        )
        start = {"service": created["result"]["id"], "revision": 1, "operation": "start"}
        error = await refusal(
            serve(cluster, peer, grant.id, "inference.control", start, mutation_id())
        )
        assert isinstance(error, Conflict)
        assert error.details["reason"] == "files_missing"
        async with cluster.uow_factory() as uow:
            attempts = await uow.attempts.for_service(created["result"]["id"])
        assert attempts == []
        figures.record(tries=3, refused=3, bytes_leaked=0)
    finally:
        await lifecycle.close(cluster)


async def test_a_project_reads_and_runs_the_blobs_it_imported(tmp_path: Path) -> None:
    """The positive side of the rule above: the owner's own record is ready and served."""
    cluster = await grantor(tmp_path)
    try:
        content = secrets.token_bytes(4096)
        digest = await stored_blob(cluster, tmp_path, content)
        model = await record_model(cluster, "default", [len(content)], owned=True, digests=[digest])
        peer = await paired_peer(cluster)
        grant = await give_grant(
            cluster,
            peer,
            scopes=["models:transfer", "inference:manage"],
            models=[model.id],
            transfer_bytes=MiB,
        )
        body = {
            "model": model.id,
            "file": "part0.gguf",
            "offset": 0,
            "length": 16,
            "digest": digest,
        }
        served = await serve(cluster, peer, grant.id, "models.range", body)
        assert served == {"streamed_bytes": 16}
        prepared = await serve(cluster, peer, grant.id, "inference.prepare", {})
        assert [m["ready"] for m in prepared["result"]["models"]] == [True]
    finally:
        await lifecycle.close(cluster)


async def test_a_service_on_a_borrowed_blob_is_refused_at_start_like_a_missing_one(
    tmp_path: Path, figures: Any
) -> None:
    cluster = await grantor(tmp_path)
    try:
        node = await add_node(cluster)
        secret = secrets.token_bytes(4096)
        digest = await stored_blob(cluster, tmp_path, secret)
        await record_model(cluster, "b", [len(secret)], owned=True, digests=[digest])
        peer = await paired_peer(cluster)
        grant = await give_grant(
            cluster, peer, scopes=["models:manage", "inference:manage"], nodes=[node.id]
        )
        answers = []
        for named in (digest, secrets.token_hex(32)):
            model = await peer_record(cluster, peer, grant.id, named, len(secret))
            spec = {"name": "borrowed", "model": model, "runtime": "llama.cpp"}
            created = await serve(
                cluster, peer, grant.id, "inference.create", {"spec": spec}, mutation_id()
            )
            service = created["result"]
            start = {
                "service": service["id"],
                "revision": service["revision"],
                "operation": "start",
            }
            error = await refusal(
                serve(cluster, peer, grant.id, "inference.control", start, mutation_id())
            )
            assert isinstance(error, Conflict)
            assert error.details["reason"] == "files_missing"
            answers.append(str(error).replace(model, "MODEL"))
            async with cluster.uow_factory() as uow:
                after = await uow.services.get(service["id"])
                attempts = await uow.attempts.for_service(service["id"])
            assert after is not None
            assert after.state.value == "stopped"
            assert after.revision == service["revision"]
            assert attempts == []
        assert answers[0] == answers[1]
        figures.record(tries=2, refused=2, attempts_recorded=0)
    finally:
        await lifecycle.close(cluster)


# --- F7: start enforces the fit and the grant's running caps --------------------------------


async def test_a_start_beyond_the_nodes_memory_is_refused_with_nothing_started_or_held(
    tmp_path: Path, figures: Any
) -> None:
    cluster = await grantor(tmp_path)
    try:
        await add_node(cluster, cpu_count=8, memory_bytes=4 * GiB)
        runtime = RefusingRuntime()
        inference = admission_services(cluster, runtime)
        model = await record_model(cluster, "default", [512 * MiB], owned=True)
        running, _ = await inference.commands.create_service(
            OWNER,
            "default",
            {"name": "big", "model": model.id, "runtime": "llama.cpp", "replicas": 3},
        )
        await set_state(cluster, running["id"], ServiceState.RUNNING)
        # 3 x (512 MiB + 256 MiB) = 2.25 GiB committed; 2 more replicas need 1.5 GiB of 1.75.
        fits = {"name": "fits", "model": model.id, "runtime": "llama.cpp", "replicas": 2}
        assert (await inference.admission.preview("default", fits))["fits"] is True
        too_many = {"name": "more", "model": model.id, "runtime": "llama.cpp", "replicas": 3}
        assert (await inference.admission.preview("default", too_many))["fits"] is False
        service, _ = await inference.commands.create_service(OWNER, "default", too_many)
        tries = 5
        for _ in range(tries):
            error = await refusal(
                inference.commands.control_service(
                    OWNER, "default", service["id"], revision=1, operation="start"
                )
            )
            assert isinstance(error, Conflict)
            assert [r["resource"] for r in error.details["resources"]] == ["memory_bytes"]
        unchanged = await inference.commands.get_service("default", service["id"])
        assert (unchanged.state, unchanged.revision, unchanged.replicas) == ("stopped", 1, ())
        # Nothing was held by the refusals: what fitted before still fits.
        assert (await inference.admission.preview("default", fits))["fits"] is True
        assert runtime.launches == []
        figures.record(tries=tries, refused=tries, engines_launched=0, slots_leaked=0)
    finally:
        await lifecycle.close(cluster)


async def test_a_start_needing_more_cpus_than_the_node_has_is_refused(tmp_path: Path) -> None:
    cluster = await grantor(tmp_path)
    try:
        await add_node(cluster, cpu_count=2)
        inference = admission_services(cluster, RefusingRuntime())
        model = await record_model(cluster, "default", [MiB], owned=True)
        spec = {
            "name": "threads",
            "model": model.id,
            "runtime": "llama.cpp",
            "options": {"n_threads": 4},
        }
        service, _ = await inference.commands.create_service(OWNER, "default", spec)
        error = await refusal(
            inference.commands.control_service(
                OWNER, "default", service["id"], revision=1, operation="start"
            )
        )
        assert isinstance(error, Conflict)
        assert [r["resource"] for r in error.details["resources"]] == ["cpu_slots"]
    finally:
        await lifecycle.close(cluster)


async def test_a_grants_services_run_at_most_the_caps_at_once(tmp_path: Path, figures: Any) -> None:
    cluster = await grantor(tmp_path)
    try:
        await add_node(cluster, cpu_count=64, memory_bytes=1024 * GiB)
        runtime = RefusingRuntime()
        inference = admission_services(cluster, runtime)
        model = await record_model(cluster, "default", [MiB], owned=True)
        peer_actor = Actor("peer:test", grant_id=new_id("grant", b"a" * 16))

        async def created(name: str, replicas: int) -> str:
            spec = {"name": name, "model": model.id, "runtime": "llama.cpp", "replicas": replicas}
            view, _ = await inference.commands.create_service(peer_actor, "default", spec)
            return str(view["id"])

        for index in range(MAX_GRANT_RUNNING_SERVICES):
            await set_state(cluster, await created(f"s{index}", 1), ServiceState.RUNNING)
        fifth = await created("fifth", 1)
        error = await refusal(
            inference.commands.control_service(
                peer_actor, "default", fifth, revision=1, operation="start"
            )
        )
        assert isinstance(error, LimitExceeded)
        assert error.details["limit"] == "running_services"
        # Another grant's services are not counted against this one's caps: its start passes.
        other = Actor("peer:other", grant_id=new_id("grant", b"b" * 16))
        view, _ = await inference.commands.create_service(
            other, "default", {"name": "other", "model": model.id, "runtime": "llama.cpp"}
        )
        started, _ = await inference.commands.control_service(
            other, "default", view["id"], revision=1, operation="start"
        )
        assert started["state"] == "starting"
        await runtime.asked.wait()
        await inference.close()
        figures.record(tries=1, refused=1, cap_services=MAX_GRANT_RUNNING_SERVICES)
    finally:
        await lifecycle.close(cluster)


async def test_a_grants_replicas_run_at_most_the_cap_at_once(tmp_path: Path) -> None:
    cluster = await grantor(tmp_path)
    try:
        await add_node(cluster, cpu_count=64, memory_bytes=1024 * GiB)
        inference = admission_services(cluster, RefusingRuntime())
        model = await record_model(cluster, "default", [MiB], owned=True)
        actor = Actor("peer:test", grant_id=new_id("grant", b"c" * 16))
        first, _ = await inference.commands.create_service(
            actor,
            "default",
            {
                "name": "wide",
                "model": model.id,
                "runtime": "llama.cpp",
                "replicas": MAX_GRANT_RUNNING_REPLICAS - 1,
            },
        )
        await set_state(cluster, first["id"], ServiceState.RUNNING)
        second, _ = await inference.commands.create_service(
            actor,
            "default",
            {"name": "two", "model": model.id, "runtime": "llama.cpp", "replicas": 2},
        )
        error = await refusal(
            inference.commands.control_service(
                actor, "default", second["id"], revision=1, operation="start"
            )
        )
        assert isinstance(error, LimitExceeded)
        assert error.details["limit"] == "running_replicas"
    finally:
        await lifecycle.close(cluster)


async def test_n_ctx_beyond_the_models_trained_context_is_refused(tmp_path: Path) -> None:
    cluster = await grantor(tmp_path)
    try:
        await add_node(cluster)
        inference = admission_services(cluster, RefusingRuntime())
        model = await record_model(
            cluster, "default", [MiB], owned=True, metadata={"context_length": 2048}
        )
        spec = {
            "name": "long",
            "model": model.id,
            "runtime": "llama.cpp",
            "options": {"n_ctx": 1_048_576},
        }
        error = await refusal(inference.commands.create_service(OWNER, "default", spec))
        assert isinstance(error, InvalidInput)
        assert error.details["field"] == "options.n_ctx"
        assert await inference.commands.list_services("default") == []
    finally:
        await lifecycle.close(cluster)


# --- F8: a hostile manifest is refused at acquire, memory flat ------------------------------


class HostileGrantor:
    """A grantor whose manifest declares what it likes; counts the ranges it is asked for."""

    def __init__(self, files: list[dict[str, Any]]) -> None:
        self.files = files
        self.ranges_asked = 0

    async def request(self, *_: object, **__: object) -> dict[str, Any]:
        raw = {"name": "hostile", "format": "gguf", "files": self.files, "metadata": {}}
        try:
            sha256 = canonical_sha256(parse_manifest(raw))
        except InvalidInput:
            sha256 = "0" * 64
        return {"result": {"manifest": raw, "sha256": sha256, "model": "x"}}

    def open_stream(self, *_: object, **__: object) -> Any:
        self.ranges_asked += 1
        raise AssertionError("no range may be asked for")


async def _acquire_from(
    tmp_path: Path, files: list[dict[str, Any]], *, free_disk: int, remaining: int | None
) -> tuple[Exception, HostileGrantor, Cluster, int]:
    cluster = await grantor(tmp_path)
    peer = await paired_peer(cluster)
    grant_id = new_id("grant", secrets.token_bytes(16))
    async with cluster.uow_factory() as uow:
        stored = await uow.peers.get(peer.id)
        assert stored is not None
        await uow.peers.update(replace(stored, selected_grant=grant_id))
        if remaining is not None:
            await uow.remote_grants.replace_for_peer(
                peer.id,
                [{"id": grant_id, "remaining": {"transfer_bytes": remaining}}],
                stored.created_at,
            )
        await uow.commit()
    hostile = HostileGrantor(files)
    transfers = Transfers(
        Fetcher(
            cluster.uow_factory,
            cluster.clock,
            hostile,  # type: ignore[arg-type]
            cluster.blobs,
            lambda: free_disk,
        )
    )
    owner = owner_principal(new_id("user", secrets.token_bytes(16)), "owner", via="socket")
    tracemalloc.start()
    try:
        error = await refusal(
            transfers.acquire(
                owner, "default", peer.id, model=new_id("model", secrets.token_bytes(16))
            )
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return error, hostile, cluster, peak


async def _no_transfer(cluster: Cluster) -> None:
    async with cluster.uow_factory() as uow:
        assert await uow.transfers.in_project("default") == []


async def test_a_manifest_declaring_a_2_to_the_53_byte_file_is_refused_at_acquire_memory_flat(
    tmp_path: Path, figures: Any
) -> None:
    files = [{"path": "w.gguf", "size": MAX_JSON_INTEGER, "sha256": "a" * 64}]
    error, hostile, cluster, peak = await _acquire_from(
        tmp_path, files, free_disk=2**62, remaining=None
    )
    try:
        assert isinstance(error, InvalidInput)
        assert error.details["field"] == "manifest.files[0].size"
        assert hostile.ranges_asked == 0
        await _no_transfer(cluster)
        assert peak < 16 * MiB, peak
        figures.record(tries=1, refused=1, peak_traced_mib=round(peak / MiB, 2))
    finally:
        await lifecycle.close(cluster)


async def test_a_model_larger_than_free_disk_is_refused_before_any_range(
    tmp_path: Path,
) -> None:
    files = [{"path": "w.gguf", "size": 512 * GiB, "sha256": "a" * 64}]
    error, hostile, cluster, _ = await _acquire_from(
        tmp_path, files, free_disk=10 * GiB, remaining=None
    )
    try:
        assert isinstance(error, LimitExceeded)
        assert error.details["limit"] == "free_disk"
        assert hostile.ranges_asked == 0
        await _no_transfer(cluster)
    finally:
        await lifecycle.close(cluster)


async def test_a_model_larger_than_the_remaining_transfer_bytes_is_refused_before_any_range(
    tmp_path: Path,
) -> None:
    files = [{"path": "w.gguf", "size": 2 * MiB, "sha256": "a" * 64}]
    error, hostile, cluster, _ = await _acquire_from(
        tmp_path, files, free_disk=1 * TiB, remaining=1 * MiB
    )
    try:
        assert isinstance(error, LimitExceeded)
        assert error.details["limit"] == "transfer_bytes"
        assert hostile.ranges_asked == 0
        await _no_transfer(cluster)
    finally:
        await lifecycle.close(cluster)


def test_ranges_are_made_one_at_a_time() -> None:
    tracemalloc.start()
    try:
        ranges = tr.ranges(MAX_JSON_INTEGER, 0, 64 * MiB)
        first = next(iter(ranges))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first == (0, 64 * MiB)
    assert peak < MiB


# --- F12: another peer's grant is answered like an unknown one ------------------------------


async def test_another_peers_grant_id_is_answered_like_an_unknown_one_and_takes_nothing(
    tmp_path: Path, figures: Any
) -> None:
    cluster = await grantor(tmp_path)
    try:
        holder = await paired_peer(cluster)
        intruder = await paired_peer(cluster)
        grant = await give_grant(cluster, holder, scopes=["discover"], concurrent=1, requests=5)
        unknown = new_id("grant", secrets.token_bytes(16))
        answers = []
        for grant_id in (grant.id, unknown):
            # A scope the grant lacks and an oversized body: neither may be what refuses.
            body = {"spec": {"name": "x" * 100}}
            error = await refusal(serve(cluster, intruder, grant_id, "inference.preview", body))
            assert isinstance(error, NotFound)
            answers.append((error.code, str(error), sorted(error.details)))
        assert answers[0][0] == answers[1][0] == "not_found"
        assert answers[0][1].replace(grant.id, "G") == answers[1][1].replace(unknown, "G")
        assert answers[0][2] == answers[1][2] == ["grant", "stage"]
        assert cluster.federation.slots.in_flight(grant.id) == 0
        assert (await stored_grant(cluster, grant.id)).requests_used == 0
        # The holder's own request is still admitted (its one slot was never taken).
        assert (await serve(cluster, holder, grant.id, "discover", {}))["replayed"] is False
        figures.record(tries=2, refused=2, slots_leaked=0)
    finally:
        await lifecycle.close(cluster)


# --- F18: the requests charge never overshoots ----------------------------------------------


async def test_concurrent_admissions_charge_exactly_the_grants_requests(
    tmp_path: Path, figures: Any
) -> None:
    cluster = await grantor(tmp_path)
    try:
        peer = await paired_peer(cluster)
        allowed, tries = 5, 16
        grant = await give_grant(
            cluster, peer, scopes=["discover"], concurrent=tries, requests=allowed
        )
        results = await asyncio.gather(
            *(serve(cluster, peer, grant.id, "discover", {}) for _ in range(tries)),
            return_exceptions=True,
        )
        served = [r for r in results if isinstance(r, dict)]
        refused = [r for r in results if isinstance(r, LimitExceeded)]
        assert (len(served), len(refused)) == (allowed, tries - allowed)
        assert all(r.details["limit"] == "requests" for r in refused)
        assert (await stored_grant(cluster, grant.id)).requests_used == allowed
        assert cluster.federation.slots.in_flight(grant.id) == 0
        figures.record(tries=tries, refused=len(refused), charged=allowed, slots_leaked=0)
    finally:
        await lifecycle.close(cluster)


async def test_the_request_charge_statement_never_overshoots_across_connections(
    tmp_path: Path,
) -> None:
    """The statement itself, from separate connections on threads (no FICC writer lock)."""
    cluster = await grantor(tmp_path)
    try:
        peer = await paired_peer(cluster)
        allowed, tries = 7, 24
        grant = await give_grant(cluster, peer, scopes=["discover"], requests=allowed)
        engine = sqlalchemy.create_engine(cluster.database.url, poolclass=sqlalchemy.NullPool)
        sqlalchemy.event.listen(
            engine,
            "connect",
            lambda conn, _: conn.execute("PRAGMA busy_timeout=10000"),
        )
        charged: list[bool] = []
        start = threading.Barrier(tries)

        def charge() -> None:
            connection = engine.connect()
            try:
                connection.begin()
                start.wait(timeout=30)
                repository = SqlGrants(LoopConnection(connection))
                done = asyncio.run(repository.charge_request(grant.id, requests=allowed))
                connection.commit()
                charged.append(done)
            finally:
                connection.close()

        threads = [threading.Thread(target=charge) for _ in range(tries)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        engine.dispose()
        assert (charged.count(True), charged.count(False)) == (allowed, tries - allowed)
        assert (await stored_grant(cluster, grant.id)).requests_used == allowed
    finally:
        await lifecycle.close(cluster)


# --- F19: a plain answer stops at response_bytes while it arrives ---------------------------


async def test_a_plain_answer_stops_at_response_bytes_while_the_engine_is_still_talking(
    figures: Any,
) -> None:
    sent = 0
    closed = asyncio.Event()
    chunk = (
        "data: "
        + json.dumps(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": "x" * 1000}}],
            }
        )
        + "\n\n"
    ).encode()

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        try:
            while sent < 1024 * MiB:
                writer.write(chunk)
                await writer.drain()
                sent += len(chunk)
        except (ConnectionError, OSError):
            pass
        finally:
            closed.set()
            writer.close()

    server = await asyncio.start_server(endless, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    engines = EngineClients()
    limit = 64 * 1024
    try:
        error = await refusal(
            engines.complete(
                EngineAt(f"http://127.0.0.1:{port}", "m"),
                "/v1/chat/completions",
                {"messages": [{"role": "user", "content": "hi"}]},
                max_bytes=limit,
            )
        )
        assert isinstance(error, LimitExceeded)
        assert error.details["limit"] == "response_bytes"
        await asyncio.wait_for(closed.wait(), 10)
        # Socket buffers hold a few MiB at most; an unbounded read would have taken 1 GiB.
        assert sent < 32 * MiB, sent
        figures.record(tries=1, refused=1, engine_bytes_sent_mib=round(sent / MiB, 2))
    finally:
        await engines.aclose()
        server.close()
        await server.wait_closed()


# --- F17: the per-service lock map holds only services that exist ---------------------------


async def test_service_locks_are_made_only_for_services_and_dropped_on_remove(
    tmp_path: Path, figures: Any
) -> None:
    cluster = await grantor(tmp_path)
    try:
        await add_node(cluster)
        inference = admission_services(cluster, RefusingRuntime())
        tries = 500
        for _ in range(tries):
            error = await refusal(
                inference.commands.control_service(
                    OWNER,
                    "default",
                    "service_" + secrets.token_hex(16),
                    revision=1,
                    operation="stop",
                )
            )
            assert isinstance(error, NotFound)
        assert inference.tracked_services() == frozenset()
        model = await record_model(cluster, "default", [MiB], owned=True)
        view, _ = await inference.commands.create_service(
            OWNER, "default", {"name": "short", "model": model.id, "runtime": "llama.cpp"}
        )
        await inference.commands.control_service(
            OWNER, "default", view["id"], revision=1, operation="remove"
        )
        assert inference.tracked_services() == frozenset()
        figures.record(tries=tries, refused=tries, locks_left=len(inference.tracked_services()))
    finally:
        await lifecycle.close(cluster)
