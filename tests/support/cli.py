"""Helpers of the CLI tests: the real `ficc` entry point, through pipes or a pseudo-terminal."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.cluster import ficc

PTY_DEADLINE_SECONDS = 60.0


def ok(state_dir: Path, *args: str, stdin: str | None = None) -> Any:
    """A command that must succeed with JSON on stdout (stdout is a pipe); its result."""
    result = ficc(*args, state_dir=state_dir, stdin=stdin)
    assert result.returncode == 0, f"{args}: {result.returncode} {result.stderr}"
    return json.loads(result.stdout)


def refused(state_dir: Path, *args: str, status: int, stdin: str | None = None) -> dict[str, Any]:
    """A command that must fail with ``status``: nothing on stdout, the JSON error on stderr."""
    result = ficc(*args, state_dir=state_dir, stdin=stdin)
    assert result.returncode == status, f"{args}: {result.returncode} {result.stderr}"
    assert result.stdout == ""
    envelope: dict[str, Any] = json.loads(result.stderr)
    return dict(envelope["error"])


def with_default_ctrl_c() -> None:
    """Run in a child before it starts: Ctrl-C (SIGINT) does what it does for a person at a
    terminal. A test run started in the background (``make test &``) has SIGINT ignored, and
    children inherit that, so a command under test would never see its Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Terminal:
    """`ficc` on a pseudo-terminal: stdin, stdout and stderr are the terminal, as for a person."""

    def __init__(self, *args: str, state_dir: Path) -> None:
        self.controller, follower = pty.openpty()
        env = {**os.environ, "COLUMNS": "200", "LINES": "50", "TERM": "xterm"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ficc", *args, "--state-dir", str(state_dir)],
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env=env,
            start_new_session=True,
            preexec_fn=with_default_ctrl_c,
        )
        os.close(follower)
        self.output = b""

    def read_until(
        self, found: Callable[[str], bool], seconds: float = PTY_DEADLINE_SECONDS
    ) -> str:
        """Read the terminal until ``found(text)`` holds; the text so far."""
        deadline = time.monotonic() + seconds
        while not found(self.text):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"not seen within {seconds:g} s; the terminal showed:\n{self.text}"
                )
            ready, _, _ = select.select([self.controller], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.controller, 65536)
                except OSError:  # the process closed the terminal
                    chunk = b""
                if not chunk:
                    if not found(self.text):
                        raise AssertionError(f"the terminal closed; it showed:\n{self.text}")
                    break
                self.output += chunk
        return self.text

    @property
    def text(self) -> str:
        return self.output.decode("utf-8", errors="replace")

    def type(self, keys: str) -> None:
        os.write(self.controller, keys.encode())

    def interrupt(self) -> None:
        """Ctrl-C as a terminal sends it: SIGINT to the foreground process group."""
        os.killpg(self.process.pid, signal.SIGINT)

    def wait(self, seconds: float = PTY_DEADLINE_SECONDS) -> int:
        """The exit status, reading the terminal meanwhile so the process never blocks on it."""
        deadline = time.monotonic() + seconds
        while self.process.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([self.controller], [], [], 0.1)
            if ready:
                try:
                    self.output += os.read(self.controller, 65536)
                except OSError:
                    break
        return self.process.wait(timeout=max(deadline - time.monotonic(), 1))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.controller)


def run_in_terminal(state_dir: Path, *args: str) -> tuple[int, str]:
    """Run a command on a pseudo-terminal to its end; its status and what the terminal showed."""
    terminal = Terminal(*args, state_dir=state_dir)
    try:
        status = terminal.wait()
        return status, terminal.text
    finally:
        terminal.close()
