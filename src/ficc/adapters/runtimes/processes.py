"""Engine processes: launch in their own process group, end them, and fence left-overs.

A process is named by its pid *and* its start time, and signalled through a pidfd opened before
that start time is checked, so a pid the kernel gave to another process is never signalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from ficc.services.ports.runtimes import (
    DEFAULT_LOG_TAIL_LINES,
    FenceResult,
    ProcessIdentity,
    ReplicaExit,
)

LOG_TAIL_BYTES: Final = 64 * 1024
KILL_WAIT_SECONDS: Final = 5.0
"""How long to wait for the kernel to end a process after SIGKILL."""

ENV_PASSED: Final = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "LD_LIBRARY_PATH")
"""The environment an engine inherits; the rest is dropped because llama.cpp's server reads its
settings (API key, host, port…) from same-named variables."""


def read_start_ticks(pid: int) -> int | None:
    """Field 22 of ``/proc/PID/stat`` (start time in clock ticks); None if there is no process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def parent_pid(pid: int) -> int | None:
    """Field 4 of ``/proc/PID/stat``; None if there is no process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


_LAUNCHED: dict[int, int] = {}
"""pid → start ticks of every engine this process launched and has not yet reaped."""
MAX_ANCESTRY: Final = 64


def launched_engine_of(pid: int) -> int | None:
    """The engine this process launched that ``pid`` is, or descends from; None if none.

    (A descendant that left its engine's tree, a daemon re-parented to init, is not seen: the
    engine's namespaces are what keep it from FICC.)"""
    current: int | None = pid
    for _ in range(MAX_ANCESTRY):
        if current is None or current <= 1:
            return None
        ticks = _LAUNCHED.get(current)
        if ticks is not None and read_start_ticks(current) == ticks:
            return current
        current = parent_pid(current)
    return None


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat[stat.rindex(")") + 2 :].split()[0] in {"Z", "X"}


def process_identity(pid: int) -> ProcessIdentity:
    """The identity of a running process; ProcessLookupError if it is gone."""
    ticks = read_start_ticks(pid)
    if ticks is None:
        raise ProcessLookupError(pid)
    return ProcessIdentity(pid=pid, start_ticks=ticks)


def bound_loopback_socket() -> socket.socket:
    """A TCP socket bound to a free port of 127.0.0.1, not yet listening, for an engine to
    inherit: the port is held from now on, and connections are refused until the engine
    listens (so a health check fails fast rather than waiting in a backlog)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
    except OSError:
        sock.close()
        raise
    return sock


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 now (another program may take it before the engine does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tail_lines(path: Path | None, lines: int = DEFAULT_LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of a log file, read from its end only."""
    if path is None or lines <= 0:
        return []
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - LOG_TAIL_BYTES))
            text = file.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    return text.splitlines()[-lines:]


def engine_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """A small, known environment for an engine process."""
    env = {key: os.environ[key] for key in ENV_PASSED if key in os.environ}
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach the file before a crash, not after
    env["GGML_NO_BACKTRACE"] = "1"  # keep a failed assertion, not a debugger's trace, at the end
    env.update(extra)
    return env


async def _wait_readable(fd: int, timeout_seconds: float) -> bool:
    """Wait until a pidfd says its process ended; False on timeout."""
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()
    loop.add_reader(fd, ended.set)
    try:
        async with asyncio.timeout(timeout_seconds):
            await ended.wait()
        return True
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)


def _signal(pidfd: int, pid: int, signum: int) -> None:
    """Signal the process's group (an engine's workers), then the process itself.

    Called only while the process is not yet reaped, so its pid, and the group ID it leads,
    cannot belong to anyone else.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(pidfd, signum)


async def end_process(pidfd: int, pid: int, grace_seconds: float) -> None:
    """SIGTERM, then SIGKILL after ``grace_seconds``, then wait for the end (bounded)."""
    _signal(pidfd, pid, signal.SIGTERM)
    if await _wait_readable(pidfd, grace_seconds):
        return
    _signal(pidfd, pid, signal.SIGKILL)
    await _wait_readable(pidfd, KILL_WAIT_SECONDS)
    await _group_gone(pid, KILL_WAIT_SECONDS)


async def _group_gone(pgid: int, timeout_seconds: float) -> None:
    """Wait (bounded) until no process of the group ``pgid`` is left: SIGKILL ends the
    sandbox's launcher at once, while the init of the engine's PID namespace is still ending
    the engine and its workers. The group's ID cannot be taken by another process while any
    member lives."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds
    while loop.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        await asyncio.sleep(0.01)


async def fence(process: ProcessIdentity, grace_seconds: float) -> FenceResult:
    """End an earlier attempt's process, but only if pid *and* start time still match."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except ProcessLookupError:
        return FenceResult.ABSENT
    try:
        # Checked after the pidfd is open: the pidfd names the process that had this start time.
        ticks = read_start_ticks(process.pid)
        if ticks is None:
            return FenceResult.ABSENT
        if ticks != process.start_ticks:
            return FenceResult.PID_REUSED
        if _is_zombie(process.pid):
            return FenceResult.ABSENT
        await end_process(pidfd, process.pid, grace_seconds)
        return FenceResult.KILLED
    finally:
        os.close(pidfd)


class EngineProcess:
    """One engine launched by this FICC process: its identity, its log and its end."""

    def __init__(
        self, process: asyncio.subprocess.Process, pidfd: int, identity: ProcessIdentity, log: Path
    ) -> None:
        self._process = process
        self._pidfd = pidfd
        self._stopping = asyncio.Lock()
        self.identity = identity
        self.log_path = log
        self.stop_requested = False

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str],
        pass_fds: Sequence[int] = (),
    ) -> EngineProcess:
        """Start ``argv`` in a new session (its own process group), output appended to the log;
        ``pass_fds`` stay open in the child under the same numbers."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=dict(env),
                start_new_session=True,
                pass_fds=tuple(pass_fds),
            )
        # Opened before the child can have been reaped: it names this very process from now on.
        try:
            pidfd = os.pidfd_open(process.pid)
        except ProcessLookupError:  # ended and reaped already: nothing left to signal
            pidfd = -1
        ticks = read_start_ticks(process.pid)
        identity = ProcessIdentity(process.pid, ticks if ticks is not None else -1)
        _LAUNCHED[identity.pid] = identity.start_ticks
        return cls(process, pidfd, identity, log_path)

    @property
    def returncode(self) -> int | None:
        """The exit status once the process ended (negative: the signal that ended it)."""
        return self._process.returncode

    async def wait(self) -> ReplicaExit:
        """Return when the process ends; ``crashed`` unless a stop was asked for first."""
        code = await self._process.wait()
        _LAUNCHED.pop(self.identity.pid, None)
        return self.exit_info(code)

    def exit_info(self, code: int) -> ReplicaExit:
        """How the process ended, with the last lines of its log."""
        return ReplicaExit(
            crashed=not self.stop_requested,
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            log_tail=tuple(tail_lines(self.log_path)),
        )

    async def stop(self, grace_seconds: float) -> ReplicaExit:
        """End the process (and its group); repeated or concurrent calls wait for the same end."""
        async with self._stopping:
            if self._process.returncode is None and self._pidfd >= 0:
                self.stop_requested = True
                await end_process(self._pidfd, self.identity.pid, grace_seconds)
            exit_info = await self.wait()
            self.close()
            return exit_info

    def close(self) -> None:
        """Release the pidfd; the process must not be signalled afterwards."""
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
