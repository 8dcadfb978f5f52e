"""The CLI's link to a running server: HTTP over the 0600 control socket, as local owner."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from ficc.base.errors import FiccError, error_from_code

SOCKET_NAME = "ficc.sock"
SOCKET_BASE_URL = "http://ficc.socket"


class NoServer(Exception):
    """No server answers on the state directory's control socket."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(
            f"no FICC server is running for {state_dir}; start one with "
            f"`ficc serve --state-dir {state_dir}`"
        )


class ControlClient:
    def __init__(self, state_dir: Path, project: str, *, timeout_seconds: float = 60.0) -> None:
        self.state_dir = state_dir
        self.project = project
        self._client = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(state_dir / SOCKET_NAME)),
            base_url=SOCKET_BASE_URL,
            timeout=timeout_seconds,
            headers={"X-FICC-Project": project},
        )

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *_: object) -> None:
        self._client.close()

    def request(self, method: str, path: str, body: Any | None = None) -> Any:
        """Send one request; FICC's refusals come back as the matching FiccError."""
        if not (self.state_dir / SOCKET_NAME).exists():
            raise NoServer(self.state_dir)
        try:
            response = self._client.request(method, path, json=body)
        except (httpx.ConnectError, FileNotFoundError, ConnectionRefusedError) as exc:
            raise NoServer(self.state_dir) from exc
        if response.status_code == 204:
            return None
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if response.is_error:
            raise _error_of(payload, response.status_code)
        return payload

    @contextlib.contextmanager
    def stream(self, method: str, path: str, body: Any | None = None) -> Iterator[httpx.Response]:
        """A response whose body is read as it arrives (server-sent events)."""
        if not (self.state_dir / SOCKET_NAME).exists():
            raise NoServer(self.state_dir)
        try:
            with self._client.stream(method, path, json=body) as response:
                if response.is_error:
                    response.read()
                    try:
                        payload = response.json()
                    except ValueError:
                        payload = None
                    raise _error_of(payload, response.status_code)
                yield response
        except (httpx.ConnectError, FileNotFoundError, ConnectionRefusedError) as exc:
            raise NoServer(self.state_dir) from exc


def _error_of(payload: Any, status: int) -> FiccError:
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        error = payload["error"]
        return error_from_code(
            str(error.get("code", "internal")),
            str(error.get("message", f"HTTP {status}")),
            error.get("details") if isinstance(error.get("details"), dict) else None,
        )
    return FiccError(f"the server answered HTTP {status}")
