"""The CLI's link to a running server: HTTP over the 0600 control socket, as local owner.

Built on the standard library's ``http.client`` rather than httpx: a command that only talks to
the socket then starts without importing an HTTP stack it does not need (about 130 ms), and
``http.client`` itself loads only when a request is made (``ficc --help`` never needs it).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ficc.base.errors import FiccError, InvalidInput, error_from_code

if TYPE_CHECKING:
    import http.client

SOCKET_NAME = "ficc.sock"
DEFAULT_TIMEOUT_SECONDS = 60.0
READ_CHUNK_BYTES = 64 * 1024
# What http.client refuses to send in a request line (it raises before sending anything).
_UNSENDABLE = re.compile(r"[\x00-\x20\x7f]")


class NoServer(Exception):
    """No server answers on the state directory's control socket."""

    def __init__(self, state_dir: Path, reason: str | None = None) -> None:
        where = state_dir.absolute()
        message = (
            f"no FICC server is running for {where}; start one with "
            f"`ficc serve --state-dir {where}`"
        )
        if reason is not None:
            message = f"the FICC server for {where} {reason}"
        super().__init__(message)


class ServerTimeout(Exception):
    """The server did not answer within the command's deadline."""

    def __init__(self, seconds: float | None) -> None:
        within = "in time" if seconds is None else f"within {seconds:g} s"
        super().__init__(
            f"the FICC server did not answer {within}; the request may still complete: "
            "inspect before retrying"
        )
        self.seconds = seconds


class ControlResponse:
    """A response whose body is read as it arrives (server-sent events, streamed results)."""

    def __init__(self, raw: http.client.HTTPResponse, state_dir: Path, timeout: float | None):
        self._raw = raw
        self._state_dir = state_dir
        self._timeout = timeout
        self.status_code = raw.status
        self.content_type = raw.getheader("Content-Type", "")

    def iter_bytes(self) -> Iterator[bytes]:
        while True:
            with _translated(self._state_dir, self._timeout):
                data = self._raw.read1(READ_CHUNK_BYTES)
            if not data:
                return
            yield data

    def iter_lines(self) -> Iterator[str]:
        """Lines without their ending, as the server sends them."""
        while True:
            with _translated(self._state_dir, self._timeout):
                line = self._raw.readline()
            if not line:
                return
            yield line.decode("utf-8", errors="replace").rstrip("\r\n")


class ControlClient:
    """One connection to the control socket; ``timeout_seconds=None`` waits as long as it takes."""

    def __init__(
        self,
        state_dir: Path,
        project: str,
        *,
        timeout_seconds: float | None = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self.state_dir = state_dir
        self.project = project
        self.timeout_seconds = timeout_seconds
        from ficc.cli.unix_http import UnixConnection

        self._connection = UnixConnection(state_dir / SOCKET_NAME, timeout_seconds)

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._connection.close()

    def request(self, method: str, path: str, body: Any | None = None) -> Any:
        """Send one request; FICC's refusals come back as the matching FiccError."""
        with _translated(self.state_dir, self.timeout_seconds):
            raw = self._send(method, path, body)
            data = raw.read()
        if raw.status == 204:
            return None
        try:
            payload = json.loads(data) if data else None
        except ValueError:
            payload = None
        if raw.status >= 400:
            raise _error_of(payload, raw.status)
        return payload

    @contextlib.contextmanager
    def stream(self, method: str, path: str, body: Any | None = None) -> Iterator[ControlResponse]:
        """A response whose body is read as it arrives; an error status raises before."""
        with _translated(self.state_dir, self.timeout_seconds):
            raw = self._send(method, path, body)
            if raw.status >= 400:
                data = raw.read()
                try:
                    payload = json.loads(data) if data else None
                except ValueError:
                    payload = None
                raise _error_of(payload, raw.status)
        try:
            yield ControlResponse(raw, self.state_dir, self.timeout_seconds)
        finally:
            # Closing the connection is how the server learns that the caller has gone: it
            # cancels the request (and a remote one) at once.
            self._connection.close()

    def _send(self, method: str, path: str, body: Any | None) -> http.client.HTTPResponse:
        _check_path(path)
        if not (self.state_dir / SOCKET_NAME).exists():
            raise NoServer(self.state_dir)
        headers = {"X-FICC-Project": self.project, "Accept": "application/json"}
        encoded = None
        if body is not None:
            encoded = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self._connection.request(method, path, body=encoded, headers=headers)
        return self._connection.getresponse()


def _check_path(path: str) -> None:
    """Refuse a path that an argument (an ID with a space, a newline, a ``..``) made malformed.

    Sent as it is, http.client refuses it, which read as a server that hung up (exit status 3),
    or a dot segment silently reached another route.
    """
    for segment in path.partition("?")[0].split("/"):
        if segment in (".", "..") or _UNSENDABLE.search(segment):
            raise InvalidInput(
                f"{segment!r} is not an ID: an ID has no spaces, control characters or dot "
                "segments",
                details={"value": segment},
            )


@contextlib.contextmanager
def _translated(state_dir: Path, timeout: float | None) -> Iterator[None]:
    """Every transport failure as NoServer or ServerTimeout: the CLI never shows a traceback."""
    import http.client

    try:
        yield
    except TimeoutError as exc:
        raise ServerTimeout(timeout) from exc
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise NoServer(state_dir) from exc
    except (http.client.HTTPException, ConnectionError) as exc:
        raise NoServer(state_dir, "closed the connection before answering") from exc
    except OSError as exc:
        raise NoServer(state_dir, f"cannot be reached: {exc.strerror or exc}") from exc


def _error_of(payload: Any, status: int) -> FiccError:
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        error = payload["error"]
        return error_from_code(
            str(error.get("code") or "internal"),
            str(error.get("message", f"HTTP {status}")),
            error.get("details") if isinstance(error.get("details"), dict) else None,
        )
    return FiccError(f"the server answered HTTP {status}")
