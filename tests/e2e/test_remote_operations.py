"""Remote operations between two real clusters over real HyperNet, with the real engine.

alpha requests through POST /peers/{beta}/request; beta, the grantor, runs one service on a
tiny random GGUF (fast, always nonsense). Each test gives and selects its own grant, so one
test's limits never leak into another's. The crash test stops and restarts beta: it is last.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.cluster import ficc
from tests.support.federation import API, error_of, ok, wait_for
from tests.support.remote import (
    ALL_REMOTE_SCOPES,
    Federated,
    error_events,
    federation,
    hypernet_address,
    insert_uncertain_receipt,
    invoke_body,
    new_mutation_id,
    restart,
    sse_events,
)
from tests.support.tiny_gguf import write_tiny_gguf

from ficc.base.units import MiB
from ficc.bootstrap import CONNECT_SECONDS_VARIABLE
from ficc.services.remote.table import OPERATIONS

PLAIN_TEXT = {str(token): -100 for token in range(2, 259)}
"""Bans the tiny model's end token and its byte tokens: completions run to max_tokens, and
streams flow (byte tokens make invalid UTF-8, which the engine holds back until the end)."""
LONG = {"max_tokens": 3500, "logit_bias": PLAIN_TEXT}
"""About ten seconds of generation on the tiny model: long enough to see the engine busy."""
QUICK_SECONDS = 2.0
CONNECT_SECONDS = 2.0
"""alpha's deadline for reaching beta (5 s by default): loopback connects take milliseconds, and
the stopped grantor of the crash test is reported unreachable after it."""


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federated]:
    root = tmp_path_factory.mktemp("remote")
    tiny = write_tiny_gguf(root / "tiny.gguf")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(CONNECT_SECONDS_VARIABLE, str(CONNECT_SECONDS))
        with federation(root, "tiny", tiny, n_ctx=4096) as running:
            yield running


def full_grant(fed: Federated, **terms: Any) -> str:
    """Every remote scope over the running service, its model and the node."""
    base: dict[str, Any] = {
        "scopes": ALL_REMOTE_SCOPES,
        "services": [fed.service],
        "models": [fed.model],
        "nodes": [fed.node],
        "transfer_bytes": 1 << 20,
    }
    return fed.grant(**{**base, **terms})


def service_spec(fed: Federated, name: str) -> dict[str, Any]:
    return {"name": name, "model": fed.model, "runtime": "llama.cpp"}


def manifest_of(fed: Federated) -> dict[str, Any]:
    result: dict[str, Any] = fed.result("models.manifest", {"model": fed.model})
    return result


def range_body(fed: Federated, length: int) -> dict[str, Any]:
    (entry,) = manifest_of(fed)["manifest"]["files"]
    return {
        "model": fed.model,
        "file": entry["path"],
        "offset": 0,
        "length": length,
        "digest": entry["sha256"],
    }


def streamed(fed: Federated, body: dict[str, Any]) -> httpx.Response:
    """A streamed invoke read to its end."""
    response = fed.request("inference.invoke", body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return response


# --- every operation ------------------------------------------------------------------------


def test_every_operation_succeeds_under_a_grant_holding_its_scope(fed: Federated) -> None:
    full_grant(fed)
    found = fed.result("discover")
    assert [s["id"] for s in found["services"]] == [fed.service]
    assert found["models"] == [fed.model]
    assert found["nodes"] == [fed.node]
    prepared = fed.result("inference.prepare")
    assert [m["id"] for m in prepared["models"]] == [fed.model]
    preview = fed.result("inference.preview", {"spec": service_spec(fed, "p")})
    assert isinstance(preview, dict)
    shown = fed.result("inference.get", {"service": fed.service})
    assert shown["id"] == fed.service
    assert shown["state"] == "running"
    assert set(shown["replicas"][0]) == {"replica", "state", "exit_code"}

    answer = fed.result("inference.invoke", invoke_body(fed.service))
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]
    events = sse_events(streamed(fed, invoke_body(fed.service, stream=True)).text)
    assert events[-1] == "[DONE]"
    assert not error_events(events)
    assert events[0]["object"] == "chat.completion.chunk"

    manifest = manifest_of(fed)
    assert manifest["model"] == fed.model
    assert len(manifest["sha256"]) == 64
    served = fed.request("models.range", range_body(fed, 1000))
    assert served.status_code == 200, served.text
    # Model bytes are bytes, not server-sent events.
    assert served.headers["content-type"] == "application/octet-stream"
    stored = ok(fed.beta.owner().get(f"/api/v1/models/{fed.model}"))
    assert stored["sha256"] == manifest["sha256"]
    assert len(served.content) == 1000
    assert fed.result("resources")["nodes"][0]["id"] == fed.node

    create_id = new_mutation_id()
    created = fed.result("inference.create", {"spec": service_spec(fed, "made")}, create_id)
    assert created["state"] == "stopped"
    assert created["created_by_grant"]
    status = fed.result("operation.status", {"id": create_id})
    assert status["state"] == "completed"
    assert status["result"]["id"] == created["id"]
    replaced = fed.result(
        "inference.replace",
        {"service": created["id"], "revision": 1, "spec": service_spec(fed, "remade")},
        new_mutation_id(),
    )
    assert replaced["spec"]["name"] == "remade"
    assert replaced["revision"] == 2
    removed = fed.result(
        "inference.control",
        {"service": created["id"], "revision": 2, "operation": "remove"},
        new_mutation_id(),
    )
    assert removed == {"id": created["id"], "removed": True}

    other = {**manifest["manifest"], "name": "copy"}
    model = fed.result("models.create", {"manifest": other}, new_mutation_id())
    assert model["id"] != fed.model
    gone = fed.result("models.remove", {"model": model["id"]}, new_mutation_id())
    assert gone["removed"] is True or gone.get("id") == model["id"]


# --- refusals -------------------------------------------------------------------------------


def valid_bodies(fed: Federated) -> dict[str, tuple[dict[str, Any], str | None]]:
    """A well-formed body (and mutation_id) for every operation, over the granted IDs."""
    spec = service_spec(fed, "x")
    mutation = new_mutation_id
    return {
        "discover": ({}, None),
        "inference.prepare": ({}, None),
        "inference.preview": ({"spec": spec}, None),
        "inference.get": ({"service": fed.service}, None),
        "inference.create": ({"spec": spec}, mutation()),
        "inference.replace": (
            {"service": fed.service, "revision": 1, "spec": spec},
            mutation(),
        ),
        "inference.control": (
            {"service": fed.service, "revision": 1, "operation": "stop"},
            mutation(),
        ),
        "inference.invoke": (invoke_body(fed.service), None),
        "models.manifest": ({"model": fed.model}, None),
        "models.range": (
            {"model": fed.model, "file": "tiny.gguf", "offset": 0, "length": 1, "digest": "0"},
            None,
        ),
        "models.create": ({"manifest": {"name": "m", "format": "gguf", "files": []}}, mutation()),
        "models.remove": ({"model": fed.model}, mutation()),
        "resources": ({}, None),
    }


def scopes_of(operation: str) -> frozenset[str]:
    """The scopes of which a grant must hold one for ``operation``."""
    scopes = OPERATIONS[operation].scopes
    assert scopes is not None
    return scopes


def test_an_operation_whose_scope_the_grant_lacks_is_forbidden_naming_the_scope(
    fed: Federated,
) -> None:
    bodies = valid_bodies(fed)
    for only in ("resources:read", "discover"):
        full_grant(fed, scopes=[only])
        for operation, (body, mutation_id) in bodies.items():
            if only in scopes_of(operation):
                continue
            error = error_of(fed.request(operation, body, mutation_id), 403)
            assert error["code"] == "forbidden", (operation, error)
            assert error["details"]["missing_scope"] in scopes_of(operation)
            assert error["details"]["missing_scope"] in error["message"]
    # The engine saw nothing: the service is still running with its first revision.
    assert fed.beta.owner().get(f"/api/v1/inference/services/{fed.service}").json()["revision"] == 2


def test_a_resource_id_the_grant_does_not_include_is_forbidden(fed: Federated) -> None:
    grant = full_grant(fed, services=[], models=[])
    foreign_service = fed.service
    refused = {
        "inference.get": ({"service": foreign_service}, None),
        "inference.invoke": (invoke_body(foreign_service), None),
        "inference.replace": (
            {"service": foreign_service, "revision": 2, "spec": service_spec(fed, "x")},
            new_mutation_id(),
        ),
        "inference.control": (
            {"service": foreign_service, "revision": 2, "operation": "stop"},
            new_mutation_id(),
        ),
        "inference.preview": ({"spec": service_spec(fed, "x")}, None),
        "inference.create": ({"spec": service_spec(fed, "x")}, new_mutation_id()),
        "models.manifest": ({"model": fed.model}, None),
        "models.remove": ({"model": fed.model}, new_mutation_id()),
        "models.range": (
            {"model": fed.model, "file": "tiny.gguf", "offset": 0, "length": 1, "digest": "0"},
            None,
        ),
    }
    for operation, (body, mutation_id) in refused.items():
        error = error_of(fed.request(operation, body, mutation_id), 403)
        assert error["code"] == "forbidden", (operation, error)
        assert error["details"]["reason"] == "resource_not_granted", (operation, error)
    # An unknown ID is refused the same way: nothing tells whether it exists.
    unknown = "svc_" + "a" * 26
    error = error_of(fed.request("inference.get", {"service": unknown}), 403)
    assert error["details"]["reason"] == "resource_not_granted"
    # A node outside the grant.
    full_grant(fed, nodes=[])
    error = error_of(fed.request("inference.preview", {"spec": service_spec(fed, "x")}), 403)
    assert error["details"]["field"] == "body.spec.node"
    assert fed.grantor_view(grant)["created_services"] == []


def test_a_used_up_requests_allowance_is_refused_with_limit_exceeded_naming_requests(
    fed: Federated,
) -> None:
    grant = full_grant(fed, requests=3)
    for _ in range(3):
        ok(fed.request("discover"))
    error = error_of(fed.request("discover"), 429)
    assert error["code"] == "limit_exceeded"
    assert error["details"]["limit"] == "requests"
    assert fed.grantor_view(grant)["remaining"]["requests"] == 0


def test_a_request_beyond_concurrent_is_refused_naming_concurrent_and_served_after(
    fed: Federated,
) -> None:
    grant = full_grant(fed, concurrent=1)
    client = fed.alpha.owner()
    payload = {
        "operation": "inference.invoke",
        "body": invoke_body(fed.service, stream=True, **LONG),
    }
    with client.stream("POST", f"{API}/peers/{fed.peer}/request", json=payload) as running:
        assert running.status_code == 200
        lines = running.iter_lines()
        assert next(lines).startswith("data: ")
        assert fed.grantor_view(grant)["in_flight"] == 1
        error = error_of(fed.request("discover"), 429)
        assert error["code"] == "limit_exceeded"
        assert error["details"]["limit"] == "concurrent"
    fed.wait_idle(grant)
    ok(fed.request("discover"))


def test_a_request_body_over_request_bytes_is_refused_with_413(fed: Federated) -> None:
    grant = full_grant(fed, request_bytes=1024)
    big = invoke_body(fed.service, messages=[{"role": "user", "content": "x" * 2000}])
    error = error_of(fed.request("inference.invoke", big), 413)
    assert error["code"] == "too_large"
    assert error["details"]["limit"] == "request_bytes"
    ok(fed.request("inference.invoke", invoke_body(fed.service)))
    # The refused request was never admitted: only the second one is charged.
    assert fed.grantor_view(grant)["remaining"]["requests"] == 999


def test_a_request_body_over_a_frame_reaches_the_grantor_within_request_bytes(
    fed: Federated,
) -> None:
    """A 3 MiB body (over the 1 MiB frame and the 1 MiB default HTTP limit) travels whole:
    under a grant allowing 4 MiB the grantor checks its fields; under the default 512 KiB the
    grantor refuses it naming request_bytes."""
    padded = {"pad": "x" * (3 * MiB)}
    full_grant(fed, request_bytes=4 * MiB)
    checked = error_of(fed.request("discover", padded), 400)
    assert checked["details"]["field"] == "body.pad"
    full_grant(fed)
    refused = error_of(fed.request("discover", padded), 413)
    assert refused["details"]["limit"] == "request_bytes"
    assert refused["details"]["allowed"] == 512 * 1024
    ok(fed.request("discover"))


def test_a_plain_answer_over_response_bytes_is_an_error_naming_the_limit(fed: Federated) -> None:
    full_grant(fed, response_bytes=200)
    long_answer = invoke_body(fed.service, max_tokens=64, logit_bias=PLAIN_TEXT)
    error = error_of(fed.request("inference.invoke", long_answer), 429)
    assert error["code"] == "limit_exceeded"
    assert error["details"]["limit"] == "response_bytes"


def test_a_stream_over_response_bytes_ends_with_an_error_event_naming_the_limit(
    fed: Federated,
) -> None:
    grant = full_grant(fed, response_bytes=2000)
    body = invoke_body(fed.service, stream=True, max_tokens=64, logit_bias=PLAIN_TEXT)
    response = streamed(fed, body)
    assert len(response.content) <= 2000 + 300
    events = sse_events(response.text)
    (error,) = error_events(events)
    assert error["code"] == "limit_exceeded"
    assert error["details"]["limit"] == "response_bytes"
    assert events[-1] != "[DONE]"
    fed.wait_idle(grant)


def test_a_revoked_grant_is_refused_with_grant_revoked(fed: Federated) -> None:
    grant = full_grant(fed)
    ok(fed.request("discover"))
    ok(fed.beta.owner().delete(f"{API}/grants/{grant}"))
    error = error_of(fed.request("discover"), 403)
    assert error["code"] == "grant_revoked"
    assert fed.requester_view(grant)["state"] == "revoked"


# --- mutation_id rules --------------------------------------------------------------------


MUTATIONS = [
    "inference.create",
    "inference.replace",
    "inference.control",
    "models.create",
    "models.remove",
]


def test_mutations_need_a_well_formed_mutation_id_and_other_operations_refuse_one(
    fed: Federated,
) -> None:
    grant = full_grant(fed)
    bodies = valid_bodies(fed)
    for operation in MUTATIONS:
        error = error_of(fed.request(operation, bodies[operation][0]), 400)
        assert error["details"]["field"] == "mutation_id", (operation, error)
        for malformed in ("A" * 32, "a" * 31, "g" * 32, "a" * 33):
            error = error_of(fed.request(operation, bodies[operation][0], malformed), 400)
            assert error["details"]["field"] == "mutation_id", (operation, malformed)
    for operation, (body, _) in bodies.items():
        if operation not in MUTATIONS:
            error = error_of(fed.request(operation, body, new_mutation_id()), 400)
            assert error["details"]["field"] == "mutation_id", (operation, error)
    not_a_string = fed.alpha.owner().post(
        f"{API}/peers/{fed.peer}/request",
        json={
            "operation": "inference.create",
            "body": bodies["inference.create"][0],
            "mutation_id": 12345678901234567890123456789012,
        },
    )
    error_of(not_a_string, 400)
    # None of them reached an effect.
    view = fed.grantor_view(grant)
    assert view["created_services"] == []
    assert view["created_models"] == []


def test_a_retry_with_the_same_mutation_id_and_arguments_replays_the_same_result(
    fed: Federated,
) -> None:
    grant = full_grant(fed)
    mutation_id = new_mutation_id()
    body = {"spec": service_spec(fed, "once")}
    first = ok(fed.request("inference.create", body, mutation_id))
    again = ok(fed.request("inference.create", body, mutation_id))
    assert first["replayed"] is False
    assert again["replayed"] is True
    assert again["result"] == first["result"]
    assert again["mutation_id"] == mutation_id
    assert fed.grantor_view(grant)["created_services"] == [first["result"]["id"]]

    control_id = new_mutation_id()
    stop = {"service": first["result"]["id"], "revision": 1, "operation": "remove"}
    removed = ok(fed.request("inference.control", stop, control_id))
    replay = ok(fed.request("inference.control", stop, control_id))
    assert replay["replayed"] is True
    assert replay["result"] == removed["result"]


def test_a_replayed_stop_answers_the_bytes_of_the_first_stop_after_the_service_started_again(
    fed: Federated,
) -> None:
    """The finding's case, over real HyperNet and a real engine: the first stop's answer shows
    the replica stopped; its replay, after another start, shows exactly that again."""
    full_grant(fed)
    created = fed.result("inference.create", {"spec": service_spec(fed, "st")}, new_mutation_id())
    service = created["id"]

    def control(revision: int, operation: str, mutation_id: str) -> httpx.Response:
        body = {"service": service, "revision": revision, "operation": operation}
        response = fed.request("inference.control", body, mutation_id)
        assert response.status_code == 200, response.text
        return response

    def running() -> dict[str, Any] | None:
        shown: dict[str, Any] = fed.result("inference.get", {"service": service})
        return shown if shown["state"] == "running" else None

    started = ok(control(1, "start", new_mutation_id()))["result"]
    wait_for(running, seconds=60, what="the service runs")
    stop_id = new_mutation_id()
    first = control(started["revision"], "stop", stop_id)
    stopped = first.json()["result"]
    assert stopped["state"] == "stopped"
    assert [r["state"] for r in stopped["replicas"]] == ["stopped"]
    assert control(started["revision"], "stop", stop_id).content == replayed(first.content)
    again = ok(control(stopped["revision"], "start", new_mutation_id()))["result"]
    wait_for(running, seconds=60, what="the service runs again")
    assert control(started["revision"], "stop", stop_id).content == replayed(first.content)
    last = ok(control(again["revision"], "stop", new_mutation_id()))["result"]
    ok(control(last["revision"], "remove", new_mutation_id()))


def replayed(first: bytes) -> bytes:
    """The first answer's bytes as its replay sends them: the same, but ``replayed``."""
    assert first.count(b'"replayed":false') == 1, first
    return first.replace(b'"replayed":false', b'"replayed":true')


def test_the_same_mutation_id_with_other_arguments_is_a_mutation_conflict(
    fed: Federated,
) -> None:
    full_grant(fed)
    mutation_id = new_mutation_id()
    created = fed.result("inference.create", {"spec": service_spec(fed, "a")}, mutation_id)
    error = error_of(
        fed.request("inference.create", {"spec": service_spec(fed, "b")}, mutation_id), 409
    )
    assert error["code"] == "mutation_conflict"
    # The same ID for another operation is a conflict as well.
    start = {"service": created["id"], "revision": 1, "operation": "start"}
    error = error_of(fed.request("inference.control", start, mutation_id), 409)
    assert error["code"] == "mutation_conflict"

    # A changed acknowledgement is another request.
    control_id = new_mutation_id()
    stop = {"service": created["id"], "revision": 1, "operation": "remove"}
    ok(fed.request("inference.control", stop, control_id))
    changed = {**stop, "acknowledge_unknown": False}
    error = error_of(fed.request("inference.control", changed, control_id), 409)
    assert error["code"] == "mutation_conflict"


def test_acknowledge_unknown_is_a_strict_boolean_accepted_only_for_start(
    fed: Federated,
) -> None:
    grant = full_grant(fed)
    created = fed.result("inference.create", {"spec": service_spec(fed, "ack")}, new_mutation_id())
    base = {"service": created["id"], "revision": 1}
    for value in ("true", 1, None):
        body = {**base, "operation": "start", "acknowledge_unknown": value}
        error = error_of(fed.request("inference.control", body, new_mutation_id()), 400)
        assert error["details"]["field"].endswith("acknowledge_unknown"), error
    stop_id = new_mutation_id()
    body = {**base, "operation": "stop", "acknowledge_unknown": True}
    error = error_of(fed.request("inference.control", body, stop_id), 400)
    assert error["details"]["field"].endswith("acknowledge_unknown")
    # Refused input changed nothing and left no outcome to wonder about.
    assert fed.result("inference.get", {"service": created["id"]})["revision"] == 1
    status = fed.result("operation.status", {"id": stop_id})
    assert status["state"] == "refused"
    assert status["result"]["error"]["code"] == "invalid_request"
    assert fed.grantor_view(grant)["in_flight"] == 0


def test_a_refused_mutation_is_retained_as_refused_and_its_retry_is_refused_again(
    fed: Federated,
) -> None:
    full_grant(fed)
    created = fed.result("inference.create", {"spec": service_spec(fed, "r")}, new_mutation_id())
    mutation_id = new_mutation_id()
    stale = {"service": created["id"], "revision": 7, "operation": "remove"}
    error = error_of(fed.request("inference.control", stale, mutation_id), 409)
    assert error["code"] == "revision_mismatch"
    status = fed.result("operation.status", {"id": mutation_id})
    assert status["state"] == "refused"
    assert status["advice"] is None
    assert status["result"]["error"]["code"] == "revision_mismatch"
    # The retry repeats the refusal; other arguments under the same ID are a conflict.
    again = error_of(fed.request("inference.control", stale, mutation_id), 409)
    assert again["code"] == "revision_mismatch"
    fixed = {**stale, "revision": 1}
    conflict = error_of(fed.request("inference.control", fixed, mutation_id), 409)
    assert conflict["code"] == "mutation_conflict"
    assert fed.result("inference.get", {"service": created["id"]})["revision"] == 1
    removed = fed.result("inference.control", fixed, new_mutation_id())
    assert removed["removed"] is True


def test_a_service_the_grant_created_joins_the_grant(fed: Federated) -> None:
    grant = full_grant(fed, services=[])
    created = fed.result("inference.create", {"spec": service_spec(fed, "own")}, new_mutation_id())
    shown = fed.result("inference.get", {"service": created["id"]})
    assert shown["id"] == created["id"]
    assert shown["created_by_grant"] == grant
    assert [s["id"] for s in fed.result("discover")["services"]] == [created["id"]]
    # Another grant of the same peer cannot use it.
    full_grant(fed, services=[])
    error = error_of(fed.request("inference.get", {"service": created["id"]}), 403)
    assert error["details"]["reason"] == "resource_not_granted"


def test_a_manifest_with_a_url_anywhere_is_refused(fed: Federated) -> None:
    grant = full_grant(fed)
    manifest = manifest_of(fed)["manifest"]
    (entry,) = manifest["files"]
    variants = [
        {**manifest, "name": "https://example.org/model"},
        {**manifest, "metadata": {"source": "http://example.org/x.gguf"}},
        {**manifest, "metadata": {"nested": [{"deep": "see hf://org/model"}]}},
        {**manifest, "files": [{**entry, "path": "https://example.org/tiny.gguf"}]},
        {**manifest, "url": "https://example.org/model"},
    ]
    for variant in variants:
        error = error_of(
            fed.request("models.create", {"manifest": variant}, new_mutation_id()), 400
        )
        assert error["code"] == "invalid_request", (variant, error)
    assert fed.grantor_view(grant)["created_models"] == []


def test_a_manifest_equal_to_an_existing_model_creates_a_new_record(fed: Federated) -> None:
    grant = full_grant(fed)
    existing = manifest_of(fed)
    created = fed.result("models.create", {"manifest": existing["manifest"]}, new_mutation_id())
    assert created["id"] != fed.model
    assert created["sha256"] == existing["sha256"]
    assert fed.grantor_view(grant)["created_models"] == [created["id"]]
    # It joined the grant: its manifest can be read through it.
    assert fed.result("models.manifest", {"model": created["id"]})["sha256"] == existing["sha256"]


# --- cancellation and slots ------------------------------------------------------------


def test_revoking_during_a_stream_ends_it_with_grant_revoked_and_stops_the_engine(
    fed: Federated,
) -> None:
    grant = full_grant(fed)
    client = fed.alpha.owner()
    payload = {
        "operation": "inference.invoke",
        "body": invoke_body(fed.service, stream=True, **LONG),
    }
    lines: list[str] = []
    with client.stream(
        "POST", f"{API}/peers/{fed.peer}/request", json=payload, timeout=30
    ) as response:
        assert response.status_code == 200
        iterator = response.iter_lines()
        lines.append(next(iterator))
        assert fed.grantor_view(grant)["in_flight"] == 1
        started = time.monotonic()
        ok(fed.beta.owner().delete(f"{API}/grants/{grant}"))
        lines += list(iterator)
        ended_after = time.monotonic() - started
    assert ended_after < QUICK_SECONDS
    events = sse_events("\n".join(lines))
    (error,) = error_events(events)
    assert error["code"] == "grant_revoked"
    assert error["details"]["grant"] == grant
    assert fed.grantor_view(grant)["in_flight"] == 0
    assert fed.requester_view(grant)["in_flight"] == 0
    # The engine is free at once: a short request on beta's own URL is not queued behind it.
    assert fed.local_chat_seconds(logit_bias=PLAIN_TEXT) < QUICK_SECONDS


def test_no_slot_stays_in_flight_after_a_hundred_mixed_requests(fed: Federated) -> None:
    grant = full_grant(fed, concurrent=4)
    client = fed.alpha.owner()
    url = f"{API}/peers/{fed.peer}/request"
    counts = {"answered": 0, "streamed": 0, "cancelled": 0, "timed_out": 0, "refused": 0}
    admitted = 0
    for index in range(100):
        kind = index % 5
        if kind == 0:
            ok(fed.request("inference.invoke", invoke_body(fed.service)))
            counts["answered"] += 1
        elif kind == 1:
            events = sse_events(streamed(fed, invoke_body(fed.service, stream=True)).text)
            assert events[-1] == "[DONE]"
            counts["streamed"] += 1
        elif kind == 2:
            payload = {
                "operation": "inference.invoke",
                "body": invoke_body(fed.service, stream=True, **LONG),
            }
            with client.stream("POST", url, json=payload) as response:
                assert response.status_code == 200
                next(response.iter_lines())
            counts["cancelled"] += 1
        elif kind == 3:
            payload = {"operation": "inference.invoke", "body": invoke_body(fed.service, **LONG)}
            with pytest.raises(httpx.ReadTimeout):
                client.post(url, json=payload, timeout=httpx.Timeout(30, read=0.3))
            counts["timed_out"] += 1
        else:
            # Refused after admission (a foreign service), so it is charged too.
            foreign = invoke_body("svc_" + "b" * 26)
            assert error_of(fed.request("inference.invoke", foreign), 403)["code"] == "forbidden"
            counts["refused"] += 1
        admitted += 1
    assert counts == {
        "answered": 20,
        "streamed": 20,
        "cancelled": 20,
        "timed_out": 20,
        "refused": 20,
    }
    fed.wait_idle(grant)
    view = fed.grantor_view(grant)
    assert view["in_flight"] == 0
    assert view["remaining"]["requests"] == 1000 - admitted
    assert fed.requester_view(grant)["in_flight"] == 0
    assert fed.local_chat_seconds(logit_bias=PLAIN_TEXT) < QUICK_SECONDS


def test_federation_request_streams_into_an_exclusive_output_file(
    fed: Federated, tmp_path: Path
) -> None:
    full_grant(fed)
    request = tmp_path / "request.json"
    request.write_text(
        json.dumps({"operation": "inference.invoke", "body": invoke_body(fed.service, stream=True)})
    )
    output = tmp_path / "stream.out"
    done = ficc(
        "federation-request",
        fed.peer,
        "--input",
        str(request),
        "--output",
        str(output),
        state_dir=fed.alpha.state_dir,
    )
    assert done.returncode == 0, done.stderr
    assert sse_events(output.read_text())[-1] == "[DONE]"
    before = output.read_bytes()
    again = ficc(
        "federation-request",
        fed.peer,
        "--input",
        str(request),
        "--output",
        str(output),
        state_dir=fed.alpha.state_dir,
    )
    assert again.returncode == 2
    assert output.read_bytes() == before
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"operation": "discover", "body": {}}))
    shown = ficc(
        "federation-request", fed.peer, "--input", str(plain), state_dir=fed.alpha.state_dir
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["result"]["services"][0]["id"] == fed.service
    refused = plain.with_name("refused.json")
    refused.write_text(json.dumps({"operation": "discover", "body": {}, "mutation_id": "x"}))
    failed = ficc(
        "federation-request", fed.peer, "--input", str(refused), state_dir=fed.alpha.state_dir
    )
    assert failed.returncode == 1
    assert json.loads(failed.stderr)["error"]["code"] == "invalid_request"


def test_federation_request_exits_1_on_a_stream_ending_in_an_error_and_leaves_no_output(
    fed: Federated, tmp_path: Path
) -> None:
    """A refusal mid-stream is a refusal to scripts (exit 1, the error on stderr), and no
    --output file stays behind after any failure, so the same command can simply run again."""
    full_grant(fed, response_bytes=2000)
    streamed = tmp_path / "stream.json"
    streamed.write_text(
        json.dumps(
            {
                "operation": "inference.invoke",
                "body": invoke_body(fed.service, stream=True, max_tokens=64, logit_bias=PLAIN_TEXT),
            }
        )
    )
    refused = tmp_path / "refused.json"
    refused.write_text(json.dumps({"operation": "discover", "body": {}, "mutation_id": "x"}))
    output = tmp_path / "out"
    cut = ficc(
        "federation-request",
        fed.peer,
        "--input",
        str(streamed),
        "--output",
        str(output),
        state_dir=fed.alpha.state_dir,
    )
    assert cut.returncode == 1, cut.stderr
    assert json.loads(cut.stderr)["error"]["details"]["limit"] == "response_bytes"
    assert not output.exists()
    for request, state_dir, status in (
        (refused, fed.alpha.state_dir, 1),
        (refused, tmp_path / "no-server", 3),
    ):
        failed = ficc(
            "federation-request",
            fed.peer,
            "--input",
            str(request),
            "--output",
            str(output),
            state_dir=state_dir,
        )
        assert failed.returncode == status, failed.stderr
        assert not output.exists()


# --- a stopped grantor, and a crash simulated between the receipt and the effect ------------


def test_simulated_crash_before_the_effect_is_uncertain_then_created_once_on_retry(
    fed: Federated,
) -> None:
    grant = full_grant(fed)
    body = {"spec": service_spec(fed, "after-crash")}
    mutation_id = new_mutation_id()
    beta = fed.beta
    hypernet = hypernet_address(beta)
    beta.stop()
    error = error_of(fed.request("discover"), 502)
    assert error["code"] == "peer_unreachable"
    # The crash: the grantor committed its uncertain receipt, then died before the effect.
    insert_uncertain_receipt(beta.state_dir, grant, mutation_id, "inference.create", body)
    fed.beta = restart(beta, hypernet)

    def answered() -> dict[str, Any] | None:
        response = fed.request("operation.status", {"id": mutation_id})
        return response.json()["result"] if response.status_code == 200 else None

    status = wait_for(answered, seconds=20, what="the restarted grantor answers")
    # Inspected with nothing of it in flight, the mutation is certainly not applied (its effect
    # commits with its receipt): it holds no capacity, and the retry applies it once.
    assert status["state"] == "not_applied"
    assert status["advice"]
    first = ok(fed.request("inference.create", body, mutation_id))
    assert first["replayed"] is False
    second = ok(fed.request("inference.create", body, mutation_id))
    assert second["replayed"] is True
    assert second["result"] == first["result"]
    assert fed.grantor_view(grant)["created_services"] == [first["result"]["id"]]
    assert fed.result("operation.status", {"id": mutation_id})["state"] == "completed"
    names = [
        s["spec"]["name"]
        for s in fed.beta.owner().get("/api/v1/inference/services").json()["services"]
    ]
    assert names.count("after-crash") == 1
