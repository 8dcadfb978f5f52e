"""``python parent_guard.py PARENT_PID COMMAND...``: run COMMAND so that it
is killed when its parent dies.

A Ray actor that is killed (``kill -9``, its node removed) cannot stop its engine, and an engine
left behind would hold its port, its memory and its node's model. The kernel's parent-death
signal (``PR_SET_PDEATHSIG``, kept across ``exec``) ends it instead; the engine keeps this
process's pid, so its identity (pid and start time) is the engine's.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Final

PR_SET_PDEATHSIG: Final = 1


def main(arguments: list[str]) -> int:
    """Arm the parent-death signal, check the parent is still the one named, exec the command."""
    if len(arguments) < 2 or not arguments[0].isdigit():
        print("usage: parent_guard PARENT_PID COMMAND...", file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        print(f"prctl failed: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 1
    # The parent may have died between fork and prctl: then nothing would ever signal us.
    if os.getppid() != int(arguments[0]):
        return 1
    os.execvp(arguments[1], arguments[1:])  # noqa: S606 (the engine's own command line)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
