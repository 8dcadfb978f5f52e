"""Services and chat through the real `ficc` entry point, against a real server and engine.

A tiny random-weight GGUF keeps the engine quick; the answers are nonsense, so the tests assert
the shape, not the words. Streaming is watched on the example model instead: the engine holds
back the tiny model's stray bytes (incomplete UTF-8) until its answer ends, so that answer shows
nothing until it is complete, after a wait that depends on the sampled bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import Terminal, ok, refused, run_in_terminal
from tests.support.cluster import RunningCluster, ficc, start_cluster
from tests.support.inference import SERVICES, add_model
from tests.support.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.engine

LONG_QUESTION = "Write the numbers from 1 to 500 separated by commas."
STORY_MAX_TOKENS = 1000
"""At temperature 0 the example model writes numbers until the cap, some seventeen seconds on
one thread: Ctrl-C after its first words always lands while it is still answering (a story, or
counting one number per line, ended on its own within a second or a few, under load before the
Ctrl-C). The next answer is bounded too."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    root = tmp_path_factory.mktemp("cli-services")
    assert ficc("init", state_dir=root / "state").returncode == 0
    running = start_cluster(root / "state")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def model(cluster: RunningCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")
    return add_model(cluster, "tiny", path)


@pytest.fixture(scope="module")
def example_model(cluster: RunningCluster) -> str:
    """The example model (real text, streamed token by token), found with `ficc example-model`."""
    found = ficc("example-model")
    assert found.returncode == 0, found.stderr
    return add_model(cluster, "smol", Path(found.stdout.strip()))


def service_ids(cluster: RunningCluster) -> list[str]:
    return [service["id"] for service in cluster.owner().get(SERVICES).json()["services"]]


def test_a_service_goes_from_create_to_remove_with_wait_and_answers_a_chat(
    cluster: RunningCluster, model: str
) -> None:
    state = cluster.state_dir
    created = ok(
        state,
        "service-create",
        "--name",
        "tiny-chat",
        "--model",
        model,
        "--runtime",
        "llama.cpp",
        "--option",
        "n_ctx=256",
    )
    service = created["id"]
    assert created["state"] == "stopped"
    assert created["spec"]["options"]["n_ctx"] == 256
    assert [s["id"] for s in ok(state, "services")["services"]] == [service]
    running = ok(state, "service-start", service, "--wait")
    assert running["state"] == "running"
    answer = ok(state, "chat", service, "Say hello", "--max-tokens", "8", "--temperature", "0")
    assert answer["model"] == service
    assert answer["finish_reason"] in ("length", "stop")
    assert isinstance(answer["reply"], str)
    assert ok(state, "service-drain", service, "--wait")["state"] == "stopped"
    assert ok(state, "service-show", service)["revision"] > running["revision"]
    assert ok(state, "service-remove", service, "--wait") == {"removed": service}
    assert service_ids(cluster) == []


def test_chat_streams_on_a_terminal_and_ctrl_c_cancels_the_answer_not_the_session(
    cluster: RunningCluster, example_model: str
) -> None:
    state = cluster.state_dir
    service = ok(
        state,
        "service-create",
        "--name",
        "tty",
        "--model",
        example_model,
        "--runtime",
        "llama.cpp",
    )
    ok(state, "service-start", service["id"], "--wait")
    try:
        # Greedy, and long enough (a few seconds) that a story is still being told at Ctrl-C.
        terminal = Terminal(
            "chat",
            service["id"],
            "--max-tokens",
            str(STORY_MAX_TOKENS),
            "--temperature",
            "0",
            state_dir=state,
        )
        try:
            terminal.read_until(lambda text: ">>> " in text)
            terminal.type(f"{LONG_QUESTION}\n")
            # The answer streams: text arrives before it is complete, then Ctrl-C cancels it.
            terminal.read_until(lambda text: len(text.split(LONG_QUESTION, 1)[-1]) > 40)
            terminal.interrupt()
            terminal.read_until(lambda text: "answer cancelled" in text)
            terminal.read_until(lambda text: text.rstrip().endswith(">>>"))
            # The session goes on: the next question is answered in full (a third prompt).
            terminal.type("again\n")
            terminal.read_until(lambda text: text.count(">>> ") >= 3)
            assert terminal.process.poll() is None
            terminal.type("\x04")  # Ctrl-D ends the session
            assert terminal.wait() == 0
        finally:
            terminal.close()
        # The cancelled answers freed the engine: a short request completes at once.
        short = ok(state, "chat", service["id"], "hi", "--max-tokens", "2", "--temperature", "0")
        assert short["finish_reason"] == "length"
    finally:
        ok(state, "service-stop", service["id"], "--wait")
        ok(state, "service-remove", service["id"])


def test_an_interactive_session_keeps_its_history(cluster: RunningCluster, model: str) -> None:
    state = cluster.state_dir
    service = ok(
        state, "service-create", "--name", "hist", "--model", model, "--runtime", "llama.cpp"
    )
    ok(state, "service-start", service["id"], "--wait")
    try:
        lines = "first question\nsecond question\n"
        result = ficc("chat", service["id"], "--max-tokens", "3", state_dir=state, stdin=lines)
        assert result.returncode == 0, result.stderr
        answers = [json.loads(line) for line in result.stdout.splitlines()]
        assert len(answers) == 2
        assert all(a["finish_reason"] == "length" for a in answers)
    finally:
        ok(state, "service-stop", service["id"], "--wait")
        ok(state, "service-remove", service["id"])


def test_the_table_of_a_service_shows_its_openai_url_and_model_name(
    cluster: RunningCluster, model: str
) -> None:
    state = cluster.state_dir
    service = ok(
        state, "service-create", "--name", "shown", "--model", model, "--runtime", "llama.cpp"
    )
    try:
        status, text = run_in_terminal(state, "service-show", service["id"])
        assert status == 0, text
        assert f"{cluster.url}/api/v1/inference/v1" in text
        assert "openai_model" in text
        assert "stopped" in text
        assert not text.lstrip().startswith("{")
        status, text = run_in_terminal(state, "services", "--format", "json")
        assert status == 0
        assert json.loads(text)["services"][0]["id"] == service["id"]
    finally:
        ok(state, "service-remove", service["id"])


def test_a_refused_create_names_every_wrong_field_with_allowed_values_and_creates_nothing(
    cluster: RunningCluster,
) -> None:
    state = cluster.state_dir
    body = Path(state.parent / "spec.json")
    body.write_text(json.dumps({"name": "-bad", "replicas": 0}))
    error = refused(state, "service-create", "--input", str(body), status=1)
    assert error["code"] == "invalid_request"
    fields = {entry["field"] for entry in error["details"]["fields"]}
    assert {"name", "model", "runtime", "replicas"} <= fields
    runtime = next(e for e in error["details"]["fields"] if e["field"] == "runtime")
    assert runtime["allowed"] == ["llama.cpp", "openai", "vllm"]
    assert service_ids(cluster) == []


def test_input_beside_body_flags_and_missing_flags_are_usage_errors(
    cluster: RunningCluster, model: str, tmp_path: Path
) -> None:
    state = cluster.state_dir
    body = tmp_path / "spec.json"
    body.write_text(json.dumps({"name": "x", "model": model, "runtime": "llama.cpp"}))
    error = refused(state, "service-create", "--input", str(body), "--name", "y", status=2)
    assert error["code"] == "usage_error"
    assert "--name" in error["message"]
    error = refused(state, "service-create", "--name", "only", status=2)
    assert "--model" in error["message"]
    assert "--runtime" in error["message"]
    error = refused(state, "service-create", "--nme", "x", status=2)
    assert "--nme" in error["message"]
    assert "Usage:" in error["details"]["usage"]
    assert service_ids(cluster) == []


def test_an_unknown_model_says_it_is_a_service_id_and_lists_the_running_ones(
    cluster: RunningCluster, model: str
) -> None:
    state = cluster.state_dir
    service = ok(
        state, "service-create", "--name", "listed", "--model", model, "--runtime", "llama.cpp"
    )
    ok(state, "service-start", service["id"], "--wait")
    try:
        error = refused(state, "chat", "tiny", "hello", status=1)
        assert error["code"] == "not_found"
        # The OpenAI-shaped error has no details: the message itself lists the usable IDs.
        assert "is the ID of a running service" in error["message"]
        assert service["id"] in error["message"]
    finally:
        ok(state, "service-stop", service["id"], "--wait")
        ok(state, "service-remove", service["id"])


def test_control_of_an_unknown_service_is_refused_with_status_one(cluster: RunningCluster) -> None:
    error = refused(cluster.state_dir, "service-start", "svc_" + "a" * 26, "--wait", status=1)
    assert error["code"] == "not_found"
