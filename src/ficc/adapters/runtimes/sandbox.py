"""``python -I sandbox.py [--hide DIR]... [--reveal FILE]... [--network private|shared]
[--mode namespaces|landlock] -- COMMAND...``: run an engine where FICC does not exist for it.

An engine parses model files that may come from a peer; an exploit in its parser must reach
nothing of FICC's. This launcher puts the engine in namespaces of its own before it execs it:

- a **user namespace** (FICC's user mapped to itself, every capability dropped before the exec,
  no new privileges) that owns
- a **mount namespace** where the state directory, ``/tmp``, ``/run`` and ``/dev/shm`` are
  empty tmpfs (so ``ficc.sock``, ``owner.token``, ``cluster.key``, the database, other
  programs' sockets do not exist), with only the model file bound back, read-only, at its path;
- a **PID namespace** (FICC's process is not there to be signalled, nor its ``/proc`` read);
- an **IPC** and **UTS** namespace, and, for an engine that serves on a socket FICC bound and
  handed over, a **network namespace** with no interface up: no TCP connect, no UDP, no
  abstract UNIX socket of the host;
- a Landlock scope (ABI 6+): no signal and no abstract UNIX socket outside the engine's domain;
- a seccomp filter: no IPv4 or IPv6 datagram socket (no UDP, the one way out Landlock does not
  cover for an engine that shares the network) and no io_uring (which opens sockets past it).

The engine runs as this process's child, the init of its PID namespace, in a fresh empty
working directory; this process relays signals to it, waits, and ends as it ended (the same
exit status or signal), so FICC supervises it by this process's pid and start time. The
engine dies with it (parent-death signal). ``--mode landlock`` (``FICC_ENGINE_SANDBOX=landlock``,
for a machine without namespaces) keeps only the Landlock scope, the dropped capabilities and the
working directory. Run by path with ``-I``: FICC's directory of origin never reaches sys.path.
The kernel calls are in ``confinement.py`` and the Landlock ones in ``landlock.py``, both
loaded by their paths.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import importlib.util
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Final

HIDDEN_ALWAYS: Final = ("/tmp", "/run", "/dev/shm", "/var/tmp")  # noqa: S108 (hidden, not used)
"""Shared scratch and socket directories (other programs' UNIX sockets live there): empty."""
RELAYED_SIGNALS: Final = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
REFUSED_EXIT: Final = 126
"""The exit status when the engine cannot be confined (its reason is the log's last line)."""
OPT_OUT: Final = "FICC_ENGINE_SANDBOX=landlock"
SANDBOX_VARIABLE: Final = "FICC_ENGINE_SANDBOX"
PROBE_SECONDS: Final = 30.0
LAUNCHER: Final = Path(__file__).resolve()


def running_code() -> list[Path]:
    """What the engine needs of this machine to run at all: the interpreter's installation
    (a venv's and its base's) and FICC's package (a checkout's ``src/ficc``), wherever they
    are; a hidden directory (/tmp) that holds them has them bound back, read-only."""
    places = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    places.add(os.path.dirname(os.path.realpath(sys.executable)))
    places.add(str(LAUNCHER.parents[2]))  # the ficc package this launcher belongs to
    return sorted(Path(os.path.realpath(place)) for place in places)


def _sibling(name: str) -> ModuleType:
    """A stdlib-only module beside this file, loaded by its path: this FICC's, without
    importing the package (and all FICC imports with it) into every engine."""
    spec = importlib.util.spec_from_file_location(f"ficc_{name}", LAUNCHER.with_name(f"{name}.py"))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _kernel() -> ModuleType:
    """``confinement.py``: the namespace, mount, capability and seccomp calls."""
    return _sibling("confinement")


def _engine(libc: ctypes.CDLL, argv: Sequence[str]) -> None:
    """In the engine's process: no capabilities, the Landlock scope, then the engine itself."""
    libc.prctl(_kernel().PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    for signum in RELAYED_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    _kernel().drop_capabilities(libc)
    # The Landlock scope (ABI 6+): signals and abstract sockets stay inside the domain.
    _sibling("landlock").restrict_scope()
    _kernel().deny_datagrams(libc)
    os.execvp(argv[0], list(argv))  # noqa: S606 (the engine's own command line)


def _init(
    libc: ctypes.CDLL, argv: Sequence[str], work: str, status_fd: int, *, new_proc: bool
) -> None:
    """The PID namespace's init: its /proc, the engine's working directory, then the engine as
    its child (an init ignores signals it has no handler for, and uvicorn ends by raising the
    one it caught); relays signals to it, reaps orphans, and reports its wait status."""
    libc.prctl(_kernel().PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if new_proc:
        kernel = _kernel()
        flags = kernel.MS_NOSUID | kernel.MS_NODEV | kernel.MS_NOEXEC
        kernel.mount(libc, "proc", "/proc", "proc", flags)
    os.chdir(work)
    engine = os.fork()
    if engine == 0:
        os.close(status_fd)
        try:
            _engine(libc, argv)
        except BaseException as exc:  # noqa: BLE001 (a forked child must never return)
            print(f"ERROR:    the engine could not start confined: {exc}", file=sys.stderr)
        os._exit(REFUSED_EXIT)
    status = _relay(engine)
    os.write(status_fd, struct.pack("=i", status))
    os._exit(0)


def _relay(pid: int) -> int:
    """Pass termination signals on to ``pid``, reap every child (an init inherits orphans)
    until it ends, and return its wait status."""

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in RELAYED_SIGNALS:
        signal.signal(signum, forward)
    while True:
        ended, status = os.waitpid(-1, 0)
        if ended == pid:
            return status


def _end_as(status: int) -> None:
    """End this process as the engine ended: its exit status, or the signal that killed it."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status))


def run(
    argv: Sequence[str],
    *,
    hide: Sequence[Path],
    reveal: Sequence[Path],
    private_network: bool,
    namespaces: bool,
) -> None:
    """Confine, start the engine, relay, end as it ended; ``SandboxError`` (of
    ``confinement.py``) if it cannot be."""
    kernel = _kernel()
    libc = kernel.libc()
    if not namespaces:
        print(
            f"WARNING:  {SANDBOX_VARIABLE}=landlock: the engine shares FICC's user, files, "
            "processes and network, confined by Landlock only",
            file=sys.stderr,
            flush=True,
        )
    else:
        kernel.enter_namespaces(libc, private_network=private_network)
        kernel.hide_and_reveal(
            libc, [*map(Path, HIDDEN_ALWAYS), *hide], reveal, keep=running_code()
        )
    kernel.check(libc.prctl(kernel.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    # In the engine's own /tmp (an empty tmpfs) when hidden; removed when the engine ends.
    work = tempfile.mkdtemp(prefix="engine-", dir="/tmp" if namespaces else None)  # noqa: S108
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(readable)
        try:
            _init(libc, argv, work, writable, new_proc=namespaces)
        except BaseException as exc:  # noqa: BLE001 (a forked child must never return)
            print(f"ERROR:    the engine could not start confined: {exc}", file=sys.stderr)
        os._exit(REFUSED_EXIT)
    os.close(writable)
    status = _relay(pid)
    reported = os.read(readable, 4)
    shutil.rmtree(work, ignore_errors=True)
    _end_as(struct.unpack("=i", reported)[0] if len(reported) == 4 else status)


@dataclass(frozen=True)
class EngineSandbox:
    """How FICC confines the engines it launches: what it hides, and whether namespaces are used
    (``FICC_ENGINE_SANDBOX=landlock`` opts out, for machines without them)."""

    hide: tuple[Path, ...] = ()
    namespaces: bool = True

    @classmethod
    def from_environment(cls, hide: Sequence[Path]) -> EngineSandbox:
        """``FICC_ENGINE_SANDBOX``: ``namespaces`` (the default) or ``landlock``."""
        mode = os.environ.get(SANDBOX_VARIABLE, "").strip() or "namespaces"
        if mode not in ("namespaces", "landlock"):
            raise ValueError(f"{SANDBOX_VARIABLE} must be namespaces or landlock, not {mode!r}")
        return cls(hide=tuple(hide), namespaces=mode == "namespaces")

    def with_hidden(self, *paths: Path) -> EngineSandbox:
        """This sandbox, hiding ``paths`` too."""
        return replace(self, hide=(*self.hide, *paths))

    def command(
        self,
        argv: Sequence[str],
        *,
        reveal: Sequence[Path],
        private_network: bool,
        python: str = sys.executable,
    ) -> list[str]:
        """``argv`` run confined: the launcher's command line (run by path, isolated)."""
        flags = [f"--hide={path}" for path in self.hide]
        flags += [f"--reveal={path}" for path in reveal]
        flags.append(f"--network={'private' if private_network else 'shared'}")
        flags.append(f"--mode={'namespaces' if self.namespaces else 'landlock'}")
        return [python, "-I", str(LAUNCHER), *flags, "--", *argv]

    def refusal(self, python: str = sys.executable) -> str | None:
        """Why this machine cannot confine engines so (None: it can); tried once per process."""
        return _probe(self.namespaces, python)


@functools.cache
def _probe(namespaces: bool, python: str) -> str | None:
    trial = EngineSandbox(namespaces=namespaces)
    try:
        ran = subprocess.run(
            trial.command([python, "-I", "-c", ""], reveal=(), private_network=True, python=python),
            capture_output=True,
            text=True,
            timeout=PROBE_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the engine sandbox did not start ({exc})"
    if ran.returncode == 0:
        return None
    lines = ran.stderr.strip().splitlines() or [f"the engine sandbox exited {ran.returncode}"]
    return lines[-1].removeprefix("ERROR:").strip()


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sandbox")
    parser.add_argument("--hide", action="append", type=Path, default=[])
    parser.add_argument("--reveal", action="append", type=Path, default=[])
    parser.add_argument("--network", choices=("private", "shared"), default="private")
    parser.add_argument("--mode", choices=("namespaces", "landlock"), default="namespaces")
    parser.add_argument("command", nargs="+")
    options = parser.parse_args(arguments)
    try:
        run(
            options.command,
            hide=options.hide,
            reveal=options.reveal,
            private_network=options.network == "private",
            namespaces=options.mode == "namespaces",
        )
    except (_kernel().SandboxError, OSError) as exc:
        print(
            f"ERROR:    the engine cannot be confined on this machine ({exc}); {OPT_OUT} "
            "runs it with Landlock only",
            file=sys.stderr,
            flush=True,
        )
        return REFUSED_EXIT
    return 0  # not reached: run ends the process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
