"""A whole cluster in process: every service wired by ``bootstrap.build`` over fakes.

Storage is the dict-backed unit of work, engines are :mod:`tests.support.fakes.inference`'s,
time is a :class:`FakeClock`; nothing opens a socket or starts a process. The state directory
holds only the blob store (real files: small and fast).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests.support.fakes.clock import FakeClock
from tests.support.fakes.inference import FakeEngine, FakeRuntime
from tests.support.fakes.unit_of_work import FakeStore, FakeUnitOfWorkFactory

from ficc.adapters.keys import ClusterKey
from ficc.bootstrap import LABEL_SETTING, Cluster, Settings, build
from ficc.bootstrap.cluster import CompanionTransports
from ficc.domain.inference import RuntimeName
from ficc.domain.principals import ALL_PROJECTS
from ficc.domain.scopes import LOCAL_SCOPES
from ficc.services import accounts
from ficc.services.ports.runtimes import Runtime


async def _no_attempt(_attempt_id: str, _grace_seconds: float) -> int:
    return 0


async def fake_cluster(
    root: Path,
    *,
    clock: FakeClock | None = None,
    cluster_key: ClusterKey | None = None,
    transport_factory: CompanionTransports | None = None,
    runtimes: Mapping[RuntimeName, Runtime] | None = None,
    engine: FakeEngine | None = None,
    store: FakeStore | None = None,
    label: str = "fake",
) -> Cluster:
    """A cluster over fakes, initialised as ``ficc init`` leaves one: the default project,
    the owner and the owner's token (in ``owner.token``) exist, and the label is set."""
    clock = clock or FakeClock()
    settings = Settings(state_dir=root)
    settings.state.create()
    cluster_key = cluster_key or ClusterKey.generate()
    uow_factory = FakeUnitOfWorkFactory(store, audit_signer=cluster_key)
    async with uow_factory() as uow:
        owner, _ = await accounts.ensure_owner(uow, clock)
        await uow.settings.put(LABEL_SETTING, label)
        issued = await accounts.mint_token(
            uow,
            clock,
            user=owner,
            scopes=frozenset(LOCAL_SCOPES),
            projects=frozenset({ALL_PROJECTS}),
            lifetime_seconds=None,
            actor="init",
            owner=True,
        )
        await uow.commit()
    settings.state.write_owner_token(issued.token)
    fake_runtime = FakeRuntime()
    return build(
        settings,
        uow_factory=uow_factory,
        cluster_key=cluster_key,
        label=label,
        clock=clock,
        transport_factory=transport_factory,
        runtimes=runtimes or {fake_runtime.name: fake_runtime},
        engines=engine or FakeEngine(),
        fence=_no_attempt,
        free_disk=lambda: 1 << 50,
    )
