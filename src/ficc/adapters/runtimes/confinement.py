"""The kernel calls that confine an engine: namespaces, mounts, capabilities, seccomp.

Standard library only: the launcher (``sandbox.py``, run by path with ``python -I``) loads this
file by its path, so no FICC import reaches the process that becomes the engine.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from collections.abc import Sequence
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


class SandboxError(Exception):
    """The engine cannot be confined as asked."""


def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(errno)}")


def mount(
    libc: ctypes.CDLL,
    source: str | None,
    target: str,
    kind: str | None,
    flags: int,
    data: str | None = None,
) -> None:
    check(
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


def enter_namespaces(libc: ctypes.CDLL, *, private_network: bool) -> None:
    """A user namespace mapping this user to itself, owning mount, PID, IPC, UTS (and network)
    namespaces."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    if private_network:
        flags |= CLONE_NEWNET
    check(libc.unshare(ctypes.c_int(flags)), "unshare (user, mount, PID namespaces)")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def hide_and_reveal(
    libc: ctypes.CDLL,
    hide: Sequence[Path],
    reveal: Sequence[Path],
    keep: Sequence[Path] = (),
) -> None:
    """Empty tmpfs over each hidden directory; then each directory of ``keep`` that a hidden
    one covered bound back, read-only (the interpreter and FICC's code: a checkout or a venv
    under /tmp must still run), with the hidden directories inside it hidden again; then each
    revealed file bound back, read-only."""
    held = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path in reveal if path.exists()]
    kept = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path in keep if path.is_dir()]
    mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the host
    hidden = sorted({Path(os.path.realpath(path)) for path in hide}, key=lambda p: len(p.parts))
    for directory in hidden:
        if directory.is_dir():  # below a directory hidden already: it is gone
            mount(libc, "tmpfs", str(directory), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
    try:
        for path, fd in kept:
            if not path.exists():
                path.mkdir(parents=True)
                _bind_read_only(libc, fd, path, MS_REC)
    finally:
        for _, fd in kept:
            os.close(fd)
    if kept:
        for directory in hidden:  # inside a directory bound back: hidden again
            if directory.is_dir() and any(directory.is_relative_to(p) for p, _ in kept):
                mount(libc, "tmpfs", str(directory), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
    for path, fd in held:
        try:
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
                _bind_read_only(libc, fd, path, 0)
        finally:
            os.close(fd)


def _bind_read_only(libc: ctypes.CDLL, fd: int, path: Path, flags: int) -> None:
    mount(libc, f"/proc/self/fd/{fd}", str(path), None, MS_BIND | flags)
    mount(libc, None, str(path), None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def drop_capabilities(libc: ctypes.CDLL) -> None:
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


def deny_datagrams(libc: ctypes.CDLL) -> None:
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
    check(
        libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
        "prctl(PR_SET_SECCOMP)",
    )
