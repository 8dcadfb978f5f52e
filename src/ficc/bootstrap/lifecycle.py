"""A cluster's life: its state directory made once, its storage opened, started and closed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from ficc.adapters.keys import ClusterKey
from ficc.adapters.node_probe import probe_node
from ficc.adapters.sql.database import Database
from ficc.adapters.sql.schema import SchemaState, schema_state
from ficc.adapters.sql.schema import upgrade as upgrade_schema
from ficc.adapters.sql.unit_of_work import SqlUnitOfWorkFactory
from ficc.base.errors import NotActive
from ficc.base.ids import new_id
from ficc.base.units import DAY_SECONDS
from ficc.bootstrap.cluster import LABEL_SETTING, Cluster, build
from ficc.bootstrap.settings import Settings, system_clock
from ficc.domain.principals import ALL_PROJECTS
from ficc.domain.scopes import LOCAL_SCOPES
from ficc.services import accounts
from ficc.services.lease import LeaseKeeper
from ficc.services.ports import Clock

log = logging.getLogger("ficc.lifecycle")

NODE_REFRESH_SECONDS = 10.0
PURGE_SECONDS = float(DAY_SECONDS)
"""Expired sessions, used or expired login links and old offers are purged at start and daily."""


@dataclass(frozen=True)
class InitResult:
    state_dir: Path
    created: bool
    label: str
    cluster_key: str


async def initialise(settings: Settings, *, label: str | None = None) -> InitResult:
    """Create the state directory once; on an initialised directory change nothing."""
    state = settings.state
    state.create()
    database = Database(settings.database)
    try:
        # Two processes sharing the database started at once: one creates, the other finds.
        async with database.initialising():
            await upgrade_schema(database)
            created_key = not state.cluster_key.exists()
            if created_key:
                ClusterKey.generate().save(state.cluster_key)
            key = ClusterKey.load(state.cluster_key)
            uow_factory = SqlUnitOfWorkFactory(database, audit_signer=key)
            async with uow_factory() as uow:
                owner, created_owner = await accounts.ensure_owner(uow, system_clock)
                stored_label = await uow.settings.get(LABEL_SETTING)
                if not isinstance(stored_label, str):
                    stored_label = label or f"ficc-{key.public_text[:8]}"
                    await uow.settings.put(LABEL_SETTING, stored_label)
                issued = None
                if not state.owner_token.exists():
                    issued = await accounts.mint_token(
                        uow,
                        system_clock,
                        user=owner,
                        scopes=frozenset(LOCAL_SCOPES),
                        projects=frozenset({ALL_PROJECTS}),
                        lifetime_seconds=None,
                        actor="init",
                        owner=True,
                    )
                elif (written := state.read_private_owner_token()) is not None:
                    # A database from before tokens carried the owner mark: the token in
                    # owner.token is the one init wrote.
                    await accounts.adopt_owner_token(uow, written)
                await uow.commit()
            if issued is not None:
                state.write_owner_token(issued.token)
            return InitResult(
                state_dir=state.root,
                created=created_key or created_owner or issued is not None,
                label=stored_label,
                cluster_key=key.public_text,
            )
    finally:
        await database.dispose()


async def open_cluster(settings: Settings, *, clock: Clock = system_clock) -> Cluster:
    """Initialise if needed, migrate, and wire the parts a server needs over SQL storage."""
    await initialise(settings)
    database = Database(settings.database)
    await database.migrate()
    key = ClusterKey.load(settings.state.cluster_key)
    uow_factory = SqlUnitOfWorkFactory(database, audit_signer=key)
    lease = None
    if not database.is_sqlite:
        # Other processes may share this database: only the lease's holder acts, and every
        # commit of this process checks that it still is the holder.
        lease = LeaseKeeper(uow_factory.unguarded(), clock, lease_holder(), settings.lease_seconds)
        uow_factory.guard = lease
    async with uow_factory() as uow:
        label = await uow.settings.get(LABEL_SETTING)
    cluster = build(
        settings,
        uow_factory=uow_factory,
        database=database,
        cluster_key=key,
        clock=clock,
        label=str(label or ""),
    )
    cluster.lease = lease
    return cluster


async def database_schema(database: Database) -> SchemaState | None:
    """The schema ``database`` is at, for readiness; None, the reason logged, when the database
    does not answer: the web layer reads storage's health here, never from ``adapters.sql``."""
    try:
        return await schema_state(database)
    except (OSError, sqlite3.Error, SQLAlchemyError) as exc:
        log.warning("readiness: the database does not answer: %s", exc)
        return None


def lease_holder() -> str:
    """Who holds the lease, as operators read it: this machine, this process, and a random
    part (a pid is reused)."""
    return f"{socket.gethostname()[:120]}/{os.getpid()}/{secrets.token_hex(4)}"


async def take_lease(cluster: Cluster) -> None:
    """Wait until this process may act (at once without a lease, or when no other holds it)."""
    if cluster.lease is not None:
        await cluster.lease.acquire()


async def start(cluster: Cluster) -> None:
    """Bring what an earlier FICC process left to a known state, then rejoin peers.

    With a lease, called once this process holds it (:func:`take_lease`): the lease is kept
    renewed from here, and the earlier holder's attempts are fenced like a restart's.
    """
    if cluster.lease is not None:
        cluster.lease_renewer = asyncio.create_task(cluster.lease.keep())
    await cluster.audit.seal()
    if cluster.ray is not None:
        cluster.ray.nodes.connect()
        await cluster.ray.record_nodes(cluster.nodes)
    else:
        await _register_this_machine(cluster)
    cluster.node_refresher = asyncio.create_task(_refresh_nodes(cluster))
    await cluster.inference.recover()
    await cluster.transfers.recover()
    peers = await cluster.federation.known.load()
    await cluster.federation.grants.load(peers)
    await cluster.federation.receipts.load()
    await _purge(cluster)
    cluster.purger = asyncio.create_task(_purge_daily(cluster))
    await cluster.companion.restore()
    cluster.serving = True


async def _purge(cluster: Cluster) -> None:
    await cluster.federation.approval.purge_offers()
    await cluster.accounts.sessions.purge_expired()


async def _purge_daily(cluster: Cluster) -> None:
    while True:
        await asyncio.sleep(PURGE_SECONDS)
        await _purge(cluster)


async def _refresh_nodes(cluster: Cluster) -> None:
    """Keep the nodes current: the local node's free memory, or Ray's nodes as they come
    and go."""
    while True:
        if cluster.ray is not None:
            await asyncio.sleep(cluster.ray.refresh_seconds)
            await cluster.ray.record_nodes(cluster.nodes)
            continue
        await asyncio.sleep(NODE_REFRESH_SECONDS)
        await _register_this_machine(cluster)


async def _register_this_machine(cluster: Cluster) -> None:
    """Record this machine, under its host name, as the local node with what it has now."""
    await cluster.nodes.register_local_node(probe_node, new_node_id(), name=socket.gethostname())


async def close(cluster: Cluster) -> None:
    """Stop what runs, in the reverse order of its start, and let go of the storage.

    A process that lost its lease records nothing (its commits are refused): it ends its own
    engines and endpoint, first of all the endpoint, and leaves the records to the new active.
    A clean stop of the active releases the lease last, so that a standby takes over at once.
    """
    cluster.serving = False
    for task in (cluster.node_refresher, cluster.purger, cluster.lease_renewer):
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if cluster.lease is not None and cluster.lease.fenced:
        await cluster.companion.stop()
        await cluster.inference.supervisor.let_go()
        with contextlib.suppress(NotActive):
            await cluster.transfers.close()
        cluster.federation.grants.close()
    else:
        await cluster.transfers.close()
        cluster.federation.grants.close()
        await cluster.companion.stop()
        await cluster.inference.close()
        if cluster.lease is not None:
            await cluster.lease.release()
    await cluster.inference.engines.aclose()
    if cluster.ray is not None:
        cluster.ray.nodes.disconnect()
    if cluster.database is not None:
        await cluster.database.dispose()


def new_node_id() -> str:
    return new_id("node", secrets.token_bytes(16))
