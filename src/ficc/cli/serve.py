"""`ficc serve`: the HTTP API on TCP and the control socket, in one process and one loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import uvicorn
from starlette.types import ASGIApp

from ficc.adapters import control_socket
from ficc.base.errors import InvalidInput, NotActive, PermissionDenied
from ficc.bootstrap import Cluster, Settings, lifecycle, open_cluster
from ficc.cli.http_protocol import CoalescedHTTPProtocol
from ficc.domain.inference import UpstreamAllowList
from ficc.web.app import LocalOwnerApp, create_app
from ficc.web.errors import envelope

log = logging.getLogger("ficc.serve")


class _Server(uvicorn.Server):
    """A uvicorn server whose signals FICC handles (two servers share one process)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@dataclass(frozen=True)
class ServeOptions:
    """How the process presents itself: its URL behind a proxy."""

    public_url: str | None = None


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen must be HOST:PORT, not {listen!r}")
    return host.strip("[]"), int(port)


def parse_upstream_allow(values: tuple[str, ...]) -> tuple[str, ...]:
    """Each ``--upstream-allow`` in its canonical form; ValueError naming a malformed one."""
    try:
        allowed = UpstreamAllowList.parse(values)
    except InvalidInput as exc:
        raise ValueError(f"--upstream-allow: {exc.message}") from exc
    return tuple(prefix.url for prefix in allowed.prefixes)


def parse_public_url(url: str | None) -> str | None:
    """An http(s) URL without a trailing slash, or ``None``."""
    if url is None or not url.strip():
        return None
    parsed = urlsplit(url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.query:
        raise ValueError(f"--public-url must be an http:// or https:// URL, not {url!r}")
    return url.strip().rstrip("/")


def _tcp_socket(listen: str) -> socket.socket:
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this: a response's headers and body leave at once instead
    # of the body waiting ~40 ms for the client's delayed ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _control_socket(path: str) -> socket.socket:
    """A Unix socket only the owner of the state directory can open (0600 from the start)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(previous)
    os.chmod(path, 0o600)
    sock.listen(256)
    sock.setblocking(False)
    return sock


def _refused_response(reason: str) -> bytes:
    """An HTTP 403 in the contract's error shape, for a peer the control socket refuses."""
    error = PermissionDenied(reason, details={"socket": "control"})
    body = json.dumps(envelope(error)).encode()
    head = (
        "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


REFUSED_LINGER_SECONDS = 2.0
"""How long a refused peer may take to read its 403 before its connection is closed."""


class PeerCheckedProtocol(CoalescedHTTPProtocol):
    """Uvicorn's HTTP protocol for the control socket: a connection whose peer is refused
    (:mod:`ficc.adapters.control_socket`) gets a 403 and is closed before a byte is read."""

    _refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        reason = control_socket.refusal(control_socket.peer_of(sock))
        if reason is None:
            super().connection_made(transport)
            return
        self._refused = True
        log.warning("control socket peer refused", extra={"reason": reason})
        # uvloop's transports are not asyncio.Transport instances (an assert here failed
        # there, and the refused peer waited for an answer that never came).
        transport = cast(asyncio.Transport, transport)
        transport.write(_refused_response(reason))
        # Half-close, then read and drop what the peer sent: closing with its request unread
        # would reset the connection and lose the answer. It is closed soon whatever the peer does.
        transport.write_eof()
        asyncio.get_running_loop().call_later(REFUSED_LINGER_SECONDS, transport.close)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._refused:
            super().connection_lost(exc)


def _uvicorn_config(app: ASGIApp, http: type[asyncio.Protocol] | None = None) -> uvicorn.Config:
    """Uvicorn's own records go to FICC's handler (``log_config=None``); FICC logs access.

    No proxy header is believed (``proxy_headers=False``): a local process could otherwise
    choose its apparent address and escape the per-address login limits. Behind a TLS proxy,
    ``--public-url https://...`` makes the session cookie ``Secure``.
    """
    return uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,
        access_log=False,
        proxy_headers=False,
        http=http or CoalescedHTTPProtocol,
    )


async def serve(settings: Settings, options: ServeOptions | None = None) -> None:
    """Serve until SIGTERM or SIGINT. With a lease (PostgreSQL), a process another holds the
    lease of serves health as the standby until it takes the lease over; one that loses the
    lease stops at once and raises NotActive (its service manager starts it again, standby)."""
    options = options or ServeOptions()
    cluster = await open_cluster(settings)
    tcp = _tcp_socket(settings.listen)
    host, port = tcp.getsockname()[:2]
    shown_host = f"[{host}]" if ":" in host else host
    listen_url = f"http://{shown_host}:{port}"
    cluster.public_url = options.public_url or listen_url
    app = create_app(cluster)
    http_server = _Server(_uvicorn_config(app))
    socket_server = _Server(_uvicorn_config(LocalOwnerApp(app), http=PeerCheckedProtocol))
    loop = asyncio.get_running_loop()

    def stop() -> None:
        http_server.should_exit = True
        socket_server.should_exit = True

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop)
    tasks: list[asyncio.Task[None]] = []
    watcher: asyncio.Task[None] | None = None
    owns_files = False
    try:
        if cluster.lease is None:
            await lifecycle.start(cluster)
            tasks.append(asyncio.create_task(http_server.serve(sockets=[tcp])))
        else:
            # The standby answers /livez and /readyz (503, standby) while it waits.
            tasks.append(asyncio.create_task(http_server.serve(sockets=[tcp])))
            if not await _until_active(cluster, listen_url, tasks[0]):
                await asyncio.gather(*tasks)
                return
            await lifecycle.start(cluster)
            watcher = asyncio.create_task(_stop_when_lost(cluster, stop))
        # The control socket and server.json are the active process's: the CLI reaches it.
        control = _control_socket(str(cluster.state.socket))
        owns_files = True
        tasks.append(asyncio.create_task(socket_server.serve(sockets=[control])))
        while not (http_server.started and socket_server.started):
            if any(task.done() for task in tasks):
                break
            await asyncio.sleep(0.01)
        else:
            cluster.state.write_server_json({"url": listen_url, "pid": os.getpid()})
            print(f"FICC {cluster.label} serving on {listen_url}", flush=True)
            log.info(
                "serving",
                extra={"url": listen_url, "public_url": cluster.public_url, "label": cluster.label},
            )
            print(
                f"Log in: run `ficc login-link --state-dir {settings.state_dir}` and open the "
                f"link, or use the token in {cluster.state.owner_token}",
                flush=True,
            )
        await asyncio.gather(*tasks)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        for task in [*tasks, *([] if watcher is None else [watcher])]:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await shutdown(cluster, owns_files=owns_files)
    if cluster.lease is not None and cluster.lease.fenced and cluster.lease.lost.is_set():
        raise NotActive("this FICC process lost the active lease to another and stopped")


async def _until_active(cluster: Cluster, listen_url: str, http: asyncio.Task[None]) -> bool:
    """Take the lease, waiting as the standby while another holds it; False when the process
    is told to stop first."""
    lease = cluster.lease
    assert lease is not None
    if await lease.try_acquire():
        return True
    print(f"FICC {cluster.label} standing by on {listen_url}", flush=True)
    log.info("standing by", extra={"url": listen_url, "holder": lease.holder})
    taking = asyncio.create_task(lifecycle.take_lease(cluster))
    await asyncio.wait({taking, http}, return_when=asyncio.FIRST_COMPLETED)
    if not taking.done():
        taking.cancel()
        await asyncio.gather(taking, return_exceptions=True)
        return False
    taking.result()
    log.info("took over as the active process", extra={"epoch": lease.epoch})
    return True


async def _stop_when_lost(cluster: Cluster, stop: Callable[[], None]) -> None:
    assert cluster.lease is not None
    await cluster.lease.lost.wait()
    log.error("lost the active lease: stopping without another effect")
    stop()


async def shutdown(cluster: Cluster, *, owns_files: bool = True) -> None:
    """Close the cluster; server.json and the control socket go only if still this
    process's (a standby that took over has made its own)."""
    fenced = cluster.lease is not None and cluster.lease.fenced and cluster.lease.lost.is_set()
    info = cluster.state.read_server_json()
    if owns_files and not fenced and (info is None or info.get("pid") == os.getpid()):
        for path in (cluster.state.server_json, cluster.state.socket):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    await lifecycle.close(cluster)
