"""G1: the control socket lets in only FICC's CLI user, never an engine.

Real processes connect to a real uvicorn server on a UNIX socket served with the control
socket's protocol (``PeerCheckedProtocol``); the kernel's ``SO_PEERCRED`` says who they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import uvloop
from starlette.types import Receive, Scope, Send

from ficc.adapters import control_socket
from ficc.adapters.runtimes.processes import EngineProcess
from ficc.cli.serve import PeerCheckedProtocol, _Server, _uvicorn_config

ASK = """
import ctypes, socket, sys
if sys.argv[2] == "user-namespace":  # as a sandboxed engine is: FICC's user outside
    assert ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(20)  # a server that never answers fails the test, never hangs it
sock.connect(sys.argv[1])
sock.sendall(b"GET /api/v1/session HTTP/1.1\\r\\nhost: ficc\\r\\nconnection: close\\r\\n\\r\\n")
answer = b""
while chunk := sock.recv(65536):
    answer += chunk
print(answer.decode())
"""


async def owner_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Stands in for FICC's app: every request it sees would be the local owner's."""
    assert scope["type"] == "http"
    body = b'{"local_owner": true}'
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[Path]:
    async with control_socket_served(tmp_path) as path:
        yield path


@contextlib.asynccontextmanager
async def control_socket_served(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "ficc.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen()
    sock.setblocking(False)
    server = _Server(_uvicorn_config(owner_app, http=PeerCheckedProtocol))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 (uvicorn offers no event; as serve.py waits)
        await asyncio.sleep(0.01)
    yield path
    server.should_exit = True
    await task


async def ask(path: Path, how: str, tmp_path: Path) -> tuple[int, dict[str, object]]:
    """Run a client process (``how``: plain, user-namespace, engine) and return its answer."""
    command = [sys.executable, "-c", ASK, str(path), how]
    log = tmp_path / f"{how}.out"
    if how == "engine":  # launched as FICC launches an engine (recorded as one)
        process = await EngineProcess.spawn(command, log_path=log, env=dict(os.environ))
        await process.wait()
        process.close()
        output = log.read_bytes().decode()
    else:
        child = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE)
        output = (await child.communicate())[0].decode()
    head, _, body = output.partition("\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def test_the_control_socket_serves_ficcs_own_user(control: Path, tmp_path: Path) -> None:
    assert await ask(control, "plain", tmp_path) == (200, {"local_owner": True})


@pytest.mark.parametrize("how", ["user-namespace", "engine"])
async def test_the_control_socket_refuses_an_engine(
    control: Path, tmp_path: Path, how: str
) -> None:
    """An engine in its user namespace (FICC's UID outside), or any process FICC launched as
    an engine, gets 403 in the contract's shape; the app never sees the request."""
    status, body = await ask(control, how, tmp_path)
    assert status == 403
    error = body["error"]
    assert isinstance(error, dict)
    assert error["code"] == "forbidden"
    assert "engine" in error["message"]
    assert error["details"] == {"socket": "control"}


@pytest.mark.parametrize(("how", "status"), [("plain", 200), ("user-namespace", 403)])
def test_the_control_socket_answers_on_uvloop(tmp_path: Path, how: str, status: int) -> None:
    """`ficc serve` runs on uvloop, whose transports are not ``asyncio.Transport``s: the
    refusal and the coalesced writes work on them too."""

    async def asked() -> tuple[int, dict[str, object]]:
        async with control_socket_served(tmp_path) as path:
            return await ask(path, how, tmp_path)

    # In a thread of its own: a loop left with a connection nobody serves never closes.
    answers: list[tuple[int, dict[str, object]]] = []
    thread = threading.Thread(target=lambda: answers.append(uvloop.run(asked())), daemon=True)
    thread.start()
    thread.join(60)
    assert [status for status, _ in answers] == [status]


def test_the_control_socket_refuses_another_user() -> None:
    me = control_socket.Peer(pid=os.getpid(), uid=os.geteuid(), gid=os.getegid())
    assert control_socket.refusal(me) is None
    stranger = control_socket.Peer(pid=os.getpid(), uid=os.geteuid() + 4242, gid=os.getegid())
    assert (
        control_socket.refusal(stranger) == "the control socket serves only the user FICC runs as"
    )
