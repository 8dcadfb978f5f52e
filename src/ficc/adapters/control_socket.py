"""Who is on the other end of the control socket: only FICC's CLI user, never an engine.

Every request on ``D/ficc.sock`` is the local owner's, so the socket checks its peer's
credentials (``SO_PEERCRED``) when a connection arrives, before any byte is read. It refuses a
peer of another user (root excepted: the machine's administrator), a peer in a user namespace
below FICC's (where FICC's sandbox puts every engine: such a process maps to FICC's user
outside, so the user check alone would let it in), and an engine FICC launched or any
descendant of one. The 0600 mode stays; an engine does not even see the socket (its mount
namespace hides the state directory): this check holds where that does not.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import struct
from dataclasses import dataclass
from typing import Final

from ficc.adapters.runtimes.processes import launched_engine_of

NS_GET_PARENT: Final = 0xB702
"""``_IO(0xb7, 0x2)``: the parent of a namespace, as a new file descriptor."""
MAX_NAMESPACE_DEPTH: Final = 33
"""User namespaces nest at most 32 deep."""


@dataclass(frozen=True)
class Peer:
    """The process that connected, as the kernel recorded it at ``connect``."""

    pid: int
    uid: int
    gid: int


def peer_of(sock: socket.socket) -> Peer:
    """The connecting process's pid, uid and gid (``SO_PEERCRED``)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return Peer(pid=pid, uid=uid, gid=gid)


def _user_namespace(fd: int) -> tuple[int, int]:
    stat = os.fstat(fd)
    return stat.st_dev, stat.st_ino


def in_user_namespace_below_ours(pid: int) -> bool:
    """Whether ``pid`` lives in a user namespace nested (at any depth) in this process's own.

    True also when its namespace cannot be read: a peer FICC cannot inspect is not let in."""
    ours = os.open("/proc/self/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    try:
        own = _user_namespace(ours)
    finally:
        os.close(ours)
    try:
        current = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        if _user_namespace(current) == own:
            return False
        for _ in range(MAX_NAMESPACE_DEPTH):
            try:
                parent = fcntl.ioctl(current, NS_GET_PARENT)
            except OSError:  # no parent visible from here: an ancestor or another tree
                return False
            os.close(current)
            current = parent
            if _user_namespace(current) == own:
                return True
        return False
    finally:
        with contextlib.suppress(OSError):
            os.close(current)


def refusal(peer: Peer) -> str | None:
    """Why ``peer`` may not act as the local owner; None for FICC's own CLI user."""
    if peer.uid not in {os.geteuid(), 0}:
        return "the control socket serves only the user FICC runs as"
    if in_user_namespace_below_ours(peer.pid):
        return "the control socket serves no engine (nor any process FICC's sandbox confines)"
    if launched_engine_of(peer.pid) is not None:
        return "the control socket serves no engine FICC launched, nor its children"
    return None
