"""A real FICC server for the kit, driven only through its command line and HTTP API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Server:
    """``ficc serve`` in a child process, and its owner's HTTP API."""

    process: subprocess.Popen[bytes]
    url: str
    token: str

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 (a loopback URL the server wrote)
            self.url + "/api/v1" + path, data=data, method=method
        )
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
                return answer.status, json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())

    def overview(self) -> dict[str, Any]:
        status, found = self.call("GET", "/federation/")
        assert status == 200, found
        return dict(found)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start(state_dir: Path) -> Server:
    """``ficc init`` then ``ficc serve`` on loopback, its HyperNet companion configured."""
    ficc = [sys.executable, "-m", "ficc"]
    subprocess.run([*ficc, "init", "--state-dir", str(state_dir)], check=True, capture_output=True)
    loopback = ["--listen", "127.0.0.1:0", "--hypernet-bind", "127.0.0.1:0"]
    with (state_dir.parent / "serve.log").open("wb") as log:
        process = subprocess.Popen(
            [*ficc, "serve", "--state-dir", str(state_dir), *loopback],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, (state_dir.parent / "serve.log").read_text()
        try:
            info = json.loads((state_dir / "server.json").read_text())
        except (FileNotFoundError, ValueError):
            info = {}
        if info.get("pid") == process.pid:
            token = (state_dir / "owner.token").read_text().strip()
            server = Server(process, info["url"], token)
            agent = state_dir.parent / "agent"
            configured = {"agent_directory": str(agent), "label": "conformance"}
            status, answer = server.call("PUT", "/federation/configuration", configured)
            assert status == 200, answer
            return server
        time.sleep(0.05)
    process.kill()
    raise RuntimeError("ficc serve did not start in time")
