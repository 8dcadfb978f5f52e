"""FICC killed with SIGKILL while services run, then restarted on the same state directory.

Three services run on the tiny model when FICC is killed. Two run again after the restart
without any call, each with one engine (the old one fenced). For the third the database is
altered (FICC is stopped, so nothing else writes it) to simulate the one fault a kill cannot
produce on demand: FICC dying after it recorded a replica attempt but before it recorded the
launch. That attempt's engine really runs, tagged FICC_ATTEMPT=<attempt>, with no pid on record:
its service stays stopped, saying why, until a start acknowledges the unknown outcome.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.support.cluster import RunningCluster, start_cluster
from tests.support.inference import (
    add_model,
    control,
    controlled,
    get,
    is_running,
    live_processes_of_attempt,
    openai_client,
    spec,
    start_running,
    stop,
    wait_for,
    wait_for_state,
)

pytestmark = pytest.mark.engine

GONE_WITHIN_SECONDS = 15.0


@dataclass
class Engine:
    service: str
    revision: int
    attempt: str
    pid: int
    ticks: int


@dataclass
class Restarted:
    cluster: RunningCluster
    fenced: Engine
    """Its engine was running, with pid and start time on record, when FICC was killed."""
    also_fenced: Engine
    """Another such service: every service desired running comes back."""
    pending: Engine
    """Its attempt was set back to pending, without a pid, while FICC was down."""


def _engine(service: dict[str, Any]) -> Engine:
    (replica,) = service["replicas"]
    stat = Path(f"/proc/{replica['pid']}/stat").read_text()
    ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
    return Engine(service["id"], service["revision"], replica["attempt"], replica["pid"], ticks)


def simulate_death_before_the_launch_was_recorded(state_dir: Path, attempt: str) -> None:
    """The attempt as FICC would have left it had it died between recording it and launching."""
    with sqlite3.connect(state_dir / "ficc.db") as db:
        changed = db.execute(
            "UPDATE replica_attempts SET state = 'pending', pid = NULL, pid_start_ticks = NULL, "
            "port = NULL WHERE id = ?",
            (attempt,),
        ).rowcount
    assert changed == 1


def _kill_leftover(engine: Engine) -> None:
    """Whatever a failed test left running (matched by pid and start time)."""
    if is_running(engine.pid, engine.ticks):
        os.kill(engine.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def restarted(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_file: Path
) -> Iterator[Restarted]:
    state_dir = tmp_path_factory.mktemp("killed") / "state"
    first = start_cluster(state_dir)
    engines: list[Engine] = []
    second: RunningCluster | None = None
    try:
        model = add_model(first, "tiny", tiny_model_file)
        owner = first.owner()
        fenced = _engine(start_running(owner, spec("fenced", model)))
        also_fenced = _engine(start_running(owner, spec("also-fenced", model)))
        pending = _engine(start_running(owner, spec("pending", model)))
        engines = [fenced, also_fenced, pending]
        assert first.stop(signal.SIGKILL) == -signal.SIGKILL
        # SIGKILL gave FICC no chance to stop anything: every engine still runs.
        assert all(is_running(engine.pid, engine.ticks) for engine in engines)
        simulate_death_before_the_launch_was_recorded(state_dir, pending.attempt)
        second = start_cluster(state_dir)
        yield Restarted(second, fenced, also_fenced, pending)
    finally:
        if second is not None:
            second.stop()
        first.stop()
        for engine in engines:
            _kill_leftover(engine)


def test_every_service_running_when_ficc_was_killed_runs_again_with_one_engine_per_replica(
    restarted: Restarted,
) -> None:
    owner = restarted.cluster.owner()
    for engine in (restarted.fenced, restarted.also_fenced):
        service = wait_for_state(owner, engine.service, "running")
        assert service["desired"] == "running"
        assert service["revision"] == engine.revision  # FICC's own start is no user change
        assert service["unknown_attempts"] == 0
        old, new = service["replicas"]
        assert (old["attempt"], old["state"]) == (engine.attempt, "stopped")
        assert new["state"] == "healthy"
        assert live_processes_of_attempt(engine.attempt) == []
        assert live_processes_of_attempt(new["attempt"]) == [new["pid"]]
        assert not is_running(engine.pid, engine.ticks)
        answer = openai_client(restarted.cluster).completions.create(
            model=engine.service, prompt="the", max_tokens=2
        )
        assert answer.choices[0].finish_reason in {"stop", "length"}
    listed = owner.get("/api/v1/inference/services").json()["services"]
    shown = {s["id"]: (s["state"], s["desired"]) for s in listed}
    assert shown[restarted.fenced.service] == ("running", "running")
    assert shown[restarted.pending.service] == ("stopped", "running")


def test_the_engine_left_by_the_killed_ficc_is_ended_at_the_restart(
    restarted: Restarted,
) -> None:
    engine = restarted.fenced
    wait_for(
        lambda: not is_running(engine.pid, engine.ticks),
        seconds=GONE_WITHIN_SECONDS,
        what=f"the old engine (pid {engine.pid}) ended",
    )
    assert live_processes_of_attempt(engine.attempt) == []


def test_an_attempt_left_pending_by_a_simulated_crash_before_its_launch_was_recorded_is_unknown(
    restarted: Restarted,
) -> None:
    owner = restarted.cluster.owner()
    engine = restarted.pending
    service = get(owner, engine.service)
    assert (service["state"], service["desired"]) == ("stopped", "running")
    assert "unknown outcome" in service["error"]
    assert "not started again after FICC's restart" in service["error"]
    assert service["unknown_attempts"] == 1
    (replica,) = service["replicas"]
    assert (replica["state"], replica["pid"]) == ("unknown", None)
    # FICC cannot know it, but the attempt's engine does run: what the acknowledgement is for.
    assert live_processes_of_attempt(engine.attempt) == [engine.pid]

    refused = control(owner, engine.service, service["revision"], "start")
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "unknown_outcome"
    assert error["details"]["unknown_attempts"] == 1
    assert get(owner, engine.service)["revision"] == service["revision"]
    assert is_running(engine.pid, engine.ticks)

    started = controlled(
        owner, engine.service, service["revision"], "start", acknowledge_unknown=True
    )
    assert started["revision"] == service["revision"] + 1
    assert started["unknown_attempts"] == 0
    wait_for(
        lambda: not live_processes_of_attempt(engine.attempt),
        seconds=GONE_WITHIN_SECONDS,
        what=f"no process tagged FICC_ATTEMPT={engine.attempt}",
    )
    assert not is_running(engine.pid, engine.ticks)
    running = wait_for_state(owner, engine.service, "running")
    assert [r["state"] for r in running["replicas"]] == ["acknowledged", "healthy"]
    answer = openai_client(restarted.cluster).completions.create(
        model=engine.service, prompt="the", max_tokens=2
    )
    assert answer.choices[0].finish_reason in {"stop", "length"}
    stop(owner, engine.service)
