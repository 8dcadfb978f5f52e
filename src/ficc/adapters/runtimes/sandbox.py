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
from typing import Final

CLONE_NEWNS: Final = 0x00020000
CLONE_NEWUTS: Final = 0x04000000
CLONE_NEWIPC: Final = 0x08000000
CLONE_NEWUSER: Final = 0x10000000
CLONE_NEWPID: Final = 0x20000000
CLONE_NEWNET: Final = 0x40000000
MS_RDONLY: Final = 1
MS_NOSUID: Final = 2
MS_NODEV: Final = 4
MS_NOEXEC: Final = 8
MS_REMOUNT: Final = 32
MS_BIND: Final = 4096
MS_REC: Final = 16384
MS_PRIVATE: Final = 1 << 18
PR_SET_PDEATHSIG: Final = 1
PR_CAPBSET_DROP: Final = 24
PR_SET_NO_NEW_PRIVS: Final = 38
PR_CAP_AMBIENT: Final = 47
PR_CAP_AMBIENT_CLEAR_ALL: Final = 4
PR_SET_SECCOMP: Final = 22
SECCOMP_MODE_FILTER: Final = 2
SECCOMP_RET_ALLOW: Final = 0x7FFF0000
SECCOMP_RET_EPERM: Final = 0x00050000 | 1  # SECCOMP_RET_ERRNO with EPERM
AF_INET: Final = 2
AF_INET6: Final = 10
SOCK_DGRAM: Final = 2
SOCK_TYPE_MASK: Final = 0xF
X32_SYSCALL_BIT: Final = 0x40000000
NR_IO_URING_SETUP: Final = 425
"""io_uring_setup: one number on every architecture (the unified table, Linux 5.1 on)."""
SECCOMP_ARCHES: Final = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}
"""The audit architecture and the number of socket(2), per machine FICC runs engines on."""

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
LANDLOCK_MODULE: Final = LAUNCHER.with_name("landlock.py")


class SandboxError(Exception):
    """The engine cannot be confined as asked."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(errno)}")


def _mount(
    libc: ctypes.CDLL,
    source: str | None,
    target: str,
    kind: str | None,
    flags: int,
    data: str | None = None,
) -> None:
    _check(
        libc.mount(
            None if source is None else source.encode(),
            target.encode(),
            None if kind is None else kind.encode(),
            ctypes.c_ulong(flags),
            None if data is None else data.encode(),
        ),
        f"mount {kind or source} on {target}",
    )


def _write(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)


def _enter_namespaces(libc: ctypes.CDLL, *, private_network: bool) -> None:
    """A user namespace mapping this user to itself, owning mount, PID, IPC, UTS (and network)
    namespaces."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    if private_network:
        flags |= CLONE_NEWNET
    _check(libc.unshare(ctypes.c_int(flags)), "unshare (user, mount, PID namespaces)")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _hide_and_reveal(libc: ctypes.CDLL, hide: Sequence[Path], reveal: Sequence[Path]) -> None:
    """Empty tmpfs over each hidden directory, then each revealed file bound back, read-only."""
    held = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path in reveal if path.exists()]
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the host
    for directory in sorted(
        {Path(os.path.realpath(path)) for path in hide}, key=lambda p: len(p.parts)
    ):
        if directory.is_dir():  # below a directory hidden already: it is gone
            _mount(libc, "tmpfs", str(directory), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
    for path, fd in held:
        try:
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
                _mount(libc, f"/proc/self/fd/{fd}", str(path), None, MS_BIND)
                _mount(
                    libc,
                    None,
                    str(path),
                    None,
                    MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
                )
        finally:
            os.close(fd)


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """Empty the bounding and ambient sets: the exec'd engine has no capability, even as root."""
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        last = 63
    for capability in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)  # EPERM without CAP_SETPCAP: none held


def _filter(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def datagram_filter(machine: str) -> bytes | None:
    """The seccomp program (classic BPF) refusing, with EPERM, ``socket(AF_INET|AF_INET6,
    SOCK_DGRAM…)``, ``io_uring_setup`` and, on x86-64, any x32 system call (x32 numbers bypass
    a filter written for the 64-bit ones); None for a machine it is not written for."""
    if machine not in SECCOMP_ARCHES:
        return None
    arch, nr_socket = SECCOMP_ARCHES[machine]
    ld_w_abs, jeq_k, jge_k, and_k, ret_k = 0x20, 0x15, 0x35, 0x54, 0x06
    x32 = machine == "x86_64"
    program = [
        _filter(ld_w_abs, 4),  # seccomp_data.arch
        _filter(jeq_k, arch, 1, 0),
        _filter(ret_k, SECCOMP_RET_EPERM),  # a foreign architecture: nothing at all
        _filter(ld_w_abs, 0),  # seccomp_data.nr
        _filter(jge_k, X32_SYSCALL_BIT if x32 else 0xFFFFFFFF, 8, 0),
        _filter(jeq_k, NR_IO_URING_SETUP, 7, 0),
        _filter(jeq_k, nr_socket, 0, 7),
        _filter(ld_w_abs, 16),  # args[0]: the family (low word)
        _filter(jeq_k, AF_INET, 1, 0),
        _filter(jeq_k, AF_INET6, 0, 4),
        _filter(ld_w_abs, 24),  # args[1]: the type (low word), flags masked off
        _filter(and_k, SOCK_TYPE_MASK),
        _filter(jeq_k, SOCK_DGRAM, 0, 1),
        _filter(ret_k, SECCOMP_RET_EPERM),
        _filter(ret_k, SECCOMP_RET_ALLOW),
    ]
    return b"".join(program)


def _deny_datagrams(libc: ctypes.CDLL) -> None:
    """Install :func:`datagram_filter` (no new privileges is already set); on a machine it is
    not written for, the engine's log says so."""
    program = datagram_filter(os.uname().machine)
    if program is None:
        print(
            f"WARNING:  no seccomp filter for {os.uname().machine}: UDP stays open to an engine "
            "that shares the network",
            file=sys.stderr,
            flush=True,
        )
        return
    buffer = ctypes.create_string_buffer(program, len(program))

    class Program(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))

    fprog = Program(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(
        libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
        "prctl(PR_SET_SECCOMP)",
    )


def _scope() -> None:
    """The Landlock scope (ABI 6+): signals and abstract sockets stay inside the domain.

    ``landlock.py`` is loaded by its path beside this file (stdlib only): this FICC's, without
    importing the package (and all FICC imports with it) into every engine.
    """
    spec = importlib.util.spec_from_file_location("ficc_landlock", LANDLOCK_MODULE)
    assert spec is not None
    assert spec.loader is not None
    landlock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(landlock)
    landlock.restrict_scope()


def _engine(libc: ctypes.CDLL, argv: Sequence[str]) -> None:
    """In the engine's process: no capabilities, the Landlock scope, then the engine itself."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    for signum in RELAYED_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    _drop_capabilities(libc)
    _scope()
    _deny_datagrams(libc)
    os.execvp(argv[0], list(argv))  # noqa: S606 (the engine's own command line)


def _init(
    libc: ctypes.CDLL, argv: Sequence[str], work: str, status_fd: int, *, new_proc: bool
) -> None:
    """The PID namespace's init: its /proc, the engine's working directory, then the engine as
    its child (an init ignores signals it has no handler for, and uvicorn ends by raising the
    one it caught); relays signals to it, reaps orphans, and reports its wait status."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if new_proc:
        _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
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
    """Confine, start the engine, relay, end as it ended; SandboxError if it cannot be."""
    libc = _libc()
    if not namespaces:
        print(
            f"WARNING:  {SANDBOX_VARIABLE}=landlock: the engine shares FICC's user, files, "
            "processes and network, confined by Landlock only",
            file=sys.stderr,
            flush=True,
        )
    else:
        _enter_namespaces(libc, private_network=private_network)
        _hide_and_reveal(libc, [*map(Path, HIDDEN_ALWAYS), *hide], reveal)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
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
    except (SandboxError, OSError) as exc:
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
