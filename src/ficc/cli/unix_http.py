"""HTTP/1.1 over a Unix socket with the standard library, for the control socket."""

from __future__ import annotations

import http.client
import socket
from pathlib import Path


class UnixConnection(http.client.HTTPConnection):
    """An HTTP/1.1 connection to the server's Unix control socket."""

    def __init__(self, path: Path, timeout: float | None) -> None:
        super().__init__("ficc.socket", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.socket_path))
        except BaseException:
            sock.close()
            raise
        self.sock = sock
