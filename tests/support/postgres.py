"""A real PostgreSQL server for tests: Debian's binaries, a temporary directory, a loopback port.

One server serves a whole test session; each user of it gets its own database. A missing
PostgreSQL is an error, never a skip (``scripts/ensure-postgres`` installs it).
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "postgres"
# Durability is not under test: a server that never syncs starts and migrates much faster.
SERVER_OPTIONS = (
    "-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={sockets} "
    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
)
_names = itertools.count(1)


def binaries() -> Path:
    """The newest installed PostgreSQL's bin directory."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major_version)
    if not found:
        raise RuntimeError(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb); "
            "run scripts/ensure-postgres"
        )
    return Path(found[-1]).parent


def _major_version(initdb: str) -> int:
    return int(Path(initdb).parent.parent.name)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresServer:
    """A running server; ``database()`` makes a fresh, empty database and returns its URL."""

    root: Path
    port: int
    bin: Path
    as_user: tuple[str, ...]

    def _run(self, *command: str) -> None:
        subprocess.run(
            [*self.as_user, *command], check=True, capture_output=True, text=True, timeout=60
        )

    def database(self, prefix: str = "ficc", *, template: str | None = None) -> str:
        """A new database; with ``template`` (a URL this server gave), a copy of that one, made
        much faster than migrating anew (nothing may be connected to the template)."""
        name = f"{prefix}_{next(_names)}"
        copy = [] if template is None else ["-T", template.rpartition("/")[2]]
        self._run(
            str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
            "-U", SUPERUSER, *copy, name,
        )  # fmt: skip
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        subprocess.run(
            [*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.root / "data"),
             "-m", "immediate", "-w", "stop"],
            check=False, capture_output=True, timeout=60,
        )  # fmt: skip
        shutil.rmtree(self.root, ignore_errors=True)


def start_postgres() -> PostgresServer:
    """initdb and start a server in a new temporary directory; as root, as ``postgres``.

    The directory is made directly in the system's temporary folder: pytest's own are private
    to the user running the tests, and the server's user must reach its files.
    """
    bin_dir = binaries()
    root = Path(tempfile.mkdtemp(prefix="ficc-postgres-"))
    as_user: tuple[str, ...] = ()
    if os.geteuid() == 0:
        # initdb refuses to run as root; the server's files belong to the postgres user.
        shutil.chown(root, user=SUPERUSER)
        as_user = ("runuser", "-u", SUPERUSER, "--")
    port = _free_port()
    server = PostgresServer(root, port, bin_dir, as_user)
    data, log = root / "data", root / "server.log"
    try:
        server._run(
            str(bin_dir / "initdb"), "-D", str(data), "--auth=trust", "-U", SUPERUSER,
            "--no-sync", "--encoding=UTF8", "--locale=C",
        )  # fmt: skip
        server._run(
            str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
            "-o", SERVER_OPTIONS.format(port=port, sockets=root), "start",
        )  # fmt: skip
    except subprocess.CalledProcessError as exc:
        shown = log.read_text() if log.exists() else ""
        raise RuntimeError(f"PostgreSQL did not start: {exc.stderr}\n{shown}") from exc
    return server
