"""The README's tested shell blocks, run as a reader runs them: in order, in one bash session.

A block is tested when the line before its ```` ```sh ```` fence is ``<!-- tested: SECTION -->``.
The session gets a fresh HOME and TMPDIR, this checkout's ``ficc`` and ``python`` first on
PATH, and no FICC_* or proxy variables, so nothing from the caller's environment helps it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parents[2]
README = REPOSITORY / "README.md"
TESTED_BLOCK = re.compile(r"^<!-- tested: ([a-z-]+) -->\n```sh\n(.*?)^```$", re.S | re.M)
ANY_SHELL_FENCE = re.compile(r"^```sh$", re.M)
SECTION_LINE = "::readme-section {}::"
STOP_SECONDS = 30.0


@dataclass(frozen=True)
class Block:
    section: str
    text: str


def marked_blocks(readme: str) -> list[Block]:
    """The marked blocks, in the README's order, exactly as written."""
    return [Block(match[1], match[2]) for match in TESTED_BLOCK.finditer(readme)]


def unmarked_fences(readme: str, first_heading: str, end_heading: str) -> int:
    """How many ```sh blocks between the two headings carry no ``tested`` marker."""
    start = readme.index(first_heading)
    part = readme[start : readme.index(end_heading, start)]
    return len(ANY_SHELL_FENCE.findall(part)) - len(marked_blocks(part))


def session_script(blocks: list[Block]) -> str:
    """One bash script: strict mode, then the blocks, each section announced on stdout."""
    lines = ["set -euo pipefail"]
    section = None
    for block in blocks:
        if block.section != section:
            section = block.section
            lines.append(f"echo '{SECTION_LINE.format(section)}'")
        lines.append(block.text.rstrip("\n"))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Session:
    status: int
    stdout: str
    stderr: str
    root: Path
    left_running: bool

    def section(self, name: str) -> list[str]:
        """The stdout lines of one section (up to the next section's announcement)."""
        lines = self.stdout.splitlines()
        start = lines.index(SECTION_LINE.format(name)) + 1
        end = next(
            (i for i in range(start, len(lines)) if lines[i].startswith("::readme-section ")),
            len(lines),
        )
        return lines[start:end]

    def report(self) -> str:
        """Everything a failure needs: the status, both streams and the servers' logs."""
        logs = "".join(
            f"\n--- {path}\n{path.read_text(errors='replace')[-4000:]}"
            for path in sorted(self.root.rglob("*.log"))
        )
        return (
            f"exit status {self.status}\n--- stdout\n{self.stdout[-6000:]}"
            f"\n--- stderr\n{self.stderr[-6000:]}{logs}"
        )


def chat_replies(lines: list[str]) -> list[str]:
    """The answers `ficc chat` printed as JSON (its output when stdout is not a terminal)."""
    replies = []
    for line in lines:
        with contextlib.suppress(ValueError):
            shown: Any = json.loads(line)
            if isinstance(shown, dict) and "reply" in shown:
                replies.append(str(shown["reply"]))
    return replies


def reader_environment(root: Path) -> dict[str, str]:
    """A fresh HOME and TMPDIR under ``root``; this checkout's code; nothing else of FICC."""
    home, tmp = root / "home", root / "tmp"
    home.mkdir(parents=True)
    tmp.mkdir(parents=True)
    kept = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("FICC_")
        and not key.lower().endswith("_proxy")
        and key not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    bin_dir = str(Path(sys.executable).parent)
    return {
        **kept,
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "PATH": f"{bin_dir}{os.pathsep}{kept.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": str(REPOSITORY / "src"),
        "VIRTUAL_ENV": str(Path(sys.executable).parent.parent),
    }


def run_session(script: str, root: Path, timeout: float) -> Session:
    """Run ``script`` with bash in its own process group; stop whatever it leaves behind."""
    env = reader_environment(root)
    path = root / "readme-session.sh"
    path.write_text(script)
    process = subprocess.Popen(
        ["bash", str(path)],
        cwd=env["HOME"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(process.pid)
            stdout, stderr = process.communicate()
            stderr += f"\n(the session ran past {timeout:g} s and was stopped)"
        left_running = group_alive(process.pid)
    finally:
        stop_group(process.pid)
    return Session(process.returncode, stdout, stderr, root, left_running)


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def stop_group(group: int) -> None:
    """SIGTERM to the session's process group (servers shut down cleanly), then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    while group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def processes_mentioning(text: str) -> list[int]:
    """Processes whose command line contains ``text`` (engines run in sessions of their own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found
