"""Real FICC servers for tests: `ficc serve` in a child process on a free loopback port."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

START_DEADLINE_SECONDS = 30.0


def ficc(*args: str, state_dir: Path | None = None, stdin: str | None = None, timeout: float = 60):
    """Run the real `ficc` entry point; returns the CompletedProcess."""
    command = [sys.executable, "-m", "ficc", *args]
    if state_dir is not None:
        command += ["--state-dir", str(state_dir)]
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )


@dataclass
class RunningCluster:
    state_dir: Path
    process: subprocess.Popen[bytes]
    url: str
    owner_token: str
    log_path: Path
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self, token: str | None = None, **headers: str) -> httpx.Client:
        all_headers = dict(headers)
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        client = httpx.Client(base_url=self.url, headers=all_headers, timeout=30)
        self.clients.append(client)
        return client

    def owner(self) -> httpx.Client:
        return self.client(self.owner_token)

    def token(self, *scopes: str, projects: list[str] | None = None, **extra: Any) -> str:
        body: dict[str, Any] = {"scopes": list(scopes), "projects": projects or ["default"]}
        body.update(extra)
        response = self.owner().post("/api/v1/tokens", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["token"])

    def stop(self, sig: int = signal.SIGTERM) -> int:
        for client in self.clients:
            client.close()
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


@contextlib.contextmanager
def added_environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in this process's environment for the block (for the servers it starts),
    the earlier values back afterwards."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def start_cluster(state_dir: Path, *extra_args: str) -> RunningCluster:
    """Start `ficc serve` and wait until it writes server.json (it then accepts requests)."""
    log_path = state_dir.parent / f"{state_dir.name}.log"
    with log_path.open("wb") as log:
        process = _spawn(state_dir, log, extra_args)
    server_json = state_dir / "server.json"
    deadline = time.monotonic() + START_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ficc serve exited early:\n{log_path.read_text()}")
        info = _server_info(server_json)
        # A server.json left by an earlier process (killed with SIGKILL) names another pid.
        if info is not None and info.get("pid") == process.pid:
            token = (state_dir / "owner.token").read_text().strip()
            return RunningCluster(state_dir, process, info["url"], token, log_path)
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"ficc serve did not start in time:\n{log_path.read_text()}")


def _server_info(path: Path) -> dict[str, Any] | None:
    try:
        info = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None  # not written yet, or being written
    return info if isinstance(info, dict) else None


def _spawn(state_dir: Path, log: Any, extra_args: tuple[str, ...]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ficc",
            "serve",
            "--state-dir",
            str(state_dir),
            "--listen",
            "127.0.0.1:0",
            "--hypernet-bind",
            "127.0.0.1:0",
            *extra_args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def start_standby(state_dir: Path, *extra_args: str, log_name: str = "standby") -> RunningCluster:
    """Start `ficc serve` on a state directory another process serves as the active one (one
    PostgreSQL database): it prints the URL it stands by on, and writes no server.json."""
    log_path = state_dir.parent / f"{state_dir.name}-{log_name}.log"
    with log_path.open("wb") as log:
        process = _spawn(state_dir, log, extra_args)
    deadline = time.monotonic() + START_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ficc serve exited early:\n{log_path.read_text()}")
        for line in log_path.read_text(errors="replace").splitlines():
            _, found, url = line.partition(" standing by on ")
            if found:
                token = (state_dir / "owner.token").read_text().strip()
                return RunningCluster(state_dir, process, url.strip(), token, log_path)
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"ficc serve did not stand by in time:\n{log_path.read_text()}")
