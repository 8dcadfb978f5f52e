"""The cluster-wide commands, both output formats, and every error path with its exit status.

Through the real `ficc` entry point against a real server: stdout a pipe (JSON) or a
pseudo-terminal (tables).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.cli import ok, refused, run_in_terminal
from tests.support.cluster import RunningCluster, ficc, start_cluster
from tests.support.tiny_gguf import write_tiny_gguf


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    root = tmp_path_factory.mktemp("cli-commands")
    assert ficc("init", state_dir=root / "state").returncode == 0
    running = start_cluster(root / "state")
    try:
        yield running
    finally:
        running.stop()


def test_projects_are_listed_and_created(cluster: RunningCluster) -> None:
    state = cluster.state_dir
    created = ok(state, "project-create", "research")
    assert created["name"] == "research"
    names = [project["name"] for project in ok(state, "projects")["projects"]]
    assert "research" in names
    assert "default" in names
    error = refused(state, "project-create", "research", status=1)
    assert error["code"] == "conflict"


def test_a_revoked_token_is_refused_afterwards(cluster: RunningCluster) -> None:
    state = cluster.state_dir
    token = ok(state, "token-create", "--scope", "models:read")
    reader = cluster.client(token["token"])
    assert reader.get("/api/v1/models").status_code == 200
    assert ok(state, "token-revoke", token["id"]) == {"revoked": token["id"]}
    assert reader.get("/api/v1/models").status_code == 401
    assert refused(state, "token-revoke", "tok_" + "a" * 26, status=1)["code"] == "not_found"


def test_a_restricted_token_is_created_shown_and_its_usage_read(cluster: RunningCluster) -> None:
    state = cluster.state_dir
    service = "svc_" + "a" * 26
    made = ok(
        state,
        "token-create",
        "--scope",
        "inference:invoke",
        "--service",
        service,
        "--service",
        "chat",
        "--tokens",
        "200000",
        "--tokens-per-minute",
        "5000",
        "--requests-per-minute",
        "10",
    )
    assert made["services"] == ["chat", service]
    assert (made["tokens"], made["tokens_per_minute"], made["requests_per_minute"]) == (
        200000,
        5000,
        10,
    )
    [shown] = [t for t in ok(state, "tokens")["tokens"] if t["id"] == made["id"]]
    assert shown["remaining"] == {
        "tokens": 200000,
        "tokens_per_minute": 5000,
        "requests_per_minute": 10,
    }
    assert ok(state, "token-usage", made["id"])["records"] == []
    error = refused(state, "token-create", "--scope", "discover", "--tokens", "0", status=1)
    assert error["details"]["field"] == "tokens"


def test_a_model_is_added_with_a_long_wait_and_removed(
    cluster: RunningCluster, tmp_path: Path
) -> None:
    state = cluster.state_dir
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    added = ok(state, "model-add", "--name", "tiny", str(path))
    assert ok(state, "model-remove", added["id"]) == {"removed": added["id"]}
    assert all(m["id"] != added["id"] for m in ok(state, "models")["models"])
    assert refused(state, "model-remove", added["id"], status=1)["code"] == "not_found"


def test_the_audit_log_pages_with_after_and_transfers_are_listed(cluster: RunningCluster) -> None:
    state = cluster.state_dir
    entries = ok(state, "federation-audit")["entries"]
    if entries:
        last = entries[-1]["seq"]
        assert ok(state, "federation-audit", "--after", str(last))["entries"] == []
    assert ok(state, "federation-transfers") == {"transfers": []}
    assert refused(state, "federation-audit", "--after", "-1", status=2)["code"] == "usage_error"
    too_far = "191046698193310524515038619762688"
    assert refused(state, "federation-audit", "--after", too_far, status=2)["code"] == "usage_error"
    assert refused(state, "federation-audit", "--limit", "501", status=2)["code"] == "usage_error"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_for_each_shell(shell: str) -> None:
    result = ficc("completion", shell)
    assert result.returncode == 0, result.stderr
    assert "_FICC_COMPLETE" in result.stdout
    assert f"{shell}_complete" in result.stdout


def test_a_terminal_gets_tables_with_relative_times_and_a_pipe_gets_json(
    cluster: RunningCluster,
) -> None:
    state = cluster.state_dir
    status, text = run_in_terminal(
        state, "token-create", "--scope", "models:read", "--lifetime", "10800"
    )
    assert status == 0, text
    assert "expires in 2h" in text or "expires in 3h" in text
    assert "tok_" in text
    status, text = run_in_terminal(state, "federation-status")
    assert status == 0, text
    assert "companion" in text
    assert "identity" in text
    assert not text.lstrip().startswith("{")
    piped = ok(state, "token-create", "--scope", "models:read", "--lifetime", "60")
    assert piped["expires_at"].endswith("Z")
    status, text = run_in_terminal(state, "projects", "--format", "json")
    assert status == 0
    assert "default" in [p["name"] for p in json.loads(text)["projects"]]
    table = ficc("projects", "--format", "table", state_dir=state)
    assert table.returncode == 0
    assert "default" in table.stdout
    assert not table.stdout.lstrip().startswith("{")


def test_usage_errors_are_json_on_stderr_with_status_two(cluster: RunningCluster) -> None:
    state = cluster.state_dir
    before = cluster.owner().get("/api/v1/federation/").json()
    agent = str(state.parent / "agent")
    body = state.parent / "pair.json"
    body.write_text(json.dumps({"service": "x", "scopes": ["discover"]}))
    cases = [
        ("federation-pair", "--input", str(body), "--scope", "discover"),
        ("federation-configure", "--input", str(body), "--agent-directory", agent),
        ("federation-approve", "ofr_" + "a" * 26, "--input", str(body), "--concurrent", "2"),
        ("services", "--format", "yaml"),
        ("no-such-command",),
    ]
    for args in cases:
        error = refused(state, *args, status=2)
        assert error["code"] == "usage_error", args
        assert error["message"]
    after = cluster.owner().get("/api/v1/federation/").json()
    assert (after["offers"], after["companion"]) == (before["offers"], before["companion"])


def test_without_a_server_every_command_says_so_with_status_three(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert ficc("init", state_dir=state).returncode == 0
    for args in (("services",), ("projects",), ("chat", "svc", "hi"), ("federation-transfers",)):
        error = refused(state, *args, status=3)
        assert error["code"] == "no_server"
        assert str(state.absolute()) in error["message"]


def test_a_server_that_hangs_up_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    """A socket that accepts and closes at once, as a server dying mid-request does."""
    state = tmp_path / "state"
    state.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(state / "ficc.sock"))
    listener.listen(8)
    stop = threading.Event()

    def hang_up() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            connection.recv(65536)
            connection.close()

    thread = threading.Thread(target=hang_up)
    thread.start()
    try:
        error = refused(state, "services", status=3)
        assert error["code"] == "no_server"
        assert "closed the connection" in error["message"]
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_init_warns_when_the_state_directory_would_be_committed(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    exposed = ficc("init", state_dir=tmp_path / "exposed")
    assert exposed.returncode == 0
    warning = json.loads(exposed.stderr.strip().splitlines()[-1])["warning"]
    assert warning["code"] == "state_dir_not_ignored"
    (tmp_path / ".gitignore").write_text("ignored/\n")
    quiet = ficc("init", state_dir=tmp_path / "ignored")
    assert quiet.returncode == 0
    assert "state_dir_not_ignored" not in quiet.stderr


HEAVY_MODULES = ("fastapi", "sqlalchemy", "iroh", "httpx", "uvicorn", "uvloop", "rich", "alembic")


@pytest.mark.parametrize("args", [["--help"], ["services", "--help"], ["completion", "bash"]])
def test_help_and_socket_commands_import_none_of_the_server_libraries(args: list[str]) -> None:
    probe = (
        "import sys\n"
        f"sys.argv = ['ficc', *{args!r}]\n"
        "from ficc.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"loaded = sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules)\n"
        "print('LOADED', loaded, file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert "LOADED []" in result.stderr, result.stderr


def test_a_server_that_never_answers_is_a_timeout_with_status_four(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rule of the client, with a short deadline: a socket that accepts and stays silent."""
    from ficc.cli.client import ControlClient
    from ficc.cli.exits import handles_errors

    state = tmp_path / "state"
    state.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(state / "ficc.sock"))
    listener.listen(8)

    @handles_errors
    def ask() -> None:
        with ControlClient(state, "default", timeout_seconds=0.2) as client:
            client.request("GET", "/api/v1/projects")

    try:
        with pytest.raises(SystemExit) as exited:
            ask()
    finally:
        listener.close()
    assert exited.value.code == 4
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["code"] == "timeout"
    assert error["details"] == {"seconds": 0.2}
