"""The rules of the services API on a real server: revisions, strict input, idempotency keys and
the admission preview. Nothing here starts an engine; refused input must change nothing.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.cluster import RunningCluster
from tests.support.inference import SERVICES, add_model, children_of, control, create, get, spec

PREVIEW = "/api/v1/inference/preview"


@pytest.fixture(scope="module")
def model(cluster: RunningCluster, tiny_model_file: Path) -> str:
    return add_model(cluster, "tiny", tiny_model_file)


@pytest.fixture
def owner(cluster: RunningCluster) -> httpx.Client:
    return cluster.owner()


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    return error


def unchanged(owner: httpx.Client, service: dict[str, Any]) -> None:
    now = get(owner, service["id"])
    assert (now["state"], now["revision"], now["spec"]) == (
        service["state"],
        service["revision"],
        service["spec"],
    )


def new_key() -> str:
    return secrets.token_hex(16)


# --- revisions and states ------------------------------------------------------------------


def test_a_stale_revision_is_refused_with_revision_mismatch(
    owner: httpx.Client, model: str
) -> None:
    service = create(owner, spec("stale", model))
    for operation in ("start", "stop", "remove"):
        error = error_of(control(owner, service["id"], 7, operation), 409)
        assert error["code"] == "revision_mismatch"
        assert error["details"]["revision"] == 1
    replaced = owner.put(
        f"{SERVICES}/{service['id']}", json={"revision": 2, "spec": spec("renamed", model)}
    )
    assert error_of(replaced, 409)["code"] == "revision_mismatch"
    unchanged(owner, service)


def test_each_change_raises_the_revision_and_the_old_one_goes_stale(
    owner: httpx.Client, model: str
) -> None:
    service = create(owner, spec("counted", model))
    replaced = owner.put(
        f"{SERVICES}/{service['id']}", json={"revision": 1, "spec": spec("counted-2", model)}
    )
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["revision"] == 2
    assert replaced.json()["spec"]["name"] == "counted-2"
    stopped = control(owner, service["id"], 2, "stop")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["revision"] == 3
    assert error_of(control(owner, service["id"], 2, "remove"), 409)["code"] == (
        "revision_mismatch"
    )
    assert control(owner, service["id"], 3, "remove").status_code == 200


def test_drain_is_refused_unless_the_service_runs(owner: httpx.Client, model: str) -> None:
    service = create(owner, spec("idle", model))
    error = error_of(control(owner, service["id"], 1, "drain"), 409)
    assert error["code"] == "conflict"
    assert error["details"]["allowed"] == ["running"]
    unchanged(owner, service)


def test_an_unknown_service_is_not_found(owner: httpx.Client) -> None:
    missing = "svc_" + "q" * 26
    assert error_of(owner.get(f"{SERVICES}/{missing}"), 404)["code"] == "not_found"
    assert error_of(control(owner, missing, 1, "start"), 404)["code"] == "not_found"


# --- strict input --------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", 1, 0, None], ids=["string", "one", "zero", "null"])
def test_acknowledge_unknown_must_be_a_json_boolean(
    owner: httpx.Client, model: str, value: object
) -> None:
    service = create(owner, spec("strict", model))
    error = error_of(control(owner, service["id"], 1, "start", acknowledge_unknown=value), 400)
    assert error["code"] == "invalid_request"
    assert "acknowledge_unknown" in error["message"]
    unchanged(owner, service)


@pytest.mark.parametrize("operation", ["stop", "drain", "remove"])
def test_acknowledge_unknown_is_refused_with_any_operation_but_start(
    owner: httpx.Client, model: str, operation: str
) -> None:
    service = create(owner, spec("ack", model))
    response = control(owner, service["id"], 1, operation, acknowledge_unknown=True)
    error = error_of(response, 400)
    assert error["code"] == "invalid_request"
    assert "start" in error["message"]
    unchanged(owner, service)


@pytest.mark.parametrize(
    "body",
    [
        {"revision": "1", "operation": "start"},
        {"revision": True, "operation": "start"},
        {"revision": 0, "operation": "start"},
        {"revision": 1, "operation": "restart"},
        {"revision": 1, "operation": "start", "force": True},
        {"operation": "start"},
    ],
    ids=["revision-string", "revision-bool", "revision-zero", "operation", "unknown", "missing"],
)
def test_a_malformed_control_request_is_refused(
    owner: httpx.Client, model: str, body: dict[str, Any]
) -> None:
    service = create(owner, spec("malformed", model))
    response = owner.post(f"{SERVICES}/{service['id']}/control", json=body)
    assert error_of(response, 400)["code"] == "invalid_request"
    unchanged(owner, service)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "model": "mdl_" + "b" * 26, "runtime": "llama.cpp"}, "model"),
        ({"name": "x", "runtime": "llama.cpp"}, "model"),
        ({"name": "x", "model": "MODEL", "runtime": "tgi"}, "runtime"),
        ({"name": "-x", "model": "MODEL", "runtime": "llama.cpp"}, "name"),
        ({"name": "x", "model": "MODEL", "runtime": "llama.cpp", "replicas": 17}, "replicas"),
        ({"name": "x", "model": "MODEL", "runtime": "llama.cpp", "gpu": 1}, "gpu"),
        ({"name": "x", "model": "m", "runtime": "openai"}, "options.base_url"),
        (
            {"name": "x", "model": "MODEL", "runtime": "llama.cpp", "options": {"n_threads": 0}},
            "options.n_threads",
        ),
    ],
    ids=[
        "unknown-model",
        "missing-model",
        "runtime",
        "name",
        "replicas",
        "unknown-field",
        "base-url",
        "threads",
    ],
)
def test_a_refused_spec_names_its_field_and_creates_nothing(
    owner: httpx.Client, model: str, body: dict[str, Any], field: str
) -> None:
    body = {key: model if value == "MODEL" else value for key, value in body.items()}
    before = owner.get(SERVICES).json()["services"]
    error = error_of(owner.post(SERVICES, json=body), 400)
    assert error["code"] == "invalid_request"
    assert field in error["message"]
    assert owner.get(SERVICES).json()["services"] == before


# --- idempotency keys ----------------------------------------------------------------------


def test_the_same_idempotency_key_and_body_replay_the_first_answer(
    owner: httpx.Client, model: str
) -> None:
    key = new_key()
    body = spec("once", model)
    first = owner.post(SERVICES, json=body, headers={"Idempotency-Key": key})
    again = owner.post(SERVICES, json=body, headers={"Idempotency-Key": key})
    assert first.status_code == again.status_code == 201
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    listed = [s["id"] for s in owner.get(SERVICES).json()["services"]]
    assert listed.count(first.json()["id"]) == 1
    assert len(listed) == len(set(listed))


def test_a_replayed_control_operation_changes_the_service_once(
    owner: httpx.Client, model: str
) -> None:
    service = create(owner, spec("stop-once", model))
    key = {"Idempotency-Key": new_key()}
    body = {"revision": 1, "operation": "stop"}
    first = owner.post(f"{SERVICES}/{service['id']}/control", json=body, headers=key)
    again = owner.post(f"{SERVICES}/{service['id']}/control", json=body, headers=key)
    assert first.status_code == again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert get(owner, service["id"])["revision"] == 2


def test_an_idempotency_key_reused_with_another_body_is_a_mutation_conflict(
    owner: httpx.Client, model: str
) -> None:
    key = {"Idempotency-Key": new_key()}
    first = owner.post(SERVICES, json=spec("first", model), headers=key)
    assert first.status_code == 201
    before = owner.get(SERVICES).json()["services"]
    other = owner.post(SERVICES, json=spec("second", model), headers=key)
    assert error_of(other, 409)["code"] == "mutation_conflict"
    # Nor may the key be reused for another operation.
    body = {"revision": 1, "operation": "stop"}
    reused = owner.post(f"{SERVICES}/{first.json()['id']}/control", json=body, headers=key)
    assert error_of(reused, 409)["code"] == "mutation_conflict"
    assert owner.get(SERVICES).json()["services"] == before


@pytest.mark.parametrize(
    "key",
    ["A" * 32, "a" * 31, "a" * 33, "g" * 32, "", "0123456789abcdef0123456789abcde-"],
    ids=["upper", "short", "long", "not-hex", "empty", "dash"],
)
def test_a_malformed_idempotency_key_is_refused(owner: httpx.Client, model: str, key: str) -> None:
    before = owner.get(SERVICES).json()["services"]
    response = owner.post(SERVICES, json=spec("keyed", model), headers={"Idempotency-Key": key})
    error = error_of(response, 400)
    assert error["code"] == "invalid_request"
    assert "Idempotency-Key" in error["message"]
    assert owner.get(SERVICES).json()["services"] == before


# --- the admission preview -----------------------------------------------------------------


def local_node(owner: httpx.Client) -> dict[str, Any]:
    (node,) = [n for n in owner.get("/api/v1/nodes").json()["nodes"] if n["local"]]
    return node


def preview(owner: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = owner.post(PREVIEW, json={"spec": body})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_a_spec_that_fits_is_previewed_with_its_requirements(
    owner: httpx.Client, model: str
) -> None:
    result = preview(owner, spec("fits", model))
    assert result["fits"] is True
    assert result["reasons"] == []
    assert result["requirements"]["cpu_slots"] == 1
    assert result["requirements"]["memory_bytes"] > 0
    assert result["node"].startswith("nod_")


def test_the_preview_refuses_an_unknown_model(owner: httpx.Client) -> None:
    unknown = "mdl_" + "c" * 26
    result = preview(owner, spec("nomodel", unknown))
    assert result["fits"] is False
    assert any(unknown in reason for reason in result["reasons"])


def test_the_preview_refuses_more_cpu_than_the_node_has(owner: httpx.Client, model: str) -> None:
    cpus = local_node(owner)["capacity"]["cpu_count"]
    threads = min(cpus, 256)  # 16 replicas of this many threads never fit on the node
    result = preview(owner, spec("wide", model, replicas=16, options={"n_threads": threads}))
    assert result["fits"] is False
    assert any("CPU" in reason for reason in result["reasons"]), result["reasons"]
    assert result["requirements"]["cpu_slots"] == 16 * threads


def test_the_preview_refuses_vllm_on_a_node_without_a_gpu_or_without_vllm(
    owner: httpx.Client, model: str
) -> None:
    has_gpu = bool(local_node(owner)["capacity"]["gpus"])
    result = preview(owner, {"name": "big", "model": model, "runtime": "vllm"})
    assert result["fits"] is False
    # Without a GPU the GPU is named; on a GPU node this suite's venv has no vLLM to run.
    expected = "vllm" if has_gpu else "GPU"
    assert any(expected in reason for reason in result["reasons"]), result["reasons"]


def test_a_preview_launches_nothing_and_records_nothing(
    cluster: RunningCluster, owner: httpx.Client, model: str
) -> None:
    before = owner.get(SERVICES).json()["services"]
    for body in (
        spec("fits", model),
        spec("wide", model, replicas=16),
        {"name": "big", "model": model, "runtime": "vllm"},
    ):
        preview(owner, body)
    assert owner.get(SERVICES).json()["services"] == before
    assert children_of(cluster.process.pid) == []


def test_a_malformed_preview_spec_is_refused(owner: httpx.Client, model: str) -> None:
    response = owner.post(PREVIEW, json={"spec": {**spec("x", model), "colour": "red"}})
    assert error_of(response, 400)["code"] == "invalid_request"
    assert error_of(owner.post(PREVIEW, json={}), 400)["code"] == "invalid_request"
