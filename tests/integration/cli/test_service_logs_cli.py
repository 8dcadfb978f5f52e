"""`ficc service-logs` through the real entry point, against a real server and engine: the
newest attempt's last lines as JSON, and ``--follow`` on a terminal printing what the engine
writes next, then moving on to the attempt of a restart, until Ctrl-C."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.cli import Terminal, ok, refused
from tests.support.cluster import RunningCluster, ficc, start_cluster
from tests.support.inference import add_model
from tests.support.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.engine

REQUEST_LINE = '"POST /v1/chat/completions HTTP/1.1" 200'
"""What the engine logs for each chat it answers."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    root = tmp_path_factory.mktemp("cli-logs")
    assert ficc("init", state_dir=root / "state").returncode == 0
    running = start_cluster(root / "state")
    try:
        yield running
    finally:
        running.stop()


def test_the_log_shows_the_engine_and_follow_prints_new_lines_and_a_restarts(
    cluster: RunningCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    state = cluster.state_dir
    model = add_model(cluster, "tiny", write_tiny_gguf(tmp_path_factory.mktemp("m") / "t.gguf"))
    service = ok(
        state,
        "service-create",
        "--name",
        "logs",
        "--model",
        model,
        "--runtime",
        "llama.cpp",
        "--option",
        "n_ctx=256",
    )["id"]
    never_started = ok(state, "service-logs", service)
    assert (never_started["attempt"], never_started["lines"]) == (None, [])
    first = ok(state, "service-start", service, "--wait")["replicas"][-1]["attempt"]
    shown = ok(state, "service-logs", service, "--lines", "5")
    assert (shown["attempt"], shown["found"]) == (first, True)
    assert 0 < len(shown["lines"]) <= 5
    too_many = refused(state, "service-logs", service, "--lines", "1001", status=1)
    assert (too_many["code"], too_many["details"]["field"]) == ("invalid_request", "lines")

    terminal = Terminal("service-logs", service, "--follow", "--lines", "1", state_dir=state)
    try:
        terminal.read_until(lambda text: text.strip() != "")
        ok(state, "chat", service, "hi", "--max-tokens", "2")
        terminal.read_until(lambda text: REQUEST_LINE in text)
        ok(state, "service-stop", service, "--wait")
        second = ok(state, "service-start", service, "--wait")["replicas"][-1]["attempt"]
        assert second != first
        ok(state, "chat", service, "again", "--max-tokens", "2")
        # The restart's attempt is followed from its first line: its model load, then the chat.
        terminal.read_until(lambda text: text.count(REQUEST_LINE) >= 2)
        terminal.interrupt()
        assert terminal.wait() == 130
    finally:
        terminal.close()
        ok(state, "service-stop", service, "--wait")
