"""A service's life through the API on a real server and real llama.cpp engines.

The engines load the tiny random-weight model (under a second each): these tests need engines
that start, answer, stop and crash, not answers that make sense.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI
from tests.support.cluster import RunningCluster
from tests.support.inference import (
    LOCAL_V1,
    SERVICES,
    add_model,
    control,
    controlled,
    create,
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

TINY_END_TOKEN = "2"
DRAINED_REQUEST_TOKENS = 200
"""About a second on the tiny model with its end token banned (llama-cpp-python slows down
sharply beyond a few hundred such tokens)."""
GONE_WITHIN_SECONDS = 15.0
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def model(cluster: RunningCluster, tiny_model_file: Path) -> str:
    return add_model(cluster, "tiny", tiny_model_file)


@pytest.fixture
def owner(cluster: RunningCluster) -> Iterator[Any]:
    client = cluster.owner()
    yield client
    # Leave no engine running for the next test: stop whatever this test left started.
    for service in client.get(SERVICES).json()["services"]:
        if service["state"] != "stopped":
            stop(client, service["id"])


def engine_log(cluster: RunningCluster, attempt: str) -> Path:
    (path,) = list(cluster.state_dir.rglob(f"{attempt}.log"))
    return path


def served_requests(cluster: RunningCluster, attempt: str) -> int:
    """How many requests an engine finished: llama.cpp logs its timings once per request."""
    text = engine_log(cluster, attempt).read_text(errors="replace")
    return text.count("llama_perf_context_print:       total time")


def test_a_service_goes_from_created_to_running_to_drained_to_removed(
    cluster: RunningCluster, owner: Any, model: str
) -> None:
    created = create(owner, spec("lifecycle", model))
    service_id = created["id"]
    assert created["state"] == "stopped"
    assert created["revision"] == 1
    assert created["replicas"] == []
    assert created["spec"]["options"]["n_threads"] == 1
    assert service_id in [s["id"] for s in owner.get(SERVICES).json()["services"]]

    started = controlled(owner, service_id, 1, "start")
    assert started["state"] == "starting"
    assert started["revision"] == 2
    running = wait_for_state(owner, service_id, "running")
    assert running["revision"] == 2, "engine events do not change the revision"
    (replica,) = running["replicas"]
    assert replica["state"] == "healthy"
    assert is_running(replica["pid"])

    client = openai_client(cluster)
    answer = client.chat.completions.create(
        model=service_id, messages=HI, max_tokens=8, temperature=0
    )
    assert answer.object == "chat.completion"
    assert answer.model == service_id
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].finish_reason in {"stop", "length"}
    assert service_id in [m.id for m in client.models.list().data]

    draining = controlled(owner, service_id, 2, "drain")
    assert draining["revision"] == 3
    assert draining["state"] in {"draining", "stopped"}
    stopped = wait_for_state(owner, service_id, "stopped")
    assert stopped["revision"] == 3
    assert stopped["replicas"][0]["state"] == "stopped"
    wait_for(
        lambda: not is_running(replica["pid"]),
        seconds=GONE_WITHIN_SECONDS,
        what="the drained engine's process ended",
    )
    assert service_id not in [m.id for m in client.models.list().data]
    with pytest.raises(openai.ConflictError):
        client.chat.completions.create(model=service_id, messages=HI, max_tokens=1)

    removed = controlled(owner, service_id, 3, "remove")
    assert removed == {"id": service_id, "removed": True}
    assert owner.get(f"{SERVICES}/{service_id}").status_code == 404
    assert control(owner, service_id, 4, "start").status_code == 404
    assert service_id not in [s["id"] for s in owner.get(SERVICES).json()["services"]]


def test_draining_lets_a_request_in_flight_finish_and_refuses_new_ones(
    cluster: RunningCluster, owner: Any, model: str
) -> None:
    service = start_running(owner, spec("drain", model))
    client = openai_client(cluster)
    stream = client.completions.create(
        model=service["id"],
        prompt="the cat",
        max_tokens=DRAINED_REQUEST_TOKENS,
        temperature=0,
        logit_bias={TINY_END_TOKEN: -100},
        stream=True,
    )
    chunks = iter(stream)
    next(chunks)
    draining = controlled(owner, service["id"], service["revision"], "drain")
    assert draining["state"] == "draining"
    with pytest.raises(openai.ConflictError) as refused:
        client.completions.create(model=service["id"], prompt="x", max_tokens=1)
    assert refused.value.code == "conflict"
    finish = [choice.finish_reason for chunk in chunks for choice in chunk.choices]
    assert finish[-1] == "length", "the request in flight ran to its end"
    wait_for_state(owner, service["id"], "stopped")


def test_a_crashed_engine_is_started_again_by_the_default_restart_policy(
    cluster: RunningCluster, owner: Any, model: str
) -> None:
    service = start_running(owner, spec("phoenix", model))
    assert service["spec"]["restart"] == "on-failure"
    (replica,) = service["replicas"]
    os.kill(replica["pid"], signal.SIGKILL)
    wait_for(
        lambda: len(get(owner, service["id"])["replicas"]) == 2,
        seconds=GONE_WITHIN_SECONDS,
        what="a new attempt after the crash",
    )
    again = wait_for_state(owner, service["id"], "running")
    assert again["revision"] == service["revision"]
    crashed, healthy = again["replicas"]
    assert (crashed["attempt"], crashed["state"]) == (replica["attempt"], "crashed")
    assert "signal 9" not in (again["error"] or "")  # running again: the reason is audited
    assert live_processes_of_attempt(crashed["attempt"]) == []
    assert live_processes_of_attempt(healthy["attempt"]) == [healthy["pid"]]
    answer = openai_client(cluster).completions.create(
        model=service["id"], prompt="the", max_tokens=2
    )
    assert answer.choices[0].finish_reason in {"stop", "length"}
    audit = owner.get("/api/v1/federation/audit", params={"limit": 500}).json()
    restarts = [e for e in audit["entries"] if e["action"] == "service.restart"]
    assert [e["target"] for e in restarts] == [service["id"]]
    assert "signal 9" in restarts[0]["details"]["reason"]
    counted = [
        line
        for line in owner.get("/metrics").text.splitlines()
        if line.startswith('ficc_inference_restarts_total{policy="on-failure"}')
    ]
    assert [float(line.split()[-1]) for line in counted] == [1.0]
    stop(owner, service["id"])


def test_a_crashed_engine_is_shown_as_failed_with_its_last_log_lines(
    cluster: RunningCluster, owner: Any, model: str
) -> None:
    service = start_running(owner, spec("crash", model, restart="never"))
    (replica,) = service["replicas"]
    os.kill(replica["pid"], signal.SIGKILL)
    failed = wait_for_state(owner, service["id"], "failed", seconds=GONE_WITHIN_SECONDS)
    assert failed["revision"] == service["revision"]
    assert "signal 9" in failed["error"]
    (crashed,) = failed["replicas"]
    assert crashed["state"] == "crashed"
    assert crashed["ended_at"] is not None
    lines = crashed["log_tail"].splitlines()
    assert lines, "the engine's last log lines are kept"
    written = engine_log(cluster, crashed["attempt"]).read_text(errors="replace").splitlines()
    assert lines == written[-len(lines) :]

    with pytest.raises(openai.ConflictError):
        openai_client(cluster).completions.create(model=service["id"], prompt="x", max_tokens=1)

    # A failed service starts again without a stop first, on a new attempt.
    controlled(owner, service["id"], failed["revision"], "start")
    again = wait_for_state(owner, service["id"], "running")
    assert [r["state"] for r in again["replicas"]] == ["crashed", "healthy"]
    answer = openai_client(cluster).completions.create(
        model=service["id"], prompt="the", max_tokens=2
    )
    assert answer.choices[0].finish_reason in {"stop", "length"}


def test_replace_and_remove_are_refused_while_the_service_runs(
    cluster: RunningCluster, owner: Any, model: str
) -> None:
    service = start_running(owner, spec("busy", model))
    revision = service["revision"]
    replaced = owner.put(
        f"{SERVICES}/{service['id']}",
        json={"revision": revision, "spec": spec("busy", model, options={"n_ctx": 512})},
    )
    assert replaced.status_code == 409, replaced.text
    assert replaced.json()["error"]["code"] == "conflict"
    assert "stopped" in replaced.json()["error"]["message"]
    removed = control(owner, service["id"], revision, "remove")
    assert removed.status_code == 409, removed.text
    assert removed.json()["error"]["code"] == "conflict"
    after = get(owner, service["id"])
    assert (after["state"], after["revision"]) == ("running", revision)

    stopped = stop(owner, service["id"])
    replaced = owner.put(
        f"{SERVICES}/{service['id']}",
        json={"revision": stopped["revision"], "spec": spec("busy", model, options={"n_ctx": 512})},
    )
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["revision"] == stopped["revision"] + 1
    assert replaced.json()["spec"]["options"]["n_ctx"] == 512


def test_requests_are_spread_over_every_replica(
    cluster: RunningCluster, owner: Any, model: str
) -> None:
    service = start_running(owner, spec("pair", model, replicas=2))
    attempts = [replica["attempt"] for replica in service["replicas"]]
    assert len(attempts) == 2
    before = [served_requests(cluster, attempt) for attempt in attempts]
    client = openai_client(cluster)
    for _ in range(4):
        client.completions.create(model=service["id"], prompt="the", max_tokens=1)
    after = [served_requests(cluster, attempt) for attempt in attempts]
    # Each plain answer is one engine request, plus one that counts its prompt's tokens for
    # `usage` (llama.cpp streams none): the same number on each replica either way.
    served = [a - b for a, b in zip(after, before, strict=True)]
    assert served[0] == served[1] >= 2, served


def test_stopping_a_service_right_after_its_start_leaves_no_engine_behind(
    cluster: RunningCluster, owner: Any, model: str
) -> None:
    service = create(owner, spec("hasty", model, replicas=2))
    started = controlled(owner, service["id"], 1, "start")
    stopped = controlled(owner, service["id"], started["revision"], "stop")
    assert stopped["state"] == "stopped"
    for replica in get(owner, service["id"])["replicas"]:
        wait_for(
            lambda attempt=replica["attempt"]: not live_processes_of_attempt(attempt),
            seconds=GONE_WITHIN_SECONDS,
            what=f"no engine process of attempt {replica['attempt']}",
        )
    assert get(owner, service["id"])["state"] == "stopped"


def test_a_service_stopped_while_starting_and_started_again_comes_up(
    cluster: RunningCluster, owner: Any, model: str
) -> None:
    service = create(owner, spec("restart", model))
    first = controlled(owner, service["id"], 1, "start")
    stopped = controlled(owner, service["id"], first["revision"], "stop")
    controlled(owner, service["id"], stopped["revision"], "start")
    running = wait_for_state(owner, service["id"], "running")
    live = [r for r in running["replicas"] if r["state"] == "healthy"]
    assert len(live) == 1
    assert is_running(live[0]["pid"])
    answer = openai_client(cluster).completions.create(
        model=service["id"], prompt="the", max_tokens=2
    )
    assert answer.choices[0].finish_reason in {"stop", "length"}


def test_a_running_service_cannot_be_invoked_from_another_project(
    cluster: RunningCluster, owner: Any, model: str
) -> None:
    service = start_running(owner, spec("mine", model))
    created = owner.post("/api/v1/projects", json={"name": "elsewhere"})
    assert created.status_code == 201, created.text
    other = OpenAI(
        base_url=cluster.url + LOCAL_V1,
        api_key=cluster.owner_token,
        max_retries=0,
        default_headers={"X-FICC-Project": "elsewhere"},
        http_client=cluster.client(),
    )
    with pytest.raises(openai.NotFoundError):
        other.completions.create(model=service["id"], prompt="the", max_tokens=1)
    assert service["id"] not in [m.id for m in other.models.list().data]
    mine = openai_client(cluster).completions.create(
        model=service["id"], prompt="the", max_tokens=1
    )
    assert mine.choices[0].finish_reason in {"stop", "length"}
