"""Landlock: an engine process confines itself to the files it needs before it reads a model.

An engine parses model files that may come from a peer; an exploit in its parser must not reach
FICC's state directory (cluster key, owner token, control socket, database). Linux's Landlock
(an unprivileged sandbox, 5.13+) lets a process give up every file access but those it lists,
for itself and its children, irrevocably. Where the kernel lacks it, nothing is confined and the
caller is told (the engine still runs as FICC's user, as before).
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Final

_SYSCALLS: Final = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
"""landlock_create_ruleset, landlock_add_rule, landlock_restrict_self."""
_CREATE_RULESET_VERSION: Final = 1
_RULE_PATH_BENEATH: Final = 1
_PR_SET_NO_NEW_PRIVS: Final = 38

EXECUTE: Final = 1 << 0
WRITE_FILE: Final = 1 << 1
READ_FILE: Final = 1 << 2
READ_DIR: Final = 1 << 3
_TRUNCATE: Final = 1 << 14
_IOCTL_DEV: Final = 1 << 15
_FILE_RIGHTS: Final = EXECUTE | WRITE_FILE | READ_FILE | _TRUNCATE | _IOCTL_DEV
"""The rights a rule on a single file (not a directory) may carry."""
_NET_BIND_TCP: Final = 1 << 0
_NET_CONNECT_TCP: Final = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0
SCOPE_SIGNAL: Final = 1 << 1
_SCOPES: Final = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
"""ABI 6: no signal to, and no connection to an abstract UNIX socket of, a process outside the
domain (FICC, other programs)."""

READ: Final = READ_FILE | READ_DIR | EXECUTE
DEVICES: Final = READ_FILE | WRITE_FILE | READ_DIR | _IOCTL_DEV
"""Devices are read and written (``/dev/null``, a GPU's ``/dev/nvidia*``)."""


def _handled_fs(abi: int) -> int:
    """Every file-system right the kernel's Landlock version knows: each is denied unless a
    rule allows it."""
    rights = (1 << 13) - 1  # version 1: execute … make_sym
    if abi >= 2:
        rights |= 1 << 13  # refer
    if abi >= 3:
        rights |= _TRUNCATE
    if abi >= 5:
        rights |= _IOCTL_DEV
    return rights


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock version; 0 where it has none (or this machine is not one we know)."""
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        return 0
    version = _libc().syscall(numbers[0], None, 0, _CREATE_RULESET_VERSION)
    return max(int(version), 0)


def confine(
    *, read: Iterable[Path], devices: Iterable[Path] = (), read_files: Iterable[Path] = ()
) -> int:
    """Allow reading (and executing) below ``read``, reading and writing devices below
    ``devices``, and reading the single files ``read_files``; deny every other file access and
    every new TCP bind or connect (ABI 4+), every signal and abstract UNIX socket connection
    out of the domain (ABI 6+). Returns the Landlock version used, 0 when unsupported.

    Files opened before (a log, an inherited socket) stay usable.
    """
    abi = abi_version()
    if abi == 0:
        return 0
    _create, add_rule, restrict = _SYSCALLS[platform.machine()]
    libc = _libc()
    handled_fs = _handled_fs(abi)
    ruleset = _ruleset(abi, handled_fs, _NET_BIND_TCP | _NET_CONNECT_TCP, _SCOPES)
    try:
        rules = [
            *((path, READ) for path in read),
            *((path, DEVICES) for path in devices),
            *((path, READ_FILE) for path in read_files),
        ]
        for path, rights in rules:
            _allow(libc, add_rule, ruleset, path, rights & handled_fs)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(restrict, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi


def restrict_scope() -> int:
    """Only the scope (ABI 6+): no signal and no abstract UNIX socket out of the domain, files
    and TCP untouched (for any engine, whatever it reads). The version used; 0 where the kernel
    has no scopes."""
    abi = abi_version()
    if abi < 6:
        return 0
    libc = _libc()
    ruleset = _ruleset(abi, 0, 0, _SCOPES)
    try:
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_SYSCALLS[platform.machine()][2], ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi


def _ruleset(abi: int, handled_fs: int, handled_net: int, scoped: int) -> int:
    """A ruleset handling what this ABI knows of the rights and scopes asked for."""
    if abi >= 6:
        attributes = struct.pack("=QQQ", handled_fs, handled_net, scoped)
    elif abi >= 4:
        attributes = struct.pack("=QQ", handled_fs, handled_net)
    else:
        attributes = struct.pack("=Q", handled_fs)
    buffer = ctypes.create_string_buffer(attributes, len(attributes))
    ruleset = int(_libc().syscall(_SYSCALLS[platform.machine()][0], buffer, len(attributes), 0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    return ruleset


def _allow(libc: ctypes.CDLL, add_rule: int, ruleset: int, path: Path, rights: int) -> None:
    """One rule: ``rights`` below ``path`` (a missing path is skipped: nothing to allow)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not path.is_dir():
            rights &= _FILE_RIGHTS
        rule = struct.pack("=Qi", rights, fd)
        buffer = ctypes.create_string_buffer(rule, len(rule))
        if libc.syscall(add_rule, ruleset, _RULE_PATH_BENEATH, buffer, 0) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(fd)
