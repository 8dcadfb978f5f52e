"""Replicas that outlive FICC (Ray's detached actors), against fakes: after a restart or a
takeover they are adopted, not fenced and launched again; a service is adopted whole or not at
all; a process that lost its lease leaves them running for the new active."""

from __future__ import annotations

from pathlib import Path

from tests.support.fakes.inference import PROJECT, Bench, FakeReplica, FakeRuntime, bench
from tests.unit.services.test_inference_supervision import (
    assert_changes_follow_the_tables,
    attempt_states,
    running,
)

from ficc.domain.inference import AttemptState, ServiceState
from ficc.services.ports.runtimes import ProcessIdentity, ReplicaAdopter, ReplicaHandle


class AdoptingRuntime(FakeRuntime):
    """A fake runtime whose replicas outlive the FICC process: ``survivors`` are the earlier
    process's, found again by attempt; those in ``silent`` no longer answer their key."""

    def __init__(self, survivors: list[FakeReplica], silent: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.survivors = {replica.handle.attempt_id: replica for replica in survivors}
        self.silent = silent
        self.let_go_of: list[str] = []

    async def adopt(
        self, attempt_id: str, process: ProcessIdentity, node_id: str, model_name: str
    ) -> ReplicaHandle | None:
        replica = self.survivors.get(attempt_id)
        if replica is None or replica.exited.done() or attempt_id in self.silent:
            return None
        if replica.handle.process != process:
            return None
        self.replicas.append(replica)
        return replica.handle

    async def let_go(self, handle: ReplicaHandle) -> None:
        self.let_go_of.append(handle.attempt_id)
        self.replicas = [r for r in self.replicas if r.handle != handle]


def restarted(b: Bench, tmp_path: Path, runtime: FakeRuntime) -> Bench:
    """A new FICC process on the same database, its runtime finding what the earlier left."""
    after = bench(tmp_path, runtime=runtime)
    after.store.__dict__.update(b.store.__dict__)
    return after


async def test_a_restart_adopts_live_replicas_instead_of_launching_second_engines(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path, runtime=AdoptingRuntime([]))
    service_id = await running(b, replicas=2)
    before = {r.handle.attempt_id for r in b.runtime.replicas}
    after = restarted(b, tmp_path, AdoptingRuntime(b.runtime.replicas))
    await after.services.recover()
    assert isinstance(after.runtime, ReplicaAdopter)
    assert after.service(service_id).state is ServiceState.RUNNING
    assert after.runtime.fenced == []
    assert after.fenced_attempts == []
    assert {r.handle.attempt_id for r in after.runtime.replicas} == before  # no new launch
    assert attempt_states(after, service_id) == [AttemptState.HEALTHY] * 2
    router = after.services.router
    endpoint = await router.endpoint(PROJECT, service_id)
    await router.complete(endpoint, "/v1/completions", {"prompt": "x"}, None)
    assert after.engine.calls
    adopted = [e for e in after.store.audit if e.action == "service.adopted"]
    assert [e.target for e in adopted] == [service_id]
    # Supervised as its own: a crash of an adopted replica is restarted by its policy.
    after.runtime.replicas[0].crash()
    await after.until(lambda: after.service(service_id).state is ServiceState.STARTING)
    assert_changes_follow_the_tables(after)


async def test_a_service_with_one_replica_not_answering_is_fenced_whole_and_started_again(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path, runtime=AdoptingRuntime([]))
    service_id = await running(b, replicas=2)
    first, second = b.runtime.replicas
    silent = frozenset({second.handle.attempt_id})
    after = restarted(b, tmp_path, AdoptingRuntime(b.runtime.replicas, silent))
    await after.services.recover()
    assert after.runtime.let_go_of == [first.handle.attempt_id]
    fenced = sorted(p.pid for p in after.runtime.fenced)
    assert fenced == sorted([first.handle.pid, second.handle.pid])
    await after.until(lambda: after.service(service_id).state is ServiceState.RUNNING)
    launched = {r.request.attempt_id for r in after.runtime.replicas}
    assert launched.isdisjoint({first.handle.attempt_id, second.handle.attempt_id})
    assert_changes_follow_the_tables(after)


async def test_a_process_that_lost_its_lease_leaves_outliving_replicas_running(
    tmp_path: Path,
) -> None:
    b = bench(tmp_path, runtime=AdoptingRuntime([]))
    await running(b)
    (replica,) = b.runtime.replicas
    await b.services.supervisor.let_go()
    assert b.runtime.stopped == []
    assert not replica.exited.done()
    assert b.runtime.let_go_of == [replica.handle.attempt_id]  # type: ignore[attr-defined]
